//! Owning wrappers over the verbs objects: each destroys its object on drop and keeps the
//! objects it depends on alive (a QP its CQs and PD, everything its context), so destruction
//! always happens in the order rdma-core requires.
//!
//! A destroy verb that fails leaves its object alive in the provider (and maybe in the NIC),
//! still using what it depends on. Then nothing it depends on is destroyed either: the wrapper
//! logs one error line and leaks its references to its parents (they are never destroyed, the
//! context never closed); a QP that could not be destroyed keeps every memory region of its PD
//! registered; and memory whose region was not deregistered must not be freed by its owner,
//! who learns it from [`MemoryRegion::deregistration`].

use std::ffi::{c_int, c_void, CStr};
use std::io;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::ffi::{self, ibv_qp_cap, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc};
use crate::{check, Error, Library, Result};

fn null_error(verb: &'static str) -> Error {
    let source = io::Error::last_os_error();
    let source = match source.raw_os_error() {
        Some(0) | None => io::Error::from_raw_os_error(libc::ENOMEM),
        Some(_) => source,
    };
    Error::Verb { verb, source }
}

fn non_null<T>(verb: &'static str, p: *mut T) -> Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(|| null_error(verb))
}

/// Whether a destroy verb's result `rc` says the object is gone. When it is not, logs one
/// error line naming what is `leaked` in consequence (the caller leaks it).
fn destroyed(verb: &'static str, rc: c_int, leaked: &str) -> bool {
    match check(verb, rc) {
        Ok(()) => true,
        Err(e) => {
            log::error!("{e}; leaking {leaked}, which the device may still use");
            false
        }
    }
}

/// The devices libibverbs lists (`ibv_get_device_list`), freed on drop. Contexts opened from
/// it stay valid after it is dropped.
#[derive(Debug)]
pub struct DeviceList {
    lib: &'static Library,
    list: NonNull<*mut ffi::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// Lists the RDMA devices (loads libibverbs on first use).
    pub fn new() -> Result<Self> {
        let lib = Library::get()?;
        let mut n: c_int = 0;
        // SAFETY: `n` is a live out-parameter; the list is freed in Drop.
        let list = unsafe { (lib.fns.ibv_get_device_list)(&mut n) };
        let list = non_null("ibv_get_device_list", list)?;
        Ok(Self {
            lib,
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no device is listed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The devices, in libibverbs' order.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len).filter_map(move |i| {
            // SAFETY: the array has `len` valid entries (plus a NULL terminator) while `self`
            // lives.
            let dev = unsafe { *self.list.as_ptr().add(i) };
            NonNull::new(dev).map(|dev| Device {
                lib: self.lib,
                dev,
                _list: PhantomData,
            })
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { (self.lib.fns.ibv_free_device_list)(self.list.as_ptr()) };
    }
}

/// One listed device, valid while its [`DeviceList`] lives.
#[derive(Debug, Clone, Copy)]
pub struct Device<'a> {
    lib: &'static Library,
    dev: NonNull<ffi::ibv_device>,
    _list: PhantomData<&'a DeviceList>,
}

impl Device<'_> {
    /// The kernel device name (e.g. `mlx5_0`, `rxe0`).
    pub fn name(&self) -> String {
        // SAFETY: the device is valid while the list lives.
        let name = unsafe { (self.lib.fns.ibv_get_device_name)(self.dev.as_ptr()) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: libibverbs returns a NUL-terminated string owned by the device.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// Opens the device (`ibv_open_device`).
    pub fn open(&self) -> Result<Context> {
        // SAFETY: the device is valid while the list lives; the context is closed in Drop.
        let ctx = unsafe { (self.lib.fns.ibv_open_device)(self.dev.as_ptr()) };
        let ctx = non_null("ibv_open_device", ctx)?;
        Ok(Context(Arc::new(ContextInner { lib: self.lib, ctx })))
    }
}

#[derive(Debug)]
struct ContextInner {
    lib: &'static Library,
    ctx: NonNull<ffi::ibv_context>,
}

// SAFETY: rdma-core's verbs may be called on one object from any thread (providers lock what
// they share); the pointer is owned by this value.
unsafe impl Send for ContextInner {}
// SAFETY: as above: every verb we call through `&self` is thread-safe in libibverbs.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: every object created from the context holds an Arc to it, so this runs last
        // (an object that could not be destroyed leaked its Arc, so then this never runs).
        let rc = unsafe { (self.lib.fns.ibv_close_device)(self.ctx.as_ptr()) };
        // Nothing of ours depends on the context any more: there is nothing else to keep.
        destroyed("ibv_close_device", rc, "the device context");
    }
}

/// An open device (`ibv_context`); cloning shares it.
#[derive(Debug, Clone)]
pub struct Context(Arc<ContextInner>);

