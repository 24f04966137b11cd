//! Resuming a session after its path broke: the rules, without I/O (docs/design.md, "Resuming a
//! session"). Whether and when a session resumes is [`super::lifecycle`]'s; this module keeps
//! where the stream stands and what may be sent again.
//!
//! Rules kept here:
//! - messages are numbered 0, 1, 2, ... in the order the sender took them; a number is never
//!   reused, across any number of resumes. Numbers are implicit on the data path: the first
//!   message on a resumed path is number `arrived`, because the sender sends again from exactly
//!   there, so a message that arrived is never sent twice and there is no duplicate to drop;
//! - a message counts as *arrived* when it landed whole in a receive slot (and, with
//!   `--checksum`, passed it). An arrived message is never sent again and never lost: it stays in
//!   its slot until the application is done with it, then is *released* (the credit rule). A
//!   receiver takes its counts only once its old data path can deliver nothing more (torn
//!   down), so no late arrival changes them;
//! - the sender keeps every message it took until the receiver released it *and* its send
//!   completed ([`SentLedger`]): only those can be sent again, so the sender never needs data
//!   the application already reused. Its old data path is torn down before the resume frees
//!   any slot (no late completion of the old path reaches the ledger), and it takes no new
//!   message between its counts and the resume;
//! - the resume point comes from the receiver: its arrived and released counts
//!   ([`ReceiverPosition`]). The sender checks them against what it knows ([`plan_resume`]):
//!   nothing arrived that was not sent, nothing released that did not arrive, releases never go
//!   back. Anything else is a protocol violation and ends the session as today;
//! - after a resume the sender sends again, in order and before any new message, every message
//!   from `arrived` to what it had taken; its window restarts from the receiver's `released`
//!   (and the receiver counts that as announced); a Finish sent before the break is sent again
//!   after those (its count is unchanged);
//! - only the two ends can resume: a session has an identity (a random id and a secret from the
//!   original handshake, derived from the pre-shared key when there is one, so it never crosses
//!   the wire) and both ends prove they hold the secret over fresh nonces on every attempt
//!   ([`ResumeTicket`]); a replayed attempt fails on the new nonce;
//! - time: the client tries at once, then again after a doubling backoff from [`FIRST_RETRY`]
//!   up to [`MAX_RETRY`], each attempt bounded by [`ATTEMPT_TIMEOUT`], until the resume timeout
//!   after the break passes ([`Reconnect`]); the server keeps the session parked for the same
//!   timeout ([`Parked`]). Past it, the session ends as it does today: peer lost, with the
//!   count of messages that arrived.

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::auth::{fresh_nonce, AuthKey, Nonce, Proof};
use crate::proto::SESSION_ID_LEN;
use crate::time::deadline_after;
use crate::{Error, ProtocolViolation, Result};

/// The client's wait after its first failed attempt.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(50);
/// How long one attempt may take (connect, prove, exchange counts, set the data path up again)
/// before the client gives it up and tries again: a lost SYN or a silent server costs one
/// attempt, not the whole resume timeout.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest wait between two attempts.
pub(crate) const MAX_RETRY: Duration = Duration::from_secs(1);

/// A session's identity on the wire.
pub(crate) type SessionId = [u8; SESSION_ID_LEN];

/// The label of the secret derived from a pre-shared key.
const SECRET_LABEL: &[u8] = b"rdma-container v5 resume secret";

/// What lets the two ends of one session, and nobody else, resume it.
#[derive(Debug, Clone)]
pub(crate) struct ResumeTicket {
    id: SessionId,
    secret: AuthKey,
}

impl ResumeTicket {
    /// Without a pre-shared key: a random id and a random secret, made by the server and sent in
    /// its hello (whoever can read the control connection can also resume the session; the key
    /// closes that).
    pub(crate) fn random() -> Result<Self> {
        let random = fresh_nonce()?;
        let mut id = [0; SESSION_ID_LEN];
        id.copy_from_slice(&random[..SESSION_ID_LEN]);
        Self::from_parts(&id, &fresh_nonce()?)
    }

