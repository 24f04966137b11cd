//! The devices a Kubernetes pod was given, so that the GID choice looks only at them.
//!
//! In a pod, `/sys/class/infiniband` may list every RDMA device of the node, but only some are
//! the pod's. What the pod was given is read from its environment and files, mode by mode, in
//! this order; a PCI function is described once, by the first mode that names it:
//!
//! 1. **DRA SR-IOV driver** (`dra`): through CDI, per allocated VF `<dev>` (its PCI address
//!    with `:` and `.` as `_`), `SRIOVNETWORK_VF_DEVICE_<dev>=<pci>` and, when the VF is an
//!    RDMA one, `SRIOVNETWORK_<dev>_RDMA_DEVICE=mlx5_4` with `SRIOVNETWORK_<dev>_RDMA_UVERB=
//!    /dev/infiniband/uverbs4` and `SRIOVNETWORK_<dev>_RDMA_CM`; `SRIOVNETWORK_PCI_ADDRESSES`
//!    lists every VF of the pod. Source: k8snetworkplumbingwg/dra-driver-sriov,
//!    `pkg/devicestate/state.go` and `pkg/cdi/cdi.go` (the variables are in its code, not in its
//!    README). Each RDMA VF is a resource; a VF without the RDMA variables is not an RDMA one.
//! 2. **SR-IOV device plugin** (`sriov`): `PCIDEVICE_<PREFIX>_<RESOURCE>=<pci>,<pci>` and
//!    `PCIDEVICE_<PREFIX>_<RESOURCE>_INFO`, JSON keyed by PCI address with a `generic` member
//!    and, for an `isRdma` resource, an `rdma` member. Source:
//!    k8snetworkplumbingwg/sriov-network-device-plugin, README.md "Pod device information" and
//!    `pkg/infoprovider/rdmaInfoProvider.go`. Per PCI address of `_INFO`:
//!    - `"rdma": {"rdma_dev": "mlx5_4", "uverbs": "/dev/infiniband/uverbs4", ...}` (v3.10.0
//!      on) names the device;
//!    - an `rdma` member without `rdma_dev` (v3.6.0 to v3.9.0) names only the nodes: the device
//!      is the one the plugin's device-info file names (mode 3), else the one under
//!      `<sysfs>/bus/pci/devices/<pci>/infiniband/`, else the one whose uverbs node it names;
//!    - no `rdma` member: not an RDMA function (a vfio/DPDK VF), left out.
//!
//!    A plain list without `_INFO` (plugins before v3.6.0) is mapped the same way, the
//!    device-info file first, then sysfs. Each variable is a resource.
//! 3. **Device-info files** (`devinfo`, Device Information Spec 1.1.0,
//!    k8snetworkplumbingwg/device-info-spec `SPEC.md`), under `RDMA_CONTAINER_DEVINFO_ROOT`
//!    (default [`DEFAULT_DEVINFO_ROOT`], the node's directory, mounted into the pod read-only):
//!    `dp/<resource>-<deviceID>-device.json`, the device plugin's copy for every device of its
//!    pool (read for the PCI addresses of mode 2 only), and `cni/<network>-<sandbox>_<ifname>`,
//!    Multus' copy per attachment (k8snetworkplumbingwg/multus-cni `pkg/types/conf.go`), which
//!    counts when its PCI function's network interface is in this pod's namespace
//!    (`<sysfs>/bus/pci/devices/<pci>/net/`). `pci.rdma-device` names the device (older
//!    device plugins, before v3.7.0, leave it out: then sysfs maps the PCI address). Each CNI
//!    copy is a resource.
//! 4. **Multus network-status** (`multus`): the `k8s.v1.cni.cncf.io/network-status`
//!    annotation in the downward API file `RDMA_CONTAINER_NETWORK_STATUS` (default
//!    [`DEFAULT_NETWORK_STATUS`]); each network's `device-info` of type `pci` (Device
//!    Information Spec 1.1.0, section 6) names its PCI address and perhaps `rdma-device`, else
//!    the device is mapped through sysfs. Each network is a resource.
//! 5. **`/dev/infiniband` nodes**: with no resource at all (the RDMA shared device plugin passes
//!    only the selected device's `/dev/infiniband/uverbsN`), the devices whose uverbs node is in
//!    `RDMA_CONTAINER_DEV_ROOT/infiniband` (default `/dev`), told by
//!    `<sysfs>/class/infiniband_verbs/uverbsN/ibdev`.
//!
//! The rules ([`restrict`]):
//! - an explicit device (`--ib-dev`) skips all of this;
//! - each resource must name exactly one usable device (its uverbs node is in
//!   `/dev/infiniband`, when that can be told), or it is an error naming them all: the choice
//!   is never guessed;
//! - a resource that names no RDMA device at all and does not say it is an RDMA one (a
//!   vfio/DPDK VF next to the RDMA one) is left out, and said so;
//! - without resources, the devices whose uverbs node is present (mode 5); where that cannot be
//!   told, every device.
//!
//! [`PodView::device_source`] says which mode gave the device (`doctor`'s `device from:`). Only
//! files and the environment are read.

