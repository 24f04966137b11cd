//! Which of a striped data path's paths are out of use (`--paths`; docs/design.md, "Several
//! paths"): a path whose lane failed is *parked* at the next resume, so the session goes on
//! over the others; the client resumes again to try it once its backoff has passed.
//!
//! Rules kept here (time is an argument):
//! - lane `i` runs on path `i % paths`; with one path nothing is ever parked;
//! - a lane that fails (an error from its poll, post, flush or connect; never a close, which is
//!   the end of the stream, unless the other lanes stayed quiet through its grace: see
//!   `LANE_CLOSE_GRACE` in `striped.rs`) marks its path *failed* until the next reset. A
//!   server whose client's resume attempt arrives while the session runs forgets those marks:
//!   its lanes' errors since are the client tearing down (what failed under the client, the
//!   client parks);
//! - at a reset (a resume's new data path) every failed path is parked, with a backoff of
//!   [`FIRST_BACKOFF`] that doubles each time the path is left out again (at most
//!   [`MAX_BACKOFF`]). Until a data path connects, a later reset (the resume's next attempt)
//!   parks it again. Paths are never all parked: when every path would be, none is (the
//!   resume then needs them all, as with one path), and nothing about them changes;
//! - a parked lane carries no message and its blob says it is parked; a lane the peer's blob
//!   says is parked is parked too, so both ends use the union of what each parked;
//! - the schedule is the client's ([`Retries::Schedules`]), whichever end parked the path:
//!   when a data path connects without a path, the client's backoff for it runs from then
//!   (doubled if the path was tried, or parked by the server, rather than still waiting), and
//!   [`Parking::retry_at`] says when the client should ask the paths then due whether they
//!   are back ([`Parking::due`]); those that do not answer wait again, for twice as long
//!   ([`Parking::postpone_retry`]), and an answer makes the client resume to try the path that
//!   answered ([`crate::session_core::lifecycle`], rule 8). Until then a reset for another reason
//!   leaves it out. The server ([`Retries::Follows`]) parks only what failed, so it never
//!   holds back a path the client tries;
//! - the counts follow the union, each time a data path connects: a path whose lanes are all
//!   parked and were not on the data path before is *lost*; one in use again is *rebuilt*.
//!   So a receiver, which sees its sender's failures only through the sender's marks, counts
//!   them too.

use std::time::{Duration, Instant};

/// A path's first backoff after it failed.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest backoff.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Which end keeps the schedule of trying paths again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retries {
    /// The client: it decides when a path left out is tried again, and resumes for it.
    Schedules,
    /// The server: it parks what failed and tries every path the client brings back.
    Follows,
}

/// What happened to the paths since last asked: for the session's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PathEvents {
    /// Paths left out of a connected data path that the one before used.
    pub(crate) lost: u32,
    /// Paths used again by a connected data path after being left out.
    pub(crate) rebuilt: u32,
}

/// Why this end leaves a path out of the data path being made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Hold {
    /// It does not: the path is tried.
    #[default]
    No,
    /// A lane of it failed on the data path before.
    Failed,
    /// Its backoff has not passed.
    Waiting,
}

#[derive(Debug, Clone, Copy, Default)]
struct PathState {
    failed: bool,
    /// Set at each reset.
    hold: Hold,
    /// Not before then is the path tried again.
    retry_at: Option<Instant>,
    /// The backoff last given (doubles each time).
    backoff: Option<Duration>,
    /// Left out (by either end) of the last data path that connected.
    out_when_connected: bool,
}

impl PathState {
    fn next_backoff(&self) -> Duration {
        self.backoff
            .map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF))
    }

    /// Failed at `now`: its next backoff starts (returned).
    fn leave_out(&mut self, now: Instant) -> Duration {
        let backoff = self.next_backoff();
        self.backoff = Some(backoff);
        self.retry_at = Some(now + backoff);
        backoff
    }
}

/// The parking state of a striped data path's paths and lanes.
#[derive(Debug, Clone)]
pub(crate) struct Parking {
    retries: Retries,
    paths: Vec<PathState>,
    /// Per lane: out of use on the current data path.
    parked: Vec<bool>,
    events: PathEvents,
}

impl Parking {
    /// `lanes` lanes over `paths` paths (at least one), none parked; `retries`: this end's
    /// part in trying them again.
    pub(crate) fn new(lanes: usize, paths: usize, retries: Retries) -> Self {
        Self {
            retries,
            paths: vec![PathState::default(); paths.max(1)],
            parked: vec![false; lanes],
            events: PathEvents::default(),
        }
    }

