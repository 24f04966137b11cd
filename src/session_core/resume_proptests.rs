//! Property tests of the resume rules: a sender (its [`SentLedger`] and credit window) and a
//! receiver (arrived, released, what the application saw) joined by a simulated path that
//! breaks at random points — in the middle of the stream, while Finish is on its way, right
//! after a resume — and may replay a stale copy of an old message. After each break the two ends
//! resume by [`plan_resume`]. Checked: every message reaches the application exactly once and in
//! order, nothing past Finish, honest ends never see a violation, and the session ends.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::resume::{
    classify_arrival, plan_resume, Arrival, ReceiverPosition, SenderPosition, SentLedger,
};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The sender application sends one message (if the window and a slot allow).
    Send,
    /// The oldest message on the path lands.
    Land,
    /// The oldest landed message's send completes at the sender.
    Complete,
    /// The oldest credit reaches the sender.
    Credit,
    /// The receiver application asks for the next message.
    Recv,
    /// The oldest control message (Finish) reaches the receiver.
    DeliverFinish,
    /// The path breaks: what is in flight is gone; the ends resume at once.
    Break,
    /// A stale copy of an earlier message reaches the receiver (an old path's straggler).
    Replay(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Send),
        4 => Just(Op::Land),
        3 => Just(Op::Complete),
        3 => Just(Op::Credit),
        4 => Just(Op::Recv),
        2 => Just(Op::DeliverFinish),
        1 => Just(Op::Break),
        1 => any::<u8>().prop_map(Op::Replay),
    ]
}

/// The two ends and the path between them.
struct World {
    credits: u32,
    total: u64,
    // Sender.
    ledger: SentLedger<usize>,
    free_slots: Vec<usize>,
    known_released: u64,
    finish_sent: bool,
    // Path.
    data: VecDeque<u64>,
    landed_unacked: VecDeque<u64>,
    credits_in_flight: VecDeque<u64>,
    finish_in_flight: bool,
    // Receiver.
    arrived: u64,
    released: u64,
    delivering: Option<u64>,
    finish_count: Option<u64>,
    seen_by_app: Vec<u64>,
    ended: bool,
    resumes: u32,
}

impl World {
    fn new(credits: u32, total: u64) -> Self {
        Self {
            credits,
            total,
            ledger: SentLedger::default(),
            free_slots: (0..credits as usize).rev().collect(),
            known_released: 0,
            finish_sent: false,
            data: VecDeque::new(),
            landed_unacked: VecDeque::new(),
            credits_in_flight: VecDeque::new(),
            finish_in_flight: false,
            arrived: 0,
            released: 0,
            delivering: None,
            finish_count: None,
            seen_by_app: Vec::new(),
            ended: false,
            resumes: 0,
        }
    }

    /// Carries out `op`; returns whether anything happened.
    fn apply(&mut self, op: Op) -> Result<bool, String> {
        match op {
            Op::Send => {
                let taken = self.ledger.taken();
                let unreleased = taken - self.known_released;
                if taken == self.total || unreleased >= u64::from(self.credits) {
                    return Ok(false);
                }
                let Some(slot) = self.free_slots.pop() else {
                    return Ok(false);
                };
                self.ledger
                    .on_taken(taken, slot)
                    .map_err(|e| e.to_string())?;
                self.data.push_back(taken);
                Ok(true)
            }
            Op::Land => {
                let Some(number) = self.data.pop_front() else {
                    return Ok(false);
                };
                self.land(number)?;
                Ok(true)
            }
            Op::Replay(k) => {
                if self.arrived == 0 {
                    return Ok(false);
                }
                let stale = u64::from(k) % self.arrived;
                self.land(stale)?;
                Ok(true)
            }
            Op::Complete => {
                let Some(number) = self.landed_unacked.pop_front() else {
                    return Ok(false);
                };
                let free = self
                    .ledger
                    .on_completed(number)
                    .map_err(|e| e.to_string())?;
                self.free_slots.extend(free);
                Ok(true)
            }
            Op::Credit => {
                let Some(released) = self.credits_in_flight.pop_front() else {
                    return Ok(false);
                };
                self.known_released = self.known_released.max(released);
                self.free_slots.extend(self.ledger.on_released(released));
                Ok(true)
            }
            Op::Recv => self.recv(),
            Op::DeliverFinish => {
                if !self.finish_in_flight {
                    return Ok(false);
                }
                self.finish_in_flight = false;
                if let Some(first) = self.finish_count {
                    // A Finish sent again after a resume carries the same count.
                    if first != self.total {
                        return Err(format!("Finish changed from {first}"));
                    }
                }
                if self.arrived > self.total {
                    return Err(format!("{} arrived past Finish", self.arrived));
                }
                self.finish_count = Some(self.total);
                Ok(true)
            }
            Op::Break => {
                self.resume()?;
                Ok(true)
            }
        }
    }

