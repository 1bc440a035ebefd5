//! One WAN link to a peer site: establishing it (dial or accept, then mutual
//! authentication), keeping it (reconnect with backoff, keepalive), and driving it:
//! frames are taken from the control queue and the scheduling strategy whenever
//! the driver has room; the reader task demultiplexes received frames to flows.
//!
//! Who writes to the WAN socket: one writer at a time holds the wire
//! (`SendQueue::wire_busy`). When a frame is queued and nobody holds it — the link
//! is idle — the caller itself (a flow's LAN reader, or the link reader sending a
//! CREDIT) takes the wire, lets the control queue and the strategy fill one write
//! as the writer task would, and writes without waiting. Only what the socket does
//! not take at once goes to the writer task. So a message on an idle link costs no
//! task wake-up, and whenever frames pile up (the link busy) they wait in the
//! strategy, which decides what goes next, exactly as before. Symmetrically, the
//! reader handles every frame already received, then writes each touched flow's
//! data straight to its LAN socket (collect/flow.rs, `Flow::flush_to_lan`).
//!
//! The link is also where frames are judged against the link's state. Anything the
//! codec accepts but that makes no sense here — DATA beyond credit, a frame for a
//! flow id that was never opened, a second HELLO — is a protocol violation: the
//! link is closed with one log line and a counter, its flows (and only its flows)
//! are reset, and the dialing side reconnects. Frames for flows that *were* open
//! but have since closed are expected (the two gateways close concurrently) and are
//! dropped quietly.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::auth::{self, AuthError};
use crate::collect;
use crate::collect::flow::{CreditViolation, Flow, FlowStatus, OpenReply, Origin};
use crate::metrics::Metrics;
use crate::schedule::{self, Chunk, Strategy};
use crate::transfer::tcp::TcpConn;
use crate::transfer::{RecvError, WanConn, WanProbe, WanRx, WanTx, WanTxNow};
use crate::tune::Applied;
use crate::wire::{self, FlowId, Frame, OutBuf};
use crate::Shared;

/// Largest chunk `Link::send_data_now` writes itself (see there).
pub const FAST_MAX: usize = 16 * 1024;
/// Silent keepalive periods after which a link is declared dead.
const DEAD_AFTER_PERIODS: u32 = 5;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// We connected (our site name sorts first); we allocate odd flow ids.
    Dialer,
    /// The peer connected; we allocate even flow ids.
    Acceptor,
}

#[derive(Debug, Error)]
pub enum LinkError {
    #[error("{0}")]
    Recv(#[from] RecvError),
    #[error("send failed: {0}")]
    Send(std::io::Error),
    #[error("protocol violation: {0}")]
    Violation(String),
    #[error("peer silent for {0:?}")]
    Silent(Duration),
    #[error("replaced by a newer link")]
    Superseded,
    #[error("gateway stopping")]
    Stopping,
}

impl From<CreditViolation> for LinkError {
    fn from(v: CreditViolation) -> Self {
        LinkError::Violation(format!(
            "flow {} sent {} bytes with only {} bytes of credit",
            v.flow, v.len, v.window_left
        ))
    }
}

struct SendQueue {
    /// Link-level frames (OPEN, OPEN_REPLY, CREDIT, RESET, PING/PONG). They go
    /// before data. At most a handful per flow are ever outstanding (one OPEN or
    /// OPEN_REPLY, one RESET, and CREDIT only after the peer used credit), so this
    /// queue is bounded by the number of flows.
    control: VecDeque<Frame>,
    strategy: Box<dyn Strategy>,
    /// Someone (the writer task or a direct sender) is writing to the transport;
    /// everybody else queues.
    wire_busy: bool,
    /// Bytes a direct sender could not write without waiting; they go out first,
    /// through the writer task (they are parts of frames already on the wire).
    leftover: Vec<Bytes>,
    /// The direct senders' encode buffer, kept so its allocation is reused.
    spare: Option<OutBuf>,
}

impl SendQueue {
    fn has_work(&self) -> bool {
        !self.leftover.is_empty() || !self.control.is_empty() || !self.strategy.is_empty()
    }

    /// Fills `out` with what goes next, up to `room` bytes: unsent leftovers,
    /// control frames, then whatever the strategy picks.
    fn fill(&mut self, out: &mut OutBuf, room: usize, max_frame: usize) -> Filled {
        let mut n = Filled::default();
        out.push_raw(self.leftover.drain(..));
        while out.len() < room {
            let Some(f) = self.control.pop_front() else {
                break;
            };
            f.encode(out);
            n.frames += 1;
        }
        while out.len() < room {
            let Some(f) = self.strategy.next_frame(max_frame) else {
                break;
            };
            n.data += f.data_bytes() as u64;
            if let Frame::Batch(entries) = &f {
                n.batches += 1;
                n.packed += entries.len() as u64;
            }
            f.encode(out);
            n.frames += 1;
        }
        n
    }
}

/// What one `fill` put in a write, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Filled {
    frames: u64,
    /// Application bytes.
    data: u64,
    /// BATCH frames, and the chunks they packed together.
    batches: u64,
    packed: u64,
}

