//! Blocking waits on several file descriptors at once, with a timeout.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::{Error, Result};

/// What to wait for on one descriptor.
#[derive(Debug, Clone, Copy)]
pub struct Interest<'a> {
    /// The descriptor.
    pub fd: BorrowedFd<'a>,
    /// Wait until it is readable (also true for EOF and errors).
    pub readable: bool,
    /// Wait until it is writable.
    pub writable: bool,
}

impl<'a> Interest<'a> {
    /// Readable (or closed, or failed).
    pub fn read(fd: BorrowedFd<'a>) -> Self {
        Self {
            fd,
            readable: true,
            writable: false,
        }
    }

    /// Writable (or closed, or failed).
    pub fn write(fd: BorrowedFd<'a>) -> Self {
        Self {
            fd,
            readable: false,
            writable: true,
        }
    }
}

/// Waits until any descriptor is ready or `timeout` passes. Callers re-check their own state
/// afterwards (EINTR counts as a spurious wake-up), so which descriptor woke is not reported.
pub fn wait_any(interests: &[Interest<'_>], timeout: Duration) -> Result<()> {
    let mut fds: Vec<PollFd<'_>> = interests
        .iter()
        .map(|i| {
            let mut flags = PollFlags::empty();
            if i.readable {
                flags |= PollFlags::POLLIN;
            }
            if i.writable {
                flags |= PollFlags::POLLOUT;
            }
            PollFd::new(i.fd, flags)
        })
        .collect();
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => {
            return Err(Error::Socket {
                what: "poll",
                source: e.into(),
            })
        }
    }
    Ok(())
}

/// Time left until `deadline`, or `None` when it has passed.
pub fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}
