//! The receiver's state machine.
//!
//! Events in: a message landed ([`ReceiverCore::on_arrival`]), a control message
//! ([`ReceiverCore::on_control`]), the control or data path closed, a deadline passed
//! ([`ReceiverCore::handle_timeout`]), the application asked for the next message
//! ([`ReceiverCore::next`]) or aborted. Out: the message to deliver (held by the core until the
//! next call), end of stream, the next deadline ([`ReceiverCore::poll_timeout`], pure), and
//! actions for the driver ([`ReceiverCore::poll_action`]: post this slot again, announce
//! credits on the control channel or return them in band, shut down writing, reject with a
//! reason, close the data path).
//!
//! Rules kept here:
//! - messages are delivered in arrival order, each exactly once, at most `count` of them once
//!   Finish{count} is known; a message past the count, a Finish below what arrived, a second
//!   Finish, or an arrival with every slot held are protocol violations;
//! - credits are announced in batches: once half the window (rounded up) is released and not
//!   yet announced. That alone keeps a sender from starving: it can only run out of credit
//!   with a whole window sent and unannounced, and once those have arrived and been released,
//!   more than half the window is unannounced (the property tests check it);
//! - after Finish nothing more is announced, and the receiver shuts down writing on the control
//!   connection at once (the sender may go); waiting is then bounded by [`FINISH_PROGRESS`]
//!   without an arrival; after the data path closed without Finish, by [`FINISH_GRACE`];
//! - with an idle timeout, a session without any arrival for that long ends;
//! - a loss (the control connection or the data path gone before Finish) is reported only after
//!   every message that had arrived was delivered: nothing that arrived is dropped; so is a
//!   data path that broke ([`ReceiverCore::on_data_broken`]: the driver's error, a loss or a
//!   break it resumes from), and the driver stops polling it meanwhile;
//! - after a failure: the failure policy of [`super::on_failure`];
//! - with resumption ([`ReceiverCore::resumable`]): the sender
//!   is let go (writing shut down) only once Finish came on the current path *and* every
//!   counted message arrived, since a break before that must not lose messages still on their
//!   way; a resume ([`ReceiverCore::begin_resume`], [`ReceiverCore::resumed`]) keeps what
//!   arrived, gives the counts, and counts the releases it told as announced; Finish may come
//!   again after a resume with the same count (twice on one path, or another count, is still
//!   a violation); after a resume the stream ends (and the data path closes) only once Finish
//!   came on the new path, even with every message delivered.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::resume::ReceiverPosition;
use super::{on_failure, FINISH_GRACE, FINISH_PROGRESS};
use crate::net::Lost;
use crate::proto::{CreditError, Message, RecvWindow};
use crate::time::{deadline_after, earliest};
use crate::transport::{Arrived, CreditRoute, RecvSlot};
use crate::Error;
use crate::ProtocolViolation;

/// What the receiver should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvStep {
    /// Hand the held message ([`ReceiverCore::held`]) to the application.
    Deliver,
    /// Every counted message was delivered: end of stream.
    End,
    /// Nothing to do until an event arrives or [`ReceiverCore::poll_timeout`] passes.
    Wait,
}

/// What the driver must do for the receiver.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReceiverAction {
    /// Post this receive slot again (the application is done with its message).
    Repost(RecvSlot),
    /// Send `Credit{released}` on the control channel.
    AnnounceCredit {
        /// Cumulative count of released messages.
        released: u64,
    },
    /// Return this many credits on the data path ([`CreditRoute::InBand`]).
    ReturnCredits {
        /// How many.
        count: usize,
    },
    /// Finish is known: shut down writing on the control connection (the sender may go).
    ShutdownControlWrite,
    /// Tell the sender why the session ends (a Reject on the control channel).
    Reject(String),
    /// Tear the data path down.
    CloseDataPath,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// The data path broke; the session is being resumed.
    Resuming,
    Ended,
    Failed,
}

/// What is known about the sender's Finish, and whether the sender was let go (writing shut
/// down on the control connection). A resume starts a new path: Finish is expected again on it
/// with the same count, and the sender is let go again there.
///
/// Ruled out: Finish on this path or a let-go sender without a count, and a let-go sender
/// whose Finish did not come on this path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// Not said yet.
    Unknown,
    /// Said with `count` on an earlier path (only after a resume, so only with resumption).
    Earlier { count: u64 },
    /// Said with `count` on this path; the sender is not let go yet (with resumption: some
    /// counted message is still on its way).
    Here { count: u64 },
    /// Said with `count` on this path, and the sender was let go.
    LetGo { count: u64 },
}

impl Finish {
    /// The count Finish said, on this path or an earlier one.
    fn count(self) -> Option<u64> {
        match self {
            Self::Unknown => None,
            Self::Earlier { count } | Self::Here { count } | Self::LetGo { count } => Some(count),
        }
    }

    fn is_known(self) -> bool {
        self != Self::Unknown
    }

    fn came_on_this_path(self) -> bool {
        matches!(self, Self::Here { .. } | Self::LetGo { .. })
    }

    fn let_go(self) -> bool {
        matches!(self, Self::LetGo { .. })
    }

    /// Finish{count} came on this path with `arrived` messages here: a second Finish (on one
    /// path, without resumption, or with another count) or one below what arrived is a
    /// violation; otherwise it is known, on this path.
    fn said(&mut self, count: u64, arrived: u64, resumable: bool) -> Result<(), Error> {
        match *self {
            Self::Unknown => {}
            // After a resume the sender says it again, with the same count.
            Self::Earlier { count: first } if first == count && resumable => {}
            Self::Earlier { count: first }
            | Self::Here { count: first }
            | Self::LetGo { count: first } => {
                return Err(Error::Protocol(ProtocolViolation::FinishTwice {
                    first,
                    second: count,
                }));
            }
        }
        if count < arrived {
            return Err(Error::Protocol(ProtocolViolation::FinishBelowArrived {
                count,
                arrived,
            }));
        }
        *self = Self::Here { count };
        Ok(())
    }

