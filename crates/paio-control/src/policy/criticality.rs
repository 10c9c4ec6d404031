//! A latency target for critical I/O (kind `criticality`), like cgroup
//! `io.latency`: when critical requests miss it, background work is cut
//! multiplicatively; while they meet it, it is given back additively.
//!
//! **Signal.** Every stage reports its critical requests' call latencies
//! as a cumulative, mergeable histogram
//! ([`paio::StageStats::critical_latency`]). The policy takes each stage's
//! growth since the previous period (a stage's first report is only a
//! baseline), merges them over all stages for one evaluation `window` and
//! takes the `percentile` (within a histogram bucket, 12.5 %). A window with no critical request counts as met; one
//! with fewer than [`MIN_SAMPLES`] critical requests is extended until it
//! has them (a percentile of three requests is noise).
//!
//! **Actuator.** Every priority object of every registered stage
//! ([`paio::object::Priority`]): the policy owns their `depth`,
//! `busy_depth` and `rate` (their other settings stay as the stage
//! configured them). It keeps one state for the machine:
//!
//! - `depth`, from `max_depth` down to `min_depth` (default 1): the
//!   non-critical requests each object lets in flight while nothing
//!   critical runs, which is the queue a critical request finds when it
//!   arrives; each object's `busy_depth` is `min(busy_depth, depth)`;
//! - `rate`, unlimited or at least `min_rate`: the non-critical bytes per
//!   second of all objects together, split among them by measured demand
//!   ([`common::split_by_demand`]).
//!
//! After a window that **missed** the target, depth is halved (never below
//! `min_depth`); once depth is `min_depth`, the rate is multiplied by
//! `decrease` instead (default ½; the first cut starts from the
//! background's rate measured over the window). After a window that
//! **met** it, the rate grows by a tenth of the rate measured at the first
//! cut and is lifted when it reaches it; once unlimited, depth grows by 1
//! up to `max_depth`. The depth is cut first because it shortens the queue
//! a critical request finds at once; the rate last because it costs
//! throughput all the time. Cutting the depth also lowers `busy_depth`,
//! which bounds the background while critical I/O runs: `min_depth` keeps
//! it where the background's pieces in flight matter more (measured in
//! docs/performance.md, "A 3 ms target beside the others").
//!
//! Stages keep the last configuration they were sent when paiod goes away.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use paio::object::PriorityConfig;
use paio::stats::HistogramSnapshot;
use paio::units::{parse_duration, Rate};
use paio::{ObjectConfig, Rule};

use super::common::{self, StageDemand};
use super::{ControlPolicy, GroupTarget, PolicyError, StageId, StageView};

/// Fewest critical requests a window needs to be judged.
pub const MIN_SAMPLES: u64 = 20;

/// Default `percentile`.
pub const DEFAULT_PERCENTILE: f64 = 99.0;

/// Default evaluation `window`.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(500);

/// Default `max_depth`, the priority object's own default depth.
pub const DEFAULT_MAX_DEPTH: u32 = 4;

/// Default `busy_depth`, RCP's one request.
pub const DEFAULT_BUSY_DEPTH: u32 = 1;

/// Default `min_rate`: 1 MiB/s.
pub const DEFAULT_MIN_RATE: f64 = 1024.0 * 1024.0;

/// The additive increase of the rate per met window, as a fraction of the
/// background rate measured at the first cut.
pub const RATE_STEP: f64 = 0.1;

/// Default `decrease`: a missed window halves the rate.
pub const DEFAULT_DECREASE: f64 = 0.5;

/// Default `min_depth`: the depth may be cut to one request.
pub const DEFAULT_MIN_DEPTH: u32 = 1;

/// The `criticality` policy's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyTarget {
    /// The latency critical requests should meet at `percentile`.
    pub target: Duration,
    /// The percentile judged, in (0, 100).
    pub percentile: f64,
    /// How long one evaluation covers (at least one control period in
    /// effect: it is judged at the first period that ends after it).
    pub window: Duration,
    /// The non-critical depth when critical requests meet the target.
    pub max_depth: u32,
    /// The lowest depth a miss cuts to before it cuts the rate, in
    /// [1, `max_depth`]. Higher keeps more pieces of the background in
    /// flight (and `busy_depth` up to it) and leaves the cuts to the rate;
    /// lower shortens the queue a critical request finds first.
    pub min_depth: u32,
    /// The objects' `busy_depth`, never above the current depth.
    pub busy_depth: u32,
    /// The lowest total non-critical rate, bytes/s.
    pub min_rate: f64,
    /// What a missed window multiplies the rate by, in (0, 1). Higher keeps
    /// the rate higher on average (it saws between `decrease` × and 1 × the
    /// rate where the target starts to be missed) at the cost of more
    /// missed windows, each cut smaller.
    pub decrease: f64,
}

impl LatencyTarget {
    /// Settings with `target` and every other field at its default.
    pub fn new(target: Duration) -> Self {
        Self {
            target,
            percentile: DEFAULT_PERCENTILE,
            window: DEFAULT_WINDOW,
            max_depth: DEFAULT_MAX_DEPTH,
            min_depth: DEFAULT_MIN_DEPTH,
            busy_depth: DEFAULT_BUSY_DEPTH,
            min_rate: DEFAULT_MIN_RATE,
            decrease: DEFAULT_DECREASE,
        }
    }

