//! `--metrics [IP:]PORT`: Prometheus metrics over HTTP (`GET /metrics`) for `--server` and
//! `--client`. The names and labels are listed in docs/metrics.md.
//!
//! Off by default. [`start`] sets one process-wide [`Metrics`] and the session code calls the
//! hooks below ([`message_received`], [`session_ended`], ...), which cost one atomic load when
//! metrics are off. With them on, a message adds to two atomic counters: no clock, no lock,
//! no allocation on the data path. What changes without a hook is read when Prometheus
//! scrapes: the sender's credit wait as its last send left it, the listener's busy refusals as
//! the server last saw them, and the sysfs counters of every RDMA port a session used
//! ([`rdma_container::roce::counters`], encoded here).
//!
//! The HTTP side (`metrics_http.rs`) is one thread that serves every connection at once, each
//! with a whole-request deadline, at most a few open: a request head of at most
//! [`MAX_REQUEST`] bytes. `GET` (or
//! `HEAD`) `/metrics` gets the OpenMetrics text that Prometheus scrapes; any other path 404,
//! another method 405, anything unreadable 400 (431 when too long).

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rdma_container::roce::counters::{self, CounterGroup, PortCounter};
use rdma_container::{Error, ErrorKind, PathCounters, ResumeCounters, SessionInfo};

use super::result::Ending;

/// The longest request head the metrics server reads; a longer one gets 431.
pub const MAX_REQUEST: usize = 8 * 1024;
/// What `GET /metrics` answers with: the OpenMetrics text format (Prometheus' own).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric name starts with this and an underscore.
pub const PREFIX: &str = "rdma_container";

/// A label set of one label.
type Label = [(&'static str, &'static str); 1];

/// The process's metrics, once [`start`] ran.
static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The `kind` labels of `rdma_container_errors_total`, in the order docs/metrics.md lists them.
const ERROR_KINDS: [&str; 7] = [
    "peer_lost",
    "rejected",
    "protocol_violation",
    "checksum",
    "timeout",
    "transport",
    "other",
];

/// The `kind` label of `rdma_container_errors_total` for a library error: its
/// [`ErrorKind`], grouped as docs/metrics.md lists them.
pub fn error_kind(e: &Error) -> &'static str {
    match e.kind() {
        ErrorKind::PeerLost | ErrorKind::TakenOver => "peer_lost",
        ErrorKind::Refused => "rejected",
        ErrorKind::Violation => "protocol_violation",
        ErrorKind::Checksum => "checksum",
        ErrorKind::Timeout => "timeout",
        ErrorKind::PathBroken | ErrorKind::PathFailed => "transport",
        ErrorKind::Config
        | ErrorKind::Host
        | ErrorKind::Unreachable
        | ErrorKind::Interrupted
        | ErrorKind::WouldBlock
        | ErrorKind::Closed
        | ErrorKind::Internal => "other",
    }
}

/// The process's counters, shared by the session code (through the hooks) and the registry
/// the HTTP thread encodes.
#[derive(Debug)]
pub struct Metrics {
    sessions: Family<Label, Counter>,
    active: Gauge,
    received_messages: Counter,
    received_bytes: Counter,
    sent_messages: Counter,
    sent_bytes: Counter,
    errors: Family<Label, Counter>,
    scraped: Arc<Scraped>,
}

/// What is read when Prometheus scrapes rather than counted by a hook.
#[derive(Debug)]
struct Scraped {
    sysfs_root: PathBuf,
    /// The sending session's [`rdma_container::RdmaSink::credit_wait`], in nanoseconds.
    credit_wait_nanos: AtomicU64,
    /// Handshakes our server refused (busy), counted by [`refused`].
    server_refusals: AtomicU64,
    /// The library listener's busy refusals as the server last saw them.
    listener_refusals: AtomicU64,
    auth_refusals: AtomicU64,
    /// Every (device, port) a session ran on.
    ports: Mutex<BTreeSet<(String, u32)>>,
    /// The sessions' path counts: running ones read at each scrape, ended ones summed.
    paths: Mutex<PathTotals>,
}

