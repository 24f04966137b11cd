//! The bootstrap TCP connection: connect with retry, listen, accept, socket options.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};

use super::wait::remaining;
use crate::time::deadline_after;
use crate::{Error, Result};

/// Idle time before the first keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
/// Time between keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// Unanswered probes before the kernel declares the peer dead.
const KEEPALIVE_RETRIES: u32 = 3;
/// Unacknowledged data older than this also declares the peer dead (TCP_USER_TIMEOUT).
const USER_TIMEOUT: Duration = Duration::from_secs(15);

/// Applies the options every session socket gets: TCP_NODELAY (the tcp transport turns it
/// off again on its one-way data connection), keepalive with short timers and
/// TCP_USER_TIMEOUT, so a silently vanished peer is noticed within seconds.
pub(crate) fn tune_stream(stream: &TcpStream) -> Result<()> {
    let sock = socket2::SockRef::from(stream);
    let err = |what| move |source| Error::Socket { what, source };
    sock.set_tcp_nodelay(true).map_err(err("TCP_NODELAY"))?;
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    sock.set_tcp_keepalive(&keepalive)
        .map_err(err("SO_KEEPALIVE"))?;
    sock.set_tcp_user_timeout(Some(USER_TIMEOUT))
        .map_err(err("TCP_USER_TIMEOUT"))?;
    Ok(())
}

/// Refuses an IPv6 bootstrap address at once, before anything listens or connects: the RoCE v2
/// device and GID come from the IPv4 route between the ends, and the hello carries IPv4-mapped
/// addresses, so every transport (TCP included) bootstraps over IPv4. An IPv4-mapped IPv6
/// address (`::ffff:a.b.c.d`) is an IPv4 address.
pub(crate) fn ipv4_only(addr: SocketAddr) -> Result<()> {
    match addr.ip() {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => Err(Error::InvalidConfig(format!(
            "{addr} is an IPv6 address: rdma-container bootstraps over IPv4 only (the RoCE v2 \
device and GID come from the IPv4 route to the peer); use an IPv4 address of the RoCE interface"
        ))),
        _ => Ok(()),
    }
}

/// Connects to `addr`, retrying with exponential backoff (50 ms doubling to 1 s) until
/// `timeout` has passed or `stopped` says to stop (asked at least every 50 ms). Each attempt is
/// itself bounded by the time left.
pub(crate) fn connect(
    addr: SocketAddr,
    timeout: Duration,
    stopped: &dyn Fn() -> bool,
) -> Result<TcpStream> {
    ipv4_only(addr)?;
    let deadline = deadline_after(Instant::now(), timeout);
    let mut backoff = Duration::from_millis(50);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = remaining(deadline).unwrap_or(Duration::from_millis(1));
        let last = match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => {
                tune_stream(&stream)?;
                log::debug!("connected to {addr} after {attempts} attempt(s)");
                return Ok(stream);
            }
            Err(e) => e,
        };
        if stopped() {
            return Err(Error::Interrupted);
        }
        let Some(left) = remaining(deadline) else {
            return Err(Error::Connect {
                addr,
                seconds: timeout.as_secs_f64(),
                source: last,
            });
        };
        if attempts == 1 {
            log::info!(
                "waiting for the server at {addr} ({last}); retrying for up to {:.1} s",
                timeout.as_secs_f64()
            );
        }
        // Sleep in short steps so Ctrl-C is noticed at once.
        let wake = Instant::now() + backoff.min(left);
        while let Some(step) = remaining(wake) {
            if stopped() {
                return Err(Error::Interrupted);
            }
            std::thread::sleep(step.min(Duration::from_millis(50)));
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Listens on `addr` (SO_REUSEADDR set, so a restarted server can bind at once).
pub(crate) fn listen(addr: SocketAddr) -> Result<TcpListener> {
    ipv4_only(addr)?;
    let err = |source| Error::Listen { addr, source };
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    socket.bind(&SockAddr::from(addr)).map_err(err)?;
    socket.listen(64).map_err(err)?;
    Ok(socket.into())
}

/// Accepts one connection and tunes it. `WouldBlock` on a non-blocking listener is passed through
/// as `Ok(None)`.
pub(crate) fn accept(listener: &TcpListener) -> Result<Option<(TcpStream, SocketAddr)>> {
    match listener.accept() {
        Ok((stream, peer)) => {
            stream
                .set_nonblocking(false)
                .map_err(|source| Error::Socket {
                    what: "set blocking",
                    source,
                })?;
            tune_stream(&stream)?;
            Ok(Some((stream, peer)))
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(Error::Accept(e)),
    }
}
