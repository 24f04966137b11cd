//! Command-line definitions: every flag of every command, and nothing that runs them (the
//! other `cli` modules, `bench` too, import from here, never the other way). A block of flags
//! that several commands share is one `#[derive(Args)]` struct, flattened where it is used, with
//! the one `apply` that sets the library configuration's fields from it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};
use rdma_container::{Checksum, Config, TransportChoice};
use serde::{Deserialize, Serialize};

const AFTER_HELP: &str = "\
Examples:
  rdma-container demo                         server and client in one process over 127.0.0.1
  rdma-container --server 10.0.0.2:5000       receive; print each message on stdout
  rdma-container --client 10.0.0.2:5000       send 10,000 messages \"0\"..\"9999\"
  rdma-container --server 10.0.0.2:5000 --max-sessions 4
                                              receive from up to 4 clients at once; each line
                                              on stdout is \"N: payload\", N the session number
  rdma-container doctor --peer 10.0.0.2       GID table, device choice and what to fix
  rdma-container bench --server 10.0.0.2:5001 and bench --client 10.0.0.2:5001 [--mode lat] [-a]
                                              perftest-style bandwidth and latency
  rdma-container -c 10.0.0.2:5000 -d mlx5_0 -i 1 -x 3 -n 1000
                                              perftest's -d/--ib-dev, -i/--ib-port, -x/--gid-index,
                                              -n/--iters; the TCP port is the PORT of IP:PORT

Every flag can also come from the environment variable shown as [env: ...] (for pods), e.g.
RDMA_CONTAINER_SERVER=0.0.0.0:5000 RDMA_CONTAINER_IB_DEV=mlx5_4; a flag on the command line wins.

The server address must be on the RoCE network (not a management IP): the RDMA device, port and
GID are picked from the source address the kernel uses toward the peer. Without a RoCE v2 GID
for that address, --transport auto falls back to TCP and says so. Payloads go to stdout (text
as is, with a \\ in front when it starts with < or \\; anything else, or text with control or
invisible characters, as <N bytes: hex...>), logs and summaries to stderr (RUST_LOG=debug for
more).";

/// The most sessions `--max-sessions` allows.
pub const MAX_SESSIONS: u64 = 256;
/// `--max-receive-memory`'s default: 1 GiB (51 sessions of the default 2 x 10 MiB slots).
pub const DEFAULT_MAX_RECEIVE_MEMORY: u64 = 1 << 30;

/// Message-oriented RDMA (RoCE v2) sender/receiver with credit-based flow control.
#[derive(Debug, Parser)]
#[command(name = "rdma-container", version, long_version = long_version(), after_help = AFTER_HELP,
          args_conflicts_with_subcommands = true, args_override_self = true)]
pub struct Cli {
    /// Receive: listen on IP:PORT (the RoCE-network address of this host).
    #[arg(
        short = 's',
        long,
        env = "RDMA_CONTAINER_SERVER",
        value_name = "IP:PORT",
        conflicts_with = "client",
        value_parser = endpoint
    )]
    pub server: Option<SocketAddr>,

    /// Send: connect to the server at IP:PORT.
    #[arg(
        short = 'c',
        long,
        env = "RDMA_CONTAINER_CLIENT",
        value_name = "IP:PORT",
        value_parser = endpoint
    )]
    pub client: Option<SocketAddr>,

    /// Server: exit after one session instead of serving clients one after another.
    #[arg(long, env = "RDMA_CONTAINER_ONCE", value_parser = BoolishValueParser::new())]
    pub once: bool,

    /// Server: receive from up to N clients at once, each session on its own thread (1 to
    /// 256; default 1: one client after another). With N > 1 every payload line on stdout
    /// starts with its session's number and a colon and space (`3: payload`), and a client
    /// beyond N is refused as busy.
    #[arg(long, env = "RDMA_CONTAINER_MAX_SESSIONS", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_SESSIONS))]
    pub max_sessions: u64,

    /// Server: the receive slots of all running sessions together may take at most BYTES
    /// (each session takes --credits times its slot size, the smaller of --max-msg-size and
    /// the client's largest message); a client that would go beyond is refused as busy. A
    /// session that runs alone is always admitted, so --max-sessions 1 never refuses for memory
    /// (default 1 GiB).
    #[arg(long, env = "RDMA_CONTAINER_MAX_RECEIVE_MEMORY", default_value_t = DEFAULT_MAX_RECEIVE_MEMORY,
          value_name = "BYTES")]
    pub max_receive_memory: u64,

    /// Serve Prometheus metrics at http://ADDR/metrics (sessions by outcome, messages, bytes,
    /// errors by kind, credit wait, refused handshakes, the RDMA port's counters; see
    /// docs/metrics.md). A PORT alone listens on 127.0.0.1; IP:PORT on that address (a
    /// non-loopback one exposes them, and says so in the log). Port 0 takes a free port, logged
    /// as "metrics: serving http://...". Off by default.
    #[arg(long, env = "RDMA_CONTAINER_METRICS", value_name = "[IP:]PORT")]
    pub metrics: Option<MetricsAddr>,

    /// Session options.
    #[command(flatten)]
    pub session: SessionArgs,

    /// Subcommands (instead of --server/--client).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Server and client in one process over 127.0.0.1: see it work on any machine.
    Demo(SessionArgs),
    /// Show the RDMA devices and GIDs, the choice for a peer, limits and what to fix.
    Doctor(DoctorArgs),
    /// Bandwidth (bw) or latency (lat) with perftest's columns: run `bench --server IP:PORT`
    /// on one end and `bench --client IP:PORT` on the other.
    Bench(BenchArgs),
    /// Print a shell completion script on stdout, e.g.
    /// `rdma-container completions bash > /etc/bash_completion.d/rdma-container`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, e.g. `rdma-container man > rdma-container.1`.
    Man,
}

