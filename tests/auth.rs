//! Pre-shared-key authentication with the real binary over loopback (`--transport tcp`): the
//! right key on both ends carries a whole session; no key, another key, a key on one side only,
//! a replayed handshake and an open key file are refused with words that say why, the server
//! sets nothing up for them and logs who tried, and the key never appears in any output.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{free_port, listening_on_free_port, Proc, SHORT};
use rdma_test_support::wire::{self, read_frame, KIND_AUTH_RESPONSE};

const KEY: &str = "correct-horse-battery-staple-0123456789";
const OTHER_KEY: &str = "another-key-entirely-abcdefghijklmnop";

/// A key file with `contents` and `mode` in `dir`.
fn key_file(dir: &Path, name: &str, contents: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{contents}\n")).expect("write the key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

fn server(key: Option<&Path>) -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["--server", addr.as_str(), "--transport", "tcp"];
        let key = key.map(|k| k.display().to_string());
        if let Some(k) = &key {
            args.extend(["--auth-key-file", k.as_str()]);
        }
        common::start("server", &args)
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

fn client(port: u16, key: Option<&Path>, count: &str) -> Proc {
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec![
        "--client",
        addr.as_str(),
        "--transport",
        "tcp",
        "--count",
        count,
        "--connect-timeout",
        "10",
    ];
    let key = key.map(|k| k.display().to_string());
    if let Some(k) = &key {
        args.extend(["--auth-key-file", k.as_str()]);
    }
    common::start("client", &args)
}

fn stop(mut s: Proc) -> String {
    s.signal(nix::sys::signal::Signal::SIGINT);
    s.wait(SHORT);
    s.stderr()
}

#[test]
fn the_same_key_on_both_ends_carries_ten_thousand_messages_and_never_shows_the_key() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (mut s, port) = server(Some(&key));
    let mut c = client(port, Some(&key), "10000");
    assert_eq!(c.wait_code(Duration::from_secs(60)), 0, "{}", c.report());
    s.wait_for_stdout_lines(10_000, Duration::from_secs(30));
    let printed = s.stdout();
    let expected: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    assert!(
        printed.lines().eq(expected.iter().map(String::as_str)),
        "the server printed something else than 0..9999 in order"
    );
    let server_log = stop(s);
    for out in [server_log, c.stderr(), c.stdout()] {
        assert!(!out.contains(KEY), "the key leaked:\n{out}");
    }
}

#[test]
fn a_client_without_the_key_is_refused_in_one_round_trip_and_logged() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (s, port) = server(Some(&key));
    let mut c = client(port, None, "10");
    // 4: refused or rejected (docs/troubleshooting.md, exit statuses).
    assert_eq!(c.wait_code(Duration::from_secs(30)), 4, "{}", c.report());
    assert!(
        c.stderr().contains("authentication required"),
        "{}",
        c.report()
    );
    let log = stop(s);
    assert!(
        log.contains("refused a client that did not authenticate"),
        "{log}"
    );
    assert!(!log.contains("session established"), "{log}");
}

#[test]
fn another_key_is_refused_on_both_ends_without_a_session() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let other = key_file(dir.path(), "other", OTHER_KEY, 0o600);
    let (s, port) = server(Some(&key));
    let mut c = client(port, Some(&other), "10");
    // 4: refused or rejected (docs/troubleshooting.md, exit statuses).
    assert_eq!(c.wait_code(Duration::from_secs(30)), 4, "{}", c.report());
    assert!(
        c.stderr().contains("authentication failed"),
        "{}",
        c.report()
    );
    let log = stop(s);
    assert!(log.contains("did not authenticate"), "{log}");
    assert!(!log.contains("session established"), "{log}");
    for out in [log, c.stderr()] {
        assert!(
            !out.contains(KEY) && !out.contains(OTHER_KEY),
            "a key leaked:\n{out}"
        );
    }
}

#[test]
fn a_key_on_the_client_only_is_refused_with_a_reason_that_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (s, port) = server(None);
    let mut c = client(port, Some(&key), "10");
    // 4: refused or rejected (docs/troubleshooting.md, exit statuses).
    assert_eq!(c.wait_code(Duration::from_secs(30)), 4, "{}", c.report());
    assert!(
        c.stderr().contains("this server has no authentication key"),
        "{}",
        c.report()
    );
    stop(s);
}

