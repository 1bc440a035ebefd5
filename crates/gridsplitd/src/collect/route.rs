//! Which gateway of the destination site a new LAN flow goes to, when that
//! site has several (docs/protocol.md §5).
//!
//! The flow's (source ip, destination ip, destination port) is hashed with
//! 64-bit FNV-1a, and the hash modulo the site's gateway count is the flow's
//! gateway index. FNV-1a, not std's SipHash: the choice must not change with
//! the Rust release or the process, so that a node's connections to one
//! service keep taking the same remote gateway across gateway restarts, and so
//! that the tests and docs can compute it. The source port is left out on
//! purpose: every connection from one node to one service (an MPI rank's
//! connections to another, whatever ports the library picks) takes one path.
//!
//! Failover: from the hashed index on, wrapping, the first gateway whose link
//! is up. If none is up, the hashed one: the flow then meets that link's
//! outage rules (held while it reconnects, refused with NO_LINK without a
//! session), exactly as with a single gateway.

use std::net::{IpAddr, SocketAddr};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a (64 bits) of the source address's bytes (4 for IPv4, 16 for IPv6),
/// then the destination address's, then the destination port's (big-endian).
pub fn flow_hash(src: IpAddr, dst: SocketAddr) -> u64 {
    let mut h = FNV_OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(FNV_PRIME);
        }
    };
    for ip in [src, dst.ip()] {
        match ip {
            IpAddr::V4(a) => eat(&a.octets()),
            IpAddr::V6(a) => eat(&a.octets()),
        }
    }
    eat(&dst.port().to_be_bytes());
    h
}

/// The index, among `n` gateways (n ≥ 1), of the gateway a flow hashed to.
pub fn hashed_index(src: IpAddr, dst: SocketAddr, n: usize) -> usize {
    (flow_hash(src, dst) % n as u64) as usize
}

/// The gateway a flow takes: the first from `start` on (wrapping) for which
/// `up` holds, else `start` itself.
pub fn pick(start: usize, n: usize, up: impl Fn(usize) -> bool) -> usize {
    (0..n)
        .map(|i| (start + i) % n)
        .find(|&i| up(i))
        .unwrap_or(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_reference_values() {
        // The published FNV-1a 64 test vectors, through the same loop: "" and "a".
        let mut h = FNV_OFFSET;
        assert_eq!(h, 0xcbf29ce484222325);
        h ^= b'a' as u64;
        h = h.wrapping_mul(FNV_PRIME);
        assert_eq!(h, 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn the_hash_is_fixed_and_ignores_nothing_it_names() {
        let src: IpAddr = "10.71.1.10".parse().unwrap();
        let dst: SocketAddr = "10.71.2.20:5000".parse().unwrap();
        // Fixed across processes and releases: docs/protocol.md §5 may quote it.
        assert_eq!(flow_hash(src, dst), flow_hash(src, dst));
        let other_port: SocketAddr = "10.71.2.20:5001".parse().unwrap();
        let other_dst: SocketAddr = "10.71.2.21:5000".parse().unwrap();
        let other_src: IpAddr = "10.71.1.11".parse().unwrap();
        assert_ne!(flow_hash(src, dst), flow_hash(src, other_port));
        assert_ne!(flow_hash(src, dst), flow_hash(src, other_dst));
        assert_ne!(flow_hash(src, dst), flow_hash(other_src, dst));
    }

    #[test]
    fn flows_spread_over_the_gateways() {
        let src: IpAddr = "10.71.1.10".parse().unwrap();
        for n in [2, 3, 4] {
            let mut counts = vec![0; n];
            for port in 5000..5400 {
                let dst = SocketAddr::new("10.71.2.20".parse().unwrap(), port);
                counts[hashed_index(src, dst, n)] += 1;
            }
            // 400 flows: each gateway gets a fair part, none nothing.
            for c in &counts {
                assert!(*c > 400 / n / 2, "{n} gateways: {counts:?}");
            }
        }
        let dst: SocketAddr = "10.71.2.20:5000".parse().unwrap();
        assert_eq!(hashed_index(src, dst, 1), 0);
    }

    #[test]
    fn a_flow_fails_over_to_the_next_gateway_up() {
        let up = |set: &'static [usize]| move |i: usize| set.contains(&i);
        assert_eq!(pick(1, 3, up(&[0, 1, 2])), 1, "the hashed one while up");
        assert_eq!(pick(1, 3, up(&[0, 2])), 2, "the next one");
        assert_eq!(pick(2, 3, up(&[0, 1])), 0, "wrapping");
        assert_eq!(pick(2, 3, up(&[])), 2, "none up: the hashed one");
        assert_eq!(pick(0, 1, up(&[])), 0);
    }
}
