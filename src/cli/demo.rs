//! `demo`: a server and a client in one process over 127.0.0.1.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use rdma_container::{Config, Listener};

use super::client;
use super::output::PayloadPrinter;
use super::progress::ProgressOptions;
use super::result::{Ending, Reporter, SessionResult};
use super::server::receive_all;
use super::stop::StopSignal;

/// Runs the demo; returns the exit status.
pub fn run(
    config: Config,
    count: u64,
    size: Option<usize>,
    quiet: bool,
    stop: Arc<AtomicBool>,
    reporter: Reporter,
    progress: ProgressOptions,
) -> Result<u8> {
    let (transport, server_reporter) = (config.transport, reporter.clone());
    let server_progress = progress.clone();
    let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &config)?;
    let addr = listener.local_addr();
    log::info!("demo: server on {addr}, client sends {count} message(s)");
    let server = std::thread::Builder::new()
        .name("demo-server".into())
        .spawn(move || -> Result<Ending> {
            let incoming = listener.accept()?;
            let peer = incoming.peer_addr();
            let src = incoming.accept_src()?;
            log::info!("demo: using the {} transport", src.info().transport);
            let mut report = SessionResult::new("server", Some(1), peer, transport);
            let end = receive_all(
                src,
                &mut PayloadPrinter::new(quiet),
                "demo server",
                &mut report,
                &server_progress,
            );
            server_reporter.report(&report);
            Ok(end)
        })
        .context("cannot start the demo server thread")?;
    let options = client::ClientOptions {
        count,
        size,
        credits_asked: None,
        progress,
    };
    let client_status = client::run(addr, &config, &options, &stop, &reporter);
    let server_end = server
        .join()
        .map_err(|_| anyhow!("the demo server thread panicked"))??;
    let client_status = client_status?;
    match server_end {
        Ending::Finished if client_status == 0 => Ok(0),
        Ending::Finished | Ending::Interrupted => Ok(StopSignal::received().exit_status()),
        _ => Ok(1),
    }
}
