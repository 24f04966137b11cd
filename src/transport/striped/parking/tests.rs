//! Parking's rules as examples, then a property test of both ends together.

use proptest::prelude::*;

use super::*;

fn parked(p: &Parking) -> Vec<bool> {
    (0..p.parked.len()).map(|l| p.is_parked(l)).collect()
}

/// The peer's blob parks `lanes`.
fn peer_parks(p: &mut Parking, lanes: &[usize]) {
    for &lane in lanes {
        p.peer_parked(lane);
    }
}

/// Four lanes over two paths: a failure on lane 1 parks path 1 (lanes 1 and 3) at the next
/// reset, and only then; it is counted lost once, when the data path connects.
#[test]
fn a_failed_lane_parks_its_path_at_the_next_reset() {
    let t0 = Instant::now();
    let mut p = Parking::new(4, 2, Retries::Schedules);
    p.lane_failed(1);
    assert_eq!(parked(&p), [false; 4], "nothing changes before the reset");
    p.on_reset(t0);
    assert_eq!(parked(&p), [false, true, false, true]);
    assert_eq!(p.in_use().collect::<Vec<_>>(), [0, 2]);
    assert_eq!(
        p.take_events(),
        PathEvents::default(),
        "not before it connects"
    );
    p.on_connected(t0);
    assert_eq!(
        p.take_events(),
        PathEvents {
            lost: 1,
            rebuilt: 0
        }
    );
    p.on_reset(t0 + Duration::from_millis(10));
    p.on_connected(t0 + Duration::from_millis(10));
    assert_eq!(parked(&p), [false, true, false, true], "within its backoff");
    assert_eq!(p.take_events(), PathEvents::default());
}

/// After its backoff (from when the data path without it connected) the path is tried
/// again, and counts as rebuilt once connected; a new failure parks it for twice as long,
/// up to the maximum.
#[test]
fn a_parked_path_is_tried_again_after_a_backoff_that_doubles() {
    let t0 = Instant::now();
    let mut p = Parking::new(2, 2, Retries::Schedules);
    p.lane_failed(1);
    p.on_reset(t0);
    let connected = t0 + Duration::from_millis(500);
    p.on_connected(connected);
    p.on_reset(t0 + FIRST_BACKOFF);
    assert_eq!(
        parked(&p),
        [false, true],
        "the backoff runs from the connect"
    );
    p.on_reset(connected + FIRST_BACKOFF);
    assert_eq!(parked(&p), [false, false]);
    p.on_connected(connected + FIRST_BACKOFF);
    assert_eq!(
        p.take_events(),
        PathEvents {
            lost: 1,
            rebuilt: 1
        }
    );
    p.lane_failed(1);
    let t1 = t0 + Duration::from_secs(5);
    p.on_reset(t1);
    p.on_connected(t1);
    p.on_reset(t1 + FIRST_BACKOFF);
    assert_eq!(
        parked(&p),
        [false, true],
        "the second backoff is twice the first"
    );
    p.on_reset(t1 + FIRST_BACKOFF * 2);
    assert_eq!(parked(&p), [false, false]);
    for _ in 0..10 {
        p.lane_failed(1);
        p.on_reset(t1);
    }
    assert_eq!(p.paths[1].backoff, Some(MAX_BACKOFF));
}

/// Paths are never all parked, and then nothing about them changes; with one path nothing
/// ever is, and nothing is counted.
#[test]
fn the_last_path_is_never_parked_and_nothing_is_counted_then() {
    let t0 = Instant::now();
    let mut one = Parking::new(4, 1, Retries::Schedules);
    one.lane_failed(2);
    one.on_reset(t0);
    one.on_connected(t0);
    assert_eq!(parked(&one), [false; 4]);
    assert_eq!(one.take_events(), PathEvents::default());
    assert_eq!(one.paths[0].backoff, None);
    let mut two = Parking::new(2, 2, Retries::Schedules);
    two.lane_failed(0);
    two.lane_failed(1);
    two.on_reset(t0);
    two.on_connected(t0);
    assert_eq!(parked(&two), [false, false]);
    assert_eq!(two.take_events(), PathEvents::default());
    two.lane_failed(1);
    two.on_reset(t0);
    two.on_connected(t0);
    assert_eq!(parked(&two), [false, true]);
    two.lane_failed(0);
    two.on_reset(t0);
    two.on_connected(t0);
    assert_eq!(parked(&two), [false, false], "both failed: both tried");
    assert_eq!(
        two.take_events(),
        PathEvents {
            lost: 1,
            rebuilt: 1
        }
    );
    assert_eq!(two.paths[0].backoff, None, "path 0 was never parked");
}

