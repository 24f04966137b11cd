//! Progress on long runs: `--interval S` on `--client` and `--server`, or every second by
//! default when stderr is a terminal (off with `--quiet`).
//!
//! Rules:
//! - the session counts each message it sends or receives ([`Progress::count`]: two relaxed
//!   atomic adds, no clock, no lock); a thread of its own reads the counts once per interval,
//!   on a fixed schedule from the session's start, so a stalled session still shows its
//!   intervals, at 0 msg/s;
//! - an interval's line has the shape of the session's final summary line
//!   ([`summary_line`]), prefixed by the interval's span; with `--json` it is one JSON line
//!   on stderr instead (`{"interval": {...}}`, docs/interval.schema.json), as bench's are;
//! - the thread ends when the session does ([`Progress`] dropped): no line after the summary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::output::summary_line;

/// What the periodic lines are for, and how often.
#[derive(Debug, Clone)]
pub struct ProgressOptions {
    /// How often (`None`: no periodic lines).
    pub every: Option<Duration>,
    /// JSON lines instead of human ones.
    pub json: bool,
}

impl ProgressOptions {
    /// `--interval` when given; otherwise every second when stderr is a terminal and not
    /// `quiet`; otherwise none.
    pub fn new(interval: Option<Duration>, quiet: bool, json: bool) -> Self {
        use std::io::IsTerminal;
        let every = interval.or_else(|| {
            (!quiet && std::io::stderr().is_terminal()).then_some(Duration::from_secs(1))
        });
        Self { every, json }
    }
}

/// The counts the session adds to and the reporting thread reads.
#[derive(Debug, Default)]
struct Shared {
    messages: AtomicU64,
    bytes: AtomicU64,
    ended: Mutex<bool>,
    wake: Condvar,
}

/// One session's periodic lines (none without an interval).
#[derive(Debug)]
pub struct Progress {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Who the lines are about.
#[derive(Debug, Clone)]
pub struct ProgressLabel {
    /// "client" or "server".
    pub role: &'static str,
    /// The server's session number.
    pub session: Option<u64>,
    /// The log's name for the session ("session 2 from IP:PORT", "client").
    pub text: String,
    /// The transport that runs the session.
    pub transport: String,
}

impl Progress {
    /// Starts the periodic lines for a session that starts now.
    pub fn start(options: &ProgressOptions, label: ProgressLabel) -> Progress {
        let shared = Arc::new(Shared::default());
        let thread = options.every.and_then(|every| {
            let (shared, json) = (shared.clone(), options.json);
            std::thread::Builder::new()
                .name("progress".into())
                .spawn(move || report_every(&shared, every, json, &label))
                .map_err(|e| log::warn!("no progress lines: cannot start their thread: {e}"))
                .ok()
        });
        Progress { shared, thread }
    }

