//! An explicit device, port or GID index asks for RDMA (issue 35, item 1): one that cannot be
//! used ends the program with exit status 5, naming what was asked, what is missing and what is
//! present, on both ends and in `bench`; it never becomes a TCP session that "succeeds". A
//! fallback to TCP that `auto` does make is a warning, and every summary names the transport.

mod common;

use common::{free_port, listening_on_free_port, run, FakeSysfs, Proc, SHORT};

/// A fixture sysfs with one device, mlx5_0 port 1 (ACTIVE), GIDs 0 and 1 for 10.0.0.1.
fn fixture() -> FakeSysfs {
    let sysfs = FakeSysfs::new();
    sysfs.mlx5("mlx5_0", "eth9", [10, 0, 0, 1]);
    sysfs
}

fn root(sysfs: &FakeSysfs) -> String {
    sysfs.root().display().to_string()
}

/// A `--once` server on 127.0.0.1 and a free port (its default transport), listening.
fn once_server() -> (Proc, u16) {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        common::start("server", &["--server", &addr, "--once"])
    };
    listening_on_free_port(spawn, "listening on", SHORT)
}

/// Each wrong override, on the client, the server and `bench`, with the words it must say.
#[test]
fn a_device_port_or_gid_index_that_does_not_exist_exits_5_naming_what_is_present() {
    let sysfs = fixture();
    let root = root(&sysfs);
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["-d", "mlx5_9"],
            &[
                "--ib-dev mlx5_9",
                "\"mlx5_9\" not found",
                "devices present: mlx5_0",
            ],
        ),
        (
            &["--ib-port", "2"],
            &["--ib-port 2", "port 2 not found", "mlx5_0 port 1"],
        ),
        (
            &["-x", "5"],
            &[
                "--gid-index 5",
                "GID index 5 not found",
                "mlx5_0 port 1 index 0",
            ],
        ),
        (
            &["-d", "mlx5_0", "-x", "7"],
            &["--ib-dev mlx5_0 --gid-index 7", "GID index 7 not found"],
        ),
    ];
    for (flags, words) in cases {
        for role in [
            vec!["--client", addr.as_str()],
            vec!["--server", addr.as_str()],
            vec!["bench", "--client", addr.as_str()],
            vec!["bench", "--server", addr.as_str()],
        ] {
            let mut args = role.clone();
            args.extend(["--sysfs-root", root.as_str()]);
            args.extend_from_slice(flags);
            let (code, out, err) = run(&args, SHORT);
            assert_eq!(code, 5, "{args:?} exits 5 (RDMA required)\n{err}");
            assert!(out.is_empty(), "{args:?} printed {out:?}");
            for w in words {
                assert!(err.contains(w), "{args:?}: no {w:?} in\n{err}");
            }
            assert!(
                !err.contains("listening on") && !err.contains("session established"),
                "{args:?} started anyway\n{err}"
            );
        }
    }
}

/// Through the environment too (a pod's manifest sets variables, not flags).
#[test]
fn a_wrong_device_in_the_environment_is_refused_the_same_way() {
    let sysfs = fixture();
    let mut cmd = common::command(&["--client", "127.0.0.1:9", "--sysfs-root", &root(&sysfs)]);
    cmd.env("RDMA_CONTAINER_IB_DEV", "mlx5_9");
    let mut p = Proc::spawn("client", cmd);
    assert_eq!(p.wait_code(SHORT), 5, "{}", p.report());
    assert!(p.stderr().contains("mlx5_9"), "{}", p.report());
}

/// A device that exists but cannot carry this session (127.0.0.1 has no RoCE GID on it, and
/// this build may have no usable RDMA library): with the device named, the session is refused
/// with status 5, never run over TCP.
#[test]
fn a_named_device_that_cannot_serve_the_session_never_falls_back_to_tcp() {
    let sysfs = fixture();
    let root = root(&sysfs);
    let (mut server, port) = once_server();
    let addr = format!("127.0.0.1:{port}");
    let (code, _, err) = run(
        &[
            "--client",
            &addr,
            "--sysfs-root",
            &root,
            "--ib-port",
            "1",
            "--count",
            "3",
            "--connect-timeout",
            "10",
        ],
        SHORT,
    );
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("RDMA is required (--ib-port 1)"),
        "the error says what asked for RDMA\n{err}"
    );
    assert!(!err.contains("using the TCP transport"), "{err}");
    server.kill();
}

/// Without an explicit device, `auto` may fall back to TCP, and says so as a warning; the
/// summary of each end names the transport that ran.
#[test]
fn a_tcp_fallback_is_a_warning_and_each_summary_names_the_transport() {
    let (mut server, port) = once_server();
    let addr = format!("127.0.0.1:{port}");
    let (code, _, err) = run(
        &["--client", &addr, "--count", "3", "--connect-timeout", "10"],
        SHORT,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains(" WARN ") && l.contains("using the TCP transport")),
        "the fallback is a warning\n{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("done: sent 3 messages") && l.ends_with("over tcp")),
        "the client's summary names the transport\n{err}"
    );
    assert_eq!(server.wait_code(SHORT), 0, "{}", server.report());
    assert!(
        server
            .stderr()
            .lines()
            .any(|l| l.contains("received 3 messages") && l.ends_with("over tcp")),
        "the server's summary names the transport\n{}",
        server.report()
    );
}
