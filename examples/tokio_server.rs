//! A tokio server that serves many senders at once on one thread, a task per session, and a
//! few async clients to show it (with no arguments both ends run on one thread, over
//! 127.0.0.1).
//!
//! `cargo run --example tokio_server -- IP:PORT` serves until Ctrl-C. The library's `tokio`
//! feature gives `AsyncListener`, `AsyncRdmaSrc` and `AsyncRdmaSink`; a session's handshake
//! (accepting it in a role) blocks for a round trip or two, so it runs on a blocking thread.

use std::net::SocketAddr;
use std::time::Duration;

use rdma_container::tokio::{AsyncListener, AsyncRdmaSink, AsyncRdmaSrc};
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
    // both ends on the one thread: the server's tasks and four async senders
    runtime.block_on(async move {
        let server = tokio::spawn(serve(listener, Some(4)));
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..4u32 {
            let config = config.clone();
            clients.spawn(async move {
                // connecting blocks for the handshake: on a blocking thread
                let sink = tokio::task::spawn_blocking(move || RdmaSink::connect(at, &config))
                    .await
                    .map_err(|e| Error::Internal(format!("the connect task failed: {e}")))??;
                let mut sink = AsyncRdmaSink::new(sink)?;
                for i in 0..1000 * (client + 1) {
                    sink.send(&i.to_le_bytes()).await?;
                }
                sink.finish().await
            });
        }
        while let Some(sent) = clients.join_next().await {
            sent.map_err(|e| Error::Internal(format!("a client task failed: {e}")))??;
        }
        server
            .await
            .map_err(|e| Error::Internal(format!("the server task failed: {e}")))?
    })
}
