//! The devices a Kubernetes pod was given, so that the GID choice looks only at them.
//!
//! In a pod, `/sys/class/infiniband` lists every RDMA device of the node, but only some are
//! the pod's:
//! - the SR-IOV device plugin sets `PCIDEVICE_<PREFIX>_<RESOURCE>_INFO`, JSON keyed by PCI
//!   address whose `rdma` member names the device (`"rdma_dev": "mlx5_4"`) and its node
//!   (`"uverbs": "/dev/infiniband/uverbs4"`); older plugins set only
//!   `PCIDEVICE_<PREFIX>_<RESOURCE>=<pci>,<pci>`;
//! - Multus' `network-status` annotation (mounted with the downward API) has a `device-info`
//!   per secondary network, whose `pci` member names the PCI address (and `rdma-device`);
//! - the RDMA shared device plugin passes only the selected device's `/dev/infiniband/uverbsN`.
//!
//! [`restrict`] keeps the devices a plugin named (each resource must name exactly one usable
//! device, or it is an error naming them all), otherwise the devices whose uverbs node exists
//! in `/dev/infiniband`; an explicit `--ib-dev` skips all of this. Only files and the
//! environment are read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{natural_cmp, GidTable};
use crate::{Error, Result};

/// Where a pod's Multus `network-status` annotation is looked for when
/// `RDMA_CONTAINER_NETWORK_STATUS` does not name a file: the downward API volume the SR-IOV
/// network operator's examples mount.
pub const DEFAULT_NETWORK_STATUS: &str = "/etc/podnetinfo/annotations";

/// The annotation's key.
const NETWORK_STATUS_KEY: &str = "k8s.v1.cni.cncf.io/network-status";

/// What the pod's environment says about its RDMA devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodView {
    /// Each resource a plugin named (a `PCIDEVICE_*` variable or a Multus network) and the
    /// devices it gave, usable ones only (their uverbs node exists, when that can be told).
    pub resources: Vec<(String, Vec<String>)>,
    /// The devices whose uverbs node is in `/dev/infiniband`; `None` when that cannot be told
    /// (no `/dev/infiniband`, or sysfs does not say which node is which device).
    pub visible: Option<Vec<String>>,
}

/// Where to look: sysfs, `/dev`, the variables and the network-status file.
#[derive(Debug, Clone)]
pub struct PodSources {
    /// Normally `/sys`.
    pub sysfs_root: PathBuf,
    /// Normally `/dev` (`RDMA_CONTAINER_DEV_ROOT`, for tests and the scripts' fake trees).
    pub dev_root: PathBuf,
    /// The process's `PCIDEVICE_*` variables.
    pub vars: Vec<(String, String)>,
    /// The network-status annotation file's text, when there is one.
    pub network_status: Option<String>,
}

