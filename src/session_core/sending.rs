//! The sender's state machine.
//!
//! Events in: a control message ([`SenderCore::on_control`]), an in-band credit, a send
//! completion, the control path closed, the application's send and finish. Actions out: which
//! staging slot the next message goes to (with its sequence number), whether the sender must
//! wait and until when, when Finish may be sent, and when the session is over.
//!
//! Rules kept here:
//! - at most `credits` messages unreleased by the receiver, and one message per free staging
//!   slot; a credit that goes backwards or past what was sent is a protocol violation;
//! - the only control messages a sender accepts are Credit and Reject;
//! - Finish{count} goes out only after every send completed; then the sender waits at most
//!   [`FINISH_LINGER`] for the receiver to close the control connection;
//! - with an idle timeout, no credit for that long while waiting for one ends the session.

use std::time::{Duration, Instant};

use super::FINISH_LINGER;
use crate::proto::{CreditError, Message, SendWindow};
use crate::time::deadline_after;
use crate::{Error, ProtocolViolation};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Finish was sent; waiting for the receiver to close, until the deadline.
    Lingering {
        until: Instant,
    },
    Done,
    Failed,
}

/// What the sender's finish should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishStep {
    /// Sends are still in flight: wait for completions (at most until the deadline).
    Drain {
        /// Give up at this time.
        until: Instant,
    },
    /// Every send completed: send Finish with this count.
    SendFinish {
        /// Messages sent in this session.
        count: u64,
    },
    /// Finish is out: wait for the receiver to close the control connection.
    Linger {
        /// Stop waiting at this time.
        until: Instant,
    },
    /// The session is over.
    Done,
}

/// The sender's half of a session, without I/O.
#[derive(Debug)]
pub(crate) struct SenderCore {
    window: SendWindow,
    free_staging: Vec<usize>,
    staging_slots: usize,
    control_closed: bool,
    last_credit: Instant,
    idle_timeout: Option<Duration>,
    drain_until: Option<Instant>,
    phase: Phase,
}

