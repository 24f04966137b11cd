//! The data path behind small role-specific traits.
//!
//! A transport owns registered memory: `slots` slots of `slot_size` bytes, used as receive
//! slots by a receiver ([`RecvPath`]) and as send staging slots by a sender ([`SendPath`]).
//! Slots are move-only tokens ([`StagingSlot`], [`RecvSlot`], [`Arrived`]): a completion yields
//! one, posting consumes it, reading and filling borrow it, so no code can touch a slot the NIC
//! owns. A transport moves one message per `post_send` into the next posted receive slot on the
//! other side, in order, and reports completions through its role's poll. Flow control, end of
//! stream and peer loss live above it (the session core, driven by [`crate::RdmaSink`] and
//! [`crate::RdmaSrc`]); a transport only has to keep the RDMA rules: receives are consumed in
//! the order they were posted, a message larger than the posted slot or arriving with no slot
//! posted is an error, and zero-length messages are ordinary.

use std::marker::PhantomData;
use std::net::Ipv4Addr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::proto::{QpSettings, Role, TransportKind};
use crate::roce::DeviceChoice;
use crate::Result;

// The transport adapters are the only modules allowed `unsafe` (the crate denies it): each
// block there carries a `// SAFETY:` comment.
pub(crate) mod coalescing;
#[cfg(doca_transport)]
#[allow(unsafe_code)]
pub(crate) mod doca;
#[allow(unsafe_code)]
pub(crate) mod kept_copy;
#[cfg(feature = "verbs")]
pub(crate) mod signaling;
#[allow(unsafe_code)]
pub(crate) mod slots;
pub(crate) mod striped;
pub(crate) mod tcp;
#[cfg(feature = "verbs")]
#[allow(unsafe_code)]
pub(crate) mod verbs;

/// Which end of the bootstrap connection we are (independent of the data direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BootstrapSide {
    /// We connected.
    Client,
    /// We accepted.
    Server,
}

/// What a transport needs to know to set itself up.
#[derive(Debug, Clone)]
pub(crate) struct SetupParams {
    /// Our end of the bootstrap connection.
    pub side: BootstrapSide,
    /// Whether we send or receive data.
    pub role: Role,
    /// Our source address toward the peer.
    pub local_ip: Ipv4Addr,
    /// The peer's address.
    pub peer_ip: Ipv4Addr,
    /// Number of slots to register.
    pub slots: usize,
    /// Bytes per slot.
    pub slot_size: usize,
    /// Queue pairs (tcp: data connections) the data path stripes its messages over (`--qps`;
    /// 1: one data path, as the transport makes it; more: [`striped`]).
    pub lanes: usize,
    /// The RDMA device chosen by discovery (RDMA transports only).
    pub device: Option<DeviceChoice>,
    /// The session's paths beyond the one above (`--paths`): lane `i` runs on path
    /// `i % (extra_paths.len() + 1)`, path 0 being `local_ip`, `peer_ip` and `device`.
    pub extra_paths: Vec<PathEnds>,
    /// The queue pair settings asked for (`--tclass`, `--sl`, `--mtu`, `--ack-timeout`,
    /// `--retry-count`; `None`: the transport's default). RDMA transports only; a transport
    /// that cannot apply one refuses to start ([`crate::Error::TransportUnavailable`]).
    pub qp: QpSettings,
    /// Where sysfs is mounted (the DOCA transport reads the netdev's MTU there).
    #[cfg_attr(not(doca_transport), allow(dead_code))]
    pub sysfs_root: std::path::PathBuf,
    /// A test build's faults (the verbs transport's `rnr_retry`, the tcp receiver's buffer); none
    /// in a shipped program.
    pub faults: crate::config::TestFaults,
}

/// Where one of a session's extra paths runs (`--paths`): its own addresses and device.
#[derive(Debug, Clone)]
pub(crate) struct PathEnds {
    /// Our address on this path (the source of our route to `peer_ip`).
    pub local_ip: Ipv4Addr,
    /// The peer's address on this path.
    pub peer_ip: Ipv4Addr,
    /// The RDMA device that owns `local_ip` (RDMA transports only).
    pub device: Option<DeviceChoice>,
}

