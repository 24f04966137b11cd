//! What `rdma-container doctor` reports: the GID table, the device choice toward a peer, the
//! memlock limit, CAP_IPC_LOCK and `/dev/infiniband`, with the problems found. The command line
//! prints it as text or JSON; the Python module returns it as a dict.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::net::iface::{interface_owning, path_info, PathInfo};
use crate::net::route::route_to;
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
    let path = source_path(request, &mut problems);
    let choice = path.as_ref().and_then(|p| {
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
            "memlock limit is {} KiB and CAP_IPC_LOCK is missing: RDMA memory registration will fail; \
             run the container with --cap-add=IPC_LOCK or raise the limit (ulimit -l unlimited)",
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
        table: table.entries.clone(),
        ports: table.ports.clone(),
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
        problems,
    };
    (report, table)
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

/// The soft memlock limit in bytes; `None` when unlimited.
pub(crate) fn memlock_limit() -> Option<u64> {
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
    let mut nodes: Vec<String> = std::fs::read_dir(Path::new("/dev/infiniband"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    nodes
}
