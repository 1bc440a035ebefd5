//! Thin safe wrappers over the few non-socket syscalls we need: clocks, timer slack,
//! real-time scheduling and CPU accounting. Kept apart so that the `unsafe` blocks
//! are small and the rest of the program reads as plain Rust.

use std::io;

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The one time base of the delay line: it never jumps, unlike the wall clock.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Only used to translate the kernel's receive timestamps, which are wall-clock.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, to turn the kernel's wall-clock packet
/// stamps into our time base.
///
/// Two clock reads in a row are not one instant: a vCPU the host takes between
/// them (hundreds of µs on a busy host) shifts the difference by that much, and
/// every frame of the batch converted with it would be scheduled that much early.
/// So the wall clock is read between two monotonic reads, and of a few tries the
/// tightest pair is kept. (Suspected when a busy host's lab ran 2 ms short; that
/// was the calibration, and pings show no difference between the two readings:
/// results/lab/2026-11-23-wanem-clock-pair. The old one is still wrong then.)
pub fn wall_minus_mono_ns() -> u64 {
    /// A pair this close needs no further try (a vDSO read takes tens of ns).
    const TIGHT_NS: u64 = 2_000;
    let mut best = (u64::MAX, 0);
    for _ in 0..4 {
        let before = monotonic_ns();
        let wall = realtime_ns();
        let after = monotonic_ns();
        let spread = after - before;
        if spread < best.0 {
            best = (spread, wall.wrapping_sub(before + spread / 2));
        }
        if spread <= TIGHT_NS {
            break;
        }
    }
    best.1
}

/// The default 50 µs slack lets the kernel coalesce our wake-up with others; a
/// delay line wants to wake when it asked to.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only the calling thread.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A CPU wake-up latency request (PM QoS), held while the returned file stays open.
///
/// An idle CPU that halts is woken by an interrupt or timer, and on a virtual
/// machine a halted vCPU gives its physical CPU back to the host, which may not
/// hand it back for milliseconds when it is busy: the delay line then releases
/// frames late however well it schedules them. With a request of 0 µs, cpuidle
/// keeps idle CPUs in its polling state, so a frame's timer fires on a vCPU that
/// is still running. The kernel drops the request when the file is closed, so it
/// lasts exactly as long as this process, whatever way it ends.
pub fn hold_cpu_latency_us(us: i32) -> io::Result<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")?;
    // The device takes the value as a binary s32 (or as hex text); one write.
    f.write_all(&us.to_ne_bytes())?;
    Ok(f)
}

/// Puts the calling thread (not the process: on Linux, pid 0 means this thread)
/// under SCHED_FIFO at `priority`.
pub fn set_fifo_priority(priority: u8) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority.into(),
    };
    // SAFETY: `param` is a valid pointer for the duration of the call.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restricts the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for cpu < CPU_SETSIZE
    // (checked), and sched_setaffinity only reads it. pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// User and system CPU seconds, as `getrusage` reports them.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTime {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTime {
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

fn rusage(who: libc::c_int) -> CpuTime {
    // SAFETY: rusage is plain data, all-zero is a valid value, and getrusage only
    // writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    CpuTime {
        user_s: secs(ru.ru_utime),
        system_s: secs(ru.ru_stime),
    }
}

/// The whole process, all threads included.
pub fn process_cpu() -> CpuTime {
    rusage(libc::RUSAGE_SELF)
}

/// The calling thread only.
pub fn thread_cpu() -> CpuTime {
    rusage(libc::RUSAGE_THREAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_minus_mono_is_stable_and_matches_a_plain_reading() {
        let a = wall_minus_mono_ns();
        let plain = realtime_ns().wrapping_sub(monotonic_ns());
        let b = wall_minus_mono_ns();
        // Nothing adjusts the clocks between these lines: two bracketed readings
        // agree to well under the delay line's 200 µs lateness threshold. A plain
        // pair can be off by whatever the host stole between its reads; it only
        // catches a unit or sign error here.
        assert!(a.abs_diff(b) < 200_000, "{a} vs {b}");
        assert!(a.abs_diff(plain) < 50_000_000, "{a} vs {plain}");
    }
}
