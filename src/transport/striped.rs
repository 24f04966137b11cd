//! Several data paths as one: `--qps N` (issue 39; docs/design.md, "Several paths").
//!
//! A striped data path holds N *lanes*, each a whole data path of the session's transport (an
//! RC queue pair on verbs and DOCA, a data connection on tcp), and keeps the transport contract
//! of [`super`] toward the session: one ordered message stream.
//!
//! Rules kept here:
//! - each lane has its own slots (`credits` of them, each [`LANE_HEADER_LEN`] bytes larger);
//!   the session's credits stay one pool: at most `credits` messages are unreleased, whatever
//!   their lanes;
//! - every message carries a lane header in front of its bytes: its number's low 32 bits
//!   (little-endian), then 4 zero bytes. Numbers count the messages posted since the data path
//!   was (re)connected, from 0, in the order the session posts them;
//! - sender: a slot's lane is chosen when the slot is filled ([`SendPath::staging`]): the lane
//!   with the fewest sends not yet completed, ties taken in turn after the last lane chosen (so
//!   tcp, whose sends complete at once, takes the lanes round robin). The bytes stay on that
//!   lane: a message sent again after a resume goes out on the lane that holds it;
//! - receiver: a message that arrives ahead of its turn waits in the core's
//!   [`ReorderWindow`]; messages reach the session strictly in number order, each in the next
//!   receive slot the session posted (its slot tokens map to the lanes' slots while the
//!   session holds them). A number outside the window, one that arrived twice, or one with
//!   no receive slot free is the peer's protocol violation; a message without its lane header
//!   is a transport protocol error (as a malformed blob is);
//! - in-band credits (RDMA) go back on the first lane in use (lane 0 unless parked);
//! - one epoll instance holds every lane's wait descriptor (level-triggered), so the session
//!   still sleeps on one descriptor;
//! - a lane whose peer closed it (end of stream) is done; the data path reports the close
//!   once every lane is closed, so what the other lanes still carry arrives; if the open
//!   lanes bring nothing for [`LANE_CLOSE_GRACE`] after such a close, it was a failure (a
//!   reset under one queue pair, a middlebox closing one connection), and the data path
//!   reports its close then (before Finish: the session's break);
//! - a lane that fails fails the data path: the session resumes (or ends) as with one lane,
//!   every lane is torn down and rebuilt, and messages waiting in the window count as not
//!   arrived (the sender sends them again);
//! - with several paths (`--paths`; lane `i` on path `i % paths`) the resumed data path leaves
//!   the failed lane's path out ([`parking`]): its lanes are *parked* (an empty blob, no
//!   message, no wait), the session goes on over the others, and the path is tried again at a
//!   later resume. A message sent again whose bytes sit on a parked lane is copied to a lane in
//!   use first (the same slot index is free there: a slot's index is the session's token).

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollFlags};

use super::{
    Arrived, CreditRoute, DataPath, DeviceWork, RecvPath, RecvSlot, SendEvent, SendPath, SetupStep,
    StagingSlot, WaitHandle,
};
use crate::net::wait::{epoll_events, watch_fd, Interest};
use crate::proto::{QpSettings, TransportKind, MAX_BLOB_LEN};
use crate::session_core::paths::ReorderWindow;
use crate::{Error, ProtocolViolation, Result};

pub(crate) mod counters;
pub(crate) mod parking;

use counters::PathCounters;
use parking::{Parking, PathEvents, Retries};

fn new_epoll() -> Result<Epoll> {
    Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| Error::Socket {
        what: "epoll_create1",
        source: e.into(),
    })
}

/// A lane's poll result: a lane whose peer closed it (end of stream) is done, and the data
/// path reports the close only once every lane is closed (the others may still hold messages:
/// a sender closes its lanes one after the other).
fn lane_result(closed: &mut [bool], lane: usize, polled: Result<()>) -> Result<()> {
    match polled {
        Err(Error::TransportClosed { transport }) => {
            closed[lane] = true;
            if closed.iter().all(|&c| c) {
                Err(Error::TransportClosed { transport })
            } else {
                Ok(())
            }
        }
        other => other,
    }
}

/// The length a parked lane's blob has in the striped blob (no bytes follow): more than any
/// blob a hello carries.
const PARKED: u16 = u16::MAX;

/// How long lanes may stay open, bringing nothing, after the peer closed one of them. At the
/// end of a stream the peer closes every lane at once (after its last message arrived), so
/// an open lane that stays quiet this long means the close was a failure: a connection reset
/// under one queue pair (DOCA reports it as a close), a middlebox's FIN on one tcp connection.
/// Not once the peer said Finish to a receiver that let it go ([`DataPath::peer_finished`]):
/// then every lane closes, and a slow one (a tcp connection's tail in a retransmission
/// stall) still carries counted messages.
const LANE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Bytes in front of every message on a striped data path.
pub(crate) const LANE_HEADER_LEN: usize = 8;

