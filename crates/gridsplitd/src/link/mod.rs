//! One WAN link to a peer gateway (of another site; a site may have several
//! gateways, each with its own link), as a *session*: the flows multiplexed to that
//! peer, their scheduling and flow control, and the connection that carries
//! them, which may die and be replaced without the flows noticing.
//!
//! A session outlives its TCP connections. When one dies (reset, keepalive
//! silence, an error), the dialing gateway reconnects with backoff, the two
//! gateways authenticate again, and the session resumes: each side says how
//! many bytes of the other's stream it has handled, and the other sends again
//! what follows from its replay buffer (replay.rs). No byte is lost, repeated or
//! reordered, and per-flow credit stays exact, because the frames that carry it
//! are replayed like any other. Meanwhile the flows are held: LAN sockets stay
//! open and TCP back-pressure stops the nodes. A session without a connection
//! for longer than `outage_limit_s` ends, and its flows are reset on both sides
//! (docs/design/wan-sessions.md).
//!
//! The parts, one job each: establish.rs (dial, accept, handshake, run a
//! connection), session.rs (start or resume), stripes.rs (a striped set's
//! other connections), send.rs (send path and replay record), recv.rs (reader and frame handling),
//! keepalive.rs (liveness and ACKs), replay.rs (the buffer), pacer.rs (adaptive
//! pacing, where configured), ticker.rs (their clock). This file holds
//! the session's state: its flows, its connection, its status.

mod establish;
mod keepalive;
mod pacer;
mod recv;
mod replay;
mod send;
mod session;
mod stripes;
mod ticker;

pub use establish::{accept_loop, dial_loop};
pub use replay::OutOfRange;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::flow::{Carrier, CreditViolation, Flow, FlowStatus, OpenReply, Origin};
use crate::metrics::Metrics;
use crate::schedule::{self, Chunk};
use crate::transfer::{RecvError, WanProbe};
use crate::tune::Applied;
use crate::wire::{FlowId, Frame, Session};
use crate::Shared;
use send::SendQueue;

/// What the gateway does with an OPEN from the peer (collect's
/// `serve_remote_open`, installed by lib.rs): the link hands the new flow up
/// without depending on the LAN side.
pub type OpenHandler = fn(
    Arc<Shared>,
    Arc<Link>,
    Arc<Flow>,
    SocketAddr,
    SocketAddr,
) -> Pin<Box<dyn Future<Output = ()> + Send>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// We connect (our gateway id sorts first); we allocate odd flow ids.
    Dialer,
    /// The peer connects; we allocate even flow ids.
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
    #[error("sequence out of range: {0}")]
    Sequence(String),
    #[error("peer silent for {0:?}")]
    Silent(Duration),
    #[error("replaced by a newer connection")]
    Superseded,
    #[error("gateway stopping")]
    Stopping,
    #[error("the peer gateway ended the session (stopping)")]
    PeerEnded,
}

impl LinkError {
    /// Whether the session can survive this end of its connection. A peer that
    /// broke the protocol cannot be trusted with a resume; a lost, silent or
    /// out-of-sequence connection can (an out-of-range count on the resume
    /// itself then ends the session, in establish.rs).
    fn resumable(&self) -> bool {
        !matches!(
            self,
            LinkError::Violation(_)
                | LinkError::Recv(RecvError::Wire(_))
                | LinkError::Stopping
                | LinkError::PeerEnded
        )
    }
}

impl From<CreditViolation> for LinkError {
    fn from(v: CreditViolation) -> Self {
        LinkError::Violation(format!(
            "flow {} sent {} bytes with only {} bytes of credit",
            v.flow, v.len, v.window_left
        ))
    }
}

struct FlowTable {
    flows: HashMap<FlowId, Arc<Flow>>,
    next_local: FlowId,
    /// Highest flow id the peer has opened (ids only grow).
    peer_max: FlowId,
}

/// The connection a session has now.
struct Conn {
    gen: u64,
    remote: SocketAddr,
    since: Instant,
    probe: Arc<dyn WanProbe>,
    cancel: CancellationToken,
    /// Becomes true once the connection's tasks have stopped.
    stopped: watch::Receiver<bool>,
}

