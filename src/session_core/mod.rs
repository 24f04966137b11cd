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
pub(crate) mod lifecycle;
pub(crate) mod paths;
#[cfg(test)]
mod proptests;
pub(crate) mod receiving;
pub(crate) mod resume;
pub(crate) mod resume_handshake;
#[cfg(test)]
mod resume_proptests;
pub(crate) mod sending;

use std::time::{Duration, Instant};

use crate::net::Lost;
use crate::proto::{Message, Role};
use crate::time::deadline_after;
use crate::{Error, ErrorKind};

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
        Error::Interrupted
        | Error::WouldBlock
        | Error::DeadlinePassed { .. }
        | Error::BufferTooSmall { .. } => AfterFailure::KeepOpen,
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

/// A data-path failure waiting for the peer's words on the control channel, which often say
/// why (its Reject, or its close). Rules:
/// - only the data path's own errors are explained (a closed data path, a socket, verbs or
///   DOCA failure); every other error stands as it is;
/// - the wait lasts [`EXPLAIN_WAIT`], or [`OWN_FAILURE_EXPLAIN_WAIT`] for a sender whose
///   send failed (the receiver's Reject, if any, is already on its way; a closed data path
///   waits the full time on either end);
/// - the peer's Reject explains it as [`Error::Rejected`]; the control connection closed
///   explains it as the peer lost; other messages are passed over;
/// - unexplained at the deadline: a closed data path is the peer lost, and so is a socket error
///   that says the peer's host stopped answering (timed out, unreachable, aborted); anything
///   else is our own failure, kept as it is.
#[derive(Debug)]
pub(crate) struct Explanation {
    deadline: Instant,
}

/// What the control channel said about a data-path failure.
#[derive(Debug)]
pub(crate) enum Explained {
    /// The peer ended the session on purpose and said why.
    Rejected(String),
    /// The control connection closed too: the peer is gone.
    Lost(Lost),
}

impl Explained {
    /// The session's error, `messages` being its count.
    pub(crate) fn into_error(self, messages: u64) -> Error {
        match self {
            Explained::Rejected(reason) => Error::Rejected(reason),
            Explained::Lost(lost) => lost.into_error(messages),
        }
    }
}

impl Explanation {
    /// Starts looking for the peer's words about `e` at `now`; `None` when `e` is not the data
    /// path's (nothing to explain).
    pub(crate) fn start(e: &Error, role: Role, now: Instant) -> Option<Self> {
        let wait = match (e, e.kind()) {
            (Error::TransportClosed { .. }, _) => EXPLAIN_WAIT,
            (_, ErrorKind::PathBroken | ErrorKind::PathFailed) => match role {
                Role::Sender => OWN_FAILURE_EXPLAIN_WAIT,
                Role::Receiver => EXPLAIN_WAIT,
            },
            _ => return None,
        };
        Some(Self {
            deadline: deadline_after(now, wait),
        })
    }

    /// Until when to look. Pure.
    pub(crate) fn poll_timeout(&self) -> Instant {
        self.deadline
    }

    /// A control message arrived: a Reject explains the failure; anything else does not.
    pub(crate) fn on_message(&mut self, msg: Message) -> Option<Explained> {
        match msg {
            Message::Reject { reason } => Some(Explained::Rejected(reason)),
            _ => None,
        }
    }

    /// The control connection closed: the peer is lost.
    pub(crate) fn on_control_closed(self, lost: Lost) -> Explained {
        Explained::Lost(lost)
    }

    /// Nothing explained it by the deadline: the error as the session reports it.
    pub(crate) fn unexplained(self, e: Error, messages: u64) -> Error {
        match e {
            Error::TransportClosed { .. } => Lost::closed(&e.to_string()).into_error(messages),
            // The kernel gave up on the peer's host (keepalive or retransmissions unanswered,
            // its link down): the data path's way of saying the peer vanished.
            Error::TransportIo {
                transport,
                what,
                source,
            } if peer_vanished(source.kind()) => Lost {
                reason: format!("{transport} transport failed ({what})"),
                cause: Some(source),
            }
            .into_error(messages),
            other => other,
        }
    }
}

/// Socket errors that mean the peer's host stopped answering (not a local failure).
fn peer_vanished(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind;
    matches!(
        kind,
        ErrorKind::TimedOut
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::ConnectionAborted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed() -> Error {
        Error::TransportClosed { transport: "tcp" }
    }

    fn io(kind: std::io::ErrorKind) -> Error {
        Error::TransportIo {
            transport: "tcp",
            what: "send",
            source: std::io::Error::from(kind),
        }
    }

    #[test]
    fn only_data_path_errors_wait_and_a_failed_send_waits_less_than_a_closed_path() {
        let now = Instant::now();
        assert!(Explanation::start(&Error::Interrupted, Role::Receiver, now).is_none());
        assert!(Explanation::start(&Error::Rejected("x".into()), Role::Sender, now).is_none());
        let wait = |e: &Error, role| {
            Explanation::start(e, role, now)
                .map(|x| x.poll_timeout() - now)
                .expect("explained")
        };
        assert_eq!(wait(&closed(), Role::Sender), EXPLAIN_WAIT);
        assert_eq!(wait(&closed(), Role::Receiver), EXPLAIN_WAIT);
        let reset = io(std::io::ErrorKind::ConnectionReset);
        assert_eq!(wait(&reset, Role::Sender), OWN_FAILURE_EXPLAIN_WAIT);
        assert_eq!(wait(&reset, Role::Receiver), EXPLAIN_WAIT);
    }

    #[test]
    fn the_peers_reject_or_close_explains_the_failure_and_other_messages_do_not() {
        let now = Instant::now();
        let mut x = Explanation::start(&closed(), Role::Receiver, now).expect("explained");
        assert!(x.on_message(Message::Credit { released: 1 }).is_none());
        let e = x
            .on_message(Message::reject("disk full"))
            .expect("a Reject explains")
            .into_error(7);
        assert!(
            matches!(e, Error::Rejected(ref r) if r == "disk full"),
            "{e}"
        );

        let x = Explanation::start(&closed(), Role::Receiver, now).expect("explained");
        let e = x
            .on_control_closed(Lost::closed("control connection closed by the peer"))
            .into_error(7);
        assert!(matches!(e, Error::PeerLost { messages: 7, .. }), "{e}");
    }

    #[test]
    fn unexplained_a_closed_path_or_a_vanished_host_is_the_peer_lost_and_the_rest_our_own() {
        let now = Instant::now();
        let unexplained = |e: Error| {
            Explanation::start(&e, Role::Sender, now)
                .expect("explained")
                .unexplained(e, 3)
        };
        assert!(matches!(
            unexplained(closed()),
            Error::PeerLost { messages: 3, .. }
        ));
        let e = unexplained(io(std::io::ErrorKind::TimedOut));
        assert!(
            matches!(
                e,
                Error::PeerLost {
                    messages: 3,
                    cause: Some(_),
                    ..
                }
            ),
            "{e}"
        );
        let e = unexplained(io(std::io::ErrorKind::PermissionDenied));
        assert!(matches!(e, Error::TransportIo { .. }), "{e}");
    }
}
