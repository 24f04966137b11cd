//! # rdma-container
//!
//! Message-oriented, credit-flow-controlled sending and receiving over RDMA (RoCE v2), with a
//! TCP transport that keeps the same semantics where no RDMA device exists.
//!
//! ```no_run
//! use rdma_container::{Config, RdmaSink};
//! # fn main() -> rdma_container::Result<()> {
//! let mut sink = RdmaSink::connect("10.0.0.2:5000".parse().unwrap(), &Config::default())?;
//! sink.send(b"hello")?;
//! sink.finish()?;
//! # Ok(()) }
//! ```
//!
//! Layers, bottom up: [`proto`] (pure encoding and credit accounting), [`net`] (bootstrap TCP,
//! control channel, route and interface lookup), [`roce`] (GID table and device choice),
//! [`transport`] (the data path trait and its implementations), [`session`] (handshake), then
//! [`RdmaSink`] and [`RdmaSrc`].
#![deny(missing_docs)]

pub mod config;
pub mod duplex;
pub mod error;
mod listener;
pub mod net;
pub mod proto;
mod receiver;
pub mod roce;
mod sender;
mod session;
mod session_core;
pub mod transport;

pub use config::{Config, TransportChoice};
pub use error::{Error, ProtocolViolation, Result};
pub use listener::{Incoming, Listener, MAX_PENDING_HANDSHAKES, MAX_QUEUED};
pub use proto::Role;
pub use receiver::RdmaSrc;
pub use sender::RdmaSink;
pub use session::SessionInfo;
