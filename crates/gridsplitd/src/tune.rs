//! WAN socket tuning and TCP introspection.
//!
//! The WAN link is the one connection per site pair that crosses the long, fat pipe,
//! so it is the one worth tuning: its buffers must hold at least one bandwidth-delay
//! product or the window, not the network, caps throughput (we size them at 2 × BDP
//! for headroom), and its congestion control and pacing are chosen per link.
//! Everything we set is read back with getsockopt, because the kernel silently
//! clamps (rmem_max/wmem_max) or refuses (unloaded congestion modules): what is
//! logged and shown in /status is what is in force, not what was asked.
//!
//! tcp_info is read with our own copy of the kernel's `struct tcp_info` (Linux ≥ 6.7
//! layout, for tcpi_total_rto); the kernel reports how many bytes it filled, so
//! fields newer than the running kernel read as "absent", never as garbage.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use serde::Serialize;
use socket2::SockRef;

use crate::config::WanParams;

/// Socket buffers never go below this, whatever the BDP arithmetic says.
const MIN_BUFFER: usize = 64 * 1024;

/// What was requested, derived from the config.
pub fn target_buffer(p: &WanParams) -> usize {
    if p.socket_buffer > 0 {
        return p.socket_buffer as usize;
    }
    let bdp = p.bandwidth_bps as f64 / 8.0 * (p.rtt_ms / 1000.0);
    ((2.0 * bdp) as usize).clamp(MIN_BUFFER, 1 << 30)
}

/// Link time the kernel may hold unsent (TCP_NOTSENT_LOWAT), and the bounds of
/// the byte count it gives.
const LOWAT_TIME_S: f64 = 0.005;
const LOWAT_MIN: usize = 16 * 1024;
const LOWAT_MAX: usize = 4 << 20;

/// TCP_NOTSENT_LOWAT for a WAN socket: about 5 ms of the link's bandwidth.
///
/// Why: the scheduling strategy can only choose what goes next among the bytes
/// the kernel has not taken yet. Without a low-water mark the socket accepts a
/// whole send buffer (2 × BDP) ahead of the wire, and a small message queued
/// behind a bulk flow waits for all of it whatever the strategy. Five
/// milliseconds keep the pipe fed across a writer's wake-up (the socket still
/// has its cwnd in flight) while bounding that wait.
pub fn target_lowat(p: &WanParams) -> usize {
    if p.notsent_lowat > 0 {
        return p.notsent_lowat as usize;
    }
    ((p.bandwidth_bps as f64 / 8.0 * LOWAT_TIME_S) as usize).clamp(LOWAT_MIN, LOWAT_MAX)
}

/// The values in force on a socket, as read back from the kernel.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Applied {
    pub congestion: String,
    pub requested_buffer: usize,
    /// As reported by getsockopt (Linux reports twice the usable size).
    pub sndbuf: usize,
    pub rcvbuf: usize,
    pub nodelay: bool,
    /// SO_MAX_PACING_RATE in bits/s; None when unlimited.
    pub pacing_bps: Option<u64>,
    /// TCP_NOTSENT_LOWAT in bytes.
    pub notsent_lowat: usize,
}

pub(crate) fn setsockopt_raw<T>(fd: &impl AsFd, level: i32, name: i32, val: T) -> io::Result<()> {
    // SAFETY: `val` lives across the call and its size is passed alongside.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            &val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn getsockopt_int(fd: &impl AsFd, level: i32, name: i32) -> io::Result<i32> {
    getsockopt_u64(fd, level, name).map(|v| v as i32)
}

fn getsockopt_u64(fd: &impl AsFd, level: i32, name: i32) -> io::Result<u64> {
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            &mut v as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if len == 4 { v & 0xffff_ffff } else { v })
}

/// The most Linux's receive autotuning grows a socket's buffer to here
/// (tcp_rmem's maximum, per network namespace).
pub fn autotune_max_rcvbuf() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").ok()?;
    text.split_whitespace().nth(2)?.parse().ok()
}

/// Most a pacing ratio can be (the kernel's sysctl bound), and what we advise.
pub const PACING_RATIO_MAX: u32 = 1000;

/// The host's (network namespace's) TCP settings that shape the WAN link but that
/// no socket option reaches. Shown in /status; `host_advice` warns about them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostTcp {
    /// net.ipv4.tcp_slow_start_after_idle: 1 shrinks an idle link's window back
    /// to the initial 10 segments, a new slow start after every pause.
    pub slow_start_after_idle: Option<u32>,
    /// net.ipv4.tcp_pacing_ss_ratio / tcp_pacing_ca_ratio (percent): a paced
    /// socket sends at ratio × cwnd / srtt, capped by SO_MAX_PACING_RATE.
    pub pacing_ss_ratio: Option<u32>,
    pub pacing_ca_ratio: Option<u32>,
}

