//! Choosing the device, port and GID index for a source address (rdma_cm's rule).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::gid::gid_from_ipv4;
use super::{natural_cmp, render_table, GidEntry, GidTable, GidType};
use crate::{Error, Result};

/// User overrides with perftest's meaning (`-d`, `-i`, `-x`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--device`: only consider this RDMA device.
    pub device: Option<String>,
    /// `--port`: only consider this port number.
    pub port: Option<u32>,
    /// `--gid-index`: use exactly this GID index (it must exist on the chosen device and port).
    pub gid_index: Option<u32>,
}

impl Overrides {
    /// What the overrides ask for, as the command line names it (`-d/--ib-dev mlx5_0`,
    /// `-i/--ib-port 1`, `-x/--gid-index 3`); `None` when none is set. An explicit device, port
    /// or GID index asks for RDMA: a session never falls back to TCP with one
    /// (docs/design.md, "Device and GID choice").
    pub fn requested(&self) -> Option<String> {
        let mut asked = Vec::new();
        if let Some(d) = &self.device {
            asked.push(format!("--ib-dev {d}"));
        }
        if let Some(p) = self.port {
            asked.push(format!("--ib-port {p}"));
        }
        if let Some(x) = self.gid_index {
            asked.push(format!("--gid-index {x}"));
        }
        (!asked.is_empty()).then(|| asked.join(" "))
    }
}

