//! A session's life after a break, without I/O (time is an argument): whether a failure is a
//! break, whether the session resumes, when it gives up and with which error, what the peer is
//! told. The drivers (`src/session/resume.rs`) carry out its steps and report what happened.
//!
//! Running → Broken → Reconnecting (client) or Parked (server) → Resumed (Running again) or
//! Ended. Rules kept here:
//! 1. a failure is a *break* only when the path failed under the session: the peer vanished
//!    ([`ErrorKind::PeerLost`]) or the data path broke ([`ErrorKind::PathBroken`]). A Reject, a
//!    violation, a refusal, a checksum, a local shortage, the stop flag and our own bugs end the
//!    session as they end one that does not resume: resuming would meet them again;
//! 2. a client's attempt arriving at a running server session is an event, not a failure: the
//!    session answers it, and if the attempt fails before the client proved the secret (and so
//!    before anything was torn down), nothing changed and the session carries on;
//! 3. a server that found a break itself shuts its side of the old control connection, so that
//!    its client, which may have seen nothing (on RC only the sending side sees its queue pair
//!    fail), notices and reconnects; not when the role says the peer would misread it (a sender
//!    lingering after Finish would take it for the receiver letting it go);
//! 4. the client reconnects at once and then on [`Reconnect`]'s doubling schedule; the server
//!    stays [`Parked`] and takes its client's attempts; both for the resume timeout after the
//!    break. An attempt the listener hands over after that is refused;
//! 5. the stall rule: a break that comes back with no message through since the first of the
//!    latest breaks that made none ends the session once the resume timeout passed since that
//!    first one, as a peer that never comes back does;
//! 6. a client told that the server has no session with its id gives up at once (nothing can
//!    change that answer); a parked server session whose place a new client took ends with
//!    [`Error::TakenOver`];
//! 7. giving up keeps the break's own error (a failed data path keeps its kind and exit
//!    status); a lost peer's reason gains what the attempts saw, with the break's count, or the
//!    role's progress where the break had none (an attempt that arrived and then failed);
//! 8. a client whose data path left a path out (`--paths`: it broke) resumes, unbroken, when
//!    that path is due to be tried again: the client tears down and reconnects as after a
//!    break (so the server sees an attempt arrive, rule 2), on the same schedule and timeout,
//!    but it is not a break: the stall rule does not count it. Only the client starts one:
//!    the server's own reasons reach it as a break of the connection.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::resume::{Parked, Reconnect, ReconnectStep};
use crate::{Error, ErrorKind};

/// What set a resume going.
#[derive(Debug)]
pub(crate) enum Trigger {
    /// An operation failed with this error.
    Failed(Error),
    /// Server: a client's resume attempt arrived while the session ran (rule 2).
    AttemptArrived,
    /// Client: a path the data path left out is due to be tried again (rule 8).
    RetryPaths,
}

/// A resume that no failure set going: an event a driver's wait reports, never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Planned {
    /// Server: a client's resume attempt waits for this session (rule 2).
    AttemptArrived,
    /// Client: a path left out of the data path is due to be tried again (rule 8).
    RetryPaths,
}

impl From<Planned> for Trigger {
    fn from(planned: Planned) -> Self {
        match planned {
            Planned::AttemptArrived => Trigger::AttemptArrived,
            Planned::RetryPaths => Trigger::RetryPaths,
        }
    }
}

/// Which end of the bootstrap connection the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Reconnects to the server.
    Client,
    /// Takes the client's attempts from the listener.
    Server,
}

/// What the driver does next while the session resumes.
#[derive(Debug)]
pub(crate) enum LifeStep {
    /// Shut our side of the old control connection (rule 3); then ask again.
    ShutControlWrite,
    /// Client: tear the old data path down and reconnect now; the attempt fails at `deadline`.
    Reconnect {
        /// When this attempt counts as failed.
        deadline: Instant,
    },
    /// Client: nothing until `until`. Server: take the next attempt the listener hands over,
    /// waiting at most until `until`.
    Wait {
        /// When to ask again.
        until: Instant,
    },
    /// The session ends with this error (rules 4-7).
    GiveUp(Error),
}

/// How an attempt that failed leaves the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterAttempt {
    /// Only an attempt on a running session failed, before anything changed: carry on
    /// (rule 2).
    CarryOn,
    /// Still broken: ask for the next step.
    KeepResuming,
}

/// What a server that found a break itself does with the old control connection (rule 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OldControl {
    /// Shuts its write side, so that a client that saw nothing of the break (on RC only the
    /// sending side sees its QP fail) notices and reconnects.
    Shut,
    /// Leaves it as it is: a sender lingering after Finish would take the close for the
    /// receiver letting it go.
    Left,
}