/// A slot token: move-only, minted only by the transport module, so whoever holds one is the
/// only one who may touch that slot's memory, and a posted slot has no token until it
/// completes. `R` says whose slot it is: [`StagingSlot`] or [`RecvSlot`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Slot<R> {
    index: usize,
    role: PhantomData<R>,
}

/// Marks a sender's staging slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Staging {}

/// Marks a receiver's receive slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Receive {}

/// A send staging slot held by the sender (not posted): filled through
/// [`SendPath::staging`], consumed by [`SendPath::post_send`], given back by the send's
/// completion.
pub(crate) type StagingSlot = Slot<Staging>;

/// A receive slot that is not posted: consumed by [`RecvPath::post_recv`], back as an
/// [`Arrived`] message when something landed in it.
pub(crate) type RecvSlot = Slot<Receive>;

/// A message that landed in a receive slot: read through [`RecvPath::message`], turned back
/// into its [`RecvSlot`] (to be posted again) once the application is done with it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Arrived {
    slot: RecvSlot,
    len: usize,
}

impl<R> Slot<R> {
    /// Only a transport (or the slot list made with it) says which slots exist.
    pub(in crate::transport) fn mint(index: usize) -> Self {
        Self {
            index,
            role: PhantomData,
        }
    }

    /// The slot's index.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// A token for the core's tests (no transport there).
    #[cfg(test)]
    pub(crate) fn for_test(index: usize) -> Self {
        Self::mint(index)
    }
}

impl Arrived {
    /// `len` bytes landed in `slot` (a transport's completion).
    pub(in crate::transport) fn new(slot: RecvSlot, len: usize) -> Self {
        Self { slot, len }
    }

    /// The slot the message is in.
    pub(crate) fn slot_index(&self) -> usize {
        self.slot.index
    }

    /// The message's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The application is done with the message: the slot, to be posted again.
    pub(crate) fn into_slot(self) -> RecvSlot {
        self.slot
    }

    /// A message for the core's tests (no transport there).
    #[cfg(test)]
    pub(crate) fn for_test(index: usize, len: usize) -> Self {
        Self {
            slot: RecvSlot::mint(index),
            len,
        }
    }
}

/// One finished work request, as the concrete transports report it internally. Each role's
/// trait hands its driver only the kinds its role can see ([`SendEvent`], [`Arrived`]).
#[derive(Debug)]
pub(crate) enum Completion {
    /// A message landed in a receive slot.
    Recv(Arrived),
    /// The send from this staging slot completed; the slot may be reused.
    Send(StagingSlot),
    /// Sender side, in-band credits only: the receiver released this many more messages.
    Credits(u32),
}

/// What a sender's data path reports.
#[derive(Debug)]
pub(crate) enum SendEvent {
    /// The send from this staging slot completed; the slot may be filled again.
    Sent(StagingSlot),
    /// In-band credits only: the receiver released this many more messages.
    Credits(u32),
}

/// Where the receiver's released credits travel to the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreditRoute {
    /// `Credit{released}` messages on the control channel (tcp).
    ControlChannel,
    /// On the data path, reported to the sender as [`SendEvent::Credits`] (RDMA: a credit then
    /// costs one RDMA round trip, not a TCP one): verbs sends one zero-length send with
    /// immediate data (the count) per announcement, DOCA one zero-length send per credit.
    InBand,
}

/// Where a data path's device does its work: whether a thread that busy-polls it competes
/// with that work for the CPUs (it then gives its CPU away now and then:
/// [`DeviceWork::yield_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceWork {
    /// On the device (a NIC), or inside the poll's own system calls (tcp).
    Elsewhere,
    /// In kernel threads on this host's CPUs, as a software RDMA device's (soft-RoCE's
    /// requester, responder and completer run in kernel workers).
    HostThreads,
}

