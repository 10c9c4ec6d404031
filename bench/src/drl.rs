//! `drl` and `drl-change`: accuracy and reaction time of the dynamic rate
//! limiter with the real monotonic clock.
//!
//! Both drive one stage whose only channel (the default channel) holds one
//! [`Drl`] object, added with [`Stage::add_object`] so the benchmark keeps a
//! handle on it to read [`Drl::status`] (how many requests are blocked). The
//! clients are closed-loop threads calling `Context::new` + [`Stage::enforce`]
//! and stamping the monotonic time at which each call returns (the request's
//! release).
//!
//! **Achieved rate** (`drl`): tokens of the requests released inside a fixed
//! window `[settle, settle + duration]` (seconds after the threads start),
//! divided by the window. The bucket starts full: its burst (10 ms worth of
//! rate by default, 64 KiB for `bytes-1MiB-burst64K`) is released
//! in the first milliseconds and lies before the window, so it is **not**
//! included; the `incl_burst` columns show the rate from the first request
//! to the window's end with it. A fixed window can cut one request at each
//! end (`quantization_pct`); the release-to-release rate (`r2r`, tokens
//! released after the window's first release up to its last, divided by the
//! time between them) has no such error.
//!
//! To tell the limiter's error from the clients' (a client that is not
//! running cannot ask, and a token bucket discards credit beyond its burst
//! while nobody asks), the recorded arrivals are replayed through an exact
//! model of the bucket ([`replay`]): it gives each request's due time (so
//! the wake-up latency `release − due`) and the credit discarded at the
//! burst cap inside the window (`cap_loss_pct`).
//!
//! **Rate change** (`drl-change`): the main thread changes the rate with
//! [`Stage::apply`]`(Rule::Configure)` while the clients are blocked, and
//! times the call. From the release time stamps it reports, for each
//! change at time `t_c` from rate A to rate B:
//! - `first_release_us`: time from `t_c` to the first release;
//! - `delay_us`: the effective switch delay: if the stage kept admitting at A
//!   for τ before switching to B, tokens released after `t_c` fall short of
//!   (or exceed) `B·(t − t_c)` by `(B − A)·τ` for good. τ is that offset,
//!   averaged over the second half of the phase, divided by `A − B`; an
//!   immediate switch gives τ ≈ 0 (plus the wake-up latency of the
//!   sleeping requests);
//! - `err_after_1ms_pct`: the error against B of the rate over
//!   `(t_c + 1 ms, t_c + 101 ms]`, which is within 1 % if B holds from 1 ms
//!   after the change on (shown only where one token is under 0.5 % of
//!   that window).
//!
//! A "settling time" read off a sliding window would depend on the window:
//! a window of length W dilutes a switch delay τ to an error of
//! `τ·(B − A)/(B·W)`, so it understates τ; the offset-based delay does not.
//!
//! Individual inter-release gaps are not compared with 1/B: the kernel's
//! timer slack (50 µs by default) makes a sleeping request wake tens of
//! microseconds late, after which the requests whose tokens accrued
//! meanwhile go at once; so at 100k ops/s (10 µs per token) single gaps
//! jitter by several hundred percent while the rate over any window of a
//! few milliseconds is exact.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use paio::object::{Drl, DrlConfig, SharedDrl};
use paio::units::RateUnit;
use paio::{Context, EnforcementObject, ObjectConfig, Rate, RequestType, Rule, Stage};

use crate::env::{load1, RunInfo, StealMeter};
use crate::util::{fmt, human_size, percentile, text_table, Csv, Summary};
use crate::Target;

const MIB: u64 = 1 << 20;

/// Parameters of `drl`.
#[derive(Debug, Clone)]
pub struct DrlParams {
    /// Measurement window, seconds.
    pub duration: f64,
    /// Time from the start to the window, seconds.
    pub settle: f64,
    /// Client thread counts.
    pub threads: Vec<usize>,
}

impl DrlParams {
    /// One line for the CSV header.
    pub fn describe(&self) -> String {
        format!(
            "duration={} settle={} threads={:?}",
            self.duration, self.settle, self.threads
        )
    }
}

