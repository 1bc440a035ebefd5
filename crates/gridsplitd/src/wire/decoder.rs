//! Bytes → frame: the stream decoder (`decode`, for a socket's read buffer), the
//! slice decoder (`decode_slice`, for the fuzzer) and the contract both keep
//! (`check_decoder_invariants`).
//!
//! The decoder checks the header before waiting for the payload, so a peer that
//! announces an oversized frame or talks garbage is rejected after 8 bytes, not after
//! we have buffered whatever it claims. Whether a frame makes sense for the link's
//! state (DATA for an unknown flow, HELLO after the handshake...) is decided one layer
//! up, in link/recv.rs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Buf, Bytes, BytesMut};

use super::{
    BatchEntry, Frame, FrameType, ResetReason, Session, WireError, BATCH_ENTRY_HEADER, BATCH_FIN,
    DATA_HEADER, HEADER_LEN, HELLO_MAGIC, NONCE_LEN, SESSION_RESUME, STRIPE_HEADER, TAG_LEN,
    VERSION,
};

/// Reads the header at the start of `buf`; returns (type, payload length).
fn parse_header(buf: &[u8], max_frame: usize) -> Result<(FrameType, usize), WireError> {
    if buf.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            need: HEADER_LEN - buf.len(),
        });
    }
    if buf[0] != VERSION {
        return Err(WireError::BadVersion(buf[0]));
    }
    let kind = FrameType::from_u8(buf[1]).ok_or(WireError::UnknownType(buf[1]))?;
    let reserved = u16::from_be_bytes([buf[2], buf[3]]);
    if reserved != 0 {
        return Err(WireError::Reserved(reserved));
    }
    let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len + HEADER_LEN > max_frame {
        return Err(WireError::Oversized {
            len: len + HEADER_LEN,
            max: max_frame,
        });
    }
    Ok((kind, len))
}

