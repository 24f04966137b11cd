//! A session: the control channel and a connected data path of one role, past the Ready
//! barrier, and what its drivers ([`crate::RdmaSink`], [`crate::RdmaSrc`]) share: the wait
//! that multiplexes both, and the attribution of a data-path failure to the peer's words.
//!
//! Set-up lives beside it: [`handshake`] drives the core's handshake state machine over the
//! bootstrap connection, [`choice`] picks the transport.

mod attempt_queue;
mod choice;
pub(crate) mod handshake;
pub(crate) mod resume;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::net::iface::PathInfo;
use crate::net::wait::{wait_any, Interest};
use crate::net::{ControlChannel, Received};
use crate::proto::{Checksum, Hello, Role, TransportKind};
use crate::roce::DeviceChoice;
use crate::session_core::Explanation;
use crate::transport::RolePath;
use crate::{Error, Result};

pub(crate) use handshake::PendingHello;

/// How long one wait slice lasts before the stop flag is checked again (also while a handshake
/// waits for the peer's hello or Ready).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// What was negotiated and chosen for a session (for logs, summaries and `--json`).
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The transport in use.
    pub transport: TransportKind,
    /// Source address and interface toward the peer.
    pub path: PathInfo,
    /// The RDMA device, port and GID, when an RDMA transport runs.
    pub device: Option<DeviceChoice>,
    /// Our hello.
    pub(crate) local: Hello,
    /// The peer's hello.
    pub(crate) peer: Hello,
    /// The data path's MTU, when the transport has one (RDMA: the path MTU of the QP).
    pub(crate) mtu: Option<u32>,
    /// Why `auto` runs this transport rather than the first one it tried (the RDMA transport
    /// that could not start, or why there was no RoCE v2 GID); `None` when the transport was
    /// named or auto's first choice started.
    pub fallback: Option<String>,
}

impl SessionInfo {
    /// The perftest-style block printed at start: what was chosen and negotiated.
    pub fn describe(&self) -> String {
        let iface = self.path.interface.as_deref().unwrap_or("?");
        let mut s = format!(
            "transport {} | source {} ({iface}) -> peer {} | credits {} | max message {} bytes",
            self.transport,
            self.path.source,
            self.path.peer,
            self.credits(),
            self.max_msg_size()
        );
        if self.checksum() != Checksum::None {
            s.push_str(&format!(" | checksum {}", self.checksum()));
        }
        match self.resume_timeout() {
            Some(t) => s.push_str(&format!(" | resume {:.1} s", t.as_secs_f64())),
            None => s.push_str(" | resume off"),
        }
        if let Some(d) = &self.device {
            s.push_str(&format!(
                " | device {} port {} gid-index {} gid {} netdev {}",
                d.device,
                d.port,
                d.gid_index,
                d.gid_string(),
                d.netdev.as_deref().unwrap_or("-")
            ));
        }
        s
    }

    /// The data path's MTU in bytes, when the transport has one (RDMA transports).
    pub fn mtu(&self) -> Option<u32> {
        self.mtu
    }

    /// The window: the receiver's slot count.
    pub fn credits(&self) -> u16 {
        match self.local.role {
            Role::Receiver => self.local.credits,
            Role::Sender => self.peer.credits,
        }
    }

    /// How long a broken session tries to resume (the shorter of both ends' times); `None`
    /// when it does not resume.
    pub fn resume_timeout(&self) -> Option<Duration> {
        resume::negotiated_timeout(&self.local, &self.peer)
    }

    /// The check each message carries (both ends agreed on it).
    pub fn checksum(&self) -> Checksum {
        self.local.checksum
    }

    /// The largest message this session carries: the smaller of both ends' limits.
    pub fn max_msg_size(&self) -> u32 {
        self.local.max_msg_size.min(self.peer.max_msg_size)
    }
}

