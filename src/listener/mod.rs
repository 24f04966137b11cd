//! The server side: [`Listener`] accepts clients, each as an [`Incoming`] session to accept
//! in a role or refuse.
//!
//! A background acceptor reads each new connection's hello (and, with a key, its
//! authentication) on a thread of its own, so a silent or garbage peer never delays a real
//! client. At most [`MAX_PENDING_HANDSHAKES`] hellos are read at once; when that many are in
//! progress, a new connection takes the place of one that has not completed its hello, which
//! is closed: the oldest that has not authenticated (with a key), else the oldest. A real
//! client completes its hello within a round trip or two, so a flood of silent connections
//! pushes out older strangers, not it, unless more than [`MAX_PENDING_HANDSHAKES`] new ones
//! arrive within that time; with a key, a client that proved it is passed over for strangers,
//! and a stranger holds its place for the core's authentication window at most (two seconds:
//! one round trip with room for a loaded host). The evictions are logged once per second with
//! a count. At most [`MAX_QUEUED`] valid hellos wait for
//! [`Listener::accept`] (beyond that a client is refused as busy), and when `accept()` fails for
//! lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) the acceptor backs off
//! instead of spinning, logging once per second with the count.

pub(crate) mod attempt_queue;
pub(crate) mod resume_registry;

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;

use nix::sys::eventfd::{EfdFlags, EventFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{
    sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError,
};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::log_text::RateLimitedLog;
use crate::net::bootstrap;
use crate::net::wait::{wait_any, Interest};
use crate::proto::{Role, AUTH_PREFIX};
use crate::session::handshake::{read_hello, Opening};
use crate::session::{PendingHello, Session};
use crate::time::deadline_after;
use crate::{Error, RdmaSink, RdmaSrc, Result};
use resume_registry::{route_attempt, ParkedSessions, ResumeRegistry};

/// Hellos read at the same time; more connections are closed on arrival.
pub const MAX_PENDING_HANDSHAKES: usize = 64;
/// Valid hellos waiting for [`Listener::accept`]; more clients are refused as busy.
pub const MAX_QUEUED: usize = 16;
/// How often the acceptor looks at its stop flag, and the longest back-off.
const SLICE: Duration = Duration::from_millis(200);
/// How often [`Listener::accept`] asks the configuration whether to stop (Ctrl-C is seen within
/// this time).
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// Listens for clients on one address.
///
/// ```no_run
/// # fn main() -> rdma_container::Result<()> {
/// use rdma_container::{Config, Listener};
/// let listener = Listener::bind("10.0.0.2:5000".parse().unwrap(), &Config::default())?;
/// let mut src = listener.accept()?.accept_src()?;
/// while let Some(msg) = src.recv()? {
///     println!("{} bytes", msg.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Listener {
    local: SocketAddr,
    config: Config,
    incoming: Receiver<PendingHello>,
    /// The sessions accepted here that resume, for the acceptor to hand them their clients'
    /// resume attempts (as long as this listener lives).
    resumes: ResumeRegistry,
    closed: Arc<AtomicBool>,
    busy_refusals: Arc<AtomicU64>,
    /// Its count is the number of clients refused for not proving the key.
    unauthenticated: Arc<Mutex<RateLimitedLog>>,
    /// Counts hellos queued for `accept` (written by the hello threads): the readiness
    /// descriptor ([`Listener::try_accept`]).
    hello_ready: Arc<EventFd>,
}

