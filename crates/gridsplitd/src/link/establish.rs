//! Getting a session a connection: dial (the site whose name sorts first) or
//! accept, authenticate (auth.rs), then start or resume the session with a
//! SESSION exchange, and run the connection until it dies.
//!
//! The SESSION exchange (docs/protocol.md §4):
//! * the dialer sends `SESSION(id, received, resume)`: the id of the session it
//!   holds and how much of the peer's stream it has handled, or a fresh id;
//! * the acceptor resumes only if it holds a session with that id and the
//!   dialer's count is within its replay buffer; it answers with its own count.
//!   Otherwise it ends whatever session it had with that peer (resetting its
//!   flows: the peer's state is gone), starts the new one, and answers
//!   `resume = false`;
//! * the dialer, told there is no resume while it held a session, ends that
//!   session likewise. A count outside its own replay buffer also ends it (and
//!   its next dial starts afresh).
//!
//! A resume request that cannot be honoured is refused, logged once and
//! counted (`resume_refused`); nothing of the old session is relayed to the new.
//!
//! The same exchange agrees on how many TCP connections the link is striped
//! over; the others then join (stripes.rs).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::TryRngCore;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use tokio::sync::mpsc;

use super::keepalive::keepalive;
use super::recv::reader;
use super::send::writer;
use super::stripes;
use super::{Conn, Link, LinkError, Role, State};
use crate::auth::{self, AuthError, PeerInfo};
use crate::transfer::striped::StripedConn;
use crate::transfer::tcp::TcpConn;
use crate::transfer::{RecvError, WanConn, WanProbe, WanTxNow};
use crate::wire::{Frame, FrameType};
use crate::Shared;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connect attempt for a session that is waiting for its connection is cut
/// short: a SYN lost in an outage would otherwise wait for its own backoff.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest pause between dial attempts: for a session being held, 1 s, so a
/// path that comes back is used within about a second; otherwise 5 s.
const BACKOFF_MAX_HELD: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Marks a dial attempt that failed while joining the striped connections.
const STRIPE_FAILED: &str = "striping: ";

/// A session ready for a connection, and where the peer's stream resumes.
struct Ready {
    link: Arc<Link>,
    peer_received: u64,
    /// Connections agreed for this set (1 = unstriped), and the set's token.
    streams: u8,
    token: u64,
    /// Acceptor of a striped set: where the other connections arrive.
    set: Option<mpsc::UnboundedReceiver<TcpConn>>,
}

/// A SESSION frame's fields.
struct SessionMsg {
    session: u64,
    received: u64,
    resume: bool,
    streams: u8,
    token: u64,
}

fn fresh_session_id() -> u64 {
    let mut b = [0u8; 8];
    // An id only tells sessions apart; a failed RNG falls back to the clock.
    if rand::rngs::OsRng.try_fill_bytes(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        b = (t.as_nanos() as u64).to_be_bytes();
    }
    u64::from_be_bytes(b) | 1
}

/// The first frame after AUTH: SESSION (or, on the acceptor, JOIN).
async fn recv_first<C: WanConn>(conn: &mut C) -> Result<Frame, String> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.recv_frame()).await {
        Err(_) => Err("no SESSION frame within the handshake timeout".into()),
        Ok(Err(e)) => Err(format!("waiting for SESSION: {e}")),
        Ok(Ok(f)) => Ok(f),
    }
}

fn as_session(f: Frame) -> Result<SessionMsg, String> {
    match f {
        Frame::Session {
            session,
            received,
            resume,
            streams,
            token,
        } => Ok(SessionMsg {
            session,
            received,
            resume,
            streams,
            token,
        }),
        f => Err(format!(
            "expected {:?} after AUTH, got {:?}",
            FrameType::Session,
            f.kind()
        )),
    }
}

fn refuse_resume(shared: &Shared, peer: &str, why: &str) {
    shared
        .metrics
        .resume_refused
        .fetch_add(1, Ordering::Relaxed);
    warn!(%peer, "resume refused: {why}");
}

/// Ends `old` because the peer holds no state for it any more.
fn end_session(shared: &Shared, old: &Arc<Link>, why: &str) {
    let flows = old.flow_count();
    warn!(peer = %old.peer, flows_reset = flows, "ending WAN session {:016x}: {why}", old.session);
    shared.remove_link(old);
    old.close();
}

