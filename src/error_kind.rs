//! What kind of failure an [`Error`] is: the one classification every policy reads (whether a
//! session resumes after it, what the peer is told, the metrics' `kind` label, the exit
//! status). Policy branches on the kind, never on an error's text; completion statuses and
//! DOCA codes arrive here as typed values ([`CompletionStatus`], [`DocaFailure`]), their text
//! kept only for display.

use std::fmt;

use crate::Error;

/// The kind of an [`Error`] ([`Error::kind`]). Deliberately exhaustive: a caller's `match` (the
/// program's metrics labels and exit statuses) must name every kind, so a new kind cannot fall
/// silently into a catch-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A flag, option or value is wrong, or a message is larger than the session allows:
    /// nothing was sent, and trying again as it is fails again.
    Config,
    /// This host cannot do what was asked (no route, no device, no GID, a bind or socket
    /// failure, RDMA required but absent).
    Host,
    /// The peer could not be reached before the connect deadline.
    Unreachable,
    /// The peer took too long (the handshake, or no progress within the idle timeout).
    Timeout,
    /// The peer refused the session (busy, a Reject, authentication), or we refused it.
    Refused,
    /// The peer broke the wire protocol or sent what does not decode.
    Violation,
    /// A message failed its checksum.
    Checksum,
    /// The peer vanished: the control connection closed or failed without a Finish.
    PeerLost,
    /// The data path broke under the session: a reset or closed connection, a queue pair
    /// flushed or out of retries, a DOCA connection lost. A resumable session resumes.
    PathBroken,
    /// The data path failed in a way a new path would meet again (a length or protection
    /// error, a lasting shortage, a fatal device error).
    PathFailed,
    /// A parked session's place went to a new client.
    TakenOver,
    /// The caller's stop flag interrupted a wait; the session stays usable.
    Interrupted,
    /// A `try_` call would have had to wait, or a call's own deadline passed: the session stays
    /// usable, try again ([`Error::WouldBlock`], [`Error::DeadlinePassed`]).
    WouldBlock,
    /// The session had already ended.
    Closed,
    /// One of our own invariants failed: a bug.
    Internal,
}

impl ErrorKind {
    /// The name used in logs and as the metrics' `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Host => "host",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Refused => "rejected",
            ErrorKind::Violation => "protocol_violation",
            ErrorKind::Checksum => "checksum",
            ErrorKind::PeerLost => "peer_lost",
            ErrorKind::PathBroken => "path_broken",
            ErrorKind::PathFailed => "transport",
            ErrorKind::TakenOver => "taken_over",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::WouldBlock => "would_block",
            ErrorKind::Closed => "closed",
            ErrorKind::Internal => "internal",
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 15] = [
        ErrorKind::Config,
        ErrorKind::Host,
        ErrorKind::Unreachable,
        ErrorKind::Timeout,
        ErrorKind::Refused,
        ErrorKind::Violation,
        ErrorKind::Checksum,
        ErrorKind::PeerLost,
        ErrorKind::PathBroken,
        ErrorKind::PathFailed,
        ErrorKind::TakenOver,
        ErrorKind::Interrupted,
        ErrorKind::WouldBlock,
        ErrorKind::Closed,
        ErrorKind::Internal,
    ];

    /// Whether the peer caused it (it misbehaved, refused or vanished), as opposed to a local
    /// failure or our own bug.
    pub fn is_peer_fault(self) -> bool {
        matches!(
            self,
            ErrorKind::Violation
                | ErrorKind::Refused
                | ErrorKind::PeerLost
                | ErrorKind::TakenOver
                | ErrorKind::Timeout
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A verbs work completion's status (`enum ibv_wc_status`), with rdma-core's name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionStatus {
    /// The numeric status.
    pub code: u32,
    /// What rdma-core calls it ("work request flushed").
    pub name: &'static str,
}

impl CompletionStatus {
    /// `IBV_WC_WR_FLUSH_ERR`: the queue pair went to the error state.
    pub const FLUSHED: u32 = 5;
    /// `IBV_WC_RETRY_EXC_ERR`: the transport retry counter ran out (no ACK from the peer).
    pub const RETRY_EXCEEDED: u32 = 12;
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the peer had no receive posted, retries ran out.
    pub const RNR_RETRY_EXCEEDED: u32 = 13;

    /// Whether the path under the queue pair broke (flushed, or out of transport or RNR
    /// retries): a new queue pair may work where this one did not.
    pub fn is_path_broken(self) -> bool {
        matches!(
            self.code,
            Self::FLUSHED | Self::RETRY_EXCEEDED | Self::RNR_RETRY_EXCEEDED
        )
    }

    /// Whether a retry counter ran out (transport or RNR): the peer did not answer.
    pub fn is_retry_exceeded(self) -> bool {
        matches!(self.code, Self::RETRY_EXCEEDED | Self::RNR_RETRY_EXCEEDED)
    }
}

impl fmt::Display for CompletionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.code)
    }
}