/// What the peer parked is parked here too, and counted here as well (a receiver sees its
/// sender's failures only so); the server follows the client, so for it that lasts one
/// data path.
#[test]
fn the_peers_parked_lanes_join_ours_and_count() {
    let t0 = Instant::now();
    let mut p = Parking::new(4, 2, Retries::Follows);
    p.on_reset(t0);
    peer_parks(&mut p, &[1, 3]);
    assert_eq!(parked(&p), [false, true, false, true]);
    p.on_connected(t0);
    assert_eq!(
        p.take_events(),
        PathEvents {
            lost: 1,
            rebuilt: 0
        }
    );
    p.on_reset(t0);
    assert_eq!(
        parked(&p),
        [false; 4],
        "the peer's parking lasts one data path"
    );
    p.on_connected(t0);
    assert_eq!(
        p.take_events(),
        PathEvents {
            lost: 0,
            rebuilt: 1
        }
    );
}

/// The client says when to resume for a path left out: its backoff from the connect that
/// left it out; nothing once it is back, nothing ever on the server.
#[test]
fn the_client_is_told_when_to_resume_for_a_path_left_out() {
    let t0 = Instant::now();
    let connected = t0 + Duration::from_millis(300);
    for retries in [Retries::Schedules, Retries::Follows] {
        let mut p = Parking::new(2, 2, retries);
        p.on_reset(t0);
        p.on_connected(t0);
        assert_eq!(p.retry_at(), None, "{retries:?}: every path in use");
        p.lane_failed(1);
        p.on_reset(t0);
        assert_eq!(p.retry_at(), None, "{retries:?}: not before it connects");
        p.on_connected(connected);
        let expected = (retries == Retries::Schedules).then_some(connected + FIRST_BACKOFF);
        assert_eq!(p.retry_at(), expected, "{retries:?}");
    }
    let mut p = Parking::new(2, 2, Retries::Schedules);
    p.lane_failed(1);
    p.on_reset(t0);
    p.on_connected(t0);
    p.on_reset(t0 + FIRST_BACKOFF);
    p.on_connected(t0 + FIRST_BACKOFF);
    assert_eq!(p.retry_at(), None, "back in use");
}

/// A path the server parked is the client's to schedule: left out from the connect,
/// tried once its backoff passed, and when the server leaves it out again (it failed
/// again) the client's backoff doubles.
#[test]
fn the_client_schedules_a_path_the_server_parked() {
    let t0 = Instant::now();
    let mut p = Parking::new(4, 2, Retries::Schedules);
    p.on_reset(t0);
    peer_parks(&mut p, &[1, 3]);
    p.on_connected(t0);
    assert_eq!(p.retry_at(), Some(t0 + FIRST_BACKOFF));
    p.on_reset(t0 + FIRST_BACKOFF / 2);
    assert_eq!(
        parked(&p),
        [false, true, false, true],
        "a resume for another reason"
    );
    p.on_connected(t0 + FIRST_BACKOFF / 2);
    assert_eq!(
        p.retry_at(),
        Some(t0 + FIRST_BACKOFF),
        "still waiting: unchanged"
    );
    let t1 = t0 + FIRST_BACKOFF;
    p.on_reset(t1);
    assert_eq!(parked(&p), [false; 4], "due: tried");
    peer_parks(&mut p, &[1, 3]);
    p.on_connected(t1);
    assert_eq!(p.retry_at(), Some(t1 + FIRST_BACKOFF * 2));
    assert_eq!(
        p.take_events(),
        PathEvents {
            lost: 1,
            rebuilt: 0
        }
    );
}