/// The dialer's side of the SESSION exchange.
async fn dialer_session<C: WanConn>(
    shared: &Arc<Shared>,
    conn: &mut C,
    peer: &PeerInfo,
    streams: u8,
) -> Result<Ready, String> {
    let old = shared.link_to(&peer.site);
    let (id, received, resume) = match &old {
        Some(l) => (l.session, l.received(), true),
        None => (fresh_session_id(), 0, false),
    };
    conn.send_frame(&Frame::Session {
        session: id,
        received,
        resume,
        streams,
        token: 0,
    })
    .await
    .map_err(|e| format!("sending SESSION: {e}"))?;
    let answer = as_session(recv_first(conn).await?)?;
    let (rid, peer_received, resumed) = (answer.session, answer.received, answer.resume);
    if rid != id {
        return Err(format!("peer answered SESSION {rid:016x} to {id:016x}"));
    }
    if answer.streams > streams || (answer.streams > 1 && answer.token == 0) {
        return Err(format!(
            "peer answered {} streams with token {:x} to a proposal of {streams}",
            answer.streams, answer.token
        ));
    }
    let (streams, token) = (answer.streams, answer.token);
    if let Some(old) = old {
        if resumed && old.max_frame == peer.max_frame {
            let check = old.send.lock().unwrap().replay.check(peer_received);
            match check {
                Ok(()) => {
                    return Ok(Ready {
                        link: old,
                        peer_received,
                        streams,
                        token,
                        set: None,
                    })
                }
                Err(e) => {
                    refuse_resume(shared, &peer.site, &e.to_string());
                    end_session(shared, &old, "the peer's received count is out of range");
                    return Err(String::new());
                }
            }
        }
        end_session(shared, &old, "the peer holds no state for it (restarted?)");
    }
    let link = Link::new(shared, &peer.site, Role::Dialer, id, peer.max_frame);
    shared.install_link(link.clone());
    shared
        .metrics
        .links_established
        .fetch_add(1, Ordering::Relaxed);
    Ok(Ready {
        link,
        peer_received: 0,
        streams,
        token,
        set: None,
    })
}

/// The acceptor's side of the SESSION exchange, `first` being the dialer's.
async fn acceptor_session<C: WanConn>(
    shared: &Arc<Shared>,
    conn: &mut C,
    peer: &PeerInfo,
    first: SessionMsg,
) -> Result<Ready, String> {
    let (id, peer_received, resume) = (first.session, first.received, first.resume);
    let streams = first.streams.min(shared.cfg.wan_params(&peer.site).streams);
    let token = if streams > 1 {
        stripes::fresh_token()
    } else {
        0
    };
    let old = shared.link_to(&peer.site);
    if let Some(old) = &old {
        // The dialer only dials once its connection is gone: ours is stale.
        old.stop_conn().await;
    }
    let resumable = match &old {
        Some(l) if resume && l.session == id && l.max_frame == peer.max_frame => {
            let check = l.send.lock().unwrap().replay.check(peer_received);
            check.map_err(|e| e.to_string())
        }
        _ if resume => Err(format!("no session {id:016x} here (restarted?)")),
        _ => Err(String::new()),
    };
    let (ready, resumed) = match (old, resumable) {
        (Some(link), Ok(())) => (
            Ready {
                link,
                peer_received,
                streams,
                token,
                set: None,
            },
            true,
        ),
        (old, why) => {
            if let (true, Err(why)) = (resume, &why) {
                refuse_resume(shared, &peer.site, why);
            }
            if let Some(old) = old {
                end_session(shared, &old, "the peer started a new session");
            }
            let link = Link::new(shared, &peer.site, Role::Acceptor, id, peer.max_frame);
            shared.install_link(link.clone());
            shared
                .metrics
                .links_established
                .fetch_add(1, Ordering::Relaxed);
            (
                Ready {
                    link,
                    peer_received: 0,
                    streams,
                    token,
                    set: None,
                },
                false,
            )
        }
    };
    let mut ready = ready;
    if streams > 1 {
        // Open before answering: the dialer's JOINs may follow at once.
        ready.set = Some(stripes::open_set(&ready.link, token));
    }
    let answer = Frame::Session {
        session: id,
        received: if resumed { ready.link.received() } else { 0 },
        resume: resumed,
        streams,
        token,
    };
    conn.send_frame(&answer)
        .await
        .map_err(|e| format!("answering SESSION: {e}"))?;
    Ok(ready)
}

