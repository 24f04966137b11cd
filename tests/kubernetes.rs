//! Device choice inside a Kubernetes pod, over a fake node (sysfs listing every device of the
//! node, `/dev/infiniband` holding only the pod's), from every exposure mode (src/roce/pod.rs),
//! each with a fixture under tests/fixtures/kubernetes/ in the shape of the real project's
//! output (each fixture says which document it follows): the SR-IOV plugin's
//! `PCIDEVICE_*_INFO` (current and the older format without `rdma_dev`), device-info files
//! (the device plugin's and Multus' copies), the DRA SR-IOV driver's `SRIOVNETWORK_*`, Multus'
//! network-status file, the shared device plugin's single uverbs node; a pod with an extra
//! non-RDMA VF, an ambiguous resource, an explicit `--ib-dev`, the mode `doctor` reports, and
//! what `doctor` says about pod failure modes. The two-namespace test with the RoCE address on
//! a second interface is in tests/netns.rs.
//! Then the manifests under deploy/kubernetes: the rules of scripts/check-k8s-manifests.sh
//! (each shown catching its bug) and their readiness probe, run as the kubelet would.

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

/// `doctor [--json] --local-ip POD_IP` on `host` with the extra environment: its stdout.
fn doctor_out(host: &FakeHost, json: bool, args: &[&str], env: &[(&str, String)]) -> String {
    let root = host.path("sys");
    let mut all = vec!["doctor"];
    if json {
        all.push("--json");
    }
    all.extend([
        "--sysfs-root",
        root.to_str().expect("utf-8"),
        "--local-ip",
        "10.56.0.7",
    ]);
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    host.env_for(&mut cmd);
    // The node's device-info directory, hostPath-mounted into the pod (empty unless a test
    // writes there), never this machine's.
    cmd.env("RDMA_CONTAINER_DEVINFO_ROOT", host.path("devinfo"));
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let mut p = Proc::spawn("doctor", cmd);
    assert_eq!(p.wait_code(SHORT), 0, "{}", p.report());
    p.stdout()
}

