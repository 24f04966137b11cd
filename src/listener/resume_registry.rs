//! The listener's side of resumption: the server's sessions that can be resumed, by id, and
//! what happens to a connection whose first frame is `Resume{id}` (docs/design.md, "Resuming a
//! session").
//!
//! Rules:
//! - an attempt is answered on the listener's thread until its client proved the session's
//!   secret (at most [`AUTH_WINDOW`](crate::session_core::handshake::AUTH_WINDOW) for that);
//!   an unknown id, a wrong proof, a silent or garbage client get "resume refused" or nothing,
//!   and the session never sees them: a stranger cannot stall or crowd out the real client's
//!   attempts;
//! - a proven attempt is offered to its session's [`AttemptQueue`] (whose own rules say which
//!   attempts wait);
//! - a session is in the registry from its handshake until it ends ([`Registration`]'s drop);
//! - [`ParkedSessions`] shows which sessions wait for their client, for a server that gives
//!   such a session's place to a new client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::attempt_queue::{AttemptQueue, Waiting};
use crate::auth::{fresh_nonce, Nonce};
use crate::net::{ControlChannel, Received};
use crate::proto::Role;
use crate::session_core::resume::{ResumeTicket, SessionId};
use crate::session_core::resume_handshake::{
    ResumeAction, ResumeFailure, ResumeHandshake, ResumeSetup, RESUME_BUSY, RESUME_NO_SESSION,
    RESUME_REFUSED,
};
use crate::Error;

/// The server's sessions that can be resumed, by id: what the listener needs to check an
/// attempt's proof, and where it hands a proven one.
pub(crate) type ResumeRegistry = Arc<Mutex<HashMap<SessionId, Registered>>>;

/// A session in the registry.
#[derive(Debug, Clone)]
pub(crate) struct Registered {
    ticket: ResumeTicket,
    role: Role,
    credits: u32,
    attempts: AttemptQueue<ProvenAttempt>,
}

/// An attempt whose client proved the session's secret, on the listener's thread: the session
/// takes it from its `Prepare`.
#[derive(Debug)]
pub(crate) struct ProvenAttempt {
    pub(crate) control: ControlChannel,
    pub(crate) handshake: Box<ResumeHandshake>,
}

/// A new control connection whose first frame was `Resume{session, nonce}`.
#[derive(Debug)]
pub(crate) struct ResumeAttempt {
    pub(crate) control: ControlChannel,
    pub(crate) nonce: Nonce,
    /// When the listener read it (the unproven client's window starts here).
    pub(crate) since: Instant,
}

/// Answers `attempt` for the session `id` names, on the listener's thread, until the client
/// proved the session's secret (at most
/// [`AUTH_WINDOW`](crate::session_core::handshake::AUTH_WINDOW) for that), then hands it to the
/// session. An unknown id, a wrong proof, a silent or garbage client get "resume refused" or
/// nothing, and the session never sees them: a stranger cannot stall or crowd out the real
/// client's attempts. `deadline` bounds the whole exchange.
pub(crate) fn route_attempt(
    registry: &ResumeRegistry,
    id: &SessionId,
    mut attempt: ResumeAttempt,
    deadline: Instant,
) {
    let peer = attempt.control.peer_addr();
    let entry = lock(registry).get(id).cloned();
    let Some(entry) = entry else {
        log::info!("refused a resume from {peer}: no session with that id");
        attempt.control.reject(RESUME_NO_SESSION);
        return;
    };
    let nonce = match fresh_nonce() {
        Ok(nonce) => nonce,
        Err(e) => {
            log::warn!("cannot answer a resume from {peer}: {}", e.chain());
            return;
        }
    };
    let setup = ResumeSetup {
        ticket: entry.ticket,
        nonce,
        role: entry.role,
        credits: entry.credits,
        deadline,
    };
    let mut handshake = ResumeHandshake::server(setup, attempt.nonce, attempt.since);
    let mut control = attempt.control;
    let proven = loop {
        match handshake.poll_action() {
            Some(ResumeAction::Send(msg)) => {
                if control.send(&msg).is_err() {
                    return;
                }
                continue;
            }
            Some(ResumeAction::Reject(reason)) => {
                control.reject(&reason);
                continue;
            }
            Some(ResumeAction::Prepare) => break true,
            Some(other) => {
                log::warn!("a resume from {peer}: {other:?} before the proof (a bug)");
                return;
            }
            None => {}
        }
        let until = handshake.poll_timeout().unwrap_or_else(Instant::now);
        let step = match control.recv_until(until) {
            Ok(Received::Message(msg)) => handshake.on_message(msg),
            Ok(Received::Closed(_)) => Err(handshake.on_control_closed()),
            Ok(Received::Nothing) => handshake.handle_timeout(Instant::now()),
            Err(Error::Decode(e)) => Err(handshake.on_undecodable(&e.to_string())),
            Err(_) => break false,
        };
        if let Err(failure) = step {
            while let Some(action) = handshake.poll_action() {
                if let ResumeAction::Reject(reason) = action {
                    control.reject(&reason);
                }
            }
            let why = match failure {
                ResumeFailure::Attempt(why) => why,
                ResumeFailure::Session(e) => e.chain(),
                ResumeFailure::NoSession => "it said we have no such session (a bug)".into(),
            };
            log::info!("a resume from {peer} failed before its proof: {why}");
            break false;
        }
    };
    if !proven {
        return;
    }
    let proven = ProvenAttempt {
        control,
        handshake: Box::new(handshake),
    };
    log::debug!("a proven resume from {peer} handed to its session");
    entry.attempts.offer(proven);
}