#[test]
fn a_replayed_handshake_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (s, port) = server(Some(&key));
    let connect = || {
        let c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.set_read_timeout(Some(SHORT)).expect("timeout");
        c
    };
    // A session an eavesdropper recorded: the client's challenge and its proof.
    let nonce = [7u8; 32];
    let mut first = connect();
    let (server_nonce, server_proof) =
        wire::authenticate(&mut first, KEY.as_bytes(), &nonce, true).expect("first handshake");
    assert_eq!(
        server_proof,
        wire::proof(
            KEY.as_bytes(),
            wire::SERVER_PROOF_LABEL,
            &nonce,
            &server_nonce
        ),
        "the server proves the key"
    );
    let recorded = wire::proof(
        KEY.as_bytes(),
        wire::CLIENT_PROOF_LABEL,
        &nonce,
        &server_nonce,
    );
    drop(first);
    // Replayed: the same challenge and the same proof, which the server's fresh nonce voids.
    let mut replay = connect();
    replay
        .write_all(&wire::auth_challenge(&nonce))
        .expect("challenge");
    let body = read_frame(&mut replay).expect("a response");
    assert_eq!(body.first(), Some(&KIND_AUTH_RESPONSE));
    assert_ne!(&body[1..33], &server_nonce, "the server's nonce is fresh");
    replay
        .write_all(&wire::auth_proof(&recorded))
        .expect("proof");
    let answer = read_frame(&mut replay).expect("an answer");
    let reason = wire::parse_reject(&wire::frame(&answer)).expect("a Reject");
    assert_eq!(reason, "authentication failed");
    let log = stop(s);
    assert!(log.contains("did not authenticate"), "{log}");
}

#[test]
fn a_key_file_others_can_read_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o644);
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let path = key.display().to_string();
    let (code, _, err) = common::run(&["--server", &addr, "--auth-key-file", &path], SHORT);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    assert!(!err.contains(KEY), "the key leaked: {err}");
    // The same through the environment.
    let mut cmd = common::command(&["--server", &addr]);
    cmd.env("RDMA_CONTAINER_AUTH_KEY_FILE", &key);
    let done = common::run_command(cmd, SHORT);
    assert_ne!(done.code, Some(0), "{}", done.show());
    assert!(done.stderr.contains("chmod 600"), "{}", done.show());
}

/// The library listener counts the clients it refused for not proving the key (for
/// `--metrics`), and they never reach `accept`.
#[test]
fn the_listener_counts_clients_refused_for_the_key() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let with_key = rdma_container::Config::default()
        .with_transport(rdma_container::TransportChoice::Tcp)
        .with_auth_key(Some(rdma_container::AuthKey::from_file(&key).expect("key")));
    let listener = rdma_container::Listener::bind("127.0.0.1:0".parse().expect("addr"), &with_key)
        .expect("bind");
    let without = rdma_container::Config::default()
        .with_transport(rdma_container::TransportChoice::Tcp)
        .with_connect_timeout(SHORT);
    for _ in 0..2 {
        let e = rdma_container::RdmaSink::connect(listener.local_addr(), &without).unwrap_err();
        assert!(e.to_string().contains("authentication required"), "{e}");
    }
    let deadline = std::time::Instant::now() + SHORT;
    while listener.auth_refusals() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(listener.auth_refusals(), 2);
    assert!(listener
        .accept_timeout(Duration::from_millis(200))
        .expect("accept")
        .is_none());
}

/// A server with a key and a handshake timeout far longer than the test; its handshakes log at
/// debug level ("ADDR: proved the key").
fn patient_server(key: &Path) -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let key = key.display().to_string();
        let mut cmd = common::command(&[
            "--server",
            &addr,
            "--transport",
            "tcp",
            "--auth-key-file",
            &key,
            "--handshake-timeout",
            "60",
        ]);
        cmd.env("RUST_LOG", "info,rdma_container::session::handshake=debug");
        Proc::spawn("server", cmd)
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// Reads until the server closes the connection (or resets it); fails after `limit`.
fn wait_closed_by_server(s: &mut TcpStream, limit: Duration) {
    use std::io::Read;
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("not closed within {limit:?}: {e}"),
        }
    }
}

#[test]
fn a_silent_stranger_is_closed_after_the_authentication_window_not_the_handshake_timeout() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (s, port) = patient_server(&key);
    let connected = std::time::Instant::now();
    let mut silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    // A stranger that sent its challenge but never its proof is held no longer either.
    let mut half = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    half.write_all(&wire::auth_challenge(&[9u8; 32]))
        .expect("challenge");
    let body = read_frame(&mut half).expect("the server's response");
    assert_eq!(body.first(), Some(&KIND_AUTH_RESPONSE));
    // The window is 2 s; the handshake timeout 60 s. 20 s leaves room for a loaded host.
    for (who, s) in [("silent", &mut silent), ("half-authenticated", &mut half)] {
        wait_closed_by_server(s, Duration::from_secs(20));
        let took = connected.elapsed();
        assert!(
            took >= Duration::from_secs(1),
            "the {who} connection was closed {took:?} after it connected: before its window ended"
        );
    }
    let log = stop(s);
    assert!(
        log.contains("timed out after 2.0 s (the client's authentication)"),
        "{log}"
    );
}

