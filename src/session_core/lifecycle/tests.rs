//! The lifecycle rules as examples, then property tests on simulated time: random breaks,
//! attempts that succeed, fail, time out or come too late, strangers on a running session,
//! "no such session" and take-overs. Checked: every resume ends (resumed or given up) within
//! the resume timeout of its break; a session that gets messages through between breaks never
//! gives up on the stall rule; one that gets none ends within the timeout of the first break
//! that made none; a failure that is not a break never starts a resume; giving up keeps the
//! break's kind; a stranger's attempt on a running session changes nothing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::session_core::resume::{ATTEMPT_TIMEOUT, MAX_RETRY};

const TIMEOUT: Duration = Duration::from_secs(10);

fn lost(messages: u64) -> Error {
    Error::PeerLost {
        reason: "control connection reset".into(),
        messages,
        cause: None,
    }
}

fn flushed() -> Error {
    Error::VerbsCompletion {
        op: "send",
        status: crate::CompletionStatus {
            code: crate::CompletionStatus::FLUSHED,
            name: "work request flushed",
        },
        hint: None,
    }
}

/// A local length error: the message does not fit the peer's slot; a new path meets it again.
fn too_long() -> Error {
    Error::VerbsCompletion {
        op: "send",
        status: crate::CompletionStatus {
            code: 1,
            name: "local length error",
        },
        hint: None,
    }
}

fn server() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 5000))
}

/// Runs a client's resume with every attempt failing at once, to its end: the give-up error and
/// when it came.
fn client_gives_up(life: &mut Lifecycle, mut now: Instant) -> (Error, Instant) {
    for _ in 0..10_000 {
        match step(life, now) {
            LifeStep::Reconnect { .. } => {
                assert_eq!(
                    life.on_attempt_failed("refused".into(), OldPath::TornDown, now),
                    AfterAttempt::KeepResuming
                );
            }
            LifeStep::Wait { until } => now = until,
            LifeStep::GiveUp(e) => return (e, now),
            LifeStep::ShutControlWrite => panic!("a client never shuts the old connection"),
        }
    }
    panic!("the client's resume never ended");
}

#[test]
fn only_a_lost_peer_or_a_broken_path_starts_a_resume() {
    let t0 = Instant::now();
    for e in [
        lost(3),
        flushed(),
        Error::TransportClosed { transport: "tcp" },
    ] {
        let mut life = Lifecycle::new(End::Client, TIMEOUT);
        assert!(life
            .on_trigger(Trigger::Failed(e), 0, OldControl::Shut, t0)
            .is_ok());
    }
    for e in [
        Error::Rejected("the receiver closed".into()),
        Error::Protocol(crate::ProtocolViolation::DataBeforeReady),
        Error::Interrupted,
        Error::Internal("a bug".into()),
        too_long(),
        Error::Doca {
            call: "doca_rdma_task_send",
            code: "DOCA_ERROR_TOO_BIG".into(),
            failure: crate::DocaFailure::Failed,
            hint: None,
        },
        Error::ChecksumMismatch {
            message: 1,
            detail: "x".into(),
        },
    ] {
        let kind = e.kind();
        let mut life = Lifecycle::new(End::Server, TIMEOUT);
        let back = life.on_trigger(Trigger::Failed(e), 0, OldControl::Shut, t0);
        assert!(matches!(back, Err(ref e) if e.kind() == kind), "{back:?}");
        assert!(life.resuming_since().is_none());
    }
}

