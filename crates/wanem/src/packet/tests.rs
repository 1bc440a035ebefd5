//! Unit tests of the packet layer's frame handling: VLAN tag reinsertion and the
//! offsets that follow it, and GSO frames counted as their segments.

use super::*;

#[test]
fn vlan_tag_is_reinserted_and_offsets_follow() {
    let mut data = vec![0u8; VNET_HDR_LEN];
    data[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    data[2..4].copy_from_slice(&54u16.to_ne_bytes()); // hdr_len
    data[6..8].copy_from_slice(&34u16.to_ne_bytes()); // csum_start
    data[8..10].copy_from_slice(&16u16.to_ne_bytes()); // csum_offset
    data.extend_from_slice(&[1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0x08, 0x00, 0x45]);
    let out = with_vlan_tag(
        &data,
        VlanTag {
            tpid: 0x8100,
            tci: 42,
        },
    );
    assert_eq!(out.len(), data.len() + 4);
    assert_eq!(
        &out[VNET_HDR_LEN + 12..VNET_HDR_LEN + 18],
        &[0x81, 0x00, 0, 42, 0x08, 0x00]
    );
    assert_eq!(u16::from_ne_bytes([out[2], out[3]]), 58);
    assert_eq!(u16::from_ne_bytes([out[6], out[7]]), 38);
    assert_eq!(u16::from_ne_bytes([out[8], out[9]]), 16);
}

/// A TCP/IPv4 GSO frame as GRO hands it to us: 66 bytes of headers (Ethernet
/// 14, IPv4 20, TCP 32) and `payload` bytes cut into `mss`-byte segments.
fn gso_tcp_frame(payload: usize, mss: u16) -> Vec<u8> {
    let mut d = vec![0u8; VNET_HDR_LEN + 66 + payload];
    d[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    d[1] = VIRTIO_NET_HDR_GSO_TCPV4;
    d[2..4].copy_from_slice(&200u16.to_ne_bytes()); // skb_headlen: larger than the headers
    d[4..6].copy_from_slice(&mss.to_ne_bytes());
    d[6..8].copy_from_slice(&34u16.to_ne_bytes()); // csum_start: the TCP header
    d[8..10].copy_from_slice(&16u16.to_ne_bytes());
    d[VNET_HDR_LEN + 34 + 12] = 8 << 4; // data offset: 32 bytes
    d
}

#[test]
fn gso_frame_counts_its_segments_and_their_headers() {
    // 10 full segments of 1448 bytes and one of 100.
    let d = gso_tcp_frame(10 * 1448 + 100, 1448);
    let s = wire_shape(&d);
    assert_eq!(s.segments, 11);
    assert_eq!(s.wire_len, 66 + 10 * 1448 + 100 + 10 * 66);
    // A plain frame is itself.
    let mut plain = d.clone();
    plain[1] = VIRTIO_NET_HDR_GSO_NONE;
    assert_eq!(
        wire_shape(&plain),
        WireShape {
            segments: 1,
            wire_len: d.len() - VNET_HDR_LEN
        }
    );
    // ECN flag in gso_type does not change the count.
    let mut ecn = d.clone();
    ecn[1] |= VIRTIO_NET_HDR_GSO_ECN;
    assert_eq!(wire_shape(&ecn), s);
}

#[test]
fn vlan_tag_without_offload_leaves_header_alone() {
    let mut data = vec![0u8; VNET_HDR_LEN];
    data.extend_from_slice(&[0u8; 60]);
    let out = with_vlan_tag(
        &data,
        VlanTag {
            tpid: 0x88a8,
            tci: 7,
        },
    );
    assert_eq!(&out[..VNET_HDR_LEN], &[0u8; VNET_HDR_LEN]);
    assert_eq!(
        &out[VNET_HDR_LEN + 12..VNET_HDR_LEN + 16],
        &[0x88, 0xa8, 0, 7]
    );
}
