//! A queue pair's connection dropped under two queue pairs, with both ends in an event loop on
//! the DOCA simulator (`--features doca-sim`, `RDMA_TEST_TRANSPORT=doca`; CI's DOCA stage).
//!
//! The simulator drops the first connection to carry `DROP_AFTER` messages: each end sees that
//! lane closed (DOCA reports a reset connection as a close) while the other lane stays open and
//! quiet (the sender runs out of credits: the messages lost on the dropped lane hold the
//! receiver's reorder window). The striped data path takes such a close as a failure once its
//! grace has passed with nothing from the open lane, and the grace's end is a deadline of the
//! session: an event loop that sleeps on the readiness descriptor with no timer of its own must
//! be woken for it. Without resumption neither end has a tick that would wake it anyway.
//!
//! Its own test binary: the drop is set for the whole process (`doca_sys::sim::set_drop_after`)
//! and would cut other tests' connections.

#![cfg(feature = "doca-sim")]

mod common;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::{expected_transport, scaled, test_config, test_listen_addr};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_container::{Config, Error, ErrorKind, Listener, RdmaSink};

/// Messages on one connection before the simulator drops it.
const DROP_AFTER: u64 = 100;
/// More than the drop lets through: the stream cannot end before it.
const COUNT: u32 = 100_000;

/// How an end's event loop ended: messages it moved, and the error it stopped on (if any),
/// or that it slept through its whole bound without a wake-up.
#[derive(Debug)]
enum LoopEnd {
    Ended(u32, Option<Error>),
    NeverWoke { moved: u32, slept: Duration },
}

/// Waits as an event loop with no timer of its own would, bounded so that the test fails
/// instead of hanging: `Some(slept)` when nothing came for the whole bound.
fn sleep_until_readable(fd: &impl AsFd) -> Option<Duration> {
    let bound = scaled(Duration::from_secs(20));
    let started = Instant::now();
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = u16::try_from(bound.as_millis()).unwrap_or(u16::MAX);
    let ready = poll(&mut fds, PollTimeout::from(ms)).expect("poll");
    (ready == 0).then(|| started.elapsed())
}

#[test]
fn a_dropped_queue_pair_wakes_both_event_loops_at_the_end_of_its_grace() {
    if expected_transport() != "doca" {
        common::skip_or_fail("this test runs on the DOCA simulator: RDMA_TEST_TRANSPORT=doca");
        return;
    }
    let cfg: Config = test_config(
        Config::default()
            .with_handshake_timeout(scaled(Duration::from_secs(5)))
            .with_connect_timeout(scaled(Duration::from_secs(5))),
    )
    .with_qps(2)
    .with_credits(4)
    .with_resume_timeout(Duration::ZERO);
    let listener = Listener::bind(test_listen_addr(), &cfg).expect("bind");
    let addr = listener.local_addr();
    doca_sys::sim::set_drop_after(Some(DROP_AFTER));

    let receiver = std::thread::spawn(move || {
        let mut src = listener
            .accept()
            .expect("accept")
            .accept_src()
            .expect("accept_src");
        let mut got = 0;
        loop {
            match src.try_recv() {
                Ok(Some(_)) => got += 1,
                Ok(None) => return LoopEnd::Ended(got, None),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if let Some(slept) = sleep_until_readable(&src) {
                        return LoopEnd::NeverWoke { moved: got, slept };
                    }
                }
                Err(e) => return LoopEnd::Ended(got, Some(e)),
            }
        }
    });

    let mut sink = RdmaSink::connect(addr, &cfg).expect("connect");
    let mut sent = 0;
    let sender = loop {
        if sent == COUNT {
            break LoopEnd::Ended(sent, None);
        }
        match sink.try_send(&sent.to_le_bytes()) {
            Ok(()) => sent += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if let Some(slept) = sleep_until_readable(&sink) {
                    break LoopEnd::NeverWoke { moved: sent, slept };
                }
            }
            Err(e) => break LoopEnd::Ended(sent, Some(e)),
        }
    };
    doca_sys::sim::set_drop_after(None);
    drop(sink);
    let receiver = receiver.join().expect("receiver thread");

    for (end, result) in [("sender", &sender), ("receiver", &receiver)] {
        match result {
            LoopEnd::Ended(moved, Some(e)) => {
                assert!(
                    u64::from(*moved) < u64::from(COUNT),
                    "{end}: stopped by the drop, not the end"
                );
                eprintln!("{end}: {moved} messages, then: {e}");
            }
            LoopEnd::NeverWoke { moved, slept } => panic!(
                "{end}: after {moved} messages its loop slept {slept:?} without a wake-up (the \
                 lone close's grace must wake the loop and end a session that does not resume; \
                 sender {sender:?}, receiver {receiver:?})"
            ),
            LoopEnd::Ended(moved, None) => panic!("{end}: ended after {moved} messages, no drop"),
        }
    }
}
