//! The send path of a session: what goes on the wire next, who writes it, and
//! the record of it kept for a resume.
//!
//! Who writes to the WAN socket: one writer at a time holds the wire
//! (`SendQueue::wire_busy`). When a frame is queued and nobody holds it (the link
//! is idle) the caller itself (a flow's LAN reader, or the link reader sending a
//! CREDIT) takes the wire, lets the control queue and the strategy fill one write
//! as the writer task would, and writes without waiting. Only what the socket does
//! not take at once goes to the writer task. So a message on an idle link costs no
//! task wake-up, and whenever frames pile up (the link busy) they wait in the
//! strategy, which decides what goes next.
//!
//! Every byte committed to the stream is also recorded in the session's replay
//! buffer (replay.rs) under the same lock, in wire order. While the session has
//! no connection (`tx` is None) nothing is written: chunks wait in the strategy,
//! the flows' credit runs out, and TCP back-pressure stops the nodes.
//! `gen` names the connection a write was started on, so that a direct sender
//! that finishes after its connection was replaced leaves no stale leftovers.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use bytes::Bytes;

use super::replay::Replay;
use super::{Link, LinkError};
use crate::flow::FAST_MAX;
use crate::schedule::{Chunk, Strategy};
use crate::transfer::{WanTx, WanTxNow};
use crate::wire::{self, Frame, OutBuf};

pub(super) struct SendQueue {
    /// Link-level frames (OPEN, OPEN_REPLY, CREDIT, RESET, PING/PONG, ACK). They
    /// go before data. At most a handful per flow are ever outstanding (one OPEN
    /// or OPEN_REPLY, one RESET, and CREDIT only after the peer used credit), so
    /// this queue is bounded by the number of flows.
    pub control: VecDeque<Frame>,
    pub strategy: Box<dyn Strategy>,
    /// Someone (the writer task or a direct sender) is writing to the transport;
    /// everybody else queues.
    pub wire_busy: bool,
    /// Bytes already committed to the stream (and recorded) that no write has
    /// taken yet: the unsent part of a direct write, or a resume's replay. They
    /// go out first, through the writer task.
    pub leftover: Vec<Bytes>,
    /// The direct senders' encode buffer, kept so its allocation is reused.
    pub spare: Option<OutBuf>,
    /// The current connection's sending half; None while the session has none.
    pub tx: Option<Arc<dyn WanTxNow>>,
    /// Incremented for every connection the session gets.
    pub gen: u64,
    pub replay: Replay,
}

impl SendQueue {
    pub fn new(strategy: Box<dyn Strategy>) -> Self {
        SendQueue {
            control: VecDeque::new(),
            strategy,
            wire_busy: false,
            leftover: Vec::new(),
            spare: None,
            tx: None,
            gen: 0,
            replay: Replay::default(),
        }
    }

    pub fn has_work(&self) -> bool {
        !self.leftover.is_empty() || !self.control.is_empty() || !self.strategy.is_empty()
    }

    /// Fills `out` with what goes next, up to `room` bytes: unsent leftovers,
    /// control frames, then whatever the strategy picks. What is new is recorded
    /// for a resume.
    pub fn fill(&mut self, out: &mut OutBuf, room: usize, max_frame: usize) -> Filled {
        let mut n = Filled::default();
        out.push_raw(self.leftover.drain(..));
        let mark = out.mark();
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
        self.replay.record(out.sealed_since(mark));
        n
    }
}

/// What one `fill` put in a write, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Filled {
    pub frames: u64,
    /// Application bytes.
    pub data: u64,
    /// BATCH frames, and the chunks they packed together.
    pub batches: u64,
    pub packed: u64,
}

impl Link {
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

    /// Discards what a reset flow still had queued (returning its budget).
    pub fn drop_queued(&self, flow: wire::FlowId) {
        self.send.lock().unwrap().strategy.remove_flow(flow);
    }

