//! A session: the control channel and a connected data path of one role, past the Ready
//! barrier, and what its drivers ([`crate::RdmaSink`], [`crate::RdmaSrc`]) share: the wait
//! that multiplexes both, and the attribution of a data-path failure to the peer's words.
//!
//! Set-up lives beside it: [`handshake`] drives the core's handshake state machine over the
//! bootstrap connection, [`choice`] picks the transport.

mod choice;
mod connect;
pub(crate) mod handshake;
mod path_probe;
pub(crate) mod readiness;
pub(crate) mod resume;
mod route_paths;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use crate::busy_poll::{BusyPoll, Spin};
use crate::config::Config;
use crate::net::iface::PathInfo;
use crate::net::wait::{wait_any, Interest};
use crate::net::{ControlChannel, Received};
use crate::proto::{Checksum, Hello, Role, TransportKind};
use crate::roce::DeviceChoice;
use crate::session_core::lifecycle::Planned;
use crate::session_core::Explanation;
use crate::transport::RolePath;
use crate::{Error, Result};

pub(crate) use handshake::PendingHello;
use readiness::{Readiness, Watched, RESUME_TICK};

/// How long one wait slice lasts before the stop flag is checked again (also while a handshake
/// waits for the peer's hello or Ready).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The end of the next wait toward `deadline` (none: a slice): never more than a slice away,
/// so that every blocking loop looks at the stop flag at least that often.
pub(crate) fn slice_end(deadline: Option<Instant>) -> Instant {
    let slice = Instant::now() + WAIT_SLICE;
    deadline.map_or(slice, |d| d.min(slice))
}

/// Sleeps toward `until`, a slice at most (a caller that waits on nothing but time).
pub(crate) fn sleep_toward(until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    std::thread::sleep(left.min(WAIT_SLICE));
}

/// One of a session's paths beyond the bootstrap connection's (`--paths`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionPath {
    /// Its addresses and interface, as for the bootstrap path.
    pub path: PathInfo,
    /// The RDMA device, port and GID its queue pairs run on (RDMA transports).
    pub device: Option<DeviceChoice>,
}

/// What was negotiated and chosen for a session (for logs, summaries and `--json`).
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The transport in use.
    pub transport: TransportKind,
    /// Source address and interface toward the peer.
    pub path: PathInfo,
    /// The RDMA device, port and GID, when an RDMA transport runs.
    pub device: Option<DeviceChoice>,
    /// The session's paths beyond `path` (`--paths`), in order: lane `i` of the
    /// [`qps`](Self::qps) runs on path `i % (extra_paths.len() + 1)`, path 0 being `path`.
    pub extra_paths: Vec<SessionPath>,
    /// Our hello.
    pub(crate) local: Hello,
    /// The peer's hello.
    pub(crate) peer: Hello,
    /// The data path's MTU, when the transport has one (RDMA: the path MTU of the QP).
    pub(crate) mtu: Option<u32>,
    /// Why `auto` runs this transport rather than the first one it tried (the RDMA transport
    /// that could not start, or why there was no RoCE v2 GID); `None` when the transport was
    /// named or auto's first choice started.
    pub fallback: Option<String>,
}

impl SessionInfo {
    /// The perftest-style block printed at start: what was chosen and negotiated.
    pub fn describe(&self) -> String {
        let iface = self.path.interface.as_deref().unwrap_or("?");
        let mut s = format!(
            "transport {} | source {} ({iface}) -> peer {} | credits {} | max message {} bytes",
            self.transport,
            self.path.source,
            self.path.peer,
            self.credits(),
            self.max_msg_size()
        );
        if self.qps() > 1 {
            s.push_str(&format!(" | qps {}", self.qps()));
        }
        if self.checksum() != Checksum::None {
            s.push_str(&format!(" | checksum {}", self.checksum()));
        }
        match self.resume_timeout() {
            Some(t) => s.push_str(&format!(" | resume {:.1} s", t.as_secs_f64())),
            None => s.push_str(" | resume off"),
        }
        if let Some(d) = &self.device {
            s.push_str(&format!(
                " | device {} port {} gid-index {} gid {} netdev {}",
                d.device,
                d.port,
                d.gid_index,
                d.gid_string(),
                d.netdev.as_deref().unwrap_or("-")
            ));
        }
        for (i, p) in self.extra_paths.iter().enumerate() {
            s.push_str(&format!(
                " | path {} source {} ({}) -> peer {}",
                i + 1,
                p.path.source,
                p.path.interface.as_deref().unwrap_or("?"),
                p.path.peer
            ));
            if let Some(d) = &p.device {
                s.push_str(&format!(
                    " device {} port {} gid-index {}",
                    d.device, d.port, d.gid_index
                ));
            }
        }
        if self.transport != TransportKind::Tcp {
            s.push_str(&self.describe_qp());
        }
        s
    }

