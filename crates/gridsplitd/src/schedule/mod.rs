//! The scheduling layer: what goes out next on a WAN link.
//!
//! Collect (the LAN side) pushes chunks of flows' bytes; when the transfer driver
//! has room (the "NIC is idle" moment of NewMadeleine) the link asks the strategy
//! for the next frame. Chunks accumulate while the link is busy, so a strategy sees
//! a window of pending work and can reorder or pack it, with no timer involved:
//! an idle link sends a chunk the moment it is pushed.
//!
//! Every strategy must keep each flow's chunks in order (a FIN chunk last), may
//! interleave flows as it likes, and may split a chunk (zero-copy) to fit a frame.
//! Strategies are plain data structures with no I/O, which is what lets them be
//! tested frame by frame below and chosen by one config key.

mod aggregate;
mod fair;
mod fifo;

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

pub use aggregate::Aggregate;
pub use fair::Fair;
pub use fifo::Fifo;

use crate::config::StrategyKind;
use crate::wire::{FlowId, Frame, DATA_HEADER, HEADER_LEN};

/// Something that lent buffer space to a chunk and wants it back.
pub trait Release: Send + Sync {
    fn release(&self, bytes: usize);
    /// `bytes` of the loan are going out on the WAN (just before `release`);
    /// `new_frame` is false for a further piece of the owner in the same BATCH.
    /// Lets a flow count what it sent without the link looking flows up.
    fn sent(&self, _bytes: usize, _new_frame: bool) {}
}

/// A loan of `bytes` of buffer budget, returned when dropped: whichever way a chunk
/// leaves the scheduler (sent, split, or discarded with its flow), its budget is
/// returned exactly once.
pub struct Lease {
    owner: Arc<dyn Release>,
    bytes: usize,
}

impl Lease {
    pub fn new(owner: Arc<dyn Release>, bytes: usize) -> Self {
        Self { owner, bytes }
    }

    /// Ends the loan because its bytes were put in a frame (not discarded).
    pub(crate) fn sent(self, new_frame: bool) {
        if self.bytes > 0 {
            self.owner.sent(self.bytes, new_frame);
        }
    }

    fn split_off_front(&mut self, n: usize) -> Lease {
        let n = n.min(self.bytes);
        self.bytes -= n;
        Lease {
            owner: self.owner.clone(),
            bytes: n,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.owner.release(self.bytes);
        }
    }
}

/// A piece of one flow's byte stream, or (empty, `fin`) its end.
pub struct Chunk {
    pub flow: FlowId,
    pub data: Bytes,
    pub fin: bool,
    pub lease: Option<Lease>,
}

impl Chunk {
    pub fn data(flow: FlowId, data: Bytes) -> Self {
        Self {
            flow,
            data,
            fin: false,
            lease: None,
        }
    }

    pub fn fin(flow: FlowId) -> Self {
        Self {
            flow,
            data: Bytes::new(),
            fin: true,
            lease: None,
        }
    }

    /// Splits off the first `n` bytes as their own chunk (never the FIN).
    fn split_to(&mut self, n: usize) -> Chunk {
        Chunk {
            flow: self.flow,
            data: self.data.split_to(n),
            fin: false,
            lease: self.lease.as_mut().map(|l| l.split_off_front(n)),
        }
    }

    /// Turns a chunk that fits into a frame of its own; the lease ends here.
    fn into_frame(mut self) -> Frame {
        if let Some(l) = self.lease.take() {
            l.sent(true);
        }
        if self.fin && self.data.is_empty() {
            Frame::Fin { flow: self.flow }
        } else {
            debug_assert!(!self.fin, "FIN chunks carry no data");
            Frame::Data {
                flow: self.flow,
                data: self.data,
            }
        }
    }
}

/// Largest DATA payload a frame of `room` bytes can carry.
pub(crate) fn data_room(room: usize) -> usize {
    room.saturating_sub(HEADER_LEN + DATA_HEADER).max(1)
}

