//! FIFO: chunks leave in the order they arrived, one frame each. The baseline the
//! other strategies are measured against, and the lowest per-chunk overhead.

use super::{ChunkQueue, HeadRule, InOrder};
use crate::wire::Frame;

pub type Fifo = InOrder<OneEach>;

/// Fifo's rule: the head chunk in a frame of its own.
pub struct OneEach;

impl HeadRule for OneEach {
    const NAME: &'static str = "fifo";

    fn next_frame(q: &mut ChunkQueue, room: usize) -> Option<Frame> {
        q.one_frame(room)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::Strategy;
    use super::*;

    #[test]
    fn arrival_order_is_kept_across_flows() {
        let mut s = Fifo::default();
        s.push(chunk(1, 10, 1));
        s.push(chunk(2, 20, 2));
        s.push(chunk(1, 30, 3));
        s.push(super::super::Chunk::fin(2));
        let got = pieces(&drain(&mut s, 4096));
        assert_eq!(
            got,
            vec![
                (1, vec![1; 10], false),
                (2, vec![2; 20], false),
                (1, vec![3; 30], false),
                (2, vec![], true)
            ]
        );
    }

    #[test]
    fn big_chunks_are_split_to_fit() {
        let mut s = Fifo::default();
        s.push(chunk(1, 10_000, 7));
        let frames = drain(&mut s, 4096);
        assert_eq!(frames.len(), 3);
        assert_eq!(per_flow_streams(&frames)[&1].0, vec![7; 10_000]);
    }

    #[test]
    fn common_contract() {
        check_common(Box::new(Fifo::default()));
    }
}