    /// The ticket from what travels in the server's hello (`id`, `secret`).
    pub(crate) fn from_parts(id: &SessionId, secret: &[u8; 32]) -> Result<Self> {
        Ok(Self {
            id: *id,
            secret: AuthKey::from_bytes(secret)?,
        })
    }

    /// With a pre-shared key: the secret is derived from the key and the nonces of the
    /// original authentication, on both ends; it never crosses the wire, and a third party
    /// that read the whole handshake cannot compute it.
    pub(crate) fn bound_to_key(
        key: &AuthKey,
        id: SessionId,
        client: &Nonce,
        server: &Nonce,
    ) -> Result<Self> {
        let secret = key.derive(SECRET_LABEL, &id, client, server);
        Ok(Self {
            id,
            secret: AuthKey::from_bytes(&secret)?,
        })
    }

    /// The secret, as a server's hello carries it without a pre-shared key.
    pub(crate) fn secret_for_hello(&self) -> [u8; 32] {
        let mut out = [0; 32];
        let bytes = self.secret.expose();
        let n = bytes.len().min(32);
        out[..n].copy_from_slice(&bytes[..n]);
        out
    }

    /// The session's id.
    pub(crate) fn id(&self) -> &SessionId {
        &self.id
    }

    /// The client's proof for one attempt (the nonces of that attempt).
    pub(crate) fn client_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        self.secret.client_proof(client, server)
    }

    /// The server's proof for one attempt.
    pub(crate) fn server_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        self.secret.server_proof(client, server)
    }

    /// Whether `proof` is the client's for this attempt (constant-time).
    pub(crate) fn is_client_proof(&self, proof: &Proof, client: &Nonce, server: &Nonce) -> bool {
        self.secret.is_client_proof(proof, client, server)
    }

    /// Whether `proof` is the server's for this attempt (constant-time).
    pub(crate) fn is_server_proof(&self, proof: &Proof, client: &Nonce, server: &Nonce) -> bool {
        self.secret.is_server_proof(proof, client, server)
    }
}

/// Where the receiver stands when the session resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReceiverPosition {
    /// Messages that landed whole (the next one expected is this number).
    pub(crate) arrived: u64,
    /// Messages the application is done with (credits).
    pub(crate) released: u64,
}

/// Where the sender stands when the session resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SenderPosition {
    /// Messages taken (numbered 0 to `taken - 1`).
    pub(crate) taken: u64,
    /// The last release count the sender received.
    pub(crate) released: u64,
}

/// What the sender does to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResumePlan {
    /// The messages to send again, in this order, before any new one.
    pub(crate) resend: Range<u64>,
    /// The release count the sender's window restarts from.
    pub(crate) released: u64,
}

/// Checks the receiver's position against the sender's and says what to send again.
///
/// # Errors
/// A position no honest receiver can be in: [`Error::Protocol`].
pub(crate) fn plan_resume(
    sender: SenderPosition,
    receiver: ReceiverPosition,
    credits: u32,
) -> Result<ResumePlan> {
    let ReceiverPosition { arrived, released } = receiver;
    if arrived > sender.taken {
        return Err(Error::Protocol(ProtocolViolation::ResumePastSent {
            arrived,
            sent: sender.taken,
        }));
    }
    if released > arrived {
        return Err(Error::Protocol(
            ProtocolViolation::ResumeReleasedPastArrived { released, arrived },
        ));
    }
    if released < sender.released {
        return Err(Error::Protocol(ProtocolViolation::CreditRegressed {
            previous: sender.released,
            released,
        }));
    }
    // Our own window never had more than `credits` unreleased, and the receiver's releases
    // only grew since: past it is our bug, not the peer's.
    if sender.taken - released > u64::from(credits) {
        return Err(Error::Internal(format!(
            "resuming with {} message(s) unreleased, past the window of {credits}",
            sender.taken - released
        )));
    }
    Ok(ResumePlan {
        resend: arrived..sender.taken,
        released,
    })
}

