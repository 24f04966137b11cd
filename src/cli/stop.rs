//! Which signal stopped the program. The first SIGINT, SIGTERM or SIGHUP sets the stop flag
//! that every session's waits watch (the library only says "interrupted"); this records which
//! one it was, so that the command line says so and exits with its status: 130 after SIGINT
//! (Ctrl-C, `docker stop` with the image's STOPSIGNAL), 143 after SIGTERM (how Kubernetes,
//! systemd and `kill` stop a process), 130 after SIGHUP (a closed terminal, as Ctrl-C).

use std::sync::atomic::{AtomicU8, Ordering};

use super::{EXIT_INTERRUPTED, EXIT_TERMINATED};

/// The signal that stopped the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM: Kubernetes, systemd, `kill`.
    Terminate,
    /// SIGHUP: the terminal closed.
    Hangup,
}

/// The first stop signal received: 0 none yet, else a [`StopSignal`] as [`StopSignal::code`].
/// Process-wide, as signals are; set before the stop flag, so whoever sees the flag set reads
/// the signal that set it.
static RECEIVED: AtomicU8 = AtomicU8::new(0);

impl StopSignal {
    /// The stop signal behind a signal number, if it is one.
    pub fn from_raw(signal: i32) -> Option<StopSignal> {
        match signal {
            libc::SIGINT => Some(StopSignal::Interrupt),
            libc::SIGTERM => Some(StopSignal::Terminate),
            libc::SIGHUP => Some(StopSignal::Hangup),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            StopSignal::Interrupt => 1,
            StopSignal::Terminate => 2,
            StopSignal::Hangup => 3,
        }
    }

    /// Remembers the signal that is about to set the stop flag (the first one only).
    pub fn record(self) {
        let _ = RECEIVED.compare_exchange(0, self.code(), Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The signal that set the stop flag; SIGINT when none did (the words and status the
    /// program always had for a stop).
    pub fn received() -> StopSignal {
        match RECEIVED.load(Ordering::SeqCst) {
            2 => StopSignal::Terminate,
            3 => StopSignal::Hangup,
            _ => StopSignal::Interrupt,
        }
    }

    /// The exit status after this signal: 128 plus its number, as shells report it (SIGHUP
    /// keeps Ctrl-C's 130, as before it was told apart).
    pub fn exit_status(self) -> u8 {
        match self {
            StopSignal::Interrupt | StopSignal::Hangup => EXIT_INTERRUPTED,
            StopSignal::Terminate => EXIT_TERMINATED,
        }
    }

    /// What the logs call the signal: `Ctrl-C: stopping after 12 message(s)`.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "Ctrl-C",
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Hangup => "SIGHUP",
        }
    }

    /// How a session it ended ended, in a summary line: `session 1 from ...: interrupted:
    /// received ...`, `...: stopped (SIGTERM): received ...`.
    pub fn how(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "interrupted",
            StopSignal::Terminate => "stopped (SIGTERM)",
            StopSignal::Hangup => "interrupted (SIGHUP)",
        }
    }

    /// What happened to the program, for the peer's Reject: `the server was ` + this.
    pub fn what_happened(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "interrupted (Ctrl-C)",
            StopSignal::Terminate => "stopped (SIGTERM)",
            StopSignal::Hangup => "interrupted (SIGHUP)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_has_its_status_and_words() {
        assert_eq!(
            StopSignal::from_raw(libc::SIGINT),
            Some(StopSignal::Interrupt)
        );
        assert_eq!(
            StopSignal::from_raw(libc::SIGTERM),
            Some(StopSignal::Terminate)
        );
        assert_eq!(StopSignal::from_raw(libc::SIGHUP), Some(StopSignal::Hangup));
        assert_eq!(StopSignal::from_raw(libc::SIGUSR1), None);
        assert_eq!(StopSignal::Interrupt.exit_status(), 130);
        assert_eq!(StopSignal::Terminate.exit_status(), 143);
        assert_eq!(StopSignal::Hangup.exit_status(), 130);
        assert_eq!(StopSignal::Interrupt.how(), "interrupted");
        assert_eq!(StopSignal::Terminate.how(), "stopped (SIGTERM)");
        assert_eq!(
            StopSignal::Interrupt.what_happened(),
            "interrupted (Ctrl-C)"
        );
        assert_eq!(StopSignal::Terminate.what_happened(), "stopped (SIGTERM)");
        for s in [
            StopSignal::Interrupt,
            StopSignal::Terminate,
            StopSignal::Hangup,
        ] {
            assert_ne!(s.code(), 0, "0 means no signal yet");
        }
    }
}
