//! paiod's configuration file (TOML).
//!
//! ```toml
//! period = "100ms"                 # control period (default 100ms)
//! # collect_timeout = "2s"         # default: 20 periods, at least 2 s
//! # socket = "/run/paio/paiod.sock"
//! # metrics = "127.0.0.1:9464"
//! [connections]                    # optional: see ConnectionLimits
//! # max_stages = 10000             # default: what the descriptor limit allows
//! # max_stages_per_uid = 10000     # default: max_stages
//! # hello_timeout = "10s"          # time to say hello or ctl; a ctl session's between requests
//! # max_waiting = 256              # connections that have not said it yet
//! # drain_timeout = "10s"          # a peer that does not read its replies
//! # max_buffered = "256MiB"        # unfinished frames over all connections
//! # max_stage_bytes = "512MiB"     # stages' registrations and reports paiod keeps
//! [policy]
//! kind = "max_min"                 # static (default) | max_min | proportional | silk | criticality
//! group_by = "job"                 # label that names a stage's group
//! channel = "read"                 # the controlled channel
//! # match = { request_type = "read" }  # mapping when paiod creates the channel
//! max_bandwidth = "1GiB/s"         # max_min, proportional: required
//! calibrate = true                 # max_min, proportional (default false)
//! [[policy.group]]
//! name = "I1"
//! demand = "150MiB/s"              # max_min: required
//! # weight = 2                     # proportional (default 1)
//! # rate / otherwise / start / stop / labels / rules: static
//! [cluster]                        # optional: see crate::cluster
//! endpoints = ["http://127.0.0.1:2379"]  # etcd's client URLs: required
//! # name = "paio"                  # the cluster (etcd key prefix /paio/<name>/)
//! # node = "web-7"                 # this node (default: the host name)
//! # lease = "2s"                   # liveness lease, whole seconds
//! # period = "1s"                  # how often the node publishes its use
//! ```
//!
//! Kind `silk` (SILK's tail-latency control, [`SilkPolicy`]) takes only its
//! two rates; the channels and objects it controls are fixed:
//!
//! ```toml
//! [policy]
//! kind = "silk"
//! kvs_bandwidth = "200MiB/s"       # KVSB: required
//! min_bandwidth = "10MiB/s"        # minB (default 10MiB/s), less than KVSB
//! writes_only = false              # true: limit only flush/compaction writes
//! # read_bandwidth = "150MiB/s"    # with writes_only: the store's read budget;
//! #                                # compaction reads get what Gets leave of it
//! # read_split = "256KiB"          # with read_bandwidth: compaction reads are
//! #                                # issued in pieces of this size (default: whole)
//! # read_priority = { busy_depth = 1, window = "2ms" }
//! #                                # with read_bandwidth: compaction reads go through
//! #                                # a priority object (its fields but rate, burst and
//! #                                # rate_critical), held back while Gets are in flight
//! # read_latency_target = "2ms"    # with read_bandwidth: halve the compaction
//! #                                # reads' budget while Gets' p99 is above it
//! # write_priority = { busy_depth = 0, window = "0ms" }
//! #                                # with writes_only: flush and compaction writes go
//! #                                # through priority objects (their fields but rate,
//! #                                # burst, rate_critical and split), held back while
//! #                                # Gets are in flight
//! ```
//!
//! Kind `criticality` (a latency target for critical I/O,
//! [`CriticalityPolicy`]) controls the depth and rate of every stage's
//! priority objects:
//!
//! ```toml
//! [policy]
//! kind = "criticality"
//! latency_target = "2ms"           # required: critical requests' target
//! percentile = 99                  # judged percentile (default 99)
//! window = "500ms"                 # evaluation window (default 500ms)
//! max_depth = 4                    # depth when the target is met (default 4)
//! min_depth = 1                    # lowest depth before the rate is cut (default 1)
//! busy_depth = 1                   # busy_depth ceiling (default 1)
//! min_rate = "1MiB/s"              # lowest background rate (default 1MiB/s)
//! decrease = 0.5                   # rate kept after a missed window (default 0.5)
//! ```
//!
//! Unknown fields are rejected, and so are fields the chosen kind does not
//! use. Every error names the origin, line, column and field
//! (`paiod.toml:9:10: policy.group[0].demand: ...`). An empty file is a
//! valid configuration: a `static` policy without entries, which only
//! observes.
//!
//! `collect_timeout` (default: 20 periods, at least 2 s): a stage that has
//! not answered a collect request within it is considered hung and dropped
//! (its connection is closed; when it recovers it registers again). A stage
//! that answers late simply has no new statistics for the periods it
//! missed: the loop never waits for a stage.

use std::collections::{BTreeMap, HashMap};

use paio::policy::{field_path, line_col};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use paio::object::PriorityConfig;
use paio::units::{HumanDuration, Rate, Size};
use paio::{Pattern, Rule};
use serde::Deserialize;
use toml::Spanned;

use crate::cluster::{self, ClusterConfig};
use crate::policy::common::check_byte_rate;
use crate::policy::{
    silk::DEFAULT_MIN_BANDWIDTH, ControlPolicy, ControlSettings, CriticalityPolicy, LatencyTarget,
    MaxMinPolicy, ProportionalPolicy, SilkPolicy, StaticEntry, StaticPolicy,
};

/// Largest configuration file accepted.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Default control period.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);

/// The collect timeout for `period` when none is configured: 20 periods,
/// at least 2 s (a loaded machine may delay a stage's answer by far more
/// than one period without the stage being gone).
pub fn default_collect_timeout(period: Duration) -> Duration {
    (period * 20).max(Duration::from_secs(2))
}

/// Why a configuration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {field}: {message}")]
pub struct ConfigError {
    /// The file name, or `<string>`.
    pub origin: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Path of the offending field (`policy.group[1].demand`), or `config`.
    pub field: String,
    /// What was wrong and what was expected.
    pub message: String,
}

/// paiod's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PaiodConfig {
    /// The Unix socket stages register on (none: the server's default).
    pub socket: Option<PathBuf>,
    /// The control period (default 100 ms).
    pub period: Duration,
    /// How long a collect waits for a stage's answer (default: the period).
    pub collect_timeout: Duration,
    /// Where to serve Prometheus metrics (none: not served).
    pub metrics: Option<SocketAddr>,
    /// The control policy.
    pub policy: PolicyConfig,
    /// Caps on connections (`[connections]`).
    pub connections: ConnectionLimits,
    /// Cluster mode (`[cluster]`; none: this machine only).
    pub cluster: Option<ClusterConfig>,
}

impl Default for PaiodConfig {
    fn default() -> Self {
        Self {
            socket: None,
            period: DEFAULT_PERIOD,
            collect_timeout: default_collect_timeout(DEFAULT_PERIOD),
            metrics: None,
            policy: PolicyConfig::default(),
            connections: ConnectionLimits::default(),
            cluster: None,
        }
    }
}

/// `[connections]`: what one peer, or all of them, can hold of paiod.
///
/// Every connection first *waits* until it says `hello` (a stage) or sends
/// a `ctl` request (`paio status`, `paio ctl`). Waiting connections are
/// capped and timed out, so idle or slow peers cannot use up descriptors;
/// when the cap is reached the oldest waiting connection is closed (a real
/// client speaks within microseconds of connecting, so it is never the
/// oldest). Stages are capped overall and per uid. `ctl` sessions have a
/// cap of their own ([`MAX_CTL_SESSIONS`]), so `paio status` works when
/// stages are at their cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectionLimits {
    /// Registered stages at once (`None`: the descriptor limit less the
    /// other caps and a reserve, see `server::Limits`). A stage over the
    /// cap is told so and closed; it retries like after a paiod restart.
    pub max_stages: Option<usize>,
    /// Registered stages of one uid at once (`None`: `max_stages`). Lower
    /// it to keep room for other stages (paiod serves only its own uid and
    /// root, whose stages share it).
    pub max_stages_per_uid: Option<usize>,
    /// How long a connection may wait before its first message, and a ctl
    /// session between its last answer and its next request (`None`:
    /// [`DEFAULT_HELLO_TIMEOUT`]). Shorter frees slots held by idle peers
    /// sooner; it must exceed what a loaded client takes to send 1 frame.
    pub hello_timeout: Option<Duration>,
    /// Connections waiting at once (`None`: [`DEFAULT_MAX_WAITING`]).
    pub max_waiting: Option<usize>,
    /// How long a peer may leave more than [`crate::outbox::SOFT_LIMIT`]
    /// bytes of replies unread before it is closed (`None`:
    /// [`DEFAULT_DRAIN_TIMEOUT`]). Meanwhile paiod reads nothing more from
    /// it.
    pub drain_timeout: Option<Duration>,
    /// Bytes of unfinished frames paiod holds over all connections (`None`:
    /// [`DEFAULT_MAX_BUFFERED`]). A connection whose unfinished frame takes
    /// the total over it is closed (a stage reconnects with backoff and
    /// keeps its rules meanwhile). Lower bounds what peers sending frames
    /// slowly can make paiod hold; a frame of a real peer is unfinished
    /// only for the moment it takes to arrive. At least a largest frame.
    pub max_buffered: Option<u64>,
    /// Bytes of stages' registrations and latest statistics paiod keeps,
    /// over all stages, as [`crate::peer::held_by_info`] and
    /// [`crate::peer::held_by_stats`] estimate them (`None`:
    /// [`DEFAULT_MAX_STAGE_BYTES`]). A stage whose `hello` or statistics
    /// would take the total over it is refused and closed (it reconnects
    /// with backoff, keeping its rules). Lower bounds paiod's memory
    /// against many large stages; a stage of [`paio::rule::MAX_STAGE_OBJECTS`]
    /// objects is a few MB, a usual one a few KB. At least a largest frame.
    pub max_stage_bytes: Option<u64>,
}