/// The messages the sender keeps until the receiver released them: `T` is the staging slot
/// that holds one. A slot is free again once its message was released and its send completed
/// (a completion may come after the credit: they travel on different paths). Sends complete in
/// order (RC, and the tcp stream), so one watermark says which completed; nothing here
/// allocates once the queue has grown to the window.
#[derive(Debug)]
pub(crate) struct SentLedger<T> {
    /// The number of the oldest kept message.
    first: u64,
    kept: std::collections::VecDeque<T>,
    /// Messages below this number completed.
    completed: u64,
    /// Messages below this number were released.
    released: u64,
}

impl<T> Default for SentLedger<T> {
    fn default() -> Self {
        Self {
            first: 0,
            kept: std::collections::VecDeque::new(),
            completed: 0,
            released: 0,
        }
    }
}

impl<T> SentLedger<T> {
    /// Messages taken so far (the next number).
    pub(crate) fn taken(&self) -> u64 {
        self.first + self.kept.len() as u64
    }

    /// Message `number` was taken and went into `slot`.
    ///
    /// # Errors
    /// `number` is not the next one: [`Error::Internal`] (our bug).
    pub(crate) fn on_taken(&mut self, number: u64, slot: T) -> Result<()> {
        if number != self.taken() {
            return Err(Error::Internal(format!(
                "message {number} taken while {} was next",
                self.taken()
            )));
        }
        self.kept.push_back(slot);
        Ok(())
    }

    /// Gives back the last message taken (`number`), which was never sent. False (nothing
    /// changed) when it is not the last one or its send completed already.
    pub(crate) fn untake(&mut self, number: u64) -> bool {
        if self.kept.is_empty() || number + 1 != self.taken() || self.completed > number {
            return false;
        }
        self.kept.pop_back();
        true
    }

    /// The slot that holds kept message `number`.
    pub(crate) fn slot_of(&self, number: u64) -> Option<&T> {
        let index = usize::try_from(number.checked_sub(self.first)?).ok()?;
        self.kept.get(index)
    }

    /// The number of the next send to complete (sends complete in order).
    pub(crate) fn next_to_complete(&self) -> u64 {
        self.completed
    }

    /// Whether every message taken has completed its send.
    pub(crate) fn all_completed(&self) -> bool {
        self.completed == self.taken()
    }

    /// The send of message `number` completed; the slots now free go to `free`.
    ///
    /// # Errors
    /// A completion out of order or of a message not taken: [`Error::Internal`].
    pub(crate) fn on_completed(&mut self, number: u64, free: &mut Vec<T>) -> Result<()> {
        if number != self.completed || number >= self.taken() {
            return Err(Error::Internal(format!(
                "completion of message {number} while {} was the next to complete of {}",
                self.completed,
                self.taken()
            )));
        }
        self.completed += 1;
        self.take_free(free);
        Ok(())
    }

    /// The receiver released every message below `released`; the slots now free go to
    /// `free`.
    pub(crate) fn on_released(&mut self, released: u64, free: &mut Vec<T>) {
        self.released = self.released.max(released);
        self.take_free(free);
    }

    fn take_free(&mut self, free: &mut Vec<T>) {
        let until = self.released.min(self.completed);
        while self.first < until {
            let Some(slot) = self.kept.pop_front() else {
                break;
            };
            free.push(slot);
            self.first += 1;
        }
    }

    /// The path broke (and was torn down) and the session resumes by `plan`: the messages
    /// that arrived count as completed, the ones to send again as not (the old path's
    /// completions never come), and the releases restart from the plan's. The slots now free
    /// go to `free`; returns the messages to send again, in order, with their slots.
    ///
    /// # Errors
    /// A plan for messages this ledger does not keep: [`Error::Internal`].
    pub(crate) fn resume(
        &mut self,
        plan: &ResumePlan,
        free: &mut Vec<T>,
    ) -> Result<impl Iterator<Item = (u64, &T)>> {
        if plan.resend.end != self.taken() || plan.resend.start < self.first {
            return Err(Error::Internal(format!(
                "resume plan {:?} for a ledger keeping {}..{}",
                plan.resend,
                self.first,
                self.taken()
            )));
        }
        self.completed = plan.resend.start;
        self.on_released(plan.released, free);
        let skip = usize::try_from(plan.resend.start - self.first).unwrap_or(usize::MAX);
        Ok(self
            .kept
            .iter()
            .skip(skip)
            .zip(plan.resend.clone())
            .map(|(slot, n)| (n, slot)))
    }
}

