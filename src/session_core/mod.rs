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

use std::time::Duration;

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

impl AfterFailure {
    /// Whether the session ends, and with which Reject: `None` keeps it open, `Some(None)`
    /// closes without a word, `Some(Some(reason))` rejects then closes.
    pub(crate) fn ends(self) -> Option<Option<String>> {
        match self {
            AfterFailure::KeepOpen => None,
            AfterFailure::Close => Some(None),
            AfterFailure::Reject(reason) => Some(Some(reason)),
        }
    }
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
