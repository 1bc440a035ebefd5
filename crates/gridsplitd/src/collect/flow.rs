//! One flow: one relayed connection, as seen by one gateway — a LAN socket on this
//! side, a flow id on a WAN link, and the two pumps between them.
//!
//! Flow control is per flow and credit-based, so a slow or stalled receiver only
//! ever stops its own flow:
//!
//! * LAN → WAN: we read from the LAN socket only as much as the peer has granted
//!   us credit for (bytes it can still buffer for this flow), as our own per-flow
//!   queue has room for, and as the gateway-wide send budget allows. When any of
//!   these is exhausted we simply stop reading, and TCP pushes back on the node.
//! * WAN → LAN: we granted the peer a window (reserved from the gateway-wide
//!   receive budget when the flow opened); arriving bytes wait in `rx` until the
//!   LAN socket takes them, and credit goes back as they drain. A peer sending
//!   beyond its credit is violating the protocol (link.rs closes the link).
//!
//! So every queue here is bounded by construction, with no unbounded channel: the
//! send queue by `per_flow_buffer` and the send budget, the receive queue by the
//! window we granted.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::lanproto::{Status, ORIGIN_LEN};
use crate::link::Link;
use crate::schedule::{Chunk, Lease, Release};
use crate::wire::{FlowId, Frame, ResetReason};

/// Where a flow we opened learns the far side's answer: (GSa1 status, initial credit).
pub type OpenReply = oneshot::Receiver<(u8, u32)>;

/// Largest single read from a LAN socket (and so the largest chunk).
pub const CHUNK_MAX: usize = 64 * 1024;
/// Smallest receive window a flow is opened with when the receive budget is tight.
pub const MIN_WINDOW: usize = 64 * 1024;

/// Why a flow's LAN data arrived faster than the credit we granted.
#[derive(Debug)]
pub struct CreditViolation {
    pub flow: FlowId,
    pub len: usize,
    pub window_left: u64,
}

struct TxState {
    /// Bytes the peer still accepts on this flow.
    credit: u64,
    /// Bytes read from the LAN and not yet taken by the scheduler.
    queued: usize,
}

struct RxState {
    queue: VecDeque<Bytes>,
    /// Bytes the peer may still send before it needs more credit.
    window_left: u64,
    fin: bool,
}

pub struct Flow {
    pub id: FlowId,
    tx: Mutex<TxState>,
    tx_wake: Notify,
    rx: Mutex<RxState>,
    rx_wake: Notify,
    /// Cancelled when the flow is reset (either side, or the link died).
    abort: CancellationToken,
    send_pool: Arc<Semaphore>,
    /// The receive window's share of the gateway-wide receive budget, returned
    /// when the flow is gone.
    rx_reservation: Mutex<Option<OwnedSemaphorePermit>>,
    open_reply: Mutex<Option<oneshot::Sender<(u8, u32)>>>,
    per_flow_buffer: usize,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

impl Release for Flow {
    fn release(&self, bytes: usize) {
        self.tx.lock().unwrap().queued -= bytes;
        self.send_pool.add_permits(bytes);
        self.tx_wake.notify_one();
    }
}

impl Flow {
    pub fn new(id: FlowId, send_pool: Arc<Semaphore>, per_flow_buffer: usize) -> Arc<Self> {
        Arc::new(Flow {
            id,
            tx: Mutex::new(TxState {
                credit: 0,
                queued: 0,
            }),
            tx_wake: Notify::new(),
            rx: Mutex::new(RxState {
                queue: VecDeque::new(),
                window_left: 0,
                fin: false,
            }),
            rx_wake: Notify::new(),
            abort: CancellationToken::new(),
            send_pool,
            rx_reservation: Mutex::new(None),
            open_reply: Mutex::new(None),
            per_flow_buffer,
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
        })
    }

    /// Installs the flow's receive window (reserved with `reserve_window`);
    /// returns its size, which is the initial credit granted to the peer.
    pub fn set_window(&self, permit: OwnedSemaphorePermit) -> u32 {
        let w = permit.num_permits() as u32;
        *self.rx_reservation.lock().unwrap() = Some(permit);
        self.rx.lock().unwrap().window_left = w as u64;
        w
    }

    pub fn expect_reply(&self) -> OpenReply {
        let (tx, rx) = oneshot::channel();
        *self.open_reply.lock().unwrap() = Some(tx);
        rx
    }

    /// OPEN_REPLY arrived. Returns false if none was expected (a protocol error).
    pub fn deliver_reply(&self, status: u8, window: u32) -> bool {
        match self.open_reply.lock().unwrap().take() {
            Some(tx) => {
                let _ = tx.send((status, window));
                true
            }
            None => false,
        }
    }

