//! gsload: the load generator of `gridsplit bench scale` (python/gridsplit/bench/scale.py).
//!
//! It speaks the LAN formats of docs/protocol.md §§1–3 as libgridsplit.so does:
//! clients bind to many source addresses of the source site's subnet (so that
//! 4-tuples and ephemeral ports never run out), send GSq1 to their gateway and
//! wait for GSa1; sinks behind the far gateway accept the relayed connections,
//! read the GSo1 origin header and echo whatever arrives.
//!
//! Phases, each reported as one JSON line on stdout:
//!
//! 1. `start`: the file-descriptor limit it runs with; then `ready start`.
//! 2. `--active` flows are opened and ping-pong `--msg-size` byte messages for
//!    `--latency-seconds` (`latency` with `idle_flows` 0); then `ready baseline`.
//! 3. For each of `--steps` (cumulative counts of idle flows): open flows up to
//!    it (`open`: how many, how fast, why any failed), every one checked by a
//!    16-byte hello that the sink checks against the GSo1 origin and echoes; then
//!    `ready idle`, and the active flows' latency with that many idle flows open.
//! 4. Every flow is closed: `ready closed`, then `done` with the sinks' counts.
//!
//! With `--pause`, each `ready` line waits for a line on stdin, so that the
//! orchestrator can read the gateways' memory and /metrics at that point.

// gridsplitd's own LAN formats, compiled in from its source file: one definition
// of the bytes, and gsload builds even while the gateway's other modules change.
// lanproto.rs declares its codes with gridsplitd's `wire_enum!`, included likewise.
#[path = "../../gridsplitd/src/wire_enum.rs"]
#[macro_use]
mod wire_enum;
#[path = "../../gridsplitd/src/lanproto.rs"]
#[allow(dead_code)]
mod lanproto;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use lanproto::Status;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

#[derive(Parser, Clone)]
#[command(
    name = "gsload",
    version,
    about = "Many relayed flows through two gridsplitd gateways"
)]
struct Cli {
    /// LAN address of the source site's gateway (where GSq1 goes).
    #[arg(long)]
    gateway: SocketAddr,
    /// Source addresses are PREFIX.H (an IPv4 /24 inside the gateway's site subnet).
    #[arg(long, value_name = "A.B.C")]
    src_prefix: String,
    /// Host numbers H of the source addresses, LO-HI.
    #[arg(long, default_value = "1-250")]
    src_hosts: String,
    /// Sink listeners behind the far gateway, IP:PORT, comma-separated; flows go round-robin.
    #[arg(long, value_delimiter = ',', required = true)]
    sink: Vec<SocketAddr>,
    /// Cumulative idle-flow counts to reach, in order (e.g. 10000,20000).
    #[arg(long, value_delimiter = ',')]
    steps: Vec<usize>,
    /// Flows that carry the latency measurement.
    #[arg(long, default_value_t = 4)]
    active: usize,
    /// Duration of each latency measurement.
    #[arg(long, default_value_t = 5.0)]
    latency_seconds: f64,
    /// Size of a latency message (each one is echoed back).
    #[arg(long, default_value_t = 64)]
    msg_size: usize,
    /// Opens in progress at once.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Opens started per second; 0: as fast as the gateways answer.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// An open (connect, GSq1, GSa1, hello echoed) that takes longer fails as "timeout".
    #[arg(long, default_value_t = 10_000)]
    open_timeout_ms: u64,
    /// Wait for a line on stdin after each `ready` line.
    #[arg(long)]
    pause: bool,
    /// Runtime threads (clients and sinks share them).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `both`: clients and sinks in this process; `client` or `sink` to run them
    /// as two processes (each flow needs a descriptor on each side, and one
    /// process may hold fewer than twice the flows). A sink process serves until
    /// its stdin closes, then prints `done` with its counts.
    #[arg(long, default_value = "both", value_parser = ["both", "client", "sink"])]
    role: String,
}

const HELLO_LEN: usize = 16;
const WARMUP_ROUND_TRIPS: usize = 100;

fn emit(v: Value) {
    // stdout is line-buffered: each event reaches the orchestrator whole.
    println!("{v}");
}

/// Raises the soft RLIMIT_NOFILE to the hard one; returns (soft, hard).
fn raise_nofile() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r = want;
            }
        }
    }
    // rlim_t is u64 on Linux/glibc but not on every target.
    #[allow(clippy::unnecessary_cast)]
    (r.rlim_cur as u64, r.rlim_max as u64)
}

#[derive(Default)]
struct SinkStats {
    accepted: AtomicU64,
    origin_ok: AtomicU64,
    origin_bad: AtomicU64,
    errors: AtomicU64,
    echoed_bytes: AtomicU64,
}

