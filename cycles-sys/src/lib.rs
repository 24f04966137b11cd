//! The CPU's cycle counter, read as perftest's `get_cycles` reads it: one instruction, no
//! system call, whatever the machine's clocksource.
//!
//! The count's rate is not known here and not assumed: callers time with it only between two
//! readings of the clock (`bench lat` shares a clock-timed block of round trips among them in
//! proportion to their cycles). Nor is the counter assumed to agree between CPUs: a caller must
//! cope with a reading lower than the one before (a thread moved to another CPU).
//!
//! This is a crate of its own because reading the counter goes through an `unsafe` intrinsic,
//! and rdma-container keeps `unsafe` to its sys crates and transport adapters.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

/// The cycle counter now: the time-stamp counter on x86_64, `None` on other architectures
/// (callers read the clock instead).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn read() -> Option<u64> {
    // SAFETY: RDTSC is part of the x86_64 baseline, so the instruction exists on every CPU
    // this code runs on; it reads a counter into registers and touches no memory. A process
    // that forbade itself the instruction (prctl PR_SET_TSC) would get SIGSEGV, which no
    // part of rdma-container asks for.
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

/// The cycle counter now: the time-stamp counter on x86_64, `None` on other architectures
/// (callers read the clock instead).
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn read() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_counter_advances_on_one_thread_over_a_millisecond() {
        let before = read().expect("x86_64 has a time-stamp counter");
        std::thread::sleep(std::time::Duration::from_millis(1));
        let after = read().expect("x86_64 has a time-stamp counter");
        // The thread may move to another CPU while it sleeps, whose counter may differ; a
        // millisecond is millions of cycles, far more than the skew of any synchronized pair.
        assert!(after > before, "{before} then {after}");
    }

    #[test]
    #[cfg(not(target_arch = "x86_64"))]
    fn there_is_no_counter_off_x86_64() {
        assert_eq!(read(), None);
    }
}
