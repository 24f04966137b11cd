//! The verbs sender's own state: the data sends in flight and their signaling, and the flush.
//!
//! Rules (with the shared ones in [`super`]):
//! - A data send's `wr_id` is `SEND_TAG` and its staging slot's index: the slot token is given
//!   up when it is posted and minted again from the `wr_id` when the send is retired, by its
//!   own signaled completion, a later one or the flush ([`super::super::signaling`]).
//! - At most `slots` data sends are outstanding; one that takes the last free entry is
//!   signaled, so a full window always has a completion coming.
//! - At most one flushing RDMA write is posted at a time ([`SendPath::flush_sends`]).
//! - A resume gives back, oldest first, every send not reported complete, exactly once.
//! - A sender posts no data receives and no credit sends: a completion of either retires
//!   nothing here (a data receive is this transport's bug, as on a receiver for a slot not
//!   posted).
//!
//! No `unsafe` here: posting goes through [`VerbsQp::post_send_list`].

use std::collections::VecDeque;

use verbs_sys::ffi::{self, ibv_sge};

use super::recv::take_posted;
use super::{out_of_range, VerbsQp, VerbsRole, VerbsTransport, FLUSH_TAG, NAME, SEND_TAG};
use crate::proto::Role;
use crate::transport::signaling::SendSignaling;
use crate::transport::{sender_events, Completion, SendEvent, SendPath, StagingSlot};
use crate::{Error, Result};

/// The verbs sender.
pub(crate) type VerbsSender = VerbsTransport<SenderState>;

/// What only a sender keeps.
#[derive(Debug)]
pub(crate) struct SenderState {
    /// Data sends posted and not yet known complete, and which to signal.
    /// (It also knows whether a flushing RDMA write is posted and has not completed.)
    data_sends: SendSignaling,
}

impl VerbsRole for SenderState {
    const ROLE: Role = Role::Sender;

    fn new(slots: usize) -> Self {
        Self {
            data_sends: SendSignaling::new(slots, SendSignaling::default_interval(slots)),
        }
    }

    #[inline]
    fn receive_completed(&mut self, slot: usize) -> Result<()> {
        // A sender has no data receive posted.
        take_posted(&mut VecDeque::new(), slot)
    }

    #[inline]
    fn flush_completed(&mut self, retired: impl FnMut(u64)) {
        self.data_sends.on_flush_completion(retired);
    }

    #[inline]
    fn send_completed(&mut self, wr_id: u64, retired: impl FnMut(u64)) -> bool {
        self.data_sends.on_signaled_completion(wr_id, retired)
    }

    #[inline]
    fn credit_send_completed(&mut self, _wr_id: u64) {
        // A sender posts no credit sends: nothing to retire.
    }

    fn closed(&mut self) {
        self.data_sends.clear();
    }

    fn reset_for_resume(
        &mut self,
        core: &mut VerbsQp,
        reclaimed: &mut Vec<StagingSlot>,
    ) -> Result<()> {
        // No receive to post again: a sender has no data receive posted, and nothing puts one
        // in its `pending` (only a receiver's credit wait fills it). Its credit receives are
        // posted again by `connect`.
        // Last, once nothing can fail: the sends go back to the caller exactly once.
        reclaim_sends(&mut core.pending, &mut self.data_sends, reclaimed);
        Ok(())
    }
}

impl SendPath for VerbsSender {
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        self.core.memory.staging(slot)
    }

    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        let index = slot.index();
        if len > self.core.memory.size() {
            return Err(out_of_range(index as u64));
        }
        let length = u32::try_from(len).map_err(|_| out_of_range(index as u64))?;
        let sge = ibv_sge {
            addr: self.core.memory.addr(index),
            length,
            lkey: self.core.mr.lkey(),
        };
        if !self.role.data_sends.has_room() {
            return Err(Error::Internal(format!(
                "verbs: send from slot {index} with {} sends outstanding",
                self.role.data_sends.outstanding()
            )));
        }
        let wr_id = SEND_TAG | index as u64;
        let mut flags = 0;
        if self.role.data_sends.on_post(wr_id) {
            flags |= ffi::IBV_SEND_SIGNALED;
        }
        if length > 0 && length <= self.core.max_inline {
            flags |= ffi::IBV_SEND_INLINE;
        }
        self.core.send_list.push_send(wr_id, Some(sge), flags);
        // The token is gone: the slot comes back, minted from the wr_id, with its completion.
        self.core
            .post_send_list("ibv_post_send")
            .inspect_err(|_| self.role.data_sends.on_post_failed())
    }

    fn flush_sends(&mut self) -> Result<()> {
        // Not while one is on its way: `needs_flush` says no then.
        if !self.role.data_sends.needs_flush() {
            return Ok(());
        }
        // The send queue keeps an entry beyond the window for it (`create_qp`).
        self.core.send_list.push_rdma_write(
            SEND_TAG | FLUSH_TAG,
            None,
            0,
            0,
            ffi::IBV_SEND_SIGNALED,
        );
        self.core.post_send_list("ibv_post_send(flush)")?;
        self.role.data_sends.on_flush_post();
        Ok(())
    }

    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        let mut completions = std::mem::take(&mut self.core.scratch);
        let polled = self.poll_completions(&mut completions);
        let result = sender_events(NAME, polled, &mut completions, out);
        self.core.scratch = completions;
        result
    }
}

/// Resume: every send not reported complete goes back to `reclaimed`, oldest first (those
/// that completed but were not reported, then those still outstanding, flushed or not); the
/// signaling count starts afresh and unreported credits are dropped (the window restarts
/// from the receiver's count).
pub(super) fn reclaim_sends(
    pending: &mut Vec<Completion>,
    sends: &mut SendSignaling,
    reclaimed: &mut Vec<StagingSlot>,
) {
    for c in pending.drain(..) {
        match c {
            Completion::Send(slot) => reclaimed.push(slot),
            Completion::Credits(_) => {}
            // A sender's `pending` holds none (only a receiver's credit wait fills it); a
            // receive slot is never a staging slot.
            Completion::Recv(_) => {}
        }
    }
    sends.take_all(|id| reclaimed.push(StagingSlot::mint((id & !SEND_TAG) as usize)));
}
