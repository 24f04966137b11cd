//! Resumption together with the other features (issue 32): a pre-shared key, CRC32C checksums,
//! large messages up to `--max-msg-size`, windows of 64 and 256 credits, several sessions on
//! one server, and exact `messages_resent` counts. The real binary over tcp on loopback; the
//! connections are broken with `ss -K` (tests/common/ss.rs) while the stream runs, and every
//! byte of every message is checked on the receiver's stdout.
//!
//! A test build (`--features test-hooks`) paces the sender and stalls the receiver, so that a
//! break lands while the window is full: then messages are lost in flight and must be sent
//! again (`messages_resent` above 0, the same on both ends and in both logs).
#![cfg(feature = "test-hooks")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::ss::{have_ss_kill, kill, Conn};
use common::{command, listening_on_free_port, long, Proc, LONG, SHORT};
use nix::sys::signal::Signal;

/// A private key file (mode 600) in `dir`.
fn key_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("key");
    std::fs::write(&path, "resume-together-with-a-key-0123456789\n").expect("write key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// Message `i` as the client makes it with `--size size`: the counter, then 'a'..'z' repeated.
fn expected_payload(i: usize, size: usize) -> Vec<u8> {
    let digits = i.to_string().into_bytes();
    let shown = digits.len().min(size);
    let mut p = digits[..shown].to_vec();
    p.extend((0..size - shown).map(|k| b'a' + (k % 26) as u8));
    p
}

/// Every line of `stdout` is message 0, 1, ... of `size` bytes, `count` of them, in order.
fn assert_every_byte(stdout: &str, count: usize, size: usize, who: &Proc) {
    let lines: Vec<&str> = stdout.split_terminator('\n').collect();
    assert_eq!(
        lines.len(),
        count,
        "{count} messages expected on stdout\n{}",
        who.report()
    );
    for (i, line) in lines.iter().enumerate() {
        if line.as_bytes() != expected_payload(i, size).as_slice() {
            panic!(
                "message {i} differs from what was sent ({} bytes, starts {:?})\n{}",
                line.len(),
                &line[..line.len().min(24)],
                who.report()
            );
        }
    }
}

/// The JSON result line of a process's stderr.
fn json_result(p: &Proc) -> serde_json::Value {
    let line = p
        .stderr()
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no JSON result\n{}", p.report()));
    serde_json::from_str(&line).expect("a JSON result")
}

/// What a process's log says was sent again, resume by resume ("..., N sent again").
fn resent_in_log(p: &Proc) -> Vec<u64> {
    p.stderr()
        .lines()
        .filter(|l| l.contains("session resumed in"))
        .filter_map(|l| {
            let (head, _) = l.rsplit_once(" sent again")?;
            head.rsplit_once(", ")?.1.parse().ok()
        })
        .collect()
}

/// Waits until `p`'s log has more than `before` "session resumed" lines.
fn wait_for_resume(p: &mut Proc, before: usize) {
    let deadline = std::time::Instant::now() + long();
    while p.stderr().matches("session resumed in").count() <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "no resume\n{}",
            p.report()
        );
        assert!(p.try_status().is_none(), "exited\n{}", p.report());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The receiver's buffer on each data connection (a test build's fault). Left to the kernel, a
/// loopback connection's receive buffer grows up to `net.ipv4.tcp_rmem`'s maximum (32 MiB on
/// some hosts): four of them may take in all the sender sends during the stall, and the break
/// would lose nothing. With 64 KiB, what a lane is sent beyond that waits in the sender (its
/// socket or its queue) and is lost with the connection.
const RECEIVE_BUFFER: u32 = 64 * 1024;

