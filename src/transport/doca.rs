//! The DOCA transport: one `doca_rdma` RC context with an out-of-band export/connect.
//!
//! The transport is the one owner of its device, progress engine (PE), context, memory map,
//! inventory, bufs and tasks; everything runs on the thread that calls it. DOCA callbacks only
//! run inside `doca_pe_progress`, and they only record what happened into an [`Inbox`] reached
//! through the context's user data: no allocation beyond reserved capacity, no panics, no
//! progress calls, nothing that could unwind into C.
//!
//! Life cycle, in the order DOCA documents it (docs/doca.md has the sources):
//! 1. `new`: open the device, ask its capabilities (send and receive tasks, the largest
//!    message: the slot size is clamped to it), create and configure everything while the
//!    context is IDLE (send queue size, task pools, event mode), `doca_ctx_start`, progress
//!    until the context may export (STARTING with an asynchronous start, RUNNING with a
//!    synchronous one), export the connection blob for our hello.
//! 2. `connect`: `doca_rdma_connect` with the peer's blob, then progress (bounded by the
//!    session deadline) until the context is RUNNING; only then allocate the tasks (and, on a
//!    sender, post the credit receives).
//! 3. Teardown, also after errors: free every task not in flight, `doca_ctx_stop` (AGAIN,
//!    IN_USE and IN_PROGRESS mean: keep progressing), progress until IDLE freeing the flushed
//!    tasks as they come back (bounded), release every buf, destroy the context, the PE, the
//!    inventory and the mmap, close the device.
//!
//! Memory: one buffer of `slots × slot_size` bytes, one mmap over it, one buf and one task per
//! slot. A receiver's tasks are receives (their buf's data length is reset before each repost,
//! since DOCA appends); a sender's are sends (their buf's data window is set to the message
//! before each submit, or no buf at all for an empty message).
//!
//! Blocking, as doca_pe.h describes it: a poll progresses until `doca_pe_progress` returns 0
//! and never arms. The notification is armed only right before the caller sleeps
//! ([`DataPath::before_wait`]), once per sleep (not again while an arm is outstanding), and
//! the PE is progressed until 0 after arming, so a completion that came between the last
//! progress and the arm is collected instead of slept through; the caller then skips the
//! sleep. A wake-up ([`DataPath::on_wakeup`]) ends the arm: the next sleep arms again. The PE
//! runs in `DOCA_PE_EVENT_MODE_PROGRESS_ALL`, where arming clears what was raised before, so
//! `doca_pe_clear_notification` is never needed. Should the SDK refuse that mode, the default
//! selective mode is used: the notification is cleared on the wake-up that received it (as
//! doca_pe.h asks), and the set-up and teardown loops, which never sleep on the handle, clear
//! it when they find it raised.

use std::ffi::{c_void, CStr};
use std::os::fd::BorrowedFd;
use std::ptr;
use std::time::{Duration, Instant};

use doca_sys as sys;
use sys::{doca_data, doca_error, doca_error_t};

use super::slots::{chosen_device, SlotMemory};
use super::{
    receiver_arrivals, sender_events, Arrived, Completion, CreditRoute, DataPath, RecvPath,
    RecvSlot, SendEvent, SendPath, SetupParams, SetupStep, StagingSlot, WaitHandle,
};
use crate::proto::{Role, TransportKind};
use crate::{Error, Result};

const NAME: &str = "doca";
/// How long teardown waits for the context to drain to IDLE.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `new` waits for a started context to accept export (an asynchronous start).
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// Receiver-not-ready retries. Our protocol posts receives before Ready and returns credits
/// only after re-posting, so RNR means a bug: fail after a bounded budget instead of forever.
const RNR_RETRY_COUNT: u8 = 6;
/// DOCA 3.3's `DOCA_ERROR_DEVICE_FATAL_ERROR`. Our declarations stop at 30 so that they still
/// match the older SDKs; an older runtime never returns it.
pub(crate) const DOCA_ERROR_DEVICE_FATAL_ERROR: doca_error_t = doca_error(31);
const MEMLOCK_HINT: &str =
    "memory registration needs CAP_IPC_LOCK or a memlock limit above the slot memory: in a \
container add --cap-add=IPC_LOCK (root) or --ulimit memlock=-1 (any user); on a host run as root \
or raise ulimit -l";
const DEVICE_HINT: &str =
    "DOCA lists no such device: check `rdma-container doctor` and the --device nodes \
passed to the container";
const BACKPRESSURE_HINT: &str =
    "a DOCA task or buffer pool is exhausted (backpressure): more work was \
outstanding than the pools sized from --credits allow";
const FULL_HINT: &str =
    "the device's queue stayed full (backpressure that progress did not relieve): the peer \
stopped taking messages, or --credits is above what the device sustains; lower --credits";
/// How long a submit refused with AGAIN, FULL or NO_MEMORY keeps progressing and retrying.
const BACKPRESSURE_TIMEOUT: Duration = Duration::from_secs(2);
const BUG_HINT: &str =
    "DOCA rejected a call in this state: an internal error in rdma-container, please report it \
with RUST_LOG=debug output";
const CONNECTION_HINT: &str =
    "the RDMA connection to the peer failed: check that both ends use the RoCE-network \
addresses and RoCE v2 GIDs, and that UDP port 4791 is not blocked";
const FATAL_HINT: &str =
    "the device reported a fatal error (DOCA_ERROR_DEVICE_FATAL_ERROR): the NIC needs a \
reset or a firmware check (mlxfwreset, dmesg); restart the session afterwards";

/// What the callbacks report; lives in a `Box` whose address is the context's user data.
#[derive(Debug)]
struct Inbox {
    /// Successful completions, capacity reserved up front.
    done: Vec<Completion>,
    /// The first task error seen (DOCA error code and which side).
    failure: Option<(bool, doca_error_t)>,
    /// Per task index (`0..slots`: data tasks, `slots..2*slots`: credit tasks): is it
    /// submitted and not yet completed?
    in_flight: Vec<bool>,
    /// Number of slots; task indexes at or above it are credit tasks.
    slots: usize,
    /// A callback had no room to record (cannot happen with the reserved capacity).
    overflow: bool,
}

