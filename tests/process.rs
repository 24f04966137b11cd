//! Process-level tests: the real binary as server and client over 127.0.0.1, or over
//! `RDMA_TEST_ADDR` on a host with an RDMA NIC (the transport `RDMA_TEST_TRANSPORT` selects;
//! TCP by default here),
//! plus `--help`, `--version`, `demo` and `doctor --json`.
//!
//! Every server listens on its own loopback port, every wait has a deadline, and every child is
//! killed when its guard drops, so a failure never hangs the suite.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    assert_fails_saying, assert_running, check_counting, client, messages_after, run, server,
    server_logging, test_ip, FakeSysfs, Proc, LONG, SHORT,
};
use nix::sys::signal::Signal;
use rdma_test_support::wire;

/// "Mid-stream": how long a long-running client sends before the test acts.
const MID_STREAM: Duration = Duration::from_millis(500);
/// The endless client: far more messages than it can send during a test.
const ENDLESS: &str = "100000000";

/// After the bad connections: a normal client's 100 messages reach the `--once` server, which
/// then exits 0 having printed exactly "0".."99".
fn serve_a_good_client_then_exit(s: &mut Proc, port: u16) {
    run_good_client_of(port, 100, Some(s));
    let code = s.wait_code(SHORT);
    assert_eq!(code, 0, "{}", s.report());
    if let Err(e) = check_counting(&s.stdout(), 100) {
        panic!("server stdout: {e}\n{}", s.report());
    }
}

/// Runs a client sending "0".."count-1" and checks it succeeds.
fn run_good_client(port: u16, count: u64) {
    run_good_client_of(port, count, None);
}

/// As [`run_good_client`]; a failure shows the `server`'s output too.
fn run_good_client_of(port: u16, count: u64, server: Option<&Proc>) {
    let mut c = client("client", port, &["--count", &count.to_string()]);
    let code = c.wait_code(SHORT);
    assert_eq!(
        code,
        0,
        "a normal client must succeed\n{}\n{}",
        c.report(),
        server.map(Proc::report).unwrap_or_default()
    );
    assert!(
        c.stderr().contains(&format!("sent {count} messages")),
        "{}",
        c.report()
    );
}

fn connect(port: u16) -> TcpStream {
    TcpStream::connect((test_ip(), port)).expect("connect to the server")
}

/// Reads until the peer closes (EOF or reset); fails the test if it stays open `timeout`.
/// Returns what was received and how the connection ended.
fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> (Vec<u8>, &'static str) {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .unwrap_or_else(|| {
                panic!("the server kept the connection open for {timeout:?}; received {got:02x?}")
            });
        stream.set_read_timeout(Some(left)).expect("SO_RCVTIMEO");
        match stream.read(&mut buf) {
            Ok(0) => return (got, "EOF"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (got, "reset"),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => panic!("reading from the server failed: {e}"),
        }
    }
}

/// Asserts that whatever the server sent before closing is exactly one Reject frame.
fn assert_reject_or_nothing(what: &str, got: &[u8], how: &str) {
    if got.is_empty() {
        eprintln!("{what}: connection closed ({how}) without a Reject");
        return;
    }
    match wire::parse_reject(got) {
        Some(reason) => eprintln!("{what}: Reject {reason:?}, then {how}"),
        None => panic!("{what}: expected one Reject frame, got bytes {got:02x?}"),
    }
}

/// A complete, valid client hello frame.
fn hello_frame() -> Vec<u8> {
    wire::hello(wire::ROLE_SENDER, 1000, &[])
}

/// What `--size SIZE` makes of message `i`: the counter, then "abc...z" repeated (ASCII sizes).
fn sized_payload(i: usize, size: usize) -> String {
    let digits = i.to_string();
    let pad = size.saturating_sub(digits.len());
    let letters = (0..pad).map(|k| char::from(b'a' + (k % 26) as u8));
    digits.chars().take(size).chain(letters).collect()
}

