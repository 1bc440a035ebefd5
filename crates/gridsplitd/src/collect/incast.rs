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
//! The rules, each with its reason (measurements: docs/design/incast-windows.md):
//!
//! * A share is normally whole segments, at least one: a Linux sender does not
//!   send a segment larger than the window, so a window under its segment size
//!   stops it until a zero-window probe (200 ms and more) gets an answer. One
//!   segment keeps a flow moving: the gateway reads at once, and the window
//!   update leaves with the next ACK.
//! * With more flows than whole segments fit, shares go below a segment where
//!   the sender can still use them. A Linux sender's segment size is at most
//!   half the widest window it has ever been offered (tcp_bound_to_half_wnd), so
//!   a flow never offered more than 2w bytes sends segments of at most w and can
//!   use a window of w. The gateway host offers new LAN connections one segment
//!   (`initrwnd 1`, docs/deployment.md), so a flow that has carried little data
//!   is such a "narrow" flow. The registry follows each socket's widest offer
//!   (tcp_info's rcv_ssthresh and rcv_wnd); "wide" flows keep one whole segment
//!   and the narrow ones share what is left (`divide`). So that flows stay
//!   narrow while a job starts (few flows are open, so shares are wide), a
//!   socket is offered at most YOUNG_WINDOW until it has carried YOUNG_BYTES.
//! * Narrow flows cost packets where whole segments fit too: a flow never
//!   offered two segments sends half-size ones, two per window. So once a socket
//!   has carried YOUNG_BYTES (its job's flows are then open), a narrow flow with
//!   a whole-segment share is offered two segments while the budget has room for
//!   the second (`divide`, one flow at a time); from then on it sends full
//!   segments and is back to its share.
//! * When not even that fits, no division fits the port. Each flow keeps the
//!   smallest window it can use, one segment if it is wide and the kernel's
//!   smallest window if narrow, rather than having its clamp lifted: lifted
//!   windows grow to rmem_max and make every flow wide for good. (Without
//!   sub-segment shares the clamps are lifted to `ceiling`.)
//!
//! The other direction, what the gateway writes toward a LAN host, is
//! collect/egress.rs.
//!
//! Cost at scale. A flow that opens or closes changes every share, but the
//! division then runs on what the registry last read (no system call) and
//! re-clamps only the sockets whose share changed; with many flows the shares
//! sit at their floor and nothing changes. The tick reads a socket (tcp_info and
//! its clamp) only if the relay read bytes from it since the last look (the
//! relay lists it: flow::Moves), and divides again only if what it read changes
//! the division: an idle socket's window cannot have widened, nor its clamp
//! drifted, without segments arriving. So a tick costs what the sockets that
//! moved cost, not what the open ones do. Reading every socket on every open and
//! every tick had made opening N flows cost O(N²) system calls
//! (docs/design/lan-legs.md, "Cost at scale").
//!
//! The registry keeps weak references, so a socket that closes (and whose file
//! descriptor number may be reused at once) is never touched again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use socket2::SockRef;
use tokio::net::TcpStream;

use crate::flow::{LanBytes, Moves};

/// Segments a whole-segment share never goes below (see the module comment).
const FLOOR_SEGMENTS: usize = 1;
/// The smallest sub-segment share: the window Linux keeps at its smallest
/// receive buffer (SOCK_MIN_RCVBUF), measured on 6.18; a smaller share would be
/// advertised as this anyway, and the budget would not hold.
const MIN_SUB_SEGMENT: usize = 1152;
/// The MSS assumed when the kernel does not report one.
const DEFAULT_MSS: usize = 1448;
/// How often drifted clamps are put back: Linux resets one when the receive
/// side's overhead ratio changes, which happens in a connection's first round
/// trips; a few milliseconds is well inside a gather's first burst.
const TICK: std::time::Duration = std::time::Duration::from_millis(5);
/// Bytes a socket carries before it may be offered more than YOUNG_WINDOW.
const YOUNG_BYTES: u64 = 64 << 10;
/// The widest share a socket gets until it has carried YOUNG_BYTES. A flow
/// offered more while few flows were open (so shares were wide) sends full
/// segments for good, and then needs a whole segment once many flows share the
/// port. An MPI job opens its connections over its start-up, which takes
/// hundreds of milliseconds with many ranks, and the first ones carry small
/// messages (barriers, handshakes) while they are alone: a cap for their first
/// 20 ms still left every flow of a 20-sender gather wide in some runs. Twice the
/// smallest sub-segment share keeps such flows narrow; a bulk flow pays it for
/// its first YOUNG_BYTES only.
const YOUNG_WINDOW: usize = 2 * MIN_SUB_SEGMENT;

