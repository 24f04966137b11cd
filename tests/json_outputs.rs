//! Every JSON output of every command and ending (issue 32), each checked against its schema
//! in docs/ with Python's `jsonschema` (tests/common's `validate_json`):
//!
//! - session results (`--json` on stderr, `--out-json FILE`, docs/session-result.schema.json):
//!   a failed session, a client that cannot connect, a resumed session, two sessions at once
//!   (`--max-sessions 2`), a client refused as busy, `demo`;
//! - `bench --json` (docs/bench-result.schema.json): bw, lat, `-b`, the `--interval` JSON
//!   lines and `--out-json`;
//! - `doctor --json` (docs/doctor.schema.json): plain, on fixture sysfs trees with a RoCE v2
//!   GID (toward a peer, from a local address, in a Kubernetes pod) and with `--probe`.
//!
//! Each schema is also shown to refuse a real output made wrong on purpose, so that a
//! validator that accepts anything cannot pass for one that checks. Over tcp on 127.0.0.1 (auto
//! picks tcp on loopback; some runs name it), whatever transport the run is about.

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use common::ss::{self, Conn};
use common::{
    assert_schema_refuses, command, free_port, ipv4_gid, listening_on_free_port, on_path, run,
    skip_or_fail, start, validate_json, FakeHost, FakeSysfs, Proc, LONG, SHORT,
};
use nix::sys::signal::Signal;
use serde_json::Value;