fn read_sysctl(name: &str) -> Option<u32> {
    let path = format!("/proc/sys/net/ipv4/{name}");
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub fn host_tcp() -> HostTcp {
    HostTcp {
        slow_start_after_idle: read_sysctl("tcp_slow_start_after_idle"),
        pacing_ss_ratio: read_sysctl("tcp_pacing_ss_ratio"),
        pacing_ca_ratio: read_sysctl("tcp_pacing_ca_ratio"),
    }
}

/// What in `h` slows the WAN links down, each with the command that fixes it.
/// `paced`: some link has a pacing cap under a congestion control that leaves
/// the rate to Linux (BBR sets its own, so the ratios do not apply to it).
///
/// Why the ratios matter: a pacing cap turns on Linux's internal pacing, and
/// below the cap the rate is ratio × cwnd / srtt. A link that carries small
/// messages never grows its window (it is application-limited), so with the
/// defaults (200 % in slow start, 120 % after) a fresh link of 10 segments at
/// 10 ms spaces its packets about 0.5 ms apart: four senders' 1 KB messages
/// that reach the gateway together leave it over 1.5 ms; at 1000 % they do not
/// (measured: docs/design/wan-pacing.md). Bulk transfers still run at the cap.
pub fn host_advice(h: &HostTcp, paced: bool) -> Vec<String> {
    let mut out = Vec::new();
    if h.slow_start_after_idle == Some(1) {
        out.push(
            "net.ipv4.tcp_slow_start_after_idle = 1: an idle WAN link restarts from 10 segments; \
             set it to 0 (sysctl -w net.ipv4.tcp_slow_start_after_idle=0)"
                .to_string(),
        );
    }
    if paced {
        for (name, v) in [
            ("tcp_pacing_ss_ratio", h.pacing_ss_ratio),
            ("tcp_pacing_ca_ratio", h.pacing_ca_ratio),
        ] {
            if let Some(v) = v.filter(|&v| v < PACING_RATIO_MAX) {
                out.push(format!(
                    "net.ipv4.{name} = {v}: a WAN link with a small window paces small messages \
                     far below its cap; set it to {PACING_RATIO_MAX} \
                     (sysctl -w net.ipv4.{name}={PACING_RATIO_MAX})"
                ));
            }
        }
    }
    out
}

/// TCP_RTO_MIN_US and TCP_DELACK_MAX_US (Linux 6.15); the libc crate does not
/// name them yet.
const TCP_RTO_MIN_US: i32 = 45;
const TCP_DELACK_MAX_US: i32 = 46;

/// Applies the `[lan]` timers to a relayed LAN socket. Best effort: an older
/// kernel, or a value under two jiffies, keeps Linux's defaults (200 ms minimum
/// RTO), which is slower after a LAN loss, not wrong; it is reported once.
pub fn apply_lan(fd: &impl AsFd, p: &crate::config::LanParams) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    for (name, what, v) in [
        (TCP_RTO_MIN_US, "lan.rto_min_us", p.rto_min_us),
        (TCP_DELACK_MAX_US, "lan.delack_max_us", p.delack_max_us),
    ] {
        if v == 0 {
            continue;
        }
        if let Err(e) = setsockopt_raw(fd, libc::IPPROTO_TCP, name, v as libc::c_int) {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "{what} = {v}: the kernel refused it ({e}); LAN sockets keep its default \
                     (needs Linux 6.15+, and at least two jiffies)"
                );
            }
        }
    }
}

/// Applies the WAN parameters to a socket. Buffers must be set before connect() or
/// listen() so the window scale offered in the SYN is large enough, hence this is
/// called on the unconnected socket (and on the listener, whose accepted sockets
/// inherit them). Failures are logged, not fatal: a link with default buffers is
/// slower, not wrong, and the read-back shows what happened.
pub fn apply(fd: &impl AsFd, p: &WanParams) -> Vec<String> {
    let mut warnings = Vec::new();
    let sock = SockRef::from(fd);
    let want = target_buffer(p);
    let want_i = want.min(i32::MAX as usize / 2) as libc::c_int;
    // SO_*BUFFORCE ignores wmem_max/rmem_max (needs CAP_NET_ADMIN, which a gateway
    // normally has); without the capability fall back to the clamped variant.
    for (force, plain, what) in [
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, "SO_SNDBUF"),
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, "SO_RCVBUF"),
    ] {
        if setsockopt_raw(fd, libc::SOL_SOCKET, force, want_i).is_err() {
            if let Err(e) = setsockopt_raw(fd, libc::SOL_SOCKET, plain, want_i) {
                warnings.push(format!("{what} {want}: {e}"));
            }
        }
    }
    if let Err(e) = sock.set_tcp_congestion(p.congestion.as_bytes()) {
        warnings.push(format!(
            "TCP_CONGESTION {}: {e} (module not loaded or not allowed?)",
            p.congestion
        ));
    }
    if p.pacing_bps > 0 {
        if let Err(e) = set_pacing(fd, p.pacing_bps) {
            warnings.push(format!("SO_MAX_PACING_RATE {}: {e}", p.pacing_bps));
        }
    }
    let lowat = target_lowat(p).min(i32::MAX as usize) as libc::c_int;
    if let Err(e) = setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, lowat) {
        warnings.push(format!("TCP_NOTSENT_LOWAT {lowat}: {e}"));
    }
    if let Err(e) = sock.set_tcp_nodelay(p.nodelay) {
        warnings.push(format!("TCP_NODELAY: {e}"));
    }
    warnings
}

