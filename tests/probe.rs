//! `doctor --probe IP:PORT` over loopback: with `--transport tcp` a real session with a running
//! server (both probe messages printed there), with auto the refusal to probe over TCP and why,
//! and a server that is not there. The RDMA round trip itself runs in the soft-RoCE VM
//! (scripts/softroce-vm.sh, check `doctor`, result `doctor_probe`).

mod common;

use common::{command, free_port, run, server, test_ip, Proc, LONG, SHORT};
use serde_json::Value;

fn probe(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = run(&all, LONG);
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}\n{err}"));
    (code, v["probe"].clone())
}

#[test]
fn a_probe_over_tcp_is_a_real_session_with_the_server() {
    // Started here, not with common::server (which adds RDMA_TEST_TRANSPORT's transport).
    let spawn = |port: u16| {
        let addr = format!("{}:{port}", test_ip());
        Proc::spawn(
            "server",
            command(&["--server", &addr, "--once", "--transport", "tcp"]),
        )
    };
    let (mut s, port) = common::listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("{}:{port}", test_ip());
    let (code, p) = probe(&["--probe", &addr, "--transport", "tcp"]);
    assert_eq!(code, 0, "{p}");
    assert_eq!(p["ok"], true, "{p}");
    assert_eq!(p["transport"], "tcp", "{p}");
    assert_eq!(s.wait_code(LONG), 0, "{}", s.report());
    let out = s.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{}", s.report());
    assert_eq!(lines[0], "rdma-container doctor probe");
    assert_eq!(lines[1].len(), 64 * 1024);
}

#[test]
fn an_auto_probe_without_rdma_says_why_and_exits_5() {
    if std::env::var("RDMA_TEST_TRANSPORT").is_ok_and(|t| !t.is_empty() && t != "auto") {
        return;
    }
    let (_s, port) = server("server", &["--quiet"]);
    let addr = format!("127.0.0.1:{port}");
    let (code, p) = probe(&["--probe", &addr]);
    assert_eq!(code, 5, "{p}");
    assert_eq!(p["ok"], false, "{p}");
    assert_eq!(p["failure"], "rdma_not_possible", "{p}");
    assert!(
        p["explanation"]
            .as_str()
            .unwrap_or_default()
            .contains("127/8 has no RoCE GID"),
        "{p}"
    );
}

#[test]
fn a_probe_of_a_port_nobody_listens_on_says_so() {
    let addr = format!("127.0.0.1:{}", free_port());
    let (code, p) = probe(&["--probe", &addr, "--transport", "tcp"]);
    assert_eq!(code, 1, "{p}");
    assert_eq!(p["failure"], "not_listening", "{p}");
    assert!(
        p["explanation"]
            .as_str()
            .unwrap_or_default()
            .contains("--server"),
        "{p}"
    );
}