    /// How many paths.
    pub(crate) fn paths(&self) -> usize {
        self.paths.len()
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

    /// A new data path at `now`: parks the failed paths and (the client) those still waiting
    /// for their backoff, tries the others, and says which lanes are parked.
    pub(crate) fn on_reset(&mut self, now: Instant) {
        let schedules = self.retries == Retries::Schedules;
        for state in &mut self.paths {
            let waiting = state.retry_at.is_some_and(|at| now < at);
            state.hold = if std::mem::take(&mut state.failed) {
                Hold::Failed
            } else if waiting && (schedules || !state.out_when_connected) {
                // The server waits only between a failure and the next connect: after it, the
                // client decides.
                Hold::Waiting
            } else {
                Hold::No
            };
        }
        if self.paths.iter().all(|s| s.hold != Hold::No) {
            // No path would be left (or there is only one): every path is tried, and nothing
            // about them changes but that.
            if self.paths.len() > 1 {
                log::info!("every path failed or waits: all of them are tried");
            }
            for state in &mut self.paths {
                state.hold = Hold::No;
            }
        } else {
            for (p, state) in self.paths.iter_mut().enumerate() {
                match state.hold {
                    Hold::Failed => {
                        let backoff = state.leave_out(now);
                        log::warn!(
                            "path {p} failed: the session goes on over the other path(s) \
                             without it; it is tried again in {} s (the client resumes for it)",
                            backoff.as_secs()
                        );
                    }
                    Hold::No if state.out_when_connected => {
                        log::info!("path {p}: trying it again");
                    }
                    _ => {}
                }
            }
        }
        for lane in 0..self.parked.len() {
            self.parked[lane] = self.paths[self.path_of(lane)].hold != Hold::No;
        }
    }

    /// `lane` could not be set up again at the reset of `now` (its path's address or device
    /// is gone, say): whether the data path being made can go on without it. A lane already
    /// parked can; otherwise its path is parked now, as a failed one, unless that would park
    /// every path (or there is only one), when the reset fails as it would without paths.
    pub(crate) fn park_after_failed_reset(&mut self, lane: usize, now: Instant) -> bool {
        if self.is_parked(lane) {
            return true;
        }
        let path = self.path_of(lane);
        let others_in_use =
            (0..self.paths.len()).any(|p| p != path && self.paths[p].hold == Hold::No);
        if !others_in_use {
            return false;
        }
        let state = &mut self.paths[path];
        state.hold = Hold::Failed;
        let backoff = state.leave_out(now);
        log::warn!(
            "path {path} failed: its queue pair or connection could not be made again; the \
             session goes on over the other path(s) without it; it is tried again in {} s",
            backoff.as_secs()
        );
        for l in 0..self.parked.len() {
            if self.path_of(l) == path {
                self.parked[l] = true;
            }
        }
        true
    }

    /// The peer's blob says it parked `lane`: so do we (for this data path).
    pub(crate) fn peer_parked(&mut self, lane: usize) {
        if let Some(p) = self.parked.get_mut(lane) {
            *p = true;
        }
    }

    /// The data path connected at `now`: counts the paths it leaves out or takes back, and
    /// (the client) starts the backoff of each path left out.
    pub(crate) fn on_connected(&mut self, now: Instant) {
        for p in 0..self.paths.len() {
            let mut lanes = (0..self.parked.len()).filter(|&l| self.path_of(l) == p);
            let out = lanes.all(|l| self.parked[l]);
            let schedules = self.retries == Retries::Schedules;
            let state = &mut self.paths[p];
            match (state.out_when_connected, out) {
                (false, true) => {
                    self.events.lost += 1;
                    if state.hold == Hold::No {
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
            state.retry_at = match (out, state.hold) {
                (false, _) => None,
                // Still waiting: its schedule stands.
                (true, Hold::Waiting) if schedules => state.retry_at,
                (true, hold) if schedules => {
                    if hold == Hold::No {
                        // Tried and left out by the peer, or parked by the peer.
                        state.backoff = Some(state.next_backoff());
                    }
                    state.backoff.map(|b| now + b)
                }
                // The server's wait ends here: the client decides from now on.
                (true, _) => state.retry_at,
            };
        }
    }

    /// The client: when to resume to try a path the data path left out (`None`: every path
    /// is in use, or this end is the server).
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        if self.retries != Retries::Schedules {
            return None;
        }
        self.paths
            .iter()
            .filter(|s| s.out_when_connected)
            .filter_map(|s| s.retry_at)
            .min()
    }

    /// The paths the current data path left out.
    #[cfg(test)]
    pub(crate) fn left_out(&self) -> Vec<usize> {
        (0..self.paths.len())
            .filter(|&p| self.paths[p].out_when_connected)
            .collect()
    }

    /// A client's resume attempt arrived while the session ran: lane errors seen since the
    /// client began tearing its end down are that, not failed paths. Forgets them (what the
    /// client saw fail, it parks itself).
    pub(crate) fn forget_failures(&mut self) {
        for state in &mut self.paths {
            state.failed = false;
        }
    }

    /// The client: the paths left out whose retry is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> Vec<usize> {
        (0..self.paths.len())
            .filter(|&p| self.is_due(p, now))
            .collect()
    }

    fn is_due(&self, path: usize, now: Instant) -> bool {
        let state = &self.paths[path];
        self.retries == Retries::Schedules
            && state.out_when_connected
            && state.retry_at.is_some_and(|at| at <= now)
    }

    /// The client: the paths left out whose retry is due at `now`, but `answered`, did not
    /// answer (the session's probe): each waits again, for twice as long. So the resume an
    /// answer starts tries only the path that answered.
    pub(crate) fn postpone_retry(&mut self, now: Instant, answered: Option<usize>) {
        for p in 0..self.paths.len() {
            if self.is_due(p, now) && Some(p) != answered {
                let state = &mut self.paths[p];
                let backoff = state.next_backoff();
                log::info!(
                    "path {p}: no answer on it yet; asked again in {} s",
                    backoff.as_secs()
                );
                state.backoff = Some(backoff);
                state.retry_at = Some(now + backoff);
            }
        }
    }

    /// What happened since last asked.
    pub(crate) fn take_events(&mut self) -> PathEvents {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests;