mod devinfo;
mod dra;
mod multus;
mod sriov;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{natural_cmp, GidTable};
use crate::{Error, Result};

/// Where a pod's Multus `network-status` annotation is looked for when
/// `RDMA_CONTAINER_NETWORK_STATUS` does not name a file: the downward API volume the SR-IOV
/// network operator's examples mount.
pub const DEFAULT_NETWORK_STATUS: &str = "/etc/podnetinfo/annotations";

/// Where the device-info files (Device Information Spec 1.1.0, section 4) are looked for when
/// `RDMA_CONTAINER_DEVINFO_ROOT` does not name a directory: their place on the node, which a
/// pod sees only through a read-only `hostPath` mount of it.
pub const DEFAULT_DEVINFO_ROOT: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// What the pod's environment says about its RDMA devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodView {
    /// Each resource a plugin named (a `PCIDEVICE_*` variable, a DRA VF, a device-info file,
    /// a Multus network) and the devices it gave, usable ones only (their uverbs node exists,
    /// when that can be told).
    pub resources: Vec<(String, Vec<String>)>,
    /// How each of `resources` was read, in the same order: the mode and what it read, e.g.
    /// `SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO)`.
    pub sources: Vec<String>,
    /// The resources that name no RDMA device (a vfio/DPDK VF): left out of the choice.
    pub not_rdma: Vec<String>,
    /// The devices whose uverbs node is in `/dev/infiniband`; `None` when that cannot be told
    /// (no `/dev/infiniband`, or sysfs does not say which node is which device).
    pub visible: Option<Vec<String>>,
}

impl PodView {
    /// Which mode gives the device (see the module's documentation), one line:
    /// `--ib-dev mlx5_4`, the sources of the resources, `/dev/infiniband nodes (mlx5_4)`, or
    /// `sysfs: every RDMA device` when nothing in the pod says which are its own.
    pub fn device_source(&self, explicit_device: Option<&str>) -> String {
        if let Some(dev) = explicit_device {
            return format!("--ib-dev {dev} (the pod's resources are not looked at)");
        }
        if !self.sources.is_empty() {
            let mut seen = Vec::new();
            for s in &self.sources {
                if !seen.contains(s) {
                    seen.push(s.clone());
                }
            }
            return seen.join("; ");
        }
        match &self.visible {
            Some(v) if v.is_empty() => "/dev/infiniband nodes (none)".to_owned(),
            Some(v) => format!("/dev/infiniband nodes ({})", v.join(", ")),
            None => "sysfs: every RDMA device (nothing in the pod names its own)".to_owned(),
        }
    }
}

