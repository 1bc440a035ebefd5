//! The receive path of a session's connection: the reader task takes frames
//! from the transport, judges each against the session's state and acts on it,
//! counts the bytes handled (what a resume starts from), and acks them.
//!
//! The reader handles every frame already received, then writes each touched
//! flow's data straight to its LAN socket (flow/mod.rs, `Flow::flush_to_lan`): one
//! write per flow per burst instead of one per frame. Its only wait is for the
//! next frame, with nothing touched pending, so stopping it there (a connection
//! replaced or lost) leaves no frame half handled: `received` is exact.
//!
//! Anything the codec accepts but that makes no sense here (DATA beyond credit,
//! a frame for a flow id that was never opened, a second HELLO) is a protocol
//! violation: the session ends with one log line and a counter, and its flows
//! (and only its flows) are reset. Frames for flows that *were* open but have
//! since closed are expected (the two gateways close concurrently) and are
//! dropped quietly.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{Link, LinkError};
use crate::flow::{Flow, Origin};
use crate::transfer::WanRx;
use crate::wire::Frame;

/// Received bytes after which an ACK goes out at the end of a burst (the
/// keepalive acks the rest): small against a credit window, so the peer's
/// replay buffer stays near what its credit allows.
pub const ACK_EVERY: u64 = 64 * 1024;

impl Link {
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
                    let f = self.new_flow(flow, Origin::Remote, src, dst);
                    t.flows.insert(flow, f.clone());
                    f
                };
                f.add_credit(window);
                tokio::spawn((self.shared.on_open)(
                    self.shared.clone(),
                    self.clone(),
                    f,
                    dst,
                    src,
                ));
            }
            Frame::Ping { token } => self.queue_control(Frame::Pong { token }),
            Frame::Pong { .. } => {}
            Frame::Ack { received } => {
                let r = self.send.lock().unwrap().replay.ack(received);
                r.map_err(|e| LinkError::Sequence(format!("ACK: {e}")))?;
            }
            // The peer's gateway is stopping: the session ends here too, now.
            Frame::Session(s) if !s.resume && s.session == self.session => {
                return Err(LinkError::PeerEnded)
            }
            Frame::Hello { .. } | Frame::Auth { .. } | Frame::Session(_) | Frame::Join { .. } => {
                return Err(LinkError::Violation(
                    "handshake frame on an established link".into(),
                ));
            }
            // The striping driver consumes these; inside a link's stream they
            // mean the peer nested them, or stripes a link we run unstriped.
            Frame::Stripe { .. } => {
                return Err(LinkError::Violation(
                    "STRIPE frame inside the link stream".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The reader task of one connection: until the transport fails, a frame
/// breaks the protocol, or the connection is cancelled.
pub(super) async fn reader<R: WanRx>(
    link: Arc<Link>,
    mut rx: R,
    cancel: CancellationToken,
) -> LinkError {
    let shared = link.shared.clone();
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
        link.handle(f, touched)?;
        link.received.fetch_add(wire_len, Ordering::Relaxed);
        Ok::<(), LinkError>(())
    };
    loop {
        let f = tokio::select! {
            r = rx.recv() => match r {
                Ok(f) => f,
                Err(e) => return LinkError::from(e),
            },
            _ = cancel.cancelled() => return LinkError::Superseded,
        };
        if let Err(e) = handle(f, &mut touched) {
            return e;
        }
        // Everything already received, before writing anything to the LAN.
        let mut end = None;
        loop {
            match rx.try_recv() {
                Ok(Some(f)) => {
                    if let Err(e) = handle(f, &mut touched) {
                        end = Some(e);
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    end = Some(LinkError::from(e));
                    break;
                }
            }
        }
        for f in touched.drain(..) {
            f.flush_to_lan(&*link);
        }
        if let Some(e) = end {
            return e;
        }
        link.ack_received(ACK_EVERY);
    }
}
