//! Control messages: everything after the hello.

use super::hello::{Hello, MAX_BLOB_LEN};
use super::wire::{put_prefixed, Reader};
use super::DecodeError;

/// Upper bound on a Reject reason, in bytes of UTF-8.
pub(crate) const MAX_REASON_LEN: usize = 512;

/// How a Reject that means "no place now, try again later" begins (a server at its session or
/// memory limit): the client takes it as [`crate::Error::Busy`] and retries within its connect
/// timeout.
pub(crate) const BUSY_PREFIX: &str = "busy:";

/// How a Reject about the pre-shared key begins ("authentication failed", "authentication
/// required: ..."): a server counts a client that sent one as one that did not prove the key.
pub(crate) const AUTH_PREFIX: &str = "authentication";

const KIND_HELLO: u8 = 1;
const KIND_READY: u8 = 2;
const KIND_CREDIT: u8 = 3;
const KIND_FINISH: u8 = 4;
const KIND_REJECT: u8 = 5;
const KIND_AUTH_CHALLENGE: u8 = 6;
const KIND_AUTH_RESPONSE: u8 = 7;
const KIND_AUTH_PROOF: u8 = 8;
const KIND_RESUME: u8 = 9;
const KIND_RESUME_CHALLENGE: u8 = 10;
const KIND_RESUME_PROOF: u8 = 11;
const KIND_RESUME_ACCEPTED: u8 = 12;

/// Bytes of an authentication nonce or proof.
pub(crate) const AUTH_LEN: usize = 32;
/// Bytes of a session id (resumption).
pub(crate) const SESSION_ID_LEN: usize = 16;

/// One end's counts when a session resumes (docs/design.md, "Resuming a session"): a
/// receiver's `arrived` and `released`, or a sender's `taken` and the `released` it knew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Receiver: messages arrived. Sender: messages taken.
    pub(crate) messages: u64,
    /// Both: messages released (as the receiver counts them, or as the sender last heard).
    pub(crate) released: u64,
}

/// One message on the control channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// Who a side is and how to reach its data path; sent first, in both directions.
    Hello(Hello),
    /// Receiver to sender: every receive slot is posted, data may flow.
    Ready,
    /// Receiver to sender: the application has released every message with a sequence
    /// number below `released` (cumulative, so credits cannot be lost or reordered).
    Credit {
        /// Messages released so far, in total.
        released: u64,
    },
    /// Sender to receiver: end of stream after exactly `count` messages.
    Finish {
        /// The number of messages sent in this session.
        count: u64,
    },
    /// Either direction: the session is refused or aborted, and why.
    Reject {
        /// Human-readable reason, at most [`MAX_REASON_LEN`] bytes.
        reason: String,
    },
    /// Client to server, first when a key is set: the client's fresh nonce.
    AuthChallenge {
        /// 32 random bytes.
        nonce: [u8; AUTH_LEN],
    },
    /// Server to client: the server's fresh nonce and its proof of the key over both.
    AuthResponse {
        /// 32 random bytes.
        nonce: [u8; AUTH_LEN],
        /// HMAC-SHA256 under the key (see `crate::auth`).
        proof: [u8; AUTH_LEN],
    },
    /// Client to server: the client's proof of the key over both nonces.
    AuthProof {
        /// HMAC-SHA256 under the key (see `crate::auth`).
        proof: [u8; AUTH_LEN],
    },
    /// Client to server, first on a new connection: resume this broken session.
    Resume {
        /// The session's id (from the original handshake).
        session: [u8; SESSION_ID_LEN],
        /// The client's fresh nonce for this attempt.
        nonce: [u8; AUTH_LEN],
    },
    /// Server to client: its fresh nonce and its proof of the session's secret over both.
    ResumeChallenge {
        /// 32 random bytes.
        nonce: [u8; AUTH_LEN],
        /// HMAC-SHA256 under the session's secret.
        proof: [u8; AUTH_LEN],
    },
    /// Client to server: its proof of the secret, its counts, its new data path's blob.
    ResumeProof {
        /// HMAC-SHA256 under the session's secret.
        proof: [u8; AUTH_LEN],
        /// The client's counts at the break.
        counts: Counts,
        /// The client's new data-path connection data.
        blob: Vec<u8>,
    },
    /// Server to client: the resume is accepted; the server's counts and blob.
    ResumeAccepted {
        /// The server's counts at the break.
        counts: Counts,
        /// The server's new data-path connection data.
        blob: Vec<u8>,
    },
}

impl Message {
    /// A Reject whose reason is cut (on a character boundary) to fit the bound.
    pub(crate) fn reject(reason: &str) -> Self {
        let mut end = reason.len().min(MAX_REASON_LEN);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        Message::Reject {
            reason: reason[..end].to_owned(),
        }
    }

