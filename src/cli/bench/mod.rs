//! `bench`: bandwidth and latency with perftest's vocabulary and columns.
//!
//! Every measurement is one duplex session (the client's sending session first, then its
//! receiving one). The client's first message is a small JSON header saying what to run; the
//! server takes the client's credits and message size for the session. `bw` streams messages
//! one way and the server, which sees them arrive, measures and sends its figures back; `lat`
//! is a ping-pong (the server echoes every message) timed on the client, and reports half the
//! round trip, as perftest does.
//!
//! Here: the entry point, the sizes and the flags that cannot be used together. The client's
//! loop over sizes is in [`client`], the wire messages in [`header`], the timed loops in
//! [`measure`], the message buffer in [`memory`], the table and JSON in [`report`], the server
//! in [`serve`].

mod client;
mod header;
mod laps;
mod measure;
mod memory;
mod ops;
mod report;
mod serve;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};
use rdma_container::Config;

use super::args::{self, BenchArgs, BenchMode, BENCH_CREDITS};
use super::UsageError;

/// The largest size `-a` runs unless told (perftest's top size).
const ALL_MAX: usize = 8 << 20;

/// The largest message a server takes unless told (`--max-msg-size`).
const SERVER_MAX: usize = 1 << 30;

/// The fewest messages a bw run can time: its clock starts at the first arrival.
const MIN_BW_ITERS: u64 = 2;

/// `--mode lat`'s busy polling unless told (microseconds): one second.
const LAT_BUSY_POLL: u64 = 1_000_000;

/// The library configuration of a `bench` run, from the flag blocks it shares with `--server`
/// and `--client` and its own flags: busy polling defaults to one second for `lat`; there is no
/// idle timeout, and the largest message is each session's (set as it starts).
fn config(args: &BenchArgs, stop: &Arc<AtomicBool>) -> Result<Config> {
    super::validated_config(stop, |config| {
        let busy_poll = args
            .busy_poll
            .or((args.mode == BenchMode::Lat).then_some(LAT_BUSY_POLL));
        let config = config
            .with_credits(args.credits.unwrap_or(BENCH_CREDITS))
            .with_busy_poll(args::busy_poll(busy_poll))
            // A benchmark measures the data path as perftest does: a break ends it, unless
            // asked otherwise (`--resume-timeout` is 0 unless told).
            .with_resume_timeout(args.resume_timeout.0);
        let config = args.connect.apply(args.data_path.apply(config));
        args.integrity.apply(args.sysfs_root.apply(config))
    })
}

/// The top of the `-a` sweep: `--max-msg-size`, or [`ALL_MAX`].
fn all_max(args: &BenchArgs) -> usize {
    args.max_msg_size.unwrap_or(ALL_MAX)
}

/// Flags that cannot apply to this run (the mode, or the server's side), refused before
/// anything listens or connects rather than ignored: one line each, exit status 2.
fn check_usage(args: &BenchArgs) -> std::result::Result<(), UsageError> {
    let refuse = |line: String| Err(UsageError(line));
    let ops = &args.ops;
    let limits = [
        ("--limit-bw", ops.limit_bw.is_some(), BenchMode::Bw),
        (
            "--limit-msgrate",
            ops.limit_msgrate.is_some(),
            BenchMode::Bw,
        ),
        ("--limit-lat", ops.limit_lat.is_some(), BenchMode::Lat),
    ];
    if args.server.is_some() {
        if args.stripes.given() {
            return refuse(
                "--qps and --paths are the client's choice (bench --client ... --qps N); the \
server takes each client's"
                    .to_owned(),
            );
        }
        if let Some((flag, ..)) = limits.iter().find(|(_, set, _)| *set) {
            return refuse(format!(
                "{flag} is checked by the client (bench --client ... {flag}); the server \
measures what its clients ask for"
            ));
        }
        return Ok(());
    }
    for (flag, set, mode) in limits {
        if set && args.mode != mode {
            return refuse(format!(
                "{flag} is for --mode {} runs; this is a --mode {} run (perftest would ignore it)",
                mode_name(mode),
                mode_name(args.mode)
            ));
        }
    }
    if ops.in_place && args.mode == BenchMode::Lat {
        return refuse(
            "--in-place is for --mode bw (a ping-pong's messages are echoed as they came)"
                .to_owned(),
        );
    }
    if ops.bidirectional && args.mode == BenchMode::Lat {
        return refuse(
            "-b/--bidirectional is for --mode bw (a ping-pong goes both ways already)".to_owned(),
        );
    }
    if let Some(n) = args
        .iters
        .filter(|&n| args.mode == BenchMode::Bw && n < MIN_BW_ITERS)
    {
        return refuse(format!(
            "-n {n}: a bw run needs at least {MIN_BW_ITERS} messages (its clock starts when the \
first one arrives and times the ones after it)"
        ));
    }
    if let (Some(size), Some(max)) = (args.size, args.max_msg_size) {
        if size > max {
            return refuse(format!("-s {size} exceeds --max-msg-size {max}"));
        }
    }
    if args.all && all_max(args) < 2 {
        return refuse(format!(
            "-a runs the powers of two from 2 bytes up to --max-msg-size, and {} has none",
            all_max(args)
        ));
    }
    Ok(())
}