/// Parameters of `drl-change`.
#[derive(Debug, Clone)]
pub struct ChangeParams {
    /// Closed-loop client threads (so this many requests are blocked).
    pub waiters: usize,
    /// Time at each rate, seconds (the first phase is the warm-up at A).
    pub phase: f64,
    /// Changes per pair of rates (alternating A→B, B→A, ...).
    pub changes: usize,
    /// `(A, B)` pairs in ops/s.
    pub pairs: Vec<(u64, u64)>,
}

impl ChangeParams {
    /// One line for the CSV header.
    pub fn describe(&self) -> String {
        format!(
            "waiters={} phase={} changes={} pairs_ops_per_s={:?}",
            self.waiters, self.phase, self.changes, self.pairs
        )
    }
}

/// The monotonic clock with the benchmark's own origin, so the DRL's time
/// line and the clients' time stamps are the same.
#[derive(Debug)]
struct BenchClock {
    origin: Instant,
}

impl paio::Clock for BenchClock {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A stage whose default channel holds `drl` (on a clock starting at
/// `origin`) as its default object.
fn limited_stage(config: DrlConfig, origin: Instant) -> (Stage, Arc<Drl>) {
    let clock = Arc::new(BenchClock { origin });
    let drl = Arc::new(Drl::new(config, clock).expect("valid DRL config"));
    (stage_with(drl.clone()), drl)
}

/// A stage whose default channel holds a bucket shared by processes
/// ([`SharedDrl`]; its word here in this process's memory, which is what
/// differs from other processes' sharing it: the same atomic update).
fn shared_stage(config: DrlConfig, origin: Instant) -> Stage {
    let clock = Arc::new(BenchClock { origin });
    let word: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    stage_with(Arc::new(SharedDrl::with_word(
        config.shared_as("bench"),
        clock,
        word,
    )))
}

/// A stage whose default channel holds `object` as its default object.
fn stage_with(object: Arc<dyn EnforcementObject>) -> Stage {
    let stage = Stage::builder("bench-drl").build();
    stage
        .apply_all(&[
            Rule::CreateChannel {
                name: "limit".into(),
            },
            Rule::SetDefaultChannel {
                channel: Some("limit".into()),
            },
        ])
        .expect("valid rules");
    stage
        .add_object("limit", "drl", object)
        .expect("new object");
    stage
        .apply(&Rule::SetDefaultObject {
            channel: "limit".into(),
            object: "drl".into(),
        })
        .expect("valid rule");
    stage
}

/// Releases everyone still blocked so the clients can stop at once.
fn open_wide(stage: &Stage, unit: RateUnit) {
    let rate = Rate {
        per_second: 1_000_000_000_000,
        unit,
    };
    let _ = stage.apply(&configure(DrlConfig::new(rate)));
}

fn configure(config: DrlConfig) -> Rule {
    Rule::Configure {
        channel: "limit".into(),
        object: "drl".into(),
        config: ObjectConfig::Drl(config),
    }
}

/// What the clients recorded.
struct Recorded {
    /// Release times, ns after `start`, sorted.
    releases: Vec<u64>,
    /// `(arrival, release)` of every request, ns after `start`, sorted by
    /// arrival (the time stamp taken just before `Context::new`).
    requests: Vec<(u64, u64)>,
    /// Earliest first request, ns after `start`.
    first_arrival: u64,
    /// Requests that failed (must be 0).
    errors: u64,
}

/// One client's `(arrival, release)` pairs, first arrival, errors.
type ThreadLog = (Vec<(u64, u64)>, u64, u64);

/// Runs `threads` closed-loop clients of `size`-byte requests while
/// `control` runs on the calling thread (given the common start instant);
/// stops them when it returns.
fn closed_loop(
    stage: &Stage,
    unit: RateUnit,
    threads: usize,
    size: u64,
    capacity: usize,
    start: Instant,
    control: impl FnOnce(Instant),
) -> Recorded {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let per_thread: Vec<ThreadLog> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (stop, barrier, start) = (&stop, &barrier, &start);
                s.spawn(move || {
                    let buf = vec![0x3Cu8; size as usize];
                    let mut ts = Vec::with_capacity(capacity / threads + 1024);
                    let mut errors = 0;
                    barrier.wait();
                    let first = start.elapsed().as_nanos() as u64;
                    while !stop.load(Ordering::Relaxed) {
                        let arrival = start.elapsed().as_nanos() as u64;
                        let ctx = Context::new(RequestType::WRITE, size);
                        if black_box(stage.enforce(&ctx, Some(&buf))).is_err() {
                            errors += 1;
                        }
                        ts.push((arrival, start.elapsed().as_nanos() as u64));
                    }
                    (ts, first, errors)
                })
            })
            .collect();
        barrier.wait();
        control(start);
        stop.store(true, Ordering::Relaxed);
        open_wide(stage, unit);
        handles
            .into_iter()
            .map(|h| h.join().expect("client panicked"))
            .collect()
    });
    let mut requests: Vec<(u64, u64)> = per_thread
        .iter()
        .flat_map(|t| t.0.iter().copied())
        .collect();
    requests.sort_unstable();
    let mut releases: Vec<u64> = requests.iter().map(|r| r.1).collect();
    releases.sort_unstable();
    Recorded {
        releases,
        requests,
        first_arrival: per_thread.iter().map(|t| t.1).min().unwrap_or(0),
        errors: per_thread.iter().map(|t| t.2).sum(),
    }
}

