//! # rdma-container
//!
//! Message-oriented, credit-flow-controlled sending and receiving over RDMA (RoCE v2), with a
//! TCP transport that keeps the same semantics where no RDMA device exists.
//!
//! - A client sends with [`RdmaSink::connect`] or receives with [`RdmaSrc::connect`].
//! - A server binds a [`Listener`]; each [`Incoming`] client is accepted as a receiver
//!   ([`Incoming::accept_src`]) or a sender ([`Incoming::accept_sink`]), or refused.
//! - Full duplex is a sink and a src between the same two ends: [`duplex::connect`] and
//!   [`Listener::accept_duplex`].
//! - [`roce`] and [`path`] read what `rdma-container doctor` shows: the GID table, the device
//!   choice for a peer, and the route toward it; [`doctor`] the whole readiness report,
//!   [`host`] the memory limits a session's slots must fit, [`build_info`] what this build has.
//!
//! Everything a program that sends and receives needs is at the crate's root (the types, the
//! errors and their [`ErrorKind`], the defaults); the public modules are the host-inspection
//! API above and [`duplex`]'s `connect`.
//!
//! ```no_run
//! use rdma_container::{Config, RdmaSink};
//! # fn main() -> rdma_container::Result<()> {
//! let mut sink = RdmaSink::connect("10.0.0.2:5000".parse().unwrap(), &Config::default())?;
//! sink.send(b"hello")?; // the buffer may be reused as soon as send returns
//! sink.finish()?; // end of stream; dropping the sink instead aborts the session
//! # Ok(()) }
//! ```
//!
//! A received slice stays valid until the next [`RdmaSrc::recv`]; `send` blocks while the
//! receiver has no free slot (credit flow control, [`Config::credits`] slots, 2 by default).
//! See `examples/` for a server, a duplex pair and a server loop, and `docs/design.md` for the
//! layers and the wire protocol's rules.
//!
//! Inside, bottom up: the I/O-free session core (every protocol rule, no sockets, no clock),
//! the wire encoding, the transports behind one small private trait (tcp, verbs, doca), the
//! handshake, then [`RdmaSink`] and [`RdmaSrc`], which drive the core. The public names are the
//! application's view (a sink takes messages in, a src gives them out); inside, the sink is the
//! sender and the src the receiver: [`RdmaSink`] is `src/sender.rs`, driving the core's
//! `SenderCore` (`src/session_core/sending.rs`), and [`RdmaSrc`] is `src/receiver.rs`, driving
//! `ReceiverCore` (`src/session_core/receiving.rs`).
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unreachable_pub)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod auth;
mod busy_poll;
mod checksum;
mod config;
pub mod doctor;
pub mod duplex;
mod error;
mod error_kind;
pub mod host;
mod listener;
mod log_text;
mod message_copy;
pub(crate) mod net;
pub(crate) mod proto;
mod receiver;
pub mod roce;
mod sender;
mod session;
mod session_core;
mod time;
#[cfg(feature = "tokio")]
pub mod tokio;
pub(crate) mod transport;

pub use auth::AuthKey;
/// The Python module's interrupt hook (see the hidden `Config::with_interrupt`).
#[doc(hidden)]
pub use config::InterruptCheck;
/// The program's test builds' faults (see the hidden `Config::with_test_faults`).
#[doc(hidden)]
pub use config::TestFaults;
pub use config::{
    Config, TransportChoice, DEFAULT_ACK_TIMEOUT, DEFAULT_CREDITS, DEFAULT_MAX_MSG_SIZE,
    DEFAULT_RESUME_TIMEOUT, DEFAULT_RETRY_COUNT, MAX_CREDITS, MAX_QPS,
};
pub use error::{Error, ProtocolViolation, Result};
pub use error_kind::{CompletionStatus, DocaFailure, ErrorKind};
pub use listener::resume_registry::ParkedSessions;
pub use listener::{DuplexStart, Incoming, Listener, MAX_PENDING_HANDSHAKES, MAX_QUEUED};
/// The program's way of quoting a peer's words in a log line (control characters escaped,
/// length bounded).
#[doc(hidden)]
pub use log_text::peer_text;
pub use proto::{Checksum, Role, TransportKind};
pub use receiver::RdmaSrc;
pub use sender::RdmaSink;
pub use session::resume::{ResumeCounters, ResumeStats};
pub use session::{SessionInfo, SessionPath};
pub use transport::auto_order;
pub use transport::striped::counters::PathCounters;

/// The path toward a peer: which local address and interface the kernel uses, and the route.
pub mod path {
    pub use crate::net::iface::{interface_owning, path_info, PathInfo};
    pub use crate::net::route::{route_to, RouteInfo, RouteType};
}

/// What this build was made with, as `rdma-container --version` prints it.
pub mod build_info {
    /// The transports compiled in, in the order `auto` prefers them (`doca,verbs,tcp`).
    pub const TRANSPORTS: &str = env!("RDMA_CONTAINER_TRANSPORTS");
    /// The DOCA SDK found at build time (`none (transport compiled out)` without one).
    pub const DOCA_VERSION: &str = env!("RDMA_CONTAINER_DOCA_VERSION");
}

/// The transports compiled into this build, in the order `auto` prefers them.
pub fn compiled_in_transports() -> &'static [TransportKind] {
    transport::compiled_in()
}
