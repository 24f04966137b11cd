//! One ordered message stream over several paths: the rules, without I/O (issue 39's core;
//! docs/design.md, "Several paths"). `--qps N`'s striped data path
//! ([`crate::transport::striped`]) uses the [`ReorderWindow`]; the [`Striper`]'s path loss
//! and re-entry are not wired yet (a lost lane still fails the whole data path, which then
//! resumes). This module is the part of `--qps N` / `--paths` that decides things, so that
//! the wiring only carries out its actions.
//!
//! Rules kept here:
//! - a session has up to [`MAX_PATHS`] paths, numbered from 0. A path is an RC queue pair (or a
//!   tcp connection): it delivers its own messages whole and in the order they were posted, or
//!   breaks. A path is *up* or *down*;
//! - messages keep the session's numbers (0, 1, 2, ... in the order the sender took them). The
//!   sender puts each message on one up path, never split: the path with the fewest messages in
//!   flight, the lowest path number among equals, so equal paths take turns
//!   ([`Striper::assign`]);
//! - credits stay one pool per session: a message is *in flight* from its send until the
//!   receiver released it (the existing credit rule), whatever its path. At most `credits`
//!   messages are unreleased, so the receiver's reorder window needs no slot beyond its
//!   receive slots;
//! - on a session with several paths each message carries its number on the data path, as 32
//!   bits (the striped data path's lane header). The receiver recovers the whole number from
//!   the 32 bits: it is the one number in its window (`next` up to `next + credits`) with
//!   those low bits ([`ReorderWindow::number_of`]), which is unambiguous because credits are far fewer
//!   than 2^32 (at most [`MAX_CREDITS`](crate::config::MAX_CREDITS));
//! - the receiver delivers strictly in order: a message that arrives ahead of the next one waits
//!   in the window ([`ReorderWindow`]). A number behind the next one, one already waiting, or
//!   one at or beyond `released + credits` (the credit rule: the sender exceeded its window) is
//!   a protocol violation and ends the session;
//! - a release never covers a message that did not arrive: the sender refuses a release count
//!   beyond what it sent, or one that covers a message it moved from a lost path;
//! - a path that breaks is torn down first, so nothing more arrives on it. Then the receiver
//!   says how many messages arrived on it since it came up. Those are its oldest, because a
//!   path delivers in order. The sender checks the count against what it sent on that path,
//!   and moves every other message it sent there (not arrived) to the surviving paths. They
//!   go out in number order, before any new message, each exactly once ([`Striper::path_lost`]).
//!   A message that arrived is never sent again;
//! - a path that comes back starts empty, with its counts at zero, and takes new messages and
//!   moved ones like any other ([`Striper::path_up`], [`ReorderWindow::path_up`]);
//! - with no path up, the sender holds everything until one comes back; whether it comes back
//!   in time is the session's resume timeout ([`super::lifecycle`]).

// The Striper is not called yet (see above): only its tests do.
#![cfg_attr(not(test), allow(dead_code))]

use std::collections::{BTreeSet, VecDeque};

use crate::ProtocolViolation;

/// The most paths a session may have.
pub(crate) const MAX_PATHS: usize = crate::config::MAX_QPS as usize;

/// A path's number within its session.
pub(crate) type PathId = usize;

/// One path as the sender sees it.
#[derive(Debug, Clone, Default)]
struct SenderPath {
    up: bool,
    /// Messages sent on the path since it came up, oldest first, with their place on it
    /// (0 for its first): released ones are dropped from here as credits come.
    in_flight: VecDeque<(u64, u64)>,
    /// How many messages the path carried since it came up.
    sent: u64,
}

/// The sender's side: which path each message takes, and what moves when a path is lost.
#[derive(Debug, Clone)]
pub(crate) struct Striper {
    paths: Vec<SenderPath>,
    /// Messages taken from lost paths, to be sent again before any new message.
    moved: BTreeSet<u64>,
    /// Every message below this was released by the receiver.
    released: u64,
    /// One past the highest number sent.
    sent_to: u64,
}

/// Where a message goes, from [`Striper::next_send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The message's number.
    pub(crate) number: u64,
    /// The path to post it on.
    pub(crate) path: PathId,
}

