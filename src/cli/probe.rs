//! `doctor --probe IP:PORT`: a real session with a running `--server` on the chosen device and
//! GID (a small message, then one larger than any path MTU, each acknowledged), and what failed
//! in the words of docs/troubleshooting.md.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdma_container::{Config, Error, RdmaSink, TransportChoice};
use serde::Serialize;

use super::args::DoctorArgs;
use super::result::Ending;

/// The start of the probe's first message: a bench server tells a probe from a bench client
/// by it (a bench client's first message is its JSON header).
pub const FIRST_MESSAGE: &[u8] = b"rdma-container doctor probe";

/// The probe's second message: larger than any RoCE path MTU (4096), so that an MTU mismatch on
/// the path shows as the large message failing after the small one got through.
const LARGE: usize = 64 * 1024;

/// What the probe found (`doctor --json` has it as `probe`).
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// The server probed.
    pub peer: String,
    /// True when both messages were acknowledged.
    pub ok: bool,
    /// The transport the session ran on, once it started.
    pub transport: Option<String>,
    /// The device, port, GID index and GID used.
    pub device: Option<String>,
    pub port: Option<u32>,
    pub gid_index: Option<u32>,
    pub gid: Option<String>,
    /// The path MTU (RDMA).
    pub mtu: Option<u32>,
    /// From the connection to the last acknowledgement, in milliseconds.
    pub milliseconds: f64,
    /// What failed: `rdma_not_possible`, `not_listening`, `gid_unreachable`, `rtr`,
    /// `handshake_timeout`, `mtu`, `rejected`, `peer_lost` or `other`.
    pub failure: Option<&'static str>,
    /// What it means and what to check (troubleshooting.md's words).
    pub explanation: Option<String>,
    /// The error itself.
    pub error: Option<String>,
    /// The exit status `doctor` gives for this probe.
    pub exit_status: u8,
}

/// Runs the probe against `peer`.
pub fn run(peer: SocketAddr, args: &DoctorArgs) -> ProbeReport {
    let mut report = ProbeReport {
        peer: peer.to_string(),
        ok: false,
        transport: None,
        device: None,
        port: None,
        gid_index: None,
        gid: None,
        mtu: None,
        milliseconds: 0.0,
        failure: None,
        explanation: None,
        error: None,
        exit_status: 0,
    };
    let started = Instant::now();
    let outcome = probe(peer, args, &mut report);
    report.milliseconds = started.elapsed().as_secs_f64() * 1e3;
    if let Err((e, large_failed)) = outcome {
        let (failure, explanation) = explain(&e, large_failed, report.mtu, peer);
        report.failure = Some(failure);
        report.explanation = Some(explanation);
        report.error = Some(e.chain());
        report.exit_status = Ending::of(&e).exit_status();
        if report.exit_status == 0 {
            report.exit_status = 1;
        }
    } else {
        report.ok = true;
    }
    report
}

/// The session; on failure the error and whether it was the large message that failed.
fn probe(
    peer: SocketAddr,
    args: &DoctorArgs,
    report: &mut ProbeReport,
) -> Result<(), (Error, bool)> {
    let key = args
        .auth_key_file
        .as_deref()
        .map(rdma_container::AuthKey::from_file)
        .transpose()
        .map_err(|e| (e, false))?;
    let config = Config::default()
        .with_transport(args.transport)
        .with_require_rdma(args.transport == TransportChoice::Auto)
        .with_overrides(args.device.overrides())
        .with_sysfs_root(args.sysfs_root.clone())
        .with_credits(2)
        .with_connect_timeout(Duration::from_secs(5))
        .with_handshake_timeout(Duration::from_secs(10))
        .with_idle_timeout(Some(Duration::from_secs(10)))
        .with_auth_key(key);
    let mut sink = RdmaSink::connect(peer, &config).map_err(|e| (e, false))?;
    let info = sink.info();
    report.transport = Some(info.transport.to_string());
    report.mtu = info.mtu();
    if let Some(d) = &info.device {
        report.device = Some(d.device.clone());
        report.port = Some(d.port);
        report.gid_index = Some(d.gid_index);
        report.gid = Some(d.gid_string());
    }
    sink.send(FIRST_MESSAGE).map_err(|e| (e, false))?;
    let mut large = [FIRST_MESSAGE, b", large: "].concat();
    large.resize(LARGE, b'.');
    if large.len() > sink.max_message_size() {
        large.truncate(sink.max_message_size());
    }
    sink.send(&large).map_err(|e| (e, true))?;
    sink.finish().map(|_| ()).map_err(|e| (e, true))
}

