//! 10,000 messages between two network namespaces joined by a veth pair: the server in one,
//! the client in the other, talking over private addresses that exist only inside them.
//!
//! Needs root and `ip netns`; without them it prints "skipped: ..." and passes, or fails under
//! `RDMA_TEST_STRICT=1` (CI runs it as root with iproute2 and strict, where it really runs).
//! The namespaces (and with them the veth pair) are always deleted, also when the test fails.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::{
    check_counting, ipv4_gid, skip_or_fail, skip_unless_strict_allows, transport_args, Allowed,
    FakeSysfs, Proc, BIN, LONG, SHORT,
};

/// The server's port inside its own, fresh namespace (nothing else can listen there).
const PORT: u16 = 5000;

/// The session result `--json` printed in `log` (the stderr of `who`).
fn json_result(log: &str, who: &Proc) -> serde_json::Value {
    log.lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON result\n{}", who.report()))
}

/// Runs `ip ARGS` (bounded); Err(stderr) when it cannot be started or fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    let what = format!("ip {}", args.join(" "));
    let mut p = Proc::try_spawn(&what, cmd).map_err(|e| format!("cannot run ip: {e}"))?;
    match p.wait_code(SHORT) {
        0 => Ok(()),
        code => Err(format!("`{what}` exited {code}: {}", p.stderr().trim())),
    }
}

/// Runs `ip ARGS` and fails the test when it fails.
fn ip_ok(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("{e}");
    }
}

/// Deletes the namespaces it holds when dropped (their veth ends go with them).
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// The binary under test inside namespace `ns`, with `RUST_LOG=info`.
fn in_netns(name: &str, ns: &str, args: &[&str]) -> Proc {
    in_netns_env(name, ns, args, &[])
}

fn in_netns_env(name: &str, ns: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, BIN])
        .args(args)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied());
    Proc::spawn(name, cmd)
}

/// Two namespaces joined by a veth pair with private /30 addresses; `None` (after
/// [`skip_or_fail`] said why) when this host cannot make them.
struct Net {
    // Declared first so it drops (deleting the namespaces) after everything that runs inside.
    _namespaces: Namespaces,
    ns1: String,
    ns2: String,
    veth1: String,
    veth2: String,
    addr1: String,
    addr2: String,
    octets: ([u8; 4], [u8; 4]),
}

fn make_net(tag: &str) -> Option<Net> {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("not root (ip netns needs root)");
        return None;
    }
    let pid = std::process::id();
    let (ns1, ns2) = (format!("rdmac-{pid}-{tag}s"), format!("rdmac-{pid}-{tag}c"));
    // Names carry our pid: one left over by a killed earlier run of that pid is stale.
    for ns in [&ns1, &ns2] {
        let _ = ip(&["netns", "del", ns]);
    }
    let mut namespaces = Namespaces(Vec::new());
    if let Err(e) = ip(&["netns", "add", &ns1]) {
        skip_or_fail(&format!("ip netns unavailable: {e}"));
        return None;
    }
    namespaces.0.push(ns1.clone());
    ip_ok(&["netns", "add", &ns2]);
    namespaces.0.push(ns2.clone());

    // Created directly inside the namespaces: the host never sees the pair or its addresses.
    let (veth1, veth2) = (format!("rd{pid}{tag}s"), format!("rd{pid}{tag}c"));
    ip_ok(&[
        "link", "add", &veth1, "netns", &ns1, "type", "veth", "peer", "name", &veth2, "netns", &ns2,
    ]);
    let net = (pid % 125) as u8 * 2 + u8::from(tag != "a");
    let octets = ([10, 231, net, 1], [10, 231, net, 2]);
    let (addr1, addr2) = (format!("10.231.{net}.1"), format!("10.231.{net}.2"));
    for (ns, veth, addr) in [(&ns1, &veth1, &addr1), (&ns2, &veth2, &addr2)] {
        ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        ip_ok(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", veth]);
        ip_ok(&["-n", ns, "link", "set", veth, "up"]);
    }
    Some(Net {
        _namespaces: namespaces,
        ns1,
        ns2,
        veth1,
        veth2,
        addr1,
        addr2,
        octets,
    })
}

