//! The DOCA transport: one `doca_rdma` RC context with an out-of-band export/connect.
//!
//! Built on `doca_sys::safe` (no raw pointer here): the transport is the one owner of its
//! device, progress engine (PE), context, memory map, inventory, bufs and tasks, each a wrapper
//! that holds its parents and is destroyed on drop in DOCA's order; everything runs on the
//! thread that calls it. DOCA callbacks only run inside `doca_pe_progress`, and they only
//! record what happened into an [`Inbox`] (the context's `TaskHandler`): no allocation beyond
//! reserved capacity, no panics, no progress calls, nothing that could unwind into C.
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
//! 3. Resume ([`DataPath::reset_for_resume`]): stop the context as in teardown (every task in
//!    flight is flushed, and no completion of the old connection is reported afterwards), keep
//!    the engine, the mmap, the bufs and the slot memory, start the context again and export a
//!    new connection (DOCA destroys a context's connections when it stops: after a restart,
//!    export and connect again); `connect` then allocates new tasks and posts again, in their
//!    order, the receives that were posted.
//! 4. Teardown, also after errors: free every task not in flight, `doca_ctx_stop` (AGAIN,
//!    IN_USE and IN_PROGRESS mean: keep progressing), progress until IDLE freeing the flushed
//!    tasks as they come back (bounded), then drop the objects: the context and the PE, the
//!    bufs, the inventory, the mmap, the device. A context that did not drain leaks itself, and
//!    with it the bufs its tasks carried, the mmap and the slot memory under it.
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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use doca_sys as sys;
use sys::safe::{
    self as dsafe, AnyTask, Buf, BufInventory, Dev, Mmap, Pe, RdmaCtx, RecvTask, SendTask,
    TaskEvent, TaskHandler,
};
use sys::{doca_ctx_states, doca_error, doca_error_t};

use super::slots::{chosen_device, SlotMemory};
use super::{
    receiver_arrivals, sender_events, Arrived, Completion, CreditRoute, DataPath, RecvPath,
    RecvSlot, SendEvent, SendPath, SetupParams, SetupStep, StagingSlot, WaitHandle,
};
use crate::proto::{QpSettings, Role, TransportKind};
use crate::{DocaFailure, Error, Result};

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

/// What the callbacks report (the context's [`TaskHandler`]). A task's user value is its
/// index: `0..slots` data tasks, `slots..2*slots` credit tasks.
#[derive(Debug)]
struct Inbox {
    /// Successful completions, capacity reserved up front.
    done: Vec<Completion>,
    /// The first task error seen (DOCA error code and which side).
    failure: Option<(bool, doca_error_t)>,
    /// Number of slots; task indexes at or above it are credit tasks.
    slots: usize,
    /// A callback had no room to record (cannot happen with the reserved capacity).
    overflow: bool,
}

impl Inbox {
    fn push(&mut self, completion: Completion) {
        if self.done.len() < self.done.capacity() {
            self.done.push(completion);
        } else {
            self.overflow = true;
        }
    }

    fn fail(&mut self, error: (bool, doca_error_t)) {
        self.failure.get_or_insert(error);
    }
}

impl TaskHandler for Inbox {
    fn on_task(&mut self, event: TaskEvent) {
        let slot = |user: u64| usize::try_from(user).unwrap_or(usize::MAX);
        match event {
            TaskEvent::SendDone { user } if slot(user) < self.slots => {
                self.push(Completion::Send(StagingSlot::mint(slot(user))));
            }
            // A credit send completed: its task is free again, nothing to report.
            TaskEvent::SendDone { .. } => {}
            // A failed credit send means the sender is gone or closing: the control channel
            // says which, in better words than this status.
            TaskEvent::SendFailed { user, status } if slot(user) < self.slots => {
                self.fail((true, status));
            }
            TaskEvent::SendFailed { .. } => {}
            TaskEvent::RecvDone { user, len } if slot(user) < self.slots => {
                self.push(Completion::Recv(Arrived::new(
                    RecvSlot::mint(slot(user)),
                    len,
                )));
            }
            TaskEvent::RecvDone { .. } => self.push(Completion::Credits(1)),
            TaskEvent::RecvFailed { status, .. } => self.fail((false, status)),
        }
    }
}

/// The DOCA objects, in drop order: the context (with its engine, tasks and the bufs they
/// carried) first, then the bufs, the inventory and the mmap; each holds its device. A
/// context that never reached IDLE leaks itself, and with it the bufs, the mmap and so the
/// slot memory (which is freed only once the mmap is destroyed).
#[derive(Debug)]
struct Doca {
    ctx: RdmaCtx<Inbox>,
    bufs: Vec<Buf>,
    _inventory: BufInventory,
    _mmap: Mmap,
    /// Sends: data tasks by slot on a sender, credit sends on a receiver.
    sends: Vec<SendTask>,
    /// Receives: data tasks by slot on a receiver, credit receives on a sender.
    recvs: Vec<RecvTask>,
    /// `doca_pe_request_notification` was called and no wake-up has been seen since.
    armed: bool,
    /// `doca_ctx_start` was accepted: teardown must stop the context.
    started: bool,
}