/// The failure's name and explanation.
fn explain(
    e: &Error,
    large_failed: bool,
    mtu: Option<u32>,
    peer: SocketAddr,
) -> (&'static str, String) {
    let unreachable = "RoCE packets do not reach the peer: check that both ends use addresses of \
                       the RoCE network, that both GIDs are RoCE v2 (doctor --peer IP on each end), \
                       and that UDP port 4791 is not blocked";
    match e {
        Error::RdmaRequired { asked, reason } => (
            "rdma_not_possible",
            format!("RDMA is not possible toward {peer} from here ({asked}): {reason}"),
        ),
        Error::Connect { .. } => (
            "not_listening",
            format!("nothing answers at {peer}: start rdma-container --server {peer} there (on its RoCE address)"),
        ),
        Error::Verbs {
            verb: "ibv_modify_qp(RTR)" | "ibv_modify_qp(RTS)",
            ..
        } => (
            "rtr",
            format!("the queue pair could not move to RTR/RTS toward the peer's GID; {unreachable}"),
        ),
        Error::VerbsCompletion { status, .. } if large_failed && status.is_retry_exceeded() =>
        {
            (
                "mtu",
                format!(
                    "the small message got through but the {LARGE}-byte one did not (path MTU {}): \
                     a device on the path drops packets of that size; check the MTU of both \
                     netdevs and of the switch ports (ip link show; the RoCE MTU follows the \
                     netdev's)",
                    mtu.map_or_else(|| "unknown".to_owned(), |m| format!("{m} bytes"))
                ),
            )
        }
        Error::VerbsCompletion { status, .. } if status.is_retry_exceeded() => {
            ("gid_unreachable", format!("the peer's GID is unreachable: {unreachable}"))
        }
        Error::Doca { .. } => ("gid_unreachable", format!("the DOCA connection failed: {unreachable}")),
        Error::HandshakeTimeout { .. } => (
            "handshake_timeout",
            format!(
                "the handshake (hellos, RTR/RTS, Ready) did not complete within 10 s: the peer is \
                 stuck setting up its data path, is not rdma-container, or {unreachable}"
            ),
        ),
        Error::Rejected(reason) | Error::Busy(reason) => (
            "rejected",
            format!(
                "the server rejected the probe: {} (a transport mismatch means the server \
                 runs another transport: start it with the same --transport, or check doctor \
                 --peer on it)",
                rdma_container::peer_text(reason)
            ),
        ),
        Error::PeerLost { .. } => (
            "peer_lost",
            "the server went away during the probe".to_owned(),
        ),
        other => ("other", other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 2], 5000))
    }

    #[test]
    fn failures_are_named_as_troubleshooting_names_them() {
        let retry = || Error::VerbsCompletion {
            op: "send",
            status: rdma_container::CompletionStatus {
                code: rdma_container::CompletionStatus::RETRY_EXCEEDED,
                name: "transport retry counter exceeded",
            },
            hint: None,
        };
        // Retry exceeded on the large message after the small one: the MTU.
        let (kind, text) = explain(&retry(), true, Some(1024), peer());
        assert_eq!(kind, "mtu");
        assert!(text.contains("path MTU 1024 bytes"), "{text}");
        // On the first message: the GID does not answer.
        let (kind, text) = explain(&retry(), false, Some(1024), peer());
        assert_eq!(kind, "gid_unreachable");
        assert!(text.contains("UDP port 4791"), "{text}");
        let (kind, _) = explain(
            &Error::RdmaRequired {
                asked: "--require-rdma".into(),
                reason: "no GID".into(),
            },
            false,
            None,
            peer(),
        );
        assert_eq!(kind, "rdma_not_possible");
        let (kind, text) = explain(
            &Error::Rejected("transport mismatch".into()),
            false,
            None,
            peer(),
        );
        assert_eq!(kind, "rejected");
        assert!(text.contains("transport mismatch"), "{text}");
    }
}
