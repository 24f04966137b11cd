//! `--metrics`: the real binary serving Prometheus metrics while a server and a client run
//! over 127.0.0.1 (or `RDMA_TEST_ADDR`, on the transport `RDMA_TEST_TRANSPORT` selects), scraped
//! over a raw TCP connection during a session and after it.
//!
//! Also the library's figure behind `rdma_container_credit_wait_seconds_total`:
//! `RdmaSink::credit_wait`.
//!
//! Nothing here depends on timing: a count read while the session runs is compared with what
//! the server had printed before (a message is counted before it is printed), and exact counts
//! are read only after the server's summary line (counted before it is logged).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{
    messages_after, run, skip_or_fail, test_config, test_ip, test_listen_addr, transport_args,
    FakeSysfs, Proc, SHORT,
};
use nix::sys::signal::Signal;
use rdma_container::{Config, Error, Listener, RdmaSink};

/// The endless client: far more messages than it can send during a test.
const ENDLESS: &str = "100000000";
/// What the binary logs when it serves metrics; the address follows.
const SERVING: &str = "metrics: serving http://";

/// The binary under test with the transport under test and `extra` arguments.
fn start(name: &str, mode: &str, port: u16, extra: &[&str]) -> Proc {
    let addr = format!("{}:{port}", test_ip());
    let transport = transport_args(&[]);
    let mut args = vec![mode, addr.as_str()];
    args.extend(transport.iter().map(String::as_str));
    args.extend_from_slice(extra);
    common::start(name, &args)
}

/// Waits until `p` serves metrics and returns the address it logged.
fn metrics_addr(p: &mut Proc) -> SocketAddr {
    p.wait_for_stderr(SERVING, SHORT);
    let stderr = p.stderr();
    let (_, rest) = stderr.split_once(SERVING).expect("waited for it");
    let addr = rest.split("/metrics").next().unwrap_or_default();
    addr.parse()
        .unwrap_or_else(|e| panic!("{addr:?} is not an address ({e})\n{}", p.report()))
}

/// One HTTP request for `path`: (status line, body).
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let (status, _, body) = get_with_head(addr, path);
    (status, body)
}

/// One HTTP request for `path`: (status line, the whole head, body).
fn get_with_head(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics server");
    stream.set_read_timeout(Some(SHORT)).expect("SO_RCVTIMEO");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the whole response (the server closes)");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of the head in {response:?}"));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, head.to_owned(), body.to_owned())
}

/// The metrics text from `addr`.
fn scrape(addr: SocketAddr) -> String {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(body.ends_with("# EOF\n"), "not a whole exposition:\n{body}");
    body
}

/// The value of the sample `series` (name and labels exactly as exposed) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

const RECEIVED: &str = "rdma_container_messages_total{direction=\"received\"}";
const RECEIVED_BYTES: &str = "rdma_container_bytes_total{direction=\"received\"}";
const SENT: &str = "rdma_container_messages_total{direction=\"sent\"}";
const ACTIVE: &str = "rdma_container_sessions_active";
const END_OF_STREAM: &str = "rdma_container_sessions_total{outcome=\"end_of_stream\"}";
const REFUSED: &str = "rdma_container_sessions_total{outcome=\"refused\"}";
const SERVER_REFUSALS: &str = "rdma_container_handshakes_refused_total{by=\"server\"}";
const CREDIT_WAIT: &str = "rdma_container_credit_wait_seconds_total";
/// A port counter the test writes into the fixture sysfs of the doca simulator's mlx5_0.
const PORT_RCV_DATA: &str =
    "rdma_container_port_counters_total{device=\"mlx5_0\",port=\"1\",counter=\"port_rcv_data\"}";

/// The fixture sysfs the transport under test uses, when it is one (doca on the simulator).
fn fixture_sysfs() -> Option<PathBuf> {
    let args = transport_args(&[]);
    let at = args.iter().position(|a| a == "--sysfs-root")?;
    args.get(at + 1).map(PathBuf::from)
}