impl Inbox {
    fn record(
        &mut self,
        slot: usize,
        completion: Option<Completion>,
        error: Option<(bool, doca_error_t)>,
    ) {
        if let Some(f) = self.in_flight.get_mut(slot) {
            *f = false;
        }
        if let Some(c) = completion {
            if self.done.len() < self.done.capacity() {
                self.done.push(c);
            } else {
                self.overflow = true;
            }
        }
        if let (None, Some(e)) = (self.failure, error) {
            self.failure = Some(e);
        }
    }
}

/// The DOCA implementation of [`SendPath`] and [`RecvPath`].
#[derive(Debug)]
pub(crate) struct DocaTransport {
    role: Role,
    /// The ibdev name, for errors.
    device: String,
    dev: *mut sys::doca_dev,
    pe: *mut sys::doca_pe,
    rdma: *mut sys::doca_rdma,
    ctx: *mut sys::doca_ctx,
    mmap: *mut sys::doca_mmap,
    inventory: *mut sys::doca_buf_inventory,
    connection: *mut sys::doca_rdma_connection,
    bufs: Vec<*mut sys::doca_buf>,
    send_tasks: Vec<*mut sys::doca_rdma_task_send>,
    recv_tasks: Vec<*mut sys::doca_rdma_task_receive>,
    inbox: *mut Inbox,
    notify_fd: i32,
    /// The PE runs in PROGRESS_ALL mode (arming clears the notification).
    progress_all: bool,
    /// `doca_pe_request_notification` was called and no wake-up has been seen since.
    armed: bool,
    memory: SlotMemory,
    /// Reused by every poll (no allocation on the data path).
    scratch: Vec<Completion>,
    blob: Vec<u8>,
    started: bool,
    connected: bool,
    closed: bool,
    /// The context never drained to IDLE: its objects (and the inbox) are deliberately leaked.
    leaked: bool,
}

// SAFETY: every DOCA object here is owned by this value and used only through `&mut self`, so
// from one thread at a time; DOCA objects are not tied to the thread that created them.
unsafe impl Send for DocaTransport {}

impl DocaTransport {
    /// Opens the device discovery chose, checks its capabilities, builds and starts the
    /// context and exports the connection blob. Tasks come later, in `connect`. On any
    /// failure, what was built is torn down.
    pub(crate) fn new(params: &SetupParams) -> Result<Self> {
        let choice = chosen_device(params, NAME)?;
        let mut inbox = Box::new(Inbox {
            done: Vec::with_capacity(params.slots * 4),
            failure: None,
            in_flight: vec![false; 2 * params.slots],
            slots: params.slots,
            overflow: false,
        });
        inbox.done.clear();
        let mut t = DocaTransport {
            role: params.role,
            device: choice.device.clone(),
            dev: ptr::null_mut(),
            pe: ptr::null_mut(),
            rdma: ptr::null_mut(),
            ctx: ptr::null_mut(),
            mmap: ptr::null_mut(),
            inventory: ptr::null_mut(),
            connection: ptr::null_mut(),
            bufs: Vec::with_capacity(params.slots),
            send_tasks: Vec::new(),
            recv_tasks: Vec::new(),
            inbox: Box::into_raw(inbox),
            notify_fd: -1,
            progress_all: false,
            armed: false,
            // Sized once the device's message size cap is known.
            memory: SlotMemory::new(0, 0)?,
            scratch: Vec::with_capacity(params.slots * 4),
            blob: Vec::new(),
            started: false,
            connected: false,
            closed: false,
            leaked: false,
        };
        // On error `t` is dropped, which tears down whatever was created.
        t.open_device(&choice.device)?;
        let slot_size = t.check_capabilities(params.slot_size, params.slots)?;
        t.memory = SlotMemory::new(params.slots, slot_size)?;
        t.build(params.slots, choice.gid_index)?;
        t.start()?;
        t.export()?;
        Ok(t)
    }

    fn open_device(&mut self, ibdev: &str) -> Result<()> {
        let mut list: *mut *mut sys::doca_devinfo = ptr::null_mut();
        let mut count: u32 = 0;
        check(
            "doca_devinfo_create_list",
            // SAFETY: out-pointers are valid locals.
            unsafe { sys::doca_devinfo_create_list(&mut list, &mut count) },
            None,
        )
        .map_err(|e| Error::unavailable(NAME, e.to_string()))?;
        let mut found = None;
        for i in 0..count as usize {
            // SAFETY: `list` holds `count` entries until destroy_list.
            let info = unsafe { *list.add(i) };
            let mut name = [0u8; 64];
            // SAFETY: `name` has the documented size (DOCA_DEVINFO_IBDEV_NAME_SIZE = 64).
            let rc = unsafe {
                sys::doca_devinfo_get_ibdev_name(info, name.as_mut_ptr().cast(), name.len() as u32)
            };
            if rc != doca_error::DOCA_SUCCESS {
                continue;
            }
            let name = CStr::from_bytes_until_nul(&name)
                .ok()
                .and_then(|c| c.to_str().ok());
            if name == Some(ibdev) {
                found = Some(info);
                break;
            }
        }
        let opened = match found {
            // SAFETY: `info` is an entry of the live list; `self.dev` receives the device.
            Some(info) => check(
                "doca_dev_open",
                unsafe { sys::doca_dev_open(info, &mut self.dev) },
                None,
            ),
            None => Err(Error::unavailable(
                NAME,
                format!("DOCA lists no device named {ibdev} ({DEVICE_HINT})"),
            )),
        };
        // SAFETY: the list came from create_list; the opened device stays valid without it.
        unsafe { sys::doca_devinfo_destroy_list(list) };
        opened
    }

