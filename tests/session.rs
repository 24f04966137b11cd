//! The library in one process: RdmaSink/RdmaSrc semantics, over 127.0.0.1 on TCP by default, on
//! the transport `RDMA_TEST_TRANSPORT` names (doca on the simulator in CI's DOCA pass; verbs
//! with `RDMA_TEST_ADDR` in the soft-RoCE VM's suite check).

mod common;

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use common::{expected_transport, test_config, test_listen_addr};
use rdma_container::{Config, Error, Incoming, Listener, RdmaSink, RdmaSrc, TransportChoice};

fn config() -> Config {
    test_config(
        Config::default()
            .with_handshake_timeout(common::scaled(Duration::from_secs(5)))
            .with_connect_timeout(common::scaled(Duration::from_secs(5))),
    )
}

/// Listens on an ephemeral port of the test address; the returned closure waits for one client.
fn server(cfg: Config) -> (SocketAddr, impl FnOnce() -> Incoming) {
    let listener = Listener::bind(test_listen_addr(), &cfg).unwrap();
    let addr = listener.local_addr();
    (addr, move || listener.accept().unwrap())
}

#[test]
fn messages_arrive_in_order_including_empty_ones_then_end_of_stream() {
    let (addr, accept) = server(config());
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let mut got = Vec::new();
        while let Some(m) = src.recv().unwrap() {
            got.push(m.to_vec());
        }
        // End of stream is sticky.
        assert!(src.recv().unwrap().is_none());
        got
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    assert_eq!(sink.info().transport.name(), expected_transport());
    let sent: Vec<Vec<u8>> = (0..500u32)
        .map(|i| {
            if i % 7 == 0 {
                Vec::new()
            } else {
                vec![i as u8; (i as usize * 37) % 5000]
            }
        })
        .collect();
    for m in &sent {
        sink.send(m).unwrap();
    }
    assert_eq!(sink.finish().unwrap(), 500);
    assert_eq!(rx.join().unwrap(), sent);
}

#[test]
fn receiver_may_be_the_client_and_full_size_messages_fit() {
    let cfg = config().with_max_msg_size(1 << 20).with_credits(4);
    let (addr, accept) = server(cfg.clone());
    let tx = thread::spawn(move || {
        let mut sink = accept().accept_sink().unwrap();
        let big = vec![0xabu8; 1 << 20];
        for _ in 0..20 {
            sink.send(&big).unwrap();
        }
        sink.finish().unwrap()
    });
    let mut src = RdmaSrc::connect(addr, &cfg).unwrap();
    let mut n = 0;
    while let Some(m) = src.recv().unwrap() {
        assert_eq!(m.len(), 1 << 20);
        assert!(m.iter().all(|&b| b == 0xab));
        n += 1;
    }
    assert_eq!(n, 20);
    assert_eq!(tx.join().unwrap(), 20);
}

