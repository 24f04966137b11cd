//! A fake `/sys`: `class/infiniband/DEV/ports/N/{state,link_layer,gids/I,gid_attrs/types/I,
//! gid_attrs/ndevs/I}`, as the kernel lays it out.

use std::fs;
use std::path::{Path, PathBuf};

/// The GID type the kernel writes for RoCE v1 (and InfiniBand).
pub const GID_V1: &str = "IB/RoCE v1";
/// The GID type the kernel writes for RoCE v2.
pub const GID_V2: &str = "RoCE v2";
/// An empty GID slot, as the kernel shows it.
pub const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
/// A link-local GID (a port's first pair).
pub const FE80_A: &str = "fe80:0000:0000:0000:ba59:9fff:fe1a:e4c2";
/// Another link-local GID (a second port's).
pub const FE80_B: &str = "fe80:0000:0000:0000:ba59:9fff:fe1a:e4c3";

/// The sysfs notation of the IPv4-mapped GID `::ffff:a.b.c.d`.
pub fn ipv4_gid(ip: [u8; 4]) -> String {
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    )
}

/// A fake sysfs root, in its own temp dir ([`FakeSysfs::new`], deleted on drop) or in a
/// directory the caller owns ([`FakeSysfs::at`]). Every variant the tests need is built from
/// these calls:
///
/// | layout | calls |
/// |---|---|
/// | a ConnectX port: link-local and IPv4 v1/v2 pairs | [`mlx5`](Self::mlx5) |
/// | VLAN: more pairs on `ens1f0.100` | [`pair`](Self::pair), [`pair4`](Self::pair4) |
/// | bond (LAG): one device on `bond0` | `mlx5("mlx5_bond_0", "bond0", ip)` |
/// | two devices | `mlx5` twice |
/// | v1 only | [`active`](Self::active) + [`gid`](Self::gid) with [`GID_V1`] |
/// | IPv6 only | `active` + `pair` with an IPv6 GID |
/// | unreadable type/ndev (another namespace's GID) | [`gid_only`](Self::gid_only) + [`unreadable`](Self::unreadable) |
/// | port not ACTIVE | [`port`](Self::port) with `"1: DOWN"` |
/// | no ndevs at all | [`remove`](Self::remove)`("class/infiniband/DEV/ports/1/gid_attrs/ndevs")` |
/// | no devices | [`new`](Self::new) alone, or `remove("class/infiniband")` |
pub struct FakeSysfs {
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Default for FakeSysfs {
    fn default() -> Self {
        FakeSysfs::new()
    }
}

impl FakeSysfs {
    /// An empty tree (no `class/infiniband` at all) in a new temp dir.
    pub fn new() -> FakeSysfs {
        let dir = tempfile::tempdir().expect("tempdir");
        FakeSysfs {
            root: dir.path().to_owned(),
            _dir: Some(dir),
        }
    }

    /// A tree rooted at `root` (created when written to; never deleted by this value).
    pub fn at(root: impl Into<PathBuf>) -> FakeSysfs {
        FakeSysfs {
            root: root.into(),
            _dir: None,
        }
    }

    /// The directory to pass as `--sysfs-root` (or `RDMA_CONTAINER_SYSFS_ROOT`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `class/infiniband/DEV/ports/PORT` under the root.
    pub fn port_dir(&self, dev: &str, port: u32) -> PathBuf {
        self.root
            .join("class/infiniband")
            .join(dev)
            .join("ports")
            .join(port.to_string())
    }

    /// A port with its state (e.g. "4: ACTIVE") and link layer (e.g. "Ethernet"), and empty
    /// `gids`, `gid_attrs/types` and `gid_attrs/ndevs` directories.
    pub fn port(&self, dev: &str, port: u32, state: &str, link_layer: &str) {
        let p = self.port_dir(dev, port);
        for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            fs::create_dir_all(p.join(sub)).expect("mkdir");
        }
        fs::write(p.join("state"), format!("{state}\n")).expect("write state");
        fs::write(p.join("link_layer"), format!("{link_layer}\n")).expect("write link_layer");
    }