pub struct LanWindows {
    /// Bytes in flight toward the gateway that its LAN port holds without loss;
    /// 0 turns incast control off.
    budget: usize,
    /// The window of every socket while the budget is overcommitted.
    ceiling: usize,
    /// Whether shares may go below one segment for narrow flows.
    sub_segment: bool,
    sockets: Mutex<Registry>,
    /// The smallest share last applied (bytes), for /status.
    pub share: AtomicU64,
    /// Sockets the last division was applied to, for /status.
    pub sockets_clamped: AtomicU64,
    /// Of those, sockets holding a share under one segment, for /status.
    pub sockets_sub_segment: AtomicU64,
    /// Of those, sockets counted as wide (offered two segments or more), for /status.
    pub sockets_wide: AtomicU64,
    /// The registered sockets the relay read from since the last tick.
    moves: Arc<Moves>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    live: HashMap<u64, Entry>,
    /// The last division left a socket without its clamp: the next tick
    /// divides again.
    stale: bool,
}

struct Entry {
    socket: Weak<TcpStream>,
    /// Bytes the relay has read from it (its flow's `bytes_up`), which list
    /// it in `moves` when they move.
    read: Arc<LanBytes>,
    /// Its MSS, read once: it is fixed once the handshake is done.
    mss: usize,
    /// Whether it has carried YOUNG_BYTES (until then it stays narrow).
    grown: bool,
    /// The widest window this socket may have offered its sender, rounded up
    /// to its window unit: what bounds the sender's segment size.
    widest: usize,
    /// The share last applied and the clamp the kernel then reported, to tell
    /// a drifted clamp from one the kernel rounded.
    /// Also whether its buffer was roomy (see `clamp`).
    applied: Option<(usize, usize, bool)>,
}

impl Entry {
    fn flow(&self) -> Flow {
        Flow {
            mss: self.mss,
            widest: self.widest,
            young: !self.grown,
        }
    }
}

/// A socket as `divide` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub mss: usize,
    pub widest: usize,
    /// Not yet YOUNG_BYTES carried: held to YOUNG_WINDOW with sub-segment shares.
    pub young: bool,
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
            self.windows.apply(&mut reg);
        }
    }
}

/// Divides `budget` among `flows`, as receive-window shares (see the module
/// comment): whole segments when each flow's even share holds one; else one
/// segment for wide flows and an equal sub-segment share for narrow ones, if
/// that is at least MIN_SUB_SEGMENT, else MIN_SUB_SEGMENT for them anyway;
/// without `sub_segment`, `ceiling` for the flows that cannot have a whole
/// segment. With `sub_segment`, young
/// flows get at most YOUNG_WINDOW (see there).
pub fn divide(budget: usize, ceiling: usize, sub_segment: bool, flows: &[Flow]) -> Vec<usize> {
    let mut shares = divide_budget(budget, ceiling, sub_segment, flows);
    if sub_segment {
        for (f, share) in flows.iter().zip(shares.iter_mut()) {
            if f.young {
                *share = (*share).min(YOUNG_WINDOW);
            }
        }
    }
    shares
}

