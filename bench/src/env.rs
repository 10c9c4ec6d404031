//! The machine and run description recorded at the top of every CSV.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::util::{comment_lines, utc_timestamp};

/// Where and how a benchmark ran.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The command line as invoked (program path and arguments).
    pub command: String,
    /// Start time, UTC.
    pub date_utc: String,
    /// Host name.
    pub host: String,
    /// CPU model from `/proc/cpuinfo`.
    pub cpu: String,
    /// Processors listed in `/proc/cpuinfo`.
    pub cpus_listed: usize,
    /// `std::thread::available_parallelism`.
    pub parallelism: usize,
    /// Kernel release.
    pub kernel: String,
    /// `rustc --version` at run time.
    pub rustc: String,
    /// Whether this binary was built with optimizations.
    pub build: &'static str,
    /// The git commit of the workspace and any uncommitted change to the
    /// `paio` crate measured.
    pub source: String,
}

/// `git -C <workspace> args...` output, trimmed.
fn git(args: &[&str]) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The workspace commit and the state of `crates/paio` (the code measured).
fn source_state() -> String {
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown (no git)".to_string();
    };
    match git(&["status", "--porcelain", "--", "crates/paio"]) {
        Some(s) if s.is_empty() => format!("commit {commit}, crates/paio clean"),
        Some(s) => format!(
            "commit {commit} + uncommitted changes in crates/paio: {}",
            s.lines().map(str::trim).collect::<Vec<_>>().join("; ")
        ),
        None => format!("commit {commit}"),
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The first `model name` of `/proc/cpuinfo`'s text and its processor count.
pub fn parse_cpuinfo(text: &str) -> (String, usize) {
    let field = |line: &str, key: &str| -> Option<String> {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    };
    let model = text
        .lines()
        .find_map(|l| field(l, "model name"))
        .unwrap_or_else(|| "unknown".to_string());
    let count = text
        .lines()
        .filter(|l| field(l, "processor").is_some())
        .count();
    (model, count)
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` gives them.
pub fn loadavg() -> String {
    read_trim("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_string())
}

/// The 1-minute load average (`NaN` if unknown).
pub fn load1() -> f64 {
    loadavg()
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The first field of a `/proc/.../schedstat` line: nanoseconds on a CPU.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Nanoseconds the calling thread has spent running on a CPU (from
/// `/proc/thread-self/schedstat`), `None` where the kernel does not say.
pub fn thread_cpu_ns() -> Option<u64> {
    parse_schedstat(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

/// `(total, steal)` jiffies of the `cpu` line of `/proc/stat`'s text.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user and nice.
    let total = v.iter().take(8).sum();
    Some((total, *v.get(7)?))
}

/// Measures the share of CPU time the hypervisor took from this machine
/// (steal time, all CPUs) between [`StealMeter::start`] and
/// [`StealMeter::percent`]; resolution one jiffy (usually 10 ms) per CPU.
#[derive(Debug, Clone, Copy)]
pub struct StealMeter(Option<(u64, u64)>);

fn proc_stat() -> Option<(u64, u64)> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

impl StealMeter {
    /// Starts measuring.
    pub fn start() -> Self {
        Self(proc_stat())
    }

    /// Steal time since the start, in percent of all CPU time (`NaN` if
    /// unknown).
    pub fn percent(&self) -> f64 {
        match (self.0, proc_stat()) {
            (Some((t0, s0)), Some((t1, s1))) if t1 > t0 => {
                s1.saturating_sub(s0) as f64 / (t1 - t0) as f64 * 100.0
            }
            _ => f64::NAN,
        }
    }
}

/// `rustc --version`, run now (the `RUSTC` environment variable names the
/// compiler if set).
fn rustc_version() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown (rustc --version failed)".to_string())
}

impl RunInfo {
    /// Describes this process and machine now.
    pub fn collect(command: String) -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let (cpu, cpus_listed) = parse_cpuinfo(&read_trim("/proc/cpuinfo").unwrap_or_default());
        Self {
            command,
            date_utc: utc_timestamp(secs),
            host: read_trim("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
            cpu,
            cpus_listed,
            parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            rustc: rustc_version(),
            source: source_state(),
            build: if cfg!(debug_assertions) {
                "debug (unoptimized: numbers are meaningless)"
            } else {
                "release"
            },
        }
    }

    /// The `#` comment block of a CSV: this run's description, the
    /// benchmark's `title` and `params`, the load average now (the start of
    /// that benchmark), and `notes` (one line each).
    pub fn csv_header(&self, title: &str, params: &str, notes: &[&str]) -> String {
        let mut pairs = vec![
            ("benchmark".to_string(), title.to_string()),
            ("command".to_string(), self.command.clone()),
            ("parameters".to_string(), params.to_string()),
            ("date_utc".to_string(), self.date_utc.clone()),
            ("host".to_string(), self.host.clone()),
            ("cpu".to_string(), self.cpu.clone()),
            (
                "cores".to_string(),
                format!(
                    "{} listed in /proc/cpuinfo, available_parallelism {}",
                    self.cpus_listed, self.parallelism
                ),
            ),
            ("kernel".to_string(), self.kernel.clone()),
            ("rustc".to_string(), self.rustc.clone()),
            ("build".to_string(), self.build.to_string()),
            ("paio_source".to_string(), self.source.clone()),
            ("loadavg_start".to_string(), loadavg()),
        ];
        for n in notes {
            pairs.push(("note".to_string(), n.to_string()));
        }
        comment_lines(&pairs)
    }

    /// A few lines for the terminal.
    pub fn banner(&self) -> String {
        format!(
            "{}\n  date {} | host {} | cpu {} x{} | kernel {} | {} | {} | load {}\n  paio: {}\n",
            self.command,
            self.date_utc,
            self.host,
            self.cpu,
            self.parallelism,
            self.kernel,
            self.rustc,
            self.build,
            loadavg(),
            self.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_parsing() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n\
                    processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(parse_cpuinfo(text), ("AMD EPYC 7B13".to_string(), 2));
        assert_eq!(parse_cpuinfo(""), ("unknown".to_string(), 0));
        assert_eq!(parse_schedstat("1011949 0 1\n"), Some(1_011_949));
        assert_eq!(parse_schedstat(""), None);
        let stat = "cpu  212206 0 45689 253708 1731 0 141 539 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_proc_stat(stat), Some((514_014, 539)));
        assert_eq!(parse_proc_stat("intr 1 2\n"), None);
    }

    #[test]
    fn header_starts_with_comments() {
        let info = RunInfo {
            command: "paio-bench micro".into(),
            date_utc: "2025-01-01T00:00:00Z".into(),
            host: "h".into(),
            cpu: "c".into(),
            cpus_listed: 2,
            parallelism: 2,
            kernel: "k".into(),
            rustc: "rustc 1.0".into(),
            build: "release",
            source: "commit abc, crates/paio clean".into(),
        };
        let h = info.csv_header("micro", "runs=5", &["a note"]);
        assert!(h.lines().all(|l| l.starts_with("# ")));
        assert!(h.starts_with("# benchmark: micro\n# command: paio-bench micro\n"));
        assert!(h.contains("# rustc: rustc 1.0\n"));
        assert!(h.contains("# loadavg_start: "));
        assert!(h.ends_with("# note: a note\n"));
    }
}