const SESSION: &str = "docs/session-result.schema.json";
const BENCH: &str = "docs/bench-result.schema.json";
const DOCTOR: &str = "docs/doctor.schema.json";

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// `--server 127.0.0.1:port` with `extra`, once it listens.
fn server(extra: &[&str]) -> (Proc, u16) {
    let spawn = |port: u16| {
        let a = addr(port);
        let mut args = vec!["--server", a.as_str()];
        args.extend_from_slice(extra);
        start("server", &args)
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// `--client 127.0.0.1:port --connect-timeout 10` with `extra`.
fn client(name: &str, port: u16, extra: &[&str]) -> Proc {
    let a = addr(port);
    let mut args = vec!["--client", a.as_str(), "--connect-timeout", "10"];
    args.extend_from_slice(extra);
    start(name, &args)
}

/// The JSON objects among `text`'s lines (log lines start with `[`).
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line ({e}): {l}")))
        .collect()
}

/// The session results `p` printed on stderr, each validated.
fn results_of(p: &Proc) -> Vec<Value> {
    let all = json_lines(&p.stderr());
    all.iter().for_each(|v| validate_json(SESSION, v));
    all
}

/// The one session result `p` printed on stderr, validated.
fn result_of(p: &Proc) -> Value {
    let mut all = results_of(p);
    assert_eq!(all.len(), 1, "expected one JSON result\n{}", p.report());
    all.remove(0)
}

/// The session results in an `--out-json` file: every line is one, each validated.
fn file_results(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let all: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line ({e}): {l}")))
        .collect();
    all.iter().for_each(|v| validate_json(SESSION, v));
    all
}

/// The `--out-json` file's lines once it has `n` (a server writes one as each session ends).
fn wait_for_lines(path: &Path, n: usize, who: &Proc) -> Vec<Value> {
    let deadline = Instant::now() + SHORT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n && text.ends_with('\n') {
            return file_results(path);
        }
        assert!(
            Instant::now() < deadline,
            "{} has {} line(s), {n} expected:\n{text}\n{}",
            path.display(),
            text.lines().count(),
            who.report()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A copy of `v` with `edit` applied.
fn edited(v: &Value, edit: impl FnOnce(&mut Value)) -> Value {
    let mut copy = v.clone();
    edit(&mut copy);
    copy
}

/// Removes `key` from the object `v` (which must have it).
fn remove(v: &mut Value, key: &str) {
    let obj = v.as_object_mut().expect("an object");
    assert!(obj.remove(key).is_some(), "no {key} to remove");
}

// ---------------------------------------------------------------------------------------
// Session results

#[test]
fn a_session_that_fails_on_the_server_reports_failed_with_status_1() {
    // The client stops (SIGSTOP) mid-stream without closing anything: the server's idle
    // timeout fails the session (not peer lost: the connections stay up).
    let (mut s, port) = server(&[
        "--once",
        "--json",
        "--quiet",
        "--resume-timeout",
        "0",
        "--idle-timeout",
        "1",
    ]);
    let mut c = client(
        "client",
        port,
        &["-n", "100000000", "--resume-timeout", "0"],
    );
    s.wait_for_stderr("session established", SHORT);
    std::thread::sleep(Duration::from_millis(300));
    c.signal(Signal::SIGSTOP);
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    c.kill();
    let v = result_of(&s);
    assert_eq!(v["role"], "server", "{v}");
    assert_eq!(v["session"], 1, "{v}");
    assert_eq!(v["transport"], "tcp", "{v}");
    assert_eq!(v["ending"]["kind"], "failed", "{v}");
    assert!(
        v["ending"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("idle timeout")),
        "{v}"
    );
    assert_eq!(v["exit_status"], 1, "{v}");
    assert!(v["messages"].as_u64().is_some_and(|n| n > 0), "{v}");

    // The harness is live: the schema refuses this result made wrong.
    assert_schema_refuses(SESSION, &edited(&v, |v| remove(v, "ending")), "no ending");
    assert_schema_refuses(
        SESSION,
        &edited(&v, |v| v["exit_status"] = 0.into()),
        "a failed ending and exit status 0",
    );
    assert_schema_refuses(
        SESSION,
        &edited(&v, |v| v["ending"]["error"] = Value::Null),
        "a failure without its error",
    );
    assert_schema_refuses(
        SESSION,
        &edited(&v, |v| v["surprise"] = true.into()),
        "an undocumented field",
    );
}

#[test]
fn a_client_that_cannot_connect_reports_failed_on_stderr_and_in_its_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("client.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    // Nobody listens on the port: connection refused until --connect-timeout.
    let a = addr(free_port());
    let (code, _, err) = run(
        &[
            "--client",
            &a,
            "--connect-timeout",
            "1",
            "--json",
            "--out-json",
            out_arg,
        ],
        LONG,
    );
    assert_eq!(code, 1, "{err}");
    let results = json_lines(&err);
    assert_eq!(results.len(), 1, "{err}");
    let v = &results[0];
    validate_json(SESSION, v);
    assert_eq!(file_results(&out), results, "the file and stderr differ");
    assert_eq!(v["role"], "client", "{v}");
    assert!(v["session"].is_null(), "{v}");
    assert_eq!(v["peer"], a.as_str(), "{v}");
    assert!(v["transport"].is_null(), "{v}");
    assert!(v["credits"].is_null() && v["checksum"].is_null(), "{v}");
    assert_eq!(v["messages"], 0, "{v}");
    assert_eq!(v["ending"]["kind"], "failed", "{v}");
    assert!(
        v["ending"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("could not connect")),
        "{v}"
    );
    assert_eq!(v["exit_status"], 1, "{v}");
}

#[test]
fn a_resumed_session_counts_its_resume_on_both_ends() {
    if on_path("ss").is_none() {
        skip_or_fail(
            "ss (iproute2) is not installed: the session's connection is broken with ss -K",
        );
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("ss -K (socket destroy) needs root: the resumed session is not checked");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("server.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let (mut s, port) = server(&[
        "--once",
        "--quiet",
        "--out-json",
        out_arg,
        "--resume-timeout",
        "10",
    ]);
    let mut c = client(
        "client",
        port,
        &["--json", "-n", "100000000", "--resume-timeout", "10"],
    );
    c.wait_for_stderr("session established", SHORT);
    std::thread::sleep(Duration::from_millis(200));
    let pid = u32::try_from(c.pid().as_raw()).expect("a pid");
    ss::kill(pid, port, Conn::Data);
    // A kernel without socket destroy (CONFIG_INET_DIAG_DESTROY) lets ss -K do nothing.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !c.stderr().contains("the session broke") {
        if Instant::now() >= deadline {
            skip_or_fail("ss -K did not break the connection (a kernel without socket destroy?)");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_for_stderr("session resumed", SHORT);
    c.signal(Signal::SIGINT);
    assert_eq!(c.wait_code(SHORT), 130, "{}", c.report());
    let v = result_of(&c);
    assert_eq!(v["ending"]["kind"], "interrupted", "{v}");
    assert!(v["resumes"].as_u64().is_some_and(|n| n >= 1), "{v}");
    let code = s.wait_code(SHORT);
    let lines = file_results(&out);
    assert_eq!(lines.len(), 1, "{lines:?}\n{}", s.report());
    let w = &lines[0];
    assert_eq!(w["exit_status"], code, "{w}\n{}", s.report());
    assert_eq!(w["resumes"], v["resumes"], "client {v}\nserver {w}");
    assert_eq!(
        w["messages_resent"], v["messages_resent"],
        "client {v}\nserver {w}"
    );
    assert_eq!(w["messages"], v["messages"], "client {v}\nserver {w}");
}

#[test]
fn two_sessions_at_once_give_two_server_results_numbered_1_and_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("server.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let (mut s, port) = server(&[
        "--max-sessions",
        "2",
        "--json",
        "--quiet",
        "--out-json",
        out_arg,
    ]);
    let mut a = client("first", port, &["--json", "-n", "3000"]);
    let mut b = client(
        "second",
        port,
        &["--json", "-n", "3000", "--transport", "tcp"],
    );
    assert_eq!(a.wait_code(LONG), 0, "{}", a.report());
    assert_eq!(b.wait_code(LONG), 0, "{}", b.report());
    for (c, requested) in [(&a, "auto"), (&b, "tcp")] {
        let v = result_of(c);
        assert_eq!(v["role"], "client", "{v}");
        assert_eq!(v["transport_requested"], requested, "{v}");
        assert_eq!(v["messages"], 3000, "{v}");
        assert_eq!(v["ending"]["kind"], "finished", "{v}");
    }
    let mut lines = wait_for_lines(&out, 2, &s);
    lines.sort_by_key(|v| v["session"].as_u64());
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (n, v) in (1..).zip(&lines) {
        assert_eq!(v["role"], "server", "{v}");
        assert_eq!(v["session"], n, "{v}");
        assert_eq!(v["messages"], 3000, "{v}");
        assert_eq!(v["ending"]["kind"], "finished", "{v}");
        assert_eq!(v["exit_status"], 0, "{v}");
    }
    assert_ne!(lines[0]["peer"], lines[1]["peer"], "{lines:?}");
    // --json prints the same results on the server's stderr.
    let mut printed = results_of(&s);
    printed.sort_by_key(|v| v["session"].as_u64());
    assert_eq!(printed, lines, "stderr and the file differ\n{}", s.report());
    s.signal(Signal::SIGINT);
    s.wait_code(SHORT);
}

#[test]
fn a_client_refused_as_busy_reports_rejected_on_stderr_and_in_its_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("second.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let (mut s, port) = server(&["--quiet"]);
    let mut first = client("first", port, &["-n", "100000000"]);
    s.wait_for_stderr("session established", SHORT);
    let mut second = client(
        "second",
        port,
        &["--json", "--out-json", out_arg, "--connect-timeout", "1"],
    );
    assert_eq!(second.wait_code(SHORT), 4, "{}", second.report());
    let v = result_of(&second);
    assert_eq!(
        file_results(&out),
        vec![v.clone()],
        "the file and stderr differ"
    );
    assert_eq!(v["ending"]["kind"], "rejected", "{v}");
    assert!(
        v["ending"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("busy")),
        "{v}"
    );
    assert!(v["transport"].is_null(), "{v}");
    assert_eq!(v["exit_status"], 4, "{v}");
    first.kill();
}

#[test]
fn demo_reports_the_client_and_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let (code, _, err) = run(&["demo", "--json", "-n", "50", "--out-json", out_arg], LONG);
    assert_eq!(code, 0, "{err}");
    let mut printed = json_lines(&err);
    printed.iter().for_each(|v| validate_json(SESSION, v));
    let mut lines = file_results(&out);
    for all in [&mut printed, &mut lines] {
        all.sort_by(|x, y| x["role"].as_str().cmp(&y["role"].as_str()));
    }
    assert_eq!(printed, lines, "stderr and the file differ");
    assert_eq!(lines.len(), 2, "{err}");
    let (c, s) = (&lines[0], &lines[1]);
    assert_eq!(c["role"], "client", "{c}");
    assert!(c["session"].is_null(), "{c}");
    assert_eq!(s["role"], "server", "{s}");
    assert_eq!(s["session"], 1, "{s}");
    for v in [c, s] {
        assert_eq!(v["messages"], 50, "{v}");
        // "0" to "49": 10 one-digit and 40 two-digit messages.
        assert_eq!(v["bytes"], 90, "{v}");
        assert_eq!(v["ending"]["kind"], "finished", "{v}");
        assert_eq!(v["transport"], "tcp", "{v}");
    }
}

// ---------------------------------------------------------------------------------------
// bench

/// `bench --server 127.0.0.1:port`, once it listens.
fn bench_server() -> (Proc, u16) {
    let spawn = |port: u16| {
        start(
            "bench server",
            &["bench", "--server", &addr(port), "--once"],
        )
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// Runs `bench --client` with `args` against a fresh bench server: the client's stdout (the
/// server, which serves one run, must end with 0).
fn bench(args: &[&str]) -> String {
    let (mut s, port) = bench_server();
    let a = addr(port);
    let mut all = vec!["bench", "--client", a.as_str()];
    all.extend_from_slice(args);
    let (code, out, err) = run(&all, LONG);
    assert_eq!(code, 0, "bench {args:?}:\n{out}\n{err}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    out
}

/// The report `bench --json` printed (the whole of stdout), validated.
fn bench_report(args: &[&str]) -> Value {
    let out = bench(args);
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{out}"));
    validate_json(BENCH, &v);
    v
}

fn rows(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results")
}

#[test]
fn bench_bw_json_report_matches_the_schema() {
    let v = bench_report(&["--json", "-n", "200", "-s", "64"]);
    assert_eq!(v["mode"], "bw", "{v}");
    assert_eq!(v["transport"], "tcp", "{v}");
    assert!(v["device"].is_null(), "{v}");
    let r = rows(&v);
    assert_eq!(r.len(), 1, "{v}");
    assert_eq!(r[0]["bytes"], 64, "{v}");
    assert_eq!(r[0]["iterations"], 200, "{v}");
    assert_eq!(r[0]["unit"], "MiB/sec", "{v}");
    assert!(r[0].get("direction").is_none(), "{v}");
    assert!(r[0]["bw_average"].as_f64().is_some_and(|b| b > 0.0), "{v}");

    // The harness is live: the schema refuses this report made wrong.
    assert_schema_refuses(
        BENCH,
        &edited(&v, |v| remove(&mut v["results"][0], "unit")),
        "a row without its unit",
    );
    assert_schema_refuses(
        BENCH,
        &edited(&v, |v| v["mode"] = "lat".into()),
        "bw rows in a lat report",
    );
    assert_schema_refuses(
        BENCH,
        &edited(&v, |v| v["results"] = Value::Array(Vec::new())),
        "no rows",
    );
}

#[test]
fn bench_lat_json_report_matches_the_schema() {
    let v = bench_report(&["--json", "--mode", "lat", "-n", "200", "-s", "64", "-H"]);
    assert_eq!(v["mode"], "lat", "{v}");
    let r = rows(&v);
    assert_eq!(r.len(), 1, "{v}");
    assert_eq!(r[0]["iterations"], 200, "{v}");
    // The histogram holds every round trip.
    let counted: u64 = r[0]["histogram"]
        .as_array()
        .expect("histogram")
        .iter()
        .map(|b| b["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(counted, 200, "{v}");
    assert_schema_refuses(
        BENCH,
        &edited(&v, |v| {
            remove(&mut v["results"][0]["percentiles_us"], "p99")
        }),
        "percentiles without p99",
    );
}

#[test]
fn bench_bidirectional_json_report_has_the_summed_row_with_each_direction() {
    let v = bench_report(&["--json", "-b", "--report-gbits", "-n", "200", "-s", "64"]);
    let r = rows(&v);
    assert_eq!(r.len(), 1, "one summed row, as perftest prints: {v}");
    assert_eq!(r[0]["direction"], "both", "{v}");
    let directions: Vec<&str> = r[0]["directions"]
        .as_array()
        .map(|d| d.iter().filter_map(|x| x["direction"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(directions, ["client->server", "server->client"], "{v}");
    assert!(r.iter().all(|x| x["unit"] == "Gb/sec"), "{v}");
    assert_schema_refuses(
        BENCH,
        &edited(&v, |v| remove(&mut v["results"][0], "directions")),
        "a -b row without its directions",
    );
}

/// `bench --json --interval` with `args`: every stdout line is JSON, each validated; the
/// interval lines come first (at least two, their times rising), the report last. Returns
/// (intervals, report).
fn bench_lines(args: &[&str]) -> (Vec<Value>, Value) {
    let out = bench(args);
    let mut lines: Vec<Value> = out
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{out}"))
        })
        .collect();
    lines.iter().for_each(|v| validate_json(BENCH, v));
    let report = lines.pop().expect("a report line");
    assert!(
        report.get("mode").is_some(),
        "the last line is no report:\n{out}"
    );
    assert!(lines.len() >= 2, "too few interval lines:\n{out}");
    assert!(lines.iter().all(|v| v.get("interval").is_some()), "{out}");
    let times: Vec<f64> = lines
        .iter()
        .map(|v| v["interval"]["t_s"].as_f64().expect("t_s"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{out}");
    (lines, report)
}

#[test]
fn bench_bw_interval_json_lines_and_out_json_match_the_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bench.json");
    let file_arg = file.to_str().expect("utf-8");
    let args = [
        "--json",
        "-D",
        "1.6",
        "--interval",
        "0.5",
        "-s",
        "64",
        "--out-json",
        file_arg,
    ];
    let (intervals, report) = bench_lines(&args);
    assert!(
        intervals.iter().all(|v| v["interval"]["unit"] == "MiB/sec"),
        "{intervals:?}"
    );
    // --out-json holds the report alone (one JSON document).
    let text = std::fs::read_to_string(&file).expect("the --out-json file");
    let saved: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("--out-json is not one JSON object ({e}):\n{text}"));
    validate_json(BENCH, &saved);
    assert_eq!(saved, report, "--out-json and stdout differ");

    assert_schema_refuses(
        BENCH,
        &edited(&intervals[0], |v| v["interval"]["surprise"] = 1.into()),
        "an undocumented interval field",
    );
    assert_schema_refuses(
        BENCH,
        &edited(&intervals[0], |v| remove(&mut v["interval"], "t_s")),
        "an interval without its time",
    );
}

#[test]
fn bench_lat_interval_json_lines_match_the_schema() {
    let (intervals, report) = bench_lines(&[
        "--json",
        "--mode",
        "lat",
        "-D",
        "1.6",
        "--interval",
        "0.5",
        "-s",
        "64",
    ]);
    assert_eq!(report["mode"], "lat", "{report}");
    assert!(
        intervals
            .iter()
            .all(|v| v["interval"]["iterations"].as_u64().is_some()),
        "{intervals:?}"
    );
}

#[test]
fn bench_out_json_without_json_writes_the_report_and_prints_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bench.json");
    let file_arg = file.to_str().expect("utf-8");
    let out = bench(&["-n", "300", "-s", "64", "--out-json", file_arg]);
    assert!(
        !out.lines().any(|l| l.starts_with('{')),
        "no JSON on stdout without --json:\n{out}"
    );
    let text = std::fs::read_to_string(&file).expect("the --out-json file");
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("--out-json is not one JSON object ({e}):\n{text}"));
    validate_json(BENCH, &v);
    assert_eq!(rows(&v)[0]["iterations"], 300, "{v}");
}

// ---------------------------------------------------------------------------------------
// doctor

/// `doctor --json` with `args` (and `env`): (exit code, the report, validated).
fn doctor_with(args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    cmd.envs(env.iter().copied());
    let mut p = Proc::spawn("doctor", cmd);
    let code = p.wait_code(LONG);
    let out = p.stdout();
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{}", p.report()));
    validate_json(DOCTOR, &v);
    (code, v)
}

fn doctor(args: &[&str]) -> Value {
    let (code, v) = doctor_with(args, &[]);
    assert_eq!(code, 0, "{v}");
    v
}

#[test]
fn doctor_json_on_this_host_matches_the_schema() {
    let v = doctor(&[]);
    assert!(v["path"].is_null() && v["choice"].is_null(), "{v}");
    assert!(v.get("probe").is_none(), "{v}");
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| remove(v, "problems")),
        "no problems",
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["surprise"] = true.into()),
        "an undocumented field",
    );
}

/// The source address (and its interface) this host uses toward `peer`, as the kernel picks
/// it for a UDP socket; None without such a route (or only a loopback one).
fn source_toward(peer: Ipv4Addr) -> Option<(Ipv4Addr, String)> {
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    sock.connect((peer, 9)).ok()?;
    let std::net::IpAddr::V4(source) = sock.local_addr().ok()?.ip() else {
        return None;
    };
    if source.is_loopback() || source.is_unspecified() {
        return None;
    }
    let iface = nix::ifaddrs::getifaddrs()
        .ok()?
        .find(|ifa| {
            ifa.address
                .as_ref()
                .and_then(|a| a.as_sockaddr_in())
                .is_some_and(|a| a.ip() == source)
        })?
        .interface_name;
    Some((source, iface))
}

#[test]
fn doctor_json_toward_a_peer_on_a_fixture_with_a_roce_v2_gid_matches_the_schema() {
    // A documentation address (TEST-NET-2): only its route matters, nothing is sent.
    let peer = Ipv4Addr::new(198, 51, 100, 7);
    let Some((source, iface)) = source_toward(peer) else {
        skip_or_fail("no route from a non-loopback address toward 198.51.100.7: doctor --peer is not checked");
        return;
    };
    // mlx5_0 port 1 with a RoCE v2 GID for the source address, on its interface.
    let sysfs = FakeSysfs::new();
    sysfs.mlx5("mlx5_0", &iface, source.octets());
    let root = sysfs.root().to_str().expect("utf-8");
    // --paths: one more address beside the peer's (same route, so the same device) and a
    // loopback one (no RoCE GID: no choice); each gets its own path and choice, in order.
    let v = doctor(&[
        "--sysfs-root",
        root,
        "--peer",
        &peer.to_string(),
        "--paths",
        "198.51.100.8,127.0.0.1",
    ]);
    let paths = v["paths"].as_array().cloned().unwrap_or_default();
    assert_eq!(paths.len(), 2, "{v}");
    assert_eq!(paths[0]["path"]["peer"], "198.51.100.8", "{v}");
    assert_eq!(paths[0]["path"]["source"], source.to_string(), "{v}");
    assert_eq!(paths[0]["choice"]["device"], "mlx5_0", "{v}");
    assert_eq!(paths[1]["path"]["peer"], "127.0.0.1", "{v}");
    assert!(paths[1]["choice"].is_null(), "{v}");
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["paths"][0]["surprise"] = 1.into()),
        "an undocumented field of a path",
    );
    let mut text = Proc::spawn(
        "doctor",
        command(&[
            "doctor",
            "--sysfs-root",
            root,
            "--peer",
            &peer.to_string(),
            "--paths",
            "198.51.100.8",
        ]),
    );
    assert_eq!(text.wait_code(LONG), 0, "{}", text.report());
    let want = format!("--paths 1: path: source {source} on {iface} toward 198.51.100.8");
    assert!(
        text.stdout().contains(&want),
        "no '{want}'\n{}",
        text.report()
    );
    assert!(
        text.stdout()
            .contains("--paths 1: choice: device mlx5_0 port 1 gid-index 3"),
        "{}",
        text.report()
    );
    assert_eq!(v["path"]["peer"], peer.to_string(), "{v}");
    assert_eq!(v["path"]["source"], source.to_string(), "{v}");
    assert!(v["path"]["route"].is_object(), "{v}");
    assert_eq!(v["choice"]["device"], "mlx5_0", "{v}");
    assert_eq!(v["choice"]["gid_index"], 3, "{v}");
    assert_eq!(v["choice"]["gid_type"], "RoCE v2", "{v}");
    assert_eq!(v["choice"]["gid"], ipv4_gid(source.octets()), "{v}");
    assert_eq!(v["auto_transport"], v["transports"][0], "{v}");
    // The table lists the populated GIDs: the link-local pair and the IPv4 pair.
    assert_eq!(v["table"].as_array().map(Vec::len), Some(4), "{v}");
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["choice"]["gid"] = "::ffff:10.0.0.1".into()),
        "a GID not in sysfs notation",
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["path"]["route"]["surprise"] = 1.into()),
        "an undocumented route field",
    );
}