/// Sleeps until `start + at_s` seconds.
fn sleep_until(start: Instant, at_s: f64) {
    let at = start + Duration::from_secs_f64(at_s);
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// How many of the sorted time stamps lie in `(a, b]`.
pub fn count_in(sorted: &[u64], a: u64, b: u64) -> usize {
    if b <= a {
        return 0;
    }
    sorted.partition_point(|&t| t <= b) - sorted.partition_point(|&t| t <= a)
}

/// Rates measured over one window, in tokens per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRates {
    /// Releases in `(from, to]`.
    pub releases: usize,
    /// Tokens released in `(from, to]` per second of the window.
    pub window: f64,
    /// Tokens released after the window's first release up to its last,
    /// per second between those two releases.
    pub r2r: f64,
}

/// Rates of equal-cost releases (`cost` tokens each) in the window
/// `(from, to]` (ns).
pub fn window_rates(sorted: &[u64], cost: f64, from: u64, to: u64) -> WindowRates {
    let i = sorted.partition_point(|&t| t <= from);
    let j = sorted.partition_point(|&t| t <= to);
    let releases = j - i;
    let window = releases as f64 * cost / ((to - from) as f64 / 1e9);
    let r2r = if releases >= 2 {
        (releases - 1) as f64 * cost / ((sorted[j - 1] - sorted[i]) as f64 / 1e9)
    } else {
        f64::NAN
    };
    WindowRates {
        releases,
        window,
        r2r,
    }
}

/// Percent error of `achieved` against `target`.
pub fn err_pct(achieved: f64, target: f64) -> f64 {
    (achieved / target - 1.0) * 100.0
}

/// An exact replay of the DRL's bucket (see `paio::object::Drl`) for
/// requests of `cost` tokens arriving at the sorted times `arrivals` (ns), at
/// `rate` tokens/s with a `burst`-token bucket that starts full.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// When each request's tokens were due (its earliest possible release).
    pub due: Vec<u64>,
    /// `(arrival time, tokens)`: credit the bucket discarded because it
    /// would have exceeded the burst (no request waited for it: the clients
    /// were not asking).
    pub lost: Vec<(u64, f64)>,
}

/// Replays the bucket (see [`Replay`]).
pub fn replay(arrivals: &[u64], cost: u64, rate: u64, burst: u64) -> Replay {
    const NANO: u128 = 1_000_000_000;
    let (rate, burst_nt, cost_nt) = (rate as u128, burst as u128 * NANO, cost as u128 * NANO);
    let mut credited = burst_nt;
    let mut charged: u128 = 0;
    let mut last = arrivals.first().copied().unwrap_or(0);
    let mut due = Vec::with_capacity(arrivals.len());
    let mut lost = Vec::new();
    for &a in arrivals {
        let a = a.max(last);
        let cap = charged + burst_nt;
        let accrued = credited + rate * (a - last) as u128;
        if accrued > cap {
            lost.push((a, (accrued - cap) as f64 / NANO as f64));
        }
        credited = accrued.min(cap);
        last = a;
        charged += cost_nt;
        due.push(if credited >= charged {
            a
        } else if rate == 0 {
            u64::MAX
        } else {
            a + (charged - credited).div_ceil(rate) as u64
        });
    }
    Replay { due, lost }
}