#[test]
fn a_client_that_proved_the_key_keeps_its_place_while_strangers_flood_the_table() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (mut s, port) = patient_server(&key);
    let mut proven = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    proven.set_read_timeout(Some(SHORT)).expect("timeout");
    wire::authenticate(&mut proven, KEY.as_bytes(), &[4u8; 32], true).expect("authentication");
    // The flood begins once the server read the proof: a proof still in the socket is no proof
    // yet, and its sender goes first like any stranger (CI once flooded before the server's
    // handshake thread had run).
    let me = proven.local_addr().expect("address").to_string();
    s.wait_for_stderr(&format!("{me}: proved the key"), SHORT);
    // Three times the handshake table, each new one evicting someone: never the proven client.
    let flood: Vec<TcpStream> = (0..3 * rdma_container::MAX_PENDING_HANDSHAKES)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    proven
        .write_all(&wire::hello(wire::ROLE_SENDER, 1 << 20, &[]))
        .expect("hello");
    let answer = read_frame(&mut proven).expect("the server's answer to the proven client");
    assert!(
        wire::hello_blob(&answer).is_some(),
        "the proven client got {answer:?} instead of the server's Hello"
    );
    drop(flood);
    let log = stop(s);
    assert!(
        log.contains("closed the oldest unfinished handshake"),
        "the flood evicted nobody: {log}"
    );
}

/// The server's hello to a raw client that asks to resume (resume timeout 10 s in its hello):
/// (session id, resume secret) as the wire carries them.
fn resume_fields_of_the_servers_hello(port: u16, key: Option<&[u8]>) -> ([u8; 16], [u8; 32]) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(SHORT)).expect("timeout");
    if let Some(key) = key {
        wire::authenticate(&mut s, key, &[7u8; 32], true).expect("authenticate");
    }
    let mut hello = wire::hello(wire::ROLE_SENDER, 1024, &[]);
    // The frame's 4-byte length, then the body: kind, magic, version, role, transport, max
    // message size, credits, queue pairs, paths (none), GID, checksum, and the resume timeout
    // in milliseconds.
    let at = 4 + 1 + 4 + 2 + 1 + 1 + 4 + 2 + 1 + 1 + 16 + 1;
    hello[at..at + 4].copy_from_slice(&10_000u32.to_le_bytes());
    s.write_all(&hello).expect("send hello");
    let body = read_frame(&mut s).expect("the server's hello");
    assert_eq!(body[0], wire::KIND_HELLO, "a hello, not {body:?}");
    let at = 1 + 4 + 2 + 1 + 1 + 4 + 2 + 1 + 1 + 16 + 1;
    assert_ne!(
        &body[at..at + 4],
        &[0u8; 4],
        "the server resumes (its hello's resume timeout)"
    );
    let mut id = [0u8; 16];
    id.copy_from_slice(&body[at + 4..at + 20]);
    let mut secret = [0u8; 32];
    secret.copy_from_slice(&body[at + 20..at + 52]);
    (id, secret)
}

/// What a keyed hello carries (issue 32): with a pre-shared key the resume secret never
/// travels (both ends derive it from the key and the handshake's nonces); without one it is in
/// the server's hello, the only place the client can learn it.
#[test]
fn a_keyed_servers_hello_carries_a_session_id_but_never_the_resume_secret() {
    let dir = tempfile::tempdir().expect("dir");
    let key = key_file(dir.path(), "key", KEY, 0o600);
    let (s, port) = server(Some(&key));
    let (id, secret) = resume_fields_of_the_servers_hello(port, Some(KEY.as_bytes()));
    assert_ne!(id, [0u8; 16], "a resumable session has an id");
    assert_eq!(
        secret, [0u8; 32],
        "the secret is derived, never sent, with a key"
    );
    let (other_id, _) = resume_fields_of_the_servers_hello(port, Some(KEY.as_bytes()));
    assert_ne!(id, other_id, "each session has its own id");
    stop(s);

    let (s, port) = server(None);
    let (id, secret) = resume_fields_of_the_servers_hello(port, None);
    assert_ne!(id, [0u8; 16]);
    assert_ne!(
        secret, [0u8; 32],
        "without a key the secret travels in the hello"
    );
    stop(s);
}
