//! Property tests of the core: a sender and a receiver core joined by simulated queues, driven
//! by random interleavings of application calls, completions, control messages, loss and a
//! hostile sender, with simulated time. No sockets, no sleeps.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::receiving::{ReceiverCore, RecvStep};
use super::sending::{FinishStep, SenderCore};
use crate::proto::Message;
use crate::{Error, ProtocolViolation};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The application sends one message (if the sender may).
    Send,
    /// The oldest message in flight lands in the receiver's next slot.
    Land,
    /// The oldest outstanding send completes at the sender.
    Complete,
    /// The receiver application asks for the next message.
    Recv,
    /// The oldest control message reaches the sender.
    DeliverControl,
    /// The sender application calls finish (as far as it can go without waiting).
    Finish,
    /// The oldest control message is duplicated (cumulative credits make that harmless).
    Duplicate,
    /// Time passes.
    Tick(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Send),
        4 => Just(Op::Land),
        3 => Just(Op::Complete),
        4 => Just(Op::Recv),
        3 => Just(Op::DeliverControl),
        1 => Just(Op::Finish),
        1 => Just(Op::Duplicate),
        1 => (0u8..20).prop_map(Op::Tick),
    ]
}

/// Both cores and the wires between them.
struct Sim {
    now: Instant,
    tx: SenderCore,
    rx: ReceiverCore,
    credits: u32,
    /// Data in flight: (sequence, staging slot, length).
    wire: VecDeque<(u64, usize, usize)>,
    /// Staging slots whose send has not completed, oldest first.
    outstanding: VecDeque<usize>,
    /// Receiver slot per landed sequence, for checking deliveries.
    landed: VecDeque<(u64, usize)>,
    /// Receiver to sender control messages.
    to_sender: VecDeque<Message>,
    /// Sequence numbers delivered to the receiving application.
    delivered: Vec<u64>,
    /// Sequence numbers that the receiver's slot `i` holds.
    slot_seq: Vec<Option<u64>>,
    finish_sent: Option<u64>,
    ended: bool,
    failed: bool,
}

impl Sim {
    fn new(credits: u32) -> Self {
        let now = Instant::now();
        Self {
            now,
            tx: SenderCore::new(credits, credits as usize, None, now),
            rx: ReceiverCore::new(credits, None, now),
            credits,
            wire: VecDeque::new(),
            outstanding: VecDeque::new(),
            landed: VecDeque::new(),
            to_sender: VecDeque::new(),
            delivered: Vec::new(),
            slot_seq: vec![None; credits as usize],
            finish_sent: None,
            ended: false,
            failed: false,
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Send => {
                if self.finish_sent.is_some() || !self.tx.is_open() {
                    return;
                }
                if let Some((seq, slot)) = self.tx.try_take().expect("sender open") {
                    self.wire.push_back((seq, slot, (seq % 7) as usize));
                    self.outstanding.push_back(slot);
                }
                let unreleased = self.tx.sent() - self.tx.released();
                assert!(unreleased <= u64::from(self.credits), "window exceeded");
            }
            Op::Land => {
                if let Some((seq, _, len)) = self.wire.pop_front() {
                    let slot = (seq % u64::from(self.credits)) as usize;
                    assert!(self.slot_seq[slot].is_none(), "landed in an occupied slot");
                    self.slot_seq[slot] = Some(seq);
                    self.landed.push_back((seq, slot));
                    if let Err(e) = self.rx.on_arrival(slot, len, self.now) {
                        panic!("honest sender broke a rule: {e}");
                    }
                }
            }
            Op::Complete => {
                // RDMA completes a send once it landed.
                let landed = self.tx.sent() - self.wire.len() as u64;
                let completed = self.tx.sent() - self.outstanding.len() as u64;
                if completed < landed {
                    if let Some(slot) = self.outstanding.pop_front() {
                        self.tx.on_send_complete(slot).expect("completion");
                    }
                }
            }
            Op::Recv => self.recv(),
            Op::DeliverControl => {
                if let Some(msg) = self.to_sender.pop_front() {
                    self.tx.on_control(msg, self.now).expect("honest credit");
                }
            }
            Op::Duplicate => {
                if let Some(msg) = self.to_sender.front().cloned() {
                    self.to_sender.push_front(msg);
                }
            }
            Op::Finish => {
                if self.finish_sent.is_none() {
                    if let FinishStep::SendFinish { count } = self.tx.finish_step(self.now).unwrap()
                    {
                        self.tx.on_finish_sent(self.now);
                        self.finish_sent = Some(count);
                        self.rx.on_control(Message::Finish { count }).unwrap();
                    }
                }
            }
            Op::Tick(ms) => self.now += Duration::from_millis(u64::from(ms)),
        }
    }

