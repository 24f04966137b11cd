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
