//! Route and interface lookup: live queries against this host's kernel (loopback and local
//! addresses only; a route lookup sends no packet), plus netlink parsing over hand-built
//! messages that do not depend on the host.

use std::net::Ipv4Addr;
use std::num::NonZeroI32;
use std::sync::mpsc;
use std::time::Duration;

use crate::net::iface::{interface_owning, ipv4_addresses, path_info, InterfaceAddr};
use crate::net::route::{parse_reply, route_to, RouteInfo, RouteType};
use crate::Error;
use netlink_packet_core::{ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteType as NlRouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rdma_test_support::skip_or_fail;

const LOCALHOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
const DST: Ipv4Addr = Ipv4Addr::new(10, 231, 0, 2);

/// A configured IPv4 address that is not on `lo`, if this host has one.
fn non_lo_address() -> Option<InterfaceAddr> {
    let found = ipv4_addresses()
        .ok()?
        .into_iter()
        .find(|a| a.interface != "lo" && !a.address.is_loopback());
    if found.is_none() {
        skip_or_fail("this host has no IPv4 address outside lo");
    }
    found
}

#[test]
fn loopback_route_is_local_on_lo() -> Result<(), Error> {
    let route = route_to(LOCALHOST)?;
    assert_eq!(route.route_type, RouteType::Local, "{route}");
    assert_eq!(route.interface.as_deref(), Some("lo"), "{route}");
    assert_eq!(route.destination, LOCALHOST);
    assert!(route.ifindex.is_some());
    Ok(())
}

#[test]
fn own_non_lo_address_route_is_local() -> Result<(), Error> {
    let Some(own) = non_lo_address() else {
        return Ok(());
    };
    let route = route_to(own.address)?;
    assert_eq!(route.route_type, RouteType::Local, "{route}");
    Ok(())
}

#[test]
fn addresses_include_loopback() -> Result<(), Error> {
    let addrs = ipv4_addresses()?;
    assert!(
        addrs
            .iter()
            .any(|a| a.interface == "lo" && a.address == LOCALHOST && a.prefix_len == 8),
        "{addrs:?}"
    );
    Ok(())
}

#[test]
fn loopback_is_owned_by_lo() -> Result<(), Error> {
    assert_eq!(interface_owning(LOCALHOST)?.as_deref(), Some("lo"));
    Ok(())
}

#[test]
fn unconfigured_test_net_address_has_no_owner() -> Result<(), Error> {
    let configured: Vec<Ipv4Addr> = ipv4_addresses()?.iter().map(|a| a.address).collect();
    let candidates = [
        Ipv4Addr::new(192, 0, 2, 123),
        Ipv4Addr::new(198, 51, 100, 123),
        Ipv4Addr::new(203, 0, 113, 123),
    ];
    let Some(addr) = candidates.into_iter().find(|a| !configured.contains(a)) else {
        skip_or_fail("every TEST-NET candidate is configured here");
        return Ok(());
    };
    assert_eq!(interface_owning(addr)?, None);
    Ok(())
}

#[test]
fn path_info_for_loopback() {
    let path = path_info(LOCALHOST, LOCALHOST);
    assert!(path.is_loopback);
    assert!(path.peer_is_local);
    assert_eq!(path.interface.as_deref(), Some("lo"));
    if let Some(route) = &path.route {
        assert_eq!(route.route_type, RouteType::Local);
    }
}

#[test]
fn path_info_maps_peer_on_this_host_to_owning_interface() {
    let Some(own) = non_lo_address() else {
        return;
    };
    let path = path_info(own.address, own.address);
    assert!(path.peer_is_local);
    assert!(!path.is_loopback);
    assert_eq!(path.interface.as_deref(), Some(own.interface.as_str()));
}

#[test]
fn test_net_route_answers_without_hanging() {
    let dst = Ipv4Addr::new(198, 51, 100, 1);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(route_to(dst));
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(route)) => {
            println!("route: {route}");
            assert!(route.interface.is_some(), "{route}");
            assert_eq!(route.destination, dst);
        }
        Ok(Err(e @ Error::NoRoute { .. })) => println!("no route (acceptable): {e}"),
        Ok(Err(e)) => panic!("unexpected error: {e}"),
        Err(e) => panic!("route_to did not answer in 10 s: {e}"),
    }
}

// ---- parsing of hand-built netlink messages ----

/// Serializes `payload` as one netlink message, as the kernel would send it.
fn datagram(payload: NetlinkPayload<RouteNetlinkMessage>) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.sequence_number = 1;
    let mut msg = NetlinkMessage::new(header, payload);
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

fn new_route(kind: NlRouteType, attributes: Vec<RouteAttribute>) -> Vec<u8> {
    let mut route = RouteMessage::default();
    route.header.address_family = AddressFamily::Inet;
    route.header.destination_prefix_length = 32;
    route.header.kind = kind;
    route.attributes = attributes;
    datagram(NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(
        route,
    )))
}

fn netlink_error(errno: i32) -> Vec<u8> {
    let mut err = ErrorMessage::default();
    err.code = NonZeroI32::new(-errno);
    datagram(NetlinkPayload::Error(err))
}

