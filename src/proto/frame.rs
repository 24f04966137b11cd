//! Framing: a u32 little-endian body length, then the body (kind byte + fields).

use super::{DecodeError, Message};

/// Bytes in the length prefix.
pub(crate) const FRAME_HEADER_LEN: usize = 4;
/// Largest body any message may have (a hello with a full blob fits with room to spare).
pub(crate) const MAX_FRAME_BODY: u32 = 2048;

/// Encodes one message as a complete frame.
#[cfg(test)]
pub(crate) fn encode_frame(msg: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame_into(msg, &mut out);
    out
}

/// Encodes one message as a complete frame into `out` (cleared first), so that a caller that
/// keeps `out` allocates nothing once it has grown to the largest frame it sends.
pub(crate) fn encode_frame_into(msg: &Message, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
    msg.encode_into(out);
    let body_len = (out.len() - FRAME_HEADER_LEN) as u32;
    out[..FRAME_HEADER_LEN].copy_from_slice(&body_len.to_le_bytes());
}

/// Tries to decode one frame from the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some((message, consumed)))` when a frame
/// is complete. An announced length above [`MAX_FRAME_BODY`] fails at once, so a garbage peer
/// can never make the reader buffer more than `FRAME_HEADER_LEN + MAX_FRAME_BODY` bytes.
pub(crate) fn decode_frame(buf: &[u8]) -> Result<Option<(Message, usize)>, DecodeError> {
    let Some(header) = buf.get(..FRAME_HEADER_LEN) else {
        return Ok(None);
    };
    let mut len_bytes = [0u8; FRAME_HEADER_LEN];
    len_bytes.copy_from_slice(header);
    let body_len = u32::from_le_bytes(len_bytes);
    if body_len > MAX_FRAME_BODY {
        return Err(DecodeError::FrameTooLarge {
            len: body_len,
            max: MAX_FRAME_BODY,
        });
    }
    let total = FRAME_HEADER_LEN + body_len as usize;
    let Some(body) = buf.get(FRAME_HEADER_LEN..total) else {
        return Ok(None);
    };
    Ok(Some((Message::decode(body)?, total)))
}
