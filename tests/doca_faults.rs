//! The doca transport against the DOCA simulator, with faults injected at setup and mid-stream.
//! Every case must end with a clear error on both sides, no hang, and no DOCA object left alive
//! (the simulator writes a leak report per process into `DOCA_SIM_REPORT_DIR`).
//!
//! Built only with `--features doca-sim` (the binary under test then has the doca transport).
#![cfg(feature = "doca-sim")]

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use common::{free_port, ipv4_gid, FakeSysfs, Finished, Proc, BIN, GID_V2};

const DEADLINE: Duration = Duration::from_secs(60);

struct Case {
    dir: tempfile::TempDir,
    port: u16,
}

impl Case {
    fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        // A fixture sysfs with mlx5_0 (the simulator's default device) owning a RoCE v2 GID.
        let sysfs = FakeSysfs::at(dir.path());
        sysfs.active("mlx5_0", 1);
        sysfs.gid("mlx5_0", 1, 1, &ipv4_gid([10, 0, 0, 1]), GID_V2, "eth9");
        fs::create_dir_all(dir.path().join("reports")).unwrap();
        Case {
            dir,
            port: free_port(),
        }
    }

    fn reports(&self) -> PathBuf {
        self.dir.path().join("reports")
    }

    fn command(&self, role: &str, env: &[(&str, &str)], extra: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        let addr = format!("127.0.0.1:{}", self.port);
        cmd.args([
            role,
            &addr,
            "--transport",
            "doca",
            "--device",
            "mlx5_0",
            "--quiet",
        ])
        .arg("--sysfs-root")
        .arg(self.dir.path())
        .args(extra)
        .env("RUST_LOG", "info")
        .env("DOCA_SIM_REPORT_DIR", self.reports())
        .env("DOCA_SIM_DIR", self.dir.path())
        .env_remove("DOCA_SIM_FAIL")
        .env_remove("DOCA_SIM_DROP_AFTER");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the server or the client (`role` = "--server" or "--client").
    fn start(&self, role: &str, env: &[(&str, &str)], extra: &[&str]) -> Proc {
        let name = role.trim_start_matches('-');
        Proc::spawn(name, self.command(role, env, extra))
    }

    /// Server (`--once`) and client, each with its own environment; both outputs.
    fn run(
        &self,
        server_env: &[(&str, &str)],
        client_env: &[(&str, &str)],
        client_args: &[&str],
    ) -> (Finished, Finished) {
        let server = self.start("--server", server_env, &["--once"]);
        let client = self.start("--client", client_env, client_args);
        let client = client.finish(DEADLINE);
        let server = server.finish(DEADLINE);
        (server, client)
    }

    /// Every process that wrote a report left no DOCA object alive; returns how many reported.
    fn assert_no_leaks(&self) -> usize {
        let mut n = 0;
        for entry in fs::read_dir(self.reports()).unwrap() {
            let text = fs::read_to_string(entry.unwrap().path()).unwrap();
            assert!(
                text.contains("\"live\":0"),
                "simulator reports a leak: {text}"
            );
            n += 1;
        }
        n
    }
}

