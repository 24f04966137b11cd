//! GID table reading and RoCE v2 selection over fixture sysfs trees built in a temp dir.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use rdma_container::roce::{
    gid_from_ipv4, parse_gid, render_table, select, GidTable, GidType, Overrides, Selection,
};
use rdma_container::Error;

const FE80_A: &str = "fe80:0000:0000:0000:ba59:9fff:fe1a:e4c2";
const FE80_B: &str = "fe80:0000:0000:0000:ba59:9fff:fe1a:e4c3";
const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
const V1: &str = "IB/RoCE v1";
const V2: &str = "RoCE v2";

/// A fake `/sys` under a temp dir.
struct Sysfs {
    dir: tempfile::TempDir,
}

impl Sysfs {
    fn new() -> Sysfs {
        Sysfs {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn port_dir(&self, dev: &str, port: u32) -> PathBuf {
        self.root()
            .join("class/infiniband")
            .join(dev)
            .join("ports")
            .join(port.to_string())
    }

    /// Creates a port with a state file (`4: ACTIVE` style) and link layer.
    fn port(&self, dev: &str, port: u32, state: &str, link_layer: &str) {
        let p = self.port_dir(dev, port);
        for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            fs::create_dir_all(p.join(sub)).expect("mkdir");
        }
        fs::write(p.join("state"), format!("{state}\n")).expect("state");
        fs::write(p.join("link_layer"), format!("{link_layer}\n")).expect("link_layer");
    }

    fn active(&self, dev: &str, port: u32) {
        self.port(dev, port, "4: ACTIVE", "Ethernet");
    }

    /// Writes gids/<i> and, when given, gid_attrs/types/<i> and gid_attrs/ndevs/<i>.
    fn gid(&self, dev: &str, port: u32, i: u32, gid: &str, ty: Option<&str>, ndev: Option<&str>) {
        let p = self.port_dir(dev, port);
        fs::write(p.join("gids").join(i.to_string()), format!("{gid}\n")).expect("gid");
        if let Some(ty) = ty {
            fs::write(
                p.join("gid_attrs/types").join(i.to_string()),
                format!("{ty}\n"),
            )
            .expect("type");
        }
        if let Some(nd) = ndev {
            fs::write(
                p.join("gid_attrs/ndevs").join(i.to_string()),
                format!("{nd}\n"),
            )
            .expect("ndev");
        }
    }

    /// The mlx5 layout: a v1/v2 pair at `base`/`base + 1`.
    fn pair(&self, dev: &str, port: u32, base: u32, gid: &str, ndev: &str) {
        self.gid(dev, port, base, gid, Some(V1), Some(ndev));
        self.gid(dev, port, base + 1, gid, Some(V2), Some(ndev));
    }

    /// A v1/v2 pair for an IPv4 address.
    fn pair4(&self, dev: &str, port: u32, base: u32, ip: [u8; 4], ndev: &str) {
        self.pair(dev, port, base, &sysfs_gid(ip), ndev);
    }

    /// Empty slots, as the kernel shows them.
    fn zeros(&self, dev: &str, port: u32, from: u32, to: u32) {
        for i in from..to {
            self.gid(dev, port, i, ZERO, None, None);
        }
    }

    /// Makes `types/<i>` (or `ndevs/<i>`) unreadable by turning it into a directory.
    fn unreadable(&self, dev: &str, port: u32, attr: &str, i: u32) {
        let p = self.port_dir(dev, port).join("gid_attrs").join(attr);
        let f = p.join(i.to_string());
        let _ = fs::remove_file(&f);
        fs::create_dir_all(f).expect("mkdir");
    }

    /// A typical ConnectX port: link-local pair at 0/1, IPv4 pair at 2/3, empty slots after.
    fn mlx5(&self, dev: &str, ndev: &str, ip: [u8; 4]) {
        self.active(dev, 1);
        self.pair(dev, 1, 0, FE80_A, ndev);
        self.pair4(dev, 1, 2, ip, ndev);
        self.zeros(dev, 1, 4, 8);
    }

    fn table(&self) -> GidTable {
        GidTable::read(self.root()).expect("read GID table")
    }
}

fn sysfs_gid(ip: [u8; 4]) -> String {
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    )
}

