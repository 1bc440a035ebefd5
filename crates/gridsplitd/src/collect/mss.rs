//! The segment size the gateway offers its LAN senders, so that one LAN segment
//! relayed on its own is one WAN segment, not two.
//!
//! A node's message reaches the gateway one LAN segment at a time (the node's
//! NIC is slower than the gateway), and the gateway relays each read at once,
//! as one DATA frame: the segment's bytes plus a 12-byte frame prefix
//! (`wire::DATA_PREFIX`). With the interface's MSS on both sides, a full LAN
//! segment (1448 bytes on a 1500-byte MTU with timestamps) became a 1460-byte
//! write, which a TCP_NODELAY WAN socket sends as a full segment and a 12-byte
//! one. Half of the WAN link's packets were then 12-byte tails: the link's
//! congestion window, counted in packets, covered half the bytes a direct
//! connection's did, and a 20-40 KB halo message of an application waited a
//! WAN round trip for acknowledgments (docs/design/app-relay-overhead.md).
//!
//! So the gateway offers LAN senders an MSS that leaves room in a WAN segment
//! for what the WAN adds to a relayed write: the frame prefix and, on an
//! encrypted link, a sealed message's length and tag (2 + 16 bytes). Offered by
//! TCP_MAXSEG on the LAN listener (its SYN-ACKs carry it) and on the sockets
//! the gateway connects to destinations (their SYNs do). A segment of the
//! offered size, relayed alone, fits one WAN segment; segments read together
//! cost no more WAN segments than their bytes need. `[lan] mss`, if set, is
//! offered instead (lib.rs sets it on the listener).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

use crate::wire::DATA_PREFIX;

/// What the WAN adds to one write of relayed bytes, at most: the DATA frame
/// prefix, and an encrypted link's per-message length (2) and tag (16).
pub const WAN_WRITE_OVERHEAD: usize = DATA_PREFIX + 2 + 16;

/// TCP_MAXSEG's bounds (Linux accepts 88..=32767 on a socket; a real MSS is at
/// least 536).
const MIN_MSS: u32 = 536;
const MAX_MSS: u32 = 65495;

/// The MSS to offer on an interface of `mtu` bytes: the interface's own MSS
/// (MTU less IP and TCP headers) less `WAN_WRITE_OVERHEAD`. With timestamps
/// (12 option bytes per segment on both legs) a sender's segments then carry
/// mss − 12 bytes, and one of them plus the overhead fits the WAN's mtu − 52.
pub fn aligned(mtu: u32, ipv6: bool) -> u32 {
    let headers = if ipv6 { 60 } else { 40 };
    mtu.saturating_sub(headers)
        .saturating_sub(WAN_WRITE_OVERHEAD as u32)
        .clamp(MIN_MSS, MAX_MSS)
}

/// The MSS the gateway offers LAN senders at `lan_ip` (its LAN listener's
/// address): `configured` (`[lan] mss`) if non-zero, else `aligned` for the MTU
/// of the interface holding that address. None: leave the kernel's (an
/// unspecified address, or no interface holds it). Looked up once per address.
pub fn offered(lan_ip: IpAddr, configured: u32) -> Option<u32> {
    if configured != 0 {
        return Some(configured);
    }
    static CACHE: OnceLock<Mutex<HashMap<IpAddr, Option<u32>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap().get(&lan_ip) {
        return *v;
    }
    let v = interface_mtu(lan_ip).map(|mtu| aligned(mtu, lan_ip.is_ipv6()));
    cache.lock().unwrap().insert(lan_ip, v);
    v
}

/// The MTU of the interface that holds `ip` (getifaddrs, then SIOCGIFMTU,
/// which answers for the caller's network namespace).
fn interface_mtu(ip: IpAddr) -> Option<u32> {
    if ip.is_unspecified() {
        return None;
    }
    let name = interface_of(ip)?;
    // SAFETY: a plain datagram socket, closed below; `req` is a zeroed ifreq
    // whose name is NUL-terminated (name.len() < IFNAMSIZ, checked).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(name.iter()) {
            *d = *s as libc::c_char;
        }
        let rc = libc::ioctl(fd, libc::SIOCGIFMTU as _, &mut req);
        libc::close(fd);
        (rc == 0)
            .then_some(req.ifr_ifru.ifru_mtu)
            .filter(|&m| m > 0)
            .map(|m| m as u32)
    }
}

/// The name (bytes, without NUL) of the interface holding `ip`.
fn interface_of(ip: IpAddr) -> Option<Vec<u8>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed by freeifaddrs below;
    // each entry's address is read according to its family.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return None;
        }
        let mut found = None;
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            let addr = match (*ifa.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::from(sin6.sin6_addr.s6_addr)
                }
                _ => continue,
            };
            if addr == ip {
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes();
                if name.len() < libc::IFNAMSIZ {
                    found = Some(name.to_vec());
                }
                break;
            }
        }
        libc::freeifaddrs(head);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a 1500-byte MTU with timestamps, a sender's full segment under the
    /// offered MSS, plus the frame prefix and a sealed message's overhead, is
    /// exactly the WAN's full segment (1448 bytes of payload).
    #[test]
    fn a_full_lan_segment_and_its_overhead_fill_one_wan_segment() {
        let offer = aligned(1500, false);
        let timestamps = 12;
        let lan_payload = offer as usize - timestamps;
        let wan_payload = 1500 - 40 - timestamps;
        assert_eq!(lan_payload + WAN_WRITE_OVERHEAD, wan_payload);
        assert_eq!(
            lan_payload + DATA_PREFIX,
            1430,
            "clear frames leave 18 bytes"
        );
        assert_eq!(aligned(9000, false), 8930);
        assert_eq!(aligned(1500, true), 1410);
        assert_eq!(aligned(576, false), MIN_MSS, "never below a real MSS");
        assert_eq!(aligned(65536, false), 65_466);
        assert_eq!(aligned(70_000, false), MAX_MSS);
    }

    #[test]
    fn the_loopback_interface_is_found_and_a_configured_mss_wins() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let mtu = interface_mtu(lo).expect("lo holds 127.0.0.1");
        assert!(mtu >= 1500, "lo's MTU is {mtu}");
        assert_eq!(offered(lo, 0), Some(aligned(mtu, false)));
        assert_eq!(offered(lo, 1200), Some(1200));
        assert_eq!(offered("0.0.0.0".parse().unwrap(), 0), None);
        assert_eq!(
            offered("192.0.2.77".parse().unwrap(), 0),
            None,
            "no interface holds it"
        );
    }

    /// The offer reaches the sender: a listener given it after listen() (as
    /// collect::serve does) makes a connecting socket send segments of it
    /// less the timestamp option.
    #[tokio::test]
    async fn a_sender_follows_the_listeners_offer() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        socket2::SockRef::from(&l).set_tcp_mss(1430).unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (_s, _) = l.accept().await.unwrap();
        let mss = socket2::SockRef::from(&c).tcp_mss().unwrap();
        assert!((1400..=1430).contains(&mss), "the sender's MSS is {mss}");
    }
}
