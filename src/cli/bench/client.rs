//! `bench --client`: one duplex session per size, each opened by the header that says what to
//! run, and a row printed as each size finishes.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

use anyhow::{anyhow, bail, Context, Result};
use rdma_container::{Config, RdmaSink, RdmaSrc};

use super::header::{self, BwMeasured, Header};
use super::measure::{self, RunOptions};
use super::ops::{self, CounterSnapshot, EXIT_LIMIT_MISSED};
use super::report::{self, Report};
use crate::cli::args::{BenchArgs, BenchMode};

/// Room for the header message in a session whose messages are smaller.
const HEADER_ROOM: usize = 512;

/// Runs every size against the server at `addr` and prints the results; `stop` ends a run
/// without end (--run-infinitely) at Ctrl-C. Returns the exit status (6: a limit missed).
pub fn run(addr: SocketAddr, base: Config, args: &BenchArgs, stop: &AtomicBool) -> Result<u8> {
    let sizes = sizes(args);
    let iters = (args.duration.is_none() && !args.ops.run_infinitely).then(|| {
        args.iters.unwrap_or(match args.mode {
            BenchMode::Bw => 5000,
            BenchMode::Lat => 1000,
        })
    });
    let interval = args.ops.interval.map(|s| s.0).or(args
        .ops
        .run_infinitely
        .then_some(std::time::Duration::from_secs(1)));
    let run = RunOptions {
        stop: args.ops.run_infinitely.then_some(stop),
        in_place: args.ops.in_place,
        interval,
        json: args.json,
        gbits: args.report_gbits,
    };
    let mut report: Option<Report> = None;
    let mut missed = Vec::new();
    // Messages go both ways in a ping-pong and with -b; otherwise only the server's figures
    // come back.
    let both_ways = args.mode == BenchMode::Lat || args.ops.bidirectional;
    for (i, &size) in sizes.iter().enumerate() {
        let config = args.stripes.apply(base.clone(), Some(addr.ip()));
        let credits = args.credits_for(size, config.qps);
        let config = config.with_credits(credits);
        let header = Header {
            mode: args.mode,
            size,
            iters,
            duration_ms: args.duration.map(|d| d.0.as_millis() as u64),
            last: i + 1 == sizes.len(),
            bidirectional: args.ops.bidirectional,
            busy_poll_us: base.busy_poll.map(|d| d.as_micros() as u64),
        };
        let (mut sink, mut src) = connect(addr, &config, size, both_ways, &header)
            .with_context(|| format!("cannot start a benchmark session with {addr}"))?;
        if i == 0 && sink.info().credits() != config.credits {
            log::warn!(
                "the server set {} credits, not the {} asked here: the receiving end's --credits \
decides",
                sink.info().credits(),
                config.credits
            );
        }
        // The sessions' slots are set up (and were checked against the memory): now the
        // message the loops send.
        let payload = match measure::message(size) {
            Ok(payload) => payload,
            Err(e) => {
                sink.abort(&format!("the bench client cannot run it: {e:#}"));
                return Err(e);
            }
        };
        if report.is_none() {
            let device = sink.info().device.as_ref().map(|d| d.device.as_str());
            ops::bind_to_device(&args.ops, &args.sysfs_root, device);
        }
        let report = report.get_or_insert_with(|| Report::start(args, sink.info(), &config));
        let counters = sink
            .info()
            .device
            .as_ref()
            .map(|d| CounterSnapshot::take(&args.sysfs_root, &d.device, d.port));
        let mut row = match args.mode {
            BenchMode::Bw if args.ops.bidirectional => {
                bidirectional(sink, &mut src, &payload, &header, &run, args.report_gbits)?
            }
            BenchMode::Bw => {
                let sent = measure::stream(sink, &payload, &header, &run)?;
                let m = BwMeasured::recv(&mut src)?;
                check_count(sent, &m)?;
                report::bw_row(size, &m, args.report_gbits)
            }
            BenchMode::Lat => {
                let half_rtt_ns = measure::ping_pong(&mut sink, &mut src, &payload, &header, &run)?;
                measure::finish(sink)?;
                report::latency_row(size, half_rtt_ns)
            }
        };
        drop(payload);
        while src.recv()?.is_some() {}
        if let Some(c) = &counters {
            row.set_port_counters(c.deltas(&args.sysfs_root));
        }
        if !args.json {
            report::print_row(&row);
            if args.ops.histogram {
                report::print_histogram(&row);
            }
        }
        missed.extend(args.ops.missed_limits(&row));
        report.results.push(row);
    }
    let Some(report) = report else {
        bail!("no size to run");
    };
    report.finish(args)?;
    if missed.is_empty() {
        return Ok(0);
    }
    for line in &missed {
        eprintln!("bench: FAILED: {line}");
    }
    Ok(EXIT_LIMIT_MISSED)
}