#[test]
fn ten_thousand_messages_between_two_network_namespaces() {
    let Some(net) = make_net("a") else { return };
    let (ns1, ns2, veth1, addr1, addr2) = (&net.ns1, &net.ns2, &net.veth1, &net.addr1, &net.addr2);
    let transport = transport_args(&[net.octets.0, net.octets.1]);
    let transport: Vec<&str> = transport.iter().map(String::as_str).collect();

    let listen = format!("{addr1}:{PORT}");
    let mut server_args = vec!["--server", listen.as_str(), "--once"];
    server_args.extend(&transport);
    let mut server = in_netns("server", ns1, &server_args);
    server.wait_for_stderr("listening on", SHORT);
    let mut client_args = vec!["--client", listen.as_str(), "--connect-timeout", "10"];
    client_args.extend(&transport);
    let mut client = in_netns("client", ns2, &client_args);

    let client_code = client.wait_code(LONG);
    let server_code = server.wait_code(LONG);
    assert_eq!(client_code, 0, "{}", client.report());
    assert_eq!(server_code, 0, "{}", server.report());
    if let Err(e) = check_counting(&server.stdout(), 10_000) {
        panic!("server stdout: {e}\n{}", server.report());
    }
    let log = server.stderr();
    assert!(
        log.lines().any(|l| l.contains("10000 messages")),
        "no summary line with \"10000 messages\"\n{}",
        server.report()
    );
    if std::env::var("RDMA_TEST_TRANSPORT").as_deref() == Ok("doca") {
        assert!(log.contains("transport doca"), "{}", server.report());
    }
    // The session really crossed the veth pair: the server saw the client's namespace address.
    assert!(
        log.contains(&format!("source {addr1} ({veth1}) -> peer {addr2}")),
        "the session did not run over {veth1}\n{}",
        server.report()
    );
}

/// `auto` on an address that sysfs says has a RoCE v2 GID, on a device libibverbs does not know
/// (our fake tree): the binary starts, says the RDMA transport cannot start, and uses TCP.
#[test]
fn auto_falls_back_to_tcp_when_the_rdma_transport_cannot_start() {
    if std::env::var("RDMA_TEST_TRANSPORT").is_ok_and(|t| !t.is_empty() && t != "auto") {
        skip_unless_strict_allows(
            Allowed::OtherTransport,
            "this test is about --transport auto (it runs when RDMA_TEST_TRANSPORT is unset)",
        );
        return;
    }
    let Some(net) = make_net("b") else { return };
    let sysfs = FakeSysfs::new();
    sysfs.port("mlx5_7", 1, "4: ACTIVE", "Ethernet");
    sysfs.gid(
        "mlx5_7",
        1,
        3,
        &ipv4_gid(net.octets.0),
        "RoCE v2",
        &net.veth1,
    );
    sysfs.gid("mlx5_7", 1, 5, &ipv4_gid(net.octets.1), "RoCE v2", "other0");
    let root = sysfs.root().display().to_string();
    let listen = format!("{}:{PORT}", net.addr1);
    let mut server = in_netns(
        "server",
        &net.ns1,
        &["--server", &listen, "--once", "--sysfs-root", &root],
    );
    server.wait_for_stderr("listening on", SHORT);
    let mut client = in_netns(
        "client",
        &net.ns2,
        &["--client", &listen, "--count", "100", "--sysfs-root", &root],
    );
    assert_eq!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    let log = server.stderr();
    assert!(
        log.contains("mlx5_7 port 1") && log.contains("using the TCP transport"),
        "the fallback must name the GID's device and say TCP\n{}",
        server.report()
    );
    assert!(
        log.contains("session established: transport tcp"),
        "{}",
        server.report()
    );
    if let Err(e) = check_counting(&server.stdout(), 100) {
        panic!("server stdout: {e}\n{}", server.report());
    }
}

/// Where rdma-core is absent (played by pointing verbs-sys at a file that does not exist), the
/// binary still starts, says why verbs cannot start and what to install, and `auto` uses TCP.
#[test]
fn auto_falls_back_to_tcp_when_libibverbs_is_absent() {
    if std::env::var("RDMA_TEST_TRANSPORT").is_ok_and(|t| !t.is_empty() && t != "auto") {
        eprintln!("skipped: this test is about --transport auto");
        return;
    }
    if cfg!(not(feature = "verbs")) {
        eprintln!("skipped: the verbs transport is not compiled in");
        return;
    }
    let Some(net) = make_net("c") else { return };
    let sysfs = FakeSysfs::new();
    sysfs.port("mlx5_8", 1, "4: ACTIVE", "Ethernet");
    sysfs.gid(
        "mlx5_8",
        1,
        3,
        &ipv4_gid(net.octets.0),
        "RoCE v2",
        &net.veth1,
    );
    let root = sysfs.root().display().to_string();
    let listen = format!("{}:{PORT}", net.addr1);
    let no_rdma_core = [("VERBS_SYS_LIBIBVERBS", "/nonexistent/libibverbs.so.1")];
    let mut server = in_netns_env(
        "server",
        &net.ns1,
        &["--server", &listen, "--once", "--sysfs-root", &root],
        &no_rdma_core,
    );
    server.wait_for_stderr("listening on", SHORT);
    let mut client = in_netns_env(
        "client",
        &net.ns2,
        &["--client", &listen, "--count", "100", "--sysfs-root", &root],
        &no_rdma_core,
    );
    assert_eq!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    let log = server.stderr();
    assert!(
        log.contains(
            "libibverbs.so.1 not found (install rdma-core: apt-get install libibverbs1 ibverbs-providers)"
        ) && log.contains("using the TCP transport"),
        "the fallback must say that libibverbs.so.1 is missing and what to install\n{}",
        server.report()
    );
    assert!(
        log.contains("session established: transport tcp"),
        "{}",
        server.report()
    );
    if let Err(e) = check_counting(&server.stdout(), 100) {
        panic!("server stdout: {e}\n{}", server.report());
    }
}