impl Link {
    /// Connections the session has had (the generation of the current one).
    fn conn_count(&self) -> u64 {
        self.send.lock().unwrap().gen
    }
}

/// Runs `conn` as the session's connection until it dies or is replaced, then
/// leaves the session waiting for the next one (or ends it, for a peer that
/// broke the protocol).
async fn run_conn<C: WanConn>(shared: Arc<Shared>, ready: Ready, conn: C) -> LinkError {
    let Ready {
        link,
        peer_received,
        ..
    } = ready;
    let remote = conn.peer_addr();
    let (tx, rx, probe) = conn.split();
    let tx = Arc::new(tx);
    let probe: Arc<dyn WanProbe> = Arc::new(probe);
    let cancel = CancellationToken::new();
    let (stopped_tx, stopped) = watch::channel(false);
    let (gen, replayed) = link.attach_tx(tx.clone() as Arc<dyn WanTxNow>, peer_received);
    *link.conn.lock().unwrap() = Some(Conn {
        gen,
        remote,
        since: Instant::now(),
        probe: probe.clone(),
        cancel: cancel.clone(),
        stopped,
    });
    let resumed = gen > 1;
    if resumed {
        link.reconnects.fetch_add(1, Ordering::Relaxed);
        link.bytes_replayed.fetch_add(replayed, Ordering::Relaxed);
        shared
            .metrics
            .wan_reconnects
            .fetch_add(1, Ordering::Relaxed);
        shared
            .metrics
            .wan_bytes_replayed
            .fetch_add(replayed, Ordering::Relaxed);
        let down = link.down_seconds().unwrap_or(0.0);
        info!(peer = %link.peer, %remote, session = format!("{:016x}", link.session), down_s = format!("{down:.1}"),
            replayed, flows = link.flow_count(), "WAN link resumed");
    } else {
        info!(peer = %link.peer, %remote, role = ?link.role, session = format!("{:016x}", link.session),
            max_frame = link.max_frame, applied = ?probe.applied(), "WAN link up");
    }
    link.state.send_replace(State::Up);
    // Anything queued while the session had no connection goes now.
    link.wake.notify_one();
    if link.is_closed() {
        cancel.cancel();
    }

    let period = Duration::from_millis(shared.cfg.wan_params(&link.peer).keepalive_ms);
    let mut w = tokio::spawn(writer(link.clone(), tx, gen, cancel.clone()));
    let mut k = tokio::spawn(keepalive(link.clone(), period, cancel.clone()));
    // The reader is a task of its own too: it is woken for every frame, and a
    // future polled inside the select! below would poll the others each time.
    let mut r = tokio::spawn(reader(link.clone(), rx, cancel.clone()));
    // Which task ended (its handle is consumed), if any.
    let (err, ended) = tokio::select! {
        e = &mut r => (e.unwrap_or(LinkError::Superseded), Some(0)),
        e = &mut w => (match e { Ok(Err(e)) => e, _ => LinkError::Superseded }, Some(1)),
        e = &mut k => (match e { Ok(Err(e)) => e, _ => LinkError::Superseded }, Some(2)),
        _ = cancel.cancelled() => (LinkError::Superseded, None),
        _ = link.closed.cancelled() => (if shared.stopping.is_cancelled() { LinkError::Stopping } else { LinkError::Superseded }, None),
    };
    // Counted before the socket closes, so whoever sees it close sees why.
    let violation = matches!(
        err,
        LinkError::Violation(_) | LinkError::Recv(RecvError::Wire(_))
    );
    if violation {
        shared
            .metrics
            .wan_protocol_errors
            .fetch_add(1, Ordering::Relaxed);
    }
    if !err.resumable() {
        shared.remove_link(&link);
    }
    // Stop the connection's tasks and wait for them: the reader stops only
    // between frames, so `received` is exact for the next resume.
    cancel.cancel();
    probe.close();
    r.abort();
    w.abort();
    k.abort();
    if ended != Some(0) {
        let _ = r.await;
    }
    if ended != Some(1) {
        let _ = w.await;
    }
    if ended != Some(2) {
        let _ = k.await;
    }
    link.detach_tx(gen);
    {
        let mut c = link.conn.lock().unwrap();
        if c.as_ref().is_some_and(|c| c.gen == gen) {
            *c = None;
        }
    }
    if link.conn_count() == gen {
        // An outage counts from the last time the peer was heard, not from
        // when its silence was judged fatal.
        let heard = match &err {
            LinkError::Silent(d) => Instant::now().checked_sub(*d).unwrap_or_else(Instant::now),
            _ => Instant::now(),
        };
        link.state.send_replace(State::Down(heard));
    }
    let _ = stopped_tx.send(true);

    let flows = link.flow_count();
    match &err {
        _ if violation => {
            warn!(peer = %link.peer, %remote, flows_reset = flows, "closing WAN link: {err}");
        }
        LinkError::Stopping | LinkError::PeerEnded => {
            info!(peer = %link.peer, %remote, flows_reset = flows, "WAN link closed: {err}")
        }
        LinkError::Superseded => {
            debug!(peer = %link.peer, %remote, "WAN connection replaced or closed")
        }
        _ => {
            shared
                .metrics
                .wan_connections_lost
                .fetch_add(1, Ordering::Relaxed);
            warn!(peer = %link.peer, %remote, flows_held = flows,
                outage_limit_s = link.outage_limit.as_secs_f64(),
                "WAN connection lost ({err}); holding the session's flows while it reconnects")
        }
    }
    if !err.resumable() {
        link.close();
    }
    err
}

