//! Route lookup through netlink, the way `ip route get` does it.
//!
//! One RTM_GETROUTE request carrying RTA_DST (not a dump) goes to the kernel, which answers with
//! the route it would use: the same `ip_route_output_key` path rdma_cm takes, so policy routing
//! applies. The lookup sends no packet to the destination.

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::num::NonZeroI32;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteType as NlRouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
use nix::sys::time::TimeVal;

use crate::{Error, Result};

/// How long we wait for the kernel's answer before giving up.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// Receive buffer size; a route reply is a few hundred bytes.
const RECV_BUF_LEN: usize = 32 * 1024;

/// The kind of route the kernel chose (the `rtm_type` of its answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteType {
    /// A gateway or directly connected route.
    Unicast,
    /// The destination is an address of this host.
    Local,
    /// A broadcast address.
    Broadcast,
    /// The destination is unreachable (ICMP host unreachable).
    Unreachable,
    /// Administratively prohibited.
    Prohibit,
    /// Silently dropped.
    Blackhole,
    /// Any other `RTN_*` value, kept as the raw number.
    Other(u8),
}

impl From<NlRouteType> for RouteType {
    fn from(kind: NlRouteType) -> Self {
        match kind {
            NlRouteType::Unicast => Self::Unicast,
            NlRouteType::Local => Self::Local,
            NlRouteType::Broadcast => Self::Broadcast,
            NlRouteType::Unreachable => Self::Unreachable,
            NlRouteType::Prohibit => Self::Prohibit,
            NlRouteType::BlackHole => Self::Blackhole,
            other => Self::Other(u8::from(other)),
        }
    }
}

impl fmt::Display for RouteType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unicast => f.write_str("unicast"),
            Self::Local => f.write_str("local"),
            Self::Broadcast => f.write_str("broadcast"),
            Self::Unreachable => f.write_str("unreachable"),
            Self::Prohibit => f.write_str("prohibit"),
            Self::Blackhole => f.write_str("blackhole"),
            Self::Other(n) => write!(f, "type {n}"),
        }
    }
}

/// The route the kernel uses to reach one IPv4 destination.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RouteInfo {
    /// The destination that was looked up.
    pub destination: Ipv4Addr,
    /// What kind of route matched.
    pub route_type: RouteType,
    /// Name of the egress interface (`lo` when the destination is this host).
    pub interface: Option<String>,
    /// Index of the egress interface (RTA_OIF).
    pub ifindex: Option<u32>,
    /// The source address the kernel would pick (RTA_PREFSRC).
    pub source: Option<Ipv4Addr>,
    /// The next hop, when the destination is not directly connected (RTA_GATEWAY).
    pub gateway: Option<Ipv4Addr>,
}

impl fmt::Display for RouteInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.destination)?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        match (&self.interface, self.ifindex) {
            (Some(name), _) => write!(f, " dev {name}")?,
            (None, Some(index)) => write!(f, " dev #{index}")?,
            (None, None) => {}
        }
        if let Some(src) = self.source {
            write!(f, " src {src}")?;
        }
        write!(f, " ({})", self.route_type)
    }
}

/// Asks the kernel which route it uses to reach `dst`, like `ip route get`.
///
/// Sends one netlink RTM_GETROUTE request with RTA_DST (no packet reaches `dst`) and waits at
/// most two seconds for the answer. The interface name is resolved from the egress ifindex.
///
/// # Errors
///
/// [`Error::NoRoute`] when the kernel refuses the lookup (ENETUNREACH, or the errno of an
/// unreachable, prohibit or blackhole route) or answers with such a route type;
/// [`Error::Route`] when the netlink socket fails, the answer cannot be decoded or it does not
/// arrive in time.
pub fn route_to(dst: Ipv4Addr) -> Result<RouteInfo> {
    let sock_err = |source: io::Error| Error::Route { dst, source };
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(sock_err)?;
    socket.bind_auto().map_err(sock_err)?;
    socket.connect(&SocketAddr::new(0, 0)).map_err(sock_err)?;
    let timeout = TimeVal::new(REPLY_TIMEOUT.as_secs() as _, 0);
    setsockopt(&socket, ReceiveTimeout, &timeout).map_err(|e| sock_err(e.into()))?;

    socket.send(&request(dst), 0).map_err(sock_err)?;

    // The socket is connected to the kernel and joined no multicast group, so everything it
    // receives answers our single request.
    let deadline = Instant::now() + REPLY_TIMEOUT;
    let mut buf = Vec::with_capacity(RECV_BUF_LEN);
    loop {
        if Instant::now() >= deadline {
            return Err(sock_err(timed_out()));
        }
        buf.clear();
        match socket.recv(&mut buf, 0) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(sock_err(timed_out())),
            Err(e) => return Err(sock_err(e)),
        }
        if let Some(mut info) = parse_reply(dst, &buf)? {
            info.interface = info.ifindex.and_then(interface_name);
            return Ok(info);
        }
    }
}

