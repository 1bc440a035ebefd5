//! The striped WAN driver: one link over K parallel TCP connections ("lanes").
//!
//! Why: one TCP connection over a lossy long path is held to about
//! MSS/RTT × 1.22/√p (Mathis et al.), far below the link rate, and a loss on it
//! stalls every flow of the link for a recovery. Over K connections a loss
//! halves one lane's window, not the link's, and the link's rate is about K
//! times one connection's (docs/design/wan-striping.md has the measurements
//! and the choice against per-flow pinning and MPTCP).
//!
//! How: the link's frame stream (what transfer/tcp.rs would write on one socket)
//! is cut into pieces of at most `piece` bytes, numbered 0, 1, 2... for this
//! set of connections; each piece goes, whole and as one STRIPE frame, on the
//! first lane (round robin) whose socket takes it now. A lane whose socket is
//! full — its window shrank after a loss, or it is in recovery — is skipped, so
//! new pieces go where they move. The receiver keeps one queue per lane (a
//! lane's pieces arrive in order) and appends the piece numbered `next` to the
//! rebuilt stream, from which frames are decoded as on one connection. Pieces
//! behind a stalled one wait in those queues, at most `REORDER_MAX` bytes per
//! lane; then that lane is not read until the stalled piece arrives, and TCP's
//! flow control holds its sender. Per-flow order holds because the whole stream
//! is rebuilt in order, and one large flow is spread like any other.
//!
//! A small piece that ends a burst (no piece follows it within TAIL_DELAY) is
//! sent once more, on another lane: on a lane carrying a sparse stream, a loss
//! of a burst's last segments is repaired only by a tail-loss probe, while the
//! whole link waits for it. The receiver uses the first copy of a piece and
//! drops a piece numbered below the one it needs next.
//!
//! The session layer above (link/) sees one ordered stream, so resuming after an
//! outage works unchanged: a broken lane ends the whole set, and the next set
//! starts again at piece 0 from the session's replay point.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use super::seal::{OpenRx, SealTx};
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::tcp::{self, TcpConn, READ_BLOCK, WRITE_BATCH};
use super::{FdProbe, RecvError, WanConn, WanRx, WanTx, WanTxNow};
use crate::tune;
use crate::wire::{self, Frame, OutBuf, WireError, HEADER_LEN, STRIPE_HEADER};

/// Largest piece: small enough that a piece does not hold a lane's socket for
/// long, large enough that the 16-byte STRIPE header costs nothing (0.02 %).
const PIECE_MAX: usize = 64 * 1024;
/// Bytes a receiver holds per lane ahead of the rebuilt stream (pieces waiting
/// for an earlier one on another lane, and unparsed reads): while a lane stalls
/// in loss recovery, about one RTT of the others' traffic.
const REORDER_MAX: usize = 4 << 20;
/// Largest piece copied when it ends a burst: a small exchange's message fits; a
/// larger last piece would cost more bandwidth than the probe it saves.
const TAIL_COPY_MAX: usize = 16 * 1024;
/// How long the link must stay without a new piece for the last one to count as a
/// burst's tail: well under a WAN round trip (the probe it stands in for waits two),
/// well over the gaps between the pieces of one burst. Copying every small piece at
/// once instead doubled the link's bytes and flooded the far gateway's port
/// (docs/design/wan-striping.md, "Copies of a burst's last piece").
const TAIL_DELAY: std::time::Duration = std::time::Duration::from_millis(2);

/// The connections of a striped link; `lanes[0]` carried the handshake.
pub struct StripedConn {
    lanes: Vec<TcpConn>,
    /// The largest frame the peer accepts.
    peer_max_frame: usize,
}

impl StripedConn {
    /// Stripes over `first` (which carried AUTH and SESSION) and the joined
    /// `others`. Each lane gets `params` with the pacing cap shared out, so
    /// that the set together keeps to it.
    pub fn new(first: TcpConn, others: Vec<TcpConn>, peer_max_frame: usize) -> (Self, Vec<String>) {
        let mut lanes = Vec::with_capacity(1 + others.len());
        lanes.push(first);
        lanes.extend(others);
        let k = lanes.len() as u64;
        let mut warnings = Vec::new();
        for l in &mut lanes {
            let mut p = l.params().clone();
            p.pacing_bps /= k;
            warnings.extend(l.retune(&p));
        }
        warnings.dedup();
        (
            Self {
                lanes,
                peer_max_frame,
            },
            warnings,
        )
    }
}

