//! `micro`: the paper's §9.1 microbenchmark.
//!
//! Closed-loop client threads, each submitting to its own channel. A channel
//! is selected by **workflow**: each thread's requests carry its kernel
//! thread id (what [`Context::new`] puts there, as in the paper, where the
//! workflow is the client thread), and channel `t<i>` is mapped to thread
//! `i`'s id by one `map_channel { workflow = tid }` rule. Each channel's
//! default object is a `noop` object created for it, so object selection is
//! the channel's default (no object rule). Every request builds its context
//! with [`Context::new`] (the paper's context creation, part of its 327 ns)
//! and passes a real buffer of the request size as `data`; the stage must
//! return it untouched (`Outcome::data == None`), which every request checks.
//! Each client enforces through its own [`paio::stage::StageHandle`], as the
//! paper's clients each submit through their own instance; `Stage::enforce`
//! (the thread-local-cache path) is timed by `profile` (`full_0b`).
//!
//! Runs are interleaved (run 1 of every configuration, then run 2, ...) so
//! that background load on a shared machine hits all configurations alike;
//! ratios are computed within a run round and their median is reported.

use std::hint::black_box;
use std::sync::mpsc;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use paio::context::current_workflow;
use paio::differentiation::Pattern;
use paio::{Context, ObjectConfig, RequestType, Rule, Stage};

use crate::env::{load1, thread_cpu_ns, RunInfo, StealMeter};
use crate::util::{fmt, human_size, text_table, Csv, Summary};
use crate::Target;

/// Parameters of `micro`.
#[derive(Debug, Clone)]
pub struct MicroParams {
    /// Measured runs per configuration.
    pub runs: usize,
    /// Length of one measured run.
    pub seconds: f64,
    /// Unmeasured warm-up before each run.
    pub warmup: f64,
    /// Client thread counts.
    pub threads: Vec<usize>,
    /// Request sizes in bytes.
    pub sizes: Vec<u64>,
}

impl MicroParams {
    /// One line for the CSV header.
    pub fn describe(&self) -> String {
        format!(
            "runs={} seconds={} warmup={} threads={:?} sizes={:?}",
            self.runs, self.seconds, self.warmup, self.threads, self.sizes
        )
    }
}

/// One thread's measured loop.
#[derive(Debug, Clone, Copy, Default)]
struct ThreadRun {
    ops: u64,
    elapsed: Duration,
    /// On-CPU time of the thread during the loop, if the kernel reports it.
    cpu_ns: Option<u64>,
    copies: u64,
    errors: u64,
}

/// One measured run of one configuration.
#[derive(Debug, Clone, Copy)]
pub struct RunResult {
    /// Requests completed by all threads.
    pub ops: u64,
    /// Longest thread run, seconds.
    pub seconds: f64,
    /// Sum over threads of their request rates, millions per second.
    pub mops: f64,
    /// Bytes per second through the stage, GiB/s (never touched by it).
    pub gib_s: f64,
    /// Mean over threads of the time per request, ns.
    pub ns_per_req: f64,
    /// Mean over threads of the fraction of the run they spent on a CPU
    /// (below 1 when other processes or the other client took the core).
    pub cpu_share: f64,
    /// Mean over threads of on-CPU time per request, ns: the cost of a
    /// request independent of how much CPU the thread got.
    pub cpu_ns_per_req: f64,
    /// Sum over threads of requests per on-CPU second, millions: the
    /// throughput had each thread had a core to itself.
    pub mops_cpu: f64,
    /// Requests whose outcome carried a new buffer (must be 0).
    pub copies: u64,
    /// Requests that failed, plus one per thread if the stage's counts do
    /// not show every request (warm-up included) in the threads' channels
    /// with its full size (must be 0).
    pub errors: u64,
    /// 1-minute load average at the start of the run.
    pub load1: f64,
    /// Hypervisor steal time during the run, percent of all CPU time.
    pub steal_pct: f64,
}