/// The bound docs/design.md promises for noticing a host that vanished without a word: TCP
/// keepalive after 5 s idle, 3 probes 2 s apart, and TCP_USER_TIMEOUT 15 s for unacknowledged
/// data, plus the one-second slices in which the ends look, and slack for a loaded machine.
const VANISHED_PEER_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// A client whose link goes down mid-stream (no FIN, no RST: its host just vanished) is reported
/// by the server as "peer lost" with the count of what arrived, within the keepalive bound.
#[test]
fn a_peer_that_vanishes_silently_is_reported_lost_within_the_keepalive_bound() {
    let Some(net) = make_net("d") else { return };
    let transport = transport_args(&[net.octets.0, net.octets.1]);
    let transport: Vec<&str> = transport.iter().map(String::as_str).collect();
    let listen = format!("{}:{PORT}", net.addr1);
    let mut server_args = vec!["--server", listen.as_str(), "--once"];
    server_args.extend(&transport);
    let mut server = in_netns("server", &net.ns1, &server_args);
    server.wait_for_stderr("listening on", SHORT);
    let mut client_args = vec!["--client", listen.as_str(), "--count", "100000000"];
    client_args.extend(&transport);
    let mut client = in_netns("client", &net.ns2, &client_args);
    server.wait_for_stdout_lines(1000, SHORT);

    // The client's side of the link goes down: from the server's side it just goes quiet.
    ip_ok(&["-n", &net.ns2, "link", "set", &net.veth2, "down"]);
    let vanished = std::time::Instant::now();
    let code = server.wait_code(VANISHED_PEER_BOUND + SHORT);
    let took = vanished.elapsed();
    assert_eq!(code, 3, "{}", server.report());
    let err = server.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("peer lost"))
        .unwrap_or_else(|| panic!("no \"peer lost\" line\n{}", server.report()));
    let arrived = common::lost_after(line)
        .unwrap_or_else(|| panic!("the peer-lost line has no count: {line}"));
    // Every message counted as arrived was printed (our reader of the pipe may lag behind).
    server.wait_for_stdout_lines(arrived as usize, SHORT);
    let printed = server.stdout().lines().count() as u64;
    assert_eq!(arrived, printed, "{line}\n{}", server.report());
    assert!(
        took < VANISHED_PEER_BOUND,
        "the server took {took:?} to notice (bound {VANISHED_PEER_BOUND:?})\n{}",
        server.report()
    );
    client.kill();
}