/// An established session: control channel plus connected data path of role `P`, past the
/// Ready barrier.
#[derive(Debug)]
pub(crate) struct Session<P: RolePath + ?Sized> {
    pub(crate) control: ControlChannel,
    pub(crate) transport: Box<P>,
    /// The slots the role keeps (a sender's staging slots; a receiver's are posted).
    pub(crate) slots: Vec<P::Slot>,
    pub(crate) info: SessionInfo,
    pub(crate) config: Config,
    /// How the session resumes after a break; `None` when it does not (either end's
    /// `--resume-timeout 0`, or a transport that cannot).
    pub(crate) resume: Option<resume::Resumption>,
}

impl<P: RolePath + ?Sized> Session<P> {
    /// A data-path failure is often the visible half of the peer ending the session (a Reject
    /// or a closed control connection that has not been read yet): reads the control channel
    /// for as long as the core's [`Explanation`] says, and reports what it decides.
    /// `messages` is the count for that error.
    pub(crate) fn explain(&mut self, e: Error, role: Role, messages: u64) -> Error {
        let Some(mut explanation) = Explanation::start(&e, role, Instant::now()) else {
            return e;
        };
        // A control connection already closed answers at once (its close is sticky, after any
        // message still buffered), so a peer whose close was seen first is still the cause.
        loop {
            match self.control.recv_until(explanation.poll_timeout()) {
                Ok(Received::Message(msg)) => {
                    if let Some(explained) = explanation.on_message(msg) {
                        return explained.into_error(messages);
                    }
                }
                Ok(Received::Closed(lost)) => {
                    return explanation.on_control_closed(lost).into_error(messages)
                }
                Ok(Received::Nothing) | Err(_) => break,
            }
        }
        explanation.unexplained(e, messages)
    }

    /// Sleeps until the control channel (when `watch_control`) or the transport (when
    /// `watch_data`) may have news, `until` passes, or a short slice has passed, whichever is
    /// first; `now` is the caller's reading of the clock just before (a clock read is a system
    /// call on some machines: a wait costs one, not two). Returns whether the control channel
    /// may be readable. A descriptor at end of file must not be watched (it is always
    /// readable): callers pass `false` for it. Returns [`Error::Interrupted`] when the stop flag
    /// is set and `honor_stop` is.
    pub(crate) fn wait(
        &mut self,
        now: Instant,
        until: Option<Instant>,
        watch_control: bool,
        watch_data: bool,
        honor_stop: bool,
    ) -> Result<bool> {
        if honor_stop && self.config.stopped() {
            return Err(Error::Interrupted);
        }
        if resume::poll_attempt(&mut self.resume) {
            return Err(resume::attempt_marker());
        }
        let slice = match until {
            Some(t) => t.saturating_duration_since(now).min(WAIT_SLICE),
            None => WAIT_SLICE,
        };
        if slice.is_zero() {
            return Ok(watch_control);
        }
        let control = Interest::read(self.control.fd());
        if watch_data && self.transport.before_wait()? {
            // Completions came in while the transport armed its notification: no sleep.
            let control_ready = watch_control && wait_any([control], Duration::ZERO)? != 0;
            return Ok(control_ready);
        }
        let data = if watch_data {
            self.transport.wait_handle().map(|h| Interest {
                fd: h.fd,
                readable: true,
                writable: h.writable,
            })
        } else {
            None
        };
        let (control_ready, data_ready) = match (watch_control, data) {
            (true, Some(data)) => {
                let ready = wait_any([control, data], slice)?;
                (ready & 1 != 0, ready & 2 != 0)
            }
            (true, None) => (wait_any([control], slice)? != 0, false),
            (false, Some(data)) => (false, wait_any([data], slice)? != 0),
            (false, None) => {
                wait_any([], slice)?;
                (false, false)
            }
        };
        if data_ready {
            self.transport.on_wakeup();
        }
        Ok(control_ready)
    }
}

pub(super) fn ipv4(ip: IpAddr) -> Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{v6} is IPv6; RoCE v2 discovery needs an IPv4 bootstrap address"
            ))
        }),
    }
}
