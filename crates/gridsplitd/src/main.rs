//! The gridsplitd command: load and check the config, start the gateway, and stop
//! it cleanly on SIGTERM or SIGINT (every link closed, every flow reset, so nodes
//! see errors instead of hanging). SIGHUP re-reads the WAN key file (key
//! rotation, docs/deployment.md): new WAN connections use the new key, and
//! links that are up keep going.
//!
//! Exit status: 0 after a clean stop or a successful --check-config, 2 for a
//! configuration problem (one line on stderr), 1 for a runtime failure such as an
//! address already in use.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use gridsplitd::config::Config;
use gridsplitd::Gateway;
use tracing::{error, info, Level};

#[derive(Parser)]
#[command(
    name = "gridsplitd",
    version,
    about = "gridsplit site gateway: connection-splitting relay between sites"
)]
struct Cli {
    /// The gateway's TOML configuration (see docs/protocol.md §5).
    #[arg(long, value_name = "FILE", required_unless_present = "list_strategies")]
    config: Option<PathBuf>,
    /// Print the scheduling strategies this build has, one per line, and exit.
    #[arg(long)]
    list_strategies: bool,
    /// Validate the configuration, print a summary and exit (0 = valid, 2 = not).
    #[arg(long)]
    check_config: bool,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log_level: Level,
    /// Runtime threads. 1 (the default) runs everything on one thread, so a
    /// relayed message never crosses threads inside the gateway: on a 2-core
    /// machine it relayed with less added latency than 2 threads and the same
    /// throughput (results/relay/*-threads2.md). More threads spread many busy
    /// flows over more cores.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.list_strategies {
        for k in gridsplitd::config::StrategyKind::ALL {
            println!("{}", k.name());
        }
        return ExitCode::SUCCESS;
    }
    let Some(config) = cli.config else {
        return ExitCode::from(2);
    };
    tracing_subscriber::fmt()
        .with_max_level(cli.log_level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();

    let cfg = match Config::load(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gridsplitd: config error: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        println!(
            "{}: ok: site {} ({}), gateway {}, {} peer(s), strategy {}, lan {}, wan {}, admin {}",
            cfg.path.display(),
            cfg.site,
            cfg.own_site().subnet,
            cfg.id,
            cfg.peers().count(),
            cfg.strategy.name(),
            cfg.lan_listen,
            cfg.wan_listen,
            cfg.admin_listen
        );
        for p in cfg.peers() {
            let w = cfg.wan_params(&p.name);
            println!(
                "  peer {} {} via {}: congestion {}, socket buffer {} B, pacing {}",
                p.id,
                p.subnet,
                p.gateway_wan,
                w.congestion,
                gridsplitd::tune::target_buffer(w),
                if w.pacing_bps > 0 {
                    format!("{} b/s", w.pacing_bps)
                } else {
                    "off".into()
                }
            );
        }
        return ExitCode::SUCCESS;
    }

    let rt = if cli.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads as usize)
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gridsplitd: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        let gw = match Gateway::start(cfg).await {
            Ok(gw) => gw,
            Err(e) => {
                error!("{e:#}");
                return ExitCode::from(1);
            }
        };
        let signal = wait_for_signal(&gw).await;
        info!("{signal}: stopping");
        gw.stop().await;
        ExitCode::SUCCESS
    })
}

async fn wait_for_signal(gw: &Gateway) -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        _ => {
            // Without signal handlers we can still stop on Ctrl-C via the default.
            std::future::pending::<()>().await;
            unreachable!()
        }
    };
    loop {
        tokio::select! {
            _ = term.recv() => return "SIGTERM",
            _ = int.recv() => return "SIGINT",
            _ = hup.recv() => {
                if let Err(e) = gw.shared.reload_key() {
                    error!("SIGHUP: key not reloaded, the old key stays in use: {e}");
                }
            }
        }
    }
}
