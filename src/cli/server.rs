//! `--server`: accept senders and print what they send, one after another or (with
//! `--max-sessions N`) up to N at once.
//!
//! The library's [`Listener`] reads each new connection's hello on its own thread (so a silent
//! or garbage peer cannot block anybody); a doorman thread hands valid clients to the main
//! loop, which admits each one within `--max-sessions` and `--max-receive-memory` and runs its
//! session on a thread of its own, or refuses it with Reject("busy: ..."). Sessions report
//! their end to the main loop over the same channel. Ctrl-C or SIGTERM sets the configuration's
//! stop flag: every running session ends, its client told which signal stopped the server
//! ("the server was stopped (SIGTERM)"), and the server exits once all have, with that
//! signal's status (130, 143).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, SendError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdma_container::{Config, Error, Incoming, Listener, ParkedSessions, RdmaSrc};

use super::metrics;
use super::output::{summary_line, PayloadPrinter};
use super::progress::{Progress, ProgressLabel, ProgressOptions};
use super::result::{Ending, Reporter, SessionResult};
use super::stop::StopSignal;

/// How often the main loop and the doorman look at the stop flag.
const SLICE: Duration = Duration::from_millis(200);

/// Receives until end of stream, printing payloads and a summary line; fills in `report`;
/// returns how the session ended (as `report` says it).
pub fn receive_all(
    mut src: RdmaSrc,
    printer: &mut PayloadPrinter,
    label: &str,
    report: &mut SessionResult,
    progress: &ProgressOptions,
) -> Ending {
    let started = Instant::now();
    let progress = Progress::start(
        progress,
        ProgressLabel {
            role: "server",
            session: report.session,
            text: label.to_owned(),
            transport: src.info().transport.name().into(),
        },
    );
    metrics::session_started(src.info());
    report.started(src.info());
    let resumes = src.resume_counters();
    let paths = src.path_counters();
    let path_watch = metrics::watch_paths(&resumes, &paths);
    #[cfg(feature = "test-hooks")]
    let stall = recv_stall_hook();
    let ending = loop {
        #[cfg(feature = "test-hooks")]
        if let Some((at, pause)) = stall {
            if src.received() == at {
                printer.flush();
                log::info!(
                    "test hook: stalling {} ms after {at} message(s)",
                    pause.as_millis()
                );
                std::thread::sleep(pause);
            }
        }
        match src.recv() {
            Ok(Some(payload)) => {
                metrics::message_received(payload.len());
                progress.count(payload.len());
                printer.print(payload)
            }
            Ok(None) => break Ending::Finished,
            Err(Error::Interrupted) => break Ending::Interrupted,
            Err(e @ Error::TakenOver { .. }) => {
                metrics::error(&e);
                printer.flush();
                log::warn!("{label}: {e}");
                break Ending::of(&e);
            }
            Err(e) => {
                metrics::error(&e);
                printer.flush();
                log::error!("{label}: {}", e.chain());
                break Ending::of(&e);
            }
        }
    };
    drop(progress);
    printer.flush();
    report.ended(
        src.received(),
        src.bytes_received(),
        started.elapsed(),
        ending.clone(),
    );
    report.resumed(resumes.get());
    report.path_bytes(&paths);
    super::client::log_resumes(resumes.get());
    drop(path_watch);
    metrics::session_ended(&ending);
    log::info!(
        "{label}: {}: received {}",
        ending.how_received(),
        summary_line(
            src.received(),
            src.bytes_received(),
            started.elapsed(),
            resumes.get().time_resuming,
            src.info().transport.name()
        )
    );
    if ending == Ending::Interrupted {
        src.abort(&format!(
            "the server was {}",
            StopSignal::received().what_happened()
        ));
    }
    ending
}

/// The server's own flags.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Exit after one session.
    pub once: bool,
    /// Print no payloads.
    pub quiet: bool,
    /// Sessions that may run at once.
    pub max_sessions: u64,
    /// Bytes the receive slots of all running sessions may take together.
    pub max_receive_memory: u64,
    /// Where each session's result goes (`--json`, `--out-json`).
    pub reporter: Reporter,
    /// The periodic lines (`--interval`).
    pub progress: ProgressOptions,
    /// Whether `--credits` was given: then each session has this server's credits; else the
    /// client's.
    pub credits_given: bool,
    /// Whether `--qps` or `--paths` was given (the client's choice: the server says so).
    pub qps_given: bool,
}

