//! The timed loops of both ends: the client's `bw` stream and `lat` ping-pong, and the
//! server's `bw` count and `lat` echo (with -b the server streams and the client counts too).
//!
//! A loop runs for the header's message count, its duration, or (--run-infinitely) until
//! Ctrl-C. `bw` is timed where the messages arrive (from the first arrival); `lat` on the
//! client, around each send and its echo. The streaming and counting loops read the clock only
//! every [`CLOCK_EVERY`] messages (a clock read is a system call under emulation).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdma_container::{RdmaSink, RdmaSrc};

use super::header::{BwMeasured, Header};
use super::laps::Laps;
use super::ops::Ticker;

/// Ping-pongs before the timed ones.
const LAT_WARM_UP: u64 = 16;

/// The streaming and counting loops look at the clock once every this many messages.
const CLOCK_EVERY: u64 = 16;

/// Round trips kept for the final row of a run without end (the interval rows see all).
const LAT_KEEP_MAX: usize = 10_000_000;

/// The payload byte of every benchmark message (figures are JSON, which starts with `{`).
const FILL: u8 = 0x5a;

/// The message every loop sends: `size` bytes of [`FILL`], allocated only when the memory is
/// there (see [`super::memory`]). Allocate it once the size's sessions are set up.
pub fn message(size: usize) -> Result<Vec<u8>> {
    super::memory::message_buffer(size, FILL)
}

/// How the client's loops run: until Ctrl-C (`stop`, --run-infinitely) or their budget, with
/// interval reports when asked.
pub struct RunOptions<'a> {
    pub stop: Option<&'a AtomicBool>,
    /// Send with `send_in_place`, writing only a sequence number (--in-place).
    pub in_place: bool,
    pub interval: Option<Duration>,
    pub json: bool,
    pub gbits: bool,
}

impl RunOptions<'_> {
    /// The server's: the header's budget, no reports.
    pub const SERVER: RunOptions<'static> = RunOptions {
        stop: None,
        in_place: false,
        interval: None,
        json: false,
        gbits: false,
    };
}

/// When a timed loop ends: after the header's message count, at its duration, or at Ctrl-C.
struct Budget<'a> {
    iters: Option<u64>,
    until: Option<Instant>,
    stop: Option<&'a AtomicBool>,
}

impl<'a> Budget<'a> {
    /// Starts the clock for the header's run.
    fn start(h: &Header, started: Instant, stop: Option<&'a AtomicBool>) -> Self {
        Self {
            iters: h.iters,
            until: h.duration_ms.map(|ms| started + Duration::from_millis(ms)),
            stop,
        }
    }

    /// Whether a loop that has done `done` messages is over (`now`: a clock reading the caller
    /// has anyway; otherwise the clock is read every [`CLOCK_EVERY`] messages).
    fn spent(&self, done: u64, now: Option<Instant>) -> bool {
        if self.iters.is_some_and(|n| done >= n) {
            return true;
        }
        if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return true;
        }
        self.until.is_some_and(|t| match now {
            Some(now) => now >= t,
            None => done.is_multiple_of(CLOCK_EVERY) && Instant::now() >= t,
        })
    }
}

