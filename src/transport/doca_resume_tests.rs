//! `DataPath::reset_for_resume` of the DOCA transport against the simulator, in process: a
//! sender and a receiver transport, the link under them flapped by the simulator's fault
//! injection (`doca_sys::sim::flap_links`), both reset, connected again with their new blobs,
//! and the messages sent again landing in the receiver's slots in the order they were posted.

use std::time::{Duration, Instant};

use super::DocaTransport;
use crate::proto::Role;
use crate::transport::{
    Arrived, DataPath, RecvPath, RecvSlot, SendEvent, SendPath, SetupParams, StagingSlot,
};

/// Credits: message `n` is staged in slot `n % SLOTS` and lands in the receiver's `n % SLOTS`.
const SLOTS: usize = 8;
const SLOT_SIZE: usize = 64;
const DEADLINE: Duration = Duration::from_secs(5);

fn params(role: Role) -> SetupParams {
    super::sim_test_params(role, SLOTS, SLOT_SIZE)
}

/// Message `n`'s bytes (lengths differ, so a message landing in the wrong place shows).
fn message(n: usize) -> Vec<u8> {
    format!("message {n};").repeat(n % 3 + 1).into_bytes()
}

/// Stages message `n` in its slot and posts it.
fn send(sender: &mut DocaTransport, n: usize) {
    let mut slot = StagingSlot::mint(n % SLOTS);
    let bytes = message(n);
    sender.staging(&mut slot)[..bytes.len()].copy_from_slice(&bytes);
    sender
        .post_send(slot, bytes.len())
        .unwrap_or_else(|e| panic!("post_send of message {n}: {e}"));
}

fn connect(sender: &mut DocaTransport, receiver: &mut DocaTransport) {
    let deadline = Instant::now() + DEADLINE;
    let (to_sender, to_receiver) = (receiver.local_blob(), sender.local_blob());
    sender
        .connect(&to_sender, deadline)
        .expect("sender connect");
    receiver
        .connect(&to_receiver, deadline)
        .expect("receiver connect");
}

