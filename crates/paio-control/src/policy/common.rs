//! What every rate-controlling policy shares: the controlled channel and its
//! `paiod` DRL object, the setup rules, reading a stage's figures for the
//! channel, splitting a group's rate among its stages by measured demand,
//! and emitting `configure` rules only for rates that changed.

use std::collections::BTreeMap;

use paio::object::DrlConfig;
use paio::stage::ChannelInfo;
use paio::stats::Counts;
use paio::units::RateUnit;
use paio::{Classifier, ObjectConfig, Pattern, Rate, RequestType, Rule, StageInfo};

use super::{max_min::max_min_fair, PolicyError, StageId, StageView};

/// Name of the DRL object paiod creates in the controlled channel.
pub const OBJECT: &str = "paiod";

/// Lowest rate, in bytes/s, given to an active stage: 64 KiB/s. A rate of 0
/// would pause the stage's DRL, so every computed rate is raised to this.
pub const RATE_FLOOR: f64 = 64.0 * 1024.0;

/// The rate, in bytes/s, that stands for "no limit": 1 PiB/s. Used when a
/// limit is lifted (a static entry outside its window without `otherwise`)
/// and as the initial rate of a freshly created `paiod` object.
pub const UNLIMITED: f64 = (1u64 << 50) as f64;

/// A new rate within this fraction (0.5 %) of the rate last sent to a stage
/// counts as unchanged and is not sent, to keep control traffic small.
pub const DEADBAND: f64 = 0.005;

/// Headroom of the demand split: a stage that did not wait in the DRL is
/// estimated to need what it achieved times `1 + SPLIT_HEADROOM`, plus
/// [`RATE_FLOOR`].
pub const SPLIT_HEADROOM: f64 = 0.25;

/// Which of the kernel's `/proc/<pid>/io` counters measures the controlled
/// traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCounter {
    /// `read_bytes`.
    Read,
    /// `write_bytes`.
    Write,
}

/// The controlled channel and how stages are grouped.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlSettings {
    /// Label whose value names a stage's group (default `job`).
    pub group_by: String,
    /// The controlled channel (default `read`).
    pub channel: String,
    /// Requests mapped to the channel when paiod has to create it.
    pub pattern: Pattern,
    /// Whether rates are calibrated against `/proc/<pid>/io`.
    pub calibrate: bool,
}

impl Default for ControlSettings {
    fn default() -> Self {
        Self::new("job", "read", None, false).expect("read has a default pattern")
    }
}

impl ControlSettings {
    /// Settings for `channel`; `pattern` defaults to `request_type = channel`
    /// when the channel is `read` or `write`, and is required otherwise.
    pub fn new(
        group_by: &str,
        channel: &str,
        pattern: Option<Pattern>,
        calibrate: bool,
    ) -> Result<Self, PolicyError> {
        if group_by.is_empty() {
            return Err(PolicyError::new("group_by must not be empty"));
        }
        if channel.is_empty() {
            return Err(PolicyError::new("channel must not be empty"));
        }
        let pattern = match pattern {
            Some(p) => p,
            None => {
                let rt = match channel {
                    "read" => RequestType::READ,
                    "write" => RequestType::WRITE,
                    other => {
                        return Err(PolicyError::new(format!(
                            "channel {other:?} needs a `match` pattern (only \"read\" and \"write\" have a default)"
                        )))
                    }
                };
                Pattern {
                    request_type: Some(rt),
                    ..Pattern::ANY
                }
            }
        };
        Ok(Self {
            group_by: group_by.to_string(),
            channel: channel.to_string(),
            pattern,
            calibrate,
        })
    }

    /// The kernel counter that measures the channel's traffic: from the
    /// pattern's request type, else from the channel's name; `None` when
    /// neither is `read` or `write` (calibration is then skipped).
    pub fn kernel_counter(&self) -> Option<KernelCounter> {
        match self.pattern.request_type {
            Some(rt) if rt == RequestType::READ => Some(KernelCounter::Read),
            Some(rt) if rt == RequestType::WRITE => Some(KernelCounter::Write),
            Some(_) => None,
            None => match self.channel.as_str() {
                "read" => Some(KernelCounter::Read),
                "write" => Some(KernelCounter::Write),
                _ => None,
            },
        }
    }

