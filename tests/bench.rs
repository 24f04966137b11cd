//! `rdma-container bench` end to end over loopback (tcp): bw and lat print perftest's columns,
//! `--json` carries the same figures (each output checked against
//! docs/bench-result.schema.json), `-a` runs every size, the server serves clients one after
//! another until Ctrl-C (`--once`: one client's run), `-b` prints one summed row, messages
//! above 10 MiB are measured, and flags that do not apply are refused.

mod common;

use std::os::unix::process::CommandExt;

use common::{free_port, listening_on_free_port, validate_json, Proc, LONG, SHORT};
use nix::sys::signal::Signal;

/// The schema every `bench --json` line matches.
const SCHEMA: &str = "docs/bench-result.schema.json";

/// A bench server for one client's run (`--once`), once it listens.
fn server() -> (Proc, u16) {
    server_with(&["--once"])
}

/// A bench server with `extra` on a free port, once it listens, and its port.
fn server_with(extra: &[&str]) -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["bench", "--server", addr.as_str(), "--transport", "tcp"];
        args.extend_from_slice(extra);
        common::start("bench-server", &args)
    };
    listening_on_free_port(spawn, "bench server listening", SHORT)
}

/// The one JSON object of a `--json` run's stdout, checked against the schema.
fn report(out: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    validate_json(SCHEMA, &v);
    v
}

fn client(port: u16, extra: &[&str]) -> (i32, String, String) {
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["bench", "--client", addr.as_str(), "--transport", "tcp"];
    args.extend_from_slice(extra);
    common::run(&args, LONG)
}