/// Options shared by --server, --client and demo.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// Client: number of messages to send ("0", "1", ... unless --size is given); --iters is
    /// perftest's spelling.
    #[arg(
        short = 'n',
        long,
        visible_alias = "iters",
        env = "RDMA_CONTAINER_COUNT",
        default_value_t = 10_000,
        value_name = "N"
    )]
    pub count: u64,

    /// Client: make every payload exactly BYTES long (the counter, padded or cut).
    #[arg(long, env = "RDMA_CONTAINER_SIZE", value_name = "BYTES", value_parser = payload_size)]
    pub size: Option<usize>,

    /// Largest message: the receiver's slot size, the sender's limit (bytes).
    #[arg(long, env = "RDMA_CONTAINER_MAX_MSG_SIZE", value_parser = message_size,
          default_value_t = rdma_container::DEFAULT_MAX_MSG_SIZE, value_name = "BYTES")]
    pub max_msg_size: usize,

    /// Receive slots on the receiver = messages the sender may have in flight (1 to 1024;
    /// default 2). The receiving end decides: a server given --credits caps every session at
    /// its own (the client warns when it asked for more; a client that keeps fewer in flight
    /// runs with its own), one without takes the client's (bench too).
    #[arg(
        short = 't',
        long,
        env = "RDMA_CONTAINER_CREDITS",
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=i64::from(rdma_container::MAX_CREDITS))
    )]
    pub credits: Option<u16>,

    /// --qps.
    #[command(flatten)]
    pub stripes: StripeArgs,

    /// --transport and the device overrides.
    #[command(flatten)]
    pub data_path: DataPathArgs,

    /// --connect-timeout, --handshake-timeout.
    #[command(flatten)]
    pub connect: ConnectArgs,

    /// End a session that makes no progress for this long (no message arriving, no credit
    /// while the sender waits for one); off by default, so a slow but live peer is never cut
    /// off (seconds, up to 86400).
    #[arg(long, env = "RDMA_CONTAINER_IDLE_TIMEOUT", value_name = "SECONDS")]
    pub idle_timeout: Option<Seconds>,

    /// When the data path or the control connection breaks (a link flap, a reset
    /// connection), resume the session for up to this long: the client reconnects, the
    /// server waits for it, and every message still arrives exactly once, in order (the
    /// sender sends again what had not arrived). Both ends must allow it; the shorter time
    /// wins. 0 turns it off: a break ends the session at once (seconds, up to 86400). The
    /// sender keeps each message in its slot until the receiver released it (on tcp, one of
    /// 16 KiB or more is written there around the CPU's cache: 64 KiB throughput over
    /// loopback tcp within 3-4% of a session without resumption).
    #[arg(
        long,
        env = "RDMA_CONTAINER_RESUME_TIMEOUT",
        default_value_t = SecondsOrOff(rdma_container::DEFAULT_RESUME_TIMEOUT),
        value_name = "SECONDS"
    )]
    pub resume_timeout: SecondsOrOff,

    /// Poll this many microseconds before sleeping while waiting (lower latency, a busy core;
    /// off by default). On a software RDMA device (soft-RoCE) the poll gives its CPU away every
    /// 16th round, so that the device's kernel workers are not kept waiting.
    #[arg(long, env = "RDMA_CONTAINER_BUSY_POLL", value_name = "USEC",
          value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub busy_poll: Option<u64>,

    /// Server: do not print received payloads (the summary is still printed). Both ends: no
    /// progress lines unless --interval asks for them.
    #[arg(short, long, env = "RDMA_CONTAINER_QUIET", value_parser = BoolishValueParser::new())]
    pub quiet: bool,

    /// A progress line every SECONDS while the session runs (messages, bytes and rates over
    /// that interval, in the final summary's shape; a JSON line with --json); by default every
    /// second when stderr is a terminal (iperf3's -i; bench has its own --interval).
    #[arg(long, env = "RDMA_CONTAINER_INTERVAL", value_name = "SECONDS")]
    pub interval: Option<Seconds>,

    /// --sysfs-root.
    #[command(flatten)]
    pub sysfs_root: SysfsRoot,

    /// --auth-key-file, --checksum.
    #[command(flatten)]
    pub integrity: IntegrityArgs,

    /// With --transport auto: refuse to fall back to TCP. A session that cannot run over RDMA
    /// fails with exit status 5 and the reason (no RoCE v2 GID for the address, no RDMA
    /// transport could start, ...).
    #[arg(long, env = "RDMA_CONTAINER_REQUIRE_RDMA", value_parser = BoolishValueParser::new())]
    pub require_rdma: bool,

    /// The RDMA queue pair's traffic class, service level, MTU, ACK timeout and retry count.
    #[command(flatten)]
    pub qp: QpArgs,

    /// At the end of each session, print one JSON object on stderr (stdout stays the
    /// payloads): the transport and why, device, port, GID, MTU, credits, counts, rates and how
    /// it ended (docs/session-result.schema.json).
    #[arg(long, env = "RDMA_CONTAINER_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,

    /// Write the same JSON objects to FILE, one line per session (created or emptied at start).
    #[arg(
        long,
        alias = "out_json",
        env = "RDMA_CONTAINER_OUT_JSON",
        value_name = "FILE"
    )]
    pub out_json: Option<PathBuf>,
}