    /// The queue pair's settings, ours and (for what the peer's packets carry) the peer's, as
    /// the "session established" line shows them; `-` where a transport cannot say (DOCA's
    /// traffic class, ACK timeout and retry count are the SDK's).
    fn describe_qp(&self) -> String {
        let text = |v: Option<u8>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        let tclass =
            |v: Option<u8>| v.map_or_else(|| "-".to_owned(), |t| format!("{t} (dscp {})", t >> 2));
        let ack = self.ack_timeout().map_or_else(
            || "-".to_owned(),
            |n| format!("{n} ({})", ack_timeout_text(n)),
        );
        format!(
            " | mtu {} | tclass {} peer {} | sl {} peer {} | ack-timeout {ack} | retry-count {}",
            self.mtu.map_or_else(|| "-".to_owned(), |m| m.to_string()),
            tclass(self.traffic_class()),
            tclass(self.peer_traffic_class()),
            text(self.service_level()),
            text(self.peer_service_level()),
            text(self.retry_count())
        )
    }

    /// What differs between the two ends' queue pairs in a way that matters on a lossless
    /// fabric: each end's traffic class and service level mark the packets it sends (its
    /// messages or credits, and its acknowledgements), so with different values the two
    /// directions travel on different priorities. One warning each.
    pub fn qp_mismatches(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(ours), Some(theirs)) = (self.traffic_class(), self.peer_traffic_class()) {
            if ours != theirs {
                out.push(format!(
                    "the two ends use different traffic classes: this end --tclass {ours} (DSCP \
                     {}), the peer {theirs} (DSCP {}): the packets each end sends, its \
                     acknowledgements included, travel on its own class, so one direction may \
                     not be on the lossless priority; set the same --tclass on both ends",
                    ours >> 2,
                    theirs >> 2
                ));
            }
        }
        if let (Some(ours), Some(theirs)) = (self.service_level(), self.peer_service_level()) {
            if ours != theirs {
                out.push(format!(
                    "the two ends use different service levels: this end --sl {ours}, the peer \
                     {theirs}: each end's packets carry its own; set the same --sl on both ends"
                ));
            }
        }
        out
    }

    /// The GRH traffic class of the packets this end sends (`--tclass`), when its transport
    /// applies one (verbs; `None` on tcp and DOCA).
    pub fn traffic_class(&self) -> Option<u8> {
        self.local.qp.traffic_class
    }

    /// The traffic class of the peer's packets, as its hello says.
    pub fn peer_traffic_class(&self) -> Option<u8> {
        self.peer.qp.traffic_class
    }

    /// The service level of this end's queue pair (`--sl`), when its transport can say.
    pub fn service_level(&self) -> Option<u8> {
        self.local.qp.service_level
    }

    /// The service level of the peer's queue pair, as its hello says.
    pub fn peer_service_level(&self) -> Option<u8> {
        self.peer.qp.service_level
    }

    /// This end's local ACK timeout exponent (`--ack-timeout`: 4.096 us x 2^N), when its
    /// transport applies one (verbs).
    pub fn ack_timeout(&self) -> Option<u8> {
        self.local.qp.ack_timeout
    }

    /// This end's transport retry count (`--retry-count`), when its transport applies one.
    pub fn retry_count(&self) -> Option<u8> {
        self.local.qp.retry_count
    }

    /// The data path's MTU in bytes, when the transport has one (RDMA transports).
    pub fn mtu(&self) -> Option<u32> {
        self.mtu
    }

    /// The window: the receiver's slot count.
    pub fn credits(&self) -> u16 {
        match self.local.role {
            Role::Receiver => self.local.credits,
            Role::Sender => self.peer.credits,
        }
    }

    /// The queue pairs (tcp: data connections) the session stripes its messages over
    /// ([`Config::qps`](crate::Config::qps): the client's choice).
    pub fn qps(&self) -> u8 {
        self.local.qps
    }

    /// How long a broken session tries to resume (the shorter of both ends' times); `None`
    /// when it does not resume.
    pub fn resume_timeout(&self) -> Option<Duration> {
        resume::negotiated_timeout(&self.local, &self.peer)
    }

    /// The check each message carries (both ends agreed on it).
    pub fn checksum(&self) -> Checksum {
        self.local.checksum
    }

    /// The largest message this session carries: the smaller of both ends' limits.
    pub fn max_msg_size(&self) -> u32 {
        self.local.max_msg_size.min(self.peer.max_msg_size)
    }
}

