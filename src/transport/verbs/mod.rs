//! The verbs transport: one RC queue pair over rdma-core, through our own `verbs-sys`.
//!
//! All slots live in one buffer registered once. Receives and sends are work requests whose
//! `wr_id` names the slot (sends also carry a tag bit). One CQ with a completion channel serves
//! both directions. `poll` drains it; when the notification is not armed, it arms it and polls
//! once more, so a completion can never slip in unnoticed before the caller sleeps on the
//! channel's descriptor. It stays armed until an event fires, and the channel is read only
//! after a wait said its descriptor is ready ([`DataPath::on_wakeup`]): a busy-polling caller
//! costs one CQ poll per round and no system call (an event that fired unread just makes the
//! next wait return at once).
//!
//! Credits travel in band: the receiver announces released messages with one zero-length send
//! with immediate data per announcement, the immediate being how many more it released, and the
//! sender keeps `slots` zero-length receives posted for them (re-posted as they complete). RC
//! delivers them exactly once and in order, so the counts add up to the receiver's releases.
//! (Protocol version 5 and before sent one zero-length send per released message: a window of
//! 64 cost the receiver 32 packets per announcement, and the sender 32 completions.)
//!
//! Messages up to the QP's `max_inline_data` are sent inline (`IBV_SEND_INLINE`: the provider
//! copies them into the work request, no DMA read of the slot).
//!
//! Sends (data on the sender, credits on the receiver) are signaled only every half window
//! (see [`super::signaling`]): one completion retires every earlier send, since an RC send
//! queue completes in order. When the sender's `finish` must know that every send completed
//! and the newest went out unsignaled, it posts a signaled zero-length RDMA write behind it
//! ([`super::SendPath::flush_sends`]); the receiver's QP allows remote writes for that alone
//! (no memory region grants remote access, and a zero-length write touches no memory).
//!
//! The hello blob carries QP number, starting PSN, GID and path MTU (see [`Endpoint`]).
//! `verbs-sys` loads `libibverbs.so.1` with dlopen on first use, so where rdma-core is absent
//! [`VerbsTransport::new`] reports the transport as unavailable, naming what to install.
//!
//! The state is split by role. [`VerbsQp`] is what both roles share: the device, protection
//! domain, CQ, completion channel, queue pair, slot memory and set-up state, and the posting
//! and polling that use them. [`VerbsTransport<R>`] is that core and the state of its role `R`
//! ([`VerbsRole`]): the sender's ([`send`]: data sends in flight and their signaling, the
//! flush) or the receiver's ([`recv`]: posted receives, credit sends). Here, written once over
//! `R`: set-up, polling the CQ, `close` and a resume ([`DataPath`]), each handing the role
//! what concerns its state. Each role implements only its own trait ([`super::SendPath`] for
//! [`send::VerbsSender`], [`super::RecvPath`] for [`recv::VerbsReceiver`]), so a sender cannot
//! return credits nor a receiver post a data send. The role is a type, not a field: no branch,
//! indirection or allocation per message. `unsafe` stays in this file: the role modules post
//! only through [`VerbsQp::post_send_list`] and [`VerbsQp::post_recv_list`].

#![warn(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use verbs_sys::ffi::{self, ibv_qp_attr, ibv_qp_cap, ibv_wc};
use verbs_sys::{
    CompletionChannel, CompletionQueue, Context, DeviceList, MemoryRegion, ProtectionDomain,
    QpInit, QueuePair, RecvList, SendList,
};

use super::slots::{chosen_device, SlotMemory};
use super::{
    Arrived, Completion, CreditRoute, DataPath, DeviceWork, RecvSlot, SetupParams, SetupStep,
    StagingSlot, WaitHandle,
};
use crate::config::{DEFAULT_ACK_TIMEOUT, DEFAULT_RETRY_COUNT};
use crate::proto::{QpSettings, Role, TransportKind};
use crate::{Error, Result};

mod recv;
mod send;

const NAME: &str = "verbs";
/// `wr_id` bit that marks a send.
const SEND_TAG: u64 = 1 << 63;
/// `wr_id` bit that marks a credit announcement (a zero-length send with immediate on the
/// receiver, its receive on the sender).
const CREDIT_TAG: u64 = 1 << 62;
/// `wr_id` bit that marks the sender's zero-length RDMA write that flushes unsignaled sends.
const FLUSH_TAG: u64 = 1 << 61;
/// Credit announcements carry a sequence number below the tag bits.
const CREDIT_SEQ_MASK: u64 = (1 << 48) - 1;
/// How long a credit waits for a free send-queue entry before the peer counts as gone.
const CREDIT_SEND_WAIT: Duration = Duration::from_secs(2);
/// Completions taken per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;
/// What an RTR/RTS failure or a retry-exceeded completion usually means on RoCE.
const ROCE_HINT: &str = "the remote GID does not answer on the chosen GID's network: check that both ends \
use addresses of the RoCE network, that UDP port 4791 is not blocked, and that both GIDs are RoCE v2 \
(rdma-container doctor --peer IP on each end)";

/// The connection data exchanged in the hello blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number this side sends.
    pub psn: u32,
    /// The GID this side uses.
    pub gid: [u8; 16],
    /// Active MTU of this side's port, as `ibv_mtu` (1 = 256 ... 5 = 4096).
    pub mtu: u8,
}

impl Endpoint {
    /// Encoded length.
    pub(crate) const LEN: usize = 4 + 4 + 16 + 1;

    /// Little-endian encoding for the blob.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.push(self.mtu);
        out
    }

    /// Decodes a peer's blob; `None` when it is malformed.
    pub(crate) fn decode(blob: &[u8]) -> Option<Self> {
        if blob.len() != Self::LEN {
            return None;
        }
        let qpn = u32::from_le_bytes(blob[0..4].try_into().ok()?);
        let psn = u32::from_le_bytes(blob[4..8].try_into().ok()?);
        let gid: [u8; 16] = blob[8..24].try_into().ok()?;
        let mtu = blob[24];
        if !(1..=5).contains(&mtu) || psn > 0xff_ffff {
            return None;
        }
        Some(Self { qpn, psn, gid, mtu })
    }
}

/// Inline data we ask the QP for (messages up to what the provider grants go inline).
const INLINE_WANTED: u32 = 128;

/// What a role adds to the queue pair both roles share ([`VerbsQp`]): its own state, and what
/// that state does with the completions [`VerbsTransport::poll_cq`] takes off the shared CQ, at
/// `close` and at a resume. A role never posts the other role's kinds of work request: its
/// hooks for those retire nothing (a data receive completing on a sender is this transport's
/// bug, reported as one into a slot not posted).
pub(crate) trait VerbsRole: Send + std::fmt::Debug + Sized {
    /// The role ([`SetupParams::role`]).
    const ROLE: Role;

    /// The role's state for `slots` slots, nothing posted.
    fn new(slots: usize) -> Self;

    /// A data receive completed into `slot`: it is no longer posted.
    fn receive_completed(&mut self, slot: usize) -> Result<()>;

    /// The flushing RDMA write completed: every outstanding data send is retired, oldest
    /// first, each through `retired` (its `wr_id`).
    fn flush_completed(&mut self, retired: impl FnMut(u64));

    /// The signaled data send `wr_id` completed: it and every data send before it are retired
    /// through `retired`; false (nothing retired) when it is not outstanding.
    fn send_completed(&mut self, wr_id: u64, retired: impl FnMut(u64)) -> bool;

    /// The credit send `wr_id` completed (signaled, or failed): it and the ones before it
    /// free their send-queue entries.
    fn credit_send_completed(&mut self, wr_id: u64);

    /// `close`: the sends outstanding are forgotten (the QP went to the error state).
    fn closed(&mut self);

    /// A resume, once the new queue pair is in INIT and the CQ drained: the role's part of
    /// [`DataPath::reset_for_resume`] (a receiver posts its receives again; a sender gives
    /// back its sends to `reclaimed`). `core.pending` holds the completions taken off the CQ
    /// and not reported: the role takes what it needs from it and empties it, last, once
    /// nothing can fail.
    fn reset_for_resume(
        &mut self,
        core: &mut VerbsQp,
        reclaimed: &mut Vec<StagingSlot>,
    ) -> Result<()>;
}

