//! The gateway ↔ gateway (WAN) frame codec: section 4 of docs/protocol.md.
//!
//! Everything that crosses a WAN link is a frame. A frame is an 8-byte header
//! followed by a typed payload; all integers are big-endian (network order).
//!
//! ```text
//! header   0  u8   version        = 3
//!          1  u8   type           (table below)
//!          2  u16  reserved       = 0 (room for flags in a later version)
//!          4  u32  payload length (header excluded; header + payload <= max_frame)
//!
//! type  name        payload
//!  1    HELLO       magic "GSW3" | max_frame u32 | nonce [32] | name_len u8 | site name
//!  2    AUTH        HMAC-SHA256 tag [32]                     (see auth.rs)
//!  3    OPEN        flow u32 | window u32 | dst_family u8 | src_family u8 |
//!                   dst_port u16 | dst_addr [16] | src_port u16 | src_addr [16]
//!  4    OPEN_REPLY  flow u32 | status u8 (GSa1 codes) | window u32
//!  5    DATA        flow u32 | bytes...
//!  6    BATCH       1..n entries of: flow u32 | flags u8 (bit0 = FIN) | len u32 | bytes[len]
//!  7    CREDIT      flow u32 | grant u32                     (adds to the sender's credit)
//!  8    FIN         flow u32
//!  9    RESET       flow u32 | reason u8
//! 10    PING        token u64
//! 11    PONG        token u64
//! 12    SESSION     session u64 | received u64 | flags u8 (bit0 = RESUME) |
//!                   streams u8 | token u64
//! 13    ACK         received u64                             (link-stream bytes received)
//! 14    JOIN        session u64 | token u64                  (an extra stream of a striped link)
//! 15    STRIPE      seq u64 | bytes...                       (a piece of a striped link's stream)
//! ```
//!
//! Version 3 stripes a link over several TCP connections (transfer/striped.rs):
//! the dialer proposes `streams` in SESSION, the acceptor answers with the count
//! it accepts and a fresh `token`; the dialer opens the other connections, each
//! authenticated like the first, and sends JOIN with that token on each. From
//! then on every connection of the link carries only STRIPE frames: the link's
//! own frame stream, cut into pieces numbered `seq` (0, 1, 2... per connection
//! set) and put back in order by the receiver. With `streams = 1` nothing
//! changes: the frames go on the one connection as they are.
//!
//! Version 2 made a link a resumable session (link/session.rs): after AUTH the
//! dialer sends SESSION, the acceptor answers with one, and from then on each
//! side counts the bytes of the frames it has handled (`received`) and keeps
//! what it sent until the peer ACKs it, so that a new TCP connection can carry
//! on where the old one stopped. A version 1 peer is refused at its first frame
//! with a message that names both versions (auth.rs).
//!
//! Flow ids are chosen by the gateway that sends OPEN: the dialing side of a link
//! uses odd ids, the accepting side even ids, so both can open flows without
//! coordination. `window` in OPEN/OPEN_REPLY is the initial credit the sender of
//! that frame grants for the flow's opposite direction.
//!
//! BATCH is what the `aggregate` strategy emits: small chunks of several flows packed
//! into one frame (and so into one write and, often, one TCP segment).
//!
//! The decoder checks the header before waiting for the payload, so a peer that
//! announces an oversized frame or talks garbage is rejected after 8 bytes, not after
//! we have buffered whatever it claims. Whether a frame makes sense for the link's
//! state (DATA for an unknown flow, HELLO after the handshake...) is decided one layer
//! up, in link.rs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

pub const VERSION: u8 = 3;
pub const HEADER_LEN: usize = 8;
pub const HELLO_MAGIC: &[u8; 4] = b"GSW3";
pub const NONCE_LEN: usize = 32;
pub const TAG_LEN: usize = 32;
/// Smallest max_frame a gateway accepts: HELLO and OPEN must always fit.
pub const MIN_MAX_FRAME: usize = 4096;
/// Largest max_frame we ever allow, whatever the config says (memory per link).
pub const MAX_MAX_FRAME: usize = 16 << 20;
/// BATCH entry header: flow u32 | flags u8 | len u32.
pub const BATCH_ENTRY_HEADER: usize = 9;
/// DATA payload header: flow u32.
pub const DATA_HEADER: usize = 4;
const BATCH_FIN: u8 = 1;
/// SESSION flag: the sender holds this session's state and asks to resume it.
const SESSION_RESUME: u8 = 1;
/// STRIPE payload header: seq u64.
pub const STRIPE_HEADER: usize = 8;

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

pub type FlowId = u32;