/// The RDMA queue pair's settings for a lossless RoCE fabric (perftest's --tclass, -S, -m, -u;
/// docs/lossless-roce.md). Each end applies its own to the packets it sends; the MTU is the
/// smaller of both ends'. The tcp transport has no queue pair: with --transport tcp they are
/// refused, and auto's TCP fallback warns that they do not apply.
#[derive(Debug, Clone, Args)]
pub struct QpArgs {
    /// Traffic class of every RDMA packet this end sends (GRH/IP traffic class, 0 to 255):
    /// DSCP << 2 | ECN, so DSCP 26 is --tclass 104. Put the traffic on the priority the
    /// switches keep lossless (PFC) or mark for ECN. Default 0. Not with the DOCA transport
    /// (its API has no such setting).
    #[arg(long, env = "RDMA_CONTAINER_TCLASS", value_name = "N")]
    pub tclass: Option<u8>,

    /// Service level of the queue pair (0 to 15; perftest's -S). On RoCE it is the 802.1p
    /// priority of VLAN-tagged packets (with PCP trust); default 0.
    #[arg(short = 'S', long, env = "RDMA_CONTAINER_SL", value_name = "N",
          value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: Option<u8>,

    /// Largest RDMA path MTU in bytes (perftest's -m), capped by the port's active MTU (with
    /// a warning); the session uses the smaller of both ends'. Default: the port's active MTU.
    #[arg(short = 'm', long, env = "RDMA_CONTAINER_MTU", value_name = "BYTES",
          value_parser = clap::builder::TypedValueParser::map(
              clap::builder::PossibleValuesParser::new(["256", "512", "1024", "2048", "4096"]),
              |s| s.parse::<u32>().unwrap_or(0)))]
    pub mtu: Option<u32>,

    /// Local ACK timeout exponent (0 to 31; perftest's -u): a packet not acknowledged within
    /// 4.096 us x 2^N is sent again (0: never). Default 18 (1.07 s). Not with DOCA.
    #[arg(short = 'u', long, visible_alias = "qp-timeout", env = "RDMA_CONTAINER_ACK_TIMEOUT",
          value_name = "N", value_parser = clap::value_parser!(u8).range(0..=31))]
    pub ack_timeout: Option<u8>,

    /// How many times an unacknowledged packet is sent again before the send fails with
    /// "transport retry counter exceeded" (0 to 7). Default 7 (with the default ACK timeout
    /// about 8.6 s of retries). Not with DOCA.
    #[arg(long, env = "RDMA_CONTAINER_RETRY_COUNT", value_name = "N",
          value_parser = clap::value_parser!(u8).range(0..=7))]
    pub retry_count: Option<u8>,
}

impl QpArgs {
    /// Sets the library configuration's queue pair settings.
    pub fn apply(&self, config: Config) -> Config {
        config
            .with_traffic_class(self.tclass)
            .with_service_level(self.sl)
            .with_mtu(self.mtu)
            .with_ack_timeout(self.ack_timeout)
            .with_retry_count(self.retry_count)
    }
}

