//! # rdma-container
//!
//! Message-oriented, credit-flow-controlled sending and receiving over RDMA (RoCE v2), with a TCP
//! transport that keeps the same semantics where no RDMA device exists.
#![deny(missing_docs)]

pub mod error;
pub mod net;
pub mod proto;
pub mod roce;

pub use error::{Error, Result};
