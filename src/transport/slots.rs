//! Memory shared by the RDMA transports: one buffer of equal slots, registered once.

use crate::roce::DeviceChoice;
use crate::{Error, Result};

use super::SetupParams;

/// `count` slots of `size` bytes in one contiguous, never reallocated buffer.
#[derive(Debug)]
pub(crate) struct SlotMemory {
    bytes: Vec<u8>,
    count: usize,
    size: usize,
}

impl SlotMemory {
    /// Allocates the slots (zeroed; at least one byte, so the buffer always has an address).
    pub(crate) fn new(count: usize, size: usize) -> Result<Self> {
        let total = count.checked_mul(size).ok_or_else(|| {
            Error::InvalidConfig(format!("{count} slots of {size} bytes overflow"))
        })?;
        Ok(Self {
            bytes: vec![0u8; total.max(1)],
            count,
            size,
        })
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
