//! Resuming a session after its path broke: the rules, without I/O (issue 24, first step: the
//! drivers do not call this yet; docs/design.md, "Resuming a session", says what is wired).
//!
//! Rules kept here:
//! - messages are numbered 0, 1, 2, ... in the order the sender took them; a number is never
//!   reused, across any number of resumes;
//! - a message counts as *arrived* when it landed whole in a receive slot (and, with
//!   `--checksum`, passed it). An arrived message is never sent again and never lost: it stays in
//!   its slot until the application is done with it, then is *released* (the credit rule);
//! - the sender keeps every message it took until the receiver released it *and* its send
//!   completed ([`SentLedger`]): only those can be sent again, so the sender never needs data
//!   the application already reused;
//! - the resume point comes from the receiver: its arrived and released counts
//!   ([`ReceiverPosition`]). The sender checks them against what it knows ([`plan_resume`]):
//!   nothing arrived that was not sent, nothing released that did not arrive, releases never go
//!   back, and no more held than the credits. Anything else is a protocol violation and ends
//!   the session as today;
//! - after a resume the sender sends again, in order and before any new message, every message
//!   from `arrived` to what it had taken; its window restarts from the receiver's `released`;
//!   a Finish sent before the break is sent again after those (its count is unchanged);
//! - the receiver expects message `arrived` next: a lower number is a duplicate, dropped and
//!   never shown to the application; a higher one is a gap, a protocol violation
//!   ([`classify_arrival`]);
//! - only the two ends can resume: a session has an identity (a random id and a secret from the
//!   original handshake, derived from the pre-shared key when there is one, so it never crosses
//!   the wire) and both ends prove they hold the secret over fresh nonces on every attempt
//!   ([`ResumeTicket`]); a replayed attempt fails on the new nonce;
//! - time: the client tries again with a doubling backoff, from [`FIRST_RETRY`] up to
//!   [`MAX_RETRY`], until the resume timeout after the break passes ([`Reconnect`]); the server
//!   keeps the session parked for the same timeout ([`Parked`]). Past it, the session ends as
//!   it does today: peer lost, with the count of messages that arrived.

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::auth::{fresh_nonce, AuthKey, Nonce, Proof};
use crate::time::deadline_after;
use crate::{Error, ProtocolViolation, Result};

/// The resume timeout when none is set: long enough for a link flap (a port's link training
/// takes 1-3 s, and RC's own retries put a QP in error within about half a second before that)
/// and for a reset TCP connection to be replaced; short enough that a peer that really died is
/// reported within seconds.
pub(crate) const DEFAULT_RESUME_TIMEOUT: Duration = Duration::from_secs(10);
/// The client's first wait before it tries to reconnect.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(50);
/// The longest wait between two attempts.
pub(crate) const MAX_RETRY: Duration = Duration::from_secs(1);

/// Length of a session id.
pub(crate) const SESSION_ID_LEN: usize = 16;
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
        let id = fresh_nonce()?;
        let secret = fresh_nonce()?;
        Self::from_parts(&id[..SESSION_ID_LEN], &secret)
    }

    /// The ticket from what travels in the server's hello (`id`, `secret`).
    pub(crate) fn from_parts(id: &[u8], secret: &[u8]) -> Result<Self> {
        let id = SessionId::try_from(id).map_err(|_| {
            Error::Internal(format!(
                "a session id has {SESSION_ID_LEN} bytes, not {}",
                id.len()
            ))
        })?;
        Ok(Self {
            id,
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
        return Err(Error::Protocol(ProtocolViolation::CreditInvented {
            released,
            sent: arrived,
        }));
    }
    if released < sender.released {
        return Err(Error::Protocol(ProtocolViolation::CreditRegressed {
            previous: sender.released,
            released,
        }));
    }
    // The sender never had more than `credits` unreleased, and the receiver's releases only
    // grew since: `taken - released` fits, and so does what the receiver holds.
    if sender.taken - released > u64::from(credits) {
        return Err(Error::Protocol(ProtocolViolation::CreditOverrun {
            capacity: credits,
        }));
    }
    Ok(ResumePlan {
        resend: arrived..sender.taken,
        released,
    })
}

/// What the receiver does with a numbered message on a resumed path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The next message: deliver it.
    Next,
    /// Already arrived before: drop it, the application never sees it.
    Duplicate,
}

