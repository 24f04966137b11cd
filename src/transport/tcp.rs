//! The TCP transport: the RDMA data-path rules, kept over a second TCP connection.
//!
//! The bootstrap server listens on an ephemeral port of the address the client reached it
//! on; the port and a random 16-byte token travel in the server's hello blob, and the client
//! connects and proves itself with the token. Each message is a u32 little-endian length and the
//! payload. The receiver copies messages into its posted slots in FIFO order and fails, as RDMA
//! would, on a message larger than the slot (local length error) or one that arrives with no slot
//! posted (receiver not ready). Sends are non-blocking; a send completes when the kernel has
//! taken its last byte, after which its staging slot may be reused.
//!
//! The data connection keeps Nagle's algorithm (see `connect_inner`): small messages written
//! back to back are batched into segments by the kernel, not by us, so nothing ever waits in
//! our buffers for a later call.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};

use std::time::{Duration, Instant};

use super::coalescing::ReceiveCoalescing;
use super::{
    Arrived, BootstrapSide, CreditRoute, DataPath, RecvPath, RecvSlot, SendEvent, SendPath,
    SetupParams, SetupStep, StagingSlot, WaitHandle,
};
use crate::log_text::RateLimitedLog;
use crate::net::bootstrap::tune_stream;
use crate::net::wait::remaining;
use crate::proto::{Role, TransportKind};
use crate::{Error, Result};

const NAME: &str = "tcp";
const TOKEN_LEN: usize = 16;
const HEADER_LEN: usize = 4;
/// Where the payload starts in a sender's slot: the allocator's 16-byte alignment, so the
/// application's copy into the slot stays aligned; the length header sits right before it.
const SEND_PAYLOAD_AT: usize = 16;
/// Where a sender's frame (header and payload) starts in its slot.
const SEND_FRAME_AT: usize = SEND_PAYLOAD_AT - HEADER_LEN;
/// Bytes read from the socket per system call on the receive side.
const READ_CHUNK: usize = 256 * 1024;
/// A message body with at least this much still to come is read straight into its slot.
const DIRECT_READ_MIN: usize = 16 * 1024;

/// A send that the kernel has not fully taken yet: its frame (length header and payload) is
/// `slot[next..end]` of what is left to write.
#[derive(Debug)]
struct PendingSend {
    slot: StagingSlot,
    next: usize,
    end: usize,
}

/// The message being assembled on the receive side.
#[derive(Debug)]
struct Incoming {
    /// The slot's index (its token is the front of `posted`).
    slot: usize,
    len: usize,
    got: usize,
}

/// The TCP implementation of [`SendPath`] and [`RecvPath`].
#[derive(Debug)]
pub(crate) struct TcpTransport {
    role: Role,
    side: BootstrapSide,
    peer_ip: Ipv4Addr,
    /// Our address toward the peer (a new data listener binds it after a resume).
    local_ip: Ipv4Addr,
    token: [u8; TOKEN_LEN],
    /// Data connections dropped at the data port, logged at most once a second with a count.
    dropped: RateLimitedLog,
    listener: Option<TcpListener>,
    /// Server side, during set-up: data connections that have not shown the token yet (kept
    /// across a `connect` that stopped because the control connection spoke).
    pending: Vec<PendingData>,
    stream: Option<TcpStream>,
    /// On the sender each slot has room in front of the payload for the frame's length header
    /// (`SEND_FRAME_AT`), so that a message goes to the kernel in one `send` of one buffer.
    slots: Vec<Vec<u8>>,
    slot_size: usize,
    posted: VecDeque<RecvSlot>,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    incoming: Option<Incoming>,
    peer_closed: bool,
    sends: VecDeque<PendingSend>,
    /// Sends the kernel took inside `post_send`, reported by the next `poll`.
    early: Vec<SendEvent>,
    /// Sender: the data socket may have become readable (the receiver closed it or wrote on
    /// it) since the last look; set at start and by [`DataPath::on_wakeup`].
    check_readable: bool,
    /// Receiver: the last read emptied the socket and no wait has reported it readable since;
    /// the next poll does not read (it would find nothing: the driver is about to sleep, and
    /// its wait wakes at once for anything that arrived since), the one after it does (a
    /// driver that busy polls).
    drained: bool,
    /// Receiver: whether to pause before a sleep while a stream runs (see `coalescing`).
    coalescing: ReceiveCoalescing,
    /// Receiver: `SO_RCVBUF` for the data connection (a test build's fault); `None`: the
    /// kernel's tuning.
    receive_buffer: Option<u32>,
}

impl TcpTransport {
    /// Allocates the slots and, on the bootstrap server, opens the data listener.
    pub(crate) fn new(params: &SetupParams) -> Result<Self> {
        let listener = data_listener(params.side, params.local_ip)?;
        let payload_at = payload_at(params.role);
        Ok(Self {
            role: params.role,
            side: params.side,
            peer_ip: params.peer_ip,
            local_ip: params.local_ip,
            token: random_token()?,
            dropped: RateLimitedLog::new("tcp transport: dropped a data connection"),
            listener,
            pending: Vec::new(),
            stream: None,
            slots: {
                super::slots::check_slot_memory(params.slots, params.slot_size, false)?;
                (0..params.slots)
                    .map(|_| super::slots::zeroed(payload_at + params.slot_size))
                    .collect::<Result<Vec<_>>>()?
            },
            slot_size: params.slot_size,
            posted: VecDeque::with_capacity(params.slots),
            rx: match params.role {
                Role::Receiver => vec![0u8; READ_CHUNK],
                Role::Sender => Vec::new(),
            },
            rx_start: 0,
            rx_end: 0,
            incoming: None,
            peer_closed: false,
            sends: VecDeque::with_capacity(params.slots),
            early: Vec::with_capacity(params.slots),
            check_readable: true,
            drained: false,
            coalescing: ReceiveCoalescing::default(),
            receive_buffer: params.faults.tcp_receive_buffer,
        })
    }