/// Runs the session on `first` alone, or striped over `first` and `others`.
async fn run_set(
    shared: Arc<Shared>,
    ready: Ready,
    first: TcpConn,
    others: Vec<TcpConn>,
    peer_max_frame: usize,
) {
    if others.is_empty() {
        run_conn(shared, ready, first).await;
        return;
    }
    let (conn, warnings) = StripedConn::new(first, others, peer_max_frame);
    for w in warnings {
        warn!(peer = %ready.link.peer, "WAN tuning: {w}");
    }
    run_conn(shared, ready, conn).await;
}

fn note_handshake_failure(shared: &Shared, remote: SocketAddr, e: &AuthError) {
    match e {
        AuthError::Recv(RecvError::Wire(_))
        | AuthError::Unexpected { .. }
        | AuthError::Version(_) => {
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
    crate::accept::serve(
        listener,
        shared.stopping.clone(),
        "WAN",
        move |stream, remote| {
            let shared = shared.clone();
            let own = own.clone();
            async move {
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
                let peer = match peer {
                    Ok(p) => p,
                    Err(e) => return note_handshake_failure(&shared, remote, &e),
                };
                let session = async {
                    let first = recv_first(&mut conn).await?;
                    if let Frame::Join { session, token } = first {
                        return Ok(Err((session, token)));
                    }
                    let first = as_session(first)?;
                    acceptor_session(&shared, &mut conn, &peer, first).await.map(Ok)
                };
                let ready = tokio::select! {
                    r = session => r,
                    _ = shared.stopping.cancelled() => return,
                };
                match ready {
                    Ok(Err((session, token))) => stripes::join(&shared, &peer, conn, session, token),
                    Ok(Ok(mut ready)) => {
                        let params = shared.cfg.wan_params(&peer.site);
                        for w in conn.retune(params) {
                            warn!(peer = %peer.site, "WAN tuning: {w}");
                        }
                        let mut others = Vec::new();
                        if let Some(set) = ready.set.take() {
                            let count = ready.streams as usize - 1;
                            let r = tokio::select! {
                                r = stripes::await_set(&ready.link, set, count, HANDSHAKE_TIMEOUT) => r,
                                _ = shared.stopping.cancelled() => return,
                            };
                            match r {
                                Ok(conns) => others = conns,
                                Err(msg) => {
                                    return warn!(peer = %peer.site, %remote, "WAN connection set not established: {msg}");
                                }
                            }
                            for c in &mut others {
                                c.retune(params);
                            }
                        }
                        run_set(shared.clone(), ready, conn, others, peer.max_frame).await;
                    }
                    Err(msg) if !msg.is_empty() => {
                        warn!(peer = %peer.site, %remote, "WAN session not established: {msg}")
                    }
                    Err(_) => {}
                }
            }
        },
    )
    .await
}

pub(super) enum DialError {
    Connect(std::io::Error),
    Auth(AuthError),
}

/// Connects to `peer`'s gateway from our own WAN address (the one the peer
/// knows us by), tuned before the SYN, and authenticates it: a session's first
/// connection and a striped set's others alike. Also returns tuning warnings.
pub(super) async fn dial(
    shared: &Shared,
    peer: &crate::config::Site,
    params: &crate::config::WanParams,
    limit: Duration,
) -> Result<(TcpConn, PeerInfo, Vec<String>), DialError> {
    let bind_ip = Some(shared.cfg.own_site().gateway_wan.ip());
    let max_frame = shared.cfg.limits.max_frame;
    let (mut conn, warnings) =
        TcpConn::connect(bind_ip, peer.gateway_wan, params, max_frame, limit)
            .await
            .map_err(DialError::Connect)?;
    let name = peer.name.as_str();
    let info = auth::handshake(
        &mut conn,
        &shared.cfg.psk,
        &shared.cfg.site,
        max_frame,
        |s| s == name,
        HANDSHAKE_TIMEOUT,
    )
    .await
    .map_err(DialError::Auth)?;
    Ok((conn, info, warnings))
}

/// Keeps a connection to `peer` (whose name sorts after ours): dial,
/// authenticate, start or resume the session, run, and on failure try again
/// with exponential backoff.
pub async fn dial_loop(shared: Arc<Shared>, peer: crate::config::Site) {
    let params = shared.cfg.wan_params(&peer.name).clone();
    let mut backoff = BACKOFF_MIN;
    let mut warned = false;
    // The last attempt to stripe failed: the next connection goes unstriped, so
    // the link comes up; the one after tries the configured count again.
    let mut unstriped = false;
    while !shared.stopping.is_cancelled() {
        let held = shared.link_to(&peer.name).is_some();
        // The peer's host answered our SYN with a reset: nothing listens on its
        // gateway port, so its gridsplitd has died, and with it the session's
        // state there. Nothing can be resumed: end the session now rather than
        // hold its flows for the outage limit. (A blackout drops SYNs silently.)
        let mut refused = false;
        let attempt = async {
            let limit = if held {
                RECONNECT_TIMEOUT
            } else {
                HANDSHAKE_TIMEOUT
            };
            let (mut conn, info, warnings) = match dial(&shared, &peer, &params, limit).await {
                Ok(d) => d,
                Err(DialError::Connect(e)) => {
                    if held && e.kind() == std::io::ErrorKind::ConnectionRefused {
                        refused = true;
                    }
                    return Err(format!("connect to {}: {e}", peer.gateway_wan));
                }
                Err(DialError::Auth(e)) => {
                    note_handshake_failure(&shared, peer.gateway_wan, &e);
                    return Err(String::new());
                }
            };
            for w in warnings {
                warn!(peer = %peer.name, "WAN tuning: {w}");
            }
            let proposal = if unstriped { 1 } else { params.streams };
            let ready = dialer_session(&shared, &mut conn, &info, proposal).await?;
            let mut others = Vec::new();
            if ready.streams > 1 {
                let count = ready.streams as usize - 1;
                let set = stripes::dial_set(
                    &shared,
                    &peer,
                    &params,
                    ready.link.session,
                    ready.token,
                    count,
                    HANDSHAKE_TIMEOUT,
                )
                .await;
                match set {
                    Ok(conns) => others = conns,
                    Err(e) => {
                        warn!(peer = %peer.name, "striping the WAN link failed ({e}); the next connection is unstriped");
                        return Err(format!("{STRIPE_FAILED}{e}"));
                    }
                }
            }
            Ok((conn, ready, others, info.max_frame))
        };
        let r = tokio::select! {
            r = attempt => r,
            _ = shared.stopping.cancelled() => return,
        };
        if refused {
            if let Some(old) = shared.link_to(&peer.name).filter(|l| !l.is_up()) {
                end_session(
                    &shared,
                    &old,
                    "the peer gateway refuses connections (its process has stopped)",
                );
            }
        }
        let max = if shared.link_to(&peer.name).is_some() {
            BACKOFF_MAX_HELD
        } else {
            BACKOFF_MAX
        };
        unstriped = matches!(&r, Err(m) if m.starts_with(STRIPE_FAILED));
        match r {
            Ok((conn, ready, others, peer_max)) => {
                backoff = BACKOFF_MIN;
                warned = false;
                let started = Instant::now();
                // Gateway stop ends every session, which ends run_conn and its flows.
                run_set(shared.clone(), ready, conn, others, peer_max).await;
                // A connection that died young counts as a failure for the backoff.
                if started.elapsed() < Duration::from_secs(2) {
                    backoff = (backoff * 2).min(max);
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
                backoff = (backoff * 2).min(max);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shared.stopping.cancelled() => return,
        }
    }
}
