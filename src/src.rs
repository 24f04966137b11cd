//! [`RdmaSrc`]: the receiving end.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::proto::{Message, RecvWindow, Role};
use crate::session::{Session, SessionInfo};
use crate::transport::Completion;
use crate::{Error, Result};

/// After the data path closes, how long to wait for a Finish still in flight on the control
/// channel before declaring the peer lost.
const FINISH_GRACE: Duration = Duration::from_secs(2);

/// Receives messages from one [`crate::RdmaSink`] into `credits` registered slots.
///
/// The slice returned by [`RdmaSrc::recv`] points into a receive slot and stays valid until
/// the next `recv`, which hands the slot back to the transport and returns its credit.
#[derive(Debug)]
pub struct RdmaSrc {
    session: Session,
    window: RecvWindow,
    /// Arrived, not yet delivered: (slot, len).
    ready: VecDeque<(usize, usize)>,
    completions: Vec<Completion>,
    /// True while the application holds the last delivered message.
    holding: bool,
    delivered: u64,
    bytes: u64,
    finish: Option<u64>,
    data_closed: Option<Instant>,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Ended,
    Failed,
}

impl RdmaSrc {
    /// Connects to a server at `addr` and sets up a session in which we receive.
    pub fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        Self::from_session(Session::connect(addr, Role::Receiver, config)?)
    }

    /// Wraps an established session whose local role is [`Role::Receiver`].
    pub fn from_session(session: Session) -> Result<Self> {
        if session.info.local.role != Role::Receiver {
            return Err(Error::InvalidConfig(
                "RdmaSrc needs a session with the receiver role".to_owned(),
            ));
        }
        let window = RecvWindow::new(session.transport.slot_count() as u32);
        Ok(Self {
            session,
            window,
            ready: VecDeque::new(),
            completions: Vec::new(),
            holding: false,
            delivered: 0,
            bytes: 0,
            finish: None,
            data_closed: None,
            state: State::Open,
        })
    }

    /// What was chosen and negotiated.
    pub fn info(&self) -> &SessionInfo {
        &self.session.info
    }

    /// Messages delivered to the application so far.
    pub fn received(&self) -> u64 {
        self.delivered
    }

    /// Payload bytes delivered so far.
    pub fn bytes_received(&self) -> u64 {
        self.bytes
    }

    /// Returns the next message, `Ok(None)` at end of stream (after the sender's Finish and
    /// every message it counted), or an error. The previous message's slot is released first.
    ///
    /// # Errors
    /// [`Error::PeerLost`] (with the number of messages that arrived) when the sender vanishes
    /// without Finish; [`Error::Rejected`] when it aborts; [`Error::Interrupted`] when the
    /// stop flag is set while waiting.
    pub fn recv(&mut self) -> Result<Option<&[u8]>> {
        match self.state {
            State::Open => {}
            State::Ended => return Ok(None),
            State::Failed => return Err(Error::Closed),
        }
        let next = self.next_message().inspect_err(|e| match e {
            Error::Interrupted => {}
            Error::PeerLost { .. } | Error::Rejected(_) => {
                self.state = State::Failed;
                self.session.transport.close();
            }
            other => self.abort_inner(&format!("the receiver failed: {other}")),
        })?;
        match next {
            Some((slot, len)) => Ok(Some(self.session.transport.recv_buf(slot, len))),
            None => {
                self.state = State::Ended;
                self.session.control.shutdown_write();
                self.session.transport.close();
                Ok(None)
            }
        }
    }

    /// Aborts the session, telling the sender why (it sees [`Error::Rejected`]).
    pub fn abort(mut self, reason: &str) {
        self.abort_inner(reason);
    }

    fn abort_inner(&mut self, reason: &str) {
        if self.state == State::Open {
            self.state = State::Failed;
            self.session.control.reject(reason);
            self.session.transport.close();
        }
    }

    fn next_message(&mut self) -> Result<Option<(usize, usize)>> {
        if self.holding {
            self.holding = false;
            self.release_oldest()?;
        }
        loop {
            self.progress()?;
            if let Some((slot, len)) = self.ready.pop_front() {
                self.holding = true;
                self.delivered += 1;
                self.bytes += len as u64;
                return Ok(Some((slot, len)));
            }
            if let Some(count) = self.finish {
                if self.delivered == count {
                    return Ok(None);
                }
            }
            if let Some(since) = self.data_closed {
                let waited_out = since.elapsed() > FINISH_GRACE;
                if self.finish.is_some() || waited_out {
                    return Err(self.lost("the data path closed"));
                }
            }
            self.session.wait(true)?;
        }
    }

    /// Re-posts the oldest held slot, then returns its credit.
    fn release_oldest(&mut self) -> Result<()> {
        let seq = self
            .window
            .release_oldest()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let messages = self.window.arrived();
        if let Err(e) = self.session.transport.post_recv(self.window.slot_of(seq)) {
            return Err(self.session.explain_transport_error(e, messages));
        }
        // After Finish the sender needs no more credit (and may already be closing).
        if self.finish.is_none() && self.session.transport.inband_credits() {
            if let Err(e) = self.session.transport.post_credit() {
                return Err(self.session.explain_transport_error(e, messages));
            }
        } else if self.finish.is_none() {
            let released = self.window.released();
            match self.session.control.send(&Message::Credit { released }) {
                Ok(()) => {}
                Err(Error::PeerLost { reason, .. }) => {
                    return Err(Error::PeerLost {
                        reason,
                        messages: self.window.arrived(),
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn progress(&mut self) -> Result<()> {
        self.completions.clear();
        let polled = if self.data_closed.is_some() {
            Ok(())
        } else {
            self.session.transport.poll(&mut self.completions)
        };
        for i in 0..self.completions.len() {
            let Completion::Recv { slot, len } = self.completions[i] else {
                return Err(Error::Protocol(
                    "send or credit completion on the receiving side".to_owned(),
                ));
            };
            let seq = self
                .window
                .on_arrival()
                .map_err(|e| Error::Protocol(e.to_string()))?;
            if self.window.slot_of(seq) != slot {
                return Err(Error::Protocol(format!(
                    "message {seq} landed in slot {slot}, expected slot {}",
                    self.window.slot_of(seq)
                )));
            }
            self.ready.push_back((slot, len));
        }
        match polled {
            Ok(()) => {}
            Err(Error::TransportClosed { .. }) => self.data_closed = Some(Instant::now()),
            Err(e) => {
                let messages = self.window.arrived();
                return Err(self.session.explain_transport_error(e, messages));
            }
        }
        while self.finish.is_none() {
            match self.session.control.try_recv() {
                Ok(Some(Message::Finish { count })) => {
                    if count < self.window.arrived() {
                        return Err(Error::Protocol(format!(
                            "Finish says {count} messages but {} arrived",
                            self.window.arrived()
                        )));
                    }
                    self.finish = Some(count);
                    // Nothing more to tell the sender: let it go.
                    self.session.control.shutdown_write();
                }
                Ok(Some(Message::Reject { reason })) => return Err(Error::Rejected(reason)),
                Ok(Some(other)) => {
                    return Err(Error::Protocol(format!(
                        "unexpected {} from the sender",
                        other.name()
                    )))
                }
                Ok(None) => break,
                Err(Error::PeerLost { reason, .. }) => return Err(self.lost(&reason)),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn lost(&self, reason: &str) -> Error {
        let arrived = self.window.arrived();
        let reason = match self.finish {
            Some(count) => format!(
                "{reason} with {} of {count} messages still missing",
                count - arrived
            ),
            None => reason.to_owned(),
        };
        Error::PeerLost {
            reason,
            messages: arrived,
        }
    }
}

impl Drop for RdmaSrc {
    fn drop(&mut self) {
        self.abort_inner("the receiver closed before the end of the stream");
    }
}
