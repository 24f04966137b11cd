//! Resuming a broken session: the drivers' half of docs/design.md, "Resuming a session".
//!
//! The rules are the core's ([`ResumeHandshake`], [`Reconnect`], [`Parked`], the sender's and
//! receiver's `begin_resume`/`resume`); this module does the I/O around them:
//! - the client reconnects to the server on the schedule [`Reconnect`] gives and runs a
//!   [`ResumeHandshake`] on each new control connection;
//! - the server's listener hands a connection whose first frame is `Resume{id}` to the session
//!   with that id ([`ResumeRegistry`]); the session answers it while it runs (a live session's
//!   data path may have failed only on the other end) or while it is parked after a break;
//! - both tear their old data path down ([`DataPath::reset_for_resume`]) before taking their
//!   counts, connect the new one with the peer's blob, and hand the agreed counts back to the
//!   driver, which restarts its core from them.
//!
//! Nothing a peer does before it proved the session's secret changes anything: a stranger's
//! attempt on a live session leaves it as it was.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::attempt_queue::{AttemptQueue, Waiting};
use super::{Session, WAIT_SLICE};
use crate::auth::{fresh_nonce, Nonce};
use crate::net::bootstrap;
use crate::net::wait::{remaining, wait_readable};
use crate::net::{ControlChannel, Received};
use crate::proto::{Counts, Hello, Role};
use crate::session_core::resume::{Parked, Reconnect, ReconnectStep, ResumeTicket, SessionId};
use crate::session_core::resume_handshake::{
    ResumeAction, ResumeFailure, ResumeHandshake, ResumeSetup, Resumed, RESUME_BUSY,
    RESUME_NO_SESSION, RESUME_REFUSED,
};
use crate::transport::{RolePath, SetupStep, StagingSlot};
use crate::{Error, Result};

/// The server's sessions that can be resumed, by id: what the listener needs to check an
/// attempt's proof, and where it hands a proven one.
pub(crate) type ResumeRegistry = Arc<Mutex<HashMap<SessionId, Registered>>>;

/// A session in the registry.
#[derive(Debug, Clone)]
pub(crate) struct Registered {
    ticket: ResumeTicket,
    role: Role,
    credits: u32,
    attempts: AttemptQueue<ProvenAttempt>,
}

/// An attempt whose client proved the session's secret, on the listener's thread: the session
/// takes it from its `Prepare`.
#[derive(Debug)]
pub(crate) struct ProvenAttempt {
    control: ControlChannel,
    handshake: Box<ResumeHandshake>,
}

/// A new control connection whose first frame was `Resume{session, nonce}`.
#[derive(Debug)]
pub(crate) struct ResumeAttempt {
    pub(crate) control: ControlChannel,
    pub(crate) nonce: Nonce,
    /// When the listener read it (the unproven client's window starts here).
    pub(crate) since: Instant,
}

/// Answers `attempt` for the session `id` names, on the listener's thread, until the client
/// proved the session's secret (at most
/// [`AUTH_WINDOW`](crate::session_core::handshake::AUTH_WINDOW) for that), then hands it to the
/// session. An unknown id, a wrong proof, a silent or garbage client get "resume refused" or
/// nothing, and the session never sees them: a stranger cannot stall or crowd out the real
/// client's attempts. `deadline` bounds the whole exchange.
pub(crate) fn route_attempt(
    registry: &ResumeRegistry,
    id: &SessionId,
    mut attempt: ResumeAttempt,
    deadline: Instant,
) {
    let peer = attempt.control.peer_addr();
    let entry = lock(registry).get(id).cloned();
    let Some(entry) = entry else {
        log::info!("refused a resume from {peer}: no session with that id");
        attempt.control.reject(RESUME_NO_SESSION);
        return;
    };
    let nonce = match fresh_nonce() {
        Ok(nonce) => nonce,
        Err(e) => {
            log::warn!("cannot answer a resume from {peer}: {}", e.chain());
            return;
        }
    };
    let setup = ResumeSetup {
        ticket: entry.ticket,
        nonce,
        role: entry.role,
        credits: entry.credits,
        deadline,
    };
    let mut handshake = ResumeHandshake::server(setup, attempt.nonce, attempt.since);
    let mut control = attempt.control;
    let proven = loop {
        match handshake.poll_action() {
            Some(ResumeAction::Send(msg)) => {
                if control.send(&msg).is_err() {
                    return;
                }
                continue;
            }
            Some(ResumeAction::Reject(reason)) => {
                control.reject(&reason);
                continue;
            }
            Some(ResumeAction::Prepare) => break true,
            Some(other) => {
                log::warn!("a resume from {peer}: {other:?} before the proof (a bug)");
                return;
            }
            None => {}
        }
        let until = handshake.poll_timeout().unwrap_or_else(Instant::now);
        let step = match control.recv_until(until) {
            Ok(Received::Message(msg)) => handshake.on_message(msg),
            Ok(Received::Closed(_)) => Err(handshake.on_control_closed()),
            Ok(Received::Nothing) => handshake.handle_timeout(Instant::now()),
            Err(Error::Decode(e)) => Err(handshake.on_undecodable(&e.to_string())),
            Err(_) => break false,
        };
        if let Err(failure) = step {
            while let Some(action) = handshake.poll_action() {
                if let ResumeAction::Reject(reason) = action {
                    control.reject(&reason);
                }
            }
            let why = match failure {
                ResumeFailure::Attempt(why) => why,
                ResumeFailure::Session(e) => e.chain(),
                ResumeFailure::NoSession => "it said we have no such session (a bug)".into(),
            };
            log::info!("a resume from {peer} failed before its proof: {why}");
            break false;
        }
    };
    if !proven {
        return;
    }
    let proven = ProvenAttempt {
        control,
        handshake: Box::new(handshake),
    };
    log::debug!("a proven resume from {peer} handed to its session");
    entry.attempts.offer(proven);
}

