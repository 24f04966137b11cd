//! `bench`: bandwidth and latency with perftest's vocabulary and columns.
//!
//! Every measurement is one duplex session (the client's sending session first, then its
//! receiving one). The client's first message is a small JSON header saying what to run; the
//! server takes the client's credits and message size for the session. `bw` streams messages
//! one way and the server, which sees them arrive, measures and sends its figures back; `lat`
//! is a ping-pong (the server echoes every message) timed on the client, and reports half the
//! round trip, as perftest does.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rdma_container::{
    duplex, Config, Error, Incoming, Listener, RdmaSink, RdmaSrc, Role, SessionInfo,
    TransportChoice,
};
use serde::{Deserialize, Serialize};

use super::args::{DeviceArgs, Seconds};

/// The largest size `-a` runs (perftest's default top size).
const ALL_MAX: usize = 8 << 20;
/// Room for the header message in a session whose messages are smaller.
const HEADER_ROOM: usize = 512;
/// Ping-pongs before the timed ones.
const LAT_WARM_UP: u64 = 16;

/// `bench` options.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Serve benchmark clients on IP:PORT (until the client's last size, or Ctrl-C).
    #[arg(
        long,
        value_name = "IP:PORT",
        conflicts_with = "client",
        required_unless_present = "client"
    )]
    pub server: Option<SocketAddr>,

    /// Run the benchmark against the server at IP:PORT and print the results.
    #[arg(long, value_name = "IP:PORT")]
    pub client: Option<SocketAddr>,

    /// bw: one-way stream (like ib_send_bw); lat: ping-pong (like ib_send_lat).
    #[arg(long, value_enum, default_value_t = BenchMode::Bw)]
    pub mode: BenchMode,

    /// Message size in bytes (default 65536 for bw, 2 for lat).
    #[arg(short = 's', long, value_name = "BYTES", conflicts_with = "all")]
    pub size: Option<usize>,

    /// Every power of two from 2 bytes to 8 MiB.
    #[arg(short = 'a', long)]
    pub all: bool,

    /// Messages per size (default 5000 for bw, 1000 for lat).
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration")]
    pub iters: Option<u64>,

    /// Run each size for this many seconds instead of a message count.
    #[arg(short = 'D', long, value_name = "SECONDS")]
    pub duration: Option<Seconds>,

    /// Messages in flight: the receiver's slots (perftest's -t). Line rate with large
    /// messages needs a few; small messages want 16 or more.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub credits: u16,

    /// Data path.
    #[arg(long, value_enum, default_value_t = TransportChoice::Auto)]
    pub transport: TransportChoice,

    /// Device overrides.
    #[command(flatten)]
    pub device: DeviceArgs,

    /// Poll this many microseconds before sleeping (default: 1000000 for lat, off for bw).
    #[arg(long, value_name = "USEC", value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub busy_poll: Option<u64>,

    /// Report bandwidth in Gb/sec instead of MiB/sec.
    #[arg(long)]
    pub report_gbits: bool,

    /// Print the results as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Also write the JSON results to FILE.
    #[arg(long, value_name = "FILE")]
    pub out_json: Option<PathBuf>,

    /// Client: keep retrying to reach the server for this long (seconds).
    #[arg(long, default_value = "30", value_name = "SECONDS")]
    pub connect_timeout: Seconds,

    /// Deadline for each session's handshake (seconds).
    #[arg(long, default_value = "10", value_name = "SECONDS")]
    pub handshake_timeout: Seconds,

    /// Read RDMA devices from DIR/class/infiniband instead of /sys/class/infiniband.
    #[arg(long, default_value = "/sys", value_name = "DIR")]
    pub sysfs_root: PathBuf,
}

/// What `bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchMode {
    /// Bandwidth and message rate, one way.
    Bw,
    /// Round-trip latency, reported as half the round trip.
    Lat,
}

/// The client's first message in each session.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    mode: BenchMode,
    size: usize,
    iters: Option<u64>,
    duration_ms: Option<u64>,
    last: bool,
}