wire_enum! {
    pub enum FrameType {
        Hello = 1,
        Auth = 2,
        Open = 3,
        OpenReply = 4,
        Data = 5,
        Batch = 6,
        Credit = 7,
        Fin = 8,
        Reset = 9,
        Ping = 10,
        Pong = 11,
        Session = 12,
        Ack = 13,
        Join = 14,
        Stripe = 15,
    }
}

impl FrameType {
    /// The payload length of the types whose payload has one size (the table
    /// above), which the decoder requires exactly; `None` for the others.
    fn fixed_len(self) -> Option<usize> {
        Some(match self {
            Self::Auth => TAG_LEN,
            Self::Open => 4 + 4 + 1 + 1 + 2 + 16 + 2 + 16,
            Self::OpenReply => 4 + 1 + 4,
            Self::Credit => 8,
            Self::Fin => 4,
            Self::Reset => 5,
            Self::Ping | Self::Pong => 8,
            Self::Session => 26,
            Self::Ack => 8,
            Self::Join => 16,
            Self::Hello | Self::Data | Self::Batch | Self::Stripe => return None,
        })
    }
}

wire_enum! {
    /// Why a flow was reset; carried for logs only, the far side resets its LAN end either way.
    pub enum ResetReason {
        /// The LAN connection was reset or failed on the sender's side.
        LanReset = 1,
        /// The sending gateway gave up (timeout, shutdown, protocol trouble).
        Aborted = 2,
        /// The flow was refused by policy after OPEN.
        Refused = 3,
        Other = 255,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    pub flow: FlowId,
    pub fin: bool,
    pub data: Bytes,
}

/// A SESSION frame: opens or resumes a session, right after AUTH: the dialer's
/// request, then the acceptor's answer (`resume` set only if it resumes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub session: u64,
    pub received: u64,
    pub resume: bool,
    /// Connections to stripe the link over: proposed by the dialer,
    /// accepted (possibly fewer) by the acceptor.
    pub streams: u8,
    /// The acceptor's ticket for this connection set's JOINs (0 from the dialer).
    pub token: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello {
        max_frame: u32,
        nonce: [u8; NONCE_LEN],
        site: String,
    },
    Auth {
        tag: [u8; TAG_LEN],
    },
    Open {
        flow: FlowId,
        window: u32,
        dst: SocketAddr,
        src: SocketAddr,
    },
    OpenReply {
        flow: FlowId,
        status: u8,
        window: u32,
    },
    Data {
        flow: FlowId,
        data: Bytes,
    },
    Batch(Vec<BatchEntry>),
    Credit {
        flow: FlowId,
        grant: u32,
    },
    Fin {
        flow: FlowId,
    },
    Reset {
        flow: FlowId,
        reason: ResetReason,
    },
    Ping {
        token: u64,
    },
    Pong {
        token: u64,
    },
    Session(Session),
    /// Bytes of the link stream the sender has received and handled: the peer
    /// may forget them (they will never be replayed).
    Ack {
        received: u64,
    },
    /// First frame after AUTH on an extra connection of a striped link.
    Join {
        session: u64,
        token: u64,
    },
    /// A piece of a striped link's frame stream.
    Stripe {
        seq: u64,
        data: Bytes,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("bad frame version {0} (expected {VERSION})")]
    BadVersion(u8),
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("oversized frame: {len} bytes > max_frame {max}")]
    Oversized { len: usize, max: usize },
    #[error("truncated frame: {need} more bytes needed")]
    Truncated { need: usize },
    #[error("malformed {kind:?} frame: {reason}")]
    Malformed {
        kind: FrameType,
        reason: &'static str,
    },
    #[error("reserved header bits set ({0:#06x})")]
    Reserved(u16),
}

impl Frame {
    pub fn kind(&self) -> FrameType {
        match self {
            Frame::Hello { .. } => FrameType::Hello,
            Frame::Auth { .. } => FrameType::Auth,
            Frame::Open { .. } => FrameType::Open,
            Frame::OpenReply { .. } => FrameType::OpenReply,
            Frame::Data { .. } => FrameType::Data,
            Frame::Batch(_) => FrameType::Batch,
            Frame::Credit { .. } => FrameType::Credit,
            Frame::Fin { .. } => FrameType::Fin,
            Frame::Reset { .. } => FrameType::Reset,
            Frame::Ping { .. } => FrameType::Ping,
            Frame::Pong { .. } => FrameType::Pong,
            Frame::Session(_) => FrameType::Session,
            Frame::Ack { .. } => FrameType::Ack,
            Frame::Join { .. } => FrameType::Join,
            Frame::Stripe { .. } => FrameType::Stripe,
        }
    }

