//! What the event-loop paths cost next to the blocking one: one process, a sender thread and a
//! receiver thread, `--count` messages of `--size` bytes per session, both ends calling the
//! library one way: `blocking` (`send`/`recv`), `polling` (`try_send`/`try_recv` with poll(2)
//! on the readiness descriptor in between) or `tokio` (`AsyncRdmaSink`/`AsyncRdmaSrc`, a
//! current-thread runtime per end). Rounds alternate the order; the median of each way is
//! printed with its ratio to `blocking` of the same run.
//!
//! `cargo run --release --example event_loop_cost -- --size 64 --count 200000 --rounds 3`
//! (`--addr IP --transport verbs` for an RDMA device's address; scripts/event-loop-cost.sh runs
//! it at 64 B and 64 KiB).

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_container::tokio::{AsyncRdmaSink, AsyncRdmaSrc};
use rdma_container::{Config, Error, Listener, RdmaSink, RdmaSrc, Result, TransportChoice};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Way {
    Blocking,
    Polling,
    Tokio,
}

impl Way {
    const ALL: [Way; 3] = [Way::Blocking, Way::Polling, Way::Tokio];

    fn name(self) -> &'static str {
        match self {
            Way::Blocking => "blocking",
            Way::Polling => "polling",
            Way::Tokio => "tokio",
        }
    }
}

struct Options {
    size: usize,
    count: u64,
    credits: u16,
    rounds: usize,
    ip: IpAddr,
    transport: TransportChoice,
}

fn parse() -> std::result::Result<Options, String> {
    let mut o = Options {
        size: 64,
        count: 100_000,
        credits: 16,
        rounds: 3,
        ip: IpAddr::from([127, 0, 0, 1]),
        transport: TransportChoice::Tcp,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--size" => o.size = value.parse().map_err(|e| bad(&e))?,
            "--count" => o.count = value.parse().map_err(|e| bad(&e))?,
            "--credits" => o.credits = value.parse().map_err(|e| bad(&e))?,
            "--rounds" => o.rounds = value.parse().map_err(|e| bad(&e))?,
            "--addr" => o.ip = value.parse().map_err(|e| bad(&e))?,
            "--transport" => {
                o.transport = match value.as_str() {
                    "tcp" => TransportChoice::Tcp,
                    "verbs" => TransportChoice::Verbs,
                    "doca" => TransportChoice::Doca,
                    other => return Err(format!("--transport {other}: tcp, verbs or doca")),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.rounds == 0 || o.count == 0 {
        return Err("--rounds and --count must be at least 1".into());
    }
    Ok(o)
}

fn wait_readable(fd: &impl AsFd) -> Result<()> {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::from(1000u16)).map_err(|e| Error::Socket {
        what: "poll",
        source: e.into(),
    })?;
    Ok(())
}

fn send_all(mut sink: RdmaSink, way: Way, count: u64, payload: &[u8]) -> Result<u64> {
    match way {
        Way::Blocking => {
            for _ in 0..count {
                sink.send(payload)?;
            }
            sink.finish()
        }
        Way::Polling => {
            let mut sent = 0;
            while sent < count {
                match sink.try_send(payload) {
                    Ok(()) => sent += 1,
                    Err(Error::WouldBlock) => wait_readable(&sink)?,
                    Err(e) => return Err(e),
                }
            }
            loop {
                match sink.try_finish() {
                    Ok(n) => return Ok(n),
                    Err(Error::WouldBlock) => wait_readable(&sink)?,
                    Err(e) => return Err(e),
                }
            }
        }
        Way::Tokio => runtime()?.block_on(async {
            let mut sink = AsyncRdmaSink::new(sink)?;
            for _ in 0..count {
                sink.send(payload).await?;
            }
            sink.finish().await
        }),
    }
}

fn receive_all(mut src: RdmaSrc, way: Way) -> Result<u64> {
    let mut n = 0;
    match way {
        Way::Blocking => {
            while src.recv()?.is_some() {
                n += 1;
            }
        }
        Way::Polling => loop {
            match src.try_recv() {
                Ok(Some(_)) => n += 1,
                Ok(None) => break,
                Err(Error::WouldBlock) => wait_readable(&src)?,
                Err(e) => return Err(e),
            }
        },
        Way::Tokio => {
            n = runtime()?.block_on(async {
                let mut src = AsyncRdmaSrc::new(src)?;
                let mut n = 0;
                while src.recv().await?.is_some() {
                    n += 1;
                }
                Ok::<u64, Error>(n)
            })?;
        }
    }
    Ok(n)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start a tokio runtime: {e}")))
}

/// One session's messages per second, both ends calling the library `way`.
fn one_run(o: &Options, way: Way) -> Result<f64> {
    let config = Config::default()
        .with_credits(o.credits)
        .with_max_msg_size(o.size.max(1))
        .with_transport(o.transport)
        .with_handshake_timeout(Duration::from_secs(20));
    let listener = Listener::bind(SocketAddr::new(o.ip, 0), &config)?;
    let addr = listener.local_addr();
    let receiver = std::thread::spawn(move || -> Result<u64> {
        let src = listener.accept()?.accept_src()?;
        receive_all(src, way)
    });
    let sink = RdmaSink::connect(addr, &config)?;
    let payload = vec![0x5au8; o.size];
    let started = Instant::now();
    let sent = send_all(sink, way, o.count, &payload)?;
    let received = receiver
        .join()
        .map_err(|_| Error::Internal("the receiver thread panicked".into()))??;
    let seconds = started.elapsed().as_secs_f64();
    if sent != o.count || received != o.count {
        return Err(Error::Internal(format!(
            "{}: sent {sent}, received {received} of {}",
            way.name(),
            o.count
        )));
    }
    Ok(o.count as f64 / seconds)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::process::ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("event_loop_cost: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Way::ALL.len()];
    for round in 0..o.rounds {
        // alternate the order, so that a machine that warms up or slows down favours none
        let mut order = Way::ALL.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for way in order {
            match one_run(&o, way) {
                Ok(rate) => rates[Way::ALL.iter().position(|w| *w == way).unwrap_or(0)].push(rate),
                Err(e) => {
                    eprintln!("event_loop_cost: {}: {}", way.name(), e.chain());
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    let medians: Vec<f64> = rates.into_iter().map(median).collect();
    let blocking = medians[0];
    let mut line = format!(
        "EVENT-LOOP-COST transport={:?} size={} credits={} count={} rounds={}",
        o.transport, o.size, o.credits, o.count, o.rounds
    );
    for (way, rate) in Way::ALL.iter().zip(&medians) {
        line.push_str(&format!(
            " {}={:.0}msg/s({:.2})",
            way.name(),
            rate,
            rate / blocking
        ));
    }
    println!("{line}");
    std::process::ExitCode::SUCCESS
}