/// The lanes, their connection state and the epoll set; `R` is the role's own part.
#[derive(Debug)]
pub(crate) struct Striped<P: ?Sized, R> {
    lanes: Vec<Box<P>>,
    connected: Vec<bool>,
    /// Lanes whose peer closed them (end of stream), or parked: not polled again until a reset.
    closed: Vec<bool>,
    /// Since when a lane the peer closed waits for the open ones to close too (the last
    /// progress of an open lane since): see [`LANE_CLOSE_GRACE`].
    lone_close: Option<Instant>,
    /// [`LANE_CLOSE_GRACE`] (tests shorten it).
    close_grace: Duration,
    /// The peer finished and was let go: no grace is watched ([`DataPath::peer_finished`]).
    peer_finished: bool,
    epoll: Epoll,
    /// What the epoll set is known to hold for each lane (its descriptor and events).
    watched: Vec<Option<(RawFd, EpollFlags)>>,
    /// Which paths, so which lanes, are out of use.
    parking: Parking,
    /// Bytes each path carried.
    counters: PathCounters,
    role: R,
}

/// A sender's part.
#[derive(Debug)]
pub(crate) struct SenderLanes {
    /// The lanes' own staging slots that are not posted: `home[lane][slot]`.
    home: Vec<Vec<Option<StagingSlot>>>,
    /// The lane that holds each slot's bytes (chosen when it was filled).
    lane_of: Vec<usize>,
    /// The session's token of each slot posted on a lane, until its completion is reported.
    posted: Vec<Option<StagingSlot>>,
    /// Posted slots in the order they were posted, with whether their send completed: the
    /// session sees completions in that order (lanes complete in their own).
    post_order: VecDeque<(usize, bool)>,
    /// Sends posted on each lane and not completed.
    outstanding: Vec<usize>,
    /// The lane chosen last (ties go to the next one).
    last: usize,
    /// The number the next message carries.
    next_number: u64,
    events: Vec<SendEvent>,
}

/// A receiver's part.
#[derive(Debug)]
pub(crate) struct ReceiverLanes {
    credits: u32,
    window: ReorderWindow<(usize, Arrived)>,
    /// The session's receive slots that hold no message, in the order they were posted.
    free: VecDeque<RecvSlot>,
    /// Per session slot: the lane and lane message it holds, and the connection it came on.
    held: Vec<Option<Held>>,
    /// How many times the data path was rebuilt (a message from before counts no release).
    epoch: u64,
    /// Messages of this connection the session released.
    released: u64,
    arrivals: Vec<Arrived>,
    /// The lanes' slots, until the session first posts its own (right before Ready).
    unposted: Vec<(usize, RecvSlot)>,
}

#[derive(Debug)]
struct Held {
    lane: usize,
    message: Arrived,
    epoch: u64,
}

/// The role's part of a reset for resumption: each lane, then the role's bookkeeping.
pub(crate) trait LaneRole<P: ?Sized>: Send + std::fmt::Debug {
    /// Resets `lane` ([`DataPath::reset_for_resume`]) and takes back what it gives back, even
    /// when the reset fails.
    fn reset_lane(
        &mut self,
        lane: usize,
        path: &mut P,
        reclaimed: &mut Vec<StagingSlot>,
    ) -> Result<()>;

    /// After every lane was reset: the role's own state for the new data path.
    fn after_reset(&mut self, lanes: &mut [Box<P>], reclaimed: &mut Vec<StagingSlot>)
        -> Result<()>;

    /// Whether `lane` still holds a slot of the session's (its reset failed before giving
    /// it back): such a lane cannot be left behind.
    fn lane_holds_slots(&self, lane: usize) -> bool;
}

/// A sender over `lanes` (lane `i` on path `i % paths`), each made with `slots` slots (the
/// session's count).
pub(crate) fn sender<P: SendPath + ?Sized>(
    lanes: Vec<Box<P>>,
    paths: usize,
    retries: Retries,
    slots: usize,
) -> Result<Striped<P, SenderLanes>> {
    let n = lanes.len();
    let role = SenderLanes {
        home: (0..n)
            .map(|_| (0..slots).map(|i| Some(StagingSlot::mint(i))).collect())
            .collect(),
        lane_of: vec![0; slots],
        posted: (0..slots).map(|_| None).collect(),
        post_order: VecDeque::with_capacity(slots),
        outstanding: vec![0; n],
        last: n.saturating_sub(1),
        next_number: 0,
        events: Vec::with_capacity(slots),
    };
    Striped::new(lanes, Parking::new(n, paths, retries), role)
}