/// An established session: control channel plus connected data path of role `P`, past the
/// Ready barrier.
#[derive(Debug)]
pub(crate) struct Session<P: RolePath + ?Sized> {
    pub(crate) control: ControlChannel,
    pub(crate) transport: Box<P>,
    /// The slots the role keeps (a sender's staging slots; a receiver's are posted).
    pub(crate) slots: Vec<P::Slot>,
    pub(crate) info: SessionInfo,
    pub(crate) config: Config,
    /// How the session resumes after a break; `None` when it does not (either end's
    /// `--resume-timeout 0`, or a transport that cannot).
    pub(crate) resume: Option<resume::Resumption>,
}

impl<P: RolePath + ?Sized> Session<P> {
    /// A data-path failure is often the visible half of the peer ending the session (a Reject
    /// or a closed control connection that has not been read yet): reads the control channel
    /// for as long as the core's [`Explanation`] says, and reports what it decides.
    /// `messages` is the count for that error.
    pub(crate) fn explain(&mut self, e: Error, role: Role, messages: u64) -> Error {
        let Some(mut explanation) = Explanation::start(&e, role, Instant::now()) else {
            return e;
        };
        // A control connection already closed answers at once (its close is sticky, after any
        // message still buffered), so a peer whose close was seen first is still the cause.
        loop {
            match self.control.recv_until(explanation.poll_timeout()) {
                Ok(Received::Message(msg)) => {
                    if let Some(explained) = explanation.on_message(msg) {
                        return explained.into_error(messages);
                    }
                }
                Ok(Received::Closed(lost)) => {
                    return explanation.on_control_closed(lost).into_error(messages)
                }
                Ok(Received::Nothing) | Err(_) => break,
            }
        }
        explanation.unexplained(e, messages)
    }

    /// Sleeps until what `watch` names may have news, `until` passes, or a short slice has
    /// passed, whichever is first; `now` is the caller's reading of the clock just before (a
    /// clock read is a system call on some machines: a wait costs one, not two). A descriptor
    /// at end of file must not be watched (it is always readable): callers leave it out.
    /// Returns [`Error::Interrupted`] when the stop flag is set and `watch.stop` honours it,
    /// and [`Woke::Resume`] (an event, not an error) when a client's resume attempt
    /// waits for this server session.
    pub(crate) fn wait(
        &mut self,
        now: Instant,
        until: Option<Instant>,
        watch: Watch,
    ) -> Result<Woke> {
        if watch.stop == StopFlag::Honoured && self.config.stopped() {
            return Err(Error::Interrupted);
        }
        if resume::poll_attempt(&mut self.resume) {
            return Ok(Woke::Resume(Planned::AttemptArrived));
        }
        let slice = match until {
            Some(t) => t.saturating_duration_since(now).min(WAIT_SLICE),
            None => WAIT_SLICE,
        };
        if slice.is_zero() {
            return Ok(Woke::Ready {
                control: watch.control,
            });
        }
        let control = Interest::read(self.control.fd());
        if watch.data {
            if let Some(pause) = self.transport.pause_before_sleep() {
                std::thread::sleep(pause.min(slice));
            }
        }
        if watch.data && self.transport.before_wait()? {
            // Completions came in while the transport armed its notification: no sleep.
            let control = watch.control && wait_any([control], Duration::ZERO)? == [true];
            return Ok(Woke::Ready { control });
        }
        let data = if watch.data {
            self.transport.wait_handle().map(|h| Interest {
                fd: h.fd,
                readable: true,
                writable: h.writable,
            })
        } else {
            None
        };
        let (control_ready, data_ready) = match (watch.control, data) {
            (true, Some(data)) => {
                let [control_ready, data_ready] = wait_any([control, data], slice)?;
                (control_ready, data_ready)
            }
            (true, None) => (wait_any([control], slice)? == [true], false),
            (false, Some(data)) => (false, wait_any([data], slice)? == [true]),
            (false, None) => {
                wait_any([], slice)?;
                (false, false)
            }
        };
        if data_ready {
            self.transport.on_wakeup();
        }
        Ok(Woke::Ready {
            control: control_ready,
        })
    }
}

