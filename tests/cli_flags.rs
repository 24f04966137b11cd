//! The command line's perftest-compatible spellings (`-d/--ib-dev`, `-i/--ib-port`,
//! `-x/--gid-index`, `-n/--iters`), the old `--port` spelling's warning, the
//! `RDMA_CONTAINER_*` environment variables every flag reads, and the generated shell
//! completions and man page.

mod common;

use common::{command, run, test_ip, FakeSysfs, Proc, LONG, SHORT};

/// Two devices with a RoCE v2 GID each on port 1 and 2: mlx5_0 (10.9.0.1) and mlx5_1
/// (10.9.1.1, port 2, GID index 3).
fn two_devices() -> FakeSysfs {
    let sysfs = FakeSysfs::new();
    sysfs.mlx5("mlx5_0", "eth0", [10, 9, 0, 1]);
    sysfs.port("mlx5_1", 2, "4: ACTIVE", "Ethernet");
    sysfs.gid(
        "mlx5_1",
        2,
        3,
        &common::ipv4_gid([10, 9, 1, 1]),
        "RoCE v2",
        "eth1",
    );
    sysfs
}

/// `doctor --json` with `args` and the environment `env`: the parsed report.
fn doctor(sysfs: &FakeSysfs, args: &[&str], env: &[(&str, &str)]) -> (serde_json::Value, String) {
    let root = sysfs.root().to_str().expect("utf-8 temp path");
    let mut all = vec![
        "doctor",
        "--json",
        "--sysfs-root",
        root,
        "--local-ip",
        "10.9.0.1",
    ];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    cmd.envs(env.iter().copied());
    let mut p = Proc::spawn("doctor", cmd);
    let code = p.wait_code(SHORT);
    assert_eq!(code, 0, "{}", p.report());
    let out = p.stdout();
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    (v, p.stderr())
}