/// Decodes one frame from the front of `buf`, consuming it. `Ok(None)` means more
/// bytes are needed; any error is final for the link (the stream can't be resynced).
/// DATA and BATCH payloads are slices of `buf`'s storage, not copies.
pub fn decode(buf: &mut BytesMut, max_frame: usize) -> Result<Option<Frame>, WireError> {
    let (kind, len) = match parse_header(buf, max_frame) {
        Ok(h) => h,
        Err(WireError::Truncated { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    if buf.len() < HEADER_LEN + len {
        // Make sure the whole frame will fit without another reallocation.
        buf.reserve(HEADER_LEN + len - buf.len());
        return Ok(None);
    }
    buf.advance(HEADER_LEN);
    let payload = buf.split_to(len).freeze();
    parse_payload(kind, payload).map(Some)
}

/// Decodes one frame from a plain slice; returns the frame and the bytes consumed.
/// `Truncated` here is an error because the caller has no more input. This is the
/// entry point the fuzzer drives.
pub fn decode_slice(buf: &[u8], max_frame: usize) -> Result<(Frame, usize), WireError> {
    let (kind, len) = parse_header(buf, max_frame)?;
    if buf.len() < HEADER_LEN + len {
        return Err(WireError::Truncated {
            need: HEADER_LEN + len - buf.len(),
        });
    }
    let payload = Bytes::copy_from_slice(&buf[HEADER_LEN..HEADER_LEN + len]);
    Ok((parse_payload(kind, payload)?, HEADER_LEN + len))
}

fn parse_payload(kind: FrameType, mut p: Bytes) -> Result<Frame, WireError> {
    let bad = |reason| WireError::Malformed { kind, reason };
    let exact = |p: &Bytes, n: usize| {
        if p.len() == n {
            Ok(())
        } else {
            Err(bad("payload length does not match the frame type"))
        }
    };
    if let Some(n) = kind.fixed_len() {
        exact(&p, n)?;
    }
    let frame = match kind {
        FrameType::Hello => {
            if p.len() < 4 + 4 + NONCE_LEN + 1 {
                return Err(bad("payload too short"));
            }
            if &p[..4] != HELLO_MAGIC {
                return Err(bad("bad magic"));
            }
            p.advance(4);
            let max_frame = p.get_u32();
            let mut nonce = [0u8; NONCE_LEN];
            p.copy_to_slice(&mut nonce);
            let n = p.get_u8() as usize;
            exact(&p, n + 1)?;
            let site = std::str::from_utf8(&p[..n]).map_err(|_| bad("site name is not UTF-8"))?;
            let sealed = match p[n] {
                0 => false,
                1 => true,
                _ => return Err(bad("HELLO encryption flag is neither 0 nor 1")),
            };
            Frame::Hello {
                max_frame,
                nonce,
                site: site.to_owned(),
                sealed,
            }
        }
        FrameType::Auth => {
            let mut tag = [0u8; TAG_LEN];
            p.copy_to_slice(&mut tag);
            Frame::Auth { tag }
        }
        FrameType::Open => {
            let flow = p.get_u32();
            let window = p.get_u32();
            let dfam = p.get_u8();
            let sfam = p.get_u8();
            let dport = p.get_u16();
            let dst = sockaddr(dfam, dport, &p[..16], kind)?;
            p.advance(16);
            let sport = p.get_u16();
            let src = sockaddr(sfam, sport, &p[..16], kind)?;
            Frame::Open {
                flow,
                window,
                dst,
                src,
            }
        }
        FrameType::OpenReply => Frame::OpenReply {
            flow: p.get_u32(),
            status: p.get_u8(),
            window: p.get_u32(),
        },
        FrameType::Data => {
            if p.len() < DATA_HEADER {
                return Err(bad("payload too short"));
            }
            let flow = p.get_u32();
            Frame::Data { flow, data: p }
        }
        FrameType::Batch => {
            if p.is_empty() {
                return Err(bad("empty batch"));
            }
            let mut entries = Vec::new();
            while !p.is_empty() {
                if p.len() < BATCH_ENTRY_HEADER {
                    return Err(bad("truncated batch entry header"));
                }
                let flow = p.get_u32();
                let flags = p.get_u8();
                if flags & !BATCH_FIN != 0 {
                    return Err(bad("unknown batch entry flags"));
                }
                let n = p.get_u32() as usize;
                if n > p.len() {
                    return Err(bad("batch entry longer than the frame"));
                }
                entries.push(BatchEntry {
                    flow,
                    fin: flags & BATCH_FIN != 0,
                    data: p.split_to(n),
                });
            }
            Frame::Batch(entries)
        }
        FrameType::Credit => Frame::Credit {
            flow: p.get_u32(),
            grant: p.get_u32(),
        },
        FrameType::Fin => Frame::Fin { flow: p.get_u32() },
        FrameType::Reset => {
            let flow = p.get_u32();
            let reason = ResetReason::from_u8(p.get_u8()).ok_or(bad("unknown reset reason"))?;
            Frame::Reset { flow, reason }
        }
        FrameType::Ping => Frame::Ping { token: p.get_u64() },
        FrameType::Pong => Frame::Pong { token: p.get_u64() },
        FrameType::Session => {
            let session = p.get_u64();
            let received = p.get_u64();
            let flags = p.get_u8();
            if flags & !SESSION_RESUME != 0 {
                return Err(bad("unknown session flags"));
            }
            let streams = p.get_u8();
            if streams == 0 {
                return Err(bad("zero streams"));
            }
            Frame::Session(Session {
                session,
                received,
                resume: flags & SESSION_RESUME != 0,
                streams,
                token: p.get_u64(),
            })
        }
        FrameType::Join => Frame::Join {
            session: p.get_u64(),
            token: p.get_u64(),
        },
        FrameType::Stripe => {
            if p.len() < STRIPE_HEADER {
                return Err(bad("short STRIPE"));
            }
            let seq = p.get_u64();
            Frame::Stripe { seq, data: p }
        }
        FrameType::Ack => Frame::Ack {
            received: p.get_u64(),
        },
    };
    Ok(frame)
}

/// The decoder's contract, checked on arbitrary input: the cargo-fuzz target
/// (crates/fuzz) and the bounded fuzz test (tests/fuzz_decode.rs) both call this.
/// Panics if the contract is broken; any other outcome is fine.
#[doc(hidden)]
pub fn check_decoder_invariants(data: &[u8], max_frame: usize) {
    // Slice decoder: one frame, which must re-encode to exactly its bytes.
    if let Ok((frame, used)) = decode_slice(data, max_frame) {
        assert!(used <= data.len() && used <= max_frame);
        assert_eq!(&frame.to_bytes()[..], &data[..used], "re-encoding differs");
    }
    // Stream decoder: fed in two pieces, it must end in a frame sequence then
    // either "need more" or a typed error — and agree with the slice decoder.
    let cut = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let mut buf = BytesMut::from(&data[..cut]);
    let mut rest = &data[cut..];
    let mut consumed = 0;
    loop {
        let before = buf.len() + rest.len();
        match decode(&mut buf, max_frame) {
            Ok(Some(f)) => {
                let n = before - buf.len() - rest.len();
                assert_eq!(n, f.wire_len());
                assert_eq!(
                    decode_slice(&data[consumed..], max_frame).ok().map(|x| x.0),
                    Some(f)
                );
                consumed += n;
            }
            Ok(None) if !rest.is_empty() => {
                buf.extend_from_slice(rest);
                rest = &[];
            }
            Ok(None) => break,
            Err(e) => {
                assert_eq!(decode_slice(&data[consumed..], max_frame).err(), Some(e));
                break;
            }
        }
    }
}

fn sockaddr(family: u8, port: u16, raw: &[u8], kind: FrameType) -> Result<SocketAddr, WireError> {
    let ip = match family {
        4 => {
            // One encoding per address: the unused 12 bytes must be zero.
            if raw[4..16].iter().any(|&b| b != 0) {
                return Err(WireError::Malformed {
                    kind,
                    reason: "IPv4 address with non-zero padding",
                });
            }
            IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
        }
        6 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&raw[..16]);
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => {
            return Err(WireError::Malformed {
                kind,
                reason: "address family is neither 4 nor 6",
            })
        }
    };
    Ok(SocketAddr::new(ip, port))
}