/// A thread that polls a device whose work runs on this host's CPUs
/// ([`DeviceWork::HostThreads`]: a software device such as soft-RoCE) gives its CPU away
/// (`sched_yield`) every `YIELD_EVERY`th round without news. Soft-RoCE's requester, responder
/// and completer run in kernel workers: one woken on a CPU where a thread spins may wait for
/// the scheduler's next tick, a millisecond or more (in the soft-RoCE VM, one round trip in
/// 21 to 27 of a 2-CPU ping-pong). With nothing else runnable the call returns at once. Measured
/// there (BENCHMARKS.md, round nine): yielding every 1 to 16 rounds took the ping-pong's mean a
/// quarter down and its 99th percentile three quarters, its median unchanged; yielding every
/// 128th round, or every 32nd after the first 256 or 64th after the first 1,024, gained less
/// and cost the median up to a sixth.
const YIELD_EVERY: u32 = 16;

impl DeviceWork {
    /// Whether a thread that has polled this device `rounds` times in a row without news
    /// gives its CPU away now (`std::thread::yield_now`): every `YIELD_EVERY`th round on the
    /// host's CPUs, never elsewhere.
    pub(crate) fn yield_due(self, rounds: u32) -> bool {
        self == DeviceWork::HostThreads && rounds.is_multiple_of(YIELD_EVERY)
    }
}

/// What to wait on when `poll` found nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitHandle<'a> {
    /// A descriptor that becomes ready when `poll` may make progress.
    pub fd: BorrowedFd<'a>,
    /// Also wait for writability (a transport with queued output).
    pub writable: bool,
}

/// What both roles' data paths do: set-up, waiting, teardown. Implementations: tcp here;
/// verbs and DOCA behind the same methods. The role-specific halves are [`SendPath`] and
/// [`RecvPath`]; one concrete transport implements both, and a session holds it as one of them.
pub(crate) trait DataPath: Send + std::fmt::Debug {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;

    /// Connection data for the peer, carried in our hello (bounded by `MAX_BLOB_LEN`).
    fn local_blob(&self) -> Vec<u8>;

    /// One step of connecting to the peer described by its blob: [`SetupStep::Done`], or
    /// [`SetupStep::Waiting`] for the peer (then the driver waits until one of
    /// [`DataPath::setup_fds`] or the control connection is readable, or a short slice passed,
    /// and calls it again). A step never waits for the peer itself; local work is bounded by
    /// `deadline`. The driver watches the control connection between steps, so a peer that
    /// vanishes or speaks out of turn during the set-up is seen at once, and the transport never
    /// touches the control connection.
    fn connect(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<SetupStep>;

    /// While `connect` says [`SetupStep::Waiting`]: descriptors that turn readable when the
    /// next step may progress (tcp: the data listener and the connections not yet showing
    /// their token).
    fn setup_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) {
        let _ = fds;
    }

    /// The data path's MTU in bytes after `connect`, when the transport has one.
    fn path_mtu(&self) -> Option<u32>;

    /// The settings this end applies to its own queue pair, for our hello: what it knows it
    /// uses (tcp: nothing).
    fn qp_settings(&self) -> QpSettings {
        QpSettings::default()
    }

    /// Bytes per slot.
    fn slot_size(&self) -> usize;

    /// Where credits travel on this data path.
    fn credit_route(&self) -> CreditRoute;

    /// The descriptor to sleep on after an empty poll (`None` before connect).
    fn wait_handle(&self) -> Option<WaitHandle<'_>>;

    /// Where the device does its work ([`DeviceWork`]; a caller that may busy-poll asks once
    /// per call).
    fn device_work(&self) -> DeviceWork {
        DeviceWork::Elsewhere
    }

