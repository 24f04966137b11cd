//! Timing each round trip of `bench lat` without a clock read per round trip.
//!
//! Rules:
//! - Each round trip ends with one reading of the CPU's cycle counter (`cycles_sys::read`),
//!   as each of perftest's iterations ends with one `get_cycles`.
//! - The clock is read once per block of [`BLOCK`] round trips. A block's clock time is shared
//!   among its round trips in proportion to their cycles, so the round trips of a run add up
//!   to the run's clock time exactly. The counter's rate is never assumed (a VM's counter may
//!   tick at another rate than the guest kernel believes, and a counter that is not invariant
//!   changes rate with the CPU's frequency); only its steadiness within one block is.
//! - A block whose counter ran backwards or stood still (the thread moved to a CPU whose
//!   counter is behind, or there is no counter) shares its time equally.
//! - Without a counter (not x86_64), a block is one round trip: the clock is read every round
//!   trip, as before.
//!
//! Why: under emulation a clock read can be a system call, and the read on every round trip
//! was the only system call `bench lat` made that `ib_send_lat` does not (the soft-RoCE VM's
//! `SOFTROCE-LAT-SYSCALLS` lines).

use std::time::Instant;

/// Round trips per clock reading when there is a cycle counter.
pub const BLOCK: usize = 16;

/// The round trips of the block under way, and where it started.
#[derive(Debug)]
pub struct Laps {
    block_start: Instant,
    /// The counter at the end of the last round trip (or at the block's start).
    last_cycles: Option<u64>,
    /// Each round trip's cycles in this block; `None` for one whose counter ran backwards.
    cycles: Vec<Option<u64>>,
    /// Round trips per block: [`BLOCK`], or 1 without a counter.
    block: usize,
}

impl Laps {
    /// Starts the first block at clock reading `now` and counter reading `cycles`.
    pub fn start(now: Instant, cycles: Option<u64>) -> Self {
        let block = if cycles.is_some() { BLOCK } else { 1 };
        Self {
            block_start: now,
            last_cycles: cycles,
            cycles: Vec::with_capacity(block),
            block,
        }
    }

    /// A round trip ended with counter reading `cycles`; returns whether the block is full (the
    /// caller then reads the clock and calls [`Laps::close`]).
    pub fn lap(&mut self, cycles: Option<u64>) -> bool {
        let spent = match (self.last_cycles, cycles) {
            (Some(before), Some(after)) => after.checked_sub(before),
            _ => None,
        };
        self.last_cycles = cycles;
        self.cycles.push(spent);
        self.cycles.len() >= self.block
    }

    /// Whether round trips are waiting for the clock (the run ended inside a block).
    pub fn is_pending(&self) -> bool {
        !self.cycles.is_empty()
    }

    /// Ends the block at clock reading `now`: gives each of its round trips' durations in
    /// nanoseconds to `each`, in order, and starts the next block at `now`.
    pub fn close(&mut self, now: Instant, mut each: impl FnMut(u64)) {
        let block_ns = now.saturating_duration_since(self.block_start).as_nanos();
        let trips = self.cycles.len() as u128;
        let counted: Option<u128> = self
            .cycles
            .iter()
            .try_fold(0u128, |sum, c| c.map(|c| sum + u128::from(c)));
        match counted.filter(|&total| total > 0) {
            Some(total) => {
                for c in self.cycles.iter().flatten() {
                    each(u64::try_from(block_ns * u128::from(*c) / total).unwrap_or(u64::MAX));
                }
            }
            None if trips > 0 => {
                let share = u64::try_from(block_ns / trips).unwrap_or(u64::MAX);
                self.cycles.iter().for_each(|_| each(share));
            }
            None => {}
        }
        self.cycles.clear();
        self.block_start = now;
    }