#[test]
fn bw_prints_perftest_columns_and_a_once_server_exits_after_the_last_size() {
    let (mut s, port) = server();
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

/// `--qps 3` (issue 39): the run is striped over three data connections; the header says
/// "Number of qps : 3" as perftest does, the JSON (checked against the schema) has `qps`,
/// and a run without it says 1.
#[test]
fn a_striped_run_says_its_queue_pairs_in_the_header_and_the_json() {
    let (mut s, port) = server();
    let (code, out, err) = client(
        port,
        &["-s", "4096", "-n", "300", "--credits", "8", "--qps", "3"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Number of qps   : 3"), "{out}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let (mut s, port) = server();
    let (code, out, err) = client(port, &["-s", "64", "-n", "100", "--qps", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report(&out)["qps"], 2, "{out}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let (mut s, port) = server();
    let (code, out, err) = client(port, &["-s", "64", "-n", "100", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report(&out)["qps"], 1, "{out}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}

#[test]
fn lat_and_json_report_the_same_kind_of_figures() {
    let (mut s, port) = server();
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
    let (mut s, port) = server();
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
    let (mut s, port) = server();
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
    let (mut s, port) = server();
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
    let (mut s, port) = server();
    let (code, _, err) = client(port, &["--mode", "lat", "-s", "2", "-n", "50"]);
    assert_eq!(code, 0, "{err}");
    s.wait_for_stderr("polls 1000000 us before sleeping, as the client", SHORT);
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let (mut s, port) = server();
    let (code, _, err) = client(port, &["-s", "64", "-n", "50"]);
    assert_eq!(code, 0, "{err}");
    s.wait_for_stderr("sleeps when idle", SHORT);
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
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

/// Issue 35, item 8: the server serves clients one after another (a second client used to meet
/// "connection refused" for its whole --connect-timeout) and stops at Ctrl-C with 130, as the
/// CLI's `--server` does.
#[test]
fn the_server_serves_clients_one_after_another_until_ctrl_c() {
    let (mut s, port) = server_with(&[]);
    let runs: [&[&str]; 3] = [
        &["-s", "1024", "-n", "200"],
        &["--mode", "lat", "-s", "64", "-n", "100"],
        &["-s", "512", "-n", "100", "--json"],
    ];
    for (i, extra) in runs.iter().enumerate() {
        let mut args = vec!["--connect-timeout", "5"];
        args.extend_from_slice(extra);
        let (code, out, err) = client(port, &args);
        assert_eq!(code, 0, "client {}: {err}\n{}", i + 1, s.report());
        assert!(out.contains("bytes"), "client {}: {out}", i + 1);
    }
    assert!(
        s.try_status().is_none(),
        "the server ended after its clients:\n{}",
        s.report()
    );
    s.signal(Signal::SIGINT);
    assert_eq!(s.wait_code(SHORT), 130, "{}", s.report());
}

/// `--once`: one client's run (all its sizes), then the server exits with that run's status.
#[test]
fn once_serves_one_run_and_exits_with_its_status() {
    let (mut s, port) = server_with(&["--once"]);
    let (code, _, err) = client(port, &["-a", "--max-msg-size", "64", "-n", "20"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert_eq!(
        s.stderr().matches("bench session: Bw").count(),
        6,
        "2 .. 64 B, a session each:\n{}",
        s.report()
    );

    // A run that fails ends a --once server with the failure's status (not 0), and the client
    // says why.
    let (mut s, port) = server_with(&["--once", "--max-msg-size", "1024"]);
    let (code, _, err) = client(port, &["-s", "65536", "-n", "10"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("takes messages up to 1024 bytes"), "{err}");
    let status = s.wait_code(SHORT);
    assert!(status != 0 && status != 130, "{status}: {}", s.report());
}

/// `-b` prints perftest's one row per size, both directions added (bandwidth, peak, message
/// rate); the JSON row is that sum, with each direction's own figures under `directions`.
#[test]
fn bidirectional_prints_one_summed_row_and_json_has_each_direction_and_the_sum() {
    let (code, out, err) = against_server(&["-b", "-s", "2048", "-n", "500"]);
    assert_eq!(code, 0, "{err}");
    let rows = final_rows(&out, "2048");
    assert_eq!(rows.len(), 1, "one summed row:\n{out}");
    let fields: Vec<f64> = rows[0]
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(fields.len(), 5, "perftest's five columns: {}", rows[0]);
    assert_eq!(fields[1], 500.0, "{}", rows[0]);

    let (code, out, err) = against_server(&["-b", "-s", "2048", "-n", "500", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = report(&out);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "one row per size: {v}");
    let sum = &results[0];
    assert_eq!(sum["direction"], "both", "{sum}");
    assert_eq!(sum["iterations"], 500, "{sum}");
    let each = sum["directions"].as_array().expect("directions");
    let names: Vec<&str> = each
        .iter()
        .map(|r| r["direction"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["client->server", "server->client"], "{sum}");
    for r in each {
        assert_eq!(r["iterations"], 500, "{r}");
        assert!(r["bw_average"].as_f64().unwrap() > 0.0, "{r}");
    }
    for field in ["bw_average", "bw_peak", "msg_rate_mpps"] {
        let total = sum[field].as_f64().unwrap();
        let parts: f64 = each.iter().map(|r| r[field].as_f64().unwrap()).sum();
        assert!(
            (total - parts).abs() <= 1e-9 * total.max(1.0),
            "{field}: {total} is not {parts}: {sum}"
        );
    }
}

/// `-b --interval --json`: each interval line says which direction it measured (the client's
/// sent count: client->server).
#[test]
fn bidirectional_interval_json_lines_say_which_direction_they_measure() {
    let (code, out, err) = against_server(&[
        "-b",
        "-s",
        "1024",
        "-D",
        "0.8",
        "--interval",
        "0.2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    lines.iter().for_each(|v| validate_json(SCHEMA, v));
    let (last, intervals) = lines.split_last().unwrap();
    assert!(!intervals.is_empty(), "{out}");
    for i in intervals {
        assert_eq!(i["interval"]["direction"], "client->server", "{i}");
    }
    assert_eq!(last["results"][0]["direction"], "both", "{last}");
}

/// A bw run times the messages after the first arrival: `-n 1` has nothing to time (it
/// reported 0.0) and is refused with status 2 and one line; `-n 2` is measured.
#[test]
fn a_bw_run_of_one_message_is_refused_and_two_are_measured() {
    let (code, out, err) = common::run(
        &[
            "bench",
            "--client",
            "127.0.0.1:9",
            "--transport",
            "tcp",
            "-n",
            "1",
            "--connect-timeout",
            "0.2",
        ],
        SHORT,
    );
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("-n 1") && err.contains("at least 2"), "{err}");

    let (code, out, err) = against_server(&["-s", "1024", "-n", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = report(&out);
    let r = &v["results"][0];
    assert_eq!(r["iterations"], 2, "{r}");
    assert!(r["bw_average"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["msg_rate_mpps"].as_f64().unwrap() > 0.0, "{r}");

    // A ping-pong of one round trip is a measurement.
    let (code, _, err) = against_server(&["--mode", "lat", "-s", "8", "-n", "1"]);
    assert_eq!(code, 0, "{err}");
}

/// Nothing above 10 MiB could be measured (the server capped every session there): 64 MiB
/// messages over tcp, two credits (about 320 MiB on this host for both ends).
#[test]
fn messages_above_10_mib_are_measured() {
    let size = (64 << 20).to_string();
    let (code, out, err) = against_server(&["-s", &size, "-n", "3", "--credits", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = report(&out);
    let r = &v["results"][0];
    assert_eq!(r["bytes"], 64 << 20, "{r}");
    assert_eq!(r["iterations"], 3, "{r}");
    assert!(r["bw_average"].as_f64().unwrap() > 0.0, "{r}");
}

/// 1 GiB messages parse on both ends; where the memory is not there (here: an address-space
/// limit of 2 GiB on the client) the run is refused with the figures, status 2, never a panic
/// or an allocator abort.
#[test]
fn a_1_gib_message_is_accepted_and_refused_for_memory_without_a_panic() {
    let gib = (1u64 << 30).to_string();
    let (mut s, port) = server_with(&["--once", "--max-msg-size", &gib]);
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = common::command(&[
        "bench",
        "--client",
        &addr,
        "--transport",
        "tcp",
        "-s",
        &gib,
        "-n",
        "2",
        "--connect-timeout",
        "5",
    ]);
    let limit: u64 = 2 << 30;
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, limit, limit)
                .map_err(std::io::Error::from)
        });
    }
    let mut c = Proc::spawn("bench-client", cmd);
    let status = c.wait(LONG);
    assert_eq!(status.code(), Some(2), "{}", c.report());
    let err = c.stderr();
    assert!(err.contains("RLIMIT_AS"), "{}", c.report());
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation of"),
        "{}",
        c.report()
    );
    s.kill();
}

/// A limit that cannot apply to the mode (perftest would ignore it silently) is refused with
/// status 2 and one line naming it, before anything connects; so is `-b` on a latency run and
/// a limit on the server (the client checks them).
#[test]
fn flags_that_do_not_apply_to_the_mode_are_refused_with_status_2() {
    let cases: [(&[&str], &str); 5] = [
        (&["--limit-lat", "5"], "--limit-lat"),
        (&["-b", "--limit-lat", "5"], "--limit-lat"),
        (&["--mode", "lat", "--limit-bw", "1"], "--limit-bw"),
        (
            &["--mode", "lat", "--limit-msgrate", "1"],
            "--limit-msgrate",
        ),
        (&["--mode", "lat", "-b"], "--bidirectional"),
    ];
    for (extra, flag) in cases {
        let mut args = vec![
            "bench",
            "--client",
            "127.0.0.1:9",
            "--transport",
            "tcp",
            "--connect-timeout",
            "0.2",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = common::run(&args, SHORT);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(out.is_empty(), "{extra:?}: {out}");
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: one line: {err}");
        assert!(err.contains(flag), "{extra:?}: {err}");
    }
    let addr = format!("127.0.0.1:{}", free_port());
    let (code, _, err) = common::run(&["bench", "--server", &addr, "--limit-bw", "1"], SHORT);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--limit-bw") && !err.contains("listening"),
        "{err}"
    );
}

/// A bench server answers `doctor --probe` (one session, not a bench client's two) at once, and
/// goes on serving: a bench client after the probe runs as usual.
#[test]
fn a_probe_against_the_bench_server_passes_and_the_server_serves_on() {
    let (mut s, port) = server_with(&[]);
    let addr = format!("127.0.0.1:{port}");
    let (code, out, err) = common::run(
        &["doctor", "--json", "--probe", &addr, "--transport", "tcp"],
        LONG,
    );
    let probe: serde_json::Value = serde_json::from_str(&out)
        .map(|v: serde_json::Value| v["probe"].clone())
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}\n{err}"));
    assert_eq!(
        (code, &probe["ok"]),
        (0, &serde_json::json!(true)),
        "{probe}\n{}",
        s.report()
    );
    // answered as a probe, not left waiting for a second session
    s.wait_for_stderr(
        "doctor --probe from 127.0.0.1: 2 message(s), answered",
        SHORT,
    );
    let (code, out, err) = client(port, &["-s", "64", "-n", "50"]);
    assert_eq!(code, 0, "{err}\n{}", s.report());
    assert!(out.contains("bytes"), "{out}");
    assert!(s.try_status().is_none(), "{}", s.report());
}

/// `--in-place` sends with `send_in_place` (nothing copied): the same rows as a copying run,
/// with a key and checksums on (the checksum is sealed over what the slot holds), the JSON
/// saying how it sent; a lat run refuses it.
#[test]
fn in_place_runs_bw_with_send_in_place_and_says_so_and_lat_refuses_it() {
    let (code, out, err) = against_server(&[
        "-s",
        "65536",
        "-n",
        "300",
        "--credits",
        "8",
        "--checksum",
        "crc32c",
        "--in-place",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = report(&out);
    assert_eq!(v["send"], "in_place", "{v}");
    assert_eq!(v["results"][0]["iterations"], 300, "{v}");
    let (code, out, err) = against_server(&["-s", "64", "-n", "300", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report(&out)["send"], "copy");
    let (code, _, err) = common::run(
        &[
            "bench",
            "--client",
            "127.0.0.1:9",
            "--mode",
            "lat",
            "--in-place",
        ],
        SHORT,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--in-place is for --mode bw"), "{err}");
}