/// `bench` options.
#[derive(Debug, Clone, Args)]
#[command(mut_args(bench_help))]
pub struct BenchArgs {
    /// Serve benchmark clients on IP:PORT, one after another until Ctrl-C (exit 130); with
    /// --once, one client's run.
    #[arg(
        long,
        env = "RDMA_CONTAINER_BENCH_SERVER",
        value_name = "IP:PORT",
        conflicts_with = "client",
        required_unless_present = "client",
        value_parser = endpoint
    )]
    pub server: Option<SocketAddr>,

    /// Run the benchmark against the server at IP:PORT and print the results.
    #[arg(long, env = "RDMA_CONTAINER_BENCH_CLIENT", value_name = "IP:PORT", value_parser = endpoint)]
    pub client: Option<SocketAddr>,

    /// bw: one-way stream (like ib_send_bw); lat: ping-pong (like ib_send_lat).
    #[arg(long, env = "RDMA_CONTAINER_BENCH_MODE", value_enum, default_value_t = BenchMode::Bw)]
    pub mode: BenchMode,

    /// Message size in bytes (default 65536 for bw, 2 for lat; up to 4 GiB - 1 as far as the
    /// server's --max-msg-size and the memory allow).
    #[arg(
        short = 's',
        long,
        env = "RDMA_CONTAINER_BENCH_SIZE",
        value_name = "BYTES",
        conflicts_with = "all",
        value_parser = message_size
    )]
    pub size: Option<usize>,

    /// Every power of two from 2 bytes to 8 MiB (perftest's), or to --max-msg-size.
    #[arg(short = 'a', long, env = "RDMA_CONTAINER_BENCH_ALL", value_parser = BoolishValueParser::new())]
    pub all: bool,

    /// Messages per size (default 5000 for bw, 1000 for lat). bw needs at least 2: its clock
    /// starts at the first message's arrival.
    #[arg(
        short = 'n',
        long,
        env = "RDMA_CONTAINER_BENCH_ITERS",
        value_name = "N",
        conflicts_with = "duration",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub iters: Option<u64>,

    /// Run each size for this many seconds instead of a message count.
    #[arg(
        short = 'D',
        long,
        env = "RDMA_CONTAINER_BENCH_DURATION",
        value_name = "SECONDS"
    )]
    pub duration: Option<Seconds>,

    /// Messages in flight: the receiver's slots (perftest's -t). Line rate with large
    /// messages needs a few; small messages want 16 or more. Default 16; for lat 64 up to
    /// 256 KiB messages: the receiver sends a credit message each time half the window is
    /// released, which in a ping-pong is one extra packet every 8 round trips with 16 and
    /// every 32 with 64. Above 16 MiB the default keeps a session's slots within 256 MiB
    /// (at least 2 credits). The server takes the client's, at most its own --credits when
    /// given (the client warns then), as --server does.
    #[arg(
        short = 't',
        long,
        env = "RDMA_CONTAINER_BENCH_CREDITS",
        value_name = "N"
    )]
    pub credits: Option<u16>,

    /// --qps.
    #[command(flatten)]
    pub stripes: StripeArgs,

    /// --transport and the device overrides.
    #[command(flatten)]
    pub data_path: DataPathArgs,

    /// Poll this many microseconds before sleeping (default: 1000000 for lat, off for bw). On
    /// a software RDMA device (soft-RoCE) the poll gives its CPU away every 16th round.
    #[arg(long, env = "RDMA_CONTAINER_BENCH_BUSY_POLL", value_name = "USEC", value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub busy_poll: Option<u64>,

    /// Report bandwidth in Gb/sec instead of MiB/sec.
    #[arg(long, alias = "report_gbits", env = "RDMA_CONTAINER_BENCH_REPORT_GBITS", value_parser = BoolishValueParser::new())]
    pub report_gbits: bool,

    /// Print the results as one JSON object instead of the table.
    #[arg(long, env = "RDMA_CONTAINER_BENCH_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,

    /// Also write the JSON results to FILE.
    #[arg(
        long,
        alias = "out_json",
        env = "RDMA_CONTAINER_BENCH_OUT_JSON",
        value_name = "FILE"
    )]
    pub out_json: Option<PathBuf>,

    /// --connect-timeout, --handshake-timeout.
    #[command(flatten)]
    pub connect: ConnectArgs,

    /// --sysfs-root.
    #[command(flatten)]
    pub sysfs_root: SysfsRoot,

    /// --auth-key-file, --checksum.
    #[command(flatten)]
    pub integrity: IntegrityArgs,

    /// Resume a session whose connection breaks, for up to this long (as the sessions of
    /// --server/--client do, 10 s by default there). Off (0) by default here: a benchmark
    /// measures the data path as perftest does, and a break ends it. Set it on both ends to
    /// measure what resumption costs (scripts/checksum-cost.sh --what resume).
    #[arg(
        long,
        env = "RDMA_CONTAINER_BENCH_RESUME_TIMEOUT",
        default_value = "0",
        value_name = "SECONDS"
    )]
    pub resume_timeout: SecondsOrOff,

    /// Server: serve one client's run (every size it asks for), then exit with its status (0,
    /// or the failure's), as --server --once does.
    #[arg(
        long,
        env = "RDMA_CONTAINER_BENCH_ONCE",
        conflicts_with = "client",
        value_parser = BoolishValueParser::new()
    )]
    pub once: bool,

    /// The largest message. Server: the largest a client may ask for (default 1 GiB; each
    /// session's slots are sized for the client's messages, so this spends no memory by
    /// itself). Client: the top of the -a sweep (default 8 MiB); -s may not exceed it.
    #[arg(
        long,
        env = "RDMA_CONTAINER_BENCH_MAX_MSG_SIZE",
        value_name = "BYTES",
        value_parser = message_size
    )]
    pub max_msg_size: Option<usize>,

    /// perftest's operator options (-b, --run-infinitely, --interval, -H, --limit-*, --no-bind).
    #[command(flatten)]
    pub ops: OpsArgs,
}

