//! Decoding errors.

/// When a frame's length field is printable text (`SSH-`, `HTTP`, `220 `), the peer speaks
/// another protocol: says so, with the text.
fn text_in_length(len: u32) -> String {
    let bytes = len.to_le_bytes();
    if bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        let text: String = bytes.iter().map(|&b| char::from(b)).collect();
        format!(
            " (the peer's first bytes read {text:?}: another service's protocol, not \
rdma-container; check the address and port)"
        )
    } else {
        String::new()
    }
}

/// Why a byte sequence is not a valid protocol message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("truncated: needed {needed} more byte(s) for {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// How many bytes were missing.
        needed: usize,
    },
    /// A frame announces a body larger than the protocol allows (its length field read as text
    /// is named when it is text: another service's greeting or answer on that port).
    #[error("frame of {len} bytes exceeds the limit of {max} bytes{}", text_in_length(*len))]
    FrameTooLarge {
        /// The announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The hello does not start with our magic: not an rdma-container peer.
    #[error("bad magic {found:02x?} (not an rdma-container peer?)")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// The peer speaks another protocol version.
    #[error("unsupported protocol version {theirs} (this build speaks {ours})")]
    UnsupportedVersion {
        /// The peer's version.
        theirs: u16,
        /// Ours.
        ours: u16,
    },
    /// A message kind byte we do not know.
    #[error("unknown message kind {0:#04x}")]
    UnknownKind(u8),
    /// A field holds a value outside its domain.
    #[error("invalid {field}: {value}")]
    BadField {
        /// The field name.
        field: &'static str,
        /// The offending value.
        value: u64,
    },
    /// A length-prefixed field is longer than its bound.
    #[error("{field} of {len} bytes exceeds the limit of {max}")]
    FieldTooLong {
        /// The field name.
        field: &'static str,
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes left over after a complete message.
    #[error("{0} trailing byte(s) after the message")]
    TrailingBytes(usize),
}