fn ip(a: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(a)
}

fn ok(r: rdma_container::Result<Selection>) -> Selection {
    match r {
        Ok(s) => s,
        Err(e) => panic!("expected a selection, got: {e}"),
    }
}

/// Returns (hint, table, netdev) of a NoRoceGid error.
fn no_gid(
    r: rdma_container::Result<Selection>,
    want_ip: Ipv4Addr,
) -> (String, String, Option<String>) {
    match r {
        Err(Error::NoRoceGid {
            ip,
            netdev,
            hint,
            table,
        }) => {
            assert_eq!(ip, want_ip);
            (hint, table, netdev)
        }
        other => panic!("expected NoRoceGid, got {other:?}"),
    }
}

fn bad_override(r: rdma_container::Result<Selection>) -> String {
    match r {
        Err(Error::BadOverride(m)) => m,
        other => panic!("expected BadOverride, got {other:?}"),
    }
}

fn none() -> Overrides {
    Overrides::default()
}

#[test]
fn mlx5_pairs_pick_ipv4_roce_v2_index_3() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 7, 159, 71]);
    // A bare fe80:: entry is hidden like show_gids does.
    fx.gid(
        "mlx5_0",
        1,
        9,
        "fe80:0000:0000:0000:0000:0000:0000:0000",
        Some(V2),
        None,
    );
    let t = fx.table();

    assert_eq!(t.ports.len(), 1);
    let p = t.port("mlx5_0", 1).expect("port");
    assert_eq!(p.state, "ACTIVE");
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
    assert!(t.port("mlx5_0", 2).is_none());

    let idx: Vec<u32> = t.entries.iter().map(|e| e.index).collect();
    assert_eq!(idx, vec![0, 1, 2, 3]);
    assert_eq!(t.entries[0].gid_type, Some(GidType::RoceV1));
    assert_eq!(t.entries[1].gid_type, Some(GidType::RoceV2));
    assert_eq!(t.entries[1].gid_string(), FE80_A);
    assert_eq!(t.entries[1].ipv4(), None);
    assert_eq!(t.entries[3].ipv4(), Some(ip([10, 7, 159, 71])));
    assert_eq!(t.entries[3].netdev.as_deref(), Some("ens1f0"));

    let s = ok(select(&t, ip([10, 7, 159, 71]), Some("ens1f0"), &none()));
    assert_eq!(s.choice.device, "mlx5_0");
    assert_eq!(s.choice.port, 1);
    assert_eq!(s.choice.gid_index, 3);
    assert_eq!(s.choice.gid, gid_from_ipv4(ip([10, 7, 159, 71])));
    assert_eq!(s.choice.netdev.as_deref(), Some("ens1f0"));
    assert_eq!(s.choice.gid_type, Some(GidType::RoceV2));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);

    // Without an interface the answer is the same and still unambiguous.
    let s = ok(select(&t, ip([10, 7, 159, 71]), None, &none()));
    assert_eq!(s.choice.gid_index, 3);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn doctor_json_has_the_choice_fields() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    let s = ok(select(&fx.table(), ip([10, 0, 0, 1]), None, &none()));
    let v = serde_json::to_value(&s.choice).expect("json");
    assert_eq!(v["device"], "mlx5_0");
    assert_eq!(v["port"], 1);
    assert_eq!(v["gid_index"], 3);
    assert_eq!(v["gid"], "0000:0000:0000:0000:0000:ffff:0a00:0001");
    assert_eq!(v["netdev"], "ens1f0");
    assert_eq!(
        s.choice.gid_string(),
        "0000:0000:0000:0000:0000:ffff:0a00:0001"
    );
}

