//! The admin endpoint: `GET /status` (JSON, for people and the lab) and
//! `GET /metrics` (Prometheus text format).
//!
//! The endpoint is a deliberately tiny HTTP/1.0 responder written on tokio rather
//! than hyper or axum: it serves two fixed GET routes on a loopback address, reads
//! at most 8 KiB of request head with a 2 s deadline and always closes after one
//! response. That is the whole HTTP surface, small enough to audit at a glance,
//! and it spares the daemon (and the 2-core build machines) a web framework's
//! dependency tree for two read-only pages.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::lanproto::Status;
use crate::Shared;

/// Most flows /status lists (over all links), so its JSON stays bounded with
/// thousands of flows; `flows_truncated` says how many were left out.
pub const FLOWS_LISTED_MAX: usize = 256;

pub fn status_json(shared: &Shared) -> serde_json::Value {
    let m = &shared.metrics;
    let mut counters = serde_json::Map::new();
    for (name, _, _, v) in m.scalars() {
        counters.insert(name.into(), v.into());
    }
    let by_status = |arr: &[AtomicU64; 7]| {
        let mut o = serde_json::Map::new();
        for s in Status::ALL {
            o.insert(
                s.name().into(),
                arr[s as usize].load(Ordering::Relaxed).into(),
            );
        }
        serde_json::Value::Object(o)
    };
    let all = shared.links();
    let links: Vec<_> = all.iter().map(|l| l.status()).collect();
    let mut flows = Vec::new();
    let mut truncated = 0;
    for l in &all {
        let (v, total) = l.flow_statuses(FLOWS_LISTED_MAX - flows.len());
        truncated += total - v.len();
        flows.extend(v);
    }
    let up: Vec<&str> = links
        .iter()
        .filter(|l| l.state == "up")
        .map(|l| l.peer.as_str())
        .collect();
    let flows_held: usize = links
        .iter()
        .filter(|l| l.state != "up")
        .map(|l| l.flows)
        .sum();
    // Peer gateways by id (a site's name when it has one gateway).
    let down: Vec<&str> = shared
        .cfg
        .peers()
        .map(|p| p.id.as_str())
        .filter(|p| !up.contains(p))
        .collect();
    let mut warnings: Vec<&str> = Vec::new();
    if !shared.sealed() {
        warnings.push(crate::config::INSECURE_WARNING);
    }
    serde_json::json!({
        "site": shared.cfg.site,
        "id": shared.cfg.id,
        "gateway_index": shared.cfg.gateway_index,
        "strategy": shared.cfg.strategy.name(),
        "encryption": shared.cfg.encryption.name(),
        "warnings": warnings,
        "last_handshake_refusal": *shared.last_refusal.lock().unwrap(),
        "uptime_seconds": m.started.elapsed().as_secs_f64(),
        "limits": {
            "per_flow_buffer": shared.cfg.limits.per_flow_buffer,
            "total_buffer": shared.cfg.limits.total_buffer,
            "max_frame": shared.cfg.limits.max_frame,
            "send_budget_free": shared.send_pool.available_permits(),
            "receive_budget_free": shared.recv_pool.available_permits(),
        },
        "lan": {
            "window_budget": shared.cfg.lan.window_budget,
            "sub_segment": shared.cfg.lan.sub_segment,
            "mss": shared.cfg.lan.mss,
            "rto_min_us": shared.cfg.lan.rto_min_us,
            "delack_max_us": shared.cfg.lan.delack_max_us,
            "rate_bps": shared.cfg.lan.rate_bps,
            "burst_bytes": shared.cfg.lan.burst_bytes,
            "window_clamp": shared.lan_windows.share.load(Ordering::Relaxed),
            "sockets_clamped": shared.lan_windows.sockets_clamped.load(Ordering::Relaxed),
            "sockets_sub_segment": shared.lan_windows.sockets_sub_segment.load(Ordering::Relaxed),
            "sockets_wide": shared.lan_windows.sockets_wide.load(Ordering::Relaxed),
            "hosts_paced_shared": shared.lan_egress.hosts_shared.load(Ordering::Relaxed),
            "pacing_overruns": shared.lan_egress.overruns.load(Ordering::Relaxed),
            "smallest_pacing_rate_bps": shared.lan_egress.smallest_rate_bps.load(Ordering::Relaxed),
        },
        "host": crate::tune::host_tcp(),
        "counters": counters,
        "replies": by_status(&m.replies),
        "remote_opens": by_status(&m.remote_opens),
        "links": links,
        "peers_down": down,
        "flows_held": flows_held,
        "flows": flows,
        "flows_listed_max": FLOWS_LISTED_MAX,
        "flows_truncated": truncated,
    })
}