    /// Payload length on the wire (header excluded).
    pub fn payload_len(&self) -> usize {
        match self {
            Frame::Hello { site, .. } => 4 + 4 + NONCE_LEN + 1 + site.len(),
            Frame::Data { data, .. } => DATA_HEADER + data.len(),
            Frame::Batch(entries) => entries
                .iter()
                .map(|e| BATCH_ENTRY_HEADER + e.data.len())
                .sum(),
            Frame::Stripe { data, .. } => STRIPE_HEADER + data.len(),
            fixed => fixed.kind().fixed_len().expect("a fixed-size frame type"),
        }
    }

    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    /// Relayed application bytes carried by this frame (for counters).
    pub fn data_bytes(&self) -> usize {
        match self {
            Frame::Data { data, .. } => data.len(),
            Frame::Batch(entries) => entries.iter().map(|e| e.data.len()).sum(),
            _ => 0,
        }
    }

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
            } => {
                head.put_slice(HELLO_MAGIC);
                head.put_u32(*max_frame);
                head.put_slice(nonce);
                head.put_u8(site.len() as u8);
                head.put_slice(site.as_bytes());
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

/// Bytes waiting to be written to a WAN socket, as a list of segments ready for a
/// vectored write. Small pieces are coalesced into the current contiguous run;
/// payloads of at least `ATTACH_MIN` bytes are referenced, not copied.
pub struct OutBuf {
    segs: Vec<Bytes>,
    head: BytesMut,
    len: usize,
}

/// Below this size copying into the header run is cheaper than one more iovec.
const ATTACH_MIN: usize = 1024;

impl Default for OutBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl OutBuf {
    pub fn new() -> Self {
        Self {
            segs: Vec::new(),
            head: BytesMut::with_capacity(4096),
            len: 0,
        }
    }

    fn attach(&mut self, data: &Bytes) {
        if data.len() < ATTACH_MIN {
            self.head.extend_from_slice(data);
        } else {
            self.seal();
            self.len += data.len();
            self.segs.push(data.clone());
        }
    }

    /// Closes the current contiguous run so the next piece starts a new segment.
    fn seal(&mut self) {
        if !self.head.is_empty() {
            let run = self.head.split().freeze();
            self.len += run.len();
            self.segs.push(run);
        }
    }

    /// Total bytes queued.
    pub fn len(&self) -> usize {
        self.len + self.head.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends already-encoded bytes (the unsent rest of an earlier write) as they are.
    pub fn push_raw(&mut self, segs: impl IntoIterator<Item = Bytes>) {
        self.seal();
        for s in segs {
            self.len += s.len();
            self.segs.push(s);
        }
    }

    /// Where the next piece will start, as a segment index (for `sealed_since`).
    pub fn mark(&mut self) -> usize {
        self.seal();
        self.segs.len()
    }

    /// The segments added since `mark`, sealed (the session's replay buffer
    /// records them as they are committed to the wire).
    pub fn sealed_since(&mut self, mark: usize) -> &[Bytes] {
        self.seal();
        &self.segs[mark..]
    }

    /// Finishes the buffer and hands out its segments (in order).
    pub fn take_segments(&mut self) -> Vec<Bytes> {
        self.seal();
        self.len = 0;
        std::mem::take(&mut self.segs)
    }

    pub fn concat(&mut self) -> Bytes {
        let segs = self.take_segments();
        if segs.len() == 1 {
            return segs.into_iter().next().unwrap();
        }
        let mut all = BytesMut::with_capacity(segs.iter().map(|s| s.len()).sum());
        for s in segs {
            all.extend_from_slice(&s);
        }
        all.freeze()
    }
}

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
            exact(&p, n)?;
            let site = std::str::from_utf8(&p).map_err(|_| bad("site name is not UTF-8"))?;
            Frame::Hello {
                max_frame,
                nonce,
                site: site.to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: usize = 262_144;

    fn samples() -> Vec<Frame> {
        let a: SocketAddr = "127.0.1.10:4000".parse().unwrap();
        let b: SocketAddr = "[fd00::2]:80".parse().unwrap();
        vec![
            Frame::Hello {
                max_frame: 262_144,
                nonce: [7; 32],
                site: "bordeaux".into(),
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
            (any::<u32>(), any::<[u8; 32]>(), "[a-z0-9_-]{1,40}").prop_map(
                |(max_frame, nonce, site)| Frame::Hello {
                    max_frame,
                    nonce,
                    site
                }
            ),
            any::<[u8; 32]>().prop_map(|tag| Frame::Auth { tag }),
            (any::<u32>(), any::<u32>(), addr.clone(), addr).prop_map(
                |(flow, window, dst, src)| Frame::Open {
                    flow,
                    window,
                    dst,
                    src
                }
            ),
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
            (any::<u64>(), any::<u64>())
                .prop_map(|(session, token)| Frame::Join { session, token }),
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
}