struct FlowTable {
    flows: HashMap<FlowId, Arc<Flow>>,
    next_local: FlowId,
    /// Highest flow id the peer has opened (ids only grow).
    peer_max: FlowId,
}

/// Live state of one authenticated link.
pub struct Link {
    pub peer: String,
    pub role: Role,
    pub remote: SocketAddr,
    pub since: Instant,
    shared: Arc<Shared>,
    max_frame: usize,
    send: Mutex<SendQueue>,
    /// The transport's sending half, for direct sends (the writer task has its own handle).
    tx: Arc<dyn WanTxNow>,
    wake: Notify,
    table: Mutex<FlowTable>,
    closed: CancellationToken,
    probe: Box<dyn WanProbe>,
    pub frames_out: AtomicU64,
    /// Frames received; the keepalive also reads it to tell a silent peer.
    pub frames_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub bytes_in: AtomicU64,
    /// BATCH frames sent, and the chunks they carried (the aggregate strategy's
    /// packing at work).
    pub batch_frames: AtomicU64,
    pub chunks_aggregated: AtomicU64,
}

/// What /status shows for one link.
#[derive(serde::Serialize)]
pub struct LinkStatus {
    pub peer: String,
    pub role: Role,
    pub remote: String,
    pub up_seconds: f64,
    pub flows: usize,
    pub queued_bytes: usize,
    pub strategy: &'static str,
    pub streams: usize,
    pub max_frame: usize,
    pub frames_out: u64,
    pub frames_in: u64,
    pub wan_bytes_out: u64,
    pub wan_bytes_in: u64,
    pub batch_frames: u64,
    pub chunks_aggregated: u64,
    pub applied: Vec<Applied>,
    pub tcp_info: Vec<crate::tune::TcpInfo>,
}

