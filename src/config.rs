//! What a session is set up with.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::proto::Checksum;
use crate::roce::Overrides;
use crate::{Error, Result};

/// Default largest message: 10 MiB, as in the C++ reference.
pub const DEFAULT_MAX_MSG_SIZE: usize = 10 * 1024 * 1024;
/// Default receive slots (and so credits).
pub const DEFAULT_CREDITS: u16 = 2;
/// The most credits (slots) a hello may carry.
pub const MAX_CREDITS: u16 = crate::proto::MAX_CREDITS;
/// The most queue pairs (tcp: data connections) a session may stripe over ([`Config::qps`]).
pub const MAX_QPS: u8 = 16;
/// The resume timeout when none is set, counted from when a break is seen: long enough for a
/// port to come back (link training takes 1-3 s; RC's own retries, about 8.6 s with our ACK
/// timeout of 1.07 s and 7 retries, ride out shorter outages without a break at all) and for a
/// reset TCP connection to be replaced; short enough that a peer that really died is
/// reported within seconds of the break.
pub const DEFAULT_RESUME_TIMEOUT: Duration = Duration::from_secs(10);
/// The verbs queue pair's local ACK timeout exponent when none is set: 4.096 us x 2^18 =
/// 1.07 s (NCCL's default too; 14, 67 ms, made a stalled or emulated host retransmit packets
/// that were only late).
pub const DEFAULT_ACK_TIMEOUT: u8 = 18;
/// The verbs queue pair's transport retry count when none is set: 7, the most RC allows.
pub const DEFAULT_RETRY_COUNT: u8 = 7;

