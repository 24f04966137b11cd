//! The hello each end sends first: who it is and what its data path looks like.

use std::net::Ipv4Addr;

use super::message::SESSION_ID_LEN;
use super::wire::{put_prefixed, Reader};
use super::DecodeError;

/// The four bytes every hello starts with.
pub(crate) const HELLO_MAGIC: [u8; 4] = *b"RDMC";
/// The protocol version this build speaks.
pub(crate) const PROTOCOL_VERSION: u16 = 9;
/// The length of the resume secret a server's hello carries (without a pre-shared key).
pub(crate) const RESUME_SECRET_LEN: usize = 32;
/// Upper bound on the transport blob (DOCA's exported connection is a few hundred bytes).
pub(crate) const MAX_BLOB_LEN: usize = 1024;
/// Upper bound on the credit count a hello may announce.
pub(crate) const MAX_CREDITS: u16 = 1024;

/// Which direction of data a side runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs an `RdmaSink`: sends messages.
    Sender,
    /// Runs an `RdmaSrc`: owns the receive slots.
    Receiver,
}

impl Role {
    fn to_byte(self) -> u8 {
        match self {
            Role::Sender => 1,
            Role::Receiver => 2,
        }
    }

    fn from_byte(b: u8) -> Result<Self, DecodeError> {
        match b {
            1 => Ok(Role::Sender),
            2 => Ok(Role::Receiver),
            other => Err(DecodeError::BadField {
                field: "role",
                value: u64::from(other),
            }),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
        })
    }
}

/// The data path a side uses; both ends must use the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// Messages over a second TCP connection (no RDMA needed).
    Tcp,
    /// RDMA through NVIDIA DOCA.
    Doca,
    /// RDMA through rdma-core verbs.
    Verbs,
}

impl TransportKind {
    /// The lowercase name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Doca => "doca",
            TransportKind::Verbs => "verbs",
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            TransportKind::Tcp => 1,
            TransportKind::Doca => 2,
            TransportKind::Verbs => 3,
        }
    }

    fn from_byte(b: u8) -> Result<Self, DecodeError> {
        match b {
            1 => Ok(TransportKind::Tcp),
            2 => Ok(TransportKind::Doca),
            3 => Ok(TransportKind::Verbs),
            other => Err(DecodeError::BadField {
                field: "transport",
                value: u64::from(other),
            }),
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The check each message carries, if any; both ends must use the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Checksum {
    /// No check beyond the transport's own (RoCE's ICRC, TCP's checksum).
    #[default]
    None,
    /// A CRC32C (Castagnoli) of each message, computed by the sender and verified by the
    /// receiver before it delivers the message: 4 bytes after the message in its slot.
    Crc32c,
}

impl Checksum {
    /// The lowercase name used on the command line and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Checksum::None => "none",
            Checksum::Crc32c => "crc32c",
        }
    }

    /// Bytes the check adds after each message in its slot.
    pub(crate) fn trailer_len(self) -> usize {
        match self {
            Checksum::None => 0,
            Checksum::Crc32c => 4,
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            Checksum::None => 0,
            Checksum::Crc32c => 1,
        }
    }

    fn from_byte(b: u8) -> Result<Self, DecodeError> {
        match b {
            0 => Ok(Checksum::None),
            1 => Ok(Checksum::Crc32c),
            other => Err(DecodeError::BadField {
                field: "checksum",
                value: u64::from(other),
            }),
        }
    }
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The path MTUs an RDMA queue pair can use, in bytes (`ibv_mtu` 1 to 5).
pub(crate) const QP_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// The largest InfiniBand service level.
pub(crate) const MAX_SERVICE_LEVEL: u8 = 15;
/// The largest local ACK timeout exponent (4.096 us x 2^31).
pub(crate) const MAX_ACK_TIMEOUT: u8 = 31;
/// The largest transport retry count.
pub(crate) const MAX_RETRY_COUNT: u8 = 7;

/// The queue pair settings one end applies to its own RDMA queue pair (version 7): the packets
/// it sends carry its traffic class and service level; its ACK timeout and retry count govern
/// its own retransmissions; its MTU is the path MTU it offers. `None`: this end does not
/// apply or cannot say (tcp: none of them; DOCA: no traffic class, ACK timeout or retry
/// count, and an MTU only when `--mtu` fixed it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QpSettings {
    /// The GRH traffic class (DSCP << 2 | ECN).
    pub traffic_class: Option<u8>,
    /// The service level (0 to 15).
    pub service_level: Option<u8>,
    /// The path MTU in bytes (one of [`QP_MTUS`]).
    pub mtu: Option<u32>,
    /// The local ACK timeout exponent (0 to 31: 4.096 us x 2^N).
    pub ack_timeout: Option<u8>,
    /// The transport retry count (0 to 7).
    pub retry_count: Option<u8>,
}

