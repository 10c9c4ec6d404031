//! Time sources for enforcement objects and statistics.
//!
//! Every time-dependent part of a stage reads time through [`Clock`], so tests
//! drive it with [`FakeClock`] instead of sleeping. Times are nanoseconds on a
//! monotonic time line whose origin is the clock's own (not the Unix epoch).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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

    /// `CLOCK_MONOTONIC` nanoseconds at the recent tick reading `ticks`, if
    /// this clock can tell without reading the system clock: the one time
    /// line every process of the machine shares (the board of critical I/O,
    /// [`crate::CriticalBoard`]). Default: `None`, the caller reads
    /// `CLOCK_MONOTONIC` itself.
    #[inline]
    fn monotonic_ns_at(&self, ticks: u64) -> Option<u64> {
        let _ = ticks;
        None
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

    /// The ticks themselves: they are `CLOCK_MONOTONIC` nanoseconds.
    #[inline]
    fn monotonic_ns_at(&self, ticks: u64) -> Option<u64> {
        Some(ticks)
    }
}

/// Converts readings of a counter that runs at a steady rate (the CPU's
/// time-stamp counter) to `CLOCK_MONOTONIC` nanoseconds with one
/// multiplication, reading the system clock only to re-anchor.
///
/// The map holds the counter's rate (as 32.32 fixed point) and an anchor, a
/// (monotonic ns, counter) pair read at one moment. A reading more than the
/// re-anchoring interval after the anchor first takes a fresh pair. A
/// conversion is then off by at most the rate's error times the interval
/// (1 ns for a rate within 0.1 % and 1 µs), plus the pair's own spread, and
/// errors never accumulate: the system clock's corrections (NTP slewing it
/// against the counter) are taken up at each anchor. Threads may convert and
/// re-anchor at once; a conversion always uses one consistent anchor.
#[derive(Debug)]
pub struct CounterClockMap {
    ns_per_tick: f64,
    /// `ns_per_tick` × 2³².
    mult: u64,
    /// The re-anchoring interval in counter ticks.
    every_ticks: u64,
    /// Counter reading of the latest anchor.
    at: AtomicU64,
    /// Monotonic ns minus the scaled counter at the latest anchor: the
    /// anchor in one word, so that no reader sees half of one.
    offset: AtomicI64,
}

impl CounterClockMap {
    /// A map for a counter running at `ns_per_tick`, anchored at `anchor`
    /// (monotonic ns, counter), re-anchored on readings more than
    /// `every_ns` after its latest anchor.
    pub fn new(ns_per_tick: f64, every_ns: u64, anchor: (u64, u64)) -> Self {
        let map = Self {
            ns_per_tick,
            mult: (ns_per_tick * (1u64 << 32) as f64).round() as u64,
            every_ticks: (every_ns as f64 / ns_per_tick) as u64,
            at: AtomicU64::new(0),
            offset: AtomicI64::new(0),
        };
        map.anchor(anchor);
        map
    }

    /// The counter's rate the map converts at.
    #[inline]
    pub fn ns_per_tick(&self) -> f64 {
        self.ns_per_tick
    }

    /// `CLOCK_MONOTONIC` nanoseconds at counter reading `ticks`. If `ticks`
    /// is more than the interval after the latest anchor, `pair` is called
    /// for a fresh (monotonic ns, counter) pair, which becomes the anchor.
    #[inline]
    pub fn monotonic_ns(&self, ticks: u64, pair: impl FnOnce() -> (u64, u64)) -> u64 {
        if ticks.saturating_sub(self.at.load(Ordering::Relaxed)) > self.every_ticks {
            self.anchor(pair());
        }
        self.scale(ticks)
            .checked_add_signed(self.offset.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    #[inline]
    fn scale(&self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.mult)) >> 32) as u64
    }

    #[cold]
    fn anchor(&self, (ns, ticks): (u64, u64)) {
        let offset = ns as i64 - self.scale(ticks) as i64;
        self.offset.store(offset, Ordering::Relaxed);
        self.at.store(ticks, Ordering::Relaxed);
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

    /// A counter at 2.5 ticks per ns whose true rate is 0.01 % off the
    /// map's: conversions stay within the drift of one interval.
    #[test]
    fn counter_map_re_anchors_so_errors_never_accumulate() {
        let true_ns = |ticks: u64| 5_000_000 + (ticks as f64 * 0.4 * 1.0001) as u64;
        let pairs = std::cell::Cell::new(0);
        let pair = |ticks: u64| {
            pairs.set(pairs.get() + 1);
            (true_ns(ticks), ticks)
        };
        let start = 1_000_000_000;
        let map = CounterClockMap::new(0.4, 1_000_000, pair(start));
        let mut worst = 0i64;
        // 10 s of readings, one every 100 µs (250,000 ticks).
        for i in 0..100_000u64 {
            let t = start + i * 250_000;
            let got = map.monotonic_ns(t, || pair(t)) as i64;
            worst = worst.max((got - true_ns(t) as i64).abs());
        }
        // 0.01 % of a 1 ms interval is 100 ns; without re-anchoring the
        // error would reach 1 ms after 10 s.
        assert!(worst <= 101, "off by {worst} ns");
        let anchors = pairs.get();
        assert!((9_000..=10_001).contains(&anchors), "{anchors} anchors");
    }

    #[test]
    fn counter_map_converts_without_the_system_clock_inside_the_interval() {
        let map = CounterClockMap::new(0.5, 1_000_000, (7_000, 2_000));
        let no_pair = || -> (u64, u64) { panic!("re-anchored inside the interval") };
        assert_eq!(map.monotonic_ns(2_000, no_pair), 7_000);
        assert_eq!(map.monotonic_ns(2_100, no_pair), 7_050);
        // A reading older than the anchor (taken before another thread
        // re-anchored) converts on the same line.
        assert_eq!(map.monotonic_ns(1_000, no_pair), 6_500);
        assert_eq!(map.monotonic_ns(2_000_000, no_pair), 7_000 + 999_000);
        assert_eq!(
            map.monotonic_ns(2_002_001, || (9_999_999, 2_002_001)),
            9_999_999
        );
        assert_eq!(map.ns_per_tick(), 0.5);
    }

    #[test]
    fn monotonic_ticks_are_monotonic_nanoseconds() {
        let c = MonotonicClock::new();
        assert_eq!(c.monotonic_ns_at(123), Some(123));
        assert_eq!(FakeClock::new().monotonic_ns_at(123), None);
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
