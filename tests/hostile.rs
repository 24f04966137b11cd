//! A hostile peer: our own raw implementation of the wire protocol (written from
//! docs/design.md, not from the crate's encoder) that misbehaves on purpose against the real
//! binary over loopback with `--transport tcp`: messages past Finish, a Finish below the
//! arrivals, half-closed connections, a handshake dragged out or abandoned, descriptor
//! exhaustion, absurd timeouts, and the other protocol violations. Each must end with a clear
//! error that names the violation, no panic, no spin, no unbounded wait, and nothing delivered
//! past Finish.
//!
//! With `RDMA_CONTAINER_AUTH_KEY_FILE` set (CI runs the suite a second time so), the binaries
//! under test hold that key, and every raw peer authenticates with it first: the same hostile
//! behaviour, from a peer that knows the key.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{free_port, listening_on_free_port, Proc, SHORT};
use rdma_test_support::wire::{
    self, credit, data, finish, frame, read_frame, KIND_READY, ROLE_RECEIVER, ROLE_SENDER,
};

/// A Hello of ours with 1 MiB messages.
fn hello(role: u8, blob: &[u8]) -> Vec<u8> {
    wire::hello(role, 1 << 20, blob)
}

fn hello_blob(body: &[u8]) -> Vec<u8> {
    wire::hello_blob(body).unwrap_or_else(|| panic!("expected a Hello, got {body:?}"))
}

/// A sender that has completed the handshake with a server: control and data connections.
struct HostileSender {
    control: TcpStream,
    data: TcpStream,
}