/// Whether a session has a connection; watched by its outage watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    /// Without a connection since then.
    Down(Instant),
}

/// Live state of one session with a peer gateway.
pub struct Link {
    /// The peer's gateway id (its site name when that site has one gateway).
    pub peer: String,
    /// The peer's site: whose `[[link]]` parameters apply, and whose subnet
    /// its OPENs may come from.
    pub site: String,
    pub role: Role,
    /// Chosen by the dialer when the session started; a resume names it.
    pub session: u64,
    pub since: Instant,
    shared: Arc<Shared>,
    max_frame: usize,
    send: Mutex<SendQueue>,
    /// Wakes the current connection's writer task.
    wake: Notify,
    table: Mutex<FlowTable>,
    /// Cancelled when the session ends (its flows are reset).
    closed: CancellationToken,
    conn: Mutex<Option<Conn>>,
    state: watch::Sender<State>,
    outage_limit: Duration,
    /// Bytes of the peer's stream handled, this session (what a resume starts from).
    received: AtomicU64,
    /// `received` as last acked to the peer.
    acked: AtomicU64,
    pub frames_out: AtomicU64,
    /// Frames received; the keepalive also reads it to tell a silent peer.
    pub frames_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub bytes_in: AtomicU64,
    /// BATCH frames sent, and the chunks they carried (the aggregate strategy's
    /// packing at work).
    pub batch_frames: AtomicU64,
    pub chunks_aggregated: AtomicU64,
    /// Connections after the first, and the bytes they sent again.
    pub reconnects: AtomicU64,
    pub bytes_replayed: AtomicU64,
    /// The pacing rate adaptive pacing set last (bits/s); 0 when the link's pacing is fixed.
    pacing_bps: AtomicU64,
    /// Acceptor side of a striped connection set being assembled: where JOINed
    /// connections go (link/stripes.rs).
    joining: Mutex<Option<stripes::Joining>>,
}

/// What /status shows for one link.
#[derive(serde::Serialize)]
pub struct LinkStatus {
    /// The peer's gateway id.
    pub peer: String,
    /// The peer's site, and the peer's index among that site's gateways.
    pub site: String,
    pub gateway_index: usize,
    pub role: Role,
    /// "up", or "reconnecting" while the session has no connection.
    pub state: &'static str,
    pub session: String,
    /// Seconds without a connection (reconnecting only).
    pub down_seconds: Option<f64>,
    pub outage_limit_s: f64,
    pub remote: Option<String>,
    /// Age of the session, and of its current connection.
    pub up_seconds: f64,
    pub connection_seconds: Option<f64>,
    pub reconnects: u64,
    pub bytes_replayed: u64,
    /// Sent and not yet acknowledged by the peer (the replay buffer).
    pub replay_bytes: u64,
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
    /// Adaptive pacing's rate in force (bits/s); None when the link's pacing is fixed.
    pub adaptive_pacing_bps: Option<u64>,
    pub applied: Vec<Applied>,
    pub tcp_info: Vec<crate::tune::TcpInfo>,
}