impl<P: RolePath + ?Sized> Session<P> {
    /// A client that resumes, whose data path left a path out (`--paths`): when to look at
    /// it next: its retry time ([`crate::session_core::lifecycle`]'s rule 8), or, while a
    /// probe asks whether the path is back ([`path_probe`]), when to look at the probe. The
    /// drivers ask only while the stream runs, never while it finishes (the peer may be gone
    /// by then).
    pub(crate) fn paths_retry_at(&self) -> Option<Instant> {
        let resumption = self.resume.as_ref().filter(|r| !r.is_server())?;
        let due = self.transport.retry_paths_at()?;
        Some(resumption.probe().map_or(due, path_probe::Probe::poll_at))
    }

    /// At `now`, whether a path left out answered its probe: the resume that brings it back.
    /// A due retry starts a probe of the paths due; the due ones that stay silent (all of
    /// them, or the others once one answered) wait again, for longer.
    pub(crate) fn paths_retry_due(&mut self, now: Instant) -> Option<Planned> {
        if self.paths_retry_at()? > now {
            return None;
        }
        let (server, probe) = self.resume.as_mut()?.client_probe()?;
        let mut under_way = match probe.take() {
            Some(under_way) => under_way,
            None => {
                let info = &self.info;
                let ends = |p: usize| match p {
                    0 => Some(&info.path),
                    p => info.extra_paths.get(p - 1).map(|e| &e.path),
                };
                let asked = self
                    .transport
                    .paths_due_for_retry(now)
                    .into_iter()
                    .filter_map(|p| ends(p).map(|e| (p, e.source, e.peer)));
                path_probe::Probe::start(asked, server.port(), now)
            }
        };
        match under_way.poll(now) {
            path_probe::ProbeVerdict::Pending => {
                *probe = Some(under_way);
                None
            }
            path_probe::ProbeVerdict::Answered { path } => {
                log::info!("path {path} answers again: resuming to bring it back");
                self.transport.postpone_path_retry(now, Some(path));
                Some(Planned::RetryPaths)
            }
            path_probe::ProbeVerdict::Silent => {
                self.transport.postpone_path_retry(now, None);
                None
            }
        }
    }

