//! Being on time although the kernel wakes us late.
//!
//! A thread sleeping until T runs again some time after T: on the lab's VMs tens
//! of µs late at the median and more in the tail, even with 1 ns timer slack and
//! SCHED_FIFO, because the host has to schedule the vCPU first
//! (docs/design/delay-line-and-fidelity.md). Sleeping until the
//! due time would make every release that late. Instead we sleep until
//! `due - margin` and spin for the rest, where the margin follows the 90th
//! percentile of the wake-up delays we observe.
//!
//! Spinning burns CPU on machines shared with the lab's hosts, so it is capped:
//! once spinning has used its share of a time window, we only sleep until that
//! window ends. Under heavy traffic, where deadlines are microseconds apart and
//! a release is due at nearly every wake-up anyway, this keeps the thread from
//! turning into a busy loop.

use crate::os;

/// Margin never exceeds this: a wake-up later than that is a scheduling stall,
/// which spinning would not cure.
const MAX_MARGIN_NS: u64 = 300_000;
const START_MARGIN_NS: u64 = 50_000;
/// Up 9 steps for a wake-up later than the margin, down 1 for an earlier one:
/// the margin settles where 10% of wake-ups are later than it (p90).
const STEP_NS: u64 = 1_000;
const STEPS_UP: u64 = 9;
const WINDOW_NS: u64 = 100_000_000;

#[derive(Debug)]
pub struct EarlyWake {
    margin_ns: u64,
    budget_ns: u64,
    window_start: u64,
    spent_ns: u64,
}

impl EarlyWake {
    /// `max_spin_percent` of one core may be spent spinning (0 disables it).
    pub fn new(max_spin_percent: u8) -> EarlyWake {
        EarlyWake {
            margin_ns: START_MARGIN_NS,
            budget_ns: WINDOW_NS / 100 * u64::from(max_spin_percent.min(100)),
            window_start: 0,
            spent_ns: 0,
        }
    }

    pub fn margin_ns(&self) -> u64 {
        self.margin_ns
    }

    /// When to stop sleeping for a frame due at `due`, seen at `now`.
    pub fn sleep_until(&mut self, due: u64, now: u64) -> u64 {
        if now.saturating_sub(self.window_start) >= WINDOW_NS {
            self.window_start = now;
            self.spent_ns = 0;
        }
        if self.spent_ns >= self.budget_ns {
            return due;
        }
        due.saturating_sub(self.margin_ns)
    }

    /// Learns from a sleep meant to end at `target` that ended at `woke`.
    pub fn observe(&mut self, target: u64, woke: u64) {
        if woke.saturating_sub(target) > self.margin_ns {
            self.margin_ns = (self.margin_ns + STEPS_UP * STEP_NS).min(MAX_MARGIN_NS);
        } else {
            self.margin_ns = self.margin_ns.saturating_sub(STEP_NS);
        }
    }

    /// Spins until `due` (the caller checked it is within the margin).
    pub fn spin_until(&mut self, due: u64) {
        let start = os::monotonic_ns();
        let mut now = start;
        while now < due {
            std::hint::spin_loop();
            now = os::monotonic_ns();
        }
        self.spent_ns += now - start;
    }

    #[cfg(test)]
    fn charge(&mut self, ns: u64) {
        self.spent_ns += ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_settles_near_p90_of_wakeup_delay() {
        let mut w = EarlyWake::new(10);
        // Wake-up delays spread evenly over 0..100 µs: p90 is 90 µs.
        for i in 0..50_000u64 {
            let late = (i * 7919 % 100) * 1_000;
            w.observe(1_000_000, 1_000_000 + late);
        }
        assert!(
            (80_000..=100_000).contains(&w.margin_ns()),
            "{}",
            w.margin_ns()
        );
    }

    #[test]
    fn margin_is_capped() {
        let mut w = EarlyWake::new(10);
        for _ in 0..10_000 {
            w.observe(0, 10_000_000);
        }
        assert_eq!(w.margin_ns(), MAX_MARGIN_NS);
    }

    #[test]
    fn budget_stops_spinning_until_the_window_ends() {
        let mut w = EarlyWake::new(10);
        let due = 10_000_000;
        assert_eq!(w.sleep_until(due, 1), due - START_MARGIN_NS);
        w.charge(WINDOW_NS / 10);
        assert_eq!(
            w.sleep_until(due, 2),
            due,
            "budget spent: sleep the whole way"
        );
        assert_eq!(
            w.sleep_until(due + WINDOW_NS, 1 + WINDOW_NS),
            due + WINDOW_NS - START_MARGIN_NS
        );
        let mut off = EarlyWake::new(0);
        assert_eq!(off.sleep_until(due, 1), due);
    }
}