/// Pops `c` into one frame, splitting it if it doesn't fit in `room`; the rest (if
/// any) is returned to go back at the head of its queue.
pub(crate) fn one_frame(mut c: Chunk, room: usize) -> (Frame, Option<Chunk>) {
    let max = data_room(room);
    if c.data.len() > max {
        let head = c.split_to(max);
        (head.into_frame(), Some(c))
    } else {
        (c.into_frame(), None)
    }
}

/// A FIFO of chunks that keeps the count of the bytes it holds: the state that
/// arrival-ordered strategies (fifo, aggregate) share.
#[derive(Default)]
pub struct ChunkQueue {
    q: std::collections::VecDeque<Chunk>,
    bytes: usize,
}

impl ChunkQueue {
    pub fn push_back(&mut self, chunk: Chunk) {
        self.bytes += chunk.data.len();
        self.q.push_back(chunk);
    }

    /// Puts back the unsent rest of a chunk, ahead of everything else.
    pub fn push_front(&mut self, chunk: Chunk) {
        self.bytes += chunk.data.len();
        self.q.push_front(chunk);
    }

    pub fn pop_front(&mut self) -> Option<Chunk> {
        let c = self.q.pop_front()?;
        self.bytes -= c.data.len();
        Some(c)
    }

    pub fn front(&self) -> Option<&Chunk> {
        self.q.front()
    }

    pub fn get(&self, i: usize) -> Option<&Chunk> {
        self.q.get(i)
    }

    /// The next frame holding the head chunk alone (or as much of it as fits).
    pub fn one_frame(&mut self, room: usize) -> Option<Frame> {
        let (frame, rest) = one_frame(self.pop_front()?, room);
        if let Some(rest) = rest {
            self.push_front(rest);
        }
        Some(frame)
    }

