//! `paiod`'s command line, in the library so that `paio man` can write
//! paiod's manual page from the same definition the daemon parses.

use std::path::PathBuf;

use clap::Parser;

/// The paio control plane: stages register over a Unix socket and receive
/// rules from the configured policy every control period.
#[derive(Parser, Debug)]
#[command(
    name = "paiod",
    version,
    about,
    after_help = "Signals: SIGHUP reloads the --config file (an invalid file is refused and the \
                  running configuration stays); SIGTERM and SIGINT stop paiod, whose stages keep \
                  their rules and reconnect when it returns.\n\n\
                  Examples:\n  \
                  paiod --config /etc/paio/paiod.toml --metrics 127.0.0.1:9464\n  \
                  paiod --check-config /etc/paio/paiod.toml\n\n\
                  Guide: docs/control-plane.md"
)]
pub struct Args {
    /// paiod's TOML configuration (policy, period, socket, metrics). Without
    /// it: observe only (stages register and report, no rules).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The Unix socket stages and `paio ctl` connect to (overrides the
    /// configuration). Default: $XDG_RUNTIME_DIR/paio/paiod.sock; without
    /// XDG_RUNTIME_DIR, /run/paio/paiod.sock for root and
    /// /tmp/paio-<uid>/paiod.sock for other users.
    #[arg(long, short = 's', value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464;
    /// overrides the configuration).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Log filter (error, warn, info, debug), also from RUST_LOG.
    #[arg(long, default_value = "info")]
    pub log: String,
    /// Log line format: `text` (human-readable; colours on a terminal) or
    /// `json` (one object per line with timestamp, level, target and
    /// fields, for log collectors).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Record every stage's channels into FILE after each control period
    /// (one JSON line per period: bandwidth, wait and latency; truncated
    /// first), for `paio plot`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Check the configuration FILE as paiod would load it (the file, its
    /// policy and the connection caps against this process's descriptor
    /// limit), print what it sets up and exit: 0 if paiod would start with
    /// it, 1 with the error (file:line:column, field, what is expected)
    /// otherwise. Nothing is bound or started.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}