    /// Before the caller sleeps (and before [`DataPath::before_wait`]): how long it should
    /// pause first, if at all, so that what comes next arrives together (the tcp receiver
    /// while a stream runs into a deep queue: `coalescing`). Asking uses the pause up: the
    /// next sleep pauses only if what arrives meanwhile makes another due. The caller pauses
    /// once per sleep, however many lanes a path has; a caller that does not sleep itself (a
    /// `try_` call) does not ask.
    fn pause_before_sleep(&mut self) -> Option<Duration> {
        None
    }

    /// Right before the caller sleeps on [`DataPath::wait_handle`]: a transport whose
    /// descriptor must be armed arms it here (once per sleep) and collects what completed
    /// meanwhile. `Ok(true)`: completions are waiting, poll instead of sleeping.
    fn before_wait(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// Instead of [`DataPath::before_wait`], when the caller does not sleep itself but
    /// returns to an application that waits on the session's readiness descriptor (a `try_`
    /// call): arms the notification the same way. `Ok(true)`: completions are waiting, poll
    /// instead of returning.
    fn arm_for_readiness(&mut self) -> Result<bool> {
        self.before_wait()
    }

    /// A wait reported the [`DataPath::wait_handle`] descriptor ready. A transport may skip,
    /// in its poll, checks that can only find something after such a wake-up (the tcp
    /// sender's look for a closed data connection), and must make the next poll do them.
    fn on_wakeup(&mut self) {}

    /// Tears the data path down; safe to call more than once and after errors.
    fn close(&mut self);

    /// Whether [`DataPath::reset_for_resume`] works on this transport (a session resumes only
    /// when both ends' transports can).
    fn can_resume(&self) -> bool {
        false
    }

    /// The data path broke and the session resumes on a new one (docs/design.md, "Resuming a
    /// session"). Tears the old one down so that nothing more arrives or completes on it;
    /// keeps every slot with its bytes; keeps the posted receives posted, in the order they
    /// were posted (one whose message landed but was not reported by a poll yet counts as not
    /// arrived: the sender sends that message again); gives back to `reclaimed` the staging
    /// slot of every send it still held, completed or not; and prepares a new connection, so
    /// that [`DataPath::local_blob`] and [`DataPath::connect`] work as at set-up.
    ///
    /// # Errors
    /// The new data path cannot be prepared (the attempt fails; the session may try again),
    /// or the transport cannot resume ([`DataPath::can_resume`] is false).
    fn reset_for_resume(&mut self, reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        let _ = reclaimed;
        Err(crate::Error::unavailable(
            self.kind().name(),
            "this transport cannot resume a session",
        ))
    }

    /// The paths this data path left out or took back since last asked (a striped data path
    /// over several paths: [`striped::parking`]); none for one path.
    fn take_path_events(&mut self) -> striped::parking::PathEvents {
        striped::parking::PathEvents::default()
    }

    /// The client of a striped data path over several paths that left one out: when to resume
    /// to try it again ([`striped::parking`]). `None` otherwise.
    fn retry_paths_at(&self) -> Option<Instant> {
        None
    }

    /// When the data path must be polled again though nothing arrives: a striped data path
    /// whose peer closed one lane while the others stay open decides at the end of its grace
    /// whether that was a failure ([`striped`]). A driver waits no longer than this, so an
    /// event loop's readiness descriptor turns readable for it. `None` otherwise.
    fn poll_again_at(&self) -> Option<Instant> {
        None
    }

    /// The receiver's peer said Finish and was let go: it closes every lane, and a lane that
    /// closes first is its end, however long the others take to bring the rest. Forgotten at
    /// a reset.
    fn peer_finished(&mut self) {}

    /// Bytes each path carried ([`striped::counters`]); empty for one queue pair.
    fn path_counters(&self) -> striped::counters::PathCounters {
        striped::counters::PathCounters::default()
    }

    /// The paths (numbered as in [`SetupParams::extra_paths`], 0 first) the data path left
    /// out whose retry is due at `now`; none for one path.
    fn paths_due_for_retry(&self, _now: Instant) -> Vec<usize> {
        Vec::new()
    }

    /// The paths due to be tried again at `now`, but `answered`, did not answer their probe:
    /// they wait longer ([`striped::parking`]).
    fn postpone_path_retry(&mut self, _now: Instant, _answered: Option<usize>) {}

    /// A client's resume attempt arrived while the session ran: the lane errors seen since
    /// are the client tearing its end down, not failed paths ([`striped::parking`]).
    fn forget_path_failures(&mut self) {}
}

/// Where a data path's set-up stands after one [`DataPath::connect`] step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetupStep {
    /// Connected.
    Done,
    /// Waiting for the peer: wait on [`DataPath::setup_fds`] and call `connect` again.
    Waiting,
}

