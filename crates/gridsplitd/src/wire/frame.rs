//! The frames of the WAN protocol as Rust values: one `Frame` variant per frame
//! type of the table in wire/mod.rs, the codes of types and reset reasons, the
//! sizes the encoder writes and the decoder requires, and the decoder's errors.

use std::net::SocketAddr;

use bytes::Bytes;
use thiserror::Error;

use super::{
    BATCH_ENTRY_HEADER, DATA_HEADER, HEADER_LEN, NONCE_LEN, STRIPE_HEADER, TAG_LEN, VERSION,
};

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
    /// in wire/mod.rs), which the decoder requires exactly; `None` for the others.
    pub(super) fn fixed_len(self) -> Option<usize> {
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
        /// The sender's gateway id: its site's name, or `SITE/K` when its
        /// site has several gateways (config::Site::id).
        site: String,
        /// The sender's `[wan] encryption` is "noise": everything after AUTH is
        /// sealed (transfer/seal.rs). Both ends must agree (auth.rs).
        sealed: bool,
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
            Frame::Hello { site, .. } => 4 + 4 + NONCE_LEN + 1 + site.len() + 1,
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
}
