//! Adaptive WAN pacing (`[[link]] pacing_far_port_bps`): the link's rate follows what
//! the far gateway's switch port has left.
//!
//! A one-NIC gateway's port takes this link's arrivals and its own nodes' relayed
//! sends at once. Paced at the whole port, the link overruns it whenever those nodes
//! send too, and every drop there costs the one connection that carries all of the
//! pair's flows a WAN round trip and its window (docs/design/wan-pacing.md). Paced at
//! half the port always (`wan_pacing = "shared"`), it wastes the other half when they
//! do not. The traffic those nodes send to this site comes back on this link's reverse
//! direction, so the gateway sees it without any word from the peer: every tick it
//! takes the rate received on the link, holds its peak (bursts recur once per
//! collective, so the peak decays over a few of them rather than a tick), and paces
//! the link at the far port less that peak, within [floor, cap]. What the far nodes
//! send to other sites is not seen here.
//!
//! The rate is the link's, so a link striped over K connections paces each at a K-th
//! of it: the striped driver skips a lane whose socket is full, so K lanes each held to
//! rate/K carry at most the rate between them (docs/design/wan-pacing.md, "Striped
//! links"). The fixed `pacing_bps` is shared out the same way, once, when the striped
//! set is built (transfer/striped.rs).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ticker::Ticker;
use super::Link;

/// How often the received rate is sampled and the pacing rate revised.
const TICK: Duration = Duration::from_millis(5);
/// The held peak halves in this time without a new one: longer than the gaps between
/// a collective's repetitions, so that the rate does not swing up between bursts.
const HALF_LIFE: Duration = Duration::from_millis(500);
/// A new rate is set only when it differs from the one in force by more than this.
const HYSTERESIS: f64 = 0.05;

/// The pacing rate for a far port of `port` bits/s when the peer's sends peak at
/// `peak` bits/s: the port's remainder, at least `floor`, at most `cap`.
pub(super) fn target_bps(port: u64, floor: u64, cap: u64, peak: f64) -> u64 {
    ((port as f64 - peak).max(floor as f64) as u64).min(cap)
}

/// Each of a link's `streams` connections' share of the link rate `bps`.
pub(super) fn per_stream_bps(bps: u64, streams: usize) -> u64 {
    bps.div_ceil(streams.max(1) as u64)
}

/// The held peak after `dt` seconds with a sample of `rate` bits/s.
pub(super) fn held_peak(peak: f64, rate: f64, dt: f64) -> f64 {
    rate.max(peak * 0.5f64.powf(dt / HALF_LIFE.as_secs_f64()))
}

/// Revises the link's pacing until the session ends.
pub(super) async fn run(link: Arc<Link>, port: u64, floor: u64, cap: u64) {
    // A timerfd, not tokio's timer: a pending tokio timer would arm a timeout on every
    // epoll_wait of the runtime, which each relayed message pays (ticker.rs).
    let mut tick = Ticker::new(TICK);
    let (mut last_bytes, mut last_t, mut peak) =
        (link.bytes_in.load(Ordering::Relaxed), Instant::now(), 0.0);
    // (connection generation, rate) in force: a new connection starts at the cap
    // (tune::apply), so a new generation is always revised.
    let mut applied: Option<(u64, u64)> = None;
    loop {
        tokio::select! {
            _ = link.closed.cancelled() => return,
            r = tick.tick() => if r.is_err() { return },
        }
        let (now, bytes) = (Instant::now(), link.bytes_in.load(Ordering::Relaxed));
        let dt = now.duration_since(last_t).as_secs_f64().max(1e-6);
        peak = held_peak(peak, bytes.saturating_sub(last_bytes) as f64 * 8.0 / dt, dt);
        (last_bytes, last_t) = (bytes, now);
        let target = target_bps(port, floor, cap, peak);
        let Some((gen, probe)) = link
            .conn
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| (c.gen, c.probe.clone()))
        else {
            continue;
        };
        let stale = applied.is_none_or(|(g, bps)| {
            g != gen || (target as f64 - bps as f64).abs() > HYSTERESIS * bps as f64
        });
        if stale {
            probe.set_pacing(per_stream_bps(target, probe.streams()));
            link.pacing_bps.store(target, Ordering::Relaxed);
            applied = Some((gen, target));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_far_ports_remainder_within_floor_and_cap() {
        let (port, floor, cap) = (200_000_000, 100_000_000, 190_000_000);
        assert_eq!(target_bps(port, floor, cap, 0.0), cap);
        assert_eq!(target_bps(port, floor, cap, 60e6), 140_000_000);
        assert_eq!(target_bps(port, floor, cap, 150e6), floor);
        assert_eq!(target_bps(port, floor, cap, 400e6), floor);
    }

    #[test]
    fn a_striped_links_rate_is_shared_among_its_streams() {
        assert_eq!(per_stream_bps(190_000_000, 1), 190_000_000);
        assert_eq!(per_stream_bps(190_000_000, 0), 190_000_000);
        assert_eq!(per_stream_bps(190_000_000, 4), 47_500_000);
        assert_eq!(per_stream_bps(100, 3), 34);
    }

    #[test]
    fn the_peak_is_held_and_decays_by_half_in_its_half_life() {
        let p = held_peak(0.0, 100e6, 0.005);
        assert_eq!(p, 100e6);
        // No traffic for one half-life: half of it; a larger sample replaces it at once.
        let q = held_peak(p, 0.0, HALF_LIFE.as_secs_f64());
        assert!((q - 50e6).abs() < 1.0, "{q}");
        assert_eq!(held_peak(q, 80e6, 0.005), 80e6);
    }
}