#[test]
fn vlan_pairs_select_by_ip() {
    let fx = Sysfs::new();
    fx.active("mlx5_0", 1);
    fx.pair("mlx5_0", 1, 0, FE80_A, "ens1f0");
    fx.pair4("mlx5_0", 1, 2, [10, 0, 0, 1], "ens1f0");
    fx.pair("mlx5_0", 1, 4, FE80_A, "ens1f0.100");
    fx.pair4("mlx5_0", 1, 6, [192, 168, 100, 1], "ens1f0.100");
    let t = fx.table();
    assert_eq!(t.entries.len(), 8);

    let s = ok(select(
        &t,
        ip([192, 168, 100, 1]),
        Some("ens1f0.100"),
        &none(),
    ));
    assert_eq!(s.choice.gid_index, 7);
    assert_eq!(s.choice.netdev.as_deref(), Some("ens1f0.100"));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &none()));
    assert_eq!(s.choice.gid_index, 3);
    assert_eq!(s.choice.netdev.as_deref(), Some("ens1f0"));
}

#[test]
fn vlan_same_ip_prefers_the_netdev_match() {
    // The same address on the base interface and on a VLAN: the interface decides.
    let fx = Sysfs::new();
    fx.active("mlx5_0", 1);
    fx.pair("mlx5_0", 1, 0, FE80_A, "ens1f0");
    fx.pair4("mlx5_0", 1, 2, [10, 0, 0, 1], "ens1f0");
    fx.pair4("mlx5_0", 1, 4, [10, 0, 0, 1], "ens1f0.100");
    let t = fx.table();

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0.100"), &none()));
    assert_eq!(s.choice.gid_index, 5);
    assert_eq!(s.choice.netdev.as_deref(), Some("ens1f0.100"));
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("its netdev is ens1f0.100"),
        "{}",
        s.warnings[0]
    );
    assert!(
        s.warnings[0].contains("mlx5_0 port 1 index 3 (ens1f0)"),
        "{}",
        s.warnings[0]
    );

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &none()));
    assert_eq!(s.choice.gid_index, 3);
    assert!(
        s.warnings[0].contains("index 5 (ens1f0.100)"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn two_devices_pick_by_ip() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    fx.mlx5("mlx5_1", "ens1f1", [10, 0, 1, 1]);
    let t = fx.table();
    assert_eq!(t.ports.len(), 2);
    assert_eq!(t.entries.len(), 8);

    let s = ok(select(&t, ip([10, 0, 1, 1]), Some("ens1f1"), &none()));
    assert_eq!(s.choice.device, "mlx5_1");
    assert_eq!(s.choice.gid_index, 3);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &none()));
    assert_eq!(s.choice.device, "mlx5_0");
}

#[test]
fn two_devices_same_ip_prefer_ndev_then_lowest() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 5]);
    fx.mlx5("mlx5_1", "ens1f1", [10, 0, 0, 5]);
    let t = fx.table();

    let s = ok(select(&t, ip([10, 0, 0, 5]), Some("ens1f1"), &none()));
    assert_eq!(s.choice.device, "mlx5_1");
    assert_eq!(s.choice.gid_index, 3);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("2 RoCE v2 GIDs carry 10.0.0.5"),
        "{}",
        s.warnings[0]
    );
    assert!(
        s.warnings[0].contains("mlx5_0 port 1 index 3 (ens1f0)"),
        "{}",
        s.warnings[0]
    );

    let s = ok(select(&t, ip([10, 0, 0, 5]), None, &none()));
    assert_eq!(s.choice.device, "mlx5_0");
    assert!(
        s.warnings[0].contains("it is the lowest"),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings[0].contains("mlx5_1 port 1 index 3 (ens1f1)"),
        "{:?}",
        s.warnings
    );

    // An interface that owns the IP but has no GID: lowest, plus a netdev warning.
    let s = ok(select(&t, ip([10, 0, 0, 5]), Some("macvlan0"), &none()));
    assert_eq!(s.choice.device, "mlx5_0");
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert!(
        s.warnings[1].contains("not to macvlan0"),
        "{:?}",
        s.warnings
    );

    // --device restricts the choice.
    let o = Overrides {
        device: Some("mlx5_1".into()),
        ..Overrides::default()
    };
    let s = ok(select(&t, ip([10, 0, 0, 5]), None, &o));
    assert_eq!(s.choice.device, "mlx5_1");
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn device_names_sort_naturally() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_10", "ens10", [10, 0, 0, 5]);
    fx.mlx5("mlx5_2", "ens2", [10, 0, 0, 5]);
    let t = fx.table();
    assert_eq!(t.ports[0].device, "mlx5_2");
    assert_eq!(t.entries[0].device, "mlx5_2");
    let s = ok(select(&t, ip([10, 0, 0, 5]), None, &none()));
    assert_eq!(s.choice.device, "mlx5_2");
}

