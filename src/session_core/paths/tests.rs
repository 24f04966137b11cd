//! The rules of several paths as examples, then a property test: a sender and a receiver joined
//! by two to four simulated paths, each delivering in order, that break at random points (what
//! was in flight on it is gone) and come back. Checked: the application sees every message
//! exactly once and in order; the receiver never holds more than its credits; a message that
//! arrived is never sent again; the sender never has more than `credits` unreleased; honest ends
//! never see a violation; and the stream ends once the paths stay up.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;

#[test]
fn equal_paths_take_turns_and_the_least_loaded_path_takes_the_next_message() {
    let mut s = Striper::new(3);
    let paths: Vec<PathId> = (0..6)
        .map(|n| s.next_send(Some(n)).expect("a path").path)
        .collect();
    assert_eq!(paths, [0, 1, 2, 0, 1, 2]);
    // Everything below 5 released: paths 0 and 1 are empty, path 2 holds message 5.
    s.on_released(5).expect("honest");
    assert_eq!((s.in_flight(0), s.in_flight(1), s.in_flight(2)), (0, 0, 1));
    assert_eq!(s.assign(), Some(0), "the lower number among the empty ones");
}

#[test]
fn a_lost_path_moves_what_did_not_arrive_to_the_survivors_in_number_order_before_new_messages() {
    let mut s = Striper::new(2);
    for n in 0..6 {
        s.next_send(Some(n));
    }
    // Path 0 carried 0, 2, 4; only its first (0) arrived.
    s.path_lost(0, 1).expect("an honest count");
    assert_eq!(s.paths_up(), 1);
    let next: Vec<Placement> = (0..3)
        .map(|_| s.next_send(Some(6)).expect("a send"))
        .collect();
    assert_eq!(
        next,
        [
            Placement { number: 2, path: 1 },
            Placement { number: 4, path: 1 },
            Placement { number: 6, path: 1 },
        ]
    );
}

#[test]
fn a_path_that_comes_back_starts_empty_and_takes_messages_again() {
    let mut s = Striper::new(2);
    s.next_send(Some(0));
    s.path_lost(0, 1).expect("it arrived");
    assert!(!s.has_moved(), "an arrived message is never sent again");
    assert_eq!(s.assign(), Some(1));
    s.next_send(Some(1));
    s.path_up(0);
    assert_eq!(
        s.assign(),
        Some(0),
        "the rebuilt path is empty, path 1 holds message 1"
    );
    s.path_up(1);
    assert_eq!(
        s.in_flight(1),
        1,
        "a path that is up keeps what is in flight on it"
    );
}

#[test]
fn with_no_path_up_nothing_is_sent() {
    let mut s = Striper::new(1);
    s.next_send(Some(0));
    s.path_lost(0, 0).expect("nothing arrived");
    assert_eq!(s.next_send(Some(1)), None);
    assert!(s.has_moved());
    s.path_up(0);
    assert_eq!(s.next_send(Some(1)), Some(Placement { number: 0, path: 0 }));
}

#[test]
fn a_lost_paths_count_beyond_what_it_carried_is_a_violation() {
    let mut s = Striper::new(2);
    s.next_send(Some(0));
    assert!(matches!(
        s.path_lost(0, 2),
        Err(ProtocolViolation::PathArrivedPastSent {
            path: 0,
            arrived: 2,
            sent: 1
        })
    ));
    assert!(matches!(
        s.path_lost(7, 0),
        Err(ProtocolViolation::NoSuchPath { path: 7 })
    ));
}

#[test]
fn a_release_beyond_what_was_sent_or_of_a_moved_message_is_a_violation() {
    let mut s = Striper::new(2);
    for n in 0..4 {
        s.next_send(Some(n));
    }
    assert!(matches!(
        s.on_released(5),
        Err(ProtocolViolation::CreditInvented {
            released: 5,
            sent: 4
        })
    ));
    // Path 1 carried 1 and 3; none arrived: 1 and 3 move, and a release of 2 covers 1.
    s.path_lost(1, 0).expect("honest");
    assert!(matches!(
        s.on_released(2),
        Err(ProtocolViolation::ReleasedNotArrived { number: 1 })
    ));
    s.on_released(1).expect("message 0 arrived on path 0");
}

