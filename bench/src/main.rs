//! `paio-bench`: benchmarks of the paio stage after the PAIO paper's §9.1.
//!
//! Subcommands (each writes a CSV under `bench/results/` whose first lines
//! are `#` comments describing the run and the machine, and prints a
//! summary):
//! - `micro`: closed-loop threads, one channel and one noop object per
//!   thread, 0 B to 128 KiB requests (see [`micro`]);
//! - `profile`: nanoseconds per step of one request (see [`profile`]);
//! - `drl`: rate-limiter accuracy with the real clock (see [`drl`]);
//! - `drl-change`: reaction to a rate change while requests wait;
//! - `criticality`: the two-phase path and the priority object (see
//!   [`criticality`]);
//! - `all`: everything, with defaults for `make bench`, plus `targets.csv`.
//!
//! Run with `cargo run --release -p paio-bench -- <subcommand> [options]`;
//! `--help` lists the options.

#![warn(missing_docs)]

mod criticality;
mod drl;
mod env;
mod micro;
mod profile;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::env::RunInfo;
use crate::util::{text_table, Csv};

/// One performance target and what was measured against it.
#[derive(Debug, Clone)]
pub struct Target {
    /// What is measured.
    pub what: String,
    /// The goal.
    pub goal: String,
    /// The measurement.
    pub measured: String,
    /// Whether the goal is met.
    pub met: bool,
}

impl Target {
    /// A target check.
    pub fn new(
        what: impl Into<String>,
        goal: impl Into<String>,
        measured: impl Into<String>,
        met: bool,
    ) -> Self {
        Self {
            what: what.into(),
            goal: goal.into(),
            measured: measured.into(),
            met,
        }
    }
}

const USAGE: &str = "\
usage: paio-bench <micro|profile|drl|drl-change|criticality|all> [options]

options (each applies to the subcommands named):
  --runs N          micro, profile, criticality: measured runs per configuration (5 / 7 / 5)
  --seconds S       micro: seconds per run (1); profile: per run and item S/10;
                    criticality: per run and item (0.3)
  --warmup S        micro: unmeasured warm-up before each run (0.1)
  --threads LIST    micro: thread counts (1,2,4,... up to available_parallelism)
                    drl: thread counts (1,2)
  --sizes LIST      micro: request sizes in bytes (0,1024,4096,131072)
  --duration S      drl: measurement window per configuration (10)
  --settle S        drl: time before the window (0.5)
  --waiters N       drl-change: closed-loop clients (4)
  --phase S         drl-change: seconds at each rate (0.5)
  --changes N       drl-change: rate changes per pair of rates (6)
  --out DIR         where CSVs go (bench/results of the source tree)
  --quick           small values everywhere, for a smoke test
";