    /// Whether the sender is to be let go now (true once per path): at Finish, or with
    /// resumption once Finish came on this path and every counted message (`arrived`) is here.
    fn let_go_when_done(&mut self, arrived: u64, resumable: bool) -> bool {
        // `Earlier` waits for Finish on this path: it only comes with resumption.
        let Self::Here { count } = *self else {
            return false;
        };
        if resumable && arrived != count {
            return false;
        }
        *self = Self::LetGo { count };
        true
    }

    /// Whether the control connection may close without loss: the sender said Finish and (with
    /// resumption) was let go, so the messages it counted are on their way (or all here).
    fn sender_may_close(self, resumable: bool) -> bool {
        self.is_known() && (!resumable || self.let_go())
    }

    /// With every counted message delivered, whether the stream ends: after a resume only
    /// once Finish came on the new path.
    fn may_end(self, resumable: bool) -> bool {
        !resumable || self.came_on_this_path()
    }

    /// A resume starts a new path: Finish is expected again, and the sender let go again.
    fn new_path(&mut self) {
        if let Self::Here { count } | Self::LetGo { count } = *self {
            *self = Self::Earlier { count };
        }
    }
}

/// How the control connection ended (on this path).
#[derive(Debug)]
enum ControlEnd {
    Open,
    /// End of file or reset, and no loss waits to be reported (none, or reported already).
    Closed,
    /// Closed, and lost before Finish (why): reported once every message that had arrived
    /// was delivered.
    Lost(Lost),
}

/// What is known about the ends of the paths: the control connection's and the data path's.
#[derive(Debug)]
struct PathEnds {
    control: ControlEnd,
    /// When the data path closed (on this path).
    data_closed_at: Option<Instant>,
    /// The data path broke (the driver's error for it): reported once every message that had
    /// arrived was delivered; nothing more arrives meanwhile. Independent of a close (the
    /// driver may find both); a resume repairs it at its start ([`PathEnds::repair_break`]).
    data_broken: Option<Error>,
}

impl PathEnds {
    fn new() -> Self {
        Self {
            control: ControlEnd::Open,
            data_closed_at: None,
            data_broken: None,
        }
    }

    fn control_closed(&self) -> bool {
        !matches!(self.control, ControlEnd::Open)
    }

    /// The control connection closed (a loss, if any, is kept).
    fn close_control(&mut self) {
        if let ControlEnd::Open = self.control {
            self.control = ControlEnd::Closed;
        }
    }

    /// The control connection closed with `lost` to report later (the first loss stands).
    fn hold_control_loss(&mut self, lost: Lost) {
        if !matches!(self.control, ControlEnd::Lost(_)) {
            self.control = ControlEnd::Lost(lost);
        }
    }

    /// Whether a loss of the control connection waits to be reported.
    fn control_lost(&self) -> bool {
        matches!(self.control, ControlEnd::Lost(_))
    }

    /// The loss waiting to be reported, once (the connection stays closed).
    fn take_control_loss(&mut self) -> Option<Lost> {
        match std::mem::replace(&mut self.control, ControlEnd::Closed) {
            ControlEnd::Lost(lost) => Some(lost),
            other => {
                self.control = other;
                None
            }
        }
    }

    /// The data path closed at `now` (the first close stands).
    fn close_data(&mut self, now: Instant) {
        self.data_closed_at.get_or_insert(now);
    }

    /// The data path broke (the first break stands).
    fn break_data(&mut self, error: Error) {
        self.data_broken.get_or_insert(error);
    }

    /// The break waiting to be reported, once.
    fn take_break(&mut self) -> Option<Error> {
        self.data_broken.take()
    }

    /// A resume begins: it repairs the break.
    fn repair_break(&mut self) {
        self.data_broken = None;
    }

    /// A resume completed: the control connection and the data path are new. A break found
    /// while resuming is kept (the resume began before it).
    fn new_path(&mut self) {
        self.control = ControlEnd::Open;
        self.data_closed_at = None;
    }
}

/// The receiver's half of a session, without I/O.
#[derive(Debug)]
pub(crate) struct ReceiverCore {
    window: RecvWindow,
    /// Arrived, not yet delivered. Never longer than the window.
    ready: VecDeque<Arrived>,
    /// The message the application holds (the last one delivered).
    held: Option<Arrived>,
    delivered: u64,
    bytes: u64,
    /// Bytes after each message that are not the application's (a checksum's trailer).
    trailer: u64,
    finish: Finish,
    /// The release count last announced to the sender.
    announced: u64,
    /// Announce once this many releases are unannounced.
    batch: u64,
    credit_route: CreditRoute,
    ends: PathEnds,
    last_arrival: Instant,
    idle_timeout: Option<Duration>,
    phase: Phase,
    actions: VecDeque<ReceiverAction>,
    /// Resumption is on (set once, at construction): see the rules above.
    resumable: bool,
}

impl ReceiverCore {
    /// A receiver over `slots` posted slots, at time `now`.
    pub(crate) fn new(
        slots: u32,
        credit_route: CreditRoute,
        idle_timeout: Option<Duration>,
        now: Instant,
    ) -> Self {
        Self {
            window: RecvWindow::new(slots),
            ready: VecDeque::with_capacity(slots as usize),
            held: None,
            delivered: 0,
            bytes: 0,
            trailer: 0,
            finish: Finish::Unknown,
            announced: 0,
            batch: u64::from(slots.div_ceil(2).max(1)),
            credit_route,
            ends: PathEnds::new(),
            last_arrival: now,
            idle_timeout,
            phase: Phase::Open,
            actions: VecDeque::with_capacity(4),
            resumable: false,
        }
    }

