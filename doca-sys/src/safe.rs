//! A safe layer over the bindings, in the shape of `verbs-sys`: each wrapper owns its DOCA
//! handle, holds (through an `Arc`) what it depends on, and destroys its handle on `Drop`
//! after everything that depends on it, in the order DOCA documents:
//!
//! * [`Dev`]: an open device (`doca_dev_open` / `doca_dev_close`), with its capabilities;
//! * [`Mmap`]: a started memory map over memory the caller keeps alive
//!   ([`Mmap::new`] is `unsafe`; [`Mmap::deregistration`] tells when the memory may be given
//!   back: never, if the map is leaked);
//! * [`BufInventory`] and [`Buf`]: a buf holds its inventory and its mmap;
//! * [`Pe`]: a progress engine; an [`RdmaCtx`] takes it over (one context per engine, so that
//!   progressing can only run the callbacks of the context borrowed for it);
//! * [`RdmaCtx`]: a `doca_rdma` context with its tasks ([`SendTask`], [`RecvTask`]), its
//!   callbacks' [`TaskHandler`] and its connection. Its tasks hold their bufs. Dropped while
//!   IDLE, it frees its tasks, destroys the context and then its engine. Dropped in any other
//!   state (it never drained), it is leaked on purpose with its engine, device, tasks, bufs
//!   and so with the mmaps (and their memory) the NIC may still write into.
//!
//! Posting (`submit`) is an `unsafe fn`: the memory under a task's buf must not be touched
//! by Rust while the task is in flight. Everything else checks what DOCA would not.
//! A failed destroy during `Drop` is logged (`doca teardown: CALL: CODE`) and what depends
//! on the object is leaked with it.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::mem::ManuallyDrop;
use std::os::fd::BorrowedFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::bindings as sys;
use crate::bindings::{doca_ctx_states, doca_data, doca_error, doca_error_t};

/// A DOCA call that did not return `DOCA_SUCCESS`: which call, and its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    /// The C function that failed.
    pub call: &'static str,
    /// What it returned.
    pub code: doca_error_t,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.call, error_name(self.code))
    }
}

impl std::error::Error for Error {}

/// The result of a DOCA call.
pub type Result<T> = std::result::Result<T, Error>;

/// The path MTUs DOCA names, in bytes.
const MTU_SIZES: [(u32, sys::doca_mtu_size); 5] = [
    (256, sys::doca_mtu_size::DOCA_MTU_SIZE_256_BYTES),
    (512, sys::doca_mtu_size::DOCA_MTU_SIZE_512_BYTES),
    (1024, sys::doca_mtu_size::DOCA_MTU_SIZE_1K_BYTES),
    (2048, sys::doca_mtu_size::DOCA_MTU_SIZE_2K_BYTES),
    (4096, sys::doca_mtu_size::DOCA_MTU_SIZE_4K_BYTES),
];

/// DOCA's name for an MTU of `bytes`.
fn mtu_size(bytes: u32) -> Option<sys::doca_mtu_size> {
    MTU_SIZES
        .iter()
        .find(|(b, _)| *b == bytes)
        .map(|(_, size)| *size)
}

fn check(call: &'static str, code: doca_error_t) -> Result<()> {
    if code == doca_error::DOCA_SUCCESS {
        Ok(())
    } else {
        Err(Error { call, code })
    }
}

/// Logs a failed destroy (teardown goes on); returns whether the call succeeded.
fn teardown(call: &'static str, code: doca_error_t) -> bool {
    if code == doca_error::DOCA_SUCCESS {
        return true;
    }
    log::warn!("doca teardown: {call}: {}", error_name(code));
    false
}

/// DOCA's name for an error code (`doca_error N` for a code the runtime does not name).
pub fn error_name(code: doca_error_t) -> String {
    // SAFETY: takes any code; returns a static C string or NULL.
    let name = unsafe { sys::doca_error_get_name(code) };
    if name.is_null() {
        return format!("doca_error {}", code.0);
    }
    // SAFETY: non-null, NUL-terminated and static.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

struct DevInner(NonNull<sys::doca_dev>);

// SAFETY: an open device is a handle DOCA lets any thread use; it is only closed in Drop,
// once no wrapper holds it any more.
unsafe impl Send for DevInner {}
// SAFETY: as above: the queries made through `&Dev` do not mutate the device.
unsafe impl Sync for DevInner {}

impl Drop for DevInner {
    fn drop(&mut self) {
        // SAFETY: opened by `Dev::open_ibdev`; every mmap and context using it holds this
        // value, so none is left.
        teardown("doca_dev_close", unsafe {
            sys::doca_dev_close(self.0.as_ptr())
        });
    }
}

/// An open DOCA device; clones share it; closed when the last holder is gone.
#[derive(Clone)]
pub struct Dev(Arc<DevInner>);

impl fmt::Debug for Dev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Dev").field(&self.0 .0).finish()
    }
}

impl Dev {
    /// Opens the device whose ibdev name is `ibdev`; `Ok(None)` when DOCA lists none.
    pub fn open_ibdev(ibdev: &str) -> Result<Option<Dev>> {
        let mut list: *mut *mut sys::doca_devinfo = ptr::null_mut();
        let mut count: u32 = 0;
        // SAFETY: out-pointers are valid locals.
        let rc = unsafe { sys::doca_devinfo_create_list(&mut list, &mut count) };
        check("doca_devinfo_create_list", rc)?;
        let mut found = None;
        for i in 0..count as usize {
            // SAFETY: `list` holds `count` entries until destroy_list.
            let info = unsafe { *list.add(i) };
            let mut name = [0u8; 64];
            // SAFETY: `name` has the documented size (DOCA_DEVINFO_IBDEV_NAME_SIZE = 64).
            let rc = unsafe {
                sys::doca_devinfo_get_ibdev_name(info, name.as_mut_ptr().cast(), name.len() as u32)
            };
            let name = CStr::from_bytes_until_nul(&name)
                .ok()
                .and_then(|c| c.to_str().ok());
            if rc == doca_error::DOCA_SUCCESS && name == Some(ibdev) {
                found = Some(info);
                break;
            }
        }
        let opened = match found {
            Some(info) => {
                let mut dev = ptr::null_mut();
                // SAFETY: `info` is an entry of the live list; `dev` is a valid out-pointer.
                let rc = unsafe { sys::doca_dev_open(info, &mut dev) };
                check("doca_dev_open", rc).and_then(|()| {
                    NonNull::new(dev)
                        .map(|d| Some(Dev(Arc::new(DevInner(d)))))
                        .ok_or(Error {
                            call: "doca_dev_open",
                            code: doca_error::DOCA_ERROR_UNEXPECTED,
                        })
                })
            }
            None => Ok(None),
        };
        // SAFETY: the list came from create_list; an opened device stays valid without it.
        unsafe { sys::doca_devinfo_destroy_list(list) };
        opened
    }