/// What both roles share: the device's objects, the queue pair, the slots and the set-up
/// state. Field order is drop order: the QP goes before the memory region, the memory region
/// before the buffer it covers.
#[derive(Debug)]
pub(crate) struct VerbsQp {
    qp: QueuePair,
    mr: MemoryRegion,
    cq: CompletionQueue,
    channel: CompletionChannel,
    pd: ProtectionDomain,
    _context: Context,
    memory: SlotMemory,
    /// Largest message sent inline (the QP's `max_inline_data`).
    max_inline: u32,
    /// Reused for every post (no allocation on the data path).
    send_list: SendList,
    recv_list: RecvList,
    /// Send- and receive-queue depth of the QP (the slot count).
    depth: u32,
    /// The QP number of the queue pair a resume destroyed: a completion of it is never
    /// reported (belt and braces: the resume drains the CQ after the destruction).
    retired_qpn: Option<u32>,
    /// A resume could not destroy the old QP, which may still use the slots: no more resumes.
    qp_stuck: bool,
    /// Completions taken off the CQ while waiting for a send-queue entry, for the next `poll`.
    pending: Vec<Completion>,
    /// Reused by every poll (no allocation on the data path).
    scratch: Vec<Completion>,
    /// What each CQ poll writes into: kept, so that a busy-polling round that finds nothing
    /// does not zero a batch of entries first (only the `n` a poll wrote are read).
    wcs: [ibv_wc; POLL_BATCH],
    port: u8,
    gid_index: u8,
    /// What the packets of our queue pair carry and how it retransmits (`--tclass`, `--sl`,
    /// `--ack-timeout`, `--retry-count`, each with its default).
    qp_params: QpParams,
    /// The QP's receive-not-ready retry count ([`rnr_retry`]).
    rnr_retry: u8,
    local: Endpoint,
    /// The path MTU both ends agreed on (`ibv_mtu`), once connected.
    path_mtu: Option<u8>,
    closed: bool,
    /// The CQ's notification was requested and no event was taken since.
    armed: bool,
    /// Where the device does its work (a software device's runs on our CPUs).
    device_work: DeviceWork,
}

/// The verbs implementation of [`super::SendPath`] ([`send::VerbsSender`]) and
/// [`super::RecvPath`] ([`recv::VerbsReceiver`]): the shared queue pair and the state of the
/// role `R`. The core comes first, so it is dropped first (the role's state holds no verbs
/// object).
#[derive(Debug)]
pub(crate) struct VerbsTransport<R> {
    core: VerbsQp,
    role: R,
}

impl<R: VerbsRole> VerbsTransport<R> {
    /// Opens the device discovery chose, registers the slots and creates an RC queue pair in
    /// INIT, for the role `R` (`params.role`). The transports' factory (`create_as!` in
    /// [`super`]) does not name `R`: boxing the transport as `dyn SendPath` or `dyn RecvPath`
    /// picks it, since only one role implements each.
    pub(crate) fn new(params: &SetupParams) -> Result<Self> {
        debug_assert_eq!(params.role, R::ROLE, "verbs: a transport of the other role");
        Ok(Self {
            core: VerbsQp::new(params, R::ROLE)?,
            role: R::new(params.slots),
        })
    }
}

impl VerbsQp {
    /// Opens the device discovery chose, registers the slots and creates an RC queue pair in
    /// INIT for `role`.
    fn new(params: &SetupParams, role: Role) -> Result<Self> {
        let choice = chosen_device(params, NAME)?;
        let unavailable = |why: String| Error::unavailable(NAME, why);
        let list = DeviceList::new().map_err(|e| match e {
            verbs_sys::Error::Unavailable(why) => unavailable(why),
            e => unavailable(format!(
                "cannot list RDMA devices ({e}); is rdma-core (libibverbs.so.1 and its providers) installed?"
            )),
        })?;
        let device = list
            .iter()
            .find(|d| d.name() == choice.device)
            .ok_or_else(|| {
                unavailable(format!("libibverbs does not list device {}", choice.device))
            })?;
        let context = device
            .open()
            .map_err(|e| verb("ibv_open_device", e, None))?;
        drop(list);
        let port = u8::try_from(choice.port)
            .map_err(|_| Error::BadOverride(format!("port {} is out of range", choice.port)))?;
        let gid_index = u8::try_from(choice.gid_index).map_err(|_| {
            Error::BadOverride(format!("GID index {} is out of range", choice.gid_index))
        })?;
        let device_work = work_of_device(&context, &choice.device);
        let port_attr = context
            .query_port(port)
            .map_err(|e| verb("ibv_query_port", e, None))?;
        if port_attr.state != ffi::IBV_PORT_ACTIVE {
            return Err(unavailable(format!(
                "{} port {port} is not ACTIVE",
                choice.device
            )));
        }
        let gid = context
            .query_gid(port, u32::from(gid_index))
            .map_err(|e| verb("ibv_query_gid", e, None))?;
        let pd = context
            .alloc_pd()
            .map_err(|e| verb("ibv_alloc_pd", e, None))?;
        let channel = context
            .create_comp_channel()
            .map_err(|e| verb("ibv_create_comp_channel", e, None))?;
        channel
            .set_nonblocking()
            .map_err(|e| verb("fcntl(completion channel, O_NONBLOCK)", e, None))?;
        let depth = u32::try_from(params.slots).unwrap_or(u32::MAX);
        let cq = context
            .create_cq(depth.saturating_mul(2).saturating_add(2), Some(&channel), 0)
            .map_err(|e| verb("ibv_create_cq", e, None))?;
        let mut memory = SlotMemory::new(params.slots, params.slot_size)?;
        // SAFETY: `memory` is owned by the transport, never reallocated, and declared after `mr`
        // and `qp`, so it outlives the registration and every work request that uses it.
        let mr = unsafe {
            pd.reg_mr(
                memory.as_mut_ptr(),
                memory.len(),
                ffi::IBV_ACCESS_LOCAL_WRITE,
            )
        }
        .map_err(|e| verb("ibv_reg_mr", e, Some(MEMLOCK_HINT)))?;
        // If the region cannot be deregistered (or a QP using it cannot be destroyed), the NIC
        // may still write into the slots: then they are leaked, never freed.
        let deregistration = mr.deregistration();
        memory.free_only_when(move || deregistration.done());
        let qp = create_qp(&pd, &cq, depth)?;
        init_qp(&qp, port, role)?;
        let active = u8::try_from(port_attr.active_mtu)
            .ok()
            .filter(|m| (1..=5).contains(m))
            .unwrap_or(ffi::IBV_MTU_1024 as u8);
        let mtu = offered_mtu(params.qp.mtu, active);
        if let Some(asked) = params.qp.mtu.filter(|&m| m > mtu_bytes(mtu)) {
            log::warn!(
                "verbs: --mtu {asked} is above the active MTU of {} port {port} ({} bytes): \
                 using {}",
                choice.device,
                mtu_bytes(active),
                mtu_bytes(mtu)
            );
        }
        let local = Endpoint {
            qpn: qp.qp_num(),
            psn: random_psn(),
            gid,
            mtu,
        };
        let max_inline = qp.cap().max_inline_data;
        log::debug!(
            "verbs: {} port {port} gid-index {gid_index} qpn {:#x} psn {:#x} mtu {} inline {max_inline} ({})",
            choice.device,
            local.qpn,
            local.psn,
            mtu_bytes(local.mtu),
            match device_work {
                DeviceWork::HostThreads => "a software device: its work runs on this host's CPUs",
                DeviceWork::Elsewhere => "a hardware device",
            }
        );
        Ok(Self {
            qp,
            mr,
            cq,
            channel,
            pd,
            _context: context,
            memory,
            path_mtu: None,
            max_inline,
            send_list: SendList::with_capacity(params.slots.max(1)),
            recv_list: RecvList::with_capacity(params.slots.max(1)),
            depth,
            retired_qpn: None,
            qp_stuck: false,
            pending: Vec::new(),
            scratch: Vec::with_capacity(params.slots * 2 + 16),
            wcs: [ibv_wc::default(); POLL_BATCH],
            port,
            gid_index,
            qp_params: QpParams::from_settings(&params.qp),
            rnr_retry: rnr_retry(&params.faults),
            local,
            closed: false,
            armed: false,
            device_work,
        })
    }