    pub fn add_credit(&self, n: u32) {
        self.tx.lock().unwrap().credit += n as u64;
        self.tx_wake.notify_one();
    }

    /// DATA arrived from the peer for this flow.
    pub fn deliver(&self, data: Bytes) -> Result<(), CreditViolation> {
        let mut rx = self.rx.lock().unwrap();
        let len = data.len();
        if len as u64 > rx.window_left || rx.fin {
            return Err(CreditViolation {
                flow: self.id,
                len,
                window_left: rx.window_left,
            });
        }
        rx.window_left -= len as u64;
        if len > 0 {
            rx.queue.push_back(data);
        }
        drop(rx);
        self.rx_wake.notify_one();
        Ok(())
    }

    pub fn deliver_fin(&self) {
        self.rx.lock().unwrap().fin = true;
        self.rx_wake.notify_one();
    }

    /// Completes when the flow is reset.
    pub async fn aborted(&self) {
        self.abort.cancelled().await
    }

    pub fn is_aborted(&self) -> bool {
        self.abort.is_cancelled()
    }

    /// Resets the flow locally. The caller tells the peer (or not, if the link is gone).
    pub fn abort(&self) {
        self.abort.cancel();
        // A pending OPEN waiter learns the flow is gone by its sender being dropped.
        self.open_reply.lock().unwrap().take();
    }
}

/// Reserves a flow's receive window from the gateway-wide receive budget: a full
/// `per_flow_buffer` if available, else what is left (at least MIN_WINDOW, waiting
/// for it if need be): late flows get smaller windows rather than none. None if
/// the gateway is stopping.
pub async fn reserve_window(
    pool: &Arc<Semaphore>,
    per_flow_buffer: usize,
) -> Option<OwnedSemaphorePermit> {
    let floor = MIN_WINDOW.min(per_flow_buffer);
    let want = per_flow_buffer.min(pool.available_permits().max(floor));
    match pool.clone().try_acquire_many_owned(want as u32) {
        Ok(p) => Some(p),
        Err(_) => pool.clone().acquire_many_owned(floor as u32).await.ok(),
    }
}

/// How one direction of a relay ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Clean end of stream (FIN sent, or FIN received and written through).
    Finished,
    /// The flow was reset (by us or the peer, or the link died).
    Reset,
}

/// Relays between the LAN socket and the WAN link until both directions have
/// finished or the flow is reset. `origin` is the GSo1 header to write to the LAN
/// socket first (remote side only).
pub async fn relay(
    flow: Arc<Flow>,
    link: Arc<Link>,
    stream: TcpStream,
    origin: Option<[u8; ORIGIN_LEN]>,
) {
    tracing::debug!(peer = %link.peer, flow = flow.id, "relay started");
    let (r, w) = stream.into_split();
    link.metrics().flows_active.fetch_add(1, Ordering::Relaxed);
    let ((r, up), (w, down)) = tokio::join!(
        lan_to_wan(&flow, &link, r),
        wan_to_lan(&flow, &link, w, origin)
    );
    tracing::debug!(peer = %link.peer, flow = flow.id, ?up, ?down, "relay ended");
    if up == End::Reset || down == End::Reset || flow.is_aborted() {
        // Make the close an RST, so the node sees a reset where the far end reset.
        if let Ok(s) = r.reunite(w) {
            let _ = socket2::SockRef::from(&s).set_linger(Some(std::time::Duration::ZERO));
        }
        link.metrics().flows_reset.fetch_add(1, Ordering::Relaxed);
    }
    link.metrics().flows_active.fetch_sub(1, Ordering::Relaxed);
    link.forget_flow(flow.id);
}

/// Resets `flow` because of something on our side, and tells the peer.
fn reset_here(flow: &Flow, link: &Link, reason: ResetReason) {
    if !flow.is_aborted() {
        flow.abort();
        link.drop_queued(flow.id);
        link.queue_control(Frame::Reset {
            flow: flow.id,
            reason,
        });
    }
}