#[test]
fn bond_lag_device() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_bond_0", "bond0", [172, 16, 0, 7]);
    let s = ok(select(
        &fx.table(),
        ip([172, 16, 0, 7]),
        Some("bond0"),
        &none(),
    ));
    assert_eq!(s.choice.device, "mlx5_bond_0");
    assert_eq!(s.choice.gid_index, 3);
    assert_eq!(s.choice.netdev.as_deref(), Some("bond0"));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn bond_ip_on_two_ports_prefers_lowest_and_warns() {
    // Without LAG both ports may briefly carry the bond's address.
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "bond0", [172, 16, 0, 7]);
    fx.mlx5("mlx5_1", "bond0", [172, 16, 0, 7]);
    let s = ok(select(
        &fx.table(),
        ip([172, 16, 0, 7]),
        Some("bond0"),
        &none(),
    ));
    assert_eq!(s.choice.device, "mlx5_0");
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("mlx5_1 port 1 index 3 (bond0)"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn v1_only_is_refused_with_hint() {
    let fx = Sysfs::new();
    fx.active("mlx5_0", 1);
    fx.gid("mlx5_0", 1, 0, FE80_A, Some(V1), Some("ens1f0"));
    fx.gid(
        "mlx5_0",
        1,
        1,
        &sysfs_gid([10, 0, 0, 1]),
        Some(V1),
        Some("ens1f0"),
    );
    let t = fx.table();
    let (hint, table, netdev) = no_gid(
        select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &none()),
        ip([10, 0, 0, 1]),
    );
    assert!(hint.contains("RoCE v2 is missing (v1 only)"), "{hint}");
    assert!(hint.contains("mlx5_0 port 1 index 1 (ens1f0)"), "{hint}");
    assert_eq!(netdev.as_deref(), Some("ens1f0"));
    assert!(table.contains("10.0.0.1"), "{table}");
    assert!(table.contains("2 GIDs found"), "{table}");
}

#[test]
fn ipv6_only_is_refused_with_hint() {
    let fx = Sysfs::new();
    fx.active("mlx5_0", 1);
    fx.pair("mlx5_0", 1, 0, FE80_A, "ens1f0");
    fx.pair(
        "mlx5_0",
        1,
        2,
        "2001:0db8:0000:0000:0000:0000:0000:0001",
        "ens1f0",
    );
    let (hint, _, _) = no_gid(
        select(&fx.table(), ip([10, 0, 0, 1]), None, &none()),
        ip([10, 0, 0, 1]),
    );
    assert!(hint.contains("only IPv6 GIDs"), "{hint}");
    assert!(hint.contains("2001:db8::1"), "{hint}");
}