#[test]
fn perftest_short_flags_choose_device_port_and_gid_index() {
    let sysfs = two_devices();
    let (v, _) = doctor(&sysfs, &["-d", "mlx5_1", "-i", "2", "-x", "3"], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_1", "{v}");
    assert_eq!(v["choice"]["port"], 2, "{v}");
    assert_eq!(v["choice"]["gid_index"], 3, "{v}");
    // The long perftest spellings and the old --device mean the same.
    let (v, _) = doctor(
        &sysfs,
        &["--ib-dev", "mlx5_1", "--ib-port", "2", "--gid-index", "3"],
        &[],
    );
    assert_eq!(v["choice"]["device"], "mlx5_1", "{v}");
    let (v, _) = doctor(&sysfs, &["--device", "mlx5_1", "-x", "3"], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_1", "{v}");
}

#[test]
fn old_port_spelling_still_works_and_warns_what_to_use() {
    let sysfs = two_devices();
    let (v, err) = doctor(&sysfs, &["--port", "2", "-x", "3"], &[]);
    assert_eq!(v["choice"]["device"], "mlx5_1", "{v}");
    assert!(
        err.contains("--port N is deprecated") && err.contains("-i/--ib-port"),
        "no deprecation warning naming --ib-port:\n{err}"
    );
    let (_, err) = doctor(&sysfs, &["--ib-port", "2", "-x", "3"], &[]);
    assert!(!err.contains("deprecated"), "{err}");
}

#[test]
fn environment_variables_set_flags_and_the_command_line_wins() {
    let sysfs = two_devices();
    let env = [
        ("RDMA_CONTAINER_IB_DEV", "mlx5_1"),
        ("RDMA_CONTAINER_IB_PORT", "2"),
        ("RDMA_CONTAINER_GID_INDEX", "3"),
    ];
    let (v, _) = doctor(&sysfs, &[], &env);
    assert_eq!(v["choice"]["device"], "mlx5_1", "{v}");
    assert_eq!(v["choice"]["gid_index"], 3, "{v}");
    let (v, _) = doctor(&sysfs, &["-d", "mlx5_0", "-i", "1", "-x", "1"], &env);
    assert_eq!(v["choice"]["device"], "mlx5_0", "{v}");
}

#[test]
fn a_session_configured_only_by_environment_variables() {
    let spawn = |port: u16| {
        let mut server = command(&[]);
        server.envs([
            ("RDMA_CONTAINER_SERVER", format!("{}:{port}", test_ip())),
            ("RDMA_CONTAINER_ONCE", "true".into()),
            ("RDMA_CONTAINER_TRANSPORT", "tcp".into()),
        ]);
        Proc::spawn("server", server)
    };
    let (mut server, port) = common::listening_on_free_port(spawn, "listening on", SHORT);
    let addr = format!("{}:{port}", test_ip());
    let mut client = command(&[]);
    client.envs([
        ("RDMA_CONTAINER_CLIENT", addr.as_str()),
        ("RDMA_CONTAINER_COUNT", "7"),
        ("RDMA_CONTAINER_TRANSPORT", "tcp"),
    ]);
    let mut client = Proc::spawn("client", client);
    assert_eq!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    let lines: Vec<String> = server.stdout().lines().map(str::to_owned).collect();
    assert_eq!(lines, (0..7).map(|i| i.to_string()).collect::<Vec<_>>());
}

#[test]
fn iters_is_the_count_and_n_its_short_form() {
    for flag in ["-n", "--iters"] {
        let (code, out, err) = run(&["demo", flag, "12"], LONG);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.lines().count(), 12, "demo {flag} 12 printed:\n{out}");
    }
}

#[test]
fn completions_and_man_page_name_the_perftest_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(&["completions", shell], SHORT);
        assert_eq!(code, 0, "{err}");
        for flag in ["ib-dev", "ib-port", "gid-index", "iters"] {
            assert!(out.contains(flag), "{shell} completions lack {flag}");
        }
    }
    let (code, out, err) = run(&["man"], SHORT);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(".ie") || out.contains(".TH rdma-container 1"),
        "{out}"
    );
    assert!(
        out.contains("RDMA_CONTAINER_IB_DEV"),
        "man page lacks the env names"
    );
}

/// perftest's and iperf3's habits (issue 35, item 6): a bare number where IP:PORT goes points
/// at `--size`; an address without a port says so; a host name is resolved (IPv4) and logged,
/// and a whole session runs with it.
#[test]
fn server_and_client_addresses_take_host_names_and_explain_perftest_habits() {
    let (code, _, err) = common::run(&["--client", "127.0.0.1:9", "-s", "65536"], SHORT);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is a number, not IP:PORT") && err.contains("--size"),
        "{err}"
    );
    let (code, _, err) = common::run(&["--server", "10.0.0.2"], SHORT);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no port"), "{err}");
    let spawn = |port: u16| {
        let by_name = format!("localhost:{port}");
        common::start(
            "server",
            &["--server", &by_name, "--once", "--transport", "tcp"],
        )
    };
    let (mut s, port) = common::listening_on_free_port(spawn, "listening on 127.0.0.1", SHORT);
    let by_name = format!("localhost:{port}");
    let (code, _, err) = common::run(
        &["--client", &by_name, "--transport", "tcp", "--count", "5"],
        SHORT,
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("localhost resolved to 127.0.0.1"), "{err}");
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
    assert_eq!(s.stdout(), "0\n1\n2\n3\n4\n");
}