/// Classifies message `number` when the receiver expects `expected` next.
///
/// # Errors
/// A number past the expected one (a message would be skipped): [`Error::Protocol`].
pub(crate) fn classify_arrival(expected: u64, number: u64) -> Result<Arrival> {
    match number.cmp(&expected) {
        std::cmp::Ordering::Equal => Ok(Arrival::Next),
        std::cmp::Ordering::Less => Ok(Arrival::Duplicate),
        std::cmp::Ordering::Greater => Err(Error::Protocol(ProtocolViolation::ResumeGap {
            expected,
            got: number,
        })),
    }
}

/// One kept message: its staging slot, and whether its send completed on the current path.
#[derive(Debug)]
struct Kept<T> {
    slot: T,
    completed: bool,
}

/// The messages the sender keeps until the receiver released them: `T` is the staging slot
/// that holds one. A slot is free again once its message was released and its send completed
/// (a completion may come after the credit: they travel on different paths).
#[derive(Debug)]
pub(crate) struct SentLedger<T> {
    /// The number of the oldest kept message.
    first: u64,
    kept: std::collections::VecDeque<Kept<T>>,
    released: u64,
}

impl<T> Default for SentLedger<T> {
    fn default() -> Self {
        Self {
            first: 0,
            kept: std::collections::VecDeque::new(),
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
        self.kept.push_back(Kept {
            slot,
            completed: false,
        });
        Ok(())
    }

    /// The send of message `number` completed; returns the slots now free.
    ///
    /// # Errors
    /// A number not kept, or a completion out of order: [`Error::Internal`].
    pub(crate) fn on_completed(&mut self, number: u64) -> Result<Vec<T>> {
        let index = number
            .checked_sub(self.first)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < self.kept.len())
            .ok_or_else(|| Error::Internal(format!("completion of message {number}, not kept")))?;
        if self.kept.iter().take(index).any(|k| !k.completed) {
            return Err(Error::Internal(format!(
                "completion of message {number} before an older one"
            )));
        }
        self.kept[index].completed = true;
        Ok(self.take_free())
    }

    /// The receiver released every message below `released`; returns the slots now free.
    pub(crate) fn on_released(&mut self, released: u64) -> Vec<T> {
        self.released = self.released.max(released);
        self.take_free()
    }

    fn take_free(&mut self) -> Vec<T> {
        let mut free = Vec::new();
        while self.first < self.released && self.kept.front().is_some_and(|k| k.completed) {
            if let Some(k) = self.kept.pop_front() {
                free.push(k.slot);
                self.first += 1;
            }
        }
        free
    }

    /// The path broke and the session resumes by `plan`: the messages that arrived count as
    /// completed, the ones to send again as not (the old path's completions never come), and
    /// the releases restart from the plan's. Returns the slots now free and the ones to send
    /// again, in order, with their numbers.
    ///
    /// # Errors
    /// A plan for messages this ledger does not keep: [`Error::Internal`].
    pub(crate) fn resume(&mut self, plan: &ResumePlan) -> Result<Resumed<'_, T>> {
        if plan.resend.end != self.taken() || plan.resend.start < self.first {
            return Err(Error::Internal(format!(
                "resume plan {:?} for a ledger keeping {}..{}",
                plan.resend,
                self.first,
                self.taken()
            )));
        }
        for (k, number) in self.kept.iter_mut().zip(self.first..) {
            k.completed = number < plan.resend.start;
        }
        let free = self.on_released(plan.released);
        let again = self
            .kept
            .iter()
            .zip(self.first..)
            .filter(|(_, number)| plan.resend.contains(number))
            .map(|(k, number)| (number, &k.slot))
            .collect();
        Ok(Resumed { free, again })
    }
}

/// What [`SentLedger::resume`] hands back.
#[derive(Debug)]
pub(crate) struct Resumed<'a, T> {
    /// Slots free again (their messages arrived and were released).
    pub(crate) free: Vec<T>,
    /// The messages to send again, in order: number and slot.
    pub(crate) again: Vec<(u64, &'a T)>,
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
    in_attempt: bool,
}

impl Reconnect {
    /// The schedule after a break at `lost_at`, within `timeout`.
    pub(crate) fn new(lost_at: Instant, timeout: Duration) -> Self {
        Self {
            deadline: deadline_after(lost_at, timeout),
            next_attempt: lost_at,
            backoff: FIRST_RETRY,
            attempts: 0,
            in_attempt: false,
        }
    }

