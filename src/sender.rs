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
use crate::checksum;
use crate::config::Config;
use crate::net::{Received, SendFailed};
use crate::proto::Counts;
use crate::proto::{Checksum, Message, Role};
use crate::session::readiness::Readiness;
use crate::session::resume::{ResumeCore, ResumeCounters};
use crate::session::{Flow, Patience, Paused, StopFlag, Watch};
use crate::session::{Session, SessionInfo};
use crate::session_core::lifecycle::{OldControl, Trigger};
use crate::session_core::sending::{FinishStep, SenderAction, SenderCore};
use crate::time::{earliest, Stamp};
use crate::transport::{SendEvent, SendPath, StagingSlot};
use crate::{Error, Result};

/// A sender that never waits looks for a due path retry (`--paths`) once in this many
/// messages.
const RETRY_LOOK_EVERY: u64 = 256;

/// What a send puts in its staging slot.
enum Content<'a, F> {
    /// The application's bytes, copied (`send`, `send_timeout`, `try_send`).
    Copy(&'a [u8]),
    /// `len` bytes the application's closure writes (`send_in_place`).
    Fill(usize, F),
}

/// The closure type of a [`Content::Copy`], which has none.
type NoFill = fn(&mut [u8]);

impl<F> Content<'_, F> {
    /// The message's length.
    fn len(&self) -> usize {
        match self {
            Content::Copy(data) => data.len(),
            Content::Fill(len, _) => *len,
        }
    }
}

/// Sends messages to one [`crate::RdmaSrc`], blocking when the receiver has no free slot.
///
/// `send` copies the message into a registered staging slot, so the caller's buffer may be
/// reused as soon as it returns. End the stream with [`RdmaSink::finish`]; dropping a sink
/// without it aborts the session, which the receiver sees as an error, never as end of stream.
#[derive(Debug)]
pub struct RdmaSink {
    session: Session<dyn SendPath>,
    core: SenderCore,
    events: Vec<SendEvent>,
    /// A wait said the control channel is readable (or we have not looked yet).
    control_readable: bool,
    bytes: u64,
    /// Time `send` spent waiting for a credit or a staging slot ([`RdmaSink::credit_wait`]).
    credit_wait: Duration,
    /// The check each message carries (agreed in the handshake).
    checksum: Checksum,
    /// A test build's fault: the message whose first byte is flipped after it was sealed
    /// ([`crate::config::TestFaults`]), so tests see the receiver's check catch it.
    corrupt: Option<u64>,
    /// The clock reading send completions and credits share between two waits.
    stamp: Stamp,
    /// Credits released when the last wait began (to re-stamp the core's last credit).
    released_at_wait: u64,
    /// Each staging slot's last message length on the wire (a resume sends it again).
    wire_lens: Vec<usize>,
    /// The descriptor an event loop waits on between `try_send` calls (`AsFd`).
    readiness: Readiness,
}

impl RdmaSink {
    /// Connects to a server at `addr` and sets up a session in which we send.
    ///
    /// # Errors
    /// Connecting, the handshake or the transport setup failed, or the server refused us.
    pub fn connect(addr: SocketAddr, config: &Config) -> Result<Self> {
        Self::from_session(Session::connect(addr, config)?)
    }

    /// Wraps an established session in which we send.
    pub(crate) fn from_session(mut session: Session<dyn SendPath>) -> Result<Self> {
        let max = session.info.max_msg_size() as usize;
        if session.transport.slot_size() < max {
            return Err(Error::Internal(format!(
                "staging slots of {} bytes cannot carry the negotiated {max}-byte messages",
                session.transport.slot_size()
            )));
        }
        let staging = std::mem::take(&mut session.slots);
        let events = Vec::with_capacity(staging.len() * 2 + 16);
        let wire_lens = vec![0; staging.len()];
        let mut core = SenderCore::new(
            u32::from(session.info.peer.credits),
            staging,
            session.transport.credit_route(),
            session.config.idle_timeout,
            Instant::now(),
        );
        if session.resumes() {
            core = core.keeping_messages();
        }
        Ok(Self {
            wire_lens,
            core,
            events,
            control_readable: true,
            stamp: Stamp::default(),
            released_at_wait: 0,
            bytes: 0,
            credit_wait: Duration::ZERO,
            checksum: session.info.checksum(),
            corrupt: session.config.test_faults.corrupt_message,
            readiness: Readiness::new()?,
            session,
        })
    }

