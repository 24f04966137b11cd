//! Mode 3: device-info files, Device Information Spec 1.1.0
//! (k8snetworkplumbingwg/device-info-spec `SPEC.md`, sections 3 and 4): JSON objects
//! `{"type": "pci", "version": "1.1.0", "pci": {"pci-address": ..., "rdma-device": ...}}`.
//!
//! - `<root>/dp/<resource>-<deviceID>-device.json`: the device plugin's copy, `/` of the
//!   resource name as `-` (k8snetworkplumbingwg/network-attachment-definition-client
//!   `pkg/utils/cniconfig.go`), written for every device of the pool, so read here only for the
//!   PCI addresses the pod's `PCIDEVICE_*` variables name. The SR-IOV device plugin writes
//!   `rdma-device` for an `isRdma` resource since v3.7.0 (`pkg/netdevice/netResourcePool.go`).
//! - `<root>/cni/<network>-<sandbox ID>_<ifname>`: Multus' copy per attachment
//!   (k8snetworkplumbingwg/multus-cni `pkg/types/conf.go`), for every pod of the node, so it
//!   counts only when its PCI function's network interface is in this namespace.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{list_dir, Found, Named, Node};

/// The PCI address and RDMA device(s) of a device-info file of type `pci`.
fn read_pci(path: &Path) -> Option<(String, Vec<String>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| log::warn!("{}: not a device-info file: {e}", path.display()))
        .ok()?;
    if v["type"].as_str() != Some("pci") {
        return None;
    }
    let pci = v["pci"]["pci-address"].as_str()?.to_owned();
    // The device plugin joins several with commas.
    let rdma = v["pci"]["rdma-device"]
        .as_str()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
        .collect();
    Some((pci, rdma))
}

/// A resource name as the variable spells it: upper case, every other character `_`.
fn normalized(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The RDMA devices the device plugin's device-info file of `pci` in the resource whose
/// variable key is `key` (`NVIDIA_COM_SRIOV_ROCE`) names.
pub(super) fn dp_devices(node: &Node<'_>, key: &str, pci: &str) -> Vec<Named> {
    let dir = node.devinfo_root.join("dp");
    let suffix = format!("-{}-device.json", pci.replace('/', "-"));
    let key = normalized(key);
    let mut files: Vec<String> = list_dir(&dir)
        .into_iter()
        .filter(|f| {
            f.strip_suffix(&suffix)
                .is_some_and(|resource| normalized(resource) == key)
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let path = dir.join(&f);
        let Some((at, devices)) = read_pci(&path) else {
            continue;
        };
        if at != pci {
            log::warn!("{}: names {at}, not {pci}; ignored", path.display());
            continue;
        }
        out.extend(devices.into_iter().map(|d| Named {
            via: Some(format!("{d} from {}", path.display())),
            device: d,
            node: None,
        }));
    }
    out
}

/// One resource per CNI copy whose PCI function has its network interface in this namespace
/// and is not `described` already.
pub(super) fn cni_resources(
    node: &Node<'_>,
    described: &std::collections::BTreeSet<String>,
) -> Vec<Found> {
    let dir: PathBuf = node.devinfo_root.join("cni");
    let mut files = list_dir(&dir);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let path = dir.join(&f);
        let Some((pci, devices)) = read_pci(&path) else {
            continue;
        };
        if described.contains(&pci) || !node.has_netdev_here(&pci) {
            continue;
        }
        let rdma = !devices.is_empty();
        let devices = if rdma {
            devices.iter().map(|d| Named::direct(d, None)).collect()
        } else {
            node.named_through_sysfs(&pci, ": no rdma-device")
        };
        out.push(Found {
            name: format!("device-info file cni/{f} ({pci})"),
            source: format!("device-info file {}", path.display()),
            pcis: vec![pci],
            rdma,
            devices,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_match_their_variable() {
        assert_eq!(normalized("nvidia.com-sriov_roce"), "NVIDIA_COM_SRIOV_ROCE");
        assert_eq!(normalized("example.com-roce-rail"), "EXAMPLE_COM_ROCE_RAIL");
    }
}