/// Decodes one datagram of the kernel's answer to an RTM_GETROUTE request for `dst`.
///
/// Returns `Ok(Some(route))` for an RTM_NEWROUTE answer (with `interface` left empty: names are
/// resolved by [`route_to`]) and `Ok(None)` when the datagram holds nothing relevant (noop,
/// ACK, done).
///
/// # Errors
///
/// [`Error::NoRoute`] for a netlink error answer or an unreachable, prohibit or blackhole route;
/// [`Error::Route`] (kind `InvalidData`) when the bytes are not a valid netlink route message.
pub(crate) fn parse_reply(dst: Ipv4Addr, datagram: &[u8]) -> Result<Option<RouteInfo>> {
    let invalid = |what: String| Error::Route {
        dst,
        source: io::Error::new(io::ErrorKind::InvalidData, what),
    };
    let mut rest = datagram;
    while !rest.is_empty() {
        let len = NetlinkBuffer::new_checked(rest)
            .map_err(|e| invalid(e.to_string()))?
            .length() as usize;
        let this = rest
            .get(..len)
            .ok_or_else(|| invalid(format!("truncated netlink message of {len} bytes")))?;
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(this)
            .map_err(|e| invalid(e.to_string()))?;
        match msg.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => {
                return route_info(dst, &route).map(Some);
            }
            NetlinkPayload::Error(err) => {
                if let Some(code) = err.code {
                    return Err(Error::NoRoute {
                        dst,
                        detail: errno_detail(code),
                    });
                }
            }
            _ => {}
        }
        // Messages are aligned to 4 bytes; the last one may lack its padding.
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(None)
}

/// Builds the RTM_GETROUTE request for `dst` (what `ip route get` sends).
fn request(dst: Ipv4Addr) -> Vec<u8> {
    let mut route = RouteMessage::default();
    route.header.address_family = AddressFamily::Inet;
    route.header.destination_prefix_length = 32;
    route
        .attributes
        .push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = 1;
    let payload = NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetRoute(route));
    let mut packet = NetlinkMessage::new(header, payload);
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    buf
}

/// Extracts the facts we use from the kernel's route message.
fn route_info(dst: Ipv4Addr, route: &RouteMessage) -> Result<RouteInfo> {
    let route_type = RouteType::from(route.header.kind);
    if matches!(
        route_type,
        RouteType::Unreachable | RouteType::Prohibit | RouteType::Blackhole
    ) {
        return Err(Error::NoRoute {
            dst,
            detail: format!("the matching route is of type {route_type}"),
        });
    }
    let mut info = RouteInfo {
        destination: dst,
        route_type,
        interface: None,
        ifindex: None,
        source: None,
        gateway: None,
    };
    for attr in &route.attributes {
        match attr {
            RouteAttribute::Destination(RouteAddress::Inet(a)) => info.destination = *a,
            RouteAttribute::Oif(index) => info.ifindex = Some(*index),
            RouteAttribute::PrefSource(RouteAddress::Inet(a)) => info.source = Some(*a),
            RouteAttribute::Gateway(RouteAddress::Inet(a)) => info.gateway = Some(*a),
            _ => {}
        }
    }
    Ok(info)
}

/// Explains a netlink error code (a negative errno) the way the kernel's FIB means it.
fn errno_detail(code: NonZeroI32) -> String {
    let errno = code.get().saturating_abs();
    let text = io::Error::from_raw_os_error(errno);
    let hint = match errno {
        libc::ENETUNREACH => "; no route matches (is there a default route?)",
        libc::EHOSTUNREACH => "; an unreachable route matches",
        libc::EACCES => "; a prohibit route or policy rule matches",
        libc::EINVAL => "; probably a blackhole route matches",
        _ => "",
    };
    format!("kernel says: {text}{hint}")
}

/// The name of interface `index`, or `None` (logged) when it cannot be resolved.
fn interface_name(index: u32) -> Option<String> {
    match nix::net::if_::if_indextoname(index) {
        Ok(name) => name.into_string().ok(),
        Err(e) => {
            log::debug!("cannot name interface #{index}: {e}");
            None
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer from the kernel within {REPLY_TIMEOUT:?}"),
    )
}
