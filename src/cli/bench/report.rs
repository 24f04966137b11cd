//! What `bench --client` prints: perftest's rows from the measured figures, the table (a
//! header block, then a row per size as it finishes) and the JSON report.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, Result};
use rdma_container::{Config, SessionInfo};
use serde::Serialize;

use super::header::BwMeasured;
use super::ops::{histogram, Bucket};
use crate::cli::args::{BenchArgs, BenchMode};

/// The width of the table's rules.
const LINE: usize = 95;

/// One row of results.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Row {
    Bw {
        bytes: usize,
        iterations: u64,
        bw_peak: f64,
        bw_average: f64,
        msg_rate_mpps: f64,
        unit: &'static str,
        /// With -b: "both" on the row (the two directions added, as perftest prints it), and
        /// "client->server" or "server->client" on each of its `directions`.
        #[serde(skip_serializing_if = "Option::is_none")]
        direction: Option<&'static str>,
        /// With -b: each direction's own figures, measured where its messages arrive.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        directions: Vec<Row>,
        /// What the size changed in the RDMA port's sysfs counters (none on tcp).
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        port_counters: BTreeMap<String, u64>,
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
        percentiles_us: Percentiles,
        /// Log-linear buckets (HdrHistogram's layout), the non-empty ones.
        histogram: Vec<Bucket>,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        port_counters: BTreeMap<String, u64>,
    },
}

/// The latency percentiles (perftest's -H), microseconds.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub p99_99: f64,
    pub max: f64,
}

impl Row {
    /// Records the RDMA port counter deltas of this size.
    pub fn set_port_counters(&mut self, deltas: Vec<(String, u64)>) {
        let map = match self {
            Row::Bw { port_counters, .. } | Row::Lat { port_counters, .. } => port_counters,
        };
        map.extend(deltas);
    }
}

/// The whole run, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Report {
    mode: BenchMode,
    transport: String,
    device: Option<String>,
    port: Option<u32>,
    gid_index: Option<u32>,
    credits: u16,
    /// The queue pairs the session stripes over (`--qps`; perftest's "Number of qps").
    qps: u8,
    busy_poll_us: Option<u64>,
    /// How the client sends: "copy" (`send`) or "in_place" (`send_in_place`, --in-place).
    send: &'static str,
    pub results: Vec<Row>,
}

impl Report {
    /// An empty report for the first session's settings; prints the table's header block
    /// unless the output is JSON.
    pub fn start(args: &BenchArgs, info: &SessionInfo, config: &Config) -> Self {
        let r = Self {
            mode: args.mode,
            transport: info.transport.name().to_owned(),
            device: info.device.as_ref().map(|d| d.device.clone()),
            port: info.device.as_ref().map(|d| d.port),
            gid_index: info.device.as_ref().map(|d| d.gid_index),
            credits: info.credits(),
            qps: info.qps(),
            busy_poll_us: config.busy_poll.map(|d| d.as_micros() as u64),
            send: if args.ops.in_place {
                "in_place"
            } else {
                "copy"
            },
            results: Vec::new(),
        };
        if !args.json {
            print_header(&r, args, info);
        }
        r
    }

