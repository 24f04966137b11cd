//! The handshake's rules, as a state machine the session driver runs.
//!
//! Order: with a pre-shared key, authentication first (the client's AuthChallenge with its
//! nonce; the server's AuthResponse with its nonce and its proof; the client's AuthProof); then
//! the client prepares its data path and sends Hello; the server answers with Hello or Reject; both connect their data
//! paths with the blobs; the receiver posts every slot and sends Ready; the sender sends
//! nothing before Ready. One deadline covers all of it on each side.
//!
//! Events in: a control message ([`Handshake::on_message`]), one that did not decode, the
//! control connection closed, our hello ready (the server builds its own only after reading
//! the client's), our set-up failed, the data path connected, a deadline passed. Out: actions
//! for the driver ([`Handshake::poll_action`]: send this message, reject with this reason,
//! connect the data path with the peer's blob, post every slot then say Ready), the deadline
//! ([`Handshake::poll_timeout`], pure), and the end: established, or an error.
//!
//! Rules kept here:
//! - a client builds its hello (its data path: device, queue pairs, registered slots, which
//!   can take seconds for a large window) only after its proof went out, so that the server's
//!   authentication window measures one round trip, not our set-up
//!   ([`Handshake::client_hello_later`]);
//! - with a key, nothing but authentication happens before both ends proved it: a server
//!   answers a client without the key (or with another one) in one round trip and sets nothing
//!   up; a client refuses a server whose proof does not check (it does not hold our key); an end
//!   with a key and one without refuse each other with a reason that says so;
//! - each step takes only its message: the peer's Reject ends the handshake as
//!   [`Error::Rejected`], anything else is a protocol violation, answered with a Reject;
//! - the peers must play different roles over the same transport (else a Reject saying why,
//!   and [`Error::Refused`]);
//! - a client hello that does not decode is answered with a Reject;
//! - Ready is the receiver's, sent only after its data path connected and every slot is
//!   posted; data on the data path before it (where the transport can see it) is a protocol
//!   violation; the sender may see it before its own connect finished (tcp: the receiver's side
//!   may finish first), never before the hellos;
//! - the control connection closed during the handshake is the peer lost, with 0 messages;
//! - every step ends at the one deadline; with a key, a server gives the client's
//!   authentication (its challenge, then its proof) at most [`AUTH_WINDOW`] from the
//!   connection, so a stranger holds a handshake slot for one round trip at most (the
//!   listener's fair admission builds on this and on [`Handshake::is_authenticated`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::auth::{AuthKey, Nonce};
use crate::net::Lost;
use crate::proto::{Hello, Message, Role, TransportKind, AUTH_PREFIX, BUSY_PREFIX};
use crate::{Error, ProtocolViolation};

/// Server with a key: how long after the connection the client has to prove the key (its
/// challenge and its proof: one round trip after it connected, with room for a loaded host).
/// Shorter than the handshake timeout so that silent strangers leave the server's table soon.
pub(crate) const AUTH_WINDOW: Duration = Duration::from_secs(2);

/// Which end of the bootstrap connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// We connected and speak first.
    Client,
    /// We accepted.
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Server with a key: waiting for the client's AuthChallenge.
    ClientChallenge,
    /// Server with a key: our AuthResponse is out; waiting for the client's AuthProof.
    ClientProof,
    /// Client with a key: our AuthChallenge is out; waiting for the server's AuthResponse.
    ServerResponse,
    /// Server: waiting for the client's Hello.
    ClientHello,
    /// Server: the client's Hello is in; our own is being prepared.
    Preparing,
    /// Client: our Hello is out; waiting for the server's Hello or Reject.
    ServerHello,
    /// Both hellos are known: the data path is connecting.
    Connecting,
    /// Sender: connected, waiting for Ready.
    Ready,
    Established,
    Failed,
}

impl Stage {
    /// What the stage waits for, as timeouts say it.
    fn describe(self) -> &'static str {
        match self {
            Stage::ClientChallenge | Stage::ClientProof => "the client's authentication",
            Stage::ServerResponse => "the server's authentication",
            Stage::ClientHello => "the client's hello",
            Stage::Preparing => "our own data path set-up",
            Stage::ServerHello => "the server's hello",
            Stage::Connecting => "the data path set-up",
            Stage::Ready => "Ready",
            Stage::Established | Stage::Failed => "nothing",
        }
    }
}

/// What the driver must do for the handshake.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HandshakeAction {
    /// Send this message on the control channel.
    Send(Message),
    /// Tell the peer why the handshake ends (a Reject), then stop.
    Reject(String),
    /// Connect the data path to the peer's blob (watching the control connection), then call
    /// [`Handshake::on_connected`].
    ConnectDataPath {
        /// The peer's connection data from its hello.
        peer_blob: Vec<u8>,
    },
    /// Receiver: post every receive slot, then send Ready (queued right after this).
    PostSlots,
}

/// A handshake that ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired {
    /// What it waited for.
    pub(crate) waiting_for: &'static str,
    /// Whether the shorter [`AUTH_WINDOW`] ended it, not the handshake's own deadline.
    pub(crate) auth_window: bool,
}

