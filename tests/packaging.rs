//! Container and host packaging: docker/entrypoint.sh, scripts/setup-soft-roce.sh and
//! scripts/check-rdma-readiness.sh run against the real binary with fake /dev, /proc and /sys
//! trees; static checks of the Dockerfile, .dockerignore, docker/compose.yaml and
//! the README's Containers section; shellcheck over the scripts.
//!
//! No docker engine is reachable where these tests run, so the image itself is never built
//! here: what can be checked without one is checked instead. Nothing here changes the host
//! (setup-soft-roce.sh only ever runs with --dry-run, on a test tree, or as an unprivileged user).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_rdma-container");
/// Bound for one script run (they take well under a second).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Docker's default capability set (CapEff of a root process in `docker run` without flags):
/// no CAP_IPC_LOCK (bit 14).
const CAPS_DOCKER_DEFAULT: &str = "00000000a80425fb";
/// The same plus CAP_IPC_LOCK, as with `--cap-add=IPC_LOCK`.
const CAPS_WITH_IPC_LOCK: &str = "00000000a80465fb";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

// ------------------------------------------------------------------------------------------
// Running commands with deadlines

/// A finished command: exit code (None when killed by a signal) and its output.
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn pump(mut from: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

/// A started command whose output is collected while it runs; killed on drop.
struct Running {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    what: String,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let what = format!("{cmd:?}");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            pump(child.stdout.take().unwrap(), stdout.clone()),
            pump(child.stderr.take().unwrap(), stderr.clone()),
        ];
        Running {
            child,
            stdout,
            stderr,
            readers,
            what,
        }
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    /// Waits for the exit (killing the command and failing after `timeout`).
    fn wait(mut self, timeout: Duration) -> Out {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not finish within {timeout:?}; stderr so far:\n{}",
                    self.what,
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        for r in self.readers.drain(..) {
            r.join().unwrap();
        }
        Out {
            code: status.code(),
            stdout: String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn run(cmd: Command) -> Out {
    Running::start(cmd).wait(TIMEOUT)
}

fn command(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn on_path(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    })
}

// ------------------------------------------------------------------------------------------
// Fake /dev, /proc and /sys trees

/// A temporary tree with `dev/`, `proc/self/` and `sys/`, by default one where a container is
/// ready for RDMA: mlx5_0 port 1 ACTIVE on ens1f0 with the RoCE v2 GID ::ffff:10.0.0.1,
/// uverbs0 = mlx5_0, /dev/infiniband/{uverbs0,rdma_cm}, CAP_IPC_LOCK and a 64 KiB memlock
/// limit (docker's default), ens1f0 visible (host network).
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn empty() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["dev", "proc/self", "sys/class/net/lo", "sys/module"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let fake = Fake { dir };
        fake.caps(CAPS_DOCKER_DEFAULT, 0);
        fake.memlock(Some(64 * 1024));
        fake
    }

    fn ready() -> Fake {
        let f = Fake::empty();
        f.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
        f.gid(
            "mlx5_0",
            1,
            0,
            "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f",
            "RoCE v2",
            "ens1f0",
        );
        f.gid(
            "mlx5_0",
            1,
            1,
            "0000:0000:0000:0000:0000:ffff:0a00:0001",
            "RoCE v2",
            "ens1f0",
        );
        f.uverbs(0, "mlx5_0");
        f.netdev("ens1f0");
        f.node("uverbs0");
        f.node("rdma_cm");
        for m in ["ib_core", "ib_uverbs", "rdma_ucm", "mlx5_core", "mlx5_ib"] {
            f.module(m);
        }
        f.caps(CAPS_WITH_IPC_LOCK, 0);
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    fn remove(&self, rel: &str) {
        let p = self.path(rel);
        if p.is_dir() {
            fs::remove_dir_all(p).unwrap();
        } else {
            fs::remove_file(p).unwrap();
        }
    }
    fn port(&self, dev: &str, port: u32, state: &str, link_layer: &str) {
        let base = format!("sys/class/infiniband/{dev}/ports/{port}");
        self.write(&format!("{base}/state"), &format!("{state}\n"));
        self.write(&format!("{base}/link_layer"), &format!("{link_layer}\n"));
    }
    fn gid(&self, dev: &str, port: u32, index: u32, gid: &str, kind: &str, ndev: &str) {
        let base = format!("sys/class/infiniband/{dev}/ports/{port}");
        self.write(&format!("{base}/gids/{index}"), &format!("{gid}\n"));
        self.write(
            &format!("{base}/gid_attrs/types/{index}"),
            &format!("{kind}\n"),
        );
        self.write(
            &format!("{base}/gid_attrs/ndevs/{index}"),
            &format!("{ndev}\n"),
        );
    }
    fn uverbs(&self, n: u32, ibdev: &str) {
        self.write(
            &format!("sys/class/infiniband_verbs/uverbs{n}/ibdev"),
            &format!("{ibdev}\n"),
        );
    }
    fn netdev(&self, name: &str) {
        self.write(&format!("sys/class/net/{name}/operstate"), "up\n");
    }
    fn module(&self, name: &str) {
        fs::create_dir_all(self.path(&format!("sys/module/{name}"))).unwrap();
    }
    /// A device node (a regular file is enough for the scripts' checks).
    fn node(&self, name: &str) {
        self.write(&format!("dev/infiniband/{name}"), "");
    }
    fn caps(&self, cap_eff: &str, uid: u32) {
        self.write(
            "proc/self/status",
            &format!(
                "Name:\tsh\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapInh:\t0000000000000000\n\
                 CapPrm:\t{cap_eff}\nCapEff:\t{cap_eff}\nCapBnd:\t{cap_eff}\n"
            ),
        );
    }
    /// The memlock soft and hard limit in bytes; None = unlimited.
    fn memlock(&self, bytes: Option<u64>) {
        let v = bytes.map_or_else(|| "unlimited".to_owned(), |b| b.to_string());
        self.write(
            "proc/self/limits",
            &format!(
                "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max open files            1048576              1048576              files     \n\
                 Max locked memory         {v:<20} {v:<20} bytes     \n"
            ),
        );
    }

    /// Points a command at this tree and at the real binary.
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
    let fake = Fake::ready();
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
    let fake = Fake::ready();
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
    let fake = Fake::ready();
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
    let fake = Fake::ready();
    fake.remove("sys/class/net/ens1f0");
    let out = run(fake.entrypoint(&["--version"]));
    assert_eq!(out.code, Some(0), "{}", out.show());
    assert!(out.stderr.contains("--network host"), "{}", out.show());
    assert!(out.stderr.contains("ens1f0"), "{}", out.show());

    // GID attributes of another namespace cannot be read: no ndevs at all.
    let fake = Fake::ready();
    fake.remove("sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs");
    let out = run(fake.entrypoint(&["--version"]));
    assert!(out.stderr.contains("--network host"), "{}", out.show());

    // No RDMA device at all: said, and that no docker flag fixes it.
    let fake = Fake::ready();
    fake.remove("sys/class/infiniband");
    let out = run(fake.entrypoint(&["--version"]));
    assert!(
        out.stderr.contains("no RDMA devices") && out.stderr.contains("setup-soft-roce.sh"),
        "{}",
        out.show()
    );
}

#[test]
fn entrypoint_strict_mode_refuses_a_session_but_not_doctor() {
    let fake = Fake::ready();
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
    let fake = Fake::ready();
    let mut cmd = fake.entrypoint(&["--version"]);
    cmd.env("RDMA_CONTAINER_STRICT", "1");
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "{}", out.show());
}

#[test]
fn entrypoint_skips_checks_when_told_or_when_rdma_is_not_used() {
    let fake = Fake::empty(); // nothing there at all
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
    let fake = Fake::ready();
    let mut cmd = fake.entrypoint(&["--server", "127.0.0.1:1"]);
    cmd.env("RDMA_CONTAINER_BIN", fake.path("nope"));
    let out = run(cmd);
    assert_eq!(out.code, Some(127), "{}", out.show());
    assert!(out.stderr.contains("RDMA_CONTAINER_BIN"), "{}", out.show());
}

#[test]
fn entrypoint_help_documents_itself_then_shows_the_binary_help() {
    let fake = Fake::empty();
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
    let fake = Fake::ready();
    let addr = format!("127.0.0.1:{}", free_port());
    let proc = Running::start(fake.entrypoint(&["--server", &addr, "--once"]));
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
    kill(pid, Signal::SIGINT).unwrap();
    let out = proc.wait(Duration::from_secs(20));
    assert_eq!(out.code, Some(130), "{}", out.show());
}

/// Every `PREFIX...` variable name the script uses.
fn env_vars(script: &str, prefix: &str) -> Vec<String> {
    let mut vars: Vec<String> = Vec::new();
    for (i, _) in script.match_indices(prefix) {
        let name: String = script[i..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if name.len() > prefix.len() && !vars.contains(&name) {
            vars.push(name);
        }
    }
    assert!(!vars.is_empty(), "no {prefix}* variables found");
    vars
}

// ------------------------------------------------------------------------------------------
// scripts/

#[test]
fn every_script_has_help_and_rejects_unknown_options() {
    for script in [
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
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

#[test]
fn scripts_are_executable_with_a_shebang() {
    for script in [
        "docker/entrypoint.sh",
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "scripts/check-minimal-build.sh",
    ] {
        let meta = fs::metadata(repo().join(script)).unwrap();
        assert!(
            meta.permissions().mode() & 0o111 == 0o111,
            "{script} is not executable (the image runs the entrypoint directly)"
        );
        let text = read(script);
        assert!(text.starts_with("#!"), "{script} has no shebang");
        assert!(
            text.contains("set -eu"),
            "{script} does not stop on errors (set -eu)"
        );
    }
}

#[test]
fn shellcheck_passes_on_every_script() {
    let Some(shellcheck) = on_path("shellcheck") else {
        // CI (CI=true) installs shellcheck in .ci/run, so it must be there.
        assert!(
            std::env::var_os("CI").is_none(),
            "shellcheck is not installed but CI is set: .ci/run should install it"
        );
        println!("skipped: shellcheck is not installed (apt-get install shellcheck)");
        return;
    };
    let mut cmd = Command::new(shellcheck);
    cmd.arg("--external-sources").current_dir(repo()).args([
        "docker/entrypoint.sh",
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "scripts/check-minimal-build.sh",
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "shellcheck:\n{}", out.show());

    // The Dockerfile's RUN lines are /bin/sh scripts too (as hadolint would check them).
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (n, i) in dockerfile()
        .iter()
        .filter(|i| i.keyword == "RUN")
        .enumerate()
    {
        let f = dir.path().join(format!("dockerfile-run-{n}.sh"));
        fs::write(&f, format!("#!/bin/sh\n{}\n", i.args)).unwrap();
        files.push(f);
    }
    assert!(files.len() >= 4, "too few RUN lines found: {}", files.len());
    let mut cmd = Command::new(on_path("shellcheck").unwrap());
    cmd.args(&files);
    let out = run(cmd);
    assert_eq!(
        out.code,
        Some(0),
        "shellcheck of the Dockerfile's RUN lines:\n{}",
        out.show()
    );
}

fn kernel_release() -> String {
    let out = run(command("uname", &["-r"]));
    out.stdout.trim().to_owned()
}

#[test]
fn setup_soft_roce_explains_a_kernel_without_rdma_rxe() {
    let fake = Fake::empty();
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
    let fake = Fake::empty();
    fake.netdev("eth0");
    for m in ["rdma_rxe", "ib_uverbs", "rdma_ucm"] {
        fake.module(m);
    }
    let out = run(fake.setup(&["--dry-run", "eth0"]));
    if on_path("rdma").is_none() {
        assert_eq!(out.code, Some(1), "{}", out.show());
        assert!(out.stderr.contains("iproute2"), "{}", out.show());
        println!("skipped the rest: the rdma tool (iproute2) is not installed");
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
    let fake = Fake::empty();
    fake.netdev("eth0");
    fake.netdev("eth1");
    fake.module("rdma_rxe");
    fake.port("rxe0", 1, "4: ACTIVE", "Ethernet");
    fake.gid(
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
    let fake = Fake::empty();
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
            println!("skipped the non-root part: running as root and setpriv is missing");
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
    let fake = Fake::ready();
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
    let fake = Fake::empty(); // no devices, no nodes, docker's caps, 64 KiB memlock
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
    let fake = Fake::ready();
    fake.port("mlx5_0", 1, "1: DOWN", "Ethernet");
    let out = run(fake.readiness(&[]));
    assert_eq!(out.code, Some(1), "{}", out.show());
    assert!(
        out.stdout.contains("[FAIL] no RDMA port is ACTIVE"),
        "{}",
        out.show()
    );
    let fake = Fake::ready();
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
    let fake = Fake::ready();
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

// ------------------------------------------------------------------------------------------
// Dockerfile, .dockerignore, compose, docs: static checks

/// One Dockerfile instruction: keyword (upper case) and its text with continuations joined.
#[derive(Debug, Clone)]
struct Instr {
    keyword: String,
    args: String,
}

fn dockerfile() -> Vec<Instr> {
    let text = read("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if !current.is_empty() && trimmed.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (kw, args) = current
            .split_once(char::is_whitespace)
            .unwrap_or((&current, ""));
        out.push(Instr {
            keyword: kw.to_ascii_uppercase(),
            args: args.trim().to_owned(),
        });
        current.clear();
    }
    assert!(
        current.is_empty(),
        "the Dockerfile ends inside a continued line"
    );
    out
}

/// `${VAR}` substitution (the only form the Dockerfile's ARGs and FROMs may use).
fn substitute(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let Some(body) = after.strip_prefix('{') else {
            panic!("use ${{VAR}} in ARG/FROM lines: {text}");
        };
        let end = body.find('}').expect("unclosed ${");
        let name = &body[..end];
        let value = vars
            .get(name)
            .unwrap_or_else(|| panic!("{name} is used before it is declared: {text}"));
        out.push_str(value);
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The image references of the FROM lines, with the global ARGs' defaults and `overrides`
/// (like --build-arg).
fn from_images(overrides: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut froms = Vec::new();
    let mut global = true;
    for i in dockerfile() {
        match i.keyword.as_str() {
            "ARG" if global => {
                let (name, default) = i.args.split_once('=').unwrap_or((&i.args, ""));
                let value = match overrides.iter().find(|(k, _)| *k == name) {
                    Some((_, v)) => (*v).to_owned(),
                    None => substitute(default, &vars),
                };
                vars.insert(name.to_owned(), value);
            }
            "FROM" => {
                global = false;
                let mut words = i.args.split_whitespace();
                let image = substitute(words.next().unwrap(), &vars);
                let stage = match (words.next(), words.next()) {
                    (Some(as_), Some(name)) if as_.eq_ignore_ascii_case("as") => {
                        Some(name.to_owned())
                    }
                    _ => None,
                };
                froms.push((image, stage));
            }
            _ => {}
        }
    }
    froms
}

/// The instructions of each stage, by stage name.
fn stages() -> Vec<(String, Vec<Instr>)> {
    let mut stages: Vec<(String, Vec<Instr>)> = Vec::new();
    for i in dockerfile() {
        if i.keyword == "FROM" {
            let name = i.args.split_whitespace().nth(2).unwrap_or("?").to_owned();
            stages.push((name, Vec::new()));
        } else if let Some((_, list)) = stages.last_mut() {
            list.push(i);
        }
    }
    stages
}

#[test]
fn dockerfile_builds_on_doca_devel_and_runs_on_doca_full_rt() {
    let images = |o: &[(&str, &str)]| -> Vec<String> {
        from_images(o).into_iter().map(|(image, _)| image).collect()
    };
    let stages = from_images(&[]);
    assert_eq!(
        stages
            .iter()
            .map(|(_, s)| s.as_deref().unwrap_or("-"))
            .collect::<Vec<_>>(),
        ["build", "runtime"]
    );
    assert_eq!(
        images(&[]),
        [
            "nvcr.io/nvidia/doca/doca:3.1.0-devel-host",
            "nvcr.io/nvidia/doca/doca:3.1.0-full-rt-host"
        ]
    );
    // BlueField (aarch64): the tags without -host.
    assert_eq!(
        images(&[("DOCA_VARIANT", "")]),
        [
            "nvcr.io/nvidia/doca/doca:3.1.0-devel",
            "nvcr.io/nvidia/doca/doca:3.1.0-full-rt"
        ]
    );
    assert_eq!(
        images(&[("DOCA_VARIANT", ""), ("DOCA_RUNTIME_FLAVOR", "base-rt")])[1],
        "nvcr.io/nvidia/doca/doca:3.1.0-base-rt"
    );
    // Other releases, and tags of another pattern.
    assert_eq!(
        images(&[("DOCA_VERSION", "3.0.0")]),
        [
            "nvcr.io/nvidia/doca/doca:3.0.0-devel-host",
            "nvcr.io/nvidia/doca/doca:3.0.0-full-rt-host"
        ]
    );
    assert_eq!(
        images(&[
            ("DOCA_DEVEL_TAG", "3.2.0-devel-ubuntu24.04-host"),
            ("DOCA_RUNTIME_TAG", "3.2.0-full-rt-ubuntu24.04-host")
        ]),
        [
            "nvcr.io/nvidia/doca/doca:3.2.0-devel-ubuntu24.04-host",
            "nvcr.io/nvidia/doca/doca:3.2.0-full-rt-ubuntu24.04-host"
        ]
    );
}

fn runs(instrs: &[Instr]) -> Vec<&str> {
    instrs
        .iter()
        .filter(|i| i.keyword == "RUN")
        .map(|i| i.args.as_str())
        .collect()
}

/// "x.y.z" -> (x, y, z); "x.y" -> (x, y, 0).
fn version(v: &str) -> (u32, u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (
        parts.next().unwrap(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn manifest_value(manifest: &str, key: &str) -> Option<String> {
    manifest.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

fn declares_feature(manifest: &str, feature: &str) -> bool {
    let mut in_features = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_features = t == "[features]";
        } else if in_features && t.split('=').next().map(str::trim) == Some(feature) {
            return true;
        }
    }
    false
}

#[test]
fn dockerfile_build_stage_pins_rust_and_builds_with_require_doca() {
    let stages = stages();
    let (_, build) = &stages[0];
    let runs = runs(build);
    let all = runs.join("\n");

    // A pinned toolchain (x.y.z), not older than any rust-version in the workspace.
    let rust = build
        .iter()
        .find_map(|i| {
            (i.keyword == "ARG")
                .then(|| i.args.strip_prefix("RUST_VERSION="))
                .flatten()
        })
        .expect("ARG RUST_VERSION=x.y.z in the build stage");
    assert!(
        rust.split('.').count() == 3 && rust.split('.').all(|p| p.parse::<u32>().is_ok()),
        "RUST_VERSION must be pinned to x.y.z, got {rust}"
    );
    for manifest in ["Cargo.toml", "doca-sys/Cargo.toml"] {
        if !repo().join(manifest).exists() {
            continue;
        }
        if let Some(msrv) = manifest_value(&read(manifest), "rust-version") {
            assert!(
                version(rust) >= version(&msrv),
                "RUST_VERSION {rust} is older than {manifest}'s rust-version {msrv}"
            );
        }
    }
    assert!(
        all.contains("rustup") && all.contains("--default-toolchain \"${RUST_VERSION}\""),
        "rustup must install ${{RUST_VERSION}}:\n{all}"
    );

    // The build, the conformance tests, both locked and with require-doca.
    let build_cmd = runs
        .iter()
        .find(|r| r.contains("cargo build"))
        .expect("a cargo build step");
    for part in ["--release", "--locked", "--features require-doca"] {
        assert!(
            build_cmd.contains(part),
            "cargo build lacks {part}: {build_cmd}"
        );
    }
    let test_cmd = runs
        .iter()
        .find(|r| r.contains("cargo test"))
        .expect("a cargo test step (doca-sys conformance)");
    for part in ["--locked", "-p doca-sys", "--features require-doca"] {
        assert!(
            test_cmd.contains(part),
            "cargo test lacks {part}: {test_cmd}"
        );
    }
    // What the crates' build scripts need: clang for bindgen over the DOCA headers; no cmake
    // (the verbs transport's verbs-sys needs nothing to build).
    let apt = runs
        .iter()
        .find(|r| r.contains("apt-get install"))
        .expect("an apt-get install step");
    assert!(
        !apt.split_whitespace().any(|w| w == "cmake"),
        "the build stage installs cmake, which no crate needs: {apt}"
    );
    for tool in ["clang", "libclang-dev", "pkg-config"] {
        assert!(
            apt.split_whitespace().any(|w| w == tool),
            "the build stage does not install {tool}: {apt}"
        );
    }
    // The build refuses a binary without the doca transport or built against the simulator.
    for part in ["^transports:.*doca", "none", "(sim"] {
        assert!(
            build_cmd.contains(part),
            "the --version check lacks {part}: {build_cmd}"
        );
    }

    // Both crates declare the feature the image is built with.
    assert!(
        declares_feature(&read("Cargo.toml"), "require-doca"),
        "Cargo.toml has no require-doca feature, which the Dockerfile builds with"
    );
    if repo().join("doca-sys/Cargo.toml").exists() {
        assert!(
            declares_feature(&read("doca-sys/Cargo.toml"), "require-doca"),
            "doca-sys/Cargo.toml has no require-doca feature"
        );
    }
}

#[test]
fn dockerfile_runtime_stage_holds_only_the_binary_and_entrypoint() {
    let stages = stages();
    assert_eq!(stages.len(), 2, "two stages: build and runtime");
    let (name, runtime) = &stages[1];
    assert_eq!(name, "runtime");
    for i in runtime {
        assert!(
            [
                "COPY",
                "RUN",
                "ENV",
                "LABEL",
                "STOPSIGNAL",
                "ENTRYPOINT",
                "CMD",
                "WORKDIR"
            ]
            .contains(&i.keyword.as_str()),
            "unexpected {} in the runtime stage",
            i.keyword
        );
    }
    // Nothing in the runtime image downloads or installs anything.
    for r in runs(runtime) {
        for word in ["curl", "wget", "apt", "pip", "rustup", "cargo", "git "] {
            assert!(!r.contains(word), "runtime stage RUN uses {word}: {r}");
        }
    }
    let copies: Vec<&Instr> = runtime.iter().filter(|i| i.keyword == "COPY").collect();
    assert_eq!(copies.len(), 2, "{copies:?}");
    let bin_dest = copies
        .iter()
        .find_map(|c| {
            c.args
                .strip_prefix("--from=build /src/target/release/rdma-container ")
        })
        .expect("COPY --from=build of the release binary");
    let entry_dest = copies
        .iter()
        .find_map(|c| c.args.strip_prefix("docker/entrypoint.sh "))
        .expect("COPY docker/entrypoint.sh");

    // The entrypoint's default binary path is where the binary is copied to.
    assert!(
        read("docker/entrypoint.sh").contains(&format!("RDMA_CONTAINER_BIN:-{bin_dest}}}")),
        "docker/entrypoint.sh's default RDMA_CONTAINER_BIN is not {bin_dest}"
    );

    let only = |kw: &str| -> String {
        let found: Vec<&Instr> = runtime.iter().filter(|i| i.keyword == kw).collect();
        assert_eq!(found.len(), 1, "one {kw} expected: {found:?}");
        found[0].args.clone()
    };
    assert_eq!(only("ENTRYPOINT"), format!("[\"{entry_dest}\"]"));
    assert_eq!(only("CMD"), r#"["--server", "192.168.200.13:5000"]"#);
    // As PID 1 the binary would ignore SIGTERM; it ends sessions cleanly on SIGINT.
    assert_eq!(only("STOPSIGNAL"), "SIGINT");
    // A runtime image that lacks a library fails the build, not the first docker run.
    assert!(
        runs(runtime)
            .iter()
            .any(|r| r.contains("ldd") && r.contains("not found") && r.contains("exit 1")),
        "the runtime stage must check the binary's libraries with ldd"
    );
    // The verbs transport loads rdma-core with dlopen (invisible to ldd): checked separately.
    if read("Cargo.toml").contains("verbs-sys") {
        assert!(
            runs(runtime)
                .iter()
                .any(|r| r.contains("ldconfig -p") && r.contains("libibverbs.so.1")),
            "the runtime stage must check that libibverbs.so.1 (dlopen'd) is there"
        );
    }
}

/// `.dockerignore` semantics (the subset we use): patterns relative to the context root,
/// `*`/`?` within a segment, `**` for any number of segments, `!` re-includes, the last
/// matching pattern wins, and a path is excluded when it or a parent directory matches.
fn dockerignored(patterns: &[String], path: &str) -> bool {
    fn glob(p: &[&str], s: &[&str]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(&"**"), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
            (Some(pp), Some(ss)) => segment(pp.as_bytes(), ss.as_bytes()) && glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    fn segment(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => segment(&p[1..], s) || (!s.is_empty() && segment(p, &s[1..])),
            (Some(b'?'), Some(_)) => segment(&p[1..], &s[1..]),
            (Some(a), Some(b)) => a == b && segment(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let parts: Vec<&str> = path.split('/').collect();
    let mut excluded = false;
    for pat in patterns {
        let (negate, pat) = match pat.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pat.as_str()),
        };
        let pat: Vec<&str> = pat.trim_matches('/').split('/').collect();
        if (1..=parts.len()).any(|n| glob(&pat, &parts[..n])) {
            excluded = !negate;
        }
    }
    excluded
}

#[test]
fn dockerignore_keeps_build_output_out_and_sources_in() {
    let patterns: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    for out in [
        "target",
        "target/release/rdma-container",
        "doca-sys/target/debug/x",
        ".git/config",
        "build.log",
    ] {
        assert!(dockerignored(&patterns, out), "{out} should be ignored");
    }
    let mut needed = vec![
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "src/main.rs",
        "src/lib.rs",
        "docker/entrypoint.sh",
        "tests/packaging.rs",
    ];
    if repo().join("doca-sys").exists() {
        needed.extend([
            "doca-sys/Cargo.toml",
            "doca-sys/build.rs",
            "doca-sys/src/lib.rs",
        ]);
    }
    for path in needed {
        assert!(
            !dockerignored(&patterns, path),
            "{path} must reach the build"
        );
    }
    // Every file the Dockerfile copies from the context exists and is not ignored.
    for i in dockerfile() {
        if i.keyword == "COPY" && !i.args.starts_with("--from") {
            let src = i.args.split_whitespace().next().unwrap();
            if src != "." {
                assert!(repo().join(src).exists(), "COPY {src}: no such file");
                assert!(
                    !dockerignored(&patterns, src),
                    "COPY {src} is dockerignored"
                );
            }
        }
    }
    // The matcher itself.
    let p = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert!(dockerignored(&p(&["**/target"]), "a/b/target/c"));
    assert!(!dockerignored(&p(&["*.log", "!keep.log"]), "keep.log"));
    assert!(!dockerignored(&p(&["target"]), "src/target"));
}

#[test]
fn compose_file_runs_server_and_client_with_rdma_access() {
    let text = read("docker/compose.yaml");
    for needle in [
        "network_mode: host",
        "- IPC_LOCK",
        "memlock:",
        "soft: -1",
        "hard: -1",
        "/dev/infiniband/rdma_cm:/dev/infiniband/rdma_cm",
        "/dev/infiniband/uverbs0",
        "profiles: [server]",
        "profiles: [client]",
        "\"--server\"",
        "\"--client\"",
        "stop_signal: SIGINT",
    ] {
        assert!(text.contains(needle), "compose.yaml lacks {needle:?}");
    }

    // Its structure, where python3 with PyYAML is available (merge keys resolved).
    let script = r#"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
for name in ("server", "client"):
    s = doc["services"][name]
    assert s["network_mode"] == "host", name
    assert "IPC_LOCK" in s["cap_add"], name
    assert s["ulimits"]["memlock"] == {"soft": -1, "hard": -1}, name
    assert any(d.endswith(":/dev/infiniband/rdma_cm") for d in s["devices"]), name
    assert any("uverbs" in d for d in s["devices"]), name
    assert s["profiles"] == [name], name
    assert s["command"][0] == "--" + name, name
print("compose structure ok")
"#;
    let yaml_ok = on_path("python3").is_some_and(|py| {
        Command::new(py)
            .args(["-c", "import yaml"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if yaml_ok {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", script])
            .arg(repo().join("docker/compose.yaml"));
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{}", out.show());
    } else {
        println!("skipped the structural check: python3 with PyYAML is not installed");
    }

    // And docker-compose's own validation, where a compose implementation is installed (it
    // needs no engine for `config`).
    if let Some(dc) = on_path("docker-compose") {
        for profile in ["server", "client"] {
            let mut cmd = Command::new(&dc);
            cmd.arg("-f").arg(repo().join("docker/compose.yaml")).args([
                "--profile",
                profile,
                "config",
                "-q",
            ]);
            let out = run(cmd);
            assert_eq!(out.code, Some(0), "docker-compose config: {}", out.show());
        }
    } else {
        println!("skipped docker-compose config: docker-compose is not installed");
    }
}

#[test]
fn container_docs_cover_the_flags_build_args_and_env_vars() {
    // The README's "Containers" section, up to the next level-2 heading.
    let readme = read("README.md");
    let start = readme
        .find("\n## Containers\n")
        .expect("README has a Containers section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    let docs = &rest[..end];
    for needle in [
        "--network host --cap-add=IPC_LOCK --device /dev/infiniband/uverbs0 --device /dev/infiniband/rdma_cm",
        "--privileged --network host",
        "/sys/class/infiniband_verbs/",
        "docker buildx build --platform linux/arm64",
        "3.1.0-devel",
        "full-rt",
        "base-rt",
        "pf0hpf",
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "docker/compose.yaml",
        "STOPSIGNAL",
        "tests/packaging.rs",
    ] {
        assert!(docs.contains(needle), "the README's Containers section lacks {needle:?}");
    }
    // Every build argument and every entrypoint variable is documented.
    for i in dockerfile() {
        if i.keyword == "ARG" {
            let name = i.args.split('=').next().unwrap();
            assert!(
                docs.contains(name),
                "the README's Containers section does not document ARG {name}"
            );
        }
    }
    for var in env_vars(&read("docker/entrypoint.sh"), "RDMA_CONTAINER_") {
        assert!(
            docs.contains(&var),
            "the README's Containers section does not document {var}"
        );
    }
}
