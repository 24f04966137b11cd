//! What `rdma-container doctor` reports: the GID table, the device choice toward a peer, each
//! RDMA device's uverbs node, firmware, port rate and MTUs, the memlock limit, CAP_IPC_LOCK and
//! `/dev/infiniband`, with the problems found, and whether RDMA can be used here at all (the
//! verdict `doctor --require-rdma` turns into its exit status). The command line prints it as
//! text or JSON; the Python module returns it as a dict.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::host;
use crate::net::iface::{interface_owning, path_info, PathInfo};
use crate::net::route::route_to;
use crate::roce::pod::{restrict, PodSources};
use crate::roce::{roce_active_mtu, select, DeviceChoice, GidEntry, GidTable, Overrides, PortInfo};
use crate::{compiled_in_transports, TransportKind};

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
    /// Which mode gives the pod's device ([`crate::roce::pod`]): `--ib-dev`, the DRA SR-IOV
    /// driver's `SRIOVNETWORK_*`, the SR-IOV device plugin's `PCIDEVICE_*`, a device-info file,
    /// Multus network-status, the `/dev/infiniband` nodes, or every device in sysfs.
    pub device_source: String,
    /// The RDMA subsystem's network namespace mode: `shared` (every namespace sees every
    /// device) or `exclusive` (a device belongs to one namespace); `null` when unknown.
    pub rdma_netns_mode: Option<&'static str>,
    /// Every RDMA device in sysfs: its uverbs node, firmware and ports (rate, MTUs).
    pub devices: Vec<DeviceReport>,
    /// Whether a session here could use RDMA: what `doctor --require-rdma` gates on.
    pub readiness: Readiness,
    /// What is wrong, one sentence each, with the fix.
    pub problems: Vec<String>,
}

/// One RDMA device: what a container needs to be given and what its ports run at.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// The RDMA device name (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Its uverbs character device, `uverbsN`, as sysfs names it
    /// (`<sysfs>/class/infiniband/<dev>/device/infiniband_verbs/uverbsN` or
    /// `<sysfs>/class/infiniband_verbs/uverbsN/ibdev`); `None` when sysfs does not say.
    pub uverbs: Option<String>,
    /// The node a container must be given: `/dev/infiniband/uverbsN`.
    pub node: Option<String>,
    /// Whether that node is there and opens: `ok`, `missing` or `unopenable`; `None` when
    /// the node is not known.
    pub node_status: Option<&'static str>,
    /// Why the node could not be opened.
    pub node_error: Option<String>,
    /// The firmware version (`<sysfs>/class/infiniband/<dev>/fw_ver`).
    pub fw_ver: Option<String>,
    /// Its ports.
    pub ports: Vec<PortReport>,
}

/// One port of an RDMA device: link, rate and MTUs.
#[derive(Debug, Clone, Serialize)]
pub struct PortReport {
    /// The port number (1-based).
    pub port: u32,
    /// The port state word (`ACTIVE`, `DOWN`, ...).
    pub state: String,
    /// `Ethernet` or `InfiniBand`, when known.
    pub link_layer: Option<String>,
    /// The `ports/<p>/rate` file as the kernel writes it, e.g. `100 Gb/sec (4X EDR)`.
    pub rate: Option<String>,
    /// The rate in Gb/s (`100` of the above).
    pub rate_gbps: Option<f64>,
    /// The link width (`4X` of the above).
    pub width: Option<String>,
    /// The lane speed name (`EDR` of the above).
    pub speed: Option<String>,
    /// The network interface of the port (from its GIDs, else the PCI function's or the
    /// soft-RoCE parent's).
    pub netdev: Option<String>,
    /// That interface's MTU (`<sysfs>/class/net/<if>/mtu`).
    pub netdev_mtu: Option<u32>,
    /// The port's active (RDMA path) MTU in bytes: 256, 512, 1024, 2048 or 4096.
    pub active_mtu: Option<u32>,
    /// Where `active_mtu` comes from: `port` (ibv_query_port) or `derived` (RoCE: the largest
    /// IB MTU not above the netdev MTU less the RoCE headers, the kernel's rule).
    pub active_mtu_source: Option<&'static str>,
}