/// The reaction to one rate change (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangeAnalysis {
    /// ns from the change to the first release after it.
    pub first_release_ns: Option<u64>,
    /// Effective switch delay, ns.
    pub delay_ns: f64,
    /// Error of the rate over `(t_c + 1 ms, t_c + 1 ms + 100 ms]`, percent.
    pub err_after_1ms_pct: f64,
    /// One token in that window, in percent of the expected tokens: below
    /// about 0.5 the window can resolve a 1 % error.
    pub window_resolution_pct: f64,
}

/// Analyzes the unit-cost releases (sorted ns) around a change at `t_c`
/// from `old` to `new` tokens/s; the new rate holds until `t_end`.
pub fn analyze_change(sorted: &[u64], t_c: u64, t_end: u64, old: f64, new: f64) -> ChangeAnalysis {
    const MS: u64 = 1_000_000;
    let first_release_ns = sorted
        .get(sorted.partition_point(|&t| t <= t_c))
        .map(|&t| t - t_c);
    // Mean offset D over the second half of the phase.
    let mid = t_c + (t_end - t_c) / 2;
    let samples = 20_000u64;
    let step = ((t_end - mid) / samples).max(1);
    let (mut sum, mut n) = (0.0, 0u64);
    let mut s = mid;
    while s < t_end {
        let released = count_in(sorted, t_c, s) as f64;
        sum += released - new * (s - t_c) as f64 / 1e9;
        n += 1;
        s += step;
    }
    let delay_ns = if n > 0 && old != new {
        sum / n as f64 / (old - new) * 1e9
    } else {
        f64::NAN
    };
    let window = |d: u64| -> f64 {
        let from = t_c + d;
        let to = (from + 100 * MS).min(t_end);
        if to <= from {
            return f64::NAN;
        }
        count_in(sorted, from, to) as f64 / ((to - from) as f64 / 1e9)
    };
    let w1 = ((t_c + 101 * MS).min(t_end)).saturating_sub(t_c + MS) as f64 / 1e9;
    ChangeAnalysis {
        first_release_ns,
        delay_ns,
        err_after_1ms_pct: err_pct(window(MS), new),
        window_resolution_pct: 100.0 / (new * w1),
    }
}

/// One `drl` configuration.
struct AccuracyCase {
    name: &'static str,
    rate: Rate,
    size: u64,
    burst: Option<u64>,
    /// A bucket shared by processes (`shared`), not the object's own.
    shared: bool,
}

fn cases() -> Vec<AccuracyCase> {
    vec![
        AccuracyCase {
            name: "ops",
            rate: Rate::ops_per_sec(100_000),
            size: 0,
            burst: None,
            shared: false,
        },
        AccuracyCase {
            name: "bytes-4KiB",
            rate: Rate::bytes_per_sec(100 * MIB),
            size: 4096,
            burst: None,
            shared: false,
        },
        AccuracyCase {
            name: "bytes-1MiB",
            rate: Rate::bytes_per_sec(100 * MIB),
            size: MIB,
            burst: None,
            shared: false,
        },
        AccuracyCase {
            name: "bytes-1MiB-burst64K",
            rate: Rate::bytes_per_sec(100 * MIB),
            size: MIB,
            burst: Some(64 * 1024),
            shared: false,
        },
        AccuracyCase {
            name: "shared-ops",
            rate: Rate::ops_per_sec(100_000),
            size: 0,
            burst: None,
            shared: true,
        },
        AccuracyCase {
            name: "shared-bytes-4KiB",
            rate: Rate::bytes_per_sec(100 * MIB),
            size: 4096,
            burst: None,
            shared: true,
        },
        AccuracyCase {
            name: "shared-bytes-1MiB",
            rate: Rate::bytes_per_sec(100 * MIB),
            size: MIB,
            burst: None,
            shared: true,
        },
    ]
}

