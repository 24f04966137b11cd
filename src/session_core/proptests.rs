//! Property tests of the core: a sender and a receiver core joined by simulated queues, driven
//! by random interleavings of application calls, completions, control messages, Reject and loss
//! (of the control connection or the data path) and a hostile sender, with simulated time (the
//! sender keeping its messages until released, as resumption needs, or not); and
//! two handshakes joined by a simulated control connection, with Reject, mismatched peers and
//! loss at any step. No sockets, no sleeps.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::handshake::{Auth, Handshake, HandshakeAction};
use super::receiving::{ReceiverAction, ReceiverCore, RecvStep};
use super::resume::plan_resume;
use super::resume_handshake::check_sender_counts;
use super::sending::{FinishStep, SenderAction, SenderCore};
use crate::auth::AuthKey;
use crate::net::Lost;
use crate::proto::{Message, Role, TransportKind};
use crate::transport::{Arrived, CreditRoute, RecvSlot, SendEvent, StagingSlot};
use crate::Error;
use crate::ProtocolViolation;

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The application sends one message (if the sender may).
    Send,
    /// The oldest message in flight lands in the receiver's next posted slot.
    Land,
    /// The oldest landed send completes at the sender.
    Complete,
    /// The receiver application asks for the next message.
    Recv,
    /// The oldest message (or in-band credit) for the sender reaches it.
    DeliverToSender,
    /// The oldest control message for the receiver reaches it.
    DeliverToReceiver,
    /// The sender application calls finish (as far as it can go without waiting).
    Finish,
    /// The oldest control message is duplicated (cumulative credits make that harmless).
    Duplicate,
    /// Time passes.
    Tick(u8),
    /// Resumption only: the path breaks (what is in flight is lost) and both cores resume.
    Break,
}

/// A fault injected once, at a random point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The sender application aborts (Reject).
    SenderAborts,
    /// The receiver application aborts (Reject).
    ReceiverAborts,
    /// The control connection breaks (both ends see it closed).
    ControlLost,
    /// The data path breaks (what is in flight is gone; both ends see it closed).
    DataLost,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Send),
        4 => Just(Op::Land),
        3 => Just(Op::Complete),
        4 => Just(Op::Recv),
        3 => Just(Op::DeliverToSender),
        2 => Just(Op::DeliverToReceiver),
        1 => Just(Op::Finish),
        1 => Just(Op::Duplicate),
        1 => (0u8..20).prop_map(Op::Tick),
    ]
}

/// The operations, and now and then a break of the path (resumption on).
fn op_or_break() -> impl Strategy<Value = Op> {
    prop_oneof![30 => op(), 1 => Just(Op::Break)]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::SenderAborts),
        Just(Fault::ReceiverAborts),
        Just(Fault::ControlLost),
        Just(Fault::DataLost),
    ]
}

/// How one end finished.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Running,
    /// Receiver: end of stream. Sender: finish returned this count.
    Clean(u64),
    Failed(String),
}

/// Both cores and the wires between them.
struct Sim {
    now: Instant,
    tx: SenderCore,
    rx: ReceiverCore,
    route: CreditRoute,
    credits: u32,
    /// Data in flight: (sequence, its staging slot unless its send completed already,
    /// length).
    wire: VecDeque<(u64, Option<StagingSlot>, usize)>,
    /// tcp: a send completes when it is handed over (the kernel took it), before it lands;
    /// RC: once it landed.
    complete_on_send: bool,
    /// Landed sends whose completion the sender has not seen, oldest first.
    landed_sends: VecDeque<StagingSlot>,
    /// Receive slots posted, in posting order.
    posted: VecDeque<RecvSlot>,
    /// Sequence number per receive slot, for checking deliveries.
    slot_seq: Vec<Option<u64>>,
    /// Receiver to sender: control messages, and in-band credits not yet seen.
    to_sender: VecDeque<Message>,
    /// In-band credit announcements not yet seen by the sender, oldest first.
    inband_credits: VecDeque<u32>,
    /// Sender to receiver control messages.
    to_receiver: VecDeque<Message>,
    /// The receiver shut down writing (after Finish): the sender sees the close once
    /// everything before it was read.
    rx_write_shut: bool,
    data_closed: bool,
    control_lost: bool,
    delivered: Vec<u64>,
    finish_sent: Option<u64>,
    finish_started: bool,
    tx_out: Outcome,
    rx_out: Outcome,
    /// Resumes so far, and the one during which Finish was last sent.
    resumes: u32,
    finish_sent_in: Option<u32>,
}

