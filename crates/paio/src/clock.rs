//! Time sources for enforcement objects and statistics.
//!
//! Every time-dependent part of a stage reads time through [`Clock`], so tests
//! drive it with [`FakeClock`] instead of sleeping. Times are nanoseconds on a
//! monotonic time line whose origin is the clock's own (not the Unix epoch).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A monotonic nanosecond time source.
///
/// Guarantees required of implementations: `now_ns` never decreases, and is
/// safe to call from many threads at once.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Nanoseconds since this clock's origin.
    fn now_ns(&self) -> u64;

    /// Whether blocked callers may really sleep for the durations computed from
    /// this clock. `false` for clocks that only move when a test moves them; an
    /// object then waits on its condition variable until it is woken.
    fn is_real_time(&self) -> bool {
        true
    }

    /// A timestamp for measuring short intervals (a call's latency), in this
    /// clock's ticks: cheaper than [`Clock::now_ns`] where the clock has a
    /// faster counter (the interposer's reads the CPU's time-stamp counter).
    /// Only differences of ticks mean anything. Default: [`Clock::now_ns`].
    #[inline]
    fn ticks(&self) -> u64 {
        self.now_ns()
    }

    /// Nanoseconds per tick, for converting tick differences when statistics
    /// are collected (never on the request path). Default: 1.
    fn ns_per_tick(&self) -> f64 {
        1.0
    }

    /// Nanoseconds from the tick reading `since` ([`Clock::ticks`]) to now,
    /// cheap enough for the request path, for comparing with windows of
    /// microseconds to seconds: a clock whose ticks are not nanoseconds
    /// converts at a rate measured once (then exact to about 0.1 %).
    /// Default: the tick difference.
    #[inline]
    fn ns_since_ticks(&self, since: u64) -> u64 {
        self.ticks().saturating_sub(since)
    }
}

/// The system's monotonic clock (`CLOCK_MONOTONIC` through [`Instant`]).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is the moment of the call.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years from the origin.
        self.origin.elapsed().as_nanos() as u64
    }

    /// `CLOCK_MONOTONIC` in nanoseconds, read directly (the vDSO) without
    /// [`Instant`]'s subtraction from the origin.
    #[inline]
    fn ticks(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec as u64)
    }
}

/// A clock that moves only when told to, for deterministic tests.
///
/// Cloning shares the same time line.
#[derive(Debug, Clone, Default)]
pub struct FakeClock {
    now: Arc<AtomicU64>,
}

impl FakeClock {
    /// A fake clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Sets the time to `ns` if that is later than now (time never goes back).
    pub fn set_ns(&self, ns: u64) {
        self.now.fetch_max(ns, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn is_real_time(&self) -> bool {
        false
    }
}

/// The clock shared by a stage and its objects.
pub type SharedClock = Arc<dyn Clock>;

/// A shared [`MonotonicClock`].
pub fn monotonic() -> SharedClock {
    Arc::new(MonotonicClock::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_forward() {
        let c = FakeClock::new();
        assert_eq!(c.now_ns(), 0);
        c.advance(Duration::from_micros(3));
        assert_eq!(c.now_ns(), 3_000);
        c.set_ns(1_000);
        assert_eq!(c.now_ns(), 3_000);
        c.set_ns(5_000);
        assert_eq!(c.clone().now_ns(), 5_000);
    }

    #[test]
    fn monotonic_clock_never_decreases() {
        let c = MonotonicClock::new();
        let mut last = 0;
        for _ in 0..10_000 {
            let t = c.now_ns();
            assert!(t >= last);
            last = t;
        }
    }
}
