//! Pure protocol core: no I/O.

/// Placeholder until the codec lands.
#[derive(Debug, thiserror::Error)]
#[error("decode error")]
pub struct DecodeError;