/// `ibv_port_attr` plus room for fields newer rdma-core releases append to it (see
/// [`Context::query_port`]).
#[repr(C)]
struct PortAttrBuffer {
    attr: ffi::ibv_port_attr,
    _newer_fields: [u8; ffi::PORT_ATTR_ROOM_FOR_NEWER_FIELDS],
}

impl Context {
    fn fns(&self) -> &'static ffi::Functions {
        &self.0.lib.fns
    }

    /// Destroys `obj`, an object of this context, with its destroy verb `destroy`; returns
    /// whether it is gone. When it is not, it lives on in the context, which is then leaked
    /// (never closed), after one error line naming `what` the object is.
    ///
    /// # Safety
    /// `destroy` is `verb`, the destroy verb for `obj`'s type; `obj` is alive, unused from now
    /// on, and destroyed once.
    unsafe fn destroy_child<T>(
        &self,
        verb: &'static str,
        destroy: unsafe extern "C" fn(*mut T) -> c_int,
        obj: NonNull<T>,
        what: &str,
    ) -> bool {
        // SAFETY: the caller's guarantees.
        let rc = unsafe { destroy(obj.as_ptr()) };
        let gone = destroyed(verb, rc, &format!("{what} and the device context"));
        if !gone {
            std::mem::forget(self.clone());
        }
        gone
    }

    /// The raw context, for calls this layer does not wrap.
    pub fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.0.ctx.as_ptr()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<ffi::ibv_device_attr> {
        let mut attr = MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: the context is open; `attr` is a live, writable ibv_device_attr.
        let rc = unsafe { (self.fns().ibv_query_device)(self.as_ptr(), attr.as_mut_ptr()) };
        check("ibv_query_device", rc)?;
        // SAFETY: zeroed is a valid ibv_device_attr (plain integers), and the verb filled it.
        Ok(unsafe { attr.assume_init() })
    }

    /// `ibv_query_port`.
    ///
    /// In current rdma-core `ibv_query_port` is a header macro: an inline function that asks
    /// the provider's extended `query_port` with the caller's struct size, or else zeroes the
    /// struct and calls the exported `ibv_query_port` symbol, which is declared with
    /// `struct _compat_ibv_port_attr` (the leading fields of `ibv_port_attr`). We take that
    /// second path: zero a buffer and call the exported symbol. The provider writes the
    /// `ibv_port_attr` of *its* rdma-core release, which may have fields after ours, so the
    /// buffer has [`ffi::PORT_ATTR_ROOM_FOR_NEWER_FIELDS`] spare bytes behind our struct; we
    /// read only our fields.
    pub fn query_port(&self, port: u8) -> Result<ffi::ibv_port_attr> {
        let mut buf = MaybeUninit::<PortAttrBuffer>::zeroed();
        // SAFETY: the context is open; the buffer is zeroed, writable and larger than any
        // ibv_port_attr a provider writes (see above).
        let rc = unsafe {
            (self.fns().ibv_query_port)(
                self.as_ptr(),
                port,
                buf.as_mut_ptr().cast::<ffi::_compat_ibv_port_attr>(),
            )
        };
        check("ibv_query_port", rc)?;
        // SAFETY: zeroed is valid for the buffer (plain integers), and the verb filled it.
        Ok(unsafe { buf.assume_init() }.attr)
    }

    /// `ibv_query_gid`: the GID at `index` of `port`'s table, in network byte order.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        let index = c_int::try_from(index)
            .map_err(|_| Error::Invalid(format!("GID index {index} is out of range")))?;
        let mut gid = ffi::ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open; `gid` is a live, writable ibv_gid.
        let rc = unsafe { (self.fns().ibv_query_gid)(self.as_ptr(), port, index, &mut gid) };
        check("ibv_query_gid", rc)?;
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        // SAFETY: the context is open; the PD is deallocated in Drop.
        let pd = unsafe { (self.fns().ibv_alloc_pd)(self.as_ptr()) };
        let pd = non_null("ibv_alloc_pd", pd)?;
        Ok(ProtectionDomain(Arc::new(PdInner {
            ctx: self.clone(),
            pd,
            qp_stuck: AtomicBool::new(false),
        })))
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        // SAFETY: the context is open; the channel is destroyed in Drop.
        let ch = unsafe { (self.fns().ibv_create_comp_channel)(self.as_ptr()) };
        let ch = non_null("ibv_create_comp_channel", ch)?;
        Ok(CompletionChannel(Arc::new(ChannelInner {
            ctx: self.clone(),
            ch,
        })))
    }

    /// `ibv_create_cq` with at least `cqe` entries, reporting to `channel` if given.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
        comp_vector: u32,
    ) -> Result<CompletionQueue> {
        let cqe = c_int::try_from(cqe)
            .map_err(|_| Error::Invalid(format!("{cqe} CQ entries are too many")))?;
        let vector = c_int::try_from(comp_vector)
            .map_err(|_| Error::Invalid(format!("completion vector {comp_vector}")))?;
        let ch = channel.map_or(ptr::null_mut(), |c| c.0.ch.as_ptr());
        // SAFETY: the context and channel are valid; the CQ is destroyed in Drop (before the
        // channel, which it keeps alive).
        let cq =
            unsafe { (self.fns().ibv_create_cq)(self.as_ptr(), cqe, ptr::null_mut(), ch, vector) };
        let cq = non_null("ibv_create_cq", cq)?;
        Ok(CompletionQueue(Arc::new(CqInner {
            ctx: self.clone(),
            channel: channel.cloned(),
            cq,
        })))
    }
}