    fn recv(&mut self) {
        if self.ended || self.failed {
            return;
        }
        if let Some(slot) = self.rx.release().unwrap() {
            self.slot_seq[slot] = None;
            if let Some(released) = self.rx.credit_due() {
                self.to_sender.push_back(Message::Credit { released });
            }
        }
        match self.rx.next(self.now) {
            Ok(RecvStep::Deliver { slot, .. }) => {
                let (seq, landed_slot) = self.landed.pop_front().expect("a landed message");
                assert_eq!(slot, landed_slot);
                assert_eq!(self.slot_seq[slot], Some(seq));
                self.delivered.push(seq);
            }
            Ok(RecvStep::End) => self.ended = true,
            Ok(RecvStep::Wait { .. }) => {}
            Err(Error::PeerLost { .. }) => self.failed = true,
            Err(e) => panic!("receiver failed on an honest sender: {e}"),
        }
    }

    /// Sends `more` messages (the sender must never starve for good: credits come back
    /// without any flush), then lets every queue drain so an honest session must end.
    fn settle(&mut self, more: u64) {
        let target = self.tx.sent() + more;
        for _ in 0..10_000 {
            if self.ended || self.failed {
                return;
            }
            if self.tx.sent() < target {
                self.step(Op::Send);
            }
            self.step(Op::Land);
            self.step(Op::Complete);
            self.step(Op::DeliverControl);
            self.step(Op::Recv);
            if self.tx.sent() >= target {
                self.step(Op::Finish);
            }
        }
        panic!(
            "the session did not end (sent {} of {target})",
            self.tx.sent()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Honest ends under any interleaving: never more than N unreleased, every message
    /// delivered exactly once and in order, never one past Finish{count}, end of stream reached.
    #[test]
    fn honest_sessions_deliver_everything_once_in_order(
        credits in 1u32..9,
        ops in proptest::collection::vec(op(), 0..400),
        more in 0u64..40,
    ) {
        let mut sim = Sim::new(credits);
        for op in ops {
            sim.step(op);
        }
        sim.settle(more);
        prop_assert!(sim.ended, "honest sessions end cleanly");
        let count = sim.finish_sent.expect("finish was sent");
        prop_assert_eq!(sim.delivered.len() as u64, count);
        prop_assert!(sim.delivered.iter().copied().eq(0..count));
    }

    /// A hostile sender: extra messages after Finish, wrong counts, repeated Finish and junk
    /// control messages are refused, and nothing past the count is ever delivered.
    #[test]
    fn hostile_senders_never_get_a_message_past_finish_delivered(
        credits in 1u32..5,
        before in 0u64..6,
        count in 0u64..8,
        extra in 0u64..6,
        junk in 0u8..4,
    ) {
        let now = Instant::now();
        let mut rx = ReceiverCore::new(credits, None, now);
        let mut arrived = 0u64;
        let mut delivered = 0u64;
        // One message lands; when every slot is held, the application takes one first.
        let land = |rx: &mut ReceiverCore, arrived: &mut u64, delivered: &mut u64| -> Result<(), Error> {
            let slot = (*arrived % u64::from(credits)) as usize;
            match rx.on_arrival(slot, 1, now) {
                Err(Error::Protocol(ProtocolViolation::CreditOverrun { .. })) => {
                    if let RecvStep::Deliver { .. } = rx.next(now)? {
                        *delivered += 1;
                    }
                    rx.release()?;
                    rx.on_arrival(slot, 1, now)?;
                }
                other => other?,
            }
            *arrived += 1;
            Ok(())
        };
        for _ in 0..before {
            land(&mut rx, &mut arrived, &mut delivered).expect("before Finish, any count is fine");
        }
        let accepted = rx.on_control(Message::Finish { count }).is_ok();
        prop_assert_eq!(accepted, count >= arrived);
        if accepted {
            let junk_msg = match junk {
                1 => Some(Message::Finish { count }),
                2 => Some(Message::Credit { released: 0 }),
                3 => Some(Message::Ready),
                _ => None,
            };
            if let Some(msg) = junk_msg {
                let refused = rx.on_control(msg).is_err();
                prop_assert!(refused, "junk control message accepted");
            }
            let mut refused = false;
            for _ in 0..(count - arrived + extra) {
                if let Err(e) = land(&mut rx, &mut arrived, &mut delivered) {
                    let past_finish = matches!(e, Error::Protocol(ProtocolViolation::PastFinish { .. }));
                    prop_assert!(past_finish, "unexpected error {}", e);
                    refused = true;
                    break;
                }
            }
            while let Ok(RecvStep::Deliver { .. }) = rx.next(now) {
                delivered += 1;
                rx.release().unwrap();
            }
            prop_assert!(delivered <= count, "delivered {} past Finish{{{}}}", delivered, count);
            prop_assert_eq!(refused, extra > 0, "a message past the count must be refused");
            prop_assert_eq!(delivered, count);
            prop_assert_eq!(rx.next(now).unwrap(), RecvStep::End);
        }
    }
}