    fn as_ptr(&self) -> *mut sys::doca_dev {
        self.0 .0.as_ptr()
    }

    fn info(&self) -> *mut sys::doca_devinfo {
        // SAFETY: the device is open; its devinfo lives as long as it does.
        unsafe { sys::doca_dev_as_devinfo(self.as_ptr()) }
    }

    /// `doca_rdma_cap_task_send_is_supported`.
    pub fn rdma_task_send_supported(&self) -> Result<()> {
        // SAFETY: `info` is the open device's devinfo.
        let rc = unsafe { sys::doca_rdma_cap_task_send_is_supported(self.info()) };
        check("doca_rdma_cap_task_send_is_supported", rc)
    }

    /// `doca_rdma_cap_task_receive_is_supported`.
    pub fn rdma_task_receive_supported(&self) -> Result<()> {
        // SAFETY: `info` is the open device's devinfo.
        let rc = unsafe { sys::doca_rdma_cap_task_receive_is_supported(self.info()) };
        check("doca_rdma_cap_task_receive_is_supported", rc)
    }

    /// `doca_rdma_cap_get_max_message_size`.
    pub fn rdma_max_message_size(&self) -> Result<u32> {
        let mut cap = 0;
        // SAFETY: `info` is the open device's devinfo; `cap` is a valid out-pointer.
        let rc = unsafe { sys::doca_rdma_cap_get_max_message_size(self.info(), &mut cap) };
        check("doca_rdma_cap_get_max_message_size", rc).map(|()| cap)
    }

    /// `doca_rdma_cap_get_max_send_queue_size`.
    pub fn rdma_max_send_queue_size(&self) -> Result<u32> {
        let mut cap = 0;
        // SAFETY: `info` is the open device's devinfo; `cap` is a valid out-pointer.
        let rc = unsafe { sys::doca_rdma_cap_get_max_send_queue_size(self.info(), &mut cap) };
        check("doca_rdma_cap_get_max_send_queue_size", rc).map(|()| cap)
    }

    /// `doca_rdma_cap_get_max_recv_queue_size`.
    pub fn rdma_max_recv_queue_size(&self) -> Result<u32> {
        let mut cap = 0;
        // SAFETY: `info` is the open device's devinfo; `cap` is a valid out-pointer.
        let rc = unsafe { sys::doca_rdma_cap_get_max_recv_queue_size(self.info(), &mut cap) };
        check("doca_rdma_cap_get_max_recv_queue_size", rc).map(|()| cap)
    }
}

/// Tells whether a memory map is destroyed, so that the memory under it may be given back.
#[derive(Debug, Clone)]
pub struct Deregistration(Arc<AtomicBool>);

impl Deregistration {
    /// Whether the map was destroyed (never, if it was leaked).
    pub fn done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

struct MmapInner {
    raw: NonNull<sys::doca_mmap>,
    base: usize,
    len: usize,
    started: bool,
    destroyed: Arc<AtomicBool>,
    _dev: Dev,
}

// SAFETY: a started mmap is only read by DOCA (bufs are taken from it under the inventory's
// lock); it is stopped and destroyed only in Drop, once no buf holds it.
unsafe impl Send for MmapInner {}
// SAFETY: as above.
unsafe impl Sync for MmapInner {}

impl Drop for MmapInner {
    fn drop(&mut self) {
        if self.started {
            // SAFETY: no buf points into it any more (each holds this value).
            teardown("doca_mmap_stop", unsafe {
                sys::doca_mmap_stop(self.raw.as_ptr())
            });
        }
        // SAFETY: stopped (or never started), no buf points into it.
        let ok = teardown("doca_mmap_destroy", unsafe {
            sys::doca_mmap_destroy(self.raw.as_ptr())
        });
        if ok {
            self.destroyed.store(true, Ordering::Release);
        }
    }
}

/// A started memory map over one range, registered with one device.
#[derive(Clone)]
pub struct Mmap(Arc<MmapInner>);

impl fmt::Debug for Mmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mmap")
            .field("base", &self.0.base)
            .field("len", &self.0.len)
            .finish()
    }
}

impl Mmap {
    /// Creates a map over `memory` with `access` (`doca_access_flag` bits), adds `dev` and
    /// starts it. The calls fail as `doca_mmap_create`, `..._set_permissions`,
    /// `..._set_memrange`, `..._add_dev` or `..._start`.
    ///
    /// # Safety
    /// The map outlives the borrow: `memory` must stay allocated (and not be given to anything
    /// else) until [`Mmap::deregistration`] says `done`, since the device may read and write
    /// it through the bufs taken from this map, and a leaked map never lets go of it. The
    /// caller reads and writes it only where no task in flight uses it.
    pub unsafe fn new(dev: &Dev, memory: &mut [u8], access: u32) -> Result<Mmap> {
        let (base, len) = (memory.as_mut_ptr(), memory.len());
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let rc = unsafe { sys::doca_mmap_create(&mut raw) };
        check("doca_mmap_create", rc)?;
        let raw = NonNull::new(raw).ok_or(Error {
            call: "doca_mmap_create",
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        let mut inner = MmapInner {
            raw,
            base: base as usize,
            len,
            started: false,
            destroyed: Arc::new(AtomicBool::new(false)),
            _dev: dev.clone(),
        };
        let m = raw.as_ptr();
        // SAFETY: the mmap was just created and is not started.
        check("doca_mmap_set_permissions", unsafe {
            sys::doca_mmap_set_permissions(m, access)
        })?;
        // SAFETY: the caller guarantees the range; the mmap is not started.
        check("doca_mmap_set_memrange", unsafe {
            sys::doca_mmap_set_memrange(m, base.cast::<c_void>(), len)
        })?;
        // SAFETY: the device is open (held by `inner`); the mmap is not started.
        check("doca_mmap_add_dev", unsafe {
            sys::doca_mmap_add_dev(m, dev.as_ptr())
        })?;
        // SAFETY: configured above.
        check("doca_mmap_start", unsafe { sys::doca_mmap_start(m) })?;
        inner.started = true;
        Ok(Mmap(Arc::new(inner)))
    }

    /// The registered range's length.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether the registered range is empty.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Says when the memory may be given back.
    pub fn deregistration(&self) -> Deregistration {
        Deregistration(self.0.destroyed.clone())
    }
}

struct InventoryInner {
    raw: NonNull<sys::doca_buf_inventory>,
    /// Serialises taking and returning bufs (the inventory is not thread-safe).
    lock: Mutex<()>,
}

// SAFETY: every use of the inventory after creation is under `lock`; it is stopped and
// destroyed only in Drop, once no buf holds it.
unsafe impl Send for InventoryInner {}
// SAFETY: as above.
unsafe impl Sync for InventoryInner {}

impl Drop for InventoryInner {
    fn drop(&mut self) {
        // SAFETY: every buf is returned (each held this value).
        teardown("doca_buf_inventory_stop", unsafe {
            sys::doca_buf_inventory_stop(self.raw.as_ptr())
        });
        // SAFETY: stopped, every buf returned.
        teardown("doca_buf_inventory_destroy", unsafe {
            sys::doca_buf_inventory_destroy(self.raw.as_ptr())
        });
    }
}

/// A started buffer inventory.
pub struct BufInventory(Arc<InventoryInner>);

impl fmt::Debug for BufInventory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BufInventory").field(&self.0.raw).finish()
    }
}