/// What the main loop hears about.
enum Event {
    /// A client whose hello arrived.
    Client(Box<Incoming>),
    /// A session's thread ended, so; its slots (`memory` bytes) are free. `started`: it got
    /// past its set-up.
    Ended {
        ending: Ending,
        memory: u64,
        started: bool,
    },
    /// The doorman could not accept any more clients (logged).
    DoormanStopped,
}

/// The sessions running and the memory their slots take, against the limits.
struct Admission {
    max_sessions: u64,
    max_memory: u64,
    running: u64,
    memory: u64,
}

impl Admission {
    /// Why a session whose slots take `memory` bytes can never be admitted: its slots alone
    /// are above `--max-receive-memory` (a client that asked for many credits of large slots).
    fn too_large(&self, memory: u64, credits: u16) -> Option<String> {
        (memory > self.max_memory).then(|| {
            format!(
                "this session's {credits} receive slots (per queue pair) need {memory} bytes, \
above the server's --max-receive-memory of {} bytes: lower --credits, --max-msg-size or --qps on \
the client, or raise --max-receive-memory on the server",
                self.max_memory
            )
        })
    }

    /// Why a session whose slots take `memory` bytes cannot start now: the session limit is
    /// reached, or its slots would take the running sessions' beyond the memory limit.
    fn refusal(&self, memory: u64) -> Option<String> {
        if self.running >= self.max_sessions {
            return Some(if self.max_sessions == 1 {
                "busy: the server is serving another client; try again later".to_owned()
            } else {
                format!(
                    "busy: the server is serving {} clients (--max-sessions {}); try again later",
                    self.running, self.max_sessions
                )
            });
        }
        if self.memory.saturating_add(memory) > self.max_memory {
            return Some(format!(
                "busy: the server's receive memory is taken: this session's slots need {memory} \
                 bytes and {} of the {} bytes of --max-receive-memory are in use; try again later",
                self.memory, self.max_memory
            ));
        }
        None
    }
}

/// Tells the main loop that a session ended when dropped, so a session that fails in any way
/// (a panic included) still frees its place.
struct EndReport {
    tx: Sender<Event>,
    memory: u64,
    /// Failed until the session says otherwise (a panic leaves it so).
    ending: Ending,
    started: bool,
}

impl Drop for EndReport {
    fn drop(&mut self) {
        let ending = std::mem::replace(&mut self.ending, EndReport::PANICKED);
        // The main loop outlives every session unless it failed itself.
        let _ = self.tx.send(Event::Ended {
            ending,
            memory: self.memory,
            started: self.started,
        });
    }
}

impl EndReport {
    /// The ending of a session whose thread ended without saying how.
    const PANICKED: Ending = Ending::Failed {
        error: String::new(),
    };
}

/// How long a session must have waited for its client to resume, with no attempt of that
/// client in sight, before a new client may take its place (docs/design.md, "A new client and
/// a parked session"): a live client's reconnection normally lands well within it.
const TAKEOVER_GRACE: Duration = Duration::from_secs(1);

/// How long a new client is held while a parked session's place is freed for it; past that
/// (the parked session's client came back) it is told busy, and retries.
const HOLD_LIMIT: Duration = Duration::from_secs(3);

/// A new client held for the place of a session that waits for its client to resume.
struct Held {
    incoming: Box<Incoming>,
    memory: u64,
    since: Instant,
    /// Whether the parked session was told to give its place up.
    took_over: bool,
}

