//! `criticality`: the cost of the two-phase request path and of the priority
//! object.
//!
//! Items, each nanoseconds per request from a tight loop on the calling
//! thread, the median of `runs` interleaved rounds:
//! - `enforce_noop`: one-phase [`Stage::enforce`] through a noop object (the
//!   reference: today's path);
//! - `clock_ticks`: one read of the stage's latency clock ([`paio::Clock::ticks`] of
//!   the default [`paio::clock::CounterClock`]: the time-stamp counter where the
//!   kernel trusts it),
//!   of which a pair makes two;
//! - `pair_noop`: [`Stage::admit`] + [`Stage::complete`] routed to a noop
//!   object;
//! - `pair_priority_normal` / `pair_priority_critical`: the same through a
//!   priority object, for a non-critical and a critical request
//!   (uncontended: one thread, no wait);
//! - `pair_priority_2threads`: two threads, one critical and one not, each
//!   admitting and completing through the same priority object (depth 1 for
//!   the non-critical one): ns per pair per thread, contention included;
//! - `pair_noop_2threads`: two threads through the same noop object, the
//!   cost of sharing an object's statistics: ns per pair per thread;
//! - `pair_drl` / `pair_drl_shared`: the same through a DRL whose rate is
//!   too high to make anyone wait, its bucket its own or one that processes
//!   share (`shared`: one atomic update of a shared word and a
//!   `CLOCK_MONOTONIC` read per request); `pair_drl_2threads` /
//!   `pair_drl_shared_2threads`: two threads on one such object, ns per
//!   pair per thread (contention on the bucket's lock or word included);
//! - `read_whole` / `read_split`: reading a 1 MiB page-cached file with one
//!   `pread` against 32 pieces of 32 KiB each admitted and completed through
//!   the priority object, as the interposer splits it (MiB/s; the ratio is
//!   the split's cost).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use paio::{Context, CriticalScope, Criticality, RequestType, Stage};

use crate::env::{load1, RunInfo};
use crate::util::{fmt, text_table, Csv, Summary};
use crate::Target;

/// Parameters of `criticality`.
#[derive(Debug, Clone)]
pub struct CriticalityParams {
    /// Measured rounds.
    pub runs: usize,
    /// Seconds per item per round.
    pub seconds: f64,
}

const POLICY: &str = r#"
[[channel]]
name = "noop"
match = { request_context = "bench-noop" }
[[channel]]
name = "prio"
match = { request_context = "bench-prio" }
default_object = "p"
[[channel.object]]
name = "p"
kind = "priority"
depth = 1
busy_depth = 1
[[channel]]
name = "drl"
match = { request_context = "bench-drl" }
default_object = "d"
[[channel.object]]
name = "d"
kind = "drl"
rate = "1000GiB/s"
[[channel]]
name = "shared"
match = { request_context = "bench-shared" }
default_object = "d"
[[channel.object]]
name = "d"
kind = "drl"
rate = "1000GiB/s"
shared = "bench"
"#;

fn stage() -> Stage {
    // The shared bucket's word in this process's memory: the same atomic
    // update as a word that processes map.
    paio::object::install_shared_buckets(Arc::new(paio::object::LocalBuckets::default()));
    Stage::from_policy_str(POLICY, "<bench-criticality>").expect("the bench policy parses")
}

fn ctx(context: &str, critical: bool, size: u64) -> Context {
    let c = paio::RequestContext::named(context).expect("a valid name");
    let crit = if critical {
        Criticality::Critical
    } else {
        Criticality::Normal
    };
    Context::new(RequestType::READ, size)
        .with_request_context(c)
        .with_criticality(crit)
}

/// Runs `body` in batches for about `seconds`; ns per iteration.
fn per_op(seconds: f64, mut body: impl FnMut(u64)) -> f64 {
    let batch = 10_000u64;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        body(batch);
        n += batch;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn pair_loop<'s>(stage: &'s Stage, c: &Context) -> impl FnMut(u64) + 's {
    let c = *c;
    move |n| {
        for _ in 0..n {
            let a = stage.admit(std::hint::black_box(&c)).expect("admitted");
            stage.complete(a, c.size).expect("same stage");
        }
    }
}

