//! The handshake driver: runs [`Handshake`] (the rules, in the core) over the bootstrap
//! connection and the data path being set up, until the session is established.
//!
//! It carries no protocol knowledge of its own: it creates the data path and our hello, feeds
//! the core what the control connection says (a message, a close, something undecodable) and
//! what the data path did (connected, failed, interrupted because the control connection
//! spoke), carries out the core's actions, and waits in slices until the core's one deadline,
//! so that the stop flag (Ctrl-C) is seen within a slice.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::choice::create_transport;
use super::connect::{connect_data_path, Connecting};
use super::resume::{negotiated_timeout, Resumption};
use super::route_paths;
use super::{ipv4, sleep_toward, slice_end, Session, SessionInfo, SessionPath};
use crate::auth::fresh_nonce;
use crate::config::Config;
use crate::listener::resume_registry::{ResumeAttempt, ResumeRegistry};
use crate::net::bootstrap;
use crate::net::iface::{path_info, PathInfo};
use crate::net::wait::remaining;
use crate::net::{ControlChannel, Received};
use crate::proto::{Hello, Message, PathPair, TransportKind, PROTOCOL_VERSION};
use crate::roce::{self, DeviceChoice};
use crate::session_core::handshake::{Auth, Handshake, HandshakeAction, AUTH_WINDOW};
use crate::session_core::resume::{ResumeTicket, SessionId};
use crate::time::deadline_after;
use crate::transport::{BootstrapSide, PathEnds, RolePath, SetupParams};
use crate::{Error, Result};

/// How long a client waits after its first busy answer before it tries again (a server whose
/// session just ended may not have freed its place yet)...
const BUSY_RETRY_FIRST: Duration = Duration::from_millis(50);
/// ... twice as long after each further one, up to this.
const BUSY_RETRY_MAX: Duration = Duration::from_millis(500);

/// A client's hello, read on the server within the handshake deadline, not yet answered.
#[derive(Debug)]
pub(crate) struct PendingHello {
    pub(crate) control: ControlChannel,
    pub(crate) hello: Hello,
    /// The server's handshake, past the client's hello.
    handshake: Handshake,
}

