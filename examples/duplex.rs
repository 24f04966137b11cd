//! Full duplex: a sink and a src between the same two ends, as the C++ reference's users run
//! it. The client sends numbers; the server echoes each one back doubled.
//!
//! `cargo run --example duplex -- server IP:PORT` / `-- client IP:PORT`; with no arguments
//! both ends run in this process over 127.0.0.1.

use std::net::SocketAddr;

use rdma_container::{duplex, Config, Listener, Result};

fn server(listener: Listener) -> Result<()> {
    let (mut sink, mut src) = listener.accept_duplex()?;
    while let Some(msg) = src.recv()? {
        let n: u64 = String::from_utf8_lossy(msg).parse().unwrap_or(0);
        sink.send((n * 2).to_string().as_bytes())?;
    }
    sink.finish()?;
    Ok(())
}

fn client(addr: SocketAddr, config: &Config) -> Result<()> {
    let (mut sink, mut src) = duplex::connect(addr, config)?;
    for n in 0..5u64 {
        sink.send(n.to_string().as_bytes())?;
        let reply = src.recv()?.map(|m| String::from_utf8_lossy(m).into_owned());
        println!("{n} -> {}", reply.as_deref().unwrap_or("(end of stream)"));
    }
    sink.finish()?;
    while src.recv()?.is_some() {}
    Ok(())
}

fn main() -> Result<()> {
    let config = Config::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    match args.first().map(String::as_str) {
        Some("server") => server(Listener::bind(addr, &config)?),
        Some("client") => client(addr, &config),
        _ => {
            let listener = Listener::bind(addr, &config)?;
            let at = listener.local_addr();
            let serving = std::thread::spawn(move || server(listener));
            client(at, &config)?;
            serving.join().expect("the server thread panicked")
        }
    }
}