#[test]
fn unreadable_type_is_skipped_not_fatal() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    // A GID of another namespace: type and netdev cannot be read.
    fx.gid("mlx5_0", 1, 4, &sysfs_gid([10, 0, 0, 9]), None, None);
    fx.unreadable("mlx5_0", 1, "types", 4);
    fx.unreadable("mlx5_0", 1, "ndevs", 4);
    let t = fx.table();
    let e = t
        .entries
        .iter()
        .find(|e| e.index == 4)
        .expect("entry 4 kept");
    assert_eq!(e.gid_type, None);
    assert_eq!(e.netdev, None);
    assert_eq!(e.ipv4(), Some(ip([10, 0, 0, 9])));

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &none()));
    assert_eq!(s.choice.gid_index, 3);

    let (hint, table, _) = no_gid(
        select(&t, ip([10, 0, 0, 9]), None, &none()),
        ip([10, 0, 0, 9]),
    );
    assert!(
        hint.contains("GID belongs to another network namespace?"),
        "{hint}"
    );
    assert!(hint.contains("mlx5_0 port 1 index 4 (no netdev)"), "{hint}");
    let row = table
        .lines()
        .find(|l| l.contains("10.0.0.9"))
        .expect("row for 10.0.0.9");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols,
        vec![
            "mlx5_0",
            "1",
            "4",
            &sysfs_gid([10, 0, 0, 9]),
            "10.0.0.9",
            "?"
        ]
    );
}

#[test]
fn port_not_active_is_refused_with_state() {
    let fx = Sysfs::new();
    fx.port("mlx5_0", 1, "1: DOWN", "Ethernet");
    fx.pair("mlx5_0", 1, 0, FE80_A, "ens1f0");
    fx.pair4("mlx5_0", 1, 2, [10, 0, 0, 1], "ens1f0");
    let t = fx.table();
    assert_eq!(t.port("mlx5_0", 1).map(|p| p.state.as_str()), Some("DOWN"));
    let (hint, table, _) = no_gid(
        select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &none()),
        ip([10, 0, 0, 1]),
    );
    assert!(hint.contains("port state is DOWN, not ACTIVE"), "{hint}");
    assert!(hint.contains("ip link set ens1f0 up"), "{hint}");
    assert!(table.contains("port mlx5_0 1 is DOWN"), "{table}");
}

#[test]
fn inactive_port_loses_to_active_one() {
    let fx = Sysfs::new();
    fx.port("mlx5_0", 1, "1: DOWN", "Ethernet");
    fx.pair4("mlx5_0", 1, 2, [10, 0, 0, 5], "ens1f0");
    fx.mlx5("mlx5_1", "ens1f1", [10, 0, 0, 5]);
    let s = ok(select(
        &fx.table(),
        ip([10, 0, 0, 5]),
        Some("ens1f0"),
        &none(),
    ));
    assert_eq!(s.choice.device, "mlx5_1");
}

#[test]
fn loopback_refused_without_device() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    let t = fx.table();
    let (hint, _, _) = no_gid(
        select(&t, Ipv4Addr::LOCALHOST, None, &none()),
        Ipv4Addr::LOCALHOST,
    );
    assert_eq!(
        hint,
        "127/8 has no RoCE GID; use the peer's RoCE address or name --device"
    );
    let (hint, _, _) = no_gid(
        select(&t, ip([127, 1, 2, 3]), Some("lo"), &none()),
        ip([127, 1, 2, 3]),
    );
    assert!(hint.starts_with("127/8 has no RoCE GID"), "{hint}");

    // Naming the device makes it usable (its RoCE v2 IPv4 GID is used).
    let o = Overrides {
        device: Some("mlx5_0".into()),
        ..Overrides::default()
    };
    let s = ok(select(&t, Ipv4Addr::LOCALHOST, Some("lo"), &o));
    assert_eq!(s.choice.device, "mlx5_0");
    assert_eq!(s.choice.gid_index, 3);
    assert!(s.warnings[0].contains("loopback"), "{:?}", s.warnings);
}