    /// Asks the device whether it can run RC send and receive tasks, how large a message may
    /// be and how deep its queues are; returns the slot size to use (`wanted`, clamped to the
    /// device's cap). `slots` (the credits) must fit both queues: each end has up to `slots`
    /// sends (data or credits) and `slots` receives (data or credits) outstanding.
    fn check_capabilities(&mut self, wanted: usize, slots: usize) -> Result<usize> {
        // SAFETY: the device is open; its devinfo lives as long as it does.
        let info = unsafe { sys::doca_dev_as_devinfo(self.dev) };
        let unsupported = |what: &str, call: &str, rc: doca_error_t| {
            Error::unavailable(
                NAME,
                format!(
                    "device {} cannot run {what} ({call}: {})",
                    self.device,
                    error_name(rc)
                ),
            )
        };
        // SAFETY: `info` is the open device's devinfo.
        let rc = unsafe { sys::doca_rdma_cap_task_send_is_supported(info) };
        if rc != doca_error::DOCA_SUCCESS {
            return Err(unsupported(
                "RDMA send tasks",
                "doca_rdma_cap_task_send_is_supported",
                rc,
            ));
        }
        // SAFETY: as above.
        let rc = unsafe { sys::doca_rdma_cap_task_receive_is_supported(info) };
        if rc != doca_error::DOCA_SUCCESS {
            return Err(unsupported(
                "RDMA receive tasks",
                "doca_rdma_cap_task_receive_is_supported",
                rc,
            ));
        }
        let mut cap: u32 = 0;
        // SAFETY: as above; `cap` is a valid out-pointer.
        let rc = unsafe { sys::doca_rdma_cap_get_max_message_size(info, &mut cap) };
        if rc != doca_error::DOCA_SUCCESS || cap == 0 {
            return Err(unsupported(
                "RDMA messages (no maximum message size)",
                "doca_rdma_cap_get_max_message_size",
                rc,
            ));
        }
        for (queue, call) in [
            ("send", "doca_rdma_cap_get_max_send_queue_size"),
            ("receive", "doca_rdma_cap_get_max_recv_queue_size"),
        ] {
            let mut depth: u32 = 0;
            // SAFETY: `info` is the open device's devinfo; `depth` is a valid out-pointer.
            let rc = unsafe {
                if queue == "send" {
                    sys::doca_rdma_cap_get_max_send_queue_size(info, &mut depth)
                } else {
                    sys::doca_rdma_cap_get_max_recv_queue_size(info, &mut depth)
                }
            };
            if rc != doca_error::DOCA_SUCCESS {
                return Err(unsupported("RDMA queues (no queue size cap)", call, rc));
            }
            if usize::try_from(depth).is_ok_and(|d| slots > d) {
                return Err(Error::unavailable(
                    NAME,
                    format!(
                        "device {} has {queue} queues of at most {depth} tasks ({call}), fewer \
                         than the {slots} credits of this session: use --credits {depth} or less",
                        self.device
                    ),
                ));
            }
        }
        let cap = usize::try_from(cap).unwrap_or(usize::MAX);
        if wanted > cap {
            log::info!(
                "doca: device {} carries messages of at most {cap} bytes: the session's maximum \
                 message size is lowered from {wanted}",
                self.device
            );
        }
        Ok(wanted.min(cap))
    }

