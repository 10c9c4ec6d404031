//! `paio`: run unmodified programs with a paio stage (docs/cli.md).

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result};
use clap::{CommandFactory, Parser, Subcommand};
use paio_cli::args::{self, ArgError, Label, Limit, StageName};
use paio_cli::privilege::Elevation;
use paio_cli::{child, exe, preload, summary, EXIT_PAIO_FAILED, EXIT_USAGE};

#[derive(Parser)]
#[command(
    name = "paio",
    version,
    about = "Software-defined storage stages for unmodified programs"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command with the paio interposer (libpaio_preload.so) loaded.
    #[command(
        override_usage = "paio run [OPTIONS] -- CMD [ARGS]...",
        after_help = "Examples:\n  \
        paio run --summary -- dd if=/dev/zero of=/tmp/f bs=1M count=64\n  \
        paio run --limit read=50MiB/s --limit \"metadata=1k ops/s\" -- tar cf /tmp/a.tar /usr/share/doc\n  \
        paio run --policy my-policy.toml --name train --label job=train1 -- python3 train.py\n\n\
        Exit status: the command's; killed by the same signal N if N killed it (128+N if\n\
        N cannot end paio, e.g. SIGPIPE); 127 if it is not found,\n\
        126 if it cannot be executed; 2 for a bad flag or policy; 125 if paio itself failed.\n\
        Guide: docs/cli.md"
    )]
    Run(RunArgs),
    /// Show the stages registered with paiod, their channels, rates and
    /// achieved bandwidth, and the policy's per-group figures.
    #[command(
        after_help = "Example:\n  paio status --socket /run/paio/paiod.sock\n\nGuide: docs/control-plane.md"
    )]
    Status(StatusArgs),
    /// Change a running paiod: a policy parameter, or one object's rate.
    #[command(after_help = "Examples:\n  \
        paio ctl set job=I3 demand=300MiB/s\n  \
        paio ctl set '*' max_bandwidth=1GiB/s\n  \
        paio ctl set-rate rocksdb compaction ln 20MiB/s\n\n\
        Guide: docs/control-plane.md")]
    Ctl(CtlArgs),
    /// A live view of the stages registered with paiod (or of a `paio run
    /// --stats` job): each channel's bandwidth, operations, limits, wait and
    /// latency percentiles and a sparkline, refreshed every interval.
    #[command(after_help = "Examples:\n  \
        paio top\n  \
        paio top --socket /run/paio/paiod.sock --interval 500ms\n  \
        paio top --stats '/tmp/job-stats.%p.json'   (with paio run --stats '/tmp/job-stats.%p.json' -- CMD)\n\n\
        Keys: s sorts by the next column, r reverses, q or Esc quits.\n\
        Guide: docs/operations.md")]
    Top(TopArgs),
    /// Say why a program would not be enforced under paio run (without
    /// running it), or why a running process is not: each problem with its
    /// fix. Exit status 0 when nothing is in the way, 1 otherwise.
    #[command(
        override_usage = "paio doctor [--policy FILE] [--control [SOCKET]] -- CMD [ARGS]...\n       paio doctor --pid PID",
        after_help = "Examples:\n  \
        paio doctor -- fio job.fio\n  \
        paio doctor --policy my-policy.toml --control -- python3 train.py\n  \
        paio doctor --pid 4242\n\n\
        Guide: docs/operations.md"
    )]
    Doctor(DoctorArgs),
    /// Draw a PNG of a run's statistics: each channel's bandwidth, wait and
    /// call latency over time from a recording (`paio run --record`,
    /// `paiod --record`), or each channel's totals from `paio run --stats`
    /// files, or a figure described in JSON (`--figure`).
    #[command(
        override_usage = "paio plot RECORDING -o OUT.png [--channel TEXT]... [--top N]\n       paio plot --stats PATTERN -o OUT.png\n       paio plot --figure FIGURE.json -o OUT.png",
        after_help = "Examples:\n  \
        paio run --record /tmp/job.jsonl --limit read=20MiB/s -- cp big /tmp/copy\n  \
        paio plot /tmp/job.jsonl -o /tmp/job.png\n  \
        paio plot /tmp/paiod.jsonl --channel compaction --top 4 -o /tmp/compactions.png\n  \
        paio plot --stats '/tmp/job-stats.%p.json' -o /tmp/totals.png\n\n\
        Guide: docs/operations.md"
    )]
    Plot(PlotArgs),
    /// Print a shell completion script for paio (or paiod).
    #[command(after_help = "Examples:\n  \
        paio completions bash > ~/.local/share/bash-completion/completions/paio\n  \
        paio completions zsh paiod > ~/.zfunc/_paiod\n\n\
        `make install` installs them for bash, zsh and fish.")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
        /// The program the script completes.
        #[arg(value_enum, default_value = "paio")]
        program: paio_cli::manuals::Program,
    },
    /// Write the manual pages of paio and paiod into DIR (`make install`
    /// runs it; `man -l DIR/paio-run.1` reads one in place).
    Man {
        /// Where the pages go (created if missing).
        dir: PathBuf,
    },
}

