//! The gateway's counters: plain atomics that every layer bumps and the admin
//! endpoint (admin.rs) reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::lanproto::Status;

macro_rules! counters {
    ($($name:ident: $kind:literal, $help:literal;)*) => {
        /// Gateway-wide counters. Relaxed atomics: they are statistics, read by
        /// /status and /metrics, and never used to synchronise anything.
        pub struct Metrics {
            $(pub $name: AtomicU64,)*
            /// GSa1 replies sent to nodes, by status code.
            pub replies: [AtomicU64; 7],
            /// Outcomes of OPENs received from peers, by status code.
            pub remote_opens: [AtomicU64; 7],
            pub started: Instant,
        }

        impl Default for Metrics {
            fn default() -> Self {
                Self {
                    $($name: AtomicU64::new(0),)*
                    replies: Default::default(),
                    remote_opens: Default::default(),
                    started: Instant::now(),
                }
            }
        }

        impl Metrics {
            /// (name, prometheus type, help, value) for every scalar counter.
            pub fn scalars(&self) -> Vec<(&'static str, &'static str, &'static str, u64)> {
                vec![$((stringify!($name), $kind, $help, self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    lan_accepted: "counter", "LAN connections accepted from nodes";
    flows_opened: "counter", "flows opened by our nodes and confirmed by the far gateway";
    flows_active: "gauge", "flows currently relaying (both origins)";
    flows_reset: "counter", "flows that ended in a reset";
    relayed_bytes_out: "counter", "application bytes sent on WAN links";
    relayed_bytes_in: "counter", "application bytes received on WAN links";
    wan_frames_out: "counter", "frames sent on WAN links";
    wan_frames_in: "counter", "frames received on WAN links";
    wan_bytes_out: "counter", "bytes (framing included) sent on WAN links";
    wan_bytes_in: "counter", "bytes (framing included) received on WAN links";
    batch_frames: "counter", "BATCH frames sent on WAN links (several chunks packed in one frame)";
    chunks_aggregated: "counter", "chunks sent packed together in BATCH frames";
    wan_direct_sends: "counter", "writes to a WAN link made by whoever queued a frame on an idle link (no writer-task wake-up)";
    wan_direct_partial: "counter", "direct WAN writes the socket took only in part (the rest went through the writer task)";
    wan_queued_sends: "counter", "writes to a WAN link made by its writer task (frames that waited: link busy or socket full)";
    lan_direct_writes: "counter", "writes of received data straight from the WAN reader to a LAN socket";
    lan_direct_partial: "counter", "direct LAN writes the socket took only in part (the rest went through the flow's task)";
    lan_queued_writes: "counter", "LAN writes made by a flow's own task (data that waited: socket full, or not yet open)";
    wan_protocol_errors: "counter", "WAN connections closed for malformed, oversized or out-of-order frames";
    wan_stale_frames: "counter", "frames for recently closed flows, dropped";
    auth_failures: "counter", "WAN peers that failed the handshake (bad key, unknown site, timeout, garbage)";
    wan_forged_messages: "counter", "WAN connections closed because a sealed message failed authentication (tampered, replayed, reordered)";
    key_reloads: "counter", "Key file reloads on SIGHUP that took effect";
    links_established: "counter", "WAN sessions started (a new session, not a resumed one)";
    wan_reconnects: "counter", "WAN connections that resumed an existing session after the previous one died";
    wan_connections_lost: "counter", "WAN connections that died under a live session (reset, silence, error)";
    wan_bytes_replayed: "counter", "bytes sent again on a new WAN connection because the peer had not received them";
    flows_reset_outage: "counter", "flows reset because their WAN link stayed down past outage_limit";
    sessions_expired: "counter", "sessions ended because their WAN link stayed down past outage_limit";
    resume_refused: "counter", "resume requests refused (unknown session or a received count out of range)";
    flows_refused_budget: "counter", "flow opens refused because open flows held the whole receive budget (total_buffer) for connect_timeout";
}

impl Metrics {
    pub fn reply_count(&self, s: Status) -> u64 {
        self.replies[s as usize].load(Ordering::Relaxed)
    }
}