#[test]
fn oversize_message_fails_before_sending_and_the_session_goes_on() {
    let small = config().with_max_msg_size(100);
    let (addr, accept) = server(small);
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let mut got = Vec::new();
        while let Some(m) = src.recv().unwrap() {
            got.push(m.len());
        }
        got
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    assert_eq!(sink.max_message_size(), 100);
    match sink.send(&[0u8; 101]) {
        Err(Error::MessageTooLarge { len: 101, max: 100 }) => {}
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
    sink.send(&[1u8; 100]).unwrap();
    assert_eq!(sink.finish().unwrap(), 1);
    assert_eq!(rx.join().unwrap(), vec![100]);
}

#[test]
fn sender_blocks_when_the_receiver_holds_every_slot() {
    let (addr, accept) = server(config());
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        // Take nothing until told: both credits stay with the sender's first two messages.
        go_rx.recv().unwrap();
        let mut n = 0;
        while src.recv().unwrap().is_some() {
            n += 1;
        }
        n
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    sink.send(b"a").unwrap();
    sink.send(b"b").unwrap();
    let sender = thread::spawn(move || {
        let started = Instant::now();
        sink.send(b"c").unwrap();
        (started.elapsed(), sink.finish().unwrap())
    });
    thread::sleep(Duration::from_millis(300));
    assert!(!sender.is_finished(), "third send must wait for a credit");
    go_tx.send(()).unwrap();
    let (_, count) = sender.join().unwrap();
    assert_eq!(count, 3);
    assert_eq!(rx.join().unwrap(), 3);
}

/// With one credit and a deep backlog the sender always has the next message waiting: the held
/// slot must not be re-posted (and so overwritten by the NIC) before the next recv().
#[test]
fn received_slice_stays_valid_until_the_next_recv() {
    let one_credit = || config().with_credits(1);
    let (addr, accept) = server(one_credit());
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let first = src.recv().unwrap().unwrap().to_vec();
        // Give the sender time to push everything it has credit for.
        thread::sleep(Duration::from_millis(200));
        let held = src.recv().unwrap().unwrap();
        let snapshot = held.to_vec();
        thread::sleep(Duration::from_millis(200));
        // The sender had at most `credits` messages outstanding; the held slot was not reused.
        assert_eq!(held, &snapshot[..]);
        let mut rest = 0;
        while src.recv().unwrap().is_some() {
            rest += 1;
        }
        (first, snapshot, rest)
    });
    let mut sink = RdmaSink::connect(addr, &one_credit()).unwrap();
    // 4 KiB: above any inline limit, so the NIC reads and writes registered slots.
    for i in 0..50u8 {
        sink.send(&[i; 4096]).unwrap();
    }
    sink.finish().unwrap();
    let (first, second, rest) = rx.join().unwrap();
    assert_eq!(first, vec![0u8; 4096]);
    assert_eq!(second, vec![1u8; 4096]);
    assert_eq!(rest, 48);
}

#[test]
fn dropping_the_sink_without_finish_is_an_error_not_end_of_stream() {
    let (addr, accept) = server(config());
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let mut n = 0;
        loop {
            match src.recv() {
                Ok(Some(_)) => n += 1,
                Ok(None) => return Err(n),
                Err(e) => return Ok((n, e.to_string())),
            }
        }
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    sink.send(b"x").unwrap();
    drop(sink);
    let (n, err) = rx.join().unwrap().expect("must not be end of stream");
    // The message went out before the abort; the abort arrives on the control channel, which
    // may overtake it. Either way the receiver must report the abort, never end of stream.
    assert!(n <= 1);
    assert!(err.contains("without finishing"), "{err}");
}

#[test]
fn two_receivers_are_refused_with_a_reason() {
    let (addr, accept) = server(config());
    let srv = thread::spawn(move || accept().accept_src().map(|_| ()));
    match RdmaSrc::connect(addr, &config()) {
        Err(Error::Rejected(reason)) => {
            assert!(reason.contains("both ends are receivers"), "{reason}")
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(matches!(srv.join().unwrap(), Err(Error::Refused(_))));
}

#[test]
fn stop_flag_interrupts_a_waiting_receiver() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cfg = config().with_stop(Some(stop.clone()));
    let (addr, accept) = server(cfg);
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let r = src.recv().map(|m| m.map(<[u8]>::to_vec));
        (r, src)
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (r, src) = rx.join().unwrap();
    assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
    src.abort("receiver interrupted");
    // The sender learns why.
    let err = loop {
        match sink.send(b"late") {
            Ok(()) => thread::sleep(Duration::from_millis(10)),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&err, Error::Rejected(r) if r.contains("receiver interrupted")),
        "{err:?}"
    );
}

#[test]
fn send_in_place_writes_straight_into_the_slot() {
    let (addr, accept) = server(config());
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let mut got = Vec::new();
        while let Some(m) = src.recv().unwrap() {
            got.push(m.to_vec());
        }
        got
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    for i in 0..100u8 {
        sink.send_in_place(usize::from(i) * 10, |buf| buf.fill(i))
            .unwrap();
    }
    let too_big = sink.max_message_size() + 1;
    assert!(matches!(
        sink.send_in_place(too_big, |_| panic!("must not be called")),
        Err(Error::MessageTooLarge { .. })
    ));
    sink.finish().unwrap();
    let got = rx.join().unwrap();
    assert_eq!(got.len(), 100);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.len(), i * 10);
        assert!(m.iter().all(|&b| b == i as u8));
    }
}