fn mode_name(mode: BenchMode) -> &'static str {
    match mode {
        BenchMode::Bw => "bw",
        BenchMode::Lat => "lat",
    }
}

/// Runs `bench`; returns the exit status.
pub fn run(args: &BenchArgs, stop: Arc<AtomicBool>) -> Result<u8> {
    check_usage(args)?;
    // A run without end stops at Ctrl-C between messages: the library's own waits must not
    // see that Ctrl-C (the stream still ends cleanly and the results come back).
    let library_stop = if args.ops.run_infinitely {
        Arc::new(AtomicBool::new(false))
    } else {
        stop.clone()
    };
    let config = config(args, &library_stop)?;
    super::check_rdma_request(&config)?;
    match (args.server, args.client) {
        (Some(addr), None) => serve::serve(
            addr,
            config,
            args.max_msg_size.unwrap_or(SERVER_MAX),
            args.once,
            args.credits,
        ),
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
        super::config(&args, &Arc::new(AtomicBool::new(false))).unwrap()
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

    /// The flag blocks `bench` shares with `--server`/`--client` set its configuration as
    /// they set a session's.
    #[test]
    fn shared_flags_reach_the_configuration() {
        let line = [
            "--transport",
            "tcp",
            "-d",
            "mlx5_0",
            "-i",
            "2",
            "-x",
            "3",
            "--connect-timeout",
            "5",
            "--handshake-timeout",
            "7",
            "--checksum",
            "crc32c",
        ];
        let bench = config(&line);
        let mut session = vec!["rdma-container", "--client", "127.0.0.1:1"];
        session.extend_from_slice(&line);
        let session = Cli::try_parse_from(session).unwrap().session;
        let session =
            crate::cli::config_from(&session, None, &Arc::new(AtomicBool::new(false))).unwrap();
        assert_eq!(bench.transport, rdma_container::TransportChoice::Tcp);
        assert_eq!(bench.overrides, session.overrides);
        assert_eq!(bench.overrides.device.as_deref(), Some("mlx5_0"));
        assert_eq!(
            (bench.connect_timeout, bench.handshake_timeout),
            (Duration::from_secs(5), Duration::from_secs(7))
        );
        assert_eq!(
            (session.connect_timeout, session.handshake_timeout),
            (bench.connect_timeout, bench.handshake_timeout)
        );
        assert_eq!(bench.checksum, rdma_container::Checksum::Crc32c);
        assert_eq!(session.checksum, bench.checksum);
        // Not shared: bench's own resumption (off unless told) and credits.
        assert_eq!((bench.resume_timeout, bench.credits), (Duration::ZERO, 16));
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

    /// The usage error `bench` gives for the options after `bench --client ...`, if any.
    fn refused(extra: &[&str]) -> Option<String> {
        check_usage(&bench_args(extra)).err().map(|e| e.0)
    }

    #[test]
    fn limits_apply_only_to_their_mode_and_never_on_the_server() {
        assert_eq!(refused(&["--limit-bw", "1", "--limit-msgrate", "1"]), None);
        assert_eq!(refused(&["--mode", "lat", "--limit-lat", "5"]), None);
        let line = refused(&["--limit-lat", "5"]).expect("refused");
        assert!(line.starts_with("--limit-lat is for --mode lat"), "{line}");
        for flag in ["--limit-bw", "--limit-msgrate"] {
            let line = refused(&["--mode", "lat", flag, "1"]).expect("refused");
            assert!(
                line.starts_with(&format!("{flag} is for --mode bw")),
                "{line}"
            );
        }
        let server = |extra: &[&str]| {
            let mut line = vec!["rdma-container", "bench", "--server", "127.0.0.1:1"];
            line.extend_from_slice(extra);
            let Some(Command::Bench(args)) = Cli::try_parse_from(line).unwrap().command else {
                panic!("a bench command");
            };
            check_usage(&args).err().map(|e| e.0)
        };
        assert_eq!(server(&["--once", "--max-msg-size", "1073741824"]), None);
        let line = server(&["--limit-bw", "1"]).expect("refused");
        assert!(line.contains("checked by the client"), "{line}");
    }

    #[test]
    fn a_bw_run_needs_two_messages_and_a_lat_run_one() {
        let line = refused(&["-n", "1"]).expect("refused");
        assert!(
            line.starts_with("-n 1: a bw run needs at least 2"),
            "{line}"
        );
        assert_eq!(refused(&["-n", "2"]), None);
        assert_eq!(refused(&["--mode", "lat", "-n", "1"]), None);
    }

    #[test]
    fn sizes_go_up_to_1_gib_and_beyond() {
        let gib = (1usize << 30).to_string();
        let top = bench_args(&["-a", "--max-msg-size", &gib]);
        let sizes = client::sizes(&top);
        assert_eq!((sizes[0], sizes.len()), (2, 30), "2 B .. 1 GiB");
        assert_eq!(sizes.last(), Some(&(1 << 30)));
        assert_eq!(client::sizes(&bench_args(&["-a"])).last(), Some(&(8 << 20)));
        assert_eq!(client::sizes(&bench_args(&["-s", &gib])), [1 << 30]);
        assert_eq!(refused(&["-s", &gib]), None);
        let line = refused(&["-s", &gib, "--max-msg-size", "1048576"]).expect("refused");
        assert_eq!(line, "-s 1073741824 exceeds --max-msg-size 1048576");
        assert!(refused(&["-a", "--max-msg-size", "1"]).is_some());
    }

    #[test]
    fn default_credits_keep_large_messages_slots_within_256_mib() {
        let bw = bench_args(&[]);
        assert_eq!(bw.credits_for(16 << 20, 1), 16);
        assert_eq!(bw.credits_for(64 << 20, 1), 4);
        assert_eq!(bw.credits_for(1 << 30, 1), 2);
        assert_eq!(bench_args(&["--mode", "lat"]).credits_for(1 << 30, 1), 2);
        assert_eq!(bench_args(&["--credits", "8"]).credits_for(1 << 30, 1), 8);
        // Each queue pair has its own slots: four of them share the 256 MiB.
        assert_eq!(bw.credits_for(16 << 20, 4), 4);
        assert_eq!(bw.credits_for(16 << 20, 2), 8);
    }

    #[test]
    fn lat_takes_64_credits_up_to_256_kib_unless_told_and_bw_16() {
        let lat = bench_args(&["--mode", "lat"]);
        assert_eq!(lat.credits_for(2, 1), 64);
        assert_eq!(lat.credits_for(256 << 10, 1), 64);
        assert_eq!(lat.credits_for(512 << 10, 1), 16);
        assert_eq!(bench_args(&[]).credits_for(2, 1), 16);
        let told = bench_args(&["--mode", "lat", "--credits", "4"]);
        assert_eq!(told.credits_for(2, 1), 4);
    }
}