/// Where to look: sysfs, `/dev`, the variables and the files.
#[derive(Debug, Clone)]
pub struct PodSources {
    /// Normally `/sys`.
    pub sysfs_root: PathBuf,
    /// Normally `/dev` (`RDMA_CONTAINER_DEV_ROOT`, for tests and the scripts' fake trees).
    pub dev_root: PathBuf,
    /// Normally [`DEFAULT_DEVINFO_ROOT`] (`RDMA_CONTAINER_DEVINFO_ROOT`).
    pub devinfo_root: PathBuf,
    /// The process's `PCIDEVICE_*` and `SRIOVNETWORK_*` variables.
    pub vars: Vec<(String, String)>,
    /// The network-status annotation file's text, when there is one.
    pub network_status: Option<String>,
}

impl PodSources {
    /// This process's view: its environment, `RDMA_CONTAINER_DEV_ROOT` (default `/dev`),
    /// `RDMA_CONTAINER_DEVINFO_ROOT` (default [`DEFAULT_DEVINFO_ROOT`]) and
    /// `RDMA_CONTAINER_NETWORK_STATUS` (default [`DEFAULT_NETWORK_STATUS`], read if present).
    pub fn from_env(sysfs_root: &Path) -> PodSources {
        let dev_root = std::env::var_os("RDMA_CONTAINER_DEV_ROOT")
            .map_or_else(|| PathBuf::from("/dev"), PathBuf::from);
        let devinfo_root = std::env::var_os("RDMA_CONTAINER_DEVINFO_ROOT")
            .map_or_else(|| PathBuf::from(DEFAULT_DEVINFO_ROOT), PathBuf::from);
        let status = std::env::var_os("RDMA_CONTAINER_NETWORK_STATUS")
            .map_or_else(|| PathBuf::from(DEFAULT_NETWORK_STATUS), PathBuf::from);
        PodSources {
            sysfs_root: sysfs_root.to_path_buf(),
            dev_root,
            devinfo_root,
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with(sriov::PREFIX) || k.starts_with(dra::PREFIX))
                .collect(),
            network_status: std::fs::read_to_string(status).ok(),
        }
    }

    /// What these sources say.
    pub fn view(&self) -> PodView {
        let node = Node {
            sysfs_root: &self.sysfs_root,
            devinfo_root: &self.devinfo_root,
            uverbs: uverbs_nodes(&self.sysfs_root),
        };
        let present = self.dev_root.join("infiniband");
        let visible = (present.is_dir() && !node.uverbs.is_empty()).then(|| {
            let mut v: Vec<String> = node
                .uverbs
                .iter()
                .filter(|(_, n)| present.join(n).exists())
                .map(|(dev, _)| dev.clone())
                .collect();
            v.sort_by(|a, b| natural_cmp(a, b));
            v
        });
        let usable = |dev: &str, n: Option<&str>| -> bool {
            if !present.is_dir() {
                return true;
            }
            match n
                .map(str::to_owned)
                .or_else(|| node.uverbs.get(dev).cloned())
            {
                Some(n) => present.join(n).exists(),
                None => true,
            }
        };

        let mut vars = self.vars.clone();
        vars.sort();
        let mut found = dra::resources(&vars);
        let mut described: BTreeSet<String> = found.iter().flat_map(|f| f.pcis.clone()).collect();
        // Every VF the DRA driver gave, RDMA or not, is described by mode 1.
        described.extend(dra::pci_addresses(&vars));
        let plugin = sriov::resources(&vars, &node, &described);
        for f in plugin {
            described.extend(f.pcis.iter().cloned());
            found.push(f);
        }
        for f in devinfo::cni_resources(&node, &described) {
            described.extend(f.pcis.iter().cloned());
            found.push(f);
        }
        if let Some(text) = &self.network_status {
            found.extend(multus::resources(text, &node, &described));
        }

        let mut view = PodView {
            visible,
            ..PodView::default()
        };
        for f in found {
            if f.devices.is_empty() && !f.rdma {
                log::info!(
                    "{} names no RDMA device: not an RDMA resource, left out",
                    f.name
                );
                view.not_rdma.push(f.name);
                continue;
            }
            let mut devices: Vec<String> = Vec::new();
            let mut how: Vec<String> = Vec::new();
            for d in &f.devices {
                if usable(&d.device, d.node.as_deref()) && !devices.contains(&d.device) {
                    devices.push(d.device.clone());
                }
                if let Some(via) = &d.via {
                    if !how.contains(via) {
                        how.push(via.clone());
                    }
                }
            }
            let source = if how.is_empty() {
                f.source
            } else {
                format!("{}: {}", f.source, how.join("; "))
            };
            view.resources.push((f.name, devices));
            view.sources.push(source);
        }
        view
    }
}

