//! `bench`'s operator options, perftest's: both directions at once, running until Ctrl-C with
//! a report every interval, the latency histogram, pass/fail limits, the RDMA port's counter
//! deltas and binding to the device's NUMA node.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::report::Row;
use crate::cli::args::OpsArgs;
use rdma_container::roce::counters::{self, CounterGroup};

/// Exit status when a result misses a `--limit-*` (the results are still printed).
pub const EXIT_LIMIT_MISSED: u8 = 6;

/// The checks behind `--limit-bw`, `--limit-msgrate` and `--limit-lat` (the flags are
/// defined with `bench`'s others, in [`crate::cli::args`]).
impl OpsArgs {
    /// The limits a row misses, one clear line each.
    pub fn missed_limits(&self, row: &Row) -> Vec<String> {
        let mut missed = Vec::new();
        match row {
            Row::Bw {
                bytes,
                bw_average,
                msg_rate_mpps,
                unit,
                direction,
                ..
            } => {
                let gbps = if *unit == "Gb/sec" {
                    *bw_average
                } else {
                    bw_average * 1024.0 * 1024.0 * 8.0 / 1e9
                };
                let what = match direction {
                    Some("both") => format!("{bytes} B both directions"),
                    Some(d) => format!("{bytes} B {d}"),
                    None => format!("{bytes} B"),
                };
                if let Some(limit) = self.limit_bw.filter(|&l| gbps < l) {
                    missed.push(format!(
                        "{what}: BW average {gbps:.3} Gb/s is below --limit-bw {limit}"
                    ));
                }
                if let Some(limit) = self.limit_msgrate.filter(|&l| *msg_rate_mpps < l) {
                    missed.push(format!(
                        "{what}: message rate {msg_rate_mpps:.6} Mpps is below --limit-msgrate {limit}"
                    ));
                }
            }
            Row::Lat {
                bytes, t_avg_us, ..
            } => {
                if let Some(limit) = self.limit_lat.filter(|&l| *t_avg_us > l) {
                    missed.push(format!(
                        "{bytes} B: average latency {t_avg_us:.2} usec is above --limit-lat {limit}"
                    ));
                }
            }
        }
        missed
    }
}

/// One bucket of the latency histogram: samples in `[from_ns, to_ns)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    pub from_ns: u64,
    pub to_ns: u64,
    pub count: u64,
}

/// Sub-buckets per power of two: a bucket is at most 1/16 of its values wide.
const SUB_BUCKETS: u64 = 16;

/// The bucket `v` falls in: exact below [`SUB_BUCKETS`], then each power of two cut into
/// [`SUB_BUCKETS`] equal parts (HdrHistogram's log-linear layout at one significant hex digit).
fn bucket_of(v: u64) -> (u64, u64) {
    if v < SUB_BUCKETS {
        return (v, v + 1);
    }
    let magnitude = 63 - v.leading_zeros() as u64; // 2^magnitude <= v
    let width = 1u64 << (magnitude - SUB_BUCKETS.trailing_zeros() as u64);
    let from = v / width * width;
    (from, from.saturating_add(width))
}

/// The histogram of sorted samples (nanoseconds): the non-empty buckets, lowest first.
pub fn histogram(sorted_ns: &[u64]) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    for &v in sorted_ns {
        let (from_ns, to_ns) = bucket_of(v);
        match out.last_mut() {
            Some(b) if b.from_ns == from_ns => b.count += 1,
            _ => out.push(Bucket {
                from_ns,
                to_ns,
                count: 1,
            }),
        }
    }
    out
}

/// Prints the histogram's buckets as perftest's -H does its percentiles: a line each.
pub fn print_histogram(bytes: usize, buckets: &[Bucket]) {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    println!(" Histogram of {bytes} B (half round trips, usec):");
    let mut below = 0u64;
    for b in buckets {
        below += b.count;
        println!(
            "   [{:>10.3}, {:>10.3})  {:>10}  {:>7.3}%",
            b.from_ns as f64 / 1000.0,
            b.to_ns as f64 / 1000.0,
            b.count,
            below as f64 * 100.0 / total.max(1) as f64
        );
    }
}