impl Link {
    /// A new session with the gateway `peer` (an id the handshake allowed,
    /// so a configured one), without a connection yet, and its outage watchdog.
    fn new(
        shared: &Arc<Shared>,
        peer: &str,
        role: Role,
        session: u64,
        max_frame: usize,
    ) -> Arc<Link> {
        let site = shared
            .cfg
            .gateway(peer)
            .map_or_else(|| peer.to_string(), |g| g.name.clone());
        let params = shared.cfg.wan_params(&site);
        let (state, _) = watch::channel(State::Down(Instant::now()));
        let link = Arc::new(Link {
            peer: peer.to_string(),
            site,
            role,
            session,
            since: Instant::now(),
            shared: shared.clone(),
            max_frame,
            send: Mutex::new(SendQueue::new(schedule::build(shared.cfg.strategy))),
            wake: Notify::new(),
            table: Mutex::new(FlowTable {
                flows: HashMap::new(),
                next_local: if role == Role::Dialer { 1 } else { 2 },
                peer_max: 0,
            }),
            closed: CancellationToken::new(),
            conn: Mutex::new(None),
            state,
            outage_limit: Duration::from_secs_f64(params.outage_limit_s),
            received: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            frames_out: AtomicU64::new(0),
            frames_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            batch_frames: AtomicU64::new(0),
            chunks_aggregated: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            bytes_replayed: AtomicU64::new(0),
            pacing_bps: AtomicU64::new(0),
            joining: Mutex::new(None),
        });
        tokio::spawn(watchdog(link.clone()));
        if params.pacing_far_port_bps > 0 {
            tokio::spawn(pacer::run(
                link.clone(),
                params.pacing_far_port_bps,
                params.pacing_floor_bps,
                params.pacing_bps,
            ));
        }
        link
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Largest DATA payload worth reading for one chunk on this link.
    pub fn max_data(&self) -> usize {
        crate::schedule::data_room(self.max_frame)
    }

    /// The session has ended (its flows were reset).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The session has a connection now.
    pub fn is_up(&self) -> bool {
        !self.is_closed() && *self.state.borrow() == State::Up
    }

    /// Seconds the session has been without a connection; None while it has one.
    pub fn down_seconds(&self) -> Option<f64> {
        match *self.state.borrow() {
            State::Up => None,
            State::Down(t) => Some(t.elapsed().as_secs_f64()),
        }
    }

    /// Bytes of the peer's stream handled so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Queues an ACK if at least `every` bytes were received since the last one.
    fn ack_received(&self, every: u64) {
        let now = self.received();
        let last = self.acked.load(Ordering::Relaxed);
        if now >= last + every
            && self
                .acked
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.queue_control(Frame::Ack { received: now });
        }
    }

    pub fn flow_count(&self) -> usize {
        self.table.lock().unwrap().flows.len()
    }

    pub fn status(&self) -> LinkStatus {
        let flows = self.flow_count();
        let (queued, strategy, replay_bytes) = {
            let q = self.send.lock().unwrap();
            (
                q.strategy.queued_bytes(),
                q.strategy.name(),
                q.replay.held(),
            )
        };
        let state = *self.state.borrow();
        let conn = self.conn.lock().unwrap();
        let probe = conn.as_ref().map(|c| c.probe.clone());
        LinkStatus {
            peer: self.peer.clone(),
            site: self.site.clone(),
            gateway_index: self.shared.cfg.gateway(&self.peer).map_or(0, |g| g.index),
            role: self.role,
            state: match state {
                State::Up => "up",
                State::Down(_) => "reconnecting",
            },
            session: format!("{:016x}", self.session),
            down_seconds: self.down_seconds(),
            outage_limit_s: self.outage_limit.as_secs_f64(),
            remote: conn.as_ref().map(|c| c.remote.to_string()),
            up_seconds: self.since.elapsed().as_secs_f64(),
            connection_seconds: conn.as_ref().map(|c| c.since.elapsed().as_secs_f64()),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            bytes_replayed: self.bytes_replayed.load(Ordering::Relaxed),
            replay_bytes,
            flows,
            queued_bytes: queued,
            strategy,
            streams: probe.as_ref().map_or(0, |p| p.streams()),
            max_frame: self.max_frame,
            frames_out: self.frames_out.load(Ordering::Relaxed),
            frames_in: self.frames_in.load(Ordering::Relaxed),
            wan_bytes_out: self.bytes_out.load(Ordering::Relaxed),
            wan_bytes_in: self.bytes_in.load(Ordering::Relaxed),
            batch_frames: self.batch_frames.load(Ordering::Relaxed),
            chunks_aggregated: self.chunks_aggregated.load(Ordering::Relaxed),
            adaptive_pacing_bps: Some(self.pacing_bps.load(Ordering::Relaxed)).filter(|&b| b > 0),
            applied: probe.as_ref().map_or_else(Vec::new, |p| p.applied()),
            tcp_info: probe.as_ref().map_or_else(Vec::new, |p| p.tcp_info()),
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

    /// A flow of this link, drawing on the gateway's send pool within its limits.
    fn new_flow(&self, id: FlowId, origin: Origin, src: SocketAddr, dst: SocketAddr) -> Arc<Flow> {
        Flow::new(
            id,
            self.shared.send_pool.clone(),
            &self.shared.cfg.limits,
            origin,
            src,
            dst,
        )
    }

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
        let flow = self.new_flow(id, Origin::Local, src, dst);
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

    /// Ends the session: stops its connection, resets every flow on it.
    pub fn close(&self) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        if let Some(c) = self.conn.lock().unwrap().as_ref() {
            c.cancel.cancel();
            c.probe.close();
        }
        let flows: Vec<Arc<Flow>> = self.table.lock().unwrap().flows.values().cloned().collect();
        for f in flows {
            f.abort();
            self.drop_queued(f.id);
        }
    }

    /// Tells the peer that this gateway is stopping and the session ends with
    /// it (a SESSION frame without RESUME on the established connection), so
    /// that its flows are reset at once instead of held for `outage_limit`.
    pub fn say_goodbye(&self) {
        self.queue_control(Frame::Session(Session {
            session: self.session,
            received: self.received(),
            resume: false,
            streams: 1,
            token: 0,
        }));
    }

    /// Shuts the current connection down both ways, as a failing network would
    /// (the session then reconnects and resumes). For fault-injection tests.
    pub fn break_connection(&self) {
        if let Some(c) = self.conn.lock().unwrap().as_ref() {
            c.probe.close();
        }
    }

    /// Stops the current connection, if any, and waits until its tasks have
    /// stopped (so `received` is final). For a peer that reconnected before
    /// this side noticed the old connection die.
    async fn stop_conn(&self) {
        let c = self
            .conn
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| (c.cancel.clone(), c.stopped.clone()));
        if let Some((cancel, mut stopped)) = c {
            cancel.cancel();
            let _ = stopped.wait_for(|s| *s).await;
        }
    }
}