impl QpSettings {
    /// Encoded length: a byte of flags saying which fields are set, then the five values (0
    /// when unset), the MTU as a u16.
    #[cfg(test)]
    pub(crate) const LEN: usize = 1 + 1 + 1 + 2 + 1 + 1;

    /// Whether any setting is given.
    pub(crate) fn any(&self) -> bool {
        *self != Self::default()
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let flags = [
            self.traffic_class.is_some(),
            self.service_level.is_some(),
            self.mtu.is_some(),
            self.ack_timeout.is_some(),
            self.retry_count.is_some(),
        ]
        .iter()
        .enumerate()
        .fold(0u8, |acc, (bit, set)| acc | (u8::from(*set) << bit));
        out.push(flags);
        out.push(self.traffic_class.unwrap_or(0));
        out.push(self.service_level.unwrap_or(0));
        let mtu = self.mtu.and_then(|m| u16::try_from(m).ok()).unwrap_or(0);
        out.extend_from_slice(&mtu.to_le_bytes());
        out.push(self.ack_timeout.unwrap_or(0));
        out.push(self.retry_count.unwrap_or(0));
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let flags = r.u8("qp_flags")?;
        if flags & !0x1f != 0 {
            return Err(DecodeError::BadField {
                field: "qp_flags",
                value: u64::from(flags),
            });
        }
        let set = |bit: u8| flags & (1 << bit) != 0;
        let bad = |field: &'static str, value: u64| DecodeError::BadField { field, value };
        let traffic_class = r.u8("traffic_class")?;
        let service_level = r.u8("service_level")?;
        let mtu = u32::from(r.u16("mtu")?);
        let ack_timeout = r.u8("ack_timeout")?;
        let retry_count = r.u8("retry_count")?;
        if set(1) && service_level > MAX_SERVICE_LEVEL {
            return Err(bad("service_level", u64::from(service_level)));
        }
        if set(2) && !QP_MTUS.contains(&mtu) {
            return Err(bad("mtu", u64::from(mtu)));
        }
        if set(3) && ack_timeout > MAX_ACK_TIMEOUT {
            return Err(bad("ack_timeout", u64::from(ack_timeout)));
        }
        if set(4) && retry_count > MAX_RETRY_COUNT {
            return Err(bad("retry_count", u64::from(retry_count)));
        }
        Ok(Self {
            traffic_class: set(0).then_some(traffic_class),
            service_level: set(1).then_some(service_level),
            mtu: set(2).then_some(mtu),
            ack_timeout: set(3).then_some(ack_timeout),
            retry_count: set(4).then_some(retry_count),
        })
    }
}

/// One path of a session beyond the bootstrap connection's (`--paths`): the addresses its
/// lanes run between, each end's source by its own route to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct PathPair {
    /// The client's address on this path.
    pub(crate) client: Ipv4Addr,
    /// The server's address on this path.
    pub(crate) server: Ipv4Addr,
}

/// The first message in each direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    /// Protocol version of the sender of this hello.
    pub version: u16,
    /// Whether this side sends or receives data.
    pub role: Role,
    /// The data path this side set up.
    pub transport: TransportKind,
    /// Largest message this side sends (sender) or accepts (receiver), in bytes.
    pub max_msg_size: u32,
    /// Receive slots (receiver) or staging slots (sender).
    pub credits: u16,
    /// Queue pairs (tcp: data connections) the session stripes its messages over, 1 to
    /// [`MAX_QPS`](crate::MAX_QPS) (version 8): the client's choice, which the server takes.
    pub qps: u8,
    /// The session's paths beyond the bootstrap connection's (`--paths`, version 9): each a
    /// pair of addresses the lanes of that path run between. Path 0, the bootstrap connection's
    /// own addresses, is not listed. The client's choice, which the server takes and echoes;
    /// at most `qps - 1` (every path carries at least one lane).
    pub paths: Vec<PathPair>,
    /// The 16-byte GID this side's data path uses (IPv4-mapped address for TCP).
    pub gid: [u8; 16],
    /// The per-message check this side uses (version 4).
    pub checksum: Checksum,
    /// How long this side keeps a broken session waiting to resume, in milliseconds; 0: it
    /// does not resume (version 5). Resumption is on when both sides say more than 0.
    pub resume_timeout_ms: u32,
    /// The server's hello, with resumption on: the session's id; zeros otherwise.
    pub session_id: [u8; SESSION_ID_LEN],
    /// The server's hello, with resumption on and no pre-shared key: the session's resume
    /// secret; zeros otherwise (with a key both ends derive it).
    pub resume_secret: [u8; RESUME_SECRET_LEN],
    /// The settings this side applies to its own RDMA queue pair (version 7; all unset on tcp).
    pub qp: QpSettings,
    /// Transport-specific connection data (DOCA export blob, QP info, TCP data port).
    pub blob: Vec<u8>,
}

