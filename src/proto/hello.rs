//! The hello each end sends first: who it is and what its data path looks like.

use super::message::SESSION_ID_LEN;
use super::wire::{put_prefixed, Reader};
use super::DecodeError;

/// The four bytes every hello starts with.
pub(crate) const HELLO_MAGIC: [u8; 4] = *b"RDMC";
/// The protocol version this build speaks.
pub(crate) const PROTOCOL_VERSION: u16 = 6;
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
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
        out.extend_from_slice(&self.gid);
        out.push(self.checksum.to_byte());
        out.extend_from_slice(&self.resume_timeout_ms.to_le_bytes());
        out.extend_from_slice(&self.session_id);
        out.extend_from_slice(&self.resume_secret);
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
        let gid = r.array("gid")?;
        let checksum = Checksum::from_byte(r.u8("checksum")?)?;
        let resume_timeout_ms = r.u32("resume_timeout_ms")?;
        let session_id = r.array("session_id")?;
        let resume_secret = r.array("resume_secret")?;
        let blob = r.prefixed(MAX_BLOB_LEN, "blob")?.to_vec();
        Ok(Hello {
            version,
            role,
            transport,
            max_msg_size,
            credits,
            gid,
            checksum,
            resume_timeout_ms,
            session_id,
            resume_secret,
            blob,
        })
    }
}
