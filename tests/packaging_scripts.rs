//! Behaviour of the container and host scripts: docker/entrypoint.sh,
//! scripts/setup-soft-roce.sh and scripts/check-rdma-readiness.sh run against the real binary
//! with fake /dev, /proc and /sys trees ([`FakeHost`]). The static checks (Dockerfile,
//! .dockerignore, compose, docs, shellcheck) are in tests/packaging_static.rs.
//!
//! No docker engine is reachable where these tests run, so the image itself is never built
//! here. Nothing here changes the host (setup-soft-roce.sh only ever runs with --dry-run, on a
//! test tree, or as an unprivileged user).

mod common;

use std::fs;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    env_vars, free_port, on_path, read, repo, run_command, skip_or_fail, FakeHost, Finished, Proc,
    BIN, CAPS_DOCKER_DEFAULT, CAPS_WITH_IPC_LOCK,
};
use nix::sys::signal::Signal;

/// Bound for one script run (they take well under a second).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `cmd` to the end (at most [`TIMEOUT`]).
fn run(cmd: Command) -> Finished {
    run_command(cmd, TIMEOUT)
}

fn command(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

// ------------------------------------------------------------------------------------------
// The scripts, pointed at a fake tree

/// The scripts' command lines, run against a [`FakeHost`] (by default one where a container is
/// ready for RDMA, see [`FakeHost::ready`]) and the real binary.
trait Scripts {
    /// Points a command at this tree and at the real binary.
    fn apply(&self, cmd: &mut Command);
    fn entrypoint(&self, args: &[&str]) -> Command;
    fn readiness(&self, args: &[&str]) -> Command;
    fn setup(&self, args: &[&str]) -> Command;
}

impl Scripts for FakeHost {
    fn apply(&self, cmd: &mut Command) {
        cmd.env("RDMA_CONTAINER_BIN", BIN)
            .env("RDMA_CONTAINER_DEV_ROOT", self.path("dev"))
            .env("RDMA_CONTAINER_PROC_ROOT", self.path("proc"))
            .env("RDMA_CONTAINER_SYSFS_ROOT", self.path("sys"))
            .env("RUST_LOG", "info")
            .env_remove("RDMA_CONTAINER_STRICT")
            .env_remove("RDMA_CONTAINER_SKIP_CHECKS");
    }

    fn entrypoint(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(repo().join("docker/entrypoint.sh"));
        cmd.args(args);
        self.apply(&mut cmd);
        cmd
    }

    fn readiness(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(repo().join("scripts/check-rdma-readiness.sh"));
        cmd.args(args)
            .env("DOCA_ROOT", self.path("no-doca-here"))
            .env("LC_ALL", "C");
        self.apply(&mut cmd);
        cmd
    }

    fn setup(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(repo().join("scripts/setup-soft-roce.sh"));
        cmd.args(args)
            .env("RDMA_CONTAINER_SYSFS_ROOT", self.path("sys"))
            .env("RDMA_CONTAINER_MODULES_ROOT", self.path("modules"));
        cmd
    }
}

fn binary_version() -> String {
    let out = run(command(BIN, &["--version"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    out.stdout
}

// ------------------------------------------------------------------------------------------
// docker/entrypoint.sh

#[test]
fn entrypoint_in_a_ready_container_is_silent_and_execs_the_binary() {
    let fake = FakeHost::ready();
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert_eq!(out.stdout, binary_version(), "{}", out.show());
    assert!(out.stdout.starts_with("rdma-container "), "{}", out.show());
    assert_eq!(
        out.stderr,
        "",
        "a ready container gets no warnings:\n{}",
        out.show()
    );
}

#[test]
fn entrypoint_names_the_device_flag_for_a_missing_uverbs_node() {
    let fake = FakeHost::ready();
    fake.remove("dev/infiniband/uverbs0");
    let out = run(fake.entrypoint(&["--version"]));
    // Warnings do not block: the binary still runs.
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert_eq!(out.stdout, binary_version());
    assert!(
        out.stderr.contains("--device /dev/infiniband/uverbs0"),
        "{}",
        out.show()
    );
    assert!(out.stderr.contains("uverbs0 (mlx5_0)"), "{}", out.show());
    assert!(!out.stderr.contains("rdma_cm"), "{}", out.show());

    // The flag names the node the host really has for the device (from infiniband_verbs).
    fake.remove("sys/class/infiniband_verbs/uverbs0");
    fake.uverbs(1, "mlx5_1");
    let out = run(fake.entrypoint(&["--version"]));
    assert!(
        out.stderr.contains("--device /dev/infiniband/uverbs1") && out.stderr.contains("mlx5_1"),
        "{}",
        out.show()
    );

    fake.remove("dev/infiniband/rdma_cm");
    let out = run(fake.entrypoint(&["--version"]));
    assert!(
        out.stderr.contains("--device /dev/infiniband/rdma_cm"),
        "{}",
        out.show()
    );
}

#[test]
fn entrypoint_names_ipc_lock_when_the_capability_is_missing_and_memlock_is_low() {
    let fake = FakeHost::ready();
    fake.caps(CAPS_DOCKER_DEFAULT, 0);
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(
        out.stderr.contains("--cap-add=IPC_LOCK") && out.stderr.contains("--ulimit memlock=-1"),
        "{}",
        out.show()
    );
    assert!(
        out.stderr.contains("memlock limit is 64 KiB"),
        "{}",
        out.show()
    );

    // Either one is enough: the capability with a low limit, or an unlimited limit without it.
    fake.caps(CAPS_WITH_IPC_LOCK, 0);
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.stderr, "", "{}", out.show());
    fake.caps(CAPS_DOCKER_DEFAULT, 0);
    fake.memlock(None);
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.stderr, "", "{}", out.show());
    fake.memlock(Some(64 * 1024 * 1024));
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.stderr, "", "{}", out.show());

    // A non-root user cannot use the capability: the message says to raise the limit.
    fake.memlock(Some(64 * 1024));
    fake.caps(CAPS_DOCKER_DEFAULT, 1000);
    let out = run(fake.entrypoint(&["--version"]));
    assert!(
        out.stderr.contains("uid 1000") && out.stderr.contains("--ulimit memlock=-1"),
        "{}",
        out.show()
    );
}

#[test]
fn entrypoint_names_network_host_when_the_gid_interfaces_are_not_visible() {
    let fake = FakeHost::ready();
    fake.remove("sys/class/net/ens1f0");
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(out.stderr.contains("--network host"), "{}", out.show());
    assert!(out.stderr.contains("ens1f0"), "{}", out.show());

    // GID attributes of another namespace cannot be read: no ndevs at all.
    let fake = FakeHost::ready();
    fake.remove("sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs");
    let out = run(fake.entrypoint(&["--version"]));
    assert!(out.stderr.contains("--network host"), "{}", out.show());

    // No RDMA device at all: said, and that no docker flag fixes it.
    let fake = FakeHost::ready();
    fake.remove("sys/class/infiniband");
    let out = run(fake.entrypoint(&["--version"]));
    assert!(
        out.stderr.contains("no RDMA devices") && out.stderr.contains("setup-soft-roce.sh"),
        "{}",
        out.show()
    );
}

/// The processes the entrypoint starts before it execs the binary, counted with strace.
fn entrypoint_forks(fake: &FakeHost) -> usize {
    let strace = on_path("strace").expect("checked by the caller");
    let trace = fake.path("strace.out");
    let cmd = fake.entrypoint(&[]);
    let program = cmd.get_program().to_owned();
    let mut traced = Command::new(strace);
    traced
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=fork,vfork,clone,clone3,execve",
            "-o",
        ])
        .arg(&trace)
        .arg(program);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => traced.env(k, v),
            None => traced.env_remove(k),
        };
    }
    traced.arg("--version");
    let out = run(traced);
    assert_eq!(out.code, Some(0), "{}", out.show());
    let calls = fs::read_to_string(&trace).unwrap();
    // The trace really covers the run: it ends by exec'ing the binary.
    assert!(
        calls
            .lines()
            .any(|l| l.contains("execve(") && l.contains(BIN)),
        "strace saw no exec of the binary:\n{calls}"
    );
    calls
        .lines()
        .filter(|l| {
            ["fork(", "vfork(", "clone(", "clone3("]
                .iter()
                .any(|c| l.contains(c))
        })
        .count()
}

