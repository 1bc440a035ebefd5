//! Which gateway of the destination site a new LAN flow goes to, when that
//! site has several (docs/protocol.md §4.3).
//!
//! The node pair decides: the flow's index is (A(source) + A(destination))
//! mod n, where A(x) is the address's last 32 bits read as a big-endian
//! unsigned integer (IPv4: the whole address; IPv6: its last 4 bytes) and the
//! sum wraps in 32 bits. Over consecutive node addresses these sums form a
//! Latin square, so one-to-many, many-to-one (a gather) and all-to-all between
//! the nodes of two sites spread evenly over the n gateways, where a hash of a
//! job's handful of flows often does not (results/app/2026-11-26-paper-2gw: a
//! LAMMPS job's three bordeaux ranks all hashed to one gateway). The rule is
//! deterministic across processes and releases, so a node pair keeps taking
//! the same remote gateway across gateway restarts, and the tests and docs can
//! compute it. The node library picks its own site's gateway by the same rule
//! (preload/gateways.c). Ports play no part: every connection between two
//! nodes (an MPI rank's connections to another, whatever ports the library
//! picks) takes one path, which costs nothing, a node's NIC being no faster
//! than a gateway's.
//!
//! Failover: from that index on, wrapping, the first gateway whose link is
//! up. If none is up, the index itself: the flow then meets that link's
//! outage rules (held while it reconnects, refused with NO_LINK without a
//! session), exactly as with a single gateway.

use std::net::{IpAddr, SocketAddr};

/// A(x): the address's last 32 bits, big-endian (an IPv4 address whole).
fn low32(ip: IpAddr) -> u32 {
    match ip {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(a) => {
            let o = a.octets();
            u32::from_be_bytes([o[12], o[13], o[14], o[15]])
        }
    }
}

/// The node pair's spread: A(source) + A(destination), wrapping in 32 bits.
/// An unspecified source (0.0.0.0, ::) counts 0.
pub fn pair_spread(src: IpAddr, dst: IpAddr) -> u32 {
    low32(src).wrapping_add(low32(dst))
}

/// The index, among `n` gateways (n ≥ 1), of the gateway a flow from `src`
/// to `dst` starts from: the pair's spread modulo n. The port plays no part.
pub fn spread_index(src: IpAddr, dst: SocketAddr, n: usize) -> usize {
    (pair_spread(src, dst.ip()) as u64 % n as u64) as usize
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

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_spread_is_the_sum_of_the_addresses_last_32_bits() {
        // 10.71.1.10 = 0x0a47010a, 10.71.2.20 = 0x0a470214: the sum 0x148e031e.
        assert_eq!(pair_spread(v4("10.71.1.10"), v4("10.71.2.20")), 0x148e_031e);
        let dst: SocketAddr = "10.71.2.20:5000".parse().unwrap();
        assert_eq!(spread_index(v4("10.71.1.10"), dst, 3), 0x148e_031e % 3);
        // The port plays no part; the order of the pair none either.
        let other_port: SocketAddr = "10.71.2.20:5001".parse().unwrap();
        for n in 1..=8 {
            assert_eq!(
                spread_index(v4("10.71.1.10"), dst, n),
                spread_index(v4("10.71.1.10"), other_port, n)
            );
        }
        assert_eq!(
            pair_spread(v4("10.71.2.20"), v4("10.71.1.10")),
            pair_spread(v4("10.71.1.10"), v4("10.71.2.20"))
        );
        // The sum wraps in 32 bits: 255.255.255.255 + 0.0.0.2 = 1.
        assert_eq!(pair_spread(v4("255.255.255.255"), v4("0.0.0.2")), 1);
        // IPv6: the last 4 bytes; an unknown (unspecified) source counts 0.
        let a: IpAddr = "fd00::1:0a47:010a".parse().unwrap();
        let b: IpAddr = "fd00:1::ffff:0a47:0214".parse().unwrap();
        assert_eq!(pair_spread(a, b), 0x148e_031e);
        assert_eq!(pair_spread(v4("0.0.0.0"), v4("10.71.2.20")), 0x0a47_0214);
        assert_eq!(pair_spread("::".parse().unwrap(), b), 0x0a47_0214);
    }

    #[test]
    fn node_pairs_spread_evenly_over_the_gateways() {
        let node = |site: u8, host: u8| IpAddr::from([10, 71, site, host]);
        let at = |site: u8, host: u8| SocketAddr::new(node(site, host), 5000);
        for n in 1..=8usize {
            // One-to-many and many-to-one (a gather) over n consecutive nodes:
            // each gateway exactly once.
            let mut scatter = vec![0; n];
            let mut gather = vec![0; n];
            for h in 0..n as u8 {
                scatter[spread_index(node(1, 10), at(2, 20 + h), n)] += 1;
                gather[spread_index(node(1, 10 + h), at(2, 20), n)] += 1;
            }
            assert_eq!(scatter, vec![1; n], "{n} gateways, one to many");
            assert_eq!(gather, vec![1; n], "{n} gateways, many to one");
            // All-to-all between n nodes of each site: a Latin square, each
            // gateway n pairs, and each row and column every gateway once.
            let mut all = vec![0; n];
            for i in 0..n as u8 {
                let mut row = vec![0; n];
                for j in 0..n as u8 {
                    let g = spread_index(node(1, 10 + i), at(2, 20 + j), n);
                    all[g] += 1;
                    row[g] += 1;
                }
                assert_eq!(row, vec![1; n], "{n} gateways, row {i}");
            }
            assert_eq!(all, vec![n; n], "{n} gateways, all to all");
        }
    }

    #[test]
    fn a_flow_fails_over_to_the_next_gateway_up() {
        let up = |set: &'static [usize]| move |i: usize| set.contains(&i);
        assert_eq!(pick(1, 3, up(&[0, 1, 2])), 1, "its own one while up");
        assert_eq!(pick(1, 3, up(&[0, 2])), 2, "the next one");
        assert_eq!(pick(2, 3, up(&[0, 1])), 0, "wrapping");
        assert_eq!(pick(2, 3, up(&[])), 2, "none up: its own one");
        assert_eq!(pick(0, 1, up(&[])), 0);
    }
}