    /// Creates and configures everything while the context is IDLE (nothing is started).
    fn build(&mut self, slots: usize, gid_index: u32) -> Result<()> {
        let rw = sys::doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0;
        let depth = u32::try_from(slots).unwrap_or(u32::MAX);
        // SAFETY: the out-pointer is a field of `self`; what is passed is alive.
        let rc = unsafe { sys::doca_mmap_create(&mut self.mmap) };
        check("doca_mmap_create", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_mmap_set_permissions(self.mmap, rw) };
        check("doca_mmap_set_permissions", rc, None)?;
        // SAFETY: the range is `self.memory`, which outlives the mmap (or is leaked with it).
        let rc = unsafe {
            sys::doca_mmap_set_memrange(
                self.mmap,
                self.memory.as_mut_ptr().cast(),
                self.memory.len(),
            )
        };
        check("doca_mmap_set_memrange", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_mmap_add_dev(self.mmap, self.dev) };
        check("doca_mmap_add_dev", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_mmap_start(self.mmap) };
        check("doca_mmap_start", rc, Some(MEMLOCK_HINT))?;
        // SAFETY: the out-pointer is a field of `self`; what is passed is alive.
        let rc = unsafe { sys::doca_buf_inventory_create(slots, &mut self.inventory) };
        check("doca_buf_inventory_create", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_buf_inventory_start(self.inventory) };
        check("doca_buf_inventory_start", rc, None)?;
        // SAFETY: the out-pointer is a field of `self`; what is passed is alive.
        let rc = unsafe { sys::doca_pe_create(&mut self.pe) };
        check("doca_pe_create", rc, None)?;
        // PROGRESS_ALL: every progress call progresses the context, and arming the
        // notification clears what was raised before (doca_pe.h, Linux).
        // SAFETY: the PE is alive and not progressing.
        let rc = unsafe {
            sys::doca_pe_set_event_mode(
                self.pe,
                sys::doca_pe_event_mode::DOCA_PE_EVENT_MODE_PROGRESS_ALL,
            )
        };
        self.progress_all = rc == doca_error::DOCA_SUCCESS;
        if !self.progress_all {
            log::debug!(
                "doca_pe_set_event_mode(PROGRESS_ALL): {}; using the selective mode",
                error_name(rc)
            );
        }
        // SAFETY: the out-pointer is a field of `self`; what is passed is alive.
        let rc = unsafe { sys::doca_pe_get_notification_handle(self.pe, &mut self.notify_fd) };
        check("doca_pe_get_notification_handle", rc, None)?;
        // SAFETY: the out-pointer is a field of `self`; what is passed is alive.
        let rc = unsafe { sys::doca_rdma_create(self.dev, &mut self.rdma) };
        check("doca_rdma_create", rc, None)?;
        // SAFETY: the context was just created.
        self.ctx = unsafe { sys::doca_rdma_as_ctx(self.rdma) };
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_rdma_set_permissions(self.rdma, rw) };
        check("doca_rdma_set_permissions", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_rdma_set_gid_index(self.rdma, gid_index) };
        check("doca_rdma_set_gid_index", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_rdma_set_grh_enabled(self.rdma, 1) };
        check("doca_rdma_set_grh_enabled", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe {
            sys::doca_rdma_set_transport_type(
                self.rdma,
                sys::doca_rdma_transport_type::DOCA_RDMA_TRANSPORT_TYPE_RC,
            )
        };
        check("doca_rdma_set_transport_type", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_rdma_set_max_num_connections(self.rdma, 1) };
        check("doca_rdma_set_max_num_connections", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_rdma_set_rnr_retry_count(self.rdma, RNR_RETRY_COUNT) };
        check("doca_rdma_set_rnr_retry_count", rc, None)?;
        // At most `slots` sends are outstanding: data sends on a sender, credit sends
        // on a receiver (the send task pool has that size too).
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_rdma_set_send_queue_size(self.rdma, depth) };
        check("doca_rdma_set_send_queue_size", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe { sys::doca_pe_connect_ctx(self.pe, self.ctx) };
        check("doca_pe_connect_ctx", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe {
            sys::doca_rdma_task_send_set_conf(self.rdma, Some(send_done), Some(send_failed), depth)
        };
        check("doca_rdma_task_send_set_conf", rc, None)?;
        // SAFETY: what is passed was created above in `build` and is alive.
        let rc = unsafe {
            sys::doca_rdma_task_receive_set_conf(
                self.rdma,
                Some(recv_done),
                Some(recv_failed),
                depth,
            )
        };
        check("doca_rdma_task_receive_set_conf", rc, None)?;
        let user = doca_data {
            ptr: self.inbox.cast::<c_void>(),
        };
        // SAFETY: the context is alive; the inbox lives until the transport is dropped.
        let rc = unsafe { sys::doca_ctx_set_user_data(self.ctx, user) };
        check("doca_ctx_set_user_data", rc, None)?;
        // Bufs do not depend on the context: one per slot, now.
        for slot in 0..slots {
            let addr = self.memory.slot_ptr(slot).cast::<c_void>();
            let size = self.memory.size();
            let mut buf = ptr::null_mut();
            // SAFETY: the inventory and the mmap are started; the range is one slot of the
            // registered memory; `buf` is a valid out-pointer.
            let rc = unsafe {
                match self.role {
                    Role::Receiver => sys::doca_buf_inventory_buf_get_by_addr(
                        self.inventory,
                        self.mmap,
                        addr,
                        size,
                        &mut buf,
                    ),
                    Role::Sender => sys::doca_buf_inventory_buf_get_by_data(
                        self.inventory,
                        self.mmap,
                        addr,
                        size,
                        &mut buf,
                    ),
                }
            };
            check("doca_buf_inventory_buf_get_by_addr", rc, None)?;
            self.bufs.push(buf);
        }
        Ok(())
    }

    /// The context's state.
    fn state(&self) -> sys::doca_ctx_states {
        let mut state = sys::doca_ctx_states::DOCA_CTX_STATE_IDLE;
        // SAFETY: the context is alive; `state` is a valid out-pointer. On failure `state`
        // stays IDLE, which every caller treats as "not started".
        unsafe { sys::doca_ctx_get_state(self.ctx, &mut state) };
        state
    }

    /// Progresses until `done(state)` holds or `deadline` passes; returns the last state.
    fn progress_until(
        &mut self,
        deadline: Instant,
        done: impl Fn(sys::doca_ctx_states) -> bool,
    ) -> sys::doca_ctx_states {
        loop {
            let state = self.state();
            if done(state) || Instant::now() > deadline {
                return state;
            }
            if !self.progress_busy() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// `doca_ctx_start`, then progress until the context may export and connect: STARTING
    /// (an asynchronous start: `DOCA_ERROR_IN_PROGRESS`) or RUNNING (a synchronous one).
    fn start(&mut self) -> Result<()> {
        // SAFETY: the context is alive, configured and IDLE.
        let rc = unsafe { sys::doca_ctx_start(self.ctx) };
        if rc != doca_error::DOCA_ERROR_IN_PROGRESS {
            check("doca_ctx_start", rc, None)
                .map_err(|e| Error::unavailable(NAME, format!("device {}: {e}", self.device)))?;
        }
        self.started = true;
        let may_connect = |s: sys::doca_ctx_states| {
            s == sys::doca_ctx_states::DOCA_CTX_STATE_STARTING
                || s == sys::doca_ctx_states::DOCA_CTX_STATE_RUNNING
        };
        let state = self.progress_until(Instant::now() + START_TIMEOUT, may_connect);
        if !may_connect(state) {
            return Err(Error::unavailable(
                NAME,
                format!(
                    "device {}: the context is in state {} {START_TIMEOUT:?} after doca_ctx_start",
                    self.device,
                    state_name(state)
                ),
            ));
        }
        Ok(())
    }

    /// Exports our connection blob (carried in the hello).
    fn export(&mut self) -> Result<()> {
        let mut blob: *const c_void = ptr::null();
        let mut len: usize = 0;
        check(
            "doca_rdma_export",
            // SAFETY: the context is started; out-pointers are valid.
            unsafe { sys::doca_rdma_export(self.rdma, &mut blob, &mut len, &mut self.connection) },
            None,
        )?;
        if blob.is_null() || len > crate::proto::MAX_BLOB_LEN {
            return Err(Error::Doca {
                call: "doca_rdma_export",
                code: format!(
                    "connection details of {len} bytes (limit {})",
                    crate::proto::MAX_BLOB_LEN
                ),
                hint: None,
            });
        }
        // SAFETY: DOCA returned `len` readable bytes at `blob`, valid until the next export.
        self.blob = unsafe { std::slice::from_raw_parts(blob.cast::<u8>(), len) }.to_vec();
        Ok(())
    }

    /// Once RUNNING and connected: one task per slot (receives on a receiver, sends bound to
    /// the connection on a sender) plus one credit task per slot (the other kind).
    fn allocate_tasks(&mut self) -> Result<()> {
        let slots = self.memory.count();
        // Data tasks `0..slots` (receives on a receiver, sends on a sender, each with its
        // slot's buf), then credit tasks `slots..2*slots` (the other kind, no buf: DOCA's empty
        // message), stored after the other role's data tasks.
        for i in 0..2 * slots {
            let ud = doca_data { u64_: i as u64 };
            let buf = if i < slots {
                self.bufs[i]
            } else {
                ptr::null_mut()
            };
            let credit = if i < slots { "" } else { "(credit)" };
            let mut recv = ptr::null_mut();
            let mut send = ptr::null_mut();
            if (self.role == Role::Receiver) == (i < slots) {
                // SAFETY: the context is RUNNING and connected; the buf (or NULL) is ours and
                // alive; `recv` is a valid out-pointer.
                let rc = unsafe {
                    sys::doca_rdma_task_receive_allocate_init(self.rdma, buf, ud, &mut recv)
                };
                check_task("doca_rdma_task_receive_allocate_init", credit, rc)?;
                self.recv_tasks.push(recv);
            } else {
                // SAFETY: as above, and the connection is ours and connected.
                let rc = unsafe {
                    sys::doca_rdma_task_send_allocate_init(
                        self.rdma,
                        self.connection,
                        buf,
                        ud,
                        &mut send,
                    )
                };
                check_task("doca_rdma_task_send_allocate_init", credit, rc)?;
                self.send_tasks.push(send);
            }
        }
        Ok(())
    }

    /// Arms the notification (the handle becomes readable once progress is possible). A
    /// failure is the session's error: without the notification a wait could sleep through a
    /// completion.
    fn arm(&mut self) -> Result<()> {
        // SAFETY: the PE is alive.
        let rc = unsafe { sys::doca_pe_request_notification(self.pe) };
        check("doca_pe_request_notification", rc, None)?;
        self.armed = true;
        Ok(())
    }

    /// Selective event mode only: clears the notification if it was raised (doca_pe.h: call
    /// it after an event was received through the handle). PROGRESS_ALL needs no clear.
    fn clear_if_raised(&mut self) {
        if self.progress_all || !self.armed || self.notify_fd < 0 {
            return;
        }
        // SAFETY: the descriptor belongs to the PE, which is alive.
        let fd = unsafe { BorrowedFd::borrow_raw(self.notify_fd) };
        let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        let raised = matches!(
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
            Ok(1)
        );
        if raised {
            // SAFETY: the PE and its handle are alive; the handle fired.
            unsafe { sys::doca_pe_clear_notification(self.pe, self.notify_fd) };
            self.armed = false;
        }
    }

    /// Sender: (re)submits every idle credit receive (task index `slots + k` is
    /// `recv_tasks[k]`).
    fn post_credit_receives(&mut self) -> Result<()> {
        let slots = self.memory.count();
        for k in 0..self.recv_tasks.len() {
            if self.inbox().in_flight[slots + k] {
                continue;
            }
            let task = self.recv_tasks[k];
            // SAFETY: conversion of a live task.
            let task = unsafe { sys::doca_rdma_task_receive_as_task(task) };
            self.submit("doca_task_submit(credit receive)", task, slots + k)?;
        }
        Ok(())
    }

    fn inbox(&mut self) -> &mut Inbox {
        // SAFETY: `inbox` came from Box::into_raw in `new` and is freed only in Drop; no
        // callback runs while this borrow is alive (callbacks run inside doca_pe_progress only).
        unsafe { &mut *self.inbox }
    }

    /// Runs the PE until `doca_pe_progress` returns 0 (doca_pe.h); returns whether anything
    /// happened. It ends: each call runs at most one callback or state change, and nothing is
    /// submitted from inside progress (at most `2 × slots` tasks are in flight).
    fn progress(&mut self) -> bool {
        let mut any = false;
        // SAFETY: the PE is alive; callbacks only touch the inbox through its raw pointer.
        while unsafe { sys::doca_pe_progress(self.pe) } != 0 {
            any = true;
        }
        any
    }

    /// `progress` for the loops that never sleep on the handle (set-up, teardown, a credit
    /// wait): in selective mode a raised notification stops the engine until cleared.
    fn progress_busy(&mut self) -> bool {
        if self.progress() {
            return true;
        }
        self.clear_if_raised();
        self.progress()
    }

    /// Submits a task. A refusal that means "full" (AGAIN, FULL, NO_MEMORY) is backpressure:
    /// progress (completions free room) and try again, for at most `BACKPRESSURE_TIMEOUT`.
    fn submit(&mut self, call: &'static str, task: *mut sys::doca_task, slot: usize) -> Result<()> {
        let mut deadline = None;
        loop {
            self.inbox().in_flight[slot] = true;
            // SAFETY: the task belongs to this context and is not in flight (checked by the
            // caller, or refused by the previous try, which leaves it ours).
            let rc = unsafe { sys::doca_task_submit(task) };
            if rc == doca_error::DOCA_SUCCESS {
                return Ok(());
            }
            self.inbox().in_flight[slot] = false;
            if !matches!(
                rc,
                doca_error::DOCA_ERROR_AGAIN
                    | doca_error::DOCA_ERROR_FULL
                    | doca_error::DOCA_ERROR_NO_MEMORY
            ) {
                return check(call, rc, None);
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + BACKPRESSURE_TIMEOUT);
            if Instant::now() > deadline {
                return Err(Error::Doca {
                    call,
                    code: format!(
                        "{} (still refused after {BACKPRESSURE_TIMEOUT:?} of progress and retries)",
                        error_name(rc)
                    ),
                    hint: Some(FULL_HINT),
                });
            }
            if !self.progress_busy() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    fn failure_error(is_send: bool, code: doca_error_t) -> Error {
        let op = if is_send { "send" } else { "receive" };
        match code {
            doca_error::DOCA_ERROR_CONNECTION_RESET | doca_error::DOCA_ERROR_CONNECTION_ABORTED => {
                Error::TransportClosed { transport: NAME }
            }
            DOCA_ERROR_DEVICE_FATAL_ERROR => Error::Doca {
                call: if is_send {
                    "doca_rdma_task_send"
                } else {
                    "doca_rdma_task_receive"
                },
                code: format!("{} ({op} completion)", error_name(code)),
                hint: Some(FATAL_HINT),
            },
            doca_error::DOCA_ERROR_TOO_BIG => Error::Doca {
                call: if is_send {
                    "doca_rdma_task_send"
                } else {
                    "doca_rdma_task_receive"
                },
                code: error_name(code),
                hint: Some("a message larger than the receive slot"),
            },
            _ => Error::Doca {
                call: if is_send {
                    "doca_rdma_task_send"
                } else {
                    "doca_rdma_task_receive"
                },
                code: format!("{} ({op} completion)", error_name(code)),
                hint: Some(CONNECTION_HINT),
            },
        }
    }

    /// Stops the context and waits (bounded) until it is IDLE, freeing tasks as they return:
    /// every task not in flight is freed first (doca_pe.h), AGAIN, IN_USE and IN_PROGRESS
    /// from `doca_ctx_stop` mean "progress and try again".
    fn stop(&mut self) {
        if !self.started {
            return;
        }
        self.started = false;
        let idle = sys::doca_ctx_states::DOCA_CTX_STATE_IDLE;
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut stopping = false;
        loop {
            self.free_idle_tasks();
            let state = self.state();
            if state == idle {
                return;
            }
            if !stopping && state != sys::doca_ctx_states::DOCA_CTX_STATE_STOPPING {
                // SAFETY: the context is alive and started; no task is held by us.
                let rc = unsafe { sys::doca_ctx_stop(self.ctx) };
                match rc {
                    doca_error::DOCA_SUCCESS | doca_error::DOCA_ERROR_IN_PROGRESS => {
                        stopping = true
                    }
                    doca_error::DOCA_ERROR_AGAIN | doca_error::DOCA_ERROR_IN_USE => {}
                    other => {
                        // Not retried: wait (bounded) for the state, then leak if need be.
                        log::warn!("doca_ctx_stop: {}", error_name(other));
                        stopping = true;
                    }
                }
            }
            if Instant::now() > deadline {
                log::warn!(
                    "doca: the context did not reach IDLE within {STOP_TIMEOUT:?} (state {}); \
                     leaking it",
                    state_name(self.state())
                );
                // Never destroy objects DOCA may still use.
                self.leaked = true;
                return;
            }
            if !self.progress_busy() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Frees every task that is not in flight (after stop, flushed tasks come back first).
    /// Data tasks are task indexes `0..slots`, credit tasks `slots..2*slots`; each vector
    /// holds one kind, depending on the role.
    fn free_idle_tasks(&mut self) {
        let slots = self.memory.count();
        let (send_offset, recv_offset) = match self.role {
            Role::Sender => (0, slots),
            Role::Receiver => (slots, 0),
        };
        for k in 0..self.send_tasks.len() {
            if self
                .inbox()
                .in_flight
                .get(send_offset + k)
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            let t = &mut self.send_tasks[k];
            if !t.is_null() {
                // SAFETY: the task is allocated and not in flight.
                unsafe { sys::doca_task_free(sys::doca_rdma_task_send_as_task(*t)) };
                *t = ptr::null_mut();
            }
        }
        for k in 0..self.recv_tasks.len() {
            if self
                .inbox()
                .in_flight
                .get(recv_offset + k)
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            let t = &mut self.recv_tasks[k];
            if !t.is_null() {
                // SAFETY: the task is allocated and not in flight.
                unsafe { sys::doca_task_free(sys::doca_rdma_task_receive_as_task(*t)) };
                *t = ptr::null_mut();
            }
        }
    }

    /// Tears everything down in DOCA's order; safe after partial construction.
    fn teardown(&mut self) {
        self.stop();
        if self.leaked {
            return;
        }
        self.free_idle_tasks();
        // Each object is destroyed once, after everything that depends on it, and its pointer
        // nulled; null pointers are skipped.
        for buf in self.bufs.drain(..) {
            // SAFETY: the buf was taken from our inventory and no task uses it any more.
            unsafe { sys::doca_buf_dec_refcount(buf, ptr::null_mut()) };
        }
        if !self.rdma.is_null() {
            // SAFETY: the context is IDLE (stopped) and has no task allocated.
            log_failure("doca_rdma_destroy", unsafe {
                sys::doca_rdma_destroy(self.rdma)
            });
            self.rdma = ptr::null_mut();
            self.ctx = ptr::null_mut();
        }
        if !self.pe.is_null() {
            // SAFETY: its one context is destroyed.
            log_failure("doca_pe_destroy", unsafe { sys::doca_pe_destroy(self.pe) });
            self.pe = ptr::null_mut();
        }
        if !self.inventory.is_null() {
            // SAFETY: every buf is returned.
            log_failure("doca_buf_inventory_stop", unsafe {
                sys::doca_buf_inventory_stop(self.inventory)
            });
            // SAFETY: stopped, every buf returned.
            log_failure("doca_buf_inventory_destroy", unsafe {
                sys::doca_buf_inventory_destroy(self.inventory)
            });
            self.inventory = ptr::null_mut();
        }
        if !self.mmap.is_null() {
            // SAFETY: no buf points into it any more.
            log_failure("doca_mmap_stop", unsafe { sys::doca_mmap_stop(self.mmap) });
            // SAFETY: stopped, no buf points into it.
            log_failure("doca_mmap_destroy", unsafe {
                sys::doca_mmap_destroy(self.mmap)
            });
            self.mmap = ptr::null_mut();
        }
        if !self.dev.is_null() {
            // SAFETY: the context and the mmap using it are destroyed.
            log_failure("doca_dev_close", unsafe { sys::doca_dev_close(self.dev) });
            self.dev = ptr::null_mut();
        }
    }
}

impl DataPath for DocaTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Doca
    }

    fn local_blob(&self) -> Vec<u8> {
        self.blob.clone()
    }

    fn connect(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<SetupStep> {
        // DOCA's connect is local work plus progress to RUNNING, bounded by the deadline.
        self.connect_until(peer_blob, deadline)?;
        Ok(SetupStep::Done)
    }

    fn path_mtu(&self) -> Option<u32> {
        None
    }

    fn slot_size(&self) -> usize {
        self.memory.size()
    }

    fn credit_route(&self) -> CreditRoute {
        CreditRoute::InBand
    }

    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        if self.notify_fd < 0 || !self.connected {
            return None;
        }
        // SAFETY: the descriptor belongs to the PE, which lives as long as `self`.
        let fd = unsafe { BorrowedFd::borrow_raw(self.notify_fd) };
        Some(WaitHandle {
            fd,
            writable: false,
        })
    }

    fn before_wait(&mut self) -> Result<bool> {
        if self.closed || !self.connected {
            return Ok(false);
        }
        if !self.armed {
            self.arm()?;
        }
        // A completion between the last progress and the arm may raise nothing (an
        // edge-triggered arm, or one the engine already took from the CQ): collect it now.
        self.progress();
        let inbox = self.inbox();
        Ok(!inbox.done.is_empty() || inbox.failure.is_some() || inbox.overflow)
    }

    fn on_wakeup(&mut self) {
        if !self.armed {
            return;
        }
        if self.progress_all {
            // The arm fired; arming again (before the next sleep) clears it.
            self.armed = false;
        } else {
            // Selective: the event was received through the handle, clear it (doca_pe.h).
            self.clear_if_raised();
        }
    }

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.teardown();
            self.connected = false;
            self.notify_fd = -1;
            self.armed = false;
        }
    }
}

impl DocaTransport {
    /// Connects to the peer's exported blob, progressing until RUNNING or the deadline.
    fn connect_until(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<()> {
        if self.connected {
            return Err(misuse("connect called twice".to_owned()));
        }
        // SAFETY: the blob is a valid slice; the connection came from our export; the
        // context is STARTING or RUNNING (checked in `start`).
        let rc = unsafe {
            sys::doca_rdma_connect(
                self.rdma,
                peer_blob.as_ptr().cast(),
                peer_blob.len(),
                self.connection,
            )
        };
        check("doca_rdma_connect", rc, Some(CONNECTION_HINT))?;
        // An asynchronous start reaches RUNNING only now, during progress.
        let running = sys::doca_ctx_states::DOCA_CTX_STATE_RUNNING;
        let state = self.progress_until(deadline, |s| {
            s == running
                || s == sys::doca_ctx_states::DOCA_CTX_STATE_IDLE
                || s == sys::doca_ctx_states::DOCA_CTX_STATE_STOPPING
        });
        if state != running {
            return Err(Error::Doca {
                call: "doca_rdma_connect",
                code: format!(
                    "the context is {} instead of RUNNING at the session deadline",
                    state_name(state)
                ),
                hint: Some(CONNECTION_HINT),
            });
        }
        if let Some((is_send, code)) = self.inbox().failure.take() {
            return Err(Self::failure_error(is_send, code));
        }
        self.connected = true;
        self.allocate_tasks()?;
        if self.role == Role::Sender {
            self.post_credit_receives()?;
        }
        Ok(())
    }
}

impl DocaTransport {
    /// Collects the completions the callbacks recorded (progress until 0; no arming: that is
    /// `before_wait`'s, once per sleep).
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        if self.closed {
            return Err(Error::TransportClosed { transport: NAME });
        }
        self.progress();
        let inbox = self.inbox();
        out.append(&mut inbox.done);
        if inbox.overflow {
            return Err(misuse("completion queue overflow".to_owned()));
        }
        if let Some((is_send, code)) = inbox.failure.take() {
            return Err(Self::failure_error(is_send, code));
        }
        if self.role == Role::Sender {
            self.post_credit_receives()?;
        }
        Ok(())
    }

    /// Receiver: returns one credit (a zero-length send on a free credit task).
    fn post_credit(&mut self) -> Result<()> {
        let slots = self.memory.count();
        let deadline = Instant::now() + STOP_TIMEOUT;
        let index = loop {
            if let Some(i) = (slots..2 * slots).find(|&i| !self.inbox().in_flight[i]) {
                break i;
            }
            // Every credit send is in flight; their completions only need progress. Other
            // completions collected meanwhile stay in the inbox for the next poll.
            if Instant::now() > deadline {
                return Err(misuse(
                    "no credit send completed within 2 s (is the peer still there?)".to_owned(),
                ));
            }
            self.progress_busy();
        };
        let task = self.send_tasks[index - slots];
        // SAFETY: conversion of a live task.
        let task = unsafe { sys::doca_rdma_task_send_as_task(task) };
        self.submit("doca_task_submit(credit)", task, index)
    }
}

impl SendPath for DocaTransport {
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        self.memory.staging(slot)
    }

    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        let index = slot.index();
        let (Some(&task), Some(&buf)) = (self.send_tasks.get(index), self.bufs.get(index)) else {
            return Err(misuse(format!("send slot {index} does not exist")));
        };
        if task.is_null() || len > self.memory.size() || self.inbox().in_flight[index] {
            return Err(misuse(format!(
                "send slot {index} is busy or {len} bytes do not fit"
            )));
        }
        if len == 0 {
            // SAFETY: a NULL source is DOCA's zero-length message.
            unsafe { sys::doca_rdma_task_send_set_src_buf(task, ptr::null()) };
        } else {
            let data = self.memory.slot_ptr(index).cast::<c_void>();
            check(
                "doca_buf_set_data",
                // SAFETY: the window lies inside the buf's range (the slot); the buf is idle.
                unsafe { sys::doca_buf_set_data(buf, data, len) },
                None,
            )?;
            // SAFETY: the buf belongs to this task's mmap and stays alive until teardown.
            unsafe { sys::doca_rdma_task_send_set_src_buf(task, buf) };
        }
        // SAFETY: conversion of a live task.
        let task = unsafe { sys::doca_rdma_task_send_as_task(task) };
        // The token is gone: the completion callback mints it again from the task's index.
        self.submit("doca_task_submit(send)", task, index)
    }

    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        let mut completions = std::mem::take(&mut self.scratch);
        let polled = self.poll_completions(&mut completions);
        let result = sender_events(NAME, polled, &mut completions, out);
        self.scratch = completions;
        result
    }
}