/// The pre-shared key and our fresh nonce, when authentication is on.
#[derive(Debug)]
pub(crate) struct Auth {
    /// The key both ends must hold.
    pub(crate) key: AuthKey,
    /// Our nonce for this handshake (fresh random bytes: the driver draws them).
    pub(crate) nonce: Nonce,
}

/// One end's handshake, without I/O.
#[derive(Debug)]
pub(crate) struct Handshake {
    side: Side,
    stage: Stage,
    auth: Option<Auth>,
    /// Server with a key: the client's nonce, once its challenge arrived.
    client_nonce: Option<Nonce>,
    /// With a key, once both ends proved it: the client's and the server's nonces (a session
    /// bound to the key derives its resume secret from them).
    proven_nonces: Option<(Nonce, Nonce)>,
    deadline: Instant,
    /// Server with a key: when the client's authentication must be complete (the earlier of
    /// [`AUTH_WINDOW`] after the connection and `deadline`).
    auth_deadline: Instant,
    ours: Option<Hello>,
    peer: Option<Hello>,
    /// Sender: Ready arrived while our data path was still connecting.
    early_ready: bool,
    actions: VecDeque<HandshakeAction>,
}

impl Handshake {
    /// A client that builds its hello only when [`Handshake::awaits_our_hello`] says so: after
    /// its proof (with a key), or at once. Its hello goes in with [`Handshake::our_hello`].
    pub(crate) fn client_hello_later(deadline: Instant, auth: Option<Auth>) -> Self {
        let challenge = auth
            .as_ref()
            .map(|auth| Message::AuthChallenge { nonce: auth.nonce });
        let stage = match challenge {
            Some(_) => Stage::ServerResponse,
            None => Stage::Preparing,
        };
        let mut h = Self::new(Side::Client, stage, deadline, auth);
        if let Some(challenge) = challenge {
            h.actions.push_back(HandshakeAction::Send(challenge));
        }
        h
    }

    /// A server whose client connected at `now`: it waits for the client's authentication
    /// (with a key: within [`AUTH_WINDOW`]) or its Hello first, and chooses its role after.
    pub(crate) fn server(now: Instant, deadline: Instant, auth: Option<Auth>) -> Self {
        let stage = if auth.is_some() {
            Stage::ClientChallenge
        } else {
            Stage::ClientHello
        };
        let mut h = Self::new(Side::Server, stage, deadline, auth);
        h.auth_deadline = now
            .checked_add(AUTH_WINDOW)
            .map_or(deadline, |end| end.min(deadline));
        h
    }

    fn new(side: Side, stage: Stage, deadline: Instant, auth: Option<Auth>) -> Self {
        Self {
            side,
            stage,
            auth,
            client_nonce: None,
            proven_nonces: None,
            deadline,
            auth_deadline: deadline,
            ours: None,
            peer: None,
            early_ready: false,
            actions: VecDeque::new(),
        }
    }

    fn our_role(&self) -> Option<Role> {
        self.ours.as_ref().map(|h| h.role)
    }

    /// The next thing the driver must do, if any.
    pub(crate) fn poll_action(&mut self) -> Option<HandshakeAction> {
        self.actions.pop_front()
    }

    /// True once the handshake completed: the session may start.
    pub(crate) fn is_established(&self) -> bool {
        self.stage == Stage::Established
    }

    /// Our hello is to be built now: the server read the client's; a client made with
    /// [`Handshake::client_hello_later`] proved the key (or has none).
    pub(crate) fn awaits_our_hello(&self) -> bool {
        self.stage == Stage::Preparing
    }

    /// The peer's Hello, once it arrived.
    pub(crate) fn peer(&self) -> Option<&Hello> {
        self.peer.as_ref()
    }

    /// With a key, once both ends proved it: the client's and the server's nonces.
    pub(crate) fn proven_nonces(&self) -> Option<(Nonce, Nonce)> {
        self.proven_nonces
    }

    /// Both hellos, once established: (ours, the peer's).
    pub(crate) fn into_hellos(self) -> Option<(Hello, Hello)> {
        match (self.stage, self.ours, self.peer) {
            (Stage::Established, Some(ours), Some(peer)) => Some((ours, peer)),
            _ => None,
        }
    }

    /// Server with a key: the client proved it holds the key (it stays so until the end).
    pub(crate) fn is_authenticated(&self) -> bool {
        self.side == Side::Server
            && self.auth.is_some()
            && !matches!(
                self.stage,
                Stage::ClientChallenge | Stage::ClientProof | Stage::Failed
            )
    }