/// The sending half of a data path.
pub(crate) trait SendPath: DataPath {
    /// The staging slot's memory, to be filled before [`SendPath::post_send`].
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8];

    /// Sends the first `len` bytes of the staging slot as one message. The slot comes back in
    /// a [`SendEvent::Sent`] once the send completed (also when it failed: then `poll` reports
    /// the failure).
    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()>;

    /// Copies `message` and then `trailer` (a checksum's, or empty) into the staging slot and
    /// sends them as one message of `message.len() + trailer.len()` bytes, for a sender that
    /// keeps the slot until the receiver released the message (resumption): until then only
    /// a resume reads the slot again. The default copies as a `send` does and posts; a
    /// transport whose kernel copies the bytes to send takes them from `message`, still in the
    /// cache, and writes the slot around the cache (`kept_copy`). The slot holds the message
    /// whether or not this succeeds. The caller checked that the message fits the slot.
    fn post_send_kept(
        &mut self,
        mut slot: StagingSlot,
        message: &[u8],
        trailer: &[u8],
    ) -> Result<()> {
        let len = message.len();
        let wire_len = len + trailer.len();
        let Some(buf) = self.staging(&mut slot).get_mut(..wire_len) else {
            return Err(crate::Error::Internal(format!(
                "a {wire_len}-byte message posted from a smaller staging slot"
            )));
        };
        let (body, tail) = buf.split_at_mut(len);
        crate::message_copy::copy_message(body, message);
        tail.copy_from_slice(trailer);
        self.post_send(slot, wire_len)
    }

    /// Makes sure every send posted so far will report its completion through `poll`. A
    /// transport that signals only some sends posts a signaled request behind the last one
    /// when that one went out unsignaled. The sender's `finish` calls it before waiting for
    /// its staging slots; calling it again while that request is outstanding does nothing.
    fn flush_sends(&mut self) -> Result<()> {
        Ok(())
    }

    /// Makes progress without blocking and appends what happened to `out`. It always leaves
    /// its notification armed, so that the wait handle becomes ready as soon as more progress
    /// is possible: the caller may sleep after any poll (no lost wake-ups).
    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()>;

    /// Whether bytes of a posted send are still waiting for this process to hand them on
    /// (tcp: a message the kernel did not take whole). An RDMA NIC moves a posted send by
    /// itself; a transport that needs the sender's help says so here, and the sender helps
    /// before `send` returns, since nothing may drive this data path until its next call (a
    /// full-duplex application then waits in its receive, and a half-sent message would
    /// never arrive). RDMA transports keep the default: the NIC needs no help.
    fn output_queued(&self) -> bool {
        false
    }
}

/// The receiving half of a data path.
pub(crate) trait RecvPath: DataPath {
    /// Posts a receive slot (the receiver posts every slot before Ready).
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()>;

    /// The bytes of a message that arrived.
    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8];

    /// Makes progress without blocking and appends arrived messages to `out`, in arrival
    /// order. Leaves its notification armed, as [`SendPath::poll_sends`] does.
    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()>;

    /// [`CreditRoute::InBand`] only: returns `count` credits to the sender on the data path
    /// (together, one doorbell, where the transport can). The core asks for it only on that
    /// route.
    fn return_credits(&mut self, count: usize) -> Result<()>;

    /// After connect, before any slot is posted: whether the peer already sent data (the
    /// handshake core's "data before Ready" rule). Only a transport that can see it says so:
    /// on RDMA a send with no receive posted is retried by the NIC (receiver not ready), never
    /// seen.
    fn data_waiting(&self) -> bool {
        false
    }
}

