//! Device choice inside a Kubernetes pod, over a fake node (sysfs listing every device of the
//! node, `/dev/infiniband` holding only the pod's): the SR-IOV plugin's `PCIDEVICE_*_INFO`,
//! Multus' network-status file, the shared device plugin's single uverbs node, an ambiguous
//! resource, an explicit `--ib-dev`, and what `doctor` says about pod failure modes. The
//! two-namespace test with the RoCE address on a second interface is in tests/netns.rs.

mod common;

use common::{command, ipv4_gid, FakeHost, Proc, SHORT};
use serde_json::Value;

const POD_IP: [u8; 4] = [10, 56, 0, 7];

/// A node with mlx5_0 (the host's), mlx5_4 and mlx5_5 (two VFs), all three carrying the
/// pod's RoCE address on `net1`, as sysfs in a shared-mode pod shows them; uverbs0/4/5.
fn node() -> FakeHost {
    let h = FakeHost::empty();
    let gid = ipv4_gid(POD_IP);
    for (n, dev) in [(0, "mlx5_0"), (4, "mlx5_4"), (5, "mlx5_5")] {
        h.sysfs().port(dev, 1, "4: ACTIVE", "Ethernet");
        h.sysfs().gid(dev, 1, 3, &gid, "RoCE v2", "net1");
        h.uverbs(n, dev);
    }
    h.netdev("net1");
    h.node("rdma_cm");
    h
}

