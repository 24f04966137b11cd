//! Resuming a broken session: the drivers' half of docs/design.md, "Resuming a session".
//!
//! The rules are the core's: whether to resume, the schedule and when to give up
//! ([`Lifecycle`]), the resume handshake ([`ResumeHandshake`]), the sender's and receiver's
//! `begin_resume`/`resume`. This module carries out the lifecycle's steps ([`LifeStep`]) and
//! reports back how each attempt ended:
//! - the client reconnects to the server when the lifecycle says and runs a
//!   [`ResumeHandshake`] on each new control connection;
//! - the server takes the attempts the listener hands over (`listener::resume_registry`),
//!   one that arrived while it ran first;
//! - both tear their old data path down ([`DataPath::reset_for_resume`]) before taking their
//!   counts, connect the new one with the peer's blob (the one connect loop,
//!   `session::connect`), and hand the agreed counts back to the driver, which restarts its
//!   core from them.
//!
//! Nothing a peer does before it proved the session's secret changes anything: a stranger's
//! attempt on a live session leaves it as it was.
//!
//! [`DataPath::reset_for_resume`]: crate::transport::DataPath::reset_for_resume

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connect::{connect_data_path, Connecting};
use super::path_probe::Probe;
use super::{sleep_toward, slice_end, Session};
use crate::auth::fresh_nonce;
use crate::listener::attempt_queue::Waiting;
use crate::listener::resume_registry::{register, ProvenAttempt, Registration, ResumeRegistry};
use crate::net::bootstrap;
use crate::net::wait::remaining;
use crate::net::{ControlChannel, Received};
use crate::proto::{Counts, Hello, Role};
use crate::session_core::lifecycle::{
    AfterAttempt, End, LifeStep, Lifecycle, OldControl, OldPath, Trigger,
};
use crate::session_core::resume::ResumeTicket;
use crate::session_core::resume_handshake::{
    ResumeAction, ResumeFailure, ResumeHandshake, ResumeSetup, Resumed,
};
use crate::transport::striped::parking::PathEvents;
use crate::transport::{RolePath, StagingSlot};
use crate::{Config, Error, Result};

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
    /// Paths a resume left out after one of their queue pairs failed (`--paths`: the session
    /// went on over the others).
    pub paths_lost: u32,
    /// Paths left out that a later resume took back.
    pub paths_rebuilt: u32,
}

/// A live view of a session's [`ResumeStats`] that stays readable after the session object is
/// gone (a sink's `finish` consumes it, and may itself resume).
#[derive(Debug, Clone, Default)]
pub struct ResumeCounters {
    resumes: Arc<AtomicU32>,
    messages_resent: Arc<AtomicU64>,
    micros_resuming: Arc<AtomicU64>,
    paths_lost: Arc<AtomicU32>,
    paths_rebuilt: Arc<AtomicU32>,
}

impl ResumeCounters {
    /// The counts now.
    pub fn get(&self) -> ResumeStats {
        ResumeStats {
            resumes: self.resumes.load(Ordering::Relaxed),
            messages_resent: self.messages_resent.load(Ordering::Relaxed),
            time_resuming: Duration::from_micros(self.micros_resuming.load(Ordering::Relaxed)),
            paths_lost: self.paths_lost.load(Ordering::Relaxed),
            paths_rebuilt: self.paths_rebuilt.load(Ordering::Relaxed),
        }
    }

    fn paths(&self, events: PathEvents) {
        self.paths_lost.fetch_add(events.lost, Ordering::Relaxed);
        self.paths_rebuilt
            .fetch_add(events.rebuilt, Ordering::Relaxed);
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
    Client {
        server: SocketAddr,
        /// Whether a path left out is back, asked before resuming for it.
        probe: Option<Probe>,
    },
    /// The listener hands us the client's attempts.
    Server {
        /// In the listener's registry while the session lives; its attempts arrive here.
        registration: Registration,
        /// An attempt that arrived while the session ran.
        pending: Option<Box<ProvenAttempt>>,
    },
}

/// A session's resumption: its ticket, its side and its lifecycle.
#[derive(Debug)]
pub(crate) struct Resumption {
    ticket: ResumeTicket,
    side: Side,
    pub(crate) counters: ResumeCounters,
    /// Whether and how the session resumes after a break, and when it gives up (the core's).
    life: Lifecycle,
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
    /// Server that found the break itself: what to do with the old control connection
    /// ([`OldControl`]).
    fn old_control_on_break(&self) -> OldControl;
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
            side: Side::Client {
                server,
                probe: None,
            },
            counters: ResumeCounters::default(),
            life: Lifecycle::new(End::Client, timeout),
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
        let registration = register(&registry, &ticket, role, credits);
        Self {
            ticket,
            life: Lifecycle::new(End::Server, timeout),
            side: Side::Server {
                registration,
                pending: None,
            },
            counters: ResumeCounters::default(),
        }
    }