impl Listener {
    /// Listens on `addr` (use the RoCE-network address: the device is chosen from it) and
    /// starts reading hellos in the background.
    ///
    /// # Errors
    /// The configuration is invalid, or the address cannot be bound.
    pub fn bind(addr: SocketAddr, config: &Config) -> Result<Self> {
        config.validate()?;
        let listener = bootstrap::listen(addr)?;
        let local = listener.local_addr().map_err(|source| Error::Socket {
            what: "getsockname",
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| Error::Socket {
                what: "set non-blocking",
                source,
            })?;
        if config.auth_key.is_none() && !local.ip().is_loopback() {
            log::warn!(
                "listening on {local} without an authentication key: anyone who reaches this \
port can send to this server (set --auth-key-file / Config::auth_key on both ends)"
            );
        }
        let (tx, rx) = sync_channel(MAX_QUEUED);
        let closed = Arc::new(AtomicBool::new(false));
        let busy_refusals = Arc::new(AtomicU64::new(0));
        let unauthenticated = Arc::new(Mutex::new(RateLimitedLog::new(
            "refused a client that did not authenticate",
        )));
        let resumes = ResumeRegistry::default();
        let hello_ready = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
                Error::Socket {
                    what: "eventfd",
                    source: e.into(),
                }
            })?,
        );
        let acceptor = Acceptor {
            hello_ready: hello_ready.clone(),
            resumes: resumes.clone(),
            listener,
            config: config.clone(),
            queue: tx,
            closed: closed.clone(),
            pending: Arc::new(Mutex::new(HandshakeTable::default())),
            unauthenticated: unauthenticated.clone(),
            ignored: Arc::new(Mutex::new(RateLimitedLog::new(
                "ignored a connection whose handshake failed",
            ))),
            busy_refusals: busy_refusals.clone(),
        };
        std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || acceptor.run())
            .map_err(|source| Error::Socket {
                what: "start the acceptor thread",
                source,
            })?;
        Ok(Self {
            local,
            config: config.clone(),
            incoming: rx,
            resumes,
            closed,
            busy_refusals,
            unauthenticated,
            hello_ready,
        })
    }

    /// The address the listener is bound to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The sessions accepted here that wait for their client to resume, for giving such a
    /// session's place to a new client (docs/design.md, "A new client and a parked session").
    pub fn parked_sessions(&self) -> ParkedSessions {
        ParkedSessions::new(self.resumes.clone())
    }

    /// Clients refused as busy so far because [`MAX_QUEUED`] hellos already waited for
    /// [`Listener::accept`] (for metrics).
    pub fn busy_refusals(&self) -> u64 {
        self.busy_refusals.load(Ordering::Relaxed)
    }

    /// Clients refused so far because they did not prove the pre-shared key (no key, another
    /// key, a replayed proof), with a key set (for metrics).
    pub fn auth_refusals(&self) -> u64 {
        lock(&self.unauthenticated).count()
    }

    /// Waits for the next client with a valid hello.
    ///
    /// # Errors
    /// [`Error::Interrupted`] when the configuration's stop flag is set.
    pub fn accept(&self) -> Result<Incoming> {
        loop {
            if let Some(incoming) = self.accept_timeout(ACCEPT_SLICE)? {
                return Ok(incoming);
            }
        }
    }

    /// Like [`Listener::accept`], giving up after `timeout` with `Ok(None)`.
    ///
    /// # Errors
    /// [`Error::Interrupted`] when the configuration's stop flag is set.
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Option<Incoming>> {
        let deadline = deadline_after(Instant::now(), timeout);
        loop {
            if self.config.stopped() {
                return Err(Error::Interrupted);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left.min(ACCEPT_SLICE)) {
                Ok(pending) => {
                    return Ok(Some(Incoming {
                        pending,
                        config: self.config.clone(),
                        resumes: self.resumes.clone(),
                    }))
                }
                Err(RecvTimeoutError::Timeout) if left <= ACCEPT_SLICE => return Ok(None),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Internal("the acceptor thread stopped".to_owned()))
                }
            }
        }
    }

    /// Like [`Listener::accept`], without waiting: the next client whose hello has arrived.
    /// Accepting it in a role ([`Incoming::accept_src`], ...) still runs the rest of its
    /// handshake, a round trip or two bounded by the handshake timeout.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when no client waits (wait until the listener's descriptor, its
    /// `AsFd`, is readable: it is while a hello waits; call until `WouldBlock`).
    pub fn try_accept(&self) -> Result<Incoming> {
        if let Some(incoming) = self.take_queued()? {
            return Ok(incoming);
        }
        // Clear the count, then look again: a hello queued after the first look wrote its
        // count after it, so either it is here now or the descriptor stays readable.
        let _ = self.hello_ready.read();
        self.take_queued()?.ok_or(Error::WouldBlock)
    }

    fn take_queued(&self) -> Result<Option<Incoming>> {
        match self.incoming.try_recv() {
            Ok(pending) => Ok(Some(Incoming {
                pending,
                config: self.config.clone(),
                resumes: self.resumes.clone(),
            })),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => {
                Err(Error::Internal("the acceptor thread stopped".to_owned()))
            }
        }
    }

    /// Accepts both directions with one client that called [`crate::duplex::connect`]: its
    /// sending session first (we receive on it), then its receiving session from the same
    /// address (we send on it). Other clients arriving in between are refused as busy.
    ///
    /// # Errors
    /// Either session failed to set up, or the second did not arrive within the handshake
    /// timeout.
    pub fn accept_duplex(&self) -> Result<(RdmaSink, RdmaSrc)> {
        self.duplex(None)
    }

    /// Like [`Listener::accept_duplex`], each session with the client's credits and largest
    /// message size ([`Incoming::adopt_peer_settings`]), as a benchmark server wants.
    ///
    /// # Errors
    /// As for [`Listener::accept_duplex`].
    pub fn accept_duplex_with_peer_settings(&self) -> Result<(RdmaSink, RdmaSrc)> {
        self.duplex(Some(u16::MAX))
    }

    /// Like [`Listener::accept_duplex_with_peer_settings`], the client's credits capped at
    /// `max_credits` (a benchmark server whose operator set its own: the receiving end decides).
    ///
    /// # Errors
    /// As for [`Listener::accept_duplex`].
    pub fn accept_duplex_with_peer_settings_up_to(
        &self,
        max_credits: u16,
    ) -> Result<(RdmaSink, RdmaSrc)> {
        self.duplex(Some(max_credits))
    }

    /// The first step of [`Listener::accept_duplex_with_peer_settings_up_to`]: the client's
    /// sending session accepted (we receive on it), its receiving session not yet. A server
    /// that must read the client's first message before it takes the second session reads it
    /// from [`DuplexStart::src`], then calls [`DuplexStart::complete`]; a client that opened
    /// one session only (`doctor --probe` against a bench server) is served from it alone.
    ///
    /// # Errors
    /// The session failed to set up, or [`Error::Interrupted`].
    pub fn start_duplex_with_peer_settings_up_to(&self, max_credits: u16) -> Result<DuplexStart> {
        self.start_duplex(Some(max_credits))
    }

    /// `adopt_up_to`: take the client's settings, its credits at most this many.
    fn duplex(&self, adopt_up_to: Option<u16>) -> Result<(RdmaSink, RdmaSrc)> {
        self.start_duplex(adopt_up_to)?.complete(self)
    }

    fn start_duplex(&self, adopt_up_to: Option<u16>) -> Result<DuplexStart> {
        let mut first = loop {
            let incoming = self.accept()?;
            if incoming.peer_role() == Role::Sender {
                break incoming;
            }
            incoming.refuse("duplex: send on the first session, receive on the second");
        };
        let peer = first.peer_addr().ip();
        if let Some(cap) = adopt_up_to {
            first.adopt_peer_settings();
            first.config.credits = first.config.credits.min(cap);
        }
        Ok(DuplexStart {
            src: first.accept_src()?,
            peer,
            adopt_up_to,
        })
    }
}

