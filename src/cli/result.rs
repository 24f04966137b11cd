//! The machine-readable session result (`--json` on stderr, `--out-json FILE`) and the exit
//! statuses: one JSON object per session, checked against docs/session-result.schema.json.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rdma_container::path::PathInfo;
use rdma_container::roce::DeviceChoice;
use rdma_container::{Error, SessionInfo, TransportChoice};
use serde::Serialize;

use super::stop::StopSignal;

/// Exit status: the peer vanished (its connection closed or reset without a Finish).
pub const EXIT_PEER_LOST: u8 = 3;
/// Exit status: the session was refused: the peer rejected it (busy, authentication,
/// incompatible settings, shutting down) or this end refused the peer.
pub const EXIT_REJECTED: u8 = 4;
/// Exit status: `--require-rdma` and RDMA is not possible here (auto would have used TCP).
pub const EXIT_RDMA_REQUIRED: u8 = 5;

/// How a session ended: the one answer everything said about a session's end comes from.
///
/// - the exit status: [`Ending::exit_status`];
/// - the summary line's first words: [`Ending::how_received`] (the server's `end of stream:
///   received ...`), [`Ending::how_sent`] (the client's `done: sent ...`);
/// - the session result's `ending` (`--json`): its serialization, `kind` and the variant's
///   fields (two variants share a kind: see [`Ending::TakenOver`] and [`Ending::Refused`]);
/// - the `outcome` label of `rdma_container_sessions_total`: [`Ending::outcome`].
///
/// A failed set-up is [`Ending::before_start`], a running session's failure [`Ending::of`]:
/// they differ in a refusal, which is [`Ending::Refused`] only while the handshake runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// Every message was sent and acknowledged (client) or arrived (server).
    Finished,
    /// The peer vanished; `messages` had arrived (or been delivered) before.
    PeerLost { messages: u64, reason: String },
    /// The server's session waited for its client to resume and a new client took its place:
    /// its peer is lost for good (`kind` `peer_lost`, as [`Ending::PeerLost`]).
    #[serde(rename = "peer_lost")]
    TakenOver { messages: u64, reason: String },
    /// The handshake was refused, by the peer or by us (busy, authentication, incompatible
    /// settings): the session never started (`kind` `rejected`, as [`Ending::Rejected`]).
    #[serde(rename = "rejected")]
    Refused { reason: String },
    /// The running session was rejected: the peer ended it with a reason (it was stopped, it
    /// would not resume it, ...).
    Rejected { reason: String },
    /// `--require-rdma` or an explicit device, port or GID index: RDMA was not possible here.
    RdmaRequired { reason: String },
    /// Ctrl-C or SIGTERM (exit status 130 or 143: the signal's).
    Interrupted,
    /// Any other failure.
    Failed { error: String },
}

impl Ending {
    /// Every [`Ending::outcome`] label, in the order docs/metrics.md lists them.
    pub const OUTCOMES: [&'static str; 4] = ["end_of_stream", "interrupted", "failed", "refused"];

    /// How the error ended the session (a running one: a refusal is [`Ending::Rejected`]).
    pub fn of(e: &Error) -> Ending {
        match e {
            Error::Interrupted => Ending::Interrupted,
            Error::PeerLost {
                messages, reason, ..
            } => Ending::PeerLost {
                messages: *messages,
                reason: reason.clone(),
            },
            Error::TakenOver { messages, .. } => Ending::TakenOver {
                messages: *messages,
                reason: e.to_string(),
            },
            Error::Rejected(reason)
            | Error::Busy(reason)
            | Error::Refused(reason)
            | Error::AuthenticationFailed(reason) => Ending::Rejected {
                reason: reason.clone(),
            },
            Error::RdmaRequired { asked, reason } => Ending::RdmaRequired {
                reason: format!("required by {asked}: {reason}"),
            },
            other => Ending::Failed {
                error: other.chain(),
            },
        }
    }

    /// How the error ended a session during its set-up: as [`Ending::of`], but a refusal by
    /// either end is [`Ending::Refused`].
    pub fn before_start(e: &Error) -> Ending {
        match Ending::of(e) {
            Ending::Rejected { reason } => Ending::Refused { reason },
            ending => ending,
        }
    }

    /// The exit status that goes with this ending.
    pub fn exit_status(&self) -> u8 {
        match self {
            Ending::Finished => 0,
            Ending::PeerLost { .. } | Ending::TakenOver { .. } => EXIT_PEER_LOST,
            Ending::Refused { .. } | Ending::Rejected { .. } => EXIT_REJECTED,
            Ending::RdmaRequired { .. } => EXIT_RDMA_REQUIRED,
            Ending::Interrupted => StopSignal::received().exit_status(),
            Ending::Failed { .. } => 1,
        }
    }

    /// The words the server's summary line starts with: `end of stream: received ...`,
    /// `interrupted: received ...` (or the signal's), `taken over: ...`, `failed: ...`.
    pub fn how_received(&self) -> &'static str {
        match self {
            Ending::Finished => "end of stream",
            Ending::Interrupted => StopSignal::received().how(),
            Ending::TakenOver { .. } => "taken over",
            Ending::PeerLost { .. }
            | Ending::Refused { .. }
            | Ending::Rejected { .. }
            | Ending::RdmaRequired { .. }
            | Ending::Failed { .. } => "failed",
        }
    }