    /// The handshake's deadline, while it runs: the one deadline, or, while a server waits for
    /// the client's authentication, the earlier end of its window. Pure.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.stage {
            Stage::Established | Stage::Failed => None,
            Stage::ClientChallenge | Stage::ClientProof => Some(self.auth_deadline),
            _ => Some(self.deadline),
        }
    }

    /// At `now`: `Err` once the deadline passed, saying what we waited for (the driver builds
    /// the timeout error; the peer is told nothing: it may be gone).
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Result<(), Expired> {
        match self.poll_timeout() {
            Some(deadline) if now >= deadline => {
                let expired = Expired {
                    waiting_for: self.stage.describe(),
                    auth_window: deadline == self.auth_deadline && deadline < self.deadline,
                };
                self.stage = Stage::Failed;
                Err(expired)
            }
            _ => Ok(()),
        }
    }

    /// A message arrived on the control channel.
    pub(crate) fn on_message(&mut self, msg: Message) -> Result<(), Error> {
        let result = self.take_message(msg);
        if let Err(e) = &result {
            self.fail(e);
        }
        result
    }

    fn take_message(&mut self, msg: Message) -> Result<(), Error> {
        match (self.stage, msg) {
            (_, Message::Reject { reason }) if reason.starts_with(BUSY_PREFIX) => {
                Err(Error::Busy(reason))
            }
            (_, Message::Reject { reason }) => Err(Error::Rejected(reason)),
            (Stage::ClientChallenge, Message::AuthChallenge { nonce }) => {
                let auth = self.auth()?;
                let proof = auth.key.server_proof(&nonce, &auth.nonce);
                let ours = auth.nonce;
                self.client_nonce = Some(nonce);
                self.actions
                    .push_back(HandshakeAction::Send(Message::AuthResponse {
                        nonce: ours,
                        proof,
                    }));
                self.stage = Stage::ClientProof;
                Ok(())
            }
            (Stage::ClientChallenge, Message::Hello(_)) => Err(Error::Refused(format!(
                "{AUTH_PREFIX} required: this server has a key (--auth-key-file); start the \
client with the same key"
            ))),
            (Stage::ClientProof, Message::AuthProof { proof }) => {
                let auth = self.auth()?;
                let client = self.client_nonce.ok_or_else(|| {
                    Error::Internal("a client proof before its challenge".to_owned())
                })?;
                if !auth.key.is_client_proof(&proof, &client, &auth.nonce) {
                    return Err(Error::AuthenticationFailed(
                        "the client's key is not ours".to_owned(),
                    ));
                }
                let server = auth.nonce;
                self.proven_nonces = Some((client, server));
                self.stage = Stage::ClientHello;
                Ok(())
            }
            (Stage::ServerResponse, Message::AuthResponse { nonce, proof }) => {
                let auth = self.auth()?;
                if !auth.key.is_server_proof(&proof, &auth.nonce, &nonce) {
                    return Err(Error::AuthenticationFailed(
                        "the server does not hold our key (the keys differ, or this is not the \
server meant)"
                            .to_owned(),
                    ));
                }
                let proof = auth.key.client_proof(&auth.nonce, &nonce);
                let proven = (auth.nonce, nonce);
                self.proven_nonces = Some(proven);
                self.actions
                    .push_back(HandshakeAction::Send(Message::AuthProof { proof }));
                // the driver prepares our data path now, then offers our hello
                self.stage = Stage::Preparing;
                Ok(())
            }
            (Stage::ClientHello, Message::AuthChallenge { .. }) => Err(Error::Refused(
                "this server has no authentication key: start it with --auth-key-file, or the \
client without one"
                    .to_owned(),
            )),
            (Stage::ClientHello, Message::Hello(theirs)) => {
                self.peer = Some(theirs);
                self.stage = Stage::Preparing;
                Ok(())
            }
            (Stage::ServerHello, Message::Hello(theirs)) => self.hellos_known(theirs),
            (Stage::Ready, Message::Ready) => {
                self.stage = Stage::Established;
                Ok(())
            }
            (Stage::Connecting, Message::Ready)
                if self.our_role() == Some(Role::Sender) && !self.early_ready =>
            {
                self.early_ready = true;
                Ok(())
            }
            (stage, other) => Err(Error::Protocol(ProtocolViolation::Unexpected {
                expected: match stage {
                    Stage::ClientChallenge => "AuthChallenge",
                    Stage::ClientProof => "AuthProof",
                    Stage::ServerResponse => "AuthResponse",
                    Stage::ClientHello | Stage::ServerHello => "Hello",
                    Stage::Ready => "Ready",
                    _ => "nothing during the data path setup",
                },
                got: other.name(),
            })),
        }
    }

    fn auth(&self) -> Result<&Auth, Error> {
        self.auth
            .as_ref()
            .ok_or_else(|| Error::Internal("an authentication step without a key".to_owned()))
    }

    /// Our data path is prepared and our Hello built. A server checks it against the client's
    /// and sends it, or tells the client why not; a client sends it.
    pub(crate) fn our_hello(&mut self, ours: Hello) -> Result<(), Error> {
        if self.stage != Stage::Preparing {
            return Err(Error::Internal(
                "our hello offered outside the preparing step".to_owned(),
            ));
        }
        if self.side == Side::Client {
            self.actions
                .push_back(HandshakeAction::Send(Message::Hello(ours.clone())));
            self.ours = Some(ours);
            self.stage = Stage::ServerHello;
            return Ok(());
        }
        self.ours = Some(ours);
        let theirs = self.peer.take().ok_or_else(|| {
            Error::Internal("the server prepared without the client's hello".to_owned())
        })?;
        self.hellos_known(theirs)
    }

    fn hellos_known(&mut self, theirs: Hello) -> Result<(), Error> {
        let ours = self
            .ours
            .as_ref()
            .ok_or_else(|| Error::Internal("hellos compared without ours".to_owned()))?;
        if let Err(reason) = check_peer(ours, &theirs) {
            self.stage = Stage::Failed;
            self.actions
                .push_back(HandshakeAction::Reject(reason.clone()));
            return Err(Error::Refused(reason));
        }
        if self.side == Side::Server {
            self.actions
                .push_back(HandshakeAction::Send(Message::Hello(ours.clone())));
        }
        self.actions.push_back(HandshakeAction::ConnectDataPath {
            peer_blob: theirs.blob.clone(),
        });
        self.peer = Some(theirs);
        self.stage = Stage::Connecting;
        Ok(())
    }

    /// Server: our own configuration is invalid; the client is told only that.
    pub(crate) fn on_bad_config(&mut self) {
        if self.stage == Stage::Preparing {
            self.stage = Stage::Failed;
            self.actions.push_back(HandshakeAction::Reject(
                "server configuration error".to_owned(),
            ));
        }
    }

    /// The data path connected; `early_data`: the peer already sent data on it (where the
    /// transport can see that), which a sender may not do before our Ready.
    pub(crate) fn on_connected(&mut self, early_data: bool) -> Result<(), Error> {
        if self.stage != Stage::Connecting {
            return Ok(());
        }
        match self.our_role().unwrap_or(Role::Sender) {
            Role::Receiver if early_data => {
                let e = Error::Protocol(ProtocolViolation::DataBeforeReady);
                self.fail(&e);
                return Err(e);
            }
            Role::Receiver => {
                self.actions.push_back(HandshakeAction::PostSlots);
                self.actions
                    .push_back(HandshakeAction::Send(Message::Ready));
                self.stage = Stage::Established;
            }
            Role::Sender if self.early_ready => self.stage = Stage::Established,
            Role::Sender => self.stage = Stage::Ready,
        }
        Ok(())
    }

    /// The control connection closed (why): the peer is gone.
    pub(crate) fn on_control_closed(&mut self, mut lost: Lost) -> Error {
        if self.stage == Stage::Connecting {
            lost.reason.push_str(" (during the data path setup)");
        }
        self.stage = Stage::Failed;
        lost.into_error(0)
    }

    /// A message that did not decode (or another local failure: our set-up, our data path's
    /// connect): ends the handshake, telling the peer why where it should know.
    pub(crate) fn fail(&mut self, e: &Error) {
        if matches!(self.stage, Stage::Failed | Stage::Established) {
            return;
        }
        let stage = self.stage;
        self.stage = Stage::Failed;
        let reason = match (e, stage) {
            (Error::Protocol(v), _) => format!("protocol violation: {v}"),
            // The authentication rules refuse with their own words; a mismatch of the hellos
            // already queued its Reject.
            // A server refusing what the client's hello asks of its set-up (`--paths` to an
            // address not its own) refuses in its own words too.
            (
                Error::Refused(reason),
                Stage::ClientChallenge | Stage::ClientHello | Stage::Preparing,
            ) => {
                if self
                    .actions
                    .iter()
                    .any(|a| matches!(a, HandshakeAction::Reject(_)))
                {
                    return;
                }
                reason.clone()
            }
            (Error::AuthenticationFailed(_), _) => format!("{AUTH_PREFIX} failed"),
            (Error::Decode(d), Stage::ClientHello) => format!("invalid hello: {d}"),
            // Before the key is proven too: the stranger learns only that its frame was bad.
            (Error::Decode(d), Stage::ClientChallenge | Stage::ClientProof) => {
                format!("invalid authentication message: {d}")
            }
            // Their own end, or nobody to tell, or already told (Refused).
            (
                Error::Rejected(_)
                | Error::PeerLost { .. }
                | Error::Interrupted
                | Error::Refused(_)
                | Error::HandshakeTimeout { .. }
                | Error::Decode(_),
                _,
            ) => return,
            (other, Stage::Connecting) => format!("data path setup failed: {other}"),
            (other, Stage::Preparing) => {
                format!("server could not set up its data path: {other}")
            }
            // A failing control connection: nothing can be told over it.
            _ => return,
        };
        self.actions.push_back(HandshakeAction::Reject(reason));
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
    if ours.checksum != theirs.checksum {
        return Err(format!(
            "checksum mismatch: one end checks messages with {}, the other with {} (set the same --checksum on both ends)",
            ours.checksum, theirs.checksum
        ));
    }
    if ours.qps != theirs.qps {
        return Err(format!(
            "queue pair mismatch: one end stripes over {} queue pair(s), the other over {} (the \
             server takes the client's --qps)",
            ours.qps, theirs.qps
        ));
    }
    if ours.paths != theirs.paths {
        return Err(format!(
            "path mismatch: one end runs the session over {} path(s), the other over {} (the \
             server takes the client's --paths)",
            ours.paths.len() + 1,
            theirs.paths.len() + 1
        ));
    }
    // A DOCA context's MTU is fixed before its connection is known (doca_rdma_set_mtu comes
    // before doca_ctx_start), so two ends that each fixed one cannot meet at the smaller, as
    // verbs does at RTR: they must fix the same.
    if let (TransportKind::Doca, Some(a), Some(b)) = (ours.transport, ours.qp.mtu, theirs.qp.mtu) {
        if a != b {
            return Err(format!(
                "MTU mismatch: one end's DOCA context uses {a} bytes, the other's {b} (DOCA fixes \
                 the MTU before connecting: set the same --mtu on both ends, or none)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::proto::{Checksum, QpSettings, PROTOCOL_VERSION};
    use std::collections::VecDeque;

    pub(crate) fn hello(role: Role, transport: TransportKind) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            role,
            transport,
            max_msg_size: 64,
            credits: 2,
            qps: 1,
            paths: Vec::new(),
            gid: [0; 16],
            checksum: Checksum::None,
            resume_timeout_ms: 0,
            session_id: [0; 16],
            resume_secret: [0; 32],
            qp: QpSettings::default(),
            blob: vec![role as u8],
        }
    }

    fn drain(h: &mut Handshake) -> Vec<HandshakeAction> {
        std::iter::from_fn(|| h.poll_action()).collect()
    }

    #[test]
    fn a_receiving_client_says_ready_only_after_connecting_and_posting() {
        let now = Instant::now();
        let ours = hello(Role::Receiver, TransportKind::Tcp);
        let mut h = client(ours.clone(), now, None);
        assert_eq!(drain(&mut h), [HandshakeAction::Send(Message::Hello(ours))]);
        h.on_message(Message::Hello(hello(Role::Sender, TransportKind::Tcp)))
            .unwrap();
        assert!(matches!(
            drain(&mut h)[..],
            [HandshakeAction::ConnectDataPath { .. }]
        ));
        assert!(!h.is_established());
        h.on_connected(false).unwrap();
        assert_eq!(
            drain(&mut h),
            [
                HandshakeAction::PostSlots,
                HandshakeAction::Send(Message::Ready)
            ]
        );
        assert!(h.is_established());
    }

    #[test]
    fn a_sending_server_answers_then_waits_for_ready_which_may_come_before_its_connect() {
        let now = Instant::now();
        let mut h = Handshake::server(now, now, None);
        h.on_message(Message::Hello(hello(Role::Receiver, TransportKind::Tcp)))
            .unwrap();
        assert!(h.awaits_our_hello());
        h.our_hello(hello(Role::Sender, TransportKind::Tcp))
            .unwrap();
        let actions = drain(&mut h);
        assert!(matches!(
            actions[..],
            [
                HandshakeAction::Send(Message::Hello(_)),
                HandshakeAction::ConnectDataPath { .. }
            ]
        ));
        h.on_message(Message::Ready).unwrap();
        assert!(!h.is_established(), "not before our own connect");
        h.on_connected(false).unwrap();
        assert!(h.is_established());
    }

    /// A server that refuses what the client's hello asks of its set-up (a `--paths` address
    /// not its own) tells the client in its own words, while preparing; a set-up that failed
    /// on its own says so.
    #[test]
    fn a_server_refusing_the_clients_set_up_while_preparing_sends_its_reason() {
        let now = Instant::now();
        for (e, said) in [
            (
                Error::Refused("path 1: 192.0.2.7 is not an address of this server".into()),
                "path 1: 192.0.2.7 is not an address of this server",
            ),
            (
                Error::InvalidConfig("no memory".into()),
                "server could not set up its data path",
            ),
        ] {
            let mut h = Handshake::server(now, now, None);
            h.on_message(Message::Hello(hello(Role::Receiver, TransportKind::Tcp)))
                .unwrap();
            assert!(h.awaits_our_hello(), "preparing");
            h.fail(&e);
            let actions = drain(&mut h);
            assert!(
                matches!(&actions[..], [HandshakeAction::Reject(r)] if r.contains(said)),
                "{actions:?}"
            );
        }
    }

    #[test]
    fn each_step_takes_only_its_message_and_violations_are_rejected() {
        let now = Instant::now();
        let mut h = Handshake::server(now, now, None);
        let e = h.on_message(Message::Finish { count: 0 }).unwrap_err();
        assert!(e.to_string().contains("expected Hello, got Finish"), "{e}");
        assert!(
            matches!(&drain(&mut h)[..], [HandshakeAction::Reject(r)] if r.starts_with("protocol violation"))
        );

        let mut h = client(hello(Role::Sender, TransportKind::Tcp), now, None);
        drain(&mut h);
        let e = h.on_message(Message::reject("busy")).unwrap_err();
        assert!(matches!(e, Error::Rejected(ref r) if r == "busy"), "{e}");
        assert!(drain(&mut h).is_empty(), "a Reject is not answered");

        let mut h = client(hello(Role::Sender, TransportKind::Tcp), now, None);
        h.on_message(Message::Hello(hello(Role::Receiver, TransportKind::Tcp)))
            .unwrap();
        h.on_connected(false).unwrap();
        let e = h.on_message(Message::Credit { released: 1 }).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol violation by peer: expected Ready, got Credit"
        );
    }

    #[test]
    fn data_before_ready_is_a_violation_the_sender_is_told_about() {
        let now = Instant::now();
        let mut h = client(hello(Role::Receiver, TransportKind::Tcp), now, None);
        h.on_message(Message::Hello(hello(Role::Sender, TransportKind::Tcp)))
            .unwrap();
        drain(&mut h);
        let e = h.on_connected(true).unwrap_err();
        assert!(
            matches!(e, Error::Protocol(ProtocolViolation::DataBeforeReady)),
            "{e}"
        );
        assert!(
            matches!(&drain(&mut h)[..], [HandshakeAction::Reject(r)] if r.contains("data before Ready"))
        );
        assert!(!h.is_established());
        // A sender's peer is the receiver: nothing it could send early is data.
        let mut h = client(hello(Role::Sender, TransportKind::Tcp), now, None);
        h.on_message(Message::Hello(hello(Role::Receiver, TransportKind::Tcp)))
            .unwrap();
        h.on_connected(true).unwrap();
    }

    #[test]
    fn mismatched_peers_are_refused_with_the_reason_sent() {
        let now = Instant::now();
        let mut h = client(hello(Role::Sender, TransportKind::Tcp), now, None);
        drain(&mut h);
        let e = h
            .on_message(Message::Hello(hello(Role::Sender, TransportKind::Tcp)))
            .unwrap_err();
        assert!(matches!(e, Error::Refused(_)), "{e}");
        assert!(
            matches!(&drain(&mut h)[..], [HandshakeAction::Reject(r)] if r.contains("both ends are senders"))
        );
        let mut h = Handshake::server(now, now, None);
        h.on_message(Message::Hello(hello(Role::Sender, TransportKind::Verbs)))
            .unwrap();
        let e = h
            .our_hello(hello(Role::Receiver, TransportKind::Tcp))
            .unwrap_err();
        assert!(e.to_string().contains("transport mismatch"), "{e}");
        let mut h = Handshake::server(now, now, None);
        let mut checked = hello(Role::Sender, TransportKind::Tcp);
        checked.checksum = Checksum::Crc32c;
        h.on_message(Message::Hello(checked)).unwrap();
        let e = h
            .our_hello(hello(Role::Receiver, TransportKind::Tcp))
            .unwrap_err();
        assert!(
            e.to_string().contains(
                "checksum mismatch: one end checks messages with none, the other with crc32c"
            ),
            "{e}"
        );
    }

    /// Both ends stripe over the same queue pairs (the server takes the client's count): a
    /// hello with another count is refused.
    #[test]
    fn a_peer_with_another_queue_pair_count_is_refused() {
        let ours = hello(Role::Receiver, TransportKind::Tcp);
        let theirs = Hello {
            qps: 4,
            ..hello(Role::Sender, TransportKind::Tcp)
        };
        let e = check_peer(&ours, &theirs).unwrap_err();
        assert!(e.contains("queue pair mismatch"), "{e}");
        assert_eq!(check_peer(&Hello { qps: 4, ..ours }, &theirs), Ok(()));
    }

    /// Both ends run the same paths (the server takes and echoes the client's): a hello with
    /// other paths, or the same addresses in another order, is refused.
    #[test]
    fn a_peer_with_other_paths_is_refused() {
        let pair = |n: u8| crate::proto::PathPair {
            client: std::net::Ipv4Addr::new(10, n, 0, 1),
            server: std::net::Ipv4Addr::new(10, n, 0, 2),
        };
        let with = |paths: Vec<crate::proto::PathPair>, role| Hello {
            qps: 3,
            paths,
            ..hello(role, TransportKind::Tcp)
        };
        let ours = with(vec![pair(1), pair(2)], Role::Receiver);
        for theirs in [
            vec![pair(1)],
            vec![pair(2), pair(1)],
            vec![pair(1), pair(3)],
        ] {
            let e = check_peer(&ours, &with(theirs, Role::Sender)).unwrap_err();
            assert!(e.contains("path mismatch"), "{e}");
        }
        assert_eq!(
            check_peer(&ours, &with(vec![pair(1), pair(2)], Role::Sender)),
            Ok(())
        );
    }

    /// Verbs meets at the smaller MTU at RTR; two DOCA ends that each fixed an MTU must have
    /// fixed the same one. Traffic class and service level are each end's own.
    #[test]
    fn doca_ends_that_fix_different_mtus_are_refused_and_verbs_ends_are_not() {
        let with = |role, transport, mtu, tclass| {
            let mut h = hello(role, transport);
            h.qp = QpSettings {
                mtu,
                traffic_class: tclass,
                ..QpSettings::default()
            };
            h
        };
        let doca = TransportKind::Doca;
        let e = check_peer(
            &with(Role::Sender, doca, Some(4096), None),
            &with(Role::Receiver, doca, Some(1024), None),
        )
        .unwrap_err();
        assert!(
            e.contains("MTU mismatch") && e.contains("4096") && e.contains("1024"),
            "{e}"
        );
        for (a, b) in [(Some(1024), Some(1024)), (Some(4096), None), (None, None)] {
            check_peer(
                &with(Role::Sender, doca, a, None),
                &with(Role::Receiver, doca, b, None),
            )
            .unwrap();
        }
        let verbs = TransportKind::Verbs;
        check_peer(
            &with(Role::Sender, verbs, Some(4096), Some(104)),
            &with(Role::Receiver, verbs, Some(1024), Some(0)),
        )
        .expect("verbs uses the smaller MTU; each end keeps its own traffic class");
    }

    #[test]
    fn an_undecodable_frame_before_the_key_is_proven_is_answered_with_a_reject() {
        let now = Instant::now();
        let deadline = now + std::time::Duration::from_secs(5);
        let mut h = Handshake::server(now, deadline, auth(1, 2));
        h.fail(&Error::Decode(crate::proto::DecodeError::UnknownKind(0x7f)));
        assert!(
            matches!(&drain(&mut h)[..], [HandshakeAction::Reject(r)] if r.starts_with("invalid authentication message")),
            "a garbled first frame gets a Reject, not a silent close"
        );
    }

    fn auth(key: u8, nonce: u8) -> Option<Auth> {
        Some(Auth {
            key: AuthKey::from_bytes(&[key; 32]).expect("key"),
            nonce: [nonce; 32],
        })
    }

    /// A client whose hello is offered at once when it has no key; with a key, `exchange`
    /// offers a sender's hello over tcp once it proved the key (as the driver does after its
    /// set-up).
    fn client(ours: Hello, deadline: Instant, auth: Option<Auth>) -> Handshake {
        let mut h = Handshake::client_hello_later(deadline, auth);
        if h.awaits_our_hello() {
            h.our_hello(ours)
                .expect("a client without a key takes its hello at once");
        }
        h
    }

    /// Passes messages between a client and a server until both are quiet (the server
    /// prepares a receiver's hello over tcp when asked): each end's first error.
    fn exchange(client: &mut Handshake, server: &mut Handshake) -> (Option<Error>, Option<Error>) {
        fn outbox(h: &mut Handshake, wire: &mut VecDeque<Message>) {
            while let Some(action) = h.poll_action() {
                match action {
                    HandshakeAction::Send(m) => wire.push_back(m),
                    HandshakeAction::Reject(reason) => wire.push_back(Message::Reject { reason }),
                    _ => {}
                }
            }
        }
        let (mut to_server, mut to_client) = (VecDeque::new(), VecDeque::new());
        let (mut client_error, mut server_error) = (None, None);
        for _ in 0..50 {
            outbox(client, &mut to_server);
            outbox(server, &mut to_client);
            if client_error.is_none() && client.awaits_our_hello() {
                client_error = client
                    .our_hello(hello(Role::Sender, TransportKind::Tcp))
                    .err();
            }
            if server_error.is_none() && server.awaits_our_hello() {
                server_error = server
                    .our_hello(hello(Role::Receiver, TransportKind::Tcp))
                    .err();
            } else if let Some(m) = to_server.pop_front() {
                if server_error.is_none() {
                    server_error = server.on_message(m).err();
                }
            } else if let Some(m) = to_client.pop_front() {
                if client_error.is_none() {
                    client_error = client.on_message(m).err();
                }
            } else {
                break;
            }
        }
        (client_error, server_error)
    }

    /// The server's authentication window measures one round trip: the client sends its proof
    /// before it builds its hello (its data path), not after.
    #[test]
    fn a_keyed_client_proves_the_key_before_it_builds_its_hello() {
        let now = Instant::now();
        let mut c = Handshake::client_hello_later(now + Duration::from_secs(10), auth(1, 10));
        let mut s = Handshake::server(now, now + Duration::from_secs(10), auth(1, 20));
        assert!(
            !c.awaits_our_hello(),
            "nothing to build before the server answered"
        );
        let Some(HandshakeAction::Send(challenge)) = c.poll_action() else {
            panic!("the challenge goes first")
        };
        s.on_message(challenge).expect("challenge");
        let Some(HandshakeAction::Send(response)) = s.poll_action() else {
            panic!("the server answers")
        };
        c.on_message(response).expect("the server holds our key");
        assert!(matches!(
            c.poll_action(),
            Some(HandshakeAction::Send(Message::AuthProof { .. }))
        ));
        assert!(c.awaits_our_hello(), "the proof is out: now our data path");
        assert_eq!(c.poll_action(), None, "no hello before we built it");
        c.our_hello(hello(Role::Sender, TransportKind::Tcp))
            .expect("hello");
        assert!(matches!(
            c.poll_action(),
            Some(HandshakeAction::Send(Message::Hello(_)))
        ));
        // Without a key the hello is the first thing to build.
        assert!(Handshake::client_hello_later(now, None).awaits_our_hello());
    }

    #[test]
    fn the_same_key_on_both_ends_leads_to_the_hellos() {
        let now = Instant::now();
        let mut c = client(hello(Role::Sender, TransportKind::Tcp), now, auth(1, 10));
        let mut s = Handshake::server(now, now, auth(1, 20));
        let (ce, se) = exchange(&mut c, &mut s);
        assert!(ce.is_none() && se.is_none(), "{ce:?} {se:?}");
        assert!(s.peer().is_some(), "the server saw the client's hello");
        assert_eq!(c.stage, Stage::Connecting);
    }

    #[test]
    fn another_key_is_refused_in_one_round_trip_before_any_hello() {
        let now = Instant::now();
        let mut c = client(hello(Role::Sender, TransportKind::Tcp), now, auth(1, 10));
        let mut s = Handshake::server(now, now, auth(2, 20));
        let (ce, se) = exchange(&mut c, &mut s);
        assert!(matches!(ce, Some(Error::AuthenticationFailed(_))), "{ce:?}");
        assert!(
            matches!(se, Some(Error::Rejected(ref r)) if r == "authentication failed"),
            "{se:?}"
        );
        assert!(s.peer().is_none(), "no hello reached the server");
    }

    #[test]
    fn a_key_on_one_side_only_is_refused_with_a_reason_that_says_so() {
        let now = Instant::now();
        let mut c = client(hello(Role::Sender, TransportKind::Tcp), now, None);
        let mut s = Handshake::server(now, now, auth(1, 20));
        let (ce, se) = exchange(&mut c, &mut s);
        assert!(matches!(se, Some(Error::Refused(_))), "{se:?}");
        assert!(
            matches!(ce, Some(Error::Rejected(ref r)) if r.contains("authentication required")),
            "{ce:?}"
        );
        let mut c = client(hello(Role::Sender, TransportKind::Tcp), now, auth(1, 10));
        let mut s = Handshake::server(now, now, None);
        let (ce, se) = exchange(&mut c, &mut s);
        assert!(matches!(se, Some(Error::Refused(_))), "{se:?}");
        assert!(
            matches!(ce, Some(Error::Rejected(ref r)) if r.contains("no authentication key")),
            "{ce:?}"
        );
    }

    #[test]
    fn a_replayed_client_proof_does_not_check_against_a_fresh_server_nonce() {
        let now = Instant::now();
        let key = AuthKey::from_bytes(&[1; 32]).expect("key");
        let (client_nonce, old_server_nonce) = ([10u8; 32], [30u8; 32]);
        let recorded = key.client_proof(&client_nonce, &old_server_nonce);
        let mut s = Handshake::server(now, now, auth(1, 20));
        s.on_message(Message::AuthChallenge {
            nonce: client_nonce,
        })
        .unwrap();
        let e = s
            .on_message(Message::AuthProof { proof: recorded })
            .unwrap_err();
        assert!(matches!(e, Error::AuthenticationFailed(_)), "{e}");
        assert!(s.peer().is_none());
        // Nor does the server's own proof, reflected back to it.
        let mut s = Handshake::server(now, now, auth(1, 20));
        s.on_message(Message::AuthChallenge {
            nonce: client_nonce,
        })
        .unwrap();
        let Some(HandshakeAction::Send(Message::AuthResponse { proof, .. })) = s.poll_action()
        else {
            panic!("an AuthResponse");
        };
        let e = s.on_message(Message::AuthProof { proof }).unwrap_err();
        assert!(matches!(e, Error::AuthenticationFailed(_)), "{e}");
    }

    #[test]
    fn the_one_deadline_ends_every_step() {
        let now = Instant::now();
        let mut h = Handshake::server(now, now + std::time::Duration::from_secs(1), None);
        assert!(h.handle_timeout(now).is_ok());
        assert_eq!(
            h.handle_timeout(now + std::time::Duration::from_secs(1)),
            Err(Expired {
                waiting_for: "the client's hello",
                auth_window: false
            })
        );
        assert_eq!(
            h.poll_timeout(),
            None,
            "a failed handshake waits for nothing"
        );
    }

    #[test]
    fn a_stranger_has_one_short_window_to_authenticate_and_a_client_that_did_keeps_the_deadline() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(30);
        let mut s = Handshake::server(now, deadline, auth(1, 20));
        assert_eq!(s.poll_timeout(), Some(now + AUTH_WINDOW));
        assert!(!s.is_authenticated());
        assert_eq!(
            s.handle_timeout(now + AUTH_WINDOW),
            Err(Expired {
                waiting_for: "the client's authentication",
                auth_window: true
            })
        );

        let mut c = client(
            hello(Role::Sender, TransportKind::Tcp),
            deadline,
            auth(1, 10),
        );
        let mut s = Handshake::server(now, deadline, auth(1, 20));
        let (ce, se) = exchange(&mut c, &mut s);
        assert!(ce.is_none() && se.is_none(), "{ce:?} {se:?}");
        assert!(s.is_authenticated());
        assert_eq!(
            s.poll_timeout(),
            Some(deadline),
            "past authentication: the one deadline"
        );
        assert!(s.handle_timeout(now + AUTH_WINDOW).is_ok());

        let s = Handshake::server(now, now + Duration::from_secs(1), auth(1, 20));
        assert_eq!(
            s.poll_timeout(),
            Some(now + Duration::from_secs(1)),
            "never later than the handshake's own deadline"
        );
        let s = Handshake::server(now, deadline, None);
        assert_eq!(s.poll_timeout(), Some(deadline), "no key: no window");
        assert!(!s.is_authenticated());
    }
}
