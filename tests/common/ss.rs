//! Breaking a session's connections from outside, as a dying middlebox or a flapping link
//! would: `ss -K` destroys the client's socket and the kernel resets the server's.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use rdma_test_support::{on_path, skip_or_fail};

/// Which of a session's connections to kill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Conn {
    Data,
    Control,
}

/// `ss` with `-K` (socket destroy), or why the test cannot run.
pub fn have_ss_kill() -> bool {
    // These tests break the tcp transport's connections on loopback; the default pass runs
    // them. A pass for another transport (RDMA_TEST_TRANSPORT=doca, verbs) has nothing to add.
    if let Ok(t) = std::env::var("RDMA_TEST_TRANSPORT") {
        if !t.is_empty() && t != "tcp" {
            eprintln!(
                "not run in the {t} pass: it breaks tcp connections (the default pass runs it)"
            );
            return false;
        }
    }
    if on_path("ss").is_none() {
        skip_or_fail("ss (iproute2) is not installed: the tests break connections with ss -K");
        return false;
    }
    true
}

/// Kills (`ss -K`) the client's end of its established connection of kind `which` with the
/// server on `port`: the client's socket is destroyed and the server's is reset. Only sockets
/// of the client process `client_pid` on 127.0.0.1 are touched. Returns the killed socket's
/// "local peer" pair.
pub fn kill(client_pid: u32, port: u16, which: Conn) -> String {
    kill_at(client_pid, SocketAddr::from(([127, 0, 0, 1], port)), which)
}

/// [`kill`] for a server at `server` (a test address such as `RDMA_TEST_ADDR`'s), the
/// client's connections being to that address.
pub fn kill_at(client_pid: u32, server: SocketAddr, which: Conn) -> String {
    // A connection being replaced (a resume under way) shows up within moments.
    let deadline = std::time::Instant::now() + rdma_test_support::scaled(Duration::from_secs(10));
    loop {
        match try_kill_at(client_pid, server, which) {
            Ok(pair) => return pair,
            Err(listing) if std::time::Instant::now() >= deadline => {
                panic!("no {which:?} connection of pid {client_pid} in:\n{listing}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One try of [`kill`]: `Err` with the listing when there is no such connection yet.
pub fn try_kill(client_pid: u32, port: u16, which: Conn) -> Result<String, String> {
    try_kill_at(client_pid, SocketAddr::from(([127, 0, 0, 1], port)), which)
}

/// The client process `client_pid`'s established connections to the server at `server`:
/// (its local address, the peer's, whether it is the control connection), or the listing.
fn connections(client_pid: u32, server: SocketAddr) -> (Vec<(String, String, bool)>, String) {
    let listing = Command::new("ss")
        .args(["-tnpH", "state", "established"])
        .output()
        .expect("ss runs");
    let text = String::from_utf8_lossy(&listing.stdout).into_owned();
    let owner = format!("pid={client_pid},");
    let server_port = server.to_string();
    let server_host = format!("{}:", server.ip());
    let found = text
        .lines()
        .filter(|l| l.contains(&owner))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // Recv-Q Send-Q Local Peer Process (the state column is left out with `state`).
            let (local, peer) = (cols.get(2)?, cols.get(3)?);
            let control = *peer == server_port;
            (control || peer.starts_with(&server_host))
                .then(|| (local.to_string(), peer.to_string(), control))
        })
        .collect();
    (found, text)
}

/// Drops, from now on, every packet the client process `client_pid` sends on its established
/// connections to the server at `server` (an nftables table of the calling thread's network
/// namespace, which must be the test's own), then kills its control connection (`ss -K`): a
/// break the server's end never hears of, neither the reset nor, later, the client closing
/// its other connections. Returns the killed connection's pair.
pub fn kill_silently(client_pid: u32, server: SocketAddr) -> String {
    let (found, listing) = connections(client_pid, server);
    assert!(
        found.iter().any(|c| c.2),
        "no control connection of pid {client_pid} in:\n{listing}"
    );
    let mut rules = String::from(
        "table inet silent { chain out { type filter hook output priority 0; policy accept;\n",
    );
    for (local, peer, _) in &found {
        let (l, p) = (parse(local), parse(peer));
        rules.push_str(&format!(
            "ip saddr {} tcp sport {} ip daddr {} tcp dport {} drop\n",
            l.ip(),
            l.port(),
            p.ip(),
            p.port()
        ));
    }
    rules.push_str("}\n}\n");
    let mut nft = Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft runs");
    std::io::Write::write_all(nft.stdin.as_mut().expect("stdin"), rules.as_bytes())
        .expect("rules written");
    drop(nft.stdin.take());
    assert!(
        nft.wait().expect("nft ends").success(),
        "nft -f failed on:\n{rules}"
    );
    try_kill_at(client_pid, server, Conn::Control).unwrap_or_else(|l| panic!("gone:\n{l}"))
}

fn parse(addr: &str) -> SocketAddr {
    addr.parse()
        .unwrap_or_else(|e| panic!("{addr} from ss is not an address: {e}"))
}

/// One try of [`kill_at`].
fn try_kill_at(client_pid: u32, server: SocketAddr, which: Conn) -> Result<String, String> {
    let (found, text) = connections(client_pid, server);
    let pair = found
        .into_iter()
        .find(|(_, _, control)| match which {
            Conn::Control => *control,
            Conn::Data => !*control,
        })
        .map(|(local, peer, _)| (local, peer));
    let Some(pair) = pair else {
        return Err(text);
    };
    let filter = format!("src {} and dst {}", pair.0, pair.1);
    let out = Command::new("ss")
        .args(["-K", "-tn", &filter])
        .output()
        .expect("ss -K runs");
    assert!(
        out.status.success(),
        "ss -K {filter} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(format!("{} {}", pair.0, pair.1))
}
