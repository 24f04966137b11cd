//! Strangers against the real binary over 127.0.0.1 (`--transport tcp`): a stranger who finds
//! the server's tcp data port (by watching the server's own listening sockets in /proc, as any
//! local user can) and holds silent connections on it cannot lock a keyed client out; strangers
//! from another address are dropped at once; text a stranger sends (a Reject's reason with a
//! terminal escape and a forged log line) reaches the server's log escaped, and a flood of them
//! makes a few log lines, not one each; a key file that is a FIFO, a character device or a
//! directory is refused at once, naming the file and what it is.
//!
//! Every server, client and raw peer here is ours; every loop is bounded in count and time
//! (`RDMA_TEST_TIME_SCALE` stretches the waits), and every child is killed when its guard drops.
//! The tests choose their keys themselves: `RDMA_CONTAINER_AUTH_KEY_FILE` is removed from the
//! binaries' environment, so a run that sets it tests the same thing.

mod common;

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{check_counting, free_port, listening_on_free_port, long, short, Proc, LONG, SHORT};
use nix::sys::signal::Signal;
use rdma_test_support::wire;

/// The environment variable through which a run may give the binaries a key (removed here).
const KEY_ENV: &str = "RDMA_CONTAINER_AUTH_KEY_FILE";
/// Silent connections a stranger opens on each data port it finds.
const STRANGERS: usize = 12;
/// Data connections the server lets wait for their token (src/transport/tcp.rs).
const MAX_PENDING_DATA: usize = 8;
/// How long the server lets one wait (src/transport/tcp.rs); not scaled: the product's own.
const TOKEN_DEADLINE: Duration = Duration::from_secs(2);
/// Messages per client session.
const COUNT: usize = 200;
/// Client sessions per stranger test (each opens a new data port).
const SESSIONS: usize = 3;
/// What a stranger says in its Reject: a terminal escape (clear screen) and a forged log line.
const EVIL: &str = "\x1b[2J\r\nFAKE LOG LINE";
/// [`EVIL`] as the log must show it (`log_text::peer_text`: control characters escaped).
const EVIL_ESCAPED: &str = r"\u{1b}[2J\r\nFAKE LOG LINE";
/// Raw control connections in a flood.
const FLOOD: usize = 300;

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A key file in `dir`: 32 random bytes in base64 and a line end, created with mode 600.
/// Returns its path and the key as the binary reads it (without the line end).
fn key_file(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).expect("getrandom");
    let key = base64(&raw);
    let path = dir.join("key");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("create the key file");
    f.write_all(format!("{key}\n").as_bytes())
        .expect("write the key");
    (path, key.into_bytes())
}

/// The binary with `args`, without a key from the environment.
fn command(args: &[String]) -> std::process::Command {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = common::command(&args);
    cmd.env_remove(KEY_ENV);
    cmd
}

fn key_args(key: Option<&Path>) -> Vec<String> {
    key.map(|k| vec!["--auth-key-file".to_owned(), k.display().to_string()])
        .unwrap_or_default()
}

