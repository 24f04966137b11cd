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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            let hint = cli::args::habit_hint(&args).filter(|_| e.use_stderr());
            let _ = e.print();
            if let Some(hint) = hint {
                eprintln!("{hint}");
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::from(cli::result::exit_status_of(&e))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    match &cli.command {
        Some(Command::Doctor(args)) => return cli::doctor::run(args),
        Some(Command::Completions { shell }) => {
            let mut command = <Cli as clap::CommandFactory>::command();
            // Into memory first: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, "rdma-container", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)?;
            return Ok(0);
        }
        Some(Command::Man) => {
            let command = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(command).render(&mut std::io::stdout())?;
            return Ok(0);
        }
        _ => {}
    }
    let stop = install_stop_signals()?;
    match cli.command {
        Some(Command::Demo(args)) => {
            // demo's client talks to its own server on this host.
            let config =
                cli::config_from(&args, Some(std::net::Ipv4Addr::LOCALHOST.into()), &stop)?;
            let reporter = cli::result::Reporter::new(args.json, args.out_json.as_deref())?;
            let progress = cli::progress::ProgressOptions::new(
                args.interval.map(|s| s.0),
                args.quiet,
                args.json,
            );
            cli::demo::run(
                config, args.count, args.size, args.quiet, stop, reporter, progress,
            )
        }
        Some(Command::Doctor(_) | Command::Completions { .. } | Command::Man) => Ok(0),
        Some(Command::Bench(args)) => cli::bench::run(&args, stop),
        None => {
            let config = cli::config_from(&cli.session, cli.client.map(|a| a.ip()), &stop)?;
            cli::check_rdma_request(&config)?;
            let metrics = cli.metrics.map(|m| m.0);
            let reporter =
                cli::result::Reporter::new(cli.session.json, cli.session.out_json.as_deref())?;
            let progress = cli::progress::ProgressOptions::new(
                cli.session.interval.map(|s| s.0),
                cli.session.quiet,
                cli.session.json,
            );
            match (cli.server, cli.client) {
                (Some(addr), None) => {
                    cli::metrics::start(metrics, &cli.session.sysfs_root)?;
                    let options = cli::server::ServerOptions {
                        once: cli.once,
                        quiet: cli.session.quiet,
                        max_sessions: cli.max_sessions,
                        max_receive_memory: cli.max_receive_memory,
                        reporter,
                        progress,
                        credits_given: cli.session.credits.is_some(),
                        qps_given: cli.session.stripes.given(),
                    };
                    cli::server::run(addr, config, &options, stop)
                }
                (None, Some(addr)) => {
                    cli::metrics::start(metrics, &cli.session.sysfs_root)?;
                    let session = &cli.session;
                    let options = cli::client::ClientOptions {
                        count: session.count,
                        size: session.size,
                        credits_asked: session.credits,
                        progress,
                    };
                    cli::client::run(addr, &config, &options, &stop, &reporter)
                }
                _ => anyhow::bail!(
                    "say --server IP:PORT, --client IP:PORT, demo or doctor (see --help)"
                ),
            }
        }
    }
}

/// The first SIGINT (Ctrl-C), SIGTERM (Kubernetes stopping the pod) or SIGHUP: remember which
/// and set the stop flag, so sessions end cleanly and the program says and exits with that
/// signal's status (130, 143). A second one exits at once, with its own status.
fn install_stop_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use cli::stop::StopSignal;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for raw in signals.forever() {
                let Some(signal) = StopSignal::from_raw(raw) else {
                    continue;
                };
                if flag.load(Ordering::SeqCst) {
                    std::process::exit(i32::from(signal.exit_status()));
                }
                // The signal first: whoever sees the flag set reads which one set it.
                signal.record();
                flag.store(true, Ordering::SeqCst);
            }
        })?;
    Ok(stop)
}