/// Soft-RoCE has 1,024 GID slots per port: a process per GID file made each container start
/// take 10-30 s under the VM's emulation. The checks must cost the same with 2 GID files as
/// with 2,048 (two devices' worth), where no interface is visible so every file is read.
#[test]
fn entrypoint_reads_a_large_gid_table_without_a_process_per_file() {
    if on_path("strace").is_none() {
        skip_or_fail("strace is not installed (apt-get install strace)");
        return;
    }
    let small = FakeHost::ready();
    small.remove("sys/class/net/ens1f0");
    let large = FakeHost::ready();
    large.remove("sys/class/net/ens1f0");
    for i in 2..2048 {
        large.write(
            &format!("sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/{i}"),
            &format!("ens{}\n", i % 7 + 2),
        );
    }
    let out = run(large.entrypoint(&["--version"]));
    assert!(
        out.stderr.contains("--network host") && out.stderr.contains("ens8"),
        "the large table was read:\n{}",
        out.show()
    );
    let (forks_small, forks_large) = (entrypoint_forks(&small), entrypoint_forks(&large));
    assert_eq!(
        forks_small, forks_large,
        "the entrypoint starts more processes for a larger GID table"
    );
    assert!(forks_large <= 2, "{forks_large} processes started");
}

#[test]
fn entrypoint_strict_mode_refuses_a_session_but_not_doctor() {
    let fake = FakeHost::ready();
    fake.remove("dev/infiniband/uverbs0");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    for args in [
        vec!["--server", addr.as_str(), "--once"],
        vec!["-c", addr.as_str()],
        vec!["--quiet", &format!("--server={addr}")],
    ] {
        let mut cmd = fake.entrypoint(&args);
        cmd.env("RDMA_CONTAINER_STRICT", "1");
        let out = run(cmd);
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.show());
        assert!(
            out.stderr.contains("refusing to start")
                && out.stderr.contains("--device /dev/infiniband/uverbs0"),
            "{}",
            out.show()
        );
        assert!(!out.stderr.contains("listening on"), "{}", out.show());
    }
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing may listen"
    );

    // Not fatal for doctor or --version, even in strict mode.
    let mut cmd = fake.entrypoint(&["doctor"]);
    cmd.env("RDMA_CONTAINER_STRICT", "1");
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(out.stdout.contains("doctor"), "{}", out.show());
    assert!(out.stderr.contains("warning"), "{}", out.show());

    // Strict mode with nothing missing starts normally.
    let fake = FakeHost::ready();
    let mut cmd = fake.entrypoint(&["--version"]);
    cmd.env("RDMA_CONTAINER_STRICT", "1");
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.show());
}

