//! `doctor` as a gate and as a device report, over fake hosts (a temp dir with `sys/` and
//! `dev/`, `--sysfs-root` and `RDMA_CONTAINER_DEV_ROOT` pointing into it):
//!
//! - the uverbs node sysfs names for a device (`class/infiniband_verbs/uverbsN/ibdev` or
//!   `class/infiniband/DEV/device/infiniband_verbs/uverbsN`) is the one the docker advice names;
//! - the port's rate and width, the firmware, the netdev MTU and the active MTU (derived from
//!   the netdev MTU on a fixture, where the verbs layer has no such device) are shown, and
//!   `unknown` when their sysfs files are missing;
//! - `doctor --require-rdma` exits 5 with one line saying why when RDMA cannot be used (no
//!   device, port DOWN, no RoCE v2 GID, node missing or not openable) and 0 when it can;
//! - the JSON (`devices`, `readiness`) matches docs/doctor.schema.json.

mod common;

use common::{assert_schema_refuses, command, validate_json, FakeHost, FakeSysfs, Proc, SHORT};
use serde_json::Value;

const DOCTOR: &str = "docs/doctor.schema.json";
/// What `--require-rdma` exits with when RDMA cannot be used (a session's exit status 5).
const EXIT_RDMA_REQUIRED: i32 = 5;

