//! Timing each round trip of `bench lat` without a clock read per round trip.
//!
//! Rules:
//! - Each round trip ends with one reading of the CPU's cycle counter (`cycles_sys::read`),
//!   as each of perftest's iterations ends with one `get_cycles`.
//! - With a counter, the clock is read once per block of [`BLOCK`] round trips, between two
//!   counter readings:
//!   the one that ended the block's last round trip and one taken right after the clock. The
//!   clock read, and the caller's bookkeeping after it, belong to no round trip: the next
//!   block's first round trip starts at a counter reading taken after them ([`Laps::resume`];
//!   perftest reads no clock while it times).
//! - A block's round trips are converted to nanoseconds at the counter's rate over that block:
//!   the clock time between its two clock readings over the counter's ticks between them. A
//!   clock reading is placed half the fastest clock read so far after the counter reading
//!   before it ([`Laps::place`]). So a run's round trips add up to its clock time less the
//!   clock reads and the bookkeeping.
//! - The counter's rate is never assumed (a VM's counter may tick at another rate than the
//!   guest kernel believes, and a counter that is not invariant changes rate with the CPU's
//!   frequency); only its steadiness within one block is.
//! - A block whose clock readings have no place on the counter (it ran backwards across a
//!   read) shares its clock time among its round trips in proportion to their cycles; one
//!   whose counter ran backwards within a round trip (the thread moved to a CPU whose counter
//!   is behind), or stood still over the whole block, shares it equally.
//! - Without a counter (architectures other than x86_64 and aarch64), a block is one round
//!   trip: the clock is read every round trip, and each round trip is the time between two
//!   clock readings.
//!
//! Why: under emulation a clock read can be a system call, and the read on every round trip
//! was the only system call `bench lat` made that `ib_send_lat` does not (the soft-RoCE VM's
//! `SOFTROCE-LAT-SYSCALLS` lines); the read once a block, charged to the block's first round
//! trip, still lifted one round trip in [`BLOCK`] by a system call.

use std::time::Instant;

/// Round trips per clock reading when there is a cycle counter.
pub const BLOCK: usize = 16;

/// A clock reading and where on the counter it lies.
#[derive(Debug, Clone, Copy)]
struct ClockMark {
    clock: Instant,
    /// The counter's value at the clock reading (see [`Laps::place`]); `None` without a
    /// counter, or when the counter ran backwards across the read.
    at: Option<u64>,
}

/// The round trips of the block under way, and where it started.
#[derive(Debug)]
pub struct Laps {
    block_start: ClockMark,
    /// The counter at the end of the last round trip (or where the next one starts).
    last_cycles: Option<u64>,
    /// Each round trip's cycles in this block; `None` for one whose counter ran backwards.
    cycles: Vec<Option<u64>>,
    /// Round trips per block: [`BLOCK`], or 1 without a counter.
    block: usize,
    /// The fewest ticks a clock read has taken so far (counter before to counter after).
    fastest_read: Option<u64>,
    /// Over the blocks converted at a measured rate: their counter ticks and clock nanoseconds.
    rated_cycles: u128,
    rated_ns: u128,
}

impl Laps {
    /// Starts the first block at clock reading `now`, taken at counter reading `cycles`
    /// (`None` without a counter); the first round trip starts there too. (A run starts
    /// between two counter readings: [`Laps::start_between`].)
    #[cfg(test)]
    pub fn start(now: Instant, cycles: Option<u64>) -> Self {
        let mut laps = Self::start_between(None, now, cycles);
        laps.block_start.at = cycles;
        laps
    }

    /// Starts the first block at clock reading `now`, taken between counter readings `before`
    /// and `after`; the first round trip starts at `after`.
    pub fn start_between(before: Option<u64>, now: Instant, after: Option<u64>) -> Self {
        let block = if after.is_some() { BLOCK } else { 1 };
        let mut laps = Self {
            block_start: ClockMark {
                clock: now,
                at: None,
            },
            last_cycles: after,
            cycles: Vec::with_capacity(block),
            block,
            fastest_read: None,
            rated_cycles: 0,
            rated_ns: 0,
        };
        laps.block_start.at = laps.place(before, after);
        laps
    }

