//! [`RdmaSink`]: the sending end, a thin driver of [`SenderCore`].
//!
//! The core decides; this module moves bytes. The control channel is read only when a wait
//! said it is readable or when the sender ran out of credit (the only time a credit on it is
//! needed), never once per message; the transport is polled only when a staging slot or a
//! credit is missing.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use crate::busy_poll::{BusyPoll, Spin};
use crate::config::Config;
use crate::proto::{Message, Role};
use crate::session::{Session, SessionInfo};
use crate::session_core::sending::{FinishStep, SenderCore};
use crate::transport::Completion;
use crate::{Error, Result};

/// Sends messages to one [`crate::RdmaSrc`], blocking when the receiver has no free slot.
///
/// `send` copies the message into a registered staging slot, so the caller's buffer may be
/// reused as soon as it returns. End the stream with [`RdmaSink::finish`]; dropping a sink
/// without it aborts the session, which the receiver sees as an error, never as end of stream.
#[derive(Debug)]
pub struct RdmaSink {
    session: Session,
    core: SenderCore,
    completions: Vec<Completion>,
    /// A wait said the control channel is readable (or we have not looked yet).
    control_readable: bool,
    bytes: u64,
}

impl RdmaSink {
    /// Connects to a server at `addr` and sets up a session in which we send.
    ///
    /// # Errors
    /// Connecting, the handshake or the transport setup failed, or the server refused us.
    pub fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        Self::from_session(Session::connect(addr, Role::Sender, config)?)
    }

    /// Wraps an established session whose local role is [`Role::Sender`].
    pub(crate) fn from_session(session: Session) -> Result<Self> {
        if session.info.local.role != Role::Sender {
            return Err(Error::Internal(
                "RdmaSink needs a session with the sender role".to_owned(),
            ));
        }
        let max = session.info.max_msg_size() as usize;
        if session.transport.slot_size() < max {
            return Err(Error::Internal(format!(
                "staging slots of {} bytes cannot carry the negotiated {max}-byte messages",
                session.transport.slot_size()
            )));
        }
        let core = SenderCore::new(
            u32::from(session.info.peer.credits),
            session.transport.slot_count(),
            session.config.idle_timeout,
            Instant::now(),
        );
        let completions = Vec::with_capacity(session.transport.slot_count() * 2 + 16);
        Ok(Self {
            session,
            core,
            completions,
            control_readable: true,
            bytes: 0,
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
        self.core.sent()
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
    /// [`Error::PeerLost`] when the receiver ends the session; [`Error::Protocol`] when it
    /// breaks the protocol; [`Error::Interrupted`] when the stop flag is set while waiting
    /// (the session stays usable); [`Error::Closed`] after the session ended.
    pub fn send(&mut self, data: &[u8]) -> Result<()> {
        if !self.core.is_open() {
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

    /// Sends one `len`-byte message that `fill` writes straight into the registered staging
    /// slot: no copy by the library. Use it when the application produces the message (encodes,
    /// reads a file, computes) rather than already holding it in a buffer of its own; then it
    /// saves one copy of the whole message, which matters for large messages on RDMA (a 64 KiB
    /// copy costs microseconds, about what the wire takes at 100 Gb/s). For data already in a
    /// buffer, [`RdmaSink::send`] is the same single copy. `fill` runs once a credit and a slot
    /// are free, and must fill the whole slice (it starts with the bytes of an earlier message).
    ///
    /// # Errors
    /// As for [`RdmaSink::send`].
    pub fn send_in_place(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        if !self.core.is_open() {
            return Err(Error::Closed);
        }
        let max = self.max_message_size();
        if len > max {
            return Err(Error::MessageTooLarge { len, max });
        }
        self.send_filled(len, fill).inspect_err(|e| self.fail(e))
    }

    fn send_inner(&mut self, data: &[u8]) -> Result<()> {
        self.send_filled(data.len(), |slot| slot.copy_from_slice(data))
    }

    /// Waits for a credit and a staging slot, lets `fill` write the message, posts it.
    fn send_filled(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut busy = BusyPoll::new(self.session.config.busy_poll);
        let (seq, slot) = loop {
            if let Some(taken) = self.core.try_take()? {
                break taken;
            }
            self.progress()?;
            if let Some(taken) = self.core.try_take()? {
                break taken;
            }
            if busy.next_round() != Spin::Sleep {
                continue;
            }
            let now = Instant::now();
            let until = self.core.wait_deadline(now)?;
            self.control_readable =
                self.session
                    .wait(until, !self.core.control_closed(), true, true)?;
        };
        // A fill that panics (and is caught by the application) sent nothing: its credit and
        // slot go back, so the count a later Finish announces stays exact.
        let buf = &mut self.session.transport.send_buf(slot)[..len];
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| fill(buf))) {
            self.core.give_back(seq, slot)?;
            std::panic::resume_unwind(panic);
        }
        if let Err(e) = self.session.transport.post_send(slot, len) {
            return Err(self.explain(e));
        }
        self.bytes += len as u64;
        Ok(())
    }

    /// After an error: an interruption leaves the session usable; the peer's end (loss or
    /// Reject) closes it; anything else is reported to the peer before closing.
    fn fail(&mut self, e: &Error) {
        match e {
            Error::Interrupted => {}
            Error::PeerLost { .. } | Error::Rejected(_) | Error::Closed => {
                self.core.fail();
                self.session.transport.close();
            }
            Error::Protocol(v) => self.abort_inner(&format!("protocol violation: {v}")),
            other => self.abort_inner(&format!("the sender failed: {other}")),
        }
    }

    /// Ends the stream: waits for every send to complete, sends Finish{count}, and waits (at
    /// most a few seconds) for the receiver to acknowledge by closing. Returns the count.
    /// It does not honour the stop flag: it is what a Ctrl-C handler calls.
    ///
    /// # Errors
    /// The receiver ended or lost the session before every send completed.
    pub fn finish(mut self) -> Result<u64> {
        let result = self.finish_inner();
        if let Err(e) = &result {
            self.fail(e);
        }
        self.session.transport.close();
        result
    }

    fn finish_inner(&mut self) -> Result<u64> {
        if !self.core.is_open() {
            return Err(Error::Closed);
        }
        loop {
            let now = Instant::now();
            match self.core.finish_step(now)? {
                FinishStep::Drain { until } => {
                    if let Err(e) = self.session.transport.flush_sends() {
                        return Err(self.explain(e));
                    }
                    self.progress()?;
                    if matches!(self.core.finish_step(now)?, FinishStep::Drain { .. }) {
                        self.control_readable = self.session.wait(
                            Some(until),
                            !self.core.control_closed(),
                            true,
                            false,
                        )?;
                    }
                }
                FinishStep::SendFinish { count } => {
                    self.session.control.send(&Message::Finish { count })?;
                    self.core.on_finish_sent(now);
                }
                FinishStep::Linger { until } => {
                    // The data path may be closed by now: only the control channel matters.
                    self.read_control()?;
                    if matches!(self.core.finish_step(now)?, FinishStep::Linger { .. }) {
                        self.control_readable = self.session.wait(
                            Some(until),
                            !self.core.control_closed(),
                            false,
                            false,
                        )?;
                    }
                }
                FinishStep::Done => return Ok(self.core.sent()),
            }
        }
    }

    /// Aborts the session, telling the receiver why (it sees [`Error::Rejected`]).
    pub fn abort(mut self, reason: &str) {
        self.abort_inner(reason);
    }

    /// Aborts the session like [`RdmaSink::abort`] but keeps the object (and its staging
    /// slots' memory) until it is dropped; later calls return [`Error::Closed`]. For bindings
    /// (Python) that lent a slot's memory to code that may still hold it.
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

    /// Collects transport completions, and control messages when the channel may have some
    /// or the sender needs a credit, without blocking.
    fn progress(&mut self) -> Result<()> {
        self.completions.clear();
        let polled = self.session.transport.poll(&mut self.completions);
        let mut now = None;
        for i in 0..self.completions.len() {
            match self.completions[i] {
                Completion::Send { slot } => self.core.on_send_complete(slot)?,
                Completion::Credit => {
                    let now = *now.get_or_insert_with(Instant::now);
                    self.core.on_inband_credit(now)?;
                }
                Completion::Recv { .. } => {
                    return Err(Error::Internal(
                        "receive completion on the sending side".to_owned(),
                    ))
                }
            }
        }
        // Out of credit, a Credit on the control channel is what we wait for, unless credits
        // travel in band (then the control channel is read only when a wait says so).
        let credit_on_control = !self.session.transport.inband_credits();
        if self.control_readable || (credit_on_control && self.core.out_of_credit()) {
            self.read_control()?;
        }
        if let Err(e) = polled {
            return Err(self.explain(e));
        }
        Ok(())
    }

    /// Feeds every control message available now to the core.
    fn read_control(&mut self) -> Result<()> {
        while !self.core.control_closed() {
            match self.session.control.try_recv() {
                Ok(Some(msg)) => self.core.on_control(msg, Instant::now())?,
                Ok(None) => break,
                Err(Error::PeerLost { reason, .. }) => self.core.on_control_closed(&reason)?,
                Err(e) => return Err(e),
            }
        }
        self.control_readable = false;
        Ok(())
    }

    /// A closed data path usually means the receiver ended the session: look for its words on
    /// the control channel. So may another transport failure: a receiver that ends the session
    /// rejects first and then tears its data path down, which an RDMA sender can see as a
    /// failed send (DOCA reports the peer's stopped context that way). For those the sender
    /// looks only briefly, since when the failure is its own the receiver waits for the
    /// sender's Reject to explain its side.
    fn explain(&mut self, e: Error) -> Error {
        let released = self.core.released();
        match e {
            Error::TransportClosed { .. } => self.session.explain_transport_error(e, released),
            other => self.session.explain_transport_error_within(
                other,
                released,
                OWN_FAILURE_EXPLAIN_WAIT,
            ),
        }
    }
}

/// How long a sender whose send failed looks for the receiver's Reject before reporting the
/// failure as its own (shorter than the receiver's wait for ours).
const OWN_FAILURE_EXPLAIN_WAIT: Duration = Duration::from_millis(200);

impl Drop for RdmaSink {
    fn drop(&mut self) {
        self.abort_inner("the sender closed without finishing the stream");
    }
}