/// Streams `payload` (a [`message`] of `h.size` bytes) for the header's budget (not ending the
/// stream); returns how many were sent.
pub fn send_stream(
    sink: &mut RdmaSink,
    payload: &[u8],
    h: &Header,
    run: &RunOptions<'_>,
) -> Result<u64> {
    let started = Instant::now();
    let budget = Budget::start(h, started, run.stop);
    let mut ticker = run
        .interval
        .map(|every| Ticker::new(every, started, run.json, h.size));
    let progress = ticker.is_none() && std::io::stderr().is_terminal();
    let mut last_note = started;
    let mut sent = 0u64;
    while !budget.spent(sent, None) {
        if run.in_place {
            // The message produced in its slot, every byte written (the payload's byte, then
            // the sequence number), as an application that builds its messages there does:
            // one pass over the message where `send` makes a copy, a read and a write.
            let seq = sent.to_le_bytes();
            sink.send_in_place(payload.len(), |slot| {
                slot.fill(FILL);
                let n = slot.len().min(seq.len());
                slot[..n].copy_from_slice(&seq[..n]);
            })?;
        } else {
            sink.send(payload)?;
        }
        sent += 1;
        if !sent.is_multiple_of(CLOCK_EVERY) {
            continue;
        }
        if let Some(t) = ticker.as_mut() {
            if let Some((secs, n)) = t.due(Instant::now(), sent) {
                t.print_bw(secs, n, run.gbits);
            }
        } else if progress && last_note.elapsed() >= Duration::from_secs(1) {
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
    Ok(sent)
}

/// Client, `bw`: streams the messages and ends the stream; returns how many were sent.
pub fn stream(mut sink: RdmaSink, payload: &[u8], h: &Header, run: &RunOptions<'_>) -> Result<u64> {
    let sent = send_stream(&mut sink, payload, h, run)?;
    finish(sink)?;
    Ok(sent)
}

/// Client: ends the stream to the server.
pub fn finish(sink: RdmaSink) -> Result<()> {
    sink.finish()
        .context("ending the benchmark stream failed")?;
    Ok(())
}

/// Client, `lat`: warms up, then times ping-pongs of `payload` (a [`message`] of `h.size`
/// bytes); returns half of each round trip in nanoseconds.
pub fn ping_pong(
    sink: &mut RdmaSink,
    src: &mut RdmaSrc,
    payload: &[u8],
    h: &Header,
    run: &RunOptions<'_>,
) -> Result<Vec<u64>> {
    let mut ping = || -> Result<()> {
        sink.send(payload)?;
        match src.recv()? {
            Some(echo) if echo.len() == payload.len() => Ok(()),
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
    // One cycle-counter reading per round trip, as perftest's get_cycles per iteration, and a
    // clock reading per block of them (Laps: a clock read is a system call under emulation);
    // the run's length and the interval rows use the block's clock reading.
    let before = cycles_sys::read();
    let started = Instant::now();
    let mut laps = Laps::start_between(before, started, cycles_sys::read());
    let budget = Budget::start(h, started, run.stop);
    let mut ticker = run
        .interval
        .map(|every| Ticker::new(every, started, run.json, h.size));
    let mut window: Vec<u64> = Vec::new();
    // The count comes from the client's header: room for at most what is kept, never more.
    let expected = h.iters.unwrap_or(100_000).min(LAT_KEEP_MAX as u64) as usize;
    let mut half_rtt_ns: Vec<u64> = Vec::with_capacity(expected);
    let mut keep = |ns: u64, window: &mut Vec<u64>, ticking: bool| {
        let half = ns / 2;
        if half_rtt_ns.len() < LAT_KEEP_MAX {
            half_rtt_ns.push(half);
        }
        if ticking {
            window.push(half);
        }
    };
    let mut done = 0u64;
    let mut block_end = None;
    // The setting up above is not part of the first round trip.
    laps.resume(cycles_sys::read());
    while !budget.spent(done, block_end.take()) {
        ping()?;
        done += 1;
        if !laps.lap(cycles_sys::read()) {
            continue;
        }
        let now = Instant::now();
        let after = cycles_sys::read();
        let ticking = ticker.is_some();
        laps.close(now, after, |ns| keep(ns, &mut window, ticking));
        block_end = Some(now);
        if let Some(ticker) = ticker.as_mut() {
            if ticker.due(now, done).is_some() {
                ticker.print_lat(&mut window);
                window.clear();
                // The printing is not part of the next round trip.
                let before = cycles_sys::read();
                let now = Instant::now();
                laps.restart(before, now, cycles_sys::read());
            }
        }
        // Nor is this bookkeeping after the clock read (only the budget's check, a comparison
        // at the loop's head, falls in the next round trip).
        laps.resume(cycles_sys::read());
    }
    if laps.is_pending() {
        let ticking = ticker.is_some();
        laps.close(Instant::now(), cycles_sys::read(), |ns| {
            keep(ns, &mut window, ticking)
        });
    }
    if let Some(mhz) = laps.counter_mhz() {
        log::info!("bench lat: the cycle counter ticked {mhz:.1} times a microsecond of the clock");
    }
    Ok(half_rtt_ns)
}

/// What a counting loop saw: the figures of the messages it counted and, when the stream
/// carried them (-b, on the client), the peer's figures.
pub struct Counted {
    pub measured: BwMeasured,
    pub peer_figures: Option<BwMeasured>,
}

/// Counts the stream until its end, timed from the first arrival to the last clock reading;
/// on the client of a -b run, the server's figures (a JSON message) are taken out of it.
pub fn count(src: &mut RdmaSrc, h: &Header) -> Result<Counted> {
    let mut messages = 0u64;
    let mut bytes = 0u64;
    let mut started: Option<Instant> = None;
    // The last clock reading and the messages and bytes counted at it.
    let (mut last, mut timed_messages, mut timed_bytes) = (Instant::now(), 0u64, 0u64);
    // Peak: the best rate over windows of 1/16 of the run (at least 64 messages).
    let window = h
        .iters
        .map_or(4096, |n| (n / 16).max(64))
        .next_multiple_of(CLOCK_EVERY);
    let (mut window_start, mut window_bytes, mut peak) = (Instant::now(), 0u64, 0f64);
    let mut peer_figures = None;
    while let Some(msg) = src.recv()? {
        if h.bidirectional && msg.first() == Some(&b'{') {
            peer_figures =
                Some(serde_json::from_slice(msg).context("the server's figures do not parse")?);
            continue;
        }
        messages += 1;
        bytes += msg.len() as u64;
        window_bytes += msg.len() as u64;
        if messages == 1 {
            let now = Instant::now();
            started = Some(now);
            window_start = now;
            window_bytes = 0;
            (last, timed_messages, timed_bytes) = (now, 1, bytes);
        } else if messages.is_multiple_of(CLOCK_EVERY) {
            let now = Instant::now();
            (last, timed_messages, timed_bytes) = (now, messages, bytes);
            if messages.is_multiple_of(window) {
                let secs = now.duration_since(window_start).as_secs_f64();
                if secs > 0.0 {
                    peak = peak.max(window_bytes as f64 / secs);
                }
                window_start = now;
                window_bytes = 0;
            }
        }
    }
    if messages > 1 && timed_messages <= 1 {
        // Too few for a reading on the way: the end of the stream closes the clock.
        (last, timed_messages, timed_bytes) = (Instant::now(), messages, bytes);
    }
    // The first arrival starts the clock: count what came after it.
    let seconds = started.map_or(0.0, |s| last.duration_since(s).as_secs_f64());
    let first_bytes = bytes.min(h.size as u64);
    let timed_bytes = timed_bytes.saturating_sub(first_bytes);
    let average = if seconds > 0.0 {
        timed_bytes as f64 / seconds
    } else {
        0.0
    };
    Ok(Counted {
        measured: BwMeasured {
            messages,
            bytes: timed_bytes,
            seconds,
            peak_bytes_per_sec: peak.max(average),
            timed_messages: Some(timed_messages.saturating_sub(1)),
        },
        peer_figures,
    })
}

/// Server, `lat`: sends every message back as it is, until the client ends its stream.
pub fn echo(sink: &mut RdmaSink, src: &mut RdmaSrc) -> Result<()> {
    while let Some(msg) = src.recv()? {
        sink.send(msg)?;
    }
    Ok(())
}
