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
/// The client's options for a fault case that checks how a break ends a session: resumption
/// off (a break would otherwise be resumed; the resume cases are below).
const NO_RESUME: &[&str] = &["--resume-timeout", "0"];

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
        self.command_over("doca", role, env, extra)
    }

    fn command_over(
        &self,
        transport: &str,
        role: &str,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Command {
        let mut cmd = self.printing_command(transport, role, env, extra);
        cmd.arg("--quiet");
        cmd
    }

    /// As [`Case::command_over`], but a server prints every payload on stdout.
    fn printing_command(
        &self,
        transport: &str,
        role: &str,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Command {
        let mut cmd = Command::new(BIN);
        let addr = format!("127.0.0.1:{}", self.port);
        cmd.args([role, &addr, "--transport", transport, "--device", "mlx5_0"])
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

    /// Every process that wrote a report left no DOCA object alive and never cleared a
    /// notification that was not raised; returns how many reported.
    fn assert_no_leaks(&self) -> usize {
        let mut n = 0;
        for entry in fs::read_dir(self.reports()).unwrap() {
            let text = fs::read_to_string(entry.unwrap().path()).unwrap();
            assert!(
                text.contains("\"live\":0"),
                "simulator reports a leak: {text}"
            );
            assert!(
                text.contains("\"spurious_clears\":0"),
                "doca_pe_clear_notification without a raised notification: {text}"
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
    assert_eq!(client.code, Some(4), "client: {}", stderr(&client));
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

/// Backpressure that passes: submits refused now and then with NO_MEMORY, FULL or AGAIN (on
/// both ends) are progressed and retried, and the session delivers everything.
#[test]
fn submit_backpressure_is_progressed_and_retried() {
    let case = Case::new();
    let (server, client) = case.run(
        &[(
            "DOCA_SIM_FAIL",
            "doca_task_submit:30:DOCA_ERROR_NO_MEMORY,doca_task_submit:31:DOCA_ERROR_FULL",
        )],
        &[(
            "DOCA_SIM_FAIL",
            "doca_task_submit:40:DOCA_ERROR_AGAIN,doca_task_submit:41:DOCA_ERROR_FULL",
        )],
        &["--count", "300"],
    );
    assert_eq!(server.code, Some(0), "server: {}", stderr(&server));
    assert_eq!(client.code, Some(0), "client: {}", stderr(&client));
    assert_eq!(received_count(&stderr(&server)), 300);
    assert_eq!(case.assert_no_leaks(), 2);
}

/// Backpressure that does not pass: every submit from the 30th on is refused with NO_MEMORY;
/// after a bounded time of progress and retries the receiver fails, saying so.
#[test]
fn receive_submit_backpressure_that_persists_fails_with_a_hint() {
    let case = Case::new();
    let (server, client) = case.run(
        &[("DOCA_SIM_FAIL", "doca_task_submit:30+:DOCA_ERROR_NO_MEMORY")],
        &[],
        &[],
    );
    assert_eq!(server.code, Some(1));
    assert_eq!(client.code, Some(4));
    assert!(
        (stderr(&server).contains("doca_task_submit(receive) failed")
            || stderr(&server).contains("doca_task_submit(credit) failed"))
            && stderr(&server).contains("still refused after")
            && stderr(&server).contains("lower --credits"),
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
    let (server, client) = case.run(&[], &[FAIL_50TH_SEND_COMPLETION], NO_RESUME);
    assert_eq!(client.code, Some(1));
    assert_eq!(server.code, Some(4));
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
    let (server, client) = case.run(&drop, &drop, NO_RESUME);
    assert_eq!(client.code, Some(3), "client: {}", stderr(&client));
    assert_eq!(server.code, Some(3), "server: {}", stderr(&server));
    // The simulator drops the connection after 100 messages in both directions together
    // (about 50 data, 50 credits, in the order the two processes ran): both ends name the loss
    // with a count there, and the server's loss line and summary agree.
    for (who, out) in [("server", &server), ("client", &client)] {
        let line = stderr(out)
            .lines()
            .find(|l| l.contains("ERROR") && l.contains("peer lost"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{who}: no peer-lost error\n{}", stderr(out)));
        let n = common::lost_after(&line).unwrap_or_else(|| panic!("{who}: no count in {line}"));
        assert!((48..=52).contains(&n), "{who}: {line}");
        if who == "server" {
            assert_eq!(received_count(&stderr(out)), n, "{}", stderr(out));
        }
    }
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

/// Without the PROGRESS_ALL event mode the transport clears the notification only after it
/// was raised (the report counts any other clear), and the stream still completes.
#[test]
fn selective_event_mode_when_progress_all_is_refused() {
    let case = Case::new();
    let fail = [(
        "DOCA_SIM_FAIL",
        "doca_pe_set_event_mode:1:DOCA_ERROR_NOT_SUPPORTED",
    )];
    let (server, client) = case.run(&fail, &fail, &[]);
    assert!(client.code == Some(0), "client: {}", stderr(&client));
    assert!(server.code == Some(0), "server: {}", stderr(&server));
    assert!(
        stderr(&server).contains("received 10000 messages"),
        "{}",
        stderr(&server)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

/// The device's message size cap (doca_rdma_cap_get_max_message_size) lowers what the
/// receiver advertises: the negotiated maximum is the smaller of both ends and the cap, and
/// a bigger message is refused before anything is sent.
#[test]
fn device_message_size_cap_lowers_the_negotiated_maximum() {
    let case = Case::new();
    let cap = [("DOCA_SIM_MAX_MSG_SIZE", "100")];
    let server = Proc::spawn(
        "server",
        case.command("--server", &cap, &["--once", "--max-msg-size", "4096"]),
    );
    let client = Proc::spawn(
        "client",
        case.command("--client", &[], &["--size", "200", "--count", "3"]),
    );
    let client = client.finish(DEADLINE);
    let server = server.finish(DEADLINE);
    assert_eq!(client.code, Some(1), "client: {}", stderr(&client));
    assert!(
        stderr(&server).contains("max message 100 bytes"),
        "{}",
        stderr(&server)
    );
    assert!(
        stderr(&server).contains("carries messages of at most 100 bytes"),
        "{}",
        stderr(&server)
    );
    assert!(
        stderr(&client).contains("nothing was sent"),
        "{}",
        stderr(&client)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

/// `auto` with a named device (`--device mlx5_0`, as every case here names the simulator's
/// device) when doca cannot start and verbs has no device either: the device asks for RDMA
/// (issue 35), so the client ends with status 5 in one line that names the device, the failed
/// call and why verbs could not take over, and no session runs over TCP.
#[test]
fn auto_with_a_named_device_refuses_tcp_when_doca_cannot_start() {
    let case = Case::new();
    let fail = [("DOCA_SIM_FAIL", "doca_ctx_start:1:DOCA_ERROR_DRIVER")];
    let mut server = Proc::spawn(
        "server",
        case.command_over("auto", "--server", &fail, &["--once"]),
    );
    let client = Proc::spawn(
        "client",
        case.command_over("auto", "--client", &fail, &["--count", "100"]),
    );
    let client = client.finish(DEADLINE);
    assert_eq!(client.code, Some(5), "client: {}", stderr(&client));
    let text = stderr(&client);
    let line = text
        .lines()
        .find(|l| l.contains(" ERROR "))
        .unwrap_or_else(|| panic!("no error line:\n{text}"));
    assert!(
        line.contains("RDMA is required (--ib-dev mlx5_0)")
            && line.contains("doca_ctx_start failed: DOCA_ERROR_DRIVER")
            && line.contains("the verbs transport cannot start"),
        "one line names what asked for RDMA, the failed call and why verbs could not: {line}"
    );
    assert!(!text.contains("session established"), "{text}");
    server.kill();
    assert!(
        !server.stderr().contains("session established"),
        "{}",
        server.report()
    );
}

/// `doca_ctx_stop` answering AGAIN or IN_USE means "progress and try again" (what NVIDIA's own
/// code does): teardown retries, the context still drains, nothing leaks.
#[test]
fn stop_answering_again_or_in_use_is_retried() {
    let case = Case::new();
    let (server, client) = case.run(
        &[("DOCA_SIM_FAIL", "doca_ctx_stop:1:DOCA_ERROR_AGAIN")],
        &[("DOCA_SIM_FAIL", "doca_ctx_stop:1:DOCA_ERROR_IN_USE")],
        &["--count", "100"],
    );
    assert!(client.code == Some(0), "client: {}", stderr(&client));
    assert!(server.code == Some(0), "server: {}", stderr(&server));
    for (who, out) in [("server", &server), ("client", &client)] {
        assert!(
            stderr(out).contains("injecting") && !stderr(out).contains("leaking it"),
            "{who}: {}",
            stderr(out)
        );
    }
    assert_eq!(case.assert_no_leaks(), 2);
}

/// DOCA 3.3's DOCA_ERROR_DEVICE_FATAL_ERROR (31) in a completion: named, with what to do.
#[test]
fn device_fatal_error_mid_stream_is_named() {
    let case = Case::new();
    let (server, client) = case.run(
        &[],
        &[(
            "DOCA_SIM_FAIL",
            "doca_rdma_task_send_completion:20:DOCA_ERROR_DEVICE_FATAL_ERROR",
        )],
        NO_RESUME,
    );
    assert_eq!(client.code, Some(1), "client: {}", stderr(&client));
    assert_eq!(server.code, Some(4), "server: {}", stderr(&server));
    assert!(
        stderr(&client).contains("DOCA_ERROR_DEVICE_FATAL_ERROR")
            && stderr(&client).contains("firmware"),
        "{}",
        stderr(&client)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

#[test]
fn missing_task_capability_names_the_device() {
    server_setup_fault(
        "doca_rdma_cap_task_send_is_supported:1:DOCA_ERROR_NOT_SUPPORTED",
        "device mlx5_0 cannot run RDMA send tasks",
    );
}

/// A receive completion that fails mid-stream (the 50th): both ends fail, the sender names the
/// DOCA error, the receiver's count is what arrived before it, nothing leaks. The failed receive
/// fails the matching send too (as on a NIC), so either end may be the first to see its own
/// failure (status 1) and reject the other (status 4).
#[test]
fn receive_completion_error_mid_stream_ends_both_ends_with_the_count() {
    let case = Case::new();
    let (server, client) = case.run(
        &[(
            "DOCA_SIM_FAIL",
            "doca_rdma_task_receive_completion:50:DOCA_ERROR_IO_FAILED",
        )],
        &[],
        &["--count", "300", "--resume-timeout", "0"],
    );
    let codes = (server.code, client.code);
    assert!(
        codes == (Some(1), Some(4)) || codes == (Some(4), Some(1)),
        "one end fails, the other is rejected: {codes:?}\nserver: {}\nclient: {}",
        stderr(&server),
        stderr(&client)
    );
    assert!(
        stderr(&client).contains("DOCA_ERROR_IO_FAILED"),
        "{}",
        stderr(&client)
    );
    // The 50th receive failed: 49 were delivered at most (one may be in the window still).
    let received = received_count(&stderr(&server));
    assert!(
        (47..=49).contains(&received),
        "received {received}\n{}",
        stderr(&server)
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

/// A fault on the client (the sender) mid-stream: its 40th submit fails; it says which call,
/// the server says the sender failed, and the server's count is exact.
#[test]
fn send_submit_failure_on_the_client_mid_stream() {
    let case = Case::new();
    let (server, client) = case.run(
        &[],
        &[("DOCA_SIM_FAIL", "doca_task_submit:40:DOCA_ERROR_DRIVER")],
        &["--count", "300", "--resume-timeout", "0"],
    );
    assert_eq!(client.code, Some(1), "client: {}", stderr(&client));
    assert_eq!(server.code, Some(4), "server: {}", stderr(&server));
    assert!(
        stderr(&client).contains("doca_task_submit")
            && stderr(&client).contains("DOCA_ERROR_DRIVER"),
        "{}",
        stderr(&client)
    );
    assert!(
        stderr(&server).contains("the sender failed"),
        "{}",
        stderr(&server)
    );
    let received = received_count(&stderr(&server));
    assert!(received < 40, "received {received}\n{}", stderr(&server));
    assert_eq!(case.assert_no_leaks(), 2);
}

/// Arming the notification fails mid-stream on the receiver: that is the session's error (a
/// wait could otherwise sleep through a completion), named, on both ends.
#[test]
fn notification_failure_mid_stream_is_the_sessions_error() {
    let case = Case::new();
    let (server, client) = case.run(
        &[(
            "DOCA_SIM_FAIL",
            "doca_pe_request_notification:20:DOCA_ERROR_DRIVER",
        )],
        &[],
        &["--count", "300"],
    );
    assert_eq!(server.code, Some(1), "server: {}", stderr(&server));
    assert_eq!(client.code, Some(4), "client: {}", stderr(&client));
    assert!(
        stderr(&server).contains("doca_pe_request_notification")
            && stderr(&server).contains("DOCA_ERROR_DRIVER"),
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

/// The one leak report that is not clean (the other process's must be): its text.
fn the_one_leak(case: &Case) -> String {
    let reports: Vec<String> = fs::read_dir(case.reports())
        .unwrap()
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(reports.len(), 2, "{reports:?}");
    let leaked: Vec<&String> = reports
        .iter()
        .filter(|r| !r.contains("\"live\":0"))
        .collect();
    assert_eq!(leaked.len(), 1, "exactly one process leaks: {reports:?}");
    leaked[0].clone()
}

/// `doca_ctx_stop` fails every time at teardown (a hard stop failure): the data was delivered,
/// so the session still succeeds, the client says it leaks the context on purpose (its memory
/// may still be the NIC's), and the leak report holds exactly that context's objects.
#[test]
fn hard_stop_failure_leaks_the_context_on_purpose_and_says_so() {
    let case = Case::new();
    let (server, client) = case.run(
        &[],
        &[("DOCA_SIM_FAIL", "doca_ctx_stop:1+:DOCA_ERROR_DRIVER")],
        &["--count", "300"],
    );
    assert_eq!(server.code, Some(0), "server: {}", stderr(&server));
    assert_eq!(client.code, Some(0), "client: {}", stderr(&client));
    assert_eq!(received_count(&stderr(&server)), 300);
    assert!(
        stderr(&client).contains("did not reach IDLE") && stderr(&client).contains("leaking it"),
        "{}",
        stderr(&client)
    );
    assert!(stderr(&client).contains("LEAK"), "{}", stderr(&client));
    // The registered slot memory is leaked with the registration, never given back.
    assert!(
        stderr(&client).contains("bytes of slot memory: the device may still write into it"),
        "{}",
        stderr(&client)
    );
    let leaked = the_one_leak(&case);
    for object in ["\"dev\":1", "\"pe\":1", "\"rdma\":1", "\"mmap\":1"] {
        assert!(leaked.contains(object), "{leaked}");
    }
}

/// A failed destroy at teardown is logged with the call and the code, the rest of the
/// teardown goes on as far as DOCA allows, the session's outcome is unchanged, and the leak
/// report accounts for exactly what could not be destroyed.
#[test]
fn destroy_failure_at_teardown_is_logged_and_accounted() {
    let case = Case::new();
    let (server, client) = case.run(
        &[("DOCA_SIM_FAIL", "doca_rdma_destroy:1:DOCA_ERROR_DRIVER")],
        &[],
        &["--count", "300"],
    );
    assert_eq!(server.code, Some(0), "server: {}", stderr(&server));
    assert_eq!(client.code, Some(0), "client: {}", stderr(&client));
    assert!(
        stderr(&server).contains("doca teardown: doca_rdma_destroy: DOCA_ERROR_DRIVER"),
        "{}",
        stderr(&server)
    );
    assert!(stderr(&server).contains("LEAK"), "{}", stderr(&server));
    let leaked = the_one_leak(&case);
    assert!(
        leaked.contains("\"rdma\":1")
            && leaked.contains("\"mmap\":0")
            && leaked.contains("\"buf\":0"),
        "{leaked}"
    );
}

/// The send tasks (the receiver sends its credits in band) cannot be allocated at setup.
#[test]
fn send_task_allocation_failure_at_setup_is_backpressure() {
    server_setup_fault(
        "doca_rdma_task_send_allocate_init:1:DOCA_ERROR_NO_MEMORY",
        "backpressure",
    );
}

/// The buffer inventory has no buffer for a slot at setup (the SDK's inline
/// `doca_buf_inventory_buf_get_by_addr` calls `doca_buf_inventory_buf_get_by_args`).
#[test]
fn inventory_failure_at_setup_is_named() {
    server_setup_fault(
        "doca_buf_inventory_buf_get_by_args:1:DOCA_ERROR_NO_MEMORY",
        "doca_buf_inventory_buf_get_by_addr",
    );
}

/// --credits above the device's queue caps (DOCA_SIM_MAX_SEND_QUEUE=4) is refused at set-up,
/// naming the device, the cap and the option; the server hears why and keeps serving.
#[test]
fn credits_above_the_device_queue_cap_are_refused_naming_the_device_and_cap() {
    let case = Case::new();
    let mut server = case.start("--server", &[], &["--once"]);
    let client = case
        .start(
            "--client",
            &[("DOCA_SIM_MAX_SEND_QUEUE", "4")],
            &["--credits", "8", "--count", "10"],
        )
        .finish(DEADLINE);
    assert_eq!(client.code, Some(1), "client: {}", stderr(&client));
    assert!(
        stderr(&client).contains("device mlx5_0 has send queues of at most 4 tasks")
            && stderr(&client).contains("--credits 4 or less"),
        "{}",
        stderr(&client)
    );
    sleep(Duration::from_millis(300));
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

/// A resume case: a printing server (`--once --json`) and a client sending "0".."count-1"
/// (with `client_args`), each with its own environment; both outputs once both ended.
fn resumed_run(
    case: &Case,
    server_env: &[(&str, &str)],
    client_env: &[(&str, &str)],
    count: usize,
    client_args: &[&str],
) -> (Finished, Finished) {
    resumed_run_with(case, (server_env, &[]), client_env, count, client_args)
}

/// [`resumed_run`] with more arguments for the server (`server`: its environment and them).
fn resumed_run_with(
    case: &Case,
    server: (&[(&str, &str)], &[&str]),
    client_env: &[(&str, &str)],
    count: usize,
    client_args: &[&str],
) -> (Finished, Finished) {
    let (server_env, server_args) = server;
    let mut args = vec!["--once", "--json"];
    args.extend_from_slice(server_args);
    let server = Proc::spawn(
        "server",
        case.printing_command("doca", "--server", server_env, &args),
    );
    let count = count.to_string();
    let mut args = vec!["--count", count.as_str()];
    args.extend_from_slice(client_args);
    let client = Proc::spawn("client", case.command("--client", client_env, &args));
    let client = client.finish(DEADLINE);
    let server = server.finish(DEADLINE);
    (server, client)
}

/// Both ends ended cleanly after at least `resumes` resumes (logged by both, counted in the
/// server's JSON), the server printed "0".."count-1" once each in order, and nothing leaked.
fn assert_resumed_exactly_once_in_order(
    case: &Case,
    server: &Finished,
    client: &Finished,
    count: usize,
    resumes: u64,
) {
    assert_eq!(client.code, Some(0), "client: {}", stderr(client));
    assert_eq!(server.code, Some(0), "server: {}", stderr(server));
    // Line i is "i" for every i below count, and there is no line count.
    let printed: Vec<&str> = server.stdout.lines().collect();
    let wrong = (0..=count).find(|&i| {
        printed.get(i).map(|line| line.parse::<usize>().ok()) != (i < count).then_some(Some(i))
    });
    if let Some(i) = wrong {
        panic!(
            "the server printed {} line(s), not 0..{count} once each in order: line {i} is {:?}\n{}",
            printed.len(),
            printed.get(i),
            stderr(server)
        );
    }
    for (who, out) in [("server", server), ("client", client)] {
        let said = stderr(out).matches("session resumed in").count() as u64;
        assert!(
            said >= resumes,
            "{who}: {said} resume(s) logged\n{}",
            stderr(out)
        );
    }
    assert_eq!(received_count(&stderr(server)), count as u64);
    let json = stderr(server)
        .lines()
        .find(|l| l.starts_with('{'))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no JSON result\n{}", stderr(server)));
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON result");
    assert!(
        value["resumes"].as_u64().unwrap_or(0) >= resumes,
        "the JSON result counts the resumes: {json}"
    );
    assert_eq!(case.assert_no_leaks(), 2);
}

/// The simulator drops the server's RDMA connection every 3000 messages it counts (data and
/// credits: about 1500 messages a connection); each time both ends resume on a new DOCA
/// connection (a restarted context, a new export and connect, the posted receives again in
/// order, the sends that had not arrived sent again), and all 10,000 messages arrive exactly
/// once and in order.
#[test]
fn dropped_doca_connections_are_resumed_and_every_message_arrives_once_in_order() {
    let case = Case::new();
    let (server, client) = resumed_run(&case, &[("DOCA_SIM_DROP_AFTER", "3000")], &[], 10_000, &[]);
    assert_resumed_exactly_once_in_order(&case, &server, &client, 10_000, 3);
}

/// The same drops with the stream striped over two queue pairs (`--qps 2`): a dropped
/// connection fails its lane, the session resumes on two new ones, and every message arrives
/// once, in order.
#[test]
fn dropped_doca_connections_under_two_queue_pairs_are_resumed_in_order() {
    let case = Case::new();
    let (server, client) = resumed_run(
        &case,
        &[("DOCA_SIM_DROP_AFTER", "3000")],
        &[],
        10_000,
        &["--qps", "2"],
    );
    assert_resumed_exactly_once_in_order(&case, &server, &client, 10_000, 1);
}

/// The same drops with every feature that changes what a message carries or how a session
/// starts: a key (the resumes authenticate), CRC32C checksums (every message checked after
/// being sent again), two queue pairs and 8 credits. Every message once, in order.
#[test]
fn dropped_doca_connections_with_a_key_checksums_and_two_queue_pairs_are_resumed_in_order() {
    let case = Case::new();
    let key = case.dir.path().join("key");
    fs::write(&key, "doca-drops-and-a-key-0123456789abcdef\n").unwrap();
    let private = <fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
    fs::set_permissions(&key, private).unwrap();
    let key = key.to_str().unwrap().to_owned();
    let keyed = [
        ("DOCA_SIM_DROP_AFTER", "3000"),
        ("RDMA_CONTAINER_AUTH_KEY_FILE", key.as_str()),
    ];
    let checksums = ["--checksum", "crc32c"];
    let (server, client) = resumed_run_with(
        &case,
        (&keyed, &checksums),
        &keyed[1..],
        10_000,
        &["--qps", "2", "--credits", "8", "--checksum", "crc32c"],
    );
    assert_resumed_exactly_once_in_order(&case, &server, &client, 10_000, 1);
    for out in [&server, &client] {
        assert!(stderr(out).contains("checksum crc32c"), "{}", stderr(out));
    }
}

/// The simulator fails the 50th send completion (set on the client: its 50th message).
const FAIL_50TH_SEND_COMPLETION: (&str, &str) = (
    "DOCA_SIM_FAIL",
    "doca_rdma_task_send_completion:50:DOCA_ERROR_IO_FAILED",
);

/// One send completion fails mid-stream (the 50th, on the client): the sender's QP is in
/// error, the receiver's is not; the session resumes and every message arrives once, in order.
#[test]
fn a_failed_send_completion_is_resumed_and_every_message_arrives_once_in_order() {
    let case = Case::new();
    let (server, client) = resumed_run(&case, &[], &[FAIL_50TH_SEND_COMPLETION], 300, &[]);
    assert_resumed_exactly_once_in_order(&case, &server, &client, 300, 1);
}

/// The same fault with the stream striped over three queue pairs (`--qps 3`, 8 credits; issue
/// 39): the failed completion is on one of them, every queue pair is rebuilt, what waited in
/// the receiver's reorder window is sent again, and every message arrives once, in order.
#[test]
fn a_failed_send_completion_on_one_of_three_queue_pairs_is_resumed_in_order() {
    let case = Case::new();
    let (server, client) = resumed_run(
        &case,
        &[],
        &[FAIL_50TH_SEND_COMPLETION],
        2_000,
        &["--qps", "3", "--credits", "8"],
    );
    assert!(
        stderr(&client).contains(" | qps 3 |"),
        "{}",
        stderr(&client)
    );
    assert_resumed_exactly_once_in_order(&case, &server, &client, 2_000, 1);
}

/// Resumption together with the other features over DOCA (issue 32): a pre-shared key,
/// CRC32C, 64 KiB messages at `--max-msg-size` and 16 credits, while the simulator drops the
/// server's connection every 400 messages it counts. Every byte of every message arrives once,
/// in order, and the checksums hold across the new connections.
#[test]
fn dropped_doca_connections_resume_with_a_key_checksums_and_64_kib_messages() {
    const COUNT: usize = 600;
    const SIZE: usize = 65_536;
    let case = Case::new();
    let key = case.dir.path().join("key");
    std::fs::write(&key, "doca-resume-together-0123456789abcdef\n").expect("key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let key = key.display().to_string();
    let size = SIZE.to_string();
    let both = [
        "--auth-key-file",
        key.as_str(),
        "--checksum",
        "crc32c",
        "--max-msg-size",
        size.as_str(),
        "--credits",
        "16",
    ];
    let mut server_args = vec!["--once", "--json"];
    server_args.extend_from_slice(&both);
    let server = Proc::spawn(
        "server",
        case.printing_command(
            "doca",
            "--server",
            &[("DOCA_SIM_DROP_AFTER", "400")],
            &server_args,
        ),
    );
    let count = COUNT.to_string();
    let mut client_args = vec!["--count", count.as_str(), "--size", size.as_str()];
    client_args.extend_from_slice(&both);
    let client = Proc::spawn("client", case.command("--client", &[], &client_args));
    let client = client.finish(DEADLINE);
    let server = server.finish(DEADLINE);
    assert_eq!(client.code, Some(0), "client: {}", stderr(&client));
    assert_eq!(server.code, Some(0), "server: {}", stderr(&server));
    let lines: Vec<&str> = server.stdout.lines().collect();
    assert_eq!(lines.len(), COUNT, "{}", stderr(&server));
    for (i, line) in lines.iter().enumerate() {
        let digits = i.to_string();
        let pad: String = (0..SIZE - digits.len())
            .map(|k| char::from(b'a' + (k % 26) as u8))
            .collect();
        assert!(
            line.starts_with(&digits) && line[digits.len()..] == pad,
            "message {i} is not what was sent ({} bytes)",
            line.len()
        );
    }
    for (who, out) in [("server", &server), ("client", &client)] {
        assert!(
            stderr(out).contains("session resumed in"),
            "{who} resumed\n{}",
            stderr(out)
        );
        assert!(stderr(out).contains("checksum crc32c"), "{}", stderr(out));
    }
    assert_eq!(case.assert_no_leaks(), 2);
}
