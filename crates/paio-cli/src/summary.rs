//! The interposer's statistics files (`PAIO_STATS`) and the summary
//! `paio run --summary` prints.
//!
//! A statistics file is one JSON document
//! `{"pid":N,"ppid":N,"exe":"...","stats":<paio::StageStats>}`, rewritten
//! atomically by each process. `%p` in the pattern stands for the pid.
//!
//! Only regular files owned by this process's effective user are read (a
//! file another user planted in a shared directory such as `/tmp`, or a
//! symbolic link, is refused with an error naming it), and none larger
//! than [`MAX_STATS_FILE`].

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use paio::stats::{ChannelStats, Counts, MergedHistograms, StageStats};
use paio_control::record::{self, ChannelSample, Sample};
use serde::{Deserialize, Serialize};

/// One process's statistics file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsFile {
    /// The process id.
    pub pid: u32,
    /// Its parent's.
    pub ppid: u32,
    /// Its executable.
    pub exe: String,
    /// Its stage's statistics at the last write.
    pub stats: StageStats,
}

impl StatsFile {
    /// `stage[exe] pid`: the process's stage as `paio top`, recordings and
    /// plots name it.
    pub fn stage_label(&self) -> String {
        let exe = Path::new(&self.exe)
            .file_name()
            .map_or_else(|| self.exe.clone(), |n| n.to_string_lossy().into_owned());
        format!("{}[{exe}] {}", self.stats.stage, self.pid)
    }
}

/// Turns the statistics files of a `paio run --record` into recording
/// samples, each process's collection once: a file whose stage has not
/// collected since the previous sample is left out of the next. When
/// collections were missed between two samples (the stage rewrote its file
/// more than once), a channel's rates cover the whole time since the
/// collection seen before, from the stage's cumulative counts, so no bytes
/// or operations are lost from the recording; its wait and latency figures
/// are those of the last period.
#[derive(Debug, Default)]
pub struct FileSampler {
    seen: std::collections::HashMap<u32, Seen>,
}

/// A process's last collection taken into a sample.
#[derive(Debug)]
struct Seen {
    at_ns: u64,
    /// Each channel's cumulative (operations, bytes) then.
    totals: std::collections::HashMap<String, (u64, u64)>,
}

impl FileSampler {
    /// The sample at `t_s` seconds of the run, from `files`.
    pub fn sample(&mut self, files: &[&StatsFile], t_s: f64, now: SystemTime) -> Sample {
        let mut channels = Vec::new();
        for f in files {
            let at_ns = f.stats.collected_at_ns;
            if self.seen.get(&f.pid).is_some_and(|b| b.at_ns == at_ns) {
                continue;
            }
            let totals = f
                .stats
                .channels
                .iter()
                .map(|c| (c.name.clone(), (c.counts.ops, c.counts.bytes)))
                .collect();
            let before = self.seen.insert(f.pid, Seen { at_ns, totals });
            // The stage's own previous collection was after the one seen.
            let missed = before
                .filter(|b| at_ns.saturating_sub(f.stats.interval_ns) > b.at_ns)
                .map(|b| (b.totals, (at_ns - b.at_ns) as f64 / 1e9));
            let stage = f.stage_label();
            channels.extend(f.stats.channels.iter().map(|c| {
                let (ops, bytes) = (c.counts.ops, c.counts.bytes);
                let (ops_per_sec, bytes_per_sec) = missed
                    .as_ref()
                    .and_then(|(totals, secs)| {
                        // Counts that went back belong to another stage (a
                        // pid used again) or a channel made anew.
                        let &(ops0, bytes0) = totals.get(&c.name)?;
                        (ops >= ops0 && bytes >= bytes0)
                            .then(|| ((ops - ops0) as f64 / secs, (bytes - bytes0) as f64 / secs))
                    })
                    .unwrap_or((c.counts.ops_per_sec, c.counts.bytes_per_sec));
                ChannelSample {
                    stage: stage.clone(),
                    channel: c.name.clone(),
                    bytes_per_sec,
                    ops_per_sec,
                    wait: c.counts.wait,
                    latency: c.counts.latency,
                }
            }));
        }
        Sample {
            v: record::VERSION,
            t_s,
            unix_ms: record::unix_ms(now),
            dropped: 0,
            channels,
        }
    }
}

/// Largest statistics file read (a stage's channel takes about 2 KiB).
pub const MAX_STATS_FILE: u64 = 64 << 20;

/// Why a statistics file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// A file matching the pattern that this user's processes did not write.
    #[error(
        "{}: {what}: ignored (statistics are read only from regular files of this user, uid {me}: files its own processes wrote)",
        .path.display()
    )]
    Foreign {
        /// The path.
        path: PathBuf,
        /// What it is instead (`owned by uid N`, `a symbolic link`, ...).
        what: String,
        /// This process's effective uid.
        me: u32,
    },
    /// A file above [`MAX_STATS_FILE`].
    #[error("{}: {len} bytes, more than the {MAX_STATS_FILE} a statistics file may have: ignored", .path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// Unreadable file or directory.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not a statistics document.
    #[error("{}: not a paio statistics file: {source}", .path.display())]
    Json {
        /// The path.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
}