#[test]
fn parses_unicast_route_via_gateway() -> Result<(), Error> {
    let gw = Ipv4Addr::new(10, 231, 0, 1);
    let src = Ipv4Addr::new(10, 231, 0, 5);
    let bytes = new_route(
        NlRouteType::Unicast,
        vec![
            RouteAttribute::Table(254),
            RouteAttribute::Destination(RouteAddress::Inet(DST)),
            RouteAttribute::Oif(7),
            RouteAttribute::PrefSource(RouteAddress::Inet(src)),
            RouteAttribute::Gateway(RouteAddress::Inet(gw)),
            RouteAttribute::Uid(0),
        ],
    );
    let route = parse_reply(DST, &bytes)?;
    let expected = RouteInfo {
        destination: DST,
        route_type: RouteType::Unicast,
        interface: None,
        ifindex: Some(7),
        source: Some(src),
        gateway: Some(gw),
    };
    assert_eq!(route, Some(expected));
    Ok(())
}

#[test]
fn parses_local_route_without_gateway() -> Result<(), Error> {
    let bytes = new_route(
        NlRouteType::Local,
        vec![
            RouteAttribute::Destination(RouteAddress::Inet(DST)),
            RouteAttribute::Oif(1),
            RouteAttribute::PrefSource(RouteAddress::Inet(DST)),
        ],
    );
    let route = parse_reply(DST, &bytes)?.ok_or(Error::Closed)?;
    assert_eq!(route.route_type, RouteType::Local);
    assert_eq!(route.gateway, None);
    assert_eq!(route.source, Some(DST));
    assert_eq!(route.ifindex, Some(1));
    Ok(())
}

#[test]
fn kernel_errno_becomes_no_route() {
    for errno in [libc::ENETUNREACH, libc::EHOSTUNREACH, libc::EACCES] {
        match parse_reply(DST, &netlink_error(errno)) {
            Err(Error::NoRoute { dst, detail }) => {
                assert_eq!(dst, DST);
                let text = std::io::Error::from_raw_os_error(errno).to_string();
                assert!(detail.contains(&text), "{detail:?} lacks {text:?}");
            }
            other => panic!("errno {errno}: expected NoRoute, got {other:?}"),
        }
    }
}

#[test]
fn unusable_route_types_become_no_route() {
    for kind in [
        NlRouteType::Unreachable,
        NlRouteType::Prohibit,
        NlRouteType::BlackHole,
    ] {
        let bytes = new_route(
            kind,
            vec![RouteAttribute::Destination(RouteAddress::Inet(DST))],
        );
        assert!(
            matches!(parse_reply(DST, &bytes), Err(Error::NoRoute { .. })),
            "{kind:?}"
        );
    }
}

#[test]
fn ack_and_noop_are_not_answers() -> Result<(), Error> {
    assert_eq!(parse_reply(DST, &datagram(NetlinkPayload::Noop))?, None);
    assert_eq!(
        parse_reply(
            DST,
            &datagram(NetlinkPayload::Error(ErrorMessage::default()))
        )?,
        None
    );
    assert_eq!(parse_reply(DST, &[])?, None);
    Ok(())
}

#[test]
fn finds_route_after_other_messages_in_one_datagram() -> Result<(), Error> {
    let mut bytes = datagram(NetlinkPayload::Noop);
    bytes.extend(new_route(
        NlRouteType::Unicast,
        vec![RouteAttribute::Oif(3)],
    ));
    let route = parse_reply(DST, &bytes)?.ok_or(Error::Closed)?;
    assert_eq!(route.ifindex, Some(3));
    assert_eq!(route.destination, DST);
    Ok(())
}

#[test]
fn garbage_is_a_route_error_not_a_panic() {
    let mut truncated = new_route(NlRouteType::Unicast, vec![RouteAttribute::Oif(3)]);
    truncated.truncate(truncated.len() - 4);
    let inputs: [&[u8]; 3] = [&[1, 2, 3], &[0xff; 40], &truncated];
    for bytes in inputs {
        match parse_reply(DST, bytes) {
            Err(Error::Route { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::InvalidData)
            }
            other => panic!("{bytes:?}: expected Route error, got {other:?}"),
        }
    }
}

#[test]
fn display_reads_like_ip_route_get() {
    let route = RouteInfo {
        destination: Ipv4Addr::new(10, 0, 0, 2),
        route_type: RouteType::Unicast,
        interface: Some("eth0".into()),
        ifindex: Some(2),
        source: Some(Ipv4Addr::new(10, 0, 0, 1)),
        gateway: Some(Ipv4Addr::new(10, 0, 0, 1)),
    };
    assert_eq!(
        route.to_string(),
        "10.0.0.2 via 10.0.0.1 dev eth0 src 10.0.0.1 (unicast)"
    );
    let local = RouteInfo {
        destination: LOCALHOST,
        route_type: RouteType::Local,
        interface: None,
        ifindex: Some(1),
        source: None,
        gateway: None,
    };
    assert_eq!(local.to_string(), "127.0.0.1 dev #1 (local)");
}
