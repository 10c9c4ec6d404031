//! The interposer's clock: `CLOCK_MONOTONIC` for everything that needs
//! nanoseconds (rate limiters, priority windows), the CPU's time-stamp
//! counter for the two timestamps around every data call that measure its
//! latency (9.5 ns a read on this machine's class against 23 ns for the vDSO
//! clock; docs/performance.md).
//!
//! The counter is used only where the kernel itself trusts it: when the
//! current clocksource is `tsc` (the kernel checked that the counter is
//! invariant and synchronised across CPUs). Otherwise ticks are monotonic
//! nanoseconds. Ticks are converted to nanoseconds when statistics are
//! collected at a rate measured between the clock's creation and the
//! conversion (more precise the longer the process runs). Each end of the
//! measurement reads the counter on both sides of the monotonic clock and
//! takes the middle, so at the shortest measurement, 100 µs (waited for if
//! a young process asks earlier), the rate is within about 0.1 %, far
//! inside a latency histogram's 12.5 % buckets. On the request path, the
//! time since a critical request completed (its end tick) is converted at
//! the rate of the first such conversion, kept from then on, and so is a
//! critical completion's end tick to `CLOCK_MONOTONIC` nanoseconds for the
//! board ([`CounterClockMap`], re-anchored on the monotonic clock once a
//! millisecond: within about 1 µs, for no system clock read per request).

use std::sync::OnceLock;

use paio::clock::{Clock, CounterClockMap, MonotonicClock};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct TscClock {
    mono: MonotonicClock,
    /// Whether ticks are the time-stamp counter.
    tsc: bool,
    /// A (monotonic ns, counter) pair taken at creation.
    origin: (u64, u64),
    /// The rate for [`Clock::ns_since_ticks`] and [`Clock::monotonic_ns_at`],
    /// measured at the first use of either.
    map: OnceLock<CounterClockMap>,
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

impl TscClock {
    /// A clock using the time-stamp counter if the kernel's clocksource is
    /// `tsc`.
    pub(crate) fn new() -> Self {
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
            map: OnceLock::new(),
        }
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

/// The time-stamp counter.
#[inline]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rdtsc` reads a register; it has no memory effects and is
    // available on every x86-64 CPU (it is used only when the kernel's
    // clocksource is `tsc`, so the counter is invariant and synchronised).
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

impl Clock for TscClock {
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
    /// the process's first 100 µs waits for the rest of them, once.
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
    /// anchor at most 1 ms old. `None` in a process too young for the rate
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
