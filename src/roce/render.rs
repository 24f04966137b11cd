//! The `show_gids`-style rendering of a [`GidTable`].

use std::fmt::Write as _;

use super::GidTable;

const HEADERS: [&str; 7] = ["DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "NETDEV"];

/// Renders the table the way Mellanox's `show_gids` does: a header
/// `DEV PORT INDEX GID IPv4 VER NETDEV`, a dashed rule, one aligned row per GID (VER is `v1`,
/// `v2`, or `?` when the type could not be read), then a line `<n> GIDs found`. Ports that are not
/// ACTIVE are listed after the count.
///
/// An empty table (no ports, no GIDs) renders as a single line saying no RDMA devices were found.
pub fn render_table(table: &GidTable) -> String {
    if table.is_empty() {
        return "no RDMA devices found (nothing under <sysfs>/class/infiniband)\n".to_string();
    }
    let rows: Vec<[String; 7]> = table
        .entries
        .iter()
        .map(|e| {
            [
                e.device.clone(),
                e.port.to_string(),
                e.gid_index.to_string(),
                e.gid_string(),
                e.ipv4().map(|ip| ip.to_string()).unwrap_or_default(),
                e.gid_type
                    .as_ref()
                    .map_or_else(|| "?".to_string(), |t| t.short().to_string()),
                e.netdev.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    push_row(&mut out, &widths, HEADERS.iter().copied());
    push_row(
        &mut out,
        &widths,
        HEADERS
            .iter()
            .map(|h| "-".repeat(h.len()))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    for row in &rows {
        push_row(&mut out, &widths, row.iter().map(String::as_str));
    }
    let n = table.entries.len();
    let _ = writeln!(out, "{n} GID{} found", if n == 1 { "" } else { "s" });
    for p in table.ports.iter().filter(|p| !p.is_active()) {
        let _ = writeln!(
            out,
            "port {} {} is {} (link layer {})",
            p.device,
            p.port,
            p.state,
            p.link_layer.as_deref().unwrap_or("unknown")
        );
    }
    out
}

fn push_row<'a>(out: &mut String, widths: &[usize; 7], cells: impl Iterator<Item = &'a str>) {
    let mut line = String::new();
    for (cell, w) in cells.zip(widths.iter()) {
        let _ = write!(line, "{cell:<w$}  ");
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::{gid_from_ipv4, GidEntry, GidType, PortInfo};
    use std::net::Ipv4Addr;

    fn table() -> GidTable {
        GidTable {
            entries: vec![
                GidEntry {
                    device: "mlx5_0".into(),
                    port: 1,
                    gid_index: 3,
                    gid: gid_from_ipv4(Ipv4Addr::new(10, 0, 0, 1)),
                    gid_type: Some(GidType::RoceV2),
                    netdev: Some("ens1f0".into()),
                },
                GidEntry {
                    device: "mlx5_10".into(),
                    port: 1,
                    gid_index: 0,
                    gid: gid_from_ipv4(Ipv4Addr::new(10, 0, 0, 2)),
                    gid_type: None,
                    netdev: None,
                },
            ],
            ports: vec![
                PortInfo {
                    device: "mlx5_0".into(),
                    port: 1,
                    state: "ACTIVE".into(),
                    link_layer: Some("Ethernet".into()),
                },
                PortInfo {
                    device: "mlx5_10".into(),
                    port: 1,
                    state: "DOWN".into(),
                    link_layer: Some("Ethernet".into()),
                },
            ],
        }
    }

    #[test]
    fn renders_aligned_rows() {
        let s = render_table(&table());
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "DEV      PORT  INDEX  GID                                      IPv4      VER  NETDEV"
        );
        assert_eq!(
            lines[1],
            "---      ----  -----  ---                                      ----      ---  ------"
        );
        assert_eq!(
            lines[2],
            "mlx5_0   1     3      0000:0000:0000:0000:0000:ffff:0a00:0001  10.0.0.1  v2   ens1f0"
        );
        assert_eq!(
            lines[3],
            "mlx5_10  1     0      0000:0000:0000:0000:0000:ffff:0a00:0002  10.0.0.2  ?"
        );
        assert_eq!(lines[4], "2 GIDs found");
        assert_eq!(lines[5], "port mlx5_10 1 is DOWN (link layer Ethernet)");
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn renders_empty() {
        let s = render_table(&GidTable::default());
        assert!(s.starts_with("no RDMA devices found"), "{s}");
        assert_eq!(s.lines().count(), 1);
    }
}
