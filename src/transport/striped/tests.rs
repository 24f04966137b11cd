//! The striped data path against lanes the test drives by hand: arrivals and completions in
//! the order a test chooses, so that reordering, duplicates and resets are exact.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::*;
use crate::transport::Completion;
use crate::ProtocolViolation;

/// A lane of either role whose traffic the test makes: `arrive` puts bytes in the next posted
/// slot, `complete` finishes the oldest send.
#[derive(Debug, Default)]
struct HandLane {
    slots: Vec<Vec<u8>>,
    posted: VecDeque<RecvSlot>,
    arrived: Vec<Arrived>,
    sends: VecDeque<(StagingSlot, usize)>,
    completed: Vec<Completion>,
    /// What each completed send carried.
    wire: Vec<Vec<u8>>,
    credits_returned: usize,
    resets: usize,
    flushes: usize,
    /// The peer closed this lane: its polls say so (after what arrived).
    closed: bool,
    /// This lane broke: its polls fail (after what they report).
    broken: bool,
    /// The pause this lane asks for before the next sleep (asking uses it up).
    pause: Option<Duration>,
    /// Where this lane's device works (a software device: on the host's CPUs).
    work: Option<DeviceWork>,
    /// Its resets fail (its path's address is gone, say): after giving back what it held, as
    /// tcp's does, or (`Keeping`) before, as a queue pair that cannot be made again does.
    reset_fails: Option<Keeps>,
    /// How many times it was armed before a wait.
    armed: usize,
}

/// What a lane whose reset fails keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keeps {
    Nothing,
    Slots,
}

impl HandLane {
    fn new(slots: usize, slot_size: usize) -> Self {
        Self {
            slots: vec![vec![0; slot_size]; slots],
            ..Self::default()
        }
    }

    fn arrive(&mut self, bytes: &[u8]) {
        let slot = self.posted.pop_front().expect("a posted slot");
        self.slots[slot.index()][..bytes.len()].copy_from_slice(bytes);
        self.arrived.push(Arrived::new(slot, bytes.len()));
    }

    fn result(&self) -> Result<()> {
        if self.broken {
            return Err(Error::TransportProtocol {
                transport: "hand",
                detail: "the lane broke".to_owned(),
            });
        }
        Ok(())
    }

    fn complete_oldest(&mut self) {
        let (slot, len) = self.sends.pop_front().expect("a send");
        self.wire.push(self.slots[slot.index()][..len].to_vec());
        self.completed.push(Completion::Send(slot));
    }
}

impl DataPath for HandLane {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }
    fn local_blob(&self) -> Vec<u8> {
        b"lane".to_vec()
    }
    fn connect(&mut self, peer_blob: &[u8], _: Instant) -> Result<SetupStep> {
        assert_eq!(peer_blob, b"peer");
        Ok(SetupStep::Done)
    }
    fn path_mtu(&self) -> Option<u32> {
        None
    }
    fn slot_size(&self) -> usize {
        self.slots[0].len()
    }
    fn credit_route(&self) -> CreditRoute {
        CreditRoute::InBand
    }
    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        None
    }
    fn pause_before_sleep(&mut self) -> Option<Duration> {
        self.pause.take()
    }
    fn before_wait(&mut self) -> Result<bool> {
        self.armed += 1;
        Ok(false)
    }
    fn device_work(&self) -> DeviceWork {
        self.work.unwrap_or(DeviceWork::Elsewhere)
    }
    fn close(&mut self) {}
    fn can_resume(&self) -> bool {
        true
    }
    fn reset_for_resume(&mut self, reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        self.resets += 1;
        let cannot = Error::TransportProtocol {
            transport: "hand",
            detail: "the lane cannot be made again".to_owned(),
        };
        if self.reset_fails == Some(Keeps::Slots) {
            return Err(cannot);
        }
        self.broken = false;
        // Landed but not reported: not arrived (posted again, in front).
        for msg in self.arrived.drain(..).rev() {
            self.posted.push_front(msg.into_slot());
        }
        reclaimed.extend(self.sends.drain(..).map(|(slot, _)| slot));
        for c in self.completed.drain(..) {
            if let Completion::Send(slot) = c {
                reclaimed.push(slot);
            }
        }
        match self.reset_fails {
            Some(_) => Err(cannot),
            None => Ok(()),
        }
    }
}

