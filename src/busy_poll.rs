//! Busy polling before a sleep: how the sender and the receiver drivers spin on the transport
//! for at most [`Config::busy_poll`](crate::Config::busy_poll) (the setting lives in the config).

use std::time::{Duration, Instant};

use crate::time::deadline_after;
use crate::transport::DeviceWork;

/// While busy polling, the drivers read the clock (and now and then the receiver its control
/// channel) once every `check_every` polling rounds; the rounds in between poll the transport
/// only. A round takes from tens of nanoseconds (a completion-queue read on a NIC) to about a
/// microsecond (under emulation, where a clock read is also a system call), so the interval
/// follows the limit: about one round per microsecond of it, between these bounds. The limit
/// is then overshot by a few percent on hardware and by about itself under emulation, and a
/// ping-pong's short waits (a few hundred rounds under emulation) read no clock at all: a
/// check every 128th round was two system calls per round trip there.
const CHECK_EVERY_MIN: u32 = 128;
/// See [`CHECK_EVERY_MIN`].
const CHECK_EVERY_MAX: u32 = 4096;

/// While busy polling, the receiver looks at its control channel (a system call) only every
/// this many clock checks: news there (a Reject, a close) is not urgent, and in a ping-pong
/// under emulation a look every check was two system calls per round trip.
const CONTROL_LOOK_EVERY: u32 = 8;

/// What a driver does after a polling round that found nothing (see [`BusyPoll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spin {
    /// Poll again at once.
    Again,
    /// Give the CPU away (`std::thread::yield_now`), then poll again: a software device's
    /// spin does every so many rounds ([`DeviceWork::yield_due`]).
    YieldThenAgain,
    /// Poll again at once; the clock was read (it is `now`).
    AgainChecked(Instant),
    /// Poll again at once; the clock was read (it is `now`), and this is also the round to
    /// look at what is checked only now and then (the receiver's control channel).
    AgainLookAround(Instant),
    /// Stop polling and sleep.
    Sleep,
}

/// Busy polling before a sleep, for at most [`Config::busy_poll`](crate::Config::busy_poll),
/// reading the clock only every so many rounds ([`CHECK_EVERY_MIN`]; a clock read is a system
/// call on some machines).
#[derive(Debug)]
pub(crate) struct BusyPoll {
    limit: Option<Duration>,
    until: Option<Instant>,
    /// Rounds left before the next clock check (a count down: no division per round).
    rounds_left: u32,
    checks: u32,
    check_every: u32,
    /// Rounds spun so far (wrapping).
    spun: u32,
    /// Where the polled device works: whether the spin gives its CPU away now and then.
    work: DeviceWork,
}

impl BusyPoll {
    /// Polling for at most `limit` (`None`: sleep at once) a data path whose device works
    /// where `work` says.
    pub(crate) fn new(limit: Option<Duration>, work: DeviceWork) -> Self {
        let check_every = check_every(limit);
        Self {
            limit,
            until: None,
            rounds_left: check_every,
            checks: 0,
            check_every,
            spun: 0,
            work,
        }
    }

    /// Called after each empty polling round: whether to poll again or sleep.
    pub(crate) fn next_round(&mut self) -> Spin {
        let Some(limit) = self.limit else {
            return Spin::Sleep;
        };
        self.rounds_left -= 1;
        self.spun = self.spun.wrapping_add(1);
        if self.rounds_left != 0 {
            if self.work.yield_due(self.spun) {
                return Spin::YieldThenAgain;
            }
            return Spin::Again;
        }
        self.rounds_left = self.check_every;
        let now = Instant::now();
        // Saturating: a limit as long as Duration::MAX polls "for ever", it does not overflow.
        let until = *self.until.get_or_insert_with(|| deadline_after(now, limit));
        if now >= until {
            return Spin::Sleep;
        }
        self.checks = self.checks.wrapping_add(1);
        if self.checks.is_multiple_of(CONTROL_LOOK_EVERY) {
            Spin::AgainLookAround(now)
        } else {
            Spin::AgainChecked(now)
        }
    }

    /// [`BusyPoll::next_round`], having given the CPU away where it said to: never
    /// [`Spin::YieldThenAgain`] (what both drivers' spins call).
    pub(crate) fn next_round_yielding(&mut self) -> Spin {
        match self.next_round() {
            Spin::YieldThenAgain => {
                std::thread::yield_now();
                Spin::Again
            }
            spin => spin,
        }
    }
}

