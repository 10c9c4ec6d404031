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

/// The clock of every stage unless told otherwise ([`counter`]):
/// `CLOCK_MONOTONIC` for everything that needs nanoseconds (rate limiters,
/// priority windows), the CPU's time-stamp counter for the two timestamps
/// around every two-phase request that measure its latency (9.5 ns a read
/// on this project's test machine against 23 ns for the vDSO clock;
/// docs/performance.md).
///
/// The counter is used only where the kernel itself trusts it: on x86-64
/// when the current clocksource is `tsc` (the kernel checked that the
/// counter is invariant and synchronised across CPUs). Otherwise ticks are
/// monotonic nanoseconds. Ticks are converted to nanoseconds when
/// statistics are collected at a rate measured between the clock's creation
/// and the conversion (more precise the longer the process runs). Each end
/// of the measurement reads the counter on both sides of the monotonic clock
/// and takes the middle, so at the shortest measurement, 100 µs (waited for
/// if a young process asks earlier), the rate is within about 0.1 %, far
/// inside a latency histogram's 12.5 % buckets. On the request path, the
/// time since a critical request completed (its end tick) is converted at
/// the rate of the first such conversion, kept from then on, and so is a
/// critical completion's end tick to `CLOCK_MONOTONIC` nanoseconds for the
/// board ([`CounterClockMap`], re-anchored on the monotonic clock once a
/// millisecond: within about 1 µs, for no system clock read per request).
#[derive(Debug)]
pub struct CounterClock {
    mono: MonotonicClock,
    /// Whether ticks are the time-stamp counter.
    tsc: bool,
    /// A (monotonic ns, counter) pair taken at creation.
    origin: (u64, u64),
    /// The rate for [`Clock::ns_since_ticks`] and [`Clock::monotonic_ns_at`],
    /// measured at the first use of either.
    map: std::sync::OnceLock<CounterClockMap>,
}

/// How often [`Clock::monotonic_ns_at`] re-anchors on the monotonic clock.
const REANCHOR_NS: u64 = 1_000_000;

/// Counter ticks since creation below which [`Clock::monotonic_ns_at`]
/// does not measure the rate: [`MIN_CALIBRATION_NS`] of a counter of up to
/// 5 GHz, so that the measurement never waits.
const YOUNG_TICKS: u64 = MIN_CALIBRATION_NS * 5;

/// Shortest measurement behind [`Clock::ns_per_tick`].
const MIN_CALIBRATION_NS: u64 = 100_000;

/// Counter ticks allowed between the two readings around the monotonic
/// clock (about 10 µs at 2 GHz); a wider pair (the thread was preempted or
/// interrupted between them) is read again, up to [`PAIR_TRIES`] times.
const PAIR_SPREAD_TICKS: u64 = 20_000;
const PAIR_TRIES: u32 = 4;

impl CounterClock {
    /// A clock using the time-stamp counter if the kernel's clocksource is
    /// `tsc` (one read of sysfs; [`counter`] shares one clock per process).
    pub fn new() -> Self {
        let tsc = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc");
        let mono = MonotonicClock::new();
        let origin = if tsc { pair(&mono) } else { (mono.ticks(), 0) };
        Self {
            mono,
            tsc,
            origin,
            map: std::sync::OnceLock::new(),
        }
    }

    /// Whether ticks are the time-stamp counter (else monotonic ns).
    pub fn uses_counter(&self) -> bool {
        self.tsc
    }

    /// The counter's map to monotonic time, measured at the first call (a
    /// call in the process's first 100 µs waits for the rest of them, once)
    /// and anchored on the measurement's last reading.
    #[inline]
    fn map(&self) -> &CounterClockMap {
        self.map.get_or_init(|| {
            let (rate, now) = self.measure();
            CounterClockMap::new(rate, REANCHOR_NS, now)
        })
    }

    /// The counter's rate in ns per tick since the clock's creation, waiting
    /// until at least [`MIN_CALIBRATION_NS`] have passed, with the (monotonic
    /// ns, counter) pair that ended the measurement.
    fn measure(&self) -> (f64, (u64, u64)) {
        let mut now = pair(&self.mono);
        while now.0.saturating_sub(self.origin.0) < MIN_CALIBRATION_NS {
            std::hint::spin_loop();
            now = pair(&self.mono);
        }
        let ns = now.0.saturating_sub(self.origin.0) as f64;
        let ticks = now.1.saturating_sub(self.origin.1).max(1) as f64;
        (ns / ticks, now)
    }
}

impl Default for CounterClock {
    fn default() -> Self {
        Self::new()
    }
}

