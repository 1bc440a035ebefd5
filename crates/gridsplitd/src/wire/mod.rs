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
//!  1    HELLO       magic "GSW4" | max_frame u32 | nonce [32] | name_len u8 | gateway id |
//!                   sealed u8
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
//! The code, one job a file: `frame` defines the frames and their sizes,
//! `encoder` turns a frame into bytes appended to an `OutBuf` (the write queue of
//! `outbuf`), and `decoder` turns bytes back into a frame, checking everything a
//! peer could get wrong. Everything is re-exported here: callers use `wire::X`.

mod decoder;
mod encoder;
mod frame;
mod outbuf;
#[cfg(test)]
mod tests;

pub use decoder::{check_decoder_invariants, decode, decode_slice};
pub use encoder::{data_prefix, stripe_header, DATA_PREFIX};
pub use frame::{BatchEntry, FlowId, Frame, FrameType, ResetReason, Session, WireError};
pub use outbuf::OutBuf;

/// 4: HELLO carries the encryption flag, and what follows AUTH is sealed.
pub const VERSION: u8 = 4;
pub const HEADER_LEN: usize = 8;
pub const HELLO_MAGIC: &[u8; 4] = b"GSW4";
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
