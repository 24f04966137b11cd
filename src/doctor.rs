//! What `rdma-container doctor` reports: the GID table, the device choice toward a peer, the
//! memlock limit, CAP_IPC_LOCK and `/dev/infiniband`, with the problems found. The command line
//! prints it as text or JSON; the Python module returns it as a dict.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::net::iface::{interface_owning, path_info, PathInfo};
use crate::net::route::route_to;
use crate::roce::pod::{restrict, PodSources};
use crate::roce::{select, DeviceChoice, GidEntry, GidTable, Overrides, PortInfo};
use crate::{compiled_in_transports, TransportKind};

/// Bit of CAP_IPC_LOCK in the capability sets.
const CAP_IPC_LOCK_BIT: u32 = 14;
/// Below this memlock limit (without CAP_IPC_LOCK) default-sized slots cannot be registered.
const MEMLOCK_NEEDED: u64 = 64 * 1024 * 1024;

/// What to examine.
#[derive(Debug, Clone)]
pub struct DoctorRequest {
    /// Show the choice that would be made for a session with this peer.
    pub peer: Option<Ipv4Addr>,
    /// Show the choice for this local source address (instead of a peer).
    pub local_ip: Option<Ipv4Addr>,
    /// `--device`, `--port`, `--gid-index`.
    pub overrides: Overrides,
    /// Where sysfs is mounted (`/sys`).
    pub sysfs_root: PathBuf,
}

impl Default for DoctorRequest {
    fn default() -> Self {
        Self {
            peer: None,
            local_ip: None,
            overrides: Overrides::default(),
            sysfs_root: PathBuf::from("/sys"),
        }
    }
}

/// The report (`doctor --json` prints it as one object).
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// This library's version.
    pub version: &'static str,
    /// The transports compiled in, in the order `auto` prefers them.
    pub transports: Vec<&'static str>,
    /// The DOCA SDK built against (`none` without DOCA).
    pub doca: &'static str,
    /// The sysfs root read.
    pub sysfs_root: String,
    /// The GID table's entries.
    pub table: Vec<GidEntry>,
    /// Every RDMA port found.
    pub ports: Vec<PortInfo>,
    /// The path toward the peer (or from the local address), when asked and known.
    pub path: Option<PathInfo>,
    /// The device, port and GID a session on that path would use.
    pub choice: Option<DeviceChoice>,
    /// What `--transport auto` would try for this path: the preferred RDMA transport compiled
    /// in when there is a choice, else tcp (it still falls back if that transport cannot start).
    pub auto_transport: Option<&'static str>,
    /// The soft memlock limit in bytes (`None`: unlimited or unknown).
    pub memlock_bytes: Option<u64>,
    /// Whether CAP_IPC_LOCK is in the effective set (`None`: unknown).
    pub cap_ipc_lock: Option<bool>,
    /// The device nodes in `/dev/infiniband`.
    pub dev_infiniband: Vec<String>,
    /// What a Kubernetes device plugin gave this pod: each resource (a `PCIDEVICE_*` variable,
    /// a Multus network) and its usable devices; empty outside such a pod.
    pub pod_resources: Vec<PodResource>,
    /// The devices whose uverbs node is in `/dev/infiniband` (`null`: cannot be told).
    pub visible_devices: Option<Vec<String>>,
    /// The devices the choice considers, when fewer than sysfs lists, and why.
    pub considered: Option<String>,
    /// The RDMA subsystem's network namespace mode: `shared` (every namespace sees every
    /// device) or `exclusive` (a device belongs to one namespace); `null` when unknown.
    pub rdma_netns_mode: Option<&'static str>,
    /// What is wrong, one sentence each, with the fix.
    pub problems: Vec<String>,
}