/// `bench`'s own, shorter help for flags of the blocks it shares with `--server`/`--client`
/// (in place: the flags keep their order).
fn bench_help(arg: clap::Arg) -> clap::Arg {
    let help = match arg.get_id().as_str() {
        "transport" => "Data path",
        "connect_timeout" => "Client: keep retrying to reach the server for this long (seconds)",
        "handshake_timeout" => "Deadline for each session's handshake (seconds)",
        _ => return arg,
    };
    arg.help(help)
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

/// `bench`'s default credits.
pub const BENCH_CREDITS: u16 = 16;
/// `bench --mode lat`'s default credits up to [`LAT_CREDITS_UP_TO`]-byte messages.
const LAT_CREDITS: u16 = 64;
/// See [`LAT_CREDITS`].
const LAT_CREDITS_UP_TO: usize = 256 << 10;
/// The slot memory the default credits keep a session of large messages within (see
/// [`BenchArgs::credits_for`]).
const DEFAULT_SLOT_MEMORY: usize = 256 << 20;
/// The fewest credits a default gives: one message on the wire while the next is filled.
const MIN_DEFAULT_CREDITS: u16 = 2;

impl BenchArgs {
    /// The credits of a session of `size`-byte messages over `qps` queue pairs (each with its
    /// own slots: `--qps`, or one per `--paths` path): `--credits`, or the default for the
    /// mode (see `--credits`), fewer for messages so large that the default would take more
    /// than [`DEFAULT_SLOT_MEMORY`] of slots (16 x 1 GiB would be 16 GiB on each end).
    pub fn credits_for(&self, size: usize, qps: u8) -> u16 {
        let default = match self.credits {
            Some(credits) => return credits,
            None if self.mode == BenchMode::Lat && size <= LAT_CREDITS_UP_TO => LAT_CREDITS,
            None => BENCH_CREDITS,
        };
        let fit = DEFAULT_SLOT_MEMORY / size.max(1).saturating_mul(usize::from(qps.max(1)));
        default.min(
            u16::try_from(fit)
                .unwrap_or(u16::MAX)
                .max(MIN_DEFAULT_CREDITS),
        )
    }
}

/// `bench`'s operator options, perftest's (flattened into [`BenchArgs`]; what they do is in
/// `cli::bench::ops`).
#[derive(Debug, Clone, Args)]
pub struct OpsArgs {
    /// bw: both directions at once, each side streaming to the other (perftest's -b); one
    /// row per size, both directions added as perftest prints it (--json also has each
    /// direction's figures, measured where its messages arrive).
    #[arg(short = 'b', long)]
    pub bidirectional: bool,

    /// Client, bw: send with send_in_place, each message produced straight in its registered
    /// staging slot (every byte written, as an application that builds its messages there
    /// does) instead of copied from a buffer by send (BENCHMARKS.md, "What the sender's copy
    /// costs").
    #[arg(long)]
    pub in_place: bool,

    /// Run one size until Ctrl-C (perftest's --run_infinitely), printing a report every
    /// --interval (default 1 s); the final row covers the whole run.
    #[arg(long, alias = "run_infinitely", conflicts_with_all = ["iters", "duration", "all"])]
    pub run_infinitely: bool,

    /// Print a report every SECONDS while a size runs (the sending client's count for bw, the
    /// interval's round trips for lat): a row, or a JSON line with --json (then the final
    /// report is one JSON line too).
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<Seconds>,

    /// lat: print the latency percentiles and histogram (log-linear buckets, 1/16 of a power
    /// of two wide) after each size; --json always carries them.
    #[arg(short = 'H', long)]
    pub histogram: bool,

    /// Fail (exit status 6, after the results) when a bw result's average is below GBPS
    /// gigabits per second (perftest's --limit_bw; with -b, the sum). Refused (exit status 2)
    /// on a lat run, as --limit-msgrate is.
    #[arg(long, value_name = "GBPS")]
    pub limit_bw: Option<f64>,

    /// Fail (exit status 6) when a bw result's message rate is below MPPS million messages
    /// per second (perftest's --limit_msgrate).
    #[arg(long, value_name = "MPPS")]
    pub limit_msgrate: Option<f64>,

    /// Fail (exit status 6) when a lat result's average (t_avg, half the round trip) is above
    /// USEC microseconds (perftest's --limit_lat). Refused (exit status 2) on a bw run.
    #[arg(long, value_name = "USEC")]
    pub limit_lat: Option<f64>,

    /// Do not bind to the CPUs of the RDMA device's NUMA node (by default bench binds its
    /// thread to the device's local_cpulist from sysfs, as perftest does; tcp has no device).
    #[arg(long)]
    pub no_bind: bool,
}

/// `doctor` options.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Show the choice that would be made for a session with this peer.
    #[arg(
        long,
        env = "RDMA_CONTAINER_DOCTOR_PEER",
        value_name = "IP",
        conflicts_with = "local_ip"
    )]
    pub peer: Option<Ipv4Addr>,

    /// Show the choice for this local source address.
    #[arg(long, env = "RDMA_CONTAINER_DOCTOR_LOCAL_IP", value_name = "IP")]
    pub local_ip: Option<Ipv4Addr>,

    /// Also show the path and device choice toward each of these addresses of the peer, as a
    /// session's --paths would run them (comma-separated): one line each, and `paths` in the
    /// JSON.
    #[arg(
        long,
        env = "RDMA_CONTAINER_DOCTOR_PATHS",
        value_name = "ADDR,...",
        value_delimiter = ','
    )]
    pub paths: Vec<Ipv4Addr>,

    /// Device overrides.
    #[command(flatten)]
    pub device: DeviceArgs,

    /// --sysfs-root.
    #[command(flatten)]
    pub sysfs_root: SysfsRoot,

    /// Print one JSON object instead of text.
    #[arg(long, env = "RDMA_CONTAINER_DOCTOR_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,

    /// Also try a real session with a peer running `rdma-container --server IP:PORT`: two
    /// messages (a small one, then one of 64 KiB, larger than any path MTU) on the chosen
    /// device and GID, each acknowledged, and say what failed (RDMA not possible here, the GID
    /// unreachable, RTR, a handshake timeout, the MTU) in the words of docs/troubleshooting.md.
    /// The server prints the two probe payloads. Exit status: 0 when the probe got through,
    /// else the session's (1, 3, 4, 5). The choice shown is then the one toward that peer.
    #[arg(
        long,
        env = "RDMA_CONTAINER_DOCTOR_PROBE",
        value_name = "IP:PORT",
        conflicts_with = "local_ip"
    )]
    pub probe: Option<SocketAddr>,

    /// The probe's transport: auto (the default) refuses TCP, as with --require-rdma; tcp
    /// checks only that the server answers.
    #[arg(long, env = "RDMA_CONTAINER_TRANSPORT", value_enum, default_value_t = TransportChoice::Auto)]
    pub transport: TransportChoice,

    /// The probe's pre-shared key file, when the server has one (see --auth-key-file).
    #[arg(long, env = "RDMA_CONTAINER_AUTH_KEY_FILE", value_name = "FILE")]
    pub auth_key_file: Option<PathBuf>,

    /// Make doctor a gate: exit 5 (as a session's --require-rdma) with one line on stderr
    /// saying why, when RDMA cannot be used here: no RDMA device, no ACTIVE port, no RoCE v2
    /// GID with an IPv4 address (with --peer/--local-ip: none toward that address), the
    /// device's /dev/infiniband/uverbsN node missing or not openable, or no RDMA transport
    /// this build can run; exit 0 when it can. For a pod's readiness probe or init container,
    /// or a CI job, before anything that needs RDMA. The memlock limit and CAP_IPC_LOCK are
    /// reported but not gated on (an init container's capabilities are its own). Without it
    /// doctor exits 0 (or the probe's status): the report is the result.
    #[arg(long, env = "RDMA_CONTAINER_DOCTOR_REQUIRE_RDMA", value_parser = BoolishValueParser::new())]
    pub require_rdma: bool,
}

