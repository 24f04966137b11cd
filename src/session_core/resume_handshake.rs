//! The resume handshake's rules (docs/design.md, "Resuming a session"), as a state machine the
//! drivers run on each new control connection of a resume (`src/session/resume.rs`, and the
//! listener's thread up to the client's proof: `src/listener/resume_registry.rs`).
//!
//! Order: the client's Resume{session, nonce}; the server's ResumeChallenge{nonce, proof} (the
//! server proves the session's secret first, so a client never tells its counts to a
//! stranger); the client's ResumeProof{proof, counts, blob}; the server, only now, tears its
//! old data path down, takes its counts and prepares a new one ([`ResumeAction::Prepare`]),
//! then answers ResumeAccepted{counts, blob}, or a Reject at any step; both connect the new data
//! path with the peer's blob; the receiver posts its free slots and sends Ready; the sender
//! sends nothing before Ready, then first the messages its plan names.
//!
//! Events in: a control message ([`ResumeHandshake::on_message`]), one that did not decode,
//! the server's preparation done, the data path connected or failed, the control connection
//! closed, a deadline passed. Out: actions ([`ResumeAction`]), the deadline
//! ([`ResumeHandshake::poll_timeout`], pure), and the end: resumed (with the peer's counts and,
//! for a sender, the plan) or a [`ResumeFailure`].
//!
//! Rules kept here:
//! - each end accepts only a proof under the session's secret over this attempt's two nonces,
//!   and a failed proof is answered with "resume refused", nothing more;
//! - nothing a peer does before it proved the secret ends the session, only the attempt: a
//!   stranger cannot end a parked (or live) session, and a client keeps trying until the resume
//!   timeout when whatever answers cannot prove it (an impostor, a busy server). Once the peer
//!   proved it, its Reject or a violation ends the session;
//! - one answer ends a client's session before any proof: "no session with that id"
//!   ([`RESUME_NO_SESSION`], from a restarted server, or one whose session ended or gave its
//!   place to a new client): it cannot change, and whoever could forge it answers on the
//!   server's address and could refuse every attempt anyway;
//! - the server sets nothing up and takes no count for an attempt until the client proved the
//!   secret, and gives an unproven client at most [`AUTH_WINDOW`];
//! - each end checks the other's counts: a sender by [`plan_resume`], a receiver by
//!   [`check_sender_counts`]; bad counts are a protocol violation, answered with a Reject;
//! - data on a resumed tcp path before Ready is a violation, as in the first handshake;
//! - one deadline covers the attempt.

use std::collections::VecDeque;
use std::time::Instant;

use super::handshake::AUTH_WINDOW;
use super::resume::{plan_resume, ReceiverPosition, ResumePlan, ResumeTicket, SenderPosition};
use crate::auth::Nonce;
use crate::proto::{Counts, Message, Role};
use crate::time::deadline_after;
use crate::{Error, ProtocolViolation, Result};

/// What a failed proof is told, on either end.
pub(crate) const RESUME_REFUSED: &str = "resume refused";
/// What a server's listener tells an attempt for a session id it does not know (any more): a
/// wire constant that ends the client's session at once.
pub(crate) const RESUME_NO_SESSION: &str = "resume refused: no session with that id";
/// What a server tells a proven client whose attempt its session cannot take now (a newer one
/// pushed it out of the session's queue): a wire constant the client takes as the end of this
/// attempt only, never of the session, even after the server's proof.
pub(crate) const RESUME_BUSY: &str =
    "resume busy: the session is not taking this attempt; try again";

/// What the driver must do for the resume handshake.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ResumeAction {
    /// Send this message on the control channel.
    Send(Message),
    /// Tell the peer why this attempt ends (a Reject).
    Reject(String),
    /// Server, once the client proved the secret: tear the old data path down (it can deliver
    /// nothing more), take our counts, prepare a new data path, then call
    /// [`ResumeHandshake::on_prepared`].
    Prepare,
    /// Connect the new data path to the peer's blob, then call
    /// [`ResumeHandshake::on_connected`].
    ConnectDataPath {
        /// The peer's new connection data.
        peer_blob: Vec<u8>,
    },
    /// Receiver: post every free receive slot, in order from `arrived % credits`; Ready is
    /// queued right after this.
    PostSlots,
}

