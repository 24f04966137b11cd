//! The binary under test, for the integration tests: Cargo tells only them its path, so the
//! helpers that start it live here; everything else (process harness, fake sysfs, free ports,
//! skips) is the `rdma-test-support` crate, re-exported.
#![allow(dead_code, unused_imports)] // each test crate uses a different subset

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub use rdma_test_support::*;

pub mod ss;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rdma-container");

/// A command line for the binary under test, with `RUST_LOG=info`.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = target_command(BIN);
    cmd.args(args).env("RUST_LOG", "info");
    cmd
}

/// Starts the binary under test with `args` (`RUST_LOG=info`).
pub fn start(name: &str, args: &[&str]) -> Proc {
    Proc::spawn(name, command(args))
}

/// Runs the binary to completion (at most `timeout`): (exit code, stdout, stderr).
pub fn run(args: &[&str], timeout: Duration) -> (i32, String, String) {
    let mut p = start(&format!("rdma-container {}", args.join(" ")), args);
    let code = p.wait_code(timeout);
    (code, p.stdout(), p.stderr())
}

/// The repository (the main package's directory).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of the repository file `rel`.
pub fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every `PREFIX...` variable name the script uses.
pub fn env_vars(script: &str, prefix: &str) -> Vec<String> {
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
                let sysfs = FakeSysfs::at(&root);
                sysfs.active("mlx5_0", 1);
                let mut all = vec![[10, 0, 0, 1]];
                all.extend_from_slice(addresses);
                for (i, ip) in (1..).zip(&all) {
                    sysfs.gid("mlx5_0", 1, i, &ipv4_gid(*ip), GID_V2, "eth9");
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

/// A library [`rdma_container::Config`] for the transport under test: what
/// [`transport_args`] gives the binary (nothing by default; `--transport verbs`; doca on the
/// simulator's mlx5_0 in a fixture sysfs), applied to `config`.
pub fn test_config(mut config: rdma_container::Config) -> rdma_container::Config {
    use rdma_container::TransportChoice;
    let args = transport_args(&[]);
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            panic!("transport_args gave an odd list: {args:?}")
        };
        match flag.as_str() {
            "--transport" => {
                config.transport = match value.as_str() {
                    "tcp" => TransportChoice::Tcp,
                    "verbs" => TransportChoice::Verbs,
                    "doca" => TransportChoice::Doca,
                    "auto" => TransportChoice::Auto,
                    other => panic!("RDMA_TEST_TRANSPORT={other} is not a transport"),
                }
            }
            "--device" => config.overrides.device = Some(value.clone()),
            "--sysfs-root" => config = config.with_sysfs_root(PathBuf::from(value)),
            other => panic!("transport_args gave {other}, which test_config does not know"),
        }
    }
    // An emulated host (the soft-RoCE VM's guest under TCG) stretches every verbs set-up:
    // RDMA_TEST_HANDSHAKE_FLOOR=S raises the handshake and connect timeouts to at least S s.
    if let Some(floor) = std::env::var("RDMA_TEST_HANDSHAKE_FLOOR")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        let floor = Duration::from_secs(floor);
        config.handshake_timeout = config.handshake_timeout.max(floor);
        config.connect_timeout = config.connect_timeout.max(floor);
    }
    config
}

/// The address library tests listen on: [`test_ip`] (127.0.0.1 unless `RDMA_TEST_ADDR`), any port.
pub fn test_listen_addr() -> std::net::SocketAddr {
    let ip: std::net::IpAddr = test_ip().parse().expect("RDMA_TEST_ADDR is an IP address");
    std::net::SocketAddr::new(ip, 0)
}

/// The transport a session under test must report: `RDMA_TEST_TRANSPORT`, TCP by default
/// (127.0.0.1 owns no RoCE GID, so auto picks TCP).
pub fn expected_transport() -> &'static str {
    match std::env::var("RDMA_TEST_TRANSPORT").as_deref() {
        Ok("verbs") => "verbs",
        Ok("doca") => "doca",
        _ => "tcp",
    }
}

/// Starts a server on the test address and a free port, waits until it listens, and returns it
/// with its port (started again on another port if someone took the first in between).
pub fn server(name: &str, extra: &[&str]) -> (Proc, u16) {
    server_logging(name, extra, "info")
}