/// How many queue pairs a session stripes over (`--server`/`--client` and `bench`).
#[derive(Debug, Clone, Args)]
pub struct StripeArgs {
    /// Client: queue pairs (tcp: data connections) to stripe the messages over, delivered in
    /// order as one stream (1 to 16; default 1; perftest's -q, iperf3's -P). Each has its own
    /// slots (--credits of them; the credits stay one pool). A server takes each client's.
    #[arg(
        long,
        env = "RDMA_CONTAINER_QPS",
        value_name = "N",
        value_parser = clap::value_parser!(u8).range(1..=i64::from(rdma_container::MAX_QPS))
    )]
    pub qps: Option<u8>,

    /// Client: the server's addresses to spread the queue pairs over, one path each (two
    /// NICs, two rails, two GIDs), comma-separated; the server address itself is path 0,
    /// listed or not. Each path runs from this host's source for that address by its own
    /// route, on the RDMA device that owns that source (see `doctor --paths`). --qps defaults
    /// to one per path; queue pairs take the paths in turn. Not with -d/-i/-x.
    #[arg(
        long,
        env = "RDMA_CONTAINER_PATHS",
        value_name = "ADDR,...",
        value_delimiter = ','
    )]
    pub paths: Vec<Ipv4Addr>,
}

impl StripeArgs {
    /// `config` with the paths and queue pairs asked for, toward the server at `server` (the
    /// client): `--qps`, or one per path. `None`: a server, which takes each client's (its
    /// own say nothing).
    pub fn apply(&self, config: Config, server: Option<std::net::IpAddr>) -> Config {
        let Some(server) = server else {
            return config;
        };
        let mut paths: Vec<std::net::IpAddr> = self.paths.iter().map(|&a| a.into()).collect();
        if !paths.is_empty() {
            paths.push(server);
        }
        paths.sort_unstable();
        paths.dedup();
        let one_per_path = u8::try_from(paths.len().max(1)).unwrap_or(u8::MAX);
        config
            .with_paths(self.paths.clone())
            .with_qps(self.qps.unwrap_or(one_per_path))
    }

    /// Whether `--qps` or `--paths` was given (a server says they are the client's choice).
    pub fn given(&self) -> bool {
        self.qps.is_some() || !self.paths.is_empty()
    }
}

/// `--transport` and the device overrides: the data path of a session (`--server`, `--client`,
/// `demo` and `bench`).
#[derive(Debug, Clone, Args)]
pub struct DataPathArgs {
    /// Data path: auto picks RDMA when a RoCE v2 GID owns the source address and an RDMA
    /// transport is compiled in, otherwise TCP.
    #[arg(long, env = "RDMA_CONTAINER_TRANSPORT", value_enum, default_value_t = TransportChoice::Auto)]
    pub transport: TransportChoice,

    /// Device overrides.
    #[command(flatten)]
    pub device: DeviceArgs,
}

impl DataPathArgs {
    /// Sets the library configuration's transport and device overrides.
    pub fn apply(&self, config: Config) -> Config {
        config
            .with_transport(self.transport)
            .with_overrides(self.device.overrides())
    }
}

/// How long a session may take to reach its peer and to complete the handshake (`--server`,
/// `--client`, `demo` and `bench`).
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Client: keep retrying to reach the server for this long (seconds, up to 86400).
    #[arg(
        long,
        env = "RDMA_CONTAINER_CONNECT_TIMEOUT",
        default_value = "30",
        value_name = "SECONDS"
    )]
    pub connect_timeout: Seconds,

    /// Give up on a peer that does not complete the whole handshake (hello, data path,
    /// Ready) within this time (seconds, up to 86400).
    #[arg(
        long,
        env = "RDMA_CONTAINER_HANDSHAKE_TIMEOUT",
        default_value = "10",
        value_name = "SECONDS"
    )]
    pub handshake_timeout: Seconds,
}

impl ConnectArgs {
    /// Sets the library configuration's connect and handshake timeouts.
    pub fn apply(&self, config: Config) -> Config {
        config
            .with_connect_timeout(self.connect_timeout.0)
            .with_handshake_timeout(self.handshake_timeout.0)
    }
}

/// `--sysfs-root` (every command that reads the RDMA devices); it derefs to the path.
#[derive(Debug, Clone, Args)]
pub struct SysfsRoot {
    /// Read RDMA devices from DIR/class/infiniband instead of /sys/class/infiniband.
    #[arg(
        id = "sysfs_root",
        long = "sysfs-root",
        env = "RDMA_CONTAINER_SYSFS_ROOT",
        default_value = "/sys",
        value_name = "DIR"
    )]
    pub path: PathBuf,
}

