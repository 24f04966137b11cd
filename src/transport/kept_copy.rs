//! The copy of a message into a slot that keeps it for a resume, on a transport where the
//! kernel takes the bytes to send from the caller's buffer (tcp).
//!
//! Rules kept here:
//! - the bytes land exactly as `copy_from_slice` would put them: same length, same order;
//! - a message of at least [`AROUND_CACHE_FROM`] bytes is written with non-temporal stores on
//!   x86-64 (the 64-byte lines of its middle; the few bytes before and after are copied as
//!   usual); every other copy is [`crate::message_copy::copy_message`];
//! - the stores are fenced before the copy returns, so whatever reads the slot next (a write
//!   of the rest of the message, a resume) sees them.
//!
//! Why: a resuming sender keeps each message in its own slot until the receiver released it,
//! so with `credits` large messages in flight every send writes a slot last touched `credits`
//! messages earlier: 4 MiB back at 64 credits of 64 KiB. A cached copy first reads those lines
//! in and then pushes the socket's buffers out of the cache, and the sender's CPU is what a
//! tcp stream runs out of (BENCHMARKS.md, round seventeen). Nothing reads a kept slot until a
//! resume, or until the kernel pushed back in the middle of a message: writing it around the
//! cache leaves the cache to the caller's buffer, which the kernel copies from instead. Below
//! the threshold `credits` slots fit the cache anyway.

/// The smallest message written around the cache.
pub(crate) const AROUND_CACHE_FROM: usize = 16 * 1024;

/// Whether a kept message of `len` bytes is written around the cache: then the transport
/// hands the kernel the caller's bytes, which are in the cache, rather than the slot's.
pub(crate) fn goes_around_cache(len: usize) -> bool {
    len >= AROUND_CACHE_FROM
}

/// Copies `src` into `dst` (of the same length) as the module's rules say.
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does (the caller sizes `dst` from `src`).
pub(crate) fn copy_kept(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "a kept copy between unequal lengths");
    if !goes_around_cache(src.len()) {
        crate::message_copy::copy_message(dst, src);
        return;
    }
    around_cache(dst, src);
}

#[cfg(target_arch = "x86_64")]
fn around_cache(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    const LINE: usize = 64;
    // The head: up to the first 64-byte boundary of `dst`; the body: whole lines from there;
    // the tail: what is left. `len >= AROUND_CACHE_FROM > LINE` leaves a body of one line at
    // the least.
    let head = (dst.as_ptr() as usize).wrapping_neg() % LINE;
    let body = (dst.len() - head) / LINE * LINE;
    let (dst_head, rest) = dst.split_at_mut(head);
    let (dst_body, dst_tail) = rest.split_at_mut(body);
    let (src_head, rest) = src.split_at(head);
    let (src_body, src_tail) = rest.split_at(body);
    dst_head.copy_from_slice(src_head);
    for (to, from) in dst_body
        .chunks_exact_mut(LINE)
        .zip(src_body.chunks_exact(LINE))
    {
        let to = to.as_mut_ptr().cast::<__m128i>();
        let from = from.as_ptr().cast::<__m128i>();
        // SAFETY: `to` and `from` each point at 64 bytes of their own slices (`chunks_exact`
        // of equal lengths), read and written as four 16-byte halves with `add(0..4)`. The
        // loads are unaligned loads; `to` is 64-byte aligned (the body starts at a line
        // boundary of `dst` and steps by whole lines), which the streaming stores need (16).
        // SSE2, which both instructions need, is part of x86-64. The slices do not overlap
        // (one is borrowed mutably).
        unsafe {
            for quarter in 0..4 {
                let value = _mm_loadu_si128(from.add(quarter));
                _mm_stream_si128(to.add(quarter), value);
            }
        }
    }
    // SAFETY: a store fence has no operands; SSE, which it needs, is part of x86-64. It
    // orders the streaming stores above before any later store or load of this thread and
    // makes them visible to the kernel and to other threads before the copy returns.
    unsafe { _mm_sfence() };
    dst_tail.copy_from_slice(src_tail);
}

#[cfg(not(target_arch = "x86_64"))]
fn around_cache(dst: &mut [u8], src: &[u8]) {
    crate::message_copy::copy_message(dst, src);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern no shifted or truncated copy reproduces.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 13 + i / 241) as u8).collect()
    }

    #[test]
    fn every_byte_lands_in_place_at_every_alignment_and_length_around_the_threshold() {
        let lens = [
            0,
            1,
            63,
            AROUND_CACHE_FROM - 1,
            AROUND_CACHE_FROM,
            AROUND_CACHE_FROM + 1,
            AROUND_CACHE_FROM + 63,
            AROUND_CACHE_FROM + 64,
            65_536,
            65_536 + 17,
        ];
        let src_full = pattern(65_536 + 17 + 128);
        let mut dst_full = vec![0u8; 65_536 + 17 + 128];
        for &len in &lens {
            for dst_at in [0, 1, 15, 16, 33, 63, 64] {
                for src_at in [0, 7, 64] {
                    dst_full.fill(0xEE);
                    let src = &src_full[src_at..src_at + len];
                    copy_kept(&mut dst_full[dst_at..dst_at + len], src);
                    assert_eq!(
                        &dst_full[dst_at..dst_at + len],
                        src,
                        "len {len}, dst at {dst_at}, src at {src_at}"
                    );
                    assert!(
                        dst_full[..dst_at].iter().all(|&b| b == 0xEE)
                            && dst_full[dst_at + len..].iter().all(|&b| b == 0xEE),
                        "len {len}, dst at {dst_at}: wrote outside its slice"
                    );
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "unequal lengths")]
    fn unequal_lengths_panic_as_copy_from_slice_does() {
        copy_kept(&mut [0u8; 4], &[1u8; 5]);
    }
}