impl RecvPath for DocaTransport {
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()> {
        let index = slot.index();
        let (Some(&task), Some(&buf)) = (self.recv_tasks.get(index), self.bufs.get(index)) else {
            return Err(misuse(format!("receive slot {index} does not exist")));
        };
        if task.is_null() || self.inbox().in_flight[index] {
            return Err(misuse(format!("receive slot {index} is already posted")));
        }
        check(
            "doca_buf_reset_data_len",
            // SAFETY: the buf is ours and idle; receives append, so empty it first.
            unsafe { sys::doca_buf_reset_data_len(buf) },
            None,
        )?;
        // SAFETY: conversion of a live task.
        let task = unsafe { sys::doca_rdma_task_receive_as_task(task) };
        // The token is gone: the completion callback mints it again from the task's index.
        self.submit("doca_task_submit(receive)", task, index)
    }

    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        self.memory.message(msg)
    }

    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        let mut completions = std::mem::take(&mut self.scratch);
        let polled = self.poll_completions(&mut completions);
        let result = receiver_arrivals(NAME, polled, &mut completions, out);
        self.scratch = completions;
        result
    }

    fn return_credits(&mut self, count: usize) -> Result<()> {
        for _ in 0..count {
            self.post_credit()?;
        }
        Ok(())
    }
}