impl SendPath for HandLane {
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        &mut self.slots[slot.index()]
    }
    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        self.sends.push_back((slot, len));
        Ok(())
    }
    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        for c in self.completed.drain(..) {
            if let Completion::Send(slot) = c {
                out.push(SendEvent::Sent(slot));
            }
        }
        if self.closed {
            return Err(Error::TransportClosed { transport: "hand" });
        }
        self.result()
    }
    fn flush_sends(&mut self) -> Result<()> {
        self.flushes += 1;
        Ok(())
    }
}

impl RecvPath for HandLane {
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()> {
        self.posted.push_back(slot);
        Ok(())
    }
    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        &self.slots[msg.slot_index()][..msg.len()]
    }
    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        out.append(&mut self.arrived);
        if self.closed {
            return Err(Error::TransportClosed { transport: "hand" });
        }
        self.result()
    }
    fn return_credits(&mut self, count: usize) -> Result<()> {
        self.credits_returned += count;
        Ok(())
    }
}

const SLOTS: usize = 4;
const SIZE: usize = 32;
const SOON: Duration = Duration::from_secs(1);

/// What a sender puts on the wire for message `number` with `payload`.
fn framed(number: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = number.to_le_bytes().to_vec();
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(payload);
    v
}

type HandReceiver = Striped<HandLane, ReceiverLanes>;
type HandSender = Striped<HandLane, SenderLanes>;

#[allow(clippy::vec_box)] // what the striped path takes
fn hand_lanes(n: usize) -> Vec<Box<HandLane>> {
    (0..n)
        .map(|_| Box::new(HandLane::new(SLOTS, SIZE + LANE_HEADER_LEN)))
        .collect()
}

fn receiver_of(lanes: usize) -> HandReceiver {
    receiver_over(lanes, 1)
}

/// A connected receiver of `lanes` lanes over `paths` paths, every slot posted.
fn receiver_over(lanes: usize, paths: usize) -> HandReceiver {
    let mut r = receiver(hand_lanes(lanes), paths, Retries::Schedules, SLOTS).expect("receiver");
    let blob = peer_blob(r.lanes.len());
    assert_eq!(
        r.connect(&blob, Instant::now() + SOON).unwrap(),
        SetupStep::Done
    );
    for i in 0..SLOTS {
        r.post_recv(RecvSlot::mint(i)).unwrap();
    }
    r
}

fn sender_of(lanes: usize) -> HandSender {
    let mut s = sender(hand_lanes(lanes), 1, Retries::Schedules, SLOTS).expect("sender");
    let blob = peer_blob(s.lanes.len());
    assert_eq!(
        s.connect(&blob, Instant::now() + SOON).unwrap(),
        SetupStep::Done
    );
    s
}

/// The peer's blob for `lanes` hand lanes: the count, then "peer" with its length each.
fn peer_blob(lanes: usize) -> Vec<u8> {
    peer_blob_parking(lanes, &[])
}

/// The same, with the parked mark for each lane in `parked` (the peer left them out).
fn peer_blob_parking(lanes: usize, parked: &[usize]) -> Vec<u8> {
    let mut v = vec![lanes as u8];
    for lane in 0..lanes {
        if parked.contains(&lane) {
            v.extend_from_slice(&u16::MAX.to_le_bytes());
        } else {
            v.extend_from_slice(&4u16.to_le_bytes());
            v.extend_from_slice(b"peer");
        }
    }
    v
}

/// Our blob's lanes: which are parked.
fn parked_in_blob(blob: &[u8]) -> Vec<bool> {
    let mut rest = &blob[1..];
    let mut out = Vec::new();
    while let Some((len, after)) = rest.split_first_chunk::<2>() {
        let len = u16::from_le_bytes(*len);
        out.push(len == u16::MAX);
        rest = if len == u16::MAX {
            after
        } else {
            &after[usize::from(len)..]
        };
    }
    out
}

/// Fills and posts slots 0 to `count - 1`, message `n` carrying the letter `'a' + n`.
fn post_letters(s: &mut HandSender, count: usize) {
    for n in 0..count {
        let mut slot = StagingSlot::mint(n);
        s.staging(&mut slot)[..1].copy_from_slice(&[b'a' + n as u8]);
        s.post_send(slot, 1).unwrap();
    }
}

fn arrivals(r: &mut HandReceiver) -> Vec<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    r.poll_arrivals(&mut out).unwrap();
    out.into_iter()
        .map(|a| (r.message(&a).to_vec(), a.slot_index()))
        .collect()
}