/// TCP_QUICKACK: sends an ACK the kernel is holding and leaves delayed-ACK
/// (ping-pong) mode; not sticky, so callers ask again after reads.
pub fn set_quickack(fd: &impl AsFd) -> io::Result<()> {
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
}

/// Caps the socket's pacing rate at `bps` bits/s (SO_MAX_PACING_RATE, which also turns on
/// Linux's internal TCP pacing where no fq qdisc paces).
pub fn set_pacing(fd: &impl AsFd, bps: u64) -> io::Result<()> {
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, bps / 8)
}

pub fn read_back(fd: &impl AsFd, p: &WanParams) -> Applied {
    let sock = SockRef::from(fd);
    let pacing = getsockopt_u64(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE).ok();
    Applied {
        congestion: sock
            .tcp_congestion()
            .map(|v| {
                String::from_utf8_lossy(&v)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .unwrap_or_else(|e| format!("? ({e})")),
        requested_buffer: target_buffer(p),
        sndbuf: sock.send_buffer_size().unwrap_or(0),
        rcvbuf: sock.recv_buffer_size().unwrap_or(0),
        nodelay: sock.tcp_nodelay().unwrap_or(false),
        // ~0 (u64 or u32) means "no limit".
        pacing_bps: pacing
            .filter(|&v| v != u64::MAX && v != u32::MAX as u64)
            .map(|v| v * 8),
        notsent_lowat: getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
            .map_or(0, |v| v as u32 as usize),
    }
}

/// The kernel's `struct tcp_info` (include/uapi/linux/tcp.h), up to the fields added
/// in Linux 6.7. Only read by us, never written.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
    rehash: u32,
    total_rto: u16,
    total_rto_recoveries: u16,
    total_rto_time: u32,
}

/// A tcp_info snapshot in the units people read: counters, bytes, microseconds.
#[derive(Debug, Clone, Serialize, Default)]
pub struct TcpInfo {
    pub state: u8,
    pub total_retrans: u32,
    pub lost: u32,
    pub retransmits: u8,
    /// RTO timeouts (Linux ≥ 6.7); None on older kernels.
    pub total_rto: Option<u16>,
    pub total_rto_recoveries: Option<u16>,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    pub snd_mss: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    pub rto_us: u32,
    pub pacing_rate_bps: u64,
    pub delivery_rate_bps: u64,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub bytes_received: u64,
    pub notsent_bytes: u32,
    pub unacked: u32,
    /// The window the peer advertises (bytes).
    pub snd_wnd: u32,
    /// The bound on the window this end advertises (bytes; grows as data arrives).
    pub rcv_ssthresh: u32,
    /// The window this end last advertised (bytes; Linux >= 6.7, else None).
    pub rcv_wnd: Option<u32>,
    /// The unit this end's advertised window is rounded to (1 << its window scale).
    pub rcv_window_unit: u32,
}

pub fn tcp_info(fd: &impl AsFd) -> io::Result<TcpInfo> {
    let mut raw = RawTcpInfo::default();
    let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: RawTcpInfo is plain old data and the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut raw as *mut RawTcpInfo as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let has_rto = len as usize >= std::mem::offset_of!(RawTcpInfo, total_rto_time);
    let has_rcv_wnd = len as usize >= std::mem::offset_of!(RawTcpInfo, rehash);
    let r = raw;
    Ok(TcpInfo {
        state: r.state,
        total_retrans: r.total_retrans,
        lost: r.lost,
        retransmits: r.retransmits,
        total_rto: has_rto.then_some(r.total_rto),
        total_rto_recoveries: has_rto.then_some(r.total_rto_recoveries),
        snd_cwnd: r.snd_cwnd,
        snd_ssthresh: r.snd_ssthresh,
        snd_mss: r.snd_mss,
        rtt_us: r.rtt,
        rttvar_us: r.rttvar,
        min_rtt_us: r.min_rtt,
        rto_us: r.rto,
        pacing_rate_bps: r.pacing_rate.saturating_mul(8),
        delivery_rate_bps: r.delivery_rate.saturating_mul(8),
        bytes_sent: r.bytes_sent,
        bytes_retrans: r.bytes_retrans,
        bytes_received: r.bytes_received,
        notsent_bytes: r.notsent_bytes,
        unacked: r.unacked,
        snd_wnd: r.snd_wnd,
        rcv_ssthresh: r.rcv_ssthresh,
        rcv_wnd: has_rcv_wnd.then_some(r.rcv_wnd),
        // struct tcp_info's bitfields: tcpi_snd_wscale in the low nibble,
        // tcpi_rcv_wscale in the high one.
        rcv_window_unit: 1 << (r.wscale >> 4),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_twice_the_bdp() {
        let p = WanParams::default(); // 1 Gb/s × 10.6 ms
        assert_eq!(target_buffer(&p), 2 * 1_325_000);
        let tiny = WanParams {
            bandwidth_bps: 1000,
            ..WanParams::default()
        };
        assert_eq!(target_buffer(&tiny), MIN_BUFFER);
        let fixed = WanParams {
            socket_buffer: 123_456,
            ..WanParams::default()
        };
        assert_eq!(target_buffer(&fixed), 123_456);
    }

    #[test]
    fn lowat_is_five_ms_of_the_link_within_bounds() {
        let at = |bps: u64| {
            target_lowat(&WanParams {
                bandwidth_bps: bps,
                ..WanParams::default()
            })
        };
        assert_eq!(at(40_000_000), 25_000);
        assert_eq!(at(1_000_000_000), 625_000);
        assert_eq!(at(1_000_000), LOWAT_MIN);
        assert_eq!(at(100_000_000_000), LOWAT_MAX);
        let fixed = WanParams {
            notsent_lowat: 12_345,
            ..WanParams::default()
        };
        assert_eq!(target_lowat(&fixed), 12_345);
    }

    #[test]
    fn apply_sets_the_low_water_mark_and_read_back_reports_it() {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let p = WanParams {
            bandwidth_bps: 40_000_000,
            ..WanParams::default()
        };
        let warnings = apply(&sock, &p);
        assert!(
            !warnings.iter().any(|w| w.contains("NOTSENT")),
            "{warnings:?}"
        );
        assert_eq!(read_back(&sock, &p).notsent_lowat, 25_000);
    }

    #[test]
    fn host_advice_names_each_slow_setting_and_its_fix() {
        let defaults = HostTcp {
            slow_start_after_idle: Some(1),
            pacing_ss_ratio: Some(200),
            pacing_ca_ratio: Some(120),
        };
        let a = host_advice(&defaults, true);
        assert_eq!(a.len(), 3, "{a:?}");
        assert!(a[0].contains("sysctl -w net.ipv4.tcp_slow_start_after_idle=0"));
        assert!(a[1].contains("sysctl -w net.ipv4.tcp_pacing_ss_ratio=1000"));
        assert!(a[2].contains("tcp_pacing_ca_ratio = 120"));
        // Unpaced links (or BBR's own pacing) do not care about the ratios.
        assert_eq!(host_advice(&defaults, false).len(), 1);
        let tuned = HostTcp {
            slow_start_after_idle: Some(0),
            pacing_ss_ratio: Some(1000),
            pacing_ca_ratio: Some(1000),
        };
        assert!(host_advice(&tuned, true).is_empty());
        // An unreadable sysctl (not Linux, no /proc) is no advice, not a guess.
        let unknown = HostTcp {
            slow_start_after_idle: None,
            pacing_ss_ratio: None,
            pacing_ca_ratio: None,
        };
        assert!(host_advice(&unknown, true).is_empty());
    }

    #[test]
    fn layout_matches_the_kernel() {
        // Offsets from include/uapi/linux/tcp.h.
        assert_eq!(std::mem::offset_of!(RawTcpInfo, total_retrans), 100);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, snd_wnd), 228);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, total_rto), 240);
    }

    #[test]
    fn applied_values_are_read_back_on_a_real_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let p = WanParams {
            socket_buffer: 256 * 1024,
            pacing_bps: 80_000_000,
            ..WanParams::default()
        };
        let _ = apply(&s, &p);
        let a = read_back(&s, &p);
        assert!(a.sndbuf >= 256 * 1024, "{a:?}");
        assert!(a.nodelay);
        assert_eq!(a.pacing_bps, Some(80_000_000));
        assert!(!a.congestion.is_empty());
        let info = tcp_info(&s).unwrap();
        assert_eq!(info.state, 1); // TCP_ESTABLISHED
    }
}