/// 64 pseudo-random bytes (xorshift seeded from the clock and pid; printed on failure).
fn random_bytes() -> Vec<u8> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut x = nanos ^ (u64::from(std::process::id()) << 32) | 1;
    (0..64)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn ten_thousand_messages_in_order_over_loopback() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &[]);
    let client_code = c.wait_code(LONG);
    let server_code = s.wait_code(LONG);
    assert_eq!(client_code, 0, "{}", c.report());
    assert_eq!(server_code, 0, "{}", s.report());
    if let Err(e) = check_counting(&s.stdout(), 10_000) {
        panic!("server stdout: {e}\n{}", s.report());
    }
    let summary = s.stderr();
    let requested = std::env::var("RDMA_TEST_TRANSPORT").unwrap_or_default();
    let expected = match requested.as_str() {
        // Loopback has no RoCE GID; on hardware, name the transport explicitly.
        "" | "auto" => "tcp",
        t => t,
    };
    assert!(
        summary.contains(&format!("session established: transport {expected}")),
        "the session must run over {expected}\n{}",
        s.report()
    );
    assert!(
        summary.lines().any(|l| l.contains("10000 messages")),
        "no summary line with \"10000 messages\"\n{}",
        s.report()
    );
    assert_eq!(
        messages_after(&c.stderr(), "sent"),
        Some(10_000),
        "{}",
        c.report()
    );
}

/// `--qps N` (issue 39): the messages are striped over N queue pairs (tcp: data connections)
/// and arrive as one stream, in order, every byte as sent; the server takes the client's
/// count, and both session lines say it. Small messages with the default 2 credits, then
/// 64 KiB + 1 messages with 8 credits and CRC32C over 3.
#[test]
fn messages_striped_over_several_queue_pairs_arrive_in_order_with_every_byte() {
    for (qps, count, size, extra) in [
        ("4", 10_000, None, &[][..]),
        (
            "3",
            300,
            Some(65_537),
            &["--credits", "8", "--checksum", "crc32c"][..],
        ),
    ] {
        let size_s = size.map(|s: usize| s.to_string());
        let mut server_args = vec!["--once"];
        server_args.extend_from_slice(extra);
        let (mut s, port) = server("server", &server_args);
        let count_s = count.to_string();
        let mut client_args = vec!["--qps", qps, "--count", &count_s];
        if let Some(size) = &size_s {
            client_args.extend(["--size", size, "--max-msg-size", size]);
        }
        client_args.extend_from_slice(extra);
        let mut c = client("client", port, &client_args);
        assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
        assert_eq!(s.wait_code(LONG), 0, "{}", s.report());
        for p in [&s, &c] {
            assert!(
                p.stderr().contains(&format!(" | qps {qps} |")),
                "the session line says qps {qps}\n{}",
                p.report()
            );
        }
        let out = s.stdout();
        match size {
            None => {
                if let Err(e) = check_counting(&out, count) {
                    panic!("server stdout: {e}\n{}", s.report());
                }
            }
            Some(size) => {
                let lines: Vec<&str> = out.lines().collect();
                assert_eq!(lines.len() as u64, count, "{}", s.report());
                for (i, line) in lines.iter().enumerate() {
                    assert!(
                        *line == sized_payload(i, size),
                        "message {i} differs from what was sent\n{}",
                        s.report()
                    );
                }
            }
        }
    }
}

#[test]
fn killed_client_is_detected_and_the_server_keeps_serving() {
    // A killed client cannot resume: the server waits 2 s for it (--resume-timeout), then
    // reports it lost.
    let (mut s, port) = server("server", &["--resume-timeout", "2"]);
    let mut c1 = client(
        "killed client",
        port,
        &["--count", ENDLESS, "--size", "1000"],
    );
    s.wait_for_stdout_lines(100, SHORT);
    std::thread::sleep(MID_STREAM);
    let killed_at = Instant::now();
    c1.signal(Signal::SIGKILL);
    s.wait_for_stderr("peer lost", SHORT);
    eprintln!(
        "server noticed the loss {:?} after SIGKILL",
        killed_at.elapsed()
    );
    c1.wait(SHORT);
    s.wait_for_stderr("failed: received", SHORT);
    let first = messages_after(&s.stderr(), "received")
        .unwrap_or_else(|| panic!("no \"received N messages\"\n{}", s.report()));
    // The summary comes after the payloads, but our reader of the pipe may lag behind.
    s.wait_for_stdout_lines(first as usize, SHORT);
    for (i, line) in s.stdout().lines().enumerate() {
        assert!(
            line == sized_payload(i, 1000),
            "first session, line {i}: {line:?}\n{}",
            s.report()
        );
    }
    assert!(s.try_status().is_none(), "server exited\n{}", s.report());

    run_good_client(port, 100);
    s.wait_for_stderr("session 2 from", SHORT);
    s.wait_for_stderr("received 100 messages", SHORT);
    s.wait_for_stdout_lines(first as usize + 100, SHORT);
    let second: String = s
        .stdout()
        .split_terminator('\n')
        .skip(first as usize)
        .map(|l| format!("{l}\n"))
        .collect();
    if let Err(e) = check_counting(&second, 100) {
        panic!("second session's output: {e}\n{}", s.report());
    }
    assert!(s.try_status().is_none(), "server exited\n{}", s.report());
}