    /// The session may resume after a break (docs/design.md, "Resuming a session").
    pub(crate) fn resumable(mut self) -> Self {
        self.resumable = true;
        self
    }

    /// Each message arrives with `trailer` bytes after it that are not the application's (a
    /// checksum): they are not counted in [`ReceiverCore::bytes`].
    pub(crate) fn with_trailer(mut self, trailer: usize) -> Self {
        self.trailer = trailer as u64;
        self
    }

    /// Messages delivered so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Payload bytes delivered so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Messages that arrived so far (the count a peer-lost error reports).
    pub(crate) fn arrived(&self) -> u64 {
        self.window.arrived()
    }

    /// True once the control connection reached end of file (stop watching it).
    pub(crate) fn control_closed(&self) -> bool {
        self.ends.control_closed()
    }

    /// True once the data path closed (stop polling and watching it).
    pub(crate) fn data_closed(&self) -> bool {
        self.ends.data_closed_at.is_some()
    }

    /// Whether the session is still running.
    pub(crate) fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Whether the stream runs: open, and the sender has not said Finish (a resume for the
    /// session's own reasons, such as trying a path again, starts only then).
    pub(crate) fn streaming(&self) -> bool {
        self.phase == Phase::Open && matches!(self.finish, Finish::Unknown)
    }

    /// Whether end of stream was reached.
    pub(crate) fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// The message last delivered, which the application holds until the next call.
    pub(crate) fn held(&self) -> Option<&Arrived> {
        self.held.as_ref()
    }

    /// The next thing the driver must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<ReceiverAction> {
        self.actions.pop_front()
    }

    /// An error ended the operation: applies the failure policy (see [`on_failure`]).
    pub(crate) fn on_error(&mut self, e: &Error) {
        if let Some(reject) = on_failure(e, "receiver").ends() {
            self.end(reject);
        }
    }

    /// The message just delivered failed its check (`--checksum`) before the application saw
    /// it: it does not count as delivered, and `e` ends the session like any failure.
    pub(crate) fn fail_held(&mut self, e: &Error) {
        if let Some(msg) = self.held.take() {
            self.delivered -= 1;
            self.bytes -= (msg.len() as u64).saturating_sub(self.trailer);
        }
        self.on_error(e);
    }

    /// The application aborts: the sender is told why.
    pub(crate) fn abort(&mut self, reason: &str) {
        self.end(Some(reason.to_owned()));
    }

    fn end(&mut self, reject: Option<String>) {
        if !matches!(self.phase, Phase::Open | Phase::Resuming) {
            return;
        }
        self.phase = Phase::Failed;
        if let Some(reason) = reject {
            self.actions.push_back(ReceiverAction::Reject(reason));
        }
        self.actions.push_back(ReceiverAction::CloseDataPath);
    }

    /// A message landed in a receive slot.
    pub(crate) fn on_arrival(&mut self, msg: Arrived, now: Instant) -> Result<(), Error> {
        if let Some(count) = self.finish.count() {
            if self.window.arrived() >= count {
                return Err(Error::Protocol(ProtocolViolation::PastFinish { count }));
            }
        }
        let seq = self.window.on_arrival().map_err(|e| match e {
            CreditError::Overrun { capacity } => {
                Error::Protocol(ProtocolViolation::CreditOverrun { capacity })
            }
            other => Error::Internal(format!("receive window: {other}")),
        })?;
        let expected = self.window.slot_of(seq);
        if msg.slot_index() != expected {
            return Err(Error::Internal(format!(
                "message {seq} landed in slot {}, expected slot {expected} (receives must complete in posting order)",
                msg.slot_index()
            )));
        }
        self.ready.push_back(msg);
        self.last_arrival = now;
        self.let_sender_go_when_done();
        Ok(())
    }

    /// Shuts down writing once the sender may go: at Finish, or with resumption once Finish
    /// came on this path and every counted message arrived.
    fn let_sender_go_when_done(&mut self) {
        if self
            .finish
            .let_go_when_done(self.window.arrived(), self.resumable)
        {
            self.actions.push_back(ReceiverAction::ShutdownControlWrite);
        }
    }

    /// Messages arrived since the driver's last wait were stamped with an earlier reading of
    /// the clock ([`crate::time::Stamp`]): they count as arrived at `now`, the time read before
    /// the next wait.
    pub(crate) fn restamp_last_arrival(&mut self, now: Instant) {
        self.last_arrival = self.last_arrival.max(now);
    }

    /// A message arrived on the control channel.
    pub(crate) fn on_control(&mut self, msg: Message) -> Result<(), Error> {
        match msg {
            Message::Finish { count } => {
                self.finish
                    .said(count, self.window.arrived(), self.resumable)?;
                // Nothing more to tell the sender: let it go (with resumption, once every
                // counted message is here).
                self.let_sender_go_when_done();
                Ok(())
            }
            Message::Reject { reason } => Err(Error::Rejected(reason)),
            other => Err(Error::Protocol(ProtocolViolation::Unexpected {
                expected: "Finish or Reject",
                got: other.name(),
            })),
        }
    }