/// The tcp data connection keeps Nagle on, so a small write waits until the previous small
/// segment is acknowledged. Linux delays that acknowledgement (up to 40 ms) for a run of
/// equal-sized segments of 536 bytes or more, which stalled 4 KiB messages with a small window
/// at about 140 messages per second, and a 4 KiB ping-pong the same way, until the receiver
/// acknowledged each drained read at once. The bounds are hang guards, not a benchmark: a
/// healthy run takes well under a second, the stalled one took over 20 s.
#[test]
fn mid_size_messages_on_tcp_do_not_wait_for_delayed_acknowledgements() {
    const ONE_WAY: u32 = 3000;
    const ROUND_TRIPS: u32 = 1000;
    let cfg = config()
        .with_transport(TransportChoice::Tcp)
        .with_credits(4);
    let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &cfg).unwrap();
    let addr = listener.local_addr();
    let server = thread::spawn(move || {
        // One way: count 4 KiB messages.
        let mut src = listener.accept().unwrap().accept_src().unwrap();
        let mut n = 0u32;
        while let Some(m) = src.recv().unwrap() {
            assert_eq!(m.len(), 4096);
            n += 1;
        }
        // Ping-pong: echo every message back.
        let (mut sink, mut src) = listener.accept_duplex().unwrap();
        while let Some(m) = src.recv().unwrap() {
            sink.send(m).unwrap();
        }
        sink.finish().unwrap();
        n
    });
    let block = vec![7u8; 4096];
    let started = Instant::now();
    let mut sink = RdmaSink::connect(addr, &cfg).unwrap();
    for _ in 0..ONE_WAY {
        sink.send(&block).unwrap();
    }
    assert_eq!(sink.finish().unwrap(), u64::from(ONE_WAY));
    let one_way = started.elapsed();

    let started = Instant::now();
    let (mut sink, mut src) = rdma_container::duplex::connect(addr, &cfg).unwrap();
    for _ in 0..ROUND_TRIPS {
        sink.send(&block).unwrap();
        assert_eq!(src.recv().unwrap().map(<[u8]>::len), Some(4096));
    }
    sink.finish().unwrap();
    assert!(src.recv().unwrap().is_none());
    let ping_pong = started.elapsed();
    assert_eq!(server.join().unwrap(), ONE_WAY);
    // A delayed-acknowledgement stall costs about 7 ms per message here (40 ms at most).
    assert!(
        one_way < common::scaled(Duration::from_secs(10)),
        "{ONE_WAY} x 4 KiB with 4 credits took {one_way:?}: the sender waits for delayed acknowledgements"
    );
    assert!(
        ping_pong < common::scaled(Duration::from_secs(10)),
        "{ROUND_TRIPS} 4 KiB round trips took {ping_pong:?}: each waits for a delayed acknowledgement"
    );
}

/// Accepts one sender and collects every message until the end of stream, on a thread.
fn receive_all(
    accept: impl FnOnce() -> Incoming + Send + 'static,
) -> thread::JoinHandle<Vec<Vec<u8>>> {
    thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        let mut got = Vec::new();
        while let Some(m) = src.recv().unwrap() {
            got.push(m.to_vec());
        }
        got
    })
}

/// Both credit extremes the hello allows, with a mix of sizes: every message arrives as sent.
#[test]
fn one_credit_and_1024_credits_deliver_every_message_in_order() {
    for credits in [1u16, 1024] {
        let cfg = || config().with_credits(credits).with_max_msg_size(512);
        let (addr, accept) = server(cfg());
        let rx = receive_all(accept);
        let mut sink = RdmaSink::connect(addr, &cfg()).unwrap();
        let sent: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 251) as u8; (i as usize * 7) % 513])
            .collect();
        for m in &sent {
            sink.send(m).unwrap();
        }
        assert_eq!(sink.finish().unwrap(), 3000);
        assert_eq!(rx.join().unwrap(), sent, "credits {credits}");
    }
}

/// Zero-length messages are data wherever they fall: alone, between others, and last (on verbs
/// with 16 credits the last sends go out unsignaled and are flushed by the finish).
#[test]
fn zero_length_messages_arrive_alone_mixed_and_last() {
    let cfg = || config().with_credits(16).with_max_msg_size(4096);
    let (addr, accept) = server(cfg());
    let rx = receive_all(accept);
    let mut sink = RdmaSink::connect(addr, &cfg()).unwrap();
    let mut sent: Vec<Vec<u8>> = vec![Vec::new(); 3];
    sent.extend((0..997u32).map(|i| {
        if i % 3 == 0 {
            Vec::new()
        } else {
            vec![i as u8; 100 + i as usize]
        }
    }));
    sent.extend([Vec::new(), Vec::new()]);
    for m in &sent {
        sink.send(m).unwrap();
    }
    assert_eq!(sink.finish().unwrap(), sent.len() as u64);
    assert_eq!(rx.join().unwrap(), sent);
}