/// What the client does next while its session is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReconnectStep {
    /// Try to reconnect now; give up on this attempt at `attempt_deadline`.
    Attempt {
        /// When this attempt counts as failed.
        attempt_deadline: Instant,
    },
    /// Nothing until `until`.
    Wait {
        /// The next attempt's time.
        until: Instant,
    },
    /// The resume timeout passed: the session ends.
    GiveUp,
}

/// The client's reconnect schedule after a break at `lost_at`.
#[derive(Debug, Clone)]
pub(crate) struct Reconnect {
    deadline: Instant,
    next_attempt: Instant,
    backoff: Duration,
    attempts: u32,
    /// The running attempt's deadline.
    attempt_deadline: Option<Instant>,
}

impl Reconnect {
    /// The schedule after a break at `lost_at`, within `timeout`.
    pub(crate) fn new(lost_at: Instant, timeout: Duration) -> Self {
        Self {
            deadline: deadline_after(lost_at, timeout),
            next_attempt: lost_at,
            backoff: FIRST_RETRY,
            attempts: 0,
            attempt_deadline: None,
        }
    }

    /// Attempts started so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// When something happens next (pure): the running attempt's deadline, else the next
    /// attempt's time; never past the resume timeout.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.attempt_deadline
            .unwrap_or(self.next_attempt)
            .min(self.deadline)
    }

    /// What to do at `now`. A running attempt past its deadline counts as failed.
    pub(crate) fn step(&mut self, now: Instant) -> ReconnectStep {
        if now >= self.deadline {
            return ReconnectStep::GiveUp;
        }
        if self.attempt_deadline.is_some_and(|d| now >= d) {
            self.on_attempt_failed(now);
        }
        if self.attempt_deadline.is_some() || now < self.next_attempt {
            return ReconnectStep::Wait {
                until: self.poll_timeout(),
            };
        }
        let attempt_deadline = deadline_after(now, ATTEMPT_TIMEOUT).min(self.deadline);
        self.attempt_deadline = Some(attempt_deadline);
        self.attempts += 1;
        ReconnectStep::Attempt { attempt_deadline }
    }

    /// The attempt failed at `now` (refused, timed out, the server busy): the next one waits
    /// twice as long as the last, at most [`MAX_RETRY`].
    pub(crate) fn on_attempt_failed(&mut self, now: Instant) {
        self.attempt_deadline = None;
        self.next_attempt = deadline_after(now, self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_RETRY);
    }
}

/// A server's broken session waiting for its client to come back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parked {
    deadline: Instant,
}

impl Parked {
    /// Parked at `lost_at` for `timeout`.
    pub(crate) fn new(lost_at: Instant, timeout: Duration) -> Self {
        Self {
            deadline: deadline_after(lost_at, timeout),
        }
    }

