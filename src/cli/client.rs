//! `--client`: send `--count` messages and finish the stream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use rdma_container::{Config, Error, RdmaSink};

use super::metrics;
use super::output::{summary_line, Payloads};
use super::EXIT_INTERRUPTED;

/// Connects, sends, finishes; returns the exit status (130 after Ctrl-C).
pub fn run(
    addr: SocketAddr,
    config: &Config,
    count: u64,
    size: Option<usize>,
    stop: &Arc<AtomicBool>,
) -> Result<u8> {
    let sink = match RdmaSink::connect(addr, config) {
        Ok(sink) => sink,
        Err(Error::Interrupted) => {
            log::info!("Ctrl-C before the session with {addr} started");
            return Ok(EXIT_INTERRUPTED);
        }
        Err(e) => {
            metrics::setup_failed(&e);
            return Err(e).with_context(|| format!("cannot start a session with {addr}"));
        }
    };
    metrics::session_started(sink.info());
    let result = stream(sink, count, size, stop);
    metrics::client_session_ended(&result);
    result
}

/// Sends the messages and finishes the stream; returns the exit status.
fn stream(
    mut sink: RdmaSink,
    count: u64,
    size: Option<usize>,
    stop: &Arc<AtomicBool>,
) -> Result<u8> {
    let started = Instant::now();
    send_all(&mut sink, count, size, stop)?;
    let interrupted = stop.load(Ordering::Relaxed);
    let bytes = sink.bytes_sent();
    let sent = sink.finish().context("ending the stream failed")?;
    log::info!(
        "{}: sent {}",
        if interrupted { "interrupted" } else { "done" },
        summary_line(sent, bytes, started.elapsed())
    );
    Ok(if interrupted { EXIT_INTERRUPTED } else { 0 })
}

/// Sends messages "0".."count-1" (sized by `size`), stopping early on Ctrl-C.
pub fn send_all(
    sink: &mut RdmaSink,
    count: u64,
    size: Option<usize>,
    stop: &AtomicBool,
) -> Result<()> {
    let mut payloads = Payloads::new(size);
    for i in 0..count {
        if stop.load(Ordering::Relaxed) {
            log::info!("Ctrl-C: stopping after {i} message(s)");
            return Ok(());
        }
        let payload = payloads.message(i);
        match sink.send(payload) {
            Ok(()) => metrics::message_sent(payload.len(), sink.credit_wait()),
            Err(Error::Interrupted) => {
                log::info!("Ctrl-C: stopping after {i} message(s)");
                return Ok(());
            }
            Err(e) => return Err(e).with_context(|| format!("sending message {i} failed")),
        }
    }
    Ok(())
}
