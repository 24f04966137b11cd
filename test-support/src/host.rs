//! A fake container or host for the scripts (docker/entrypoint.sh, scripts/*.sh): a temp dir
//! with `dev/`, `proc/self/` and `sys/`, pointed to by `RDMA_CONTAINER_{DEV,PROC,SYSFS}_ROOT`.

use std::fs;
use std::path::PathBuf;

use crate::sysfs::{remove, FakeSysfs};

/// Docker's default capability set (CapEff of a root process in `docker run` without flags):
/// no CAP_IPC_LOCK (bit 14).
pub const CAPS_DOCKER_DEFAULT: &str = "00000000a80425fb";
/// The same plus CAP_IPC_LOCK, as with `--cap-add=IPC_LOCK`.
pub const CAPS_WITH_IPC_LOCK: &str = "00000000a80465fb";

/// A temporary tree with `dev/`, `proc/self/` and `sys/` (whose `class/infiniband` part is a
/// [`FakeSysfs`], see [`FakeHost::sysfs`]).
pub struct FakeHost {
    dir: tempfile::TempDir,
    sysfs: FakeSysfs,
}

impl FakeHost {
    /// Points `cmd` at this host: its /dev (`RDMA_CONTAINER_DEV_ROOT`) and its pod network
    /// annotations (`RDMA_CONTAINER_NETWORK_STATUS`); `--sysfs-root` is the caller's.
    pub fn env_for(&self, cmd: &mut std::process::Command) {
        cmd.env("RDMA_CONTAINER_DEV_ROOT", self.path("dev"))
            .env(
                "RDMA_CONTAINER_NETWORK_STATUS",
                self.path("podnetinfo/annotations"),
            )
            // The device-info files (spec 1.1.0) of this fake node, not the machine's.
            .env("RDMA_CONTAINER_DEVINFO_ROOT", self.path("devinfo"));
    }

    /// Nothing RDMA at all: no devices, no device nodes, no modules, `lo` only, docker's
    /// default capabilities (no CAP_IPC_LOCK) and its 64 KiB memlock limit, as root.
    pub fn empty() -> FakeHost {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["dev", "proc/self", "sys/class/net/lo", "sys/module"] {
            fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        let sysfs = FakeSysfs::at(dir.path().join("sys"));
        let host = FakeHost { dir, sysfs };
        host.caps(CAPS_DOCKER_DEFAULT, 0);
        host.memlock(Some(64 * 1024));
        host
    }

    /// A container ready for RDMA: mlx5_0 port 1 ACTIVE on ens1f0 with the RoCE v2 GIDs
    /// fe80::a1b:2cff:fe3d:4e5f (index 0) and ::ffff:10.0.0.1 (index 1), uverbs0 = mlx5_0,
    /// /dev/infiniband/{uverbs0,rdma_cm}, the RDMA modules loaded, CAP_IPC_LOCK and a 64 KiB
    /// memlock limit (docker's default), ens1f0 visible (host network).
    pub fn ready() -> FakeHost {
        let h = FakeHost::empty();
        let sys = h.sysfs();
        sys.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
        sys.gid(
            "mlx5_0",
            1,
            0,
            "fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f",
            "RoCE v2",
            "ens1f0",
        );
        sys.gid(
            "mlx5_0",
            1,
            1,
            "0000:0000:0000:0000:0000:ffff:0a00:0001",
            "RoCE v2",
            "ens1f0",
        );
        h.uverbs(0, "mlx5_0");
        h.netdev("ens1f0");
        h.node("uverbs0");
        h.node("rdma_cm");
        for m in ["ib_core", "ib_uverbs", "rdma_ucm", "mlx5_core", "mlx5_ib"] {
            h.module(m);
        }
        h.caps(CAPS_WITH_IPC_LOCK, 0);
        h
    }

    /// The `sys/` part, to add or change RDMA devices, ports and GIDs.
    pub fn sysfs(&self) -> &FakeSysfs {
        &self.sysfs
    }

    /// `rel` under the tree's root (e.g. "sys", "dev/infiniband/uverbs0").
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes `text` to `rel`, creating parent directories.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    /// Removes `rel` (a file or a whole directory).
    pub fn remove(&self, rel: &str) {
        remove(&self.path(rel));
    }

    /// `sys/class/infiniband_verbs/uverbsN/ibdev` = `ibdev`.
    pub fn uverbs(&self, n: u32, ibdev: &str) {
        self.write(
            &format!("sys/class/infiniband_verbs/uverbs{n}/ibdev"),
            &format!("{ibdev}\n"),
        );
    }

    /// A visible network interface (`sys/class/net/NAME`, operstate up).
    pub fn netdev(&self, name: &str) {
        self.write(&format!("sys/class/net/{name}/operstate"), "up\n");
    }

    /// A loaded kernel module (`sys/module/NAME`).
    pub fn module(&self, name: &str) {
        fs::create_dir_all(self.path(&format!("sys/module/{name}"))).expect("mkdir");
    }

    /// A device node `dev/infiniband/NAME` (a regular file is enough for the scripts' checks).
    pub fn node(&self, name: &str) {
        self.write(&format!("dev/infiniband/{name}"), "");
    }

    /// `proc/self/status` with this effective capability set (hex) and uid.
    pub fn caps(&self, cap_eff: &str, uid: u32) {
        self.write(
            "proc/self/status",
            &format!(
                "Name:\tsh\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapInh:\t0000000000000000\n\
                 CapPrm:\t{cap_eff}\nCapEff:\t{cap_eff}\nCapBnd:\t{cap_eff}\n"
            ),
        );
    }

    /// `proc/self/limits` with this memlock soft and hard limit in bytes; None = unlimited.
    pub fn memlock(&self, bytes: Option<u64>) {
        let v = bytes.map_or_else(|| "unlimited".to_owned(), |b| b.to_string());
        self.write(
            "proc/self/limits",
            &format!(
                "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max open files            1048576              1048576              files     \n\
                 Max locked memory         {v:<20} {v:<20} bytes     \n"
            ),
        );
    }
}
