//! Liveness of a session's connection: a PING every period, an ACK of what
//! was received when it changed, and the verdict that a connection silent for
//! DEAD_AFTER_PERIODS periods is dead (the session then reconnects and resumes;
//! docs/design/wan-sessions.md).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::ticker::Ticker;
use super::{Link, LinkError};
use crate::wire::Frame;

/// Silent keepalive periods after which a connection is declared dead.
pub const DEAD_AFTER_PERIODS: u32 = 5;

/// The keepalive of one connection: pings every `period`, acks what was
/// received since the last ACK, and ends with `Silent` when nothing at all
/// arrived for DEAD_AFTER_PERIODS periods.
pub(super) async fn keepalive(
    link: Arc<Link>,
    period: Duration,
    cancel: CancellationToken,
) -> Result<(), LinkError> {
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
        link.ack_received(1);
        link.queue_control(Frame::Ping { token });
        tokio::select! {
            r = tick.tick() => r.map_err(LinkError::Send)?,
            _ = cancel.cancelled() => return Ok(()),
        }
    }
}
