//! LAN egress: what the gateway writes toward one LAN host shares that host's port.
//!
//! A gateway whose NIC is faster than its nodes' (a 400 Mb/s gateway in front of
//! 100 Mb/s nodes) relays many flows toward the same node at once in an
//! all-to-all or a halo. Each of its LAN sockets to that node grows its own
//! congestion window, and together they burst into the node's switch port at
//! the gateway's rate, four times what the port drains; its small drop-tail
//! buffer overflows. The losses land on LAN flows with short windows, whose
//! tails only a timeout (200 ms at least) recovers. A direct connection from
//! another site meets the same port, but its window is a WAN window and its
//! losses are mostly fast-retransmitted.
//!
//! With `[lan] rate_bps` set to the nodes' port rate, the gateway paces its
//! sockets toward each host so that together they stay under it: every TICK
//! it counts the host's sockets with bytes unacknowledged or unsent (SIOCOUTQ)
//! and gives each of them an equal share of the rate (SO_MAX_PACING_RATE,
//! which Linux TCP honours without the fq qdisc); an idle socket gets the share
//! it would have if it became active, so it cannot burst before the next tick.
//! The division follows activity, not the sockets open: a static division by
//! open sockets left a gather's last flows crawling at a fraction of the port
//! (docs/design/lan-legs.md). A host with one socket gets the whole rate.
//!
//! Only an overrun is divided: while the host's sockets hold no more than
//! `[lan] burst_bytes` queued in total (its port's buffer plus the LAN's
//! bandwidth-delay product), the port absorbs whatever they send, and each may
//! use the whole rate. A halo's few small messages thus go out at the port's
//! rate instead of each at a share held until the next tick, which had cost a
//! latency-bound application more than the drops it saved.
//!
//! A tick divides only the hosts a socket of which the relay wrote to since the
//! last tick (the relay lists it: flow::Moves), or was opened or closed, or
//! which still held bytes queued or shared the rate then; within such a host it
//! reads a socket's queue only if the relay wrote to it or it held bytes. Idle
//! hosts cost nothing, so thousands of idle flows stay cheap (a gateway may
//! carry 10,000 flows; docs/design/lan-legs.md, "Idle flows at scale").
//!
//! The registry keeps weak references, as collect/incast.rs does, so a socket
//! that closes is never touched again.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::net::TcpStream;

use crate::flow::{LanBytes, Moves};

/// How often the division follows the sockets' activity: at 100 Mb/s a new
/// flow at its idle share sends a few kilobytes in this time.
const TICK: std::time::Duration = std::time::Duration::from_millis(5);

pub struct LanEgress {
    /// A LAN host's port rate (bits/s, as Linux paces: IP bytes); 0 = off.
    rate_bps: u64,
    /// Bytes queued toward one host that its port absorbs (0 = always divide).
    burst_bytes: u64,
    hosts: Mutex<Hosts>,
    /// Hosts whose sockets shared the rate at the last division (their
    /// queued bytes exceeded `burst_bytes`), for /status.
    pub hosts_shared: AtomicU64,
    /// Overruns since start: times a host's sockets went from the whole rate
    /// to sharing it, for /status.
    pub overruns: AtomicU64,
    /// The smallest per-socket rate last applied (bits/s), for /status.
    pub smallest_rate_bps: AtomicU64,
    /// The registered sockets the relay wrote to since the last tick.
    moves: Arc<Moves>,
}

#[derive(Default)]
struct Hosts {
    next: u64,
    by_ip: HashMap<IpAddr, Host>,
    /// Each registered socket's host.
    host_of: HashMap<u64, IpAddr>,
    /// The hosts the next tick divides: a socket of theirs was written to,
    /// opened or closed, or at the last division they had bytes queued or
    /// shared the rate. The others are idle at the whole rate.
    hot: HashSet<IpAddr>,
}

#[derive(Default)]
struct Host {
    sockets: Vec<Paced>,
    /// Its sockets sharing the rate at the last division: those with bytes
    /// queued, when the host's queued bytes exceeded `burst_bytes`, else none.
    busy: u64,
}

struct Paced {
    id: u64,
    socket: Weak<TcpStream>,
    /// Bytes the relay has written to it (its flow's `bytes_down`).
    written: Arc<LanBytes>,
    /// `written` and the socket's queued bytes at the last reading.
    seen: u64,
    queued: u64,
    /// The rate last set on it (bytes/s), so unchanged shares cost no syscall.
    applied: u64,
}