#[test]
fn a_scrape_during_and_after_a_session_counts_its_messages_refusals_and_end() {
    // On the simulator the session runs on mlx5_0 port 1 of a fixture tree: give that port a
    // counter, which the scrapes must show.
    let fixture = fixture_sysfs();
    if let Some(root) = &fixture {
        FakeSysfs::at(root).write(
            "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data",
            "4242\n",
        );
    }
    let (mut server, port) = common::server("server", &["--metrics", "127.0.0.1:0"]);
    let server_metrics = metrics_addr(&mut server);

    let before = scrape(server_metrics);
    assert_eq!(sample(&before, RECEIVED), 0.0);
    assert_eq!(sample(&before, ACTIVE), 0.0);
    assert_eq!(sample(&before, END_OF_STREAM), 0.0);
    let (status, _) = get(server_metrics, "/");
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    let mut client = start(
        "client",
        "--client",
        port,
        &[
            "--connect-timeout",
            "10",
            "--count",
            ENDLESS,
            "--metrics",
            "0",
        ],
    );
    let client_metrics = metrics_addr(&mut client);
    server.wait_for_stdout_lines(100, SHORT);

    // During the session: at least what was printed before the scrape has been counted.
    let printed = server.stdout_lines();
    let during = scrape(server_metrics);
    assert!(
        sample(&during, RECEIVED) >= printed as f64,
        "{printed} lines printed, fewer counted:\n{during}"
    );
    assert_eq!(sample(&during, ACTIVE), 1.0, "{during}");
    if fixture.is_some() {
        assert_eq!(sample(&during, PORT_RCV_DATA), 4242.0, "{during}");
    } else if common::expected_transport() == "tcp" {
        assert!(
            !during.contains("port_counters"),
            "tcp has no port:\n{during}"
        );
    }
    // The client counts what it sent: message n-1 arrived, so sends 0..n-2 had returned.
    let printed = server.stdout_lines();
    let sent = scrape(client_metrics);
    assert!(
        sample(&sent, SENT) + 1.0 >= printed as f64,
        "{printed} lines printed, the client counted fewer sent:\n{sent}"
    );
    assert!(sample(&sent, CREDIT_WAIT) >= 0.0);
    assert_eq!(sample(&sent, ACTIVE), 1.0, "{sent}");

    // A second client while the session runs is refused as busy, and counted (its connect
    // timeout is shorter than the client's first pause after a busy answer: it asks once).
    let mut busy = start(
        "busy client",
        "--client",
        port,
        &["--connect-timeout", "0.04", "--count", "1"],
    );
    assert_eq!(busy.wait_code(SHORT), 4, "{}", busy.report());
    assert!(busy.stderr().contains("busy"), "{}", busy.report());
    let refused = scrape(server_metrics);
    assert_eq!(sample(&refused, SERVER_REFUSALS), 1.0, "{refused}");
    assert_eq!(sample(&refused, REFUSED), 1.0, "{refused}");

    // Ctrl-C on the client ends the stream cleanly; after the server's summary every count
    // is exact.
    client.signal(Signal::SIGINT);
    assert_eq!(client.wait_code(SHORT), 130, "{}", client.report());
    server.wait_for_stderr("end of stream: received", SHORT);
    let stderr = server.stderr();
    let received = messages_after(&stderr, "received")
        .unwrap_or_else(|| panic!("no summary count\n{}", server.report()));
    let bytes: u64 = (0..received).map(|i| i.to_string().len() as u64).sum();
    let after = scrape(server_metrics);
    assert_eq!(sample(&after, RECEIVED), received as f64, "{after}");
    assert_eq!(sample(&after, RECEIVED_BYTES), bytes as f64, "{after}");
    assert_eq!(sample(&after, END_OF_STREAM), 1.0, "{after}");
    assert_eq!(sample(&after, ACTIVE), 0.0, "{after}");
    assert_eq!(
        sample(&after, "rdma_container_errors_total{kind=\"peer_lost\"}"),
        0.0
    );
}