    /// A message of `bytes` bytes went through.
    pub fn count(&self, bytes: usize) {
        self.shared.messages.fetch_add(1, Ordering::Relaxed);
        self.shared
            .bytes
            .fetch_add(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        *self
            .shared
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reporting thread: one line per interval until the session ends.
fn report_every(shared: &Shared, every: Duration, json: bool, label: &ProgressLabel) {
    let started = Instant::now();
    let (mut last_messages, mut last_bytes) = (0u64, 0u64);
    let mut tick = 1u32;
    loop {
        let due = started + every * tick;
        {
            let mut ended = shared.ended.lock().unwrap_or_else(PoisonError::into_inner);
            while !*ended {
                let Some(left) = due.checked_duration_since(Instant::now()) else {
                    break;
                };
                ended = shared
                    .wake
                    .wait_timeout(ended, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            if *ended {
                return;
            }
        }
        let messages = shared.messages.load(Ordering::Relaxed);
        let bytes = shared.bytes.load(Ordering::Relaxed);
        let span = Interval {
            from: every * (tick - 1),
            to: every * tick,
            messages: messages - last_messages,
            bytes: bytes - last_bytes,
            total_messages: messages,
        };
        print_interval(&span, json, label);
        (last_messages, last_bytes) = (messages, bytes);
        tick = tick.saturating_add(1);
    }
}

/// One interval's counts.
#[derive(Debug, Clone, PartialEq)]
struct Interval {
    from: Duration,
    to: Duration,
    messages: u64,
    bytes: u64,
    total_messages: u64,
}

fn print_interval(span: &Interval, json: bool, label: &ProgressLabel) {
    if json {
        eprintln!("{}", interval_json(span, label));
    } else {
        log::info!("{}", interval_text(span, label));
    }
}

fn interval_text(span: &Interval, label: &ProgressLabel) -> String {
    format!(
        "{}: [{:.1}-{:.1} s] {} (total {} messages)",
        label.text,
        span.from.as_secs_f64(),
        span.to.as_secs_f64(),
        summary_line(
            span.messages,
            span.bytes,
            span.to - span.from,
            Duration::ZERO,
            &label.transport
        ),
        span.total_messages
    )
}

fn interval_json(span: &Interval, label: &ProgressLabel) -> serde_json::Value {
    let secs = (span.to - span.from).as_secs_f64().max(1e-9);
    serde_json::json!({"interval": {
        "role": label.role,
        "session": label.session,
        "transport": label.transport,
        "from_s": span.from.as_secs_f64(),
        "to_s": span.to.as_secs_f64(),
        "messages": span.messages,
        "bytes": span.bytes,
        "total_messages": span.total_messages,
        "messages_per_second": span.messages as f64 / secs,
        "mib_per_second": span.bytes as f64 / secs / (1024.0 * 1024.0),
        "gbit_per_second": span.bytes as f64 * 8.0 / secs / 1e9,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label() -> ProgressLabel {
        ProgressLabel {
            role: "server",
            session: Some(2),
            text: "session 2 from 10.0.0.1:4000".into(),
            transport: "verbs".into(),
        }
    }

    fn span() -> Interval {
        Interval {
            from: Duration::from_secs(2),
            to: Duration::from_secs(4),
            messages: 50_000,
            bytes: 50_000 * 4096,
            total_messages: 120_000,
        }
    }

    #[test]
    fn an_interval_line_has_the_summarys_shape_with_its_span_and_rates_over_the_span() {
        let text = interval_text(&span(), &label());
        assert_eq!(
            text,
            "session 2 from 10.0.0.1:4000: [2.0-4.0 s] 50000 messages, 204800000 bytes in \
2.000 s (25000 msg/s, 97.66 MiB/s, 0.819 Gb/s) over verbs (total 120000 messages)"
        );
    }

    #[test]
    fn an_interval_json_line_names_the_session_and_its_rates() {
        let v = interval_json(&span(), &label());
        let i = &v["interval"];
        assert_eq!(i["role"], "server");
        assert_eq!(i["session"], 2);
        assert_eq!(i["messages"], 50_000);
        assert_eq!(i["total_messages"], 120_000);
        assert_eq!(i["messages_per_second"], 25_000.0);
        assert_eq!(i["from_s"], 2.0);
    }

    #[test]
    fn no_interval_means_no_thread_and_counting_still_works() {
        let options = ProgressOptions {
            every: None,
            json: false,
        };
        let p = Progress::start(&options, label());
        assert!(p.thread.is_none());
        p.count(10);
        p.count(5);
        assert_eq!(p.shared.messages.load(Ordering::Relaxed), 2);
        assert_eq!(p.shared.bytes.load(Ordering::Relaxed), 15);
    }

    #[test]
    fn the_reporting_thread_ends_as_soon_as_the_session_does() {
        let options = ProgressOptions {
            every: Some(Duration::from_secs(3600)),
            json: false,
        };
        let p = Progress::start(&options, label());
        let started = Instant::now();
        drop(p);
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
