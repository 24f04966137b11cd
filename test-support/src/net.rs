//! Addresses for the process tests.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::Proc;

/// The address the process tests use: `RDMA_TEST_ADDR` (a RoCE-network address of this host,
/// for running them over a real RDMA NIC) or 127.0.0.1.
pub fn test_ip() -> String {
    std::env::var("RDMA_TEST_ADDR").unwrap_or_else(|_| "127.0.0.1".to_owned())
}

/// A port nobody listens on, on [`test_ip`] and on 127.0.0.1. Ports come from a per-process
/// range below the kernel's ephemeral range (so no client socket can grab them in between),
/// derived from the pid, and each is checked by binding it.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id() % 400 * 30;
    let ip = test_ip();
    for _ in 0..1000 {
        let port = 20_000 + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        let port = u16::try_from(port).expect("below 32000");
        let free = |addr: &str| TcpListener::bind((addr, port)).is_ok();
        if free(&ip) && (ip == "127.0.0.1" || free("127.0.0.1")) {
            return port;
        }
    }
    panic!("no free port found");
}

/// Starts a listening child with `start` on a [`free_port`] and waits until its stderr says
/// `ready`; returns it and its port. A port checked free can still be bound by someone else
/// before the child binds it: a child that exits saying "port N is taken" (the binary's words)
/// is started again on another port, up to five ports. Any other exit fails the test.
pub fn listening_on_free_port(
    mut start: impl FnMut(u16) -> Proc,
    ready: &str,
    timeout: Duration,
) -> (Proc, u16) {
    let mut taken = Vec::new();
    while taken.len() < 5 {
        let port = free_port();
        let mut child = start(port);
        if child.wait_for_stderr_or_exit(ready, timeout) {
            return (child, port);
        }
        // The binary's words for its own port (not "receive memory is taken" and the like).
        if !child.stderr().contains(&format!("port {port} is taken")) {
            panic!("exited before saying {ready:?}\n{}", child.report());
        }
        taken.push(port);
    }
    panic!("ports {taken:?} were each taken before the child could bind them");
}