impl Waiting for ProvenAttempt {
    fn client_gone(&mut self) -> bool {
        self.control.peer_gone()
    }

    fn tell_busy(mut self) {
        self.control.reject(RESUME_BUSY);
    }

    fn tell_refused(mut self) {
        log::warn!(
            "refused a proven resume from {}: its session is gone",
            self.control.peer_addr()
        );
        self.control.reject(RESUME_REFUSED);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A session's entry in the registry, removed when the session ends.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: ResumeRegistry,
    id: SessionId,
    attempts: AttemptQueue<ProvenAttempt>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.registry).remove(&self.id);
        self.attempts.close();
    }
}

/// The sessions of one [`crate::Listener`] that wait for their client to resume, for a server
/// that gives such a session's place to a new client (docs/design.md, "A new client and a
/// parked session"). Clones share the view.
#[derive(Debug, Clone)]
pub struct ParkedSessions {
    registry: ResumeRegistry,
}

impl ParkedSessions {
    pub(crate) fn new(registry: ResumeRegistry) -> Self {
        Self { registry }
    }

    /// How long the session parked longest has waited, with no attempt of its client queued
    /// (`None`: no session is parked).
    pub fn longest_wait(&self, now: Instant) -> Option<Duration> {
        self.parked()
            .into_iter()
            .map(|(since, _)| now.saturating_duration_since(since))
            .max()
    }

    /// Takes over the session parked longest, if it has waited at least `min` with no attempt
    /// of its client queued or in progress: it stops waiting and ends (with
    /// [`Error::TakenOver`]), and its client's later attempts are told that no such session
    /// exists. Returns whether a session was taken over; its place is free once it ended.
    pub fn take_over_longest(&self, min: Duration, now: Instant) -> bool {
        let mut parked = self.parked();
        parked.sort_by_key(|(since, _)| *since);
        parked
            .into_iter()
            .filter(|(since, _)| now.saturating_duration_since(*since) >= min)
            .any(|(since, attempts)| attempts.take_over(since))
    }

    fn parked(&self) -> Vec<(Instant, AttemptQueue<ProvenAttempt>)> {
        let queues: Vec<_> = lock(&self.registry)
            .values()
            .map(|r| r.attempts.clone())
            .collect();
        queues
            .into_iter()
            .filter_map(|q| q.parked_since().map(|since| (since, q)))
            .collect()
    }
}

/// Resumptions of one session so far (in its summary, its JSON and on
/// [`crate::RdmaSink`]/[`crate::RdmaSrc`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumeStats {
    /// How many times the session was resumed after a break.
    pub resumes: u32,
    /// Messages the sender sent again after those resumes (sent before a break, not arrived).
    pub messages_resent: u64,
    /// Time spent resuming (or waiting to), successful or not: no data moved then, so a rate
    /// over the session's time leaves it out.
    pub time_resuming: Duration,
}

/// A live view of a session's [`ResumeStats`] that stays readable after the session object is
/// gone (a sink's `finish` consumes it, and may itself resume).
#[derive(Debug, Clone, Default)]
pub struct ResumeCounters {
    resumes: Arc<AtomicU32>,
    messages_resent: Arc<AtomicU64>,
    micros_resuming: Arc<AtomicU64>,
}

impl ResumeCounters {
    /// The counts now.
    pub fn get(&self) -> ResumeStats {
        ResumeStats {
            resumes: self.resumes.load(Ordering::Relaxed),
            messages_resent: self.messages_resent.load(Ordering::Relaxed),
            time_resuming: Duration::from_micros(self.micros_resuming.load(Ordering::Relaxed)),
        }
    }

    fn count(&self, resent: u64) {
        self.resumes.fetch_add(1, Ordering::Relaxed);
        self.messages_resent.fetch_add(resent, Ordering::Relaxed);
    }

    fn spent(&self, resuming: Duration) {
        let micros = u64::try_from(resuming.as_micros()).unwrap_or(u64::MAX);
        self.micros_resuming.fetch_add(micros, Ordering::Relaxed);
    }
}

