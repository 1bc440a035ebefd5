//! gridsplit-wanem: the WAN delay line of gridsplit's emulated lab.
//!
//! Runs inside a WAN namespace holding the far ends of two routers' `wan` veths
//! per link, and forwards every frame from one to the other after the link's
//! one-way delay, with optional random loss. Rate and buffering are the routers'
//! tbf's business; here frames are only delayed and, with `rate_bps`, spaced as the
//! link would serialise them (line.rs). This file wires the pieces together: CLI,
//! sockets, one thread per direction, signals, and the periodic stats report.

mod config;
mod control;
mod line;
mod os;
mod packet;
mod stats;
mod wake;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use clap::Parser;
use tracing::{error, info, warn};

use config::Config;
use line::{DelayLine, LineOptions, LossModel};
use packet::{PacketSocket, Role};
use stats::{Direction, LineStats};

/// Exit code for anything wrong in the configuration, so the lab can tell "fix
/// your file" from "something broke at run time" (1).
const EXIT_CONFIG: u8 = 2;

/// How often the main thread looks at signal flags while waiting for the next
/// stats write.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Parser)]
#[command(
    name = "gridsplit-wanem",
    version,
    about = "User-space WAN delay line for the gridsplit lab"
)]
struct Cli {
    /// JSON configuration written by the lab.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// SCHED_FIFO priority (1-99) for the forwarding threads; 0 leaves them
    /// under the normal scheduler.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=99))]
    rt_priority: u8,
    /// Share of one core (percent) each forwarding thread may spend spinning to
    /// release frames on time despite late kernel wake-ups; 0 never spins.
    #[arg(long, value_name = "P", default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=100))]
    max_spin_percent: u8,
    /// Run every forwarding thread on this CPU. A frame we send is received by the
    /// peer router in our own syscall, and the whole stack behind it (forwarding,
    /// switch, the receiving host's TCP) runs there too unless that interface
    /// steers its receive work elsewhere (RPS); the lab pins us here and steers
    /// the routers' WAN interfaces to the other CPUs, so that the downstream
    /// stack cannot make us late.
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
    /// Hold a CPU wake-up latency request of this many µs (PM QoS,
    /// /dev/cpu_dma_latency) while running: 0 keeps idle CPUs polling instead of
    /// halting, so frames are released on time on a VM whose host is slow to
    /// give a halted vCPU back (os::hold_cpu_latency_us). Default: no request.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(i32).range(0..))]
    cpu_latency_us: Option<i32>,
    /// Validate the configuration (interfaces included) and exit.
    #[arg(long)]
    check_config: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();

    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gridsplit-wanem: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if cli.check_config {
        println!(
            "{}: OK, {} link(s)",
            cli.config.display(),
            config.links.len()
        );
        return ExitCode::SUCCESS;
    }

    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();