/// A server (serving one session after another) on 127.0.0.1 and a free port, listening;
/// returned with its port.
fn server(key: Option<&Path>) -> (Proc, u16) {
    let spawn = |port: u16| {
        let mut args: Vec<String> = [
            "--server",
            &format!("127.0.0.1:{port}"),
            "--transport",
            "tcp",
        ]
        .map(String::from)
        .to_vec();
        args.extend(key_args(key));
        Proc::spawn("server", command(&args))
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// Runs a client that sends `count` messages to 127.0.0.1:`port` and checks that it succeeds;
/// a failure shows the server's output too.
fn run_client(port: u16, key: Option<&Path>, count: usize, server: &Proc) {
    let mut args: Vec<String> = [
        "--client",
        &format!("127.0.0.1:{port}"),
        "--transport",
        "tcp",
        "--count",
        &count.to_string(),
        "--connect-timeout",
        "10",
    ]
    .map(String::from)
    .to_vec();
    args.extend(key_args(key));
    let mut c = Proc::spawn("client", command(&args));
    let code = c.wait_code(LONG);
    assert_eq!(
        code,
        0,
        "the keyed client must succeed\n{}\n{}",
        c.report(),
        server.report()
    );
    assert!(
        c.stderr().contains(&format!("sent {count} messages")),
        "{}\n{}",
        c.report(),
        server.report()
    );
}

/// Waits until the server printed `sessions` whole sessions of `COUNT` messages and checks
/// that the last one is exactly "0".."COUNT-1".
fn check_session_output(s: &mut Proc, sessions: usize) {
    s.wait_for_stdout_lines(sessions * COUNT, LONG);
    let out = s.stdout();
    let last: String = out
        .split_terminator('\n')
        .skip((sessions - 1) * COUNT)
        .map(|l| format!("{l}\n"))
        .collect();
    if let Err(e) = check_counting(&last, COUNT as u64) {
        panic!("session {sessions}'s output: {e}\n{}", s.report());
    }
}

/// Stops a server with Ctrl-C and returns its whole log.
fn stop(mut s: Proc) -> String {
    s.signal(Signal::SIGINT);
    s.wait(SHORT);
    s.stderr()
}

/// The inodes of the sockets process `pid` holds (from /proc/PID/fd). An unreadable directory
/// is an error: a watcher that saw nothing would make the attack vacuous.
fn socket_inodes(pid: i32) -> Result<HashSet<u64>, String> {
    let dir = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
    Ok(entries
        .filter_map(Result::ok)
        // A descriptor closed between the listing and the readlink is skipped.
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect())
}

/// The IPv4 TCP sockets in state LISTEN (0A) in /proc/net/tcp: (local port, inode).
fn listening_sockets() -> Result<Vec<(u16, u64)>, String> {
    let table =
        std::fs::read_to_string("/proc/net/tcp").map_err(|e| format!("/proc/net/tcp: {e}"))?;
    Ok(table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&"0A") {
                return None;
            }
            let port = u16::from_str_radix(f.get(1)?.rsplit_once(':')?.1, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            Some((port, inode))
        })
        .collect())
}

/// Whether the server closed `s` (EOF or reset), waiting at most `timeout`; `false` while it
/// stays open. Nothing is ever sent to a stranger, so a read only ever sees the close.
fn closed_within(s: &mut TcpStream, timeout: Duration) -> bool {
    s.set_nonblocking(false).expect("blocking");
    s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .expect("SO_RCVTIMEO");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!("the server sent a stranger {n} byte(s): {:02x?}", &buf[..n]),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) => panic!("reading a stranger's socket: {e}"),
    }
}

/// How many of `sockets` are still open now (a non-blocking look).
fn still_open(sockets: &[TcpStream]) -> usize {
    let mut buf = [0u8; 64];
    sockets
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).expect("non-blocking");
            let mut s: &TcpStream = s;
            matches!(s.read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock)
        })
        .count()
}

/// One attack: the data port found and the stranger's connections to it.
struct Attack {
    port: u16,
    sockets: Vec<TcpStream>,
    /// Connections still open when the attack was ready (the real client came after).
    open_when_ready: usize,
    /// How long the server took to close all of them, when it did before the attack was ready.
    all_closed_after: Option<Duration>,
}

/// What the watcher found so far, and its error if it had to stop.
#[derive(Default)]
struct Findings {
    attacks: Vec<Attack>,
    error: Option<String>,
}

type Shared = Arc<(Mutex<Findings>, Condvar)>;

