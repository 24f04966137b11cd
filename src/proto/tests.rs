//! Pure protocol tests: encoding round trips, every decode error path, credit windows.

use crate::proto::{
    decode_frame, encode_frame, Checksum, Counts, CreditError, DecodeError, Hello, Message,
    QpSettings, RecvWindow, Role, SendWindow, TransportKind, AUTH_LEN, FRAME_HEADER_LEN,
    HELLO_MAGIC, MAX_BLOB_LEN, MAX_FRAME_BODY, MAX_REASON_LEN, PROTOCOL_VERSION, QP_MTUS,
    SESSION_ID_LEN,
};
use proptest::prelude::*;

fn hello() -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        role: Role::Receiver,
        transport: TransportKind::Tcp,
        max_msg_size: 10 << 20,
        credits: 2,
        qps: 1,
        paths: Vec::new(),
        gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
        checksum: Checksum::Crc32c,
        resume_timeout_ms: 10_000,
        session_id: [5; SESSION_ID_LEN],
        resume_secret: [6; 32],
        qp: QpSettings {
            traffic_class: Some(104),
            service_level: Some(3),
            mtu: Some(2048),
            ack_timeout: None,
            retry_count: Some(7),
        },
        blob: vec![1, 2, 3],
    }
}

fn decode_one(bytes: &[u8]) -> Result<Message, DecodeError> {
    match decode_frame(bytes)? {
        Some((msg, used)) => {
            assert_eq!(used, bytes.len(), "decoder must consume exactly one frame");
            Ok(msg)
        }
        None => panic!("frame reported incomplete"),
    }
}

/// A frame with the given body bytes.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn hello_body() -> Vec<u8> {
    encode_frame(&Message::Hello(hello()))[FRAME_HEADER_LEN..].to_vec()
}

#[test]
fn encoding_is_little_endian_and_stable() {
    let bytes = encode_frame(&Message::Finish { count: 0x0102_0304 });
    assert_eq!(bytes, [9, 0, 0, 0, 4, 4, 3, 2, 1, 0, 0, 0, 0]);
    let h = encode_frame(&Message::Hello(hello()));
    assert_eq!(&h[5..9], &HELLO_MAGIC);
    assert_eq!(&h[9..11], &PROTOCOL_VERSION.to_le_bytes());
}

#[test]
fn each_message_round_trips() {
    for msg in [
        Message::Hello(hello()),
        Message::Ready,
        Message::Credit { released: u64::MAX },
        Message::Finish { count: 10_000 },
        Message::Reject {
            reason: "busy".into(),
        },
        Message::Reject {
            reason: String::new(),
        },
        Message::Resume {
            session: [1; SESSION_ID_LEN],
            nonce: [2; AUTH_LEN],
        },
        Message::ResumeChallenge {
            nonce: [3; AUTH_LEN],
            proof: [4; AUTH_LEN],
        },
        Message::ResumeProof {
            proof: [5; AUTH_LEN],
            counts: Counts {
                messages: 7,
                released: 5,
            },
            blob: vec![9; 40],
        },
        Message::ResumeAccepted {
            counts: Counts {
                messages: u64::MAX,
                released: 0,
            },
            blob: Vec::new(),
        },
    ] {
        assert_eq!(decode_one(&encode_frame(&msg)), Ok(msg));
    }
}