    /// An ACTIVE Ethernet port.
    pub fn active(&self, dev: &str, port: u32) {
        self.port(dev, port, "4: ACTIVE", "Ethernet");
    }

    /// GID `index` of a port: its value (sysfs notation), type (e.g. [`GID_V2`]) and netdev.
    pub fn gid(&self, dev: &str, port: u32, index: u32, gid: &str, gid_type: &str, ndev: &str) {
        self.gid_with(dev, port, index, gid, Some(gid_type), Some(ndev));
    }

    /// GID `index` with only `gids/<index>` written (no type, no netdev: an empty slot or a
    /// GID whose attributes cannot be read).
    pub fn gid_only(&self, dev: &str, port: u32, index: u32, gid: &str) {
        self.gid_with(dev, port, index, gid, None, None);
    }

    /// GID `index`, writing `gid_attrs/types/<index>` and `gid_attrs/ndevs/<index>` only when
    /// given.
    pub fn gid_with(
        &self,
        dev: &str,
        port: u32,
        index: u32,
        gid: &str,
        gid_type: Option<&str>,
        ndev: Option<&str>,
    ) {
        let p = self.port_dir(dev, port);
        let i = index.to_string();
        let write = |rel: &Path, text: &str| {
            let path = p.join(rel);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, format!("{text}\n"))
                .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        };
        write(&Path::new("gids").join(&i), gid);
        if let Some(ty) = gid_type {
            write(&Path::new("gid_attrs/types").join(&i), ty);
        }
        if let Some(nd) = ndev {
            write(&Path::new("gid_attrs/ndevs").join(&i), nd);
        }
    }

    /// The mlx5 layout: the same GID as RoCE v1 at `base` and RoCE v2 at `base + 1`.
    pub fn pair(&self, dev: &str, port: u32, base: u32, gid: &str, ndev: &str) {
        self.gid(dev, port, base, gid, GID_V1, ndev);
        self.gid(dev, port, base + 1, gid, GID_V2, ndev);
    }

    /// A v1/v2 pair for an IPv4 address.
    pub fn pair4(&self, dev: &str, port: u32, base: u32, ip: [u8; 4], ndev: &str) {
        self.pair(dev, port, base, &ipv4_gid(ip), ndev);
    }

    /// Empty slots `from..to`, as the kernel shows them (zero GID, no attributes).
    pub fn zeros(&self, dev: &str, port: u32, from: u32, to: u32) {
        for i in from..to {
            self.gid_only(dev, port, i, ZERO_GID);
        }
    }

    /// Makes `gid_attrs/<attr>/<index>` (`attr` = "types" or "ndevs") unreadable by turning
    /// it into a directory (reading it fails, as for a GID of another network namespace).
    pub fn unreadable(&self, dev: &str, port: u32, attr: &str, index: u32) {
        let f = self
            .port_dir(dev, port)
            .join("gid_attrs")
            .join(attr)
            .join(index.to_string());
        let _ = fs::remove_file(&f);
        fs::create_dir_all(f).expect("mkdir");
    }

    /// A typical ConnectX port 1 on `ndev`: ACTIVE, the link-local pair at 0/1, the IPv4 pair
    /// for `ip` at 2/3, empty slots 4..8.
    pub fn mlx5(&self, dev: &str, ndev: &str, ip: [u8; 4]) {
        self.active(dev, 1);
        self.pair(dev, 1, 0, FE80_A, ndev);
        self.pair4(dev, 1, 2, ip, ndev);
        self.zeros(dev, 1, 4, 8);
    }

    /// Writes `text` to `rel` (relative to the root), creating parent directories.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    /// Removes `rel` (a file or a whole directory) under the root.
    pub fn remove(&self, rel: &str) {
        remove(&self.root.join(rel));
    }
}

pub(crate) fn remove(p: &Path) {
    let r = if p.is_dir() {
        fs::remove_dir_all(p)
    } else {
        fs::remove_file(p)
    };
    r.unwrap_or_else(|e| panic!("remove {}: {e}", p.display()));
}
