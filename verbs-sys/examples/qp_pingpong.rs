//! A latency experiment: a 2-byte ping-pong over one RC queue pair each way, or over one queue
//! pair for both directions, nothing else (no sessions, no credits). It answers one question
//! about `rdma-container bench --mode lat`, which runs over two queue pairs per end (a sink and a
//! src): does a round trip through four queue pairs cost more on soft-RoCE than one through two,
//! as `ib_send_lat` uses? The soft-RoCE VM's `qp-pingpong` check runs it both ways, alternated.
//!
//! ```text
//! qp_pingpong --device rxeB --gid-index 1 --server 0.0.0.0:7000 --qps 2 --iters 5000
//! qp_pingpong --device rxeA --gid-index 1 --client 198.18.1.2:7000 --qps 2 --iters 5000
//! ```
//!
//! `--qps 1`: pings and pongs share one queue pair per end. `--qps 2`: pings go over the first,
//! pongs over the second, each with its own completion queue (as two sessions have); either way
//! the spin polls one CQ (the receiving lane's), and the sending lane's is drained once per
//! arrival. Both ends must be given the same `--qps` (checked). The client
//! prints `QP-PINGPONG qps=N iters=N touch_pages=N avg_half_rtt_us=X typical_half_rtt_us=Y
//! min_half_rtt_us=Z send_call_us=S after_send_us=A`: X from the wall clock over the timed
//! round trips, after a warm-up; Y the median round trip (perftest's `t_typical`) and Z the
//! shortest (`t_min`), each timed by the cycle counter at the rate it ran against the clock over
//! the whole run (`-` without a counter); X, Y and Z are half a round trip, as perftest reports.
//! S and A are the medians of a whole round trip's two parts on the client: its send (the post
//! call, where rxe does the kernel's work) and the rest, until the reply is taken. Both ends
//! busy-poll.
//!
//! `--touch-pages N` asks a second question, whether the memory a round trip touches costs
//! time under emulation: each end writes one byte in each of N distinct pages of its own
//! right before it sends (both ends must give the same N; default 0).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use verbs_sys::ffi::{self, ibv_qp_attr, ibv_qp_cap, ibv_sge, ibv_wc};
use verbs_sys::{
    CompletionQueue, Context, DeviceList, MemoryRegion, ProtectionDomain, QpInit, QueuePair,
    RecvList, SendList,
};

/// Receives posted ahead on each queue pair that receives.
const DEPTH: usize = 64;
/// Bytes per receive slot (the messages are 2 bytes).
const SLOT: usize = 64;
/// A send is signaled every this many (the send queue is drained by those completions).
const SIGNAL_EVERY: u64 = 16;
/// Round trips before the timed ones.
const WARM_UP: u64 = 100;
/// How long an end waits for a message before it gives up.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// The most pages `--touch-pages` takes (256 MiB).
const MAX_TOUCH_PAGES: u32 = 65_536;
const PAGE: usize = 4096;

type Error = Box<dyn std::error::Error>;

struct Args {
    device: String,
    gid_index: u8,
    server: Option<String>,
    client: Option<String>,
    qps: usize,
    iters: u64,
    touch_pages: u32,
}

