//! SIGTERM, as Kubernetes, systemd and `kill` stop a process, is a clean stop like Ctrl-C, told
//! apart from it: the program exits 143 (128 + 15) where Ctrl-C gives 130, its log says
//! `stopped (SIGTERM)`, and a server's clients are told `the server was stopped (SIGTERM)`.
//! A second signal still exits at once. Ctrl-C's own words and 130 are checked here too (and in
//! tests/process.rs, tests/sessions.rs and tests/session_result.rs).
//!
//! The real binary over loopback with the transport the tests choose (TCP here).

mod common;

use std::time::{Duration, Instant};

use common::{assert_exits_saying, check_counting, client, messages_after, server, Proc, SHORT};
use nix::sys::signal::Signal;
use serde_json::Value;

/// The endless client: far more messages than it can send during a test.
const ENDLESS: &str = "100000000";

/// The JSON session results among `p`'s stderr lines.
fn results(p: &Proc) -> Vec<Value> {
    p.stderr()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON ({e}): {l}")))
        .collect()
}

#[test]
fn sigterm_on_the_server_mid_session_stops_it_cleanly_with_143() {
    // No --once: the server of a pod, serving until it is stopped.
    let (mut s, port) = server("server", &["--json"]);
    let mut c = client("client", port, &["--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    s.signal(Signal::SIGTERM);
    assert_eq!(s.wait_code(SHORT), 143, "{}", s.report());
    assert!(
        s.stderr()
            .lines()
            .any(|l| l.contains("session 1 from ") && l.contains(": stopped (SIGTERM): received ")),
        "the session's summary should say the server was stopped by SIGTERM\n{}",
        s.report()
    );
    assert!(
        !s.stderr().contains("Ctrl-C"),
        "a SIGTERM is not a Ctrl-C\n{}",
        s.report()
    );
    // Every message the summary counts was printed, in order: a clean stop.
    let received = messages_after(&s.stderr(), "received")
        .unwrap_or_else(|| panic!("no \"received N messages\"\n{}", s.report()));
    if let Err(e) = check_counting(&s.stdout(), received) {
        panic!("server stdout vs {received} received: {e}\n{}", s.report());
    }
    let r = results(&s);
    assert_eq!(r.len(), 1, "one session result\n{}", s.report());
    assert_eq!(r[0]["ending"]["kind"], "interrupted", "{}", r[0]);
    assert_eq!(r[0]["exit_status"], 143, "{}", r[0]);
    common::validate_json("docs/session-result.schema.json", &r[0]);
    // The client is told why, and exits 4 (rejected) naming the signal.
    assert_exits_saying(
        &mut c,
        4,
        &["the server was stopped (SIGTERM)"],
        "the client should say that the server was stopped by SIGTERM",
    );
}

#[test]
fn sigterm_on_the_client_finishes_the_stream_and_exits_143() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &["--json", "--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_code(SHORT), 143, "{}", c.report());
    let err = c.stderr();
    assert!(
        err.contains("SIGTERM: stopping after ") && err.contains("stopped (SIGTERM): sent "),
        "the client's log should name SIGTERM\n{}",
        c.report()
    );
    let r = results(&c);
    assert_eq!(r.len(), 1, "one session result\n{}", c.report());
    assert_eq!(r[0]["ending"]["kind"], "interrupted", "{}", r[0]);
    assert_eq!(r[0]["exit_status"], 143, "{}", r[0]);
    common::validate_json("docs/session-result.schema.json", &r[0]);
    // A clean end of stream: the --once server got every message sent, and exits 0.
    let sent = messages_after(&err, "sent")
        .unwrap_or_else(|| panic!("no \"sent N messages\"\n{}", c.report()));
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert!(
        s.stderr()
            .contains(&format!("end of stream: received {sent} messages")),
        "{}",
        s.report()
    );
    if let Err(e) = check_counting(&s.stdout(), sent) {
        panic!("server stdout vs {sent} sent: {e}\n{}", s.report());
    }
}

#[test]
fn an_idle_server_says_which_signal_stopped_it() {
    for (signal, status, words) in [
        (Signal::SIGTERM, 143, "stopped (SIGTERM) after 0 session(s)"),
        (Signal::SIGINT, 130, "interrupted after 0 session(s)"),
    ] {
        let (mut s, _) = server("server", &[]);
        s.signal(signal);
        assert_eq!(s.wait_code(SHORT), status, "{signal}\n{}", s.report());
        assert!(s.stderr().contains(words), "{signal}\n{}", s.report());
    }
}

#[test]
fn ctrl_c_on_the_server_keeps_its_words_and_130() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &["--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    s.signal(Signal::SIGINT);
    assert_eq!(s.wait_code(SHORT), 130, "{}", s.report());
    assert!(
        s.stderr().contains(": interrupted: received ") && !s.stderr().contains("SIGTERM"),
        "{}",
        s.report()
    );
    assert_exits_saying(
        &mut c,
        4,
        &["the server was interrupted (Ctrl-C)"],
        "the client should say that the server was interrupted by Ctrl-C",
    );
}

/// The first SIGTERM ends a session cleanly, which waits for the peer; a second one exits at
/// once (143), even while the peer is frozen.
#[test]
fn a_second_sigterm_exits_at_once_while_the_first_waits_for_a_frozen_peer() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &["--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    // Freeze the receiver: the sender's clean end (Finish, then waiting for the receiver to
    // drain) cannot complete.
    s.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(200));
    c.signal(Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        c.try_status().is_none(),
        "the first SIGTERM should wait for the frozen peer\n{}",
        c.report()
    );
    let second = Instant::now();
    c.signal(Signal::SIGTERM);
    let code = c.wait_code(SHORT);
    let took = second.elapsed();
    s.signal(Signal::SIGCONT);
    assert_eq!(code, 143, "{}", c.report());
    assert!(
        took < common::scaled(Duration::from_secs(2)),
        "the second SIGTERM took {took:?} to end the process\n{}",
        c.report()
    );
    s.kill();
}
