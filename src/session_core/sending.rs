//! The sender's state machine.
//!
//! Events in: a control message ([`SenderCore::on_control`]), what the data path reported (a
//! send completed, an in-band credit: [`SenderCore::on_send_event`]), the control path
//! closed, a deadline passed ([`SenderCore::handle_timeout`]), the application's send, finish
//! and abort. Out: which staging slot the next message goes to (with its sequence number), the
//! next deadline ([`SenderCore::poll_timeout`], pure), what `finish` waits for
//! ([`SenderCore::finish_step`], pure), and actions for the driver to carry out
//! ([`SenderCore::poll_action`]: send Finish, reject with a reason, close the data path).
//!
//! Rules kept here:
//! - at most `credits` messages unreleased by the receiver, and one message per free staging
//!   slot (the slots are tokens: a slot is free exactly when the core holds its token); a
//!   credit that goes backwards or past what was sent is a protocol violation;
//! - the only control messages a sender accepts are Credit and Reject;
//! - Finish{count} goes out only after every send completed (within [`FINISH_LINGER`]); then
//!   the sender waits at most [`FINISH_LINGER`] for the receiver to close the control
//!   connection;
//! - with an idle timeout, no credit for that long while waiting for one ends the session;
//! - after a failure: the failure policy of [`super::on_failure`] (reject the peer for our own
//!   failures and its violations, only close after its Reject or loss);
//! - with resumption ([`SenderCore::keeping_messages`]): a
//!   staging slot is free again only once its message was released *and* its send completed
//!   (a [`SentLedger`]), Finish goes out once every send completed, and a resume
//!   ([`SenderCore::begin_resume`], [`SenderCore::resume`]) hands back, in order and in their
//!   own slots, the messages that had not arrived, restarts the window from the receiver's
//!   releases, and sends a Finish that was under way again with the same count.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::resume::{ResumePlan, SenderPosition, SentLedger};
use super::{on_failure, FINISH_LINGER};
use crate::net::Lost;
use crate::proto::{CreditError, Message, SendWindow};
use crate::time::deadline_after;
use crate::transport::{CreditRoute, SendEvent, StagingSlot};
use crate::Error;
use crate::ProtocolViolation;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// `finish` was called: waiting for every send to complete, until the deadline.
    Draining {
        until: Instant,
    },
    /// Finish was sent; waiting for the receiver to close, until the deadline.
    Lingering {
        until: Instant,
    },
    /// The data path broke; the session is being resumed (`finishing`: `finish` had been
    /// called).
    Resuming {
        finishing: bool,
    },
    Done,
    Failed,
}

/// The sender's kept messages (resumption on): which slot holds each one, and the tokens of
/// kept slots whose sends completed (or that a torn-down data path gave back).
#[derive(Debug)]
struct KeptMessages {
    ledger: SentLedger<usize>,
    tokens: Vec<Option<StagingSlot>>,
    /// Slot indexes the ledger just freed (kept between calls: no allocation per message).
    freed: Vec<usize>,
}

impl KeptMessages {
    /// Moves the freed slots' tokens to `free`.
    fn release_into(&mut self, free: &mut Vec<StagingSlot>) -> Result<(), Error> {
        for index in self.freed.drain(..) {
            let token = self
                .tokens
                .get_mut(index)
                .and_then(Option::take)
                .ok_or_else(|| {
                    Error::Internal(format!("kept slot {index} freed without its token"))
                })?;
            free.push(token);
        }
        Ok(())
    }

    /// Holds the token of slot `slot` until the ledger frees it.
    fn hold(&mut self, slot: StagingSlot) -> Result<(), Error> {
        let index = slot.index();
        match self.tokens.get_mut(index) {
            Some(entry @ None) => {
                *entry = Some(slot);
                Ok(())
            }
            _ => Err(Error::Internal(format!(
                "staging slot {index} came back twice or does not exist"
            ))),
        }
    }
}

/// What the sender's finish waits for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishStep {
    /// Sends are still in flight: wait for completions.
    Drain,
    /// Finish is out: wait for the receiver to close the control connection.
    Linger,
    /// The session is over.
    Done,
}

