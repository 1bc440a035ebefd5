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
//!   beyond its credit is violating the protocol (the link closes its connection and ends the session).
//!
//! So every queue here is bounded by construction, with no unbounded channel: the
//! send queue by `per_flow_buffer` and the send budget, the receive queue by the
//! window we granted.
//!
//! Latency: a LAN read is handed to the link, which writes it to the WAN socket at
//! once from this task when the link is idle — a small one as a ready-made DATA
//! frame read in place behind room left for its prefix (`Carrier::send_data_now`),
//! a large one through the strategy (`Link::kick`). Received
//! data is written to the LAN socket by the link's reader itself when nothing of
//! the flow is waiting and no write is in progress (`Flow::flush_to_lan`); the
//! flow's own task (`wan_to_lan`) takes over only what the socket would not take
//! at once, and the FIN. One writer at a time (`RxState::writing`), and both take
//! from the head of the same queue, so bytes reach the node in order.
//!
//! The LAN socket is shared as `Arc<TcpStream>` (tokio's `try_*` calls need only
//! `&self`), and never through tokio's split halves, whose write half would send a
//! FIN when dropped — a reset must reach the node as a reset.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::lanproto::Status;
use crate::metrics::Metrics;
use crate::schedule::{Chunk, Lease, Release};
use crate::transfer::tcp::{try_read_drain, try_write_segments, write_all_segments};
use crate::wire::{data_prefix, FlowId, Frame, ResetReason, DATA_PREFIX};

/// Largest chunk the carrier's idle fast path writes itself (`Carrier::send_data_now`).
pub const FAST_MAX: usize = 16 * 1024;

/// What a flow's pumps need from the WAN link that carries it. The link
/// (link/mod.rs) implements it; keeping it a trait here lets dependencies run one
/// way: the link knows flows, flows know only this.
pub trait Carrier: Send + Sync + 'static {
    /// The peer site's name, for logs.
    fn peer(&self) -> &str;
    fn metrics(&self) -> &Metrics;
    /// Largest DATA payload worth reading for one chunk.
    fn max_data(&self) -> usize;
    /// Queues a link-level frame (CREDIT, RESET...), ahead of data.
    fn queue_control(&self, f: Frame);
    /// Queues a chunk for the scheduling strategy.
    fn push_chunk(&self, c: Chunk);
    /// The idle-link fast path: writes a ready-made DATA frame of `data_len`
    /// (at most FAST_MAX) bytes at once, or returns false (queue it instead).
    fn send_data_now(&self, frame: &[u8], data_len: usize) -> bool;
    /// Discards what a reset flow still had queued.
    fn drop_queued(&self, flow: FlowId);
    /// Removes a finished flow from the link's table.
    fn forget_flow(&self, flow: FlowId);
}

/// Where a flow we opened learns the far side's answer: (GSa1 status, initial credit).
pub type OpenReply = oneshot::Receiver<(u8, u32)>;

/// Largest single read from a LAN socket (and so the largest chunk): a bulk
/// sender's data crosses in few large frames, so syscalls and frames per GB stay
/// low. Strategies still split chunks when they share a busy link (fair's quantum).
pub const CHUNK_MAX: usize = 256 * 1024;
/// Most buffers gathered into one LAN write.
const MAX_IOV: usize = 64;
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
    /// Our node half-closed and its FIN was queued (for /status's `state`).
    fin_sent: bool,
}

struct RxState {
    queue: VecDeque<Bytes>,
    /// Bytes the peer may still send before it needs more credit.
    window_left: u64,
    fin: bool,
    /// A write to the LAN socket is in progress (the link reader's or the flow
    /// task's); the other one leaves the queue alone meanwhile.
    writing: bool,
    /// The LAN socket, once the link reader may write to it directly (after the
    /// GSo1 header went out, until the flow's relay ends).
    lan: Option<Arc<TcpStream>>,
    /// Bytes written to the LAN and not yet returned to the peer as credit.
    freed: usize,
    /// Credit goes back in batches of a quarter window: enough to keep the sender
    /// streaming, few enough CREDIT frames to be negligible on the link.
    credit_batch: usize,
    /// Buffers on their way to the LAN socket (kept to reuse the allocation).
    spare: Vec<Bytes>,
}

impl RxState {
    /// Takes up to MAX_IOV buffers from the head of the queue for one write.
    fn take_batch(&mut self, into: &mut Vec<Bytes>) {
        let n = self.queue.len().min(MAX_IOV);
        into.extend(self.queue.drain(..n));
        self.writing = true;
    }