/// The closed loop: `Context::new` + `StageHandle::enforce` until `dur` elapsed.
#[inline(never)]
fn closed_loop(stage: &Stage, buf: &[u8], dur: Duration) -> ThreadRun {
    const BATCH: u64 = 1024;
    let size = buf.len() as u64;
    let mut r = ThreadRun::default();
    let mut handle = stage.handle();
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let deadline = start + dur;
    loop {
        for _ in 0..BATCH {
            let ctx = Context::new(RequestType::WRITE, size);
            match handle.enforce(black_box(&ctx), Some(black_box(buf))) {
                Ok(out) => r.copies += out.data.is_some() as u64,
                Err(_) => r.errors += 1,
            }
        }
        r.ops += BATCH;
        if Instant::now() >= deadline {
            break;
        }
    }
    r.elapsed = start.elapsed();
    r.cpu_ns = thread_cpu_ns().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
    r
}

fn rules_for(tids: &[u64]) -> Vec<Rule> {
    let mut rules = Vec::new();
    for (i, &tid) in tids.iter().enumerate() {
        let channel = format!("t{i}");
        rules.push(Rule::CreateChannel {
            name: channel.clone(),
        });
        rules.push(Rule::CreateObject {
            channel: channel.clone(),
            name: "noop".into(),
            config: ObjectConfig::Noop,
        });
        rules.push(Rule::SetDefaultObject {
            channel: channel.clone(),
            object: "noop".into(),
        });
        rules.push(Rule::MapChannel {
            pattern: Pattern {
                workflow: Some(tid),
                ..Pattern::ANY
            },
            channel,
        });
    }
    rules
}

/// Runs `threads` closed-loop clients with `size`-byte requests.
pub fn measure(threads: usize, size: u64, warmup: Duration, dur: Duration) -> RunResult {
    let load = load1();
    let steal = StealMeter::start();
    let stage = Stage::builder("bench-micro").build();
    let barrier = Barrier::new(threads + 1);
    let (tx, rx) = mpsc::channel::<(usize, u64)>();
    let runs: Vec<ThreadRun> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (tx, stage, barrier) = (tx.clone(), &stage, &barrier);
                s.spawn(move || {
                    // A real buffer of the request size, touched so its pages
                    // exist; the stage must never read or copy it.
                    let buf = vec![0xA5u8; size as usize];
                    tx.send((i, current_workflow())).expect("main waits");
                    barrier.wait();
                    let warm = closed_loop(stage, &buf, warmup);
                    let mut run = closed_loop(stage, &buf, dur);
                    run.copies += warm.copies;
                    run.errors += warm.errors;
                    (run, warm.ops)
                })
            })
            .collect();
        let mut tids = vec![0u64; threads];
        for _ in 0..threads {
            let (i, tid) = rx.recv().expect("every worker reports");
            tids[i] = tid;
        }
        stage
            .apply_all(&rules_for(&tids))
            .expect("benchmark rules are valid");
        barrier.wait();
        let results: Vec<(ThreadRun, u64)> = handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect();
        let issued: u64 = results.iter().map(|(r, w)| r.ops + w).sum();
        let stats = stage.collect();
        let counted: u64 = stats.channels.iter().map(|c| c.counts.ops).sum();
        let bytes: u64 = stats.channels.iter().map(|c| c.counts.bytes).sum();
        let ok = counted == issued && bytes == issued * size && stats.unmatched.ops == 0;
        results
            .into_iter()
            .map(|(mut r, _)| {
                if !ok {
                    r.errors += 1;
                }
                r
            })
            .collect()
    });
    let ops: u64 = runs.iter().map(|r| r.ops).sum();
    let rate: f64 = runs
        .iter()
        .map(|r| r.ops as f64 / r.elapsed.as_secs_f64())
        .sum();
    let ns: f64 = runs
        .iter()
        .map(|r| r.elapsed.as_nanos() as f64 / r.ops as f64)
        .sum::<f64>()
        / threads as f64;
    let errors: u64 = runs.iter().map(|r| r.errors).sum();
    let cpu = |f: &dyn Fn(&ThreadRun, f64) -> f64| -> Vec<f64> {
        runs.iter()
            .map(|r| r.cpu_ns.map_or(f64::NAN, |c| f(r, c as f64)))
            .collect()
    };
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    RunResult {
        ops,
        seconds: runs
            .iter()
            .map(|r| r.elapsed.as_secs_f64())
            .fold(0.0, f64::max),
        mops: rate / 1e6,
        gib_s: rate * size as f64 / (1u64 << 30) as f64,
        ns_per_req: ns,
        cpu_share: mean(cpu(&|r, c| c / r.elapsed.as_nanos() as f64)),
        cpu_ns_per_req: mean(cpu(&|r, c| c / r.ops as f64)),
        mops_cpu: cpu(&|r, c| r.ops as f64 / c * 1e3).iter().sum(),
        copies: runs.iter().map(|r| r.copies).sum(),
        errors,
        load1: load,
        steal_pct: steal.percent(),
    }
}

