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
//!   receiver handled the last ones), and that has at least `MIN_ROOM` receive slots posted,
//!   first pauses for `HOLD`, so that the sender's next messages gather into a few large
//!   segments and one read takes them all.
//! - `MIN_ROOM` keeps the pause to deep queues: the sender can go on writing for the whole pause
//!   without running out of credit (the default of 2 credits, and `bench`'s 16 or 64, never
//!   pause: a pause there would leave the sender waiting for credit instead).
//! - A read that finds nothing, or that brings fewer messages, ends the stream: a ping-pong (one
//!   message per wake-up), a lone message and a busy-polling receiver (whose last read before it
//!   sleeps found nothing) never pause.
//! - One pause per sleep: the read after it decides again.
//!
//! What it costs: a message that arrives during a pause waits for it (at most `HOLD` plus the
//! kernel's timer slack, 50 µs by default), only while a stream runs into a queue of at least
//! `MIN_ROOM` credits. The first message after an idle period never waits.

use std::time::Duration;

/// Messages one draining read must bring to count as a running stream.
pub(crate) const STREAM_BATCH: usize = 2;
/// Receive slots that must be posted (room for the sender) before the receiver pauses.
pub(crate) const MIN_ROOM: usize = 256;
/// How long the receiver pauses before it sleeps while a stream runs.
pub(crate) const HOLD: Duration = Duration::from_micros(50);

/// Tracks what the receiver's reads found and decides whether to pause before a sleep.
#[derive(Debug, Default)]
pub(crate) struct ReceiveCoalescing {
    /// Messages completed by the reads since the last one that emptied the socket.
    since_drain: usize,
    /// Messages the last draining read cycle brought (0 after a read that found nothing).
    last_batch: usize,
}

impl ReceiveCoalescing {
    /// `n` messages completed from what a read brought.
    pub(crate) fn on_messages(&mut self, n: usize) {
        self.since_drain += n;
    }

    /// A read emptied the socket: the messages since the previous one are this cycle's batch.
    pub(crate) fn on_drained(&mut self) {
        self.last_batch = std::mem::take(&mut self.since_drain);
    }

    /// A read found the socket empty: whatever ran has paused.
    pub(crate) fn on_empty_read(&mut self) {
        self.since_drain = 0;
        self.last_batch = 0;
    }

    /// The receiver is about to sleep with `posted` receive slots posted: how long to pause
    /// first, if at all. Forgets the batch, so the next sleep pauses only after another.
    pub(crate) fn before_sleep(&mut self, posted: usize) -> Option<Duration> {
        let batch = std::mem::take(&mut self.last_batch);
        (batch >= STREAM_BATCH && posted >= MIN_ROOM).then_some(HOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after_a_draining_read_of(messages: usize) -> ReceiveCoalescing {
        let mut c = ReceiveCoalescing::default();
        c.on_messages(messages);
        c.on_drained();
        c
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
        c.on_messages(3);
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
        c.on_messages(1);
        c.on_messages(1);
        c.on_drained();
        assert_eq!(c.before_sleep(MIN_ROOM), Some(HOLD));
    }
}
