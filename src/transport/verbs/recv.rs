//! The verbs receiver's own state: the posted receives and the credit sends.
//!
//! Rules (with the shared ones in [`super`]):
//! - A data receive's `wr_id` is its slot's index: the slot token is given up when it is
//!   posted and minted again from the `wr_id` when its completion is taken off the CQ.
//! - The posted receives are kept in the order they were posted (the order an RC receive queue
//!   completes them in), counted as posted even when the post fails; a resume posts again, in
//!   this order, every one not reported, a message that landed but was not reported included.
//! - Credits go back as one zero-length send with immediate data per announcement (the count),
//!   its `wr_id` `SEND_TAG | CREDIT_TAG` and a sequence number; at most `slots` are
//!   outstanding, signaled every half window. With no room, the receiver polls for at most
//!   `CREDIT_SEND_WAIT`, keeping what it takes off the CQ meanwhile for the next poll.
//! - A receiver posts no data sends, no flush and no credit receives: a completion of one
//!   retires nothing here.
//!
//! No `unsafe` here: posting goes through [`VerbsQp::post_send_list`] and
//! [`VerbsQp::post_recv_list`].

use std::collections::VecDeque;
use std::time::Instant;

use verbs_sys::ffi::{self, ibv_sge};

use super::{
    VerbsQp, VerbsRole, VerbsTransport, CREDIT_SEND_WAIT, CREDIT_SEQ_MASK, CREDIT_TAG, NAME,
    SEND_TAG,
};
use crate::proto::Role;
use crate::transport::signaling::SendSignaling;
use crate::transport::{receiver_arrivals, Arrived, Completion, RecvPath, RecvSlot, StagingSlot};
use crate::{Error, Result};

/// The verbs receiver.
pub(crate) type VerbsReceiver = VerbsTransport<ReceiverState>;

/// What only a receiver keeps.
#[derive(Debug)]
pub(crate) struct ReceiverState {
    /// Credit sends posted and not yet known complete (bounded by the SQ depth).
    credit_sends: SendSignaling,
    /// Sequence number of the next credit send (its `wr_id`).
    credit_seq: u64,
    /// The receive slots posted and not yet taken off the CQ, oldest first (what a resumed
    /// session posts again, in this order, on its new QP).
    posted_recvs: VecDeque<usize>,
}

impl VerbsRole for ReceiverState {
    const ROLE: Role = Role::Receiver;

    fn new(slots: usize) -> Self {
        Self {
            credit_sends: SendSignaling::new(slots, SendSignaling::default_interval(slots)),
            credit_seq: 0,
            posted_recvs: VecDeque::with_capacity(slots),
        }
    }

    #[inline]
    fn receive_completed(&mut self, slot: usize) -> Result<()> {
        take_posted(&mut self.posted_recvs, slot)
    }

    #[inline]
    fn flush_completed(&mut self, _retired: impl FnMut(u64)) {
        // A receiver posts no flush and no data sends: nothing to retire.
    }

    #[inline]
    fn send_completed(&mut self, _wr_id: u64, _retired: impl FnMut(u64)) -> bool {
        // A receiver posts no data sends: none is outstanding.
        false
    }

    #[inline]
    fn credit_send_completed(&mut self, wr_id: u64) {
        self.credit_sends.on_signaled_completion(wr_id, |_| {});
    }

    fn closed(&mut self) {
        self.credit_sends.clear();
    }

    fn reset_for_resume(
        &mut self,
        core: &mut VerbsQp,
        _reclaimed: &mut Vec<StagingSlot>,
    ) -> Result<()> {
        // A message that landed but was not reported counts as not arrived: its slot is
        // posted again, and the sender sends it again.
        requeue_landed(&mut core.pending, &mut self.posted_recvs);
        if !self.posted_recvs.is_empty() {
            let size = u32::try_from(core.memory.size()).unwrap_or(u32::MAX);
            for &index in &self.posted_recvs {
                let sge = ibv_sge {
                    addr: core.memory.addr(index),
                    length: size,
                    lkey: core.mr.lkey(),
                };
                core.recv_list.push(index as u64, Some(sge));
            }
            // One post for all, in the order they were first posted.
            core.post_recv_list("ibv_post_recv(resume)")?;
        }
        // Last, once nothing can fail. A receiver has no sends to give back: what is left of
        // `pending` would be a sender's (sends, credits), and it never has any.
        core.pending.clear();
        self.credit_sends.clear();
        self.credit_seq = 0;
        Ok(())
    }
}