/// Polls the sender until `sent` sends and `credits` credits were reported; returns the
/// slots of the sends, in the order reported.
fn sends_done(sender: &mut DocaTransport, sent: usize, credits: usize) -> Vec<usize> {
    let deadline = Instant::now() + DEADLINE;
    let (mut slots, mut got_credits, mut events) = (Vec::new(), 0, Vec::new());
    while slots.len() < sent || got_credits < credits {
        sender.poll_sends(&mut events).expect("poll_sends");
        for event in events.drain(..) {
            match event {
                SendEvent::Sent(slot) => slots.push(slot.index()),
                SendEvent::Credits(n) => got_credits += n as usize,
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} of {sent} sends and {got_credits} of {credits} credits reported",
            slots.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        slots.len(),
        sent,
        "more sends reported than made: {slots:?}"
    );
    assert_eq!(got_credits, credits, "more credits reported than returned");
    slots
}

/// Polls the receiver until `want` messages arrived; returns them.
fn arrivals(receiver: &mut DocaTransport, want: usize) -> Vec<Arrived> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    while got.len() < want {
        receiver.poll_arrivals(&mut got).expect("poll_arrivals");
        assert!(
            Instant::now() < deadline,
            "{} of {want} messages arrived",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got.len(), want, "more messages arrived than sent");
    got
}

/// Checks that `got` holds messages `first..` in order, each in slot `n % SLOTS` with its
/// bytes; returns their slots.
fn check_in_order(receiver: &DocaTransport, got: Vec<Arrived>, first: usize) -> Vec<RecvSlot> {
    got.into_iter()
        .enumerate()
        .map(|(k, msg)| {
            let n = first + k;
            assert_eq!(
                (msg.slot_index(), receiver.message(&msg)),
                (n % SLOTS, message(n).as_slice()),
                "message {n} (slot, bytes)"
            );
            msg.into_slot()
        })
        .collect()
}

/// Completions that must not come: after a quiet while, a poll of each end reports nothing.
fn assert_quiet(sender: &mut DocaTransport, receiver: &mut DocaTransport, when: &str) {
    std::thread::sleep(Duration::from_millis(30));
    let (mut events, mut got) = (Vec::new(), Vec::new());
    sender.poll_sends(&mut events).expect("poll_sends");
    receiver.poll_arrivals(&mut got).expect("poll_arrivals");
    assert!(
        events.is_empty() && got.is_empty(),
        "{when}: the sender reported {events:?}, the receiver {got:?}"
    );
}

/// Progresses the end's engine until its callbacks recorded a completion that no poll
/// reported yet.
fn until_completed_unreported(path: &mut DocaTransport, who: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let Some(d) = path.doca.as_mut() else {
            panic!("{who}: closed");
        };
        d.progress_busy();
        if !d.ctx.handler().done.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{who}: nothing completed");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How the path breaks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Break {
    /// `doca_sys::sim::flap_links` once message 2 landed: the sender's QP goes to error when
    /// it sends next; the receiver notices nothing, its receives stay posted.
    LinkFlap,
    /// `doca_sys::sim::set_drop_after(3)`: both ends' connections fail at message 2 (which
    /// lands and completes first), every posted receive and later send with it.
    Drop,
}

/// One session's data path through a break and a resume, then a resume with nothing broken
/// while a send is in flight.
fn break_and_resume(mode: &str, how: Break) {
    if how == Break::Drop {
        doca_sys::sim::set_drop_after(Some(3));
    }
    let mut sender = DocaTransport::new(&params(Role::Sender)).expect("sender");
    let mut receiver = DocaTransport::new(&params(Role::Receiver)).expect("receiver");
    connect(&mut sender, &mut receiver);
    for i in 0..SLOTS {
        receiver.post_recv(RecvSlot::mint(i)).expect("post_recv");
    }

    // Messages 0 and 1 arrive and are reported; the receiver's driver posts slot 0 again
    // (posted now: 2..7, then 0) and keeps slot 1.
    send(&mut sender, 0);
    send(&mut sender, 1);
    assert_eq!(sends_done(&mut sender, 2, 0), [0, 1], "{mode}");
    let got = arrivals(&mut receiver, 2);
    let mut held = check_in_order(&receiver, got, 0);
    receiver
        .post_recv(held.remove(0))
        .expect("post slot 0 again");
    // Message 2 lands and its send completes; neither end's poll reports it.
    send(&mut sender, 2);
    until_completed_unreported(&mut sender, &format!("{mode}: sender"));
    until_completed_unreported(&mut receiver, &format!("{mode}: receiver"));

    // The path breaks: messages 3 and 4, posted after it, fail.
    match how {
        Break::LinkFlap => {
            let flapped = doca_sys::sim::flap_links();
            assert_eq!(flapped, 2, "{mode}: both ends' connections");
        }
        Break::Drop => doca_sys::sim::set_drop_after(None),
    }
    send(&mut sender, 3);
    send(&mut sender, 4);

    let old_blobs = (sender.local_blob(), receiver.local_blob());
    let mut reclaimed = Vec::new();
    sender
        .reset_for_resume(&mut reclaimed)
        .expect("sender reset");
    let mut reclaimed: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
    reclaimed.sort_unstable();
    assert_eq!(
        reclaimed,
        [2, 3, 4],
        "{mode}: the sends not reported (2 completed, 3 and 4 failed)"
    );
    let mut none = Vec::new();
    receiver
        .reset_for_resume(&mut none)
        .expect("receiver reset");
    assert!(none.is_empty(), "{mode}: a receiver has no staging slot");
    assert_quiet(&mut sender, &mut receiver, "after the reset");
    assert!(
        sender.local_blob() != old_blobs.0 && receiver.local_blob() != old_blobs.1,
        "{mode}: a resume exports new connections"
    );

    // The new path: message 2 is sent again first; the receiver's posted slots 2..7, 0 take
    // messages 2..8 in that order (message 8 from slot 0, which the sender got back).
    connect(&mut sender, &mut receiver);
    for n in 2..=8 {
        send(&mut sender, n);
    }
    let got = arrivals(&mut receiver, 7);
    check_in_order(&receiver, got, 2);
    let mut done = sends_done(&mut sender, 7, 0);
    done.sort_unstable();
    assert_eq!(done, [0, 2, 3, 4, 5, 6, 7], "{mode}");
    // The sender's credit receives are posted on the new connection.
    receiver.return_credits(2).expect("return_credits");
    sends_done(&mut sender, 0, 2);
    assert_quiet(&mut sender, &mut receiver, "after the resumed messages");

    // A resume with nothing broken (the control connection broke), message 9 in flight: the
    // receiver's driver holds every slot, so it waits for a receive (receiver not ready).
    send(&mut sender, 9);
    let mut reclaimed = Vec::new();
    sender
        .reset_for_resume(&mut reclaimed)
        .expect("sender reset");
    let reclaimed: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
    assert_eq!(reclaimed, [1], "{mode}: the send in flight");
    receiver
        .reset_for_resume(&mut none)
        .expect("receiver reset");
    assert_quiet(&mut sender, &mut receiver, "after the second reset");
    connect(&mut sender, &mut receiver);
    // The driver posts its free slot (message 9's) and the sender sends message 9 again.
    receiver
        .post_recv(held.pop().expect("slot 1"))
        .expect("post slot 1");
    send(&mut sender, 9);
    let got = arrivals(&mut receiver, 1);
    check_in_order(&receiver, got, 9);
    assert_eq!(sends_done(&mut sender, 1, 0), [1], "{mode}");
    assert_quiet(&mut sender, &mut receiver, "at the end");
    sender.close();
    receiver.close();
}

/// A link flap under a DOCA sender and receiver, then `reset_for_resume` on both: the sender
/// gets back exactly the slots of the sends no poll reported (one completed, two failed),
/// nothing of the old connection is reported afterwards, both export new connections, and
/// once connected again with them the messages sent again land in the receive slots that
/// were posted, in the order they were posted (one whose message had landed unreported
/// included), with their bytes; credits flow again; a second resume with a send in flight
/// gives that one back. In every simulator mode the transport can meet: asynchronous and
/// synchronous start, a stop that refuses while tasks are allocated, the selective event
/// mode; and once with both ends' connections dropped (every posted receive failed before the
/// reset). Nothing is left alive at the end.
#[test]
fn a_resume_after_a_link_flap_sends_again_into_the_posted_slots_in_order() {
    let _serial = super::SIM_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (start_async, stop_refuse, selective) in [
        (true, false, false),
        (false, false, false),
        (true, true, false),
        (true, false, true),
    ] {
        doca_sys::sim::reset_config();
        doca_sys::sim::set_start_async(start_async);
        doca_sys::sim::set_stop_refuse(stop_refuse);
        let faults = if selective {
            "doca_pe_set_event_mode:1+:NOT_SUPPORTED"
        } else {
            ""
        };
        doca_sys::sim::set_faults(faults).expect("faults");
        let mode = format!(
            "{} start, {} stop, {} event mode",
            if start_async { "async" } else { "sync" },
            if stop_refuse { "refusing" } else { "accepting" },
            if selective {
                "selective"
            } else {
                "PROGRESS_ALL"
            },
        );
        break_and_resume(&mode, Break::LinkFlap);
    }
    doca_sys::sim::reset_config();
    doca_sys::sim::set_faults("").expect("faults");
    break_and_resume("a dropped connection", Break::Drop);
    doca_sys::sim::reset_config();
    doca_sys::sim::set_faults("").expect("faults");
    assert_eq!(
        doca_sys::sim::live_objects(),
        0,
        "{}",
        doca_sys::sim::report()
    );
}