/// The RDMA port counters before a size ran, to print what it changed (perftest's -W).
pub struct CounterSnapshot {
    before: Vec<(CounterGroup, String, u64)>,
    device: String,
    port: u32,
}

impl CounterSnapshot {
    /// Reads the counters of `device`'s `port` now.
    pub fn take(sysfs_root: &Path, device: &str, port: u32) -> Self {
        Self {
            before: read(sysfs_root, device, port),
            device: device.to_owned(),
            port,
        }
    }

    /// What changed since: `(group/name, delta)`, only counters that moved.
    pub fn deltas(&self, sysfs_root: &Path) -> Vec<(String, u64)> {
        let after = read(sysfs_root, &self.device, self.port);
        after
            .into_iter()
            .filter_map(|(group, name, value)| {
                let old = self
                    .before
                    .iter()
                    .find(|(g, n, _)| *g == group && *n == name)
                    .map_or(0, |(_, _, v)| *v);
                let dir = group.dir();
                (value != old).then(|| (format!("{dir}/{name}"), value.wrapping_sub(old)))
            })
            .collect()
    }
}

fn read(sysfs_root: &Path, device: &str, port: u32) -> Vec<(CounterGroup, String, u64)> {
    counters::read_port(sysfs_root, device, port)
        .into_iter()
        .map(|c| (c.group, c.name, c.value))
        .collect()
}

/// The CPUs of `device`'s NUMA node as sysfs lists them (`device/local_cpulist`, e.g.
/// `0-15,32-47`); `None` when sysfs does not say or the list does not parse.
pub fn device_cpus(sysfs_root: &Path, device: &str) -> Option<Vec<usize>> {
    if device.contains('/') || device.is_empty() || device == ".." {
        return None;
    }
    let path = sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("device/local_cpulist");
    parse_cpulist(std::fs::read_to_string(path).ok()?.trim())
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Binds the calling thread (the one that drives the sessions) to `cpus`.
pub fn bind_to(cpus: &[usize]) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}

/// Binds to the NUMA node of the device the session uses, unless told not to; says what it
/// did (once).
pub fn bind_to_device(ops: &OpsArgs, sysfs_root: &Path, device: Option<&str>) {
    if ops.no_bind {
        return;
    }
    let Some(device) = device else {
        return;
    };
    match device_cpus(sysfs_root, device) {
        Some(cpus) => match bind_to(&cpus) {
            Ok(()) => log::info!(
                "bench: bound to the CPUs of {device}'s NUMA node ({} CPUs; --no-bind to opt out)",
                cpus.len()
            ),
            Err(e) => log::warn!("bench: cannot bind to {device}'s NUMA node CPUs: {e}"),
        },
        None => log::debug!("bench: sysfs does not say which CPUs are local to {device}"),
    }
}

/// Interval reports while a size runs: due when `every` has passed since the last one.
pub struct Ticker {
    every: Duration,
    started: Instant,
    last_at: Instant,
    last_count: u64,
    pub json: bool,
    pub size: usize,
}

impl Ticker {
    pub fn new(every: Duration, started: Instant, json: bool, size: usize) -> Self {
        Self {
            every,
            started,
            last_at: started,
            last_count: 0,
            json,
            size,
        }
    }

    /// At `now`, with `count` messages so far: `Some((seconds since the last report,
    /// messages since))` when a report is due.
    pub fn due(&mut self, now: Instant, count: u64) -> Option<(f64, u64)> {
        let since = now.duration_since(self.last_at);
        if since < self.every {
            return None;
        }
        let delta = count - self.last_count;
        self.last_at = now;
        self.last_count = count;
        Some((since.as_secs_f64(), delta))
    }

    /// Seconds since the size started.
    pub fn at(&self) -> f64 {
        self.last_at.duration_since(self.started).as_secs_f64()
    }