/// Examines the host; returns the report and the GID table it was built from (for
/// [`crate::roce::render_table`]). Never fails: what cannot be read becomes a problem.
pub fn examine(request: &DoctorRequest) -> (DoctorReport, GidTable) {
    let mut problems = Vec::new();
    let table = GidTable::read(&request.sysfs_root).unwrap_or_else(|e| {
        problems.push(format!("cannot read the GID table: {e}"));
        GidTable::default()
    });
    if table.entries.is_empty() {
        problems.push(format!(
            "no RDMA devices under {}/class/infiniband: load the NIC driver (mlx5_ib) or set up soft-RoCE \
             (rdma link add rxe0 type rxe netdev IFACE); until then only the tcp transport works",
            request.sysfs_root.display()
        ));
    }
    let view = PodSources::from_env(&request.sysfs_root).view();
    let full = table.clone();
    // `table` is what the choice considers; an ambiguous pod resource leaves it nothing (the
    // choice is never guessed); the report shows the full table.
    let (table, considered, ambiguous) =
        match restrict(table, &view, request.overrides.device.as_deref()) {
            Ok((narrowed, why)) => (narrowed, why, false),
            Err(e) => {
                problems.push(e.to_string());
                (full.clone(), None, true)
            }
        };
    let netns_mode = rdma_netns_mode(&request.sysfs_root);
    pod_problems(
        &request.sysfs_root,
        &full,
        &table,
        considered.is_some(),
        netns_mode,
        &mut problems,
    );
    let path = source_path(request, &mut problems);
    let choice = path.as_ref().filter(|_| !ambiguous).and_then(|p| {
        match select(&table, p.source, p.interface.as_deref(), &request.overrides) {
            Ok(sel) => {
                problems.extend(sel.warnings);
                Some(sel.choice)
            }
            Err(crate::Error::NoRoceGid { ip, hint, .. }) => {
                problems.push(format!("no RoCE v2 GID for {ip}: {hint}"));
                None
            }
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        }
    });
    let path_known = path.is_some();
    let memlock = memlock_limit();
    let cap = has_cap_ipc_lock();
    if cap != Some(true) && memlock.is_some_and(|m| m < MEMLOCK_NEEDED) {
        problems.push(format!(
            "memlock limit is {} KiB (/proc/self/limits) and CAP_IPC_LOCK is missing: RDMA memory \
             registration will fail; run the container with --cap-add=IPC_LOCK or raise the limit \
             (ulimit -l unlimited); in Kubernetes, where a pod has no ulimit field, add IPC_LOCK to \
             securityContext.capabilities.add (docs/kubernetes.md)",
            memlock.unwrap_or(0) / 1024
        ));
    }
    if let Some(why) = verbs_unavailable() {
        problems.push(format!("the verbs transport cannot run here: {why}"));
    }
    let dev_infiniband = list_dev_infiniband();
    if dev_infiniband.is_empty() {
        problems.push(
            "/dev/infiniband has no device nodes: in a container pass --device /dev/infiniband/uverbsN \
             --device /dev/infiniband/rdma_cm"
                .to_owned(),
        );
    }
    let report = DoctorReport {
        version: env!("CARGO_PKG_VERSION"),
        transports: compiled_in_transports().iter().map(|k| k.name()).collect(),
        doca: env!("RDMA_CONTAINER_DOCA_VERSION"),
        sysfs_root: request.sysfs_root.display().to_string(),
        table: full.entries.clone(),
        ports: full.ports.clone(),
        path,
        auto_transport: path_known.then(|| {
            crate::transport::auto_order(choice.is_some())
                .next()
                .map_or("tcp", TransportKind::name)
        }),
        choice,
        memlock_bytes: memlock,
        cap_ipc_lock: cap,
        dev_infiniband,
        pod_resources: view
            .resources
            .into_iter()
            .map(|(resource, devices)| PodResource { resource, devices })
            .collect(),
        visible_devices: view.visible,
        considered,
        rdma_netns_mode: netns_mode,
        problems,
    };
    (report, full)
}

fn source_path(request: &DoctorRequest, problems: &mut Vec<String>) -> Option<PathInfo> {
    if let Some(local) = request.local_ip {
        let mut path = path_info(local, local);
        path.route = None;
        if !matches!(interface_owning(local), Ok(Some(_))) {
            problems.push(format!(
                "{local} is not an address of this host (in this network namespace): sessions would never use it as a source"
            ));
            path.interface = None;
        }
        return Some(path);
    }
    let peer = request.peer?;
    match route_to(peer) {
        Ok(route) => {
            let source = route.source.unwrap_or(Ipv4Addr::UNSPECIFIED);
            if source.is_unspecified() {
                problems.push(format!(
                    "the route to {peer} has no preferred source address"
                ));
                return None;
            }
            Some(path_info(source, peer))
        }
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    }
}

/// Why the verbs transport (compiled in) cannot load rdma-core's `libibverbs.so.1`, if so.
#[cfg(feature = "verbs")]
fn verbs_unavailable() -> Option<String> {
    verbs_sys::Library::get().err().map(|e| e.to_string())
}

#[cfg(not(feature = "verbs"))]
fn verbs_unavailable() -> Option<String> {
    None
}

