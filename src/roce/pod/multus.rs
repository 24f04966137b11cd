//! Mode 4: Multus' `k8s.v1.cni.cncf.io/network-status` annotation, a JSON list with one
//! object per attached network (k8snetworkplumbingwg/multus-cni `docs/quickstart.md`), whose
//! `device-info` (Device Information Spec 1.1.0, section 6) names a PCI function. Read from the
//! downward API file (one `key="Go-quoted value"` line per annotation) or as the bare list.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Found, Named, Node};

/// The annotation's key.
pub(super) const NETWORK_STATUS_KEY: &str = "k8s.v1.cni.cncf.io/network-status";

/// One resource per network with a `device-info` of type `pci` whose PCI address is not
/// `described` already: its `rdma-device`, else the function's devices in sysfs.
pub(super) fn resources(text: &str, node: &Node<'_>, described: &BTreeSet<String>) -> Vec<Found> {
    network_status_pci(text)
        .into_iter()
        .filter(|(_, pci, _)| !described.contains(pci))
        .map(|(network, pci, rdma)| {
            let devices: Vec<Named> = match &rdma {
                Some(list) => list
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(|d| Named::direct(d, None))
                    .collect(),
                None => node.named_through_sysfs(&pci, ""),
            };
            Found {
                name: format!("Multus network {network} ({pci})"),
                source: format!("Multus network-status ({network} {pci})"),
                pcis: vec![pci],
                rdma: rdma.is_some(),
                devices,
            }
        })
        .collect()
}

/// (network name, PCI address, RDMA device if named) of each `device-info` of type `pci` in a
/// network-status annotation: the downward API's `key="escaped JSON"` lines, or the JSON list
/// itself.
fn network_status_pci(text: &str) -> Vec<(String, String, Option<String>)> {
    let json = if text.trim_start().starts_with('[') {
        Some(text.to_owned())
    } else {
        text.lines()
            .find_map(|l| l.strip_prefix(NETWORK_STATUS_KEY)?.strip_prefix('='))
            .and_then(|quoted| serde_json::from_str::<String>(quoted.trim()).ok())
    };
    let Some(Value::Array(networks)) = json.and_then(|j| serde_json::from_str(&j).ok()) else {
        return Vec::new();
    };
    networks
        .iter()
        .filter_map(|n| {
            let info = &n["device-info"];
            let pci = info["pci"]["pci-address"].as_str()?;
            (info["type"].as_str() == Some("pci")).then(|| {
                (
                    n["name"].as_str().unwrap_or("?").to_owned(),
                    pci.to_owned(),
                    info["pci"]["rdma-device"].as_str().map(str::to_owned),
                )
            })
        })
        .collect()
}
