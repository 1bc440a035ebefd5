//! The single-TCP-connection WAN driver: one tuned socket carries every frame.
//!
//! Sends are vectored writes of the segments an `OutBuf` collected, so DATA
//! payloads go from the LAN read buffer to the kernel without being copied here.
//! Receives read large blocks into one `BytesMut` and cut frames out of it; DATA
//! payloads are handed on as slices of that block (again no copy).
//!
//! Unless `[wan] encryption = "insecure"`, everything after the authentication
//! is sealed (seal.rs, `secure`): writes go through `try_write_lane`, which
//! encrypts the segments into the lane's ciphertext, and reads through
//! `try_read_lane`, which opens them into the frame buffer.
//!
//! After the handshake both halves share the socket (`Arc<TcpStream>`): tokio's
//! readiness-based `try_*` calls take `&self`, which is what lets a sender that
//! finds the link idle write without going through the writer task.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::seal::{self, OpenRx, Role, SealTx};
use super::{FdProbe, RecvError, WanConn, WanRx, WanTx, WanTxNow};
use crate::config::WanParams;
use crate::sockio::{try_read_drain, try_write_segments};
use crate::tune::{self, Applied};
use crate::wire::{self, Frame, OutBuf};

/// Most bytes the writer gathers into one vectored write: large enough to amortise
/// the syscall, small enough that the scheduler keeps choosing what goes next
/// (NewMadeleine's "one packet in flight, one ahead"). A slower link gathers
/// less: one low-water mark's worth (`TcpTx::batch`).
pub(super) const WRITE_BATCH: usize = 256 * 1024;
/// Read granularity on the WAN socket: a bulk flow's frames arrive a few hundred
/// KiB at a time, and one read per block keeps syscalls per GB low.
pub(super) const READ_BLOCK: usize = 512 * 1024;

pub struct TcpConn {
    stream: TcpStream,
    rbuf: BytesMut,
    /// Largest frame we accept (our own limits.max_frame).
    recv_max: usize,
    peer: SocketAddr,
    params: WanParams,
    /// The lane's keys once `secure` ran; None on an insecure link.
    crypto: Option<(SealTx, OpenRx)>,
}

/// A lane's keys, as the striping driver takes them over.
pub(super) type Crypto = Option<(SealTx, OpenRx)>;

impl TcpConn {
    fn new(stream: TcpStream, recv_max: usize, params: WanParams) -> io::Result<Self> {
        let peer = stream.peer_addr()?;
        Ok(Self {
            stream,
            rbuf: BytesMut::with_capacity(READ_BLOCK),
            recv_max,
            peer,
            params,
            crypto: None,
        })
    }

    /// Runs the Noise handshake (seal.rs) right after the authentication:
    /// from here on every byte either way is sealed.
    pub async fn secure(
        &mut self,
        role: Role,
        psk: &[u8],
        prologue: &[u8],
    ) -> Result<(), seal::CryptoError> {
        let keys = seal::handshake(&self.stream, &mut self.rbuf, role, psk, prologue).await?;
        self.crypto = Some(keys);
        Ok(())
    }

    pub fn is_secure(&self) -> bool {
        self.crypto.is_some()
    }

    /// Dials a peer gateway from `bind_ip` (our own WAN address, so the peer sees the
    /// address it knows us by), tuned before the SYN so the window scale fits the BDP.
    pub async fn connect(
        bind_ip: Option<std::net::IpAddr>,
        peer: SocketAddr,
        params: &WanParams,
        recv_max: usize,
        timeout: Duration,
    ) -> io::Result<(Self, Vec<String>)> {
        let sock = if peer.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        let warnings = tune::apply(&sock, params);
        if let Some(ip) = bind_ip {
            if !ip.is_unspecified() {
                sock.bind(SocketAddr::new(ip, 0))?;
            }
        }
        let stream = tokio::time::timeout(timeout, sock.connect(peer))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        Ok((Self::new(stream, recv_max, params.clone())?, warnings))
    }

    /// Wraps an accepted connection; the listener's tuning was inherited, and the
    /// per-peer settings that can still change after the handshake are applied by
    /// `retune`.
    pub fn accepted(stream: TcpStream, recv_max: usize, params: &WanParams) -> io::Result<Self> {
        Self::new(stream, recv_max, params.clone())
    }

