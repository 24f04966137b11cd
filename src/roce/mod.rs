//! RoCE device and GID choice, and an RDMA port's sysfs counters.
//!
//! The kernel publishes each RDMA port's GID table in sysfs
//! (`<sysfs>/class/infiniband/<dev>/ports/<p>/gids/<i>` with `gid_attrs/types/<i>` and
//! `gid_attrs/ndevs/<i>`). This module reads that table ([`GidTable::read`], the root is
//! injectable so tests can build fixture trees), picks the RoCE v2 GID that carries the source
//! address of the bootstrap connection ([`select()`], rdma_cm's rule, see docs/design.md "How the
//! device and GID are chosen"), renders the table the way `show_gids` does ([`render_table`]),
//! and derives a RoCE port's active MTU from its netdev's MTU ([`roce_active_mtu`]).
//! [`counters`] reads a port's sysfs counters (`ports/<p>/counters/` and `hw_counters/`), which
//! the program's metrics and `bench` show.
//!
//! Nothing here talks to the RDMA stack itself; only the file system is read.

pub mod counters;
mod gid;
pub mod pod;
mod render;
mod select;
mod table;

use serde::{Serialize, Serializer};

pub use gid::{gid_from_ipv4, gid_string, parse_gid};
pub use render::render_table;
pub use select::{check_overrides, select, DeviceChoice, Overrides, Selection};
pub use table::{GidTable, PortInfo};

/// The RoCE version (GID type) of one GID table entry, from `gid_attrs/types/<i>`.
///
/// The kernel writes `IB/RoCE v1` for both InfiniBand and RoCE v1 GIDs; it is read as
/// [`GidType::RoceV1`]. Serializes as the sysfs string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GidType {
    /// `IB/RoCE v1`: RoCE v1 (not routable) or, on an InfiniBand port, an IB GID.
    RoceV1,
    /// `RoCE v2`: RoCE over UDP/IP, the type this crate needs.
    RoceV2,
    /// `IB`: a plain InfiniBand GID (not written by current kernels, accepted for completeness).
    Ib,
    /// Any other string the kernel may write in the future (kept verbatim, trimmed).
    Other(String),
}

impl GidType {
    /// Parses the content of a `gid_attrs/types/<i>` file (surrounding whitespace ignored).
    pub fn from_sysfs(s: &str) -> GidType {
        match s.trim() {
            "IB/RoCE v1" | "RoCE v1" => GidType::RoceV1,
            "RoCE v2" => GidType::RoceV2,
            "IB" => GidType::Ib,
            other => GidType::Other(other.to_string()),
        }
    }

    /// The string sysfs uses for this type (`IB/RoCE v1`, `RoCE v2`, `IB`, or the unknown text).
    pub fn as_sysfs_str(&self) -> &str {
        match self {
            GidType::RoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
            GidType::Ib => "IB",
            GidType::Other(s) => s,
        }
    }

    /// The short form `show_gids` prints in its VER column: `v1`, `v2`, `IB`, or the unknown text.
    pub fn short(&self) -> &str {
        match self {
            GidType::RoceV1 => "v1",
            GidType::RoceV2 => "v2",
            GidType::Ib => "IB",
            GidType::Other(s) => s,
        }
    }
}

impl std::fmt::Display for GidType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_sysfs_str())
    }
}

impl Serialize for GidType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_sysfs_str())
    }
}

/// One populated GID table entry of one RDMA port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    /// The RDMA device name (`mlx5_0`, `rxe0`, ...).
    pub device: String,
    /// The port number (1-based, as in sysfs).
    pub port: u32,
    /// The GID index (perftest's `-x`, verbs' `sgid_index`).
    pub gid_index: u32,
    /// The 16-byte GID value (serialized in sysfs' 8-group form).
    #[serde(serialize_with = "gid::serialize_gid")]
    pub gid: [u8; 16],
    /// The GID type; `None` when `gid_attrs/types/<i>` could not be read (the kernel answers
    /// EINVAL for GIDs whose netdev lives in another network namespace).
    pub gid_type: Option<GidType>,
    /// The netdev the GID belongs to (`gid_attrs/ndevs/<i>`), when there is one and it is readable.
    pub netdev: Option<String>,
}

impl GidEntry {
    /// The IPv4 address this GID carries, when it is IPv4-mapped (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        gid::gid_ipv4(&self.gid)
    }

    /// The GID in sysfs style: eight full 4-hex-digit groups separated by `:`.
    pub fn gid_string(&self) -> String {
        gid_string(&self.gid)
    }

    /// True when the type is known to be RoCE v2.
    pub fn is_roce_v2(&self) -> bool {
        self.gid_type == Some(GidType::RoceV2)
    }
}

