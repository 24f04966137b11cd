//! Slot memory a limit forbids is refused with the figures and the flags that change them,
//! never an allocator abort (issue 35, item 3): `--credits 1024` with 10 MiB slots (10 GiB)
//! under an address-space limit, on the server and on the client.

mod common;

use std::os::unix::process::CommandExt;

use common::{listening_on_free_port, Proc, SHORT};

/// A command for the binary under test that runs with `RLIMIT_AS` = `bytes`.
fn limited(args: &[&str], bytes: u64) -> std::process::Command {
    let mut cmd = common::command(args);
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, bytes, bytes)
                .map_err(std::io::Error::from)
        });
    }
    cmd
}

const TWO_GIB: u64 = 2 << 30;

#[test]
fn a_server_whose_slots_exceed_its_address_space_limit_refuses_with_the_figures() {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        let args = [
            "--server",
            &addr,
            "--once",
            "--transport",
            "tcp",
            "--credits",
            "1024",
            // Above the session's 4 GiB of slots: the address-space limit is what refuses.
            "--max-receive-memory",
            "8589934592",
        ];
        Proc::spawn("server", limited(&args, TWO_GIB))
    };
    let (mut s, port) = listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("127.0.0.1:{port}");
    // The client keeps 1024 messages of up to 4 MiB in flight (its own staging is allocated
    // lazily), so the server's session has 1024 slots of 4 MiB.
    let mut c = common::start(
        "client",
        &[
            "--client",
            &addr,
            "--transport",
            "tcp",
            "--count",
            "3",
            "--connect-timeout",
            "10",
            "--credits",
            "1024",
            "--max-msg-size",
            "4194304",
        ],
    );
    let client_code = c.wait_code(SHORT);
    let server_status = s.wait(SHORT);
    assert!(
        server_status.code().is_some(),
        "the server died by a signal (an abort): {server_status}\n{}",
        s.report()
    );
    let err = s.stderr();
    assert!(
        err.contains("RLIMIT_AS") && err.contains("lower --credits or --max-msg-size"),
        "the refusal names the limit and the flags\n{}",
        s.report()
    );
    assert!(!err.contains("memory allocation of"), "{}", s.report());
    assert_eq!(client_code, 4, "the client is told\n{}", c.report());
    assert!(c.stderr().contains("RLIMIT_AS"), "{}", c.report());
}

#[test]
fn a_client_whose_slots_exceed_its_address_space_limit_refuses_with_the_figures() {
    let spawn = |port: u16| {
        let addr = format!("127.0.0.1:{port}");
        common::start(
            "server",
            &["--server", &addr, "--once", "--transport", "tcp"],
        )
    };
    let (mut s, port) = listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("127.0.0.1:{port}");
    let mut c = Proc::spawn(
        "client",
        limited(
            &[
                "--client",
                &addr,
                "--transport",
                "tcp",
                "--credits",
                "1024",
                "--count",
                "3",
                "--connect-timeout",
                "10",
            ],
            TWO_GIB,
        ),
    );
    let status = c.wait(SHORT);
    assert!(
        status.code().is_some_and(|c| c != 0),
        "the client fails with a status, not a signal: {status}\n{}",
        c.report()
    );
    let err = c.stderr();
    assert!(
        !err.contains("memory allocation of") && err.contains("lower --credits"),
        "{}",
        c.report()
    );
    s.kill();
}