/// `paths_lost`, `paths_rebuilt` and `path_bytes` across sessions.
#[derive(Debug, Default)]
struct PathTotals {
    running: Vec<(u64, ResumeCounters, PathCounters)>,
    next_id: u64,
    /// What the sessions that ended counted.
    ended_lost: u64,
    ended_rebuilt: u64,
    ended_bytes: Vec<u64>,
}

impl PathTotals {
    /// Lost, rebuilt, and bytes by path number, now.
    fn now(&self) -> (u64, u64, Vec<u64>) {
        let (mut lost, mut rebuilt, mut bytes) = (
            self.ended_lost,
            self.ended_rebuilt,
            self.ended_bytes.clone(),
        );
        for (_, resumes, paths) in &self.running {
            add_session(&mut lost, &mut rebuilt, &mut bytes, resumes, paths);
        }
        (lost, rebuilt, bytes)
    }

    /// The session `id` ended: its counts join the sums.
    fn ended(&mut self, id: u64) {
        if let Some(at) = self.running.iter().position(|(i, _, _)| *i == id) {
            let (_, resumes, paths) = self.running.swap_remove(at);
            add_session(
                &mut self.ended_lost,
                &mut self.ended_rebuilt,
                &mut self.ended_bytes,
                &resumes,
                &paths,
            );
        }
    }
}

fn add_session(
    lost: &mut u64,
    rebuilt: &mut u64,
    bytes: &mut Vec<u64>,
    resumes: &ResumeCounters,
    paths: &PathCounters,
) {
    let stats = resumes.get();
    *lost += u64::from(stats.paths_lost);
    *rebuilt += u64::from(stats.paths_rebuilt);
    let carried = paths.bytes();
    if bytes.len() < carried.len() {
        bytes.resize(carried.len(), 0);
    }
    for (sum, b) in bytes.iter_mut().zip(carried) {
        *sum += b;
    }
}

/// A running session's path counts, watched until this is dropped (then they join the
/// sums): from [`watch_paths`].
#[must_use = "the session's counts are read while this lives"]
pub struct PathWatch {
    id: Option<u64>,
}

impl Drop for PathWatch {
    fn drop(&mut self) {
        let (Some(id), Some(m)) = (self.id, METRICS.get()) else {
            return;
        };
        lock(&m.scraped.paths).ended(id);
    }
}

