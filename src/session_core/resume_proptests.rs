//! Property tests of the resume rules: a sender (its [`SentLedger`], staging slots that hold
//! each message's bytes, and its credit window) and a receiver (arrived, released, what the
//! application saw) joined by a simulated path that breaks at random points — in the middle of
//! the stream, while Finish is on its way, right after a resume. Sends complete either when the
//! message landed (RC) or when it was handed over (tcp: the kernel took it, it may still be
//! lost). After each break the two ends run the resume handshake ([`ResumeHandshake`], either
//! end the client) over a simulated control connection that may close after any message,
//! attempt after attempt, with strangers' forged attempts in between, until one completes.
//!
//! Checked: the application sees every message's own bytes exactly once and in order; the
//! first message on a resumed path is the one the receiver expects; a staging slot is freed
//! only once its message was released; Finish keeps its count and never falls below what
//! arrived; nothing arrives past Finish; a lost or forged attempt fails only itself; honest ends
//! never see a violation; and the session ends.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::resume::{ResumePlan, ResumeTicket, SentLedger};
use super::resume_handshake::{ResumeAction, ResumeFailure, ResumeHandshake, ResumeSetup};
use crate::auth::fresh_nonce;
use crate::proto::{Counts, Message, Role};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The sender application sends one message (if the window and a slot allow).
    Send,
    /// The oldest message on the path lands.
    Land,
    /// RC: the oldest landed message's send completes at the sender.
    Complete,
    /// The oldest credit reaches the sender.
    Credit,
    /// The receiver application asks for the next message.
    Recv,
    /// Finish reaches the receiver.
    DeliverFinish,
    /// The path breaks: what is in flight is gone; the ends resume (the seed says which end
    /// is the client, where the first attempts lose their control connection, and whether a
    /// stranger tries in between).
    Break(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Send),
        4 => Just(Op::Land),
        3 => Just(Op::Complete),
        3 => Just(Op::Credit),
        4 => Just(Op::Recv),
        2 => Just(Op::DeliverFinish),
        1 => any::<u8>().prop_map(Op::Break),
    ]
}

/// The two ends and the path between them.
struct World {
    credits: u32,
    total: u64,
    /// tcp: a send completes when it is handed over; RC: once it landed.
    complete_on_send: bool,
    // Sender.
    ledger: SentLedger<usize>,
    /// What each staging slot holds (the message's bytes, here its number).
    staging: Vec<Option<u64>>,
    free_slots: Vec<usize>,
    known_released: u64,
    finish_sent: bool,
    // Path: (number, the bytes read from the staging slot).
    data: VecDeque<(u64, u64)>,
    landed_unacked: VecDeque<u64>,
    credits_in_flight: VecDeque<u64>,
    finish_in_flight: Option<u64>,
    // Receiver.
    arrived: u64,
    released: u64,
    held: VecDeque<u64>,
    delivering: bool,
    finish_count: Option<u64>,
    seen_by_app: Vec<u64>,
    ended: bool,
}

impl World {
    fn new(credits: u32, staging_slots: usize, total: u64, complete_on_send: bool) -> Self {
        Self {
            credits,
            total,
            complete_on_send,
            ledger: SentLedger::default(),
            staging: vec![None; staging_slots],
            free_slots: (0..staging_slots).rev().collect(),
            known_released: 0,
            finish_sent: false,
            data: VecDeque::new(),
            landed_unacked: VecDeque::new(),
            credits_in_flight: VecDeque::new(),
            finish_in_flight: None,
            arrived: 0,
            released: 0,
            held: VecDeque::new(),
            delivering: false,
            finish_count: None,
            seen_by_app: Vec::new(),
            ended: false,
        }
    }

    /// Slots the ledger gave back: each must hold a released message.
    fn take_back(&mut self, free: Vec<usize>) -> Result<(), String> {
        for slot in free {
            match self.staging[slot].take() {
                Some(n) if n < self.released => self.free_slots.push(slot),
                other => return Err(format!("slot {slot} freed holding {other:?}")),
            }
        }
        Ok(())
    }

    fn complete(&mut self, number: u64) -> Result<(), String> {
        let mut free = Vec::new();
        self.ledger
            .on_completed(number, &mut free)
            .map_err(|e| e.to_string())?;
        self.take_back(free)
    }

