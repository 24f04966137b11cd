//! `bench --client`: one duplex session per size, each opened by the header that says what to
//! run, and a row printed as each size finishes.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

use anyhow::{anyhow, bail, Context, Result};
use rdma_container::{duplex, Config, RdmaSink, RdmaSrc};

use super::header::{self, BwMeasured, Header};
use super::measure::{self, RunOptions};
use super::ops::{self, CounterSnapshot, EXIT_LIMIT_MISSED};
use super::report::{self, Report, Row};
use super::ALL_MAX;
use crate::cli::args::{BenchArgs, BenchMode};

/// Room for the header message in a session whose messages are smaller.
const HEADER_ROOM: usize = 512;

/// Runs every size against the server at `addr` and prints the results; `stop` ends a run
/// without end (--run-infinitely) at Ctrl-C. Returns the exit status (3: a limit missed).
pub fn run(addr: SocketAddr, base: Config, args: &BenchArgs, stop: &AtomicBool) -> Result<u8> {
    if args.ops.bidirectional && args.mode == BenchMode::Lat {
        bail!("-b/--bidirectional is for --mode bw (a ping-pong goes both ways already)");
    }
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
        interval,
        json: args.json,
        gbits: args.report_gbits,
    };
    let mut report: Option<Report> = None;
    let mut missed = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let config = base
            .clone()
            .with_max_msg_size(size.max(HEADER_ROOM))
            .with_credits(args.credits_for(size));
        let (mut sink, mut src) = duplex::connect(addr, &config)
            .with_context(|| format!("cannot start a benchmark session with {addr}"))?;
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
        let header = Header {
            mode: args.mode,
            size,
            iters,
            duration_ms: args.duration.map(|d| d.0.as_millis() as u64),
            last: i + 1 == sizes.len(),
            bidirectional: args.ops.bidirectional,
            busy_poll_us: base.busy_poll.map(|d| d.as_micros() as u64),
        };
        header::send(&mut sink, &header)?;
        let mut rows = match args.mode {
            BenchMode::Bw if args.ops.bidirectional => {
                bidirectional(sink, &mut src, &header, &run, args.report_gbits)?
            }
            BenchMode::Bw => {
                let sent = measure::stream(sink, &header, &run)?;
                let m = BwMeasured::recv(&mut src)?;
                check_count(sent, &m)?;
                vec![report::bw_row(size, &m, args.report_gbits)]
            }
            BenchMode::Lat => {
                let half_rtt_ns = measure::ping_pong(&mut sink, &mut src, &header, &run)?;
                measure::finish(sink)?;
                vec![report::latency_row(size, half_rtt_ns)]
            }
        };
        while src.recv()?.is_some() {}
        if let Some(c) = &counters {
            if let Some(first) = rows.first_mut() {
                first.set_port_counters(c.deltas(&args.sysfs_root));
            }
        }
        for row in rows {
            if !args.json {
                report::print_row(&row);
                if args.ops.histogram {
                    report::print_histogram(&row);
                }
            }
            missed.extend(args.ops.missed_limits(&row));
            report.results.push(row);
        }
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

/// -b: streams to the server while counting the server's stream on a second thread; a row for
/// each direction, each measured where its messages arrive.
fn bidirectional(
    sink: RdmaSink,
    src: &mut RdmaSrc,
    header: &Header,
    run: &RunOptions<'_>,
    gbits: bool,
) -> Result<Vec<Row>> {
    let (sent, counted) = std::thread::scope(|s| {
        let counting = s.spawn(|| measure::count(src, header));
        let sent = measure::stream(sink, header, run);
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
    let mut out = report::bw_row(header.size, &theirs, gbits);
    let mut back = report::bw_row(header.size, &counted.measured, gbits);
    for (row, name) in [(&mut out, "client->server"), (&mut back, "server->client")] {
        if let Row::Bw { direction, .. } = row {
            *direction = Some(name);
        }
    }
    Ok(vec![out, back])
}

/// The sizes to run: `-s` (or the mode's default), or every power of two up to [`ALL_MAX`].
fn sizes(args: &BenchArgs) -> Vec<usize> {
    if args.all {
        std::iter::successors(Some(2usize), |s| (*s < ALL_MAX).then_some(s * 2)).collect()
    } else {
        vec![args.size.unwrap_or(match args.mode {
            BenchMode::Bw => 65536,
            BenchMode::Lat => 2,
        })]
    }
}