/// A receiver over `lanes` (lane `i` on path `i % paths`), each made with `slots` slots (the
/// session's count). The lanes' slots are posted when the session posts its own, after
/// connecting; the session's slots are tokens only.
pub(crate) fn receiver<P: RecvPath + ?Sized>(
    lanes: Vec<Box<P>>,
    paths: usize,
    retries: Retries,
    slots: usize,
) -> Result<Striped<P, ReceiverLanes>> {
    let n = lanes.len();
    let credits = u32::try_from(slots).unwrap_or(u32::MAX);
    let role = ReceiverLanes {
        credits,
        window: ReorderWindow::new(credits, n),
        free: VecDeque::with_capacity(slots),
        held: (0..slots).map(|_| None).collect(),
        epoch: 0,
        released: 0,
        arrivals: Vec::with_capacity(slots),
        unposted: (0..n)
            .flat_map(|lane| (0..slots).map(move |i| (lane, RecvSlot::mint(i))))
            .collect(),
    };
    Striped::new(lanes, Parking::new(n, paths, retries), role)
}

impl<P: DataPath + ?Sized, R> Striped<P, R> {
    fn new(lanes: Vec<Box<P>>, parking: Parking, role: R) -> Result<Self> {
        let epoll = new_epoll()?;
        let striped = Self {
            counters: PathCounters::new(parking.paths()),
            connected: vec![false; lanes.len()],
            closed: vec![false; lanes.len()],
            lone_close: None,
            close_grace: LANE_CLOSE_GRACE,
            peer_finished: false,
            watched: vec![None; lanes.len()],
            parking,
            lanes,
            epoll,
            role,
        };
        let blob = striped.blob();
        if blob.len() > MAX_BLOB_LEN {
            return Err(Error::InvalidConfig(format!(
                "--qps {}: the {} transport's connection data for that many queue pairs is {} \
                 bytes, more than a hello carries ({MAX_BLOB_LEN}): use fewer",
                striped.lanes.len(),
                striped.lanes[0].kind().name(),
                blob.len()
            )));
        }
        Ok(striped)
    }

    /// Every lane's blob, each with a 16-bit length, after the lane count; a parked lane has
    /// [`PARKED`] for its length, and no bytes (an empty blob is a lane's own: a tcp lane that
    /// connects out has nothing to say).
    fn blob(&self) -> Vec<u8> {
        let mut out = vec![u8::try_from(self.lanes.len()).unwrap_or(u8::MAX)];
        for (i, lane) in self.lanes.iter().enumerate() {
            if self.parking.is_parked(i) {
                out.extend_from_slice(&PARKED.to_le_bytes());
                continue;
            }
            let blob = lane.local_blob();
            let len = u16::try_from(blob.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&blob[..usize::from(len)]);
        }
        out
    }