#[derive(Debug)]
struct PdInner {
    ctx: Context,
    pd: NonNull<ffi::ibv_pd>,
    /// A queue pair of this PD could not be destroyed: it may still read and write any
    /// region of the PD, so none is deregistered (see [`MemoryRegion`]'s Drop).
    qp_stuck: AtomicBool,
}

// SAFETY: see ContextInner.
unsafe impl Send for PdInner {}
// SAFETY: see ContextInner.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        let dealloc = self.ctx.fns().ibv_dealloc_pd;
        // SAFETY: MRs and QPs hold an Arc to the PD, so none is left (one that could not be
        // destroyed leaked its Arc, so then this never runs).
        unsafe {
            self.ctx
                .destroy_child("ibv_dealloc_pd", dealloc, self.pd, "the protection domain")
        };
    }
}

/// A protection domain; cloning shares it.
#[derive(Debug, Clone)]
pub struct ProtectionDomain(Arc<PdInner>);

/// What [`ProtectionDomain::create_qp`] needs.
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// CQ for send completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ for receive completions.
    pub recv_cq: &'a CompletionQueue,
    /// Requested queue sizes (`max_inline_data` included).
    pub cap: ibv_qp_cap,
    /// QP type (`IBV_QPT_RC` ...).
    pub qp_type: ffi::ibv_qp_type,
    /// Whether every send completes with a CQE (`false`: only those with
    /// `IBV_SEND_SIGNALED`).
    pub sq_sig_all: bool,
}

impl ProtectionDomain {
    /// Registers `len` bytes at `addr` (`ibv_reg_mr`) with `IBV_ACCESS_*` bits `access`.
    ///
    /// # Safety
    /// The memory must stay allocated (and not be moved) until the returned region is dropped
    /// and no work request that uses it is outstanding; and after that, freeing it is sound
    /// only once the region's [`MemoryRegion::deregistration`] says it succeeded (otherwise
    /// the device may still write into it: leak the memory). Queue pairs that use the region
    /// must be dropped before it.
    pub unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: ffi::ibv_access_flags,
    ) -> Result<MemoryRegion> {
        let access = c_int::try_from(access)
            .map_err(|_| Error::Invalid(format!("access flags {access:#x}")))?;
        // SAFETY: the PD is valid; the caller guarantees the memory outlives the region.
        let mr = unsafe {
            (self.0.ctx.fns().ibv_reg_mr)(self.0.pd.as_ptr(), addr.cast::<c_void>(), len, access)
        };
        let mr = non_null("ibv_reg_mr", mr)?;
        Ok(MemoryRegion {
            pd: self.clone(),
            mr,
            deregistered: Deregistration::default(),
        })
    }

    /// `ibv_create_qp`. The returned QP's [`QueuePair::cap`] holds the sizes the provider
    /// actually granted (`max_inline_data` included).
    pub fn create_qp(&self, init: QpInit<'_>) -> Result<QueuePair> {
        let mut attr = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: init.send_cq.as_ptr(),
            recv_cq: init.recv_cq.as_ptr(),
            srq: ptr::null_mut(),
            cap: init.cap,
            qp_type: init.qp_type,
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        // SAFETY: the PD and both CQs are valid and kept alive by the QP, which is destroyed
        // in Drop; `attr` is a live, writable init attr.
        let qp = unsafe { (self.0.ctx.fns().ibv_create_qp)(self.0.pd.as_ptr(), &mut attr) };
        let qp = non_null("ibv_create_qp", qp)?;
        Ok(QueuePair {
            pd: self.clone(),
            send_cq: init.send_cq.clone(),
            recv_cq: init.recv_cq.clone(),
            qp,
            cap: attr.cap,
        })
    }
}

/// A registered memory region, deregistered on drop, unless a queue pair of its protection
/// domain could not be destroyed (it may still use the region): then, as when `ibv_dereg_mr`
/// fails, the region stays registered and its [`MemoryRegion::deregistration`] never says
/// done, so the memory's owner leaks the memory.
#[derive(Debug)]
pub struct MemoryRegion {
    pd: ProtectionDomain,
    mr: NonNull<ffi::ibv_mr>,
    deregistered: Deregistration,
}

