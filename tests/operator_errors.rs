//! An operator's wrong address or port gets words that say what is wrong (issue 35, item 6):
//! an address that is not this host's, a port another server holds, a client pointed at
//! another service, and `--server IP:0` saying which port it got.

mod common;

use std::io::Write;
use std::net::TcpListener;

use common::{run, start, LONG, SHORT};

#[test]
fn a_server_address_that_is_not_this_hosts_says_so_and_what_to_use() {
    // 192.0.2.0/24 is TEST-NET-1: never an address of this host; nothing is sent.
    let (code, _, err) = run(&["--server", "192.0.2.1:5000", "--transport", "tcp"], SHORT);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("no interface of this host has the address 192.0.2.1")
            && err.contains("0.0.0.0"),
        "{err}"
    );
}

#[test]
fn a_port_another_server_holds_is_named_as_taken() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = holder.local_addr().expect("addr").port();
    let (code, _, err) = run(
        &[
            "--server",
            &format!("127.0.0.1:{port}"),
            "--transport",
            "tcp",
        ],
        SHORT,
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains(&format!("port {port} is taken")), "{err}");
}

#[test]
fn a_client_pointed_at_another_service_is_told_that_it_speaks_another_protocol() {
    let service = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = service.local_addr().expect("addr").port();
    let greeter = std::thread::spawn(move || {
        let (mut conn, _) = service.accept().expect("accept");
        conn.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").expect("greet");
        std::thread::sleep(std::time::Duration::from_secs(2));
    });
    let addr = format!("127.0.0.1:{port}");
    let mut c = start(
        "client",
        &["--client", &addr, "--count", "1", "--transport", "tcp"],
    );
    let code = c.wait_code(SHORT);
    assert_ne!(code, 0, "{}", c.report());
    let err = c.stderr();
    assert!(
        err.contains("\"SSH-\"") && err.contains("another service's protocol"),
        "{}",
        c.report()
    );
    greeter.join().expect("the greeter");
}

#[test]
fn a_server_on_port_0_logs_the_port_it_got_and_serves_there() {
    let mut s = start(
        "server",
        &["--server", "127.0.0.1:0", "--transport", "tcp", "--once"],
    );
    s.wait_for_stderr("listening on 127.0.0.1:", SHORT);
    let log = s.stderr();
    let port: u16 = log
        .split_once("listening on 127.0.0.1:")
        .and_then(|(_, rest)| rest.split_once(' '))
        .and_then(|(p, _)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in\n{log}"));
    assert_ne!(port, 0, "{log}");
    let addr = format!("127.0.0.1:{port}");
    let mut c = start(
        "client",
        &["--client", &addr, "--count", "10", "--transport", "tcp"],
    );
    assert_eq!(c.wait_code(LONG), 0, "{}", c.report());
    assert_eq!(s.wait_code(SHORT), 0, "{}", s.report());
}
