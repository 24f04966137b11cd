//! `doctor`: what this host offers for RDMA and what to fix.

use anyhow::Result;
use rdma_container::doctor::{examine, DeviceReport, DoctorReport as Report, DoctorRequest};
use rdma_container::path::PathInfo;
use rdma_container::roce::{render_table, DeviceChoice, GidTable};

use super::args::DoctorArgs;
use super::probe;
use super::result::EXIT_RDMA_REQUIRED;

/// Runs `doctor`; returns the exit status (0: the report itself is the result; with
/// `--probe`, the probe's; with `--require-rdma`, 5 when RDMA cannot be used here).
pub fn run(args: &DoctorArgs) -> Result<u8> {
    let probe_peer = args.probe.and_then(|p| match p.ip() {
        std::net::IpAddr::V4(ip) => Some(ip),
        std::net::IpAddr::V6(_) => None,
    });
    let request = DoctorRequest {
        peer: args.peer.or(probe_peer),
        local_ip: args.local_ip,
        overrides: args.device.overrides(),
        sysfs_root: args.sysfs_root.path.clone(),
    };
    // Each --paths address: the same examination toward it (its route, source and device).
    let paths: Vec<PathChoice> = args
        .paths
        .iter()
        .map(|&addr| {
            let (r, _) = examine(&DoctorRequest {
                peer: Some(addr),
                local_ip: None,
                ..request.clone()
            });
            PathChoice {
                path: r.path,
                choice: r.choice,
                auto_transport: r.auto_transport,
            }
        })
        .collect();
    let (report, table) = examine(&request);
    let probe = args.probe.map(|peer| probe::run(peer, args));
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("paths".to_owned(), serde_json::to_value(&paths)?);
            if let Some(p) = &probe {
                obj.insert("probe".to_owned(), serde_json::to_value(p)?);
            }
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_text(&report, &table, &paths);
        if let Some(p) = &probe {
            print_probe(p);
        }
    }
    // With --paths, every path needs its RoCE v2 GID too.
    let path_without_gid = args.paths.iter().zip(&paths).find_map(|(addr, p)| {
        p.choice.is_none().then(|| {
            let source = p
                .path
                .as_ref()
                .map_or_else(|| "?".to_owned(), |i| i.source.to_string());
            format!("--paths {addr}: no RoCE v2 GID for source {source} toward it")
        })
    });
    let reason = if report.readiness.rdma_usable {
        path_without_gid
    } else {
        Some(
            report
                .readiness
                .reason
                .clone()
                .unwrap_or_else(|| "unknown".to_owned()),
        )
    };
    if let (true, Some(reason)) = (args.require_rdma, reason) {
        let error = rdma_container::Error::RdmaRequired {
            asked: "--require-rdma".to_owned(),
            reason,
        };
        eprintln!("rdma-container doctor: {error}");
        return Ok(EXIT_RDMA_REQUIRED);
    }
    Ok(probe.map_or(0, |p| p.exit_status))
}

fn print_probe(p: &probe::ProbeReport) {
    println!();
    if p.ok {
        println!(
            "probe {}: ok: transport {} device {} port {} gid-index {} mtu {}: 2 messages acknowledged in {:.1} ms",
            p.peer,
            p.transport.as_deref().unwrap_or("?"),
            p.device.as_deref().unwrap_or("-"),
            p.port.map_or_else(|| "-".to_owned(), |v| v.to_string()),
            p.gid_index.map_or_else(|| "-".to_owned(), |v| v.to_string()),
            p.mtu.map_or_else(|| "-".to_owned(), |v| v.to_string()),
            p.milliseconds
        );
    } else {
        println!(
            "probe {}: FAILED ({}): {}",
            p.peer,
            p.failure.unwrap_or("other"),
            p.explanation.as_deref().unwrap_or("")
        );
        println!("  error: {}", p.error.as_deref().unwrap_or(""));
    }
}

/// One path toward an address of the peer (`doctor --paths`): what a session would choose.
#[derive(Debug, serde::Serialize)]
struct PathChoice {
    path: Option<PathInfo>,
    choice: Option<DeviceChoice>,
    auto_transport: Option<&'static str>,
}