/// Whether a [`MemoryRegion`] was deregistered, for the owner of its memory: the memory may be
/// freed only once [`Deregistration::done`] is true. It stays false while the region lives
/// and for ever when deregistering failed or was skipped (the device may still write into the
/// memory, which must then be leaked). Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Deregistration(Arc<AtomicBool>);

impl Deregistration {
    /// True once `ibv_dereg_mr` succeeded: the device no longer uses the memory.
    pub fn done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

// SAFETY: see ContextInner; the region's fields are only read.
unsafe impl Send for MemoryRegion {}
// SAFETY: see ContextInner.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Local key, for scatter/gather entries.
    #[inline]
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is valid while self lives; libibverbs never changes lkey.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// Remote key, for the peer's RDMA operations.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as in `lkey`.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    /// Tells the memory's owner, after this region is dropped, whether the memory may be
    /// freed (see [`Deregistration`]).
    pub fn deregistration(&self) -> Deregistration {
        self.deregistered.clone()
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.pd.0.qp_stuck.load(Ordering::Acquire) {
            // A QP of the PD is still alive and may write into the region: keep it registered,
            // and its PD (the QP's failure was the error logged).
            log::warn!("not deregistering a memory region that a queue pair still alive may use");
            std::mem::forget(self.pd.clone());
            return;
        }
        // SAFETY: the region was registered by ibv_reg_mr and is deregistered once; QPs using
        // it are dropped first by their owner (documented on `reg_mr`).
        let rc = unsafe { (self.pd.0.ctx.fns().ibv_dereg_mr)(self.mr.as_ptr()) };
        if destroyed(
            "ibv_dereg_mr",
            rc,
            "the memory region and its protection domain",
        ) {
            self.deregistered.0.store(true, Ordering::Release);
        } else {
            // Still registered: the PD must outlive it. `deregistered` stays false, so the
            // memory's owner leaks the memory too.
            std::mem::forget(self.pd.clone());
        }
    }
}

#[derive(Debug)]
struct ChannelInner {
    ctx: Context,
    ch: NonNull<ffi::ibv_comp_channel>,
}

// SAFETY: see ContextInner.
unsafe impl Send for ChannelInner {}
// SAFETY: see ContextInner.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        let destroy = self.ctx.fns().ibv_destroy_comp_channel;
        // SAFETY: CQs using the channel hold an Arc to it, so none is left (one that could not
        // be destroyed leaked its Arc, so then this never runs).
        unsafe {
            self.ctx.destroy_child(
                "ibv_destroy_comp_channel",
                destroy,
                self.ch,
                "the completion channel",
            )
        };
    }
}

/// A completion event channel; cloning shares it.
#[derive(Debug, Clone)]
pub struct CompletionChannel(Arc<ChannelInner>);

impl CompletionChannel {
    /// The descriptor that becomes readable when a completion event is queued.
    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel is valid while self lives; `fd` never changes.
        unsafe { (*self.0.ch.as_ptr()).fd }
    }

    /// The descriptor, borrowed for as long as the channel.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor stays open until the channel is destroyed, which cannot happen
        // while `self` is borrowed.
        unsafe { BorrowedFd::borrow_raw(self.fd()) }
    }

    /// Makes [`CompletionChannel::take_events`] return instead of blocking.
    pub fn set_nonblocking(&self) -> Result<()> {
        let fd = self.fd();
        // SAFETY: fcntl on a descriptor we own, with integer arguments.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(null_error("fcntl(F_GETFL)"));
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(null_error("fcntl(F_SETFL, O_NONBLOCK)"));
        }
        Ok(())
    }

    /// Takes every queued completion event (`ibv_get_cq_event`) and acknowledges each at once
    /// (`ibv_ack_cq_events`); returns how many there were. Needs a non-blocking channel
    /// ([`CompletionChannel::set_nonblocking`]), else it blocks until one event arrives.
    pub fn take_events(&self) -> Result<u32> {
        let fns = self.0.ctx.fns();
        let mut events = 0u32;
        loop {
            let mut cq: *mut ffi::ibv_cq = ptr::null_mut();
            let mut cq_context: *mut c_void = ptr::null_mut();
            // SAFETY: the channel is valid; the out-pointers are live locals.
            let rc =
                unsafe { (fns.ibv_get_cq_event)(self.0.ch.as_ptr(), &mut cq, &mut cq_context) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || events > 0 {
                    return Ok(events);
                }
                return Err(Error::Verb {
                    verb: "ibv_get_cq_event",
                    source: e,
                });
            }
            if !cq.is_null() {
                // SAFETY: the event names a CQ bound to this channel; a CQ cannot be destroyed
                // while it has unacknowledged events, so it is valid here.
                unsafe { (fns.ibv_ack_cq_events)(cq, 1) };
            }
            events += 1;
        }
    }
}