async fn lan_to_wan(
    flow: &Arc<Flow>,
    link: &Arc<Link>,
    mut r: OwnedReadHalf,
) -> (OwnedReadHalf, End) {
    let mut buf = BytesMut::new();
    let chunk_max = CHUNK_MAX.min(link.max_data());
    let end = loop {
        // Wait until the peer, our queue and the shared budget all have room.
        let n = loop {
            let room = {
                let t = flow.tx.lock().unwrap();
                (t.credit as usize).min(flow.per_flow_buffer.saturating_sub(t.queued))
            };
            if room > 0 {
                break room.min(chunk_max);
            }
            tokio::select! {
                _ = flow.tx_wake.notified() => {}
                _ = flow.abort.cancelled() => return (r, End::Reset),
            }
        };
        let permit = tokio::select! {
            p = flow.send_pool.acquire_many(n as u32) => match p {
                Ok(p) => p,
                Err(_) => return (r, End::Reset),
            },
            _ = flow.abort.cancelled() => return (r, End::Reset),
        };
        permit.forget();
        buf.reserve(n);
        let mut limited = (&mut buf).limit(n);
        let res = tokio::select! {
            res = r.read_buf(&mut limited) => res,
            _ = flow.abort.cancelled() => {
                flow.send_pool.add_permits(n);
                return (r, End::Reset);
            }
        };
        match res {
            Ok(0) => {
                tracing::debug!(flow = flow.id, "LAN EOF, sending FIN");
                flow.send_pool.add_permits(n);
                link.push_chunk(Chunk::fin(flow.id));
                break End::Finished;
            }
            Ok(k) => {
                tracing::trace!(flow = flow.id, k, "LAN read");
                flow.send_pool.add_permits(n - k);
                {
                    let mut t = flow.tx.lock().unwrap();
                    t.credit -= k as u64;
                    t.queued += k;
                }
                flow.bytes_up.fetch_add(k as u64, Ordering::Relaxed);
                let lease = Lease::new(flow.clone(), k);
                link.push_chunk(Chunk {
                    flow: flow.id,
                    data: buf.split().freeze(),
                    fin: false,
                    lease: Some(lease),
                });
            }
            Err(_) => {
                flow.send_pool.add_permits(n);
                reset_here(flow, link, ResetReason::LanReset);
                break End::Reset;
            }
        }
    };
    (r, end)
}

async fn wan_to_lan(
    flow: &Arc<Flow>,
    link: &Arc<Link>,
    mut w: OwnedWriteHalf,
    origin: Option<[u8; ORIGIN_LEN]>,
) -> (OwnedWriteHalf, End) {
    if let Some(h) = origin {
        let ok = tokio::select! {
            r = w.write_all(&h) => r.is_ok(),
            _ = flow.abort.cancelled() => return (w, End::Reset),
        };
        if !ok {
            reset_here(flow, link, ResetReason::LanReset);
            return (w, End::Reset);
        }
    }
    // Credit goes back in batches of a quarter window: enough to keep the sender
    // streaming, few enough CREDIT frames to be negligible on the link.
    let window = flow
        .rx_reservation
        .lock()
        .unwrap()
        .as_ref()
        .map_or(0, |p| p.num_permits());
    let threshold = (window / 4).max(1);
    let mut freed = 0usize;
    let mut batch: Vec<Bytes> = Vec::with_capacity(16);
    loop {
        let fin = loop {
            {
                let mut rx = flow.rx.lock().unwrap();
                if !rx.queue.is_empty() {
                    let n = rx.queue.len().min(64);
                    batch.extend(rx.queue.drain(..n));
                    break false;
                }
                if rx.fin {
                    break true;
                }
            }
            tokio::select! {
                _ = flow.rx_wake.notified() => {}
                _ = flow.abort.cancelled() => return (w, End::Reset),
            }
        };
        if fin {
            tracing::debug!(flow = flow.id, "FIN received, shutting down LAN write side");
            // The peer's node half-closed: pass the half-close on, keep reading.
            let _ = w.shutdown().await;
            return (w, End::Finished);
        }
        let n: usize = batch.iter().map(|b| b.len()).sum();
        let res = tokio::select! {
            r = write_all_vectored(&mut w, &mut batch) => r,
            _ = flow.abort.cancelled() => return (w, End::Reset),
        };
        batch.clear();
        if res.is_err() {
            reset_here(flow, link, ResetReason::LanReset);
            return (w, End::Reset);
        }
        flow.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
        freed += n;
        if freed >= threshold {
            flow.rx.lock().unwrap().window_left += freed as u64;
            link.queue_control(Frame::Credit {
                flow: flow.id,
                grant: freed as u32,
            });
            freed = 0;
        }
    }
}

async fn write_all_vectored(w: &mut OwnedWriteHalf, bufs: &mut [Bytes]) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    while first < bufs.len() {
        let iov: Vec<IoSlice<'_>> = bufs[first..].iter().map(|b| IoSlice::new(b)).collect();
        let mut n = w.write_vectored(&iov).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while first < bufs.len() && n >= bufs[first].len() {
            n -= bufs[first].len();
            first += 1;
        }
        if n > 0 {
            bufs[first].advance(n);
        }
    }
    Ok(())
}

/// Maps the outcome of a remote OPEN to what the node gets in its GSa1 reply.
pub fn reply_status(code: u8) -> Status {
    Status::from_u8(code).unwrap_or(Status::Unreachable)
}