/// A mutex's value, also after a thread panicked holding it (counters stay usable).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Metrics {
    /// New counters (every label value present, at zero) and the registry that encodes them.
    pub fn new(sysfs_root: &Path) -> (Metrics, Registry) {
        let mut registry = Registry::with_prefix(PREFIX);
        let sessions = Family::<Label, Counter>::default();
        // Every series exists from the start, at zero.
        for outcome in Ending::OUTCOMES {
            let _ = sessions.get_or_create(&[("outcome", outcome)]);
        }
        registry.register(
            "sessions",
            "Sessions by how they ended (end_of_stream, interrupted, failed, refused)",
            sessions.clone(),
        );
        let active = Gauge::default();
        registry.register("sessions_active", "Sessions running now", active.clone());
        let messages = Family::<Label, Counter>::default();
        registry.register(
            "messages",
            "Messages received (server) or sent (client)",
            messages.clone(),
        );
        let bytes = Family::<Label, Counter>::default();
        registry.register(
            "bytes",
            "Payload bytes received (server) or sent (client)",
            bytes.clone(),
        );
        let errors = Family::<Label, Counter>::default();
        for kind in ERROR_KINDS {
            let _ = errors.get_or_create(&[("kind", kind)]);
        }
        registry.register(
            "errors",
            "Session errors by kind (peer_lost, rejected, protocol_violation, checksum, timeout, transport, other)",
            errors.clone(),
        );
        let scraped = Arc::new(Scraped {
            sysfs_root: sysfs_root.to_path_buf(),
            credit_wait_nanos: AtomicU64::new(0),
            server_refusals: AtomicU64::new(0),
            listener_refusals: AtomicU64::new(0),
            auth_refusals: AtomicU64::new(0),
            ports: Mutex::new(BTreeSet::new()),
            paths: Mutex::new(PathTotals::default()),
        });
        registry.register_collector(Box::new(scraped.clone()));
        let direction = |family: &Family<Label, Counter>, dir: &'static str| {
            family.get_or_create(&[("direction", dir)]).clone()
        };
        let metrics = Metrics {
            received_messages: direction(&messages, "received"),
            received_bytes: direction(&bytes, "received"),
            sent_messages: direction(&messages, "sent"),
            sent_bytes: direction(&bytes, "sent"),
            sessions,
            active,
            errors,
            scraped,
        };
        (metrics, registry)
    }

    /// Counts a session that ended so, by its outcome label.
    fn ended(&self, ending: &Ending) {
        self.sessions
            .get_or_create(&[("outcome", ending.outcome())])
            .inc();
    }

    fn error(&self, e: &Error) {
        self.errors.get_or_create(&[("kind", error_kind(e))]).inc();
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let wait = Duration::from_nanos(self.credit_wait_nanos.load(Ordering::Relaxed));
        let counter = ConstCounter::new(wait.as_secs_f64());
        counter.encode(encoder.encode_descriptor(
            "credit_wait_seconds",
            "Time the client's sends waited for a credit (or a free staging slot) from the receiver.",
            None,
            MetricType::Counter,
        )?)?;
        let mut refused = encoder.encode_descriptor(
            "handshakes_refused",
            "Handshakes refused: as busy by the server or the library's listener (queue full), or for not proving the pre-shared key.",
            None,
            MetricType::Counter,
        )?;
        for (by, count) in [
            ("server", &self.server_refusals),
            ("listener", &self.listener_refusals),
            ("authentication", &self.auth_refusals),
        ] {
            ConstCounter::new(count.load(Ordering::Relaxed))
                .encode(refused.encode_family(&[("by", by)])?)?;
        }
        let (lost, rebuilt, bytes) = lock(&self.paths).now();
        for (name, help, value) in [
            ("paths_lost", "Paths a session left out after one of their queue pairs failed (--paths: the session went on over the others).", lost),
            ("paths_rebuilt", "Paths left out that a session took back once they answered again.", rebuilt),
        ] {
            ConstCounter::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        if !bytes.is_empty() {
            let mut family = encoder.encode_descriptor(
                "path_bytes",
                "Bytes each path carried, by path number (--paths: 0 is the bootstrap connection's), summed over sessions with more than one queue pair; messages sent again count again.",
                None,
                MetricType::Counter,
            )?;
            for (path, value) in bytes.iter().enumerate() {
                let path = path.to_string();
                ConstCounter::new(*value)
                    .encode(family.encode_family(&[("path", path.as_str())])?)?;
            }
        }
        let ports: Vec<(String, u32)> = match self.ports.lock() {
            Ok(ports) => ports.iter().cloned().collect(),
            Err(poisoned) => poisoned.get_ref().iter().cloned().collect(),
        };
        let read: Vec<(&str, String, Vec<PortCounter>)> = ports
            .iter()
            .map(|(device, port)| {
                let found = counters::read_port(&self.sysfs_root, device, *port);
                (device.as_str(), port.to_string(), found)
            })
            .collect();
        for group in CounterGroup::ALL {
            let mut samples = read
                .iter()
                .flat_map(|(device, port, found)| {
                    found
                        .iter()
                        .filter(move |c| c.group == group)
                        .map(move |c| (*device, port.as_str(), c))
                })
                .peekable();
            if samples.peek().is_none() {
                continue;
            }
            let mut family = encoder.encode_descriptor(
                counter_metric_name(group),
                counter_help(group),
                None,
                MetricType::Counter,
            )?;
            for (device, port, c) in samples {
                let labels = [
                    ("device", device),
                    ("port", port),
                    ("counter", c.name.as_str()),
                ];
                ConstCounter::new(c.value).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The metric family of a counter group's samples (`_total` is added).
fn counter_metric_name(group: CounterGroup) -> &'static str {
    match group {
        CounterGroup::Counters => "port_counters",
        CounterGroup::HwCounters => "port_hw_counters",
    }
}

/// The help text of [`counter_metric_name`]'s family.
fn counter_help(group: CounterGroup) -> &'static str {
    match group {
        CounterGroup::Counters => {
            "The RDMA port's sysfs counters/ as the kernel reports them (port_xmit_data and port_rcv_data count 4-byte words)."
        }
        CounterGroup::HwCounters => "The RDMA port's sysfs hw_counters/ (the provider's own).",
    }
}

/// Serves the metrics at `http://addr/metrics` from now on, when `addr` is given; logs the
/// address it listens on (the real port when `addr` asks for port 0).
///
/// # Errors
/// The address cannot be bound, or metrics were started already.
pub fn start(addr: Option<SocketAddr>, sysfs_root: &Path) -> Result<()> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let listener = TcpListener::bind(addr)
        .with_context(|| format!("cannot serve metrics on {addr} (--metrics)"))?;
    let local = listener
        .local_addr()
        .context("cannot read the metrics listener's address")?;
    let (metrics, registry) = Metrics::new(sysfs_root);
    if METRICS.set(metrics).is_err() {
        bail!("metrics are already being served");
    }
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            super::metrics_http::serve(&listener, &|head| answer_for(head, &registry));
        })
        .context("cannot start the metrics thread")?;
    if local.ip().is_loopback() {
        log::info!("metrics: serving http://{local}/metrics");
    } else {
        log::warn!(
            "metrics: serving http://{local}/metrics, exposed beyond this host (not a loopback \
             address): anyone who can reach it can read them"
        );
    }
    Ok(())
}