/// The server must have counted every message the client sent.
fn check_count(sent: u64, m: &BwMeasured) -> Result<()> {
    if m.messages != sent {
        bail!("sent {sent} messages but the server counted {}", m.messages);
    }
    Ok(())
}

/// The two sessions of one size: the client's sending session carries `size`-byte messages;
/// its receiving one too when messages go `both_ways` (a ping-pong, -b), otherwise only the
/// server's figures (small slots: 1 GiB messages one way need no 1 GiB slots the other way, on
/// either end). As [`rdma_container::duplex::connect`] otherwise. Each must carry `size`: a
/// server whose --max-msg-size is smaller is told why, and so is the user.
fn connect(
    addr: SocketAddr,
    config: &Config,
    size: usize,
    both_ways: bool,
    header: &Header,
) -> Result<(RdmaSink, RdmaSrc)> {
    let sending = config.clone().with_max_msg_size(size.max(HEADER_ROOM));
    let receiving = if both_ways {
        sending.clone()
    } else {
        config.clone().with_max_msg_size(HEADER_ROOM)
    };
    let mut sink = RdmaSink::connect(addr, &sending)?;
    // The header before the second session: the server reads it first, to tell a bench client
    // from a `doctor --probe` (one session only) before it waits for a second.
    header::send(&mut sink, header)?;
    let src = match RdmaSrc::connect(addr, &receiving) {
        Ok(src) => src,
        Err(e) => {
            sink.abort("duplex: the receiving session could not be set up");
            return Err(e.into());
        }
    };
    let back = if both_ways {
        src.info().max_msg_size() as usize
    } else {
        usize::MAX
    };
    let carried = sink.max_message_size().min(back);
    if carried < size {
        let why = format!(
            "the server takes messages up to {carried} bytes and this run needs {size} (start \
it with bench --server ... --max-msg-size {size})"
        );
        sink.abort(&why);
        src.abort(&why);
        bail!(why);
    }
    Ok((sink, src))
}

/// -b: streams to the server while counting the server's stream on a second thread; one row,
/// both directions added (perftest's), each direction measured where its messages arrive.
fn bidirectional(
    sink: RdmaSink,
    src: &mut RdmaSrc,
    payload: &[u8],
    header: &Header,
    run: &RunOptions<'_>,
    gbits: bool,
) -> Result<report::Row> {
    let (sent, counted) = std::thread::scope(|s| {
        let counting = s.spawn(|| measure::count(src, header));
        let sent = measure::stream(sink, payload, header, run);
        let counted = counting
            .join()
            .unwrap_or_else(|_| Err(anyhow!("the counting thread panicked")));
        (sent, counted)
    });
    let (sent, counted) = (sent?, counted?);
    let theirs = counted
        .peer_figures
        .ok_or_else(|| anyhow!("the server ended without its measurements"))?;
    check_count(sent, &theirs)?;
    Ok(report::bidirectional_row(
        report::bw_row(header.size, &theirs, gbits),
        report::bw_row(header.size, &counted.measured, gbits),
    ))
}

/// The sizes to run: `-s` (or the mode's default), or every power of two from 2 up to
/// `--max-msg-size` (8 MiB unless told).
pub fn sizes(args: &BenchArgs) -> Vec<usize> {
    if args.all {
        let top = super::all_max(args);
        std::iter::successors(Some(2usize), |s| s.checked_mul(2))
            .take_while(|s| *s <= top)
            .collect()
    } else {
        vec![args.size.unwrap_or(match args.mode {
            BenchMode::Bw => 65536,
            BenchMode::Lat => 2,
        })]
    }
}