/// The stranger: watches for new listening sockets of the server process `pid` besides its
/// control port, and on each opens [`STRANGERS`] silent connections from `source` (bound
/// before connecting), which it keeps. From 127.0.0.1 (the control peer's address) it waits
/// until the server has sorted them (at most [`MAX_PENDING_DATA`] left waiting); from another
/// address until the server has closed them all (at most [`TOKEN_DEADLINE`]). Then the attack
/// is ready and the relay lets the real client go on.
fn watch(pid: i32, control_port: u16, source: Ipv4Addr, shared: Shared, stop: Arc<AtomicBool>) {
    let deadline = Instant::now() + long() * SESSIONS as u32;
    let mut seen = HashSet::new();
    let fail = |why: String| {
        let (lock, ready) = &*shared;
        lock.lock().unwrap().error = Some(why);
        ready.notify_all();
    };
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let listening = match listening_sockets() {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let ours = match socket_inodes(pid) {
            Ok(o) => o,
            Err(e) => return fail(format!("cannot see the server's sockets: {e}")),
        };
        for (port, inode) in listening {
            if port == control_port || !ours.contains(&inode) || !seen.insert(inode) {
                continue;
            }
            let attack = match attack(port, source) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            let (lock, ready) = &*shared;
            lock.lock().unwrap().attacks.push(attack);
            ready.notify_all();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn attack(port: u16, source: Ipv4Addr) -> Result<Attack, String> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let target = SockAddr::from(SocketAddr::from(([127, 0, 0, 1], port)));
    let mut sockets = Vec::with_capacity(STRANGERS);
    let started = Instant::now();
    for i in 0..STRANGERS {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| format!("socket: {e}"))?;
        if source != Ipv4Addr::LOCALHOST {
            s.bind(&SockAddr::from(SocketAddr::from((source, 0))))
                .map_err(|e| format!("bind {source}: {e}"))?;
        }
        s.connect_timeout(&target, short())
            .map_err(|e| format!("stranger {i} from {source} to port {port}: {e}"))?;
        sockets.push(TcpStream::from(s));
    }
    let mut all_closed_after = None;
    if source == Ipv4Addr::LOCALHOST {
        // The server accepts them all at once: the oldest are closed for the newer ones until
        // MAX_PENDING_DATA wait. Bounded well below TOKEN_DEADLINE, after which they all go.
        let sorted_by = started + TOKEN_DEADLINE * 3 / 4;
        while still_open(&sockets) > MAX_PENDING_DATA && Instant::now() < sorted_by {
            std::thread::sleep(Duration::from_millis(5));
        }
    } else {
        let deadline = started + short();
        let mut left: Vec<&mut TcpStream> = sockets.iter_mut().collect();
        while !left.is_empty() && Instant::now() < deadline {
            let wait = deadline.saturating_duration_since(Instant::now());
            if closed_within(left[0], wait) {
                left.remove(0);
            }
        }
        if left.is_empty() {
            all_closed_after = Some(started.elapsed());
        }
    }
    let open_when_ready = still_open(&sockets);
    Ok(Attack {
        port,
        sockets,
        open_when_ready,
        all_closed_after,
    })
}

/// A TCP relay on 127.0.0.1 in front of the server's control port that holds each Hello the
/// server sends until the stranger's attack on that session's data port is ready (or
/// `short()` passed): so the strangers are always on the data port before the real client,
/// the order the attack needs, instead of only when the watcher wins a race. The client's data
/// connection goes straight to the server (the data port is on the address the client reached
/// the relay on, 127.0.0.1, which is also the control peer's address the server sees).
/// Returns its port and the data ports of the Hellos it relayed.
fn relay(server_port: u16, shared: Shared, stop: Arc<AtomicBool>) -> (u16, Arc<Mutex<Vec<u16>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
    listener.set_nonblocking(true).expect("non-blocking");
    let port = listener.local_addr().expect("relay address").port();
    let hellos = Arc::new(Mutex::new(Vec::new()));
    let seen = hellos.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + long() * SESSIONS as u32;
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            match listener.accept() {
                Ok((client, _)) => {
                    let (shared, hellos) = (shared.clone(), seen.clone());
                    std::thread::spawn(move || relay_one(client, server_port, &shared, &hellos));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("relay accept: {e}"),
            }
        }
    });
    (port, hellos)
}

fn relay_one(mut client: TcpStream, server_port: u16, shared: &Shared, hellos: &Mutex<Vec<u16>>) {
    client.set_nonblocking(false).expect("blocking");
    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", server_port)) else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (mut up_w, mut client_r) = (
        upstream.try_clone().expect("clone"),
        client.try_clone().expect("clone"),
    );
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_r, &mut up_w);
        let _ = up_w.shutdown(std::net::Shutdown::Write);
    });
    // Server to client, frame by frame (the control channel is all frames).
    while let Ok(body) = wire::read_frame(&mut upstream) {
        if body.first() == Some(&wire::KIND_HELLO) {
            let blob = wire::hello_blob(&body).unwrap_or_default();
            let data_port = blob
                .get(..2)
                .map_or(0, |p| u16::from_le_bytes([p[0], p[1]]));
            let session = {
                let mut h = hellos.lock().unwrap();
                h.push(data_port);
                h.len()
            };
            let (lock, ready) = &**shared;
            let until = Instant::now() + short();
            let mut found = lock.lock().unwrap();
            while found.attacks.len() < session && found.error.is_none() {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                found = ready.wait_timeout(found, left).unwrap().0;
            }
        }
        if client.write_all(&wire::frame(&body)).is_err() {
            break;
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Write);
}

