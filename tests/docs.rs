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