impl SenderCore {
    /// A sender with `credits` credits (the receiver's slots) and `staging_slots` local slots.
    pub(crate) fn new(
        credits: u32,
        staging_slots: usize,
        idle_timeout: Option<Duration>,
        now: Instant,
    ) -> Self {
        Self {
            window: SendWindow::new(credits),
            free_staging: (0..staging_slots).rev().collect(),
            staging_slots,
            control_closed: false,
            last_credit: now,
            idle_timeout,
            drain_until: None,
            phase: Phase::Open,
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

    /// Marks the session failed; later calls see it closed.
    pub(crate) fn fail(&mut self) {
        if self.phase == Phase::Open {
            self.phase = Phase::Failed;
        }
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

    /// One in-band credit (one more released message).
    pub(crate) fn on_inband_credit(&mut self, now: Instant) -> Result<(), Error> {
        self.on_released(self.window.released() + 1, now)
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

    /// The send from staging slot `slot` completed.
    pub(crate) fn on_send_complete(&mut self, slot: usize) -> Result<(), Error> {
        if slot >= self.staging_slots || self.free_staging.contains(&slot) {
            return Err(Error::Internal(format!(
                "send completion for staging slot {slot}, which is not in flight"
            )));
        }
        self.free_staging.push(slot);
        Ok(())
    }

    /// The control connection reached end of file or was reset: the end of a lingering
    /// finish, otherwise the receiver is gone.
    pub(crate) fn on_control_closed(&mut self, reason: &str) -> Result<(), Error> {
        self.control_closed = true;
        match self.phase {
            Phase::Lingering { .. } | Phase::Done => {
                self.phase = Phase::Done;
                Ok(())
            }
            _ => Err(Error::PeerLost {
                reason: reason.to_owned(),
                messages: self.window.released(),
            }),
        }
    }

    /// Takes a credit and a staging slot for the next message: `(sequence, slot)`, or `None`
    /// when the sender must wait (see [`SenderCore::wait_deadline`]).
    pub(crate) fn try_take(&mut self) -> Result<Option<(u64, usize)>, Error> {
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
            None => Err(Error::Internal(
                "credit window closed after saying it was open".to_owned(),
            )),
        }
    }

    /// Returns what [`SenderCore::try_take`] gave (`seq`, `slot`) for a message that was never
    /// posted (the application's fill panicked): the credit is open again, the staging slot
    /// free, and the count a later Finish announces does not include it.
    pub(crate) fn give_back(&mut self, seq: u64, slot: usize) -> Result<(), Error> {
        if slot >= self.staging_slots
            || self.free_staging.contains(&slot)
            || !self.window.untake(seq)
        {
            return Err(Error::Internal(format!(
                "give_back of message {seq} in slot {slot}, which was not the last taken"
            )));
        }
        self.free_staging.push(slot);
        Ok(())
    }

    /// Whether the sender is blocked for want of credit (the control channel must be read).
    pub(crate) fn out_of_credit(&self) -> bool {
        self.window.available() == 0
    }

    /// While blocked in `send`: the deadline after which the idle timeout ends the session.
    pub(crate) fn wait_deadline(&self, now: Instant) -> Result<Option<Instant>, Error> {
        let Some(idle) = self.idle_timeout else {
            return Ok(None);
        };
        let give_up = deadline_after(self.last_credit, idle);
        if self.out_of_credit() && now >= give_up {
            return Err(Error::IdleTimeout {
                seconds: idle.as_secs_f64(),
                messages: self.window.released(),
            });
        }
        Ok(Some(give_up.max(now)))
    }

    /// What `finish` should do next, at time `now`.
    pub(crate) fn finish_step(&mut self, now: Instant) -> Result<FinishStep, Error> {
        match self.phase {
            Phase::Open => {}
            Phase::Lingering { until } => {
                if now >= until {
                    log::warn!(
                        "the receiver did not acknowledge end of stream within {} s",
                        FINISH_LINGER.as_secs()
                    );
                    self.phase = Phase::Done;
                    return Ok(FinishStep::Done);
                }
                return Ok(FinishStep::Linger { until });
            }
            Phase::Done => return Ok(FinishStep::Done),
            Phase::Failed => return Err(Error::Closed),
        }
        if self.free_staging.len() == self.staging_slots {
            return Ok(FinishStep::SendFinish {
                count: self.window.sent(),
            });
        }
        let until = *self
            .drain_until
            .get_or_insert_with(|| deadline_after(now, FINISH_LINGER));
        if now >= until {
            return Err(Error::PeerLost {
                reason: format!(
                    "sends did not complete within {} s",
                    FINISH_LINGER.as_secs()
                ),
                messages: self.window.released(),
            });
        }
        Ok(FinishStep::Drain { until })
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

    #[test]
    fn credit_and_staging_both_gate_sends() {
        let now = Instant::now();
        let mut s = SenderCore::new(2, 2, None, now);
        assert_eq!(s.try_take().unwrap(), Some((0, 0)));
        assert_eq!(s.try_take().unwrap(), Some((1, 1)));
        assert_eq!(s.try_take().unwrap(), None);
        assert!(s.out_of_credit());
        s.on_control(Message::Credit { released: 1 }, now).unwrap();
        assert_eq!(s.try_take().unwrap(), None, "no staging slot free yet");
        s.on_send_complete(0).unwrap();
        assert_eq!(s.try_take().unwrap(), Some((2, 0)));
    }

    #[test]
    fn bad_credits_and_messages_are_violations() {
        let now = Instant::now();
        let mut s = SenderCore::new(2, 2, None, now);
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
        let e = s.on_send_complete(1).unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e}");
    }

    #[test]
    fn finish_drains_then_lingers_boundedly() {
        let now = Instant::now();
        let mut s = SenderCore::new(2, 2, None, now);
        s.try_take().unwrap();
        assert_eq!(
            s.finish_step(now).unwrap(),
            FinishStep::Drain {
                until: now + FINISH_LINGER
            }
        );
        s.on_send_complete(0).unwrap();
        assert_eq!(
            s.finish_step(now).unwrap(),
            FinishStep::SendFinish { count: 1 }
        );
        s.on_finish_sent(now);
        assert!(matches!(
            s.finish_step(now).unwrap(),
            FinishStep::Linger { .. }
        ));
        assert_eq!(
            s.finish_step(now + FINISH_LINGER).unwrap(),
            FinishStep::Done
        );
        let mut s = SenderCore::new(2, 2, None, now);
        s.on_finish_sent(now);
        s.on_control_closed("closed").unwrap();
        assert_eq!(s.finish_step(now).unwrap(), FinishStep::Done);
    }

    #[test]
    fn a_message_given_back_is_not_counted_and_its_credit_and_slot_are_free_again() {
        let now = Instant::now();
        let mut s = SenderCore::new(2, 2, None, now);
        let (seq0, _) = s.try_take().unwrap().unwrap();
        let (seq1, slot1) = s.try_take().unwrap().unwrap();
        assert_eq!((seq0, seq1), (0, 1));
        assert_eq!(s.try_take().unwrap(), None, "both credits taken");
        // Only the last one taken can come back, and only once.
        assert!(s.give_back(seq0, slot1).is_err());
        s.give_back(seq1, slot1).unwrap();
        assert!(s.give_back(seq1, slot1).is_err());
        assert_eq!(s.sent(), 1);
        assert_eq!(s.try_take().unwrap(), Some((1, slot1)));
    }

    #[test]
    fn control_close_mid_stream_is_peer_loss() {
        let now = Instant::now();
        let mut s = SenderCore::new(2, 2, None, now);
        let e = s.on_control_closed("reset").unwrap_err();
        assert!(matches!(e, Error::PeerLost { .. }), "{e}");
    }

    #[test]
    fn idle_timeout_applies_only_while_out_of_credit() {
        let now = Instant::now();
        let idle = Duration::from_secs(1);
        let mut s = SenderCore::new(1, 1, Some(idle), now);
        assert!(s.wait_deadline(now + idle).is_ok(), "credit available");
        s.try_take().unwrap();
        let e = s.wait_deadline(now + idle).unwrap_err();
        assert!(matches!(e, Error::IdleTimeout { .. }), "{e}");
    }
}
