//! Counters shared between the forwarding threads and the stats writer, and the
//! JSON report the lab reads.
//!
//! Forwarding threads only ever do relaxed atomic adds: no lock a SCHED_FIFO thread
//! could wait on while the writer is descheduled. The report is therefore not one
//! consistent instant, but every counter is cumulative and monotonic, which is all
//! the lab needs to compute deltas.

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::Serialize;

use crate::os;

/// Static description of one direction of one link, for the report.
#[derive(Debug, Clone)]
pub struct Direction {
    pub link: String,
    /// "ab" or "ba".
    pub dir: &'static str,
    pub from: String,
    pub to: String,
    pub delay_us: u64,
    pub loss: f64,
}

/// Live counters of one direction.
#[derive(Debug)]
pub struct LineStats {
    /// Wire frames: a GSO super-frame counts as the segments it carries.
    pub rx_packets: AtomicU64,
    /// GSO super-frames among them (how many receives GRO saved us).
    pub rx_gso_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub dropped_loss: AtomicU64,
    pub dropped_overflow: AtomicU64,
    /// Frames too big for our buffer (or runts): dropped on receive.
    pub rx_invalid: AtomicU64,
    /// Frames the kernel dropped because our receive buffer was full.
    pub rx_socket_drops: AtomicU64,
    pub tx_errors: AtomicU64,
    /// Frames whose lateness was taken when sendmmsg returned, for want of a
    /// transmit stamp (pessimistic: never earlier than the stamp).
    pub tx_unstamped: AtomicU64,
    pub queued_bytes: AtomicU64,
    pub queued_packets: AtomicU64,
    pub thread_cpu_ns: AtomicU64,
    /// How early the thread currently wakes before a due frame (see wake.rs).
    pub wake_margin_ns: AtomicU64,
    /// Delay added at run time (control.rs) on top of the configured one: set by
    /// the main thread, read by the forwarding thread once per receive batch.
    pub extra_delay_ns: AtomicU64,
    pub lateness: Lateness,
}

impl LineStats {
    pub fn new(late_threshold_ns: u64) -> LineStats {
        LineStats {
            rx_packets: AtomicU64::new(0),
            rx_gso_frames: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            tx_packets: AtomicU64::new(0),
            tx_bytes: AtomicU64::new(0),
            dropped_loss: AtomicU64::new(0),
            dropped_overflow: AtomicU64::new(0),
            rx_invalid: AtomicU64::new(0),
            rx_socket_drops: AtomicU64::new(0),
            tx_errors: AtomicU64::new(0),
            tx_unstamped: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            queued_packets: AtomicU64::new(0),
            thread_cpu_ns: AtomicU64::new(0),
            wake_margin_ns: AtomicU64::new(0),
            extra_delay_ns: AtomicU64::new(0),
            lateness: Lateness::new(late_threshold_ns),
        }
    }
}

/// How late frames left, compared with when they were due.
///
/// Mean and worst are exact. Quantiles come from a log-linear histogram: 16
/// sub-buckets per power of two, so a reported p99 overstates the truth by at
/// most 1/16 (and never exceeds the worst seen). It is fixed-size and lock-free.
#[derive(Debug)]
pub struct Lateness {
    threshold_ns: u64,
    count: AtomicU64,
    late: AtomicU64,
    sum_ns: AtomicU64,
    worst_ns: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Values are clamped here (~18 minutes); far beyond any delay we accept.
const MAX_TRACKED_NS: u64 = (1 << 40) - 1;
const BUCKETS: usize = bucket_of(MAX_TRACKED_NS) + 1;

const fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let mantissa = (ns >> shift) & (SUB - 1);
    (SUB + shift as u64 * SUB + mantissa) as usize
}

/// Largest value that lands in bucket `i`.
fn bucket_upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i - SUB) / SUB;
    let mantissa = (i - SUB) % SUB;
    ((SUB + mantissa + 1) << shift) - 1
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatenessSummary {
    pub late: u64,
    pub worst_us: f64,
    pub mean_us: f64,
    pub p99_us: f64,
}

