//! Blocking waits on several file descriptors at once, with a timeout.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};

use crate::{Error, Result};

/// What to wait for on one descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interest<'a> {
    /// The descriptor.
    pub fd: BorrowedFd<'a>,
    /// Wait until it is readable (also true for EOF and errors).
    pub readable: bool,
    /// Wait until it is writable.
    pub writable: bool,
}

impl<'a> Interest<'a> {
    /// Readable (or closed, or failed).
    pub(crate) fn read(fd: BorrowedFd<'a>) -> Self {
        Self {
            fd,
            readable: true,
            writable: false,
        }
    }

    /// Writable (or closed, or failed).
    pub(crate) fn write(fd: BorrowedFd<'a>) -> Self {
        Self {
            fd,
            readable: false,
            writable: true,
        }
    }
}

/// Waits until any descriptor is ready or `timeout` passes, and returns which were: entry `i`
/// is `true` when `interests[i]` is ready (readable, writable, closed or failed).
/// EINTR counts as a spurious wake-up (nothing ready); callers re-check their own state.
/// Takes an array so that a wait allocates nothing.
pub(crate) fn wait_any<const N: usize>(
    interests: [Interest<'_>; N],
    timeout: Duration,
) -> Result<[bool; N]> {
    let mut fds = interests.map(|i| {
        let mut flags = PollFlags::empty();
        if i.readable {
            flags |= PollFlags::POLLIN;
        }
        if i.writable {
            flags |= PollFlags::POLLOUT;
        }
        PollFd::new(i.fd, flags)
    });
    let ms = poll_millis(timeout);
    if N == 0 {
        std::thread::sleep(Duration::from_millis(u64::from(ms)));
        return Ok([false; N]);
    }
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok([false; N]),
        Err(e) => {
            return Err(Error::Socket {
                what: "poll",
                source: e.into(),
            })
        }
    }
    let mut ready = [false; N];
    for (ready, fd) in ready.iter_mut().zip(&fds) {
        *ready = fd.revents().is_some_and(|r| !r.is_empty());
    }
    Ok(ready)
}

/// Waits until any of `fds` is readable (or closed, or failed) or `timeout` passes, for a
/// number of descriptors known only at run time (a data path's set-up): entry `i` is `true`
/// when `fds[i]` is ready.
pub(crate) fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> Result<Vec<bool>> {
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    let ms = poll_millis(timeout);
    match poll(&mut polled, PollTimeout::from(ms)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(vec![false; fds.len()]),
        Err(e) => {
            return Err(Error::Socket {
                what: "poll",
                source: e.into(),
            })
        }
    }
    Ok(polled
        .iter()
        .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
        .collect())
}

/// `poll`'s timeout in whole milliseconds, rounded up (at most 65,535 ms): a wait of 0.3 ms
/// truncated to 0 would return at once, and its caller would spin on system calls until
/// the deadline. Zero stays zero (a look that does not sleep).
fn poll_millis(timeout: Duration) -> u16 {
    u16::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(u16::MAX)
}

/// Time left until `deadline`, or `None` when it has passed.
pub(crate) fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// The epoll events of an interest.
pub(crate) fn epoll_events(interest: Interest<'_>) -> EpollFlags {
    let mut flags = EpollFlags::empty();
    if interest.readable {
        flags |= EpollFlags::EPOLLIN;
    }
    if interest.writable {
        flags |= EpollFlags::EPOLLOUT;
    }
    flags
}

/// Puts `fd` in the epoll set with `events`, or changes its events when it is there.
pub(crate) fn watch_fd(epoll: &Epoll, fd: BorrowedFd<'_>, events: EpollFlags) -> Result<()> {
    let token = u64::try_from(fd.as_raw_fd()).unwrap_or(u64::MAX);
    let mut event = EpollEvent::new(events, token);
    match epoll.add(fd, event) {
        Err(Errno::EEXIST) => epoll.modify(fd, &mut event).map_err(epoll_ctl_failed),
        other => other.map_err(epoll_ctl_failed),
    }
}

/// Takes `fd` out of the epoll set (not being there is fine).
pub(crate) fn unwatch_fd(epoll: &Epoll, fd: BorrowedFd<'_>) -> Result<()> {
    match epoll.delete(fd) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(epoll_ctl_failed(e)),
    }
}

fn epoll_ctl_failed(e: Errno) -> Error {
    Error::Socket {
        what: "epoll_ctl",
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_shorter_than_a_millisecond_sleeps_a_millisecond_instead_of_not_at_all() {
        assert_eq!(poll_millis(Duration::ZERO), 0);
        assert_eq!(poll_millis(Duration::from_micros(1)), 1);
        assert_eq!(poll_millis(Duration::from_micros(300)), 1);
        assert_eq!(poll_millis(Duration::from_millis(1)), 1);
        assert_eq!(poll_millis(Duration::from_micros(1001)), 2);
        assert_eq!(poll_millis(Duration::from_secs(3600)), u16::MAX);
    }
}
