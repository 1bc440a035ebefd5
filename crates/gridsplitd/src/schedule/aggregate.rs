//! Aggregate: while the link is busy, small chunks of any number of flows pile up;
//! when it frees, all that fit go out packed in one BATCH frame — one header, one
//! write, often one TCP segment instead of many. This is NewMadeleine's
//! aggregation tactic applied to the WAN link, and it pays off for the many small
//! MPI messages of collective operations.
//!
//! Arrival order is kept (so it is FIFO with packing). A chunk above `SMALL` is
//! sent in a DATA frame of its own: packing it would save nothing.

use super::{Chunk, ChunkQueue, HeadRule, InOrder};
use crate::wire::{BatchEntry, FlowId, Frame, BATCH_ENTRY_HEADER, HEADER_LEN};

/// Chunks up to this size are worth packing together.
pub const SMALL: usize = 16 * 1024;

pub type Aggregate = InOrder<Pack>;

/// Aggregate's rule: the small chunks at the head packed into one BATCH.
pub struct Pack;

impl HeadRule for Pack {
    const NAME: &'static str = "aggregate";

    fn next_frame(q: &mut ChunkQueue, room: usize) -> Option<Frame> {
        let fits = |c: &Chunk, used: usize| {
            c.data.len() <= SMALL && used + BATCH_ENTRY_HEADER + c.data.len() <= room
        };
        let first = q.front()?;
        let packable = fits(first, HEADER_LEN)
            && q.get(1).is_some_and(|second| {
                fits(second, HEADER_LEN + BATCH_ENTRY_HEADER + first.data.len())
            });
        if !packable {
            return q.one_frame(room);
        }
        let mut used = HEADER_LEN;
        let mut entries = Vec::new();
        // Distinct flows in this batch, so a flow counts one frame however many
        // of its chunks the batch holds (few flows per batch: a scan is enough).
        let mut flows: Vec<FlowId> = Vec::new();
        while let Some(c) = q.front() {
            if !fits(c, used) {
                break;
            }
            let c = q.pop_front().expect("front exists");
            used += BATCH_ENTRY_HEADER + c.data.len();
            if let Some(l) = c.lease {
                let new_frame = !flows.contains(&c.flow);
                if new_frame {
                    flows.push(c.flow);
                }
                // Counts the bytes as sent, then returns the budget.
                l.sent(new_frame);
            }
            entries.push(BatchEntry {
                flow: c.flow,
                fin: c.fin,
                data: c.data,
            });
        }
        Some(Frame::Batch(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::Strategy;
    use super::*;

    #[test]
    fn small_chunks_of_several_flows_go_out_in_one_frame() {
        let mut s = Aggregate::default();
        for i in 0..12u32 {
            s.push(chunk(i % 4 + 1, 100 + i as usize, i as u8));
        }
        s.push(Chunk::fin(2));
        let frames = drain(&mut s, 64 * 1024);
        assert_eq!(frames.len(), 1, "one packed frame");
        let Frame::Batch(entries) = &frames[0] else {
            panic!("expected BATCH, got {:?}", frames[0])
        };
        assert_eq!(entries.len(), 13);
        let flows: Vec<u32> = entries.iter().map(|e| e.flow).collect();
        assert_eq!(flows, vec![1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 2]);
        assert!(entries[12].fin);
    }

    #[test]
    fn a_large_chunk_ends_the_batch_and_room_is_respected() {
        let mut s = Aggregate::default();
        s.push(chunk(1, 10, 1));
        s.push(chunk(2, 10, 2));
        s.push(chunk(3, 50_000, 3));
        s.push(chunk(1, 10, 4));
        let frames = drain(&mut s, 64 * 1024);
        assert!(matches!(&frames[0], Frame::Batch(e) if e.len() == 2));
        assert!(matches!(&frames[1], Frame::Data { flow: 3, .. }));
        assert!(matches!(&frames[2], Frame::Data { flow: 1, .. }));
        // A small room splits the packing into several frames.
        for i in 0..40 {
            s.push(chunk(i, 1000, 0));
        }
        let frames = drain(&mut s, 4096);
        assert!(frames.len() >= 10);
    }

    #[test]
    fn common_contract() {
        check_common(Box::new(Aggregate::default()));
    }
}