/// Two threads on the objects of request context `context`, the first
/// critical if `one_critical`, the second not; ns per pair per thread.
fn two_threads(stage: &Arc<Stage>, context: &'static str, one_critical: bool, seconds: f64) -> f64 {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = [one_critical, false]
        .into_iter()
        .map(|critical| {
            let (stage, barrier) = (stage.clone(), barrier.clone());
            std::thread::spawn(move || {
                let _scope = critical.then(CriticalScope::enter);
                let c = ctx(context, critical, 4096);
                barrier.wait();
                per_op(seconds, pair_loop(&stage, &c))
            })
        })
        .collect();
    let per: Vec<f64> = handles
        .into_iter()
        .map(|h| h.join().expect("bench thread"))
        .collect();
    per.iter().sum::<f64>() / per.len() as f64
}

/// MiB/s reading `file` (1 MiB) whole, or in 32 KiB pieces admitted and
/// completed one by one.
fn read_mib_s(stage: &Stage, file: &File, split: bool, seconds: f64) -> f64 {
    const SIZE: usize = 1 << 20;
    const PIECE: usize = 32 << 10;
    let mut buf = vec![0u8; SIZE];
    let c = ctx("bench-prio", false, PIECE as u64);
    let start = Instant::now();
    let mut reads = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        if split {
            for off in (0..SIZE).step_by(PIECE) {
                let a = stage.admit(&c).expect("admitted");
                let got = file
                    .read_at(&mut buf[off..off + PIECE], off as u64)
                    .expect("pread");
                stage.complete(a, got as u64).expect("same stage");
            }
        } else {
            let got = file.read_at(&mut buf, 0).expect("pread");
            assert_eq!(got, SIZE, "the file is 1 MiB");
        }
        reads += 1;
    }
    reads as f64 / start.elapsed().as_secs_f64()
}