    /// A write of the batch ended having written `written` bytes; what it did not
    /// write goes back to the head of the queue. Returns a credit grant to send, if
    /// one is due.
    fn end_write(&mut self, rest: &mut Vec<Bytes>, written: usize) -> Option<u32> {
        self.writing = false;
        for b in rest.drain(..).rev() {
            self.queue.push_front(b);
        }
        self.freed += written;
        if self.freed >= self.credit_batch {
            let grant = std::mem::take(&mut self.freed);
            self.window_left += grant as u64;
            Some(grant as u32)
        } else {
            None
        }
    }
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
    /// Who opened the flow, its original source and real destination, and
    /// when: identification for /status.
    pub origin: Origin,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    created: Instant,
    /// Application bytes read from the LAN socket.
    pub bytes_up: AtomicU64,
    /// Application bytes written to the LAN socket.
    pub bytes_down: AtomicU64,
    /// Application bytes put into WAN frames (counted by the scheduler's lease,
    /// where the bytes are already handled: no flow lookup on the link).
    pub bytes_out: AtomicU64,
    /// WAN frames (DATA, or BATCH holding some of its data) that carried its data.
    pub frames_out: AtomicU64,
}

/// Which gateway opened a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// One of our nodes asked for it (we sent the OPEN).
    Local,
    /// The peer gateway opened it (we connected to the destination).
    Remote,
}

/// What /status shows for one flow.
#[derive(Debug, serde::Serialize)]
pub struct FlowStatus {
    pub id: FlowId,
    pub peer: String,
    pub origin: Origin,
    pub src: String,
    pub dst: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// `queued_out` + `queued_in`.
    pub queued_bytes: u64,
    /// Read from the LAN, waiting in the scheduler.
    pub queued_out: u64,
    /// Received from the WAN, waiting for the LAN socket.
    pub queued_in: u64,
    pub frames_out: u64,
    pub credit: u64,
    pub state: &'static str,
    pub age_s: f64,
}

impl Release for Flow {
    fn release(&self, bytes: usize) {
        self.tx.lock().unwrap().queued -= bytes;
        self.send_pool.add_permits(bytes);
        self.tx_wake.notify_one();
    }