#[test]
fn a_client_reconnects_at_once_then_backs_off_and_gives_up_at_the_timeout() {
    let t0 = Instant::now();
    let mut life = Lifecycle::new(End::Client, TIMEOUT);
    life.on_trigger(Trigger::Failed(lost(7)), 7, OldControl::Shut, t0)
        .unwrap();
    assert!(
        matches!(step(&mut life, t0), LifeStep::Reconnect { deadline } if deadline == t0 + ATTEMPT_TIMEOUT)
    );
    life.on_attempt_failed("refused".into(), OldPath::TornDown, t0);
    assert!(matches!(step(&mut life, t0), LifeStep::Wait { until } if until > t0));
    let (e, when) = client_gives_up(&mut life, t0);
    assert!(
        when >= t0 + TIMEOUT && when <= t0 + TIMEOUT + MAX_RETRY,
        "{:?}",
        when - t0
    );
    let text = e.to_string();
    assert!(matches!(e, Error::PeerLost { messages: 7, .. }), "{e}");
    assert!(
        text.contains("this end gave up: not resumed within 10.0 s"),
        "{text}"
    );
    assert!(text.contains("the last: refused"), "{text}");
}

#[test]
fn a_server_that_found_the_break_shuts_its_old_control_connection_unless_the_role_says_not() {
    let t0 = Instant::now();
    let mut life = Lifecycle::new(End::Server, TIMEOUT);
    life.on_trigger(Trigger::Failed(flushed()), 0, OldControl::Shut, t0)
        .unwrap();
    assert!(matches!(step(&mut life, t0), LifeStep::ShutControlWrite));
    assert!(matches!(step(&mut life, t0), LifeStep::Wait { until } if until == t0 + TIMEOUT));
    let mut lingering = Lifecycle::new(End::Server, TIMEOUT);
    lingering
        .on_trigger(Trigger::Failed(flushed()), 0, OldControl::Left, t0)
        .unwrap();
    assert!(matches!(step(&mut lingering, t0), LifeStep::Wait { .. }));
}

#[test]
fn a_parked_server_gives_up_with_the_breaks_own_error_and_refuses_a_late_attempt() {
    let t0 = Instant::now();
    let mut life = Lifecycle::new(End::Server, TIMEOUT);
    life.on_trigger(Trigger::Failed(flushed()), 4, OldControl::Left, t0)
        .unwrap();
    assert!(life.on_attempt_taken(t0 + Duration::from_secs(1)));
    life.on_attempt_failed("its proof was wrong".into(), OldPath::TornDown, t0);
    assert!(!life.on_attempt_taken(t0 + TIMEOUT), "too late");
    let LifeStep::GiveUp(e) = step(&mut life, t0 + TIMEOUT) else {
        panic!("the parked session ends at its timeout");
    };
    assert_eq!(
        e.kind(),
        ErrorKind::PathBroken,
        "a broken path keeps its kind: {e}"
    );
}

#[test]
fn a_strangers_attempt_on_a_running_session_changes_nothing() {
    let t0 = Instant::now();
    let mut life = Lifecycle::new(End::Server, TIMEOUT);
    life.on_trigger(Trigger::AttemptArrived, 5, OldControl::Shut, t0)
        .unwrap();
    assert!(
        matches!(step(&mut life, t0), LifeStep::Wait { .. }),
        "no shut: the session was not broken"
    );
    assert!(life.on_attempt_taken(t0));
    assert_eq!(
        life.on_attempt_failed("no proof".into(), OldPath::Intact, t0),
        AfterAttempt::CarryOn
    );
    assert!(life.resuming_since().is_none(), "running again");
}