#[test]
fn metrics_on_a_non_loopback_address_are_served_and_logged_as_exposed() {
    let (mut server, _) = common::server("server", &["--metrics", "0.0.0.0:0"]);
    let addr = metrics_addr(&mut server);
    server.wait_for_stderr("exposed beyond this host", SHORT);
    let local = SocketAddr::from(([127, 0, 0, 1], addr.port()));
    assert_eq!(sample(&scrape(local), END_OF_STREAM), 0.0);
}

#[test]
fn a_metrics_address_that_is_neither_a_port_nor_ip_and_port_is_refused_with_the_forms() {
    for bad in ["nonsense", "70000", "localhost:9000"] {
        let (code, _, err) = run(&["--server", "127.0.0.1:1", "--metrics", bad], SHORT);
        assert_eq!(code, 2, "--metrics {bad}: {err}");
        assert!(err.contains("neither a port"), "--metrics {bad}: {err}");
    }
}

#[test]
fn credit_wait_grows_only_when_a_send_has_to_wait_for_the_receiver() {
    let config = test_config(Config::default().with_credits(1));
    let listener = Listener::bind(test_listen_addr(), &config).expect("bind");
    let addr = listener.local_addr();
    let (go, wait_for_go) = mpsc::channel::<()>();
    let receiver = std::thread::spawn(move || -> Result<u64, Error> {
        let mut src = listener.accept()?.accept_src()?;
        // Nothing is released (so no credit returns) until the sender has waited.
        let _ = wait_for_go.recv();
        while src.recv()?.is_some() {}
        Ok(src.received())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut sink =
        RdmaSink::connect(addr, &config.clone().with_stop(Some(stop.clone()))).expect("connect");
    sink.send(b"first").expect("the first send has its credit");
    assert_eq!(sink.credit_wait(), Duration::ZERO, "nothing waited yet");

    // The one credit is taken and the receiver holds it: the next send waits until the stop
    // flag interrupts it, and that wait counts.
    stop.store(true, Ordering::SeqCst);
    match sink.send(b"second") {
        Err(Error::Interrupted) => {}
        other => panic!("a send without credit must wait until interrupted, got {other:?}"),
    }
    let waited = sink.credit_wait();
    assert!(waited > Duration::ZERO, "the wait was not counted");

    stop.store(false, Ordering::SeqCst);
    go.send(()).expect("the receiver waits for the go");
    sink.send(b"second")
        .expect("the credit returns once the receiver reads");
    assert!(sink.credit_wait() >= waited);
    assert_eq!(sink.finish().expect("finish"), 2);
    let received = receiver
        .join()
        .expect("the receiver thread does not panic")
        .expect("the receiver sees the whole stream");
    assert_eq!(received, 2);
}

#[test]
fn the_listener_counts_a_client_refused_because_its_queue_is_full() {
    let config = Config::default().with_handshake_timeout(Duration::from_secs(2));
    let listener = Listener::bind(test_listen_addr(), &config).expect("bind");
    let addr = listener.local_addr();
    assert_eq!(listener.busy_refusals(), 0);
    // Nobody calls accept: MAX_QUEUED clients wait in the queue, the one after them is refused.
    // (The waiting clients give up after their handshake timeout, on their own threads.)
    for _ in 0..=rdma_container::MAX_QUEUED {
        let config = config.clone();
        std::thread::spawn(move || RdmaSink::connect(addr, &config).map(drop));
    }
    let deadline = std::time::Instant::now() + SHORT;
    while listener.busy_refusals() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no client was refused within {SHORT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(listener.busy_refusals(), 1);
}

#[test]
fn concurrent_sessions_are_each_counted_active_and_ended() {
    let (mut server, port) = common::server(
        "server",
        &["--max-sessions", "2", "--metrics", "127.0.0.1:0"],
    );
    let metrics = metrics_addr(&mut server);
    let endless = ["--connect-timeout", "10", "--count", ENDLESS];
    let mut clients = [
        start("client 1", "--client", port, &endless),
        start("client 2", "--client", port, &endless),
    ];
    // Both sessions have printed (each line starts with its session's number).
    let deadline = std::time::Instant::now() + SHORT;
    while !["1: ", "2: "]
        .iter()
        .all(|tag| server.stdout().lines().any(|l| l.starts_with(tag)))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "both sessions did not print within {SHORT:?}\n{}",
            server.report()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sample(&scrape(metrics), ACTIVE), 2.0);

    for client in &mut clients {
        client.signal(Signal::SIGINT);
        assert_eq!(client.wait_code(SHORT), 130, "{}", client.report());
    }
    let deadline = std::time::Instant::now() + SHORT;
    while server.stderr().matches("end of stream: received").count() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "two sessions did not end within {SHORT:?}\n{}",
            server.report()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let received: u64 = server
        .stderr()
        .split("end of stream: ")
        .skip(1)
        .filter_map(|rest| messages_after(rest, "received"))
        .sum();
    let after = scrape(metrics);
    assert_eq!(sample(&after, END_OF_STREAM), 2.0, "{after}");
    assert_eq!(sample(&after, ACTIVE), 0.0, "{after}");
    assert_eq!(sample(&after, RECEIVED), received as f64, "{after}");
}

/// `text` parsed by a real OpenMetrics parser (the `prometheus_client` Python package's, which
/// also checks the format: HELP and TYPE before samples, label syntax, `# EOF`): a map from
/// family name to (type, help, samples as (name, labels, value)). `None` when the parser is
/// not installed (a skip, or a failure under RDMA_TEST_STRICT).
fn parsed(text: &str) -> Option<serde_json::Value> {
    let script = "import json, sys\n\
                  from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
                  out = {}\n\
                  for f in text_string_to_metric_families(sys.stdin.read()):\n\
                  \x20   out[f.name] = {'type': f.type, 'help': f.documentation,\n\
                  \x20       'samples': [[s.name, s.labels, s.value] for s in f.samples]}\n\
                  print(json.dumps(out))\n";
    // Debian's python3-prometheus-client lives in the system's Python (another python3 may
    // come first on PATH, such as a pyenv shim).
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut child = match std::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(_) => {
            skip_or_fail("python3 is missing: the scrape is not parsed by an OpenMetrics parser");
            return None;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed the parser");
    let out = child.wait_with_output().expect("the parser runs");
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No module named") {
        skip_or_fail(
            "python3-prometheus-client is missing (apt-get install python3-prometheus-client): \
the scrape is not parsed by an OpenMetrics parser",
        );
        return None;
    }
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the scrape: {err}\n{text}"
    );
    Some(serde_json::from_slice(&out.stdout).expect("the parser's JSON"))
}

/// The value of the family's sample with exactly these labels.
fn parsed_sample(families: &serde_json::Value, family: &str, labels: &[(&str, &str)]) -> f64 {
    let samples = families[family]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no family {family} in {families}"));
    samples
        .iter()
        .find(|s| {
            let got = s[1].as_object().expect("labels");
            got.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| got.get(*k).and_then(|x| x.as_str()) == Some(*v))
        })
        .and_then(|s| s[2].as_f64())
        .unwrap_or_else(|| panic!("no sample {family}{labels:?} in {}", families[family]))
}