/// A session started (`sessions_active` goes up; its RDMA port's counters are read from now on).
pub fn session_started(info: &SessionInfo) {
    let Some(m) = METRICS.get() else { return };
    m.active.inc();
    let mut ports = lock(&m.scraped.ports);
    let devices = std::iter::once(info.device.as_ref())
        .chain(info.extra_paths.iter().map(|p| p.device.as_ref()))
        .flatten();
    for d in devices {
        ports.insert((d.device.clone(), d.port));
    }
}

/// A session's path counts (`paths_lost`, `paths_rebuilt`, `path_bytes`) are read at each
/// scrape while the returned watch lives, and summed with the ended sessions' once it is
/// dropped.
pub fn watch_paths(resumes: &ResumeCounters, paths: &PathCounters) -> PathWatch {
    let Some(m) = METRICS.get() else {
        return PathWatch { id: None };
    };
    let mut totals = lock(&m.scraped.paths);
    let id = totals.next_id;
    totals.next_id += 1;
    totals.running.push((id, resumes.clone(), paths.clone()));
    PathWatch { id: Some(id) }
}

/// A session that [`session_started`] ended (counted by [`Ending::outcome`]).
pub fn session_ended(ending: &Ending) {
    let Some(m) = METRICS.get() else { return };
    m.active.dec();
    m.ended(ending);
}

/// A session failed before it started, with `e`: counted by error kind (unless interrupted)
/// and by the outcome of its [`Ending::before_start`] (interrupted, refused or failed).
pub fn setup_failed(e: &Error) {
    let Some(m) = METRICS.get() else { return };
    let ending = Ending::before_start(e);
    if ending != Ending::Interrupted {
        m.error(e);
    }
    m.ended(&ending);
}

/// A running session failed with `e` (counted by kind; [`session_ended`] counts the session).
pub fn error(e: &Error) {
    if let Some(m) = METRICS.get() {
        m.error(e);
    }
}

/// One message arrived.
pub fn message_received(len: usize) {
    if let Some(m) = METRICS.get() {
        m.received_messages.inc();
        m.received_bytes.inc_by(len as u64);
    }
}

/// One message was sent; `credit_wait` is the sink's [`rdma_container::RdmaSink::credit_wait`].
pub fn message_sent(len: usize, credit_wait: Duration) {
    if let Some(m) = METRICS.get() {
        m.sent_messages.inc();
        m.sent_bytes.inc_by(len as u64);
        let nanos = u64::try_from(credit_wait.as_nanos()).unwrap_or(u64::MAX);
        m.scraped.credit_wait_nanos.store(nanos, Ordering::Relaxed);
    }
}