/// The receiver (the server) killed mid-stream: the sender does not hang, exits 1 with
/// "peer lost" and how many of its messages had been received, at least what the server printed.
#[test]
fn killed_server_is_reported_by_the_client_with_the_count() {
    let (mut s, port) = server("server", &["--once"]);
    // The client tries to resume for 2 s (nobody answers), then reports the loss.
    let mut c = client(
        "client",
        port,
        &["--count", ENDLESS, "--resume-timeout", "2"],
    );
    s.wait_for_stdout_lines(100, SHORT);
    std::thread::sleep(MID_STREAM);
    s.signal(Signal::SIGKILL);
    s.wait(SHORT);
    let printed = s.stdout().lines().count() as u64;
    assert_eq!(c.wait_code(SHORT), 3, "{}", c.report());
    let err = c.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("peer lost"))
        .unwrap_or_else(|| panic!("no peer-lost error\n{}", c.report()));
    // "sending message S failed: peer lost (...) after N message(s) had arrived": N is what
    // the receiver released (delivered to its application), never more than was sent (S), and
    // at least what reached its stdout (the server prints a message, then releases it on its
    // next recv; SIGKILL loses what its stdout buffer still held, so it can be more).
    let sent: u64 = line
        .split_once("sending message ")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no message number in {line}"));
    let released = common::lost_after(line).unwrap_or_else(|| panic!("no count in {line}"));
    assert!(
        released <= sent && printed <= released + 1 && printed >= 100,
        "sent {sent}, released {released}, printed {printed}: {line}"
    );
}

#[test]
fn garbage_gets_a_reject_or_a_close_and_the_server_keeps_serving() {
    // A handshake timeout below SHORT, so that garbage the server waits on (a random frame
    // length under the limit) is closed within the test's wait, and above a verbs set-up of a
    // debug build on an emulated host (2 s was not: the VM's suite saw the good client's
    // handshake time out).
    // Debug level: every ignored connection is logged there (at warning level, one line a
    // second with a count: stranger floods are rate-limited).
    let (mut s, port) = server_logging(
        "server",
        &["--once", "--handshake-timeout", &common::scaled_secs(6)],
        "debug",
    );
    let random = random_bytes();
    let garbage: [(&str, &[u8]); 2] = [
        ("HTTP request", b"GET / HTTP/1.0\r\n\r\n"),
        ("64 random bytes", &random),
    ];
    for (what, bytes) in garbage {
        let mut g = connect(port);
        let local = g.local_addr().expect("local addr");
        g.write_all(bytes).expect("write garbage");
        let (got, how) = read_until_closed(&mut g, SHORT);
        assert_reject_or_nothing(&format!("{what} {bytes:02x?}"), &got, how);
        s.wait_for_stderr(&format!("ignored connection from {local}"), SHORT);
    }
    serve_a_good_client_then_exit(&mut s, port);
}

