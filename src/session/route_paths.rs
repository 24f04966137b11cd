//! A session's paths beyond the bootstrap connection's (`--paths`): which addresses each runs
//! between, by the same rule as the bootstrap path (docs/design.md, "Several paths").
//!
//! Rules kept here:
//! - path 0 is the bootstrap connection's: its own local and peer addresses, never listed;
//! - the client names the server's addresses ([`Config::paths`]); one equal to the bootstrap
//!   peer, or named twice, is the same path. For each other one the kernel's route gives the
//!   client's source, and the source's interface is where its RoCE GID lives, as for path 0;
//! - a path that leaves from path 0's source is allowed (tcp lanes to another address of the
//!   server) but said: on RDMA its lanes share path 0's device and link;
//! - every path carries at least one lane: more paths than `--qps` is a configuration error;
//! - the server runs each path from the address the client named, which must be one of its
//!   own (a loopback one only for a client on this host; else it refuses the client, who is
//!   told why), toward the client's source for it. The client's source must be what the
//!   server sees: a path through NAT is not supported (its tcp lanes would be refused as
//!   strangers);
//! - a server that names one device (`-d`, `-i`, `-x`) refuses a client's extra paths.

use std::net::Ipv4Addr;

use crate::config::Config;
use crate::net::iface::{ipv4_addresses, path_info, PathInfo};
use crate::net::route;
use crate::proto::PathPair;
use crate::{Error, Result};

/// The client's extra paths, in the order named: the pairs its hello carries and this end's
/// route facts for each.
pub(super) fn client_paths(
    config: &Config,
    bootstrap: &PathInfo,
) -> Result<(Vec<PathPair>, Vec<PathInfo>)> {
    let mut servers: Vec<Ipv4Addr> = Vec::new();
    for &addr in &config.paths {
        if addr != bootstrap.peer && !servers.contains(&addr) {
            servers.push(addr);
        }
    }
    if servers.len() >= usize::from(config.qps) {
        return Err(Error::InvalidConfig(format!(
            "{} paths (the bootstrap connection's to {} and --paths {}) need at least as many \
             queue pairs, got --qps {}: each path carries at least one",
            servers.len() + 1,
            bootstrap.peer,
            join(&servers),
            config.qps
        )));
    }
    let mut pairs = Vec::with_capacity(servers.len());
    let mut infos = Vec::with_capacity(servers.len());
    for server in servers {
        let route = route::route_to(server)?;
        let client = route.source.ok_or_else(|| Error::NoRoute {
            dst: server,
            detail: "the route names no source address for this host (--paths)".to_owned(),
        })?;
        if client == bootstrap.source {
            log::warn!(
                "the path to {server} leaves from {client}, as the bootstrap connection's does: \
                 on RDMA its queue pairs share that device and link (a path of its own needs a \
                 source address of its own)"
            );
        }
        pairs.push(PathPair { client, server });
        infos.push(path_info(client, server));
    }
    Ok((pairs, infos))
}

/// The server's side of the client's extra paths: this end's route facts for each, after
/// checking that every server address is one of this host's.
///
/// # Errors
/// [`Error::Refused`] when a path names an address this host does not have, or this server
/// names one device;
/// [`Error::InterfaceAddrs`] when the addresses cannot be listed.
pub(super) fn server_paths(pairs: &[PathPair], config: &Config) -> Result<Vec<PathInfo>> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(asked) = config.overrides.requested() {
        return Err(Error::Refused(format!(
            "this server names one device ({asked}), so it cannot run {} more path(s) \
             (--paths: each path runs on the device its own route gives)",
            pairs.len()
        )));
    }
    let ours = ipv4_addresses()?;
    pairs
        .iter()
        .enumerate()
        .map(|(i, pair)| {
            // 127/8 is this host's for a client on this host only (a remote client naming
            // it would point the server at its own loopback).
            let owned = if pair.server.is_loopback() {
                pair.client.is_loopback()
            } else {
                ours.iter().any(|a| a.address == pair.server)
            };
            if !owned {
                return Err(Error::Refused(format!(
                    "path {}: {} is not an address of this server (--paths names the server's \
                     own addresses)",
                    i + 1,
                    pair.server
                )));
            }
            Ok(path_info(pair.server, pair.client))
        })
        .collect()
}

fn join(addrs: &[Ipv4Addr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bootstrap() -> PathInfo {
        path_info(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST)
    }

    /// The bootstrap peer and repeats are the same path; 127.0.0.2 is a path of its own
    /// (reached from 127.0.0.1, which is said, not refused).
    #[test]
    fn the_bootstrap_address_and_repeats_are_one_path() {
        let config = Config::default().with_qps(2).with_paths(vec![
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::new(127, 0, 0, 2),
            Ipv4Addr::new(127, 0, 0, 2),
        ]);
        let (pairs, infos) = client_paths(&config, &bootstrap()).unwrap();
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].server, Ipv4Addr::new(127, 0, 0, 2));
        assert!(pairs[0].client.is_loopback());
        assert_eq!(infos[0].peer, Ipv4Addr::new(127, 0, 0, 2));
    }

    /// Each path carries a lane: two paths on one queue pair is refused, naming both.
    #[test]
    fn more_paths_than_queue_pairs_is_a_configuration_error() {
        let config = Config::default()
            .with_qps(1)
            .with_paths(vec![Ipv4Addr::new(127, 0, 0, 2)]);
        let e = client_paths(&config, &bootstrap()).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
        assert!(e.to_string().contains("2 paths"), "{e}");
        assert!(e.to_string().contains("127.0.0.2"), "{e}");
    }

    /// The server runs a path only from an address of its own.
    #[test]
    fn a_server_refuses_a_path_to_an_address_it_does_not_have() {
        let ours = PathPair {
            client: Ipv4Addr::LOCALHOST,
            server: Ipv4Addr::new(127, 0, 0, 3),
        };
        // 192.0.2.0/24 is TEST-NET-1: no host has it.
        let foreign = PathPair {
            client: Ipv4Addr::LOCALHOST,
            server: Ipv4Addr::new(192, 0, 2, 7),
        };
        let infos = server_paths(&[ours], &Config::default()).unwrap();
        assert_eq!(infos[0].source, Ipv4Addr::new(127, 0, 0, 3));
        assert_eq!(infos[0].peer, Ipv4Addr::LOCALHOST);
        let e = server_paths(&[ours, foreign], &Config::default()).unwrap_err();
        assert!(matches!(e, Error::Refused(_)), "{e}");
        assert!(e.to_string().contains("path 2: 192.0.2.7"), "{e}");
        // Loopback is ours only for a client on this host.
        let remote = PathPair {
            client: Ipv4Addr::new(192, 0, 2, 8),
            server: Ipv4Addr::LOCALHOST,
        };
        let e = server_paths(&[remote], &Config::default()).unwrap_err();
        assert!(e.to_string().contains("path 1: 127.0.0.1"), "{e}");
        // A server that names one device runs no extra path.
        let mut pinned = Config::default();
        pinned.overrides.device = Some("mlx5_0".into());
        let e = server_paths(&[ours], &pinned).unwrap_err();
        assert!(
            e.to_string().contains("names one device (--ib-dev mlx5_0)"),
            "{e}"
        );
    }
}
