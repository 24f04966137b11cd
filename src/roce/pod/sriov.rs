//! Mode 2: the SR-IOV network device plugin's `PCIDEVICE_<PREFIX>_<RESOURCE>` (a list of PCI
//! addresses) and `PCIDEVICE_<PREFIX>_<RESOURCE>_INFO` (JSON keyed by PCI address), as
//! k8snetworkplumbingwg/sriov-network-device-plugin sets them (README.md "Pod device
//! information"; the `rdma` member from `pkg/infoprovider/rdmaInfoProvider.go`, with `rdma_dev`
//! since v3.10.0).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{devinfo, node_name, Found, Named, Node};

/// The variables' prefix.
pub(super) const PREFIX: &str = "PCIDEVICE_";

/// One resource per variable (a `_INFO` one in place of its plain list), leaving out the PCI
/// addresses already `described` (a variable naming only such is no resource).
pub(super) fn resources(
    vars: &[(String, String)],
    node: &Node<'_>,
    described: &BTreeSet<String>,
) -> Vec<Found> {
    let mut out = Vec::new();
    for (name, value) in vars.iter().filter(|(k, _)| k.starts_with(PREFIX)) {
        let plain = |list: &str| vars.iter().find(|(k, _)| k == list).map(|(_, v)| v);
        let found = if let Some(resource) = name.strip_suffix("_INFO") {
            match from_info(name, resource, value, node, described) {
                Some(found) => found,
                // Unreadable: the plain list, if there is one, stands in.
                None => match plain(resource) {
                    Some(list) => from_list(resource, list, node, described),
                    None => continue,
                },
            }
        } else if plain(&format!("{name}_INFO")).is_some() {
            continue;
        } else {
            from_list(name, value, node, described)
        };
        if !found.pcis.is_empty() {
            out.push(found);
        }
    }
    out
}

/// The resource key of a variable: `PCIDEVICE_NVIDIA_COM_SRIOV_ROCE` -> `NVIDIA_COM_SRIOV_ROCE`.
fn key(var: &str) -> &str {
    var.strip_prefix(PREFIX).unwrap_or(var)
}

/// `PCIDEVICE_..._INFO`: per PCI address, `rdma.rdma_dev`, else (older plugins) the device
/// plugin's device-info file, sysfs, or the uverbs node `rdma.uverbs` names; an address
/// without an `rdma` member is not an RDMA function. `None` when the value is not a JSON
/// object.
fn from_info(
    name: &str,
    resource: &str,
    value: &str,
    node: &Node<'_>,
    described: &BTreeSet<String>,
) -> Option<Found> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(value) else {
        log::warn!("{name} is not a JSON object; ignored");
        return None;
    };
    let mut found = plugin_resource(name);
    for (pci, info) in map.into_iter().filter(|(p, _)| !described.contains(p)) {
        found.pcis.push(pci.clone());
        let Some(rdma) = info.get("rdma").filter(|r| r.is_object()) else {
            continue;
        };
        found.rdma = true;
        let uverbs = rdma["uverbs"].as_str().and_then(node_name);
        if let Some(dev) = rdma["rdma_dev"].as_str() {
            found.devices.push(Named::direct(dev, uverbs));
            continue;
        }
        let mut named = devinfo::dp_devices(node, key(resource), &pci);
        if named.is_empty() {
            named = node.named_through_sysfs(&pci, ": no rdma_dev");
        }
        if named.is_empty() {
            if let Some(dev) = uverbs.as_deref().and_then(|n| node.device_of_node(n)) {
                named.push(Named {
                    via: Some(format!(
                        "{dev} from its uverbs node {}: no rdma_dev",
                        uverbs.as_deref().unwrap_or("?")
                    )),
                    device: dev,
                    node: None,
                });
            }
        }
        for mut n in named {
            n.node = n.node.or_else(|| uverbs.clone());
            found.devices.push(n);
        }
    }
    Some(found)
}

/// `PCIDEVICE_...=<pci>,<pci>` without `_INFO`: each address through the device plugin's
/// device-info file, else sysfs.
fn from_list(name: &str, value: &str, node: &Node<'_>, described: &BTreeSet<String>) -> Found {
    let mut found = plugin_resource(name);
    let pcis = value.split(',').map(str::trim);
    for pci in pcis.filter(|p| !p.is_empty() && !described.contains(*p)) {
        found.pcis.push(pci.to_owned());
        let mut named = devinfo::dp_devices(node, key(name), pci);
        if named.is_empty() {
            named = node.named_through_sysfs(pci, "");
        }
        found.devices.extend(named);
    }
    found
}

/// What the device plugin's variable `name` gives, before its addresses are read.
fn plugin_resource(name: &str) -> Found {
    Found {
        name: name.to_owned(),
        source: format!("SR-IOV device plugin ({name})"),
        pcis: Vec::new(),
        rdma: false,
        devices: Vec::new(),
    }
}