impl PodSources {
    /// This process's view: its environment, `RDMA_CONTAINER_DEV_ROOT` (default `/dev`) and
    /// `RDMA_CONTAINER_NETWORK_STATUS` (default [`DEFAULT_NETWORK_STATUS`], read if present).
    pub fn from_env(sysfs_root: &Path) -> PodSources {
        let dev_root = std::env::var_os("RDMA_CONTAINER_DEV_ROOT")
            .map_or_else(|| PathBuf::from("/dev"), PathBuf::from);
        let status = std::env::var_os("RDMA_CONTAINER_NETWORK_STATUS")
            .map_or_else(|| PathBuf::from(DEFAULT_NETWORK_STATUS), PathBuf::from);
        PodSources {
            sysfs_root: sysfs_root.to_path_buf(),
            dev_root,
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("PCIDEVICE_"))
                .collect(),
            network_status: std::fs::read_to_string(status).ok(),
        }
    }

    /// What these sources say.
    pub fn view(&self) -> PodView {
        let nodes = self.uverbs_nodes();
        let present = self.dev_root.join("infiniband");
        let visible = (present.is_dir() && !nodes.is_empty()).then(|| {
            let mut v: Vec<String> = nodes
                .iter()
                .filter(|(_, node)| present.join(node).exists())
                .map(|(dev, _)| dev.clone())
                .collect();
            v.sort_by(|a, b| natural_cmp(a, b));
            v
        });
        let usable = |dev: &str, node: Option<&str>| -> bool {
            if !present.is_dir() {
                return true;
            }
            match node.map(str::to_owned).or_else(|| nodes.get(dev).cloned()) {
                Some(node) => present.join(node).exists(),
                None => true,
            }
        };
        let mut resources = Vec::new();
        let mut vars = self.vars.clone();
        vars.sort();
        for (name, value) in &vars {
            let devices: Vec<(String, Option<String>)> = if name.ends_with("_INFO") {
                self.devices_of_info(value)
            } else if vars.iter().any(|(k, _)| *k == format!("{name}_INFO")) {
                continue;
            } else {
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .flat_map(|pci| self.devices_of_pci(pci))
                    .map(|d| (d, None))
                    .collect()
            };
            let mut usable_devices: Vec<String> = devices
                .iter()
                .filter(|(d, node)| usable(d, node.as_deref()))
                .map(|(d, _)| d.clone())
                .collect();
            usable_devices.dedup();
            resources.push((name.clone(), usable_devices));
        }
        if let Some(text) = &self.network_status {
            for (network, pci, rdma) in network_status_pci(text) {
                let devices = rdma.map_or_else(|| self.devices_of_pci(&pci), |d| vec![d]);
                let devices = devices.into_iter().filter(|d| usable(d, None)).collect();
                resources.push((format!("Multus network {network} ({pci})"), devices));
            }
        }
        PodView { resources, visible }
    }

    /// `uverbsN` for each device, from `<sysfs>/class/infiniband_verbs/uverbsN/ibdev`.
    fn uverbs_nodes(&self) -> BTreeMap<String, String> {
        let dir = self.sysfs_root.join("class/infiniband_verbs");
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let node = entry.file_name().to_string_lossy().into_owned();
            if let Ok(dev) = std::fs::read_to_string(entry.path().join("ibdev")) {
                out.insert(dev.trim().to_owned(), node);
            }
        }
        out
    }

    /// The RDMA devices of PCI function `pci`: `<sysfs>/bus/pci/devices/<pci>/infiniband/*`.
    fn devices_of_pci(&self, pci: &str) -> Vec<String> {
        let dir = self
            .sysfs_root
            .join("bus/pci/devices")
            .join(pci)
            .join("infiniband");
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort_by(|a, b| natural_cmp(a, b));
        v
    }

    /// The devices (and uverbs node names) a `PCIDEVICE_*_INFO` value names.
    fn devices_of_info(&self, value: &str) -> Vec<(String, Option<String>)> {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(value) else {
            log::warn!("a PCIDEVICE_*_INFO variable is not a JSON object; ignored");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (pci, info) in map {
            let rdma = &info["rdma"];
            let node = rdma["uverbs"]
                .as_str()
                .and_then(|p| Path::new(p).file_name())
                .map(|n| n.to_string_lossy().into_owned());
            match rdma["rdma_dev"].as_str() {
                Some(dev) => out.push((dev.to_owned(), node)),
                None => out.extend(self.devices_of_pci(&pci).into_iter().map(|d| (d, None))),
            }
        }
        out
    }
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
            "kubernetes.io/config.seen=\"x\"\n{NETWORK_STATUS_KEY}={}\n",
            serde_json::to_string(status).unwrap_or_default()
        );
        s.vars.clear();
        s.network_status = Some(line);
        assert_eq!(
            s.view().resources,
            vec![(
                "Multus network default/roce (0000:3b:00.3)".into(),
                vec!["mlx5_5".into()]
            )]
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
        // Without /dev/infiniband nothing can be told: nothing is narrowed.
        std::fs::remove_dir_all(dir.path().join("dev")).unwrap_or_default();
        assert_eq!(sources(dir.path()).view().visible, None);
    }
}