/// Checks that `path` can name a Unix socket
/// ([`paio::control::check_socket_path`]), naming it: a longer one passed
/// `--check-config` and then stopped paiod at bind.
pub fn check_socket_path(path: &Path) -> Result<(), String> {
    paio::control::check_socket_path(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Default [`ConnectionLimits::max_buffered`]: 256 MiB.
pub const DEFAULT_MAX_BUFFERED: u64 = 256 << 20;

/// Default [`ConnectionLimits::max_stage_bytes`]: 512 MiB.
pub const DEFAULT_MAX_STAGE_BYTES: u64 = 512 << 20;

/// The shortest control period paiod takes.
pub const MIN_PERIOD: Duration = Duration::from_millis(10);
/// The shortest cluster period paiod takes (a shorter one rounded the
/// agent's checks to 0 and stopped it).
pub const MIN_CLUSTER_PERIOD: Duration = Duration::from_millis(100);

/// Default [`ConnectionLimits::hello_timeout`].
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ConnectionLimits::max_waiting`].
pub const DEFAULT_MAX_WAITING: usize = 256;
/// Default [`ConnectionLimits::drain_timeout`].
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// `ctl` sessions (`paio status`, `paio ctl`) at once.
pub const MAX_CTL_SESSIONS: usize = 32;

/// The kinds of policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    /// [`StaticPolicy`].
    #[default]
    Static,
    /// [`MaxMinPolicy`].
    MaxMin,
    /// [`ProportionalPolicy`].
    Proportional,
    /// [`SilkPolicy`].
    Silk,
    /// [`CriticalityPolicy`].
    Criticality,
}

impl PolicyKind {
    /// The name used in the file.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Static => "static",
            PolicyKind::MaxMin => "max_min",
            PolicyKind::Proportional => "proportional",
            PolicyKind::Silk => "silk",
            PolicyKind::Criticality => "criticality",
        }
    }
}

/// The `[policy]` table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyConfig {
    /// Which algorithm.
    pub kind: PolicyKind,
    /// Grouping label, controlled channel, its pattern, calibration.
    pub settings: ControlSettings,
    /// `MaxB` in bytes/s (max_min, proportional).
    pub max_bandwidth: Option<f64>,
    /// `KVSB` in bytes/s (silk).
    pub kvs_bandwidth: Option<f64>,
    /// `minB` in bytes/s (silk; `None`: [`DEFAULT_MIN_BANDWIDTH`]).
    pub min_bandwidth: Option<f64>,
    /// Silk: limit only background writes ([`SilkPolicy::writes_only`]).
    pub writes_only: bool,
    /// Silk: the read budget in bytes/s ([`SilkPolicy::read_bandwidth`]).
    pub read_bandwidth: Option<f64>,
    /// Silk: the compaction reads' piece size in bytes, 0 for whole
    /// ([`SilkPolicy::read_split`]).
    pub read_split: u64,
    /// Silk: the compaction reads' priority object, instead of a DRL
    /// ([`SilkPolicy::read_priority`]).
    pub read_priority: Option<PriorityConfig>,
    /// Silk: the write objects' priority settings, instead of DRLs
    /// ([`SilkPolicy::write_priority`]); `split` is 0.
    pub write_priority: Option<PriorityConfig>,
    /// Silk: the foreground latency the compaction reads' budget steers by
    /// ([`SilkPolicy::read_latency_target`]).
    pub read_latency_target: Option<Duration>,
    /// The `[[policy.group]]` entries, in file order.
    pub groups: Vec<GroupConfig>,
    /// Criticality: the latency target and its knobs.
    pub latency: Option<LatencyTarget>,
}

/// One `[[policy.group]]` entry. Rates are in bytes/s.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupConfig {
    /// The group (a value of the grouping label, or a static entry's name).
    pub name: String,
    /// Guarantee (max_min).
    pub demand: Option<f64>,
    /// Weight (proportional; default 1).
    pub weight: Option<f64>,
    /// Static: selecting labels (empty: `group_by = name`).
    pub labels: BTreeMap<String, String>,
    /// Static: rate inside the window.
    pub rate: Option<f64>,
    /// Static: rate outside the window.
    pub otherwise: Option<f64>,
    /// Static: window start.
    pub start: Option<Duration>,
    /// Static: window end.
    pub stop: Option<Duration>,
    /// Static: raw rules.
    pub rules: Vec<Rule>,
}

impl PolicyConfig {
    /// The policy this configuration describes. Panics for a `silk`
    /// configuration without `0 < min_bandwidth < kvs_bandwidth`, or with a
    /// `read_bandwidth` that [`SilkPolicy::read_bandwidth`] refuses, which
    /// [`PaiodConfig::parse`] never returns.
    pub fn build(&self) -> Box<dyn ControlPolicy> {
        let settings = self.settings.clone();
        let max_b = self.max_bandwidth.unwrap_or(0.0);
        match self.kind {
            PolicyKind::Static => Box::new(StaticPolicy::new(
                settings,
                self.groups
                    .iter()
                    .map(|g| StaticEntry {
                        name: g.name.clone(),
                        labels: g.labels.clone(),
                        rate: g.rate,
                        otherwise: g.otherwise,
                        start: g.start,
                        stop: g.stop,
                        rules: g.rules.clone(),
                    })
                    .collect(),
            )),
            PolicyKind::MaxMin => Box::new(MaxMinPolicy::new(
                settings,
                max_b,
                self.groups
                    .iter()
                    .map(|g| (g.name.clone(), g.demand.unwrap_or(0.0))),
            )),
            PolicyKind::Proportional => Box::new(ProportionalPolicy::new(
                settings,
                max_b,
                self.groups
                    .iter()
                    .map(|g| (g.name.clone(), g.weight.unwrap_or(1.0))),
            )),
            PolicyKind::Silk => Box::new(
                SilkPolicy::new(
                    self.kvs_bandwidth.unwrap_or(0.0),
                    self.min_bandwidth.unwrap_or(DEFAULT_MIN_BANDWIDTH),
                )
                .and_then(|p| {
                    p.writes_only(self.writes_only)
                        .read_bandwidth(self.read_bandwidth)
                })
                .and_then(|p| p.read_split(self.read_split))
                .and_then(|p| p.read_priority(self.read_priority.clone()))
                .and_then(|p| p.write_priority(self.write_priority.clone()))
                .and_then(|p| p.read_latency_target(self.read_latency_target))
                .unwrap_or_else(|e| panic!("invalid silk configuration: {e}")),
            ),
            PolicyKind::Criticality => Box::new(
                CriticalityPolicy::new(
                    self.latency
                        .clone()
                        .expect("a criticality configuration has a latency target"),
                )
                .unwrap_or_else(|e| panic!("invalid criticality configuration: {e}")),
            ),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    socket: Option<Spanned<PathBuf>>,
    period: Option<Spanned<HumanDuration>>,
    collect_timeout: Option<Spanned<HumanDuration>>,
    metrics: Option<SocketAddr>,
    connections: Option<RawConnections>,
    policy: Option<RawPolicy>,
    cluster: Option<Spanned<RawCluster>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    endpoints: Option<Spanned<Vec<String>>>,
    name: Option<Spanned<String>>,
    node: Option<Spanned<String>>,
    lease: Option<Spanned<HumanDuration>>,
    period: Option<Spanned<HumanDuration>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnections {
    max_stages: Option<Spanned<usize>>,
    max_stages_per_uid: Option<Spanned<usize>>,
    hello_timeout: Option<Spanned<HumanDuration>>,
    max_waiting: Option<Spanned<usize>>,
    drain_timeout: Option<Spanned<HumanDuration>>,
    max_buffered: Option<Spanned<paio::units::Size>>,
    max_stage_bytes: Option<Spanned<paio::units::Size>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    kind: Option<Spanned<String>>,
    group_by: Option<Spanned<String>>,
    channel: Option<Spanned<String>>,
    #[serde(rename = "match")]
    pattern: Option<Spanned<Pattern>>,
    max_bandwidth: Option<Spanned<Rate>>,
    calibrate: Option<Spanned<bool>>,
    kvs_bandwidth: Option<Spanned<Rate>>,
    min_bandwidth: Option<Spanned<Rate>>,
    writes_only: Option<Spanned<bool>>,
    read_bandwidth: Option<Spanned<Rate>>,
    read_split: Option<Spanned<Size>>,
    read_priority: Option<Spanned<PriorityConfig>>,
    /// A table, not a PriorityConfig: an absent `split` means 0 (writes go
    /// whole), not the priority object's default.
    write_priority: Option<Spanned<toml::Table>>,
    read_latency_target: Option<Spanned<HumanDuration>>,
    latency_target: Option<Spanned<HumanDuration>>,
    percentile: Option<Spanned<f64>>,
    window: Option<Spanned<HumanDuration>>,
    max_depth: Option<Spanned<u32>>,
    min_depth: Option<Spanned<u32>>,
    busy_depth: Option<Spanned<u32>>,
    min_rate: Option<Spanned<Rate>>,
    decrease: Option<Spanned<f64>>,
    #[serde(default)]
    group: Vec<Spanned<RawGroup>>,
}

/// The fields of `fields` that are present, with their spans.
fn present<const N: usize>(
    fields: [(&'static str, Option<Range<usize>>); N],
) -> Vec<(&'static str, Range<usize>)> {
    fields
        .into_iter()
        .filter_map(|(f, s)| Some((f, s?)))
        .collect()
}

impl RawPolicy {
    /// The present fields of the rate-controlling kinds (static, max_min,
    /// proportional), with their spans.
    fn rate_fields(&self) -> Vec<(&'static str, Range<usize>)> {
        present([
            ("group_by", self.group_by.as_ref().map(|x| x.span())),
            ("channel", self.channel.as_ref().map(|x| x.span())),
            ("match", self.pattern.as_ref().map(|x| x.span())),
            (
                "max_bandwidth",
                self.max_bandwidth.as_ref().map(|x| x.span()),
            ),
            ("calibrate", self.calibrate.as_ref().map(|x| x.span())),
        ])
    }

    /// The present fields of kind `silk`.
    fn silk_fields(&self) -> Vec<(&'static str, Range<usize>)> {
        present([
            (
                "kvs_bandwidth",
                self.kvs_bandwidth.as_ref().map(|x| x.span()),
            ),
            (
                "min_bandwidth",
                self.min_bandwidth.as_ref().map(|x| x.span()),
            ),
            ("writes_only", self.writes_only.as_ref().map(|x| x.span())),
            ("read_split", self.read_split.as_ref().map(|x| x.span())),
            (
                "read_priority",
                self.read_priority.as_ref().map(|x| x.span()),
            ),
            (
                "write_priority",
                self.write_priority.as_ref().map(|x| x.span()),
            ),
            (
                "read_bandwidth",
                self.read_bandwidth.as_ref().map(|x| x.span()),
            ),
            (
                "read_latency_target",
                self.read_latency_target.as_ref().map(|x| x.span()),
            ),
        ])
    }

    /// The present fields of kind `criticality`.
    fn criticality_fields(&self) -> Vec<(&'static str, Range<usize>)> {
        present([
            (
                "latency_target",
                self.latency_target.as_ref().map(|x| x.span()),
            ),
            ("percentile", self.percentile.as_ref().map(|x| x.span())),
            ("window", self.window.as_ref().map(|x| x.span())),
            ("max_depth", self.max_depth.as_ref().map(|x| x.span())),
            ("min_depth", self.min_depth.as_ref().map(|x| x.span())),
            ("busy_depth", self.busy_depth.as_ref().map(|x| x.span())),
            ("min_rate", self.min_rate.as_ref().map(|x| x.span())),
            ("decrease", self.decrease.as_ref().map(|x| x.span())),
        ])
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: Option<Spanned<String>>,
    demand: Option<Spanned<Rate>>,
    weight: Option<Spanned<f64>>,
    labels: Option<Spanned<BTreeMap<String, String>>>,
    rate: Option<Spanned<Rate>>,
    otherwise: Option<Spanned<Rate>>,
    start: Option<Spanned<HumanDuration>>,
    stop: Option<Spanned<HumanDuration>>,
    rules: Option<Spanned<Vec<Rule>>>,
}

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn err(
        &self,
        span: Option<Range<usize>>,
        field: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = span.map_or((1, 1), |s| line_col(self.text, s.start));
        ConfigError {
            origin: self.origin.to_string(),
            line,
            column,
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn rate(&self, r: &Spanned<Rate>, field: &str) -> Result<f64, ConfigError> {
        check_byte_rate(*r.get_ref()).map_err(|e| self.err(Some(r.span()), field, e.message))
    }

    fn count(&self, n: &Spanned<usize>, field: &str) -> Result<usize, ConfigError> {
        match *n.get_ref() {
            0 => Err(self.err(Some(n.span()), field, "must be at least 1")),
            v => Ok(v),
        }
    }

    fn connections(&self, raw: &RawConnections) -> Result<ConnectionLimits, ConfigError> {
        let count = |n: &Option<Spanned<usize>>, f: &str| {
            n.as_ref()
                .map(|n| self.count(n, &format!("connections.{f}")))
                .transpose()
        };
        let duration = |d: &Option<Spanned<HumanDuration>>, f: &str| {
            d.as_ref()
                .map(|d| self.duration(d, &format!("connections.{f}")))
                .transpose()
        };
        Ok(ConnectionLimits {
            max_stages: count(&raw.max_stages, "max_stages")?,
            max_stages_per_uid: count(&raw.max_stages_per_uid, "max_stages_per_uid")?,
            hello_timeout: duration(&raw.hello_timeout, "hello_timeout")?,
            max_waiting: count(&raw.max_waiting, "max_waiting")?,
            drain_timeout: duration(&raw.drain_timeout, "drain_timeout")?,
            max_buffered: self.frame_budget(&raw.max_buffered, "max_buffered")?,
            max_stage_bytes: self.frame_budget(&raw.max_stage_bytes, "max_stage_bytes")?,
        })
    }

    /// A byte budget of `[connections]` (`field`), at least one frame of
    /// the largest size.
    fn frame_budget(
        &self,
        b: &Option<Spanned<paio::units::Size>>,
        field: &str,
    ) -> Result<Option<u64>, ConfigError> {
        match b {
            Some(b) if (b.get_ref().0 as usize) < paio::protocol::DEFAULT_MAX_FRAME => Err(self
                .err(
                    Some(b.span()),
                    &format!("connections.{field}"),
                    format!(
                        "must hold at least one frame of the largest size ({} bytes)",
                        paio::protocol::DEFAULT_MAX_FRAME
                    ),
                )),
            Some(b) => Ok(Some(b.get_ref().0)),
            None => Ok(None),
        }
    }

    fn cluster(
        &self,
        raw: &Spanned<RawCluster>,
        kind: PolicyKind,
    ) -> Result<ClusterConfig, ConfigError> {
        let span = raw.span();
        let raw = raw.get_ref();
        if !matches!(kind, PolicyKind::MaxMin | PolicyKind::Proportional) {
            return Err(self.err(
                Some(span),
                "cluster",
                format!(
                    "cluster mode shares bandwidth among jobs: policy.kind must be max_min or \
                     proportional, not {}",
                    kind.name()
                ),
            ));
        }
        let Some(endpoints) = &raw.endpoints else {
            return Err(self.err(
                Some(span),
                "cluster.endpoints",
                "missing field `endpoints` (etcd's client URLs, e.g. [\"http://127.0.0.1:2379\"])",
            ));
        };
        if endpoints.get_ref().is_empty() {
            return Err(self.err(
                Some(endpoints.span()),
                "cluster.endpoints",
                "needs at least one etcd client URL",
            ));
        }
        for e in endpoints.get_ref() {
            cluster::check_endpoint(e)
                .map_err(|m| self.err(Some(endpoints.span()), "cluster.endpoints", m))?;
        }
        let named = |v: &Option<Spanned<String>>, field: &str, default: String| match v {
            Some(n) => cluster::check_name(n.get_ref())
                .map(|()| n.get_ref().clone())
                .map_err(|m| self.err(Some(n.span()), &format!("cluster.{field}"), m)),
            None => cluster::check_name(&default)
                .map(|()| default)
                .map_err(|m| {
                    self.err(
                        Some(span.clone()),
                        &format!("cluster.{field}"),
                        format!("the default (the host name) cannot be used: {m}; set `node`"),
                    )
                }),
        };
        let name = named(&raw.name, "name", cluster::DEFAULT_CLUSTER.to_string())?;
        let node = named(&raw.node, "node", cluster::host_name())?;
        let lease = match &raw.lease {
            Some(l) => {
                let d = self.duration(l, "cluster.lease")?;
                if d.subsec_nanos() != 0 {
                    return Err(self.err(
                        Some(l.span()),
                        "cluster.lease",
                        "must be whole seconds (etcd leases count seconds)",
                    ));
                }
                d
            }
            None => cluster::DEFAULT_LEASE,
        };
        let period = match &raw.period {
            Some(p) => self.duration_at_least(
                p,
                "cluster.period",
                MIN_CLUSTER_PERIOD,
                "every node writes to etcd once per period",
            )?,
            None => cluster::DEFAULT_PERIOD,
        };
        Ok(ClusterConfig {
            endpoints: endpoints.get_ref().clone(),
            name,
            node,
            lease,
            period,
        })
    }

    fn duration(&self, d: &Spanned<HumanDuration>, field: &str) -> Result<Duration, ConfigError> {
        let v = d.get_ref().0;
        if v.is_zero() {
            Err(self.err(Some(d.span()), field, "must be greater than 0"))
        } else {
            Ok(v)
        }
    }

    /// [`Ctx::duration`] of at least `min`; `why` says what a shorter one
    /// would cost.
    fn duration_at_least(
        &self,
        d: &Spanned<HumanDuration>,
        field: &str,
        min: Duration,
        why: &str,
    ) -> Result<Duration, ConfigError> {
        let v = self.duration(d, field)?;
        if v < min {
            return Err(self.err(
                Some(d.span()),
                field,
                format!("must be at least {min:?} ({why}), is {v:?}"),
            ));
        }
        Ok(v)
    }
}

impl PaiodConfig {
    /// Parses configuration `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<PaiodConfig, ConfigError> {
        let cx = Ctx { text, origin };
        if text.len() > MAX_CONFIG_BYTES {
            return Err(cx.err(
                None,
                "config",
                format!(
                    "file of {} bytes exceeds the {MAX_CONFIG_BYTES} allowed",
                    text.len()
                ),
            ));
        }
        let de = toml::Deserializer::parse(text)
            .map_err(|e| cx.err(e.span(), "config", e.message().trim()))?;
        let raw: RawFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = field_path(&e.path().to_string(), "config");
            let inner = e.into_inner();
            cx.err(inner.span(), &field, inner.message().trim())
        })?;
        let period = match &raw.period {
            Some(p) => cx.duration_at_least(
                p,
                "period",
                MIN_PERIOD,
                "every period paiod asks every stage for its statistics",
            )?,
            None => DEFAULT_PERIOD,
        };
        let collect_timeout = match &raw.collect_timeout {
            Some(t) => cx.duration(t, "collect_timeout")?,
            None => default_collect_timeout(period),
        };
        let connections = match &raw.connections {
            Some(c) => cx.connections(c)?,
            None => ConnectionLimits::default(),
        };
        let policy = match raw.policy {
            Some(p) => policy_config(&cx, p)?,
            None => PolicyConfig::default(),
        };
        let cluster = match &raw.cluster {
            Some(c) => Some(cx.cluster(c, policy.kind)?),
            None => None,
        };
        let socket = match &raw.socket {
            Some(p) => {
                let path = p.get_ref();
                check_socket_path(path).map_err(|m| cx.err(Some(p.span()), "socket", m))?;
                Some(path.clone())
            }
            None => None,
        };
        Ok(PaiodConfig {
            socket,
            period,
            collect_timeout,
            metrics: raw.metrics,
            policy,
            connections,
            cluster,
        })
    }

    /// Reads and parses the configuration file at `path`.
    pub fn from_file(path: &Path) -> Result<PaiodConfig, ConfigError> {
        let origin = path.display().to_string();
        let fail = |message: String| ConfigError {
            origin: origin.clone(),
            line: 1,
            column: 1,
            field: "config".into(),
            message,
        };
        let text = paio::textfile::read_bounded(path, MAX_CONFIG_BYTES)
            .map_err(|e| fail(e.to_string()))?;
        Self::parse(&text, &origin)
    }
}