/// N from the server's "received N messages" summary.
fn received_count(text: &str) -> u64 {
    let at = text.find("received ").expect("a summary line") + "received ".len();
    text[at..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count")
}

fn stderr(o: &Finished) -> String {
    o.stderr.clone()
}

#[test]
fn ten_thousand_messages_over_doca_leave_nothing_behind() {
    let case = Case::new();
    let (server, client) = case.run(&[], &[], &[]);
    assert!(client.code == Some(0), "client: {}", stderr(&client));
    assert!(server.code == Some(0), "server: {}", stderr(&server));
    assert!(
        stderr(&server).contains("transport doca"),
        "{}",
        stderr(&server)
    );
    assert!(
        stderr(&server).contains("received 10000 messages"),
        "{}",
        stderr(&server)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

/// A setup fault on the server: the server names it, the client is told, nothing leaks.
fn server_setup_fault(spec: &str, expect: &str) {
    let case = Case::new();
    let (server, client) = case.run(&[("DOCA_SIM_FAIL", spec)], &[], &[]);
    assert_eq!(server.code, Some(1), "server: {}", stderr(&server));
    assert_eq!(client.code, Some(1), "client: {}", stderr(&client));
    for (who, out) in [("server", &server), ("client", &client)] {
        assert!(
            stderr(out).contains(expect),
            "{who} must say {expect:?}:\n{}",
            stderr(out)
        );
    }
    assert!(
        stderr(&client).contains("peer rejected the session"),
        "{}",
        stderr(&client)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

#[test]
fn no_device_at_setup() {
    server_setup_fault(
        "doca_dev_open:1:DOCA_ERROR_NOT_FOUND",
        "DOCA_ERROR_NOT_FOUND",
    );
}

#[test]
fn registration_refused_at_setup_hints_at_ipc_lock() {
    server_setup_fault(
        "doca_mmap_start:1:DOCA_ERROR_NOT_PERMITTED",
        "--cap-add=IPC_LOCK",
    );
}

#[test]
fn task_pool_exhausted_at_setup_is_backpressure() {
    server_setup_fault(
        "doca_rdma_task_receive_allocate_init:1:DOCA_ERROR_NO_MEMORY",
        "backpressure",
    );
}

#[test]
fn connect_failure_at_setup() {
    server_setup_fault(
        "doca_rdma_connect:1:DOCA_ERROR_CONNECTION_ABORTED",
        "DOCA_ERROR_CONNECTION_ABORTED",
    );
}

#[test]
fn bad_state_at_setup_is_reported_as_an_internal_error() {
    server_setup_fault(
        "doca_rdma_set_gid_index:1:DOCA_ERROR_BAD_STATE",
        "internal error",
    );
}

#[test]
fn client_setup_fault_reaches_the_server() {
    let case = Case::new();
    let mut server = case.start("--server", &[], &["--once"]);
    let client = case
        .start(
            "--client",
            &[("DOCA_SIM_FAIL", "doca_ctx_start:1:DOCA_ERROR_DRIVER")],
            &[],
        )
        .finish(DEADLINE);
    assert_eq!(client.code, Some(1));
    assert!(
        stderr(&client).contains("doca_ctx_start failed: DOCA_ERROR_DRIVER"),
        "{}",
        stderr(&client)
    );
    // The server is still waiting for a real client (--once counts sessions, not attempts).
    sleep(Duration::from_millis(300));
    assert!(
        server.try_status().is_none(),
        "the server must keep serving"
    );
    server.kill();
    assert!(
        server
            .stderr()
            .contains("the client could not set up its data path"),
        "{}",
        server.stderr()
    );
    assert_eq!(case.assert_no_leaks(), 1, "the client's report");
}

#[test]
fn receive_submit_failure_mid_stream() {
    let case = Case::new();
    let (server, client) = case.run(
        &[("DOCA_SIM_FAIL", "doca_task_submit:30:DOCA_ERROR_NO_MEMORY")],
        &[],
        &[],
    );
    assert_eq!(server.code, Some(1));
    assert_eq!(client.code, Some(1));
    assert!(
        stderr(&server).contains("doca_task_submit(receive) failed")
            || stderr(&server).contains("doca_task_submit(credit) failed"),
        "{}",
        stderr(&server)
    );
    assert!(
        stderr(&client).contains("the receiver failed"),
        "{}",
        stderr(&client)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

#[test]
fn send_completion_error_mid_stream() {
    let case = Case::new();
    let (server, client) = case.run(
        &[],
        &[(
            "DOCA_SIM_FAIL",
            "doca_rdma_task_send_completion:50:DOCA_ERROR_IO_FAILED",
        )],
        &[],
    );
    assert_eq!(client.code, Some(1));
    assert_eq!(server.code, Some(1));
    assert!(
        stderr(&client).contains("DOCA_ERROR_IO_FAILED"),
        "{}",
        stderr(&client)
    );
    assert!(
        stderr(&server).contains("the sender failed"),
        "{}",
        stderr(&server)
    );
    // The 50th send completion failed (its message may still have landed); with 2 credits,
    // up to two more can be in flight when the abort overtakes them.
    let received = received_count(&stderr(&server));
    assert!(
        (47..=52).contains(&received),
        "received {received}:\n{}",
        stderr(&server)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

#[test]
fn connection_dropped_mid_stream() {
    let case = Case::new();
    let drop = [("DOCA_SIM_DROP_AFTER", "100")];
    let (server, client) = case.run(&drop, &drop, &[]);
    assert_eq!(client.code, Some(1), "client: {}", stderr(&client));
    assert_eq!(server.code, Some(1), "server: {}", stderr(&server));
    let both = stderr(&client) + &stderr(&server);
    assert!(
        both.contains("peer lost") || both.contains("failed"),
        "{both}"
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

#[test]
fn oversize_message_is_refused_before_sending() {
    let case = Case::new();
    let server = case.start("--server", &[], &["--once", "--max-msg-size", "100"]);
    let client = case.start("--client", &[], &["--size", "200", "--count", "3"]);
    let client = client.finish(DEADLINE);
    let server = server.finish(DEADLINE);
    assert_eq!(client.code, Some(1));
    assert!(
        stderr(&client).contains("nothing was sent"),
        "{}",
        stderr(&client)
    );
    assert!(
        stderr(&server).contains("received 0 messages"),
        "{}",
        stderr(&server)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}
