//! Selective signaling: which sends ask for a completion, and which earlier sends a completion
//! retires.
//!
//! A send posted without `IBV_SEND_SIGNALED` produces no completion when it succeeds. On an RC
//! queue pair, work requests complete in the order they were posted, so the completion of a
//! signaled send also means that every earlier send on the same queue completed: its buffer may
//! be reused and its send-queue entry is free. Signaling only every k-th send saves the device a
//! completion write per message and the CPU a completion to poll.
//!
//! Two rules keep it live:
//! - a send that takes the last free entry of the window (`capacity` sends outstanding) is
//!   always signaled, so a poster that waits for room always has a completion coming;
//! - a caller that needs every outstanding send completed (a sender's `finish`, or a striped
//!   data path waiting for its oldest send) and finds the last one unsignaled must post a
//!   signaled request of its own behind it ([`SendSignaling::needs_flush`]); the verbs
//!   transport posts a zero-length RDMA write, on a send-queue entry kept for it beyond the
//!   window (one flush at a time). Its completion retires only the sends posted before it:
//!   sends may be posted behind it (they complete after it).
//!
//! A failed work request always produces a completion, signaled or not, so errors are never
//! hidden.

use std::collections::VecDeque;

/// Tracks the sends posted on one queue and decides which of them to signal.
#[derive(Debug)]
pub(crate) struct SendSignaling {
    /// Identifiers of the sends posted and not yet known complete, oldest first.
    outstanding: VecDeque<u64>,
    /// Sends posted unsignaled since the last signaled one.
    unsignaled_run: usize,
    /// Signal at least every `every`-th send.
    every: usize,
    /// At most this many sends outstanding (the send-queue room the caller gave us; a flush
    /// has an entry of its own beyond it).
    capacity: usize,
    /// A flush is posted: it takes an entry, and its completion retires the sends up to this
    /// one (the newest when it was posted; `None` inside: already retired by a signaled one).
    flush: Option<Option<u64>>,
}

