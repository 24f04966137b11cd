//! The handshake's rules: which message each step waits for, and what ends it instead.
//!
//! Order: the client sends Hello; the server answers with Hello or Reject; both connect their
//! transports with the blobs; the receiver posts every slot and sends Ready; the sender sends
//! nothing before Ready. One deadline covers all of it (see [`crate::session`]).

use crate::proto::{Hello, Message};
use crate::{Error, ProtocolViolation};

/// A handshake step that waits for a message from the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The server waits for the client's Hello.
    ClientHello,
    /// The client waits for the server's Hello (or a Reject).
    ServerHello,
    /// The sender waits for the receiver's Ready.
    Ready,
}

impl Step {
    /// What the step waits for, as said in errors and timeouts.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Step::ClientHello => "the client's hello",
            Step::ServerHello => "the server's hello",
            Step::Ready => "Ready",
        }
    }
}

/// What a step got: a Hello (hello steps) or nothing more (Ready).
#[derive(Debug)]
pub(crate) enum Got {
    /// The peer's Hello.
    Hello(Box<Hello>),
    /// Ready arrived.
    Ready,
}

/// Applies the step's rule to a message that arrived: the expected message, the peer's Reject
/// as [`Error::Rejected`], anything else as a protocol violation (to be sent back as a Reject).
pub(crate) fn on_message(step: Step, msg: Message) -> Result<Got, Error> {
    match (step, msg) {
        (Step::ClientHello | Step::ServerHello, Message::Hello(h)) => Ok(Got::Hello(Box::new(h))),
        (Step::Ready, Message::Ready) => Ok(Got::Ready),
        (_, Message::Reject { reason }) => Err(Error::Rejected(reason)),
        (step, other) => Err(Error::Protocol(ProtocolViolation::Unexpected {
            expected: match step {
                Step::ClientHello | Step::ServerHello => "Hello",
                Step::Ready => "Ready",
            },
            got: other.name(),
        })),
    }
}

/// Checks the peer's hello against ours; the error is the reason sent in the Reject.
pub(crate) fn check_peer(ours: &Hello, theirs: &Hello) -> Result<(), String> {
    if ours.role == theirs.role {
        return Err(format!(
            "both ends are {}s: one end must send and the other receive",
            ours.role
        ));
    }
    if ours.transport != theirs.transport {
        return Err(format!(
            "transport mismatch: one end uses {}, the other {} (choose the same --transport on both ends)",
            ours.transport, theirs.transport
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_takes_only_its_message() {
        assert!(matches!(
            on_message(Step::Ready, Message::Ready),
            Ok(Got::Ready)
        ));
        let e = on_message(Step::Ready, Message::Credit { released: 1 }).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol violation by peer: expected Ready, got Credit"
        );
        let e = on_message(Step::ClientHello, Message::Finish { count: 0 }).unwrap_err();
        assert!(e.to_string().contains("expected Hello, got Finish"), "{e}");
        let e = on_message(
            Step::ServerHello,
            Message::Reject {
                reason: "busy".into(),
            },
        )
        .unwrap_err();
        assert!(matches!(e, Error::Rejected(r) if r == "busy"));
    }
}