#[test]
fn entrypoint_skips_checks_when_told_or_when_rdma_is_not_used() {
    let fake = FakeHost::empty(); // nothing there at all
    let mut cmd = fake.entrypoint(&["--version"]);
    cmd.env("RDMA_CONTAINER_SKIP_CHECKS", "1");
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert_eq!(out.stderr, "", "{}", out.show());
    assert_eq!(out.stdout, binary_version());

    for args in [
        vec!["--transport", "tcp", "--version"],
        vec!["--transport=tcp", "--version"],
    ] {
        let out = run(fake.entrypoint(&args));
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.show());
        assert_eq!(out.stderr, "", "{args:?}: {}", out.show());
    }

    // The same empty tree without those: warnings (so the cases above really skipped them).
    let out = run(fake.entrypoint(&["--version"]));
    assert!(out.stderr.contains("warning"), "{}", out.show());
}

#[test]
fn entrypoint_without_the_binary_exits_127() {
    let fake = FakeHost::ready();
    let mut cmd = fake.entrypoint(&["--server", "127.0.0.1:1"]);
    cmd.env("RDMA_CONTAINER_BIN", fake.path("nope"));
    let out = run(cmd);
    assert_eq!(out.code, Some(127), "{}", out.show());
    assert!(out.stderr.contains("RDMA_CONTAINER_BIN"), "{}", out.show());
}

