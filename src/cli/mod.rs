//! The `rdma-container` command line: server, client, demo, doctor and bench.

pub mod args;
pub mod bench;
pub mod client;
pub mod demo;
pub mod doctor;
pub mod metrics;
pub mod metrics_http;
pub mod output;
pub mod probe;
pub mod progress;
pub mod result;
pub mod server;
pub mod stop;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;

use rdma_container::Config;

use args::SessionArgs;

/// Exit status after Ctrl-C, as shells report SIGINT (SIGHUP too).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Exit status after SIGTERM (how Kubernetes stops a pod), as shells report it: 128 + 15.
pub const EXIT_TERMINATED: u8 = 143;

/// Exit status of a command line or configuration the program refuses before doing anything
/// (clap's own usage errors exit 2 too).
pub const EXIT_USAGE: u8 = 2;

/// A flag, variable or file named on the command line that cannot be used: exit
/// [`EXIT_USAGE`].
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Builds the library configuration of `--server`, `--client` and `demo` from the command line;
/// what cannot be used is a [`UsageError`].
/// `server`: the client's server address (for the paths' default queue pairs); `None` elsewhere.
pub fn config_from(
    args: &SessionArgs,
    server: Option<std::net::IpAddr>,
    stop: &Arc<AtomicBool>,
) -> Result<Config> {
    let config = validated_config(stop, |config| {
        let config = args
            .stripes
            .apply(config, server)
            .with_credits(args.credits.unwrap_or(rdma_container::DEFAULT_CREDITS))
            .with_max_msg_size(args.max_msg_size)
            .with_idle_timeout(args.idle_timeout.map(|t| t.0))
            .with_busy_poll(args::busy_poll(args.busy_poll))
            .with_require_rdma(args.require_rdma)
            .with_resume_timeout(args.resume_timeout.0);
        let config = args.connect.apply(args.data_path.apply(config));
        let config = args.qp.apply(args.sysfs_root.apply(config));
        args.integrity.apply(config)
    })?;
    if let Some(size) = args.size.filter(|&size| size > args.max_msg_size) {
        return Err(UsageError(format!(
            "--size {size} exceeds --max-msg-size {}",
            args.max_msg_size
        ))
        .into());
    }
    Ok(config)
}

/// The library configuration that `build` makes of the defaults and the stop flag (each flag
/// block through its own `apply`, see [`args`]), validated; what cannot be used is a
/// [`UsageError`]. `--server`/`--client`/`demo` ([`config_from`]) and `bench` build theirs here.
pub fn validated_config(
    stop: &Arc<AtomicBool>,
    build: impl FnOnce(Config) -> Result<Config>,
) -> Result<Config> {
    let config = build(
        Config::default()
            .with_stop(Some(stop.clone()))
            .with_test_faults(test_faults()),
    );
    config
        .and_then(|config| {
            config.validate()?;
            Ok(config)
        })
        .map_err(|e| {
            anyhow::Error::new(UsageError(
                e.chain()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(": "),
            ))
        })
}

/// A test build's faults from its variables: `RDMA_CONTAINER_TEST_CORRUPT_MESSAGE=N` flips a
/// bit of message N (0-based) after its checksum was computed, as a fault on the path would;
/// `RDMA_CONTAINER_TEST_RNR_RETRY` (0-7) sets the verbs queue pair's rnr_retry;
/// `RDMA_CONTAINER_TEST_TCP_RCVBUF=BYTES` sets the receiver's buffer on tcp data connections. A shipped
/// build (without the `test-hooks` feature) never reads them: the library is the same either
/// way.
#[cfg(feature = "test-hooks")]
fn test_faults() -> rdma_container::TestFaults {
    let var = |name: &str| std::env::var(name).ok();
    let faults = rdma_container::TestFaults {
        corrupt_message: var("RDMA_CONTAINER_TEST_CORRUPT_MESSAGE").and_then(|v| v.parse().ok()),
        rnr_retry: var("RDMA_CONTAINER_TEST_RNR_RETRY").and_then(|v| v.parse().ok()),
        tcp_receive_buffer: var("RDMA_CONTAINER_TEST_TCP_RCVBUF").and_then(|v| v.parse().ok()),
    };
    if let Some(n) = faults.corrupt_message {
        log::info!("test hook: message {n} is corrupted after its checksum (RDMA_CONTAINER_TEST_CORRUPT_MESSAGE)");
    }
    if let Some(n) = faults.rnr_retry {
        log::info!("test hook: verbs rnr_retry {n} (RDMA_CONTAINER_TEST_RNR_RETRY)");
    }
    if let Some(n) = faults.tcp_receive_buffer {
        log::info!("test hook: a {n}-byte receive buffer on tcp data connections (RDMA_CONTAINER_TEST_TCP_RCVBUF)");
    }
    faults
}