impl Carrier for Link {
    fn peer(&self) -> &str {
        &self.peer
    }
    fn metrics(&self) -> &Metrics {
        Link::metrics(self)
    }
    fn max_data(&self) -> usize {
        Link::max_data(self)
    }
    fn queue_control(&self, f: Frame) {
        Link::queue_control(self, f)
    }
    fn push_chunk(&self, c: Chunk) {
        Link::push_chunk(self, c)
    }
    fn send_data_now(&self, frame: &[u8], data_len: usize) -> bool {
        Link::send_data_now(self, frame, data_len)
    }
    fn drop_queued(&self, flow: FlowId) {
        Link::drop_queued(self, flow)
    }
    fn forget_flow(&self, flow: FlowId) {
        Link::forget_flow(self, flow)
    }
}

/// Ends the session if it stays without a connection for `outage_limit`: its
/// flows are reset on this side (the peer's watchdog does the same there), so
/// every application socket gets an error instead of waiting forever.
async fn watchdog(link: Arc<Link>) {
    let mut state = link.state.subscribe();
    loop {
        let now = *state.borrow_and_update();
        if let State::Down(since) = now {
            let deadline = tokio::time::Instant::from_std(since + link.outage_limit);
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    if *state.borrow() == now {
                        expire(&link, since);
                        return;
                    }
                    continue;
                }
                r = state.changed() => if r.is_err() { return },
                _ = link.closed.cancelled() => return,
            }
        } else {
            tokio::select! {
                r = state.changed() => if r.is_err() { return },
                _ = link.closed.cancelled() => return,
            }
        }
    }
}

fn expire(link: &Arc<Link>, since: Instant) {
    let flows = link.flow_count();
    let m = link.metrics();
    m.sessions_expired.fetch_add(1, Ordering::Relaxed);
    m.flows_reset_outage
        .fetch_add(flows as u64, Ordering::Relaxed);
    let down = since.elapsed().as_secs_f64();
    let limit = link.outage_limit.as_secs_f64();
    if flows > 0 {
        warn!(peer = %link.peer, down_s = format!("{down:.1}"), outage_limit_s = limit, flows_reset = flows,
            "WAN link to {} down for {down:.1} s, past outage_limit ({limit} s): resetting its {flows} flows", link.peer);
    } else {
        info!(peer = %link.peer, down_s = format!("{down:.1}"), "WAN session to {} ended after {down:.1} s without a connection (no flows)", link.peer);
    }
    link.shared.remove_link(link);
    link.close();
}
