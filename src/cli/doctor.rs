//! `doctor`: what this host offers for RDMA and what to fix.

use anyhow::Result;
use rdma_container::doctor::{examine, DoctorReport as Report, DoctorRequest};
use rdma_container::roce::{render_table, GidTable};

use super::args::DoctorArgs;

/// Runs `doctor`; returns the exit status (0: the report itself is the result).
pub fn run(args: &DoctorArgs) -> Result<u8> {
    let request = DoctorRequest {
        peer: args.peer,
        local_ip: args.local_ip,
        overrides: args.device.overrides(),
        sysfs_root: args.sysfs_root.clone(),
    };
    let (report, table) = examine(&request);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &table);
    }
    Ok(0)
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
    for r in &r.pod_resources {
        println!(
            "device plugin: {} gives {}",
            r.resource,
            r.devices.join(", ")
        );
    }
    if let Some(why) = &r.considered {
        println!("devices considered: {why}");
    }
    if let Some(mode) = r.rdma_netns_mode {
        println!("RDMA network namespace mode: {mode}");
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
