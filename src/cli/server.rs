//! `--server`: accept senders one after another and print what they send.
//!
//! An acceptor thread reads each new connection's hello on its own thread (so a silent or
//! garbage peer cannot block anybody) and hands valid ones to the session loop; while a
//! session runs, further clients get Reject("busy").

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdma_container::net::bootstrap;
use rdma_container::net::wait::{wait_any, Interest};
use rdma_container::net::ControlChannel;
use rdma_container::proto::{Hello, Role};
use rdma_container::{Config, Error, RdmaSrc, Session};

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
    let end = loop {
        match src.recv() {
            Ok(Some(payload)) => printer.print(payload),
            Ok(None) => break SessionEnd::EndOfStream,
            Err(Error::Interrupted) => break SessionEnd::Interrupted,
            Err(e) => {
                printer.flush();
                log::error!("{label}: {e}");
                break SessionEnd::Failed;
            }
        }
    };
    printer.flush();
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
    let listener = bootstrap::listen(addr)?;
    listener
        .set_nonblocking(true)
        .context("cannot make the listening socket non-blocking")?;
    log::info!(
        "listening on {addr} (transport {}, credits {}, max message {} bytes)",
        config.transport,
        config.credits,
        config.max_msg_size
    );
    let busy = Arc::new(AtomicBool::new(false));
    let (tx, rx) = channel::<(ControlChannel, Hello)>();
    {
        let (config, busy, stop) = (config.clone(), busy.clone(), stop.clone());
        std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || accept_loop(listener, config, busy, stop, tx))
            .context("cannot start the acceptor thread")?;
    }
    let mut printer = PayloadPrinter::new(quiet);
    let mut sessions = 0u64;
    loop {
        let (control, hello) = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(conn) => conn,
            Err(_) if stop.load(Ordering::Relaxed) => {
                log::info!("interrupted after {sessions} session(s)");
                return Ok(EXIT_INTERRUPTED);
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => anyhow::bail!("the acceptor thread stopped"),
        };
        sessions += 1;
        let peer = control.peer_addr();
        let label = format!("session {sessions} from {peer}");
        let end = match Session::accept(control, hello, Role::Receiver, &config)
            .and_then(RdmaSrc::from_session)
        {
            Ok(src) => receive_all(src, &mut printer, &label),
            Err(e) => {
                log::error!("{label}: setup failed: {e}");
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

fn accept_loop(
    listener: std::net::TcpListener,
    config: Config,
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tx: Sender<(ControlChannel, Hello)>,
) {
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = wait_any(
            &[Interest::read(listener.as_fd())],
            Duration::from_millis(200),
        ) {
            log::error!("waiting for connections failed: {e}");
            return;
        }
        let (stream, peer) = match bootstrap::accept(&listener) {
            Ok(Some(conn)) => conn,
            Ok(None) => continue,
            Err(e) => {
                log::warn!("{e}");
                continue;
            }
        };
        log::debug!("connection from {peer}");
        let (config, busy, tx) = (config.clone(), busy.clone(), tx.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("hello-{peer}"))
            .spawn(move || match Session::read_hello(stream, &config) {
                Ok((mut control, hello)) => {
                    if busy
                        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                        .is_err()
                    {
                        log::warn!("rejected {peer}: busy with another session");
                        control
                            .reject("busy: the server is serving another client; try again later");
                    } else if let Err(std::sync::mpsc::SendError((mut control, _))) =
                        tx.send((control, hello))
                    {
                        control.reject("the server is shutting down");
                    }
                }
                Err(e) => log::warn!("ignored connection from {peer}: {e}"),
            });
        if let Err(e) = spawned {
            log::error!("cannot start a handshake thread for {peer}: {e}");
        }
    }
}