/// The path and device choice lines, each prefixed by `label`.
fn print_path(
    label: &str,
    path: Option<&PathInfo>,
    choice: Option<&DeviceChoice>,
    auto_transport: Option<&'static str>,
) {
    let Some(p) = path else {
        println!("{label}choice: pass --peer IP or --local-ip IP to see the device choice");
        return;
    };
    let route = p
        .route
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |rt| rt.to_string());
    println!(
        "{label}path: source {} on {} toward {} (route: {route})",
        p.source,
        p.interface.as_deref().unwrap_or("?"),
        p.peer
    );
    match choice {
        Some(c) => println!(
            "{label}choice: device {} port {} gid-index {} gid {} netdev {} (transport auto would use {})",
            c.device,
            c.port,
            c.gid_index,
            c.gid_string(),
            c.netdev.as_deref().unwrap_or("-"),
            auto_transport.unwrap_or("tcp")
        ),
        None => println!("{label}choice: none (transport auto would use tcp)"),
    }
}

fn print_text(r: &Report, table: &GidTable, paths: &[PathChoice]) {
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
    if !r.devices.is_empty() {
        println!("RDMA devices:");
        for d in &r.devices {
            print_device(d);
        }
        println!();
    }
    print_path("", r.path.as_ref(), r.choice.as_ref(), r.auto_transport);
    for (i, p) in paths.iter().enumerate() {
        let label = format!("--paths {}: ", i + 1);
        print_path(&label, p.path.as_ref(), p.choice.as_ref(), p.auto_transport);
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
    for r in &r.pod_resources {
        println!(
            "device plugin: {} gives {}",
            r.resource,
            r.devices.join(", ")
        );
    }
    println!("device from: {}", r.device_source);
    if let Some(why) = &r.considered {
        println!("devices considered: {why}");
    }
    if let Some(mode) = r.rdma_netns_mode {
        println!("RDMA network namespace mode: {mode}");
    }
    let ready = &r.readiness;
    match (&ready.reason, &ready.device) {
        (None, Some(device)) => println!(
            "RDMA: usable: {device} port {} gid-index {} through {} (doctor --require-rdma exits 0)",
            ready.port.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            ready
                .gid_index
                .map_or_else(|| "?".to_owned(), |i| i.to_string()),
            ready.node.as_deref().unwrap_or("?")
        ),
        (reason, _) => println!(
            "RDMA: not usable: {} (doctor --require-rdma exits 5)",
            reason.as_deref().unwrap_or("unknown")
        ),
    }
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

/// `  mlx5_0: node /dev/infiniband/uverbs0 (ok), firmware 20.31.1014` and a line per port.
fn print_device(d: &DeviceReport) {
    let node = match (&d.node, d.node_status) {
        (Some(n), Some("ok")) => format!("node {n} (present)"),
        (Some(n), Some("missing")) => format!("node {n} (missing from /dev/infiniband)"),
        (Some(n), _) => format!(
            "node {n} (cannot be opened: {})",
            d.node_error.as_deref().unwrap_or("unknown error")
        ),
        (None, _) => "node unknown (sysfs names no uverbs node)".to_owned(),
    };
    println!(
        "  {}: {node}, firmware {}",
        d.device,
        d.fw_ver.as_deref().unwrap_or("unknown")
    );
    for p in &d.ports {
        let netdev = match (&p.netdev, p.netdev_mtu) {
            (Some(n), Some(m)) => format!("netdev {n} MTU {m}"),
            (Some(n), None) => format!("netdev {n} MTU unknown"),
            (None, _) => "netdev unknown".to_owned(),
        };
        let active = match (p.active_mtu, p.active_mtu_source) {
            (Some(m), Some("port")) => format!("active MTU {m} (from the port, ibv_query_port)"),
            (Some(m), _) => format!(
                "active MTU {m} (derived: the largest IB MTU <= netdev MTU - {} bytes of RoCE headers)",
                rdma_container::roce::ROCE_HEADER_BYTES
            ),
            (None, _) => "active MTU unknown".to_owned(),
        };
        println!(
            "    port {}: {} {}, rate {}, {netdev}, {active}",
            p.port,
            p.state,
            p.link_layer.as_deref().unwrap_or("(link layer unknown)"),
            p.rate.as_deref().unwrap_or("unknown")
        );
    }
}
