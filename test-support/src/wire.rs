//! An independent encoder and decoder of rdma-container's wire protocol, written from
//! `docs/design.md` (not from the crate's own code), for tests that speak the protocol raw:
//! hostile peers, garbage and truncated hellos.

use std::io::Read;
use std::net::TcpStream;

/// Message kinds (the first body byte).
pub const KIND_HELLO: u8 = 1;
/// Receiver to sender: every slot is posted.
pub const KIND_READY: u8 = 2;
/// Receiver to sender: cumulative released count.
pub const KIND_CREDIT: u8 = 3;
/// Sender to receiver: end of stream after `count` messages.
pub const KIND_FINISH: u8 = 4;
/// Either way: refused or aborted, with a reason.
pub const KIND_REJECT: u8 = 5;
/// Hello role byte of a sender.
pub const ROLE_SENDER: u8 = 1;
/// Hello role byte of a receiver.
pub const ROLE_RECEIVER: u8 = 2;
/// Hello transport byte of tcp.
pub const TRANSPORT_TCP: u8 = 1;

/// A frame: u32 little-endian body length, then the body.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Hello transport byte of doca.
pub const TRANSPORT_DOCA: u8 = 2;
/// Hello transport byte of verbs.
pub const TRANSPORT_VERBS: u8 = 3;
/// The protocol version these encoders speak.
pub const VERSION: u16 = 9;
/// Client to server, first with a key: the client's 32-byte nonce.
pub const KIND_AUTH_CHALLENGE: u8 = 6;
/// Server to client: the server's nonce and its proof.
pub const KIND_AUTH_RESPONSE: u8 = 7;
/// Client to server: the client's proof.
pub const KIND_AUTH_PROOF: u8 = 8;

/// Client to server, first on a new connection: resume the session with this id.
pub const KIND_RESUME: u8 = 9;

/// A Resume frame: the session id and the client's nonce.
pub fn resume(session: &[u8; 16], nonce: &[u8; 32]) -> Vec<u8> {
    let mut b = vec![KIND_RESUME];
    b.extend_from_slice(session);
    b.extend_from_slice(nonce);
    frame(&b)
}

/// An AuthChallenge frame.
pub fn auth_challenge(nonce: &[u8; 32]) -> Vec<u8> {
    let mut b = vec![KIND_AUTH_CHALLENGE];
    b.extend_from_slice(nonce);
    frame(&b)
}

/// An AuthResponse frame.
pub fn auth_response(nonce: &[u8; 32], proof: &[u8; 32]) -> Vec<u8> {
    let mut b = vec![KIND_AUTH_RESPONSE];
    b.extend_from_slice(nonce);
    b.extend_from_slice(proof);
    frame(&b)
}

/// The server's side of the authentication on a raw connection, with `key`: reads the
/// client's challenge, answers with `nonce` and the server's proof, reads the client's proof
/// and says whether it checks.
pub fn authenticate_client(
    s: &mut TcpStream,
    key: &[u8],
    nonce: &[u8; 32],
) -> std::io::Result<bool> {
    use std::io::Write;
    let body = read_frame(s)?;
    if body.len() != 33 || body[0] != KIND_AUTH_CHALLENGE {
        return Err(std::io::Error::other("expected AuthChallenge"));
    }
    let mut client = [0u8; 32];
    client.copy_from_slice(&body[1..]);
    s.write_all(&auth_response(
        nonce,
        &proof(key, SERVER_PROOF_LABEL, &client, nonce),
    ))?;
    let body = read_frame(s)?;
    Ok(body.len() == 33
        && body[0] == KIND_AUTH_PROOF
        && body[1..] == proof(key, CLIENT_PROOF_LABEL, &client, nonce))
}

/// The pre-shared key of a test run that sets `RDMA_CONTAINER_AUTH_KEY_FILE` (which the
/// binaries under test read too), without its trailing line end; `None` without one.
pub fn run_auth_key() -> Option<Vec<u8>> {
    let path = std::env::var_os("RDMA_CONTAINER_AUTH_KEY_FILE")?;
    let mut key = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("RDMA_CONTAINER_AUTH_KEY_FILE {path:?}: {e}"));
    while key.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
        key.pop();
    }
    Some(key)
}

/// An AuthProof frame.
pub fn auth_proof(proof: &[u8; 32]) -> Vec<u8> {
    let mut b = vec![KIND_AUTH_PROOF];
    b.extend_from_slice(proof);
    frame(&b)
}

/// HMAC-SHA256 under `key` of `label`, the client's nonce and the server's nonce, as
/// docs/design.md ("Authentication") specifies both proofs.
pub fn proof(key: &[u8], label: &str, client: &[u8; 32], server: &[u8; 32]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("any key length");
    mac.update(label.as_bytes());
    mac.update(client);
    mac.update(server);
    mac.finalize().into_bytes().into()
}

/// The label of the client's proof.
pub const CLIENT_PROOF_LABEL: &str = "rdma-container v3 client proof";
/// The label of the server's proof.
pub const SERVER_PROOF_LABEL: &str = "rdma-container v3 server proof";