/// What the driver must do for the sender.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SenderAction {
    /// Send Finish{count} on the control channel, then call [`SenderCore::on_finish_sent`].
    SendFinish {
        /// Messages sent in this session.
        count: u64,
    },
    /// Tell the receiver why the session ends (a Reject on the control channel).
    Reject(String),
    /// Tear the data path down.
    CloseDataPath,
}

/// The sender's half of a session, without I/O.
#[derive(Debug)]
pub(crate) struct SenderCore {
    window: SendWindow,
    free_staging: Vec<StagingSlot>,
    staging_slots: usize,
    credit_route: CreditRoute,
    control_closed: bool,
    last_credit: Instant,
    idle_timeout: Option<Duration>,
    phase: Phase,
    actions: VecDeque<SenderAction>,
    /// With resumption: the messages kept until released.
    kept: Option<KeptMessages>,
}

impl SenderCore {
    /// A sender with `credits` credits (the receiver's slots) and its staging slots.
    pub(crate) fn new(
        credits: u32,
        staging: Vec<StagingSlot>,
        credit_route: CreditRoute,
        idle_timeout: Option<Duration>,
        now: Instant,
    ) -> Self {
        let mut free_staging = staging;
        // Taken from the back: slot 0 first.
        free_staging.reverse();
        Self {
            window: SendWindow::new(credits),
            staging_slots: free_staging.len(),
            free_staging,
            credit_route,
            control_closed: false,
            last_credit: now,
            idle_timeout,
            phase: Phase::Open,
            actions: VecDeque::new(),
            kept: None,
        }
    }

    /// Keeps every message until the receiver released it, so that a resumed session can
    /// send again what the broken path lost (docs/design.md, "Resuming a session").
    pub(crate) fn keeping_messages(mut self) -> Self {
        self.kept = Some(KeptMessages {
            ledger: SentLedger::default(),
            tokens: (0..self.staging_slots).map(|_| None).collect(),
            freed: Vec::with_capacity(self.staging_slots),
        });
        self
    }

    /// Whether each message stays in its slot until released ([`SenderCore::keeping_messages`]).
    pub(crate) fn keeps_messages(&self) -> bool {
        self.kept.is_some()
    }

    /// Messages sent so far.
    pub(crate) fn sent(&self) -> u64 {
        self.window.sent()
    }

    /// Messages the receiver released so far (the count a peer-lost error reports).
    pub(crate) fn released(&self) -> u64 {
        self.window.released()
    }

    /// True once the control connection reached end of file (stop watching it).
    pub(crate) fn control_closed(&self) -> bool {
        self.control_closed
    }

    /// Whether `send` may still be called.
    pub(crate) fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Whether Finish is out and the sender waits for the receiver's close.
    pub(crate) fn is_lingering(&self) -> bool {
        matches!(self.phase, Phase::Lingering { .. })
    }