    /// Rules that give a stage the `paiod` DRL (at `initial_rate` bytes/s) as
    /// the default object of the controlled channel, creating and mapping
    /// the channel (and enabling the pattern's classifiers) when the stage
    /// lacks it. Nothing the stage already has is created again.
    ///
    /// Every request of the channel then reaches the `paiod` DRL: the
    /// channel's object mappings (e.g. the RocksDB plugin's `compaction_l0
    /// → l0` in channel `compaction`), which would take requests past it,
    /// are removed, and a log line names them; a mapping of the interposer's
    /// pipes and sockets alone (file class `stream`, as `paio run --limit`
    /// has) stays, since they are not storage. A request has one object, so
    /// the `paiod` DRL takes the place of the objects the channel's storage
    /// traffic reached; when each of them is a DRL of the stage's own at a
    /// rate in bytes (`paio run --limit`'s `limit`), the highest of their
    /// rates stays the ceiling of paiod's (`max_rate`) and their bucket,
    /// if they share one (a command's processes do), is the one the
    /// `paiod` DRL draws on, so both limits hold.
    pub fn setup_rules(&self, info: &StageInfo, initial_rate: f64) -> Vec<Rule> {
        let mut rules = Vec::new();
        let channel = info.channels.iter().find(|c| c.name == self.channel);
        let who = || format!("stage {} (pid {})", info.identity.name, info.identity.pid);
        if let Some(c) = channel {
            let past: Vec<&(Pattern, String)> = c
                .object_rules
                .iter()
                .filter(|(pattern, _)| !is_streams_only(pattern))
                .collect();
            if !past.is_empty() {
                let names: Vec<&str> = past.iter().map(|(_, o)| o.as_str()).collect();
                tracing::info!(
                    "{}: channel {:?} sends requests to objects {:?} by pattern; \
                     those mappings are removed so that the paiod DRL limits the whole channel",
                    who(),
                    c.name,
                    names
                );
                rules.extend(past.iter().map(|(pattern, _)| Rule::UnmapObject {
                    channel: c.name.clone(),
                    pattern: *pattern,
                }));
            }
        }
        if channel.is_none() {
            let needed = pattern_classifiers(&self.pattern);
            if needed.iter().any(|c| !info.classifiers.contains(c)) {
                let mut all = info.classifiers.clone();
                for c in needed {
                    if !all.contains(&c) {
                        all.push(c);
                    }
                }
                rules.push(Rule::SetClassifiers { classifiers: all });
            }
            rules.push(Rule::CreateChannel {
                name: self.channel.clone(),
            });
        }
        let has_object = channel.is_some_and(|c| c.objects.iter().any(|o| o.name == OBJECT));
        if !has_object {
            let mut config = drl_config(initial_rate);
            if let Some((name, own)) = channel.and_then(own_limit) {
                let max = own.max_rate.expect("own_limit gives a ceiling");
                tracing::info!(
                    "{}: channel {:?}'s own limit (object {name:?}) of {max}{} stays the \
                     ceiling of paiod's rates there",
                    who(),
                    self.channel,
                    own.shared
                        .as_deref()
                        .map(|b| format!(" on bucket {b:?}, shared by its command's processes"))
                        .unwrap_or_default()
                );
                config.shared = own.shared;
                config.max_rate = Some(max);
                config = config.capped();
            }
            rules.push(Rule::CreateObject {
                channel: self.channel.clone(),
                name: OBJECT.to_string(),
                config: ObjectConfig::Drl(config),
            });
        }
        if channel.is_none_or(|c| c.default_object != OBJECT) {
            rules.push(Rule::SetDefaultObject {
                channel: self.channel.clone(),
                object: OBJECT.to_string(),
            });
        }
        if channel.is_none() {
            rules.push(Rule::MapChannel {
                pattern: self.pattern,
                channel: self.channel.clone(),
            });
        }
        rules
    }

    /// The stage's figures for the controlled channel this period.
    pub fn counts<'a>(&self, view: &'a StageView) -> Option<&'a Counts> {
        view.stats
            .as_ref()?
            .channels
            .iter()
            .find(|c| c.name == self.channel)
            .map(|c| &c.counts)
    }

    /// Bytes per second the stage achieved in the controlled channel this
    /// period (0 without statistics).
    pub fn achieved(&self, view: &StageView) -> f64 {
        self.counts(view).map_or(0.0, |c| finite(c.bytes_per_sec))
    }

    /// The kernel's rate for the controlled traffic of the stage's process.
    pub fn kernel_rate(&self, view: &StageView) -> Option<f64> {
        let io = view.proc_io?;
        Some(finite(match self.kernel_counter()? {
            KernelCounter::Read => io.read_bytes_per_sec,
            KernelCounter::Write => io.write_bytes_per_sec,
        }))
    }

    /// Whether `channel/object` is the `paiod` DRL of the controlled channel.
    pub fn is_controlled(&self, channel: &str, object: &str) -> bool {
        channel == self.channel && object == OBJECT
    }

    /// The rule that sets the `paiod` object's rate.
    pub fn configure(&self, rate: f64) -> Rule {
        Rule::Configure {
            channel: self.channel.clone(),
            object: OBJECT.to_string(),
            config: drl(rate),
        }
    }

    /// What the split needs to know of a stage. Waits behind the stage's
    /// own ceiling (`max_rate` of its `paiod` DRL, when it binds) do not
    /// make it throttled: more from paiod would not let it go faster, so
    /// its demand is what it achieves and the group's rest goes to others.
    pub fn demand(&self, view: &StageView) -> StageDemand {
        let mut d = StageDemand::of(self.counts(view));
        if d.throttled && self.held_by_ceiling(view) {
            d.throttled = false;
        }
        d
    }

    /// Whether the stage's `paiod` DRL runs at its ceiling (`max_rate`):
    /// paiod's rate is at or above it.
    fn held_by_ceiling(&self, view: &StageView) -> bool {
        view.info
            .channels
            .iter()
            .find(|c| c.name == self.channel)
            .and_then(|c| c.objects.iter().find(|o| o.name == OBJECT))
            .is_some_and(|o| match &o.config {
                Some(ObjectConfig::Drl(c)) => c.max_rate.is_some_and(|m| c.rate == m),
                _ => false,
            })
    }
}