/// The client's side of the authentication on a raw connection, with `key` and the client
/// nonce `nonce`: sends the challenge, reads the server's response (its nonce and proof,
/// returned as read, `Err` when the server answered something else) and, when `answer`, sends
/// the proof.
pub fn authenticate(
    s: &mut TcpStream,
    key: &[u8],
    nonce: &[u8; 32],
    answer: bool,
) -> std::io::Result<([u8; 32], [u8; 32])> {
    use std::io::Write;
    s.write_all(&auth_challenge(nonce))?;
    let body = read_frame(s)?;
    if body.len() != 65 || body[0] != KIND_AUTH_RESPONSE {
        return Err(std::io::Error::other(format!(
            "expected AuthResponse, got {} byte(s) of kind {:?}",
            body.len(),
            body.first()
        )));
    }
    let mut server = [0u8; 32];
    server.copy_from_slice(&body[1..33]);
    let mut server_proof = [0u8; 32];
    server_proof.copy_from_slice(&body[33..65]);
    if answer {
        s.write_all(&auth_proof(&proof(key, CLIENT_PROOF_LABEL, nonce, &server)))?;
    }
    Ok((server, server_proof))
}

/// A Hello frame (version 9, tcp, 2 credits, one queue pair on one path, no checksum, no resumption, no queue pair
/// settings, the GID of 127.0.0.1).
pub fn hello(role: u8, max_msg_size: u32, blob: &[u8]) -> Vec<u8> {
    hello_with(VERSION, role, TRANSPORT_TCP, max_msg_size, 2, blob)
}

/// A Hello frame with every field chosen (the GID of 127.0.0.1).
pub fn hello_with(
    version: u16,
    role: u8,
    transport: u8,
    max_msg_size: u32,
    credits: u16,
    blob: &[u8],
) -> Vec<u8> {
    let mut b = vec![KIND_HELLO];
    b.extend_from_slice(b"RDMC");
    b.extend_from_slice(&version.to_le_bytes());
    b.push(role);
    b.push(transport);
    b.extend_from_slice(&max_msg_size.to_le_bytes());
    b.extend_from_slice(&credits.to_le_bytes());
    // Queue pairs (version 8): one; paths beyond the bootstrap's (version 9): none.
    b.push(1);
    b.push(0);
    b.extend_from_slice(&[0u8; 10]);
    b.extend_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
    // The checksum (version 4): none.
    b.push(0);
    // Resumption (version 5): off (timeout 0, no session id, no secret).
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&[0u8; 16 + 32]);
    // Queue pair settings (version 7): none (flags 0, then traffic class, service level, MTU
    // as a u16, ACK timeout, retry count).
    b.extend_from_slice(&[0u8; 1 + 1 + 1 + 2 + 1 + 1]);
    b.extend_from_slice(&(blob.len() as u16).to_le_bytes());
    b.extend_from_slice(blob);
    frame(&b)
}

/// A Finish frame.
pub fn finish(count: u64) -> Vec<u8> {
    let mut b = vec![KIND_FINISH];
    b.extend_from_slice(&count.to_le_bytes());
    frame(&b)
}

/// A Credit frame.
pub fn credit(released: u64) -> Vec<u8> {
    let mut b = vec![KIND_CREDIT];
    b.extend_from_slice(&released.to_le_bytes());
    frame(&b)
}

/// A Reject frame.
pub fn reject(reason: &str) -> Vec<u8> {
    let mut b = vec![KIND_REJECT];
    b.extend_from_slice(&(reason.len() as u16).to_le_bytes());
    b.extend_from_slice(reason.as_bytes());
    frame(&b)
}

/// One message on the tcp transport's data connection: u32 length, payload.
pub fn data(payload: &[u8]) -> Vec<u8> {
    frame(payload)
}

/// Reads one frame body (blocking; bounded by the socket's read timeout).
pub fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

/// The blob at the end of a Hello body; `None` when the body is not a whole Hello.
pub fn hello_blob(body: &[u8]) -> Option<Vec<u8>> {
    if body.first() != Some(&KIND_HELLO) {
        return None;
    }
    // ... qps, then the path count (0: a hello of one path).
    let at = 1 + 4 + 2 + 1 + 1 + 4 + 2 + 1 + 1 + 16 + 1 + 4 + 16 + 32 + 7;
    let len = u16::from_le_bytes([*body.get(at)?, *body.get(at + 1)?]) as usize;
    body.get(at + 2..at + 2 + len).map(<[u8]>::to_vec)
}

/// When `bytes` are exactly one Reject frame: its reason.
pub fn parse_reject(bytes: &[u8]) -> Option<String> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let body = bytes.get(4..)?;
    if body.len() != len || body.first() != Some(&KIND_REJECT) {
        return None;
    }
    let rlen = u16::from_le_bytes([*body.get(1)?, *body.get(2)?]) as usize;
    let reason = body.get(3..3 + rlen)?;
    (3 + rlen == body.len()).then(|| String::from_utf8_lossy(reason).into_owned())
}