    /// Instead of sleeping (a call that may not wait): arms `readiness` to watch what `watch`
    /// names, with its timer at `until` (the core's next deadline; for a server session that
    /// can resume, at most [`RESUME_TICK`] away, as a resume attempt has no descriptor). The
    /// transport arms its notification without pausing ([`DataPath::arm_for_readiness`]).
    /// [`Armed::PollAgain`] when there is something to do now instead: a completion came in
    /// while the transport armed, a resume attempt waits, or `until` has passed.
    ///
    /// [`DataPath::arm_for_readiness`]: crate::transport::DataPath::arm_for_readiness
    fn arm_readiness(
        &mut self,
        readiness: &mut Readiness,
        now: Instant,
        until: Option<Instant>,
        watch: Watch,
    ) -> Result<Armed> {
        if resume::poll_attempt(&mut self.resume) {
            return Ok(Armed::Resume(Planned::AttemptArrived));
        }
        if until.is_some_and(|t| t <= now) {
            return Ok(Armed::PollAgain);
        }
        if watch.data && self.transport.arm_for_readiness()? {
            return Ok(Armed::PollAgain);
        }
        let control = self.control.fd();
        let control = if watch.control {
            Watched::Watch(Interest::read(control))
        } else {
            Watched::Ignore(control)
        };
        let data = self.transport.wait_handle().map(|h| {
            if watch.data {
                Watched::Watch(Interest {
                    fd: h.fd,
                    readable: true,
                    writable: h.writable,
                })
            } else {
                Watched::Ignore(h.fd)
            }
        });
        let tick = self
            .resume
            .as_ref()
            .filter(|r| r.is_server())
            .map(|_| now + RESUME_TICK);
        let deadline = match (until, tick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match data {
            Some(data) => readiness.arm(&[control, data], deadline, now)?,
            None => readiness.arm(&[control], deadline, now)?,
        }
        Ok(Armed::Waiting)
    }
}

impl<P: RolePath + ?Sized> Session<P> {
    /// Where a driver found nothing to do at `now`: sleeps ([`Session::wait`]) or arms the
    /// readiness descriptor ([`Session::arm_readiness`]) as `patience` says, toward
    /// `core_until` (the core's next deadline). The one pause every driver loop takes.
    pub(crate) fn pause(
        &mut self,
        patience: Patience,
        readiness: &mut Readiness,
        now: Instant,
        core_until: Option<Instant>,
        watch: Watch,
    ) -> Result<Paused> {
        match patience.pause(now, core_until) {
            Pause::Sleep(until) => Ok(match self.wait(now, until, watch)? {
                Woke::Ready { control } => Paused::Ready { control },
                Woke::Resume(planned) => Paused::Resume(planned),
            }),
            Pause::GiveUp => Ok(Paused::NotReady),
            Pause::Arm => Ok(
                match self.arm_readiness(readiness, now, core_until, watch)? {
                    Armed::Waiting => {
                        readiness.set_armed();
                        Paused::NotReady
                    }
                    Armed::PollAgain => Paused::Ready { control: true },
                    Armed::Resume(planned) => Paused::Resume(planned),
                },
            ),
        }
    }

    /// At one of busy polling's clock checks (`now`): whether the spin must end here and go to
    /// the pause, which deals with what it found: the caller's deadline passed, the driver's
    /// next deadline (`until`: its core's, or a path's retry) is due, the stop flag is set
    /// (the waits that spin all honour it: those that do not, after a message counted as
    /// sent and in `finish`, never spin), or a client's resume attempt waits for this
    /// session. Without this, a busy poll longer than these ([`Config::busy_poll`]) would
    /// hold them off for as long as it lasts.
    pub(crate) fn spin_must_end(
        &mut self,
        patience: Patience,
        now: Instant,
        until: Option<Instant>,
    ) -> bool {
        patience.expired(now)
            || until.is_some_and(|t| now >= t)
            || self.config.stopped()
            || resume::poll_attempt(&mut self.resume)
    }

    /// At the start of a call after one that armed the readiness descriptor: the application
    /// waited on it, so the transport hears of a wake-up ([`DataPath::on_wakeup`]; it cannot
    /// tell whether the descriptor fired) and the control channel is read. `true` when it was
    /// armed.
    ///
    /// [`DataPath::on_wakeup`]: crate::transport::DataPath::on_wakeup
    pub(crate) fn after_readiness_wait(&mut self, readiness: &mut Readiness) -> bool {
        if readiness.take_armed() {
            self.transport.on_wakeup();
            true
        } else {
            false
        }
    }
}

/// How [`Session::pause`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paused {
    /// News may have come or a deadline passed; `control`: read the control channel.
    Ready {
        /// Whether to read the control channel.
        control: bool,
    },
    /// A resume is due that no failure set going ([`Woke::Resume`]).
    Resume(Planned),
    /// The caller's patience ran out ([`Flow::NotReady`]).
    NotReady,
}

/// What [`Session::arm_readiness`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Armed {
    /// The readiness descriptor is armed: the call says [`Error::WouldBlock`].
    Waiting,
    /// Something can be done now: poll again instead of returning.
    PollAgain,
    /// A client's resume attempt waits for this server session.
    Resume(Planned),
}

