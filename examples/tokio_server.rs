//! A tokio server that serves many senders at once on one thread, a task per session, and a
//! few clients to show it (with no arguments everything runs over 127.0.0.1).
//!
//! `cargo run --example tokio_server -- IP:PORT` serves until Ctrl-C. The library's `tokio`
//! feature gives `AsyncListener`, `AsyncRdmaSrc` and `AsyncRdmaSink`; a session's handshake
//! (accepting it in a role) blocks for a round trip or two, so it runs on a blocking thread.

use std::net::SocketAddr;
use std::time::Duration;

use rdma_container::tokio::{AsyncListener, AsyncRdmaSrc};
use rdma_container::{Config, Error, Listener, RdmaSink, Result, Role};

/// Accepts `sessions` senders (all of them, when `None`), each served by its own task.
async fn serve(listener: Listener, sessions: Option<u32>) -> Result<()> {
    let mut listener = AsyncListener::new(listener)?;
    let mut tasks = tokio::task::JoinSet::new();
    let mut accepted = 0;
    while sessions.is_none_or(|n| accepted < n) {
        let incoming = listener.accept().await?;
        if incoming.peer_role() != Role::Sender {
            incoming.refuse("this server only receives");
            continue;
        }
        accepted += 1;
        let peer = incoming.peer_addr();
        tasks.spawn(async move {
            let set_up = tokio::task::spawn_blocking(move || incoming.accept_src()).await;
            let src = match set_up {
                Ok(Ok(src)) => src,
                Ok(Err(e)) => return eprintln!("{peer}: setup failed: {}", e.chain()),
                Err(e) => return eprintln!("{peer}: setup task failed: {e}"),
            };
            let mut src = match AsyncRdmaSrc::new(src) {
                Ok(src) => src,
                Err(e) => return eprintln!("{peer}: {}", e.chain()),
            };
            let mut bytes = 0;
            loop {
                match src.recv().await {
                    Ok(Some(m)) => bytes += m.len(),
                    Ok(None) => {
                        let n = src.get_ref().received();
                        return println!("{peer}: {n} messages, {bytes} bytes");
                    }
                    // One client's failure never stops the server.
                    Err(e) => return eprintln!("{peer}: {}", e.chain()),
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the tokio runtime: {e}")))?;
    let config = Config::default().with_handshake_timeout(Duration::from_secs(5));
    if let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        return runtime.block_on(serve(Listener::bind(addr, &config)?, None));
    }
    let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &config)?;
    let at = listener.local_addr();
    // the clients: blocking senders on threads of their own, all at once
    let clients: Vec<_> = (0..4u32)
        .map(|client| {
            let config = config.clone();
            std::thread::spawn(move || -> Result<u64> {
                let mut sink = RdmaSink::connect(at, &config)?;
                for i in 0..1000 * (client + 1) {
                    sink.send(&i.to_le_bytes())?;
                }
                sink.finish()
            })
        })
        .collect();
    runtime.block_on(serve(listener, Some(4)))?;
    for client in clients {
        client
            .join()
            .map_err(|_| Error::Internal("a client thread panicked".to_owned()))??;
    }
    Ok(())
}