/// Runs `drl`, writes `drl.csv`, prints the summary, returns target checks.
pub fn run_accuracy(p: &DrlParams, info: &RunInfo, out: &std::path::Path) -> Vec<Target> {
    let header = info.csv_header(
        "drl: achieved rate of a DRL object with the monotonic clock, closed-loop clients",
        &p.describe(),
        &[
            "window = [settle, settle + duration] s after the clients start; the initial burst (burst_tokens) is released before it and not included; *_incl_burst covers first request to window end",
            "rate_window = tokens of requests released in the window / window; rate_r2r = tokens released after the window's first release up to its last / time between them; quantization_pct = one request's tokens relative to the window's expected tokens",
            "every request is charged in full at arrival; 1 MiB requests always wait with the bucket in debt; bytes-1MiB-burst64K also has requests 16x larger than the burst (never split)",
            "replay: the recorded arrivals are replayed through an exact model of the bucket (same clock origin): cap_loss_pct = credit discarded at the burst cap inside the window (no request was waiting for it: the clients were not running), in percent of the target tokens; err_excl_cap_pct = err_window_pct + cap_loss_pct; replay_diff = releases observed in the window - releases the model has due in the window; late_*_us = release - due (wake-up latency) of the window's requests; steal_pct = hypervisor steal time during the run (/proc/stat)",
        ],
    );
    let mut csv = Csv::new(
        header,
        &[
            "case",
            "unit",
            "target_per_s",
            "size_bytes",
            "threads",
            "burst_tokens",
            "settle_s",
            "window_s",
            "releases_in_window",
            "rate_window",
            "err_window_pct",
            "quantization_pct",
            "rate_r2r",
            "err_r2r_pct",
            "rate_incl_burst",
            "err_incl_burst_pct",
            "cap_loss_pct",
            "err_excl_cap_pct",
            "replay_diff",
            "late_p50_us",
            "late_p99_us",
            "late_max_us",
            "errors",
            "load1",
            "steal_pct",
        ],
    );
    let mut table = Vec::new();
    let mut targets = Vec::new();
    let mut worst_diff = 0i64;
    for case in cases() {
        for &threads in &p.threads {
            let load = load1();
            let steal = StealMeter::start();
            let mut config = DrlConfig::new(case.rate);
            if let Some(b) = case.burst {
                config = config.with_burst(b);
            }
            let burst = config.effective_burst();
            let start = Instant::now();
            let stage = if case.shared {
                shared_stage(config, start)
            } else {
                limited_stage(config, start).0
            };
            let cost = match case.rate.unit {
                RateUnit::Ops => 1.0,
                RateUnit::Bytes => case.size as f64,
            };
            let target = case.rate.per_second as f64;
            let total = p.settle + p.duration;
            let capacity = (target / cost * total * 1.1) as usize;
            eprintln!(
                "drl {} {} thread(s): {:.1} s (load {})",
                case.name,
                threads,
                total,
                fmt(load, 2)
            );
            let rec = closed_loop(
                &stage,
                case.rate.unit,
                threads,
                case.size,
                capacity,
                start,
                |start| sleep_until(start, total + 0.002),
            );
            let from = (p.settle * 1e9) as u64;
            let to = (total * 1e9) as u64;
            let w = window_rates(&rec.releases, cost, from, to);
            let incl = count_in(&rec.releases, rec.first_arrival, to) as f64 * cost
                / ((to - rec.first_arrival) as f64 / 1e9);
            let quant = cost / (target * p.duration) * 100.0;
            let e_w = err_pct(w.window, target);
            let e_r = err_pct(w.r2r, target);
            let e_i = err_pct(incl, target);
            let steal_pct = steal.percent();
            let arrivals: Vec<u64> = rec.requests.iter().map(|r| r.0).collect();
            let rp = replay(&arrivals, cost as u64, case.rate.per_second, burst);
            let inside = |t: u64| t > from && t <= to;
            let lost = rp
                .lost
                .iter()
                .filter(|l| inside(l.0))
                .fold(0.0, |sum, l| sum + l.1);
            let cap_loss = lost / (target * p.duration) * 100.0;
            let mut due_sorted = rp.due.clone();
            due_sorted.sort_unstable();
            let replay_diff = w.releases as i64 - count_in(&due_sorted, from, to) as i64;
            if replay_diff.abs() > worst_diff.abs() {
                worst_diff = replay_diff;
            }
            let late: Vec<f64> = rec
                .requests
                .iter()
                .zip(&rp.due)
                .filter(|((_, r), _)| inside(*r))
                .map(|((_, r), d)| r.saturating_sub(*d) as f64 / 1e3)
                .collect();
            let (late50, late99) = (percentile(&late, 0.5), percentile(&late, 0.99));
            let late_max = late.iter().copied().fold(f64::NAN, f64::max);
            csv.push(vec![
                case.name.into(),
                format!("{:?}", case.rate.unit).to_lowercase(),
                case.rate.per_second.to_string(),
                case.size.to_string(),
                threads.to_string(),
                burst.to_string(),
                fmt(p.settle, 3),
                fmt(p.duration, 3),
                w.releases.to_string(),
                fmt(w.window, 3),
                fmt(e_w, 4),
                fmt(quant, 4),
                fmt(w.r2r, 3),
                fmt(e_r, 4),
                fmt(incl, 3),
                fmt(e_i, 4),
                fmt(cap_loss, 4),
                fmt(e_w + cap_loss, 4),
                replay_diff.to_string(),
                fmt(late50, 1),
                fmt(late99, 1),
                fmt(late_max, 1),
                rec.errors.to_string(),
                fmt(load, 2),
                fmt(steal_pct, 2),
            ]);
            let unit = match case.rate.unit {
                RateUnit::Ops => "ops/s",
                RateUnit::Bytes => "MiB/s",
            };
            let scale = match case.rate.unit {
                RateUnit::Ops => 1.0,
                RateUnit::Bytes => MIB as f64,
            };
            table.push(vec![
                case.name.to_string(),
                format!("{} {unit}", fmt(target / scale, 0)),
                human_size(case.size),
                threads.to_string(),
                fmt(w.window / scale, 3),
                fmt(e_w, 4),
                format!("±{}", fmt(quant, 4)),
                fmt(e_r, 4),
                fmt(e_i, 4),
                fmt(cap_loss, 4),
                replay_diff.to_string(),
                format!("{}/{}", fmt(late50, 0), fmt(late99, 0)),
                fmt(load, 2),
            ]);
            targets.push(Target::new(
                format!(
                    "drl: {} at {} {unit}, {} B requests, {threads} thread(s)",
                    case.name,
                    fmt(target / scale, 0),
                    case.size
                ),
                "within ±0.1 % (window: ± one request more)",
                format!(
                    "{} % (r2r {} %, quantization ±{} %, lost at the burst cap {} %)",
                    fmt(e_w, 4),
                    fmt(e_r, 4),
                    fmt(quant, 4),
                    fmt(cap_loss, 4)
                ),
                e_w.abs() <= 0.1 + quant && e_r.abs() <= 0.1 && rec.errors == 0,
            ));
        }
    }
    targets.push(Target::new(
        "drl: releases in each window vs the exact bucket model fed the same arrivals",
        "equal (± 2 requests: one per window edge)",
        format!("worst difference {worst_diff} requests"),
        worst_diff.abs() <= 2,
    ));
    println!("\n== drl: {} ==", p.describe());
    print!(
        "{}",
        text_table(
            &[
                "case",
                "target",
                "size",
                "threads",
                "achieved",
                "err %",
                "quant %",
                "r2r err %",
                "incl-burst err %",
                "cap loss %",
                "vs replay",
                "late p50/p99 µs",
                "load1"
            ],
            &table
        )
    );
    let path = out.join("drl.csv");
    match csv.write(&path) {
        Ok(()) => println!("  wrote {}", path.display()),
        Err(e) => eprintln!("  cannot write {}: {e}", path.display()),
    }
    targets
}