    /// Carries out `op`; returns whether anything happened.
    fn apply(&mut self, op: Op) -> Result<bool, String> {
        match op {
            Op::Send => {
                let taken = self.ledger.taken();
                if taken == self.total || taken - self.known_released >= u64::from(self.credits) {
                    return Ok(false);
                }
                let Some(slot) = self.free_slots.pop() else {
                    return Ok(false);
                };
                self.staging[slot] = Some(taken);
                self.ledger
                    .on_taken(taken, slot)
                    .map_err(|e| e.to_string())?;
                self.data.push_back((taken, taken));
                if self.complete_on_send {
                    self.complete(taken)?;
                }
                Ok(true)
            }
            Op::Land => {
                let Some((number, bytes)) = self.data.pop_front() else {
                    return Ok(false);
                };
                self.land(number, bytes)?;
                Ok(true)
            }
            Op::Complete => {
                let Some(number) = self.landed_unacked.pop_front() else {
                    return Ok(false);
                };
                self.complete(number)?;
                Ok(true)
            }
            Op::Credit => {
                let Some(released) = self.credits_in_flight.pop_front() else {
                    return Ok(false);
                };
                self.known_released = self.known_released.max(released);
                let mut free = Vec::new();
                self.ledger.on_released(released, &mut free);
                self.take_back(free)?;
                Ok(true)
            }
            Op::Recv => Ok(self.recv()),
            Op::DeliverFinish => {
                let Some(count) = self.finish_in_flight.take() else {
                    return Ok(false);
                };
                if self.finish_count.is_some_and(|first| first != count) {
                    return Err(format!(
                        "Finish changed from {:?} to {count}",
                        self.finish_count
                    ));
                }
                if count < self.arrived {
                    return Err(format!("Finish {count} below {} arrived", self.arrived));
                }
                self.finish_count = Some(count);
                Ok(true)
            }
            Op::Break(seed) => {
                if self.ended {
                    return Ok(false);
                }
                self.resume(seed)?;
                Ok(true)
            }
        }
    }

    /// The sender sends Finish{taken} once every message was taken and every send completed
    /// (on tcp that is when the kernel took it: messages may still be on their way).
    fn maybe_finish(&mut self) {
        let completed =
            self.complete_on_send || (self.data.is_empty() && self.landed_unacked.is_empty());
        if !self.finish_sent && self.ledger.taken() == self.total && completed {
            self.finish_sent = true;
            self.finish_in_flight = Some(self.ledger.taken());
        }
    }

    fn land(&mut self, number: u64, bytes: u64) -> Result<(), String> {
        // Numbers are implicit on the data path: this must be the one the receiver expects.
        if number != self.arrived {
            return Err(format!(
                "message {number} arrived while {} was next",
                self.arrived
            ));
        }
        if bytes != number {
            return Err(format!("message {number} carried the bytes of {bytes}"));
        }
        if self.finish_count.is_some_and(|count| number >= count) {
            return Err(format!("message {number} past Finish"));
        }
        if self.arrived - self.released >= u64::from(self.credits) {
            return Err(format!("message {number} with every slot held"));
        }
        self.arrived += 1;
        self.held.push_back(bytes);
        if !self.complete_on_send {
            self.landed_unacked.push_back(number);
        }
        Ok(())
    }

    /// The application's next `recv()`: the message it had is released (its slice was valid
    /// until this call), then the next one is delivered, or the stream ends, or it waits.
    fn recv(&mut self) -> bool {
        if self.ended {
            return false;
        }
        let mut moved = false;
        if std::mem::take(&mut self.delivering) {
            self.released += 1;
            self.credits_in_flight.push_back(self.released);
            moved = true;
        }
        if let Some(bytes) = self.held.pop_front() {
            self.seen_by_app.push(bytes);
            self.delivering = true;
            moved = true;
        } else if self.finish_count == Some(self.arrived) {
            self.ended = true;
            moved = true;
        }
        moved
    }

    /// The path broke: the in-flight messages, completions, credits and Finish are gone; the
    /// ends resume by the handshake, after `seed % 3` attempts that lose their connection.
    fn resume(&mut self, seed: u8) -> Result<(), String> {
        self.data.clear();
        self.landed_unacked.clear();
        self.credits_in_flight.clear();
        self.finish_in_flight = None;
        let ticket = ResumeTicket::random().map_err(|e| e.to_string())?;
        let client_is_sender = seed & 0x80 != 0;
        let strangers = seed & 0x40 != 0;
        let failing = usize::from(seed % 3);
        let mut attempt = 0;
        let plan = loop {
            if strangers {
                stranger_attempt(&ticket)?;
            }
            let cut = (attempt < failing).then_some((usize::from(seed / 3) + attempt) % 4);
            if let Some(plan) = self.attempt(&ticket, client_is_sender, cut)? {
                break plan;
            }
            attempt += 1;
            if attempt > failing {
                return Err("an attempt without loss did not resume".into());
            }
        };
        self.known_released = plan.released;
        let mut free = Vec::new();
        let again: Vec<(u64, usize)> = self
            .ledger
            .resume(&plan, &mut free)
            .map_err(|e| e.to_string())?
            .map(|(n, &slot)| (n, slot))
            .collect();
        self.take_back(free)?;
        for (number, slot) in again {
            let bytes = self.staging[slot].ok_or(format!("message {number}'s slot is empty"))?;
            self.data.push_back((number, bytes));
            if self.complete_on_send {
                self.complete(number)?;
            }
        }
        // Finish goes out again once the messages sent again completed.
        self.finish_sent = false;
        Ok(())
    }

    fn counts(&self, role: Role) -> Counts {
        match role {
            Role::Sender => Counts {
                messages: self.ledger.taken(),
                released: self.known_released,
            },
            Role::Receiver => Counts {
                messages: self.arrived,
                released: self.released,
            },
        }
    }