/// Which transport to use: a [`crate::TransportKind`], or `Auto` to let the route decide. (The
/// kind is what runs and what the hello carries; this is what the user asks for.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
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
///
/// Start from [`Config::default()`] and change what you need with the chainable `with_*`
/// setters, one per field, each taking the field's type (an `Option` field's setter takes the
/// `Option`, so `None` restores the default). The fields stay public for reading (and
/// assigning); the struct is `#[non_exhaustive]`, so a struct literal cannot build it outside
/// this crate and new settings can be added without breaking callers.
///
/// ```
/// use std::time::Duration;
/// use rdma_container::{Config, TransportChoice};
///
/// let config = Config::default()
///     .with_credits(4)
///     .with_max_msg_size(1 << 20)
///     .with_transport(TransportChoice::Tcp)
///     .with_idle_timeout(Some(Duration::from_secs(60)));
/// assert_eq!(config.credits, 4);
/// config.validate().unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Largest message sent (sender) or accepted (receiver), in bytes.
    pub max_msg_size: usize,
    /// Receive slots on the receiver, staging slots on the sender.
    pub credits: u16,
    /// Queue pairs (tcp: data connections) a session stripes its messages over (`--qps`, 1
    /// to [`MAX_QPS`], default 1), delivered in order as one stream (docs/design.md,
    /// "Several paths"). The client chooses: a server takes each client's. Each queue pair
    /// has its own slots (`credits` of them); the credits stay one pool.
    pub qps: u8,
    /// The server's addresses the session's paths run to (`--paths`; empty: one path, the
    /// bootstrap connection's). The bootstrap address is path 0 whether listed or not; each
    /// other address is one more path, whose lanes (queue pairs) run from this host's source
    /// for it, by its own route, on the RDMA device that owns that source (docs/design.md,
    /// "Several paths"). Lanes take the paths in turn, so `qps` must be at least the number
    /// of paths. The client chooses: a server takes each client's.
    pub paths: Vec<Ipv4Addr>,
    /// Transport selection.
    pub transport: TransportChoice,
    /// `--device`, `--port`, `--gid-index`.
    pub overrides: Overrides,
    /// How long a client keeps retrying to reach the server.
    pub connect_timeout: Duration,
    /// How long the whole handshake may take (hello, data path, Ready), on each side.
    pub handshake_timeout: Duration,
    /// End a session after this long without progress (no message arriving on the
    /// receiver, no credit while the sender waits for one). `None` (the default) waits for as
    /// long as the peer's connections stay up.
    pub idle_timeout: Option<Duration>,
    /// Before sleeping, keep polling for this long (lowest latency, one core busy while
    /// waiting; perftest polls all the time). `None` (the default) sleeps at once. On a
    /// software RDMA device (soft-RoCE, soft-iWARP), whose work runs in kernel workers on this
    /// host's CPUs, the poll gives its CPU away (`sched_yield`) every 16th round. However long,
    /// it never holds off a call's deadline (`recv_timeout`, `send_timeout`), the stop flag,
    /// the session's own timeouts or a resume: the poll reads the clock every 128 to 4,096
    /// rounds (about one per microsecond of this setting) and stops there when one is due.
    pub busy_poll: Option<Duration>,
    /// Set from a signal handler to make every blocking wait return [`Error::Interrupted`].
    pub stop: Option<Arc<AtomicBool>>,
    /// The pre-shared key both ends must prove they hold before anything else happens
    /// (`None`: no authentication; anyone who reaches the server's port may use it).
    pub auth_key: Option<crate::AuthKey>,
    /// The check each message carries (`--checksum`): both ends must set the same. With
    /// [`Checksum::Crc32c`] the receiver verifies every message before delivering it and ends
    /// the session, naming the message, on a mismatch.
    pub checksum: Checksum,
    /// With [`TransportChoice::Auto`]: refuse to fall back to TCP; a session that cannot run
    /// over RDMA fails with [`Error::RdmaRequired`] saying why (default `false`).
    pub require_rdma: bool,
    /// How long a session whose data path or control connection broke tries to resume
    /// (`--resume-timeout`; docs/design.md, "Resuming a session"): the client reconnects and
    /// the server waits for it this long, and every message is still delivered exactly once, in
    /// order. `Duration::ZERO` turns resumption off: a break ends the session at once. A
    /// session resumes only when both ends allow it (and their transports can); it uses the
    /// shorter of the two times. Default 10 s ([`DEFAULT_RESUME_TIMEOUT`]).
    pub resume_timeout: Duration,
    /// The GRH traffic class of the RDMA queue pair's packets (`--tclass`): DSCP << 2 | ECN,
    /// so DSCP 26 is 104. `None` (the default): 0 on verbs; the DOCA transport cannot set it.
    /// Each end sets its own (docs/lossless-roce.md).
    pub traffic_class: Option<u8>,
    /// The queue pair's service level (`--sl`, 0 to 15; on RoCE the 802.1p priority of
    /// VLAN-tagged packets). `None`: 0 on verbs, the SDK's default on DOCA.
    pub service_level: Option<u8>,
    /// The largest path MTU in bytes (`--mtu`: 256, 512, 1024, 2048 or 4096), capped by the
    /// port's active MTU (with a warning). `None`: the port's active MTU. The session uses the
    /// smaller of both ends' (verbs); on DOCA both ends that set it must set the same.
    pub mtu: Option<u32>,
    /// The local ACK timeout exponent (`--ack-timeout`, 0 to 31: 4.096 us x 2^N; 0 waits
    /// forever). `None`: [`DEFAULT_ACK_TIMEOUT`] on verbs. The DOCA transport cannot set it.
    pub ack_timeout: Option<u8>,
    /// The transport retry count (`--retry-count`, 0 to 7) before a send fails with "retry
    /// counter exceeded". `None`: [`DEFAULT_RETRY_COUNT`] on verbs. The DOCA transport cannot
    /// set it.
    pub retry_count: Option<u8>,
    /// Where sysfs is mounted (`/sys`). Not part of the public API: set through the hidden
    /// [`Config::with_sysfs_root`] hook (tests, the CLI's and the Python module's
    /// `sysfs_root` option).
    pub(crate) sysfs_root: PathBuf,
    /// Asked once per wait slice whether to stop. Not part of the public API: set through the
    /// hidden [`Config::with_interrupt`] hook (the Python module).
    pub(crate) interrupt: Option<InterruptCheck>,
    /// Faults a test build injects. Not part of the public API: set through the hidden
    /// [`Config::with_test_faults`] hook (the program's `test-hooks` build, from its
    /// `RDMA_CONTAINER_TEST_*` variables).
    pub(crate) test_faults: TestFaults,
}

