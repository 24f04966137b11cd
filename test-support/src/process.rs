//! A child process with its output captured, bounded waits, killed on drop.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Bound for steps that take well under a second when things work.
pub const SHORT: Duration = Duration::from_secs(10);
/// Bound for whole transfers (10,000 messages take about half a second in a debug build).
pub const LONG: Duration = Duration::from_secs(60);

/// The one setting every test bound scales with: `RDMA_TEST_TIME_SCALE` (a whole number; 1
/// when unset or not one). The soft-RoCE VM sets it for the suites it runs, where emulated
/// CPUs make a whole transfer many times slower than on a host; a slow or loaded host may set
/// it too. Every [`Proc`] wait scales the bound it is given, so tests pass [`SHORT`] and
/// [`LONG`] as they are; a test's own deadline uses [`scaled`] (or [`short`], [`long`]).
pub fn time_scale() -> u32 {
    std::env::var("RDMA_TEST_TIME_SCALE")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// A command for a program built for the target the tests run on: as it is, or through
/// `RDMA_TEST_RUNNER` when set (`qemu-aarch64` when scripts/build-aarch64.sh runs the aarch64
/// tests under emulation, where the kernel cannot exec the program itself).
pub fn target_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    match std::env::var_os("RDMA_TEST_RUNNER").filter(|r| !r.is_empty()) {
        Some(runner) => {
            let mut cmd = Command::new(runner);
            cmd.arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// `bound` times [`time_scale`].
pub fn scaled(bound: Duration) -> Duration {
    bound * time_scale()
}

/// `secs` seconds, scaled, as a command-line value (a handshake timeout a test gives the
/// binary, which must grow with the test's own bounds on a slow machine).
pub fn scaled_secs(secs: u64) -> String {
    (secs * u64::from(time_scale())).to_string()
}

/// [`SHORT`], scaled: for a test's own deadlines (a [`Proc`] wait scales by itself).
pub fn short() -> Duration {
    scaled(SHORT)
}

/// [`LONG`], scaled: for a test's own deadlines (a [`Proc`] wait scales by itself).
pub fn long() -> Duration {
    scaled(LONG)
}

const POLL: Duration = Duration::from_millis(20);

/// Spawns `cmd`, trying again while exec fails with ETXTBSY. A test that writes a script and
/// runs it races every other test thread's fork: a child forked while the script's write
/// descriptor was open holds it until that child execs, and exec of a file open for writing
/// fails. The window is a fork's length, so a few tries a few milliseconds apart close it.
fn spawn_past_text_busy(cmd: &mut Command) -> std::io::Result<Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// A running child whose stdout and stderr are collected by two threads.
/// Dropping it kills the child if it is still running.
pub struct Proc {
    name: String,
    child: Child,
    stdout: Arc<Mutex<Captured>>,
    stderr: Arc<Mutex<Captured>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
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
        let mut child = spawn_past_text_busy(&mut cmd)?;
        let stdout = Arc::new(Mutex::new(Captured::default()));
        let stderr = Arc::new(Mutex::new(Captured::default()));
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
        String::from_utf8_lossy(&self.stdout.lock().unwrap().bytes).into_owned()
    }

    /// Everything the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap().bytes).into_owned()
    }

    /// Complete lines on stdout so far (counted as the output arrives: a poll does not scan
    /// it, nor hold the reader up while a server prints megabytes a second).
    pub fn stdout_lines(&self) -> usize {
        self.stdout.lock().unwrap().lines
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

    /// Waits at most `timeout` ([`scaled`]) for the child to exit; kills it and fails the test
    /// otherwise.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let timeout = scaled(timeout);
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

    /// Waits at most `timeout` until stderr contains `pattern` and says so, or says the
    /// child exited without having printed it; fails the test with the child's output at
    /// the timeout.
    pub fn wait_for_stderr_or_exit(&mut self, pattern: &str, timeout: Duration) -> bool {
        self.wait_or_exit(timeout, &format!("stderr containing {pattern:?}"), |p| {
            p.stderr().contains(pattern)
        })
    }

    fn wait_until(&mut self, timeout: Duration, what: &str, done: impl Fn(&Proc) -> bool) {
        if !self.wait_or_exit(timeout, what, done) {
            panic!(
                "{}: exited waiting for {what}\n{}",
                self.name,
                self.report()
            );
        }
    }

    /// True once `done`, false if the child exits before; panics at the timeout.
    fn wait_or_exit(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Proc) -> bool,
    ) -> bool {
        let timeout = scaled(timeout);
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            if self.try_status().is_some() {
                return done(self);
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: timed out waiting for {what} ({timeout:?})\n{}",
                    self.name,
                    self.report()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits at most `timeout` for the exit (killing the child and failing the test
    /// otherwise) and returns the exit code and the complete output.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let status = self.wait(timeout);
        Finished {
            code: status.code(),
            stdout: self.stdout(),
            stderr: self.stderr(),
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

/// What a child wrote to one pipe so far, and how many complete lines that is.
#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    lines: usize,
}

fn pump(mut from: impl Read + Send + 'static, into: Arc<Mutex<Captured>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let read = &buf[..n];
                    let lines = read.iter().filter(|&&b| b == b'\n').count();
                    let mut captured = into.lock().unwrap();
                    captured.bytes.extend_from_slice(read);
                    captured.lines += lines;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    })
}

/// A finished process: its exit code (None when killed by a signal) and its output.
#[derive(Debug, Clone)]
pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Exit code and both outputs, for failure messages.
    pub fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to the end (stdin closed), at most `timeout`: the test fails (with the output so
/// far) when it cannot start or does not finish in time.
pub fn run_command(cmd: Command, timeout: Duration) -> Finished {
    let name = format!("{cmd:?}");
    Proc::spawn(&name, cmd).finish(timeout)
}

/// The first `tool` on `PATH`, if any.
pub fn on_path(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    })
}