    /// Where on the counter a clock reading taken between counter readings `before` and
    /// `after` lies: half the fastest read so far after `before`. Not midway between the
    /// two: a thread preempted on its way out of the clock's system call, after the clock was
    /// sampled, would move the reading by half the stall, and a whole block's rate with it.
    fn place(&mut self, before: Option<u64>, after: Option<u64>) -> Option<u64> {
        let (before, after) = (before?, after?);
        let read = after.checked_sub(before)?;
        let fastest = self.fastest_read.map_or(read, |f| f.min(read));
        self.fastest_read = Some(fastest);
        Some(before + fastest / 2)
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

    /// Ends the block at clock reading `now`, with the counter read right after it
    /// (`cycles_after`): gives each of its round trips' durations in nanoseconds to `each`, in
    /// order, and starts the next block there. The next round trip starts at `cycles_after`,
    /// or where [`Laps::resume`] says.
    pub fn close(&mut self, now: Instant, cycles_after: Option<u64>, mut each: impl FnMut(u64)) {
        let end = ClockMark {
            clock: now,
            at: self.place(self.last_cycles, cycles_after),
        };
        let block_ns = now
            .saturating_duration_since(self.block_start.clock)
            .as_nanos();
        let trips = self.cycles.len() as u128;
        let counted: Option<u128> = self
            .cycles
            .iter()
            .try_fold(0u128, |sum, c| c.map(|c| sum + u128::from(c)))
            .filter(|&total| total > 0);
        // Ticks between the clock readings; never fewer than the round trips' own.
        let span = match (self.block_start.at, end.at) {
            (Some(start), Some(end)) => end.checked_sub(start).map(u128::from),
            _ => None,
        };
        match (counted, span) {
            (Some(total), Some(span)) if span >= total => {
                self.rated_cycles += span;
                self.rated_ns += block_ns;
                self.share(block_ns, span, &mut each);
            }
            // The clock's place is unknown: the round trips share the block's clock time.
            (Some(total), _) => self.share(block_ns, total, &mut each),
            _ if trips > 0 => {
                let share = u64::try_from(block_ns / trips).unwrap_or(u64::MAX);
                self.cycles.iter().for_each(|_| each(share));
            }
            _ => {}
        }
        self.cycles.clear();
        self.block_start = end;
        self.last_cycles = cycles_after;
    }

    /// Gives each round trip of the block its cycles' part of `block_ns` over `ticks`.
    fn share(&self, block_ns: u128, ticks: u128, each: &mut impl FnMut(u64)) {
        for c in self.cycles.iter().flatten() {
            each(u64::try_from(block_ns * u128::from(*c) / ticks).unwrap_or(u64::MAX));
        }
    }

    /// The next round trip starts at counter reading `cycles`: what ran since the last one
    /// ended (the caller's bookkeeping after a [`Laps::close`]) belongs to none.
    pub fn resume(&mut self, cycles: Option<u64>) {
        self.last_cycles = cycles;
    }

    /// Starts a new block at clock reading `now`, taken between counter readings `before` and
    /// `after`, forgetting the round trips not yet closed (time spent outside the round trips,
    /// such as printing a report row, is not theirs); the next round trip starts at `after`.
    pub fn restart(&mut self, before: Option<u64>, now: Instant, after: Option<u64>) {
        self.cycles.clear();
        self.block_start = ClockMark {
            clock: now,
            at: self.place(before, after),
        };
        self.last_cycles = after;
    }

    /// The counter's ticks per microsecond of the clock over the blocks converted at a
    /// measured rate so far (`None` before the first, or without a counter).
    pub fn counter_mhz(&self) -> Option<f64> {
        (self.rated_ns > 0 && self.rated_cycles > 0)
            .then(|| self.rated_cycles as f64 * 1_000.0 / self.rated_ns as f64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Closes the block with a clock read that took no counter ticks.
    fn closed(laps: &mut Laps, now: Instant) -> Vec<u64> {
        let after = laps.last_cycles;
        closed_after(laps, now, after)
    }

    /// Closes the block with the counter read `after` right after the clock.
    fn closed_after(laps: &mut Laps, now: Instant, after: Option<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        laps.close(now, after, |ns| out.push(ns));
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
        assert_eq!(laps.counter_mhz(), None);
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
        laps.restart(Some(1_000_000), t1, Some(1_000_000));
        assert!(!laps.is_pending());
        laps.lap(Some(1_000_100));
        assert_eq!(
            closed(&mut laps, t1 + Duration::from_micros(3)),
            vec![3_000]
        );
    }

    /// One tick a microsecond: a block of round trips of 100 ticks from `counter`, then a
    /// clock read of 200 ticks sampled halfway through, after which the thread waits `stall`
    /// ticks more before it leaves the read; returns the block's round trips.
    fn block_then_read(laps: &mut Laps, t0: Instant, counter: &mut u64, stall: u64) -> Vec<u64> {
        for _ in 0..BLOCK {
            *counter += 100;
            laps.lap(Some(*counter));
        }
        let now = t0 + Duration::from_micros(*counter + 100);
        *counter += 200 + stall;
        closed_after(laps, now, Some(*counter))
    }

    #[test]
    fn a_clock_read_belongs_to_no_round_trip() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let mut counter = 0u64;
        for block in 0..3 {
            let times = block_then_read(&mut laps, t0, &mut counter, 0);
            assert_eq!(times, vec![100_000; BLOCK], "block {block}");
            assert_eq!(laps.counter_mhz(), Some(1.0), "block {block}");
        }
    }

    #[test]
    fn a_run_starts_where_its_first_clock_reading_lies_between_two_counter_readings() {
        // The first clock read takes 200 ticks (a microsecond each), sampled halfway.
        let t0 = Instant::now();
        let mut laps = Laps::start_between(Some(0), t0, Some(200));
        let mut counter = 200u64;
        let times = block_then_read(&mut laps, t0 - Duration::from_micros(100), &mut counter, 0);
        assert_eq!(times, vec![100_000; BLOCK]);
    }

    #[test]
    fn a_restart_stalled_after_its_clock_read_moves_no_round_trip() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let mut counter = 0u64;
        block_then_read(&mut laps, t0, &mut counter, 0);
        // A report row takes 5,000 ticks; then the restart's clock read, sampled 100 ticks in,
        // whose thread waits 10,000 ticks more before it leaves the system call.
        counter += 5_000;
        let before = counter;
        let now = t0 + Duration::from_micros(before + 100);
        counter += 200 + 10_000;
        laps.restart(Some(before), now, Some(counter));
        let times = block_then_read(&mut laps, t0, &mut counter, 0);
        assert_eq!(times, vec![100_000; BLOCK]);
    }

    #[test]
    fn a_stall_after_the_clock_was_read_moves_no_round_trip() {
        // The second read's thread waits 10,000 ticks before it can leave the system call.
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let mut counter = 0u64;
        for stall in [0, 10_000, 0] {
            let times = block_then_read(&mut laps, t0, &mut counter, stall);
            assert_eq!(times, vec![100_000; BLOCK], "the block before {stall}");
        }
        assert_eq!(laps.counter_mhz(), Some(1.0));
    }

    #[test]
    fn what_the_caller_does_after_the_clock_read_belongs_to_no_round_trip() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let mut counter = 0u64;
        for _ in 0..2 {
            let times = block_then_read(&mut laps, t0, &mut counter, 0);
            assert_eq!(times, vec![100_000; BLOCK]);
            // Bookkeeping: 500 ticks before the next round trip starts.
            counter += 500;
            laps.resume(Some(counter));
        }
    }