    /// The peer's blob, split into its lanes' (as many as ours); `None` for a lane it parked.
    fn peer_blobs<'a>(&self, blob: &'a [u8]) -> Result<Vec<Option<&'a [u8]>>> {
        let malformed = |why: String| Error::TransportProtocol {
            transport: self.lanes[0].kind().name(),
            detail: format!(
                "the peer's connection data for {} lanes {why}",
                self.lanes.len()
            ),
        };
        let (&count, mut rest) = blob
            .split_first()
            .ok_or_else(|| malformed("is empty".to_owned()))?;
        if usize::from(count) != self.lanes.len() {
            return Err(malformed(format!("names {count}")));
        }
        let mut blobs = Vec::with_capacity(self.lanes.len());
        for lane in 0..self.lanes.len() {
            let (len, after) = rest
                .split_first_chunk::<2>()
                .ok_or_else(|| malformed(format!("ends before lane {lane}")))?;
            let len = u16::from_le_bytes(*len);
            if len == PARKED {
                blobs.push(None);
                rest = after;
                continue;
            }
            let len = usize::from(len);
            if after.len() < len {
                return Err(malformed(format!("ends inside lane {lane}")));
            }
            let (this, after) = after.split_at(len);
            blobs.push(Some(this));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(malformed(format!("has {} bytes too many", rest.len())));
        }
        Ok(blobs)
    }

    /// After a poll that brought `progress` events: a lane the peer closed while others stay
    /// open starts (or, with progress, restarts) [`LANE_CLOSE_GRACE`]; once it passes with
    /// nothing from the open lanes, the close counts as the lane's failure (its path is
    /// marked failed, as for any lane error), every lane counts as closed and the data path
    /// reports its close (before Finish, the session's break).
    fn watch_lone_close(&mut self, progress: usize) -> Result<()> {
        let closed_by_peer =
            (0..self.lanes.len()).find(|&i| self.closed[i] && !self.parking.is_parked(i));
        let lone = closed_by_peer.filter(|_| !self.peer_finished && self.closed.contains(&false));
        let Some(lane) = lone else {
            self.lone_close = None;
            return Ok(());
        };
        let now = Instant::now();
        match self.lone_close {
            Some(since) if progress == 0 => {
                if now.saturating_duration_since(since) < self.close_grace {
                    return Ok(());
                }
                log::warn!(
                    "lane {lane} was closed by the peer, and the other lanes brought nothing \
                     for {:?} after it: taken as the data path's failure, not its end",
                    self.close_grace
                );
                self.parking.lane_failed(lane);
                self.closed.fill(true);
                self.lone_close = None;
                Err(Error::TransportClosed {
                    transport: self.lanes[lane].kind().name(),
                })
            }
            _ => {
                self.lone_close = Some(now);
                Ok(())
            }
        }
    }

    /// Arms every lane with `arm` (`before_wait` or `arm_for_readiness`) and the epoll set
    /// with their descriptors; `Ok(true)` as soon as one lane has completions waiting (the
    /// caller polls instead of sleeping, and the next sleep arms again).
    fn arm_lanes(&mut self, arm: impl Fn(&mut P) -> Result<bool>) -> Result<bool> {
        for i in 0..self.lanes.len() {
            // A closed lane brings nothing more: a DOCA lane after a reset keeps reporting its
            // failure, and asking it would make every wait a spin until the grace passes.
            if self.parking.is_parked(i) || self.closed[i] {
                continue;
            }
            match arm(&mut self.lanes[i]) {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) => {
                    self.parking.lane_failed(i);
                    return Err(e);
                }
            }
        }
        self.watch_lanes()?;
        Ok(false)
    }

    /// Puts every lane's wait descriptor in the epoll set as it now asks (what is already
    /// there as asked is left alone).
    fn watch_lanes(&mut self) -> Result<()> {
        let stopped_waiting =
            self.lanes
                .iter()
                .zip(&self.watched)
                .enumerate()
                .any(|(i, (lane, watched))| {
                    watched.is_some()
                        && (self.parking.is_parked(i)
                            || self.closed[i]
                            || lane.wait_handle().is_none())
                });
        if stopped_waiting {
            // A lane with nothing to wait for (a tcp lane at end of file) may keep its
            // descriptor open and readable for ever: a new set without it. The new one is made
            // before the old one closes, so its number differs and whoever watches the set
            // (an event loop's readiness descriptor) sees the change.
            self.epoll = new_epoll()?;
            self.watched.fill(None);
        }
        for (i, (lane, watched)) in self.lanes.iter().zip(self.watched.iter_mut()).enumerate() {
            let handle = if self.parking.is_parked(i) || self.closed[i] {
                None
            } else {
                lane.wait_handle()
            };
            let Some(handle) = handle else {
                // Closed: a closed descriptor leaves the epoll set by itself.
                *watched = None;
                continue;
            };
            let events = epoll_events(Interest {
                fd: handle.fd,
                readable: true,
                writable: handle.writable,
            });
            let want = Some((handle.fd.as_raw_fd(), events));
            if *watched != want {
                watch_fd(&self.epoll, handle.fd, events)?;
                *watched = want;
            }
        }
        Ok(())
    }
}

impl<P: DataPath + ?Sized, R: LaneRole<P>> DataPath for Striped<P, R> {
    fn kind(&self) -> TransportKind {
        self.lanes[0].kind()
    }

    fn local_blob(&self) -> Vec<u8> {
        self.blob()
    }