impl BufInventory {
    /// Creates and starts an inventory of `elements` bufs.
    pub fn new(elements: usize) -> Result<BufInventory> {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let rc = unsafe { sys::doca_buf_inventory_create(elements, &mut raw) };
        check("doca_buf_inventory_create", rc)?;
        let raw = NonNull::new(raw).ok_or(Error {
            call: "doca_buf_inventory_create",
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        // SAFETY: just created.
        let rc = unsafe { sys::doca_buf_inventory_start(raw.as_ptr()) };
        if let Err(e) = check("doca_buf_inventory_start", rc) {
            // SAFETY: created, never started, no buf taken.
            teardown("doca_buf_inventory_destroy", unsafe {
                sys::doca_buf_inventory_destroy(raw.as_ptr())
            });
            return Err(e);
        }
        Ok(BufInventory(Arc::new(InventoryInner {
            raw,
            lock: Mutex::new(()),
        })))
    }

    /// A buf over `[offset, offset + len)` of `mmap`'s range with an empty data window at its
    /// start (a receive destination: receives append). Fails as
    /// `doca_buf_inventory_buf_get_by_addr` (INVALID_VALUE if the range is outside the map).
    pub fn buf_by_addr(&self, mmap: &Mmap, offset: usize, len: usize) -> Result<Buf> {
        self.take(
            mmap,
            offset,
            len,
            "doca_buf_inventory_buf_get_by_addr",
            false,
        )
    }

    /// A buf whose whole range `[offset, offset + len)` of `mmap`'s range is data (a send
    /// source). Fails as `doca_buf_inventory_buf_get_by_data`.
    pub fn buf_by_data(&self, mmap: &Mmap, offset: usize, len: usize) -> Result<Buf> {
        self.take(
            mmap,
            offset,
            len,
            "doca_buf_inventory_buf_get_by_data",
            true,
        )
    }

    fn take(
        &self,
        mmap: &Mmap,
        offset: usize,
        len: usize,
        call: &'static str,
        data: bool,
    ) -> Result<Buf> {
        if offset.checked_add(len).is_none_or(|end| end > mmap.0.len) {
            return Err(Error {
                call,
                code: doca_error::DOCA_ERROR_INVALID_VALUE,
            });
        }
        let addr = (mmap.0.base + offset) as *mut c_void;
        let mut raw = ptr::null_mut();
        let guard = self.0.lock.lock().unwrap_or_else(|p| p.into_inner());
        let (inv, m) = (self.0.raw.as_ptr(), mmap.0.raw.as_ptr());
        let rc = if data {
            // SAFETY: inventory and mmap are started; the range lies inside the map (checked
            // above); `raw` is a valid out-pointer; the inventory is locked.
            unsafe { crate::doca_buf_inventory_buf_get_by_data(inv, m, addr, len, &mut raw) }
        } else {
            // SAFETY: as above.
            unsafe { crate::doca_buf_inventory_buf_get_by_addr(inv, m, addr, len, &mut raw) }
        };
        drop(guard);
        check(call, rc)?;
        let raw = NonNull::new(raw).ok_or(Error {
            call,
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        Ok(Buf(Arc::new(BufInner {
            raw,
            base: mmap.0.base + offset,
            len,
            inventory: self.0.clone(),
            _mmap: mmap.clone(),
        })))
    }
}

struct BufInner {
    raw: NonNull<sys::doca_buf>,
    base: usize,
    len: usize,
    inventory: Arc<InventoryInner>,
    _mmap: Mmap,
}

// SAFETY: a buf's metadata is changed only through `unsafe fn`s whose callers guarantee no
// concurrent use; it is returned to its inventory (under the inventory's lock) in Drop.
unsafe impl Send for BufInner {}
// SAFETY: as above.
unsafe impl Sync for BufInner {}

impl Drop for BufInner {
    fn drop(&mut self) {
        let _guard = self
            .inventory
            .lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // SAFETY: taken from this inventory; no task holds it any more (tasks hold this
        // value); the inventory is locked.
        unsafe { sys::doca_buf_dec_refcount(self.raw.as_ptr(), ptr::null_mut()) };
    }
}

/// A buf taken from a [`BufInventory`] over part of an [`Mmap`]; returned on drop.
pub struct Buf(Arc<BufInner>);

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("base", &self.0.base)
            .field("len", &self.0.len)
            .finish()
    }
}

impl Buf {
    /// Sets the data window to `[offset, offset + len)` of the buf's range (a send's
    /// message). Fails as `doca_buf_set_data` (INVALID_VALUE outside the range).
    ///
    /// # Safety
    /// No task using this buf is in flight, and no other thread uses it meanwhile.
    pub unsafe fn set_data(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.0.len) {
            return Err(Error {
                call: "doca_buf_set_data",
                code: doca_error::DOCA_ERROR_INVALID_VALUE,
            });
        }
        let data = (self.0.base + offset) as *mut c_void;
        // SAFETY: the window lies inside the buf's range; the caller guarantees it is idle.
        check("doca_buf_set_data", unsafe {
            sys::doca_buf_set_data(self.0.raw.as_ptr(), data, len)
        })
    }

    /// Empties the data window (receives append after the current data).
    ///
    /// # Safety
    /// As for [`Buf::set_data`].
    pub unsafe fn reset_data_len(&self) -> Result<()> {
        // SAFETY: the buf is alive; the caller guarantees it is idle.
        check("doca_buf_reset_data_len", unsafe {
            sys::doca_buf_reset_data_len(self.0.raw.as_ptr())
        })
    }
}

/// A progress engine, before an [`RdmaCtx`] takes it over.
pub struct Pe {
    raw: NonNull<sys::doca_pe>,
    fd: sys::doca_notification_handle_t,
}

impl fmt::Debug for Pe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pe").field("fd", &self.fd).finish()
    }
}