impl Link {
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Largest DATA payload worth reading for one chunk on this link.
    pub fn max_data(&self) -> usize {
        crate::schedule::data_room(self.max_frame)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    pub fn status(&self) -> LinkStatus {
        let flows = self.table.lock().unwrap().flows.len();
        let (queued, strategy) = {
            let q = self.send.lock().unwrap();
            (q.strategy.queued_bytes(), q.strategy.name())
        };
        LinkStatus {
            peer: self.peer.clone(),
            role: self.role,
            remote: self.remote.to_string(),
            up_seconds: self.since.elapsed().as_secs_f64(),
            flows,
            queued_bytes: queued,
            strategy,
            streams: self.probe.streams(),
            max_frame: self.max_frame,
            frames_out: self.frames_out.load(Ordering::Relaxed),
            frames_in: self.frames_in.load(Ordering::Relaxed),
            wan_bytes_out: self.bytes_out.load(Ordering::Relaxed),
            wan_bytes_in: self.bytes_in.load(Ordering::Relaxed),
            batch_frames: self.batch_frames.load(Ordering::Relaxed),
            chunks_aggregated: self.chunks_aggregated.load(Ordering::Relaxed),
            applied: self.probe.applied(),
            tcp_info: self.probe.tcp_info(),
        }
    }

    /// Snapshots of the link's flows in id order, at most `limit` of them, and
    /// how many there are in all. Only the table lock is held while the flows
    /// are collected; each flow's state is read after it is released.
    pub fn flow_statuses(&self, limit: usize) -> (Vec<FlowStatus>, usize) {
        let (mut flows, total) = {
            let t = self.table.lock().unwrap();
            let mut ids: Vec<FlowId> = t.flows.keys().copied().collect();
            ids.sort_unstable();
            let flows: Vec<Arc<Flow>> = ids
                .iter()
                .take(limit)
                .filter_map(|id| t.flows.get(id).cloned())
                .collect();
            (flows, ids.len())
        };
        let v = flows.drain(..).map(|f| f.status(&self.peer)).collect();
        (v, total)
    }

    pub fn queue_control(&self, f: Frame) {
        let mut q = self.send.lock().unwrap();
        q.control.push_back(f);
        self.kick(q);
    }

    pub fn push_chunk(&self, c: Chunk) {
        let mut q = self.send.lock().unwrap();
        q.strategy.push(c);
        self.kick(q);
    }

    /// Something was just queued. If the wire is free, send what is queued now from
    /// this thread, without waiting; otherwise (or for what the socket won't take
    /// at once) wake the writer task.
    fn kick(&self, mut q: MutexGuard<'_, SendQueue>) {
        if q.wire_busy || !q.leftover.is_empty() || self.is_closed() {
            drop(q);
            self.wake.notify_one();
            return;
        }
        q.wire_busy = true;
        let mut out = q.spare.take().unwrap_or_default();
        let filled = q.fill(&mut out, self.tx.room(), self.max_frame);
        drop(q);
        let mut segs = out.take_segments();
        let total: usize = segs.iter().map(|b| b.len()).sum();
        // An error is left for the writer task to hit and report: it owns the
        // link's failure path.
        let res = self.tx.try_send(&mut segs);
        let written = total - segs.iter().map(|b| b.len()).sum::<usize>();
        if matches!(res, Ok(true)) {
            segs.clear();
        }
        self.end_direct(segs, Some(out), filled, written);
    }

    /// Ends a direct write (`kick`, `send_data_now`): frees the wire, leaves
    /// what the socket did not take (or what failed: the writer task will hit the
    /// error and report it) to the writer task, and counts the write.
    fn end_direct(
        &self,
        unsent: Vec<Bytes>,
        spare: Option<OutBuf>,
        filled: Filled,
        written: usize,
    ) {
        let mut q = self.send.lock().unwrap();
        q.wire_busy = false;
        if spare.is_some() {
            q.spare = spare;
        }
        if !unsent.is_empty() {
            self.metrics()
                .wan_direct_partial
                .fetch_add(1, Ordering::Relaxed);
            q.leftover = unsent;
        }
        let more = q.has_work();
        drop(q);
        if more {
            self.wake.notify_one();
        }
        self.metrics()
            .wan_direct_sends
            .fetch_add(1, Ordering::Relaxed);
        self.count_out(filled, written as u64);
    }

    /// The idle-link fast path for one small chunk: if nobody holds the wire and
    /// nothing at all is queued (no leftover, no control frame, no chunk in the
    /// strategy), writes `frame` — a whole DATA frame of `data_len` bytes, prefix
    /// from `wire::data_prefix` — with one send, and returns true. Otherwise
    /// returns false and the caller queues the chunk as usual (`push_chunk`).
    ///
    /// This is what `push_chunk` + `kick` would put on the wire: every strategy
    /// sends a lone chunk of at most `FAST_MAX` bytes as one DATA frame (fair's
    /// quantum and aggregate's packing threshold are both 16 KiB). It only skips
    /// the strategy's bookkeeping, the lease and the frame encoding — costs paid
    /// on every message of a ping-pong. What the socket does not take at once
    /// goes to the writer task, like `kick`'s leftovers.
    pub fn send_data_now(&self, frame: &[u8], data_len: usize) -> bool {
        debug_assert!(data_len <= FAST_MAX && frame.len() == wire::DATA_PREFIX + data_len);
        {
            let mut q = self.send.lock().unwrap();
            if q.wire_busy || q.has_work() || self.is_closed() {
                return false;
            }
            q.wire_busy = true;
        }
        // An error is left for the writer task to hit and report, as in `kick`:
        // the unsent frame becomes its leftover.
        let written = self.tx.try_send_slice(frame).unwrap_or(0);
        let unsent = if written < frame.len() {
            vec![Bytes::copy_from_slice(&frame[written..])]
        } else {
            Vec::new()
        };
        let filled = Filled {
            frames: 1,
            data: data_len as u64,
            ..Filled::default()
        };
        self.end_direct(unsent, None, filled, written);
        true
    }

    fn count_out(&self, n: Filled, bytes: u64) {
        let metrics = &self.shared.metrics;
        self.frames_out.fetch_add(n.frames, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        metrics
            .wan_frames_out
            .fetch_add(n.frames, Ordering::Relaxed);
        metrics.wan_bytes_out.fetch_add(bytes, Ordering::Relaxed);
        metrics
            .relayed_bytes_out
            .fetch_add(n.data, Ordering::Relaxed);
        if n.batches > 0 {
            self.batch_frames.fetch_add(n.batches, Ordering::Relaxed);
            self.chunks_aggregated
                .fetch_add(n.packed, Ordering::Relaxed);
            metrics.batch_frames.fetch_add(n.batches, Ordering::Relaxed);
            metrics
                .chunks_aggregated
                .fetch_add(n.packed, Ordering::Relaxed);
        }
    }

    /// Discards what a reset flow still had queued (returning its budget).
    pub fn drop_queued(&self, flow: FlowId) {
        self.send.lock().unwrap().strategy.remove_flow(flow);
    }

    /// Opens a flow from our side: registers it and queues its OPEN in one step,
    /// so OPENs leave in flow-id order (the peer rejects ids that go backwards).
    /// Returns the flow and where its OPEN_REPLY will arrive; None if the link is
    /// closing.
    pub fn open_local_flow(
        &self,
        window: OwnedSemaphorePermit,
        dst: SocketAddr,
        src: SocketAddr,
    ) -> Option<(Arc<Flow>, OpenReply)> {
        if self.is_closed() {
            return None;
        }
        let mut t = self.table.lock().unwrap();
        let id = t.next_local;
        t.next_local = t.next_local.checked_add(2)?;
        let flow = Flow::new(
            id,
            self.shared.send_pool.clone(),
            self.shared.cfg.limits.per_flow_buffer,
            Origin::Local,
            src,
            dst,
        );
        let window = flow.set_window(window);
        let reply = flow.expect_reply();
        t.flows.insert(id, flow.clone());
        self.queue_control(Frame::Open {
            flow: id,
            window,
            dst,
            src,
        });
        drop(t);
        // The link may have closed between the check and the insert; its teardown
        // may have missed this flow, so abort it here.
        if self.is_closed() {
            flow.abort();
        }
        Some((flow, reply))
    }

    /// Removes a finished flow from the table. What it still has queued (its last
    /// data and FIN) stays in the scheduler and goes out; a reset flow's queue was
    /// already dropped by whoever reset it.
    pub fn forget_flow(&self, id: FlowId) {
        self.table.lock().unwrap().flows.remove(&id);
    }

    fn is_local_id(&self, id: FlowId) -> bool {
        (id % 2 == 1) == (self.role == Role::Dialer)
    }

    fn lookup(&self, id: FlowId) -> Result<Option<Arc<Flow>>, LinkError> {
        let t = self.table.lock().unwrap();
        if let Some(f) = t.flows.get(&id) {
            return Ok(Some(f.clone()));
        }
        let seen = if self.is_local_id(id) {
            id < t.next_local
        } else {
            id != 0 && id <= t.peer_max
        };
        if seen {
            // Closed meanwhile: the peer couldn't know yet. Drop quietly.
            self.shared
                .metrics
                .wan_stale_frames
                .fetch_add(1, Ordering::Relaxed);
            Ok(None)
        } else {
            Err(LinkError::Violation(format!(
                "frame for flow {id}, which was never opened"
            )))
        }
    }

    /// Ends the link: wakes its tasks, shuts the socket, resets every flow on it.
    pub fn close(&self) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        self.probe.close();
        let flows: Vec<Arc<Flow>> = self.table.lock().unwrap().flows.values().cloned().collect();
        for f in flows {
            f.abort();
            self.drop_queued(f.id);
        }
    }

    /// Acts on one received frame. Flows that got data are added to `touched`: the
    /// reader writes their data to the LAN once it has handled every frame already
    /// received (one write per flow per burst instead of one per frame).
    fn handle(
        self: &Arc<Self>,
        frame: Frame,
        touched: &mut Vec<Arc<Flow>>,
    ) -> Result<(), LinkError> {
        let mut touch = |f: Arc<Flow>| {
            if !touched.iter().any(|t| Arc::ptr_eq(t, &f)) {
                touched.push(f);
            }
        };
        match frame {
            Frame::Data { flow, data } => {
                if let Some(f) = self.lookup(flow)? {
                    f.deliver(data)?;
                    touch(f);
                }
            }
            Frame::Batch(entries) => {
                for e in entries {
                    if let Some(f) = self.lookup(e.flow)? {
                        f.deliver(e.data)?;
                        if e.fin {
                            f.deliver_fin();
                        }
                        touch(f);
                    }
                }
            }
            Frame::Credit { flow, grant } => {
                if let Some(f) = self.lookup(flow)? {
                    f.add_credit(grant);
                }
            }
            Frame::Fin { flow } => {
                if let Some(f) = self.lookup(flow)? {
                    f.deliver_fin();
                }
            }
            Frame::Reset { flow, reason } => {
                if let Some(f) = self.lookup(flow)? {
                    debug!(peer = %self.peer, flow, ?reason, "flow reset by peer");
                    f.abort();
                    self.drop_queued(flow);
                }
            }
            Frame::OpenReply {
                flow,
                status,
                window,
            } => {
                if !self.is_local_id(flow) {
                    return Err(LinkError::Violation(format!(
                        "OPEN_REPLY for flow {flow}, which the peer opened"
                    )));
                }
                if let Some(f) = self.lookup(flow)? {
                    if !f.deliver_reply(status, window) {
                        return Err(LinkError::Violation(format!(
                            "second OPEN_REPLY for flow {flow}"
                        )));
                    }
                }
            }
            Frame::Open {
                flow,
                window,
                dst,
                src,
            } => {
                if self.is_local_id(flow) || flow == 0 {
                    return Err(LinkError::Violation(format!(
                        "OPEN with flow id {flow} from our id space"
                    )));
                }
                let f = {
                    let mut t = self.table.lock().unwrap();
                    if flow <= t.peer_max {
                        return Err(LinkError::Violation(format!("OPEN reuses flow id {flow}")));
                    }
                    t.peer_max = flow;
                    let f = Flow::new(
                        flow,
                        self.shared.send_pool.clone(),
                        self.shared.cfg.limits.per_flow_buffer,
                        Origin::Remote,
                        src,
                        dst,
                    );
                    t.flows.insert(flow, f.clone());
                    f
                };
                f.add_credit(window);
                tokio::spawn(collect::serve_remote_open(
                    self.shared.clone(),
                    self.clone(),
                    f,
                    dst,
                    src,
                ));
            }
            Frame::Ping { token } => self.queue_control(Frame::Pong { token }),
            Frame::Pong { .. } => {}
            Frame::Hello { .. } | Frame::Auth { .. } => {
                return Err(LinkError::Violation(
                    "handshake frame on an established link".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The writer task: sends whatever direct senders left queued (the link was
/// busy, or the socket full), waiting for room in the transport as needed.
async fn writer<T: WanTx>(link: Arc<Link>, tx: Arc<T>) -> Result<(), LinkError> {
    let mut out = OutBuf::new();
    loop {
        let taken = {
            let mut q = link.send.lock().unwrap();
            if q.wire_busy || !q.has_work() {
                None
            } else {
                q.wire_busy = true;
                Some(q.fill(&mut out, tx.room(), link.max_frame))
            }
        };
        let Some(filled) = taken else {
            // A direct sender holding the wire wakes us when it leaves work behind.
            tokio::select! {
                _ = link.wake.notified() => continue,
                _ = link.closed.cancelled() => return Ok(()),
            }
        };
        let n = out.len() as u64;
        tokio::select! {
            r = tx.send(&mut out) => r.map_err(LinkError::Send)?,
            _ = link.closed.cancelled() => return Ok(()),
        }
        link.send.lock().unwrap().wire_busy = false;
        link.metrics()
            .wan_queued_sends
            .fetch_add(1, Ordering::Relaxed);
        link.count_out(filled, n);
    }
}

/// A periodic tick for the keepalive, from a timerfd that the runtime's reactor
/// watches like any socket. Not tokio's timer: with a timer pending, every
/// epoll_wait of the runtime carries a timeout, and arming that timeout costs
/// each relayed message measurably on a virtual machine (about 0.6 µs per relay
/// hop here, results/relay/). A timerfd is armed once, in the kernel, for good.
/// Falls back to tokio's interval if no timerfd can be had.
enum Ticker {
    Fd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    Tokio(tokio::time::Interval),
}

impl Ticker {
    fn new(period: Duration) -> Ticker {
        Self::timerfd(period).unwrap_or_else(|e| {
            debug!("timerfd unavailable ({e}), keepalive on tokio's timer");
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            Ticker::Tokio(t)
        })
    }

    fn timerfd(period: Duration) -> std::io::Result<Ticker> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscalls; the descriptor is owned by OwnedFd from here on.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let ts = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: period.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: `spec` is a valid itimerspec; the old value is not wanted.
        if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the AsyncFd owns `fd` (an OwnedFd, which always returns the
        // same open descriptor) until it is dropped.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(std::io::Error::from)?;
        Ok(Ticker::Fd(fd))
    }

    /// Waits for the next period. Periods missed while the runtime was busy count
    /// as one tick, like tokio's MissedTickBehavior::Delay.
    async fn tick(&mut self) -> std::io::Result<()> {
        let fd = match self {
            Ticker::Tokio(t) => {
                t.tick().await;
                return Ok(());
            }
            Ticker::Fd(fd) => fd,
        };
        loop {
            let mut ready = fd.readable().await?;
            let r = ready.try_io(|fd| {
                use std::os::fd::AsRawFd;
                let mut expirations = 0u64;
                // SAFETY: reads 8 bytes into a u64, as timerfd requires.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        &mut expirations as *mut u64 as *mut libc::c_void,
                        8,
                    )
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match r {
                Ok(r) => {
                    // Read: the timer is not readable again before the next
                    // period, so the next tick waits instead of reading EAGAIN.
                    ready.clear_ready();
                    return r;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

async fn keepalive(link: Arc<Link>, period: Duration) -> Result<(), LinkError> {
    let mut tick = Ticker::new(period);
    let mut last = link.frames_in.load(Ordering::Relaxed);
    let mut silent = 0u32;
    let mut token = 0u64;
    // The first round runs at once, as with tokio's interval.
    loop {
        let now = link.frames_in.load(Ordering::Relaxed);
        if now == last {
            silent += 1;
            if silent >= DEAD_AFTER_PERIODS {
                return Err(LinkError::Silent(period * silent));
            }
        } else {
            silent = 0;
            last = now;
        }
        token += 1;
        link.queue_control(Frame::Ping { token });
        tokio::select! {
            r = tick.tick() => r.map_err(LinkError::Send)?,
            _ = link.closed.cancelled() => return Ok(()),
        }
    }
}

/// Runs an authenticated connection as `peer`'s link until it fails or is replaced.
async fn run_link<C: WanConn>(
    shared: Arc<Shared>,
    conn: C,
    peer: auth::PeerInfo,
    role: Role,
) -> LinkError {
    let remote = conn.peer_addr();
    let (tx, mut rx, probe) = conn.split();
    let tx = Arc::new(tx);
    let link = Arc::new(Link {
        peer: peer.site.clone(),
        role,
        remote,
        since: Instant::now(),
        shared: shared.clone(),
        max_frame: peer.max_frame,
        send: Mutex::new(SendQueue {
            control: VecDeque::new(),
            strategy: schedule::build(shared.cfg.strategy),
            wire_busy: false,
            leftover: Vec::new(),
            spare: None,
        }),
        tx: tx.clone(),
        wake: Notify::new(),
        table: Mutex::new(FlowTable {
            flows: HashMap::new(),
            next_local: if role == Role::Dialer { 1 } else { 2 },
            peer_max: 0,
        }),
        closed: CancellationToken::new(),
        probe: Box::new(probe),
        frames_out: AtomicU64::new(0),
        frames_in: AtomicU64::new(0),
        bytes_out: AtomicU64::new(0),
        bytes_in: AtomicU64::new(0),
        batch_frames: AtomicU64::new(0),
        chunks_aggregated: AtomicU64::new(0),
    });
    let applied = link.probe.applied();
    info!(peer = %link.peer, %remote, ?role, max_frame = link.max_frame, applied = ?applied, "WAN link up");
    if let Some(old) = shared.install_link(link.clone()) {
        info!(peer = %old.peer, "replacing the previous link to this peer");
        old.close();
    }
    shared
        .metrics
        .links_established
        .fetch_add(1, Ordering::Relaxed);

    let period = Duration::from_millis(shared.cfg.wan_params(&link.peer).keepalive_ms);
    let mut w = tokio::spawn(writer(link.clone(), tx));
    let mut k = tokio::spawn(keepalive(link.clone(), period));
    // The reader is a task of its own too: it is woken for every frame, and a
    // future polled inside the select! below would poll the select's three other
    // branches each time as well.
    let mut r = tokio::spawn({
        let (link, shared) = (link.clone(), shared.clone());
        async move {
            let mut touched: Vec<Arc<Flow>> = Vec::new();
            let handle = |f: Frame, touched: &mut Vec<Arc<Flow>>| {
                tracing::trace!(peer = %link.peer, frame = ?f.kind(), "frame in");
                let wire_len = f.wire_len() as u64;
                link.frames_in.fetch_add(1, Ordering::Relaxed);
                link.bytes_in.fetch_add(wire_len, Ordering::Relaxed);
                shared.metrics.wan_frames_in.fetch_add(1, Ordering::Relaxed);
                shared
                    .metrics
                    .wan_bytes_in
                    .fetch_add(wire_len, Ordering::Relaxed);
                shared
                    .metrics
                    .relayed_bytes_in
                    .fetch_add(f.data_bytes() as u64, Ordering::Relaxed);
                link.handle(f, touched)
            };
            loop {
                let f = match rx.recv().await {
                    Ok(f) => f,
                    Err(e) => return LinkError::from(e),
                };
                if let Err(e) = handle(f, &mut touched) {
                    return e;
                }
                // Everything already received, before writing anything to the LAN.
                loop {
                    match rx.try_recv() {
                        Ok(Some(f)) => {
                            if let Err(e) = handle(f, &mut touched) {
                                return e;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => return LinkError::from(e),
                    }
                }
                for f in touched.drain(..) {
                    f.flush_to_lan(&link);
                }
            }
        }
    });
    let err: LinkError = tokio::select! {
        e = &mut r => e.unwrap_or(LinkError::Superseded),
        r = &mut w => match r { Ok(Err(e)) => e, _ => LinkError::Superseded },
        r = &mut k => match r { Ok(Err(e)) => e, _ => LinkError::Superseded },
        _ = link.closed.cancelled() => if shared.stopping.is_cancelled() { LinkError::Stopping } else { LinkError::Superseded },
    };
    let resets = link.table.lock().unwrap().flows.len();
    // Count and log before closing, so whoever sees the socket close also sees why.
    match &err {
        LinkError::Violation(_) | LinkError::Recv(RecvError::Wire(_)) => {
            shared
                .metrics
                .wan_protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            warn!(peer = %link.peer, %remote, flows_reset = resets, "closing WAN link: {err}");
        }
        LinkError::Stopping | LinkError::Superseded => {
            info!(peer = %link.peer, %remote, flows_reset = resets, "WAN link closed: {err}")
        }
        _ => warn!(peer = %link.peer, %remote, flows_reset = resets, "WAN link lost: {err}"),
    }
    shared.remove_link(&link);
    link.close();
    r.abort();
    w.abort();
    k.abort();
    err
}

fn note_handshake_failure(shared: &Shared, remote: SocketAddr, e: &AuthError) {
    match e {
        AuthError::Recv(RecvError::Wire(_)) | AuthError::Unexpected { .. } => {
            shared
                .metrics
                .wan_protocol_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        _ => {}
    }
    shared.metrics.auth_failures.fetch_add(1, Ordering::Relaxed);
    warn!(%remote, "WAN peer failed authentication: {e}");
}

/// Accepts peer gateways whose site name sorts before ours.
pub async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let own = shared.cfg.site.clone();
    loop {
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!("WAN accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shared.stopping.cancelled() => return,
        };
        let shared = shared.clone();
        let own = own.clone();
        tokio::spawn(async move {
            let mut conn =
                match TcpConn::accepted(stream, shared.cfg.limits.max_frame, &shared.cfg.wan) {
                    Ok(c) => c,
                    Err(e) => return debug!(%remote, "accepted WAN socket unusable: {e}"),
                };
            let allowed = |s: &str| s < own.as_str() && shared.cfg.peers().any(|p| p.name == s);
            let hs = auth::handshake(
                &mut conn,
                &shared.cfg.psk,
                &own,
                shared.cfg.limits.max_frame,
                allowed,
                HANDSHAKE_TIMEOUT,
            );
            let peer = tokio::select! {
                r = hs => r,
                _ = shared.stopping.cancelled() => return,
            };
            match peer {
                Ok(peer) => {
                    for w in conn.retune(shared.cfg.wan_params(&peer.site)) {
                        warn!(peer = %peer.site, "WAN tuning: {w}");
                    }
                    run_link(shared, conn, peer, Role::Acceptor).await;
                }
                Err(e) => note_handshake_failure(&shared, remote, &e),
            }
        });
    }
}

/// Keeps a link to `peer` (whose name sorts after ours) up: dial, authenticate,
/// run, and on failure try again with exponential backoff.
pub async fn dial_loop(shared: Arc<Shared>, peer: crate::config::Site) {
    let params = shared.cfg.wan_params(&peer.name).clone();
    let bind_ip = Some(shared.cfg.own_site().gateway_wan.ip());
    let mut backoff = BACKOFF_MIN;
    let mut warned = false;
    while !shared.stopping.is_cancelled() {
        let attempt = async {
            let (mut conn, warnings) = TcpConn::connect(
                bind_ip,
                peer.gateway_wan,
                &params,
                shared.cfg.limits.max_frame,
                HANDSHAKE_TIMEOUT,
            )
            .await
            .map_err(|e| format!("connect to {}: {e}", peer.gateway_wan))?;
            for w in warnings {
                warn!(peer = %peer.name, "WAN tuning: {w}");
            }
            let name = peer.name.clone();
            let r = auth::handshake(
                &mut conn,
                &shared.cfg.psk,
                &shared.cfg.site,
                shared.cfg.limits.max_frame,
                |s| s == name,
                HANDSHAKE_TIMEOUT,
            )
            .await;
            match r {
                Ok(info) => Ok((conn, info)),
                Err(e) => {
                    note_handshake_failure(&shared, peer.gateway_wan, &e);
                    Err(String::new())
                }
            }
        };
        let r = tokio::select! {
            r = attempt => r,
            _ = shared.stopping.cancelled() => return,
        };
        match r {
            Ok((conn, info)) => {
                backoff = BACKOFF_MIN;
                warned = false;
                let started = Instant::now();
                // Gateway stop closes every link, which ends run_link and its flows.
                run_link(shared.clone(), conn, info, Role::Dialer).await;
                // A link that died young counts as a failure for the backoff.
                if started.elapsed() < Duration::from_secs(2) {
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
            Err(msg) => {
                if !msg.is_empty() {
                    if warned {
                        debug!(peer = %peer.name, "WAN dial failed: {msg}");
                    } else {
                        warn!(peer = %peer.name, "WAN dial failed (retrying with backoff): {msg}");
                        warned = true;
                    }
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shared.stopping.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StrategyKind;
    use crate::wire::decode_slice;

    fn queue(kind: StrategyKind) -> SendQueue {
        SendQueue {
            control: VecDeque::new(),
            strategy: schedule::build(kind),
            wire_busy: false,
            leftover: Vec::new(),
            spare: None,
        }
    }

    fn frames(mut b: &[u8]) -> Vec<Frame> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let (f, n) = decode_slice(b, 1 << 20).unwrap();
            v.push(f);
            b = &b[n..];
        }
        v
    }

    /// Whoever fills a write — a direct sender or the writer task — sends the
    /// unsent rest of the previous write first, then control frames, then what
    /// the strategy picks among the pending chunks (here fair's interleaving,
    /// not arrival order).
    #[test]
    fn a_write_is_leftover_then_control_then_the_strategys_choice() {
        let mut q = queue(StrategyKind::Fair);
        let rest = Frame::Fin { flow: 9 }.to_bytes();
        q.leftover = vec![rest.clone()];
        q.strategy
            .push(Chunk::data(3, Bytes::from(vec![3u8; 40_000])));
        q.strategy.push(Chunk::data(5, Bytes::from(vec![5u8; 100])));
        q.control.push_back(Frame::Credit { flow: 1, grant: 7 });
        assert!(q.has_work());
        let mut out = OutBuf::new();
        let n = q.fill(&mut out, 1 << 20, 65536);
        assert_eq!(
            (n.frames, n.data),
            (5, 40_100),
            "the leftover is not a new frame"
        );
        assert_eq!((n.batches, n.packed), (0, 0), "fair never packs");
        let got = frames(&out.concat());
        let summary: Vec<(u8, u32, usize)> = got
            .iter()
            .map(|f| match f {
                Frame::Fin { flow } => (8, *flow, 0),
                Frame::Credit { flow, .. } => (7, *flow, 0),
                Frame::Data { flow, data } => (5, *flow, data.len()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (8, 9, 0),
                (7, 1, 0),
                (5, 3, 16384),
                (5, 5, 100),
                (5, 3, 16384),
                (5, 3, 40_000 - 2 * 16384)
            ]
        );
        assert!(!q.has_work());
    }

    #[test]
    fn a_write_stops_at_the_drivers_room() {
        let mut q = queue(StrategyKind::Fifo);
        for i in 0..10u32 {
            q.strategy
                .push(Chunk::data(i * 2 + 1, Bytes::from(vec![i as u8; 3000])));
        }
        let mut out = OutBuf::new();
        let n = q.fill(&mut out, 10_000, 65536).frames;
        assert_eq!(n, 4, "stops once the write holds `room` bytes");
        assert!(q.has_work());
        let mut out = OutBuf::new();
        assert_eq!(q.fill(&mut out, 1 << 20, 65536).frames, 6);
        let flows: Vec<u32> = frames(&out.concat())
            .iter()
            .map(|f| match f {
                Frame::Data { flow, .. } => *flow,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            flows,
            vec![9, 11, 13, 15, 17, 19],
            "FIFO order kept across writes"
        );
    }

    /// The aggregate strategy's packing shows in the counters: one BATCH frame,
    /// every chunk in it counted as aggregated, and each flow credited with its
    /// bytes and with one frame however many of its chunks the batch held.
    #[test]
    fn packed_chunks_are_counted_per_link_and_per_flow() {
        use crate::collect::flow::Origin;
        use crate::schedule::Lease;
        let mut q = queue(StrategyKind::Aggregate);
        let pool = Arc::new(tokio::sync::Semaphore::new(0));
        let any: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let flows: Vec<Arc<Flow>> = [1, 3]
            .iter()
            .map(|&id| Flow::new(id, pool.clone(), 1 << 20, Origin::Local, any, any))
            .collect();
        for i in 0..6usize {
            let f = &flows[i % 2];
            let len = 100 + i;
            let mut c = Chunk::data(f.id, Bytes::from(vec![i as u8; len]));
            c.lease = Some(Lease::new(Arc::new(Sent(f.clone())), len));
            q.strategy.push(c);
        }
        q.strategy
            .push(Chunk::data(5, Bytes::from(vec![0u8; 40_000])));
        let mut out = OutBuf::new();
        let n = q.fill(&mut out, 1 << 20, 65536);
        assert_eq!(
            n,
            Filled {
                frames: 2,
                data: 615 + 40_000,
                batches: 1,
                packed: 6
            },
            "six chunks packed, the large one alone"
        );
        assert!(matches!(
            &frames(&out.concat())[..],
            [Frame::Batch(e), Frame::Data { flow: 5, .. }] if e.len() == 6
        ));
        let got = |f: &Flow| {
            (
                f.bytes_out.load(Ordering::Relaxed),
                f.frames_out.load(Ordering::Relaxed),
            )
        };
        assert_eq!(got(&flows[0]), (100 + 102 + 104, 1));
        assert_eq!(got(&flows[1]), (101 + 103 + 105, 1));
    }

    /// The idle fast path (`Link::send_data_now`) writes a lone chunk of up to
    /// FAST_MAX bytes as `data_prefix` + bytes: exactly the one DATA frame every
    /// strategy makes of it when it is all there is to send.
    #[test]
    fn a_lone_small_chunk_is_one_data_frame_in_every_strategy() {
        for kind in [
            StrategyKind::Fifo,
            StrategyKind::Fair,
            StrategyKind::Aggregate,
        ] {
            for len in [1, 8, 1500, FAST_MAX] {
                let mut q = queue(kind);
                let data = Bytes::from(vec![9u8; len]);
                q.strategy.push(Chunk::data(7, data.clone()));
                let mut out = OutBuf::new();
                let n = q.fill(&mut out, 256 * 1024, 65536);
                assert_eq!(
                    (n.frames, n.data, n.batches),
                    (1, len as u64, 0),
                    "{kind:?} {len}"
                );
                let mut want = wire::data_prefix(7, len).to_vec();
                want.extend_from_slice(&data);
                assert_eq!(out.concat(), Bytes::from(want), "{kind:?} {len}");
            }
        }
    }

    /// The keepalive's timerfd never ticks early, and periods that passed while
    /// the runtime was blocked fold into one tick (tokio's
    /// MissedTickBehavior::Delay, which the keepalive used before).
    #[tokio::test(flavor = "current_thread")]
    async fn the_keepalive_ticker_ticks_per_period_and_folds_missed_periods() {
        let period = Duration::from_millis(200);
        let mut t = Ticker::new(period);
        assert!(matches!(t, Ticker::Fd(_)), "Linux has timerfd");
        let start = Instant::now();
        t.tick().await.unwrap();
        t.tick().await.unwrap();
        assert!(start.elapsed() >= period * 2, "{:?}", start.elapsed());
        // Block the runtime for three periods: the missed periods give one tick,
        // and the tick after it waits for the next period (about 200 ms away)
        // instead of following at once as unfolded expirations would.
        std::thread::sleep(period * 3);
        t.tick().await.unwrap();
        let waited = Instant::now();
        t.tick().await.unwrap();
        assert!(
            waited.elapsed() >= period / 2,
            "missed periods were not folded into one tick ({:?})",
            waited.elapsed()
        );
    }

    /// Passes `sent` on to a flow but not `release`: the test lent no budget.
    struct Sent(Arc<Flow>);

    impl crate::schedule::Release for Sent {
        fn release(&self, _: usize) {}
        fn sent(&self, bytes: usize, new_frame: bool) {
            crate::schedule::Release::sent(&*self.0, bytes, new_frame);
        }
    }
}