    /// The control connection reached end of file (or was reset): `lost` says which.
    pub(crate) fn on_control_closed(&mut self, lost: Lost) -> Result<(), Error> {
        self.ends.close_control();
        if self.finish.sender_may_close(self.resumable) {
            // The sender may go once it said Finish; the messages it counted are on their way
            // (with resumption: all here). Resumable and not all here, the close is a break.
            return Ok(());
        }
        // Lost before Finish. Nothing that already arrived is dropped: `next` delivers it
        // first, then reports the loss (as after a closed data path).
        if self.ready.is_empty() {
            return Err(self.lost(lost));
        }
        self.ends.hold_control_loss(lost);
        Ok(())
    }

    /// Resumable: Finish came and every message it counted arrived, so a data path that
    /// closes or fails now is the end, not a break.
    pub(crate) fn has_everything(&self) -> bool {
        self.finish
            .count()
            .is_some_and(|count| self.window.arrived() == count)
    }

    /// Resumable and ended: whether the sender was let go (the driver waits for it to close).
    #[cfg(test)]
    pub(crate) fn let_sender_go(&self) -> bool {
        self.finish.let_go()
    }

    /// Whether the sender said Finish (it may be waiting for us to let it go).
    pub(crate) fn finish_known(&self) -> bool {
        self.finish.is_known()
    }

    /// Whether the session resumes after a break.
    pub(crate) fn is_resumable(&self) -> bool {
        self.resumable
    }

    /// The data path closed (the peer closed it, or it failed as a closed path does).
    pub(crate) fn on_data_closed(&mut self, now: Instant) {
        self.ends.close_data(now);
    }

    /// The data path failed (not a plain close). After Finish the sender may tear its side
    /// down at any time (RDMA reports the receives it flushes as failures): that is a closed
    /// data path, and every counted message has arrived or is lost. Returns whether it was
    /// taken so; before Finish the driver looks for the sender's explanation instead.
    pub(crate) fn on_data_failed(&mut self, now: Instant) -> bool {
        if !self.finish.is_known() {
            return false;
        }
        self.on_data_closed(now);
        true
    }

    /// The data path broke, or carrying out an action failed as a break does (`error`: why, as
    /// the driver found it). Nothing that arrived is dropped: `next` delivers what is ready
    /// first and then returns `error` (the first one, when more come meanwhile). A resume
    /// forgets it.
    pub(crate) fn on_data_broken(&mut self, error: Error) {
        self.ends.break_data(error);
    }

    /// Whether the data path broke and the break waits for the messages before it to be
    /// delivered (do not poll the data path).
    pub(crate) fn data_broken(&self) -> bool {
        self.ends.data_broken.is_some()
    }

    /// The application is done with the message it holds: its slot is posted again, and
    /// credits announced when due.
    fn release(&mut self) -> Result<(), Error> {
        let Some(msg) = self.held.take() else {
            return Ok(());
        };
        let seq = self
            .window
            .release_oldest()
            .map_err(|e| Error::Internal(format!("receive window: {e}")))?;
        debug_assert_eq!(self.window.slot_of(seq), msg.slot_index());
        self.actions
            .push_back(ReceiverAction::Repost(msg.into_slot()));
        self.queue_credit();
        Ok(())
    }

    /// Once half the window (rounded up) is released and unannounced, announces it. Nothing
    /// after Finish or once the sender is lost.
    fn queue_credit(&mut self) {
        if self.finish.is_known() || self.ends.control_lost() || self.phase != Phase::Open {
            return;
        }
        let released = self.window.released();
        let unannounced = released - self.announced;
        if unannounced < self.batch {
            return;
        }
        self.announced = released;
        self.actions.push_back(match self.credit_route {
            CreditRoute::ControlChannel => ReceiverAction::AnnounceCredit { released },
            CreditRoute::InBand => ReceiverAction::ReturnCredits {
                count: usize::try_from(unannounced).unwrap_or(usize::MAX),
            },
        });
    }

    /// Releases the message the application held, then says what to do next: deliver the
    /// next message (now held), end of stream, or wait (until [`ReceiverCore::poll_timeout`]
    /// at most). Run the queued actions after it.
    pub(crate) fn next(&mut self) -> Result<RecvStep, Error> {
        match self.phase {
            Phase::Open => {}
            // The resume's own schedule bounds the wait (`resume::Reconnect`, `Parked`).
            Phase::Resuming => return Ok(RecvStep::Wait),
            Phase::Ended => return Ok(RecvStep::End),
            Phase::Failed => return Err(Error::Closed),
        }
        self.release()?;
        if let Some(msg) = self.ready.pop_front() {
            self.delivered += 1;
            self.bytes += (msg.len() as u64).saturating_sub(self.trailer);
            self.held = Some(msg);
            return Ok(RecvStep::Deliver);
        }
        if let Some(count) = self.finish.count() {
            if self.delivered < count {
                if self.ends.data_closed_at.is_some() {
                    return Err(self.lost(Lost::closed("the data path closed")));
                }
            } else if self.finish.may_end(self.resumable) {
                self.phase = Phase::Ended;
                self.actions.push_back(ReceiverAction::CloseDataPath);
                return Ok(RecvStep::End);
            }
            // Resumed with everything here: the end waits for the sender's Finish on this
            // path, where it is let go first; closing the data path before it would look like
            // a break to a sender still sending its Finish.
        }
        if let Some(broken) = self.ends.take_break() {
            return Err(broken);
        }
        if let Some(lost) = self.ends.take_control_loss() {
            return Err(self.lost(lost));
        }
        Ok(RecvStep::Wait)
    }

