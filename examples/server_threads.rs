//! A server whose accepted sessions each run on a thread of their own, so several clients
//! send at once, and three concurrent clients to show it (with no arguments everything runs
//! over 127.0.0.1). `Incoming`, `RdmaSrc` and `RdmaSink` are `Send`: a session set up on one
//! thread may run on another.
//!
//! `cargo run --example server_threads -- IP:PORT` serves until Ctrl-C.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use rdma_container::{Config, Error, Incoming, Listener, RdmaSink, Result, Role};

/// One session, on its own thread: set-up, then receiving until the client finishes.
fn receive(incoming: Incoming) -> Result<u64> {
    let mut src = incoming.accept_src()?;
    while src.recv()?.is_some() {}
    Ok(src.received())
}

/// Accepts `sessions` clients (or serves until an error), each on a new thread; returns what
/// each session received, in the order they were accepted.
fn serve(listener: &Listener, sessions: Option<usize>) -> Result<Vec<u64>> {
    let mut running: Vec<(SocketAddr, JoinHandle<Result<u64>>)> = Vec::new();
    while sessions.is_none_or(|n| running.len() < n) {
        let incoming = listener.accept()?;
        if incoming.peer_role() != Role::Sender {
            incoming.refuse("this server only receives");
            continue;
        }
        let peer = incoming.peer_addr();
        running.push((peer, std::thread::spawn(move || receive(incoming))));
    }
    let mut received = Vec::new();
    for (peer, session) in running {
        match session.join() {
            Ok(Ok(n)) => received.push(n),
            // One client's failure never stops the server.
            Ok(Err(e)) => eprintln!("{peer}: {}", e.chain()),
            Err(_) => eprintln!("{peer}: the session's thread panicked"),
        }
    }
    Ok(received)
}

fn send(at: SocketAddr, config: &Config, count: u32) -> Result<u64> {
    let mut sink = RdmaSink::connect(at, config)?;
    for i in 0..count {
        sink.send(&i.to_le_bytes())?;
    }
    sink.finish()
}

fn main() -> Result<()> {
    let config = Config::default().with_handshake_timeout(Duration::from_secs(5));
    if let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        serve(&Listener::bind(addr, &config)?, None)?;
        return Ok(());
    }
    let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &config)?;
    let at = listener.local_addr();
    let server = std::thread::spawn(move || serve(&listener, Some(3)));
    let clients: Vec<_> = (1..=3u32)
        .map(|k| {
            let config = config.clone();
            std::thread::spawn(move || send(at, &config, k * 10))
        })
        .collect();
    for client in clients {
        client
            .join()
            .map_err(|_| Error::Internal("a client thread panicked".to_owned()))??;
    }
    let mut received = server
        .join()
        .map_err(|_| Error::Internal("the server thread panicked".to_owned()))??;
    received.sort_unstable();
    for n in received {
        println!("{n} messages");
    }
    Ok(())
}