/// `doctor --json --local-ip POD_IP` on `host` with the extra environment.
fn doctor(host: &FakeHost, args: &[&str], env: &[(&str, String)]) -> Value {
    let out = doctor_out(host, true, args, env);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// A fixture of tests/fixtures/kubernetes/, without its `#` lines (which say what it follows).
fn fixture(name: &str) -> String {
    let text = common::read(&format!("tests/fixtures/kubernetes/{name}"));
    assert!(
        text.starts_with("# ") && text.contains("Follows "),
        "{name} does not say which document it follows"
    );
    let mut out: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    out
}

/// The `NAME=value` lines of an environment fixture, as a pod's `env` prints them.
fn fixture_env(name: &str) -> Vec<(String, String)> {
    fixture(name)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("{name}: not NAME=value: {l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// `fixture_env` as `doctor`'s environment.
fn as_env(vars: &[(String, String)]) -> Vec<(&str, String)> {
    vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect()
}

/// `v["device_source"]` (the mode doctor reports), checked to contain `words`.
fn assert_source(v: &Value, words: &[&str]) {
    let source = v["device_source"].as_str().unwrap_or_default();
    for w in words {
        assert!(
            source.contains(w),
            "device_source lacks {w:?}: {source}\n{v}"
        );
    }
}

/// `rel` (a directory) in the fake node's tree, as sysfs shows a directory.
fn dir(host: &FakeHost, rel: &str) {
    // FakeSysfs has no helper for the bus/pci/devices/<pci>/{infiniband,net}/ entries; a file
    // inside makes the directory.
    host.write(&format!("{rel}/.keep"), "");
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
    assert_source(
        &v,
        &["SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO)"],
    );
    // An explicit --ib-dev still wins.
    let v = doctor(&host, &["--ib-dev", "mlx5_4"], &env);
    assert_eq!(v["choice"]["device"], "mlx5_4", "{v}");
    assert_source(&v, &["--ib-dev mlx5_4"]);
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
    // Started here, not with common::server (which adds RDMA_TEST_TRANSPORT's transport).
    let spawn = |port: u16| {
        let addr = format!("{}:{port}", common::test_ip());
        Proc::spawn(
            "server",
            command(&["--server", &addr, "--transport", "tcp", "--quiet"]),
        )
    };
    let (_server, port) = common::listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("{}:{port}", common::test_ip());
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
    assert_eq!(v["device_source"], "/dev/infiniband nodes (mlx5_4)", "{v}");
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

/// The node of these tests with all three uverbs nodes in the pod (as in a shared-mode pod
/// given every node: only the variables and files can tell the pod's device), and the VFs'
/// PCI functions: 0000:3b:00.2 is mlx5_4, 0000:3b:00.3 is mlx5_5.
fn node_with_vfs() -> FakeHost {
    let host = node();
    for n in [0, 4, 5] {
        host.node(&format!("uverbs{n}"));
    }
    host
}

#[test]
fn sriov_info_current_format_names_the_device() {
    let host = node_with_vfs();
    let vars = fixture_env("sriov-info-rdma-dev.env");
    let v = doctor(&host, &[], &as_env(&vars));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_source(
        &v,
        &["SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO)"],
    );
    assert_eq!(
        v["pod_resources"],
        serde_json::json!([{"resource": "PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO", "devices": ["mlx5_5"]}]),
        "{v}"
    );
}

/// (a) An `_INFO` without `rdma_dev` (plugins v3.6.0 to v3.9.0): the device of the PCI address
/// in sysfs; where sysfs does not say, the device whose uverbs node `rdma.uverbs` names.
#[test]
fn sriov_info_without_rdma_dev_finds_the_device_from_the_pci_address() {
    let host = node_with_vfs();
    dir(&host, "sys/bus/pci/devices/0000:3b:00.2/infiniband/mlx5_4");
    dir(&host, "sys/bus/pci/devices/0000:3b:00.3/infiniband/mlx5_5");
    let vars = fixture_env("sriov-info-no-rdma-dev.env");
    let v = doctor(&host, &[], &as_env(&vars));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_source(
        &v,
        &[
            "SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO)",
            "mlx5_5 from ",
            "bus/pci/devices/0000:3b:00.3/infiniband: no rdma_dev",
        ],
    );
    // Without the sysfs entry: through the uverbs node the variable names (uverbs5).
    host.remove("sys/bus/pci/devices/0000:3b:00.3");
    let v = doctor(&host, &[], &as_env(&vars));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_source(&v, &["mlx5_5 from its uverbs node uverbs5: no rdma_dev"]);
}

/// (b) The device plugin's device-info file names the device of an `_INFO` without `rdma_dev`;
/// the files of the pool's other devices are not the pod's.
#[test]
fn the_device_plugins_device_info_file_names_the_device() {
    let host = node_with_vfs();
    let file = fixture("devinfo-dp-device.json");
    host.write(
        "devinfo/dp/nvidia.com-sriov_roce-0000:3b:00.3-device.json",
        &file,
    );
    host.write(
        "devinfo/dp/nvidia.com-sriov_roce-0000:3b:00.2-device.json",
        &file
            .replace("0000:3b:00.3", "0000:3b:00.2")
            .replace("mlx5_5", "mlx5_4"),
    );
    let vars = fixture_env("sriov-info-no-rdma-dev.env");
    let v = doctor(&host, &[], &as_env(&vars));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_source(
        &v,
        &[
            "SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO)",
            "mlx5_5 from ",
            "devinfo/dp/nvidia.com-sriov_roce-0000:3b:00.3-device.json",
        ],
    );
    assert!(
        !v["device_source"].to_string().contains("0000:3b:00.2"),
        "{v}"
    );
}

/// (b) Multus' CNI copy counts when its VF's interface is in the pod's namespace; another
/// pod's copy does not.
#[test]
fn a_cni_device_info_file_of_the_pods_interface_names_the_device() {
    let host = node_with_vfs();
    let file = fixture("devinfo-cni-device.json");
    let ours = "roce-net-4b6f1c0d9e2a7358b1c4d6e8f0a2b4c6d8e0f2a4b6c8d0e2f4a6b8c0d2e4f6a8_net1";
    let theirs = "roce-net-9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0_net1";
    host.write(&format!("devinfo/cni/{ours}"), &file);
    host.write(
        &format!("devinfo/cni/{theirs}"),
        &file
            .replace("0000:3b:00.3", "0000:3b:00.2")
            .replace("mlx5_5", "mlx5_4"),
    );
    // sysfs in the pod shows only the pod's network interfaces: net1 is 0000:3b:00.3's.
    dir(&host, "sys/bus/pci/devices/0000:3b:00.3/net/net1");
    dir(&host, "sys/bus/pci/devices/0000:3b:00.2");
    let v = doctor(&host, &[], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_source(&v, &["device-info file ", &format!("devinfo/cni/{ours}")]);
    assert_eq!(v["pod_resources"].as_array().map(Vec::len), Some(1), "{v}");
}

/// (c) The DRA SR-IOV driver's `SRIOVNETWORK_*` variables.
#[test]
fn the_dra_drivers_sriovnetwork_variables_name_the_device() {
    let host = node_with_vfs();
    let vars = fixture_env("dra-sriovnetwork.env");
    let v = doctor(&host, &[], &as_env(&vars));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert_source(
        &v,
        &["DRA SR-IOV driver (SRIOVNETWORK_0000_3b_00_3_RDMA_DEVICE)"],
    );
    // Its uverbs node must be in the pod, as with the device plugin.
    host.remove("dev/infiniband/uverbs5");
    let v = doctor(&host, &[], &as_env(&vars));
    assert!(v["choice"].is_null(), "{v}");
    assert!(
        problems(&v).contains(
            "SRIOVNETWORK_0000_3b_00_3_RDMA_DEVICE names no RDMA device whose uverbs node"
        ),
        "{v}"
    );
}

/// (d) A pod that also holds a vfio (DPDK) VF, which has no RDMA device: the RDMA one is
/// chosen and the other is said to be left out, not an error.
#[test]
fn an_extra_non_rdma_vf_is_left_out_and_the_rdma_one_chosen() {
    let host = node_with_vfs();
    dir(&host, "sys/bus/pci/devices/0000:3b:00.3/infiniband/mlx5_5");
    // The vfio-bound VF: a PCI function with no infiniband device.
    dir(&host, "sys/bus/pci/devices/0000:3b:02.4/iommu_group");
    let vars = fixture_env("sriov-rdma-and-vfio.env");
    let v = doctor(&host, &[], &as_env(&vars));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert!(!problems(&v).contains("names no RDMA device"), "{v}");
    let considered = v["considered"].as_str().unwrap_or_default();
    assert!(
        considered.contains("PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO gives mlx5_5")
            && considered
                .contains("left out, naming no RDMA device: PCIDEVICE_INTEL_COM_SRIOV_DPDK_INFO"),
        "{v}"
    );
    assert_source(
        &v,
        &["SR-IOV device plugin (PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO)"],
    );
    // The same with the plain lists only (no _INFO): the vfio VF has nothing in sysfs.
    let plain: Vec<(String, String)> = vars
        .iter()
        .filter(|(k, _)| !k.ends_with("_INFO"))
        .cloned()
        .collect();
    let v = doctor(&host, &[], &as_env(&plain));
    assert_eq!(v["choice"]["device"], "mlx5_5", "{v}");
    assert!(
        v["considered"]
            .as_str()
            .unwrap_or_default()
            .contains("left out, naming no RDMA device: PCIDEVICE_INTEL_COM_SRIOV_DPDK"),
        "{v}"
    );
}

/// Multus' network-status in the downward API file, its device-info naming `rdma-device`.
#[test]
fn multus_network_status_fixture_names_the_device() {
    let host = node_with_vfs();
    host.write(
        "podnetinfo/annotations",
        &fixture("network-status-annotations"),
    );
    let v = doctor(&host, &[], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_4", "{v}");
    assert_source(
        &v,
        &["Multus network-status (rdma-container/roce-net 0000:3b:00.2)"],
    );
}

/// (e) `doctor` says the mode in its text too.
#[test]
fn doctor_text_says_where_the_device_came_from() {
    let host = node_with_vfs();
    let vars = fixture_env("dra-sriovnetwork.env");
    let out = doctor_out(&host, false, &[], &as_env(&vars));
    assert!(
        out.lines()
            .any(|l| l == "device from: DRA SR-IOV driver (SRIOVNETWORK_0000_3b_00_3_RDMA_DEVICE)"),
        "{out}"
    );
    let out = doctor_out(&host, false, &[], &[]);
    assert!(
        out.lines()
            .any(|l| l == "device from: /dev/infiniband nodes (mlx5_0, mlx5_4, mlx5_5)"),
        "{out}"
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

// ------------------------------------------------------------------------------------------
// The manifests under deploy/kubernetes (issue 36): the rules scripts/check-k8s-manifests.sh
// enforces (run here without the schema validator, which needs its venv), each shown to catch
// the bug it is for, and the readiness probe's command run as the pod would run it.

/// The manifests of the pods: the server Pods and the client Jobs.
const POD_MANIFESTS: [&str; 4] = [
    "deploy/kubernetes/shared/server.yaml",
    "deploy/kubernetes/shared/client.yaml",
    "deploy/kubernetes/sriov/server.yaml",
    "deploy/kubernetes/sriov/client.yaml",
];

/// `scripts/check-k8s-manifests.sh --rules-only [--dir DIR]`; `None` when it cannot run here
/// (no python3 with PyYAML: exit 3), after skip_or_fail.
fn check_rules(dir: Option<&std::path::Path>) -> Option<common::Finished> {
    let mut cmd = std::process::Command::new(common::repo().join("scripts/check-k8s-manifests.sh"));
    cmd.arg("--rules-only");
    if let Some(dir) = dir {
        cmd.arg("--dir").arg(dir);
    }
    let out = common::run_command(cmd, SHORT);
    if out.code == Some(3) {
        common::skip_or_fail(&format!(
            "the manifest rules cannot run: {}",
            out.stderr.trim()
        ));
        return None;
    }
    Some(out)
}

/// Copies `from` (a directory tree of files) to `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

#[test]
fn the_manifests_follow_the_rules() {
    let Some(out) = check_rules(None) else {
        return;
    };
    assert_eq!(out.code, Some(0), "{}", out.show());
}

/// Each rule of the checker, shown failing on the bug it is for: a copy of deploy/kubernetes
/// with one planted change, refused with the words that name it.
#[test]
fn each_manifest_rule_catches_its_bug() {
    let plants: [(&str, &str, &str, &str); 15] = [
        (
            "namespace.yaml",
            "pod-security.kubernetes.io/enforce: privileged",
            "pod-security.kubernetes.io/enforce: baseline",
            "only the privileged Pod Security level allows",
        ),
        (
            "shared/network.yaml",
            "  namespace: rdma-container\n",
            "",
            "names no namespace",
        ),
        (
            "shared/server.yaml",
            "value: \"0.0.0.0:9464\"",
            "value: \"9464\"",
            "a bare port listens on 127.0.0.1",
        ),
        (
            "sriov/server.yaml",
            "value: \"0.0.0.0:9464\"",
            "value: \"127.0.0.1:9464\"",
            "is loopback",
        ),
        (
            "sriov/client.yaml",
            "- name: metrics",
            "- name: prom",
            "no container port named metrics",
        ),
        (
            "shared/server.yaml",
            "prometheus.io/scrape: \"true\"",
            "prometheus.io/scrape: \"false\"",
            "annotate prometheus.io/scrape",
        ),
        (
            "shared/client.yaml",
            ", \"--require-rdma\"]",
            "]",
            "readinessProbe exec rdma-container doctor --require-rdma",
        ),
        (
            "shared/client.yaml",
            "backoffLimit: 3",
            "backoffLimit: 0",
            "a failed client is never retried",
        ),
        (
            "sriov/client.yaml",
            "restartPolicy: Never",
            "restartPolicy: OnFailure",
            "a podFailurePolicy needs restartPolicy Never",
        ),
        (
            "podmonitor.yaml",
            "- port: metrics",
            "- port: web",
            "no container port named web",
        ),
        (
            "podmonitor.yaml",
            "      app.kubernetes.io/name: rdma-container\n  podMetricsEndpoints",
            "      app.kubernetes.io/name: other\n  podMetricsEndpoints",
            "the PodMonitor selects no pod here",
        ),
        (
            "cluster/sriov-network-node-policy.yaml",
            "\n  isRdma: true",
            "\n  isRdma: false",
            "isRdma: true, or the VFs come without their RDMA devices",
        ),
        (
            "cluster/sriov-network-node-policy.yaml",
            "resourceName: sriov_roce",
            "resourceName: sriov_rdma",
            "resourceName sriov_rdma is not the resource of a network here",
        ),
        (
            "cluster/rdma-shared-device-plugin.yaml",
            "\"resourceName\": \"roce_shared\"",
            "\"resourceName\": \"hca_shared\"",
            "makes no resource rdma/roce_shared",
        ),
        (
            "cluster/rdma-shared-device-plugin.yaml",
            "\"ifNames\": [\"ens1f0\"]",
            "\"ifNames\": [\"ens2f0\"]",
            "include no network's master",
        ),
    ];
    let Some(clean) = check_rules(None) else {
        return;
    };
    assert_eq!(clean.code, Some(0), "{}", clean.show());
    for (file, from, to, says) in plants {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_tree(&common::repo().join("deploy/kubernetes"), dir.path());
        let path = dir.path().join(file);
        let text = std::fs::read_to_string(&path).expect(file);
        // Once, so that the plant cannot land in a comment instead.
        assert_eq!(text.matches(from).count(), 1, "{file}: {from:?} once");
        std::fs::write(&path, text.replacen(from, to, 1)).expect("write");
        let out = check_rules(Some(dir.path())).expect("ran once already");
        assert!(
            out.code == Some(1) && out.stderr.contains(says),
            "{file}: {from:?} -> {to:?} should fail saying {says:?}\n{}",
            out.show()
        );
    }
}

/// The `RDMA_CONTAINER_*` variables a manifest's container sets: `- name: X` followed by
/// `value: "Y"`.
fn manifest_env(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter_map(|w| {
            let name = w[0].strip_prefix("- name: ")?;
            let value = w[1].strip_prefix("value: ")?;
            Some((name.to_owned(), value.trim_matches('"').to_owned()))
        })
        .filter(|(name, _)| name.starts_with("RDMA_CONTAINER_"))
        .collect()
}

/// The readiness probe's command: the `command: [...]` line (a JSON array) after
/// `readinessProbe:`.
fn probe_command(text: &str, manifest: &str) -> Vec<String> {
    let after = text
        .split_once("readinessProbe:")
        .unwrap_or_else(|| panic!("{manifest} has no readinessProbe"))
        .1;
    let line = after
        .lines()
        .find_map(|l| l.trim().strip_prefix("command: "))
        .unwrap_or_else(|| panic!("{manifest}: the readinessProbe has no exec command"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{manifest}: {line}: {e}"))
}

/// The readiness probe, run as the kubelet runs it (the pod's command, the container's
/// environment, no entrypoint): exit 0 on a node where RDMA is usable, 5 where it is not,
/// never a usage error (the pod's session variables must not upset doctor); and its program
/// is where the image puts the binary.
#[test]
fn the_readiness_probe_passes_where_rdma_is_usable_and_fails_where_not() {
    let dockerfile = common::read("Dockerfile");
    for manifest in POD_MANIFESTS {
        let text = common::read(manifest);
        let probe = probe_command(&text, manifest);
        assert!(
            probe.len() >= 3 && probe[1] == "doctor" && probe.contains(&"--require-rdma".into()),
            "{manifest}: {probe:?}"
        );
        assert!(
            dockerfile
                .lines()
                .any(|l| l.starts_with("COPY ") && l.ends_with(&format!(" {}", probe[0]))),
            "{manifest}: the image has no {} (the probe runs it without the entrypoint)",
            probe[0]
        );
        let env = manifest_env(&text);
        assert!(
            env.iter().any(|(n, _)| n == "RDMA_CONTAINER_REQUIRE_RDMA"),
            "{manifest}: {env:?}"
        );
        for (host, usable) in [(FakeHost::empty(), false), (FakeHost::ready(), true)] {
            let args: Vec<&str> = probe[1..].iter().map(String::as_str).collect();
            let mut cmd = command(&args);
            cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .env("RDMA_CONTAINER_SYSFS_ROOT", host.path("sys"))
                .env_remove("RDMA_CONTAINER_DOCTOR_REQUIRE_RDMA");
            host.env_for(&mut cmd);
            let mut p = Proc::spawn("probe", cmd);
            let code = p.wait_code(SHORT);
            if !usable {
                assert_eq!(code, 5, "{manifest}: no RDMA here\n{}", p.report());
                assert!(p.stderr().contains("no RDMA device"), "{}", p.report());
            } else if code == 5 && p.stderr().contains("transport") {
                // No rdma-core on this machine: the fake device is fine, verbs cannot run.
                eprintln!("note: the probe cannot pass here: {}", p.stderr().trim());
            } else {
                assert_eq!(code, 0, "{manifest}: RDMA usable\n{}", p.report());
            }
        }
    }
}