    /// Attempts started so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// When something happens next (pure).
    pub(crate) fn poll_timeout(&self) -> Instant {
        if self.in_attempt {
            self.deadline
        } else {
            self.next_attempt.min(self.deadline)
        }
    }

    /// What to do at `now`.
    pub(crate) fn step(&mut self, now: Instant) -> ReconnectStep {
        if now >= self.deadline {
            return ReconnectStep::GiveUp;
        }
        if self.in_attempt || now < self.next_attempt {
            return ReconnectStep::Wait {
                until: self.poll_timeout(),
            };
        }
        self.in_attempt = true;
        self.attempts += 1;
        ReconnectStep::Attempt {
            attempt_deadline: self.deadline,
        }
    }

    /// The attempt failed at `now` (refused, timed out, the server busy): the next one waits
    /// twice as long as the last, at most [`MAX_RETRY`].
    pub(crate) fn on_attempt_failed(&mut self, now: Instant) {
        self.in_attempt = false;
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
        assert!(matches!(
            violation(sender(5, 2), receiver(3, 4)),
            ProtocolViolation::CreditInvented { .. }
        ));
        assert!(matches!(
            violation(sender(5, 3), receiver(4, 2)),
            ProtocolViolation::CreditRegressed { .. }
        ));
        assert!(matches!(
            violation(sender(9, 2), receiver(4, 2)),
            ProtocolViolation::CreditOverrun { capacity: 4 }
        ));
    }

    #[test]
    fn a_duplicate_is_dropped_and_a_gap_is_a_violation() {
        assert_eq!(classify_arrival(5, 5).unwrap(), Arrival::Next);
        assert_eq!(classify_arrival(5, 3).unwrap(), Arrival::Duplicate);
        assert!(matches!(
            classify_arrival(5, 6),
            Err(Error::Protocol(ProtocolViolation::ResumeGap {
                expected: 5,
                got: 6
            }))
        ));
    }

    #[test]
    fn a_slot_is_free_only_once_released_and_completed_in_either_order() {
        let mut ledger = SentLedger::default();
        for n in 0..3 {
            ledger.on_taken(n, n as usize).unwrap();
        }
        assert!(ledger.on_completed(0).unwrap().is_empty(), "not released");
        assert_eq!(ledger.on_released(2), vec![0], "1 has not completed");
        assert_eq!(ledger.on_completed(1).unwrap(), vec![1]);
        assert!(ledger.on_completed(2).unwrap().is_empty(), "2 not released");
        assert_eq!(ledger.on_released(3), vec![2]);
        assert_eq!(ledger.taken(), 3);
        assert!(ledger.on_taken(5, 5).is_err(), "numbers are never skipped");
    }

    #[test]
    fn resuming_frees_what_was_released_and_hands_back_the_rest_in_order() {
        let mut ledger = SentLedger::default();
        for n in 0..4 {
            ledger.on_taken(n, n as usize).unwrap();
        }
        ledger.on_completed(0).unwrap();
        // 0 and 1 arrived, 0 released; 2 and 3 were lost with the path.
        let plan = plan_resume(sender(4, 0), receiver(2, 1), 4).unwrap();
        let resumed = ledger.resume(&plan).unwrap();
        assert_eq!(resumed.free, vec![0]);
        assert_eq!(resumed.again, vec![(2, &2), (3, &3)]);
        // The arrived message 1 needs only its release now.
        assert_eq!(ledger.on_released(2), vec![1]);
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
    fn reconnect_backs_off_doubling_to_a_second_and_gives_up_at_the_timeout() {
        let t0 = Instant::now();
        let mut r = Reconnect::new(t0, Duration::from_secs(5));
        assert!(matches!(r.step(t0), ReconnectStep::Attempt { .. }));
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
                    assert_eq!(attempt_deadline, t0 + Duration::from_secs(5));
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
    fn a_parked_session_admits_its_client_until_the_timeout() {
        let t0 = Instant::now();
        let p = Parked::new(t0, Duration::from_secs(10));
        assert!(p.admits(t0 + Duration::from_millis(9_999)));
        assert!(!p.admits(t0 + Duration::from_secs(10)));
        assert_eq!(p.poll_timeout(), t0 + Duration::from_secs(10));
    }
}
