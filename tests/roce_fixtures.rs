//! GID table reading and RoCE v2 selection over fixture sysfs trees built in a temp dir.

use std::fs;
use std::net::Ipv4Addr;

use rdma_container::roce::{
    gid_from_ipv4, parse_gid, render_table, select, GidTable, GidType, Overrides, Selection,
};
use rdma_container::Error;
use rdma_test_support::{ipv4_gid, FakeSysfs, FE80_A, FE80_B, GID_V1, GID_V2};

/// The GID table of a fake sysfs, as the library reads it.
trait ReadTable {
    fn table(&self) -> GidTable;
}

impl ReadTable for FakeSysfs {
    fn table(&self) -> GidTable {
        GidTable::read(self.root()).expect("read GID table")
    }
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
    let fx = FakeSysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 7, 159, 71]);
    // A bare fe80:: entry is hidden like show_gids does.
    fx.gid_with(
        "mlx5_0",
        1,
        9,
        "fe80:0000:0000:0000:0000:0000:0000:0000",
        Some(GID_V2),
        None,
    );
    let t = fx.table();

    assert_eq!(t.ports.len(), 1);
    let p = t.port("mlx5_0", 1).expect("port");
    assert_eq!(p.state, "ACTIVE");
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
    assert!(t.port("mlx5_0", 2).is_none());

    let idx: Vec<u32> = t.entries.iter().map(|e| e.gid_index).collect();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
    fx.active("mlx5_0", 1);
    fx.gid_with("mlx5_0", 1, 0, FE80_A, Some(GID_V1), Some("ens1f0"));
    fx.gid_with(
        "mlx5_0",
        1,
        1,
        &ipv4_gid([10, 0, 0, 1]),
        Some(GID_V1),
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
    fx.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    // A GID of another namespace: type and netdev cannot be read.
    fx.gid_with("mlx5_0", 1, 4, &ipv4_gid([10, 0, 0, 9]), None, None);
    fx.unreadable("mlx5_0", 1, "types", 4);
    fx.unreadable("mlx5_0", 1, "ndevs", 4);
    let t = fx.table();
    let e = t
        .entries
        .iter()
        .find(|e| e.gid_index == 4)
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
            &ipv4_gid([10, 0, 0, 9]),
            "10.0.0.9",
            "?"
        ]
    );
}

#[test]
fn port_not_active_is_refused_with_state() {
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
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
    let fx = FakeSysfs::new();
    fs::create_dir_all(fx.root().join("class")).expect("mkdir");
    fs::write(fx.root().join("class/infiniband"), "not a dir").expect("write");
    match GidTable::read(fx.root()) {
        Err(Error::Sysfs { path, .. }) => assert!(path.ends_with("class/infiniband")),
        other => panic!("expected Sysfs error, got {other:?}"),
    }
}

#[test]
fn render_table_show_gids_style() {
    let fx = FakeSysfs::new();
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
    let v4 = ipv4_gid([10, 7, 159, 71]);
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
    let fx = FakeSysfs::new();
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