/// The rounds between two clock checks for a spin of at most `limit` (see [`CHECK_EVERY_MIN`]).
fn check_every(limit: Option<Duration>) -> u32 {
    let micros = limit.map_or(0, |l| l.as_micros());
    u32::try_from(micros)
        .unwrap_or(u32::MAX)
        .clamp(CHECK_EVERY_MIN, CHECK_EVERY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_again_reading_the_clock_every_check_round_until_the_limit() {
        let hardware = DeviceWork::Elsewhere;
        assert_eq!(BusyPoll::new(None, hardware).next_round(), Spin::Sleep);
        let mut long = BusyPoll::new(Some(Duration::from_secs(3600)), hardware);
        let every = CHECK_EVERY_MAX;
        for _ in 1..every {
            assert_eq!(long.next_round(), Spin::Again);
        }
        assert!(matches!(long.next_round(), Spin::AgainChecked(_)));
        for check in 2..=CONTROL_LOOK_EVERY {
            for _ in 1..every {
                assert_eq!(long.next_round(), Spin::Again);
            }
            let spin = long.next_round();
            if check == CONTROL_LOOK_EVERY {
                assert!(matches!(spin, Spin::AgainLookAround(_)), "{spin:?}");
            } else {
                assert!(matches!(spin, Spin::AgainChecked(_)), "{spin:?}");
            }
        }
        let mut none_left = BusyPoll::new(Some(Duration::ZERO), hardware);
        for _ in 1..CHECK_EVERY_MIN {
            assert_eq!(none_left.next_round(), Spin::Again);
        }
        assert_eq!(none_left.next_round(), Spin::Sleep);
    }

    /// The rounds of a spin of `rounds` rounds at most that say [`Spin::YieldThenAgain`].
    fn yielding_rounds(poll: &mut BusyPoll, rounds: u32) -> Vec<u32> {
        (1..=rounds)
            .filter(|_| poll.next_round() == Spin::YieldThenAgain)
            .collect()
    }

    #[test]
    fn a_spin_on_a_software_device_yields_every_16th_round_but_a_clock_check() {
        let mut soft = BusyPoll::new(Some(Duration::from_secs(3600)), DeviceWork::HostThreads);
        let yielded = yielding_rounds(&mut soft, 3 * CHECK_EVERY_MAX);
        let expected: Vec<u32> = (1..=3 * CHECK_EVERY_MAX)
            .filter(|r| r.is_multiple_of(16) && !r.is_multiple_of(CHECK_EVERY_MAX))
            .collect();
        assert_eq!(yielded, expected, "a clock-check round checks instead");
        assert_eq!(yielded[..2], [16, 32]);
        // and the spin still ends at its limit
        let mut none_left = BusyPoll::new(Some(Duration::ZERO), DeviceWork::HostThreads);
        let rounds: Vec<Spin> = (0..CHECK_EVERY_MIN)
            .map(|_| none_left.next_round())
            .collect();
        assert_eq!(rounds.last(), Some(&Spin::Sleep));
        assert_eq!(
            rounds
                .iter()
                .filter(|s| **s == Spin::YieldThenAgain)
                .count(),
            (CHECK_EVERY_MIN / 16 - 1) as usize
        );
    }

    #[test]
    fn a_spin_on_a_hardware_device_never_yields() {
        let mut hard = BusyPoll::new(Some(Duration::from_secs(3600)), DeviceWork::Elsewhere);
        assert_eq!(
            yielding_rounds(&mut hard, 3 * CHECK_EVERY_MAX),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn a_software_device_without_busy_polling_sleeps_at_once() {
        assert_eq!(
            BusyPoll::new(None, DeviceWork::HostThreads).next_round(),
            Spin::Sleep
        );
    }

    #[test]
    fn the_clock_is_read_about_once_per_microsecond_of_the_limit_within_bounds() {
        let us = Duration::from_micros;
        assert_eq!(check_every(Some(us(4))), CHECK_EVERY_MIN);
        assert_eq!(check_every(Some(us(1000))), 1000);
        assert_eq!(check_every(Some(Duration::from_secs(1))), CHECK_EVERY_MAX);
        assert_eq!(check_every(Some(Duration::MAX)), CHECK_EVERY_MAX);
    }
}
