//! Which of a striped data path's paths are out of use (`--paths`; docs/design.md, "Several
//! paths"): a path whose lane failed is *parked* at the next resume, so the session goes on
//! over the others; it is tried again at a later resume once its backoff has passed.
//!
//! Rules kept here (time is an argument):
//! - lane `i` runs on path `i % paths`;
//! - a lane that fails (an error from its poll, post, flush or connect; never a close, which is
//!   the end of the stream) marks its path *failed* until the next reset;
//! - at a reset (a resume's new data path) every failed path is parked, with a backoff of
//!   [`FIRST_BACKOFF`] that doubles each time the path is parked again (at most
//!   [`MAX_BACKOFF`]); a parked path whose backoff has passed is tried again. Paths are never
//!   all parked: when every path would be, none is (the resume then needs them all, as with one
//!   path);
//! - a parked lane carries no message and its blob says it is parked; a lane the peer's blob
//!   says is parked is parked too, so both ends use the union of what each parked;
//! - a path tried again counts as rebuilt once its lanes connected; a path parked counts as
//!   lost (once per parking).

use std::time::{Duration, Instant};

/// A path's first backoff after it failed.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest backoff.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What happened to the paths since last asked: for the session's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PathEvents {
    /// Paths parked after one of their lanes failed.
    pub(crate) lost: u32,
    /// Parked paths whose lanes connected again.
    pub(crate) rebuilt: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct PathState {
    failed: bool,
    /// Parked since, until its backoff passes.
    parked_since: Option<Instant>,
    backoff: Option<Duration>,
    /// Tried again after being parked: counts as rebuilt once connected.
    retrying: bool,
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
        let mut next: Vec<PathState> = self.paths.clone();
        for (p, state) in next.iter_mut().enumerate() {
            if std::mem::take(&mut state.failed) {
                let backoff = state
                    .backoff
                    .map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
                if state.parked_since.is_none() {
                    log::warn!(
                        "path {p} failed: the session goes on over the other path(s) without it; \
                         it is tried again at a resume after {} s",
                        backoff.as_secs()
                    );
                }
                *state = PathState {
                    failed: false,
                    parked_since: Some(now),
                    backoff: Some(backoff),
                    retrying: false,
                };
            } else if let (Some(since), Some(backoff)) = (state.parked_since, state.backoff) {
                if now.saturating_duration_since(since) >= backoff {
                    log::info!("path {p}: trying it again (parked {} s)", backoff.as_secs());
                    state.parked_since = None;
                    state.retrying = true;
                }
            }
        }
        if next.iter().all(|s| s.parked_since.is_some()) {
            // No path left: the resume needs them all, as with one path.
            for state in &mut next {
                if state.parked_since.take().is_some() {
                    state.retrying = true;
                }
            }
        }
        for (old, new) in self.paths.iter().zip(&next) {
            if old.parked_since.is_none() && new.parked_since.is_some() {
                self.events.lost += 1;
            }
        }
        self.paths = next;
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

    /// The data path connected: a path tried again whose lanes are in use is rebuilt.
    pub(crate) fn on_connected(&mut self) {
        for p in 0..self.paths.len() {
            let in_use = (0..self.parked.len()).any(|l| self.path_of(l) == p && !self.parked[l]);
            if std::mem::take(&mut self.paths[p].retrying) && in_use {
                log::info!("path {p} is back: the session uses it again");
                self.events.rebuilt += 1;
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
    /// reset, and only then; it is counted lost once.
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
            PathEvents {
                lost: 1,
                rebuilt: 0
            }
        );
        p.on_reset(t0 + Duration::from_millis(10));
        assert_eq!(parked(&p), [false, true, false, true], "within its backoff");
        assert_eq!(p.take_events(), PathEvents::default());
    }

    /// After its backoff the path is tried again, and counts as rebuilt once connected; a new
    /// failure parks it for twice as long, up to the maximum.
    #[test]
    fn a_parked_path_is_tried_again_after_a_backoff_that_doubles() {
        let t0 = Instant::now();
        let mut p = Parking::new(2, 2);
        p.lane_failed(1);
        p.on_reset(t0);
        p.on_reset(t0 + FIRST_BACKOFF);
        assert_eq!(parked(&p), [false, false]);
        p.on_connected();
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

    /// Paths are never all parked; with one path nothing ever is.
    #[test]
    fn the_last_path_is_never_parked() {
        let t0 = Instant::now();
        let mut one = Parking::new(4, 1);
        one.lane_failed(2);
        one.on_reset(t0);
        assert_eq!(parked(&one), [false; 4]);
        assert_eq!(one.take_events(), PathEvents::default());
        let mut two = Parking::new(2, 2);
        two.lane_failed(0);
        two.lane_failed(1);
        two.on_reset(t0);
        assert_eq!(parked(&two), [false, false]);
        two.lane_failed(1);
        two.on_reset(t0);
        assert_eq!(parked(&two), [false, true]);
        two.lane_failed(0);
        two.on_reset(t0);
        assert_eq!(parked(&two), [false, false], "both failed: both tried");
    }

    /// What the peer parked is parked here too, for this data path only; a path tried again
    /// that the peer still parks is not rebuilt.
    #[test]
    fn the_peers_parked_lanes_join_ours() {
        let t0 = Instant::now();
        let mut p = Parking::new(4, 2);
        p.peer_parked(3);
        assert_eq!(parked(&p), [false, false, false, true]);
        p.lane_failed(1);
        p.on_reset(t0);
        p.on_reset(t0 + FIRST_BACKOFF);
        p.peer_parked(1);
        p.peer_parked(3);
        p.on_connected();
        assert_eq!(
            p.take_events(),
            PathEvents {
                lost: 1,
                rebuilt: 0
            }
        );
        p.on_reset(t0 + FIRST_BACKOFF * 2);
        assert_eq!(
            parked(&p),
            [false; 4],
            "the peer's parking lasts one data path"
        );
    }
}
