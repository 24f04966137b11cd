//! `bench --client`: one duplex session per size, each opened by the header that says what to
//! run, and a row printed as each size finishes.

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use rdma_container::{duplex, Config};

use super::header::{self, BwMeasured, Header};
use super::report::{self, Report};
use super::{measure, ALL_MAX};
use crate::cli::args::{BenchArgs, BenchMode};

/// Room for the header message in a session whose messages are smaller.
const HEADER_ROOM: usize = 512;

/// Runs every size against the server at `addr` and prints the results.
pub fn run(addr: SocketAddr, base: Config, args: &BenchArgs) -> Result<u8> {
    let sizes = sizes(args);
    let iters = args.duration.is_none().then(|| {
        args.iters.unwrap_or(match args.mode {
            BenchMode::Bw => 5000,
            BenchMode::Lat => 1000,
        })
    });
    let mut report: Option<Report> = None;
    for (i, &size) in sizes.iter().enumerate() {
        let config = base.clone().with_max_msg_size(size.max(HEADER_ROOM));
        let (mut sink, mut src) = duplex::connect(addr, &config)
            .with_context(|| format!("cannot start a benchmark session with {addr}"))?;
        let report = report.get_or_insert_with(|| Report::start(args, sink.info(), &config));
        let header = Header {
            mode: args.mode,
            size,
            iters,
            duration_ms: args.duration.map(|d| d.0.as_millis() as u64),
            last: i + 1 == sizes.len(),
        };
        header::send(&mut sink, &header)?;
        let row = match args.mode {
            BenchMode::Bw => {
                let sent = measure::stream(sink, &header)?;
                let m = BwMeasured::recv(&mut src)?;
                if m.messages != sent {
                    bail!("sent {sent} messages but the server counted {}", m.messages);
                }
                report::bw_row(size, &m, args.report_gbits)
            }
            BenchMode::Lat => {
                let half_rtt_ns = measure::ping_pong(&mut sink, &mut src, &header)?;
                measure::finish(sink)?;
                report::latency_row(size, half_rtt_ns)
            }
        };
        while src.recv()?.is_some() {}
        if !args.json {
            report::print_row(&row);
        }
        report.results.push(row);
    }
    let Some(report) = report else {
        bail!("no size to run");
    };
    report.finish(args)?;
    Ok(0)
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
