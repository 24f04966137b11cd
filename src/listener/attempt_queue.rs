//! Proven resume attempts waiting for their server session (docs/design.md, "Resuming a
//! session", the attempt rules).
//!
//! The listener offers an attempt once its client proved the session's secret; the session
//! takes one when it resumes (or looks in every wait while it runs). A client runs one attempt
//! at a time, so an older waiting attempt is one its client gave up on.
//!
//! Rules:
//! - at most [`MAX_WAITING_ATTEMPTS`] wait; a new one pushes out the oldest, which is told
//!   "resume busy" (the client retries that within its resume timeout, never takes it as final);
//! - attempts whose client closed its connection are dropped when one is offered and when the
//!   session takes one;
//! - the session takes the newest attempt still open; older ones are told "resume busy";
//! - once the session is gone, a waiting or new attempt is told "resume refused" (final:
//!   nothing can resume it);
//! - a session waiting for an attempt with none queued is parked; a parked session may be
//!   taken over (its slot given to a new client, docs/design.md "A new client and a parked
//!   session"): it stops waiting at once and ends. One with an attempt queued or in progress
//!   is not parked: its client is resuming.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Proven attempts that may wait for one session at once.
pub(crate) const MAX_WAITING_ATTEMPTS: usize = 4;

/// What the queue needs of a waiting attempt.
pub(crate) trait Waiting {
    /// Whether the client closed its connection (it gave up on this attempt).
    fn client_gone(&mut self) -> bool;
    /// Tells the client to try again ("resume busy"), and closes.
    fn tell_busy(self);
    /// Tells the client that the session cannot resume ("resume refused"), and closes.
    fn tell_refused(self);
}

#[derive(Debug)]
struct State<T> {
    waiting: VecDeque<T>,
    /// False once the session is gone.
    open: bool,
    /// Since when the session waits for an attempt (None while it runs or drives one).
    parked_since: Option<Instant>,
    /// Set once a new client took the parked session's place: it ends.
    taken_over: bool,
}

/// The attempts waiting for one session; clones share it.
#[derive(Debug)]
pub(crate) struct AttemptQueue<T> {
    shared: Arc<(Mutex<State<T>>, Condvar)>,
}

impl<T> Clone for AttemptQueue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Waiting> AttemptQueue<T> {
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::new((
                Mutex::new(State {
                    waiting: VecDeque::with_capacity(MAX_WAITING_ATTEMPTS + 1),
                    open: true,
                    parked_since: None,
                    taken_over: false,
                }),
                Condvar::new(),
            )),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.shared.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The listener's side: a proven attempt for the session.
    pub(crate) fn offer(&self, attempt: T) {
        let mut busy = Vec::new();
        {
            let mut state = self.state();
            if !state.open {
                drop(state);
                attempt.tell_refused();
                return;
            }
            state.waiting.retain_mut(|a| !a.client_gone());
            while state.waiting.len() >= MAX_WAITING_ATTEMPTS {
                if let Some(oldest) = state.waiting.pop_front() {
                    busy.push(oldest);
                }
            }
            state.waiting.push_back(attempt);
        }
        self.shared.1.notify_all();
        if !busy.is_empty() {
            log::info!(
                "resume: {} waiting attempt(s) pushed out by a newer one (told to try again)",
                busy.len()
            );
        }
        busy.into_iter().for_each(Waiting::tell_busy);
    }