#[test]
fn entrypoint_help_documents_itself_then_shows_the_binary_help() {
    let fake = FakeHost::empty();
    let out = run(fake.entrypoint(&["--help"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    let script = read("docker/entrypoint.sh");
    for var in env_vars(&script, "RDMA_CONTAINER_") {
        assert!(out.stdout.contains(&var), "--help does not mention {var}");
    }
    for flag in [
        "--device /dev/infiniband/uverbsN",
        "--device /dev/infiniband/rdma_cm",
        "--cap-add=IPC_LOCK",
        "--network host",
    ] {
        assert!(out.stdout.contains(flag), "--help lacks {flag}");
    }
    // Then the binary's own help, and no checks ran.
    assert!(
        out.stdout.contains("Usage: rdma-container"),
        "{}",
        out.show()
    );
    assert!(!out.stderr.contains("warning"), "{}", out.show());
}

/// Exec, not a child: the entrypoint's pid becomes the binary (so `docker stop` and Ctrl-C reach
/// it), and SIGINT sent to that pid ends the server with 130, its "interrupted" status.
#[test]
fn entrypoint_execs_so_sigint_reaches_the_binary() {
    let fake = FakeHost::ready();
    let addr = format!("127.0.0.1:{}", free_port());
    let proc = Proc::spawn(
        "entrypoint",
        fake.entrypoint(&["--server", &addr, "--once"]),
    );
    let pid = proc.pid();
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let bin = fs::canonicalize(BIN).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let became_binary = fs::read_link(&exe).is_ok_and(|p| p == bin);
        if became_binary && proc.stderr().contains("listening on") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never became a listening {}: exe {:?}, stderr:\n{}",
            bin.display(),
            fs::read_link(&exe),
            proc.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
    proc.signal(Signal::SIGINT);
    let out = proc.finish(Duration::from_secs(20));
    assert_eq!(out.code, Some(130), "{}", out.show());
}

/// A stand-in binary that prints how many arguments it got and what they are.
fn args_printer(fake: &FakeHost) -> PathBuf {
    fake.write(
        "bin/print-args",
        "#!/bin/sh\nprintf 'argc=%s args=%s\\n' \"$#\" \"$*\"\n",
    );
    let bin = fake.path("bin/print-args");
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The image has no CMD: `docker run IMAGE` gives the entrypoint no arguments, and it must run
/// `doctor` (useful anywhere, no address needed), not fail for want of an address nor start a
/// session to a hard-coded one. A pod configured by variables alone (deploy/kubernetes sets
/// RDMA_CONTAINER_SERVER or _CLIENT and no args) gets the binary with no arguments, which
/// reads its session from them; arguments always pass through unchanged.
#[test]
fn entrypoint_without_arguments_runs_doctor_or_the_session_the_variables_describe() {
    let fake = FakeHost::ready();
    let bin = args_printer(&fake);
    let with_env = |args: &[&str], vars: &[(&str, &str)]| -> Finished {
        let mut cmd = fake.entrypoint(args);
        cmd.env("RDMA_CONTAINER_BIN", &bin)
            .env_remove("RDMA_CONTAINER_SERVER")
            .env_remove("RDMA_CONTAINER_CLIENT")
            .env_remove("RDMA_CONTAINER_TRANSPORT");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        run(cmd)
    };
    let out = with_env(&[], &[]);
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert_eq!(out.stdout, "argc=1 args=doctor\n", "{}", out.show());
    // An empty variable is no session.
    let out = with_env(&[], &[("RDMA_CONTAINER_SERVER", "")]);
    assert_eq!(out.stdout, "argc=1 args=doctor\n", "{}", out.show());
    for var in ["RDMA_CONTAINER_SERVER", "RDMA_CONTAINER_CLIENT"] {
        let out = with_env(&[], &[(var, "10.0.0.1:5000")]);
        assert_eq!(out.code, Some(0), "{var}: {}", out.show());
        assert_eq!(out.stdout, "argc=0 args=\n", "{var}: {}", out.show());
    }
    for args in [
        vec!["--server", "0.0.0.0:7471"],
        vec!["--client", "10.0.0.1:7471", "-n", "5"],
        vec!["doctor", "--peer", "10.0.0.2"],
    ] {
        let out = with_env(&args, &[("RDMA_CONTAINER_SERVER", "10.0.0.1:5000")]);
        assert_eq!(
            out.stdout,
            format!("argc={} args={}\n", args.len(), args.join(" ")),
            "{args:?}: {}",
            out.show()
        );
    }

    // A session from the variables is a session: RDMA_CONTAINER_STRICT=1 refuses it like a
    // --server on the command line; RDMA_CONTAINER_TRANSPORT=tcp skips the checks.
    fake.remove("dev/infiniband/uverbs0");
    let out = with_env(
        &[],
        &[
            ("RDMA_CONTAINER_SERVER", "10.0.0.1:5000"),
            ("RDMA_CONTAINER_STRICT", "1"),
        ],
    );
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(out.stderr.contains("refusing to start"), "{}", out.show());
    assert_eq!(out.stdout, "", "{}", out.show());
    let out = with_env(
        &[],
        &[
            ("RDMA_CONTAINER_CLIENT", "10.0.0.1:5000"),
            ("RDMA_CONTAINER_STRICT", "1"),
            ("RDMA_CONTAINER_TRANSPORT", "tcp"),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert_eq!(out.stderr, "", "{}", out.show());
    // doctor by default is never refused, even in strict mode.
    let out = with_env(&[], &[("RDMA_CONTAINER_STRICT", "1")]);
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert_eq!(out.stdout, "argc=1 args=doctor\n", "{}", out.show());

    // With the real binary: no arguments is doctor's report, exit 0.
    let fake = FakeHost::ready();
    let mut cmd = fake.entrypoint(&[]);
    cmd.env_remove("RDMA_CONTAINER_SERVER")
        .env_remove("RDMA_CONTAINER_CLIENT");
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(
        out.stdout.starts_with("rdma-container ") && out.stdout.contains(" doctor "),
        "{}",
        out.show()
    );
    assert!(!out.stderr.contains("listening on"), "{}", out.show());
}

/// scripts/container-test.sh tags the image it builds with Cargo.toml's version and expects
/// `--version` to name it: it reads `version` from the `[package]` of the Cargo.toml next to
/// it (not a dependency's, not a copy in the script). Checked on a copy of the script beside
/// a Cargo.toml of another version.
#[test]
fn container_test_takes_the_image_version_from_cargo_toml() {
    let real = run(command(
        repo().join("scripts/container-test.sh"),
        &["--help"],
    ));
    assert_eq!(real.code, Some(0), "{}", real.show());
    let toml = read("Cargo.toml");
    let version = toml
        .split("[package]")
        .nth(1)
        .and_then(|p| p.lines().find_map(|l| l.trim().strip_prefix("version = ")))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("Cargo.toml's [package] version");
    assert!(
        real.stdout
            .contains(&format!("localhost/rdma-container:{version}-roce-test")),
        "{}",
        real.show()
    );

    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    let script = dir.path().join("scripts/container-test.sh");
    fs::copy(repo().join("scripts/container-test.sh"), &script).unwrap();
    fs::create_dir_all(dir.path().join("scripts/lib")).unwrap();
    fs::copy(
        repo().join("scripts/lib/checks.sh"),
        dir.path().join("scripts/lib/checks.sh"),
    )
    .unwrap();
    fs::write(
        dir.path().join("Cargo.toml"),
        "[workspace]\nmembers = [\".\"]\n\n[package]\nname = \"rdma-container\"\n\
         version = \"9.8.7\"\nedition = \"2021\"\n\n[dependencies]\nlibc = { version = \"0.2\" }\n\
         [workspace.package]\nversion = \"1.1.1\"\n",
    )
    .unwrap();
    let out = run(command(&script, &["--help"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(
        out.stdout
            .contains("localhost/rdma-container:9.8.7-roce-test")
            && out.stdout.contains("rdma-container 9.8.7 (Cargo.toml)"),
        "{}",
        out.show()
    );
    assert!(
        version == "9.8.7" || !out.stdout.contains(&format!("rdma-container:{version}")),
        "a tag copied into the script: {}",
        out.show()
    );
}

// ------------------------------------------------------------------------------------------
// scripts/

#[test]
fn every_script_has_help_and_rejects_unknown_options() {
    for script in [
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "scripts/container-test.sh",
        "scripts/build-aarch64.sh",
        "scripts/event-loop-cost.sh",
    ] {
        let path = repo().join(script);
        let out = run(command(&path, &["--help"]));
        assert_eq!(out.code, Some(0), "{script} --help: {}", out.show());
        assert!(
            out.stdout.starts_with("Usage: "),
            "{script}: {}",
            out.show()
        );
        assert!(
            out.stdout.contains("Exit status"),
            "{script}: {}",
            out.show()
        );
        let out = run(command(&path, &["--no-such-option"]));
        assert_eq!(out.code, Some(2), "{script}: {}", out.show());
        assert!(out.stderr.contains("--help"), "{script}: {}", out.show());
    }
}

/// scripts/bench-sweep.sh parses its options before it needs any tool, and
/// scripts/bench-plot.py draws both panels, a line per tool, from a sweep's JSON lines.
#[test]
fn bench_sweep_options_and_bench_plot_draws_a_sweep() {
    let sweep = repo().join("scripts/bench-sweep.sh");
    let out = run(command(&sweep, &["--help"]));
    assert_eq!(out.code, Some(0), "bench-sweep.sh --help: {}", out.show());
    assert!(out.stdout.contains("--seconds"), "{}", out.show());
    let out = run(command(&sweep, &["--no-such-option"]));
    assert_eq!(out.code, Some(64), "bench-sweep.sh: {}", out.show());
    let out = run(command(&sweep, &["--sizes", "64 lots"]));
    assert_eq!(out.code, Some(64), "bench-sweep.sh: {}", out.show());

    let Some(python) = on_path("python3") else {
        skip_or_fail("python3 is not installed (scripts/bench-plot.py needs it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("sweep.jsonl");
    fs::write(
        &input,
        concat!(
            r#"{"tool":"rdma-container (tcp)","size":64,"gbit_per_second":0.35,"msg_rate_mpps":0.68,"#,
            r#""seconds":3,"date":"2026-11-27T07:05:58Z","machine":"2 CPU(s), AMD EPYC"}"#,
            "\n",
            r#"{"tool":"rdma-container (tcp)","size":1048576,"gbit_per_second":12.5,"msg_rate_mpps":0.0015}"#,
            "\n",
            r#"{"tool":"iperf3","size":64,"gbit_per_second":0.14,"msg_rate_mpps":0.27}"#,
            "\n",
            r#"{"tool":"iperf3","size":1048576,"gbit_per_second":11.4,"msg_rate_mpps":0.0014}"#,
            "\n",
            r#"{"tool":"sockperf","size":64,"gbit_per_second":0.39,"msg_rate_mpps":0.77}"#,
            "\n",
        ),
    )
    .unwrap();
    let output = dir.path().join("sweep.svg");
    let mut cmd = Command::new(python);
    cmd.arg(repo().join("scripts/bench-plot.py"))
        .arg(&input)
        .arg(&output);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "bench-plot.py: {}", out.show());
    let svg = fs::read_to_string(&output).unwrap();
    assert!(
        svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    for text in [
        "Bandwidth",
        "Message rate",
        "Gb/s",
        "million messages/s",
        "message size",
        "rdma-container (tcp)",
        "iperf3",
        "sockperf",
        "2026-11-27T07:05:58Z",
        "AMD EPYC",
    ] {
        assert!(svg.contains(text), "no {text:?} in the plot:\n{svg}");
    }
    // A line in each panel for each tool with two sizes or more (sockperf has one point).
    assert_eq!(svg.matches("<polyline").count(), 4, "{svg}");
}

fn kernel_release() -> String {
    let out = run(command("uname", &["-r"]));
    out.stdout.trim().to_owned()
}

#[test]
fn setup_soft_roce_explains_a_kernel_without_rdma_rxe() {
    let fake = FakeHost::empty();
    fake.netdev("eth0");
    let out = run(fake.setup(&["--dry-run", "eth0"]));
    assert_eq!(out.code, Some(3), "{}", out.show());
    assert!(
        out.stderr.contains("lacks rdma_rxe")
            && out.stderr.contains(&kernel_release())
            && out.stderr.contains("CONFIG_RDMA_RXE")
            && out.stderr.contains("--transport tcp"),
        "{}",
        out.show()
    );
    assert!(!out.stdout.contains("would run"), "{}", out.show());
}

/// On this machine itself (read-only: --dry-run). The kernels of our machines have no
/// rdma_rxe; if this one does, the dry run must get past that check instead.
#[test]
fn setup_soft_roce_dry_run_on_this_machine() {
    let krel = kernel_release();
    let moddir = PathBuf::from(format!("/lib/modules/{krel}"));
    let mentions_rxe =
        |f: &str| fs::read_to_string(moddir.join(f)).is_ok_and(|t| t.contains("rdma_rxe"));
    let has_rxe = Path::new("/sys/module/rdma_rxe").exists()
        || mentions_rxe("modules.builtin")
        || mentions_rxe("modules.dep");
    let out = run({
        let mut c = Command::new(repo().join("scripts/setup-soft-roce.sh"));
        c.arg("--dry-run")
            .env_remove("RDMA_CONTAINER_SYSFS_ROOT")
            .env_remove("RDMA_CONTAINER_MODULES_ROOT");
        c
    });
    if has_rxe {
        println!("this kernel ({krel}) has rdma_rxe: checking the dry run gets past that check");
        assert_ne!(out.code, Some(3), "{}", out.show());
        assert!(matches!(out.code, Some(0 | 1)), "{}", out.show());
    } else {
        assert_eq!(out.code, Some(3), "{}", out.show());
        assert!(
            out.stderr
                .contains(&format!("this kernel ({krel}) lacks rdma_rxe")),
            "{}",
            out.show()
        );
    }
}

#[test]
fn setup_soft_roce_dry_run_plans_the_link_on_a_capable_kernel() {
    let fake = FakeHost::empty();
    fake.netdev("eth0");
    for m in ["rdma_rxe", "ib_uverbs", "rdma_ucm"] {
        fake.module(m);
    }
    let out = run(fake.setup(&["--dry-run", "eth0"]));
    if on_path("rdma").is_none() {
        assert_eq!(out.code, Some(1), "{}", out.show());
        assert!(out.stderr.contains("iproute2"), "{}", out.show());
        skip_or_fail("the rest needs the rdma tool (iproute2), which is not installed");
        return;
    }
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(
        out.stdout
            .contains("would run: rdma link add rxe0 type rxe netdev eth0"),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("nothing was changed"), "{}", out.show());
    assert!(!out.stdout.contains("modprobe"), "{}", out.show());

    let out = run(fake.setup(&["--dry-run", "--name", "rxe_eth0", "eth0"]));
    assert!(
        out.stdout
            .contains("would run: rdma link add rxe_eth0 type rxe netdev eth0"),
        "{}",
        out.show()
    );

    // rdma_rxe built into the kernel (modules.builtin), not loaded: no modprobe for it.
    fake.remove("sys/module/rdma_rxe");
    fake.write(
        &format!("modules/lib/modules/{}/modules.builtin", kernel_release()),
        "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko\n",
    );
    let out = run(fake.setup(&["--dry-run", "eth0"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(out.stdout.contains("built into kernel"), "{}", out.show());
    assert!(!out.stdout.contains("modprobe rdma_rxe"), "{}", out.show());

    // A missing interface and lo are refused.
    let out = run(fake.setup(&["--dry-run", "eth9"]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stderr.contains("no network interface 'eth9'"),
        "{}",
        out.show()
    );
    let out = run(fake.setup(&["--dry-run", "lo"]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(out.stderr.contains("loopback"), "{}", out.show());
}

#[test]
fn setup_soft_roce_is_idempotent() {
    let fake = FakeHost::empty();
    fake.netdev("eth0");
    fake.netdev("eth1");
    fake.module("rdma_rxe");
    fake.sysfs().port("rxe0", 1, "4: ACTIVE", "Ethernet");
    fake.sysfs().gid(
        "rxe0",
        1,
        0,
        "fe80:0000:0000:0000:0000:00ff:fe00:0001",
        "RoCE v2",
        "eth0",
    );
    let out = run(fake.setup(&["--dry-run", "eth0"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(
        out.stdout
            .contains("eth0 already has the RDMA device rxe0: nothing to do"),
        "{}",
        out.show()
    );
    assert!(!out.stdout.contains("would run"), "{}", out.show());

    // rxe0 is taken by eth0: a second device on eth1 needs another name.
    let out = run(fake.setup(&["--dry-run", "eth1"]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(out.stderr.contains("pass --name"), "{}", out.show());
}

#[test]
fn setup_soft_roce_changes_nothing_without_root_or_on_a_test_tree() {
    // A test tree without --dry-run: refused before anything is looked at.
    let fake = FakeHost::empty();
    fake.netdev("eth0");
    fake.module("rdma_rxe");
    let out = run(fake.setup(&["eth0"]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stderr.contains("only --dry-run") || out.stderr.contains("need root"),
        "{}",
        out.show()
    );
    assert!(!out.stdout.contains("running:"), "{}", out.show());

    // Without root, the real thing stops first (before any check).
    let copy = tempfile::tempdir().unwrap();
    fs::set_permissions(copy.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let script = copy.path().join("setup-soft-roce.sh");
    fs::copy(repo().join("scripts/setup-soft-roce.sh"), &script).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let Some(setpriv) = on_path("setpriv") else {
            skip_or_fail("the non-root part: running as root and setpriv is missing");
            return;
        };
        let mut c = Command::new(setpriv);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&script);
        c
    } else {
        Command::new(&script)
    };
    cmd.env_remove("RDMA_CONTAINER_SYSFS_ROOT")
        .env_remove("RDMA_CONTAINER_MODULES_ROOT")
        .arg("eth0");
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(out.stderr.contains("need root"), "{}", out.show());
    assert!(!out.stdout.contains("running:"), "{}", out.show());
}

#[test]
fn readiness_report_on_a_ready_fake_host_uses_the_binary() {
    let fake = FakeHost::ready();
    fake.memlock(None);
    let out = run(fake.readiness(&[]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    for line in [
        "[ OK ] loaded: ib_core ib_uverbs rdma_ucm mlx5_core mlx5_ib",
        "[ OK ] mlx5_0 port 1: 4: ACTIVE, link layer Ethernet",
        "[ OK ] RoCE v2 GID: mlx5_0 port 1 index 1 = 10.0.0.1 (ens1f0)",
        "uverbs0=mlx5_0",
        "[ OK ] present: uverbs0",
        "[ OK ] present: rdma_cm",
        "[ OK ] memlock limit: unlimited",
        "READY: 0 warning(s)",
    ] {
        assert!(
            out.stdout.contains(line),
            "missing {line:?}:\n{}",
            out.show()
        );
    }
    assert!(!out.stdout.contains("[FAIL]"), "{}", out.show());
    // The binary ran: its version line, then doctor over the same (fake) sysfs.
    let version = binary_version();
    let first = version.lines().next().unwrap();
    assert!(out.stdout.contains(first), "{}", out.show());
    assert!(
        out.stdout.contains(&format!(
            "GID table ({}/class/infiniband)",
            fake.path("sys").display()
        )),
        "doctor did not read the fake sysfs:\n{}",
        out.show()
    );

    // With --local-ip, doctor's device choice is checked.
    let out = run(fake.readiness(&["--local-ip", "10.0.0.1"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(
        out.stdout
            .contains("[ OK ] doctor chose a device for --local-ip 10.0.0.1"),
        "{}",
        out.show()
    );
    // 127/8 never gets a RoCE device: the report fails and says why.
    let out = run(fake.readiness(&["--peer", "127.0.0.1"]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stdout
            .contains("[FAIL] doctor finds no RoCE v2 device/GID for --peer 127.0.0.1"),
        "{}",
        out.show()
    );
}

#[test]
fn readiness_report_explains_each_failure_and_exits_non_zero() {
    let fake = FakeHost::empty(); // no devices, no nodes, docker's caps, 64 KiB memlock
    let out = run(fake.readiness(&[]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    let text = &out.stdout;
    for (fail, fix) in [
        ("[FAIL] no RDMA devices", "setup-soft-roce.sh"),
        ("/infiniband/uverbsN device node", "uverbs"),
        ("[FAIL] memlock limit is 64 KiB", "memlock"),
    ] {
        let at = text
            .find(fail)
            .unwrap_or_else(|| panic!("no {fail:?}:\n{}", out.show()));
        let next = text[at..].lines().nth(1).unwrap_or("");
        assert!(
            next.trim_start().starts_with("fix:") && next.contains(fix),
            "{fail:?} is not followed by a fix mentioning {fix:?}:\n{}",
            out.show()
        );
    }
    assert!(text.contains("NOT READY: 3 failure(s)"), "{}", out.show());

    // A port that is not ACTIVE, and only a RoCE v1 GID.
    let fake = FakeHost::ready();
    fake.sysfs().port("mlx5_0", 1, "1: DOWN", "Ethernet");
    let out = run(fake.readiness(&[]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stdout.contains("[FAIL] no RDMA port is ACTIVE"),
        "{}",
        out.show()
    );
    let fake = FakeHost::ready();
    fake.write(
        "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/1",
        "IB/RoCE v1\n",
    );
    let out = run(fake.readiness(&[]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stdout
            .contains("[FAIL] no RoCE v2 GID with an IPv4 address"),
        "{}",
        out.show()
    );
}

#[test]
fn readiness_report_checks_the_binary_and_doca() {
    // A binary that cannot run.
    let fake = FakeHost::ready();
    fake.memlock(None);
    let mut cmd = fake.readiness(&[]);
    cmd.env("RDMA_CONTAINER_BIN", fake.path("missing-binary"));
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stdout.contains("--version does not run") && out.stdout.contains("ldd"),
        "{}",
        out.show()
    );

    // A binary built against DOCA, without the DOCA runtime here.
    let stub = fake.path("stub-rdma-container");
    fs::write(
        &stub,
        "#!/bin/sh\nprintf 'rdma-container 0.1.0\\ntransports: doca,verbs,tcp\\nDOCA: 3.1.0 (real)\\n'\n",
    )
    .unwrap();
    fs::set_permissions(&stub, fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = fake.readiness(&[]);
    cmd.env("RDMA_CONTAINER_BIN", &stub);
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stdout
            .contains("[FAIL] the binary was built against DOCA 3.1.0 (real)"),
        "{}",
        out.show()
    );

    // With a DOCA install (the layout of /opt/mellanox/doca).
    fake.write("doca/applications/VERSION", "3.1.0105\n");
    fake.write("doca/lib/x86_64-linux-gnu/libdoca_rdma.so.3", "");
    let mut cmd = fake.readiness(&[]);
    cmd.env("DOCA_ROOT", fake.path("doca"));
    let out = run(cmd);
    assert!(
        out.stdout
            .contains("[ OK ] DOCA installed, applications/VERSION 3.1.0105")
            && out.stdout.contains("libdoca_rdma.so.3"),
        "{}",
        out.show()
    );
}
