//! One direction of one link: frames received on one interface leave the other
//! after the configured delay, minus the ones random loss takes.
//!
//! Each direction runs on its own OS thread that blocks in ppoll until either a
//! frame arrives or the head of its queue is due. An async runtime would put its
//! own timer wheel (millisecond granularity in tokio) and task scheduling between
//! the due time and the send; a plain blocking thread with a nanosecond ppoll
//! timeout, 1 ns timer slack and optionally SCHED_FIFO wakes within tens of
//! microseconds of the deadline, and a short bounded spin (wake.rs) absorbs even
//! that. Directions are independent, so one thread each also means a burst in
//! one direction never delays releases in the other.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::os;
use crate::packet::{PacketSocket, RecvBatch, SendBatch, StampBatch, WireShape};
use crate::stats::{Lateness, LineStats};
use crate::wake::EarlyWake;

/// Frames per recvmmsg: amortises syscalls at ~80k frames/s. Receiving a batch
/// late costs no accuracy, since each frame carries its kernel receive stamp.
const RX_BATCH: usize = 64;
/// Frames per sendmmsg. Smaller, because sendmmsg hands each frame to the peer
/// namespace's stack before returning (its softirq runs in our thread): the
/// frames behind in the batch wait for that, and their transmit stamps say so.
const TX_BATCH: usize = 16;
/// Wire frames per sendmmsg, GSO segments counted one by one (a batch always
/// takes at least one frame). The peer router cuts super-frames back into MTU
/// frames, and all of them wait in one CPU's backlog (net.core.netdev_max_backlog,
/// 1000 by default) until that CPU gets to them: 16 super-frames of 44 segments
/// would fill most of it at once.
const TX_BATCH_SEGMENTS: u64 = 64;

/// Longest we sleep with nothing due, so a stop request is seen within this time.
const IDLE_WAKE_NS: u64 = 50_000_000;
/// How soon to retry when the transmit side pushed back (EAGAIN/ENOBUFS).
const TX_RETRY_NS: u64 = 20_000;
/// How often the thread refreshes its CPU time and the kernel's drop counter.
const HOUSEKEEPING_NS: u64 = 200_000_000;
/// A kernel receive stamp further back than this is not believed (wall clock
/// stepped, or a stamp we do not understand): we use the time we read the frame.
const MAX_STAMP_AGE_NS: u64 = 1_000_000_000;

/// A frame waiting for its departure time.
#[derive(Debug)]
pub struct Queued {
    /// CLOCK_MONOTONIC nanoseconds.
    pub due: u64,
    /// virtio_net_hdr + Ethernet frame, ready for sendmmsg.
    pub data: Box<[u8]>,
    /// What it is on the wire (a GSO super-frame stands for several frames).
    pub shape: WireShape,
}

/// What `DelayQueue::complete` released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Wire frames (GSO segments counted one by one).
    pub frames: u64,
    pub wire_bytes: u64,
}

/// The frames in flight on one direction, in departure order, bounded in bytes.
///
/// A FIFO suffices because every frame gets the same delay: arrival order is
/// departure order. A link never reorders, so should a receive stamp ever step
/// back (two frames stamped on different CPUs), the later frame's due time is
/// raised to its predecessor's rather than letting it overtake.
#[derive(Debug)]
pub struct DelayQueue {
    frames: VecDeque<Queued>,
    bytes: u64,
    max_bytes: u64,
}