/// A pod's view: the bootstrap runs over the RoCE network on a second interface (`net1`, a
/// Multus secondary network) and the SR-IOV device plugin's `PCIDEVICE_*_INFO` names the VF
/// (mlx5_5) among devices that all carry that address in the node's sysfs. The server picks
/// mlx5_5, not the lowest; its verbs transport cannot start on the fake device, so auto uses
/// TCP and the session result says why; with `--require-rdma` it refuses with exit status 5.
#[test]
fn roce_address_on_a_second_interface_and_the_device_from_pcidevice_info() {
    if std::env::var("RDMA_TEST_TRANSPORT").is_ok_and(|t| !t.is_empty() && t != "auto") {
        skip_unless_strict_allows(
            Allowed::OtherTransport,
            "this test is about --transport auto (it runs when RDMA_TEST_TRANSPORT is unset)",
        );
        return;
    }
    let Some(net) = make_net("k") else { return };
    // net1 in both namespaces (names are per namespace), on its own /30.
    ip_ok(&[
        "link", "add", "net1", "netns", &net.ns1, "type", "veth", "peer", "name", "net1", "netns",
        &net.ns2,
    ]);
    let sub = net.octets.0[2];
    let (roce1, roce2) = (format!("10.232.{sub}.1"), format!("10.232.{sub}.2"));
    for (ns, addr) in [(&net.ns1, &roce1), (&net.ns2, &roce2)] {
        ip_ok(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/30"),
            "dev",
            "net1",
        ]);
        ip_ok(&["-n", ns, "link", "set", "net1", "up"]);
    }
    // The node's sysfs: mlx5_0 on the first interface, mlx5_4 and mlx5_5 both carrying the
    // server's RoCE address on net1; all three uverbs nodes present.
    let host = common::FakeHost::empty();
    let sys = host.sysfs();
    sys.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    sys.gid(
        "mlx5_0",
        1,
        3,
        &ipv4_gid(net.octets.0),
        "RoCE v2",
        &net.veth1,
    );
    for (n, dev) in [(0, "mlx5_0"), (4, "mlx5_4"), (5, "mlx5_5")] {
        if dev != "mlx5_0" {
            sys.port(dev, 1, "4: ACTIVE", "Ethernet");
            sys.gid(dev, 1, 2, &ipv4_gid([10, 232, sub, 1]), "RoCE v2", "net1");
        }
        host.uverbs(n, dev);
        host.node(&format!("uverbs{n}"));
    }
    let info = r#"{"0000:3b:00.3":{"generic":{"deviceID":"0000:3b:00.3"},"rdma":{"rdma_dev":"mlx5_5","uverbs":"/dev/infiniband/uverbs5","rdma_cm":"/dev/infiniband/rdma_cm"}}}"#;
    let root = host.path("sys").display().to_string();
    let dev = host.path("dev").display().to_string();
    let env = [
        ("PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO", info),
        ("RDMA_CONTAINER_DEV_ROOT", dev.as_str()),
    ];
    let listen = format!("{roce1}:{PORT}");
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "--server",
            &listen,
            "--once",
            "--json",
            "--sysfs-root",
            &root,
        ];
        args.extend_from_slice(extra);
        let mut server = in_netns_env("server", &net.ns1, &args, &env);
        server.wait_for_stderr("listening on", SHORT);
        server
    };
    let send = || {
        in_netns(
            "client",
            &net.ns2,
            &["--client", &listen, "-n", "100", "--transport", "tcp"],
        )
    };

    let mut server = serve(&[]);
    let mut client = send();
    assert_eq!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    let log = server.stderr();
    assert!(
        log.contains("device plugin: PCIDEVICE_NVIDIA_COM_SRIOV_ROCE_INFO gives mlx5_5"),
        "{}",
        server.report()
    );
    assert!(
        log.contains(&format!("source {roce1} (net1) -> peer {roce2}")),
        "the session did not run over net1\n{}",
        server.report()
    );
    let result = json_result(&log, &server);
    assert_eq!(result["transport"], "tcp", "{result}");
    assert_eq!(result["messages"], 100, "{result}");
    let why = result["fallback_reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("on mlx5_5 port 1 owns source {roce1} (net1)")),
        "the fallback reason must name the plugin's device and net1: {why}"
    );
    if let Err(e) = check_counting(&server.stdout(), 100) {
        panic!("server stdout: {e}\n{}", server.report());
    }
    eprintln!("net1 session: {why}");

    // RDMA required: the same choice, refused instead of TCP.
    let mut server = serve(&["--require-rdma"]);
    let mut client = send();
    assert_ne!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 5, "{}", server.report());
    assert!(
        server
            .stderr()
            .contains("RDMA is required (--require-rdma) but not possible here: RoCE v2 GID"),
        "{}",
        server.report()
    );
}

/// A second veth pair between the namespaces of `net`, on its own /30 (10.233.x.0): the
/// addresses (server's end, client's end) and the veth names.
fn second_path(net: &Net) -> (String, String, String, String) {
    let sub = net.octets.0[2];
    let pid = std::process::id();
    let (veth1, veth2) = (format!("rd{pid}{sub}S"), format!("rd{pid}{sub}C"));
    ip_ok(&[
        "link", "add", &veth1, "netns", &net.ns1, "type", "veth", "peer", "name", &veth2, "netns",
        &net.ns2,
    ]);
    let (addr1, addr2) = second_path_addresses(net);
    for (ns, veth, addr) in [(&net.ns1, &veth1, &addr1), (&net.ns2, &veth2, &addr2)] {
        ip_ok(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", veth]);
        ip_ok(&["-n", ns, "link", "set", veth, "up"]);
    }
    (addr1, addr2, veth1, veth2)
}

/// The addresses of [`second_path`] (server's end, client's end).
fn second_path_addresses(net: &Net) -> (String, String) {
    let sub = net.octets.0[2];
    (format!("10.233.{sub}.1"), format!("10.233.{sub}.2"))
}

/// `GET /metrics` from the metrics server on port `port` of namespace `ns`'s loopback (bash's
/// /dev/tcp inside the namespace): the body.
fn scrape_in(ns: &str, port: u16) -> String {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
    );
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "bash", "-c", &script]);
    let mut p = Proc::spawn("scrape", cmd);
    assert_eq!(p.wait_code(SHORT), 0, "{}", p.report());
    p.stdout()
}

/// Bytes an interface of namespace `ns` received, from its counters.
fn rx_bytes(ns: &str, dev: &str) -> u64 {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{dev}/statistics/rx_bytes"));
    let mut p = Proc::spawn("rx_bytes", cmd);
    assert_eq!(p.wait_code(SHORT), 0, "{}", p.report());
    p.stdout()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {}", p.report()))
}