/// Whether `name` is `parts` joined by runs of one or more ASCII digits
/// (`parts` is a file name pattern split at `%p`).
fn matches_parts(name: &[u8], parts: &[&[u8]]) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return name.is_empty();
    };
    let Some(after) = name.strip_prefix(*first) else {
        return false;
    };
    if rest.is_empty() {
        return after.is_empty();
    }
    // A pid: at least one digit, then the rest of the pattern.
    let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
    (1..=digits).any(|n| matches_parts(&after[n..], rest))
}

/// `pattern` with `%p` replaced by `pid`.
pub fn expand(pattern: &OsStr, pid: u32) -> OsString {
    let mut out = Vec::new();
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"%p") {
            out.extend_from_slice(pid.to_string().as_bytes());
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

/// What tells one version of a file from another: a rewrite by rename is a
/// new inode, one in place a new modification time or length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: SystemTime,
}

/// The files matching `pattern` (`%p` standing for a pid, in the file name
/// only) modified at or after `since` (if given), sorted by name, each with
/// its [`Stamp`]. Without `%p`, the file itself if it exists.
fn find_stamped(
    pattern: &OsStr,
    since: Option<SystemTime>,
) -> Result<Vec<(PathBuf, Stamp)>, StatsError> {
    use std::os::unix::fs::MetadataExt;
    let path = Path::new(pattern);
    let stamp = |p: &Path| {
        // Not followed: a link matching the pattern is refused when read.
        let m = std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| m.is_file() || m.file_type().is_symlink())?;
        let mtime = m.modified().ok()?;
        since.is_none_or(|s| mtime >= s).then_some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime,
        })
    };
    let name = path.file_name().map(OsStr::as_bytes).unwrap_or_default();
    if !name.windows(2).any(|w| w == b"%p") {
        return Ok(stamp(path)
            .map(|s| (path.to_path_buf(), s))
            .into_iter()
            .collect());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parts: Vec<&[u8]> = split_at_pid(name);
    let entries = std::fs::read_dir(&dir).map_err(|source| StatsError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut out: Vec<(PathBuf, Stamp)> = entries
        .filter_map(Result::ok)
        .filter(|e| matches_parts(e.file_name().as_bytes(), &parts))
        .filter_map(|e| {
            let p = e.path();
            stamp(&p).map(|s| (p, s))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn split_at_pid(name: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < name.len() {
        if &name[i..i + 2] == b"%p" {
            parts.push(&name[start..i]);
            i += 2;
            start = i;
        } else {
            i += 1;
        }
    }
    parts.push(&name[start..]);
    parts
}

/// Checks that `m` (of the opened file: a link was refused when opening)
/// is a statistics file this user may read: a regular file of this
/// process's effective user, at most [`MAX_STATS_FILE`] bytes.
fn check_owned(path: &Path, m: &std::fs::Metadata) -> Result<(), StatsError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let what = if !m.is_file() {
        Some("not a regular file".to_string())
    } else if m.uid() != me {
        Some(format!("owned by uid {}", m.uid()))
    } else {
        None
    };
    if let Some(what) = what {
        return Err(StatsError::Foreign {
            path: path.to_path_buf(),
            what,
            me,
        });
    }
    if m.len() > MAX_STATS_FILE {
        return Err(StatsError::TooLarge {
            path: path.to_path_buf(),
            len: m.len(),
        });
    }
    Ok(())
}

/// Reads one statistics file (refused unless [`check_owned`] passes; the
/// file is opened without following a symbolic link and read to at most
/// [`MAX_STATS_FILE`] bytes).
pub fn read_file(path: &Path) -> Result<StatsFile, StatsError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| StatsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => StatsError::Foreign {
                path: path.to_path_buf(),
                what: "a symbolic link".into(),
                me: rustix::process::geteuid().as_raw(),
            },
            _ => io(e),
        })?;
    check_owned(path, &file.metadata().map_err(io)?)?;
    // It may have grown since the check.
    let text = paio::textfile::read_at_most(file, MAX_STATS_FILE as usize)
        .map_err(io)?
        .ok_or_else(|| StatsError::TooLarge {
            path: path.to_path_buf(),
            len: MAX_STATS_FILE + 1,
        })?;
    parse_file(&text, path)
}

