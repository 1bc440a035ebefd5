//! The transfer layer: WAN drivers, in NewMadeleine's sense — thin, no policy, just
//! "send these frames", "give me the next frame", "how much can you take now", and
//! what the transport knows about itself (tcp_info, streams).
//!
//! The link (link/) only sees these traits: tcp.rs runs a link over one TCP
//! connection, striped.rs over several, without touching scheduling or flow
//! control. A connection is used whole for the handshake, then split into a sending
//! half, a receiving half (the reader task) and a probe (read by /status) so the two
//! directions never wait on each other.
//!
//! The sending half is shared: the link's writer task uses `send` (which may wait),
//! and whoever queues a frame while the link is idle uses `try_send` to put it on
//! the wire at once, without waking the writer task (link.rs decides who may write).

pub mod seal;
pub mod striped;
pub mod tcp;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use thiserror::Error;

use bytes::Bytes;

use crate::config::WanParams;
use crate::tune::{self, Applied, TcpInfo};
use crate::wire::{Frame, OutBuf, WireError};

#[derive(Debug, Error)]
pub enum RecvError {
    #[error("connection closed by peer")]
    Closed,
    #[error("connection closed in the middle of a frame")]
    ClosedMidFrame,
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
    Crypto(#[from] seal::CryptoError),
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

/// The non-waiting part of a sending half; object-safe, so a link can hold it
/// without knowing the driver's type.
pub trait WanTxNow: Send + Sync + 'static {
    /// How many bytes the driver can take right now without queueing behind
    /// earlier frames — the scheduler fills at most this much per round.
    fn room(&self) -> usize;
    /// Writes as much of `segs` as the transport takes without waiting and removes
    /// it from `segs`; Ok(true) when everything went. The caller must be the only
    /// writer at that moment.
    fn try_send(&self, segs: &mut Vec<Bytes>) -> io::Result<bool>;
    /// Writes as much of one contiguous buffer as the transport takes without
    /// waiting; returns how much (0 when it takes nothing now). Same caller rule.
    fn try_send_slice(&self, buf: &[u8]) -> io::Result<usize>;
}

/// Sending half.
pub trait WanTx: WanTxNow {
    /// Writes everything in `out` (and empties it), waiting for room as needed.
    fn send(&self, out: &mut OutBuf) -> impl Future<Output = io::Result<()>> + Send;
}

/// Receiving half.
pub trait WanRx: Send + 'static {
    /// The next frame; an error is final for the link.
    fn recv(&mut self) -> impl Future<Output = Result<Frame, RecvError>> + Send;
    /// The next frame if it has already been received whole, without waiting:
    /// lets the reader handle a burst of frames before it flushes to the LAN.
    fn try_recv(&mut self) -> Result<Option<Frame>, RecvError>;
}

/// Read-only view for /status and /metrics.
pub trait WanProbe: Send + Sync + 'static {
    fn streams(&self) -> usize;
    fn tcp_info(&self) -> Vec<TcpInfo>;
    fn applied(&self) -> Vec<Applied>;
    /// Caps every connection's pacing rate at `bps` bits/s (SO_MAX_PACING_RATE).
    fn set_pacing(&self, bps: u64);
    /// Shuts the transport down both ways, waking both halves with an error/EOF.
    fn close(&self);
}

/// Both drivers' probe: duplicates of the descriptors of the link's TCP
/// connections, each with the parameters it was tuned with, so /status can
/// query the kernel while the two halves are busy elsewhere.
pub struct FdProbe {
    streams: usize,
    fds: Vec<(OwnedFd, WanParams)>,
}

impl FdProbe {
    /// A link over `streams` connections, of which `fds` could be duplicated.
    pub fn new(streams: usize, fds: Vec<(OwnedFd, WanParams)>) -> Self {
        Self { streams, fds }
    }
}

impl WanProbe for FdProbe {
    fn streams(&self) -> usize {
        self.streams
    }

    fn tcp_info(&self) -> Vec<TcpInfo> {
        self.fds
            .iter()
            .filter_map(|(fd, _)| tune::tcp_info(fd).ok())
            .collect()
    }

    fn applied(&self) -> Vec<Applied> {
        self.fds
            .iter()
            .map(|(fd, p)| tune::read_back(fd, p))
            .collect()
    }

    fn set_pacing(&self, bps: u64) {
        for (fd, _) in &self.fds {
            if let Err(e) = tune::set_pacing(fd, bps) {
                tracing::debug!("SO_MAX_PACING_RATE {bps}: {e}");
            }
        }
    }

    fn close(&self) {
        // shutdown() acts on the socket, not the descriptor: it ends the connection
        // even though the halves still hold their own references.
        for (fd, _) in &self.fds {
            let _ = socket2::SockRef::from(fd).shutdown(std::net::Shutdown::Both);
        }
    }
}
