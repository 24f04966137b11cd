//! Receive coalescing on tcp: when a receiver with a deep queue should pause before it sleeps.
//!
//! On a TCP stream of small messages, how many messages one segment carries is set by the
//! receiver: the sender's kernel holds small writes (Nagle) only until the previous segment is
//! acknowledged, and an eager receiver that wakes, drains the socket and acknowledges on every
//! segment keeps each segment down to the few messages written meanwhile. Every segment then
//! costs the sender a wake-up of the receiver and the receiver an acknowledgement, both inside
//! the sender's system calls on a loopback or a virtual machine. A NIC's interrupt moderation
//! answers the same problem; this is its equivalent for our tcp receiver.
//!
//! Rules:
//! - A receiver that is about to sleep, whose last read that emptied the socket brought
//!   `STREAM_BATCH` messages or more (a stream is running: the sender wrote several while the
//!   receiver handled the last ones), and that has the room below posted (receive slots),
//!   first pauses for `HOLD`, so that the sender's next messages gather into a few large
//!   segments and one read takes them all.
//! - The room keeps the pause to queues deep enough for the sender to go on writing for the
//!   whole pause without running out of credit: as many slots as it could fill in `HOLD` at
//!   the fastest rate we plan for, in messages (`MIN_ROOM`, small messages) or in bytes
//!   (`MIN_ROOM_BYTES` over the batch's mean message length, large ones), whichever is fewer,
//!   and never fewer than `MIN_ROOM_FLOOR`. So a stream of 64 B messages pauses with 256 slots
//!   and not with `bench`'s 16 or 64, a stream of 64 KiB messages pauses with 16 or more, and
//!   the default of 2 credits never pauses, whatever the size (a pause there would leave the
//!   sender waiting for credit instead).
//! - A read that finds nothing before any other in the same poll brought something, or that
//!   brings fewer messages, ends the stream: a ping-pong (one message per wake-up), a lone
//!   message and a busy-polling receiver (whose last read before it sleeps found nothing) never
//!   pause. A read that finds nothing right after others brought messages (they ended exactly
//!   at the end of what had arrived) is a drain like a short read.
//! - One pause per sleep: the read after it decides again.
//! - A session striped over several connections in use never pauses (`striped.rs` says what
//!   was measured): only a lone connection does.
//!
//! What it costs: a message that arrives during a pause waits for it (at most `HOLD` plus the
//! kernel's timer slack, 50 µs by default), only while a stream runs into a queue with the room
//! above. The first message after an idle period never waits.

use std::time::Duration;

/// Messages one draining read must bring to count as a running stream.
pub(crate) const STREAM_BATCH: usize = 2;
/// Receive slots that must be posted (room for the sender) before the receiver pauses: what a
/// sender of small messages could write in `HOLD` (5 million messages a second), with room.
pub(crate) const MIN_ROOM: usize = 256;
/// The same room in bytes, for large messages: what a sender could write in `HOLD` at 20 GB/s
/// (beyond one tcp connection's rate on loopback or a 100G NIC).
pub(crate) const MIN_ROOM_BYTES: usize = 1024 * 1024;
/// Never pause with fewer slots posted than this, however large the messages: the default of
/// 2 credits never pauses, and a pause always leaves the sender several messages to write.
pub(crate) const MIN_ROOM_FLOOR: usize = 4;
/// How long the receiver pauses before it sleeps while a stream runs.
pub(crate) const HOLD: Duration = Duration::from_micros(50);

/// Tracks what the receiver's reads found and decides whether to pause before a sleep.
#[derive(Debug, Default)]
pub(crate) struct ReceiveCoalescing {
    /// Messages completed by the reads since the last one that emptied the socket.
    since_drain: usize,
    /// Their bytes.
    since_drain_bytes: usize,
    /// Messages the last draining read cycle brought (0 after a read that found nothing).
    last_batch: usize,
    /// Their bytes.
    last_batch_bytes: usize,
}

impl ReceiveCoalescing {
    /// `n` messages of `bytes` bytes in all completed from what a read brought.
    pub(crate) fn on_messages(&mut self, n: usize, bytes: usize) {
        self.since_drain += n;
        self.since_drain_bytes = self.since_drain_bytes.saturating_add(bytes);
    }

    /// A read emptied the socket: the messages since the previous one are this cycle's batch.
    pub(crate) fn on_drained(&mut self) {
        self.last_batch = std::mem::take(&mut self.since_drain);
        self.last_batch_bytes = std::mem::take(&mut self.since_drain_bytes);
    }

    /// A read found the socket empty: whatever ran has paused.
    pub(crate) fn on_empty_read(&mut self) {
        *self = Self::default();
    }

    /// The receiver is about to sleep with `posted` receive slots posted: how long to pause
    /// first, if at all. Forgets the batch, so the next sleep pauses only after another.
    pub(crate) fn before_sleep(&mut self, posted: usize) -> Option<Duration> {
        let batch = std::mem::take(&mut self.last_batch);
        let bytes = std::mem::take(&mut self.last_batch_bytes);
        (batch >= STREAM_BATCH && posted >= room_needed(batch, bytes)).then_some(HOLD)
    }
}

