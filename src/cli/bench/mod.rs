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
mod measure;
mod report;
mod serve;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};

use super::args::BenchArgs;

/// The largest size `-a` runs (perftest's default top size).
const ALL_MAX: usize = 8 << 20;

/// Runs `bench`; returns the exit status.
pub fn run(args: &BenchArgs, stop: Arc<AtomicBool>) -> Result<u8> {
    let config = super::config_from(&args.session_args(), &stop)?;
    match (args.server, args.client) {
        (Some(addr), None) => serve::serve(addr, config),
        (None, Some(addr)) => client::run(addr, config, args),
        _ => bail!("say bench --server IP:PORT or bench --client IP:PORT"),
    }
}
