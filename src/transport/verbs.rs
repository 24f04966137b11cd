//! The verbs transport: one RC queue pair over rdma-core, through `sideway`.
//!
//! All slots live in one buffer registered once. Receives and sends are work requests whose
//! `wr_id` names the slot (sends also carry a tag bit). One CQ with a completion channel serves
//! both directions; `poll` drains it and, when it is empty, re-arms the notification and polls
//! once more, so a completion can never slip in unnoticed before the caller sleeps on the
//! channel's descriptor.
//!
//! Credits travel in band: the receiver sends one zero-length message per released slot, and the
//! sender keeps `slots` zero-length receives posted for them (re-posted as they complete). RC
//! delivers them in order, so each one is exactly one more released message.
//!
//! The hello blob carries QP number, starting PSN, GID and path MTU (see [`Endpoint`]).
//! `rdma-mummy-sys` loads `libibverbs.so.1` with dlopen, so where rdma-core is absent every verb
//! fails with EOPNOTSUPP and [`VerbsTransport::new`] reports the transport as unavailable.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{
    ibv_ack_cq_events, ibv_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq, ibv_wc,
};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use super::slots::{chosen_device, SlotMemory};
use super::{Completion, SetupParams, Transport, WaitHandle};
use crate::proto::{Role, TransportKind};
use crate::{Error, Result};

const NAME: &str = "verbs";
/// `wr_id` bit that marks a send.
const SEND_TAG: u64 = 1 << 63;
/// `wr_id` bit that marks a zero-length credit message (send on the receiver, receive on the
/// sender).
const CREDIT_TAG: u64 = 1 << 62;
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

/// The verbs implementation of [`Transport`]. Field order is drop order: the QP goes before the
/// memory region, the memory region before the buffer it covers.
#[derive(Debug)]
pub(crate) struct VerbsTransport {
    qp: BasicQueuePair,
    mr: Arc<MemoryRegion>,
    cq: Arc<BasicCompletionQueue>,
    channel: Arc<CompletionChannel>,
    _pd: Arc<ProtectionDomain>,
    _context: Arc<DeviceContext>,
    memory: SlotMemory,
    role: Role,
    /// Receiver: credit sends posted and not yet completed (bounded by the send queue depth).
    credits_in_flight: usize,
    /// Completions taken off the CQ while waiting for a send-queue entry, for the next `poll`.
    pending: Vec<Completion>,
    port: u8,
    gid_index: u8,
    local: Endpoint,
    closed: bool,
}

// SAFETY: the raw pointers inside sideway's handles are only used through `&mut self` methods
// of this one owner; rdma-core objects may be used from any thread.
unsafe impl Send for VerbsTransport {}