#[test]
fn incomplete_frames_ask_for_more() {
    let bytes = encode_frame(&Message::Hello(hello()));
    for cut in 0..bytes.len() {
        assert_eq!(decode_frame(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
}

#[test]
fn two_frames_decode_one_at_a_time() {
    let mut bytes = encode_frame(&Message::Ready);
    bytes.extend(encode_frame(&Message::Credit { released: 7 }));
    let (first, used) = decode_frame(&bytes).unwrap().unwrap();
    assert_eq!(first, Message::Ready);
    assert_eq!(
        decode_one(&bytes[used..]),
        Ok(Message::Credit { released: 7 })
    );
}

#[test]
fn oversize_frame_length_is_refused_before_buffering() {
    let bytes = (MAX_FRAME_BODY + 1).to_le_bytes();
    assert_eq!(
        decode_frame(&bytes),
        Err(DecodeError::FrameTooLarge {
            len: MAX_FRAME_BODY + 1,
            max: MAX_FRAME_BODY
        })
    );
    // An HTTP request read as a length is huge, and the error says it looks like text.
    let e = decode_frame(b"GET / HTTP/1.0\r\n").unwrap_err();
    assert!(matches!(e, DecodeError::FrameTooLarge { .. }));
    assert!(
        e.to_string().contains("\"GET \"") && e.to_string().contains("another service"),
        "{e}"
    );
    // A length that is not text gets no such guess.
    let e = decode_frame(&(MAX_FRAME_BODY + 1).to_le_bytes()).unwrap_err();
    assert!(!e.to_string().contains("another service"), "{e}");
}

#[test]
fn wrong_magic_is_named() {
    let mut body = hello_body();
    body[1..5].copy_from_slice(b"NOPE");
    assert_eq!(
        decode_one(&frame(&body)),
        Err(DecodeError::BadMagic { found: *b"NOPE" })
    );
}

#[test]
fn wrong_version_is_named_even_if_the_rest_differs() {
    let mut body = hello_body();
    body[5..7].copy_from_slice(&10u16.to_le_bytes());
    body.truncate(7); // a future layout: only magic and version are read
    assert_eq!(
        decode_one(&frame(&body)),
        Err(DecodeError::UnsupportedVersion {
            theirs: 10,
            ours: PROTOCOL_VERSION
        })
    );
}

#[test]
fn truncated_bodies_are_errors_not_panics() {
    let body = hello_body();
    for cut in 1..body.len() {
        let err = decode_one(&frame(&body[..cut])).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { .. }),
            "cut {cut}: {err:?}"
        );
    }
    assert!(matches!(
        decode_one(&frame(&[3, 1, 2])),
        Err(DecodeError::Truncated {
            field: "released",
            ..
        })
    ));
    assert!(matches!(
        decode_one(&frame(&[])),
        Err(DecodeError::Truncated { field: "kind", .. })
    ));
}

#[test]
fn trailing_bytes_unknown_kinds_and_bad_fields_are_errors() {
    assert_eq!(
        decode_one(&frame(&[2, 0])),
        Err(DecodeError::TrailingBytes(1))
    );
    assert_eq!(
        decode_one(&frame(&[0x7f])),
        Err(DecodeError::UnknownKind(0x7f))
    );
    let role_at = 1 + 4 + 2;
    for (offset, value, field) in [(role_at, 9u8, "role"), (role_at + 1, 0, "transport")] {
        let mut body = hello_body();
        body[offset] = value;
        assert_eq!(
            decode_one(&frame(&body)),
            Err(DecodeError::BadField {
                field,
                value: u64::from(value)
            })
        );
    }
    let mut zero_credits = hello();
    zero_credits.credits = 0;
    assert!(matches!(
        decode_one(&encode_frame(&Message::Hello(zero_credits))),
        Err(DecodeError::BadField {
            field: "credits",
            ..
        })
    ));
    let mut zero_max = hello();
    zero_max.max_msg_size = 0;
    assert!(matches!(
        decode_one(&encode_frame(&Message::Hello(zero_max))),
        Err(DecodeError::BadField {
            field: "max_msg_size",
            ..
        })
    ));
}

/// Version 8's queue pair count sits right after the credits: 1 to 16 round-trip, 0 and 17
/// are bad fields.
#[test]
fn the_queue_pair_count_round_trips_from_1_to_16_and_0_or_17_is_a_bad_field() {
    for qps in [1, 2, 16] {
        let h = Hello { qps, ..hello() };
        assert_eq!(
            decode_one(&encode_frame(&Message::Hello(h.clone()))),
            Ok(Message::Hello(h))
        );
    }
    let at = 1 + 4 + 2 + 1 + 1 + 4 + 2;
    let mut body = hello_body();
    assert_eq!(body[at], 1, "the count follows the credits");
    for bad in [0u8, 17] {
        body[at] = bad;
        assert_eq!(
            decode_one(&frame(&body)),
            Err(DecodeError::BadField {
                field: "qps",
                value: u64::from(bad)
            })
        );
    }
}

/// Version 9's paths follow the queue pair count: each a client and a server address; fewer
/// than the queue pairs (every path carries a lane), so a count at or above them is a bad field.
#[test]
fn the_paths_round_trip_and_a_path_without_a_queue_pair_is_a_bad_field() {
    let pair = |c: u8, s: u8| crate::proto::PathPair {
        client: std::net::Ipv4Addr::new(10, c, 0, 1),
        server: std::net::Ipv4Addr::new(10, s, 0, 2),
    };
    for (qps, paths) in [
        (2, vec![pair(1, 1)]),
        (16, (0..15).map(|i| pair(i, i + 1)).collect()),
    ] {
        let h = Hello {
            qps,
            paths,
            ..hello()
        };
        assert_eq!(
            decode_one(&encode_frame(&Message::Hello(h.clone()))),
            Ok(Message::Hello(h))
        );
    }
    let at = 1 + 4 + 2 + 1 + 1 + 4 + 2 + 1;
    let mut body = hello_body();
    assert_eq!(body[at], 0, "the path count follows the queue pair count");
    body[at] = 1; // one path beside the bootstrap's, with qps 1
    assert_eq!(
        decode_one(&frame(&body)),
        Err(DecodeError::BadField {
            field: "paths",
            value: 1
        })
    );
    let h = Hello {
        qps: 3,
        paths: vec![pair(1, 1), pair(2, 2)],
        ..hello()
    };
    let whole = encode_frame(&Message::Hello(h))[FRAME_HEADER_LEN..].to_vec();
    // Cut inside the second path's addresses: a truncated hello, not a shorter list.
    let cut = frame(&whole[..at + 1 + 8 + 3]);
    assert!(decode_one(&cut).is_err());
}

/// Version 7's queue pair settings: the flags say which travel, each value in its range, an
/// unset one is `None` whatever its byte says; anything else is a bad field.
#[test]
fn queue_pair_settings_round_trip_and_bad_ones_are_named() {
    let round_trip = |qp: QpSettings| {
        let h = Hello { qp, ..hello() };
        assert_eq!(
            decode_one(&encode_frame(&Message::Hello(h.clone()))),
            Ok(Message::Hello(h))
        );
    };
    round_trip(QpSettings::default());
    round_trip(hello().qp);
    round_trip(QpSettings {
        traffic_class: Some(255),
        service_level: Some(15),
        mtu: Some(4096),
        ack_timeout: Some(31),
        retry_count: Some(0),
    });
    // The settings sit between the resume secret and the blob.
    // (no paths: the path count is one byte).
    let at = 1 + 4 + 2 + 1 + 1 + 4 + 2 + 1 + 1 + 16 + 1 + 4 + 16 + 32;
    let body = hello_body();
    assert_eq!(
        &body[at..at + QpSettings::LEN],
        [0b10111, 104, 3, 0x00, 0x08, 0, 7]
    );
    for (offset, value, field) in [
        (0, 0x20u64, "qp_flags"),
        (2, 16, "service_level"),
        (6, 8, "retry_count"),
    ] {
        let mut bad = body.clone();
        bad[at + offset] = value as u8;
        assert_eq!(
            decode_one(&frame(&bad)),
            Err(DecodeError::BadField { field, value }),
            "{field}"
        );
    }
    let mut bad_mtu = body.clone();
    bad_mtu[at + 3..at + 5].copy_from_slice(&1500u16.to_le_bytes());
    assert_eq!(
        decode_one(&frame(&bad_mtu)),
        Err(DecodeError::BadField {
            field: "mtu",
            value: 1500
        })
    );
    let mut bad_ack = body.clone();
    bad_ack[at] |= 1 << 3;
    bad_ack[at + 5] = 32;
    assert_eq!(
        decode_one(&frame(&bad_ack)),
        Err(DecodeError::BadField {
            field: "ack_timeout",
            value: 32
        })
    );
    // Unset: the byte means nothing.
    let mut unset = body;
    unset[at + 5] = 99;
    let Ok(Message::Hello(h)) = decode_one(&frame(&unset)) else {
        panic!("an unset ACK timeout's byte is ignored");
    };
    assert_eq!(h.qp.ack_timeout, None);
}

#[test]
fn oversize_length_prefixed_fields_are_refused() {
    // Blob length field claims more than MAX_BLOB_LEN.
    let mut body = hello_body();
    let blob_len_at = body.len() - 3 - 2;
    body[blob_len_at..blob_len_at + 2].copy_from_slice(&((MAX_BLOB_LEN + 1) as u16).to_le_bytes());
    assert!(matches!(
        decode_one(&frame(&body)),
        Err(DecodeError::FieldTooLong { field: "blob", .. })
    ));
    let mut reject = vec![5u8];
    reject.extend_from_slice(&((MAX_REASON_LEN + 1) as u16).to_le_bytes());
    reject.extend(std::iter::repeat_n(b'x', MAX_REASON_LEN + 1));
    assert!(matches!(
        decode_one(&frame(&reject)),
        Err(DecodeError::FieldTooLong {
            field: "reason",
            ..
        })
    ));
}

#[test]
fn resume_messages_cut_short_or_with_a_long_blob_are_errors() {
    let accepted = encode_frame(&Message::ResumeAccepted {
        counts: Counts {
            messages: 3,
            released: 2,
        },
        blob: vec![7; 10],
    });
    let body = &accepted[FRAME_HEADER_LEN..];
    for cut in 1..body.len() {
        assert!(
            matches!(
                decode_one(&frame(&body[..cut])),
                Err(DecodeError::Truncated { .. })
            ),
            "cut {cut}"
        );
    }
    // kind, proof, counts, then a blob length past the bound.
    let mut proof = vec![11u8];
    proof.extend_from_slice(&[0; AUTH_LEN]);
    proof.extend_from_slice(&[0; 16]);
    proof.extend_from_slice(&((MAX_BLOB_LEN + 1) as u16).to_le_bytes());
    proof.extend(std::iter::repeat_n(0u8, MAX_BLOB_LEN + 1));
    assert!(matches!(
        decode_one(&frame(&proof)),
        Err(DecodeError::FieldTooLong { field: "blob", .. })
    ));
    let mut resume = vec![9u8];
    resume.extend_from_slice(&[0; SESSION_ID_LEN]);
    assert!(matches!(
        decode_one(&frame(&resume)),
        Err(DecodeError::Truncated { field: "nonce", .. })
    ));
}

#[test]
fn long_reject_reasons_are_cut_on_a_char_boundary() {
    let long = "é".repeat(MAX_REASON_LEN);
    let Message::Reject { reason } = Message::reject(&long) else {
        panic!("not a reject");
    };
    assert!(reason.len() <= MAX_REASON_LEN && reason.len() >= MAX_REASON_LEN - 1);
    assert_eq!(
        decode_one(&encode_frame(&Message::Reject { reason: long })),
        Ok(Message::Reject { reason })
    );
}

fn arb_hello() -> impl Strategy<Value = Hello> {
    (
        prop_oneof![Just(Role::Sender), Just(Role::Receiver)],
        prop_oneof![
            Just(TransportKind::Tcp),
            Just(TransportKind::Doca),
            Just(TransportKind::Verbs)
        ],
        1u32..,
        (
            1u16..=1024,
            1u8..=crate::MAX_QPS,
            proptest::collection::vec(any::<([u8; 4], [u8; 4])>(), 0..16),
        ),
        any::<[u8; 16]>(),
        any::<bool>(),
        (
            any::<u32>(),
            any::<[u8; SESSION_ID_LEN]>(),
            any::<[u8; 32]>(),
        ),
        proptest::collection::vec(any::<u8>(), 0..=MAX_BLOB_LEN),
        (
            proptest::option::of(any::<u8>()),
            proptest::option::of(0u8..=15),
            proptest::option::of(proptest::sample::select(QP_MTUS.to_vec())),
            proptest::option::of(0u8..=31),
            proptest::option::of(0u8..=7),
        ),
    )
        .prop_map(
            |(role, transport, max_msg_size, (credits, qps, paths), gid, crc, resume, blob, qp)| {
                Hello {
                    version: PROTOCOL_VERSION,
                    role,
                    transport,
                    max_msg_size,
                    credits,
                    qps,
                    // Fewer paths than queue pairs: every path carries a lane.
                    paths: paths
                        .into_iter()
                        .take(usize::from(qps) - 1)
                        .map(|(c, s)| crate::proto::PathPair {
                            client: c.into(),
                            server: s.into(),
                        })
                        .collect(),
                    gid,
                    checksum: if crc {
                        Checksum::Crc32c
                    } else {
                        Checksum::None
                    },
                    resume_timeout_ms: resume.0,
                    session_id: resume.1,
                    resume_secret: resume.2,
                    qp: QpSettings {
                        traffic_class: qp.0,
                        service_level: qp.1,
                        mtu: qp.2,
                        ack_timeout: qp.3,
                        retry_count: qp.4,
                    },
                    blob,
                }
            },
        )
}

fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        arb_hello().prop_map(Message::Hello),
        Just(Message::Ready),
        any::<u64>().prop_map(|released| Message::Credit { released }),
        any::<u64>().prop_map(|count| Message::Finish { count }),
        "\\PC{0,128}".prop_map(|r| Message::reject(&r)),
        (any::<[u8; SESSION_ID_LEN]>(), any::<[u8; AUTH_LEN]>())
            .prop_map(|(session, nonce)| Message::Resume { session, nonce }),
        (any::<[u8; AUTH_LEN]>(), any::<[u8; AUTH_LEN]>())
            .prop_map(|(nonce, proof)| Message::ResumeChallenge { nonce, proof }),
        (
            any::<[u8; AUTH_LEN]>(),
            any::<(u64, u64)>(),
            proptest::collection::vec(any::<u8>(), 0..=MAX_BLOB_LEN),
        )
            .prop_map(|(proof, (messages, released), blob)| Message::ResumeProof {
                proof,
                counts: Counts { messages, released },
                blob,
            }),
        (
            any::<(u64, u64)>(),
            proptest::collection::vec(any::<u8>(), 0..=MAX_BLOB_LEN)
        )
            .prop_map(|((messages, released), blob)| Message::ResumeAccepted {
                counts: Counts { messages, released },
                blob,
            }),
    ]
}

