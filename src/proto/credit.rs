//! Credit accounting, one window per end.
//!
//! The receiver owns `capacity` slots. Message `seq` (0, 1, 2, ...) lands in slot
//! `seq % capacity` because slots are posted and consumed in FIFO order. The receiver releases a
//! message when the application is done with it (its next `recv()`), re-posts the slot and
//! tells the sender the cumulative number released. The sender may have at most `capacity`
//! messages that the receiver has not released.

/// A credit rule was broken: by the peer (when it comes from the wire) or by our own caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CreditError {
    /// The peer claims to have released more messages than were sent.
    #[error("credit for {released} message(s) released but only {sent} sent")]
    Invented {
        /// Claimed cumulative releases.
        released: u64,
        /// Messages actually sent.
        sent: u64,
    },
    /// The cumulative release count went backwards.
    #[error("credit went backwards from {previous} to {released}")]
    Regressed {
        /// The count we had.
        previous: u64,
        /// The smaller count received.
        released: u64,
    },
    /// A message arrived while every slot held an unreleased message.
    #[error("message arrived with all {capacity} slot(s) in use (sender exceeded its credit)")]
    Overrun {
        /// The window size.
        capacity: u32,
    },
    /// Release was asked for with no unreleased message.
    #[error("nothing to release")]
    NothingToRelease,
}

/// The sender's view: how many messages it may still send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SendWindow {
    capacity: u32,
    sent: u64,
    released: u64,
}

impl SendWindow {
    /// A window of `capacity` credits (the receiver's slot count), all available.
    pub(crate) fn new(capacity: u32) -> Self {
        Self {
            capacity,
            sent: 0,
            released: 0,
        }
    }

    /// Messages sent so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// Messages the receiver has released so far.
    pub(crate) fn released(&self) -> u64 {
        self.released
    }

    /// Messages sent but not yet released by the receiver.
    pub(crate) fn in_flight(&self) -> u64 {
        self.sent - self.released
    }

    /// Credits available right now.
    pub(crate) fn available(&self) -> u32 {
        // in_flight <= capacity is an invariant, so this cannot underflow.
        self.capacity - self.in_flight() as u32
    }

    /// Takes one credit for the next message and returns its sequence number, or `None`
    /// when the window is closed.
    pub(crate) fn try_take(&mut self) -> Option<u64> {
        if self.available() == 0 {
            return None;
        }
        let seq = self.sent;
        self.sent += 1;
        Some(seq)
    }

    /// Gives back the credit of the last [`SendWindow::try_take`] (sequence `seq`), for a
    /// message that was never sent. False (nothing changed) when `seq` is not the last taken.
    pub(crate) fn untake(&mut self, seq: u64) -> bool {
        if self.sent == 0 || seq != self.sent - 1 || self.in_flight() == 0 {
            return false;
        }
        self.sent -= 1;
        true
    }

    /// Applies a Credit message; returns how many credits it opened.
    pub(crate) fn on_credit(&mut self, released: u64) -> Result<u64, CreditError> {
        if released > self.sent {
            return Err(CreditError::Invented {
                released,
                sent: self.sent,
            });
        }
        if released < self.released {
            return Err(CreditError::Regressed {
                previous: self.released,
                released,
            });
        }
        let opened = released - self.released;
        self.released = released;
        Ok(opened)
    }
}

/// The receiver's view: which slot the next message lands in and what to release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecvWindow {
    capacity: u32,
    arrived: u64,
    released: u64,
}

impl RecvWindow {
    /// A window over `capacity` slots, all posted and empty.
    pub(crate) fn new(capacity: u32) -> Self {
        Self {
            capacity,
            arrived: 0,
            released: 0,
        }
    }

    /// The slot that message `seq` occupies.
    pub(crate) fn slot_of(&self, seq: u64) -> usize {
        (seq % u64::from(self.capacity)) as usize
    }

    /// Messages arrived so far.
    pub(crate) fn arrived(&self) -> u64 {
        self.arrived
    }

    /// Messages released so far (the value a Credit message carries).
    pub(crate) fn released(&self) -> u64 {
        self.released
    }

    /// Messages arrived and not yet released.
    pub(crate) fn held(&self) -> u64 {
        self.arrived - self.released
    }

    /// Records an arrival and returns its sequence number; fails if every slot was occupied,
    /// which means the sender ignored its credit.
    pub(crate) fn on_arrival(&mut self) -> Result<u64, CreditError> {
        if self.held() >= u64::from(self.capacity) {
            return Err(CreditError::Overrun {
                capacity: self.capacity,
            });
        }
        let seq = self.arrived;
        self.arrived += 1;
        Ok(seq)
    }

    /// Releases the oldest held message (FIFO) and returns its sequence number; the caller
    /// re-posts `slot_of(seq)` and then sends `Credit { released: self.released() }`.
    pub(crate) fn release_oldest(&mut self) -> Result<u64, CreditError> {
        if self.held() == 0 {
            return Err(CreditError::NothingToRelease);
        }
        let seq = self.released;
        self.released += 1;
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_blocks_at_capacity_and_reopens_on_credit() {
        let mut w = SendWindow::new(2);
        assert_eq!(w.try_take(), Some(0));
        assert_eq!(w.try_take(), Some(1));
        assert_eq!(w.try_take(), None);
        assert_eq!(w.on_credit(1), Ok(1));
        assert_eq!(w.try_take(), Some(2));
        assert_eq!(w.on_credit(3), Ok(2));
        assert_eq!(w.available(), 2);
    }

    #[test]
    fn sender_rejects_invented_and_regressed_credit() {
        let mut w = SendWindow::new(2);
        w.try_take();
        assert_eq!(
            w.on_credit(2),
            Err(CreditError::Invented {
                released: 2,
                sent: 1
            })
        );
        assert_eq!(w.on_credit(1), Ok(1));
        assert_eq!(
            w.on_credit(0),
            Err(CreditError::Regressed {
                previous: 1,
                released: 0
            })
        );
    }

    #[test]
    fn receiver_detects_overrun_and_cycles_slots() {
        let mut r = RecvWindow::new(2);
        assert_eq!(r.on_arrival(), Ok(0));
        assert_eq!(r.on_arrival(), Ok(1));
        assert_eq!(r.on_arrival(), Err(CreditError::Overrun { capacity: 2 }));
        assert_eq!(r.release_oldest(), Ok(0));
        assert_eq!(r.on_arrival(), Ok(2));
        assert_eq!(r.slot_of(2), 0);
        assert_eq!(r.release_oldest(), Ok(1));
        assert_eq!(r.release_oldest(), Ok(2));
        assert_eq!(r.release_oldest(), Err(CreditError::NothingToRelease));
    }
}