/// The result of one doctor run.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `doctor ARGS --sysfs-root HOST/sys` with `RDMA_CONTAINER_DEV_ROOT=HOST/dev`.
fn doctor(host: &FakeHost, args: &[&str]) -> Run {
    let sys = host.path("sys");
    let mut all = vec!["doctor", "--sysfs-root", sys.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    host.env_for(&mut cmd);
    cmd.env_remove("RDMA_CONTAINER_DOCTOR_REQUIRE_RDMA");
    let mut p = Proc::spawn("doctor", cmd);
    let code = p.wait_code(SHORT);
    Run {
        code,
        stdout: p.stdout(),
        stderr: p.stderr(),
    }
}

/// `doctor --json ARGS`: the exit status and the report, validated against the schema.
fn doctor_json(host: &FakeHost, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let run = doctor(host, &all);
    let v: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{}\n{}", run.stdout, run.stderr));
    validate_json(DOCTOR, &v);
    (run.code, v)
}

/// A host with mlx5_0 port 1 ACTIVE on ens1f0 with a RoCE v2 GID for 10.0.0.1 (no uverbs node
/// in sysfs, nothing in /dev/infiniband), plus the port's rate, the firmware and the netdev MTU.
fn host_with_link_files() -> FakeHost {
    let h = FakeHost::empty();
    let sys = h.sysfs();
    sys.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    sys.gid(
        "mlx5_0",
        1,
        1,
        "0000:0000:0000:0000:0000:ffff:0a00:0001",
        "RoCE v2",
        "ens1f0",
    );
    h.netdev("ens1f0");
    h.write("sys/class/net/ens1f0/mtu", "1500\n");
    h.write(
        "sys/class/infiniband/mlx5_0/ports/1/rate",
        "100 Gb/sec (4X EDR)\n",
    );
    h.write("sys/class/infiniband/mlx5_0/fw_ver", "20.31.1014\n");
    h
}

/// The `verbs transport cannot run here` problem, when this host has no rdma-core: then even
/// a usable fake device cannot pass the gate (the binary cannot run an RDMA transport).
fn verbs_cannot_run(v: &Value) -> Option<String> {
    let rdma_transports: Vec<&Value> = v["transports"]
        .as_array()
        .expect("transports")
        .iter()
        .filter(|t| *t != "tcp")
        .collect();
    if rdma_transports.is_empty() {
        return Some("this build has no RDMA transport".to_owned());
    }
    v["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .find(|p| p.contains("the verbs transport cannot run here"))
        .filter(|_| rdma_transports == [&Value::from("verbs")])
        .map(str::to_owned)
}

#[test]
fn docker_advice_names_the_uverbs_node_sysfs_gives_for_the_device() {
    // class/infiniband_verbs/uverbs3/ibdev says mlx5_0; /dev/infiniband is empty.
    let host = host_with_link_files();
    host.uverbs(3, "mlx5_0");
    let run = doctor(&host, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(
            "/dev/infiniband has no device nodes: in a container pass --device \
             /dev/infiniband/uverbs3 --device /dev/infiniband/rdma_cm"
        ),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("uverbsN"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("mlx5_0: node /dev/infiniband/uverbs3 (missing from /dev/infiniband)"),
        "{}",
        run.stdout
    );
    let (_, v) = doctor_json(&host, &[]);
    assert_eq!(v["devices"][0]["uverbs"], "uverbs3", "{v}");
    assert_eq!(v["devices"][0]["node"], "/dev/infiniband/uverbs3", "{v}");
    assert_eq!(v["devices"][0]["node_status"], "missing", "{v}");
}

#[test]
fn the_uverbs_node_is_also_found_under_the_devices_pci_function() {
    // Only class/infiniband/mlx5_0/device/infiniband_verbs/uverbs7 (no class/infiniband_verbs).
    let host = host_with_link_files();
    std::fs::create_dir_all(
        host.path("sys/class/infiniband/mlx5_0/device/infiniband_verbs/uverbs7"),
    )
    .expect("mkdir");
    let run = doctor(&host, &[]);
    assert!(
        run.stdout.contains(
            "/dev/infiniband has no device nodes: in a container pass --device \
             /dev/infiniband/uverbs7 --device /dev/infiniband/rdma_cm"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("mlx5_0: node /dev/infiniband/uverbs7"),
        "{}",
        run.stdout
    );
}

#[test]
fn doctor_shows_rate_width_firmware_and_the_active_and_netdev_mtus() {
    let host = host_with_link_files();
    let run = doctor(&host, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    for want in [
        "firmware 20.31.1014",
        "port 1: ACTIVE Ethernet, rate 100 Gb/sec (4X EDR)",
        "netdev ens1f0 MTU 1500",
        // No verbs device on a fixture: derived from 1500 - 96 bytes of RoCE headers.
        "active MTU 1024 (derived",
    ] {
        assert!(run.stdout.contains(want), "no {want:?} in:\n{}", run.stdout);
    }

    let (code, v) = doctor_json(&host, &[]);
    assert_eq!(code, 0, "{v}");
    let d = &v["devices"][0];
    assert_eq!(d["device"], "mlx5_0", "{v}");
    assert_eq!(d["fw_ver"], "20.31.1014", "{v}");
    let p = &d["ports"][0];
    assert_eq!(p["rate"], "100 Gb/sec (4X EDR)", "{v}");
    assert_eq!(p["rate_gbps"], 100.0, "{v}");
    assert_eq!(p["width"], "4X", "{v}");
    assert_eq!(p["speed"], "EDR", "{v}");
    assert_eq!(p["netdev"], "ens1f0", "{v}");
    assert_eq!(p["netdev_mtu"], 1500, "{v}");
    assert_eq!(p["active_mtu"], 1024, "{v}");
    assert_eq!(p["active_mtu_source"], "derived", "{v}");

    // A jumbo netdev MTU allows the largest IB MTU.
    host.write("sys/class/net/ens1f0/mtu", "9000\n");
    let (_, v) = doctor_json(&host, &[]);
    assert_eq!(v["devices"][0]["ports"][0]["active_mtu"], 4096, "{v}");
}

#[test]
fn missing_rate_firmware_and_mtu_files_show_as_unknown() {
    let host = FakeHost::empty();
    host.sysfs().port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    let run = doctor(&host, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    for want in [
        "mlx5_0: node unknown",
        "firmware unknown",
        "rate unknown",
        "netdev unknown",
        "active MTU unknown",
    ] {
        assert!(run.stdout.contains(want), "no {want:?} in:\n{}", run.stdout);
    }
    let (_, v) = doctor_json(&host, &[]);
    let d = &v["devices"][0];
    for key in ["uverbs", "node", "node_status", "fw_ver"] {
        assert!(d[key].is_null(), "{key}: {v}");
    }
    for key in ["rate", "width", "netdev", "netdev_mtu", "active_mtu"] {
        assert!(d["ports"][0][key].is_null(), "{key}: {v}");
    }
}

#[test]
fn require_rdma_exits_5_with_one_line_when_there_is_no_rdma_device() {
    let host = FakeHost::empty();
    let run = doctor(&host, &["--require-rdma"]);
    assert_eq!(run.code, EXIT_RDMA_REQUIRED, "{}{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0]
            .contains("RDMA is required (--require-rdma) but not possible here: no RDMA device"),
        "{}",
        run.stderr
    );
    // The report is still printed, with the same verdict.
    assert!(
        run.stdout.contains("RDMA: not usable: no RDMA device"),
        "{}",
        run.stdout
    );

    // Without the flag the report is the result: exit 0.
    let run = doctor(&host, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.is_empty(), "{}", run.stderr);

    // JSON too, with the reason in readiness.
    let (code, v) = doctor_json(&host, &["--require-rdma"]);
    assert_eq!(code, EXIT_RDMA_REQUIRED, "{v}");
    assert_eq!(v["readiness"]["rdma_usable"], false, "{v}");
    assert!(
        v["readiness"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("no RDMA device")),
        "{v}"
    );
    // The flag also comes from the environment, like every doctor flag.
    let sys = host.path("sys");
    let mut cmd = command(&["doctor", "--sysfs-root", sys.to_str().expect("utf-8")]);
    cmd.env("RDMA_CONTAINER_DOCTOR_REQUIRE_RDMA", "true")
        .env("RDMA_CONTAINER_DEV_ROOT", host.path("dev"));
    let mut p = Proc::spawn("doctor", cmd);
    assert_eq!(p.wait_code(SHORT), EXIT_RDMA_REQUIRED, "{}", p.report());
}

#[test]
fn require_rdma_exits_0_on_a_usable_fake_device() {
    // mlx5_0 port 1 ACTIVE, RoCE v2 GID 10.0.0.1 on ens1f0, uverbs0 = mlx5_0 and
    // /dev/infiniband/{uverbs0,rdma_cm} (regular files: they open).
    let host = FakeHost::ready();
    let (code, v) = doctor_json(&host, &["--require-rdma"]);
    let r = &v["readiness"];
    assert_eq!(r["device"], "mlx5_0", "{v}");
    assert_eq!(r["port"], 1, "{v}");
    assert_eq!(r["gid_index"], 1, "{v}");
    assert_eq!(r["node"], "/dev/infiniband/uverbs0", "{v}");
    assert_eq!(v["devices"][0]["node_status"], "ok", "{v}");
    if let Some(why) = verbs_cannot_run(&v) {
        // No rdma-core on this host: the device is fine, the binary cannot run verbs.
        eprintln!("note: the positive gate cannot pass here ({why}); checking that it says so");
        assert_eq!(code, EXIT_RDMA_REQUIRED, "{v}");
        assert!(
            r["reason"]
                .as_str()
                .is_some_and(|s| s.contains("transport")),
            "{v}"
        );
        return;
    }
    assert_eq!(code, 0, "{v}");
    assert_eq!(r["rdma_usable"], true, "{v}");
    assert!(r["reason"].is_null(), "{v}");
    let run = doctor(&host, &["--require-rdma"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("RDMA: usable: mlx5_0 port 1 gid-index 1 through /dev/infiniband/uverbs0"),
        "{}",
        run.stdout
    );
    // A session's other paths need their GIDs too: toward 127.0.0.1 there is none, so the
    // gate says which path fails it.
    let run = doctor(&host, &["--require-rdma", "--paths", "127.0.0.1"]);
    assert_eq!(run.code, EXIT_RDMA_REQUIRED, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("--paths 127.0.0.1: no RoCE v2 GID for source 127.0.0.1 toward it"),
        "{}",
        run.stderr
    );
}

/// `doctor --require-rdma` on `host`: asserts exit 5 and returns the one stderr line.
fn refused(host: &FakeHost) -> String {
    let run = doctor(host, &["--require-rdma"]);
    assert_eq!(run.code, EXIT_RDMA_REQUIRED, "{}{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    lines[0].to_owned()
}

#[test]
fn require_rdma_exits_5_when_the_port_is_down() {
    let host = FakeHost::ready();
    host.write("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    let line = refused(&host);
    assert!(line.contains("mlx5_0 port 1 is DOWN, not ACTIVE"), "{line}");
}

#[test]
fn require_rdma_exits_5_without_a_roce_v2_ipv4_gid() {
    let host = FakeHost::ready();
    // Only the link-local GID is left: no IPv4 address on the netdev.
    host.remove("sys/class/infiniband/mlx5_0/ports/1/gids/1");
    let line = refused(&host);
    assert!(
        line.contains("mlx5_0 port 1 has no RoCE v2 GID with an IPv4 address"),
        "{line}"
    );
}

#[test]
fn require_rdma_exits_5_when_the_device_node_is_missing() {
    let host = FakeHost::ready();
    host.remove("dev/infiniband/uverbs0");
    let line = refused(&host);
    assert!(
        line.contains("the device node of mlx5_0, /dev/infiniband/uverbs0, is missing"),
        "{line}"
    );
    assert!(line.contains("--device /dev/infiniband/uverbs0"), "{line}");
}

#[test]
fn require_rdma_exits_5_when_the_device_node_cannot_be_opened() {
    let host = FakeHost::ready();
    // A directory in its place: opening it read-write fails, even as root.
    host.remove("dev/infiniband/uverbs0");
    std::fs::create_dir_all(host.path("dev/infiniband/uverbs0")).expect("mkdir");
    let line = refused(&host);
    assert!(
        line.contains("the device node of mlx5_0, /dev/infiniband/uverbs0, cannot be opened"),
        "{line}"
    );
    let (_, v) = doctor_json(&host, &[]);
    assert_eq!(v["devices"][0]["node_status"], "unopenable", "{v}");
}

#[test]
fn require_rdma_exits_5_when_the_gid_toward_the_local_address_is_missing() {
    let host = FakeHost::ready();
    // 10.0.0.2 is nobody's GID (and not this host's address).
    let line = refused_with(&host, &["--require-rdma", "--local-ip", "10.0.0.2"]);
    assert!(line.contains("10.0.0.2"), "{line}");
}

fn refused_with(host: &FakeHost, args: &[&str]) -> String {
    let run = doctor(host, args);
    assert_eq!(run.code, EXIT_RDMA_REQUIRED, "{}{}", run.stdout, run.stderr);
    run.stderr.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn doctor_json_with_devices_and_readiness_matches_the_schema() {
    let host = FakeHost::ready();
    host.write("sys/class/net/ens1f0/mtu", "9000\n");
    host.write(
        "sys/class/infiniband/mlx5_0/ports/1/rate",
        "25 Gb/sec (1X EDR)\n",
    );
    host.write("sys/class/infiniband/mlx5_0/fw_ver", "22.36.1010\n");
    let (code, v) = doctor_json(&host, &[]);
    assert_eq!(code, 0, "{v}");
    assert!(v["readiness"].is_object(), "{v}");
    assert_eq!(v["devices"][0]["ports"][0]["width"], "1X", "{v}");
    let edited = |edit: &dyn Fn(&mut Value)| {
        let mut copy = v.clone();
        edit(&mut copy);
        copy
    };
    assert_schema_refuses(
        DOCTOR,
        &edited(&|v| v["devices"][0]["surprise"] = 1.into()),
        "an undocumented device field",
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&|v| v["devices"][0]["ports"][0]["active_mtu"] = 1500.into()),
        "an active MTU that is no IB MTU",
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&|v| {
            v["readiness"]["rdma_usable"] = true.into();
            v["readiness"]["reason"] = "broken".into();
        }),
        "a usable verdict with a reason",
    );
    assert_schema_refuses(
        DOCTOR,
        &edited(&|v| {
            v.as_object_mut().expect("object").remove("readiness");
        }),
        "no readiness",
    );

    // The no-device report matches too.
    let (_, v) = doctor_json(&FakeHost::empty(), &[]);
    assert_eq!(v["devices"], serde_json::json!([]), "{v}");

    // And a fixture with no class/net at all (FakeSysfs alone).
    let sysfs = FakeSysfs::new();
    sysfs.mlx5("mlx5_0", "ens1f0", [10, 0, 0, 1]);
    let mut p = Proc::spawn(
        "doctor",
        command(&[
            "doctor",
            "--json",
            "--sysfs-root",
            sysfs.root().to_str().expect("utf-8"),
        ]),
    );
    assert_eq!(p.wait_code(SHORT), 0, "{}", p.report());
    let v: Value = serde_json::from_str(&p.stdout()).expect("JSON");
    validate_json(DOCTOR, &v);
}
