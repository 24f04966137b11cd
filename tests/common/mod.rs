//! Helpers for the process-level tests: run the `rdma-container` binary with its output
//! captured, wait with deadlines, kill whatever is left on drop, build fake sysfs trees.
//!
//! Every wait here is bounded: a bug makes a test fail with the children's output, never hang.
#![allow(dead_code)] // each test crate uses a different subset

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rdma-container");

/// Bound for steps that take well under a second when things work.
pub const SHORT: Duration = Duration::from_secs(10);
/// Bound for whole transfers (10,000 messages take about half a second in a debug build).
pub const LONG: Duration = Duration::from_secs(60);

const POLL: Duration = Duration::from_millis(20);

/// A command line for the binary under test, with `RUST_LOG=info`.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env("RUST_LOG", "info");
    cmd
}

/// A running child whose stdout and stderr are collected by two threads.
/// Dropping it kills the child if it is still running.
pub struct Proc {
    name: String,
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts the binary under test with `args`.
    pub fn start(name: &str, args: &[&str]) -> Proc {
        Proc::spawn(name, command(args))
    }

    /// Starts any command (stdin closed, stdout and stderr captured).
    pub fn spawn(name: &str, cmd: Command) -> Proc {
        let shown = format!("{cmd:?}");
        Proc::try_spawn(name, cmd).unwrap_or_else(|e| panic!("{name}: cannot start {shown}: {e}"))
    }

    /// Like [`Proc::spawn`], returning the error when the program cannot be started.
    pub fn try_spawn(name: &str, mut cmd: Command) -> std::io::Result<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            pump(child.stdout.take().expect("piped stdout"), stdout.clone()),
            pump(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        Ok(Proc {
            name: name.to_owned(),
            child,
            stdout,
            stderr,
            readers,
            status: None,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap_or_else(|e| panic!("{}: kill({sig}): {e}", self.name));
    }

    /// Everything the child wrote to stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Everything the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Complete lines on stdout so far.
    pub fn stdout_lines(&self) -> usize {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }

    /// The exit status if the child has exited (its output is then complete).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            let status = self
                .child
                .try_wait()
                .unwrap_or_else(|e| panic!("{}: waitpid: {e}", self.name))?;
            // The pipes close when the child exits; let the readers drain them (bounded).
            let deadline = Instant::now() + SHORT;
            while !self.readers.iter().all(JoinHandle::is_finished) && Instant::now() < deadline {
                std::thread::sleep(POLL);
            }
            self.status = Some(status);
        }
        self.status
    }

    /// Waits at most `timeout` for the child to exit; kills it and fails the test otherwise.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return status;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "{} did not exit within {timeout:?}\n{}",
                    self.name,
                    self.report()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits at most `timeout` for the exit code (a death by signal fails the test).
    pub fn wait_code(&mut self, timeout: Duration) -> i32 {
        let status = self.wait(timeout);
        status.code().unwrap_or_else(|| {
            panic!(
                "{} died by a signal: {status}\n{}",
                self.name,
                self.report()
            )
        })
    }

    /// Waits at most `timeout` until stderr contains `pattern`; fails the test with the
    /// child's output otherwise (also as soon as the child exits without having printed it).
    pub fn wait_for_stderr(&mut self, pattern: &str, timeout: Duration) {
        self.wait_until(timeout, &format!("stderr containing {pattern:?}"), |p| {
            p.stderr().contains(pattern)
        });
    }

    /// Waits at most `timeout` until stdout has at least `n` complete lines.
    pub fn wait_for_stdout_lines(&mut self, n: usize, timeout: Duration) {
        self.wait_until(timeout, &format!("{n} lines on stdout"), |p| {
            p.stdout_lines() >= n
        });
    }

