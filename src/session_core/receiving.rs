//! The receiver's state machine.
//!
//! Events in: a message landed in a slot ([`ReceiverCore::on_arrival`]), a control message
//! ([`ReceiverCore::on_control`]), the control or data path closed, the application asked for
//! the next message ([`ReceiverCore::release`], [`ReceiverCore::next`]). Actions out: deliver
//! this slot, re-post that slot, announce this many released messages, wait until this
//! deadline, end of stream, or an error that ends the session.
//!
//! Rules kept here:
//! - messages are delivered in arrival order, each exactly once, at most `count` of them once
//!   Finish{count} is known; a message past the count, a Finish below what arrived, a second
//!   Finish, or an arrival with every slot held are protocol violations;
//! - credits are announced in batches: once half the window (rounded up) is released and not
//!   yet announced. That alone keeps a sender from starving: it can only run out of credit
//!   with a whole window sent and unannounced, and once those have arrived and been released,
//!   more than half the window is unannounced (the property tests check it);
//! - after Finish nothing more is announced, and waiting is bounded by [`FINISH_PROGRESS`]
//!   without an arrival; after the data path closed without Finish, by [`FINISH_GRACE`];
//! - with an idle timeout, a session without any arrival for that long ends;
//! - a loss (the control connection or the data path gone before Finish) is reported only after
//!   every message that had arrived was delivered: nothing that arrived is dropped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{FINISH_GRACE, FINISH_PROGRESS};
use crate::proto::{CreditError, Message, RecvWindow};
use crate::time::{deadline_after, earliest};
use crate::{Error, ProtocolViolation};

/// What the receiver should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvStep {
    /// Hand message `len` bytes long in `slot` to the application.
    Deliver {
        /// The receive slot.
        slot: usize,
        /// The message length.
        len: usize,
    },
    /// Every counted message was delivered: end of stream.
    End,
    /// Nothing to do until an event arrives or `until` passes (then call `next` again).
    Wait {
        /// The next deadline, if any.
        until: Option<Instant>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    Ended,
    Failed,
}

/// The receiver's half of a session, without I/O.
#[derive(Debug)]
pub(crate) struct ReceiverCore {
    window: RecvWindow,
    /// Arrived, not yet delivered: (slot, len). Never longer than the window.
    ready: VecDeque<(usize, usize)>,
    /// The application holds the last delivered message.
    holding: bool,
    delivered: u64,
    bytes: u64,
    finish: Option<u64>,
    /// The release count last announced to the sender.
    announced: u64,
    /// Announce once this many releases are unannounced.
    batch: u64,
    control_closed: bool,
    /// The control connection was lost before Finish (why): reported once every message that
    /// had arrived was delivered.
    control_lost: Option<String>,
    data_closed_at: Option<Instant>,
    last_arrival: Instant,
    idle_timeout: Option<Duration>,
    phase: Phase,
}