/// One session of `count` messages of `size` bytes (= `--max-msg-size`) with `credits`, a key
/// and CRC32C on both ends; the receiver stalls 3 s near a third (the window fills), the data
/// connection is killed then, and the control connection at two thirds.
fn keyed_checksummed_session_survives_two_breaks(size: usize, credits: u16, count: usize, qps: u8) {
    if !have_ss_kill() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path());
    let key = key.to_str().expect("utf-8 path");
    let (size_s, credits_s, count_s) = (size.to_string(), credits.to_string(), count.to_string());
    let qps_s = qps.to_string();
    let common = [
        "--transport",
        "tcp",
        "--auth-key-file",
        key,
        "--checksum",
        "crc32c",
        "--max-msg-size",
        &size_s,
        "--credits",
        &credits_s,
        "--qps",
        &qps_s,
        "--json",
    ];
    // The stall begins just after the receiver announced a batch of credits (half the window,
    // once that many are released; the message it holds is released by the next receive): the
    // sender then has credit for a half window it has not sent, and what it sends during the
    // stall stays unread in the sockets. Anywhere else, the sender may already be out of credit
    // with all it sent read into the receiver's slots, and nothing would be in flight.
    let batch = usize::from(credits).div_ceil(2);
    let stall_at = (count / 3 / batch).max(1) * batch + 1;
    assert!(
        stall_at < 2 * count / 3,
        "the stall comes before the second break"
    );
    let spawn = |port: u16| {
        let mut server_cmd = command(&["--server", &format!("127.0.0.1:{port}"), "--once"]);
        server_cmd
            .args(common)
            .env(
                "RDMA_CONTAINER_TEST_RECV_STALL",
                format!("{stall_at}:{}", 3000 * common::time_scale()),
            )
            .env("RDMA_CONTAINER_TEST_TCP_RCVBUF", RECEIVE_BUFFER.to_string());
        Proc::spawn("server", server_cmd)
    };
    let (mut s, port) = listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("127.0.0.1:{port}");
    let mut client_cmd = command(&["--client", &addr, "--count", &count_s, "--size", &size_s]);
    client_cmd
        .args(common)
        .env("RDMA_CONTAINER_TEST_SEND_PACE_US", "1000");
    let mut c = Proc::spawn("client", client_cmd);
    let pid = c.pid().as_raw() as u32;

    // During the stall (3 s, scaled; the kill 0.8 s into it): the sender fills the
    // window, what it sent waits unread in the receiver's socket, and is lost with the path.
    s.wait_for_stderr("test hook: stalling", LONG);
    std::thread::sleep(Duration::from_millis(800));
    kill(pid, port, Conn::Data);
    wait_for_resume(&mut c, 0);
    s.wait_for_stdout_lines(2 * count / 3, LONG);
    kill(pid, port, Conn::Control);
    wait_for_resume(&mut c, 1);

    assert_eq!(c.wait_code(LONG), 0, "client\n{}", c.report());
    assert_eq!(s.wait_code(LONG), 0, "server\n{}", s.report());
    assert_every_byte(&s.stdout(), count, size, &s);

    let (cj, sj) = (json_result(&c), json_result(&s));
    for (what, j) in [("client", &cj), ("server", &sj)] {
        assert!(j["resumes"].as_u64() >= Some(2), "{what}: {j}");
        assert_eq!(j["checksum"], "crc32c", "{what}: {j}");
        assert_eq!(j["max_msg_size"].as_u64(), Some(size as u64), "{what}: {j}");
        assert_eq!(
            j["credits"].as_u64(),
            Some(u64::from(credits)),
            "{what}: {j}"
        );
        assert_eq!(j["qps"].as_u64(), Some(u64::from(qps)), "{what}: {j}");
    }
    let resent = cj["messages_resent"].as_u64().expect("messages_resent");
    let logged: Vec<u64> = resent_in_log(&c);
    assert_eq!(
        resent,
        logged.iter().sum::<u64>(),
        "the JSON counts what the log says, resume by resume ({logged:?})\n{}",
        c.report()
    );
    assert!(
        logged.first().is_some_and(|&n| n >= 1),
        "the break with a full window lost messages in flight, which were sent again \
({logged:?})\n{}",
        c.report()
    );
    assert_eq!(
        sj["messages_resent"].as_u64(),
        Some(resent),
        "both ends count the same messages sent again\n{}",
        s.report()
    );
}

#[test]
fn a_keyed_checksummed_stream_of_64_kib_messages_with_256_credits_survives_two_breaks() {
    keyed_checksummed_session_survives_two_breaks(64 * 1024, 256, 900, 1);
}