impl Striper {
    /// A session with `paths` paths (1 to [`MAX_PATHS`]), all up.
    pub(crate) fn new(paths: usize) -> Self {
        let paths = paths.clamp(1, MAX_PATHS);
        Self {
            paths: (0..paths)
                .map(|_| SenderPath {
                    up: true,
                    ..SenderPath::default()
                })
                .collect(),
            moved: BTreeSet::new(),
            released: 0,
            sent_to: 0,
        }
    }

    /// The up path that takes the next message: the fewest in flight, then the lowest number.
    /// `None` when no path is up.
    pub(crate) fn assign(&self) -> Option<PathId> {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.up)
            .min_by_key(|(i, p)| (p.in_flight.len(), *i))
            .map(|(i, _)| i)
    }

    /// Whether a message moved from a lost path waits to be sent again (it goes before any new
    /// message).
    pub(crate) fn has_moved(&self) -> bool {
        !self.moved.is_empty()
    }

    /// The next send: the oldest moved message if any, else `new` (the number the sender's
    /// window gives the next message it takes, if it may take one), on the path
    /// [`Striper::assign`] picks; recorded as in flight there. `None` when nothing is to be
    /// sent or no path is up.
    pub(crate) fn next_send(&mut self, new: Option<u64>) -> Option<Placement> {
        let path = self.assign()?;
        let number = match self.moved.pop_first() {
            Some(moved) => moved,
            None => new?,
        };
        let p = &mut self.paths[path];
        p.in_flight.push_back((number, p.sent));
        p.sent += 1;
        self.sent_to = self.sent_to.max(number + 1);
        Some(Placement { number, path })
    }

    /// The receiver released every message below `released` (a count that goes back is the
    /// credit rule's to refuse; here it changes nothing): they leave every path's flight.
    ///
    /// # Errors
    /// [`ProtocolViolation::CreditInvented`] beyond what was sent;
    /// [`ProtocolViolation::ReleasedNotArrived`] when it covers a message moved from a lost
    /// path (its path's count said it had not arrived).
    pub(crate) fn on_released(&mut self, released: u64) -> Result<(), ProtocolViolation> {
        if released <= self.released {
            return Ok(());
        }
        if released > self.sent_to {
            return Err(ProtocolViolation::CreditInvented {
                released,
                sent: self.sent_to,
            });
        }
        if let Some(&number) = self.moved.first().filter(|&&n| n < released) {
            return Err(ProtocolViolation::ReleasedNotArrived { number });
        }
        self.released = released;
        for p in &mut self.paths {
            p.in_flight.retain(|&(n, _)| n >= released);
        }
        Ok(())
    }

    /// `path` broke and was torn down; the receiver says `arrived` messages arrived on it
    /// since it came up. The rest of its messages move to the surviving paths. The path is down
    /// until [`Striper::path_up`].
    ///
    /// # Errors
    /// [`ProtocolViolation::PathArrivedPastSent`] when `arrived` is more than the path carried.
    pub(crate) fn path_lost(
        &mut self,
        path: PathId,
        arrived: u64,
    ) -> Result<(), ProtocolViolation> {
        let Some(p) = self.paths.get_mut(path) else {
            return Err(ProtocolViolation::NoSuchPath { path });
        };
        if arrived > p.sent {
            return Err(ProtocolViolation::PathArrivedPastSent {
                path,
                arrived,
                sent: p.sent,
            });
        }
        p.up = false;
        for (number, place) in std::mem::take(&mut p.in_flight) {
            if place >= arrived {
                self.moved.insert(number);
            }
        }
        Ok(())
    }

    /// `path` is up again (rebuilt), empty: it takes messages from now on. A path that is up
    /// stays as it is (its messages in flight are not forgotten).
    pub(crate) fn path_up(&mut self, path: PathId) {
        if let Some(p) = self.paths.get_mut(path).filter(|p| !p.up) {
            *p = SenderPath {
                up: true,
                ..SenderPath::default()
            };
        }
    }

    /// Messages in flight on `path` (for the per-path figures).
    pub(crate) fn in_flight(&self, path: PathId) -> usize {
        self.paths.get(path).map_or(0, |p| p.in_flight.len())
    }

    /// How many paths are up.
    pub(crate) fn paths_up(&self) -> usize {
        self.paths.iter().filter(|p| p.up).count()
    }
}

