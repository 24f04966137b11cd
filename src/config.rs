//! What a session is set up with.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::roce::Overrides;
use crate::{Error, Result};

/// Default largest message: 10 MiB, as in the C++ reference.
pub const DEFAULT_MAX_MSG_SIZE: usize = 10 * 1024 * 1024;
/// Default receive slots (and so credits).
pub const DEFAULT_CREDITS: u16 = 2;
/// The most credits (slots) a hello may carry.
pub const MAX_CREDITS: u16 = crate::proto::MAX_CREDITS;

/// Which transport to use: a [`crate::TransportKind`], or `Auto` to let the route decide. (The
/// kind is what runs and what the hello carries; this is what the user asks for.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum TransportChoice {
    /// RDMA when a RoCE v2 GID owns the source address and an RDMA transport is compiled in
    /// and starts, otherwise TCP (said in one log line).
    #[default]
    Auto,
    /// TCP (works everywhere).
    Tcp,
    /// NVIDIA DOCA (ConnectX / BlueField; only in builds with DOCA).
    Doca,
    /// rdma-core verbs (RoCE v2 NIC or soft-RoCE).
    Verbs,
}

impl std::fmt::Display for TransportChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportChoice::Auto => "auto",
            TransportChoice::Tcp => "tcp",
            TransportChoice::Doca => "doca",
            TransportChoice::Verbs => "verbs",
        })
    }
}

/// Settings for one session.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest message sent (sender) or accepted (receiver), in bytes.
    pub max_msg_size: usize,
    /// Receive slots on the receiver, staging slots on the sender.
    pub credits: u16,
    /// Transport selection.
    pub transport: TransportChoice,
    /// `--device`, `--port`, `--gid-index`.
    pub overrides: Overrides,
    /// Where sysfs is mounted (`/sys`); tests point it at a fixture tree.
    pub sysfs_root: PathBuf,
    /// How long a client keeps retrying to reach the server.
    pub connect_timeout: Duration,
    /// How long the whole handshake may take (hello, data path, Ready), on each side.
    pub handshake_timeout: Duration,
    /// End a session after this long without progress (no message arriving on the
    /// receiver, no credit while the sender waits for one). `None` (the default) waits for as
    /// long as the peer's connections stay up.
    pub idle_timeout: Option<Duration>,
    /// Before sleeping, keep polling for this long (lowest latency, one core busy while
    /// waiting; perftest polls all the time). `None` (the default) sleeps at once.
    pub busy_poll: Option<Duration>,
    /// Set from a signal handler to make every blocking wait return [`Error::Interrupted`].
    pub stop: Option<Arc<AtomicBool>>,
    /// Asked once per wait slice (at least every 100 ms while a call blocks) whether to stop;
    /// `true` makes the wait return [`Error::Interrupted`] as the stop flag does. For callers
    /// that cannot set a flag from a signal handler (the Python module runs Python's signal
    /// handlers here).
    pub interrupt: Option<InterruptCheck>,
}

/// A callback that says whether a blocking wait should stop (see [`Config::interrupt`]).
/// It runs on the thread that waits, so it must be quick.
#[derive(Clone)]
pub struct InterruptCheck(Arc<dyn Fn() -> bool + Send + Sync>);

impl InterruptCheck {
    /// Wraps `check`, which returns `true` to interrupt the wait.
    pub fn new(check: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(check))
    }

    /// Calls the check.
    pub fn should_stop(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for InterruptCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InterruptCheck(..)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_msg_size: DEFAULT_MAX_MSG_SIZE,
            credits: DEFAULT_CREDITS,
            transport: TransportChoice::Auto,
            overrides: Overrides::default(),
            sysfs_root: PathBuf::from("/sys"),
            connect_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            busy_poll: None,
            stop: None,
            interrupt: None,
        }
    }
}

impl Config {
    /// Checks the values a hello can carry.
    pub fn validate(&self) -> Result<()> {
        if self.max_msg_size == 0 || u32::try_from(self.max_msg_size).is_err() {
            return Err(Error::InvalidConfig(format!(
                "max message size must be between 1 and {} bytes, got {}",
                u32::MAX,
                self.max_msg_size
            )));
        }
        if self.credits == 0 || self.credits > crate::proto::MAX_CREDITS {
            return Err(Error::InvalidConfig(format!(
                "credits must be between 1 and {}, got {}",
                crate::proto::MAX_CREDITS,
                self.credits
            )));
        }
        Ok(())
    }

    /// True once the stop flag is set or the interrupt check says to stop.
    pub fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
            || self
                .interrupt
                .as_ref()
                .is_some_and(InterruptCheck::should_stop)
    }
}