#[test]
fn a_keyed_checksummed_stream_at_a_1_mib_max_msg_size_with_64_credits_survives_two_breaks() {
    keyed_checksummed_session_survives_two_breaks(1024 * 1024, 64, 150, 1);
}

/// `--qps 4` (four data connections, one ordered stream): the data connection killed is one of
/// the four; every lane is rebuilt, and what waited in the reorder window is sent again. What
/// the killed lane was sent during the stall beyond its receive buffer is lost in flight.
#[test]
fn a_keyed_checksummed_stream_of_1_mib_messages_over_four_queue_pairs_survives_two_breaks() {
    keyed_checksummed_session_survives_two_breaks(1024 * 1024, 64, 150, 4);
}

/// The server's stdout split by session ("N: payload" lines), each stream in its order.
fn streams(stdout: &str) -> BTreeMap<u64, Vec<String>> {
    let mut by_session: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in stdout.split_terminator('\n') {
        let (n, payload) = line.split_once(": ").expect("a session prefix");
        by_session
            .entry(n.parse().expect("a session number"))
            .or_default()
            .push(payload.to_owned());
    }
    by_session
}

/// Four resumable sessions on one server (`--max-sessions 4`, a key, checksums): one has its
/// data connection killed, another its control connection; the resume registry is shared, so
/// each attempt must reach its own session and the two others must not notice.
#[test]
fn four_keyed_sessions_on_one_server_resume_each_their_own_break() {
    if !have_ss_kill() {
        return;
    }
    const COUNT: usize = 3000;
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path());
    let key = key.to_str().expect("utf-8 path");
    let common = [
        "--transport",
        "tcp",
        "--auth-key-file",
        key,
        "--checksum",
        "crc32c",
    ];
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let mut server_cmd = command(&["--server", &addr, "--max-sessions", "4"]);
        server_cmd.args(common);
        Proc::spawn("server", server_cmd)
    };
    let (mut s, port) = listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("127.0.0.1:{port}");
    let count = COUNT.to_string();
    let mut clients: Vec<Proc> = (0..4)
        .map(|i| {
            let mut cmd = command(&["--client", &addr, "--count", &count, "--json"]);
            cmd.args(common)
                .env("RDMA_CONTAINER_TEST_SEND_PACE_US", "300");
            Proc::spawn(&format!("client {i}"), cmd)
        })
        .collect();
    s.wait_for_stdout_lines(4 * COUNT / 4, LONG);
    let (p1, p2) = (
        clients[1].pid().as_raw() as u32,
        clients[2].pid().as_raw() as u32,
    );
    kill(p1, port, Conn::Data);
    kill(p2, port, Conn::Control);
    for c in &mut clients {
        assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    }
    s.wait_for_stdout_lines(4 * COUNT, LONG);
    s.signal(Signal::SIGINT);
    s.wait(LONG);
    let by_session = streams(&s.stdout());
    assert_eq!(by_session.len(), 4, "four sessions\n{}", s.report());
    let expected: Vec<String> = (0..COUNT).map(|i| i.to_string()).collect();
    for (n, stream) in &by_session {
        assert!(
            stream == &expected,
            "session {n}: {} messages, not 0..{COUNT} once each in order\n{}",
            stream.len(),
            s.report()
        );
    }
    let resumes: Vec<u64> = clients
        .iter()
        .map(|c| json_result(c)["resumes"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        resumes[1] >= 1 && resumes[2] >= 1,
        "the two broken sessions resumed: {resumes:?}"
    );
    // Each attempt reached its own session, which proved the secret at once: an attempt
    // answered by another session's secret is retried, and would still resume once the other
    // sessions ended and left the registry.
    for c in &clients[1..3] {
        assert!(
            !c.stderr().contains("could not prove the session's secret"),
            "a resume attempt reached another session\n{}",
            c.report()
        );
    }
    assert_eq!(
        (resumes[0], resumes[3]),
        (0, 0),
        "the other two never noticed: {resumes:?}"
    );
}
