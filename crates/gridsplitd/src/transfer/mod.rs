//! The transfer layer: WAN drivers, in NewMadeleine's sense — thin, no policy, just
//! "send these frames", "give me the next frame", "how much can you take now", and
//! what the transport knows about itself (tcp_info, streams).
//!
//! The link (link.rs) only sees these traits, so a driver over several parallel TCP
//! streams or MPTCP can be added next to tcp.rs without touching scheduling or flow
//! control. A connection is used whole for the handshake, then split into a sending
//! half (driven by the link's writer task), a receiving half (the reader task) and a
//! probe (read by /status) so the two directions never wait on each other.

pub mod tcp;

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use thiserror::Error;

use crate::tune::{Applied, TcpInfo};
use crate::wire::{Frame, OutBuf, WireError};

#[derive(Debug, Error)]
pub enum RecvError {
    #[error("connection closed by peer")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Wire(#[from] WireError),
}

/// A fresh WAN connection, before it is split.
pub trait WanConn: Send + Sized + 'static {
    type Tx: WanTx;
    type Rx: WanRx;
    type Probe: WanProbe;

    fn send_frame(&mut self, f: &Frame) -> impl Future<Output = io::Result<()>> + Send;
    fn recv_frame(&mut self) -> impl Future<Output = Result<Frame, RecvError>> + Send;
    fn peer_addr(&self) -> SocketAddr;
    fn split(self) -> (Self::Tx, Self::Rx, Self::Probe);
}

/// Sending half.
pub trait WanTx: Send + 'static {
    /// How many bytes the driver can take right now without queueing behind
    /// earlier frames — the scheduler fills at most this much per round.
    fn room(&self) -> usize;
    /// Writes everything in `out` (and empties it).
    fn send(&mut self, out: &mut OutBuf) -> impl Future<Output = io::Result<()>> + Send;
}

/// Receiving half.
pub trait WanRx: Send + 'static {
    /// The next frame; an error is final for the link.
    fn recv(&mut self) -> impl Future<Output = Result<Frame, RecvError>> + Send;
}

/// Read-only view for /status and /metrics.
pub trait WanProbe: Send + Sync + 'static {
    fn streams(&self) -> usize;
    fn tcp_info(&self) -> Vec<TcpInfo>;
    fn applied(&self) -> Vec<Applied>;
    /// Shuts the transport down both ways, waking both halves with an error/EOF.
    fn close(&self);
}