/// The DOCA implementation of [`SendPath`] and [`RecvPath`].
#[derive(Debug)]
pub(crate) struct DocaTransport {
    role: Role,
    /// The ibdev name, for errors.
    device: String,
    /// `None` once closed (or torn down).
    doca: Option<Doca>,
    /// After `doca`: freed only once the mmap over it is destroyed.
    memory: SlotMemory,
    /// Reused by every poll (no allocation on the data path).
    scratch: Vec<Completion>,
    blob: Vec<u8>,
    connected: bool,
    /// Receiver: the slots posted and not reported by a poll, in the order they were posted
    /// (the order their messages land in); a resume posts them again in this order.
    posted: VecDeque<usize>,
    /// Sender: by slot, whether a send from it was posted and its completion not reported by
    /// a poll (in flight, completed, failed or flushed); a resume gives these back.
    outstanding: Vec<bool>,
    /// The MTU `--mtu` fixed in the context (capped by the port's), in bytes; `None`: the
    /// SDK's choice.
    fixed_mtu: Option<u32>,
}

impl DocaTransport {
    /// Opens the device discovery chose, checks its capabilities, builds and starts the
    /// context and exports the connection blob. Tasks come later, in `connect`. On any
    /// failure, what was built is dropped (torn down) in reverse order.
    pub(crate) fn new(params: &SetupParams) -> Result<Self> {
        let choice = chosen_device(params, NAME)?;
        let device = choice.device.clone();
        if let Some(flag) = crate::config::doca_refuses(&params.qp) {
            return Err(Error::unavailable(
                NAME,
                format!(
                    "{flag} cannot be applied: the DOCA RDMA API sets a service level and an MTU \
                     (doca_rdma_set_sl, doca_rdma_set_mtu), but no traffic class, ACK timeout or \
                     retry count"
                ),
            ));
        }
        let qp = QpSettings {
            mtu: params.qp.mtu.map(|asked| {
                capped_mtu(asked, port_mtu(params, choice.netdev.as_deref()), &device)
            }),
            ..params.qp
        };
        let dev = open_device(&device)?;
        let slot_size = check_capabilities(&dev, &device, params.slot_size, params.slots)?;
        let mut memory = SlotMemory::new(params.slots, slot_size)?;
        let doca = build(
            &dev,
            &mut memory,
            params.role,
            params.slots,
            choice.gid_index,
            &qp,
        )?;
        let mut t = DocaTransport {
            role: params.role,
            device,
            doca: Some(doca),
            memory,
            scratch: Vec::with_capacity(params.slots * 4),
            blob: Vec::new(),
            connected: false,
            posted: VecDeque::with_capacity(params.slots),
            outstanding: vec![false; params.slots],
            fixed_mtu: qp.mtu,
        };
        // On error `t` is dropped, which stops the context and tears everything down.
        t.start()?;
        t.export()?;
        Ok(t)
    }

    fn doca(&mut self) -> Result<&mut Doca> {
        self.doca
            .as_mut()
            .ok_or(Error::TransportClosed { transport: NAME })
    }

    /// `doca_ctx_start`, then progress until the context may export and connect: STARTING
    /// (an asynchronous start: `DOCA_ERROR_IN_PROGRESS`) or RUNNING (a synchronous one).
    fn start(&mut self) -> Result<()> {
        let device = self.device.clone();
        let d = self.doca()?;
        match d.ctx.start() {
            Err(e) if e.code != doca_error::DOCA_ERROR_IN_PROGRESS => {
                let e = fail(e, None);
                return Err(Error::unavailable(NAME, format!("device {device}: {e}")));
            }
            _ => d.started = true,
        }
        let may_connect = |s: doca_ctx_states| {
            s == doca_ctx_states::DOCA_CTX_STATE_STARTING
                || s == doca_ctx_states::DOCA_CTX_STATE_RUNNING
        };
        let state = d.progress_until(Instant::now() + START_TIMEOUT, may_connect);
        if !may_connect(state) {
            return Err(Error::unavailable(
                NAME,
                format!(
                    "device {device}: the context is in state {} {START_TIMEOUT:?} after \
                     doca_ctx_start",
                    state_name(state)
                ),
            ));
        }
        Ok(())
    }

    /// Exports our connection blob (carried in the hello).
    fn export(&mut self) -> Result<()> {
        let blob = self.doca()?.ctx.export().map_err(|e| fail(e, None))?;
        if blob.len() > crate::proto::MAX_BLOB_LEN {
            return Err(Error::Doca {
                call: "doca_rdma_export",
                code: format!(
                    "connection details of {} bytes (limit {})",
                    blob.len(),
                    crate::proto::MAX_BLOB_LEN
                ),
                failure: DocaFailure::Failed,
                hint: None,
            });
        }
        self.blob = blob;
        Ok(())
    }

    /// Once RUNNING and connected: one task per slot (receives on a receiver, sends bound to
    /// the connection on a sender) plus one credit task per slot (the other kind, no buf:
    /// DOCA's empty message).
    fn allocate_tasks(&mut self) -> Result<()> {
        let (role, slots) = (self.role, self.memory.count());
        let d = self.doca()?;
        for i in 0..2 * slots {
            let buf = d.bufs.get(i).filter(|_| i < slots);
            let credit = if i < slots { "" } else { "(credit)" };
            if (role == Role::Receiver) == (i < slots) {
                let task = d.ctx.alloc_recv(buf, i as u64);
                d.recvs.push(task.map_err(|e| task_failure(e, credit))?);
            } else {
                let task = d.ctx.alloc_send(buf, i as u64);
                d.sends.push(task.map_err(|e| task_failure(e, credit))?);
            }
        }
        Ok(())
    }