    fn sent(&self, bytes: usize, new_frame: bool) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        if new_frame {
            self.frames_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Flow {
    pub fn new(
        id: FlowId,
        send_pool: Arc<Semaphore>,
        per_flow_buffer: usize,
        origin: Origin,
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Arc<Self> {
        Arc::new(Flow {
            id,
            tx: Mutex::new(TxState {
                credit: 0,
                queued: 0,
                fin_sent: false,
            }),
            tx_wake: Notify::new(),
            rx: Mutex::new(RxState {
                queue: VecDeque::new(),
                window_left: 0,
                fin: false,
                writing: false,
                lan: None,
                freed: 0,
                credit_batch: 1,
                spare: Vec::new(),
            }),
            rx_wake: Notify::new(),
            abort: CancellationToken::new(),
            send_pool,
            rx_reservation: Mutex::new(None),
            open_reply: Mutex::new(None),
            per_flow_buffer,
            origin,
            src,
            dst,
            created: Instant::now(),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            frames_out: AtomicU64::new(0),
        })
    }

    /// A snapshot for /status (takes the flow's two locks briefly, one at a time).
    pub fn status(&self, peer: &str) -> FlowStatus {
        let (credit, queued_out, fin_out) = {
            let t = self.tx.lock().unwrap();
            (t.credit, t.queued as u64, t.fin_sent)
        };
        let (queued_in, fin_in) = {
            let rx = self.rx.lock().unwrap();
            let q: usize = rx.queue.iter().map(|b| b.len()).sum();
            (q as u64, rx.fin)
        };
        let state = if self.is_aborted() {
            "reset"
        } else if self.open_reply.lock().unwrap().is_some() {
            // Our OPEN is out, the far side's connect() has no outcome yet.
            "opening"
        } else {
            match (fin_out, fin_in) {
                (false, false) => "open",
                (true, false) => "half-closed-out",
                (false, true) => "half-closed-in",
                (true, true) => "closing",
            }
        };
        FlowStatus {
            id: self.id,
            peer: peer.to_string(),
            origin: self.origin,
            src: self.src.to_string(),
            dst: self.dst.to_string(),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            bytes_in: self.bytes_down.load(Ordering::Relaxed),
            queued_bytes: queued_out + queued_in,
            queued_out,
            queued_in,
            frames_out: self.frames_out.load(Ordering::Relaxed),
            credit,
            state,
            age_s: self.created.elapsed().as_secs_f64(),
        }
    }

    /// Installs the flow's receive window (reserved with `reserve_window`);
    /// returns its size, which is the initial credit granted to the peer.
    pub fn set_window(&self, permit: OwnedSemaphorePermit) -> u32 {
        let w = permit.num_permits() as u32;
        *self.rx_reservation.lock().unwrap() = Some(permit);
        let mut rx = self.rx.lock().unwrap();
        rx.window_left = w as u64;
        rx.credit_batch = (w as usize / 4).max(1);
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

    /// DATA arrived from the peer for this flow. It waits in the queue until the
    /// link reader calls `flush_to_lan` (after the burst of frames it is handling),
    /// so nobody is woken here.
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
        Ok(())
    }

    /// Writes what was delivered straight to the LAN socket from the calling
    /// thread (the link reader), as far as the socket takes it without waiting.
    /// The flow's task is woken only for the rest, or when it must act (FIN, no
    /// socket yet). Returns credit to the peer for what was written.
    pub fn flush_to_lan(&self, link: &impl Carrier) {
        let mut rx = self.rx.lock().unwrap();
        if rx.writing || rx.queue.is_empty() {
            // The flow's task is writing and will look at the queue again after.
            return;
        }
        let lan = match &rx.lan {
            Some(s) if !self.is_aborted() => s.clone(),
            _ => {
                drop(rx);
                self.rx_wake.notify_one();
                return;
            }
        };
        let mut batch = std::mem::take(&mut rx.spare);
        rx.take_batch(&mut batch);
        drop(rx);
        let total: usize = batch.iter().map(|b| b.len()).sum();
        // A write error is left for the flow's task, whose own write will hit it
        // and reset the flow.
        let complete = matches!(try_write_segments(&lan, &mut batch), Ok(true));
        let written = total - batch.iter().map(|b| b.len()).sum::<usize>();
        let mut rx = self.rx.lock().unwrap();
        let grant = rx.end_write(&mut batch, written);
        rx.spare = batch;
        let wake = !rx.queue.is_empty() || rx.fin;
        drop(rx);
        let m = link.metrics();
        m.lan_direct_writes.fetch_add(1, Ordering::Relaxed);
        if !complete {
            m.lan_direct_partial.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes_down.fetch_add(written as u64, Ordering::Relaxed);
        if wake {
            self.rx_wake.notify_one();
        }
        if let Some(grant) = grant {
            link.queue_control(Frame::Credit {
                flow: self.id,
                grant,
            });
        }
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
/// finished or the flow is reset. `origin` is what is left to write of the GSo1
/// header (remote side only), before anything else.
pub async fn relay<L: Carrier>(
    flow: Arc<Flow>,
    link: Arc<L>,
    s: Arc<TcpStream>,
    origin: Option<Bytes>,
) {
    tracing::debug!(peer = %link.peer(), flow = flow.id, "relay started");
    link.metrics().flows_active.fetch_add(1, Ordering::Relaxed);
    // While the relay runs, closing the LAN socket resets it (SO_LINGER 0), so
    // that if this process dies the node sees a reset, never a clean EOF that
    // would pass for the far end's close (docs/design/wan-sessions.md).
    let _ = socket2::SockRef::from(&*s).set_linger(Some(std::time::Duration::ZERO));
    // Two tasks rather than one join!: a joined future polls both directions
    // whenever either is woken, and polling the idle one (its Notify waits) costs
    // every relayed message of the other a few lock round trips.
    // The GSo1 header goes first, before anything can reset the flow, as the
    // node may only learn its peer from it.
    let started = start_down(&flow, &link, &s, origin).await;
    let down = tokio::spawn({
        let (flow, link, s) = (flow.clone(), link.clone(), s.clone());
        async move {
            match started {
                Ok(()) => wan_to_lan(&flow, &link, &s).await,
                Err(end) => end,
            }
        }
    });
    let up = lan_to_wan(&flow, &link, &s).await;
    // A panicked task (a bug) counts as a reset: the node must not hang.
    let down = down.await.unwrap_or(End::Reset);
    tracing::debug!(peer = %link.peer(), flow = flow.id, ?up, ?down, "relay ended");
    // The link reader must not write any more, and must not keep the socket open.
    flow.rx.lock().unwrap().lan = None;
    if up == End::Reset || down == End::Reset || flow.is_aborted() {
        // The close stays an RST: the node sees a reset where the far end reset.
        link.metrics().flows_reset.fetch_add(1, Ordering::Relaxed);
    } else {
        // Both directions ended cleanly: an orderly close.
        let _ = socket2::SockRef::from(&*s).set_linger(None);
    }
    drop(s);
    link.metrics().flows_active.fetch_sub(1, Ordering::Relaxed);
    link.forget_flow(flow.id);
}

/// Resets `flow` because of something on our side, and tells the peer.
fn reset_here<L: Carrier + ?Sized>(flow: &Flow, link: &L, reason: ResetReason) {
    if !flow.is_aborted() {
        flow.abort();
        link.drop_queued(flow.id);
        link.queue_control(Frame::Reset {
            flow: flow.id,
            reason,
        });
    }
}

/// Reads `buf` from the socket, waiting for data (or the flow's reset: None).
/// `aborted` is the flow's `abort.cancelled()`, made once per relay: waiting
/// with poll_read_ready and a long-lived abort future registers nothing new per
/// message (a fresh `readable()` and `cancelled()` each time would register and
/// unregister two waiters under two locks, for every message relayed).
async fn read_some(
    s: &TcpStream,
    buf: &mut impl BufMut,
    aborted: &mut Pin<&mut WaitForCancellationFuture<'_>>,
) -> Option<std::io::Result<usize>> {
    loop {
        match try_read_drain(s, buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            r => return Some(r),
        }
        let ready = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = s.poll_read_ready(cx) {
                return Poll::Ready(Some(r));
            }
            if aborted.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        match ready {
            None => return None,
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(())) => {}
        }
    }
}

async fn lan_to_wan<L: Carrier>(flow: &Arc<Flow>, link: &Arc<L>, s: &TcpStream) -> End {
    let mut buf = BytesMut::new();
    let aborted = flow.abort.cancelled();
    tokio::pin!(aborted);
    let chunk_max = CHUNK_MAX.min(link.max_data());
    loop {
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
                _ = &mut aborted => return End::Reset,
            }
        };
        let permit = match flow.send_pool.try_acquire_many(n as u32) {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return End::Reset,
            Err(TryAcquireError::NoPermits) => tokio::select! {
                p = flow.send_pool.acquire_many(n as u32) => match p {
                    Ok(p) => p,
                    Err(_) => return End::Reset,
                },
                _ = &mut aborted => return End::Reset,
            },
        };
        permit.forget();
        // Room for a DATA frame's prefix in front of the bytes: a small message on
        // an idle link then goes out as one contiguous send, header included,
        // without being copied (Carrier::send_data_now).
        buf.reserve(DATA_PREFIX + n);
        buf.put_bytes(0, DATA_PREFIX);
        let mut limited = (&mut buf).limit(n);
        let Some(res) = read_some(s, &mut limited, &mut aborted).await else {
            flow.send_pool.add_permits(n);
            return End::Reset;
        };
        match res {
            Ok(0) => {
                buf.clear();
                tracing::debug!(flow = flow.id, "LAN EOF, sending FIN");
                flow.send_pool.add_permits(n);
                flow.tx.lock().unwrap().fin_sent = true;
                link.push_chunk(Chunk::fin(flow.id));
                return End::Finished;
            }
            Ok(k) => {
                tracing::trace!(flow = flow.id, k, "LAN read");
                flow.tx.lock().unwrap().credit -= k as u64;
                flow.bytes_up.fetch_add(k as u64, Ordering::Relaxed);
                // k <= n <= chunk_max <= max_data: a small read always fits a frame.
                if k <= FAST_MAX {
                    buf[..DATA_PREFIX].copy_from_slice(&data_prefix(flow.id, k));
                    if link.send_data_now(&buf, k) {
                        // On the wire already: the bytes never waited here.
                        buf.clear();
                        flow.send_pool.add_permits(n);
                        Release::sent(&**flow, k, true);
                        continue;
                    }
                }
                flow.send_pool.add_permits(n - k);
                flow.tx.lock().unwrap().queued += k;
                buf.advance(DATA_PREFIX);
                let lease = Lease::new(flow.clone(), k);
                // Onto the WAN socket from here if the link is idle (a chunk too
                // large for the fast path), else queued for the strategy (link/send.rs).
                link.push_chunk(Chunk {
                    flow: flow.id,
                    data: buf.split().freeze(),
                    fin: false,
                    lease: Some(lease),
                });
            }
            Err(_) => {
                flow.send_pool.add_permits(n);
                reset_here(flow, &**link, ResetReason::LanReset);
                return End::Reset;
            }
        }
    }
}

/// Writes the GSo1 header (remote side only), then lets the link reader write
/// received data to the LAN socket directly. Err: how the WAN → LAN direction
/// ended already.
async fn start_down<L: Carrier>(
    flow: &Arc<Flow>,
    link: &Arc<L>,
    s: &Arc<TcpStream>,
    origin: Option<Bytes>,
) -> Result<(), End> {
    if let Some(h) = origin {
        let mut header = vec![h];
        let ok = tokio::select! {
            r = write_all_segments(s, &mut header) => r.is_ok(),
            _ = flow.abort.cancelled() => return Err(End::Reset),
        };
        if !ok {
            reset_here(flow, &**link, ResetReason::LanReset);
            return Err(End::Reset);
        }
    }
    flow.rx.lock().unwrap().lan = Some(s.clone());
    Ok(())
}

async fn wan_to_lan<L: Carrier>(flow: &Arc<Flow>, link: &Arc<L>, s: &Arc<TcpStream>) -> End {
    let mut batch: Vec<Bytes> = Vec::with_capacity(MAX_IOV);
    loop {
        let fin = loop {
            {
                let mut rx = flow.rx.lock().unwrap();
                if !rx.writing {
                    if !rx.queue.is_empty() {
                        rx.take_batch(&mut batch);
                        break false;
                    }
                    if rx.fin {
                        rx.lan = None;
                        break true;
                    }
                }
            }
            tokio::select! {
                _ = flow.rx_wake.notified() => {}
                _ = flow.abort.cancelled() => return End::Reset,
            }
        };
        if fin {
            tracing::debug!(flow = flow.id, "FIN received, shutting down LAN write side");
            // The peer's node half-closed: pass the half-close on, keep reading.
            let _ = socket2::SockRef::from(&**s).shutdown(std::net::Shutdown::Write);
            return End::Finished;
        }
        let total: usize = batch.iter().map(|b| b.len()).sum();
        let res = tokio::select! {
            r = write_all_segments(s, &mut batch) => r,
            _ = flow.abort.cancelled() => return End::Reset,
        };
        let written = total - batch.iter().map(|b| b.len()).sum::<usize>();
        let grant = flow.rx.lock().unwrap().end_write(&mut batch, written);
        flow.bytes_down.fetch_add(written as u64, Ordering::Relaxed);
        link.metrics()
            .lan_queued_writes
            .fetch_add(1, Ordering::Relaxed);
        if res.is_err() {
            reset_here(flow, &**link, ResetReason::LanReset);
            return End::Reset;
        }
        if let Some(grant) = grant {
            link.queue_control(Frame::Credit {
                flow: flow.id,
                grant,
            });
        }
    }
}

/// Maps the outcome of a remote OPEN to what the node gets in its GSa1 reply.
pub fn reply_status(code: u8) -> Status {
    Status::from_u8(code).unwrap_or(Status::Unreachable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(queue: &[&'static [u8]], credit_batch: usize) -> RxState {
        RxState {
            queue: queue.iter().map(|b| Bytes::from_static(b)).collect(),
            window_left: 0,
            fin: false,
            writing: false,
            lan: None,
            freed: 0,
            credit_batch,
            spare: Vec::new(),
        }
    }

    /// The link reader and the flow task share the queue: a write takes buffers
    /// from its head, what arrives meanwhile queues behind, and what the socket did
    /// not take goes back to the head — so the node sees the bytes in order.
    #[test]
    fn a_partial_write_puts_the_rest_back_in_front() {
        let mut s = rx(&[b"aaaa", b"bbbb", b"cccc"], 10);
        let mut batch = Vec::new();
        s.take_batch(&mut batch);
        assert!(s.writing && s.queue.is_empty() && batch.len() == 3);
        // "dddd" arrives during the write, which takes "aaaa" and "bb" only.
        s.queue.push_back(Bytes::from_static(b"dddd"));
        batch.remove(0);
        bytes::Buf::advance(&mut batch[0], 2);
        assert_eq!(s.end_write(&mut batch, 6), None, "6 bytes freed < 10");
        assert!(!s.writing && batch.is_empty());
        let rest: Vec<u8> = s.queue.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(rest, b"bbccccdddd");
        // The next write completes; credit goes back once a batch's worth is freed.
        s.take_batch(&mut batch);
        batch.clear();
        assert_eq!(s.end_write(&mut batch, 10), Some(16));
        assert_eq!((s.freed, s.window_left), (0, 16));
    }

    #[test]
    fn a_write_takes_at_most_max_iov_buffers() {
        let mut s = rx(&[&b"x"[..]; 100], 1);
        let mut batch = Vec::new();
        s.take_batch(&mut batch);
        assert_eq!((batch.len(), s.queue.len()), (MAX_IOV, 100 - MAX_IOV));
    }
}
