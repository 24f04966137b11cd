//! [`RdmaSink`]: the sending end.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::proto::{Message, Role, SendWindow};
use crate::session::{Session, SessionInfo};
use crate::transport::Completion;
use crate::{Error, Result};

/// How long `finish` waits for the receiver to acknowledge end of stream.
const FINISH_LINGER: Duration = Duration::from_secs(10);

/// Sends messages to one [`crate::RdmaSrc`], blocking when the receiver has no free slot.
///
/// `send` copies the message into a registered staging slot, so the caller's buffer may be
/// reused as soon as it returns. End the stream with [`RdmaSink::finish`]; dropping a sink
/// without it aborts the session, which the receiver sees as an error, never as end of stream.
#[derive(Debug)]
pub struct RdmaSink {
    session: Session,
    window: SendWindow,
    free_staging: Vec<usize>,
    completions: Vec<Completion>,
    bytes: u64,
    done: bool,
}

impl RdmaSink {
    /// Connects to a server at `addr` and sets up a session in which we send.
    pub fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        Self::from_session(Session::connect(addr, Role::Sender, config)?)
    }

    /// Wraps an established session whose local role is [`Role::Sender`].
    pub fn from_session(session: Session) -> Result<Self> {
        if session.info.local.role != Role::Sender {
            return Err(Error::InvalidConfig(
                "RdmaSink needs a session with the sender role".to_owned(),
            ));
        }
        let window = SendWindow::new(u32::from(session.info.peer.credits));
        let free_staging = (0..session.transport.slot_count()).rev().collect();
        Ok(Self {
            session,
            window,
            free_staging,
            completions: Vec::new(),
            bytes: 0,
            done: false,
        })
    }

    /// What was chosen and negotiated.
    pub fn info(&self) -> &SessionInfo {
        &self.session.info
    }

    /// The largest message [`RdmaSink::send`] accepts.
    pub fn max_message_size(&self) -> usize {
        self.session.info.max_msg_size() as usize
    }

    /// Messages sent so far.
    pub fn sent(&self) -> u64 {
        self.window.sent()
    }

    /// Payload bytes sent so far.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes
    }

    /// Sends one message (zero-length is fine). Blocks until a credit and a staging slot are
    /// free; returns once `data` has been copied, so it may be reused at once.
    ///
    /// # Errors
    /// [`Error::MessageTooLarge`] before anything is sent; [`Error::Rejected`] or
    /// [`Error::PeerLost`] when the receiver ends the session; [`Error::Interrupted`] when the
    /// stop flag is set while waiting.
    pub fn send(&mut self, data: &[u8]) -> Result<()> {
        if self.done {
            return Err(Error::Closed);
        }
        let max = self.max_message_size();
        if data.len() > max {
            return Err(Error::MessageTooLarge {
                len: data.len(),
                max,
            });
        }
        self.send_inner(data).inspect_err(|e| self.fail(e))
    }

    fn send_inner(&mut self, data: &[u8]) -> Result<()> {
        loop {
            self.progress()?;
            if self.window.available() > 0 && !self.free_staging.is_empty() {
                break;
            }
            self.session.wait(true)?;
        }
        let (Some(_seq), Some(slot)) = (self.window.try_take(), self.free_staging.pop()) else {
            return Err(Error::Protocol("credit accounting out of step".to_owned()));
        };
        self.session.transport.send_buf(slot)[..data.len()].copy_from_slice(data);
        if let Err(e) = self.session.transport.post_send(slot, data.len()) {
            return Err(self.explain(e));
        }
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// After an error: an interruption leaves the session usable; the peer's end (loss or
    /// Reject) closes it; any local failure is reported to the peer before closing.
    fn fail(&mut self, e: &Error) {
        match e {
            Error::Interrupted => {}
            Error::PeerLost { .. } | Error::Rejected(_) => {
                self.done = true;
                self.session.transport.close();
            }
            other => self.abort_inner(&format!("the sender failed: {other}")),
        }
    }

    /// Ends the stream: waits for every send to complete, sends Finish{count}, and waits (at
    /// most a few seconds) for the receiver to acknowledge by closing. Returns the count.
    /// It does not honour the stop flag: it is what a Ctrl-C handler calls.
    pub fn finish(mut self) -> Result<u64> {
        if self.done {
            return Err(Error::Closed);
        }
        let deadline = Instant::now() + FINISH_LINGER;
        while self.free_staging.len() < self.session.transport.slot_count() {
            self.progress()?;
            if Instant::now() > deadline {
                return Err(Error::PeerLost {
                    reason: "sends did not complete within 10 s".to_owned(),
                    messages: self.window.released(),
                });
            }
            if self.free_staging.len() < self.session.transport.slot_count() {
                self.session.wait(false)?;
            }
        }
        let count = self.window.sent();
        self.session.control.send(&Message::Finish { count })?;
        self.done = true;
        // The receiver half-closes after reading Finish; Credits may still arrive before that.
        loop {
            match self.session.control.try_recv() {
                Ok(Some(Message::Credit { .. })) => continue,
                Ok(Some(Message::Reject { reason })) => return Err(Error::Rejected(reason)),
                Ok(Some(other)) => {
                    return Err(Error::Protocol(format!(
                        "unexpected {} after Finish",
                        other.name()
                    )))
                }
                Ok(None) => {}
                Err(Error::PeerLost { .. }) => break,
                Err(e) => return Err(e),
            }
            if Instant::now() > deadline {
                log::warn!("the receiver did not acknowledge end of stream within 10 s");
                break;
            }
            self.session.wait(false)?;
        }
        self.session.transport.close();
        Ok(count)
    }

    /// Aborts the session, telling the receiver why (it sees [`Error::Rejected`]).
    pub fn abort(mut self, reason: &str) {
        self.abort_inner(reason);
    }

    fn abort_inner(&mut self, reason: &str) {
        if !self.done {
            self.done = true;
            self.session.control.reject(reason);
            self.session.transport.close();
        }
    }

    /// Collects completions and control messages without blocking.
    fn progress(&mut self) -> Result<()> {
        self.completions.clear();
        let polled = self.session.transport.poll(&mut self.completions);
        for i in 0..self.completions.len() {
            match self.completions[i] {
                Completion::Send { slot } => self.free_staging.push(slot),
                Completion::Credit => {
                    let released = self.window.released() + 1;
                    self.window
                        .on_credit(released)
                        .map_err(|e| Error::Protocol(e.to_string()))?;
                }
                Completion::Recv { .. } => {
                    return Err(Error::Protocol(
                        "receive completion on the sending side".to_owned(),
                    ))
                }
            }
        }
        loop {
            match self.session.control.try_recv() {
                Ok(Some(Message::Credit { released })) => {
                    self.window
                        .on_credit(released)
                        .map_err(|e| Error::Protocol(e.to_string()))?;
                }
                Ok(Some(Message::Reject { reason })) => {
                    self.done = true;
                    return Err(Error::Rejected(reason));
                }
                Ok(Some(other)) => {
                    return Err(Error::Protocol(format!(
                        "unexpected {} from the receiver",
                        other.name()
                    )))
                }
                Ok(None) => break,
                Err(Error::PeerLost { reason, .. }) => {
                    self.done = true;
                    return Err(Error::PeerLost {
                        reason,
                        messages: self.window.released(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        if let Err(e) = polled {
            return Err(self.explain(e));
        }
        Ok(())
    }

    /// A closed data path usually means the receiver ended the session: look for its words on
    /// the control channel. Any other transport failure is ours to report at once (the
    /// receiver waits for our Reject to explain its side).
    fn explain(&mut self, e: Error) -> Error {
        match e {
            Error::TransportClosed { .. } => {
                let released = self.window.released();
                self.session.explain_transport_error(e, released)
            }
            other => other,
        }
    }
}

impl Drop for RdmaSink {
    fn drop(&mut self) {
        self.abort_inner("the sender closed without finishing the stream");
    }
}