impl ReceiverCore {
    /// A receiver over `slots` posted slots, at time `now`.
    pub(crate) fn new(slots: u32, idle_timeout: Option<Duration>, now: Instant) -> Self {
        Self {
            window: RecvWindow::new(slots),
            ready: VecDeque::with_capacity(slots as usize),
            holding: false,
            delivered: 0,
            bytes: 0,
            finish: None,
            announced: 0,
            batch: u64::from(slots.div_ceil(2).max(1)),
            control_closed: false,
            control_lost: None,
            data_closed_at: None,
            last_arrival: now,
            idle_timeout,
            phase: Phase::Open,
        }
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

    /// True once the sender's Finish was read.
    pub(crate) fn finish_known(&self) -> bool {
        self.finish.is_some()
    }

    /// True once the control connection reached end of file (stop watching it).
    pub(crate) fn control_closed(&self) -> bool {
        self.control_closed
    }

    /// True once the data path closed (stop polling and watching it).
    pub(crate) fn data_closed(&self) -> bool {
        self.data_closed_at.is_some()
    }

    /// Whether the session is still running.
    pub(crate) fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Whether end of stream was reached.
    pub(crate) fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// Marks the session failed (after any error); later calls see it closed.
    pub(crate) fn fail(&mut self) {
        if self.phase == Phase::Open {
            self.phase = Phase::Failed;
        }
    }

    /// A message of `len` bytes landed in `slot`.
    pub(crate) fn on_arrival(
        &mut self,
        slot: usize,
        len: usize,
        now: Instant,
    ) -> Result<(), Error> {
        if let Some(count) = self.finish {
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
        if slot != expected {
            return Err(Error::Internal(format!(
                "message {seq} landed in slot {slot}, expected slot {expected} (receives must complete in posting order)"
            )));
        }
        self.ready.push_back((slot, len));
        self.last_arrival = now;
        Ok(())
    }

    /// A message arrived on the control channel.
    pub(crate) fn on_control(&mut self, msg: Message) -> Result<(), Error> {
        match msg {
            Message::Finish { count } => {
                if let Some(first) = self.finish {
                    return Err(Error::Protocol(ProtocolViolation::FinishTwice {
                        first,
                        second: count,
                    }));
                }
                let arrived = self.window.arrived();
                if count < arrived {
                    return Err(Error::Protocol(ProtocolViolation::FinishBelowArrived {
                        count,
                        arrived,
                    }));
                }
                self.finish = Some(count);
                Ok(())
            }
            Message::Reject { reason } => Err(Error::Rejected(reason)),
            other => Err(Error::Protocol(ProtocolViolation::Unexpected {
                expected: "Finish or Reject",
                got: other.name(),
            })),
        }
    }

    /// The control connection reached end of file (or was reset): `reason` says which.
    pub(crate) fn on_control_closed(&mut self, reason: &str) -> Result<(), Error> {
        self.control_closed = true;
        if self.finish.is_some() {
            // The sender may go once it said Finish; the messages it counted are on their way.
            return Ok(());
        }
        // Lost before Finish. Nothing that already arrived is dropped: `next` delivers it
        // first, then reports the loss (as after a closed data path).
        if self.ready.is_empty() {
            return Err(self.lost(reason));
        }
        self.control_lost.get_or_insert_with(|| reason.to_owned());
        Ok(())
    }

    /// The data path closed (the peer closed it, or it failed as a closed path does).
    pub(crate) fn on_data_closed(&mut self, now: Instant) {
        self.data_closed_at.get_or_insert(now);
    }

    /// The application is done with the message it holds: returns the slot to re-post. Call
    /// [`ReceiverCore::credit_due`] after re-posting it.
    pub(crate) fn release(&mut self) -> Result<Option<usize>, Error> {
        if !self.holding {
            return Ok(None);
        }
        self.holding = false;
        let seq = self
            .window
            .release_oldest()
            .map_err(|e| Error::Internal(format!("receive window: {e}")))?;
        Ok(Some(self.window.slot_of(seq)))
    }

    /// The cumulative release count to announce now, if any: once half the window (rounded
    /// up) is released and unannounced. After Finish nothing is announced.
    pub(crate) fn credit_due(&mut self) -> Option<u64> {
        // Nobody to tell after Finish, or once the sender is lost.
        if self.finish.is_some() || self.control_lost.is_some() || self.phase != Phase::Open {
            return None;
        }
        let released = self.window.released();
        if released - self.announced < self.batch {
            return None;
        }
        self.announced = released;
        Some(released)
    }

    /// The release count last announced (for in-band credits: how many were already sent).
    pub(crate) fn announced(&self) -> u64 {
        self.announced
    }

    /// What to do next, at time `now`. The message the application held must have been
    /// released first ([`ReceiverCore::release`]).
    pub(crate) fn next(&mut self, now: Instant) -> Result<RecvStep, Error> {
        match self.phase {
            Phase::Open => {}
            Phase::Ended => return Ok(RecvStep::End),
            Phase::Failed => return Err(Error::Closed),
        }
        if self.holding {
            return Err(Error::Internal(
                "next message asked for while the last one is held".to_owned(),
            ));
        }
        if let Some((slot, len)) = self.ready.pop_front() {
            self.holding = true;
            self.delivered += 1;
            self.bytes += len as u64;
            return Ok(RecvStep::Deliver { slot, len });
        }
        if let Some(count) = self.finish {
            if self.delivered == count {
                self.phase = Phase::Ended;
                return Ok(RecvStep::End);
            }
        }
        if let Some(reason) = &self.control_lost {
            return Err(self.lost(reason));
        }
        let mut until = None;
        if let Some(closed) = self.data_closed_at {
            if self.finish.is_some() {
                return Err(self.lost("the data path closed"));
            }
            let grace_end = deadline_after(closed, FINISH_GRACE);
            if now >= grace_end {
                return Err(self.lost("the data path closed"));
            }
            until = Some(grace_end);
        }
        if self.finish.is_some() {
            let give_up = deadline_after(self.last_arrival, FINISH_PROGRESS);
            if now >= give_up {
                return Err(self.lost(&format!(
                    "no message for {} s after Finish",
                    FINISH_PROGRESS.as_secs()
                )));
            }
            until = earliest(until, Some(give_up));
        }
        if let Some(idle) = self.idle_timeout {
            let give_up = deadline_after(self.last_arrival, idle);
            if now >= give_up {
                return Err(Error::IdleTimeout {
                    seconds: idle.as_secs_f64(),
                    messages: self.window.arrived(),
                });
            }
            until = earliest(until, Some(give_up));
        }
        Ok(RecvStep::Wait { until })
    }

    /// The peer-lost error, with the count of what arrived and, after Finish, what is missing.
    fn lost(&self, reason: &str) -> Error {
        let arrived = self.window.arrived();
        let reason = match self.finish {
            Some(count) => format!(
                "{reason} with {} of {count} message(s) still missing",
                count.saturating_sub(arrived)
            ),
            None => reason.to_owned(),
        };
        Error::PeerLost {
            reason,
            messages: arrived,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    fn deliver(core: &mut ReceiverCore, now: Instant) -> (usize, usize) {
        match core.next(now).unwrap() {
            RecvStep::Deliver { slot, len } => (slot, len),
            other => panic!("expected a delivery, got {other:?}"),
        }
    }

    #[test]
    fn delivers_in_order_then_ends_at_the_count() {
        let now = t0();
        let mut c = ReceiverCore::new(2, None, now);
        c.on_arrival(0, 5, now).unwrap();
        c.on_arrival(1, 6, now).unwrap();
        assert_eq!(deliver(&mut c, now), (0, 5));
        assert_eq!(c.release().unwrap(), Some(0));
        assert_eq!(c.credit_due(), Some(1));
        assert_eq!(deliver(&mut c, now), (1, 6));
        c.on_control(Message::Finish { count: 2 }).unwrap();
        assert_eq!(c.release().unwrap(), Some(1));
        assert_eq!(c.credit_due(), None, "no credit after Finish");
        assert_eq!(c.next(now).unwrap(), RecvStep::End);
        assert_eq!(c.next(now).unwrap(), RecvStep::End, "end is sticky");
        assert_eq!((c.delivered(), c.bytes()), (2, 11));
    }

    #[test]
    fn a_message_past_finish_is_a_violation_and_never_delivered() {
        let now = t0();
        let mut c = ReceiverCore::new(2, None, now);
        c.on_arrival(0, 1, now).unwrap();
        c.on_control(Message::Finish { count: 1 }).unwrap();
        let e = c.on_arrival(1, 1, now).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Protocol(ProtocolViolation::PastFinish { count: 1 })
            ),
            "{e}"
        );
        assert_eq!(deliver(&mut c, now), (0, 1));
    }

    #[test]
    fn finish_below_arrivals_and_finish_twice_are_violations() {
        let now = t0();
        let mut c = ReceiverCore::new(2, None, now);
        c.on_arrival(0, 1, now).unwrap();
        c.on_arrival(1, 1, now).unwrap();
        let e = c.on_control(Message::Finish { count: 1 }).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol violation by peer: Finish says 1 message(s) but 2 arrived"
        );
        let mut c = ReceiverCore::new(2, None, now);
        c.on_control(Message::Finish { count: 3 }).unwrap();
        let e = c.on_control(Message::Finish { count: 3 }).unwrap_err();
        assert!(e.to_string().contains("Finish sent twice"), "{e}");
    }

    #[test]
    fn other_control_messages_are_violations() {
        let now = t0();
        for msg in [Message::Ready, Message::Credit { released: 0 }] {
            let mut c = ReceiverCore::new(2, None, now);
            let e = c.on_control(msg).unwrap_err();
            assert!(matches!(e, Error::Protocol(_)), "{e}");
        }
    }

    #[test]
    fn overrun_is_a_violation() {
        let now = t0();
        let mut c = ReceiverCore::new(1, None, now);
        c.on_arrival(0, 1, now).unwrap();
        let e = c.on_arrival(0, 1, now).unwrap_err();
        assert!(
            matches!(e, Error::Protocol(ProtocolViolation::CreditOverrun { .. })),
            "{e}"
        );
    }

    #[test]
    fn credits_are_batched_by_half_window() {
        let now = t0();
        let mut c = ReceiverCore::new(8, None, now);
        for slot in 0..8 {
            c.on_arrival(slot, 0, now).unwrap();
        }
        let mut announced = Vec::new();
        for _ in 0..3 {
            deliver(&mut c, now);
            c.release().unwrap();
            announced.push(c.credit_due());
        }
        assert_eq!(announced, vec![None, None, None]);
        deliver(&mut c, now);
        c.release().unwrap();
        assert_eq!(c.credit_due(), Some(4), "half the window");
        deliver(&mut c, now);
        c.release().unwrap();
        assert_eq!(c.credit_due(), None, "one more is not half a window");
        for _ in 0..3 {
            deliver(&mut c, now);
            c.release().unwrap();
        }
        assert_eq!(c.credit_due(), Some(8), "the next half window");
    }

    #[test]
    fn waits_after_finish_and_after_close_are_bounded() {
        let now = t0();
        let mut c = ReceiverCore::new(2, None, now);
        c.on_control(Message::Finish { count: 1 }).unwrap();
        let RecvStep::Wait { until: Some(until) } = c.next(now).unwrap() else {
            panic!("expected a bounded wait");
        };
        assert_eq!(until, now + FINISH_PROGRESS);
        let e = c.next(until).unwrap_err();
        assert!(
            e.to_string().contains("1 of 1 message(s) still missing"),
            "{e}"
        );

        let mut c = ReceiverCore::new(2, None, now);
        c.on_data_closed(now);
        assert_eq!(
            c.next(now).unwrap(),
            RecvStep::Wait {
                until: Some(now + FINISH_GRACE)
            }
        );
        let e = c.next(now + FINISH_GRACE).unwrap_err();
        assert!(matches!(e, Error::PeerLost { messages: 0, .. }), "{e}");
    }

    #[test]
    fn messages_that_arrived_before_a_loss_are_delivered_then_the_loss_is_reported() {
        let now = t0();
        let mut c = ReceiverCore::new(2, None, now);
        c.on_arrival(0, 3, now).unwrap();
        c.on_arrival(1, 4, now).unwrap();
        c.on_control_closed("reset").unwrap();
        assert_eq!(c.next(now).unwrap(), RecvStep::Deliver { slot: 0, len: 3 });
        c.release().unwrap();
        assert_eq!(
            c.credit_due(),
            None,
            "nothing is announced to a lost sender"
        );
        assert_eq!(c.next(now).unwrap(), RecvStep::Deliver { slot: 1, len: 4 });
        c.release().unwrap();
        let e = c.next(now).unwrap_err();
        assert!(matches!(e, Error::PeerLost { messages: 2, .. }), "{e}");
    }

    #[test]
    fn control_close_before_finish_is_peer_loss_after_finish_it_is_fine() {
        let now = t0();
        let mut c = ReceiverCore::new(2, None, now);
        let e = c.on_control_closed("closed").unwrap_err();
        assert!(matches!(e, Error::PeerLost { messages: 0, .. }), "{e}");
        let mut c = ReceiverCore::new(2, None, now);
        c.on_control(Message::Finish { count: 0 }).unwrap();
        c.on_control_closed("closed").unwrap();
        assert_eq!(c.next(now).unwrap(), RecvStep::End);
    }

    #[test]
    fn idle_timeout_ends_a_silent_session() {
        let now = t0();
        let idle = Duration::from_secs(3);
        let mut c = ReceiverCore::new(2, Some(idle), now);
        assert_eq!(
            c.next(now).unwrap(),
            RecvStep::Wait {
                until: Some(now + idle)
            }
        );
        let e = c.next(now + idle).unwrap_err();
        assert!(matches!(e, Error::IdleTimeout { .. }), "{e}");
    }
}