#[derive(Debug)]
struct CqInner {
    ctx: Context,
    channel: Option<CompletionChannel>,
    cq: NonNull<ffi::ibv_cq>,
}

// SAFETY: see ContextInner (providers lock their CQs in poll_cq/req_notify_cq).
unsafe impl Send for CqInner {}
// SAFETY: see ContextInner.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let destroy = self.ctx.fns().ibv_destroy_cq;
        // SAFETY: QPs using the CQ hold an Arc to it, so none is left (one that could not be
        // destroyed leaked its Arc, so then this never runs); events were acknowledged as they
        // were taken.
        let gone = unsafe {
            self.ctx
                .destroy_child("ibv_destroy_cq", destroy, self.cq, "the completion queue")
        };
        if !gone {
            // The CQ may still report to its channel: keep it.
            std::mem::forget(self.channel.clone());
        }
    }
}

/// A completion queue; cloning shares it.
#[derive(Debug, Clone)]
pub struct CompletionQueue(Arc<CqInner>);

impl CompletionQueue {
    /// The raw CQ, for calls this layer does not wrap.
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.0.cq.as_ptr()
    }

    /// Polls up to `wcs.len()` completions at once (the inline `ibv_poll_cq`, i.e. the
    /// context's `ops.poll_cq`); returns how many were written to the front of `wcs`.
    #[inline]
    pub fn poll(&self, wcs: &mut [ibv_wc]) -> Result<usize> {
        let n = c_int::try_from(wcs.len()).unwrap_or(c_int::MAX);
        let cq = self.as_ptr();
        // SAFETY: the CQ and its context are valid while self lives.
        let poll = unsafe { (*(*cq).context).ops.poll_cq };
        let poll = poll.ok_or_else(|| missing_op("poll_cq"))?;
        // SAFETY: `wcs` has room for `n` entries; the provider writes at most `n`.
        let rc = unsafe { poll(cq, n, wcs.as_mut_ptr()) };
        if rc < 0 {
            return Err(Error::Verb {
                verb: "ibv_poll_cq",
                source: io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(usize::try_from(rc).unwrap_or(0).min(wcs.len()))
    }

    /// Arms the CQ's notification (the inline `ibv_req_notify_cq`, i.e. `ops.req_notify_cq`):
    /// the next completion (or next solicited one) queues an event on its channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let cq = self.as_ptr();
        // SAFETY: the CQ and its context are valid while self lives.
        let notify = unsafe { (*(*cq).context).ops.req_notify_cq };
        let notify = notify.ok_or_else(|| missing_op("req_notify_cq"))?;
        // SAFETY: the CQ is valid.
        let rc = unsafe { notify(cq, c_int::from(solicited_only)) };
        check("ibv_req_notify_cq", rc)
    }
}

fn missing_op(op: &str) -> Error {
    Error::Verb {
        verb: "ibv_context_ops",
        source: io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the provider has no {op}"),
        ),
    }
}

/// A queue pair, destroyed on drop (before the CQs and PD it keeps alive).
#[derive(Debug)]
pub struct QueuePair {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    qp: NonNull<ffi::ibv_qp>,
    cap: ibv_qp_cap,
}

// SAFETY: see ContextInner (providers lock their queues in post_send/post_recv).
unsafe impl Send for QueuePair {}

impl QueuePair {
    /// The QP number the peer addresses.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is valid while self lives; qp_num never changes.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// The queue sizes the provider granted at creation.
    pub fn cap(&self) -> ibv_qp_cap {
        self.cap
    }

    /// `ibv_modify_qp` with the fields of `attr` that `mask` (`IBV_QP_*` bits) selects.
    pub fn modify(&self, attr: &ffi::ibv_qp_attr, mask: ffi::ibv_qp_attr_mask) -> Result<()> {
        let mut attr = *attr;
        let mask = c_int::try_from(mask)
            .map_err(|_| Error::Invalid(format!("attribute mask {mask:#x}")))?;
        // SAFETY: the QP is valid; `attr` is a live copy (the verb does not keep it).
        let rc = unsafe { (self.pd.0.ctx.fns().ibv_modify_qp)(self.qp.as_ptr(), &mut attr, mask) };
        check("ibv_modify_qp", rc)
    }