#[test]
fn doctor_json_from_a_local_address_on_a_fixture_matches_the_schema() {
    let sysfs = FakeSysfs::new();
    sysfs.mlx5("mlx5_0", "ens1f0", [10, 9, 0, 1]);
    let root = sysfs.root().to_str().expect("utf-8");
    let v = doctor(&["--sysfs-root", root, "--local-ip", "10.9.0.1"]);
    assert_eq!(v["path"]["source"], "10.9.0.1", "{v}");
    assert!(v["path"]["route"].is_null(), "{v}");
    assert_eq!(v["choice"]["netdev"], "ens1f0", "{v}");
    assert_eq!(v["ports"][0]["state"], "ACTIVE", "{v}");
}

#[test]
fn doctor_json_in_a_kubernetes_pod_matches_the_schema() {
    // A node with three devices carrying the pod's address on net1; the SR-IOV plugin gave
    // the pod mlx5_5; the RDMA subsystem in shared mode.
    let host = FakeHost::empty();
    let gid = ipv4_gid([10, 56, 0, 7]);
    for (n, dev) in [(0, "mlx5_0"), (4, "mlx5_4"), (5, "mlx5_5")] {
        host.sysfs().port(dev, 1, "4: ACTIVE", "Ethernet");
        host.sysfs().gid(dev, 1, 3, &gid, "RoCE v2", "net1");
        host.uverbs(n, dev);
    }
    host.netdev("net1");
    host.node("rdma_cm");
    host.node("uverbs5");
    host.write("sys/module/ib_core/parameters/netns_mode", "Y\n");
    let info = r#"{"0000:3b:00.3":{"generic":{"deviceID":"0000:3b:00.3"},"rdma":{"rdma_dev":"mlx5_5","uverbs":"/dev/infiniband/uverbs5","rdma_cm":"/dev/infiniband/rdma_cm"}}}"#;
    let dev_root = host.path("dev");
    let network_status = host.path("podnetinfo/annotations");
    let sys = host.path("sys");
    let (code, v) = doctor_with(
        &[
            "--sysfs-root",
            sys.to_str().expect("utf-8"),
            "--local-ip",
            "10.56.0.7",
        ],
        &[
            ("RDMA_CONTAINER_DEV_ROOT", dev_root.to_str().expect("utf-8")),
            (
                "RDMA_CONTAINER_NETWORK_STATUS",
                network_status.to_str().expect("utf-8"),
            ),
            ("PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO", info),
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_eq!(v["rdma_netns_mode"], "shared", "{v}");
    assert!(v["considered"].is_string(), "{v}");
    assert!(
        v["pod_resources"].as_array().is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    assert!(v["visible_devices"].is_array(), "{v}");
    assert!(
        v["dev_infiniband"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "{v}"
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["pod_resources"][0]["surprise"] = 1.into()),
        "an undocumented pod resource field",
    );
}

#[test]
fn doctor_json_with_a_probe_matches_the_schema() {
    // Over tcp: a real session with the server.
    let (mut s, port) = server(&["--once", "--transport", "tcp", "--quiet"]);
    let a = addr(port);
    let (code, v) = doctor_with(&["--probe", &a, "--transport", "tcp"], &[]);
    assert_eq!(code, 0, "{v}");
    let p = &v["probe"];
    assert_eq!(p["ok"], true, "{v}");
    assert_eq!(p["transport"], "tcp", "{v}");
    assert_eq!(p["peer"], a.as_str(), "{v}");
    assert!(p["failure"].is_null() && p["error"].is_null(), "{v}");
    assert_eq!(p["exit_status"], 0, "{v}");
    assert_eq!(v["path"]["peer"], "127.0.0.1", "{v}");
    assert_eq!(s.wait_code(LONG), 0, "{}", s.report());
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["probe"]["surprise"] = 1.into()),
        "an undocumented probe field",
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&v, |v| v["probe"]["failure"] = "it broke".into()),
        "an unknown failure",
    );

    // With auto on loopback: RDMA is not possible, said as a failed probe and status 5.
    let (_s, port) = server(&["--quiet"]);
    let a = addr(port);
    let (code, v) = doctor_with(&["--probe", &a], &[]);
    assert_eq!(code, 5, "{v}");
    let p = &v["probe"];
    assert_eq!(p["ok"], false, "{v}");
    assert_eq!(p["failure"], "rdma_not_possible", "{v}");
    assert_eq!(p["exit_status"], 5, "{v}");
    assert!(
        p["explanation"].is_string() && p["error"].is_string(),
        "{v}"
    );
}
