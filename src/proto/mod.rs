//! The pure protocol core: no I/O, no clocks, no allocation beyond fixed bounds.
//!
//! Everything the two ends say to each other on the bootstrap/control TCP connection is a
//! [`Message`] inside a length-prefixed frame (see [`frame`]). Integers are little-endian.
//! [`credit`] holds the credit accounting both ends run.

pub mod credit;
mod error;
pub mod frame;
mod hello;
mod message;
mod wire;

pub use credit::{CreditError, RecvWindow, SendWindow};
pub use error::DecodeError;
pub use frame::{decode_frame, encode_frame, FRAME_HEADER_LEN, MAX_FRAME_BODY};
pub use hello::{
    Hello, Role, TransportKind, HELLO_MAGIC, MAX_BLOB_LEN, MAX_CREDITS, PROTOCOL_VERSION,
};
pub use message::{Message, MAX_REASON_LEN};

#[cfg(test)]
mod tests;
