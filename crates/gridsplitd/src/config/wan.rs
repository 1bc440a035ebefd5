//! The WAN parameters of each link: `[wan]` gives the defaults, a `[[link]]`
//! table overrides them for one peer (unset keys fall back link → wan →
//! default), and `check_wan` checks the merged result of each table.

use serde::Deserialize;

use super::ConfigError;

/// WAN socket parameters; `[wan]` gives the defaults, `[[link]]` overrides per peer.
#[derive(Debug, Clone, PartialEq)]
pub struct WanParams {
    pub congestion: String,
    pub bandwidth_bps: u64,
    pub rtt_ms: f64,
    /// 0 = derive from bandwidth × RTT.
    pub socket_buffer: u64,
    /// 0 = no pacing cap.
    pub pacing_bps: u64,
    /// The far gateway's switch-port rate, bits/s: when set, the link is paced at that
    /// rate less the peak rate the peer sends on the link's reverse direction (what its
    /// own nodes' relayed sends put through that port), between `pacing_floor_bps` and
    /// `pacing_bps` (link/pacer.rs). 0 = the fixed `pacing_bps`.
    pub pacing_far_port_bps: u64,
    /// The least rate adaptive pacing sets, bits/s.
    pub pacing_floor_bps: u64,
    /// TCP_NOTSENT_LOWAT of the WAN socket, bytes; 0 = derived from the
    /// bandwidth (tune::target_lowat).
    pub notsent_lowat: u64,
    pub nodelay: bool,
    /// Send the link's pending ACK whenever the gateway reads a lane, and take the lane
    /// out of Linux's delayed-ACK (ping-pong) mode (TCP_QUICKACK after each read),
    /// rather than hold it for a second segment or the delayed-ACK timer
    /// (docs/design/wan-striping.md, "Delayed ACKs on the lanes").
    pub quickack: bool,
    /// Link liveness probe period; a connection is declared dead after 5 silent
    /// periods (its session then reconnects and resumes).
    pub keepalive_ms: u64,
    /// How long a session may stay without a WAN connection before its flows
    /// are reset on both sides; within it they are held (link/session.rs).
    pub outage_limit_s: f64,
    /// Parallel TCP connections the link's byte stream is striped over
    /// (transfer/striped.rs); 1 = one plain connection (transfer/tcp.rs). The
    /// dialer proposes it, the acceptor caps it at its own (docs/protocol.md §4.2).
    pub streams: u8,
}

/// Most TCP connections one link may be striped over.
pub const MAX_STREAMS: u8 = 16;

impl Default for WanParams {
    fn default() -> Self {
        Self {
            congestion: "cubic".into(),
            bandwidth_bps: 1_000_000_000,
            rtt_ms: 10.6,
            socket_buffer: 0,
            pacing_bps: 0,
            pacing_far_port_bps: 0,
            pacing_floor_bps: 0,
            notsent_lowat: 0,
            nodelay: true,
            quickack: false,
            keepalive_ms: 1000,
            outage_limit_s: 120.0,
            streams: 1,
        }
    }
}

/// `[wan]` and `[[link]]` share these keys; unset ones fall back (link → wan → default).
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWan {
    congestion: Option<String>,
    bandwidth_bps: Option<u64>,
    rtt_ms: Option<f64>,
    socket_buffer: Option<u64>,
    pacing_bps: Option<u64>,
    pacing_far_port_bps: Option<u64>,
    pacing_floor_bps: Option<u64>,
    notsent_lowat: Option<u64>,
    nodelay: Option<bool>,
    quickack: Option<bool>,
    keepalive_ms: Option<u64>,
    outage_limit_s: Option<f64>,
    streams: Option<i64>,
    /// `[wan]` only (validate.rs refuses it in a `[[link]]`): "noise" or "insecure".
    pub(super) encryption: Option<String>,
}

