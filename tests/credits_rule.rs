//! Which end decides the credits (issue 35, items 3 and 6; docs/design.md, "Credits: the
//! receiving end decides"): a server given `--credits` uses its own and the client warns when
//! it asked for others; a server without takes the client's; a client asking for more slot
//! memory than the server's `--max-receive-memory` is refused for good, with the figures.

mod common;

use common::{client, server, Proc, LONG, SHORT};

/// The `credits` of the JSON result on a process's stderr.
fn credits_of(p: &Proc) -> u64 {
    let line = p
        .stderr()
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no JSON result\n{}", p.report()));
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    v["credits"]
        .as_u64()
        .unwrap_or_else(|| panic!("no credits in {v}"))
}

/// A session of 1000 messages; the credits both ends report and the two logs.
fn session(server_args: &[&str], client_args: &[&str]) -> (u64, u64, Proc, Proc) {
    let mut args = vec!["--quiet", "--once", "--json"];
    args.extend_from_slice(server_args);
    let (mut s, port) = server("server", &args);
    // Small slots: 64 credits of the default 10 MiB would be 640 MiB to set up (the DOCA
    // simulator registers them within the handshake timeout).
    let mut args = vec!["--count", "1000", "--json", "--max-msg-size", "65536"];
    args.extend_from_slice(client_args);
    let mut c = client("client", port, &args);
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    (credits_of(&s), credits_of(&c), s, c)
}

#[test]
fn a_server_without_credits_takes_the_clients() {
    let (server, client, s, c) = session(&[], &["--credits", "64"]);
    assert_eq!((server, client), (64, 64), "{}\n{}", s.report(), c.report());
    assert!(!c
        .stderr()
        .contains("WARN  rdma_container::cli::client] the server set"));
    assert!(
        s.stderr().contains("credits as each client asks"),
        "{}",
        s.report()
    );
}

#[test]
fn a_server_given_credits_decides_and_the_client_that_asked_for_others_warns() {
    let (server, client, s, c) = session(&["--credits", "8"], &["--credits", "64"]);
    assert_eq!((server, client), (8, 8), "{}\n{}", s.report(), c.report());
    assert!(
        c.stderr().lines().any(|l| l.contains("WARN")
            && l.contains("the server set 8 credits, not the --credits 64 asked here")),
        "{}",
        c.report()
    );
    assert!(
        s.stderr()
            .contains("the client asked for 64 credits; this server's --credits 8 decides"),
        "{}",
        s.report()
    );
}

/// Before, a client that keeps 2 messages (its default) against a server of 8 stalled after
/// its second message: the receiver announced credits only once 4 were released.
#[test]
fn a_client_keeping_fewer_messages_than_the_servers_credits_runs_with_its_own() {
    let (server, client, s, c) = session(&["--credits", "8"], &[]);
    assert_eq!((server, client), (2, 2), "{}\n{}", s.report(), c.report());
    assert!(
        !c.stderr().contains("the server set"),
        "nothing was overridden\n{}",
        c.report()
    );
    assert!(
        s.stderr()
            .contains("the client keeps at most 2 messages in flight"),
        "{}",
        s.report()
    );
}

#[test]
fn credits_from_the_environment_count_as_given() {
    let spawn = |port: u16| {
        let addr = format!("{}:{port}", common::test_ip());
        let mut cmd = common::command(&["--server", &addr, "--quiet", "--once", "--json"]);
        cmd.args(common::transport_args(&[]))
            .env("RDMA_CONTAINER_CREDITS", "4");
        Proc::spawn("server", cmd)
    };
    let (mut s, port) = common::listening_on_free_port(spawn, "listening on", SHORT);
    let mut c = client(
        "client",
        port,
        &[
            "--count",
            "100",
            "--json",
            "--credits",
            "16",
            "--max-msg-size",
            "65536",
        ],
    );
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert_eq!(credits_of(&c), 4, "{}", c.report());
}

#[test]
fn a_client_asking_for_more_slot_memory_than_the_servers_limit_is_refused_with_the_figures() {
    let (mut s, port) = server("server", &["--quiet", "--max-receive-memory", "1048576"]);
    // 64 credits of 64 KiB: 4 MiB of slots against a 1 MiB limit.
    let mut c = client(
        "client",
        port,
        &[
            "--count",
            "10",
            "--credits",
            "64",
            "--max-msg-size",
            "65536",
        ],
    );
    assert_eq!(c.wait_code(SHORT), 4, "{}", c.report());
    let err = c.stderr();
    assert!(
        err.contains("64 receive slots (per queue pair) need 4194304 bytes")
            && err.contains("--max-receive-memory of 1048576")
            && !err.contains("trying again"),
        "refused for good, not as busy, with the figures\n{}",
        c.report()
    );
    s.signal(nix::sys::signal::Signal::SIGINT);
    s.wait(SHORT);
}

/// `bench` follows the same rule: its server takes the client's credits unless given its own.
fn bench_run(server_credits: &[&str]) -> Proc {
    let spawn = |port: u16| {
        let addr = format!("{}:{port}", common::test_ip());
        let mut args = vec!["bench", "--server", &addr, "--once", "--transport", "tcp"];
        args.extend_from_slice(server_credits);
        common::start("bench server", &args)
    };
    let (mut s, port) = common::listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("{}:{port}", common::test_ip());
    let mut c = common::start(
        "bench client",
        &[
            "bench",
            "--client",
            &addr,
            "--transport",
            "tcp",
            "--credits",
            "32",
            "-n",
            "200",
            "-s",
            "64",
        ],
    );
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    c
}

#[test]
fn a_bench_server_given_credits_caps_the_clients_and_the_client_warns() {
    let c = bench_run(&["--credits", "4"]);
    assert!(
        c.stderr()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("the server set 4 credits, not the 32")),
        "{}",
        c.report()
    );
    let c = bench_run(&[]);
    assert!(
        !c.stderr().contains("the server set"),
        "without its own, the bench server takes the client's\n{}",
        c.report()
    );
}