/// Runs the server until Ctrl-C or SIGTERM (or after one session with `once`); returns the exit
/// status (130 after Ctrl-C, 143 after SIGTERM).
pub fn run(
    addr: SocketAddr,
    config: Config,
    options: &ServerOptions,
    stop: Arc<AtomicBool>,
) -> Result<u8> {
    if options.once && options.max_sessions > 1 {
        bail!(
            "--once serves one session; it cannot be combined with --max-sessions {}",
            options.max_sessions
        );
    }
    let listener = Listener::bind(addr, &config)?;
    let slot_mib = |credits: u16| (usize::from(credits).saturating_mul(config.max_msg_size)) >> 20;
    let credits = if options.credits_given {
        format!(
            "credits {}, slot memory {} MiB a session (times the client's --qps)",
            config.credits,
            slot_mib(config.credits)
        )
    } else {
        format!(
            "credits as each client asks (--credits: this server's own), slot memory {} MiB a \
session at {} and up to {} MiB at {} (times the client's --qps)",
            slot_mib(config.credits),
            config.credits,
            slot_mib(rdma_container::MAX_CREDITS),
            rdma_container::MAX_CREDITS
        )
    };
    log::info!(
        "listening on {} (transport {}, max message {} bytes, {credits})",
        listener.local_addr(),
        config.transport,
        config.max_msg_size,
    );
    let own = u64::try_from(usize::from(config.credits).saturating_mul(config.max_msg_size))
        .unwrap_or(u64::MAX);
    if options.credits_given && own > options.max_receive_memory {
        log::warn!(
            "--credits {} x --max-msg-size {} = {own} bytes a session, above --max-receive-memory \
{}: only clients whose largest message is smaller fit; raise --max-receive-memory",
            config.credits,
            config.max_msg_size,
            options.max_receive_memory
        );
    }
    if options.qps_given {
        log::warn!(
            "--qps and --paths are the client's choice: this server takes each client's (its own \
--qps or --paths, or RDMA_CONTAINER_QPS or RDMA_CONTAINER_PATHS, changes nothing)"
        );
    }
    if options.max_sessions > 1 {
        log::info!(
            "serving up to {} clients at once, their receive slots within {} bytes",
            options.max_sessions,
            options.max_receive_memory
        );
    }
    let parked = listener.parked_sessions();
    let (tx, rx) = channel::<Event>();
    {
        let (stop, tx) = (stop.clone(), tx.clone());
        std::thread::Builder::new()
            .name("doorman".into())
            .spawn(move || doorman(listener, stop, tx))
            .context("cannot start the doorman thread")?;
    }
    let mut server = MainLoop {
        config,
        options,
        tx,
        printer: PayloadPrinter::new(options.quiet),
        admission: Admission {
            max_sessions: options.max_sessions,
            max_memory: options.max_receive_memory,
            running: 0,
            memory: 0,
        },
        parked,
        held: None,
        sessions: 0,
    };
    let mut stopping = false;
    let mut doorman_stopped = false;
    loop {
        match rx.recv_timeout(SLICE) {
            Ok(Event::Client(incoming)) if stopping || stop.load(Ordering::Relaxed) => {
                incoming.refuse("the server is shutting down");
            }
            Ok(Event::Client(mut incoming)) => {
                server.settle_credits(&mut incoming);
                incoming.fit_slots_to_peer();
                server.arrived(incoming);
            }
            Ok(Event::Ended {
                ending,
                memory,
                started,
            }) => {
                server.admission.running = server.admission.running.saturating_sub(1);
                server.admission.memory = server.admission.memory.saturating_sub(memory);
                match ending {
                    // The stop flag ended a running session (its summary said so): the server
                    // stops.
                    Ending::Interrupted if started => stopping = true,
                    // Its place went to a new client: under --once, that one's session is the
                    // one the server serves.
                    Ending::TakenOver { .. } if started => {}
                    _ if options.once => return Ok(ending.exit_status()),
                    _ => {}
                }
            }
            Ok(Event::DoormanStopped) => doorman_stopped = true,
            Err(RecvTimeoutError::Timeout) => {}
            // We hold a sender ourselves.
            Err(RecvTimeoutError::Disconnected) => bail!("the session channel closed"),
        }
        if !stopping && stop.load(Ordering::Relaxed) {
            stopping = true;
            if server.admission.running == 0 {
                log::info!(
                    "{} after {} session(s)",
                    StopSignal::received().how(),
                    server.sessions
                );
            }
        }
        if stopping {
            if let Some(held) = server.held.take() {
                held.incoming.refuse("the server is shutting down");
            }
        } else {
            server.serve_held();
        }
        if server.admission.running == 0 {
            if stopping {
                return Ok(StopSignal::received().exit_status());
            }
            if doorman_stopped {
                bail!("the doorman thread stopped");
            }
        }
    }
}

/// The main loop's state: admission, the sessions started, a client held for a parked
/// session's place.
struct MainLoop<'a> {
    config: Config,
    options: &'a ServerOptions,
    tx: Sender<Event>,
    printer: PayloadPrinter,
    admission: Admission,
    parked: ParkedSessions,
    held: Option<Held>,
    sessions: u64,
}