/// Rule 8: a client retrying a path reconnects at once; an attempt that fails keeps it
/// resuming (its data path is torn down by then) until the timeout; it is not a break, so a
/// break after it with no message through does not end the session on the stall rule; a
/// server is never told to.
#[test]
fn a_path_retry_reconnects_the_client_and_is_not_a_break() {
    let t0 = Instant::now();
    let mut client = Lifecycle::new(End::Client, TIMEOUT);
    client
        .on_trigger(Trigger::Failed(lost(4)), 4, OldControl::Shut, t0)
        .unwrap();
    assert!(matches!(step(&mut client, t0), LifeStep::Reconnect { .. }));
    client.on_resumed(t0);
    let t1 = t0 + TIMEOUT;
    client
        .on_trigger(Trigger::RetryPaths, 4, OldControl::Shut, t1)
        .unwrap();
    assert!(
        matches!(step(&mut client, t1), LifeStep::Reconnect { .. }),
        "reconnects at once"
    );
    assert_eq!(
        client.on_attempt_failed("the server is away".into(), OldPath::TornDown, t1),
        AfterAttempt::KeepResuming
    );
    let LifeStep::GiveUp(e) = step(&mut client, t1 + TIMEOUT) else {
        panic!("gives up at the timeout");
    };
    assert!(
        e.to_string().contains("no break set going"),
        "says what failed: {e}"
    );

    let mut client = Lifecycle::new(End::Client, TIMEOUT);
    client
        .on_trigger(Trigger::RetryPaths, 4, OldControl::Shut, t0)
        .unwrap();
    client.on_resumed(t0);
    client
        .on_trigger(
            Trigger::Failed(lost(4)),
            4,
            OldControl::Shut,
            t0 + TIMEOUT * 2,
        )
        .expect("the first break that made none: the retry before it was no break");

    let mut server = Lifecycle::new(End::Server, TIMEOUT);
    let e = server
        .on_trigger(Trigger::RetryPaths, 0, OldControl::Shut, t0)
        .unwrap_err();
    assert!(matches!(e, Error::Internal(_)), "{e}");
}

#[test]
fn an_attempt_that_failed_after_tearing_down_a_running_session_leaves_it_parked() {
    let t0 = Instant::now();
    let mut life = Lifecycle::new(End::Server, TIMEOUT);
    life.on_trigger(Trigger::AttemptArrived, 5, OldControl::Shut, t0)
        .unwrap();
    assert!(life.on_attempt_taken(t0));
    assert_eq!(
        life.on_attempt_failed("the new path failed".into(), OldPath::TornDown, t0),
        AfterAttempt::KeepResuming
    );
    let LifeStep::Wait { .. } = step(&mut life, t0) else {
        panic!("parked");
    };
    let LifeStep::GiveUp(e) = step(&mut life, t0 + TIMEOUT) else {
        panic!("gives up at the timeout");
    };
    assert!(
        matches!(e, Error::PeerLost { messages: 5, .. }),
        "a failed client resume counts the role's progress: {e}"
    );
}

#[test]
fn no_such_session_ends_a_client_at_once_and_a_take_over_ends_a_parked_server() {
    let t0 = Instant::now();
    let mut client = Lifecycle::new(End::Client, TIMEOUT);
    client
        .on_trigger(Trigger::Failed(lost(2)), 2, OldControl::Shut, t0)
        .unwrap();
    let LifeStep::Reconnect { .. } = step(&mut client, t0) else {
        panic!("reconnects");
    };
    client.on_no_session(server());
    let LifeStep::GiveUp(e) = step(&mut client, t0) else {
        panic!("ends at once");
    };
    assert!(e.to_string().contains("has no session with our id"), "{e}");
    let mut parked = Lifecycle::new(End::Server, TIMEOUT);
    parked
        .on_trigger(Trigger::Failed(lost(9)), 9, OldControl::Left, t0)
        .unwrap();
    parked.on_taken_over(t0 + Duration::from_secs(2));
    let LifeStep::GiveUp(e) = step(&mut parked, t0 + Duration::from_secs(2)) else {
        panic!("ends at once");
    };
    assert!(
        matches!(e, Error::TakenOver { messages: 9, waited } if waited == 2.0),
        "{e}"
    );
}