/// One change as recorded by the control thread.
#[derive(Debug, Clone, Copy)]
struct Change {
    /// ns after start, just before `Stage::apply`.
    at: u64,
    /// Duration of the `Stage::apply` call.
    apply_ns: u64,
    /// Requests blocked in the DRL just before the call.
    waiting: u32,
    from: u64,
    to: u64,
}

/// Runs `drl-change`, writes `drl-change.csv`, prints the summary, returns
/// target checks.
pub fn run_change(p: &ChangeParams, info: &RunInfo, out: &std::path::Path) -> Vec<Target> {
    let header = info.csv_header(
        "drl-change: rate change with Stage::apply(Rule::Configure) from the main thread while closed-loop clients are blocked",
        &p.describe(),
        &[
            "t_c = instant just before Stage::apply; apply_us = duration of that call; waiting = requests blocked in the DRL just before it",
            "delay_us = effective switch delay: lasting token offset after the change (mean over the second half of the phase) / (old rate - new rate), see bench/src/drl.rs; err_after_1ms_pct = error of the rate over (t_c+1ms, t_c+101ms] against the new rate; window_resolution_pct = one token in that window",
        ],
    );
    let mut csv = Csv::new(
        header,
        &[
            "pair",
            "change",
            "from_ops_s",
            "to_ops_s",
            "waiting",
            "apply_us",
            "first_release_us",
            "delay_us",
            "err_after_1ms_pct",
            "window_resolution_pct",
            "errors",
            "load1",
        ],
    );
    let mut table = Vec::new();
    let (mut delays, mut applies, mut errs_ok, mut errors) = (Vec::new(), Vec::new(), true, 0);
    let mut worst_err: f64 = 0.0;
    for (pi, &(a, b)) in p.pairs.iter().enumerate() {
        let load = load1();
        let start = Instant::now();
        let (stage, drl) = limited_stage(DrlConfig::new(Rate::ops_per_sec(a)), start);
        let total = p.phase * (p.changes + 1) as f64;
        let capacity = (a.max(b) as f64 * total * 1.1) as usize;
        eprintln!(
            "drl-change {a} <-> {b} ops/s, {} waiters, {:.1} s (load {})",
            p.waiters,
            total,
            fmt(load, 2)
        );
        let mut changes: Vec<Change> = Vec::new();
        let mut end = 0u64;
        let rec = closed_loop(
            &stage,
            RateUnit::Ops,
            p.waiters,
            0,
            capacity,
            start,
            |start| {
                for k in 0..p.changes {
                    sleep_until(start, p.phase * (k + 1) as f64);
                    let (from, to) = if k % 2 == 0 { (a, b) } else { (b, a) };
                    let waiting = drl.status().waiting;
                    let rule = configure(DrlConfig::new(Rate::ops_per_sec(to)));
                    let t0 = Instant::now();
                    stage.apply(&rule).expect("valid configure rule");
                    let t1 = Instant::now();
                    changes.push(Change {
                        at: (t0 - start).as_nanos() as u64,
                        apply_ns: (t1 - t0).as_nanos() as u64,
                        waiting,
                        from,
                        to,
                    });
                }
                sleep_until(start, total);
                end = start.elapsed().as_nanos() as u64;
            },
        );
        errors += rec.errors;
        for (k, c) in changes.iter().enumerate() {
            let t_end = changes.get(k + 1).map_or(end, |n| n.at);
            let an = analyze_change(&rec.releases, c.at, t_end, c.from as f64, c.to as f64);
            let resolvable = an.window_resolution_pct <= 0.5;
            if resolvable {
                errs_ok &= an.err_after_1ms_pct.abs() <= 1.0;
                worst_err = worst_err.max(an.err_after_1ms_pct.abs());
            }
            delays.push(an.delay_ns);
            applies.push(c.apply_ns as f64);
            let first = an
                .first_release_ns
                .map_or("-".to_string(), |f| fmt(f as f64 / 1e3, 1));
            csv.push(vec![
                (pi + 1).to_string(),
                (k + 1).to_string(),
                c.from.to_string(),
                c.to.to_string(),
                c.waiting.to_string(),
                fmt(c.apply_ns as f64 / 1e3, 2),
                first.clone(),
                fmt(an.delay_ns / 1e3, 1),
                fmt(an.err_after_1ms_pct, 3),
                fmt(an.window_resolution_pct, 3),
                rec.errors.to_string(),
                fmt(load, 2),
            ]);
            table.push(vec![
                format!("{} → {}", c.from, c.to),
                c.waiting.to_string(),
                fmt(c.apply_ns as f64 / 1e3, 1),
                first,
                fmt(an.delay_ns / 1e3, 1),
                if resolvable {
                    fmt(an.err_after_1ms_pct, 3)
                } else {
                    format!("({})", fmt(an.err_after_1ms_pct, 1))
                },
            ]);
        }
    }
    println!("\n== drl-change: {} ==", p.describe());
    print!(
        "{}",
        text_table(
            &[
                "ops/s",
                "waiting",
                "apply µs",
                "1st release µs",
                "delay µs",
                "err after 1 ms %"
            ],
            &table
        )
    );
    println!("  (err in parentheses: one token exceeds 0.5 % of a 100 ms window at that rate, not resolvable)");
    let path = out.join("drl-change.csv");
    match csv.write(&path) {
        Ok(()) => println!("  wrote {}", path.display()),
        Err(e) => eprintln!("  cannot write {}: {e}", path.display()),
    }
    let d = Summary::of(&delays);
    let ap = Summary::of(&applies);
    vec![
        Target::new(
            "drl-change: effective switch delay after Stage::apply(Configure)",
            "<= 1 ms",
            format!(
                "median {} µs, max {} µs over {} changes",
                fmt(d.median / 1e3, 1),
                fmt(d.max / 1e3, 1),
                delays.len()
            ),
            d.max <= 1e6 && errors == 0,
        ),
        Target::new(
            "drl-change: rate over (t_c+1ms, t_c+101ms] vs new rate (resolvable changes)",
            "within ±1 %",
            format!("worst {} %", fmt(worst_err, 3)),
            errs_ok,
        ),
        Target::new(
            "drl-change: Stage::apply(Configure) duration with requests blocked",
            "no waiting behind sleepers (<= 1 ms)",
            format!(
                "median {} µs, max {} µs",
                fmt(ap.median / 1e3, 1),
                fmt(ap.max / 1e3, 1)
            ),
            ap.max <= 1e6,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Releases every `gap` ns in `(from, to]`.
    fn regular(from: u64, to: u64, gap: u64) -> Vec<u64> {
        (1..)
            .map(|k| from + k * gap)
            .take_while(|&t| t <= to)
            .collect()
    }

    #[test]
    fn counting_and_window_rates() {
        let r = regular(0, 1_000_000_000, 10_000); // 100k/s for 1 s
        assert_eq!(count_in(&r, 0, 1_000_000_000), 100_000);
        assert_eq!(count_in(&r, 5, 5), 0);
        let w = window_rates(&r, 1.0, 100_000_000, 900_000_000);
        assert_eq!(w.releases, 80_000);
        assert!((w.window - 100_000.0).abs() < 1e-6);
        assert!((w.r2r - 100_000.0).abs() < 1e-6);
        assert!((err_pct(100_100.0, 100_000.0) - 0.1).abs() < 1e-9);
    }

    #[test]
    fn replay_matches_the_bucket_semantics() {
        // 1000 tokens/s, burst 10, cost 5: two requests pass at once, then
        // one every 5 ms; a 100 ms pause discards 100 - 10 tokens.
        let rp = replay(&[0, 0, 0, 20_000_000, 120_000_000], 5, 1000, 10);
        assert_eq!(rp.due[..3], [0, 0, 5_000_000]);
        // At 20 ms: credit 10 + 20 = 30 capped at charged 15 + burst 10 = 25.
        assert_eq!(rp.due[3], 20_000_000);
        assert_eq!(rp.lost[0], (20_000_000, 5.0));
        // At 120 ms: credit 25 + 100 capped at 20 + 10 = 30; 95 lost.
        assert_eq!(rp.lost[1], (120_000_000, 95.0));
        assert_eq!(rp.due[4], 120_000_000);
    }

    #[test]
    fn change_analysis_finds_the_switch_delay() {
        // 10k/s until 1.0 s + 2 ms, then 100k/s until 1.5 s; change at 1.0 s.
        let t_c = 1_000_000_000;
        let switch = t_c + 2_000_000;
        let mut r = regular(0, switch, 100_000);
        r.extend(regular(switch, 1_500_000_000, 10_000));
        let an = analyze_change(&r, t_c, 1_500_000_000, 10_000.0, 100_000.0);
        assert!((an.delay_ns - 2e6).abs() < 20e3, "{}", an.delay_ns);
        assert_eq!(an.first_release_ns, Some(100_000));
        // 1 ms of the 100 ms window still at the old rate: -0.9 %.
        assert!(
            (an.err_after_1ms_pct + 0.9).abs() < 0.02,
            "{}",
            an.err_after_1ms_pct
        );

        // An immediate switch.
        let mut r = regular(0, t_c, 100_000);
        r.extend(regular(t_c, 1_500_000_000, 10_000));
        let an = analyze_change(&r, t_c, 1_500_000_000, 10_000.0, 100_000.0);
        assert!(an.delay_ns.abs() < 20e3, "{}", an.delay_ns);
        assert!(an.err_after_1ms_pct.abs() < 0.02);
        assert!((an.window_resolution_pct - 0.01).abs() < 1e-9);
    }
}