/// Removes its socket from the division when dropped.
pub struct Registration {
    egress: Arc<LanEgress>,
    key: Option<(IpAddr, u64)>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some((ip, id)) = self.key {
            let mut hosts = self.egress.hosts.lock().unwrap();
            hosts.host_of.remove(&id);
            if let Some(h) = hosts.by_ip.get_mut(&ip) {
                h.sockets.retain(|p| p.id != id);
                if h.sockets.is_empty() {
                    hosts.by_ip.remove(&ip);
                    hosts.hot.remove(&ip);
                } else {
                    hosts.hot.insert(ip);
                }
            }
        }
    }
}

/// Each socket's share (bits/s) of a host's `rate`, given how many bytes each
/// of its sockets holds queued: while they hold no more than `burst` in total
/// (and `burst` > 0), every socket may use the whole rate; above it, the ones
/// with bytes queued split it evenly, and an idle one gets what it would if it
/// became active. Also returns how many share it (0 when none need to).
pub fn shares(rate: u64, burst: u64, queued: &[u64]) -> (Vec<u64>, u64) {
    let total: u64 = queued.iter().sum();
    if burst > 0 && total <= burst {
        return (vec![rate; queued.len()], 0);
    }
    let busy = queued.iter().filter(|&&q| q > 0).count() as u64;
    let rates = queued
        .iter()
        .map(|&q| {
            if q > 0 {
                rate / busy
            } else {
                rate / (busy + 1)
            }
        })
        .collect();
    (rates, busy)
}