    /// The sender sends Finish once every message was taken and every send completed.
    fn maybe_finish(&mut self) {
        if !self.finish_sent
            && self.ledger.taken() == self.total
            && self.data.is_empty()
            && self.landed_unacked.is_empty()
        {
            self.finish_sent = true;
            self.finish_in_flight = true;
        }
    }

    fn land(&mut self, number: u64) -> Result<(), String> {
        match classify_arrival(self.arrived, number).map_err(|e| e.to_string())? {
            Arrival::Duplicate => Ok(()),
            Arrival::Next => {
                if self.finish_count.is_some_and(|count| number >= count) {
                    return Err(format!("message {number} past Finish"));
                }
                if self.arrived - self.released >= u64::from(self.credits) {
                    return Err(format!("message {number} with every slot held"));
                }
                self.arrived += 1;
                self.landed_unacked.push_back(number);
                Ok(())
            }
        }
    }

    /// The application's next `recv()`: the message it had is released (its slice was valid
    /// until this call), then the next one is delivered, or the stream ends, or it waits.
    fn recv(&mut self) -> Result<bool, String> {
        if self.ended {
            return Ok(false);
        }
        let mut moved = false;
        if self.delivering.take().is_some() {
            self.released += 1;
            self.credits_in_flight.push_back(self.released);
            moved = true;
        }
        let next = self.seen_by_app.len() as u64;
        if next < self.arrived {
            self.seen_by_app.push(next);
            self.delivering = Some(next);
            moved = true;
        } else if self.finish_count == Some(next) {
            self.ended = true;
            moved = true;
        }
        Ok(moved)
    }

    /// The path broke: the in-flight messages, completions, credits and Finish are gone; the
    /// ends resume by the plan.
    fn resume(&mut self) -> Result<(), String> {
        self.data.clear();
        self.landed_unacked.clear();
        self.credits_in_flight.clear();
        self.finish_in_flight = false;
        let plan = plan_resume(
            SenderPosition {
                taken: self.ledger.taken(),
                released: self.known_released,
            },
            ReceiverPosition {
                arrived: self.arrived,
                released: self.released,
            },
            self.credits,
        )
        .map_err(|e| format!("an honest resume was refused: {e}"))?;
        self.known_released = plan.released;
        let resumed = self.ledger.resume(&plan).map_err(|e| e.to_string())?;
        let again: Vec<u64> = resumed.again.iter().map(|&(number, _)| number).collect();
        self.free_slots.extend(resumed.free);
        self.data.extend(again);
        if self.finish_sent {
            // Finish goes out again once the messages sent again completed.
            self.finish_sent = false;
        }
        self.resumes += 1;
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        for (i, &n) in self.seen_by_app.iter().enumerate() {
            if n != i as u64 {
                return Err(format!("the application saw {:?}", self.seen_by_app));
            }
        }
        if self.seen_by_app.len() as u64 > self.total {
            return Err("more messages than were sent".into());
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn breaks_anywhere_deliver_every_message_exactly_once_in_order(
        credits in 1u32..5,
        total in 0u64..40,
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let mut w = World::new(credits, total);
        let mut breaks = 0;
        for op in ops {
            // Some breaks, not a storm: at most 6 per session.
            if matches!(op, Op::Break) {
                if breaks == 6 { continue; }
                breaks += 1;
            }
            w.apply(op).map_err(TestCaseError::fail)?;
            w.maybe_finish();
            w.check().map_err(TestCaseError::fail)?;
        }
        // Then the path holds: everything that can happen does, until the receiver ends.
        let drain = [Op::Send, Op::Land, Op::Complete, Op::Credit, Op::DeliverFinish, Op::Recv];
        let mut rounds = 0;
        while !w.ended {
            rounds += 1;
            prop_assert!(rounds < 10_000, "no progress: {} of {} seen", w.seen_by_app.len(), total);
            let mut moved = false;
            for op in drain {
                moved |= w.apply(op).map_err(TestCaseError::fail)?;
                w.maybe_finish();
                w.check().map_err(TestCaseError::fail)?;
            }
            prop_assert!(moved || w.ended, "stuck: nothing can happen and the receiver waits");
        }
        prop_assert_eq!(w.seen_by_app, (0..total).collect::<Vec<_>>());
    }
}