impl Lateness {
    pub fn new(threshold_ns: u64) -> Lateness {
        Lateness {
            threshold_ns,
            count: AtomicU64::new(0),
            late: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            worst_ns: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records one frame that left `late_ns` after it was due.
    #[cfg(test)]
    pub fn record(&self, late_ns: u64) {
        self.record_frames(late_ns, 1);
    }

    /// Records `frames` wire frames that left together, `late_ns` after the
    /// first of them was due: a GSO super-frame's segments all carry its
    /// lateness (on a real link the later ones would have left later still, so
    /// this never flatters us).
    pub fn record_frames(&self, late_ns: u64, frames: u64) {
        let v = late_ns.min(MAX_TRACKED_NS);
        self.buckets[bucket_of(v)].fetch_add(frames, Relaxed);
        self.count.fetch_add(frames, Relaxed);
        self.sum_ns.fetch_add(v * frames, Relaxed);
        self.worst_ns.fetch_max(v, Relaxed);
        if v > self.threshold_ns {
            self.late.fetch_add(frames, Relaxed);
        }
    }

    /// Forgets the worst lateness seen so far, so that a measurement window
    /// (the lab's check, on SIGUSR2) reports its own worst case.
    pub fn reset_worst(&self) {
        self.worst_ns.store(0, Relaxed);
    }

    pub fn summary(&self) -> LatenessSummary {
        let count = self.count.load(Relaxed);
        let worst = self.worst_ns.load(Relaxed);
        let mean = if count == 0 {
            0.0
        } else {
            self.sum_ns.load(Relaxed) as f64 / count as f64
        };
        LatenessSummary {
            late: self.late.load(Relaxed),
            worst_us: ns_to_us(worst as f64),
            mean_us: ns_to_us(mean),
            p99_us: ns_to_us(self.quantile_ns(0.99).min(worst) as f64),
        }
    }

    fn quantile_ns(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(i);
            }
        }
        bucket_upper(BUCKETS - 1)
    }
}

/// Microseconds, rounded to the nanosecond so the JSON stays short.
fn ns_to_us(ns: f64) -> f64 {
    ns.round() / 1000.0
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    pid: u32,
    uptime_s: f64,
    cpu_s: f64,
    cpu_user_s: f64,
    cpu_system_s: f64,
    late_threshold_us: u64,
    links: Vec<DirectionReport<'a>>,
}

#[derive(Debug, Serialize)]
struct DirectionReport<'a> {
    name: &'a str,
    dir: &'a str,
    from: &'a str,
    to: &'a str,
    delay_us: u64,
    extra_delay_us: u64,
    loss: f64,
    rx_packets: u64,
    rx_gso_frames: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    dropped_loss: u64,
    dropped_overflow: u64,
    rx_invalid: u64,
    rx_socket_drops: u64,
    tx_errors: u64,
    tx_unstamped: u64,
    late: u64,
    worst_late_us: f64,
    mean_late_us: f64,
    p99_late_us: f64,
    queued_bytes: u64,
    queued_packets: u64,
    cpu_s: f64,
    wake_margin_us: f64,
}

/// Renders the report for all directions.
pub fn render(
    lines: &[(Direction, Arc<LineStats>)],
    uptime_ns: u64,
    late_threshold_us: u64,
) -> serde_json::Result<Vec<u8>> {
    let cpu = os::process_cpu();
    let links = lines
        .iter()
        .map(|(d, s)| {
            let l = s.lateness.summary();
            DirectionReport {
                name: &d.link,
                dir: d.dir,
                from: &d.from,
                to: &d.to,
                delay_us: d.delay_us,
                extra_delay_us: s.extra_delay_ns.load(Relaxed) / 1000,
                loss: d.loss,
                rx_packets: s.rx_packets.load(Relaxed),
                rx_gso_frames: s.rx_gso_frames.load(Relaxed),
                rx_bytes: s.rx_bytes.load(Relaxed),
                tx_packets: s.tx_packets.load(Relaxed),
                tx_bytes: s.tx_bytes.load(Relaxed),
                dropped_loss: s.dropped_loss.load(Relaxed),
                dropped_overflow: s.dropped_overflow.load(Relaxed),
                rx_invalid: s.rx_invalid.load(Relaxed),
                rx_socket_drops: s.rx_socket_drops.load(Relaxed),
                tx_errors: s.tx_errors.load(Relaxed),
                tx_unstamped: s.tx_unstamped.load(Relaxed),
                late: l.late,
                worst_late_us: l.worst_us,
                mean_late_us: l.mean_us,
                p99_late_us: l.p99_us,
                queued_bytes: s.queued_bytes.load(Relaxed),
                queued_packets: s.queued_packets.load(Relaxed),
                cpu_s: round_ms(s.thread_cpu_ns.load(Relaxed) as f64 * 1e-9),
                wake_margin_us: ns_to_us(s.wake_margin_ns.load(Relaxed) as f64),
            }
        })
        .collect();
    let report = Report {
        pid: std::process::id(),
        uptime_s: round_ms(uptime_ns as f64 * 1e-9),
        cpu_s: round_ms(cpu.total_s()),
        cpu_user_s: round_ms(cpu.user_s),
        cpu_system_s: round_ms(cpu.system_s),
        late_threshold_us,
        links,
    };
    let mut out = serde_json::to_vec(&report)?;
    out.push(b'\n');
    Ok(out)
}

