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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

mod relay;

pub use relay::relay;

use crate::lanproto::Status;
use crate::metrics::Metrics;
use crate::schedule::{Chunk, Release};
use crate::sockio::try_write_segments;
use crate::wire::{FlowId, Frame};

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
/// A flow's receive window when it opens. Small, so that thousands of flows,
/// most of them idle, fit the receive budget (`[limits] total_buffer`): a
/// window is credit granted to the peer and cannot be taken back. A flow whose
/// sender the window holds back grows it (`Flow::end_write`), up to
/// `per_flow_buffer`, within one round trip per step.
pub const INITIAL_WINDOW: usize = 16 * 1024;
/// The window a flow opens with once less than the reserve is free.
pub const MIN_WINDOW: usize = 4 * 1024;
/// Windows grow only while more than 1/RESERVE_SHARE of the receive budget is
/// free, so new flows can always open; below it, windows above INITIAL_WINDOW
/// give back what drains, so a busy gateway shares its budget.
const RESERVE_SHARE: usize = 8;

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
    /// The window: bytes of the receive budget this flow holds.
    window: usize,
    /// Bytes received since the window last grew (or since the flow opened).
    /// Once a whole window's worth has arrived the flow is moving bulk data,
    /// and a larger window lets it move more per round trip. (Waiting for the
    /// peer to run out of credit does not work as a test: credit for the
    /// window's first bytes goes back before its last bytes arrive.)
    moved: u64,
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

/// Application bytes moved through a flow's LAN socket in one direction. The
/// LAN controls (collect/incast.rs, collect/egress.rs) each watch the sockets
/// they divide through a `Moves` of their own, which lists each socket that
/// moved bytes, once until the control has looked at it: a tick then visits
/// the sockets that moved, not every socket (docs/design/lan-legs.md, "Idle
/// flows at scale").
#[derive(Debug, Default)]
pub struct LanBytes {
    bytes: AtomicU64,
    watch: OnceLock<(Arc<Moves>, u64)>,
    /// Listed in the watcher's `Moves` and not looked at since.
    listed: AtomicBool,
}

