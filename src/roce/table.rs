//! Reading the GID table from sysfs.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::gid::{is_bare_link_local, is_zero, parse_gid};
use super::{natural_cmp, GidEntry, GidType};
use crate::{Error, Result};

/// One RDMA port as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortInfo {
    /// The RDMA device name.
    pub device: String,
    /// The port number (1-based).
    pub port: u32,
    /// The port state word (`ACTIVE`, `DOWN`, `INIT`, ...), parsed from `4: ACTIVE`;
    /// `UNKNOWN` when the state file cannot be read.
    pub state: String,
    /// `Ethernet` or `InfiniBand`, when `link_layer` is readable.
    pub link_layer: Option<String>,
}

impl PortInfo {
    /// True when the port state is `ACTIVE`.
    pub fn is_active(&self) -> bool {
        self.state == "ACTIVE"
    }
}

/// All populated GIDs of all RDMA ports, plus the ports themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GidTable {
    /// GID entries sorted by device (natural order), port, index. Empty (all-zero) slots and
    /// bare `fe80::` entries are left out, as `show_gids` does.
    pub entries: Vec<GidEntry>,
    /// Every port found, sorted by device (natural order) and port.
    pub ports: Vec<PortInfo>,
}

impl GidTable {
    /// Reads `<root>/class/infiniband/<dev>/ports/<p>/{state,link_layer,gids/<i>,
    /// gid_attrs/types/<i>,gid_attrs/ndevs/<i>}`. `root` is normally `/sys`.
    ///
    /// A missing `<root>/class/infiniband` gives an empty table: no RDMA is a normal outcome.
    /// An unreadable `types/<i>` or `ndevs/<i>` file is not fatal (the field is `None`); neither
    /// is an unreadable `gids/<i>` file (the entry is left out) or state file (`UNKNOWN`).
    ///
    /// # Errors
    ///
    /// [`Error::Sysfs`] when a directory that exists cannot be listed.
    pub fn read(sysfs_root: &Path) -> Result<GidTable> {
        let class = sysfs_root.join("class").join("infiniband");
        let mut table = GidTable::default();
        let Some(devices) = list_dir(&class)? else {
            log::debug!("{} does not exist: no RDMA devices", class.display());
            return Ok(table);
        };
        for (device, dev_path) in devices {
            let ports_dir = dev_path.join("ports");
            let Some(ports) = list_dir(&ports_dir)? else {
                log::debug!("{} has no ports directory", dev_path.display());
                continue;
            };
            for (port_name, port_path) in ports {
                let Ok(port) = port_name.parse::<u32>() else {
                    continue;
                };
                table.ports.push(read_port(&device, port, &port_path));
                read_gids(&device, port, &port_path, &mut table.entries)?;
            }
        }
        table
            .ports
            .sort_by(|a, b| natural_cmp(&a.device, &b.device).then(a.port.cmp(&b.port)));
        table.entries.sort_by(|a, b| {
            natural_cmp(&a.device, &b.device)
                .then(a.port.cmp(&b.port))
                .then(a.gid_index.cmp(&b.gid_index))
        });
        Ok(table)
    }

    /// The port `port` of `device`, if it was found.
    pub fn port(&self, device: &str, port: u32) -> Option<&PortInfo> {
        self.ports
            .iter()
            .find(|p| p.device == device && p.port == port)
    }

    /// True when neither ports nor GIDs were found (no RDMA devices).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.ports.is_empty()
    }

    /// The distinct device names, in table order.
    pub fn devices(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let names = self
            .ports
            .iter()
            .map(|p| p.device.as_str())
            .chain(self.entries.iter().map(|e| e.device.as_str()));
        for name in names {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out.sort_by(|a, b| natural_cmp(a, b));
        out
    }
}