/// Full duplex: each end a sink and a src; the server echoes every message back reversed.
#[test]
fn duplex_pair_echoes_both_ways() {
    let listener = Listener::bind(test_listen_addr(), &config()).unwrap();
    let addr = listener.local_addr();
    let server = thread::spawn(move || {
        let (mut sink, mut src) = listener.accept_duplex().unwrap();
        while let Some(m) = src.recv().unwrap() {
            let reply: Vec<u8> = m.iter().rev().copied().collect();
            sink.send(&reply).unwrap();
        }
        sink.finish().unwrap()
    });
    let (mut sink, mut src) = rdma_container::duplex::connect(addr, &config()).unwrap();
    for i in 0..500u32 {
        let msg = format!("message {i} {}", "x".repeat(i as usize % 300));
        sink.send(msg.as_bytes()).unwrap();
        let reply = src.recv().unwrap().expect("an echo").to_vec();
        let want: Vec<u8> = msg.bytes().rev().collect();
        assert_eq!(reply, want, "echo of message {i}");
    }
    assert_eq!(sink.finish().unwrap(), 500);
    assert!(src.recv().unwrap().is_none());
    assert_eq!(server.join().unwrap(), 500);
}

/// A ping-pong of messages larger than the kernel's socket buffers, as `bench --mode lat` does:
/// each `send` must hand its whole message on before it returns, since the sending end then
/// waits in its receive and nothing else drives its data path (over tcp, half of the ping
/// stayed in our buffer and both ends waited for ever).
#[test]
fn a_ping_pong_of_messages_larger_than_the_socket_buffers_completes() {
    const BIG: usize = 8 << 20;
    let cfg = config().with_max_msg_size(BIG);
    let listener = Listener::bind(test_listen_addr(), &cfg).unwrap();
    let addr = listener.local_addr();
    let server = thread::spawn(move || {
        let (mut sink, mut src) = listener.accept_duplex().unwrap();
        while let Some(m) = src.recv().unwrap() {
            let reply = m.to_vec();
            sink.send(&reply).unwrap();
        }
        sink.finish().unwrap()
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let client = thread::spawn(move || {
        let (mut sink, mut src) = rdma_container::duplex::connect(addr, &cfg).unwrap();
        let size = BIG.min(sink.max_message_size());
        for i in 0..6u8 {
            let ping = vec![i; size];
            sink.send(&ping).unwrap();
            let pong = src.recv().unwrap().expect("an echo");
            assert!(pong == ping.as_slice(), "echo {i} differs");
        }
        sink.finish().unwrap();
        assert!(src.recv().unwrap().is_none());
        done_tx.send(()).unwrap();
    });
    let finished = done_rx.recv_timeout(common::scaled(Duration::from_secs(60)));
    assert!(
        finished.is_ok(),
        "the ping-pong hung (or failed: see the client's panic)"
    );
    client.join().unwrap();
    assert_eq!(server.join().unwrap(), 6);
}

/// A receiver that ends the session mid-stream with a reason: the sender's next call fails with
/// that reason (not a bare peer loss).
#[test]
fn a_receiver_abort_reaches_the_sender_with_its_reason() {
    let (addr, accept) = server(config());
    let rx = thread::spawn(move || {
        let mut src = accept().accept_src().unwrap();
        for _ in 0..10 {
            src.recv().unwrap().expect("a message");
        }
        src.abort("disk full");
    });
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    let deadline = Instant::now() + common::scaled(Duration::from_secs(10));
    let err = loop {
        match sink.send(b"payload") {
            Ok(()) => assert!(
                Instant::now() < deadline,
                "the sender never heard of the abort"
            ),
            Err(e) => break e,
        }
    };
    rx.join().unwrap();
    match err {
        Error::Rejected(reason) => assert!(reason.contains("disk full"), "{reason}"),
        other => panic!("expected the receiver's reason, got {other:?}"),
    }
}

/// The size edges at the default maximum (10 MiB): max - 1 and max arrive byte for byte, max + 1
/// is refused before anything is sent, and the session goes on.
#[test]
fn max_minus_one_and_max_arrive_and_max_plus_one_is_refused() {
    let max = rdma_container::DEFAULT_MAX_MSG_SIZE;
    let (addr, accept) = server(config());
    let rx = receive_all(accept);
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    assert_eq!(sink.max_message_size(), max);
    let pattern = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    };
    let (below, at) = (pattern(max - 1, 1), pattern(max, 2));
    sink.send(&below).unwrap();
    sink.send(&at).unwrap();
    match sink.send(&pattern(max + 1, 3)) {
        Err(Error::MessageTooLarge { .. }) => {}
        other => panic!("max + 1 bytes: {other:?}"),
    }
    sink.send(b"after").unwrap();
    assert_eq!(sink.finish().unwrap(), 3);
    let got = rx.join().unwrap();
    assert_eq!(got.len(), 3);
    assert!(got[0] == below, "max - 1 bytes arrived changed");
    assert!(got[1] == at, "max bytes arrived changed");
    assert_eq!(got[2], b"after");
}

/// A fill closure that panics (and is caught by the application) sent nothing: the session
/// goes on, and Finish announces exactly the messages that were sent.
#[test]
fn a_panicking_fill_sends_nothing_and_the_count_stays_exact() {
    let (addr, accept) = server(config());
    let rx = receive_all(accept);
    let mut sink = RdmaSink::connect(addr, &config()).unwrap();
    sink.send(b"first").unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sink.send_in_place(5, |_| panic!("the application's fill failed"))
    }));
    assert!(caught.is_err(), "the panic reaches the caller");
    for _ in 0..10 {
        sink.send(b"after").unwrap();
    }
    assert_eq!(sink.finish().unwrap(), 11);
    let got = rx.join().unwrap();
    assert_eq!(got.len(), 11);
    assert_eq!(got[0], b"first");
}