/// Whether `p` matches the interposer's pipes and sockets alone (its file
/// class `stream`, nothing else named): traffic between processes, not to
/// storage.
fn is_streams_only(p: &Pattern) -> bool {
    let streams = Pattern {
        file_class: paio::FileClass::named(paio::env::STREAM_CLASS).ok(),
        ..Pattern::ANY
    };
    p.file_class.is_some() && *p == streams
}

/// The limit a stage's own objects put on the channel's storage traffic,
/// which paiod's DRL takes the place of: when every object that traffic can
/// reach (the default one, and those of mappings other than pipes and
/// sockets) is a DRL at a positive rate in bytes, the highest of their
/// rates (none of the channel's traffic went faster), and their shared
/// bucket if they all name one; the default object's name, for the log.
/// `None` when some of the traffic had no such limit.
fn own_limit(c: &ChannelInfo) -> Option<(&str, DrlConfig)> {
    if c.default_object == OBJECT {
        return None;
    }
    let reachable = std::iter::once(c.default_object.as_str()).chain(
        c.object_rules
            .iter()
            .filter(|(p, _)| !is_streams_only(p))
            .map(|(_, o)| o.as_str()),
    );
    // The highest rate, and the bucket every one names (`None` if not).
    let mut limit: Option<(u64, Option<&str>)> = None;
    for name in reachable {
        let o = c.objects.iter().find(|o| o.name == name)?;
        let Some(ObjectConfig::Drl(d)) = &o.config else {
            return None;
        };
        if d.rate.unit != RateUnit::Bytes || d.rate.per_second == 0 {
            return None;
        }
        let shared = d.shared.as_deref();
        limit = Some(match limit {
            None => (d.rate.per_second, shared),
            Some((max, bucket)) => (
                max.max(d.rate.per_second),
                bucket.filter(|b| shared == Some(*b)),
            ),
        });
    }
    let (max, bucket) = limit?;
    let mut config = drl_config(0.0).with_max_rate(Rate::bytes_per_sec(max));
    config.shared = bucket.map(str::to_string);
    Some((c.default_object.as_str(), config))
}

fn pattern_classifiers(p: &Pattern) -> Vec<Classifier> {
    let mut v = Vec::new();
    if p.workflow.is_some() {
        v.push(Classifier::Workflow);
    }
    if p.request_type.is_some() {
        v.push(Classifier::RequestType);
    }
    if p.request_context.is_some() {
        v.push(Classifier::RequestContext);
    }
    if p.file_class.is_some() {
        v.push(Classifier::FileClass);
    }
    v
}

/// `x` if finite and positive, else 0.
pub(crate) fn finite(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// A DRL configuration of `rate` bytes/s, raised to [`RATE_FLOOR`].
pub fn drl(rate: f64) -> ObjectConfig {
    ObjectConfig::Drl(drl_config(rate))
}

/// [`drl`]'s settings, for a caller that adds to them.
pub fn drl_config(rate: f64) -> DrlConfig {
    DrlConfig::new(Rate::bytes_per_sec(to_rate(rate)))
}

/// `rate` in whole bytes/s, at least [`RATE_FLOOR`], at most [`UNLIMITED`].
pub fn to_rate(rate: f64) -> u64 {
    let r = if rate.is_nan() { RATE_FLOOR } else { rate };
    r.clamp(RATE_FLOOR, UNLIMITED).round() as u64
}

/// A stage's measured demand in the controlled channel, last period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageDemand {
    /// Bytes/s achieved, `None` for a stage without statistics yet.
    pub achieved: Option<f64>,
    /// Whether requests waited in the channel, or wait there now (the DRL
    /// held the stage back, so it wants more than it achieved; a request
    /// held for longer than the period, a large one at a low rate, is only
    /// in the `waiting` gauge).
    pub throttled: bool,
}