    fn stream(&mut self) -> Result<&mut TcpStream> {
        self.stream
            .as_mut()
            .ok_or_else(|| Error::TransportProtocol {
                transport: NAME,
                detail: "used before connect".to_owned(),
            })
    }

    /// One step of accepting the client's data connection (docs/design.md, "The tcp data
    /// port's admission rule"): takes every connection waiting on the data port and reads,
    /// without blocking, what each sent of the session token; the one that presents it is the
    /// data connection. Only connections from the control connection's peer address are kept;
    /// at most [`MAX_PENDING_DATA`] wait for their token, the oldest closed for a new one, and
    /// none longer than [`TOKEN_DEADLINE`]: silent or slow strangers cannot keep the real one
    /// out. `None`: not yet (the driver waits on [`DataPath::setup_fds`] and keeps the
    /// handshake's deadline).
    fn accept_step(&mut self) -> Result<Option<TcpStream>> {
        let listener = self
            .listener
            .as_ref()
            .ok_or_else(|| Error::TransportProtocol {
                transport: NAME,
                detail: "no data listener".to_owned(),
            })?;
        let now = Instant::now();
        let pending = &mut self.pending;
        loop {
            match listener.accept() {
                Ok((stream, from)) => {
                    if from.ip() != std::net::IpAddr::V4(self.peer_ip) {
                        self.dropped
                            .hit(&{ format!("from {from}: not the peer's address") });
                        continue;
                    }
                    stream
                        .set_nonblocking(true)
                        .map_err(io_err("set non-blocking"))?;
                    if pending.len() >= MAX_PENDING_DATA {
                        let oldest = pending.remove(0);
                        self.dropped.hit(&{
                            format!(
                                "a silent one from {}: {MAX_PENDING_DATA} waited for their token, \
the oldest goes",
                                oldest.from
                            )
                        });
                    }
                    pending.push(PendingData {
                        stream,
                        from,
                        since: now,
                        token: [0; TOKEN_LEN],
                        got: 0,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(Error::TransportIo {
                        transport: NAME,
                        what: "accept data connection",
                        source,
                    })
                }
            }
        }
        let mut i = 0;
        while i < pending.len() {
            match pending[i].read_token() {
                TokenRead::Complete if same_token(&pending[i].token, &self.token) => {
                    let p = pending.remove(i);
                    pending.clear();
                    self.listener = None;
                    return Ok(Some(p.stream));
                }
                TokenRead::Incomplete
                    if now.saturating_duration_since(pending[i].since) < TOKEN_DEADLINE =>
                {
                    i += 1;
                }
                TokenRead::Incomplete => {
                    let p = pending.remove(i);
                    self.dropped.hit(&{
                        format!(
                            "from {}: no token within {} ms",
                            p.from,
                            TOKEN_DEADLINE.as_millis()
                        )
                    });
                }
                TokenRead::Complete | TokenRead::Failed => {
                    let p = pending.remove(i);
                    self.dropped
                        .hit(&{ format!("from {}: not the session token", p.from) });
                }
            }
        }
        Ok(None)
    }

    fn connect_data_connection(&self, peer_blob: &[u8], deadline: Instant) -> Result<TcpStream> {
        let bad_blob = || Error::TransportProtocol {
            transport: NAME,
            detail: format!(
                "peer's blob has {} bytes, expected {}",
                peer_blob.len(),
                2 + TOKEN_LEN
            ),
        };
        if peer_blob.len() != 2 + TOKEN_LEN {
            return Err(bad_blob());
        }
        let port = u16::from_le_bytes([peer_blob[0], peer_blob[1]]);
        let addr = SocketAddr::V4(SocketAddrV4::new(self.peer_ip, port));
        let left = remaining(deadline).unwrap_or(Duration::from_millis(1));
        let mut stream =
            TcpStream::connect_timeout(&addr, left).map_err(|source| Error::TransportIo {
                transport: NAME,
                what: "connect data connection",
                source,
            })?;
        stream
            .write_all(&peer_blob[2..])
            .map_err(io_err("send token"))?;
        Ok(stream)
    }

    fn use_data_connection(&mut self, stream: TcpStream) -> Result<()> {
        tune_stream(&stream)?;
        if let (Role::Receiver, Some(bytes)) = (self.role, self.receive_buffer) {
            socket2::SockRef::from(&stream)
                .set_recv_buffer_size(bytes as usize)
                .map_err(io_err("SO_RCVBUF"))?;
        }
        // Nagle stays on for the data connection (tune_stream turns it off for control). The
        // connection is one-way, so a small message waits only while an earlier small segment
        // is unacknowledged, and Linux acknowledges a one-way connection as soon as the reader
        // drains it, which our receiver does whenever it waits for data. A sender that writes
        // faster than the receiver reads thus has its messages batched into segments by the
        // kernel (about twice the 64-byte message rate on loopback, and the receiver wakes once
        // per batch), while a lone message or a ping-pong still goes out at once
        // (BENCHMARKS.md has the measurements).
        stream
            .set_nodelay(false)
            .map_err(io_err("TCP_NODELAY off"))?;
        stream
            .set_nonblocking(true)
            .map_err(io_err("set non-blocking"))?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Moves bytes from the socket into posted slots; stops at WouldBlock, EOF, or a short
    /// read (the socket had nothing more: the caller waits for readability before the next
    /// read, so an empty poll costs no system call of its own).
    fn receive(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        if std::mem::take(&mut self.drained) {
            return self.consume_buffered(out);
        }
        let mut drained = false;
        // Whether a read of this call brought bytes (an empty read after that is a drain).
        let mut read_any = false;
        loop {
            let before = out.len();
            self.consume_buffered(out)?;
            let arrived = &out[before..];
            let bytes: usize = arrived.iter().map(|a| a.len).sum();
            self.coalescing.on_messages(arrived.len(), bytes);
            if drained && !self.peer_closed {
                self.ack_now();
                self.drained = true;
                self.coalescing.on_drained();
            }
            if self.peer_closed || drained {
                return Ok(());
            }
            let Some(stream) = self.stream.as_mut() else {
                return Ok(());
            };
            if self.rx_start == self.rx_end {
                self.rx_start = 0;
                self.rx_end = 0;
                // The rest of a large message body goes straight into its slot: one copy less.
                if let Some(cur) = self.incoming.as_mut() {
                    if cur.len - cur.got >= DIRECT_READ_MIN {
                        match read_some(stream, &mut self.slots[cur.slot][cur.got..cur.len])? {
                            ReadOutcome::Bytes { n, drained: d } => {
                                cur.got += n;
                                drained = d;
                                read_any = true;
                            }
                            ReadOutcome::Closed => self.peer_closed = true,
                            ReadOutcome::Again => {}
                            ReadOutcome::Empty if read_any => drained = true,
                            ReadOutcome::Empty => {
                                self.coalescing.on_empty_read();
                                return Ok(());
                            }
                        }
                        continue;
                    }
                }
            }
            let end = self.rx_end;
            match read_some(stream, &mut self.rx[end..])? {
                ReadOutcome::Bytes { n, drained: d } => {
                    self.rx_end += n;
                    drained = d;
                    read_any = true;
                }
                ReadOutcome::Closed => self.peer_closed = true,
                ReadOutcome::Again => {}
                // What the reads before took ended exactly where the socket did: a drain.
                ReadOutcome::Empty if read_any => drained = true,
                ReadOutcome::Empty => {
                    self.coalescing.on_empty_read();
                    return Ok(());
                }
            }
        }
    }

    /// After a read that emptied the socket: acknowledge at once. The sender keeps Nagle on,
    /// so its next small write waits for this acknowledgement; Linux would delay it (up to
    /// 40 ms) for same-sized segments of 536 bytes or more, stalling a sender with a small
    /// window or a ping-pong. `TCP_QUICKACK` sends the pending acknowledgement now.
    fn ack_now(&mut self) {
        if let Some(stream) = self.stream.as_ref() {
            if let Err(e) = socket2::SockRef::from(stream).set_tcp_quickack(true) {
                log::debug!("tcp transport: TCP_QUICKACK: {e}");
            }
        }
    }

    /// Parses buffered bytes into completions.
    fn consume_buffered(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        loop {
            let avail = self.rx_end - self.rx_start;
            let Some(cur) = self.incoming.as_mut() else {
                if avail < HEADER_LEN {
                    // Keep the partial header at the front so the next read completes it.
                    self.rx.copy_within(self.rx_start..self.rx_end, 0);
                    self.rx_start = 0;
                    self.rx_end = avail;
                    return Ok(());
                }
                let mut h = [0u8; HEADER_LEN];
                h.copy_from_slice(&self.rx[self.rx_start..self.rx_start + HEADER_LEN]);
                self.rx_start += HEADER_LEN;
                let len = u32::from_le_bytes(h) as usize;
                let Some(slot) = self.posted.front().map(RecvSlot::index) else {
                    return Err(protocol(format!(
                        "a {len}-byte message arrived with no receive posted (receiver not ready)"
                    )));
                };
                if len > self.slot_size {
                    return Err(protocol(format!(
                        "a {len}-byte message does not fit the {}-byte receive slot (local length error)",
                        self.slot_size
                    )));
                }
                self.incoming = Some(Incoming { slot, len, got: 0 });
                continue;
            };
            let take = (cur.len - cur.got).min(avail);
            self.slots[cur.slot][cur.got..cur.got + take]
                .copy_from_slice(&self.rx[self.rx_start..self.rx_start + take]);
            cur.got += take;
            self.rx_start += take;
            if cur.got < cur.len {
                return Ok(());
            }
            let len = cur.len;
            self.incoming = None;
            let slot = self.posted.pop_front().ok_or_else(|| {
                Error::Internal("tcp: a message completed in no posted slot".to_owned())
            })?;
            out.push(Arrived::new(slot, len));
        }
    }

    /// Queues the first `len` bytes of `slot` as one message, behind its length header.
    fn queue_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        if len > self.slot_size {
            return Err(protocol(format!(
                "send of {len} bytes from a {}-byte slot",
                self.slot_size
            )));
        }
        let header = u32::try_from(len)
            .map_err(|_| {
                protocol(format!(
                    "message of {len} bytes exceeds the 4 GiB frame limit"
                ))
            })?
            .to_le_bytes();
        self.slots[slot.index()][SEND_FRAME_AT..SEND_PAYLOAD_AT].copy_from_slice(&header);
        self.sends.push_back(PendingSend {
            slot,
            next: SEND_FRAME_AT,
            end: SEND_PAYLOAD_AT + len,
        });
        Ok(())
    }

    /// Hands queued bytes to the kernel now (lowest latency); completions are reported by
    /// `poll`.
    fn flush_now(&mut self) -> Result<()> {
        let mut done = std::mem::take(&mut self.early);
        let flushed = self.flush(&mut done);
        self.early = done;
        flushed
    }

    /// The first write of the only queued send, whose slot holds `message` and `trailer`
    /// behind its header: one `writev` of the header (from the slot) and the caller's bytes.
    /// What the kernel does not take, `flush` writes from the slot.
    fn write_first_from(&mut self, message: &[u8], trailer: &[u8]) -> Result<()> {
        let Some(front) = self.sends.front_mut() else {
            return Ok(());
        };
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        if front.next != SEND_FRAME_AT {
            return Ok(());
        }
        let header = &self.slots[front.slot.index()][SEND_FRAME_AT..SEND_PAYLOAD_AT];
        let parts = [
            io::IoSlice::new(header),
            io::IoSlice::new(message),
            io::IoSlice::new(trailer),
        ];
        if let Some(n) = moved(stream.write_vectored(&parts), "send")? {
            front.next += n;
        }
        Ok(())
    }

    /// Writes queued sends until the kernel pushes back.
    fn flush(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        while let Some(front) = self.sends.front_mut() {
            while front.next < front.end {
                let frame = &self.slots[front.slot.index()][front.next..front.end];
                let Some(stream) = self.stream.as_mut() else {
                    return Ok(());
                };
                match stream.write(frame) {
                    Ok(0) => return Err(Error::TransportClosed { transport: NAME }),
                    Ok(n) => front.next += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(data_io("send", e)),
                }
            }
            if let Some(done) = self.sends.pop_front() {
                out.push(SendEvent::Sent(done.slot));
            }
        }
        Ok(())
    }

    /// On the sending side the peer never writes: readable means closed (or misbehaving).
    fn check_sender_socket(&mut self) -> Result<()> {
        let mut byte = [0u8; 1];
        match moved(self.stream()?.read(&mut byte), "receive")? {
            Some(_) => Err(protocol(
                "the receiver wrote on the data connection".to_owned(),
            )),
            None => Ok(()),
        }
    }
}

/// What a non-blocking read or write did: `Some(n)` bytes moved, `None` when it would block or
/// was interrupted (nothing moved: try later); an error when the connection closed (0 bytes)
/// or the call failed (`what`: "send" or "receive").
fn moved(result: io::Result<usize>, what: &'static str) -> Result<Option<usize>> {
    match result {
        Ok(0) => Err(Error::TransportClosed { transport: NAME }),
        Ok(n) => Ok(Some(n)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(data_io(what, e)),
    }
}

impl DataPath for TcpTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn local_blob(&self) -> Vec<u8> {
        match (&self.listener, self.side) {
            (Some(l), BootstrapSide::Server) => {
                let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
                let mut blob = port.to_le_bytes().to_vec();
                blob.extend_from_slice(&self.token);
                blob
            }
            _ => Vec::new(),
        }
    }

    fn connect(&mut self, peer_blob: &[u8], deadline: Instant) -> Result<SetupStep> {
        let stream = match self.side {
            BootstrapSide::Server => match self.accept_step()? {
                Some(stream) => stream,
                None => return Ok(SetupStep::Waiting),
            },
            BootstrapSide::Client => self.connect_data_connection(peer_blob, deadline)?,
        };
        self.use_data_connection(stream)?;
        Ok(SetupStep::Done)
    }

    fn setup_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) {
        fds.extend(self.listener.as_ref().map(AsFd::as_fd));
        fds.extend(self.pending.iter().map(|p| p.stream.as_fd()));
    }

    fn path_mtu(&self) -> Option<u32> {
        None
    }

    fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn credit_route(&self) -> CreditRoute {
        CreditRoute::ControlChannel
    }

    fn wait_handle(&self) -> Option<WaitHandle<'_>> {
        if self.peer_closed {
            // At end of file the socket is readable for ever: nothing to wait for.
            return None;
        }
        self.stream.as_ref().map(|s| WaitHandle {
            fd: s.as_fd(),
            writable: !self.sends.is_empty(),
        })
    }

