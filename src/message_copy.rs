//! The copy `RdmaSink::send` makes of each message into its staging slot.
//!
//! Rules kept here:
//! - the bytes land exactly as `copy_from_slice` would put them: same length, same order;
//! - the copy is one `memcpy`, unless the destination starts 1 to 63 bytes after the source
//!   modulo 4 KiB (a *near page alias*) and the message is at least [`PIECE`] bytes: then it is
//!   made in pieces of at most [`PIECE`] bytes.
//!
//! Why: for a large copy glibc's x86-64 `memcpy` uses `rep movsb`, and on AMD EPYC (Zen) a
//! `rep movsb` whose destination sits just after its source modulo 4 KiB runs about twenty
//! times slower: 1.5-2 GB/s instead of 30-40 GB/s for 64 KiB (measured here; BENCHMARKS.md,
//! "The sender's copy"). Which case a message meets is chance: the caller's buffer is wherever
//! its allocator put it, and the slots of an RDMA transport are one buffer of equal slots, so
//! a buffer that meets it in one slot meets it in every slot, on every message. Pieces below
//! glibc's `rep movsb` threshold (2 KiB at the least) take its vector loop, which has no such
//! cliff; elsewhere a single `memcpy` is the faster (a 2 KiB-piece copy of 64 KiB ran at 22
//! GB/s where one call ran at 30).

/// The largest piece a near page alias is copied in: at or below glibc's smallest `rep movsb`
/// threshold on x86-64.
pub(crate) const PIECE: usize = 2048;

/// Copies `src` into `dst` (of the same length) as the module's rules say.
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does (the callers size `dst` from `src`).
pub(crate) fn copy_message(dst: &mut [u8], src: &[u8]) {
    if src.len() >= PIECE && near_page_alias(dst.as_ptr() as usize, src.as_ptr() as usize) {
        assert_eq!(
            dst.len(),
            src.len(),
            "a message copy between unequal lengths"
        );
        for (to, from) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
            to.copy_from_slice(from);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// Whether a copy to `dst` from `src` is a near page alias: `dst` 1 to 63 bytes after `src`
/// modulo 4 KiB.
fn near_page_alias(dst: usize, src: usize) -> bool {
    (1..64).contains(&(dst.wrapping_sub(src) % 4096))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern no shifted or truncated copy reproduces.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn a_near_page_alias_is_a_destination_1_to_63_bytes_past_its_source_modulo_4_kib() {
        let src = 0x10_0000;
        for (delta, alias) in [
            (0, false),
            (1, true),
            (16, true),
            (63, true),
            (64, false),
            (4095, false),
            (4096, false),
            (4097, true),
        ] {
            assert_eq!(near_page_alias(src + delta, src), alias, "{delta}");
        }
        // below the source: the distance wraps, and only its remainder counts
        assert!(near_page_alias(src - 4096 + 8, src));
        assert!(!near_page_alias(src - 8, src));
    }

    /// Where in `buf` a copy from `src` lands `delta` bytes past it modulo 4 KiB.
    fn at_distance(buf: &[u8], src: &[u8], delta: usize) -> usize {
        (src.as_ptr() as usize + delta).wrapping_sub(buf.as_ptr() as usize) % 4096
    }

    #[test]
    fn every_byte_lands_in_place_at_every_alignment_and_length() {
        let src_buf = pattern(3 * PIECE + 200);
        let mut dst_buf = vec![0u8; src_buf.len() + 4096];
        let mut in_pieces = 0;
        for len in [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 17] {
            for src_at in [0, 5, 64] {
                let src = &src_buf[src_at..src_at + len];
                // destinations from 8 bytes before to 100 bytes after the source, modulo 4 KiB:
                // both sides of the window and all of it
                for delta in (4096 - 8..4096).chain(0..100) {
                    let at = at_distance(&dst_buf, src, delta);
                    if len >= PIECE
                        && near_page_alias(dst_buf[at..].as_ptr() as usize, src.as_ptr() as usize)
                    {
                        in_pieces += 1;
                    }
                    dst_buf.fill(0xEE);
                    copy_message(&mut dst_buf[at..at + len], src);
                    assert_eq!(&dst_buf[at..at + len], src, "{len} {src_at} {delta}");
                    assert!(dst_buf[..at].iter().all(|&b| b == 0xEE), "before");
                    assert!(dst_buf[at + len..].iter().all(|&b| b == 0xEE), "after");
                }
            }
        }
        // 3 lengths at or above a piece, 3 sources, 63 distances in the window
        assert_eq!(in_pieces, 3 * 3 * 63, "the copies in pieces were made");
    }

    #[test]
    #[should_panic(expected = "unequal lengths")]
    fn unequal_lengths_panic_as_copy_from_slice_does() {
        let src = pattern(2 * PIECE);
        let mut dst = vec![0u8; 2 * PIECE + 4096 + 64];
        // a destination 16 bytes past the source modulo 4 KiB, one byte short
        let at = at_distance(&dst, &src, 16);
        copy_message(&mut dst[at..at + 2 * PIECE - 1], &src);
    }
}