/// A data path of one role, as the session set-up creates and prepares it.
pub(crate) trait RolePath: DataPath {
    /// The role this path plays.
    const ROLE: Role;
    /// The slots the role starts with.
    type Slot: Send + std::fmt::Debug;

    /// Builds the transport of the given kind (only those compiled in), with every slot.
    fn create(kind: TransportKind, params: &SetupParams) -> Result<(Box<Self>, Vec<Self::Slot>)>;

    /// Right before Ready: a receiver posts every slot (`slots` ends empty), a sender keeps
    /// them for its core.
    fn before_ready(&mut self, slots: &mut Vec<Self::Slot>) -> Result<()>;

    /// Right after connect: whether the peer already sent data ([`RecvPath::data_waiting`];
    /// a sender's peer never sends data).
    fn early_data(&self) -> bool;
}

/// The transport of `kind` (only those compiled in), boxed as the role trait `$role`.
macro_rules! create_as {
    ($kind:expr, $params:expr, $role:ty) => {
        match $kind {
            TransportKind::Tcp => Box::new(tcp::TcpTransport::new($params)?) as Box<$role>,
            #[cfg(doca_transport)]
            TransportKind::Doca => Box::new(doca::DocaTransport::new($params)?) as Box<$role>,
            #[cfg(feature = "verbs")]
            TransportKind::Verbs => Box::new(verbs::VerbsTransport::new($params)?) as Box<$role>,
            #[allow(unreachable_patterns)]
            other => return Err(not_compiled_in(other)),
        }
    };
}

/// The data path of `kind` as the role trait `$role`: one transport, or with several lanes
/// (`--qps`) that many, striped by `$striped` (`striped::sender` or `striped::receiver`).
macro_rules! create_striped_as {
    ($kind:expr, $params:expr, $role:ty, $striped:path) => {
        match lane_params($kind, $params)? {
            None => create_as!($kind, $params, $role),
            Some(lanes) => {
                let lanes = lanes
                    .iter()
                    .map(|lane| Ok(create_as!($kind, lane, $role)))
                    .collect::<Result<Vec<_>>>()?;
                let paths = $params.extra_paths.len() + 1;
                let retries = match $params.side {
                    BootstrapSide::Client => striped::parking::Retries::Schedules,
                    BootstrapSide::Server => striped::parking::Retries::Follows,
                };
                Box::new($striped(lanes, paths, retries, $params.slots)?) as Box<$role>
            }
        }
    };
}

impl RolePath for dyn SendPath {
    const ROLE: Role = Role::Sender;
    type Slot = StagingSlot;

    fn create(kind: TransportKind, params: &SetupParams) -> Result<(Box<Self>, Vec<StagingSlot>)> {
        let path = create_striped_as!(kind, params, dyn SendPath, striped::sender);
        Ok((path, (0..params.slots).map(StagingSlot::mint).collect()))
    }

    fn before_ready(&mut self, _slots: &mut Vec<StagingSlot>) -> Result<()> {
        Ok(())
    }

    fn early_data(&self) -> bool {
        false
    }
}

impl RolePath for dyn RecvPath {
    const ROLE: Role = Role::Receiver;
    type Slot = RecvSlot;

    fn create(kind: TransportKind, params: &SetupParams) -> Result<(Box<Self>, Vec<RecvSlot>)> {
        let path = create_striped_as!(kind, params, dyn RecvPath, striped::receiver);
        Ok((path, (0..params.slots).map(RecvSlot::mint).collect()))
    }