    /// A receiver in a running stream with a deep queue pauses before it sleeps, so that the
    /// sender's next messages gather into a few segments (`coalescing` has the rules). Nothing
    /// to arm before a wait: a socket is ready by itself.
    fn pause_before_sleep(&mut self) -> Option<Duration> {
        if self.role == Role::Receiver && !self.peer_closed {
            self.coalescing.before_sleep(self.posted.len())
        } else {
            None
        }
    }

    fn on_wakeup(&mut self) {
        self.check_readable = true;
        self.drained = false;
    }

    fn can_resume(&self) -> bool {
        true
    }

    /// Drops the connection and whatever was half read or half written; keeps the slots and
    /// the posted receives in their order; gives back the staging slots of every send it held
    /// (their messages are sent again from them if they had not arrived); draws a new token
    /// and, on the bootstrap server, opens a new data listener.
    fn reset_for_resume(&mut self, reclaimed: &mut Vec<StagingSlot>) -> Result<()> {
        self.stream = None;
        self.pending.clear();
        self.rx_start = 0;
        self.rx_end = 0;
        self.incoming = None;
        self.peer_closed = false;
        self.drained = false;
        self.check_readable = true;
        self.coalescing = ReceiveCoalescing::default();
        reclaimed.extend(self.early.drain(..).filter_map(|event| match event {
            SendEvent::Sent(slot) => Some(slot),
            SendEvent::Credits(_) => None,
        }));
        reclaimed.extend(self.sends.drain(..).map(|send| send.slot));
        self.token = random_token()?;
        self.listener = data_listener(self.side, self.local_ip)?;
        Ok(())
    }