#[test]
fn gid_index_override_picks_exact_index() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    let t = fx.table();
    let with = |i: u32| Overrides {
        device: Some("mlx5_0".into()),
        port: Some(1),
        gid_index: Some(i),
    };

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &with(3)));
    assert_eq!(s.choice.gid_index, 3);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);

    // NCCL #769's trap: index 1 is the fe80 RoCE v2 GID. Allowed, but warned about.
    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &with(1)));
    assert_eq!(s.choice.gid_index, 1);
    assert_eq!(s.choice.gid, parse_gid(FE80_A).expect("gid"));
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0]
            .contains("carries fe80::ba59:9fff:fe1a:e4c2, not the source address 10.0.0.1"),
        "{:?}",
        s.warnings
    );

    let s = ok(select(&t, ip([10, 0, 0, 1]), Some("ens1f0"), &with(2)));
    assert_eq!(s.choice.gid_index, 2);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("is IB/RoCE v1, not RoCE v2"),
        "{:?}",
        s.warnings
    );

    // Without --device the index is looked up on every port.
    let o = Overrides {
        gid_index: Some(3),
        ..Overrides::default()
    };
    let s = ok(select(&t, ip([10, 0, 0, 1]), None, &o));
    assert_eq!(
        (s.choice.device.as_str(), s.choice.gid_index),
        ("mlx5_0", 3)
    );

    // An empty slot or an index past the table does not exist.
    let m = bad_override(select(&t, ip([10, 0, 0, 1]), None, &with(5)));
    assert!(m.contains("GID index 5 does not exist"), "{m}");
    assert!(m.contains("device mlx5_0 port 1"), "{m}");
    assert!(m.contains("mlx5_0/1/3"), "{m}");
    let m = bad_override(select(&t, ip([10, 0, 0, 1]), None, &with(200)));
    assert!(m.contains("GID index 200"), "{m}");
}

#[test]
fn gid_index_override_with_loopback_source() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    let o = Overrides {
        gid_index: Some(3),
        ..Overrides::default()
    };
    let s = ok(select(&fx.table(), Ipv4Addr::LOCALHOST, Some("lo"), &o));
    assert_eq!(s.choice.gid_index, 3);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("carries 10.0.0.1, not the source address 127.0.0.1")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn bad_device_and_port_overrides() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    fx.mlx5("mlx5_1", "ens1f1", [10, 0, 1, 1]);
    let t = fx.table();

    let o = Overrides {
        device: Some("mlx5_9".into()),
        ..Overrides::default()
    };
    let m = bad_override(select(&t, ip([10, 0, 0, 1]), None, &o));
    assert!(m.contains("\"mlx5_9\" not found"), "{m}");
    assert!(m.contains("mlx5_0, mlx5_1"), "{m}");

    let o = Overrides {
        device: Some("mlx5_0".into()),
        port: Some(2),
        gid_index: None,
    };
    let m = bad_override(select(&t, ip([10, 0, 0, 1]), None, &o));
    assert!(m.contains("port 2 not found on device mlx5_0"), "{m}");

    // A device that exists but does not carry the address: normal NoRoceGid.
    let o = Overrides {
        device: Some("mlx5_1".into()),
        ..Overrides::default()
    };
    let (hint, _, _) = no_gid(select(&t, ip([10, 0, 0, 1]), None, &o), ip([10, 0, 0, 1]));
    assert!(hint.contains("(device mlx5_1)"), "{hint}");
    assert!(hint.contains("10.0.1.1 (mlx5_1 port 1, ens1f1)"), "{hint}");
    assert!(!hint.contains("10.0.0.1 (mlx5_0"), "{hint}");
}

#[test]
fn management_ip_hint_lists_roce_addresses() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    fx.mlx5("mlx5_1", "ens1f1", [10, 0, 1, 1]);
    let (hint, table, netdev) = no_gid(
        select(&fx.table(), ip([192, 168, 0, 10]), Some("eno1"), &none()),
        ip([192, 168, 0, 10]),
    );
    assert!(
        hint.contains("the bootstrap address is probably a management IP; use the peer's RoCE-network address"),
        "{hint}"
    );
    assert!(hint.contains("10.0.0.1 (mlx5_0 port 1, ens1f0)"), "{hint}");
    assert!(hint.contains("10.0.1.1 (mlx5_1 port 1, ens1f1)"), "{hint}");
    assert_eq!(netdev.as_deref(), Some("eno1"));
    assert!(table.contains("8 GIDs found"), "{table}");

    let err = select(&fx.table(), ip([192, 168, 0, 10]), Some("eno1"), &none())
        .expect_err("no GID")
        .to_string();
    assert!(
        err.starts_with("no RoCE v2 GID for 192.168.0.10 (interface eno1): "),
        "{err}"
    );
}