/// [`server`] with another `RUST_LOG` level.
pub fn server_logging(name: &str, extra: &[&str], log: &str) -> (Proc, u16) {
    let spawn = |port: u16| Proc::spawn(name, server_command(port, extra, log));
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// Starts a server on `port` as [`server`] does, without another try if the port is taken: for
/// a test that starts a server again where the one before it listened.
pub fn server_on_port(name: &str, port: u16, extra: &[&str]) -> Proc {
    let mut p = Proc::spawn(name, server_command(port, extra, "info"));
    p.wait_for_stderr("listening on", SHORT);
    p
}

/// `--server` on the test address and `port`, with the test transport and `extra`.
fn server_command(port: u16, extra: &[&str], log: &str) -> Command {
    let addr = format!("{}:{port}", test_ip());
    let transport = transport_args(&[]);
    let mut args = vec!["--server", addr.as_str()];
    args.extend(transport.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let mut cmd = command(&args);
    cmd.env("RUST_LOG", log);
    cmd
}

/// Starts a client toward the test address and `port` (`--connect-timeout 10`).
pub fn client(name: &str, port: u16, extra: &[&str]) -> Proc {
    let addr = format!("{}:{port}", test_ip());
    let transport = transport_args(&[]);
    let mut args = vec!["--client", addr.as_str(), "--connect-timeout", "10"];
    args.extend(transport.iter().map(String::as_str));
    args.extend_from_slice(extra);
    start(name, &args)
}

/// Waits for `p` to exit 4 (refused or rejected: busy, interrupted, shutting down) with an
/// ERROR line containing every one of `words`; `expected` says what the test expected it to say.
pub fn assert_fails_saying(p: &mut Proc, words: &[&str], expected: &str) {
    assert_exits_saying(p, 4, words, expected);
}

/// Waits for `p` to exit with `code` with an ERROR line containing every one of `words`.
pub fn assert_exits_saying(p: &mut Proc, code: i32, words: &[&str], expected: &str) {
    assert_eq!(p.wait_code(SHORT), code, "{}", p.report());
    assert!(
        p.stderr()
            .lines()
            .any(|l| l.contains("ERROR") && words.iter().all(|w| l.contains(w))),
        "{expected}\n{}",
        p.report()
    );
}

/// Asserts that `p` has not exited; `what` names it in the failure.
pub fn assert_running(p: &mut Proc, what: &str) {
    assert!(p.try_status().is_none(), "{what} exited\n{}", p.report());
}

/// A Python 3 with the `jsonschema` module, looked for once: Debian's `/usr/bin/python3` first
/// (python3-jsonschema installs there, and another python3 may come first on PATH, such as a
/// pyenv shim without Debian's packages), then `python3` on PATH.
fn python_with_jsonschema() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let system = PathBuf::from("/usr/bin/python3");
            [system.exists().then_some(system), on_path("python3")]
                .into_iter()
                .flatten()
                .find(|python| {
                    Command::new(python)
                        .args(["-c", "import jsonschema"])
                        .output()
                        .is_ok_and(|o| o.status.success())
                })
        })
        .clone()
}

/// The exit status of the validator script when the instance does not match (any other
/// failure, such as a schema that is not a valid Draft 2020-12 schema, is the harness's).
const DOES_NOT_MATCH: i32 = 3;

/// Checks `value` against the JSON schema `schema_file` (relative to the repository, e.g.
/// `docs/session-result.schema.json`) with Python's `jsonschema` (Draft 2020-12; the schema is
/// checked first): `Some(Ok(()))` when it matches, `Some(Err(what is wrong))` when it does not,
/// `None` when no python3 with `jsonschema` is here (said with [`skip_or_fail`]). A broken
/// schema or validator fails the test.
pub fn check_json(schema_file: &str, value: &serde_json::Value) -> Option<Result<(), String>> {
    let Some(python) = python_with_jsonschema() else {
        skip_or_fail(
            "no python3 with the jsonschema module (apt-get install python3-jsonschema): \
             JSON outputs are not checked against their schemas",
        );
        return None;
    };
    let schema = repo().join(schema_file);
    // Every error with where it is; a oneOf's error with its branches' errors (cut short).
    let script = format!(
        "import json, sys, jsonschema\n\
         schema = json.load(open(sys.argv[1]))\n\
         jsonschema.Draft202012Validator.check_schema(schema)\n\
         validator = jsonschema.Draft202012Validator(schema)\n\
         errors = list(validator.iter_errors(json.load(sys.stdin)))\n\
         where = lambda e: '/' + '/'.join(str(p) for p in e.absolute_path)\n\
         for e in errors:\n\
         \x20   print(where(e) + ': ' + e.message[:300])\n\
         \x20   for c in (e.context or [])[:12]:\n\
         \x20       print('  branch ' + str(list(c.schema_path)[:1]) + ' ' + where(c) + ': ' + c.message[:200])\n\
         sys.exit({DOES_NOT_MATCH} if errors else 0)\n"
    );
    let mut child = Command::new(&python)
        .args(["-c", &script])
        .arg(&schema)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(value.to_string().as_bytes())
        .expect("feed the validator");
    let out = child.wait_with_output().expect("the validator runs");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.code() {
        Some(0) => Some(Ok(())),
        Some(DOES_NOT_MATCH) => Some(Err(said)),
        _ => panic!(
            "the validator failed on {schema_file} ({}):\n{said}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Asserts that `value` matches the JSON schema `schema_file` (see [`check_json`]; passes
/// without checking, after [`skip_or_fail`], where no python3 with `jsonschema` is).
#[track_caller]
pub fn validate_json(schema_file: &str, value: &serde_json::Value) {
    if let Some(Err(why)) = check_json(schema_file, value) {
        panic!("this does not match {schema_file}:\n{value}\n{why}");
    }
}

/// Asserts that the validator refuses `value` (a real output made wrong on purpose, `what`
/// says how): the proof that [`validate_json`] can fail at all.
#[track_caller]
pub fn assert_schema_refuses(schema_file: &str, value: &serde_json::Value, what: &str) {
    if let Some(Ok(())) = check_json(schema_file, value) {
        panic!("{schema_file} accepts an output with {what}:\n{value}");
    }
}