    fn close(&mut self) {
        self.stream = None;
        self.listener = None;
        self.pending.clear();
        self.posted.clear();
        self.sends.clear();
    }
}

impl SendPath for TcpTransport {
    fn staging<'a>(&'a mut self, slot: &'a mut StagingSlot) -> &'a mut [u8] {
        &mut self.slots[slot.index()][payload_at(self.role)..]
    }

    fn post_send(&mut self, slot: StagingSlot, len: usize) -> Result<()> {
        self.queue_send(slot, len)?;
        self.flush_now()
    }

    fn post_send_kept(&mut self, slot: StagingSlot, message: &[u8], trailer: &[u8]) -> Result<()> {
        let len = message.len() + trailer.len();
        let index = slot.index();
        let Some(buf) = self.slots[index].get_mut(SEND_PAYLOAD_AT..SEND_PAYLOAD_AT + len) else {
            return Err(protocol(format!(
                "send of {len} bytes from a {}-byte slot",
                self.slot_size
            )));
        };
        let (body, tail) = buf.split_at_mut(message.len());
        super::kept_copy::copy_kept(body, message);
        tail.copy_from_slice(trailer);
        self.queue_send(slot, len)?;
        // A slot written around the cache: with nothing queued before it, the kernel takes the
        // message from the caller's buffer, still in the cache; whatever it does not take is
        // written from the slot. A smaller message goes from its slot in one plain write (a
        // `writev` of three parts cost a stream of 64-byte messages 23% of its rate).
        if super::kept_copy::goes_around_cache(message.len()) && self.sends.len() == 1 {
            self.write_first_from(message, trailer)?;
        }
        self.flush_now()
    }

