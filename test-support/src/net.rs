//! Addresses for the process tests.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

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