    #[test]
    fn a_counter_that_runs_backwards_across_the_clock_read_shares_by_cycles_and_rates_nothing() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        for i in 1..=BLOCK as u64 {
            laps.lap(Some(if i == 1 { 300 } else { 300 + 100 * (i - 1) }));
        }
        // 1,800 ticks of round trips, 3.6 ms on the clock; the read after is behind.
        let times = closed_after(&mut laps, t0 + Duration::from_micros(3_600), Some(5));
        assert_eq!(times[0], 600_000);
        assert!(times[1..].iter().all(|&t| t == 200_000), "{times:?}");
        assert_eq!(laps.counter_mhz(), None);
    }

    #[test]
    fn the_round_trips_of_a_run_add_up_to_its_clock_time_less_the_clock_reads() {
        let t0 = Instant::now();
        let mut laps = Laps::start(t0, Some(0));
        let (mut counter, mut total, mut reads) = (0u64, 0u64, 0u64);
        let per_read = 40u64;
        for i in 0..(3 * BLOCK + 5) as u64 {
            counter += 97 + (i * 31) % 50;
            if laps.lap(Some(counter)) {
                // One tick a nanosecond; the clock is read halfway through its 40 ticks.
                let now = t0 + Duration::from_nanos(counter + per_read / 2);
                counter += per_read;
                reads += 1;
                laps.close(now, Some(counter), |ns| total += ns);
            }
        }
        let now = t0 + Duration::from_nanos(counter + per_read / 2);
        laps.close(now, Some(counter + per_read), |ns| total += ns);
        let clock = now.duration_since(t0).as_nanos() as u64;
        let outside = reads * per_read + per_read / 2;
        // Each share rounds down by under a nanosecond.
        let trips = (3 * BLOCK + 5) as u64;
        assert!(
            total <= clock - outside,
            "{total} of {clock} less {outside}"
        );
        assert!(
            clock - outside - total < trips,
            "{total} of {clock} less {outside}"
        );
    }
}