    fn output_queued(&self) -> bool {
        !self.sends.is_empty()
    }

    fn poll_sends(&mut self, out: &mut Vec<SendEvent>) -> Result<()> {
        if self.role != Role::Sender {
            return Err(super::wrong_role(NAME, "poll_sends"));
        }
        let before = out.len();
        out.append(&mut self.early);
        self.flush(out)?;
        // The receiver never writes here, so the socket turns readable only at its close: look
        // only after a wait said so (a write fails on a reset anyway), not once per poll.
        if std::mem::take(&mut self.check_readable) {
            self.check_sender_socket()?;
        }
        if self.peer_closed && out.len() == before {
            return Err(Error::TransportClosed { transport: NAME });
        }
        Ok(())
    }
}

impl RecvPath for TcpTransport {
    fn post_recv(&mut self, slot: RecvSlot) -> Result<()> {
        self.posted.push_back(slot);
        Ok(())
    }

    fn message<'a>(&'a self, msg: &'a Arrived) -> &'a [u8] {
        &self.slots[msg.slot_index()][..msg.len().min(self.slot_size)]
    }

    fn poll_arrivals(&mut self, out: &mut Vec<Arrived>) -> Result<()> {
        if self.role != Role::Receiver {
            return Err(super::wrong_role(NAME, "poll_arrivals"));
        }
        let before = out.len();
        self.receive(out)?;
        // Deliver what arrived before the close first; report the close on an empty poll.
        if self.peer_closed && out.len() == before {
            return Err(Error::TransportClosed { transport: NAME });
        }
        Ok(())
    }

    fn return_credits(&mut self, _count: usize) -> Result<()> {
        Err(super::wrong_role(NAME, "an in-band credit"))
    }

    fn data_waiting(&self) -> bool {
        let mut probe = [0u8; 1];
        self.stream
            .as_ref()
            .is_some_and(|s| matches!(s.peek(&mut probe), Ok(n) if n > 0))
    }
}

/// Where the payload starts in a slot: after the room for the length header on the sender,
/// at 0 on the receiver.
fn payload_at(role: Role) -> usize {
    match role {
        Role::Sender => SEND_PAYLOAD_AT,
        Role::Receiver => 0,
    }
}

/// What one read of the data connection found.
enum ReadOutcome {
    /// `n` bytes; `drained` when fewer than asked for (the socket had no more then).
    Bytes { n: usize, drained: bool },
    /// End of file: the peer closed the connection.
    Closed,
    /// Interrupted by a signal: read again.
    Again,
    /// Nothing to read now.
    Empty,
}