impl DelayQueue {
    pub fn new(max_bytes: u64) -> DelayQueue {
        DelayQueue {
            frames: VecDeque::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Whether a frame of `len` bytes would fit under the bound.
    pub fn has_room(&self, len: usize) -> bool {
        self.bytes + len as u64 <= self.max_bytes
    }

    /// Queues a frame, or hands it back if it would exceed the byte bound.
    pub fn push(&mut self, due: u64, data: Box<[u8]>, shape: WireShape) -> Result<(), Box<[u8]>> {
        if !self.has_room(data.len()) {
            return Err(data);
        }
        let due = self.frames.back().map_or(due, |tail| due.max(tail.due));
        self.bytes += data.len() as u64;
        self.frames.push_back(Queued { due, data, shape });
        Ok(())
    }

    pub fn next_due(&self) -> Option<u64> {
        self.frames.front().map(|f| f.due)
    }

    /// How many frames at the head are due at `now`, up to `max` frames and
    /// `max_segments` wire frames (but at least one frame if any is due).
    pub fn due_count(&self, now: u64, max: usize, max_segments: u64) -> usize {
        let mut segments = 0;
        self.frames
            .iter()
            .take(max)
            .take_while(|f| f.due <= now)
            .enumerate()
            .take_while(|(i, f)| {
                segments += u64::from(f.shape.segments);
                *i == 0 || segments <= max_segments
            })
            .count()
    }

    pub fn head(&self) -> impl Iterator<Item = &[u8]> {
        self.frames.iter().map(|f| &f.data[..])
    }

    /// Removes the head frames, which left at the times in `left` (one per
    /// frame), recording how late each one was (once per wire frame it stands for).
    pub fn complete(&mut self, left: &[u64], lateness: &Lateness) -> Released {
        let mut stored = 0;
        let mut out = Released::default();
        for (f, &at) in self.frames.drain(..left.len()).zip(left) {
            let frames = u64::from(f.shape.segments);
            lateness.record_frames(at.saturating_sub(f.due), frames);
            stored += f.data.len() as u64;
            out.frames += frames;
            out.wire_bytes += f.shape.wire_len as u64;
        }
        self.bytes -= stored;
        out
    }

    /// Drops the head frame (the transmit path rejected it for good).
    pub fn discard_head(&mut self) {
        if let Some(f) = self.frames.pop_front() {
            self.bytes -= f.data.len() as u64;
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Independent (Bernoulli) loss, reproducible from the seed.
pub struct LossModel {
    probability: f64,
    rng: SmallRng,
}

impl LossModel {
    /// Each direction of each link gets its own stream, so that adding a link or
    /// traffic in the other direction does not change which frames this one drops.
    pub fn new(probability: f64, seed: u64, link_index: usize, reverse: bool) -> LossModel {
        let stream = seed.wrapping_add(2 * link_index as u64 + reverse as u64);
        LossModel {
            probability,
            rng: SmallRng::seed_from_u64(stream),
        }
    }

    pub fn drops_next(&mut self) -> bool {
        self.probability > 0.0 && self.rng.random_bool(self.probability)
    }
}

/// Spaces releases as a link of the configured rate would.
///
/// tbf ahead of us shapes the average rate but lets its bucket out in bursts at
/// memory speed. A real link serialises those frames, so each is due no earlier
/// than the previous one plus its own time on the wire; otherwise a burst would
/// leave all at once, the next hop rather than the link would absorb it, and our
/// lateness figures would measure the burst instead of our schedule.
#[derive(Debug, Clone, Copy)]
pub struct Serializer {
    /// Picoseconds per byte at the link's rate (0: no serialisation).
    ps_per_byte: u64,
    /// When the link is free to start the next frame (monotonic ns).
    next_free_ns: u64,
}

impl Serializer {
    pub fn new(rate_bps: u64) -> Serializer {
        // Rate 0: no serialisation.
        let ps_per_byte = 8_000_000_000_000u64.checked_div(rate_bps).unwrap_or(0);
        Serializer {
            ps_per_byte,
            next_free_ns: 0,
        }
    }

    /// The release time of a frame of `len` bytes that would be due at `earliest`.
    pub fn due(&mut self, earliest: u64, len: usize) -> u64 {
        let due = earliest.max(self.next_free_ns);
        self.next_free_ns = due + len as u64 * self.ps_per_byte / 1000;
        due
    }
}

/// Keeps the spacing of frames that a stall held up.
///
/// When this VM stalls the thread for milliseconds, the frames that were due
/// meanwhile would otherwise leave back to back at the link's rate, and a
/// slower port downstream (a 100 Mb/s switch port behind a 1 Gb/s WAN) would
/// drop the burst: a loss no real network would have caused. Instead the
/// release clock is shifted by the stall, so those frames leave with the
/// spacing they arrived with, and the shift is then paid back by releasing 20 %
/// faster than that spacing. A stall thus looks like a brief queue (added
/// delay), as on a real path, not a burst. Lateness is still counted against
/// the original due times, so the stall stays visible in the statistics.
#[derive(Debug, Default, Clone, Copy)]
pub struct StallSpread {
    shift_ns: u64,
    last_ns: u64,
}

impl StallSpread {
    /// Later than this is a stall, not the ordinary wake-up jitter of this VM.
    const STALL_NS: u64 = 500_000;
    const CATCH_UP_PERCENT: u64 = 20;

    /// The current shift, after paying back what time has allowed and taking
    /// a new stall (the head frame `lag` late) into account.
    pub fn update(&mut self, now: u64, head_due: Option<u64>) -> u64 {
        let elapsed = now.saturating_sub(self.last_ns);
        self.last_ns = now;
        self.shift_ns = self
            .shift_ns
            .saturating_sub(elapsed * Self::CATCH_UP_PERCENT / 100);
        if let Some(due) = head_due {
            let lag = now.saturating_sub(due);
            if lag > self.shift_ns + Self::STALL_NS {
                self.shift_ns = lag;
            }
        }
        self.shift_ns
    }

    pub fn shift(&self) -> u64 {
        self.shift_ns
    }
}

/// The knobs of one direction that are plain numbers.
#[derive(Debug, Clone, Copy)]
pub struct LineOptions {
    pub delay_ns: u64,
    /// Serialisation rate in bits/s, 0 for none.
    pub rate_bps: u64,
    pub max_queue_bytes: u64,
    pub rt_priority: u8,
    pub max_spin_percent: u8,
}

/// Everything one direction's thread owns.
pub struct DelayLine {
    rx: Arc<PacketSocket>,
    tx: Arc<PacketSocket>,
    delay_ns: u64,
    wire: Serializer,
    spread: StallSpread,
    rt_priority: u8,
    loss: LossModel,
    queue: DelayQueue,
    early: EarlyWake,
    stats: Arc<LineStats>,
    /// Scratch for the transmit stamps of one batch.
    stamps: Vec<u64>,
    /// Where we last warned about a transmit error, to keep the log readable when
    /// an interface goes away under heavy traffic.
    last_tx_warning: u64,
}

impl DelayLine {
    pub fn new(
        rx: Arc<PacketSocket>,
        tx: Arc<PacketSocket>,
        loss: LossModel,
        stats: Arc<LineStats>,
        options: LineOptions,
    ) -> DelayLine {
        DelayLine {
            rx,
            tx,
            delay_ns: options.delay_ns,
            wire: Serializer::new(options.rate_bps),
            spread: StallSpread::default(),
            rt_priority: options.rt_priority,
            loss,
            queue: DelayQueue::new(options.max_queue_bytes),
            early: EarlyWake::new(options.max_spin_percent),
            stats,
            stamps: Vec::with_capacity(TX_BATCH + 1),
            last_tx_warning: 0,
        }
    }

    /// Forwards until `stop` is set. Frames still in flight then are dropped, as a
    /// cable cut would.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        if let Err(e) = os::set_timer_slack_ns(1) {
            tracing::warn!("PR_SET_TIMERSLACK failed, wake-ups may be up to 50 µs late: {e}");
        }
        if self.rt_priority > 0 {
            if let Err(e) = os::set_fifo_priority(self.rt_priority) {
                tracing::warn!(
                    "SCHED_FIFO priority {} refused ({e}); continuing with normal scheduling",
                    self.rt_priority
                );
            }
        }
        let mut rx_batch = RecvBatch::new(RX_BATCH);
        let mut tx_batch = SendBatch::new(TX_BATCH);
        let mut stamp_batch = StampBatch::new(TX_BATCH + 1);
        let mut backlog = false;
        let mut next_housekeeping = 0;

        while !stop.load(Relaxed) {
            let retry_at = self.release_due(&mut tx_batch, &mut stamp_batch);
            let now = os::monotonic_ns();
            if now >= next_housekeeping {
                self.housekeeping();
                next_housekeeping = now + HOUSEKEEPING_NS;
            }
            // After a full batch more frames are probably waiting: read them
            // before sleeping.
            if backlog {
                backlog = self.receive(&mut rx_batch)? == rx_batch.capacity();
                continue;
            }
            // Otherwise sleep until a frame arrives or, a little before, the head
            // frame is due.
            let shift = self.spread.shift();
            let head_wake = self
                .queue
                .next_due()
                .map(|due| due + shift)
                .map(|due| (due, self.early.sleep_until(due, now)));
            if let Some((due, wake)) = head_wake {
                if wake <= now {
                    self.early.spin_until(due);
                    continue;
                }
            }
            let wake = [
                head_wake.map(|(_, wake)| wake),
                retry_at,
                Some(now + IDLE_WAKE_NS),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now);
            if self.rx.wait_readable(wake - now)? {
                backlog = self.receive(&mut rx_batch)? == rx_batch.capacity();
            } else if head_wake.is_some_and(|(_, head)| head == wake) {
                self.early.observe(wake, os::monotonic_ns());
            }
        }
        self.housekeeping();
        Ok(())
    }

    /// Reads one batch and queues what survives loss and the byte bound.
    fn receive(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        let n = match self.rx.recv_batch(batch) {
            Ok(n) => n,
            // The interface went down; it may come back, and the error is cleared
            // by having been reported, so carry on.
            Err(e) if e.raw_os_error() == Some(libc::ENETDOWN) => {
                tracing::warn!(iface = self.rx.ifname(), "receive: {e}");
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(0);
        }
        // One reading of both clocks per batch converts the kernel's wall-clock
        // receive stamps into our monotonic time base.
        let now = os::monotonic_ns();
        let wall_minus_mono = os::wall_minus_mono_ns();
        // A run-time change of delay (control.rs) applies to frames received from
        // now on; the FIFO keeps them behind earlier ones when it shrinks.
        let delay_ns = self.delay_ns + self.stats.extra_delay_ns.load(Relaxed);

        let (mut rx_packets, mut rx_bytes, mut lost, mut overflow, mut invalid) = (0, 0, 0, 0, 0);
        let mut gso_frames = 0;
        for frame in batch.frames() {
            if frame.truncated {
                invalid += 1;
                continue;
            }
            let shape = frame.wire_shape();
            let segments = u64::from(shape.segments);
            rx_packets += segments;
            rx_bytes += shape.wire_len as u64;
            if segments > 1 {
                gso_frames += 1;
            }
            // Loss is drawn per wire frame. A super-frame cannot lose one segment
            // without being cut up here, so it goes whole if any draw hits; the
            // lab leaves GRO off on lossy links so that this never happens there.
            if (0..segments).fold(false, |hit, _| self.loss.drops_next() | hit) {
                lost += segments;
                continue;
            }
            if !self.queue.has_room(frame.stored_len()) {
                overflow += segments;
                continue;
            }
            let arrived = frame
                .kernel_realtime_ns
                .map(|wall| wall.wrapping_sub(wall_minus_mono))
                .filter(|&t| t <= now && now - t < MAX_STAMP_AGE_NS)
                .unwrap_or(now);
            let due = self.wire.due(arrived + delay_ns, shape.wire_len);
            if self.queue.push(due, frame.to_owned_frame(), shape).is_err() {
                overflow += segments;
            }
        }
        let s = &self.stats;
        s.rx_packets.fetch_add(rx_packets, Relaxed);
        s.rx_gso_frames.fetch_add(gso_frames, Relaxed);
        s.rx_bytes.fetch_add(rx_bytes, Relaxed);
        s.dropped_loss.fetch_add(lost, Relaxed);
        s.dropped_overflow.fetch_add(overflow, Relaxed);
        s.rx_invalid.fetch_add(invalid, Relaxed);
        self.publish_queue();
        Ok(n)
    }

    /// Sends every frame that is due. Returns when to try again if the transmit
    /// side pushed back.
    fn release_due(&mut self, batch: &mut SendBatch, stamps: &mut StampBatch) -> Option<u64> {
        loop {
            let now = os::monotonic_ns();
            let shift = self.spread.update(now, self.queue.next_due());
            let n = self.queue.due_count(
                now.saturating_sub(shift),
                batch.capacity(),
                TX_BATCH_SEGMENTS,
            );
            if n == 0 {
                return None;
            }
            let result = self.tx.send_batch(batch, self.queue.head().take(n));
            let sent_at = os::monotonic_ns();
            match result {
                Ok(sent) => {
                    let left = self.departures(sent, sent_at, stamps);
                    // Counted as on the wire, like rx_packets and rx_bytes.
                    let out = self.queue.complete(&left, &self.stats.lateness);
                    self.stats.tx_packets.fetch_add(out.frames, Relaxed);
                    self.stats.tx_bytes.fetch_add(out.wire_bytes, Relaxed);
                    self.publish_queue();
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => {
                    // Socket buffer full or the device dropped it: the frame is
                    // still ours, send it again shortly. The veth may have stamped
                    // it before refusing it; that stamp must not be taken for the
                    // next frame's.
                    self.stats.tx_errors.fetch_add(1, Relaxed);
                    let _ = self.departures(0, sent_at, stamps);
                    return Some(sent_at + TX_RETRY_NS);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Anything else (interface gone, frame refused) will not get
                    // better by retrying this frame.
                    self.stats.tx_errors.fetch_add(1, Relaxed);
                    self.queue.discard_head();
                    self.publish_queue();
                    if sent_at.saturating_sub(self.last_tx_warning) > 1_000_000_000 {
                        self.last_tx_warning = sent_at;
                        tracing::warn!(iface = self.tx.ifname(), "send failed, frame dropped: {e}");
                    }
                }
            }
        }
    }

    /// When each of the `sent` frames of the last sendmmsg left: the veth's
    /// transmit stamp, taken as it accepted the frame. Without a stamp for every
    /// frame (the kernel gives none, or lost some), the time sendmmsg returned,
    /// which is never earlier. Drains the stamps either way.
    fn departures(&mut self, sent: usize, returned: u64, batch: &mut StampBatch) -> Vec<u64> {
        let stamped = self.tx.take_tx_stamps(batch, &mut self.stamps);
        let wall_minus_mono = os::wall_minus_mono_ns();
        if stamped.is_ok() && self.stamps.len() >= sent {
            // A refused frame's stamp can only be the last one.
            self.stamps[..sent]
                .iter()
                .map(|wall| wall.wrapping_sub(wall_minus_mono).min(returned))
                .collect()
        } else {
            self.stats.tx_unstamped.fetch_add(sent as u64, Relaxed);
            vec![returned; sent]
        }
    }

    fn publish_queue(&self) {
        self.stats.queued_bytes.store(self.queue.bytes(), Relaxed);
        self.stats
            .queued_packets
            .store(self.queue.len() as u64, Relaxed);
    }

    fn housekeeping(&self) {
        let cpu = os::thread_cpu();
        self.stats
            .thread_cpu_ns
            .store((cpu.total_s() * 1e9) as u64, Relaxed);
        self.stats
            .wake_margin_ns
            .store(self.early.margin_ns(), Relaxed);
        if let Ok(drops) = self.rx.take_drops() {
            self.stats.rx_socket_drops.fetch_add(drops, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
