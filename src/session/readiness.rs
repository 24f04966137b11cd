//! The readiness descriptor of a session end or a listener: one file descriptor an event loop
//! (epoll, mio, tokio's `AsyncFd`, asyncio's `add_reader`) waits on between non-blocking calls.
//!
//! Rules (the contract `RdmaSink`, `RdmaSrc` and `Listener` document, in the style of mio's):
//! 1. The descriptor becomes readable when the next `try_*` call may make progress: data or a
//!    completion on the data path, a message or a close on the control connection, a deadline
//!    of the session's own (a credit or idle timeout, a linger) or, for a server session that
//!    can resume, a tick of at most [`RESUME_TICK`] to look for a client's resume attempt.
//! 2. It is armed only by a `try_*` call (or a call with a deadline) that returned
//!    [`crate::Error::WouldBlock`]: after any other outcome, call again until one says
//!    `WouldBlock` before waiting (drain until would-block, as mio asks).
//! 3. Wake-ups may be spurious: a readable descriptor is a hint, and the next call may still
//!    say `WouldBlock` (it then re-arms). Never read from or write to the descriptor.
//! 4. It stays the same descriptor for the life of the object, across a resumed session's new
//!    data path: register it once.
//!
//! The descriptor is an epoll instance holding, level-triggered, the control connection, the
//! transport's own wait handle (the verbs completion channel, the DOCA progress engine's
//! notification handle, the tcp data socket) and a timerfd for the deadline. Each arm adds,
//! changes or removes exactly what the caller's wait would watch, so a descriptor the session
//! must not watch (a connection at end of file, a closed data path) never makes it spin.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::time::{TimeSpec, TimeValLike};
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use crate::net::wait::{epoll_events, unwatch_fd, watch_fd, Interest};
use crate::{Error, Result};

/// The longest a server session that can resume sleeps on its readiness descriptor without a
/// wake-up: a client's resume attempt reaches it through the listener, not a descriptor.
pub(crate) const RESUME_TICK: Duration = Duration::from_millis(100);

/// An epoll instance and its timer ([the module's rules](self)).
#[derive(Debug)]
pub(crate) struct Readiness {
    epoll: Epoll,
    timer: TimerFd,
    /// A call armed it and returned `WouldBlock`; the next call starts by taking this.
    armed: bool,
    /// What the epoll set is known to hold for each position of [`Readiness::arm`]'s
    /// `watched` (a descriptor and its events, empty: known not there); `None`: not known.
    /// An arm that changes nothing makes no system call.
    held: [Option<(RawFd, EpollFlags)>; 2],
    /// The timer's expiry as last set (`Some(None)`: disarmed); `None`: not known.
    timer_at: Option<Option<Instant>>,
}

/// What one arm does with one of the session's descriptors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Watched<'a> {
    /// Watch it for this readiness.
    Watch(Interest<'a>),
    /// Do not watch it now (at end of file, a closed data path): removed if it was there.
    Ignore(BorrowedFd<'a>),
}

impl Readiness {
    /// A new epoll instance with its timer registered (disarmed).
    pub(crate) fn new() -> Result<Self> {
        let epoll =
            Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| socket("epoll_create1", e))?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(|e| socket("timerfd_create", e))?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(|e| socket("epoll_ctl", e))?;
        Ok(Self {
            epoll,
            timer,
            armed: false,
            held: [None; 2],
            timer_at: Some(None),
        })
    }

    /// The session's descriptors may have changed under the same numbers (a resumed session's
    /// new data path and control connection; the old ones left the epoll set when they were
    /// closed): the next arm sets everything again.
    pub(crate) fn forget(&mut self) {
        self.held = [None; 2];
    }

    /// A call armed it and returns `WouldBlock`.
    pub(crate) fn set_armed(&mut self) {
        self.armed = true;
    }

    /// Whether the last call armed it (and now no longer).
    pub(crate) fn take_armed(&mut self) -> bool {
        std::mem::take(&mut self.armed)
    }

    /// Watches what `watched` says (at most two descriptors, each in its own position from one
    /// arm to the next: the control connection, then the data path's), and the timer set to
    /// `deadline` (`None`: no timer). What is already as asked is left alone.
    pub(crate) fn arm(
        &mut self,
        watched: &[Watched<'_>],
        deadline: Option<Instant>,
        now: Instant,
    ) -> Result<()> {
        for (w, held) in watched.iter().zip(self.held.iter_mut()) {
            let (fd, events) = match *w {
                Watched::Watch(interest) => (interest.fd, epoll_events(interest)),
                Watched::Ignore(fd) => (fd, EpollFlags::empty()),
            };
            let want = Some((fd.as_raw_fd(), events));
            if *held == want {
                continue;
            }
            if events.is_empty() {
                unwatch_fd(&self.epoll, fd)?;
            } else {
                watch_fd(&self.epoll, fd, events)?;
            }
            *held = want;
        }
        if self.timer_at == Some(deadline) {
            return Ok(());
        }
        match deadline {
            // A zero expiration disarms a timerfd: one nanosecond fires at once instead.
            Some(at) => {
                let left = at
                    .saturating_duration_since(now)
                    .max(Duration::from_nanos(1));
                let nanos = i64::try_from(left.as_nanos()).unwrap_or(i64::MAX);
                self.timer
                    .set(
                        Expiration::OneShot(TimeSpec::nanoseconds(nanos)),
                        TimerSetTimeFlags::empty(),
                    )
                    .map_err(|e| socket("timerfd_settime", e))?;
            }
            None => self
                .timer
                .unset()
                .map_err(|e| socket("timerfd_settime", e))?,
        }
        self.timer_at = Some(deadline);
        Ok(())
    }
}

impl AsFd for Readiness {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }
}

