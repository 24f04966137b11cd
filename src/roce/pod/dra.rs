//! Mode 1: the variables the DRA SR-IOV driver (k8snetworkplumbingwg/dra-driver-sriov, which
//! NVIDIA's network operator ships) sets through CDI. Per prepared VF, `<dev>` being the DRA
//! device name (its PCI address with `:` and `.` as `-`) with `-` as `_`
//! (`pkg/devicestate/discovery.go`, `pkg/devicestate/state.go`):
//! `SRIOVNETWORK_VF_DEVICE_<dev>=<pci>` and, for an RDMA-capable VF, one
//! `SRIOVNETWORK_<dev>_RDMA_{UVERB,UMAD,ISSM,CM}=<node>` per character device and
//! `SRIOVNETWORK_<dev>_RDMA_DEVICE=<device>`; per pod, `SRIOVNETWORK_PCI_ADDRESSES=<pci>,...`
//! (`pkg/cdi/cdi.go`). The driver's README does not list them.

use super::{node_name, Found, Named};

/// The variables' prefix.
pub(super) const PREFIX: &str = "SRIOVNETWORK_";

/// The suffix of the variable naming a VF's RDMA device.
const RDMA_DEVICE: &str = "_RDMA_DEVICE";

/// The prefix of the variable naming a VF's PCI address.
const VF_DEVICE: &str = "SRIOVNETWORK_VF_DEVICE_";

fn var<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
    vars.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// One resource per VF: an RDMA one names its device (`SRIOVNETWORK_<dev>_RDMA_DEVICE`), any
/// other is not an RDMA function.
pub(super) fn resources(vars: &[(String, String)]) -> Vec<Found> {
    let mut out = Vec::new();
    let mut rdma_devs = Vec::new();
    for (name, value) in vars {
        let Some(dev) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_suffix(RDMA_DEVICE))
            .filter(|d| !d.is_empty())
        else {
            continue;
        };
        rdma_devs.push(dev.to_owned());
        let uverbs = var(vars, &format!("{PREFIX}{dev}_RDMA_UVERB")).and_then(node_name);
        out.push(Found {
            name: name.clone(),
            source: format!("DRA SR-IOV driver ({name})"),
            pcis: var(vars, &format!("{VF_DEVICE}{dev}"))
                .map(str::to_owned)
                .into_iter()
                .collect(),
            rdma: true,
            devices: value
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(|d| Named::direct(d, uverbs.clone()))
                .collect(),
        });
    }
    for (name, pci) in vars {
        let Some(dev) = name.strip_prefix(VF_DEVICE) else {
            continue;
        };
        if !rdma_devs.iter().any(|d| d == dev) {
            out.push(Found {
                name: name.clone(),
                source: format!("DRA SR-IOV driver ({name})"),
                pcis: vec![pci.clone()],
                rdma: false,
                devices: Vec::new(),
            });
        }
    }
    out
}

/// Every VF the driver gave the pod (`SRIOVNETWORK_PCI_ADDRESSES`).
pub(super) fn pci_addresses(vars: &[(String, String)]) -> Vec<String> {
    var(vars, &format!("{PREFIX}PCI_ADDRESSES"))
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}