#[derive(clap::Args)]
struct DoctorArgs {
    /// The policy paio run would get (checked as paio run checks it).
    #[arg(long, value_name = "FILE", conflicts_with = "pid")]
    policy: Option<PathBuf>,
    /// The control socket paio run --control would use (paiod's default
    /// without a value).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, conflicts_with = "pid")]
    control: Option<Option<PathBuf>>,
    /// A running process to check instead of a command.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pid: Option<u32>,
    /// The command and its arguments.
    #[arg(
        trailing_var_arg = true,
        value_name = "CMD",
        required_unless_present = "pid"
    )]
    command: Vec<OsString>,
}

#[derive(clap::Args)]
struct PlotArgs {
    /// A recording: one JSON line per period, as `paio run --record` and
    /// `paiod --record` write it.
    #[arg(
        value_name = "RECORDING",
        required_unless_present_any = ["stats", "figure"],
        conflicts_with_all = ["stats", "figure"]
    )]
    recording: Option<PathBuf>,
    /// The statistics files of a `paio run --stats PATTERN` (`%p` for the
    /// pid): a bar chart of each channel's bytes and latency over the whole
    /// run (the files hold totals, not a time series: record one with
    /// --record).
    #[arg(long, value_name = "PATTERN", conflicts_with = "figure")]
    stats: Option<OsString>,
    /// A figure in `paio plot`'s JSON format (docs/cli.md): panels of
    /// series drawn as lines, steps, points or bars. The experiment
    /// drivers draw their plots through it.
    #[arg(long, value_name = "FILE")]
    figure: Option<PathBuf>,
    /// The PNG file to write.
    #[arg(long, short = 'o', value_name = "FILE.png")]
    output: PathBuf,
    /// Plot only the channels whose `stage / channel` contains TEXT
    /// (repeatable; a recording only).
    #[arg(long = "channel", value_name = "TEXT")]
    channels: Vec<String>,
    /// Plot at most N channels of a recording, those that moved the most
    /// bytes; the others are named on stderr.
    #[arg(long, value_name = "N", default_value_t = 8)]
    top: usize,
    /// The figure's title (default: the input's file name).
    #[arg(long)]
    title: Option<String>,
    /// The TrueType font of the labels (default: DejaVu Sans from Debian's
    /// fonts-dejavu-core).
    #[arg(long, value_name = "FILE")]
    font: Option<PathBuf>,
}

#[derive(clap::Args)]
struct TopArgs {
    /// paiod's socket (default: PAIO_CONTROL, else paiod's default).
    #[arg(long, value_name = "PATH", conflicts_with = "stats")]
    socket: Option<PathBuf>,
    /// Read the statistics files of a `paio run --stats PATTERN` instead of
    /// paiod (the same pattern, with `%p`).
    #[arg(long, value_name = "PATTERN")]
    stats: Option<OsString>,
    /// Time between refreshes (at least 100ms).
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = duration)]
    interval: Duration,
}

#[derive(clap::Args)]
struct StatusArgs {
    /// paiod's socket (default: PAIO_CONTROL, else paiod's default).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the raw JSON report instead of the table.
    #[arg(long)]
    json: bool,
    /// Print the cluster as this node sees it (cluster mode): its
    /// connection to etcd, the leader, the nodes and every job's global
    /// demand, allocation and achieved bandwidth.
    #[arg(long, conflicts_with = "json")]
    cluster: bool,
}

#[derive(clap::Args)]
struct CtlArgs {
    /// paiod's socket (default: PAIO_CONTROL, else paiod's default).
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: CtlCmd,
}