/// Every family of the documented set, with its type and a help text, as a parser reads it;
/// the label sets are the documented ones, each present from the first scrape.
fn assert_documented_families(families: &serde_json::Value) {
    for (family, kind) in [
        ("rdma_container_sessions", "counter"),
        ("rdma_container_messages", "counter"),
        ("rdma_container_bytes", "counter"),
        ("rdma_container_errors", "counter"),
        ("rdma_container_handshakes_refused", "counter"),
        ("rdma_container_sessions_active", "gauge"),
        ("rdma_container_paths_lost", "counter"),
        ("rdma_container_paths_rebuilt", "counter"),
    ] {
        let f = &families[family];
        assert_eq!(f["type"], kind, "{family}: {f}");
        assert!(
            f["help"].as_str().is_some_and(|h| h.len() > 10),
            "{family} has no help text: {f}"
        );
    }
    for outcome in ["end_of_stream", "interrupted", "failed", "refused"] {
        parsed_sample(families, "rdma_container_sessions", &[("outcome", outcome)]);
    }
    for kind in [
        "peer_lost",
        "rejected",
        "protocol_violation",
        "checksum",
        "timeout",
        "transport",
        "other",
    ] {
        parsed_sample(families, "rdma_container_errors", &[("kind", kind)]);
    }
    for direction in ["sent", "received"] {
        parsed_sample(
            families,
            "rdma_container_messages",
            &[("direction", direction)],
        );
    }
}