pub fn prometheus(shared: &Shared) -> String {
    let m = &shared.metrics;
    let mut out = String::with_capacity(4096);
    for (name, kind, help, v) in m.scalars() {
        let full = if kind == "counter" {
            format!("gridsplit_{name}_total")
        } else {
            format!("gridsplit_{name}")
        };
        let _ = writeln!(
            out,
            "# HELP {full} {help}\n# TYPE {full} {kind}\n{full} {v}"
        );
    }
    for (metric, arr, help) in [
        (
            "gridsplit_replies_total",
            &m.replies,
            "GSa1 replies sent to nodes",
        ),
        (
            "gridsplit_remote_opens_total",
            &m.remote_opens,
            "outcomes of OPENs from peer gateways",
        ),
    ] {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
        for s in Status::ALL {
            let _ = writeln!(
                out,
                "{metric}{{status=\"{}\"}} {}",
                s.name(),
                arr[s as usize].load(Ordering::Relaxed)
            );
        }
    }
    let links = shared.links();
    let _ = writeln!(out, "# HELP gridsplit_link_up 1 if the WAN link to the peer has an authenticated connection\n# TYPE gridsplit_link_up gauge");
    for p in shared.cfg.peers() {
        let up = links.iter().any(|l| l.peer == p.id && l.is_up()) as u8;
        let _ = writeln!(out, "gridsplit_link_up{{peer=\"{}\"}} {up}", p.id);
    }
    // Per-link session gauges and counters: (name, type, help, value).
    type PerLink = fn(&crate::link::Link) -> String;
    let per_link: [(&str, &str, &str, PerLink); 3] = [
        (
            "gridsplit_link_down_seconds",
            "gauge",
            "seconds the peer's session has been without a connection (0 when up)",
            |l| format!("{:.3}", l.down_seconds().unwrap_or(0.0)),
        ),
        (
            "gridsplit_link_reconnects_total",
            "counter",
            "connections that resumed the peer's session",
            |l| l.reconnects.load(Ordering::Relaxed).to_string(),
        ),
        (
            "gridsplit_link_bytes_replayed_total",
            "counter",
            "bytes sent again after a reconnect",
            |l| l.bytes_replayed.load(Ordering::Relaxed).to_string(),
        ),
    ];
    for (name, kind, help, value) in per_link {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for l in &links {
            let _ = writeln!(out, "{name}{{peer=\"{}\"}} {}", l.peer, value(l));
        }
    }
    let held: usize = links
        .iter()
        .filter(|l| !l.is_up())
        .map(|l| l.flow_count())
        .sum();
    let _ = writeln!(out, "# HELP gridsplit_flows_held flows whose WAN link is reconnecting, held within outage_limit_s\n# TYPE gridsplit_flows_held gauge\ngridsplit_flows_held {held}");
    type Field = fn(&crate::tune::TcpInfo) -> u64;
    let fields: [(&str, &str, Field); 10] = [
        ("gridsplit_wan_tcp_total_retrans", "counter", |i| {
            i.total_retrans as u64
        }),
        ("gridsplit_wan_tcp_total_rto", "counter", |i| {
            i.total_rto.unwrap_or(0) as u64
        }),
        ("gridsplit_wan_tcp_cwnd_segments", "gauge", |i| {
            i.snd_cwnd as u64
        }),
        ("gridsplit_wan_tcp_rtt_us", "gauge", |i| i.rtt_us as u64),
        ("gridsplit_wan_tcp_rttvar_us", "gauge", |i| {
            i.rttvar_us as u64
        }),
        ("gridsplit_wan_tcp_pacing_rate_bps", "gauge", |i| {
            i.pacing_rate_bps
        }),
        ("gridsplit_wan_tcp_delivery_rate_bps", "gauge", |i| {
            i.delivery_rate_bps
        }),
        ("gridsplit_wan_tcp_bytes_sent", "counter", |i| i.bytes_sent),
        ("gridsplit_wan_tcp_bytes_retrans", "counter", |i| {
            i.bytes_retrans
        }),
        ("gridsplit_wan_tcp_notsent_bytes", "gauge", |i| {
            i.notsent_bytes as u64
        }),
    ];
    let infos: Vec<_> = links.iter().map(|l| (l.peer.clone(), l.status())).collect();
    for (name, kind, f) in fields {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (peer, st) in &infos {
            for (i, info) in st.tcp_info.iter().enumerate() {
                let _ = writeln!(out, "{name}{{peer=\"{peer}\",stream=\"{i}\"}} {}", f(info));
            }
        }
    }
    let _ = writeln!(out, "# TYPE gridsplit_link_flows gauge");
    for (peer, st) in &infos {
        let _ = writeln!(out, "gridsplit_link_flows{{peer=\"{peer}\"}} {}", st.flows);
    }
    out
}

/// Serves the admin endpoint until the gateway stops.
pub async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let stopping = shared.stopping.clone();
    crate::accept::serve(listener, stopping, "admin", move |stream, _| {
        let shared = shared.clone();
        async move {
            if let Err(e) =
                tokio::time::timeout(Duration::from_secs(2), answer(&shared, stream)).await
            {
                debug!("admin request timed out: {e}");
            }
        }
    })
    .await
}

async fn answer(shared: &Shared, mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > 8192 {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "too large\n",
            )
            .await;
        }
    }
    let line =
        String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or_default()).to_string();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/status") => {
            let body =
                serde_json::to_string_pretty(&status_json(shared)).unwrap_or_default() + "\n";
            respond(&mut stream, "200 OK", "application/json", &body).await
        }
        ("GET", "/metrics") => {
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4",
                &prometheus(shared),
            )
            .await
        }
        ("GET", _) => {
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "try /status or /metrics\n",
            )
            .await
        }
        _ => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "GET only\n",
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
