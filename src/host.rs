//! Facts about the host this process runs on: the memory it may still take (what the machine
//! has available, the address-space limit, the cgroup's memory limit), the memlock limit, and
//! whether CAP_IPC_LOCK is in effect.
//!
//! Rules: everything is read from `/proc/meminfo`, `/proc/self/status`, `/proc/self/limits`,
//! `/proc/self/cgroup` and the cgroup mount `/sys/fs/cgroup` (and `getrlimit` where no file
//! says); nothing here changes anything. `None` means there is no such limit, or it cannot be
//! read: a caller treats both as "no limit to check against". The figures are facts, not
//! messages: each caller words its own refusal from a [`MemoryShortfall`], in its own terms
//! (the library names `--credits`/`--max-msg-size`, the benchmark names `-s`).

use std::path::Path;

/// Bit of CAP_IPC_LOCK in the capability sets.
const CAP_IPC_LOCK_BIT: u32 = 14;

/// The memory this process may still take, in bytes, as read at one moment (`None`: no such
/// limit, or it cannot be read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryLimits {
    /// `MemAvailable` of /proc/meminfo.
    pub available: Option<u64>,
    /// `RLIMIT_AS` (the soft limit) and the address space mapped now (`VmSize`).
    pub address_space: Option<(u64, u64)>,
    /// The cgroup's memory limit and what it uses now.
    pub cgroup: Option<(u64, u64)>,
}

/// Which limit more memory would exceed, with its figures in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryShortfall {
    /// More than the memory the machine has available.
    Available {
        /// `MemAvailable`.
        available: u64,
    },
    /// Beyond the address-space limit (`RLIMIT_AS`, `ulimit -v`).
    AddressSpace {
        /// The soft limit.
        limit: u64,
        /// The address space this process maps now.
        used: u64,
    },
    /// Beyond the cgroup's memory limit (a container's, a pod's `limits.memory`).
    Cgroup {
        /// The cgroup's limit.
        limit: u64,
        /// What the cgroup uses now.
        used: u64,
    },
}

impl MemoryLimits {
    /// The limits of this process, read now.
    pub fn of_this_process() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let address_space = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_AS)
            .ok()
            .filter(|&(soft, _)| soft != nix::sys::resource::RLIM_INFINITY)
            .and_then(|(soft, _)| {
                let used = kib_field(&read("/proc/self/status")?, "VmSize:")?;
                Some((soft, used))
            });
        Self {
            available: read("/proc/meminfo").and_then(|t| kib_field(&t, "MemAvailable:")),
            address_space,
            cgroup: read("/proc/self/cgroup")
                .and_then(|t| cgroup_limit(&t, Path::new("/sys/fs/cgroup"))),
        }
    }

    /// The first limit `bytes` more would exceed (available memory, then the address space,
    /// then the cgroup); `None` when they fit every limit known.
    pub fn shortfall(&self, bytes: u64) -> Option<MemoryShortfall> {
        if let Some(available) = self.available.filter(|&a| bytes > a) {
            return Some(MemoryShortfall::Available { available });
        }
        if let Some((limit, used)) = self
            .address_space
            .filter(|&(limit, used)| bytes.saturating_add(used) > limit)
        {
            return Some(MemoryShortfall::AddressSpace { limit, used });
        }
        if let Some((limit, used)) = self
            .cgroup
            .filter(|&(limit, used)| bytes.saturating_add(used) > limit)
        {
            return Some(MemoryShortfall::Cgroup { limit, used });
        }
        None
    }
}

/// The soft memlock limit in bytes; `None` when unlimited. Read from `/proc/self/limits` (what
/// a pod sees; it has no ulimit field), else from getrlimit.
pub fn memlock_limit() -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string("/proc/self/limits") {
        if let Some(soft) = text
            .lines()
            .find_map(|l| l.strip_prefix("Max locked memory"))
            .and_then(|rest| rest.split_whitespace().next())
        {
            return soft.parse().ok();
        }
    }
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => None,
        Ok((soft, _)) => Some(soft),
        Err(_) => None,
    }
}

/// Whether CAP_IPC_LOCK is in the effective set (from /proc/self/status; `None`: unknown).
pub fn has_cap_ipc_lock() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps & (1 << CAP_IPC_LOCK_BIT) != 0)
}

