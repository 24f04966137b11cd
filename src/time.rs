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
/// The reading may be old by the time it is used (it is taken at the first event after a
/// wait), so it stamps only what the core measures idleness from; before each wait the driver
/// takes [`Stamp::take`] and, when events were stamped, re-stamps the core with the time it
/// reads then ([`crate::session_core`]'s `restamp_*`), so no deadline is ever computed from an
/// old reading.
#[derive(Debug, Default)]
pub(crate) struct Stamp(Option<Instant>);

impl Stamp {
    /// The shared reading, taken now if there is none since the last wait.
    pub(crate) fn get(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }

    /// Before a wait: whether anything was stamped since the last one (the reading is dropped).
    pub(crate) fn take(&mut self) -> bool {
        self.0.take().is_some()
    }
}