#[test]
fn missing_root_gives_empty_table() {
    let fx = Sysfs::new();
    let t = GidTable::read(&fx.root().join("nope")).expect("missing root is not an error");
    assert!(t.entries.is_empty());
    assert!(t.ports.is_empty());
    let r = render_table(&t);
    assert!(r.starts_with("no RDMA devices found"), "{r}");
    let (hint, table, _) = no_gid(
        select(&t, ip([10, 0, 0, 1]), None, &none()),
        ip([10, 0, 0, 1]),
    );
    assert_eq!(hint, "no RDMA devices (no /sys/class/infiniband entries)");
    assert_eq!(table, r);
    // An existing but empty class directory is the same.
    fs::create_dir_all(fx.root().join("class/infiniband")).expect("mkdir");
    assert!(GidTable::read(fx.root()).expect("read").entries.is_empty());
}

#[test]
fn unlistable_class_dir_is_a_sysfs_error() {
    let fx = Sysfs::new();
    fs::create_dir_all(fx.root().join("class")).expect("mkdir");
    fs::write(fx.root().join("class/infiniband"), "not a dir").expect("write");
    match GidTable::read(fx.root()) {
        Err(Error::Sysfs { path, .. }) => assert!(path.ends_with("class/infiniband")),
        other => panic!("expected Sysfs error, got {other:?}"),
    }
}

#[test]
fn render_table_show_gids_style() {
    let fx = Sysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 7, 159, 71]);
    let r = render_table(&fx.table());
    let lines: Vec<&str> = r.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        vec!["DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "NETDEV"]
    );
    let rows: Vec<Vec<&str>> = lines[2..6]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], vec!["mlx5_0", "1", "0", FE80_A, "v1", "ens1f0"]);
    assert_eq!(rows[1], vec!["mlx5_0", "1", "1", FE80_A, "v2", "ens1f0"]);
    let v4 = sysfs_gid([10, 7, 159, 71]);
    assert_eq!(
        rows[2],
        vec![
            "mlx5_0",
            "1",
            "2",
            v4.as_str(),
            "10.7.159.71",
            "v1",
            "ens1f0"
        ]
    );
    assert_eq!(
        rows[3],
        vec![
            "mlx5_0",
            "1",
            "3",
            v4.as_str(),
            "10.7.159.71",
            "v2",
            "ens1f0"
        ]
    );
    assert_eq!(lines[6], "4 GIDs found");
    assert_eq!(lines.len(), 7);
    // Columns are aligned: every row starts its GID where the header's GID starts.
    let gid_col = lines[0].find("GID").expect("GID column");
    for l in &lines[1..6] {
        assert!(l[gid_col..].starts_with(['f', '0', '-']), "{l}");
    }
    assert_eq!(lines[3].find(FE80_A), Some(gid_col));
}

#[test]
fn two_ports_and_a_second_link_local() {
    let fx = Sysfs::new();
    fx.active("mlx5_0", 1);
    fx.active("mlx5_0", 2);
    fx.pair("mlx5_0", 1, 0, FE80_A, "ens1f0");
    fx.pair("mlx5_0", 2, 0, FE80_B, "ens1f1");
    fx.pair4("mlx5_0", 2, 2, [10, 0, 2, 1], "ens1f1");
    let t = fx.table();
    let s = ok(select(&t, ip([10, 0, 2, 1]), None, &none()));
    assert_eq!((s.choice.port, s.choice.gid_index), (2, 3));
    let o = Overrides {
        port: Some(1),
        ..Overrides::default()
    };
    let (hint, _, _) = no_gid(select(&t, ip([10, 0, 2, 1]), None, &o), ip([10, 0, 2, 1]));
    assert!(hint.contains("only IPv6 GIDs"), "{hint}");
    assert!(hint.contains("port 1 of any device"), "{hint}");
}