    /// Checks every field, saying which is wrong and why.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.target.is_zero() {
            return Err(PolicyError::new("latency_target must be more than 0"));
        }
        if !(self.percentile > 0.0 && self.percentile < 100.0) {
            return Err(PolicyError::new(format!(
                "percentile must be between 0 and 100 (exclusive), got {}",
                self.percentile
            )));
        }
        if self.window.is_zero() {
            return Err(PolicyError::new("window must be more than 0"));
        }
        if self.max_depth == 0 || self.max_depth > paio::object::MAX_DEPTH {
            return Err(PolicyError::new(format!(
                "max_depth must be between 1 and {} (the most a priority object takes), got {}",
                paio::object::MAX_DEPTH,
                self.max_depth
            )));
        }
        if self.min_depth == 0 || self.min_depth > self.max_depth {
            return Err(PolicyError::new(format!(
                "min_depth must be between 1 and max_depth ({}), got {}",
                self.max_depth, self.min_depth
            )));
        }
        if self.busy_depth > self.max_depth {
            return Err(PolicyError::new(format!(
                "busy_depth ({}) must be at most max_depth ({})",
                self.busy_depth, self.max_depth
            )));
        }
        if !(self.min_rate.is_finite() && self.min_rate > 0.0) {
            return Err(PolicyError::new("min_rate must be a positive byte rate"));
        }
        if !(self.decrease > 0.0 && self.decrease < 1.0) {
            return Err(PolicyError::new(format!(
                "decrease must be between 0 and 1 (exclusive: the fraction of the rate a \
                 missed window keeps), got {}",
                self.decrease
            )));
        }
        Ok(())
    }
}

/// What the last judged window decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No window judged yet.
    None,
    /// Critical requests missed the target: background cut.
    Missed,
    /// They met it: background given back a step.
    Met,
    /// No critical request in the window: background given back a step.
    Idle,
}

/// The state of the latency control, for `paio status` and the metrics.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencyStatus {
    /// The target, ns.
    pub target_ns: u64,
    /// The percentile judged.
    pub percentile: f64,
    /// The measured percentile of the last judged window, ns (0: none).
    pub measured_ns: u64,
    /// Critical requests in the last judged window.
    pub samples: u64,
    /// Its verdict.
    pub verdict: Verdict,
    /// Current non-critical depth.
    pub depth: u32,
    /// Current busy depth.
    pub busy_depth: u32,
    /// Current total non-critical rate, bytes/s (`None`: unlimited).
    pub rate_bytes_per_sec: Option<f64>,
    /// Priority objects under control.
    pub objects: usize,
}

/// The `criticality` policy.
#[derive(Debug, Clone)]
pub struct CriticalityPolicy {
    settings: LatencyTarget,
    depth: u32,
    rate: Option<f64>,
    /// The background rate at the first cut: where the rate is lifted.
    reference: f64,
    window_start: Duration,
    window: HistogramSnapshot,
    /// Each stage's cumulative critical latencies as last seen.
    seen: BTreeMap<StageId, HistogramSnapshot>,
    /// Background bytes moved in the window, and its length so far.
    window_bytes: f64,
    window_secs: f64,
    /// The last judged window: (measured percentile, requests, verdict).
    judged: (u64, u64, Verdict),
    /// What the priority objects moved last period, bytes/s.
    achieved: f64,
    /// Priority objects and the stages holding them, last period.
    objects: usize,
    stages: usize,
    /// Whether the warning that there is nothing to control was given for
    /// the current stretch of periods without priority objects.
    said_idle: bool,
    /// The registered stages whose priority objects' own depths were
    /// compared with the policy's, at the first period they were seen.
    compared: BTreeSet<StageId>,
}

/// One priority object of one stage.
struct Controlled<'a> {
    stage: StageId,
    stage_name: &'a str,
    channel: &'a str,
    object: &'a str,
    config: &'a PriorityConfig,
    demand: StageDemand,
}

impl CriticalityPolicy {
    /// A policy with `settings` (checked with [`LatencyTarget::validate`]).
    pub fn new(settings: LatencyTarget) -> Result<Self, PolicyError> {
        settings.validate()?;
        Ok(Self {
            depth: settings.max_depth,
            settings,
            rate: None,
            reference: 0.0,
            window_start: Duration::ZERO,
            window: HistogramSnapshot::default(),
            seen: BTreeMap::new(),
            window_bytes: 0.0,
            window_secs: 0.0,
            judged: (0, 0, Verdict::None),
            achieved: 0.0,
            objects: 0,
            stages: 0,
            said_idle: false,
            compared: BTreeSet::new(),
        })
    }

    /// The control's state as of the last period.
    pub fn status(&self) -> LatencyStatus {
        let (measured_ns, samples, verdict) = self.judged;
        LatencyStatus {
            target_ns: self.settings.target.as_nanos() as u64,
            percentile: self.settings.percentile,
            measured_ns,
            samples,
            verdict,
            depth: self.depth,
            busy_depth: self.busy_depth(),
            rate_bytes_per_sec: self.rate,
            objects: self.objects,
        }
    }

