//! Session setup: bootstrap connection, transport choice, hello exchange, Ready barrier.
//!
//! The order and its rules live in [`crate::session_core::handshake`] (and `docs/design.md`): the
//! client connects and sends its hello; the server answers with its hello or a Reject; both
//! connect their transports with the blobs; the receiver posts every receive slot and then
//! says Ready; the sender sends nothing before Ready. One deadline covers the whole handshake
//! on each side, and the control connection is watched during every step, so a peer that
//! vanishes ends the handshake at once.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::config::{Config, TransportChoice};
use crate::net::bootstrap;
use crate::net::iface::{path_info, PathInfo};
use crate::net::wait::{remaining, wait_any, Interest};
use crate::net::ControlChannel;
use crate::proto::{Hello, Message, Role, TransportKind, PROTOCOL_VERSION};
use crate::roce::{self, DeviceChoice, GidTable};
use crate::session_core::handshake::{self, Got, Step};
use crate::time::deadline_after;
use crate::transport::{self, BootstrapSide, SetupParams, Transport};
use crate::{Error, ProtocolViolation, Result};

/// How long one wait slice lasts before the stop flag is checked again (also while a handshake
/// waits for the peer's hello or Ready).
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// How long a data-path failure waits for the control channel to say why.
const EXPLAIN_WAIT: Duration = Duration::from_millis(500);

/// What was negotiated and chosen for a session (for logs, summaries and `--json`).
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The transport in use.
    pub transport: TransportKind,
    /// Source address and interface toward the peer.
    pub path: PathInfo,
    /// The RDMA device, port and GID, when an RDMA transport runs.
    pub device: Option<DeviceChoice>,
    /// Our hello.
    pub(crate) local: Hello,
    /// The peer's hello.
    pub(crate) peer: Hello,
    /// The data path's MTU, when the transport has one (RDMA: the path MTU of the QP).
    pub(crate) mtu: Option<u32>,
}

impl SessionInfo {
    /// The perftest-style block printed at start: what was chosen and negotiated.
    pub fn describe(&self) -> String {
        let iface = self.path.interface.as_deref().unwrap_or("?");
        let mut s = format!(
            "transport {} | source {} ({iface}) -> peer {} | credits {} | max message {} bytes",
            self.transport,
            self.path.source,
            self.path.peer,
            self.credits(),
            self.max_msg_size()
        );
        if let Some(d) = &self.device {
            s.push_str(&format!(
                " | device {} port {} gid-index {} gid {} netdev {}",
                d.device,
                d.port,
                d.gid_index,
                d.gid_string(),
                d.netdev.as_deref().unwrap_or("-")
            ));
        }
        s
    }

    /// The data path's MTU in bytes, when the transport has one (RDMA transports).
    pub fn mtu(&self) -> Option<u32> {
        self.mtu
    }

    /// The window: the receiver's slot count.
    pub fn credits(&self) -> u16 {
        match self.local.role {
            Role::Receiver => self.local.credits,
            Role::Sender => self.peer.credits,
        }
    }

    /// The largest message this session carries: the smaller of both ends' limits.
    pub fn max_msg_size(&self) -> u32 {
        self.local.max_msg_size.min(self.peer.max_msg_size)
    }
}

/// An established session: control channel plus connected transport, past the Ready barrier.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) control: ControlChannel,
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) info: SessionInfo,
    pub(crate) config: Config,
}

/// A client's hello, read on the server within the handshake deadline, not yet answered.
#[derive(Debug)]
pub(crate) struct PendingHello {
    pub(crate) control: ControlChannel,
    pub(crate) hello: Hello,
    /// The handshake's one deadline, counted from the connection's arrival.
    pub(crate) deadline: Instant,
}

impl Session {
    /// Client side: connect to `addr` (retrying until the connect deadline) and set up a
    /// session in which we play `role`.
    pub(crate) fn connect(addr: SocketAddr, role: Role, config: &Config) -> Result<Session> {
        config.validate()?;
        let stream = bootstrap::connect(addr, config.connect_timeout, &|| config.stopped())?;
        let mut control = ControlChannel::new(stream)?;
        let deadline = deadline_after(Instant::now(), config.handshake_timeout);
        let prepared = match Prepared::new(&control, BootstrapSide::Client, role, config) {
            Ok(p) => p,
            Err(e) => {
                control.reject(&format!("the client could not set up its data path: {e}"));
                return Err(e);
            }
        };
        control.send(&Message::Hello(prepared.hello.clone()))?;
        let peer = match expect(&mut control, Step::ServerHello, deadline, config)? {
            Got::Hello(h) => *h,
            Got::Ready => return Err(Error::Internal("a hello step returned Ready".to_owned())),
        };
        if let Err(reason) = handshake::check_peer(&prepared.hello, &peer) {
            control.reject(&reason);
            return Err(Error::Refused(reason));
        }
        prepared.finish(control, peer, deadline, config)
    }