impl SysfsRoot {
    /// Sets the library configuration's sysfs root.
    pub fn apply(&self, config: Config) -> Config {
        config.with_sysfs_root(self.path.clone())
    }
}

impl std::ops::Deref for SysfsRoot {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl From<SysfsRoot> for PathBuf {
    fn from(root: SysfsRoot) -> PathBuf {
        root.path
    }
}

/// What both ends of a session must agree on: the pre-shared key and the end-to-end check of
/// every message (`--server`, `--client`, `demo` and `bench`).
#[derive(Debug, Clone, Args)]
pub struct IntegrityArgs {
    /// A file holding the pre-shared key both ends must prove they hold before anything else
    /// happens (HMAC-SHA256 challenge-response; at least 16 bytes, the trailing newline is not
    /// part of it; the file must not be readable by group or others: chmod 600). Without it,
    /// anyone who reaches the server's port can use it. Make one with:
    /// head -c 32 /dev/urandom | base64 > key && chmod 600 key
    #[arg(long, env = "RDMA_CONTAINER_AUTH_KEY_FILE", value_name = "FILE")]
    pub auth_key_file: Option<PathBuf>,

    /// Check every message end to end: crc32c makes the sender append a CRC32C of each
    /// message and the receiver verify it before delivering, ending the session (naming the
    /// message) on a mismatch. Both ends must set the same. The default, none, relies on the
    /// transport's own checks (RoCE's ICRC, TCP's checksum).
    #[arg(long, value_enum, default_value_t = Checksum::None, env = "RDMA_CONTAINER_CHECKSUM")]
    pub checksum: Checksum,
}

impl IntegrityArgs {
    /// Sets the library configuration's key (read from the file) and checksum.
    pub fn apply(&self, config: Config) -> anyhow::Result<Config> {
        let key = self
            .auth_key_file
            .as_deref()
            .map(rdma_container::AuthKey::from_file)
            .transpose()?;
        Ok(config.with_auth_key(key).with_checksum(self.checksum))
    }
}

/// `--busy-poll USEC` (both spellings: `--server`/`--client`'s and `bench`'s) as the library's
/// busy-poll time: 0 is off, as no flag is.
pub fn busy_poll(usec: Option<u64>) -> Option<Duration> {
    usec.filter(|&us| us > 0).map(Duration::from_micros)
}

/// `-d/--ib-dev`, `-i/--ib-port`, `-x/--gid-index`, with perftest's names and meaning.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Use this RDMA device (perftest -d), e.g. mlx5_0. It wins over the device a Kubernetes
    /// device plugin hands the pod (PCIDEVICE_*_INFO, Multus network-status).
    #[arg(
        short = 'd',
        long = "ib-dev",
        visible_alias = "device",
        env = "RDMA_CONTAINER_IB_DEV",
        value_name = "NAME"
    )]
    pub device: Option<String>,

    /// Use this port of the device (perftest -i).
    #[arg(
        short = 'i',
        long = "ib-port",
        env = "RDMA_CONTAINER_IB_PORT",
        value_name = "N"
    )]
    pub port: Option<u32>,

    /// The old spelling of --ib-port, kept for one release (it warns). The TCP port is the
    /// PORT of --server/--client IP:PORT.
    #[arg(long = "port", value_name = "N", hide = true, conflicts_with = "port")]
    pub old_port: Option<u32>,

    /// Use this GID index (perftest -x) instead of matching the source address.
    #[arg(short = 'x', long, env = "RDMA_CONTAINER_GID_INDEX", value_name = "N")]
    pub gid_index: Option<u32>,
}

/// The warning the old `--port` spelling gives.
pub const OLD_PORT_WARNING: &str = "--port N is deprecated and will be removed in the next \
     release: it means the RDMA device port, which is now -i/--ib-port N (perftest's name); the \
     TCP port is the PORT of --server/--client IP:PORT";

impl DeviceArgs {
    /// As the library's overrides (the old `--port` spelling warns once per call).
    pub fn overrides(&self) -> rdma_container::roce::Overrides {
        if self.old_port.is_some() {
            log::warn!("{OLD_PORT_WARNING}");
        }
        rdma_container::roce::Overrides {
            device: self.device.clone(),
            port: self.port.or(self.old_port),
            gid_index: self.gid_index,
        }
    }
}

/// Where `--metrics` listens: `PORT` (on 127.0.0.1) or `IP:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsAddr(pub SocketAddr);

impl std::str::FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Ok(port) = s.parse::<u16>() {
            return Ok(MetricsAddr(SocketAddr::from((Ipv4Addr::LOCALHOST, port))));
        }
        s.parse().map(MetricsAddr).map_err(|_| {
            format!("'{s}' is neither a port (0 to 65535) nor IP:PORT (e.g. 127.0.0.1:9464)")
        })
    }
}

/// The longest timeout the command line accepts: one day.
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// A timeout given on the command line: a positive, finite number of seconds up to
/// [`MAX_TIMEOUT_SECS`], checked when the arguments are parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds(pub std::time::Duration);

impl std::str::FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a number of seconds"))?;
        if !v.is_finite() || v <= 0.0 {
            return Err(format!("must be a positive number of seconds, got {s}"));
        }
        if v > MAX_TIMEOUT_SECS {
            return Err(format!(
                "must be at most {MAX_TIMEOUT_SECS} seconds (one day), got {s}"
            ));
        }
        Ok(Seconds(std::time::Duration::from_secs_f64(v)))
    }
}

/// A timeout that 0 turns off: a finite number of seconds from 0 to [`MAX_TIMEOUT_SECS`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecondsOrOff(pub std::time::Duration);