/// Which end of the bootstrap connection we are, for resuming.
#[derive(Debug)]
enum Side {
    /// We reconnect to the server.
    Client { server: SocketAddr },
    /// The listener hands us the client's attempts.
    Server {
        attempts: AttemptQueue<ProvenAttempt>,
        /// An attempt that arrived while the session ran.
        pending: Option<Box<ProvenAttempt>>,
        _registration: Registration,
    },
}

/// A session's resumption: its ticket, its time and its side.
#[derive(Debug)]
pub(crate) struct Resumption {
    ticket: ResumeTicket,
    timeout: Duration,
    side: Side,
    pub(crate) counters: ResumeCounters,
    /// The progress count at the first of the latest resumes that made none, and when: a
    /// break that comes back with nothing getting through ends the session after the
    /// resume timeout, as a peer that never comes back does.
    stalled: Option<(u64, Instant)>,
}

/// What a resume gave the driver.
#[derive(Debug)]
pub(crate) struct ResumeOutcome {
    /// The peer's counts and, for a sender, the plan.
    pub(crate) resumed: Resumed,
    /// Our counts, as told to the peer.
    pub(crate) ours: Counts,
}

/// The role core's part in a resume, which the driver's core implements.
pub(crate) trait ResumeCore {
    /// The old data path is down: stop, and say our counts (may be called again after a failed
    /// attempt; the counts do not change then).
    fn begin_resume(&mut self) -> Result<Counts>;
    /// The torn-down path gave back this staging slot.
    fn on_reclaimed(&mut self, slot: StagingSlot) -> Result<()>;
    /// How far the stream got, as this role counts it for a lost peer (a sender: messages
    /// released; a receiver: messages arrived).
    fn progress(&self) -> u64;
    /// Server that found the break itself: whether to close its side of the old control
    /// connection so that the client, which may have seen nothing (on RC only the sending
    /// side sees its QP fail), notices and reconnects. Not while a sender lingers after
    /// Finish: it would take the close for the receiver letting it go.
    fn tell_peer_on_break(&self) -> bool;
}

/// The resume timeout both hellos agree on: the shorter of the two; `None` when either end
/// does not resume.
pub(crate) fn negotiated_timeout(ours: &Hello, peer: &Hello) -> Option<Duration> {
    let ms = ours.resume_timeout_ms.min(peer.resume_timeout_ms);
    (ms > 0).then(|| Duration::from_millis(u64::from(ms)))
}

impl Resumption {
    /// The client's resumption of a session with `server`.
    pub(crate) fn client(ticket: ResumeTicket, timeout: Duration, server: SocketAddr) -> Self {
        Self {
            ticket,
            timeout,
            side: Side::Client { server },
            counters: ResumeCounters::default(),
            stalled: None,
        }
    }

    /// The server's resumption: registers the session's id so that the listener hands it the
    /// client's attempts.
    pub(crate) fn server(
        ticket: ResumeTicket,
        timeout: Duration,
        registry: ResumeRegistry,
        role: Role,
        credits: u32,
    ) -> Self {
        let attempts = AttemptQueue::new();
        let id = *ticket.id();
        lock(&registry).insert(
            id,
            Registered {
                ticket: ticket.clone(),
                role,
                credits,
                attempts: attempts.clone(),
            },
        );
        Self {
            ticket,
            timeout,
            side: Side::Server {
                attempts: attempts.clone(),
                pending: None,
                _registration: Registration {
                    registry,
                    id,
                    attempts,
                },
            },
            counters: ResumeCounters::default(),
            stalled: None,
        }
    }

    /// Server: whether a client's attempt arrived while the session runs (it is kept for
    /// [`Session::resume`]).
    pub(crate) fn attempt_arrived(&mut self) -> bool {
        match &mut self.side {
            Side::Client { .. } => false,
            Side::Server {
                attempts, pending, ..
            } => {
                if pending.is_none() {
                    *pending = attempts.take(None).map(Box::new);
                }
                pending.is_some()
            }
        }
    }
}

/// Whether an error is a break that a resume may repair: a lost peer, a failed control
/// connection or data path (a reset or closed connection, a QP flushed or out of retries, a
/// DOCA connection that failed). A Reject, a protocol violation, a local refusal or shortage
/// (a message too long for the peer's slot, DOCA's lasting backpressure), the stop flag and
/// our own bugs are not: resuming would meet them again.
pub(crate) fn is_break(e: &Error) -> bool {
    match e {
        Error::PeerLost { .. }
        | Error::ControlIo(_)
        | Error::TransportIo { .. }
        | Error::TransportClosed { .. }
        | Error::Verbs { .. } => true,
        // Flushed (the QP went to the error state), transport or RNR retries exhausted.
        Error::VerbsCompletion { status, .. } => {
            ["(5)", "(12)", "(13)"].iter().any(|s| status.ends_with(s))
        }
        other => is_doca_break(other),
    }
}

