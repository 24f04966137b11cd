//! The library in an event loop: deadlines (`recv_timeout`, `send_timeout`, `finish_timeout`),
//! non-blocking calls (`try_recv`, `try_send`, `try_flush`, `try_finish`, `try_accept`) and
//! the readiness descriptor (`AsFd`) of `RdmaSrc`, `RdmaSink` and `Listener`, over 127.0.0.1 on
//! tcp by default or the transport `RDMA_TEST_TRANSPORT` names (doca on the simulator, verbs in
//! the soft-RoCE VM). The rules tested are those of `src/session/readiness.rs`.

mod common;

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use common::{expected_transport, scaled, test_config, test_listen_addr};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_container::{
    AuthKey, Checksum, Config, Error, ErrorKind, Incoming, Listener, RdmaSink, RdmaSrc,
};

fn config() -> Config {
    test_config(
        Config::default()
            .with_handshake_timeout(scaled(Duration::from_secs(5)))
            .with_connect_timeout(scaled(Duration::from_secs(5))),
    )
}

/// Every feature that changes what a message carries or how a session starts: a key,
/// checksums, resumption, 4 credits, 64 KiB messages.
fn config_with_everything() -> Config {
    let mut c = config()
        .with_credits(4)
        .with_max_msg_size(64 * 1024)
        .with_checksum(Checksum::Crc32c)
        .with_resume_timeout(scaled(Duration::from_secs(10)));
    c.auth_key = Some(AuthKey::from_bytes(&[7; 32]).unwrap());
    c
}

/// Without resumption: a resumable server session's readiness descriptor also wakes on its
/// resume tick, which would hide a wake-up that never comes.
fn config_without_ticks() -> Config {
    config().with_resume_timeout(Duration::ZERO)
}

fn server(cfg: Config) -> (SocketAddr, impl FnOnce() -> Incoming) {
    let listener = Listener::bind(test_listen_addr(), &cfg).unwrap();
    let addr = listener.local_addr();
    (addr, move || listener.accept().unwrap())
}

/// Whether `fd` turns readable within `within` (what an event loop's wait sees).
fn readable(fd: &impl AsFd, within: Duration) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = u16::try_from(within.as_millis()).unwrap_or(u16::MAX);
    poll(&mut fds, PollTimeout::from(ms)).unwrap() == 1
}

fn would_block<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
    match r {
        Err(e) => e.kind() == ErrorKind::WouldBlock,
        Ok(v) => panic!("expected WouldBlock, got {v:?}"),
    }
}