impl VerbsReceiver {
    /// Waits (polling, at most [`CREDIT_SEND_WAIT`]) until a credit announcement fits in the
    /// send queue. Announcements are rarer than releases and the queue has a slot's room for
    /// each, so this rarely waits; completions taken meanwhile are kept for the next `poll`.
    fn wait_for_credit_room(&mut self) -> Result<()> {
        // The clock is read only when there is no room at once (the usual case has room).
        let mut deadline = None;
        let mut rounds = 0u32;
        while self.role.credit_sends.room() == 0 {
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + CREDIT_SEND_WAIT);
            let mut pending = std::mem::take(&mut self.core.pending);
            let polled = self.poll_cq(&mut pending);
            self.core.pending = pending;
            polled?;
            if Instant::now() > deadline {
                return Err(Error::TransportProtocol {
                    transport: NAME,
                    detail: "no credit send completed within 2 s (is the peer still there?)"
                        .to_owned(),
                });
            }
            // On soft-RoCE the completion waited for needs a kernel worker of this host.
            rounds = rounds.wrapping_add(1);
            if self.core.device_work.yield_due(rounds) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }
}

impl RecvPath for VerbsReceiver {
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()> {
        let sge = ibv_sge {
            addr: self.core.memory.addr(slot.index()),
            length: u32::try_from(self.core.memory.size()).unwrap_or(u32::MAX),
            lkey: self.core.mr.lkey(),
        };
        self.core.recv_list.push(slot.index() as u64, Some(sge));
        // Counted as posted even if the post fails: the driver gave the token away, so a
        // resumed session posts it again.
        self.role.posted_recvs.push_back(slot.index());
        // The token is gone: the slot comes back, minted from the wr_id, with its completion.
        self.core.post_recv_list("ibv_post_recv")
    }

    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        self.core.memory.message(msg)
    }

    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        let mut completions = std::mem::take(&mut self.core.scratch);
        let polled = self.poll_completions(&mut completions);
        let result = receiver_arrivals(NAME, polled, &mut completions, out);
        self.core.scratch = completions;
        result
    }

    /// One zero-length send with immediate data `count` for the whole announcement.
    fn return_credits(&mut self, count: usize) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let count = u32::try_from(count)
            .map_err(|_| Error::Internal(format!("a credit announcement of {count} messages")))?;
        self.wait_for_credit_room()?;
        let wr_id = SEND_TAG | CREDIT_TAG | (self.role.credit_seq & CREDIT_SEQ_MASK);
        self.role.credit_seq = self.role.credit_seq.wrapping_add(1);
        let flags = if self.role.credit_sends.on_post(wr_id) {
            ffi::IBV_SEND_SIGNALED
        } else {
            0
        };
        self.core
            .send_list
            .push_send_with_imm(wr_id, None, count, flags);
        if let Err(e) = self.core.post_send_list("ibv_post_send(credits)") {
            self.role.credit_sends.on_post_failed();
            return Err(e);
        }
        Ok(())
    }
}

/// A receive completed into `slot`: it is no longer posted. An RC receive queue completes in
/// the order it was posted, so it is the oldest; anything else is this transport's bug.
pub(super) fn take_posted(posted: &mut VecDeque<usize>, slot: usize) -> Result<()> {
    if posted.front() == Some(&slot) {
        posted.pop_front();
        return Ok(());
    }
    let at = posted.iter().position(|&s| s == slot).ok_or_else(|| {
        Error::Internal(format!(
            "verbs: a receive completed into slot {slot}, which was not posted"
        ))
    })?;
    log::warn!("verbs: receive slot {slot} completed out of the order it was posted in");
    posted.remove(at);
    Ok(())
}

/// Resume: the receives that landed but were not reported (taken off the CQ into `pending`)
/// count as not arrived: their slots go back to the front of `posted`, oldest first, ahead of
/// those still posted, which is the order all of them were posted in.
pub(super) fn requeue_landed(pending: &mut Vec<Completion>, posted: &mut VecDeque<usize>) {
    let mut landed = Vec::new();
    pending.retain(|c| match c {
        Completion::Recv(msg) => {
            landed.push(msg.slot_index());
            false
        }
        Completion::Send(_) | Completion::Credits(_) => true,
    });
    for slot in landed.into_iter().rev() {
        posted.push_front(slot);
    }
}
