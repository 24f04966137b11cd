//! Busy polling before a sleep: how the sender and the receiver drivers spin on the transport
//! for at most [`Config::busy_poll`](crate::Config::busy_poll) (the setting lives in the config).

use std::time::{Duration, Instant};

use crate::time::deadline_after;

/// While busy polling, the drivers read the clock (and the receiver the control channel) once
/// every this many polling rounds; the rounds in between poll the transport only. On a NIC a
/// round is a completion-queue read in user space (tens of nanoseconds), so 128 rounds are a
/// few microseconds; where a clock read is a system call (a VM without a usable TSC) a check
/// every 16th round took a large share of the spin and delayed noticing an arrival.
const SPIN_CHECK_EVERY: u32 = 128;

/// What a driver does after a polling round that found nothing (see [`BusyPoll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spin {
    /// Poll again at once.
    Again,
    /// Poll again at once; the clock was read (it is `now`), so this is also the round to look
    /// at anything checked only now and then (the receiver's control channel).
    AgainChecked(Instant),
    /// Stop polling and sleep.
    Sleep,
}

/// Busy polling before a sleep, for at most [`Config::busy_poll`](crate::Config::busy_poll),
/// reading the clock only every [`SPIN_CHECK_EVERY`] rounds (a clock read is a system call on
/// some machines).
#[derive(Debug)]
pub(crate) struct BusyPoll {
    limit: Option<Duration>,
    until: Option<Instant>,
    rounds: u32,
}

impl BusyPoll {
    /// Polling for at most `limit` (`None`: sleep at once).
    pub(crate) fn new(limit: Option<Duration>) -> Self {
        Self {
            limit,
            until: None,
            rounds: 0,
        }
    }

    /// Called after each empty polling round: whether to poll again or sleep.
    pub(crate) fn next_round(&mut self) -> Spin {
        let Some(limit) = self.limit else {
            return Spin::Sleep;
        };
        self.rounds = self.rounds.wrapping_add(1);
        if !self.rounds.is_multiple_of(SPIN_CHECK_EVERY) {
            return Spin::Again;
        }
        let now = Instant::now();
        // Saturating: a limit as long as Duration::MAX polls "for ever", it does not overflow.
        let until = *self.until.get_or_insert_with(|| deadline_after(now, limit));
        if now < until {
            Spin::AgainChecked(now)
        } else {
            Spin::Sleep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_again_reading_the_clock_every_check_round_until_the_limit() {
        assert_eq!(BusyPoll::new(None).next_round(), Spin::Sleep);
        let mut long = BusyPoll::new(Some(Duration::from_secs(3600)));
        for _ in 1..SPIN_CHECK_EVERY {
            assert_eq!(long.next_round(), Spin::Again);
        }
        assert!(matches!(long.next_round(), Spin::AgainChecked(_)));
        let mut none_left = BusyPoll::new(Some(Duration::ZERO));
        for _ in 1..SPIN_CHECK_EVERY {
            assert_eq!(none_left.next_round(), Spin::Again);
        }
        assert_eq!(none_left.next_round(), Spin::Sleep);
    }
}