#[test]
fn messages_ahead_of_their_turn_wait_and_leave_in_order() {
    let mut w = ReorderWindow::new(4, 2);
    w.arrived(1, 2, "two").expect("in the window");
    w.arrived(1, 1, "one").expect("in the window");
    assert_eq!(w.pop_next(), None, "message 0 has not arrived");
    w.arrived(0, 0, "zero").expect("in the window");
    let order: Vec<u64> = std::iter::from_fn(|| w.pop_next().map(|(n, _)| n)).collect();
    assert_eq!(order, [0, 1, 2]);
    assert_eq!(w.path_lost(1), 2, "two arrived on path 1");
    assert!(matches!(
        w.arrived(1, 3, "three"),
        Err(ProtocolViolation::NoSuchPath { path: 1 })
    ));
    w.path_up(1);
    w.arrived(1, 3, "three").expect("the rebuilt path");
    assert_eq!(w.path_lost(1), 1, "counted from its return");
    assert_eq!(w.path_lost(0), 1);
}

#[test]
fn a_number_behind_beyond_or_twice_is_a_violation() {
    let mut w = ReorderWindow::new(2, 1);
    w.arrived(0, 0, ()).expect("the first");
    assert!(matches!(
        w.arrived(0, 0, ()),
        Err(ProtocolViolation::ArrivedTwice { number: 0 })
    ));
    w.pop_next();
    assert!(matches!(
        w.arrived(0, 0, ()),
        Err(ProtocolViolation::OutsideWindow { .. })
    ));
    assert!(matches!(
        w.arrived(0, 3, ()),
        Err(ProtocolViolation::OutsideWindow { .. })
    ));
    // Message 0 delivered but not released: it still holds a slot, so 2 is beyond the credits.
    assert!(matches!(
        w.arrived(0, 2, ()),
        Err(ProtocolViolation::OutsideWindow { .. })
    ));
    w.release(1);
    w.arrived(0, 2, ()).expect("within released + credits");
}

#[test]
fn the_whole_number_comes_back_from_its_low_32_bits_across_the_wrap() {
    let mut w = ReorderWindow::<()>::new(1024, 1);
    w.next = u64::from(u32::MAX) - 10;
    assert_eq!(w.number_of(u32::MAX), Ok(u64::from(u32::MAX)));
    assert_eq!(w.number_of(5), Ok(u64::from(u32::MAX) + 6));
    assert!(w.number_of(2000).is_err(), "beyond the credits");
    assert!(w.number_of(u32::MAX - 11).is_err(), "behind the next");
}

// ---------------------------------------------------------------------------------------------
// Property test
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The sender sends one message (a moved one first), if its window and a path allow.
    Send,
    /// The oldest message on path `p % paths` lands at the receiver.
    Land(u8),
    /// The receiver application takes the next message in order (it holds it).
    Deliver,
    /// The receiver application releases the oldest message it holds.
    Release,
    /// The oldest release reaches the sender.
    Credit,
    /// Path `p % paths` breaks: what is in flight on it is gone; the ends exchange its count.
    Lose(u8),
    /// Path `p % paths` comes back, if it was down.
    Return(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Send),
        5 => any::<u8>().prop_map(Op::Land),
        3 => Just(Op::Deliver),
        3 => Just(Op::Release),
        3 => Just(Op::Credit),
        1 => any::<u8>().prop_map(Op::Lose),
        2 => any::<u8>().prop_map(Op::Return),
    ]
}

struct World {
    credits: u32,
    total: u64,
    striper: Striper,
    /// The sender's window: messages taken, and released as far as it heard.
    taken: u64,
    heard_released: u64,
    /// Each path's messages in flight, in order; `None` for a path that is down.
    wire: Vec<Option<VecDeque<u64>>>,
    window: ReorderWindow<u64>,
    /// Releases on their way to the sender.
    credits_in_flight: VecDeque<u64>,
    released: u64,
    held: VecDeque<u64>,
    delivered: Vec<u64>,
    /// Every message that arrived, to check none is sent after it did.
    arrived: std::collections::BTreeSet<u64>,
}

impl World {
    fn new(credits: u32, paths: usize, total: u64) -> Self {
        Self {
            credits,
            total,
            striper: Striper::new(paths),
            taken: 0,
            heard_released: 0,
            wire: (0..paths).map(|_| Some(VecDeque::new())).collect(),
            window: ReorderWindow::new(credits, paths),
            credits_in_flight: VecDeque::new(),
            released: 0,
            held: VecDeque::new(),
            delivered: Vec::new(),
            arrived: std::collections::BTreeSet::new(),
        }
    }