/// The session's resume: every reclaimed slot posted again, in slot order, bytes untouched.
fn send_again(s: &mut HandSender, mut reclaimed: Vec<StagingSlot>) {
    reclaimed.sort_by_key(StagingSlot::index);
    for slot in reclaimed {
        s.post_send(slot, 1).unwrap();
    }
}

/// Completes every send posted on `lanes`.
fn complete_every_send(s: &mut HandSender, lanes: &[usize]) {
    for &lane in lanes {
        while !s.lanes[lane].sends.is_empty() {
            s.lanes[lane].complete_oldest();
        }
    }
}

/// What `lanes` carried of [`post_letters`]' messages: (number, letter), sorted.
fn numbered_letters(s: &HandSender, lanes: &[usize]) -> Vec<(u32, u8)> {
    let mut all: Vec<(u32, u8)> = lanes
        .iter()
        .flat_map(|&l| s.lanes[l].wire.clone())
        .map(|w| (u32::from_le_bytes([w[0], w[1], w[2], w[3]]), w[8]))
        .collect();
    all.sort_unstable();
    all
}

#[test]
fn messages_that_arrive_out_of_order_on_several_lanes_reach_the_session_in_number_order() {
    let mut r = receiver_of(3);
    r.lanes[2].arrive(&framed(2, b"two"));
    r.lanes[1].arrive(&framed(1, b"one"));
    assert!(
        arrivals(&mut r).is_empty(),
        "0 has not arrived: nothing yet"
    );
    r.lanes[0].arrive(&framed(0, b"zero"));
    let got = arrivals(&mut r);
    let bytes: Vec<&[u8]> = got.iter().map(|(b, _)| b.as_slice()).collect();
    assert_eq!(bytes, [&b"zero"[..], b"one", b"two"]);
    // In the session's slots as it posted them: 0, 1, 2.
    let slots: Vec<usize> = got.iter().map(|(_, s)| *s).collect();
    assert_eq!(slots, [0, 1, 2]);
}

#[test]
fn a_released_message_gives_its_lane_slot_back_and_its_credit_goes_on_lane_0() {
    let mut r = receiver_of(2);
    let posted_before = r.lanes[1].posted.len();
    r.lanes[1].arrive(&framed(0, b"a"));
    let got = arrivals(&mut r);
    assert_eq!(got.len(), 1);
    assert_eq!(r.lanes[1].posted.len(), posted_before - 1);
    r.post_recv(RecvSlot::mint(got[0].1)).unwrap();
    assert_eq!(r.lanes[1].posted.len(), posted_before, "back on lane 1");
    r.return_credits(1).unwrap();
    assert_eq!(r.lanes[0].credits_returned, 1);
    assert_eq!(r.lanes[1].credits_returned, 0);
}

#[test]
fn a_number_twice_a_number_beyond_the_credits_and_a_headless_message_are_refused() {
    let mut r = receiver_of(2);
    r.lanes[0].arrive(&framed(1, b"x"));
    r.lanes[1].arrive(&framed(1, b"x"));
    let mut out = Vec::new();
    let e = r.poll_arrivals(&mut out).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Protocol(ProtocolViolation::ArrivedTwice { number: 1 })
        ),
        "{e}"
    );

    let mut r = receiver_of(2);
    r.lanes[0].arrive(&framed(SLOTS as u32, b"x"));
    let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
    assert!(
        matches!(e, Error::Protocol(ProtocolViolation::OutsideWindow { .. })),
        "{e}"
    );

    for headless in [&[1, 2, 3][..], &[0, 0, 0, 0, 1, 0, 0, 0, b'x'][..]] {
        let mut r = receiver_of(2);
        r.lanes[1].arrive(headless);
        let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("without a lane header"), "{e}");
    }
}

#[test]
fn a_reset_posts_again_what_waited_for_its_turn_and_numbers_start_from_0() {
    let mut r = receiver_of(2);
    r.lanes[0].arrive(&framed(0, b"zero"));
    let delivered = arrivals(&mut r);
    assert_eq!(delivered.len(), 1);
    // 2 arrived ahead of 1, which the break loses.
    r.lanes[1].arrive(&framed(2, b"two"));
    assert!(arrivals(&mut r).is_empty());
    let posted = r.lanes[1].posted.len();
    r.reset_for_resume(&mut Vec::new()).unwrap();
    assert_eq!(
        r.lanes[1].posted.len(),
        posted + 1,
        "2's slot is posted again"
    );
    assert!(r.lanes[0].resets == 1 && r.lanes[1].resets == 1);
    // The new connection counts from 0; the held message (old) is released without moving
    // the new window.
    r.connect(&peer_blob(2), Instant::now() + SOON).unwrap();
    r.post_recv(RecvSlot::mint(delivered[0].1)).unwrap();
    r.lanes[1].arrive(&framed(0, b"one again"));
    let got = arrivals(&mut r);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, b"one again");
}