/// Our server refused a handshake (busy): a refused session.
pub fn refused() {
    if let Some(m) = METRICS.get() {
        m.scraped.server_refusals.fetch_add(1, Ordering::Relaxed);
        m.ended(&Ending::Refused {
            reason: String::new(),
        });
    }
}

/// The library listener's refusals as they are now: [`rdma_container::Listener::busy_refusals`]
/// and [`rdma_container::Listener::auth_refusals`].
pub fn listener_refusals(busy: u64, auth: u64) {
    if let Some(m) = METRICS.get() {
        m.scraped.listener_refusals.store(busy, Ordering::Relaxed);
        m.scraped.auth_refusals.store(auth, Ordering::Relaxed);
    }
}

/// The client's running session failed with `e` (counted by the kind of its library error,
/// `other` without one; [`session_ended`] counts the session).
pub fn client_failed(e: &anyhow::Error) {
    match e.downcast_ref::<Error>() {
        Some(e) => error(e),
        None => {
            if let Some(m) = METRICS.get() {
                m.errors.get_or_create(&[("kind", "other")]).inc();
            }
        }
    }
}

/// The answer to a request head (`None`: longer than [`MAX_REQUEST`]).
fn answer_for(head: Option<&[u8]>, registry: &Registry) -> Vec<u8> {
    let reply = match head {
        Some(head) => route(head),
        None => Reply::TooLarge,
    };
    response(reply, registry)
}

/// Where the head ends: just past the first blank line (`\r\n\r\n` or `\n\n`).
pub(super) fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a request gets.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// The metrics (`head_only` for HEAD).
    Metrics {
        head_only: bool,
    },
    NotFound,
    MethodNotAllowed,
    BadRequest,
    TooLarge,
}

/// Routes a request head: only `GET` and `HEAD` of `/metrics` (any query string) are served.
fn route(head: &[u8]) -> Reply {
    let Ok(text) = std::str::from_utf8(head) else {
        return Reply::BadRequest;
    };
    let line = text.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Reply::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Reply::BadRequest;
    }
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    match (method, path) {
        ("GET", "/metrics") => Reply::Metrics { head_only: false },
        ("HEAD", "/metrics") => Reply::Metrics { head_only: true },
        ("GET" | "HEAD", _) => Reply::NotFound,
        _ => Reply::MethodNotAllowed,
    }
}

