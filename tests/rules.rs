//! Protocol rules end to end, each with the real binary or the library over loopback: what is
//! refused (and said) when the two ends disagree, the values the ends negotiate, a double
//! Ctrl-C, and an IPv6 bootstrap.
//!
//! The raw-protocol tests speak to a `--transport tcp` server (the hello's checks come before
//! any data path, so the transport under test does not matter for them).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    free_port, listening_on_free_port, run, start, test_config, test_ip, test_listen_addr, wire,
    Proc, SHORT,
};
use nix::sys::signal::Signal;
use rdma_container::{Config, Error, Listener, RdmaSink, RdmaSrc};

/// A `--transport tcp --once` server on the test address.
fn tcp_server() -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("{}:{port}", test_ip());
        start(
            "server",
            &["--server", &addr, "--transport", "tcp", "--once"],
        )
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// Sends `hello` to the server and returns the reason of the Reject it answers with.
fn rejection_of(port: u16, hello: &[u8]) -> String {
    let mut stream = TcpStream::connect((test_ip(), port)).expect("connect");
    stream.write_all(hello).expect("send the hello");
    stream.set_read_timeout(Some(SHORT)).expect("SO_RCVTIMEO");
    let body = wire::read_frame(&mut stream).expect("an answer to the hello");
    let mut framed = (body.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&body);
    wire::parse_reject(&framed).unwrap_or_else(|| panic!("expected a Reject, got {body:02x?}"))
}

#[test]
fn a_peer_on_another_transport_is_refused_naming_both() {
    let spawn = |port: u16| {
        let addr = format!("{}:{port}", test_ip());
        start("server", &["--server", &addr, "--transport", "tcp"])
    };
    let (mut s, port) = listening_on_free_port(spawn, "listening on", SHORT);
    let hello = wire::hello_with(
        wire::VERSION,
        wire::ROLE_SENDER,
        wire::TRANSPORT_VERBS,
        1000,
        2,
        &[0; 32],
    );
    let reason = rejection_of(port, &hello);
    assert!(
        reason.contains("transport mismatch") && reason.contains("tcp") && reason.contains("verbs"),
        "{reason}"
    );
    // The server said it too, and is still there for a good client.
    s.wait_for_stderr("transport mismatch", SHORT);
    assert!(s.try_status().is_none(), "{}", s.report());
}

#[test]
fn a_peer_of_another_protocol_version_is_refused_naming_both_versions() {
    for theirs in [1u16, wire::VERSION + 1] {
        let (_s, port) = tcp_server();
        let hello = wire::hello_with(theirs, wire::ROLE_SENDER, wire::TRANSPORT_TCP, 1000, 2, &[]);
        let reason = rejection_of(port, &hello);
        assert!(
            reason.contains(&format!("version {theirs}"))
                && reason.contains(&format!("speaks {}", wire::VERSION)),
            "{reason}"
        );
    }
}

#[test]
fn credits_above_1024_are_refused_on_the_command_line_in_the_library_and_on_the_wire() {
    // A usage error, as clap reports any value out of its range.
    let (code, _, err) = run(&["--client", "127.0.0.1:1", "--credits", "1025"], SHORT);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("1025") && err.contains("1..=1024"), "{err}");

    let too_many = Config::default().with_credits(1025);
    match too_many.validate() {
        Err(Error::InvalidConfig(why)) => assert!(why.contains("1024"), "{why}"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }

    let (_s, port) = tcp_server();
    let hello = wire::hello_with(
        wire::VERSION,
        wire::ROLE_SENDER,
        wire::TRANSPORT_TCP,
        1000,
        1025,
        &[],
    );
    let reason = rejection_of(port, &hello);
    assert!(reason.contains("credits"), "{reason}");
}

fn session_config(max_msg_size: usize, credits: u16) -> Config {
    test_config(
        Config::default()
            .with_max_msg_size(max_msg_size)
            .with_credits(credits)
            .with_handshake_timeout(common::scaled(Duration::from_secs(5)))
            .with_connect_timeout(common::scaled(Duration::from_secs(5))),
    )
}

/// The session's maximum is the smaller of the two, whichever end has it; the window is the
/// receiver's slot count.
#[test]
fn the_smaller_maximum_and_the_receivers_window_are_what_both_ends_use() {
    for (sender_max, receiver_max) in [(100usize, 1000usize), (1000, 100)] {
        let listener =
            Listener::bind(test_listen_addr(), &session_config(receiver_max, 3)).unwrap();
        let addr = listener.local_addr();
        let rx = thread::spawn(move || {
            let mut src = listener.accept().unwrap().accept_src().unwrap();
            let info = (src.info().max_msg_size(), src.info().credits());
            let mut sizes = Vec::new();
            while let Some(m) = src.recv().unwrap() {
                sizes.push(m.len());
            }
            (info, sizes)
        });
        let mut sink = RdmaSink::connect(addr, &session_config(sender_max, 7)).unwrap();
        assert_eq!(sink.max_message_size(), 100);
        assert_eq!(sink.info().credits(), 3, "the receiver's window");
        sink.send(&[1; 100]).unwrap();
        match sink.send(&[2; 101]) {
            Err(Error::MessageTooLarge { .. }) => {}
            other => panic!("101 bytes over a 100-byte session: {other:?}"),
        }
        sink.send(&[3; 7]).unwrap();
        assert_eq!(sink.finish().unwrap(), 2);
        let ((max, credits), sizes) = rx.join().unwrap();
        assert_eq!(
            (max, credits),
            (100, 3),
            "sender {sender_max}, receiver {receiver_max}"
        );
        assert_eq!(sizes, [100, 7]);
    }
}