#[test]
fn silent_connection_does_not_block_a_real_client_and_times_out() {
    // Debug level, to see when the server has accepted the silent connection. The handshake
    // timeout leaves the real client room even on an emulated machine (the VM's suite).
    let handshake = common::scaled_secs(8);
    let (mut s, port) = server_logging("server", &["--handshake-timeout", &handshake], "debug");

    let mut silent = connect(port);
    let local = silent.local_addr().expect("local addr");
    s.wait_for_stderr(&format!("connection from {local}"), SHORT);
    run_good_client(port, 100);
    s.wait_for_stderr("received 100 messages", SHORT);
    s.wait_for_stdout_lines(100, SHORT);

    s.wait_for_stderr(&format!("handshake with {local} timed out"), SHORT);
    // The real client was served while the silent connection still held its handshake slot:
    // its session ended before the silent one timed out (the server's own order of events).
    let log = s.stderr();
    let served = log.find("received 100 messages").expect("seen above");
    let timed_out = log
        .find(&format!("handshake with {local} timed out"))
        .expect("seen above");
    assert!(
        served < timed_out,
        "the real client was served only after the silent connection timed out\n{}",
        s.report()
    );
    let (got, how) = read_until_closed(&mut silent, SHORT);
    assert_reject_or_nothing("silent connection", &got, how);
    if let Err(e) = check_counting(&s.stdout(), 100) {
        panic!("server stdout: {e}\n{}", s.report());
    }
    assert!(s.try_status().is_none(), "server exited\n{}", s.report());
}

#[test]
fn truncated_hello_does_not_hurt_the_server() {
    let (mut s, port) = server_logging("server", &["--once"], "debug");
    let frame = hello_frame();
    assert!(frame.len() > 10);
    let mut t = connect(port);
    let local = t.local_addr().expect("local addr");
    t.write_all(&frame[..10]).expect("write 10 bytes");
    drop(t);
    s.wait_for_stderr(&format!("ignored connection from {local}"), SHORT);

    serve_a_good_client_then_exit(&mut s, port);
}

#[test]
fn oversize_message_fails_before_anything_is_sent() {
    let (mut s, port) = server("server", &["--once", "--max-msg-size", "100"]);
    let mut c = client("client", port, &["--size", "200", "--count", "10"]);
    let code = c.wait_code(SHORT);
    // README: 1 with one clear error line for any failure.
    assert_eq!(code, 1, "{}", c.report());
    let err = c.stderr();
    assert!(
        err.lines()
            .any(|l| l.contains("exceeds the maximum message size")
                && l.contains("nothing was sent")),
        "no line saying the message exceeds the maximum and nothing was sent\n{}",
        c.report()
    );
    s.wait(SHORT);
    assert_eq!(s.stdout(), "", "{}", s.report());
    assert!(s.stderr().contains("received 0 messages"), "{}", s.report());
}

#[test]
fn zero_length_messages_arrive() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &["--size", "0", "--count", "5"]);
    assert_eq!(c.wait_code(SHORT), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert_eq!(s.stdout(), "<0 bytes>\n".repeat(5), "{}", s.report());
}

#[test]
fn ctrl_c_on_the_client_ends_the_stream_cleanly() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &["--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    std::thread::sleep(MID_STREAM);
    c.signal(Signal::SIGINT);
    let client_code = c.wait_code(SHORT);
    assert_eq!(client_code, 130, "{}", c.report());
    let sent = messages_after(&c.stderr(), "sent")
        .unwrap_or_else(|| panic!("no \"sent N messages\" line\n{}", c.report()));
    assert!(sent >= 100, "sent {sent}\n{}", c.report());

    let server_code = s.wait_code(SHORT);
    assert_eq!(server_code, 0, "{}", s.report());
    assert!(s.stderr().contains("end of stream"), "{}", s.report());
    if let Err(e) = check_counting(&s.stdout(), sent) {
        panic!("server stdout vs {sent} sent: {e}\n{}", s.report());
    }
}