impl HostileSender {
    fn connect(port: u16) -> Self {
        let mut control = control_connect(port);
        control.write_all(&hello(ROLE_SENDER, &[])).unwrap();
        let blob = hello_blob(&read_frame(&mut control).expect("server hello"));
        let data_port = u16::from_le_bytes([blob[0], blob[1]]);
        let mut data = connect(data_port);
        data.write_all(&blob[2..18]).unwrap();
        let ready = read_frame(&mut control).expect("Ready");
        assert_eq!(ready, vec![KIND_READY]);
        HostileSender { control, data }
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    s.set_read_timeout(Some(SHORT)).unwrap();
    s
}

/// A control connection to the server under test, authenticated first when the run has a key.
fn control_connect(port: u16) -> TcpStream {
    let mut s = connect(port);
    if let Some(key) = wire::run_auth_key() {
        wire::authenticate(&mut s, &key, &[3u8; 32], true).expect("authentication");
    }
    s
}

fn server(extra: &[&str]) -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["--server", addr.as_str(), "--transport", "tcp", "--once"];
        args.extend_from_slice(extra);
        common::start("server", &args)
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// CPU seconds (user + system) the process has used so far. A process whose /proc entry cannot
/// be read or parsed fails the test: a probe that read 0 would make "not spinning" pass without
/// measuring anything.
fn cpu_seconds(p: &Proc) -> f64 {
    let pid = p.pid().as_raw();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/stat ({e}):\n{}", p.report()));
    // Fields after the command: state is 0, utime is 11, stime is 12.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| -> f64 {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/stat has no field {i}: {stat}"))
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Fails when the process burns more than half a core over `window` (a busy loop).
fn assert_not_spinning(p: &Proc, window: Duration) {
    let before = cpu_seconds(p);
    std::thread::sleep(window);
    let used = cpu_seconds(p) - before;
    assert!(
        used < window.as_secs_f64() / 2.0,
        "{used:.2} s of CPU in {window:?}: a busy loop\n{}",
        p.report()
    );
}

#[test]
fn messages_after_finish_are_never_delivered_and_the_session_ends() {
    // The attack as found: Finish{1} after one message, then more messages on a data
    // connection that stays open. The session must end (at end of stream, or with a
    // violation if an extra message is seen first) and nothing past the count is printed.
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    peer.data.write_all(&data(b"first")).unwrap();
    peer.control.write_all(&finish(1)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let _ = peer.data.write_all(&data(b"extra"));
    }
    let code = s.wait_code(SHORT);
    assert!(code == 0 || code == 1, "{}", s.report());
    assert_eq!(
        s.stdout(),
        "first\n",
        "nothing past Finish{{1}} may be printed"
    );
    drop(peer);
}

#[test]
fn a_message_past_the_finish_count_is_a_violation() {
    // Finish{1} known first, then two messages in one write: the second is past the count.
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    peer.control.write_all(&finish(1)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut both = data(b"first");
    both.extend_from_slice(&data(b"extra"));
    peer.data.write_all(&both).unwrap();
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    assert!(!s.stdout().contains("extra"), "{}", s.report());
    assert!(
        s.stderr().contains("protocol violation") && s.stderr().contains("after Finish{count: 1}"),
        "{}",
        s.report()
    );
    // (The receiver half-closed the control connection when it read Finish, to let an
    // honest sender go at once; so the hostile one learns nothing more than that.)
    drop(peer);
}

#[test]
fn a_finish_below_the_arrivals_is_a_violation_and_never_wraps_the_count() {
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    peer.data.write_all(&data(b"a")).unwrap();
    peer.data.write_all(&data(b"b")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    peer.control.write_all(&finish(1)).unwrap();
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    let err = s.stderr();
    assert!(!err.contains("18446744073709551615"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("Finish says 1 message(s) but 2 arrived"),
        "{}",
        s.report()
    );
}

#[test]
fn control_closed_after_finish_with_data_open_ends_without_spinning() {
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    peer.data.write_all(&data(b"only")).unwrap();
    peer.control.write_all(&finish(3)).unwrap();
    peer.control.shutdown(Shutdown::Both).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_not_spinning(&s, Duration::from_secs(2));
    // Bounded: no message for 10 s after Finish ends the session.
    assert_eq!(s.wait_code(Duration::from_secs(20)), 3, "{}", s.report());
    assert!(
        s.stderr().contains("2 of 3 message(s) still missing"),
        "{}",
        s.report()
    );
    drop(peer.data);
}

#[test]
fn receiver_does_not_spin_on_a_closed_data_connection() {
    let (mut s, port) = server(&[]);
    let peer = HostileSender::connect(port);
    peer.data.shutdown(Shutdown::Both).unwrap();
    // The receiver now waits up to 2 s for a Finish on the still open control connection.
    std::thread::sleep(Duration::from_millis(100));
    assert_not_spinning(&s, Duration::from_millis(1500));
    assert_eq!(s.wait_code(SHORT), 3, "{}", s.report());
    assert!(s.stderr().contains("peer lost"), "{}", s.report());
    drop(peer.control);
}

/// A hostile receiver for our `--client`: completes the handshake, then behaves as `script`
/// says with the control and data connections.
fn hostile_receiver(script: impl FnOnce(TcpStream, TcpStream) + Send + 'static) -> u16 {
    let control_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let data_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = control_listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut control, _) = control_listener.accept().unwrap();
        control.set_read_timeout(Some(SHORT)).unwrap();
        if let Some(key) = wire::run_auth_key() {
            let proved = wire::authenticate_client(&mut control, &key, &[5u8; 32]);
            assert!(
                proved.expect("the client's authentication"),
                "a wrong client proof"
            );
        }
        let _client_hello = read_frame(&mut control).unwrap();
        let token = [7u8; 16];
        let mut blob = data_listener
            .local_addr()
            .unwrap()
            .port()
            .to_le_bytes()
            .to_vec();
        blob.extend_from_slice(&token);
        control.write_all(&hello(ROLE_RECEIVER, &blob)).unwrap();
        let (mut data, _) = data_listener.accept().unwrap();
        data.set_read_timeout(Some(SHORT)).unwrap();
        let mut got = [0u8; 16];
        data.read_exact(&mut got).unwrap();
        control.write_all(&frame(&[KIND_READY])).unwrap();
        script(control, data);
    });
    port
}

fn client(port: u16, extra: &[&str]) -> Proc {
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["--client", addr.as_str(), "--transport", "tcp"];
    args.extend_from_slice(extra);
    common::start("client", &args)
}

#[test]
fn sender_does_not_spin_while_lingering_after_finish() {
    let port = hostile_receiver(|mut control, mut data| {
        // Take the one message, read Finish, close the data path but keep control open
        // (never acknowledging the end of stream).
        let mut buf = [0u8; 5];
        data.read_exact(&mut buf).unwrap();
        control.write_all(&credit(1)).unwrap();
        let _finish = read_frame(&mut control);
        drop(data);
        std::thread::sleep(Duration::from_secs(15));
        drop(control);
    });
    let mut c = client(port, &["--count", "1"]);
    c.wait_for_stderr("INFO", SHORT);
    std::thread::sleep(Duration::from_millis(300));
    assert_not_spinning(&c, Duration::from_secs(2));
    // The linger is bounded (10 s); the stream was sent, so the client succeeds.
    assert_eq!(c.wait_code(Duration::from_secs(20)), 0, "{}", c.report());
}

#[test]
fn one_deadline_covers_the_whole_handshake() {
    let (mut s, port) = server(&["--handshake-timeout", "2"]);
    let mut control = control_connect(port);
    control.write_all(&hello(ROLE_SENDER, &[])).unwrap();
    let blob = hello_blob(&read_frame(&mut control).unwrap());
    let mut data = connect(u16::from_le_bytes([blob[0], blob[1]]));
    // The token, one byte every 400 ms: 6.4 s in all, far past the 2 s deadline.
    let started = Instant::now();
    for b in &blob[2..18] {
        if data.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(400));
        if s.try_status().is_some() {
            break;
        }
    }
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the handshake outlived its deadline"
    );
    assert!(
        s.stderr()
            .contains("timed out after 2.0 s (the data path set-up)"),
        "{}",
        s.report()
    );
}

