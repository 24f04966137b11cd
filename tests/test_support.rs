//! The shared test helpers (the `rdma-test-support` crate) themselves: strict skips, the fake
//! sysfs layout, free ports. Here rather than in that crate so that CI's `cargo test` runs them.

use std::fs;
use std::panic::catch_unwind;

use rdma_test_support::{
    free_port, listening_on_free_port, skip_or_fail, skip_unless_strict_allows, strict, Allowed,
    FakeSysfs, FE80_A, GID_V2, STRICT_ENV, ZERO_GID,
};
use rdma_test_support::{target_command, Proc, SHORT};

/// One test for every case: they change the process environment, which tests running in
/// parallel would see.
#[test]
fn strict_turns_skips_into_failures_except_allowed_ones() {
    for (value, is_strict) in [(None, false), (Some(""), false), (Some("0"), false)]
        .into_iter()
        .chain([(Some("1"), true), (Some("yes"), true)])
    {
        match value {
            Some(v) => std::env::set_var(STRICT_ENV, v),
            None => std::env::remove_var(STRICT_ENV),
        }
        assert_eq!(strict(), is_strict, "{value:?}");
        let skipped =
            catch_unwind(|| skip_or_fail("self-test of skip_or_fail, nothing is missing"));
        match skipped {
            Ok(()) => assert!(!is_strict, "{value:?}: a strict skip must fail"),
            Err(payload) => {
                assert!(is_strict, "{value:?}: a skip must not fail");
                let msg = payload
                    .downcast_ref::<String>()
                    .expect("a formatted panic message");
                assert!(
                    msg.starts_with("required test could not run: self-test of skip_or_fail"),
                    "{msg}"
                );
            }
        }
        assert!(
            catch_unwind(|| skip_unless_strict_allows(
                Allowed::DocaSdk,
                "self-test of skip_unless_strict_allows"
            ))
            .is_ok(),
            "{value:?}: an allowed skip never fails"
        );
    }
    std::env::remove_var(STRICT_ENV);
}

fn read(s: &FakeSysfs, rel: &str) -> String {
    fs::read_to_string(s.root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn mlx5_is_the_kernel_layout() {
    let s = FakeSysfs::new();
    s.mlx5("mlx5_0", "ens1f0", [10, 7, 159, 71]);
    let port = "class/infiniband/mlx5_0/ports/1";
    assert_eq!(read(&s, &format!("{port}/state")), "4: ACTIVE\n");
    assert_eq!(read(&s, &format!("{port}/link_layer")), "Ethernet\n");
    assert_eq!(read(&s, &format!("{port}/gids/1")), format!("{FE80_A}\n"));
    assert_eq!(
        read(&s, &format!("{port}/gids/3")),
        "0000:0000:0000:0000:0000:ffff:0a07:9f47\n"
    );
    assert_eq!(
        read(&s, &format!("{port}/gid_attrs/types/2")),
        "IB/RoCE v1\n"
    );
    assert_eq!(read(&s, &format!("{port}/gid_attrs/types/3")), "RoCE v2\n");
    assert_eq!(read(&s, &format!("{port}/gid_attrs/ndevs/3")), "ens1f0\n");
    assert_eq!(read(&s, &format!("{port}/gids/7")), format!("{ZERO_GID}\n"));
    assert!(!s.root().join(format!("{port}/gid_attrs/types/7")).exists());

    s.unreadable("mlx5_0", 1, "types", 3);
    assert!(fs::read_to_string(s.root().join(format!("{port}/gid_attrs/types/3"))).is_err());
    s.remove("class/infiniband");
    assert!(!s.root().join("class/infiniband").exists());
}

#[test]
fn at_writes_into_the_given_directory_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = FakeSysfs::at(dir.path().join("sys"));
        s.gid("rxe0", 1, 0, ZERO_GID, GID_V2, "eth0");
    }
    assert!(dir
        .path()
        .join("sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0")
        .is_file());
}

#[test]
fn free_ports_are_free_and_differ() {
    let (a, b) = (free_port(), free_port());
    assert_ne!(a, b);
    for p in [a, b] {
        assert!((20_000..32_000).contains(&p), "{p}");
        std::net::TcpListener::bind(("127.0.0.1", p)).expect("free");
    }
}

/// A `bench --server --once` on 127.0.0.1:`port` over `transport`.
fn bench_server(port: u16, transport: &str) -> Proc {
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = target_command(env!("CARGO_BIN_EXE_rdma-container"));
    cmd.args([
        "bench",
        "--server",
        &addr,
        "--transport",
        transport,
        "--once",
    ]);
    Proc::spawn("bench-server", cmd)
}

#[test]
fn a_server_whose_port_was_taken_in_between_starts_again_on_another_port() {
    let mut held = Vec::new();
    let mut tried = Vec::new();
    let spawn = |port: u16| {
        if tried.is_empty() {
            // Someone else binds the port between the check and the server's bind.
            held.push(std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind"));
        }
        tried.push(port);
        bench_server(port, "tcp")
    };
    let (mut server, port) = listening_on_free_port(spawn, "bench server listening", SHORT);
    assert_eq!(tried.len(), 2, "{tried:?}");
    assert_eq!(port, tried[1]);
    assert_ne!(tried[0], tried[1]);
    server.kill();
}

#[test]
fn a_server_that_fails_for_another_reason_fails_the_test_without_another_start() {
    let mut starts = 0;
    let spawn = |port: u16| {
        starts += 1;
        bench_server(port, "no-such-transport")
    };
    let failed = catch_unwind(std::panic::AssertUnwindSafe(|| {
        listening_on_free_port(spawn, "bench server listening", SHORT)
    }));
    let message = failed
        .err()
        .and_then(|p| p.downcast_ref::<String>().cloned())
        .expect("a failing server must fail the test with a message");
    assert!(message.contains("exited before saying"), "{message}");
    assert_eq!(
        starts, 1,
        "a bad command line is not a taken port: {message}"
    );
}