impl<P: RolePath + ?Sized> Session<P> {
    /// Client side: connect to `addr` and set up a session in which we play `P`'s role,
    /// retrying until the connect deadline while the server cannot be reached or answers busy
    /// (after [`BUSY_RETRY_FIRST`], doubling up to [`BUSY_RETRY_MAX`] apart; past the deadline
    /// the last busy answer is the error).
    pub(crate) fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        config.validate()?;
        let started = Instant::now();
        let deadline = deadline_after(started, config.connect_timeout);
        let mut busy_answers = 0u32;
        let mut pause = BUSY_RETRY_FIRST;
        loop {
            let left = remaining(deadline).unwrap_or(Duration::from_millis(1));
            let reason = match Self::connect_once(addr, config, left) {
                Err(Error::Busy(reason)) => reason,
                other => return other,
            };
            busy_answers += 1;
            let next = Instant::now() + pause;
            pause = (pause * 2).min(BUSY_RETRY_MAX);
            if next >= deadline {
                return Err(Error::Busy(format!(
                    "{reason} (answered {busy_answers} time(s) in {:.1} s, --connect-timeout)",
                    started.elapsed().as_secs_f64()
                )));
            }
            if busy_answers == 1 {
                log::info!(
                    "{addr} is busy ({}); trying again, at most {} ms apart, for up to {:.0} s \
(--connect-timeout)",
                    crate::log_text::peer_text(&reason),
                    BUSY_RETRY_MAX.as_millis(),
                    config.connect_timeout.as_secs_f64()
                );
            }
            while Instant::now() < next {
                if config.stopped() {
                    return Err(Error::Interrupted);
                }
                sleep_toward(next);
            }
        }
    }

    /// One connection and handshake, the TCP connection retried for at most `connect_for`.
    fn connect_once(addr: SocketAddr, config: &Config, connect_for: Duration) -> Result<Self> {
        let stream = bootstrap::connect(addr, connect_for, &|| config.stopped())?;
        let mut control = ControlChannel::new(stream)?;
        let deadline = deadline_after(Instant::now(), config.handshake_timeout);
        let auth = match auth_of(config) {
            Ok(auth) => auth,
            Err(e) => {
                control.reject("the client could not draw a nonce");
                return Err(e);
            }
        };
        // Authenticated first, then our data path: the server's authentication window must
        // not be spent on our set-up.
        let mut handshake = Handshake::client_hello_later(deadline, auth);
        until_our_hello(&mut control, &mut handshake, config, |_| {})?;
        let prepared = match Prepared::<P>::new(&control, BootstrapSide::Client, config, None) {
            Ok(p) => p,
            Err(e) => {
                control.reject(&format!("the client could not set up its data path: {e}"));
                return Err(e);
            }
        };
        if let Err(e) = handshake.our_hello(prepared.hello.clone()) {
            run_failure_actions(&mut control, &mut handshake);
            return Err(e);
        }
        prepared.run(
            control,
            handshake,
            config,
            ResumeRole::Client { server: addr },
        )
    }

    /// Server side, second step: answer a hello read by [`read_hello`] and set up a session in
    /// which we play `P`'s role, within what is left of the handshake deadline.
    /// With `registry`, a session that resumes registers there, so that the listener hands it
    /// its client's resume attempts.
    pub(crate) fn accept(
        pending: PendingHello,
        config: &Config,
        registry: Option<&ResumeRegistry>,
    ) -> Result<Self> {
        let PendingHello {
            mut control,
            mut handshake,
            hello: pending_hello,
        } = pending;
        if let Err(e) = config.validate() {
            handshake.on_bad_config();
            run_failure_actions(&mut control, &mut handshake);
            return Err(e);
        }
        let config = &fitted_credits(config, P::ROLE, pending_hello.credits);
        // The client chooses how many queue pairs (its hello carries a valid count).
        let config = &config.clone().with_qps(pending_hello.qps);
        let mut prepared = match Prepared::<P>::new(
            &control,
            BootstrapSide::Server,
            config,
            Some(&pending_hello.paths),
        ) {
            Ok(p) => p,
            Err(e) => {
                handshake.fail(&e);
                run_failure_actions(&mut control, &mut handshake);
                return Err(e);
            }
        };
        let resume = match server_ticket(&mut prepared.hello, &pending_hello, &handshake, config) {
            Ok(Some(ticket)) => registry.map_or(ResumeRole::Off, |registry| ResumeRole::Server {
                ticket,
                registry: registry.clone(),
            }),
            Ok(None) => ResumeRole::Off,
            Err(e) => {
                handshake.fail(&e);
                run_failure_actions(&mut control, &mut handshake);
                return Err(e);
            }
        };
        if matches!(resume, ResumeRole::Off) {
            prepared.hello.session_id = [0; 16];
            prepared.hello.resume_secret = [0; 32];
            if registry.is_none() {
                prepared.hello.resume_timeout_ms = 0;
            }
        }
        if let Err(e) = handshake.our_hello(prepared.hello.clone()) {
            run_failure_actions(&mut control, &mut handshake);
            return Err(e);
        }
        prepared.run(control, handshake, config, resume)
    }
}

/// The server's configuration with the session's credits: never more messages in flight than
/// the sender can keep (a client sender holds its `credits` messages until they are released,
/// so a receiving server posts at most that many slots: more would only delay its credit
/// batches past what the sender can send, and stall it), and a sending server keeps as many as
/// the client receiver has slots for.
fn fitted_credits(config: &Config, ours: crate::proto::Role, client_credits: u16) -> Config {
    let mut config = config.clone();
    config.credits = match ours {
        crate::proto::Role::Receiver => config.credits.min(client_credits),
        crate::proto::Role::Sender => client_credits,
    };
    config
}