#[test]
fn the_sender_takes_the_lanes_in_turn_and_reports_completions_in_the_order_it_posted() {
    let mut s = sender_of(3);
    post_letters(&mut s, 3);
    for i in 0..3 {
        assert_eq!(s.lanes[i].sends.len(), 1, "lane {i} took one");
    }
    // Lane 2 completes first: nothing is reported until 0 and 1 have.
    s.lanes[2].complete_oldest();
    let mut out = Vec::new();
    s.poll_sends(&mut out).unwrap();
    assert!(out.is_empty());
    s.lanes[0].complete_oldest();
    s.lanes[1].complete_oldest();
    s.poll_sends(&mut out).unwrap();
    let order: Vec<usize> = out
        .iter()
        .map(|e| match e {
            SendEvent::Sent(slot) => slot.index(),
            SendEvent::Credits(_) => usize::MAX,
        })
        .collect();
    assert_eq!(order, [0, 1, 2]);
    // On the wire: the number, 4 zero bytes, the payload.
    assert_eq!(s.lanes[1].wire, [framed(1, b"b")]);
    assert_eq!(s.lanes[2].wire, [framed(2, b"c")]);
}

#[test]
fn the_sender_prefers_the_lane_with_fewest_sends_outstanding() {
    let mut s = sender_of(2);
    post_letters(&mut s, 2);
    s.lanes[1].complete_oldest();
    s.poll_sends(&mut Vec::new()).unwrap();
    // Lane 0 still has one outstanding, lane 1 none: lane 1, twice in a row.
    for n in 2..4 {
        let mut slot = StagingSlot::mint(n);
        s.staging(&mut slot);
        s.post_send(slot, 0).unwrap();
        s.lanes[1].complete_oldest();
        s.poll_sends(&mut Vec::new()).unwrap();
    }
    assert_eq!(s.lanes[1].wire.len(), 3);
    assert_eq!(s.lanes[0].sends.len(), 1);
}

#[test]
fn a_reset_gives_back_every_posted_slot_and_a_message_sent_again_stays_on_its_lane() {
    let mut s = sender_of(2);
    post_letters(&mut s, 2);
    let mut reclaimed = Vec::new();
    s.reset_for_resume(&mut reclaimed).unwrap();
    let mut back: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
    back.sort_unstable();
    assert_eq!(back, [0, 1]);
    s.connect(&peer_blob(2), Instant::now() + SOON).unwrap();
    // Sent again without a new fill (the session's resume): slot 1 goes out on lane 1, where
    // its bytes are, numbered from 0 on the new connection.
    let one = reclaimed.into_iter().find(|s| s.index() == 1).unwrap();
    s.post_send(one, 1).unwrap();
    s.lanes[1].complete_oldest();
    assert_eq!(s.lanes[1].wire, [framed(0, b"b")]);
}

#[test]
fn a_peer_blob_with_another_lane_count_or_cut_short_is_refused() {
    let mut s = sender_of(2);
    s.reset_for_resume(&mut Vec::new()).unwrap();
    for bad in [peer_blob(3), peer_blob(2)[..5].to_vec(), vec![], {
        let mut v = peer_blob(2);
        v.push(0);
        v
    }] {
        let e = s.connect(&bad, Instant::now() + SOON).unwrap_err();
        assert!(
            e.to_string()
                .contains("the peer's connection data for 2 lanes"),
            "{e}"
        );
    }
}

#[test]
fn a_send_completed_behind_an_unfinished_one_comes_back_at_a_reset() {
    let mut s = sender_of(2);
    post_letters(&mut s, 2);
    // Lane 1 completed message 1; lane 0 never completes message 0 (its queue pair failed).
    s.lanes[1].complete_oldest();
    let mut out = Vec::new();
    s.poll_sends(&mut out).unwrap();
    assert!(out.is_empty(), "1 waits behind 0");
    let mut reclaimed = Vec::new();
    s.reset_for_resume(&mut reclaimed).unwrap();
    let mut back: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
    back.sort_unstable();
    assert_eq!(back, [0, 1], "both slots are the session's again");
}