    /// Prints the JSON (or the table's closing rule) and writes `--out-json`.
    pub fn finish(&self, args: &BenchArgs) -> Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        if args.json {
            // JSON lines only, on stdout: the interval reports (if any) came before, one line
            // each, and the report is one more line.
            println!("{}", serde_json::to_string(self)?);
        } else {
            println!("{}", "-".repeat(LINE));
        }
        if let Some(path) = &args.out_json {
            std::fs::write(path, format!("{json}\n"))
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

/// perftest's bandwidth columns from what the server measured.
pub fn bw_row(size: usize, m: &BwMeasured, report_gbits: bool) -> Row {
    let secs = m.seconds.max(1e-9);
    let (scale, unit) = if report_gbits {
        (8.0 / 1e9, "Gb/sec")
    } else {
        (1.0 / (1024.0 * 1024.0), "MiB/sec")
    };
    Row::Bw {
        bytes: size,
        iterations: m.messages,
        bw_peak: m.peak_bytes_per_sec * scale,
        bw_average: m.bytes as f64 / secs * scale,
        // The clock starts at the first arrival: the messages after it are the timed ones.
        msg_rate_mpps: m.timed_messages.unwrap_or(m.messages.saturating_sub(1)) as f64 / secs / 1e6,
        unit,
        direction: None,
        directions: Vec::new(),
        port_counters: BTreeMap::new(),
    }
}

/// -b: perftest's one row, both directions added (bandwidth, peak, message rate), from the row
/// of each (`out`: client->server, `back`: server->client); its iterations are the client's own,
/// as perftest prints its own. Each direction's row stays under `directions`.
pub fn bidirectional_row(mut out: Row, mut back: Row) -> Row {
    let figures = |row: &Row| match row {
        Row::Bw {
            bytes,
            iterations,
            bw_peak,
            bw_average,
            msg_rate_mpps,
            unit,
            ..
        } => (
            *bytes,
            *iterations,
            *bw_peak,
            *bw_average,
            *msg_rate_mpps,
            *unit,
        ),
        Row::Lat { .. } => unreachable!("-b is refused for lat"),
    };
    let (bytes, iterations, peak_out, avg_out, rate_out, unit) = figures(&out);
    let (_, _, peak_back, avg_back, rate_back, _) = figures(&back);
    for (row, name) in [(&mut out, "client->server"), (&mut back, "server->client")] {
        if let Row::Bw { direction, .. } = row {
            *direction = Some(name);
        }
    }
    Row::Bw {
        bytes,
        iterations,
        bw_peak: peak_out + peak_back,
        bw_average: avg_out + avg_back,
        msg_rate_mpps: rate_out + rate_back,
        unit,
        direction: Some("both"),
        directions: vec![out, back],
        port_counters: BTreeMap::new(),
    }
}

/// perftest's latency columns from half round trips in nanoseconds.
pub fn latency_row(size: usize, mut ns: Vec<u64>) -> Row {
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
        percentiles_us: Percentiles {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p99_9: at(0.999),
            p99_99: at(0.9999),
            max: us(ns.last().copied().unwrap_or(0)),
        },
        histogram: histogram(&ns),
        port_counters: BTreeMap::new(),
    }
}

fn print_header(r: &Report, args: &BenchArgs, info: &SessionInfo) {
    let title = match args.mode {
        BenchMode::Bw if args.ops.bidirectional => {
            "Send Bidirectional BW Test (rdma-container bench, both directions added)"
        }
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
    let top = super::client::sizes(args).last().copied().unwrap_or(1);
    let larger = args.credits_for(top, info.qps());
    if args.all && larger != r.credits {
        println!(
            " Credits (depth) : {} ({larger} for the largest sizes)",
            r.credits
        );
    } else {
        println!(" Credits (depth) : {}", r.credits);
    }
    println!(" Number of qps   : {}", r.qps);
    println!(
        " Busy poll       : {}",
        r.busy_poll_us
            .map_or("off".to_owned(), |us| format!("{us} usec"))
    );
    if r.send == "in_place" {
        println!(" Send            : in place (send_in_place: produced in the slot, no copy)");
    }
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

/// Prints one row of the table.
pub fn print_row(row: &Row) {
    match row {
        Row::Bw {
            bytes,
            iterations,
            bw_peak,
            bw_average,
            msg_rate_mpps,
            port_counters,
            ..
        } => {
            // With -b this is the sum, as perftest prints it (the directions are in the JSON).
            println!(
                " {bytes:<10} {iterations:<14} {bw_peak:<20.2} {bw_average:<22.2} {msg_rate_mpps:<14.6}"
            );
            print_counters(port_counters);
        }
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
            port_counters,
            ..
        } => {
            println!(
                " {bytes:<8} {iterations:<12} {t_min_us:<12.2} {t_max_us:<12.2} {t_typical_us:<16.2} {t_avg_us:<12.2} {t_stdev_us:<14.2} {p99_us:<22.2} {p99_9_us:<22.2}"
            );
            print_counters(port_counters);
        }
    }
    let _ = std::io::stdout().flush();
}

/// The port counters a size changed, a line each (perftest's -W).
fn print_counters(deltas: &BTreeMap<String, u64>) {
    for (name, delta) in deltas {
        println!("   port counter {name}: +{delta}");
    }
}

/// With -H: the percentiles and the histogram of a latency row.
pub fn print_histogram(row: &Row) {
    if let Row::Lat {
        bytes,
        percentiles_us: p,
        histogram,
        ..
    } = row
    {
        println!(
            " Percentiles of {bytes} B [usec]: 50% {:.2}  90% {:.2}  99% {:.2}  99.9% {:.2}  99.99% {:.2}  max {:.2}",
            p.p50, p.p90, p.p99, p.p99_9, p.p99_99, p.max
        );
        super::ops::print_histogram(*bytes, histogram);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bidirectional_row_adds_both_directions_and_keeps_each() {
        let measured = |messages: u64, bytes: u64| BwMeasured {
            messages,
            bytes,
            seconds: 1.0,
            peak_bytes_per_sec: 2.0 * bytes as f64,
            timed_messages: Some(messages - 1),
        };
        let row = bidirectional_row(
            bw_row(1024, &measured(100, 1 << 20), false),
            bw_row(1024, &measured(301, 3 << 20), false),
        );
        let Row::Bw {
            iterations,
            bw_peak,
            bw_average,
            msg_rate_mpps,
            direction,
            directions,
            ..
        } = &row
        else {
            panic!("a bw row");
        };
        assert_eq!((*iterations, *direction), (100, Some("both")));
        assert_eq!((*bw_average, *bw_peak), (4.0, 8.0));
        assert!((msg_rate_mpps - 399e-6).abs() < 1e-12, "{msg_rate_mpps}");
        let names: Vec<_> = directions
            .iter()
            .map(|d| match d {
                Row::Bw { direction, .. } => *direction,
                Row::Lat { .. } => None,
            })
            .collect();
        assert_eq!(names, [Some("client->server"), Some("server->client")]);
    }

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
