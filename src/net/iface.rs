//! Interface addresses, and the source-side facts of a session's network path.
//!
//! docs/design.md "How the device and GID are chosen", rule 1: the source IPv4 (the bootstrap
//! socket's local address) is the key; the interface that owns it is where its RoCE GID lives,
//! also when the peer is this host and the route points at `lo`.

use std::net::Ipv4Addr;

use nix::ifaddrs::getifaddrs;

use super::route::{self, RouteInfo, RouteType};
use crate::{Error, Result};

/// The loopback interface's conventional name.
const LOOPBACK: &str = "lo";

/// One IPv4 address configured on an interface of this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct InterfaceAddr {
    /// The interface name (for example `eth0`).
    pub interface: String,
    /// The address.
    pub address: Ipv4Addr,
    /// The prefix length of its subnet (from the netmask).
    pub prefix_len: u8,
}

/// All IPv4 addresses of this host (in this network namespace), from `getifaddrs`.
///
/// # Errors
///
/// [`Error::InterfaceAddrs`] when `getifaddrs` fails.
pub(crate) fn ipv4_addresses() -> Result<Vec<InterfaceAddr>> {
    let addrs = getifaddrs().map_err(|e| Error::InterfaceAddrs(e.into()))?;
    Ok(addrs
        .filter_map(|ifa| {
            let address = ifa.address.as_ref()?.as_sockaddr_in()?.ip();
            let prefix_len = ifa
                .netmask
                .as_ref()
                .and_then(|m| m.as_sockaddr_in())
                .map_or(32, |m| u32::from(m.ip()).count_ones() as u8);
            Some(InterfaceAddr {
                interface: ifa.interface_name,
                address,
                prefix_len,
            })
        })
        .collect())
}

/// Name of the interface that owns `addr`, or `None` when no interface has it.
///
/// When several interfaces carry the same address, the first one other than `lo` wins.
///
/// # Errors
///
/// [`Error::InterfaceAddrs`] when the addresses cannot be listed.
pub fn interface_owning(addr: Ipv4Addr) -> Result<Option<String>> {
    Ok(owner_in(&ipv4_addresses()?, addr))
}

/// The first owner of `addr` in `addrs`, preferring any interface over `lo`.
fn owner_in(addrs: &[InterfaceAddr], addr: Ipv4Addr) -> Option<String> {
    let mut owners = addrs.iter().filter(|a| a.address == addr);
    let first = owners.clone().next()?;
    owners
        .find(|a| a.interface != LOOPBACK)
        .unwrap_or(first)
        .interface
        .clone()
        .into()
}

/// The source-side facts of a session's path, for GID choice, logs and error messages.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PathInfo {
    /// The local IPv4 the bootstrap socket uses (the GID key).
    pub source: Ipv4Addr,
    /// The peer's IPv4.
    pub peer: Ipv4Addr,
    /// The interface that owns `source` (also when the peer is this host and the route says
    /// `lo`); if no interface owns it, the route's egress interface.
    pub interface: Option<String>,
    /// The kernel's route to the peer, when the lookup worked.
    pub route: Option<RouteInfo>,
    /// The peer is this host (local route, loopback, or an address of ours).
    pub peer_is_local: bool,
    /// The source or the peer is in 127.0.0.0/8.
    pub is_loopback: bool,
}

/// Gathers the source-side facts for a session from `source` (the bootstrap socket's local
/// address) and `peer`.
///
/// Never fails: a failed route lookup or address listing is logged at debug level and leaves
/// the corresponding fields empty.
pub fn path_info(source: Ipv4Addr, peer: Ipv4Addr) -> PathInfo {
    let route = route::route_to(peer).map_err(|e| log::debug!("{e}")).ok();
    let addrs = ipv4_addresses()
        .map_err(|e| log::debug!("{e}"))
        .unwrap_or_default();

    let route_is_local = route
        .as_ref()
        .is_some_and(|r| r.route_type == RouteType::Local);
    let interface = owner_in(&addrs, source).or_else(|| {
        // Only a source from a local route range (127.0.0.0/8 beyond 127.0.0.1, AnyIP) is
        // ours without being configured; the egress interface is the best remaining guess.
        let egress = route.as_ref()?.interface.clone();
        log::debug!("no interface owns {source}; using the route's egress {egress:?}");
        egress
    });
    let peer_is_local = route_is_local || peer.is_loopback() || owner_in(&addrs, peer).is_some();

    PathInfo {
        source,
        peer,
        interface,
        route,
        peer_is_local,
        is_loopback: source.is_loopback() || peer.is_loopback(),
    }
}