#[test]
fn an_oldest_send_not_completed_makes_its_lane_report_what_it_posted() {
    let mut s = sender_of(2);
    post_letters(&mut s, 2);
    s.lanes[1].complete_oldest();
    s.poll_sends(&mut Vec::new()).unwrap();
    // Message 0 is on lane 0: a lane that signals only every few sends must be asked.
    assert_eq!((s.lanes[0].flushes, s.lanes[1].flushes), (1, 0));
    s.lanes[0].complete_oldest();
    s.poll_sends(&mut Vec::new()).unwrap();
    assert_eq!(
        s.lanes[0].flushes, 1,
        "nothing outstanding: no more flushes"
    );
}

#[test]
fn one_closed_lane_does_not_end_the_stream_while_another_still_delivers() {
    let mut r = receiver_of(2);
    r.lanes[0].arrive(&framed(0, b"zero"));
    r.lanes[0].closed = true;
    r.lanes[1].arrive(&framed(1, b"one"));
    let got = arrivals(&mut r);
    assert_eq!(
        got.len(),
        2,
        "both arrive; the close of lane 0 alone is no end"
    );
    r.lanes[1].closed = true;
    let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::TransportClosed { .. }), "{e}");
}

/// A lane the peer closed while another stays open and brings nothing: once the grace has
/// passed, the data path reports its close (a failure under one queue pair, not the end);
/// while the open lane brings messages, the grace starts again.
#[test]
fn a_lone_closed_lane_ends_the_data_path_once_the_open_ones_stay_quiet_for_the_grace() {
    let mut r = receiver_of(2);
    r.close_grace = Duration::from_secs(3600);
    r.lanes[0].closed = true;
    assert!(arrivals(&mut r).is_empty(), "within the grace: no end");
    r.lanes[1].arrive(&framed(0, b"zero"));
    assert_eq!(arrivals(&mut r).len(), 1, "the open lane still delivers");
    r.close_grace = Duration::ZERO;
    r.lanes[1].arrive(&framed(1, b"one"));
    assert_eq!(arrivals(&mut r).len(), 1, "progress restarts the grace");
    let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::TransportClosed { .. }), "{e}");
    assert!(
        r.poll_arrivals(&mut Vec::new()).is_ok(),
        "reported once, as a close of every lane"
    );

    // The sender's side: its lane 1 closed by the peer, lane 0 open and quiet.
    let mut s = sender_of(2);
    s.close_grace = Duration::ZERO;
    s.lanes[1].closed = true;
    assert!(s.poll_sends(&mut Vec::new()).is_ok(), "the grace starts");
    let e = s.poll_sends(&mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::TransportClosed { .. }), "{e}");
    // A reset starts over.
    s.reset_for_resume(&mut Vec::new()).unwrap();
    assert!(s.lone_close.is_none());
}

/// While a lone closed lane waits out its grace, the data path asks to be polled again at
/// its end (an event loop's readiness timer), and only open lanes are armed for a wait (a
/// closed DOCA lane keeps reporting its failure: arming it would make each wait a spin).
#[test]
fn a_lone_closed_lane_is_not_armed_and_the_grace_is_a_deadline_for_the_next_poll() {
    let mut r = receiver_of(2);
    assert_eq!(r.poll_again_at(), None);
    r.close_grace = Duration::from_secs(3600);
    r.lanes[0].closed = true;
    let before = Instant::now();
    assert!(arrivals(&mut r).is_empty());
    let at = r.poll_again_at().expect("the grace's end");
    assert!(at >= before + Duration::from_secs(3600), "{at:?}");
    assert!(!r.before_wait().unwrap());
    assert_eq!(
        (r.lanes[0].armed, r.lanes[1].armed),
        (0, 1),
        "the closed lane is not armed"
    );
}

/// A close taken as a failure (the grace passed) marks its path failed, as a lane's error
/// does: the next reset leaves that path out, and the session goes on over the other.
#[test]
fn a_lone_close_taken_as_a_failure_parks_its_path_at_the_next_reset() {
    let mut r = receiver_over(2, 2);
    r.close_grace = Duration::ZERO;
    r.lanes[1].closed = true;
    assert!(arrivals(&mut r).is_empty(), "the grace starts");
    let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::TransportClosed { .. }), "{e}");
    r.lanes[1].closed = false;
    r.reset_for_resume(&mut Vec::new()).unwrap();
    assert_eq!(parked_in_blob(&r.local_blob()), [false, true]);
}