#[test]
fn breaks_with_nothing_through_end_the_session_after_the_timeout_from_the_first() {
    let t0 = Instant::now();
    let mut life = Lifecycle::new(End::Client, TIMEOUT);
    let mut now = t0;
    for _ in 0..3 {
        life.on_trigger(Trigger::Failed(lost(4)), 4, OldControl::Shut, now)
            .unwrap();
        now += Duration::from_secs(3);
        life.on_resumed(now);
    }
    now += Duration::from_secs(1);
    let back = life.on_trigger(Trigger::Failed(lost(4)), 4, OldControl::Shut, now);
    let Err(e) = back else {
        panic!("the stall rule ends it");
    };
    assert!(
        e.to_string().contains("no message through since a resume"),
        "{e}"
    );
    let mut moving = Lifecycle::new(End::Client, TIMEOUT);
    for (i, at) in (0..6u64).map(|i| (i, t0 + Duration::from_secs(4 * i))) {
        moving
            .on_trigger(Trigger::Failed(lost(i)), i, OldControl::Shut, at)
            .unwrap();
        moving.on_resumed(at + Duration::from_secs(3));
    }
}

/// What happens to one attempt in the simulation.
#[derive(Debug, Clone, Copy)]
enum AttemptFate {
    Resumes,
    Fails,
    TimesOut,
    NoSession,
    TakenOver,
}

fn fate() -> impl Strategy<Value = AttemptFate> {
    prop_oneof![
        2 => Just(AttemptFate::Resumes),
        5 => Just(AttemptFate::Fails),
        2 => Just(AttemptFate::TimesOut),
        1 => Just(AttemptFate::NoSession),
        1 => Just(AttemptFate::TakenOver),
    ]
}

/// One break in the simulation: how many messages got through before it, how long after the
/// last resume it came, what the role lets a server do with its old control connection, and
/// its attempts' fates.
#[derive(Debug, Clone)]
struct Break {
    through: u64,
    after_ms: u64,
    old_control: OldControl,
    fates: Vec<AttemptFate>,
    path_error: bool,
}

fn a_break() -> impl Strategy<Value = Break> {
    (
        0u64..3,
        0u64..15_000,
        prop_oneof![Just(OldControl::Shut), Just(OldControl::Left)],
        prop::collection::vec(fate(), 0..12),
        any::<bool>(),
    )
        .prop_map(
            |(through, after_ms, old_control, fates, path_error)| Break {
                through,
                after_ms,
                old_control,
                fates,
                path_error,
            },
        )
}

/// How one simulated resume ended.
enum Ended {
    Resumed,
    GaveUp(Error),
}

/// The next step of a resume under way.
fn step(life: &mut Lifecycle, now: Instant) -> LifeStep {
    life.poll_step(now).expect("a resume under way")
}