    /// The data path broke (and was torn down: nothing more arrives on it) and the session
    /// will resume: what arrived is kept; returns our counts for the resume handshake.
    ///
    /// # Errors
    /// [`Error::Closed`] after the session ended; [`Error::Internal`] without resumption.
    pub(crate) fn begin_resume(&mut self) -> Result<ReceiverPosition, Error> {
        if !self.resumable {
            return Err(Error::Internal(
                "resuming a receiver without resumption".to_owned(),
            ));
        }
        // Ended too: the stream is complete here, but the sender may not have seen us let it
        // go (the control connection broke right then); it comes back to hear it again.
        if !matches!(self.phase, Phase::Open | Phase::Resuming | Phase::Ended) {
            return Err(Error::Closed);
        }
        self.phase = Phase::Resuming;
        // The break (wherever the driver found it) is repaired by this resume.
        self.ends.repair_break();
        Ok(ReceiverPosition {
            arrived: self.window.arrived(),
            released: self.window.released(),
        })
    }

    /// The resume handshake completed at `now` with the counts [`ReceiverCore::begin_resume`]
    /// gave: the releases told count as announced, Finish is expected again on the new path,
    /// the data path's closes and losses seen before are forgotten.
    ///
    /// # Errors
    /// Not resuming: [`Error::Internal`].
    pub(crate) fn resumed(&mut self, told: ReceiverPosition, now: Instant) -> Result<(), Error> {
        if self.phase != Phase::Resuming {
            return Err(Error::Internal("resumed without begin_resume".to_owned()));
        }
        self.phase = Phase::Open;
        self.announced = told.released;
        // Credits queued for the old path are in the sender's window already (the releases
        // told); announcing them again would count them twice.
        self.actions.retain(|a| {
            !matches!(
                a,
                ReceiverAction::AnnounceCredit { .. } | ReceiverAction::ReturnCredits { .. }
            )
        });
        // Finish is expected again on the new path, and the sender let go again once it came
        // there.
        self.finish.new_path();
        self.ends.new_path();
        self.last_arrival = now;
        Ok(())
    }