fn policy_config(cx: &Ctx<'_>, p: RawPolicy) -> Result<PolicyConfig, ConfigError> {
    let kind = match &p.kind {
        None => PolicyKind::Static,
        Some(k) => match k.get_ref().as_str() {
            "static" => PolicyKind::Static,
            "max_min" => PolicyKind::MaxMin,
            "proportional" => PolicyKind::Proportional,
            "silk" => PolicyKind::Silk,
            "criticality" => PolicyKind::Criticality,
            other => {
                return Err(cx.err(
                    Some(k.span()),
                    "policy.kind",
                    format!(
                        "unknown kind {other:?} (expected static, max_min, proportional, silk \
                         or criticality)"
                    ),
                ))
            }
        },
    };
    let kname = kind.name();
    if kind == PolicyKind::Criticality {
        return criticality_config(cx, &p);
    }
    if let Some((f, span)) = p.criticality_fields().into_iter().next() {
        return Err(cx.err(
            Some(span),
            &format!("policy.{f}"),
            format!("not used by kind {kname} (only by criticality)"),
        ));
    }
    if kind == PolicyKind::Silk {
        return silk_config(cx, &p);
    }
    if let Some((f, span)) = p.silk_fields().into_iter().next() {
        return Err(cx.err(
            Some(span),
            &format!("policy.{f}"),
            format!("not used by kind {kname} (only by silk)"),
        ));
    }
    let group_by = p.group_by.as_ref().map_or("job", |g| g.get_ref().as_str());
    let channel = p.channel.as_ref().map_or("read", |c| c.get_ref().as_str());
    let pattern = p.pattern.as_ref().map(|m| *m.get_ref());
    let settings = ControlSettings::new(group_by, channel, pattern, false).map_err(|e| {
        let (span, field) = match (&p.group_by, &p.channel) {
            (Some(g), _) if g.get_ref().is_empty() => (Some(g.span()), "policy.group_by"),
            (_, Some(c)) => (Some(c.span()), "policy.channel"),
            _ => (None, "policy"),
        };
        cx.err(span, field, e.message)
    })?;
    let mut settings = settings;
    let dynamic = kind != PolicyKind::Static;
    if let Some(c) = &p.calibrate {
        if !dynamic {
            return Err(cx.err(
                Some(c.span()),
                "policy.calibrate",
                "not used by kind static",
            ));
        }
        settings.calibrate = *c.get_ref();
    }
    let max_bandwidth = match (&p.max_bandwidth, dynamic) {
        (Some(m), true) => Some(cx.rate(m, "policy.max_bandwidth")?),
        (Some(m), false) => {
            return Err(cx.err(
                Some(m.span()),
                "policy.max_bandwidth",
                "not used by kind static",
            ))
        }
        (None, true) => {
            let span = p.kind.as_ref().map(|k| k.span());
            return Err(cx.err(
                span,
                "policy.max_bandwidth",
                format!("kind {kname} needs max_bandwidth"),
            ));
        }
        (None, false) => None,
    };
    if let Some(g) = p.group.get(crate::policy::common::MAX_GROUPS) {
        return Err(cx.err(
            Some(g.span()),
            &format!("policy.group[{}]", crate::policy::common::MAX_GROUPS),
            format!(
                "{} groups, more than the {} paiod keeps settings for",
                p.group.len(),
                crate::policy::common::MAX_GROUPS
            ),
        ));
    }
    let mut groups = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, g) in p.group.iter().enumerate() {
        let at = format!("policy.group[{i}]");
        let span = g.span();
        let g = g.get_ref();
        let unused = |field: &str, s: Range<usize>| {
            cx.err(
                Some(s),
                &format!("{at}.{field}"),
                format!("not used by kind {kname}"),
            )
        };
        let Some(name) = &g.name else {
            return Err(cx.err(Some(span), &at, "missing field `name`"));
        };
        let n = name.get_ref().trim();
        if n.is_empty() || n == "*" {
            return Err(cx.err(
                Some(name.span()),
                &format!("{at}.name"),
                "must be a non-empty group name other than `*`",
            ));
        }
        let (line, _) = line_col(cx.text, name.span().start);
        if let Some(prev) = seen.insert(n.to_string(), line) {
            return Err(cx.err(
                Some(name.span()),
                &format!("{at}.name"),
                format!("duplicate group {n:?} (first defined on line {prev})"),
            ));
        }
        let mut out = GroupConfig {
            name: n.to_string(),
            ..GroupConfig::default()
        };
        // Fields of other kinds.
        let statics: [(&str, Option<Range<usize>>); 6] = [
            ("labels", g.labels.as_ref().map(|x| x.span())),
            ("rate", g.rate.as_ref().map(|x| x.span())),
            ("otherwise", g.otherwise.as_ref().map(|x| x.span())),
            ("start", g.start.as_ref().map(|x| x.span())),
            ("stop", g.stop.as_ref().map(|x| x.span())),
            ("rules", g.rules.as_ref().map(|x| x.span())),
        ];
        if dynamic {
            if let Some((f, Some(s))) = statics.iter().find(|(_, s)| s.is_some()).cloned() {
                return Err(unused(f, s));
            }
        }
        if kind != PolicyKind::MaxMin {
            if let Some(d) = &g.demand {
                return Err(unused("demand", d.span()));
            }
        }
        if kind != PolicyKind::Proportional {
            if let Some(w) = &g.weight {
                return Err(unused("weight", w.span()));
            }
        }
        match kind {
            PolicyKind::MaxMin => match &g.demand {
                Some(d) => out.demand = Some(cx.rate(d, &format!("{at}.demand"))?),
                None => {
                    return Err(cx.err(
                        Some(span),
                        &format!("{at}.demand"),
                        "missing field `demand` (kind max_min)",
                    ))
                }
            },
            PolicyKind::Proportional => {
                if let Some(w) = &g.weight {
                    let v = *w.get_ref();
                    if !(v.is_finite() && v > 0.0) {
                        return Err(cx.err(
                            Some(w.span()),
                            &format!("{at}.weight"),
                            format!("must be a positive number, got {v}"),
                        ));
                    }
                    out.weight = Some(v);
                }
            }
            PolicyKind::Silk | PolicyKind::Criticality => {
                unreachable!("silk and criticality have their own configuration")
            }
            PolicyKind::Static => {
                if let Some(r) = &g.rate {
                    out.rate = Some(cx.rate(r, &format!("{at}.rate"))?);
                }
                if let Some(r) = &g.otherwise {
                    if g.rate.is_none() {
                        return Err(cx.err(
                            Some(r.span()),
                            &format!("{at}.otherwise"),
                            "needs a `rate`",
                        ));
                    }
                    out.otherwise = Some(cx.rate(r, &format!("{at}.otherwise"))?);
                }
                out.start = g.start.as_ref().map(|s| s.get_ref().0);
                if let Some(s) = &g.stop {
                    let stop = cx.duration(s, &format!("{at}.stop"))?;
                    if out.start.is_some_and(|st| st >= stop) {
                        return Err(cx.err(
                            Some(s.span()),
                            &format!("{at}.stop"),
                            "must be later than start",
                        ));
                    }
                    out.stop = Some(stop);
                }
                if let Some(l) = &g.labels {
                    if l.get_ref().is_empty() {
                        return Err(cx.err(
                            Some(l.span()),
                            &format!("{at}.labels"),
                            "must list at least one label (or be left out)",
                        ));
                    }
                    out.labels = l.get_ref().clone();
                }
                out.rules = g
                    .rules
                    .as_ref()
                    .map(|r| r.get_ref().clone())
                    .unwrap_or_default();
            }
        }
        groups.push(out);
    }
    Ok(PolicyConfig {
        kind,
        settings,
        max_bandwidth,
        kvs_bandwidth: None,
        min_bandwidth: None,
        writes_only: false,
        read_bandwidth: None,
        read_split: 0,
        read_priority: None,
        write_priority: None,
        read_latency_target: None,
        groups,
        latency: None,
    })
}

