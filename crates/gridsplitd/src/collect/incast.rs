//! LAN incast control: a receive-window budget shared by every LAN socket.
//!
//! The gateway is the receiving end of every flow its nodes send to other sites,
//! so in a gather all of them converge on one switch output port — the one toward
//! the gateway — whose drop-tail buffer is small. Left alone, each node's TCP
//! grows its window until that buffer overflows, and the losses of short-window
//! flows are often tails that only a timeout (200 ms minimum) recovers: exactly
//! the stalls splitting was meant to remove. Because the gateway terminates all
//! of these connections it can prevent the overflow at the receiver, as ICTCP
//! (Wu et al., CoNEXT 2010) does: it divides `[lan] window_budget` (the port's
//! buffer plus the LAN's bandwidth-delay product) among the open LAN sockets and
//! clamps each one's advertised window to its share with TCP_WINDOW_CLAMP.
//!
//! A share never goes below one segment: a Linux sender does not send into a
//! window smaller than its MSS, so it would stop and wait for a zero-window
//! probe (an RTO away). One segment is enough to keep a flow moving: the
//! gateway reads at once, and the window update leaves with the next ACK.
//! Measured on the paper grid (budget 23.6 KB, so up to 16 flows at one segment;
//! Open MPI, 3 alternating rounds, split/direct medians), a floor of one segment
//! against two: 12 x 10K 0.89 vs 1.41, 12 x 100K 0.86 vs 1.41 (one round 5.8:
//! timeouts remain), 16 x 100K 0.78 vs 1.10, 1 MB 0.96-0.97 vs 0.91-0.94
//! (results/bench/2026-11-22-incast-floor-ab). With more flows
//! than that, no division fits the port, and windows that do not fit did worse
//! than none (two segments at 12 flows, before the floor was lowered): each
//! loss is then a tail loss that only a timeout recovers, while TCP's own wider
//! windows recover by fast retransmit. So an overcommitted budget lifts the
//! clamps (to `ceiling`) and leaves those flows to TCP.
//!
//! The other direction has a milder form of the problem: what the gateway writes
//! to a LAN host leaves its NIC in bursts that pile up in the host's switch port.
//! With `rate_bps` (the hosts' port rate) each LAN socket is paced at that rate
//! (SO_MAX_PACING_RATE, which Linux TCP honours without the fq qdisc). It is not
//! divided among the sockets to one host: a gather's flows end at different
//! times, and a static division left the last ones crawling at a fraction of the
//! port (paper grid, 12 senders, 1 MB: split efficiency 0.93 -> 0.64).
//!
//! The registry keeps weak references, so a socket that closes (and whose file
//! descriptor number may be reused at once) is never touched again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use socket2::SockRef;
use tokio::net::TcpStream;

/// Segments a share never goes below (see the module comment).
const FLOOR_SEGMENTS: usize = 1;
/// The MSS assumed when the kernel does not report one.
const DEFAULT_MSS: usize = 1448;
/// How often drifted clamps are put back: Linux resets one when the receive
/// side's overhead ratio changes, which happens in a connection's first round
/// trips; a few milliseconds is well inside a gather's first burst.
const TICK: std::time::Duration = std::time::Duration::from_millis(5);

pub struct LanWindows {
    /// Bytes in flight toward the gateway that its LAN port holds without loss;
    /// 0 turns incast control off.
    budget: usize,
    /// The window of every socket while the budget is overcommitted.
    ceiling: usize,
    /// A LAN host's port rate (bits/s, as Linux paces: IP bytes); 0 = no pacing.
    rate_bps: u64,
    sockets: Mutex<Registry>,
    /// The share last applied (bytes), for /status.
    pub share: AtomicU64,
    /// Sockets the last share was applied to, for /status.
    pub sockets_clamped: AtomicU64,
}

#[derive(Default)]
struct Registry {
    next: u64,
    live: HashMap<u64, Weak<TcpStream>>,
}

/// Keeps a socket in the budget's division; dropping it gives its share back.
pub struct Registration {
    windows: Arc<LanWindows>,
    id: Option<u64>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut reg = self.windows.sockets.lock().unwrap();
            reg.live.remove(&id);
            self.windows.rebalance(&mut reg);
        }
    }
}

impl LanWindows {
    pub fn new(budget: usize, ceiling: usize, rate_bps: u64) -> Arc<Self> {
        Arc::new(LanWindows {
            budget,
            ceiling: ceiling.max(budget),
            rate_bps,
            sockets: Mutex::new(Registry::default()),
            share: AtomicU64::new(0),
            sockets_clamped: AtomicU64::new(0),
        })
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0 || self.rate_bps > 0
    }