proptest! {
    #[test]
    fn any_message_round_trips(msg in arb_message()) {
        let bytes = encode_frame(&msg);
        prop_assert!(bytes.len() <= FRAME_HEADER_LEN + MAX_FRAME_BODY as usize);
        prop_assert_eq!(decode_one(&bytes), Ok(msg));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        if let Ok(Some((_, used))) = decode_frame(&bytes) {
            prop_assert!(used <= bytes.len());
        }
    }

    #[test]
    fn corrupted_valid_frames_never_panic(msg in arb_message(), pos in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = encode_frame(&msg);
        let at = pos % bytes.len();
        bytes[at] = byte;
        let _ = decode_frame(&bytes);
    }
}

/// One step of a simulated session between the two windows.
#[derive(Debug, Clone)]
enum Step {
    /// The sender tries to send.
    Send,
    /// The receiving application releases its oldest message (its next recv()).
    Release,
    /// The network delivers the oldest in-flight message.
    Deliver,
    /// The network delivers the newest pending Credit message (older ones may be skipped:
    /// credits are cumulative).
    DeliverCredit,
}

fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            Just(Step::Send),
            Just(Step::Release),
            Just(Step::Deliver),
            Just(Step::DeliverCredit)
        ],
        0..400,
    )
}

proptest! {
    #[test]
    fn credit_windows_keep_their_invariants(capacity in 1u32..8, steps in arb_steps()) {
        let mut tx = SendWindow::new(capacity);
        let mut rx = RecvWindow::new(capacity);
        let mut wire: std::collections::VecDeque<u64> = Default::default();
        let mut credits_on_wire: Vec<u64> = Vec::new();
        let mut next_release = 0u64;
        for step in steps {
            match step {
                Step::Send => {
                    let before = tx.available();
                    match tx.try_take() {
                        Some(seq) => {
                            prop_assert_eq!(seq, tx.sent() - 1);
                            wire.push_back(seq);
                        }
                        None => prop_assert_eq!(before, 0),
                    }
                }
                Step::Deliver => {
                    if let Some(seq) = wire.pop_front() {
                        // Never more than `capacity` unreleased messages at the receiver.
                        let got = rx.on_arrival();
                        prop_assert_eq!(got, Ok(seq), "sender exceeded its credit");
                        prop_assert!(rx.held() <= u64::from(capacity));
                    }
                }
                Step::Release => {
                    match rx.release_oldest() {
                        Ok(seq) => {
                            // Credits return in order.
                            prop_assert_eq!(seq, next_release);
                            next_release += 1;
                            credits_on_wire.push(rx.released());
                        }
                        Err(e) => prop_assert_eq!(e, CreditError::NothingToRelease),
                    }
                }
                Step::DeliverCredit => {
                    if let Some(released) = credits_on_wire.pop() {
                        credits_on_wire.clear();
                        prop_assert!(tx.on_credit(released).is_ok());
                    }
                }
            }
            // No credit invented: the sender never believes more was released than really was.
            prop_assert!(tx.released() <= rx.released());
            prop_assert!(tx.in_flight() <= u64::from(capacity));
            prop_assert_eq!(u64::from(tx.available()) + tx.in_flight(), u64::from(capacity));
        }
        // No credit lost: once everything is delivered, released and credited, the window is whole.
        while let Some(seq) = wire.pop_front() {
            prop_assert_eq!(rx.on_arrival(), Ok(seq));
        }
        while rx.release_oldest().is_ok() {}
        prop_assert!(tx.on_credit(rx.released()).is_ok());
        prop_assert_eq!(tx.available(), capacity);
        prop_assert_eq!(tx.sent(), rx.arrived());
    }

    #[test]
    fn invented_credit_is_refused(capacity in 1u32..8, sends in 0u64..8, extra in 1u64..100) {
        let mut tx = SendWindow::new(capacity);
        for _ in 0..sends { tx.try_take(); }
        let sent = tx.sent();
        prop_assert_eq!(
            tx.on_credit(sent + extra),
            Err(CreditError::Invented { released: sent + extra, sent })
        );
    }
}