    /// Posts every request of `list` with one call (the inline `ibv_post_send`, i.e.
    /// `ops.post_send`). Inline requests are checked against [`QueuePair::cap`] first. On
    /// failure, [`Error::Post`] names the first request that was not posted.
    ///
    /// # Safety
    /// Every non-inline scatter/gather entry must lie in memory registered (with its `lkey`)
    /// in this QP's protection domain, and that memory must stay registered and unmodified
    /// until the request's completion (or, for unsignaled requests, a later signaled one) has
    /// been polled. Inline entries must be readable for the duration of this call.
    #[inline]
    pub unsafe fn post_send(&self, list: &mut SendList) -> Result<()> {
        if list.wrs.is_empty() {
            return Ok(());
        }
        for (wr, sge) in list.wrs.iter().zip(&list.sges) {
            if wr.send_flags & ffi::IBV_SEND_INLINE != 0
                && wr.num_sge > 0
                && sge.length > self.cap.max_inline_data
            {
                return Err(Error::InlineTooLarge {
                    len: sge.length as usize,
                    max: self.cap.max_inline_data,
                });
            }
        }
        let first = list.link();
        let qp = self.qp.as_ptr();
        // SAFETY: the QP and its context are valid while self lives.
        let post = unsafe { (*(*qp).context).ops.post_send };
        let post = post.ok_or_else(|| missing_op("post_send"))?;
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: `first` heads a list linked over `list`'s vectors, which are not touched
        // until the call returns; the caller guarantees the memory rules above.
        let rc = unsafe { post(qp, first, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(Error::Post {
            verb: "ibv_post_send",
            index: index_of(first, bad, list.wrs.len()),
            source: io::Error::from_raw_os_error(rc.abs()),
        })
    }

    /// Posts every request of `list` with one call (the inline `ibv_post_recv`, i.e.
    /// `ops.post_recv`).
    ///
    /// # Safety
    /// Every scatter/gather entry must lie in memory registered (with its `lkey`) in this QP's
    /// protection domain for local write, which must stay registered and not be read or
    /// written by us until the request's completion has been polled.
    #[inline]
    pub unsafe fn post_recv(&self, list: &mut RecvList) -> Result<()> {
        if list.wrs.is_empty() {
            return Ok(());
        }
        let first = list.link();
        let qp = self.qp.as_ptr();
        // SAFETY: the QP and its context are valid while self lives.
        let post = unsafe { (*(*qp).context).ops.post_recv };
        let post = post.ok_or_else(|| missing_op("post_recv"))?;
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: as in post_send.
        let rc = unsafe { post(qp, first, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(Error::Post {
            verb: "ibv_post_recv",
            index: index_of(first, bad, list.wrs.len()),
            source: io::Error::from_raw_os_error(rc.abs()),
        })
    }
}

impl QueuePair {
    /// Destroys the QP now (`ibv_destroy_qp`), as dropping it does, but says whether it worked:
    /// once this returns `Ok`, the device neither reads nor writes memory for the QP's work
    /// requests and puts no more completions of it on its CQs (those already there stay, to be
    /// polled). On failure (the errno kept), the QP stays alive as a failed drop leaves it:
    /// its CQs and protection domain are kept and no region of the PD is ever deregistered.
    pub fn destroy(mut self) -> Result<()> {
        let result = self.destroy_once();
        // Destroyed or leaked: either way Drop must not destroy it again.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read once out of a value that is never used or dropped again;
        // the Arcs read here are then dropped normally (a stuck QP took its own clones).
        unsafe {
            drop(ptr::read(&this.pd));
            drop(ptr::read(&this.send_cq));
            drop(ptr::read(&this.recv_cq));
        }
        result
    }

    /// Destroys the QP (called once, by [`QueuePair::destroy`] or Drop); on failure, keeps
    /// what the QP may still use (see [`QueuePair::destroy`]).
    fn destroy_once(&mut self) -> Result<()> {
        // SAFETY: the QP was created by ibv_create_qp and is destroyed once (`destroy` keeps
        // Drop from running after it), before the CQs and PD this value keeps alive.
        let rc = unsafe { (self.pd.0.ctx.fns().ibv_destroy_qp)(self.qp.as_ptr()) };
        let result = check("ibv_destroy_qp", rc);
        if let Err(e) = &result {
            log::error!(
                "{e}; leaking the queue pair, its completion queues, its protection domain \
                 with every memory region in it, and the device context, which the device may \
                 still use"
            );
            // The QP may still post completions to its CQs and read or write the memory its
            // work requests name: keep the CQs and the PD, and no region of the PD is
            // deregistered (so the memory's owners leak the memory).
            self.pd.0.qp_stuck.store(true, Ordering::Release);
            std::mem::forget(self.pd.clone());
            std::mem::forget(self.send_cq.clone());
            std::mem::forget(self.recv_cq.clone());
        }
        result
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // A failure is logged and leaks what the QP may still use.
        let _ = self.destroy_once();
    }
}

/// Index of `bad` in the list that starts at `first` (0 when the provider did not say).
fn index_of<T>(first: *mut T, bad: *mut T, len: usize) -> usize {
    if bad.is_null() {
        return 0;
    }
    let offset = (bad as usize).wrapping_sub(first as usize) / std::mem::size_of::<T>().max(1);
    offset.min(len)
}

/// A work request libibverbs walks as a list: `next`, and `sg_list` over `num_sge` entries.
trait WorkRequest: Sized {
    /// Whether the request has a scatter/gather entry.
    fn has_sge(&self) -> bool;
    /// Sets the `sg_list` and `next` pointers.
    fn set_links(&mut self, sg_list: *mut ibv_sge, next: *mut Self);
}

/// Both work-request structs name the fields alike.
macro_rules! work_request {
    ($($wr:ty),*) => {$(
        impl WorkRequest for $wr {
            fn has_sge(&self) -> bool {
                self.num_sge > 0
            }
            fn set_links(&mut self, sg_list: *mut ibv_sge, next: *mut Self) {
                self.sg_list = sg_list;
                self.next = next;
            }
        }
    )*};
}

work_request!(ibv_send_wr, ibv_recv_wr);

/// Links `wrs` into one list, request `i` pointing at entry `i` of `sges` (those with an
/// entry); returns the head. [`SendList`] and [`RecvList`] keep one entry per request.
fn link<W: WorkRequest>(wrs: &mut [W], sges: &mut [ibv_sge]) -> *mut W {
    debug_assert_eq!(wrs.len(), sges.len());
    let n = wrs.len();
    let sges = sges.as_mut_ptr();
    let head = wrs.as_mut_ptr();
    for (i, wr) in wrs.iter_mut().enumerate() {
        // `wrapping_add` keeps this free of unsafe; the indices are in bounds.
        let sg_list = if wr.has_sge() {
            sges.wrapping_add(i)
        } else {
            ptr::null_mut()
        };
        let next = if i + 1 < n {
            head.wrapping_add(i + 1)
        } else {
            ptr::null_mut()
        };
        wr.set_links(sg_list, next);
    }
    head
}

#[inline]
fn zeroed_send_wr() -> ibv_send_wr {
    // SAFETY: ibv_send_wr is plain data (integers, raw pointers and unions of them), for which
    // all-zero bytes are valid (null pointers, zero counts).
    unsafe { MaybeUninit::<ibv_send_wr>::zeroed().assume_init() }
}

/// A list of send work requests posted with one [`QueuePair::post_send`]; reusable (clear it
/// and push again) without allocating. Each request has at most one scatter/gather entry.
#[derive(Default)]
pub struct SendList {
    wrs: Vec<ibv_send_wr>,
    sges: Vec<ibv_sge>,
}

// SAFETY: the list owns plain data; its pointers are set only while `post_send` runs and point
// into its own vectors.
unsafe impl Send for SendList {}

impl std::fmt::Debug for SendList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendList")
            .field("len", &self.wrs.len())
            .finish()
    }
}

impl SendList {
    /// An empty list with room for `n` requests.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            wrs: Vec::with_capacity(n),
            sges: Vec::with_capacity(n),
        }
    }