fn args() -> Result<Args, Error> {
    let mut a = Args {
        device: String::new(),
        gid_index: 0,
        server: None,
        client: None,
        qps: 1,
        iters: 1000,
        touch_pages: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--device" => a.device = value()?,
            "--gid-index" => a.gid_index = value()?.parse()?,
            "--server" => a.server = Some(value()?),
            "--client" => a.client = Some(value()?),
            "--qps" => a.qps = value()?.parse()?,
            "--iters" => a.iters = value()?.parse()?,
            "--touch-pages" => a.touch_pages = value()?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if a.device.is_empty()
        || a.server.is_some() == a.client.is_some()
        || !(1..=2).contains(&a.qps)
        || a.iters == 0
        || a.touch_pages > MAX_TOUCH_PAGES
    {
        return Err(
            "usage: qp_pingpong --device D --gid-index I (--server ADDR | --client ADDR) \
             [--qps 1|2] [--iters N] [--touch-pages 0..65536]"
                .into(),
        );
    }
    Ok(a)
}

/// One queue pair with its own completion queue, moved to INIT.
struct Lane {
    qp: QueuePair,
    cq: CompletionQueue,
    psn: u32,
}

/// What the peer needs to reach a lane: queue pair number, starting PSN, GID, MTU.
const WIRE: usize = 4 + 4 + 16 + 4;

fn lane(ctx: &Context, pd: &ProtectionDomain, port: u8, psn: u32) -> Result<Lane, Error> {
    let cq = ctx.create_cq(4 * DEPTH as u32, None, 0)?;
    let qp = pd.create_qp(QpInit {
        send_cq: &cq,
        recv_cq: &cq,
        cap: ibv_qp_cap {
            max_send_wr: DEPTH as u32,
            max_recv_wr: DEPTH as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        qp_type: ffi::IBV_QPT_RC,
        sq_sig_all: false,
    })?;
    let init = ibv_qp_attr {
        qp_state: ffi::IBV_QPS_INIT,
        port_num: port,
        qp_access_flags: ffi::IBV_ACCESS_LOCAL_WRITE,
        ..Default::default()
    };
    qp.modify(
        &init,
        ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT | ffi::IBV_QP_ACCESS_FLAGS,
    )?;
    Ok(Lane { qp, cq, psn })
}

fn encode(lane: &Lane, gid: [u8; 16], mtu: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(WIRE);
    b.extend_from_slice(&lane.qp.qp_num().to_be_bytes());
    b.extend_from_slice(&lane.psn.to_be_bytes());
    b.extend_from_slice(&gid);
    b.extend_from_slice(&mtu.to_be_bytes());
    b
}

/// Moves `lane` to RTR and RTS toward the peer's `blob` (see [`encode`]).
fn connect(lane: &Lane, blob: &[u8], port: u8, gid_index: u8, mtu: u32) -> Result<(), Error> {
    let word = |at: usize| u32::from_be_bytes([blob[at], blob[at + 1], blob[at + 2], blob[at + 3]]);
    let (qpn, psn, peer_mtu) = (word(0), word(4), word(24));
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&blob[8..24]);
    let rtr = ibv_qp_attr {
        qp_state: ffi::IBV_QPS_RTR,
        path_mtu: mtu.min(peer_mtu),
        dest_qp_num: qpn,
        rq_psn: psn,
        min_rnr_timer: 12,
        ah_attr: ffi::ibv_ah_attr {
            is_global: 1,
            port_num: port,
            grh: ffi::ibv_global_route {
                sgid_index: gid_index,
                dgid: ffi::ibv_gid { raw: gid },
                hop_limit: 64,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    lane.qp.modify(
        &rtr,
        ffi::IBV_QP_STATE
            | ffi::IBV_QP_AV
            | ffi::IBV_QP_PATH_MTU
            | ffi::IBV_QP_DEST_QPN
            | ffi::IBV_QP_RQ_PSN
            | ffi::IBV_QP_MAX_DEST_RD_ATOMIC
            | ffi::IBV_QP_MIN_RNR_TIMER,
    )?;
    let rts = ibv_qp_attr {
        qp_state: ffi::IBV_QPS_RTS,
        sq_psn: lane.psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..Default::default()
    };
    lane.qp.modify(
        &rts,
        ffi::IBV_QP_STATE
            | ffi::IBV_QP_SQ_PSN
            | ffi::IBV_QP_TIMEOUT
            | ffi::IBV_QP_RETRY_CNT
            | ffi::IBV_QP_RNR_RETRY
            | ffi::IBV_QP_MAX_QP_RD_ATOMIC,
    )?;
    Ok(())
}

/// The receive slots and the send buffer, registered.
struct Buffers {
    mr: Option<MemoryRegion>,
    memory: Vec<u8>,
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // The memory may be freed only once the region is deregistered; otherwise it is leaked.
        let Some(mr) = self.mr.take() else { return };
        let deregistration = mr.deregistration();
        drop(mr);
        if !deregistration.done() {
            std::mem::forget(std::mem::take(&mut self.memory));
        }
    }
}

impl Buffers {
    fn sge(&self, slot: usize, len: u32) -> ibv_sge {
        ibv_sge {
            addr: self.memory.as_ptr() as u64 + (slot * SLOT) as u64,
            length: len,
            lkey: self.mr.as_ref().map_or(0, MemoryRegion::lkey),
        }
    }
}

/// One end's lanes: the one it sends on and the one it receives on (the same with `--qps 1`).
struct End {
    lanes: Vec<Lane>,
    send_lane: usize,
    recv_lane: usize,
    buffers: Buffers,
    sends: SendList,
    recvs: RecvList,
    wcs: [ibv_wc; 16],
    sent: u64,
    next_recv_slot: usize,
}

impl End {
    fn post_recv(&mut self) -> Result<(), Error> {
        let slot = self.next_recv_slot % DEPTH;
        self.next_recv_slot += 1;
        self.recvs
            .push(slot as u64, Some(self.buffers.sge(slot, SLOT as u32)));
        // SAFETY: the slot lies in `buffers`, registered for local write in this QP's PD; the
        // memory outlives the queue pairs (see `main`) and we never read or write it.
        let r = unsafe { self.lanes[self.recv_lane].qp.post_recv(&mut self.recvs) };
        self.recvs.clear();
        Ok(r?)
    }

    fn send(&mut self) -> Result<(), Error> {
        let mut flags = ffi::IBV_SEND_INLINE;
        if self.sent % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
            flags |= ffi::IBV_SEND_SIGNALED;
        }
        self.sent += 1;
        let sge = self.buffers.sge(DEPTH, 2);
        self.sends.push_send(u64::MAX, Some(sge), flags);
        // SAFETY: inline: the provider copies the 2 bytes during the call.
        let r = unsafe { self.lanes[self.send_lane].qp.post_send(&mut self.sends) };
        self.sends.clear();
        Ok(r?)
    }

    /// Takes what is on `lane`'s CQ off it; says whether a message arrived (send completions
    /// are dropped).
    fn poll(&mut self, lane: usize) -> Result<bool, Error> {
        let n = self.lanes[lane].cq.poll(&mut self.wcs)?;
        let mut arrived = false;
        for wc in &self.wcs[..n] {
            if wc.status != ffi::IBV_WC_SUCCESS {
                return Err(format!("completion status {}", wc.status).into());
            }
            arrived |= wc.wr_id != u64::MAX;
        }
        Ok(arrived)
    }

    /// Busy-polls the receiving lane's CQ until a message arrives, posts its receive again,
    /// and (with a lane each way) drains the sending lane's CQ once: the spin polls one CQ
    /// either way.
    fn recv(&mut self) -> Result<(), Error> {
        let mut polls = 0u32;
        let mut since = None;
        while !self.poll(self.recv_lane)? {
            // A peer gone mid-run must not leave this end spinning for ever.
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(65_536)
                && since.get_or_insert_with(Instant::now).elapsed() > PATIENCE
            {
                return Err(format!("nothing arrived for {} s", PATIENCE.as_secs()).into());
            }
        }
        if self.send_lane != self.recv_lane && self.poll(self.send_lane)? {
            return Err("a message arrived on the sending lane".into());
        }
        self.post_recv()
    }
}

fn main() -> Result<(), Error> {
    let a = args()?;
    let list = DeviceList::new()?;
    let dev = list
        .iter()
        .find(|d| d.name() == a.device)
        .ok_or(format!("no device {}", a.device))?;
    let ctx = dev.open()?;
    let port = 1u8;
    let mtu = ctx.query_port(port)?.active_mtu;
    let gid = ctx.query_gid(port, u32::from(a.gid_index))?;
    let pd = ctx.alloc_pd()?;
    let mut memory = vec![0u8; (DEPTH + 1) * SLOT];
    // SAFETY: the heap buffer of `memory` (the Vec moves into `End`, its buffer does not) is
    // freed only when `End` drops, after its queue pairs (`lanes` is its first field).
    let mr = unsafe {
        pd.reg_mr(
            memory.as_mut_ptr(),
            memory.len(),
            ffi::IBV_ACCESS_LOCAL_WRITE,
        )?
    };
    let lanes = (0..a.qps)
        .map(|i| lane(&ctx, &pd, port, 0x1000 + i as u32))
        .collect::<Result<Vec<_>, _>>()?;

    let mut stream = match (&a.server, &a.client) {
        (Some(addr), _) => TcpListener::bind(addr)?.accept()?.0,
        (_, Some(addr)) => TcpStream::connect(addr)?,
        _ => unreachable!("args() checks"),
    };
    // Both ends must run the same way: the lane count, the round trips and the pages first.
    let mut mine = vec![a.qps as u8];
    mine.extend_from_slice(&a.iters.to_be_bytes());
    mine.extend_from_slice(&a.touch_pages.to_be_bytes());
    stream.write_all(&mine)?;
    let mut theirs = [0u8; 13];
    stream.read_exact(&mut theirs)?;
    if theirs[..] != mine[..] {
        return Err("the peer runs another --qps, --iters or --touch-pages".into());
    }
    for lane in &lanes {
        stream.write_all(&encode(lane, gid, mtu))?;
    }
    let mut blob = vec![0u8; WIRE * a.qps];
    stream.read_exact(&mut blob)?;
    for (i, lane) in lanes.iter().enumerate() {
        connect(
            lane,
            &blob[i * WIRE..(i + 1) * WIRE],
            port,
            a.gid_index,
            mtu,
        )?;
    }
    let client = a.client.is_some();
    // Lane 0 carries pings, lane 1 (if any) pongs.
    let (send_lane, recv_lane) = match (a.qps, client) {
        (1, _) => (0, 0),
        (_, true) => (0, 1),
        (_, false) => (1, 0),
    };
    let mut end = End {
        lanes,
        send_lane,
        recv_lane,
        buffers: Buffers {
            mr: Some(mr),
            memory,
        },
        sends: SendList::with_capacity(1),
        recvs: RecvList::with_capacity(1),
        wcs: [ibv_wc::default(); 16],
        sent: 0,
        next_recv_slot: 0,
    };
    for _ in 0..DEPTH {
        end.post_recv()?;
    }
    // Both ends have their receives posted before the first ping.
    stream.write_all(b"r")?;
    stream.read_exact(&mut [0u8; 1])?;

    // Written once here, so that every page is in memory before the timed round trips.
    let mut pages = Pages(vec![1u8; a.touch_pages as usize * PAGE]);
    let total = WARM_UP + a.iters;
    // The counter at the end of each timed round trip (and at the start of the first).
    let mut stamps: Vec<u64> = Vec::with_capacity(usize::try_from(a.iters).unwrap_or(0) + 1);
    let mut parts: Vec<(u64, u64)> = Vec::with_capacity(stamps.capacity());
    let mut started = Instant::now();
    for i in 0..total {
        if i == WARM_UP {
            started = Instant::now();
            stamps.extend(cycles_sys::read());
        }
        if client {
            pages.touch(i);
            let before_send = cycles_sys::read();
            end.send()?;
            let after_send = cycles_sys::read();
            end.recv()?;
            if i >= WARM_UP {
                stamps.extend(cycles_sys::read());
                if let (Some(a), Some(b), Some(&c)) = (before_send, after_send, stamps.last()) {
                    // the send (its post call, a system call on rxe), then the rest of the trip;
                    // a counter that ran backwards (a thread that moved CPUs) times neither
                    if let (Some(send), Some(rest)) = (b.checked_sub(a), c.checked_sub(b)) {
                        parts.push((send, rest));
                    }
                }
            }
        } else {
            end.recv()?;
            pages.touch(i);
            end.send()?;
        }
    }
    let elapsed = started.elapsed();
    if client {
        let halves = half_rtt_us(&stamps, elapsed.as_secs_f64() * 1e6);
        let show = |us: Option<f64>| us.map_or_else(|| "-".to_string(), |us| format!("{us:.2}"));
        let (min, typical) = (show(halves.map(|h| h.min)), show(halves.map(|h| h.typical)));
        let per_tick = halves.map(|h| h.per_tick_us);
        let part = |pick: fn(&(u64, u64)) -> u64| {
            let mut v: Vec<u64> = parts.iter().map(pick).collect();
            v.sort_unstable();
            show(per_tick.zip(v.get(v.len() / 2)).map(|(t, &m)| m as f64 * t))
        };
        println!(
            "QP-PINGPONG qps={} iters={} touch_pages={} avg_half_rtt_us={:.2} typical_half_rtt_us={typical} min_half_rtt_us={min} send_call_us={} after_send_us={}",
            a.qps,
            a.iters,
            a.touch_pages,
            elapsed.as_secs_f64() * 1e6 / a.iters as f64 / 2.0,
            part(|p| p.0),
            part(|p| p.1),
        );
    }
    // The server's last pong may still be unacknowledged: wait for the client to be done.
    stream.write_all(b"d")?;
    let _ = stream.read(&mut [0u8; 1]);
    drop(end);
    Ok(())
}

/// Half the median and half the shortest round trip in microseconds, from the counter's
/// readings at each round trip's end (`stamps`, the first at the start) over a run of
/// `elapsed_us` on the clock: the counter's rate is taken from the run (its ticks over its clock
/// time), never assumed. A round trip whose counter ran backwards (a thread that moved CPUs;
/// the check pins both ends) is left out. `None` without a counter, or when it stood still over
/// the run.
fn half_rtt_us(stamps: &[u64], elapsed_us: f64) -> Option<HalfRtt> {
    let (first, last) = (*stamps.first()?, *stamps.last()?);
    let ticks = last.checked_sub(first).filter(|&t| t > 0)?;
    let mut trips: Vec<u64> = stamps
        .windows(2)
        .filter_map(|w| w[1].checked_sub(w[0]))
        .collect();
    if trips.is_empty() {
        return None;
    }
    trips.sort_unstable();
    // perftest's median: the mean of the two middle ones when there is an even number.
    let mid = trips.len() / 2;
    let median = if trips.len().is_multiple_of(2) {
        (trips[mid - 1] as f64 + trips[mid] as f64) / 2.0
    } else {
        trips[mid] as f64
    };
    let per_tick_us = elapsed_us / ticks as f64;
    Some(HalfRtt {
        min: trips[0] as f64 * per_tick_us / 2.0,
        typical: median * per_tick_us / 2.0,
        per_tick_us,
    })
}

/// perftest's t_min and t_typical: half the shortest and half the median round trip (µs),
/// and the counter's period over the run (µs a tick).
#[derive(Debug, Clone, Copy)]
struct HalfRtt {
    min: f64,
    typical: f64,
    per_tick_us: f64,
}

/// `--touch-pages`: memory of N pages, one byte of each written per round trip.
struct Pages(Vec<u8>);

impl Pages {
    /// Writes one byte in every page (a different cache line of it in each round trip), so
    /// that a round trip touches every page and the compiler cannot drop or merge the writes.
    fn touch(&mut self, round: u64) {
        let line = (round % (PAGE as u64 / 64)) as usize * 64;
        for page in self.0.chunks_exact_mut(PAGE) {
            page[line] = page[line].wrapping_add(1);
        }
        std::hint::black_box(&mut self.0);
    }
}