#[derive(clap::Subcommand)]
enum CtlCmd {
    /// Change a parameter of paiod's policy.
    #[command(after_help = "Examples:\n  \
        paio ctl set job=I3 demand=300MiB/s\n  \
        paio ctl set '*' max_bandwidth=1GiB/s\n  \
        paio ctl set job=train weight=2\n\n\
        GROUP is the value of paiod's grouping label (job=I3 and I3 both name group I3; * is the\n\
        whole policy). Keys: demand, rate, weight, max_bandwidth, as the policy accepts.")]
    Set {
        /// The group (`job=I3`, `I3`, or `*`).
        #[arg(value_name = "GROUP")]
        group: String,
        /// One or more KEY=VALUE.
        #[arg(value_name = "KEY=VALUE")]
        assignments: Vec<String>,
    },
    /// Set the rate of one DRL object in registered stages.
    #[command(after_help = "Example:\n  \
        paio ctl set-rate rocksdb compaction ln 20MiB/s\n\n\
        STAGE is a stage id or name as `paio status` shows it (a name sets every stage of\n\
        that name). Refused, with nothing changed, when a stage lacks the channel or the\n\
        object, the object is not a DRL, or paiod's policy sets it itself each period.")]
    SetRate {
        /// A stage id or name.
        #[arg(value_name = "STAGE")]
        stage: String,
        /// The channel.
        #[arg(value_name = "CHANNEL")]
        channel: String,
        /// The DRL object.
        #[arg(value_name = "OBJECT")]
        object: String,
        /// The rate, e.g. 20MiB/s or "500 iops".
        #[arg(value_name = "RATE")]
        rate: String,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Policy file for the stage (validated before the command starts).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Rate limit for a class of requests: read, write (bytes or ops per
    /// second) or metadata (ops per second). Repeatable.
    #[arg(long = "limit", value_name = "CLASS=RATE")]
    limits: Vec<String>,
    /// A label of the stage (PAIO_LABELS). Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// The stage's name (PAIO_STAGE_NAME).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Where each process writes its statistics (PAIO_STATS); %p is its pid.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// Print a summary of the statistics on stderr when the command ends.
    #[arg(long)]
    summary: bool,
    /// While the command runs, print a progress line on stderr every
    /// INTERVAL (e.g. 10s, at least 1s): bytes read and written so far by
    /// all its processes, and their rates (the `read` and `write` channels
    /// of the statistics, written by each process every second).
    #[arg(long, value_name = "INTERVAL", value_parser = duration)]
    progress: Option<Duration>,
    /// Record each channel's bandwidth, wait and latency into FILE (truncated
    /// first): one JSON line per statistics period, about one a second,
    /// for `paio plot`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Register the stage with paiod (PAIO_CONTROL) at SOCKET, or at paiod's
    /// default socket when given without a value or as `default`. The
    /// command runs even if paiod is absent; the stage connects when it
    /// appears.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1)]
    control: Option<Option<PathBuf>>,
    /// Mark every request of the command critical (PAIO_CRITICAL=1): priority
    /// objects admit them first, and other programs' priority objects hold
    /// their background requests back while they run (docs/criticality.md).
    #[arg(long)]
    critical: bool,
    /// Print the interposer's diagnostics on stderr (PAIO_LOG=1), each line
    /// prefixed `paio[PID]:` of the process it comes from: which processes
    /// run a stage, configuration problems, calls it cannot enforce.
    #[arg(long)]
    log: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// An error with the exit status it maps to.
struct Failure {
    code: i32,
    message: String,
}

impl From<ArgError> for Failure {
    fn from(e: ArgError) -> Self {
        Failure {
            code: EXIT_USAGE,
            message: format!("error: {e}"),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure {
            code: EXIT_PAIO_FAILED,
            message: format!("error: {e:#}"),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(a) => run(a),
        Cmd::Status(a) => status(a),
        Cmd::Ctl(a) => ctl(a),
        Cmd::Top(a) => top(a),
        Cmd::Doctor(a) => doctor(a),
        Cmd::Plot(a) => plot(a),
        Cmd::Completions { shell, program } => {
            let mut out = Vec::new();
            paio_cli::manuals::write_completions(Cli::command(), program, shell, &mut out);
            stdout(&String::from_utf8_lossy(&out)).map(|()| 0)
        }
        Cmd::Man { dir } => paio_cli::manuals::write_man_pages(Cli::command(), &dir)
            .with_context(|| format!("writing manual pages into {}", dir.display()))
            .map(|_| 0)
            .map_err(Failure::from),
    };
    let code = match result {
        Ok(code) => code,
        Err(f) => {
            stderr(&format!("paio: {}\n", f.message));
            f.code
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// The socket of `--socket`, else PAIO_CONTROL, else paiod's default.
fn paiod_socket(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| {
        let v = std::env::var_os("PAIO_CONTROL").filter(|v| !v.is_empty())?;
        // `default` as the stages read it; anything else as given (a
        // relative path is refused by the stages, and reported unreachable
        // here with its name).
        Some(match v.to_str().and_then(paio::env::control_socket) {
            Some(s) => s.path_with(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)),
            None => PathBuf::from(v),
        })
    })
    .unwrap_or_else(paio::control::default_socket_path)
}

/// The time `paio status` gives paiod for each of a place in its queue, the
/// request and the reply.
const CTL_TIMEOUT: Duration = Duration::from_secs(5);
/// The same for `paio ctl`, which in cluster mode waits for etcd (paiod
/// answers within 5 s saying whether etcd took the change).
const CTL_SET_TIMEOUT: Duration = Duration::from_secs(10);

fn doctor(a: DoctorArgs) -> Result<i32, Failure> {
    let findings = match a.pid {
        Some(pid) => paio_cli::doctor::check_pid(pid),
        None => {
            let exe_path = std::env::current_exe().context("cannot locate the paio executable")?;
            let control = a.control.map(|s| match s {
                Some(p) if p.as_os_str() != "default" => p,
                _ => paio::control::default_socket_path(),
            });
            let path_env = std::env::var_os("PATH");
            let paio_lib = std::env::var_os("PAIO_LIB");
            paio_cli::doctor::check_command(&paio_cli::doctor::CommandCheck {
                command: &a.command[0],
                path_env: path_env.as_deref(),
                policy: a.policy.as_deref(),
                control: control.as_deref(),
                paio_exe: &exe_path,
                paio_lib: paio_lib.as_deref(),
            })
        }
    };
    let (text, code) = paio_cli::doctor::report(&findings);
    stdout(&text)?;
    Ok(code)
}

/// A thread that runs a task every interval while the command runs
/// (`--progress`, `--record`), and once more when it ends.
struct Periodic {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Periodic {
    /// Starts calling `task(last)` every `every`; `last` is true for the
    /// call after [`Periodic::stop`]. The thread blocks every signal, so
    /// the signals paio forwards to the command never reach it.
    fn start(every: Duration, mut task: impl FnMut(bool) + Send + 'static) -> Periodic {
        use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let mut old = SigSet::empty();
        let _ = pthread_sigmask(
            SigmaskHow::SIG_SETMASK,
            Some(&SigSet::all()),
            Some(&mut old),
        );
        let thread = std::thread::spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every)
            {
                task(false);
            }
            task(true);
        });
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        Periodic { stop, thread }
    }

    /// Runs the task a last time and stops the thread (the command ended).
    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Reads the statistics files of `reader`, saying each unreadable one once
/// (for `flag`), not leaving it out quietly.
fn read_stats<'r>(
    flag: &str,
    reader: &'r mut summary::StatsReader,
    said: &mut std::collections::HashSet<String>,
) -> Vec<&'r summary::StatsFile> {
    let (files, errors) = reader.read();
    for e in errors {
        let e = e.to_string();
        if said.insert(e.clone()) {
            stderr(&format!("paio: warning: {flag}: {e}\n"));
        }
    }
    files
}

/// `--progress`: a line of bytes and rates every `every`.
fn start_progress(
    every: Duration,
    pattern: OsString,
    since: SystemTime,
    started: Instant,
) -> Periodic {
    let mut last = ((0u64, 0u64), started);
    let mut said = std::collections::HashSet::new();
    let mut reader = summary::StatsReader::new(&pattern, Some(since));
    Periodic::start(every, move |end| {
        if end {
            return;
        }
        let files = read_stats("--progress", &mut reader, &mut said);
        let now = Instant::now();
        let (line, totals) = summary::progress_line(&files, now - started, last.0, now - last.1);
        stderr(&line);
        last = (totals, now);
    })
}

/// How often `--record` reads the statistics files: four times per default
/// period of theirs, so that a stage's rewrite is seen before its next one
/// unless the machine holds this thread back for most of a period.
const RECORD_POLL: Duration = Duration::from_millis(250);

/// `--record`: a recording line whenever a process's stage has written a
/// new period (about one a second, [`summary::FileSampler`]), read every
/// [`RECORD_POLL`] and once more when the command ends; a write error is
/// said then.
fn start_record(
    recorder: paio_control::record::Recorder,
    pattern: OsString,
    since: SystemTime,
    started: Instant,
) -> Periodic {
    let mut sampler = summary::FileSampler::default();
    let mut said = std::collections::HashSet::new();
    let mut reader = summary::StatsReader::new(&pattern, Some(since));
    let mut recorder = Some(recorder);
    let mut wrote_any = false;
    Periodic::start(RECORD_POLL, move |end| {
        let files = read_stats("--record", &mut reader, &mut said);
        let sample = sampler.sample(&files, started.elapsed().as_secs_f64(), SystemTime::now());
        // A line only when some stage wrote a new period since the last one.
        let fresh = !sample.channels.is_empty();
        wrote_any |= fresh;
        if let Some(Err(e)) = recorder
            .as_mut()
            .filter(|_| fresh)
            .map(|r| r.record(sample))
        {
            stderr(&format!(
                "paio: warning: --record: {e}; the recording stops here\n"
            ));
        }
        if end && !wrote_any {
            stderr(
                "paio: warning: --record: no process wrote statistics, the recording is empty \
                 (was the interposer loaded?)\n",
            );
        }
        if end {
            if let Some(Err(e)) = recorder.take().map(|r| r.finish()) {
                stderr(&format!(
                    "paio: warning: --record: {e}; the recording stops before the end\n"
                ));
            }
        }
    })
}

/// A duration flag (`500ms`, `2s`), as in policy files.
fn duration(s: &str) -> Result<Duration, String> {
    paio::units::parse_duration(s).map_err(|e| e.to_string())
}

fn top(a: TopArgs) -> Result<i32, Failure> {
    let interval = a.interval;
    if interval < Duration::from_millis(100) {
        return Err(Failure {
            code: EXIT_USAGE,
            message: format!("error: --interval {interval:?}: at least 100ms"),
        });
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return Err(Failure {
            code: EXIT_USAGE,
            message: "error: paio top needs a terminal; for a snapshot use paio status \
                      (--json for scripts)"
                .into(),
        });
    }
    let source = match a.stats {
        Some(p) => paio_cli::top::Source::StatsFiles(summary::StatsReader::new(&p, None)),
        None => paio_cli::top::Source::Paiod(paiod_socket(a.socket)),
    };
    paio_cli::top::run(source, interval)
        .context("running the terminal view")
        .map(|()| 0)
        .map_err(Failure::from)
}

fn plot(a: PlotArgs) -> Result<i32, Failure> {
    use paio_cli::plot;
    let usage = |message: String| Failure {
        code: EXIT_USAGE,
        message: format!("error: {message}"),
    };
    if a.output.extension().is_none_or(|e| e != "png") {
        return Err(usage(format!(
            "-o {}: the output is a PNG file; name it FILE.png",
            a.output.display()
        )));
    }
    if a.top == 0 {
        return Err(usage("--top 0: plot at least one channel".into()));
    }
    let input_name = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let failed = |e: &dyn std::fmt::Display| Failure {
        code: EXIT_PAIO_FAILED,
        message: format!("error: {e}"),
    };
    let (figure, said) = if let Some(path) = &a.figure {
        let mut f = plot::read_figure(path).map_err(|e| usage(e.to_string()))?;
        if let Some(t) = &a.title {
            f.title = t.clone();
        }
        (f, String::new())
    } else if let Some(pattern) = &a.stats {
        let (files, errors) = summary::read_all(pattern, None);
        for e in &errors {
            stderr(&format!("paio: warning: {e}\n"));
        }
        if files.is_empty() {
            return Err(usage(format!(
                "--stats {}: no statistics file matches",
                Path::new(pattern).display()
            )));
        }
        let title = a.title.clone().unwrap_or_else(|| {
            format!(
                "{} process(es): {}",
                files.len(),
                input_name(Path::new(pattern))
            )
        });
        let f = plot::figure_of_stats(&files, &title).map_err(|e| usage(e.to_string()))?;
        (f, format!("{} process(es)", files.len()))
    } else {
        let path = a.recording.as_deref().expect("clap requires an input");
        let samples = paio_control::record::read(path).map_err(|e| usage(e.to_string()))?;
        let select = plot::Select {
            matching: a.channels.clone(),
            top: a.top,
        };
        let title = a.title.clone().unwrap_or_else(|| input_name(path));
        let (f, left) = plot::figure_of_recording(&samples, &select, &title)
            .map_err(|e| usage(e.to_string()))?;
        if left.plotted < left.matched {
            stderr(&format!(
                "paio: plotted the {} channels that moved the most bytes, of {} (--top {} for all, \
                 --channel TEXT to choose)\n",
                left.plotted, left.matched, left.matched
            ));
        }
        if left.dropped > 0 {
            stderr(&format!(
                "paio: warning: the recorder dropped {} sample(s) (its file could not keep up): \
                 the lines have gaps there\n",
                left.dropped
            ));
        }
        let (first, last) = (samples[0].t_s, samples.last().map_or(0.0, |s| s.t_s));
        (
            f,
            format!(
                "{} channel(s), {} samples from {first:.0} s to {last:.0} s",
                left.plotted,
                samples.len()
            ),
        )
    };
    plot::load_font(a.font.as_deref()).map_err(|e| failed(&e))?;
    plot::render(&figure, &a.output).map_err(|e| match e {
        plot::PlotError::Figure(_) => usage(e.to_string()),
        _ => failed(&e),
    })?;
    stderr(&format!(
        "paio: wrote {} ({} panel(s){}{said})\n",
        a.output.display(),
        figure.panels.len(),
        if said.is_empty() { "" } else { ", " }
    ));
    Ok(0)
}

fn status(a: StatusArgs) -> Result<i32, Failure> {
    let socket = paiod_socket(a.socket);
    let reply =
        paio_control::ctl::request(&socket, paio_control::ctl::CtlCommand::Status, CTL_TIMEOUT)
            .map_err(anyhow::Error::from)?;
    let report = reply.status.context("paiod sent no status")?;
    let text = if a.json {
        serde_json::to_string_pretty(&report).context("encoding the report")? + "\n"
    } else if a.cluster {
        match &report.cluster {
            Some(c) => paio_cli::admin::format_cluster(c),
            None => {
                return Err(Failure {
                    code: EXIT_PAIO_FAILED,
                    message: format!(
                        "error: paiod at {} does not run in cluster mode (its configuration \
                         has no [cluster]; see docs/cluster.md)",
                        socket.display()
                    ),
                })
            }
        }
    } else {
        paio_cli::admin::format_status(&report)
    };
    stdout(&text)?;
    Ok(0)
}

/// Writes `text` to standard output. A reader that went away (`paio status
/// | head -1`) ends the output quietly; any other error is paio's failure.
fn stdout(text: &str) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure {
            code: EXIT_PAIO_FAILED,
            message: format!("error: writing to standard output: {e}"),
        }),
        _ => Ok(()),
    }
}