/// One non-blocking read into `buf`.
fn read_some(stream: &mut TcpStream, buf: &mut [u8]) -> Result<ReadOutcome> {
    let want = buf.len();
    match stream.read(buf) {
        Ok(0) => Ok(ReadOutcome::Closed),
        Ok(n) => Ok(ReadOutcome::Bytes {
            n,
            drained: n < want,
        }),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(ReadOutcome::Empty),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(ReadOutcome::Again),
        Err(e) => Err(data_io("receive", e)),
    }
}

/// On the bootstrap server, a non-blocking listener for the data connection on an ephemeral
/// port of `local_ip`.
fn data_listener(side: BootstrapSide, local_ip: Ipv4Addr) -> Result<Option<TcpListener>> {
    match side {
        BootstrapSide::Server => {
            let addr = SocketAddr::V4(SocketAddrV4::new(local_ip, 0));
            let l = TcpListener::bind(addr).map_err(|source| Error::Listen { addr, source })?;
            l.set_nonblocking(true)
                .map_err(io_err("set listener non-blocking"))?;
            Ok(Some(l))
        }
        BootstrapSide::Client => Ok(None),
    }
}

/// Data connections that may wait for their token at once; a new one closes the oldest.
const MAX_PENDING_DATA: usize = 8;
/// How long a data connection may take, from its accept, to present the token (the real
/// client writes it right after connecting).
const TOKEN_DEADLINE: Duration = Duration::from_secs(2);

/// A data connection that has not presented its token yet.
#[derive(Debug)]
struct PendingData {
    stream: TcpStream,
    from: SocketAddr,
    /// When we accepted it.
    since: Instant,
    token: [u8; TOKEN_LEN],
    got: usize,
}

enum TokenRead {
    Incomplete,
    Complete,
    Failed,
}

impl PendingData {
    /// Reads what has arrived of the token, without blocking.
    fn read_token(&mut self) -> TokenRead {
        loop {
            match self.stream.read(&mut self.token[self.got..]) {
                Ok(0) => return TokenRead::Failed,
                Ok(n) => {
                    self.got += n;
                    if self.got == TOKEN_LEN {
                        return TokenRead::Complete;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return TokenRead::Incomplete,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return TokenRead::Failed,
            }
        }
    }
}

/// 16 bytes from the operating system's random source.
fn random_token() -> Result<[u8; TOKEN_LEN]> {
    let mut token = [0u8; TOKEN_LEN];
    getrandom::fill(&mut token).map_err(|e| Error::TransportIo {
        transport: NAME,
        what: "draw the data connection's token",
        source: io::Error::other(e.to_string()),
    })?;
    Ok(token)
}

/// Whether two tokens are equal, in time that does not depend on where they differ.
fn same_token(a: &[u8; TOKEN_LEN], b: &[u8; TOKEN_LEN]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn io_err(what: &'static str) -> impl Fn(io::Error) -> Error {
    move |source| Error::TransportIo {
        transport: NAME,
        what,
        source,
    }
}

fn data_io(what: &'static str, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            Error::TransportClosed { transport: NAME }
        }
        _ => Error::TransportIo {
            transport: NAME,
            what,
            source: e,
        },
    }
}

fn protocol(detail: String) -> Error {
    Error::TransportProtocol {
        transport: NAME,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A receiving transport over a loopback connection, and the writing end.
    fn receiver(slots: usize, slot_size: usize) -> (TcpTransport, TcpStream) {
        let params = SetupParams {
            side: BootstrapSide::Client,
            role: Role::Receiver,
            local_ip: Ipv4Addr::LOCALHOST,
            peer_ip: Ipv4Addr::LOCALHOST,
            slots,
            slot_size,
            lanes: 1,
            extra_paths: Vec::new(),
            device: None,
            qp: crate::proto::QpSettings::default(),
            sysfs_root: "/sys".into(),
            faults: crate::config::TestFaults::default(),
        };
        let mut t = TcpTransport::new(&params).expect("transport");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let writer = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (reader, _) = listener.accept().expect("accept");
        reader.set_nonblocking(true).expect("non-blocking");
        t.stream = Some(reader);
        for slot in 0..slots {
            t.post_recv(RecvSlot::mint(slot)).expect("post");
        }
        (t, writer)
    }

    /// A connected pair over loopback: the bootstrap server receives, the client sends.
    fn connected_pair(slots: usize, slot_size: usize) -> (TcpTransport, TcpTransport) {
        let params = |side, role| SetupParams {
            side,
            role,
            local_ip: Ipv4Addr::LOCALHOST,
            peer_ip: Ipv4Addr::LOCALHOST,
            slots,
            slot_size,
            lanes: 1,
            extra_paths: Vec::new(),
            device: None,
            qp: crate::proto::QpSettings::default(),
            sysfs_root: "/sys".into(),
            faults: crate::config::TestFaults::default(),
        };
        let mut rx = TcpTransport::new(&params(BootstrapSide::Server, Role::Receiver)).unwrap();
        let mut tx = TcpTransport::new(&params(BootstrapSide::Client, Role::Sender)).unwrap();
        connect_both(&mut rx, &mut tx);
        (rx, tx)
    }

    fn connect_both(rx: &mut TcpTransport, tx: &mut TcpTransport) {
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            tx.connect(&rx.local_blob(), deadline).unwrap(),
            SetupStep::Done
        );
        while rx.connect(&[], deadline).unwrap() == SetupStep::Waiting {
            assert!(
                Instant::now() < deadline,
                "the data connection was not accepted"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Polls until `n` messages arrived: their slots and bytes.
    fn arrivals(rx: &mut TcpTransport, n: usize) -> Vec<(usize, Vec<u8>)> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        let mut out = Vec::new();
        while got.len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} arrived",
                got.len()
            );
            rx.on_wakeup();
            rx.poll_arrivals(&mut out).unwrap();
            for m in out.drain(..) {
                got.push((m.slot_index(), rx.message(&m).to_vec()));
            }
        }
        got
    }

