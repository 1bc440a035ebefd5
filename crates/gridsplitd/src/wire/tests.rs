//! Unit tests of the frame codec: every frame type round-trips, the stream
//! decoder waits for whole frames, header errors are typed, and property tests
//! over arbitrary frames, truncations and garbage.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

const MAX: usize = 262_144;

fn samples() -> Vec<Frame> {
    let a: SocketAddr = "127.0.1.10:4000".parse().unwrap();
    let b: SocketAddr = "[fd00::2]:80".parse().unwrap();
    vec![
        Frame::Hello {
            max_frame: 262_144,
            nonce: [7; 32],
            site: "bordeaux".into(),
            sealed: true,
        },
        Frame::Auth { tag: [9; 32] },
        Frame::Open {
            flow: 3,
            window: 1 << 20,
            dst: b,
            src: a,
        },
        Frame::OpenReply {
            flow: 3,
            status: 1,
            window: 65_536,
        },
        Frame::Data {
            flow: 5,
            data: Bytes::from_static(b"hello"),
        },
        Frame::Data {
            flow: 5,
            data: Bytes::from(vec![1u8; 5000]),
        },
        Frame::Data {
            flow: 6,
            data: Bytes::new(),
        },
        Frame::Batch(vec![
            BatchEntry {
                flow: 1,
                fin: false,
                data: Bytes::from_static(b"ab"),
            },
            BatchEntry {
                flow: 2,
                fin: true,
                data: Bytes::new(),
            },
            BatchEntry {
                flow: 3,
                fin: false,
                data: Bytes::from(vec![2u8; 3000]),
            },
        ]),
        Frame::Credit {
            flow: 9,
            grant: 12345,
        },
        Frame::Fin { flow: 9 },
        Frame::Reset {
            flow: 9,
            reason: ResetReason::LanReset,
        },
        Frame::Ping { token: 42 },
        Frame::Pong { token: 43 },
    ]
}

/// The fast path's prefix plus the bytes is the same frame `encode` makes.
#[test]
fn data_prefix_matches_the_encoder() {
    for len in [0usize, 1, 8, 1023, 5000] {
        let data = Bytes::from(vec![7u8; len]);
        let mut out = OutBuf::new();
        Frame::Data {
            flow: 77,
            data: data.clone(),
        }
        .encode(&mut out);
        let mut want = data_prefix(77, len).to_vec();
        want.extend_from_slice(&data);
        assert_eq!(out.concat(), Bytes::from(want), "len {len}");
    }
}

#[test]
fn every_frame_type_round_trips() {
    for f in samples() {
        let bytes = f.to_bytes();
        assert_eq!(bytes.len(), f.wire_len(), "{f:?}");
        let (g, used) = decode_slice(&bytes, MAX).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(g, f);
        let mut stream = BytesMut::from(&bytes[..]);
        assert_eq!(decode(&mut stream, MAX).unwrap(), Some(f));
        assert!(stream.is_empty());
    }
}

#[test]
fn stream_decoder_waits_for_whole_frames() {
    let all: Vec<u8> = samples()
        .iter()
        .flat_map(|f| f.to_bytes().to_vec())
        .collect();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in all {
        buf.put_u8(b);
        while let Some(f) = decode(&mut buf, MAX).unwrap() {
            got.push(f);
        }
    }
    assert_eq!(got, samples());
}

