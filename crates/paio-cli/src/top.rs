//! `paio top`: a live terminal view of stages and their channels, refreshed
//! every interval from paiod (`paio status`'s report) or from the
//! statistics files of a `paio run --stats` (one per process).
//!
//! Each row is one channel of one stage: bandwidth, operations, the limits
//! its objects are configured with, the period's wait (p99) and call
//! latency (p50/p99/p99.9), and a sparkline of its bandwidth over the last
//! minute of refreshes. Keys: `s` changes the sort column, `r` reverses it,
//! `q` or Esc quits.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use paio::stats::{LatencySummary, WaitSummary};
use paio::ObjectConfig;
use paio_control::ctl::{self, CtlCommand, StatusReport};

use crate::summary::{human_bytes, human_ns};

/// Where `paio top` reads its figures.
#[derive(Debug)]
pub enum Source {
    /// paiod's status at this socket.
    Paiod(PathBuf),
    /// Statistics files matching a `paio run --stats` pattern (`%p`), each
    /// parsed again only when rewritten.
    StatsFiles(crate::summary::StatsReader),
}

/// One channel of one stage, as of one refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Identifies the row across refreshes (stage registration or process,
    /// and channel).
    pub key: String,
    /// `name[id] pid` of the stage.
    pub stage: String,
    /// The channel.
    pub channel: String,
    /// Bytes per second over the last period.
    pub bytes_per_sec: f64,
    /// Operations per second over the last period.
    pub ops_per_sec: f64,
    /// The limits of the channel's objects (`drl 50.0 MiB/s`, `priority
    /// depth 4/1`), `-` for none.
    pub limit: String,
    /// The period's waits.
    pub wait: WaitSummary,
    /// The period's call latency.
    pub latency: LatencySummary,
}

/// One refresh: a title line and the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// What was read, from where.
    pub title: String,
    /// The rows, unsorted.
    pub rows: Vec<Row>,
}

/// A failed refresh, said in the view instead of the table.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReadError(String);

