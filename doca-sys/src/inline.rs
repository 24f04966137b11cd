//! The SDK's static-inline buffer-inventory helpers, which have no symbol to link
//! against. Both are documented as thin wrappers around
//! [`doca_buf_inventory_buf_get_by_args`], and are rebuilt here the same way.

use crate::bindings::{
    doca_buf, doca_buf_inventory, doca_buf_inventory_buf_get_by_args, doca_error_t, doca_mmap,
};
use std::os::raw::c_void;

/// Take a buf describing `[addr, addr + len)` with an empty data window at `addr`
/// (data length 0): the shape a receive destination needs, since receives append after
/// the buffer's current data.
///
/// # Safety
/// Same contract as `doca_buf_inventory_buf_get_by_args`: `inventory` and `mmap` are live
/// and started, `[addr, addr + len)` lies inside the mmap's range, `buf` is writable.
pub unsafe fn doca_buf_inventory_buf_get_by_addr(
    inventory: *mut doca_buf_inventory,
    mmap: *mut doca_mmap,
    addr: *mut c_void,
    len: usize,
    buf: *mut *mut doca_buf,
) -> doca_error_t {
    // SAFETY: forwarded unchanged under the caller's guarantees; data = addr and
    // data_len = 0 always lie inside [addr, addr + len).
    unsafe { doca_buf_inventory_buf_get_by_args(inventory, mmap, addr, len, addr, 0, buf) }
}

/// Take a buf whose whole range is the data `[data, data + data_len)`: the shape a send
/// source needs.
///
/// # Safety
/// Same contract as `doca_buf_inventory_buf_get_by_args`: `inventory` and `mmap` are live
/// and started, `[data, data + data_len)` lies inside the mmap's range, `buf` is writable.
pub unsafe fn doca_buf_inventory_buf_get_by_data(
    inventory: *mut doca_buf_inventory,
    mmap: *mut doca_mmap,
    data: *mut c_void,
    data_len: usize,
    buf: *mut *mut doca_buf,
) -> doca_error_t {
    // SAFETY: forwarded unchanged under the caller's guarantees; the data window equals
    // the buffer, so it trivially lies inside it.
    unsafe {
        doca_buf_inventory_buf_get_by_args(inventory, mmap, data, data_len, data, data_len, buf)
    }
}