/// One device plugin resource and the devices it gave the pod.
#[derive(Debug, Clone, Serialize)]
pub struct PodResource {
    /// `PCIDEVICE_...` or `Multus network NAME (PCI)`.
    pub resource: String,
    /// Its usable RDMA devices.
    pub devices: Vec<String>,
}

/// `shared` or `exclusive`, from `<sysfs>/module/ib_core/parameters/netns_mode` (what
/// `rdma system` shows).
fn rdma_netns_mode(sysfs_root: &Path) -> Option<&'static str> {
    let text =
        std::fs::read_to_string(sysfs_root.join("module/ib_core/parameters/netns_mode")).ok()?;
    match text.trim() {
        "Y" | "1" => Some("shared"),
        "N" | "0" => Some("exclusive"),
        _ => None,
    }
}

/// The pod failure modes: a device without a netdev in this network namespace, a port whose
/// GIDs are all zero, an exclusive-mode namespace without devices.
fn pod_problems(
    sysfs_root: &Path,
    full: &GidTable,
    table: &GidTable,
    narrowed: bool,
    mode: Option<&str>,
    problems: &mut Vec<String>,
) {
    let net = sysfs_root.join("class/net");
    // A device without a netdev here is worth a line when it is one of the pod's devices (the
    // table was narrowed to them), or when no device has one here; on a host whose other
    // namespaces have devices of their own, those are not a problem of this one.
    let here = |e: &GidEntry| e.netdev.as_deref().is_some_and(|n| net.join(n).exists());
    let report_netdev = narrowed || !table.entries.iter().any(here);
    if full.ports.is_empty() && mode == Some("exclusive") {
        problems.push(
            "the RDMA subsystem is in exclusive network namespace mode (rdma system: netns \
             exclusive) and no RDMA device is in this namespace: the device must be moved into the \
             pod's namespace (rdma-cni does it for SR-IOV VFs), or the node switched to shared mode"
                .to_owned(),
        );
    }
    for device in table.devices() {
        let entries: Vec<&GidEntry> = table
            .entries
            .iter()
            .filter(|e| e.device == device)
            .collect();
        let ports: Vec<&PortInfo> = table.ports.iter().filter(|p| p.device == device).collect();
        for port in &ports {
            if !entries.iter().any(|e| e.port == port.port) {
                problems.push(format!(
                    "all GIDs of {device} port {} are zero: its netdev has no IP address (in this \
                     network namespace); in a pod, attach the RoCE network (the Multus secondary \
                     interface, e.g. net1) and check that it got an address",
                    port.port
                ));
            }
        }
        let mut netdevs: Vec<&str> = entries.iter().filter_map(|e| e.netdev.as_deref()).collect();
        netdevs.dedup();
        // A fixture tree without class/net says nothing about interfaces.
        if report_netdev
            && net.is_dir()
            && !entries.is_empty()
            && !netdevs.iter().any(|n| net.join(n).exists())
        {
            let shared = if mode == Some("shared") {
                " (the RDMA subsystem is in shared mode: every namespace sees every device, but only \
                 the namespace of its netdev can use its GIDs)"
            } else {
                ""
            };
            problems.push(format!(
                "{device} has no network interface in this network namespace{shared}: its GIDs belong \
                 to {} elsewhere; in a pod, use the device of the pod's own RoCE interface (Multus \
                 secondary network) or run with hostNetwork",
                if netdevs.is_empty() {
                    "netdevs".to_owned()
                } else {
                    netdevs.join(", ")
                }
            ));
        }
    }
}

/// The soft memlock limit in bytes; `None` when unlimited. Read from `/proc/self/limits` (what
/// a pod sees; it has no ulimit field), else from getrlimit.
pub(crate) fn memlock_limit() -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string("/proc/self/limits") {
        if let Some(soft) = text
            .lines()
            .find_map(|l| l.strip_prefix("Max locked memory"))
            .and_then(|rest| rest.split_whitespace().next())
        {
            return soft.parse().ok();
        }
    }
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => None,
        Ok((soft, _)) => Some(soft),
        Err(_) => None,
    }
}

/// Whether CAP_IPC_LOCK is in the effective set (from /proc/self/status).
pub(crate) fn has_cap_ipc_lock() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps & (1 << CAP_IPC_LOCK_BIT) != 0)
}

fn list_dev_infiniband() -> Vec<String> {
    let dev = std::env::var_os("RDMA_CONTAINER_DEV_ROOT")
        .map_or_else(|| PathBuf::from("/dev"), PathBuf::from);
    let mut nodes: Vec<String> = std::fs::read_dir(dev.join("infiniband"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    nodes
}
