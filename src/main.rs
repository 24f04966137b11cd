//! The `rdma-container` binary: thin glue over the library (see `cli`).

mod cli;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;

use cli::args::{Cli, Command};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    if let Some(Command::Doctor(args)) = &cli.command {
        return cli::doctor::run(args);
    }
    let stop = install_ctrl_c()?;
    match cli.command {
        Some(Command::Demo(args)) => {
            let config = cli::config_from(&args, &stop)?;
            cli::demo::run(config, args.count, args.size, args.quiet, stop)
        }
        Some(Command::Doctor(_)) => Ok(0),
        Some(Command::Bench(args)) => cli::bench::run(&args, stop),
        None => {
            let config = cli::config_from(&cli.session, &stop)?;
            let metrics = cli.metrics.map(|m| m.0);
            match (cli.server, cli.client) {
                (Some(addr), None) => {
                    cli::metrics::start(metrics, &cli.session.sysfs_root)?;
                    let options = cli::server::ServerOptions {
                        once: cli.once,
                        quiet: cli.session.quiet,
                        max_sessions: cli.max_sessions,
                        max_receive_memory: cli.max_receive_memory,
                    };
                    cli::server::run(addr, config, &options, stop)
                }
                (None, Some(addr)) => {
                    cli::metrics::start(metrics, &cli.session.sysfs_root)?;
                    cli::client::run(addr, &config, cli.session.count, cli.session.size, &stop)
                }
                _ => anyhow::bail!(
                    "say --server IP:PORT, --client IP:PORT, demo or doctor (see --help)"
                ),
            }
        }
    }
}

/// First Ctrl-C: set the stop flag so sessions end cleanly. Second: exit at once.
fn install_ctrl_c() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(i32::from(cli::EXIT_INTERRUPTED));
        }
    })?;
    Ok(stop)
}
