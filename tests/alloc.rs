//! No heap allocation per message: a counting global allocator watches a 10,000-message
//! session (library, both ends in this process over 127.0.0.1) after a warm-up. A few
//! allocations for the whole run are fine (a log line, a lazily grown buffer); anything that
//! grows with the message count is a defect of the data path.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdma_container::{Config, Error, Listener, RdmaSink, RdmaSrc, TransportChoice};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is an atomic
// side effect that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as for `dealloc`; the new size comes from the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The fixture sysfs, one per process: the DOCA simulator reads `DOCA_SIM_DIR` once per process,
/// so every test's sessions must use the directory the first one named.
fn fixture() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

/// The counter is global: one measured session at a time (the tests would count each other's).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const WARM_UP: u64 = 200;
const MEASURED: u64 = 10_000;

fn transport() -> TransportChoice {
    match std::env::var("RDMA_TEST_TRANSPORT").as_deref() {
        Ok("doca") => TransportChoice::Doca,
        Ok("verbs") => TransportChoice::Verbs,
        _ => TransportChoice::Tcp,
    }
}

/// How both ends call the library: blocking `send`/`recv`, or `try_send`/`try_recv` with
/// poll(2) on the readiness descriptor in between (an event loop's way).
#[derive(Debug, Clone, Copy)]
enum Api {
    Blocking,
    Polling,
}

/// Waits (a second at most) for `fd` to be readable.
fn wait_readable(fd: &impl AsFd) {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::from(1000u16)).unwrap();
}

fn send(sink: &mut RdmaSink, payload: &[u8], api: Api) {
    match api {
        Api::Blocking => sink.send(payload).unwrap(),
        Api::Polling => loop {
            match sink.try_send(payload) {
                Ok(()) => break,
                Err(Error::WouldBlock) => wait_readable(sink),
                Err(e) => panic!("{e}"),
            }
        },
    }
}

/// The next message's length (`None`: end of stream).
fn recv(src: &mut RdmaSrc, api: Api) -> Option<usize> {
    match api {
        Api::Blocking => src.recv().unwrap().map(<[u8]>::len),
        Api::Polling => loop {
            match src.try_recv() {
                Ok(m) => break m.map(<[u8]>::len),
                Err(Error::WouldBlock) => wait_readable(src),
                Err(e) => panic!("{e}"),
            }
        },
    }
}

fn session_allocations(credits: u16, size: usize, fixture: &std::path::Path, api: Api) -> u64 {
    let mut config = Config::default()
        .with_credits(credits)
        .with_max_msg_size(64 * 1024)
        .with_transport(transport())
        .with_handshake_timeout(Duration::from_secs(10));
    // The DOCA simulator: its default device mlx5_0 in a fixture sysfs, named explicitly
    // (127/8 is refused for RDMA without an override), as tests/doca_faults.rs does.
    if config.transport == TransportChoice::Doca {
        let sysfs = rdma_test_support::FakeSysfs::at(fixture);
        sysfs.active("mlx5_0", 1);
        sysfs.gid(
            "mlx5_0",
            1,
            1,
            &rdma_test_support::ipv4_gid([10, 0, 0, 1]),
            rdma_test_support::GID_V2,
            "eth9",
        );
        config = config.with_sysfs_root(fixture);
        config.overrides.device = Some("mlx5_0".to_owned());
        // The simulator reads it once per process: the same directory for every session.
        std::env::set_var("DOCA_SIM_DIR", fixture);
    }
    // 127.0.0.1, or RDMA_TEST_ADDR where a RoCE address is given (verbs in the soft-RoCE VM).
    let ip: std::net::IpAddr = rdma_test_support::test_ip()
        .parse()
        .expect("RDMA_TEST_ADDR is an IP address");
    let listener = Listener::bind(SocketAddr::new(ip, 0), &config).unwrap();
    let addr = listener.local_addr();
    // Both ends pass the barrier after the warm-up and before the end of the measured part.
    let barrier = Arc::new(Barrier::new(2));
    let server = {
        let barrier = barrier.clone();
        std::thread::spawn(move || {
            let mut src = listener.accept().unwrap().accept_src().unwrap();
            let mut n = 0u64;
            while let Some(len) = recv(&mut src, api) {
                assert_eq!(len, size);
                n += 1;
                if n == WARM_UP || n == WARM_UP + MEASURED {
                    barrier.wait();
                }
            }
            n
        })
    };
    let mut sink = RdmaSink::connect(addr, &config).unwrap();
    let payload = vec![7u8; size];
    for _ in 0..WARM_UP {
        send(&mut sink, &payload, api);
    }
    barrier.wait();
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..MEASURED {
        send(&mut sink, &payload, api);
    }
    barrier.wait();
    COUNTING.store(false, Ordering::SeqCst);
    let counted = ALLOCATIONS.load(Ordering::SeqCst);
    sink.finish().unwrap();
    assert_eq!(server.join().unwrap(), WARM_UP + MEASURED);
    counted
}

#[test]
fn no_allocation_per_message() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (credits, size) in [(2, 2), (16, 64), (4, 4096)] {
        let counted = session_allocations(credits, size, fixture(), Api::Blocking);
        eprintln!("credits {credits}, {size}-byte messages: {counted} allocation(s) in {MEASURED} messages");
        assert!(
            counted < 20,
            "{counted} allocations for {MEASURED} messages (credits {credits}, {size} B): the data path allocates per message"
        );
    }
}

#[test]
fn no_allocation_per_message_on_the_non_blocking_calls() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (credits, size) in [(2, 2), (16, 64)] {
        let counted = session_allocations(credits, size, fixture(), Api::Polling);
        eprintln!("try_send/try_recv, credits {credits}, {size}-byte messages: {counted} allocation(s) in {MEASURED} messages");
        assert!(
            counted < 20,
            "{counted} allocations for {MEASURED} messages on try_send/try_recv (credits {credits}, {size} B): the readiness path allocates per message"
        );
    }
}