#[cfg(not(feature = "test-hooks"))]
fn test_faults() -> rdma_container::TestFaults {
    rdma_container::TestFaults::default()
}

/// An explicit device, port or GID index (flag or variable) asks for RDMA: at start-up, before
/// anything listens or connects, each must exist in the GID table, or the program ends with
/// exit status 5 naming what is missing and what is present (never a silent TCP session).
/// Nothing to check with `--transport tcp`, which uses no device.
pub fn check_rdma_request(config: &Config) -> Result<()> {
    Ok(config.check_device_request()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> Result<args::Cli, clap::Error> {
        let mut line = vec!["rdma-container", "--client", "127.0.0.1:5000"];
        line.extend_from_slice(extra);
        args::Cli::try_parse_from(line)
    }

    fn config(extra: &[&str]) -> Result<Config> {
        let cli = parse(extra).expect("parses");
        config_from(&cli.session, None, &Arc::new(AtomicBool::new(false)))
    }

    /// Issue 35 item 5: perftest's --tclass, -S, -m, -u and a retry count, into the library
    /// configuration; nothing given keeps the transports' defaults.
    #[test]
    fn queue_pair_flags_reach_the_configuration() {
        let c = config(&[
            "--tclass",
            "104",
            "--sl",
            "3",
            "--mtu",
            "2048",
            "--ack-timeout",
            "14",
            "--retry-count",
            "5",
        ])
        .unwrap();
        assert_eq!(c.traffic_class, Some(104));
        assert_eq!(c.service_level, Some(3));
        assert_eq!(c.mtu, Some(2048));
        assert_eq!(c.ack_timeout, Some(14));
        assert_eq!(c.retry_count, Some(5));
        let short = config(&["-S", "7", "-m", "256", "-u", "20", "--qp-timeout", "21"]).unwrap();
        assert_eq!(
            (short.service_level, short.mtu, short.ack_timeout),
            (Some(7), Some(256), Some(21))
        );
        let none = config(&[]).unwrap();
        assert_eq!(
            (none.traffic_class, none.service_level, none.mtu),
            (None, None, None)
        );
        assert_eq!((none.ack_timeout, none.retry_count), (None, None));
    }

    #[test]
    fn out_of_range_queue_pair_flags_are_usage_errors() {
        for bad in [
            &["--tclass", "256"][..],
            &["--tclass=-1"],
            &["--sl", "16"],
            &["--mtu", "1500"],
            &["--mtu", "9000"],
            &["--ack-timeout", "32"],
            &["--retry-count", "8"],
        ] {
            let e = parse(bad).expect_err(&format!("{bad:?} must be refused"));
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
            let flag = bad[0].split('=').next().unwrap_or_default();
            assert!(e.to_string().contains(flag), "{bad:?}: {e}");
        }
        // tcp has no queue pair: refused at start-up (exit 2), not silently ignored.
        let e = config(&["--transport", "tcp", "--tclass", "104"]).unwrap_err();
        assert!(e.is::<UsageError>(), "{e:#}");
        assert!(e.to_string().contains("--transport tcp has none"), "{e:#}");
        assert_eq!(result::exit_status_of(&e), EXIT_USAGE);
        // DOCA has no traffic class setter.
        let e = config(&["--transport", "doca", "--tclass", "104"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("--tclass cannot be used with --transport doca"),
            "{e:#}"
        );
        config(&["--transport", "doca", "--sl", "3", "--mtu", "4096"]).expect("DOCA sets these");
    }
}