/// `--paths`: a client names the server's second address, and the session's four queue pairs
/// (tcp: data connections; DOCA simulator: one device per path) take the two veth pairs in
/// turn: 10,000 messages arrive in order, each end's session line names both paths, the
/// JSON result lists them, and the second pair carried about half the traffic (its receive
/// counter on the server's end moved by at least a quarter of what the messages hold).
#[test]
fn messages_spread_over_two_paths_between_two_network_namespaces_arrive_in_order() {
    let Some(net) = make_net("p") else { return };
    let (b1, b2, vb1, vb2) = second_path(&net);
    let kind = std::env::var("RDMA_TEST_TRANSPORT").unwrap_or_default();
    // Each path has its own device: the simulator lists two, and the fake sysfs gives each
    // one the GIDs of its own pair's addresses (both ends read the same tree).
    let sysfs = FakeSysfs::new();
    let mut transport: Vec<String> = Vec::new();
    let mut env: Vec<(&str, &str)> = Vec::new();
    match kind.as_str() {
        "" | "auto" | "tcp" => transport.extend(["--transport".to_owned(), "tcp".to_owned()]),
        "doca" if std::env::var_os("RDMA_TEST_ADDR").is_none() => {
            transport = doca_device_per_path(&net, &sysfs, (&b1, &b2, &vb1, &vb2));
            env.push(("DOCA_SIM_DEVICES", "mlx5_0,mlx5_1"));
        }
        other => {
            skip_unless_strict_allows(
                Allowed::OtherTransport,
                &format!("two paths need two devices; transport {other} here has one"),
            );
            return;
        }
    }
    let transport: Vec<&str> = transport.iter().map(String::as_str).collect();
    let listen = format!("{}:{PORT}", net.addr1);
    let mut server_args = vec!["--server", listen.as_str(), "--once", "--json"];
    server_args.extend(&transport);
    let mut server = in_netns_env("server", &net.ns1, &server_args, &env);
    server.wait_for_stderr("listening on", SHORT);
    let before = rx_bytes(&net.ns1, &vb1);
    let mut client_args = vec![
        "--client",
        listen.as_str(),
        "--paths",
        b1.as_str(),
        "--qps",
        "4",
        "--size",
        "1000",
        "--connect-timeout",
        "10",
    ];
    client_args.extend(&transport);
    let mut client = in_netns_env("client", &net.ns2, &client_args, &env);
    assert_eq!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    // Message i is "i" padded to 1,000 bytes with the alphabet: in order, whole, once each.
    let out = server.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 10_000, "{}", server.report());
    for (i, line) in lines.iter().enumerate() {
        let number = i.to_string();
        let whole = line.len() == 1_000
            && line.starts_with(&number)
            && line[number.len()..].starts_with('a');
        assert!(
            whole,
            "line {i} is not message {i} of 1,000 bytes: {line:.40}"
        );
    }
    let log = server.stderr();
    for (who, log, (src, dev), peer) in [
        ("server", &log, (&b1, &vb1), &b2),
        ("client", &client.stderr(), (&b2, &vb2), &b1),
    ] {
        assert!(
            log.contains("| qps 4 |")
                && log.contains(&format!("path 1 source {src} ({dev}) -> peer {peer}")),
            "the {who}'s session line must name the second path\n{}",
            if who == "server" {
                server.report()
            } else {
                client.report()
            }
        );
    }
    let result = json_result(&log, &server);
    if let Some(checked) = common::check_json("docs/session-result.schema.json", &result) {
        checked.unwrap_or_else(|e| panic!("{e}\n{result}"));
    }
    let paths = result["paths"].as_array().cloned().unwrap_or_default();
    assert_eq!(paths.len(), 2, "{result}");
    assert_eq!(paths[1]["source"], b1.as_str(), "{result}");
    assert_eq!(paths[1]["peer"], b2.as_str(), "{result}");
    // What each path delivered adds up to the session's bytes (nothing was sent again), and
    // the second path's lanes delivered half of the messages.
    let by_path: Vec<u64> = paths.iter().filter_map(|p| p["bytes"].as_u64()).collect();
    assert_eq!(by_path.len(), 2, "{result}");
    assert_eq!(
        Some(by_path.iter().sum::<u64>()),
        result["bytes"].as_u64(),
        "{result}"
    );
    assert!(by_path[1] >= 10_000 * 1_000 / 4, "{result}");
    if kind == "doca" {
        assert_eq!(paths[0]["device"], "mlx5_0", "{result}");
        assert_eq!(paths[1]["device"], "mlx5_1", "{result}");
    } else {
        // tcp: the second pair carried its lanes' messages (10,000 x 1,000 bytes, half on it).
        let carried = rx_bytes(&net.ns1, &vb1) - before;
        assert!(
            carried >= 10_000 * 1_000 / 4,
            "the second path received {carried} bytes; its two lanes should carry about half of \
             10 MB\n{}",
            server.report()
        );
    }
}