impl Sim {
    /// `keeping`: the sender keeps its messages until released (resumption on).
    fn new(credits: u32, route: CreditRoute, keeping: bool) -> Self {
        let now = Instant::now();
        let staging = (0..credits as usize).map(StagingSlot::for_test).collect();
        let tx = SenderCore::new(credits, staging, route, None, now);
        Self {
            now,
            tx: if keeping { tx.keeping_messages() } else { tx },
            rx: ReceiverCore::new(credits, route, None, now),
            route,
            credits,
            wire: VecDeque::new(),
            complete_on_send: false,
            landed_sends: VecDeque::new(),
            posted: (0..credits as usize).map(RecvSlot::for_test).collect(),
            slot_seq: vec![None; credits as usize],
            to_sender: VecDeque::new(),
            inband_credits: VecDeque::new(),
            to_receiver: VecDeque::new(),
            rx_write_shut: false,
            data_closed: false,
            control_lost: false,
            delivered: Vec::new(),
            finish_sent: None,
            finish_started: false,
            tx_out: Outcome::Running,
            rx_out: Outcome::Running,
            resumes: 0,
            finish_sent_in: None,
        }
    }

    /// Resumption on: the sender keeps its messages, the receiver may resume; sends complete
    /// on hand-over (tcp) when `complete_on_send`.
    fn resumable(mut self, complete_on_send: bool) -> Self {
        self.rx = ReceiverCore::new(self.credits, self.route, None, self.now).resumable();
        self.complete_on_send = complete_on_send;
        self
    }

    /// A message goes on the wire; on tcp its send completes at once.
    fn put_on_wire(&mut self, seq: u64, slot: StagingSlot) {
        let len = (seq % 7) as usize;
        if self.complete_on_send {
            self.wire.push_back((seq, None, len));
            let r = self.tx.on_send_event(SendEvent::Sent(slot), self.now);
            self.tx_result(r);
        } else {
            self.wire.push_back((seq, Some(slot), len));
        }
    }

    /// The path breaks: what is in flight (messages, completions, credits on either route,
    /// control messages) is lost, the torn-down path gives back the staging slots it held,
    /// and both cores resume by the plan their counts give. Once the receiver let the sender
    /// go, there is nothing to resume: every counted message must be here by then.
    fn break_and_resume(&mut self) {
        if !self.rx_running() {
            return;
        }
        if !self.tx_running() || self.rx_write_shut {
            assert!(
                self.wire.is_empty(),
                "the sender was let go with messages on their way"
            );
            return;
        }
        let reclaimed: Vec<StagingSlot> = self
            .wire
            .drain(..)
            .filter_map(|(_, slot, _)| slot)
            .chain(self.landed_sends.drain(..))
            .collect();
        self.inband_credits.clear();
        self.to_sender.clear();
        self.to_receiver.clear();
        let tx_counts = self.tx.begin_resume().expect("a running sender resumes");
        let rx_counts = self.rx.begin_resume().expect("a running receiver resumes");
        for slot in reclaimed {
            self.tx
                .on_reclaimed(slot)
                .expect("each slot comes back once");
        }
        check_sender_counts(rx_counts, tx_counts).expect("honest counts");
        let plan = plan_resume(tx_counts, rx_counts, self.credits).expect("honest counts");
        self.resumes += 1;
        let r = self.rx.resumed(rx_counts, self.now);
        self.rx_result(r);
        let again = self.tx.resume(&plan, self.now);
        if let Some(again) = self.tx_result(again) {
            for (seq, slot) in again {
                self.put_on_wire(seq, slot);
            }
        }
        // A finish under way goes on (Finish again once the messages sent again completed).
        self.finish_progress();
    }

    fn tx_running(&self) -> bool {
        self.tx_out == Outcome::Running
    }