    fn busy_depth(&self) -> u32 {
        self.settings.busy_depth.min(self.depth)
    }

    /// Judges the window that just ended (`background` bytes/s over it).
    fn judge(&mut self, background: f64) {
        let samples = self.window.waited();
        let measured = self
            .window
            .quantile(self.settings.percentile / 100.0, samples);
        let verdict = if samples == 0 {
            Verdict::Idle
        } else if measured > self.settings.target.as_nanos() as u64 {
            Verdict::Missed
        } else {
            Verdict::Met
        };
        let floor = self.settings.min_rate;
        let before = (self.depth, self.rate);
        match verdict {
            Verdict::Missed if self.depth > self.settings.min_depth => {
                self.depth = (self.depth / 2).max(self.settings.min_depth)
            }
            Verdict::Missed => {
                let from = match self.rate {
                    Some(r) => r,
                    None => {
                        self.reference = background.max(2.0 * floor);
                        self.reference
                    }
                };
                self.rate = Some((from * self.settings.decrease).max(floor));
            }
            Verdict::Met | Verdict::Idle => match self.rate {
                Some(r) => {
                    let next = r + RATE_STEP * self.reference;
                    self.rate = (next < self.reference).then_some(next);
                }
                None => self.depth = (self.depth + 1).min(self.settings.max_depth),
            },
            Verdict::None => {}
        }
        self.judged = (measured, samples, verdict);
        if (self.depth, self.rate) != before {
            let rate = |r: Option<f64>| {
                r.map_or_else(
                    || "unlimited".to_string(),
                    |r| format!("{:.1} MiB/s", r / (1024.0 * 1024.0)),
                )
            };
            tracing::info!(
                "critical p{} {:.3} ms over {samples} requests (target {:.3} ms): background \
                 depth {} -> {}, rate {} -> {}",
                self.settings.percentile,
                measured as f64 / 1e6,
                self.settings.target.as_secs_f64() * 1e3,
                before.0,
                self.depth,
                rate(before.1),
                rate(self.rate)
            );
        }
    }

    /// Warns once per object, at its stage's first period (before this
    /// policy's rules change it), if the depths the stage configured differ
    /// from the ones this policy will give it: the policy owns them, and a
    /// stage's `busy_depth = 3` silently becoming 1 would change what its
    /// background can move.
    fn compare_own_depths(&mut self, stages: &[StageView], objects: &[Controlled<'_>]) {
        let (max, busy) = (self.settings.max_depth, self.settings.busy_depth);
        for o in objects {
            if !self.compared.contains(&o.stage)
                && (o.config.depth, o.config.busy_depth) != (max, busy)
            {
                tracing::warn!(
                    "stage {} ({}) object {}/{} has depth {} and busy_depth {}: the \
                     criticality policy replaces them with max_depth {max} and busy_depth \
                     {busy} (set max_depth and busy_depth in paiod's [policy] to keep the \
                     stage's)",
                    o.stage,
                    o.stage_name,
                    o.channel,
                    o.object,
                    o.config.depth,
                    o.config.busy_depth
                );
            }
        }
        self.compared = stages.iter().map(|s| s.id).collect();
    }

    /// The configuration `c` should have now, given its share of the rate.
    fn wanted(&self, c: &PriorityConfig, share: Option<f64>) -> PriorityConfig {
        PriorityConfig {
            depth: self.depth,
            busy_depth: self.busy_depth(),
            rate: share.map(|r| Rate::bytes_per_sec(common::to_rate(r))),
            ..c.clone()
        }
    }
}

/// Whether `new` differs from `old` beyond the rate deadband.
fn changed(old: &PriorityConfig, new: &PriorityConfig) -> bool {
    if old.depth != new.depth || old.busy_depth != new.busy_depth {
        return true;
    }
    match (old.rate, new.rate) {
        (None, None) => false,
        (Some(a), Some(b)) if a.unit == b.unit => {
            !common::within_deadband(a.per_second as f64, b.per_second as f64)
        }
        _ => true,
    }
}

fn controlled(stages: &[StageView]) -> Vec<Controlled<'_>> {
    let mut out = Vec::new();
    for s in stages {
        for ch in &s.info.channels {
            for o in &ch.objects {
                let Some(ObjectConfig::Priority(config)) = &o.config else {
                    continue;
                };
                let counts = s.stats.as_ref().and_then(|st| {
                    st.channels
                        .iter()
                        .find(|c| c.name == ch.name)?
                        .objects
                        .iter()
                        .find(|x| x.name == o.name)
                        .map(|x| &x.counts)
                });
                out.push(Controlled {
                    stage: s.id,
                    stage_name: &s.info.identity.name,
                    channel: &ch.name,
                    object: &o.name,
                    config,
                    demand: StageDemand::of(counts),
                });
            }
        }
    }
    out
}