impl StageDemand {
    /// The demand shown by `counts` (one period's figures of a channel or
    /// object; `None`: no statistics yet).
    pub fn of(counts: Option<&Counts>) -> Self {
        match counts {
            None => StageDemand {
                achieved: None,
                throttled: false,
            },
            Some(c) => StageDemand {
                achieved: Some(finite(c.bytes_per_sec)),
                throttled: c.wait.waited_ops > 0 || c.waiting > 0,
            },
        }
    }
}

impl StageDemand {
    /// What [`split_by_demand`] estimates this demand needs, bytes/s:
    /// unbounded when held back or without statistics, else `achieved ×
    /// (1 + SPLIT_HEADROOM) + RATE_FLOOR`.
    pub fn wanted(&self) -> f64 {
        match self.achieved {
            Some(a) if !self.throttled => finite(a) * (1.0 + SPLIT_HEADROOM) + RATE_FLOOR,
            _ => f64::INFINITY,
        }
    }
}

/// Whether rate `new` is within [`DEADBAND`] of `old`, the rate last sent.
pub fn within_deadband(old: f64, new: f64) -> bool {
    (new - old).abs() <= DEADBAND * old
}

/// Splits a group's `total` bytes/s among its stages by measured demand.
///
/// Rule: a stage that waited in the DRL, or has no statistics yet, has an
/// unbounded demand; any other stage is estimated to need
/// `achieved × (1 + SPLIT_HEADROOM) + RATE_FLOOR`. The total is then
/// shared max-min fairly over these demands ([`max_min_fair`]): stages that
/// need less than an equal share get their estimate, the rest is split
/// equally among the others, and anything left when every estimate is met
/// is split equally among all. So a new stage gets at least an equal share,
/// all-idle or all-throttled groups are split evenly, the sum is `total`
/// and no share is negative.
pub fn split_by_demand(total: f64, stages: &[StageDemand]) -> Vec<f64> {
    let demands: Vec<f64> = stages.iter().map(StageDemand::wanted).collect();
    max_min_fair(total, &demands)
}

/// The rate last sent to each stage, so only changes are sent.
#[derive(Debug, Clone, Default)]
pub struct RateTracker {
    last: BTreeMap<StageId, u64>,
}

impl RateTracker {
    /// `configure` rules for the stages whose rate (bytes/s, floored and
    /// rounded by [`to_rate`]) moved by more than [`DEADBAND`] from the rate
    /// last sent, or that were never sent one. Stages not in `rates` are
    /// forgotten.
    pub fn update(
        &mut self,
        settings: &ControlSettings,
        rates: &[(StageId, f64)],
    ) -> Vec<(StageId, Vec<Rule>)> {
        let mut out = Vec::new();
        let mut next = BTreeMap::new();
        for &(id, rate) in rates {
            let r = to_rate(rate);
            let keep = match self.last.get(&id) {
                Some(&old) => within_deadband(old as f64, r as f64),
                None => false,
            };
            if keep {
                next.insert(id, self.last[&id]);
            } else {
                next.insert(id, r);
                out.push((id, vec![settings.configure(r as f64)]));
            }
        }
        self.last = next;
        out
    }

    /// The rate last sent to `id`.
    pub fn last(&self, id: StageId) -> Option<u64> {
        self.last.get(&id).copied()
    }
}

/// `set * max_bandwidth=VALUE` of the policies with a total: the new MaxB
/// in bytes per second; an error for another group or a bad rate.
pub fn parse_max_bandwidth(group: &str, value: &str) -> Result<f64, PolicyError> {
    if group != "*" {
        return Err(PolicyError::new(format!(
            "max_bandwidth applies to all groups: use group `*`, not {group:?}"
        )));
    }
    parse_byte_rate(value).map_err(|e| PolicyError::new(format!("max_bandwidth: {e}")))
}

/// Parses a byte rate for `set` and the configuration: a positive rate in
/// bytes per second.
pub fn parse_byte_rate(value: &str) -> Result<f64, PolicyError> {
    let r = paio::units::parse_rate(value).map_err(|e| PolicyError::new(e.to_string()))?;
    check_byte_rate(r)
}

