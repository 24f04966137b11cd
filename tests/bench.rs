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
