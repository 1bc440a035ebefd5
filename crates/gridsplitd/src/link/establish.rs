//! Getting a session a connection: dial (the gateway whose id sorts first) or
//! accept, authenticate (auth.rs), start or resume the session with a SESSION
//! exchange (session.rs), join the other connections of a striped set
//! (stripes.rs), and run the connection until it dies.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::keepalive::keepalive;
use super::recv::reader;
use super::send::writer;
use super::session::{
    acceptor_session, as_session, dialer_session, end_session, recv_first, Ready,
};
use super::stripes;
use super::{Conn, Link, LinkError, State};
use crate::auth::{self, AuthError, PeerInfo};
use crate::transfer::striped::StripedConn;
use crate::transfer::tcp::TcpConn;
use crate::transfer::{RecvError, WanConn, WanProbe, WanTxNow};
use crate::wire::Frame;
use crate::Shared;

pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connect attempt for a session that is waiting for its connection is cut
/// short: a SYN lost in an outage would otherwise wait for its own backoff.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest pause between dial attempts: for a session being held, 1 s, so a
/// path that comes back is used within about a second; otherwise 5 s.
const BACKOFF_MAX_HELD: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

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
            max_frame = link.max_frame, encryption = shared.cfg.encryption.name(), applied = ?probe.applied(), "WAN link up");
    }
    link.state.send_replace(State::Up);
    // Anything queued while the session had no connection goes now.
    link.wake.notify_one();
    if link.is_closed() {
        cancel.cancel();
    }

    let period = Duration::from_millis(shared.cfg.wan_params(&link.site).keepalive_ms);
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
        LinkError::Recv(RecvError::Crypto(_)) => {
            // Nothing of the forged message was delivered, and what was is
            // counted exactly: the session resumes on a new connection, with
            // a new Noise handshake (docs/design/wan-encryption.md).
            shared
                .metrics
                .wan_forged_messages
                .fetch_add(1, Ordering::Relaxed);
            warn!(peer = %link.peer, %remote, flows_held = flows,
                "closing WAN connection: {err}; the session resumes on a new connection with new keys")
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

/// Counts a refused handshake and logs it once per address and kind of
/// refusal: a peer with the wrong key (or the other `[wan] encryption`) retries
/// every second or few, and would otherwise fill the log. Later ones go to the
/// debug level and the `auth_failures` counter until a handshake from that
/// address succeeds or the key is reloaded.
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
    let kind = format!("{:?}", std::mem::discriminant(e));
    let first = shared
        .refusals_logged
        .lock()
        .unwrap()
        .insert((remote.ip(), kind));
    *shared.last_refusal.lock().unwrap() = Some(format!("{remote}: {e}"));
    if first {
        warn!(%remote, "WAN peer refused at the handshake: {e} (logged once for this address; repeats are counted in auth_failures)");
    } else {
        debug!(%remote, "WAN peer refused at the handshake again: {e}");
    }
}

/// A handshake from `ip` succeeded: its next refusal is logged again.
fn note_handshake_success(shared: &Shared, ip: std::net::IpAddr) {
    let mut logged = shared.refusals_logged.lock().unwrap();
    if !logged.is_empty() {
        logged.retain(|(a, _)| *a != ip);
    }
}

/// Authenticates a fresh connection and, unless the link is insecure, seals it
/// (auth.rs, transfer/seal.rs).
async fn authenticate(
    shared: &Shared,
    conn: &mut TcpConn,
    dialer: bool,
    allowed: impl Fn(&str) -> bool,
) -> Result<PeerInfo, AuthError> {
    let psk = shared.psk();
    let own = shared.cfg.id.as_str();
    let sealed = shared.sealed();
    let max_frame = shared.cfg.limits.max_frame;
    let peer = auth::handshake(
        conn,
        &psk,
        own,
        max_frame,
        sealed,
        allowed,
        HANDSHAKE_TIMEOUT,
    )
    .await?;
    if sealed {
        auth::secure(conn, &peer, own, dialer, &psk, HANDSHAKE_TIMEOUT).await?;
    }
    note_handshake_success(shared, conn.peer_addr().ip());
    Ok(peer)
}

/// Accepts peer gateways (of other sites) whose gateway id sorts before ours.
pub async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let own = shared.cfg.id.clone();
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
                let allowed = |s: &str| s < own.as_str() && shared.cfg.peers().any(|p| p.id == s);
                let hs = authenticate(&shared, &mut conn, false, allowed);
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
                        let params = shared.cfg.gateway_params(&peer.id);
                        for w in conn.retune(params) {
                            warn!(peer = %peer.id, "WAN tuning: {w}");
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
                                    return warn!(peer = %peer.id, %remote, "WAN connection set not established: {msg}");
                                }
                            }
                            for c in &mut others {
                                c.retune(params);
                            }
                        }
                        run_set(shared.clone(), ready, conn, others, peer.max_frame).await;
                    }
                    Err(msg) if !msg.is_empty() => {
                        warn!(peer = %peer.id, %remote, "WAN session not established: {msg}")
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
    let id = peer.id.as_str();
    let info = authenticate(shared, &mut conn, true, |s| s == id)
        .await
        .map_err(DialError::Auth)?;
    Ok((conn, info, warnings))
}

/// Keeps a connection to the gateway `peer` (whose id sorts after ours): dial,
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
        let held = shared.link_to(&peer.id).is_some();
        // The peer's host answered our SYN with a reset: nothing listens on its
        // gateway port, so its gridsplitd has died, and with it the session's
        // state there. Nothing can be resumed: end the session now rather than
        // hold its flows for the outage limit. (A blackout drops SYNs silently.)
        let mut refused = false;
        // This attempt failed while joining a striped set's other connections.
        let mut stripe_failed = false;
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
                warn!(peer = %peer.id, "WAN tuning: {w}");
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
                        warn!(peer = %peer.id, "striping the WAN link failed ({e}); the next connection is unstriped");
                        stripe_failed = true;
                        return Err(format!("striping: {e}"));
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
            if let Some(old) = shared.link_to(&peer.id).filter(|l| !l.is_up()) {
                end_session(
                    &shared,
                    &old,
                    "the peer gateway refuses connections (its process has stopped)",
                );
            }
        }
        let max = if shared.link_to(&peer.id).is_some() {
            BACKOFF_MAX_HELD
        } else {
            BACKOFF_MAX
        };
        unstriped = stripe_failed;
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
                        debug!(peer = %peer.id, "WAN dial failed: {msg}");
                    } else {
                        warn!(peer = %peer.id, "WAN dial failed (retrying with backoff): {msg}");
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