fn divide_budget(budget: usize, ceiling: usize, sub_segment: bool, flows: &[Flow]) -> Vec<usize> {
    let n = flows.len();
    if n == 0 {
        return Vec::new();
    }
    let even = budget / n;
    if flows.iter().all(|f| even >= FLOOR_SEGMENTS * f.mss) {
        // Whole segments: the remainder of a share would go out as a second,
        // short packet per flow, whose header the budget does not count (12
        // flows at 1965 B each is 25.2 KB on the wire for a 25 KB port).
        let mut shares: Vec<usize> = flows.iter().map(|f| even / f.mss * f.mss).collect();
        // Widening: a grown flow that was never offered two segments sends
        // half-size ones, two packets per window. Offering it two segments
        // once, while the budget has room for the second, makes it send full
        // ones for good; then it is wide and back to its share. One flow at a
        // time: windows are offered in whole units (1448 as 1536) that the
        // senders fill with short segments, whose headers the budget does not
        // count, so widening several at once overflows the port (measured:
        // docs/design/incast-windows.md, "widen" against "widen1").
        let slack = budget - shares.iter().sum::<usize>();
        if let Some((f, share)) = flows.iter().zip(shares.iter_mut()).find(|(f, share)| {
            !f.young && f.widest < 2 * f.mss && **share < 2 * f.mss && slack >= 2 * f.mss - **share
        }) {
            *share = 2 * f.mss;
        }
        return shares;
    }
    let lifted = || {
        flows
            .iter()
            .map(|f| {
                if even >= FLOOR_SEGMENTS * f.mss {
                    even / f.mss * f.mss
                } else {
                    ceiling
                }
            })
            .collect()
    };
    if !sub_segment {
        return lifted();
    }
    // A segment for each flow that is wide at narrow share `sub`, `sub` (at
    // most a segment) for the others. Overcommitted, it is taken at
    // MIN_SUB_SEGMENT: the smallest windows each flow can use rather than none.
    let at = |sub: usize| -> Vec<usize> {
        flows
            .iter()
            .map(|f| {
                if f.widest > 2 * sub {
                    f.mss
                } else {
                    sub.min(f.mss)
                }
            })
            .collect()
    };
    // Wide flows take a segment each, which lowers the narrow flows' share,
    // which can make more flows wide: iterate to the fixed point (the wide set
    // only grows, so this ends within n rounds).
    let mut sub = even;
    loop {
        let (mut taken, mut narrow) = (0usize, 0usize);
        for f in flows {
            if f.widest > 2 * sub {
                taken += f.mss;
            } else {
                narrow += 1;
            }
        }
        let Some(rest) = budget.checked_sub(taken) else {
            return at(MIN_SUB_SEGMENT);
        };
        let next = rest.checked_div(narrow).unwrap_or(sub);
        if next >= sub {
            break;
        }
        sub = next;
    }
    at(sub.max(MIN_SUB_SEGMENT))
}

