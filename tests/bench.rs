//! `rdma-container bench` end to end over loopback (tcp): bw and lat print perftest's columns,
//! `--json` carries the same figures, `-a` runs every size, and the server exits after the
//! client's last size.

mod common;

use common::{free_port, Proc, LONG, SHORT};

fn server(port: u16) -> Proc {
    let addr = format!("127.0.0.1:{port}");
    let mut p = common::start(
        "bench-server",
        &["bench", "--server", &addr, "--transport", "tcp"],
    );
    p.wait_for_stderr("bench server listening", SHORT);
    p
}

fn client(port: u16, extra: &[&str]) -> (i32, String, String) {
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["bench", "--client", addr.as_str(), "--transport", "tcp"];
    args.extend_from_slice(extra);
    common::run(&args, LONG)
}

#[test]
fn bw_prints_perftest_columns_and_the_server_exits_after_the_last_size() {
    let port = free_port();
    let mut s = server(port);
    let (code, out, err) = client(port, &["-s", "1024", "-n", "300", "--credits", "8"]);
    assert_eq!(code, 0, "{err}");
    for header in [
        "#bytes",
        "#iterations",
        "BW peak[MiB/sec]",
        "BW average[MiB/sec]",
        "MsgRate[Mpps]",
        "Credits (depth) : 8",
        "Transport       : tcp",
    ] {
        assert!(out.contains(header), "missing {header:?} in:\n{out}");
    }
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("1024 "))
        .unwrap_or_else(|| panic!("no result row:\n{out}"));
    let fields: Vec<f64> = row.split_whitespace().map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields[1], 300.0, "{row}");
    assert!(fields[3] > 0.0 && fields[4] > 0.0, "{row}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}

#[test]
fn lat_and_json_report_the_same_kind_of_figures() {
    let port = free_port();
    let mut s = server(port);
    let (code, out, err) = client(
        port,
        &[
            "--mode",
            "lat",
            "-s",
            "2",
            "-n",
            "200",
            "--json",
            "--report-gbits",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["mode"], "lat");
    assert_eq!(v["transport"], "tcp");
    let r = &v["results"][0];
    assert_eq!(r["iterations"], 200);
    let min = r["t_min_us"].as_f64().unwrap();
    let typical = r["t_typical_us"].as_f64().unwrap();
    let max = r["t_max_us"].as_f64().unwrap();
    assert!(0.0 < min && min <= typical && typical <= max, "{r}");
    assert!(r["p99_us"].as_f64().unwrap() <= max, "{r}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}

#[test]
fn all_sizes_run_one_session_each_and_write_the_json_file() {
    let port = free_port();
    let mut s = server(port);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bench.json");
    let (code, out, err) = client(
        port,
        &["-a", "-n", "3", "--out-json", file.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}\n{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let sizes: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=23).map(|k| 1u64 << k).collect();
    assert_eq!(sizes, expected, "2 B .. 8 MiB");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}

#[test]
fn bench_refuses_nonsense_with_a_clear_error() {
    let (code, _, err) = common::run(
        &["bench", "--client", "127.0.0.1:9", "-n", "5", "-D", "1"],
        SHORT,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, _, err) = common::run(
        &[
            "bench",
            "--client",
            "127.0.0.1:1",
            "--connect-timeout",
            "0.2",
        ],
        SHORT,
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot start a benchmark session"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Runs a client with `extra` against a fresh server and checks that the server exits 0.
fn against_server(extra: &[&str]) -> (i32, String, String) {
    let port = free_port();
    let mut s = server(port);
    let result = client(port, extra);
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    result
}

/// A row of the human table whose first field is `size` and that is not an interval row.
fn final_rows<'a>(out: &'a str, size: &str) -> Vec<&'a str> {
    out.lines()
        .filter(|l| l.trim_start().starts_with(&format!("{size} ")) && !l.contains("(interval"))
        .collect()
}

#[test]
fn bidirectional_reports_a_row_for_each_direction_measured_where_it_arrives() {
    let (code, out, err) = against_server(&["-b", "-s", "2048", "-n", "500", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let rows = v["results"].as_array().unwrap();
    let directions: Vec<&str> = rows
        .iter()
        .map(|r| r["direction"].as_str().unwrap())
        .collect();
    assert_eq!(directions, ["client->server", "server->client"], "{v}");
    for r in rows {
        assert_eq!(r["iterations"], 500, "{r}");
        assert!(r["bw_average"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn a_duration_with_an_interval_prints_interval_rows_then_the_final_one() {
    let (code, out, err) = against_server(&["-s", "1024", "-D", "1.2", "--interval", "0.25"]);
    assert_eq!(code, 0, "{err}");
    let intervals = out
        .lines()
        .filter(|l| l.contains("(interval, sent)"))
        .count();
    assert!(
        (2..=5).contains(&intervals),
        "{intervals} interval rows:\n{out}"
    );
    assert_eq!(final_rows(&out, "1024").len(), 1, "{out}");

    // JSON lines: each interval, then the report, one line each.
    let (code, out, err) =
        against_server(&["-s", "1024", "-D", "0.8", "--interval", "0.2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (last, intervals) = lines.split_last().unwrap();
    assert!(!intervals.is_empty(), "{out}");
    for i in intervals {
        assert!(i["interval"]["messages"].as_u64().unwrap() > 0, "{i}");
    }
    assert_eq!(last["results"][0]["bytes"], 1024, "{last}");
}

#[test]
fn run_infinitely_runs_until_ctrl_c_and_then_reports_the_whole_run() {
    let port = free_port();
    let mut s = server(port);
    let addr = format!("127.0.0.1:{port}");
    let mut c = common::start(
        "bench-client",
        &[
            "bench",
            "--client",
            &addr,
            "--transport",
            "tcp",
            "-s",
            "512",
            "--run-infinitely",
            "--interval",
            "0.2",
        ],
    );
    c.wait_for_stdout_lines(14, LONG);
    assert!(
        c.try_status().is_none(),
        "ended on its own:\n{}",
        c.report()
    );
    c.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    let out = c.stdout();
    assert!(out.contains("(interval, sent)"), "{out}");
    let row = final_rows(&out, "512");
    assert_eq!(row.len(), 1, "{out}");
    let fields: Vec<f64> = row[0]
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert!(fields[1] > 0.0 && fields[3] > 0.0, "{}", row[0]);
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}

#[test]
fn limits_fail_with_status_6_and_a_clear_line_and_pass_when_met() {
    let (code, out, err) = against_server(&[
        "-s",
        "1024",
        "-n",
        "300",
        "--limit-bw",
        "100000",
        "--limit-msgrate",
        "0.000001",
    ]);
    assert_eq!(code, 6, "{err}\n{out}");
    assert!(
        err.contains("FAILED: 1024 B: BW average") && err.contains("below --limit-bw 100000"),
        "{err}"
    );
    assert!(
        !err.contains("--limit-msgrate"),
        "the met limit is not reported: {err}"
    );
    assert_eq!(
        final_rows(&out, "1024").len(),
        1,
        "results still printed:\n{out}"
    );

    let lat_limited = |usec: &str| {
        against_server(&["--mode", "lat", "-s", "2", "-n", "100", "--limit-lat", usec])
    };
    let (code, _, err) = lat_limited("0.001");
    assert_eq!(code, 6, "{err}");
    assert!(err.contains("is above --limit-lat 0.001"), "{err}");
    let (code, _, err) = lat_limited("1000000");
    assert_eq!(code, 0, "{err}");
}

#[test]
fn lat_histogram_has_percentiles_and_buckets_that_hold_every_round_trip() {
    let (code, out, err) = against_server(&["--mode", "lat", "-s", "8", "-n", "300", "-H"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Percentiles of 8 B"), "{out}");
    assert!(out.contains("Histogram of 8 B"), "{out}");

    let (code, out, err) = against_server(&["--mode", "lat", "-s", "8", "-n", "300", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let r = &v["results"][0];
    let p = &r["percentiles_us"];
    let (p50, p99, max) = (
        p["p50"].as_f64().unwrap(),
        p["p99"].as_f64().unwrap(),
        p["max"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{p}");
    let buckets = r["histogram"].as_array().unwrap();
    let total: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 300, "{r}");
    for b in buckets {
        assert!(
            b["from_ns"].as_u64().unwrap() < b["to_ns"].as_u64().unwrap(),
            "{b}"
        );
    }
}

#[test]
fn the_server_polls_as_its_client_does() {
    let port = free_port();
    let mut s = server(port);
    let (code, _, err) = client(port, &["--mode", "lat", "-s", "2", "-n", "50"]);
    assert_eq!(code, 0, "{err}");
    s.wait_for_stderr("polls 1000000 us before sleeping, as the client", SHORT);
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let port = free_port();
    let mut s = server(port);
    let (code, _, err) = client(port, &["-s", "64", "-n", "50"]);
    assert_eq!(code, 0, "{err}");
    s.wait_for_stderr("sleeps when idle", SHORT);
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}

/// `bench --mode lat` held against a clock read around the whole client run (issue 32): the
/// round trips it reports (twice the half round trip, times the iterations) must account for
/// the time a longer run takes over a short one. Two runs, `SHORT_RUN` and `LONG_RUN` round
/// trips: what they share (start-up, handshake, teardown) cancels in the difference, so a
/// latency reported at half or twice its value (a ratio near 0.5 or 2) fails.
#[test]
fn lat_figures_agree_with_a_clock_around_the_whole_run() {
    const SHORT_RUN: u64 = 200;
    const LONG_RUN: u64 = 20_200;
    let timed = |iters: u64| {
        let port = free_port();
        let mut s = server(port);
        let n = iters.to_string();
        let started = std::time::Instant::now();
        let (code, out, err) = client(port, &["--mode", "lat", "-s", "64", "-n", &n, "--json"]);
        let wall = started.elapsed().as_secs_f64();
        assert_eq!(code, 0, "{err}");
        assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
        let report: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON report");
        let row = &report["results"][0];
        let measured = row["iterations"].as_u64().expect("iterations");
        let half_rtt_us = row["t_avg_us"].as_f64().expect("t_avg_us");
        (wall, measured as f64 * 2.0 * half_rtt_us / 1e6)
    };
    let (wall_short, reported_short) = timed(SHORT_RUN);
    let (wall_long, reported_long) = timed(LONG_RUN);
    let ratio = (reported_long - reported_short) / (wall_long - wall_short);
    eprintln!(
        "clock: {wall_short:.3} s and {wall_long:.3} s; reported round trips {reported_short:.3} s \
and {reported_long:.3} s; ratio {ratio:.2}"
    );
    assert!(
        (0.6..=1.25).contains(&ratio),
        "bench lat's round trips account for {ratio:.2} of the extra wall-clock time of {} more \
round trips",
        LONG_RUN - SHORT_RUN
    );
}

/// `--json` is JSON lines only (issue 35, item 8): the report is one line, as each interval
/// report before it, so `jq -c`, a log shipper or a line reader takes stdout as it is.
#[test]
fn json_output_is_one_object_per_line() {
    for extra in [&["-n", "200"][..], &["--mode", "lat", "-n", "200"]] {
        let mut args = vec!["-s", "64", "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = against_server(&args);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "one report line for {extra:?}:\n{out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
        assert!(v["results"].is_array(), "{v}");
    }
}
