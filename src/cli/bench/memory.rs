//! The benchmark's own message buffer: one message, filled once and sent again and again.
//!
//! Rules:
//! - A session's slots (credits x message size, on each end) are the library's: it checks them
//!   against the memory available, the address-space limit (`RLIMIT_AS`) and the cgroup's
//!   limit when the session is set up, and refuses with the figures (exit status 2).
//! - The buffer is allocated after its sessions are set up, so after their slots: it is checked
//!   here against the same limits (the library's `host::MemoryLimits`, read again, so against
//!   what is left), in the benchmark's own words, and allocated fallibly. A message size the
//!   memory cannot hold ends in an error that says so (exit status 2), never in an allocator
//!   abort or the OOM killer.

use anyhow::Result;
use rdma_container::host::{MemoryLimits, MemoryShortfall};

use crate::cli::UsageError;

/// A `size`-byte message of `fill` bytes, or an error naming the limit it does not fit.
pub fn message_buffer(size: usize, fill: u8) -> Result<Vec<u8>> {
    if let Some(line) = too_large(size as u64, &MemoryLimits::of_this_process()) {
        return Err(UsageError(line).into());
    }
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(size).map_err(|_| {
        UsageError(format!(
            "cannot allocate the benchmark's {size}-byte message buffer ({} MiB): lower -s",
            size >> 20
        ))
    })?;
    // Doubling copies (a memcpy each, fast in a debug build too, where a byte loop over 1 GiB
    // takes seconds); the capacity is already there.
    if size > 0 {
        buffer.push(fill);
    }
    while buffer.len() < size {
        let more = buffer.len().min(size - buffer.len());
        buffer.extend_from_within(..more);
    }
    Ok(buffer)
}

/// Why `bytes` more do not fit `limits`, as one line; `None` when they fit.
fn too_large(bytes: u64, limits: &MemoryLimits) -> Option<String> {
    let what = format!(
        "the benchmark's {bytes}-byte message buffer ({} MiB)",
        bytes >> 20
    );
    Some(match limits.shortfall(bytes)? {
        MemoryShortfall::Available { available } => format!(
            "{what} is more than the {} MiB of memory this machine has available after the \
sessions' slots: lower -s (or --credits)",
            available >> 20
        ),
        MemoryShortfall::AddressSpace { limit, used } => format!(
            "{what} does not fit the address-space limit (RLIMIT_AS, ulimit -v) of {} MiB, of \
which this process uses {} MiB: lower -s (or --credits), or raise the limit",
            limit >> 20,
            used >> 20
        ),
        MemoryShortfall::Cgroup { limit, used } => format!(
            "{what} does not fit the memory limit of this container (cgroup: {} MiB, of which \
{} MiB are in use): lower -s (or --credits), or raise the pod's limits.memory",
            limit >> 20,
            used >> 20
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_buffer_that_fits_every_limit_is_allocated_and_filled() {
        assert_eq!(too_large(MIB, &MemoryLimits::default()), None);
        let limits = MemoryLimits {
            available: Some(100 * MIB),
            address_space: Some((1024 * MIB, 900 * MIB)),
            cgroup: Some((512 * MIB, 400 * MIB)),
        };
        assert_eq!(too_large(100 * MIB, &limits), None);
        let buffer = message_buffer(4096, 0x5a).unwrap();
        assert!(buffer.len() == 4096 && buffer.iter().all(|&b| b == 0x5a));
    }

    #[test]
    fn a_buffer_beyond_a_limit_is_refused_naming_it() {
        let gib = 1024 * MIB;
        let available = MemoryLimits {
            available: Some(512 * MIB),
            ..MemoryLimits::default()
        };
        let line = too_large(gib, &available).unwrap();
        assert!(
            line.contains("1024 MiB") && line.contains("512 MiB"),
            "{line}"
        );
        let address_space = MemoryLimits {
            address_space: Some((2 * gib, gib + MIB)),
            ..MemoryLimits::default()
        };
        let line = too_large(gib, &address_space).unwrap();
        assert!(
            line.contains("RLIMIT_AS") && line.contains("lower -s"),
            "{line}"
        );
        let cgroup = MemoryLimits {
            cgroup: Some((gib, 10 * MIB)),
            ..MemoryLimits::default()
        };
        assert!(too_large(gib, &cgroup)
            .unwrap()
            .contains("cgroup: 1024 MiB"));
        // Refused before any allocation: no abort, whatever this machine has.
        let err = message_buffer(usize::MAX, 0).unwrap_err();
        assert!(err.is::<UsageError>(), "{err}");
    }
}
