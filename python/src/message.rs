//! Views of session memory exported through the buffer protocol, with their exports counted.
//!
//! A [`Message`] views a receive slot (read-only), a [`SlotView`] a sender's staging slot
//! (writable, only during `send_in_place`'s fill call). Each export is counted in a [`Lease`];
//! the memory is handed back to the library only when no export is alive, and a released lease
//! refuses new exports. Both objects keep what owns the memory alive (the `RdmaSrc` object;
//! the sink for the duration of the call).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Who may read a region: counts live exports, and refuses new ones once released.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    exports: AtomicUsize,
    released: AtomicBool,
}

impl Lease {
    /// Ends the lease, or raises BufferError while an export is alive.
    pub(crate) fn try_release(&self) -> PyResult<()> {
        let live = self.exports.load(Ordering::SeqCst);
        if live > 0 {
            return Err(PyBufferError::new_err(format!(
                "{live} view(s) of the last message are still alive (a memoryview, a numpy \
                 array made with frombuffer, ...): drop them before the next recv(), or copy \
                 the data (bytes(view), recv_bytes(), recv_into())"
            )));
        }
        self.released.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }
}

/// A region of session memory as one-dimensional unsigned bytes (`format "B"`).
struct Region {
    /// Start address (`usize`: the pointer is only dereferenced by the buffer's consumers).
    at: usize,
    len: usize,
    writable: bool,
    /// `shape[0]` and `strides[0]` for exported views; they must live as long as the object.
    shape: [ffi::Py_ssize_t; 1],
    strides: [ffi::Py_ssize_t; 1],
    lease: Arc<Lease>,
}

impl Region {
    fn new(bytes: *const u8, len: usize, writable: bool) -> Self {
        Self {
            at: bytes as usize,
            len,
            writable,
            shape: [ffi::Py_ssize_t::try_from(len).unwrap_or(ffi::Py_ssize_t::MAX)],
            strides: [1],
            lease: Arc::new(Lease::default()),
        }
    }

    /// Fills `view` for a buffer request with `flags` and counts the export.
    ///
    /// # Safety
    /// `view` is the pointer CPython passed to `bf_getbuffer`; `owner` owns this region.
    unsafe fn export(
        &self,
        owner: Bound<'_, PyAny>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        // SAFETY: CPython passes a valid, writable Py_buffer to fill.
        let v = unsafe { &mut *view };
        v.obj = std::ptr::null_mut();
        if self.lease.is_released() {
            return Err(PyBufferError::new_err(
                "this message was released (recv() was called again, or release()): its slot \
                 belongs to the NIC again",
            ));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE && !self.writable {
            return Err(PyBufferError::new_err("a received message is read-only"));
        }
        v.buf = self.at as *mut c_void;
        v.len = self.shape[0];
        v.itemsize = 1;
        v.readonly = c_int::from(!self.writable);
        v.ndim = 1;
        v.format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            c"B".as_ptr().cast_mut()
        } else {
            std::ptr::null_mut::<c_char>()
        };
        v.shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
            self.shape.as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        };
        v.strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            self.strides.as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        };
        v.suboffsets = std::ptr::null_mut();
        v.internal = std::ptr::null_mut();
        v.obj = owner.into_ptr();
        self.lease.exports.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn unexport(&self) {
        self.lease.exports.fetch_sub(1, Ordering::SeqCst);
    }

    /// The bytes, while the lease holds.
    fn bytes(&self) -> PyResult<&[u8]> {
        if self.lease.is_released() {
            return Err(PyValueError::new_err("this message was released"));
        }
        // SAFETY: not released, so the library has not taken the slot back, and the owner
        // (kept alive by whoever holds this region) keeps the memory allocated.
        Ok(unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) })
    }
}

/// One received message: exports the receive slot (read-only, `format "B"`) without copying.
///
/// `memoryview(msg)`, `numpy.frombuffer(msg, numpy.uint8)`, `bytes(msg)` all work. While any
/// export is alive, the next `recv()` raises BufferError instead of letting the NIC reuse the
/// slot. `release()` (or leaving `with src.recv() as msg:`) ends the lease early.
#[pyclass(frozen, module = "rdma_container")]
pub(crate) struct Message {
    /// Keeps the `RdmaSrc`, which owns the slot memory, alive.
    _src: Py<PyAny>,
    region: Region,
}

impl Message {
    pub(crate) fn new<T>(src: Py<T>, bytes: &[u8]) -> Self {
        Self {
            _src: src.into_any(),
            region: Region::new(bytes.as_ptr(), bytes.len(), false),
        }
    }

    pub(crate) fn lease(&self) -> Arc<Lease> {
        self.region.lease.clone()
    }
}

#[pymethods]
impl Message {
    /// # Safety
    /// Called by CPython with a valid `view`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let owner = slf.clone().into_any();
        // SAFETY: `view` comes from CPython; `slf` owns the region.
        unsafe { slf.get().region.export(owner, view, flags) }
    }

    /// # Safety
    /// Called by CPython for a view this object exported.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.region.unexport();
    }

    fn __len__(&self) -> usize {
        self.region.len
    }

    /// A copy of the message as bytes.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.region.bytes()?))
    }

    /// Ends the lease now (raises BufferError while a view is alive). Idempotent.
    fn release(&self) -> PyResult<()> {
        self.region.lease.try_release()
    }

    /// True once released (by `release()` or by the next `recv()`).
    #[getter]
    fn released(&self) -> bool {
        self.region.lease.is_released()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release().map(|()| false)
    }

    fn __repr__(&self) -> String {
        let state = if self.released() { ", released" } else { "" };
        format!("Message({} bytes{state})", self.region.len)
    }
}

/// How lending a staging slot to Python ended.
pub(crate) enum Lent {
    /// `fill` returned and kept no view.
    Filled,
    /// `fill` raised.
    Failed(PyErr),
    /// `fill` returned but a view of the slot is still alive: the slot's memory must never be
    /// freed or reused.
    ViewKept(PyErr),
}

/// The sender's staging slot, writable, lent to `send_in_place`'s fill function for the
/// duration of the call.
#[pyclass(frozen, module = "rdma_container")]
pub(crate) struct SlotView {
    region: Region,
}

impl SlotView {
    /// Calls `fill(view)` with a writable view of `slot`, then revokes the view.
    pub(crate) fn lend(py: Python<'_>, slot: &mut [u8], fill: &Py<PyAny>) -> Lent {
        let view = match Py::new(
            py,
            SlotView {
                region: Region::new(slot.as_mut_ptr(), slot.len(), true),
            },
        ) {
            Ok(v) => v,
            Err(e) => return Lent::Failed(e),
        };
        let called = fill.call1(py, (view.clone_ref(py),));
        let revoked = view.get().region.lease.try_release();
        match (called, revoked) {
            (_, Err(e)) => {
                // Refuse new exports anyway.
                view.get()
                    .region
                    .lease
                    .released
                    .store(true, Ordering::SeqCst);
                Lent::ViewKept(e)
            }
            (Err(e), Ok(())) => Lent::Failed(e),
            (Ok(_), Ok(())) => Lent::Filled,
        }
    }
}

#[pymethods]
impl SlotView {
    /// # Safety
    /// Called by CPython with a valid `view`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let owner = slf.clone().into_any();
        // SAFETY: `view` comes from CPython; `slf` owns the region.
        unsafe { slf.get().region.export(owner, view, flags) }
    }

    /// # Safety
    /// Called by CPython for a view this object exported.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.region.unexport();
    }

    fn __len__(&self) -> usize {
        self.region.len
    }
}