/// A keyed server, a stranger from `source` on every data port it opens, and [`SESSIONS`]
/// keyed clients one after another: each must send all its messages and the server print them.
/// Returns the server's log and the attacks.
fn keyed_sessions_under_attack(source: Ipv4Addr) -> (String, Vec<Attack>, Vec<u16>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, _) = key_file(dir.path());
    let (mut s, port) = server(Some(&key));
    let shared: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (shared, stop, pid) = (shared.clone(), stop.clone(), s.pid().as_raw());
        std::thread::spawn(move || watch(pid, port, source, shared, stop))
    };
    let (relay_port, hellos) = relay(port, shared.clone(), stop.clone());
    for session in 1..=SESSIONS {
        run_client(relay_port, Some(&key), COUNT, &s);
        check_session_output(&mut s, session);
        let found = shared.0.lock().unwrap();
        assert!(
            found.error.is_none(),
            "the stranger stopped: {:?}",
            found.error
        );
        assert_eq!(
            found.attacks.len(),
            session,
            "session {session}: the stranger found {} data port(s)\n{}",
            found.attacks.len(),
            s.report()
        );
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("the watcher thread");
    let log = stop_and_check(s);
    let attacks = std::mem::take(&mut shared.0.lock().unwrap().attacks);
    let hellos = hellos.lock().unwrap().clone();
    (log, attacks, hellos)
}

fn stop_and_check(s: Proc) -> String {
    let log = stop(s);
    assert!(!log.contains("panicked"), "{log}");
    log
}

/// The checks common to both stranger tests: one attack per session, on the data port the
/// server's Hello named, and every stranger closed by the server in the end.
fn check_attacks(attacks: &mut [Attack], hellos: &[u16], log: &str) {
    assert_eq!(hellos.len(), SESSIONS, "Hellos relayed: {hellos:?}\n{log}");
    let ports: Vec<u16> = attacks.iter().map(|a| a.port).collect();
    assert_eq!(
        ports, hellos,
        "the stranger attacked other ports than the sessions' data ports\n{log}"
    );
    for a in attacks.iter_mut() {
        for (i, sock) in a.sockets.iter_mut().enumerate() {
            assert!(
                closed_within(sock, short()),
                "stranger {i} on data port {} is still open after its session ended\n{log}",
                a.port
            );
        }
    }
}

#[test]
fn a_stranger_holding_the_tcp_data_port_cannot_lock_a_keyed_client_out() {
    let (log, mut attacks, hellos) = keyed_sessions_under_attack(Ipv4Addr::LOCALHOST);
    for a in &attacks {
        // The attack as it must be: at least a full table of silent strangers on the port when
        // the real client connects (more when the server had not accepted them all yet, on a
        // loaded host; the oldest are closed for newer ones as it does).
        assert!(
            a.open_when_ready >= MAX_PENDING_DATA,
            "data port {}: {} of {STRANGERS} strangers were waiting when the client came, \
expected at least {MAX_PENDING_DATA}\n{log}",
            a.port,
            a.open_when_ready
        );
    }
    check_attacks(&mut attacks, &hellos, &log);
    // The first drop of each session is logged (one line per second and session after it).
    let evictions = log.matches("the oldest goes").count();
    assert!(
        (SESSIONS..=SESSIONS * 4).contains(&evictions),
        "{evictions} eviction line(s) for {SESSIONS} sessions\n{log}"
    );
}

#[test]
fn strangers_from_another_address_are_dropped_at_the_data_port() {
    let other = Ipv4Addr::new(127, 0, 0, 2);
    let (log, mut attacks, hellos) = keyed_sessions_under_attack(other);
    for a in &attacks {
        let after = a.all_closed_after.unwrap_or_else(|| {
            panic!(
                "data port {}: strangers from {other} were not all closed within {:?}\n{log}",
                a.port,
                short()
            )
        });
        // Closed on accept, not by the token deadline (which would have let them wait).
        assert!(
            after < TOKEN_DEADLINE,
            "data port {}: strangers from {other} closed only after {after:?}\n{log}",
            a.port
        );
    }
    check_attacks(&mut attacks, &hellos, &log);
    let drops = log.matches("not the peer's address").count();
    assert!(
        (SESSIONS..=SESSIONS * 4).contains(&drops),
        "{drops} line(s) about connections from {other} for {SESSIONS} sessions\n{log}"
    );
    assert!(
        log.contains("from 127.0.0.2:"),
        "the drop names the stranger\n{log}"
    );
    assert!(!log.contains("the oldest goes"), "{log}");
}