    /// Tears everything down in DOCA's order: stop (bounded), then drop the objects; a
    /// context that did not drain leaks itself with its memory.
    fn teardown(&mut self) {
        if let Some(mut d) = self.doca.take() {
            if d.started {
                d.stop();
            }
        }
        self.connected = false;
    }
}

/// The port's active MTU in bytes, as the kernel derives it for RoCE from the netdev's MTU
/// (DOCA has no port query): `None` when the netdev or its MTU is unknown.
fn port_mtu(params: &SetupParams, netdev: Option<&str>) -> Option<u32> {
    let path = params
        .sysfs_root
        .join("class/net")
        .join(netdev?)
        .join("mtu");
    let netdev_mtu = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    crate::roce::roce_active_mtu(netdev_mtu)
}

/// `--mtu asked`, capped by the port's active MTU `port` (with a warning); as asked when the
/// port's is unknown.
fn capped_mtu(asked: u32, port: Option<u32>, device: &str) -> u32 {
    match port {
        Some(port) if port < asked => {
            log::warn!(
                "doca: --mtu {asked} is above the active MTU of {device} ({port} bytes, from its \
                 netdev's MTU): using {port}"
            );
            port
        }
        Some(_) => asked,
        None => {
            log::debug!(
                "doca: the active MTU of {device} is unknown (no netdev MTU): --mtu {asked} as \
                 asked"
            );
            asked
        }
    }
}

/// Opens the device named `ibdev`.
fn open_device(ibdev: &str) -> Result<Dev> {
    match Dev::open_ibdev(ibdev) {
        Ok(Some(dev)) => Ok(dev),
        Ok(None) => Err(Error::unavailable(
            NAME,
            format!("DOCA lists no device named {ibdev} ({DEVICE_HINT})"),
        )),
        Err(e) if e.call == "doca_dev_open" => Err(fail(e, None)),
        Err(e) => Err(Error::unavailable(NAME, fail(e, None).to_string())),
    }
}

/// Asks the device whether it can run RC send and receive tasks, how large a message may be
/// and how deep its queues are; returns the slot size to use (`wanted`, clamped to the
/// device's cap). `slots` (the credits) must fit both queues: each end has up to `slots`
/// sends (data or credits) and `slots` receives (data or credits) outstanding.
fn check_capabilities(dev: &Dev, device: &str, wanted: usize, slots: usize) -> Result<usize> {
    let unsupported = |what: &str, e: dsafe::Error| {
        Error::unavailable(
            NAME,
            format!(
                "device {device} cannot run {what} ({}: {})",
                e.call,
                error_name(e.code)
            ),
        )
    };
    dev.rdma_task_send_supported()
        .map_err(|e| unsupported("RDMA send tasks", e))?;
    dev.rdma_task_receive_supported()
        .map_err(|e| unsupported("RDMA receive tasks", e))?;
    let cap = match dev.rdma_max_message_size() {
        Ok(0) => Err(dsafe::Error {
            call: "doca_rdma_cap_get_max_message_size",
            code: doca_error::DOCA_SUCCESS,
        }),
        other => other,
    }
    .map_err(|e| unsupported("RDMA messages (no maximum message size)", e))?;
    for (queue, call, depth) in [
        (
            "send",
            "doca_rdma_cap_get_max_send_queue_size",
            dev.rdma_max_send_queue_size(),
        ),
        (
            "receive",
            "doca_rdma_cap_get_max_recv_queue_size",
            dev.rdma_max_recv_queue_size(),
        ),
    ] {
        let depth = depth.map_err(|e| unsupported("RDMA queues (no queue size cap)", e))?;
        if usize::try_from(depth).is_ok_and(|d| slots > d) {
            return Err(Error::unavailable(
                NAME,
                format!(
                    "device {device} has {queue} queues of at most {depth} tasks ({call}), fewer \
                     than the {slots} credits of this session: use --credits {depth} or less"
                ),
            ));
        }
    }
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    if wanted > cap {
        log::info!(
            "doca: device {device} carries messages of at most {cap} bytes: the session's \
             maximum message size is lowered from {wanted}"
        );
    }
    Ok(wanted.min(cap))
}