    /// Adds a relayed LAN socket to the division (every share changes, so every
    /// socket is re-clamped: flows open and close rarely next to the bytes they
    /// carry, and a gather's flows all open before its data moves).
    pub fn register(self: &Arc<Self>, s: &Arc<TcpStream>) -> Registration {
        if !self.enabled() {
            return Registration {
                windows: self.clone(),
                id: None,
            };
        }
        let mut reg = self.sockets.lock().unwrap();
        let id = reg.next;
        reg.next += 1;
        reg.live.insert(id, Arc::downgrade(s));
        self.rebalance(&mut reg);
        Registration {
            windows: self.clone(),
            id: Some(id),
        }
    }

    fn rebalance(&self, reg: &mut Registry) {
        self.apply(reg, false);
    }

    /// Re-applies drifted clamps every TICK while the gateway runs (see `clamp`
    /// for why they drift). Costs one getsockopt per socket per tick when
    /// nothing drifted.
    pub async fn maintain(self: Arc<Self>, stopping: tokio_util::sync::CancellationToken) {
        if self.budget == 0 {
            return;
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopping.cancelled() => return,
            }
            let mut reg = self.sockets.lock().unwrap();
            if !reg.live.is_empty() {
                self.apply(&mut reg, true);
            }
        }
    }

    /// Gives every socket its share: budget / sockets if that is at least one
    /// segment, else `ceiling` (overcommitted: see the module comment).
    /// With `drifted_only`, touches only sockets whose clamp is no longer it.
    fn apply(&self, reg: &mut Registry, drifted_only: bool) {
        reg.live.retain(|_, w| w.strong_count() > 0);
        let n = reg.live.len();
        if n == 0 {
            self.sockets_clamped.store(0, Ordering::Relaxed);
            return;
        }
        let even = self.budget / n;
        let mut applied = 0;
        let live: Vec<_> = reg.live.values().filter_map(Weak::upgrade).collect();
        if self.rate_bps > 0 && !drifted_only {
            self.pace(&live);
        }
        if self.budget == 0 {
            return;
        }
        for s in live {
            let mss = SockRef::from(&*s)
                .tcp_mss()
                .ok()
                .filter(|&m| m > 0)
                .map_or(DEFAULT_MSS, |m| m as usize);
            // Whole segments: the remainder of a share would go out as a second,
            // short packet per flow, whose header the budget does not count (12
            // flows at 1965 B each is 25.2 KB on the wire for a 25 KB port).
            let share = if even >= FLOOR_SEGMENTS * mss {
                even / mss * mss
            } else {
                self.ceiling
            };
            if drifted_only && window_clamp(&s).is_ok_and(|w| w == share) {
                applied += 1;
                continue;
            }
            // A closing socket may refuse; it leaves the division on its own.
            if clamp(&s, share).is_ok() {
                applied += 1;
                self.share.store(share as u64, Ordering::Relaxed);
            }
        }
        self.sockets_clamped.store(applied, Ordering::Relaxed);
    }
}

impl LanWindows {
    /// Paces every socket at its host's port rate.
    fn pace(&self, live: &[Arc<TcpStream>]) {
        for s in live {
            // Best effort, as for the clamp: a closing socket may refuse.
            let _ = crate::tune::setsockopt_raw(
                &**s,
                libc::SOL_SOCKET,
                libc::SO_MAX_PACING_RATE,
                self.rate_bps / 8,
            );
        }
    }
}

fn window_clamp(s: &TcpStream) -> std::io::Result<usize> {
    crate::tune::getsockopt_int(s, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP).map(|v| v as usize)
}

