//! `doctor`: what this host offers for RDMA and what to fix.

use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::Result;
use rdma_container::compiled_in_transports;
use rdma_container::path::route_to;
use rdma_container::path::{interface_owning, path_info, PathInfo};
use rdma_container::roce::{render_table, select, DeviceChoice, GidTable};
use rdma_container::TransportKind;
use serde::Serialize;

use super::args::DoctorArgs;

/// Bit of CAP_IPC_LOCK in the capability sets.
const CAP_IPC_LOCK_BIT: u32 = 14;
/// Below this memlock limit (without CAP_IPC_LOCK) default-sized slots cannot be registered.
const MEMLOCK_NEEDED: u64 = 64 * 1024 * 1024;

#[derive(Debug, Serialize)]
struct Report {
    version: &'static str,
    transports: Vec<&'static str>,
    doca: &'static str,
    sysfs_root: String,
    table: Vec<rdma_container::roce::GidEntry>,
    ports: Vec<rdma_container::roce::PortInfo>,
    path: Option<PathInfo>,
    choice: Option<DeviceChoice>,
    /// What `--transport auto` would try for this path: the preferred RDMA transport compiled
    /// in when there is a choice, else tcp (it still falls back if that transport cannot start).
    auto_transport: Option<&'static str>,
    memlock_bytes: Option<u64>,
    cap_ipc_lock: Option<bool>,
    dev_infiniband: Vec<String>,
    problems: Vec<String>,
}

/// Runs `doctor`; returns the exit status (0: the report itself is the result).
pub fn run(args: &DoctorArgs) -> Result<u8> {
    let mut problems = Vec::new();
    let table = GidTable::read(&args.sysfs_root).unwrap_or_else(|e| {
        problems.push(format!("cannot read the GID table: {e}"));
        GidTable::default()
    });
    if table.entries.is_empty() {
        problems.push(format!(
            "no RDMA devices under {}/class/infiniband: load the NIC driver (mlx5_ib) or set up soft-RoCE \
             (rdma link add rxe0 type rxe netdev IFACE); until then only the tcp transport works",
            args.sysfs_root.display()
        ));
    }
    let path = source_path(args, &mut problems);
    let overrides = args.device.overrides();
    let choice = path.as_ref().and_then(|p| {
        match select(&table, p.source, p.interface.as_deref(), &overrides) {
            Ok(sel) => {
                problems.extend(sel.warnings);
                Some(sel.choice)
            }
            Err(rdma_container::Error::NoRoceGid { ip, hint, .. }) => {
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
    let dev_infiniband = list_dev_infiniband();
    if dev_infiniband.is_empty() {
        problems.push(
            "/dev/infiniband has no device nodes: in a container pass --device /dev/infiniband/uverbsN \
             --device /dev/infiniband/rdma_cm"
                .to_owned(),
        );
    }
    let report = Report {
        version: env!("CARGO_PKG_VERSION"),
        transports: compiled_in_transports().iter().map(|k| k.name()).collect(),
        doca: env!("RDMA_CONTAINER_DOCA_VERSION"),
        sysfs_root: args.sysfs_root.display().to_string(),
        table: table.entries.clone(),
        ports: table.ports.clone(),
        path,
        auto_transport: path_known.then(|| {
            rdma_container::auto_order(choice.is_some())
                .next()
                .map_or("tcp", TransportKind::name)
        }),
        choice,
        memlock_bytes: memlock,
        cap_ipc_lock: cap,
        dev_infiniband,
        problems,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &table);
    }
    Ok(0)
}

fn source_path(args: &DoctorArgs, problems: &mut Vec<String>) -> Option<PathInfo> {
    if let Some(local) = args.local_ip {
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
    let peer = args.peer?;
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

fn print_text(r: &Report, table: &GidTable) {
    println!(
        "rdma-container {} doctor (transports compiled in: {})",
        r.version,
        r.transports.join(", ")
    );
    println!("DOCA: {}", r.doca);
    println!();
    println!("GID table ({}/class/infiniband):", r.sysfs_root);
    if table.entries.is_empty() {
        println!(
            "no RDMA devices found (nothing under {}/class/infiniband)",
            r.sysfs_root
        );
    } else {
        print!("{}", render_table(table));
    }
    println!();
    if let Some(p) = &r.path {
        let route = p
            .route
            .as_ref()
            .map_or_else(|| "unknown".to_owned(), |rt| rt.to_string());
        println!(
            "path: source {} on {} toward {} (route: {route})",
            p.source,
            p.interface.as_deref().unwrap_or("?"),
            p.peer
        );
        match &r.choice {
            Some(c) => println!(
                "choice: device {} port {} gid-index {} gid {} netdev {} (transport auto would use {})",
                c.device,
                c.port,
                c.gid_index,
                c.gid_string(),
                c.netdev.as_deref().unwrap_or("-"),
                r.auto_transport.unwrap_or("tcp")
            ),
            None => println!("choice: none (transport auto would use tcp)"),
        }
    } else {
        println!("choice: pass --peer IP or --local-ip IP to see the device choice");
    }
    let memlock = r
        .memlock_bytes
        .map_or_else(|| "unlimited".to_owned(), |m| format!("{} KiB", m / 1024));
    println!("memlock limit: {memlock}");
    let cap = match r.cap_ipc_lock {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    println!("CAP_IPC_LOCK: {cap}");
    let nodes = if r.dev_infiniband.is_empty() {
        "none".to_owned()
    } else {
        r.dev_infiniband.join(" ")
    };
    println!("/dev/infiniband: {nodes}");
    println!();
    if r.problems.is_empty() {
        println!("no problems found");
    } else {
        println!("problems:");
        for p in &r.problems {
            println!("  - {p}");
        }
    }
}

/// The soft memlock limit in bytes; `None` when unlimited.
fn memlock_limit() -> Option<u64> {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => None,
        Ok((soft, _)) => Some(soft),
        Err(_) => None,
    }
}

/// Whether CAP_IPC_LOCK is in the effective set (from /proc/self/status).
fn has_cap_ipc_lock() -> Option<bool> {
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