/// The receiver's side: messages that arrived ahead of their turn wait here, and each path's
/// arrivals are counted for the report a lost path needs. `T` is what holds a message (a slot
/// token).
#[derive(Debug)]
pub(crate) struct ReorderWindow<T> {
    /// The next number to deliver.
    next: u64,
    /// Every message below this was released by the application (at most `next`).
    released: u64,
    /// Slot `n % credits` holds message `n` while it waits.
    waiting: Vec<Option<T>>,
    /// Arrivals on each path since it came up; `None` while the path is down.
    arrived_on: Vec<Option<u64>>,
}

impl<T> ReorderWindow<T> {
    /// A window of `credits` messages (the receive slots) over `paths` paths.
    pub(crate) fn new(credits: u32, paths: usize) -> Self {
        let credits = credits.clamp(1, u32::from(crate::config::MAX_CREDITS)) as usize;
        Self {
            next: 0,
            released: 0,
            waiting: (0..credits).map(|_| None).collect(),
            arrived_on: vec![Some(0); paths.clamp(1, MAX_PATHS)],
        }
    }

    fn credits(&self) -> u64 {
        self.waiting.len() as u64
    }

    /// The whole number of a message that carried `low` (its number's low 32 bits): the one
    /// number from `next` up to `next + credits` with those bits.
    ///
    /// # Errors
    /// [`ProtocolViolation::OutsideWindow`] when none is.
    pub(crate) fn number_of(&self, low: u32) -> Result<u64, ProtocolViolation> {
        let offset = u64::from(low.wrapping_sub(self.next as u32));
        if offset < self.credits() {
            Ok(self.next + offset)
        } else {
            Err(ProtocolViolation::OutsideWindow {
                low,
                next: self.next,
                credits: self.credits(),
            })
        }
    }

    /// Message `number` arrived whole on `path`, held by `slot`.
    ///
    /// # Errors
    /// A protocol violation when `number` is not in the window (behind the next one or beyond
    /// the credits) or already waiting, or `path` does not exist.
    pub(crate) fn arrived(
        &mut self,
        path: PathId,
        number: u64,
        slot: T,
    ) -> Result<(), ProtocolViolation> {
        let Some(Some(count)) = self.arrived_on.get_mut(path) else {
            return Err(ProtocolViolation::NoSuchPath { path });
        };
        if number < self.next || number - self.released >= self.waiting.len() as u64 {
            return Err(ProtocolViolation::OutsideWindow {
                low: number as u32,
                next: self.next,
                credits: self.waiting.len() as u64,
            });
        }
        let at = (number % self.waiting.len() as u64) as usize;
        if self.waiting[at].is_some() {
            return Err(ProtocolViolation::ArrivedTwice { number });
        }
        self.waiting[at] = Some(slot);
        *count += 1;
        Ok(())
    }

    /// The next message in order, if it arrived: its number and slot. The window moves on.
    pub(crate) fn pop_next(&mut self) -> Option<(u64, T)> {
        let at = (self.next % self.waiting.len() as u64) as usize;
        let slot = self.waiting[at].take()?;
        let number = self.next;
        self.next += 1;
        Some((number, slot))
    }

    /// The application is done with every message below `released` (at most what was
    /// delivered): the window reaches `credits` beyond it.
    pub(crate) fn release(&mut self, released: u64) {
        self.released = self.released.max(released.min(self.next));
    }

    /// `path` was lost and torn down: how many messages arrived on it since it came up (what
    /// the sender needs). Nothing more arrives on it until [`ReorderWindow::path_up`].
    pub(crate) fn path_lost(&mut self, path: PathId) -> u64 {
        self.arrived_on
            .get_mut(path)
            .and_then(Option::take)
            .unwrap_or(0)
    }

    /// `path` is up again: its count starts from zero. A path that is up keeps its count.
    pub(crate) fn path_up(&mut self, path: PathId) {
        if let Some(count @ None) = self.arrived_on.get_mut(path) {
            *count = Some(0);
        }
    }

    /// The messages waiting for their turn, in no particular order (a data path torn down
    /// for resumption gives their slots back: they count as not arrived).
    pub(crate) fn into_waiting(self) -> impl Iterator<Item = T> {
        self.waiting.into_iter().flatten()
    }

    /// Messages waiting for their turn.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests;