/// One resource as a mode read it, before the usable filter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    /// Its name in messages: `PCIDEVICE_..._INFO`, `SRIOVNETWORK_<dev>_RDMA_DEVICE`, ...
    name: String,
    /// The mode and what it read, e.g. `SR-IOV device plugin (PCIDEVICE_..._INFO)`.
    source: String,
    /// The PCI functions it describes (so that a later mode does not describe them again).
    pcis: Vec<String>,
    /// Whether it says it is an RDMA resource (an `rdma` member, a device name); one that does
    /// not is one only if it names a device.
    rdma: bool,
    /// The RDMA devices it names.
    devices: Vec<Named>,
}

/// A device a resource names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    /// The RDMA device (`mlx5_4`).
    device: String,
    /// Its uverbs node (`uverbs4`), when the resource names it.
    node: Option<String>,
    /// How it was found when the resource did not name it, e.g. `mlx5_4 from
    /// /sys/bus/pci/devices/0000:3b:00.2/infiniband`.
    via: Option<String>,
}

impl Named {
    /// A device the resource names itself.
    fn direct(device: &str, node: Option<String>) -> Named {
        Named {
            device: device.to_owned(),
            node,
            via: None,
        }
    }
}

/// The node's files the modes map through.
struct Node<'a> {
    sysfs_root: &'a Path,
    devinfo_root: &'a Path,
    /// `uverbsN` of each device.
    uverbs: BTreeMap<String, String>,
}

impl Node<'_> {
    /// `<sysfs>/bus/pci/devices/<pci>`.
    fn pci_dir(&self, pci: &str) -> PathBuf {
        self.sysfs_root.join("bus/pci/devices").join(pci)
    }

    /// The RDMA devices of PCI function `pci`: `<sysfs>/bus/pci/devices/<pci>/infiniband/*`.
    fn devices_of_pci(&self, pci: &str) -> Vec<String> {
        let mut v = list_dir(&self.pci_dir(pci).join("infiniband"));
        v.sort_by(|a, b| natural_cmp(a, b));
        v
    }

    /// The devices of `pci` through sysfs, each saying so.
    fn named_through_sysfs(&self, pci: &str, why: &str) -> Vec<Named> {
        let dir = self.pci_dir(pci).join("infiniband");
        self.devices_of_pci(pci)
            .into_iter()
            .map(|d| Named {
                via: Some(format!("{d} from {}{why}", dir.display())),
                device: d,
                node: None,
            })
            .collect()
    }

    /// Whether PCI function `pci` has a network interface in this namespace (sysfs shows a
    /// function's `net/` entries only in the namespace that holds them).
    fn has_netdev_here(&self, pci: &str) -> bool {
        !list_dir(&self.pci_dir(pci).join("net")).is_empty()
    }

    /// The device whose uverbs node is `node` (`uverbs4`).
    fn device_of_node(&self, node: &str) -> Option<String> {
        self.uverbs
            .iter()
            .find(|(_, n)| n.as_str() == node)
            .map(|(d, _)| d.clone())
    }
}

/// The names in a directory (none when it cannot be read).
fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// `uverbsN` for each device, from `<sysfs>/class/infiniband_verbs/uverbsN/ibdev`.
fn uverbs_nodes(sysfs_root: &Path) -> BTreeMap<String, String> {
    let dir = sysfs_root.join("class/infiniband_verbs");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let node = entry.file_name().to_string_lossy().into_owned();
        if let Ok(dev) = std::fs::read_to_string(entry.path().join("ibdev")) {
            out.insert(dev.trim().to_owned(), node);
        }
    }
    out
}