/// All runs of `micro`: `results[run][config]` with configurations in
/// `configs` order.
pub struct MicroResults {
    /// `(threads, size)` in measuring order.
    pub configs: Vec<(usize, u64)>,
    /// `results[run][config]`.
    pub results: Vec<Vec<RunResult>>,
}

impl MicroResults {
    fn index(&self, threads: usize, size: u64) -> Option<usize> {
        self.configs.iter().position(|&c| c == (threads, size))
    }

    /// Per-run values of `f` for one configuration.
    pub fn values(&self, threads: usize, size: u64, f: impl Fn(&RunResult) -> f64) -> Vec<f64> {
        match self.index(threads, size) {
            Some(i) => self.results.iter().map(|run| f(&run[i])).collect(),
            None => Vec::new(),
        }
    }

    /// Per-run ratios `f(a) / f(b)` of two configurations measured in the
    /// same run round.
    pub fn ratios(
        &self,
        a: (usize, u64),
        b: (usize, u64),
        f: impl Fn(&RunResult) -> f64,
    ) -> Vec<f64> {
        match (self.index(a.0, a.1), self.index(b.0, b.1)) {
            (Some(i), Some(j)) => self
                .results
                .iter()
                .map(|run| f(&run[i]) / f(&run[j]))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Runs `micro`, writes `micro.csv` into `out`, prints the summary, and
/// returns the target checks.
pub fn run(p: &MicroParams, info: &RunInfo, out: &std::path::Path) -> Vec<Target> {
    let header = info.csv_header(
        "micro (paper §9.1): closed-loop threads, one channel per thread (workflow = kernel thread id), noop object, Context::new + StageHandle::enforce (one handle per thread) per request",
        &p.describe(),
        &[
            "record=run rows are single runs; median/min/max rows summarize the runs of a configuration",
            "ratio rows (value in column ratio): scaling = mops_s(threads)/mops_s(1 thread) at the same size; cost = ns_per_req(size)/ns_per_req(0 B) at the same thread count; computed per run round, run=median is the median of those",
            "mops_s = sum over threads of requests/s; ns_per_req = mean over threads of thread time per request; gib_s = bytes passed as data per second (the stage never reads or copies them; copies counts outcomes carrying a new buffer)",
            "cpu_share = mean over threads of on-CPU time (/proc/thread-self/schedstat) / wall time; cpu_ns_per_req = on-CPU ns per request; mops_cpu = sum over threads of requests per on-CPU second; scaling_cpu and cost_cpu are the ratios of those (what the stage costs, independent of how much CPU other processes left it); steal_pct = hypervisor steal time during the run (/proc/stat, all CPUs), which on-CPU time does not exclude",
            "runs are interleaved: round r measures every configuration once, starting at configuration r (rotating order)",
        ],
    );
    let configs: Vec<(usize, u64)> = p
        .threads
        .iter()
        .flat_map(|&t| p.sizes.iter().map(move |&s| (t, s)))
        .collect();
    let warm = Duration::from_secs_f64(p.warmup);
    let dur = Duration::from_secs_f64(p.seconds);
    let mut results = Vec::new();
    for run in 0..p.runs {
        // Rotate the order each round so no configuration always runs
        // first (right after the previous round's heaviest one).
        let n = configs.len();
        let mut row: Vec<Option<RunResult>> = vec![None; n];
        for k in 0..n {
            let i = (run + k) % n;
            let (t, s) = configs[i];
            let r = measure(t, s, warm, dur);
            eprintln!(
                "micro run {}/{}: {t} thread(s) {:>7}: {:7.2} MOps/s {:7.2} ns/req (load {})",
                run + 1,
                p.runs,
                human_size(s),
                r.mops,
                r.ns_per_req,
                fmt(r.load1, 2)
            );
            row[i] = Some(r);
        }
        results.push(row.into_iter().map(|r| r.expect("measured")).collect());
    }
    let all = MicroResults { configs, results };

    // (name, digits, value) of every per-run metric, in CSV order.
    type Metric = (&'static str, usize, fn(&RunResult) -> f64);
    let metrics: [Metric; 8] = [
        ("mops_s", 4, |r| r.mops),
        ("gib_s", 4, |r| r.gib_s),
        ("ns_per_req", 3, |r| r.ns_per_req),
        ("cpu_share", 3, |r| r.cpu_share),
        ("cpu_ns_per_req", 3, |r| r.cpu_ns_per_req),
        ("mops_cpu", 4, |r| r.mops_cpu),
        ("load1", 2, |r| r.load1),
        ("steal_pct", 2, |r| r.steal_pct),
    ];
    let mut columns = vec!["record", "threads", "size_bytes", "run", "ops", "seconds"];
    columns.extend(metrics.iter().map(|m| m.0));
    columns.extend(["copies", "errors", "ratio"]);
    let mut csv = Csv::new(header, &columns);
    for (run, row) in all.results.iter().enumerate() {
        for (&(t, s), r) in all.configs.iter().zip(row) {
            let mut cells = vec![
                "run".into(),
                t.to_string(),
                s.to_string(),
                (run + 1).to_string(),
                r.ops.to_string(),
                fmt(r.seconds, 4),
            ];
            cells.extend(metrics.iter().map(|(_, d, f)| fmt(f(r), *d)));
            cells.extend([r.copies.to_string(), r.errors.to_string(), String::new()]);
            csv.push(cells);
        }
    }
    let mut table = Vec::new();
    for &(t, s) in &all.configs {
        let sums: Vec<Summary> = metrics
            .iter()
            .map(|(_, _, f)| Summary::of(&all.values(t, s, f)))
            .collect();
        let copies: f64 = all.values(t, s, |r| r.copies as f64).iter().sum();
        let errors: f64 = all.values(t, s, |r| r.errors as f64).iter().sum();
        for (name, pick) in [
            ("median", (|x: &Summary| x.median) as fn(&Summary) -> f64),
            ("min", |x: &Summary| x.min),
            ("max", |x: &Summary| x.max),
        ] {
            let mut cells = vec![
                name.into(),
                t.to_string(),
                s.to_string(),
                String::new(),
                String::new(),
                String::new(),
            ];
            cells.extend(
                sums.iter()
                    .zip(&metrics)
                    .map(|(x, (_, d, _))| fmt(pick(x), *d)),
            );
            cells.extend([copies.to_string(), errors.to_string(), String::new()]);
            csv.push(cells);
        }
        let (mops, gib, ns, share, cpu_ns) = (sums[0], sums[1], sums[2], sums[3], sums[4]);
        let steal = sums[7];
        table.push(vec![
            t.to_string(),
            human_size(s),
            fmt(mops.median, 2),
            format!("{}–{}", fmt(mops.min, 2), fmt(mops.max, 2)),
            fmt(gib.median, 2),
            fmt(ns.median, 2),
            format!("{}–{}", fmt(ns.min, 2), fmt(ns.max, 2)),
            fmt(share.median, 2),
            fmt(cpu_ns.median, 2),
            fmt(steal.max, 1),
            format!("{copies}/{errors}"),
        ]);
    }
    println!("\n== micro: {} ==", p.describe());
    print!(
        "{}",
        text_table(
            &[
                "threads",
                "size",
                "MOps/s",
                "min–max",
                "GiB/s",
                "ns/req",
                "min–max",
                "cpu share",
                "cpu ns/req",
                "max steal %",
                "copies/errors"
            ],
            &table
        )
    );

    // Ratios within run rounds.
    let blank = columns.len() - 5;
    let mut ratio_rows = Vec::new();
    let mut push_ratio =
        |csv: &mut Csv, kind: &str, threads: String, size: String, per_run: &[f64]| {
            let row = |run: String, v: f64| {
                let mut cells = vec![format!("ratio_{kind}"), threads.clone(), size.clone(), run];
                cells.extend(std::iter::repeat_n(String::new(), blank));
                cells.push(fmt(v, 4));
                cells
            };
            for (i, v) in per_run.iter().enumerate() {
                csv.push(row((i + 1).to_string(), *v));
            }
            let s = Summary::of(per_run);
            csv.push(row("median".into(), s.median));
            ratio_rows.push(vec![
                kind.to_string(),
                threads.clone(),
                size.clone(),
                fmt(s.median, 3),
                format!("{}–{}", fmt(s.min, 3), fmt(s.max, 3)),
            ]);
            s
        };
    let (mut scaling2, mut scaling2_cpu) = (None, None);
    for &t in p.threads.iter().filter(|&&t| t > 1) {
        for &s in &p.sizes {
            let v = all.ratios((t, s), (1, s), |r| r.mops);
            let sum = push_ratio(&mut csv, "scaling", format!("{t}/1"), s.to_string(), &v);
            let v = all.ratios((t, s), (1, s), |r| r.mops_cpu);
            let cpu = push_ratio(&mut csv, "scaling_cpu", format!("{t}/1"), s.to_string(), &v);
            if t == 2 && s == 0 {
                scaling2 = Some(sum);
                scaling2_cpu = Some(cpu);
            }
        }
    }
    let (mut cost4k, mut cost4k_cpu) = (None, None);
    for &t in &p.threads {
        for &s in p.sizes.iter().filter(|&&s| s > 0) {
            let v = all.ratios((t, s), (t, 0), |r| r.ns_per_req);
            let sum = push_ratio(&mut csv, "cost", t.to_string(), format!("{s}/0"), &v);
            let v = all.ratios((t, s), (t, 0), |r| r.cpu_ns_per_req);
            let cpu = push_ratio(&mut csv, "cost_cpu", t.to_string(), format!("{s}/0"), &v);
            if t == 1 && s == 4096 {
                cost4k = Some(sum);
                cost4k_cpu = Some(cpu);
            }
        }
    }
    println!("\n  ratios (per run round, median and min–max; *_cpu use on-CPU time):");
    print!(
        "{}",
        text_table(
            &["ratio", "threads", "size", "median", "min–max"],
            &ratio_rows
        )
    );
    let path = out.join("micro.csv");
    match csv.write(&path) {
        Ok(()) => println!("  wrote {}", path.display()),
        Err(e) => eprintln!("  cannot write {}: {e}", path.display()),
    }

    let range = |s: &Summary, d: usize, unit: &str| {
        format!(
            "{}{unit} median ({}–{})",
            fmt(s.median, d),
            fmt(s.min, d),
            fmt(s.max, d)
        )
    };
    let mut targets = Vec::new();
    let ns0 = Summary::of(&all.values(1, 0, |r| r.ns_per_req));
    let cpu0 = Summary::of(&all.values(1, 0, |r| r.cpu_ns_per_req));
    if !ns0.median.is_nan() {
        targets.push(Target::new(
            "micro: 0 B request on 1 thread (Context::new + StageHandle::enforce, noop)",
            "<= 15 ns",
            format!(
                "{}; on-CPU {}",
                range(&ns0, 2, " ns"),
                range(&cpu0, 2, " ns")
            ),
            ns0.median <= 15.0,
        ));
    }
    if let (Some(s), Some(c)) = (scaling2, scaling2_cpu) {
        targets.push(Target::new(
            "micro: 2-thread / 1-thread throughput at 0 B",
            ">= 1.8x",
            format!(
                "{}; per on-CPU second {}",
                range(&s, 3, "x"),
                range(&c, 3, "x")
            ),
            s.median >= 1.8,
        ));
    }
    if let (Some(s), Some(c)) = (cost4k, cost4k_cpu) {
        targets.push(Target::new(
            "micro: per-request cost 4 KiB / 0 B on 1 thread",
            "same (ratio within 1.00 ± 0.05)",
            format!("{}; on-CPU {}", range(&s, 3, "x"), range(&c, 3, "x")),
            (s.median - 1.0).abs() <= 0.05,
        ));
    }
    let copies: u64 = all.results.iter().flatten().map(|r| r.copies).sum();
    let errors: u64 = all.results.iter().flatten().map(|r| r.errors).sum();
    targets.push(Target::new(
        "micro: buffers never copied, every request routed to its thread's channel",
        "0 copies, 0 errors",
        format!("{copies} copies, {errors} errors"),
        copies == 0 && errors == 0,
    ));
    targets
}
