//! The per-message check (`--checksum crc32c`): the sender seals each message with a CRC32C
//! of its bytes, stored little-endian in the 4 bytes after it in the slot; the receiver checks
//! it before delivering the message, which the application then sees without the trailer.
//!
//! Rules: both ends agree on the check in their hellos (the handshake core refuses a
//! mismatch); the sender's count of bytes and the application's message lengths never include
//! the trailer; a message shorter than its trailer, or whose CRC differs, ends the session on
//! the receiver with [`Error::ChecksumMismatch`] naming the message's index (the sender is told
//! in the Reject).

use crate::proto::Checksum;
use crate::Error;

/// Bytes of the CRC32C trailer.
const CRC_LEN: usize = 4;

/// Writes the trailer of the `len`-byte message at the start of `slot` (which holds at least
/// `len` plus the trailer). Returns the length to send.
pub(crate) fn seal(checksum: Checksum, slot: &mut [u8], len: usize) -> usize {
    let sealed = trailer(checksum, &slot[..len]);
    slot[len..len + sealed.len].copy_from_slice(sealed.bytes());
    len + sealed.len
}

/// The trailer [`seal`] writes after `message`.
pub(crate) fn trailer(checksum: Checksum, message: &[u8]) -> Trailer {
    match checksum {
        Checksum::None => Trailer {
            value: [0; CRC_LEN],
            len: 0,
        },
        Checksum::Crc32c => Trailer {
            value: crc32c::crc32c(message).to_le_bytes(),
            len: CRC_LEN,
        },
    }
}

/// A message's trailer: its CRC32C, or nothing without a checksum.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trailer {
    value: [u8; CRC_LEN],
    len: usize,
}

impl Trailer {
    /// The bytes that follow the message on the wire.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.value[..self.len]
    }
}

/// Checks message number `index` as it arrived (`arrived`, trailer included); returns the
/// message's length without its trailer.
pub(crate) fn check(checksum: Checksum, arrived: &[u8], index: u64) -> Result<usize, Error> {
    match checksum {
        Checksum::None => Ok(arrived.len()),
        Checksum::Crc32c => {
            let Some(len) = arrived.len().checked_sub(CRC_LEN) else {
                return Err(Error::ChecksumMismatch {
                    message: index,
                    detail: format!(
                        "{} byte(s) arrived, fewer than the 4-byte CRC32C trailer",
                        arrived.len()
                    ),
                });
            };
            let (message, trailer) = arrived.split_at(len);
            let mut stored = [0u8; CRC_LEN];
            stored.copy_from_slice(trailer);
            let stored = u32::from_le_bytes(stored);
            let computed = crc32c::crc32c(message);
            if stored != computed {
                return Err(Error::ChecksumMismatch {
                    message: index,
                    detail: format!(
                        "CRC32C {computed:08x} of its {len} byte(s), {stored:08x} sent with it"
                    ),
                });
            }
            Ok(len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_message_checks_and_its_trailer_is_its_crc32c() {
        let mut slot = [0u8; 16];
        slot[..9].copy_from_slice(b"123456789");
        let sent = seal(Checksum::Crc32c, &mut slot, 9);
        assert_eq!(sent, 13);
        // The check value of CRC-32C (Castagnoli) for "123456789".
        assert_eq!(&slot[9..13], &0xe306_9283u32.to_le_bytes());
        assert_eq!(check(Checksum::Crc32c, &slot[..sent], 0).unwrap(), 9);
        assert_eq!(seal(Checksum::None, &mut slot, 9), 9);
        assert_eq!(check(Checksum::None, &slot[..9], 0).unwrap(), 9);
    }

    #[test]
    fn an_empty_message_carries_its_trailer_too() {
        let mut slot = [0u8; 4];
        let sent = seal(Checksum::Crc32c, &mut slot, 0);
        assert_eq!(check(Checksum::Crc32c, &slot[..sent], 3).unwrap(), 0);
    }

    #[test]
    fn a_flipped_bit_or_a_short_message_is_named_by_its_index() {
        let mut slot = [0u8; 12];
        slot[..8].copy_from_slice(b"payload!");
        let sent = seal(Checksum::Crc32c, &mut slot, 8);
        for bit in [0usize, 7, 63, 64, 95] {
            let mut corrupted = slot;
            corrupted[bit / 8] ^= 1 << (bit % 8);
            let e = check(Checksum::Crc32c, &corrupted[..sent], 41).unwrap_err();
            assert!(
                matches!(e, Error::ChecksumMismatch { message: 41, .. }),
                "{e}"
            );
        }
        let e = check(Checksum::Crc32c, &slot[..3], 7).unwrap_err();
        assert!(e.to_string().contains("message 7"), "{e}");
        assert!(e.to_string().contains("fewer than the 4-byte"), "{e}");
    }
}