    fn rx_running(&self) -> bool {
        self.rx_out == Outcome::Running
    }

    /// A sender call ended in `result`: the failure policy, then its actions.
    fn tx_result<T>(&mut self, result: Result<T, Error>) -> Option<T> {
        let value = match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.tx.on_error(&e);
                if self.tx_running() {
                    self.tx_out = Outcome::Failed(e.to_string());
                }
                None
            }
        };
        while let Some(action) = self.tx.poll_action() {
            match action {
                SenderAction::SendFinish { count } => {
                    if let Some(first) = self.finish_sent {
                        assert!(
                            first == count && self.finish_sent_in < Some(self.resumes),
                            "Finish queued twice on one path, or with another count"
                        );
                    }
                    self.finish_sent_in = Some(self.resumes);
                    assert!(self.landed_sends.is_empty());
                    assert!(self.complete_on_send || self.wire.is_empty());
                    if !self.control_lost {
                        self.to_receiver.push_back(Message::Finish { count });
                    }
                    self.finish_sent = Some(count);
                    self.tx.on_finish_sent(self.now);
                }
                SenderAction::Reject(reason) => {
                    if !self.control_lost {
                        self.to_receiver.push_back(Message::Reject { reason });
                    }
                }
                SenderAction::CloseDataPath => self.data_closed = true,
            }
        }
        value
    }

    /// A receiver call ended in `result`: the failure policy, then its actions.
    fn rx_result<T>(&mut self, result: Result<T, Error>) -> Option<T> {
        let value = match result {
            Ok(v) => Some(v),
            Err(e) => {
                if let Error::Protocol(v) = &e {
                    panic!("an honest sender broke a rule: {v}");
                }
                self.rx.on_error(&e);
                if self.rx_running() {
                    self.rx_out = Outcome::Failed(e.to_string());
                }
                None
            }
        };
        while let Some(action) = self.rx.poll_action() {
            match action {
                ReceiverAction::Repost(slot) => {
                    self.slot_seq[slot.index()] = None;
                    self.posted.push_back(slot);
                }
                ReceiverAction::AnnounceCredit { released } => {
                    assert_eq!(self.route, CreditRoute::ControlChannel);
                    if !self.control_lost {
                        self.to_sender.push_back(Message::Credit { released });
                    }
                }
                ReceiverAction::ReturnCredits { count } => {
                    assert_eq!(self.route, CreditRoute::InBand);
                    if !self.data_closed {
                        let count = u32::try_from(count).expect("a window's worth of credits");
                        self.inband_credits.push_back(count);
                    }
                }
                ReceiverAction::ShutdownControlWrite => self.rx_write_shut = true,
                ReceiverAction::Reject(reason) => {
                    if !self.control_lost {
                        self.to_sender.push_back(Message::Reject { reason });
                    }
                    self.rx_write_shut = true;
                }
                ReceiverAction::CloseDataPath => self.data_closed = true,
            }
        }
        value
    }

    fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::SenderAborts => {
                self.tx.abort("the application gave up");
                self.tx_result(Ok(()));
                if self.tx_running() {
                    self.tx_out = Outcome::Failed("aborted".into());
                }
            }
            Fault::ReceiverAborts => {
                self.rx.abort("the application gave up");
                self.rx_result(Ok(()));
                if self.rx_running() {
                    self.rx_out = Outcome::Failed("aborted".into());
                }
            }
            Fault::ControlLost => {
                self.control_lost = true;
                self.to_sender.clear();
                self.to_receiver.clear();
                if self.tx_running() {
                    let r = self.tx.on_control_closed(Lost::closed("reset"));
                    self.tx_result(r);
                }
                if self.rx_running() {
                    let r = self.rx.on_control_closed(Lost::closed("reset"));
                    self.rx_result(r);
                }
            }
            Fault::DataLost => {
                self.data_closed = true;
                self.wire.clear();
                self.inband_credits.clear();
                if self.rx_running() {
                    self.rx.on_data_closed(self.now);
                }
                if self.tx_running() && !self.finish_started {
                    // The sender's next poll fails; explained as the peer lost.
                    let released = self.tx.released();
                    self.tx_result::<()>(Err(
                        Lost::closed("the data path closed").into_error(released)
                    ));
                }
            }
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Send => {
                if self.finish_started || !self.tx_running() || self.data_closed {
                    return;
                }
                let taken = self.tx.try_take();
                if let Some(Some((seq, slot))) = self.tx_result(taken) {
                    self.put_on_wire(seq, slot);
                }
                let unreleased = self.tx.sent() - self.tx.released();
                assert!(unreleased <= u64::from(self.credits), "window exceeded");
            }
            Op::Land => {
                if self.data_closed || self.posted.is_empty() {
                    // No slot posted: the message waits (RDMA retries it).
                    return;
                }
                if let Some((seq, slot, len)) = self.wire.pop_front() {
                    self.landed_sends.extend(slot);
                    let rslot = self.posted.pop_front().expect("a posted slot");
                    let index = rslot.index();
                    assert!(self.slot_seq[index].is_none(), "landed in an occupied slot");
                    self.slot_seq[index] = Some(seq);
                    if self.rx_running() {
                        let r = self.rx.on_arrival(Arrived::for_test(index, len), self.now);
                        self.rx_result(r);
                    }
                }
            }
            Op::Complete => {
                if let Some(slot) = self.landed_sends.pop_front() {
                    if self.tx_running() {
                        let r = self.tx.on_send_event(SendEvent::Sent(slot), self.now);
                        self.tx_result(r);
                    }
                }
            }
            Op::Recv => self.recv(),
            Op::DeliverToSender => {
                if !self.tx_running() {
                    return;
                }
                if let Some(count) = self.inband_credits.pop_front() {
                    let r = self.tx.on_send_event(SendEvent::Credits(count), self.now);
                    self.tx_result(r);
                } else if let Some(msg) = self.to_sender.pop_front() {
                    let r = self.tx.on_control(msg, self.now);
                    self.tx_result(r);
                } else if self.rx_write_shut && !self.tx.control_closed() {
                    let r = self
                        .tx
                        .on_control_closed(Lost::closed("closed by the peer"));
                    self.tx_result(r);
                }
            }
            Op::DeliverToReceiver => {
                if let Some(msg) = self.to_receiver.pop_front() {
                    if self.rx_running() {
                        let r = self.rx.on_control(msg);
                        self.rx_result(r);
                    }
                }
            }
            Op::Duplicate => {
                if let Some(msg @ Message::Credit { .. }) = self.to_sender.front().cloned() {
                    self.to_sender.push_front(msg);
                }
            }
            Op::Finish => {
                if !self.tx_running() {
                    return;
                }
                if !self.finish_started {
                    self.finish_started = true;
                    let r = self.tx.begin_finish(self.now);
                    self.tx_result(r);
                }
                self.finish_progress();
            }
            Op::Break => self.break_and_resume(),
            Op::Tick(ms) => {
                self.now += Duration::from_millis(u64::from(ms) * 50);
                if self.tx_running() && self.finish_started {
                    let r = self.tx.handle_timeout(self.now);
                    self.tx_result(r);
                    self.finish_progress();
                }
                if self.rx_running() {
                    let r = self.rx.handle_timeout(self.now);
                    self.rx_result(r);
                }
            }
        }
    }

    fn finish_progress(&mut self) {
        if !self.tx_running() || !self.finish_started {
            return;
        }
        let step = self.tx.finish_step();
        if let Some(FinishStep::Done) = self.tx_result(step) {
            self.tx_out = Outcome::Clean(self.tx.sent());
        }
    }

    fn recv(&mut self) {
        if !self.rx_running() {
            return;
        }
        let next = self.rx.next();
        match self.rx_result(next) {
            Some(RecvStep::Deliver) => {
                let held = self.rx.held().expect("a held message");
                let seq = self.slot_seq[held.slot_index()].expect("a landed message");
                self.delivered.push(seq);
            }
            Some(RecvStep::End) => self.rx_out = Outcome::Clean(self.rx.delivered()),
            Some(RecvStep::Wait) | None => {}
        }
    }

    /// Sends `more` messages (the sender must never starve for good: credits come back
    /// without any flush), then lets every queue drain and time pass, so that every session
    /// must end, cleanly when nothing was injected.
    fn settle(&mut self, more: u64) {
        let target = self.tx.sent() + more;
        for round in 0..20_000 {
            if !self.tx_running() && !self.rx_running() {
                return;
            }
            if self.tx.sent() < target {
                self.step(Op::Send);
            }
            self.step(Op::Land);
            self.step(Op::Complete);
            self.step(Op::DeliverToSender);
            self.step(Op::DeliverToReceiver);
            self.step(Op::Recv);
            if self.tx.sent() >= target || !self.tx.is_open() {
                self.step(Op::Finish);
            }
            if round % 16 == 15 {
                self.step(Op::Tick(20));
            }
        }
        panic!(
            "the session did not end (sent {} of {target}; sender {:?}, receiver {:?})",
            self.tx.sent(),
            self.tx_out,
            self.rx_out
        );
    }
}

