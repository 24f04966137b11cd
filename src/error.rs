//! The crate's one error type.
//!
//! Variants are named for what failed and carry the OS error (or the peer's words) that caused
//! it, so a caller can both branch on the kind and print one clear line. A variant with a
//! `#[source]` does not repeat that source in its own message: print the chain (`{:#}` with
//! anyhow, or walk [`std::error::Error::source`]) to see both.
//!
//! What a misbehaving or vanished peer causes ([`Error::Protocol`], [`Error::Decode`],
//! [`Error::Rejected`], [`Error::PeerLost`]) is kept apart from our own broken invariants
//! ([`Error::Internal`]), which are bugs to report.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::proto::DecodeError;

/// Everything that can go wrong in rdma-container.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is inconsistent (for example zero credits).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// Binding or listening on the bootstrap address failed.
    #[error("cannot listen on {addr}{}", listen_hint(source, addr))]
    Listen {
        /// The address we tried to listen on.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Accepting a bootstrap connection failed.
    #[error("accept failed")]
    Accept(#[source] io::Error),

    /// The client could not reach the server before the connect deadline.
    #[error("could not connect to {addr} within {seconds:.1} s")]
    Connect {
        /// The server address.
        addr: SocketAddr,
        /// How long we kept retrying.
        seconds: f64,
        /// The last OS error seen.
        #[source]
        source: io::Error,
    },

    /// Setting a socket option or querying a socket failed.
    #[error("socket setup failed ({what})")]
    Socket {
        /// Which operation failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The peer did not complete the handshake before the deadline.
    #[error("handshake with {peer} timed out after {seconds:.1} s ({stage})")]
    HandshakeTimeout {
        /// The peer's address.
        peer: SocketAddr,
        /// The deadline that expired.
        seconds: f64,
        /// What we were waiting for.
        stage: &'static str,
    },

    /// The peer sent bytes that are not a valid protocol message (the source says why).
    #[error("invalid message from peer")]
    Decode(#[from] DecodeError),

    /// The peer broke a rule of the wire protocol (see [`ProtocolViolation`]).
    #[error("protocol violation by peer: {0}")]
    Protocol(ProtocolViolation),

    /// One of our own invariants failed: a bug in rdma-container, not the peer's doing.
    #[error("internal error (a bug in rdma-container, please report it): {0}")]
    Internal(String),

    /// `Config::idle_timeout` passed with no progress in either direction.
    #[error("no progress for {seconds:.1} s (idle timeout) after {messages} message(s)")]
    IdleTimeout {
        /// The configured idle timeout.
        seconds: f64,
        /// Messages transferred before it.
        messages: u64,
    },

    /// A server session waited for its client to resume, and a new client took its place
    /// ([`crate::ParkedSessions`]): the client it had is taken for gone.
    #[error(
        "the client did not resume within {waited:.1} s and a new client took the session's \
place (after {messages} message(s))"
    )]
    TakenOver {
        /// Messages that had arrived (a receiver) or were released (a sender) before.
        messages: u64,
        /// How long the session had waited for its client.
        waited: f64,
    },

    /// The server has no place for the session now (its session or memory limit) and said so;
    /// a client retries within its connect timeout before it reports this.
    #[error("the server answered {}", crate::log_text::peer_text(.0))]
    Busy(String),

    /// The peer refused the session and said why.
    #[error("peer rejected the session: {}", crate::log_text::peer_text(.0))]
    Rejected(String),

    /// We refused the peer's hello (the reason was sent to the peer too).
    #[error("refused the peer: {0}")]
    Refused(String),

    /// The peer did not prove that it holds our pre-shared key (it was told only
    /// "authentication failed").
    #[error("authentication failed: {0}")]
    AuthenticationFailed(String),

    /// The peer disappeared: the control channel closed or reset without a Finish.
    #[error("peer lost ({reason}) after {messages} message(s) had arrived")]
    PeerLost {
        /// What we observed (EOF, reset, keepalive timeout, ...).
        reason: String,
        /// Messages fully transferred before the loss.
        messages: u64,
        /// The socket error that showed the loss, when there was one (a reset, a keepalive
        /// timeout, an unreachable host), kept as the source.
        #[source]
        cause: Option<io::Error>,
    },

    /// A message is larger than the receiver accepts; nothing was sent.
    #[error(
        "message of {len} bytes exceeds the maximum message size of {max} bytes (nothing was sent)"
    )]
    MessageTooLarge {
        /// The rejected message length.
        len: usize,
        /// The negotiated maximum.
        max: usize,
    },

    /// [`crate::RdmaSrc::recv_into`]'s buffer is smaller than the message: nothing was
    /// copied, and the message stays to be received (by a larger buffer or `recv`).
    #[error(
        "message of {len} bytes does not fit the {capacity}-byte buffer (it stays to be received)"
    )]
    BufferTooSmall {
        /// The message's length.
        len: usize,
        /// The buffer's length.
        capacity: usize,
    },

    /// A message failed its `--checksum` check on the receiver: it was not delivered, and the
    /// session ended (the sender is told in a Reject).
    #[error("message {message} failed its checksum: {detail} (not delivered)")]
    ChecksumMismatch {
        /// The message's index in the stream (0 for the first).
        message: u64,
        /// What was found.
        detail: String,
    },

    /// A blocking wait was interrupted by the caller's stop flag (Ctrl-C).
    #[error("interrupted")]
    Interrupted,

    /// A `try_` call found nothing to do without waiting (no message arrived, no credit or
    /// staging slot free, no client waiting): the session stays usable; wait on the readiness
    /// descriptor ([`crate::RdmaSrc`]'s `AsFd`) and try again.
    #[error("not ready: the call would have to wait")]
    WouldBlock,

    /// A call given a deadline (`recv_timeout`, `send_timeout`, `finish_timeout`) reached it
    /// before it was done: nothing was delivered or sent by it, and the session stays usable.
    #[error("the call's deadline of {waited:?} passed before it was done")]
    DeadlinePassed {
        /// The time the call was given.
        waited: std::time::Duration,
    },

    /// The session has already ended (Finish sent or received, or an earlier error).
    #[error("the session is closed")]
    Closed,

    /// I/O on the control channel failed.
    #[error("control channel I/O failed")]
    ControlIo(#[source] io::Error),

    /// The data path of a transport failed.
    #[error("{transport} transport failed ({what})")]
    TransportIo {
        /// The transport's name.
        transport: &'static str,
        /// Which operation failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A transport detected a rule violation on its data path (RNR, length, ordering).
    #[error("{transport} transport error: {detail}")]
    TransportProtocol {
        /// The transport's name.
        transport: &'static str,
        /// What happened.
        detail: String,
    },

    /// The peer closed a transport's data connection.
    #[error("{transport} transport: the peer closed the data path")]
    TransportClosed {
        /// The transport's name.
        transport: &'static str,
    },

    /// A verbs call failed; `verb` names it.
    #[error("{verb} failed{}", .hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Verbs {
        /// The verb, e.g. `ibv_modify_qp(RTR)`.
        verb: &'static str,
        /// The OS error it returned.
        #[source]
        source: io::Error,
        /// What usually causes this, when known.
        hint: Option<&'static str>,
    },

    /// A verbs work request completed with an error status.
    #[error("{op} completed with {status}{}", .hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    VerbsCompletion {
        /// `send` or `receive`.
        op: &'static str,
        /// The work completion status, with rdma-core's name for it.
        status: crate::CompletionStatus,
        /// What usually causes this, when known.
        hint: Option<&'static str>,
    },

    /// A DOCA call failed; `call` names it and `code` is DOCA's error name.
    #[error("{call} failed: {code}{}", .hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Doca {
        /// The DOCA function, e.g. `doca_rdma_connect`.
        call: &'static str,
        /// DOCA's name for the `doca_error_t`, e.g. `DOCA_ERROR_CONNECTION_ABORTED` (for display).
        code: String,
        /// What the code means for the session, decided from its numeric value.
        failure: crate::DocaFailure,
        /// What usually causes this, when known.
        hint: Option<&'static str>,
    },

    /// The requested transport is not compiled in or not usable here.
    #[error("transport {transport} is not available: {reason}")]
    TransportUnavailable {
        /// The transport's name (`tcp`, `verbs`, `doca`).
        transport: &'static str,
        /// Why it cannot be used here.
        reason: String,
    },

    /// Reading the RDMA device tree in sysfs failed.
    #[error("cannot read {path}")]
    Sysfs {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// No RoCE v2 GID matches the source address (table and hint included).
    #[error("no RoCE v2 GID for {ip}{}: {hint}\n{table}", .netdev.as_deref().map(|n| format!(" (interface {n})")).unwrap_or_default())]
    NoRoceGid {
        /// The local source IPv4 that needed a GID.
        ip: Ipv4Addr,
        /// The interface that owns it, when known.
        netdev: Option<String>,
        /// What is probably wrong and how to fix it.
        hint: String,
        /// A show_gids-style rendering of what was found.
        table: String,
    },

    /// RDMA was required (`--require-rdma`, [`crate::Config::require_rdma`], or an explicit
    /// device, port or GID index) and `auto` could not use it here: it would have fallen back to
    /// TCP. `asked` says what required it, `reason` why RDMA was not possible.
    #[error("RDMA is required ({asked}) but not possible here: {reason}")]
    RdmaRequired {
        /// `--require-rdma`, or the explicit device, port or GID index given.
        asked: String,
        /// Why RDMA cannot be used.
        reason: String,
    },

    /// A Kubernetes device plugin's resource (a `PCIDEVICE_*` variable, a Multus network) names
    /// several usable RDMA devices, or none: the choice is not guessed.
    #[error("cannot tell which RDMA device is this pod's: {0}")]
    AmbiguousDevice(String),

    /// A `--device`/`--port`/`--gid-index` override names something that does not exist.
    #[error("device override does not match the GID table: {0}")]
    BadOverride(String),

    /// A netlink route or address query failed.
    #[error("route lookup for {dst} failed")]
    Route {
        /// The destination we asked about.
        dst: Ipv4Addr,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The kernel has no usable route to the destination.
    #[error("no route to {dst}: {detail}")]
    NoRoute {
        /// The destination.
        dst: Ipv4Addr,
        /// Route type or errno from the kernel.
        detail: String,
    },

    /// Listing the host's interface addresses failed.
    #[error("cannot list interface addresses")]
    InterfaceAddrs(#[source] io::Error),
}

/// What an operator can do about a failed bind, for the errors that have one answer.
fn listen_hint(source: &io::Error, addr: &SocketAddr) -> String {
    match source.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => format!(
            ": no interface of this host has the address {} (listen on one of its own, see \
`ip -4 addr`, or on 0.0.0.0 for all)",
            addr.ip()
        ),
        Some(libc::EADDRINUSE) => format!(
            ": port {} is taken (another server on it? `ss -ltnp 'sport = :{}'`)",
            addr.port(),
            addr.port()
        ),
        Some(libc::EACCES) => ": ports below 1024 need CAP_NET_BIND_SERVICE".to_owned(),
        _ => String::new(),
    }
}

impl Error {
    /// [`Error::TransportUnavailable`] for `transport`, saying why.
    pub(crate) fn unavailable(transport: &'static str, reason: impl Into<String>) -> Error {
        Error::TransportUnavailable {
            transport,
            reason: reason.into(),
        }
    }

    /// The error and every source below it, joined by ": " (for one log line).
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }

    /// Whether the peer caused this error (it misbehaved, refused or vanished), as opposed to
    /// a local failure or our own bug.
    pub fn is_peer_fault(&self) -> bool {
        self.kind().is_peer_fault()
    }
}

