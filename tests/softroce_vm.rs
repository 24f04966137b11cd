//! Static checks of `scripts/softroce-vm.sh` and its guest scripts, cheap enough for every
//! `cargo test`: they parse (`bash -n`), are shellcheck-clean (when shellcheck is installed;
//! otherwise that test prints "skipped: ...", or fails under `RDMA_TEST_STRICT=1`), and the
//! host script answers `--help` and rejects bad options with the usage status 64 before it
//! touches apt, cargo or QEMU.
//!
//! The VM itself (a Debian kernel with soft-RoCE under QEMU) is run by `.ci/run`, not here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdma_test_support::{on_path, run_command, skip_or_fail, Finished};

/// Bound for one run (bash -n, shellcheck, the host script's option checks).
const TIMEOUT: Duration = Duration::from_secs(60);

/// The host script and the files it puts into the guest.
fn scripts() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        root.join("scripts/softroce-vm.sh"),
        root.join("scripts/softroce-vm/guest-init.sh"),
        root.join("scripts/softroce-vm/guest-checks.sh"),
        root.join("scripts/softroce-vm/guest-container.sh"),
    ]
}

fn host_script(args: &[&str]) -> Finished {
    let mut cmd = Command::new("bash");
    cmd.arg(&scripts()[0]).args(args);
    run_command(cmd, TIMEOUT)
}

fn text(out: &Finished) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

#[test]
fn scripts_parse() {
    for script in scripts() {
        let mut cmd = Command::new("bash");
        cmd.arg("-n").arg(&script);
        let out = run_command(cmd, TIMEOUT);
        assert!(
            out.code == Some(0),
            "{} does not parse: {}",
            script.display(),
            text(&out)
        );
    }
}

#[test]
fn scripts_are_shellcheck_clean() {
    if on_path("shellcheck").is_none() {
        skip_or_fail("shellcheck is not installed (apt-get install shellcheck)");
        return;
    }
    // -x follows the guest-init.sh -> guest-checks.sh `source`, relative to the repository root
    let mut cmd = Command::new("shellcheck");
    cmd.arg("-x")
        .args(scripts())
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let out = run_command(cmd, TIMEOUT);
    assert!(out.code == Some(0), "shellcheck:\n{}", text(&out));
}

#[test]
fn help_describes_the_checks_and_options() {
    let out = host_script(&["--help"]);
    assert!(out.code == Some(0), "--help failed: {}", text(&out));
    let help = text(&out);
    for word in [
        "messages",
        "peer-lost",
        "link-flap",
        "paths",
        "doctor",
        "baseline",
        "container",
        "rnr",
        "suite",
        "--oci",
        "--test-binary",
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
        &["--oci"],
        &["--test-binary"],
        &["--checks", "messages,rnr,bogus"],
        // the aarch64 guest runs messages, peer-lost, doctor and container only, under TCG
        &["--arch", "aarch64", "--checks", "messages,link-flap"],
        &["--arch", "aarch64", "--checks", "container,suite"],
        &["--arch", "aarch64", "--accel", "kvm"],
        &["--arch", "riscv64"],
        // another build is timed by the baseline check only
        &["--checks", "messages", "--compare-binary", "/bin/true"],
        &["--arch", "aarch64", "--compare-binary", "/bin/true"],
    ] {
        let out = host_script(args);
        assert_eq!(
            out.code,
            Some(64),
            "{args:?} should be a usage error: {}",
            text(&out)
        );
    }
}