impl Drop for DocaTransport {
    fn drop(&mut self) {
        self.teardown();
        if self.leaked {
            // A leaked context may still call back and its NIC may still write into the
            // registered slots: the inbox and the slot memory are leaked with it.
            self.memory.free_only_when(|| false);
        } else {
            // SAFETY: the inbox came from Box::into_raw and the context that referenced it is
            // destroyed.
            drop(unsafe { Box::from_raw(self.inbox) });
        }
    }
}

/// The slot a task carries in its user data.
fn slot_of(task_user_data: doca_data) -> usize {
    // SAFETY: we always store the slot index in the u64 member.
    (unsafe { task_user_data.u64_ }) as usize
}

/// The inbox a completion callback records into.
///
/// # Safety
/// `ctx_user_data` must be the user data of one of our contexts (the inbox pointer set in
/// `build`, alive until the transport is dropped), and the caller must be a DOCA callback:
/// those run only inside `doca_pe_progress`, while no other reference to the inbox exists.
/// The reference must not outlive the callback.
unsafe fn inbox_of<'a>(ctx_user_data: doca_data) -> Option<&'a mut Inbox> {
    // SAFETY: the caller guarantees the pointer is our live inbox, not otherwise borrowed.
    unsafe { ctx_user_data.ptr.cast::<Inbox>().as_mut() }
}