#[test]
fn an_idle_data_connection_does_not_delay_the_real_one() {
    let (mut s, port) = server(&["--handshake-timeout", "30"]);
    let mut control = control_connect(port);
    control.write_all(&hello(ROLE_SENDER, &[])).unwrap();
    let blob = hello_blob(&read_frame(&mut control).unwrap());
    let data_port = u16::from_le_bytes([blob[0], blob[1]]);
    let _idle = connect(data_port);
    let started = Instant::now();
    let mut data = connect(data_port);
    data.write_all(&blob[2..18]).unwrap();
    assert_eq!(read_frame(&mut control).unwrap(), vec![KIND_READY]);
    assert!(started.elapsed() < Duration::from_secs(5));
    data.write_all(&self::data(b"hi")).unwrap();
    control.write_all(&finish(1)).unwrap();
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert_eq!(s.stdout(), "hi\n");
}

#[test]
fn a_client_that_vanishes_mid_handshake_frees_the_server_at_once() {
    // Not `--once`: the vanished client must not count as the one session.
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let args = [
            "--server",
            &addr,
            "--transport",
            "tcp",
            "--handshake-timeout",
            "30",
        ];
        common::start("server", &args)
    };
    let (mut s, port) = listening_on_free_port(spawn, "listening on", SHORT);
    {
        let mut control = control_connect(port);
        control.write_all(&hello(ROLE_SENDER, &[])).unwrap();
        let _ = read_frame(&mut control).unwrap();
        // Vanish (RST) without ever connecting the data path.
        let sock = socket2::SockRef::from(&control);
        sock.set_linger(Some(Duration::ZERO)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut c = client(port, &["--count", "10", "--connect-timeout", "10"]);
    assert_eq!(c.wait_code(SHORT), 0, "{}", c.report());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the real client waited for the vanished one"
    );
    s.signal(nix::sys::signal::Signal::SIGINT);
    s.wait(SHORT);
    assert!(
        s.stderr().contains("during the data path setup"),
        "{}",
        s.report()
    );
}

/// A server (not `--once`) whose descriptor limit is `nofile`.
fn server_with_nofile(nofile: u64) -> (Proc, u16) {
    server_with_limits(nofile, "4")
}

/// A server (not `--once`) with a descriptor limit and a handshake timeout in seconds.
fn server_with_limits(nofile: u64, handshake_timeout: &str) -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = common::command(&[
            "--server",
            &addr,
            "--transport",
            "tcp",
            "--handshake-timeout",
            handshake_timeout,
        ]);
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and only calls
        // setrlimit, which is async-signal-safe; it touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::resource::setrlimit(
                    nix::sys::resource::Resource::RLIMIT_NOFILE,
                    nofile,
                    nofile,
                )
                .map_err(std::io::Error::from)
            });
        }
        Proc::spawn("server", cmd)
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// The process's thread count; an unreadable /proc entry fails the test (never a vacuous 0).
fn thread_count(p: &Proc) -> usize {
    let pid = p.pid().as_raw();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status ({e}):\n{}", p.report()));
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("/proc/{pid}/status has no Threads: line:\n{status}"))
}

#[test]
fn out_of_descriptors_backs_off_and_logs_at_most_once_a_second() {
    let (mut s, port) = server_with_nofile(40);
    let started = Instant::now();
    let silent: Vec<TcpStream> = (0..120)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    assert_not_spinning(&s, Duration::from_secs(2));
    let shortage_lines = s.stderr().matches("lack of resources").count();
    let seconds = started.elapsed().as_secs() as usize;
    assert!(
        shortage_lines >= 1 && shortage_lines <= seconds + 2,
        "{shortage_lines} log lines about EMFILE in {seconds} s (expected one per second)\n{}",
        s.report()
    );
    drop(silent);
    // Once the silent ones are gone, a real client gets through.
    let mut c = client(port, &["--count", "10", "--connect-timeout", "15"]);
    assert_eq!(c.wait_code(Duration::from_secs(30)), 0, "{}", c.report());
    s.signal(nix::sys::signal::Signal::SIGINT);
    s.wait(SHORT);
}