    pub fn remove_flow(&mut self, flow: FlowId) {
        let bytes = &mut self.bytes;
        self.q.retain(|c| {
            let keep = c.flow != flow;
            if !keep {
                *bytes -= c.data.len();
            }
            keep
        });
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// A scheduling strategy. Implementations live one per file in this module.
pub trait Strategy: Send {
    fn name(&self) -> &'static str;
    fn push(&mut self, chunk: Chunk);
    /// The next frame to send, at most `room` bytes on the wire, or None if idle.
    fn next_frame(&mut self, room: usize) -> Option<Frame>;
    /// Discards everything queued for `flow` (it was reset); leases are returned.
    fn remove_flow(&mut self, flow: FlowId);
    fn queued_bytes(&self) -> usize;
    fn is_empty(&self) -> bool;
}

/// How an arrival-ordered strategy turns the head of its queue into the next
/// frame: the one thing fifo and aggregate do differently.
pub trait HeadRule {
    const NAME: &'static str;
    /// The next frame, at most `room` bytes, taken from the front of `q`.
    fn next_frame(q: &mut ChunkQueue, room: usize) -> Option<Frame>;
}

/// A strategy that keeps chunks in arrival order in one `ChunkQueue` and frames
/// them by the rule `R`.
pub struct InOrder<R> {
    q: ChunkQueue,
    rule: PhantomData<fn() -> R>,
}

impl<R> Default for InOrder<R> {
    fn default() -> Self {
        Self {
            q: ChunkQueue::default(),
            rule: PhantomData,
        }
    }
}

impl<R: HeadRule> Strategy for InOrder<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn push(&mut self, chunk: Chunk) {
        self.q.push_back(chunk);
    }

    fn next_frame(&mut self, room: usize) -> Option<Frame> {
        R::next_frame(&mut self.q, room)
    }

    fn remove_flow(&mut self, flow: FlowId) {
        self.q.remove_flow(flow);
    }

    fn queued_bytes(&self) -> usize {
        self.q.bytes()
    }

    fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

pub fn build(kind: StrategyKind) -> Box<dyn Strategy> {
    match kind {
        StrategyKind::Fifo => Box::new(Fifo::default()),
        StrategyKind::Aggregate => Box::new(Aggregate::default()),
        StrategyKind::Fair => Box::new(Fair::default()),
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    pub struct Counter(pub AtomicUsize);

    impl Release for Counter {
        fn release(&self, bytes: usize) {
            self.0.fetch_add(bytes, Ordering::SeqCst);
        }
    }

    pub fn chunk(flow: FlowId, len: usize, fill: u8) -> Chunk {
        Chunk::data(flow, Bytes::from(vec![fill; len]))
    }

    /// Flattens frames into (flow, bytes, fin) pieces in wire order.
    pub fn pieces(frames: &[Frame]) -> Vec<(FlowId, Vec<u8>, bool)> {
        let mut out = Vec::new();
        for f in frames {
            match f {
                Frame::Data { flow, data } => out.push((*flow, data.to_vec(), false)),
                Frame::Fin { flow } => out.push((*flow, vec![], true)),
                Frame::Batch(es) => {
                    for e in es {
                        out.push((e.flow, e.data.to_vec(), e.fin));
                    }
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        out
    }

    pub fn drain(s: &mut dyn Strategy, room: usize) -> Vec<Frame> {
        let mut v = Vec::new();
        while let Some(f) = s.next_frame(room) {
            assert!(
                f.wire_len() <= room,
                "frame of {} bytes > room {room}",
                f.wire_len()
            );
            v.push(f);
        }
        assert!(s.is_empty());
        assert_eq!(s.queued_bytes(), 0);
        v
    }

    /// Every strategy must preserve each flow's byte order and put FIN last.
    pub fn per_flow_streams(
        frames: &[Frame],
    ) -> std::collections::BTreeMap<FlowId, (Vec<u8>, bool)> {
        let mut m: std::collections::BTreeMap<FlowId, (Vec<u8>, bool)> = Default::default();
        for (flow, data, fin) in pieces(frames) {
            let e = m.entry(flow).or_default();
            assert!(!e.1, "data after FIN on flow {flow}");
            e.0.extend_from_slice(&data);
            e.1 |= fin;
        }
        m
    }

    pub fn check_common(mut s: Box<dyn Strategy>) {
        let counter = Arc::new(Counter::default());
        let mut expect: std::collections::BTreeMap<FlowId, Vec<u8>> = Default::default();
        let mut total = 0;
        for i in 0..200u32 {
            let flow = i % 7 + 1;
            let len = [1usize, 100, 5000, 70_000, 3][i as usize % 5];
            let data: Vec<u8> = (0..len).map(|j| (i as usize * 31 + j) as u8).collect();
            expect.entry(flow).or_default().extend_from_slice(&data);
            total += len;
            let mut c = Chunk::data(flow, Bytes::from(data));
            c.lease = Some(Lease::new(counter.clone(), len));
            s.push(c);
        }
        for flow in 1..=7 {
            s.push(Chunk::fin(flow));
        }
        assert_eq!(s.queued_bytes(), total);
        let frames = drain(s.as_mut(), 32 * 1024);
        let got = per_flow_streams(&frames);
        for (flow, data) in expect {
            assert_eq!(got[&flow].0, data, "flow {flow} bytes");
            assert!(got[&flow].1, "flow {flow} FIN");
        }
        assert_eq!(
            counter.0.load(std::sync::atomic::Ordering::SeqCst),
            total,
            "every lease returned"
        );

        // remove_flow discards and returns the budget.
        let c2 = Arc::new(Counter::default());
        let mut c = chunk(9, 1000, 1);
        c.lease = Some(Lease::new(c2.clone(), 1000));
        s.push(c);
        s.push(chunk(10, 10, 2));
        s.remove_flow(9);
        assert_eq!(c2.0.load(std::sync::atomic::Ordering::SeqCst), 1000);
        assert_eq!(
            pieces(&drain(s.as_mut(), 4096)),
            vec![(10, vec![2; 10], false)]
        );
    }
}