    /// Starts a new block at `now` and `cycles`, forgetting the round trips not yet closed
    /// (time spent outside the round trips, such as printing a report row, is not theirs).
    pub fn restart(&mut self, now: Instant, cycles: Option<u64>) {
        self.cycles.clear();
        self.block_start = now;
        self.last_cycles = cycles;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn closed(laps: &mut Laps, now: Instant) -> Vec<u64> {
        let mut out = Vec::new();
        laps.close(now, |ns| out.push(ns));
        out
    }

    #[test]
    fn a_block_shares_its_clock_time_in_proportion_to_each_round_trips_cycles() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(1_000));
        // Cycles per round trip: 100, 300, 100, 100, ... (16 in all, 1,800 cycles).
        let mut counter = 1_000;
        for i in 0..BLOCK {
            counter += if i == 1 { 300 } else { 100 };
            let full = laps.lap(Some(counter));
            assert_eq!(full, i == BLOCK - 1, "round trip {i}");
        }
        let times = closed(&mut laps, t0 + Duration::from_micros(1_800));
        assert_eq!(times.len(), BLOCK);
        assert_eq!(times[0], 100_000);
        assert_eq!(times[1], 300_000);
        assert!(times[2..].iter().all(|&t| t == 100_000), "{times:?}");
    }

    #[test]
    fn the_counters_rate_does_not_matter_only_the_clock_does() {
        // Two blocks of equal round trips, the counter ticking ten times faster in the second
        // (another rate than the kernel believes, or a frequency change): the same times.
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let mut counter = 0;
        for tick in [10, 100] {
            for _ in 0..BLOCK {
                counter += tick;
                laps.lap(Some(counter));
            }
            let end = t0 + Duration::from_micros(160 * if tick == 10 { 1 } else { 2 });
            assert_eq!(closed(&mut laps, end), vec![10_000; BLOCK]);
        }
    }

    #[test]
    fn a_counter_that_runs_backwards_in_a_block_shares_its_time_equally() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(5_000));
        let mut readings = vec![5_100, 5_200, 1_000]; // moved to a CPU whose counter is behind
        readings.extend((1..=BLOCK as u64 - 3).map(|i| 1_000 + 100 * i));
        for r in readings {
            laps.lap(Some(r));
        }
        assert_eq!(
            closed(&mut laps, t0 + Duration::from_micros(32)),
            vec![2_000; BLOCK]
        );
    }

    #[test]
    fn a_counter_that_stands_still_shares_the_time_equally() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(7));
        for _ in 0..BLOCK {
            laps.lap(Some(7));
        }
        assert_eq!(
            closed(&mut laps, t0 + Duration::from_micros(16)),
            vec![1_000; BLOCK]
        );
    }

    #[test]
    fn without_a_counter_every_round_trip_is_timed_by_the_clock() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, None);
        assert!(laps.lap(None), "a block of one");
        assert_eq!(
            closed(&mut laps, t0 + Duration::from_micros(5)),
            vec![5_000]
        );
        assert!(laps.lap(None));
        assert_eq!(
            closed(&mut laps, t0 + Duration::from_micros(12)),
            vec![7_000]
        );
    }

    #[test]
    fn a_run_that_ends_inside_a_block_closes_it_with_what_it_has() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        for c in [100, 400] {
            assert!(!laps.lap(Some(c)));
        }
        assert!(laps.is_pending());
        assert_eq!(
            closed(&mut laps, t0 + Duration::from_micros(4)),
            vec![1_000, 3_000]
        );
        assert!(!laps.is_pending());
    }

    #[test]
    fn a_restart_leaves_out_the_time_and_round_trips_before_it() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        laps.lap(Some(100));
        // A report row is printed; the block starts again after it.
        let t1 = t0 + Duration::from_millis(50);
        laps.restart(t1, Some(1_000_000));
        assert!(!laps.is_pending());
        laps.lap(Some(1_000_100));
        assert_eq!(
            closed(&mut laps, t1 + Duration::from_micros(3)),
            vec![3_000]
        );
    }

    #[test]
    fn the_round_trips_of_a_run_add_up_to_its_clock_time() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let (mut counter, mut total, mut now) = (0u64, 0u64, t0);
        for i in 0..(3 * BLOCK + 5) as u64 {
            counter += 97 + (i * 31) % 50;
            if laps.lap(Some(counter)) {
                now += Duration::from_micros(1_000 + i);
                laps.close(now, |ns| total += ns);
            }
        }
        now += Duration::from_micros(300);
        laps.close(now, |ns| total += ns);
        let clock = now.duration_since(t0).as_nanos() as u64;
        // Each share rounds down by under a nanosecond.
        assert!(clock - total < (3 * BLOCK + 5) as u64, "{total} of {clock}");
    }
}