/// A duplex server refuses a client whose first session receives (it must send first), and
/// still serves a proper duplex client afterwards.
#[test]
fn a_duplex_server_refuses_a_client_that_receives_first() {
    let listener = Listener::bind(test_listen_addr(), &session_config(4096, 2)).unwrap();
    let addr = listener.local_addr();
    let server = thread::spawn(move || {
        let (mut sink, mut src) = listener.accept_duplex().unwrap();
        let got = src.recv().unwrap().map(<[u8]>::to_vec);
        sink.send(b"pong").unwrap();
        // Read to the client's end of stream before finishing: each end finishes its sending
        // side only after the other can release what it holds.
        while src.recv().unwrap().is_some() {}
        sink.finish().unwrap();
        got
    });
    match RdmaSrc::connect(addr, &session_config(4096, 2)) {
        Err(Error::Rejected(reason)) => assert!(reason.contains("duplex"), "{reason}"),
        other => panic!("expected the duplex server's refusal, got {other:?}"),
    }
    let (mut sink, mut src) =
        rdma_container::duplex::connect(addr, &session_config(4096, 2)).unwrap();
    sink.send(b"ping").unwrap();
    assert_eq!(src.recv().unwrap(), Some(&b"pong"[..]));
    sink.finish().unwrap();
    assert!(src.recv().unwrap().is_none());
    assert_eq!(server.join().unwrap().as_deref(), Some(&b"ping"[..]));
}

/// The first Ctrl-C ends a session cleanly, which waits for the peer; a second one exits at
/// once (status 130), even while the peer is frozen.
#[test]
fn a_second_ctrl_c_exits_at_once_while_the_first_waits_for_a_frozen_peer() {
    let (mut s, port) = tcp_server();
    let addr = format!("{}:{port}", test_ip());
    let mut c = start(
        "client",
        &[
            "--client",
            &addr,
            "--transport",
            "tcp",
            "--count",
            "100000000",
        ],
    );
    s.wait_for_stdout_lines(100, SHORT);
    // Freeze the receiver: the sender's clean end (Finish, then waiting for the receiver to
    // drain) cannot complete.
    s.signal(Signal::SIGSTOP);
    thread::sleep(Duration::from_millis(200));
    c.signal(Signal::SIGINT);
    thread::sleep(Duration::from_millis(300));
    assert!(
        c.try_status().is_none(),
        "the first Ctrl-C should wait for the frozen peer\n{}",
        c.report()
    );
    let second = Instant::now();
    c.signal(Signal::SIGINT);
    let code = c.wait_code(SHORT);
    let took = second.elapsed();
    s.signal(Signal::SIGCONT);
    assert_eq!(code, 130, "{}", c.report());
    assert!(
        took < common::scaled(Duration::from_secs(2)),
        "the second Ctrl-C took {took:?} to end the process\n{}",
        c.report()
    );
    s.kill();
}

/// Bootstrap over IPv6 (::1): refused at once by both ends, each in one clear line (exit 2,
/// a usage error),
/// before anything listens or connects: every transport bootstraps over IPv4.
#[test]
fn an_ipv6_bootstrap_is_refused_at_once_in_one_clear_line() {
    let port = free_port();
    let addr = format!("[::1]:{port}");
    for (role, args) in [
        ("server", ["--server", addr.as_str(), "--transport", "tcp"]),
        ("client", ["--client", addr.as_str(), "--transport", "tcp"]),
    ] {
        let started = Instant::now();
        let (code, _, err) = run(&args, SHORT);
        assert_eq!(code, 2, "{role}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.contains("ERROR")).collect();
        assert!(
            errors.len() == 1 && errors[0].contains("IPv6") && errors[0].contains("IPv4"),
            "{role}: {err}"
        );
        assert!(
            !err.contains("listening on") && !err.contains("waiting for the server"),
            "{role}: {err}"
        );
        assert!(
            started.elapsed() < common::scaled(Duration::from_secs(5)),
            "{role} took {:?}",
            started.elapsed()
        );
    }
}

/// Slot memory beyond what the machine has (1,024 credits of 1 GiB) ends in one clear error
/// naming both values, before anything is allocated: never an allocation abort or the OOM killer.
#[test]
fn slot_memory_beyond_the_machine_is_refused_naming_credits_and_size() {
    let (mut s, port) = common::server("server", &["--once"]);
    let addr = format!("{}:{port}", test_ip());
    let transport = common::transport_args(&[]);
    let mut client_args = vec![
        "--client",
        addr.as_str(),
        "--credits",
        "1024",
        "--max-msg-size",
        "1073741824",
    ];
    client_args.extend(transport.iter().map(String::as_str));
    let (code, _, err) = run(&client_args, SHORT);
    assert_eq!(code, 2, "a configuration the machine cannot hold: {err}");
    assert!(
        err.contains("1024 slots of 1073741824 bytes")
            && err.contains("--credits or --max-msg-size"),
        "{err}"
    );
    s.kill();
}
