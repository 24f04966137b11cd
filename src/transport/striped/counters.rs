//! Bytes each path of a session carried (`--paths`), counted by the striped data path and read
//! by anyone holding the handle, also after the session is gone (the CLI's JSON result and
//! metrics). A session's paths are numbered as in [`crate::SessionInfo::extra_paths`], 0
//! first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes each of a session's paths carried so far: message bytes as the sender posted them
/// on the path (a message sent again after a resume counts again, on the path that carried
/// it then; with `--checksum`, 4 bytes more each) or as the receiver delivered them from it.
/// Empty for a session whose data path is one queue pair (its totals are the session's).
#[derive(Debug, Clone, Default)]
pub struct PathCounters {
    bytes: Arc<[AtomicU64]>,
}

impl PathCounters {
    /// Counters for `paths` paths, at zero.
    pub(crate) fn new(paths: usize) -> Self {
        Self {
            bytes: (0..paths).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// `path` carried `bytes` more.
    pub(crate) fn add(&self, path: usize, bytes: usize) {
        if let Some(counter) = self.bytes.get(path) {
            counter.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// The bytes each path carried so far, path 0 first (empty: one queue pair).
    pub fn bytes(&self) -> Vec<u64> {
        self.bytes
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}
