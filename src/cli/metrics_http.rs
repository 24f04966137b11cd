//! The metrics endpoint's HTTP connections: one thread, every connection served at once.
//!
//! Rules (docs/metrics.md, "Limits"):
//! - at most [`MAX_CONNECTIONS`] connections are open at once; one more closes the oldest, so
//!   a crowd of idle or trickling connections cannot keep a scrape out;
//! - each connection has [`REQUEST_DEADLINE`] from its accept to send its whole request head
//!   and take the whole answer; past it, it is closed (a slow or idle one never delays another:
//!   nothing here blocks on one connection);
//! - a head longer than [`MAX_REQUEST`] is answered 431 without reading on; the answer is the
//!   one `metrics::answer_for` gives, then the connection closes.
//!
//! Time is an argument of every step ([`Connections::step`]), so the rules are tested without
//! sleeping.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::metrics::{find_blank_line, MAX_REQUEST};

/// Connections open at once; the oldest is closed for a new one beyond this.
pub const MAX_CONNECTIONS: usize = 16;
/// How long one connection may take, from its accept, to send its request and take the answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// One connection: reading its head, then writing its answer.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    accepted: Instant,
    head: Vec<u8>,
    /// The answer and how much of it is written, once the head is read.
    out: Option<(Vec<u8>, usize)>,
}

/// What is left of a connection after a step.
enum Step {
    Open,
    Done,
}

impl Conn {
    /// Reads what arrived; once the head is complete (or too long, or the client stopped
    /// sending), takes its answer from `answer`.
    fn read(&mut self, answer: &dyn Fn(Option<&[u8]>) -> Vec<u8>) -> io::Result<()> {
        let mut buf = [0u8; 1024];
        loop {
            let n = match self.stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.head.extend_from_slice(&buf[..n]);
            let head = if n == 0 {
                Some(self.head.as_slice())
            } else if let Some(end) = find_blank_line(&self.head) {
                Some(&self.head[..end])
            } else if self.head.len() > MAX_REQUEST {
                None
            } else {
                continue;
            };
            self.out = Some((answer(head), 0));
            return Ok(());
        }
    }

    /// Writes what the kernel takes of the answer.
    fn write(&mut self) -> io::Result<Step> {
        let Some((out, at)) = self.out.as_mut() else {
            return Ok(Step::Open);
        };
        while *at < out.len() {
            match self.stream.write(&out[*at..]) {
                Ok(0) => return Ok(Step::Done),
                Ok(n) => *at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Open),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // Tell the client we are done; it may already be gone.
        let _ = self.stream.shutdown(Shutdown::Write);
        Ok(Step::Done)
    }

    fn step(&mut self, answer: &dyn Fn(Option<&[u8]>) -> Vec<u8>) -> io::Result<Step> {
        if self.out.is_none() {
            self.read(answer)?;
        }
        self.write()
    }
}

/// The open connections of the metrics endpoint.
#[derive(Debug, Default)]
pub struct Connections {
    conns: Vec<Conn>,
}

impl Connections {
    /// Takes a new connection accepted at `now`, closing the oldest when
    /// [`MAX_CONNECTIONS`] are open.
    pub fn add(&mut self, stream: TcpStream, now: Instant) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        if self.conns.len() >= MAX_CONNECTIONS {
            let oldest = self.conns.remove(0);
            log::debug!(
                "metrics: closed a connection from {:?} for a new one ({MAX_CONNECTIONS} open)",
                oldest.stream.peer_addr()
            );
        }
        self.conns.push(Conn {
            stream,
            accepted: now,
            head: Vec::new(),
            out: None,
        });
        Ok(())
    }

    /// Reads and writes what each connection allows without blocking, then closes those that
    /// are answered, failed or past their deadline at `now`.
    pub fn step(&mut self, now: Instant, answer: &dyn Fn(Option<&[u8]>) -> Vec<u8>) {
        self.conns.retain_mut(|c| {
            if now.saturating_duration_since(c.accepted) >= REQUEST_DEADLINE {
                log::debug!(
                    "metrics: closed a connection from {:?}: no whole request and answer within {} s",
                    c.stream.peer_addr(),
                    REQUEST_DEADLINE.as_secs()
                );
                return false;
            }
            match c.step(answer) {
                Ok(Step::Open) => true,
                Ok(Step::Done) => false,
                Err(e) => {
                    log::debug!("metrics: a request failed: {e}");
                    false
                }
            }
        });
    }

    /// The earliest deadline of an open connection.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .iter()
            .map(|c| c.accepted + REQUEST_DEADLINE)
            .min()
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether none is open.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}