/// [`FLOOD`] raw control connections to 127.0.0.1:`port`, each sending a Reject whose reason
/// is [`EVIL`], then closing. With `key`: every other one authenticates first (its Reject comes
/// after the proof); the others send a Reject whose reason starts "authentication" at once
/// (logged as a client that did not authenticate). Returns how many were sent.
fn flood(port: u16, key: Option<&[u8]>) -> usize {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + long();
    let mut sent = 0;
    for i in 0..FLOOD {
        if Instant::now() >= deadline {
            break;
        }
        let Ok(mut s) = TcpStream::connect_timeout(&addr, short()) else {
            continue;
        };
        s.set_read_timeout(Some(short())).expect("SO_RCVTIMEO");
        s.set_write_timeout(Some(short())).expect("SO_SNDTIMEO");
        let wrote = match key {
            Some(key) if i % 2 == 0 => {
                let mut nonce = [0x5au8; 32];
                nonce[..8].copy_from_slice(&(i as u64).to_le_bytes());
                wire::authenticate(&mut s, key, &nonce, true)
                    .and_then(|_| s.write_all(&wire::reject(EVIL)))
            }
            Some(_) => s.write_all(&wire::reject(&format!("authentication {EVIL}"))),
            None => s.write_all(&wire::reject(EVIL)),
        };
        if wrote.is_ok() {
            sent += 1;
        }
    }
    sent
}

fn check_flood_log(log: &str, what: &str) {
    assert!(
        !log.contains('\u{1b}'),
        "{what}: a raw escape reached the log:\n{log:?}"
    );
    assert!(
        !log.contains('\r'),
        "{what}: a raw carriage return reached the log:\n{log:?}"
    );
    assert!(
        !log.lines()
            .any(|l| l.trim_start().starts_with("FAKE LOG LINE")),
        "{what}: a stranger forged a log line:\n{log}"
    );
    assert!(
        log.contains(EVIL_ESCAPED),
        "{what}: the stranger's reason is not shown escaped:\n{log}"
    );
    let about_strangers = log.lines().filter(|l| l.contains("FAKE LOG LINE")).count();
    let lines = log.lines().count();
    assert!(
        about_strangers >= 1 && lines < 60,
        "{what}: {lines} log line(s) ({about_strangers} with the stranger's text) for {FLOOD} \
strangers (expected one a second)\n{log}"
    );
}

#[test]
fn stranger_text_reaches_the_server_log_escaped_and_rate_limited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_path, key) = key_file(dir.path());
    for key in [None, Some((key_path.as_path(), key.as_slice()))] {
        let what = if key.is_some() {
            "with a key"
        } else {
            "without a key"
        };
        let (mut s, port) = server(key.map(|k| k.0));
        let sent = flood(port, key.map(|k| k.1));
        assert_eq!(sent, FLOOD, "{what}: strangers sent\n{}", s.report());
        // The server is alive and serves a real client after the flood.
        run_client(port, key.map(|k| k.0), COUNT, &s);
        check_session_output(&mut s, 1);
        check_flood_log(&stop_and_check(s), what);
    }
}

#[test]
fn key_files_that_are_not_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("key.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let link = dir.path().join("key.link");
    std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
    let subdir = dir.path().join("key.dir");
    std::fs::create_dir(&subdir).expect("mkdir");
    let cases = [
        (fifo, "a FIFO"),
        (link, "a FIFO"),
        (PathBuf::from("/dev/zero"), "a character device"),
        (subdir, "a directory"),
    ];
    let bound = SHORT;
    for (path, kind) in &cases {
        let shown = path.display().to_string();
        for role in ["--server", "--client"] {
            for through_env in [false, true] {
                let mut args = vec![role.to_owned(), "127.0.0.1:0".to_owned()];
                if role == "--client" {
                    args[1] = format!("127.0.0.1:{}", free_port());
                }
                let mut cmd = command(&args);
                if through_env {
                    cmd.env(KEY_ENV, path);
                } else {
                    cmd.arg("--auth-key-file").arg(path);
                }
                let what = format!("{role} with {shown} (env: {through_env})");
                let started = Instant::now();
                // Kills it and fails the test if it blocks (a FIFO read without a writer).
                let mut p = Proc::spawn(&what, cmd);
                let code = p.wait_code(bound);
                // 2: usage (docs/troubleshooting.md, exit statuses): a flag or variable that is
                // wrong, including an --auth-key-file that cannot be used.
                assert_eq!(code, 2, "{what}: exit status\n{}", p.report());
                let err = p.stderr();
                assert!(
                    err.lines().any(|l| l.contains("ERROR")
                        && l.contains(&shown)
                        && l.contains(kind)
                        && l.contains("not a regular file")),
                    "{what}: no error line naming the file and saying {kind:?}\n{}",
                    p.report()
                );
                assert!(!err.contains("listening on"), "{what}\n{}", p.report());
                assert!(!err.contains("panicked"), "{what}\n{}", p.report());
                eprintln!("{what}: refused in {:?}", started.elapsed());
            }
        }
    }
}
