//! Unit tests of one direction of the delay line: release order and time, the
//! byte bound, lateness, GSO super-frames, stalls, serialization at the link
//! rate, and seeded loss.

use super::*;

fn frame(len: usize) -> Box<[u8]> {
    vec![0u8; len].into_boxed_slice()
}

fn one(len: usize) -> WireShape {
    WireShape {
        segments: 1,
        wire_len: len,
    }
}

#[test]
fn releases_in_due_order() {
    let mut q = DelayQueue::new(1 << 20);
    q.push(100, frame(10), one(10)).unwrap();
    q.push(200, frame(20), one(20)).unwrap();
    q.push(300, frame(30), one(30)).unwrap();
    assert_eq!(q.next_due(), Some(100));
    assert_eq!(q.due_count(99, 64, u64::MAX), 0);
    assert_eq!(q.due_count(100, 64, u64::MAX), 1);
    assert_eq!(q.due_count(250, 64, u64::MAX), 2);
    assert_eq!(
        q.due_count(1000, 2, u64::MAX),
        2,
        "batch size caps a release"
    );
    let l = Lateness::new(0);
    assert_eq!(
        q.complete(&[250; 2], &l),
        Released {
            frames: 2,
            wire_bytes: 30
        }
    );
    assert_eq!(q.next_due(), Some(300));
    assert_eq!(q.bytes(), 30);
}

#[test]
fn never_reorders_when_stamps_step_back() {
    let mut q = DelayQueue::new(1 << 20);
    q.push(500, frame(1), one(1)).unwrap();
    q.push(400, frame(2), one(2)).unwrap();
    assert_eq!(
        q.due_count(450, 64, u64::MAX),
        0,
        "the second frame may not overtake"
    );
    assert_eq!(q.due_count(500, 64, u64::MAX), 2);
}

#[test]
fn byte_bound_is_never_exceeded() {
    let mut q = DelayQueue::new(100);
    let mut rejected = 0;
    for i in 0..50 {
        if q.push(i, frame(30), one(30)).is_err() {
            rejected += 1;
        }
        assert!(q.bytes() <= 100);
    }
    assert_eq!(q.len(), 3);
    assert_eq!(rejected, 47);
    assert!(q.has_room(10));
    assert!(!q.has_room(11));
    q.discard_head();
    assert_eq!(q.bytes(), 60);
    assert!(q.push(99, frame(40), one(40)).is_ok());
}

#[test]
fn lateness_is_send_time_minus_due() {
    let mut q = DelayQueue::new(1 << 20);
    for due in [1_000_000, 1_100_000, 1_200_000] {
        q.push(due, frame(100), one(100)).unwrap();
    }
    let l = Lateness::new(200_000);
    // All three left together at 1.35 ms: 350, 250 and 150 µs late.
    q.complete(&[1_350_000; 3], &l);
    let s = l.summary();
    assert_eq!(s.late, 2);
    assert_eq!(s.worst_us, 350.0);
    assert_eq!(s.mean_us, 250.0);
    assert_eq!(q.len(), 0);
    assert_eq!(q.bytes(), 0);
}

#[test]
fn a_super_frame_counts_as_its_segments() {
    let mut q = DelayQueue::new(1 << 20);
    let gso = WireShape {
        segments: 20,
        wire_len: 20 * 1514,
    };
    q.push(1_000_000, frame(29_000), gso).unwrap();
    q.push(1_010_000, frame(100), one(100)).unwrap();
    assert_eq!(q.due_count(2_000_000, 16, 64), 2);
    assert_eq!(q.due_count(2_000_000, 16, 20), 1, "segments cap a release");
    assert_eq!(
        q.due_count(2_000_000, 16, 5),
        1,
        "but one frame always goes"
    );
    let l = Lateness::new(200_000);
    // Both left at 1.25 ms: the super-frame 250 µs late, the plain one 240 µs.
    let out = q.complete(&[1_250_000; 2], &l);
    assert_eq!(
        out,
        Released {
            frames: 21,
            wire_bytes: 20 * 1514 + 100
        }
    );
    let s = l.summary();
    assert_eq!(s.late, 21, "each segment of a late super-frame is late");
    assert_eq!(s.worst_us, 250.0);
    assert_eq!(q.bytes(), 0);
}

#[test]
fn a_stall_shifts_the_release_clock_and_is_paid_back() {
    let mut s = StallSpread::default();
    // Ordinary jitter (100 µs late) is not a stall.
    assert_eq!(s.update(1_000_100, Some(1_000_000)), 0);
    // The head frame is 3 ms late: the clock shifts by 3 ms, so only it is due
    // now and the frames behind it keep their spacing.
    assert_eq!(s.update(4_000_000, Some(1_000_000)), 3_000_000);
    // 1 ms later 20 % of that time (200 µs) has been paid back.
    assert_eq!(s.update(5_000_000, Some(2_000_000)), 2_800_000);
    // Long after, the shift is gone.
    assert_eq!(s.update(100_000_000, None), 0);
}

#[test]
fn serializer_spaces_a_burst_at_the_link_rate() {
    // 1 Gb/s: a 1500-byte frame takes 12 µs on the wire.
    let mut w = Serializer::new(1_000_000_000);
    let dues: Vec<u64> = (0..4).map(|_| w.due(1_000_000, 1500)).collect();
    assert_eq!(dues, vec![1_000_000, 1_012_000, 1_024_000, 1_036_000]);
    // After an idle gap the link is free again: no artificial delay.
    assert_eq!(w.due(5_000_000, 1500), 5_000_000);
    // Rate 0 means a pure delay line.
    let mut p = Serializer::new(0);
    assert_eq!((p.due(7, 1500), p.due(7, 1500)), (7, 7));
}

#[test]
fn loss_rate_matches_probability_for_fixed_seed() {
    for p in [0.001, 0.01, 0.1, 0.5] {
        let mut m = LossModel::new(p, 1, 0, false);
        let n = 200_000;
        let dropped = (0..n).filter(|_| m.drops_next()).count() as f64;
        // Five standard deviations of a binomial count.
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (dropped - n as f64 * p).abs() < 5.0 * sd,
            "p={p}: {dropped} of {n}"
        );
    }
}

#[test]
fn loss_is_reproducible_and_per_direction() {
    let run = |seed, link, rev| {
        let mut m = LossModel::new(0.3, seed, link, rev);
        (0..256).map(|_| m.drops_next()).collect::<Vec<_>>()
    };
    assert_eq!(run(7, 0, false), run(7, 0, false));
    assert_ne!(run(7, 0, false), run(7, 0, true));
    assert_ne!(run(7, 0, false), run(7, 1, false));
    assert_ne!(run(7, 0, false), run(8, 0, false));
    let mut none = LossModel::new(0.0, 7, 0, false);
    assert!((0..10_000).all(|_| !none.drops_next()));
}