    /// Re-applies per-peer parameters once the peer's identity is known.
    pub fn retune(&mut self, params: &WanParams) -> Vec<String> {
        self.params = params.clone();
        tune::apply(&self.stream, params)
    }

    pub fn applied(&self) -> Applied {
        tune::read_back(&self.stream, &self.params)
    }

    pub fn params(&self) -> &WanParams {
        &self.params
    }

    /// The socket, what was read past the last frame (the peer may already be
    /// sending what follows the handshake), the largest frame accepted, and the
    /// tuning: for the striping driver, which takes over the connection.
    pub(super) fn into_parts(self) -> (TcpStream, BytesMut, usize, WanParams, Crypto) {
        (
            self.stream,
            self.rbuf,
            self.recv_max,
            self.params,
            self.crypto,
        )
    }
}

/// The WAN listener, tuned like the links it will accept (largest buffers of any
/// configured link, since window scaling is fixed at SYN time).
pub fn listen(addr: SocketAddr, params: &WanParams) -> io::Result<(TcpListener, Vec<String>)> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    let warnings = tune::apply(&sock, params);
    sock.bind(addr)?;
    Ok((sock.listen(256)?, warnings))
}

/// The next frame from `stream`, reading into `rbuf` as needed: the handshake's
/// receive (whole connection) and the reader task's (`TcpRx`) alike.
async fn recv_frame(
    stream: &TcpStream,
    rbuf: &mut BytesMut,
    max: usize,
    mut open: Option<&mut OpenRx>,
    quickack: bool,
) -> Result<Frame, RecvError> {
    loop {
        if let Some(f) = wire::decode(rbuf, max)? {
            return Ok(f);
        }
        match try_read_lane(stream, rbuf, open.as_deref_mut(), quickack) {
            Ok(0) => {
                // Mid-frame too: a connection cut under a session ends wherever
                // its bytes stopped; that is a loss, not a protocol violation.
                let cut = !rbuf.is_empty() || open.as_ref().is_some_and(|o| o.mid_message());
                return Err(if cut {
                    RecvError::ClosedMidFrame
                } else {
                    RecvError::Closed
                });
            }
            Ok(_) => {}
            Err(RecvError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                // poll_read_ready keeps one waker slot in the socket's state;
                // `readable()` would register and unregister a waiter per frame.
                std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads what the socket holds and appends the plaintext to `rbuf`: opened
/// from the lane's ciphertext if `open`, else as read. Ok(0) at end of stream;
/// otherwise the raw byte count (a read may complete no message yet).
/// `quickack` (`[wan] quickack`): after a read, TCP_QUICKACK sends the ACK the
/// kernel was holding and leaves delayed-ACK (ping-pong) mode; Linux may enter it
/// again on its own, so it is asked for after every read.
pub(crate) fn try_read_lane(
    stream: &TcpStream,
    rbuf: &mut BytesMut,
    open: Option<&mut OpenRx>,
    quickack: bool,
) -> Result<usize, RecvError> {
    let n = match open {
        None => {
            if rbuf.capacity() - rbuf.len() < READ_BLOCK / 2 {
                rbuf.reserve(READ_BLOCK);
            }
            try_read_drain(stream, rbuf)?
        }
        Some(open) => {
            if open.cbuf.capacity() - open.cbuf.len() < READ_BLOCK / 2 {
                open.cbuf.reserve(READ_BLOCK);
            }
            let n = try_read_drain(stream, &mut open.cbuf)?;
            open.open_all(rbuf)?;
            n
        }
    };
    if quickack && n > 0 {
        // Best effort: where refused, the lane keeps Linux's delayed ACKs.
        let _ = tune::set_quickack(stream);
    }
    Ok(n)
}

/// Writes what the socket takes now of `segs`, sealed if the lane has keys;
/// same contract as `sockio::try_write_segments`.
pub(crate) fn try_write_lane(
    stream: &TcpStream,
    seal: Option<&Mutex<SealTx>>,
    segs: &mut Vec<Bytes>,
) -> io::Result<bool> {
    match seal {
        Some(s) => seal::try_write_sealed(stream, &mut s.lock().unwrap(), segs),
        None => try_write_segments(stream, segs),
    }
}

/// Whether the lane has a sealed message on the wire in part (seal.rs).
pub(crate) fn lane_pending(seal: Option<&Mutex<SealTx>>) -> bool {
    seal.is_some_and(|s| s.lock().unwrap().has_pending())
}

/// Writes all of `segs` to the socket (sealed if the lane has keys), waiting
/// for room; on error what was not written stays in `segs`.
pub(crate) async fn write_all_lane(
    stream: &TcpStream,
    seal: Option<&Mutex<SealTx>>,
    segs: &mut Vec<Bytes>,
) -> io::Result<()> {
    while !try_write_lane(stream, seal, segs)? {
        stream.writable().await?;
    }
    Ok(())
}

impl WanConn for TcpConn {
    type Tx = TcpTx;
    type Rx = TcpRx;
    type Probe = FdProbe;

    async fn send_frame(&mut self, f: &Frame) -> io::Result<()> {
        let mut out = OutBuf::new();
        f.encode(&mut out);
        let mut segs = out.take_segments();
        match &mut self.crypto {
            Some((tx, _)) => loop {
                if seal::try_write_sealed(&self.stream, tx, &mut segs)? {
                    return Ok(());
                }
                self.stream.writable().await?;
            },
            None => write_all_lane(&self.stream, None, &mut segs).await,
        }
    }

    async fn recv_frame(&mut self) -> Result<Frame, RecvError> {
        let open = self.crypto.as_mut().map(|(_, rx)| rx);
        // The handshake: no quickack, nothing is clocked by it yet.
        recv_frame(&self.stream, &mut self.rbuf, self.recv_max, open, false).await
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn split(self) -> (TcpTx, TcpRx, FdProbe) {
        let fd = self.stream.as_fd().try_clone_to_owned().ok();
        let probe = FdProbe::new(
            1,
            fd.map(|fd| (fd, self.params.clone())).into_iter().collect(),
        );
        let stream = Arc::new(self.stream);
        let (seal, open) = match self.crypto {
            Some((tx, rx)) => (Some(Mutex::new(tx)), Some(rx)),
            None => (None, None),
        };
        (
            TcpTx {
                stream: stream.clone(),
                batch: tune::target_lowat(&self.params).min(WRITE_BATCH),
                seal,
            },
            TcpRx {
                stream,
                rbuf: self.rbuf,
                max: self.recv_max,
                open,
                quickack: self.params.quickack,
            },
            probe,
        )
    }
}

pub struct TcpTx {
    stream: Arc<TcpStream>,
    /// Bytes per write: what the socket takes at one wake-up (its TCP_NOTSENT_LOWAT,
    /// tune::target_lowat), up to WRITE_BATCH. A writer committed to more would
    /// wait for the link to drain it while holding the wire, and frames queued
    /// meanwhile (a small message behind a bulk flow) would wait with it: at 40
    /// Mb/s a 256 KiB batch is 51 ms.
    batch: usize,
    /// The lane's sealing state (None: insecure link).
    seal: Option<Mutex<SealTx>>,
}

impl WanTxNow for TcpTx {
    fn room(&self) -> usize {
        self.batch
    }

    fn try_send(&self, segs: &mut Vec<Bytes>) -> io::Result<bool> {
        try_write_lane(&self.stream, self.seal.as_ref(), segs)
    }

    fn try_send_slice(&self, buf: &[u8]) -> io::Result<usize> {
        if self.seal.is_some() {
            // Sealing copies anyway; only messages written whole count as sent.
            let mut segs = vec![Bytes::copy_from_slice(buf)];
            self.try_send(&mut segs)?;
            return Ok(buf.len() - segs.iter().map(|s| s.len()).sum::<usize>());
        }
        match self.stream.try_write(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            r => r,
        }
    }
}

impl WanTx for TcpTx {
    async fn send(&self, out: &mut OutBuf) -> io::Result<()> {
        write_all_lane(&self.stream, self.seal.as_ref(), &mut out.take_segments()).await
    }
}

pub struct TcpRx {
    stream: Arc<TcpStream>,
    rbuf: BytesMut,
    max: usize,
    open: Option<OpenRx>,
    quickack: bool,
}

impl WanRx for TcpRx {
    async fn recv(&mut self) -> Result<Frame, RecvError> {
        recv_frame(
            &self.stream,
            &mut self.rbuf,
            self.max,
            self.open.as_mut(),
            self.quickack,
        )
        .await
    }

    fn try_recv(&mut self) -> Result<Option<Frame>, RecvError> {
        Ok(wire::decode(&mut self.rbuf, self.max)?)
    }
}