    /// When the session ends unless its client came back (pure).
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline
    }

    /// Whether a resume arriving at `now` is still in time.
    pub(crate) fn admits(&self, now: Instant) -> bool {
        now < self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(taken: u64, released: u64) -> SenderPosition {
        SenderPosition { taken, released }
    }

    fn receiver(arrived: u64, released: u64) -> ReceiverPosition {
        ReceiverPosition { arrived, released }
    }

    #[test]
    fn the_sender_sends_again_exactly_what_had_not_arrived() {
        let plan = plan_resume(sender(10, 6), receiver(8, 7), 4).unwrap();
        assert_eq!(plan.resend, 8..10);
        assert_eq!(plan.released, 7);
        let nothing = plan_resume(sender(10, 6), receiver(10, 8), 4).unwrap();
        assert!(nothing.resend.is_empty());
    }

    #[test]
    fn impossible_receiver_positions_are_violations() {
        let violation = |s, r| match plan_resume(s, r, 4) {
            Err(Error::Protocol(v)) => v,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            violation(sender(5, 2), receiver(6, 2)),
            ProtocolViolation::ResumePastSent {
                arrived: 6,
                sent: 5
            }
        );
        assert_eq!(
            violation(sender(5, 2), receiver(3, 4)),
            ProtocolViolation::ResumeReleasedPastArrived {
                released: 4,
                arrived: 3
            }
        );
        assert!(matches!(
            violation(sender(5, 3), receiver(4, 2)),
            ProtocolViolation::CreditRegressed { .. }
        ));
        // A sender past its own window is our bug, not the peer's.
        assert!(matches!(
            plan_resume(sender(9, 2), receiver(4, 2), 4),
            Err(Error::Internal(_))
        ));
    }

    fn freed(f: impl FnOnce(&mut Vec<usize>)) -> Vec<usize> {
        let mut free = Vec::new();
        f(&mut free);
        free
    }

    #[test]
    fn a_slot_is_free_only_once_released_and_completed_in_either_order() {
        let mut ledger = SentLedger::default();
        for n in 0..3 {
            ledger.on_taken(n, n as usize).unwrap();
        }
        let completed = |l: &mut SentLedger<usize>, n| freed(|f| l.on_completed(n, f).unwrap());
        assert!(completed(&mut ledger, 0).is_empty(), "not released");
        assert_eq!(
            freed(|f| ledger.on_released(2, f)),
            vec![0],
            "1 has not completed"
        );
        assert_eq!(completed(&mut ledger, 1), vec![1]);
        assert!(completed(&mut ledger, 2).is_empty(), "2 not released");
        assert_eq!(freed(|f| ledger.on_released(3, f)), vec![2]);
        assert_eq!(ledger.taken(), 3);
        assert!(ledger.on_taken(5, 5).is_err(), "numbers are never skipped");
    }

    #[test]
    fn completions_out_of_order_or_of_messages_not_taken_are_our_bugs() {
        let mut ledger = SentLedger::default();
        ledger.on_taken(0, 0usize).unwrap();
        ledger.on_taken(1, 1).unwrap();
        let mut free = Vec::new();
        assert!(ledger.on_completed(1, &mut free).is_err(), "0 first");
        ledger.on_completed(0, &mut free).unwrap();
        ledger.on_completed(1, &mut free).unwrap();
        assert!(ledger.on_completed(2, &mut free).is_err(), "never taken");
    }

    #[test]
    fn resuming_frees_what_was_released_and_hands_back_the_rest_in_order() {
        let mut ledger = SentLedger::default();
        for n in 0..4 {
            ledger.on_taken(n, n as usize).unwrap();
        }
        let mut free = Vec::new();
        // tcp: sends complete when the kernel took them, here 0 to 2, but only 0 and 1 arrived
        // (2 and 3 were lost with the path); 0 was released.
        for n in 0..3 {
            ledger.on_completed(n, &mut free).unwrap();
        }
        let plan = plan_resume(sender(4, 0), receiver(2, 1), 4).unwrap();
        let again: Vec<(u64, usize)> = ledger
            .resume(&plan, &mut free)
            .unwrap()
            .map(|(n, &slot)| (n, slot))
            .collect();
        assert_eq!(free, vec![0]);
        assert_eq!(again, vec![(2, 2), (3, 3)]);
        // The arrived message 1 needs only its release now; 2 must complete again.
        assert_eq!(freed(|f| ledger.on_released(3, f)), vec![1]);
        assert_eq!(freed(|f| ledger.on_completed(2, f).unwrap()), vec![2]);
    }

    #[test]
    fn tickets_prove_only_with_the_same_secret_and_the_attempts_nonces() {
        let ticket = ResumeTicket::random().unwrap();
        let (c, s) = (fresh_nonce().unwrap(), fresh_nonce().unwrap());
        let proof = ticket.client_proof(&c, &s);
        assert!(ticket.is_client_proof(&proof, &c, &s));
        assert!(!ticket.is_server_proof(&proof, &c, &s), "sides differ");
        let replayed_on = fresh_nonce().unwrap();
        assert!(!ticket.is_client_proof(&proof, &c, &replayed_on));
        let other = ResumeTicket::random().unwrap();
        assert_ne!(other.id(), ticket.id());
        assert!(!other.is_client_proof(&proof, &c, &s));
    }

    #[test]
    fn a_key_bound_secret_is_the_same_on_both_ends_and_differs_per_key_and_session() {
        let key = AuthKey::from_bytes(&[7; 32]).unwrap();
        let other_key = AuthKey::from_bytes(&[8; 32]).unwrap();
        let (c, s) = (fresh_nonce().unwrap(), fresh_nonce().unwrap());
        let id = [1; SESSION_ID_LEN];
        let server = ResumeTicket::bound_to_key(&key, id, &c, &s).unwrap();
        let client = ResumeTicket::bound_to_key(&key, id, &c, &s).unwrap();
        let (ac, as_) = (fresh_nonce().unwrap(), fresh_nonce().unwrap());
        let proof = client.client_proof(&ac, &as_);
        assert!(server.is_client_proof(&proof, &ac, &as_));
        let stranger = ResumeTicket::bound_to_key(&other_key, id, &c, &s).unwrap();
        assert!(!stranger.is_client_proof(&proof, &ac, &as_));
        let other_session = ResumeTicket::bound_to_key(&key, [2; SESSION_ID_LEN], &c, &s).unwrap();
        assert!(!other_session.is_client_proof(&proof, &ac, &as_));
    }

    #[test]
    fn reconnect_tries_at_once_then_backs_off_doubling_to_a_second_until_the_timeout() {
        let t0 = Instant::now();
        let mut r = Reconnect::new(t0, Duration::from_secs(5));
        assert!(
            matches!(r.step(t0), ReconnectStep::Attempt { .. }),
            "at once"
        );
        assert!(
            matches!(r.step(t0), ReconnectStep::Wait { .. }),
            "one at a time"
        );
        let mut now = t0;
        let mut waits = Vec::new();
        loop {
            r.on_attempt_failed(now);
            let next = r.poll_timeout();
            waits.push(next - now);
            now = next;
            match r.step(now) {
                ReconnectStep::Attempt { attempt_deadline } => {
                    let bound = (now + ATTEMPT_TIMEOUT).min(t0 + Duration::from_secs(5));
                    assert_eq!(attempt_deadline, bound);
                }
                ReconnectStep::GiveUp => break,
                ReconnectStep::Wait { .. } => panic!("nothing to wait for at {now:?}"),
            }
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(&ms[..6], &[50, 100, 200, 400, 800, 1000]);
        assert!(ms[6..ms.len() - 1].iter().all(|&w| w == 1000), "{ms:?}");
        assert_eq!(
            now,
            t0 + Duration::from_secs(5),
            "the last wait ends at the deadline"
        );
        assert_eq!(r.attempts(), 9);
    }

    #[test]
    fn a_silent_attempt_fails_at_its_own_deadline_not_the_resume_timeout() {
        let t0 = Instant::now();
        let mut r = Reconnect::new(t0, Duration::from_secs(10));
        let ReconnectStep::Attempt { attempt_deadline } = r.step(t0) else {
            panic!("an attempt at once")
        };
        assert_eq!(attempt_deadline, t0 + ATTEMPT_TIMEOUT);
        assert_eq!(r.poll_timeout(), attempt_deadline);
        // Nothing came back: at its deadline the attempt counts as failed, and the next one
        // follows after the first backoff.
        assert!(matches!(
            r.step(attempt_deadline),
            ReconnectStep::Wait { .. }
        ));
        assert_eq!(r.poll_timeout(), attempt_deadline + FIRST_RETRY);
        assert!(matches!(
            r.step(attempt_deadline + FIRST_RETRY),
            ReconnectStep::Attempt { .. }
        ));
        assert_eq!(r.attempts(), 2);
    }

    #[test]
    fn a_parked_session_admits_its_client_until_the_timeout() {
        let t0 = Instant::now();
        let p = Parked::new(t0, Duration::from_secs(10));
        assert!(p.admits(t0 + Duration::from_millis(9_999)));
        assert!(!p.admits(t0 + Duration::from_secs(10)));
        assert_eq!(p.poll_timeout(), t0 + Duration::from_secs(10));
    }
}