/// The DOCA simulator's arguments for a device per path: `mlx5_0` on the namespaces' first
/// pair, `mlx5_1` on the second (`b1`, `b2`, `vb1`, `vb2`, as [`second_path`] made them), each
/// with its pair's GIDs in `sysfs` (both ends read the same tree). The simulator must be told
/// of both devices (`DOCA_SIM_DEVICES=mlx5_0,mlx5_1`).
fn doca_device_per_path(
    net: &Net,
    sysfs: &FakeSysfs,
    (b1, b2, vb1, vb2): (&str, &str, &str, &str),
) -> Vec<String> {
    for (dev, pairs) in [
        (
            "mlx5_0",
            [
                (net.octets.0, net.veth1.as_str()),
                (net.octets.1, net.veth2.as_str()),
            ],
        ),
        ("mlx5_1", [(parse(b1), vb1), (parse(b2), vb2)]),
    ] {
        sysfs.active(dev, 1);
        for (i, (ip, ndev)) in (1..).zip(pairs) {
            sysfs.gid(dev, 1, i, &ipv4_gid(ip), "RoCE v2", ndev);
        }
    }
    let root = sysfs.root().display().to_string();
    ["--transport", "doca", "--sysfs-root", &root]
        .map(str::to_owned)
        .to_vec()
}

fn parse(addr: &str) -> [u8; 4] {
    addr.parse::<std::net::Ipv4Addr>()
        .unwrap_or_else(|e| panic!("{addr}: {e}"))
        .octets()
}

/// How a test takes the second path away from the server's side.
#[derive(Clone, Copy)]
enum PathLoss {
    /// Its veth goes down.
    LinkDown,
    /// Its address is deleted (the link stays up): nothing can be bound to it.
    AddressGone,
}

/// A tcp session over two paths between two new namespaces (tag `tag`), `count` messages on
/// `qps` data connections (`both`: more arguments for both ends), broken after 20,000
/// arrived: the second path is taken from the server's side (`loss`) and the client's data
/// connections on it are killed (`ss -K`). `None` where the test cannot run (another
/// transport, or no network namespaces: said). Returns the namespaces, the second veth's name
/// on the server's side, the server and the client.
fn two_path_session_losing_the_second(
    tag: &str,
    count: u64,
    qps: &str,
    both: &[&str],
    vm_check: &str,
    loss: PathLoss,
) -> Option<(Net, String, Proc, Proc)> {
    let kind = std::env::var("RDMA_TEST_TRANSPORT").unwrap_or_default();
    if !matches!(kind.as_str(), "" | "auto" | "tcp") {
        skip_unless_strict_allows(
            Allowed::OtherTransport,
            &format!("this test breaks tcp data connections (verbs: the soft-RoCE VM's {vm_check} check)"),
        );
        return None;
    }
    let net = make_net(tag)?;
    let (b1, _b2, vb1, _vb2) = second_path(&net);
    let listen = format!("{}:{PORT}", net.addr1);
    let mut common = vec!["--transport", "tcp", "--resume-timeout", "10"];
    common.extend(both);
    let mut server_args = vec!["--server", listen.as_str(), "--once"];
    server_args.extend(&common);
    let mut server = in_netns("server", &net.ns1, &server_args);
    server.wait_for_stderr("listening on", SHORT);
    let count = count.to_string();
    let mut client_args = vec![
        "--client",
        listen.as_str(),
        "--paths",
        b1.as_str(),
        "--qps",
        qps,
        "--count",
        &count,
        "--json",
        "--connect-timeout",
        "10",
    ];
    client_args.extend(&common);
    let client = in_netns("client", &net.ns2, &client_args);
    server.wait_for_stdout_lines(20_000, LONG);
    match loss {
        PathLoss::LinkDown => ip_ok(&["-n", &net.ns1, "link", "set", &vb1, "down"]),
        PathLoss::AddressGone => ip_ok(&[
            "-n",
            &net.ns1,
            "addr",
            "del",
            &format!("{b1}/30"),
            "dev",
            &vb1,
        ]),
    }
    kill_connections_in(&net.ns2, &b1);
    Some((net, vb1, server, client))
}

/// Kills (`ss -K`) every tcp connection in namespace `ns` to `dst` (an address, or an
/// address and port).
fn kill_connections_in(ns: &str, dst: &str) {
    let mut ss = Command::new("ip");
    ss.args(["netns", "exec", ns, "ss", "-K", "-tn", "dst", dst]);
    let mut killed = Proc::spawn("ss -K", ss);
    assert_eq!(killed.wait_code(SHORT), 0, "{}", killed.report());
}

