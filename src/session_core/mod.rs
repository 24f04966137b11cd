//! The I/O-free session core: every protocol rule, and nothing else.
//!
//! In the spirit of quinn-proto, the state machines here never touch a socket, a transport or
//! a clock. Their drivers ([`crate::sender`], [`crate::receiver`], [`crate::session`]) feed
//! them events — a control message arrived, a transport completion, the control or data path
//! closed, the application asked for something, a deadline passed — always together with the
//! current time, and carry out the actions the cores queue (send this control message, post
//! this slot, return these credits, shut down writing, reject with this reason, close the data
//! path). When to wake up is a pure question (`poll_timeout`), kept apart from what happens
//! then (`handle_timeout`). The rules are written down in `docs/design.md` ("The wire protocol
//! and its rules"); each one is enforced in exactly one place below and tested without sockets
//! or sleeps (`tests` at the end of each module and the property tests in
//! `src/session_core/proptests.rs`).

pub(crate) mod handshake;
#[cfg(test)]
mod proptests;
pub(crate) mod receiving;
pub(crate) mod sending;

use std::time::{Duration, Instant};

use crate::Error;

/// How long the sender waits, after Finish, for the receiver to acknowledge by closing.
pub(crate) const FINISH_LINGER: Duration = Duration::from_secs(10);
/// After the data path closed without Finish: how long the receiver waits for a Finish that
/// may still be in flight on the control channel before it reports the peer lost.
pub(crate) const FINISH_GRACE: Duration = Duration::from_secs(2);
/// After Finish: how long the receiver waits without any arrival for the messages the count
/// still promises (the sender sends Finish only after every send completed, so they are
/// already on their way).
pub(crate) const FINISH_PROGRESS: Duration = Duration::from_secs(10);

/// A rule of the wire protocol that the peer broke. Always ends the session; the reason is sent
/// to the peer in a Reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolViolation {
    /// A message that is not allowed at this point of the session.
    #[error("expected {expected}, got {got}")]
    Unexpected {
        /// What the protocol allows here.
        expected: &'static str,
        /// The message that came instead.
        got: &'static str,
    },
    /// A data message arrived after the sender's Finish had counted every message.
    #[error("a message arrived after Finish{{count: {count}}} had counted all of them")]
    PastFinish {
        /// The count the sender announced.
        count: u64,
    },
    /// Finish announced fewer messages than had already arrived.
    #[error("Finish says {count} message(s) but {arrived} arrived")]
    FinishBelowArrived {
        /// The announced count.
        count: u64,
        /// Messages that had arrived.
        arrived: u64,
    },
    /// A second Finish.
    #[error("Finish sent twice (first {first}, then {second})")]
    FinishTwice {
        /// The first count.
        first: u64,
        /// The second count.
        second: u64,
    },
    /// The receiver claims to have released more messages than were sent.
    #[error("credit for {released} message(s) released but only {sent} sent")]
    CreditInvented {
        /// Claimed cumulative releases.
        released: u64,
        /// Messages actually sent.
        sent: u64,
    },
    /// The cumulative release count went backwards.
    #[error("credit went backwards from {previous} to {released}")]
    CreditRegressed {
        /// The count we had.
        previous: u64,
        /// The smaller count received.
        released: u64,
    },
    /// A message arrived while every slot held an unreleased message.
    #[error(
        "a message arrived with all {capacity} slot(s) in use (the sender exceeded its credit)"
    )]
    CreditOverrun {
        /// The window size.
        capacity: u32,
    },
    /// The sender used the data path before the receiver said Ready.
    #[error("the sender sent data before Ready")]
    DataBeforeReady,
}

/// What an end does after an error ended its operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Nothing: the session stays usable (an interruption by the stop flag).
    KeepOpen,
    /// Close without a word: the peer ended the session (its Reject, its loss) or it was over.
    Close,
    /// Tell the peer why (a Reject with this reason), then close: our own failures and the
    /// peer's violations.
    Reject(String),
}

/// The failure policy, the same for both ends (`who` names ours in the reason).
pub(crate) fn on_failure(e: &Error, who: &str) -> AfterFailure {
    match e {
        Error::Interrupted => AfterFailure::KeepOpen,
        Error::PeerLost { .. } | Error::Rejected(_) | Error::Closed => AfterFailure::Close,
        Error::Protocol(v) => AfterFailure::Reject(format!("protocol violation: {v}")),
        other => AfterFailure::Reject(format!("the {who} failed: {other}")),
    }
}

/// How long a data-path failure waits for the control channel to say why (the peer's Reject
/// or its close, often the cause of what the data path saw).
pub(crate) const EXPLAIN_WAIT: Duration = Duration::from_millis(500);
/// How long a sender whose send failed (not a closed data path) looks for the receiver's
/// Reject before reporting the failure as its own: shorter than the receiver's wait for ours.
pub(crate) const OWN_FAILURE_EXPLAIN_WAIT: Duration = Duration::from_millis(200);

/// Whether a data-path error may be explained by the peer's words on the control channel, and
/// how long to look for them: `None` for errors that are not the data path's.
pub(crate) fn explain_wait(e: &Error, role: crate::proto::Role) -> Option<Duration> {
    match e {
        Error::TransportClosed { .. } => Some(EXPLAIN_WAIT),
        Error::TransportIo { .. }
        | Error::TransportProtocol { .. }
        | Error::Verbs { .. }
        | Error::VerbsCompletion { .. }
        | Error::Doca { .. } => Some(match role {
            crate::proto::Role::Sender => OWN_FAILURE_EXPLAIN_WAIT,
            crate::proto::Role::Receiver => EXPLAIN_WAIT,
        }),
        _ => None,
    }
}

/// The earlier of two optional deadlines.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// `now + d`, saturating far in the future instead of overflowing (`Instant + Duration` panics
/// on overflow; a caller may configure an enormous timeout).
pub(crate) fn deadline_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}
