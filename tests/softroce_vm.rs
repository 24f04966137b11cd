//! Static checks of `scripts/softroce-vm.sh` and its guest scripts, cheap enough for every
//! `cargo test`: they parse (`bash -n`), are shellcheck-clean (when shellcheck is installed;
//! otherwise that test prints "skipped: ...", or fails under `RDMA_TEST_STRICT=1`), and the
//! host script answers `--help` and rejects bad options with the usage status 64 before it
//! touches apt, cargo or QEMU.
//!
//! The VM itself (a Debian kernel with soft-RoCE under QEMU) is run by `.ci/run`, not here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rdma_test_support::skip_or_fail;

/// The host script and the files it puts into the guest.
fn scripts() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        root.join("scripts/softroce-vm.sh"),
        root.join("scripts/softroce-vm/guest-init.sh"),
        root.join("scripts/softroce-vm/guest-checks.sh"),
    ]
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn host_script(args: &[&str]) -> Output {
    run(Command::new("bash").arg(&scripts()[0]).args(args))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn scripts_parse() {
    for script in scripts() {
        let out = run(Command::new("bash").arg("-n").arg(&script));
        assert!(
            out.status.success(),
            "{} does not parse: {}",
            script.display(),
            text(&out)
        );
    }
}

#[test]
fn scripts_are_shellcheck_clean() {
    if Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_err()
    {
        skip_or_fail("shellcheck is not installed (apt-get install shellcheck)");
        return;
    }
    // -x follows the guest-init.sh -> guest-checks.sh `source`, relative to the repository root
    let out = run(Command::new("shellcheck")
        .arg("-x")
        .args(scripts())
        .current_dir(env!("CARGO_MANIFEST_DIR")));
    assert!(out.status.success(), "shellcheck:\n{}", text(&out));
}

#[test]
fn help_describes_the_checks_and_options() {
    let out = host_script(&["--help"]);
    assert!(out.status.success(), "--help failed: {}", text(&out));
    let help = text(&out);
    for word in [
        "messages",
        "peer-lost",
        "doctor",
        "baseline",
        "--transport",
        "--binary",
        "--accel",
        "SOFTROCE_VM_CACHE",
        "SOFTROCE-TEST",
    ] {
        assert!(
            help.contains(word),
            "--help does not mention {word}:\n{help}"
        );
    }
}

#[test]
fn bad_options_exit_with_the_usage_status() {
    for args in [
        &["--bogus"][..],
        &["--transport", "rdma"],
        &["--checks", "messages,nope"],
        &["--accel", "hvf"],
        &["--timeout", "soon"],
        &["--binary"],
    ] {
        let out = host_script(args);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?} should be a usage error: {}",
            text(&out)
        );
    }
}