    /// Short name for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Ready => "Ready",
            Message::Credit { .. } => "Credit",
            Message::Finish { .. } => "Finish",
            Message::Reject { .. } => "Reject",
            Message::AuthChallenge { .. } => "AuthChallenge",
            Message::AuthResponse { .. } => "AuthResponse",
            Message::AuthProof { .. } => "AuthProof",
            Message::Resume { .. } => "Resume",
            Message::ResumeChallenge { .. } => "ResumeChallenge",
            Message::ResumeProof { .. } => "ResumeProof",
            Message::ResumeAccepted { .. } => "ResumeAccepted",
        }
    }

    /// Appends the message body (kind byte first) to `out`.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Message::Hello(h) => {
                out.push(KIND_HELLO);
                h.encode_into(out);
            }
            Message::Ready => out.push(KIND_READY),
            Message::Credit { released } => {
                out.push(KIND_CREDIT);
                out.extend_from_slice(&released.to_le_bytes());
            }
            Message::Finish { count } => {
                out.push(KIND_FINISH);
                out.extend_from_slice(&count.to_le_bytes());
            }
            Message::Reject { reason } => {
                out.push(KIND_REJECT);
                let mut end = reason.len().min(MAX_REASON_LEN);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                put_prefixed(out, &reason.as_bytes()[..end]);
            }
            Message::AuthChallenge { nonce } => {
                out.push(KIND_AUTH_CHALLENGE);
                out.extend_from_slice(nonce);
            }
            Message::AuthResponse { nonce, proof } => {
                out.push(KIND_AUTH_RESPONSE);
                out.extend_from_slice(nonce);
                out.extend_from_slice(proof);
            }
            Message::AuthProof { proof } => {
                out.push(KIND_AUTH_PROOF);
                out.extend_from_slice(proof);
            }
            Message::Resume { session, nonce } => {
                out.push(KIND_RESUME);
                out.extend_from_slice(session);
                out.extend_from_slice(nonce);
            }
            Message::ResumeChallenge { nonce, proof } => {
                out.push(KIND_RESUME_CHALLENGE);
                out.extend_from_slice(nonce);
                out.extend_from_slice(proof);
            }
            Message::ResumeProof {
                proof,
                counts,
                blob,
            } => {
                out.push(KIND_RESUME_PROOF);
                out.extend_from_slice(proof);
                counts.encode_into(out);
                put_prefixed(out, &blob[..blob.len().min(MAX_BLOB_LEN)]);
            }
            Message::ResumeAccepted { counts, blob } => {
                out.push(KIND_RESUME_ACCEPTED);
                counts.encode_into(out);
                put_prefixed(out, &blob[..blob.len().min(MAX_BLOB_LEN)]);
            }
        }
    }

    /// Decodes one complete message body; the whole slice must be consumed.
    pub(crate) fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let msg = match r.u8("kind")? {
            KIND_HELLO => Message::Hello(Hello::decode(&mut r)?),
            KIND_READY => Message::Ready,
            KIND_CREDIT => Message::Credit {
                released: r.u64("released")?,
            },
            KIND_FINISH => Message::Finish {
                count: r.u64("count")?,
            },
            KIND_REJECT => {
                let raw = r.prefixed(MAX_REASON_LEN, "reason")?;
                Message::Reject {
                    reason: String::from_utf8_lossy(raw).into_owned(),
                }
            }
            KIND_AUTH_CHALLENGE => Message::AuthChallenge {
                nonce: r.array("nonce")?,
            },
            KIND_AUTH_RESPONSE => Message::AuthResponse {
                nonce: r.array("nonce")?,
                proof: r.array("proof")?,
            },
            KIND_AUTH_PROOF => Message::AuthProof {
                proof: r.array("proof")?,
            },
            KIND_RESUME => Message::Resume {
                session: r.array("session")?,
                nonce: r.array("nonce")?,
            },
            KIND_RESUME_CHALLENGE => Message::ResumeChallenge {
                nonce: r.array("nonce")?,
                proof: r.array("proof")?,
            },
            KIND_RESUME_PROOF => Message::ResumeProof {
                proof: r.array("proof")?,
                counts: Counts::decode(&mut r)?,
                blob: r.prefixed(MAX_BLOB_LEN, "blob")?.to_vec(),
            },
            KIND_RESUME_ACCEPTED => Message::ResumeAccepted {
                counts: Counts::decode(&mut r)?,
                blob: r.prefixed(MAX_BLOB_LEN, "blob")?.to_vec(),
            },
            other => return Err(DecodeError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(msg)
    }
}

impl Counts {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.messages.to_le_bytes());
        out.extend_from_slice(&self.released.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            messages: r.u64("messages")?,
            released: r.u64("released")?,
        })
    }
}