/// Decodes the contents of statistics file `path` (any bytes: an error
/// naming the file if they are not one).
pub fn parse_file(text: &[u8], path: &Path) -> Result<StatsFile, StatsError> {
    serde_json::from_slice(text).map_err(|source| StatsError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads every file matching `pattern` (see [`StatsReader`]): the files read,
/// sorted by pid, and the errors of those that could not be.
pub fn read_all(pattern: &OsStr, since: Option<SystemTime>) -> (Vec<StatsFile>, Vec<StatsError>) {
    let mut reader = StatsReader::new(pattern, since);
    let (files, errors) = reader.read();
    (files.into_iter().cloned().collect(), errors)
}

/// Reads the statistics files matching a pattern again and again (`paio run
/// --record` and `--progress`, `paio top --stats`), parsing a file again only when it was
/// rewritten since the previous read: for a run of a thousand processes a
/// read is a directory scan and a `stat` per file, not a thousand JSON
/// documents.
#[derive(Debug)]
pub struct StatsReader {
    pattern: OsString,
    since: Option<SystemTime>,
    parsed: std::collections::HashMap<PathBuf, (Stamp, StatsFile)>,
}

impl StatsReader {
    /// A reader of the files matching `pattern` modified at or after
    /// `since`: `%p` in the file name stands for a pid; without `%p`, the
    /// file itself.
    pub fn new(pattern: &OsStr, since: Option<SystemTime>) -> StatsReader {
        StatsReader {
            pattern: pattern.to_os_string(),
            since,
            parsed: std::collections::HashMap::new(),
        }
    }

    /// The pattern the files match.
    pub fn pattern(&self) -> &OsStr {
        &self.pattern
    }

    /// The files as they are now, sorted by pid, and the errors of those
    /// that could not be read (said again at every read while they last).
    pub fn read(&mut self) -> (Vec<&StatsFile>, Vec<StatsError>) {
        let mut errors = Vec::new();
        let found = find_stamped(&self.pattern, self.since).unwrap_or_else(|e| {
            errors.push(e);
            Vec::new()
        });
        let mut now = std::collections::HashMap::with_capacity(found.len());
        for (path, stamp) in found {
            match self.parsed.remove(&path) {
                Some((s, f)) if s == stamp => {
                    now.insert(path, (s, f));
                }
                _ => match read_file(&path) {
                    Ok(f) => {
                        now.insert(path, (stamp, f));
                    }
                    Err(e) => errors.push(e),
                },
            }
        }
        self.parsed = now;
        let mut files: Vec<&StatsFile> = self.parsed.values().map(|(_, f)| f).collect();
        files.sort_by_key(|f| f.pid);
        (files, errors)
    }
}

/// `n` bytes with a binary unit: `0 B`, `512 B`, `4.00 KiB`, `1.50 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// `ns` nanoseconds with a unit: `0`, `850ns`, `12.3us`, `4.1ms`, `2.50s`.
pub fn human_ns(ns: u64) -> String {
    match ns {
        0 => "0".into(),
        1..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

/// One progress line of a running job (`paio run --progress`): elapsed
/// time, and per request type the bytes so far across `files` with the rate
/// since `previous` (the totals of the last line, `elapsed_prev` earlier).
/// Returns the line and the new totals `(read, written)`.
pub fn progress_line(
    files: &[&StatsFile],
    elapsed: Duration,
    previous: (u64, u64),
    since_previous: Duration,
) -> (String, (u64, u64)) {
    let total = |name: &str| -> u64 {
        files
            .iter()
            .flat_map(|f| f.stats.channels.iter())
            .filter(|c| c.name == name)
            .fold(0u64, |b, c| b.saturating_add(c.counts.bytes))
    };
    let now = (total("read"), total("write"));
    let secs = since_previous.as_secs_f64().max(1e-9);
    let rate = |n: u64, p: u64| human_bytes((n.saturating_sub(p) as f64 / secs) as u64);
    let line = format!(
        "paio: {:.0} s: read {} ({}/s), written {} ({}/s), {} process(es)\n",
        elapsed.as_secs_f64(),
        human_bytes(now.0),
        rate(now.0, previous.0),
        human_bytes(now.1),
        rate(now.1, previous.1),
        files.len()
    );
    (line, now)
}

/// At most this many processes are shown one by one (the busiest, by
/// bytes then operations); the totals include all.
pub const MAX_PROCESSES_SHOWN: usize = 8;

/// Totals of one channel over several processes.
#[derive(Clone)]
struct Sum {
    ops: u64,
    bytes: u64,
    wait_ns: u64,
    /// The processes' wait and latency distributions added up; `None` once
    /// one with requests had none in its file (written by an older
    /// interposer), when percentiles cannot be had.
    histograms: Option<MergedHistograms>,
}

impl Default for Sum {
    fn default() -> Self {
        Sum {
            ops: 0,
            bytes: 0,
            wait_ns: 0,
            histograms: Some(MergedHistograms::default()),
        }
    }
}

impl Sum {
    fn add(&mut self, c: &Counts) {
        self.ops = self.ops.saturating_add(c.ops);
        self.bytes = self.bytes.wrapping_add(c.bytes);
        self.wait_ns = self.wait_ns.wrapping_add(c.wait_total.total_ns);
    }

    /// Adds a channel: its counts and its distributions.
    fn add_channel(&mut self, c: &ChannelStats) {
        self.add(&c.counts);
        match (&c.histograms, &mut self.histograms) {
            (Some(h), Some(m)) => m.merge(h),
            (None, _) if c.counts.ops > 0 => self.histograms = None,
            _ => {}
        }
    }

    /// The row's wait total, wait p50 and p99, latency p50, p99 and p99.9.
    fn figures(&self) -> [String; 6] {
        let total = human_ns(self.wait_ns);
        let Some(m) = &self.histograms else {
            return [
                total,
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ];
        };
        let w = m.wait(self.ops);
        let l = m.latency();
        let lat = |ns: u64| {
            if l.is_empty() {
                "-".to_string()
            } else {
                human_ns(ns)
            }
        };
        [
            total,
            human_ns(w.p50_ns),
            human_ns(w.p99_ns),
            lat(l.p50_ns),
            lat(l.p99_ns),
            lat(l.p999_ns),
        ]
    }
}

fn header(out: &mut String) {
    let _ = writeln!(
        out,
        "  {:<13} {:>10} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "channel",
        "ops",
        "bytes",
        "MiB/s",
        "waited",
        "wait p50",
        "wait p99",
        "lat p50",
        "lat p99",
        "lat p99.9"
    );
}

/// One table row; `times` is (time waited, wait p50, wait p99, latency p50,
/// p99, p99.9), already formatted.
fn row(out: &mut String, name: &str, (ops, bytes): (u64, u64), secs: f64, times: [&str; 6]) {
    let [wait, p50, p99, l50, l99, l999] = times;
    let mibps = if secs > 0.0 {
        format!("{:.1}", bytes as f64 / (1u64 << 20) as f64 / secs)
    } else {
        "-".into()
    };
    let name: String = if name.chars().count() > 13 {
        name.chars().take(12).chain(['~']).collect()
    } else {
        name.to_string()
    };
    let _ = writeln!(
        out,
        "  {name:<13} {ops:>10} {:>11} {mibps:>9} {wait:>9} {p50:>9} {p99:>9} {l50:>9} {l99:>9} {l999:>9}",
        human_bytes(bytes)
    );
}

/// The row of a process's critical requests, which are among its
/// channels' requests too.
const CRITICAL_ROW: &str = "(critical)";

/// A process's row for `c`: its own wait and latency summaries.
fn counts_row(out: &mut String, name: &str, c: &Counts, secs: f64) {
    let w = &c.wait_total;
    let l = &c.latency_total;
    let lat = |ns: u64| {
        if l.is_empty() {
            "-".to_string()
        } else {
            human_ns(ns)
        }
    };
    row(
        out,
        name,
        (c.ops, c.bytes),
        secs,
        [
            &human_ns(w.total_ns),
            &human_ns(w.p50_ns),
            &human_ns(w.p99_ns),
            &lat(l.p50_ns),
            &lat(l.p99_ns),
            &lat(l.p999_ns),
        ],
    );
}

/// The summary of a run that lasted `elapsed`: per process (pid, exe) and
/// per channel operations, bytes, MiB/s over the run, time spent waiting and
/// wait p50/p99 (over all the channel's requests, including those that did
/// not wait), and the latency p50/p99/p99.9 of its calls (requests issued in
/// two phases; `-` when none was); then per-channel totals over all
/// processes (percentiles do not add up across processes, so totals give the
/// total time waited).
/// Requests that matched no channel appear as `(unmatched)`.
pub fn format_summary(files: &[StatsFile], elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "paio: summary: {} process{} with statistics, {:.2} s",
        files.len(),
        if files.len() == 1 { "" } else { "es" },
        secs
    );
    if files.is_empty() {
        out.push_str("  (no statistics file was written: was the interposer loaded?)\n");
        return out;
    }
    // Busiest first when there are too many to show.
    let mut shown: Vec<&StatsFile> = files.iter().collect();
    if shown.len() > MAX_PROCESSES_SHOWN {
        shown.sort_by_key(|f| {
            let (ops, bytes) = f.stats.channels.iter().fold((0u64, 0u64), |(o, b), c| {
                (o + c.counts.ops, b.wrapping_add(c.counts.bytes))
            });
            std::cmp::Reverse((bytes, ops))
        });
        shown.truncate(MAX_PROCESSES_SHOWN);
        shown.sort_by_key(|f| f.pid);
    }
    for f in &shown {
        let _ = writeln!(
            out,
            "pid {} (ppid {}) {}  stage {:?}",
            f.pid, f.ppid, f.exe, f.stats.stage
        );
        header(&mut out);
        for c in &f.stats.channels {
            counts_row(&mut out, &c.name, &c.counts, secs);
        }
        if f.stats.critical.ops > 0 {
            counts_row(&mut out, CRITICAL_ROW, &f.stats.critical, secs);
        }
        let u = &f.stats.unmatched;
        if u.ops > 0 {
            row(
                &mut out,
                "(unmatched)",
                (u.ops, u.bytes),
                secs,
                ["-", "-", "-", "-", "-", "-"],
            );
        }
    }
    if files.len() > shown.len() {
        let _ = writeln!(
            out,
            "... and {} more processes (in the totals)",
            files.len() - shown.len()
        );
    }
    // Totals, channels in order of first appearance.
    let mut order: Vec<(String, Sum)> = Vec::new();
    let mut unmatched = Sum::default();
    let mut all = Sum::default();
    // Critical requests: their latency distributions add up; their waits
    // have none (the total time waited does).
    let mut critical = Sum::default();
    for f in files {
        for c in &f.stats.channels {
            match order.iter_mut().find(|(n, _)| *n == c.name) {
                Some((_, s)) => s.add_channel(c),
                None => {
                    let mut s = Sum::default();
                    s.add_channel(c);
                    order.push((c.name.clone(), s));
                }
            }
            all.add_channel(c);
        }
        unmatched.add(&f.stats.unmatched);
        critical.add(&f.stats.critical);
        if let Some(m) = &mut critical.histograms {
            m.merge(&paio::stats::Histograms {
                wait: Vec::new(),
                latency: f.stats.critical_latency.clone(),
            });
        }
    }
    let _ = writeln!(
        out,
        "total over {} process{}",
        files.len(),
        if files.len() == 1 { "" } else { "es" }
    );
    header(&mut out);
    for (name, s) in &order {
        let f = s.figures();
        row(
            &mut out,
            name,
            (s.ops, s.bytes),
            secs,
            [&f[0], &f[1], &f[2], &f[3], &f[4], &f[5]],
        );
    }
    if unmatched.ops > 0 {
        row(
            &mut out,
            "(unmatched)",
            (unmatched.ops, unmatched.bytes),
            secs,
            ["-", "-", "-", "-", "-", "-"],
        );
    }
    let f = all.figures();
    row(
        &mut out,
        "all channels",
        (all.ops, all.bytes),
        secs,
        [&f[0], &f[1], &f[2], &f[3], &f[4], &f[5]],
    );
    if critical.ops > 0 {
        let f = critical.figures();
        row(
            &mut out,
            CRITICAL_ROW,
            (critical.ops, critical.bytes),
            secs,
            [&f[0], "-", "-", &f[3], &f[4], &f[5]],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statistics document as the interposer writes it.
    pub(crate) const SAMPLE: &str = r#"{"pid":4242,"ppid":4200,"exe":"/usr/bin/dd","stats":{
      "stage":"paio","collected_at_ns":2000000000,"interval_ns":1000000000,
      "channels":[
        {"name":"read","ops":1024,"bytes":1073741824,"interval_ops":0,"interval_bytes":0,
         "ops_per_sec":0.0,"bytes_per_sec":0.0,
         "wait":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "wait_total":{"waited_ops":1000,"total_ns":19500000000,"mean_ns":19000000,"p50_ns":19922943,"p99_ns":20971519,"p999_ns":20971519,"max_ns":20971519},
         "objects":[
           {"name":"default","kind":"noop","ops":0,"bytes":0,"interval_ops":0,"interval_bytes":0,"ops_per_sec":0.0,"bytes_per_sec":0.0,
            "wait":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
            "wait_total":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0}}]},
        {"name":"write","ops":1024,"bytes":1073741824,"interval_ops":0,"interval_bytes":0,
         "ops_per_sec":0.0,"bytes_per_sec":0.0,
         "wait":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "wait_total":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "objects":[]},
        {"name":"metadata","ops":7,"bytes":0,"interval_ops":0,"interval_bytes":0,
         "ops_per_sec":0.0,"bytes_per_sec":0.0,
         "wait":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "wait_total":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "objects":[]}],
      "unmatched":{"ops":3,"bytes":0,"interval_ops":0,"interval_bytes":0,"ops_per_sec":0.0,"bytes_per_sec":0.0,
         "wait":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "wait_total":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0}},
      "removed":{"ops":0,"bytes":0,"interval_ops":0,"interval_bytes":0,"ops_per_sec":0.0,"bytes_per_sec":0.0,
         "wait":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
         "wait_total":{"waited_ops":0,"total_ns":0,"mean_ns":0,"p50_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0}}}}"#;

    fn sample(pid: u32, exe: &str) -> StatsFile {
        let mut f: StatsFile = serde_json::from_str(SAMPLE).unwrap();
        f.pid = pid;
        f.exe = exe.into();
        f
    }

    #[test]
    fn the_sampler_takes_each_period_once() {
        let mut a = sample(10, "/usr/bin/dd");
        let b = sample(11, "cat");
        let mut fs = FileSampler::default();
        let first = fs.sample(&[&a, &b], 1.0, SystemTime::UNIX_EPOCH);
        let per_file = a.stats.channels.len();
        assert!(per_file > 0);
        assert_eq!(first.channels.len(), 2 * per_file);
        assert_eq!(first.channels[0].stage, format!("{}[dd] 10", a.stats.stage));
        // Neither collected again: nothing; then only `a` did.
        assert!(fs
            .sample(&[&a, &b], 2.0, SystemTime::UNIX_EPOCH)
            .channels
            .is_empty());
        a.stats.collected_at_ns += 1_000_000_000;
        let third = fs.sample(&[&a, &b], 3.0, SystemTime::UNIX_EPOCH);
        assert_eq!(third.channels.len(), per_file);
        assert!(third.channels.iter().all(|c| c.stage.ends_with("] 10")));
    }

    #[test]
    fn a_missed_collection_is_averaged_not_lost() {
        let mut a = sample(10, "/usr/bin/dd");
        let mut fs = FileSampler::default();
        fs.sample(&[&a], 1.0, SystemTime::UNIX_EPOCH);
        let period = |a: &mut StatsFile, bytes: u64, ops: u64| {
            a.stats.collected_at_ns += 1_000_000_000;
            let read = &mut a.stats.channels[0].counts;
            read.bytes += bytes;
            read.ops += ops;
            read.bytes_per_sec = bytes as f64;
            read.ops_per_sec = ops as f64;
        };
        // One period seen: the stage's own figures.
        period(&mut a, 4 << 20, 64);
        let s = fs.sample(&[&a], 2.0, SystemTime::UNIX_EPOCH);
        assert_eq!(s.channels[0].bytes_per_sec, (4 << 20) as f64);
        // Two periods (4 MiB, then 2 MiB) with only the second seen: both
        // over the two seconds since the collection seen before.
        period(&mut a, 4 << 20, 64);
        period(&mut a, 2 << 20, 32);
        let s = fs.sample(&[&a], 4.0, SystemTime::UNIX_EPOCH);
        assert_eq!(s.channels[0].channel, "read");
        assert_eq!(s.channels[0].bytes_per_sec, (3 << 20) as f64);
        assert_eq!(s.channels[0].ops_per_sec, 48.0);
        assert_eq!(s.channels[1].bytes_per_sec, 0.0);
        // Counts that went back (another process with this pid): the
        // stage's own figures, not a difference with the old counts.
        a.stats.collected_at_ns += 5_000_000_000;
        a.stats.channels[0].counts.bytes = 1 << 20;
        a.stats.channels[0].counts.bytes_per_sec = (1 << 20) as f64;
        let s = fs.sample(&[&a], 9.0, SystemTime::UNIX_EPOCH);
        assert_eq!(s.channels[0].bytes_per_sec, (1 << 20) as f64);
    }

    #[test]
    fn real_stage_stats_round_trip() {
        // The `stats` field is paio::StageStats as serde_json writes it.
        let stage = paio::Stage::from_policy_str("[[channel]]\nname = \"read\"\nmatch = {}\n", "t")
            .unwrap();
        let ctx = paio::Context::new(paio::RequestType::READ, 4096);
        stage.enforce(&ctx, None).unwrap();
        let doc = format!(
            r#"{{"pid":1,"ppid":0,"exe":"/x","stats":{}}}"#,
            serde_json::to_string(&stage.collect()).unwrap()
        );
        let f: StatsFile = serde_json::from_str(&doc).unwrap();
        assert_eq!(f.stats.channels[0].counts.bytes, 4096);
    }

    #[test]
    fn summary_of_one_process() {
        let f = sample(4242, "/usr/bin/dd");
        let s = format_summary(&[f], Duration::from_secs(2));
        let expected = "\
paio: summary: 1 process with statistics, 2.00 s
pid 4242 (ppid 4200) /usr/bin/dd  stage \"paio\"
  channel              ops       bytes     MiB/s    waited  wait p50  wait p99   lat p50   lat p99 lat p99.9
  read                1024    1.00 GiB     512.0    19.50s    19.9ms    21.0ms         -         -         -
  write               1024    1.00 GiB     512.0         0         0         0         -         -         -
  metadata               7         0 B       0.0         0         0         0         -         -         -
  (unmatched)            3         0 B       0.0         -         -         -         -         -         -
total over 1 process
  channel              ops       bytes     MiB/s    waited  wait p50  wait p99   lat p50   lat p99 lat p99.9
  read                1024    1.00 GiB     512.0    19.50s         -         -         -         -         -
  write               1024    1.00 GiB     512.0         0         -         -         -         -         -
  metadata               7         0 B       0.0         0         -         -         -         -         -
  (unmatched)            3         0 B       0.0         -         -         -         -         -         -
  all channels        2055    2.00 GiB    1024.0    19.50s         -         -         -         -         -
";
        assert_eq!(s, expected, "\n{s}");
    }

    /// Critical requests get a row of their own per process (with its own
    /// summaries) and in the totals (their latencies merged; their waits
    /// have no distribution, only a total).
    #[test]
    fn critical_requests_have_their_rows() {
        let critical = |pid: u32| {
            let mut f = sample(pid, "/usr/bin/fio");
            let c = &mut f.stats.critical;
            c.ops = 100;
            c.bytes = 409_600;
            c.wait_total.total_ns = 1_000_000;
            c.latency_total = paio::stats::LatencySummary {
                ops: 100,
                mean_ns: 10_000,
                p50_ns: 10_000,
                p99_ns: 20_000,
                p999_ns: 30_000,
                max_ns: 30_000,
            };
            f.stats.critical_latency = vec![(10_000, 99), (2_000_000, 1)];
            f
        };
        let s = format_summary(&[critical(1), critical(2)], Duration::from_secs(2));
        let rows: Vec<&str> = s
            .lines()
            .filter(|l| l.starts_with("  (critical)"))
            .collect();
        assert_eq!(rows.len(), 3, "{s}");
        assert_eq!(
            rows[0].split_whitespace().collect::<Vec<_>>(),
            [
                "(critical)",
                "100",
                "400.00",
                "KiB",
                "0.2",
                "1.0ms",
                "0",
                "0",
                "10.0us",
                "20.0us",
                "30.0us"
            ],
            "{s}"
        );
        // 200 together: 198 at 10 µs, 2 at 2 ms (1 %): the p99.9.
        assert_eq!(
            rows[2].split_whitespace().skip(5).collect::<Vec<_>>(),
            ["2.0ms", "-", "-", "10.2us", "10.2us", "2.1ms"],
            "{s}"
        );
        // After the channels' totals, not in them.
        let all = s
            .lines()
            .position(|l| l.starts_with("  all channels"))
            .unwrap();
        let last = s.lines().position(|l| l == rows[2]).unwrap();
        assert!(last > all, "{s}");
        // No row without critical requests.
        let plain = format_summary(&[sample(3, "dd")], Duration::from_secs(2));
        assert!(!plain.contains("(critical)"), "{plain}");
    }

    /// Files with histograms: the totals' percentiles are those of every
    /// process's requests together; one file without them (an older
    /// interposer) leaves its channels' totals without percentiles.
    #[test]
    fn totals_merge_the_processes_histograms() {
        let with = |pid: u32, wait: Vec<(u64, u64)>, latency: Vec<(u64, u64)>| {
            let mut f = sample(pid, "/usr/bin/fio");
            for c in &mut f.stats.channels {
                c.histograms = Some(paio::stats::Histograms::default());
            }
            f.stats.channels[0].histograms = Some(paio::stats::Histograms { wait, latency });
            f
        };
        // 1024 reads each; the first process's 1000 waits of ~20 ms are
        // merged with the second's none, and 2000 calls of ~10 µs with 20
        // of ~2 ms (1 %: the p99.9, not the p99).
        let a = with(
            1,
            vec![(20_000_000, 1000)],
            vec![(10_000, 1000), (2_000_000, 10)],
        );
        let b = with(2, vec![], vec![(10_000, 1000), (2_000_000, 10)]);
        let totals = |files: &[StatsFile]| {
            let s = format_summary(files, Duration::from_secs(2));
            s.lines()
                .skip_while(|l| !l.starts_with("total"))
                .filter(|l| l.starts_with("  read ") || l.starts_with("  metadata "))
                .map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
        };
        // Read: 2048 requests, 1000 waited: p50 0, p99 in 20 ms's bucket;
        // latencies p50 and p99 in 10 µs's bucket, p99.9 in 2 ms's.
        // Metadata: no wait, no latency.
        assert_eq!(
            totals(&[a.clone(), b.clone()]),
            ["39.00s 0 21.0ms 10.2us 10.2us 2.1ms", "0 0 0 - - -"]
        );
        let mut old = b;
        for c in &mut old.stats.channels {
            c.histograms = None;
        }
        assert_eq!(totals(&[a, old]), ["39.00s - - - - -", "0 - - - - -"]);
    }

    #[test]
    fn summary_of_many_processes_fits_a_screen() {
        let files: Vec<_> = (0..20).map(|i| sample(100 + i, "/bin/cat")).collect();
        let s = format_summary(&files, Duration::from_millis(500));
        assert!(
            s.starts_with("paio: summary: 20 processes with statistics, 0.50 s\n"),
            "{s}"
        );
        assert_eq!(
            s.lines().filter(|l| l.starts_with("pid ")).count(),
            MAX_PROCESSES_SHOWN
        );
        assert!(
            s.contains("... and 12 more processes (in the totals)"),
            "{s}"
        );
        assert!(
            s.contains("  read               20480   20.00 GiB   40960.0"),
            "{s}"
        );
        assert!(s.lines().count() <= 60, "{}", s.lines().count());
        let empty = format_summary(&[], Duration::from_secs(1));
        assert!(empty.contains("no statistics file was written"), "{empty}");
    }

    #[test]
    fn units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(1 << 30), "1.00 GiB");
        assert_eq!(human_ns(0), "0");
        assert_eq!(human_ns(850), "850ns");
        assert_eq!(human_ns(12_300), "12.3us");
        assert_eq!(human_ns(4_100_000), "4.1ms");
        assert_eq!(human_ns(2_500_000_000), "2.50s");
    }

    #[test]
    fn pattern_expansion_and_matching() {
        assert_eq!(expand(OsStr::new("/t/s.%p.json"), 42), "/t/s.42.json");
        assert_eq!(expand(OsStr::new("/t/s.json"), 42), "/t/s.json");
        let parts = split_at_pid(b"s.%p.json");
        assert!(matches_parts(b"s.42.json", &parts));
        assert!(!matches_parts(b"s..json", &parts));
        assert!(!matches_parts(b"s.42.json.tmp", &parts));
        assert!(!matches_parts(b"s.4x2.json", &parts));
        let parts = split_at_pid(b"%p");
        assert!(matches_parts(b"123", &parts));
        assert!(!matches_parts(b"123a", &parts));
        let parts = split_at_pid(b"a%p%p");
        assert!(matches_parts(b"a12", &parts));
    }

    #[test]
    fn reads_every_file_of_the_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("s.%p.json");
        for pid in [7u32, 12] {
            let f = sample(pid, "/bin/x");
            std::fs::write(
                expand(pattern.as_os_str(), pid),
                serde_json::to_string(&f).unwrap(),
            )
            .unwrap();
        }
        std::fs::write(dir.path().join("s.99.json"), "{not json").unwrap();
        std::fs::write(dir.path().join("s.5.json.tmp"), "partial").unwrap();
        std::fs::write(dir.path().join("other.json"), "{}").unwrap();
        let (files, errors) = read_all(pattern.as_os_str(), None);
        assert_eq!(files.iter().map(|f| f.pid).collect::<Vec<_>>(), [7, 12]);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .to_string()
                .contains("s.99.json: not a paio statistics file"),
            "{}",
            errors[0]
        );
        // Files older than the run are ignored.
        let later = SystemTime::now() + Duration::from_secs(3600);
        let (files, _) = read_all(pattern.as_os_str(), Some(later));
        assert!(files.is_empty());
        // Without %p: one file.
        let one = dir.path().join("s.7.json");
        let (files, errors) = read_all(one.as_os_str(), None);
        assert_eq!((files.len(), errors.len()), (1, 0));
        let (files, errors) = read_all(dir.path().join("none").as_os_str(), None);
        assert_eq!((files.len(), errors.len()), (0, 0));
    }

    #[test]
    fn only_this_users_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("s.%p.json");
        let mine = PathBuf::from(expand(pattern.as_os_str(), 7));
        std::fs::write(&mine, serde_json::to_string(&sample(7, "/bin/x")).unwrap()).unwrap();
        // A link matching the pattern, to a file that would parse: refused.
        std::os::unix::fs::symlink(&mine, expand(pattern.as_os_str(), 8)).unwrap();
        // A file above the cap (sparse): refused before it is read.
        std::fs::File::create(expand(pattern.as_os_str(), 9))
            .unwrap()
            .set_len(MAX_STATS_FILE + 1)
            .unwrap();
        let (files, errors) = read_all(pattern.as_os_str(), None);
        assert_eq!(files.iter().map(|f| f.pid).collect::<Vec<_>>(), [7]);
        let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("s.8.json: a symbolic link: ignored (statistics are read only from regular files of this user"),
            "{said:?}"
        );
        assert!(
            said[1].contains("s.9.json: 67108865 bytes, more than the 67108864"),
            "{said:?}"
        );
        // Another user's file: as root, one given away; otherwise one that
        // root owns.
        let me = rustix::process::geteuid().as_raw();
        let theirs = if me == 0 {
            let p = dir.path().join("theirs.json");
            std::fs::copy(&mine, &p).unwrap();
            std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
            p
        } else {
            PathBuf::from("/etc/passwd")
        };
        let owner = if me == 0 { 65534 } else { 0 };
        let e = read_file(&theirs).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "owned by uid {owner}: ignored (statistics are read only from regular files of this user, uid {me}:"
            )),
            "{e}"
        );
    }

    #[test]
    fn a_reader_parses_only_rewritten_files() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("s.%p.json");
        let path = PathBuf::from(expand(pattern.as_os_str(), 7));
        let json = |at: u64| {
            let mut f = sample(7, "/bin/x");
            f.stats.collected_at_ns = at;
            serde_json::to_string(&f).unwrap()
        };
        // Rewritten as the interposer does: a new file renamed over the old.
        let rewrite = |text: &str| {
            let tmp = dir.path().join("s.7.json.tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        };
        let mut reader = StatsReader::new(pattern.as_os_str(), None);
        rewrite(&json(1_000_000_000));
        let at = |r: &mut StatsReader| {
            let (files, errors) = r.read();
            assert!(errors.is_empty(), "{errors:?}");
            files
                .iter()
                .map(|f| f.stats.collected_at_ns)
                .collect::<Vec<_>>()
        };
        assert_eq!(at(&mut reader), [1_000_000_000]);
        // Bytes changed in place with the same length and time: not parsed
        // again (the garbage would be an error).
        let old = std::fs::metadata(&path).unwrap();
        let garbage = "x".repeat(old.len() as usize);
        std::fs::write(&path, &garbage).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old.modified().unwrap())
            .unwrap();
        assert_eq!(at(&mut reader), [1_000_000_000]);
        // A rewrite is read; a removed file is gone.
        rewrite(&json(2_000_000_000));
        assert_eq!(at(&mut reader), [2_000_000_000]);
        std::fs::remove_file(&path).unwrap();
        assert!(at(&mut reader).is_empty());
    }
}