    fn connect(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<SetupStep> {
        let blobs = self.peer_blobs(peer_blob)?;
        // What the peer parked, we park too: both ends use the union.
        for (i, blob) in blobs.iter().enumerate() {
            if blob.is_none() {
                self.parking.peer_parked(i);
            }
        }
        if self.parking.in_use().next().is_none() {
            return Err(Error::TransportProtocol {
                transport: self.lanes[0].kind().name(),
                detail: "the two ends left out every path between them (each parked a path the \
                         other kept)"
                    .to_owned(),
            });
        }
        let mut done = true;
        for (i, blob) in blobs.into_iter().enumerate() {
            let Some(blob) = blob.filter(|_| !self.parking.is_parked(i)) else {
                // Out of use: never connected, polled or waited on until a reset.
                self.connected[i] = true;
                self.closed[i] = true;
                continue;
            };
            if !self.connected[i] {
                match self.lanes[i].connect(blob, deadline) {
                    Ok(step) => self.connected[i] = step == SetupStep::Done,
                    Err(e) => {
                        self.parking.lane_failed(i);
                        return Err(e);
                    }
                }
                done &= self.connected[i];
            }
        }
        // New descriptors may carry old numbers: set every lane again. A parked lane keeps
        // its descriptor (a verbs channel, a DOCA handle) across a reset, and nothing drains
        // it: a new set without it.
        if done && self.parking.any_parked() {
            self.epoll = new_epoll()?;
        }
        self.watched.fill(None);
        Ok(if done {
            self.parking.on_connected(Instant::now());
            SetupStep::Done
        } else {
            SetupStep::Waiting
        })
    }

    fn setup_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) {
        for (i, (lane, connected)) in self.lanes.iter().zip(&self.connected).enumerate() {
            if !connected && !self.parking.is_parked(i) {
                lane.setup_fds(fds);
            }
        }
    }

    fn path_mtu(&self) -> Option<u32> {
        self.lanes.iter().filter_map(|l| l.path_mtu()).min()
    }

    fn qp_settings(&self) -> QpSettings {
        // Lanes on other paths may run on other devices: the MTU all of them can carry.
        let mtu = self
            .lanes
            .iter()
            .map(|l| l.qp_settings().mtu)
            .collect::<Option<Vec<u32>>>()
            .and_then(|mtus| mtus.into_iter().min());
        QpSettings {
            mtu,
            ..self.lanes[0].qp_settings()
        }
    }

    fn slot_size(&self) -> usize {
        // The largest message every lane carries (a device may cap its own).
        self.lanes
            .iter()
            .map(|l| l.slot_size())
            .min()
            .unwrap_or(0)
            .saturating_sub(LANE_HEADER_LEN)
    }

    fn credit_route(&self) -> CreditRoute {
        self.lanes[0].credit_route()
    }

    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        self.parking
            .in_use()
            .any(|i| self.lanes[i].wait_handle().is_some())
            .then(|| WaitHandle {
                fd: self.epoll.0.as_fd(),
                writable: false,
            })
    }

    /// On the host's CPUs if the device of any lane in use works there (the lanes of a path
    /// share one device; paths may not). A parked lane's device is not counted.
    fn device_work(&self) -> DeviceWork {
        if (0..self.lanes.len()).any(|i| {
            !self.parking.is_parked(i) && self.lanes[i].device_work() == DeviceWork::HostThreads
        }) {
            DeviceWork::HostThreads
        } else {
            DeviceWork::Elsewhere
        }
    }

    /// A lone lane in use pauses as it asks; several never do. Measured on loopback (--qps 4,
    /// BENCHMARKS.md round eight): with several connections one wake-up already finds several
    /// of them with data, the receiver is busier, and a pause (even one for all lanes) took
    /// 64 KiB from 3,540-3,850 to 2,970-3,020 MiB/s and 64 B from 0.90-0.98 to 0.53-0.56
    /// million messages a second. Every lane in use is asked all the same, so each uses its
    /// pause up (a parked lane's is forgotten at its reset).
    fn pause_before_sleep(&mut self) -> Option<Duration> {
        let mut in_use = 0;
        let mut pause = None;
        for i in 0..self.lanes.len() {
            if !self.parking.is_parked(i) {
                in_use += 1;
                pause = self.lanes[i].pause_before_sleep();
            }
        }
        if in_use == 1 {
            pause
        } else {
            None
        }
    }

    fn before_wait(&mut self) -> Result<bool> {
        self.arm_lanes(|lane| lane.before_wait())
    }

    fn arm_for_readiness(&mut self) -> Result<bool> {
        self.arm_lanes(|lane| lane.arm_for_readiness())
    }

    fn on_wakeup(&mut self) {
        // The epoll set does not say which lane woke it.
        for i in self.parking.in_use() {
            self.lanes[i].on_wakeup();
        }
    }

    fn close(&mut self) {
        for lane in &mut self.lanes {
            lane.close();
        }
    }

    fn can_resume(&self) -> bool {
        self.lanes.iter().all(|l| l.can_resume())
    }

    /// Every lane is reset, whatever one of them said (each gives its slots back). A lane
    /// that cannot be set up again (its path's address or device is gone, say) is left behind
    /// when its path is parked, or can be now, and it gave back every slot: the session goes
    /// on over the other paths, and the lane is reset again when its path is tried again.
    fn reset_for_resume(&mut self, reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        self.connected.fill(false);
        self.closed.fill(false);
        self.lone_close = None;
        self.peer_finished = false;
        self.watched.fill(None);
        let now = Instant::now();
        self.parking.on_reset(now);
        let mut result = Ok(());
        let mut left_behind = Vec::new();
        for (lane, path) in self.lanes.iter_mut().enumerate() {
            if let Err(e) = self.role.reset_lane(lane, path, reclaimed) {
                if self.parking.park_after_failed_reset(lane, now) {
                    log::debug!("striped: lane {lane} left behind at this reset: {e}");
                    left_behind.push((lane, e));
                } else {
                    result = result.and(Err(e));
                }
            }
        }
        result = result.and(self.role.after_reset(&mut self.lanes, reclaimed));
        for (lane, e) in left_behind {
            if self.role.lane_holds_slots(lane) {
                result = result.and(Err(e));
            }
        }
        result
    }

    fn take_path_events(&mut self) -> PathEvents {
        self.parking.take_events()
    }

    fn retry_paths_at(&self) -> Option<Instant> {
        self.parking.retry_at()
    }

    fn poll_again_at(&self) -> Option<Instant> {
        self.lone_close.map(|since| since + self.close_grace)
    }

    fn peer_finished(&mut self) {
        self.peer_finished = true;
        self.lone_close = None;
    }

    fn path_counters(&self) -> PathCounters {
        self.counters.clone()
    }

    fn paths_due_for_retry(&self, now: Instant) -> Vec<usize> {
        self.parking.due(now)
    }

    fn postpone_path_retry(&mut self, now: Instant, answered: Option<usize>) {
        self.parking.postpone_retry(now, answered);
    }

    fn forget_path_failures(&mut self) {
        self.parking.forget_failures();
    }
}