impl WanConn for StripedConn {
    type Tx = StripedTx;
    type Rx = StripedRx;
    type Probe = FdProbe;

    /// Handshake frames go on the first connection only, before `split`.
    async fn send_frame(&mut self, f: &Frame) -> io::Result<()> {
        self.lanes[0].send_frame(f).await
    }

    async fn recv_frame(&mut self) -> Result<Frame, RecvError> {
        self.lanes[0].recv_frame().await
    }

    fn peer_addr(&self) -> SocketAddr {
        self.lanes[0].peer_addr()
    }

    fn split(self) -> (StripedTx, StripedRx, FdProbe) {
        let mut streams = Vec::new();
        let mut seals = Vec::new();
        let mut rx_lanes = Vec::new();
        let mut fds = Vec::new();
        let mut recv_max = 0;
        let batch = tune::target_lowat(self.lanes[0].params()).min(WRITE_BATCH);
        for l in self.lanes {
            // Each lane has its own keys (its own Noise handshake), so a
            // piece is sealed for the lane it goes on (seal.rs).
            let (stream, rbuf, max, p, crypto) = l.into_parts();
            let (seal, open) = match crypto {
                Some((tx, rx)) => (Some(Mutex::new(tx)), Some(rx)),
                None => (None, None),
            };
            seals.push(seal);
            let quickack = p.quickack;
            if let Ok(fd) = stream.as_fd().try_clone_to_owned() {
                fds.push((fd, p));
            }
            recv_max = max;
            let stream = Arc::new(stream);
            streams.push(stream.clone());
            rx_lanes.push(LaneRx {
                stream,
                rbuf,
                open,
                quickack,
                pieces: VecDeque::new(),
                held: 0,
                last: None,
            });
        }
        let piece = PIECE_MAX
            .min(batch)
            .min(self.peer_max_frame - HEADER_LEN - STRIPE_HEADER);
        let tx = StripedTx::start(streams, seals, piece, batch);
        let rx = StripedRx {
            lanes: rx_lanes,
            next: 0,
            start: 0,
            stream: BytesMut::with_capacity(READ_BLOCK),
            max: recv_max,
        };
        (tx, rx, FdProbe::new(fds.len(), fds))
    }
}

/// A lane's sending state. A piece the socket took only part of is finished
/// by the lane's flusher task; until then the lane takes no new piece.
#[derive(Default)]
struct LaneTx {
    rest: Vec<Bytes>,
    /// The flusher task holds `rest` and is writing it.
    flushing: bool,
}

impl LaneTx {
    fn idle(&self) -> bool {
        self.rest.is_empty() && !self.flushing
    }
}

struct TxState {
    /// Number of the next piece.
    seq: u64,
    /// Lane to try first (round robin).
    next: usize,
    lanes: Vec<LaneTx>,
    /// A flusher's write failed: the connection set is dead.
    failed: Option<io::ErrorKind>,
    /// The last piece sent, if small: (its lane, its STRIPE frame). Every piece
    /// replaces it, so it is always the piece numbered `seq - 1`.
    tail: Option<(usize, Vec<Bytes>)>,
}

struct TxShared {
    streams: Vec<Arc<TcpStream>>,
    /// Per lane, its sealing state (None: insecure link).
    seals: Vec<Option<Mutex<SealTx>>>,
    state: Mutex<TxState>,
    /// One per lane: its flusher has a rest to write.
    flush: Vec<Notify>,
    /// A lane became idle again (or failed).
    idle: Notify,
    /// A small piece was sent (wakes the tail task).
    tail: Notify,
}

pub struct StripedTx {
    shared: Arc<TxShared>,
    piece: usize,
    batch: usize,
    /// Stops the flusher tasks with the sending half.
    _stop: DropGuard,
}