#[test]
fn try_recv_says_would_block_until_a_message_arrives_and_the_descriptor_wakes_the_loop() {
    let (addr, accept) = server(config_without_ticks());
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let tx = thread::spawn(move || {
        let mut sink = RdmaSink::connect(addr, &config_without_ticks()).unwrap();
        wait_go.recv().unwrap();
        sink.send(b"first").unwrap();
        wait_go.recv().unwrap();
        sink.finish().unwrap()
    });
    let mut src = accept().accept_src().unwrap();
    assert_eq!(src.info().transport.name(), expected_transport());
    assert!(matches!(src.try_recv(), Err(Error::WouldBlock)));
    assert!(
        !readable(&src, Duration::from_millis(50)),
        "readable with nothing sent"
    );
    go.send(()).unwrap();
    assert!(
        readable(&src, scaled(Duration::from_secs(10))),
        "the message did not wake the loop"
    );
    // a wake-up may be spurious, so a loop tries until it has the message
    let deadline = Instant::now() + scaled(Duration::from_secs(10));
    let got = loop {
        match src.try_recv() {
            Ok(m) => break m.map(<[u8]>::to_vec),
            Err(Error::WouldBlock) if Instant::now() < deadline => {
                readable(&src, Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(got.as_deref(), Some(&b"first"[..]));
    assert!(matches!(src.try_recv(), Err(Error::WouldBlock)));
    go.send(()).unwrap();
    // the end of the stream wakes the loop too
    let deadline = Instant::now() + scaled(Duration::from_secs(10));
    loop {
        match src.try_recv() {
            Ok(None) => break,
            Ok(Some(m)) => panic!("unexpected message {m:?}"),
            Err(Error::WouldBlock) if Instant::now() < deadline => {
                readable(&src, Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(tx.join().unwrap(), 1);
}

#[test]
fn recv_timeout_gives_up_at_its_deadline_and_the_session_goes_on() {
    let (addr, accept) = server(config());
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let tx = thread::spawn(move || {
        let mut sink = RdmaSink::connect(addr, &config()).unwrap();
        wait_go.recv().unwrap();
        sink.send(b"late").unwrap();
        sink.finish().unwrap()
    });
    let mut src = accept().accept_src().unwrap();
    let started = Instant::now();
    let e = src.recv_timeout(Duration::from_millis(200)).unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(e, Error::DeadlinePassed { waited } if waited == Duration::from_millis(200)),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    assert!(
        waited >= Duration::from_millis(200),
        "gave up after {waited:?}"
    );
    go.send(()).unwrap();
    let m = src.recv_timeout(scaled(Duration::from_secs(10))).unwrap();
    assert_eq!(m, Some(&b"late"[..]));
    assert_eq!(src.recv().unwrap(), None);
    assert_eq!(tx.join().unwrap(), 1);
}

/// Runs `call` on its own thread and returns what it gave, or panics naming `what` if it has
/// not returned within `limit` (a call that overshoots its own deadline fails the test instead
/// of holding it).
fn returns_within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    call: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, result) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(call());
    });
    result
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} had not returned after {limit:?}"))
}

/// A busy poll far longer than the bound the tests below give a call to return in (and finite,
/// so that a call that overshoots stops spinning on a core some time after its test failed).
fn outlasting() -> Duration {
    scaled(Duration::from_secs(120))
}

#[test]
fn the_idle_timeout_ends_a_session_while_a_busy_poll_outlasts_it() {
    let cfg = config().with_busy_poll(Some(outlasting()));
    let (addr, accept) = server(
        cfg.clone()
            .with_idle_timeout(Some(Duration::from_millis(300))),
    );
    let (done, wait_done) = std::sync::mpsc::channel::<()>();
    let tx = thread::spawn(move || {
        let sink = RdmaSink::connect(addr, &cfg).unwrap();
        // sends nothing, and keeps the session up until the receiver gave up
        wait_done.recv().unwrap();
        drop(sink);
    });
    let src = accept().accept_src().unwrap();
    let e = returns_within(
        "recv with a 300 ms idle timeout",
        scaled(Duration::from_secs(10)),
        move || {
            let mut src = src;
            src.recv().map(|m| m.is_some())
        },
    );
    assert!(matches!(e, Err(Error::IdleTimeout { .. })), "{e:?}");
    done.send(()).unwrap();
    tx.join().unwrap();
}

#[test]
fn deadlines_hold_while_a_busy_poll_outlasts_them() {
    // A busy poll longer than any deadline: recv_timeout and send_timeout still give up at
    // theirs (within a clock check of the spin), and the session goes on.
    let cfg = || config().with_busy_poll(Some(outlasting())).with_credits(2);
    let limit = scaled(Duration::from_secs(10));
    let (addr, accept) = server(cfg());
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let (gave_up, sender_gave_up) = std::sync::mpsc::channel();
    let tx = thread::spawn(move || {
        let mut sink = RdmaSink::connect(addr, &cfg()).unwrap();
        wait_go.recv().unwrap();
        sink.send(b"one").unwrap();
        sink.send(b"two").unwrap();
        // the receiver holds both credits: the third waits, and gives up at its deadline
        let e = sink.send_timeout(b"three", Duration::from_millis(200));
        gave_up.send(e).unwrap();
        wait_go.recv().unwrap();
        sink.send(b"three").unwrap();
        sink.finish().unwrap()
    });
    let src = accept().accept_src().unwrap();
    let (mut src, e) = returns_within("recv_timeout(200 ms)", limit, move || {
        let mut src = src;
        let e = src
            .recv_timeout(Duration::from_millis(200))
            .map(|m| m.is_some());
        (src, e)
    });
    assert!(matches!(e, Err(Error::DeadlinePassed { .. })), "{e:?}");
    go.send(()).unwrap();
    let e = sender_gave_up
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("send_timeout(200 ms) had not returned after {limit:?}"));
    assert!(matches!(e, Err(Error::DeadlinePassed { .. })), "{e:?}");
    assert_eq!(src.recv().unwrap(), Some(&b"one"[..]));
    assert_eq!(src.recv().unwrap(), Some(&b"two"[..]));
    go.send(()).unwrap();
    assert_eq!(src.recv().unwrap(), Some(&b"three"[..]));
    assert_eq!(src.recv().unwrap(), None);
    assert_eq!(tx.join().unwrap(), 3);
}

#[test]
fn the_stop_flag_ends_a_wait_while_a_busy_poll_outlasts_it() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cfg = config().with_busy_poll(Some(outlasting()));
    let (addr, accept) = server(cfg.clone().with_stop(Some(stop.clone())));
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let tx = thread::spawn(move || {
        let mut sink = RdmaSink::connect(addr, &cfg).unwrap();
        wait_go.recv().unwrap();
        sink.send(b"after").unwrap();
        sink.finish().unwrap()
    });
    let src = accept().accept_src().unwrap();
    let waiting = returns_within(
        "recv with the stop flag set",
        scaled(Duration::from_secs(10)),
        {
            let stop = stop.clone();
            move || {
                let mut src = src;
                let stopper = thread::spawn(move || {
                    thread::sleep(Duration::from_millis(200));
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                });
                let e = src.recv().map(|m| m.is_some());
                stopper.join().unwrap();
                (src, e)
            }
        },
    );
    let (mut src, e) = waiting;
    assert!(matches!(e, Err(Error::Interrupted)), "{e:?}");
    // the session stays usable
    stop.store(false, std::sync::atomic::Ordering::Relaxed);
    go.send(()).unwrap();
    assert_eq!(src.recv().unwrap(), Some(&b"after"[..]));
    assert_eq!(src.recv().unwrap(), None);
    assert_eq!(tx.join().unwrap(), 1);
}

/// A client resumes the session while its server spins in `recv` (a busy poll far longer
/// than the test): the client's control connection is cut (`ss -K`) while nothing is in
/// flight, and no deadline of the server's own is due (no idle timeout). The spin must end
/// at a clock check on what it finds there (the reset control connection, read now and then,
/// or the client's resume attempt; on tcp also the old data connection's end), so that the
/// session resumes, the client's Finish comes in on the new connection, and the stream ends.
#[test]
fn a_client_resumes_a_session_whose_server_busy_polls_longer_than_the_test() {
    if common::on_path("ss").is_none() {
        common::skip_or_fail("ss (iproute2) is not installed: the test cuts a connection");
        return;
    }
    client_resumes_while_its_server_busy_polls(
        test_listen_addr(),
        scaled(Duration::from_secs(20)),
        |addr| {
            common::ss::kill_at(std::process::id(), addr, common::ss::Conn::Control);
        },
    );
}

/// The same with a break the server never hears of: in a network namespace of the test's own,
/// every packet the client sends on its connections of the session is dropped (nftables)
/// before its control connection is killed, so neither the reset nor the client closing its
/// old data connection reaches the server. Only the client's resume attempt, which the
/// listener hands the session, can end the server's spin, and it must: within 8 s (scaled),
/// where the server's own end would need its keepalive, 11 s or more, to notice the old
/// connection is dead. (At `RDMA_TEST_TIME_SCALE` 2 or more the bound no longer tells the
/// two apart.) tcp only: the namespace has nothing but loopback.
#[test]
fn a_busy_polling_server_resumes_for_its_clients_attempt_when_its_own_end_saw_no_break() {
    if !common::ss::have_ss_kill() {
        return;
    }
    if common::on_path("nft").is_none() {
        common::skip_or_fail(
            "nft (nftables) is not installed: the test drops a connection's packets",
        );
        return;
    }
    let body = thread::spawn(|| {
        // This thread, and what it starts, in a network namespace of its own.
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            return Err(format!("unshare(CLONE_NEWNET): {e} (not root?)"));
        }
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .map_err(|e| e.to_string())?;
        assert!(up.success(), "ip link set lo up: {up}");
        client_resumes_while_its_server_busy_polls(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            scaled(Duration::from_secs(8)),
            |addr| {
                common::ss::kill_silently(std::process::id(), addr);
            },
        );
        Ok(())
    });
    match body.join().unwrap() {
        Ok(()) => {}
        Err(why) => common::skip_or_fail(&format!("no network namespace of the test's own: {why}")),
    }
}