/// How long a driver operation may wait for the peer: the blocking call's, a deadline's
/// (`recv_timeout`), or a `try_` call's.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Patience {
    /// Until done (the stop flag and the session's own timeouts still end it).
    Unbounded,
    /// Until `deadline`, then [`Error::DeadlinePassed`] with the time `given`.
    Until {
        /// When the call gives up.
        deadline: Instant,
        /// What the caller gave it (for the error).
        given: Duration,
    },
    /// Not at all: where it would sleep, it arms the readiness descriptor and says
    /// [`Error::WouldBlock`].
    Never,
}

impl Patience {
    /// A call given `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Self {
        Patience::Until {
            deadline: crate::time::deadline_after(Instant::now(), timeout),
            given: timeout,
        }
    }

    /// Where a call would sleep at `now` until `core_until` (the core's next deadline): how it
    /// goes on. [`Pause::Sleep`] until the earlier of both, [`Pause::Arm`] the readiness
    /// descriptor, or [`Pause::GiveUp`] once the caller's deadline passed.
    pub(crate) fn pause(self, now: Instant, core_until: Option<Instant>) -> Pause {
        match self {
            Patience::Unbounded => Pause::Sleep(core_until),
            Patience::Until { deadline, .. } if now >= deadline => Pause::GiveUp,
            Patience::Until { deadline, .. } => {
                Pause::Sleep(Some(core_until.map_or(deadline, |t| t.min(deadline))))
            }
            Patience::Never => Pause::Arm,
        }
    }

    /// The next round of `busy` when this call may spin
    /// ([`BusyPoll::next_round_yielding`]), else [`Spin::Sleep`]: a call that may not wait goes
    /// straight to its pause.
    pub(crate) fn next_spin(self, busy: &mut BusyPoll) -> Spin {
        if self.may_spin() {
            busy.next_round_yielding()
        } else {
            Spin::Sleep
        }
    }

    /// Whether the caller's deadline has passed at `now`.
    pub(crate) fn expired(self, now: Instant) -> bool {
        matches!(self, Patience::Until { deadline, .. } if now >= deadline)
    }

    /// The error of a call whose patience ran out ([`Flow::NotReady`]).
    pub(crate) fn gave_up(self) -> Error {
        match self {
            Patience::Until { given, .. } => Error::DeadlinePassed { waited: given },
            Patience::Unbounded | Patience::Never => Error::WouldBlock,
        }
    }

    /// Once a send took its message (it counts as sent): how it finishes handing it on. A
    /// deadline no longer applies (the idle timeout does); a call that may not wait leaves
    /// the rest to later calls.
    pub(crate) fn once_taken(self) -> Patience {
        match self {
            Patience::Never => Patience::Never,
            Patience::Unbounded | Patience::Until { .. } => Patience::Unbounded,
        }
    }

    /// Whether busy polling (when configured) may spin before the pause: not for a call that
    /// may not wait.
    pub(crate) fn may_spin(self) -> bool {
        !matches!(self, Patience::Never)
    }
}

/// What a call does instead of finding what it needs ([`Patience::pause`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pause {
    /// Sleep in [`Session::wait`] until this (`None`: a slice).
    Sleep(Option<Instant>),
    /// Arm the readiness descriptor ([`Session::arm_readiness`]) and say
    /// [`Error::WouldBlock`].
    Arm,
    /// The caller's deadline passed: say [`Error::DeadlinePassed`].
    GiveUp,
}

/// What a driver's wait watches ([`Session::wait`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch {
    /// The control channel (never one at end of file).
    pub(crate) control: bool,
    /// The transport's data path.
    pub(crate) data: bool,
    /// Whether the stop flag ends the wait.
    pub(crate) stop: StopFlag,
}

/// Whether a wait honours the caller's stop flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopFlag {
    /// The stop flag ends the wait with [`Error::Interrupted`].
    Honoured,
    /// It does not (a message already counted as sent, Finish: what a Ctrl-C handler runs).
    Ignored,
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// News may have come, the deadline or a slice passed; `control`: the control channel may
    /// be readable.
    Ready {
        /// Whether to read the control channel.
        control: bool,
    },
    /// A client's resume attempt waits for this server session: the driver hands it to the
    /// lifecycle core ([`crate::session_core::lifecycle::Trigger::AttemptArrived`]).
    Resume(Planned),
}