/// How a resume attempt failed.
#[derive(Debug)]
pub(crate) enum ResumeFailure {
    /// This attempt failed, and why; the session may still resume (the client tries again,
    /// the server stays parked) until the resume timeout.
    Attempt(String),
    /// The session cannot resume: it ends with this error.
    Session(Error),
    /// The server has no session with this id (client): the session cannot resume; it ends
    /// as lost, at once.
    NoSession,
}

/// What one end brings to a resume attempt.
#[derive(Debug)]
pub(crate) struct ResumeSetup {
    /// The session's identity and secret.
    pub(crate) ticket: ResumeTicket,
    /// Our fresh nonce for this attempt (the driver draws it).
    pub(crate) nonce: Nonce,
    /// Our role in the session.
    pub(crate) role: Role,
    /// The session's window.
    pub(crate) credits: u32,
    /// When this attempt ends.
    pub(crate) deadline: Instant,
}

/// How the session goes on after a resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resumed {
    /// The peer's counts.
    pub(crate) peer: Counts,
    /// A sender's plan (what to send again, where its window restarts); `None` for a receiver.
    pub(crate) plan: Option<ResumePlan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Client: Resume is out; waiting for the server's challenge.
    Challenge,
    /// Server: the challenge is out; waiting for the client's proof.
    Proof,
    /// Server: the client proved the secret; our data path is being prepared.
    Preparing,
    /// Client: the proof is out; waiting for ResumeAccepted.
    Accepted,
    /// The new data path is connecting.
    Connecting,
    /// Sender: connected; waiting for Ready.
    Ready,
    Resumed,
    Failed,
}

impl Stage {
    /// What the stage waits for, as failures say it.
    fn expected(self) -> &'static str {
        match self {
            Stage::Challenge => "ResumeChallenge or Reject",
            Stage::Proof => "ResumeProof or Reject",
            Stage::Preparing => "our own data path set-up",
            Stage::Accepted => "ResumeAccepted or Reject",
            Stage::Connecting | Stage::Ready => "Ready or Reject",
            Stage::Resumed | Stage::Failed => "nothing",
        }
    }
}

/// One end's resume handshake, without I/O.
#[derive(Debug)]
pub(crate) struct ResumeHandshake {
    setup: ResumeSetup,
    stage: Stage,
    /// Client: our counts and blob, sent with our proof.
    client_offer: Option<(Counts, Vec<u8>)>,
    /// Our counts, once known (the client's from the start, the server's once prepared).
    counts: Option<Counts>,
    /// Server: the client's counts and blob, kept until our data path is prepared.
    client_counts: Option<(Counts, Vec<u8>)>,
    /// The peer's nonce, once known.
    peer_nonce: Option<Nonce>,
    /// The peer proved the secret.
    peer_proven: bool,
    /// Server: the unproven client's deadline (at most [`AUTH_WINDOW`]).
    proof_deadline: Option<Instant>,
    /// Sender: Ready arrived before our data path finished connecting.
    ready_seen: bool,
    resumed: Option<Resumed>,
    actions: VecDeque<ResumeAction>,
}

impl ResumeHandshake {
    /// The client's attempt, with its counts and new blob: queues Resume.
    pub(crate) fn client(setup: ResumeSetup, counts: Counts, blob: Vec<u8>) -> Self {
        let resume = Message::Resume {
            session: *setup.ticket.id(),
            nonce: setup.nonce,
        };
        let mut h = Self::new(setup, Stage::Challenge, None);
        h.counts = Some(counts);
        h.client_offer = Some((counts, blob));
        h.actions.push_back(ResumeAction::Send(resume));
        h
    }

    /// The server's answer, at `now`, to a Resume naming this session (`client_nonce` from
    /// it): queues the challenge with our proof. The client has [`AUTH_WINDOW`] to prove it.
    pub(crate) fn server(setup: ResumeSetup, client_nonce: Nonce, now: Instant) -> Self {
        let challenge = Message::ResumeChallenge {
            nonce: setup.nonce,
            proof: setup.ticket.server_proof(&client_nonce, &setup.nonce),
        };
        let proof_deadline = deadline_after(now, AUTH_WINDOW).min(setup.deadline);
        let mut h = Self::new(setup, Stage::Proof, Some(client_nonce));
        h.proof_deadline = Some(proof_deadline);
        h.actions.push_back(ResumeAction::Send(challenge));
        h
    }

