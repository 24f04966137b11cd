//! The control channel: framed protocol messages on the bootstrap TCP connection.
//!
//! The socket is non-blocking; reads go through a bounded buffer, so a garbage peer can never
//! make us hold more than one maximal frame.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::wait::{remaining, wait_any, Interest};
use crate::proto::{decode_frame, encode_frame_into, Message, FRAME_HEADER_LEN, MAX_FRAME_BODY};
use crate::{Error, Result};

/// How long a control write may stall before the peer counts as lost.
const WRITE_STALL_LIMIT: Duration = Duration::from_secs(10);

/// One end of the control connection.
#[derive(Debug)]
pub(crate) struct ControlChannel {
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    buf: Vec<u8>,
    /// The frame being sent, kept so that sending allocates nothing per message.
    out: Vec<u8>,
    /// The last read returned less than it asked for: do not read again before a wait.
    drained: bool,
    eof: bool,
    /// Why the connection ended, when it was reset rather than closed.
    reset: Option<(String, Option<io::Error>)>,
}

impl ControlChannel {
    /// Wraps a connected stream (switching it to non-blocking mode).
    pub(crate) fn new(stream: TcpStream) -> Result<Self> {
        let sock = |what| move |source| Error::Socket { what, source };
        let peer = stream.peer_addr().map_err(sock("getpeername"))?;
        let local = stream.local_addr().map_err(sock("getsockname"))?;
        stream
            .set_nonblocking(true)
            .map_err(sock("set non-blocking"))?;
        Ok(Self {
            stream,
            peer,
            local,
            buf: Vec::with_capacity(FRAME_HEADER_LEN + MAX_FRAME_BODY as usize),
            out: Vec::with_capacity(64),
            drained: false,
            eof: false,
            reset: None,
        })
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Our address on this connection: the source address the kernel chose toward the peer.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The descriptor to wait on for incoming messages.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// Sends one message, waiting at most a few seconds for socket buffer space.
    pub(crate) fn send(&mut self, msg: &Message) -> std::result::Result<(), SendFailed> {
        let mut frame = std::mem::take(&mut self.out);
        encode_frame_into(msg, &mut frame);
        let result = self.send_frame(&frame);
        self.out = frame;
        result
    }

    fn send_frame(&mut self, frame: &[u8]) -> std::result::Result<(), SendFailed> {
        let mut sent = 0;
        // The clock is read only when the socket pushes back (a frame usually goes at once).
        let mut deadline = None;
        while sent < frame.len() {
            match self.stream.write(&frame[sent..]) {
                Ok(0) => {
                    return Err(SendFailed::PeerGone(Lost::closed(
                        "control connection closed while sending",
                    )))
                }
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + WRITE_STALL_LIMIT);
                    let Some(left) = remaining(deadline) else {
                        return Err(SendFailed::PeerGone(Lost::closed(
                            "control channel write stalled for 10 s",
                        )));
                    };
                    wait_any([Interest::write(self.stream.as_fd())], left)
                        .map_err(SendFailed::Io)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(match peer_gone(e) {
                        Ok(lost) => SendFailed::PeerGone(lost),
                        Err(e) => SendFailed::Io(e),
                    })
                }
            }
        }
        Ok(())
    }

    /// Returns the next complete message if one has arrived, without blocking.
    ///
    /// EOF or a reset is an event, [`Received::Closed`] with the reason (the session core
    /// decides what it means and builds the error with its count). A message that does not
    /// decode becomes [`Error::Decode`].
    pub(crate) fn try_recv(&mut self) -> Result<Received> {
        loop {
            if let Some((msg, used)) = decode_frame(&self.buf)? {
                self.buf.drain(..used);
                return Ok(Received::Message(msg));
            }
            if self.eof {
                return Ok(Received::Closed(match (&self.reset, self.buf.is_empty()) {
                    (Some((reason, cause)), _) => Lost {
                        reason: reason.clone(),
                        cause: cause.as_ref().map(same_error),
                    },
                    (None, true) => Lost::closed("control connection closed by the peer"),
                    (None, false) => {
                        Lost::closed("control connection closed in the middle of a message")
                    }
                }));
            }
            if self.drained {
                // The last read came back short: the socket had nothing more then. Let the
                // caller wait for readability (poll is level-triggered) instead of reading again.
                self.drained = false;
                return Ok(Received::Nothing);
            }
            // Read what has arrived, up to one maximal frame in all: whole credits and the
            // frames after them come in one system call.
            let start = self.buf.len();
            let want = FRAME_HEADER_LEN + MAX_FRAME_BODY as usize - start;
            self.buf.resize(start + want, 0);
            match self.stream.read(&mut self.buf[start..]) {
                Ok(0) => {
                    self.buf.truncate(start);
                    self.eof = true;
                }
                Ok(n) => {
                    self.buf.truncate(start + n);
                    self.drained = n < want;
                }
                Err(e) => {
                    self.buf.truncate(start);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return Ok(Received::Nothing),
                        io::ErrorKind::Interrupted => {}
                        _ => {
                            self.eof = true;
                            match peer_gone(e) {
                                Ok(lost) => self.reset = Some((lost.reason, lost.cause)),
                                Err(other) => return Err(other),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Waits for the next message or the close until `deadline`; [`Received::Nothing`] when
    /// the deadline passes first.
    pub(crate) fn recv_until(&mut self, deadline: Instant) -> Result<Received> {
        loop {
            match self.try_recv()? {
                Received::Nothing => {}
                other => return Ok(other),
            }
            let Some(left) = remaining(deadline) else {
                return Ok(Received::Nothing);
            };
            wait_any([Interest::read(self.stream.as_fd())], left)?;
        }
    }

    /// Tells the peer we will send nothing more (TCP FIN), keeping the read side open.
    pub(crate) fn shutdown_write(&self) {
        // Failing here only means the connection is already gone, which the reader sees.
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Whether the peer has closed (or reset) the connection, looking without blocking and
    /// without taking anything it sent.
    pub(crate) fn peer_gone(&self) -> bool {
        if self.eof || self.reset.is_some() {
            return true;
        }
        match self.stream.peek(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }

    /// Sends a Reject (best effort), then half-closes.
    pub(crate) fn reject(&mut self, reason: &str) {
        if let Err(e) = self.send(&Message::reject(reason)) {
            log::debug!(
                "could not deliver Reject to {}: {}",
                self.peer,
                Error::from(e)
            );
        }
        self.shutdown_write();
    }
}

/// What reading the control channel found.
#[derive(Debug)]
pub(crate) enum Received {
    /// A whole message.
    Message(Message),
    /// Nothing yet (wait for readability).
    Nothing,
    /// The peer closed or reset the connection; nothing more will arrive.
    Closed(Lost),
}

/// How the control connection ended: the words for [`Error::PeerLost`] and the socket error
/// behind them, which the session core turns into that error with its count.
#[derive(Debug)]
pub(crate) struct Lost {
    /// What was observed.
    pub(crate) reason: String,
    /// The socket error that showed it (none for a plain close).
    pub(crate) cause: Option<io::Error>,
}

impl Lost {
    /// A close without a socket error.
    pub(crate) fn closed(reason: &str) -> Self {
        Self {
            reason: reason.to_owned(),
            cause: None,
        }
    }

    /// The error the loss means, with `messages` transferred before it.
    pub(crate) fn into_error(self, messages: u64) -> Error {
        Error::PeerLost {
            reason: self.reason,
            messages,
            cause: self.cause,
        }
    }
}

/// The same socket error again (an `io::Error` cannot be cloned; its kind and OS code can).
fn same_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Why [`ControlChannel::send`] failed: the peer is gone (the session core gives the loss its
/// count), or the socket failed in a way that says nothing about the peer.
#[derive(Debug)]
pub(crate) enum SendFailed {
    /// The connection closed, reset, timed out or stalled: the peer is gone.
    PeerGone(Lost),
    /// Anything else.
    Io(Error),
}

impl From<SendFailed> for Error {
    /// A loss outside a session's count (a handshake's): zero messages.
    fn from(e: SendFailed) -> Error {
        match e {
            SendFailed::PeerGone(lost) => lost.into_error(0),
            SendFailed::Io(e) => e,
        }
    }
}

/// A socket error that means the peer is gone, as a [`Lost`] keeping it as the cause; any
/// other socket error as [`Error::ControlIo`].
fn peer_gone(e: io::Error) -> std::result::Result<Lost, Error> {
    let reason = match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => "control connection reset",
        io::ErrorKind::TimedOut => "control connection timed out, keepalive got no answer",
        // The kernel gave up on the peer's host while retransmitting or probing (its link went
        // down, its neighbour entry failed): a vanished peer as much as a timeout is.
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            "control connection: the peer's host became unreachable"
        }
        _ => return Err(Error::ControlIo(e)),
    };
    Ok(Lost {
        reason: reason.to_owned(),
        cause: Some(e),
    })
}
