//! Pre-shared-key authentication: the key, and the proofs both ends exchange before anything
//! else (see docs/design.md, "Authentication").
//!
//! Each end proves that it knows the key by an HMAC-SHA256 over both ends' fresh nonces, under
//! a label that says which end speaks, so that neither proof can be replayed (the other end's
//! nonce is new every time) or reflected (the labels differ). Comparisons are constant-time
//! (`Mac::verify_slice`). The key never appears in logs, errors or `Debug` output.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Error, Result};

/// Bytes of a nonce.
pub(crate) const NONCE_LEN: usize = 32;
/// Bytes of a proof (HMAC-SHA256).
pub(crate) const PROOF_LEN: usize = 32;
/// The shortest key accepted, in bytes.
pub(crate) const MIN_KEY_LEN: usize = 16;
/// The longest key file read, in bytes.
const MAX_KEY_LEN: usize = 4096;

/// A nonce: 32 fresh random bytes.
pub(crate) type Nonce = [u8; NONCE_LEN];
/// A proof of knowing the key.
pub(crate) type Proof = [u8; PROOF_LEN];

/// The pre-shared key both ends of a session must hold.
#[derive(Clone)]
pub struct AuthKey {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(<redacted>)")
    }
}

impl AuthKey {
    /// The key's bytes, for a resume secret the server's hello carries (never a
    /// pre-shared key: that never leaves this process).
    pub(crate) fn expose(&self) -> &[u8] {
        &self.bytes
    }

    /// A key from its bytes (at least 16 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a key shorter than 16 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < MIN_KEY_LEN {
            return Err(Error::InvalidConfig(format!(
                "the authentication key has {} byte(s); it needs at least {MIN_KEY_LEN} (for \
example: head -c 32 /dev/urandom | base64 > key; chmod 600 key)",
                bytes.len()
            )));
        }
        Ok(Self {
            bytes: bytes.to_vec(),
        })
    }

    /// Reads the key from a file: its contents without the trailing line end, at least
    /// 16 bytes. The file must not be readable by group or others.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the file (never its contents): it cannot be read, is
    /// group- or world-readable, or holds too short or too long a key.
    pub fn from_file(path: &Path) -> Result<Self> {
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::InvalidConfig(format!(
                "cannot read the authentication key file {shown}: {e}"
            ))
        })?;
        if !meta.is_file() {
            return Err(Error::InvalidConfig(format!(
                "the authentication key file {shown} is {}, not a regular file: a key is read \
only from a regular file (symlinks are followed) of at most {MAX_KEY_LEN} bytes",
                file_kind(&meta.file_type())
            )));
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(Error::InvalidConfig(format!(
                "the authentication key file {shown} is readable by group or others (mode {:o}): \
run chmod 600 {shown}",
                mode & 0o777
            )));
        }
        let too_long = |len: u64| {
            Error::InvalidConfig(format!(
                "the authentication key file {shown} has {len} bytes or more; a key file has at \
most {MAX_KEY_LEN}"
            ))
        };
        if meta.len() > MAX_KEY_LEN as u64 {
            return Err(too_long(meta.len()));
        }
        let cannot_read = |e: std::io::Error| {
            Error::InvalidConfig(format!(
                "cannot read the authentication key file {shown}: {e}"
            ))
        };
        // Opened without blocking (a file swapped for a FIFO after the check above must not
        // hang start-up) and read to one byte past the limit (one that grew must not be read
        // without end).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(cannot_read)?;
        let opened = file.metadata().map_err(cannot_read)?;
        if !opened.is_file() {
            return Err(Error::InvalidConfig(format!(
                "the authentication key file {shown} became {} while it was opened",
                file_kind(&opened.file_type())
            )));
        }
        let mut contents = Vec::with_capacity(MAX_KEY_LEN + 1);
        file.take(MAX_KEY_LEN as u64 + 1)
            .read_to_end(&mut contents)
            .map_err(cannot_read)?;
        if contents.len() > MAX_KEY_LEN {
            return Err(too_long(contents.len() as u64));
        }
        let end = contents
            .iter()
            .rposition(|b| !matches!(b, b'\n' | b'\r'))
            .map_or(0, |i| i + 1);
        Self::from_bytes(&contents[..end]).map_err(|e| match e {
            Error::InvalidConfig(why) => Error::InvalidConfig(format!("{shown}: {why}")),
            other => other,
        })
    }

    fn mac(&self, label: &[u8], client: &Nonce, server: &Nonce) -> Hmac<Sha256> {
        // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.bytes)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(label);
        mac.update(client);
        mac.update(server);
        mac
    }

    /// 32 bytes derived from the key for `label`, `context` and both nonces (a resume secret:
    /// the same on both ends, never on the wire).
    pub(crate) fn derive(
        &self,
        label: &[u8],
        context: &[u8],
        client: &Nonce,
        server: &Nonce,
    ) -> [u8; PROOF_LEN] {
        let mut mac = self.mac(label, client, server);
        mac.update(context);
        mac.finalize().into_bytes().into()
    }

    /// The server's proof over both nonces.
    pub(crate) fn server_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        self.mac(SERVER_LABEL, client, server)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The client's proof over both nonces.
    pub(crate) fn client_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        self.mac(CLIENT_LABEL, client, server)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Whether `proof` is the server's proof over both nonces (constant-time).
    pub(crate) fn is_server_proof(&self, proof: &Proof, client: &Nonce, server: &Nonce) -> bool {
        self.mac(SERVER_LABEL, client, server)
            .verify_slice(proof)
            .is_ok()
    }

    /// Whether `proof` is the client's proof over both nonces (constant-time).
    pub(crate) fn is_client_proof(&self, proof: &Proof, client: &Nonce, server: &Nonce) -> bool {
        self.mac(CLIENT_LABEL, client, server)
            .verify_slice(proof)
            .is_ok()
    }
}

