//! [`RdmaSrc`]: the receiving end, a thin driver of [`ReceiverCore`].
//!
//! The core decides what to deliver, when to announce credits and how long to wait; this
//! module polls the transport only when nothing is ready to deliver, reads the control channel
//! only when a wait said it is readable, and stops watching a descriptor at end of file.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::busy_poll::{BusyPoll, Spin};
use crate::checksum;
use crate::config::Config;
use crate::net::{Lost, Received, SendFailed};
use crate::proto::Counts;
use crate::proto::{Checksum, Message, Role};
use crate::session::readiness::Readiness;
use crate::session::resume::{ResumeCore, ResumeCounters};
use crate::session::{Flow, Patience, Paused, StopFlag, Watch};
use crate::session::{Session, SessionInfo};
use crate::session_core::lifecycle::{Lifecycle, OldControl, Trigger};
use crate::session_core::receiving::{ReceiverAction, ReceiverCore, RecvStep};
use crate::session_core::resume::ReceiverPosition;
use crate::session_core::FINISH_GRACE;
use crate::time::{earliest, Stamp};
use crate::transport::StagingSlot;
use crate::transport::{Arrived, RecvPath};
use crate::{Error, Result};

/// Receives messages from one [`crate::RdmaSink`] into `credits` registered slots.
///
/// The slice returned by [`RdmaSrc::recv`] points into a receive slot and stays valid until
/// the next `recv`, which hands the slot back to the transport and returns its credit.
#[derive(Debug)]
pub struct RdmaSrc {
    session: Session<dyn RecvPath>,
    core: ReceiverCore,
    arrivals: Vec<Arrived>,
    /// A wait said the control channel is readable (or we have not looked yet).
    control_readable: bool,
    /// The check each message carries (agreed in the handshake), verified before delivery.
    checksum: Checksum,
    /// The clock reading arrivals share between two waits.
    stamp: Stamp,
    /// The descriptor an event loop waits on between `try_recv` calls (`AsFd`).
    readiness: Readiness,
    /// The payload length of the message held (checked), until the next call.
    held_len: Option<usize>,
    /// The held message was not received (`recv_into` with too small a buffer): the next call
    /// returns it instead of releasing it.
    unread: bool,
}