/// Whether `overrides` name a device, port and GID index that exist in `table`: the check a
/// program makes at start-up, before anything connects. The error names what is missing and
/// what is present.
///
/// # Errors
/// [`Error::BadOverride`].
pub fn check_overrides(table: &GidTable, overrides: &Overrides) -> Result<()> {
    validate_overrides(table, overrides)?;
    if let Some(index) = overrides.gid_index {
        let exists = table.entries.iter().any(|e| {
            e.gid_index == index
                && in_scope(
                    e,
                    &Overrides {
                        gid_index: None,
                        ..overrides.clone()
                    },
                )
        });
        if !exists {
            let present: Vec<String> = table
                .entries
                .iter()
                .filter(|e| overrides.device.as_deref().is_none_or(|d| e.device == d))
                .filter(|e| overrides.port.is_none_or(|p| e.port == p))
                .map(|e| format!("{} port {} index {}", e.device, e.port, e.gid_index))
                .collect();
            return Err(Error::BadOverride(format!(
                "GID index {index} not found (GIDs present: {})",
                if present.is_empty() {
                    "none".to_owned()
                } else {
                    present.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// The device, port and GID this side will use: the chosen row of the GID table.
pub type DeviceChoice = GidEntry;

/// The outcome of [`select`]: the choice and anything the user should know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// What was chosen.
    pub choice: DeviceChoice,
    /// Human-readable warnings (ambiguity, overrides that do not match the source address, ...).
    pub warnings: Vec<String>,
}

/// Picks the RoCE v2 GID for `source`, following rdma_cm's rule as docs/design.md describes it
/// ("How the device and GID are chosen").
///
/// Candidates are the entries whose GID is `::ffff:<source>`, whose type is RoCE v2 and whose port
/// is ACTIVE. One candidate is used as is. Among several, the one whose netdev is `interface`
/// (when given) wins, else the lowest (device, port, index); a warning names the others.
///
/// A source in 127/8 is refused unless `overrides.device` or `overrides.gid_index` is given; with
/// a device (and no index) the device's lowest active RoCE v2 IPv4 GID is used, with a warning.
///
/// Overrides have perftest's meaning: `device` and `port` restrict the search (each must exist);
/// `gid_index` picks exactly that index on the (restricted) ports, without requiring the type or
/// address to match, but warns when the entry is not RoCE v2 or does not carry `source`.
///
/// # Errors
///
/// * [`Error::BadOverride`] when an override names a device, port or GID index that does not
///   exist.
/// * [`Error::NoRoceGid`] when nothing matches, with the rendered table and a hint saying why (no
///   RDMA devices, RoCE v1 only, port not ACTIVE, management IP, IPv6 only, other namespace).
pub fn select(
    table: &GidTable,
    source: Ipv4Addr,
    interface: Option<&str>,
    overrides: &Overrides,
) -> Result<Selection> {
    validate_overrides(table, overrides)?;
    let scoped: Vec<&GidEntry> = table
        .entries
        .iter()
        .filter(|e| in_scope(e, overrides))
        .collect();

    if let Some(index) = overrides.gid_index {
        return select_index(table, &scoped, index, source, interface, overrides);
    }

    let no_gid = |hint: String| Error::NoRoceGid {
        ip: source,
        netdev: interface.map(str::to_string),
        hint,
        table: render_table(table),
    };

    if source.is_loopback() {
        let Some(device) = overrides.device.as_deref() else {
            return Err(no_gid(
                "127/8 has no RoCE GID; use the peer's RoCE address or name --device".to_string(),
            ));
        };
        let candidates: Vec<&GidEntry> = scoped
            .iter()
            .copied()
            .filter(|e| e.is_roce_v2() && e.ipv4().is_some() && port_active(table, e))
            .collect();
        let mut sel = pick(candidates, interface, source).ok_or_else(|| {
            no_gid(format!(
                "127/8 has no RoCE GID and {} has no RoCE v2 IPv4 GID on an ACTIVE port; \
                 use the peer's RoCE address",
                scope_text(overrides)
            ))
        })?;
        sel.warnings.insert(
            0,
            format!(
                "source {source} is a loopback address; using {device}'s RoCE v2 GID for {} \
                 (index {}) because --device was given",
                sel.choice
                    .ipv4()
                    .map(|ip| ip.to_string())
                    .unwrap_or_default(),
                sel.choice.gid_index
            ),
        );
        return Ok(sel);
    }

    let want = gid_from_ipv4(source);
    let candidates: Vec<&GidEntry> = scoped
        .iter()
        .copied()
        .filter(|e| e.gid == want && e.is_roce_v2() && port_active(table, e))
        .collect();
    match pick(candidates, interface, source) {
        Some(sel) => {
            log::debug!(
                "RoCE GID for {source}: {} port {} index {}",
                sel.choice.device,
                sel.choice.port,
                sel.choice.gid_index
            );
            Ok(sel)
        }
        None => Err(no_gid(diagnose(table, &scoped, source, overrides))),
    }
}

fn in_scope(e: &GidEntry, o: &Overrides) -> bool {
    o.device.as_deref().is_none_or(|d| e.device == d) && o.port.is_none_or(|p| e.port == p)
}

fn port_active(table: &GidTable, e: &GidEntry) -> bool {
    table.port(&e.device, e.port).is_some_and(|p| p.is_active())
}

fn port_state(table: &GidTable, e: &GidEntry) -> String {
    table
        .port(&e.device, e.port)
        .map_or_else(|| "UNKNOWN".to_string(), |p| p.state.clone())
}

fn lowest_first(a: &&GidEntry, b: &&GidEntry) -> std::cmp::Ordering {
    natural_cmp(&a.device, &b.device)
        .then(a.port.cmp(&b.port))
        .then(a.gid_index.cmp(&b.gid_index))
}

/// "mlx5_0 port 1 index 3 (ens1f0)".
fn describe(e: &GidEntry) -> String {
    match &e.netdev {
        Some(n) => format!("{} port {} index {} ({n})", e.device, e.port, e.gid_index),
        None => format!(
            "{} port {} index {} (no netdev)",
            e.device, e.port, e.gid_index
        ),
    }
}

fn describe_all(entries: &[&GidEntry]) -> String {
    entries
        .iter()
        .map(|e| describe(e))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "device mlx5_0 port 1", "device mlx5_0", "port 2 of any device" or "any device".
fn scope_text(o: &Overrides) -> String {
    match (&o.device, o.port) {
        (Some(d), Some(p)) => format!("device {d} port {p}"),
        (Some(d), None) => format!("device {d}"),
        (None, Some(p)) => format!("port {p} of any device"),
        (None, None) => "any device".to_string(),
    }
}

fn validate_overrides(table: &GidTable, o: &Overrides) -> Result<()> {
    let devices = table.devices();
    let list = |names: &[&str]| {
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    if let Some(d) = o.device.as_deref() {
        if !devices.contains(&d) {
            return Err(Error::BadOverride(format!(
                "RDMA device {d:?} not found (devices present: {})",
                list(&devices)
            )));
        }
    }
    if let Some(p) = o.port {
        let exists = table
            .ports
            .iter()
            .any(|pi| pi.port == p && o.device.as_deref().is_none_or(|d| pi.device == d))
            || table
                .entries
                .iter()
                .any(|e| e.port == p && o.device.as_deref().is_none_or(|d| e.device == d));
        if !exists {
            let ports: Vec<String> = table
                .ports
                .iter()
                .filter(|pi| o.device.as_deref().is_none_or(|d| pi.device == d))
                .map(|pi| format!("{} port {}", pi.device, pi.port))
                .collect();
            let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
            return Err(Error::BadOverride(format!(
                "port {p} not found on {} (ports present: {})",
                o.device
                    .as_deref()
                    .map_or_else(|| "any device".to_string(), |d| format!("device {d}")),
                list(&ports)
            )));
        }
    }
    Ok(())
}

/// Chooses among candidates: ndev match first, then lowest (device, port, index).
fn pick(
    mut candidates: Vec<&GidEntry>,
    interface: Option<&str>,
    source: Ipv4Addr,
) -> Option<Selection> {
    candidates.sort_by(lowest_first);
    let ndev_match = |e: &&GidEntry| interface.is_some_and(|i| e.netdev.as_deref() == Some(i));
    let chosen = *candidates
        .iter()
        .find(|e| ndev_match(e))
        .or_else(|| candidates.first())?;
    let mut warnings = Vec::new();
    if candidates.len() > 1 {
        let others: Vec<&GidEntry> = candidates
            .iter()
            .copied()
            .filter(|e| !std::ptr::eq(*e, chosen))
            .collect();
        let why = if ndev_match(&chosen) {
            format!("its netdev is {}", interface.unwrap_or_default())
        } else {
            "it is the lowest".to_string()
        };
        warnings.push(format!(
            "{} RoCE v2 GIDs carry {source}; chose {} because {why}; others: {} \
             (use --ib-dev/--ib-port/--gid-index to choose)",
            candidates.len(),
            describe(chosen),
            describe_all(&others)
        ));
    }
    if let Some(i) = interface {
        if !ndev_match(&chosen) {
            warnings.push(format!(
                "the chosen GID belongs to netdev {}, not to {i}, the interface that owns {source}",
                chosen.netdev.as_deref().unwrap_or("(none)")
            ));
        }
    }
    Some(Selection {
        choice: Clone::clone(chosen),
        warnings,
    })
}

fn select_index(
    table: &GidTable,
    scoped: &[&GidEntry],
    index: u32,
    source: Ipv4Addr,
    interface: Option<&str>,
    overrides: &Overrides,
) -> Result<Selection> {
    let mut hits: Vec<&GidEntry> = scoped
        .iter()
        .copied()
        .filter(|e| e.gid_index == index)
        .collect();
    if hits.is_empty() {
        let present: Vec<String> = scoped
            .iter()
            .map(|e| format!("{}/{}/{}", e.device, e.port, e.gid_index))
            .collect();
        return Err(Error::BadOverride(format!(
            "GID index {index} does not exist or is empty on {} (populated device/port/index: {})",
            scope_text(overrides),
            if present.is_empty() {
                "none".to_string()
            } else {
                present.join(", ")
            }
        )));
    }
    let want = gid_from_ipv4(source);
    // Best first: carries the source as RoCE v2, then ndev match, then ACTIVE, then lowest.
    hits.sort_by(|a, b| {
        let rank = |e: &GidEntry| {
            (
                !(e.gid == want && e.is_roce_v2()),
                interface.is_none_or(|i| e.netdev.as_deref() != Some(i)),
                !port_active(table, e),
            )
        };
        rank(a).cmp(&rank(b)).then_with(|| lowest_first(a, b))
    });
    let chosen = hits[0];
    let mut warnings = Vec::new();
    if hits.len() > 1 {
        warnings.push(format!(
            "GID index {index} exists on several ports; chose {}; others: {} \
             (name --ib-dev/--ib-port to choose)",
            describe(chosen),
            describe_all(&hits[1..])
        ));
    }
    let here = format!(
        "GID index {index} on {} port {}",
        chosen.device, chosen.port
    );
    match &chosen.gid_type {
        Some(GidType::RoceV2) => {}
        Some(t) => warnings.push(format!("{here} is {t}, not RoCE v2")),
        None => warnings.push(format!(
            "{here} has an unreadable type (GID of another network namespace?), not known to be \
             RoCE v2"
        )),
    }
    if chosen.gid != want {
        let carries = match chosen.ipv4() {
            Some(ip) => ip.to_string(),
            None => format!("{}", Ipv6Addr::from(chosen.gid)),
        };
        warnings.push(format!(
            "{here} carries {carries}, not the source address {source}; the peer must be able to \
             reach {carries}"
        ));
    }
    if !port_active(table, chosen) {
        warnings.push(format!(
            "{} port {} is {}, not ACTIVE",
            chosen.device,
            chosen.port,
            port_state(table, chosen)
        ));
    }
    Ok(Selection {
        choice: Clone::clone(chosen),
        warnings,
    })
}

/// Explains why no candidate was found.
fn diagnose(
    table: &GidTable,
    scoped: &[&GidEntry],
    source: Ipv4Addr,
    overrides: &Overrides,
) -> String {
    if table.is_empty() {
        return "no RDMA devices (no /sys/class/infiniband entries)".to_string();
    }
    let scope = scope_text(overrides);
    let want = gid_from_ipv4(source);
    let same_ip: Vec<&GidEntry> = scoped.iter().copied().filter(|e| e.gid == want).collect();

    let v2_inactive: Vec<&GidEntry> = same_ip
        .iter()
        .copied()
        .filter(|e| e.is_roce_v2() && !port_active(table, e))
        .collect();
    if let Some(first) = v2_inactive.first() {
        return format!(
            "the RoCE v2 GID for {source} exists ({}) but the port state is {}, not ACTIVE; \
             check the link (cable, switch port, `ip link set {} up`)",
            describe_all(&v2_inactive),
            port_state(table, first),
            first.netdev.as_deref().unwrap_or("<netdev>")
        );
    }
    let unknown: Vec<&GidEntry> = same_ip
        .iter()
        .copied()
        .filter(|e| e.gid_type.is_none())
        .collect();
    if !unknown.is_empty() {
        return format!(
            "a GID for {source} exists ({}) but its gid_attrs/types entry cannot be read: GID \
             belongs to another network namespace? Run where the RoCE netdev lives, or name \
             --device/--gid-index",
            describe_all(&unknown)
        );
    }
    let v1: Vec<&GidEntry> = same_ip
        .iter()
        .copied()
        .filter(|e| e.gid_type == Some(GidType::RoceV1))
        .collect();
    if !v1.is_empty() {
        return format!(
            "{source} has only RoCE v1 GIDs ({}); RoCE v2 is missing (v1 only); enable RoCE v2 \
             on the device (RoCE v1 is not routable)",
            describe_all(&v1)
        );
    }
    if let Some(e) = same_ip.first() {
        let t = e.gid_type.as_ref().map_or("unknown", |t| t.as_sysfs_str());
        return format!(
            "{source} has GIDs only of type {t:?} ({}), none RoCE v2",
            describe_all(&same_ip)
        );
    }

    // The address is not in the table at all.
    let v4_v2: Vec<String> = dedup(
        scoped
            .iter()
            .filter(|e| e.is_roce_v2())
            .filter_map(|e| {
                e.ipv4().map(|ip| {
                    let mut s = format!("{ip} ({} port {}", e.device, e.port);
                    if let Some(n) = &e.netdev {
                        s.push_str(&format!(", {n}"));
                    }
                    if !port_active(table, e) {
                        s.push_str(&format!(", port {}", port_state(table, e)));
                    }
                    s.push(')');
                    s
                })
            })
            .collect(),
    );
    if !v4_v2.is_empty() {
        return format!(
            "{source} is not on any RDMA port ({scope}); the bootstrap address is probably a \
             management IP; use the peer's RoCE-network address (local IPv4 addresses with RoCE v2 \
             GIDs: {})",
            v4_v2.join(", ")
        );
    }
    let v4_other: Vec<String> = dedup(
        scoped
            .iter()
            .filter_map(|e| {
                e.ipv4().map(|ip| {
                    let t = e.gid_type.as_ref().map_or("?", |t| t.short());
                    format!("{ip} ({t})")
                })
            })
            .collect(),
    );
    if !v4_other.is_empty() {
        return format!(
            "{source} is not on any RDMA port ({scope}) and no IPv4 address has a RoCE v2 GID \
             (IPv4 GIDs present: {}); the bootstrap address is probably a management IP, and \
             RoCE v2 is missing",
            v4_other.join(", ")
        );
    }
    if !scoped.is_empty() {
        let v6: Vec<String> = dedup(
            scoped
                .iter()
                .map(|e| Ipv6Addr::from(e.gid).to_string())
                .collect(),
        );
        return format!(
            "the RDMA ports ({scope}) carry only IPv6 GIDs ({}); no IPv4 address is configured \
             on a RoCE netdev: add {source}'s network to the RoCE interface or bootstrap over an \
             address that is on it",
            v6.join(", ")
        );
    }
    format!(
        "the RDMA ports ({scope}) have no populated GIDs; is the RoCE netdev up and does it have \
         an address?"
    )
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(v.len());
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::PortInfo;

    fn entry(dev: &str, index: u32, ip: Ipv4Addr, t: GidType, nd: &str) -> GidEntry {
        GidEntry {
            device: dev.into(),
            port: 1,
            gid_index: index,
            gid: gid_from_ipv4(ip),
            gid_type: Some(t),
            netdev: Some(nd.into()),
        }
    }

    fn port(dev: &str, state: &str) -> PortInfo {
        PortInfo {
            device: dev.into(),
            port: 1,
            state: state.into(),
            link_layer: Some("Ethernet".into()),
        }
    }

    const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

    #[test]
    fn picks_v2_over_v1() {
        let t = GidTable {
            entries: vec![
                entry("mlx5_0", 2, IP, GidType::RoceV1, "eth0"),
                entry("mlx5_0", 3, IP, GidType::RoceV2, "eth0"),
            ],
            ports: vec![port("mlx5_0", "ACTIVE")],
        };
        let s = select(&t, IP, Some("eth0"), &Overrides::default());
        let s = s.map_err(|e| e.to_string());
        assert_eq!(s.as_ref().map(|s| s.choice.gid_index), Ok(3));
        assert_eq!(s.map(|s| s.warnings), Ok(vec![]));
    }

    #[test]
    fn warns_on_netdev_mismatch() {
        let t = GidTable {
            entries: vec![entry("mlx5_0", 3, IP, GidType::RoceV2, "eth0")],
            ports: vec![port("mlx5_0", "ACTIVE")],
        };
        let w = select(&t, IP, Some("macvlan0"), &Overrides::default())
            .map(|s| s.warnings)
            .unwrap_or_default();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("netdev eth0, not to macvlan0"), "{w:?}");
    }

    #[test]
    fn choice_json_has_doctor_fields() {
        let e = entry("mlx5_0", 3, IP, GidType::RoceV2, "eth0");
        let v = serde_json::to_value(Clone::clone(&e)).unwrap_or_default();
        assert_eq!(v["device"], "mlx5_0");
        assert_eq!(v["port"], 1);
        assert_eq!(v["gid_index"], 3);
        assert_eq!(v["gid"], "0000:0000:0000:0000:0000:ffff:0a00:0001");
        assert_eq!(v["netdev"], "eth0");
        assert_eq!(v["gid_type"], "RoCE v2");
    }

    #[test]
    fn bad_port_override() {
        let t = GidTable {
            entries: vec![entry("mlx5_0", 3, IP, GidType::RoceV2, "eth0")],
            ports: vec![port("mlx5_0", "ACTIVE")],
        };
        let o = Overrides {
            port: Some(2),
            ..Overrides::default()
        };
        match select(&t, IP, None, &o) {
            Err(Error::BadOverride(m)) => {
                assert!(m.contains("port 2 not found"), "{m}");
                assert!(m.contains("mlx5_0 port 1"), "{m}");
            }
            other => panic!("expected BadOverride, got {other:?}"),
        }
    }
}