// SAFETY: the engine is used through `&mut` only (its context too), so from one thread at a
// time; DOCA objects are not tied to the thread that created them.
unsafe impl Send for Pe {}

impl Drop for Pe {
    fn drop(&mut self) {
        // SAFETY: its context (if any) is destroyed: an RdmaCtx that cannot destroy its
        // context leaks its engine instead of dropping it.
        teardown("doca_pe_destroy", unsafe {
            sys::doca_pe_destroy(self.raw.as_ptr())
        });
    }
}

impl Pe {
    /// Creates an engine (selective event mode, DOCA's default).
    pub fn new() -> Result<Pe> {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let rc = unsafe { sys::doca_pe_create(&mut raw) };
        check("doca_pe_create", rc)?;
        let raw = NonNull::new(raw).ok_or(Error {
            call: "doca_pe_create",
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        Ok(Pe { raw, fd: -1 })
    }

    /// `doca_pe_set_event_mode(PROGRESS_ALL)`: every progress call progresses every context,
    /// and arming clears what was raised before (doca_pe.h, Linux).
    pub fn set_progress_all(&mut self) -> Result<()> {
        let mode = sys::doca_pe_event_mode::DOCA_PE_EVENT_MODE_PROGRESS_ALL;
        // SAFETY: the engine is alive and has never progressed.
        let rc = unsafe { sys::doca_pe_set_event_mode(self.raw.as_ptr(), mode) };
        check("doca_pe_set_event_mode", rc)
    }
}

/// What a task callback reports to the [`TaskHandler`]; `user` is the value given when the
/// task was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEvent {
    /// A send completed.
    SendDone { user: u64 },
    /// A send failed with this status.
    SendFailed { user: u64, status: doca_error_t },
    /// A receive completed with `len` bytes.
    RecvDone { user: u64, len: usize },
    /// A receive failed with this status.
    RecvFailed { user: u64, status: doca_error_t },
}

/// Receives task completions. Runs inside [`RdmaCtx::progress`] only, called from C: it must
/// not panic (a panic there aborts the process).
pub trait TaskHandler: Send + 'static {
    /// One task completed (the task is no longer in flight).
    fn on_task(&mut self, event: TaskEvent);
}

/// What the callbacks reach through the context's user data.
struct Shared<H> {
    /// The number of the first task in `in_flight` and `user` (tasks of earlier runs of the
    /// context, freed before it started again, keep their numbers: a stale handle names none).
    base: usize,
    /// Per task (by allocation order, from `base`): submitted and not yet completed?
    in_flight: Vec<bool>,
    /// Per task: the caller's user value.
    user: Vec<u64>,
    handler: H,
}

enum Raw {
    Send(NonNull<sys::doca_rdma_task_send>),
    Recv(NonNull<sys::doca_rdma_task_receive>),
}

struct Task {
    raw: Raw,
    /// The buf the task carries (for a send: the current source), kept alive with it.
    buf: Option<Arc<BufInner>>,
}

impl Task {
    fn as_task(&self) -> *mut sys::doca_task {
        match self.raw {
            // SAFETY: conversion of a live task.
            Raw::Send(t) => unsafe { sys::doca_rdma_task_send_as_task(t.as_ptr()) },
            // SAFETY: conversion of a live task.
            Raw::Recv(t) => unsafe { sys::doca_rdma_task_receive_as_task(t.as_ptr()) },
        }
    }
}

/// A send task of an [`RdmaCtx`] (its number: tasks are numbered in allocation order over
/// the context's whole life, so a handle of a task freed before a restart names no task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendTask(usize);

/// A receive task of an [`RdmaCtx`] (its number, as for [`SendTask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvTask(usize);

/// A task of either kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyTask {
    /// A send task.
    Send(SendTask),
    /// A receive task.
    Recv(RecvTask),
}

impl From<SendTask> for AnyTask {
    fn from(t: SendTask) -> Self {
        AnyTask::Send(t)
    }
}

impl From<RecvTask> for AnyTask {
    fn from(t: RecvTask) -> Self {
        AnyTask::Recv(t)
    }
}

impl AnyTask {
    fn index(self) -> usize {
        match self {
            AnyTask::Send(SendTask(i)) | AnyTask::Recv(RecvTask(i)) => i,
        }
    }
}

/// A `doca_rdma` context, its progress engine, tasks and connection.
pub struct RdmaCtx<H: TaskHandler> {
    rdma: NonNull<sys::doca_rdma>,
    ctx: NonNull<sys::doca_ctx>,
    shared: NonNull<Shared<H>>,
    /// The exported connection; `None` before an export and once a stop destroyed it.
    connection: Option<NonNull<sys::doca_rdma_connection>>,
    /// By allocation order, from task number `base`; `None` once freed.
    tasks: Vec<Option<Task>>,
    /// The number of `tasks[0]` (see [`Shared::base`]).
    base: usize,
    /// Every buf a task of this context ever carried: kept until the context is destroyed,
    /// and leaked with it (so their mmaps and memory too) if it never drains.
    pinned: Vec<Arc<BufInner>>,
    pe: ManuallyDrop<Pe>,
    dev: ManuallyDrop<Dev>,
    progress_all: bool,
}

impl<H: TaskHandler> fmt::Debug for RdmaCtx<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaCtx")
            .field("rdma", &self.rdma)
            .field("tasks", &self.tasks.len())
            .field("pe", &*self.pe)
            .finish()
    }
}