impl std::str::FromStr for SecondsOrOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().parse::<f64>() == Ok(0.0) {
            return Ok(SecondsOrOff(std::time::Duration::ZERO));
        }
        s.parse::<Seconds>()
            .map(|seconds| SecondsOrOff(seconds.0))
            .map_err(|e| e.replace("a positive number", "0 or a positive number"))
    }
}

/// As it is written on the command line (how `--help` shows a default): seconds, `0` for off.
impl std::fmt::Display for SecondsOrOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.as_secs_f64())
    }
}

/// A one-line pointer from a perftest or iperf3 spelling that our command line refuses (or
/// reads otherwise) to ours, for the arguments `args` (without the program name).
pub fn habit_hint(args: &[String]) -> Option<String> {
    let numeric = |i: usize| args.get(i + 1).is_some_and(|v| v.parse::<u64>().is_ok());
    for (i, a) in args.iter().enumerate() {
        let hint = match a.as_str() {
            "-p" | "--port" if numeric(i) => {
                "the TCP port is the PORT of --server/--client IP:PORT (there is no -p); the \
device port is -i/--ib-port"
            }
            "-q" if numeric(i) => {
                "-q is --quiet here: queue pairs are --qps N (perftest's -q N), one ordered \
stream striped over them"
            }
            "-P" | "--parallel" => {
                "several connections: --qps N stripes one ordered stream over N; for independent \
streams run several clients against --server --max-sessions N (iperf3's -P)"
            }
            "-i" if args.get(i + 1).is_some_and(|v| v.contains('.')) => {
                "-i is the device port (perftest's -i); the report interval is --interval \
(iperf3's -i)"
            }
            _ => continue,
        };
        return Some(format!("hint: {hint}"));
    }
    None
}

/// `--server`/`--client`: IP:PORT, or HOST:PORT resolved to its first IPv4 address (logged).
/// What perftest and iperf3 users type instead gets words that point at our flags.
fn endpoint(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{s}' is a number, not IP:PORT: --server and --client take IP:PORT (with perftest's \
habits: the message size is --size, the port goes after the address, e.g. 10.0.0.2:{s})"
        ));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "'{s}' has no port: give IP:PORT (or HOST:PORT), e.g. {s}:18515"
        ));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!("'{port}' in '{s}' is not a port (1-65535)"));
    }
    let resolved = std::net::ToSocketAddrs::to_socket_addrs(&s)
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?;
    let addrs: Vec<SocketAddr> = resolved.collect();
    let Some(v4) = addrs.iter().find(|a| a.is_ipv4()) else {
        return Err(format!(
            "'{host}' has no IPv4 address (it resolves to {addrs:?}); RoCE v2 discovery needs IPv4"
        ));
    };
    log::info!(
        "{host} resolved to {} (the first IPv4 address of {})",
        v4.ip(),
        addrs.len()
    );
    Ok(*v4)
}

/// The largest message size the wire can state (a u32).
const MAX_MESSAGE_SIZE: u64 = u32::MAX as u64;

/// A byte count from `min` to [`MAX_MESSAGE_SIZE`].
fn bytes_from(s: &str, min: u64) -> Result<usize, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of bytes"))?;
    if !(min..=MAX_MESSAGE_SIZE).contains(&v) {
        return Err(format!(
            "must be between {min} and {MAX_MESSAGE_SIZE} bytes, got {s}"
        ));
    }
    usize::try_from(v).map_err(|_| format!("{s} bytes do not fit this machine's address space"))
}

/// A message size: 1 byte to 4 GiB - 1.
fn message_size(s: &str) -> Result<usize, String> {
    bytes_from(s, 1)
}

/// A payload size: 0 (empty messages are data too) to 4 GiB - 1.
fn payload_size(s: &str) -> Result<usize, String> {
    bytes_from(s, 0)
}

fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = format!(
            "{}\ntransports: {}\nDOCA: {}",
            env!("CARGO_PKG_VERSION"),
            rdma_container::build_info::TRANSPORTS,
            rdma_container::build_info::DOCA_VERSION
        );
        if cfg!(feature = "test-hooks") {
            text.push_str("\ntest hooks: on (RDMA_CONTAINER_TEST_*: a test build, never ship it)");
        }
        text
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// The help of flag `id` of `command`.
    fn help(command: &clap::Command, id: &str) -> String {
        let arg = command.get_arguments().find(|a| a.get_id() == id);
        arg.and_then(clap::Arg::get_help)
            .map(ToString::to_string)
            .unwrap_or_else(|| panic!("no help for {id}"))
    }

    /// The shared blocks carry the help of `--server`/`--client`; `bench` keeps its shorter
    /// one (a renamed field would silently lose it).
    #[test]
    fn bench_keeps_its_own_help_for_the_shared_flags() {
        let cli = Cli::command();
        let bench = cli.find_subcommand("bench").expect("bench");
        assert_eq!(help(bench, "transport"), "Data path");
        assert!(help(&cli, "transport").starts_with("Data path: auto picks RDMA"));
        for id in ["connect_timeout", "handshake_timeout"] {
            assert!(help(bench, id).ends_with("(seconds)"), "{id}");
            assert!(help(&cli, id).ends_with("(seconds, up to 86400)"), "{id}");
        }
        assert_eq!(help(bench, "sysfs_root"), help(&cli, "sysfs_root"));
        assert_eq!(help(bench, "checksum"), help(&cli, "checksum"));
    }
}