    #[test]
    fn a_reset_for_resume_keeps_slots_and_posted_receives_and_gives_back_the_sends() {
        let (mut rx, mut tx) = connected_pair(3, 16);
        for slot in 0..3 {
            rx.post_recv(RecvSlot::mint(slot)).unwrap();
        }
        let send = |tx: &mut TcpTransport, n: u8| {
            let mut slot = StagingSlot::mint(usize::from(n));
            tx.staging(&mut slot)[..4].copy_from_slice(&[n; 4]);
            tx.post_send(slot, 4).unwrap();
        };
        send(&mut tx, 0);
        assert_eq!(arrivals(&mut rx, 1), vec![(0, vec![0; 4])]);
        // Message 1 is on its way (not read yet) when the path breaks: both ends reset, and
        // what the receiver had not read is gone with the connection.
        send(&mut tx, 1);
        let mut none = Vec::new();
        rx.reset_for_resume(&mut none).unwrap();
        let mut reclaimed = Vec::new();
        tx.reset_for_resume(&mut reclaimed).unwrap();
        assert!(none.is_empty());
        let mut reclaimed: Vec<usize> = reclaimed.iter().map(StagingSlot::index).collect();
        reclaimed.sort_unstable();
        assert_eq!(
            reclaimed,
            vec![0, 1],
            "every send the sender held comes back"
        );
        connect_both(&mut rx, &mut tx);
        // Message 1 is sent again from its own slot, whose bytes are still there; it lands in
        // the receive slot after the one message 0 took, as if nothing had happened.
        let mut slot = StagingSlot::mint(1);
        assert_eq!(&tx.staging(&mut slot)[..4], &[1; 4]);
        tx.post_send(slot, 4).unwrap();
        assert_eq!(arrivals(&mut rx, 1)[0], (1, vec![1; 4]));
    }

    #[test]
    fn a_kept_message_arrives_whole_when_the_kernel_takes_it_in_parts_and_stays_in_its_slot() {
        // Eight messages of 64 KiB + 17 with a 4-byte trailer, none read until all are posted:
        // the kernel's buffers fill, so later messages go out in parts or wait queued.
        let (count, len) = (8usize, 65_536 + 17);
        let (mut rx, mut tx) = connected_pair(count, len + 4);
        for slot in 0..count {
            rx.post_recv(RecvSlot::mint(slot)).unwrap();
        }
        socket2::SockRef::from(rx.stream.as_ref().unwrap())
            .set_recv_buffer_size(32 * 1024)
            .unwrap();
        socket2::SockRef::from(tx.stream.as_ref().unwrap())
            .set_send_buffer_size(32 * 1024)
            .unwrap();
        let message = |n: usize| -> Vec<u8> { (0..len).map(|i| (i * 31 + n * 7) as u8).collect() };
        let trailer = |n: usize| [n as u8 + 1; 4];
        for n in 0..count {
            let mut caller = message(n);
            tx.post_send_kept(StagingSlot::mint(n), &caller, &trailer(n))
                .unwrap();
            // `send` returned: the caller may reuse its buffer; what the kernel has not taken
            // yet must come from the slot.
            caller.fill(0xAB);
        }
        assert!(
            tx.output_queued(),
            "the kernel took everything: nothing was sent in parts"
        );
        let mut got = Vec::new();
        let mut arrived = Vec::new();
        let mut sent = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < count {
            assert!(
                Instant::now() < deadline,
                "only {} of {count} arrived",
                got.len()
            );
            tx.poll_sends(&mut sent).unwrap();
            rx.on_wakeup();
            rx.poll_arrivals(&mut arrived).unwrap();
            got.extend(
                arrived
                    .drain(..)
                    .map(|m| (m.slot_index(), rx.message(&m).to_vec())),
            );
        }
        for (n, (slot, bytes)) in got.into_iter().enumerate() {
            let mut want = message(n);
            want.extend_from_slice(&trailer(n));
            assert_eq!(slot, n);
            assert!(bytes == want, "message {n} arrived other than sent");
            // A resume sends again from the slot: it holds the message and its trailer.
            let mut kept = StagingSlot::mint(n);
            assert!(
                tx.staging(&mut kept)[..len + 4] == want[..],
                "slot {n} lost its message"
            );
        }
    }

    /// `count` frames of `len` bytes each, as a sender puts them on the wire.
    fn frames(count: usize, len: usize) -> Vec<u8> {
        let mut wire = Vec::new();
        for i in 0..count {
            wire.extend_from_slice(&(len as u32).to_le_bytes());
            wire.extend(std::iter::repeat_n(i as u8, len));
        }
        wire
    }