/// Runs `ops`, then settles (sending `more`): both ends must end cleanly with every message
/// delivered once, in order, and nothing past Finish.
fn run_to_a_clean_end(sim: &mut Sim, ops: Vec<Op>, more: u64) -> Result<(), TestCaseError> {
    for op in ops {
        sim.step(op);
    }
    sim.settle(more);
    let count = sim.finish_sent.expect("finish was sent");
    prop_assert_eq!(&sim.rx_out, &Outcome::Clean(count));
    prop_assert_eq!(&sim.tx_out, &Outcome::Clean(count));
    prop_assert_eq!(sim.delivered.len() as u64, count);
    prop_assert!(sim.delivered.iter().copied().eq(0..count));
    Ok(())
}

fn route(inband: bool) -> CreditRoute {
    if inband {
        CreditRoute::InBand
    } else {
        CreditRoute::ControlChannel
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Honest ends under any interleaving, either credit route: never more than N unreleased,
    /// every message delivered exactly once and in order, never one past Finish{count}, end of
    /// stream reached on both ends.
    #[test]
    fn honest_sessions_deliver_everything_once_in_order(
        credits in 1u32..9,
        inband in any::<bool>(),
        keeping in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..400),
        more in 0u64..40,
    ) {
        let mut sim = Sim::new(credits, route(inband), keeping);
        run_to_a_clean_end(&mut sim, ops, more)?;
    }

    /// Resumption on the real cores, sends completing on landing (RC) or on hand-over (tcp):
    /// the path breaks at random points (in the middle, while Finish is on its way, right after
    /// a resume), what was in flight is lost (messages, completions, credits on either route,
    /// Finish), the torn-down path gives its slots back, and both cores resume by the plan; every message is delivered exactly once and in
    /// order, nothing past Finish, Finish is sent again only on a new path and with its
    /// count, and both ends end cleanly.
    #[test]
    fn breaks_at_any_point_resume_the_real_cores_and_deliver_everything_once_in_order(
        credits in 1u32..6,
        inband in any::<bool>(),
        ops in proptest::collection::vec(op_or_break(), 0..400),
        complete_on_send in any::<bool>(),
        more in 0u64..40,
    ) {
        let mut sim = Sim::new(credits, route(inband), true).resumable(complete_on_send);
        run_to_a_clean_end(&mut sim, ops, more)?;
    }

    /// A Reject or a loss at any point: both ends terminate; what was delivered is a prefix of
    /// what was sent, each once, in order; a receiver that ended cleanly got exactly the
    /// Finish count; an end that was told by its peer does not answer with a Reject.
    #[test]
    fn rejects_and_losses_at_any_point_end_both_sides_with_an_in_order_prefix(
        credits in 1u32..6,
        inband in any::<bool>(),
        keeping in any::<bool>(),
        before in proptest::collection::vec(op(), 0..200),
        fault in fault(),
        after in proptest::collection::vec(op(), 0..100),
    ) {
        let mut sim = Sim::new(credits, route(inband), keeping);
        for op in before {
            sim.step(op);
        }
        sim.inject(fault);
        for op in after {
            sim.step(op);
        }
        sim.settle(5);
        prop_assert!(sim.delivered.iter().copied().eq(0..sim.delivered.len() as u64));
        prop_assert!(sim.delivered.len() as u64 <= sim.tx.sent());
        if let Outcome::Clean(count) = sim.rx_out {
            prop_assert_eq!(Some(count), sim.finish_sent);
            prop_assert_eq!(sim.delivered.len() as u64, count);
        }
        if let Outcome::Clean(count) = sim.tx_out {
            prop_assert_eq!(Some(count), sim.finish_sent);
        }
        if fault == Fault::SenderAborts && sim.finish_sent.is_none() {
            prop_assert!(matches!(sim.rx_out, Outcome::Failed(_)), "{:?}", sim.rx_out);
        }
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
        let mut rx = ReceiverCore::new(credits, CreditRoute::ControlChannel, None, now);
        let mut arrived = 0u64;
        let mut delivered = 0u64;
        // One message lands; when every slot is held, the application takes one first.
        let land = |rx: &mut ReceiverCore, arrived: &mut u64, delivered: &mut u64| -> Result<(), Error> {
            let slot = (*arrived % u64::from(credits)) as usize;
            // Each `next` releases the message delivered by the one before.
            let mut tries = 0;
            while let Err(e) = rx.on_arrival(Arrived::for_test(slot, 1), now) {
                tries += 1;
                if !matches!(e, Error::Protocol(ProtocolViolation::CreditOverrun { .. })) || tries > 2 {
                    return Err(e);
                }
                if let RecvStep::Deliver = rx.next()? {
                    *delivered += 1;
                }
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
            while let Ok(RecvStep::Deliver) = rx.next() {
                delivered += 1;
            }
            prop_assert!(delivered <= count, "delivered {} past Finish{{{}}}", delivered, count);
            prop_assert_eq!(refused, extra > 0, "a message past the count must be refused");
            prop_assert_eq!(delivered, count);
            prop_assert_eq!(rx.next().unwrap(), RecvStep::End);
        }
    }

    /// Two handshakes over a simulated control connection, with any roles, transports and
    /// keys (none, the same, different), a Reject or a loss at any step, and the deadline: both
    /// terminate; no hello gets past a key mismatch; both establish only when the peers are
    /// compatible and nothing was injected; a receiver says Ready only
    /// after its slots are posted, and a sender is never established before Ready.
    #[test]
    fn handshakes_establish_only_compatible_peers_and_end_on_any_fault(
        client_sends in any::<bool>(),
        server_sends in any::<bool>(),
        same_transport in prop::bool::weighted(0.8),
        client_key in prop::sample::select(vec![0u8, 1, 1, 2]),
        server_key in prop::sample::select(vec![0u8, 1, 1, 2]),
        fault_at in 0usize..12,
        fault in 0u8..4,
        order in proptest::collection::vec(0u8..4, 0..60),
    ) {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        let role = |sends: bool| if sends { Role::Sender } else { Role::Receiver };
        let client_hello = crate::session_core::handshake::tests::hello(role(client_sends), TransportKind::Tcp);
        let server_transport = if same_transport { TransportKind::Tcp } else { TransportKind::Verbs };
        let server_hello = crate::session_core::handshake::tests::hello(role(server_sends), server_transport);
        // Key 0: none; 1 and 2: two different keys. Nonces differ per end.
        let auth = |key: u8, nonce: u8| (key > 0).then(|| Auth {
            key: AuthKey::from_bytes(&[key; 32]).expect("key"),
            nonce: [nonce; 32],
        });
        let mut ends = [
            Handshake::client_hello_later(deadline, auth(client_key, 11)),
            Handshake::server(now, deadline, auth(server_key, 22)),
        ];
        let mut wires: [VecDeque<Message>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut connect_pending = [false, false];
        let mut posted = [false, false];
        let mut ready_seen = [false, false];
        let mut failed = [false, false];
        let mut server_prepared = false;
        let mut client_prepared = false;
        let mut steps = 0usize;
        let mut injected = false;
        let mut schedule = order.into_iter().chain(std::iter::repeat_n(0..4u8, 50).flatten());
        for choice in schedule.by_ref() {
            if (failed[0] || ends[0].is_established()) && (failed[1] || ends[1].is_established()) {
                break;
            }
            steps += 1;
            prop_assert!(steps < 400, "the handshakes did not end");
            if steps == fault_at && fault < 3 {
                injected = true;
                let side = usize::from(fault == 1);
                match fault {
                    0 | 1 => {
                        // One end's application gives up: a Reject to the other.
                        if !failed[side] && !ends[side].is_established() {
                            failed[side] = true;
                            wires[1 - side].push_back(Message::reject("gave up"));
                        }
                    }
                    _ => {
                        // The control connection breaks: both ends see the close.
                        for (i, end) in ends.iter_mut().enumerate() {
                            if !failed[i] && !end.is_established() {
                                end.on_control_closed(Lost::closed("reset"));
                                failed[i] = true;
                            }
                        }
                        wires = [VecDeque::new(), VecDeque::new()];
                    }
                }
            }
            let i = usize::from(choice % 2 == 1);
            if failed[i] {
                continue;
            }
            // Actions of end i: its messages go on the wire to the other end.
            while let Some(action) = ends[i].poll_action() {
                match action {
                    HandshakeAction::Send(msg) => {
                        if msg == Message::Ready {
                            prop_assert!(posted[i], "Ready before the slots were posted");
                        }
                        wires[1 - i].push_back(msg);
                    }
                    HandshakeAction::Reject(reason) => {
                        wires[1 - i].push_back(Message::Reject { reason });
                        failed[i] = true;
                    }
                    HandshakeAction::ConnectDataPath { .. } => connect_pending[i] = true,
                    HandshakeAction::PostSlots => posted[i] = true,
                }
            }
            if failed[i] {
                continue;
            }
            if i == 1 && server_key != client_key {
                prop_assert!(ends[1].peer().is_none(), "a hello got past a key mismatch");
            }
            // The client builds its hello only once it may (after its proof, with a key).
            if i == 0 && ends[0].awaits_our_hello() && !client_prepared {
                client_prepared = true;
                prop_assert!(
                    client_key == 0 || ends[0].proven_nonces().is_some(),
                    "a keyed client prepared before it proved the key"
                );
                if ends[0].our_hello(client_hello.clone()).is_err() {
                    failed[0] = true;
                }
                continue;
            }
            if i == 1 && ends[1].awaits_our_hello() && !server_prepared {
                server_prepared = true;
                if ends[1].our_hello(server_hello.clone()).is_err() {
                    continue;
                }
                continue;
            }
            if choice >= 2 && connect_pending[i] {
                connect_pending[i] = false;
                ends[i].on_connected(false).expect("no early data");
                continue;
            }
            if let Some(msg) = wires[i].pop_front() {
                ready_seen[i] |= msg == Message::Ready;
                if ends[i].on_message(msg).is_err() {
                    failed[i] = true;
                }
            }
        }
        // The last actions (a receiver's PostSlots and Ready come with its establishment).
        for (i, end) in ends.iter_mut().enumerate() {
            while let Some(action) = end.poll_action() {
                match action {
                    HandshakeAction::PostSlots => posted[i] = true,
                    HandshakeAction::Send(Message::Ready) => {
                        prop_assert!(posted[i], "Ready before the slots were posted");
                    }
                    _ => {}
                }
            }
        }
        // Whatever remains is ended by the deadline.
        for (i, end) in ends.iter_mut().enumerate() {
            if !failed[i] && !end.is_established() {
                prop_assert!(end.handle_timeout(deadline).is_err());
            }
        }
        let compatible = client_sends != server_sends && same_transport && client_key == server_key;
        if ends[0].is_established() && ends[1].is_established() {
            prop_assert!(compatible, "incompatible peers established");
        }
        if compatible && !injected {
            prop_assert!(ends[0].is_established() && ends[1].is_established(),
                "compatible peers without a fault must both establish");
        }
        if !compatible {
            prop_assert!(!(ends[0].is_established() && ends[1].is_established()));
        }
        for (i, end) in ends.iter().enumerate() {
            if end.is_established() {
                let sender = if i == 0 { client_sends } else { server_sends };
                if sender {
                    prop_assert!(ready_seen[i], "a sender established before the receiver's Ready");
                } else {
                    prop_assert!(posted[i], "a receiver established without posting");
                }
            }
        }
    }
}