impl<P: SendPath + ?Sized> LaneRole<P> for SenderLanes {
    fn reset_lane(
        &mut self,
        lane: usize,
        path: &mut P,
        reclaimed: &mut Vec<StagingSlot>,
    ) -> Result<()> {
        let mut back = Vec::new();
        let result = path.reset_for_resume(&mut back);
        for slot in back {
            let i = slot.index();
            if let Some(home) = self.home[lane].get_mut(i) {
                *home = Some(slot);
            }
            if let Some(ours) = self.posted.get_mut(i).and_then(Option::take) {
                reclaimed.push(ours);
            }
        }
        self.outstanding[lane] = 0;
        result
    }

    fn after_reset(&mut self, _: &mut [Box<P>], reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        // A send its lane completed but the session did not hear of yet (an older one on
        // another lane had not completed): its slot is home, its token still ours.
        for (i, ours) in self.posted.iter_mut().enumerate() {
            let lane = self.lane_of.get(i).copied().unwrap_or(0);
            if self.home[lane].get(i).is_some_and(Option::is_some) {
                reclaimed.extend(ours.take());
            }
        }
        self.post_order.clear();
        self.next_number = 0;
        Ok(())
    }

    fn lane_holds_slots(&self, lane: usize) -> bool {
        self.home
            .get(lane)
            .is_some_and(|home| home.iter().any(Option::is_none))
    }
}

impl SenderLanes {
    /// The lane for a slot being filled: of the lanes in use, the fewest sends outstanding,
    /// ties in turn.
    fn choose(&mut self, parking: &Parking) -> usize {
        let n = self.outstanding.len();
        let lane = (1..=n)
            .map(|step| (self.last + step) % n)
            .filter(|&lane| !parking.is_parked(lane))
            .min_by_key(|&lane| self.outstanding[lane])
            .unwrap_or(0);
        self.last = lane;
        lane
    }
}

impl<P: SendPath + ?Sized> Striped<P, SenderLanes> {
    /// Slot `i`'s bytes (`len` of the message, and its header), from parked lane `from` to a
    /// lane in use: a message sent again after a resume that parked its lane. The slot's index
    /// is home on every lane but the one that holds its bytes, so it is free there.
    fn move_off_parked(&mut self, i: usize, from: usize, len: usize) -> Result<usize> {
        let to = self.role.choose(&self.parking);
        let taken = |home: &mut Vec<Vec<Option<StagingSlot>>>, lane: usize| {
            home[lane].get_mut(i).and_then(Option::take).ok_or_else(|| {
                Error::Internal(format!("striped sender: slot {i} not home on lane {lane}"))
            })
        };
        let mut source = taken(&mut self.role.home, from)?;
        let mut target = match taken(&mut self.role.home, to) {
            Ok(t) => t,
            Err(e) => {
                self.role.home[from][i] = Some(source);
                return Err(e);
            }
        };
        let (low, high) = self.lanes.split_at_mut(from.max(to));
        let (a, b) = if from < to {
            (&mut low[from], &mut high[0])
        } else {
            (&mut high[0], &mut low[to])
        };
        let src = a.staging(&mut source);
        let dst = b.staging(&mut target);
        let n = (len + LANE_HEADER_LEN).min(src.len()).min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        self.role.home[from][i] = Some(source);
        self.role.home[to][i] = Some(target);
        if let Some(at) = self.role.lane_of.get_mut(i) {
            *at = to;
        }
        Ok(to)
    }
}