fn round_ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// Replaces `path` atomically: a reader sees the old report or the new one, never
/// half of one. The temporary file sits beside it so the rename stays on one
/// filesystem.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(contents)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut prev_upper = None;
        for i in 0..BUCKETS {
            let upper = bucket_upper(i);
            assert_eq!(bucket_of(upper), i, "upper bound of {i} maps back");
            if let Some(p) = prev_upper {
                assert_eq!(
                    bucket_of(p + 1),
                    i,
                    "bucket {i} starts right after the previous one"
                );
            }
            prev_upper = Some(upper);
        }
        for v in [17u64, 1000, 123_456, 9_999_999] {
            let width = bucket_upper(bucket_of(v)) - v;
            assert!(width * 16 <= v, "relative error at {v}");
        }
    }

    #[test]
    fn lateness_counts_threshold_mean_worst() {
        let l = Lateness::new(200_000);
        for ns in [10_000, 20_000, 30_000, 250_000, 200_000] {
            l.record(ns);
        }
        let s = l.summary();
        assert_eq!(s.late, 1, "strictly above the threshold is late");
        assert_eq!(s.worst_us, 250.0);
        assert_eq!(s.mean_us, 102.0);
    }

    #[test]
    fn p99_from_histogram() {
        let l = Lateness::new(200_000);
        for _ in 0..990 {
            l.record(5_000);
        }
        for _ in 0..10 {
            l.record(3_000_000);
        }
        let p99 = l.summary().p99_us;
        assert!((5.0..=5.0 * 17.0 / 16.0).contains(&p99), "p99 {p99}");
        l.record(3_000_000);
        let s = l.summary();
        assert!(s.p99_us >= 3000.0 && s.p99_us <= s.worst_us, "{s:?}");
    }

    #[test]
    fn empty_summary_is_zero() {
        let s = Lateness::new(1).summary();
        assert_eq!(
            s,
            LatenessSummary {
                late: 0,
                worst_us: 0.0,
                mean_us: 0.0,
                p99_us: 0.0
            }
        );
    }

    #[test]
    fn report_is_json_with_the_documented_fields() {
        let d = Direction {
            link: "l".into(),
            dir: "ab",
            from: "x".into(),
            to: "y".into(),
            delay_us: 5,
            loss: 0.0,
        };
        let s = Arc::new(LineStats::new(1000));
        s.rx_packets.fetch_add(3, Relaxed);
        let out = render(&[(d, s)], 1_500_000_000, 200).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["uptime_s"], 1.5);
        let link = &v["links"][0];
        for key in [
            "name",
            "dir",
            "delay_us",
            "extra_delay_us",
            "rx_packets",
            "rx_gso_frames",
            "rx_bytes",
            "tx_packets",
            "tx_bytes",
            "dropped_loss",
            "dropped_overflow",
            "tx_errors",
            "late",
            "worst_late_us",
            "mean_late_us",
            "p99_late_us",
            "queued_bytes",
        ] {
            assert!(link.get(key).is_some(), "missing {key}");
        }
        assert_eq!(link["rx_packets"], 3);
        assert!(v["pid"].is_u64() && v["cpu_s"].is_f64());
    }

    #[test]
    fn atomic_write_replaces_file() {
        let dir = std::env::temp_dir().join(format!("wanem-stats-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        write_atomically(&p, b"one").unwrap();
        write_atomically(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(!dir.join("s.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