impl RawWan {
    pub(super) fn over(&self, base: &WanParams) -> WanParams {
        WanParams {
            congestion: self
                .congestion
                .clone()
                .unwrap_or_else(|| base.congestion.clone()),
            bandwidth_bps: self.bandwidth_bps.unwrap_or(base.bandwidth_bps),
            rtt_ms: self.rtt_ms.unwrap_or(base.rtt_ms),
            socket_buffer: self.socket_buffer.unwrap_or(base.socket_buffer),
            pacing_bps: self.pacing_bps.unwrap_or(base.pacing_bps),
            pacing_far_port_bps: self.pacing_far_port_bps.unwrap_or(base.pacing_far_port_bps),
            pacing_floor_bps: self.pacing_floor_bps.unwrap_or(base.pacing_floor_bps),
            notsent_lowat: self.notsent_lowat.unwrap_or(base.notsent_lowat),
            nodelay: self.nodelay.unwrap_or(base.nodelay),
            quickack: self.quickack.unwrap_or(base.quickack),
            keepalive_ms: self.keepalive_ms.unwrap_or(base.keepalive_ms),
            outage_limit_s: self.outage_limit_s.unwrap_or(base.outage_limit_s),
            // Out-of-range values are kept recognisable (0) for check_wan's message.
            streams: self
                .streams
                .map(|k| u8::try_from(k).unwrap_or(0))
                .unwrap_or(base.streams),
        }
    }
}

pub(super) fn check_wan(table: &str, w: &WanParams, file: &str) -> Result<(), ConfigError> {
    let err = |k: &str, reason: String, fix: &str| ConfigError {
        file: file.to_string(),
        field: format!("{table}.{k}"),
        reason,
        fix: fix.to_string(),
    };
    if w.congestion.is_empty()
        || w.congestion.len() > 15
        || !w
            .congestion
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(err(
            "congestion",
            format!("'{}' is not a congestion control name", w.congestion),
            "use a name from /proc/sys/net/ipv4/tcp_available_congestion_control, e.g. \"cubic\"",
        ));
    }
    if w.bandwidth_bps == 0 {
        return Err(err(
            "bandwidth_bps",
            "must be positive".into(),
            "give the WAN bandwidth in bits per second",
        ));
    }
    if !(w.rtt_ms > 0.0 && w.rtt_ms < 60_000.0) {
        return Err(err(
            "rtt_ms",
            format!("{} is out of range", w.rtt_ms),
            "give the WAN round-trip time in milliseconds (> 0)",
        ));
    }
    if w.socket_buffer > (1 << 30) {
        return Err(err(
            "socket_buffer",
            format!("{} is above 1 GiB", w.socket_buffer),
            "use 0 (derive from bandwidth × RTT) or a byte count ≤ 1073741824",
        ));
    }
    if w.notsent_lowat > (1 << 30) {
        return Err(err(
            "notsent_lowat",
            format!("{} is above 1 GiB", w.notsent_lowat),
            "use 0 (derive from the bandwidth) or a byte count ≤ 1073741824",
        ));
    }
    if w.pacing_far_port_bps > 0
        && (w.pacing_bps == 0 || w.pacing_floor_bps == 0 || w.pacing_floor_bps > w.pacing_bps)
    {
        return Err(err(
            "pacing_floor_bps",
            format!(
                "adaptive pacing (pacing_far_port_bps {}) needs 0 < pacing_floor_bps ({}) <= pacing_bps ({})",
                w.pacing_far_port_bps, w.pacing_floor_bps, w.pacing_bps
            ),
            "set pacing_bps to the link's most and pacing_floor_bps to its least rate, or pacing_far_port_bps = 0 \
             for fixed pacing (`gridsplit gateway config` writes all three)",
        ));
    }
    if w.keepalive_ms < 50 || w.keepalive_ms > 600_000 {
        return Err(err(
            "keepalive_ms",
            format!("{} is out of range", w.keepalive_ms),
            "use 50..=600000 milliseconds",
        ));
    }
    if !(w.outage_limit_s >= 1.0 && w.outage_limit_s <= 86_400.0) {
        return Err(err(
            "outage_limit_s",
            format!("{} is out of range", w.outage_limit_s),
            "use 1..=86400 seconds (how long flows are held while their WAN link is down; default 120)",
        ));
    }
    if w.streams == 0 || w.streams > MAX_STREAMS {
        return Err(err(
            "streams",
            "must be 1..=16".into(),
            "use streams = 1 (one WAN connection) up to 16 (`gridsplit gateway config` picks it from the path's RTT and loss)",
        ));
    }
    Ok(())
}