    /// The words the client's summary line starts with: `done: sent ...`, `interrupted: sent
    /// ...` (or the signal's); otherwise as [`Ending::how_received`] (the client prints no
    /// summary after a failure: the error says it).
    pub fn how_sent(&self) -> &'static str {
        match self {
            Ending::Finished => "done",
            other => other.how_received(),
        }
    }

    /// The `outcome` label of `rdma_container_sessions_total` (one of [`Ending::OUTCOMES`]).
    pub fn outcome(&self) -> &'static str {
        match self {
            Ending::Finished => "end_of_stream",
            Ending::Interrupted => "interrupted",
            Ending::Refused { .. } => "refused",
            Ending::PeerLost { .. }
            | Ending::TakenOver { .. }
            | Ending::Rejected { .. }
            | Ending::RdmaRequired { .. }
            | Ending::Failed { .. } => "failed",
        }
    }
}

/// The exit status for a failure the program reports: the first library error in the chain
/// decides (peer lost, rejected, RDMA required), anything else is 1.
pub fn exit_status_of(e: &anyhow::Error) -> u8 {
    let usage = e.chain().any(|c| {
        c.is::<super::UsageError>()
            || matches!(c.downcast_ref::<Error>(), Some(Error::InvalidConfig(_)))
    });
    if usage {
        return super::EXIT_USAGE;
    }
    e.chain()
        .find_map(|c| c.downcast_ref::<Error>())
        .map_or(1, |e| Ending::of(e).exit_status())
}

/// One path of a session in its JSON result (`paths`).
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    /// This end's address on the path, and its interface.
    pub source: std::net::Ipv4Addr,
    pub interface: Option<String>,
    /// The peer's address on the path.
    pub peer: std::net::Ipv4Addr,
    /// The RDMA device, port and GID index the path's queue pairs run on (`null` on tcp).
    pub device: Option<String>,
    pub port: Option<u32>,
    pub gid_index: Option<u32>,
    /// Bytes the path carried ([`rdma_container::PathCounters`]); `null` when the data path
    /// is one queue pair (the session's `bytes` are then the path's).
    pub bytes: Option<u64>,
}

impl PathResult {
    fn of(path: &PathInfo, device: Option<&DeviceChoice>) -> Self {
        Self {
            source: path.source,
            interface: path.interface.clone(),
            peer: path.peer,
            device: device.map(|d| d.device.clone()),
            port: device.map(|d| d.port),
            gid_index: device.map(|d| d.gid_index),
            bytes: None,
        }
    }
}

