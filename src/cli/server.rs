//! `--server`: accept senders one after another and print what they send.
//!
//! The library's [`Listener`] reads each new connection's hello on its own thread (so a silent
//! or garbage peer cannot block anybody); a doorman thread hands valid clients to the session
//! loop and, while a session runs, answers further clients with Reject("busy").

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SendError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdma_container::{Config, Error, Incoming, Listener, RdmaSrc};

use super::metrics;
use super::output::{summary_line, PayloadPrinter};
use super::EXIT_INTERRUPTED;

/// How a receiving session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The sender finished and every message arrived.
    EndOfStream,
    /// Ctrl-C.
    Interrupted,
    /// Any other failure (already logged).
    Failed,
}

/// Receives until end of stream, printing payloads and a summary line.
pub fn receive_all(mut src: RdmaSrc, printer: &mut PayloadPrinter, label: &str) -> SessionEnd {
    let started = Instant::now();
    metrics::session_started(src.info());
    let end = loop {
        match src.recv() {
            Ok(Some(payload)) => {
                metrics::message_received(payload.len());
                printer.print(payload)
            }
            Ok(None) => break SessionEnd::EndOfStream,
            Err(Error::Interrupted) => break SessionEnd::Interrupted,
            Err(e) => {
                metrics::error(&e);
                printer.flush();
                log::error!("{label}: {}", e.chain());
                break SessionEnd::Failed;
            }
        }
    };
    printer.flush();
    metrics::session_ended(&end);
    let how = match end {
        SessionEnd::EndOfStream => "end of stream",
        SessionEnd::Interrupted => "interrupted",
        SessionEnd::Failed => "failed",
    };
    log::info!(
        "{label}: {how}: received {}",
        summary_line(src.received(), src.bytes_received(), started.elapsed())
    );
    if end == SessionEnd::Interrupted {
        src.abort("the server was interrupted (Ctrl-C)");
    }
    end
}

/// Runs the server until Ctrl-C (or after one session with `once`); returns the exit status.
pub fn run(
    addr: SocketAddr,
    config: Config,
    once: bool,
    quiet: bool,
    stop: Arc<AtomicBool>,
) -> Result<u8> {
    let listener = Listener::bind(addr, &config)?;
    log::info!(
        "listening on {addr} (transport {}, credits {}, max message {} bytes)",
        config.transport,
        config.credits,
        config.max_msg_size
    );
    // The doorman hands clients over while we are idle and refuses them as busy during a
    // session.
    let busy = Arc::new(AtomicBool::new(false));
    let (tx, rx) = sync_channel::<Incoming>(0);
    {
        let (busy, stop) = (busy.clone(), stop.clone());
        std::thread::Builder::new()
            .name("doorman".into())
            .spawn(move || doorman(listener, busy, stop, tx))
            .context("cannot start the doorman thread")?;
    }
    let mut printer = PayloadPrinter::new(quiet);
    let mut sessions = 0u64;
    loop {
        let incoming = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(incoming) => incoming,
            Err(_) if stop.load(Ordering::Relaxed) => {
                log::info!("interrupted after {sessions} session(s)");
                return Ok(EXIT_INTERRUPTED);
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => anyhow::bail!("the doorman thread stopped"),
        };
        sessions += 1;
        let label = format!("session {sessions} from {}", incoming.peer_addr());
        let end = match incoming.accept_src() {
            Ok(src) => receive_all(src, &mut printer, &label),
            Err(e) => {
                metrics::setup_failed(&e);
                log::error!("{label}: setup failed: {}", e.chain());
                SessionEnd::Failed
            }
        };
        busy.store(false, Ordering::SeqCst);
        match end {
            SessionEnd::Interrupted => return Ok(EXIT_INTERRUPTED),
            _ if stop.load(Ordering::Relaxed) => return Ok(EXIT_INTERRUPTED),
            SessionEnd::EndOfStream if once => return Ok(0),
            SessionEnd::Failed if once => return Ok(1),
            _ => {}
        }
    }
}

/// Takes clients from the listener: the first while idle goes to the session loop, the rest
/// are refused as busy until that session ends.
fn doorman(
    listener: Listener,
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tx: SyncSender<Incoming>,
) {
    while !stop.load(Ordering::Relaxed) {
        metrics::listener_refusals(listener.busy_refusals());
        let incoming = match listener.accept_timeout(Duration::from_millis(200)) {
            Ok(Some(incoming)) => incoming,
            Ok(None) | Err(Error::Interrupted) => continue,
            Err(e) => {
                log::error!("accepting clients failed: {}", e.chain());
                return;
            }
        };
        if busy
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            log::warn!(
                "rejected {}: busy with another session",
                incoming.peer_addr()
            );
            metrics::refused();
            incoming.refuse("busy: the server is serving another client; try again later");
        } else if let Err(SendError(incoming)) = tx.send(incoming) {
            incoming.refuse("the server is shutting down");
            return;
        }
    }
}