// SAFETY: the context, its engine, tasks and handler are used through `&mut self` only, so
// from one thread at a time (callbacks run inside `progress`); the handler is `Send`.
unsafe impl<H: TaskHandler> Send for RdmaCtx<H> {}

impl<H: TaskHandler> RdmaCtx<H> {
    /// Creates an RC context on `dev`, connects it to `pe` (which it keeps) and sets up the
    /// task callbacks (`send_tasks` sends, `recv_tasks` receives) that report to `handler`.
    /// `pe` runs in PROGRESS_ALL mode if `progress_all`. The calls fail as
    /// `doca_pe_get_notification_handle`, `doca_rdma_create`, `doca_pe_connect_ctx`,
    /// `doca_rdma_task_send_set_conf`, `doca_rdma_task_receive_set_conf` or
    /// `doca_ctx_set_user_data`.
    pub fn new(
        dev: &Dev,
        mut pe: Pe,
        progress_all: bool,
        handler: H,
        send_tasks: u32,
        recv_tasks: u32,
    ) -> Result<Self> {
        // SAFETY: the engine is alive; `pe.fd` is a valid out-pointer.
        let rc = unsafe { sys::doca_pe_get_notification_handle(pe.raw.as_ptr(), &mut pe.fd) };
        check("doca_pe_get_notification_handle", rc)?;
        let mut rdma = ptr::null_mut();
        // SAFETY: the device is open; `rdma` is a valid out-pointer.
        let rc = unsafe { sys::doca_rdma_create(dev.as_ptr(), &mut rdma) };
        check("doca_rdma_create", rc)?;
        let rdma = NonNull::new(rdma).ok_or(Error {
            call: "doca_rdma_create",
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        // SAFETY: the context was just created.
        let ctx = unsafe { sys::doca_rdma_as_ctx(rdma.as_ptr()) };
        let shared = Box::new(Shared {
            base: 0,
            in_flight: Vec::new(),
            user: Vec::new(),
            handler,
        });
        let this = RdmaCtx {
            rdma,
            ctx: NonNull::new(ctx).ok_or(Error {
                call: "doca_rdma_as_ctx",
                code: doca_error::DOCA_ERROR_UNEXPECTED,
            })?,
            shared: NonNull::from(Box::leak(shared)),
            connection: None,
            tasks: Vec::new(),
            base: 0,
            pinned: Vec::new(),
            pe: ManuallyDrop::new(pe),
            dev: ManuallyDrop::new(dev.clone()),
            progress_all,
        };
        // From here on, an error drops `this`, which is IDLE: everything is destroyed.
        let (r, c) = (this.rdma.as_ptr(), this.ctx.as_ptr());
        // SAFETY: engine and context are alive; the context is IDLE.
        let rc = unsafe { sys::doca_pe_connect_ctx(this.pe.raw.as_ptr(), c) };
        check("doca_pe_connect_ctx", rc)?;
        // SAFETY: the context is alive and IDLE; the callbacks match the task type.
        let rc = unsafe {
            sys::doca_rdma_task_send_set_conf(
                r,
                Some(send_done::<H>),
                Some(send_failed::<H>),
                send_tasks,
            )
        };
        check("doca_rdma_task_send_set_conf", rc)?;
        // SAFETY: as above.
        let rc = unsafe {
            sys::doca_rdma_task_receive_set_conf(
                r,
                Some(recv_done::<H>),
                Some(recv_failed::<H>),
                recv_tasks,
            )
        };
        check("doca_rdma_task_receive_set_conf", rc)?;
        let user = doca_data {
            ptr: this.shared.as_ptr().cast::<c_void>(),
        };
        // SAFETY: the context is alive; `shared` lives until the context is destroyed (or
        // is leaked with it).
        let rc = unsafe { sys::doca_ctx_set_user_data(c, user) };
        check("doca_ctx_set_user_data", rc)?;
        Ok(this)
    }

    /// Whether the engine runs in PROGRESS_ALL mode (as asked in [`RdmaCtx::new`]).
    pub fn progress_all(&self) -> bool {
        self.progress_all
    }

    fn r(&self) -> *mut sys::doca_rdma {
        self.rdma.as_ptr()
    }

    /// `doca_rdma_set_permissions`.
    pub fn set_permissions(&mut self, access: u32) -> Result<()> {
        // SAFETY: the context is alive; DOCA refuses the setter unless IDLE.
        check("doca_rdma_set_permissions", unsafe {
            sys::doca_rdma_set_permissions(self.r(), access)
        })
    }

    /// `doca_rdma_set_gid_index`.
    pub fn set_gid_index(&mut self, index: u32) -> Result<()> {
        // SAFETY: as above.
        check("doca_rdma_set_gid_index", unsafe {
            sys::doca_rdma_set_gid_index(self.r(), index)
        })
    }

    /// `doca_rdma_set_grh_enabled`.
    pub fn set_grh_enabled(&mut self, enabled: bool) -> Result<()> {
        // SAFETY: as above.
        check("doca_rdma_set_grh_enabled", unsafe {
            sys::doca_rdma_set_grh_enabled(self.r(), u8::from(enabled))
        })
    }

    /// `doca_rdma_set_transport_type(RC)`.
    pub fn set_transport_rc(&mut self) -> Result<()> {
        let rc_type = sys::doca_rdma_transport_type::DOCA_RDMA_TRANSPORT_TYPE_RC;
        // SAFETY: as above.
        check("doca_rdma_set_transport_type", unsafe {
            sys::doca_rdma_set_transport_type(self.r(), rc_type)
        })
    }

    /// `doca_rdma_set_max_num_connections`.
    pub fn set_max_num_connections(&mut self, n: u16) -> Result<()> {
        // SAFETY: as above.
        check("doca_rdma_set_max_num_connections", unsafe {
            sys::doca_rdma_set_max_num_connections(self.r(), n)
        })
    }

    /// `doca_rdma_set_rnr_retry_count`.
    pub fn set_rnr_retry_count(&mut self, n: u8) -> Result<()> {
        // SAFETY: as above.
        check("doca_rdma_set_rnr_retry_count", unsafe {
            sys::doca_rdma_set_rnr_retry_count(self.r(), n)
        })
    }

    /// `doca_rdma_set_sl`: the service level of the context's packets.
    pub fn set_sl(&mut self, sl: u32) -> Result<()> {
        // SAFETY: as above.
        check("doca_rdma_set_sl", unsafe {
            sys::doca_rdma_set_sl(self.r(), sl)
        })
    }

    /// `doca_rdma_get_sl`.
    pub fn sl(&self) -> Result<u32> {
        let mut sl = 0;
        // SAFETY: the context is alive; `sl` is a valid out-pointer.
        check("doca_rdma_get_sl", unsafe {
            sys::doca_rdma_get_sl(self.r(), &mut sl)
        })?;
        Ok(sl)
    }

    /// `doca_rdma_set_mtu` with the MTU in bytes (256, 512, 1024, 2048 or 4096; anything
    /// else is `DOCA_ERROR_INVALID_VALUE` without calling DOCA).
    pub fn set_mtu(&mut self, bytes: u32) -> Result<()> {
        let Some(mtu) = mtu_size(bytes) else {
            return Err(Error {
                call: "doca_rdma_set_mtu",
                code: doca_error::DOCA_ERROR_INVALID_VALUE,
            });
        };
        // SAFETY: as above.
        check("doca_rdma_set_mtu", unsafe {
            sys::doca_rdma_set_mtu(self.r(), mtu)
        })
    }

    /// `doca_rdma_get_mtu`, in bytes (`None` for the raw-Ethernet value or one unknown to
    /// us). One the user did not set may change when the connection is made.
    pub fn mtu(&self) -> Result<Option<u32>> {
        let mut mtu = sys::doca_mtu_size::DOCA_MTU_SIZE_1K_BYTES;
        // SAFETY: the context is alive; `mtu` is a valid out-pointer.
        check("doca_rdma_get_mtu", unsafe {
            sys::doca_rdma_get_mtu(self.r(), &mut mtu)
        })?;
        Ok(MTU_SIZES
            .iter()
            .find(|(_, size)| *size == mtu)
            .map(|(bytes, _)| *bytes))
    }

    /// `doca_rdma_set_send_queue_size`.
    pub fn set_send_queue_size(&mut self, n: u32) -> Result<()> {
        // SAFETY: as above.
        check("doca_rdma_set_send_queue_size", unsafe {
            sys::doca_rdma_set_send_queue_size(self.r(), n)
        })
    }

    /// The context's state (IDLE if DOCA cannot tell).
    pub fn state(&self) -> doca_ctx_states {
        let mut state = doca_ctx_states::DOCA_CTX_STATE_IDLE;
        // SAFETY: the context is alive; `state` is a valid out-pointer (left IDLE on failure).
        unsafe { sys::doca_ctx_get_state(self.ctx.as_ptr(), &mut state) };
        state
    }

    /// `doca_ctx_start` (`DOCA_ERROR_IN_PROGRESS` is an asynchronous start under way). Also
    /// a restart after a stop reached IDLE: then, once every task of the earlier run is freed,
    /// their entries are dropped (their handles name no task any more) and a new connection
    /// must be exported and connected, as DOCA asks after a stop.
    pub fn start(&mut self) -> Result<()> {
        if self.tasks.iter().all(Option::is_none) && !self.tasks.is_empty() {
            self.base += self.tasks.len();
            self.tasks.clear();
            let base = self.base;
            let shared = self.shared();
            shared.base = base;
            shared.in_flight.clear();
            shared.user.clear();
        }
        // SAFETY: the context is alive; DOCA checks its state.
        check("doca_ctx_start", unsafe {
            sys::doca_ctx_start(self.ctx.as_ptr())
        })
    }

    /// `doca_ctx_stop` (AGAIN, IN_USE and IN_PROGRESS mean: progress and look again). A stop
    /// DOCA accepted destroys the connection: the next export makes a new one.
    pub fn stop(&mut self) -> Result<()> {
        // SAFETY: the context is alive; DOCA checks its state and its tasks.
        let rc = unsafe { sys::doca_ctx_stop(self.ctx.as_ptr()) };
        if rc == doca_error::DOCA_SUCCESS || rc == doca_error::DOCA_ERROR_IN_PROGRESS {
            self.connection = None;
        }
        check("doca_ctx_stop", rc)
    }

    /// Exports the connection details (the blob for the peer); the connection is kept for
    /// [`RdmaCtx::connect`] and the send tasks.
    pub fn export(&mut self) -> Result<Vec<u8>> {
        let mut blob: *const c_void = ptr::null();
        let mut len = 0usize;
        let mut conn = ptr::null_mut();
        // SAFETY: the context is alive (DOCA checks it is started); out-pointers are valid.
        let rc = unsafe { sys::doca_rdma_export(self.r(), &mut blob, &mut len, &mut conn) };
        check("doca_rdma_export", rc)?;
        let unexpected = Error {
            call: "doca_rdma_export",
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        };
        if blob.is_null() {
            return Err(unexpected);
        }
        self.connection = Some(NonNull::new(conn).ok_or(unexpected)?);
        // SAFETY: DOCA returned `len` readable bytes at `blob`, valid until the next export.
        Ok(unsafe { std::slice::from_raw_parts(blob.cast::<u8>(), len) }.to_vec())
    }

    /// `doca_rdma_connect` to the peer's exported details (NOT_CONNECTED before an export).
    pub fn connect(&mut self, peer: &[u8]) -> Result<()> {
        let conn = self.connection.ok_or(Error {
            call: "doca_rdma_connect",
            code: doca_error::DOCA_ERROR_NOT_CONNECTED,
        })?;
        // SAFETY: the blob is a valid slice; the connection came from our export.
        check("doca_rdma_connect", unsafe {
            sys::doca_rdma_connect(self.r(), peer.as_ptr().cast(), peer.len(), conn.as_ptr())
        })
    }

    fn shared(&mut self) -> &mut Shared<H> {
        // SAFETY: `shared` came from Box::leak in `new` and is freed only in Drop; the
        // callbacks (its only other users) run inside `progress`, which borrows `self`
        // mutably, so no callback runs while this borrow lives.
        unsafe { self.shared.as_mut() }
    }

    /// The callbacks' handler.
    pub fn handler(&mut self) -> &mut H {
        &mut self.shared().handler
    }

    fn pin(&mut self, buf: &Arc<BufInner>) {
        if !self.pinned.iter().any(|p| Arc::ptr_eq(p, buf)) {
            self.pinned.push(buf.clone());
        }
    }

    fn push(&mut self, raw: Raw, buf: Option<&Buf>, user: u64) -> usize {
        if let Some(b) = buf {
            self.pin(&b.0);
        }
        let i = self.base + self.tasks.len();
        self.tasks.push(Some(Task {
            raw,
            buf: buf.map(|b| b.0.clone()),
        }));
        let shared = self.shared();
        shared.in_flight.push(false);
        shared.user.push(user);
        i
    }

    /// Allocates a send task bound to the exported connection, with `buf` as its source
    /// (`None`: an empty message). Fails as `doca_rdma_task_send_allocate_init`.
    pub fn alloc_send(&mut self, buf: Option<&Buf>, user: u64) -> Result<SendTask> {
        let call = "doca_rdma_task_send_allocate_init";
        let conn = self.connection.ok_or(Error {
            call,
            code: doca_error::DOCA_ERROR_NOT_CONNECTED,
        })?;
        let src = buf.map_or(ptr::null_mut(), |b| b.0.raw.as_ptr());
        let ud = doca_data {
            u64_: (self.base + self.tasks.len()) as u64,
        };
        let mut raw = ptr::null_mut();
        // SAFETY: context, connection and buf (or NULL) are alive; `raw` is a valid
        // out-pointer; DOCA checks the context's state.
        let rc = unsafe {
            sys::doca_rdma_task_send_allocate_init(self.r(), conn.as_ptr(), src, ud, &mut raw)
        };
        check(call, rc)?;
        let raw = NonNull::new(raw).ok_or(Error {
            call,
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        Ok(SendTask(self.push(Raw::Send(raw), buf, user)))
    }

    /// Allocates a receive task into `buf` (`None`: only empty messages). Fails as
    /// `doca_rdma_task_receive_allocate_init`.
    pub fn alloc_recv(&mut self, buf: Option<&Buf>, user: u64) -> Result<RecvTask> {
        let call = "doca_rdma_task_receive_allocate_init";
        let dst = buf.map_or(ptr::null_mut(), |b| b.0.raw.as_ptr());
        let ud = doca_data {
            u64_: (self.base + self.tasks.len()) as u64,
        };
        let mut raw = ptr::null_mut();
        // SAFETY: context and buf (or NULL) are alive; `raw` is a valid out-pointer; DOCA
        // checks the context's state.
        let rc = unsafe { sys::doca_rdma_task_receive_allocate_init(self.r(), dst, ud, &mut raw) };
        check(call, rc)?;
        let raw = NonNull::new(raw).ok_or(Error {
            call,
            code: doca_error::DOCA_ERROR_UNEXPECTED,
        })?;
        Ok(RecvTask(self.push(Raw::Recv(raw), buf, user)))
    }

    /// Where task number `number` is in `tasks` (out of range for a task of an earlier run).
    fn local(&self, number: usize) -> usize {
        number.checked_sub(self.base).unwrap_or(usize::MAX)
    }

    /// Whether the task is allocated (not freed).
    pub fn is_allocated(&self, task: impl Into<AnyTask>) -> bool {
        self.tasks
            .get(self.local(task.into().index()))
            .is_some_and(Option::is_some)
    }

    /// Whether the task was submitted and has not completed yet.
    pub fn in_flight(&mut self, task: impl Into<AnyTask>) -> bool {
        let i = self.local(task.into().index());
        self.shared().in_flight.get(i).copied().unwrap_or(false)
    }

    /// Sets a send task's source: `Some((buf, len))` sends the first `len` bytes of `buf`,
    /// `None` an empty message. Fails as `doca_buf_set_data` (the task is in flight or freed,
    /// or `len` is beyond the buf: INVALID_VALUE / IN_USE).
    pub fn set_send_source(&mut self, task: SendTask, source: Option<(&Buf, usize)>) -> Result<()> {
        let busy = Error {
            call: "doca_buf_set_data",
            code: doca_error::DOCA_ERROR_IN_USE,
        };
        if self.in_flight(task) {
            return Err(busy);
        }
        let i = self.local(task.0);
        let Some(Some(Task {
            raw: Raw::Send(raw),
            buf: current,
        })) = self.tasks.get(i)
        else {
            return Err(busy);
        };
        let (raw, same) = (
            *raw,
            match (current, source) {
                (Some(c), Some((b, _))) => Arc::ptr_eq(c, &b.0),
                _ => false,
            },
        );
        if let (false, Some((b, _))) = (same, source) {
            self.pin(&b.0);
        }
        let Some(Some(entry)) = self.tasks.get_mut(i) else {
            return Err(busy);
        };
        match source {
            None => {
                // SAFETY: the task is alive and not in flight; NULL is an empty message.
                unsafe { sys::doca_rdma_task_send_set_src_buf(raw.as_ptr(), ptr::null()) };
                entry.buf = None;
            }
            Some((buf, len)) => {
                // SAFETY: the task using the buf is not in flight (checked above) and `self`
                // is borrowed mutably; other tasks never share a send buf here.
                unsafe { buf.set_data(0, len) }?;
                // SAFETY: task and buf are alive; the buf is kept with the task below.
                unsafe { sys::doca_rdma_task_send_set_src_buf(raw.as_ptr(), buf.0.raw.as_ptr()) };
                if !same {
                    entry.buf = Some(buf.0.clone());
                }
            }
        }
        Ok(())
    }

    /// Submits a task. Fails as `doca_task_submit`, with IN_USE if the task is in flight or
    /// freed; AGAIN, FULL and NO_MEMORY are DOCA's backpressure (the task stays ours).
    ///
    /// # Safety
    /// Until the task completes (its [`TaskEvent`] is reported), the memory under its buf
    /// must not be read (a receive) or written (a send) by the caller.
    pub unsafe fn submit(&mut self, task: impl Into<AnyTask>) -> Result<()> {
        let i = self.local(task.into().index());
        let busy = Error {
            call: "doca_task_submit",
            code: doca_error::DOCA_ERROR_IN_USE,
        };
        if self.shared().in_flight.get(i).copied().unwrap_or(true) {
            return Err(busy);
        }
        let Some(Some(entry)) = self.tasks.get(i) else {
            return Err(busy);
        };
        let raw = entry.as_task();
        self.shared().in_flight[i] = true;
        // SAFETY: the task is alive and not in flight; the caller keeps off its memory.
        let rc = unsafe { sys::doca_task_submit(raw) };
        if rc != doca_error::DOCA_SUCCESS {
            self.shared().in_flight[i] = false;
        }
        check("doca_task_submit", rc)
    }

    /// Frees every allocated task that is not in flight (after a stop, flushed tasks come
    /// back through their callbacks first); returns how many remain allocated.
    pub fn free_idle_tasks(&mut self) -> usize {
        let mut left = 0;
        for i in 0..self.tasks.len() {
            let busy = self.shared().in_flight.get(i).copied().unwrap_or(false);
            match &self.tasks[i] {
                Some(_) if busy => left += 1,
                Some(task) => {
                    let raw = task.as_task();
                    // SAFETY: the task is alive and not in flight.
                    unsafe { sys::doca_task_free(raw) };
                    self.tasks[i] = None;
                }
                None => {}
            }
        }
        left
    }

    /// One `doca_pe_progress` call: whether anything happened (loop until `false`, as
    /// doca_pe.h asks). Callbacks run inside it.
    pub fn progress(&mut self) -> bool {
        // SAFETY: the engine is alive; the callbacks reach `shared`, which `&mut self`
        // keeps otherwise unborrowed.
        unsafe { sys::doca_pe_progress(self.pe.raw.as_ptr()) != 0 }
    }

    /// The engine's notification handle (readable once progress is possible, when armed).
    pub fn notification_handle(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to the engine, which lives as long as `self`.
        unsafe { BorrowedFd::borrow_raw(self.pe.fd) }
    }

    /// `doca_pe_request_notification`: arms the handle.
    pub fn request_notification(&mut self) -> Result<()> {
        // SAFETY: the engine is alive.
        check("doca_pe_request_notification", unsafe {
            sys::doca_pe_request_notification(self.pe.raw.as_ptr())
        })
    }

    /// `doca_pe_clear_notification` after an event was received through the handle.
    pub fn clear_notification(&mut self) -> Result<()> {
        // SAFETY: the engine and its handle are alive.
        check("doca_pe_clear_notification", unsafe {
            sys::doca_pe_clear_notification(self.pe.raw.as_ptr(), self.pe.fd)
        })
    }
}

impl<H: TaskHandler> Drop for RdmaCtx<H> {
    fn drop(&mut self) {
        if self.state() != doca_ctx_states::DOCA_CTX_STATE_IDLE {
            // Never destroy what DOCA may still use: the context, its engine and device, its
            // callbacks' state, its tasks and their bufs (so their mmaps and memory) stay.
            std::mem::forget(std::mem::take(&mut self.tasks));
            std::mem::forget(std::mem::take(&mut self.pinned));
            return;
        }
        self.free_idle_tasks();
        // Tasks of an IDLE context are not in flight; drop what is left anyway.
        self.tasks.clear();
        // SAFETY: the context is IDLE and has no task allocated.
        if !teardown("doca_rdma_destroy", unsafe {
            sys::doca_rdma_destroy(self.r())
        }) {
            // Still alive and attached: its engine and callbacks' state stay with it (its
            // tasks are freed, so the bufs may go).
            return;
        }
        self.pinned.clear();
        // SAFETY: came from Box::leak in `new`; the context that referenced it is destroyed.
        drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
        // SAFETY: dropped once, here, after the context.
        unsafe { ManuallyDrop::drop(&mut self.pe) };
        // SAFETY: dropped once, here, after the context and its engine.
        unsafe { ManuallyDrop::drop(&mut self.dev) };
    }
}

unsafe extern "C" fn send_done<H: TaskHandler>(
    _task: *mut sys::doca_rdma_task_send,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: DOCA calls this only for contexts made by `RdmaCtx::new`, inside progress.
    unsafe { report::<H>(ud, ctx_ud, |user| TaskEvent::SendDone { user }) };
}

unsafe extern "C" fn send_failed<H: TaskHandler>(
    task: *mut sys::doca_rdma_task_send,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: DOCA hands us a live task.
    let task = unsafe { sys::doca_rdma_task_send_as_task(task) };
    // SAFETY: as above: the task is live inside its callback.
    let status = unsafe { sys::doca_task_get_status(task) };
    // SAFETY: as in `send_done`.
    unsafe { report::<H>(ud, ctx_ud, |user| TaskEvent::SendFailed { user, status }) };
}

unsafe extern "C" fn recv_done<H: TaskHandler>(
    task: *mut sys::doca_rdma_task_receive,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: valid in the success callback, per DOCA.
    let len = unsafe { sys::doca_rdma_task_receive_get_result_len(task) } as usize;
    // SAFETY: as in `send_done`.
    unsafe { report::<H>(ud, ctx_ud, |user| TaskEvent::RecvDone { user, len }) };
}

unsafe extern "C" fn recv_failed<H: TaskHandler>(
    task: *mut sys::doca_rdma_task_receive,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: DOCA hands us a live task.
    let task = unsafe { sys::doca_rdma_task_receive_as_task(task) };
    // SAFETY: as above: the task is live inside its callback.
    let status = unsafe { sys::doca_task_get_status(task) };
    // SAFETY: as in `send_done`.
    unsafe { report::<H>(ud, ctx_ud, |user| TaskEvent::RecvFailed { user, status }) };
}

/// Marks the task done and hands its event to the handler.
///
/// # Safety
/// `ctx_ud` is the user data `RdmaCtx::<H>::new` set (its live `Shared<H>`), and the caller
/// is a DOCA callback running inside `RdmaCtx::progress`, so nothing else borrows it.
unsafe fn report<H: TaskHandler>(
    ud: doca_data,
    ctx_ud: doca_data,
    event: impl FnOnce(u64) -> TaskEvent,
) {
    // SAFETY: the caller guarantees the pointer is our live, unborrowed `Shared<H>`.
    let Some(shared) = (unsafe { ctx_ud.ptr.cast::<Shared<H>>().as_mut() }) else {
        return;
    };
    // SAFETY: every task of ours carries its number in the u64 member.
    let number = unsafe { ud.u64_ } as usize;
    let i = number.checked_sub(shared.base).unwrap_or(usize::MAX);
    if let Some(f) = shared.in_flight.get_mut(i) {
        *f = false;
    }
    if let Some(&user) = shared.user.get(i) {
        shared.handler.on_task(event(user));
    }
}