/// The whole HTTP response for `reply`.
fn response(reply: Reply, registry: &Registry) -> Vec<u8> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let mut head_only = false;
    let mut extra = "";
    let (status, content_type, body) = match reply {
        Reply::Metrics { head_only: head } => {
            head_only = head;
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => ("200 OK", CONTENT_TYPE, body),
                Err(_) => (
                    "500 Internal Server Error",
                    TEXT,
                    "encoding the metrics failed\n".to_owned(),
                ),
            }
        }
        Reply::NotFound => (
            "404 Not Found",
            TEXT,
            "not found: the metrics are at /metrics\n".to_owned(),
        ),
        Reply::MethodNotAllowed => {
            extra = "Allow: GET, HEAD\r\n";
            (
                "405 Method Not Allowed",
                TEXT,
                "only GET and HEAD are served\n".to_owned(),
            )
        }
        Reply::BadRequest => (
            "400 Bad Request",
            TEXT,
            "not an HTTP/1 request\n".to_owned(),
        ),
        Reply::TooLarge => (
            "431 Request Header Fields Too Large",
            TEXT,
            format!("the request is longer than {MAX_REQUEST} bytes\n"),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_test_support::FakeSysfs;

    #[test]
    fn a_metrics_port_alone_means_loopback_and_an_address_is_taken_as_given() {
        use crate::cli::args::MetricsAddr;
        let parse = |s: &str| s.parse::<MetricsAddr>().map(|m| m.0);
        assert_eq!(parse("9464"), Ok(SocketAddr::from(([127, 0, 0, 1], 9464))));
        assert_eq!(parse("0"), Ok(SocketAddr::from(([127, 0, 0, 1], 0))));
        assert_eq!(
            parse("10.0.0.2:9464"),
            Ok(SocketAddr::from(([10, 0, 0, 2], 9464)))
        );
        assert_eq!(parse("[::1]:9464").map(|a| a.ip().is_loopback()), Ok(true));
        for bad in ["", "65536", "host:9464", "10.0.0.2"] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn scrape_text_has_every_outcome_and_kind_at_zero_and_the_ports_counters() {
        let sysfs = FakeSysfs::new();
        sysfs.write(
            "class/infiniband/mlx5_0/ports/1/counters/port_rcv_packets",
            "5\n",
        );
        sysfs.write(
            "class/infiniband/mlx5_0/ports/1/hw_counters/rnr_nak_retry_err",
            "3\n",
        );
        let (metrics, registry) = Metrics::new(sysfs.root());
        metrics.received_messages.inc_by(2);
        metrics.ended(&Ending::Finished);
        metrics
            .scraped
            .ports
            .lock()
            .expect("not poisoned")
            .insert(("mlx5_0".to_owned(), 1));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for line in [
            "rdma_container_sessions_total{outcome=\"end_of_stream\"} 1",
            "rdma_container_sessions_total{outcome=\"refused\"} 0",
            "rdma_container_messages_total{direction=\"received\"} 2",
            "rdma_container_messages_total{direction=\"sent\"} 0",
            "rdma_container_errors_total{kind=\"peer_lost\"} 0",
            "rdma_container_errors_total{kind=\"checksum\"} 0",
            "rdma_container_errors_total{kind=\"other\"} 0",
            "rdma_container_sessions_active 0",
            "rdma_container_credit_wait_seconds_total 0.0",
            "rdma_container_handshakes_refused_total{by=\"listener\"} 0",
            "rdma_container_port_counters_total{device=\"mlx5_0\",port=\"1\",counter=\"port_rcv_packets\"} 5",
            "rdma_container_port_hw_counters_total{device=\"mlx5_0\",port=\"1\",counter=\"rnr_nak_retry_err\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }

    #[test]
    fn errors_are_counted_by_the_kind_their_variant_means() {
        let lost = Error::PeerLost {
            reason: "EOF".into(),
            messages: 3,
            cause: None,
        };
        assert_eq!(error_kind(&lost), "peer_lost");
        assert_eq!(error_kind(&Error::Rejected("busy".into())), "rejected");
        assert_eq!(
            error_kind(&Error::IdleTimeout {
                seconds: 1.0,
                messages: 0
            }),
            "timeout"
        );
        let closed = Error::TransportClosed { transport: "tcp" };
        assert_eq!(error_kind(&closed), "transport");
        assert_eq!(error_kind(&Error::Closed), "other");
        for kind in [&lost, &closed].map(error_kind) {
            assert!(ERROR_KINDS.contains(&kind));
        }
    }

    #[test]
    fn only_get_and_head_of_slash_metrics_are_served() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Reply::Metrics { head_only: false }
        );
        assert_eq!(
            route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Reply::Metrics { head_only: false }
        );
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.1\r\n\r\n"),
            Reply::Metrics { head_only: true }
        );
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Reply::NotFound);
        assert_eq!(route(b"GET /metricsx HTTP/1.1\r\n\r\n"), Reply::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Reply::MethodNotAllowed
        );
        for garbage in [
            &b""[..],
            b"\xff\xfe\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics SPDY/3\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(route(garbage), Reply::BadRequest, "{garbage:?}");
        }
    }

    #[test]
    fn a_head_request_gets_the_headers_without_the_body() {
        let (_metrics, registry) = Metrics::new(Path::new("/nonexistent"));
        let full = String::from_utf8(response(Reply::Metrics { head_only: false }, &registry))
            .expect("text");
        let head = String::from_utf8(response(Reply::Metrics { head_only: true }, &registry))
            .expect("text");
        assert!(full.starts_with("HTTP/1.1 200 OK\r\n"), "{full}");
        assert!(full.ends_with("# EOF\n"), "{full}");
        let (full_head, _) = full.split_once("\r\n\r\n").expect("a head");
        assert_eq!(head, format!("{full_head}\r\n\r\n"));
        let not_found = response(Reply::NotFound, &registry);
        assert!(not_found.starts_with(b"HTTP/1.1 404 Not Found\r\n"));
    }
}