/// Server side, first step: read the client's hello on an accepted connection, within the
/// handshake deadline (with a key, the client's authentication within the core's shorter
/// window). A garbage peer gets a Reject and an error; a silent one is closed when its deadline
/// passes. `authenticated` is set once the client proved the key (the listener's admission
/// keeps such a connection before strangers).
pub(crate) fn read_hello(
    stream: TcpStream,
    config: &Config,
    authenticated: &AtomicBool,
) -> Result<Opening> {
    let now = Instant::now();
    let deadline = deadline_after(now, config.handshake_timeout);
    let mut control = ControlChannel::new(stream)?;
    let mut handshake = Handshake::server(now, deadline, auth_of(config)?);
    // A resume attempt says so in its first frame; it proves the session's secret to the
    // session itself, not the key to us (with a key, the secret is bound to it).
    match first_frame(&mut control, &mut handshake, config) {
        Ok(Some((session, nonce))) => {
            return Ok(Opening::Resume(
                session,
                Box::new(ResumeAttempt {
                    control,
                    nonce,
                    since: now,
                }),
            ))
        }
        Ok(None) => {}
        Err(e) => {
            run_failure_actions(&mut control, &mut handshake);
            return Err(e);
        }
    }
    let peer = control.peer_addr();
    until_our_hello(&mut control, &mut handshake, config, |h| {
        if h.is_authenticated() && !authenticated.swap(true, Ordering::Relaxed) {
            log::debug!("{peer}: proved the key");
        }
    })?;
    let hello = handshake
        .peer()
        .cloned()
        .ok_or_else(|| Error::Internal("the client's hello vanished".to_owned()))?;
    Ok(Opening::Hello(Box::new(PendingHello {
        control,
        hello,
        handshake,
    })))
}

/// Runs the handshake until our hello is to be built (the server read the client's; the client
/// proved the key, or has none): the authentication messages go out as the core queues them.
/// `each_step` sees the handshake before every step. On failure the peer is told what the core
/// says.
fn until_our_hello(
    control: &mut ControlChannel,
    handshake: &mut Handshake,
    config: &Config,
    mut each_step: impl FnMut(&Handshake),
) -> Result<()> {
    while !handshake.awaits_our_hello() {
        each_step(handshake);
        let stepped =
            send_actions(control, handshake).and_then(|()| step(control, handshake, config));
        if let Err(e) = stepped {
            run_failure_actions(control, handshake);
            return Err(e);
        }
    }
    // what is queued (the client's proof) goes out before our set-up
    send_actions(control, handshake).inspect_err(|_| run_failure_actions(control, handshake))
}

/// What a new connection to the listener opened with.
#[derive(Debug)]
pub(crate) enum Opening {
    /// A new session's hello.
    Hello(Box<PendingHello>),
    /// A resume attempt for the session with this id.
    Resume(SessionId, Box<ResumeAttempt>),
}

/// Waits for the first frame: a Resume is returned; anything else goes to the handshake.
fn first_frame(
    control: &mut ControlChannel,
    handshake: &mut Handshake,
    config: &Config,
) -> Result<Option<(SessionId, crate::auth::Nonce)>> {
    loop {
        let slice_end = slice_end(handshake.poll_timeout());
        match control.recv_until(slice_end) {
            Ok(Received::Message(Message::Resume { session, nonce })) => {
                return Ok(Some((session, nonce)))
            }
            Ok(Received::Message(msg)) => {
                handshake.on_message(msg)?;
                return Ok(None);
            }
            Ok(Received::Closed(lost)) => return Err(handshake.on_control_closed(lost)),
            Ok(Received::Nothing) => {}
            Err(e) => {
                handshake.fail(&e);
                return Err(e);
            }
        }
        expire(control, handshake, config)?;
    }
}

/// How a session being set up will resume.
enum ResumeRole {
    Off,
    Client {
        server: SocketAddr,
    },
    Server {
        ticket: ResumeTicket,
        registry: ResumeRegistry,
    },
}

