//! The SESSION exchange, right after AUTH on a session's first connection
//! (docs/protocol.md §4.1):
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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::TryRngCore;
use tokio::sync::mpsc;
use tracing::warn;

use super::establish::HANDSHAKE_TIMEOUT;
use super::stripes;
use super::{Link, Role};
use crate::auth::PeerInfo;
use crate::transfer::tcp::TcpConn;
use crate::transfer::WanConn;
use crate::wire::{Frame, FrameType, Session};
use crate::Shared;

/// A session ready for a connection, and where the peer's stream resumes.
pub(super) struct Ready {
    pub(super) link: Arc<Link>,
    pub(super) peer_received: u64,
    /// Connections agreed for this set (1 = unstriped), and the set's token.
    pub(super) streams: u8,
    pub(super) token: u64,
    /// Acceptor of a striped set: where the other connections arrive.
    pub(super) set: Option<mpsc::UnboundedReceiver<TcpConn>>,
}

impl Ready {
    /// `link` resumed, the peer's stream carrying on after `peer_received` bytes.
    fn resumed(link: Arc<Link>, peer_received: u64, streams: u8, token: u64) -> Ready {
        Ready {
            link,
            peer_received,
            streams,
            token,
            set: None,
        }
    }

    /// A new session `id` with `peer`, installed as the gateway's link to it.
    fn fresh(
        shared: &Arc<Shared>,
        peer: &PeerInfo,
        role: Role,
        id: u64,
        streams: u8,
        token: u64,
    ) -> Ready {
        let link = Link::new(shared, &peer.id, role, id, peer.max_frame);
        shared.install_link(link.clone());
        shared
            .metrics
            .links_established
            .fetch_add(1, Ordering::Relaxed);
        Ready::resumed(link, 0, streams, token)
    }
}

pub(super) fn fresh_session_id() -> u64 {
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
pub(super) async fn recv_first<C: WanConn>(conn: &mut C) -> Result<Frame, String> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.recv_frame()).await {
        Err(_) => Err("no SESSION frame within the handshake timeout".into()),
        Ok(Err(e)) => Err(format!("waiting for SESSION: {e}")),
        Ok(Ok(f)) => Ok(f),
    }
}

pub(super) fn as_session(f: Frame) -> Result<Session, String> {
    match f {
        Frame::Session(s) => Ok(s),
        f => Err(format!(
            "expected {:?} after AUTH, got {:?}",
            FrameType::Session,
            f.kind()
        )),
    }
}

pub(super) fn refuse_resume(shared: &Shared, peer: &str, why: &str) {
    shared
        .metrics
        .resume_refused
        .fetch_add(1, Ordering::Relaxed);
    warn!(%peer, "resume refused: {why}");
}

/// Ends `old` because the peer holds no state for it any more.
pub(super) fn end_session(shared: &Shared, old: &Arc<Link>, why: &str) {
    let flows = old.flow_count();
    warn!(peer = %old.peer, flows_reset = flows, "ending WAN session {:016x}: {why}", old.session);
    shared.remove_link(old);
    old.close();
}

/// The dialer's side of the SESSION exchange.
pub(super) async fn dialer_session<C: WanConn>(
    shared: &Arc<Shared>,
    conn: &mut C,
    peer: &PeerInfo,
    streams: u8,
) -> Result<Ready, String> {
    let old = shared.link_to(&peer.id);
    let (id, received, resume) = match &old {
        Some(l) => (l.session, l.received(), true),
        None => (fresh_session_id(), 0, false),
    };
    conn.send_frame(&Frame::Session(Session {
        session: id,
        received,
        resume,
        streams,
        token: 0,
    }))
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
                Ok(()) => return Ok(Ready::resumed(old, peer_received, streams, token)),
                Err(e) => {
                    refuse_resume(shared, &peer.id, &e.to_string());
                    end_session(shared, &old, "the peer's received count is out of range");
                    return Err(String::new());
                }
            }
        }
        end_session(shared, &old, "the peer holds no state for it (restarted?)");
    }
    Ok(Ready::fresh(shared, peer, Role::Dialer, id, streams, token))
}

/// The acceptor's side of the SESSION exchange, `first` being the dialer's.
pub(super) async fn acceptor_session<C: WanConn>(
    shared: &Arc<Shared>,
    conn: &mut C,
    peer: &PeerInfo,
    first: Session,
) -> Result<Ready, String> {
    let (id, peer_received, resume) = (first.session, first.received, first.resume);
    let streams = first
        .streams
        .min(shared.cfg.gateway_params(&peer.id).streams);
    let token = if streams > 1 {
        stripes::fresh_token()
    } else {
        0
    };
    let old = shared.link_to(&peer.id);
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
        (Some(link), Ok(())) => (Ready::resumed(link, peer_received, streams, token), true),
        (old, why) => {
            if let (true, Err(why)) = (resume, &why) {
                refuse_resume(shared, &peer.id, why);
            }
            if let Some(old) = old {
                end_session(shared, &old, "the peer started a new session");
            }
            let ready = Ready::fresh(shared, peer, Role::Acceptor, id, streams, token);
            (ready, false)
        }
    };
    let mut ready = ready;
    if streams > 1 {
        // Open before answering: the dialer's JOINs may follow at once.
        ready.set = Some(stripes::open_set(&ready.link, token));
    }
    let answer = Frame::Session(Session {
        session: id,
        received: if resumed { ready.link.received() } else { 0 },
        resume: resumed,
        streams,
        token,
    });
    conn.send_frame(&answer)
        .await
        .map_err(|e| format!("answering SESSION: {e}"))?;
    Ok(ready)
}