/// Writes `text` to standard error, ignoring failures (there is nowhere
/// left to report them).
fn stderr(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn ctl(a: CtlArgs) -> Result<i32, Failure> {
    use paio_control::ctl::CtlCommand;
    let commands = match a.command {
        CtlCmd::Set { group, assignments } => paio_cli::admin::set_commands(&group, &assignments)?,
        CtlCmd::SetRate {
            stage,
            channel,
            object,
            rate,
        } => vec![CtlCommand::SetRate {
            stage,
            channel,
            object,
            rate,
        }],
    };
    let socket = paiod_socket(a.socket);
    for c in commands {
        let what = match &c {
            CtlCommand::Set {
                group, key, value, ..
            } => format!("{group}: {key}={value}"),
            CtlCommand::SetRate {
                stage,
                channel,
                object,
                rate,
            } => format!("{stage} {channel}/{object} = {rate}"),
            CtlCommand::Status => "status".to_string(),
        };
        let reply =
            paio_control::ctl::request(&socket, c, CTL_SET_TIMEOUT).map_err(|e| Failure {
                // A refused value is the user's to fix; anything else means
                // paiod could not be reached or trusted.
                code: match e {
                    paio_control::ctl::CtlError::Refused(_) => EXIT_USAGE,
                    _ => EXIT_PAIO_FAILED,
                },
                message: format!("error: {what}: {e}"),
            })?;
        stdout(&format!("paio: set {}\n", reply.done.unwrap_or(what)))?;
    }
    Ok(0)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p)
        .with_context(|| format!("{}: cannot make the path absolute", p.display()))
}