/// `r` in bytes/s if it is a positive byte rate.
pub fn check_byte_rate(r: Rate) -> Result<f64, PolicyError> {
    if r.unit != paio::units::RateUnit::Bytes {
        return Err(PolicyError::new(format!(
            "expected a byte rate such as \"100MiB/s\", got {r}"
        )));
    }
    if r.per_second == 0 {
        return Err(PolicyError::new("must be greater than 0 B/s"));
    }
    Ok(r.per_second as f64)
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Synthetic stage views.
    use super::*;
    use crate::policy::ProcIo;
    use paio::stage::{ChannelInfo, ObjectInfo, StageIdentity};
    use paio::stats::{ChannelStats, WaitSummary};

    /// Sets new groups `g0`, `g1`, ... through `set` up to [`MAX_GROUPS`]
    /// with the `already` groups the policy has, and asserts that one more
    /// is refused, saying why.
    pub fn fill_groups(already: usize, mut set: impl FnMut(&str) -> Result<(), PolicyError>) {
        for i in 0..MAX_GROUPS - already {
            set(&format!("g{i}")).unwrap();
        }
        let e = set("one-more").unwrap_err();
        assert!(e.message.contains("4096 groups"), "{}", e.message);
    }

    /// A stage with labels and, if `channel`, a `read` channel with a
    /// `paiod` DRL as default.
    pub fn info(name: &str, labels: &[(&str, &str)], channel: bool) -> StageInfo {
        StageInfo {
            identity: StageIdentity {
                name: name.into(),
                pid: 42,
                host: "h".into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
            classifiers: vec![Classifier::RequestType],
            channels: if channel {
                vec![ChannelInfo {
                    name: "read".into(),
                    objects: vec![ObjectInfo {
                        name: OBJECT.into(),
                        kind: "drl".into(),
                        config: Some(drl(UNLIMITED)),
                    }],
                    object_rules: vec![],
                    default_object: OBJECT.into(),
                }]
            } else {
                vec![]
            },
            channel_rules: vec![],
            default_channel: None,
        }
    }

    /// A view of stage `id` in group `job`, with `read` statistics of
    /// `bps` bytes/s (`None`: no statistics) and `waited` throttled ops.
    pub fn view(id: StageId, job: &str, bps: Option<f64>, waited: u64) -> StageView {
        StageView {
            id,
            info: info(&format!("s{id}"), &[("job", job)], true),
            stats: bps.map(|b| stats(&format!("s{id}"), "read", b, waited)),
            proc_io: None,
        }
    }

    /// Statistics with one channel.
    pub fn stats(stage: &str, channel: &str, bps: f64, waited: u64) -> paio::StageStats {
        let counts = Counts {
            interval_bytes: (bps / 10.0) as u64,
            bytes_per_sec: bps,
            wait: WaitSummary {
                waited_ops: waited,
                ..Default::default()
            },
            ..Default::default()
        };
        paio::StageStats {
            stage: stage.into(),
            collected_at_ns: 0,
            interval_ns: 100_000_000,
            channels: vec![ChannelStats {
                name: channel.into(),
                counts,
                objects: vec![],
                histograms: None,
            }],
            ..Default::default()
        }
    }

    /// With kernel counters.
    pub fn with_io(mut v: StageView, read: f64) -> StageView {
        v.proc_io = Some(ProcIo {
            read_bytes_per_sec: read,
            write_bytes_per_sec: 0.0,
        });
        v
    }

    /// The rate configured by rules for `id`, if any.
    pub fn rate_of(out: &[(StageId, Vec<Rule>)], id: StageId) -> Option<u64> {
        out.iter().filter(|(i, _)| *i == id).find_map(|(_, rules)| {
            rules.iter().find_map(|r| match r {
                Rule::Configure {
                    config: ObjectConfig::Drl(c),
                    ..
                } => Some(c.rate.per_second),
                _ => None,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defaults_and_pattern_requirements() {
        let s = ControlSettings::default();
        assert_eq!(s.channel, "read");
        assert_eq!(s.kernel_counter(), Some(KernelCounter::Read));
        let w = ControlSettings::new("job", "write", None, false).unwrap();
        assert_eq!(w.pattern.request_type, Some(RequestType::WRITE));
        assert_eq!(w.kernel_counter(), Some(KernelCounter::Write));
        let e = ControlSettings::new("job", "bg", None, false).unwrap_err();
        assert!(e.message.contains("match"), "{e}");
        let p = ControlSettings::new("job", "bg", Some(Pattern::ANY), false).unwrap();
        assert_eq!(p.kernel_counter(), None);
    }

    #[test]
    fn setup_creates_what_is_missing() {
        let s = ControlSettings::default();
        let mut bare = info("a", &[("job", "x")], false);
        bare.classifiers = vec![];
        let rules = s.setup_rules(&bare, UNLIMITED);
        assert_eq!(rules.len(), 5, "{rules:?}");
        assert!(
            matches!(&rules[0], Rule::SetClassifiers { classifiers } if classifiers == &[Classifier::RequestType])
        );
        assert!(matches!(&rules[1], Rule::CreateChannel { name } if name == "read"));
        assert!(
            matches!(&rules[2], Rule::CreateObject { name, config: ObjectConfig::Drl(_), .. } if name == OBJECT)
        );
        assert!(matches!(&rules[3], Rule::SetDefaultObject { object, .. } if object == OBJECT));
        assert!(
            matches!(&rules[4], Rule::MapChannel { pattern, .. } if pattern.request_type == Some(RequestType::READ))
        );
        // Everything present: nothing to do.
        assert!(s.setup_rules(&info("a", &[], true), UNLIMITED).is_empty());
        // Channel present without the object.
        let mut no_obj = info("a", &[], true);
        no_obj.channels[0].objects.clear();
        no_obj.channels[0].default_object = "default".into();
        let rules = s.setup_rules(&no_obj, 1e6);
        assert_eq!(rules.len(), 2, "{rules:?}");
    }

    #[test]
    fn setup_rules_apply_to_a_real_stage() {
        let stage = paio::Stage::from_policy_str("", "<t>").unwrap();
        let s = ControlSettings::default();
        for r in s.setup_rules(&stage.info(), 1e6) {
            stage.apply(&r).unwrap();
        }
        let info = stage.info();
        assert!(s.setup_rules(&info, 1e6).is_empty());
        stage.apply(&s.configure(2e6)).unwrap();
    }

    /// A stage with `paio run --limit write=8MiB/s`'s channel: its own
    /// limit stays the ceiling, on the same shared bucket, and pipes and
    /// sockets stay out.
    #[test]
    fn setup_keeps_a_stages_own_limit_as_the_ceiling_and_streams_out() {
        paio::object::install_shared_buckets(std::sync::Arc::new(
            paio::object::LocalBuckets::default(),
        ));
        let policy = r#"
[[channel]]
name = "write"
match = { request_type = "write" }
default_object = "limit"
[[channel.object]]
name = "limit"
kind = "drl"
rate = "8MiB/s"
shared = "write"
[[channel.object]]
name = "streams"
kind = "noop"
match = { file_class = "stream" }
"#;
        let stage = paio::Stage::from_policy_str(policy, "<t>").unwrap();
        let s = ControlSettings::new("job", "write", None, false).unwrap();
        let rules = s.setup_rules(&stage.info(), 1e9);
        assert!(
            !rules.iter().any(|r| matches!(r, Rule::UnmapObject { .. })),
            "{rules:?}"
        );
        stage.apply_all(&rules).unwrap();
        let info = stage.info();
        let write = &info.channels[0];
        assert_eq!(write.default_object, OBJECT);
        assert_eq!(write.object_rules.len(), 1, "the streams mapping stays");
        let paiod = |info: &StageInfo| -> DrlConfig {
            let o = info.channels[0].objects.iter().find(|o| o.name == OBJECT);
            match o.and_then(|o| o.config.clone()) {
                Some(ObjectConfig::Drl(c)) => c,
                other => panic!("{other:?}"),
            }
        };
        let own = Rate::bytes_per_sec(8 << 20);
        let c = paiod(&info);
        assert_eq!(
            (c.rate, c.max_rate, c.shared.as_deref()),
            (own, Some(own), Some("write"))
        );
        // paiod's rates above the ceiling are held to it, below it apply.
        stage.apply(&s.configure(1e9)).unwrap();
        assert_eq!(paiod(&stage.info()).rate, own);
        stage.apply(&s.configure(1e6)).unwrap();
        assert_eq!(paiod(&stage.info()).rate, Rate::bytes_per_sec(1_000_000));
        assert!(s.setup_rules(&stage.info(), 1e9).is_empty());
        // A default object that is no limit of the stage's own: no ceiling.
        let plain = paio::Stage::from_policy_str("", "<t>").unwrap();
        for r in s.setup_rules(&plain.info(), 1e9) {
            plain.apply(&r).unwrap();
        }
        let c = paiod(&plain.info());
        assert_eq!((c.max_rate, c.shared), (None, None));
    }

    /// The ceiling is the loosest limit the channel's storage traffic had:
    /// none when some of it reached no byte-rate DRL.
    #[test]
    fn the_ceiling_is_the_highest_rate_the_channels_traffic_could_reach() {
        let channel = |objects: &str| {
            let policy = format!(
                "[[channel]]\nname = \"c\"\nmatch = {{}}\ndefault_object = \"ln\"\n{objects}"
            );
            let stage = paio::Stage::from_policy_str(&policy, "<t>").unwrap();
            stage.info().channels[0].clone()
        };
        let obj = |name: &str, kind: &str, m: &str| {
            format!(
                "[[channel.object]]\nname = \"{name}\"\nkind = \"{kind}\"\n{}{m}\n",
                if kind == "drl" {
                    "rate = \"20MiB/s\"\n"
                } else {
                    ""
                }
            )
        };
        let ln = obj("ln", "drl", "");
        let l0 = obj("l0", "drl", "rate = \"40MiB/s\"").replace("rate = \"20MiB/s\"\n", "");
        let c = channel(&format!(
            "{ln}{l0}match = {{ request_context = \"compaction_l0\" }}\n"
        ));
        let (name, own) = own_limit(&c).unwrap();
        assert_eq!(
            (name, own.max_rate, own.shared),
            ("ln", Some(Rate::bytes_per_sec(40 << 20)), None)
        );
        let pass = obj(
            "pass",
            "noop",
            "match = { request_context = \"compaction_l0\" }",
        );
        assert!(own_limit(&channel(&format!("{ln}{pass}"))).is_none());
        let ops = obj("ln", "drl", "").replace("20MiB/s", "100 ops/s");
        assert!(own_limit(&channel(&ops)).is_none());
    }

    /// A stage whose one request has waited longer than a period (4 MiB at
    /// the 64 KiB/s floor) completed nothing and waited in no figure: it
    /// was taken for idle and kept at the floor (0.3 MiB/s beside two
    /// stages at 29.4). Its request waiting now makes it throttled.
    #[test]
    fn a_request_held_longer_than_a_period_makes_its_stage_throttled() {
        let held = Counts {
            waiting: 1,
            ..Counts::default()
        };
        let held = StageDemand::of(Some(&held));
        assert!(held.throttled);
        let busy = StageDemand {
            achieved: Some(30e6),
            throttled: true,
        };
        let shares = split_by_demand(60e6, &[busy, busy, held]);
        assert_eq!(shares, [20e6, 20e6, 20e6]);
        let idle = StageDemand::of(Some(&Counts::default()));
        assert!(!idle.throttled);
    }

    #[test]
    fn a_stage_held_by_its_own_ceiling_is_not_throttled_by_paiod() {
        let s = ControlSettings::default();
        let mut v = view(1, "x", Some(8e6), 100);
        assert!(s.demand(&v).throttled, "waits behind paiod's rate");
        let capped = |rate: u64| {
            ObjectConfig::Drl(
                DrlConfig::new(Rate::bytes_per_sec(rate))
                    .with_max_rate(Rate::bytes_per_sec(8_000_000))
                    .capped(),
            )
        };
        v.info.channels[0].objects[0].config = Some(capped(1 << 40));
        let d = s.demand(&v);
        assert!(!d.throttled, "waits behind its own ceiling");
        assert!(d.wanted() < 11e6, "{}", d.wanted());
        v.info.channels[0].objects[0].config = Some(capped(1_000_000));
        assert!(s.demand(&v).throttled, "paiod's rate below the ceiling");
    }

    #[test]
    fn tracker_skips_unchanged_rates() {
        let s = ControlSettings::default();
        let mut t = RateTracker::default();
        let out = t.update(&s, &[(1, 1e6), (2, 2e6)]);
        assert_eq!(out.len(), 2);
        let out = t.update(&s, &[(1, 1e6 + 10.0), (2, 3e6)]);
        assert_eq!(out.len(), 1);
        assert_eq!(rate_of(&out, 2), Some(3_000_000));
        assert_eq!(t.last(1), Some(1_000_000));
        t.update(&s, &[(2, 3e6)]);
        assert_eq!(t.last(1), None);
        // Floor: never 0.
        let out = t.update(&s, &[(3, 0.0)]);
        assert_eq!(rate_of(&out, 3), Some(RATE_FLOOR as u64));
    }

    #[test]
    fn split_follows_demand() {
        let idle = StageDemand {
            achieved: Some(0.0),
            throttled: false,
        };
        let busy = StageDemand {
            achieved: Some(50e6),
            throttled: true,
        };
        let new = StageDemand {
            achieved: None,
            throttled: false,
        };
        let v = split_by_demand(100e6, &[idle, busy]);
        assert!((v[0] - RATE_FLOOR).abs() < 1.0, "{v:?}");
        assert!((v[0] + v[1] - 100e6).abs() < 1.0);
        let v = split_by_demand(90e6, &[new, new, new]);
        assert!(v.iter().all(|x| (x - 30e6).abs() < 1.0), "{v:?}");
        let light = StageDemand {
            achieved: Some(8e6),
            throttled: false,
        };
        let v = split_by_demand(100e6, &[light, new]);
        assert!((v[0] - (10e6 + RATE_FLOOR)).abs() < 1.0, "{v:?}");
    }

    fn demand() -> impl Strategy<Value = StageDemand> {
        (proptest::option::of(0.0..1e10f64), any::<bool>()).prop_map(|(achieved, throttled)| {
            StageDemand {
                achieved,
                throttled,
            }
        })
    }

    proptest! {
        #[test]
        fn split_preserves_sum_and_is_non_negative(total in 0.0..1e11f64, ds in proptest::collection::vec(demand(), 1..12)) {
            let v = split_by_demand(total, &ds);
            prop_assert_eq!(v.len(), ds.len());
            prop_assert!(v.iter().all(|x| *x >= 0.0 && x.is_finite()));
            let sum: f64 = v.iter().sum();
            prop_assert!((sum - total).abs() <= 1e-6 * total.max(1.0), "{} vs {}", sum, total);
            // Stages that wait or are new get at least an equal share.
            let fair = total / ds.len() as f64;
            for (d, x) in ds.iter().zip(&v) {
                if d.throttled || d.achieved.is_none() {
                    prop_assert!(*x >= fair * (1.0 - 1e-9));
                }
            }
        }
    }
}

/// Per-stage rates from per-group rates: each group's rate is split among
/// its stages with [`split_by_demand`], calibrated when
/// [`ControlSettings::calibrate`] is set, and sent through `tracker`.
/// Stages of groups without a rate are not controlled.
pub(crate) fn distribute(
    settings: &ControlSettings,
    calibrator: &mut super::calibrate::Calibrator,
    tracker: &mut RateTracker,
    groups: &BTreeMap<String, Vec<&StageView>>,
    group_rates: &BTreeMap<String, f64>,
) -> Vec<(StageId, Vec<Rule>)> {
    let mut rates = Vec::new();
    for (name, members) in groups {
        let Some(&total) = group_rates.get(name) else {
            continue;
        };
        let demands: Vec<StageDemand> = members.iter().map(|v| settings.demand(v)).collect();
        for (v, share) in members.iter().zip(split_by_demand(total, &demands)) {
            let rate = if settings.calibrate {
                calibrator.calibrate(settings, v, share)
            } else {
                share
            };
            rates.push((v.id, rate));
        }
    }
    let ids: Vec<StageId> = rates.iter().map(|(id, _)| *id).collect();
    calibrator.retain(&ids);
    tracker.update(settings, &rates)
}

/// Whether some of `members` were held back in the controlled channel
/// last period, or have no statistics yet.
pub(crate) fn hungry(settings: &ControlSettings, members: &[&StageView]) -> bool {
    members.iter().any(|v| {
        let d = settings.demand(v);
        d.throttled || d.achieved.is_none()
    })
}

/// Cluster mode: replaces the rate of every group in `rates` that the
/// cluster allocated (`cluster`) with its allocation.
pub(crate) fn overlay(rates: &mut BTreeMap<String, f64>, cluster: &BTreeMap<String, f64>) {
    for (group, rate) in rates.iter_mut() {
        if let Some(&c) = cluster.get(group) {
            *rate = c;
        }
    }
}

/// Sum of the controlled channel's bytes/s over `members`.
pub(crate) fn achieved(settings: &ControlSettings, members: &[&StageView]) -> f64 {
    members.iter().map(|v| settings.achieved(v)).sum()
}

/// Checks that `group` names a group (not empty, not `*`).
/// The most groups a policy keeps settings for (a `demand`, a `weight`, a
/// `rate`), from its configuration and `paio ctl set` together. A group's
/// settings stay until paiod restarts or reloads its configuration, so
/// without a cap a client could grow paiod by setting ever new groups
/// (150,000 of them made `paio status` too large to send). 4,096 is far
/// above the jobs one machine runs.
pub const MAX_GROUPS: usize = 4096;

/// Refuses to add a group's settings when `known` groups already have
/// some (`is_new`: `group` is not among them).
pub(crate) fn room_for_group(group: &str, known: usize, is_new: bool) -> Result<(), PolicyError> {
    if is_new && known >= MAX_GROUPS {
        return Err(PolicyError::new(format!(
            "group {group:?} would be one more than the {MAX_GROUPS} groups paiod keeps settings \
             for: set an existing group, or list the groups in the configuration and reload \
             (SIGHUP) to drop the others"
        )));
    }
    Ok(())
}

pub(crate) fn check_group(group: &str) -> Result<(), PolicyError> {
    if group.is_empty() || group == "*" {
        Err(PolicyError::new(format!(
            "group {group:?} is not a group name (use `*` only with max_bandwidth)"
        )))
    } else {
        Ok(())
    }
}
