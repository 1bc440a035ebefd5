//! A periodic tick that does not cost the relay: a timerfd the runtime's reactor watches
//! like a socket (the keepalive's and adaptive pacing's clock).

use std::time::Duration;

use tracing::debug;

/// A periodic tick (the keepalive's, adaptive pacing's), from a timerfd that the runtime's reactor
/// watches like any socket. Not tokio's timer: with a timer pending, every
/// epoll_wait of the runtime carries a timeout, and arming that timeout costs
/// each relayed message measurably on a virtual machine (docs/design/relay-latency.md,
/// "What made the hop cheaper"). A timerfd is armed once, in the kernel, for good.
/// Falls back to tokio's interval if no timerfd can be had.
pub(super) enum Ticker {
    Fd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    Tokio(tokio::time::Interval),
}

impl Ticker {
    pub(super) fn new(period: Duration) -> Ticker {
        Self::timerfd(period).unwrap_or_else(|e| {
            debug!("timerfd unavailable ({e}), ticking on tokio's timer");
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            Ticker::Tokio(t)
        })
    }

    fn timerfd(period: Duration) -> std::io::Result<Ticker> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscalls; the descriptor is owned by OwnedFd from here on.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let ts = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: period.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: `spec` is a valid itimerspec; the old value is not wanted.
        if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the AsyncFd owns `fd` (an OwnedFd, which always returns the
        // same open descriptor) until it is dropped.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(std::io::Error::from)?;
        Ok(Ticker::Fd(fd))
    }

    /// Waits for the next period. Periods missed while the runtime was busy count
    /// as one tick, like tokio's MissedTickBehavior::Delay.
    pub(super) async fn tick(&mut self) -> std::io::Result<()> {
        let fd = match self {
            Ticker::Tokio(t) => {
                t.tick().await;
                return Ok(());
            }
            Ticker::Fd(fd) => fd,
        };
        loop {
            let mut ready = fd.readable().await?;
            let r = ready.try_io(|fd| {
                use std::os::fd::AsRawFd;
                let mut expirations = 0u64;
                // SAFETY: reads 8 bytes into a u64, as timerfd requires.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        &mut expirations as *mut u64 as *mut libc::c_void,
                        8,
                    )
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match r {
                Ok(r) => {
                    // Read: the timer is not readable again before the next
                    // period, so the next tick waits instead of reading EAGAIN.
                    ready.clear_ready();
                    return r;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The timerfd never ticks early, and periods that passed while
    /// the runtime was blocked fold into one tick (tokio's
    /// MissedTickBehavior::Delay, which the keepalive used before).
    #[tokio::test(flavor = "current_thread")]
    async fn the_ticker_ticks_per_period_and_folds_missed_periods() {
        let period = Duration::from_millis(200);
        let mut t = Ticker::new(period);
        assert!(matches!(t, Ticker::Fd(_)), "Linux has timerfd");
        let start = Instant::now();
        t.tick().await.unwrap();
        t.tick().await.unwrap();
        assert!(start.elapsed() >= period * 2, "{:?}", start.elapsed());
        // Block the runtime for three periods: the missed periods give one tick,
        // and the tick after it waits for the next period (about 200 ms away)
        // instead of following at once as unfolded expirations would.
        std::thread::sleep(period * 3);
        t.tick().await.unwrap();
        let waited = Instant::now();
        t.tick().await.unwrap();
        assert!(
            waited.elapsed() >= period / 2,
            "missed periods were not folded into one tick ({:?})",
            waited.elapsed()
        );
    }
}