    /// The client's: the server's bootstrap address and the path probe under way (`None`
    /// on the server).
    pub(crate) fn client_probe(&mut self) -> Option<(SocketAddr, &mut Option<Probe>)> {
        match &mut self.side {
            Side::Client { server, probe } => Some((*server, probe)),
            Side::Server { .. } => None,
        }
    }

    /// The client's path probe under way.
    pub(crate) fn probe(&self) -> Option<&Probe> {
        match &self.side {
            Side::Client { probe, .. } => probe.as_ref(),
            Side::Server { .. } => None,
        }
    }

    /// Whether we are the server's end (a client's attempts come to us through the listener).
    pub(crate) fn is_server(&self) -> bool {
        matches!(self.side, Side::Server { .. })
    }

    /// Server: whether a client's attempt arrived while the session runs (it is kept for
    /// [`Session::resume`]).
    pub(crate) fn attempt_arrived(&mut self) -> bool {
        match &mut self.side {
            Side::Client { .. } => false,
            Side::Server {
                registration,
                pending,
            } => {
                if pending.is_none() {
                    *pending = registration.attempts().take(None).map(Box::new);
                }
                pending.is_some()
            }
        }
    }

    /// Server: marks the session parked since `since` (a new client may take its place), or
    /// no longer parked.
    fn set_parked(&self, since: Option<Instant>) {
        if let Side::Server { registration, .. } = &self.side {
            registration.attempts().set_parked(since);
        }
    }

    /// Server: the next attempt, one that arrived while the session ran or one the listener
    /// hands over before `until` (waiting a slice at most); `None` when none came. While it
    /// waits the session is parked; a new client taking its place ends the resume; an attempt
    /// the lifecycle finds too late is refused.
    fn take_attempt(&mut self, until: Instant) -> Option<ProvenAttempt> {
        let Side::Server {
            registration,
            pending,
        } = &mut self.side
        else {
            return None;
        };
        let attempts = registration.attempts();
        let life = &mut self.life;
        let attempt = match pending.take() {
            Some(attempt) => *attempt,
            None => {
                attempts.set_parked(life.resuming_since());
                let slice_end = slice_end(Some(until));
                match attempts.take(Some(slice_end)) {
                    Some(attempt) => attempt,
                    None => {
                        if attempts.taken_over() {
                            life.on_taken_over(Instant::now());
                        }
                        return None;
                    }
                }
            }
        };
        attempts.set_parked(None);
        if life.on_attempt_taken(Instant::now()) {
            Some(attempt)
        } else {
            attempt.tell_refused();
            None
        }
    }
}

/// Where `drive_attempt` starts an attempt.
enum AttemptStart {
    /// Client: our old data path is torn down already, leaving these counts.
    TornDown(Counts),
    /// Server: the client proved the secret; tear our old path down and prepare first.
    PrepareFirst,
}