#[test]
fn header_errors_are_typed() {
    let good = Frame::Ping { token: 1 }.to_bytes().to_vec();
    let mut v = good.clone();
    v[0] = 1;
    assert_eq!(decode_slice(&v, MAX).unwrap_err(), WireError::BadVersion(1));
    let mut v = good.clone();
    v[1] = 99;
    assert_eq!(
        decode_slice(&v, MAX).unwrap_err(),
        WireError::UnknownType(99)
    );
    let mut v = good.clone();
    v[4..8].copy_from_slice(&(MAX as u32).to_be_bytes());
    assert!(matches!(
        decode_slice(&v, MAX),
        Err(WireError::Oversized { .. })
    ));
    // Oversized is detected from the header alone, before the payload arrives.
    let mut s = BytesMut::from(&v[..8]);
    assert!(matches!(
        decode(&mut s, MAX),
        Err(WireError::Oversized { .. })
    ));
    assert!(matches!(
        decode_slice(&good[..5], MAX),
        Err(WireError::Truncated { .. })
    ));
    let mut v = good.clone();
    v[7] = 7; // a PING with 7 bytes of payload
    v.pop();
    assert!(matches!(
        decode_slice(&v, MAX),
        Err(WireError::Malformed { .. })
    ));
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    let addr = (any::<bool>(), any::<[u8; 16]>(), any::<u16>()).prop_map(|(v4, raw, port)| {
        if v4 {
            SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
                port,
            )
        } else {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::from(raw)), port)
        }
    });
    let data = proptest::collection::vec(any::<u8>(), 0..3000).prop_map(Bytes::from);
    let entry = (any::<u32>(), any::<bool>(), data.clone())
        .prop_map(|(flow, fin, data)| BatchEntry { flow, fin, data });
    prop_oneof![
        (
            any::<u32>(),
            any::<[u8; 32]>(),
            "[a-z0-9_-]{1,40}",
            any::<bool>()
        )
            .prop_map(|(max_frame, nonce, site, sealed)| Frame::Hello {
                max_frame,
                nonce,
                site,
                sealed
            }),
        any::<[u8; 32]>().prop_map(|tag| Frame::Auth { tag }),
        (any::<u32>(), any::<u32>(), addr.clone(), addr).prop_map(|(flow, window, dst, src)| {
            Frame::Open {
                flow,
                window,
                dst,
                src,
            }
        }),
        (any::<u32>(), any::<u8>(), any::<u32>()).prop_map(|(flow, status, window)| {
            Frame::OpenReply {
                flow,
                status,
                window,
            }
        }),
        (any::<u32>(), data).prop_map(|(flow, data)| Frame::Data { flow, data }),
        proptest::collection::vec(entry, 1..8).prop_map(Frame::Batch),
        (any::<u32>(), any::<u32>()).prop_map(|(flow, grant)| Frame::Credit { flow, grant }),
        any::<u32>().prop_map(|flow| Frame::Fin { flow }),
        (
            any::<u32>(),
            prop_oneof![Just(ResetReason::LanReset), Just(ResetReason::Aborted)]
        )
            .prop_map(|(flow, reason)| Frame::Reset { flow, reason }),
        any::<u64>().prop_map(|token| Frame::Ping { token }),
        any::<u64>().prop_map(|token| Frame::Pong { token }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            1..=u8::MAX,
            any::<u64>()
        )
            .prop_map(|(session, received, resume, streams, token)| {
                Frame::Session(Session {
                    session,
                    received,
                    resume,
                    streams,
                    token,
                })
            }),
        (any::<u64>(), any::<u64>()).prop_map(|(session, token)| Frame::Join { session, token }),
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(seq, d)| {
            Frame::Stripe {
                seq,
                data: Bytes::from(d),
            }
        }),
        any::<u64>().prop_map(|received| Frame::Ack { received }),
    ]
}

proptest! {
    #[test]
    fn prop_round_trip(f in arb_frame()) {
        let bytes = f.to_bytes();
        let (g, used) = decode_slice(&bytes, 1 << 20).unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(g, f);
    }

    #[test]
    fn prop_truncation_never_panics(f in arb_frame(), cut in any::<prop::sample::Index>()) {
        let bytes = f.to_bytes();
        let cut = cut.index(bytes.len());
        prop_assert!(decode_slice(&bytes[..cut], 1 << 20).is_err());
        let mut s = BytesMut::from(&bytes[..cut]);
        prop_assert_eq!(decode(&mut s, 1 << 20), Ok(None));
    }

    #[test]
    fn prop_garbage_never_panics(v in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode_slice(&v, 512);
        let mut s = BytesMut::from(&v[..]);
        while let Ok(Some(_)) = decode(&mut s, 512) {}
    }

    #[test]
    fn prop_oversized_rejected(f in arb_frame()) {
        let bytes = f.to_bytes();
        let max = bytes.len() - 1;
        let is_oversized = matches!(decode_slice(&bytes, max), Err(WireError::Oversized { .. }));
        prop_assert!(is_oversized);
    }
}
