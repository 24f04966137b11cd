//! The library's tokio wrappers (`rdma_container::tokio`, the `tokio` feature; `cargo test`
//! builds it): async sessions and listener on tokio's `AsyncFd`, under the tokio runtime, over
//! 127.0.0.1 on tcp by default or the transport `RDMA_TEST_TRANSPORT` names. The rules tested
//! are those at the top of `src/tokio.rs`: try first, then wait; cancel safety.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{expected_transport, scaled, test_config, test_listen_addr};
use rdma_container::tokio::{AsyncListener, AsyncRdmaSink, AsyncRdmaSrc};
use rdma_container::{AuthKey, Checksum, Config, Error, Listener, RdmaSink, RdmaSrc};

fn config() -> Config {
    test_config(
        Config::default()
            .with_handshake_timeout(scaled(Duration::from_secs(5)))
            .with_connect_timeout(scaled(Duration::from_secs(5))),
    )
}

fn keyed_checksummed() -> Config {
    let mut c = config()
        .with_credits(4)
        .with_max_msg_size(64 * 1024)
        .with_checksum(Checksum::Crc32c);
    c.auth_key = Some(AuthKey::from_bytes(&[9; 32]).unwrap());
    c
}

fn message(i: usize, max: usize) -> Vec<u8> {
    let len = match i % 4 {
        0 => 0,
        1 => max,
        _ => (i * 613) % max,
    };
    (0..len).map(|j| (i ^ j) as u8).collect()
}

/// A listener on the test address, and its address.
fn listen(cfg: &Config) -> (Listener, SocketAddr) {
    let listener = Listener::bind(test_listen_addr(), cfg).unwrap();
    let addr = listener.local_addr();
    (listener, addr)
}