/// How one attempt ended.
enum AttemptEnd {
    Resumed(ResumeOutcome),
    /// The server has no session with our id: nothing can resume it.
    NoSession,
    /// Failed; with what became of our old path in it (a server tears it down only after the
    /// proof).
    Failed {
        why: String,
        old_path: OldPath,
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

    /// After `trigger` (a failure, or a client's attempt that arrived while the session ran):
    /// resumes it as the lifecycle core decides. `Ok(Some)`: resumed on a new data path and
    /// control connection, with the counts the driver restarts its core from. `Ok(None)`: only
    /// an attempt arrived and failed before the client proved the secret; nothing changed,
    /// carry on. `Err`: the session does not resume (not a break, the timeout, a proven peer's
    /// Reject or violation, the stop flag): the error it ends with.
    pub(crate) fn resume(
        &mut self,
        trigger: Trigger,
        core: &mut dyn ResumeCore,
    ) -> Result<Option<ResumeOutcome>> {
        // Out of the session while it resumes (put back whatever the outcome): the steps below
        // use both, and nothing in them looks for a resume attempt.
        let Some(mut resumption) = self.resume.take() else {
            return Err(match trigger {
                Trigger::Failed(e) => e,
                Trigger::AttemptArrived => {
                    Error::Internal("an attempt for a session that does not resume".into())
                }
                Trigger::RetryPaths => {
                    Error::Internal("a path retry for a session that does not resume".into())
                }
            });
        };
        // A probe under way asked about the data path this resume replaces.
        if let Some((_, probe)) = resumption.client_probe() {
            *probe = None;
        }
        if matches!(trigger, Trigger::AttemptArrived) {
            // The client tore its end down first: our lanes' errors since are not failures.
            self.transport.forget_path_failures();
        }
        let started = Instant::now();
        let outcome = resumption
            .life
            .on_trigger(
                trigger,
                core.progress(),
                core.old_control_on_break(),
                started,
            )
            .and_then(|()| self.run_resume(&mut resumption, core));
        resumption.set_parked(None);
        resumption.counters.spent(started.elapsed());
        let counters = resumption.counters.clone();
        self.resume = Some(resumption);
        let Some(outcome) = outcome? else {
            return Ok(None);
        };
        counters.count(resent(&outcome, P::ROLE));
        counters.paths(self.transport.take_path_events());
        log::info!(
            "session resumed in {:.2} s: the receiver had {} message(s), {} sent again",
            started.elapsed().as_secs_f64(),
            receiver_count(&outcome, P::ROLE),
            resent(&outcome, P::ROLE)
        );
        Ok(Some(outcome))
    }

    /// Carries out the lifecycle's steps until the session resumed, carries on, or gave up.
    fn run_resume(
        &mut self,
        resumption: &mut Resumption,
        core: &mut dyn ResumeCore,
    ) -> Result<Option<ResumeOutcome>> {
        loop {
            if self.config.stopped() {
                return Err(Error::Interrupted);
            }
            let now = Instant::now();
            let server = match resumption.side {
                Side::Client { server, .. } => Some(server),
                Side::Server { .. } => None,
            };
            let Some(step) = resumption.life.poll_step(now) else {
                // No resume under way: nothing changed.
                return Ok(None);
            };
            let ended = match (step, server) {
                (LifeStep::GiveUp(e), _) => return Err(e),
                (LifeStep::ShutControlWrite, _) => {
                    self.control.shutdown_write();
                    continue;
                }
                (LifeStep::Wait { until }, Some(_)) => {
                    sleep_toward(until);
                    continue;
                }
                (LifeStep::Wait { until }, None) => match resumption.take_attempt(until) {
                    Some(attempt) => self.server_attempt(attempt, core)?,
                    None => continue,
                },
                (LifeStep::Reconnect { deadline }, Some(server)) => {
                    let ticket = resumption.ticket.clone();
                    self.client_attempt(server, &ticket, deadline, core)?
                }
                (LifeStep::Reconnect { .. }, None) => {
                    return Err(Error::Internal("a server told to reconnect".into()))
                }
            };
            let life = &mut resumption.life;
            match (ended, server) {
                (AttemptEnd::Resumed(outcome), _) => {
                    life.on_resumed(Instant::now());
                    return Ok(Some(outcome));
                }
                (AttemptEnd::NoSession, Some(server)) => life.on_no_session(server),
                (AttemptEnd::NoSession, None) => {
                    return Err(Error::Internal(
                        "a client's attempt said it has no session".into(),
                    ))
                }
                (AttemptEnd::Failed { why, old_path }, _) => {
                    log::info!("a resume attempt failed: {why}");
                    if life.on_attempt_failed(why, old_path, Instant::now())
                        == AfterAttempt::CarryOn
                    {
                        // A stranger (or a client that could not prove the secret) on a
                        // running session: nothing changed.
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// One client attempt: tear down, count, connect, run the handshake.
    fn client_attempt(
        &mut self,
        server: SocketAddr,
        ticket: &ResumeTicket,
        deadline: Instant,
        core: &mut dyn ResumeCore,
    ) -> Result<AttemptEnd> {
        let counts = match self.tear_down(core) {
            Ok(counts) => counts,
            Err(e) => {
                return attempt_or_session(e).map(|why| AttemptEnd::Failed {
                    why,
                    old_path: OldPath::TornDown,
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
                    old_path: OldPath::TornDown,
                })
            }
        };
        let mut control = ControlChannel::new(stream)?;
        let setup = self.resume_setup(ticket, deadline)?;
        let blob = self.transport.local_blob();
        let mut handshake = ResumeHandshake::client(setup, counts, blob);
        let start = AttemptStart::TornDown(counts);
        self.drive_attempt(&mut control, &mut handshake, core, start)
    }

    /// A proven attempt: the session's side, from the `Prepare` the client's proof led to.
    fn server_attempt(
        &mut self,
        mut attempt: ProvenAttempt,
        core: &mut dyn ResumeCore,
    ) -> Result<AttemptEnd> {
        let start = AttemptStart::PrepareFirst;
        self.drive_attempt(&mut attempt.control, &mut attempt.handshake, core, start)
    }

    fn resume_setup(&self, ticket: &ResumeTicket, deadline: Instant) -> Result<ResumeSetup> {
        Ok(ResumeSetup {
            ticket: ticket.clone(),
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
        // What came back counts even when the reset failed part way (a striped data path resets
        // every lane whatever one of them says): the next attempt needs those slots.
        let reset = self.transport.reset_for_resume(&mut reclaimed);
        for slot in reclaimed {
            core.on_reclaimed(slot)?;
        }
        reset?;
        core.begin_resume()
    }

    /// Runs one attempt's handshake on `control` from `start` to its end. On success the
    /// session's control channel is the attempt's.
    fn drive_attempt(
        &mut self,
        control: &mut ControlChannel,
        handshake: &mut ResumeHandshake,
        core: &mut dyn ResumeCore,
        start: AttemptStart,
    ) -> Result<AttemptEnd> {
        let (mut ours, mut prepare) = match start {
            AttemptStart::TornDown(counts) => (Some(counts), false),
            AttemptStart::PrepareFirst => (None, true),
        };
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
            if self.config.stopped() {
                return Err(Error::Interrupted);
            }
            let slice_end = slice_end(handshake.poll_timeout());
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
                        // `ours` is set only once our old path was torn down.
                        old_path: if ours.is_some() {
                            OldPath::TornDown
                        } else {
                            OldPath::Intact
                        },
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
                            Error::from(e).chain()
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
        let config = self.config.clone();
        let mut resumed = ResumedConnection {
            handshake,
            config: &config,
        };
        connect_data_path(
            &mut *self.transport,
            peer_blob,
            deadline,
            control,
            &mut resumed,
        )
    }
}

/// A resume's side of the connect loop: the control connection is watched until the peer's
/// Ready (what follows it, credits, is the session's and stays there until the session reads
/// it); a setup failure fails only this attempt.
struct ResumedConnection<'a> {
    handshake: &'a mut ResumeHandshake,
    config: &'a Config,
}

impl ResumedConnection<'_> {
    fn stop_flag(&self) -> std::result::Result<(), ResumeFailure> {
        if self.config.stopped() {
            return Err(ResumeFailure::Session(Error::Interrupted));
        }
        Ok(())
    }
}

impl Connecting for ResumedConnection<'_> {
    type Failure = ResumeFailure;

    fn setup_failed(&mut self, e: Error) -> ResumeFailure {
        self.handshake.on_setup_failed(&e.chain())
    }

    fn watch_control(&self) -> bool {
        !self.handshake.ready_seen()
    }

    fn on_control(
        &mut self,
        control: &mut ControlChannel,
    ) -> std::result::Result<(), ResumeFailure> {
        // The peer spoke (Ready on tcp may come before our side finished), or closed.
        match control.try_recv() {
            Ok(Received::Message(msg)) => self.handshake.on_message(msg)?,
            Ok(Received::Closed(_)) => return Err(self.handshake.on_control_closed()),
            Ok(Received::Nothing) => {}
            Err(Error::Decode(e)) => return Err(self.handshake.on_undecodable(&e.to_string())),
            Err(e) => return Err(ResumeFailure::Attempt(e.chain())),
        }
        self.stop_flag()
    }

    fn on_quiet(
        &mut self,
        _control: &mut ControlChannel,
        deadline: Instant,
    ) -> std::result::Result<(), ResumeFailure> {
        if remaining(deadline).is_none() {
            return Err(self
                .handshake
                .on_setup_failed("the attempt's deadline passed"));
        }
        self.stop_flag()
    }

    fn on_connected(&mut self, early_data: bool) -> std::result::Result<(), ResumeFailure> {
        self.handshake.on_connected(early_data)
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