const SERVER_LABEL: &[u8] = b"rdma-container v3 server proof";
const CLIENT_LABEL: &[u8] = b"rdma-container v3 client proof";

/// 32 fresh random bytes from the operating system.
pub(crate) fn fresh_nonce() -> Result<Nonce> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| Error::Socket {
        what: "getrandom",
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(nonce)
}

/// What a file that is not a regular file is, in words.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> AuthKey {
        AuthKey::from_bytes(&[b; 32]).expect("key")
    }

    #[test]
    fn each_proof_checks_only_with_the_same_key_nonces_and_side() {
        let (c, s) = ([1u8; 32], [2u8; 32]);
        let k = key(7);
        let server = k.server_proof(&c, &s);
        let client = k.client_proof(&c, &s);
        assert!(k.is_server_proof(&server, &c, &s));
        assert!(k.is_client_proof(&client, &c, &s));
        assert!(!k.is_client_proof(&server, &c, &s), "a reflected proof");
        assert!(
            !k.is_server_proof(&server, &c, &[3; 32]),
            "a replayed proof"
        );
        assert!(!key(8).is_server_proof(&server, &c, &s), "another key");
    }

    #[test]
    fn short_keys_and_open_key_files_are_refused_without_showing_the_key() {
        let e = AuthKey::from_bytes(b"short").unwrap_err();
        assert!(e.to_string().contains("at least 16"), "{e}");
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("key");
        std::fs::write(&path, "a-secret-of-enough-length\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = AuthKey::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && e.contains("644"), "{e}");
        assert!(!e.contains("a-secret"), "the key leaked: {e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let k = AuthKey::from_file(&path).expect("key");
        assert_eq!(format!("{k:?}"), "AuthKey(<redacted>)");
        let same = AuthKey::from_bytes(b"a-secret-of-enough-length").expect("key");
        let (c, s) = ([0u8; 32], [9u8; 32]);
        assert!(
            same.is_client_proof(&k.client_proof(&c, &s), &c, &s),
            "the trailing newline is not part of the key"
        );
    }

    fn private_file(dir: &Path, name: &str, contents: &[u8]) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    #[test]
    fn key_files_that_are_not_regular_files_are_refused_at_once_naming_what_they_are() {
        let dir = tempfile::tempdir().expect("dir");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        // Read, this FIFO would block start-up for ever: no writer ever opens it.
        let e = AuthKey::from_file(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("FIFO") && e.contains("not a regular file"),
            "{e}"
        );
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let e = AuthKey::from_file(&sub).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        // /dev/zero is endless; its mode (666) is not what refuses it here.
        let e = AuthKey::from_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a character device"), "{e}");
        // A symlink to a private regular file is followed.
        let real = private_file(dir.path(), "real", b"a-secret-of-enough-length\n");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        AuthKey::from_file(&link).expect("a symlink to a key file");
        let to_fifo = dir.path().join("to-fifo");
        std::os::unix::fs::symlink(&fifo, &to_fifo).expect("symlink");
        let e = AuthKey::from_file(&to_fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
    }

    #[test]
    fn key_files_hold_16_to_4096_bytes() {
        let dir = tempfile::tempdir().expect("dir");
        let p = private_file(dir.path(), "k15", &[b'k'; 15]);
        let e = AuthKey::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("at least 16"), "{e}");
        AuthKey::from_file(&private_file(dir.path(), "k16", &[b'k'; 16])).expect("16 bytes");
        AuthKey::from_file(&private_file(dir.path(), "k4096", &[b'k'; 4096])).expect("4 KiB");
        let p = private_file(dir.path(), "k4097", &[b'k'; 4097]);
        let e = AuthKey::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("at most 4096"), "{e}");
        // A huge (sparse) file is refused from its size, never read.
        let huge = private_file(dir.path(), "huge", b"");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&huge)
            .and_then(|f| f.set_len(64 << 30))
            .expect("a sparse 64 GiB file");
        let e = AuthKey::from_file(&huge).unwrap_err().to_string();
        assert!(e.contains("at most 4096"), "{e}");
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(fresh_nonce().expect("nonce"), fresh_nonce().expect("nonce"));
    }
}
