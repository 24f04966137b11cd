//! Sessions and a listener for the tokio runtime (the `tokio` feature): [`AsyncRdmaSrc`],
//! [`AsyncRdmaSink`] and [`AsyncListener`] wrap the blocking types and wait on their readiness
//! descriptor with tokio's [`AsyncFd`]; no thread per call, no busy loop.
//!
//! Rules:
//! 1. Every call tries first (`try_recv`, `try_send`, ...) and waits for the descriptor only
//!    after a `WouldBlock`, which is what arms it (the descriptor's contract, in
//!    `session/readiness.rs`).
//! 2. **Cancel safety.** A dropped [`AsyncRdmaSrc::recv`] future loses no message: a message
//!    is taken and returned in one step, with no wait in between (the previous message is
//!    released by the call, as a blocking `recv` releases it). A dropped
//!    [`AsyncRdmaSink::send`] future has sent the message if and only if it had taken it: on
//!    RDMA that happens at once when a credit is free, and the future is done; on tcp, bytes
//!    the kernel did not take yet are handed on by the sink's next call (or
//!    [`AsyncRdmaSink::flush`]). A dropped [`AsyncRdmaSink::finish`] future leaves the stream
//!    ending: call `finish` again. [`AsyncListener::accept`] takes a client in one step too.
//! 3. What still blocks the thread: accepting a client's session in a role
//!    ([`crate::Incoming::accept_src`]: a round trip or two, bounded by the handshake timeout)
//!    and connecting, which belong in `tokio::task::spawn_blocking` (as
//!    `examples/tokio_server.rs` does); and repairing a break of a resumable session, which
//!    happens inside the call that met the break and holds its thread until the session resumed
//!    or gave up (its resume timeout at most).

use std::io;
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use crate::session::Patience;
use crate::{Error, ErrorKind, Incoming, Listener, RdmaSink, RdmaSrc, Result, SessionInfo};

/// An [`RdmaSrc`] for async code.
#[derive(Debug)]
pub struct AsyncRdmaSrc {
    fd: AsyncFd<RdmaSrc>,
}

/// An [`RdmaSink`] for async code.
#[derive(Debug)]
pub struct AsyncRdmaSink {
    fd: AsyncFd<RdmaSink>,
}

/// A [`Listener`] for async code.
#[derive(Debug)]
pub struct AsyncListener {
    fd: AsyncFd<Listener>,
}

/// The types whose readiness descriptor is theirs for life: created with the object, never
/// replaced or closed before it is dropped (`session/readiness.rs`, rule 4; the listener's
/// eventfd). Sealed: only they can be registered.
trait StableFd: std::os::fd::AsRawFd {}
impl StableFd for RdmaSrc {}
impl StableFd for RdmaSink {}
impl StableFd for Listener {}

fn register<T: StableFd>(inner: T) -> Result<AsyncFd<T>> {
    // SAFETY: `register_with_interest` needs the descriptor `as_raw_fd` returns to stay open,
    // refer to the same file description and be returned by every call while the `AsyncFd`
    // owns the value. `StableFd` types return their readiness descriptor, an `OwnedFd` field
    // set at construction and never replaced, closed only by their drop, which happens after
    // the `AsyncFd` deregisters it (drop or `into_inner`).
    #[allow(unsafe_code)]
    let registered = unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) };
    registered.map_err(|e| Error::Socket {
        what: "register with the tokio reactor",
        source: e.into(),
    })
}

fn reactor_failed(source: io::Error) -> Error {
    Error::Socket {
        what: "wait on the tokio reactor",
        source,
    }
}

