//! [`RdmaSrc`]: the receiving end, a thin driver of [`ReceiverCore`].
//!
//! The core decides what to deliver, when to announce credits and how long to wait; this
//! module polls the transport only when nothing is ready to deliver, reads the control channel
//! only when a wait said it is readable, and stops watching a descriptor at end of file.

use std::net::SocketAddr;
use std::time::Instant;

use crate::busy_poll::{BusyPoll, Spin};
use crate::config::Config;
use crate::proto::{Message, Role};
use crate::session::{Session, SessionInfo};
use crate::session_core::receiving::{ReceiverCore, RecvStep};
use crate::transport::Completion;
use crate::{Error, Result};

/// Receives messages from one [`crate::RdmaSink`] into `credits` registered slots.
///
/// The slice returned by [`RdmaSrc::recv`] points into a receive slot and stays valid until
/// the next `recv`, which hands the slot back to the transport and returns its credit.
#[derive(Debug)]
pub struct RdmaSrc {
    session: Session,
    core: ReceiverCore,
    completions: Vec<Completion>,
    /// A wait said the control channel is readable (or we have not looked yet).
    control_readable: bool,
}

impl RdmaSrc {
    /// Connects to a server at `addr` and sets up a session in which we receive.
    ///
    /// # Errors
    /// Connecting, the handshake or the transport setup failed, or the server refused us.
    pub fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        Self::from_session(Session::connect(addr, Role::Receiver, config)?)
    }

    /// Wraps an established session whose local role is [`Role::Receiver`].
    pub(crate) fn from_session(session: Session) -> Result<Self> {
        if session.info.local.role != Role::Receiver {
            return Err(Error::Internal(
                "RdmaSrc needs a session with the receiver role".to_owned(),
            ));
        }
        let slots = u32::try_from(session.transport.slot_count())
            .map_err(|_| Error::Internal("more slots than a u32 counts".to_owned()))?;
        let core = ReceiverCore::new(slots, session.config.idle_timeout, Instant::now());
        let completions = Vec::with_capacity(session.transport.slot_count() + 16);
        Ok(Self {
            session,
            core,
            completions,
            control_readable: true,
        })
    }

    /// What was chosen and negotiated.
    pub fn info(&self) -> &SessionInfo {
        &self.session.info
    }

    /// Messages delivered to the application so far.
    pub fn received(&self) -> u64 {
        self.core.delivered()
    }

    /// Payload bytes delivered so far.
    pub fn bytes_received(&self) -> u64 {
        self.core.bytes()
    }

    /// Returns the next message, `Ok(None)` at end of stream (after the sender's Finish and
    /// every message it counted), or an error. The previous message's slot is released first.
    ///
    /// # Errors
    /// [`Error::PeerLost`] (with the number of messages that arrived) when the sender vanishes
    /// without Finish; [`Error::Rejected`] when it aborts; [`Error::Protocol`] when it breaks
    /// the protocol (nothing past its Finish count is ever delivered);
    /// [`Error::Interrupted`] when the stop flag is set while waiting (the session stays
    /// usable); [`Error::Closed`] after an earlier error.
    pub fn recv(&mut self) -> Result<Option<&[u8]>> {
        if self.core.is_ended() {
            return Ok(None);
        }
        if !self.core.is_open() {
            return Err(Error::Closed);
        }
        match self.next_message() {
            Ok(Some((slot, len))) => Ok(Some(self.session.transport.recv_buf(slot, len))),
            Ok(None) => {
                self.session.control.shutdown_write();
                self.session.transport.close();
                Ok(None)
            }
            Err(e) => {
                match &e {
                    Error::Interrupted => {}
                    Error::PeerLost { .. } | Error::Rejected(_) | Error::Closed => {
                        self.core.fail();
                        self.session.transport.close();
                    }
                    Error::Protocol(v) => self.abort_inner(&format!("protocol violation: {v}")),
                    other => self.abort_inner(&format!("the receiver failed: {other}")),
                }
                Err(e)
            }
        }
    }

    /// Aborts the session, telling the sender why (it sees [`Error::Rejected`]).
    pub fn abort(mut self, reason: &str) {
        self.abort_inner(reason);
    }

    /// Aborts the session like [`RdmaSrc::abort`] but keeps the object, and with it the memory
    /// of the slice the last `recv` returned, until it is dropped; later calls return
    /// [`Error::Closed`]. For bindings (Python) in which a view of the last message may
    /// outlive the session.
    pub fn abort_in_place(&mut self, reason: &str) {
        self.abort_inner(reason);
    }

    fn abort_inner(&mut self, reason: &str) {
        if self.core.is_open() {
            self.core.fail();
            self.session.control.reject(reason);
            self.session.transport.close();
        }
    }

    fn next_message(&mut self) -> Result<Option<(usize, usize)>> {
        if let Some(slot) = self.core.release()? {
            if let Err(e) = self.session.transport.post_recv(slot) {
                let arrived = self.core.arrived();
                return Err(self.session.explain_transport_error(e, arrived));
            }
            self.announce()?;
        }
        let mut polled = false;
        let mut busy = BusyPoll::new(self.session.config.busy_poll);
        // One clock reading per call while nothing blocks: a poll takes no time worth counting
        // against the core's deadlines, and a clock read is a system call on some machines.
        let mut now = Instant::now();
        loop {
            match self.core.next(now)? {
                RecvStep::Deliver { slot, len } => return Ok(Some((slot, len))),
                RecvStep::End => return Ok(None),
                RecvStep::Wait { until } => {
                    if !polled {
                        // Nothing buffered: look at the transport (and the control channel if
                        // it may have news) before sleeping.
                        polled = true;
                        self.progress(now)?;
                        continue;
                    }
                    polled = false;
                    match busy.next_round() {
                        Spin::Again => continue,
                        Spin::AgainChecked(checked) => {
                            // Now and then, the control channel too.
                            now = checked;
                            self.control_readable = true;
                            continue;
                        }
                        Spin::Sleep => {}
                    }
                    self.control_readable = self.session.wait(
                        until,
                        !self.core.control_closed(),
                        !self.core.data_closed(),
                        true,
                    )?;
                    now = Instant::now();
                }
            }
        }
    }

    /// Tells the sender what was released, when the core says it is time.
    fn announce(&mut self) -> Result<()> {
        let before = self.core.announced();
        let Some(released) = self.core.credit_due() else {
            return Ok(());
        };
        if self.session.transport.inband_credits() {
            let count = usize::try_from(released - before).unwrap_or(usize::MAX);
            if let Err(e) = self.session.transport.post_credits(count) {
                let arrived = self.core.arrived();
                return Err(self.session.explain_transport_error(e, arrived));
            }
            return Ok(());
        }
        match self.session.control.send(&Message::Credit { released }) {
            Ok(()) => Ok(()),
            Err(Error::PeerLost { reason, .. }) => Err(self.rejected_or_lost(reason)),
            Err(e) => Err(e),
        }
    }

    /// The sender closed the control connection while we wrote to it: a sender that aborts
    /// sends Reject first, and its words may still be waiting to be read.
    fn rejected_or_lost(&mut self, reason: String) -> Error {
        while let Ok(Some(msg)) = self.session.control.try_recv() {
            if let Message::Reject { reason } = msg {
                return Error::Rejected(reason);
            }
        }
        Error::PeerLost {
            reason,
            messages: self.core.arrived(),
        }
    }

    /// Feeds arrivals, the data path's close and control messages to the core.
    fn progress(&mut self, now: Instant) -> Result<()> {
        self.completions.clear();
        let polled = if self.core.data_closed() {
            Ok(())
        } else {
            self.session.transport.poll(&mut self.completions)
        };
        for i in 0..self.completions.len() {
            let Completion::Recv { slot, len } = self.completions[i] else {
                return Err(Error::Internal(
                    "send or credit completion on the receiving side".to_owned(),
                ));
            };
            self.core.on_arrival(slot, len, now)?;
        }
        match polled {
            Ok(()) => {}
            Err(Error::TransportClosed { .. }) => self.core.on_data_closed(now),
            Err(e) => {
                let arrived = self.core.arrived();
                return Err(self.session.explain_transport_error(e, arrived));
            }
        }
        if self.control_readable {
            self.read_control()?;
        }
        Ok(())
    }

    /// Feeds every control message available now to the core.
    fn read_control(&mut self) -> Result<()> {
        while !self.core.control_closed() {
            match self.session.control.try_recv() {
                Ok(Some(msg)) => {
                    let finish_was_known = self.core.finish_known();
                    self.core.on_control(msg)?;
                    if self.core.finish_known() && !finish_was_known {
                        // Nothing more to tell the sender: let it go (once, at Finish).
                        self.session.control.shutdown_write();
                    }
                }
                Ok(None) => break,
                Err(Error::PeerLost { reason, .. }) => self.core.on_control_closed(&reason)?,
                Err(e) => return Err(e),
            }
        }
        self.control_readable = false;
        Ok(())
    }
}

impl Drop for RdmaSrc {
    fn drop(&mut self) {
        self.abort_inner("the receiver closed before the end of the stream");
    }
}