    /// Something was just queued. If the wire is free, send what is queued now from
    /// this thread, without waiting; otherwise (or for what the socket won't take
    /// at once) wake the writer task. Without a connection, it all waits.
    fn kick(&self, mut q: MutexGuard<'_, SendQueue>) {
        let Some(tx) = q.tx.clone() else {
            return;
        };
        if q.wire_busy || !q.leftover.is_empty() || self.is_closed() {
            drop(q);
            self.wake.notify_one();
            return;
        }
        q.wire_busy = true;
        let gen = q.gen;
        let mut out = q.spare.take().unwrap_or_default();
        let filled = q.fill(&mut out, tx.room(), self.max_frame);
        drop(q);
        let mut segs = out.take_segments();
        let total: usize = segs.iter().map(|b| b.len()).sum();
        // An error is left for the writer task to hit and report: it owns the
        // connection's failure path.
        let res = tx.try_send(&mut segs);
        let written = total - segs.iter().map(|b| b.len()).sum::<usize>();
        if matches!(res, Ok(true)) {
            segs.clear();
        }
        self.end_direct(gen, segs, Some(out), filled, written);
    }

    /// Ends a direct write (`kick`, `send_data_now`): frees the wire, leaves
    /// what the socket did not take (or what failed: the writer task will hit the
    /// error and report it) to the writer task, and counts the write. If the
    /// connection changed meanwhile, the unsent rest is dropped: the replay
    /// already holds it, and the new connection starts from there.
    fn end_direct(
        &self,
        gen: u64,
        unsent: Vec<Bytes>,
        spare: Option<OutBuf>,
        filled: Filled,
        written: usize,
    ) {
        let mut q = self.send.lock().unwrap();
        if spare.is_some() {
            q.spare = spare;
        }
        let more = if q.gen == gen {
            q.wire_busy = false;
            if !unsent.is_empty() {
                self.metrics()
                    .wan_direct_partial
                    .fetch_add(1, Ordering::Relaxed);
                q.leftover = unsent;
            }
            q.has_work()
        } else {
            false
        };
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
    /// strategy), writes `frame` (a whole DATA frame of `data_len` bytes, prefix
    /// from `wire::data_prefix`) with one send, and returns true. Otherwise
    /// returns false and the caller queues the chunk as usual (`push_chunk`).
    ///
    /// This is what `push_chunk` + `kick` would put on the wire: every strategy
    /// sends a lone chunk of at most `FAST_MAX` bytes as one DATA frame (fair's
    /// quantum and aggregate's packing threshold are both 16 KiB). It only skips
    /// the strategy's bookkeeping, the lease and the frame encoding, costs paid
    /// on every message of a ping-pong. The frame is copied once, into the
    /// replay buffer.
    pub fn send_data_now(&self, frame: &[u8], data_len: usize) -> bool {
        debug_assert!(data_len <= FAST_MAX && frame.len() == wire::DATA_PREFIX + data_len);
        let (tx, gen) = {
            let mut q = self.send.lock().unwrap();
            let Some(tx) = q.tx.clone() else {
                return false;
            };
            if q.wire_busy || q.has_work() || self.is_closed() {
                return false;
            }
            q.wire_busy = true;
            q.replay.record([&Bytes::copy_from_slice(frame)]);
            (tx, q.gen)
        };
        // An error is left for the writer task to hit and report, as in `kick`:
        // the unsent frame becomes its leftover.
        let written = tx.try_send_slice(frame).unwrap_or(0);
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
        self.end_direct(gen, unsent, None, filled, written);
        true
    }

    pub(super) fn count_out(&self, n: Filled, bytes: u64) {
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

    /// Gives the session a new connection's sending half, with what the peer
    /// lacks (from `received` on, already checked) queued to go first. Returns
    /// the connection's generation and the bytes to replay.
    pub(super) fn attach_tx(&self, tx: Arc<dyn WanTxNow>, received: u64) -> (u64, u64) {
        let mut q = self.send.lock().unwrap();
        q.gen += 1;
        q.tx = Some(tx);
        q.wire_busy = false;
        q.leftover = q.replay.resume_from(received);
        let replayed: u64 = q.leftover.iter().map(|b| b.len() as u64).sum();
        (q.gen, replayed)
    }

    /// The connection `gen` is gone: nothing is written until the next one.
    pub(super) fn detach_tx(&self, gen: u64) {
        let mut q = self.send.lock().unwrap();
        if q.gen == gen {
            q.tx = None;
            q.wire_busy = false;
            q.leftover.clear();
        }
    }
}

/// The writer task of connection `gen`: sends whatever direct senders left
/// queued (the link was busy, or the socket full), waiting for room in the
/// transport as needed. Ends when the connection is replaced or cancelled.
pub(super) async fn writer<T: WanTx>(
    link: Arc<Link>,
    tx: Arc<T>,
    gen: u64,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<(), LinkError> {
    let mut out = OutBuf::new();
    loop {
        let taken = {
            let mut q = link.send.lock().unwrap();
            if q.gen != gen {
                return Ok(());
            }
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
                _ = cancel.cancelled() => return Ok(()),
            }
        };
        let n = out.len() as u64;
        tokio::select! {
            r = tx.send(&mut out) => r.map_err(LinkError::Send)?,
            _ = cancel.cancelled() => return Ok(()),
        }
        {
            let mut q = link.send.lock().unwrap();
            if q.gen == gen {
                q.wire_busy = false;
            }
        }
        link.metrics()
            .wan_queued_sends
            .fetch_add(1, Ordering::Relaxed);
        link.count_out(filled, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StrategyKind;
    use crate::flow::Flow;
    use crate::schedule;
    use crate::wire::decode_slice;
    use std::net::SocketAddr;

    fn queue(kind: StrategyKind) -> SendQueue {
        SendQueue::new(schedule::build(kind))
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

    /// Whoever fills a write (a direct sender or the writer task) sends the
    /// unsent rest of the previous write first, then control frames, then what
    /// the strategy picks among the pending chunks (here fair's interleaving,
    /// not arrival order). Only the new frames are recorded for a resume.
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
        let all = out.concat();
        assert_eq!(
            q.replay.held() as usize,
            all.len() - rest.len(),
            "the leftover was recorded when it was first committed"
        );
        let got = frames(&all);
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

    /// What a resume replays is byte for byte what was committed after the
    /// peer's received count: here the last two of four frames.
    #[test]
    fn a_resume_replays_exactly_the_unreceived_frames() {
        let mut q = queue(StrategyKind::Fifo);
        let mut wire = Vec::new();
        for i in 0..4u32 {
            q.strategy
                .push(Chunk::data(i * 2 + 1, Bytes::from(vec![i as u8; 3000])));
            let mut out = OutBuf::new();
            q.fill(&mut out, 1 << 20, 65536);
            wire.extend_from_slice(&out.concat());
        }
        let received = (2 * (wire::DATA_PREFIX + 3000)) as u64;
        q.replay.check(received).unwrap();
        let again: Vec<u8> = q
            .replay
            .resume_from(received)
            .iter()
            .flat_map(|b| b.to_vec())
            .collect();
        assert_eq!(&again[..], &wire[received as usize..]);
        let flows: Vec<u32> = frames(&again)
            .iter()
            .map(|f| match f {
                Frame::Data { flow, .. } => *flow,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(flows, vec![5, 7]);
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
        use crate::flow::Origin;
        use crate::schedule::Lease;
        let mut q = queue(StrategyKind::Aggregate);
        let pool = Arc::new(tokio::sync::Semaphore::new(0));
        let any: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let limits = crate::config::Limits {
            per_flow_buffer: 1 << 20,
            total_buffer: 1 << 24,
            max_frame: 65536,
        };
        let flows: Vec<Arc<Flow>> = [1, 3]
            .iter()
            .map(|&id| Flow::new(id, pool.clone(), &limits, Origin::Local, any, any))
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

    /// Passes `sent` on to a flow but not `release`: the test lent no budget.
    struct Sent(Arc<Flow>);

    impl crate::schedule::Release for Sent {
        fn release(&self, _: usize) {}
        fn sent(&self, bytes: usize, new_frame: bool) {
            crate::schedule::Release::sent(&*self.0, bytes, new_frame);
        }
    }
}