impl AsRawFd for Readiness {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.0.as_raw_fd()
    }
}

fn socket(what: &'static str, e: Errno) -> Error {
    Error::Socket {
        what,
        source: e.into(),
    }
}

/// `AsFd` and `AsRawFd` for a public type (`$ty`) whose readiness descriptor is its field
/// `$field`: what an event loop waits on between its `try_` calls. The doc comments given go
/// on the `AsFd` impl.
macro_rules! descriptor_of {
    ($(#[$doc:meta])* $ty:ty, $field:ident) => {
        $(#[$doc])*
        impl std::os::fd::AsFd for $ty {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(&self.$field)
            }
        }

        impl std::os::fd::AsRawFd for $ty {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsRawFd::as_raw_fd(&self.$field)
            }
        }
    };
}
pub(crate) use descriptor_of;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::wait::wait_any;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn readable(r: &Readiness, within: Duration) -> bool {
        wait_any([Interest::read(r.as_fd())], within).unwrap() == [true]
    }

    #[test]
    fn the_descriptor_turns_readable_when_a_watched_descriptor_does_and_not_before() {
        let mut r = Readiness::new().unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        let now = Instant::now();
        r.arm(&[Watched::Watch(Interest::read(b.as_fd()))], None, now)
            .unwrap();
        assert!(!readable(&r, Duration::from_millis(20)));
        a.write_all(b"x").unwrap();
        assert!(readable(&r, Duration::from_secs(5)));
    }

    #[test]
    fn a_descriptor_no_longer_watched_does_not_wake_the_loop() {
        let mut r = Readiness::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        drop(a); // b is at end of file: readable for ever
        let now = Instant::now();
        r.arm(&[Watched::Watch(Interest::read(b.as_fd()))], None, now)
            .unwrap();
        assert!(readable(&r, Duration::from_secs(5)));
        r.arm(&[Watched::Ignore(b.as_fd())], None, now).unwrap();
        assert!(!readable(&r, Duration::from_millis(20)));
        // removing what is not there is fine
        r.arm(&[Watched::Ignore(b.as_fd())], None, now).unwrap();
    }

    #[test]
    fn the_deadline_wakes_the_loop_and_a_new_arm_replaces_an_expired_one() {
        let mut r = Readiness::new().unwrap();
        let now = Instant::now();
        r.arm(&[], Some(now + Duration::from_millis(30)), now)
            .unwrap();
        assert!(!readable(&r, Duration::ZERO));
        assert!(readable(&r, Duration::from_secs(5)));
        // re-arming resets the expired timer: not readable until the new deadline
        let now = Instant::now();
        r.arm(&[], Some(now + Duration::from_secs(60)), now)
            .unwrap();
        assert!(!readable(&r, Duration::from_millis(20)));
        r.arm(&[], None, now).unwrap();
        assert!(!readable(&r, Duration::from_millis(20)));
        // a deadline already passed fires at once (a zero expiration would disarm the timer)
        r.arm(&[], Some(now), Instant::now()).unwrap();
        assert!(readable(&r, Duration::from_secs(5)));
    }

    #[test]
    fn a_watched_descriptor_that_closes_leaves_the_set_and_its_number_can_be_watched_again() {
        let mut r = Readiness::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let now = Instant::now();
        r.arm(&[Watched::Watch(Interest::read(b.as_fd()))], None, now)
            .unwrap();
        drop(b);
        drop(a);
        // a new descriptor (likely the same number), as a resumed data path's: the driver
        // says so (the number alone cannot tell a new descriptor from the old)
        r.forget();
        let (mut c, d) = UnixStream::pair().unwrap();
        r.arm(&[Watched::Watch(Interest::read(d.as_fd()))], None, now)
            .unwrap();
        assert!(!readable(&r, Duration::from_millis(20)));
        c.write_all(b"x").unwrap();
        assert!(readable(&r, Duration::from_secs(5)));
    }
}
