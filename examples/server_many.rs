//! A server that serves clients one after another, refusing those it does not want, and a
//! few clients to show it (with no arguments everything runs over 127.0.0.1).
//!
//! `cargo run --example server_many -- IP:PORT` serves until Ctrl-C.

use std::net::SocketAddr;
use std::time::Duration;

use rdma_container::{Config, Error, Listener, RdmaSink, Result, Role};

fn serve(listener: &Listener, sessions: Option<u32>) -> Result<()> {
    let mut served = 0;
    while sessions.is_none_or(|n| served < n) {
        let incoming = listener.accept()?;
        let peer = incoming.peer_addr();
        if incoming.peer_role() != Role::Sender {
            incoming.refuse("this server only receives");
            continue;
        }
        served += 1;
        match incoming.accept_src() {
            Ok(mut src) => loop {
                match src.recv() {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        println!("{peer}: {} messages", src.received());
                        break;
                    }
                    Err(e) => {
                        // One client's failure never stops the server.
                        eprintln!("{peer}: {}", e.chain());
                        break;
                    }
                }
            },
            Err(e) => eprintln!("{peer}: setup failed: {}", e.chain()),
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let config = Config::default().with_handshake_timeout(Duration::from_secs(5));
    if let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        return serve(&Listener::bind(addr, &config)?, None);
    }
    let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &config)?;
    let at = listener.local_addr();
    let server = std::thread::spawn(move || serve(&listener, Some(3)));
    for client in 0..3u32 {
        let mut sink = RdmaSink::connect(at, &config)?;
        for i in 0..=client * 10 {
            sink.send(&i.to_le_bytes())?;
        }
        sink.finish()?;
    }
    match server.join() {
        Ok(result) => result,
        Err(_) => Err(Error::Internal("the server thread panicked".to_owned())),
    }
}