/// What the server measured in a bw session.
#[derive(Debug, Serialize, Deserialize)]
struct BwMeasured {
    messages: u64,
    bytes: u64,
    seconds: f64,
    peak_bytes_per_sec: f64,
}

/// One row of results.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Row {
    Bw {
        bytes: usize,
        iterations: u64,
        bw_peak: f64,
        bw_average: f64,
        msg_rate_mpps: f64,
        unit: &'static str,
    },
    Lat {
        bytes: usize,
        iterations: u64,
        t_min_us: f64,
        t_max_us: f64,
        t_typical_us: f64,
        t_avg_us: f64,
        t_stdev_us: f64,
        p99_us: f64,
        p99_9_us: f64,
    },
}

#[derive(Debug, Serialize)]
struct Report {
    mode: BenchMode,
    transport: String,
    device: Option<String>,
    port: Option<u32>,
    gid_index: Option<u32>,
    credits: u16,
    busy_poll_us: Option<u64>,
    results: Vec<Row>,
}

fn config(args: &BenchArgs, stop: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> Config {
    let busy = args
        .busy_poll
        .or((args.mode == BenchMode::Lat).then_some(1_000_000));
    super::shared_config!(args)
        .with_busy_poll(busy.filter(|&us| us > 0).map(Duration::from_micros))
        .with_stop(Some(stop.clone()))
}

/// Runs `bench`; returns the exit status.
pub fn run(args: &BenchArgs, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<u8> {
    let config = config(args, &stop);
    config.validate()?;
    match (args.server, args.client) {
        (Some(addr), None) => serve(addr, config),
        (None, Some(addr)) => measure(addr, config, args),
        _ => bail!("say bench --server IP:PORT or bench --client IP:PORT"),
    }
}

fn sizes(args: &BenchArgs) -> Vec<usize> {
    if args.all {
        std::iter::successors(Some(2usize), |s| (*s < ALL_MAX).then_some(s * 2)).collect()
    } else {
        vec![args.size.unwrap_or(match args.mode {
            BenchMode::Bw => 65536,
            BenchMode::Lat => 2,
        })]
    }
}

fn measure(addr: SocketAddr, base: Config, args: &BenchArgs) -> Result<u8> {
    let sizes = sizes(args);
    let iters = args.duration.is_none().then(|| {
        args.iters.unwrap_or(match args.mode {
            BenchMode::Bw => 5000,
            BenchMode::Lat => 1000,
        })
    });
    let mut report: Option<Report> = None;
    for (i, &size) in sizes.iter().enumerate() {
        let config = base.clone().with_max_msg_size(size.max(HEADER_ROOM));
        let (mut sink, mut src) = duplex::connect(addr, &config)
            .with_context(|| format!("cannot start a benchmark session with {addr}"))?;
        let report = report.get_or_insert_with(|| {
            let r = new_report(args, sink.info(), &config);
            if !args.json {
                print_header(&r, args, sink.info());
            }
            r
        });
        let header = Header {
            mode: args.mode,
            size,
            iters,
            duration_ms: args.duration.map(|d| d.0.as_millis() as u64),
            last: i + 1 == sizes.len(),
        };
        sink.send(&serde_json::to_vec(&header)?)?;
        let row = match args.mode {
            BenchMode::Bw => run_bw(sink, &mut src, &header, args)?,
            BenchMode::Lat => {
                let row = run_lat(&mut sink, &mut src, &header)?;
                sink.finish()
                    .context("ending the benchmark stream failed")?;
                row
            }
        };
        while src.recv()?.is_some() {}
        if !args.json {
            print_row(&row);
        }
        report.results.push(row);
    }
    let Some(report) = report else {
        bail!("no size to run");
    };
    let json = serde_json::to_string_pretty(&report)?;
    if args.json {
        println!("{json}");
    } else {
        println!("{}", "-".repeat(LINE));
    }
    if let Some(path) = &args.out_json {
        std::fs::write(path, format!("{json}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(0)
}

/// Streams the messages, ends the stream, then reads what the server measured.
fn run_bw(mut sink: RdmaSink, src: &mut RdmaSrc, h: &Header, args: &BenchArgs) -> Result<Row> {
    let payload = vec![0x5au8; h.size];
    let started = Instant::now();
    let until = h.duration_ms.map(|ms| started + Duration::from_millis(ms));
    let progress = std::io::stderr().is_terminal();
    let mut last_note = started;
    let mut sent = 0u64;
    loop {
        if h.iters.is_some_and(|n| sent >= n) || until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        sink.send(&payload)?;
        sent += 1;
        if progress && sent.is_multiple_of(1024) && last_note.elapsed() >= Duration::from_secs(1) {
            last_note = Instant::now();
            eprint!(
                "\rbench: {} B x {sent} sent, {:.0} s",
                h.size,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if progress && last_note != started {
        eprintln!();
    }
    sink.finish()
        .context("ending the benchmark stream failed")?;
    let Some(answer) = src.recv()? else {
        bail!("the server ended without its measurements");
    };
    let m: BwMeasured =
        serde_json::from_slice(answer).context("the server's measurements do not parse")?;
    if m.messages != sent {
        bail!("sent {sent} messages but the server counted {}", m.messages);
    }
    let secs = m.seconds.max(1e-9);
    let (scale, unit) = if args.report_gbits {
        (8.0 / 1e9, "Gb/sec")
    } else {
        (1.0 / (1024.0 * 1024.0), "MiB/sec")
    };
    Ok(Row::Bw {
        bytes: h.size,
        iterations: m.messages,
        bw_peak: m.peak_bytes_per_sec * scale,
        bw_average: m.bytes as f64 / secs * scale,
        // The clock starts at the first arrival: the messages after it are the timed ones.
        msg_rate_mpps: m.messages.saturating_sub(1) as f64 / secs / 1e6,
        unit,
    })
}

fn run_lat(sink: &mut RdmaSink, src: &mut RdmaSrc, h: &Header) -> Result<Row> {
    let payload = vec![0x5au8; h.size];
    let mut ping = || -> Result<Duration> {
        let t = Instant::now();
        sink.send(&payload)?;
        match src.recv()? {
            Some(echo) if echo.len() == payload.len() => Ok(t.elapsed()),
            Some(echo) => bail!(
                "echo of {} bytes for a {}-byte ping",
                echo.len(),
                payload.len()
            ),
            None => bail!("the server ended the echo stream"),
        }
    };
    for _ in 0..LAT_WARM_UP {
        ping()?;
    }
    let started = Instant::now();
    let until = h.duration_ms.map(|ms| started + Duration::from_millis(ms));
    let mut half_rtt_ns: Vec<u64> = Vec::with_capacity(h.iters.unwrap_or(100_000) as usize);
    loop {
        if h.iters.is_some_and(|n| half_rtt_ns.len() as u64 >= n)
            || until.is_some_and(|t| Instant::now() >= t)
        {
            break;
        }
        half_rtt_ns.push(ping()?.as_nanos() as u64 / 2);
    }
    Ok(latency_row(h.size, half_rtt_ns))
}

/// perftest's latency columns from half round trips in nanoseconds.
fn latency_row(size: usize, mut ns: Vec<u64>) -> Row {
    ns.sort_unstable();
    let n = ns.len().max(1);
    let us = |v: u64| v as f64 / 1000.0;
    let at = |q: f64| {
        us(ns
            .get(((n as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0))
    };
    let avg = ns.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let var = ns.iter().map(|&v| (v as f64 - avg).powi(2)).sum::<f64>() / n as f64;
    Row::Lat {
        bytes: size,
        iterations: ns.len() as u64,
        t_min_us: us(ns.first().copied().unwrap_or(0)),
        t_max_us: us(ns.last().copied().unwrap_or(0)),
        t_typical_us: at(0.5),
        t_avg_us: avg / 1000.0,
        t_stdev_us: var.sqrt() / 1000.0,
        p99_us: at(0.99),
        p99_9_us: at(0.999),
    }
}

const LINE: usize = 95;

fn new_report(args: &BenchArgs, info: &SessionInfo, config: &Config) -> Report {
    Report {
        mode: args.mode,
        transport: info.transport.name().to_owned(),
        device: info.device.as_ref().map(|d| d.device.clone()),
        port: info.device.as_ref().map(|d| d.port),
        gid_index: info.device.as_ref().map(|d| d.gid_index),
        credits: info.credits(),
        busy_poll_us: config.busy_poll.map(|d| d.as_micros() as u64),
        results: Vec::new(),
    }
}

fn print_header(r: &Report, args: &BenchArgs, info: &SessionInfo) {
    let title = match args.mode {
        BenchMode::Bw => "Send BW Test (rdma-container bench)",
        BenchMode::Lat => "Send Latency Test (rdma-container bench, half round trip)",
    };
    println!("{}", "-".repeat(LINE));
    println!("{:^width$}", title, width = LINE);
    println!(" Transport       : {}", r.transport);
    match &info.device {
        Some(d) => {
            println!(" Device          : {}", d.device);
            println!(" Port            : {}", d.port);
            println!(" GID index       : {}", d.gid_index);
            println!(" GID             : {}", d.gid_string());
        }
        None => println!(" Device          : none (tcp)"),
    }
    println!(
        " MTU             : {}",
        info.mtu().map_or("-".to_owned(), |m| format!("{m} bytes"))
    );
    println!(" Credits (depth) : {}", r.credits);
    println!(
        " Busy poll       : {}",
        r.busy_poll_us
            .map_or("off".to_owned(), |us| format!("{us} usec"))
    );
    println!(
        " Path            : {} -> {}",
        info.path.source, info.path.peer
    );
    println!("{}", "-".repeat(LINE));
    match args.mode {
        BenchMode::Bw => {
            let unit = if args.report_gbits {
                "Gb/sec"
            } else {
                "MiB/sec"
            };
            println!(
                " {:<10} {:<14} {:<20} {:<22} {:<14}",
                "#bytes",
                "#iterations",
                format!("BW peak[{unit}]"),
                format!("BW average[{unit}]"),
                "MsgRate[Mpps]"
            );
        }
        BenchMode::Lat => println!(
            " {:<8} {:<12} {:<12} {:<12} {:<16} {:<12} {:<14} {:<22} {:<22}",
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]"
        ),
    }
    let _ = std::io::stdout().flush();
}

fn print_row(row: &Row) {
    match row {
        Row::Bw {
            bytes,
            iterations,
            bw_peak,
            bw_average,
            msg_rate_mpps,
            ..
        } => println!(
            " {bytes:<10} {iterations:<14} {bw_peak:<20.2} {bw_average:<22.2} {msg_rate_mpps:<14.6}"
        ),
        Row::Lat {
            bytes,
            iterations,
            t_min_us,
            t_max_us,
            t_typical_us,
            t_avg_us,
            t_stdev_us,
            p99_us,
            p99_9_us,
        } => println!(
            " {bytes:<8} {iterations:<12} {t_min_us:<12.2} {t_max_us:<12.2} {t_typical_us:<16.2} {t_avg_us:<12.2} {t_stdev_us:<14.2} {p99_us:<22.2} {p99_9_us:<22.2}"
        ),
    }
    let _ = std::io::stdout().flush();
}

/// Serves benchmark clients until the client's last size (or Ctrl-C).
fn serve(addr: SocketAddr, config: Config) -> Result<u8> {
    let listener = Listener::bind(
        addr,
        &config
            .clone()
            .with_max_msg_size(ALL_MAX.max(config.max_msg_size)),
    )?;
    log::info!("bench server listening on {addr}");
    loop {
        let (mut sink, mut src) = match accept_pair(&listener, &config) {
            Ok(pair) => pair,
            Err(e) if matches!(e.downcast_ref::<Error>(), Some(Error::Interrupted)) => {
                return Ok(super::EXIT_INTERRUPTED)
            }
            Err(e) => {
                log::error!("benchmark session setup failed: {e:#}");
                continue;
            }
        };
        match serve_one(&mut sink, &mut src) {
            Ok(last) => {
                if let Err(e) = sink.finish() {
                    log::warn!("ending the reply stream failed: {}", e.chain());
                }
                if last {
                    return Ok(0);
                }
            }
            Err(e) => log::error!("benchmark session failed: {e:#}"),
        }
    }
}

/// One client's sending session (we receive), then its receiving session from the same
/// address (we send), both with the client's credits and message size.
fn accept_pair(listener: &Listener, config: &Config) -> Result<(RdmaSink, RdmaSrc)> {
    let mut first: Incoming = loop {
        let incoming = listener.accept()?;
        if incoming.peer_role() == Role::Sender {
            break incoming;
        }
        incoming.refuse("bench: send on the first session");
    };
    let peer = first.peer_addr().ip();
    first.adopt_peer_settings();
    let src = first.accept_src()?;
    let deadline = Instant::now() + config.handshake_timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(mut second) = listener.accept_timeout(left)? else {
            bail!("the client's receiving session did not arrive");
        };
        if second.peer_addr().ip() == peer && second.peer_role() == Role::Receiver {
            second.adopt_peer_settings();
            return Ok((second.accept_sink()?, src));
        }
        second.refuse("busy: a benchmark is being set up");
    }
}

/// Runs what the header asks; returns whether it was the client's last size.
fn serve_one(sink: &mut RdmaSink, src: &mut RdmaSrc) -> Result<bool> {
    let Some(raw) = src.recv()? else {
        bail!("the client ended before its header");
    };
    let header: Header =
        serde_json::from_slice(raw).context("the client's header does not parse")?;
    match header.mode {
        BenchMode::Bw => {
            let mut messages = 0u64;
            let mut bytes = 0u64;
            let mut started: Option<Instant> = None;
            let mut last = Instant::now();
            // Peak: the best rate over windows of 1/16 of the run (at least 64 messages).
            let window = header.iters.map_or(4096, |n| (n / 16).max(64));
            let (mut window_start, mut window_bytes, mut peak) = (Instant::now(), 0u64, 0f64);
            while let Some(msg) = src.recv()? {
                let now = Instant::now();
                let first = *started.get_or_insert(now);
                if messages == 0 {
                    window_start = first;
                }
                messages += 1;
                bytes += msg.len() as u64;
                window_bytes += msg.len() as u64;
                last = now;
                if messages.is_multiple_of(window) {
                    let secs = now.duration_since(window_start).as_secs_f64();
                    if secs > 0.0 {
                        peak = peak.max(window_bytes as f64 / secs);
                    }
                    window_start = now;
                    window_bytes = 0;
                }
            }
            // The first arrival starts the clock: count the bytes after it.
            let seconds = started.map_or(0.0, |s| last.duration_since(s).as_secs_f64());
            let timed_bytes = bytes.saturating_sub(header.size as u64);
            let average = if seconds > 0.0 {
                timed_bytes as f64 / seconds
            } else {
                0.0
            };
            let measured = BwMeasured {
                messages,
                bytes: timed_bytes,
                seconds,
                peak_bytes_per_sec: peak.max(average),
            };
            sink.send(&serde_json::to_vec(&measured)?)?;
        }
        BenchMode::Lat => {
            let mut echo = Vec::with_capacity(header.size);
            while let Some(msg) = src.recv()? {
                echo.clear();
                echo.extend_from_slice(msg);
                sink.send(&echo)?;
            }
        }
    }
    Ok(header.last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_columns_are_perftests() {
        let Row::Lat {
            t_min_us,
            t_max_us,
            t_typical_us,
            t_avg_us,
            p99_us,
            ..
        } = latency_row(2, (1..=1000).map(|i| i * 1000).collect())
        else {
            panic!("a latency row");
        };
        assert_eq!((t_min_us, t_max_us), (1.0, 1000.0));
        assert_eq!(t_typical_us, 500.0);
        assert_eq!(t_avg_us, 500.5);
        assert_eq!(p99_us, 990.0);
    }
}