impl Hello {
    /// Appends the encoded hello (without the frame kind byte) to `out`.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&HELLO_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.push(self.role.to_byte());
        out.push(self.transport.to_byte());
        out.extend_from_slice(&self.max_msg_size.to_le_bytes());
        out.extend_from_slice(&self.credits.to_le_bytes());
        out.push(self.qps);
        // decode() refuses more than qps - 1 paths, and qps fits a u8.
        out.push(self.paths.len().min(usize::from(u8::MAX)) as u8);
        for path in self.paths.iter().take(usize::from(u8::MAX)) {
            out.extend_from_slice(&path.client.octets());
            out.extend_from_slice(&path.server.octets());
        }
        out.extend_from_slice(&self.gid);
        out.push(self.checksum.to_byte());
        out.extend_from_slice(&self.resume_timeout_ms.to_le_bytes());
        out.extend_from_slice(&self.session_id);
        out.extend_from_slice(&self.resume_secret);
        self.qp.encode_into(out);
        let blob = &self.blob[..self.blob.len().min(MAX_BLOB_LEN)];
        put_prefixed(out, blob);
    }

    /// Decodes a hello body. Magic and version are checked before anything else, so a peer
    /// of another version gets a precise answer even if the layout changed.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let magic: [u8; 4] = r.array("magic")?;
        if magic != HELLO_MAGIC {
            return Err(DecodeError::BadMagic { found: magic });
        }
        let version = r.u16("version")?;
        if version != PROTOCOL_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                theirs: version,
                ours: PROTOCOL_VERSION,
            });
        }
        let role = Role::from_byte(r.u8("role")?)?;
        let transport = TransportKind::from_byte(r.u8("transport")?)?;
        let max_msg_size = r.u32("max_msg_size")?;
        if max_msg_size == 0 {
            return Err(DecodeError::BadField {
                field: "max_msg_size",
                value: 0,
            });
        }
        let credits = r.u16("credits")?;
        if credits == 0 || credits > MAX_CREDITS {
            return Err(DecodeError::BadField {
                field: "credits",
                value: u64::from(credits),
            });
        }
        let qps = r.u8("qps")?;
        if qps == 0 || qps > crate::MAX_QPS {
            return Err(DecodeError::BadField {
                field: "qps",
                value: u64::from(qps),
            });
        }
        let path_count = r.u8("paths")?;
        if path_count >= qps {
            return Err(DecodeError::BadField {
                field: "paths",
                value: u64::from(path_count),
            });
        }
        let paths = (0..path_count)
            .map(|_| {
                Ok(PathPair {
                    client: Ipv4Addr::from(r.array::<4>("path client address")?),
                    server: Ipv4Addr::from(r.array::<4>("path server address")?),
                })
            })
            .collect::<Result<Vec<_>, DecodeError>>()?;
        let gid = r.array("gid")?;
        let checksum = Checksum::from_byte(r.u8("checksum")?)?;
        let resume_timeout_ms = r.u32("resume_timeout_ms")?;
        let session_id = r.array("session_id")?;
        let resume_secret = r.array("resume_secret")?;
        let qp = QpSettings::decode(r)?;
        let blob = r.prefixed(MAX_BLOB_LEN, "blob")?.to_vec();
        Ok(Hello {
            version,
            role,
            transport,
            max_msg_size,
            credits,
            qps,
            paths,
            gid,
            checksum,
            resume_timeout_ms,
            session_id,
            resume_secret,
            qp,
            blob,
        })
    }
}