/// The `[policy]` table of kind `silk`: `kvs_bandwidth` (required) and
/// `min_bandwidth` (default 10 MiB/s, less than `kvs_bandwidth`); the fields
/// of the other kinds are rejected.
fn silk_config(cx: &Ctx<'_>, p: &RawPolicy) -> Result<PolicyConfig, ConfigError> {
    let unused = |field: &str, span: Range<usize>| {
        cx.err(
            Some(span),
            &format!("policy.{field}"),
            "not used by kind silk (its channels and objects are fixed)",
        )
    };
    if let Some((f, s)) = p.rate_fields().into_iter().next() {
        return Err(unused(f, s));
    }
    if let Some(g) = p.group.first() {
        return Err(cx.err(
            Some(g.span()),
            "policy.group[0]",
            "not used by kind silk (it controls every stage with its layout)",
        ));
    }
    let kvs = match &p.kvs_bandwidth {
        Some(k) => cx.rate(k, "policy.kvs_bandwidth")?,
        None => {
            return Err(cx.err(
                p.kind.as_ref().map(|k| k.span()),
                "policy.kvs_bandwidth",
                "kind silk needs kvs_bandwidth (KVSB, the store's I/O budget)",
            ))
        }
    };
    let min = match &p.min_bandwidth {
        Some(m) => cx.rate(m, "policy.min_bandwidth")?,
        None => DEFAULT_MIN_BANDWIDTH,
    };
    if let Err(e) = crate::policy::silk::check_bandwidths(kvs, min) {
        let (span, field) = match (&p.min_bandwidth, &p.kvs_bandwidth) {
            (Some(m), _) => (m.span(), "policy.min_bandwidth"),
            (None, Some(k)) => (k.span(), "policy.kvs_bandwidth"),
            (None, None) => unreachable!("kvs_bandwidth is required"),
        };
        return Err(cx.err(Some(span), field, e.message));
    }
    let writes_only = p.writes_only.as_ref().is_some_and(|w| *w.get_ref());
    let read = match &p.read_bandwidth {
        Some(r) => {
            let v = cx.rate(r, "policy.read_bandwidth")?;
            crate::policy::silk::check_read_bandwidth(v, min, writes_only)
                .map_err(|e| cx.err(Some(r.span()), "policy.read_bandwidth", e.message))?;
            Some(v)
        }
        None => None,
    };
    let read_split = match &p.read_split {
        Some(n) => {
            let bytes = n.get_ref().0;
            crate::policy::silk::check_read_split(bytes, read)
                .map_err(|e| cx.err(Some(n.span()), "policy.read_split", e.message))?;
            bytes
        }
        None => 0,
    };
    let read_priority = match &p.read_priority {
        Some(c) => {
            let field = "policy.read_priority";
            crate::policy::silk::check_read_priority(c.get_ref(), read)
                .map_err(|e| cx.err(Some(c.span()), field, e.message))?;
            crate::policy::silk::check_split_alone(read_split, Some(c.get_ref())).map_err(|e| {
                let span = p.read_split.as_ref().map(|n| n.span());
                cx.err(span, "policy.read_split", e.message)
            })?;
            Some(c.get_ref().clone())
        }
        None => None,
    };
    let write_priority = match &p.write_priority {
        Some(t) => {
            let field = "policy.write_priority";
            let bad = |message: String| cx.err(Some(t.span()), field, message);
            let mut c: PriorityConfig = toml::Value::Table(t.get_ref().clone())
                .try_into()
                .map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
            if !t.get_ref().contains_key("split") {
                c.split = paio::units::Size(0);
            }
            crate::policy::silk::check_write_priority(&c, writes_only)
                .map_err(|e| bad(e.message))?;
            Some(c)
        }
        None => None,
    };
    let read_latency_target = match &p.read_latency_target {
        Some(t) => {
            let v = cx.duration(t, "policy.read_latency_target")?;
            crate::policy::silk::check_read_latency_target(v, read)
                .map_err(|e| cx.err(Some(t.span()), "policy.read_latency_target", e.message))?;
            Some(v)
        }
        None => None,
    };
    Ok(PolicyConfig {
        kind: PolicyKind::Silk,
        settings: ControlSettings::default(),
        max_bandwidth: None,
        kvs_bandwidth: Some(kvs),
        min_bandwidth: Some(min),
        writes_only,
        read_bandwidth: read,
        read_split,
        read_priority,
        write_priority,
        read_latency_target,
        groups: Vec::new(),
        latency: None,
    })
}

