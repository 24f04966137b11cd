//! Which of a striped data path's paths are out of use (`--paths`; docs/design.md, "Several
//! paths"): a path whose lane failed is *parked* at the next resume, so the session goes on
//! over the others; it is tried again at a later resume once its backoff has passed.
//!
//! Rules kept here (time is an argument):
//! - lane `i` runs on path `i % paths`; with one path nothing is ever parked;
//! - a lane that fails (an error from its poll, post, flush or connect; never a close, which is
//!   the end of the stream) marks its path *failed* until the next reset;
//! - at a reset (a resume's new data path) every failed path is parked, with a backoff of
//!   [`FIRST_BACKOFF`] that doubles each time the path is parked again (at most
//!   [`MAX_BACKOFF`]), counted from when the data path without it connected; a parked path
//!   whose backoff has passed is tried again. Paths are never all parked: when every path
//!   would be, none is (the resume then needs them all, as with one path), and nothing about
//!   them changes;
//! - a parked lane carries no message and its blob says it is parked; a lane the peer's blob
//!   says is parked is parked too, so both ends use the union of what each parked;
//! - the counts follow the union, each time a data path connects: a path whose lanes are all
//!   parked and were not on the data path before is *lost*; one in use again is *rebuilt*.
//!   So a receiver, which sees its sender's failures only through the sender's marks, counts
//!   them too.

use std::time::{Duration, Instant};

/// A path's first backoff after it failed.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest backoff.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What happened to the paths since last asked: for the session's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PathEvents {
    /// Paths left out of a connected data path that the one before used.
    pub(crate) lost: u32,
    /// Paths used again by a connected data path after being left out.
    pub(crate) rebuilt: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct PathState {
    failed: bool,
    /// Parked by this end since (the data path without it connected), until its backoff
    /// passes.
    parked_since: Option<Instant>,
    backoff: Option<Duration>,
    /// Left out (by either end) of the last data path that connected.
    out_when_connected: bool,
}

/// The parking state of a striped data path's paths and lanes.
#[derive(Debug, Clone)]
pub(crate) struct Parking {
    paths: Vec<PathState>,
    /// Per lane: out of use on the current data path.
    parked: Vec<bool>,
    events: PathEvents,
}

impl Parking {
    /// `lanes` lanes over `paths` paths (at least one), none parked.
    pub(crate) fn new(lanes: usize, paths: usize) -> Self {
        Self {
            paths: vec![PathState::default(); paths.max(1)],
            parked: vec![false; lanes],
            events: PathEvents::default(),
        }
    }

    /// The path lane `lane` runs on.
    pub(crate) fn path_of(&self, lane: usize) -> usize {
        lane % self.paths.len()
    }

    /// Whether `lane` is out of use on the current data path.
    pub(crate) fn is_parked(&self, lane: usize) -> bool {
        self.parked.get(lane).copied().unwrap_or(false)
    }

    /// Whether some lane is out of use on the current data path.
    pub(crate) fn any_parked(&self) -> bool {
        self.parked.iter().any(|&p| p)
    }

    /// The lanes in use.
    pub(crate) fn in_use(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.parked.len()).filter(|&l| !self.parked[l])
    }

    /// `lane` failed: its path is parked at the next reset.
    pub(crate) fn lane_failed(&mut self, lane: usize) {
        let path = self.path_of(lane);
        self.paths[path].failed = true;
    }

    /// A new data path at `now`: parks the failed paths, tries again those whose backoff has
    /// passed, and says which lanes are parked.
    pub(crate) fn on_reset(&mut self, now: Instant) {
        let failed: Vec<bool> = self
            .paths
            .iter_mut()
            .map(|s| std::mem::take(&mut s.failed))
            .collect();
        let waiting = |s: &PathState| match (s.parked_since, s.backoff) {
            (Some(since), Some(backoff)) => now.saturating_duration_since(since) < backoff,
            _ => false,
        };
        let parked: Vec<bool> = self
            .paths
            .iter()
            .zip(&failed)
            .map(|(s, &failed)| failed || waiting(s))
            .collect();
        if parked.iter().all(|&p| p) {
            // No path would be left (or there is only one): every path is tried, and nothing
            // about them changes but that.
            if self.paths.len() > 1 {
                log::info!("every path failed or waits: all of them are tried");
            }
            for state in &mut self.paths {
                state.parked_since = None;
            }
        } else {
            for (p, (state, &failed)) in self.paths.iter_mut().zip(&failed).enumerate() {
                if failed {
                    let backoff = state
                        .backoff
                        .map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
                    log::warn!(
                        "path {p} failed: the session goes on over the other path(s) without it; \
                         it is tried again at a resume after {} s",
                        backoff.as_secs()
                    );
                    state.parked_since = Some(now);
                    state.backoff = Some(backoff);
                } else if state.parked_since.is_some() && !parked[p] {
                    log::info!("path {p}: trying it again");
                    state.parked_since = None;
                }
            }
        }
        for lane in 0..self.parked.len() {
            self.parked[lane] = self.paths[self.path_of(lane)].parked_since.is_some();
        }
    }

    /// The peer's blob says it parked `lane`: so do we (for this data path).
    pub(crate) fn peer_parked(&mut self, lane: usize) {
        if let Some(p) = self.parked.get_mut(lane) {
            *p = true;
        }
    }

    /// The data path connected at `now`: counts the paths it leaves out or takes back, and
    /// starts the backoff of those this end parked.
    pub(crate) fn on_connected(&mut self, now: Instant) {
        for p in 0..self.paths.len() {
            let mut lanes = (0..self.parked.len()).filter(|&l| self.path_of(l) == p);
            let out = lanes.all(|l| self.parked[l]);
            let state = &mut self.paths[p];
            match (state.out_when_connected, out) {
                (false, true) => {
                    self.events.lost += 1;
                    if state.parked_since.is_none() {
                        log::warn!("path {p}: the peer left it out of the resumed data path");
                    }
                }
                (true, false) => {
                    self.events.rebuilt += 1;
                    log::info!("path {p} is back: the session uses it again");
                }
                _ => {}
            }
            state.out_when_connected = out;
            if state.parked_since.is_some() {
                state.parked_since = Some(now);
            }
        }
    }

    /// What happened since last asked.
    pub(crate) fn take_events(&mut self) -> PathEvents {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked(p: &Parking) -> Vec<bool> {
        (0..p.parked.len()).map(|l| p.is_parked(l)).collect()
    }

    /// Four lanes over two paths: a failure on lane 1 parks path 1 (lanes 1 and 3) at the next
    /// reset, and only then; it is counted lost once, when the data path connects.
    #[test]
    fn a_failed_lane_parks_its_path_at_the_next_reset() {
        let t0 = Instant::now();
        let mut p = Parking::new(4, 2);
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
        let mut p = Parking::new(2, 2);
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
        let mut one = Parking::new(4, 1);
        one.lane_failed(2);
        one.on_reset(t0);
        one.on_connected(t0);
        assert_eq!(parked(&one), [false; 4]);
        assert_eq!(one.take_events(), PathEvents::default());
        assert_eq!(one.paths[0].backoff, None);
        let mut two = Parking::new(2, 2);
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

    /// What the peer parked is parked here too, for this data path only, and counted here as
    /// well (a receiver sees its sender's failures only so).
    #[test]
    fn the_peers_parked_lanes_join_ours_and_count() {
        let t0 = Instant::now();
        let mut p = Parking::new(4, 2);
        p.on_reset(t0);
        p.peer_parked(1);
        p.peer_parked(3);
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
}