    /// Appends an `IBV_WR_SEND` of `sge` (none: a zero-length message) with `IBV_SEND_*`
    /// bits `flags` (`IBV_SEND_SIGNALED`, `IBV_SEND_INLINE`, ...).
    #[inline]
    pub fn push_send(&mut self, wr_id: u64, sge: Option<ibv_sge>, flags: ffi::ibv_send_flags) {
        self.push_request(wr_id, ffi::IBV_WR_SEND, sge, flags);
    }

    /// Appends an `IBV_WR_SEND_WITH_IMM` of `sge` (none: a zero-length message) carrying the
    /// 32-bit `imm`, stored in network byte order as the field requires (the receiver's
    /// completion has `IBV_WC_WITH_IMM` set and `imm_data` in network order), with `IBV_SEND_*`
    /// bits `flags`.
    #[inline]
    pub fn push_send_with_imm(
        &mut self,
        wr_id: u64,
        sge: Option<ibv_sge>,
        imm: u32,
        flags: ffi::ibv_send_flags,
    ) {
        let wr = self.push_request(wr_id, ffi::IBV_WR_SEND_WITH_IMM, sge, flags);
        wr.imm_data = imm.to_be();
    }

    /// Appends an `IBV_WR_RDMA_WRITE` of `sge` (none: a zero-length write) to `remote_addr`
    /// under `rkey`, with `IBV_SEND_*` bits `flags`. A zero-length write touches no memory on
    /// either side (the responder checks neither address nor key, IBTA C9-88); it still needs
    /// `IBV_ACCESS_REMOTE_WRITE` on the responder's QP, and being ordered behind every earlier
    /// request, its completion says they all completed.
    pub fn push_rdma_write(
        &mut self,
        wr_id: u64,
        sge: Option<ibv_sge>,
        remote_addr: u64,
        rkey: u32,
        flags: ffi::ibv_send_flags,
    ) {
        let wr = self.push_request(wr_id, ffi::IBV_WR_RDMA_WRITE, sge, flags);
        wr.wr.rdma = ffi::ibv_send_wr_rdma { remote_addr, rkey };
    }