    fn before_ready(&mut self, slots: &mut Vec<RecvSlot>) -> Result<()> {
        for slot in slots.drain(..) {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    fn early_data(&self) -> bool {
        self.data_waiting()
    }
}

/// With more than one lane: what each lane is made with (its slots carry the lane header;
/// lane `i` runs on path `i % paths`). The memory of every lane's slots is checked first,
/// together (and, on RDMA, against the memlock limit).
fn lane_params(kind: TransportKind, params: &SetupParams) -> Result<Option<Vec<SetupParams>>> {
    if params.lanes <= 1 {
        return Ok(None);
    }
    let lane = SetupParams {
        lanes: 1,
        slot_size: params.slot_size.saturating_add(striped::LANE_HEADER_LEN),
        extra_paths: Vec::new(),
        ..params.clone()
    };
    let paths = params.extra_paths.len() + 1;
    let on_path = |i: usize| match i % paths {
        0 => lane.clone(),
        p => {
            let ends = &params.extra_paths[p - 1];
            SetupParams {
                local_ip: ends.local_ip,
                peer_ip: ends.peer_ip,
                device: ends.device.clone(),
                ..lane.clone()
            }
        }
    };
    // RDMA lanes pin their slots: all of them count against the memlock limit together.
    slots::check_slot_memory(
        params.slots.saturating_mul(params.lanes),
        lane.slot_size,
        kind != TransportKind::Tcp,
    )?;
    Ok(Some((0..params.lanes).map(on_path).collect()))
}

fn not_compiled_in(kind: TransportKind) -> crate::Error {
    crate::Error::unavailable(kind.name(), "not compiled into this build".to_owned())
}

/// A completion of the wrong role inside a transport: a bug of the transport, never the peer's.
pub(crate) fn wrong_role(transport: &'static str, what: &str) -> crate::Error {
    crate::Error::Internal(format!(
        "{transport}: {what} on a data path of the other role"
    ))
}

/// A sender's share of an RDMA transport's completions (drained from `completions`); a receive
/// completion there is the transport's bug. `polled` is the poll's own result, kept first.
pub(crate) fn sender_events(
    transport: &'static str,
    polled: Result<()>,
    completions: &mut Vec<Completion>,
    out: &mut Vec<SendEvent>,
) -> Result<()> {
    let mut result = polled;
    for c in completions.drain(..) {
        match c {
            Completion::Send(slot) => out.push(SendEvent::Sent(slot)),
            Completion::Credits(n) => out.push(SendEvent::Credits(n)),
            Completion::Recv(_) => {
                result = result.and(Err(wrong_role(transport, "a data receive completion")));
            }
        }
    }
    result
}

/// A receiver's share of an RDMA transport's completions, as [`sender_events`] for a sender.
pub(crate) fn receiver_arrivals(
    transport: &'static str,
    polled: Result<()>,
    completions: &mut Vec<Completion>,
    out: &mut Vec<Arrived>,
) -> Result<()> {
    let mut result = polled;
    for c in completions.drain(..) {
        match c {
            Completion::Recv(msg) => out.push(msg),
            Completion::Send(_) | Completion::Credits(_) => {
                result = result.and(Err(wrong_role(transport, "a send or credit completion")));
            }
        }
    }
    result
}

/// The transports compiled into this build, in the order `auto` prefers them.
pub(crate) fn compiled_in() -> &'static [TransportKind] {
    &[
        #[cfg(doca_transport)]
        TransportKind::Doca,
        #[cfg(feature = "verbs")]
        TransportKind::Verbs,
        TransportKind::Tcp,
    ]
}

/// The transports `--transport auto` tries, in order, for a path whose source address does
/// (`roce_gid_found`) or does not own a RoCE v2 GID: every RDMA transport compiled in (DOCA
/// first), then TCP. The session and `doctor` both use this one rule.
pub fn auto_order(roce_gid_found: bool) -> impl Iterator<Item = TransportKind> + Clone {
    compiled_in()
        .iter()
        .copied()
        .filter(move |k| roce_gid_found || *k == TransportKind::Tcp)
}
