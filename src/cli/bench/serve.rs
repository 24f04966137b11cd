//! `bench --server`: serves benchmark clients one after another until Ctrl-C (exit 130, as
//! `--server`; SIGTERM: 143), or one client's run with `--once` (then exits with its status). A client's run
//! is a duplex session per size, each on the client's credits and message size (up to
//! `--max-msg-size`), the last one marked in its header.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Result;
use rdma_container::{Config, Error, Listener, RdmaSink, RdmaSrc};

use super::header::{self, Header, Opening};
use super::measure::{self, RunOptions};
use crate::cli::args::BenchMode;
use crate::cli::result::exit_status_of;
use crate::cli::stop::StopSignal;

/// Serves benchmark clients of messages up to `max_msg_size` bytes until Ctrl-C, or (`once`)
/// one client's run; returns the exit status. Each session takes the client's credits, at
/// most `credits` when the operator gave `--credits` (the receiving end decides, as with
/// `--server`).
pub fn serve(
    addr: SocketAddr,
    config: Config,
    max_msg_size: usize,
    once: bool,
    credits: Option<u16>,
) -> Result<u8> {
    let busy_poll = config.busy_poll;
    let listener = Listener::bind(addr, &config.with_max_msg_size(max_msg_size))?;
    log::info!(
        "bench server listening on {addr} (messages up to {max_msg_size} bytes; {})",
        if once {
            "one client's run: --once"
        } else {
            "clients one after another until Ctrl-C"
        }
    );
    let mut runs = 0u64;
    loop {
        // The library's duplex accept, except that each session takes the client's credits and
        // message size (perftest's client chooses them; `accept_duplex` would use ours), and
        // that the client's first message is read before its second session: a `doctor
        // --probe` opens one session only, and is served from it.
        let accepted = listener
            .start_duplex_with_peer_settings_up_to(credits.unwrap_or(u16::MAX))
            .map_err(anyhow::Error::from)
            .and_then(|mut start| match Opening::recv(start.src()) {
                Ok(Opening::Probe) => Ok(Accepted::Probe(start.peer(), start.into_src())),
                Ok(Opening::Run(header)) => start
                    .complete(&listener)
                    .map(|(sink, src)| Accepted::Run(Box::new(sink), src, header))
                    .map_err(anyhow::Error::from),
                Err(e) => Err(e),
            });
        let failed = match accepted {
            Err(e) if matches!(e.downcast_ref(), Some(Error::Interrupted)) => {
                let signal = StopSignal::received();
                log::info!("{} after {runs} run(s)", signal.how());
                return Ok(signal.exit_status());
            }
            Err(e) => {
                log::error!("benchmark session setup failed: {e:#}");
                e
            }
            Ok(Accepted::Probe(peer, mut src)) => {
                serve_probe(peer, &mut src);
                continue;
            }
            Ok(Accepted::Run(mut sink, mut src, header)) => {
                match serve_one(&mut sink, &mut src, header, busy_poll) {
                    Ok(last) => {
                        if let Err(e) = sink.finish() {
                            log::warn!("ending the reply stream failed: {}", e.chain());
                        }
                        if last {
                            runs += 1;
                            if once {
                                return Ok(0);
                            }
                            log::info!("run {runs} done; waiting for the next client");
                        }
                        continue;
                    }
                    Err(e) => {
                        log::error!("benchmark session failed: {e:#}");
                        e
                    }
                }
            }
        };
        if once {
            return Ok(exit_status_of(&failed));
        }
    }
}

/// A client accepted: a bench client's two sessions and its header, or a probe's one session.
enum Accepted {
    // boxed: a sink and a source side by side would make every value twice a probe's size
    Run(Box<RdmaSink>, RdmaSrc, Header),
    Probe(IpAddr, RdmaSrc),
}

/// A `doctor --probe`: its remaining messages read to the end of its stream, so that its
/// Finish is acknowledged and the probe passes; the server goes on serving.
fn serve_probe(peer: IpAddr, src: &mut RdmaSrc) {
    let mut messages = 1u64;
    loop {
        match src.recv() {
            Ok(Some(_)) => messages += 1,
            Ok(None) => {
                log::info!("doctor --probe from {peer}: {messages} message(s), answered");
                return;
            }
            Err(e) => {
                log::warn!("doctor --probe from {peer} failed: {}", e.chain());
                return;
            }
        }
    }
}

/// Runs what the header asks; returns whether it was the client's last size. The session
/// polls as the client does (`ours`: the server's own `--busy-poll`, which wins).
fn serve_one(
    sink: &mut RdmaSink,
    src: &mut RdmaSrc,
    header: Header,
    ours: Option<Duration>,
) -> Result<bool> {
    let busy_poll = ours.or(header.busy_poll_us.map(Duration::from_micros));
    sink.set_busy_poll(busy_poll);
    src.set_busy_poll(busy_poll);
    log::info!(
        "bench session: {:?}, {} B; {}",
        header.mode,
        header.size,
        match (busy_poll, ours) {
            (None, _) => "sleeps when idle".to_owned(),
            (Some(d), Some(_)) => format!(
                "polls {} us before sleeping (its own setting)",
                d.as_micros()
            ),
            (Some(d), None) => format!("polls {} us before sleeping, as the client", d.as_micros()),
        }
    );
    match header.mode {
        BenchMode::Bw if header.bidirectional => {
            // Both ways: our stream to the client while we count its stream; our figures
            // after our stream (the client tells them from its messages by their first byte).
            let payload = match measure::message(header.size) {
                Ok(payload) => payload,
                Err(e) => {
                    sink.abort_in_place(&format!("the bench server cannot run it: {e:#}"));
                    return Err(e);
                }
            };
            let (sent, counted) = std::thread::scope(|s| {
                let counting = s.spawn(|| measure::count(src, &header));
                let sent = measure::send_stream(sink, &payload, &header, &RunOptions::SERVER);
                let counted = counting
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the counting thread panicked")));
                (sent, counted)
            });
            sent?;
            header::send(sink, &counted?.measured)?;
        }
        BenchMode::Bw => header::send(sink, &measure::count(src, &header)?.measured)?,
        BenchMode::Lat => measure::echo(sink, src)?,
    }
    Ok(header.last)
}