/// Holds a socket's advertised receive window to `share` bytes.
///
/// TCP_WINDOW_CLAMP alone does not hold: Linux's receive-buffer autotuning sets
/// the clamp again from the buffer size it grows to (seen on 6.18: a 5.5 KB clamp
/// back at 1.2 MB after a few round trips). A fixed SO_RCVBUF stops the
/// autotuning, and the clamp the kernel then recomputes is the window that
/// buffer holds (its skb overhead ratio applied), so the buffer is sized for that
/// window to be `share`: set, read the window it yields, rescale, then clamp.
fn clamp(s: &TcpStream, share: usize) -> std::io::Result<()> {
    use crate::tune::setsockopt_raw;
    let as_int = |v: usize| v.min(i32::MAX as usize / 2) as libc::c_int;
    // SO_RCVBUFFORCE: rmem_max must not bound a gateway's choice (needs
    // CAP_NET_ADMIN, which a gateway has); else the plain, capped variant.
    let set_rcvbuf = |v: usize| {
        setsockopt_raw(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, as_int(v))
            .or_else(|_| setsockopt_raw(s, libc::SOL_SOCKET, libc::SO_RCVBUF, as_int(v)))
    };
    set_rcvbuf(share)?;
    let window = window_clamp(s)?;
    if window > share {
        set_rcvbuf(share * share / window.max(1))?;
    }
    setsockopt_raw(s, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, as_int(share))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window_clamp(s: &TcpStream) -> usize {
        super::window_clamp(s).unwrap()
    }

    async fn pair(l: &tokio::net::TcpListener) -> (Arc<TcpStream>, TcpStream) {
        let addr = l.local_addr().unwrap();
        let c = TcpStream::connect(addr).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (Arc::new(s), c)
    }

    #[tokio::test]
    async fn shares_follow_the_number_of_open_sockets() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = LanWindows::new(1_200_000, 4 << 20, 0);
        let (a, _ca) = pair(&l).await;
        let ra = w.register(&a);
        // Shares are whole segments (loopback's MSS is large: 64 KB or so).
        let mss = SockRef::from(&*a).tcp_mss().unwrap() as usize;
        let whole = |v: usize| v / mss * mss;
        assert_eq!(window_clamp(&a), whole(1_200_000));
        let (b, _cb) = pair(&l).await;
        let (c, _cc) = pair(&l).await;
        let _rb = w.register(&b);
        let rc = w.register(&c);
        for s in [&a, &b, &c] {
            assert_eq!(window_clamp(s), whole(400_000));
        }
        drop(rc);
        assert_eq!(window_clamp(&a), whole(600_000));
        assert_eq!(window_clamp(&b), whole(600_000));
        // A socket already gone is left out without being touched.
        drop(a);
        let (d, _cd) = pair(&l).await;
        let _rd = w.register(&d);
        assert_eq!(window_clamp(&d), whole(600_000));
        drop(ra);
        assert_eq!(w.sockets_clamped.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn an_overcommitted_budget_lifts_the_clamps() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = LanWindows::new(8_000, 1 << 20, 0);
        let mut keep = Vec::new();
        for _ in 0..4 {
            let (s, c) = pair(&l).await;
            keep.push((w.register(&s), s, c));
        }
        let s = &keep[0].1;
        let mss = SockRef::from(&**s).tcp_mss().unwrap() as usize;
        assert!(
            8_000 / 4 < FLOOR_SEGMENTS * mss,
            "loopback MSS {mss} makes this test moot"
        );
        assert_eq!(window_clamp(s), 1 << 20);
    }

    /// The clamp must hold while data flows: Linux's receive autotuning resets a
    /// bare TCP_WINDOW_CLAMP within a few round trips.
    #[tokio::test]
    async fn the_window_stays_clamped_under_load() {
        use tokio::io::AsyncWriteExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = LanWindows::new(300_000, 4 << 20, 0);
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(w.clone().maintain(stop.clone()));
        let (s, mut c) = pair(&l).await;
        let _r = w.register(&s);
        let reader = tokio::spawn({
            let s = s.clone();
            async move {
                let mut buf = vec![0u8; 1 << 16];
                let mut total = 0;
                while total < 32 << 20 {
                    s.readable().await.unwrap();
                    match s.try_read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => total += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        let chunk = vec![7u8; 1 << 20];
        let mut widest = 0;
        for i in 0..32 {
            c.write_all(&chunk).await.unwrap();
            if i == 4 {
                // Past the first round trips, where Linux resets the clamp once
                // and the maintainer puts it back within a tick.
                tokio::time::sleep(4 * TICK).await;
            } else if i > 4 {
                widest = widest.max(crate::tune::tcp_info(&c).unwrap().snd_wnd as usize);
            }
        }
        reader.await.unwrap();
        stop.cancel();
        // The window scale rounds the advertised window up to its unit.
        assert!(widest <= 300_000 + 4096, "window reached {widest} bytes");
    }

    #[tokio::test]
    async fn sockets_are_paced_at_the_port_rate() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = LanWindows::new(0, 4 << 20, 300_000_000);
        let pacing = |s: &TcpStream| {
            crate::tune::getsockopt_int(s, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE).unwrap()
                as u32
        };
        let (a, _ca) = pair(&l).await;
        let _ra = w.register(&a);
        assert_eq!(pacing(&a), 300_000_000 / 8);
        let (b, _cb) = pair(&l).await;
        let (c, _cc) = pair(&l).await;
        let rb = w.register(&b);
        let _rc = w.register(&c);
        for s in [&a, &b, &c] {
            assert_eq!(pacing(s), 300_000_000 / 8);
        }
        drop(rb);
        // Pacing alone leaves the windows to TCP.
        assert_eq!(w.sockets_clamped.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn off_leaves_sockets_alone() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = LanWindows::new(0, 4 << 20, 0);
        let (a, _ca) = pair(&l).await;
        let before = window_clamp(&a);
        let _r = w.register(&a);
        assert_eq!(window_clamp(&a), before);
        assert_eq!(w.sockets_clamped.load(Ordering::Relaxed), 0);
    }
}
