//! `bench`: bandwidth and latency with perftest's vocabulary and columns.
//!
//! Every measurement is one duplex session (the client's sending session first, then its
//! receiving one). The client's first message is a small JSON header saying what to run; the
//! server takes the client's credits and message size for the session. `bw` streams messages
//! one way and the server, which sees them arrive, measures and sends its figures back; `lat`
//! is a ping-pong (the server echoes every message) timed on the client, and reports half the
//! round trip, as perftest does.
//!
//! Here: the entry point and the sizes. The client's loop over sizes is in [`client`], the wire
//! messages in [`header`], the timed loops in [`measure`], the table and JSON in [`report`],
//! the server in [`serve`].

mod client;
mod header;
mod laps;
mod measure;
mod ops;
mod report;
mod serve;

pub use ops::OpsArgs;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};

use super::args::BenchArgs;

/// The largest size `-a` runs (perftest's default top size).
const ALL_MAX: usize = 8 << 20;

/// Runs `bench`; returns the exit status.
pub fn run(args: &BenchArgs, stop: Arc<AtomicBool>) -> Result<u8> {
    // A run without end stops at Ctrl-C between messages: the library's own waits must not
    // see that Ctrl-C (the stream still ends cleanly and the results come back).
    let library_stop = if args.ops.run_infinitely {
        Arc::new(AtomicBool::new(false))
    } else {
        stop.clone()
    };
    let config = super::config_from(&args.session_args(), &library_stop)?;
    super::check_rdma_request(&config)?;
    match (args.server, args.client) {
        (Some(addr), None) => serve::serve(addr, config),
        (None, Some(addr)) => client::run(addr, config, args, &stop),
        _ => bail!("say bench --server IP:PORT or bench --client IP:PORT"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::cli::args::{Cli, Command};

    /// The library configuration `bench` builds for the options after `bench --client ...`.
    fn config(extra: &[&str]) -> rdma_container::Config {
        let args = bench_args(extra);
        crate::cli::config_from(&args.session_args(), &Arc::new(AtomicBool::new(false))).unwrap()
    }

    #[test]
    fn lat_polls_for_a_second_unless_told_and_bw_does_not() {
        assert_eq!(config(&[]).busy_poll, None);
        let lat = config(&["--mode", "lat", "--credits", "8"]);
        assert_eq!(lat.busy_poll, Some(Duration::from_secs(1)));
        assert_eq!(lat.credits, 8);
        assert_eq!(
            config(&["--mode", "lat", "--busy-poll", "0"]).busy_poll,
            None
        );
        assert_eq!(
            config(&["--busy-poll", "50"]).busy_poll,
            Some(Duration::from_micros(50))
        );
        assert_eq!(config(&[]).idle_timeout, None);
    }

    /// The parsed options after `bench --client ...`.
    fn bench_args(extra: &[&str]) -> BenchArgs {
        let mut line = vec!["rdma-container", "bench", "--client", "127.0.0.1:1"];
        line.extend_from_slice(extra);
        let Some(Command::Bench(args)) = Cli::try_parse_from(line).unwrap().command else {
            panic!("a bench command");
        };
        args
    }

    #[test]
    fn lat_takes_64_credits_up_to_256_kib_unless_told_and_bw_16() {
        let lat = bench_args(&["--mode", "lat"]);
        assert_eq!(lat.credits_for(2), 64);
        assert_eq!(lat.credits_for(256 << 10), 64);
        assert_eq!(lat.credits_for(512 << 10), 16);
        assert_eq!(bench_args(&[]).credits_for(2), 16);
        let told = bench_args(&["--mode", "lat", "--credits", "4"]);
        assert_eq!(told.credits_for(2), 4);
    }
}