    /// Consumes pending completion-channel events (each is acknowledged as it is taken, as the
    /// CQ's destruction requires).
    fn drain_channel_events(&mut self) {
        if let Err(e) = self.channel.take_events() {
            log::debug!("verbs: {e}");
        }
    }

    /// Posts the one send in `self.send_list`.
    fn post_send_list(&mut self, what: &'static str) -> Result<()> {
        // SAFETY: the list's entries lie in slots of the registered buffer (or are inline or
        // empty), which outlives the QP; a staging slot is not touched again before its send
        // completion (the sink's rule).
        let r = unsafe { self.qp.post_send(&mut self.send_list) };
        self.send_list.clear();
        r.map_err(|e| verb(what, e, None))
    }

    /// Posts the one receive in `self.recv_list`.
    fn post_recv_list(&mut self, what: &'static str) -> Result<()> {
        // SAFETY: the list's entry (if any) is a receive slot of the registered buffer (local
        // write), which outlives the QP and is not read until its completion.
        let r = unsafe { self.qp.post_recv(&mut self.recv_list) };
        self.recv_list.clear();
        r.map_err(|e| verb(what, e, None))
    }

    /// Posts one zero-length receive for an incoming credit announcement (sender side).
    fn post_credit_recv(&mut self) -> Result<()> {
        self.recv_list.push(CREDIT_TAG, None);
        self.post_recv_list("ibv_post_recv(credit)")
    }

    /// Takes every completion off the CQ and drops it (a resume, after the QP they belong to
    /// was destroyed).
    fn discard_cq(&mut self) -> Result<()> {
        loop {
            let n = self
                .cq
                .poll(&mut self.wcs)
                .map_err(|e| verb("ibv_poll_cq", e, None))?;
            if n == 0 {
                return Ok(());
            }
        }
    }
}

impl<R: VerbsRole> VerbsTransport<R> {
    /// Takes completed work requests off the CQ; returns how many.
    fn poll_cq(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = self
                .core
                .cq
                .poll(&mut self.core.wcs)
                .map_err(|e| verb("ibv_poll_cq", e, None))?;
            for i in 0..n {
                // A copy (one entry, only of what completed): the checks below borrow `self`.
                let wc = self.core.wcs[i];
                if self.core.retired_qpn == Some(wc.qp_num) {
                    log::debug!("verbs: dropped a completion of a torn-down queue pair");
                    continue;
                }
                if wc.wr_id & CREDIT_TAG != 0 {
                    self.credit_completion(&wc, out)?;
                    continue;
                }
                let is_send = wc.wr_id & SEND_TAG != 0;
                if wc.status != ffi::IBV_WC_SUCCESS {
                    return Err(completion_error(is_send, wc.status));
                }
                if !is_send {
                    check_receive_opcode(&wc)?;
                    let slot = usize::try_from(wc.wr_id)
                        .ok()
                        .filter(|&i| i < self.core.memory.count())
                        .ok_or_else(|| out_of_range(wc.wr_id))?;
                    self.role.receive_completed(slot)?;
                    out.push(Completion::Recv(Arrived::new(
                        RecvSlot::mint(slot),
                        wc.byte_len as usize,
                    )));
                } else if wc.wr_id & FLUSH_TAG != 0 {
                    self.role.flush_completed(|id| {
                        out.push(Completion::Send(StagingSlot::mint(
                            (id & !SEND_TAG) as usize,
                        )))
                    });
                } else if !self.role.send_completed(wc.wr_id, |id| {
                    out.push(Completion::Send(StagingSlot::mint(
                        (id & !SEND_TAG) as usize,
                    )))
                }) {
                    return Err(Error::Internal(format!(
                        "verbs: completion for send {:#x}, which is not outstanding",
                        wc.wr_id
                    )));
                }
            }
            total += n;
            if n < POLL_BATCH {
                return Ok(total);
            }
        }
    }

    /// A credit announcement completed. On the sender its count is reported and its receive
    /// re-posted; an announcement without a count, or of none, breaks the protocol. On the receiver a signaled credit send frees its queue entry and those of the
    /// unsignaled ones before it: if it fails, the sender is gone or closing, which the control
    /// channel reports with the right words.
    fn credit_completion(&mut self, wc: &ibv_wc, out: &mut Vec<Completion>) -> Result<()> {
        let (wr_id, status) = (wc.wr_id, wc.status);
        if wr_id & SEND_TAG != 0 {
            // A failed send completes even unsignaled; either way it ends its run.
            self.role.credit_send_completed(wr_id);
            if status != ffi::IBV_WC_SUCCESS {
                log::debug!("verbs: a credit send completed with status {status}");
            }
            return Ok(());
        }
        if status != ffi::IBV_WC_SUCCESS {
            return Err(completion_error(false, status));
        }
        check_receive_opcode(wc)?;
        let count = announced_credits(wc)?;
        out.push(Completion::Credits(count));
        self.core.post_credit_recv()
    }
}

impl<R: VerbsRole> DataPath for VerbsTransport<R> {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
    }

    fn local_blob(&self) -> Vec<u8> {
        self.core.local.encode()
    }

    fn connect(&mut self, peer_blob: &[u8], _deadline: Instant) -> Result<SetupStep> {
        // Nothing here waits for the peer: the QP moves to RTR and RTS at once.
        self.core.connect_now(peer_blob, R::ROLE)?;
        Ok(SetupStep::Done)
    }

    fn path_mtu(&self) -> Option<u32> {
        self.core.path_mtu.map(mtu_bytes)
    }

    fn qp_settings(&self) -> QpSettings {
        QpSettings {
            traffic_class: Some(self.core.qp_params.traffic_class),
            service_level: Some(self.core.qp_params.service_level),
            mtu: Some(mtu_bytes(self.core.local.mtu)),
            ack_timeout: Some(self.core.qp_params.ack_timeout),
            retry_count: Some(self.core.qp_params.retry_count),
        }
    }

    fn slot_size(&self) -> usize {
        self.core.memory.size()
    }

    fn credit_route(&self) -> CreditRoute {
        CreditRoute::InBand
    }

    fn device_work(&self) -> DeviceWork {
        self.core.device_work
    }

    fn on_wakeup(&mut self) {
        // An event fired (or the wake-up was spurious): either way the CQ is re-armed by the
        // next poll, which re-arming twice does no harm.
        self.core.drain_channel_events();
        self.core.armed = false;
    }

    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        let fd: BorrowedFd<'_> = self.core.channel.as_fd();
        Some(WaitHandle {
            fd,
            writable: false,
        })
    }

    fn close(&mut self) {
        if !self.core.closed {
            self.core.closed = true;
            let reset = ibv_qp_attr {
                qp_state: ffi::IBV_QPS_ERR,
                ..Default::default()
            };
            // Moving to ERROR flushes outstanding work requests; failure only means it is gone.
            let _ = self.core.qp.modify(&reset, ffi::IBV_QP_STATE);
            let mut sink = Vec::new();
            let _ = self.poll_cq(&mut sink);
            self.core.drain_channel_events();
            self.role.closed();
        }
    }

    fn can_resume(&self) -> bool {
        !self.core.qp_stuck
    }

    /// Moves the old QP to the error state and destroys it, so that the device is done with
    /// every slot it named and puts no more completions on the CQ; drains the CQ of the rest
    /// (whatever they said: the transport's own bookkeeping knows what was outstanding);
    /// creates a new QP on the same protection domain, CQ and completion channel (the wait
    /// handle stays valid, the slots stay registered) in INIT, with a new starting PSN; posts
    /// again, in their order, the receives that had not been reported (a receiver); and gives
    /// back the staging slot of every send not reported complete (a sender). Credits in flight
    /// are gone with the old QP: a sender's credit receives are posted again by `connect`.
    fn reset_for_resume(&mut self, reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        if self.core.qp_stuck {
            return Err(Error::unavailable(
                NAME,
                "the queue pair of the broken path could not be destroyed and may still use the \
                 slots: this session cannot resume"
                    .to_owned(),
            ));
        }
        let err = ibv_qp_attr {
            qp_state: ffi::IBV_QPS_ERR,
            ..Default::default()
        };
        // Stops the old QP at once (a QP already in error, or one whose device is gone, may
        // refuse: its destruction below is what counts).
        if let Err(e) = self.core.qp.modify(&err, ffi::IBV_QP_STATE) {
            log::debug!("verbs: moving the old queue pair to ERROR: {e}");
        }
        // The new QP exists before the old one is destroyed, so it never gets the old number;
        // in RESET it has nothing posted, so whatever the CQ holds below is the old QP's.
        let qp = create_qp(&self.core.pd, &self.core.cq, self.core.depth)?;
        let old = std::mem::replace(&mut self.core.qp, qp);
        let old_qpn = old.qp_num();
        if let Err(e) = old.destroy() {
            self.core.qp_stuck = true;
            return Err(verb("ibv_destroy_qp", e, None));
        }
        self.core.retired_qpn = Some(old_qpn);
        self.core.discard_cq()?;
        self.core.drain_channel_events();
        self.core.armed = false;
        init_qp(&self.core.qp, self.core.port, R::ROLE)?;
        self.core.max_inline = self.core.qp.cap().max_inline_data;
        self.core.local = Endpoint {
            qpn: self.core.qp.qp_num(),
            psn: random_psn(),
            ..self.core.local
        };
        self.core.path_mtu = None;
        // The receives posted again, the sends given back (each role's own).
        self.role.reset_for_resume(&mut self.core, reclaimed)?;
        self.core.closed = false;
        log::debug!(
            "verbs: queue pair {old_qpn:#x} torn down for a resume; new qpn {:#x} psn {:#x}",
            self.core.local.qpn,
            self.core.local.psn
        );
        Ok(())
    }
}