/// The RoCE v2 headers the kernel takes off a netdev MTU to get a port's active MTU
/// (`iboe_get_mtu`: GRH 40 + UDP 8 + BTH 12 + XRC ETH 4 + AtomicETH 28 + ICRC 4).
pub const ROCE_HEADER_BYTES: u32 = 96;

/// The IB MTUs, smallest first.
pub(crate) const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// The RoCE active MTU a netdev MTU allows: the largest IB MTU not above `netdev_mtu` less
/// [`ROCE_HEADER_BYTES`] (the kernel's rule); `None` below 256.
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(ROCE_HEADER_BYTES)?;
    IB_MTUS.iter().rev().copied().find(|&m| m <= room)
}

/// Orders names the way people read them: `mlx5_2` before `mlx5_10`.
///
/// Runs of ASCII digits compare by numeric value, everything else byte-wise; equal keys fall back
/// to a plain string comparison so the order is total.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;

    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut prev_digit = None;
        for (i, c) in s.char_indices() {
            let d = c.is_ascii_digit();
            if prev_digit.is_some_and(|p| p != d) {
                out.push((prev_digit == Some(true), &s[start..i]));
                start = i;
            }
            prev_digit = Some(d);
        }
        if start < s.len() {
            out.push((prev_digit == Some(true), &s[start..]));
        }
        out
    }

    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(cb.iter()) {
        let ord = match (x, y) {
            ((true, xs), (true, ys)) => {
                let xs = xs.trim_start_matches('0');
                let ys = ys.trim_start_matches('0');
                xs.len().cmp(&ys.len()).then_with(|| xs.cmp(ys))
            }
            ((_, xs), (_, ys)) => xs.cmp(ys),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;
    use std::net::Ipv4Addr;

    #[test]
    fn gid_type_parses_sysfs_strings() {
        assert_eq!(GidType::from_sysfs("IB/RoCE v1\n"), GidType::RoceV1);
        assert_eq!(GidType::from_sysfs("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(GidType::from_sysfs("IB"), GidType::Ib);
        assert_eq!(
            GidType::from_sysfs(" RoCE v3 "),
            GidType::Other("RoCE v3".to_string())
        );
    }

    #[test]
    fn gid_type_serializes_as_sysfs_string() {
        assert_eq!(
            serde_json::to_string(&GidType::RoceV2).ok().as_deref(),
            Some("\"RoCE v2\"")
        );
        assert_eq!(
            serde_json::to_string(&GidType::RoceV1).ok().as_deref(),
            Some("\"IB/RoCE v1\"")
        );
        assert_eq!(GidType::RoceV1.short(), "v1");
        assert_eq!(GidType::RoceV2.to_string(), "RoCE v2");
    }

    #[test]
    fn entry_helpers() {
        let e = GidEntry {
            device: "mlx5_0".into(),
            port: 1,
            gid_index: 3,
            gid: gid_from_ipv4(Ipv4Addr::new(10, 7, 159, 71)),
            gid_type: Some(GidType::RoceV2),
            netdev: Some("ens1f0".into()),
        };
        assert_eq!(e.ipv4(), Some(Ipv4Addr::new(10, 7, 159, 71)));
        assert_eq!(e.gid_string(), "0000:0000:0000:0000:0000:ffff:0a07:9f47");
        assert!(e.is_roce_v2());
        let json = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(json["gid"], "0000:0000:0000:0000:0000:ffff:0a07:9f47");
        assert_eq!(json["gid_type"], "RoCE v2");
        assert_eq!(json["netdev"], "ens1f0");
    }

    #[test]
    fn roce_active_mtu_is_the_largest_ib_mtu_below_the_netdev_mtu_less_headers() {
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(4192), Some(4096));
        assert_eq!(roce_active_mtu(4191), Some(2048));
        assert_eq!(roce_active_mtu(2144), Some(2048));
        assert_eq!(roce_active_mtu(2143), Some(1024));
        assert_eq!(roce_active_mtu(352), Some(256));
        assert_eq!(roce_active_mtu(351), None);
        assert_eq!(roce_active_mtu(0), None);
    }

    #[test]
    fn natural_order() {
        assert_eq!(natural_cmp("mlx5_2", "mlx5_10"), Ordering::Less);
        assert_eq!(natural_cmp("mlx5_10", "mlx5_2"), Ordering::Greater);
        assert_eq!(natural_cmp("mlx5_0", "mlx5_0"), Ordering::Equal);
        assert_eq!(natural_cmp("mlx5_0", "rxe0"), Ordering::Less);
        assert_eq!(natural_cmp("a", "a0"), Ordering::Less);
        assert_eq!(natural_cmp("a01", "a1"), Ordering::Less);
        assert_eq!(natural_cmp("", "a"), Ordering::Less);
    }
}