impl MainLoop<'_> {
    /// The receiving end decides the credits: this server's `--credits` when given (a ceiling:
    /// a client that keeps fewer messages in flight runs with its own; logged when they
    /// differ), else the client's.
    fn settle_credits(&self, incoming: &mut Incoming) {
        let asked = incoming.peer_credits();
        if !self.options.credits_given {
            incoming.adopt_peer_credits();
        } else if asked > self.config.credits {
            log::info!(
                "{}: the client asked for {asked} credits; this server's --credits {} decides",
                incoming.peer_addr(),
                self.config.credits
            );
        } else if asked < self.config.credits {
            log::info!(
                "{}: the client keeps at most {asked} messages in flight: its session runs with \
{asked} credits (this server's --credits {} is the ceiling)",
                incoming.peer_addr(),
                self.config.credits
            );
        }
    }

    /// A client whose hello arrived: started if there is room; held if a session that waits
    /// for its client to resume takes the place it needs; refused as busy otherwise.
    fn arrived(&mut self, incoming: Box<Incoming>) {
        let memory = u64::try_from(incoming.slot_memory()).unwrap_or(u64::MAX);
        if let Some(reason) = self.admission.too_large(memory, incoming.credits()) {
            log::warn!("refused {}: {reason}", incoming.peer_addr());
            metrics::refused();
            incoming.refuse(&reason);
            return;
        }
        let Some(reason) = self.admission.refusal(memory) else {
            self.start(incoming, memory);
            return;
        };
        if self.held.is_none() && self.parked.longest_wait(Instant::now()).is_some() {
            log::info!(
                "{}: every place is taken, one by a session waiting for its client to resume; \
this client gets that place unless the session's client is back within {:.0} s",
                incoming.peer_addr(),
                TAKEOVER_GRACE.as_secs_f64()
            );
            self.held = Some(Held {
                incoming,
                memory,
                since: Instant::now(),
                took_over: false,
            });
            self.serve_held();
            return;
        }
        self.refuse_busy(incoming, &reason);
    }

    /// The held client: started once there is room; meanwhile the session parked longest
    /// gives its place up once it waited [`TAKEOVER_GRACE`]; told busy after [`HOLD_LIMIT`]
    /// or when no session is parked any more.
    fn serve_held(&mut self) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        let Some(reason) = self.admission.refusal(held.memory) else {
            log::info!(
                "{}: served in the place of a session whose client did not resume",
                held.incoming.peer_addr()
            );
            self.start(held.incoming, held.memory);
            return;
        };
        let now = Instant::now();
        if !held.took_over {
            if self.parked.take_over_longest(TAKEOVER_GRACE, now) {
                held.took_over = true;
            } else if self.parked.longest_wait(now).is_none() {
                // The parked session's client came back.
                self.refuse_busy(held.incoming, &reason);
                return;
            }
        }
        if now.saturating_duration_since(held.since) >= HOLD_LIMIT {
            self.refuse_busy(held.incoming, &reason);
            return;
        }
        self.held = Some(held);
    }

    fn refuse_busy(&self, incoming: Box<Incoming>, reason: &str) {
        if self.options.max_sessions == 1 {
            log::warn!(
                "rejected {}: busy with another session",
                incoming.peer_addr()
            );
        } else {
            log::warn!("rejected {}: {reason}", incoming.peer_addr());
        }
        metrics::refused();
        incoming.refuse(reason);
    }

    /// Starts the client's session on a thread of its own.
    fn start(&mut self, incoming: Box<Incoming>, memory: u64) {
        self.sessions += 1;
        let n = self.sessions;
        let printer = if self.options.max_sessions > 1 {
            self.printer.for_session(n)
        } else {
            self.printer.clone()
        };
        let report = SessionResult::new(
            "server",
            Some(n),
            incoming.peer_addr(),
            self.config.transport,
        );
        let session = Session {
            n,
            printer,
            tx: self.tx.clone(),
            memory,
            report,
            reporter: self.options.reporter.clone(),
            progress: self.options.progress.clone(),
        };
        match start_session(*incoming, session) {
            Ok(()) => {
                self.admission.running += 1;
                self.admission.memory = self.admission.memory.saturating_add(memory);
            }
            Err(e) => log::error!("session {n}: {e:#}"),
        }
    }
}

/// What a session's thread needs besides the client.
struct Session {
    /// Its number.
    n: u64,
    printer: PayloadPrinter,
    tx: Sender<Event>,
    /// The bytes its slots take.
    memory: u64,
    report: SessionResult,
    reporter: Reporter,
    progress: ProgressOptions,
}