/// Whether RDMA can be used here: a device with an ACTIVE port, a RoCE v2 GID with an IPv4
/// address (the one toward the peer, with `--peer`/`--local-ip`), its uverbs node present
/// and openable, and an RDMA transport this build can run.
#[derive(Debug, Clone, Serialize)]
pub struct Readiness {
    /// True when a session could use RDMA.
    pub rdma_usable: bool,
    /// The device that can (or the one that came closest).
    pub device: Option<String>,
    /// Its port.
    pub port: Option<u32>,
    /// Its RoCE v2 GID index.
    pub gid_index: Option<u32>,
    /// Its uverbs node (`/dev/infiniband/uverbsN`).
    pub node: Option<String>,
    /// Why RDMA cannot be used, one line; `None` when it can.
    pub reason: Option<String>,
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
    let device_source = view.device_source(request.overrides.device.as_deref());
    let full = table.clone();
    // `table` is what the choice considers; an ambiguous pod resource leaves it nothing (the
    // choice is never guessed); the report shows the full table.
    let (table, considered, ambiguous) =
        match restrict(table, &view, request.overrides.device.as_deref()) {
            Ok((narrowed, why)) => (narrowed, why, None),
            Err(e) => {
                problems.push(e.to_string());
                (full.clone(), None, Some(e.to_string()))
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
    let problems_before_path = problems.len();
    let path = source_path(request, &mut problems);
    // Why the source address cannot be used (not this host's, no route toward the peer).
    let source_failure = problems.get(problems_before_path).cloned();
    let choice = path.as_ref().filter(|_| ambiguous.is_none()).and_then(|p| {
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
    // Why a session toward the peer (or from the local address) cannot use RDMA: the source
    // address, else why there is no choice.
    let path_failure = source_failure.or_else(|| {
        choice
            .is_none()
            .then(|| problems.get(problems_before_path).cloned())
            .flatten()
    });
    let dev_root = dev_root();
    let devices = device_reports(request, &dev_root, &full, choice.as_ref());
    let path_known = path.is_some();
    let memlock = host::memlock_limit();
    let cap = host::has_cap_ipc_lock();
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
    let dev_infiniband = list_dev_infiniband(&dev_root);
    // The nodes a container needs: the chosen device's, else those of the devices considered
    // (all of them when none is: none has its node in /dev/infiniband).
    let considered_devices = table.devices();
    let wanted: Vec<&DeviceReport> = devices
        .iter()
        .filter(|d| match &choice {
            Some(c) => c.device == d.device,
            None => {
                considered_devices.is_empty() || considered_devices.contains(&d.device.as_str())
            }
        })
        .collect();
    if dev_infiniband.is_empty() {
        let nodes: Vec<&str> = wanted.iter().filter_map(|d| d.node.as_deref()).collect();
        let pass = if wanted.is_empty() {
            "--device /dev/infiniband/uverbsN".to_owned()
        } else if nodes.is_empty() {
            format!(
                "--device /dev/infiniband/uverbsN (sysfs does not say which N: see {}/class/infiniband_verbs/*/ibdev)",
                request.sysfs_root.display()
            )
        } else {
            nodes
                .iter()
                .map(|n| format!("--device {n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        problems.push(format!(
            "/dev/infiniband has no device nodes: in a container pass {pass} --device /dev/infiniband/rdma_cm"
        ));
    } else {
        for d in &wanted {
            let Some(node) = &d.node else { continue };
            match d.node_status {
                Some("missing") => problems.push(format!(
                    "the device node of {}, {node}, is not in /dev/infiniband: in a container pass \
                     --device {node}",
                    d.device
                )),
                Some("unopenable") => problems.push(format!(
                    "the device node of {}, {node}, cannot be opened: {}",
                    d.device,
                    d.node_error.as_deref().unwrap_or("unknown error")
                )),
                _ => {}
            }
        }
    }
    let readiness = readiness(&ReadinessInput {
        request,
        full: &full,
        table: &table,
        ambiguous,
        choice: choice.as_ref(),
        path_failure,
        devices: &devices,
    });
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
        device_source,
        rdma_netns_mode: netns_mode,
        devices,
        readiness,
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

/// Where `/dev` is (`RDMA_CONTAINER_DEV_ROOT`, for tests and the scripts' fake trees).
fn dev_root() -> PathBuf {
    std::env::var_os("RDMA_CONTAINER_DEV_ROOT").map_or_else(|| PathBuf::from("/dev"), PathBuf::from)
}

fn list_dev_infiniband(dev: &Path) -> Vec<String> {
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

/// A port's `rate` file, `100 Gb/sec (4X EDR)`: (Gb/s, width, lane speed), each when present.
pub fn parse_rate(text: &str) -> (Option<f64>, Option<String>, Option<String>) {
    let gbps = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<f64>().ok());
    let inside = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inside, _)| inside);
    let mut width = None;
    let mut speed: Vec<&str> = Vec::new();
    for word in inside.unwrap_or("").split_whitespace() {
        let is_width = width.is_none()
            && word.len() > 1
            && word.ends_with('X')
            && word[..word.len() - 1].bytes().all(|b| b.is_ascii_digit());
        if is_width {
            width = Some(word.to_owned());
        } else {
            speed.push(word);
        }
    }
    let speed = (!speed.is_empty()).then(|| speed.join(" "));
    (gbps, width, speed)
}

/// A small sysfs attribute, trimmed; `None` when unreadable or empty.
fn read_attr(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// The sorted names in `dir` (none when it cannot be listed).
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by(|a, b| crate::roce::natural_cmp(a, b));
    names
}

/// `uverbsN` of `device`: `<sysfs>/class/infiniband/<dev>/device/infiniband_verbs/uverbsN`,
/// else the `<sysfs>/class/infiniband_verbs/uverbsN` whose `ibdev` names the device.
fn uverbs_of(sysfs_root: &Path, device: &str) -> Option<String> {
    let under_device = sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("device/infiniband_verbs");
    if let Some(n) = names_in(&under_device)
        .into_iter()
        .find(|n| n.starts_with("uverbs"))
    {
        return Some(n);
    }
    let class = sysfs_root.join("class/infiniband_verbs");
    names_in(&class).into_iter().find(|n| {
        n.starts_with("uverbs")
            && read_attr(&class.join(n).join("ibdev")).is_some_and(|d| d == device)
    })
}

/// The netdev of a port: the one its GIDs name (the choice's, when on this port), else the
/// PCI function's only netdev (`<dev>/device/net/*`), else a soft-RoCE device's `parent`.
fn netdev_of(
    sysfs_root: &Path,
    full: &GidTable,
    choice: Option<&DeviceChoice>,
    device: &str,
    port: u32,
) -> Option<String> {
    if let Some(n) = choice
        .filter(|c| c.device == device && c.port == port)
        .and_then(|c| c.netdev.clone())
    {
        return Some(n);
    }
    if let Some(n) = full
        .entries
        .iter()
        .filter(|e| e.device == device && e.port == port)
        .find_map(|e| e.netdev.clone())
    {
        return Some(n);
    }
    let dev = sysfs_root.join("class/infiniband").join(device);
    if let [only] = names_in(&dev.join("device/net")).as_slice() {
        return Some(only.clone());
    }
    read_attr(&dev.join("parent"))
}

/// Whether the node opens (read-write, as libibverbs opens it): `ok`, else `missing` or
/// `unopenable` with the error.
fn node_status(path: &Path) -> (&'static str, Option<String>) {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => ("ok", None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ("missing", None),
        Err(e) => ("unopenable", Some(e.to_string())),
    }
}

/// The port's active MTU as the verbs layer reports it (`ibv_query_port`), when this build has
/// the verbs transport, libibverbs loads and the device opens. Asked only for the real `/sys`:
/// a fixture tree's devices are not the verbs layer's.
#[cfg(feature = "verbs")]
fn queried_active_mtu(sysfs_root: &Path, device: &str, port: u32) -> Option<u32> {
    if sysfs_root != Path::new("/sys") {
        return None;
    }
    let port = u8::try_from(port).ok()?;
    let list = verbs_sys::DeviceList::new().ok()?;
    let context = list.iter().find(|d| d.name() == device)?.open().ok()?;
    drop(list);
    let attr = context.query_port(port).ok()?;
    // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5.
    let index = usize::try_from(attr.active_mtu).ok()?.checked_sub(1)?;
    crate::roce::IB_MTUS.get(index).copied()
}

#[cfg(not(feature = "verbs"))]
fn queried_active_mtu(_sysfs_root: &Path, _device: &str, _port: u32) -> Option<u32> {
    None
}

/// Each device of the full table: node, firmware, ports.
fn device_reports(
    request: &DoctorRequest,
    dev_root: &Path,
    full: &GidTable,
    choice: Option<&DeviceChoice>,
) -> Vec<DeviceReport> {
    let root = &request.sysfs_root;
    full.devices()
        .into_iter()
        .map(|device| {
            let dev_dir = root.join("class/infiniband").join(device);
            let uverbs = uverbs_of(root, device);
            let (node_status, node_error) = uverbs
                .as_ref()
                .map(|n| node_status(&dev_root.join("infiniband").join(n)))
                .unzip();
            let ports = full
                .ports
                .iter()
                .filter(|p| p.device == device)
                .map(|p| {
                    let port_dir = dev_dir.join("ports").join(p.port.to_string());
                    let rate = read_attr(&port_dir.join("rate"));
                    let (rate_gbps, width, speed) =
                        rate.as_deref().map_or((None, None, None), parse_rate);
                    let netdev = netdev_of(root, full, choice, device, p.port);
                    let netdev_mtu = netdev.as_ref().and_then(|n| {
                        read_attr(&root.join("class/net").join(n).join("mtu"))?
                            .parse()
                            .ok()
                    });
                    let ethernet = p.link_layer.as_deref() != Some("InfiniBand");
                    let (active_mtu, active_mtu_source) =
                        match queried_active_mtu(root, device, p.port) {
                            Some(m) => (Some(m), Some("port")),
                            None => match netdev_mtu.filter(|_| ethernet).and_then(roce_active_mtu)
                            {
                                Some(m) => (Some(m), Some("derived")),
                                None => (None, None),
                            },
                        };
                    PortReport {
                        port: p.port,
                        state: p.state.clone(),
                        link_layer: p.link_layer.clone(),
                        rate,
                        rate_gbps,
                        width,
                        speed,
                        netdev,
                        netdev_mtu,
                        active_mtu,
                        active_mtu_source,
                    }
                })
                .collect();
            DeviceReport {
                device: device.to_owned(),
                node: uverbs.as_ref().map(|n| format!("/dev/infiniband/{n}")),
                uverbs,
                node_status,
                node_error: node_error.flatten(),
                fw_ver: read_attr(&dev_dir.join("fw_ver")),
                ports,
            }
        })
        .collect()
}

/// What [`readiness`] looks at.
struct ReadinessInput<'a> {
    request: &'a DoctorRequest,
    /// Every device in sysfs.
    full: &'a GidTable,
    /// The devices the choice considers.
    table: &'a GidTable,
    /// The pod resource error, when the choice cannot be made.
    ambiguous: Option<String>,
    choice: Option<&'a DeviceChoice>,
    /// Why a session toward the peer (from the local address) cannot use RDMA.
    path_failure: Option<String>,
    devices: &'a [DeviceReport],
}

/// One candidate port's verdict: how many checks it passed and the first failure.
struct Candidate {
    device: String,
    port: u32,
    gid_index: Option<u32>,
    node: Option<String>,
    passed: u8,
    failure: Option<String>,
}

/// Whether RDMA can be used: see [`Readiness`].
fn readiness(input: &ReadinessInput<'_>) -> Readiness {
    let not = |reason: String| Readiness {
        rdma_usable: false,
        device: None,
        port: None,
        gid_index: None,
        node: None,
        reason: Some(reason),
    };
    if input.full.is_empty() {
        return not(format!(
            "no RDMA device under {}/class/infiniband",
            input.request.sysfs_root.display()
        ));
    }
    if let Some(why) = &input.ambiguous {
        return not(why.clone());
    }
    let overrides = &input.request.overrides;
    let path_asked = input.request.peer.is_some() || input.request.local_ip.is_some();
    let net = input.request.sysfs_root.join("class/net");
    // A GID whose netdev is in another network namespace is not this one's.
    let netdev_here = |n: Option<&str>| !net.is_dir() || n.is_none_or(|n| net.join(n).exists());
    let ports: Vec<(String, u32, Option<u32>)> = if path_asked {
        match (input.choice, &input.path_failure) {
            (Some(c), None) => vec![(c.device.clone(), c.port, Some(c.gid_index))],
            (_, failure) => {
                return not(failure
                    .clone()
                    .unwrap_or_else(|| "no RoCE v2 GID toward that address".to_owned()))
            }
        }
    } else {
        // The devices considered; when that is none (none has its node in /dev/infiniband),
        // every device, so that the verdict names the missing node.
        let table = if input.table.ports.is_empty() {
            input.full
        } else {
            input.table
        };
        table
            .ports
            .iter()
            .filter(|p| overrides.device.as_deref().is_none_or(|d| d == p.device))
            .filter(|p| overrides.port.is_none_or(|n| n == p.port))
            .map(|p| {
                let gid = table
                    .entries
                    .iter()
                    .filter(|e| e.device == p.device && e.port == p.port)
                    .filter(|e| overrides.gid_index.is_none_or(|i| i == e.gid_index))
                    .find(|e| {
                        e.is_roce_v2() && e.ipv4().is_some() && netdev_here(e.netdev.as_deref())
                    })
                    .map(|e| e.gid_index);
                (p.device.clone(), p.port, gid)
            })
            .collect()
    };
    if ports.is_empty() {
        return not(format!(
            "no RDMA port matches{}{} (ports: {})",
            overrides
                .device
                .as_ref()
                .map_or_else(String::new, |d| format!(" --ib-dev {d}")),
            overrides
                .port
                .map_or_else(String::new, |p| format!(" --ib-port {p}")),
            input
                .full
                .ports
                .iter()
                .map(|p| format!("{} {}", p.device, p.port))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let candidates = ports.into_iter().map(|(device, port, gid_index)| {
        let report = input.devices.iter().find(|d| d.device == device);
        let port_report = report.and_then(|d| d.ports.iter().find(|p| p.port == port));
        let state = input
            .full
            .port(&device, port)
            .map_or("UNKNOWN", |p| p.state.as_str());
        let netdev = port_report
            .and_then(|p| p.netdev.as_deref())
            .unwrap_or("its netdev");
        let node = report.and_then(|d| d.node.clone());
        let failure = if state != "ACTIVE" {
            Some((
                0,
                format!(
                    "{device} port {port} is {state}, not ACTIVE (link down: cable, switch port, \
                     ip link set {netdev} up)"
                ),
            ))
        } else if gid_index.is_none() {
            Some((
                1,
                format!(
                    "{device} port {port} has no RoCE v2 GID with an IPv4 address ({netdev} has no \
                     IPv4 address in this network namespace, or RoCE v2 is off)"
                ),
            ))
        } else {
            match (report.and_then(|d| d.node_status), &node) {
                (Some("ok"), _) => None,
                (Some("missing"), Some(n)) => Some((
                    2,
                    format!(
                        "the device node of {device}, {n}, is missing: in a container pass \
                         --device {n} --device /dev/infiniband/rdma_cm"
                    ),
                )),
                (Some(_), Some(n)) => Some((
                    2,
                    format!(
                        "the device node of {device}, {n}, cannot be opened: {}",
                        report
                            .and_then(|d| d.node_error.as_deref())
                            .unwrap_or("unknown error")
                    ),
                )),
                _ => Some((
                    2,
                    format!(
                        "sysfs names no uverbs device node for {device} (no \
                         class/infiniband_verbs/uverbsN/ibdev says {device}): is ib_uverbs loaded?"
                    ),
                )),
            }
        };
        Candidate {
            device,
            port,
            gid_index,
            node,
            passed: failure.as_ref().map_or(3, |f| f.0),
            failure: failure.map(|f| f.1),
        }
    });
    // The first candidate that passes, else the one that came closest (the first of those).
    let best = candidates
        .reduce(|best, c| if c.passed > best.passed { c } else { best })
        .expect("at least one port");
    let reason = best.failure.or_else(transport_failure);
    Readiness {
        rdma_usable: reason.is_none(),
        device: Some(best.device),
        port: Some(best.port),
        gid_index: best.gid_index,
        node: best.node,
        reason,
    }
}

/// Why no RDMA transport of this build can run here, if so.
fn transport_failure() -> Option<String> {
    let rdma: Vec<TransportKind> = compiled_in_transports()
        .iter()
        .copied()
        .filter(|k| *k != TransportKind::Tcp)
        .collect();
    if rdma.is_empty() {
        return Some("this build has no RDMA transport (transports compiled in: tcp)".to_owned());
    }
    if rdma == [TransportKind::Verbs] {
        return verbs_unavailable()
            .map(|why| format!("the verbs transport cannot run here: {why}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_files_give_rate_width_and_speed() {
        assert_eq!(
            parse_rate("100 Gb/sec (4X EDR)"),
            (Some(100.0), Some("4X".to_owned()), Some("EDR".to_owned()))
        );
        assert_eq!(
            parse_rate("2.5 Gb/sec (1X SDR)\n"),
            (Some(2.5), Some("1X".to_owned()), Some("SDR".to_owned()))
        );
        assert_eq!(
            parse_rate("10 Gb/sec (4X)"),
            (Some(10.0), Some("4X".to_owned()), None)
        );
        assert_eq!(parse_rate("garbage"), (None, None, None));
    }

    #[test]
    fn a_missing_sysfs_root_gives_no_devices_and_rdma_not_usable() {
        let request = DoctorRequest {
            sysfs_root: PathBuf::from("/nonexistent/rdma-container-doctor-test"),
            ..DoctorRequest::default()
        };
        let (report, _) = examine(&request);
        assert!(report.devices.is_empty());
        assert!(!report.readiness.rdma_usable);
        assert!(report
            .readiness
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("no RDMA device under")));
    }
}