/// One session's result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionResult {
    /// `server` or `client`.
    pub role: &'static str,
    /// The server's session number (1, 2, ...); `null` on the client.
    pub session: Option<u64>,
    /// The peer's bootstrap address.
    pub peer: String,
    /// What `--transport` asked for.
    pub transport_requested: String,
    /// The transport the session ran on; `null` when it never started.
    pub transport: Option<String>,
    /// Why `auto` runs this transport and not RDMA (or not its first RDMA choice).
    pub fallback_reason: Option<String>,
    /// The RDMA device, port, GID index, GID and netdev (`null` without RDMA).
    pub device: Option<String>,
    pub port: Option<u32>,
    pub gid_index: Option<u32>,
    pub gid: Option<String>,
    pub netdev: Option<String>,
    /// The data path's MTU (RDMA: the QP's path MTU).
    pub mtu: Option<u32>,
    /// The traffic class of the RDMA packets this end sends (`--tclass`), and the peer's;
    /// `null` on tcp and where the transport cannot say (DOCA).
    pub traffic_class: Option<u8>,
    pub peer_traffic_class: Option<u8>,
    /// The service level of this end's queue pair (`--sl`), and the peer's.
    pub service_level: Option<u8>,
    pub peer_service_level: Option<u8>,
    /// This end's local ACK timeout exponent (`--ack-timeout`) and retry count
    /// (`--retry-count`); `null` on tcp and DOCA.
    pub ack_timeout: Option<u8>,
    pub retry_count: Option<u8>,
    /// The receiver's slots: messages in flight.
    pub credits: Option<u16>,
    /// The queue pairs (tcp: data connections) the messages are striped over (`--qps`).
    pub qps: Option<u8>,
    /// Every path the queue pairs run on (`--paths`), path 0 (the bootstrap connection's)
    /// first; empty before the handshake.
    pub paths: Vec<PathResult>,
    /// The largest message the session carries.
    pub max_msg_size: Option<u32>,
    /// The per-message check both ends agreed on (`none`, `crc32c`); `null` before the
    /// handshake.
    pub checksum: Option<&'static str>,
    /// Times the session resumed after a break (`--resume-timeout`).
    pub resumes: u32,
    /// Messages the sender sent again after those resumes.
    pub messages_resent: u64,
    /// Paths a resume left out after one of their queue pairs failed (`--paths`), and paths
    /// a later resume took back.
    pub paths_lost: u32,
    pub paths_rebuilt: u32,
    /// Messages and bytes sent (client) or received (server).
    pub messages: u64,
    pub bytes: u64,
    /// From the session's start to its end.
    pub seconds: f64,
    /// The part of `seconds` spent resuming after breaks (or waiting to); the rates leave it
    /// out: they are over the time data moved.
    pub seconds_resuming: f64,
    pub messages_per_second: f64,
    pub mib_per_second: f64,
    pub gbit_per_second: f64,
    /// How it ended.
    pub ending: Ending,
    /// The exit status this ending gives (the server exits with it under `--once`).
    pub exit_status: u8,
}

impl SessionResult {
    /// A result for a session with `peer` that has not started yet.
    pub fn new(
        role: &'static str,
        session: Option<u64>,
        peer: SocketAddr,
        requested: TransportChoice,
    ) -> Self {
        Self {
            role,
            session,
            peer: peer.to_string(),
            transport_requested: requested.to_string(),
            transport: None,
            fallback_reason: None,
            device: None,
            port: None,
            gid_index: None,
            gid: None,
            netdev: None,
            mtu: None,
            traffic_class: None,
            peer_traffic_class: None,
            service_level: None,
            peer_service_level: None,
            ack_timeout: None,
            retry_count: None,
            credits: None,
            qps: None,
            paths: Vec::new(),
            max_msg_size: None,
            checksum: None,
            messages: 0,
            bytes: 0,
            seconds: 0.0,
            seconds_resuming: 0.0,
            messages_per_second: 0.0,
            mib_per_second: 0.0,
            gbit_per_second: 0.0,
            ending: Ending::Finished,
            exit_status: 0,
            resumes: 0,
            messages_resent: 0,
            paths_lost: 0,
            paths_rebuilt: 0,
        }
    }

    /// Records the session's resumes so far.
    pub fn resumed(&mut self, stats: rdma_container::ResumeStats) {
        self.resumes = stats.resumes;
        self.messages_resent = stats.messages_resent;
        self.paths_lost = stats.paths_lost;
        self.paths_rebuilt = stats.paths_rebuilt;
        self.seconds_resuming = stats.time_resuming.as_secs_f64();
        self.rates();
    }