/// Faults a test build injects to see a rule hold (part of the hidden test hook
/// [`Config::with_test_faults`], not of the stable API). The library's code is the same in a
/// test build and a shipped one; a shipped program never sets these.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestFaults {
    /// The message (0-based) whose first byte the sender flips after sealing it, so that the
    /// receiver's `--checksum` check must catch it.
    pub corrupt_message: Option<u64>,
    /// The verbs queue pair's receive-not-ready retry count (0-7) instead of 7 (for ever), so
    /// that a receive-not-ready race fails the session instead of being retried.
    pub rnr_retry: Option<u8>,
    /// The receiving end's `SO_RCVBUF` (bytes) on each tcp data connection, instead of the
    /// kernel's tuning: a receiver that stalls then holds little in its socket, so what the
    /// sender sends meanwhile waits in the sender, and a broken connection loses it.
    pub tcp_receive_buffer: Option<u32>,
}

/// A callback that says whether a blocking wait should stop (see [`Config::with_interrupt`]).
/// It runs on the thread that waits, so it must be quick. Part of the hidden language-binding
/// hook, not of the stable API.
#[doc(hidden)]
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

/// The chainable setters of [`Config`]'s public fields: `with_<field>(value)` sets the field
/// and returns the config.
macro_rules! with_setters {
    ($($(#[$doc:meta])* $setter:ident => $field:ident: $ty:ty;)*) => {
        impl Config {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $setter(mut self, $field: $ty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

with_setters! {
    /// Sets [`Config::max_msg_size`].
    with_max_msg_size => max_msg_size: usize;
    /// Sets [`Config::credits`].
    with_credits => credits: u16;
    /// Sets [`Config::qps`].
    with_qps => qps: u8;
    /// Sets [`Config::paths`].
    with_paths => paths: Vec<Ipv4Addr>;
    /// Sets [`Config::transport`].
    with_transport => transport: TransportChoice;
    /// Sets [`Config::overrides`].
    with_overrides => overrides: Overrides;
    /// Sets [`Config::connect_timeout`].
    with_connect_timeout => connect_timeout: Duration;
    /// Sets [`Config::handshake_timeout`].
    with_handshake_timeout => handshake_timeout: Duration;
    /// Sets [`Config::idle_timeout`] (`None`: no limit).
    with_idle_timeout => idle_timeout: Option<Duration>;
    /// Sets [`Config::busy_poll`] (`None`: sleep at once).
    with_busy_poll => busy_poll: Option<Duration>;
    /// Sets [`Config::stop`] (`None`: no stop flag).
    with_stop => stop: Option<Arc<AtomicBool>>;
    /// Sets [`Config::auth_key`] (`None`: no authentication).
    with_auth_key => auth_key: Option<crate::AuthKey>;
    /// Sets [`Config::checksum`].
    with_checksum => checksum: Checksum;
    /// Sets [`Config::require_rdma`].
    with_require_rdma => require_rdma: bool;
    /// Sets [`Config::resume_timeout`] (`Duration::ZERO`: no resumption).
    with_resume_timeout => resume_timeout: Duration;
    /// Sets [`Config::traffic_class`] (`None`: the transport's default).
    with_traffic_class => traffic_class: Option<u8>;
    /// Sets [`Config::service_level`] (`None`: the transport's default).
    with_service_level => service_level: Option<u8>;
    /// Sets [`Config::mtu`] (`None`: the port's active MTU).
    with_mtu => mtu: Option<u32>;
    /// Sets [`Config::ack_timeout`] (`None`: [`DEFAULT_ACK_TIMEOUT`] on verbs).
    with_ack_timeout => ack_timeout: Option<u8>;
    /// Sets [`Config::retry_count`] (`None`: [`DEFAULT_RETRY_COUNT`] on verbs).
    with_retry_count => retry_count: Option<u8>;
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_msg_size: DEFAULT_MAX_MSG_SIZE,
            credits: DEFAULT_CREDITS,
            qps: 1,
            paths: Vec::new(),
            transport: TransportChoice::Auto,
            overrides: Overrides::default(),
            sysfs_root: PathBuf::from("/sys"),
            connect_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            busy_poll: None,
            stop: None,
            auth_key: None,
            checksum: Checksum::None,
            require_rdma: false,
            resume_timeout: DEFAULT_RESUME_TIMEOUT,
            traffic_class: None,
            service_level: None,
            mtu: None,
            ack_timeout: None,
            retry_count: None,
            interrupt: None,
            test_faults: TestFaults::default(),
        }
    }
}

impl Config {
    /// An explicit device, port or GID index asks for RDMA: whether each exists in the GID
    /// table, checked before anything listens or connects (the CLI does at start-up). Nothing
    /// to check without one, or with [`TransportChoice::Tcp`].
    ///
    /// # Errors
    /// [`Error::RdmaRequired`] naming what was asked, what is missing and what is present.
    pub fn check_device_request(&self) -> crate::Result<()> {
        let Some(asked) = self.overrides.requested() else {
            return Ok(());
        };
        if self.transport == TransportChoice::Tcp {
            return Ok(());
        }
        let table = crate::roce::GidTable::read(&self.sysfs_root).unwrap_or_default();
        crate::roce::check_overrides(&table, &self.overrides).map_err(|e| {
            crate::Error::RdmaRequired {
                asked,
                reason: e.to_string(),
            }
        })
    }

    /// Test and tooling hook, not part of the stable API (hidden from the documentation; it
    /// may change or go in any release): where sysfs is mounted (default `/sys`), for the RDMA
    /// device and GID lookup. Tests point it at a fixture tree; the CLI's `--sysfs-root` and
    /// the Python module's `sysfs_root` option pass it on.
    #[doc(hidden)]
    #[must_use]
    pub fn with_sysfs_root(mut self, sysfs_root: impl Into<PathBuf>) -> Self {
        self.sysfs_root = sysfs_root.into();
        self
    }

    /// Language-binding hook, not part of the stable API (hidden from the documentation; it
    /// may change or go in any release): a check asked once per wait slice (at least every
    /// 100 ms while a call blocks) whether to stop; `true` makes the wait return
    /// [`Error::Interrupted`] as the stop flag does. For callers that cannot set a flag from a
    /// signal handler (the Python module runs Python's signal handlers here).
    #[doc(hidden)]
    #[must_use]
    pub fn with_interrupt(mut self, interrupt: Option<InterruptCheck>) -> Self {
        self.interrupt = interrupt;
        self
    }

    /// Test hook, not part of the stable API (hidden from the documentation; it may change or
    /// go in any release): faults to inject ([`TestFaults`]). Only the program's test builds
    /// set it.
    #[doc(hidden)]
    #[must_use]
    pub fn with_test_faults(mut self, faults: TestFaults) -> Self {
        self.test_faults = faults;
        self
    }

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
        if self.qps == 0 || self.qps > MAX_QPS {
            return Err(Error::InvalidConfig(format!(
                "queue pairs (--qps) must be between 1 and {MAX_QPS}, got {}",
                self.qps
            )));
        }
        let mut distinct = self.paths.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() > usize::from(MAX_QPS) {
            return Err(Error::InvalidConfig(format!(
                "--paths names {} addresses: a session has at most {MAX_QPS} paths",
                distinct.len()
            )));
        }
        if distinct.len() > usize::from(self.qps) {
            return Err(Error::InvalidConfig(format!(
                "{} paths (--paths) need at least as many queue pairs, got --qps {}: each path \
                 carries at least one",
                distinct.len(),
                self.qps
            )));
        }
        if !self.paths.is_empty() {
            if let Some(asked) = self.overrides.requested() {
                return Err(Error::InvalidConfig(format!(
                    "--paths chooses each path's device by its own route; {asked} names one \
                     device for all of them (give one or the other)"
                )));
            }
        }
        if u32::try_from(self.resume_timeout.as_millis()).is_err() {
            return Err(Error::InvalidConfig(format!(
                "the resume timeout must be below {} s, got {:.0} s",
                u32::MAX / 1000,
                self.resume_timeout.as_secs_f64()
            )));
        }
        if self.require_rdma && self.transport == TransportChoice::Tcp {
            return Err(Error::InvalidConfig(
                "--require-rdma cannot be combined with --transport tcp".to_owned(),
            ));
        }
        self.validate_qp()
    }

    /// The queue pair settings: each in range, and none the chosen transport cannot apply
    /// (tcp has no queue pair; DOCA's API has no traffic class, ACK timeout or retry count).
    fn validate_qp(&self) -> Result<()> {
        use crate::proto::{MAX_ACK_TIMEOUT, MAX_RETRY_COUNT, MAX_SERVICE_LEVEL, QP_MTUS};
        let out_of_range = |what: &str, range: &str, got: u32| {
            Err(Error::InvalidConfig(format!(
                "{what} must be {range}, got {got}"
            )))
        };
        if let Some(sl) = self.service_level.filter(|&sl| sl > MAX_SERVICE_LEVEL) {
            return out_of_range("the service level (--sl)", "0 to 15", sl.into());
        }
        if let Some(mtu) = self.mtu.filter(|m| !QP_MTUS.contains(m)) {
            return out_of_range("the MTU (--mtu)", "256, 512, 1024, 2048 or 4096", mtu);
        }
        if let Some(t) = self.ack_timeout.filter(|&t| t > MAX_ACK_TIMEOUT) {
            return out_of_range(
                "the ACK timeout exponent (--ack-timeout)",
                "0 to 31",
                t.into(),
            );
        }
        if let Some(n) = self.retry_count.filter(|&n| n > MAX_RETRY_COUNT) {
            return out_of_range("the retry count (--retry-count)", "0 to 7", n.into());
        }
        let set = self.qp_flags_set();
        if self.transport == TransportChoice::Tcp && !set.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "the queue-pair settings ({}) apply to an RDMA queue pair, and --transport tcp has none (docs/lossless-roce.md)",
                set.join(", ")
            )));
        }
        if self.transport == TransportChoice::Doca {
            if let Some(flag) = doca_refuses(&self.qp_settings()) {
                return Err(Error::InvalidConfig(format!(
                    "{flag} cannot be used with --transport doca: the DOCA RDMA API has no such \
                     setting (use --transport verbs; docs/lossless-roce.md)"
                )));
            }
        }
        Ok(())
    }

    /// The flags of the queue pair settings that are set.
    pub(crate) fn qp_flags_set(&self) -> Vec<&'static str> {
        let q = self.qp_settings();
        [
            (q.traffic_class.is_some(), "--tclass"),
            (q.service_level.is_some(), "--sl"),
            (q.mtu.is_some(), "--mtu"),
            (q.ack_timeout.is_some(), "--ack-timeout"),
            (q.retry_count.is_some(), "--retry-count"),
        ]
        .into_iter()
        .filter_map(|(set, flag)| set.then_some(flag))
        .collect()
    }

    /// The queue pair settings asked for (`None`: the transport's default).
    pub(crate) fn qp_settings(&self) -> crate::proto::QpSettings {
        crate::proto::QpSettings {
            traffic_class: self.traffic_class,
            service_level: self.service_level,
            mtu: self.mtu,
            ack_timeout: self.ack_timeout,
            retry_count: self.retry_count,
        }
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
/// The first queue pair setting the DOCA transport cannot apply, as its flag: the DOCA RDMA
/// API (`doca_rdma_set_*`) has a service level and an MTU, but no traffic class, ACK timeout or
/// retry count.
pub(crate) fn doca_refuses(asked: &crate::proto::QpSettings) -> Option<&'static str> {
    [
        (asked.traffic_class.is_some(), "--tclass"),
        (asked.ack_timeout.is_some(), "--ack-timeout"),
        (asked.retry_count.is_some(), "--retry-count"),
    ]
    .into_iter()
    .find_map(|(set, flag)| set.then_some(flag))
}

