//! A client restarted after a crash, and a restarted server (issue 35, item 2; docs/design.md,
//! "A new client and a parked session"):
//! - a new client that finds the only place held by a session waiting for its (dead) client to
//!   resume gets that place within 2 s, with and without a key, also under `--once`; the
//!   parked session ends as lost, its rate over the time data moved;
//! - a stranger without the key cannot end a parked keyed session: it is refused before
//!   admission, and the session's own client still resumes it, every message once;
//! - a client told busy retries within its connect timeout and is served once the place frees;
//! - a client whose server restarted ends at once on "no session with that id" instead of
//!   retrying for its whole resume timeout.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::ss::{have_ss_kill, kill, Conn};
use common::{client, scaled, server, server_on_port, short, Proc, LONG, SHORT};
use nix::sys::signal::Signal;

const ENDLESS: &str = "100000000";

/// A private key file (mode 600) in `dir` holding `key`.
fn key_file(dir: &Path, name: &str, key: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, key).expect("write key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// The time of the first log line of `log` that contains `text` (env_logger's
/// `[2026-11-27T09:51:12.891Z ...` prefix), as time since midnight.
fn log_time(log: &str, text: &str) -> Option<Duration> {
    let line = log.lines().find(|l| l.contains(text))?;
    let clock = line.get(12..24)?; // "09:51:12.891"
    let mut parts = clock.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let seconds: f64 = s.parse().ok()?;
    let whole = h.parse::<u64>().ok()? * 3600 + m.parse::<u64>().ok()? * 60;
    Some(Duration::from_secs(whole) + Duration::from_secs_f64(seconds))
}

/// The JSON result lines on a process's stderr.
fn json_results(p: &Proc) -> Vec<serde_json::Value> {
    p.stderr()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON result"))
        .collect()
}

/// Every stdout line is the counter 0, 1, ... `count`-1, once each, in order.
fn assert_counting(p: &Proc, count: usize) {
    let out = p.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), count, "{count} lines expected\n{}", p.report());
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(*line, i.to_string(), "line {i}\n{}", p.report());
    }
}

