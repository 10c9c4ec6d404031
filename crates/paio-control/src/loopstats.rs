//! How well paiod's control loop keeps its period, and what paiod costs.
//!
//! Each tick records when it started (so the achieved period is the time
//! since the previous start), how long its work took, and the process's CPU
//! time. The figures cover the last [`WINDOW`] ticks (10 s at the default
//! 100 ms period); overruns and CPU time are totals since paiod started.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ctl::LoopStatus;

/// Ticks the percentiles and the CPU share are computed over.
pub const WINDOW: usize = 100;

/// A period longer than the target by more than this fraction is an
/// overrun.
pub const OVERRUN: f64 = 0.10;

struct Tick {
    start: Instant,
    period: Option<Duration>,
    work: Duration,
    cpu: Option<Duration>,
}

/// The last [`WINDOW`] ticks and the totals.
pub struct LoopStats {
    target: Duration,
    ticks: VecDeque<Tick>,
    total: u64,
    overruns: u64,
    last_start: Option<Instant>,
}

impl LoopStats {
    /// No tick yet, for a loop of period `target`.
    pub fn new(target: Duration) -> Self {
        Self {
            target,
            ticks: VecDeque::with_capacity(WINDOW),
            total: 0,
            overruns: 0,
            last_start: None,
        }
    }

    /// Judges the ticks from now on against a new period (a configuration
    /// reload).
    pub fn set_target(&mut self, target: Duration) {
        self.target = target;
    }

    /// Records a tick that started at `start`, worked for `work`, after
    /// which the process had used `cpu` (None: unknown).
    pub fn record(&mut self, start: Instant, work: Duration, cpu: Option<Duration>) {
        let period = self.last_start.map(|p| start.saturating_duration_since(p));
        if period.is_some_and(|p| p.as_secs_f64() > self.target.as_secs_f64() * (1.0 + OVERRUN)) {
            self.overruns += 1;
        }
        self.last_start = Some(start);
        self.total += 1;
        if self.ticks.len() == WINDOW {
            self.ticks.pop_front();
        }
        self.ticks.push_back(Tick {
            start,
            period,
            work,
            cpu,
        });
    }

    /// The figures `paio status` and the metrics show.
    pub fn status(&self) -> LoopStatus {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut periods: Vec<f64> = self.ticks.iter().filter_map(|t| t.period.map(ms)).collect();
        let mut work: Vec<f64> = self.ticks.iter().map(|t| ms(t.work)).collect();
        let with_cpu: Vec<&Tick> = self.ticks.iter().filter(|t| t.cpu.is_some()).collect();
        let cpu_share = match (with_cpu.first(), with_cpu.last()) {
            (Some(a), Some(b)) if b.start > a.start => {
                let used = b
                    .cpu
                    .unwrap_or_default()
                    .saturating_sub(a.cpu.unwrap_or_default());
                Some(used.as_secs_f64() / (b.start - a.start).as_secs_f64())
            }
            _ => None,
        };
        LoopStatus {
            target_ms: ms(self.target),
            ticks: self.total,
            window: self.ticks.len() as u64,
            overruns: self.overruns,
            period_p50_ms: percentile(&mut periods, 50.0),
            period_p99_ms: percentile(&mut periods, 99.0),
            period_max_ms: percentile(&mut periods, 100.0),
            work_p99_ms: percentile(&mut work, 99.0),
            cpu_share,
            cpu_seconds: with_cpu.last().and_then(|t| t.cpu).map(|c| c.as_secs_f64()),
        }
    }
}

/// The `p`th percentile (nearest rank) of `v`, or None when empty.
fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// CPU time (user + system) this process has used, from `/proc/self/stat`.
pub fn process_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat_cpu(&text, rustix::param::clock_ticks_per_second())
}

/// `utime + stime` of a `/proc/<pid>/stat` line, in `ticks_per_second`.
pub fn parse_stat_cpu(text: &str, ticks_per_second: u64) -> Option<Duration> {
    // The command name (field 2) may hold spaces and parentheses: fields
    // are counted after its closing parenthesis, where field 3 starts.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    if ticks_per_second == 0 {
        return None;
    }
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks_per_second as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_work_overruns_and_cpu_share_over_the_window() {
        let mut s = LoopStats::new(Duration::from_millis(100));
        let t0 = Instant::now();
        let periods = [100, 100, 100, 150, 100];
        let mut at = t0;
        s.record(at, Duration::from_millis(2), Some(Duration::from_millis(0)));
        let mut cpu = 0;
        for p in periods {
            at += Duration::from_millis(p);
            cpu += 10;
            s.record(
                at,
                Duration::from_millis(3),
                Some(Duration::from_millis(cpu)),
            );
        }
        let st = s.status();
        assert_eq!((st.ticks, st.window, st.overruns), (6, 6, 1));
        assert_eq!(st.period_p50_ms, Some(100.0));
        assert_eq!(st.period_max_ms, Some(150.0));
        assert_eq!(st.period_p99_ms, Some(150.0));
        assert_eq!(st.work_p99_ms, Some(3.0));
        // 50 ms of CPU over 550 ms.
        assert!((st.cpu_share.unwrap() - 50.0 / 550.0).abs() < 1e-9);
        assert_eq!(st.cpu_seconds, Some(0.05));
    }

    #[test]
    fn the_window_keeps_the_last_ticks() {
        let mut s = LoopStats::new(Duration::from_millis(10));
        let mut at = Instant::now();
        for i in 0..(WINDOW as u64 + 50) {
            at += Duration::from_millis(if i < 50 { 500 } else { 10 });
            s.record(at, Duration::ZERO, None);
        }
        let st = s.status();
        assert_eq!(st.window, WINDOW as u64);
        assert_eq!(st.period_max_ms, Some(10.0));
        assert_eq!(st.overruns, 49); // the first tick has no period
        assert_eq!(st.cpu_share, None);
        assert_eq!(
            LoopStats::new(Duration::from_secs(1))
                .status()
                .period_p99_ms,
            None
        );
    }

    #[test]
    fn cpu_time_is_read_from_proc_stat() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_cpu(line, 100), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat_cpu("garbage", 100), None);
        assert!(process_cpu_time().is_some());
    }
}