    /// Writes `count` small messages at once into a receiver with `slots` posted, takes them,
    /// and asks whether the receiver would pause before its next sleep.
    fn pause_after(t: &mut TcpTransport, w: &mut TcpStream, count: usize) -> Option<Duration> {
        pause_after_messages_of(t, w, count, 16)
    }

    /// The same with messages of `len` bytes (all of them within one loopback segment, so that
    /// one read takes them).
    fn pause_after_messages_of(
        t: &mut TcpTransport,
        w: &mut TcpStream,
        count: usize,
        len: usize,
    ) -> Option<Duration> {
        w.write_all(&frames(count, len)).unwrap();
        assert_eq!(arrivals(t, count).len(), count);
        let posted = t.posted.len();
        t.coalescing.before_sleep(posted)
    }

    #[test]
    fn a_burst_into_a_deep_queue_makes_the_receiver_pause_before_it_sleeps() {
        use super::super::coalescing::{HOLD, MIN_ROOM};
        let (mut t, mut w) = receiver(MIN_ROOM + 8, 16);
        assert_eq!(pause_after(&mut t, &mut w, 3), Some(HOLD));
        // A lone message is not a stream: it is taken at once and the receiver sleeps at once.
        assert_eq!(pause_after(&mut t, &mut w, 1), None);
    }

    #[test]
    fn a_burst_into_a_shallow_queue_never_makes_the_receiver_pause() {
        let (mut t, mut w) = receiver(8, 16);
        assert_eq!(pause_after(&mut t, &mut w, 3), None);
    }

    #[test]
    fn a_body_read_that_ends_exactly_where_the_socket_does_counts_as_a_drain() {
        let len = 20 * 1024;
        let (mut t, mut w) = receiver(4, len);
        let wire = frames(1, len);
        // The header and the start of the body: taken, the message not complete yet.
        w.write_all(&wire[..HEADER_LEN + 100]).unwrap();
        let mut out = Vec::new();
        t.on_wakeup();
        t.poll_arrivals(&mut out).unwrap();
        assert!(out.is_empty());
        // The rest, read straight into the slot in one read of exactly its size; the read
        // after it finds the socket empty.
        w.write_all(&wire[HEADER_LEN + 100..]).unwrap();
        assert_eq!(arrivals(&mut t, 1).len(), 1);
        assert!(
            t.drained,
            "an empty read right after the body is a drain, not the end of a stream"
        );
    }

    #[test]
    fn a_burst_of_large_messages_pauses_with_a_megabyte_of_room_posted() {
        use super::super::coalescing::{HOLD, MIN_ROOM_BYTES};
        let len = 16 * 1024;
        let room = MIN_ROOM_BYTES / len;
        // After the burst of 3, `room` slots are still posted: the sender could write a
        // megabyte during the pause.
        let (mut t, mut w) = receiver(room + 3, len);
        assert_eq!(pause_after_messages_of(&mut t, &mut w, 3, len), Some(HOLD));
        let (mut t, mut w) = receiver(room + 2, len);
        assert_eq!(pause_after_messages_of(&mut t, &mut w, 3, len), None);
    }

    /// Data framing torture for a bounded time: valid streams (within the credit) arrive
    /// exactly; damaged or hostile ones (huge lengths, more messages than slots, cut frames)
    /// end in a clean error or a clean close, never a panic or a hang.
    #[test]
    fn data_framing_torture_for_a_bounded_time() {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut rounds = 0;
        while Instant::now() < deadline {
            rounds += 1;
            let (slots, slot_size) = (4, 64);
            let (mut t, mut w) = receiver(slots, slot_size);
            let count = 1 + (next() % slots as u64) as usize;
            let sent: Vec<Vec<u8>> = (0..count)
                .map(|i| vec![i as u8; (next() % (slot_size as u64 + 1)) as usize])
                .collect();
            let mut stream: Vec<u8> = Vec::new();
            for m in &sent {
                stream.extend_from_slice(&(m.len() as u32).to_le_bytes());
                stream.extend_from_slice(m);
            }
            let damaged = next() % 2 == 0;
            if damaged {
                for _ in 0..1 + next() % 4 {
                    let at = (next() % stream.len() as u64) as usize;
                    stream[at] ^= 1 << (next() % 8);
                }
                if next() % 3 == 0 {
                    stream.truncate((next() % stream.len() as u64) as usize);
                }
            }
            w.write_all(&stream).expect("write");
            drop(w);
            let mut got = Vec::new();
            let mut out = Vec::new();
            let mut result = Ok(());
            for _ in 0..10_000 {
                out.clear();
                match t.poll_arrivals(&mut out) {
                    Ok(()) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
                let arrived = out.len();
                for m in out.drain(..) {
                    got.push(t.message(&m).to_vec());
                }
                if arrived == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            if damaged {
                if let Err(e) = &result {
                    assert!(
                        matches!(
                            e,
                            Error::TransportClosed { .. } | Error::TransportProtocol { .. }
                        ),
                        "round {rounds}: {e}"
                    );
                }
            } else {
                assert!(
                    matches!(result, Err(Error::TransportClosed { .. })),
                    "round {rounds}: {result:?}"
                );
                assert_eq!(got, sent, "round {rounds}");
            }
        }
        assert!(rounds > 20, "only {rounds} rounds");
    }
}
