//! Deadline arithmetic, without a clock: the callers pass the time in (the session core never
//! reads the clock; the drivers, the listener and the bootstrap do).

use std::time::{Duration, Instant};

/// `now + d`, saturating far in the future instead of overflowing (`Instant + Duration` panics
/// on overflow; a caller may configure an enormous timeout).
pub(crate) fn deadline_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

/// The earlier of two optional deadlines.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// One clock reading shared by every event a driver handles between two waits, so that a hot
/// path that finds work ready reads no clock at all (under emulation a clock read is a system
/// call; a ping-pong or a stream pays it per message otherwise).
///
/// After a wait the driver primes it with the reading it took before that wait
/// ([`Stamp::prime`]), so a wait costs one clock read, not two; otherwise the reading is taken
/// at the first event. Either way it may be old by the time it is used, so it stamps only what
/// the core measures idleness from; before each wait the driver takes [`Stamp::take`] and,
/// when events were stamped, re-stamps the core with the time it reads then
/// ([`crate::session_core`]'s `restamp_*`), so no deadline is ever computed from an old
/// reading.
#[derive(Debug, Default)]
pub(crate) struct Stamp {
    reading: Option<Instant>,
    used: bool,
}

impl Stamp {
    /// The shared reading, taken now if there is none since the last wait.
    pub(crate) fn get(&mut self) -> Instant {
        self.used = true;
        *self.reading.get_or_insert_with(Instant::now)
    }

    /// After a wait: `before` (the reading taken just before it) is the shared reading until
    /// the next wait; nothing counts as stamped until [`Stamp::get`].
    pub(crate) fn prime(&mut self, before: Instant) {
        self.reading = Some(before);
    }

    /// Before a wait: whether anything was stamped since the last one (the reading is dropped).
    pub(crate) fn take(&mut self) -> bool {
        self.reading = None;
        std::mem::take(&mut self.used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primed_stamp_gives_the_reading_from_before_the_wait_and_counts_only_when_used() {
        let before = Instant::now() - Duration::from_millis(5);
        let mut stamp = Stamp::default();
        stamp.prime(before);
        assert!(!stamp.take(), "primed but unused: nothing was stamped");
        stamp.prime(before);
        assert_eq!(stamp.get(), before);
        assert_eq!(
            stamp.get(),
            before,
            "one reading for every event until the next wait"
        );
        assert!(stamp.take());
        assert!(!stamp.take(), "taking clears it");
    }

    #[test]
    fn an_unprimed_stamp_reads_the_clock_at_the_first_event() {
        let mut stamp = Stamp::default();
        let start = Instant::now();
        let first = stamp.get();
        assert!(first >= start);
        assert_eq!(stamp.get(), first);
        assert!(stamp.take());
        assert!(stamp.get() >= first, "a new reading after the wait");
    }
}