/// Both ends exit 0 and the server printed 0..`count` once each, in order: the client's log
/// and its JSON result.
fn finished_in_order(
    server: &mut Proc,
    client: &mut Proc,
    count: u64,
) -> (String, serde_json::Value) {
    assert_eq!(client.wait_code(LONG), 0, "{}", client.report());
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    if let Err(e) = check_counting(&server.stdout(), count) {
        panic!("server stdout: {e}\n{}", server.report());
    }
    let log = client.stderr();
    let result = json_result(&log, client);
    (log, result)
}

/// `--paths`, a path lost for good: mid-stream the second veth pair goes down and the client's
/// data connections on it are killed (`ss -K`). The session resumes without that path (its
/// queue pairs parked) and delivers every message once, in order, over the first, while the
/// second stays down: the client's JSON counts one path lost, and the server never waited for
/// the dead path (which a resume that needed it would, until its timeout).
#[test]
fn a_session_over_two_paths_goes_on_over_one_when_the_other_is_lost_for_good() {
    const COUNT: u64 = 200_000;
    let Some((_net, _vb1, mut server, mut client)) =
        two_path_session_losing_the_second("l", COUNT, "4", &[], "paths_lost", PathLoss::LinkDown)
    else {
        return;
    };
    let (log, result) = finished_in_order(&mut server, &mut client, COUNT);
    assert!(result["resumes"].as_u64() >= Some(1), "{result}");
    assert_eq!(result["paths_lost"], 1, "{result}\n{}", client.report());
    assert!(
        log.contains("path 1 failed: the session goes on over the other path(s) without it"),
        "{}",
        client.report()
    );
}