/// The local address of the listening socket on `port` (from /proc/net/tcp).
fn listening_on(port: u16) -> Option<std::net::Ipv4Addr> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (local, state) = (cols.get(1)?, cols.get(3)?);
        let (ip, p) = local.split_once(':')?;
        let p = u16::from_str_radix(p, 16).ok()?;
        (*state == "0A" && p == port).then(|| {
            let raw = u32::from_str_radix(ip, 16).unwrap_or(0);
            std::net::Ipv4Addr::from(raw.to_le_bytes())
        })
    })
}

#[test]
fn a_scrape_is_openmetrics_to_a_real_parser_with_every_series_and_the_content_type() {
    let (mut server, _) = common::server("server", &["--metrics", "0"]);
    let addr = metrics_addr(&mut server);
    // "--metrics 0" (a port alone) binds loopback: on the socket itself, not only in the log.
    assert_eq!(
        listening_on(addr.port()),
        Some(std::net::Ipv4Addr::LOCALHOST),
        "the metrics socket is bound to loopback\n{}",
        server.report()
    );
    let (status, head, body) = get_with_head(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.lines().any(
            |l| l == "Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"
        ),
        "{head}"
    );
    let Some(families) = parsed(&body) else {
        return;
    };
    assert_documented_families(&families);
    assert_eq!(
        parsed_sample(&families, "rdma_container_sessions_active", &[]),
        0.0
    );
}

#[test]
fn refused_and_failed_sessions_and_errors_by_kind_are_scraped_and_parsed() {
    let dir = tempfile::tempdir().expect("dir");
    let key = dir.path().join("key");
    std::fs::write(&key, "metrics-scrape-key-0123456789abcdef\n").expect("key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let key = key.to_str().expect("utf-8");
    let (mut server, port) = common::server("server", &["--metrics", "0", "--auth-key-file", key]);
    let addr = metrics_addr(&mut server);

    // A client without the key: refused for it.
    let mut stranger = start(
        "keyless client",
        "--client",
        port,
        &["--connect-timeout", "10", "--count", "1"],
    );
    assert_eq!(stranger.wait_code(SHORT), 4, "{}", stranger.report());
    // A keyed client killed mid-stream (no resumption): the server's session fails, peer lost.
    let mut lost = start(
        "killed client",
        "--client",
        port,
        &[
            "--connect-timeout",
            "10",
            "--count",
            ENDLESS,
            "--auth-key-file",
            key,
            "--resume-timeout",
            "0",
        ],
    );
    server.wait_for_stdout_lines(50, SHORT);
    lost.signal(Signal::SIGKILL);
    let _ = lost.wait(SHORT);
    server.wait_for_stderr("peer lost", SHORT);
    // Give the session's end its summary line (counted before it is logged).
    server.wait_for_stderr("failed", SHORT);
    let Some(families) = parsed(&scrape(addr)) else {
        return;
    };
    assert_documented_families(&families);
    assert!(
        parsed_sample(
            &families,
            "rdma_container_handshakes_refused",
            &[("by", "authentication")]
        ) >= 1.0,
        "{families}"
    );
    assert_eq!(
        parsed_sample(
            &families,
            "rdma_container_sessions",
            &[("outcome", "failed")]
        ),
        1.0,
        "{families}\n{}",
        server.report()
    );
    assert_eq!(
        parsed_sample(&families, "rdma_container_errors", &[("kind", "peer_lost")]),
        1.0,
        "{families}"
    );
    server.signal(Signal::SIGINT);
    let _ = server.wait(SHORT);
}