/// Runs session `n` on a thread of its own: set-up, then receiving until it ends.
fn start_session(incoming: Incoming, session: Session) -> Result<()> {
    let Session {
        n,
        mut printer,
        tx,
        memory,
        mut report,
        reporter,
        progress,
    } = session;
    let label = format!("session {n} from {}", incoming.peer_addr());
    std::thread::Builder::new()
        .name(format!("session-{n}"))
        .spawn(move || {
            let mut end_report = EndReport {
                tx,
                memory,
                ending: EndReport::PANICKED,
                started: false,
            };
            let started = Instant::now();
            end_report.ending = match incoming.accept_src() {
                Ok(src) => {
                    end_report.started = true;
                    receive_all(src, &mut printer, &label, &mut report, &progress)
                }
                Err(e) => {
                    metrics::setup_failed(&e);
                    log::error!("{label}: setup failed: {}", e.chain());
                    let ending = Ending::before_start(&e);
                    report.ended(0, 0, started.elapsed(), ending.clone());
                    ending
                }
            };
            reporter.report(&report);
        })
        .context("cannot start its thread; the client's connection was closed")?;
    Ok(())
}

/// Takes clients from the listener and hands them to the main loop, until the stop flag.
fn doorman(listener: Listener, stop: Arc<AtomicBool>, tx: Sender<Event>) {
    while !stop.load(Ordering::Relaxed) {
        metrics::listener_refusals(listener.busy_refusals(), listener.auth_refusals());
        let incoming = match listener.accept_timeout(SLICE) {
            Ok(Some(incoming)) => incoming,
            Ok(None) | Err(Error::Interrupted) => continue,
            Err(e) => {
                log::error!("accepting clients failed: {}", e.chain());
                let _ = tx.send(Event::DoormanStopped);
                return;
            }
        };
        if let Err(SendError(Event::Client(incoming))) = tx.send(Event::Client(Box::new(incoming)))
        {
            incoming.refuse("the server is shutting down");
            return;
        }
    }
}

/// Test builds: `RDMA_CONTAINER_TEST_RECV_STALL=N:MS` stops receiving for MS milliseconds once
/// N messages were delivered, so that a test can break a session while its sender has sent
/// Finish and waits for the receiver.
#[cfg(feature = "test-hooks")]
fn recv_stall_hook() -> Option<(u64, std::time::Duration)> {
    let value = std::env::var("RDMA_CONTAINER_TEST_RECV_STALL").ok()?;
    let (at, ms) = value.split_once(':')?;
    let (at, ms) = (at.parse().ok()?, ms.parse().ok()?);
    log::info!("test hook: a {ms} ms stall after {at} message(s) (RDMA_CONTAINER_TEST_RECV_STALL)");
    Some((at, std::time::Duration::from_millis(ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max_sessions: u64, max_memory: u64, running: u64, memory: u64) -> Admission {
        Admission {
            max_sessions,
            max_memory,
            running,
            memory,
        }
    }

    #[test]
    fn a_session_whose_slots_alone_exceed_the_memory_limit_is_refused_for_good() {
        let a = admission(1, 1000, 0, 0);
        assert_eq!(a.too_large(1000, 2), None);
        let why = a.too_large(1001, 1024).unwrap_or_default();
        assert!(
            why.contains("1024 receive slots (per queue pair) need 1001 bytes")
                && why.contains("--max-receive-memory of 1000")
                && !why.starts_with("busy"),
            "{why}"
        );
    }

    #[test]
    fn one_session_at_a_time_refuses_the_second_as_busy_with_the_old_words() {
        let a = admission(1, 1000, 0, 0);
        assert_eq!(a.refusal(1000), None, "a session alone within the limit");
        let a = admission(1, 10, 1, 1000);
        assert_eq!(
            a.refusal(1).as_deref(),
            Some("busy: the server is serving another client; try again later")
        );
    }

    #[test]
    fn several_sessions_are_refused_beyond_the_count_or_the_memory() {
        assert_eq!(admission(4, 3000, 1, 2000).refusal(1000), None);
        let memory = admission(4, 3000, 1, 2000)
            .refusal(1001)
            .unwrap_or_default();
        assert!(
            memory.starts_with("busy: the server's receive memory") && memory.contains("1001"),
            "{memory}"
        );
        let count = admission(4, u64::MAX, 4, 0).refusal(0).unwrap_or_default();
        assert!(count.contains("--max-sessions 4"), "{count}");
    }
}