impl StripedTx {
    fn start(
        streams: Vec<Arc<TcpStream>>,
        seals: Vec<Option<Mutex<SealTx>>>,
        piece: usize,
        batch: usize,
    ) -> Self {
        let k = streams.len();
        let shared = Arc::new(TxShared {
            state: Mutex::new(TxState {
                seq: 0,
                next: 0,
                lanes: (0..k).map(|_| LaneTx::default()).collect(),
                failed: None,
                tail: None,
            }),
            flush: (0..k).map(|_| Notify::new()).collect(),
            idle: Notify::new(),
            tail: Notify::new(),
            streams,
            seals,
        });
        let stop = CancellationToken::new();
        for i in 0..k {
            tokio::spawn(flusher(shared.clone(), i, stop.clone()));
        }
        if k > 1 {
            tokio::spawn(tail_copier(shared.clone(), stop.clone()));
        }
        Self {
            shared,
            piece,
            batch,
            _stop: stop.drop_guard(),
        }
    }
}

/// Finishes the pieces lane `i`'s socket took only part of, waiting for room.
async fn flusher(shared: Arc<TxShared>, i: usize, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = shared.flush[i].notified() => {}
            _ = stop.cancelled() => return,
        }
        let mut rest = {
            let mut st = shared.state.lock().unwrap();
            st.lanes[i].flushing = true;
            std::mem::take(&mut st.lanes[i].rest)
        };
        let r = tokio::select! {
            r = tcp::write_all_lane(&shared.streams[i], shared.seals[i].as_ref(), &mut rest) => r,
            _ = stop.cancelled() => return,
        };
        {
            let mut st = shared.state.lock().unwrap();
            st.lanes[i].flushing = false;
            if let Err(e) = r {
                st.failed = Some(e.kind());
            }
        }
        shared.idle.notify_one();
    }
}

/// After a small piece, waits TAIL_DELAY; if no piece followed, the piece ended a
/// burst, and a copy of it goes on another lane (copy_tail): a loss of its last
/// segments would otherwise hold the whole link until its lane's tail-loss probe,
/// two round trips later, while the copy arrives with the original.
async fn tail_copier(shared: Arc<TxShared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = shared.tail.notified() => {}
            _ = stop.cancelled() => return,
        }
        loop {
            let seen = shared.state.lock().unwrap().seq;
            tokio::select! {
                _ = tokio::time::sleep(TAIL_DELAY) => {}
                _ = stop.cancelled() => return,
            }
            let mut st = shared.state.lock().unwrap();
            if st.seq != seen {
                continue;
            }
            if let Some((lane, spare)) = st.tail.take() {
                // An error marks the set failed (st.failed): the next send reports it.
                let _ = copy_tail(&shared, &mut st, lane, spare);
            }
            break;
        }
    }
}

/// Removes up to `max` bytes from the front of `segs` (slicing, not copying).
fn cut(segs: &mut Vec<Bytes>, max: usize) -> Vec<Bytes> {
    let mut piece = Vec::new();
    let mut left = max;
    let mut used = 0;
    for s in segs.iter_mut() {
        if left == 0 {
            break;
        }
        if s.len() <= left {
            left -= s.len();
            piece.push(std::mem::take(s));
            used += 1;
        } else {
            piece.push(s.split_to(left));
            left = 0;
        }
    }
    segs.drain(..used);
    piece
}

/// Sends a copy of the piece put on lane `i` on the next idle lane that takes it
/// now, if any: best effort, the piece's number unchanged. No piece was numbered
/// after it, so every lane's pieces stay in order; the receiver uses whichever
/// copy comes first and drops the other.
fn copy_tail(sh: &TxShared, st: &mut TxState, i: usize, spare: Vec<Bytes>) -> io::Result<()> {
    let k = sh.streams.len();
    let Some(j) = (1..k).map(|d| (i + d) % k).find(|&j| st.lanes[j].idle()) else {
        return Ok(());
    };
    put_on_lane(sh, st, j, spare).map(|_| ())
}