    /// Records the bytes each path carried (none: one queue pair).
    pub fn path_bytes(&mut self, counters: &rdma_container::PathCounters) {
        for (path, bytes) in self.paths.iter_mut().zip(counters.bytes()) {
            path.bytes = Some(bytes);
        }
    }

    /// Fills in what the session negotiated and chose.
    pub fn started(&mut self, info: &SessionInfo) {
        self.transport = Some(info.transport.to_string());
        self.fallback_reason = info.fallback.clone();
        if let Some(d) = &info.device {
            self.device = Some(d.device.clone());
            self.port = Some(d.port);
            self.gid_index = Some(d.gid_index);
            self.gid = Some(d.gid_string());
            self.netdev = d.netdev.clone();
        }
        self.mtu = info.mtu();
        self.traffic_class = info.traffic_class();
        self.peer_traffic_class = info.peer_traffic_class();
        self.service_level = info.service_level();
        self.peer_service_level = info.peer_service_level();
        self.ack_timeout = info.ack_timeout();
        self.retry_count = info.retry_count();
        self.credits = Some(info.credits());
        self.qps = Some(info.qps());
        let path0 = PathResult::of(&info.path, info.device.as_ref());
        self.paths = std::iter::once(path0)
            .chain(
                info.extra_paths
                    .iter()
                    .map(|p| PathResult::of(&p.path, p.device.as_ref())),
            )
            .collect();
        self.max_msg_size = Some(info.max_msg_size());
        self.checksum = Some(info.checksum().name());
    }

    /// Records the counts, the time and the ending.
    pub fn ended(&mut self, messages: u64, bytes: u64, elapsed: Duration, ending: Ending) {
        self.messages = messages;
        self.bytes = bytes;
        self.seconds = elapsed.as_secs_f64();
        self.rates();
        self.exit_status = ending.exit_status();
        self.ending = ending;
    }

    /// The rates over the time data moved (the session's time less the time resuming).
    fn rates(&mut self) {
        let per = (self.seconds - self.seconds_resuming).max(1e-9);
        self.messages_per_second = self.messages as f64 / per;
        self.mib_per_second = self.bytes as f64 / per / (1024.0 * 1024.0);
        self.gbit_per_second = self.bytes as f64 * 8.0 / per / 1e9;
    }
}

/// Where session results go: stderr (`--json`), a file (`--out-json`), both or nowhere.
/// Cloned into every session thread; each result is one line, written whole.
#[derive(Debug, Clone, Default)]
pub struct Reporter {
    stderr: bool,
    file: Option<Arc<Mutex<File>>>,
}

impl Reporter {
    /// `json`: print on stderr; `out`: write to this file (created or truncated now).
    pub fn new(json: bool, out: Option<&Path>) -> Result<Self> {
        let file = out
            .map(|p| {
                File::create(p).with_context(|| format!("cannot create --out-json {}", p.display()))
            })
            .transpose()?;
        Ok(Self {
            stderr: json,
            file: file.map(|f| Arc::new(Mutex::new(f))),
        })
    }