/// A client killed with SIGKILL mid-stream leaves its session parked; a new client 0.5 s later
/// must be served within 2 s (scaled) and finish; the parked session ends as lost, its rate
/// counted over the time data moved.
fn restarted_client_takes_the_parked_sessions_place(extra: &[&str], once: bool) {
    let mut server_args = vec!["--quiet", "--json"];
    server_args.extend_from_slice(extra);
    if once {
        server_args.push("--once");
    }
    let (mut s, port) = server("server", &server_args);
    let mut crashed_args = vec!["--count", ENDLESS];
    crashed_args.extend_from_slice(extra);
    let mut crashed = client("client that crashes", port, &crashed_args);
    s.wait_for_stderr("session established", SHORT);
    std::thread::sleep(Duration::from_millis(300));
    crashed.signal(Signal::SIGKILL);
    crashed.wait(SHORT);
    s.wait_for_stderr("resuming (for up to", SHORT);
    std::thread::sleep(Duration::from_millis(500));

    let mut restarted_args = vec!["--count", "1000"];
    restarted_args.extend_from_slice(extra);
    let mut restarted = client("restarted client", port, &restarted_args);
    restarted.wait_for_stderr("session established", SHORT);
    // Timed by the server's own log, from the new client's hello to its place: a client's
    // start-up (reading a GID table of 1024 entries under the VM's emulation takes seconds)
    // is not the server's doing.
    s.wait_for_stderr("served in the place of a session", SHORT);
    let server_log = s.stderr();
    let served_after = log_time(&server_log, "every place is taken")
        .zip(log_time(&server_log, "served in the place of a session"))
        .map(|(arrived, served)| served.saturating_sub(arrived))
        .unwrap_or_else(|| panic!("no arrival or service line\n{}", s.report()));
    assert_eq!(restarted.wait_code(SHORT), 0, "{}", restarted.report());
    assert!(
        !restarted.stderr().contains("busy"),
        "served, not told busy\n{}",
        restarted.report()
    );
    assert!(
        served_after < scaled(Duration::from_secs(2)),
        "served {served_after:?} after its hello reached the server: not within 2 s\n{}\n{}",
        restarted.report(),
        s.report()
    );

    s.wait_for_stderr("session 2 from", SHORT);
    if once {
        assert_eq!(
            s.wait_code(SHORT),
            0,
            "--once serves the new client's session\n{}",
            s.report()
        );
    } else {
        s.wait_for_stderr(&format!("session 2 from {}", common::test_ip()), SHORT);
        let deadline = Instant::now() + short();
        while json_results(&s).len() < 2 {
            assert!(Instant::now() < deadline, "two results\n{}", s.report());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let results = json_results(&s);
    let parked = &results[0];
    assert_eq!(parked["ending"]["kind"], "peer_lost", "{parked}");
    assert!(
        parked["ending"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("a new client took the session's place")),
        "{parked}"
    );
    assert_eq!(parked["exit_status"], 3, "{parked}");
    let seconds = parked["seconds"].as_f64().expect("seconds");
    let resuming = parked["seconds_resuming"]
        .as_f64()
        .expect("seconds_resuming");
    assert!(
        resuming >= 0.9,
        "the session waited about 1 s for its client\n{parked}"
    );
    let messages = parked["messages"].as_f64().expect("messages");
    let rate = parked["messages_per_second"].as_f64().expect("rate");
    let moved = seconds - resuming;
    assert!(
        (rate * moved - messages).abs() <= messages * 0.01 + 1.0,
        "the rate counts only the {moved:.3} s data moved\n{parked}"
    );
    assert!(
        s.stderr().contains("resuming left out"),
        "the summary line says so\n{}",
        s.report()
    );
    let served = &results[1];
    assert_eq!(served["ending"]["kind"], "finished", "{served}");
    assert_eq!(served["messages"], 1000, "{served}");
    if !once {
        s.signal(Signal::SIGINT);
        s.wait(SHORT);
    }
}

#[test]
fn a_client_restarted_after_a_crash_is_served_in_the_parked_sessions_place_within_2_s() {
    restarted_client_takes_the_parked_sessions_place(&[], false);
}

#[test]
fn with_a_key_and_once_a_restarted_client_is_served_in_the_parked_sessions_place() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", "restarted-client-key-0123456789abcdef\n");
    let key = key.to_str().expect("utf-8");
    restarted_client_takes_the_parked_sessions_place(&["--auth-key-file", key], true);
}

#[test]
fn a_stranger_without_the_key_cannot_end_a_parked_keyed_session_which_then_resumes() {
    if !have_ss_kill() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", "parked-keyed-session-0123456789abcdef\n");
    let wrong = key_file(
        dir.path(),
        "wrong",
        "another-key-entirely-0123456789abcdef\n",
    );
    let (key, wrong) = (key.to_str().expect("utf-8"), wrong.to_str().expect("utf-8"));
    let count = 200_000;
    let count_s = count.to_string();
    let (mut s, port) = server(
        "server",
        &["--auth-key-file", key, "--once", "--resume-timeout", "30"],
    );
    let mut owner = client(
        "the session's client",
        port,
        &[
            "--auth-key-file",
            key,
            "--count",
            &count_s,
            "--resume-timeout",
            "30",
        ],
    );
    s.wait_for_stdout_lines(1000, LONG);
    // The owner cannot act while stopped; its control connection is reset under it.
    owner.signal(Signal::SIGSTOP);
    kill(owner.pid().as_raw() as u32, port, Conn::Control);
    s.wait_for_stderr("resuming (for up to", SHORT);
    std::thread::sleep(Duration::from_millis(1500));

    for (name, args) in [
        ("stranger without a key", vec!["--count", "10"]),
        (
            "stranger with another key",
            vec!["--count", "10", "--auth-key-file", wrong],
        ),
    ] {
        let mut stranger = client(name, port, &args);
        assert_eq!(stranger.wait_code(SHORT), 4, "{}", stranger.report());
        assert!(
            stranger.stderr().contains("authentication"),
            "refused for its key\n{}",
            stranger.report()
        );
    }
    assert!(
        !s.stderr().contains("took the session's place"),
        "a stranger ended the parked session\n{}",
        s.report()
    );

    owner.signal(Signal::SIGCONT);
    assert_eq!(owner.wait_code(LONG), 0, "{}", owner.report());
    assert_eq!(s.wait_code(LONG), 0, "{}", s.report());
    assert!(
        owner.stderr().contains("session resumed"),
        "{}",
        owner.report()
    );
    assert_counting(&s, count);
}

#[test]
fn a_client_told_busy_retries_within_its_connect_timeout_and_is_served_when_the_place_frees() {
    let (mut s, port) = server("server", &["--quiet"]);
    let mut first = client("first client", port, &["--count", ENDLESS]);
    s.wait_for_stderr("session established", SHORT);
    let mut second = client(
        "second client",
        port,
        &["--count", "100", "--connect-timeout", "60"],
    );
    second.wait_for_stderr("is busy", SHORT);
    assert!(
        second.try_status().is_none(),
        "it keeps trying\n{}",
        second.report()
    );
    first.signal(Signal::SIGINT);
    assert_eq!(first.wait_code(SHORT), 130, "{}", first.report());
    assert_eq!(second.wait_code(SHORT), 0, "{}", second.report());
    s.signal(Signal::SIGINT);
    s.wait(SHORT);
}

#[test]
fn a_client_whose_server_restarted_ends_at_once_on_no_session_with_that_id() {
    let (mut first, port) = server("first server", &["--quiet"]);
    let mut c = client(
        "client",
        port,
        &["--count", ENDLESS, "--resume-timeout", "60"],
    );
    first.wait_for_stderr("session established", SHORT);
    std::thread::sleep(Duration::from_millis(200));
    first.signal(Signal::SIGKILL);
    first.wait(SHORT);
    let restarted = Instant::now();
    let mut second = server_on_port("restarted server", port, &["--quiet"]);
    assert_eq!(c.wait_code(LONG), 3, "{}", c.report());
    let ended_after = restarted.elapsed();
    assert!(
        ended_after < scaled(Duration::from_secs(10)),
        "ended {ended_after:?} after the restart, not at the first answer (resume timeout 60 s)\n{}",
        c.report()
    );
    assert!(
        c.stderr().contains("has no session with our id"),
        "{}",
        c.report()
    );
    second.signal(Signal::SIGINT);
    second.wait(SHORT);
}