/// Once the peer said Finish and was let go, it closes every lane: a lane that closes first
/// is waited for however long the others take, and what they still carry arrives (a tcp
/// connection's tail may sit in a retransmission stall). A reset forgets it.
#[test]
fn after_the_peer_finished_a_lone_closed_lane_waits_for_the_others_however_long() {
    let mut r = receiver_of(2);
    r.close_grace = Duration::ZERO;
    r.peer_finished();
    r.lanes[0].arrive(&framed(0, b"zero"));
    r.lanes[0].closed = true;
    assert_eq!(arrivals(&mut r).len(), 1);
    for _ in 0..3 {
        assert!(
            arrivals(&mut r).is_empty(),
            "no failure: lane 1 may still bring"
        );
    }
    assert_eq!(r.poll_again_at(), None, "nothing to wait out");
    r.lanes[1].arrive(&framed(1, b"one"));
    assert_eq!(arrivals(&mut r).len(), 1, "the slow lane's message arrives");
    r.lanes[1].closed = true;
    let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::TransportClosed { .. }), "{e}");

    r.lanes[0].closed = false;
    r.lanes[1].closed = false;
    r.reset_for_resume(&mut Vec::new()).unwrap();
    assert!(!r.peer_finished, "a reset forgets it");
}

#[test]
fn several_lanes_in_use_never_pause_and_each_uses_its_own_pause_up() {
    let mut r = receiver_of(3);
    r.lanes[0].pause = Some(Duration::from_micros(50));
    r.lanes[2].pause = Some(Duration::from_micros(50));
    assert_eq!(r.pause_before_sleep(), None);
    assert!(r.lanes.iter().all(|lane| lane.pause.is_none()));
}

#[test]
fn a_lone_lane_in_use_pauses_as_it_asks_and_a_parked_one_is_not_asked() {
    let mut r = receiver(hand_lanes(2), 2, Retries::Schedules, SLOTS).expect("receiver");
    // The peer left out path 0 (lane 0): lane 1 is the only one in use.
    assert_eq!(
        r.connect(&peer_blob_parking(2, &[0]), Instant::now() + SOON)
            .unwrap(),
        SetupStep::Done
    );
    r.lanes[0].pause = Some(Duration::from_micros(80));
    r.lanes[1].pause = Some(Duration::from_micros(50));
    assert_eq!(r.pause_before_sleep(), Some(Duration::from_micros(50)));
    assert_eq!(r.pause_before_sleep(), None, "used up");
    assert!(r.lanes[0].pause.is_some(), "a parked lane is not asked");
}

#[test]
fn a_path_works_on_the_host_cpus_if_a_lane_in_use_does_and_a_parked_one_is_not_counted() {
    let mut r = receiver(hand_lanes(2), 2, Retries::Schedules, SLOTS).expect("receiver");
    assert_eq!(r.device_work(), DeviceWork::Elsewhere);
    r.lanes[1].work = Some(DeviceWork::HostThreads);
    assert_eq!(
        r.device_work(),
        DeviceWork::HostThreads,
        "lane 1 is soft-RoCE"
    );
    // The peer left out path 1 (lane 1): only lane 0, on hardware, is in use.
    assert_eq!(
        r.connect(&peer_blob_parking(2, &[1]), Instant::now() + SOON)
            .unwrap(),
        SetupStep::Done
    );
    assert_eq!(
        r.device_work(),
        DeviceWork::Elsewhere,
        "a parked lane is not counted"
    );
}

#[test]
fn messages_held_from_before_a_reset_count_against_the_credits() {
    let mut r = receiver_of(2);
    for n in 0..SLOTS as u32 {
        r.lanes[(n % 2) as usize].arrive(&framed(n, b"held"));
    }
    assert_eq!(
        arrivals(&mut r).len(),
        SLOTS,
        "the session holds every slot"
    );
    r.reset_for_resume(&mut Vec::new()).unwrap();
    r.connect(&peer_blob(2), Instant::now() + SOON).unwrap();
    // A new message while every slot is still held: the peer exceeded its credit.
    r.lanes[0].arrive(&framed(0, b"over"));
    let e = r.poll_arrivals(&mut Vec::new()).unwrap_err();
    assert!(
        matches!(e, Error::Protocol(ProtocolViolation::CreditOverrun { .. })),
        "{e}"
    );
}

