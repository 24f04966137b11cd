//! The machine-readable session result (`--json` on stderr, `--out-json FILE`), checked
//! against docs/session-result.schema.json, the exit status of each ending (3 peer lost,
//! 4 rejected, 5 RDMA required, 130 interrupted) and `--require-rdma` on a machine (or an
//! address) without RDMA. Over loopback with the transport the tests choose (TCP here).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{client, free_port, server, Proc, LONG, SHORT};
use nix::sys::signal::Signal;
use serde_json::Value;

/// The JSON objects among `text`'s lines (log lines start with `[`).
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line ({e}): {l}")))
        .collect()
}

/// The one session result `p` printed on stderr.
fn result_of(p: &Proc) -> Value {
    let mut all = json_lines(&p.stderr());
    assert_eq!(all.len(), 1, "expected one JSON result\n{}", p.report());
    let v = all.remove(0);
    validate(&v);
    v
}

/// Validates `v` against docs/session-result.schema.json.
fn validate(v: &Value) {
    common::validate_json("docs/session-result.schema.json", v);
}

fn read_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v = json_lines(&text);
    v.iter().for_each(validate);
    v
}

#[test]
fn finished_session_result_on_both_ends_matches_the_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("server.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let (mut s, port) = server("server", &["--once", "--out-json", out_arg]);
    let mut c = client("client", port, &["--json", "-n", "20", "--size", "100"]);
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(LONG), 0, "{}", s.report());
    let v = result_of(&c);
    assert_eq!(v["role"], "client");
    assert_eq!(v["transport"], common::expected_transport(), "{v}");
    assert_eq!(v["messages"], 20, "{v}");
    assert_eq!(v["bytes"], 2000, "{v}");
    assert_eq!(v["ending"]["kind"], "finished", "{v}");
    assert_eq!(v["exit_status"], 0, "{v}");
    assert_eq!(v["credits"], 2, "{v}");
    // Only the client asked for --json: the server's stderr has none, its file has one line.
    assert!(json_lines(&s.stderr()).is_empty(), "{}", s.report());
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["role"], "server");
    assert_eq!(lines[0]["session"], 1);
    assert_eq!(lines[0]["messages"], 20);
    assert_eq!(lines[0]["ending"]["kind"], "finished");
    // Loopback has no RoCE GID: auto says why it used TCP.
    if common::expected_transport() == "tcp" && std::env::var_os("RDMA_TEST_TRANSPORT").is_none() {
        let why = v["fallback_reason"].as_str().unwrap_or_default();
        assert!(why.contains("no RoCE v2 GID for source 127.0.0.1"), "{v}");
    }
}

#[test]
fn killed_client_ends_the_once_server_with_peer_lost_and_status_3() {
    // A killed client cannot resume: the server waits 2 s for it (--resume-timeout).
    let (mut s, port) = server(
        "server",
        &["--once", "--json", "--quiet", "--resume-timeout", "2"],
    );
    let c = client("client", port, &["-n", "100000000"]);
    s.wait_for_stderr("session established", SHORT);
    std::thread::sleep(Duration::from_millis(300));
    c.signal(Signal::SIGKILL);
    assert_eq!(s.wait_code(SHORT), 3, "{}", s.report());
    let v = result_of(&s);
    assert_eq!(v["ending"]["kind"], "peer_lost", "{v}");
    assert_eq!(v["ending"]["messages"], v["messages"], "{v}");
    assert_eq!(v["exit_status"], 3, "{v}");
}

