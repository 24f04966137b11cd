//! `--client`: send `--count` messages and finish the stream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use rdma_container::{Config, Error, RdmaSink};

use super::metrics;
use super::output::{summary_line, Payloads};
use super::progress::{Progress, ProgressLabel, ProgressOptions};
use super::result::{Ending, Reporter, SessionResult};
use super::stop::StopSignal;

/// What the client sends, and how it reports.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Messages to send.
    pub count: u64,
    /// Their size (`None`: the counter's digits).
    pub size: Option<usize>,
    /// `--credits` when given: a server that decides otherwise is warned about.
    pub credits_asked: Option<u16>,
    /// The periodic lines.
    pub progress: ProgressOptions,
}

/// Connects, sends, finishes; reports the session's result; returns the exit status (130
/// after Ctrl-C, 143 after SIGTERM; a failure is the error, whose status
/// [`super::result::exit_status_of`] gives).
pub fn run(
    addr: SocketAddr,
    config: &Config,
    options: &ClientOptions,
    stop: &Arc<AtomicBool>,
    reporter: &Reporter,
) -> Result<u8> {
    let (count, size) = (options.count, options.size);
    let mut report = SessionResult::new("client", None, addr, config.transport);
    let started = Instant::now();
    let sink = match RdmaSink::connect(addr, config) {
        Ok(sink) => sink,
        Err(e) => {
            report.ended(0, 0, started.elapsed(), Ending::before_start(&e));
            reporter.report(&report);
            if matches!(e, Error::Interrupted) {
                let signal = StopSignal::received();
                log::info!("{} before the session with {addr} started", signal.name());
                return Ok(signal.exit_status());
            }
            metrics::setup_failed(&e);
            return Err(e).with_context(|| format!("cannot start a session with {addr}"));
        }
    };
    metrics::session_started(sink.info());
    report.started(sink.info());
    if let Some(asked) = options.credits_asked {
        let set = sink.info().credits();
        if set != asked {
            log::warn!(
                "the server set {set} credits, not the --credits {asked} asked here: the \
receiving end's --credits decides"
            );
        }
    }
    let resumes = sink.resume_counters();
    let paths = sink.path_counters();
    let path_watch = metrics::watch_paths(&resumes, &paths);
    let progress = Progress::start(
        &options.progress,
        ProgressLabel {
            role: "client",
            session: None,
            text: "client".into(),
            transport: sink.info().transport.name().into(),
        },
    );
    let result = stream(sink, count, size, stop, &mut report, &progress);
    drop(progress);
    report.resumed(resumes.get());
    report.path_bytes(&paths);
    log_resumes(resumes.get());
    if let Err(e) = &result {
        metrics::client_failed(e);
        let ending = e
            .chain()
            .find_map(|c| c.downcast_ref::<Error>())
            .map_or_else(
                || Ending::Failed {
                    error: format!("{e:#}"),
                },
                Ending::of,
            );
        report.ending = ending;
        report.exit_status = report.ending.exit_status();
    }
    drop(path_watch);
    metrics::session_ended(&report.ending);
    reporter.report(&report);
    result.map(|()| report.exit_status)
}

/// Sends the messages and finishes the stream. Fills in `report`'s counts and time (its
/// ending too when the stream ends without an error).
fn stream(
    mut sink: RdmaSink,
    count: u64,
    size: Option<usize>,
    stop: &Arc<AtomicBool>,
    report: &mut SessionResult,
    progress: &Progress,
) -> Result<()> {
    let started = Instant::now();
    let resumes = sink.resume_counters();
    let sent = send_all(&mut sink, count, size, stop, progress);
    report.ended(
        sink.sent(),
        sink.bytes_sent(),
        started.elapsed(),
        Ending::Finished,
    );
    sent?;
    let interrupted = stop.load(Ordering::Relaxed);
    let bytes = sink.bytes_sent();
    let transport = sink.info().transport.name();
    let sent = sink.finish().context("ending the stream failed")?;
    let ending = if interrupted {
        Ending::Interrupted
    } else {
        Ending::Finished
    };
    let how = ending.how_sent();
    report.ended(sent, bytes, started.elapsed(), ending);
    log::info!(
        "{how}: sent {}",
        summary_line(
            sent,
            bytes,
            started.elapsed(),
            resumes.get().time_resuming,
            transport
        )
    );
    Ok(())
}

/// The summary's word on resumes, when there were any.
pub fn log_resumes(stats: rdma_container::ResumeStats) {
    if stats.resumes > 0 {
        let paths = if stats.paths_lost > 0 {
            format!(
                "; {} path(s) left out after a failure, {} taken back",
                stats.paths_lost, stats.paths_rebuilt
            )
        } else {
            String::new()
        };
        log::info!(
            "the session resumed {} time(s); {} message(s) were sent again{paths}",
            stats.resumes,
            stats.messages_resent
        );
    }
}

/// Sends messages "0".."count-1" (sized by `size`), stopping early on Ctrl-C or SIGTERM; counts each
/// for the progress lines.
pub fn send_all(
    sink: &mut RdmaSink,
    count: u64,
    size: Option<usize>,
    stop: &AtomicBool,
    progress: &Progress,
) -> Result<()> {
    let mut payloads = Payloads::new(size);
    #[cfg(feature = "test-hooks")]
    let pace = send_pace_hook();
    for i in 0..count {
        #[cfg(feature = "test-hooks")]
        if let Some(pace) = pace {
            std::thread::sleep(pace);
        }
        if stop.load(Ordering::Relaxed) {
            log::info!(
                "{}: stopping after {i} message(s)",
                StopSignal::received().name()
            );
            return Ok(());
        }
        let payload = payloads.message(i)?;
        match sink.send(payload) {
            Ok(()) => {
                metrics::message_sent(payload.len(), sink.credit_wait());
                progress.count(payload.len());
            }
            Err(Error::Interrupted) => {
                log::info!(
                    "{}: stopping after {i} message(s)",
                    StopSignal::received().name()
                );
                return Ok(());
            }
            Err(e) => return Err(e).with_context(|| format!("sending message {i} failed")),
        }
    }
    Ok(())
}

/// Test builds: `RDMA_CONTAINER_TEST_SEND_PACE_US=N` sleeps N microseconds before each message,
/// so that a test can break a session's connections while it runs.
#[cfg(feature = "test-hooks")]
fn send_pace_hook() -> Option<std::time::Duration> {
    let us: u64 = std::env::var("RDMA_CONTAINER_TEST_SEND_PACE_US")
        .ok()?
        .parse()
        .ok()?;
    log::info!("test hook: {us} us before each message (RDMA_CONTAINER_TEST_SEND_PACE_US)");
    Some(std::time::Duration::from_micros(us))
}