/// Runs one resume to its end against `fates` (an attempt with no fate left fails), checking
/// every step's time; returns how it ended and when.
fn run_resume(
    life: &mut Lifecycle,
    end: End,
    fates: &[AttemptFate],
    started: Instant,
) -> (Ended, Instant) {
    let mut now = started;
    let mut fates = fates.iter().copied();
    for _ in 0..10_000 {
        let step = step(life, now);
        let fate = match step {
            LifeStep::GiveUp(e) => return (Ended::GaveUp(e), now),
            LifeStep::ShutControlWrite => {
                assert_eq!(end, End::Server, "only a server shuts");
                continue;
            }
            LifeStep::Wait { until } => {
                assert!(until >= now, "a wait never goes back in time");
                assert!(until <= started + TIMEOUT, "a wait past the resume timeout");
                if end == End::Client {
                    now = until;
                    continue;
                }
                // Server: an attempt comes half way, or none before `until`.
                match fates.next() {
                    Some(fate) => {
                        now += (until - now) / 2;
                        if !life.on_attempt_taken(now) {
                            continue;
                        }
                        fate
                    }
                    None => {
                        now = until;
                        continue;
                    }
                }
            }
            LifeStep::Reconnect { deadline } => {
                assert_eq!(end, End::Client, "only a client reconnects");
                assert!(
                    deadline <= started + TIMEOUT,
                    "an attempt past the resume timeout"
                );
                let fate = fates.next().unwrap_or(AttemptFate::Fails);
                if let AttemptFate::TimesOut = fate {
                    now = deadline;
                }
                fate
            }
        };
        match fate {
            AttemptFate::Resumes => {
                life.on_resumed(now);
                return (Ended::Resumed, now);
            }
            AttemptFate::Fails | AttemptFate::TimesOut => {
                now += Duration::from_millis(1);
                assert_eq!(
                    life.on_attempt_failed("failed".into(), OldPath::TornDown, now),
                    AfterAttempt::KeepResuming
                );
            }
            AttemptFate::NoSession if end == End::Client => life.on_no_session(server()),
            AttemptFate::TakenOver if end == End::Server => life.on_taken_over(now),
            AttemptFate::NoSession | AttemptFate::TakenOver => {
                life.on_attempt_failed("failed".into(), OldPath::TornDown, now);
            }
        }
    }
    panic!("a resume that never ended");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random breaks on either end: every resume ends within the resume timeout (plus the
    /// last attempt's millisecond), gives up with the break's kind, and the session stops
    /// once it gave up; the stall rule fires only when nothing got through for a timeout.
    #[test]
    fn every_resume_ends_in_time_and_gives_up_only_as_the_rules_say(
        breaks in prop::collection::vec(a_break(), 1..8),
    ) {
        let t0 = Instant::now();
        for end in [End::Client, End::Server] {
            let mut life = Lifecycle::new(end, TIMEOUT);
            let mut now = t0;
            let mut progress = 0u64;
            let mut stalled_since: Option<Instant> = None;
            for b in &breaks {
                now += Duration::from_millis(b.after_ms);
                progress += b.through;
                if b.through > 0 {
                    stalled_since = None;
                }
                let e = if b.path_error { flushed() } else { lost(progress) };
                let kind = e.kind();
                match life.on_trigger(Trigger::Failed(e), progress, b.old_control, now) {
                    Err(e) => {
                        let since = stalled_since.expect("the stall rule without a stall");
                        prop_assert!(now - since >= TIMEOUT, "stall rule fired early");
                        prop_assert_eq!(e.kind(), kind, "the stall keeps the break's kind");
                        if kind == ErrorKind::PeerLost {
                            prop_assert!(e.to_string().contains("no message through"), "{}", e);
                        }
                        break;
                    }
                    Ok(()) => {
                        let since = *stalled_since.get_or_insert(now);
                        prop_assert!(now - since < TIMEOUT, "a stall past the timeout resumed");
                    }
                }
                let (ended, at) = run_resume(&mut life, end, &b.fates, now);
                prop_assert!(at <= now + TIMEOUT + Duration::from_millis(1 + b.fates.len() as u64));
                now = at;
                match ended {
                    Ended::Resumed => prop_assert!(life.resuming_since().is_none()),
                    Ended::GaveUp(e) => {
                        prop_assert!(
                            e.kind() == kind || e.kind() == ErrorKind::TakenOver,
                            "gave up as {:?}: {}", e.kind(), e
                        );
                        break;
                    }
                }
            }
        }
    }

    /// A server session that only ever sees attempts that fail before their proof never
    /// leaves the running state, whatever their number.
    #[test]
    fn strangers_attempts_never_end_a_running_session(n in 1usize..50, gap_ms in 0u64..20_000) {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(End::Server, TIMEOUT);
        for i in 0..n {
            let now = t0 + Duration::from_millis(gap_ms * i as u64);
            life.on_trigger(Trigger::AttemptArrived, 3, OldControl::Shut, now).unwrap();
            let LifeStep::Wait { .. } = step(&mut life, now) else {
                panic!("a running session only waits for the attempt");
            };
            prop_assert!(life.on_attempt_taken(now));
            prop_assert_eq!(
                life.on_attempt_failed("no proof".into(), OldPath::Intact, now),
                AfterAttempt::CarryOn
            );
            prop_assert!(life.resuming_since().is_none());
        }
    }
}