/// Slots the sender must have for a pause, for a stream whose batch brought `batch` messages
/// (at least one) of `bytes` bytes: `MIN_ROOM` messages, or fewer when `MIN_ROOM_BYTES` of
/// messages of the batch's mean length fill it first, and at least `MIN_ROOM_FLOOR`.
fn room_needed(batch: usize, bytes: usize) -> usize {
    let mean_len = (bytes / batch.max(1)).max(1);
    MIN_ROOM
        .min(MIN_ROOM_BYTES.div_ceil(mean_len))
        .max(MIN_ROOM_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after_a_draining_read_of(messages: usize) -> ReceiveCoalescing {
        after_a_draining_read_of_messages_of(messages, 64)
    }

    fn after_a_draining_read_of_messages_of(messages: usize, len: usize) -> ReceiveCoalescing {
        let mut c = ReceiveCoalescing::default();
        c.on_messages(messages, messages * len);
        c.on_drained();
        c
    }

    /// The pause before a sleep with `posted` slots after a draining read of `messages` of
    /// `len` bytes each.
    fn pause_after(messages: usize, len: usize, posted: usize) -> Option<Duration> {
        after_a_draining_read_of_messages_of(messages, len).before_sleep(posted)
    }

    #[test]
    fn a_running_stream_into_a_deep_queue_pauses_before_the_sleep() {
        let mut c = after_a_draining_read_of(STREAM_BATCH);
        assert_eq!(c.before_sleep(MIN_ROOM), Some(HOLD));
    }

    #[test]
    fn a_shallow_queue_never_pauses_so_the_sender_never_waits_for_credit_meanwhile() {
        let mut c = after_a_draining_read_of(100);
        assert_eq!(c.before_sleep(MIN_ROOM - 1), None);
    }

    #[test]
    fn one_message_per_wake_up_is_a_ping_pong_and_never_pauses() {
        let mut c = after_a_draining_read_of(1);
        assert_eq!(c.before_sleep(1024), None);
    }

    #[test]
    fn a_read_that_found_nothing_ends_the_stream() {
        let mut c = after_a_draining_read_of(50);
        c.on_empty_read();
        assert_eq!(
            c.before_sleep(1024),
            None,
            "a busy poller's last read found nothing"
        );
    }

    #[test]
    fn one_pause_per_batch_the_next_sleep_waits_for_another_batch() {
        let mut c = after_a_draining_read_of(50);
        assert_eq!(c.before_sleep(1024), Some(HOLD));
        assert_eq!(c.before_sleep(1024), None);
        c.on_messages(3, 3 * 64);
        assert_eq!(
            c.before_sleep(1024),
            None,
            "not drained yet: no batch counted"
        );
        c.on_drained();
        assert_eq!(c.before_sleep(1024), Some(HOLD));
    }

    #[test]
    fn messages_of_several_reads_before_a_drain_count_as_one_batch() {
        let mut c = ReceiveCoalescing::default();
        c.on_messages(1, 64);
        c.on_messages(1, 64);
        c.on_drained();
        assert_eq!(c.before_sleep(MIN_ROOM), Some(HOLD));
    }

    #[test]
    fn a_stream_of_64_kib_messages_pauses_with_16_slots_posted_not_15() {
        // 16 x 64 KiB = 1 MiB: what the sender could write during the pause at 20 GB/s.
        assert_eq!(pause_after(2, 64 * 1024, 15), None);
        assert_eq!(pause_after(2, 64 * 1024, 16), Some(HOLD));
    }

    #[test]
    fn the_room_counts_the_mean_message_of_the_batch_not_its_largest() {
        // One 64 KiB message among 99 of 64 B: the stream is one of small messages.
        let mut c = ReceiveCoalescing::default();
        c.on_messages(99, 99 * 64);
        c.on_messages(1, 64 * 1024);
        c.on_drained();
        assert_eq!(c.before_sleep(MIN_ROOM / 2), None);
        assert_eq!(pause_after(100, 64, MIN_ROOM), Some(HOLD));
    }

    #[test]
    fn messages_of_a_few_kib_need_the_full_room_in_messages() {
        // 4 KiB x 256 = 1 MiB: the two bounds meet; smaller messages need MIN_ROOM slots.
        assert_eq!(pause_after(10, 4096, MIN_ROOM - 1), None);
        assert_eq!(pause_after(10, 1024, MIN_ROOM - 1), None);
        assert_eq!(pause_after(10, 8192, MIN_ROOM / 2), Some(HOLD));
    }

    #[test]
    fn the_default_two_credits_never_pause_even_with_messages_of_megabytes() {
        assert_eq!(pause_after(2, 4 * 1024 * 1024, 2), None);
        assert_eq!(pause_after(2, 4 * 1024 * 1024, MIN_ROOM_FLOOR), Some(HOLD));
    }

    #[test]
    fn empty_messages_count_as_one_byte_and_never_divide_by_zero() {
        assert_eq!(pause_after(10, 0, MIN_ROOM - 1), None);
        assert_eq!(pause_after(10, 0, MIN_ROOM), Some(HOLD));
    }
}