    match run(&config, &cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &Config, cli: &Cli) -> anyhow::Result<()> {
    let rt_priority = cli.rt_priority;
    // Held (not just made) until run() returns: closing the file drops the request.
    let _cpu_latency = match cli.cpu_latency_us.map(os::hold_cpu_latency_us) {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            warn!("cannot hold a CPU latency request ({e}); idle CPUs may halt");
            None
        }
        None => None,
    };
    let started = os::monotonic_ns();
    let stop = Arc::new(AtomicBool::new(false));
    let dump = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second signal while we are still stopping ends the process at once.
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))?;
    // SIGUSR2 starts a new window for the worst-lateness figure (counters stay
    // cumulative: the lab computes their deltas itself).
    let reset = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR2, Arc::clone(&reset))?;
    // SIGHUP re-reads the run-time overrides (control.rs).
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))?;

    let late_threshold_ns = config.late_threshold_us * 1000;
    let mut directions = Vec::new();
    let mut lines = Vec::new();
    for (i, link) in config.links.iter().enumerate() {
        let open = |ifname: &str, role| PacketSocket::open(ifname, role).map(Arc::new);
        let (a_rx, a_tx) = (
            open(&link.a, Role::Receive)?,
            open(&link.a, Role::Transmit)?,
        );
        let (b_rx, b_tx) = (
            open(&link.b, Role::Receive)?,
            open(&link.b, Role::Transmit)?,
        );
        for (dir, rx, tx, delay_us, loss, reverse) in [
            ("ab", &a_rx, &b_tx, link.delay_us_ab, link.loss_ab, false),
            ("ba", &b_rx, &a_tx, link.delay_us_ba, link.loss_ba, true),
        ] {
            let stats = Arc::new(LineStats::new(late_threshold_ns));
            directions.push((
                Direction {
                    link: link.name.clone(),
                    dir,
                    from: rx.ifname().to_string(),
                    to: tx.ifname().to_string(),
                    delay_us,
                    loss,
                },
                Arc::clone(&stats),
            ));
            let options = LineOptions {
                delay_ns: delay_us * 1000,
                rate_bps: link.rate_bps,
                max_queue_bytes: config.max_queue_bytes,
                rt_priority,
                max_spin_percent: cli.max_spin_percent,
            };
            let loss = LossModel::new(loss, config.seed, i, reverse);
            lines.push(DelayLine::new(
                Arc::clone(rx),
                Arc::clone(tx),
                loss,
                stats,
                options,
            ));
        }
    }

    if config.control_path.is_some() {
        apply_control(config, &directions);
    }

    let summary: Vec<String> = config
        .links
        .iter()
        .map(|l| {
            format!(
                "{} {}<->{} delay ab={}us ba={}us loss ab={} ba={}",
                l.name, l.a, l.b, l.delay_us_ab, l.delay_us_ba, l.loss_ab, l.loss_ba
            )
        })
        .collect();
    info!(
        pid = std::process::id(),
        rt_priority,
        cpu = cli.cpu,
        cpu_latency_us = cli.cpu_latency_us,
        "forwarding {} link(s): {}",
        summary.len(),
        summary.join("; ")
    );

    let failed = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (line, (d, _)) in lines.into_iter().zip(&directions) {
        let (stop, failed) = (Arc::clone(&stop), Arc::clone(&failed));
        let what = format!("{} {}", d.link, d.dir);
        let cpu = cli.cpu;
        let handle = thread::Builder::new()
            .name(format!("wan-{}-{}", d.dir, d.link)) // the kernel keeps 15 chars
            .spawn(move || {
                if let Some(n) = cpu {
                    if let Err(e) = os::pin_to_cpu(n) {
                        warn!("{what}: cannot pin to CPU {n} ({e}); running unpinned");
                    }
                }
                if let Err(e) = line.run(&stop) {
                    error!("{what}: forwarding stopped: {e}");
                    failed.store(true, Relaxed);
                    stop.store(true, Relaxed);
                }
            })?;
        threads.push(handle);
    }

    let mut writer = StatsWriter {
        config,
        directions: &directions,
        started,
        last_failed: false,
    };
    let interval_ns = config.stats_interval_ms * 1_000_000;
    let mut next_write = started;
    while !stop.load(Relaxed) {
        let now = os::monotonic_ns();
        if reload.swap(false, Relaxed) && config.control_path.is_some() {
            apply_control(config, &directions);
            writer.write();
        }
        let new_window = reset.swap(false, Relaxed);
        if new_window {
            for (_, stats) in &directions {
                stats.lateness.reset_worst();
            }
        }
        if now >= next_write || dump.swap(false, Relaxed) || new_window {
            writer.write();
            // Skip missed slots rather than writing a burst of reports.
            next_write = now.max(next_write + interval_ns);
        }
        let until_next = Duration::from_nanos(next_write.saturating_sub(os::monotonic_ns()));
        thread::sleep(until_next.min(SIGNAL_POLL));
    }

    for t in threads {
        if t.join().is_err() {
            failed.store(true, Relaxed);
        }
    }
    writer.write();
    if failed.load(Relaxed) {
        anyhow::bail!("a forwarding thread failed; final stats written");
    }
    info!(
        "stopped; final stats written to {}",
        config.stats_path.display()
    );
    Ok(())
}

/// Reads the control file and sets every direction's extra delay; a bad file is
/// logged as one line and changes nothing.
fn apply_control(config: &Config, directions: &[(Direction, Arc<LineStats>)]) {
    let Some(path) = &config.control_path else {
        return;
    };
    let extras = match control::load(path, config) {
        Ok(e) => e,
        Err(e) => {
            warn!("control file refused, overrides unchanged: {e}");
            return;
        }
    };
    let mut changed = Vec::new();
    for (d, stats) in directions {
        let Some(k) = config.links.iter().position(|l| l.name == d.link) else {
            continue;
        };
        let us = if d.dir == "ab" {
            extras[k].0
        } else {
            extras[k].1
        };
        if stats.extra_delay_ns.swap(us * 1000, Relaxed) != us * 1000 {
            changed.push(format!("{} {} +{us}us", d.link, d.dir));
        }
    }
    if !changed.is_empty() {
        info!("control: delay now {}", changed.join(", "));
    }
}

struct StatsWriter<'a> {
    config: &'a Config,
    directions: &'a [(Direction, Arc<LineStats>)],
    started: u64,
    /// Only the first of a run of failed writes is logged.
    last_failed: bool,
}

impl StatsWriter<'_> {
    fn write(&mut self) {
        let uptime = os::monotonic_ns() - self.started;
        let result = stats::render(self.directions, uptime, self.config.late_threshold_us)
            .map_err(std::io::Error::from)
            .and_then(|json| stats::write_atomically(&self.config.stats_path, &json));
        match result {
            Ok(()) => self.last_failed = false,
            Err(e) if !self.last_failed => {
                warn!(
                    "cannot write stats to {}: {e}",
                    self.config.stats_path.display()
                );
                self.last_failed = true;
            }
            Err(_) => {}
        }
    }
}