/// The hello a client sends first: "GSLD", flow index, its own address (which the
/// sink compares with the GSo1 origin the far gateway sent).
fn hello(idx: u32, me: SocketAddr) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[..4].copy_from_slice(b"GSLD");
    b[4..8].copy_from_slice(&idx.to_be_bytes());
    if let IpAddr::V4(v4) = me.ip() {
        b[8..12].copy_from_slice(&v4.octets());
    }
    b[12..14].copy_from_slice(&me.port().to_be_bytes());
    b
}

async fn sink_conn(mut s: TcpStream, stats: Arc<SinkStats>) -> std::io::Result<()> {
    let _ = s.set_nodelay(true);
    let mut h = [0u8; lanproto::ORIGIN_LEN];
    s.read_exact(&mut h).await?;
    let origin = lanproto::parse_origin(&h).ok();
    let mut hb = [0u8; HELLO_LEN];
    s.read_exact(&mut hb).await?;
    let claimed = SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(hb[8], hb[9], hb[10], hb[11])),
        u16::from_be_bytes([hb[12], hb[13]]),
    );
    if &hb[..4] == b"GSLD" && origin == Some(claimed) {
        stats.origin_ok.fetch_add(1, Ordering::Relaxed);
    } else {
        stats.origin_bad.fetch_add(1, Ordering::Relaxed);
    }
    s.write_all(&hb).await?;
    let mut buf = [0u8; 2048];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n]).await?;
        stats.echoed_bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