    /// Server side, first step: read the client's hello on an accepted connection, within the
    /// handshake deadline. A garbage peer gets a Reject and an error; a silent one is closed
    /// when the deadline passes.
    pub(crate) fn read_hello(stream: TcpStream, config: &Config) -> Result<PendingHello> {
        let deadline = deadline_after(Instant::now(), config.handshake_timeout);
        let mut control = ControlChannel::new(stream)?;
        match expect(&mut control, Step::ClientHello, deadline, config) {
            Ok(Got::Hello(hello)) => Ok(PendingHello {
                control,
                hello: *hello,
                deadline,
            }),
            Ok(Got::Ready) => Err(Error::Internal("a hello step returned Ready".to_owned())),
            Err(Error::Decode(e)) => {
                control.reject(&format!("invalid hello: {e}"));
                Err(Error::Decode(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Server side, second step: answer a hello read by [`Session::read_hello`] and set up a
    /// session in which we play `role`, within what is left of the handshake deadline.
    pub(crate) fn accept(pending: PendingHello, role: Role, config: &Config) -> Result<Session> {
        let PendingHello {
            mut control,
            hello: peer,
            deadline,
        } = pending;
        if let Err(e) = config.validate() {
            control.reject("server configuration error");
            return Err(e);
        }
        let prepared = match Prepared::new(&control, BootstrapSide::Server, role, config) {
            Ok(p) => p,
            Err(e) => {
                control.reject(&format!("server could not set up its data path: {e}"));
                return Err(e);
            }
        };
        if let Err(reason) = handshake::check_peer(&prepared.hello, &peer) {
            control.reject(&reason);
            return Err(Error::Refused(reason));
        }
        control.send(&Message::Hello(prepared.hello.clone()))?;
        prepared.finish(control, peer, deadline, config)
    }

    /// A data-path failure is often the visible half of the peer ending the session (a Reject
    /// or a closed control connection that has not been read yet). Looks briefly at the control
    /// channel for the words that say why; otherwise keeps the transport's own error (a closed
    /// data path becoming [`Error::PeerLost`]). `messages` is the count for that error.
    pub(crate) fn explain_transport_error(&mut self, e: Error, messages: u64) -> Error {
        self.explain_transport_error_within(e, messages, EXPLAIN_WAIT)
    }

    /// [`Session::explain_transport_error`], looking at most `wait` for the peer's words.
    pub(crate) fn explain_transport_error_within(
        &mut self,
        e: Error,
        messages: u64,
        wait: Duration,
    ) -> Error {
        let transport_failure = matches!(
            e,
            Error::TransportClosed { .. }
                | Error::TransportIo { .. }
                | Error::TransportProtocol { .. }
                | Error::Verbs { .. }
                | Error::VerbsCompletion { .. }
                | Error::Doca { .. }
        );
        if !transport_failure {
            return e;
        }
        let deadline = deadline_after(Instant::now(), wait);
        while !self.control.is_closed() {
            match self.control.recv_until(deadline) {
                Ok(Some(Message::Reject { reason })) => return Error::Rejected(reason),
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(Error::PeerLost { reason, .. }) => return Error::PeerLost { reason, messages },
                Err(_) => break,
            }
        }
        match e {
            Error::TransportClosed { .. } => Error::PeerLost {
                reason: e.to_string(),
                messages,
            },
            // The kernel gave up on the peer's host (keepalive or retransmissions unanswered,
            // its link down): the data path's way of saying the peer vanished.
            Error::TransportIo { ref source, .. } if peer_vanished(source.kind()) => {
                Error::PeerLost {
                    reason: format!("{e}: {source}"),
                    messages,
                }
            }
            other => other,
        }
    }

    /// Sleeps until the control channel (when `watch_control`) or the transport (when
    /// `watch_data`) may have news, `until` passes, or a short slice has passed, whichever is
    /// first. Returns whether the control channel may be readable. A descriptor at end of file
    /// must not be watched (it is always readable): callers pass `false` for it. Returns
    /// [`Error::Interrupted`] when the stop flag is set and `honor_stop` is.
    pub(crate) fn wait(
        &mut self,
        until: Option<Instant>,
        watch_control: bool,
        watch_data: bool,
        honor_stop: bool,
    ) -> Result<bool> {
        if honor_stop && self.config.stopped() {
            return Err(Error::Interrupted);
        }
        let slice = match until {
            Some(t) => remaining(t).map_or(Duration::ZERO, |left| left.min(WAIT_SLICE)),
            None => WAIT_SLICE,
        };
        if slice.is_zero() {
            return Ok(watch_control);
        }
        let control = Interest::read(self.control.fd());
        let data = if watch_data {
            self.transport.wait_handle().map(|h| Interest {
                fd: h.fd,
                readable: true,
                writable: h.writable,
            })
        } else {
            None
        };
        let (control_ready, data_ready) = match (watch_control, data) {
            (true, Some(data)) => {
                let ready = wait_any([control, data], slice)?;
                (ready & 1 != 0, ready & 2 != 0)
            }
            (true, None) => (wait_any([control], slice)? != 0, false),
            (false, Some(data)) => (false, wait_any([data], slice)? != 0),
            (false, None) => {
                wait_any([], slice)?;
                (false, false)
            }
        };
        if data_ready {
            self.transport.on_wakeup();
        }
        Ok(control_ready)
    }
}

/// Waits for the message `step` expects, until `deadline`.
fn expect(
    control: &mut ControlChannel,
    step: Step,
    deadline: Instant,
    config: &Config,
) -> Result<Got> {
    // In slices, so that the stop flag (Ctrl-C) is seen within one slice, not at the deadline.
    let msg = loop {
        let slice_end = deadline.min(Instant::now() + WAIT_SLICE);
        if let Some(msg) = control.recv_until(slice_end)? {
            break msg;
        }
        if remaining(deadline).is_none() {
            return Err(timeout(control, config, step.describe()));
        }
        if config.stopped() {
            return Err(Error::Interrupted);
        }
    };
    handshake::on_message(step, msg).inspect_err(|e| {
        if let Error::Protocol(v) = e {
            control.reject(&format!("protocol violation: {v}"));
        }
    })
}

/// Local half of the handshake: transport chosen and created, our hello built.
struct Prepared {
    transport: Box<dyn Transport>,
    hello: Hello,
    path: PathInfo,
    device: Option<DeviceChoice>,
}

impl Prepared {
    fn new(
        control: &ControlChannel,
        side: BootstrapSide,
        role: Role,
        config: &Config,
    ) -> Result<Self> {
        let local_ip = ipv4(control.local_addr().ip())?;
        let peer_ip = ipv4(control.peer_addr().ip())?;
        let path = path_info(local_ip, peer_ip);
        let params = SetupParams {
            side,
            role,
            local_ip,
            peer_ip,
            slots: usize::from(config.credits),
            slot_size: config.max_msg_size,
            device: None,
        };
        let (transport, device) = create_transport(config, &path, params)?;
        let kind = transport.kind();
        let gid = device
            .as_ref()
            .map_or_else(|| roce::gid_from_ipv4(local_ip), |d| d.gid);
        let hello = Hello {
            version: PROTOCOL_VERSION,
            role,
            transport: kind,
            // validate() bounded it to u32. A transport may carry less than configured (the
            // DOCA device's message size cap): it reports that as its slot size.
            max_msg_size: config.max_msg_size.min(transport.slot_size()) as u32,
            credits: config.credits,
            gid,
            blob: transport.local_blob(),
        };
        Ok(Self {
            transport,
            hello,
            path,
            device,
        })
    }

    /// Connects the transport and passes the Ready barrier.
    fn finish(
        mut self,
        mut control: ControlChannel,
        peer: Hello,
        deadline: Instant,
        config: &Config,
    ) -> Result<Session> {
        if let Err(e) = self
            .transport
            .connect_watching(&peer.blob, deadline, control.fd())
        {
            let e = match e {
                Error::PeerLost { reason, .. } => Error::PeerLost {
                    reason: format!("{reason} (during the data path setup)"),
                    messages: 0,
                },
                Error::TransportProtocol { .. } => match control.try_recv() {
                    Ok(Some(Message::Reject { reason })) => Error::Rejected(reason),
                    Ok(Some(other)) => Error::Protocol(ProtocolViolation::Unexpected {
                        expected: "nothing during the data path setup",
                        got: other.name(),
                    }),
                    _ => e,
                },
                other => other,
            };
            control.reject(&format!("data path setup failed: {e}"));
            return Err(e);
        }
        match self.hello.role {
            Role::Receiver => {
                for slot in 0..self.transport.slot_count() {
                    self.transport.post_recv(slot)?;
                }
                control.send(&Message::Ready)?;
            }
            Role::Sender => match expect(&mut control, Step::Ready, deadline, config)? {
                Got::Ready => {}
                Got::Hello(_) => {
                    return Err(Error::Internal(
                        "the Ready step returned a Hello".to_owned(),
                    ))
                }
            },
        }
        let info = SessionInfo {
            mtu: self.transport.path_mtu(),
            transport: self.hello.transport,
            path: self.path,
            device: self.device,
            local: self.hello,
            peer,
        };
        log::info!("session established: {}", info.describe());
        Ok(Session {
            control,
            transport: self.transport,
            info,
            config: config.clone(),
        })
    }
}

/// Applies the device rule (docs/design.md, "Device and GID choice") and the transport
/// choice, and creates the transport; logs what was decided. With `auto`, an RDMA transport
/// that cannot start here falls back to the next one in [`transport::auto_order`], then to TCP.
fn create_transport(
    config: &Config,
    path: &PathInfo,
    params: SetupParams,
) -> Result<(Box<dyn Transport>, Option<DeviceChoice>)> {
    let iface = path.interface.as_deref().unwrap_or("unknown interface");
    let tcp =
        |params: &SetupParams| transport::create(TransportKind::Tcp, params).map(|t| (t, None));
    let wanted = match config.transport {
        TransportChoice::Tcp => return tcp(&params),
        TransportChoice::Doca => Some(TransportKind::Doca),
        TransportChoice::Verbs => Some(TransportKind::Verbs),
        TransportChoice::Auto => None,
    };
    if let Some(kind) = wanted {
        if !transport::compiled_in().contains(&kind) {
            return Err(Error::unavailable(
                kind.name(),
                "not compiled into this build; use --transport tcp or auto".to_owned(),
            ));
        }
    }
    let table = GidTable::read(&config.sysfs_root).unwrap_or_else(|e| {
        log::warn!("cannot read the RDMA GID table: {e}");
        GidTable::default()
    });
    let selection = roce::select(
        &table,
        path.source,
        path.interface.as_deref(),
        &config.overrides,
    );
    if let Some(kind) = wanted {
        let sel = selection?;
        log_warnings(&sel);
        let params = SetupParams {
            device: Some(sel.choice.clone()),
            ..params
        };
        return Ok((transport::create(kind, &params)?, Some(sel.choice)));
    }
    let rdma_kinds = transport::auto_order(true).filter(|k| *k != TransportKind::Tcp);
    let rdma = rdma_kinds.clone().next();
    match (selection, rdma) {
        (Ok(sel), Some(_)) => {
            log_warnings(&sel);
            let rdma_params = SetupParams {
                device: Some(sel.choice.clone()),
                ..params.clone()
            };
            // Every RDMA transport compiled in, in order (doca, then verbs): the first that
            // sets up wins; one line says which could not start and why; else TCP.
            let mut failed: Vec<String> = Vec::new();
            let owner = format!(
                "RoCE v2 GID {} on {} port {} owns source {} ({iface})",
                sel.choice.gid_string(),
                sel.choice.device,
                sel.choice.port,
                path.source
            );
            for kind in rdma_kinds {
                match transport::create(kind, &rdma_params) {
                    Ok(t) => {
                        if !failed.is_empty() {
                            log::warn!(
                                "{owner}, but {}; using the {kind} transport",
                                failed.join("; ")
                            );
                        }
                        return Ok((t, Some(sel.choice)));
                    }
                    Err(e) => failed.push(format!("the {kind} transport cannot start: {e}")),
                }
            }
            log::warn!(
                "{owner}, but {}; using the TCP transport",
                failed.join("; ")
            );
            tcp(&params)
        }
        (Ok(sel), None) => {
            log::info!(
                "RoCE v2 GID {} on {} port {} owns source {} ({iface}), but this build has no RDMA transport: using the TCP transport",
                sel.choice.gid_string(),
                sel.choice.device,
                sel.choice.port,
                path.source
            );
            tcp(&params)
        }
        (Err(Error::NoRoceGid { hint, table, .. }), _) => {
            log::info!(
                "no RoCE v2 GID for source {} ({iface}): {hint}; using the TCP transport",
                path.source
            );
            log::debug!("GID table:\n{table}");
            tcp(&params)
        }
        (Err(e), _) => {
            log::info!("RDMA device selection failed for source {} ({iface}): {e}; using the TCP transport", path.source);
            tcp(&params)
        }
    }
}

/// Logs what the device choice wants the user to know (used only when RDMA will be tried).
fn log_warnings(sel: &roce::Selection) {
    for w in &sel.warnings {
        log::warn!("{w}");
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

fn ipv4(ip: IpAddr) -> Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{v6} is IPv6; RoCE v2 discovery needs an IPv4 bootstrap address"
            ))
        }),
    }
}

fn timeout(control: &ControlChannel, config: &Config, stage: &'static str) -> Error {
    Error::HandshakeTimeout {
        peer: control.peer_addr(),
        seconds: config.handshake_timeout.as_secs_f64(),
        stage,
    }
}
