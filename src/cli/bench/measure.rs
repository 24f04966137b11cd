//! The timed loops of both ends: the client's `bw` stream and `lat` ping-pong, and the
//! server's `bw` count and `lat` echo.
//!
//! A loop runs for the header's message count or its duration, whichever it carries. `bw` is
//! timed where the messages arrive (on the server, from the first arrival); `lat` on the
//! client, around each send and its echo.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdma_container::{RdmaSink, RdmaSrc};

use super::header::{BwMeasured, Header};

/// Ping-pongs before the timed ones.
const LAT_WARM_UP: u64 = 16;

/// When a timed loop ends: after the header's message count, or at its duration.
struct Budget {
    iters: Option<u64>,
    until: Option<Instant>,
}

impl Budget {
    /// Starts the clock for the header's run.
    fn start(h: &Header, started: Instant) -> Self {
        Self {
            iters: h.iters,
            until: h.duration_ms.map(|ms| started + Duration::from_millis(ms)),
        }
    }

    /// Whether a loop that has done `done` messages is over.
    fn spent(&self, done: u64) -> bool {
        self.iters.is_some_and(|n| done >= n) || self.until.is_some_and(|t| Instant::now() >= t)
    }
}

/// Client, `bw`: streams the messages and ends the stream; returns how many were sent.
pub fn stream(mut sink: RdmaSink, h: &Header) -> Result<u64> {
    let payload = vec![0x5au8; h.size];
    let started = Instant::now();
    let budget = Budget::start(h, started);
    let progress = std::io::stderr().is_terminal();
    let mut last_note = started;
    let mut sent = 0u64;
    while !budget.spent(sent) {
        sink.send(&payload)?;
        sent += 1;
        if progress && sent.is_multiple_of(1024) && last_note.elapsed() >= Duration::from_secs(1) {
            last_note = Instant::now();
            eprint!(
                "\rbench: {} B x {sent} sent, {:.0} s",
                h.size,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if progress && last_note != started {
        eprintln!();
    }
    finish(sink)?;
    Ok(sent)
}

/// Client: ends the stream to the server.
pub fn finish(sink: RdmaSink) -> Result<()> {
    sink.finish()
        .context("ending the benchmark stream failed")?;
    Ok(())
}

/// Client, `lat`: warms up, then times ping-pongs; returns half of each round trip in
/// nanoseconds.
pub fn ping_pong(sink: &mut RdmaSink, src: &mut RdmaSrc, h: &Header) -> Result<Vec<u64>> {
    let payload = vec![0x5au8; h.size];
    let mut ping = || -> Result<Duration> {
        let t = Instant::now();
        sink.send(&payload)?;
        match src.recv()? {
            Some(echo) if echo.len() == payload.len() => Ok(t.elapsed()),
            Some(echo) => bail!(
                "echo of {} bytes for a {}-byte ping",
                echo.len(),
                payload.len()
            ),
            None => bail!("the server ended the echo stream"),
        }
    };
    for _ in 0..LAT_WARM_UP {
        ping()?;
    }
    let budget = Budget::start(h, Instant::now());
    let mut half_rtt_ns: Vec<u64> = Vec::with_capacity(h.iters.unwrap_or(100_000) as usize);
    while !budget.spent(half_rtt_ns.len() as u64) {
        half_rtt_ns.push(ping()?.as_nanos() as u64 / 2);
    }
    Ok(half_rtt_ns)
}

/// Server, `bw`: counts the stream until its end, timed from the first arrival.
pub fn count(src: &mut RdmaSrc, h: &Header) -> Result<BwMeasured> {
    let mut messages = 0u64;
    let mut bytes = 0u64;
    let mut started: Option<Instant> = None;
    let mut last = Instant::now();
    // Peak: the best rate over windows of 1/16 of the run (at least 64 messages).
    let window = h.iters.map_or(4096, |n| (n / 16).max(64));
    let (mut window_start, mut window_bytes, mut peak) = (Instant::now(), 0u64, 0f64);
    while let Some(msg) = src.recv()? {
        let now = Instant::now();
        let first = *started.get_or_insert(now);
        if messages == 0 {
            window_start = first;
        }
        messages += 1;
        bytes += msg.len() as u64;
        window_bytes += msg.len() as u64;
        last = now;
        if messages.is_multiple_of(window) {
            let secs = now.duration_since(window_start).as_secs_f64();
            if secs > 0.0 {
                peak = peak.max(window_bytes as f64 / secs);
            }
            window_start = now;
            window_bytes = 0;
        }
    }
    // The first arrival starts the clock: count the bytes after it.
    let seconds = started.map_or(0.0, |s| last.duration_since(s).as_secs_f64());
    let timed_bytes = bytes.saturating_sub(h.size as u64);
    let average = if seconds > 0.0 {
        timed_bytes as f64 / seconds
    } else {
        0.0
    };
    Ok(BwMeasured {
        messages,
        bytes: timed_bytes,
        seconds,
        peak_bytes_per_sec: peak.max(average),
    })
}

/// Server, `lat`: sends every message back as it is, until the client ends its stream.
pub fn echo(sink: &mut RdmaSink, src: &mut RdmaSrc) -> Result<()> {
    while let Some(msg) = src.recv()? {
        sink.send(msg)?;
    }
    Ok(())
}