/// `doctor --json --local-ip POD_IP` on `host` with the extra environment.
fn doctor(host: &FakeHost, args: &[&str], env: &[(&str, String)]) -> Value {
    let root = host.path("sys");
    let mut all = vec![
        "doctor",
        "--json",
        "--sysfs-root",
        root.to_str().expect("utf-8"),
        "--local-ip",
        "10.56.0.7",
    ];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    host.env_for(&mut cmd);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let mut p = Proc::spawn("doctor", cmd);
    assert_eq!(p.wait_code(SHORT), 0, "{}", p.report());
    serde_json::from_str(&p.stdout()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", p.report()))
}

fn problems(v: &Value) -> String {
    v["problems"].to_string()
}

fn info(devs: &[(&str, &str, u32)]) -> String {
    let members: Vec<String> = devs
        .iter()
        .map(|(pci, dev, n)| {
            format!(
                r#""{pci}":{{"generic":{{"deviceID":"{pci}"}},"rdma":{{"rdma_dev":"{dev}","uverbs":"/dev/infiniband/uverbs{n}","rdma_cm":"/dev/infiniband/rdma_cm"}}}}"#
            )
        })
        .collect();
    format!("{{{}}}", members.join(","))
}

#[test]
fn sriov_pcidevice_info_picks_the_pods_vf_over_the_lowest_device() {
    let host = node();
    for n in [0, 4, 5] {
        host.node(&format!("uverbs{n}"));
    }
    // Without the variable every device is a candidate: the lowest wins (with a warning).
    let v = doctor(&host, &[], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_0", "{v}");
    let env = [(
        "PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO",
        info(&[("0000:3b:00.3", "mlx5_5", 5)]),
    )];
    let v = doctor(&host, &[], &env);
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_eq!(v["choice"]["gid_index"], 3, "{v}");
    assert!(
        v["considered"]
            .as_str()
            .unwrap_or_default()
            .contains("PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO gives mlx5_5"),
        "{v}"
    );
    // An explicit --ib-dev still wins.
    let v = doctor(&host, &["--ib-dev", "mlx5_4"], &env);
    assert_eq!(v["choice"]["device"], "mlx5_4", "{v}");
}

#[test]
fn two_devices_for_one_resource_is_an_error_naming_both() {
    let host = node();
    for n in [4, 5] {
        host.node(&format!("uverbs{n}"));
    }
    let env = [(
        "PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO",
        info(&[("0000:3b:00.2", "mlx5_4", 4), ("0000:3b:00.3", "mlx5_5", 5)]),
    )];
    let v = doctor(&host, &[], &env);
    assert!(v["choice"].is_null(), "{v}");
    let p = problems(&v);
    assert!(
        p.contains("names 2 RDMA devices (mlx5_4 and mlx5_5)"),
        "{p}"
    );
    // A session refuses to guess too, even with --transport auto (the server runs TCP).
    let port = common::free_port();
    let addr = format!("{}:{port}", common::test_ip());
    // Started here, not with common::server (which adds RDMA_TEST_TRANSPORT's transport).
    let mut server = Proc::spawn(
        "server",
        command(&["--server", &addr, "--transport", "tcp", "--quiet"]),
    );
    server.wait_for_stderr("listening on", SHORT);
    let root = host.path("sys");
    let mut cmd = command(&[
        "--client",
        &addr,
        "--sysfs-root",
        root.to_str().expect("utf-8"),
    ]);
    cmd.env("RDMA_CONTAINER_DEV_ROOT", host.path("dev"))
        .env(env[0].0, &env[0].1);
    let mut p = Proc::spawn("client", cmd);
    assert_eq!(p.wait_code(SHORT), 1, "{}", p.report());
    assert!(
        p.stderr()
            .contains("cannot tell which RDMA device is this pod's")
            && p.stderr().contains("mlx5_4 and mlx5_5"),
        "{}",
        p.report()
    );
}

#[test]
fn shared_device_plugin_only_the_uverbs_node_in_the_pod_counts() {
    let host = node();
    host.node("uverbs4");
    let v = doctor(&host, &[], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_4", "{v}");
    assert_eq!(v["visible_devices"], serde_json::json!(["mlx5_4"]), "{v}");
    assert!(
        v["considered"]
            .as_str()
            .unwrap_or_default()
            .contains("uverbs node"),
        "{v}"
    );
}

#[test]
fn multus_network_status_names_the_device_by_pci_address() {
    let host = node();
    for n in [0, 4, 5] {
        host.node(&format!("uverbs{n}"));
    }
    host.write(
        "sys/bus/pci/devices/0000:3b:00.2/infiniband/mlx5_4/.keep",
        "",
    );
    let status = r#"[{"name":"cbr0","interface":"eth0","ips":["10.244.1.5"],"default":true},{"name":"default/roce-net","interface":"net1","ips":["10.56.0.7"],"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2"}}}]"#;
    host.write(
        "podnetinfo/annotations",
        &format!(
            "k8s.v1.cni.cncf.io/network-status={}\n",
            serde_json::to_string(status).expect("quote")
        ),
    );
    let v = doctor(&host, &[], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_4", "{v}");
    assert!(
        v["considered"]
            .as_str()
            .unwrap_or_default()
            .contains("default/roce-net"),
        "{v}"
    );
}

#[test]
fn doctor_explains_pod_failure_modes() {
    let host = node();
    host.node("uverbs4");
    // The pod's net1 is not there: mlx5_4's GIDs belong to a netdev of another namespace.
    host.remove("sys/class/net/net1");
    host.write("sys/module/ib_core/parameters/netns_mode", "Y\n");
    let v = doctor(&host, &[], &[]);
    let p = problems(&v);
    assert!(
        p.contains("mlx5_4 has no network interface in this network namespace"),
        "{p}"
    );
    assert!(p.contains("shared mode"), "{p}");
    assert_eq!(v["rdma_netns_mode"], "shared", "{v}");
    // A VF port whose GIDs are all zero (the netdev has no address).
    host.sysfs().port("mlx5_6", 1, "4: ACTIVE", "Ethernet");
    host.uverbs(6, "mlx5_6");
    host.node("uverbs6");
    let v = doctor(&host, &["--ib-dev", "mlx5_6"], &[]);
    assert!(
        problems(&v).contains("all GIDs of mlx5_6 port 1 are zero"),
        "{v}"
    );
    // Exclusive mode and no device in the namespace.
    let empty = FakeHost::empty();
    empty.write("sys/module/ib_core/parameters/netns_mode", "N\n");
    let v = doctor(&empty, &[], &[]);
    assert!(
        problems(&v).contains("exclusive network namespace mode"),
        "{v}"
    );
}

#[test]
fn on_a_host_another_namespaces_device_is_not_a_problem_of_this_one() {
    // Every uverbs node present (nothing narrowed); mlx5_9's netdev lives in another namespace
    // while the chosen devices have theirs here: no line about mlx5_9.
    let host = node();
    for n in [0, 4, 5, 9] {
        host.node(&format!("uverbs{n}"));
    }
    host.sysfs().port("mlx5_9", 1, "4: ACTIVE", "Ethernet");
    host.sysfs()
        .gid("mlx5_9", 1, 1, &ipv4_gid([10, 99, 0, 1]), "RoCE v2", "vB");
    host.uverbs(9, "mlx5_9");
    let v = doctor(&host, &["--ib-dev", "mlx5_0"], &[]);
    assert!(
        !problems(&v).contains("mlx5_9 has no network interface"),
        "{v}"
    );
}