/// A `NAME: N kB` field of a /proc file, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The memory limit and usage of the cgroup `/proc/self/cgroup` (`cgroups`) names, under the
/// cgroup mount `mount` (v2 `memory.max`/`memory.current`, v1 `memory.limit_in_bytes`/
/// `memory.usage_in_bytes`); `None` without a limit.
fn cgroup_limit(cgroups: &str, mount: &Path) -> Option<(u64, u64)> {
    let number = |p: std::path::PathBuf| -> Option<u64> {
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    };
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            let dir = mount.join(path);
            // "max" (no limit) does not parse: None.
            let limit = number(dir.join("memory.max"))?;
            return Some((limit, number(dir.join("memory.current")).unwrap_or(0)));
        }
        if controllers.split(',').any(|c| c == "memory") {
            let dir = mount.join("memory").join(path);
            // v1 writes a huge page-rounded number when there is no limit.
            let limit = number(dir.join("memory.limit_in_bytes")).filter(|&l| l < 1 << 62)?;
            return Some((
                limit,
                number(dir.join("memory.usage_in_bytes")).unwrap_or(0),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_cgroup_memory_limit_is_read_from_v2_and_v1_and_no_limit_is_none() {
        let dir = tempfile::tempdir().expect("dir");
        let v2 = dir.path().join("kubepods/pod1");
        std::fs::create_dir_all(&v2).expect("mkdir");
        std::fs::write(v2.join("memory.max"), "1073741824\n").expect("write");
        std::fs::write(v2.join("memory.current"), "104857600\n").expect("write");
        assert_eq!(
            cgroup_limit("0::/kubepods/pod1\n", dir.path()),
            Some((1 << 30, 100 << 20))
        );
        std::fs::write(v2.join("memory.max"), "max\n").expect("write");
        assert_eq!(cgroup_limit("0::/kubepods/pod1\n", dir.path()), None);
        let v1 = dir.path().join("memory/docker/abc");
        std::fs::create_dir_all(&v1).expect("mkdir");
        std::fs::write(v1.join("memory.limit_in_bytes"), "536870912\n").expect("write");
        std::fs::write(v1.join("memory.usage_in_bytes"), "0\n").expect("write");
        let v1_lines = "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n";
        assert_eq!(cgroup_limit(v1_lines, dir.path()), Some((512 << 20, 0)));
        std::fs::remove_file(v1.join("memory.usage_in_bytes")).expect("rm");
        assert_eq!(
            cgroup_limit(v1_lines, dir.path()),
            Some((512 << 20, 0)),
            "usage unreadable: 0"
        );
        std::fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").expect("write");
        assert_eq!(cgroup_limit(v1_lines, dir.path()), None);
    }

    #[test]
    fn proc_kib_fields_are_read_in_bytes() {
        assert_eq!(
            kib_field("MemTotal: 10 kB\nMemAvailable:   2 kB\n", "MemAvailable:"),
            Some(2048)
        );
        assert_eq!(kib_field("MemTotal: 10 kB\n", "MemAvailable:"), None);
    }

    #[test]
    fn the_shortfall_names_the_first_limit_exceeded_with_its_figures() {
        assert_eq!(MemoryLimits::default().shortfall(u64::MAX), None);
        let limits = MemoryLimits {
            available: Some(100 * MIB),
            address_space: Some((1024 * MIB, 900 * MIB)),
            cgroup: Some((512 * MIB, 400 * MIB)),
        };
        assert_eq!(limits.shortfall(100 * MIB), None);
        assert_eq!(
            limits.shortfall(101 * MIB),
            Some(MemoryShortfall::Available {
                available: 100 * MIB
            })
        );
        let no_available = MemoryLimits {
            available: None,
            ..limits
        };
        assert_eq!(no_available.shortfall(112 * MIB), None);
        assert_eq!(
            no_available.shortfall(113 * MIB),
            Some(MemoryShortfall::Cgroup {
                limit: 512 * MIB,
                used: 400 * MIB
            })
        );
        assert_eq!(
            no_available.shortfall(125 * MIB),
            Some(MemoryShortfall::AddressSpace {
                limit: 1024 * MIB,
                used: 900 * MIB
            })
        );
        let overflowing = MemoryLimits {
            address_space: Some((u64::MAX, 1)),
            ..MemoryLimits::default()
        };
        assert!(overflowing.shortfall(u64::MAX).is_none(), "saturates");
    }
}