/// Creates and configures everything while the context is IDLE (nothing is started): the
/// mmap over the slot memory, the inventory with one buf per slot, the engine and the
/// context.
fn build(
    dev: &Dev,
    memory: &mut SlotMemory,
    role: Role,
    slots: usize,
    gid_index: u32,
    qp: &QpSettings,
) -> Result<Doca> {
    let rw = sys::doca_access_flag::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE.0;
    let depth = u32::try_from(slots).unwrap_or(u32::MAX);
    // SAFETY: the slot memory is freed only once this map's deregistration is done (set just
    // below; never, if the map is leaked), and is reached only through slot tokens,
    // which a posted task's slot has given up until its completion.
    let mmap = unsafe { Mmap::new(dev, memory.as_mut_slice(), rw) };
    let mmap = mmap.map_err(|e| fail(e, (e.call == "doca_mmap_start").then_some(MEMLOCK_HINT)))?;
    let deregistration = mmap.deregistration();
    memory.free_only_when(move || deregistration.done());
    let inventory = BufInventory::new(slots).map_err(|e| fail(e, None))?;
    // Bufs do not depend on the context: one per slot, now (a receive's with an empty data
    // window, a send's spanning the slot).
    let size = memory.size();
    let bufs = (0..slots)
        .map(|slot| match role {
            Role::Receiver => inventory.buf_by_addr(&mmap, slot * size, size),
            Role::Sender => inventory.buf_by_data(&mmap, slot * size, size),
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| fail(e, None))?;
    let mut pe = Pe::new().map_err(|e| fail(e, None))?;
    // PROGRESS_ALL: every progress call progresses the context, and arming the notification
    // clears what was raised before (doca_pe.h, Linux).
    let progress_all = match pe.set_progress_all() {
        Ok(()) => true,
        Err(e) => {
            log::debug!("{e}; using the selective mode");
            false
        }
    };
    let inbox = Inbox {
        done: Vec::with_capacity(slots * 4),
        failure: None,
        slots,
        overflow: false,
    };
    // At most `slots` sends are outstanding: data sends on a sender, credit sends on a
    // receiver (the send task pool has that size too).
    let mut ctx =
        RdmaCtx::new(dev, pe, progress_all, inbox, depth, depth).map_err(|e| fail(e, None))?;
    let configure = |ctx: &mut RdmaCtx<Inbox>| -> dsafe::Result<()> {
        ctx.set_permissions(rw)?;
        ctx.set_gid_index(gid_index)?;
        ctx.set_grh_enabled(true)?;
        ctx.set_transport_rc()?;
        ctx.set_max_num_connections(1)?;
        ctx.set_rnr_retry_count(RNR_RETRY_COUNT)?;
        // --sl and --mtu (the traffic class, ACK timeout and retry count were refused: DOCA
        // has no setter for them).
        if let Some(sl) = qp.service_level {
            ctx.set_sl(u32::from(sl))?;
        }
        if let Some(mtu) = qp.mtu {
            ctx.set_mtu(mtu)?;
        }
        ctx.set_send_queue_size(depth)
    };
    configure(&mut ctx).map_err(|e| fail(e, None))?;
    Ok(Doca {
        ctx,
        bufs,
        _inventory: inventory,
        _mmap: mmap,
        sends: Vec::with_capacity(slots),
        recvs: Vec::with_capacity(slots),
        armed: false,
        started: false,
    })
}

impl Doca {
    /// Runs the PE until `doca_pe_progress` returns 0 (doca_pe.h); returns whether anything
    /// happened. It ends: each call runs at most one callback or state change, and nothing is
    /// submitted from inside progress (at most `2 × slots` tasks are in flight).
    fn progress(&mut self) -> bool {
        let mut any = false;
        while self.ctx.progress() {
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

    /// Progresses until `done(state)` holds or `deadline` passes; returns the last state.
    fn progress_until(
        &mut self,
        deadline: Instant,
        done: impl Fn(doca_ctx_states) -> bool,
    ) -> doca_ctx_states {
        loop {
            let state = self.ctx.state();
            if done(state) || Instant::now() > deadline {
                return state;
            }
            if !self.progress_busy() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Arms the notification (the handle becomes readable once progress is possible). A
    /// failure is the session's error: without the notification a wait could sleep through a
    /// completion.
    fn arm(&mut self) -> Result<()> {
        self.ctx.request_notification().map_err(|e| fail(e, None))?;
        self.armed = true;
        Ok(())
    }

    /// Selective event mode only: clears the notification if it was raised (doca_pe.h: call
    /// it after an event was received through the handle). PROGRESS_ALL needs no clear.
    fn clear_if_raised(&mut self) {
        if self.ctx.progress_all() || !self.armed {
            return;
        }
        let mut fds = [nix::poll::PollFd::new(
            self.ctx.notification_handle(),
            nix::poll::PollFlags::POLLIN,
        )];
        let raised = matches!(
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
            Ok(1)
        );
        if raised {
            if let Err(e) = self.ctx.clear_notification() {
                log::debug!("{e}");
            }
            self.armed = false;
        }
    }

    /// Submits a task. A refusal that means "full" (AGAIN, FULL, NO_MEMORY) is backpressure:
    /// progress (completions free room) and try again, for at most `BACKPRESSURE_TIMEOUT`.
    fn submit(&mut self, call: &'static str, task: AnyTask) -> Result<()> {
        let mut deadline = None;
        loop {
            // SAFETY: the slot memory under a data task's buf is reached only through the
            // slot's token, which the caller gave up to post it and which the completion
            // mints again; credit tasks carry no buf.
            let Err(e) = (unsafe { self.ctx.submit(task) }) else {
                return Ok(());
            };
            if !matches!(
                e.code,
                doca_error::DOCA_ERROR_AGAIN
                    | doca_error::DOCA_ERROR_FULL
                    | doca_error::DOCA_ERROR_NO_MEMORY
            ) {
                return Err(fail(dsafe::Error { call, code: e.code }, None));
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + BACKPRESSURE_TIMEOUT);
            if Instant::now() > deadline {
                return Err(Error::Doca {
                    call,
                    code: format!(
                        "{} (still refused after {BACKPRESSURE_TIMEOUT:?} of progress and retries)",
                        error_name(e.code)
                    ),
                    failure: DocaFailure::Failed,
                    hint: Some(FULL_HINT),
                });
            }
            if !self.progress_busy() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// Sender: (re)submits every idle credit receive.
    fn post_credit_receives(&mut self) -> Result<()> {
        for k in 0..self.recvs.len() {
            let task = self.recvs[k];
            if !self.ctx.in_flight(task) {
                self.submit("doca_task_submit(credit receive)", task.into())?;
            }
        }
        Ok(())
    }

    /// Receiver: returns one credit (a zero-length send on a free credit task).
    fn post_credit(&mut self) -> Result<()> {
        let deadline = Instant::now() + STOP_TIMEOUT;
        let task = loop {
            let sends = &self.sends;
            if let Some(&t) = sends.iter().find(|&&t| !self.ctx.in_flight(t)) {
                break t;
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
        self.submit("doca_task_submit(credit)", task.into())
    }

    /// Stops the context and waits (bounded) until it is IDLE, freeing tasks as they return:
    /// every task not in flight is freed first (doca_pe.h), AGAIN, IN_USE and IN_PROGRESS
    /// from `doca_ctx_stop` mean "progress and try again". Returns whether it drained; if
    /// not, dropping the context leaks it (with its memory).
    fn stop(&mut self) -> bool {
        let idle = doca_ctx_states::DOCA_CTX_STATE_IDLE;
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut stopping = false;
        loop {
            self.ctx.free_idle_tasks();
            let state = self.ctx.state();
            if state == idle {
                return true;
            }
            if !stopping && state != doca_ctx_states::DOCA_CTX_STATE_STOPPING {
                match self.ctx.stop().map_err(|e| e.code) {
                    Ok(()) | Err(doca_error::DOCA_ERROR_IN_PROGRESS) => stopping = true,
                    Err(doca_error::DOCA_ERROR_AGAIN | doca_error::DOCA_ERROR_IN_USE) => {}
                    Err(other) => {
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
                    state_name(self.ctx.state())
                );
                return false;
            }
            if !self.progress_busy() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

fn failure_error(is_send: bool, code: doca_error_t) -> Error {
    let op = if is_send { "send" } else { "receive" };
    let call = if is_send {
        "doca_rdma_task_send"
    } else {
        "doca_rdma_task_receive"
    };
    match code {
        doca_error::DOCA_ERROR_CONNECTION_RESET | doca_error::DOCA_ERROR_CONNECTION_ABORTED => {
            Error::TransportClosed { transport: NAME }
        }
        DOCA_ERROR_DEVICE_FATAL_ERROR => Error::Doca {
            call,
            code: format!("{} ({op} completion)", error_name(code)),
            failure: DocaFailure::Failed,
            hint: Some(FATAL_HINT),
        },
        doca_error::DOCA_ERROR_TOO_BIG => Error::Doca {
            call,
            code: error_name(code),
            failure: DocaFailure::Failed,
            hint: Some("a message larger than the receive slot"),
        },
        _ => Error::Doca {
            call,
            code: format!("{} ({op} completion)", error_name(code)),
            failure: doca_failure(code),
            hint: Some(CONNECTION_HINT),
        },
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

    /// The context's MTU once connected (`doca_rdma_get_mtu`: one we did not fix may have
    /// been chosen at the connection).
    fn path_mtu(&self) -> Option<u32> {
        let d = self.doca.as_ref().filter(|_| self.connected)?;
        d.ctx.mtu().ok().flatten()
    }

    /// The service level the context uses (as DOCA reads it back) and the MTU `--mtu` fixed;
    /// DOCA cannot say the traffic class, ACK timeout or retry count, which are the SDK's.
    fn qp_settings(&self) -> QpSettings {
        let service_level = self
            .doca
            .as_ref()
            .and_then(|d| d.ctx.sl().ok())
            .and_then(|sl| u8::try_from(sl).ok())
            .filter(|&sl| sl <= crate::proto::MAX_SERVICE_LEVEL);
        QpSettings {
            service_level,
            mtu: self.fixed_mtu,
            ..QpSettings::default()
        }
    }

    fn slot_size(&self) -> usize {
        self.memory.size()
    }

    fn credit_route(&self) -> CreditRoute {
        CreditRoute::InBand
    }

    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        let d = self.doca.as_ref().filter(|_| self.connected)?;
        Some(WaitHandle {
            fd: d.ctx.notification_handle(),
            writable: false,
        })
    }

    fn before_wait(&mut self) -> Result<bool> {
        let Some(d) = self.doca.as_mut().filter(|_| self.connected) else {
            return Ok(false);
        };
        if !d.armed {
            d.arm()?;
        }
        // A completion between the last progress and the arm may raise nothing (an
        // edge-triggered arm, or one the engine already took from the CQ): collect it now.
        d.progress();
        let inbox = d.ctx.handler();
        Ok(!inbox.done.is_empty() || inbox.failure.is_some() || inbox.overflow)
    }

    fn on_wakeup(&mut self) {
        let Some(d) = self.doca.as_mut().filter(|d| d.armed) else {
            return;
        };
        if d.ctx.progress_all() {
            // The arm fired; arming again (before the next sleep) clears it.
            d.armed = false;
        } else {
            // Selective: the event was received through the handle, clear it (doca_pe.h).
            d.clear_if_raised();
        }
    }

    fn close(&mut self) {
        self.teardown();
    }

    fn can_resume(&self) -> bool {
        true
    }

    /// Stops the context until IDLE (DOCA flushes every task in flight, and the old
    /// connection is destroyed: nothing of it completes later), forgets what the callbacks
    /// recorded, gives back the staging slot of every send not reported by a poll, keeps the
    /// receives posted (in their order, for `connect` to post again), starts the context again
    /// and exports a new connection. The engine, the mmap, the bufs and the slot memory stay.
    fn reset_for_resume(&mut self, reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        self.connected = false;
        self.blob.clear();
        let d = self.doca()?;
        if d.started {
            if !d.stop() {
                return Err(Error::Doca {
                    call: "doca_ctx_stop",
                    code: format!(
                        "the context is {} {STOP_TIMEOUT:?} after the stop, not IDLE",
                        state_name(d.ctx.state())
                    ),
                    failure: DocaFailure::Failed,
                    hint: Some(
                        "the DOCA context did not drain after a stop (tasks still in flight): \
                         the session cannot resume on this device",
                    ),
                });
            }
            d.started = false;
        }
        d.sends.clear();
        d.recvs.clear();
        let inbox = d.ctx.handler();
        inbox.done.clear();
        inbox.failure = None;
        inbox.overflow = false;
        // Nothing is in flight any more: an arm from before is stale (PROGRESS_ALL: the next
        // sleep arms again; selective: clear what was raised).
        if d.ctx.progress_all() {
            d.armed = false;
        } else {
            d.clear_if_raised();
        }
        for (index, outstanding) in self.outstanding.iter_mut().enumerate() {
            if std::mem::take(outstanding) {
                reclaimed.push(StagingSlot::mint(index));
            }
        }
        self.start()?;
        self.export()
    }
}

impl DocaTransport {
    /// Connects to the peer's exported blob, progressing until RUNNING or the deadline.
    fn connect_until(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<()> {
        if self.connected {
            return Err(misuse("connect called twice".to_owned()));
        }
        let d = self.doca()?;
        d.ctx
            .connect(peer_blob)
            .map_err(|e| fail(e, Some(CONNECTION_HINT)))?;
        // An asynchronous start reaches RUNNING only now, during progress.
        let running = doca_ctx_states::DOCA_CTX_STATE_RUNNING;
        let state = d.progress_until(deadline, |s| {
            s == running
                || s == doca_ctx_states::DOCA_CTX_STATE_IDLE
                || s == doca_ctx_states::DOCA_CTX_STATE_STOPPING
        });
        if state != running {
            return Err(Error::Doca {
                call: "doca_rdma_connect",
                code: format!(
                    "the context is {} instead of RUNNING at the session deadline",
                    state_name(state)
                ),
                failure: DocaFailure::Failed,
                hint: Some(CONNECTION_HINT),
            });
        }
        if let Some((is_send, code)) = d.ctx.handler().failure.take() {
            return Err(failure_error(is_send, code));
        }
        self.connected = true;
        self.allocate_tasks()?;
        match self.role {
            Role::Sender => self.doca()?.post_credit_receives()?,
            // After a resume: the receives that were posted, again, in the order they were
            // posted (message n lands in the n-th of them). Empty at the first set-up.
            Role::Receiver => {
                for k in 0..self.posted.len() {
                    if let Some(&index) = self.posted.get(k) {
                        self.submit_recv(index)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Submits slot `index`'s receive task (its buf emptied first: receives append).
    fn submit_recv(&mut self, index: usize) -> Result<()> {
        let d = self.doca()?;
        let (Some(&task), Some(buf)) = (d.recvs.get(index), d.bufs.get(index)) else {
            return Err(misuse(format!("receive slot {index} does not exist")));
        };
        if d.ctx.in_flight(task) {
            return Err(misuse(format!("receive slot {index} is already posted")));
        }
        // SAFETY: the buf's task is not in flight (checked above) and only this thread uses
        // it; receives append, so empty it first.
        let reset = unsafe { buf.reset_data_len() };
        reset.map_err(|e| fail(e, None))?;
        d.submit("doca_task_submit(receive)", task.into())
    }

    /// Collects the completions the callbacks recorded (progress until 0; no arming: that is
    /// `before_wait`'s, once per sleep).
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        let role = self.role;
        let d = self.doca()?;
        d.progress();
        let inbox = d.ctx.handler();
        out.append(&mut inbox.done);
        if inbox.overflow {
            return Err(misuse("completion queue overflow".to_owned()));
        }
        if let Some((is_send, code)) = inbox.failure.take() {
            return Err(failure_error(is_send, code));
        }
        if role == Role::Sender {
            d.post_credit_receives()?;
        }
        Ok(())
    }
}

impl SendPath for DocaTransport {
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        self.memory.staging(slot)
    }

    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        let index = slot.index();
        let size = self.memory.size();
        // The token is ours until a poll reports the send (or a resume gives it back), also
        // when the post fails below.
        if let Some(outstanding) = self.outstanding.get_mut(index) {
            *outstanding = true;
        }
        let d = self.doca()?;
        let (Some(&task), Some(buf)) = (d.sends.get(index), d.bufs.get(index)) else {
            return Err(misuse(format!("send slot {index} does not exist")));
        };
        if len > size || d.ctx.in_flight(task) {
            return Err(misuse(format!(
                "send slot {index} is busy or {len} bytes do not fit"
            )));
        }
        // An empty message has no source (DOCA's zero-length message).
        let source = (len > 0).then_some((buf, len));
        d.ctx
            .set_send_source(task, source)
            .map_err(|e| fail(e, None))?;
        // The token is gone: the completion callback mints it again from the task's index.
        d.submit("doca_task_submit(send)", task.into())
    }

    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        let before = out.len();
        let mut completions = std::mem::take(&mut self.scratch);
        let polled = self.poll_completions(&mut completions);
        let result = sender_events(NAME, polled, &mut completions, out);
        self.scratch = completions;
        for event in out.iter().skip(before) {
            if let SendEvent::Sent(slot) = event {
                if let Some(outstanding) = self.outstanding.get_mut(slot.index()) {
                    *outstanding = false;
                }
            }
        }
        result
    }
}

impl RecvPath for DocaTransport {
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()> {
        let index = slot.index();
        if index >= self.memory.count() {
            return Err(misuse(format!("receive slot {index} does not exist")));
        }
        self.doca()?;
        if !self.connected {
            // Before connect (after a resume's reset, say): `connect` posts it, after the
            // receives that were posted before.
            self.posted.push_back(index);
            return Ok(());
        }
        let d = self.doca()?;
        if d.recvs
            .get(index)
            .is_some_and(|&task| d.ctx.in_flight(task))
        {
            return Err(misuse(format!("receive slot {index} is already posted")));
        }
        // The token is gone: the completion callback mints it again from the task's index; a
        // resume posts it again while no poll reported it (also when the submit fails here).
        self.posted.push_back(index);
        self.submit_recv(index)
    }

    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        self.memory.message(msg)
    }

    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        let before = out.len();
        let mut completions = std::mem::take(&mut self.scratch);
        let polled = self.poll_completions(&mut completions);
        let result = receiver_arrivals(NAME, polled, &mut completions, out);
        self.scratch = completions;
        for msg in out.iter().skip(before) {
            // Receives complete in the order they were posted: the first one, in practice.
            if let Some(at) = self.posted.iter().position(|&i| i == msg.slot_index()) {
                self.posted.remove(at);
            }
        }
        result
    }

    fn return_credits(&mut self, count: usize) -> Result<()> {
        let d = self.doca()?;
        for _ in 0..count {
            d.post_credit()?;
        }
        Ok(())
    }
}

impl Drop for DocaTransport {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// DOCA's name for an error code.
pub(crate) fn error_name(code: doca_error_t) -> String {
    if code == DOCA_ERROR_DEVICE_FATAL_ERROR {
        // Runtimes older than DOCA 3.3 do not know the name.
        return "DOCA_ERROR_DEVICE_FATAL_ERROR".to_owned();
    }
    dsafe::error_name(code)
}

/// Our error for a failed DOCA call, with `hint` or the one its code suggests.
fn fail(e: dsafe::Error, hint: Option<&'static str>) -> Error {
    let hint = hint.or(match e.code {
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
    Error::Doca {
        call: e.call,
        code: error_name(e.code),
        failure: doca_failure(e.code),
        hint,
    }
}

/// What a DOCA code means for the session: a connection that failed or was reset, aborted or
/// never made is lost (a new one may work); anything else is a failure a new path would meet.
fn doca_failure(code: doca_error_t) -> DocaFailure {
    match code {
        doca_error::DOCA_ERROR_IO_FAILED
        | doca_error::DOCA_ERROR_CONNECTION_RESET
        | doca_error::DOCA_ERROR_CONNECTION_ABORTED
        | doca_error::DOCA_ERROR_NOT_CONNECTED => DocaFailure::ConnectionLost,
        _ => DocaFailure::Failed,
    }
}

/// `fail` for a task allocation; `credit` is `"(credit)"` for a credit task.
fn task_failure(e: dsafe::Error, credit: &str) -> Error {
    match fail(e, None) {
        Error::Doca {
            call,
            code,
            failure,
            hint,
        } if !credit.is_empty() => Error::Doca {
            call,
            code: format!("{code} {credit}"),
            failure,
            hint,
        },
        other => other,
    }
}

/// A context state for messages.
fn state_name(state: doca_ctx_states) -> String {
    match state {
        doca_ctx_states::DOCA_CTX_STATE_IDLE => "IDLE".to_owned(),
        doca_ctx_states::DOCA_CTX_STATE_STARTING => "STARTING".to_owned(),
        doca_ctx_states::DOCA_CTX_STATE_RUNNING => "RUNNING".to_owned(),
        doca_ctx_states::DOCA_CTX_STATE_STOPPING => "STOPPING".to_owned(),
        other => format!("state {}", other.0),
    }
}

fn misuse(detail: String) -> Error {
    Error::TransportProtocol {
        transport: NAME,
        detail,
    }
}

/// The simulator's settings and faults are process-wide: one DOCA test at a time.
#[cfg(all(test, feature = "doca-sim"))]
static SIM_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Set-up parameters for a transport on the simulator's default device (`mlx5_0`), over
/// loopback.
#[cfg(all(test, feature = "doca-sim"))]
fn sim_test_params(role: Role, slots: usize, slot_size: usize) -> SetupParams {
    SetupParams {
        side: match role {
            Role::Sender => super::BootstrapSide::Client,
            Role::Receiver => super::BootstrapSide::Server,
        },
        role,
        local_ip: std::net::Ipv4Addr::LOCALHOST,
        peer_ip: std::net::Ipv4Addr::LOCALHOST,
        slots,
        slot_size,
        lanes: 1,
        extra_paths: Vec::new(),
        device: Some(crate::roce::DeviceChoice {
            device: "mlx5_0".to_owned(),
            port: 1,
            gid_index: 0,
            gid: [0; 16],
            gid_type: None,
            netdev: None,
        }),
        qp: crate::proto::QpSettings::default(),
        sysfs_root: "/sys".into(),
        faults: crate::config::TestFaults::default(),
    }
}

#[cfg(all(test, feature = "doca-sim"))]
#[path = "doca_wakeup_tests.rs"]
mod wakeup_tests;

#[cfg(all(test, feature = "doca-sim"))]
#[path = "doca_resume_tests.rs"]
mod resume_tests;

/// Issue 35 item 5: what `--sl` and `--mtu` ask reaches the simulator's context (read back
/// through `doca_rdma_get_sl`/`_get_mtu`, what the SDK says it uses), the MTU capped by the
/// port's, and what DOCA has no setter for is refused at start-up.
#[cfg(all(test, feature = "doca-sim"))]
mod qp_tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn with_qp(role: Role, qp: QpSettings) -> SetupParams {
        SetupParams {
            qp,
            ..sim_test_params(role, 4, 64)
        }
    }

    fn ctx_sl_and_mtu(t: &DocaTransport) -> (u32, Option<u32>) {
        let d = t.doca.as_ref().expect("built");
        (d.ctx.sl().expect("get_sl"), d.ctx.mtu().expect("get_mtu"))
    }

    #[test]
    fn the_service_level_and_mtu_reach_the_context_and_the_hello() {
        let _serial = SIM_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let asked = QpSettings {
            service_level: Some(5),
            mtu: Some(2048),
            ..QpSettings::default()
        };
        let mut sender = DocaTransport::new(&with_qp(Role::Sender, asked)).expect("sender");
        let mut receiver = DocaTransport::new(&with_qp(Role::Receiver, asked)).expect("receiver");
        assert_eq!(ctx_sl_and_mtu(&sender), (5, Some(2048)));
        assert_eq!(
            sender.qp_settings(),
            QpSettings {
                service_level: Some(5),
                mtu: Some(2048),
                ..QpSettings::default()
            },
            "the hello says what the context uses; DOCA cannot say the rest"
        );
        assert_eq!(sender.path_mtu(), None, "not connected yet");
        let deadline = Instant::now() + Duration::from_secs(5);
        let (to_sender, to_receiver) = (receiver.local_blob(), sender.local_blob());
        sender.connect(&to_sender, deadline).expect("connect");
        receiver.connect(&to_receiver, deadline).expect("connect");
        assert_eq!(sender.path_mtu(), Some(2048));
        assert_eq!(receiver.path_mtu(), Some(2048));

        // Nothing asked: the SDK's defaults (the simulator's: SL 0, 1024 bytes), no MTU fixed.
        let plain = DocaTransport::new(&with_qp(Role::Sender, QpSettings::default())).unwrap();
        assert_eq!(ctx_sl_and_mtu(&plain), (0, Some(1024)));
        assert_eq!(plain.qp_settings().mtu, None);
        assert_eq!(plain.qp_settings().service_level, Some(0));
    }

    #[test]
    fn an_mtu_above_the_ports_is_capped_by_the_netdevs_mtu() {
        let _serial = SIM_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let sysfs = tempfile::tempdir().expect("tempdir");
        let net = sysfs.path().join("class/net/eth9");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(net.join("mtu"), "1500\n").unwrap();
        let mut params = with_qp(
            Role::Sender,
            QpSettings {
                mtu: Some(4096),
                ..QpSettings::default()
            },
        );
        params.sysfs_root = sysfs.path().to_owned();
        if let Some(d) = params.device.as_mut() {
            d.netdev = Some("eth9".to_owned());
        }
        let t = DocaTransport::new(&params).expect("sender");
        // 1500 less RoCE's 96 header bytes: 1024 is the largest that fits.
        assert_eq!(ctx_sl_and_mtu(&t).1, Some(1024));
        assert_eq!(t.qp_settings().mtu, Some(1024));
        assert_eq!(capped_mtu(2048, Some(4096), "mlx5_0"), 2048);
        assert_eq!(capped_mtu(2048, None, "mlx5_0"), 2048);
    }

    #[test]
    fn what_doca_cannot_set_is_refused_at_start_up() {
        let _serial = SIM_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let live = doca_sys::sim::live_objects();
        for (asked, flag) in [
            (
                QpSettings {
                    traffic_class: Some(104),
                    ..QpSettings::default()
                },
                "--tclass",
            ),
            (
                QpSettings {
                    ack_timeout: Some(14),
                    ..QpSettings::default()
                },
                "--ack-timeout",
            ),
            (
                QpSettings {
                    retry_count: Some(3),
                    ..QpSettings::default()
                },
                "--retry-count",
            ),
        ] {
            let e = DocaTransport::new(&with_qp(Role::Sender, asked)).unwrap_err();
            assert!(
                matches!(e, Error::TransportUnavailable { .. }),
                "{flag}: auto must be able to go on to verbs: {e:?}"
            );
            assert!(
                e.to_string()
                    .contains(&format!("{flag} cannot be applied: the DOCA RDMA API")),
                "{e}"
            );
        }
        assert_eq!(
            doca_sys::sim::live_objects(),
            live,
            "refused before anything was created"
        );
    }
}