    /// One resume attempt over a simulated control connection that closes once `cut`
    /// messages went through (if any): the sender's plan, or `None` when the attempt failed.
    fn attempt(
        &self,
        ticket: &ResumeTicket,
        client_is_sender: bool,
        cut: Option<usize>,
    ) -> Result<Option<ResumePlan>, String> {
        let (client_role, server_role) = if client_is_sender {
            (Role::Sender, Role::Receiver)
        } else {
            (Role::Receiver, Role::Sender)
        };
        let mut client = ResumeHandshake::client(
            setup(ticket, client_role, self.credits)?,
            self.counts(client_role),
            Vec::new(),
        );
        let mut to_server = outbox(&mut client, None)?;
        let Some(Message::Resume { nonce, .. }) = to_server.pop_front() else {
            return Err("the client did not start with Resume".into());
        };
        let mut server = ResumeHandshake::server(
            setup(ticket, server_role, self.credits)?,
            nonce,
            Instant::now(),
        );
        let server_counts = self.counts(server_role);
        let mut to_client = outbox(&mut server, Some(server_counts))?;
        let mut delivered = 1;
        loop {
            let (end, msg) = if let Some(m) = to_client.pop_front() {
                (&mut client, m)
            } else if let Some(m) = to_server.pop_front() {
                (&mut server, m)
            } else {
                break;
            };
            if cut.is_some_and(|cut| delivered > cut) {
                // The connection closes with this message on its way. An end that had
                // resumed already (a receiver whose Ready is lost) sees a new break, not its
                // handshake: both try again from their counts.
                for side in [&mut client, &mut server] {
                    if side.resumed().is_none() {
                        if let ResumeFailure::Session(e) = side.on_control_closed() {
                            return Err(format!("a lost connection ended the session: {e}"));
                        }
                    }
                }
                return Ok(None);
            }
            delivered += 1;
            end.on_message(msg)
                .map_err(|f| format!("an honest resume failed: {f:?}"))?;
            to_client.extend(outbox(&mut server, Some(server_counts))?);
            to_server.extend(outbox(&mut client, None)?);
        }
        let sender = if client_is_sender { &client } else { &server };
        match (client.resumed(), server.resumed()) {
            (Some(_), Some(_)) => {}
            other => return Err(format!("the handshake stopped half-way: {other:?}")),
        }
        sender
            .resumed()
            .and_then(|r| r.plan.clone())
            .map(Some)
            .ok_or_else(|| "a resumed sender without a plan".to_string())
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

fn setup(ticket: &ResumeTicket, role: Role, credits: u32) -> Result<ResumeSetup, String> {
    Ok(ResumeSetup {
        ticket: ticket.clone(),
        nonce: fresh_nonce().map_err(|e| e.to_string())?,
        role,
        credits,
        deadline: Instant::now() + Duration::from_secs(5),
    })
}

/// A stranger who knows the session's id (it travels in the clear) but not its secret: its
/// attempt fails, and only the attempt.
fn stranger_attempt(ticket: &ResumeTicket) -> Result<(), String> {
    let mut server = ResumeHandshake::server(
        setup(ticket, Role::Receiver, 1)?,
        fresh_nonce().map_err(|e| e.to_string())?,
        Instant::now(),
    );
    outbox(&mut server, None)?;
    let forged = Message::ResumeProof {
        proof: [0x5a; 32],
        counts: Counts {
            messages: 0,
            released: 0,
        },
        blob: Vec::new(),
    };
    match server.on_message(forged) {
        Err(ResumeFailure::Attempt(_)) if !server.peer_proven() => Ok(()),
        other => Err(format!(
            "a stranger's attempt did not fail alone: {other:?}"
        )),
    }
}

/// What `end` has to send now; a server prepares with `prepared` counts when asked, and the
/// data path connects at once.
fn outbox(
    end: &mut ResumeHandshake,
    prepared: Option<Counts>,
) -> Result<VecDeque<Message>, String> {
    let mut out = VecDeque::new();
    while let Some(action) = end.poll_action() {
        match action {
            ResumeAction::Send(m) => out.push_back(m),
            ResumeAction::Reject(reason) => out.push_back(Message::reject(&reason)),
            ResumeAction::Prepare => {
                let counts = prepared.ok_or("a client asked to prepare")?;
                end.on_prepared(counts, Vec::new())
                    .map_err(|f| format!("an honest preparation failed: {f:?}"))?;
            }
            ResumeAction::ConnectDataPath { .. } => end
                .on_connected(false)
                .map_err(|f| format!("an honest connect failed: {f:?}"))?,
            ResumeAction::PostSlots => {}
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn breaks_anywhere_deliver_every_message_exactly_once_in_order(
        credits in 1u32..5,
        extra_staging in 0usize..2,
        total in 0u64..40,
        complete_on_send in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let staging = credits as usize + extra_staging;
        let mut w = World::new(credits, staging, total, complete_on_send);
        let mut breaks = 0;
        for op in ops {
            // Some breaks, not a storm: at most 6 per session.
            if matches!(op, Op::Break(_)) {
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
