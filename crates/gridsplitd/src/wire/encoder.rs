//! Frame → bytes. `Frame::encode` appends a frame to an `OutBuf` without
//! copying large payloads; `stripe_header` and `data_prefix` write the headers
//! of a STRIPE and a DATA frame alone, for the senders that put the payload
//! beside them as separate segments.

use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes};

use super::{
    FlowId, Frame, FrameType, OutBuf, BATCH_FIN, DATA_HEADER, HEADER_LEN, HELLO_MAGIC,
    SESSION_RESUME, STRIPE_HEADER, VERSION,
};

/// The header of a STRIPE frame carrying `len` bytes: what a striping driver
/// puts in front of a piece of the link stream that it sends as several
/// segments (so the piece is never copied into one buffer).
pub fn stripe_header(seq: u64, len: usize) -> [u8; HEADER_LEN + STRIPE_HEADER] {
    let mut h = [0u8; HEADER_LEN + STRIPE_HEADER];
    h[0] = VERSION;
    h[1] = FrameType::Stripe as u8;
    h[4..8].copy_from_slice(&((STRIPE_HEADER + len) as u32).to_be_bytes());
    h[8..16].copy_from_slice(&seq.to_be_bytes());
    h
}

/// Length of a DATA frame's header and payload header: what precedes its bytes.
pub const DATA_PREFIX: usize = HEADER_LEN + DATA_HEADER;

/// The first `DATA_PREFIX` bytes of a DATA frame carrying `len` bytes of `flow`,
/// exactly as `Frame::Data`'s encoding starts: for the link's idle fast path,
/// which writes one small chunk without building a frame.
pub fn data_prefix(flow: FlowId, len: usize) -> [u8; DATA_PREFIX] {
    let mut h = [0u8; DATA_PREFIX];
    h[0] = VERSION;
    h[1] = FrameType::Data as u8;
    h[4..8].copy_from_slice(&((DATA_HEADER + len) as u32).to_be_bytes());
    h[8..12].copy_from_slice(&flow.to_be_bytes());
    h
}

impl Frame {
    /// Appends the frame to `out`. Large payloads are attached by reference
    /// (no copy); headers and small payloads are copied into a contiguous run.
    pub fn encode(&self, out: &mut OutBuf) {
        let head = &mut out.head;
        head.reserve(HEADER_LEN + 64);
        head.put_u8(VERSION);
        head.put_u8(self.kind() as u8);
        head.put_u16(0);
        head.put_u32(self.payload_len() as u32);
        match self {
            Frame::Hello {
                max_frame,
                nonce,
                site,
                sealed,
            } => {
                head.put_slice(HELLO_MAGIC);
                head.put_u32(*max_frame);
                head.put_slice(nonce);
                head.put_u8(site.len() as u8);
                head.put_slice(site.as_bytes());
                head.put_u8(*sealed as u8);
            }
            Frame::Auth { tag } => head.put_slice(tag),
            Frame::Open {
                flow,
                window,
                dst,
                src,
            } => {
                head.put_u32(*flow);
                head.put_u32(*window);
                head.put_u8(family(dst));
                head.put_u8(family(src));
                head.put_u16(dst.port());
                head.put_slice(&addr16(dst.ip()));
                head.put_u16(src.port());
                head.put_slice(&addr16(src.ip()));
            }
            Frame::OpenReply {
                flow,
                status,
                window,
            } => {
                head.put_u32(*flow);
                head.put_u8(*status);
                head.put_u32(*window);
            }
            Frame::Data { flow, data } => {
                head.put_u32(*flow);
                out.attach(data);
            }
            Frame::Batch(entries) => {
                for e in entries {
                    let head = &mut out.head;
                    head.put_u32(e.flow);
                    head.put_u8(if e.fin { BATCH_FIN } else { 0 });
                    head.put_u32(e.data.len() as u32);
                    out.attach(&e.data);
                }
            }
            Frame::Credit { flow, grant } => {
                head.put_u32(*flow);
                head.put_u32(*grant);
            }
            Frame::Fin { flow } => head.put_u32(*flow),
            Frame::Reset { flow, reason } => {
                head.put_u32(*flow);
                head.put_u8(*reason as u8);
            }
            Frame::Ping { token } | Frame::Pong { token } => head.put_u64(*token),
            Frame::Session(s) => {
                head.put_u64(s.session);
                head.put_u64(s.received);
                head.put_u8(if s.resume { SESSION_RESUME } else { 0 });
                head.put_u8(s.streams);
                head.put_u64(s.token);
            }
            Frame::Ack { received } => head.put_u64(*received),
            Frame::Join { session, token } => {
                head.put_u64(*session);
                head.put_u64(*token);
            }
            Frame::Stripe { seq, data } => {
                head.put_u64(*seq);
                out.attach(data);
            }
        }
    }

    /// Convenience for tests and the fuzzer: the frame as one contiguous buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = OutBuf::new();
        self.encode(&mut out);
        out.concat()
    }
}

fn family(a: &SocketAddr) -> u8 {
    if a.is_ipv4() {
        4
    } else {
        6
    }
}

fn addr16(ip: IpAddr) -> [u8; 16] {
    let mut b = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => b[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => b = v6.octets(),
    }
    b
}