impl VerbsTransport {
    /// Opens the device discovery chose, registers the slots and creates an RC queue pair in INIT.
    pub(crate) fn new(params: &SetupParams) -> Result<Self> {
        let choice = chosen_device(params, NAME)?;
        let unavailable = |why: String| Error::TransportUnavailable(NAME.into(), why);
        let list = DeviceList::new().map_err(|e| {
            unavailable(format!(
                "cannot list RDMA devices ({e}); is rdma-core (libibverbs.so.1 and its providers) installed?"
            ))
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
        let port = u8::try_from(choice.port)
            .map_err(|_| Error::BadOverride(format!("port {} is out of range", choice.port)))?;
        let gid_index = u8::try_from(choice.gid_index).map_err(|_| {
            Error::BadOverride(format!("GID index {} is out of range", choice.gid_index))
        })?;
        let port_attr = context
            .query_port(port)
            .map_err(|e| verb("ibv_query_port", e, None))?;
        if port_attr.port_state() != PortState::Active {
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
            .set_nonblocking(true)
            .map_err(|e| verb("fcntl(completion channel, O_NONBLOCK)", e, None))?;
        let depth = u32::try_from(params.slots).unwrap_or(u32::MAX);
        let cq = context
            .create_cq_builder()
            .setup_cqe(2 * depth + 2)
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(|e| verb("ibv_create_cq", e, None))?;
        let mut memory = SlotMemory::new(params.slots, params.slot_size)?;
        // SAFETY: `memory` is owned by the transport, never reallocated, and declared after `mr`
        // and `qp`, so it outlives the registration and every work request that uses it.
        let mr = unsafe {
            pd.reg_mr(
                memory.as_mut_ptr() as usize,
                memory.len(),
                AccessFlags::LocalWrite,
            )
        }
        .map_err(|e| verb("ibv_reg_mr", e, Some(MEMLOCK_HINT)))?;
        let mut qp = pd
            .create_qp_builder()
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(depth)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .build()
            .map_err(|e| verb("ibv_create_qp", e, None))?;
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(port)
            .setup_access_flags(AccessFlags::LocalWrite);
        qp.modify(&init)
            .map_err(|e| verb("ibv_modify_qp(INIT)", e, None))?;
        let local = Endpoint {
            qpn: qp.qp_number(),
            psn: random_psn(),
            gid: gid.raw,
            mtu: port_attr.active_mtu() as u8,
        };
        log::debug!(
            "verbs: {} port {port} gid-index {gid_index} qpn {:#x} psn {:#x} mtu {}",
            choice.device,
            local.qpn,
            local.psn,
            mtu_bytes(local.mtu)
        );
        Ok(Self {
            qp,
            mr,
            cq,
            channel,
            _pd: pd,
            _context: context,
            memory,
            role: params.role,
            credits_in_flight: 0,
            pending: Vec::new(),
            port,
            gid_index,
            local,
            closed: false,
        })
    }

    fn raw_cq(&self) -> *mut ibv_cq {
        // SAFETY: the CQ handle lives as long as `self.cq`.
        unsafe { self.cq.cq().as_ptr() }
    }

    /// Consumes pending completion-channel events (each must be acknowledged before the CQ
    /// can be destroyed).
    fn drain_channel_events(&mut self) {
        let mut events = 0u32;
        loop {
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut cq_context: *mut std::ffi::c_void = ptr::null_mut();
            // SAFETY: the channel is valid and non-blocking; the out-pointers are live locals.
            let rc = unsafe {
                ibv_get_cq_event(
                    self.channel.comp_channel().as_ptr(),
                    &mut cq,
                    &mut cq_context,
                )
            };
            if rc != 0 {
                break;
            }
            events += 1;
        }
        if events > 0 {
            // SAFETY: we acknowledge exactly the events we received for our one CQ.
            unsafe { ibv_ack_cq_events(self.raw_cq(), events) };
        }
    }

    /// Takes completed work requests off the CQ; returns how many.
    fn poll_cq(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let mut total = 0;
        loop {
            // SAFETY: ibv_wc is plain data; zeroed is a valid bit pattern for it.
            let mut wcs: [ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: the CQ is valid and `wcs` has room for POLL_BATCH entries.
            let n = unsafe { ibv_poll_cq(self.raw_cq(), POLL_BATCH as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(verb("ibv_poll_cq", io::Error::from_raw_os_error(-n), None));
            }
            for wc in &wcs[..n as usize] {
                if wc.wr_id & CREDIT_TAG != 0 {
                    self.credit_completion(wc.wr_id & SEND_TAG != 0, wc.status, out)?;
                    continue;
                }
                let is_send = wc.wr_id & SEND_TAG != 0;
                let slot = (wc.wr_id & !SEND_TAG) as usize;
                if wc.status != 0 {
                    return Err(completion_error(is_send, wc.status));
                }
                out.push(if is_send {
                    Completion::Send { slot }
                } else {
                    Completion::Recv {
                        slot,
                        len: wc.byte_len as usize,
                    }
                });
            }
            total += n as usize;
            if (n as usize) < POLL_BATCH {
                return Ok(total);
            }
        }
    }
}

impl VerbsTransport {
    /// Posts one zero-length receive for an incoming credit (sender side).
    fn post_credit_recv(&mut self) -> Result<()> {
        let mut guard = self.qp.start_post_recv();
        guard.construct_wr(CREDIT_TAG);
        guard
            .post()
            .map_err(|e| verb("ibv_post_recv(credit)", e, None))
    }

    /// A credit message completed. On the sender an arrived credit is reported and its receive
    /// re-posted. On the receiver a credit send only frees its queue entry: if it fails, the
    /// sender is gone or closing, which the control channel reports with the right words.
    fn credit_completion(
        &mut self,
        is_send: bool,
        status: u32,
        out: &mut Vec<Completion>,
    ) -> Result<()> {
        if is_send {
            self.credits_in_flight = self.credits_in_flight.saturating_sub(1);
            if status != 0 {
                log::debug!("verbs: a credit send completed with status {status}");
            }
            return Ok(());
        }
        if status != 0 {
            return Err(completion_error(false, status));
        }
        out.push(Completion::Credit);
        self.post_credit_recv()
    }
}

impl Transport for VerbsTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
    }

    fn local_blob(&self) -> Vec<u8> {
        self.local.encode()
    }

    fn connect(&mut self, peer_blob: &[u8], _deadline: Instant) -> Result<()> {
        let peer = Endpoint::decode(peer_blob).ok_or_else(|| Error::TransportProtocol {
            transport: NAME,
            detail: format!(
                "the peer's verbs endpoint is malformed ({} bytes)",
                peer_blob.len()
            ),
        })?;
        let mtu = Mtu::from(u32::from(self.local.mtu.min(peer.mtu)));
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu)
            .setup_dest_qp_num(peer.qpn)
            .setup_rq_psn(self.local.psn)
            .setup_max_dest_read_atomic(0)
            .setup_min_rnr_timer(12);
        let mut av = AddressHandleAttribute::new();
        av.setup_port(self.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(self.gid_index)
            .setup_grh_dest_gid(&Gid { raw: peer.gid })
            .setup_grh_hop_limit(64);
        rtr.setup_address_vector(&av);
        self.qp
            .modify(&rtr)
            .map_err(|e| verb("ibv_modify_qp(RTR)", e, Some(ROCE_HINT)))?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(peer.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(0);
        self.qp
            .modify(&rts)
            .map_err(|e| verb("ibv_modify_qp(RTS)", e, Some(ROCE_HINT)))?;
        if self.role == Role::Sender {
            for _ in 0..self.memory.count() {
                self.post_credit_recv()?;
            }
        }
        log::debug!(
            "verbs: connected to qpn {:#x} gid {} (path MTU {})",
            peer.qpn,
            Gid { raw: peer.gid },
            mtu_bytes(self.local.mtu.min(peer.mtu))
        );
        Ok(())
    }

    fn slot_count(&self) -> usize {
        self.memory.count()
    }

    fn slot_size(&self) -> usize {
        self.memory.size()
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        if slot >= self.memory.count() {
            return Err(out_of_range(slot));
        }
        let (lkey, addr, len) = (
            self.mr.lkey(),
            self.memory.addr(slot),
            self.memory.size() as u32,
        );
        let mut guard = self.qp.start_post_recv();
        let wr = guard.construct_wr(slot as u64);
        // SAFETY: the slot lies inside the registered buffer, which outlives the QP.
        unsafe { wr.setup_sge(lkey, addr, len) };
        guard.post().map_err(|e| verb("ibv_post_recv", e, None))
    }

    fn recv_buf(&self, slot: usize, len: usize) -> &[u8] {
        self.memory.slot(slot, len)
    }

    fn send_buf(&mut self, slot: usize) -> &mut [u8] {
        self.memory.slot_mut(slot)
    }

    fn post_send(&mut self, slot: usize, len: usize) -> Result<()> {
        if slot >= self.memory.count() || len > self.memory.size() {
            return Err(out_of_range(slot));
        }
        let (lkey, addr) = (self.mr.lkey(), self.memory.addr(slot));
        let mut guard = self.qp.start_post_send();
        let wr = guard
            .construct_wr(SEND_TAG | slot as u64, WorkRequestFlags::Signaled)
            .setup_send();
        // SAFETY: the staging slot lies inside the registered buffer, which outlives the QP; the
        // sink does not touch the slot again before its send completion.
        unsafe { wr.setup_sge(lkey, addr, len as u32) };
        guard.post().map_err(|e| verb("ibv_post_send", e, None))
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        if self.closed {
            return Err(Error::TransportClosed { transport: NAME });
        }
        self.drain_channel_events();
        out.append(&mut self.pending);
        self.poll_cq(out)?;
        // Always leave the CQ armed: the caller may sleep even after a poll that returned
        // something (just not what it waits for). Polling again after arming closes the race
        // with a completion that arrived in between.
        // SAFETY: the CQ is valid.
        let rc = unsafe { ibv_req_notify_cq(self.raw_cq(), 0) };
        if rc != 0 {
            return Err(verb(
                "ibv_req_notify_cq",
                io::Error::from_raw_os_error(rc),
                None,
            ));
        }
        self.poll_cq(out)?;
        Ok(())
    }

    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        // SAFETY: the descriptor belongs to the completion channel, which lives as long as self.
        let fd = unsafe { BorrowedFd::borrow_raw(self.channel.as_raw_fd()) };
        Some(WaitHandle {
            fd,
            writable: false,
        })
    }

    fn inband_credits(&self) -> bool {
        true
    }

    fn post_credit(&mut self) -> Result<()> {
        // The send queue holds `slots` entries; the receiver releases at most one credit per
        // slot between completions, but wait for a free entry rather than overrun it.
        // Completions taken meanwhile are kept for the next `poll`.
        let deadline = Instant::now() + CREDIT_SEND_WAIT;
        while self.credits_in_flight >= self.memory.count() {
            let mut pending = std::mem::take(&mut self.pending);
            let polled = self.poll_cq(&mut pending);
            self.pending = pending;
            polled?;
            if Instant::now() > deadline {
                return Err(Error::TransportProtocol {
                    transport: NAME,
                    detail: "no credit send completed within 2 s (is the peer still there?)"
                        .to_owned(),
                });
            }
            std::hint::spin_loop();
        }
        let mut guard = self.qp.start_post_send();
        guard
            .construct_wr(SEND_TAG | CREDIT_TAG, WorkRequestFlags::Signaled)
            .setup_send();
        guard
            .post()
            .map_err(|e| verb("ibv_post_send(credit)", e, None))?;
        self.credits_in_flight += 1;
        Ok(())
    }

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let mut reset = QueuePairAttribute::new();
            reset.setup_state(QueuePairState::Error);
            // Moving to ERROR flushes outstanding work requests; failure only means it is gone.
            let _ = self.qp.modify(&reset);
            let mut sink = Vec::new();
            let _ = self.poll_cq(&mut sink);
            self.drain_channel_events();
        }
    }
}

const MEMLOCK_HINT: &str =
    "memory registration needs CAP_IPC_LOCK or a memlock limit above the slot memory: \
run with --cap-add=IPC_LOCK or ulimit -l unlimited";

fn verb(verb: &'static str, e: impl std::fmt::Display, hint: Option<&'static str>) -> Error {
    Error::Verbs {
        verb,
        source: io::Error::other(e.to_string()),
        hint,
    }
}

fn out_of_range(slot: usize) -> Error {
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
        status: format!("{name} ({status})"),
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
    use super::*;

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
    fn completion_errors_name_the_status_and_hint() {
        let e = completion_error(true, 12).to_string();
        assert!(
            e.contains("send completed with transport retry counter exceeded"),
            "{e}"
        );
        assert!(e.contains("UDP port 4791"), "{e}");
    }
}