#[test]
fn busy_server_rejects_the_second_client_with_status_4() {
    let (_s, port) = server("server", &["--quiet"]);
    let mut first = client("first", port, &["-n", "100000000"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut second = client("second", port, &["--json", "--connect-timeout", "1"]);
    assert_eq!(second.wait_code(SHORT), 4, "{}", second.report());
    let v = result_of(&second);
    assert_eq!(v["ending"]["kind"], "rejected", "{v}");
    assert!(
        v["ending"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("busy"),
        "{v}"
    );
    assert!(v["transport"].is_null(), "{v}");
    first.kill();
}

#[test]
fn ctrl_c_on_the_client_reports_interrupted_and_130() {
    let (_s, port) = server("server", &["--quiet"]);
    let mut c = client("client", port, &["--json", "-n", "100000000"]);
    c.wait_for_stderr("session established", SHORT);
    std::thread::sleep(Duration::from_millis(200));
    c.signal(Signal::SIGINT);
    assert_eq!(c.wait_code(SHORT), 130, "{}", c.report());
    let v = result_of(&c);
    assert_eq!(v["ending"]["kind"], "interrupted", "{v}");
    assert!(v["messages"].as_u64().unwrap_or(0) > 0, "{v}");
}

#[test]
fn require_rdma_refuses_the_tcp_fallback_with_the_reason_and_status_5() {
    if std::env::var("RDMA_TEST_TRANSPORT").is_ok_and(|t| !t.is_empty() && t != "auto") {
        // The transport under test is named: --require-rdma is about auto.
        return;
    }
    let (mut s, port) = server("server", &["--quiet"]);
    // The client on its own requires RDMA; loopback has no RoCE GID.
    let mut c = client("client", port, &["--json", "--require-rdma"]);
    assert_eq!(c.wait_code(SHORT), 5, "{}", c.report());
    let err = c.stderr();
    assert!(
        err.contains("RDMA is required (--require-rdma) but not possible here")
            && err.contains("no RoCE v2 GID for source 127.0.0.1"),
        "{}",
        c.report()
    );
    let v = result_of(&c);
    assert_eq!(v["ending"]["kind"], "rdma_required", "{v}");
    assert!(v["transport"].is_null(), "{v}");
    // A server that requires RDMA refuses the session too, and keeps serving.
    s.kill();
    let (mut s, port) = server("server", &["--require-rdma", "--once", "--json"]);
    let mut c = client("client", port, &[]);
    assert_ne!(c.wait_code(SHORT), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 5, "{}", s.report());
    assert_eq!(result_of(&s)["ending"]["kind"], "rdma_required");
    // --require-rdma with --transport tcp is a contradiction, said at once.
    let (code, _, err) = common::run(
        &[
            "--client",
            "127.0.0.1:1",
            "--transport",
            "tcp",
            "--require-rdma",
        ],
        SHORT,
    );
    assert_eq!(
        code, 2,
        "a contradictory command line is a usage error: {err}"
    );
    assert!(
        err.contains("--require-rdma cannot be combined with --transport tcp"),
        "{err}"
    );
}

/// Issue 35 item 5: the queue pair's settings in the session result, on both ends, with the
/// transport under test: DOCA (the simulator) applies --sl and --mtu and reports them, and
/// cannot say its traffic class, ACK timeout or retry count (null); verbs applies all five;
/// auto's TCP fallback applies none (null, with a warning); --transport tcp refuses them.
#[test]
fn queue_pair_settings_are_in_the_session_result() {
    let forced = std::env::var("RDMA_TEST_TRANSPORT").ok();
    let flags: &[&str] = match common::expected_transport() {
        "verbs" => &[
            "--tclass",
            "104",
            "--sl",
            "3",
            "--mtu",
            "1024",
            "--ack-timeout",
            "19",
            "--retry-count",
            "6",
        ],
        _ => &["--sl", "3", "--mtu", "1024"],
    };
    if forced.as_deref() == Some("tcp") {
        let mut c = client("client", free_port(), flags);
        assert_eq!(c.wait_code(SHORT), 2, "{}", c.report());
        assert!(
            c.stderr().contains(
                "(--sl, --mtu) apply to an RDMA queue pair, and --transport tcp has none"
            ),
            "{}",
            c.report()
        );
        return;
    }
    let mut args = vec!["--once", "--json", "--quiet"];
    args.extend_from_slice(flags);
    let (mut s, port) = server("server", &args);
    let mut args = vec!["--json", "-n", "20"];
    args.extend_from_slice(flags);
    let mut c = client("client", port, &args);
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(LONG), 0, "{}", s.report());
    for (p, v) in [(&c, result_of(&c)), (&s, result_of(&s))] {
        let role = &v["role"];
        match common::expected_transport() {
            "doca" => {
                assert_eq!(v["service_level"], 3, "{role}: {v}");
                assert_eq!(v["peer_service_level"], 3, "{role}: {v}");
                assert_eq!(v["mtu"], 1024, "{role}: {v}");
                for key in [
                    "traffic_class",
                    "peer_traffic_class",
                    "ack_timeout",
                    "retry_count",
                ] {
                    assert!(v[key].is_null(), "{role}: DOCA cannot say {key}: {v}");
                }
                assert!(p.stderr().contains("| sl 3 peer 3 |"), "{}", p.report());
            }
            "verbs" => {
                assert_eq!(v["traffic_class"], 104, "{role}: {v}");
                assert_eq!(v["peer_traffic_class"], 104, "{role}: {v}");
                assert_eq!(v["service_level"], 3, "{role}: {v}");
                assert_eq!(v["peer_service_level"], 3, "{role}: {v}");
                assert!(v["mtu"].as_u64().is_some_and(|m| m <= 1024), "{role}: {v}");
                assert_eq!(v["ack_timeout"], 19, "{role}: {v}");
                assert_eq!(v["retry_count"], 6, "{role}: {v}");
                let line = "tclass 104 (dscp 26) peer 104 (dscp 26) | sl 3 peer 3";
                assert!(p.stderr().contains(line), "{}", p.report());
            }
            _ => {
                for key in [
                    "mtu",
                    "traffic_class",
                    "peer_traffic_class",
                    "service_level",
                    "peer_service_level",
                    "ack_timeout",
                    "retry_count",
                ] {
                    assert!(v[key].is_null(), "{role}: tcp has no {key}: {v}");
                }
                let warning = "the tcp transport has no RDMA queue pair";
                assert!(p.stderr().contains(warning), "{}", p.report());
            }
        }
        // The schema holds the ranges.
        for (key, bad) in [
            ("service_level", 16),
            ("traffic_class", 256),
            ("ack_timeout", 32),
            ("retry_count", 8),
        ] {
            let mut wrong = v.clone();
            wrong[key] = bad.into();
            common::assert_schema_refuses(
                "docs/session-result.schema.json",
                &wrong,
                &format!("{key} {bad}"),
            );
        }
    }
}