#[cfg(doca_transport)]
fn is_doca_break(e: &Error) -> bool {
    matches!(e, Error::Doca { code, .. } if [
        "DOCA_ERROR_IO_FAILED",
        "DOCA_ERROR_CONNECTION_RESET",
        "DOCA_ERROR_CONNECTION_ABORTED",
        "DOCA_ERROR_NOT_CONNECTED",
    ]
    .iter()
    .any(|failed| code.starts_with(failed)))
}

#[cfg(not(doca_transport))]
fn is_doca_break(_: &Error) -> bool {
    false
}

/// How one attempt ended.
enum AttemptEnd {
    Resumed(ResumeOutcome),
    /// The server has no session with our id: nothing can resume it.
    NoSession,
    /// Failed; with whether our old path was torn down in it (server: only after the proof).
    Failed {
        why: String,
        torn_down: bool,
    },
}

impl<P: RolePath + ?Sized> Session<P> {
    /// Whether this session resumes after a break.
    pub(crate) fn resumes(&self) -> bool {
        self.resume.is_some()
    }

    /// Resumption so far, as a handle that outlives the session.
    pub(crate) fn resume_counters(&self) -> ResumeCounters {
        self.resume
            .as_ref()
            .map(|r| r.counters.clone())
            .unwrap_or_default()
    }

    /// After `cause` broke the session (or a client's attempt arrived while it ran): resumes
    /// it. `Ok(Some)`: resumed on a new data path and control connection, with the counts the
    /// driver restarts its core from. `Ok(None)`: only an attempt arrived and failed before
    /// the client proved the secret; nothing changed, carry on. `Err`: the session cannot
    /// resume (timeout, a proven peer's Reject or violation, the stop flag): `cause`, or what
    /// ended it.
    pub(crate) fn resume(
        &mut self,
        cause: Error,
        core: &mut dyn ResumeCore,
    ) -> Result<Option<ResumeOutcome>> {
        let Some(resumption) = self.resume.as_ref() else {
            return Err(cause);
        };
        let live = matches!(
            &resumption.side,
            Side::Server {
                pending: Some(_),
                ..
            }
        ) && is_attempt_marker(&cause);
        let progress = core.progress();
        let timeout = resumption.timeout;
        let server_side = matches!(resumption.side, Side::Server { .. });
        let client_of = match resumption.side {
            Side::Client { server } => Some(server),
            Side::Server { .. } => None,
        };
        if !live {
            log::warn!(
                "the session broke ({}); resuming (for up to {:.1} s)",
                cause.chain(),
                timeout.as_secs_f64()
            );
            if let Some(r) = self.resume.as_mut() {
                match r.stalled {
                    Some((count, since)) if count == progress && since.elapsed() >= timeout => {
                        let why = "it broke again with no message through since a resume";
                        return Err(gave_up(cause, progress, 0, timeout, Some(why.into())));
                    }
                    Some((count, _)) if count == progress => {}
                    _ => r.stalled = Some((progress, Instant::now())),
                }
            }
            if server_side && core.tell_peer_on_break() {
                self.control.shutdown_write();
            }
        }
        let started = Instant::now();
        let outcome = match client_of {
            Some(server) => self.resume_as_client(server, cause, core, started, progress),
            None => self.resume_as_server(cause, core, started, live, progress),
        };
        if let Some(r) = self.resume.as_ref() {
            r.counters.spent(started.elapsed());
        }
        let outcome = outcome?;
        let Some(outcome) = outcome else {
            return Ok(None);
        };
        if let Some(r) = self.resume.as_ref() {
            r.counters.count(resent(&outcome, P::ROLE));
        }
        log::info!(
            "session resumed in {:.2} s: the receiver had {} message(s), {} sent again",
            started.elapsed().as_secs_f64(),
            receiver_count(&outcome, P::ROLE),
            resent(&outcome, P::ROLE)
        );
        Ok(Some(outcome))
    }