/// perftest's and iperf3's spellings: aliases where the meaning is ours too (`-t` credits,
/// `--report_gbits`, `--out_json`, `--run_infinitely`), a one-line pointer where it is not.
#[test]
fn perftest_and_iperf3_spellings_are_aliases_or_point_at_our_flags() {
    let help = |args: &[&str]| common::run(args, SHORT);
    for (args, words) in [
        (
            &["--client", "127.0.0.1:9", "-p", "18515"][..],
            "there is no -p",
        ),
        (
            &["--client", "127.0.0.1:9", "-q", "2"],
            "queue pairs are --qps N",
        ),
        (&["--client", "127.0.0.1:9", "-P", "4"], "--max-sessions"),
    ] {
        let (code, _, err) = help(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: no {words:?} in\n{err}");
    }
    // Accepted spellings: they parse (the run itself fails to connect, status 1, not 2).
    for args in [
        &[
            "--client",
            "127.0.0.1:9",
            "-t",
            "64",
            "--connect-timeout",
            "0.1",
        ][..],
        &[
            "--client",
            "127.0.0.1:9",
            "--out_json",
            "/dev/null",
            "--connect-timeout",
            "0.1",
        ],
        &[
            "bench",
            "--client",
            "127.0.0.1:9",
            "--report_gbits",
            "--connect-timeout",
            "0.1",
        ],
        &[
            "bench",
            "--client",
            "127.0.0.1:9",
            "--run_infinitely",
            "--connect-timeout",
            "0.1",
        ],
        &[
            "bench",
            "--client",
            "127.0.0.1:9",
            "-t",
            "8",
            "--connect-timeout",
            "0.1",
        ],
    ] {
        let (code, _, err) = help(args);
        assert_eq!(code, 1, "{args:?} parses: {err}");
    }
}

/// Issue 35 item 5: the queue pair flags come from `RDMA_CONTAINER_TCLASS`, `_SL`, `_MTU`,
/// `_ACK_TIMEOUT` and `_RETRY_COUNT` too, out-of-range values are usage errors (exit 2) naming
/// the flag, and --transport tcp refuses them instead of ignoring them.
#[test]
fn queue_pair_settings_come_from_flags_or_variables_and_bad_ones_exit_2() {
    let client = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["--client", "127.0.0.1:9", "--connect-timeout", "1"];
        all.extend_from_slice(args);
        let mut cmd = command(&all);
        cmd.envs(env.iter().copied());
        let mut p = Proc::spawn("client", cmd);
        let code = p.wait_code(SHORT);
        (code, p.stderr())
    };
    for (name, value, flag) in [
        ("RDMA_CONTAINER_TCLASS", "256", "--tclass"),
        ("RDMA_CONTAINER_SL", "16", "--sl"),
        ("RDMA_CONTAINER_MTU", "1500", "--mtu"),
        ("RDMA_CONTAINER_ACK_TIMEOUT", "32", "--ack-timeout"),
        ("RDMA_CONTAINER_RETRY_COUNT", "8", "--retry-count"),
    ] {
        let (code, err) = client(&[], &[(name, value)]);
        assert_eq!(code, 2, "{name}={value}: {err}");
        assert!(
            err.contains(flag),
            "{name}={value} does not name {flag}:\n{err}"
        );
        let (code, err) = client(&[flag, value], &[]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
    }
    // Each variable is read: with --transport tcp they are all named in the refusal.
    let env = [
        ("RDMA_CONTAINER_TCLASS", "104"),
        ("RDMA_CONTAINER_SL", "3"),
        ("RDMA_CONTAINER_MTU", "2048"),
        ("RDMA_CONTAINER_ACK_TIMEOUT", "14"),
        ("RDMA_CONTAINER_RETRY_COUNT", "5"),
        ("RDMA_CONTAINER_TRANSPORT", "tcp"),
    ];
    let (code, err) = client(&[], &env);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "the queue-pair settings (--tclass, --sl, --mtu, --ack-timeout, --retry-count) apply to an RDMA queue pair, and \
             --transport tcp has none"
        ),
        "{err}"
    );
    // The command line wins over the variable: --transport auto takes them (and, with no
    // server, fails later for another reason than a usage error).
    let (code, err) = client(&["--transport", "auto"], &env);
    assert_ne!(code, 2, "{err}");
}