impl RdmaSrc {
    /// Connects to a server at `addr` and sets up a session in which we receive.
    ///
    /// # Errors
    /// Connecting, the handshake or the transport setup failed, or the server refused us.
    pub fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        Self::from_session(Session::connect(addr, config)?)
    }

    /// Wraps an established session in which we receive (every slot posted).
    pub(crate) fn from_session(session: Session<dyn RecvPath>) -> Result<Self> {
        let slots = u32::from(session.info.local.credits);
        let mut core = ReceiverCore::new(
            slots,
            session.transport.credit_route(),
            session.config.idle_timeout,
            Instant::now(),
        )
        .with_trailer(session.info.checksum().trailer_len());
        if session.resumes() {
            core = core.resumable();
        }
        Ok(Self {
            checksum: session.info.checksum(),
            session,
            core,
            arrivals: Vec::with_capacity(slots as usize + 16),
            control_readable: true,
            stamp: Stamp::default(),
            readiness: Readiness::new()?,
            held_len: None,
            unread: false,
        })
    }

    /// Changes [`Config::busy_poll`] for this session from the next call on: how long a wait
    /// polls the transport before it sleeps (`None`: sleep at once). For an application whose
    /// phases differ (a latency-bound exchange after a bulk transfer, say); `bench --server`
    /// takes its client's setting this way.
    pub fn set_busy_poll(&mut self, busy_poll: Option<Duration>) {
        self.session.config.busy_poll = busy_poll;
    }

    /// What was chosen and negotiated.
    pub fn info(&self) -> &SessionInfo {
        &self.session.info
    }

    /// Messages delivered to the application so far.
    pub fn received(&self) -> u64 {
        self.core.delivered()
    }

    /// Payload bytes delivered so far.
    pub fn bytes_received(&self) -> u64 {
        self.core.bytes()
    }

    /// How many times the session was resumed after a break, and the messages sent again then
    /// (`--resume-timeout`, [`Config::resume_timeout`]): a handle that stays readable after
    /// the session ended (all zeros when the session does not resume).
    pub fn resume_counters(&self) -> ResumeCounters {
        self.session.resume_counters()
    }

    /// The bytes each path delivered (`--paths`, [`Config::paths`]; path 0 first, as in
    /// [`SessionInfo::extra_paths`](crate::SessionInfo::extra_paths)): a handle that stays
    /// readable after the session ended. Empty when the data path is one queue pair.
    pub fn path_counters(&self) -> crate::PathCounters {
        self.session.transport.path_counters()
    }

    /// Returns the next message, `Ok(None)` at end of stream (after the sender's Finish and
    /// every message it counted), or an error. The previous message's slot is released first.
    ///
    /// # Errors
    /// [`Error::PeerLost`] (with the number of messages that arrived) when the sender vanishes
    /// without Finish; [`Error::Rejected`] when it aborts; [`Error::Protocol`] when it breaks
    /// the protocol (nothing past its Finish count is ever delivered);
    /// [`Error::Interrupted`] when the stop flag is set while waiting (the session stays
    /// usable); [`Error::Closed`] after an earlier error.
    pub fn recv(&mut self) -> Result<Option<&[u8]>> {
        self.recv_within(Patience::Unbounded)
    }

    /// Like [`RdmaSrc::recv`], waiting at most `timeout` for the next message.
    ///
    /// # Errors
    /// [`Error::DeadlinePassed`] when no message came in time (the session stays usable, the
    /// previous message is released); otherwise as for [`RdmaSrc::recv`].
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<&[u8]>> {
        self.recv_within(Patience::after(timeout))
    }

    /// Like [`RdmaSrc::recv`], without waiting: the next message if one has arrived.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when none has (the session stays usable, the previous message is
    /// released, and the readiness descriptor is armed: wait until it is readable, then call
    /// again); otherwise as for [`RdmaSrc::recv`]. Two waits can still happen inside: repairing
    /// a break of a resumable session (up to its resume timeout), and, at the end of a
    /// resumable stream, the sender's close (a few seconds at most).
    pub fn try_recv(&mut self) -> Result<Option<&[u8]>> {
        self.recv_within(Patience::Never)
    }

    /// Copies the next message into `buf` and returns its length, `Ok(None)` at end of stream
    /// (as `socket.recv_into` does, for an application that keeps its own buffers).
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] when the message is longer than `buf`: nothing is copied and
    /// the message stays to be received (the next `recv`, `try_recv` or `recv_into` returns it);
    /// otherwise as for [`RdmaSrc::recv`].
    pub fn recv_into(&mut self, buf: &mut [u8]) -> Result<Option<usize>> {
        if !self.advance(Patience::Unbounded)? {
            return Ok(None);
        }
        let Some(msg) = self.held_message() else {
            return Ok(None);
        };
        let Some(target) = buf.get_mut(..msg.len()) else {
            let len = msg.len();
            self.unread = true;
            return Err(Error::BufferTooSmall {
                len,
                capacity: buf.len(),
            });
        };
        target.copy_from_slice(msg);
        Ok(Some(msg.len()))
    }

    fn recv_within(&mut self, patience: Patience) -> Result<Option<&[u8]>> {
        if self.advance(patience)? {
            Ok(self.held_message())
        } else {
            Ok(None)
        }
    }

    /// Releases the message held and makes the next one held (checked), waiting as `patience`
    /// allows: `true` when one is held ([`RdmaSrc::held_message`]), `false` at end of stream.
    /// The async wrappers call it and then borrow the message, so that a loop that waits
    /// between tries never holds a borrow.
    pub(crate) fn advance(&mut self, patience: Patience) -> Result<bool> {
        if std::mem::take(&mut self.unread) && self.held_len.is_some() {
            // a `recv_into` too small for it left the held message to be received again
            return Ok(true);
        }
        self.held_len = None;
        if self.core.is_ended() {
            return Ok(false);
        }
        if !self.core.is_open() {
            return Err(Error::Closed);
        }
        if self.session.after_readiness_wait(&mut self.readiness) {
            self.control_readable = true;
        }
        let delivered = self.deliver(patience);
        if let Err(e) = &delivered {
            self.core.on_error(e);
            // The failure's own actions (a Reject, closing); the first error says more.
            let _ = self.run_actions();
        }
        match delivered? {
            None => return Err(patience.gave_up()),
            Some(false) => return Ok(false),
            Some(true) => {}
        }
        let index = self.core.delivered().saturating_sub(1);
        let Some(held) = self.core.held() else {
            return Ok(false);
        };
        match checksum::check(self.checksum, self.session.transport.message(held), index) {
            Ok(len) => {
                self.held_len = Some(len);
                Ok(true)
            }
            Err(e) => {
                self.core.fail_held(&e);
                let _ = self.run_actions();
                Err(e)
            }
        }
    }

    /// The message [`RdmaSrc::advance`] made held (its payload, without a checksum trailer).
    pub(crate) fn held_message(&self) -> Option<&[u8]> {
        let len = self.held_len?;
        self.core
            .held()
            .map(|held| &self.session.transport.message(held)[..len])
    }

    /// Delivers the next message (`false`: end of stream; `None`: `patience` ran out first), with its actions (re-posting the
    /// released slot, credits) part of the call: a failure there gets the same policy as any
    /// other. Every failure, and a resume attempt that arrives, goes to the lifecycle core
    /// ([`Session::resume`](crate::session::Session)), which resumes or ends the session. A
    /// break found while messages that arrived are still to be delivered, or carrying out the
    /// actions (a message is delivered and held by then), waits in the receiver core until
    /// every message that arrived was delivered: nothing that arrived is lost, whether the
    /// session then resumes or ends. At the end of a resumable stream the sender must have
    /// heard us let it go: if the control connection breaks first, the session resumes and
    /// lets it go again.
    fn deliver(&mut self, patience: Patience) -> Result<Option<bool>> {
        loop {
            let Some(delivered) = self.next_message_resuming(patience)? else {
                // Nothing delivered, but the released slot may have actions left.
                self.run_actions_resuming(false)?;
                return Ok(None);
            };
            let delivered = self.run_actions_resuming(delivered)?;
            if delivered || !self.session.resumes() {
                return Ok(Some(delivered));
            }
            match self.await_sender_close() {
                Ok(()) => return Ok(Some(false)),
                Err(e) => self.resume_after(Trigger::Failed(e))?,
            }
        }
    }

    /// [`RdmaSrc::next_message`], through the resumes the lifecycle decides on (`None`:
    /// `patience` ran out).
    fn next_message_resuming(&mut self, patience: Patience) -> Result<Option<bool>> {
        loop {
            let trigger = match self.next_message(patience) {
                Ok(Flow::Done(delivered)) => return Ok(Some(delivered)),
                Ok(Flow::NotReady) => return Ok(None),
                Ok(Flow::Resume(planned)) => planned.into(),
                Err(e) => Trigger::Failed(e),
            };
            self.resume_after(trigger)?;
        }
    }

    /// The core's actions after a delivery: a break there with a message delivered comes
    /// once every message that arrived was delivered (the message is returned now).
    fn run_actions_resuming(&mut self, delivered: bool) -> Result<bool> {
        loop {
            match self.run_actions() {
                Ok(()) => return Ok(delivered),
                Err(e) if delivered && Lifecycle::is_break(&e) => {
                    self.core.on_data_broken(e);
                    return Ok(true);
                }
                Err(e) => self.resume_after(Trigger::Failed(e))?,
            }
        }
    }

    /// Resumable, at the end of the stream: waits (at most [`FINISH_GRACE`]) for the sender to
    /// close its control connection, which says it heard us let it go (after a resume, for
    /// its Finish on the new path first, to let it go there). `Err`: the control connection
    /// broke first, so the sender may not have heard it. Anything else ends the wait: every
    /// message is here.
    fn await_sender_close(&mut self) -> Result<()> {
        let deadline = crate::time::deadline_after(Instant::now(), FINISH_GRACE);
        loop {
            match self.session.control.recv_until(deadline) {
                Ok(Received::Message(msg)) => {
                    let taken = self.core.on_control(msg);
                    if taken.and_then(|()| self.run_actions()).is_err() {
                        return Ok(());
                    }
                }
                Ok(Received::Closed(lost)) if lost.cause.is_some() => {
                    return Err(lost.into_error(self.core.arrived()))
                }
                Ok(Received::Closed(_) | Received::Nothing) => return Ok(()),
                Err(e) if Lifecycle::is_break(&e) => return Err(e),
                Err(_) => return Ok(()),
            }
        }
    }

    /// Hands `trigger` to the session's lifecycle: resumes (or carries on when only a
    /// stranger's attempt came), or returns the error the operation ends with.
    fn resume_after(&mut self, trigger: Trigger) -> Result<()> {
        let Some(outcome) = self.session.resume(trigger, &mut self.core)? else {
            return Ok(());
        };
        let told = ReceiverPosition {
            arrived: outcome.ours.messages,
            released: outcome.ours.released,
        };
        self.core.resumed(told, Instant::now())?;
        self.control_readable = true;
        self.readiness.forget();
        Ok(())
    }

    /// Aborts the session, telling the sender why (it sees [`Error::Rejected`]).
    pub fn abort(mut self, reason: &str) {
        self.abort_in_place(reason);
    }

    /// Aborts the session like [`RdmaSrc::abort`] but keeps the object, and with it the memory
    /// of the slice the last `recv` returned, until it is dropped; later calls return
    /// [`Error::Closed`]. For bindings (Python) in which a view of the last message may
    /// outlive the session.
    pub fn abort_in_place(&mut self, reason: &str) {
        self.core.abort(reason);
        let _ = self.run_actions();
    }

    /// Carries out what the core asked for.
    fn run_actions(&mut self) -> Result<()> {
        while let Some(action) = self.core.poll_action() {
            let done = match action {
                ReceiverAction::Repost(slot) => self.session.transport.post_recv(slot),
                ReceiverAction::ReturnCredits { count } => {
                    self.session.transport.return_credits(count)
                }
                ReceiverAction::AnnounceCredit { released } => {
                    match self.session.control.send(&Message::Credit { released }) {
                        Ok(()) => Ok(()),
                        Err(SendFailed::PeerGone(lost)) => return Err(self.rejected_or_lost(lost)),
                        Err(SendFailed::Io(e)) => Err(e),
                    }
                }
                ReceiverAction::ShutdownControlWrite => {
                    self.session.control.shutdown_write();
                    Ok(())
                }
                ReceiverAction::Reject(reason) => {
                    self.session.control.reject(&reason);
                    Ok(())
                }
                ReceiverAction::CloseDataPath => {
                    self.session.transport.close();
                    Ok(())
                }
            };
            if let Err(e) = done {
                // A break already waits behind the messages that arrived: the first one
                // stands (a transport keeps a receive whose post failed for the resume).
                if self.core.data_broken() && Lifecycle::is_break(&e) {
                    continue;
                }
                // A post that failed is our own failure (told to the sender at once), unless
                // the data path closed under it: then the sender's words may say why.
                if let Error::TransportClosed { .. } = e {
                    let arrived = self.core.arrived();
                    return Err(self.session.explain(e, Role::Receiver, arrived));
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether a message is delivered (`false`: end of stream), waiting as `patience` allows.
    fn next_message(&mut self, patience: Patience) -> Result<Flow<bool>> {
        let mut busy = BusyPoll::new(
            self.session.config.busy_poll,
            self.session.transport.device_work(),
        );
        loop {
            match self.core.next()? {
                RecvStep::Deliver => return Ok(Flow::Done(true)),
                RecvStep::End => return Ok(Flow::Done(false)),
                RecvStep::Wait => {}
            }
            // The released slot goes back to the transport before we look for more.
            self.run_actions()?;
            // Nothing buffered: look at the transport (and the control channel if it may have
            // news) until something comes or a pause ends. The core's answer cannot change
            // before that, so a polling round that finds nothing asks it nothing (a clock-check
            // round only re-stamps it and reads its next deadline).
            while self.progress()? == Polled::Quiet {
                match patience.next_spin(&mut busy) {
                    Spin::Again | Spin::YieldThenAgain => continue,
                    Spin::AgainChecked(now) => {
                        if !self.spin_must_end(patience, now) {
                            continue;
                        }
                    }
                    Spin::AgainLookAround(now) => {
                        // Now and then, the control channel too.
                        self.control_readable = true;
                        if !self.spin_must_end(patience, now) {
                            continue;
                        }
                    }
                    Spin::Sleep => {}
                }
                match self.pause(patience)? {
                    // After a pause the core is asked again, as after news.
                    Flow::Done(()) => break,
                    Flow::Resume(planned) => return Ok(Flow::Resume(planned)),
                    Flow::NotReady => return Ok(Flow::NotReady),
                }
            }
        }
    }

    /// Pauses as `patience` says: sleeps until the transport or the control channel may have
    /// news or the next deadline ([`RdmaSrc::next_deadline`]) passes, arms the readiness
    /// descriptor (`NotReady`), or gives up at the caller's deadline (`NotReady`). The core's
    /// deadlines that passed are handled first, and a path's retry that is due comes back as
    /// `Resume`. `Done` when the caller goes on.
    fn pause(&mut self, patience: Patience) -> Result<Flow<()>> {
        // A clock reading only when about to sleep: a poll that found work costs none.
        let now = Instant::now();
        self.restamp(now);
        self.core.handle_timeout(now)?;
        let watch = Watch {
            control: !self.core.control_closed(),
            data: !self.core.data_closed(),
            stop: StopFlag::Honoured,
        };
        // A path's retry, as a resume attempt, is taken only here: nothing to deliver, the
        // transport and the control channel looked at (a Finish read ends the stream).
        if let Some(planned) = self
            .core
            .streaming()
            .then(|| self.session.paths_retry_due(now))
            .flatten()
        {
            return Ok(Flow::Resume(planned));
        }
        let until = self.next_deadline();
        match self
            .session
            .pause(patience, &mut self.readiness, now, until, watch)?
        {
            Paused::Ready { control } => self.control_readable = control,
            Paused::Resume(planned) => return Ok(Flow::Resume(planned)),
            Paused::NotReady => return Ok(Flow::NotReady),
        }
        // What arrives after the wait is stamped with this reading (re-stamped before the
        // next wait): a wait costs one clock read.
        self.stamp.prime(now);
        Ok(Flow::Done(()))
    }

    /// The earliest of the core's next deadline, the data path's next look
    /// ([`crate::transport::DataPath::poll_again_at`]) and, while the stream runs, a path's
    /// retry.
    fn next_deadline(&self) -> Option<Instant> {
        let retry_paths_at = self
            .core
            .streaming()
            .then(|| self.session.paths_retry_at())
            .flatten();
        let data_path_at = self.session.transport.poll_again_at();
        earliest(
            self.core.poll_timeout(),
            earliest(retry_paths_at, data_path_at),
        )
    }

    /// Messages stamped with an older reading since the last pause (or clock check) count as
    /// arrived at `now`, a fresh reading ([`Stamp`]).
    fn restamp(&mut self, now: Instant) {
        if self.stamp.take() {
            self.core.restamp_last_arrival(now);
        }
    }

    /// At a clock check of busy polling: whether to stop spinning and pause
    /// ([`Session::spin_must_end`]).
    fn spin_must_end(&mut self, patience: Patience, now: Instant) -> bool {
        // A long spin reads no other clock: stamps from before it would make the core's
        // deadlines look due (and end the spin for nothing).
        self.restamp(now);
        self.stamp.prime(now);
        let until = self.next_deadline();
        self.session.spin_must_end(patience, now, until)
    }

    /// The sender closed the control connection while we wrote to it: a sender that aborts
    /// sends Reject first, and its words may still be waiting to be read.
    fn rejected_or_lost(&mut self, lost: Lost) -> Error {
        while let Ok(Received::Message(msg)) = self.session.control.try_recv() {
            if let Message::Reject { reason } = msg {
                return Error::Rejected(reason);
            }
        }
        lost.into_error(self.core.arrived())
    }

    /// Feeds arrivals, the data path's close and control messages to the core: `Quiet` when
    /// there were none (the core is as it was).
    fn progress(&mut self) -> Result<Polled> {
        let poll_result = if self.core.data_closed() || self.core.data_broken() {
            Ok(())
        } else {
            self.session.transport.poll_arrivals(&mut self.arrivals)
        };
        let mut found = if self.arrivals.is_empty() && poll_result.is_ok() {
            Polled::Quiet
        } else {
            Polled::News
        };
        if !self.arrivals.is_empty() {
            let now = self.stamp.get();
            for msg in self.arrivals.drain(..) {
                self.core.on_arrival(msg, now)?;
            }
        }
        match poll_result {
            Ok(()) => {}
            // Resumable, a data path that closes or fails before everything arrived is a
            // break (unless the sender's words on the control channel say otherwise).
            // Either way, what arrived before it is delivered first.
            Err(e) if self.core.is_resumable() && !self.core.has_everything() => {
                let arrived = self.core.arrived();
                let broken = self.session.explain(e, Role::Receiver, arrived);
                self.core.on_data_broken(broken);
            }
            Err(Error::TransportClosed { .. }) => self.core.on_data_closed(Instant::now()),
            Err(e) => {
                // A Finish may be waiting on the control channel: the core must know it before
                // it decides what a failing data path means.
                self.read_control()?;
                if !self.core.on_data_failed(Instant::now()) {
                    let arrived = self.core.arrived();
                    let failed = self.session.explain(e, Role::Receiver, arrived);
                    self.core.on_data_broken(failed);
                }
            }
        }
        if self.control_readable && self.read_control()? == Polled::News {
            found = Polled::News;
        }
        Ok(found)
    }

    /// Feeds every control message available now to the core: `Quiet` when there was none.
    fn read_control(&mut self) -> Result<Polled> {
        let mut found = Polled::Quiet;
        while !self.core.control_closed() {
            match self.session.control.try_recv()? {
                Received::Message(msg) => self.core.on_control(msg)?,
                Received::Nothing => break,
                Received::Closed(lost) => self.core.on_control_closed(lost)?,
            }
            found = Polled::News;
        }
        self.control_readable = false;
        if found == Polled::News && self.core.finish_known() && !self.core.is_resumable() {
            // The core lets the sender go at its Finish: its lanes all close now, and one
            // that closes first is no failure (the others may still carry counted messages).
            self.session.transport.peer_finished();
        }
        Ok(found)
    }
}

/// What one look at the data path and the control channel found ([`RdmaSrc::progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polled {
    /// Something for the core: an arrival, the data path's close or failure, a control message
    /// or the control connection's close.
    News,
    /// Nothing: the core is as it was.
    Quiet,
}

crate::session::readiness::descriptor_of!(
    /// The readiness descriptor (rules 1 to 4 of `session::readiness`): it turns readable when
    /// [`RdmaSrc::try_recv`] may make progress. It is armed only by a `try_recv` (or a
    /// [`RdmaSrc::recv_timeout`] that ran out) that said [`Error::WouldBlock`]; wake-ups may be
    /// spurious; call until `WouldBlock` before waiting; never read it; it stays the same
    /// descriptor for the session's life, across a resume.
    RdmaSrc,
    readiness
);

impl ResumeCore for ReceiverCore {
    fn begin_resume(&mut self) -> Result<Counts> {
        let position = ReceiverCore::begin_resume(self)?;
        Ok(Counts {
            messages: position.arrived,
            released: position.released,
        })
    }

    fn on_reclaimed(&mut self, _slot: StagingSlot) -> Result<()> {
        Err(Error::Internal(
            "a receiving data path gave back a staging slot".to_owned(),
        ))
    }

    fn progress(&self) -> u64 {
        self.arrived()
    }

    fn old_control_on_break(&self) -> OldControl {
        if self.finish_known() {
            OldControl::Left
        } else {
            OldControl::Shut
        }
    }
}

impl Drop for RdmaSrc {
    fn drop(&mut self) {
        self.abort_in_place("the receiver closed before the end of the stream");
    }
}