    /// Writes `result` as one JSON line where asked (a failed write is logged, never fatal).
    pub fn report(&self, result: &SessionResult) {
        if !self.stderr && self.file.is_none() {
            return;
        }
        let line = match serde_json::to_string(result) {
            Ok(line) => line + "\n",
            Err(e) => {
                log::warn!("cannot encode the session result: {e}");
                return;
            }
        };
        if self.stderr {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        if let Some(file) = &self.file {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = f.write_all(line.as_bytes()).and_then(|()| f.flush()) {
                log::warn!("cannot write the session result to --out-json: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ending_has_its_own_exit_status() {
        let lost = Error::PeerLost {
            reason: "EOF".into(),
            messages: 7,
            cause: None,
        };
        assert_eq!(Ending::of(&lost).exit_status(), EXIT_PEER_LOST);
        assert_eq!(
            Ending::of(&lost),
            Ending::PeerLost {
                messages: 7,
                reason: "EOF".into()
            }
        );
        assert_eq!(
            Ending::of(&Error::Rejected("busy".into())).exit_status(),
            EXIT_REJECTED
        );
        assert_eq!(
            Ending::of(&Error::Refused("x".into())).exit_status(),
            EXIT_REJECTED
        );
        assert_eq!(
            Ending::of(&Error::RdmaRequired {
                asked: "--require-rdma".into(),
                reason: "no GID".into()
            })
            .exit_status(),
            EXIT_RDMA_REQUIRED
        );
        assert_eq!(
            Ending::of(&Error::Interrupted).exit_status(),
            crate::cli::EXIT_INTERRUPTED,
            "no signal recorded in this test binary: the status a stop always had"
        );
        assert_eq!(Ending::of(&Error::Closed).exit_status(), 1);
        let wrapped = anyhow::Error::new(Error::Rejected("busy".into())).context("cannot start");
        assert_eq!(exit_status_of(&wrapped), EXIT_REJECTED);
        assert_eq!(exit_status_of(&anyhow::anyhow!("other")), 1);
        let statuses = [
            0,
            1,
            2,
            EXIT_PEER_LOST,
            EXIT_REJECTED,
            EXIT_RDMA_REQUIRED,
            130,
            143,
        ];
        let mut unique = statuses.to_vec();
        unique.dedup();
        assert_eq!(unique.len(), statuses.len());
    }

    /// One of each variant.
    fn every_ending() -> [Ending; 8] {
        let reason = || "r".to_owned();
        [
            Ending::Finished,
            Ending::PeerLost {
                messages: 1,
                reason: reason(),
            },
            Ending::TakenOver {
                messages: 2,
                reason: reason(),
            },
            Ending::Refused { reason: reason() },
            Ending::Rejected { reason: reason() },
            Ending::RdmaRequired { reason: reason() },
            Ending::Interrupted,
            Ending::Failed { error: reason() },
        ]
    }

    #[test]
    fn a_refusal_is_refused_during_set_up_and_rejected_once_running() {
        for e in [
            Error::Rejected("busy".into()),
            Error::Busy("busy".into()),
            Error::Refused("no key".into()),
            Error::AuthenticationFailed("wrong key".into()),
        ] {
            assert!(matches!(Ending::of(&e), Ending::Rejected { .. }), "{e}");
            assert!(
                matches!(Ending::before_start(&e), Ending::Refused { .. }),
                "{e}"
            );
            assert_eq!(Ending::before_start(&e).outcome(), "refused");
            assert_eq!(Ending::of(&e).outcome(), "failed");
        }
        assert_eq!(
            Ending::before_start(&Error::Interrupted),
            Ending::Interrupted
        );
        assert_eq!(Ending::before_start(&Error::Closed).outcome(), "failed");
    }

    #[test]
    fn the_json_kind_words_and_outcome_of_every_ending() {
        let kind = |e: &Ending| serde_json::to_value(e).unwrap_or_default()["kind"].clone();
        let got: Vec<_> = every_ending()
            .iter()
            .map(|e| {
                (
                    kind(e),
                    e.exit_status(),
                    e.how_received(),
                    e.how_sent(),
                    e.outcome(),
                )
            })
            .collect();
        let want = [
            ("finished", 0, "end of stream", "done", "end_of_stream"),
            ("peer_lost", 3, "failed", "failed", "failed"),
            ("peer_lost", 3, "taken over", "taken over", "failed"),
            ("rejected", 4, "failed", "failed", "refused"),
            ("rejected", 4, "failed", "failed", "failed"),
            ("rdma_required", 5, "failed", "failed", "failed"),
            (
                "interrupted",
                130,
                "interrupted",
                "interrupted",
                "interrupted",
            ),
            ("failed", 1, "failed", "failed", "failed"),
        ];
        assert_eq!(got.len(), want.len());
        for ((kind, status, received, sent, outcome), got) in want.into_iter().zip(got) {
            assert_eq!(got, (kind.into(), status, received, sent, outcome));
            assert!(Ending::OUTCOMES.contains(&outcome));
        }
        let taken = serde_json::to_value(&every_ending()[2]).unwrap_or_default();
        assert_eq!(
            taken,
            serde_json::json!({"kind": "peer_lost", "messages": 2, "reason": "r"})
        );
        let refused = serde_json::to_value(&every_ending()[3]).unwrap_or_default();
        assert_eq!(
            refused,
            serde_json::json!({"kind": "rejected", "reason": "r"})
        );
    }
}