/// Creates the RC queue pair on `pd`, both directions on `cq`, `depth` work requests each way
/// and one more on the send queue for a sender's flush (the window's sends may fill the rest:
/// [`crate::transport::signaling`]), with inline data where the provider grants it (else
/// without).
fn create_qp(pd: &ProtectionDomain, cq: &CompletionQueue, depth: u32) -> Result<QueuePair> {
    let create = |max_inline_data: u32| {
        pd.create_qp(QpInit {
            send_cq: cq,
            recv_cq: cq,
            cap: ibv_qp_cap {
                max_send_wr: depth.saturating_add(1),
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data,
            },
            qp_type: ffi::IBV_QPT_RC,
            sq_sig_all: false,
        })
    };
    // A provider may refuse inline data (or this much of it): then do without.
    create(INLINE_WANTED)
        .or_else(|e| {
            log::debug!("verbs: no QP with {INLINE_WANTED} bytes inline ({e}); trying none");
            create(0)
        })
        .map_err(|e| verb("ibv_create_qp", e, None))
}

/// The settings of our queue pair that `--tclass`, `--sl`, `--ack-timeout` and `--retry-count`
/// choose, each with today's default when not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QpParams {
    traffic_class: u8,
    service_level: u8,
    ack_timeout: u8,
    retry_count: u8,
}

impl QpParams {
    fn from_settings(asked: &QpSettings) -> Self {
        Self {
            traffic_class: asked.traffic_class.unwrap_or(0),
            service_level: asked.service_level.unwrap_or(0),
            ack_timeout: asked.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT),
            retry_count: asked.retry_count.unwrap_or(DEFAULT_RETRY_COUNT),
        }
    }
}

/// What the RTR and RTS transitions need besides the two endpoints.
#[derive(Debug, Clone, Copy)]
struct PathParams {
    port: u8,
    gid_index: u8,
    qp: QpParams,
    rnr_retry: u8,
}

/// The MTU (`ibv_mtu`) our endpoint offers: `--mtu` when given, capped by the port's active
/// MTU `active`; the active MTU otherwise.
fn offered_mtu(asked: Option<u32>, active: u8) -> u8 {
    let Some(asked) = asked else {
        return active;
    };
    // 256 is ibv_mtu 1, ... 4096 is 5 (Config::validate allowed only those five).
    let wanted = (1..=5u8).find(|&m| mtu_bytes(m) >= asked).unwrap_or(5);
    wanted.min(active)
}