/// Serves the endpoint for the rest of the process: accepts every waiting connection, serves
/// each as far as it allows, sleeps until one is ready or a deadline passes.
pub fn serve(listener: &TcpListener, answer: &dyn Fn(Option<&[u8]>) -> Vec<u8>) {
    if let Err(e) = listener.set_nonblocking(true) {
        log::warn!("metrics: cannot serve: {e}");
        return;
    }
    let mut conns = Connections::default();
    loop {
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = conns.add(stream, Instant::now()) {
                        log::debug!("metrics: a connection failed: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::warn!("metrics: accept failed: {e}");
                    // Out of descriptors or memory: do not spin.
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
        conns.step(Instant::now(), answer);
        let timeout = conns.next_deadline().map_or(PollTimeout::NONE, |d| {
            let ms = d.saturating_duration_since(Instant::now()).as_millis() + 1;
            PollTimeout::try_from(ms.min(60_000) as i32).unwrap_or(PollTimeout::NONE)
        });
        let mut fds = Vec::with_capacity(conns.len() + 1);
        fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        for c in &conns.conns {
            let flags = if c.out.is_some() {
                PollFlags::POLLOUT
            } else {
                PollFlags::POLLIN
            };
            fds.push(PollFd::new(c.stream.as_fd(), flags));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                log::warn!("metrics: poll failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn echo_answer(head: Option<&[u8]>) -> Vec<u8> {
        match head {
            Some(h) => [b"got ".as_slice(), h].concat(),
            None => b"too long".to_vec(),
        }
    }

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    fn local() -> (TcpListener, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = l.local_addr().expect("addr");
        (l, a)
    }

    fn is_closed(s: &mut TcpStream) -> bool {
        s.set_nonblocking(true).expect("non-blocking");
        let mut b = [0u8; 64];
        loop {
            match s.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }

    #[test]
    fn a_request_is_answered_while_idle_and_trickling_connections_stay_open() {
        let (listener, _) = local();
        let mut conns = Connections::default();
        let t0 = Instant::now();
        let mut idle = Vec::new();
        for _ in 0..5 {
            let (c, s) = pair(&listener);
            conns.add(s, t0).expect("add");
            idle.push(c);
        }
        let (mut trickle, s) = pair(&listener);
        conns.add(s, t0).expect("add");
        trickle.write_all(b"GET /me").expect("write");
        let (mut scrape, s) = pair(&listener);
        conns.add(s, t0).expect("add");
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .expect("write");
        conns.step(t0 + Duration::from_millis(10), &echo_answer);
        let mut got = String::new();
        scrape.read_to_string(&mut got).expect("the answer");
        assert_eq!(got, "got GET /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(
            conns.len(),
            6,
            "the six slow ones stay open, the scrape is closed"
        );
        assert!(idle.iter_mut().all(|c| !is_closed(c)));
        assert!(!is_closed(&mut trickle));
    }

    #[test]
    fn a_connection_is_closed_at_its_whole_request_deadline_however_it_trickles() {
        let (listener, _) = local();
        let mut conns = Connections::default();
        let t0 = Instant::now();
        let (mut trickle, s) = pair(&listener);
        conns.add(s, t0).expect("add");
        let (mut idle, s) = pair(&listener);
        conns.add(s, t0 + Duration::from_secs(1)).expect("add");
        for second in 1..5 {
            trickle.write_all(b"G").expect("a byte");
            conns.step(t0 + Duration::from_secs(second), &echo_answer);
        }
        assert_eq!(conns.len(), 2, "both inside their deadline");
        assert_eq!(conns.next_deadline(), Some(t0 + REQUEST_DEADLINE));
        conns.step(t0 + REQUEST_DEADLINE, &echo_answer);
        assert_eq!(conns.len(), 1, "the trickler is closed at 5 s");
        assert!(is_closed(&mut trickle));
        assert!(!is_closed(&mut idle));
        conns.step(t0 + Duration::from_secs(1) + REQUEST_DEADLINE, &echo_answer);
        assert!(conns.is_empty());
        assert!(is_closed(&mut idle));
    }

    #[test]
    fn a_new_connection_beyond_the_limit_closes_the_oldest() {
        let (listener, _) = local();
        let mut conns = Connections::default();
        let t0 = Instant::now();
        let mut clients = Vec::new();
        for i in 0..=MAX_CONNECTIONS {
            let (c, s) = pair(&listener);
            conns
                .add(s, t0 + Duration::from_millis(i as u64))
                .expect("add");
            clients.push(c);
        }
        assert_eq!(conns.len(), MAX_CONNECTIONS);
        assert!(is_closed(&mut clients[0]), "the oldest is closed");
        assert!(clients[1..].iter_mut().all(|c| !is_closed(c)));
        let newest = clients.last_mut().expect("newest");
        newest
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .expect("write");
        conns.step(t0 + Duration::from_millis(100), &echo_answer);
        let mut got = String::new();
        newest.read_to_string(&mut got).expect("answer");
        assert!(got.starts_with("got GET"), "{got}");
    }

    #[test]
    fn a_head_longer_than_the_limit_is_answered_without_reading_on() {
        let (listener, _) = local();
        let mut conns = Connections::default();
        let t0 = Instant::now();
        let (mut c, s) = pair(&listener);
        conns.add(s, t0).expect("add");
        c.write_all(&vec![b'a'; MAX_REQUEST + 2048]).expect("write");
        for ms in 1..20 {
            conns.step(t0 + Duration::from_millis(ms), &echo_answer);
        }
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("answer");
        assert_eq!(got, b"too long");
    }

    #[test]
    fn the_serving_thread_answers_a_scrape_while_slow_connections_hold_on() {
        let (listener, addr) = local();
        std::thread::spawn(move || serve(&listener, &echo_answer));
        let mut slow: Vec<TcpStream> = (0..8)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        slow[0]
            .write_all(b"GET /metr")
            .expect("a part of a request");
        let mut scrape = TcpStream::connect(addr).expect("connect");
        scrape
            .set_read_timeout(Some(REQUEST_DEADLINE * 4))
            .expect("timeout");
        scrape
            .write_all(b"HEAD /metrics HTTP/1.1\r\n\r\n")
            .expect("write");
        let mut got = String::new();
        scrape.read_to_string(&mut got).expect("the answer");
        assert!(got.starts_with("got HEAD"), "{got}");
        // Answered before any slow connection's deadline: all are still open.
        assert!(slow.iter_mut().all(|c| !is_closed(c)));
    }
}