/// The server parks what failed for the whole resume (every attempt until one connects),
/// and after that never holds a path back: a resume the client starts tries it.
#[test]
fn the_server_parks_a_failed_path_until_it_connects_then_follows_the_client() {
    let t0 = Instant::now();
    let mut p = Parking::new(2, 2, Retries::Follows);
    p.lane_failed(1);
    p.on_reset(t0);
    assert_eq!(parked(&p), [false, true]);
    p.on_reset(t0 + Duration::from_millis(100));
    assert_eq!(parked(&p), [false, true], "the resume's second attempt");
    p.on_connected(t0 + Duration::from_millis(100));
    p.on_reset(t0 + Duration::from_millis(200));
    assert_eq!(parked(&p), [false, false], "the client resumed: tried");
}

/// Of the paths due, the ones that do not answer their probe wait again, for twice as long;
/// the resume an answer starts tries only the path that answered; a server whose client's
/// attempt arrived forgets the lane errors it saw meanwhile.
#[test]
fn only_the_path_that_answered_is_tried_and_the_silent_ones_wait_longer() {
    let t0 = Instant::now();
    let mut p = Parking::new(3, 3, Retries::Schedules);
    p.lane_failed(1);
    p.lane_failed(2);
    p.on_reset(t0);
    p.on_connected(t0);
    let due = t0 + FIRST_BACKOFF;
    assert_eq!(p.due(t0), Vec::<usize>::new());
    assert_eq!(p.due(due), [1, 2]);
    p.postpone_retry(due, Some(2));
    assert_eq!(p.due(due), [2], "path 1 was silent: it waits again");
    assert_eq!(p.paths[1].retry_at, Some(due + FIRST_BACKOFF * 2));
    p.on_reset(due);
    assert_eq!(parked(&p), [false, true, false], "only path 2 is tried");

    let mut server = Parking::new(2, 2, Retries::Follows);
    server.lane_failed(0);
    server.forget_failures();
    server.on_reset(t0);
    assert_eq!(parked(&server), [false, false]);
}

/// What happens to a two-ended session in the property test.
#[derive(Debug, Clone)]
enum Step {
    /// A lane fails on the client (`true`) or the server.
    Fail { client: bool, lane: usize },
    /// Time passes.
    Wait(Duration),
    /// A break: the two ends resume (attempts until one connects).
    Break,
    /// The client resumes if a path's retry is due (it answered its probe).
    RetryIfDue,
}

fn step(lanes: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<bool>(), 0..lanes).prop_map(|(client, lane)| Step::Fail { client, lane }),
        (0u64..70_000).prop_map(|ms| Step::Wait(Duration::from_millis(ms))),
        Just(Step::Break),
        Just(Step::RetryIfDue),
    ]
}

/// Both ends at a reset, then their blobs exchanged: `Some(parked lanes)` when the data path
/// connects (the union leaves a lane in use), `None` when the connect is refused.
fn attempt(client: &mut Parking, server: &mut Parking, now: Instant) -> Option<Vec<bool>> {
    client.on_reset(now);
    server.on_reset(now);
    let (ours, theirs) = (parked(client), parked(server));
    for (lane, (&c, &s)) in ours.iter().zip(&theirs).enumerate() {
        if c {
            server.peer_parked(lane);
        }
        if s {
            client.peer_parked(lane);
        }
    }
    // A union that leaves every lane out is refused.
    client.in_use().next()?;
    client.on_connected(now);
    server.on_connected(now);
    Some(parked(client))
}