/// A duplex session half set up: the client's sending session is accepted and its receiving
/// session is yet to come ([`Listener::start_duplex_with_peer_settings_up_to`]).
#[derive(Debug)]
pub struct DuplexStart {
    src: RdmaSrc,
    peer: std::net::IpAddr,
    adopt_up_to: Option<u16>,
}

impl DuplexStart {
    /// The session we receive on: the client's messages can be read before
    /// [`DuplexStart::complete`].
    pub fn src(&mut self) -> &mut RdmaSrc {
        &mut self.src
    }

    /// The client's address.
    pub fn peer(&self) -> std::net::IpAddr {
        self.peer
    }

    /// The receiving session alone: the client opened no second one.
    pub fn into_src(self) -> RdmaSrc {
        self.src
    }

    /// Accepts the client's receiving session (from the same address, within the handshake
    /// timeout; others arriving meanwhile are refused as busy): both directions.
    ///
    /// # Errors
    /// The second session failed to set up, or did not arrive within the handshake timeout.
    pub fn complete(self, listener: &Listener) -> Result<(RdmaSink, RdmaSrc)> {
        let deadline = deadline_after(Instant::now(), listener.config.handshake_timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(mut incoming) = listener.accept_timeout(left)? else {
                return Err(Error::HandshakeTimeout {
                    peer: SocketAddr::new(self.peer, 0),
                    seconds: listener.config.handshake_timeout.as_secs_f64(),
                    stage: "the duplex client's second session",
                });
            };
            if incoming.peer_addr().ip() == self.peer && incoming.peer_role() == Role::Receiver {
                if let Some(cap) = self.adopt_up_to {
                    incoming.adopt_peer_settings();
                    incoming.config.credits = incoming.config.credits.min(cap);
                }
                return Ok((incoming.accept_sink()?, self.src));
            }
            incoming.refuse("busy: the server is setting up a duplex session; try again later");
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

/// A client whose hello arrived: accept it in a role, or refuse it.
#[derive(Debug)]
pub struct Incoming {
    pending: PendingHello,
    config: Config,
    resumes: ResumeRegistry,
}

impl Incoming {
    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.pending.control.peer_addr()
    }

    /// The role the client asked to play: [`Role::Sender`] means it wants to send to us.
    pub fn peer_role(&self) -> Role {
        self.pending.hello.role
    }

    /// The credits the client configured (its receive slots when it receives).
    pub fn peer_credits(&self) -> u16 {
        self.pending.hello.credits
    }

    /// The queue pairs the client stripes over (`--qps`): the session will have as many.
    pub fn peer_qps(&self) -> u8 {
        self.pending.hello.qps
    }

    /// The largest message the client configured.
    pub fn peer_max_message_size(&self) -> usize {
        self.pending.hello.max_msg_size as usize
    }

    /// Uses the client's credits, largest message size and checksum for this session instead
    /// of the listener's, never above the listener's largest message size: a benchmark server
    /// lets the client choose the queue depth and message size, as perftest's client does.
    pub fn adopt_peer_settings(&mut self) {
        self.config.credits = self.pending.hello.credits;
        self.config.checksum = self.pending.hello.checksum;
        self.config.max_msg_size = self.config.max_msg_size.min(self.peer_max_message_size());
    }

    /// The credits this session will have.
    pub fn credits(&self) -> u16 {
        self.config.credits
    }

    /// Takes the client's credits for this session (a server whose operator did not set its
    /// own: the receiving end decides, and one without a choice takes the sender's).
    pub fn adopt_peer_credits(&mut self) {
        self.config.credits = self.pending.hello.credits;
    }

    /// Sizes this session's slots for the client's largest message when it is below the
    /// listener's: the session's largest message is the smaller of the two anyway, so only the
    /// memory the slots take changes (a server sized for large messages serves a client of
    /// small ones with small slots).
    /// The credits are fitted as the session will fit them anyway: a receiving server posts no
    /// more slots than the sending client can keep in flight.
    pub fn fit_slots_to_peer(&mut self) {
        self.config.max_msg_size = self.config.max_msg_size.min(self.peer_max_message_size());
        if self.peer_role() == Role::Sender {
            self.config.credits = self.config.credits.min(self.peer_credits());
        }
    }

    /// The memory this session's slots take once it is accepted, in bytes: credits times the
    /// slot size times the client's queue pairs (`--qps`: each has its own slots); an upper
    /// bound: a transport may carry less per slot.
    pub fn slot_memory(&self) -> usize {
        usize::from(self.config.credits)
            .saturating_mul(self.config.max_msg_size)
            .saturating_mul(usize::from(self.pending.hello.qps))
    }

    /// Accepts the client as its receiver (the client sends): we become the [`RdmaSrc`], the
    /// source the client's messages come out of, for a client that connected with
    /// [`RdmaSink::connect`] ([`Incoming::peer_role`] is [`Role::Sender`]). The name is the
    /// type we get, not the client's role: `accept_src` receives, [`Incoming::accept_sink`]
    /// sends.
    ///
    /// # Errors
    /// The client does not send, the transports do not match, or the setup failed; the
    /// client is told why.
    pub fn accept_src(self) -> Result<RdmaSrc> {
        RdmaSrc::from_session(Session::accept(
            self.pending,
            &self.config,
            Some(&self.resumes),
        )?)
    }

    /// Accepts the client as its sender (the client receives).
    ///
    /// # Errors
    /// As for [`Incoming::accept_src`].
    pub fn accept_sink(self) -> Result<RdmaSink> {
        RdmaSink::from_session(Session::accept(
            self.pending,
            &self.config,
            Some(&self.resumes),
        )?)
    }

    /// Refuses the client, telling it why (it sees [`Error::Rejected`]).
    pub fn refuse(mut self, reason: &str) {
        self.pending.control.reject(reason);
    }
}

crate::session::readiness::descriptor_of!(
    /// The readiness descriptor: readable while a client's hello waits for
    /// [`Listener::try_accept`] (spurious wake-ups possible; never read it).
    Listener,
    hello_ready
);

/// The background half of a [`Listener`].
struct Acceptor {
    /// Written once per hello queued.
    hello_ready: Arc<EventFd>,
    listener: TcpListener,
    /// Where resume attempts go.
    resumes: ResumeRegistry,
    config: Config,
    queue: SyncSender<PendingHello>,
    closed: Arc<AtomicBool>,
    pending: Arc<Mutex<HandshakeTable>>,
    /// Who tried without the key, logged at most once per second.
    unauthenticated: Arc<Mutex<RateLimitedLog>>,
    /// Connections whose handshake failed otherwise (a stranger's garbage, a Reject, a
    /// timeout), logged at most once per second with the count.
    ignored: Arc<Mutex<RateLimitedLog>>,
    busy_refusals: Arc<AtomicU64>,
}

/// The connections whose hello (and authentication) is being read, oldest first.
#[derive(Debug, Default)]
struct HandshakeTable {
    next_id: u64,
    entries: VecDeque<PendingEntry>,
}

/// One connection in the handshake table: a second handle on its socket, to close it from the
/// acceptor when it is evicted (its hello thread then sees the close and ends).
#[derive(Debug)]
struct PendingEntry {
    id: u64,
    peer: SocketAddr,
    since: Instant,
    socket: TcpStream,
    /// Set by its hello thread once the client proved the key (with a key set).
    authenticated: Arc<AtomicBool>,
}

impl HandshakeTable {
    /// Adds a connection; returns its id and the flag its hello thread sets once the client
    /// authenticated.
    fn add(&mut self, peer: SocketAddr, socket: TcpStream) -> (u64, Arc<AtomicBool>) {
        self.next_id += 1;
        let id = self.next_id;
        let authenticated = Arc::new(AtomicBool::new(false));
        self.entries.push_back(PendingEntry {
            id,
            peer,
            since: Instant::now(),
            socket,
            authenticated: authenticated.clone(),
        });
        (id, authenticated)
    }

    /// The connection's hello thread is done with it.
    fn remove(&mut self, id: u64) {
        self.entries.retain(|e| e.id != id);
    }

    /// Closes and forgets one connection still in its handshake: the oldest that has not
    /// authenticated (with a key, a client that proved it goes only when every one in the table
    /// did), else the oldest.
    fn evict_one(&mut self) -> Option<(SocketAddr, Duration)> {
        let index = self
            .entries
            .iter()
            .position(|e| !e.authenticated.load(Ordering::Relaxed))
            .unwrap_or(0);
        let oldest = self.entries.remove(index)?;
        // Failing only means it is already closed, which is what we want.
        let _ = oldest.socket.shutdown(std::net::Shutdown::Both);
        Some((oldest.peer, oldest.since.elapsed()))
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Locks a mutex, also one a panicking hello thread poisoned (the table stays consistent:
/// every change is one push, retain or pop).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Acceptor {
    fn run(self) {
        let mut backoff = Duration::from_millis(10);
        let mut starved =
            RateLimitedLog::new("accept() is failing for lack of resources; backing off");
        let mut evicted = RateLimitedLog::new(
            "closed the oldest unfinished handshake for a new connection: too many in progress",
        );
        while !self.closed.load(Ordering::Relaxed) {
            match wait_any([Interest::read(self.listener.as_fd())], SLICE) {
                // Nothing pending: look at the stop flag again without an accept() call.
                Ok([false]) => continue,
                Ok([true]) => {}
                Err(e) => {
                    log::error!("waiting for connections failed: {}", e.chain());
                    return;
                }
            }
            match bootstrap::accept(&self.listener) {
                Ok(Some((stream, peer))) => {
                    backoff = Duration::from_millis(10);
                    let full = lock(&self.pending).len() >= MAX_PENDING_HANDSHAKES;
                    if full {
                        if let Some((old, age)) = lock(&self.pending).evict_one() {
                            evicted.hit(&format_args!(
                                "{old} after {:.1} s, for {peer}; limit {MAX_PENDING_HANDSHAKES}",
                                age.as_secs_f64()
                            ));
                        }
                    }
                    if let Err(e) = self.spawn_hello(stream, peer) {
                        // Out of descriptors one step later than accept() (its second handle
                        // on the connection): the same shortage, the same back-off.
                        starved.hit(&format_args!("{e}; dropped the connection from {peer}"));
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(SLICE);
                    }
                }
                Ok(None) => {}
                Err(Error::Accept(e)) if resource_shortage(&e) => {
                    starved.hit(&e);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(SLICE);
                }
                Err(e) => log::warn!("{}", e.chain()),
            }
        }
    }

    /// Starts the connection's hello thread. `Err`: no descriptor left for the second handle
    /// on it (the connection is dropped).
    fn spawn_hello(&self, stream: std::net::TcpStream, peer: SocketAddr) -> io::Result<()> {
        log::debug!("connection from {peer}");
        let handle = match stream.try_clone() {
            Ok(handle) => handle,
            Err(e) if resource_shortage(&e) => return Err(e),
            Err(e) => {
                log::warn!("dropped the connection from {peer}: cannot keep a handle on it: {e}");
                return Ok(());
            }
        };
        let (id, authenticated) = lock(&self.pending).add(peer, handle);
        let resumes = self.resumes.clone();
        let hello_ready = self.hello_ready.clone();
        let (config, queue, pending, unauthenticated, ignored, busy_refusals) = (
            self.config.clone(),
            self.queue.clone(),
            self.pending.clone(),
            self.unauthenticated.clone(),
            self.ignored.clone(),
            self.busy_refusals.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("hello-{peer}"))
            .spawn(move || {
                let read = match read_hello(stream, &config, &authenticated) {
                    // A resume attempt proves the session's secret here, still in the table
                    // (so a flood of strangers' attempts is bounded like one of hellos).
                    Ok(Opening::Resume(session, attempt)) => {
                        let deadline = deadline_after(attempt.since, config.handshake_timeout);
                        route_attempt(&resumes, &session, *attempt, deadline);
                        lock(&pending).remove(id);
                        return;
                    }
                    other => other,
                };
                // Done with its handshake either way: no longer a candidate for eviction.
                lock(&pending).remove(id);
                match read {
                    Ok(Opening::Resume(..)) => {}
                    Ok(Opening::Hello(hello)) => match queue.try_send(*hello) {
                        // A counter that cannot be written (at its maximum) is readable.
                        Ok(()) => {
                            let _ = hello_ready.write(1);
                        }
                        Err(TrySendError::Full(mut hello)) => {
                            log::warn!("refused {peer}: busy, {MAX_QUEUED} clients already wait");
                            busy_refusals.fetch_add(1, Ordering::Relaxed);
                            hello.control.reject(
                                "busy: the server is serving another client; try again later",
                            );
                        }
                        Err(TrySendError::Disconnected(mut hello)) => {
                            hello.control.reject("the server is shutting down");
                        }
                    },
                    Err(e) if config.auth_key.is_some() && failed_to_authenticate(&e) => {
                        lock(&unauthenticated).hit(&format_args!("{peer}: {e}"));
                    }
                    Err(e) => {
                        // Each one at debug level; at warning level, one line a second.
                        log::debug!("ignored connection from {peer}: {}", e.chain());
                        lock(&ignored).hit(&format_args!("{peer}: {}", e.chain()));
                    }
                }
            });
        if let Err(e) = spawned {
            lock(&self.pending).remove(id);
            log::error!("cannot start a handshake thread for {peer}: {e}");
        }
        Ok(())
    }
}

/// Whether a hello thread's error is a client that did not prove the key: it had none, another
/// one (we or it found out), or it was refused for that (its Reject begins with the wire
/// constant [`AUTH_PREFIX`], as a busy one begins with `BUSY_PREFIX`).
fn failed_to_authenticate(e: &Error) -> bool {
    match e {
        Error::AuthenticationFailed(_) | Error::Refused(_) => true,
        Error::Rejected(reason) => reason.starts_with(AUTH_PREFIX),
        _ => false,
    }
}

/// Whether an accept error means "out of descriptors or memory" (retrying at once would spin).
fn resource_shortage(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// A connected pair on loopback: (the table's server end, the client's end).
    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (server, _) = l.accept().expect("accept");
        (server, client)
    }

    fn closed(client: &mut TcpStream) -> bool {
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        matches!(client.read(&mut [0u8; 1]), Ok(0) | Err(_))
    }

    fn filled(n: usize) -> (HandshakeTable, Vec<(u64, Arc<AtomicBool>, TcpStream)>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut table = HandshakeTable::default();
        let mut clients = Vec::new();
        for _ in 0..n {
            let (server, client) = pair(&l);
            let peer = client.local_addr().expect("addr");
            let (id, auth) = table.add(peer, server);
            clients.push((id, auth, client));
        }
        (table, clients)
    }

    #[test]
    fn a_flood_evicts_the_oldest_stranger_and_closes_it() {
        let (mut table, mut clients) = filled(3);
        let (evicted, _) = table.evict_one().expect("one evicted");
        assert_eq!(evicted, clients[0].2.local_addr().expect("addr"));
        assert!(
            closed(&mut clients[0].2),
            "the evicted connection is closed"
        );
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_client_that_proved_the_key_outlasts_every_stranger() {
        let (mut table, clients) = filled(4);
        // The oldest connection is the real client, and it has authenticated.
        clients[0].1.store(true, Ordering::Relaxed);
        let order: Vec<SocketAddr> = (0..3)
            .filter_map(|_| table.evict_one().map(|(peer, _)| peer))
            .collect();
        let addr = |i: usize| clients[i].2.local_addr().expect("addr");
        assert_eq!(
            order,
            vec![addr(1), addr(2), addr(3)],
            "strangers first, oldest first"
        );
        assert_eq!(table.len(), 1);
        assert_eq!(
            table.evict_one().map(|(peer, _)| peer),
            Some(addr(0)),
            "only when every one left has authenticated does the oldest go"
        );
    }

    #[test]
    fn a_connection_done_with_its_handshake_is_never_evicted() {
        let (mut table, clients) = filled(3);
        table.remove(clients[0].0);
        let (evicted, _) = table.evict_one().expect("one evicted");
        assert_eq!(evicted, clients[1].2.local_addr().expect("addr"));
        table.remove(clients[2].0);
        assert!(table.evict_one().is_none());
    }
}
