//! The benchmark's own message buffer: one message, filled once and sent again and again.
//!
//! Rules:
//! - A session's slots (credits x message size, on each end) are the library's: it checks them
//!   against the memory available, the address-space limit (`RLIMIT_AS`) and the cgroup's
//!   limit when the session is set up, and refuses with the figures (exit status 2).
//! - The buffer is allocated after its sessions are set up, so after their slots: it is checked
//!   here the same way, against what is left, and allocated fallibly. A message size the
//!   memory cannot hold ends in an error that says so (exit status 2), never in an allocator
//!   abort or the OOM killer.

use std::path::Path;

use anyhow::Result;

use crate::cli::UsageError;

/// A `size`-byte message of `fill` bytes, or an error naming the limit it does not fit.
pub fn message_buffer(size: usize, fill: u8) -> Result<Vec<u8>> {
    if let Some(line) = too_large(size as u64, &Limits::of_this_process()) {
        return Err(UsageError(line).into());
    }
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(size).map_err(|_| {
        UsageError(format!(
            "cannot allocate the benchmark's {size}-byte message buffer ({} MiB): lower -s",
            size >> 20
        ))
    })?;
    // Doubling copies (a memcpy each, fast in a debug build too, where a byte loop over 1 GiB
    // takes seconds); the capacity is already there.
    if size > 0 {
        buffer.push(fill);
    }
    while buffer.len() < size {
        let more = buffer.len().min(size - buffer.len());
        buffer.extend_from_within(..more);
    }
    Ok(buffer)
}

/// What this process may still take, in bytes (`None`: no such limit, or it cannot be read).
#[derive(Debug, Default)]
struct Limits {
    /// `MemAvailable` of /proc/meminfo.
    available: Option<u64>,
    /// `RLIMIT_AS` and the address space mapped now (`VmSize`).
    address_space: Option<(u64, u64)>,
    /// The cgroup's memory limit and what it uses now.
    cgroup: Option<(u64, u64)>,
}

impl Limits {
    fn of_this_process() -> Self {
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
}

/// Why `bytes` more do not fit `limits`, as one line; `None` when they fit.
fn too_large(bytes: u64, limits: &Limits) -> Option<String> {
    let what = format!(
        "the benchmark's {bytes}-byte message buffer ({} MiB)",
        bytes >> 20
    );
    if let Some(available) = limits.available.filter(|&a| bytes > a) {
        return Some(format!(
            "{what} is more than the {} MiB of memory this machine has available after the \
sessions' slots: lower -s (or --credits)",
            available >> 20
        ));
    }
    if let Some((limit, used)) = limits
        .address_space
        .filter(|&(limit, used)| bytes.saturating_add(used) > limit)
    {
        return Some(format!(
            "{what} does not fit the address-space limit (RLIMIT_AS, ulimit -v) of {} MiB, of \
which this process uses {} MiB: lower -s (or --credits), or raise the limit",
            limit >> 20,
            used >> 20
        ));
    }
    if let Some((limit, used)) = limits
        .cgroup
        .filter(|&(limit, used)| bytes.saturating_add(used) > limit)
    {
        return Some(format!(
            "{what} does not fit the memory limit of this container (cgroup: {} MiB, of which \
{} MiB are in use): lower -s (or --credits), or raise the pod's limits.memory",
            limit >> 20,
            used >> 20
        ));
    }
    None
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
    fn a_buffer_that_fits_every_limit_is_allocated_and_filled() {
        assert_eq!(too_large(MIB, &Limits::default()), None);
        let limits = Limits {
            available: Some(100 * MIB),
            address_space: Some((1024 * MIB, 900 * MIB)),
            cgroup: Some((512 * MIB, 400 * MIB)),
        };
        assert_eq!(too_large(100 * MIB, &limits), None);
        let buffer = message_buffer(4096, 0x5a).unwrap();
        assert!(buffer.len() == 4096 && buffer.iter().all(|&b| b == 0x5a));
    }

    #[test]
    fn a_buffer_beyond_a_limit_is_refused_naming_it() {
        let gib = 1024 * MIB;
        let available = Limits {
            available: Some(512 * MIB),
            ..Limits::default()
        };
        let line = too_large(gib, &available).unwrap();
        assert!(
            line.contains("1024 MiB") && line.contains("512 MiB"),
            "{line}"
        );
        let address_space = Limits {
            address_space: Some((2 * gib, gib + MIB)),
            ..Limits::default()
        };
        let line = too_large(gib, &address_space).unwrap();
        assert!(
            line.contains("RLIMIT_AS") && line.contains("lower -s"),
            "{line}"
        );
        let cgroup = Limits {
            cgroup: Some((gib, 10 * MIB)),
            ..Limits::default()
        };
        assert!(too_large(gib, &cgroup)
            .unwrap()
            .contains("cgroup: 1024 MiB"));
        // Refused before any allocation: no abort, whatever this machine has.
        let err = message_buffer(usize::MAX, 0).unwrap_err();
        assert!(err.is::<UsageError>(), "{err}");
    }

    #[test]
    fn cgroup_limits_are_read_from_v2_and_v1() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = dir.path().join("pod");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), "1073741824\n").unwrap();
        std::fs::write(v2.join("memory.current"), "1048576\n").unwrap();
        assert_eq!(
            cgroup_limit("0::/pod\n", dir.path()),
            Some((1 << 30, 1 << 20))
        );
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit("0::/pod\n", dir.path()), None);
        let v1 = dir.path().join("memory/pod");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "2097152\n").unwrap();
        assert_eq!(
            cgroup_limit("4:memory:/pod\n", dir.path()),
            Some((2 << 20, 0))
        );
        assert_eq!(
            kib_field("MemTotal: 10 kB\nMemAvailable:   2 kB\n", "MemAvailable:"),
            Some(2048)
        );
    }
}