/// The `[policy]` table of kind `criticality`: `latency_target` (required)
/// and the knobs of [`LatencyTarget`]; fields of other kinds are refused.
fn criticality_config(cx: &Ctx<'_>, p: &RawPolicy) -> Result<PolicyConfig, ConfigError> {
    let others = p.rate_fields().into_iter().chain(p.silk_fields()).next();
    if let Some((f, s)) = others {
        return Err(cx.err(
            Some(s),
            &format!("policy.{f}"),
            "not used by kind criticality (it controls every stage's priority objects)",
        ));
    }
    if let Some(g) = p.group.first() {
        return Err(cx.err(
            Some(g.span()),
            "policy.group[0]",
            "not used by kind criticality (it controls every stage's priority objects)",
        ));
    }
    let Some(target) = &p.latency_target else {
        return Err(cx.err(
            p.kind.as_ref().map(|k| k.span()),
            "policy.latency_target",
            "kind criticality needs latency_target (e.g. \"2ms\": the latency critical \
             requests should meet at `percentile`)",
        ));
    };
    let mut t = LatencyTarget::new(cx.duration(target, "policy.latency_target")?);
    if let Some(v) = &p.percentile {
        t.percentile = *v.get_ref();
    }
    if let Some(v) = &p.window {
        t.window = cx.duration(v, "policy.window")?;
    }
    if let Some(v) = &p.max_depth {
        t.max_depth = *v.get_ref();
    }
    if let Some(v) = &p.min_depth {
        t.min_depth = *v.get_ref();
    }
    if let Some(v) = &p.busy_depth {
        t.busy_depth = *v.get_ref();
    }
    if let Some(v) = &p.min_rate {
        t.min_rate = cx.rate(v, "policy.min_rate")?;
    }
    if let Some(v) = &p.decrease {
        t.decrease = *v.get_ref();
    }
    if let Err(e) = t.validate() {
        // The field the message starts with is the one to blame.
        let fields = p.criticality_fields();
        let (field, span) = fields
            .iter()
            .find(|(f, _)| e.message.starts_with(f))
            .cloned()
            .map_or(("policy".to_string(), None), |(f, s)| {
                (format!("policy.{f}"), Some(s))
            });
        return Err(cx.err(span, &field, e.message));
    }
    Ok(PolicyConfig {
        kind: PolicyKind::Criticality,
        latency: Some(t),
        ..PolicyConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PaiodConfig, ConfigError> {
        PaiodConfig::parse(text, "t.toml")
    }

    fn err(text: &str) -> ConfigError {
        let e = parse(text).unwrap_err();
        assert!(e
            .to_string()
            .starts_with(&format!("t.toml:{}:{}: {}: ", e.line, e.column, e.field)));
        e
    }

    const MIB: f64 = 1024.0 * 1024.0;

    #[test]
    fn empty_file_observes() {
        let c = parse("").unwrap();
        assert_eq!(c, PaiodConfig::default());
        assert_eq!(c.period, Duration::from_millis(100));
        assert_eq!(c.collect_timeout, Duration::from_secs(2));
        let mut p = c.policy.build();
        assert_eq!(p.kind(), "static");
        assert!(p.period(Duration::ZERO, &[]).is_empty());
    }

    #[test]
    fn connection_limits_are_read_and_checked() {
        let c = parse(
            "[connections]\nmax_stages = 100\nmax_stages_per_uid = 10\nhello_timeout = \"2s\"\nmax_waiting = 8\ndrain_timeout = \"500ms\"\n",
        )
        .unwrap();
        assert_eq!(
            c.connections,
            ConnectionLimits {
                max_stages: Some(100),
                max_stages_per_uid: Some(10),
                hello_timeout: Some(Duration::from_secs(2)),
                max_waiting: Some(8),
                drain_timeout: Some(Duration::from_millis(500)),
                max_buffered: None,
                max_stage_bytes: None,
            }
        );
        let e = err("[connections]\nmax_waiting = 0\n");
        assert_eq!((e.line, e.field.as_str()), (2, "connections.max_waiting"));
        assert!(e.message.contains("at least 1"), "{e}");
        let e = err("[connections]\n\ndrain_timeout = \"0s\"\n");
        assert_eq!((e.line, e.field.as_str()), (3, "connections.drain_timeout"));
        let e = err("[connections]\nmax_buffered = \"64KiB\"\n");
        assert_eq!((e.line, e.field.as_str()), (2, "connections.max_buffered"));
        assert!(e.message.contains("at least one frame"), "{e}");
        let c = parse("[connections]\nmax_buffered = \"64MiB\"\n").unwrap();
        assert_eq!(c.connections.max_buffered, Some(64 << 20));
        let e = err("[connections]\nmax_stage_bytes = \"1KiB\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "connections.max_stage_bytes")
        );
        let c = parse("[connections]\nmax_stage_bytes = \"64MiB\"\n").unwrap();
        assert_eq!(c.connections.max_stage_bytes, Some(64 << 20));
        let e = err("[connections]\nmax_conns = 3\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("max_conns"), "{e}");
    }

    #[test]
    fn max_min_example() {
        let c = parse(
            r#"
period = "50ms"
socket = "/run/paio/paiod.sock"
metrics = "127.0.0.1:9464"
[policy]
kind = "max_min"
group_by = "job"
channel = "read"
max_bandwidth = "1GiB/s"
calibrate = true
[[policy.group]]
name = "I1"
demand = "150MiB/s"
[[policy.group]]
name = "I2"
demand = "200MiB/s"
"#,
        )
        .unwrap();
        assert_eq!(c.period, Duration::from_millis(50));
        assert_eq!(c.collect_timeout, Duration::from_secs(2));
        assert_eq!(c.socket.as_deref(), Some(Path::new("/run/paio/paiod.sock")));
        assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.policy.kind, PolicyKind::MaxMin);
        assert!(c.policy.settings.calibrate);
        assert_eq!(c.policy.max_bandwidth, Some(1024.0 * MIB));
        assert_eq!(c.policy.groups[1].demand, Some(200.0 * MIB));
        let p = c.policy.build();
        assert_eq!(p.kind(), "max_min");
        assert_eq!(p.targets().len(), 2);
    }

    #[test]
    fn static_and_proportional() {
        let c = parse(
            r#"
collect_timeout = "20ms"
[policy]
channel = "bg"
match = { request_context = "flush" }
[[policy.group]]
name = "night"
labels = { tier = "batch" }
rate = "10MiB/s"
otherwise = "50MiB/s"
start = "1h"
stop = "2h"
rules = [{ rule = "create_channel", name = "x" }]
"#,
        )
        .unwrap();
        assert_eq!(c.collect_timeout, Duration::from_millis(20));
        assert!(c.policy.settings.pattern.request_context.is_some());
        let g = &c.policy.groups[0];
        assert_eq!(g.start, Some(Duration::from_secs(3600)));
        assert_eq!(g.stop, Some(Duration::from_secs(7200)));
        assert_eq!(g.rate, Some(10.0 * MIB));
        assert_eq!(g.otherwise, Some(50.0 * MIB));
        assert_eq!(g.rules, vec![Rule::CreateChannel { name: "x".into() }]);
        assert_eq!(g.labels["tier"], "batch");
        let c = parse("[policy]\nkind = \"proportional\"\nmax_bandwidth = \"100MB/s\"\n[[policy.group]]\nname = \"a\"\nweight = 3\n[[policy.group]]\nname = \"b\"\n").unwrap();
        assert_eq!(c.policy.groups[0].weight, Some(3.0));
        assert_eq!(c.policy.groups[1].weight, None);
        assert_eq!(c.policy.build().kind(), "proportional");
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = err("period = \"100ms\"\ncolour = 1\n");
        assert_eq!((e.line, e.field.as_str()), (2, "colour"), "{e}");
        assert!(e.message.contains("colour"), "{e}");

        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\ndemand = \"150MiB\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (6, "policy.group[0].demand"),
            "{e}"
        );

        let many: String = (0..=crate::policy::common::MAX_GROUPS)
            .map(|i| format!("[[policy.group]]\nname = \"g{i}\"\nweight = 1\n"))
            .collect();
        let e = err(&format!(
            "[policy]\nkind = \"proportional\"\nmax_bandwidth = \"1GiB/s\"\n{many}"
        ));
        assert_eq!(e.field, "policy.group[4096]", "{e}");
        assert!(e.message.contains("4097 groups, more than the 4096"), "{e}");

        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\n");
        assert_eq!(e.field, "policy.group[0].demand", "{e}");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("missing"), "{e}");

        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"0B/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (3, "policy.max_bandwidth"),
            "{e}"
        );

        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"-5MiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (3, "policy.max_bandwidth"),
            "{e}"
        );

        let e = err("[policy]\nkind = \"proportional\"\nmax_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\nweight = -1\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (6, "policy.group[0].weight"),
            "{e}"
        );
        let e = err("[policy]\nkind = \"proportional\"\nmax_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\nweight = 0\n");
        assert_eq!(e.field, "policy.group[0].weight", "{e}");

        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\ndemand = \"1MiB/s\"\n[[policy.group]]\nname = \"a\"\ndemand = \"2MiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (8, "policy.group[1].name"),
            "{e}"
        );
        assert!(
            e.message.contains("duplicate") && e.message.contains("line 5"),
            "{e}"
        );

        let e = err("[policy]\nkind = \"max_min\"\n");
        assert_eq!(e.field, "policy.max_bandwidth", "{e}");

        let e = err("[policy]\nkind = \"fastest\"\n");
        assert_eq!((e.line, e.field.as_str()), (2, "policy.kind"), "{e}");

        let e = err("[policy]\nchannel = \"bg\"\n");
        assert_eq!((e.line, e.field.as_str()), (2, "policy.channel"), "{e}");
        assert!(e.message.contains("match"), "{e}");

        let e = err("period = \"0ms\"\n");
        assert_eq!((e.line, e.field.as_str()), (1, "period"), "{e}");
        let e = err("\nperiod = \"fast\"\n");
        assert_eq!((e.line, e.field.as_str()), (2, "period"), "{e}");
        let e = err("period = \"1us\"\n");
        assert!(e.message.contains("at least 10ms"), "{e}");

        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\ndemand = \"1MiB/s\"\nweight = 2\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (7, "policy.group[0].weight"),
            "{e}"
        );

        let e = err("[policy]\n[[policy.group]]\nname = \"a\"\nrate = \"1MiB/s\"\nstart = \"10s\"\nstop = \"5s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (6, "policy.group[0].stop"),
            "{e}"
        );

        let e = err("[policy]\n[[policy.group]]\nname = \"a\"\nrate = \"100 iops\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.group[0].rate"),
            "{e}"
        );

        let e = err("[policy]\n[[policy.group]]\nname = \"a\"\nrules = [{ rule = \"explode\" }]\n");
        assert!(e.field.starts_with("policy.group[0].rules"), "{e}");
        assert_eq!(e.line, 4, "{e}");

        let e = err("[policy]\n[[policy.group]]\nname = \"a\"\nrate = \"1MiB/s\"\nspeed = 1\n");
        assert_eq!(e.line, 5, "{e}");

        let e = err("[policy]\nmax_bandwidth = \"1GiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "policy.max_bandwidth"),
            "{e}"
        );

        let e = err("[policy\n");
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn silk_read_priority() {
        const HEAD: &str =
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n";
        let c = parse(&format!(
            "{HEAD}read_bandwidth = \"150MiB/s\"\n\
             read_priority = {{ busy_depth = 0, depth = 2, window = \"1ms\", split = \"64KiB\" }}\n"
        ))
        .unwrap();
        let p = c.policy.read_priority.clone().unwrap();
        assert_eq!((p.busy_depth, p.depth, p.split.0), (0, 2, 64 << 10));
        assert_eq!(p.window.0, Duration::from_millis(1));
        c.policy.build();
        for (text, line, field, needle) in [
            (
                "read_priority = { busy_depth = 0 }\n",
                5,
                "policy.read_priority",
                "needs read_bandwidth",
            ),
            (
                "read_bandwidth = \"150MiB/s\"\nread_priority = { rate = \"1MiB/s\" }\n",
                6,
                "policy.read_priority",
                "must not set rate",
            ),
            (
                "read_bandwidth = \"150MiB/s\"\nread_priority = { busy_depth = 9 }\n",
                6,
                "policy.read_priority",
                "busy_depth",
            ),
            (
                "read_bandwidth = \"150MiB/s\"\nread_split = \"64KiB\"\nread_priority = {}\n",
                6,
                "policy.read_split",
                "read_priority.split",
            ),
        ] {
            let e = err(&format!("{HEAD}{text}"));
            assert_eq!((e.line, e.field.as_str()), (line, field), "{e}");
            assert!(e.message.contains(needle), "{e}");
        }
        let e = err(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n\
                     read_bandwidth = \"150MiB/s\"\nread_priority = { depht = 2 }\n",
        );
        assert!(e.message.contains("depht"), "{e}");
        let e =
            err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nread_priority = {}\n");
        assert_eq!(e.field, "policy.read_priority", "{e}");
        assert!(e.message.contains("only by silk"), "{e}");
    }

    #[test]
    fn silk_write_priority() {
        const HEAD: &str =
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n";
        let c = parse(&format!(
            "{HEAD}write_priority = {{ busy_depth = 0, depth = 2, window = \"1ms\" }}\n"
        ))
        .unwrap();
        let p = c.policy.write_priority.clone().unwrap();
        assert_eq!(
            (p.busy_depth, p.depth, p.split.0),
            (0, 2, 0),
            "no split: whole"
        );
        assert_eq!(p.window.0, Duration::from_millis(1));
        c.policy.build();
        let c = parse(&format!(
            "{HEAD}write_priority = {{ split = \"256KiB\" }}\n"
        ))
        .unwrap();
        assert_eq!(c.policy.write_priority.clone().unwrap().split.0, 256 << 10);
        c.policy.build();
        for (text, needle) in [
            (
                "write_priority = { rate = \"1MiB/s\" }\n",
                "must not set rate",
            ),
            ("write_priority = { busy_depth = 9 }\n", "busy_depth"),
            ("write_priority = { depht = 2 }\n", "depht"),
        ] {
            let e = err(&format!("{HEAD}{text}"));
            assert_eq!(
                (e.line, e.field.as_str()),
                (5, "policy.write_priority"),
                "{e}"
            );
            assert!(e.message.contains(needle), "{e}");
        }
        let e =
            err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrite_priority = {}\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.write_priority"),
            "{e}"
        );
        assert!(e.message.contains("needs writes_only"), "{e}");
        let e =
            err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nwrite_priority = {}\n");
        assert_eq!(e.field, "policy.write_priority", "{e}");
        assert!(e.message.contains("only by silk"), "{e}");
    }

    #[test]
    fn silk_config() {
        let c = parse(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nmin_bandwidth = \"5MiB/s\"\n",
        )
        .unwrap();
        assert_eq!(c.policy.kind, PolicyKind::Silk);
        assert_eq!(c.policy.kvs_bandwidth, Some(200.0 * MIB));
        assert_eq!(c.policy.min_bandwidth, Some(5.0 * MIB));
        let mut p = c.policy.build();
        assert_eq!(p.kind(), "silk");
        assert!(p.targets().is_empty());
        p.set("*", "min_bandwidth", "20MiB/s").unwrap();
        // minB defaults to 10 MiB/s.
        let c = parse("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"100MB/s\"\n").unwrap();
        assert_eq!(c.policy.min_bandwidth, Some(10.0 * MIB));
        assert!(!c.policy.writes_only);
        let c =
            parse("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"100MB/s\"\nwrites_only = true\n")
                .unwrap();
        assert!(c.policy.writes_only);
        // Only silk takes it, and only as a boolean.
        let e =
            err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nwrites_only = true\n");
        assert_eq!((e.line, e.field.as_str()), (4, "policy.writes_only"), "{e}");
        assert!(e.message.contains("only by silk"), "{e}");
        let e =
            err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nwrites_only = \"yes\"\n");
        assert_eq!(e.line, 4, "{e}");
        assert_eq!(c.policy.build().kind(), "silk");
        // read_bandwidth: with writes_only, above minB, silk only.
        let c = parse(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n\
             read_bandwidth = \"150MiB/s\"\n",
        )
        .unwrap();
        assert_eq!(c.policy.read_bandwidth, Some(150.0 * MIB));
        let mut p = c.policy.build();
        p.set("*", "read_bandwidth", "120MiB/s").unwrap();
        let e = err(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nread_bandwidth = \"150MiB/s\"\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.read_bandwidth"),
            "{e}"
        );
        assert!(e.message.contains("needs writes_only"), "{e}");
        let e = err(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n\
             read_bandwidth = \"5MiB/s\"\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (5, "policy.read_bandwidth"),
            "{e}"
        );
        assert!(e.message.contains("less than read_bandwidth"), "{e}");
        // read_split: with read_bandwidth, a multiple of 4 KiB.
        let c = parse(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n\
             read_bandwidth = \"150MiB/s\"\nread_split = \"256KiB\"\n",
        )
        .unwrap();
        assert_eq!(c.policy.read_split, 256 << 10);
        c.policy.build();
        for (text, needle) in [
            (
                "writes_only = true\nread_split = \"256KiB\"\n",
                "needs read_bandwidth",
            ),
            (
                "writes_only = true\nread_bandwidth = \"150MiB/s\"\nread_split = \"5000B\"\n",
                "multiple of 4 KiB",
            ),
        ] {
            let e = err(&format!(
                "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\n{text}"
            ));
            assert_eq!(e.field, "policy.read_split", "{e}");
            assert!(e.message.contains(needle), "{e}");
        }
        // read_latency_target: with read_bandwidth, more than 0.
        let c = parse(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\nwrites_only = true\n\
             read_bandwidth = \"150MiB/s\"\nread_latency_target = \"2ms\"\n",
        )
        .unwrap();
        assert_eq!(c.policy.read_latency_target, Some(Duration::from_millis(2)));
        c.policy.build();
        for (text, line, needle) in [
            (
                "writes_only = true\nread_latency_target = \"2ms\"\n",
                5,
                "needs read_bandwidth",
            ),
            (
                "writes_only = true\nread_bandwidth = \"150MiB/s\"\nread_latency_target = \"0ms\"\n",
                6,
                "greater than 0",
            ),
        ] {
            let e = err(&format!(
                "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"200MiB/s\"\n{text}"
            ));
            assert_eq!((e.line, e.field.as_str()), (line, "policy.read_latency_target"), "{e}");
            assert!(e.message.contains(needle), "{e}");
        }
        let e = err(
            "[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nread_latency_target = \"2ms\"\n",
        );
        assert_eq!(e.field, "policy.read_latency_target", "{e}");
        assert!(e.message.contains("only by silk"), "{e}");
        let e = err(
            "[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nread_split = \"64KiB\"\n",
        );
        assert_eq!(e.field, "policy.read_split", "{e}");
        assert!(e.message.contains("only by silk"), "{e}");
        let e = err(
            "[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nread_bandwidth = \"1GiB/s\"\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.read_bandwidth"),
            "{e}"
        );
    }

    #[test]
    fn criticality_config() {
        let c = parse(
            "[policy]\nkind = \"criticality\"\nlatency_target = \"2ms\"\npercentile = 99.9\n\
             window = \"1s\"\nmax_depth = 8\nbusy_depth = 0\nmin_rate = \"4MiB/s\"\n\
             decrease = 0.75\nmin_depth = 2\n",
        )
        .unwrap();
        assert_eq!(c.policy.kind, PolicyKind::Criticality);
        let t = c.policy.latency.clone().unwrap();
        assert_eq!(t.target, Duration::from_millis(2));
        assert_eq!((t.percentile, t.window), (99.9, Duration::from_secs(1)));
        assert_eq!((t.max_depth, t.busy_depth, t.min_rate), (8, 0, 4.0 * MIB));
        assert_eq!((t.decrease, t.min_depth), (0.75, 2));
        let mut p = c.policy.build();
        assert_eq!(p.kind(), "criticality");
        assert_eq!(p.latency().unwrap().target_ns, 2_000_000);
        p.set("*", "latency_target", "5ms").unwrap();
        assert_eq!(p.latency().unwrap().target_ns, 5_000_000);
        let e = p.set("*", "max_depth", "5000000").unwrap_err();
        assert!(e.message.contains("between 1 and 4194303"), "{e:?}");
        // Defaults.
        let c = parse("[policy]\nkind = \"criticality\"\nlatency_target = \"10ms\"\n").unwrap();
        assert_eq!(
            c.policy.latency,
            Some(LatencyTarget::new(Duration::from_millis(10)))
        );
    }

    #[test]
    fn criticality_config_errors() {
        let case = |text: &str, line: usize, field: &str, says: &str| {
            let e = err(text);
            assert_eq!((e.line, e.field.as_str()), (line, field), "{e}");
            assert!(e.message.contains(says), "{e}");
        };
        let k = "[policy]\nkind = \"criticality\"\n";
        case(k, 2, "policy.latency_target", "needs latency_target");
        let t = format!("{k}latency_target = \"2ms\"\n");
        case(
            &format!("{k}latency_target = \"0ms\"\n"),
            3,
            "policy.latency_target",
            "greater than 0",
        );
        case(
            &format!("{t}percentile = 100\n"),
            4,
            "policy.percentile",
            "between 0 and 100",
        );
        case(
            &format!("{t}max_depth = 0\n"),
            4,
            "policy.max_depth",
            "between 1 and 4194303",
        );
        // More than a priority object takes: every update would be refused
        // by the stages.
        case(
            &format!("{t}max_depth = 5000000\n"),
            4,
            "policy.max_depth",
            "between 1 and 4194303 (the most a priority object takes), got 5000000",
        );
        case(
            &format!("{t}busy_depth = 5\n"),
            4,
            "policy.busy_depth",
            "at most max_depth (4)",
        );
        case(
            &format!("{t}min_rate = \"10 iops\"\n"),
            4,
            "policy.min_rate",
            "byte rate",
        );
        case(
            &format!("{t}min_depth = 5\n"),
            4,
            "policy.min_depth",
            "between 1 and max_depth (4)",
        );
        case(
            &format!("{t}decrease = 1.0\n"),
            4,
            "policy.decrease",
            "between 0 and 1",
        );
        case(&format!("{t}max_depth = -1\n"), 4, "policy.max_depth", "");
        // Fields of other kinds, and the criticality fields elsewhere.
        case(
            &format!("{t}max_bandwidth = \"1GiB/s\"\n"),
            4,
            "policy.max_bandwidth",
            "not used by kind criticality",
        );
        case(
            &format!("{t}[[policy.group]]\nname = \"a\"\n"),
            4,
            "policy.group[0]",
            "not used by kind criticality",
        );
        case(
            "[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nlatency_target = \"2ms\"\n",
            4,
            "policy.latency_target",
            "only by criticality",
        );
        case(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nmax_depth = 2\n",
            4,
            "policy.max_depth",
            "only by criticality",
        );
        case(
            "[policy]\nkind = \"critical\"\n",
            2,
            "policy.kind",
            "criticality",
        );
    }

    #[test]
    fn silk_config_errors() {
        // Missing kvs_bandwidth: points at the kind.
        let e = err("[policy]\nkind = \"silk\"\nmin_bandwidth = \"5MiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "policy.kvs_bandwidth"),
            "{e}"
        );
        assert!(e.message.contains("needs kvs_bandwidth"), "{e}");
        // minB ≥ KVSB.
        let e = err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"100MiB/s\"\nmin_bandwidth = \"100MiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.min_bandwidth"),
            "{e}"
        );
        assert!(e.message.contains("less than kvs_bandwidth"), "{e}");
        // KVSB not above the default minB.
        let e = err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"8MiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (3, "policy.kvs_bandwidth"),
            "{e}"
        );
        assert!(
            e.message.contains("(10.0 MiB/s)") && e.message.contains("(8.0 MiB/s)"),
            "{e}"
        );
        // Bad rates.
        let e = err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"100 iops\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (3, "policy.kvs_bandwidth"),
            "{e}"
        );
        let e = err(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nmin_bandwidth = \"0B/s\"\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.min_bandwidth"),
            "{e}"
        );
        // Unknown field.
        let e =
            err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nminimum = \"1MiB/s\"\n");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("minimum"), "{e}");
        // Fields of other kinds.
        let e = err(
            "[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nmax_bandwidth = \"1GiB/s\"\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.max_bandwidth"),
            "{e}"
        );
        let e = err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nchannel = \"read\"\n");
        assert_eq!((e.line, e.field.as_str()), (4, "policy.channel"), "{e}");
        let e = err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\nmatch = { request_context = \"flush\" }\n");
        assert_eq!((e.line, e.field.as_str()), (4, "policy.match"), "{e}");
        let e = err("[policy]\nkind = \"silk\"\nkvs_bandwidth = \"1GiB/s\"\n[[policy.group]]\nname = \"a\"\n");
        assert_eq!((e.line, e.field.as_str()), (4, "policy.group[0]"), "{e}");
        // Silk's fields in other kinds.
        let e = err("[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\nkvs_bandwidth = \"1GiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (4, "policy.kvs_bandwidth"),
            "{e}"
        );
        let e = err("[policy]\nmin_bandwidth = \"1MiB/s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "policy.min_bandwidth"),
            "{e}"
        );
        // The unknown-kind message lists silk.
        let e = err("[policy]\nkind = \"fastest\"\n");
        assert!(e.message.contains("silk"), "{e}");
    }

    #[test]
    fn example_files_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/paiod");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let c = PaiodConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
                c.policy.build();
                n += 1;
            }
        }
        assert!(n >= 3, "{n} example files in {}", dir.display());
    }

    /// Each option silk.toml shows commented out works when uncommented
    /// (read_priority in place of read_split, as its comment says).
    #[test]
    fn silk_example_options_parse_when_uncommented() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/paiod/silk.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        for option in ["read_priority", "write_priority", "read_latency_target"] {
            let mut found = false;
            let edited: String = (text.lines())
                .map(|l| {
                    if l.starts_with(&format!("# {option} = ")) {
                        found = true;
                        format!("{}\n", &l[2..])
                    } else if option == "read_priority" && l.starts_with("read_split") {
                        format!("# {l}\n")
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            assert!(found, "no commented `{option}` in {}", path.display());
            let c = parse(&edited).unwrap_or_else(|e| panic!("{option}: {e}"));
            c.policy.build();
            let set = match option {
                "read_priority" => c.policy.read_priority.is_some() && c.policy.read_split == 0,
                "write_priority" => c.policy.write_priority.is_some(),
                _ => c.policy.read_latency_target.is_some(),
            };
            assert!(set, "{option} not in effect");
        }
    }

    #[test]
    fn the_cluster_table_is_read_and_checked() {
        let base = "[policy]\nkind = \"max_min\"\nmax_bandwidth = \"1GiB/s\"\n";
        let c = parse(&format!(
            "{base}[cluster]\nendpoints = [\"http://127.0.0.1:2379\"]\nname = \"c1\"\nnode = \"n1\"\nlease = \"3s\"\nperiod = \"500ms\"\n"
        ))
        .unwrap();
        assert_eq!(
            c.cluster,
            Some(ClusterConfig {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                name: "c1".into(),
                node: "n1".into(),
                lease: Duration::from_secs(3),
                period: Duration::from_millis(500),
            })
        );
        let d = parse(&format!(
            "{base}[cluster]\nendpoints = [\"http://e:2379\"]\n"
        ))
        .unwrap();
        let d = d.cluster.unwrap();
        assert_eq!(
            (d.name.as_str(), d.lease, d.period),
            ("paio", cluster::DEFAULT_LEASE, cluster::DEFAULT_PERIOD)
        );
        assert!(parse("").unwrap().cluster.is_none());
        let cases = [
            (
                "[cluster]\nendpoints = [\"http://e:1\"]\n",
                "cluster",
                "must be max_min or proportional, not static",
            ),
            (
                &format!("{base}[cluster]\nname = \"x\"\n") as &str,
                "cluster.endpoints",
                "missing field `endpoints`",
            ),
            (
                &format!("{base}[cluster]\nendpoints = []\n"),
                "cluster.endpoints",
                "at least one",
            ),
            (
                &format!("{base}[cluster]\nendpoints = [\"https://e:2379\"]\n"),
                "cluster.endpoints",
                "TLS",
            ),
            (
                &format!("{base}[cluster]\nendpoints = [\"http://e:1\"]\nnode = \"a b\"\n"),
                "cluster.node",
                "' '",
            ),
            (
                &format!("{base}[cluster]\nendpoints = [\"http://e:1\"]\nlease = \"1500ms\"\n"),
                "cluster.lease",
                "whole seconds",
            ),
            (
                &format!("{base}[cluster]\nendpoints = [\"http://e:1\"]\nperiod = \"0s\"\n"),
                "cluster.period",
                "greater than 0",
            ),
            (
                &format!("{base}[cluster]\nendpoints = [\"http://e:1\"]\nperiod = \"5ns\"\n"),
                "cluster.period",
                "at least 100ms",
            ),
            (
                &format!("{base}[cluster]\nendpoints = [\"http://e:1\"]\nleader = true\n"),
                "cluster.leader",
                "unknown field",
            ),
        ];
        for (text, field, message) in cases {
            let e = err(text);
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(message), "{e}");
        }
    }

    #[test]
    fn the_cluster_guide_examples_parse() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cluster.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut blocks = 0;
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if l == "```toml" {
                let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
                let c = PaiodConfig::parse(&block.join("\n"), "docs/cluster.md")
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(c.cluster.is_some());
                blocks += 1;
            }
        }
        assert!(blocks >= 1, "no toml block in docs/cluster.md");
    }

    #[test]
    fn from_file_reports_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = PaiodConfig::from_file(&dir.path().join("nope.toml")).unwrap_err();
        assert!(e.message.contains("cannot read"), "{e}");
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "period = \"1s\"\n").unwrap();
        assert_eq!(
            PaiodConfig::from_file(&p).unwrap().period,
            Duration::from_secs(1)
        );
        // Read through the bound, not by the length the metadata gives: an
        // endless device says 0 bytes.
        let e = PaiodConfig::from_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.message, "more than the 1048576 bytes allowed", "{e}");
    }
}