impl Waiting for ProvenAttempt {
    fn client_gone(&mut self) -> bool {
        self.control.peer_gone()
    }

    fn tell_busy(mut self) {
        self.control.reject(RESUME_BUSY);
    }

    fn tell_refused(mut self) {
        log::warn!(
            "refused a proven resume from {}: its session is gone",
            self.control.peer_addr()
        );
        self.control.reject(RESUME_REFUSED);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A session's entry in the registry, removed when the session ends.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: ResumeRegistry,
    id: SessionId,
    attempts: AttemptQueue<ProvenAttempt>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.registry).remove(&self.id);
        self.attempts.close();
    }
}

/// The sessions of one [`crate::Listener`] that wait for their client to resume, for a server
/// that gives such a session's place to a new client (docs/design.md, "A new client and a
/// parked session"). Clones share the view.
#[derive(Debug, Clone)]
pub struct ParkedSessions {
    registry: ResumeRegistry,
}

impl ParkedSessions {
    pub(crate) fn new(registry: ResumeRegistry) -> Self {
        Self { registry }
    }

    /// How long the session parked longest has waited, with no attempt of its client queued
    /// (`None`: no session is parked).
    pub fn longest_wait(&self, now: Instant) -> Option<Duration> {
        self.parked()
            .into_iter()
            .map(|(since, _)| now.saturating_duration_since(since))
            .max()
    }

    /// Takes over the session parked longest, if it has waited at least `min` with no attempt
    /// of its client queued or in progress: it stops waiting and ends (with
    /// [`Error::TakenOver`]), and its client's later attempts are told that no such session
    /// exists. Returns whether a session was taken over; its place is free once it ended.
    pub fn take_over_longest(&self, min: Duration, now: Instant) -> bool {
        let mut parked = self.parked();
        parked.sort_by_key(|(since, _)| *since);
        parked
            .into_iter()
            .filter(|(since, _)| now.saturating_duration_since(*since) >= min)
            .any(|(since, attempts)| attempts.take_over(since))
    }

    fn parked(&self) -> Vec<(Instant, AttemptQueue<ProvenAttempt>)> {
        let queues: Vec<_> = lock(&self.registry)
            .values()
            .map(|r| r.attempts.clone())
            .collect();
        queues
            .into_iter()
            .filter_map(|q| q.parked_since().map(|since| (since, q)))
            .collect()
    }
}

/// Registers a server session's `ticket` for the listener: its attempts arrive on the queue the
/// registration holds, until the registration is dropped.
pub(crate) fn register(
    registry: &ResumeRegistry,
    ticket: &ResumeTicket,
    role: Role,
    credits: u32,
) -> Registration {
    let attempts = AttemptQueue::new();
    let id = *ticket.id();
    lock(registry).insert(
        id,
        Registered {
            ticket: ticket.clone(),
            role,
            credits,
            attempts: attempts.clone(),
        },
    );
    Registration {
        registry: registry.clone(),
        id,
        attempts,
    }
}

impl Registration {
    /// The session's queue of proven attempts.
    pub(crate) fn attempts(&self) -> &AttemptQueue<ProvenAttempt> {
        &self.attempts
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::proto::{Counts, Message};

    /// A client of the listener's answer to a Resume: sends Resume, reads the challenge,
    /// answers with `proof_with`'s proof (the right ticket or another), returns what the
    /// server said next and whether the session got the attempt.
    fn attempt_with(proof_with: &ResumeTicket, ticket: &ResumeTicket) -> (Message, bool) {
        use std::io::Write;
        let registry = ResumeRegistry::default();
        let session = AttemptQueue::new();
        lock(&registry).insert(
            *ticket.id(),
            Registered {
                ticket: ticket.clone(),
                role: Role::Receiver,
                credits: 2,
                attempts: session.clone(),
            },
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_end, _) = listener.accept().unwrap();
        let client_nonce = [3; 32];
        let id = *ticket.id();
        let routed = std::thread::spawn(move || {
            let attempt = ResumeAttempt {
                control: ControlChannel::new(server_end).unwrap(),
                nonce: client_nonce,
                since: Instant::now(),
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            route_attempt(&registry, &id, attempt, deadline);
            session.take(None).is_some()
        });
        let mut ours = ControlChannel::new(client.try_clone().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let Ok(Received::Message(Message::ResumeChallenge { nonce, .. })) =
            ours.recv_until(deadline)
        else {
            panic!("no challenge");
        };
        let proof = Message::ResumeProof {
            proof: proof_with.client_proof(&client_nonce, &nonce),
            counts: Counts {
                messages: 0,
                released: 0,
            },
            blob: vec![],
        };
        client
            .write_all(&crate::proto::encode_frame(&proof))
            .unwrap();
        let handed = routed.join().unwrap();
        let next = match ours.recv_until(Instant::now() + Duration::from_millis(300)) {
            Ok(Received::Message(msg)) => msg,
            other => Message::reject(&format!("nothing: {other:?}")),
        };
        (next, handed)
    }

    #[test]
    fn only_a_client_that_proves_the_secret_reaches_the_session() {
        let ticket = ResumeTicket::random().unwrap();
        let stranger = ResumeTicket::from_parts(ticket.id(), &[9; 32]).unwrap();
        let (answer, handed) = attempt_with(&stranger, &ticket);
        assert_eq!(answer, Message::reject(RESUME_REFUSED));
        assert!(
            !handed,
            "a stranger who knows the id never reaches the session"
        );
        let (_, handed) = attempt_with(&ticket, &ticket);
        assert!(handed, "the real client's proven attempt is handed over");
    }
}