    /// A bw interval: `messages` the client sent in `secs` (client->server; with -b the other
    /// direction is measured by the server and reported with the size's row).
    pub fn print_bw(&self, secs: f64, messages: u64, gbits: bool) {
        let bytes_per_sec = (messages * self.size as u64) as f64 / secs.max(1e-9);
        let (bw, unit) = if gbits {
            (bytes_per_sec * 8.0 / 1e9, "Gb/sec")
        } else {
            (bytes_per_sec / (1024.0 * 1024.0), "MiB/sec")
        };
        let mpps = messages as f64 / secs.max(1e-9) / 1e6;
        if self.json {
            println!(
                "{}",
                serde_json::json!({"interval": {"t_s": self.at(), "bytes": self.size, "messages": messages,
                    "bw": bw, "unit": unit, "msg_rate_mpps": mpps, "direction": "client->server"}})
            );
        } else {
            // The table's columns: size, messages, (no peak), average, rate; the time first.
            println!(
                " {:<10} {:<14} {:<20} {:<22.2} {:<14.6} at {:.2} s (interval, sent)",
                self.size,
                messages,
                "-",
                bw,
                mpps,
                self.at()
            );
        }
    }

    /// A lat interval: the half round trips of the interval (sorted here).
    pub fn print_lat(&self, half_rtt_ns: &mut [u64]) {
        half_rtt_ns.sort_unstable();
        let n = half_rtt_ns.len().max(1);
        let at = |q: f64| {
            half_rtt_ns
                .get(((n as f64 * q).ceil() as usize).saturating_sub(1))
                .map_or(0.0, |&v| v as f64 / 1000.0)
        };
        let avg = half_rtt_ns.iter().sum::<u64>() as f64 / n as f64 / 1000.0;
        if self.json {
            println!(
                "{}",
                serde_json::json!({"interval": {"t_s": self.at(), "bytes": self.size,
                    "iterations": half_rtt_ns.len(), "t_avg_us": avg, "t_typical_us": at(0.5),
                    "p99_us": at(0.99)}})
            );
        } else {
            println!(
                " {:<8} {:<12} {:<12} {:<12} {:<16.2} {:<12.2} {:<14} {:<22.2} {:<22} at {:.2} s (interval)",
                self.size,
                half_rtt_ns.len(),
                "-",
                "-",
                at(0.5),
                avg,
                "-",
                at(0.99),
                "-",
                self.at()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_exact_when_small_and_a_sixteenth_of_a_power_of_two_above() {
        assert_eq!(bucket_of(0), (0, 1));
        assert_eq!(bucket_of(15), (15, 16));
        assert_eq!(bucket_of(16), (16, 17));
        assert_eq!(bucket_of(33), (32, 34));
        assert_eq!(bucket_of(1000), (992, 1024));
        let h = histogram(&[5, 5, 1000, 1010, 1030]);
        assert_eq!(
            h,
            vec![
                Bucket {
                    from_ns: 5,
                    to_ns: 6,
                    count: 2
                },
                Bucket {
                    from_ns: 992,
                    to_ns: 1024,
                    count: 2
                },
                Bucket {
                    from_ns: 1024,
                    to_ns: 1088,
                    count: 1
                },
            ]
        );
        let (from, to) = bucket_of(u64::MAX);
        assert_eq!((from, to), (u64::MAX - (1 << 59) + 1, u64::MAX));
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), None);
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
    }

    #[test]
    fn counter_deltas_name_only_what_moved() {
        let dir = tempfile::tempdir().unwrap();
        let port = dir.path().join("class/infiniband/rxe0/ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap();
        std::fs::create_dir_all(port.join("hw_counters")).unwrap();
        std::fs::write(port.join("counters/port_xmit_packets"), "10\n").unwrap();
        std::fs::write(port.join("hw_counters/out_of_buffer"), "0\n").unwrap();
        std::fs::write(port.join("hw_counters/duplicate_request"), "4\n").unwrap();
        let snap = CounterSnapshot::take(dir.path(), "rxe0", 1);
        std::fs::write(port.join("counters/port_xmit_packets"), "25\n").unwrap();
        std::fs::write(port.join("hw_counters/out_of_buffer"), "2\n").unwrap();
        let mut d = snap.deltas(dir.path());
        d.sort();
        assert_eq!(
            d,
            vec![
                ("counters/port_xmit_packets".to_owned(), 15),
                ("hw_counters/out_of_buffer".to_owned(), 2)
            ]
        );
    }
}