    fn path(&self, p: u8) -> PathId {
        usize::from(p) % self.wire.len()
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Send => {
                let may_take = self.taken < self.total
                    && self.taken - self.heard_released < u64::from(self.credits);
                let new = may_take.then_some(self.taken);
                let oldest_moved = self.striper.moved.first().copied();
                if let Some(Placement { number, path }) = self.striper.next_send(new) {
                    assert!(
                        !self.arrived.contains(&number),
                        "message {number} sent after it arrived"
                    );
                    if let Some(moved) = oldest_moved {
                        assert_eq!(
                            number, moved,
                            "the oldest moved message goes before any other"
                        );
                    }
                    if number == self.taken {
                        self.taken += 1;
                    }
                    self.wire[path]
                        .as_mut()
                        .expect("the striper picks up paths")
                        .push_back(number);
                }
            }
            Op::Land(p) => {
                let path = self.path(p);
                if let Some(number) = self.wire[path].as_mut().and_then(VecDeque::pop_front) {
                    let low = number as u32;
                    let whole = self.window.number_of(low).expect("an honest number");
                    assert_eq!(whole, number);
                    self.window
                        .arrived(path, whole, number)
                        .expect("an honest arrival");
                    self.arrived.insert(number);
                    assert!(
                        self.window.waiting() + self.held.len() <= self.credits as usize,
                        "the receiver holds more than its credits"
                    );
                }
            }
            Op::Deliver => {
                if let Some((number, slot)) = self.window.pop_next() {
                    assert_eq!(number, slot, "the slot holds its own message");
                    self.delivered.push(number);
                    self.held.push_back(number);
                }
            }
            Op::Release => {
                if let Some(number) = self.held.pop_front() {
                    self.released = number + 1;
                    self.window.release(self.released);
                    self.credits_in_flight.push_back(self.released);
                }
            }
            Op::Credit => {
                if let Some(released) = self.credits_in_flight.pop_front() {
                    self.heard_released = released;
                    self.striper
                        .on_released(released)
                        .expect("an honest release");
                }
            }
            Op::Lose(p) => {
                let path = self.path(p);
                if self.wire[path].take().is_some() {
                    let count = self.window.path_lost(path);
                    self.striper
                        .path_lost(path, count)
                        .expect("an honest count");
                }
            }
            Op::Return(p) => {
                // Also on a path that is up: nothing may change then.
                let path = self.path(p);
                self.wire[path].get_or_insert_with(VecDeque::new);
                self.window.path_up(path);
                self.striper.path_up(path);
            }
        }
        self.check_bookkeeping();
    }

    /// Every message the sender took and did not hear released, and that has not arrived, is
    /// in exactly one place: on an up path's flight (and on its wire) or among the moved.
    fn check_bookkeeping(&self) {
        for number in self.heard_released..self.taken {
            if self.arrived.contains(&number) {
                continue;
            }
            let on_paths = self
                .striper
                .paths
                .iter()
                .filter(|p| p.up && p.in_flight.iter().any(|&(n, _)| n == number))
                .count();
            let on_wire = self
                .wire
                .iter()
                .flatten()
                .filter(|w| w.contains(&number))
                .count();
            let moved = usize::from(self.striper.moved.contains(&number));
            let at = format!(
                "message {number}: on {on_paths} path(s), {on_wire} wire(s), moved {moved}"
            );
            assert_eq!(on_paths + moved, 1, "{at}");
            assert_eq!(on_wire, on_paths, "{at}");
        }
    }

    /// Every path up and nothing lost any more: the stream must end.
    fn finish(&mut self) {
        for p in 0..self.wire.len() {
            self.apply(Op::Return(p as u8));
        }
        for _ in 0..(self.total * 8 + 64) {
            self.apply(Op::Send);
            for p in 0..self.wire.len() {
                self.apply(Op::Land(p as u8));
            }
            self.apply(Op::Deliver);
            self.apply(Op::Release);
            self.apply(Op::Credit);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn paths_lost_and_back_anywhere_deliver_every_message_exactly_once_in_order(
        credits in 1u32..6,
        paths in 1usize..5,
        total in 0u64..60,
        ops in proptest::collection::vec(op(), 0..400),
    ) {
        let mut w = World::new(credits, paths, total);
        for op in ops {
            w.apply(op);
        }
        w.finish();
        let expected: Vec<u64> = (0..total).collect();
        prop_assert_eq!(&w.delivered, &expected);
        prop_assert!(!w.striper.has_moved());
    }
}