#[tokio::test(flavor = "current_thread")]
async fn an_async_sender_and_receiver_move_a_stream_with_a_key_checksums_and_full_size_messages() {
    let cfg = keyed_checksummed();
    let max = cfg.max_msg_size;
    let (listener, addr) = listen(&cfg);
    let mut listener = AsyncListener::new(listener).unwrap();
    // connecting blocks for the handshake: on a blocking thread, as the module's rule 3 says
    let client_cfg = cfg.clone();
    let connecting = tokio::task::spawn_blocking(move || RdmaSink::connect(addr, &client_cfg));
    let incoming = listener.accept().await.unwrap();
    let src = tokio::task::spawn_blocking(move || incoming.accept_src())
        .await
        .unwrap()
        .unwrap();
    let sink = connecting.await.unwrap().unwrap();
    let (mut src, mut sink) = (
        AsyncRdmaSrc::new(src).unwrap(),
        AsyncRdmaSink::new(sink).unwrap(),
    );
    assert_eq!(src.info().transport.name(), expected_transport());
    const COUNT: usize = 200;
    let sending = async {
        for i in 0..COUNT {
            sink.send(&message(i, max)).await.unwrap();
        }
        sink.finish().await.unwrap()
    };
    let receiving = async {
        let mut n = 0;
        while let Some(m) = src.recv().await.unwrap() {
            assert_eq!(m, &message(n, max)[..], "message {n}");
            n += 1;
        }
        n
    };
    // one task, both ends: neither may block the other
    let (sent, received) = tokio::join!(sending, receiving);
    assert_eq!(sent, COUNT as u64);
    assert_eq!(received, COUNT);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_recv_future_loses_no_message() {
    let cfg = config().with_credits(4);
    let (listener, addr) = listen(&cfg);
    const COUNT: u32 = 2000;
    let sender = std::thread::spawn(move || {
        let mut sink = listener.accept().unwrap().accept_sink().unwrap();
        for i in 0..COUNT {
            sink.send(&i.to_le_bytes()).unwrap();
            if i % 97 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        sink.finish().unwrap()
    });
    let src =
        tokio::task::spawn_blocking(move || RdmaSrc::connect(addr, &config().with_credits(4)))
            .await
            .unwrap()
            .unwrap();
    let mut src = AsyncRdmaSrc::new(src).unwrap();
    let (mut next, mut cancelled) = (0u32, 0u32);
    let deadline = tokio::time::Instant::now() + scaled(Duration::from_secs(60));
    loop {
        assert!(tokio::time::Instant::now() < deadline, "stuck at {next}");
        // a timer that often wins: the recv future is dropped mid-wait
        match tokio::time::timeout(Duration::from_micros(300), src.recv()).await {
            Err(_elapsed) => cancelled += 1,
            Ok(Ok(Some(m))) => {
                assert_eq!(
                    m,
                    &next.to_le_bytes()[..],
                    "after {cancelled} cancellations"
                );
                next += 1;
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => panic!("{e}"),
        }
    }
    assert_eq!(next, COUNT);
    assert!(
        cancelled > 0,
        "no recv future was ever dropped: the test proved nothing"
    );
    assert_eq!(sender.join().unwrap(), u64::from(COUNT));
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_send_future_sent_nothing_and_every_completed_send_arrives_once() {
    let cfg = config().with_credits(2);
    let (listener, addr) = listen(&cfg);
    let (release, wait_release) = std::sync::mpsc::channel::<()>();
    let receiver = std::thread::spawn(move || {
        let mut src = listener.accept().unwrap().accept_src().unwrap();
        wait_release.recv().unwrap();
        let mut got = Vec::new();
        while let Some(m) = src.recv().unwrap() {
            got.push(u32::from_le_bytes(m.try_into().unwrap()));
        }
        got
    });
    let sink =
        tokio::task::spawn_blocking(move || RdmaSink::connect(addr, &config().with_credits(2)))
            .await
            .unwrap()
            .unwrap();
    let mut sink = AsyncRdmaSink::new(sink).unwrap();
    let mut completed = Vec::new();
    for i in 0..2u32 {
        sink.send(&i.to_le_bytes()).await.unwrap();
        completed.push(i);
    }
    // no credit left: these futures wait, and are dropped by the timeout
    for i in 100..105u32 {
        let dropped =
            tokio::time::timeout(Duration::from_millis(30), sink.send(&i.to_le_bytes())).await;
        assert!(dropped.is_err(), "send {i} completed without a credit");
    }
    release.send(()).unwrap();
    for i in 2..50u32 {
        sink.send(&i.to_le_bytes()).await.unwrap();
        completed.push(i);
    }
    assert_eq!(sink.finish().await.unwrap(), 50);
    assert_eq!(receiver.join().unwrap(), completed);
}

/// `examples/tokio_server.rs`'s shape: one current-thread runtime accepts and serves several
/// sessions at once, one task each, whose first step (accepting the session in a role, which
/// blocks for a round trip or two) runs on a blocking thread, so a slow set-up of one client's
/// session does not hold the next client's; the clients are blocking threads. The messages are
/// 4 bytes: 64 KiB slots (a verbs endpoint registers credits x slot size before its hello, and
/// eight endpoints of 4 x 10 MiB at once took over 20 s under the soft-RoCE VM's emulation).
#[tokio::test(flavor = "current_thread")]
async fn one_thread_serves_several_sessions_at_once() {
    let cfg = config().with_credits(4).with_max_msg_size(64 * 1024);
    let (listener, addr) = listen(&cfg);
    let mut listener = AsyncListener::new(listener).unwrap();
    const CLIENTS: u32 = 4;
    const COUNT: u32 = 300;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut sink = RdmaSink::connect(addr, &cfg).unwrap();
                for i in 0..COUNT {
                    sink.send(&(c * 1_000_000 + i).to_le_bytes()).unwrap();
                }
                sink.finish().unwrap()
            })
        })
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let incoming = listener.accept().await.unwrap();
        tasks.spawn(async move {
            let src = tokio::task::spawn_blocking(move || incoming.accept_src())
                .await
                .unwrap()
                .unwrap();
            let mut src = AsyncRdmaSrc::new(src).unwrap();
            let mut values = Vec::new();
            while let Some(m) = src.recv().await.unwrap() {
                values.push(u32::from_le_bytes(m.try_into().unwrap()));
            }
            values
        });
    }
    let mut seen = Vec::new();
    while let Some(values) = tasks.join_next().await {
        let values = values.unwrap();
        assert_eq!(values.len(), COUNT as usize);
        let client = values[0] / 1_000_000;
        let expected: Vec<u32> = (0..COUNT).map(|i| client * 1_000_000 + i).collect();
        assert_eq!(values, expected, "client {client}: in order, each once");
        seen.push(client);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..CLIENTS).collect::<Vec<_>>());
    for c in clients {
        assert_eq!(c.join().unwrap(), u64::from(COUNT));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn recv_timeout_gives_up_and_the_session_goes_on() {
    let cfg = config();
    let (listener, addr) = listen(&cfg);
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        let mut sink = listener.accept().unwrap().accept_sink().unwrap();
        wait_go.recv().unwrap();
        sink.send(b"now").unwrap();
        sink.finish().unwrap()
    });
    let src = tokio::task::spawn_blocking(move || RdmaSrc::connect(addr, &config()))
        .await
        .unwrap()
        .unwrap();
    let mut src = AsyncRdmaSrc::new(src).unwrap();
    let e = src
        .recv_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::DeadlinePassed { .. }), "{e:?}");
    go.send(()).unwrap();
    let m = src
        .recv_timeout(scaled(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(m, Some(&b"now"[..]));
    assert_eq!(src.recv().await.unwrap(), None);
    assert_eq!(sender.join().unwrap(), 1);
}