    fn new(setup: ResumeSetup, stage: Stage, peer_nonce: Option<Nonce>) -> Self {
        Self {
            setup,
            stage,
            client_offer: None,
            counts: None,
            client_counts: None,
            peer_nonce,
            peer_proven: false,
            proof_deadline: None,
            ready_seen: false,
            resumed: None,
            actions: VecDeque::new(),
        }
    }

    /// The next thing the driver must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<ResumeAction> {
        self.actions.pop_front()
    }

    /// The attempt's deadline while it runs (pure).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.stage {
            Stage::Resumed | Stage::Failed => None,
            Stage::Proof => self.proof_deadline.or(Some(self.setup.deadline)),
            _ => Some(self.setup.deadline),
        }
    }

    /// How the session goes on, once resumed.
    pub(crate) fn resumed(&self) -> Option<&Resumed> {
        self.resumed
            .as_ref()
            .filter(|_| self.stage == Stage::Resumed)
    }

    /// Sender: Ready came (the receiver runs on the new path: what follows on the control
    /// connection, its credits, is the session's, not this handshake's).
    pub(crate) fn ready_seen(&self) -> bool {
        self.ready_seen
    }

    /// Whether the peer proved the session's secret in this attempt.
    #[cfg(test)]
    pub(crate) fn peer_proven(&self) -> bool {
        self.peer_proven
    }

    /// A control message from the peer.
    pub(crate) fn on_message(&mut self, msg: Message) -> Result<(), ResumeFailure> {
        let result = self.step(msg);
        if result.is_err() {
            self.stage = Stage::Failed;
        }
        result
    }

    fn step(&mut self, msg: Message) -> Result<(), ResumeFailure> {
        match (self.stage, msg) {
            (Stage::Failed, _) => {
                Err(self.failure("the attempt had already failed".into(), Error::Closed))
            }
            (Stage::Resumed, other) => Err(ResumeFailure::Session(Error::Internal(format!(
                "{} handed to a finished resume handshake",
                other.name()
            )))),
            (Stage::Challenge, Message::Reject { reason }) if reason == RESUME_NO_SESSION => {
                Err(ResumeFailure::NoSession)
            }
            (_, Message::Reject { reason }) if reason == RESUME_BUSY => Err(
                ResumeFailure::Attempt("the server's session was busy with a newer attempt".into()),
            ),
            (_, Message::Reject { reason }) => Err(self.failure(
                format!("the peer refused: {}", crate::log_text::peer_text(&reason)),
                Error::Rejected(reason),
            )),
            (Stage::Challenge, Message::ResumeChallenge { nonce, proof }) => {
                let ours = self.setup.nonce;
                if !self.setup.ticket.is_server_proof(&proof, &ours, &nonce) {
                    self.actions
                        .push_back(ResumeAction::Reject(RESUME_REFUSED.to_owned()));
                    return Err(ResumeFailure::Attempt(
                        "whoever answered could not prove the session's secret".into(),
                    ));
                }
                let Some((counts, blob)) = self.client_offer.take() else {
                    return Err(ResumeFailure::Session(Error::Internal(
                        "a resuming client without its counts".into(),
                    )));
                };
                self.peer_nonce = Some(nonce);
                self.peer_proven = true;
                self.actions
                    .push_back(ResumeAction::Send(Message::ResumeProof {
                        proof: self.setup.ticket.client_proof(&ours, &nonce),
                        counts,
                        blob,
                    }));
                self.stage = Stage::Accepted;
                Ok(())
            }
            (
                Stage::Proof,
                Message::ResumeProof {
                    proof,
                    counts,
                    blob,
                },
            ) => {
                let Some(client) = self.peer_nonce else {
                    return Err(ResumeFailure::Session(Error::Internal(
                        "a resuming server without the client's nonce".into(),
                    )));
                };
                if !self
                    .setup
                    .ticket
                    .is_client_proof(&proof, &client, &self.setup.nonce)
                {
                    self.actions
                        .push_back(ResumeAction::Reject(RESUME_REFUSED.to_owned()));
                    return Err(ResumeFailure::Attempt(
                        "a client could not prove the session's secret".into(),
                    ));
                }
                self.peer_proven = true;
                self.client_counts = Some((counts, blob));
                self.actions.push_back(ResumeAction::Prepare);
                self.stage = Stage::Preparing;
                Ok(())
            }
            (Stage::Accepted, Message::ResumeAccepted { counts, blob }) => {
                self.accept_counts(counts)?;
                self.connect(blob);
                Ok(())
            }
            (Stage::Connecting | Stage::Ready, Message::Ready)
                if self.setup.role == Role::Sender =>
            {
                self.ready_seen = true;
                if self.stage == Stage::Ready {
                    self.stage = Stage::Resumed;
                }
                Ok(())
            }
            (stage, other) => Err(self.violation(ProtocolViolation::Unexpected {
                expected: stage.expected(),
                got: other.name(),
            })),
        }
    }

    /// A failure: it ends the session only once the peer proved the secret.
    fn failure(&self, attempt: String, session: Error) -> ResumeFailure {
        if self.peer_proven {
            ResumeFailure::Session(session)
        } else {
            ResumeFailure::Attempt(attempt)
        }
    }

    /// A violation, answered with a Reject.
    fn violation(&mut self, v: ProtocolViolation) -> ResumeFailure {
        self.actions.push_back(ResumeAction::Reject(format!(
            "protocol violation while resuming: {v}"
        )));
        self.failure(format!("protocol violation: {v}"), Error::Protocol(v))
    }

    /// A control message that did not decode.
    pub(crate) fn on_undecodable(&mut self, why: &str) -> ResumeFailure {
        self.stage = Stage::Failed;
        self.actions.push_back(ResumeAction::Reject(format!(
            "an undecodable message while resuming: {why}"
        )));
        self.failure(
            format!("an undecodable message: {why}"),
            Error::Protocol(ProtocolViolation::Unexpected {
                expected: "a resume message",
                got: "an undecodable frame",
            }),
        )
    }

    /// Server: our old data path is down, our counts taken, our new blob ready.
    pub(crate) fn on_prepared(
        &mut self,
        counts: Counts,
        blob: Vec<u8>,
    ) -> Result<(), ResumeFailure> {
        if self.stage != Stage::Preparing {
            return Err(ResumeFailure::Session(Error::Internal(
                "on_prepared outside the preparing stage".into(),
            )));
        }
        let Some((client_counts, client_blob)) = self.client_counts.take() else {
            return Err(ResumeFailure::Session(Error::Internal(
                "prepared without the client's counts".into(),
            )));
        };
        self.counts = Some(counts);
        if let Err(failure) = self.accept_counts(client_counts) {
            self.stage = Stage::Failed;
            return Err(failure);
        }
        self.actions
            .push_back(ResumeAction::Send(Message::ResumeAccepted { counts, blob }));
        self.connect(client_blob);
        Ok(())
    }

    fn accept_counts(&mut self, peer: Counts) -> Result<(), ResumeFailure> {
        let Some(ours) = self.counts else {
            return Err(ResumeFailure::Session(Error::Internal(
                "counts checked before ours were known".into(),
            )));
        };
        let checked = match self.setup.role {
            Role::Sender => plan_resume(
                SenderPosition {
                    taken: ours.messages,
                    released: ours.released,
                },
                ReceiverPosition {
                    arrived: peer.messages,
                    released: peer.released,
                },
                self.setup.credits,
            )
            .map(Some),
            Role::Receiver => check_sender_counts(
                ReceiverPosition {
                    arrived: ours.messages,
                    released: ours.released,
                },
                SenderPosition {
                    taken: peer.messages,
                    released: peer.released,
                },
            )
            .map(|()| None),
        };
        match checked {
            Ok(plan) => {
                self.resumed = Some(Resumed { peer, plan });
                Ok(())
            }
            Err(Error::Protocol(v)) => Err(self.violation(v)),
            Err(e) => Err(ResumeFailure::Session(e)),
        }
    }

    fn connect(&mut self, peer_blob: Vec<u8>) {
        self.actions
            .push_back(ResumeAction::ConnectDataPath { peer_blob });
        self.stage = Stage::Connecting;
    }

    /// The new data path connected; `early_data`: the peer already sent data on it (what
    /// [`crate::transport::RolePath::early_data`] says).
    pub(crate) fn on_connected(&mut self, early_data: bool) -> Result<(), ResumeFailure> {
        if self.stage != Stage::Connecting {
            return Ok(());
        }
        match self.setup.role {
            Role::Receiver if early_data => {
                self.stage = Stage::Failed;
                return Err(self.violation(ProtocolViolation::DataBeforeReady));
            }
            Role::Receiver => {
                self.actions.push_back(ResumeAction::PostSlots);
                self.actions.push_back(ResumeAction::Send(Message::Ready));
                self.stage = Stage::Resumed;
            }
            Role::Sender if self.ready_seen => self.stage = Stage::Resumed,
            Role::Sender => self.stage = Stage::Ready,
        }
        Ok(())
    }

    /// Connecting the new data path failed (why): this attempt failed.
    pub(crate) fn on_setup_failed(&mut self, why: &str) -> ResumeFailure {
        self.stage = Stage::Failed;
        ResumeFailure::Attempt(format!("the new data path did not connect: {why}"))
    }

    /// The control connection closed during the attempt: only this attempt failed.
    pub(crate) fn on_control_closed(&mut self) -> ResumeFailure {
        if self.stage == Stage::Resumed {
            return ResumeFailure::Session(Error::Internal(
                "a resumed session's close handed to its resume handshake".into(),
            ));
        }
        self.stage = Stage::Failed;
        ResumeFailure::Attempt("the control connection closed while resuming".into())
    }

    /// Applies the deadline at `now`: past it, this attempt failed.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Result<(), ResumeFailure> {
        match self.poll_timeout() {
            Some(deadline) if now >= deadline => {
                let waiting = self.stage.expected();
                self.stage = Stage::Failed;
                Err(ResumeFailure::Attempt(format!(
                    "no answer in time (waiting for {waiting})"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The receiver's check of the sender's counts: it cannot have taken fewer messages than
/// arrived, nor heard of more releases than the receiver made.
///
/// # Errors
/// [`Error::Protocol`] naming the count.
pub(crate) fn check_sender_counts(ours: ReceiverPosition, sender: SenderPosition) -> Result<()> {
    if sender.taken < ours.arrived {
        return Err(Error::Protocol(ProtocolViolation::ResumePastSent {
            arrived: ours.arrived,
            sent: sender.taken,
        }));
    }
    if sender.released > ours.released {
        return Err(Error::Protocol(
            ProtocolViolation::ResumeReleasesNeverMade {
                heard: sender.released,
                released: ours.released,
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::fresh_nonce;
    use std::time::Duration;

    fn setup(ticket: &ResumeTicket, role: Role) -> ResumeSetup {
        ResumeSetup {
            ticket: ticket.clone(),
            nonce: fresh_nonce().unwrap(),
            role,
            credits: 4,
            deadline: Instant::now() + Duration::from_secs(5),
        }
    }

    fn counts(messages: u64, released: u64) -> Counts {
        Counts { messages, released }
    }

    /// A client of `role` with these counts, and the nonce of its Resume.
    fn client(ticket: &ResumeTicket, role: Role, c: Counts) -> (ResumeHandshake, Nonce) {
        let mut h = ResumeHandshake::client(setup(ticket, role), c, vec![1; 8]);
        match h.poll_action() {
            Some(ResumeAction::Send(Message::Resume { nonce, session })) => {
                assert_eq!(&session, ticket.id());
                (h, nonce)
            }
            other => panic!("{other:?}"),
        }
    }

    fn server(ticket: &ResumeTicket, role: Role, client_nonce: Nonce) -> ResumeHandshake {
        ResumeHandshake::server(setup(ticket, role), client_nonce, Instant::now())
    }

    /// What `end` sends now; a server asked to prepare does so with `prepared` counts, and a
    /// data path connects at once.
    fn sent(end: &mut ResumeHandshake, prepared: Counts) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(a) = end.poll_action() {
            match a {
                ResumeAction::Send(m) => out.push(m),
                ResumeAction::Reject(reason) => out.push(Message::reject(&reason)),
                ResumeAction::Prepare => {
                    let _ = end.on_prepared(prepared, vec![2; 8]);
                }
                ResumeAction::ConnectDataPath { .. } => {
                    let _ = end.on_connected(false);
                }
                ResumeAction::PostSlots => {}
            }
        }
        out
    }

    /// Runs both ends against each other (no loss) until neither has anything to say.
    fn exchange(c: &mut ResumeHandshake, s: &mut ResumeHandshake, server_counts: Counts) {
        loop {
            let (to_server, to_client) = (sent(c, server_counts), sent(s, server_counts));
            if to_server.is_empty() && to_client.is_empty() {
                break;
            }
            for m in to_server {
                let _ = s.on_message(m);
            }
            for m in to_client {
                let _ = c.on_message(m);
            }
        }
    }

    #[test]
    fn a_receiving_client_and_a_sending_server_resume_with_the_plan() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(7, 5));
        let mut s = server(&ticket, Role::Sender, nonce);
        exchange(&mut c, &mut s, counts(9, 4));
        let plan = s.resumed().unwrap().plan.clone().unwrap();
        assert_eq!(plan.resend, 7..9);
        assert_eq!(plan.released, 5);
        assert_eq!(c.resumed().unwrap().peer, counts(9, 4));
        assert_eq!(c.poll_timeout(), None, "resumed");
        assert_eq!(s.poll_timeout(), None, "resumed after Ready");
    }

    #[test]
    fn the_server_prepares_and_counts_only_after_the_clients_proof() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Sender, counts(3, 1));
        let mut s = server(&ticket, Role::Receiver, nonce);
        let challenge = s.poll_action();
        assert!(matches!(
            challenge,
            Some(ResumeAction::Send(Message::ResumeChallenge { .. }))
        ));
        assert_eq!(s.poll_action(), None, "nothing prepared before the proof");
        let Some(ResumeAction::Send(challenge)) = challenge else {
            unreachable!()
        };
        c.on_message(challenge).unwrap();
        let Some(ResumeAction::Send(proof)) = c.poll_action() else {
            panic!("the client's proof")
        };
        s.on_message(proof).unwrap();
        assert_eq!(s.poll_action(), Some(ResumeAction::Prepare));
        assert_eq!(s.poll_action(), None, "nothing sent before it is prepared");
    }

    #[test]
    fn a_sender_goes_on_only_after_ready_even_if_ready_came_first() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Sender, counts(3, 1));
        let mut s = server(&ticket, Role::Receiver, nonce);
        let prepared = counts(2, 1);
        for m in sent(&mut s, prepared) {
            c.on_message(m).unwrap();
        }
        for m in sent(&mut c, prepared) {
            s.on_message(m).unwrap();
        }
        // The server prepared, accepted, connected, posted and said Ready.
        let to_client = sent(&mut s, prepared);
        assert!(matches!(to_client[0], Message::ResumeAccepted { .. }));
        assert_eq!(to_client[1..], [Message::Ready]);
        c.on_message(to_client[0].clone()).unwrap();
        c.on_message(Message::Ready).unwrap();
        assert!(c.poll_timeout().is_some(), "not connected yet");
        assert!(c.resumed().is_none());
        c.on_connected(false).unwrap();
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.resumed().unwrap().plan.clone().unwrap().resend, 2..3);
    }

    #[test]
    fn whoever_cannot_prove_the_secret_ends_only_the_attempt_on_either_side() {
        let ticket = ResumeTicket::random().unwrap();
        let impostor = ResumeTicket::random().unwrap();
        // An impostor server: the client refuses it and will try again.
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(0, 0));
        let mut s = server(&impostor, Role::Sender, nonce);
        let challenge = sent(&mut s, counts(0, 0)).pop().unwrap();
        assert!(matches!(
            c.on_message(challenge),
            Err(ResumeFailure::Attempt(_))
        ));
        assert_eq!(
            sent(&mut c, counts(0, 0)),
            vec![Message::reject(RESUME_REFUSED)]
        );
        // A forged client proof: the parked session stays parked.
        let mut s = server(&ticket, Role::Receiver, fresh_nonce().unwrap());
        sent(&mut s, counts(4, 4));
        let forged = Message::ResumeProof {
            proof: [0; 32],
            counts: counts(4, 4),
            blob: Vec::new(),
        };
        assert!(matches!(
            s.on_message(forged),
            Err(ResumeFailure::Attempt(_))
        ));
        assert_eq!(
            sent(&mut s, counts(4, 4)),
            vec![Message::reject(RESUME_REFUSED)]
        );
        // and whatever it sends next still ends only its attempt.
        assert!(matches!(
            s.on_message(Message::Ready),
            Err(ResumeFailure::Attempt(_))
        ));
    }

    #[test]
    fn a_recorded_proof_replayed_on_a_new_attempt_fails() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Sender, counts(1, 0));
        let mut s1 = server(&ticket, Role::Receiver, nonce);
        for m in sent(&mut s1, counts(1, 0)) {
            c.on_message(m).unwrap();
        }
        let recorded = sent(&mut c, counts(1, 0)).pop().unwrap();
        // A third party replays both recorded messages on a new connection: the server draws a
        // new nonce, and the old proof does not cover it.
        let mut s2 = server(&ticket, Role::Receiver, nonce);
        sent(&mut s2, counts(1, 0));
        assert!(matches!(
            s2.on_message(recorded),
            Err(ResumeFailure::Attempt(_))
        ));
    }

    #[test]
    fn impossible_counts_end_the_session_with_a_violation_on_both_sides() {
        let ticket = ResumeTicket::random().unwrap();
        // The receiver claims 6 arrived; the sender took only 5.
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(6, 2));
        let mut s = server(&ticket, Role::Sender, nonce);
        for m in sent(&mut s, counts(5, 2)) {
            c.on_message(m).unwrap();
        }
        let proof = sent(&mut c, counts(5, 2)).pop().unwrap();
        s.on_message(proof).unwrap();
        assert_eq!(s.poll_action(), Some(ResumeAction::Prepare));
        assert!(matches!(
            s.on_prepared(counts(5, 2), Vec::new()),
            Err(ResumeFailure::Session(Error::Protocol(
                ProtocolViolation::ResumePastSent {
                    arrived: 6,
                    sent: 5
                }
            )))
        ));
        let reject = sent(&mut s, counts(5, 2)).pop().unwrap();
        assert!(matches!(
            c.on_message(reject),
            Err(ResumeFailure::Session(Error::Rejected(r))) if r.contains("arrived")
        ));
    }

    #[test]
    fn a_receiver_refuses_a_sender_that_heard_of_releases_never_made() {
        let ours = ReceiverPosition {
            arrived: 5,
            released: 3,
        };
        let sender = |taken, released| SenderPosition { taken, released };
        assert!(check_sender_counts(ours, sender(6, 3)).is_ok());
        assert!(matches!(
            check_sender_counts(ours, sender(6, 4)),
            Err(Error::Protocol(
                ProtocolViolation::ResumeReleasesNeverMade {
                    heard: 4,
                    released: 3
                }
            ))
        ));
        assert!(matches!(
            check_sender_counts(ours, sender(4, 3)),
            Err(Error::Protocol(ProtocolViolation::ResumePastSent { .. }))
        ));
    }

    #[test]
    fn a_closed_connection_a_failed_set_up_or_the_deadline_ends_only_the_attempt() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, _) = client(&ticket, Role::Sender, counts(0, 0));
        let deadline = c.poll_timeout().unwrap();
        assert!(c
            .handle_timeout(deadline - Duration::from_millis(1))
            .is_ok());
        assert!(matches!(
            c.handle_timeout(deadline),
            Err(ResumeFailure::Attempt(w)) if w.contains("ResumeChallenge")
        ));
        let (mut c, _) = client(&ticket, Role::Sender, counts(0, 0));
        assert!(matches!(c.on_control_closed(), ResumeFailure::Attempt(_)));
        let (mut c, _) = client(&ticket, Role::Sender, counts(0, 0));
        assert!(matches!(
            c.on_setup_failed("refused"),
            ResumeFailure::Attempt(_)
        ));
    }

    #[test]
    fn an_unproven_client_has_the_authentication_window_not_the_whole_attempt() {
        let ticket = ResumeTicket::random().unwrap();
        let now = Instant::now();
        let mut long = setup(&ticket, Role::Receiver);
        long.deadline = now + Duration::from_secs(60);
        let s = ResumeHandshake::server(long, fresh_nonce().unwrap(), now);
        assert_eq!(s.poll_timeout(), Some(now + AUTH_WINDOW));
    }

    #[test]
    fn a_reject_ends_the_session_only_from_a_peer_that_proved_the_secret() {
        let ticket = ResumeTicket::random().unwrap();
        // Before the server proved anything (busy, unknown session, a stranger): try again.
        let (mut c, _) = client(&ticket, Role::Receiver, counts(3, 3));
        assert!(matches!(
            c.on_message(Message::reject("busy: serving 1 session(s)")),
            Err(ResumeFailure::Attempt(_))
        ));
        // After: the session ends with the peer's reason.
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(3, 3));
        let mut s = server(&ticket, Role::Sender, nonce);
        for m in sent(&mut s, counts(3, 3)) {
            c.on_message(m).unwrap();
        }
        assert!(matches!(
            c.on_message(Message::reject("the sender aborted")),
            Err(ResumeFailure::Session(Error::Rejected(_)))
        ));
    }

    #[test]
    fn a_busy_session_ends_only_the_attempt_even_after_the_servers_proof() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(3, 3));
        let mut s = server(&ticket, Role::Sender, nonce);
        for m in sent(&mut s, counts(3, 3)) {
            c.on_message(m).unwrap();
        }
        assert!(matches!(
            c.on_message(Message::reject(RESUME_BUSY)),
            Err(ResumeFailure::Attempt(why)) if why.contains("busy")
        ));
        // "resume refused" from a proven server stays final: its session is gone.
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(3, 3));
        let mut s = server(&ticket, Role::Sender, nonce);
        for m in sent(&mut s, counts(3, 3)) {
            c.on_message(m).unwrap();
        }
        assert!(matches!(
            c.on_message(Message::reject(RESUME_REFUSED)),
            Err(ResumeFailure::Session(_))
        ));
    }

    #[test]
    fn no_session_with_that_id_ends_the_clients_session_at_once_before_any_proof() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, _) = client(&ticket, Role::Receiver, counts(3, 3));
        assert!(matches!(
            c.on_message(Message::reject(RESUME_NO_SESSION)),
            Err(ResumeFailure::NoSession)
        ));
        // Any other refusal before the server's proof ends only the attempt.
        let (mut c, _) = client(&ticket, Role::Receiver, counts(3, 3));
        assert!(matches!(
            c.on_message(Message::reject(RESUME_REFUSED)),
            Err(ResumeFailure::Attempt(_))
        ));
    }

    #[test]
    fn a_message_out_of_turn_from_a_proven_peer_is_a_violation_that_ends_the_session() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(0, 0));
        let mut s = server(&ticket, Role::Sender, nonce);
        for m in sent(&mut s, counts(0, 0)) {
            c.on_message(m).unwrap();
        }
        assert!(matches!(
            c.on_message(Message::Credit { released: 1 }),
            Err(ResumeFailure::Session(Error::Protocol(
                ProtocolViolation::Unexpected { .. }
            )))
        ));
    }

    #[test]
    fn data_before_ready_on_a_resumed_path_is_a_violation() {
        let ticket = ResumeTicket::random().unwrap();
        let (mut c, nonce) = client(&ticket, Role::Receiver, counts(2, 2));
        let mut s = server(&ticket, Role::Sender, nonce);
        for m in sent(&mut s, counts(2, 2)) {
            c.on_message(m).unwrap();
        }
        for m in sent(&mut c, counts(2, 2)) {
            s.on_message(m).unwrap();
        }
        let accepted = sent(&mut s, counts(2, 2));
        c.on_message(accepted[0].clone()).unwrap();
        assert!(matches!(
            c.poll_action(),
            Some(ResumeAction::ConnectDataPath { .. })
        ));
        assert!(matches!(
            c.on_connected(true),
            Err(ResumeFailure::Session(Error::Protocol(
                ProtocolViolation::DataBeforeReady
            )))
        ));
    }
}
