//! The I/O-free session core: every protocol rule, and nothing else.
//!
//! In the spirit of quinn-proto, the state machines here never touch a socket, a transport or
//! a clock. Their drivers ([`crate::sender`], [`crate::receiver`], [`crate::session`]) feed
//! them events — a control message arrived, a transport completion, the control or data path
//! closed, the application asked for something — always together with the current time, and
//! act on what they answer: deliver this slot, post this receive, announce these credits, wait
//! until this deadline, or fail with this error. The rules are written down in
//! `docs/design.md` ("The wire protocol and its rules"); each one is enforced in exactly one
//! place below and tested without sockets or sleeps (`tests` at the end of each module and the
//! property tests in `src/session_core/proptests.rs`).

pub(crate) mod handshake;
#[cfg(test)]
mod proptests;
pub(crate) mod receiving;
pub(crate) mod sending;

use std::time::Duration;

/// How long the sender waits, after Finish, for the receiver to acknowledge by closing.
pub(crate) const FINISH_LINGER: Duration = Duration::from_secs(10);
/// After the data path closed without Finish: how long the receiver waits for a Finish that
/// may still be in flight on the control channel before it reports the peer lost.
pub(crate) const FINISH_GRACE: Duration = Duration::from_secs(2);
/// After Finish: how long the receiver waits without any arrival for the messages the count
/// still promises (the sender sends Finish only after every send completed, so they are
/// already on their way).
pub(crate) const FINISH_PROGRESS: Duration = Duration::from_secs(10);