async fn sink(l: TcpListener, stats: Arc<SinkStats>) {
    loop {
        match l.accept().await {
            Ok((s, _)) => {
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                let st = stats.clone();
                tokio::spawn(async move {
                    if sink_conn(s, st.clone()).await.is_err() {
                        st.errors.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            Err(e) => {
                eprintln!("gsload: sink accept: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Why an open failed, as a short label (a GSa1 status name, or what went wrong).
fn io_label(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) => "EMFILE".into(),
        Some(libc::EADDRNOTAVAIL) => "EADDRNOTAVAIL".into(),
        Some(libc::ECONNREFUSED) => "ECONNREFUSED".into(),
        Some(libc::ECONNRESET) => "ECONNRESET".into(),
        _ => format!("io:{:?}", e.kind()),
    }
}

/// One flow opened as libgridsplit.so would: bind, connect, GSq1, GSa1; then the
/// hello, which must come back unchanged. Returns the stream and the time to GSa1.
async fn open_flow(
    gw: SocketAddr,
    src: IpAddr,
    dst: SocketAddr,
    idx: u32,
) -> Result<(TcpStream, Duration), String> {
    let t0 = Instant::now();
    let sock = TcpSocket::new_v4().map_err(|e| io_label(&e))?;
    sock.bind(SocketAddr::new(src, 0))
        .map_err(|e| io_label(&e))?;
    let mut s = sock.connect(gw).await.map_err(|e| io_label(&e))?;
    s.set_nodelay(true).map_err(|e| io_label(&e))?;
    s.write_all(&lanproto::encode_request(dst))
        .await
        .map_err(|e| io_label(&e))?;
    let mut r = [0u8; lanproto::REPLY_LEN];
    s.read_exact(&mut r).await.map_err(|e| io_label(&e))?;
    match lanproto::parse_reply(&r) {
        Some(Status::Ok) => {}
        Some(st) => return Err(st.name().into()),
        None => return Err("bad_gsa1".into()),
    }
    let opened = t0.elapsed();
    let me = s.local_addr().map_err(|e| io_label(&e))?;
    let h = hello(idx, me);
    s.write_all(&h).await.map_err(|e| io_label(&e))?;
    let mut back = [0u8; HELLO_LEN];
    s.read_exact(&mut back).await.map_err(|e| io_label(&e))?;
    if back != h {
        return Err("hello_mismatch".into());
    }
    Ok((s, opened))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn percentiles(mut xs: Vec<f64>) -> Value {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = if xs.is_empty() {
        f64::NAN
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    };
    json!({
        "n": xs.len(),
        "p50": pct(&xs, 50.0), "p99": pct(&xs, 99.0), "p999": pct(&xs, 99.9),
        "max": xs.last().copied().unwrap_or(f64::NAN), "mean": mean,
    })
}

struct Opener {
    cli: Cli,
    hosts: Vec<u8>,
    prefix: [u8; 3],
    next_idx: u32,
}

impl Opener {
    fn src(&self, i: u32) -> IpAddr {
        let h = self.hosts[i as usize % self.hosts.len()];
        IpAddr::V4(Ipv4Addr::new(
            self.prefix[0],
            self.prefix[1],
            self.prefix[2],
            h,
        ))
    }

    /// Opens `n` flows; returns the streams and the `open` event.
    async fn open(
        &mut self,
        n: usize,
        step: usize,
        flows_before: usize,
    ) -> (Vec<TcpStream>, Value) {
        let sem = Arc::new(Semaphore::new(self.cli.concurrency.max(1)));
        let mut set = JoinSet::new();
        let t0 = Instant::now();
        let timeout = Duration::from_millis(self.cli.open_timeout_ms);
        for k in 0..n {
            if self.cli.rate > 0.0 {
                let at = t0 + Duration::from_secs_f64(k as f64 / self.cli.rate);
                tokio::time::sleep_until(at.into()).await;
            }
            let permit = sem.clone().acquire_owned().await.unwrap();
            let idx = self.next_idx;
            self.next_idx += 1;
            let (gw, src) = (self.cli.gateway, self.src(idx));
            let dst = self.cli.sink[idx as usize % self.cli.sink.len()];
            set.spawn(async move {
                let r = match tokio::time::timeout(timeout, open_flow(gw, src, dst, idx)).await {
                    Ok(r) => r,
                    Err(_) => Err("timeout".into()),
                };
                drop(permit);
                (r, Instant::now())
            });
        }
        let mut streams = Vec::with_capacity(n);
        let mut lat_ms = Vec::with_capacity(n);
        let mut failures: BTreeMap<String, u64> = BTreeMap::new();
        let mut done_at = Vec::with_capacity(n);
        while let Some(j) = set.join_next().await {
            let (r, at) = j.expect("open task");
            match r {
                Ok((s, d)) => {
                    streams.push(s);
                    lat_ms.push(d.as_secs_f64() * 1e3);
                    done_at.push(at);
                }
                Err(e) => *failures.entry(e).or_default() += 1,
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        done_at.sort();
        // The rate over the first 5,000 opens, when the step had as many.
        let first_5000 =
            (done_at.len() >= 5000).then(|| 5000.0 / (done_at[4999] - t0).as_secs_f64());
        let ev = json!({
            "event": "open", "step": step, "flows_before": flows_before,
            "requested": n, "opened": streams.len(),
            "failed": n - streams.len(), "failures": failures,
            "seconds": secs,
            "rate_per_s": streams.len() as f64 / secs.max(1e-9),
            "rate_first_5000_per_s": first_5000,
            "rate_limit_per_s": self.cli.rate,
            "open_latency_ms": percentiles(lat_ms),
        });
        (streams, ev)
    }
}

/// Closed-loop ping-pong on every active flow at once for `secs`; RTTs in µs.
async fn latency(active: &mut Vec<TcpStream>, size: usize, secs: f64, idle: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut set = JoinSet::new();
    for (k, mut s) in std::mem::take(active).into_iter().enumerate() {
        set.spawn(async move {
            let mut rtts = Vec::new();
            let mut bad = 0u64;
            let mut err = None;
            let mut msg = vec![0u8; size];
            let mut back = vec![0u8; size];
            let mut seq = 0u64;
            while Instant::now() < deadline {
                seq += 1;
                for (i, b) in msg.iter_mut().enumerate() {
                    *b = (seq as u8).wrapping_add(i as u8).wrapping_add(k as u8);
                }
                let t = Instant::now();
                if let Err(e) = s.write_all(&msg).await {
                    err = Some(io_label(&e));
                    break;
                }
                if let Err(e) = s.read_exact(&mut back).await {
                    err = Some(io_label(&e));
                    break;
                }
                let us = t.elapsed().as_secs_f64() * 1e6;
                if back != msg {
                    bad += 1;
                }
                if seq as usize > WARMUP_ROUND_TRIPS {
                    rtts.push(us);
                }
            }
            (s, rtts, bad, err)
        });
    }
    let mut all = Vec::new();
    let mut bad = 0;
    let mut errors = Vec::new();
    while let Some(j) = set.join_next().await {
        let (s, r, b, e) = j.expect("latency task");
        active.push(s);
        all.extend(r);
        bad += b;
        errors.extend(e);
    }
    let n = all.len();
    json!({
        "event": "latency", "idle_flows": idle, "active": active.len(),
        "msg_size": size, "seconds": secs,
        "round_trips": n, "round_trips_per_s": n as f64 / secs,
        "mismatched": bad, "errors": errors,
        "rtt_us": percentiles(all),
    })
}

async fn ready(
    phase: &str,
    extra: Value,
    pause: bool,
    stdin: &mut Option<tokio::io::Lines<BufReader<tokio::io::Stdin>>>,
) {
    let mut v = json!({"event": "ready", "phase": phase});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    emit(v);
    if pause {
        if let Some(lines) = stdin {
            if !matches!(lines.next_line().await, Ok(Some(_))) {
                *stdin = None; // the orchestrator is gone: carry on to the end
            }
        }
    }
}

fn parse_hosts(s: &str) -> Result<Vec<u8>, String> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let lo: u8 = lo
        .trim()
        .parse()
        .map_err(|_| format!("--src-hosts {s}: not LO-HI"))?;
    let hi: u8 = hi
        .trim()
        .parse()
        .map_err(|_| format!("--src-hosts {s}: not LO-HI"))?;
    if lo == 0 || hi < lo || hi == 255 {
        return Err(format!("--src-hosts {s}: use 1 <= LO <= HI <= 254"));
    }
    Ok((lo..=hi).collect())
}

async fn run(cli: Cli) -> Result<(), String> {
    let (soft, hard) = raise_nofile();
    let prefix: Vec<u8> = cli
        .src_prefix
        .split('.')
        .map(|x| x.parse::<u8>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("--src-prefix {}: not A.B.C", cli.src_prefix))?;
    if prefix.len() != 3 {
        return Err(format!("--src-prefix {}: not A.B.C", cli.src_prefix));
    }
    let mut hosts = parse_hosts(&cli.src_hosts)?;
    // Never the gateway's own address as a source.
    if let IpAddr::V4(g) = cli.gateway.ip() {
        if g.octets()[..3] == prefix[..] {
            hosts.retain(|&h| h != g.octets()[3]);
        }
    }
    let stats = Arc::new(SinkStats::default());
    if cli.role != "client" {
        for a in &cli.sink {
            let l = TcpListener::bind(a)
                .await
                .map_err(|e| format!("sink {a}: {e}"))?;
            tokio::spawn(sink(l, stats.clone()));
        }
    }
    emit(json!({
        "event": "start", "role": cli.role, "nofile_soft": soft, "nofile_hard": hard,
        "source_addresses": hosts.len(), "sinks": cli.sink.len(),
        "threads": cli.threads, "concurrency": cli.concurrency,
    }));
    if cli.role == "sink" {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(_)) = lines.next_line().await {}
        emit_done(&stats);
        return Ok(());
    }
    if cli.steps.is_empty() {
        return Err("--steps: give at least one count".into());
    }
    let mut stdin = cli
        .pause
        .then(|| BufReader::new(tokio::io::stdin()).lines());
    ready("start", json!({}), cli.pause, &mut stdin).await;

    let mut op = Opener {
        hosts,
        prefix: [prefix[0], prefix[1], prefix[2]],
        next_idx: 0,
        cli: cli.clone(),
    };
    let (mut active, ev) = op.open(cli.active, 0, 0).await;
    emit(json!({"event": "open_active", "detail": ev}));
    if active.len() < cli.active {
        return Err(format!(
            "only {} of {} active flows opened: {}",
            active.len(),
            cli.active,
            ev["failures"]
        ));
    }
    emit(latency(&mut active, cli.msg_size, cli.latency_seconds, 0).await);
    ready("baseline", json!({"idle_flows": 0}), cli.pause, &mut stdin).await;

    let mut idle: Vec<TcpStream> = Vec::new();
    for &step in &cli.steps {
        if step <= idle.len() {
            continue;
        }
        let before = idle.len();
        let (streams, ev) = op.open(step - before, step, before).await;
        let short = streams.len() < step - before;
        idle.extend(streams);
        emit(ev);
        ready(
            "idle",
            json!({"step": step, "idle_flows": idle.len()}),
            cli.pause,
            &mut stdin,
        )
        .await;
        emit(latency(&mut active, cli.msg_size, cli.latency_seconds, idle.len()).await);
        if short {
            // The gateways took no more: larger steps would only measure the same wall.
            emit(json!({"event": "stopped", "step": step, "idle_flows": idle.len()}));
            break;
        }
    }
    let total = idle.len() + active.len();
    drop(idle);
    drop(active);
    tokio::time::sleep(Duration::from_millis(500)).await;
    ready("closed", json!({"closed": total}), cli.pause, &mut stdin).await;
    if cli.role == "both" {
        emit_done(&stats);
    }
    Ok(())
}

fn emit_done(stats: &SinkStats) {
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    emit(json!({
        "event": "done",
        "sink": {
            "accepted": g(&stats.accepted), "origin_ok": g(&stats.origin_ok),
            "origin_bad": g(&stats.origin_bad), "errors": g(&stats.errors),
            "echoed_bytes": g(&stats.echoed_bytes),
        },
    }));
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rt = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(cli.threads);
        b
    }
    .enable_all()
    .build()
    .expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gsload: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