/// A server on `listen` spins in `recv` (busy polling longer than the test) after one message,
/// with nothing in flight; its client's connections are cut (`cut`, given the server's
/// address) and its `finish` resumes; the server's `recv` must see the stream end within
/// `bound`, after one resume on each end.
fn client_resumes_while_its_server_busy_polls(
    listen: SocketAddr,
    bound: Duration,
    cut: impl FnOnce(SocketAddr) + Send + 'static,
) {
    // The listener lives to the end: it hands the session its client's attempt.
    let listener = Listener::bind(listen, &config().with_busy_poll(Some(outlasting()))).unwrap();
    let addr = listener.local_addr();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let tx = thread::spawn(move || {
        let mut sink = RdmaSink::connect(addr, &config()).unwrap();
        sink.send(b"before").unwrap();
        wait_go.recv().unwrap();
        cut(addr);
        let counters = sink.resume_counters();
        // its Finish meets the cut connection: the sink resumes, then finishes
        let sent = sink.finish().unwrap();
        (sent, counters.get().resumes)
    });
    let mut src = listener.accept().unwrap().accept_src().unwrap();
    assert_eq!(src.recv().unwrap(), Some(&b"before"[..]));
    // releases it: its credit goes back before anything is cut, so nothing is in flight
    let e = src.recv_timeout(Duration::from_millis(200));
    assert!(matches!(e, Err(Error::DeadlinePassed { .. })), "{e:?}");
    go.send(()).unwrap();
    let (end, resumes) = returns_within(
        "recv while its client resumed the session",
        bound,
        move || {
            let end = src.recv().map(|m| m.map(<[u8]>::to_vec));
            (end, src.resume_counters().get().resumes)
        },
    );
    assert!(matches!(end, Ok(None)), "the end of the stream: {end:?}");
    assert_eq!(resumes, 1, "the server resumed once");
    assert_eq!(
        tx.join().unwrap(),
        (1, 1),
        "the client sent 1 and resumed once"
    );
    drop(listener);
}