/// Whether `r` says "try again once the descriptor is readable".
fn not_ready<T>(r: &Result<T>) -> bool {
    matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// Runs `attempt` on the inner value until it is not `WouldBlock`, waiting for the readiness
/// descriptor in between (rule 1): the one loop every async call runs.
async fn until_ready<T: StableFd, R>(
    fd: &mut AsyncFd<T>,
    mut attempt: impl FnMut(&mut T) -> Result<R>,
) -> Result<R> {
    let result = attempt(fd.get_mut());
    if !not_ready(&result) {
        return result;
    }
    loop {
        let mut guard = fd.readable_mut().await.map_err(reactor_failed)?;
        let result = attempt(guard.get_inner_mut());
        if !not_ready(&result) {
            return result;
        }
        // Cleared only up to the readiness this guard saw: an event after the try (which
        // re-armed the descriptor) is a newer one, and the next wait returns for it.
        guard.clear_ready();
    }
}

impl AsyncRdmaSrc {
    /// Wraps a session; needs a tokio runtime with I/O enabled.
    ///
    /// # Errors
    /// Registering its descriptor with the runtime failed (no runtime: this panics, as tokio
    /// does).
    pub fn new(src: RdmaSrc) -> Result<Self> {
        Ok(Self { fd: register(src)? })
    }

    /// The next message, `None` at end of stream (as [`RdmaSrc::recv`]); cancel-safe.
    ///
    /// # Errors
    /// As for [`RdmaSrc::recv`].
    pub async fn recv(&mut self) -> Result<Option<&[u8]>> {
        let more = until_ready(&mut self.fd, |src| src.advance(Patience::Never)).await?;
        Ok(if more {
            self.fd.get_ref().held_message()
        } else {
            None
        })
    }

    /// Like [`AsyncRdmaSrc::recv`], giving up after `timeout` with [`Error::DeadlinePassed`]
    /// (the session stays usable): `tokio::time::timeout` around the cancel-safe `recv`, so
    /// the runtime needs its timer (`enable_time`).
    ///
    /// # Errors
    /// As for [`RdmaSrc::recv_timeout`].
    pub async fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<&[u8]>> {
        match ::tokio::time::timeout(timeout, self.recv()).await {
            Ok(received) => received,
            Err(_elapsed) => Err(Error::DeadlinePassed { waited: timeout }),
        }
    }

    /// What was chosen and negotiated.
    pub fn info(&self) -> &SessionInfo {
        self.fd.get_ref().info()
    }

    /// The session, for what the async wrapper does not have.
    pub fn get_ref(&self) -> &RdmaSrc {
        self.fd.get_ref()
    }

    /// The blocking session back.
    pub fn into_inner(self) -> RdmaSrc {
        self.fd.into_inner()
    }
}

impl AsyncRdmaSink {
    /// Wraps a session; needs a tokio runtime with I/O enabled.
    ///
    /// # Errors
    /// Registering its descriptor with the runtime failed.
    pub fn new(sink: RdmaSink) -> Result<Self> {
        Ok(Self {
            fd: register(sink)?,
        })
    }

    /// Sends one message once a credit and a staging slot are free (as [`RdmaSink::send`]);
    /// `data` may be reused when it returns. Rule 2 says what dropping it means.
    ///
    /// # Errors
    /// As for [`RdmaSink::send`].
    pub async fn send(&mut self, data: &[u8]) -> Result<()> {
        until_ready(&mut self.fd, |sink| sink.try_send(data)).await?;
        self.flush().await
    }

    /// Hands on what a send left queued (tcp only; at once on RDMA).
    ///
    /// # Errors
    /// As for [`RdmaSink::try_flush`].
    pub async fn flush(&mut self) -> Result<()> {
        until_ready(&mut self.fd, RdmaSink::try_flush).await
    }

    /// Ends the stream (as [`RdmaSink::finish`]) and returns the count; may be called again
    /// after its future was dropped.
    ///
    /// # Errors
    /// As for [`RdmaSink::finish`].
    pub async fn finish(&mut self) -> Result<u64> {
        until_ready(&mut self.fd, RdmaSink::try_finish).await
    }

    /// What was chosen and negotiated.
    pub fn info(&self) -> &SessionInfo {
        self.fd.get_ref().info()
    }

    /// The session, for what the async wrapper does not have.
    pub fn get_ref(&self) -> &RdmaSink {
        self.fd.get_ref()
    }

    /// The blocking session back.
    pub fn into_inner(self) -> RdmaSink {
        self.fd.into_inner()
    }
}

impl AsyncListener {
    /// Wraps a listener; needs a tokio runtime with I/O enabled.
    ///
    /// # Errors
    /// Registering its descriptor with the runtime failed.
    pub fn new(listener: Listener) -> Result<Self> {
        Ok(Self {
            fd: register(listener)?,
        })
    }

    /// The next client whose hello arrived (as [`Listener::accept`]); cancel-safe. Accepting
    /// it in a role blocks for its handshake's round trips (rule 3).
    ///
    /// # Errors
    /// As for [`Listener::try_accept`], other than `WouldBlock`.
    pub async fn accept(&mut self) -> Result<Incoming> {
        until_ready(&mut self.fd, |listener| listener.try_accept()).await
    }

    /// The listener, for its address and counters.
    pub fn get_ref(&self) -> &Listener {
        self.fd.get_ref()
    }
}
