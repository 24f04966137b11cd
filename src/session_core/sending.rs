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
//!   failures and its violations, only close after its Reject or loss).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

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
    Done,
    Failed,
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
        }
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
        let running = matches!(self.phase, Phase::Open | Phase::Draining { .. });
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
                self.free_staging.push(slot);
                self.queue_finish_when_drained();
                Ok(())
            }
            SendEvent::Credit if self.credit_route == CreditRoute::InBand => {
                self.on_released(self.window.released() + 1, now)
            }
            SendEvent::Credit => Err(Error::Internal(
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
        self.last_credit = now;
        Ok(())
    }

    /// The control connection reached end of file or was reset: the end of a lingering
    /// finish, otherwise the receiver is gone.
    pub(crate) fn on_control_closed(&mut self, lost: Lost) -> Result<(), Error> {
        self.control_closed = true;
        match self.phase {
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
            Some(seq) => Ok(Some((seq, slot))),
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
        if !self.window.untake(seq) {
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
            Phase::Done | Phase::Failed => None,
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
            Phase::Done | Phase::Failed => Ok(()),
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
        if matches!(self.phase, Phase::Draining { .. })
            && self.free_staging.len() == self.staging_slots
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
            Phase::Draining { .. } => Ok(FinishStep::Drain),
            Phase::Lingering { .. } => Ok(FinishStep::Linger),
            Phase::Done => Ok(FinishStep::Done),
            Phase::Failed => Err(Error::Closed),
        }
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
        s.on_send_event(SendEvent::Credit, now).unwrap();
        assert_eq!(s.released(), 1);
        let mut s = sender(1, 1, None, now);
        s.try_take().unwrap();
        let e = s.on_send_event(SendEvent::Credit, now).unwrap_err();
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