    /// Appends a request of `opcode` with its entry and returns it for the opcode's fields.
    #[inline]
    fn push_request(
        &mut self,
        wr_id: u64,
        opcode: ffi::ibv_wr_opcode,
        sge: Option<ibv_sge>,
        flags: ffi::ibv_send_flags,
    ) -> &mut ibv_send_wr {
        let mut wr = zeroed_send_wr();
        wr.wr_id = wr_id;
        wr.opcode = opcode;
        wr.send_flags = flags;
        wr.num_sge = c_int::from(sge.is_some());
        self.sges.push(sge.unwrap_or_default());
        self.wrs.push(wr);
        let last = self.wrs.len() - 1;
        &mut self.wrs[last]
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Removes every request (keeps the allocation).
    #[inline]
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
    }

    /// Links `next` and `sg_list` pointers over the current vectors; returns the head.
    #[inline]
    fn link(&mut self) -> *mut ibv_send_wr {
        link(&mut self.wrs, &mut self.sges)
    }
}

/// A list of receive work requests posted with one [`QueuePair::post_recv`]; reusable.
#[derive(Debug, Default)]
pub struct RecvList {
    wrs: Vec<ibv_recv_wr>,
    sges: Vec<ibv_sge>,
}

// SAFETY: as for SendList.
unsafe impl Send for RecvList {}

impl RecvList {
    /// An empty list with room for `n` requests.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            wrs: Vec::with_capacity(n),
            sges: Vec::with_capacity(n),
        }
    }

    /// Appends a receive into `sge` (none: only a zero-length message fits).
    #[inline]
    pub fn push(&mut self, wr_id: u64, sge: Option<ibv_sge>) {
        self.wrs.push(ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: c_int::from(sge.is_some()),
        });
        self.sges.push(sge.unwrap_or_default());
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Removes every request (keeps the allocation).
    #[inline]
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
    }

    /// Links `next` and `sg_list` pointers over the current vectors; returns the head.
    #[inline]
    fn link(&mut self) -> *mut ibv_recv_wr {
        link(&mut self.wrs, &mut self.sges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_link_their_requests_and_entries() {
        let mut list = SendList::with_capacity(2);
        list.push_send(
            1,
            Some(ibv_sge {
                addr: 0x1000,
                length: 8,
                lkey: 7,
            }),
            ffi::IBV_SEND_SIGNALED | ffi::IBV_SEND_INLINE,
        );
        list.push_send(2, None, 0);
        let head = list.link();
        let sges = list.sges.as_mut_ptr();
        assert_eq!(head, list.wrs.as_mut_ptr());
        assert_eq!(list.wrs[0].next, head.wrapping_add(1));
        assert!(list.wrs[1].next.is_null());
        assert_eq!(list.wrs[0].sg_list, sges);
        assert!(list.wrs[1].sg_list.is_null());
        assert_eq!(list.wrs[1].num_sge, 0);
        assert_eq!(list.wrs[0].opcode, ffi::IBV_WR_SEND);
        list.clear();
        list.push_rdma_write(3, None, 0x2000, 9, ffi::IBV_SEND_SIGNALED);
        assert_eq!(list.wrs[0].opcode, ffi::IBV_WR_RDMA_WRITE);
        assert_eq!(list.wrs[0].num_sge, 0);
        // SAFETY: `rdma` is the member push_rdma_write wrote.
        let rdma = unsafe { list.wrs[0].wr.rdma };
        assert_eq!((rdma.remote_addr, rdma.rkey), (0x2000, 9));
        list.clear();
        list.push_send_with_imm(4, None, 0x0102_0304, ffi::IBV_SEND_SIGNALED);
        assert_eq!(list.wrs[0].opcode, ffi::IBV_WR_SEND_WITH_IMM);
        assert_eq!(list.wrs[0].num_sge, 0);
        assert_eq!(
            list.wrs[0].imm_data.to_ne_bytes(),
            [1, 2, 3, 4],
            "immediate data goes in network byte order"
        );
        list.clear();
        list.push_send(
            1,
            Some(ibv_sge {
                addr: 0x1000,
                length: 8,
                lkey: 7,
            }),
            0,
        );
        list.push_send(2, None, 0);
        let head = list.link();
        assert_eq!(index_of(head, head.wrapping_add(1), 2), 1);
        assert_eq!(index_of(head, ptr::null_mut(), 2), 0);

        let mut recv = RecvList::with_capacity(3);
        recv.push(5, None);
        recv.push(6, Some(ibv_sge::default()));
        let head = recv.link();
        assert_eq!(recv.wrs[0].next, head.wrapping_add(1));
        assert!(recv.wrs[0].sg_list.is_null());
        assert!(!recv.wrs[1].sg_list.is_null());
        recv.clear();
        assert!(recv.is_empty());
    }
}