unsafe extern "C" fn send_done(
    _task: *mut sys::doca_rdma_task_send,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: DOCA calls this only for our contexts, from inside doca_pe_progress.
    if let Some(inbox) = unsafe { inbox_of(ctx_ud) } {
        let slot = slot_of(ud);
        let done = (slot < inbox.slots).then(|| Completion::Send(StagingSlot::mint(slot)));
        inbox.record(slot, done, None);
    }
}

unsafe extern "C" fn send_failed(
    task: *mut sys::doca_rdma_task_send,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: DOCA hands us a live task.
    let task = unsafe { sys::doca_rdma_task_send_as_task(task) };
    // SAFETY: as above: the task is live inside its callback.
    let code = unsafe { sys::doca_task_get_status(task) };
    // SAFETY: DOCA calls this only for our contexts, from inside doca_pe_progress.
    if let Some(inbox) = unsafe { inbox_of(ctx_ud) } {
        let index = slot_of(ud);
        // A failed credit send means the sender is gone or closing: the control channel says
        // which, in better words than this status.
        let error = (index < inbox.slots).then_some((true, code));
        inbox.record(index, None, error);
    }
}

unsafe extern "C" fn recv_done(
    task: *mut sys::doca_rdma_task_receive,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: valid in the success callback, per DOCA.
    let len = unsafe { sys::doca_rdma_task_receive_get_result_len(task) } as usize;
    // SAFETY: DOCA calls this only for our contexts, from inside doca_pe_progress.
    if let Some(inbox) = unsafe { inbox_of(ctx_ud) } {
        let slot = slot_of(ud);
        let done = if slot < inbox.slots {
            Completion::Recv(Arrived::new(RecvSlot::mint(slot), len))
        } else {
            Completion::Credit
        };
        inbox.record(slot, Some(done), None);
    }
}

