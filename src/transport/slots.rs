//! Memory shared by the RDMA transports: one buffer of equal slots, registered once.

use std::ptr::NonNull;

use crate::host::{self, MemoryLimits, MemoryShortfall};
use crate::roce::DeviceChoice;
use crate::{Error, Result};

#[cfg(test)]
use super::RecvSlot;
use super::{Arrived, SetupParams, StagingSlot};

/// `count` slots of `size` bytes in one contiguous, never reallocated buffer, held through a
/// raw base pointer: every access slices one slot from it, so no reference ever covers a slot
/// the NIC owns (a posted receive, a staging slot being sent). Which slot may be touched is
/// said by the slot tokens ([`Arrived`], [`StagingSlot`]): only their holder reads or fills.
pub(crate) struct SlotMemory {
    base: NonNull<u8>,
    /// Bytes allocated (at least one, so the buffer always has an address).
    total: usize,
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

// SAFETY: the buffer is owned by this value (like the Vec it came from); the NIC's writes are
// ordered by completions, which the owner observes through `&mut self` of its transport.
unsafe impl Send for SlotMemory {}

/// Checks that `count` slots of `size` bytes can be had before anything is allocated, so that
/// a large `--credits` x `--max-msg-size` ends in an error that names both, never in an
/// allocation failure (an abort) or the OOM killer: the total must fit every limit
/// [`MemoryLimits`] reads (the memory the machine has available, the address-space limit, the
/// cgroup's), and memory that will be registered (`pinned`) must fit in the memlock limit
/// unless CAP_IPC_LOCK lifts it. Returns the total in bytes.
pub(crate) fn check_slot_memory(count: usize, size: usize, pinned: bool) -> Result<usize> {
    let total = count
        .checked_mul(size)
        .ok_or_else(|| Error::InvalidConfig(format!("{count} slots of {size} bytes overflow")))?;
    let what = || format!("{count} slots of {size} bytes ({} MiB)", total >> 20);
    if let Some(shortfall) = MemoryLimits::of_this_process().shortfall(total as u64) {
        return Err(Error::InvalidConfig(match shortfall {
            MemoryShortfall::Available { available } => format!(
                "{} are more than the {} MiB of memory this machine has available: lower \
--credits or --max-msg-size",
                what(),
                available >> 20
            ),
            MemoryShortfall::AddressSpace { limit, used } => format!(
                "{} do not fit the address-space limit (RLIMIT_AS, ulimit -v) of {} MiB, of which \
this process uses {} MiB: lower --credits or --max-msg-size, or raise the limit",
                what(),
                limit >> 20,
                used >> 20
            ),
            MemoryShortfall::Cgroup { limit, used } => format!(
                "{} do not fit the memory limit of this container (cgroup: {} MiB, of which {} MiB \
are in use): lower --credits or --max-msg-size (RDMA_CONTAINER_CREDITS, \
RDMA_CONTAINER_MAX_MSG_SIZE), or raise the pod's limits.memory",
                what(),
                limit >> 20,
                used >> 20
            ),
        }));
    }
    if pinned && host::has_cap_ipc_lock() != Some(true) {
        if let Some(limit) = host::memlock_limit() {
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

/// `n` zeroed bytes, or an error instead of the allocator's abort. The memory comes zeroed from
/// the allocator (`calloc`: fresh pages of a large allocation are the kernel's zero pages, so
/// slots cost memory only as messages land in them, and a gigabyte is not written at set-up).
pub(crate) fn zeroed(n: usize) -> Result<Vec<u8>> {
    let refused = || {
        Error::InvalidConfig(format!(
            "cannot allocate {n} bytes of slot memory: lower --credits or --max-msg-size"
        ))
    };
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).map_err(|_| refused())?;
    // SAFETY: the layout's size is n > 0, as alloc_zeroed requires.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(refused());
    }
    // SAFETY: ptr is non-null and was allocated by the global allocator with the layout of
    // [u8; n] (size n, alignment 1), which is the layout a Vec<u8> of capacity n frees with;
    // all n bytes are initialised (zero); the Vec becomes its only owner.
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

impl SlotMemory {
    /// Allocates the slots for registration (zeroed), after [`check_slot_memory`].
    pub(crate) fn new(count: usize, size: usize) -> Result<Self> {
        let total = check_slot_memory(count, size, true)?.max(1);
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(total).map_err(|_| {
            Error::InvalidConfig(format!(
                "cannot allocate {count} slots of {size} bytes: lower --credits or --max-msg-size"
            ))
        })?;
        bytes.resize(total, 0);
        let raw: *mut [u8] = Box::into_raw(bytes.into_boxed_slice());
        let base = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| Error::Internal("the slot buffer has no address".to_owned()))?;
        Ok(Self {
            base,
            total,
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

    /// The bytes of a message that arrived (clamped to its slot).
    pub(crate) fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        let len = msg.len().min(self.size);
        let start = self.offset(msg.slot_index());
        // SAFETY: the range lies inside the allocation (`offset` checks the index); the slot
        // holds a completed receive the token's holder owns, which the NIC no longer writes,
        // and the borrow of the token keeps it from being posted while the slice lives.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(start), len) }
    }

    /// A staging slot's memory, writable.
    pub(crate) fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        let start = self.offset(slot.index());
        // SAFETY: the range lies inside the allocation; a staging slot's token is held only
        // while the slot is not posted, and the mutable borrow of it makes this the only
        // reference to those bytes.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(start), self.size) }
    }

    /// The address of slot `i`, for work requests.
    pub(crate) fn addr(&self, i: usize) -> u64 {
        self.slot_ptr(i) as u64
    }

    /// A pointer to slot `i`, for DOCA buffers (no reference is made).
    pub(crate) fn slot_ptr(&self, i: usize) -> *mut u8 {
        // `wrapping_add` keeps this safe code: the offset is inside the allocation anyway.
        self.base.as_ptr().wrapping_add(self.offset(i))
    }

    /// Where slot `i` starts; an index past the slots is a bug of the caller (tokens are only
    /// minted for slots that exist), so it panics rather than reach outside the buffer.
    fn offset(&self, i: usize) -> usize {
        assert!(i < self.count, "slot {i} of {}", self.count);
        i * self.size
    }

    /// The whole buffer, for memory registration.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The whole buffer, for memory registration that takes a slice (DOCA's mmap).
    #[cfg(doca_transport)]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `base` and `total` are the boxed slice made in `new`; the mutable borrow of
        // `self` makes this the only reference to it while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.total) }
    }

    /// The whole buffer's length, for memory registration.
    pub(crate) fn len(&self) -> usize {
        self.total
    }
}

impl Drop for SlotMemory {
    fn drop(&mut self) {
        if self.must_leak() {
            log::warn!(
                "leaking {} bytes of slot memory: the device may still write into it",
                self.total
            );
            return;
        }
        let raw = std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.total);
        // SAFETY: `base` and `total` are the boxed slice made in `new`, freed only here once.
        drop(unsafe { Box::from_raw(raw) });
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
    fn zeroed_slot_memory_beyond_what_can_be_had_is_an_error_not_an_abort() {
        let e = zeroed(usize::MAX / 2).expect_err("no machine has that");
        assert!(e.to_string().contains("lower --credits"), "{e}");
        assert_eq!(zeroed(16).expect("small").len(), 16);
    }

    #[test]
    fn each_token_reaches_only_its_own_slot() {
        let mut memory = SlotMemory::new(3, 4).expect("memory");
        for i in 0..3 {
            let mut slot = StagingSlot::mint(i);
            memory.staging(&mut slot).fill(i as u8 + 1);
        }
        for i in 0..3 {
            let msg = Arrived::new(RecvSlot::mint(i), 9);
            assert_eq!(
                memory.message(&msg),
                &[i as u8 + 1; 4],
                "clamped to the slot"
            );
        }
        assert_eq!(memory.addr(1) - memory.addr(0), 4);
        assert_eq!(memory.len(), 12);
    }

    #[test]
    fn empty_memory_still_has_an_address() {
        let memory = SlotMemory::new(0, 0).expect("memory");
        assert_eq!(memory.len(), 1);
        assert_eq!(memory.count(), 0);
    }

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
