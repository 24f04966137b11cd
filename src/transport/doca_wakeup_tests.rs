//! Wake-up tests of the DOCA transport against the simulator, in process: a sender and a
//! receiver transport connected to each other, driven the way the session drives them.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::DocaTransport;
use crate::proto::Role;
use crate::transport::{
    Arrived, DataPath, RecvPath, RecvSlot, SendEvent, SendPath, SetupParams, StagingSlot,
};

/// More than the 256 progress calls one poll used to make: the first progress of a poll
/// leaves completions pending when it arms (a completion between progress and arm).
const BURST: usize = 300;

fn params(role: Role) -> SetupParams {
    super::sim_test_params(role, BURST, 64)
}

/// One sleep of the session on the data path (`Session::wait` with only the data watched):
/// let the transport arm, sleep on the wait handle, tell the transport when it fired. Returns
/// whether there is something to poll.
fn sleep_on_data(path: &mut dyn DataPath, timeout: Duration) -> bool {
    if path.before_wait().expect("before_wait") {
        return true;
    }
    let Some(handle) = path.wait_handle() else {
        return false;
    };
    let mut fds = [nix::poll::PollFd::new(
        handle.fd,
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let ready = matches!(nix::poll::poll(&mut fds, ms), Ok(1));
    if ready {
        path.on_wakeup();
    }
    ready
}

fn send(sender: &mut DocaTransport, mut slot: StagingSlot) {
    sender.staging(&mut slot)[..8].copy_from_slice(b"message!");
    sender.post_send(slot, 8).expect("post_send");
}

/// Receives until `want` arrivals, sleeping between empty polls; the slots come back posted.
fn receive(receiver: &mut DocaTransport, want: usize, deadline: Instant) -> Vec<Arrived> {
    let mut got = Vec::new();
    while got.len() < want {
        receiver.poll_arrivals(&mut got).expect("poll_arrivals");
        if got.len() >= want {
            break;
        }
        assert!(Instant::now() < deadline, "{} of {want} arrived", got.len());
        sleep_on_data(receiver, Duration::from_millis(100));
    }
    got
}

/// Runs the probe's sequence once in the simulator's current mode; returns the wake-up
/// latency of the late message, or `None` when the receiver's handle never became readable
/// (a lost wake-up: the session would only see it at the end of its wait slice).
fn late_message_wakeup(mode: &str) -> Option<Duration> {
    let mut sender = DocaTransport::new(&params(Role::Sender)).expect("sender");
    let mut receiver = DocaTransport::new(&params(Role::Receiver)).expect("receiver");
    let deadline = Instant::now() + Duration::from_secs(5);
    sender
        .connect(&receiver.local_blob(), deadline)
        .expect("sender connect");
    receiver
        .connect(&sender.local_blob(), deadline)
        .expect("receiver connect");
    for i in 0..BURST {
        receiver.post_recv(RecvSlot::mint(i)).expect("post_recv");
    }
    // A burst, all of it completed on the receiver's side before it polls: a send completes
    // once its receive landed.
    for i in 0..BURST {
        send(&mut sender, StagingSlot::mint(i));
    }
    let mut free = Vec::new();
    let mut events = Vec::new();
    while free.len() < BURST {
        sender.poll_sends(&mut events).expect("poll_sends");
        for e in events.drain(..) {
            if let SendEvent::Sent(slot) = e {
                free.push(slot);
            }
        }
        if free.len() < BURST {
            assert!(
                Instant::now() < deadline,
                "{mode}: the burst's sends did not complete"
            );
            sleep_on_data(&mut sender, Duration::from_millis(100));
        }
    }
    let burst = receive(&mut receiver, BURST, deadline);
    for msg in burst {
        receiver.post_recv(msg.into_slot()).expect("re-post");
    }
    // Then one message 50 ms later, while the receiver sleeps on its handle.
    let slot = free.pop().expect("a free slot");
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let sent_at = Instant::now();
        send(&mut sender, slot);
        (sender, sent_at)
    });
    let mut woke_at = None;
    let mut arrived = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(2);
    while arrived.is_empty() && Instant::now() < give_up {
        if sleep_on_data(&mut receiver, Duration::from_secs(2)) {
            woke_at.get_or_insert_with(Instant::now);
            receiver.poll_arrivals(&mut arrived).expect("poll_arrivals");
        }
    }
    let (mut sender, sent_at) = late.join().expect("sender thread");
    let latency = woke_at
        .filter(|_| !arrived.is_empty())
        .map(|t| t.saturating_duration_since(sent_at));
    let fd = receiver.wait_handle().map(|h| h.fd.as_raw_fd());
    eprintln!("{mode}: wake-up latency of the late message {latency:?} (fd {fd:?})");
    sender.close();
    receiver.close();
    latency
}

/// The receive wake-up in every event mode the transport can end up in (PROGRESS_ALL, and
/// the selective fallback when the SDK refuses it), with the simulator's notification armed
/// level- or edge-triggered and with batched CQ polls: a burst leaves a completion pending
/// between progress and arm, then a message comes 50 ms later; the receiver sleeping on its
/// handle must wake for it. A lost wake-up leaves the handle unreadable (the session would
/// find the message only when its wait slice ends).
#[test]
fn late_message_wakes_the_receiver_in_every_event_mode() {
    let _serial = super::SIM_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut lost = Vec::new();
    for selective in [false, true] {
        for (edge, batch) in [(false, 0), (true, 0), (false, 16), (true, 16)] {
            doca_sys::sim::reset_config();
            let faults = if selective {
                "doca_pe_set_event_mode:1+:NOT_SUPPORTED"
            } else {
                ""
            };
            doca_sys::sim::set_faults(faults).expect("faults");
            doca_sys::sim::set_arm_edge(edge);
            doca_sys::sim::set_batch(batch);
            let mode = format!(
                "{} event mode, {} arm, batch {batch}",
                if selective {
                    "selective"
                } else {
                    "PROGRESS_ALL"
                },
                if edge { "edge" } else { "level" }
            );
            if late_message_wakeup(&mode).is_none() {
                lost.push(mode);
            }
        }
    }
    doca_sys::sim::reset_config();
    assert!(lost.is_empty(), "lost wake-up in: {lost:?}");
    assert_eq!(
        doca_sys::sim::live_objects(),
        0,
        "{}",
        doca_sys::sim::report()
    );
}
