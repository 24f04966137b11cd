//! Send and receive: one client sends, one server receives.
//!
//! `cargo run --example send_recv -- server 10.0.0.2:5000` on the receiving host and
//! `cargo run --example send_recv -- client 10.0.0.2:5000` on the sending host; with no
//! arguments both run in this process over 127.0.0.1.

use std::net::SocketAddr;

use rdma_container::{Config, Listener, RdmaSink, Result};

fn server(listener: Listener) -> Result<u64> {
    let mut src = listener.accept()?.accept_src()?;
    while let Some(msg) = src.recv()? {
        // `msg` points into a registered slot; it stays valid until the next recv().
        println!("{}", String::from_utf8_lossy(msg));
    }
    Ok(src.received())
}

fn client(addr: SocketAddr, config: &Config) -> Result<u64> {
    let mut sink = RdmaSink::connect(addr, config)?;
    for i in 0..10 {
        sink.send(format!("message {i}").as_bytes())?; // the buffer may be reused at once
    }
    sink.finish() // Finish{count}; dropping the sink instead would abort the session
}

fn main() -> Result<()> {
    let config = Config::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = |i: usize| -> SocketAddr {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    };
    match args.first().map(String::as_str) {
        Some("server") => println!("received {}", server(Listener::bind(addr(1), &config)?)?),
        Some("client") => println!("sent {}", client(addr(1), &config)?),
        _ => {
            let listener = Listener::bind(addr(1), &config)?;
            let at = listener.local_addr();
            let receiving = std::thread::spawn(move || server(listener));
            let sent = client(at, &config)?;
            let received = receiving.join().expect("the server thread panicked")?;
            assert_eq!(sent, received);
            println!("sent and received {sent} messages");
        }
    }
    Ok(())
}