/// A resume: attempts 50 ms apart until one connects; how many it took.
fn resume(
    client: &mut Parking,
    server: &mut Parking,
    now: &mut Instant,
) -> Result<u32, TestCaseError> {
    for tries in 1..=400 {
        if let Some(lanes) = attempt(client, server, *now) {
            prop_assert_eq!(&lanes, &parked(server), "both ends run the same lanes");
            return Ok(tries);
        }
        *now += Duration::from_millis(50);
    }
    Err(TestCaseError::fail("no attempt connected within 20 s"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random lane failures on either end, breaks, retries and time: at every connect both
    /// ends run the same lanes and never leave every path out; a resume connects within the
    /// longest backoff (20 s here, less than that plus the attempts); both ends count the same
    /// losses and rebuilds; the client has a retry time exactly when a path is out, never
    /// beyond the longest backoff; and once failures stop, the client's retries take every
    /// path back.
    #[test]
    fn both_ends_agree_never_park_everything_and_take_every_path_back(
        paths in 2usize..4,
        extra_lanes in 0usize..4,
        steps in proptest::collection::vec(step(8), 0..60),
    ) {
        let lanes = paths + extra_lanes;
        let mut client = Parking::new(lanes, paths, Retries::Schedules);
        let mut server = Parking::new(lanes, paths, Retries::Follows);
        let mut now = Instant::now();
        resume(&mut client, &mut server, &mut now)?;
        let mut events = (PathEvents::default(), PathEvents::default());
        let mut check = |client: &mut Parking, server: &mut Parking, now: Instant| {
            let (c, s) = (client.take_events(), server.take_events());
            events.0.lost += c.lost;
            events.0.rebuilt += c.rebuilt;
            events.1.lost += s.lost;
            events.1.rebuilt += s.rebuilt;
            let out = !client.left_out().is_empty();
            prop_assert_eq!(client.retry_at().is_some(), out, "a retry time when a path is out");
            if let Some(at) = client.retry_at() {
                prop_assert!(at <= now + MAX_BACKOFF, "retry within the longest backoff");
            }
            prop_assert_eq!(server.retry_at(), None, "the server never schedules");
            prop_assert_eq!(client.left_out(), server.left_out());
            Ok(())
        };
        for step in steps {
            match step {
                Step::Fail { client: on_client, lane } => {
                    let end = if on_client { &mut client } else { &mut server };
                    if lane < lanes && !end.is_parked(lane) {
                        end.lane_failed(lane);
                    }
                }
                Step::Wait(d) => now += d,
                Step::Break => {
                    resume(&mut client, &mut server, &mut now)?;
                    check(&mut client, &mut server, now)?;
                }
                Step::RetryIfDue => {
                    if client.retry_at().is_some_and(|at| at <= now) {
                        resume(&mut client, &mut server, &mut now)?;
                        check(&mut client, &mut server, now)?;
                    }
                }
            }
        }
        // No more failures: a pending failure ends in one more resume; then each retry the
        // client makes when due brings paths back, until every path is in use.
        resume(&mut client, &mut server, &mut now)?;
        check(&mut client, &mut server, now)?;
        for _ in 0..paths {
            let Some(at) = client.retry_at() else { break };
            now = now.max(at);
            resume(&mut client, &mut server, &mut now)?;
            check(&mut client, &mut server, now)?;
        }
        prop_assert!(client.left_out().is_empty(), "every path back: {:?}", client.left_out());
        prop_assert_eq!(events.0, events.1, "both ends count the same");
        prop_assert_eq!(events.0.lost, events.0.rebuilt, "every loss was rebuilt");
    }
}

/// A lane that cannot be made again at a reset parks its path at that same reset, as a
/// failed one (counted lost when the data path connects, tried again after its backoff),
/// unless no other path would be left: then the reset has to fail.
#[test]
fn a_lane_that_cannot_be_made_again_parks_its_path_at_that_reset_if_another_is_left() {
    let t0 = Instant::now();
    let mut p = Parking::new(4, 2, Retries::Follows);
    p.on_reset(t0);
    assert!(p.park_after_failed_reset(3, t0));
    assert_eq!(parked(&p), [false, true, false, true]);
    assert!(p.park_after_failed_reset(1, t0), "already parked");
    assert!(
        !p.park_after_failed_reset(0, t0),
        "path 1 is out: path 0 must stay"
    );
    assert_eq!(parked(&p), [false, true, false, true]);
    p.on_connected(t0);
    assert_eq!(
        p.take_events(),
        PathEvents {
            lost: 1,
            rebuilt: 0
        }
    );

    let mut alone = Parking::new(2, 1, Retries::Schedules);
    alone.on_reset(t0);
    assert!(
        !alone.park_after_failed_reset(1, t0),
        "one path: nothing to go on over"
    );
    assert_eq!(parked(&alone), [false, false]);

    // The client's schedule for it runs from the connect.
    let mut c = Parking::new(2, 2, Retries::Schedules);
    c.on_reset(t0);
    assert!(c.park_after_failed_reset(1, t0));
    c.on_connected(t0);
    assert_eq!(c.retry_at(), Some(t0 + FIRST_BACKOFF));
    c.on_reset(t0 + FIRST_BACKOFF);
    assert_eq!(parked(&c), [false, false], "tried again after its backoff");
}