/// Busy polling "for ever" (Duration::MAX) is a valid setting, not an overflow.
#[test]
fn busy_polling_for_the_longest_duration_works() {
    let cfg = || config().with_busy_poll(Some(Duration::MAX));
    let (addr, accept) = server(cfg());
    let rx = receive_all(accept);
    let mut sink = RdmaSink::connect(addr, &cfg()).unwrap();
    for i in 0..200u32 {
        sink.send(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(sink.finish().unwrap(), 200);
    assert_eq!(rx.join().unwrap().len(), 200);
}

#[test]
fn recv_into_fills_any_buffer_that_fits_and_a_message_too_large_for_it_stays_to_be_received() {
    let cfg = config().with_max_msg_size(4096);
    let (addr, accept) = server(cfg.clone());
    let tx = thread::spawn(move || {
        let mut sink = accept().accept_sink().unwrap();
        for m in [&b"abc"[..], b"", &[7u8; 4096][..], b"last"] {
            sink.send(m).unwrap();
        }
        sink.finish().unwrap()
    });
    let mut src = RdmaSrc::connect(addr, &cfg).unwrap();
    let mut small = [0u8; 8];
    assert_eq!(src.recv_into(&mut small).unwrap(), Some(3));
    assert_eq!(&small[..3], b"abc");
    assert_eq!(src.recv_into(&mut small).unwrap(), Some(0));
    let e = src.recv_into(&mut small).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BufferTooSmall {
                len: 4096,
                capacity: 8
            }
        ),
        "{e:?}"
    );
    // nothing lost: the same message again, by a second recv_into or by recv
    let e = src.recv_into(&mut small).unwrap_err();
    assert!(
        matches!(e, Error::BufferTooSmall { len: 4096, .. }),
        "{e:?}"
    );
    assert_eq!(src.recv().unwrap(), Some(&[7u8; 4096][..]));
    let mut big = vec![0u8; 4096];
    assert_eq!(src.recv_into(&mut big).unwrap(), Some(4));
    assert_eq!(&big[..4], b"last");
    assert_eq!(src.recv_into(&mut big).unwrap(), None);
    assert_eq!(tx.join().unwrap(), 4);
}
