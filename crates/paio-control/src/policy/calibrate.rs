//! Calibration against the kernel's I/O counters (§7 of the paper).
//!
//! A stage counts the bytes of the requests it lets through; the kernel's
//! `/proc/<pid>/io` counts what reached the block layer. Page-cache hits,
//! read-ahead and write-back make the two differ, so a DRL rate of `T`
//! bytes/s at the stage does not give `T` bytes/s at the device. Each period
//! the calibrator measures, per stage, the ratio
//! `m = stage bytes/s ÷ kernel bytes/s` (stage bytes needed per kernel byte)
//! and keeps a correction factor `f`:
//!
//! - `m` is clamped to [[`MIN_FACTOR`], [`MAX_FACTOR`]] = [¼, 4];
//! - `f ← (1 − ALPHA)·f + ALPHA·m` with [`ALPHA`] = ½ (exponential smoothing,
//!   so one odd period moves the rate at most halfway);
//! - the stage is given `target × f`.
//!
//! `f` starts at 1 and is only updated when both rates are at least
//! [`MIN_MEASURABLE`] (1 MiB/s), since ratios of tiny rates are noise.
//! With a steady ratio the kernel-level rate converges geometrically to the
//! target (the error halves every period). State is kept per stage and
//! dropped when the stage leaves.

use std::collections::BTreeMap;

use super::common::ControlSettings;
use super::{StageId, StageView};

/// Lowest correction factor.
pub const MIN_FACTOR: f64 = 0.25;
/// Highest correction factor.
pub const MAX_FACTOR: f64 = 4.0;
/// Weight of the newest measurement in the smoothed factor.
pub const ALPHA: f64 = 0.5;
/// Rates (bytes/s) below which a measurement is ignored.
pub const MIN_MEASURABLE: f64 = 1024.0 * 1024.0;

/// Per-stage correction factors.
#[derive(Debug, Clone, Default)]
pub struct Calibrator {
    factors: BTreeMap<StageId, f64>,
}

impl Calibrator {
    /// The current factor of stage `id` (1 when unknown).
    pub fn factor(&self, id: StageId) -> f64 {
        self.factors.get(&id).copied().unwrap_or(1.0)
    }

    /// Updates the factor of `view`'s stage from this period's figures
    /// (the controlled channel's `bytes_per_sec` and the matching kernel
    /// counter) and returns it.
    pub fn observe(&mut self, settings: &ControlSettings, view: &StageView) -> f64 {
        let f = self.factor(view.id);
        let stage = settings.achieved(view);
        let next = match settings.kernel_rate(view) {
            Some(kernel) if stage >= MIN_MEASURABLE && kernel >= MIN_MEASURABLE => {
                let m = (stage / kernel).clamp(MIN_FACTOR, MAX_FACTOR);
                ((1.0 - ALPHA) * f + ALPHA * m).clamp(MIN_FACTOR, MAX_FACTOR)
            }
            _ => f,
        };
        self.factors.insert(view.id, next);
        next
    }

    /// The rate to give `view`'s stage so its kernel-level rate approaches
    /// `target`: observes the period, then returns `target × factor`.
    pub fn calibrate(&mut self, settings: &ControlSettings, view: &StageView, target: f64) -> f64 {
        target * self.observe(settings, view)
    }

    /// Forgets the stages not in `ids`.
    pub fn retain(&mut self, ids: &[StageId]) {
        self.factors.retain(|id, _| ids.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::*;

    #[test]
    fn converges_when_kernel_sees_half_the_bytes() {
        // Half of the stage's reads hit the page cache: the kernel sees
        // half. To get 100 MB/s at the device the stage needs 200 MB/s.
        let s = ControlSettings::default();
        let mut c = Calibrator::default();
        let target = 100e6;
        let mut rate = target;
        for _ in 0..30 {
            let v = with_io(view(1, "a", Some(rate), 1), rate / 2.0);
            rate = c.calibrate(&s, &v, target);
        }
        assert!((rate - 200e6).abs() < 1e3, "{rate}");
    }

    #[test]
    fn is_clamped_smoothed_and_ignores_small_rates() {
        let s = ControlSettings::default();
        let mut c = Calibrator::default();
        // Kernel sees 100x the stage's bytes: clamp to 1/4, smoothed.
        let v = with_io(view(1, "a", Some(10e6), 1), 1e9);
        assert_eq!(c.observe(&s, &v), 0.5 * 1.0 + 0.5 * MIN_FACTOR);
        for _ in 0..50 {
            c.observe(&s, &v);
        }
        assert!((c.factor(1) - MIN_FACTOR).abs() < 1e-9);
        // Tiny or missing kernel figures leave the factor alone.
        let mut c = Calibrator::default();
        assert_eq!(
            c.observe(&s, &with_io(view(2, "a", Some(10e6), 0), 10.0)),
            1.0
        );
        assert_eq!(c.observe(&s, &view(2, "a", Some(10e6), 0)), 1.0);
        assert_eq!(c.observe(&s, &with_io(view(2, "a", None, 0), 10e6)), 1.0);
        c.retain(&[]);
        assert_eq!(c.factor(2), 1.0);
    }
}