impl<P: SendPath + ?Sized> SendPath for Striped<P, SenderLanes> {
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        let i = slot.index();
        let lane = self.role.choose(&self.parking);
        if let Some(at) = self.role.lane_of.get_mut(i) {
            *at = lane;
        }
        match self.role.home[lane].get_mut(i).and_then(Option::as_mut) {
            Some(own) => self.lanes[lane]
                .staging(own)
                .get_mut(LANE_HEADER_LEN..)
                .unwrap_or_default(),
            // A slot the session holds is home on every lane (a posted one is not the
            // session's to fill): never here.
            None => &mut [],
        }
    }

    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        let i = slot.index();
        let mut lane = self.role.lane_of.get(i).copied().unwrap_or(0);
        if self.parking.is_parked(lane) {
            lane = self.move_off_parked(i, lane, len)?;
        }
        let mut own = self.role.home[lane]
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| {
                Error::Internal(format!("striped sender: slot {i} posted while not home"))
            })?;
        let number = self.role.next_number;
        self.role.next_number += 1;
        let header = self.lanes[lane].staging(&mut own);
        if let Some(header) = header.get_mut(..LANE_HEADER_LEN) {
            header[..4].copy_from_slice(&(number as u32).to_le_bytes());
            header[4..].fill(0);
        }
        self.role.posted[i] = Some(slot);
        self.role.post_order.push_back((i, false));
        self.role.outstanding[lane] += 1;
        let posted = self.lanes[lane].post_send(own, len + LANE_HEADER_LEN);
        match posted {
            Ok(()) => self.counters.add(self.parking.path_of(lane), len),
            Err(_) => self.parking.lane_failed(lane),
        }
        posted
    }

    fn flush_sends(&mut self) -> Result<()> {
        for i in 0..self.lanes.len() {
            if self.parking.is_parked(i) {
                continue;
            }
            if let Err(e) = self.lanes[i].flush_sends() {
                self.parking.lane_failed(i);
                return Err(e);
            }
        }
        Ok(())
    }

    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        let mut result = Ok(());
        let mut progress = 0;
        for (lane, path) in self.lanes.iter_mut().enumerate() {
            if self.closed[lane] {
                continue;
            }
            // What a failing lane reported still counts (its slots come home).
            let polled = path.poll_sends(&mut self.role.events);
            if matches!(&polled, Err(e) if !matches!(e, Error::TransportClosed { .. })) {
                self.parking.lane_failed(lane);
            }
            result = result.and(lane_result(&mut self.closed, lane, polled));
            progress += self.role.events.len();
            for event in self.role.events.drain(..) {
                match event {
                    SendEvent::Sent(own) => {
                        let i = own.index();
                        if let Some(home) = self.role.home[lane].get_mut(i) {
                            *home = Some(own);
                        }
                        self.role.outstanding[lane] = self.role.outstanding[lane].saturating_sub(1);
                        if let Some(entry) =
                            self.role.post_order.iter_mut().find(|(slot, _)| *slot == i)
                        {
                            entry.1 = true;
                        }
                    }
                    credits @ SendEvent::Credits(_) => out.push(credits),
                }
            }
        }
        while let Some(&(i, true)) = self.role.post_order.front() {
            self.role.post_order.pop_front();
            if let Some(ours) = self.role.posted.get_mut(i).and_then(Option::take) {
                out.push(SendEvent::Sent(ours));
            }
        }
        // The oldest send has not completed: its lane may signal only every few sends (verbs),
        // and with the messages spread over the lanes it may never reach the next signaled one.
        // Ask it to report what it posted (nothing when a request for it is outstanding).
        if let Some(&(i, false)) = self.role.post_order.front() {
            let lane = self.role.lane_of.get(i).copied().unwrap_or(0);
            if !self.parking.is_parked(lane) {
                let flushed = self.lanes[lane].flush_sends();
                if flushed.is_err() {
                    self.parking.lane_failed(lane);
                }
                result = result.and(flushed);
            }
        }
        result.and_then(|()| self.watch_lone_close(progress))
    }

    fn output_queued(&self) -> bool {
        self.parking.in_use().any(|i| self.lanes[i].output_queued())
    }
}