impl LanEgress {
    pub fn new(rate_bps: u64, burst_bytes: u64) -> Arc<Self> {
        Arc::new(LanEgress {
            rate_bps,
            burst_bytes,
            hosts: Mutex::new(Hosts::default()),
            hosts_shared: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
            smallest_rate_bps: AtomicU64::new(0),
            moves: Arc::default(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.rate_bps > 0
    }

    /// Adds a relayed LAN socket toward `peer`, paced at once at an idle
    /// socket's share; the next tick divides the host again (re-dividing here
    /// would read every socket of the host for each new flow: quadratic in a
    /// job's flows toward one host).
    pub fn register(self: &Arc<Self>, s: &Arc<TcpStream>, written: &Arc<LanBytes>) -> Registration {
        let peer = match s.peer_addr() {
            Ok(a) if self.enabled() => a.ip(),
            _ => {
                return Registration {
                    egress: self.clone(),
                    key: None,
                }
            }
        };
        let mut hosts = self.hosts.lock().unwrap();
        let id = hosts.next;
        hosts.next += 1;
        written.watch(&self.moves, id);
        hosts.host_of.insert(id, peer);
        hosts.hot.insert(peer);
        let host = hosts.by_ip.entry(peer).or_default();
        let bytes = (self.rate_bps / (host.busy + 1) / 8).max(1);
        // Best effort, as in `divide`.
        let ok =
            crate::tune::setsockopt_raw(&**s, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, bytes)
                .is_ok();
        host.sockets.push(Paced {
            id,
            socket: Arc::downgrade(s),
            written: written.clone(),
            seen: 0,
            // Unknown until read: the first tick reads it.
            queued: u64::MAX,
            applied: if ok { bytes } else { 0 },
        });
        Registration {
            egress: self.clone(),
            key: Some((peer, id)),
        }
    }

    /// Divides the hosts that need it every TICK while the gateway runs.
    pub async fn maintain(self: Arc<Self>, stopping: tokio_util::sync::CancellationToken) {
        if !self.enabled() {
            return;
        }
        super::every(TICK, stopping, || self.tick()).await
    }

    /// One tick: divides the rate of each host a socket of which was written
    /// to, opened or closed since the last tick, or which still had bytes
    /// queued or shared its rate; nothing to do for idle hosts, however many
    /// sockets they hold.
    fn tick(&self) {
        let moved = self.moves.take();
        let mut guard = self.hosts.lock().unwrap();
        let hosts = &mut *guard;
        for id in moved {
            if let Some(&ip) = hosts.host_of.get(&id) {
                hosts.hot.insert(ip);
            }
        }
        if hosts.hot.is_empty() {
            return;
        }
        let (mut shared, mut smallest) = (0u64, u64::MAX);
        let look: Vec<IpAddr> = hosts.hot.drain().collect();
        for ip in look {
            let Some(h) = hosts.by_ip.get_mut(&ip) else {
                continue;
            };
            let was = h.busy;
            let (r, quiet) = self.divide(h);
            if !quiet {
                hosts.hot.insert(ip);
            }
            if let Some(r) = r {
                if was == 0 && h.busy > 0 {
                    self.overruns.fetch_add(1, Ordering::Relaxed);
                }
                shared += u64::from(h.busy > 0 && h.sockets.len() > 1);
                smallest = smallest.min(r);
            }
        }
        // Hosts left out are idle: no division, the whole rate.
        self.hosts_shared.store(shared, Ordering::Relaxed);
        if smallest != u64::MAX {
            self.smallest_rate_bps.store(smallest, Ordering::Relaxed);
        }
    }

    /// Divides the rate among one host's sockets and applies the shares that
    /// changed; returns the smallest share, and whether the host was idle
    /// (nothing written or queued, every socket at the whole rate).
    fn divide(&self, h: &mut Host) -> (Option<u64>, bool) {
        let v = &mut h.sockets;
        let before = v.len();
        v.retain(|p| p.socket.strong_count() > 0);
        // Looked at now: their next writes list them again (flow::Moves).
        for p in v.iter() {
            p.written.looked();
        }
        // Nothing written since the last reading, nothing queued then, no
        // division in effect and no socket gone: every one keeps the whole rate
        // (the common case for a host's idle flows, read without a system call).
        let whole = (self.rate_bps / 8).max(1);
        if v.len() == before
            && h.busy == 0
            && v.iter()
                .all(|p| p.applied == whole && p.queued == 0 && p.written.get() == p.seen)
        {
            return (Some(self.rate_bps), true);
        }
        let live: Vec<Arc<TcpStream>> = v.iter().filter_map(|p| p.socket.upgrade()).collect();
        if live.len() != v.len() {
            return (None, false); // one closed between the two lines; next tick
        }
        // A lone socket needs no reading: it gets the whole rate.
        let lone = live.len() == 1;
        let queued: Vec<u64> = v
            .iter_mut()
            .zip(&live)
            .map(|(p, s)| {
                let w = p.written.get();
                if lone {
                    (p.seen, p.queued) = (w, 0);
                } else if w != p.seen || p.queued != 0 {
                    p.seen = w;
                    p.queued = outq(&**s).map_or(0, |q| q.max(0) as u64);
                }
                p.queued
            })
            .collect();
        let (rates, busy) = shares(self.rate_bps, self.burst_bytes, &queued);
        h.busy = busy;
        for ((p, s), &r) in v.iter_mut().zip(&live).zip(&rates) {
            let bytes = (r / 8).max(1);
            // Best effort: a closing socket may refuse, and leaves on its own.
            if p.applied != bytes
                && crate::tune::setsockopt_raw(
                    &**s,
                    libc::SOL_SOCKET,
                    libc::SO_MAX_PACING_RATE,
                    bytes,
                )
                .is_ok()
            {
                p.applied = bytes;
            }
        }
        (rates.into_iter().min(), false)
    }
}

/// Bytes in a TCP socket's send queue, unacknowledged or unsent (SIOCOUTQ).
fn outq(fd: &impl AsFd) -> std::io::Result<i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int through the pointer, which
    // lives across the call.
    let rc = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if rc == 0 {
        Ok(n)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_sockets_split_the_rate_and_idle_ones_hold_the_next_share() {
        assert_eq!(shares(100, 0, &[5]), (vec![100], 1));
        assert_eq!(shares(100, 0, &[0]), (vec![100], 0));
        assert_eq!(shares(100, 0, &[1, 9, 0, 4]), (vec![33, 33, 25, 33], 3));
        assert_eq!(shares(100, 0, &[0, 0]), (vec![100, 100], 0));
    }

    #[test]
    fn what_the_port_absorbs_is_not_divided() {
        // 3 + 4 + 0 bytes fit a burst of 7: each may use the whole rate.
        assert_eq!(shares(100, 7, &[3, 4, 0]), (vec![100, 100, 100], 0));
        // One byte more overruns it: the busy ones share.
        assert_eq!(shares(100, 7, &[3, 5, 0]), (vec![50, 50, 33], 2));
    }

    /// Two relayed sockets toward one host (loopback), registered with an
    /// 80 Mb/s rate and `burst`; `keep` holds each with its peer end.
    struct Host2 {
        egress: Arc<LanEgress>,
        keep: Vec<(Arc<TcpStream>, TcpStream)>,
        regs: Vec<Registration>,
        written: Vec<Arc<LanBytes>>,
    }

    async fn host_with_two_sockets(burst: u64) -> Host2 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let egress = LanEgress::new(80_000_000, burst);
        let (mut keep, mut regs) = (Vec::new(), Vec::new());
        let written: Vec<Arc<LanBytes>> = (0..2).map(|_| Arc::default()).collect();
        for w in &written {
            let c = Arc::new(TcpStream::connect(addr).await.unwrap());
            let (peer, _) = l.accept().await.unwrap();
            regs.push(egress.register(&c, w));
            keep.push((c, peer));
        }
        Host2 {
            egress,
            keep,
            regs,
            written,
        }
    }

    #[tokio::test]
    async fn sockets_to_one_host_share_its_rate_while_they_have_data_queued() {
        let Host2 {
            egress,
            keep,
            mut regs,
            written,
        } = host_with_two_sockets(0).await;
        let pacing = |s: &TcpStream| {
            crate::tune::getsockopt_int(s, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE).unwrap()
                as u32
        };
        // Both idle: either may take the whole rate (10 MB/s), as the first
        // to become active would.
        assert_eq!(pacing(&keep[0].0), 10_000_000);
        // The first one's peer does not read: its bytes stay queued, so it is
        // active and the idle one holds half.
        let tick = || {
            let mut hosts = egress.hosts.lock().unwrap();
            egress.divide(hosts.by_ip.values_mut().next().unwrap());
        };
        let n = keep[0].0.try_write(&vec![7u8; 256 << 10]).unwrap();
        written[0].add(n as u64);
        tick();
        assert_eq!(pacing(&keep[0].0), 10_000_000);
        assert_eq!(pacing(&keep[1].0), 5_000_000);
        // A socket last seen empty is read again only once the relay has
        // written to it: bytes put there behind its back go unseen.
        let n = keep[1].0.try_write(&vec![7u8; 256 << 10]).unwrap();
        tick();
        assert_eq!(pacing(&keep[1].0), 5_000_000);
        written[1].add(n as u64);
        tick();
        assert_eq!(pacing(&keep[0].0), 5_000_000);
        assert_eq!(pacing(&keep[1].0), 5_000_000);
        // A closed socket leaves the division.
        drop(regs.pop());
        assert_eq!(
            egress
                .hosts
                .lock()
                .unwrap()
                .by_ip
                .values()
                .next()
                .unwrap()
                .sockets
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_tick_looks_only_at_hosts_whose_sockets_moved_bytes() {
        let Host2 {
            egress,
            keep,
            regs,
            written,
        } = host_with_two_sockets(0).await;
        let hot = || !egress.hosts.lock().unwrap().hot.is_empty();
        // The first tick reads the new sockets' queues (unknown until then);
        // the second finds nothing queued and the whole rate, and leaves the
        // host alone from then on.
        assert!(hot());
        egress.tick();
        egress.tick();
        assert!(!hot());
        // Bytes queued behind the relay's back: the tick does not look.
        let n = keep[0].0.try_write(&vec![7u8; 256 << 10]).unwrap();
        egress.tick();
        let pacing = |s: &TcpStream| {
            crate::tune::getsockopt_int(s, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE).unwrap()
                as u32
        };
        assert_eq!(pacing(&keep[1].0), 10_000_000);
        // The relay's write lists the socket: the next tick divides its host,
        // which stays looked at while it has bytes queued.
        written[0].add(n as u64);
        egress.tick();
        assert!(hot());
        assert_eq!(pacing(&keep[1].0), 5_000_000);
        drop(regs);
    }

    #[tokio::test]
    async fn sockets_keep_the_whole_rate_while_the_port_absorbs_what_they_hold() {
        let Host2 {
            egress,
            keep,
            regs,
            written,
        } = host_with_two_sockets(1 << 30).await;
        let n = keep[0].0.try_write(&vec![7u8; 256 << 10]).unwrap();
        written[0].add(n as u64);
        {
            let mut hosts = egress.hosts.lock().unwrap();
            egress.divide(hosts.by_ip.values_mut().next().unwrap());
        }
        // 256 KiB queued is under the 1 GiB burst: no division.
        for (c, _) in &keep {
            let r = crate::tune::getsockopt_int(&**c, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE)
                .unwrap();
            assert_eq!(r as u32, 10_000_000);
        }
        drop(regs);
    }
}