fn run(a: RunArgs) -> Result<i32, Failure> {
    // 1. Everything that can be checked is checked before anything runs.
    // Flag values are parsed here rather than by clap, so that every error
    // has the same form (`paio: error: --flag "value": ...`).
    let limits = a
        .limits
        .iter()
        .map(|l| l.parse())
        .collect::<Result<Vec<Limit>, _>>()?;
    let label_list = a
        .labels
        .iter()
        .map(|l| l.parse())
        .collect::<Result<Vec<Label>, _>>()?;
    let name = a.name.as_deref().map(str::parse::<StageName>).transpose()?;
    if a.policy.is_some() && !limits.is_empty() {
        return Err(ArgError::PolicyAndLimit.into());
    }
    let generated = if limits.is_empty() {
        None
    } else {
        Some(args::checked_limit_policy(&limits)?)
    };
    let control =
        a.control.is_some() || std::env::var_os("PAIO_CONTROL").is_some_and(|v| !v.is_empty());
    // The policy file the interposer will read, built into a stage here so
    // that its errors stop `paio run`: --policy, or an inherited PAIO_POLICY
    // (blamed as such).
    let policy_path = match &a.policy {
        Some(p) => Some(p.clone()),
        None if generated.is_none() => std::env::var_os("PAIO_POLICY")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        None => None,
    };
    let policy_stage = match &policy_path {
        Some(p) => {
            let stage = args::check_policy_file(p).map_err(|e| match e {
                ArgError::Policy(e) if a.policy.is_none() => ArgError::InheritedPolicy(e),
                other => other,
            })?;
            args::check_not_paused_forever(&stage, p, control)?;
            Some((stage, p.clone()))
        }
        None => None,
    };
    let labels = args::labels_env(&label_list)?;
    if let Some(s) = &a.stats {
        args::check_stats_pattern(s.as_os_str())?;
    }
    let exe_path = std::env::current_exe().context("cannot locate the paio executable")?;
    let lib = preload::find_library(std::env::var_os("PAIO_LIB").as_deref(), &exe_path)
        .map_err(anyhow::Error::from)?;
    let ld_preload = preload::compose_ld_preload(std::env::var_os("LD_PRELOAD").as_deref(), &lib)
        .map_err(anyhow::Error::from)?;
    let program = &a.command[0];
    let resolved = match exe::resolve_command(program, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(e) => {
            return Err(Failure {
                code: e.exit_code(),
                message: e.to_string(),
            })
        }
    };
    if let Ok(info) = exe::inspect(&resolved) {
        if let Some(w) = info.warning(&resolved) {
            stderr(&format!("paio: {w}\n"));
        }
    }
    if let Some(what) =
        Elevation::of(&resolved).and_then(|e| e.problem(&resolved.display().to_string()))
    {
        stderr(&format!("paio: warning: {what}\n"));
    }

    // 2. Temporary files: the generated policy, the default statistics files
    //    and the buckets of shared limits, removed when `tmp` is dropped.
    if a.progress.is_some_and(|p| p < Duration::from_secs(1)) {
        return Err(Failure {
            code: EXIT_USAGE,
            message:
                "error: --progress: at least 1s (the processes write their statistics every second)"
                    .into(),
        });
    }
    let wants_stats = a.summary || a.progress.is_some() || a.record.is_some();
    // Created before the command starts, so a bad path stops it.
    let recorder = match &a.record {
        Some(p) => Some(
            paio_control::record::Recorder::create(p).map_err(|e| Failure {
                code: EXIT_USAGE,
                message: format!("error: --record: {e}"),
            })?,
        ),
        None => None,
    };
    // Always: it also holds the buckets of the limits the command's
    // processes share (`PAIO_SHARED`, created by the first of them). 0700:
    // its policy and the processes' statistics (executables, bytes,
    // latencies) are the user's business only.
    let tmp = tempfile::Builder::new()
        .prefix("paio-run.")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .context("cannot create a temporary directory")?;
    // argv[0] is `program` as given (see `child::run_forwarding_signals`).
    let mut cmd = Command::new(&resolved);
    cmd.args(&a.command[1..]).env("LD_PRELOAD", &ld_preload);
    if let Some(text) = &generated {
        let path = tmp.path().join("policy.toml");
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        cmd.env("PAIO_POLICY", &path);
    } else if let Some(p) = &policy_path {
        cmd.env("PAIO_POLICY", absolute(p)?);
    }
    let stats_pattern: Option<OsString> = match &a.stats {
        Some(s) => Some(absolute(s)?.into_os_string()),
        None if wants_stats => Some(tmp.path().join("stats.%p.json").into_os_string()),
        None => None,
    };
    if let Some(s) = &stats_pattern {
        cmd.env("PAIO_STATS", s);
    }
    // An outer `paio run` (or the user's environment) asked for a policy or
    // statistics files that this run replaces for its command: said, never
    // dropped silently.
    let inherited = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
    // The buckets the limits share: this run's own with a policy of its
    // own; under the outer run's policy, the outer run's, so that the
    // command shares its limits with the outer run's other processes.
    match inherited("PAIO_SHARED") {
        Some(outer) if a.policy.is_none() && generated.is_none() => cmd.env("PAIO_SHARED", outer),
        _ => cmd.env("PAIO_SHARED", tmp.path().join("shared-limits")),
    };
    let replaced = |var: &str, outer: &OsString, then: &str| {
        stderr(&format!(
            "paio: warning: {var} is already set ({}: an outer paio run, or your \
             environment): {then}\n",
            Path::new(outer).display()
        ));
    };
    if let (true, Some(outer)) = (
        a.policy.is_some() || generated.is_some(),
        inherited("PAIO_POLICY"),
    ) {
        replaced(
            "PAIO_POLICY",
            &outer,
            "the command runs under this run's policy instead, so that policy's limits do \
             not apply to it",
        );
    }
    if let (Some(_), Some(outer)) = (&stats_pattern, inherited("PAIO_STATS")) {
        replaced(
            "PAIO_STATS",
            &outer,
            "the command's statistics go to this run's files instead, so an outer --summary, \
             --stats, --progress or --record does not see them",
        );
    }
    if !label_list.is_empty() {
        cmd.env("PAIO_LABELS", &labels);
    }
    if let Some(n) = &name {
        cmd.env("PAIO_STAGE_NAME", &n.0);
    }
    if a.critical {
        cmd.env("PAIO_CRITICAL", "1");
    }
    if a.log {
        cmd.env("PAIO_LOG", "1");
    }
    if let Some(sock) = &a.control {
        let sock = match sock {
            Some(p) if p.as_os_str() != "default" => absolute(p)?,
            _ => paio::control::default_socket_path(),
        };
        if let Some(outer) = inherited("PAIO_CONTROL").filter(|o| Path::new(o) != sock) {
            replaced(
                "PAIO_CONTROL",
                &outer,
                &format!(
                    "the command's stages register with {} instead, so that paiod's rules do \
                     not apply to them",
                    sock.display()
                ),
            );
        }
        cmd.env("PAIO_CONTROL", sock);
    }
    // Every PAIO_* the interposer will see, inherited or set above, checked
    // by its own parser: a bad one stops here, not in every process.
    let child_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("PAIO_"))
        .filter(|(k, _)| !cmd.get_envs().any(|(set, _)| set == k.as_str()))
        .chain(
            cmd.get_envs()
                .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string()))),
        )
        .collect();
    let env = paio::env::parse(&child_env).map_err(ArgError::Env)?;
    if let Some((stage, path)) = &policy_stage {
        args::check_file_classes(stage, path, &env.file_classes)?;
    }

    // 3. Run.
    // Files written during the run (with a margin for coarse timestamps).
    let since = SystemTime::now() - Duration::from_secs(2);
    let started = Instant::now();
    let mut periodic = Vec::new();
    if let (Some(every), Some(pattern)) = (a.progress, &stats_pattern) {
        periodic.push(start_progress(every, pattern.clone(), since, started));
    }
    if let (Some(r), Some(pattern)) = (recorder, &stats_pattern) {
        periodic.push(start_record(r, pattern.clone(), since, started));
    }
    let run = child::run_forwarding_signals(&cmd, program);
    for p in periodic {
        p.stop();
    }
    let status = match run {
        Ok(s) => s,
        Err(e) => {
            return Err(Failure {
                code: child::spawn_error_code(&e),
                message: format!("{}: {e}", resolved.display()),
            })
        }
    };
    let elapsed = started.elapsed();

    // 4. Summary.
    if a.summary {
        if let Some(pattern) = &stats_pattern {
            let (files, errors) = summary::read_all(pattern, Some(since));
            for e in errors {
                stderr(&format!("paio: warning: {e}\n"));
            }
            stderr(&summary::format_summary(&files, elapsed));
        }
    }
    drop(tmp);
    if let Some(sig) = status.signal() {
        return Ok(child::die_by_signal(sig));
    }
    Ok(child::exit_code(status))
}