/// Whether a resume attempt that failed had torn our old data path down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OldPath {
    /// Torn down: the session cannot carry on on it.
    TornDown,
    /// Still as it was (a server keeps it until the client has proved the secret).
    Intact,
}

/// One session's life after breaks. See the module's rules.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    end: End,
    timeout: Duration,
    /// The progress count at the first of the latest breaks that made none, and when (rule 5).
    stalled: Option<(u64, Instant)>,
    resuming: Option<Resuming>,
}

/// A resume under way.
#[derive(Debug)]
struct Resuming {
    /// The failure that broke the session; `None` when only an attempt arrived.
    cause: Option<Error>,
    started: Instant,
    progress: u64,
    /// Server: only an attempt arrived and nothing was torn down yet (rule 2).
    live: bool,
    /// The old control connection is still to be shut (rule 3).
    shut_control: bool,
    schedule: Schedule,
    /// Attempts the server took (the client's are its schedule's).
    taken: u32,
    last_failure: Option<String>,
    /// A final error decided by an event (rules 4 and 6), given at the next step.
    ended: Option<Error>,
}

#[derive(Debug)]
enum Schedule {
    Reconnect(Reconnect),
    Parked(Parked),
}

impl Lifecycle {
    /// The life of a session at `end` that resumes within `timeout` of a break.
    pub(crate) fn new(end: End, timeout: Duration) -> Self {
        Self {
            end,
            timeout,
            stalled: None,
            resuming: None,
        }
    }

    /// Rule 1: whether `e` is a break a resume may repair.
    pub(crate) fn is_break(e: &Error) -> bool {
        matches!(e.kind(), ErrorKind::PeerLost | ErrorKind::PathBroken)
    }

    /// When the resume under way started (`None`: the session runs).
    pub(crate) fn resuming_since(&self) -> Option<Instant> {
        self.resuming.as_ref().map(|r| r.started)
    }

    /// `trigger` at `now`, the role having made `progress` (a sender: messages released; a
    /// receiver: messages arrived); `old_control`: what the role lets a server do with its old
    /// control connection (rule 3). `Err`: the session does not resume; the operation fails
    /// with that error (rules 1 and 5). `Ok`: ask [`Lifecycle::poll_step`].
    pub(crate) fn on_trigger(
        &mut self,
        trigger: Trigger,
        progress: u64,
        old_control: OldControl,
        now: Instant,
    ) -> Result<(), Error> {
        let cause = match trigger {
            Trigger::Failed(e) if !Self::is_break(&e) => return Err(e),
            Trigger::Failed(e) => Some(e),
            Trigger::AttemptArrived if self.end == End::Client => {
                return Err(Error::Internal(
                    "a client session was told a resume attempt arrived".into(),
                ))
            }
            Trigger::AttemptArrived => None,
            Trigger::RetryPaths if self.end == End::Server => {
                return Err(Error::Internal(
                    "a server session was told to retry a path (only a client does)".into(),
                ))
            }
            Trigger::RetryPaths => {
                log::info!("a path left out is due to be tried again: resuming to bring it back");
                None
            }
        };
        let live = cause.is_none() && self.end == End::Server;
        if let Some(e) = &cause {
            let stalled_out = match self.stalled {
                Some((count, since)) if count == progress => {
                    now.saturating_duration_since(since) >= self.timeout
                }
                _ => {
                    self.stalled = Some((progress, now));
                    false
                }
            };
            if stalled_out {
                let why = "it broke again with no message through since a resume";
                return Err(gave_up(cause, progress, 0, self.timeout, Some(why.into())));
            }
            log::warn!(
                "the session broke ({}); resuming (for up to {:.1} s)",
                e.chain(),
                self.timeout.as_secs_f64()
            );
        }
        let schedule = match self.end {
            End::Client => Schedule::Reconnect(Reconnect::new(now, self.timeout)),
            End::Server => Schedule::Parked(Parked::new(now, self.timeout)),
        };
        self.resuming = Some(Resuming {
            cause,
            started: now,
            progress,
            live,
            shut_control: !live && self.end == End::Server && old_control == OldControl::Shut,
            schedule,
            taken: 0,
            last_failure: None,
            ended: None,
        });
        Ok(())
    }