    fn resume_as_client(
        &mut self,
        server: SocketAddr,
        cause: Error,
        core: &mut dyn ResumeCore,
        started: Instant,
        progress: u64,
    ) -> Result<Option<ResumeOutcome>> {
        let timeout = self.resume_timeout();
        let mut reconnect = Reconnect::new(started, timeout);
        let mut last_failure = None;
        loop {
            if self.config.stopped() {
                return Err(Error::Interrupted);
            }
            match reconnect.step(Instant::now()) {
                ReconnectStep::GiveUp => {
                    let attempts = reconnect.attempts();
                    return Err(gave_up(cause, progress, attempts, timeout, last_failure));
                }
                ReconnectStep::Wait { until } => {
                    let left = remaining(until).unwrap_or_default();
                    std::thread::sleep(left.min(WAIT_SLICE));
                }
                ReconnectStep::Attempt { attempt_deadline } => {
                    match self.client_attempt(server, attempt_deadline, core) {
                        Ok(AttemptEnd::Resumed(outcome)) => return Ok(Some(outcome)),
                        Ok(AttemptEnd::NoSession) => {
                            return Err(no_session(cause, server));
                        }
                        Ok(AttemptEnd::Failed { why, .. }) => {
                            log::info!(
                                "resume attempt {} to {server} failed: {why}",
                                reconnect.attempts()
                            );
                            last_failure = Some(why);
                            reconnect.on_attempt_failed(Instant::now());
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    /// One client attempt: tear down, count, connect, run the handshake.
    fn client_attempt(
        &mut self,
        server: SocketAddr,
        deadline: Instant,
        core: &mut dyn ResumeCore,
    ) -> Result<AttemptEnd> {
        let counts = match self.tear_down(core) {
            Ok(counts) => counts,
            Err(e) => {
                return attempt_or_session(e).map(|why| AttemptEnd::Failed {
                    why,
                    torn_down: true,
                })
            }
        };
        let left = remaining(deadline).unwrap_or(Duration::from_millis(1));
        let stream = match bootstrap::connect(server, left, &|| self.config.stopped()) {
            Ok(stream) => stream,
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(e) => {
                return Ok(AttemptEnd::Failed {
                    why: e.chain(),
                    torn_down: true,
                })
            }
        };
        let mut control = ControlChannel::new(stream)?;
        let setup = self.resume_setup(deadline)?;
        let blob = self.transport.local_blob();
        let mut handshake = ResumeHandshake::client(setup, counts, blob);
        self.drive_attempt(&mut control, &mut handshake, core, Some(counts), false)
    }

    fn resume_as_server(
        &mut self,
        cause: Error,
        core: &mut dyn ResumeCore,
        started: Instant,
        live: bool,
        progress: u64,
    ) -> Result<Option<ResumeOutcome>> {
        let timeout = self.resume_timeout();
        let parked = Parked::new(started, timeout);
        let mut broken = !live;
        let mut last_failure = None;
        let mut attempts = 0u32;
        loop {
            if self.config.stopped() {
                return Err(Error::Interrupted);
            }
            let Some(attempt) = self.next_attempt(parked, started)? else {
                if self.taken_over() {
                    return Err(Error::TakenOver {
                        messages: progress,
                        waited: started.elapsed().as_secs_f64(),
                    });
                }
                return Err(gave_up(cause, progress, attempts, timeout, last_failure));
            };
            attempts += 1;
            match self.server_attempt(attempt, core)? {
                AttemptEnd::Resumed(outcome) => return Ok(Some(outcome)),
                AttemptEnd::NoSession => {
                    return Err(Error::Internal(
                        "a client's attempt said it has no session".into(),
                    ))
                }
                AttemptEnd::Failed { why, torn_down } => {
                    log::info!("a resume attempt failed: {why}");
                    broken |= torn_down;
                    if !broken {
                        // A stranger (or a client that could not prove the secret) on a live
                        // session: nothing changed.
                        return Ok(None);
                    }
                    last_failure = Some(why);
                }
            }
        }
    }

    /// Server: whether a new client took this parked session's place.
    fn taken_over(&self) -> bool {
        matches!(
            self.resume.as_ref().map(|r| &r.side),
            Some(Side::Server { attempts, .. }) if attempts.taken_over()
        )
    }

    /// The next attempt for this server session: one that arrived while it ran, else one the
    /// listener hands over before the parking ends (`None` then, or once a new client took
    /// its place). While it waits with none queued the session is parked since `broke`.
    fn next_attempt(&mut self, parked: Parked, broke: Instant) -> Result<Option<ProvenAttempt>> {
        let Some(Side::Server {
            attempts, pending, ..
        }) = self.resume.as_mut().map(|r| &mut r.side)
        else {
            return Err(Error::Internal(
                "a client waiting for resume attempts".into(),
            ));
        };
        if let Some(attempt) = pending.take() {
            return Ok(Some(*attempt));
        }
        let attempts = attempts.clone();
        attempts.set_parked(Some(broke));
        let next = loop {
            if self.config.stopped() {
                break Err(Error::Interrupted);
            }
            let Some(left) = remaining(parked.poll_timeout()) else {
                break Ok(None);
            };
            match attempts.take(Some(Instant::now() + left.min(WAIT_SLICE))) {
                Some(attempt) if !parked.admits(Instant::now()) => {
                    attempt.tell_refused();
                    break Ok(None);
                }
                Some(attempt) => break Ok(Some(attempt)),
                None if attempts.taken_over() => break Ok(None),
                None => {}
            }
        };
        attempts.set_parked(None);
        next
    }

    /// A proven attempt: the session's side, from the `Prepare` the client's proof led to.
    fn server_attempt(
        &mut self,
        mut attempt: ProvenAttempt,
        core: &mut dyn ResumeCore,
    ) -> Result<AttemptEnd> {
        self.drive_attempt(
            &mut attempt.control,
            &mut attempt.handshake,
            core,
            None,
            true,
        )
    }

    fn resume_timeout(&self) -> Duration {
        self.resume.as_ref().map_or(Duration::ZERO, |r| r.timeout)
    }

    fn resume_setup(&self, deadline: Instant) -> Result<ResumeSetup> {
        let ticket = self
            .resume
            .as_ref()
            .map(|r| r.ticket.clone())
            .ok_or_else(|| Error::Internal("resuming without a ticket".into()))?;
        Ok(ResumeSetup {
            ticket,
            nonce: fresh_nonce()?,
            role: P::ROLE,
            credits: u32::from(self.info.credits()),
            deadline,
        })
    }

    /// Tears the old data path down (again, after a failed attempt: a new blob) and takes our
    /// counts.
    fn tear_down(&mut self, core: &mut dyn ResumeCore) -> Result<Counts> {
        let mut reclaimed = Vec::new();
        self.transport.reset_for_resume(&mut reclaimed)?;
        for slot in reclaimed {
            core.on_reclaimed(slot)?;
        }
        core.begin_resume()
    }

    /// Runs one attempt's handshake on `control` to its end. On success the session's control
    /// channel is the attempt's.
    fn drive_attempt(
        &mut self,
        control: &mut ControlChannel,
        handshake: &mut ResumeHandshake,
        core: &mut dyn ResumeCore,
        client_counts: Option<Counts>,
        prepare_first: bool,
    ) -> Result<AttemptEnd> {
        let mut ours = client_counts;
        let mut torn_down = client_counts.is_some();
        let mut prepare = prepare_first;
        let result = loop {
            if std::mem::take(&mut prepare) {
                if let Err(failure) = self.prepare(handshake, core, &mut ours) {
                    break Err(failure);
                }
            }
            if let Err(failure) = self.run_resume_actions(control, handshake, core, &mut ours) {
                break Err(failure);
            }
            if let Some(ours) = ours.filter(|_| handshake.resumed().is_some()) {
                break Ok(ours);
            }
            if ours.is_some() {
                torn_down = true;
            }
            if self.config.stopped() {
                return Err(Error::Interrupted);
            }
            let slice_end = handshake.poll_timeout().map_or_else(
                || Instant::now() + WAIT_SLICE,
                |d| d.min(Instant::now() + WAIT_SLICE),
            );
            let got = match control.recv_until(slice_end) {
                Ok(Received::Message(msg)) => handshake.on_message(msg),
                Ok(Received::Closed(_)) => Err(handshake.on_control_closed()),
                Ok(Received::Nothing) => handshake.handle_timeout(Instant::now()),
                Err(Error::Decode(e)) => Err(handshake.on_undecodable(&e.to_string())),
                Err(e) => Err(ResumeFailure::Attempt(e.chain())),
            };
            if let Err(failure) = got {
                break Err(failure);
            }
        };
        match result {
            Ok(ours) => {
                let resumed = handshake
                    .resumed()
                    .cloned()
                    .ok_or_else(|| Error::Internal("resumed without counts".into()))?;
                std::mem::swap(&mut self.control, control);
                Ok(AttemptEnd::Resumed(ResumeOutcome { resumed, ours }))
            }
            Err(failure) => {
                // The Reject the core queued, if any.
                while let Some(action) = handshake.poll_action() {
                    if let ResumeAction::Reject(reason) = action {
                        control.reject(&reason);
                    }
                }
                match failure {
                    ResumeFailure::Attempt(why) => Ok(AttemptEnd::Failed {
                        why,
                        torn_down: torn_down || ours.is_some(),
                    }),
                    ResumeFailure::Session(e) => Err(e),
                    ResumeFailure::NoSession => Ok(AttemptEnd::NoSession),
                }
            }
        }
    }

    /// Carries out the resume handshake's actions.
    fn run_resume_actions(
        &mut self,
        control: &mut ControlChannel,
        handshake: &mut ResumeHandshake,
        core: &mut dyn ResumeCore,
        ours: &mut Option<Counts>,
    ) -> std::result::Result<(), ResumeFailure> {
        while let Some(action) = handshake.poll_action() {
            match action {
                ResumeAction::Send(msg) => {
                    if let Err(e) = control.send(&msg) {
                        return Err(ResumeFailure::Attempt(format!(
                            "sending {}: {}",
                            msg.name(),
                            e.chain()
                        )));
                    }
                }
                ResumeAction::Reject(reason) => {
                    control.reject(&reason);
                }
                ResumeAction::Prepare => self.prepare(handshake, core, ours)?,
                ResumeAction::ConnectDataPath { peer_blob } => {
                    self.connect_resumed(control, handshake, &peer_blob)?;
                }
                // Our transport kept its posted receives (reset_for_resume's contract), and the
                // driver posts a released slot at once: nothing is left to post.
                ResumeAction::PostSlots => {}
            }
        }
        Ok(())
    }

    /// Server, once the client proved the secret: tears our old data path down, takes our
    /// counts, and prepares the new data path.
    fn prepare(
        &mut self,
        handshake: &mut ResumeHandshake,
        core: &mut dyn ResumeCore,
        ours: &mut Option<Counts>,
    ) -> std::result::Result<(), ResumeFailure> {
        let counts = self.tear_down(core).map_err(|e| {
            attempt_or_session(e).map_or_else(ResumeFailure::Session, ResumeFailure::Attempt)
        })?;
        *ours = Some(counts);
        let blob = self.transport.local_blob();
        handshake.on_prepared(counts, blob)
    }

    /// Connects the new data path, watching the control connection between the steps.
    fn connect_resumed(
        &mut self,
        control: &mut ControlChannel,
        handshake: &mut ResumeHandshake,
        peer_blob: &[u8],
    ) -> std::result::Result<(), ResumeFailure> {
        let deadline = handshake.poll_timeout().unwrap_or_else(Instant::now);
        loop {
            match self.transport.connect(peer_blob, deadline) {
                Ok(SetupStep::Done) => return handshake.on_connected(self.transport.early_data()),
                Ok(SetupStep::Waiting) => {}
                Err(e) => return Err(handshake.on_setup_failed(&e.chain())),
            }
            let Some(left) = remaining(deadline) else {
                return Err(handshake.on_setup_failed("the attempt's deadline passed"));
            };
            // Once Ready came, what follows on the control connection (credits) is the
            // session's: it stays there until the session reads it.
            let watch_control = !handshake.ready_seen();
            let ready = {
                let mut fds = Vec::with_capacity(4);
                if watch_control {
                    fds.push(control.fd());
                }
                self.transport.setup_fds(&mut fds);
                wait_readable(&fds, left.min(WAIT_SLICE))
                    .map_err(|e| ResumeFailure::Attempt(e.chain()))?
            };
            if watch_control && ready & 1 != 0 {
                // The peer spoke (Ready on tcp may come before our side finished), or closed.
                match control.try_recv() {
                    Ok(Received::Message(msg)) => handshake.on_message(msg)?,
                    Ok(Received::Closed(_)) => return Err(handshake.on_control_closed()),
                    Ok(Received::Nothing) => {}
                    Err(Error::Decode(e)) => return Err(handshake.on_undecodable(&e.to_string())),
                    Err(e) => return Err(ResumeFailure::Attempt(e.chain())),
                }
            }
            if self.config.stopped() {
                return Err(ResumeFailure::Session(Error::Interrupted));
            }
        }
    }
}

/// The error that marks a client's attempt arriving at a running server session.
pub(crate) fn attempt_marker() -> Error {
    Error::PeerLost {
        reason: ATTEMPT_MARKER.to_owned(),
        messages: 0,
        cause: None,
    }
}

const ATTEMPT_MARKER: &str = "the client is resuming the session";

fn is_attempt_marker(e: &Error) -> bool {
    matches!(e, Error::PeerLost { reason, .. } if reason == ATTEMPT_MARKER)
}

/// The resume timeout passed: the break's own error, a lost peer's with what the attempts
/// saw (`progress`: the count, where the break itself had none).
fn gave_up(
    cause: Error,
    progress: u64,
    attempts: u32,
    timeout: Duration,
    last: Option<String>,
) -> Error {
    let detail = format!(
        "this end gave up: not resumed within {:.1} s, the resume timeout ({attempts} attempt(s){})",
        timeout.as_secs_f64(),
        last.map(|l| format!("; the last: {l}")).unwrap_or_default()
    );
    match cause {
        Error::PeerLost { reason, .. } if reason == ATTEMPT_MARKER => {
            log::warn!("{detail}");
            Error::PeerLost {
                reason: format!("a client's resume failed; {detail}"),
                messages: progress,
                cause: None,
            }
        }
        other => lost_for_good(other, &detail),
    }
}

/// The session ends as lost: the server answered that it has no session with our id.
fn no_session(cause: Error, server: SocketAddr) -> Error {
    let detail = format!(
        "not resuming: {server} has no session with our id (it restarted, or the session ended \
or gave its place to a new client)"
    );
    lost_for_good(cause, &detail)
}

/// The break `cause` ends the session: logs `detail` and adds it to a lost peer's reason.
fn lost_for_good(cause: Error, detail: &str) -> Error {
    log::warn!("{detail}");
    match cause {
        Error::PeerLost {
            reason,
            messages,
            cause,
        } => Error::PeerLost {
            reason: format!("{reason}; {detail}"),
            messages,
            cause,
        },
        // A failed data path keeps its own error (and exit status); the log says the rest.
        other => other,
    }
}

/// A failure to prepare a new data path: the transport's (this attempt failed: why) or our
/// own bug (the session ends).
fn attempt_or_session(e: Error) -> Result<String> {
    match e {
        Error::Internal(_) | Error::Closed => Err(e),
        other => Ok(format!("preparing the new data path: {}", other.chain())),
    }
}

/// Messages the sender sends again after this resume.
fn resent(outcome: &ResumeOutcome, role: Role) -> u64 {
    match role {
        Role::Sender => outcome
            .resumed
            .plan
            .as_ref()
            .map_or(0, |p| p.resend.end - p.resend.start),
        Role::Receiver => outcome
            .resumed
            .peer
            .messages
            .saturating_sub(outcome.ours.messages),
    }
}

/// The receiver's count of arrived messages at the resume.
fn receiver_count(outcome: &ResumeOutcome, role: Role) -> u64 {
    match role {
        Role::Sender => outcome.resumed.peer.messages,
        Role::Receiver => outcome.ours.messages,
    }
}

/// Whether an attempt is waiting for this (server) session; used by waits.
pub(crate) fn poll_attempt(resume: &mut Option<Resumption>) -> bool {
    resume.as_mut().is_some_and(Resumption::attempt_arrived)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Message;
    use crate::ProtocolViolation;

    fn completion(status: &str) -> Error {
        Error::VerbsCompletion {
            op: "send",
            status: status.into(),
            hint: None,
        }
    }

    #[test]
    fn lost_peers_and_failed_paths_are_breaks_refusals_violations_and_our_bugs_are_not() {
        for e in [
            Error::PeerLost {
                reason: "control connection reset".into(),
                messages: 3,
                cause: None,
            },
            Error::TransportClosed { transport: "tcp" },
            completion("work request flushed (5)"),
            completion("transport retry counter exceeded (12)"),
        ] {
            assert!(is_break(&e), "{e}");
        }
        for e in [
            Error::Rejected("the receiver closed".into()),
            Error::Protocol(ProtocolViolation::DataBeforeReady),
            Error::Internal("a bug".into()),
            Error::Interrupted,
            completion("local length error (1)"),
            completion("remote invalid request (9)"),
        ] {
            assert!(!is_break(&e), "{e}");
        }
    }

    /// A client of the listener's answer to a Resume: sends Resume, reads the challenge,
    /// answers with `proof_with`'s proof (the right ticket or another), returns what the
    /// server said next and whether the session got the attempt.
    fn attempt_with(proof_with: &ResumeTicket, ticket: &ResumeTicket) -> (Message, bool) {
        use std::io::Write;
        let registry = ResumeRegistry::default();
        let session = AttemptQueue::new();
        lock(&registry).insert(
            *ticket.id(),
            Registered {
                ticket: ticket.clone(),
                role: Role::Receiver,
                credits: 2,
                attempts: session.clone(),
            },
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_end, _) = listener.accept().unwrap();
        let client_nonce = [3; 32];
        let id = *ticket.id();
        let routed = std::thread::spawn(move || {
            let attempt = ResumeAttempt {
                control: ControlChannel::new(server_end).unwrap(),
                nonce: client_nonce,
                since: Instant::now(),
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            route_attempt(&registry, &id, attempt, deadline);
            session.take(None).is_some()
        });
        let mut ours = ControlChannel::new(client.try_clone().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let Ok(Received::Message(Message::ResumeChallenge { nonce, .. })) =
            ours.recv_until(deadline)
        else {
            panic!("no challenge");
        };
        let proof = Message::ResumeProof {
            proof: proof_with.client_proof(&client_nonce, &nonce),
            counts: Counts {
                messages: 0,
                released: 0,
            },
            blob: vec![],
        };
        client
            .write_all(&crate::proto::encode_frame(&proof))
            .unwrap();
        let handed = routed.join().unwrap();
        let next = match ours.recv_until(Instant::now() + Duration::from_millis(300)) {
            Ok(Received::Message(msg)) => msg,
            other => Message::reject(&format!("nothing: {other:?}")),
        };
        (next, handed)
    }

    #[test]
    fn only_a_client_that_proves_the_secret_reaches_the_session() {
        let ticket = ResumeTicket::random().unwrap();
        let stranger = ResumeTicket::from_parts(ticket.id(), &[9; 32]).unwrap();
        let (answer, handed) = attempt_with(&stranger, &ticket);
        assert_eq!(answer, Message::reject(RESUME_REFUSED));
        assert!(
            !handed,
            "a stranger who knows the id never reaches the session"
        );
        let (_, handed) = attempt_with(&ticket, &ticket);
        assert!(handed, "the real client's proven attempt is handed over");
    }

    #[test]
    fn giving_up_keeps_the_breaks_count_and_says_why() {
        let lost = Error::PeerLost {
            reason: "control connection reset".into(),
            messages: 7,
            cause: None,
        };
        let e = gave_up(lost, 9, 3, Duration::from_secs(10), Some("refused".into()));
        let text = e.to_string();
        assert!(
            matches!(e, Error::PeerLost { messages: 7, .. })
                && text.contains(
                    "this end gave up: not resumed within 10.0 s, the resume timeout (3 attempt(s); \
the last: refused)"
                ),
            "{text}"
        );
        let marker = gave_up(attempt_marker(), 9, 1, Duration::from_secs(10), None);
        assert!(
            matches!(marker, Error::PeerLost { messages: 9, .. }),
            "a failed client resume counts what arrived: {marker}"
        );
    }
}