impl SendSignaling {
    /// Room for `capacity` outstanding sends, signaling at least every `every`-th one (both at
    /// least 1). Allocates once; posting and retiring never allocate.
    pub(crate) fn new(capacity: usize, every: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            outstanding: VecDeque::with_capacity(capacity),
            unsignaled_run: 0,
            every: every.clamp(1, capacity),
            capacity,
            flush: None,
        }
    }

    /// How often to signal for a window of `capacity` sends: every half window, so that one
    /// completion is always on its way while the other half is being filled, and at most
    /// every 64th (a bounded batch of buffers retired per completion).
    pub(crate) fn default_interval(capacity: usize) -> usize {
        capacity.div_ceil(2).clamp(1, 64)
    }

    /// Number of sends posted and not yet known complete.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// How many more sends may be posted now.
    pub(crate) fn room(&self) -> usize {
        self.capacity.saturating_sub(self.outstanding.len())
    }

    /// Whether another send may be posted (fewer than `capacity` outstanding).
    pub(crate) fn has_room(&self) -> bool {
        self.room() > 0
    }

    /// Records a send about to be posted with identifier `id`; returns whether to signal it.
    /// The caller must have checked [`SendSignaling::has_room`].
    pub(crate) fn on_post(&mut self, id: u64) -> bool {
        self.outstanding.push_back(id);
        let signal = self.unsignaled_run + 1 >= self.every || self.room() == 0;
        if signal {
            self.unsignaled_run = 0;
        } else {
            self.unsignaled_run += 1;
        }
        signal
    }

    /// Undoes the last [`SendSignaling::on_post`] (the post itself failed).
    pub(crate) fn on_post_failed(&mut self) {
        self.outstanding.pop_back();
        self.unsignaled_run = self.unsignaled_run.saturating_sub(1);
    }

    /// The signaled send `id` completed: retires it and every send posted before it, calling
    /// `retired` for each, oldest first. Returns false (retiring nothing) when `id` is not
    /// outstanding.
    pub(crate) fn on_signaled_completion(&mut self, id: u64, mut retired: impl FnMut(u64)) -> bool {
        if !self.outstanding.contains(&id) {
            return false;
        }
        while let Some(done) = self.outstanding.pop_front() {
            retired(done);
            if done == id {
                break;
            }
        }
        if self.outstanding.is_empty() {
            self.unsignaled_run = 0;
        }
        true
    }

    /// A flush (a signaled request behind the outstanding sends, on its own entry) is posted,
    /// until [`SendSignaling::on_flush_completion`]. Call it only when
    /// [`SendSignaling::needs_flush`] said so.
    pub(crate) fn on_flush_post(&mut self) {
        self.flush = Some(self.outstanding.back().copied());
        self.unsignaled_run = 0;
    }

    /// The flush completed: every send posted before it is complete (those posted after it
    /// are not: they complete after it).
    pub(crate) fn on_flush_completion(&mut self, mut retired: impl FnMut(u64)) {
        let Some(Some(last)) = self.flush.take() else {
            return;
        };
        if !self.outstanding.contains(&last) {
            return;
        }
        while let Some(done) = self.outstanding.pop_front() {
            retired(done);
            if done == last {
                break;
            }
        }
    }

    /// Whether the newest outstanding send was posted unsignaled (and no flush is on its
    /// way), so that waiting for every send to complete needs a signaled request behind it.
    pub(crate) fn needs_flush(&self) -> bool {
        self.unsignaled_run > 0 && !self.outstanding.is_empty() && self.flush.is_none()
    }

    /// The queue was torn down and the sends go out again on a new one (a resumed session):
    /// hands every outstanding send to `each`, oldest first, and starts afresh, so that no run
    /// of unsignaled sends carries over to the new queue.
    pub(crate) fn take_all(&mut self, mut each: impl FnMut(u64)) {
        for id in self.outstanding.drain(..) {
            each(id);
        }
        self.unsignaled_run = 0;
        self.flush = None;
    }

    /// Forgets every outstanding send (the queue was torn down).
    pub(crate) fn clear(&mut self) {
        self.outstanding.clear();
        self.unsignaled_run = 0;
        self.flush = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Posts `n` sends with ids from `next`, returning which were signaled.
    fn post(s: &mut SendSignaling, next: &mut u64, n: usize) -> Vec<(u64, bool)> {
        (0..n)
            .map(|_| {
                let id = *next;
                *next += 1;
                (id, s.on_post(id))
            })
            .collect()
    }

    #[test]
    fn signals_every_kth_send_and_the_one_that_fills_the_window() {
        let mut s = SendSignaling::new(8, 3);
        let mut next = 0;
        let posted = post(&mut s, &mut next, 8);
        let signaled: Vec<u64> = posted.iter().filter(|p| p.1).map(|p| p.0).collect();
        // Every third, and the eighth because it takes the last entry.
        assert_eq!(signaled, vec![2, 5, 7]);
        assert!(!s.has_room());
        assert!(!s.needs_flush());
    }

    #[test]
    fn a_signaled_completion_retires_everything_before_it_in_order() {
        let mut s = SendSignaling::new(8, 4);
        let mut next = 10;
        post(&mut s, &mut next, 6);
        assert_eq!((s.capacity, s.room()), (8, 2));
        let mut retired = Vec::new();
        assert!(s.on_signaled_completion(13, |id| retired.push(id)));
        assert_eq!(retired, vec![10, 11, 12, 13]);
        assert_eq!(s.outstanding(), 2);
        // Unknown ids retire nothing.
        assert!(!s.on_signaled_completion(99, |id| retired.push(id)));
        assert_eq!(s.outstanding(), 2);
        assert!(s.needs_flush(), "14 and 15 went out unsignaled");
        s.on_flush_post();
        let mut rest = Vec::new();
        s.on_flush_completion(|id| rest.push(id));
        assert_eq!(rest, vec![14, 15]);
        assert!(!s.needs_flush());
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn a_failed_post_is_forgotten() {
        let mut s = SendSignaling::new(4, 4);
        assert!(!s.on_post(1));
        s.on_post_failed();
        assert_eq!(s.outstanding(), 0);
        assert!(!s.needs_flush());
    }

    #[test]
    fn take_all_hands_back_every_outstanding_send_and_restarts_the_signal_count() {
        let mut s = SendSignaling::new(8, 3);
        let mut next = 0;
        post(&mut s, &mut next, 5);
        assert!(s.on_signaled_completion(2, |_| {}));
        assert!(s.needs_flush(), "3 and 4 went out unsignaled");
        let mut taken = Vec::new();
        s.take_all(|id| taken.push(id));
        assert_eq!(taken, vec![3, 4]);
        assert_eq!((s.outstanding(), s.room()), (0, 8));
        assert!(!s.needs_flush());
        // The unsignaled run of the old queue is gone: the third send from now is signaled,
        // not the first.
        let signaled: Vec<bool> = post(&mut s, &mut next, 3).iter().map(|p| p.1).collect();
        assert_eq!(signaled, vec![false, false, true]);
    }

    #[test]
    fn every_is_clamped_and_one_means_every_send() {
        let mut s = SendSignaling::new(3, 0);
        let mut next = 0;
        assert!(post(&mut s, &mut next, 3).iter().all(|p| p.1));
        let mut s = SendSignaling::new(2, 100);
        assert_eq!(
            post(&mut s, &mut next, 2)
                .iter()
                .map(|p| p.1)
                .collect::<Vec<_>>(),
            vec![false, true]
        );
        assert_eq!(SendSignaling::default_interval(16), 8);
        assert_eq!(SendSignaling::default_interval(1), 1);
        assert_eq!(SendSignaling::default_interval(1024), 64);
    }

    /// Random posts, flushes and completions (in post order, as on an RC queue): a poster that
    /// waits only when the window is full always has a completion coming, every send is
    /// retired exactly once and in order, and a flush is needed exactly when the newest send is
    /// unsignaled and none is on its way.
    #[test]
    fn random_schedules_never_strand_a_waiting_poster() {
        use proptest::prelude::*;
        #[derive(Debug)]
        enum Signaled {
            Send(u64),
            Flush,
        }
        let config = ProptestConfig::with_cases(256);
        proptest!(config, |(capacity in 1usize..12, every in 1usize..12, steps in proptest::collection::vec(0u8..4, 1..200))| {
            let mut s = SendSignaling::new(capacity, every);
            let mut next = 0u64;
            let mut in_flight: VecDeque<Signaled> = VecDeque::new();
            let mut retired = Vec::new();
            let mut newest_signaled = true;
            for step in steps {
                match step {
                    0 | 1 if s.has_room() => {
                        let id = next;
                        next += 1;
                        newest_signaled = s.on_post(id);
                        if newest_signaled {
                            in_flight.push_back(Signaled::Send(id));
                        }
                    }
                    2 if s.needs_flush() => {
                        s.on_flush_post();
                        in_flight.push_back(Signaled::Flush);
                    }
                    _ => match in_flight.pop_front() {
                        Some(Signaled::Send(id)) => {
                            prop_assert!(s.on_signaled_completion(id, |r| retired.push(r)));
                        }
                        Some(Signaled::Flush) => s.on_flush_completion(|r| retired.push(r)),
                        None => {}
                    },
                }
                if !s.has_room() {
                    prop_assert!(!in_flight.is_empty(), "full window, no completion coming");
                }
                let flushing = in_flight.iter().any(|w| matches!(w, Signaled::Flush));
                prop_assert_eq!(
                    s.needs_flush(),
                    s.outstanding() > 0 && !newest_signaled && !flushing
                );
            }
            // Every completion in order, and a flush whenever one is needed, retire the rest.
            loop {
                if s.needs_flush() {
                    s.on_flush_post();
                    in_flight.push_back(Signaled::Flush);
                }
                let Some(w) = in_flight.pop_front() else { break };
                match w {
                    Signaled::Send(id) => {
                        prop_assert!(s.on_signaled_completion(id, |r| retired.push(r)));
                    }
                    Signaled::Flush => s.on_flush_completion(|r| retired.push(r)),
                }
            }
            prop_assert_eq!(retired, (0..next).collect::<Vec<_>>());
        });
    }

    /// Sends posted behind a flush complete after it: its completion retires only those
    /// before it. It has an entry of its own (the window stays whole), one flush at a time.
    #[test]
    fn a_flush_retires_only_the_sends_before_it() {
        let mut s = SendSignaling::new(4, 4);
        let mut next = 0;
        post(&mut s, &mut next, 2); // 0 and 1, unsignaled
        assert!(s.needs_flush());
        s.on_flush_post();
        assert!(!s.needs_flush(), "one flush at a time");
        assert_eq!(s.room(), 2, "the flush is not in the window");
        let posted = post(&mut s, &mut next, 2); // 3 takes the last entry
        assert_eq!(posted, [(2, false), (3, true)]);
        let mut retired = Vec::new();
        s.on_flush_completion(|id| retired.push(id));
        assert_eq!(retired, [0, 1], "2 and 3 were posted behind the flush");
        assert_eq!((s.outstanding(), s.room()), (2, 2));
        assert!(s.on_signaled_completion(3, |id| retired.push(id)));
        assert_eq!(retired, [0, 1, 2, 3]);
        assert_eq!((s.outstanding(), s.room()), (0, 4));
    }
}