/// Writes the STRIPE frame `out` on lane `i` as far as its socket takes it; a
/// rest goes to the lane's flusher. `Some(out)`, untouched, when nothing went
/// (and no sealed message is pending on the lane): the piece is not the lane's.
fn put_on_lane(
    sh: &TxShared,
    st: &mut TxState,
    i: usize,
    mut out: Vec<Bytes>,
) -> io::Result<Option<Vec<Bytes>>> {
    let total: usize = out.iter().map(|b| b.len()).sum();
    let seal = sh.seals[i].as_ref();
    let all = tcp::try_write_lane(&sh.streams[i], seal, &mut out).inspect_err(|e| {
        st.failed = Some(e.kind());
    })?;
    let left: usize = out.iter().map(|b| b.len()).sum();
    // A sealed piece whose first message went in part is this lane's: its rest
    // must follow on the same connection.
    if left == total && !tcp::lane_pending(seal) {
        return Ok(Some(out));
    }
    if !all {
        st.lanes[i].rest = out;
        sh.flush[i].notify_one();
    }
    Ok(None)
}

impl WanTxNow for StripedTx {
    fn room(&self) -> usize {
        let st = self.shared.state.lock().unwrap();
        let idle = st.lanes.iter().filter(|l| l.idle()).count();
        self.batch * idle.max(1)
    }

    fn try_send(&self, segs: &mut Vec<Bytes>) -> io::Result<bool> {
        let sh = &*self.shared;
        let mut st = sh.state.lock().unwrap();
        if let Some(kind) = st.failed {
            return Err(kind.into());
        }
        let k = sh.streams.len();
        // Lanes whose socket took nothing this call: not tried again in it.
        let mut full = 0u32;
        segs.retain(|s| !s.is_empty());
        while !segs.is_empty() {
            let start = st.next;
            let Some(i) = (0..k)
                .map(|d| (start + d) % k)
                .find(|&i| full & (1 << i) == 0 && st.lanes[i].idle())
            else {
                break;
            };
            let piece = cut(segs, self.piece);
            let len: usize = piece.iter().map(|b| b.len()).sum();
            let mut out = Vec::with_capacity(piece.len() + 1);
            out.push(Bytes::copy_from_slice(&wire::stripe_header(st.seq, len)));
            out.extend(piece);
            // A small piece may end a burst: kept (shared, not copied) so that the
            // tail task can send it again if nothing follows it (TAIL_DELAY).
            let spare = (k > 1 && len <= TAIL_COPY_MAX).then(|| out.clone());
            if let Some(mut out) = put_on_lane(sh, &mut st, i, out)? {
                // Nothing went: the piece is not this lane's after all.
                full |= 1 << i;
                let mut back = out.split_off(1);
                back.append(segs);
                *segs = back;
                continue;
            }
            st.seq += 1;
            st.next = (i + 1) % k;
            st.tail = spare.map(|p| (i, p));
            if st.tail.is_some() {
                sh.tail.notify_one();
            }
        }
        Ok(segs.is_empty())
    }

    fn try_send_slice(&self, buf: &[u8]) -> io::Result<usize> {
        // A small frame (the idle-link fast path): copied once more here, so a
        // piece can own it; a piece is sent whole or not at all.
        let mut segs = vec![Bytes::copy_from_slice(buf)];
        Ok(if self.try_send(&mut segs)? {
            buf.len()
        } else {
            0
        })
    }
}

impl WanTx for StripedTx {
    async fn send(&self, out: &mut OutBuf) -> io::Result<()> {
        let mut segs = out.take_segments();
        loop {
            let idle = self.shared.idle.notified();
            if self.try_send(&mut segs)? {
                return Ok(());
            }
            // Wait for an idle lane's socket to have room, or a busy lane to
            // finish its rest.
            tokio::pin!(idle);
            std::future::poll_fn(|cx| {
                if idle.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(()));
                }
                let st = self.shared.state.lock().unwrap();
                for (i, s) in self.shared.streams.iter().enumerate() {
                    if st.lanes[i].idle() {
                        if let Poll::Ready(r) = s.poll_write_ready(cx) {
                            return Poll::Ready(r);
                        }
                    }
                }
                Poll::Pending
            })
            .await?;
        }
    }
}

struct LaneRx {
    stream: Arc<TcpStream>,
    rbuf: BytesMut,
    /// The lane's opening state (None: insecure link).
    open: Option<OpenRx>,
    /// `[wan] quickack`: send the pending ACK after each read (tcp::try_read_lane).
    quickack: bool,
    /// Pieces received on this lane and not yet appended, in order.
    pieces: VecDeque<(u64, Bytes)>,
    /// Bytes of `pieces`.
    held: usize,
    /// Number of the last piece this lane carried.
    last: Option<u64>,
}