/// Server: when both ends resume, the session's ticket, its id (and without a key its
/// secret) put in our hello.
fn server_ticket(
    ours: &mut Hello,
    client: &Hello,
    handshake: &Handshake,
    config: &Config,
) -> Result<Option<ResumeTicket>> {
    if negotiated_timeout(ours, client).is_none() {
        return Ok(None);
    }
    let ticket = match (&config.auth_key, handshake.proven_nonces()) {
        (Some(key), Some((client_nonce, server_nonce))) => {
            let random = ResumeTicket::random()?;
            let ticket =
                ResumeTicket::bound_to_key(key, *random.id(), &client_nonce, &server_nonce)?;
            ours.resume_secret = [0; 32];
            ticket
        }
        (Some(_), None) => {
            return Err(Error::Internal(
                "a key without the authentication's nonces".into(),
            ))
        }
        (None, _) => {
            let ticket = ResumeTicket::random()?;
            ours.resume_secret = ticket.secret_for_hello();
            ticket
        }
    };
    ours.session_id = *ticket.id();
    Ok(Some(ticket))
}

/// Client: the ticket from the server's hello, when both ends resume.
fn client_ticket(
    ours: &Hello,
    server: &Hello,
    nonces: Option<(crate::auth::Nonce, crate::auth::Nonce)>,
    config: &Config,
) -> Result<Option<ResumeTicket>> {
    if negotiated_timeout(ours, server).is_none() || server.session_id == [0; 16] {
        return Ok(None);
    }
    match (&config.auth_key, nonces) {
        (Some(key), Some((client_nonce, server_nonce))) => Ok(Some(ResumeTicket::bound_to_key(
            key,
            server.session_id,
            &client_nonce,
            &server_nonce,
        )?)),
        (Some(_), None) => Err(Error::Internal(
            "a key without the authentication's nonces".into(),
        )),
        (None, _) => Ok(Some(ResumeTicket::from_parts(
            &server.session_id,
            &server.resume_secret,
        )?)),
    }
}

/// Reads what the control connection has for the handshake (waiting one slice at most), and
/// applies the deadline and the stop flag.
fn step(control: &mut ControlChannel, handshake: &mut Handshake, config: &Config) -> Result<()> {
    let slice_end = slice_end(handshake.poll_timeout());
    match control.recv_until(slice_end) {
        Ok(Received::Message(msg)) => return handshake.on_message(msg),
        Ok(Received::Closed(lost)) => return Err(handshake.on_control_closed(lost)),
        Ok(Received::Nothing) => {}
        Err(e) => {
            handshake.fail(&e);
            return Err(e);
        }
    }
    expire(control, handshake, config)
}

/// The first connection's side of the connect loop: the control connection is always
/// watched, and what it says goes to the handshake core.
struct FirstConnection<'a> {
    handshake: &'a mut Handshake,
    config: &'a Config,
}

impl Connecting for FirstConnection<'_> {
    type Failure = Error;

    fn setup_failed(&mut self, e: Error) -> Error {
        e
    }

    fn watch_control(&self) -> bool {
        true
    }

    fn on_control(&mut self, control: &mut ControlChannel) -> Result<()> {
        step(control, self.handshake, self.config)
    }

    fn on_quiet(&mut self, control: &mut ControlChannel, _deadline: Instant) -> Result<()> {
        expire(control, self.handshake, self.config)
    }

    fn on_connected(&mut self, early_data: bool) -> Result<()> {
        self.handshake.on_connected(early_data)
    }
}

/// Applies the handshake's deadline and the stop flag.
fn expire(control: &ControlChannel, handshake: &mut Handshake, config: &Config) -> Result<()> {
    if let Err(expired) = handshake.handle_timeout(Instant::now()) {
        let limit = if expired.auth_window {
            AUTH_WINDOW.min(config.handshake_timeout)
        } else {
            config.handshake_timeout
        };
        return Err(Error::HandshakeTimeout {
            peer: control.peer_addr(),
            seconds: limit.as_secs_f64(),
            stage: expired.waiting_for,
        });
    }
    if config.stopped() {
        return Err(Error::Interrupted);
    }
    Ok(())
}

/// The key from the configuration with a fresh nonce, when authentication is on.
fn auth_of(config: &Config) -> Result<Option<Auth>> {
    config
        .auth_key
        .as_ref()
        .map(|key| {
            Ok(Auth {
                key: key.clone(),
                nonce: fresh_nonce()?,
            })
        })
        .transpose()
}

