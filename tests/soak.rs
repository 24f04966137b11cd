//! One server, many sessions: 1,000 sequential sessions (by default) against one `--server` process leave its
//! file descriptors and threads exactly where they were after the first sessions, its memory
//! nearly so, and (over verbs) the RDMA resources (`rdma resource show`: QPs, CQs, MRs, PDs).

mod common;

use std::time::Duration;

use common::{test_config, test_ip, Proc, SHORT};
use rdma_container::{Config, RdmaSink};

/// Sessions before the baseline is taken (buffers, caches and lazily created state settle).
const WARM_UP: usize = 20;
/// Sessions measured against the baseline: 1,000, or `RDMA_TEST_SOAK_SESSIONS` (the soft-RoCE
/// VM runs 60 over verbs: a session there takes over a second under emulation; a leak of one
/// 64 KiB buffer per session would still pass the memory slack).
fn sessions() -> usize {
    std::env::var("RDMA_TEST_SOAK_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}
/// How much the server's resident memory may grow over the measured sessions (allocator noise,
/// not a leak: a leak of one slot per session would be 4 MiB).
const RSS_SLACK_KIB: u64 = 2048;

/// File descriptors, threads and resident memory (KiB) of a process, from /proc.
fn resources(p: &Proc) -> (usize, usize, u64) {
    let pid = p.pid().as_raw();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd ({e})\n{}", p.report()))
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status ({e})\n{}", p.report()));
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/status has no {name}\n{status}"))
    };
    (fds, field("Threads:") as usize, field("VmRSS:"))
}

/// `rdma resource show` totals (pd, cq, qp, mr) over every device, where the tool and devices
/// exist (over verbs); None elsewhere.
fn rdma_resources() -> Option<[u64; 4]> {
    let out = std::process::Command::new("rdma")
        .args(["resource", "show"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut totals = [0u64; 4];
    let mut any = false;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for (i, name) in ["pd", "cq", "qp", "mr"].iter().enumerate() {
            if let Some(at) = words.iter().position(|w| w == name) {
                if let Some(n) = words.get(at + 1).and_then(|v| v.parse::<u64>().ok()) {
                    totals[i] += n;
                    any = true;
                }
            }
        }
    }
    any.then_some(totals)
}

/// One session of three messages. The server ends its side of a session just after the
/// sender's finish returns, so a client that comes at once may still be told `busy`: the
/// library retries that within the connect timeout.
fn one_session(addr: std::net::SocketAddr, config: &Config, i: usize) {
    let mut sink =
        RdmaSink::connect(addr, config).unwrap_or_else(|e| panic!("session {i}: {}", e.chain()));
    for n in 0..3u32 {
        sink.send(format!("{i}.{n}").as_bytes())
            .unwrap_or_else(|e| panic!("session {i}: {}", e.chain()));
    }
    sink.finish()
        .unwrap_or_else(|e| panic!("session {i}: {}", e.chain()));
}

#[test]
fn a_thousand_sequential_sessions_leave_the_server_as_they_found_it() {
    let (mut server, port) = common::server("server", &["--quiet", "--max-msg-size", "4096"]);
    let listen = format!("{}:{port}", test_ip());
    let config = test_config(
        Config::default()
            .with_max_msg_size(4096)
            .with_connect_timeout(common::scaled(Duration::from_secs(10)))
            .with_handshake_timeout(common::scaled(Duration::from_secs(10))),
    );
    let addr = listen.parse().expect("a socket address");
    for i in 0..WARM_UP {
        one_session(addr, &config, i);
    }
    // The server logs each session's end after the client's finish returns: let the last one
    // settle before counting.
    std::thread::sleep(Duration::from_millis(300));
    let before = resources(&server);
    let rdma_before = rdma_resources();
    let sessions = sessions();
    for i in WARM_UP..WARM_UP + sessions {
        one_session(addr, &config, i);
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = resources(&server);
    let rdma_after = rdma_resources();
    assert!(
        server.try_status().is_none(),
        "the server exited\n{}",
        server.report()
    );
    let ended = server
        .stderr()
        .lines()
        .filter(|l| l.contains("end of stream: received 3 messages"))
        .count();
    assert_eq!(ended, WARM_UP + sessions, "{}", server.report());
    assert_eq!(
        before.0, after.0,
        "file descriptors {before:?} -> {after:?}"
    );
    assert_eq!(before.1, after.1, "threads {before:?} -> {after:?}");
    assert!(
        after.2 <= before.2 + RSS_SLACK_KIB,
        "resident memory grew from {} to {} KiB over {sessions} sessions",
        before.2,
        after.2
    );
    // Over an RDMA device, what the sessions created is gone again.
    if let (Some(b), Some(a)) = (rdma_before, rdma_after) {
        assert_eq!(b, a, "rdma resource show (pd, cq, qp, mr) {b:?} -> {a:?}");
    }
    eprintln!(
        "{sessions} sessions: fds {} -> {}, threads {} -> {}, RSS {} -> {} KiB, rdma {rdma_before:?} -> {rdma_after:?}",
        before.0, after.0, before.1, after.1, before.2, after.2
    );
    server.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(server.wait_code(SHORT), 130, "{}", server.report());
}