/// The process's resident memory in KiB; an unreadable /proc entry fails the test.
fn rss_kib(p: &Proc) -> u64 {
    let pid = p.pid().as_raw();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status ({e}):\n{}", p.report()));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|t| t.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("/proc/{pid}/status has no VmRSS: line:\n{status}"))
}

/// 200 silent connections held open (more than the handshake table holds): threads stay
/// bounded, a real client is served during the flood (each new connection takes the place of
/// the oldest unfinished handshake, so the flood cannot keep it out) and after it, and threads
/// and memory come back to where they were.
#[test]
fn a_real_client_gets_through_a_flood_of_silent_connections() {
    // A handshake timeout far longer than the test: the silent ones stay until evicted.
    let (mut s, port) = server_with_limits(4096, "60");
    let (threads_before, rss_before) = (thread_count(&s), rss_kib(&s));
    let silent: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert_eq!(silent.len(), 200);
    std::thread::sleep(Duration::from_secs(1));
    let threads = thread_count(&s);
    assert!(
        threads <= rdma_container::MAX_PENDING_HANDSHAKES + 8,
        "{threads} threads for {} silent connections",
        silent.len()
    );
    assert!(
        s.stderr()
            .contains("closed the oldest unfinished handshake"),
        "{}",
        s.report()
    );
    let mut during = client(port, &["--count", "10", "--connect-timeout", "15"]);
    assert_eq!(
        during.wait_code(Duration::from_secs(30)),
        0,
        "{}",
        during.report()
    );
    drop(silent);
    let mut after = client(port, &["--count", "10", "--connect-timeout", "15"]);
    assert_eq!(
        after.wait_code(Duration::from_secs(30)),
        0,
        "{}",
        after.report()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while thread_count(&s) > threads_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        thread_count(&s) <= threads_before,
        "threads {} after the flood, {threads_before} before",
        thread_count(&s)
    );
    let rss_after = rss_kib(&s);
    assert!(
        rss_after <= rss_before + 8 * 1024,
        "resident memory {rss_after} KiB after the flood, {rss_before} KiB before"
    );
    s.signal(nix::sys::signal::Signal::SIGINT);
    s.wait(SHORT);
}

#[test]
fn huge_or_invalid_timeouts_are_refused_at_parse_time() {
    for (flag, value) in [
        ("--connect-timeout", "1e20"),
        ("--handshake-timeout", "1e19"),
        ("--idle-timeout", "inf"),
        ("--handshake-timeout", "NaN"),
        ("--connect-timeout", "-1"),
    ] {
        let arg = format!("{flag}={value}");
        let mut p = common::start("client", &["--client", "127.0.0.1:9", &arg, "--count", "1"]);
        let code = p.wait_code(SHORT);
        assert_eq!(code, 2, "{flag} {value}: {}", p.report());
        assert!(!p.stderr().contains("panicked"), "{}", p.report());
        assert!(p.stderr().contains(flag), "{}", p.report());
    }
}

#[test]
fn errors_do_not_repeat_their_cause() {
    // A port nobody listens on (not a fixed one: another process may use any port).
    let closed = format!("127.0.0.1:{}", free_port());
    let mut p = common::start("client", &["--client", &closed, "--connect-timeout", "0.3"]);
    assert_eq!(p.wait_code(SHORT), 1);
    let err = p.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("ERROR"))
        .unwrap_or_default();
    assert_eq!(
        line.matches("Connection refused").count(),
        1,
        "the cause must be said once: {err}"
    );
    // A value out of range (refused by the parser, as --credits 0 is): said once, exit 2.
    let mut p = common::start(
        "client",
        &["--client", "127.0.0.1:1", "--max-msg-size", "0"],
    );
    assert_eq!(
        p.wait_code(SHORT),
        2,
        "a value out of range is a usage error"
    );
    let err = p.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("--max-msg-size"))
        .unwrap_or_default();
    assert_eq!(line.matches("must be between").count(), 1, "{err}");
}