pub struct StripedRx {
    lanes: Vec<LaneRx>,
    /// Number of the next piece of the rebuilt stream.
    next: u64,
    /// Lane polled first (rotates, so no lane waits behind a busy one).
    start: usize,
    /// The rebuilt link stream, from which frames are decoded.
    stream: BytesMut,
    max: usize,
}

fn violation(reason: &'static str) -> RecvError {
    RecvError::Wire(WireError::Malformed {
        kind: wire::FrameType::Stripe,
        reason,
    })
}

impl StripedRx {
    /// Parses what the lanes have read into pieces, and appends the pieces that
    /// come next to the rebuilt stream. True if the stream grew.
    fn advance(&mut self) -> Result<bool, RecvError> {
        for l in &mut self.lanes {
            while let Some(f) = wire::decode(&mut l.rbuf, self.max)? {
                let Frame::Stripe { seq, data } = f else {
                    return Err(violation(
                        "a striped link's connection carries only STRIPE frames",
                    ));
                };
                if l.last.is_some_and(|s| s >= seq) {
                    return Err(violation("piece out of order on its connection"));
                }
                l.last = Some(seq);
                if seq < self.next {
                    // The copy of a piece already used (copy_tail).
                    continue;
                }
                l.held += data.len();
                l.pieces.push_back((seq, data));
            }
        }
        let mut grew = false;
        'next: loop {
            for l in &mut self.lanes {
                while l.pieces.front().is_some_and(|&(s, _)| s < self.next) {
                    let (_, data) = l.pieces.pop_front().unwrap();
                    l.held -= data.len();
                }
                if l.pieces.front().is_some_and(|&(s, _)| s == self.next) {
                    let (_, data) = l.pieces.pop_front().unwrap();
                    l.held -= data.len();
                    self.stream.extend_from_slice(&data);
                    self.next += 1;
                    grew = true;
                    continue 'next;
                }
            }
            break;
        }
        Ok(grew)
    }

    /// Reads from the first lane that has something, skipping lanes that hold
    /// `REORDER_MAX` already. The lane carrying the next piece never does: its
    /// queue is empty until that piece comes.
    async fn fill(&mut self) -> Result<(), RecvError> {
        let k = self.lanes.len();
        loop {
            let start = self.start;
            let lanes = &self.lanes;
            let i = std::future::poll_fn(|cx| {
                for d in 0..k {
                    let i = (start + d) % k;
                    let l = &lanes[i];
                    // Complete pieces only: a partial frame in `rbuf` must
                    // always be read to its end.
                    if l.held >= REORDER_MAX {
                        continue;
                    }
                    if let Poll::Ready(r) = l.stream.poll_read_ready(cx) {
                        return Poll::Ready(r.map(|_| i));
                    }
                }
                Poll::Pending
            })
            .await?;
            self.start = (i + 1) % k;
            let l = &mut self.lanes[i];
            match tcp::try_read_lane(&l.stream, &mut l.rbuf, l.open.as_mut(), l.quickack) {
                // One lane closing ends the set: the others' pieces cannot be
                // put in order without its own.
                Ok(0) => {
                    let cut = !self.stream.is_empty()
                        || !l.rbuf.is_empty()
                        || l.open.as_ref().is_some_and(|o| o.mid_message());
                    return Err(if cut {
                        RecvError::ClosedMidFrame
                    } else {
                        RecvError::Closed
                    });
                }
                Ok(_) => return Ok(()),
                Err(RecvError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl WanRx for StripedRx {
    async fn recv(&mut self) -> Result<Frame, RecvError> {
        loop {
            if let Some(f) = self.try_recv()? {
                return Ok(f);
            }
            self.fill().await?;
        }
    }

    fn try_recv(&mut self) -> Result<Option<Frame>, RecvError> {
        loop {
            if let Some(f) = wire::decode(&mut self.stream, self.max)? {
                return Ok(Some(f));
            }
            if !self.advance()? {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(parts: &[&[u8]]) -> Vec<Bytes> {
        parts.iter().map(|p| Bytes::copy_from_slice(p)).collect()
    }

    #[test]
    fn cut_slices_across_segments() {
        let mut s = segs(&[b"abc", b"defgh", b"ij"]);
        let p = cut(&mut s, 5);
        assert_eq!(p.concat(), b"abcde");
        assert_eq!(s.concat(), b"fghij");
        let p = cut(&mut s, 100);
        assert_eq!(p.concat(), b"fghij");
        assert!(s.is_empty());
    }

    /// The receiver rebuilds the stream from pieces that arrive on different
    /// lanes in any interleaving, and refuses a lane that goes backwards.
    #[tokio::test]
    async fn pieces_are_put_back_in_order() {
        let (a, _a2) = pair().await;
        let (b, _b2) = pair().await;
        let mut rx = receiver(vec![a, b]);
        let ping = Frame::Ping { token: 7 }.to_bytes();
        let put = |rx: &mut StripedRx, lane: usize, seq: u64, d: &[u8]| {
            let f = Frame::Stripe {
                seq,
                data: Bytes::copy_from_slice(d),
            };
            rx.lanes[lane].rbuf.extend_from_slice(&f.to_bytes());
        };
        // Piece 1 (the frame's tail) arrives first, on lane 1.
        put(&mut rx, 1, 1, &ping[5..]);
        assert!(rx.try_recv().unwrap().is_none());
        put(&mut rx, 0, 0, &ping[..5]);
        assert_eq!(rx.try_recv().unwrap(), Some(Frame::Ping { token: 7 }));
        // A copy of piece 1 on lane 0 comes after it was used: dropped.
        put(&mut rx, 0, 1, &ping[5..]);
        assert!(rx.try_recv().unwrap().is_none());
        put(&mut rx, 1, 2, &ping);
        assert_eq!(rx.try_recv().unwrap(), Some(Frame::Ping { token: 7 }));
        put(&mut rx, 1, 2, b"x");
        assert!(
            rx.try_recv().is_err(),
            "a lane going backwards is a violation"
        );
    }

    /// A small piece that nothing follows is sent again on the other lane after
    /// TAIL_DELAY; the receiver has used the first copy and drops the second.
    #[tokio::test]
    async fn a_bursts_last_small_piece_is_copied_and_the_copy_dropped() {
        let (a0, b0) = pair().await;
        let (a1, b1) = pair().await;
        let tx = StripedTx::start(
            vec![Arc::new(a0), Arc::new(a1)],
            vec![None, None],
            PIECE_MAX,
            WRITE_BATCH,
        );
        let mut rx = receiver(vec![b0, b1]);
        let ping = Frame::Ping { token: 7 }.to_bytes();
        assert_eq!(tx.try_send_slice(&ping).unwrap(), ping.len());
        assert_eq!(rx.recv().await.unwrap(), Frame::Ping { token: 7 });
        assert_eq!(rx.lanes[0].last, Some(0));
        // The copy comes on lane 1 with the same number, after the piece was used.
        tokio::time::timeout(TAIL_DELAY * 500, rx.fill())
            .await
            .expect("the copy arrives")
            .unwrap();
        assert!(rx.try_recv().unwrap().is_none());
        assert_eq!(rx.lanes[1].last, Some(0));
        assert_eq!(rx.lanes[1].held, 0, "the copy is dropped, not queued");
        // The link goes on with the next piece.
        let pong = Frame::Ping { token: 8 }.to_bytes();
        assert_eq!(tx.try_send_slice(&pong).unwrap(), pong.len());
        assert_eq!(rx.recv().await.unwrap(), Frame::Ping { token: 8 });
    }

    /// An insecure striped receiver over `streams`, one lane each.
    fn receiver(streams: Vec<TcpStream>) -> StripedRx {
        let lanes = streams
            .into_iter()
            .map(|s| LaneRx {
                stream: Arc::new(s),
                rbuf: BytesMut::new(),
                open: None,
                quickack: false,
                pieces: VecDeque::new(),
                held: 0,
                last: None,
            })
            .collect();
        StripedRx {
            lanes,
            next: 0,
            start: 0,
            stream: BytesMut::new(),
            max: 1 << 20,
        }
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }
}
