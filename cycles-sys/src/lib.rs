//! The CPU's cycle counter, read as perftest's `get_cycles` reads it: one instruction, no
//! system call, whatever the machine's clocksource.
//!
//! The count's rate is not known here and not assumed: callers time with it only between two
//! readings of the clock (`bench lat` converts a block of round trips at the rate the counter
//! ran against the clock over that block). Nor is the counter assumed to agree between CPUs: a caller must
//! cope with a reading lower than the one before (a thread moved to another CPU).
//!
//! This is a crate of its own because reading the counter goes through an `unsafe` intrinsic,
//! and rdma-container keeps `unsafe` to its sys crates and transport adapters.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

/// The cycle counter now: the time-stamp counter on x86_64, the virtual count (`CNTVCT_EL0`)
/// on aarch64, `None` on other architectures (callers read the clock instead).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn read() -> Option<u64> {
    // SAFETY: RDTSC is part of the x86_64 baseline, so the instruction exists on every CPU
    // this code runs on; it reads a counter into registers and touches no memory. A process
    // that forbade itself the instruction (prctl PR_SET_TSC) would get SIGSEGV, which no
    // part of rdma-container asks for.
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

/// The cycle counter now: the virtual count of the generic timer, `CNTVCT_EL0`, as perftest
/// reads it on aarch64 (an `isb` first, so that the reading is not taken ahead of the code
/// before it).
#[cfg(target_arch = "aarch64")]
#[inline]
pub fn read() -> Option<u64> {
    let count: u64;
    // SAFETY: Linux lets EL0 read CNTVCT_EL0 (CNTKCTL_EL1.EL0VCTEN is set by the kernel on
    // every aarch64 system it runs on, the vDSO's clock relies on it); `isb` and `mrs` touch
    // no memory and only the named output register.
    unsafe {
        core::arch::asm!("isb", "mrs {count}, cntvct_el0", count = out(reg) count,
                         options(nomem, nostack, preserves_flags));
    }
    Some(count)
}

/// The cycle counter now: `None` on architectures without one here (callers read the clock
/// instead).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[inline]
pub fn read() -> Option<u64> {
    None
}

/// The counter's rate in counts per second where the hardware states it: `CNTFRQ_EL0` on
/// aarch64 (set by the firmware; often 25 MHz to 1 GHz). `None` on x86_64, whose time-stamp
/// counter has no architectural register for its rate, and where there is no counter.
/// Informational: callers time with [`read`] only between two readings of the clock.
#[cfg(target_arch = "aarch64")]
pub fn frequency_hz() -> Option<u64> {
    let hz: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL0 wherever CNTVCT_EL0 is (see `read`); `mrs`
    // touches no memory and only the named output register.
    unsafe {
        core::arch::asm!("mrs {hz}, cntfrq_el0", hz = out(reg) hz,
                         options(nomem, nostack, preserves_flags));
    }
    (hz != 0).then_some(hz)
}

/// The counter's rate: not stated by the hardware here (see the aarch64 version).
#[cfg(not(target_arch = "aarch64"))]
pub fn frequency_hz() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn the_counter_advances_on_one_thread_over_a_millisecond() {
        let before = read().expect("x86_64 and aarch64 have a cycle counter");
        std::thread::sleep(std::time::Duration::from_millis(1));
        let after = read().expect("x86_64 and aarch64 have a cycle counter");
        // The thread may move to another CPU while it sleeps, whose counter may differ; a
        // millisecond is millions of cycles, far more than the skew of any synchronized pair.
        assert!(after > before, "{before} then {after}");
    }

    /// The counter runs at the rate CNTFRQ_EL0 states: over 50 ms of the monotonic clock it
    /// advances by that rate times the time, within a wide margin (a loaded host, an emulator
    /// that scales its virtual count).
    #[test]
    #[cfg(target_arch = "aarch64")]
    fn the_aarch64_counter_runs_at_its_stated_frequency() {
        let hz = frequency_hz().expect("CNTFRQ_EL0 is set");
        let (t0, c0) = (std::time::Instant::now(), read().unwrap_or_default());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (t1, c1) = (std::time::Instant::now(), read().unwrap_or_default());
        let expected = hz as f64 * (t1 - t0).as_secs_f64();
        let ratio = c1.wrapping_sub(c0) as f64 / expected;
        assert!(
            (0.5..2.0).contains(&ratio),
            "{hz} Hz stated, counted {ratio:.3} of it"
        );
    }

    #[test]
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn there_is_no_counter_off_x86_64_and_aarch64() {
        assert_eq!(read(), None);
    }

    #[test]
    #[cfg(not(target_arch = "aarch64"))]
    fn only_aarch64_states_the_rate() {
        assert_eq!(frequency_hz(), None);
    }
}