/// Runs the benchmark; writes `criticality.csv`.
pub fn run(p: &CriticalityParams, info: &RunInfo, out: &std::path::Path) -> Vec<Target> {
    println!("== criticality: two-phase path and priority object ==");
    let stage = Arc::new(stage());
    let dir = tempfile_dir();
    let path = dir.join("paio-bench-split.dat");
    let file = {
        let mut f = File::create(&path).expect("create the read file");
        f.write_all(&vec![7u8; 1 << 20])
            .expect("write the read file");
        File::open(&path).expect("open the read file")
    };
    let noop = ctx("bench-noop", false, 4096);
    let normal = ctx("bench-prio", false, 4096);
    let critical = ctx("bench-prio", true, 4096);
    let drl = ctx("bench-drl", false, 4096);
    let shared = ctx("bench-shared", false, 4096);
    let items: [&str; 13] = [
        "enforce_noop",
        "clock_ticks",
        "pair_noop",
        "pair_priority_normal",
        "pair_priority_critical",
        "pair_priority_2threads",
        "pair_noop_2threads",
        "pair_drl",
        "pair_drl_shared",
        "pair_drl_2threads",
        "pair_drl_shared_2threads",
        "read_whole",
        "read_split",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); items.len()];
    for round in 0..p.runs {
        // Rotate the order every round so drift hits every item alike.
        for k in 0..items.len() {
            let i = (k + round) % items.len();
            let s = p.seconds;
            let v = match items[i] {
                "enforce_noop" => per_op(s, |n| {
                    for _ in 0..n {
                        stage
                            .enforce(std::hint::black_box(&noop), None)
                            .expect("noop");
                    }
                }),
                "clock_ticks" => {
                    let clock = stage.clock().clone();
                    per_op(s, |n| {
                        for _ in 0..n {
                            std::hint::black_box(clock.ticks());
                        }
                    })
                }
                "pair_noop" => per_op(s, pair_loop(&stage, &noop)),
                "pair_priority_normal" => per_op(s, pair_loop(&stage, &normal)),
                "pair_priority_critical" => per_op(s, pair_loop(&stage, &critical)),
                "pair_priority_2threads" => two_threads(&stage, "bench-prio", true, s),
                "pair_noop_2threads" => two_threads(&stage, "bench-noop", false, s),
                "pair_drl" => per_op(s, pair_loop(&stage, &drl)),
                "pair_drl_shared" => per_op(s, pair_loop(&stage, &shared)),
                "pair_drl_2threads" => two_threads(&stage, "bench-drl", false, s),
                "pair_drl_shared_2threads" => two_threads(&stage, "bench-shared", false, s),
                "read_whole" => read_mib_s(&stage, &file, false, s),
                "read_split" => read_mib_s(&stage, &file, true, s),
                _ => unreachable!("every item is listed"),
            };
            results[i].push(v);
        }
    }
    let _ = std::fs::remove_file(&path);
    // The stage's clock is the process's CounterClock (the default).
    let clock_note = if paio::clock::CounterClock::new().uses_counter() {
        "the stage's clock (the default, paio::clock::counter) reads the time-stamp counter: a pair reads it twice (clock_ticks)"
    } else {
        "the stage's clock (the default, paio::clock::counter) is the monotonic clock here (the clocksource is not tsc): a pair reads it twice (clock_ticks)"
    };
    println!("  {clock_note}");
    let mut csv = Csv::new(
        info.csv_header(
            "criticality: two-phase path (admit + complete) and priority object",
            &format!("runs={} seconds={}", p.runs, p.seconds),
            &[
                "ns per request except read_* (MiB/s of 1 MiB page-cached preads)",
                clock_note,
            ],
        ),
        &["item", "unit", "median", "min", "max", "runs"],
    );
    let mut rows = Vec::new();
    let median = |name: &str| {
        let i = items.iter().position(|x| *x == name).expect("an item");
        Summary::of(&results[i]).median
    };
    for (i, name) in items.iter().enumerate() {
        let s = Summary::of(&results[i]);
        let unit = if name.starts_with("read_") {
            "MiB/s"
        } else {
            "ns"
        };
        csv.push(vec![
            name.to_string(),
            unit.to_string(),
            fmt(s.median, 1),
            fmt(s.min, 1),
            fmt(s.max, 1),
            results[i].len().to_string(),
        ]);
        rows.push(vec![
            name.to_string(),
            format!("{} {unit}", fmt(s.median, 1)),
            format!("{} .. {}", fmt(s.min, 1), fmt(s.max, 1)),
        ]);
    }
    print!("{}", text_table(&["item", "median", "min .. max"], &rows));
    println!("  load1 at the end: {:.2}", load1());
    let file_out = out.join("criticality.csv");
    match csv.write(&file_out) {
        Ok(()) => println!("  wrote {}", file_out.display()),
        Err(e) => eprintln!("  cannot write {}: {e}", file_out.display()),
    }
    let clock = median("clock_ticks");
    let normal_pair = median("pair_priority_normal");
    let critical_pair = median("pair_priority_critical");
    let split_ratio = median("read_split") / median("read_whole");
    vec![
        Target::new(
            "admit+complete, critical request (priority object, uncontended)",
            "<= 40 ns per pair",
            format!(
                "{} ns ({} ns of it two clock reads)",
                fmt(critical_pair, 1),
                fmt(2.0 * clock, 1)
            ),
            critical_pair <= 40.0,
        ),
        Target::new(
            "admit+complete, non-critical request (priority object, uncontended)",
            "<= 40 ns per pair",
            format!(
                "{} ns ({} ns of it two clock reads)",
                fmt(normal_pair, 1),
                fmt(2.0 * clock, 1)
            ),
            normal_pair <= 40.0,
        ),
        Target::new(
            "admit+complete through a DRL whose bucket processes share, vs its own",
            "reported (no goal)",
            format!(
                "{} ns against {} ns (2 threads: {} against {} ns per pair per thread)",
                fmt(median("pair_drl_shared"), 1),
                fmt(median("pair_drl"), 1),
                fmt(median("pair_drl_shared_2threads"), 1),
                fmt(median("pair_drl_2threads"), 1)
            ),
            true,
        ),
        Target::new(
            "1 MiB page-cached read split into 32 KiB pieces vs whole",
            "reported (no goal)",
            format!("{:.2}x the whole read's MiB/s", split_ratio),
            true,
        ),
    ]
}

fn tempfile_dir() -> std::path::PathBuf {
    std::env::var_os("TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}
