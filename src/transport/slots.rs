//! Memory shared by the RDMA transports: one buffer of equal slots, registered once.

use crate::roce::DeviceChoice;
use crate::{Error, Result};

use super::SetupParams;

/// `count` slots of `size` bytes in one contiguous, never reallocated buffer.
pub(crate) struct SlotMemory {
    bytes: Vec<u8>,
    count: usize,
    size: usize,
    /// Set by [`SlotMemory::free_only_when`]: the buffer is freed on drop only if this says
    /// the device let go of it, and leaked otherwise.
    released: Option<Box<dyn Fn() -> bool + Send + Sync>>,
}

impl std::fmt::Debug for SlotMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotMemory")
            .field("count", &self.count)
            .field("size", &self.size)
            .field("freed_only_when_released", &self.released.is_some())
            .finish()
    }
}

/// Checks that `count` slots of `size` bytes can be had before anything is allocated, so that
/// a large `--credits` x `--max-msg-size` ends in an error that names both, never in an
/// allocation failure (an abort) or the OOM killer: the total must fit in the memory the machine
/// has available, and memory that will be registered (`pinned`) must fit in the memlock limit
/// unless CAP_IPC_LOCK lifts it. Returns the total in bytes.
pub(crate) fn check_slot_memory(count: usize, size: usize, pinned: bool) -> Result<usize> {
    let total = count
        .checked_mul(size)
        .ok_or_else(|| Error::InvalidConfig(format!("{count} slots of {size} bytes overflow")))?;
    let what = || format!("{count} slots of {size} bytes ({} MiB)", total >> 20);
    if let Some(available) = mem_available() {
        if total as u64 > available {
            return Err(Error::InvalidConfig(format!(
                "{} are more than the {} MiB of memory this machine has available: lower \
--credits or --max-msg-size",
                what(),
                available >> 20
            )));
        }
    }
    if pinned && crate::doctor::has_cap_ipc_lock() != Some(true) {
        if let Some(limit) = crate::doctor::memlock_limit() {
            if total as u64 > limit {
                return Err(Error::InvalidConfig(format!(
                    "{} cannot be registered: the memlock limit is {} KiB and CAP_IPC_LOCK is not \
in effect; lower --credits or --max-msg-size, or raise the limit (in a container: \
--cap-add=IPC_LOCK or --ulimit memlock=-1; on a host: root or ulimit -l)",
                    what(),
                    limit >> 10
                )));
            }
        }
    }
    Ok(total)
}

/// `MemAvailable` from /proc/meminfo, in bytes (`None` where it cannot be read).
fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

impl SlotMemory {
    /// Allocates the slots for registration (zeroed; at least one byte, so the buffer always has
    /// an address), after [`check_slot_memory`].
    pub(crate) fn new(count: usize, size: usize) -> Result<Self> {
        let total = check_slot_memory(count, size, true)?;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(total.max(1)).map_err(|_| {
            Error::InvalidConfig(format!(
                "cannot allocate {count} slots of {size} bytes: lower --credits or --max-msg-size"
            ))
        })?;
        bytes.resize(total.max(1), 0);
        Ok(Self {
            bytes,
            count,
            size,
            released: None,
        })
    }

    /// From now on, frees the buffer on drop only if `released` then says the device no
    /// longer uses it (a memory region over it was deregistered), and leaks it otherwise: a
    /// device that might still write into it must never write into memory given back.
    pub(crate) fn free_only_when(&mut self, released: impl Fn() -> bool + Send + Sync + 'static) {
        self.released = Some(Box::new(released));
    }

    /// Whether dropping now must leak the buffer (see [`SlotMemory::free_only_when`]).
    fn must_leak(&self) -> bool {
        self.released.as_ref().is_some_and(|released| !released())
    }

    /// Number of slots.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Bytes per slot.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The first `len` bytes of slot `i` (clamped to the slot).
    pub(crate) fn slot(&self, i: usize, len: usize) -> &[u8] {
        let start = i * self.size;
        &self.bytes[start..start + len.min(self.size)]
    }

    /// All of slot `i`, writable.
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let start = i * self.size;
        &mut self.bytes[start..start + self.size]
    }

    /// The address of slot `i`, for work requests.
    pub(crate) fn addr(&self, i: usize) -> u64 {
        self.bytes.as_ptr() as u64 + (i * self.size) as u64
    }

    /// The whole buffer, for memory registration.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }

    /// The whole buffer's length, for memory registration.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }
}

impl Drop for SlotMemory {
    fn drop(&mut self) {
        if self.must_leak() {
            log::warn!(
                "leaking {} bytes of slot memory: the device may still write into it",
                self.bytes.len()
            );
            std::mem::forget(std::mem::take(&mut self.bytes));
        }
    }
}

/// The device discovery chose, which every RDMA transport needs.
pub(crate) fn chosen_device<'a>(
    params: &'a SetupParams,
    transport: &'static str,
) -> Result<&'a DeviceChoice> {
    params
        .device
        .as_ref()
        .ok_or_else(|| Error::unavailable(transport, "no RDMA device was chosen for this address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn slot_memory_is_leaked_unless_the_device_let_go_of_it() {
        let mut memory = SlotMemory::new(2, 8).unwrap();
        assert!(!memory.must_leak(), "memory never registered is freed");
        let released = Arc::new(AtomicBool::new(false));
        let flag = released.clone();
        memory.free_only_when(move || flag.load(Ordering::Relaxed));
        assert!(
            memory.must_leak(),
            "still registered (or deregistering failed): leaked"
        );
        released.store(true, Ordering::Relaxed);
        assert!(!memory.must_leak(), "deregistered: freed");
    }
}
