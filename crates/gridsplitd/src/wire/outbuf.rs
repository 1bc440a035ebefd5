//! `OutBuf`, the queue of encoded bytes waiting for a WAN socket: the encoder
//! appends to it, the transfer drivers write its segments with one vectored
//! write, and the session's replay buffer keeps the segments it hands out.

use bytes::{Bytes, BytesMut};

/// Bytes waiting to be written to a WAN socket, as a list of segments ready for a
/// vectored write. Small pieces are coalesced into the current contiguous run;
/// payloads of at least `ATTACH_MIN` bytes are referenced, not copied.
pub struct OutBuf {
    segs: Vec<Bytes>,
    /// The current contiguous run (headers and small payloads); the encoder
    /// writes into it directly.
    pub(super) head: BytesMut,
    len: usize,
}

/// Below this size copying into the header run is cheaper than one more iovec.
const ATTACH_MIN: usize = 1024;

impl Default for OutBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl OutBuf {
    pub fn new() -> Self {
        Self {
            segs: Vec::new(),
            head: BytesMut::with_capacity(4096),
            len: 0,
        }
    }

    pub(super) fn attach(&mut self, data: &Bytes) {
        if data.len() < ATTACH_MIN {
            self.head.extend_from_slice(data);
        } else {
            self.seal();
            self.len += data.len();
            self.segs.push(data.clone());
        }
    }

    /// Closes the current contiguous run so the next piece starts a new segment.
    fn seal(&mut self) {
        if !self.head.is_empty() {
            let run = self.head.split().freeze();
            self.len += run.len();
            self.segs.push(run);
        }
    }

    /// Total bytes queued.
    pub fn len(&self) -> usize {
        self.len + self.head.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends already-encoded bytes (the unsent rest of an earlier write) as they are.
    pub fn push_raw(&mut self, segs: impl IntoIterator<Item = Bytes>) {
        self.seal();
        for s in segs {
            self.len += s.len();
            self.segs.push(s);
        }
    }

    /// Where the next piece will start, as a segment index (for `sealed_since`).
    pub fn mark(&mut self) -> usize {
        self.seal();
        self.segs.len()
    }

    /// The segments added since `mark`, sealed (the session's replay buffer
    /// records them as they are committed to the wire).
    pub fn sealed_since(&mut self, mark: usize) -> &[Bytes] {
        self.seal();
        &self.segs[mark..]
    }

    /// Finishes the buffer and hands out its segments (in order).
    pub fn take_segments(&mut self) -> Vec<Bytes> {
        self.seal();
        self.len = 0;
        std::mem::take(&mut self.segs)
    }

    pub fn concat(&mut self) -> Bytes {
        let segs = self.take_segments();
        if segs.len() == 1 {
            return segs.into_iter().next().unwrap();
        }
        let mut all = BytesMut::with_capacity(segs.iter().map(|s| s.len()).sum());
        for s in segs {
            all.extend_from_slice(&s);
        }
        all.freeze()
    }
}