/// Four lanes over two paths: lane 1 breaks, so the resumed data path leaves path 1 (lanes 1
/// and 3) out: our blob says so, the messages that were on it go out again on lanes in use
/// with the same bytes and their numbers in order, new messages take only lanes 0 and 2, and
/// the path counts as lost once.
#[test]
fn a_broken_lane_leaves_its_path_out_and_its_messages_go_out_again_on_the_others() {
    let mut s = sender(hand_lanes(4), 2, Retries::Schedules, SLOTS).expect("sender");
    s.connect(&peer_blob(4), Instant::now() + SOON).unwrap();
    post_letters(&mut s, 4); // a on lane 0, b on 1, c on 2, d on 3
    s.lanes[1].broken = true;
    assert!(s.poll_sends(&mut Vec::new()).is_err());
    let mut reclaimed = Vec::new();
    s.reset_for_resume(&mut reclaimed).unwrap();
    assert_eq!(reclaimed.len(), 4);
    assert_eq!(parked_in_blob(&s.local_blob()), [false, true, false, true]);
    assert_eq!(
        s.connect(&peer_blob(4), Instant::now() + SOON).unwrap(),
        SetupStep::Done
    );
    // The session sends the four again, in order, from the same slots (bytes untouched).
    send_again(&mut s, reclaimed);
    // And two new ones.
    for n in 0..2 {
        let mut slot = StagingSlot::mint(n);
        let mut out = Vec::new();
        complete_every_send(&mut s, &[0, 2]);
        s.poll_sends(&mut out).unwrap();
        assert!(!out.is_empty(), "completions come back");
        s.staging(&mut slot)[..1].copy_from_slice(&[b'e' + n as u8]);
        s.post_send(slot, 1).unwrap();
    }
    complete_every_send(&mut s, &[0, 2]);
    // Nothing completed before the break (the reset took those sends back): what lanes 0
    // and 2 carried is the resumed stream, and lanes 1 and 3 carried nothing since.
    assert!(s.lanes[1].sends.is_empty() && s.lanes[3].sends.is_empty());
    assert!(s.lanes[1].wire.is_empty() && s.lanes[3].wire.is_empty());
    let after = numbered_letters(&s, &[0, 2]);
    assert_eq!(
        after,
        [
            (0, b'a'),
            (1, b'b'),
            (2, b'c'),
            (3, b'd'),
            (4, b'e'),
            (5, b'f')
        ],
        "every message once, numbered in order, the moved ones with their bytes"
    );
    assert_eq!(
        s.take_path_events(),
        PathEvents {
            lost: 1,
            rebuilt: 0
        }
    );
}

/// A receiver parks what the peer's blob leaves out, and returns its credits on the first
/// lane in use; a peer that leaves out every lane is refused.
#[test]
fn the_peers_parked_lanes_are_parked_here_and_credits_go_on_a_lane_in_use() {
    let mut r = receiver(hand_lanes(4), 2, Retries::Schedules, SLOTS).expect("receiver");
    // The peer left out path 0 (lanes 0 and 2).
    assert_eq!(
        r.connect(&peer_blob_parking(4, &[0, 2]), Instant::now() + SOON)
            .unwrap(),
        SetupStep::Done
    );
    for i in 0..SLOTS {
        r.post_recv(RecvSlot::mint(i)).unwrap();
    }
    r.lanes[1].arrive(&framed(0, b"zero"));
    r.lanes[3].arrive(&framed(1, b"one"));
    let got = arrivals(&mut r);
    assert_eq!(got.len(), 2);
    r.return_credits(2).unwrap();
    assert_eq!(r.lanes[0].credits_returned, 0, "lane 0 is out of use");
    assert_eq!(r.lanes[1].credits_returned, 2);

    let mut r = receiver(hand_lanes(2), 2, Retries::Schedules, SLOTS).expect("receiver");
    let e = r
        .connect(&peer_blob_parking(2, &[0, 1]), Instant::now() + SOON)
        .unwrap_err();
    assert!(e.to_string().contains("every path"), "{e}");
}