#[test]
fn misleading_payloads_are_printed_so_they_cannot_mislead() {
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    let msgs: [&[u8]; 4] = [
        "abc\u{202E}fed".as_bytes(),
        b"<0 bytes>",
        b"",
        "zero\u{200B}width".as_bytes(),
    ];
    for (i, m) in msgs.iter().enumerate() {
        if i >= 2 {
            // Two credits: one more message only once the receiver released one.
            let _ = read_frame(&mut peer.control);
        }
        peer.data.write_all(&data(m)).unwrap();
    }
    peer.control.write_all(&finish(4)).unwrap();
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let out = s.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("<9 bytes: 61 62 63 e2 80 ae"), "{out}");
    assert_eq!(
        lines[1], "\\<0 bytes>",
        "text that looks like a summary is escaped"
    );
    assert_eq!(lines[2], "<0 bytes>");
    assert!(lines[3].starts_with("<12 bytes:"), "{out}");
}

#[test]
fn finish_twice_is_a_violation() {
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    peer.control.write_all(&finish(1)).unwrap();
    peer.control.write_all(&finish(1)).unwrap();
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    assert!(s.stderr().contains("Finish sent twice"), "{}", s.report());
    assert_eq!(s.stdout(), "");
}

#[test]
fn finish_count_too_high_is_reported_with_what_is_missing() {
    let (mut s, port) = server(&[]);
    let mut peer = HostileSender::connect(port);
    peer.data.write_all(&data(b"x")).unwrap();
    peer.control.write_all(&finish(5)).unwrap();
    drop(peer.data);
    assert_eq!(s.wait_code(SHORT), 3, "{}", s.report());
    assert!(
        s.stderr().contains("4 of 5 message(s) still missing"),
        "{}",
        s.report()
    );
}

#[test]
fn data_before_ready_is_a_violation() {
    let (mut s, port) = server(&[]);
    let mut control = control_connect(port);
    control.write_all(&hello(ROLE_SENDER, &[])).unwrap();
    let blob = hello_blob(&read_frame(&mut control).unwrap());
    let mut data_conn = connect(u16::from_le_bytes([blob[0], blob[1]]));
    let mut early = blob[2..18].to_vec();
    early.extend_from_slice(&data(b"too early"));
    data_conn.write_all(&early).unwrap();
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    assert!(
        s.stderr().contains("the sender sent data before Ready"),
        "{}",
        s.report()
    );
    assert_eq!(s.stdout(), "");
}

#[test]
fn wrong_messages_to_the_receiver_are_violations() {
    for (name, msg) in [
        ("Ready", frame(&[KIND_READY])),
        ("Credit", credit(0)),
        ("Hello", hello(ROLE_SENDER, &[])),
    ] {
        let (mut s, port) = server(&[]);
        let mut peer = HostileSender::connect(port);
        peer.control.write_all(&msg).unwrap();
        assert_eq!(s.wait_code(SHORT), 1, "{name}: {}", s.report());
        assert!(
            s.stderr()
                .contains(&format!("expected Finish or Reject, got {name}")),
            "{name}: {}",
            s.report()
        );
    }
}

#[test]
fn bad_credits_to_the_sender_are_violations() {
    for (what, script_credit, expect) in [
        ("invented", 5u64, "released but only"),
        ("backwards", 0u64, "went backwards"),
    ] {
        let port = hostile_receiver(move |mut control, mut data| {
            let mut buf = [0u8; 5];
            let _ = data.read_exact(&mut buf);
            if script_credit == 0 {
                control.write_all(&credit(1)).unwrap();
            }
            control.write_all(&credit(script_credit)).unwrap();
            let mut rest = Vec::new();
            let _ = control.read_to_end(&mut rest);
            let _ = data.read_to_end(&mut rest);
        });
        let mut c = client(port, &["--count", "1000"]);
        assert_eq!(c.wait_code(SHORT), 1, "{what}: {}", c.report());
        assert!(
            c.stderr().contains("protocol violation") && c.stderr().contains(expect),
            "{what}: {}",
            c.report()
        );
    }
}

#[test]
fn a_reject_mid_stream_reaches_the_sender() {
    let port = hostile_receiver(|mut control, mut data| {
        let mut buf = [0u8; 5];
        let _ = data.read_exact(&mut buf);
        control.write_all(&wire::reject("go away")).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    let mut c = client(port, &["--count", "1000"]);
    assert_eq!(c.wait_code(SHORT), 4, "{}", c.report());
    assert!(c.stderr().contains("go away"), "{}", c.report());
}

#[test]
fn idle_timeout_ends_a_frozen_session() {
    let (mut s, port) = server(&["--idle-timeout", "1"]);
    let peer = HostileSender::connect(port);
    assert_eq!(s.wait_code(SHORT), 1, "{}", s.report());
    assert!(s.stderr().contains("idle timeout"), "{}", s.report());
    drop(peer);
}