/// What a driver operation that waits came to: done, or a resume attempt arrived (an event the
/// driver hands to the lifecycle, never an error).
#[derive(Debug)]
pub(crate) enum Flow<T> {
    /// The operation finished with this.
    Done(T),
    /// A resume is due that no failure set going: a wait inside it saw [`Woke::Resume`], or
    /// (a client) a path left out is due to be tried again. The driver hands it to the
    /// lifecycle core as a [`Trigger`](crate::session_core::lifecycle::Trigger).
    Resume(Planned),
    /// The caller's [`Patience`] ran out before it was done: nothing was taken or delivered
    /// (the public call says [`Patience::gave_up`]).
    NotReady,
}

/// An ACK timeout exponent as time: 4.096 us x 2^n (0: the queue pair waits forever).
fn ack_timeout_text(n: u8) -> String {
    if n == 0 {
        return "no timeout".to_owned();
    }
    let seconds = 4.096e-6 * f64::from(1u32 << n.min(31));
    if seconds < 1.0 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

pub(super) fn ipv4(ip: IpAddr) -> Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{v6} is IPv6; RoCE v2 discovery needs an IPv4 bootstrap address"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::QpSettings;
    use crate::session_core::handshake::tests::hello;

    fn info(transport: TransportKind, ours: QpSettings, peer: QpSettings) -> SessionInfo {
        let (mut local, mut remote) = (
            hello(Role::Receiver, transport),
            hello(Role::Sender, transport),
        );
        (local.qp, remote.qp) = (ours, peer);
        SessionInfo {
            transport,
            path: PathInfo {
                source: Ipv4Addr::new(10, 0, 0, 1),
                peer: Ipv4Addr::new(10, 0, 0, 2),
                interface: Some("eth1".to_owned()),
                route: None,
                peer_is_local: false,
                is_loopback: false,
            },
            device: None,
            extra_paths: Vec::new(),
            local,
            peer: remote,
            mtu: Some(2048),
            fallback: None,
        }
    }

    fn verbs_qp(tclass: u8, sl: u8) -> QpSettings {
        QpSettings {
            traffic_class: Some(tclass),
            service_level: Some(sl),
            mtu: Some(4096),
            ack_timeout: Some(18),
            retry_count: Some(7),
        }
    }

    /// Issue 35 item 5: the "session established" line shows the queue pair's settings, ours
    /// and the peer's traffic class and service level, and warns when they differ.
    #[test]
    fn the_established_line_shows_both_ends_queue_pair_settings() {
        let same = info(TransportKind::Verbs, verbs_qp(104, 3), verbs_qp(104, 3));
        let line = same.describe();
        assert!(
            line.contains(
                " | mtu 2048 | tclass 104 (dscp 26) peer 104 (dscp 26) | sl 3 peer 3 | \
                 ack-timeout 18 (1.07 s) | retry-count 7"
            ),
            "{line}"
        );
        assert!(same.qp_mismatches().is_empty());
        assert_eq!(
            (same.traffic_class(), same.peer_traffic_class()),
            (Some(104), Some(104))
        );
        assert_eq!(
            (same.ack_timeout(), same.retry_count()),
            (Some(18), Some(7))
        );

        let differ = info(TransportKind::Verbs, verbs_qp(104, 3), verbs_qp(0, 0));
        let warnings = differ.qp_mismatches();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("this end --tclass 104 (DSCP 26), the peer 0 (DSCP 0)"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("this end --sl 3, the peer 0"),
            "{warnings:?}"
        );

        // DOCA says the service level (and a fixed MTU), not the rest.
        let doca_qp = QpSettings {
            service_level: Some(3),
            ..QpSettings::default()
        };
        let doca = info(TransportKind::Doca, doca_qp, doca_qp);
        let line = doca.describe();
        assert!(
            line.contains("| tclass - peer - | sl 3 peer 3 | ack-timeout - | retry-count -"),
            "{line}"
        );
        assert!(doca.qp_mismatches().is_empty(), "unknown is not a mismatch");

        // tcp has no queue pair: nothing about one.
        let tcp = info(
            TransportKind::Tcp,
            QpSettings::default(),
            QpSettings::default(),
        );
        assert!(!tcp.describe().contains("tclass"), "{}", tcp.describe());
        assert_eq!(ack_timeout_text(0), "no timeout");
        assert_eq!(ack_timeout_text(14), "67.109 ms");
    }
}