#[cfg(test)]
mod setter_tests {
    use super::*;

    #[test]
    fn each_setter_sets_its_field() {
        let stop = Arc::new(AtomicBool::new(true));
        let overrides = Overrides {
            device: Some("mlx5_1".to_owned()),
            port: Some(2),
            gid_index: Some(3),
        };
        let c = Config::default()
            .with_max_msg_size(4096)
            .with_credits(7)
            .with_transport(TransportChoice::Tcp)
            .with_overrides(overrides.clone())
            .with_connect_timeout(Duration::from_secs(1))
            .with_handshake_timeout(Duration::from_secs(2))
            .with_idle_timeout(Some(Duration::from_secs(3)))
            .with_busy_poll(Some(Duration::from_micros(4)))
            .with_stop(Some(stop.clone()))
            .with_sysfs_root("/fixture");
        assert_eq!((c.max_msg_size, c.credits), (4096, 7));
        assert_eq!(c.transport, TransportChoice::Tcp);
        assert_eq!(c.overrides, overrides);
        assert_eq!(c.connect_timeout, Duration::from_secs(1));
        assert_eq!(c.handshake_timeout, Duration::from_secs(2));
        assert_eq!(c.idle_timeout, Some(Duration::from_secs(3)));
        assert_eq!(c.busy_poll, Some(Duration::from_micros(4)));
        assert_eq!(c.sysfs_root, PathBuf::from("/fixture"));
        assert!(c.stopped(), "the stop flag is the one given");
        assert!(c.interrupt.is_none());
        let c = c
            .with_stop(None)
            .with_interrupt(Some(InterruptCheck::new(|| true)));
        assert!(
            c.stop.is_none() && c.stopped(),
            "the interrupt check stops it"
        );
    }
}