/// The LIMIT cell of a channel's objects `(name, kind, configuration)`:
/// each DRL's rate and each priority object's depths (and rate), or, where
/// the configuration is not known (statistics files), the object's name
/// and kind; noop objects are left out.
fn limits(objects: &[(String, String, Option<ObjectConfig>)]) -> String {
    let parts: Vec<String> = objects
        .iter()
        .filter_map(|(name, kind, config)| match config {
            Some(ObjectConfig::Drl(d)) => Some(format!("{name} {}", human_rate(d.rate))),
            Some(ObjectConfig::Priority(p)) => Some(format!(
                "{name} depth {}/{}{}{}",
                p.depth,
                p.busy_depth,
                p.shared_busy_depth
                    .map(|s| format!(" shared {s}"))
                    .unwrap_or_default(),
                p.rate
                    .map(|r| format!(" {}", human_rate(r)))
                    .unwrap_or_default()
            )),
            None if kind != "noop" => Some(format!("{name} ({kind})")),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The rows of paiod's report.
pub fn frame_of_report(r: &StatusReport, socket: &std::path::Path) -> Frame {
    let mut rows = Vec::new();
    for s in &r.stages {
        for c in &s.channels {
            let objects: Vec<(String, String, Option<ObjectConfig>)> = c
                .objects
                .iter()
                .map(|o| (o.name.clone(), o.kind.clone(), o.config.clone()))
                .collect();
            rows.push(Row {
                key: format!("{}/{}", s.id, c.name),
                stage: s.label(),
                channel: c.name.clone(),
                bytes_per_sec: c.bytes_per_sec,
                ops_per_sec: c.ops_per_sec,
                limit: limits(&objects),
                wait: c.wait,
                latency: c.latency,
            });
        }
    }
    Frame {
        title: format!(
            "paiod {} at {}: policy {}, period {} ms, {} stage(s)",
            r.pid,
            socket.display(),
            r.policy,
            r.period_ms,
            r.stages.len()
        ),
        rows,
    }
}

/// The rows of the statistics files of a `paio run --stats PATTERN`, of
/// the processes `alive` says still run (a file outlives its process; its
/// figures are of the process's last interval, not of now).
pub fn frame_of_files(
    files: &[&crate::summary::StatsFile],
    pattern: &OsStr,
    alive: impl Fn(u32) -> bool,
) -> Frame {
    let (running, ended): (Vec<&crate::summary::StatsFile>, Vec<_>) =
        files.iter().partition(|f| alive(f.pid));
    let mut rows = Vec::new();
    for f in &running {
        for c in &f.stats.channels {
            let objects: Vec<(String, String, Option<ObjectConfig>)> = c
                .objects
                .iter()
                .map(|o| (o.name.clone(), o.kind.clone(), None))
                .collect();
            rows.push(Row {
                key: format!("{}/{}", f.pid, c.name),
                stage: f.stage_label(),
                channel: c.name.clone(),
                bytes_per_sec: c.counts.bytes_per_sec,
                ops_per_sec: c.counts.ops_per_sec,
                limit: limits(&objects),
                wait: c.counts.wait,
                latency: c.counts.latency,
            });
        }
    }
    Frame {
        title: format!(
            "{} process(es) writing {}{}",
            running.len(),
            std::path::Path::new(pattern).display(),
            match ended.len() {
                0 => String::new(),
                n => format!(" ({n} ended, not shown)"),
            }
        ),
        rows,
    }
}

/// Reads one frame from `source`.
pub fn read(source: &mut Source) -> Result<Frame, ReadError> {
    match source {
        Source::Paiod(socket) => {
            let reply = ctl::request(socket, CtlCommand::Status, Duration::from_secs(5))
                .map_err(|e| ReadError(e.to_string()))?;
            let report = reply
                .status
                .ok_or_else(|| ReadError("paiod sent no status".into()))?;
            Ok(frame_of_report(&report, socket))
        }
        Source::StatsFiles(reader) => {
            let pattern = reader.pattern().to_os_string();
            let (files, errors) = reader.read();
            if files.is_empty() {
                return Err(ReadError(match errors.first() {
                    Some(e) => e.to_string(),
                    None => format!(
                        "no statistics file matches {} yet",
                        std::path::Path::new(&pattern).display()
                    ),
                }));
            }
            Ok(frame_of_files(&files, &pattern, process_runs))
        }
    }
}

/// Whether process `pid` runs (one that exists but is another user's
/// counts: it cannot be signalled, it runs).
fn process_runs(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

/// The column rows are sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// Bytes per second (the default, largest first).
    Bandwidth,
    /// Operations per second.
    Ops,
    /// Call latency p99.
    Latency,
    /// Wait p99.
    Wait,
    /// Stage, then channel.
    Name,
}

impl SortBy {
    /// The next column (key `s`).
    pub fn next(self) -> SortBy {
        match self {
            SortBy::Bandwidth => SortBy::Ops,
            SortBy::Ops => SortBy::Latency,
            SortBy::Latency => SortBy::Wait,
            SortBy::Wait => SortBy::Name,
            SortBy::Name => SortBy::Bandwidth,
        }
    }

    fn label(self) -> &'static str {
        match self {
            SortBy::Bandwidth => "bandwidth",
            SortBy::Ops => "ops",
            SortBy::Latency => "latency p99",
            SortBy::Wait => "wait p99",
            SortBy::Name => "name",
        }
    }
}

/// Sorts `rows` by `by` (numbers largest first, names A to Z), reversed
/// when `reverse`; ties keep stage and channel order.
pub fn sort(rows: &mut [Row], by: SortBy, reverse: bool) {
    rows.sort_by(|a, b| {
        let name =
            (a.stage.as_str(), a.channel.as_str()).cmp(&(b.stage.as_str(), b.channel.as_str()));
        let num = |x: f64, y: f64| y.total_cmp(&x).then(name);
        let o = match by {
            SortBy::Bandwidth => num(a.bytes_per_sec, b.bytes_per_sec),
            SortBy::Ops => num(a.ops_per_sec, b.ops_per_sec),
            SortBy::Latency => num(a.latency.p99_ns as f64, b.latency.p99_ns as f64),
            SortBy::Wait => num(a.wait.p99_ns as f64, b.wait.p99_ns as f64),
            SortBy::Name => name,
        };
        if reverse {
            o.reverse()
        } else {
            o
        }
    });
}

/// Refreshes of bandwidth kept per row for its sparkline.
pub const HISTORY: usize = 60;

/// Each row's recent bandwidth, by [`Row::key`].
#[derive(Debug, Default)]
pub struct History(HashMap<String, VecDeque<f64>>);

impl History {
    /// Adds a frame's figures; rows gone from the frame are forgotten.
    pub fn add(&mut self, frame: &Frame) {
        self.0.retain(|k, _| frame.rows.iter().any(|r| &r.key == k));
        for r in &frame.rows {
            let h = self.0.entry(r.key.clone()).or_default();
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back(r.bytes_per_sec);
        }
    }

    /// The sparkline of `key`: one block per refresh, scaled to the row's
    /// own maximum, the newest on the right.
    pub fn sparkline(&self, key: &str, width: usize) -> String {
        const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        let Some(h) = self.0.get(key) else {
            return String::new();
        };
        let values: Vec<f64> = h.iter().rev().take(width).rev().copied().collect();
        let max = values.iter().copied().fold(0.0, f64::max);
        values
            .iter()
            .map(|&v| {
                if max <= 0.0 {
                    BLOCKS[0]
                } else {
                    BLOCKS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
                }
            })
            .collect()
    }
}

/// A configured rate: `8.00 MiB/s`, `2000 ops/s`.
fn human_rate(r: paio::Rate) -> String {
    match r.unit {
        paio::units::RateUnit::Bytes => format!("{}/s", human_bytes(r.per_second)),
        paio::units::RateUnit::Ops => format!("{} ops/s", r.per_second),
    }
}

fn rate(bytes_per_sec: f64) -> String {
    format!("{}/s", human_bytes(bytes_per_sec.round() as u64))
}

/// The table's cells of `r`, in column order (without the sparkline).
pub fn cells(r: &Row) -> [String; 9] {
    let ns = |v: u64, ops: u64| {
        if ops == 0 {
            "-".to_string()
        } else {
            human_ns(v)
        }
    };
    [
        r.stage.clone(),
        r.channel.clone(),
        rate(r.bytes_per_sec),
        format!("{:.0}", r.ops_per_sec),
        r.limit.clone(),
        if r.wait.waited_ops == 0 {
            "-".into()
        } else {
            human_ns(r.wait.p99_ns)
        },
        ns(r.latency.p50_ns, r.latency.ops),
        ns(r.latency.p99_ns, r.latency.ops),
        ns(r.latency.p999_ns, r.latency.ops),
    ]
}

/// Column headers, matching [`cells`] plus the sparkline.
pub const HEADERS: [&str; 10] = [
    "STAGE",
    "CHANNEL",
    "BANDWIDTH",
    "OPS/S",
    "LIMIT",
    "WAIT p99",
    "LAT p50",
    "LAT p99",
    "LAT p99.9",
    "BANDWIDTH, LAST MINUTE",
];

/// Runs the view until the user quits. Needs a terminal.
pub fn run(mut source: Source, interval: Duration) -> std::io::Result<()> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Modifier, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Cell, Paragraph, Row as TableRow, Table};

    let mut terminal = ratatui::try_init()?;
    let mut history = History::default();
    let mut by = SortBy::Bandwidth;
    let mut reverse = false;
    let mut last: Result<Frame, ReadError> = read(&mut source);
    if let Ok(f) = &last {
        history.add(f);
    }
    let mut next = std::time::Instant::now() + interval;
    let result = loop {
        let drawn = terminal.draw(|f| {
            let [title, table, help] = Layout::vertical([
                Constraint::Length(1),
                Constraint::Min(1),
                Constraint::Length(1),
            ])
            .areas(f.area());
            match &last {
                Ok(frame) => {
                    f.render_widget(Paragraph::new(frame.title.clone()), title);
                    let mut rows = frame.rows.clone();
                    sort(&mut rows, by, reverse);
                    let spark = 24;
                    let body: Vec<TableRow> = rows
                        .iter()
                        .map(|r| {
                            let mut c: Vec<Cell> = cells(r).into_iter().map(Cell::from).collect();
                            c.push(Cell::from(history.sparkline(&r.key, spark)));
                            TableRow::new(c)
                        })
                        .collect();
                    let widths = [
                        Constraint::Length(24),
                        Constraint::Length(12),
                        Constraint::Length(13),
                        Constraint::Length(8),
                        Constraint::Fill(1),
                        Constraint::Length(9),
                        Constraint::Length(8),
                        Constraint::Length(8),
                        Constraint::Length(9),
                        Constraint::Length(spark as u16),
                    ];
                    let header = TableRow::new(HEADERS.iter().map(|h| Cell::from(*h)))
                        .style(Style::new().add_modifier(Modifier::REVERSED));
                    f.render_widget(Table::new(body, widths).header(header), table);
                }
                Err(e) => f.render_widget(
                    Paragraph::new(vec![
                        Line::from(format!("cannot read: {e}")),
                        Line::from("retrying every interval"),
                    ]),
                    table,
                ),
            }
            f.render_widget(
                Paragraph::new(format!(
                    "sorted by {}{} | s: sort  r: reverse  q: quit | every {:?}",
                    by.label(),
                    if reverse { " (reversed)" } else { "" },
                    interval
                )),
                help,
            );
        });
        if let Err(e) = drawn {
            break Err(e);
        }
        let wait = next.saturating_duration_since(std::time::Instant::now());
        match event::poll(wait) {
            Err(e) => break Err(e),
            Ok(true) => match event::read() {
                Err(e) => break Err(e),
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
                    KeyCode::Char('s') => by = by.next(),
                    KeyCode::Char('r') => reverse = !reverse,
                    _ => {}
                },
                Ok(_) => {}
            },
            Ok(false) => {
                last = read(&mut source);
                if let Ok(f) = &last {
                    history.add(f);
                }
                next = std::time::Instant::now() + interval;
            }
        }
    };
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_each_objects_depths_and_rate() {
        let p = paio::object::PriorityConfig {
            busy_depth: 3,
            shared_busy_depth: Some(2),
            rate: Some(paio::Rate::bytes_per_sec(1 << 20)),
            ..Default::default()
        };
        let objects = vec![
            (
                "y".to_string(),
                "priority".to_string(),
                Some(ObjectConfig::Priority(p)),
            ),
            ("n".to_string(), "noop".to_string(), None),
        ];
        let text = limits(&objects);
        assert!(text.starts_with("y depth 4/3 shared 2 "), "{text}");
        assert_eq!(limits(&objects[1..]), "-", "noop objects are left out");
    }

    /// A statistics file outlives its process: its rows went on showing
    /// the process's last figures as if it ran. Ended processes are left
    /// out, and counted in the title.
    #[test]
    fn files_of_ended_processes_are_not_shown_as_running() {
        let stage = paio::Stage::from_policy_str(
            "[[channel]]\nname = \"read\"\nmatch = { request_type = \"read\" }\n",
            "<t>",
        )
        .unwrap();
        let file = |pid| crate::summary::StatsFile {
            pid,
            ppid: 1,
            exe: "/bin/dd".into(),
            stats: stage.collect(),
        };
        let (a, b) = (file(10), file(11));
        let f = frame_of_files(&[&a, &b], OsStr::new("/s/%p.json"), |pid| pid == 11);
        assert_eq!(
            f.title,
            "1 process(es) writing /s/%p.json (1 ended, not shown)"
        );
        assert!(
            f.rows.iter().all(|r| r.key.starts_with("11/")),
            "{:?}",
            f.rows
        );
        assert!(process_runs(std::process::id()));
        assert!(!process_runs(0));
    }

    fn row(stage: &str, channel: &str, bw: f64, p99: u64) -> Row {
        Row {
            key: format!("{stage}/{channel}"),
            stage: stage.into(),
            channel: channel.into(),
            bytes_per_sec: bw,
            ops_per_sec: bw / 4096.0,
            limit: "-".into(),
            wait: WaitSummary::default(),
            latency: LatencySummary {
                ops: 1,
                p99_ns: p99,
                ..Default::default()
            },
        }
    }

    #[test]
    fn sorting_by_each_column_and_reversed() {
        let mut rows = vec![
            row("a", "read", 10.0, 300),
            row("b", "read", 30.0, 100),
            row("a", "write", 20.0, 200),
        ];
        sort(&mut rows, SortBy::Bandwidth, false);
        let order: Vec<f64> = rows.iter().map(|r| r.bytes_per_sec).collect();
        assert_eq!(order, [30.0, 20.0, 10.0]);
        sort(&mut rows, SortBy::Latency, false);
        assert_eq!(rows[0].latency.p99_ns, 300);
        sort(&mut rows, SortBy::Name, false);
        let names: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.stage.as_str(), r.channel.as_str()))
            .collect();
        assert_eq!(names, [("a", "read"), ("a", "write"), ("b", "read")]);
        sort(&mut rows, SortBy::Bandwidth, true);
        assert_eq!(rows[0].bytes_per_sec, 10.0);
        let mut by = SortBy::Bandwidth;
        for _ in 0..5 {
            by = by.next();
        }
        assert_eq!(by, SortBy::Bandwidth, "s cycles through every column");
    }

    #[test]
    fn sparklines_scale_to_each_rows_maximum_and_forget_gone_rows() {
        let mut h = History::default();
        for bw in [0.0, 50.0, 100.0] {
            h.add(&Frame {
                title: String::new(),
                rows: vec![row("a", "read", bw, 0)],
            });
        }
        assert_eq!(h.sparkline("a/read", 10), "▁▅█");
        assert_eq!(h.sparkline("a/read", 2), "▅█");
        h.add(&Frame {
            title: String::new(),
            rows: vec![],
        });
        assert_eq!(h.sparkline("a/read", 10), "");
        for _ in 0..HISTORY + 5 {
            h.add(&Frame {
                title: String::new(),
                rows: vec![row("a", "read", 1.0, 0)],
            });
        }
        assert_eq!(h.sparkline("a/read", 1000).chars().count(), HISTORY);
    }

    #[test]
    fn cells_say_dash_for_what_was_not_measured() {
        let mut r = row("a", "read", 2.0 * 1048576.0, 0);
        r.latency.ops = 0;
        let c = cells(&r);
        assert_eq!(c[2], "2.00 MiB/s");
        assert_eq!((c[5].as_str(), c[7].as_str()), ("-", "-"));
    }
}