    /// The next deadline while waiting: the end of the grace after a closed data path, of the
    /// progress wait after Finish, of the idle timeout. Pure.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.phase != Phase::Open {
            return None;
        }
        let grace = self
            .ends
            .data_closed_at
            .map(|closed| deadline_after(closed, FINISH_GRACE));
        let progress = self
            .finish
            .count()
            .map(|_| deadline_after(self.last_arrival, FINISH_PROGRESS));
        let idle = self
            .idle_timeout
            .map(|idle| deadline_after(self.last_arrival, idle));
        earliest(earliest(grace, progress), idle)
    }

    /// Applies whatever deadline passed by `now` (only while nothing is ready to deliver).
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        if self.phase != Phase::Open || !self.ready.is_empty() {
            return Ok(());
        }
        if let Some(closed) = self.ends.data_closed_at {
            if now >= deadline_after(closed, FINISH_GRACE) {
                return Err(self.lost(Lost::closed("the data path closed")));
            }
        }
        if self.finish.is_known() && now >= deadline_after(self.last_arrival, FINISH_PROGRESS) {
            return Err(self.lost(Lost::closed(&format!(
                "no message for {} s after Finish",
                FINISH_PROGRESS.as_secs()
            ))));
        }
        if let Some(idle) = self.idle_timeout {
            if now >= deadline_after(self.last_arrival, idle) {
                return Err(Error::IdleTimeout {
                    seconds: idle.as_secs_f64(),
                    messages: self.window.arrived(),
                });
            }
        }
        Ok(())
    }

    /// The peer-lost error, with the count of what arrived and, after Finish, what is missing.
    fn lost(&self, mut lost: Lost) -> Error {
        let arrived = self.window.arrived();
        if let Some(count) = self.finish.count() {
            lost.reason = format!(
                "{} with {} of {count} message(s) still missing",
                lost.reason,
                count.saturating_sub(arrived)
            );
        }
        lost.into_error(arrived)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    fn receiver(slots: u32, idle: Option<Duration>, now: Instant) -> ReceiverCore {
        ReceiverCore::new(slots, CreditRoute::ControlChannel, idle, now)
    }

    fn land(core: &mut ReceiverCore, slot: usize, len: usize, now: Instant) -> Result<(), Error> {
        core.on_arrival(Arrived::for_test(slot, len), now)
    }

    /// Asks for the next message, which must be delivered: (slot, len).
    fn deliver(core: &mut ReceiverCore) -> (usize, usize) {
        match core.next().unwrap() {
            RecvStep::Deliver => {
                let held = core.held().expect("a held message");
                (held.slot_index(), held.len())
            }
            other => panic!("expected a delivery, got {other:?}"),
        }
    }

    /// The actions queued so far, with reposts shown by slot index.
    fn actions(core: &mut ReceiverCore) -> Vec<String> {
        std::iter::from_fn(|| core.poll_action())
            .map(|a| match a {
                ReceiverAction::Repost(slot) => format!("repost {}", slot.index()),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_message_that_fails_its_check_is_not_delivered_and_the_sender_is_told() {
        let now = t0();
        let mut c = receiver(2, None, now).with_trailer(4);
        land(&mut c, 0, 9, now).unwrap();
        land(&mut c, 1, 9, now).unwrap();
        assert_eq!(deliver(&mut c), (0, 9));
        assert_eq!(
            (c.delivered(), c.bytes()),
            (1, 5),
            "the trailer is not payload"
        );
        assert_eq!(deliver(&mut c), (1, 9));
        actions(&mut c);
        c.fail_held(&Error::ChecksumMismatch {
            message: 1,
            detail: "CRC32C differs".into(),
        });
        assert_eq!(
            (c.delivered(), c.bytes()),
            (1, 5),
            "message 1 was never delivered"
        );
        let after = actions(&mut c);
        assert!(
            after[0].contains("message 1 failed its checksum"),
            "the Reject names the message: {after:?}"
        );
        assert_eq!(after[1..], ["CloseDataPath"]);
        assert!(matches!(c.next(), Err(Error::Closed)));
    }

    fn resumable(slots: u32, now: Instant) -> ReceiverCore {
        receiver(slots, None, now).resumable()
    }

    #[test]
    fn a_resumable_receiver_lets_the_sender_go_only_once_every_counted_message_arrived() {
        let now = t0();
        let mut r = resumable(4, now);
        land(&mut r, 0, 1, now).unwrap();
        r.on_control(Message::Finish { count: 2 }).unwrap();
        assert!(actions(&mut r).is_empty(), "message 1 is still on its way");
        land(&mut r, 1, 1, now).unwrap();
        assert_eq!(actions(&mut r), vec!["ShutdownControlWrite"]);
        // Without resumption the sender goes at Finish, as before.
        let mut plain = receiver(4, None, now);
        land(&mut plain, 0, 1, now).unwrap();
        plain.on_control(Message::Finish { count: 2 }).unwrap();
        assert_eq!(actions(&mut plain), vec!["ShutdownControlWrite"]);
    }

    #[test]
    fn a_resume_keeps_what_arrived_and_counts_the_releases_it_told_as_announced() {
        let now = t0();
        let mut r = resumable(4, now);
        for slot in 0..3 {
            land(&mut r, slot, 1, now).unwrap();
        }
        assert_eq!(deliver(&mut r), (0, 1));
        assert_eq!(deliver(&mut r), (1, 1)); // releases message 0 (batch of 2: not announced)
        actions(&mut r);
        let told = r.begin_resume().unwrap();
        assert_eq!((told.arrived, told.released), (3, 1));
        assert_eq!(
            r.next().unwrap(),
            RecvStep::Wait,
            "nothing moves while resuming"
        );
        assert_eq!(
            r.poll_timeout(),
            None,
            "the resume's own schedule bounds it"
        );
        r.resumed(told, now).unwrap();
        // Message 2 arrived before the break: it is delivered, not expected again. Its
        // delivery releases message 1: one release since the one told, under the batch of 2
        // (counted from 0, the batch would be due now).
        assert_eq!(deliver(&mut r), (2, 1));
        assert_eq!(actions(&mut r), vec!["repost 1"]);
        // The next message lands in the slot after the last one that arrived; delivering it
        // releases message 2: a batch since the one told, announced as a running total.
        land(&mut r, 3, 1, now).unwrap();
        assert_eq!(deliver(&mut r), (3, 1));
        assert_eq!(
            actions(&mut r),
            vec!["repost 2", "AnnounceCredit { released: 3 }"]
        );
    }

    #[test]
    fn credits_queued_for_the_broken_path_are_dropped_at_the_resume_and_reposts_kept() {
        let now = t0();
        let mut r = resumable(2, now);
        land(&mut r, 0, 1, now).unwrap();
        land(&mut r, 1, 1, now).unwrap();
        assert_eq!(deliver(&mut r), (0, 1));
        assert_eq!(deliver(&mut r), (1, 1)); // releases message 0: a credit is due
                                             // The break comes before the driver carried the actions out.
        let told = r.begin_resume().unwrap();
        assert_eq!((told.arrived, told.released), (2, 1));
        r.resumed(told, now).unwrap();
        assert_eq!(
            actions(&mut r),
            vec!["repost 0"],
            "the release is counted in the resume; only the slot goes back"
        );
    }

    #[test]
    fn finish_may_come_again_after_a_resume_with_its_count_but_not_twice_on_one_path() {
        let now = t0();
        let mut r = resumable(4, now);
        r.on_control(Message::Finish { count: 3 }).unwrap();
        let told = r.begin_resume().unwrap();
        r.resumed(told, now).unwrap();
        r.on_control(Message::Finish { count: 3 }).unwrap();
        assert!(matches!(
            r.on_control(Message::Finish { count: 3 }),
            Err(Error::Protocol(ProtocolViolation::FinishTwice { .. }))
        ));
        let mut other = resumable(4, now);
        other.on_control(Message::Finish { count: 3 }).unwrap();
        let told = other.begin_resume().unwrap();
        other.resumed(told, now).unwrap();
        assert!(matches!(
            other.on_control(Message::Finish { count: 4 }),
            Err(Error::Protocol(ProtocolViolation::FinishTwice { .. }))
        ));
    }

    #[test]
    fn an_ended_receiver_resumes_to_let_the_sender_go_again_on_the_new_path() {
        let now = t0();
        let mut r = resumable(2, now);
        land(&mut r, 0, 1, now).unwrap();
        r.on_control(Message::Finish { count: 1 }).unwrap();
        assert_eq!(deliver(&mut r), (0, 1));
        assert_eq!(r.next().unwrap(), RecvStep::End);
        assert!(r.let_sender_go());
        actions(&mut r);
        // The control connection broke as we let the sender go: it resumes to hear it again.
        let told = r.begin_resume().unwrap();
        assert_eq!((told.arrived, told.released), (1, 1));
        r.resumed(told, now).unwrap();
        assert!(!r.let_sender_go(), "not let go on the new path yet");
        r.on_control(Message::Finish { count: 1 }).unwrap();
        assert_eq!(actions(&mut r), vec!["ShutdownControlWrite"]);
        assert_eq!(
            r.next().unwrap(),
            RecvStep::End,
            "still nothing past the count"
        );
    }

    #[test]
    fn a_resumed_receiver_with_every_message_ends_only_after_finish_on_the_new_path() {
        let now = t0();
        let mut r = resumable(4, now);
        land(&mut r, 0, 1, now).unwrap();
        r.on_control(Message::Finish { count: 2 }).unwrap();
        let told = r.begin_resume().unwrap();
        r.resumed(told, now).unwrap();
        land(&mut r, 1, 1, now).unwrap();
        assert_eq!(deliver(&mut r), (0, 1));
        assert_eq!(deliver(&mut r), (1, 1));
        assert_eq!(
            r.next().unwrap(),
            RecvStep::Wait,
            "the data path stays open until the sender's Finish on this path"
        );
        assert!(!actions(&mut r).contains(&"CloseDataPath".to_owned()));
        r.on_control(Message::Finish { count: 2 }).unwrap();
        assert_eq!(actions(&mut r), vec!["ShutdownControlWrite"]);
        assert_eq!(r.next().unwrap(), RecvStep::End);
        assert_eq!(actions(&mut r), vec!["CloseDataPath"]);
    }

    #[test]
    fn only_a_resumable_running_receiver_resumes() {
        let now = t0();
        assert!(matches!(
            receiver(2, None, now).begin_resume(),
            Err(Error::Internal(_))
        ));
        let mut r = resumable(2, now);
        r.abort("done");
        assert!(matches!(r.begin_resume(), Err(Error::Closed)));
        let mut r = resumable(2, now);
        let told = ReceiverPosition {
            arrived: 0,
            released: 0,
        };
        assert!(matches!(r.resumed(told, now), Err(Error::Internal(_))));
    }

    #[test]
    fn delivers_in_order_reposts_what_was_released_then_ends_at_the_count() {
        let now = t0();
        let mut c = receiver(2, None, now);
        land(&mut c, 0, 5, now).unwrap();
        land(&mut c, 1, 6, now).unwrap();
        assert_eq!(deliver(&mut c), (0, 5));
        assert!(
            actions(&mut c).is_empty(),
            "the first message is still held"
        );
        assert_eq!(deliver(&mut c), (1, 6));
        assert_eq!(
            actions(&mut c),
            ["repost 0", "AnnounceCredit { released: 1 }"]
        );
        c.on_control(Message::Finish { count: 2 }).unwrap();
        assert_eq!(actions(&mut c), ["ShutdownControlWrite"]);
        assert_eq!(c.next().unwrap(), RecvStep::End);
        assert_eq!(
            actions(&mut c),
            ["repost 1", "CloseDataPath"],
            "no credit after Finish"
        );
        assert_eq!(c.next().unwrap(), RecvStep::End, "end is sticky");
        assert_eq!((c.delivered(), c.bytes()), (2, 11));
    }

    #[test]
    fn a_message_past_finish_is_a_violation_and_never_delivered() {
        let now = t0();
        let mut c = receiver(2, None, now);
        land(&mut c, 0, 1, now).unwrap();
        c.on_control(Message::Finish { count: 1 }).unwrap();
        let e = land(&mut c, 1, 1, now).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Protocol(ProtocolViolation::PastFinish { count: 1 })
            ),
            "{e}"
        );
        assert_eq!(deliver(&mut c), (0, 1));
    }

    #[test]
    fn finish_below_arrivals_and_finish_twice_are_violations() {
        let now = t0();
        let mut c = receiver(2, None, now);
        land(&mut c, 0, 1, now).unwrap();
        land(&mut c, 1, 1, now).unwrap();
        let e = c.on_control(Message::Finish { count: 1 }).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol violation by peer: Finish says 1 message(s) but 2 arrived"
        );
        let mut c = receiver(2, None, now);
        c.on_control(Message::Finish { count: 3 }).unwrap();
        let e = c.on_control(Message::Finish { count: 3 }).unwrap_err();
        assert!(e.to_string().contains("Finish sent twice"), "{e}");
    }

    #[test]
    fn other_control_messages_are_violations() {
        let now = t0();
        for msg in [Message::Ready, Message::Credit { released: 0 }] {
            let mut c = receiver(2, None, now);
            let e = c.on_control(msg).unwrap_err();
            assert!(matches!(e, Error::Protocol(_)), "{e}");
        }
    }

    #[test]
    fn overrun_is_a_violation() {
        let now = t0();
        let mut c = receiver(1, None, now);
        land(&mut c, 0, 1, now).unwrap();
        let e = land(&mut c, 0, 1, now).unwrap_err();
        assert!(
            matches!(e, Error::Protocol(ProtocolViolation::CreditOverrun { .. })),
            "{e}"
        );
    }

    #[test]
    fn credits_are_batched_by_half_window() {
        let now = t0();
        let mut c = receiver(8, None, now);
        for slot in 0..8 {
            land(&mut c, slot, 0, now).unwrap();
        }
        let mut announced = Vec::new();
        // Each `next` releases the message delivered by the one before.
        deliver(&mut c);
        for _ in 0..7 {
            deliver(&mut c);
            announced.extend(
                actions(&mut c)
                    .into_iter()
                    .filter(|a| !a.starts_with("repost")),
            );
        }
        assert_eq!(
            announced,
            ["AnnounceCredit { released: 4 }"],
            "half the window"
        );
        c.next().unwrap();
        assert_eq!(
            actions(&mut c),
            ["repost 7", "AnnounceCredit { released: 8 }"],
            "the next half window"
        );
    }

    #[test]
    fn inband_credits_return_exactly_what_was_released_since_the_last_announcement() {
        let now = t0();
        let mut c = ReceiverCore::new(4, CreditRoute::InBand, None, now);
        for slot in 0..4 {
            land(&mut c, slot, 0, now).unwrap();
        }
        for _ in 0..3 {
            deliver(&mut c);
        }
        assert_eq!(
            actions(&mut c),
            ["repost 0", "repost 1", "ReturnCredits { count: 2 }"]
        );
    }

    #[test]
    fn waits_after_finish_and_after_close_are_bounded() {
        let now = t0();
        let mut c = receiver(2, None, now);
        c.on_control(Message::Finish { count: 1 }).unwrap();
        assert_eq!(c.next().unwrap(), RecvStep::Wait);
        assert_eq!(c.poll_timeout(), Some(now + FINISH_PROGRESS));
        c.handle_timeout(now + FINISH_PROGRESS / 2).unwrap();
        let e = c.handle_timeout(now + FINISH_PROGRESS).unwrap_err();
        assert!(
            e.to_string().contains("1 of 1 message(s) still missing"),
            "{e}"
        );

        let mut c = receiver(2, None, now);
        c.on_data_closed(now);
        assert_eq!(c.next().unwrap(), RecvStep::Wait);
        assert_eq!(c.poll_timeout(), Some(now + FINISH_GRACE));
        let e = c.handle_timeout(now + FINISH_GRACE).unwrap_err();
        assert!(matches!(e, Error::PeerLost { messages: 0, .. }), "{e}");
    }

    #[test]
    fn messages_that_arrived_before_a_loss_are_delivered_then_the_loss_is_reported() {
        let now = t0();
        let mut c = receiver(2, None, now);
        land(&mut c, 0, 3, now).unwrap();
        land(&mut c, 1, 4, now).unwrap();
        c.on_control_closed(Lost::closed("reset")).unwrap();
        assert_eq!(deliver(&mut c), (0, 3));
        assert_eq!(deliver(&mut c), (1, 4));
        assert_eq!(
            actions(&mut c),
            ["repost 0"],
            "nothing is announced to a lost sender"
        );
        let e = c.next().unwrap_err();
        assert!(matches!(e, Error::PeerLost { messages: 2, .. }), "{e}");
    }

    #[test]
    fn messages_that_arrived_before_the_data_path_broke_are_delivered_then_the_break() {
        let now = t0();
        let mut c = receiver(2, None, now);
        land(&mut c, 0, 3, now).unwrap();
        c.on_data_broken(Error::Closed);
        assert!(c.data_broken(), "the driver stops polling a broken path");
        c.on_data_broken(Error::Interrupted);
        assert_eq!(deliver(&mut c), (0, 3));
        assert!(matches!(c.next(), Err(Error::Closed)), "the first break");
        assert!(!c.data_broken(), "reported once");
        // Nothing ready: the break comes back at once.
        let mut c = receiver(2, None, now);
        c.on_data_broken(Error::Closed);
        assert!(matches!(c.next(), Err(Error::Closed)));
        // A resume repairs a break still waiting behind undelivered messages.
        let mut c = receiver(2, None, now).resumable();
        land(&mut c, 0, 3, now).unwrap();
        c.on_data_broken(Error::Closed);
        let told = c.begin_resume().unwrap();
        c.resumed(told, now).unwrap();
        assert!(!c.data_broken());
        assert_eq!(deliver(&mut c), (0, 3));
        assert_eq!(c.next().unwrap(), RecvStep::Wait);
    }

    #[test]
    fn control_close_before_finish_is_peer_loss_after_finish_it_is_fine() {
        let now = t0();
        let mut c = receiver(2, None, now);
        let e = c.on_control_closed(Lost::closed("closed")).unwrap_err();
        assert!(matches!(e, Error::PeerLost { messages: 0, .. }), "{e}");
        let mut c = receiver(2, None, now);
        c.on_control(Message::Finish { count: 0 }).unwrap();
        c.on_control_closed(Lost::closed("closed")).unwrap();
        assert_eq!(c.next().unwrap(), RecvStep::End);
    }

    #[test]
    fn a_data_path_failing_after_finish_is_a_close_not_an_error() {
        let now = t0();
        let mut c = receiver(2, None, now);
        land(&mut c, 0, 1, now).unwrap();
        assert!(
            !c.on_data_failed(now),
            "before Finish the driver asks the sender why"
        );
        c.on_control(Message::Finish { count: 1 }).unwrap();
        assert!(c.on_data_failed(now));
        assert_eq!(deliver(&mut c), (0, 1));
        assert_eq!(
            c.next().unwrap(),
            RecvStep::End,
            "every counted message had arrived"
        );
        let mut c = receiver(2, None, now);
        c.on_control(Message::Finish { count: 1 }).unwrap();
        assert!(c.on_data_failed(now));
        let e = c.next().unwrap_err();
        assert!(
            e.to_string().contains("1 of 1 message(s) still missing"),
            "{e}"
        );
    }

    #[test]
    fn idle_timeout_ends_a_silent_session() {
        let now = t0();
        let idle = Duration::from_secs(3);
        let mut c = receiver(2, Some(idle), now);
        assert_eq!(c.next().unwrap(), RecvStep::Wait);
        assert_eq!(c.poll_timeout(), Some(now + idle));
        let e = c.handle_timeout(now + idle).unwrap_err();
        assert!(matches!(e, Error::IdleTimeout { .. }), "{e}");
    }

    #[test]
    fn failures_reject_the_sender_unless_it_ended_the_session_itself() {
        let now = t0();
        let mut c = receiver(2, None, now);
        c.on_error(&Error::Interrupted);
        assert!(c.is_open());
        c.on_error(&Error::Protocol(ProtocolViolation::PastFinish { count: 1 }));
        let got = actions(&mut c);
        assert!(got[0].starts_with("Reject(\"protocol violation"), "{got:?}");
        assert_eq!(got[1], "CloseDataPath");
        let mut c = receiver(2, None, now);
        c.on_error(&Lost::closed("gone").into_error(0));
        assert_eq!(actions(&mut c), ["CloseDataPath"]);
    }
}
