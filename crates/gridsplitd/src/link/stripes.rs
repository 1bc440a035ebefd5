//! Assembling a striped link's connections (transfer/striped.rs).
//!
//! The first connection agrees on the count in the SESSION exchange
//! (session.rs): the dialer proposes its `streams`, the acceptor answers with
//! the smaller of that and its own, and with a random token. The dialer then
//! opens the other connections; each is authenticated exactly like the first
//! (AUTH proves the peer's gateway id) and its first frame is JOIN(session, token).
//! The acceptor hands a JOINed connection to the session's pending set only if
//! the gateway, the session and this set's token all match, so a stale or foreign
//! JOIN can join nothing. The set runs once complete; a set not complete within
//! the handshake timeout is dropped, and the dialer's next attempt starts over.

use std::sync::Arc;
use std::time::Duration;

use rand::TryRngCore;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::establish::{dial, DialError};
use super::Link;
use crate::auth::PeerInfo;
use crate::config::{Site, WanParams};
use crate::transfer::tcp::TcpConn;
use crate::transfer::WanConn;
use crate::wire::Frame;
use crate::Shared;

/// The acceptor's pending set: its token, and where JOINed connections go.
pub(super) struct Joining {
    token: u64,
    tx: mpsc::UnboundedSender<TcpConn>,
}

/// A token for a new set (never 0, which means "no set").
pub(super) fn fresh_token() -> u64 {
    let mut b = [0u8; 8];
    // Unguessable to anyone but the authenticated peer it is sent to; a failed
    // RNG only makes it guessable by that same peer.
    let _ = rand::rngs::OsRng.try_fill_bytes(&mut b);
    u64::from_be_bytes(b) | 1
}

/// Acceptor: opens a set for `token` on `link`, replacing any earlier one.
pub(super) fn open_set(link: &Link, token: u64) -> mpsc::UnboundedReceiver<TcpConn> {
    let (tx, rx) = mpsc::unbounded_channel();
    *link.joining.lock().unwrap() = Some(Joining { token, tx });
    rx
}

/// Acceptor: waits for the `count` other connections of the set.
pub(super) async fn await_set(
    link: &Link,
    mut rx: mpsc::UnboundedReceiver<TcpConn>,
    count: usize,
    limit: Duration,
) -> Result<Vec<TcpConn>, String> {
    let mut got = Vec::with_capacity(count);
    let r = tokio::time::timeout(limit, async {
        while got.len() < count {
            match rx.recv().await {
                Some(c) => got.push(c),
                None => break,
            }
        }
    })
    .await;
    *link.joining.lock().unwrap() = None;
    match r {
        Ok(()) if got.len() == count => Ok(got),
        _ => Err(format!(
            "{} of {} striped connections joined within {:?}",
            got.len() + 1,
            count + 1,
            limit
        )),
    }
}

/// Acceptor: a connection from `peer` whose first frame was JOIN.
pub(super) fn join(shared: &Shared, peer: &PeerInfo, conn: TcpConn, session: u64, token: u64) {
    let link = shared.link_to(&peer.id).filter(|l| l.session == session);
    let slot = link.as_ref().and_then(|l| {
        let j = l.joining.lock().unwrap();
        j.as_ref()
            .filter(|j| j.token == token)
            .map(|j| j.tx.clone())
    });
    match slot {
        Some(tx) => {
            let _ = tx.send(conn);
        }
        None => {
            warn!(peer = %peer.id, remote = %conn.peer_addr(), "JOIN refused: no striped connection set of session {session:016x} is waiting for it");
        }
    }
}

/// Dialer: opens `count` more connections to `peer` and JOINs each to the set.
#[allow(clippy::too_many_arguments)]
pub(super) async fn dial_set(
    shared: &Arc<Shared>,
    peer: &Site,
    params: &WanParams,
    session: u64,
    token: u64,
    count: usize,
    limit: Duration,
) -> Result<Vec<TcpConn>, String> {
    let one = |i: usize| {
        let shared = shared.clone();
        let peer = peer.clone();
        let params = params.clone();
        async move {
            let n = i + 2;
            let (mut conn, _, _) = match dial(&shared, &peer, &params, limit).await {
                Ok(d) => d,
                Err(DialError::Connect(e)) => {
                    return Err(format!("striped connection {n}: connect: {e}"))
                }
                Err(DialError::Auth(e)) => return Err(format!("striped connection {n}: {e}")),
            };
            conn.send_frame(&Frame::Join { session, token })
                .await
                .map_err(|e| format!("striped connection {n}: JOIN: {e}"))?;
            debug!(peer = %peer.id, "striped connection {n} joined");
            Ok::<_, String>(conn)
        }
    };
    let mut set = tokio::task::JoinSet::new();
    for i in 0..count {
        set.spawn(one(i));
    }
    let mut conns = Vec::with_capacity(count);
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(c)) => conns.push(c),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("striped connection task: {e}")),
        }
    }
    Ok(conns)
}