impl ControlPolicy for CriticalityPolicy {
    fn kind(&self) -> &'static str {
        "criticality"
    }

    /// Nothing: the policy controls the priority objects stages have, and
    /// sends a new stage the current settings at the next period.
    fn setup(&self, _stage: &StageView) -> Vec<Rule> {
        Vec::new()
    }

    fn period(&mut self, now: Duration, stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)> {
        let objects = controlled(stages);
        self.compare_own_depths(stages, &objects);
        let background: f64 = objects.iter().filter_map(|o| o.demand.achieved).sum();
        // Each stage's new critical latencies: its cumulative histogram less
        // the one seen last period (a stage seen for the first time only
        // sets the baseline: its history may predate this paiod).
        let mut period_secs = 0.0f64;
        let mut seen = BTreeMap::new();
        for s in stages {
            let Some(st) = &s.stats else { continue };
            let mut now_h = HistogramSnapshot::default();
            for &(ns, n) in &st.critical_latency {
                now_h.add(ns, n);
            }
            if let Some(before) = self.seen.get(&s.id) {
                self.window.merge(&now_h.since(before));
            }
            seen.insert(s.id, now_h);
            period_secs = period_secs.max(st.interval_ns as f64 / 1e9);
        }
        self.seen = seen;
        self.window_bytes += background * period_secs;
        self.window_secs += period_secs;
        let samples = self.window.waited();
        if now.saturating_sub(self.window_start) >= self.settings.window
            && (samples == 0 || samples >= MIN_SAMPLES)
        {
            let measured_rate = if self.window_secs > 0.0 {
                self.window_bytes / self.window_secs
            } else {
                background
            };
            self.judge(measured_rate);
            self.window = HistogramSnapshot::default();
            self.window_start = now;
            self.window_bytes = 0.0;
            self.window_secs = 0.0;
        }
        let shares: Vec<Option<f64>> = match self.rate {
            None => vec![None; objects.len()],
            Some(total) => {
                let demands: Vec<StageDemand> = objects.iter().map(|o| o.demand).collect();
                common::split_by_demand(total, &demands)
                    .into_iter()
                    .map(Some)
                    .collect()
            }
        };
        let mut out: BTreeMap<StageId, Vec<Rule>> = BTreeMap::new();
        for (o, share) in objects.iter().zip(shares) {
            let want = self.wanted(o.config, share);
            if changed(o.config, &want) {
                out.entry(o.stage).or_default().push(Rule::Configure {
                    channel: o.channel.to_string(),
                    object: o.object.to_string(),
                    config: ObjectConfig::Priority(want),
                });
            }
        }
        // Nothing to act on is said once, when it starts: the target cannot
        // be held without priority objects in the background's stages.
        let idle = objects.is_empty() && !stages.is_empty();
        if idle && !self.said_idle {
            tracing::warn!(
                "{} stage(s) registered and none has a priority object: the latency target \
                 controls nothing (give the background a `kind = \"priority\"` object, e.g. \
                 paio run --policy policies/background.toml)",
                stages.len()
            );
        }
        self.said_idle = idle;
        self.achieved = background;
        self.objects = objects.len();
        self.stages = {
            let mut ids: Vec<StageId> = objects.iter().map(|o| o.stage).collect();
            ids.dedup();
            ids.len()
        };
        out.into_iter().collect()
    }

    /// `set * KEY=VALUE` with KEY one of `latency_target`, `percentile`,
    /// `window`, `max_depth`, `min_depth`, `busy_depth`, `min_rate`,
    /// `decrease`. A lower `max_depth` or a higher `min_depth` takes effect
    /// at once; a higher `max_depth` is reached by additive increase.
    fn set(&mut self, group: &str, key: &str, value: &str) -> Result<(), PolicyError> {
        if group != "*" {
            return Err(PolicyError::new(format!(
                "the criticality policy has no groups: use group `*`, not {group:?}"
            )));
        }
        let mut s = self.settings.clone();
        let bad = |e: String| PolicyError::new(format!("{key}: {e}"));
        let count = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| bad(format!("expected a whole number, got {v:?}")))
        };
        match key {
            "latency_target" => s.target = parse_duration(value).map_err(|e| bad(e.to_string()))?,
            "window" => s.window = parse_duration(value).map_err(|e| bad(e.to_string()))?,
            "percentile" => {
                s.percentile = value
                    .parse()
                    .map_err(|_| bad(format!("expected a number such as 99.9, got {value:?}")))?
            }
            "max_depth" => s.max_depth = count(value)?,
            "min_depth" => s.min_depth = count(value)?,
            "busy_depth" => s.busy_depth = count(value)?,
            "min_rate" => {
                s.min_rate = common::parse_byte_rate(value).map_err(|e| bad(e.message))?
            }
            "decrease" => {
                s.decrease = value
                    .parse()
                    .map_err(|_| bad(format!("expected a number such as 0.75, got {value:?}")))?
            }
            other => {
                return Err(PolicyError::new(format!(
                    "unknown key {other:?} (expected latency_target, percentile, window, \
                     max_depth, min_depth, busy_depth, min_rate or decrease)"
                )))
            }
        }
        s.validate()?;
        self.settings = s;
        self.depth = self
            .depth
            .clamp(self.settings.min_depth, self.settings.max_depth);
        if let Some(r) = self.rate {
            self.rate = Some(r.max(self.settings.min_rate));
        }
        Ok(())
    }

    /// One entry, `background`: the total non-critical rate (target 0 while
    /// unlimited) and what the priority objects achieved.
    fn targets(&self) -> Vec<GroupTarget> {
        vec![GroupTarget {
            group: "background".into(),
            demand_bytes_per_sec: self.reference,
            target_bytes_per_sec: self.rate.unwrap_or(0.0),
            achieved_bytes_per_sec: self.achieved,
            stages: self.stages,
            hungry: false,
        }]
    }

    fn latency(&self) -> Option<LatencyStatus> {
        Some(self.status())
    }

    /// It configures priority objects only, never a DRL.
    fn controls(&self, _stage: &StageView, _channel: &str, _object: &str) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::common::testutil::info;
    use paio::stage::{ChannelInfo, ObjectInfo};
    use paio::stats::{ChannelStats, Counts, ObjectStats};
    use paio::StageStats;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const MIB: f64 = 1024.0 * 1024.0;
    const PERIOD: Duration = Duration::from_millis(100);

    /// A stage with one channel `bg` holding a priority object `yield`
    /// (and a noop the policy must leave alone).
    fn stage(id: StageId) -> StageView {
        let mut i = info(&format!("s{id}"), &[], false);
        i.channels = vec![ChannelInfo {
            name: "bg".into(),
            objects: vec![
                ObjectInfo {
                    name: "yield".into(),
                    kind: "priority".into(),
                    config: Some(ObjectConfig::Priority(PriorityConfig::default())),
                },
                ObjectInfo {
                    name: "pass".into(),
                    kind: "noop".into(),
                    config: Some(ObjectConfig::Noop),
                },
            ],
            object_rules: vec![],
            default_object: "yield".into(),
        }];
        StageView {
            id,
            info: i,
            stats: None,
            proc_io: None,
        }
    }

    /// One period's statistics: the priority object moved `bps`, and the
    /// stage completed `n` critical requests of `latency_ns` each.
    fn report(v: &mut StageView, bps: f64, n: u64, latency_ns: u64) {
        // Stage histograms are cumulative: add to what the stage reported.
        let mut cumulative = v
            .stats
            .take()
            .map(|s| s.critical_latency)
            .unwrap_or_default();
        if n > 0 {
            match cumulative.iter_mut().find(|(ns, _)| *ns == latency_ns) {
                Some(b) => b.1 += n,
                None => {
                    cumulative.push((latency_ns, n));
                    cumulative.sort_unstable();
                }
            }
        }
        let counts = Counts {
            bytes_per_sec: bps,
            ..Default::default()
        };
        v.stats = Some(StageStats {
            stage: v.info.identity.name.clone(),
            interval_ns: PERIOD.as_nanos() as u64,
            channels: vec![ChannelStats {
                name: "bg".into(),
                counts: counts.clone(),
                objects: vec![ObjectStats {
                    name: "yield".into(),
                    kind: "priority".into(),
                    counts,
                }],
                histograms: None,
            }],
            critical_latency: cumulative,
            ..Default::default()
        });
    }

    /// A policy and `n` stages after their first period, at time 0.
    fn started(mut p: CriticalityPolicy, n: u64) -> (CriticalityPolicy, Vec<StageView>, Duration) {
        let mut views: Vec<StageView> = (1..=n).map(stage).collect();
        prime(&mut p, &mut views);
        (p, views, Duration::ZERO)
    }

    /// The first period: every stage's baseline, nothing judged.
    fn prime(p: &mut CriticalityPolicy, views: &mut [StageView]) {
        for v in views.iter_mut() {
            report(v, 0.0, 0, 0);
        }
        let rules = p.period(Duration::ZERO, views);
        apply(views, rules);
        assert_eq!(p.status().verdict, Verdict::None);
    }

    /// Applies the rules to the views as paiod records them.
    fn apply(views: &mut [StageView], rules: Vec<(StageId, Vec<Rule>)>) -> usize {
        let mut n = 0;
        for (id, batch) in rules {
            let v = views.iter_mut().find(|v| v.id == id).unwrap();
            for r in batch {
                let Rule::Configure {
                    channel,
                    object,
                    config,
                } = r
                else {
                    panic!("unexpected rule {r:?}");
                };
                assert_eq!((channel.as_str(), object.as_str()), ("bg", "yield"));
                v.info.channels[0].objects[0].config = Some(config);
                n += 1;
            }
        }
        n
    }

    fn config(v: &StageView) -> PriorityConfig {
        match &v.info.channels[0].objects[0].config {
            Some(ObjectConfig::Priority(c)) => c.clone(),
            other => panic!("{other:?}"),
        }
    }

    fn rate(v: &StageView) -> Option<u64> {
        config(v).rate.map(|r| r.per_second)
    }

    /// Runs periods until one window is judged (5 periods of 100 ms).
    fn window(
        p: &mut CriticalityPolicy,
        now: &mut Duration,
        views: &mut [StageView],
        bps: f64,
        latency_ns: u64,
    ) {
        for _ in 0..5 {
            *now += PERIOD;
            for v in views.iter_mut() {
                report(v, bps, 10, latency_ns);
            }
            let rules = p.period(*now, views);
            apply(views, rules);
        }
    }

    fn policy() -> CriticalityPolicy {
        CriticalityPolicy::new(LatencyTarget::new(Duration::from_millis(2))).unwrap()
    }

    #[test]
    fn a_missed_target_halves_depth_then_the_rate_and_a_met_one_gives_back_stepwise() {
        let (mut p, mut views, mut now) = started(policy(), 1);
        // Met: nothing changes for the default object (depth 4, busy 1).
        window(&mut p, &mut now, &mut views, 100.0 * MIB, MS);
        assert_eq!(p.status().verdict, Verdict::Met);
        assert_eq!((config(&views[0]).depth, rate(&views[0])), (4, None));
        // Missed: depth 4 -> 2 -> 1, busy_depth follows.
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        assert_eq!(p.status().verdict, Verdict::Missed);
        assert!(p.status().measured_ns >= 5 * MS);
        assert_eq!(
            (config(&views[0]).depth, config(&views[0]).busy_depth),
            (2, 1)
        );
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        assert_eq!(config(&views[0]).depth, 1);
        assert_eq!(rate(&views[0]), None, "depth first");
        // Then the rate: half of what the background moved in the window.
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        assert_eq!(rate(&views[0]), Some((50.0 * MIB) as u64));
        window(&mut p, &mut now, &mut views, 50.0 * MIB, 5 * MS);
        assert_eq!(rate(&views[0]), Some((25.0 * MIB) as u64));
        // Never below min_rate.
        for _ in 0..10 {
            window(&mut p, &mut now, &mut views, MIB, 5 * MS);
        }
        assert_eq!(rate(&views[0]), Some(MIB as u64));
        assert_eq!(p.status().rate_bytes_per_sec, Some(MIB));
        // Met: +10 % of the reference (100 MiB/s) per window until it is
        // reached, then lifted, then depth +1 per window up to max_depth.
        window(&mut p, &mut now, &mut views, MIB, MS);
        assert_eq!(rate(&views[0]), Some((11.0 * MIB) as u64));
        for _ in 0..9 {
            window(&mut p, &mut now, &mut views, MIB, MS);
        }
        assert_eq!(rate(&views[0]), None, "lifted at the reference");
        assert_eq!(config(&views[0]).depth, 1);
        // Idle windows (no critical request) count as met.
        for depth in 2..=4 {
            for _ in 0..5 {
                now += PERIOD;
                report(&mut views[0], MIB, 0, 0);
                let rules = p.period(now, &views);
                apply(&mut views, rules);
            }
            assert_eq!(p.status().verdict, Verdict::Idle);
            assert_eq!(config(&views[0]).depth, depth);
        }
        window(&mut p, &mut now, &mut views, MIB, 0);
        assert_eq!(config(&views[0]).depth, 4, "never above max_depth");
        // The object's other settings were never touched.
        let c = config(&views[0]);
        assert_eq!(
            (c.window, c.starvation, c.split),
            (
                PriorityConfig::default().window,
                PriorityConfig::default().starvation,
                PriorityConfig::default().split
            )
        );
    }

    #[test]
    fn decrease_sets_the_cut_of_the_rate_not_of_the_depth() {
        let mut t = LatencyTarget::new(Duration::from_millis(2));
        t.decrease = 0.75;
        let (mut p, mut views, mut now) = started(CriticalityPolicy::new(t).unwrap(), 1);
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        assert_eq!(config(&views[0]).depth, 2, "depth is still halved");
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        assert_eq!(rate(&views[0]), Some((75.0 * MIB) as u64));
        window(&mut p, &mut now, &mut views, 75.0 * MIB, 5 * MS);
        assert_eq!(rate(&views[0]), Some((0.75 * 75.0 * MIB) as u64));
        // Given back by the same step as with the default.
        window(&mut p, &mut now, &mut views, 50.0 * MIB, MS);
        assert_eq!(rate(&views[0]), Some(((0.75 * 75.0 + 10.0) * MIB) as u64));
    }

    #[test]
    fn min_depth_leaves_the_cuts_below_it_to_the_rate() {
        let mut t = LatencyTarget::new(Duration::from_millis(2));
        t.busy_depth = 3;
        t.min_depth = 3;
        let (mut p, mut views, mut now) = started(CriticalityPolicy::new(t).unwrap(), 1);
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        let c = config(&views[0]);
        assert_eq!(
            (c.depth, c.busy_depth, c.rate),
            (3, 3, None),
            "4 / 2 = 2, held at 3"
        );
        window(&mut p, &mut now, &mut views, 100.0 * MIB, 5 * MS);
        assert_eq!(config(&views[0]).depth, 3);
        assert_eq!(rate(&views[0]), Some((50.0 * MIB) as u64), "then the rate");
        // Met: the rate comes back, then the depth up to max_depth.
        for _ in 0..5 {
            window(&mut p, &mut now, &mut views, 50.0 * MIB, MS);
        }
        assert_eq!(rate(&views[0]), None);
        window(&mut p, &mut now, &mut views, 50.0 * MIB, MS);
        assert_eq!(config(&views[0]).depth, 4);
        // Raising min_depth at run time lifts the depth at once.
        p.set("*", "min_depth", "4").unwrap();
        assert_eq!(p.status().depth, 4);
    }

    #[test]
    fn rules_go_out_only_on_change() {
        let (mut p, mut views, mut now) = started(policy(), 1);
        for _ in 0..5 {
            now += PERIOD;
            report(&mut views[0], MIB, 10, 5 * MS);
            let rules = p.period(now, &views);
            let n = apply(&mut views, rules);
            // Judged at the fifth period (500 ms): one configure, then none.
            assert_eq!(n, usize::from(now == 5 * PERIOD), "at {now:?}");
        }
    }

    #[test]
    fn the_window_waits_for_enough_critical_requests() {
        let (mut p, mut views, mut now) = started(policy(), 1);
        // 1 slow request per period: 20 are needed, so 20 periods.
        for i in 1..=20 {
            now += PERIOD;
            report(&mut views[0], MIB, 1, 50 * MS);
            let rules = p.period(now, &views);
            apply(&mut views, rules);
            let judged = p.status().verdict != Verdict::None;
            assert_eq!(judged, i == 20, "period {i}");
        }
        assert_eq!(p.status().samples, 20);
        assert_eq!(config(&views[0]).depth, 2);
    }

    #[test]
    fn history_before_the_first_report_and_repeated_reports_count_nothing() {
        let mut p = policy();
        let mut views = vec![stage(1)];
        // A stage that outlived a paiod restart: 1,000 slow requests of old.
        report(&mut views[0], MIB, 1000, 50 * MS);
        let mut now = Duration::ZERO;
        for _ in 0..5 {
            now += PERIOD;
            // The same cumulative report again (the stage did not answer).
            let rules = p.period(now, &views);
            apply(&mut views, rules);
        }
        assert_eq!(p.status().verdict, Verdict::Idle);
        assert_eq!(p.status().samples, 0);
        assert_eq!(config(&views[0]).depth, 4);
        // New requests count.
        window(&mut p, &mut now, &mut views, MIB, 50 * MS);
        assert_eq!(
            (p.status().verdict, p.status().samples),
            (Verdict::Missed, 50)
        );
    }

    #[test]
    fn the_percentile_is_over_every_stage_merged() {
        // 99 fast requests in one stage, 1 slow one in another: p99 is met,
        // p99.9 is not (the slow one is beyond the 99th rank).
        for (pct, depth) in [(99.0, 4), (99.9, 2)] {
            let mut t = LatencyTarget::new(Duration::from_millis(2));
            t.percentile = pct;
            let (mut p, mut views, mut now) = started(CriticalityPolicy::new(t).unwrap(), 2);
            for _ in 0..5 {
                now += PERIOD;
                report(&mut views[0], MIB, 0, 0);
                report(&mut views[1], MIB, 0, 0);
                if now == 5 * PERIOD {
                    report(&mut views[0], MIB, 99, MS / 2);
                    report(&mut views[1], MIB, 1, 20 * MS);
                }
                let rules = p.period(now, &views);
                apply(&mut views, rules);
            }
            assert_eq!(p.status().samples, 100);
            assert_eq!(config(&views[0]).depth, depth, "p{pct}");
            assert_eq!(config(&views[1]).depth, depth, "p{pct}");
        }
    }

    #[test]
    fn the_rate_is_split_by_demand_among_all_objects() {
        let mut t = LatencyTarget::new(Duration::from_millis(2));
        t.max_depth = 1;
        t.min_rate = 16.0 * MIB;
        let (mut p, mut views, mut now) = started(CriticalityPolicy::new(t).unwrap(), 2);
        // First window: depth is already 1, so the rate is cut, to half of
        // what both objects moved (80 MiB/s while they ran).
        for _ in 0..5 {
            now += PERIOD;
            report(&mut views[0], 70.0 * MIB, 10, 5 * MS);
            report(&mut views[1], 10.0 * MIB, 10, 5 * MS);
            let rules = p.period(now, &views);
            apply(&mut views, rules);
        }
        let (a, b) = (rate(&views[0]).unwrap(), rate(&views[1]).unwrap());
        // (The window also holds the idle priming period: 80 × 5/6 / 2.)
        let total = 80.0 * MIB * 5.0 / 6.0 / 2.0;
        assert!(((a + b) as f64 - total).abs() < 2.0, "{a} + {b}");
        // The light stage gets its demand with headroom, the heavy one the rest.
        let light = 10.0 * MIB * 1.25 + common::RATE_FLOOR;
        assert!((b as f64 - light).abs() < 2.0, "{b}");
    }

    #[test]
    fn set_changes_knobs_and_refuses_bad_ones() {
        let (mut p, mut views, mut now) = started(policy(), 1);
        p.set("*", "max_depth", "2").unwrap();
        p.set("*", "percentile", "99.9").unwrap();
        p.set("*", "window", "1s").unwrap();
        p.set("*", "min_rate", "8MiB/s").unwrap();
        p.set("*", "busy_depth", "0").unwrap();
        p.set("*", "decrease", "0.8").unwrap();
        assert_eq!(p.settings.decrease, 0.8);
        now += PERIOD;
        let rules = p.period(now, &views);
        apply(&mut views, rules);
        let c = config(&views[0]);
        assert_eq!((c.depth, c.busy_depth), (2, 0), "a lower max_depth at once");
        for (key, value, says) in [
            ("max_depth", "0", "between 1 and 4194303"),
            ("min_depth", "0", "between 1 and max_depth"),
            ("min_depth", "3", "between 1 and max_depth (2)"),
            ("busy_depth", "3", "at most max_depth"),
            ("percentile", "100", "between 0 and 100"),
            ("percentile", "high", "a number"),
            ("latency_target", "soon", "latency_target"),
            ("min_rate", "5 iops", "byte rate"),
            ("decrease", "0", "between 0 and 1"),
            ("decrease", "half", "a number"),
            ("depth", "2", "unknown key"),
        ] {
            let e = p.set("*", key, value).unwrap_err();
            assert!(e.message.contains(says), "{key}={value}: {e}");
        }
        let e = p.set("bg", "max_depth", "2").unwrap_err();
        assert!(e.message.contains("group `*`"), "{e}");
        assert_eq!(p.status().depth, 2, "a refused set changes nothing");
    }

    /// What `f` logs through `tracing`.
    fn logged(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Log(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Log {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        // tracing caches each callsite's interest for the whole process, and
        // while only one dispatcher exists it asks the registering thread's:
        // a sibling test with no subscriber that reaches a warning first
        // would cache "never" for it and blind this capture (seen once in
        // a parallel run; tokio-rs/tracing#3611). A second dispatcher, alive
        // for the whole test binary, makes every callsite's interest the
        // union of all live dispatchers'.
        static ANCHOR: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
        ANCHOR.get_or_init(|| {
            tracing::Dispatch::new(
                tracing_subscriber::fmt()
                    .with_writer(std::io::sink)
                    .finish(),
            )
        });
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[test]
    fn stages_without_priority_objects_are_warned_about_once() {
        let text = logged(|| {
            let mut p = policy();
            let mut plain = stage(1);
            plain.info.channels.clear();
            for i in 1..=3 {
                p.period(PERIOD * i, std::slice::from_ref(&plain));
            }
        });
        assert_eq!(
            text.matches("none has a priority object").count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn replacing_a_stages_own_depths_is_warned_about_once_per_registration() {
        let text = logged(|| {
            let mut p = policy();
            // Stage 1 has the policy's depths (4, 1); stage 2 asks for 3 in
            // flight while critical I/O runs.
            let same = stage(1);
            let mut own = stage(2);
            if let Some(ObjectConfig::Priority(c)) = &mut own.info.channels[0].objects[0].config {
                c.busy_depth = 3;
            }
            let mut views = vec![same, own];
            for i in 1..=3 {
                let rules = p.period(PERIOD * i, &views);
                apply(&mut views, rules);
            }
            assert_eq!(
                config(&views[1]).busy_depth,
                1,
                "the policy's, as documented"
            );
            // Registered again (a new id, its own settings again): said again.
            views[1].id = 3;
            if let Some(ObjectConfig::Priority(c)) =
                &mut views[1].info.channels[0].objects[0].config
            {
                c.busy_depth = 3;
            }
            p.period(PERIOD * 4, &views);
            p.period(PERIOD * 5, &views);
        });
        let said: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("replaces them"))
            .collect();
        assert_eq!(said.len(), 2, "{text}");
        assert!(
            said[0].contains("stage 2 (s2) object bg/yield has depth 4 and busy_depth 3")
                && said[0].contains("max_depth 4 and busy_depth 1"),
            "{text}"
        );
        assert!(said[1].contains("stage 3 (s2)"), "{text}");
    }

    proptest! {
        /// Whatever critical latencies arrive, depth stays in
        /// [min_depth, max_depth], busy_depth at most depth, and the rate is
        /// unlimited or at least min_rate; every object gets exactly that.
        #[test]
        fn control_stays_within_its_bounds(
            latencies in proptest::collection::vec((0u64..30, 0u64..5_000), 1..80),
            max_depth in 1u32..9,
            min_depth in 1u32..9,
            busy in 0u32..3,
            decrease in 0.05f64..0.95,
        ) {
            let mut t = LatencyTarget::new(Duration::from_millis(2));
            t.max_depth = max_depth;
            t.min_depth = min_depth.min(max_depth);
            t.busy_depth = busy.min(max_depth);
            t.decrease = decrease;
            t.window = PERIOD;
            let (mut p, mut views, mut now) = started(CriticalityPolicy::new(t.clone()).unwrap(), 2);
            for (n, mib) in latencies {
                now += PERIOD;
                report(&mut views[0], mib as f64 * MIB, n, n * MS / 4);
                report(&mut views[1], 1.0, 0, 0);
                let rules = p.period(now, &views);
                apply(&mut views, rules);
                let s = p.status();
                prop_assert!((t.min_depth..=max_depth).contains(&s.depth));
                prop_assert!(s.busy_depth <= s.depth && s.busy_depth <= t.busy_depth);
                prop_assert!(s.rate_bytes_per_sec.is_none_or(|r| r >= t.min_rate));
                for v in &views {
                    let c = config(v);
                    prop_assert_eq!((c.depth, c.busy_depth), (s.depth, s.busy_depth));
                    prop_assert_eq!(c.rate.is_some(), s.rate_bytes_per_sec.is_some());
                }
            }
        }
    }
}