#[test]
fn ctrl_c_on_the_server_mid_session() {
    let (mut s, port) = server("server", &["--once"]);
    let mut c = client("client", port, &["--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    std::thread::sleep(MID_STREAM);
    s.signal(Signal::SIGINT);
    let server_code = s.wait_code(SHORT);
    assert_eq!(server_code, 130, "{}", s.report());
    assert!(
        s.stderr()
            .lines()
            .any(|l| l.contains("interrupted: received") && l.contains(" messages")),
        "no summary line\n{}",
        s.report()
    );
    let received = messages_after(&s.stderr(), "received")
        .unwrap_or_else(|| panic!("no \"received N messages\"\n{}", s.report()));
    if let Err(e) = check_counting(&s.stdout(), received) {
        panic!("server stdout vs {received} received: {e}\n{}", s.report());
    }

    // README: the client exits 1 saying the server was interrupted.
    assert_fails_saying(
        &mut c,
        &["interrupted"],
        "the client should say that the server was interrupted",
    );
}

#[test]
fn second_client_during_a_session_is_told_busy() {
    let (mut s, port) = server("server", &[]);
    let mut first = client("first client", port, &["--count", ENDLESS]);
    s.wait_for_stdout_lines(100, SHORT);
    let mut second = client(
        "second client",
        port,
        &["--count", "10", "--connect-timeout", "2"],
    );
    assert_fails_saying(
        &mut second,
        &["busy", "answered", "--connect-timeout"],
        "the second client should say that the server is busy, after retrying",
    );
    assert_running(&mut first, "the first client (it should still be sending)");
    assert_running(&mut s, "the server");
}

#[test]
fn doctor_json_without_rdma_devices() {
    let sysfs = FakeSysfs::new();
    let root = sysfs.root().to_str().expect("utf-8 temp path");
    let (code, out, err) = run(&["doctor", "--json", "--sysfs-root", root], SHORT);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON value ({e}):\n{out}"));
    let obj = v.as_object().expect("a JSON object");
    assert_eq!(obj["table"], serde_json::json!([]), "{out}");
    assert!(obj.contains_key("choice"), "{out}");
    assert!(obj["choice"].is_null(), "{out}");
    let problems = obj["problems"].as_array().expect("problems is a list");
    assert!(!problems.is_empty(), "{out}");
}

#[test]
fn doctor_json_picks_the_roce_v2_gid_of_the_local_ip() {
    let sysfs = FakeSysfs::new();
    sysfs.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    let fe80 = "fe80:0000:0000:0000:ba59:9fff:fe1a:e4c2";
    let v4 = common::ipv4_gid([10, 9, 8, 7]);
    sysfs.gid("mlx5_0", 1, 0, fe80, "IB/RoCE v1", "eth9");
    sysfs.gid("mlx5_0", 1, 1, fe80, "RoCE v2", "eth9");
    sysfs.gid("mlx5_0", 1, 2, &v4, "IB/RoCE v1", "eth9");
    sysfs.gid("mlx5_0", 1, 3, &v4, "RoCE v2", "eth9");
    let root = sysfs.root().to_str().expect("utf-8 temp path");
    let args = [
        "doctor",
        "--json",
        "--sysfs-root",
        root,
        "--local-ip",
        "10.9.8.7",
    ];
    let (code, out, err) = run(&args, SHORT);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON value ({e}):\n{out}"));
    let choice = &v["choice"];
    assert_eq!(choice["device"], "mlx5_0", "{out}");
    assert_eq!(choice["port"], 1, "{out}");
    assert_eq!(choice["gid_index"], 3, "{out}");
    assert_eq!(choice["gid"], v4.as_str(), "{out}");
    assert_eq!(v["table"].as_array().map(Vec::len), Some(4), "{out}");
    // With a choice, auto tries the preferred RDMA transport of this build.
    let expected = if cfg!(feature = "doca-sim") {
        "doca"
    } else if cfg!(feature = "verbs") {
        "verbs"
    } else {
        "tcp"
    };
    assert_eq!(v["auto_transport"], expected, "{out}");
}

#[test]
fn help_names_the_modes() {
    let (code, out, err) = run(&["--help"], SHORT);
    assert_eq!(code, 0, "{err}");
    for word in ["--server", "--client", "demo", "doctor"] {
        assert!(out.contains(word), "--help does not mention {word}:\n{out}");
    }
}

#[test]
fn version_names_the_transports() {
    let (code, out, err) = run(&["--version"], SHORT);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    assert!(out.contains("transports"), "{out}");
    assert!(out.contains("tcp"), "{out}");
}

#[test]
fn demo_sends_ten_thousand_messages() {
    let (code, out, err) = run(&["demo"], LONG);
    assert_eq!(code, 0, "{err}");
    if let Err(e) = check_counting(&out, 10_000) {
        panic!("demo stdout: {e}\n{err}");
    }
    // 127.0.0.1 owns no RoCE GID, so auto picks TCP, and says so.
    assert!(
        err.contains("demo: using the tcp transport"),
        "stderr does not name the transport:\n{err}"
    );
    // Both summaries: the sender's and the receiver's.
    for verb in ["sent", "received"] {
        assert_eq!(
            messages_after(&err, verb),
            Some(10_000),
            "no \"{verb} 10000 messages\" summary:\n{err}"
        );
    }
}