/// Lists a directory as (name, path) pairs sorted by name; `None` when it does not exist.
fn list_dir(dir: &Path) -> Result<Option<Vec<(String, PathBuf)>>> {
    let sysfs_err = |source: io::Error| Error::Sysfs {
        path: dir.to_path_buf(),
        source,
    };
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(sysfs_err(e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(sysfs_err)?;
        // Names that are not UTF-8 cannot be devices, ports or indices the kernel made.
        if let Ok(name) = entry.file_name().into_string() {
            out.push((name, entry.path()));
        }
    }
    out.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    Ok(Some(out))
}

/// The most of an attribute file read: sysfs attributes are at most a page.
const ATTR_MAX: usize = 4096;

/// Reads a sysfs attribute file whole: open, one read, close. A table has an entry per GID
/// slot (1,024 a port on rxe, all of them files), and `fs::read_to_string` spends five system
/// calls on each (it asks the size, then reads until a read returns 0). A sysfs attribute is
/// produced whole at its first read, and a regular file (a test fixture) returns less than was
/// asked only at its end, so a read that does not fill the buffer ends the file. At most
/// [`ATTR_MAX`] bytes are kept.
fn read_sysfs_text(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut buf = [0u8; 256];
    let mut text = Vec::new();
    loop {
        let n = file.read(&mut buf)?;
        text.extend_from_slice(&buf[..n]);
        if n < buf.len() || text.len() >= ATTR_MAX {
            break;
        }
    }
    text.truncate(ATTR_MAX);
    String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads a small attribute file, trimmed; `None` when unreadable or empty.
fn read_attr(path: &Path) -> Option<String> {
    match read_sysfs_text(path) {
        Ok(s) => {
            let s = s.trim();
            (!s.is_empty()).then(|| s.to_string())
        }
        Err(e) => {
            log::debug!("cannot read {}: {e}", path.display());
            None
        }
    }
}

/// Parses a port state file: `4: ACTIVE` -> `ACTIVE`.
pub(crate) fn parse_state(s: &str) -> String {
    let word = match s.split_once(':') {
        Some((_, w)) => w,
        None => s,
    };
    word.trim().to_string()
}

fn read_port(device: &str, port: u32, port_path: &Path) -> PortInfo {
    let state = read_attr(&port_path.join("state"))
        .map(|s| parse_state(&s))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            log::warn!("cannot read the state of {device} port {port}; treating it as UNKNOWN");
            "UNKNOWN".to_string()
        });
    PortInfo {
        device: device.to_string(),
        port,
        state,
        link_layer: read_attr(&port_path.join("link_layer")),
    }
}

fn read_gids(device: &str, port: u32, port_path: &Path, out: &mut Vec<GidEntry>) -> Result<()> {
    let Some(gids) = list_dir(&port_path.join("gids"))? else {
        return Ok(());
    };
    let attrs = port_path.join("gid_attrs");
    for (name, path) in gids {
        let Ok(index) = name.parse::<u32>() else {
            continue;
        };
        let gid = match read_sysfs_text(&path) {
            Ok(text) => match parse_gid(&text) {
                Some(g) => g,
                None => {
                    log::warn!("{}: not a GID: {:?}", path.display(), text.trim());
                    continue;
                }
            },
            Err(e) => {
                log::warn!("cannot read {}: {e}; skipping it", path.display());
                continue;
            }
        };
        if is_zero(&gid) || is_bare_link_local(&gid) {
            continue;
        }
        let gid_type = read_attr(&attrs.join("types").join(&name)).map(|s| GidType::from_sysfs(&s));
        let netdev = read_attr(&attrs.join("ndevs").join(&name));
        out.push(GidEntry {
            device: device.to_string(),
            port,
            gid_index: index,
            gid,
            gid_type,
            netdev,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_parsing() {
        assert_eq!(parse_state("4: ACTIVE\n"), "ACTIVE");
        assert_eq!(parse_state("1: DOWN"), "DOWN");
        assert_eq!(parse_state("ACTIVE"), "ACTIVE");
        assert_eq!(parse_state(" 2: INIT "), "INIT");
    }

    #[test]
    fn an_attribute_is_read_whole_at_any_length_up_to_a_page() {
        let dir = std::env::temp_dir().join(format!("rdmac-attr-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        for len in [
            0usize,
            1,
            40,
            255,
            256,
            257,
            512,
            1000,
            ATTR_MAX,
            ATTR_MAX + 100,
        ] {
            let body: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            let path = dir.join(format!("attr{len}"));
            fs::write(&path, &body).expect("write fixture");
            let read = read_sysfs_text(&path).expect("read");
            assert_eq!(read, body[..len.min(ATTR_MAX)], "a file of {len} bytes");
        }
        assert_eq!(
            read_sysfs_text(&dir.join("missing")).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        );
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn missing_root_is_empty() {
        let t = GidTable::read(Path::new("/nonexistent/rdma-container-test-root"));
        assert!(matches!(t, Ok(ref t) if t.is_empty()));
    }
}