/// What a failed DOCA call means, decided from DOCA's numeric `doca_error_t` where the error is
/// made (the transport adapter, which has DOCA's constants); [`Error::Doca`] keeps the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocaFailure {
    /// The connection failed or was reset, aborted or never made (`IO_FAILED`,
    /// `CONNECTION_RESET`, `CONNECTION_ABORTED`, `NOT_CONNECTED`): a new one may work.
    ConnectionLost,
    /// Anything else (a refusal, a shortage, a fatal device error, a bug).
    Failed,
}

impl Error {
    /// What kind of failure this is; every policy reads this, never the text.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidConfig(_)
            | Error::BadOverride(_)
            | Error::AmbiguousDevice(_)
            | Error::MessageTooLarge { .. }
            | Error::BufferTooSmall { .. } => ErrorKind::Config,
            Error::Listen { .. }
            | Error::Accept(_)
            | Error::Socket { .. }
            | Error::TransportUnavailable { .. }
            | Error::Sysfs { .. }
            | Error::NoRoceGid { .. }
            | Error::RdmaRequired { .. }
            | Error::Route { .. }
            | Error::NoRoute { .. }
            | Error::InterfaceAddrs(_) => ErrorKind::Host,
            Error::Connect { .. } => ErrorKind::Unreachable,
            Error::HandshakeTimeout { .. } | Error::IdleTimeout { .. } => ErrorKind::Timeout,
            Error::Busy(_)
            | Error::Rejected(_)
            | Error::Refused(_)
            | Error::AuthenticationFailed(_) => ErrorKind::Refused,
            Error::Protocol(_) | Error::Decode(_) => ErrorKind::Violation,
            Error::ChecksumMismatch { .. } => ErrorKind::Checksum,
            Error::PeerLost { .. } | Error::ControlIo(_) => ErrorKind::PeerLost,
            Error::TransportIo { .. } | Error::TransportClosed { .. } | Error::Verbs { .. } => {
                ErrorKind::PathBroken
            }
            Error::VerbsCompletion { status, .. } if status.is_path_broken() => {
                ErrorKind::PathBroken
            }
            Error::Doca {
                failure: DocaFailure::ConnectionLost,
                ..
            } => ErrorKind::PathBroken,
            Error::VerbsCompletion { .. }
            | Error::Doca { .. }
            | Error::TransportProtocol { .. } => ErrorKind::PathFailed,
            Error::TakenOver { .. } => ErrorKind::TakenOver,
            Error::Interrupted => ErrorKind::Interrupted,
            Error::WouldBlock | Error::DeadlinePassed { .. } => ErrorKind::WouldBlock,
            Error::Closed => ErrorKind::Closed,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(code: u32) -> Error {
        Error::VerbsCompletion {
            op: "send",
            status: CompletionStatus {
                code,
                name: "whatever the text says",
            },
            hint: None,
        }
    }

    #[test]
    fn a_completion_is_a_broken_path_by_its_status_code_not_its_text() {
        for code in [5, 12, 13] {
            assert_eq!(completion(code).kind(), ErrorKind::PathBroken, "{code}");
        }
        for code in [1, 4, 9, 10] {
            assert_eq!(completion(code).kind(), ErrorKind::PathFailed, "{code}");
        }
    }

    #[test]
    fn a_doca_error_is_a_broken_path_only_when_the_adapter_said_the_connection_was_lost() {
        let doca = |failure| Error::Doca {
            call: "doca_rdma_task_send",
            code: "DOCA_ERROR_CONNECTION_RESET".into(),
            failure,
            hint: None,
        };
        assert_eq!(
            doca(DocaFailure::ConnectionLost).kind(),
            ErrorKind::PathBroken
        );
        assert_eq!(doca(DocaFailure::Failed).kind(), ErrorKind::PathFailed);
    }

    #[test]
    fn every_kind_has_its_own_name() {
        let mut names: Vec<_> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len());
    }
}
