//! The documentation tells the truth about the repository: the README's library block is the
//! example it names, nothing points outside the repository for the design, and the README
//! stays a short newcomer's guide with its two set-up commands.

use std::path::Path;
use std::process::Command;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn readme_library_block_is_the_send_recv_example() {
    let readme = read("README.md");
    let start = readme
        .find("```rust,ignore\n")
        .expect("README has the library block");
    let body = &readme[start + "```rust,ignore\n".len()..];
    let block = &body[..body.find("```").expect("the block ends")];
    let example = read("examples/send_recv.rs");
    let code = block
        .split_once("\n\n")
        .map_or(block, |(_imports, rest)| rest)
        .trim();
    assert!(
        example.contains(code),
        "the README's library block differs from examples/send_recv.rs:\n{code}"
    );
    assert!(
        example.contains("use rdma_container::{Config, Listener, RdmaSink, Result};"),
        "the README's imports differ from the example's"
    );
}

#[test]
fn readme_is_short_and_has_the_two_setup_commands() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: keep details in docs/"
    );
    for cmd in ["cargo run --release -- demo", "cargo test --locked"] {
        assert!(readme.contains(cmd), "README lacks {cmd:?}");
    }
    for doc in [
        "docs/design.md",
        "docs/containers.md",
        "docs/doca.md",
        "docs/softroce-vm.md",
        "docs/troubleshooting.md",
        "docs/python.md",
    ] {
        assert!(readme.contains(doc), "README does not link {doc}");
    }
}

#[test]
fn nothing_in_the_repository_points_outside_it_for_the_design() {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        rdma_test_support::skip_or_fail("not a git checkout: cannot list the tracked files");
        return;
    };
    let mut offenders = Vec::new();
    for file in out.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let file = String::from_utf8_lossy(file);
        if file == "tests/docs.rs" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&*file))
        else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if line.contains("../shared") || line.contains("DESIGN.md") {
                offenders.push(format!("{file}:{}: {line}", n + 1));
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// Every exit status the program defines (`const EXIT_*: u8 = N` under src/, plus 0 and 1).
fn exit_statuses_in_the_source() -> std::collections::BTreeMap<u8, String> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut statuses = std::collections::BTreeMap::new();
    statuses.insert(0, "success".to_owned());
    statuses.insert(1, "any other failure".to_owned());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        for line in text.lines() {
            let line = line.trim();
            let Some(rest) = line
                .strip_prefix("pub const EXIT_")
                .or_else(|| line.strip_prefix("const EXIT_"))
            else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": u8 =") else {
                continue;
            };
            let value: u8 = value
                .trim()
                .trim_end_matches(';')
                .parse()
                .expect("an exit status");
            statuses.insert(value, format!("EXIT_{name} in {}", f.display()));
        }
    }
    statuses
}

/// The README's exit statuses are the program's: one table with a row for every status the
/// source defines and none it does not, and `--once` is documented as exiting with its
/// session's status (3 peer lost and 4 rejected happen), not "0 or 1".
#[test]
fn readme_lists_every_exit_status_the_program_has() {
    let readme = read("README.md");
    let statuses = exit_statuses_in_the_source();
    for must in [2u8, 3, 4, 5, 6, 130] {
        assert!(
            statuses.contains_key(&must),
            "exit status {must} not found in src/ (the scan is broken?): {statuses:?}"
        );
    }
    let table: Vec<u8> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| exit status |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cell = l
                .trim_start_matches('|')
                .split('|')
                .next()
                .unwrap_or("")
                .trim();
            cell.parse::<u8>()
                .unwrap_or_else(|_| panic!("not an exit status row: {l}"))
        })
        .collect();
    assert!(!table.is_empty(), "README has no `| exit status |` table");
    let in_source: Vec<u8> = statuses.keys().copied().collect();
    assert_eq!(
        table, in_source,
        "the README's exit-status table differs from the source's statuses: {statuses:?}"
    );

    let once = readme
        .lines()
        .find(|l| l.starts_with("| `--once` |"))
        .expect("the --once row of the flags table");
    assert!(
        !once.contains("else 1"),
        "--once does not exit 1 for every failure (3 and 4 happen): {once}"
    );
    let once_text = readme
        .split("`--server --once` exits with")
        .nth(1)
        .expect("README says what `--server --once` exits with");
    let once_text = &once_text[..once_text.find(')').unwrap_or(once_text.len())];
    for status in ["0", "1", "3", "4", "5", "130"] {
        assert!(
            once_text.contains(status),
            "the statuses of `--server --once` lack {status}: {once_text}"
        );
    }
}

/// The README says, near the top, why this and not perftest, iperf3 or UCX, which C++ program
/// it replaces, and plainly what has and has not run on real hardware.
#[test]
fn readme_says_why_what_it_replaces_and_what_ran_on_hardware() {
    let readme = read("README.md");
    let top: String = readme
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n");
    for word in ["perftest", "iperf3", "UCX"] {
        assert!(
            top.contains(word),
            "the README's opening does not mention {word}"
        );
    }
    for what in [
        "credit flow control",
        "resume",
        "auth",
        "CRC32C",
        "Python module",
    ] {
        assert!(
            top.contains(what),
            "the README's opening does not name {what}"
        );
    }
    // The C++ program, by name and place.
    assert!(
        top.contains("C++20 `rdma-container`") && top.contains("Mike9277/Virtual-mirror"),
        "the README's opening does not name the C++ program it replaces"
    );
    // Hardware: nothing on a real ConnectX/BlueField; RDMA on rxe in a VM; DOCA on a simulator.
    for claim in [
        "Nothing here has run on a real ConnectX or BlueField",
        "no figure",
        "soft-RoCE (rxe) in a QEMU VM",
        "simulator",
        "never been built",
    ] {
        assert!(
            top.contains(claim),
            "the README's opening lacks the hardware statement {claim:?}"
        );
    }
}