/// The RTR transition toward `peer`: its attributes and their mask. The path MTU is the
/// smaller of both endpoints' (RC needs one MTU on both queue pairs); the address vector
/// carries our traffic class (the DSCP and ECN bits of every packet we send) and service level.
fn rtr_attributes(
    local: &Endpoint,
    peer: &Endpoint,
    path: &PathParams,
) -> (ibv_qp_attr, ffi::ibv_qp_attr_mask) {
    let rtr = ibv_qp_attr {
        qp_state: ffi::IBV_QPS_RTR,
        path_mtu: u32::from(local.mtu.min(peer.mtu)),
        dest_qp_num: peer.qpn,
        rq_psn: local.psn,
        max_dest_rd_atomic: 0,
        min_rnr_timer: 12,
        ah_attr: ffi::ibv_ah_attr {
            is_global: 1,
            port_num: path.port,
            sl: path.qp.service_level,
            grh: ffi::ibv_global_route {
                sgid_index: path.gid_index,
                dgid: ffi::ibv_gid { raw: peer.gid },
                hop_limit: 64,
                traffic_class: path.qp.traffic_class,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let mask = ffi::IBV_QP_STATE
        | ffi::IBV_QP_AV
        | ffi::IBV_QP_PATH_MTU
        | ffi::IBV_QP_DEST_QPN
        | ffi::IBV_QP_RQ_PSN
        | ffi::IBV_QP_MAX_DEST_RD_ATOMIC
        | ffi::IBV_QP_MIN_RNR_TIMER;
    (rtr, mask)
}

/// The RTS transition: our starting PSN is the peer's expected one; the ACK timeout and retry
/// count decide how long a lost packet is retransmitted before a send fails (the defaults:
/// 4.096 us x 2^18 = 1.07 s, 7 retries, about 8.6 s).
fn rts_attributes(peer: &Endpoint, path: &PathParams) -> (ibv_qp_attr, ffi::ibv_qp_attr_mask) {
    let rts = ibv_qp_attr {
        qp_state: ffi::IBV_QPS_RTS,
        sq_psn: peer.psn,
        timeout: path.qp.ack_timeout,
        retry_cnt: path.qp.retry_count,
        rnr_retry: path.rnr_retry,
        max_rd_atomic: 0,
        ..Default::default()
    };
    let mask = ffi::IBV_QP_STATE
        | ffi::IBV_QP_SQ_PSN
        | ffi::IBV_QP_TIMEOUT
        | ffi::IBV_QP_RETRY_CNT
        | ffi::IBV_QP_RNR_RETRY
        | ffi::IBV_QP_MAX_QP_RD_ATOMIC;
    (rts, mask)
}

/// Moves a new QP to INIT on `port`.
fn init_qp(qp: &QueuePair, port: u8, role: Role) -> Result<()> {
    let init = ibv_qp_attr {
        qp_state: ffi::IBV_QPS_INIT,
        pkey_index: 0,
        port_num: port,
        // The receiver accepts the sender's zero-length flushing write; no memory region
        // grants remote access, so no peer can write anything with it.
        qp_access_flags: match role {
            Role::Sender => ffi::IBV_ACCESS_LOCAL_WRITE,
            Role::Receiver => ffi::IBV_ACCESS_LOCAL_WRITE | ffi::IBV_ACCESS_REMOTE_WRITE,
        },
        ..Default::default()
    };
    qp.modify(
        &init,
        ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT | ffi::IBV_QP_ACCESS_FLAGS,
    )
    .map_err(|e| verb("ibv_modify_qp(INIT)", e, None))
}

impl VerbsQp {
    /// Moves the QP to RTR and RTS toward the peer's endpoint; a sender (`role`) posts its
    /// credit receives.
    fn connect_now(&mut self, peer_blob: &[u8], role: Role) -> Result<()> {
        let peer = Endpoint::decode(peer_blob).ok_or_else(|| Error::TransportProtocol {
            transport: NAME,
            detail: format!(
                "the peer's verbs endpoint is malformed ({} bytes)",
                peer_blob.len()
            ),
        })?;
        let path = PathParams {
            port: self.port,
            gid_index: self.gid_index,
            qp: self.qp_params,
            rnr_retry: self.rnr_retry,
        };
        let (rtr, rtr_mask) = rtr_attributes(&self.local, &peer, &path);
        self.path_mtu = Some(u8::try_from(rtr.path_mtu).unwrap_or(self.local.mtu));
        self.qp
            .modify(&rtr, rtr_mask)
            .map_err(|e| verb("ibv_modify_qp(RTR)", e, Some(ROCE_HINT)))?;
        let (rts, rts_mask) = rts_attributes(&peer, &path);
        self.qp
            .modify(&rts, rts_mask)
            .map_err(|e| verb("ibv_modify_qp(RTS)", e, Some(ROCE_HINT)))?;
        if role == Role::Sender {
            for _ in 0..self.memory.count() {
                self.post_credit_recv()?;
            }
        }
        log::debug!(
            "verbs: connected to qpn {:#x} gid {} (path MTU {}, traffic class {}, service \
             level {}, ACK timeout {}, retry count {})",
            peer.qpn,
            gid_text(&peer.gid),
            mtu_bytes(self.local.mtu.min(peer.mtu)),
            self.qp_params.traffic_class,
            self.qp_params.service_level,
            self.qp_params.ack_timeout,
            self.qp_params.retry_count
        );
        Ok(())
    }
}

impl<R: VerbsRole> VerbsTransport<R> {
    /// Completions of the other role's kind are bugs of this transport, never the peer's.
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        if self.core.closed {
            return Err(Error::TransportClosed { transport: NAME });
        }
        if !self.core.pending.is_empty() {
            out.append(&mut self.core.pending);
        }
        self.poll_cq(out)?;
        // Always leave the CQ armed: the caller may sleep even after a poll that returned
        // something (just not what it waits for). Polling again after arming closes the race
        // with a completion that arrived in between. Armed, it stays so until an event fires,
        // and a fired event stays readable on the channel until `on_wakeup` takes it.
        if !self.core.armed {
            self.core
                .cq
                .req_notify(false)
                .map_err(|e| verb("ibv_req_notify_cq", e, None))?;
            self.core.armed = true;
            self.poll_cq(out)?;
        }
        Ok(())
    }
}

/// The vendor ID the kernel's soft-RoCE driver (rxe) reports.
const RXE_VENDOR_ID: u32 = 0x00FF_FFFF;
/// The vendor ID the kernel's soft-iWARP driver (siw) reports.
const SIW_VENDOR_ID: u32 = 0x0062_6d74;

/// Where `device` does its work: a software device (rxe, siw) in kernel workers on this host's
/// CPUs, by the vendor ID it reports; a device that cannot be asked counts as hardware.
fn work_of_device(context: &Context, device: &str) -> DeviceWork {
    match context.query_device() {
        Ok(attr) => work_of_vendor(attr.vendor_id),
        Err(e) => {
            log::debug!("verbs: ibv_query_device on {device}: {e}; taken for a hardware device");
            DeviceWork::Elsewhere
        }
    }
}

/// See [`work_of_device`].
fn work_of_vendor(vendor_id: u32) -> DeviceWork {
    match vendor_id {
        RXE_VENDOR_ID | SIW_VENDOR_ID => DeviceWork::HostThreads,
        _ => DeviceWork::Elsewhere,
    }
}

/// How many messages a credit announcement released: its immediate data, which must be there
/// and not zero (the core checks the count against what was sent).
fn announced_credits(wc: &ibv_wc) -> Result<u32> {
    let count = if wc.wc_flags & ffi::IBV_WC_WITH_IMM != 0 {
        u32::from_be(wc.imm_data)
    } else {
        0
    };
    if count == 0 {
        return Err(Error::Protocol(crate::ProtocolViolation::Unexpected {
            expected: "a credit announcement with its count",
            got: if wc.wc_flags & ffi::IBV_WC_WITH_IMM != 0 {
                "an announcement of 0 credits"
            } else {
                "a send without immediate data"
            },
        }));
    }
    Ok(count)
}

/// A successful receive must be a send's: anything else (an RDMA write with immediate, which
/// also consumes a posted receive) is the peer breaking the protocol, not a 0-byte message.
fn check_receive_opcode(wc: &ibv_wc) -> Result<()> {
    if wc.opcode == ffi::IBV_WC_RECV {
        return Ok(());
    }
    Err(Error::Protocol(crate::ProtocolViolation::Unexpected {
        expected: "a send on the data path",
        got: if wc.opcode == ffi::IBV_WC_RECV_RDMA_WITH_IMM {
            "an RDMA write with immediate"
        } else {
            "another kind of work completion"
        },
    }))
}

/// A GID as eight groups of four hex digits (as `doctor` prints them).
fn gid_text(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The QP's receive-not-ready retry count: 7 retries for ever. Our protocol posts every receive
/// before it announces the credit, so no RNR NAK should ever come (the soft-RoCE VM asserts
/// rxe's RNR counters stay 0). A test build's fault ([`crate::config::TestFaults::rnr_retry`],
/// 0-7) sets fewer, so that the VM can run sessions in which a race fails the session rather
/// than being retried.
fn rnr_retry(faults: &crate::config::TestFaults) -> u8 {
    match faults.rnr_retry.filter(|n| *n <= 7) {
        Some(n) => {
            log::info!("test fault: verbs rnr_retry {n}");
            n
        }
        None => 7,
    }
}

const MEMLOCK_HINT: &str =
    "memory registration needs CAP_IPC_LOCK or a memlock limit above the slot memory: in a \
container add --cap-add=IPC_LOCK (root) or --ulimit memlock=-1 (any user); on a host run as root \
or raise ulimit -l";

/// A verbs-sys failure as our error. A failed verb keeps its errno as the source (verbs-sys's
/// own message repeats the verb and the errno, which ours already says); any other verbs-sys
/// error is kept whole inside it (`source.get_ref()` downcasts to [`verbs_sys::Error`]), not
/// flattened into a string.
fn verb(verb: &'static str, e: verbs_sys::Error, hint: Option<&'static str>) -> Error {
    let source = match e {
        verbs_sys::Error::Verb { source, .. } | verbs_sys::Error::Post { source, .. } => source,
        other => io::Error::other(other),
    };
    Error::Verbs { verb, source, hint }
}

fn out_of_range(slot: u64) -> Error {
    Error::TransportProtocol {
        transport: NAME,
        detail: format!("slot {slot} or length out of range"),
    }
}

fn completion_error(is_send: bool, status: u32) -> Error {
    let (name, hint) = match status {
        1 => (
            "local length error",
            Some("a message larger than the receive slot"),
        ),
        4 => ("local protection error", None),
        10 => (
            "remote access error",
            Some("the peer refused the zero-length RDMA write that flushes unsignaled sends: is it an older rdma-container?"),
        ),
        5 => (
            "work request flushed",
            Some("the queue pair went to the error state"),
        ),
        9 => (
            "remote invalid request",
            Some("the peer's receive slot is too small for the message"),
        ),
        12 => ("transport retry counter exceeded", Some(ROCE_HINT)),
        13 => (
            "RNR retry counter exceeded",
            Some("the peer had no receive posted"),
        ),
        _ => ("error status", None),
    };
    Error::VerbsCompletion {
        op: if is_send { "send" } else { "receive" },
        status: crate::CompletionStatus { code: status, name },
        hint,
    }
}

fn mtu_bytes(mtu: u8) -> u32 {
    128u32 << mtu
}

/// A 24-bit starting PSN, different per queue pair.
fn random_psn() -> u32 {
    use std::hash::BuildHasher;
    let v = std::collections::hash_map::RandomState::new()
        .hash_one((std::process::id(), Instant::now()));
    (v as u32) & 0xff_ffff
}

#[cfg(test)]
mod tests {
    use super::recv::{requeue_landed, take_posted, VerbsReceiver};
    use super::send::{reclaim_sends, VerbsSender};
    use super::*;
    use crate::roce::{GidTable, Overrides};
    use crate::transport::signaling::SendSignaling;
    use crate::transport::{BootstrapSide, RecvPath, SendEvent, SendPath};
    use rdma_test_support::{skip_or_fail, skip_unless_strict_allows, Allowed};
    use std::collections::VecDeque;
    use std::net::Ipv4Addr;
    use std::path::Path;

    #[test]
    fn software_devices_are_told_apart_from_hardware_by_their_vendor_id() {
        assert_eq!(work_of_vendor(0x00FF_FFFF), DeviceWork::HostThreads, "rxe");
        assert_eq!(work_of_vendor(0x0062_6d74), DeviceWork::HostThreads, "siw");
        assert_eq!(
            work_of_vendor(0x0000_02c9),
            DeviceWork::Elsewhere,
            "ConnectX"
        );
        assert_eq!(work_of_vendor(0), DeviceWork::Elsewhere);
    }

    #[test]
    fn a_receive_completion_takes_its_slot_off_the_posted_list_in_order() {
        let mut posted: VecDeque<usize> = [2, 3, 0].into();
        take_posted(&mut posted, 2).unwrap();
        assert_eq!(posted, [3, 0]);
        // Out of order (never on RC): taken off all the same, the others keep their order.
        take_posted(&mut posted, 0).unwrap();
        assert_eq!(posted, [3]);
        let e = take_posted(&mut posted, 5).unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e}");
        assert!(
            e.to_string().contains("slot 5, which was not posted"),
            "{e}"
        );
        assert_eq!(posted, [3]);
    }

    #[test]
    fn a_credit_announcement_counts_its_immediate_and_one_without_a_count_breaks_the_protocol() {
        let announcement = |flags, imm: u32| ibv_wc {
            opcode: ffi::IBV_WC_RECV,
            wc_flags: flags,
            imm_data: imm.to_be(),
            ..ibv_wc::default()
        };
        let counted = announced_credits(&announcement(ffi::IBV_WC_WITH_IMM, 32));
        assert_eq!(counted.unwrap(), 32);
        for (flags, imm) in [(ffi::IBV_WC_WITH_IMM, 0), (0, 32)] {
            let e = announced_credits(&announcement(flags, imm)).unwrap_err();
            assert!(matches!(e, Error::Protocol(_)), "{e}");
        }
    }

    #[test]
    fn a_resume_posts_unreported_arrivals_first_and_gives_back_every_unreported_send() {
        // Receiver: slots 4 and 5 landed and were taken off the CQ (while waiting for room for
        // a credit) but not reported; 0 and 1 are still posted behind them.
        let mut pending = vec![
            Completion::Recv(Arrived::new(RecvSlot::mint(4), 8)),
            Completion::Credits(2),
            Completion::Recv(Arrived::new(RecvSlot::mint(5), 0)),
        ];
        let mut posted: VecDeque<usize> = [0, 1].into();
        requeue_landed(&mut pending, &mut posted);
        assert_eq!(posted, [4, 5, 0, 1]);
        // A resume attempt that fails later and is tried again posts the same again.
        requeue_landed(&mut pending, &mut posted);
        assert_eq!(posted, [4, 5, 0, 1]);
        // Sender: the send from staging slot 3 completed and was not reported; 6, 7 and 1 are
        // outstanding (7 and 1 unsignaled).
        pending.push(Completion::Send(StagingSlot::mint(3)));
        let mut sends = SendSignaling::new(8, 4);
        for slot in [6u64, 7, 1] {
            sends.on_post(SEND_TAG | slot);
        }
        let mut reclaimed = Vec::new();
        reclaim_sends(&mut pending, &mut sends, &mut reclaimed);
        let reclaimed: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
        assert_eq!(reclaimed, [3, 6, 7, 1]);
        assert!(pending.is_empty(), "the unreported credit is dropped");
        assert_eq!(sends.outstanding(), 0);
        assert!(!sends.needs_flush(), "no unsignaled run carries over");
    }

    /// A receiver and a sender on the RDMA device that owns `RDMA_TEST_ADDR`, connected to each
    /// other (the soft-RoCE VM runs this with both on one rxe device, which loops the packets
    /// back), the receiver's slots all posted; the sender's slots are `tx_slot_size` bytes, the
    /// receiver's `rx_slot_size`. `None` (after saying why) when this run has no such device.
    fn verbs_pair(
        slots: usize,
        rx_slot_size: usize,
        tx_slot_size: usize,
    ) -> Option<(VerbsReceiver, VerbsSender)> {
        let addr = std::env::var("RDMA_TEST_ADDR").ok();
        let (true, Some(addr)) = (
            std::env::var("RDMA_TEST_TRANSPORT").as_deref() == Ok("verbs"),
            addr,
        ) else {
            skip_unless_strict_allows(
                Allowed::RdmaHardware,
                "needs an RDMA device: RDMA_TEST_TRANSPORT=verbs RDMA_TEST_ADDR=<its IPv4 \
                 address> (scripts/softroce-vm.sh --checks transport runs it over soft-RoCE)",
            );
            return None;
        };
        let Ok(ip) = addr.parse::<Ipv4Addr>() else {
            skip_or_fail(&format!("RDMA_TEST_ADDR={addr} is not an IPv4 address"));
            return None;
        };
        let choice = match GidTable::read(Path::new("/sys"))
            .and_then(|table| crate::roce::select(&table, ip, None, &Overrides::default()))
        {
            Ok(selection) => selection.choice,
            Err(e) => {
                skip_or_fail(&format!("no RoCE v2 GID owns {ip}: {e}"));
                return None;
            }
        };
        let params = |role, slot_size| SetupParams {
            side: BootstrapSide::Client,
            role,
            local_ip: ip,
            peer_ip: ip,
            slots,
            slot_size,
            lanes: 1,
            extra_paths: Vec::new(),
            device: Some(choice.clone()),
            qp: QpSettings::default(),
            sysfs_root: "/sys".into(),
            faults: crate::config::TestFaults::default(),
        };
        let created = VerbsReceiver::new(&params(Role::Receiver, rx_slot_size))
            .and_then(|rx| Ok((rx, VerbsSender::new(&params(Role::Sender, tx_slot_size))?)));
        let (mut rx, mut tx) = match created {
            Ok(pair) => pair,
            Err(e) => {
                skip_or_fail(&format!(
                    "the verbs transport cannot start on {}: {}",
                    choice.device,
                    e.chain()
                ));
                return None;
            }
        };
        if choice.device.starts_with("rxe") {
            // soft-RoCE (the VM's devices are rxeA and rxeB): its work runs on our CPUs
            assert_eq!(
                rx.device_work(),
                DeviceWork::HostThreads,
                "{}",
                choice.device
            );
            assert_eq!(
                tx.device_work(),
                DeviceWork::HostThreads,
                "{}",
                choice.device
            );
        }
        connect_pair(&mut rx, &mut tx);
        for slot in 0..slots {
            rx.post_recv(RecvSlot::mint(slot)).expect("post_recv");
        }
        Some((rx, tx))
    }

    fn connect_pair(rx: &mut VerbsReceiver, tx: &mut VerbsSender) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let (rx_blob, tx_blob) = (rx.local_blob(), tx.local_blob());
        assert_eq!(tx.connect(&rx_blob, deadline).unwrap(), SetupStep::Done);
        assert_eq!(rx.connect(&tx_blob, deadline).unwrap(), SetupStep::Done);
    }

    /// How long a test waits for the device (soft-RoCE under an emulated CPU is slow).
    const WAIT: Duration = Duration::from_secs(30);

    /// Sends message `n` (8 bytes of `n`) from staging slot `slot`.
    fn send(tx: &mut VerbsSender, slot: usize, n: u8) {
        let mut slot = StagingSlot::mint(slot);
        tx.staging(&mut slot)[..8].copy_from_slice(&[n; 8]);
        tx.post_send(slot, 8).expect("post_send");
    }

    /// Polls until `n` messages arrived: them, in arrival order.
    fn arrivals(rx: &mut VerbsReceiver, n: usize) -> Vec<Arrived> {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        while got.len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} messages arrived",
                got.len()
            );
            rx.poll_arrivals(&mut got).expect("poll_arrivals");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got.len(), n, "more messages arrived than were sent");
        got
    }

    /// Polls until `sent` sends completed and `credits` credits came: the staging slots given
    /// back, in order.
    fn sender_events(tx: &mut VerbsSender, sent: usize, credits: usize) -> Vec<usize> {
        let deadline = Instant::now() + WAIT;
        let (mut slots, mut got_credits, mut out) = (Vec::new(), 0, Vec::new());
        while slots.len() < sent || got_credits < credits {
            assert!(
                Instant::now() < deadline,
                "{} of {sent} sends completed, {got_credits} of {credits} credits came",
                slots.len()
            );
            tx.poll_sends(&mut out).expect("poll_sends");
            for event in out.drain(..) {
                match event {
                    SendEvent::Sent(slot) => slots.push(slot.index()),
                    SendEvent::Credits(n) => got_credits += n as usize,
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            (slots.len(), got_credits),
            (sent, credits),
            "more than expected: {slots:?}"
        );
        slots
    }

    /// Nothing more comes for a while: no completion of an old queue pair, no message twice.
    fn assert_quiet(rx: &mut VerbsReceiver, tx: &mut VerbsSender) {
        let quiet = Instant::now() + Duration::from_millis(300);
        let (mut arrived, mut events) = (Vec::new(), Vec::new());
        while Instant::now() < quiet {
            rx.poll_arrivals(&mut arrived).unwrap();
            tx.poll_sends(&mut events).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(arrived.is_empty(), "{} more arrivals", arrived.len());
        assert!(events.is_empty(), "more sender events: {events:?}");
    }

    fn slots_and_bytes(rx: &VerbsReceiver, got: &[Arrived]) -> Vec<(usize, Vec<u8>)> {
        got.iter()
            .map(|m| (m.slot_index(), rx.message(m).to_vec()))
            .collect()
    }

    /// Over a real RC queue pair (soft-RoCE in the VM): the path breaks with messages landed
    /// but not reported on the receiver and sends not reported on the sender; both ends reset
    /// for a resume, which gives back exactly the sends not reported, keeps the receiver's
    /// slots (and the ones its application holds) and posted receives in their order, and
    /// makes new endpoints; connected again, the messages sent again land in the slots they
    /// would have, in order, credits travel on the new path, and nothing of the old path ever
    /// shows up.
    #[test]
    fn a_reset_for_resume_over_rdma_gives_back_the_sends_and_keeps_the_receive_order() {
        let Some((mut rx, mut tx)) = verbs_pair(6, 64, 64) else {
            return;
        };
        assert!(rx.can_resume() && tx.can_resume());
        // Messages 0-2 arrive; the application releases message 0 (its slot is posted again,
        // behind 3, 4 and 5, and its credit goes back) and holds 1 and 2.
        for n in 0..3 {
            send(&mut tx, n, n as u8);
        }
        let first = arrivals(&mut rx, 3);
        assert_eq!(
            slots_and_bytes(&rx, &first),
            (0..3).map(|n| (n, vec![n as u8; 8])).collect::<Vec<_>>()
        );
        assert_eq!(sender_events(&mut tx, 3, 0), [0, 1, 2]);
        let mut first = first.into_iter();
        let released = first.next().expect("message 0");
        let held: Vec<Arrived> = first.collect();
        rx.post_recv(released.into_slot()).unwrap();
        rx.return_credits(1).unwrap();
        assert!(sender_events(&mut tx, 0, 1).is_empty());
        // Messages 3-5 land in slots 3-5 (their sends completed: the receiver acknowledged
        // them) and the receiver does not poll; message 6 goes out from staging slot 0 with a
        // flush behind it, and the sender does not poll either.
        for n in 3..6 {
            send(&mut tx, n, n as u8);
        }
        assert_eq!(sender_events(&mut tx, 3, 0), [3, 4, 5]);
        send(&mut tx, 0, 6);
        tx.flush_sends().unwrap();
        std::thread::sleep(Duration::from_millis(200));

        // The path breaks: both ends reset.
        let (old_rx, old_tx) = (rx.local_blob(), tx.local_blob());
        let mut none = Vec::new();
        rx.reset_for_resume(&mut none).unwrap();
        assert!(none.is_empty(), "a receiver has no sends to give back");
        let mut reclaimed = Vec::new();
        tx.reset_for_resume(&mut reclaimed).unwrap();
        let reclaimed: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
        assert_eq!(reclaimed, [0], "exactly the send not reported comes back");
        let (new_rx, new_tx) = (
            Endpoint::decode(&rx.local_blob()).expect("receiver blob"),
            Endpoint::decode(&tx.local_blob()).expect("sender blob"),
        );
        let (old_rx, old_tx) = (
            Endpoint::decode(&old_rx).unwrap(),
            Endpoint::decode(&old_tx).unwrap(),
        );
        assert_ne!(new_rx.qpn, old_rx.qpn, "a new queue pair");
        assert_ne!(new_tx.qpn, old_tx.qpn, "a new queue pair");
        assert_eq!((new_rx.gid, new_rx.mtu), (old_rx.gid, old_rx.mtu));
        assert!(rx.can_resume() && tx.can_resume());

        // Connected again; as the sender's core does, messages 3-6 (3 arrived) go again from
        // their own staging slots, whose bytes are still there.
        connect_pair(&mut rx, &mut tx);
        for (slot, n) in [(3, 3), (4, 4), (5, 5), (0, 6)] {
            let mut staging = StagingSlot::mint(slot);
            assert_eq!(tx.staging(&mut staging)[..8], [n; 8]);
            tx.post_send(staging, 8).unwrap();
        }
        let again = arrivals(&mut rx, 4);
        assert_eq!(
            slots_and_bytes(&rx, &again),
            [(3, 3u8), (4, 4), (5, 5), (0, 6)]
                .map(|(slot, n)| (slot, vec![n; 8]))
                .to_vec(),
            "the receives stayed posted in their order"
        );
        assert_eq!(
            slots_and_bytes(&rx, &held),
            [(1, vec![1u8; 8]), (2, vec![2u8; 8])],
            "the slots the application holds are untouched"
        );
        tx.flush_sends().unwrap();
        assert_eq!(sender_events(&mut tx, 4, 0), [3, 4, 5, 0]);
        // Credits travel on the new path: message 1 released, message 7 goes into its slot.
        let mut held = held.into_iter();
        rx.post_recv(held.next().expect("message 1").into_slot())
            .unwrap();
        rx.return_credits(1).unwrap();
        assert!(sender_events(&mut tx, 0, 1).is_empty());
        send(&mut tx, 1, 7);
        tx.flush_sends().unwrap();
        let last = arrivals(&mut rx, 1);
        assert_eq!(slots_and_bytes(&rx, &last), [(1, vec![7u8; 8])]);
        assert_eq!(sender_events(&mut tx, 1, 0), [1]);
        assert_quiet(&mut rx, &mut tx);
    }

    /// The settings the queue pair's RTR and RTS transitions carry (issue 35 item 5): the
    /// traffic class and service level in the address vector, the smaller path MTU, the ACK
    /// timeout and retry count; and today's values when nothing is asked.
    #[test]
    fn rtr_and_rts_attributes_carry_the_queue_pair_settings() {
        let local = Endpoint {
            qpn: 0x11,
            psn: 0x1234,
            gid: [1; 16],
            mtu: 5,
        };
        let peer = Endpoint {
            qpn: 0x22,
            psn: 0xabcd,
            gid: [2; 16],
            mtu: 4,
        };
        let asked = QpSettings {
            traffic_class: Some(104),
            service_level: Some(3),
            mtu: Some(4096),
            ack_timeout: Some(14),
            retry_count: Some(5),
        };
        let path = PathParams {
            port: 2,
            gid_index: 3,
            qp: QpParams::from_settings(&asked),
            rnr_retry: 7,
        };
        let (rtr, mask) = rtr_attributes(&local, &peer, &path);
        assert_eq!(rtr.qp_state, ffi::IBV_QPS_RTR);
        assert_eq!(rtr.ah_attr.grh.traffic_class, 104, "the traffic class");
        assert_eq!(rtr.ah_attr.sl, 3, "the service level");
        assert_eq!(rtr.path_mtu, 4, "the smaller of both MTUs: 2048");
        assert_eq!((rtr.ah_attr.port_num, rtr.ah_attr.grh.sgid_index), (2, 3));
        assert_eq!(rtr.ah_attr.is_global, 1);
        // SAFETY: reading the raw bytes of a GID union (every bit pattern is valid).
        assert_eq!(unsafe { rtr.ah_attr.grh.dgid.raw }, [2; 16]);
        assert_eq!((rtr.dest_qp_num, rtr.rq_psn), (0x22, 0x1234));
        for bit in [ffi::IBV_QP_AV, ffi::IBV_QP_PATH_MTU, ffi::IBV_QP_STATE] {
            assert_ne!(mask & bit, 0, "RTR mask {mask:#x} lacks {bit:#x}");
        }
        let (rts, mask) = rts_attributes(&peer, &path);
        assert_eq!(rts.qp_state, ffi::IBV_QPS_RTS);
        assert_eq!((rts.timeout, rts.retry_cnt), (14, 5));
        assert_eq!((rts.rnr_retry, rts.sq_psn), (7, 0xabcd));
        for bit in [
            ffi::IBV_QP_TIMEOUT,
            ffi::IBV_QP_RETRY_CNT,
            ffi::IBV_QP_STATE,
        ] {
            assert_ne!(mask & bit, 0, "RTS mask {mask:#x} lacks {bit:#x}");
        }

        // Nothing asked: what the queue pair always used.
        let path = PathParams {
            qp: QpParams::from_settings(&QpSettings::default()),
            ..path
        };
        let (rtr, _) = rtr_attributes(&peer, &local, &path);
        assert_eq!((rtr.ah_attr.grh.traffic_class, rtr.ah_attr.sl), (0, 0));
        assert_eq!(rtr.path_mtu, 4, "the smaller MTU either way round");
        let (rts, _) = rts_attributes(&local, &path);
        assert_eq!((rts.timeout, rts.retry_cnt), (18, 7));
    }

    #[test]
    fn mtu_asked_is_capped_by_the_ports_active_mtu() {
        // ibv_mtu: 1 = 256 ... 5 = 4096.
        assert_eq!(offered_mtu(None, 3), 3, "the active MTU by default");
        assert_eq!(offered_mtu(Some(4096), 3), 3, "capped at 1024");
        assert_eq!(offered_mtu(Some(512), 5), 2);
        assert_eq!(offered_mtu(Some(2048), 4), 4);
        assert_eq!(offered_mtu(Some(256), 1), 1);
        assert_eq!(mtu_bytes(offered_mtu(Some(1024), 5)), 1024);
    }

    #[test]
    fn endpoint_round_trips_and_rejects_garbage() {
        let e = Endpoint {
            qpn: 0x1234,
            psn: 0xabcdef,
            gid: [7; 16],
            mtu: 3,
        };
        assert_eq!(Endpoint::decode(&e.encode()), Some(e));
        assert_eq!(Endpoint::decode(&e.encode()[..24]), None);
        let mut bad_mtu = e.encode();
        bad_mtu[24] = 9;
        assert_eq!(Endpoint::decode(&bad_mtu), None);
        assert_eq!(mtu_bytes(3), 1024);
    }

    #[test]
    fn only_a_send_may_complete_a_receive_slot() {
        let mut wc = ibv_wc {
            opcode: ffi::IBV_WC_RECV,
            ..ibv_wc::default()
        };
        assert!(check_receive_opcode(&wc).is_ok());
        // A peer's RDMA write with immediate consumes a posted receive too: a violation, never
        // a 0-byte message.
        wc.opcode = ffi::IBV_WC_RECV_RDMA_WITH_IMM;
        let e = check_receive_opcode(&wc).unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
        assert!(
            e.to_string()
                .contains("expected a send on the data path, got an RDMA write with immediate"),
            "{e}"
        );
        wc.opcode = ffi::IBV_WC_SEND;
        let e = check_receive_opcode(&wc).unwrap_err();
        assert!(
            e.to_string().contains("another kind of work completion"),
            "{e}"
        );
    }

    #[test]
    fn completion_errors_name_the_status_and_hint() {
        let e = completion_error(true, 12).to_string();
        assert!(
            e.contains("send completed with transport retry counter exceeded"),
            "{e}"
        );
        assert!(e.contains("UDP port 4791"), "{e}");
    }

    #[test]
    fn a_failed_verb_prints_its_name_and_errno_once() {
        let errno = io::Error::from_raw_os_error(libc::ENOMEM);
        let e = verb(
            "ibv_reg_mr",
            verbs_sys::Error::Verb {
                verb: "ibv_reg_mr",
                source: io::Error::from_raw_os_error(libc::ENOMEM),
            },
            Some("raise the memlock limit"),
        );
        assert_eq!(
            e.chain(),
            format!("ibv_reg_mr failed (raise the memlock limit): {errno}")
        );
    }

    #[test]
    fn a_verbs_sys_error_without_errno_stays_typed_and_prints_once() {
        let e = verb(
            "ibv_post_send",
            verbs_sys::Error::InlineTooLarge { len: 300, max: 64 },
            None,
        );
        let text = "inline send of 300 bytes exceeds the queue pair's max_inline_data of 64";
        assert_eq!(e.chain(), format!("ibv_post_send failed: {text}"));
        let Error::Verbs { source, .. } = &e else {
            panic!("{e:?}");
        };
        let kept = source
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<verbs_sys::Error>());
        assert!(
            matches!(
                kept,
                Some(verbs_sys::Error::InlineTooLarge { len: 300, max: 64 })
            ),
            "{kept:?}"
        );
    }
    /// Polls `what` until it fails (or the wait ends): the error.
    fn first_error(mut poll: impl FnMut() -> Result<usize>, what: &str) -> Error {
        let deadline = Instant::now() + WAIT;
        loop {
            match poll() {
                Err(e) => return e,
                Ok(n) => assert_eq!(n, 0, "{what}: nothing may complete before the error"),
            }
            assert!(Instant::now() < deadline, "{what}: no error came");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Over a real RC queue pair: a message larger than the receive slot puts both QPs in the
    /// error state (the receiver's receive fails with a length error, the sender's send with
    /// a remote invalid request). A reset for a resume still works from there: the failed
    /// send comes back, the failed receive is posted again, the held slot is untouched, and
    /// the new path carries messages and credits with no trace of the old one.
    #[test]
    fn a_reset_for_resume_over_rdma_recovers_queue_pairs_in_the_error_state() {
        let Some((mut rx, mut tx)) = verbs_pair(2, 64, 128) else {
            return;
        };
        send(&mut tx, 0, 0);
        let held = arrivals(&mut rx, 1);
        assert_eq!(slots_and_bytes(&rx, &held), [(0, vec![0u8; 8])]);
        assert_eq!(sender_events(&mut tx, 1, 0), [0]);
        let mut slot = StagingSlot::mint(1);
        tx.staging(&mut slot).fill(1);
        tx.post_send(slot, 128).unwrap();
        let mut events = Vec::new();
        let e = first_error(
            || {
                tx.poll_sends(&mut events)?;
                Ok(events.len())
            },
            "sender",
        );
        assert!(
            matches!(e, Error::VerbsCompletion { op: "send", .. }),
            "{e}"
        );
        let mut got = Vec::new();
        let e = first_error(
            || {
                rx.poll_arrivals(&mut got)?;
                Ok(got.len())
            },
            "receiver",
        );
        assert!(
            matches!(e, Error::VerbsCompletion { op: "receive", .. }),
            "{e}"
        );

        let mut none = Vec::new();
        rx.reset_for_resume(&mut none).unwrap();
        assert!(none.is_empty());
        let mut reclaimed = Vec::new();
        tx.reset_for_resume(&mut reclaimed).unwrap();
        let reclaimed: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
        assert_eq!(reclaimed, [1], "the failed send comes back");
        connect_pair(&mut rx, &mut tx);

        // Message 1 again, at a size the receiver takes: it lands in slot 1, posted again.
        send(&mut tx, 1, 1);
        let again = arrivals(&mut rx, 1);
        assert_eq!(slots_and_bytes(&rx, &again), [(1, vec![1u8; 8])]);
        assert_eq!(sender_events(&mut tx, 1, 0), [1]);
        assert_eq!(
            slots_and_bytes(&rx, &held),
            [(0, vec![0u8; 8])],
            "the slot the application holds is untouched"
        );
        // Message 0 released: its credit travels on the new path, message 2 takes the slot.
        for msg in held {
            rx.post_recv(msg.into_slot()).unwrap();
        }
        rx.return_credits(1).unwrap();
        assert!(sender_events(&mut tx, 0, 1).is_empty());
        send(&mut tx, 0, 2);
        let last = arrivals(&mut rx, 1);
        assert_eq!(slots_and_bytes(&rx, &last), [(0, vec![2u8; 8])]);
        assert_eq!(sender_events(&mut tx, 1, 0), [0]);
        assert_quiet(&mut rx, &mut tx);
    }
}