/// A lane that cannot be made again at a reset (its path's address or device is gone), while
/// nothing had failed on it: its path is parked at that reset, after the lane gave its slots
/// back, and the reset succeeds. Its messages go out on the other path, the path counts as
/// lost, and once the lane can be made again it is used again when its path is tried.
#[test]
fn a_lane_that_cannot_be_made_again_leaves_its_path_out_of_that_reset() {
    let mut s = sender(hand_lanes(4), 2, Retries::Schedules, SLOTS).expect("sender");
    s.connect(&peer_blob(4), Instant::now() + SOON).unwrap();
    post_letters(&mut s, 4); // a on lane 0, b on 1, c on 2, d on 3
    s.lanes[3].reset_fails = Some(Keeps::Nothing);
    let mut reclaimed = Vec::new();
    s.reset_for_resume(&mut reclaimed)
        .expect("the other path goes on");
    assert_eq!(reclaimed.len(), 4, "every posted slot comes back");
    assert_eq!(
        s.lanes.iter().map(|l| l.resets).collect::<Vec<_>>(),
        [1; 4],
        "every lane was reset"
    );
    assert_eq!(parked_in_blob(&s.local_blob()), [false, true, false, true]);
    assert_eq!(
        s.connect(&peer_blob(4), Instant::now() + SOON).unwrap(),
        SetupStep::Done
    );
    send_again(&mut s, reclaimed);
    complete_every_send(&mut s, &[0, 2]);
    let after = numbered_letters(&s, &[0, 2]);
    assert_eq!(after, [(0, b'a'), (1, b'b'), (2, b'c'), (3, b'd')]);
    assert_eq!(s.take_path_events().lost, 1);

    // The next reset, within the path's backoff, leaves it out again without failing.
    s.reset_for_resume(&mut Vec::new()).expect("still left out");
    assert_eq!(parked_in_blob(&s.local_blob()), [false, true, false, true]);
}

/// A lane that cannot be made again is not left behind when there is no other path, nor
/// when it still holds a slot of the session's (a queue pair that could not be replaced may
/// still use it): the reset fails, as it would with one lane.
#[test]
fn a_lane_that_cannot_be_made_again_fails_the_reset_without_another_path_or_holding_slots() {
    let mut one_path = sender(hand_lanes(2), 1, Retries::Schedules, SLOTS).expect("sender");
    one_path
        .connect(&peer_blob(2), Instant::now() + SOON)
        .unwrap();
    one_path.lanes[1].reset_fails = Some(Keeps::Nothing);
    assert!(one_path.reset_for_resume(&mut Vec::new()).is_err());

    let mut holding = sender(hand_lanes(2), 2, Retries::Schedules, SLOTS).expect("sender");
    holding
        .connect(&peer_blob(2), Instant::now() + SOON)
        .unwrap();
    post_letters(&mut holding, 2); // a on lane 0, b on lane 1
    holding.lanes[1].reset_fails = Some(Keeps::Slots);
    let mut reclaimed = Vec::new();
    let e = holding.reset_for_resume(&mut reclaimed).unwrap_err();
    assert!(e.to_string().contains("cannot be made again"), "{e}");
    assert_eq!(
        reclaimed.iter().map(StagingSlot::index).collect::<Vec<_>>(),
        [0],
        "only what came back"
    );

    // The same lane without slots of the session's is left behind.
    let mut idle = sender(hand_lanes(2), 2, Retries::Schedules, SLOTS).expect("sender");
    idle.connect(&peer_blob(2), Instant::now() + SOON).unwrap();
    idle.lanes[1].reset_fails = Some(Keeps::Slots);
    idle.reset_for_resume(&mut Vec::new())
        .expect("nothing of the session's on it");
    assert_eq!(parked_in_blob(&idle.local_blob()), [false, true]);
}

/// A receiver's lane that cannot be made again parks its path too, and its blob says so.
#[test]
fn a_receivers_lane_that_cannot_be_made_again_leaves_its_path_out() {
    let mut r = receiver(hand_lanes(2), 2, Retries::Follows, SLOTS).expect("receiver");
    r.connect(&peer_blob(2), Instant::now() + SOON).unwrap();
    for i in 0..SLOTS {
        r.post_recv(RecvSlot::mint(i)).unwrap();
    }
    r.lanes[1].reset_fails = Some(Keeps::Nothing);
    r.reset_for_resume(&mut Vec::new()).expect("lane 0 goes on");
    assert_eq!(parked_in_blob(&r.local_blob()), [false, true]);
    assert_eq!(
        r.connect(&peer_blob(2), Instant::now() + SOON).unwrap(),
        SetupStep::Done
    );
    r.lanes[0].arrive(&framed(0, b"zero"));
    assert_eq!(arrivals(&mut r).len(), 1);
}
