//! `--checksum crc32c` with the real binary, over the transport under test
//! (`RDMA_TEST_TRANSPORT`, tcp on loopback by default): a checked session carries every
//! message; ends that disagree are refused at the handshake, saying so on both; and, in a test
//! build (`--features test-hooks`), a message corrupted after its checksum was computed is
//! caught by the receiver, named by its index, and never printed.

mod common;

use common::{assert_fails_saying, client, server, SHORT};

#[test]
fn both_ends_checking_carry_ten_thousand_messages_and_say_so() {
    let (mut s, port) = server("server", &["--once", "--checksum", "crc32c"]);
    let mut c = client("client", port, &["--checksum", "crc32c", "--size", "300"]);
    assert_eq!(c.wait_code(common::LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let out = s.stdout();
    assert_eq!(out.lines().count(), 10_000, "{}", s.report());
    assert!(
        out.lines().all(|l| l.len() == 300),
        "the trailer never reaches the application"
    );
    assert!(
        s.stderr().contains("checksum crc32c") && c.stderr().contains("checksum crc32c"),
        "both session lines name the check\n{}\n{}",
        s.report(),
        c.report()
    );
    assert!(
        s.stderr()
            .contains("received 10000 messages, 3000000 bytes"),
        "byte counts never include the trailer\n{}",
        s.report()
    );
}

#[test]
fn a_check_on_one_end_only_is_refused_on_both_with_the_reason() {
    for (server_args, client_args) in [
        (&["--once", "--checksum", "crc32c"][..], &[][..]),
        (&["--once"][..], &["--checksum", "crc32c"][..]),
    ] {
        let (mut s, port) = server("server", server_args);
        let mut c = client("client", port, client_args);
        assert_fails_saying(
            &mut c,
            &["checksum mismatch"],
            "the client should name the checksum mismatch",
        );
        assert_fails_saying(
            &mut s,
            &["checksum mismatch"],
            "the server should name the checksum mismatch",
        );
    }
}

/// Checksummed messages exactly at `--max-msg-size` (the trailer must not cost the
/// application a byte of its maximum) with a wide window, on the transport under test.
#[test]
fn checksummed_messages_at_the_maximum_size_arrive_whole() {
    const SIZE: &str = "262144";
    let both = [
        "--checksum",
        "crc32c",
        "--max-msg-size",
        SIZE,
        "--credits",
        "64",
    ];
    let mut server_args = vec!["--once"];
    server_args.extend_from_slice(&both);
    let (mut s, port) = server("server", &server_args);
    let mut client_args = vec!["--size", SIZE, "--count", "300"];
    client_args.extend_from_slice(&both);
    let mut c = client("client", port, &client_args);
    assert_eq!(c.wait_code(common::LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    let out = s.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 300, "{}", s.report());
    for (i, line) in lines.iter().enumerate() {
        let digits = i.to_string();
        let pad: String = (0..262_144 - digits.len())
            .map(|k| char::from(b'a' + (k % 26) as u8))
            .collect();
        assert!(
            line.len() == 262_144 && line.starts_with(&digits) && line[digits.len()..] == pad,
            "message {i} is not what was sent ({} bytes)",
            line.len()
        );
    }
}

/// Needs a test build: `cargo test --features test-hooks --test checksum` (CI runs it so).
#[cfg(feature = "test-hooks")]
#[test]
fn a_corrupted_message_is_caught_named_and_never_printed() {
    let (mut s, port) = server("server", &["--once", "--checksum", "crc32c"]);
    let addr = format!("{}:{port}", common::test_ip());
    let transport = common::transport_args(&[]);
    let mut args = vec![
        "--client",
        addr.as_str(),
        "--connect-timeout",
        "10",
        "--checksum",
        "crc32c",
    ];
    args.extend(transport.iter().map(String::as_str));
    let mut cmd = common::command(&args);
    cmd.env("RDMA_CONTAINER_TEST_CORRUPT_MESSAGE", "500");
    let mut c = common::Proc::spawn("client", cmd);
    // The receiver's own failure (status 1); the sender was rejected (status 4).
    common::assert_exits_saying(
        &mut s,
        1,
        &["message 500 failed its checksum", "CRC32C"],
        "the server should name the corrupted message",
    );
    assert_fails_saying(
        &mut c,
        &["message 500 failed its checksum"],
        "the client should be told which message failed",
    );
    if let Err(e) = common::check_counting(&s.stdout(), 500) {
        panic!(
            "the server printed something else than 0..499: {e}\n{}",
            s.report()
        );
    }
    assert!(
        s.stderr().contains("received 500 messages, 1390 bytes"),
        "the count excludes the corrupted message\n{}",
        s.report()
    );
}