impl From<ProtocolViolation> for Error {
    fn from(v: ProtocolViolation) -> Self {
        Error::Protocol(v)
    }
}

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
    /// On a resume, the receiver claims more messages arrived than were sent.
    #[error("resuming: the receiver says {arrived} message(s) arrived but only {sent} were sent")]
    ResumePastSent {
        /// What the receiver claims.
        arrived: u64,
        /// Messages the sender took.
        sent: u64,
    },
    /// On a resume, the receiver claims more released than arrived.
    #[error("resuming: the receiver says {released} message(s) were released but only {arrived} arrived")]
    ResumeReleasedPastArrived {
        /// What the receiver claims released.
        released: u64,
        /// What it claims arrived.
        arrived: u64,
    },
    /// A path number the session does not have (several paths).
    #[error("path {path} is not one of this session's paths, or it is down")]
    NoSuchPath {
        /// The number named.
        path: usize,
    },
    /// A lost path's arrival count is more than the sender sent on it (several paths).
    #[error("path {path} lost: the receiver says {arrived} message(s) arrived on it but only {sent} were sent there")]
    PathArrivedPastSent {
        /// The path.
        path: usize,
        /// What the receiver claims arrived on it.
        arrived: u64,
        /// What the sender sent on it since it came up.
        sent: u64,
    },
    /// A message number outside the receiver's window: behind the next one to deliver, or as
    /// far ahead as the credits allow or more (several paths).
    #[error(
        "a message numbered {low} (low 32 bits) is outside the window of {credits} from {next}"
    )]
    OutsideWindow {
        /// The number's low 32 bits, as carried.
        low: u32,
        /// The next number to deliver.
        next: u64,
        /// The window's size.
        credits: u64,
    },
    /// A release covering a message that had not arrived: one the sender moved from a lost
    /// path (several paths).
    #[error("released message {number}, which its lost path said had not arrived")]
    ReleasedNotArrived {
        /// The lowest such message.
        number: u64,
    },
    /// A message number that had already arrived (several paths).
    #[error("message {number} arrived twice")]
    ArrivedTwice {
        /// The number.
        number: u64,
    },
    /// On a resume, the sender claims to have heard of releases the receiver never made.
    #[error("resuming: the sender says {heard} message(s) were released but only {released} were")]
    ResumeReleasesNeverMade {
        /// The releases the sender claims it heard of.
        heard: u64,
        /// The receiver's releases.
        released: u64,
    },
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of each variant that has a source, with that source's own text.
    fn with_sources() -> Vec<(Error, String)> {
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let os = |errno| io::Error::from_raw_os_error(errno);
        let text = |errno| os(errno).to_string();
        let decode = DecodeError::UnknownKind(0x7f);
        vec![
            (
                Error::Listen {
                    addr,
                    source: os(libc::EADDRINUSE),
                },
                text(libc::EADDRINUSE),
            ),
            (Error::Accept(os(libc::EMFILE)), text(libc::EMFILE)),
            (
                Error::Connect {
                    addr,
                    seconds: 1.0,
                    source: os(libc::ECONNREFUSED),
                },
                text(libc::ECONNREFUSED),
            ),
            (
                Error::Socket {
                    what: "poll",
                    source: os(libc::EBADF),
                },
                text(libc::EBADF),
            ),
            (Error::Decode(decode.clone()), decode.to_string()),
            (Error::ControlIo(os(libc::EIO)), text(libc::EIO)),
            (
                Error::TransportIo {
                    transport: "tcp",
                    what: "send",
                    source: os(libc::ENOBUFS),
                },
                text(libc::ENOBUFS),
            ),
            (
                Error::Verbs {
                    verb: "ibv_reg_mr",
                    source: os(libc::ENOMEM),
                    hint: Some("memlock"),
                },
                text(libc::ENOMEM),
            ),
            (
                Error::Sysfs {
                    path: PathBuf::from("/sys/class/infiniband"),
                    source: os(libc::ENOENT),
                },
                text(libc::ENOENT),
            ),
            (
                Error::Route {
                    dst: Ipv4Addr::LOCALHOST,
                    source: os(libc::EPERM),
                },
                text(libc::EPERM),
            ),
            (Error::InterfaceAddrs(os(libc::EACCES)), text(libc::EACCES)),
        ]
    }

    #[test]
    fn a_message_does_not_repeat_its_source_and_the_chain_says_it_once() {
        for (e, source) in with_sources() {
            assert!(std::error::Error::source(&e).is_some(), "{e:?}");
            let own = e.to_string();
            assert!(
                !own.contains(&source),
                "{own:?} repeats its source {source:?}"
            );
            let chain = e.chain();
            assert_eq!(chain, format!("{own}: {source}"));
        }
    }

    #[test]
    fn an_invalid_message_prints_why_once() {
        let e = Error::from(DecodeError::UnknownKind(0x7f));
        assert_eq!(
            e.chain(),
            "invalid message from peer: unknown message kind 0x7f"
        );
    }

    /// The program prints its errors through anyhow as `{:#}` (the message, then each source
    /// after ": "): every cause appears exactly once.
    #[test]
    fn the_programs_error_line_says_each_cause_once() {
        for (e, source) in with_sources() {
            let chain = e.chain();
            let printed = format!("{:#}", anyhow::Error::from(e));
            assert_eq!(printed, chain);
            assert_eq!(printed.matches(&source).count(), 1, "{printed}");
        }
        let printed = format!(
            "{:#}",
            anyhow::Error::from(Error::from(DecodeError::UnknownKind(0x7f)))
                .context("receiving failed")
        );
        assert_eq!(
            printed,
            "receiving failed: invalid message from peer: unknown message kind 0x7f"
        );
    }
}
