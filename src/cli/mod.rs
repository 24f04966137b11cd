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

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};

use rdma_container::Config;

use args::SessionArgs;

/// Exit status after Ctrl-C, as shells report SIGINT.
pub const EXIT_INTERRUPTED: u8 = 130;

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

/// Builds the library configuration from the command line (`bench` too, through
/// [`args::BenchArgs::session_args`]); what cannot be used is a [`UsageError`].
pub fn config_from(args: &SessionArgs, stop: &Arc<AtomicBool>) -> Result<Config> {
    config_from_args(args, stop).map_err(|e| {
        anyhow::Error::new(UsageError(
            e.chain()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(": "),
        ))
    })
}

/// An explicit device, port or GID index (flag or variable) asks for RDMA: at start-up, before
/// anything listens or connects, each must exist in the GID table, or the program ends with
/// exit status 5 naming what is missing and what is present (never a silent TCP session).
/// Nothing to check with `--transport tcp`, which uses no device.
pub fn check_rdma_request(config: &Config) -> Result<()> {
    Ok(config.check_device_request()?)
}

fn config_from_args(args: &SessionArgs, stop: &Arc<AtomicBool>) -> Result<Config> {
    let config = Config::default()
        .with_credits(args.credits)
        .with_transport(args.transport)
        .with_overrides(args.device.overrides())
        .with_sysfs_root(args.sysfs_root.clone())
        .with_connect_timeout(args.connect_timeout.0)
        .with_handshake_timeout(args.handshake_timeout.0)
        .with_max_msg_size(args.max_msg_size)
        .with_idle_timeout(args.idle_timeout.map(|t| t.0))
        .with_busy_poll(
            args.busy_poll
                .filter(|&us| us > 0)
                .map(std::time::Duration::from_micros),
        )
        .with_stop(Some(stop.clone()))
        .with_checksum(args.checksum)
        .with_require_rdma(args.require_rdma)
        .with_resume_timeout(args.resume_timeout.0)
        .with_auth_key(
            args.auth_key_file
                .as_deref()
                .map(rdma_container::AuthKey::from_file)
                .transpose()?,
        );
    config.validate()?;
    if let Some(size) = args.size {
        if size > args.max_msg_size {
            bail!("--size {size} exceeds --max-msg-size {}", args.max_msg_size);
        }
    }
    Ok(config)
}
