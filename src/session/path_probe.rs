//! Whether a path the data path left out is back, asked before a client resumes to try it
//! (`--paths`; the lifecycle's rule 8, [`crate::transport::striped::parking`]). Resuming to
//! try a path that is still down would stall the whole session: a tcp lane's connect waits
//! for its deadline, an RDMA lane's first send for its retries. So the client asks the path
//! first, without waiting for the answer.
//!
//! Rules kept here (the clock is an argument):
//! - a probe is one TCP connect, non-blocking, from the path's own source address to the
//!   server's address on that path, at the server's bootstrap port. Every path left out is
//!   probed at once;
//! - an answer proves that the path carries packets both ways: a connection (closed at once,
//!   without a byte: the server's listener sees a stranger that said nothing) or a refusal
//!   (nothing listens on that address: the server's kernel answered). Any answer from one
//!   path: resume;
//! - no answer within [`PROBE_TIMEOUT`] from any, or every one failing otherwise (no route,
//!   host or network unreachable): the paths are still down, and their retry is postponed
//!   (their backoff doubles);
//! - a probe never blocks: it is looked at where the driver looks for a due retry, and says
//!   when to look again ([`PROBE_POLL`]).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::net::wait::{wait_any, Interest};

/// How long a probe waits for an answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a probe under way is looked at.
pub(crate) const PROBE_POLL: Duration = Duration::from_millis(20);

/// One path's probe under way.
#[derive(Debug)]
struct PathConnect {
    path: usize,
    socket: Socket,
}

/// The probes of the paths left out, from one due retry.
#[derive(Debug)]
pub(crate) struct Probe {
    connects: Vec<PathConnect>,
    deadline: Instant,
    /// When the probes were last looked at.
    polled: Instant,
}

/// What a probe came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeVerdict {
    /// No answer yet: look again at [`Probe::poll_at`].
    Pending,
    /// A path answered: resume to bring it back.
    Answered {
        /// The first path that answered.
        path: usize,
    },
    /// No path answered in time: postpone their retry.
    Silent,
}

impl Probe {
    /// Starts a probe of each path in `paths` (path number, our source, the server's address
    /// on it) toward the server's bootstrap `port`, at `now`.
    pub(crate) fn start(
        paths: impl IntoIterator<Item = (usize, Ipv4Addr, Ipv4Addr)>,
        port: u16,
        now: Instant,
    ) -> Self {
        let connects = paths
            .into_iter()
            .filter_map(|(path, source, server)| {
                match start_connect(source, SocketAddrV4::new(server, port)) {
                    Ok(socket) => Some(PathConnect { path, socket }),
                    Err(e) => {
                        log::info!("path {path}: cannot ask whether it is back: {e}");
                        None
                    }
                }
            })
            .collect();
        Self {
            connects,
            deadline: now + PROBE_TIMEOUT,
            polled: now,
        }
    }

    /// Looks at the probes at `now`.
    pub(crate) fn poll(&mut self, now: Instant) -> ProbeVerdict {
        self.polled = now;
        let mut i = 0;
        while i < self.connects.len() {
            match answered(&self.connects[i].socket) {
                Some(true) => {
                    return ProbeVerdict::Answered {
                        path: self.connects[i].path,
                    }
                }
                Some(false) => {
                    self.connects.swap_remove(i);
                }
                None => i += 1,
            }
        }
        if self.connects.is_empty() || now >= self.deadline {
            ProbeVerdict::Silent
        } else {
            ProbeVerdict::Pending
        }
    }

    /// When to look at the probes again.
    pub(crate) fn poll_at(&self) -> Instant {
        (self.polled + PROBE_POLL).min(self.deadline)
    }
}

/// A non-blocking connect from `source` to `server`.
fn start_connect(source: Ipv4Addr, server: SocketAddrV4) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    socket.bind(&SockAddr::from(SocketAddr::V4(SocketAddrV4::new(
        source, 0,
    ))))?;
    match socket.connect(&SockAddr::from(SocketAddr::V4(server))) {
        Ok(()) => Ok(socket),
        Err(e) if e.raw_os_error() == Some(nix::libc::EINPROGRESS) => Ok(socket),
        // Refused at once (a local server's kernel): an answer, kept for the poll.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(socket),
        Err(e) => Err(e),
    }
}

/// `Some(true)`: the server's side answered (connected or refused); `Some(false)`: the
/// connect failed otherwise (unreachable); `None`: no answer yet.
fn answered(socket: &Socket) -> Option<bool> {
    let interest = Interest {
        fd: socket.as_fd(),
        readable: false,
        writable: true,
    };
    match wait_any([interest], Duration::ZERO) {
        Ok([true]) => {}
        Ok([false]) => return None,
        Err(_) => return Some(false),
    }
    match socket.take_error() {
        Ok(None) => Some(true),
        Ok(Some(e)) => Some(e.kind() == std::io::ErrorKind::ConnectionRefused),
        Err(_) => Some(false),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// A port with a listener answers with a connection; a port without one with a refusal:
    /// both are answers. (Loopback only: an address that never answers is the VM's and the
    /// network namespace tests' to show.)
    #[test]
    fn a_listener_or_a_refusal_is_an_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap().port();
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let lo = Ipv4Addr::LOCALHOST;
        for port in [open, closed] {
            let t0 = Instant::now();
            let mut probe = Probe::start([(1, lo, lo)], port, t0);
            let mut verdict = probe.poll(t0);
            while verdict == ProbeVerdict::Pending {
                std::thread::sleep(PROBE_POLL);
                verdict = probe.poll(Instant::now());
            }
            assert_eq!(verdict, ProbeVerdict::Answered { path: 1 }, "port {port}");
        }
    }

    /// A path whose source address is not ours cannot be probed: no answer, so the retry is
    /// postponed; so is one with no answer by the deadline.
    #[test]
    fn no_answer_by_the_deadline_or_no_probe_at_all_is_silence() {
        let t0 = Instant::now();
        let mut none = Probe::start(
            [(1, Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::LOCALHOST)],
            9,
            t0,
        );
        assert_eq!(none.poll(t0), ProbeVerdict::Silent);
        let mut empty = Probe::start([], 9, t0);
        assert_eq!(empty.poll(t0 + PROBE_TIMEOUT), ProbeVerdict::Silent);
        assert!(empty.poll_at() <= t0 + PROBE_TIMEOUT);
    }
}