/// Command-line options; `None` means the subcommand's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// The subcommand.
    pub command: String,
    /// `--runs`.
    pub runs: Option<usize>,
    /// `--seconds`.
    pub seconds: Option<f64>,
    /// `--warmup`.
    pub warmup: Option<f64>,
    /// `--threads`.
    pub threads: Option<Vec<usize>>,
    /// `--sizes`.
    pub sizes: Option<Vec<u64>>,
    /// `--duration`.
    pub duration: Option<f64>,
    /// `--settle`.
    pub settle: Option<f64>,
    /// `--waiters`.
    pub waiters: Option<usize>,
    /// `--phase`.
    pub phase: Option<f64>,
    /// `--changes`.
    pub changes: Option<usize>,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--quick`.
    pub quick: bool,
}

fn parse_list<T: std::str::FromStr>(flag: &str, v: &str) -> Result<Vec<T>, String> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| format!("{flag}: cannot parse {x:?}"))
        })
        .collect()
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: cannot parse {v:?}"))
}

/// Parses the arguments after the program name.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--runs" => o.runs = Some(parse_num(flag, &value()?)?),
            "--seconds" => o.seconds = Some(parse_num(flag, &value()?)?),
            "--warmup" => o.warmup = Some(parse_num(flag, &value()?)?),
            "--threads" => o.threads = Some(parse_list(flag, &value()?)?),
            "--sizes" => o.sizes = Some(parse_list(flag, &value()?)?),
            "--duration" => o.duration = Some(parse_num(flag, &value()?)?),
            "--settle" => o.settle = Some(parse_num(flag, &value()?)?),
            "--waiters" => o.waiters = Some(parse_num(flag, &value()?)?),
            "--phase" => o.phase = Some(parse_num(flag, &value()?)?),
            "--changes" => o.changes = Some(parse_num(flag, &value()?)?),
            "--out" => o.out = Some(PathBuf::from(value()?)),
            "--quick" => o.quick = true,
            "-h" | "--help" | "help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if o.command.is_empty() => o.command = s.to_string(),
            s => return Err(format!("unexpected argument {s:?}")),
        }
    }
    match o.command.as_str() {
        "micro" | "profile" | "drl" | "drl-change" | "criticality" | "all" => {}
        "" => return Err("missing subcommand".into()),
        c => return Err(format!("unknown subcommand {c:?}")),
    }
    let positive = o.runs != Some(0)
        && o.waiters != Some(0)
        && o.changes != Some(0)
        && [o.seconds, o.duration, o.phase]
            .iter()
            .all(|v| v.is_none_or(|x| x > 0.0 && x.is_finite()))
        && [o.warmup, o.settle]
            .iter()
            .all(|v| v.is_none_or(|x| x >= 0.0 && x.is_finite()))
        && o.threads
            .as_ref()
            .is_none_or(|t| !t.is_empty() && !t.contains(&0));
    if !positive {
        return Err("counts and durations must be positive".into());
    }
    Ok(o)
}

/// Thread counts 1, 2, 4, ... up to `n`, and `n` itself.
pub fn default_threads(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&t| t.checked_mul(2))
        .take_while(|&t| t <= n)
        .collect();
    if v.last() != Some(&n) && n > 0 {
        v.push(n);
    }
    // The scaling target compares 2 threads with 1, even on one core.
    if !v.contains(&2) {
        v.push(2);
    }
    v
}

fn micro_params(o: &Options, parallelism: usize) -> micro::MicroParams {
    let q = o.quick;
    let mut threads = o
        .threads
        .clone()
        .unwrap_or_else(|| default_threads(parallelism));
    if !threads.contains(&1) {
        threads.insert(0, 1); // ratios are against one thread
    }
    let mut sizes = o
        .sizes
        .clone()
        .unwrap_or_else(|| vec![0, 1024, 4096, 128 * 1024]);
    if !sizes.contains(&0) {
        sizes.insert(0, 0); // cost ratios are against 0 B
    }
    micro::MicroParams {
        runs: o.runs.unwrap_or(if q { 2 } else { 5 }),
        seconds: o.seconds.unwrap_or(if q { 0.1 } else { 1.0 }),
        warmup: o.warmup.unwrap_or(if q { 0.02 } else { 0.1 }),
        threads,
        sizes,
    }
}

fn profile_params(o: &Options) -> profile::ProfileParams {
    let q = o.quick;
    profile::ProfileParams {
        runs: o.runs.unwrap_or(if q { 2 } else { 7 }),
        seconds: o.seconds.map_or(if q { 0.01 } else { 0.1 }, |s| s / 10.0),
    }
}

fn drl_params(o: &Options) -> drl::DrlParams {
    let q = o.quick;
    drl::DrlParams {
        duration: o.duration.unwrap_or(if q { 0.5 } else { 10.0 }),
        settle: o.settle.unwrap_or(if q { 0.1 } else { 0.5 }),
        threads: o.threads.clone().unwrap_or_else(|| vec![1, 2]),
    }
}

fn change_params(o: &Options) -> drl::ChangeParams {
    let q = o.quick;
    drl::ChangeParams {
        waiters: o.waiters.unwrap_or(4),
        phase: o.phase.unwrap_or(if q { 0.2 } else { 0.5 }),
        changes: o.changes.unwrap_or(if q { 2 } else { 6 }),
        pairs: vec![(10_000, 100_000), (100, 100_000)],
    }
}

fn criticality_params(o: &Options) -> criticality::CriticalityParams {
    let q = o.quick;
    criticality::CriticalityParams {
        runs: o.runs.unwrap_or(if q { 2 } else { 5 }),
        seconds: o.seconds.unwrap_or(if q { 0.02 } else { 0.3 }),
    }
}

fn print_targets(targets: &[Target]) {
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            vec![
                if t.met { "MET" } else { "MISSED" }.to_string(),
                t.what.clone(),
                t.goal.clone(),
                t.measured.clone(),
            ]
        })
        .collect();
    println!("\n== targets ==");
    print!("{}", text_table(&["", "what", "goal", "measured"], &rows));
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            if e.is_empty() {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("paio-bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let info = RunInfo::collect(command);
    let out = o
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results"));
    println!("{}", info.banner());
    if cfg!(debug_assertions) {
        eprintln!("warning: unoptimized build; run with --release for meaningful numbers");
    }
    let mut targets = Vec::new();
    let all = o.command == "all";
    if all || o.command == "micro" {
        targets.extend(micro::run(&micro_params(&o, info.parallelism), &info, &out));
    }
    if all || o.command == "profile" {
        targets.extend(profile::run(&profile_params(&o), &info, &out));
    }
    if all || o.command == "drl" {
        targets.extend(drl::run_accuracy(&drl_params(&o), &info, &out));
    }
    if all || o.command == "drl-change" {
        targets.extend(drl::run_change(&change_params(&o), &info, &out));
    }
    if all || o.command == "criticality" {
        targets.extend(criticality::run(&criticality_params(&o), &info, &out));
    }
    print_targets(&targets);
    if all {
        let mut csv = Csv::new(
            info.csv_header("targets: every target of this run", "", &[]),
            &["met", "what", "goal", "measured"],
        );
        for t in &targets {
            csv.push(vec![
                t.met.to_string(),
                t.what.clone(),
                t.goal.clone(),
                t.measured.clone(),
            ]);
        }
        let path = out.join("targets.csv");
        match csv.write(&path) {
            Ok(()) => println!("  wrote {}", path.display()),
            Err(e) => eprintln!("  cannot write {}: {e}", path.display()),
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_options() {
        let o = parse_args(&args(
            "micro --runs 3 --seconds=0.5 --threads 1,2,4 --quick",
        ))
        .unwrap();
        assert_eq!(o.command, "micro");
        assert_eq!(o.runs, Some(3));
        assert_eq!(o.seconds, Some(0.5));
        assert_eq!(o.threads, Some(vec![1, 2, 4]));
        assert!(o.quick);
        assert!(parse_args(&args("micro --runs 0")).is_err());
        assert!(parse_args(&args("micro --threads 0,1")).is_err());
        assert!(parse_args(&args("bogus")).is_err());
        assert!(parse_args(&args("all --runs")).is_err());
        assert_eq!(parse_args(&args("--help")), Err(String::new()));
        let p = micro_params(
            &parse_args(&args("micro --sizes 4096 --threads 2")).unwrap(),
            2,
        );
        assert_eq!(p.sizes, vec![0, 4096]);
        assert_eq!(p.threads, vec![1, 2]);
    }

    #[test]
    fn default_thread_counts() {
        assert_eq!(default_threads(1), vec![1, 2]);
        assert_eq!(default_threads(2), vec![1, 2]);
        assert_eq!(default_threads(6), vec![1, 2, 4, 6]);
        assert_eq!(default_threads(8), vec![1, 2, 4, 8]);
    }
}