#[test]
fn try_send_takes_one_message_per_free_credit_then_says_would_block_until_one_returns() {
    let cfg = config_without_ticks().with_credits(2);
    let (addr, accept) = server(cfg.clone());
    let (release, wait_release) = std::sync::mpsc::channel::<()>();
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        wait_release.recv().unwrap();
        let mut got = Vec::new();
        while let Some(m) = src.recv().unwrap() {
            got.push(m.to_vec());
        }
        got
    });
    let mut sink = RdmaSink::connect(addr, &cfg).unwrap();
    let mut sent = 0u32;
    let deadline = Instant::now() + scaled(Duration::from_secs(5));
    // the receiver reads nothing: exactly its credits go out, then WouldBlock
    loop {
        match sink.try_send(&sent.to_le_bytes()) {
            Ok(()) => sent += 1,
            Err(Error::WouldBlock) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline, "try_send never said WouldBlock");
    }
    assert_eq!(sent, 2, "one message per credit");
    let e = sink
        .send_timeout(b"x", Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(e, Error::DeadlinePassed { .. }), "{e:?}");
    assert!(would_block(sink.try_send(b"still none")));
    release.send(()).unwrap();
    // the receiver's released credits wake the loop; each message is sent exactly once
    let deadline = Instant::now() + scaled(Duration::from_secs(10));
    while sent < 100 {
        match sink.try_send(&sent.to_le_bytes()) {
            Ok(()) => sent += 1,
            Err(Error::WouldBlock) => {
                assert!(Instant::now() < deadline, "stuck at {sent}");
                readable(&sink, Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let finished = loop {
        match sink.try_finish() {
            Ok(n) => break n,
            Err(Error::WouldBlock) => {
                assert!(Instant::now() < deadline, "finish stuck");
                readable(&sink, Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(finished, 100);
    assert!(matches!(sink.try_send(b"after"), Err(Error::Closed)));
    let got = rx.join().unwrap();
    let expected: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect();
    assert_eq!(got, expected);
}

#[test]
fn finish_timeout_runs_out_while_the_receiver_holds_back_and_a_later_call_ends_the_stream() {
    let cfg = config().with_credits(2);
    let (addr, accept) = server(cfg.clone());
    let (release, wait_release) = std::sync::mpsc::channel::<()>();
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        wait_release.recv().unwrap();
        let mut n = 0;
        while src.recv().unwrap().is_some() {
            n += 1;
        }
        n
    });
    let mut sink = RdmaSink::connect(addr, &cfg).unwrap();
    sink.send(b"a").unwrap();
    sink.send(b"b").unwrap();
    // Finish waits for the receiver to let the stream go: it has not read anything
    let e = sink.finish_timeout(Duration::from_millis(200)).unwrap_err();
    assert!(matches!(e, Error::DeadlinePassed { .. }), "{e:?}");
    assert!(
        matches!(sink.send(b"c"), Err(Error::Closed)),
        "the stream is ending"
    );
    release.send(()).unwrap();
    assert_eq!(
        sink.finish_timeout(scaled(Duration::from_secs(10)))
            .unwrap(),
        2
    );
    assert_eq!(rx.join().unwrap(), 2);
}

#[test]
fn try_accept_says_would_block_until_a_client_arrives_and_the_listener_descriptor_wakes_the_loop() {
    let listener = Listener::bind(test_listen_addr(), &config()).unwrap();
    let addr = listener.local_addr();
    assert!(would_block(listener.try_accept()));
    assert!(!readable(&listener, Duration::from_millis(50)));
    let tx = thread::spawn(move || {
        let mut sink = RdmaSink::connect(addr, &config()).unwrap();
        sink.send(b"hello").unwrap();
        sink.finish().unwrap()
    });
    assert!(readable(&listener, scaled(Duration::from_secs(10))));
    let incoming = listener.try_accept().unwrap();
    assert!(would_block(listener.try_accept()));
    assert!(
        !readable(&listener, Duration::from_millis(50)),
        "drained, yet readable"
    );
    let mut src = incoming.accept_src().unwrap();
    assert_eq!(src.recv().unwrap(), Some(&b"hello"[..]));
    assert_eq!(src.recv().unwrap(), None);
    assert_eq!(tx.join().unwrap(), 1);
}

/// One thread drives a sink and a src of a duplex pair with `try_` calls alone, sleeping only
/// in poll(2) on both readiness descriptors, with a key, checksums, resumption, 4 credits and
/// messages up to the largest size: every message arrives once, in order, intact.
#[test]
fn one_thread_drives_both_directions_with_try_calls_and_every_feature_on() {
    let cfg = config_with_everything();
    let listener = Listener::bind(test_listen_addr(), &cfg).unwrap();
    let addr = listener.local_addr();
    let max = cfg.max_msg_size;
    let message = move |i: usize| -> Vec<u8> {
        let len = match i % 5 {
            0 => 0,
            1 => max,
            2 => max - 1,
            _ => (i * 977) % max,
        };
        (0..len).map(|j| (i + j) as u8).collect()
    };
    const COUNT: usize = 300;
    // the peer: an echo server on blocking calls
    let echo = thread::spawn(move || {
        let (mut sink, mut src) = listener.accept_duplex().unwrap();
        while let Some(m) = src.recv().unwrap() {
            let m = m.to_vec();
            sink.send(&m).unwrap();
        }
        sink.finish().unwrap()
    });
    let (mut sink, mut src) = rdma_container::duplex::connect(addr, &cfg).unwrap();
    assert_eq!(sink.info().checksum(), Checksum::Crc32c);
    assert!(sink.info().resume_timeout().is_some());
    let (mut next_send, mut received, mut finished) = (0usize, 0usize, None);
    let deadline = Instant::now() + scaled(Duration::from_secs(60));
    let mut ended = false;
    while !ended {
        assert!(
            Instant::now() < deadline,
            "stuck: sent {next_send}, received {received}"
        );
        let mut progress = false;
        // send while credits last (never more than 8 ahead of the echo: the peer's sink
        // must not fill while we do not read)
        while next_send < COUNT && next_send < received + 8 {
            match sink.try_send(&message(next_send)) {
                Ok(()) => {
                    next_send += 1;
                    progress = true;
                }
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("send {next_send}: {e}"),
            }
        }
        if next_send == COUNT && finished.is_none() {
            match sink.try_finish() {
                Ok(n) => finished = Some(n),
                Err(Error::WouldBlock) => {}
                Err(e) => panic!("finish: {e}"),
            }
        }
        loop {
            match src.try_recv() {
                Ok(Some(m)) => {
                    assert_eq!(m, &message(received)[..], "message {received}");
                    received += 1;
                    progress = true;
                }
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("recv {received}: {e}"),
            }
        }
        if !progress && !ended {
            let mut fds = [
                PollFd::new(sink.as_fd(), PollFlags::POLLIN),
                PollFd::new(src.as_fd(), PollFlags::POLLIN),
            ];
            poll(&mut fds, PollTimeout::from(1000u16)).unwrap();
        }
    }
    assert_eq!(received, COUNT);
    // the sink's finish may still be waiting for the echo's close
    while finished.is_none() {
        assert!(Instant::now() < deadline, "finish stuck");
        match sink.try_finish() {
            Ok(n) => finished = Some(n),
            Err(Error::WouldBlock) => {
                readable(&sink, Duration::from_millis(100));
            }
            Err(e) => panic!("finish: {e}"),
        }
    }
    assert_eq!(finished, Some(COUNT as u64));
    assert_eq!(echo.join().unwrap(), COUNT as u64);
}

#[test]
fn an_armed_descriptor_of_an_idle_session_stays_quiet() {
    // No busy wake-ups: nothing is sent, so nothing may wake the loop (the client's end: a
    // resumable server session is allowed its resume tick).
    let (addr, accept) = server(config());
    let (done, wait_done) = std::sync::mpsc::channel::<()>();
    let tx = thread::spawn(move || {
        let sink = accept().accept_sink().unwrap();
        wait_done.recv().unwrap();
        sink.finish().unwrap()
    });
    let mut src = RdmaSrc::connect(addr, &config()).unwrap();
    assert!(would_block(src.try_recv()));
    let mut wakes = 0;
    let quiet_until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < quiet_until {
        if readable(&src, Duration::from_millis(50)) {
            wakes += 1;
            // a loop tries again, which re-arms
            assert!(would_block(src.try_recv()));
        }
    }
    assert!(wakes <= 1, "{wakes} wake-ups in 0.6 s of an idle session");
    done.send(()).unwrap();
    assert_eq!(
        src.recv_timeout(scaled(Duration::from_secs(10))).unwrap(),
        None
    );
    assert_eq!(tx.join().unwrap(), 0);
}