/// A (monotonic ns, counter) pair read at one moment: the counter is read
/// on both sides of the monotonic clock and the middle taken, from the
/// narrowest of up to [`PAIR_TRIES`] readings.
fn pair(mono: &MonotonicClock) -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..PAIR_TRIES {
        let before = rdtsc();
        let ns = mono.ticks();
        let after = rdtsc();
        let spread = after.saturating_sub(before);
        if spread < best.2 {
            best = (ns, before + spread / 2, spread);
        }
        if spread <= PAIR_SPREAD_TICKS {
            break;
        }
    }
    (best.0, best.1)
}

/// The time-stamp counter (0 where there is none: [`CounterClock`] then
/// never reads it).
#[inline(always)]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        safe_arch::read_timestamp_counter()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

impl Clock for CounterClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.mono.now_ns()
    }

    #[inline]
    fn ticks(&self) -> u64 {
        if self.tsc {
            rdtsc()
        } else {
            self.mono.ticks()
        }
    }

    /// Converts at the rate [`Clock::ns_per_tick`] gives at the first call
    /// (of this or [`Clock::monotonic_ns_at`]), kept from then on: a call in
    /// the clock's first 100 µs waits for the rest of them, once.
    #[inline]
    fn ns_since_ticks(&self, since: u64) -> u64 {
        if !self.tsc {
            return self.mono.ticks().saturating_sub(since);
        }
        let ticks = rdtsc().saturating_sub(since);
        (ticks as f64 * self.map().ns_per_tick()) as u64
    }

    /// Without the counter, ticks are monotonic nanoseconds; with it, the
    /// reading converted at the rate of [`Clock::ns_since_ticks`] from an
    /// anchor at most 1 ms old. `None` in a clock too young for the rate
    /// (measuring it would wait for the rest of its first 100 µs): the
    /// caller reads the clock instead.
    #[inline]
    fn monotonic_ns_at(&self, ticks: u64) -> Option<u64> {
        if !self.tsc {
            return Some(ticks);
        }
        let map = match self.map.get() {
            Some(map) => map,
            None if ticks.saturating_sub(self.origin.1) < YOUNG_TICKS => return None,
            None => self.map(),
        };
        Some(map.monotonic_ns(ticks, || pair(&self.mono)))
    }

    fn ns_per_tick(&self) -> f64 {
        if !self.tsc {
            return 1.0;
        }
        self.measure().0
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

/// The process's [`CounterClock`], created at the first call: the clock of
/// every stage built without one ([`crate::StageBuilder::clock`]), of
/// libpaio's and of the interposer's.
pub fn counter() -> SharedClock {
    process_counter().clone()
}

/// The process's [`CounterClock`] (what [`counter`] shares).
fn process_counter() -> &'static Arc<CounterClock> {
    static CLOCK: std::sync::OnceLock<Arc<CounterClock>> = std::sync::OnceLock::new();
    CLOCK.get_or_init(|| Arc::new(CounterClock::new()))
}

/// Whether [`counter`]'s ticks are the time-stamp counter: a holder of that
/// clock may then read [`counter_ticks`] instead of a call through it.
pub(crate) fn counter_is_tsc() -> bool {
    process_counter().uses_counter()
}

/// [`Clock::ticks`] of [`counter`] when [`counter_is_tsc`]: the counter,
/// read inline.
#[inline(always)]
pub(crate) fn counter_ticks() -> u64 {
    rdtsc()
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

    /// The counter clock's ticks convert to the monotonic time line: a
    /// tick maps within 0.1 ms of the monotonic readings around it, and the
    /// time since a tick is within 10 % of the monotonic time around it
    /// (wide bounds: the real clocks of a shared machine; the conversion's
    /// exactness is the map's test above). Without the counter the ticks
    /// are monotonic nanoseconds.
    #[test]
    fn counter_clock_converts_its_ticks_to_monotonic_time() {
        let c = CounterClock::new();
        let mono = MonotonicClock::new();
        let spin = |ns: u64| {
            let start = mono.ticks();
            while mono.ticks() - start < ns {
                std::hint::spin_loop();
            }
        };
        // Past the youngest age at which the rate is measured.
        spin(200_000);
        // Each reading is bracketed by the monotonic clock, so that a
        // preemption between two readings widens the bounds, not the error.
        let before = mono.ticks();
        let t = c.ticks();
        let after = mono.ticks();
        let at = c.monotonic_ns_at(t).expect("old enough for the rate");
        assert!(
            before.saturating_sub(100_000) <= at && at <= after + 100_000,
            "{at} not within {before}..{after}"
        );
        if !c.uses_counter() {
            assert_eq!(at, t);
        }
        let before = mono.ticks();
        let since = c.ticks();
        spin(1_000_000);
        let ns = c.ns_since_ticks(since);
        let elapsed = mono.ticks() - before;
        assert!(
            900_000 <= ns && ns <= elapsed + elapsed / 10,
            "{ns} ns for at least 1 ms and at most {elapsed} ns"
        );
        assert!(c.ns_per_tick() > 0.0);
    }
}