#[cfg(test)]
mod qp_tests {
    use super::*;

    fn invalid(config: &Config) -> String {
        match config.validate() {
            Err(Error::InvalidConfig(why)) => why,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn the_queue_pair_setters_set_their_fields_and_none_is_the_default() {
        let d = Config::default();
        assert_eq!(
            (d.traffic_class, d.service_level, d.mtu),
            (None, None, None)
        );
        assert_eq!((d.ack_timeout, d.retry_count), (None, None));
        let c = Config::default()
            .with_traffic_class(Some(104))
            .with_service_level(Some(3))
            .with_mtu(Some(2048))
            .with_ack_timeout(Some(14))
            .with_retry_count(Some(5));
        assert_eq!(
            c.qp_settings(),
            crate::proto::QpSettings {
                traffic_class: Some(104),
                service_level: Some(3),
                mtu: Some(2048),
                ack_timeout: Some(14),
                retry_count: Some(5),
            }
        );
        c.validate().expect("every value in range");
        // The edges of each range.
        Config::default()
            .with_traffic_class(Some(255))
            .with_service_level(Some(15))
            .with_mtu(Some(256))
            .with_ack_timeout(Some(31))
            .with_retry_count(Some(0))
            .validate()
            .expect("the largest values");
        assert_eq!(DEFAULT_ACK_TIMEOUT, 18);
        assert_eq!(DEFAULT_RETRY_COUNT, 7);
    }

    #[test]
    fn out_of_range_queue_pair_settings_are_invalid_config() {
        let sl = invalid(&Config::default().with_service_level(Some(16)));
        assert!(
            sl.contains("--sl") && sl.contains("0 to 15, got 16"),
            "{sl}"
        );
        for mtu in [0, 100, 1000, 1500, 8192, 9000] {
            let e = invalid(&Config::default().with_mtu(Some(mtu)));
            assert!(
                e.contains("--mtu") && e.contains(&format!("got {mtu}")),
                "{e}"
            );
        }
        for ok in [256, 512, 1024, 2048, 4096] {
            Config::default().with_mtu(Some(ok)).validate().unwrap();
        }
        let t = invalid(&Config::default().with_ack_timeout(Some(32)));
        assert!(
            t.contains("--ack-timeout") && t.contains("0 to 31, got 32"),
            "{t}"
        );
        let r = invalid(&Config::default().with_retry_count(Some(8)));
        assert!(
            r.contains("--retry-count") && r.contains("0 to 7, got 8"),
            "{r}"
        );
    }

    #[test]
    fn tcp_refuses_every_queue_pair_setting_and_doca_those_it_has_no_setter_for() {
        let tcp = Config::default().with_transport(TransportChoice::Tcp);
        tcp.clone().validate().expect("tcp without settings");
        let e = invalid(
            &tcp.clone()
                .with_traffic_class(Some(104))
                .with_mtu(Some(1024)),
        );
        assert!(
            e.contains("--tclass, --mtu") && e.contains("--transport tcp"),
            "{e}"
        );
        let doca = Config::default().with_transport(TransportChoice::Doca);
        doca.clone()
            .with_service_level(Some(3))
            .with_mtu(Some(4096))
            .validate()
            .expect("DOCA sets the service level and the MTU");
        for (config, flag) in [
            (doca.clone().with_traffic_class(Some(104)), "--tclass"),
            (doca.clone().with_ack_timeout(Some(14)), "--ack-timeout"),
            (doca.clone().with_retry_count(Some(3)), "--retry-count"),
        ] {
            let e = invalid(&config);
            assert!(
                e.contains(&format!("{flag} cannot be used with --transport doca")),
                "{e}"
            );
        }
        // Auto and verbs take all of them (auto skips a DOCA transport that cannot).
        for choice in [TransportChoice::Auto, TransportChoice::Verbs] {
            Config::default()
                .with_transport(choice)
                .with_traffic_class(Some(104))
                .with_ack_timeout(Some(14))
                .with_retry_count(Some(3))
                .validate()
                .unwrap();
        }
    }
}