impl LanWindows {
    pub fn new(budget: usize, ceiling: usize, sub_segment: bool) -> Arc<Self> {
        Arc::new(LanWindows {
            budget,
            ceiling: ceiling.max(budget),
            sub_segment,
            sockets: Mutex::new(Registry::default()),
            share: AtomicU64::new(0),
            sockets_clamped: AtomicU64::new(0),
            sockets_sub_segment: AtomicU64::new(0),
            sockets_wide: AtomicU64::new(0),
            moves: Arc::default(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Adds a relayed LAN socket to the division at once (every share may
    /// change, and a gather's flows all open before its data moves), from what
    /// the registry last read of the others.
    pub fn register(self: &Arc<Self>, s: &Arc<TcpStream>, read: &Arc<LanBytes>) -> Registration {
        if !self.enabled() {
            return Registration {
                windows: self.clone(),
                id: None,
            };
        }
        let mut reg = self.sockets.lock().unwrap();
        let id = reg.next;
        reg.next += 1;
        read.watch(&self.moves, id);
        let mss = SockRef::from(&**s)
            .tcp_mss()
            .ok()
            .filter(|&m| m > 0)
            .map_or(DEFAULT_MSS, |m| m as usize);
        reg.live.insert(
            id,
            Entry {
                socket: Arc::downgrade(s),
                read: read.clone(),
                mss,
                grown: false,
                widest: 0,
                applied: None,
            },
        );
        self.apply(&mut reg);
        Registration {
            windows: self.clone(),
            id: Some(id),
        }
    }

    /// Looks at the sockets that moved every TICK while the gateway runs:
    /// clamps drift (see `clamp`) and flows widen as they carry data.
    pub async fn maintain(self: Arc<Self>, stopping: tokio_util::sync::CancellationToken) {
        if self.budget == 0 {
            return;
        }
        super::every(TICK, stopping, || self.tick()).await
    }

    /// One tick: reads each socket the relay read from since the last tick
    /// (its widest offer, whether it has grown, its clamp), puts back a clamp
    /// the kernel reset, and divides again only if a flow changed as `divide`
    /// sees it (or the last division left a socket unclamped). Nothing moved:
    /// nothing to do, however many sockets are open.
    fn tick(&self) {
        let moved = self.moves.take();
        let mut reg = self.sockets.lock().unwrap();
        let mut redivide = reg.stale;
        for id in moved {
            let Some(e) = reg.live.get_mut(&id) else {
                continue; // closed since
            };
            e.read.looked();
            let Some(s) = e.socket.upgrade() else {
                continue;
            };
            let before = e.flow();
            if let Ok(i) = crate::tune::tcp_info(&*s) {
                e.grown |= i.bytes_received >= YOUNG_BYTES;
                let offered = i.rcv_ssthresh.max(i.rcv_wnd.unwrap_or(0)) as usize;
                let unit = i.rcv_window_unit.max(1) as usize;
                e.widest = e.widest.max(offered.div_ceil(unit) * unit);
            }
            redivide |= e.flow() != before;
            match e.applied {
                Some((share, k, roomy)) => {
                    if window_clamp(&s).ok() != Some(k) && clamp(&s, share, roomy).is_ok() {
                        e.applied = window_clamp(&s).ok().map(|k| (share, k, roomy));
                    }
                }
                None => redivide = true,
            }
        }
        if redivide {
            self.apply(&mut reg);
        }
    }

    /// Divides the budget (`divide`) on what the registry last read of each
    /// socket, and clamps the sockets whose share changed (no system call for
    /// the others).
    fn apply(&self, reg: &mut Registry) {
        if self.budget == 0 {
            return;
        }
        reg.live.retain(|_, e| e.socket.strong_count() > 0);
        let flows: Vec<Flow> = reg.live.values().map(Entry::flow).collect();
        let shares = divide(self.budget, self.ceiling, self.sub_segment, &flows);
        let (mut applied, mut sub, mut wide, mut smallest) = (0u64, 0u64, 0u64, usize::MAX);
        for ((e, f), &share) in reg.live.values_mut().zip(&flows).zip(&shares) {
            let roomy = share >= f.mss && !f.young;
            let unchanged = matches!(e.applied, Some((a, _, r)) if a == share && r == roomy);
            // A closing socket may refuse; it leaves the division on its own.
            let ok = unchanged
                || e.socket.upgrade().is_some_and(|s| {
                    clamp(&s, share, roomy).is_ok() && {
                        e.applied = window_clamp(&s).ok().map(|k| (share, k, roomy));
                        e.applied.is_some()
                    }
                });
            if ok {
                applied += 1;
                sub += u64::from(share < f.mss);
                wide += u64::from(f.widest >= 2 * f.mss);
                smallest = smallest.min(share);
            }
        }
        reg.stale = applied < reg.live.len() as u64;
        self.sockets_clamped.store(applied, Ordering::Relaxed);
        self.sockets_sub_segment.store(sub, Ordering::Relaxed);
        self.sockets_wide.store(wide, Ordering::Relaxed);
        if applied > 0 {
            self.share.store(smallest as u64, Ordering::Relaxed);
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
/// autotuning. The window Linux offers is also bounded by the buffer's free
/// space times its payload-to-truesize ratio (`tcp_win_from_space`), and it
/// resets the clamp to the whole buffer's window whenever that ratio changes
/// (a larger segment arrives), which the tick then puts back.
///
/// `roomy`: a share of whole segments for a socket past its young phase. Its
/// buffer holds twice the share at a ratio of one half, so the window reaches
/// the share even at the ratios small segments get (768 bytes in a 2240-byte
/// skb on veth): with exactly twice the share, a one-segment share of 1448
/// offered 1380 bytes, the senders sent 768-byte segments two per window, and
/// the gateway spent a third of a core on 12 senders' packets. When a ratio
/// change then resets the clamp to the buffer's window, the flow may be offered
/// more than its share for up to a TICK and send full segments from then on,
/// which a whole-segment share can take.
/// Otherwise (a share under one segment, or a young socket) the buffer holds
/// only the share, so that no ratio change offers the flow twice its share
/// and widens its segments for good: a young socket may yet need a share
/// under one segment once all of a job's flows are open (see the module
/// comment). Holding young sockets to it too keeps many senders narrow; a
/// roomy buffer for them cost local timeouts (docs/design/incast-windows.md).
fn clamp(s: &TcpStream, share: usize, roomy: bool) -> std::io::Result<()> {
    use crate::tune::setsockopt_raw;
    let as_int = |v: usize| v.min(i32::MAX as usize / 2) as libc::c_int;
    // SO_RCVBUFFORCE: rmem_max must not bound a gateway's choice (needs
    // CAP_NET_ADMIN, which a gateway has); else the plain, capped variant.
    // Linux doubles the value (and keeps at least SOCK_MIN_RCVBUF).
    let buffer = if roomy { 2 * share + 2048 } else { share };
    setsockopt_raw(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, as_int(buffer))
        .or_else(|_| setsockopt_raw(s, libc::SOL_SOCKET, libc::SO_RCVBUF, as_int(buffer)))?;
    setsockopt_raw(s, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, as_int(share))
}

#[cfg(test)]
mod tests;