/// Sends the messages the core queued before the hellos are known (authentication).
fn send_actions(control: &mut ControlChannel, handshake: &mut Handshake) -> Result<()> {
    while let Some(action) = handshake.poll_action() {
        match action {
            HandshakeAction::Send(msg) => control.send(&msg)?,
            HandshakeAction::Reject(reason) => control.reject(&reason),
            other => {
                return Err(Error::Internal(format!(
                    "{other:?} before the client's hello"
                )))
            }
        }
    }
    Ok(())
}

/// After a failure: only the Reject the core queued is carried out.
fn run_failure_actions(control: &mut ControlChannel, handshake: &mut Handshake) {
    while let Some(action) = handshake.poll_action() {
        if let HandshakeAction::Reject(reason) = action {
            control.reject(&reason);
        }
    }
}

/// Local half of the handshake: the data path created, our hello built.
struct Prepared<P: RolePath + ?Sized> {
    transport: Box<P>,
    slots: Vec<P::Slot>,
    hello: Hello,
    path: PathInfo,
    device: Option<DeviceChoice>,
    /// The session's other paths (`--paths`), in order, each with its device (RDMA).
    extra_paths: Vec<SessionPath>,
    /// Why auto fell back (see [`SessionInfo::fallback`]).
    fallback: Option<String>,
}

impl<P: RolePath + ?Sized> Prepared<P> {
    /// Our data path and hello. A client resolves its `--paths` here; a server runs the
    /// client's (`client_paths`, from its hello).
    fn new(
        control: &ControlChannel,
        side: BootstrapSide,
        config: &Config,
        client_paths: Option<&[PathPair]>,
    ) -> Result<Self> {
        let local_ip = ipv4(control.local_addr().ip())?;
        let peer_ip = ipv4(control.peer_addr().ip())?;
        let path = path_info(local_ip, peer_ip);
        let (pairs, extra) = match client_paths {
            None => route_paths::client_paths(config, &path)?,
            Some(pairs) => (pairs.to_vec(), route_paths::server_paths(pairs, config)?),
        };
        let params = SetupParams {
            side,
            role: P::ROLE,
            local_ip,
            peer_ip,
            slots: usize::from(config.credits),
            // The message and, with a checksum, its trailer.
            slot_size: config
                .max_msg_size
                .saturating_add(config.checksum.trailer_len()),
            lanes: usize::from(config.qps),
            device: None,
            extra_paths: extra
                .iter()
                .map(|p| PathEnds {
                    local_ip: p.source,
                    peer_ip: p.peer,
                    device: None,
                })
                .collect(),
            qp: config.qp_settings(),
            sysfs_root: config.sysfs_root.clone(),
            faults: config.test_faults,
        };
        let ((transport, slots), devices, fallback) =
            create_transport::<P>(config, &path, &extra, params)?;
        let mut devices = devices.into_iter();
        let device = devices.next();
        let extra_paths = extra
            .into_iter()
            .map(|path| SessionPath {
                path,
                device: devices.next(),
            })
            .collect();
        if transport.kind() == TransportKind::Tcp && config.qp_settings().any() {
            // Only auto gets here (validate() refuses them with --transport tcp).
            log::warn!(
                "the tcp transport has no RDMA queue pair, so this session does not apply {} \
                 (its packets keep the default class; docs/lossless-roce.md)",
                config.qp_flags_set().join(", ")
            );
        }
        let gid = device
            .as_ref()
            .map_or_else(|| roce::gid_from_ipv4(local_ip), |d| d.gid);
        let hello = Hello {
            version: PROTOCOL_VERSION,
            role: P::ROLE,
            transport: transport.kind(),
            // validate() bounded it to u32. A transport may carry less than configured (the
            // DOCA device's message size cap): it reports that as its slot size.
            max_msg_size: config.max_msg_size.min(
                transport
                    .slot_size()
                    .saturating_sub(config.checksum.trailer_len()),
            ) as u32,
            credits: config.credits,
            qps: config.qps,
            paths: pairs,
            gid,
            checksum: config.checksum,
            resume_timeout_ms: if transport.can_resume() {
                // validate() bounded it to u32 milliseconds.
                u32::try_from(config.resume_timeout.as_millis()).unwrap_or(u32::MAX)
            } else {
                0
            },
            session_id: [0; 16],
            resume_secret: [0; 32],
            qp: transport.qp_settings(),
            blob: transport.local_blob(),
        };
        Ok(Self {
            transport,
            slots,
            hello,
            path,
            device,
            extra_paths,
            fallback,
        })
    }