    /// The session's side: the newest attempt still open, waiting at most until `deadline`
    /// (`None`: none came, or the session was taken over). Older waiting attempts are told to
    /// try again.
    pub(crate) fn take(&self, deadline: Option<Instant>) -> Option<T> {
        let mut state = self.state();
        loop {
            state.waiting.retain_mut(|a| !a.client_gone());
            if let Some(newest) = state.waiting.pop_back() {
                let older: Vec<T> = state.waiting.drain(..).collect();
                drop(state);
                older.into_iter().for_each(Waiting::tell_busy);
                return Some(newest);
            }
            let left = deadline?.saturating_duration_since(Instant::now());
            if left.is_zero() || !state.open || state.taken_over {
                return None;
            }
            state = self
                .shared
                .1
                .wait_timeout(state, left.min(Duration::from_millis(100)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The session's side: it waits for an attempt since `now` (it is parked), or no longer
    /// does (`None`: it runs again, or drives an attempt it took).
    pub(crate) fn set_parked(&self, since: Option<Instant>) {
        self.state().parked_since = since;
    }

    /// Whether a new client took the session's place while it was parked.
    pub(crate) fn taken_over(&self) -> bool {
        self.state().taken_over
    }

    /// Since when the session has been parked with no attempt queued (`None`: it is not).
    pub(crate) fn parked_since(&self) -> Option<Instant> {
        let mut state = self.state();
        state.waiting.retain_mut(|a| !a.client_gone());
        if state.open && !state.taken_over && state.waiting.is_empty() {
            state.parked_since
        } else {
            None
        }
    }

    /// A new client takes the session's place, if it is still parked with no attempt queued
    /// since `since` (what [`AttemptQueue::parked_since`] said): it stops waiting and ends.
    pub(crate) fn take_over(&self, since: Instant) -> bool {
        {
            let mut state = self.state();
            state.waiting.retain_mut(|a| !a.client_gone());
            let parked = state.open
                && !state.taken_over
                && state.waiting.is_empty()
                && state.parked_since == Some(since);
            if !parked {
                return false;
            }
            state.taken_over = true;
        }
        self.shared.1.notify_all();
        true
    }

    /// The session is gone: every waiting and later attempt is refused.
    pub(crate) fn close(&self) {
        let refused: Vec<T> = {
            let mut state = self.state();
            state.open = false;
            state.waiting.drain(..).collect()
        };
        self.shared.1.notify_all();
        refused.into_iter().for_each(Waiting::tell_refused);
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// What each fake attempt was told.
    #[derive(Debug, Default)]
    struct Told {
        busy: Mutex<Vec<u32>>,
        refused: Mutex<Vec<u32>>,
    }

    #[derive(Debug)]
    struct Fake {
        n: u32,
        gone: Arc<AtomicBool>,
        told: Arc<Told>,
    }

    impl Waiting for Fake {
        fn client_gone(&mut self) -> bool {
            self.gone.load(Ordering::Relaxed)
        }
        fn tell_busy(self) {
            self.told.busy.lock().unwrap().push(self.n);
        }
        fn tell_refused(self) {
            self.told.refused.lock().unwrap().push(self.n);
        }
    }

    fn fakes(told: &Arc<Told>, n: u32) -> (Fake, Arc<AtomicBool>) {
        let gone = Arc::new(AtomicBool::new(false));
        let fake = Fake {
            n,
            gone: gone.clone(),
            told: told.clone(),
        };
        (fake, gone)
    }

    #[test]
    fn a_full_queue_pushes_out_the_oldest_which_is_told_to_try_again() {
        let told = Arc::new(Told::default());
        let q = AttemptQueue::new();
        for n in 0..7 {
            q.offer(fakes(&told, n).0);
        }
        assert_eq!(q.waiting(), MAX_WAITING_ATTEMPTS);
        assert_eq!(*told.busy.lock().unwrap(), [0, 1, 2]);
        assert!(told.refused.lock().unwrap().is_empty(), "never refused");
        let newest = q.take(None).expect("an attempt");
        assert_eq!(newest.n, 6, "the newest is taken");
        assert_eq!(*told.busy.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn attempts_whose_client_gave_up_are_dropped_not_taken() {
        let told = Arc::new(Told::default());
        let q = AttemptQueue::new();
        let (a, _) = fakes(&told, 1);
        let (b, b_gone) = fakes(&told, 2);
        q.offer(a);
        q.offer(b);
        b_gone.store(true, Ordering::Relaxed);
        assert_eq!(q.take(None).map(|a| a.n), Some(1), "the newest open one");
        let (c, c_gone) = fakes(&told, 3);
        q.offer(c);
        c_gone.store(true, Ordering::Relaxed);
        assert!(q.take(None).is_none());
        // Four gone attempts do not push out a live one.
        let gone: Vec<_> = (10..14).map(|n| fakes(&told, n)).collect();
        for (f, g) in gone {
            q.offer(f);
            g.store(true, Ordering::Relaxed);
        }
        q.offer(fakes(&told, 20).0);
        assert_eq!(q.waiting(), 1);
        assert!(told.busy.lock().unwrap().is_empty(), "nobody told busy");
    }

    #[test]
    fn the_session_waits_for_an_attempt_until_its_deadline() {
        let told = Arc::new(Told::default());
        let q = AttemptQueue::<Fake>::new();
        assert!(q.take(Some(Instant::now())).is_none());
        let offered = q.clone();
        let (f, _) = fakes(&told, 5);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            offered.offer(f);
        });
        let got = q.take(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(got.map(|a| a.n), Some(5));
        t.join().unwrap();
    }

    #[test]
    fn once_the_session_is_gone_every_attempt_is_refused() {
        let told = Arc::new(Told::default());
        let q = AttemptQueue::new();
        q.offer(fakes(&told, 1).0);
        q.close();
        q.offer(fakes(&told, 2).0);
        assert_eq!(*told.refused.lock().unwrap(), [1, 2]);
        assert!(told.busy.lock().unwrap().is_empty());
        assert!(q
            .take(Some(Instant::now() + Duration::from_secs(60)))
            .is_none());
    }

    #[test]
    fn only_a_session_parked_with_no_attempt_queued_can_be_taken_over() {
        let told = Arc::new(Told::default());
        let q = AttemptQueue::new();
        assert_eq!(q.parked_since(), None, "a running session is not parked");
        let since = Instant::now();
        q.set_parked(Some(since));
        assert_eq!(q.parked_since(), Some(since));
        let (attempt, gone) = fakes(&told, 1);
        q.offer(attempt);
        assert_eq!(q.parked_since(), None, "its client is resuming");
        assert!(!q.take_over(since));
        gone.store(true, Ordering::Relaxed);
        assert_eq!(q.parked_since(), Some(since), "that client gave up");
        assert!(
            !q.take_over(since + Duration::from_millis(1)),
            "parked since another time: it ran in between"
        );
        assert!(q.take_over(since));
        assert!(q.taken_over());
        assert_eq!(q.parked_since(), None, "taken over once");
        assert!(!q.take_over(since));
    }

    #[test]
    fn a_parked_session_taken_over_stops_waiting_at_once() {
        let q = AttemptQueue::<Fake>::new();
        q.set_parked(Some(Instant::now()));
        let since = q.parked_since().expect("parked");
        let waiter = q.clone();
        let t = std::thread::spawn(move || {
            let started = Instant::now();
            let got = waiter.take(Some(Instant::now() + Duration::from_secs(60)));
            (got.is_none(), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(q.take_over(since));
        let (none, waited) = t.join().unwrap();
        assert!(none, "no attempt");
        assert!(waited < Duration::from_secs(30), "woken, not timed out");
    }

    #[test]
    fn a_session_that_is_gone_cannot_be_taken_over() {
        let q = AttemptQueue::<Fake>::new();
        let since = Instant::now();
        q.set_parked(Some(since));
        q.close();
        assert_eq!(q.parked_since(), None);
        assert!(!q.take_over(since));
    }
}