    /// Changes [`Config::busy_poll`] for this session from the next call on: how long a wait
    /// polls the transport before it sleeps (`None`: sleep at once). For an application whose
    /// phases differ (a latency-bound exchange after a bulk transfer, say); `bench --server`
    /// takes its client's setting this way.
    pub fn set_busy_poll(&mut self, busy_poll: Option<Duration>) {
        self.session.config.busy_poll = busy_poll;
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

    /// How long `send` has waited so far, in this session, for the receiver to free a slot: a
    /// credit, or a staging slot whose earlier message was still on its way (busy polling
    /// included). Large next to the session's length means the receiver holds the sender back.
    /// The clock is read only when a send has to sleep (or, busy polling, at the polling's own
    /// clock checks), so a wait that the first polls end is not counted: it lasts microseconds.
    pub fn credit_wait(&self) -> Duration {
        self.credit_wait
    }

    /// How many times the session was resumed after a break, and the messages sent again then
    /// (`--resume-timeout`, [`Config::resume_timeout`]): a handle that stays readable after
    /// the session ended (all zeros when the session does not resume).
    pub fn resume_counters(&self) -> ResumeCounters {
        self.session.resume_counters()
    }

    /// The bytes each path sent (`--paths`, [`Config::paths`]; path 0 first, as in
    /// [`SessionInfo::extra_paths`](crate::SessionInfo::extra_paths)): a handle that stays
    /// readable after the session ended. Empty when the data path is one queue pair.
    pub fn path_counters(&self) -> crate::PathCounters {
        self.session.transport.path_counters()
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
        self.send_within(Patience::Unbounded, Content::<NoFill>::Copy(data))
    }

    /// Like [`RdmaSink::send`], waiting at most `timeout` for a credit and a staging slot.
    ///
    /// # Errors
    /// [`Error::DeadlinePassed`] when none was free in time: nothing was sent, the session
    /// stays usable; otherwise as for [`RdmaSink::send`].
    pub fn send_timeout(&mut self, data: &[u8], timeout: Duration) -> Result<()> {
        self.send_within(Patience::after(timeout), Content::<NoFill>::Copy(data))
    }

    /// Like [`RdmaSink::send`], without waiting: sends `data` if a credit and a staging slot
    /// are free now.
    ///
    /// On tcp a message the kernel did not take whole is finished by the later calls on this
    /// sink; one that has nothing more to send calls [`RdmaSink::try_flush`] until it says
    /// `Ok` (the blocking calls do this themselves).
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when no credit or slot is free: nothing was sent, the session
    /// stays usable, and the readiness descriptor is armed (wait until it is readable, then
    /// call again); otherwise as for [`RdmaSink::send`]. Repairing a break of a resumable
    /// session waits inside the call (up to its resume timeout).
    pub fn try_send(&mut self, data: &[u8]) -> Result<()> {
        self.send_within(Patience::Never, Content::<NoFill>::Copy(data))
    }

    /// Hands on what a [`RdmaSink::try_send`] left queued (tcp only: bytes the kernel did not
    /// take yet; on RDMA the NIC needs no help and this returns `Ok` at once).
    ///
    /// # Errors
    /// [`Error::WouldBlock`] while bytes remain (the readiness descriptor is armed for the
    /// socket's writability); the session's failures as for [`RdmaSink::send`].
    pub fn try_flush(&mut self) -> Result<()> {
        if !self.core.is_open() {
            return Err(Error::Closed);
        }
        self.after_readiness_wait();
        let result = loop {
            match self.push_output(Patience::Never) {
                Ok(Flow::Done(())) => break Ok(true),
                Ok(Flow::NotReady) => break Ok(false),
                Ok(Flow::Resume(planned)) => {
                    if let Err(e) = self.resume_or(planned.into()) {
                        break Err(e);
                    }
                }
                Err(e) => {
                    if let Err(e) = self.resume_or(Trigger::Failed(e)) {
                        break Err(e);
                    }
                }
            }
        };
        match self.after(result)? {
            true => Ok(()),
            false => Err(Error::WouldBlock),
        }
    }

    /// Whether a message's bytes wait for this process to hand them on (tcp only; see
    /// [`RdmaSink::try_flush`]).
    pub fn has_queued_output(&self) -> bool {
        self.session.transport.output_queued()
    }

    /// After a call that armed the readiness descriptor: the application waited on it.
    fn after_readiness_wait(&mut self) {
        if self.session.after_readiness_wait(&mut self.readiness) {
            self.control_readable = true;
        }
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
        self.send_within(Patience::Unbounded, Content::Fill(len, fill))
    }

    /// [`RdmaSink::send_in_place`], waiting for a credit and a slot as `patience` allows.
    fn send_within<F: FnOnce(&mut [u8])>(
        &mut self,
        patience: Patience,
        content: Content<'_, F>,
    ) -> Result<()> {
        let len = content.len();
        if !self.core.is_open() {
            return Err(Error::Closed);
        }
        let max = self.max_message_size();
        if len > max {
            return Err(Error::MessageTooLarge { len, max });
        }
        self.after_readiness_wait();
        let result = self.send_filled(patience, content);
        match self.after(result)? {
            Some(()) => Ok(()),
            None => Err(patience.gave_up()),
        }
    }

    /// Waits for a credit and a staging slot (as `patience` allows: `None` when it ran out,
    /// nothing sent), puts the message in the slot, posts it. A break the session resumes
    /// from is repaired on the way: before the message was taken, it waits again; after, the
    /// message is the resume's to send again if it did not arrive.
    fn send_filled<F: FnOnce(&mut [u8])>(
        &mut self,
        patience: Patience,
        content: Content<'_, F>,
    ) -> Result<Option<()>> {
        let mut stalled_since = None;
        let taken = loop {
            let taken = self.take_slot(patience, &mut stalled_since);
            if let Some(since) = stalled_since.take() {
                self.credit_wait += since.elapsed();
            }
            match taken {
                Ok(Flow::Done(taken)) => break taken,
                Ok(Flow::NotReady) => return Ok(None),
                Ok(Flow::Resume(planned)) => self.resume_or(planned.into())?,
                Err(e) => self.resume_or(Trigger::Failed(e))?,
            }
        };
        let (seq, mut slot) = taken;
        let index = slot.index();
        let len = content.len();
        let posted = match content {
            // A kept message is read again only by a resume: the transport may write its slot
            // around the cache (`SendPath::post_send_kept`). Not the message a test build
            // corrupts after its checksum, which goes the common way.
            Content::Copy(data) if self.core.keeps_messages() && self.corrupt != Some(seq) => {
                let trailer = checksum::trailer(self.checksum, data);
                self.note_posted(index, len, len + trailer.bytes().len());
                self.session
                    .transport
                    .post_send_kept(slot, data, trailer.bytes())
            }
            content => {
                // One call of `staging` a message: a striped transport picks the lane there.
                let buf = self.session.transport.staging(&mut slot);
                let filled = match content {
                    Content::Copy(data) => {
                        crate::message_copy::copy_message(&mut buf[..len], data);
                        Ok(())
                    }
                    // A fill that panics (and is caught by the application) sent nothing: its
                    // credit and slot go back, so the count a later Finish announces stays
                    // exact.
                    Content::Fill(_, fill) => {
                        std::panic::catch_unwind(AssertUnwindSafe(|| fill(&mut buf[..len])))
                    }
                };
                if let Err(panic) = filled {
                    self.core.give_back(seq, slot)?;
                    std::panic::resume_unwind(panic);
                }
                let wire_len = checksum::seal(self.checksum, buf, len);
                if self.corrupt == Some(seq) && len > 0 {
                    buf[0] ^= 1;
                }
                self.note_posted(index, len, wire_len);
                self.session.transport.post_send(slot, wire_len)
            }
        };
        if let Err(e) = posted {
            let e = self.explain(e);
            self.resume_or(Trigger::Failed(e))?;
        }
        let patience = patience.once_taken();
        loop {
            match self.push_output(patience) {
                // Not ready: the rest is handed on by later calls (`try_flush`).
                Ok(Flow::Done(()) | Flow::NotReady) => return Ok(Some(())),
                Ok(Flow::Resume(planned)) => self.resume_or(planned.into())?,
                Err(e) => self.resume_or(Trigger::Failed(e))?,
            }
        }
    }

    /// Counts a message about to be posted from slot `index`: `len` bytes of the application's,
    /// `wire_len` on the wire (what a resume sends again).
    fn note_posted(&mut self, index: usize, len: usize, wire_len: usize) {
        if let Some(kept) = self.wire_lens.get_mut(index) {
            *kept = wire_len;
        }
        self.bytes += len as u64;
    }

    /// After `trigger`: when the lifecycle core resumes the session, sends again what had not
    /// arrived (`Ok`: carry on); otherwise the error the session ends with.
    fn resume_or(&mut self, mut trigger: Trigger) -> Result<()> {
        loop {
            let Some(outcome) = self.session.resume(trigger, &mut self.core)? else {
                return Ok(());
            };
            let plan = outcome
                .resumed
                .plan
                .ok_or_else(|| Error::Internal("a sender resumed without a plan".into()))?;
            let again = self.core.resume(&plan, Instant::now())?;
            self.control_readable = true;
            self.readiness.forget();
            match self.post_again(again) {
                Ok(()) => return Ok(()),
                Err(next) => trigger = Trigger::Failed(next),
            }
        }
    }

    /// Posts the messages a resume sends again, in order, from their own slots.
    /// When one fails, the ones not posted go back to the core with the transport's (the next
    /// attempt sends them again).
    fn post_again(&mut self, again: Vec<(u64, StagingSlot)>) -> Result<()> {
        let mut again = again.into_iter();
        for (_, slot) in again.by_ref() {
            let len = self.wire_lens.get(slot.index()).copied().unwrap_or(0);
            if let Err(e) = self.session.transport.post_send(slot, len) {
                for (_, unposted) in again {
                    self.core.on_reclaimed(unposted)?;
                }
                return Err(self.explain(e));
            }
        }
        Ok(())
    }

    /// Takes a credit and a staging slot, waiting for them; `stalled_since` is when it first
    /// had to wait (the clock is read only then, never when both are free at once).
    fn take_slot(
        &mut self,
        patience: Patience,
        stalled_since: &mut Option<Instant>,
    ) -> Result<Flow<(u64, StagingSlot)>> {
        let mut busy = BusyPoll::new(
            self.session.config.busy_poll,
            self.session.transport.device_work(),
        );
        loop {
            // A sender that never waits looks for a path's retry every so many messages (the
            // clock is read then only while a path is left out).
            if self.core.sent().is_multiple_of(RETRY_LOOK_EVERY)
                && self.session.paths_retry_at().is_some()
            {
                if let Some(planned) = self.session.paths_retry_due(Instant::now()) {
                    return Ok(Flow::Resume(planned));
                }
            }
            if let Some(taken) = self.core.try_take()? {
                return Ok(Flow::Done(taken));
            }
            self.progress()?;
            if let Some(taken) = self.core.try_take()? {
                return Ok(Flow::Done(taken));
            }
            // The clock is read only where polling reads it anyway, or before a sleep.
            match patience.next_spin(&mut busy) {
                Spin::Again | Spin::YieldThenAgain => continue,
                Spin::AgainChecked(now) | Spin::AgainLookAround(now) => {
                    stalled_since.get_or_insert(now);
                    if !self.spin_must_end(patience, now) {
                        continue;
                    }
                }
                Spin::Sleep => {}
            }
            let now = self.now_for_wait();
            stalled_since.get_or_insert(now);
            self.core.handle_timeout(now)?;
            if let Some(planned) = self.session.paths_retry_due(now) {
                return Ok(Flow::Resume(planned));
            }
            let until = self.next_deadline();
            match self.wait(patience, now, until, StopFlag::Honoured)? {
                Flow::Done(()) => {}
                Flow::Resume(planned) => return Ok(Flow::Resume(planned)),
                Flow::NotReady => return Ok(Flow::NotReady),
            }
        }
    }

    /// Hands the rest of the message just posted on, where the data path needs this process
    /// for it ([`SendPath::output_queued`]), waiting as `patience` allows. The message counts
    /// as sent already, so the stop flag does not interrupt this (the caller would send it
    /// again); the idle timeout, a closed control connection or a failed write end it.
    fn push_output(&mut self, patience: Patience) -> Result<Flow<()>> {
        let mut idle_since = None;
        while self.session.transport.output_queued() {
            self.progress()?;
            if !self.session.transport.output_queued() {
                break;
            }
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            let until = self
                .session
                .config
                .idle_timeout
                .map(|idle| crate::time::deadline_after(since, idle));
            if let Some(until) = until {
                if now >= until {
                    return Err(Error::IdleTimeout {
                        seconds: self
                            .session
                            .config
                            .idle_timeout
                            .unwrap_or_default()
                            .as_secs_f64(),
                        messages: self.core.released(),
                    });
                }
            }
            let watch = Watch {
                control: !self.core.control_closed(),
                data: true,
                stop: StopFlag::Ignored,
            };
            if let flow @ (Flow::Resume(_) | Flow::NotReady) =
                self.pause(patience, now, until, watch)?
            {
                return Ok(flow);
            }
        }
        Ok(Flow::Done(()))
    }

    /// The session's pause ([`Session::pause`](crate::session::Session)) toward `until`, with
    /// what it says of the control channel kept: `Done` when the caller goes on.
    fn pause(
        &mut self,
        patience: Patience,
        now: Instant,
        until: Option<Instant>,
        watch: Watch,
    ) -> Result<Flow<()>> {
        Ok(
            match self
                .session
                .pause(patience, &mut self.readiness, now, until, watch)?
            {
                Paused::Ready { control } => {
                    self.control_readable = control;
                    Flow::Done(())
                }
                Paused::Resume(planned) => Flow::Resume(planned),
                Paused::NotReady => Flow::NotReady,
            },
        )
    }

    /// The time before a wait; credits stamped with an older reading since the last wait count
    /// as released now ([`Stamp`]).
    fn now_for_wait(&mut self) -> Instant {
        let now = Instant::now();
        self.restamp(now);
        now
    }

    /// The earliest of the core's next deadline, the data path's next look
    /// ([`crate::transport::DataPath::poll_again_at`]) and a path's retry.
    fn next_deadline(&self) -> Option<Instant> {
        let data_path_at = self.session.transport.poll_again_at();
        earliest(
            self.core.poll_timeout(),
            earliest(self.session.paths_retry_at(), data_path_at),
        )
    }

    /// At a clock check of busy polling: whether to stop spinning and wait
    /// ([`Session::spin_must_end`](crate::session::Session)).
    fn spin_must_end(&mut self, patience: Patience, now: Instant) -> bool {
        // A long spin reads no other clock: stamps from before it would make the core's
        // deadlines look due (and end the spin for nothing).
        self.restamp(now);
        self.stamp.prime(now);
        let until = self.next_deadline();
        self.session.spin_must_end(patience, now, until)
    }

    /// Credits stamped with an older reading since the last wait (or clock check) count as
    /// released at `now`, a fresh reading ([`Stamp`]).
    fn restamp(&mut self, now: Instant) {
        if self.stamp.take() && self.core.released() != self.released_at_wait {
            self.core.restamp_last_credit(now);
        }
        self.released_at_wait = self.core.released();
    }

    /// Sleeps (or arms the readiness descriptor, as `patience` says) until the transport or
    /// the control channel may have news, or `until` (the core's next deadline, or a path's
    /// retry) (`stop`: whether the stop flag interrupts).
    fn wait(
        &mut self,
        patience: Patience,
        now: Instant,
        until: Option<Instant>,
        stop: StopFlag,
    ) -> Result<Flow<()>> {
        // Lingering after Finish, the data path may be closed: only the control channel matters.
        // (Resumable, a break of the data path while Finish waits must still be seen.)
        let watch = Watch {
            control: !self.core.control_closed(),
            data: !self.core.is_lingering() || self.session.resumes(),
            stop,
        };
        if let flow @ (Flow::Resume(_) | Flow::NotReady) =
            self.pause(patience, now, until, watch)?
        {
            return Ok(flow);
        }
        // Credits that come after the wait are stamped with this reading (re-stamped before
        // the next wait): a wait costs one clock read.
        self.stamp.prime(now);
        Ok(Flow::Done(()))
    }

    /// After an operation: on an error, the core's failure policy; then its actions.
    fn after<T>(&mut self, result: Result<T>) -> Result<T> {
        let result = result.and_then(|value| self.run_actions().map(|()| value));
        if let Err(e) = &result {
            self.core.on_error(e);
            // The failure's own actions (a Reject, closing); the first error says more.
            let _ = self.run_actions();
        }
        result
    }

    /// Carries out what the core asked for.
    fn run_actions(&mut self) -> Result<()> {
        while let Some(action) = self.core.poll_action() {
            match action {
                SenderAction::SendFinish { count } => {
                    match self.session.control.send(&Message::Finish { count }) {
                        Ok(()) => self.core.on_finish_sent(Instant::now()),
                        // The core says what a close before Finish means, with its count.
                        Err(SendFailed::PeerGone(lost)) => self.core.on_control_closed(lost)?,
                        Err(SendFailed::Io(e)) => return Err(e),
                    }
                }
                SenderAction::Reject(reason) => self.session.control.reject(&reason),
                SenderAction::CloseDataPath => self.session.transport.close(),
            }
        }
        Ok(())
    }

    /// Ends the stream: waits for every send to complete, sends Finish{count}, and waits (at
    /// most a few seconds) for the receiver to acknowledge by closing. Returns the count.
    /// It does not honour the stop flag: it is what a Ctrl-C handler calls.
    ///
    /// # Errors
    /// The receiver ended or lost the session before every send completed.
    pub fn finish(mut self) -> Result<u64> {
        self.finish_within(Patience::Unbounded)
    }

    /// Like [`RdmaSink::finish`], waiting at most `timeout`; the sink stays, so that a call
    /// that ran out can be made again (later sends say [`Error::Closed`]: the stream is
    /// ending).
    ///
    /// # Errors
    /// [`Error::DeadlinePassed`] when the stream did not end in time (call again to go on
    /// waiting); otherwise as for [`RdmaSink::finish`].
    pub fn finish_timeout(&mut self, timeout: Duration) -> Result<u64> {
        self.finish_within(Patience::after(timeout))
    }

    /// Like [`RdmaSink::finish_timeout`], without waiting: ends the stream if every send
    /// completed and the receiver acknowledged it.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] until then (the readiness descriptor is armed); otherwise as for
    /// [`RdmaSink::finish`].
    pub fn try_finish(&mut self) -> Result<u64> {
        self.finish_within(Patience::Never)
    }

    /// Ends the stream as `patience` allows; the first call begins it. The data path closes
    /// once the call is done, whether it ended the stream or failed, not when it ran out.
    fn finish_within(&mut self, patience: Patience) -> Result<u64> {
        self.after_readiness_wait();
        let begun = if self.core.is_open() {
            self.core.begin_finish(Instant::now())
        } else {
            Ok(())
        };
        let result = begun.and_then(|()| loop {
            let trigger = match self.finish_inner(patience) {
                Ok(Flow::Done(count)) => break Ok(Some(count)),
                Ok(Flow::NotReady) => break Ok(None),
                Ok(Flow::Resume(planned)) => planned.into(),
                Err(e) => Trigger::Failed(e),
            };
            if let Err(e) = self.resume_or(trigger) {
                break Err(e);
            }
        });
        match self.after(result) {
            Ok(None) => Err(patience.gave_up()),
            done => {
                self.session.transport.close();
                done.map(|count| count.unwrap_or_default())
            }
        }
    }

    fn finish_inner(&mut self, patience: Patience) -> Result<Flow<u64>> {
        loop {
            // Sends Finish once the core queued it (every send completed).
            self.run_actions()?;
            match self.core.finish_step()? {
                FinishStep::Done => return Ok(Flow::Done(self.core.sent())),
                FinishStep::Drain => {
                    if let Err(e) = self.session.transport.flush_sends() {
                        return Err(self.explain(e));
                    }
                    self.progress()?;
                }
                // The data path may be closed by now: only the control channel matters.
                FinishStep::Linger => {
                    self.read_control()?;
                    if self.session.resumes() && self.core.finish_step()? == FinishStep::Linger {
                        self.watch_data_while_lingering()?;
                    }
                }
            }
            if self.core.has_actions() || self.core.finish_step()? == FinishStep::Done {
                continue;
            }
            let now = self.now_for_wait();
            self.core.handle_timeout(now)?;
            if self.core.finish_step()? != FinishStep::Done {
                // No path retry while finishing (the peer may be gone by then); a lane's
                // grace still counts.
                let until = earliest(
                    self.core.poll_timeout(),
                    self.session.transport.poll_again_at(),
                );
                match self.wait(patience, now, until, StopFlag::Ignored)? {
                    Flow::Done(()) => {}
                    Flow::Resume(planned) => return Ok(Flow::Resume(planned)),
                    Flow::NotReady => return Ok(Flow::NotReady),
                }
            }
        }
    }

    /// Resumable and lingering after Finish: a data path that fails now may be the
    /// receiver's end (it closes its data path after shutting the control connection: the end
    /// of file there is read first, for a moment) or a break that lost messages counted in
    /// Finish (then the session resumes: the error).
    fn watch_data_while_lingering(&mut self) -> Result<()> {
        self.events.clear();
        let polled = self.session.transport.poll_sends(&mut self.events);
        let now = self.stamp.get();
        for event in self.events.drain(..) {
            self.core.on_send_event(event, now)?;
        }
        let Err(e) = polled else {
            return Ok(());
        };
        let deadline =
            crate::time::deadline_after(Instant::now(), crate::session_core::EXPLAIN_WAIT);
        while !self.core.control_closed() {
            match self.session.control.recv_until(deadline)? {
                Received::Message(msg) => self.core.on_control(msg, Instant::now())?,
                Received::Closed(lost) => return self.core.on_control_closed(lost),
                Received::Nothing => return Err(e),
            }
        }
        Ok(())
    }

    /// Aborts the session, telling the receiver why (it sees [`Error::Rejected`]).
    pub fn abort(mut self, reason: &str) {
        self.abort_in_place(reason);
    }

    /// Aborts the session like [`RdmaSink::abort`] but keeps the object (and its staging
    /// slots' memory) until it is dropped; later calls return [`Error::Closed`]. For bindings
    /// (Python) that lent a slot's memory to code that may still hold it.
    pub fn abort_in_place(&mut self, reason: &str) {
        self.core.abort(reason);
        let _ = self.run_actions();
    }

    /// Collects transport events, and control messages when the channel may have some or the
    /// sender needs a credit from it, without blocking.
    fn progress(&mut self) -> Result<()> {
        self.events.clear();
        let polled = self.session.transport.poll_sends(&mut self.events);
        if !self.events.is_empty() {
            let now = self.stamp.get();
            for event in self.events.drain(..) {
                self.core.on_send_event(event, now)?;
            }
        }
        if self.control_readable || self.core.needs_control_for_credit() {
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
            match self.session.control.try_recv()? {
                Received::Message(msg) => {
                    let now = self.stamp.get();
                    self.core.on_control(msg, now)?
                }
                Received::Nothing => break,
                Received::Closed(lost) => self.core.on_control_closed(lost)?,
            }
        }
        self.control_readable = false;
        Ok(())
    }

    /// A failed data path is often the visible half of the receiver ending the session: look
    /// for its words on the control channel (how long: the core's
    /// [`crate::session_core::Explanation`]).
    fn explain(&mut self, e: Error) -> Error {
        let released = self.core.released();
        self.session.explain(e, Role::Sender, released)
    }
}

crate::session::readiness::descriptor_of!(
    /// The readiness descriptor (rules 1 to 4 of `session::readiness`): it turns readable when
    /// [`RdmaSink::try_send`], [`RdmaSink::try_flush`] or [`RdmaSink::try_finish`] may make
    /// progress. It is armed only by such a call (or one with a deadline that ran out) that said
    /// [`Error::WouldBlock`]; wake-ups may be spurious; call until `WouldBlock` before waiting;
    /// never read it; it stays the same descriptor for the session's life, across a resume.
    RdmaSink,
    readiness
);

impl ResumeCore for SenderCore {
    fn begin_resume(&mut self) -> Result<Counts> {
        let position = SenderCore::begin_resume(self)?;
        Ok(Counts {
            messages: position.taken,
            released: position.released,
        })
    }

    fn on_reclaimed(&mut self, slot: StagingSlot) -> Result<()> {
        SenderCore::on_reclaimed(self, slot)
    }

    fn progress(&self) -> u64 {
        self.released()
    }

    fn old_control_on_break(&self) -> OldControl {
        OldControl::Shut
    }
}

impl Drop for RdmaSink {
    fn drop(&mut self) {
        self.abort_in_place("the sender closed without finishing the stream");
    }
}