    /// The next thing the driver must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<SenderAction> {
        self.actions.pop_front()
    }

    /// Whether actions are waiting for the driver.
    pub(crate) fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// An error ended the operation: applies the failure policy (see [`on_failure`]).
    pub(crate) fn on_error(&mut self, e: &Error) {
        if let Some(reject) = on_failure(e, "sender").ends() {
            self.end(reject);
        }
    }

    /// The application aborts: the receiver is told why.
    pub(crate) fn abort(&mut self, reason: &str) {
        self.end(Some(reason.to_owned()));
    }

    fn end(&mut self, reject: Option<String>) {
        if matches!(self.phase, Phase::Failed | Phase::Done) {
            return;
        }
        // Only a session still running tells the peer; one that finished just closes.
        let running = matches!(
            self.phase,
            Phase::Open | Phase::Draining { .. } | Phase::Resuming { .. }
        );
        self.phase = Phase::Failed;
        if let (Some(reason), true) = (reject, running) {
            self.actions.push_back(SenderAction::Reject(reason));
        }
        self.actions.push_back(SenderAction::CloseDataPath);
    }

    /// A control message from the receiver.
    pub(crate) fn on_control(&mut self, msg: Message, now: Instant) -> Result<(), Error> {
        match msg {
            Message::Credit { released } => self.on_released(released, now),
            Message::Reject { reason } => Err(Error::Rejected(reason)),
            other => Err(Error::Protocol(ProtocolViolation::Unexpected {
                expected: "Credit or Reject",
                got: other.name(),
            })),
        }
    }

    /// What the data path reported: a send completed (its staging slot is free again) or,
    /// with in-band credits, one more message released.
    pub(crate) fn on_send_event(&mut self, event: SendEvent, now: Instant) -> Result<(), Error> {
        match event {
            SendEvent::Sent(slot) => {
                match self.kept.as_mut() {
                    None => self.free_staging.push(slot),
                    Some(kept) => {
                        let number = kept.ledger.next_to_complete();
                        if kept.ledger.slot_of(number) != Some(&slot.index()) {
                            return Err(Error::Internal(format!(
                                "staging slot {} completed while message {number} was next",
                                slot.index()
                            )));
                        }
                        kept.hold(slot)?;
                        kept.ledger.on_completed(number, &mut kept.freed)?;
                        kept.release_into(&mut self.free_staging)?;
                    }
                }
                self.queue_finish_when_drained();
                Ok(())
            }
            SendEvent::Credits(n) if self.credit_route == CreditRoute::InBand => {
                self.on_released(self.window.released() + u64::from(n), now)
            }
            SendEvent::Credits(_) => Err(Error::Internal(
                "an in-band credit on a data path whose credits travel on the control channel"
                    .to_owned(),
            )),
        }
    }

    /// Credits released since the driver's last wait were stamped with an earlier reading of
    /// the clock ([`crate::time::Stamp`]): they count as released at `now`, the time read before
    /// the next wait.
    pub(crate) fn restamp_last_credit(&mut self, now: Instant) {
        self.last_credit = self.last_credit.max(now);
    }

    fn on_released(&mut self, released: u64, now: Instant) -> Result<(), Error> {
        self.window.on_credit(released).map_err(|e| {
            Error::Protocol(match e {
                CreditError::Invented { released, sent } => {
                    ProtocolViolation::CreditInvented { released, sent }
                }
                CreditError::Regressed { previous, released } => {
                    ProtocolViolation::CreditRegressed { previous, released }
                }
                CreditError::Overrun { capacity } => ProtocolViolation::CreditOverrun { capacity },
                CreditError::NothingToRelease => ProtocolViolation::Unexpected {
                    expected: "a credit for a sent message",
                    got: "Credit",
                },
            })
        })?;
        if let Some(kept) = self.kept.as_mut() {
            kept.ledger.on_released(released, &mut kept.freed);
            kept.release_into(&mut self.free_staging)?;
        }
        self.last_credit = now;
        Ok(())
    }

    /// The control connection reached end of file or was reset: the end of a lingering
    /// finish, otherwise the receiver is gone.
    pub(crate) fn on_control_closed(&mut self, lost: Lost) -> Result<(), Error> {
        self.control_closed = true;
        match self.phase {
            // Keeping messages for a resume, a reset (not the receiver's close) is a break.
            Phase::Lingering { .. } if self.kept.is_some() && lost.cause.is_some() => {
                Err(lost.into_error(self.window.released()))
            }
            Phase::Lingering { .. } | Phase::Done => {
                self.phase = Phase::Done;
                Ok(())
            }
            _ => Err(lost.into_error(self.window.released())),
        }
    }

    /// Takes a credit and a staging slot for the next message: `(sequence, slot)`, or `None`
    /// when the sender must wait (until [`SenderCore::poll_timeout`] at most).
    pub(crate) fn try_take(&mut self) -> Result<Option<(u64, StagingSlot)>, Error> {
        if matches!(self.phase, Phase::Resuming { .. }) {
            return Ok(None);
        }
        if self.phase != Phase::Open {
            return Err(Error::Closed);
        }
        if self.window.available() == 0 {
            return Ok(None);
        }
        let Some(slot) = self.free_staging.pop() else {
            return Ok(None);
        };
        match self.window.try_take() {
            Some(seq) => {
                if let Some(kept) = self.kept.as_mut() {
                    kept.ledger.on_taken(seq, slot.index())?;
                }
                Ok(Some((seq, slot)))
            }
            None => {
                self.free_staging.push(slot);
                Err(Error::Internal(
                    "credit window closed after saying it was open".to_owned(),
                ))
            }
        }
    }

    /// Returns what [`SenderCore::try_take`] gave for a message that was never posted (the
    /// application's fill panicked): the credit is open again, the staging slot free, and the
    /// count a later Finish announces does not include it.
    pub(crate) fn give_back(&mut self, seq: u64, slot: StagingSlot) -> Result<(), Error> {
        if self.kept.as_mut().is_some_and(|k| !k.ledger.untake(seq)) || !self.window.untake(seq) {
            return Err(Error::Internal(format!(
                "give_back of message {seq}, which was not the last taken"
            )));
        }
        self.free_staging.push(slot);
        Ok(())
    }

    /// Whether the control channel must be read for the sender to go on: out of credit, with
    /// credits travelling on it (in band, it is read only when a wait says it is readable).
    pub(crate) fn needs_control_for_credit(&self) -> bool {
        self.credit_route == CreditRoute::ControlChannel && self.window.available() == 0
    }

    fn out_of_credit(&self) -> bool {
        self.window.available() == 0
    }

    /// The next deadline: the idle timeout while out of credit, the end of the drain or of the
    /// linger. Pure: [`SenderCore::handle_timeout`] applies it.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Open => self
                .idle_timeout
                .filter(|_| self.out_of_credit())
                .map(|idle| deadline_after(self.last_credit, idle)),
            Phase::Draining { until } => Some(until),
            Phase::Lingering { until } => Some(until),
            // The resume's own schedule bounds it (`resume::Reconnect`, `resume::Parked`).
            Phase::Resuming { .. } | Phase::Done | Phase::Failed => None,
        }
    }

    /// Applies whatever deadline passed by `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        let Some(deadline) = self.poll_timeout() else {
            return Ok(());
        };
        if now < deadline {
            return Ok(());
        }
        match self.phase {
            Phase::Open => Err(Error::IdleTimeout {
                seconds: self.idle_timeout.unwrap_or_default().as_secs_f64(),
                messages: self.window.released(),
            }),
            Phase::Draining { .. } => Err(Lost::closed(&format!(
                "sends did not complete within {} s",
                FINISH_LINGER.as_secs()
            ))
            .into_error(self.window.released())),
            Phase::Lingering { .. } => {
                log::warn!(
                    "the receiver did not acknowledge end of stream within {} s",
                    FINISH_LINGER.as_secs()
                );
                self.phase = Phase::Done;
                Ok(())
            }
            Phase::Resuming { .. } | Phase::Done | Phase::Failed => Ok(()),
        }
    }

    /// The application ends the stream at `now`: no more sends; Finish goes out once every
    /// send completed (see [`SenderCore::finish_step`]).
    pub(crate) fn begin_finish(&mut self, now: Instant) -> Result<(), Error> {
        if self.phase != Phase::Open {
            return Err(Error::Closed);
        }
        self.phase = Phase::Draining {
            until: deadline_after(now, FINISH_LINGER),
        };
        self.queue_finish_when_drained();
        Ok(())
    }

    fn queue_finish_when_drained(&mut self) {
        // Every send completed: with kept messages, whether or not they were released yet.
        let drained = match &self.kept {
            Some(kept) => kept.ledger.all_completed(),
            None => self.free_staging.len() == self.staging_slots,
        };
        if matches!(self.phase, Phase::Draining { .. })
            && drained
            && !self
                .actions
                .iter()
                .any(|a| matches!(a, SenderAction::SendFinish { .. }))
        {
            self.actions.push_back(SenderAction::SendFinish {
                count: self.window.sent(),
            });
        }
    }

    /// What `finish` waits for now (pure; run the actions first).
    pub(crate) fn finish_step(&self) -> Result<FinishStep, Error> {
        match self.phase {
            Phase::Open => Err(Error::Internal(
                "finish_step before begin_finish".to_owned(),
            )),
            Phase::Draining { .. } | Phase::Resuming { .. } => Ok(FinishStep::Drain),
            Phase::Lingering { .. } => Ok(FinishStep::Linger),
            Phase::Done => Ok(FinishStep::Done),
            Phase::Failed => Err(Error::Closed),
        }
    }

    /// The data path broke (and is being torn down) and the session will resume: nothing is
    /// taken until [`SenderCore::resume`], a Finish not sent yet waits for it. Returns our
    /// counts for the resume handshake.
    ///
    /// # Errors
    /// [`Error::Closed`] after the session ended; [`Error::Internal`] for a sender that keeps
    /// no messages.
    pub(crate) fn begin_resume(&mut self) -> Result<SenderPosition, Error> {
        if self.kept.is_none() {
            return Err(Error::Internal(
                "resuming a sender that keeps no messages".to_owned(),
            ));
        }
        let finishing = match self.phase {
            Phase::Open => false,
            Phase::Draining { .. } | Phase::Lingering { .. } => true,
            Phase::Resuming { finishing } => finishing,
            Phase::Done | Phase::Failed => return Err(Error::Closed),
        };
        self.phase = Phase::Resuming { finishing };
        self.actions
            .retain(|a| !matches!(a, SenderAction::SendFinish { .. }));
        Ok(SenderPosition {
            taken: self.window.sent(),
            released: self.window.released(),
        })
    }

    /// While resuming: the torn-down data path gives back the slot of a send that never
    /// completed.
    ///
    /// # Errors
    /// A slot given back twice, or by a sender that keeps nothing: [`Error::Internal`].
    pub(crate) fn on_reclaimed(&mut self, slot: StagingSlot) -> Result<(), Error> {
        match self.kept.as_mut() {
            Some(kept) => kept.hold(slot),
            None => Err(Error::Internal(
                "a slot given back to a sender that keeps nothing".to_owned(),
            )),
        }
    }

    /// The resume handshake agreed on `plan` at `now` (every slot the old path held was given
    /// back): returns the messages to send again, in order, in their own slots (their bytes
    /// are still there), which the driver posts before any new one. The window restarts from
    /// the receiver's releases; a Finish that was under way goes out again once these
    /// completed, with the same count.
    ///
    /// # Errors
    /// Not resuming, or a slot not given back: [`Error::Internal`].
    pub(crate) fn resume(
        &mut self,
        plan: &ResumePlan,
        now: Instant,
    ) -> Result<Vec<(u64, StagingSlot)>, Error> {
        let Phase::Resuming { finishing } = self.phase else {
            return Err(Error::Internal("resume without begin_resume".to_owned()));
        };
        let again = {
            let Some(kept) = self.kept.as_mut() else {
                return Err(Error::Internal("resuming without kept messages".to_owned()));
            };
            let numbered: Vec<(u64, usize)> = kept
                .ledger
                .resume(plan, &mut kept.freed)?
                .map(|(number, &index)| (number, index))
                .collect();
            kept.release_into(&mut self.free_staging)?;
            let mut again = Vec::with_capacity(numbered.len());
            for (number, index) in numbered {
                let token = kept
                    .tokens
                    .get_mut(index)
                    .and_then(Option::take)
                    .ok_or_else(|| {
                        Error::Internal(format!(
                            "message {number}'s slot {index} was not given back before the resume"
                        ))
                    })?;
                again.push((number, token));
            }
            again
        };
        self.on_released(plan.released, now)?;
        // A resume always runs on a new control connection.
        self.control_closed = false;
        self.phase = if finishing {
            Phase::Draining {
                until: deadline_after(now, FINISH_LINGER),
            }
        } else {
            Phase::Open
        };
        self.queue_finish_when_drained();
        Ok(again)
    }

    /// Finish was handed to the control channel at `now`.
    pub(crate) fn on_finish_sent(&mut self, now: Instant) {
        self.phase = if self.control_closed {
            Phase::Done
        } else {
            Phase::Lingering {
                until: deadline_after(now, FINISH_LINGER),
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staging(n: usize) -> Vec<StagingSlot> {
        (0..n).map(StagingSlot::for_test).collect()
    }

    fn sender(credits: u32, slots: usize, idle: Option<Duration>, now: Instant) -> SenderCore {
        SenderCore::new(
            credits,
            staging(slots),
            CreditRoute::ControlChannel,
            idle,
            now,
        )
    }

    fn take(s: &mut SenderCore) -> Option<(u64, usize)> {
        s.try_take().unwrap().map(|(seq, slot)| (seq, slot.index()))
    }

    fn sent(s: &mut SenderCore, index: usize, now: Instant) {
        let event = SendEvent::Sent(StagingSlot::for_test(index));
        s.on_send_event(event, now).unwrap();
    }

    fn keeping(credits: u32, now: Instant) -> SenderCore {
        sender(credits, credits as usize, None, now).keeping_messages()
    }

    fn plan(resend: std::ops::Range<u64>, released: u64) -> ResumePlan {
        ResumePlan { resend, released }
    }

    #[test]
    fn a_keeping_sender_reuses_a_slot_only_once_its_message_was_released() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        assert_eq!(take(&mut s), Some((0, 0)));
        sent(&mut s, 0, now);
        assert_eq!(take(&mut s), Some((1, 1)), "a credit and a slot are left");
        sent(&mut s, 1, now);
        s.on_control(Message::Credit { released: 0 }, now).unwrap();
        assert_eq!(take(&mut s), None, "both slots keep unreleased messages");
        s.on_control(Message::Credit { released: 1 }, now).unwrap();
        assert_eq!(
            take(&mut s),
            Some((2, 0)),
            "message 0 released: its slot is free"
        );
    }

    #[test]
    fn a_keeping_sender_finishes_once_every_send_completed_released_or_not() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        take(&mut s);
        sent(&mut s, 0, now);
        s.begin_finish(now).unwrap();
        assert_eq!(s.poll_action(), Some(SenderAction::SendFinish { count: 1 }));
    }

    #[test]
    fn a_completion_in_the_wrong_slot_is_our_bug() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        take(&mut s);
        take(&mut s);
        let wrong = s.on_send_event(SendEvent::Sent(StagingSlot::for_test(1)), now);
        assert!(matches!(wrong, Err(Error::Internal(_))), "{wrong:?}");
    }

    #[test]
    fn resuming_hands_back_what_had_not_arrived_in_its_own_slots_in_order() {
        let now = Instant::now();
        let mut s = keeping(3, now);
        for _ in 0..3 {
            take(&mut s);
        }
        sent(&mut s, 0, now);
        let counts = s.begin_resume().unwrap();
        assert_eq!(counts.taken, 3);
        assert_eq!(counts.released, 0);
        assert_eq!(take(&mut s), None, "nothing is taken while resuming");
        // The torn-down path gives back the slots of the two sends that never completed.
        s.on_reclaimed(StagingSlot::for_test(1)).unwrap();
        s.on_reclaimed(StagingSlot::for_test(2)).unwrap();
        // Message 0 and 1 arrived, none released: 2 is sent again (1 stays kept).
        let again = s.resume(&plan(2..3, 0), now).unwrap();
        let again: Vec<(u64, usize)> = again.into_iter().map(|(n, t)| (n, t.index())).collect();
        assert_eq!(again, vec![(2, 2)]);
        assert_eq!(take(&mut s), None, "the window is full");
        s.on_control(Message::Credit { released: 1 }, now).unwrap();
        assert_eq!(
            take(&mut s),
            Some((3, 0)),
            "message 0 released and completed"
        );
        s.on_control(Message::Credit { released: 2 }, now).unwrap();
        assert_eq!(
            take(&mut s),
            Some((4, 1)),
            "message 1 counted as completed: it arrived"
        );
    }

    #[test]
    fn a_finish_under_way_when_the_path_broke_goes_out_again_with_the_same_count() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        take(&mut s);
        sent(&mut s, 0, now);
        s.begin_finish(now).unwrap();
        assert_eq!(s.poll_action(), Some(SenderAction::SendFinish { count: 1 }));
        s.on_finish_sent(now);
        s.begin_resume().unwrap();
        assert_eq!(s.finish_step().unwrap(), FinishStep::Drain);
        s.resume(&plan(1..1, 0), now).unwrap();
        assert_eq!(s.poll_action(), Some(SenderAction::SendFinish { count: 1 }));
    }

    #[test]
    fn a_resume_runs_on_a_new_control_connection_so_the_broken_ones_close_is_forgotten() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        take(&mut s);
        take(&mut s);
        let lost = s.on_control_closed(Lost::closed("reset"));
        assert!(lost.is_err(), "a close before Finish is a break");
        assert!(s.control_closed());
        s.begin_resume().unwrap();
        s.on_reclaimed(StagingSlot::for_test(0)).unwrap();
        s.on_reclaimed(StagingSlot::for_test(1)).unwrap();
        s.resume(&plan(2..2, 2), now).unwrap();
        assert!(
            !s.control_closed(),
            "the new connection is read (its credits)"
        );
        s.on_control(Message::Credit { released: 2 }, now).unwrap();
    }

    #[test]
    fn a_reset_while_lingering_is_a_break_for_a_keeping_sender_and_the_end_otherwise() {
        let now = Instant::now();
        let reset = || Lost {
            reason: "control connection reset".into(),
            cause: Some(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        };
        for keeping_messages in [true, false] {
            let mut s = if keeping_messages {
                keeping(2, now)
            } else {
                sender(2, 2, None, now)
            };
            take(&mut s);
            sent(&mut s, 0, now);
            s.begin_finish(now).unwrap();
            assert_eq!(s.poll_action(), Some(SenderAction::SendFinish { count: 1 }));
            s.on_finish_sent(now);
            assert_eq!(s.on_control_closed(reset()).is_err(), keeping_messages);
            // The receiver's own close (end of file) ends a lingering Finish either way.
            let mut s = if keeping_messages {
                keeping(2, now)
            } else {
                sender(2, 2, None, now)
            };
            s.begin_finish(now).unwrap();
            s.poll_action();
            s.on_finish_sent(now);
            s.on_control_closed(Lost::closed("closed")).unwrap();
            assert_eq!(s.finish_step().unwrap(), FinishStep::Done);
        }
    }

    #[test]
    fn a_resume_before_every_slot_came_back_or_without_kept_messages_is_our_bug() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        take(&mut s);
        s.begin_resume().unwrap();
        assert!(matches!(
            s.resume(&plan(0..1, 0), now),
            Err(Error::Internal(_))
        ));
        let mut plain = sender(2, 2, None, now);
        assert!(matches!(plain.begin_resume(), Err(Error::Internal(_))));
    }

    #[test]
    fn a_panicking_fill_gives_a_kept_message_back_too() {
        let now = Instant::now();
        let mut s = keeping(2, now);
        let (seq, slot) = s.try_take().unwrap().unwrap();
        s.give_back(seq, slot).unwrap();
        assert_eq!(take(&mut s), Some((0, 0)), "the same number and slot again");
    }

    #[test]
    fn credit_and_staging_both_gate_sends() {
        let now = Instant::now();
        let mut s = sender(2, 2, None, now);
        assert_eq!(take(&mut s), Some((0, 0)));
        assert_eq!(take(&mut s), Some((1, 1)));
        assert_eq!(take(&mut s), None);
        assert!(s.needs_control_for_credit());
        s.on_control(Message::Credit { released: 1 }, now).unwrap();
        assert_eq!(take(&mut s), None, "no staging slot free yet");
        sent(&mut s, 0, now);
        assert_eq!(take(&mut s), Some((2, 0)));
    }

    #[test]
    fn bad_credits_and_messages_are_violations() {
        let now = Instant::now();
        let mut s = sender(2, 2, None, now);
        s.try_take().unwrap();
        let e = s
            .on_control(Message::Credit { released: 2 }, now)
            .unwrap_err();
        assert!(e.to_string().contains("released but only 1 sent"), "{e}");
        s.on_control(Message::Credit { released: 1 }, now).unwrap();
        let e = s
            .on_control(Message::Credit { released: 0 }, now)
            .unwrap_err();
        assert!(e.to_string().contains("went backwards"), "{e}");
        for m in [Message::Ready, Message::Finish { count: 1 }] {
            let e = s.on_control(m, now).unwrap_err();
            assert!(e.to_string().contains("expected Credit or Reject"), "{e}");
        }
    }

    #[test]
    fn an_inband_credit_counts_only_on_the_inband_route() {
        let now = Instant::now();
        let mut s = SenderCore::new(1, staging(1), CreditRoute::InBand, None, now);
        s.try_take().unwrap();
        assert!(
            !s.needs_control_for_credit(),
            "in band, credits come on the data path"
        );
        s.on_send_event(SendEvent::Credits(1), now).unwrap();
        assert_eq!(s.released(), 1);
        let mut s = sender(1, 1, None, now);
        s.try_take().unwrap();
        let e = s.on_send_event(SendEvent::Credits(1), now).unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e}");
    }

    #[test]
    fn finish_drains_then_sends_finish_then_lingers_boundedly() {
        let now = Instant::now();
        let mut s = sender(2, 2, None, now);
        let (_, slot) = s.try_take().unwrap().unwrap();
        s.begin_finish(now).unwrap();
        assert_eq!(s.finish_step().unwrap(), FinishStep::Drain);
        assert_eq!(s.poll_timeout(), Some(now + FINISH_LINGER));
        assert_eq!(s.poll_action(), None, "a send is still in flight");
        s.on_send_event(SendEvent::Sent(slot), now).unwrap();
        assert_eq!(s.poll_action(), Some(SenderAction::SendFinish { count: 1 }));
        s.on_finish_sent(now);
        assert_eq!(s.finish_step().unwrap(), FinishStep::Linger);
        s.handle_timeout(now + FINISH_LINGER).unwrap();
        assert_eq!(s.finish_step().unwrap(), FinishStep::Done);

        let mut s = sender(2, 2, None, now);
        s.begin_finish(now).unwrap();
        assert_eq!(s.poll_action(), Some(SenderAction::SendFinish { count: 0 }));
        s.on_finish_sent(now);
        s.on_control_closed(Lost::closed("closed")).unwrap();
        assert_eq!(s.finish_step().unwrap(), FinishStep::Done);
    }

    #[test]
    fn sends_that_never_complete_end_the_finish_as_peer_loss() {
        let now = Instant::now();
        let mut s = sender(2, 2, None, now);
        s.try_take().unwrap();
        s.begin_finish(now).unwrap();
        s.handle_timeout(now + FINISH_LINGER / 2).unwrap();
        let e = s.handle_timeout(now + FINISH_LINGER).unwrap_err();
        assert!(matches!(e, Error::PeerLost { .. }), "{e}");
    }

    #[test]
    fn a_message_given_back_is_not_counted_and_its_credit_and_slot_are_free_again() {
        let now = Instant::now();
        let mut s = sender(2, 2, None, now);
        let (seq0, _slot0) = s.try_take().unwrap().unwrap();
        let (seq1, slot1) = s.try_take().unwrap().unwrap();
        assert_eq!((seq0, seq1), (0, 1));
        assert_eq!(take(&mut s), None, "both credits taken");
        // Only the last one taken can come back.
        assert!(s.give_back(seq0, StagingSlot::for_test(0)).is_err());
        s.give_back(seq1, slot1).unwrap();
        assert_eq!(s.sent(), 1);
        assert_eq!(take(&mut s), Some((1, 1)));
    }

    #[test]
    fn control_close_mid_stream_is_peer_loss() {
        let now = Instant::now();
        let mut s = sender(2, 2, None, now);
        let e = s.on_control_closed(Lost::closed("reset")).unwrap_err();
        assert!(matches!(e, Error::PeerLost { .. }), "{e}");
    }

    #[test]
    fn idle_timeout_applies_only_while_out_of_credit() {
        let now = Instant::now();
        let idle = Duration::from_secs(1);
        let mut s = sender(1, 1, Some(idle), now);
        assert_eq!(s.poll_timeout(), None, "credit available");
        s.handle_timeout(now + idle).unwrap();
        s.try_take().unwrap();
        assert_eq!(s.poll_timeout(), Some(now + idle));
        let e = s.handle_timeout(now + idle).unwrap_err();
        assert!(matches!(e, Error::IdleTimeout { .. }), "{e}");
    }

    #[test]
    fn failures_reject_the_peer_only_when_it_did_not_end_the_session_itself() {
        let now = Instant::now();
        let mut s = sender(1, 1, None, now);
        s.on_error(&Error::Interrupted);
        assert!(s.is_open(), "an interruption keeps the session");
        assert_eq!(s.poll_action(), None);
        s.on_error(&Error::Protocol(ProtocolViolation::DataBeforeReady));
        assert!(
            matches!(s.poll_action(), Some(SenderAction::Reject(r)) if r.starts_with("protocol violation"))
        );
        assert_eq!(s.poll_action(), Some(SenderAction::CloseDataPath));
        let mut s = sender(1, 1, None, now);
        s.on_error(&Error::Rejected("bye".into()));
        assert_eq!(s.poll_action(), Some(SenderAction::CloseDataPath));
        assert_eq!(s.poll_action(), None);
        s.abort("again");
        assert_eq!(s.poll_action(), None, "a closed session tells nobody twice");
    }
}