    /// Runs the handshake to its end: carries out the core's actions, feeds it the control
    /// connection and the data path's set-up.
    fn run(
        mut self,
        mut control: ControlChannel,
        mut handshake: Handshake,
        config: &Config,
        resume_role: ResumeRole,
    ) -> Result<Session<P>> {
        let result = self.drive(&mut control, &mut handshake, config);
        if let Err(e) = result {
            handshake.fail(&e);
            run_failure_actions(&mut control, &mut handshake);
            self.transport.close();
            return Err(e);
        }
        let nonces = handshake.proven_nonces();
        let (local, peer) = handshake
            .into_hellos()
            .ok_or_else(|| Error::Internal("established without both hellos".to_owned()))?;
        let timeout = negotiated_timeout(&local, &peer);
        let resume = match (resume_role, timeout) {
            (ResumeRole::Off, _) | (_, None) => None,
            (ResumeRole::Server { ticket, registry }, Some(timeout)) => {
                let credits = match local.role {
                    crate::proto::Role::Receiver => local.credits,
                    crate::proto::Role::Sender => peer.credits,
                };
                Some(Resumption::server(
                    ticket,
                    timeout,
                    registry,
                    local.role,
                    u32::from(credits),
                ))
            }
            (ResumeRole::Client { server }, Some(timeout)) => {
                match client_ticket(&local, &peer, nonces, config) {
                    Ok(ticket) => ticket.map(|ticket| Resumption::client(ticket, timeout, server)),
                    Err(e) => {
                        control.reject("the client could not take the session's resume ticket");
                        self.transport.close();
                        return Err(e);
                    }
                }
            }
        };
        let info = SessionInfo {
            mtu: self.transport.path_mtu(),
            transport: local.transport,
            path: self.path,
            device: self.device,
            extra_paths: self.extra_paths,
            fallback: self.fallback,
            local,
            peer,
        };
        log::info!("session established: {}", info.describe());
        for warning in info.qp_mismatches() {
            log::warn!("{warning}");
        }
        Ok(Session {
            control,
            transport: self.transport,
            slots: self.slots,
            info,
            config: config.clone(),
            resume,
        })
    }

    fn drive(
        &mut self,
        control: &mut ControlChannel,
        handshake: &mut Handshake,
        config: &Config,
    ) -> Result<()> {
        loop {
            while let Some(action) = handshake.poll_action() {
                match action {
                    HandshakeAction::Send(msg) => control.send(&msg)?,
                    HandshakeAction::Reject(reason) => {
                        control.reject(&reason);
                        return Err(Error::Internal(format!(
                            "the handshake rejected without an error: {reason}"
                        )));
                    }
                    HandshakeAction::ConnectDataPath { peer_blob } => {
                        self.connect(control, handshake, &peer_blob, config)?;
                    }
                    HandshakeAction::PostSlots => self.transport.before_ready(&mut self.slots)?,
                }
            }
            if handshake.is_established() {
                return Ok(());
            }
            step(control, handshake, config)?;
        }
    }

    /// Connects the data path step by step, watching the control connection between the steps
    /// (the peer's Reject, its close, or on tcp the receiver's early Ready) and feeding what it
    /// says to the handshake core.
    fn connect(
        &mut self,
        control: &mut ControlChannel,
        handshake: &mut Handshake,
        peer_blob: &[u8],
        config: &Config,
    ) -> Result<()> {
        let deadline = handshake.poll_timeout().unwrap_or_else(Instant::now);
        let mut first = FirstConnection { handshake, config };
        connect_data_path(
            &mut *self.transport,
            peer_blob,
            deadline,
            control,
            &mut first,
        )
    }
}
