//! `make demo-stage`: a stage with a rate-limited channel and a pass-through
//! channel, driven by real threads doing real file I/O, with per-channel
//! statistics printed every second.
//!
//! Two "bulk" threads write 256 KiB blocks (request context `bulk`, limited
//! by a DRL to the policy's rate, shared by both); two "interactive" threads
//! read 4 KiB blocks (request context `interactive`, pass-through). The
//! policy is `policies/demo.toml`, embedded; `--policy FILE` uses another.
//!
//! Usage: `cargo run --release -p paio --example demo -- [--seconds N] [--policy FILE]`

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use paio::object::ObjectConfig;
use paio::stats::Counts;
use paio::units::RateUnit;
use paio::{Context, ContextScope, RequestContext, RequestType, Stage};

const DEMO_POLICY: &str = include_str!("../../../policies/demo.toml");
const BULK_BLOCK: usize = 256 << 10;
const READ_BLOCK: usize = 4 << 10;
const READ_FILE: u64 = 16 << 20;
const WRITE_WRAP: u64 = 64 << 20;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    seconds: u64,
    policy: Option<PathBuf>,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        seconds: 6,
        policy: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a value")?;
                args.seconds = v
                    .parse()
                    .map_err(|_| format!("--seconds: expected a whole number, got {v:?}"))?;
            }
            "--policy" => args.policy = Some(it.next().ok_or("--policy needs a file")?.into()),
            "-h" | "--help" => {
                println!("usage: demo [--seconds N] [--policy FILE]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    Ok(args)
}

/// Removes the demo's scratch directory however the demo ends.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn bulk_writer(stage: &Stage, path: &Path, stop: &AtomicBool) -> Result<(), Error> {
    let _scope = ContextScope::enter(RequestContext::named("bulk")?);
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    let block = vec![0x5au8; BULK_BLOCK];
    let mut written = 0u64;
    while !stop.load(Ordering::Relaxed) {
        stage.enforce(
            &Context::new(RequestType::WRITE, block.len() as u64),
            Some(&block),
        )?;
        f.write_all(&block)?;
        written += block.len() as u64;
        if written >= WRITE_WRAP {
            f.seek(SeekFrom::Start(0))?;
            written = 0;
        }
    }
    Ok(())
}

fn interactive_reader(
    stage: &Stage,
    path: &Path,
    seed: u64,
    stop: &AtomicBool,
) -> Result<(), Error> {
    let _scope = ContextScope::enter(RequestContext::named("interactive")?);
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; READ_BLOCK];
    let mut x = seed | 1;
    while !stop.load(Ordering::Relaxed) {
        // xorshift: a random block of the file.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = (x % (READ_FILE / READ_BLOCK as u64)) * READ_BLOCK as u64;
        stage.enforce(&Context::new(RequestType::READ, buf.len() as u64), None)?;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(&mut buf)?;
    }
    Ok(())
}

fn mib(bytes: f64) -> f64 {
    bytes / (1u64 << 20) as f64
}

fn fmt_ns(ns: u64) -> String {
    match ns {
        0 => "0".into(),
        n if n < 10_000 => format!("{n}ns"),
        n if n < 10_000_000 => format!("{:.1}µs", n as f64 / 1e3),
        n => format!("{:.1}ms", n as f64 / 1e6),
    }
}

fn human_rate(rate: paio::Rate) -> String {
    match rate.unit {
        RateUnit::Bytes => format!("{:.2} MiB/s", mib(rate.per_second as f64)),
        RateUnit::Ops => format!("{} ops/s", rate.per_second),
    }
}

fn line(name: &str, c: &Counts) -> String {
    format!(
        "{name:<12} {:>10.0} ops/s {:>9.2} MiB/s   wait p50 {:>8} p99 {:>8}",
        c.ops_per_sec,
        mib(c.bytes_per_sec),
        fmt_ns(c.wait.p50_ns),
        fmt_ns(c.wait.p99_ns)
    )
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    let stage = Arc::new(match &args.policy {
        Some(p) => Stage::from_policy_file(p)?,
        None => Stage::from_policy_str(DEMO_POLICY, "policies/demo.toml (embedded)")?,
    });
    let info = stage.info();
    println!(
        "paio demo: stage {:?} (pid {}) on {}",
        info.identity.name, info.identity.pid, info.identity.host
    );
    for ch in &info.channels {
        for o in &ch.objects {
            if let Some(ObjectConfig::Drl(d)) = &o.config {
                println!(
                    "  channel {:?} object {:?}: DRL at {}",
                    ch.name,
                    o.name,
                    human_rate(d.rate)
                );
            }
        }
    }

    let dir = std::env::temp_dir().join(format!("paio-demo-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let scratch = Scratch(dir);
    let input = scratch.0.join("input");
    {
        let mut f = File::create(&input)?;
        let chunk = vec![0xa5u8; 1 << 20];
        for _ in 0..READ_FILE >> 20 {
            f.write_all(&chunk)?;
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..2u64 {
        let (s, halt, out) = (
            stage.clone(),
            stop.clone(),
            scratch.0.join(format!("bulk{i}")),
        );
        threads.push(thread::spawn(move || bulk_writer(&s, &out, &halt)));
        let (s, halt, input) = (stage.clone(), stop.clone(), input.clone());
        threads.push(thread::spawn(move || {
            interactive_reader(&s, &input, 0x9e37_79b9 * (i + 1), &halt)
        }));
    }

    println!("running {} s: 2 bulk writers (context \"bulk\"), 2 interactive readers (context \"interactive\")\n", args.seconds);
    stage.collect(); // start the first interval now
    let start = Instant::now();
    for second in 1..=args.seconds {
        thread::sleep(
            (start + Duration::from_secs(second)).saturating_duration_since(Instant::now()),
        );
        let stats = stage.collect();
        println!("t={second:>3}s");
        for ch in &stats.channels {
            println!("  {}", line(&ch.name, &ch.counts));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| "a demo thread panicked")??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = stage.collect();
    println!("\nsummary over {elapsed:.1} s");
    println!(
        "  {:<12} {:>12} {:>12} {:>12} {:>10}",
        "channel", "requests", "MiB", "MiB/s", "waited"
    );
    for ch in &stats.channels {
        println!(
            "  {:<12} {:>12} {:>12.1} {:>12.2} {:>10}",
            ch.name,
            ch.counts.ops,
            mib(ch.counts.bytes as f64),
            mib(ch.counts.bytes as f64) / elapsed,
            ch.counts.wait_total.waited_ops
        );
    }
    // Each byte-rate DRL's achieved rate against its limit.
    for ch in &info.channels {
        for o in &ch.objects {
            let Some(ObjectConfig::Drl(d)) = &o.config else {
                continue;
            };
            let measured = stats
                .channels
                .iter()
                .filter(|c| c.name == ch.name)
                .flat_map(|c| &c.objects)
                .find(|s| s.name == o.name);
            if let (Some(m), RateUnit::Bytes) = (measured, d.rate.unit) {
                let achieved = m.counts.bytes as f64 / elapsed;
                let target = d.rate.per_second as f64;
                let burst_share = d.effective_burst() as f64 / (target * elapsed) * 100.0;
                println!(
                    "\n{}/{}: {:.2} MiB/s against a {:.2} MiB/s limit ({:+.2} %; the initial burst of {:.2} MiB accounts for {:+.2} %)",
                    ch.name,
                    o.name,
                    mib(achieved),
                    mib(target),
                    (achieved / target - 1.0) * 100.0,
                    mib(d.effective_burst() as f64),
                    burst_share
                );
            }
        }
    }
    drop(scratch);
    Ok(())
}