    /// What to do at `now`; `None` when no resume is under way (the session runs: nothing to
    /// do). After [`LifeStep::GiveUp`] the session has ended.
    pub(crate) fn poll_step(&mut self, now: Instant) -> Option<LifeStep> {
        let r = self.resuming.as_mut()?;
        if std::mem::take(&mut r.shut_control) {
            return Some(LifeStep::ShutControlWrite);
        }
        if let Some(e) = r.ended.take() {
            self.resuming = None;
            return Some(LifeStep::GiveUp(e));
        }
        let attempts = match &mut r.schedule {
            Schedule::Reconnect(reconnect) => match reconnect.step(now) {
                ReconnectStep::Attempt { attempt_deadline } => {
                    return Some(LifeStep::Reconnect {
                        deadline: attempt_deadline,
                    })
                }
                ReconnectStep::Wait { until } => return Some(LifeStep::Wait { until }),
                ReconnectStep::GiveUp => reconnect.attempts(),
            },
            Schedule::Parked(parked) if parked.admits(now) => {
                return Some(LifeStep::Wait {
                    until: parked.poll_timeout(),
                })
            }
            Schedule::Parked(_) => r.taken,
        };
        let r = self.resuming.take()?;
        Some(LifeStep::GiveUp(gave_up(
            r.cause,
            r.progress,
            attempts,
            self.timeout,
            r.last_failure,
        )))
    }

    /// Server: an attempt was taken at `now`. `false`: it came too late (rule 4): refuse it;
    /// the next step gives up.
    pub(crate) fn on_attempt_taken(&mut self, now: Instant) -> bool {
        let Some(r) = self.resuming.as_mut() else {
            return false;
        };
        match &r.schedule {
            Schedule::Parked(parked) if parked.admits(now) => {
                r.taken += 1;
                true
            }
            _ => false,
        }
    }

    /// The attempt failed at `now` for `why`; `old_path`: whether our old data path was torn
    /// down in it (a server tears it down only after the client's proof).
    pub(crate) fn on_attempt_failed(
        &mut self,
        why: String,
        old_path: OldPath,
        now: Instant,
    ) -> AfterAttempt {
        let Some(r) = self.resuming.as_mut() else {
            return AfterAttempt::KeepResuming;
        };
        if r.live && old_path == OldPath::Intact {
            self.resuming = None;
            return AfterAttempt::CarryOn;
        }
        r.live = false;
        r.last_failure = Some(why);
        if let Schedule::Reconnect(reconnect) = &mut r.schedule {
            reconnect.on_attempt_failed(now);
        }
        AfterAttempt::KeepResuming
    }

    /// Client: the server said it has no session with our id (rule 6).
    pub(crate) fn on_no_session(&mut self, server: SocketAddr) {
        let detail = format!(
            "not resuming: {server} has no session with our id (it restarted, or the session \
ended or gave its place to a new client)"
        );
        self.end_with(|cause, _| lost_for_good(cause, &detail));
    }

    /// Server: a new client took the parked session's place at `now` (rule 6).
    pub(crate) fn on_taken_over(&mut self, now: Instant) {
        self.end_with(|_, r| {
            Some(Error::TakenOver {
                messages: r.progress,
                waited: now.saturating_duration_since(r.started).as_secs_f64(),
            })
        });
    }

    /// Resumed at `now`: the session runs again. Returns how long the resume took.
    pub(crate) fn on_resumed(&mut self, now: Instant) -> Duration {
        self.resuming
            .take()
            .map_or(Duration::ZERO, |r| now.saturating_duration_since(r.started))
    }

    /// Ends the resume under way with the error `decide` makes of its cause.
    fn end_with(&mut self, decide: impl FnOnce(Option<Error>, &Resuming) -> Option<Error>) {
        if let Some(r) = self.resuming.as_mut() {
            let cause = r.cause.take();
            let progress = r.progress;
            let e =
                decide(cause, r).unwrap_or_else(|| gave_up(None, progress, 0, self.timeout, None));
            r.ended = Some(e);
        }
    }
}

/// Rule 7: the resume timeout passed (or the stall rule ended it): the break's own error, a
/// lost peer's with what the attempts saw (`progress`: the count where the break had none).
fn gave_up(
    cause: Option<Error>,
    progress: u64,
    attempts: u32,
    timeout: Duration,
    last: Option<String>,
) -> Error {
    let detail = format!(
        "this end gave up: not resumed within {:.1} s, the resume timeout ({attempts} attempt(s){})",
        timeout.as_secs_f64(),
        last.map(|l| format!("; the last: {l}")).unwrap_or_default()
    );
    match cause {
        None => {
            log::warn!("{detail}");
            Error::PeerLost {
                reason: format!("a resume that no break set going failed; {detail}"),
                messages: progress,
                cause: None,
            }
        }
        Some(cause) => lost_for_good(Some(cause), &detail).unwrap_or(Error::Closed),
    }
}

/// The break `cause` ends the session: logs `detail` and adds it to a lost peer's reason.
fn lost_for_good(cause: Option<Error>, detail: &str) -> Option<Error> {
    log::warn!("{detail}");
    Some(match cause? {
        Error::PeerLost {
            reason,
            messages,
            cause,
        } => Error::PeerLost {
            reason: format!("{reason}; {detail}"),
            messages,
            cause,
        },
        // A failed data path keeps its own error (and exit status); the log says the rest.
        other => other,
    })
}

#[cfg(test)]
mod tests;