    fn wait_until(&mut self, timeout: Duration, what: &str, done: impl Fn(&Proc) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return;
            }
            let exited = self.try_status().is_some();
            if exited && done(self) {
                return;
            }
            if exited || Instant::now() >= deadline {
                let why = if exited { "exited" } else { "timed out" };
                panic!(
                    "{}: {why} waiting for {what} ({timeout:?})\n{}",
                    self.name,
                    self.report()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills the child (if it still runs) and reaps it.
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.child.kill();
        let deadline = Instant::now() + SHORT;
        while self.try_status().is_none() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
    }

    /// Name, status, stderr and the end of stdout, for failure messages.
    pub fn report(&self) -> String {
        let out = self.stdout();
        let lines: Vec<&str> = out.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        let status = self
            .status
            .map_or_else(|| "running".to_owned(), |s| s.to_string());
        format!(
            "--- {} ({status}) stderr:\n{}--- {} stdout: {} line(s), last ones:\n{tail}\n---",
            self.name,
            self.stderr(),
            self.name,
            lines.len()
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn pump(mut from: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => into.lock().unwrap().extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    })
}

/// Runs the binary to completion (at most `timeout`): (exit code, stdout, stderr).
pub fn run(args: &[&str], timeout: Duration) -> (i32, String, String) {
    let mut p = Proc::start(&format!("rdma-container {}", args.join(" ")), args);
    let code = p.wait_code(timeout);
    (code, p.stdout(), p.stderr())
}

/// A loopback port nobody listens on. Ports come from a per-process range below the kernel's
/// ephemeral range (so no client socket can grab them in between), derived from the pid, and
/// each is checked by binding it.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id() % 400 * 30;
    for _ in 0..1000 {
        let port = 20_000 + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        let port = u16::try_from(port).expect("below 32000");
        if TcpListener::bind((test_ip(), port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port found");
}

/// Checks that `text` is exactly the lines "0", "1", ... "n-1"; the error names the first
/// line that differs.
pub fn check_counting(text: &str, n: u64) -> Result<(), String> {
    let mut count = 0u64;
    for (i, line) in text.split_terminator('\n').enumerate() {
        if line != i.to_string() {
            return Err(format!("line {i} is {line:?}, expected \"{i}\""));
        }
        count += 1;
    }
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line is not terminated".to_owned());
    }
    if count != n {
        return Err(format!("{count} line(s), expected {n}"));
    }
    Ok(())
}

/// The number N in the first "`verb` N messages" of `text` (e.g. "sent 10 messages").
pub fn messages_after(text: &str, verb: &str) -> Option<u64> {
    let prefix = format!("{verb} ");
    text.split(prefix.as_str()).skip(1).find_map(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = &rest[digits.len()..];
        (!digits.is_empty() && after.starts_with(" messages"))
            .then(|| digits.parse().ok())
            .flatten()
    })
}

/// A fake `/sys` in a temp dir: `class/infiniband/DEV/ports/N/{state,link_layer,gids/I,
/// gid_attrs/types/I,gid_attrs/ndevs/I}`, as the kernel lays it out.
pub struct FakeSysfs {
    dir: tempfile::TempDir,
}

impl FakeSysfs {
    /// An empty tree (no `class/infiniband` at all).
    pub fn new() -> FakeSysfs {
        FakeSysfs {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The directory to pass as `--sysfs-root`.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    fn port_dir(&self, dev: &str, port: u32) -> PathBuf {
        self.root()
            .join("class/infiniband")
            .join(dev)
            .join("ports")
            .join(port.to_string())
    }

    /// A port with its state (e.g. "4: ACTIVE") and link layer (e.g. "Ethernet").
    pub fn port(&self, dev: &str, port: u32, state: &str, link_layer: &str) {
        let p = self.port_dir(dev, port);
        for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            fs::create_dir_all(p.join(sub)).expect("mkdir");
        }
        fs::write(p.join("state"), format!("{state}\n")).expect("write state");
        fs::write(p.join("link_layer"), format!("{link_layer}\n")).expect("write link_layer");
    }

    /// GID `index` of a port: its value (sysfs notation), type (e.g. "RoCE v2") and netdev.
    pub fn gid(&self, dev: &str, port: u32, index: u32, gid: &str, gid_type: &str, ndev: &str) {
        let p = self.port_dir(dev, port);
        let i = index.to_string();
        fs::write(p.join("gids").join(&i), format!("{gid}\n")).expect("write gid");
        fs::write(p.join("gid_attrs/types").join(&i), format!("{gid_type}\n"))
            .expect("write gid type");
        fs::write(p.join("gid_attrs/ndevs").join(&i), format!("{ndev}\n")).expect("write ndev");
    }
}

/// The sysfs notation of the IPv4-mapped GID `::ffff:a.b.c.d`.
pub fn ipv4_gid(ip: [u8; 4]) -> String {
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    )
}

/// Extra arguments that select the transport under test, from `RDMA_TEST_TRANSPORT`:
/// unset or `auto` adds nothing; `tcp` forces TCP; `doca` selects the doca transport (the
/// binary must be built with `--features doca-sim`) on the simulator's default device `mlx5_0`,
/// described by a fake sysfs that gives mlx5_0 a RoCE v2 GID for each of `addresses` (the
/// loopback tests need none: `--device` allows 127/8). The fake tree lives in the test's
/// target temp dir, one per process and address set.
pub fn transport_args(addresses: &[[u8; 4]]) -> Vec<String> {
    let kind = std::env::var("RDMA_TEST_TRANSPORT").unwrap_or_default();
    match kind.as_str() {
        "" | "auto" => Vec::new(),
        // Real hardware: the real sysfs and DOCA's real devices.
        "doca" if std::env::var_os("RDMA_TEST_ADDR").is_some() => {
            vec!["--transport".to_owned(), "doca".to_owned()]
        }
        "doca" => {
            let tag: Vec<String> = addresses
                .iter()
                .map(|a| format!("{}", u32::from_be_bytes(*a)))
                .collect();
            let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "sysfs-doca-{}-{}",
                std::process::id(),
                tag.join("-")
            ));
            // Written once per process and tree: tests run in parallel, and a reader must never
            // see a half-written file.
            static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
            let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
            if !made.contains(&root) {
                let port = root.join("class/infiniband/mlx5_0/ports/1");
                for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
                    fs::create_dir_all(port.join(sub)).expect("mkdir");
                }
                fs::write(port.join("state"), "4: ACTIVE\n").expect("write state");
                fs::write(port.join("link_layer"), "Ethernet\n").expect("write link_layer");
                let mut all = vec![[10, 0, 0, 1]];
                all.extend_from_slice(addresses);
                for (i, ip) in all.iter().enumerate() {
                    let i = (i + 1).to_string();
                    fs::write(port.join("gids").join(&i), format!("{}\n", ipv4_gid(*ip)))
                        .expect("gid");
                    fs::write(port.join("gid_attrs/types").join(&i), "RoCE v2\n").expect("type");
                    fs::write(port.join("gid_attrs/ndevs").join(&i), "eth9\n").expect("ndev");
                }
                made.push(root.clone());
            }
            let root = root.display().to_string();
            [
                "--transport",
                "doca",
                "--device",
                "mlx5_0",
                "--sysfs-root",
                &root,
            ]
            .map(String::from)
            .to_vec()
        }
        other => vec!["--transport".to_owned(), other.to_owned()],
    }
}

/// The address the process tests use: `RDMA_TEST_ADDR` (a RoCE-network address of this host,
/// for running them over a real RDMA NIC) or 127.0.0.1.
pub fn test_ip() -> String {
    std::env::var("RDMA_TEST_ADDR").unwrap_or_else(|_| "127.0.0.1".to_owned())
}
