//! Progress on long runs (issue 35, item 4): `--interval S` on `--client` and `--server` prints
//! a line per interval in the summary's shape (JSON lines with `--json`), and by default a
//! line every second when stderr is a terminal, none with `--quiet` or into a pipe.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{client, on_path, server, skip_or_fail, validate_json, Proc, LONG, SHORT};
use nix::sys::signal::Signal;

/// The interval lines of a log: (from, to, messages, total) each.
fn interval_lines(log: &str) -> Vec<(f64, f64, u64, u64)> {
    log.lines()
        .filter(|l| l.contains("cli::progress"))
        .map(|l| {
            let span = l
                .split_once(": [")
                .and_then(|(_, rest)| rest.split_once(" s] "))
                .unwrap_or_else(|| panic!("no span in {l}"));
            let (from, to) = span.0.split_once('-').expect("from-to");
            let messages = span.1.split_once(" messages,").expect("messages").0;
            let total = l
                .rsplit_once("(total ")
                .and_then(|(_, t)| t.split_once(" messages)"))
                .expect("total")
                .0;
            (
                from.parse().expect("from"),
                to.parse().expect("to"),
                messages.parse().expect("messages"),
                total.parse().expect("total"),
            )
        })
        .collect()
}

/// The lines follow each other without a gap, each interval's count adds up to the next
/// total, and the last total is at most what the session moved.
fn assert_consistent(lines: &[(f64, f64, u64, u64)], at_most: u64, who: &Proc) {
    let mut total = 0;
    let mut to = 0.0;
    for &(f, t, messages, running) in lines {
        assert!((f - to).abs() < 1e-6, "no gap at {f}\n{}", who.report());
        assert!((t - f - 0.5).abs() < 1e-6, "0.5 s each\n{}", who.report());
        total += messages;
        assert_eq!(total, running, "the totals add up\n{}", who.report());
        to = t;
    }
    assert!(total <= at_most, "{total} > {at_most}\n{}", who.report());
    assert!(
        total > 0,
        "the intervals counted no message of a running stream\n{}",
        who.report()
    );
}

#[test]
fn with_interval_both_ends_print_a_line_per_interval_in_the_summarys_shape() {
    let (mut s, port) = server("server", &["--quiet", "--interval", "0.5", "--once"]);
    let count = 40_000;
    let mut c = client(
        "client",
        port,
        &["--count", &count.to_string(), "--interval", "0.5"],
    );
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    for (who, p) in [("client", &c), ("server", &s)] {
        let lines = interval_lines(&p.stderr());
        assert!(
            !lines.is_empty(),
            "the {who} printed no interval line in a run of {count} messages\n{}",
            p.report()
        );
        assert_consistent(&lines, count, p);
        assert!(
            p.stderr()
                .lines()
                .filter(|l| l.contains("cli::progress"))
                .all(|l| l.contains(" msg/s, ") && l.contains(" Gb/s) over ")),
            "the summary's shape\n{}",
            p.report()
        );
    }
    assert!(
        s.stderr().contains("session 1 from 127.0.0.1:"),
        "the server's lines name the session\n{}",
        s.report()
    );
}

#[test]
fn with_interval_and_json_each_interval_is_a_json_line_that_matches_its_schema() {
    let (mut s, port) = server("server", &["--quiet", "--once"]);
    let mut c = client(
        "client",
        port,
        &["--count", "40000", "--interval", "0.5", "--json"],
    );
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let json: Vec<serde_json::Value> = c
        .stderr()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let (intervals, results): (Vec<_>, Vec<_>) =
        json.iter().partition(|v| v.get("interval").is_some());
    assert!(!intervals.is_empty(), "{}", c.report());
    for v in &intervals {
        validate_json("docs/interval.schema.json", v);
        assert_eq!(v["interval"]["role"], "client", "{v}");
    }
    assert_eq!(results.len(), 1, "one result line, last\n{}", c.report());
    validate_json("docs/session-result.schema.json", results[0]);
    assert!(
        json.last().is_some_and(|v| v.get("interval").is_none()),
        "no interval line after the result\n{}",
        c.report()
    );
}

#[test]
fn into_a_pipe_without_interval_nothing_periodic_is_printed() {
    let (mut s, port) = server("server", &["--quiet", "--once"]);
    let mut c = client("client", port, &["--count", "40000"]);
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert!(interval_lines(&c.stderr()).is_empty(), "{}", c.report());
    assert!(interval_lines(&s.stderr()).is_empty(), "{}", s.report());
}

/// `script` gives the client a terminal for stderr: the default is a line a second, and
/// `--quiet` turns it off.
fn client_on_a_terminal(port: u16, extra: &str) -> String {
    let bin = env!("CARGO_BIN_EXE_rdma-container");
    let line = format!(
        "{bin} --client 127.0.0.1:{port} --transport tcp --connect-timeout 10 --count 100000000 \
{extra}"
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qefc", &line, "/dev/null"]);
    let mut p = Proc::spawn("client on a terminal", cmd);
    std::thread::sleep(common::scaled(Duration::from_millis(2600)));
    p.signal(Signal::SIGINT);
    p.wait(SHORT);
    p.stdout()
}

#[test]
fn on_a_terminal_a_line_a_second_by_default_and_none_with_quiet() {
    if on_path("script").is_none() {
        skip_or_fail("script (util-linux) is not installed: it gives the client a terminal");
        return;
    }
    for (extra, wanted) in [("", true), ("--quiet", false)] {
        let (mut s, port) = server("server", &["--quiet", "--transport", "tcp"]);
        let out = client_on_a_terminal(port, extra);
        let lines = out.lines().filter(|l| l.contains("cli::progress")).count();
        if wanted {
            assert!(
                lines >= 1,
                "no progress line on a terminal by default:\n{out}"
            );
            assert!(out.contains("client: [0.0-1.0 s]"), "every second:\n{out}");
        } else {
            assert_eq!(lines, 0, "--quiet turns them off:\n{out}");
        }
        s.signal(Signal::SIGINT);
        s.wait(SHORT);
    }
}