/// The file name of a device node path (`/dev/infiniband/uverbs4` -> `uverbs4`).
fn node_name(path: &str) -> Option<String> {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// Keeps the table's devices the pod was given (see the module's documentation); returns the
/// table to choose from and one line saying why, when it was narrowed. `explicit_device`
/// (`--ib-dev`) wins: nothing is narrowed.
///
/// # Errors
///
/// [`Error::AmbiguousDevice`] when a plugin resource names two or more usable devices, or
/// none of the table's.
pub fn restrict(
    table: GidTable,
    view: &PodView,
    explicit_device: Option<&str>,
) -> Result<(GidTable, Option<String>)> {
    if explicit_device.is_some() {
        return Ok((table, None));
    }
    let left_out = (!view.not_rdma.is_empty()).then(|| {
        format!(
            "; left out, naming no RDMA device: {}",
            view.not_rdma.join(", ")
        )
    });
    let (keep, why): (Vec<String>, String) = if view.resources.is_empty() {
        match &view.visible {
            Some(visible)
                if table
                    .devices()
                    .iter()
                    .any(|d| !visible.iter().any(|v| v == d)) =>
            {
                (visible.clone(), only_visible(visible))
            }
            _ => return Ok((table, None)),
        }
    } else {
        let mut keep = Vec::new();
        let mut said = Vec::new();
        for (resource, devices) in &view.resources {
            match devices.as_slice() {
                [one] => {
                    said.push(format!("{resource} gives {one}"));
                    keep.push(one.clone());
                }
                [] => {
                    return Err(Error::AmbiguousDevice(format!(
                        "{resource} names no RDMA device whose uverbs node is in /dev/infiniband; \
                         check the device plugin's resource, or name the device with --ib-dev"
                    )))
                }
                many => {
                    return Err(Error::AmbiguousDevice(format!(
                        "{resource} names {} RDMA devices ({}); name one with --ib-dev",
                        many.len(),
                        many.join(" and ")
                    )))
                }
            }
        }
        (keep, format!("device plugin: {}", said.join("; ")))
    };
    let why = why + left_out.as_deref().unwrap_or("");
    let narrowed = GidTable {
        entries: table
            .entries
            .into_iter()
            .filter(|e| keep.contains(&e.device))
            .collect(),
        ports: table
            .ports
            .into_iter()
            .filter(|p| keep.contains(&p.device))
            .collect(),
    };
    Ok((narrowed, Some(why)))
}

/// Why the choice considers only the devices whose uverbs node is in /dev/infiniband.
fn only_visible(visible: &[String]) -> String {
    if visible.is_empty() {
        return "none of the RDMA devices in sysfs has its uverbs node in /dev/infiniband"
            .to_owned();
    }
    format!(
        "only {} of the RDMA devices in sysfs have their uverbs node in /dev/infiniband",
        visible.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(dir: &Path) -> PodSources {
        PodSources {
            sysfs_root: dir.join("sys"),
            dev_root: dir.join("dev"),
            devinfo_root: dir.join("devinfo"),
            vars: Vec::new(),
            network_status: None,
        }
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap_or(dir)).unwrap_or_default();
        std::fs::write(&p, text).unwrap_or_default();
    }

    const INFO: &str = r#"{"0000:3b:00.2":{"generic":{"deviceID":"0000:3b:00.2"},"rdma":{"rdma_dev":"mlx5_4","uverbs":"/dev/infiniband/uverbs4","rdma_cm":"/dev/infiniband/rdma_cm"}}}"#;

    #[test]
    fn sriov_info_names_the_device_and_two_devices_are_an_error_naming_both() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = sources(dir.path());
        s.vars = vec![("PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO".into(), INFO.into())];
        let view = s.view();
        assert_eq!(
            view.resources,
            vec![(
                "PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO".into(),
                vec!["mlx5_4".into()]
            )]
        );
        assert_eq!(
            view.device_source(None),
            "SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO)"
        );
        s.vars = vec![(
            "PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO".into(),
            r#"{"0000:3b:00.2":{"rdma":{"rdma_dev":"mlx5_4"}},"0000:3b:00.3":{"rdma":{"rdma_dev":"mlx5_5"}}}"#.into(),
        )];
        match restrict(GidTable::default(), &s.view(), None) {
            Err(Error::AmbiguousDevice(m)) => {
                assert!(m.contains("mlx5_4 and mlx5_5"), "{m}");
                assert!(m.contains("PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO"), "{m}");
            }
            other => panic!("expected AmbiguousDevice, got {other:?}"),
        }
        // An explicit device wins.
        assert!(restrict(GidTable::default(), &s.view(), Some("mlx5_5")).is_ok());
        assert!(s
            .view()
            .device_source(Some("mlx5_5"))
            .starts_with("--ib-dev mlx5_5"));
    }

    #[test]
    fn a_plain_pcidevice_list_and_network_status_map_pci_addresses_through_sysfs() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        write(
            dir.path(),
            "sys/bus/pci/devices/0000:3b:00.3/infiniband/mlx5_5/x",
            "",
        );
        let mut s = sources(dir.path());
        s.vars = vec![("PCIDEVICE_EXAMPLE_COM_VF".into(), "0000:3b:00.3".into())];
        assert_eq!(s.view().resources[0].1, vec!["mlx5_5".to_owned()]);
        // The downward API file: key="Go-quoted JSON".
        let status = r#"[{"name":"default/roce","interface":"net1","device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.3"}}},{"name":"cbr0","interface":"eth0"}]"#;
        let line = format!(
            "kubernetes.io/config.seen=\"x\"\n{}={}\n",
            multus::NETWORK_STATUS_KEY,
            serde_json::to_string(status).unwrap_or_default()
        );
        s.vars.clear();
        s.network_status = Some(line);
        let view = s.view();
        assert_eq!(
            view.resources,
            vec![(
                "Multus network default/roce (0000:3b:00.3)".into(),
                vec!["mlx5_5".into()]
            )]
        );
        assert!(
            view.device_source(None)
                .starts_with("Multus network-status (default/roce"),
            "{view:?}"
        );
    }

    #[test]
    fn a_function_is_described_once_by_the_first_mode_naming_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        write(
            dir.path(),
            "sys/bus/pci/devices/0000:3b:00.2/infiniband/mlx5_4/x",
            "",
        );
        let mut s = sources(dir.path());
        s.vars = vec![("PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO".into(), INFO.into())];
        let status = r#"[{"name":"default/roce","interface":"net1","device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2"}}}]"#;
        s.network_status = Some(status.into());
        let view = s.view();
        assert_eq!(view.resources.len(), 1, "{view:?}");
        assert_eq!(view.resources[0].0, "PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO");
    }

    #[test]
    fn a_resource_naming_no_rdma_device_is_left_out_and_said_so() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = sources(dir.path());
        s.vars = vec![
            ("PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO".into(), INFO.into()),
            (
                "PCIDEVICE_INTEL_COM_DPDK_INFO".into(),
                r#"{"0000:3b:02.6":{"generic":{"deviceID":"0000:3b:02.6"},"vfio":{"dev-mount":"/dev/vfio/169","mount":"/dev/vfio/vfio"}}}"#.into(),
            ),
            ("PCIDEVICE_INTEL_COM_DPDK".into(), "0000:3b:02.6".into()),
        ];
        let view = s.view();
        assert_eq!(
            view.not_rdma,
            vec!["PCIDEVICE_INTEL_COM_DPDK_INFO".to_owned()]
        );
        assert_eq!(view.resources.len(), 1, "{view:?}");
        let (_, why) = restrict(GidTable::default(), &view, None).unwrap_or_else(|e| panic!("{e}"));
        let why = why.unwrap_or_default();
        assert!(
            why.contains("PCIDEVICE_NVIDIA_COM_SRIOV_VF_INFO gives mlx5_4"),
            "{why}"
        );
        assert!(
            why.contains("left out, naming no RDMA device: PCIDEVICE_INTEL_COM_DPDK_INFO"),
            "{why}"
        );
    }

    #[test]
    fn dra_rdma_vfs_are_resources_and_a_vfio_vf_is_not_rdma() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = sources(dir.path());
        let vars = [
            ("SRIOVNETWORK_VF_DEVICE_0000_3b_00_3", "0000:3b:00.3"),
            (
                "SRIOVNETWORK_0000_3b_00_3_RDMA_UVERB",
                "/dev/infiniband/uverbs5",
            ),
            ("SRIOVNETWORK_0000_3b_00_3_RDMA_DEVICE", "mlx5_5"),
            ("SRIOVNETWORK_VF_DEVICE_0000_3b_02_4", "0000:3b:02.4"),
            ("SRIOVNETWORK_0000_3b_02_4_VFIO_DEVICE", "/dev/vfio/142"),
            ("SRIOVNETWORK_PCI_ADDRESSES", "0000:3b:00.3,0000:3b:02.4"),
            // The same VF as a device plugin would name it: described by DRA already.
            ("PCIDEVICE_EXAMPLE_COM_VF", "0000:3b:00.3"),
        ];
        s.vars = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let view = s.view();
        assert_eq!(
            view.resources,
            vec![(
                "SRIOVNETWORK_0000_3b_00_3_RDMA_DEVICE".into(),
                vec!["mlx5_5".into()]
            )]
        );
        assert_eq!(
            view.not_rdma,
            vec!["SRIOVNETWORK_VF_DEVICE_0000_3b_02_4".to_owned()]
        );
        assert_eq!(
            view.device_source(None),
            "DRA SR-IOV driver (SRIOVNETWORK_0000_3b_00_3_RDMA_DEVICE)"
        );
    }

    #[test]
    fn a_plain_list_reads_the_device_plugins_device_info_file_first() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        write(
            dir.path(),
            "devinfo/dp/example.com-roce-rail-0000:3b:00.3-device.json",
            r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.3","rdma-device":"mlx5_5"}}"#,
        );
        // Another resource's file for the same address is not this resource's.
        write(
            dir.path(),
            "devinfo/dp/example.com-other-0000:3b:00.3-device.json",
            r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.3","rdma-device":"mlx5_9"}}"#,
        );
        let mut s = sources(dir.path());
        s.vars = vec![(
            "PCIDEVICE_EXAMPLE_COM_ROCE-RAIL".into(),
            "0000:3b:00.3".into(),
        )];
        let view = s.view();
        assert_eq!(view.resources[0].1, vec!["mlx5_5".to_owned()], "{view:?}");
        assert!(
            view.sources[0].contains("example.com-roce-rail-0000:3b:00.3-device.json"),
            "{view:?}"
        );
    }

    #[test]
    fn only_devices_whose_uverbs_node_exists_are_visible() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        write(
            dir.path(),
            "sys/class/infiniband_verbs/uverbs0/ibdev",
            "mlx5_0\n",
        );
        write(
            dir.path(),
            "sys/class/infiniband_verbs/uverbs4/ibdev",
            "mlx5_4\n",
        );
        write(dir.path(), "dev/infiniband/uverbs4", "");
        let view = sources(dir.path()).view();
        assert_eq!(view.visible, Some(vec!["mlx5_4".to_owned()]));
        assert_eq!(view.device_source(None), "/dev/infiniband nodes (mlx5_4)");
        // Without /dev/infiniband nothing can be told: nothing is narrowed.
        std::fs::remove_dir_all(dir.path().join("dev")).unwrap_or_default();
        let view = sources(dir.path()).view();
        assert_eq!(view.visible, None);
        assert!(view
            .device_source(None)
            .starts_with("sysfs: every RDMA device"));
    }
}