impl LanBytes {
    pub fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        if let Some((moves, id)) = self.watch.get() {
            // Already listed (the common case while it moves): a load, no
            // read-modify-write on the relay's path. A `looked` between the
            // two only means the watcher reads the socket after this move.
            if !self.listed.load(Ordering::Acquire) && !self.listed.swap(true, Ordering::AcqRel) {
                moves.listed.lock().unwrap().push(*id);
            }
        }
    }

    pub fn get(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Lists this socket in `moves`, as `id`, whenever it moves bytes (set
    /// once, by the LAN control that registers it; a second call is ignored).
    pub fn watch(&self, moves: &Arc<Moves>, id: u64) {
        let _ = self.watch.set((moves.clone(), id));
    }

    /// The watcher is looking at the socket now: its next move lists it again.
    /// Called before reading the socket, so that no move goes unlisted.
    pub fn looked(&self) {
        self.listed.store(false, Ordering::Release);
    }
}

/// The sockets a LAN control watches that moved bytes since it last took them.
#[derive(Debug, Default)]
pub struct Moves {
    listed: Mutex<Vec<u64>>,
}

impl Moves {
    /// The ids of the sockets that moved since the last call, each once.
    pub fn take(&self) -> Vec<u64> {
        std::mem::take(&mut *self.listed.lock().unwrap())
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
    /// Free receive budget below which windows stop growing and shrink.
    rx_reserve: usize,
    /// Who opened the flow, its original source and real destination, and
    /// when: identification for /status.
    pub origin: Origin,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    created: Instant,
    /// Application bytes read from the LAN socket.
    pub bytes_up: Arc<LanBytes>,
    /// Application bytes written to the LAN socket.
    pub bytes_down: Arc<LanBytes>,
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
    /// Receive window: what this gateway lets the peer send on the flow
    /// before it returns credit (grows with use, flow/mod.rs).
    pub window: u64,
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
        limits: &crate::config::Limits,
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
                window: 0,
                moved: 0,
                spare: Vec::new(),
            }),
            rx_wake: Notify::new(),
            abort: CancellationToken::new(),
            send_pool,
            rx_reservation: Mutex::new(None),
            open_reply: Mutex::new(None),
            per_flow_buffer: limits.per_flow_buffer,
            rx_reserve: reserve(limits),
            origin,
            src,
            dst,
            created: Instant::now(),
            bytes_up: Arc::default(),
            bytes_down: Arc::default(),
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
        let (queued_in, fin_in, window) = {
            let rx = self.rx.lock().unwrap();
            let q: usize = rx.queue.iter().map(|b| b.len()).sum();
            (q as u64, rx.fin, rx.window as u64)
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
            bytes_in: self.bytes_down.get(),
            queued_bytes: queued_out + queued_in,
            queued_out,
            queued_in,
            frames_out: self.frames_out.load(Ordering::Relaxed),
            credit,
            window,
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
        rx.window = w as usize;
        rx.credit_batch = (w as usize / 4).max(1);
        w
    }

    /// Ends a LAN write (`RxState::end_write`) and sizes the credit that goes
    /// back: a window through which a whole window's worth has moved grows
    /// (×4, up to `per_flow_buffer`) while the receive budget has more than its
    /// reserve free; under pressure a window above INITIAL_WINDOW shrinks by
    /// withholding what drained.
    fn end_write(&self, rx: &mut RxState, rest: &mut Vec<Bytes>, written: usize) -> Option<u32> {
        let mut grant = rx.end_write(rest, written)? as usize;
        let cycled = rx.moved >= rx.window as u64;
        let mut res = self.rx_reservation.lock().unwrap();
        let Some(permit) = res.as_mut() else {
            return Some(grant as u32);
        };
        let pool = permit.semaphore().clone();
        let free = pool.available_permits();
        if cycled && rx.window < self.per_flow_buffer && free > self.rx_reserve {
            rx.moved = 0;
            let extra = (3 * rx.window)
                .min(self.per_flow_buffer - rx.window)
                .min(free - self.rx_reserve);
            if let Ok(p) = pool.try_acquire_many_owned(extra as u32) {
                permit.merge(p);
                rx.window += extra;
                rx.window_left += extra as u64;
                grant += extra;
            }
        } else if free < self.rx_reserve && rx.window > INITIAL_WINDOW {
            let give = grant.min(rx.window - INITIAL_WINDOW);
            if let Some(p) = permit.split(give) {
                drop(p);
                rx.window -= give;
                rx.window_left -= give as u64;
                grant -= give;
            }
        }
        rx.credit_batch = (rx.window / 4).max(1);
        (grant > 0).then_some(grant as u32)
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
        // Saturating: the peer's grants are bounded by the protocol, not trusted to be.
        let mut tx = self.tx.lock().unwrap();
        tx.credit = tx.credit.saturating_add(n as u64);
        drop(tx);
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
        rx.moved += len as u64;
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
        let grant = self.end_write(&mut rx, &mut batch, written);
        rx.spare = batch;
        let wake = !rx.queue.is_empty() || rx.fin;
        drop(rx);
        let m = link.metrics();
        m.lan_direct_writes.fetch_add(1, Ordering::Relaxed);
        if !complete {
            m.lan_direct_partial.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes_down.add(written as u64);
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

/// Reserves a new flow's receive window from the gateway-wide receive budget:
/// INITIAL_WINDOW (or `per_flow_buffer`, if smaller) while more than the
/// reserve is free, else MIN_WINDOW, waiting for it to be freed if need be.
/// With the default limits that is about 11,000 flows. None if the gateway is
/// stopping; the caller bounds the wait.
pub async fn reserve_window(
    pool: &Arc<Semaphore>,
    limits: &crate::config::Limits,
) -> Option<OwnedSemaphorePermit> {
    let first = INITIAL_WINDOW.min(limits.per_flow_buffer);
    let floor = MIN_WINDOW.min(first);
    let want = if pool.available_permits() > reserve(limits) {
        first
    } else {
        floor
    };
    match pool.clone().try_acquire_many_owned(want as u32) {
        Ok(p) => Some(p),
        Err(_) => pool.clone().acquire_many_owned(floor as u32).await.ok(),
    }
}

/// Free receive budget below which windows stop growing, shrink as they drain,
/// and new flows open with MIN_WINDOW.
fn reserve(limits: &crate::config::Limits) -> usize {
    limits.total_buffer / 2 / RESERVE_SHARE
}

/// Maps the outcome of a remote OPEN to what the node gets in its GSa1 reply.
pub fn reply_status(code: u8) -> Status {
    Status::from_u8(code).unwrap_or(Status::Unreachable)
}

#[cfg(test)]
mod tests;
