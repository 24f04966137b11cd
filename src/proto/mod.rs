//! The wire encoding: frames, the hello and the control messages, and the credit windows.
//! No I/O, no clocks; the rules about when each message may come live in the session core.
//!
//! Everything the two ends say to each other on the bootstrap/control TCP connection is a
//! [`Message`] inside a length-prefixed frame (see [`frame`]). Integers are little-endian.
//! [`credit`] holds the credit accounting both ends run.

pub(crate) mod credit;
mod error;
pub(crate) mod frame;
mod hello;
mod message;
mod wire;

pub(crate) use credit::{CreditError, RecvWindow, SendWindow};
pub(crate) use error::DecodeError;
#[cfg(test)]
pub(crate) use frame::encode_frame;
pub(crate) use frame::{decode_frame, encode_frame_into, FRAME_HEADER_LEN, MAX_FRAME_BODY};
pub(crate) use hello::PathPair;
#[cfg(test)]
pub(crate) use hello::HELLO_MAGIC;
pub use hello::{Checksum, Role, TransportKind};
#[allow(unused_imports)]
// MAX_BLOB_LEN: used by the doca transport, which only some builds have
pub(crate) use hello::{Hello, MAX_BLOB_LEN, MAX_CREDITS, PROTOCOL_VERSION};
pub(crate) use hello::{QpSettings, MAX_ACK_TIMEOUT, MAX_RETRY_COUNT, MAX_SERVICE_LEVEL, QP_MTUS};
#[cfg(test)]
pub(crate) use message::AUTH_LEN;
#[cfg(test)]
pub(crate) use message::MAX_REASON_LEN;
pub(crate) use message::{Counts, Message, AUTH_PREFIX, BUSY_PREFIX, SESSION_ID_LEN};

#[cfg(test)]
mod tests;