unsafe extern "C" fn recv_failed(
    task: *mut sys::doca_rdma_task_receive,
    ud: doca_data,
    ctx_ud: doca_data,
) {
    // SAFETY: DOCA hands us a live task.
    let task = unsafe { sys::doca_rdma_task_receive_as_task(task) };
    // SAFETY: as above: the task is live inside its callback.
    let code = unsafe { sys::doca_task_get_status(task) };
    // SAFETY: DOCA calls this only for our contexts, from inside doca_pe_progress.
    if let Some(inbox) = unsafe { inbox_of(ctx_ud) } {
        inbox.record(slot_of(ud), None, Some((false, code)));
    }
}

/// DOCA's name for an error code.
pub(crate) fn error_name(code: doca_error_t) -> String {
    if code == DOCA_ERROR_DEVICE_FATAL_ERROR {
        // Runtimes older than DOCA 3.3 do not know the name.
        return "DOCA_ERROR_DEVICE_FATAL_ERROR".to_owned();
    }
    // SAFETY: returns a static C string (or NULL for unknown codes).
    let name = unsafe { sys::doca_error_get_name(code) };
    if name.is_null() {
        return format!("doca_error {}", code.0);
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

fn check(call: &'static str, rc: doca_error_t, hint: Option<&'static str>) -> Result<()> {
    if rc == doca_error::DOCA_SUCCESS {
        return Ok(());
    }
    let hint = hint.or(match rc {
        doca_error::DOCA_ERROR_NOT_PERMITTED => Some(MEMLOCK_HINT),
        doca_error::DOCA_ERROR_NOT_FOUND => Some(DEVICE_HINT),
        doca_error::DOCA_ERROR_NO_MEMORY
        | doca_error::DOCA_ERROR_FULL
        | doca_error::DOCA_ERROR_AGAIN => Some(BACKPRESSURE_HINT),
        doca_error::DOCA_ERROR_BAD_STATE
        | doca_error::DOCA_ERROR_INVALID_VALUE
        | doca_error::DOCA_ERROR_UNEXPECTED
        | doca_error::DOCA_ERROR_IN_USE => Some(BUG_HINT),
        doca_error::DOCA_ERROR_CONNECTION_ABORTED
        | doca_error::DOCA_ERROR_CONNECTION_RESET
        | doca_error::DOCA_ERROR_NOT_CONNECTED => Some(CONNECTION_HINT),
        DOCA_ERROR_DEVICE_FATAL_ERROR => Some(FATAL_HINT),
        _ => None,
    });
    Err(Error::Doca {
        call,
        code: error_name(rc),
        hint,
    })
}

/// `check` for a task allocation; `credit` is `"(credit)"` for a credit task.
fn check_task(call: &'static str, credit: &str, rc: doca_error_t) -> Result<()> {
    check(call, rc, None).map_err(|e| match e {
        Error::Doca { call, code, hint } if !credit.is_empty() => Error::Doca {
            call,
            code: format!("{code} {credit}"),
            hint,
        },
        other => other,
    })
}

/// A context state for messages.
fn state_name(state: sys::doca_ctx_states) -> String {
    match state {
        sys::doca_ctx_states::DOCA_CTX_STATE_IDLE => "IDLE".to_owned(),
        sys::doca_ctx_states::DOCA_CTX_STATE_STARTING => "STARTING".to_owned(),
        sys::doca_ctx_states::DOCA_CTX_STATE_RUNNING => "RUNNING".to_owned(),
        sys::doca_ctx_states::DOCA_CTX_STATE_STOPPING => "STOPPING".to_owned(),
        other => format!("state {}", other.0),
    }
}

fn log_failure(call: &'static str, rc: doca_error_t) {
    if rc != doca_error::DOCA_SUCCESS {
        log::warn!("doca teardown: {call}: {}", error_name(rc));
    }
}

fn misuse(detail: String) -> Error {
    Error::TransportProtocol {
        transport: NAME,
        detail,
    }
}

#[cfg(all(test, feature = "doca-sim"))]
#[path = "doca_wakeup_tests.rs"]
mod wakeup_tests;