/// A small deterministic generator, so a failing torture run can be replayed from its seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Decoder torture for a bounded time (CI runs it on every `cargo test`): streams of valid
/// frames, cut into random chunks as TCP may deliver them, with and without random damage
/// (flipped, dropped, inserted, duplicated bytes). The incremental decoder must never panic,
/// never hold more than one maximal frame, and decode undamaged streams exactly.
#[test]
fn control_framing_torture_for_a_bounded_time() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let samples = [
        Message::Hello(hello()),
        Message::Ready,
        Message::Credit { released: 7 },
        Message::Finish { count: u64::MAX },
        Message::reject("why ∞"),
        Message::Reject {
            reason: String::new(),
        },
    ];
    let mut rng = XorShift(0x5eed_1234_abcd_0001);
    let mut rounds = 0u64;
    while std::time::Instant::now() < deadline {
        rounds += 1;
        let sent: Vec<Message> = (0..1 + rng.below(8))
            .map(|_| samples[rng.below(samples.len())].clone())
            .collect();
        let mut stream: Vec<u8> = sent.iter().flat_map(encode_frame).collect();
        let damaged = rng.below(2) == 1;
        if damaged {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(stream.len());
                match rng.below(4) {
                    0 => stream[at] ^= 1 << rng.below(8),
                    1 => {
                        stream.remove(at);
                    }
                    2 => stream.insert(at, rng.next() as u8),
                    _ => {
                        let b = stream[at];
                        stream.insert(at, b);
                    }
                }
                if stream.is_empty() {
                    break;
                }
            }
        }
        // Feed it in random chunks to an incremental decoder, as the control channel does.
        let mut buf: Vec<u8> = Vec::new();
        let mut got = Vec::new();
        let mut failed = false;
        let mut pos = 0;
        while pos < stream.len() && !failed {
            let take = 1 + rng.below(64);
            let end = (pos + take).min(stream.len());
            buf.extend_from_slice(&stream[pos..end]);
            pos = end;
            loop {
                match decode_frame(&buf) {
                    Ok(Some((msg, used))) => {
                        got.push(msg);
                        buf.drain(..used);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            assert!(
                buf.len() <= FRAME_HEADER_LEN + MAX_FRAME_BODY as usize + 64,
                "round {rounds}: the decoder held {} bytes",
                buf.len()
            );
        }
        if !damaged {
            assert!(
                !failed,
                "round {rounds}: an undamaged stream failed to decode"
            );
            assert_eq!(got, sent, "round {rounds}");
            assert!(buf.is_empty(), "round {rounds}: bytes left over");
        }
    }
    assert!(rounds > 1000, "only {rounds} rounds in 3 s");
}