/// `--paths`, a path lost and back: mid-stream the second veth pair goes down and the
/// client's data connections on it are killed. The session resumes without that path; while
/// the link stays down the client's probe of it gets no answer, so it does not resume into a
/// dead path; once the link is up again the probe is answered, the client resumes, and the
/// path carries messages again. Every message arrives once, in order, and the client's JSON
/// counts the path lost once and rebuilt once. With a key and checksums (the resumes
/// authenticate, every message is checked).
#[test]
fn a_path_lost_mid_stream_is_used_again_once_it_comes_back() {
    const COUNT: u64 = 400_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("key");
    std::fs::write(&key, "two-paths-and-a-key-0123456789abcdef\n").expect("write key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key = key.to_str().expect("utf-8 path");
    // Each end serves metrics on its own namespace's loopback.
    let both = [
        "--auth-key-file",
        key,
        "--checksum",
        "crc32c",
        "--metrics",
        "9464",
    ];
    let Some((net, vb1, mut server, mut client)) = two_path_session_losing_the_second(
        "b",
        COUNT,
        "2",
        &both,
        "paths_back",
        PathLoss::LinkDown,
    ) else {
        return;
    };
    client.wait_for_stderr("path 1 failed", SHORT);
    client.wait_for_stderr("path 1: no answer on it yet", SHORT);
    ip_ok(&["-n", &net.ns1, "link", "set", &vb1, "up"]);
    client.wait_for_stderr("path 1 is back", LONG);
    // The server's metrics count the path lost and taken back, and what each path carried.
    let deadline = std::time::Instant::now() + SHORT;
    let scraped = loop {
        let text = scrape_in(&net.ns1, 9464);
        if text
            .lines()
            .any(|l| l == "rdma_container_paths_rebuilt_total 1")
            || std::time::Instant::now() > deadline
        {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for line in [
        "rdma_container_paths_lost_total 1",
        "rdma_container_paths_rebuilt_total 1",
    ] {
        assert!(
            scraped.lines().any(|l| l == line),
            "no {line:?} in\n{scraped}"
        );
    }
    for path in ["0", "1"] {
        let series = format!("rdma_container_path_bytes_total{{path=\"{path}\"}} ");
        let bytes: u64 = scraped
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series:?} in\n{scraped}"));
        assert!(bytes > 0, "path {path} carried nothing:\n{scraped}");
    }

    let (log, result) = finished_in_order(&mut server, &mut client, COUNT);
    assert_eq!(result["paths_lost"], 1, "{result}\n{}", client.report());
    assert_eq!(result["paths_rebuilt"], 1, "{result}\n{}", client.report());
    assert_eq!(
        result["resumes"], 2,
        "one for the break, one to bring the path back: {result}"
    );
    assert!(
        log.contains("path 1 answers again: resuming to bring it back"),
        "{}",
        client.report()
    );
    assert_eq!(result["checksum"], "crc32c", "{result}");
}

/// `--paths`, a path whose address disappears: mid-stream the server's address on the second
/// path is deleted (its link stays up) and the client's data connections on it are killed.
/// The server, which saw nothing fail on that path, cannot make its data connection on it
/// again (nothing can be bound to the address): it leaves the path out of that same resume
/// instead of failing every attempt until the resume timeout. Once the address is back, the
/// client's probe is answered and the path carries messages again. Every message arrives
/// once, in order, with checksums.
#[test]
fn a_path_whose_address_disappears_is_left_out_and_used_again_once_it_is_back() {
    const COUNT: u64 = 400_000;
    let Some((net, vb1, mut server, mut client)) = two_path_session_losing_the_second(
        "a",
        COUNT,
        "2",
        &["--checksum", "crc32c"],
        "paths_back",
        PathLoss::AddressGone,
    ) else {
        return;
    };
    client.wait_for_stderr("path 1 failed", SHORT);
    server.wait_for_stderr("could not be made again", SHORT);
    client.wait_for_stderr("path 1: no answer on it yet", SHORT);
    let (b1, ..) = second_path_addresses(&net);
    ip_ok(&[
        "-n",
        &net.ns1,
        "addr",
        "add",
        &format!("{b1}/30"),
        "dev",
        &vb1,
    ]);
    client.wait_for_stderr("path 1 is back", LONG);
    let (_, result) = finished_in_order(&mut server, &mut client, COUNT);
    assert_eq!(result["paths_lost"], 1, "{result}\n{}", client.report());
    assert_eq!(result["paths_rebuilt"], 1, "{result}\n{}", client.report());
    assert_eq!(
        result["resumes"],
        2,
        "one for the break (no failed attempt), one to bring the path back: {result}\n{}",
        server.report()
    );
}

/// `--paths` on the DOCA simulator, a queue pair that cannot be made again: the client's
/// control connection is killed mid-stream (`ss -K`: a break that blames no path, so every
/// path is tried again), and the server's fourth context start fails (`doca_ctx_start:4`: its
/// second lane, on the second path, at the first resume). The server leaves that path out of
/// that same resume, rather than failing the attempt, and says so; the session goes on, and
/// every message arrives once, in order. (Failing the attempt instead, the next one makes both
/// lanes and leaves nothing out: `paths_lost` 0.) A dropped connection would not do as the
/// break: its lane's close, alone, is taken as that lane's failure, which parks its path
/// (path 0) first, and the last path is never left out.
#[test]
fn a_queue_pair_that_cannot_be_made_again_leaves_its_path_out_on_the_doca_simulator() {
    if std::env::var("RDMA_TEST_TRANSPORT").as_deref() != Ok("doca")
        || std::env::var_os("RDMA_TEST_ADDR").is_some()
    {
        eprintln!(
            "not run: the DOCA simulator's pass runs it (tcp: \
             a_path_whose_address_disappears_is_left_out_and_used_again_once_it_is_back)"
        );
        return;
    }
    let Some(net) = make_net("q") else { return };
    let (b1, b2, vb1, vb2) = second_path(&net);
    let sysfs = FakeSysfs::new();
    let transport = doca_device_per_path(&net, &sysfs, (&b1, &b2, &vb1, &vb2));
    let transport: Vec<&str> = transport.iter().map(String::as_str).collect();
    let devices = ("DOCA_SIM_DEVICES", "mlx5_0,mlx5_1");
    let listen = format!("{}:{PORT}", net.addr1);
    let mut server_args = vec!["--server", listen.as_str(), "--once", "--json"];
    server_args.extend(&transport);
    let fail = ("DOCA_SIM_FAIL", "doca_ctx_start:4:DOCA_ERROR_DRIVER");
    let mut server = in_netns_env("server", &net.ns1, &server_args, &[devices, fail]);
    server.wait_for_stderr("listening on", SHORT);
    let mut client_args = vec![
        "--client",
        listen.as_str(),
        "--paths",
        b1.as_str(),
        "--count",
        "100000",
        "--connect-timeout",
        "10",
    ];
    client_args.extend(&transport);
    let mut client = in_netns_env("client", &net.ns2, &client_args, &[devices]);
    server.wait_for_stderr("session established", SHORT);
    std::thread::sleep(std::time::Duration::from_millis(300));
    kill_connections_in(&net.ns2, &listen);
    // Both ends' logs when the client does not end (a hang shows on either side).
    let deadline = std::time::Instant::now() + rdma_test_support::scaled(LONG);
    while client.try_status().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the client did not end\n{}\n{}",
            client.report(),
            server.report()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        client.wait_code(SHORT),
        0,
        "{}\n{}",
        client.report(),
        server.report()
    );
    assert_eq!(server.wait_code(LONG), 0, "{}", server.report());
    if let Err(e) = check_counting(&server.stdout(), 100_000) {
        panic!("server stdout: {e}\n{}", server.report());
    }
    let log = server.stderr();
    assert!(
        log.contains("path 1 failed: its queue pair or connection could not be made again"),
        "{}",
        server.report()
    );
    let result = json_result(&log, &server);
    assert!(result["resumes"].as_u64() >= Some(1), "{result}");
    assert!(
        result["paths_lost"].as_u64() >= Some(1),
        "the server left path 1 out: {result}\n{}",
        server.report()
    );
}