impl<P: RecvPath + ?Sized> LaneRole<P> for ReceiverLanes {
    fn reset_lane(&mut self, _: usize, path: &mut P, _: &mut Vec<StagingSlot>) -> Result<()> {
        path.reset_for_resume(&mut Vec::new())
    }

    fn lane_holds_slots(&self, _: usize) -> bool {
        // The session's receive slots are tokens only; a lane's own slots are its own.
        false
    }

    fn after_reset(&mut self, lanes: &mut [Box<P>], _: &mut Vec<StagingSlot>) -> Result<()> {
        let mut result = Ok(());
        // What waited for its turn did not arrive, for the session: sent again.
        let window = std::mem::replace(
            &mut self.window,
            ReorderWindow::new(self.credits, lanes.len()),
        );
        for (lane, message) in window.into_waiting() {
            result = result.and(lanes[lane].post_recv(message.into_slot()));
        }
        self.epoch += 1;
        self.released = 0;
        result
    }
}

impl ReceiverLanes {
    /// One lane's arrival into the window.
    fn arrived<P: RecvPath + ?Sized>(
        &mut self,
        lane: usize,
        path: &P,
        message: Arrived,
    ) -> Result<()> {
        let bytes = path.message(&message);
        let header = bytes
            .first_chunk::<LANE_HEADER_LEN>()
            .filter(|h| h[4..] == [0; 4])
            .ok_or_else(|| Error::TransportProtocol {
                transport: path.kind().name(),
                detail: format!(
                    "a {}-byte message on lane {lane} without a lane header (its number, then 4 \
                     zero bytes)",
                    message.len()
                ),
            })?;
        let low = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let number = self.window.number_of(low)?;
        self.window.arrived(lane, number, (lane, message))?;
        Ok(())
    }
}

impl<P: RecvPath + ?Sized> RecvPath for Striped<P, ReceiverLanes> {
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()> {
        for (lane, own) in self.role.unposted.drain(..) {
            self.lanes[lane].post_recv(own)?;
        }
        let i = slot.index();
        let held = self.role.held.get_mut(i).and_then(Option::take);
        self.role.free.push_back(slot);
        let Some(held) = held else {
            return Ok(());
        };
        if held.epoch == self.role.epoch {
            self.role.released += 1;
            self.role.window.release(self.role.released);
        }
        self.lanes[held.lane].post_recv(held.message.into_slot())
    }

    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        match self
            .role
            .held
            .get(msg.slot_index())
            .and_then(Option::as_ref)
        {
            Some(held) => self.lanes[held.lane]
                .message(&held.message)
                .get(LANE_HEADER_LEN..)
                .unwrap_or_default(),
            None => &[],
        }
    }

    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        let mut result = Ok(());
        let mut progress = 0;
        for (lane, path) in self.lanes.iter_mut().enumerate() {
            if self.closed[lane] {
                continue;
            }
            // What a failing lane delivered still goes in the window (its slots stay known).
            let polled = path.poll_arrivals(&mut self.role.arrivals);
            if matches!(&polled, Err(e) if !matches!(e, Error::TransportClosed { .. })) {
                self.parking.lane_failed(lane);
            }
            let polled = lane_result(&mut self.closed, lane, polled);
            let mut arrivals = std::mem::take(&mut self.role.arrivals);
            progress += arrivals.len();
            for message in arrivals.drain(..) {
                result = result.and(self.role.arrived(lane, &**path, message));
            }
            self.role.arrivals = arrivals;
            result = result.and(polled);
        }
        while let Some((_, (lane, message))) = self.role.window.pop_next() {
            let Some(slot) = self.role.free.pop_front() else {
                // Messages held from before a resume count against the credits too.
                return Err(ProtocolViolation::CreditOverrun {
                    capacity: self.role.credits,
                }
                .into());
            };
            let len = message.len().saturating_sub(LANE_HEADER_LEN);
            self.counters.add(self.parking.path_of(lane), len);
            self.role.held[slot.index()] = Some(Held {
                lane,
                message,
                epoch: self.role.epoch,
            });
            out.push(Arrived::new(slot, len));
        }
        result.and_then(|()| self.watch_lone_close(progress))
    }

    fn return_credits(&mut self, count: usize) -> Result<()> {
        // The first lane in use (lane 0 unless its path is parked).
        let lane = self.parking.in_use().next().unwrap_or(0);
        let returned = self.lanes[lane].return_credits(count);
        if returned.is_err() {
            self.parking.lane_failed(lane);
        }
        returned
    }

    fn data_waiting(&self) -> bool {
        self.parking.in_use().any(|i| self.lanes[i].data_waiting())
    }
}

#[cfg(test)]
mod tests;
