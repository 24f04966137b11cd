//! An RDMA port's sysfs counters.
//!
//! The kernel publishes each port's counters as one file a counter, holding one number:
//! `<sysfs>/class/infiniband/<dev>/ports/<p>/counters/` (the InfiniBand port counters, every
//! provider) and `.../hw_counters/` (the provider's own: mlx5's `out_of_sequence`,
//! `rnr_nak_retry_err`, ...). [`read_port`] reads them all (the root is injectable, so tests can
//! build fixture trees), by these rules:
//!
//! - a counter is a file of either directory that holds one unsigned number (surrounding
//!   whitespace ignored), named by its file name; they come by group ([`CounterGroup::ALL`]'s
//!   order), then by name;
//! - a directory that is absent (a provider without `hw_counters/`) gives nothing;
//! - a file that cannot be read (some counters answer EINVAL) or holds no number (`N/A`) is
//!   skipped;
//! - `hw_counters/lifespan` is skipped: it is a setting (how long the provider caches its
//!   counters), not a counter;
//! - a device name that is not a single path component (`..`, `a/b`, empty) reads nothing.
//!
//! Nothing is kept between reads: what a counter moved by is the caller's difference.

use std::path::{Component, Path};

/// Which directory of an RDMA port a counter comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CounterGroup {
    /// `ports/<p>/counters/`: the InfiniBand port counters (PMA), every provider.
    Counters,
    /// `ports/<p>/hw_counters/`: the provider's own (mlx5: out_of_sequence, rnr_nak_retry_err, ...).
    HwCounters,
}

impl CounterGroup {
    /// Both groups, in the order [`read_port`] gives their counters.
    pub const ALL: [CounterGroup; 2] = [CounterGroup::Counters, CounterGroup::HwCounters];

    /// The group's directory under `ports/<p>/`: `counters` or `hw_counters`.
    pub fn dir(self) -> &'static str {
        match self {
            CounterGroup::Counters => "counters",
            CounterGroup::HwCounters => "hw_counters",
        }
    }
}

/// One counter file of an RDMA port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortCounter {
    /// Its directory.
    pub group: CounterGroup,
    /// The file name (`port_rcv_data`, `out_of_sequence`, ...).
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// The file in `hw_counters/` that is a setting, not a counter.
const HW_LIFESPAN: &str = "lifespan";

/// Reads the counters of `device`'s `port` under `sysfs_root` (normally `/sys`), by the
/// module's rules: `counters/*` then `hw_counters/*`, each by name.
pub fn read_port(sysfs_root: &Path, device: &str, port: u32) -> Vec<PortCounter> {
    let mut components = Path::new(device).components();
    if !matches!(
        (components.next(), components.next()),
        (Some(Component::Normal(_)), None)
    ) {
        return Vec::new();
    }
    let port_dir = sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    let mut out = Vec::new();
    for group in CounterGroup::ALL {
        let Ok(entries) = std::fs::read_dir(port_dir.join(group.dir())) else {
            continue;
        };
        let mut found: Vec<PortCounter> = entries
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let name = entry.file_name().into_string().ok()?;
                if group == CounterGroup::HwCounters && name == HW_LIFESPAN {
                    return None;
                }
                let text = std::fs::read_to_string(entry.path()).ok()?;
                let value = text.trim().parse().ok()?;
                Some(PortCounter { group, name, value })
            })
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        out.append(&mut found);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_test_support::FakeSysfs;

    #[test]
    fn port_counters_are_read_from_counters_and_hw_counters_skipping_what_is_no_number() {
        let sysfs = FakeSysfs::new();
        sysfs.active("mlx5_0", 1);
        let port = "class/infiniband/mlx5_0/ports/1";
        sysfs.write(&format!("{port}/counters/port_rcv_data"), "123456\n");
        sysfs.write(&format!("{port}/counters/port_xmit_data"), "42\n");
        sysfs.write(&format!("{port}/counters/symbol_error"), "N/A\n");
        sysfs.write(&format!("{port}/hw_counters/out_of_sequence"), "7\n");
        sysfs.write(&format!("{port}/hw_counters/lifespan"), "10\n");
        sysfs.write(
            "class/infiniband/mlx5_0/ports/2/counters/port_rcv_data",
            "9\n",
        );
        let got = read_port(sysfs.root(), "mlx5_0", 1);
        let pc = |group, name: &str, value| PortCounter {
            group,
            name: name.to_owned(),
            value,
        };
        assert_eq!(
            got,
            vec![
                pc(CounterGroup::Counters, "port_rcv_data", 123_456),
                pc(CounterGroup::Counters, "port_xmit_data", 42),
                pc(CounterGroup::HwCounters, "out_of_sequence", 7),
            ]
        );
    }

    #[test]
    fn a_port_without_counters_or_a_device_name_with_a_slash_reads_nothing() {
        let sysfs = FakeSysfs::new();
        sysfs.active("rxe0", 1);
        assert_eq!(read_port(sysfs.root(), "rxe0", 1), Vec::new());
        assert_eq!(read_port(sysfs.root(), "absent", 1), Vec::new());
        sysfs.write("class/infiniband/x/ports/1/counters/c", "1\n");
        for device in ["../infiniband/x", "", ".", "x/.."] {
            assert_eq!(read_port(sysfs.root(), device, 1), Vec::new());
        }
    }
}
