//! Rules from the configuration, optionally time-scheduled (kind `static`).
//!
//! Each entry has a name and selects stages by labels: its `labels` table
//! if given (a stage matches when it has every listed label with that
//! value), else the stages whose grouping label (`group_by`) equals the
//! name. An entry may have:
//!
//! - `rate`: a limit for the selected stages together, enforced by the
//!   `paiod` DRL of the controlled channel and split among the stages by
//!   measured demand ([`super::common::split_by_demand`]);
//! - `rules`: raw paio rules, sent to each selected stage once, in the first
//!   period in which the entry's window is open (and the stage is
//!   selected). They are not withdrawn when the window closes (rules have
//!   no general inverse): schedule a later entry with the undoing rules;
//! - `start` / `stop`: the window, as times since paiod started (`start`
//!   defaults to 0, `stop` to never). Inside the window the entry's `rate`
//!   applies. Outside it the rate is withdrawn: the stages get `otherwise`
//!   (split the same way) if the entry has one, else the limit is lifted by
//!   setting the DRL to [`UNLIMITED`] (1 PiB/s).
//!
//! When several entries with a rate select one stage, an entry whose window
//! is open beats one whose window is closed, and among equals the later
//! entry in the file wins. Stages selected by no entry with a rate keep
//! their `paiod` DRL as it is (unlimited when paiod created it). With no
//! entries the policy only observes. The policy does not calibrate.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use paio::Rule;

use super::common::{self, ControlSettings, RateTracker, StageDemand, UNLIMITED};
use super::{ControlPolicy, GroupTarget, PolicyError, StageId, StageView};

/// One entry of the static policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StaticEntry {
    /// The entry's name (its group, for `set` and `targets`).
    pub name: String,
    /// Labels a stage must have; empty: `group_by = name`.
    pub labels: BTreeMap<String, String>,
    /// Rate in bytes/s inside the window.
    pub rate: Option<f64>,
    /// Rate in bytes/s outside the window (none: unlimited).
    pub otherwise: Option<f64>,
    /// Start of the window, since paiod started (none: 0).
    pub start: Option<Duration>,
    /// End of the window (none: never).
    pub stop: Option<Duration>,
    /// Raw rules sent once to each selected stage when the window is open.
    pub rules: Vec<Rule>,
}

impl StaticEntry {
    /// Whether the window is open at `now`.
    pub fn in_window(&self, now: Duration) -> bool {
        self.start.is_none_or(|s| now >= s) && self.stop.is_none_or(|s| now < s)
    }

    /// The group rate at `now`: `None` if the entry sets no rate, else the
    /// rate, `otherwise` or [`UNLIMITED`].
    pub fn rate_at(&self, now: Duration) -> Option<f64> {
        let rate = self.rate?;
        Some(if self.in_window(now) {
            rate
        } else {
            self.otherwise.unwrap_or(UNLIMITED)
        })
    }

    fn selects(&self, group_by: &str, stage: &StageView) -> bool {
        if self.labels.is_empty() {
            stage.label(group_by) == Some(self.name.as_str())
        } else {
            self.labels
                .iter()
                .all(|(k, v)| stage.label(k) == Some(v.as_str()))
        }
    }
}

/// The `static` policy.
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    settings: ControlSettings,
    entries: Vec<StaticEntry>,
    /// (entry index, stage) pairs whose raw rules were sent.
    sent: BTreeSet<(usize, StageId)>,
    tracker: RateTracker,
    now: Duration,
    last: Vec<GroupTarget>,
}

impl StaticPolicy {
    /// A policy with `entries`, in file order.
    pub fn new(settings: ControlSettings, entries: Vec<StaticEntry>) -> Self {
        let mut p = Self {
            settings,
            entries,
            sent: BTreeSet::new(),
            tracker: RateTracker::default(),
            now: Duration::ZERO,
            last: Vec::new(),
        };
        p.last = p.compute_targets(&[]);
        p
    }

    /// The entry whose rate applies to `stage` at `now`.
    fn rate_entry(&self, stage: &StageView, now: Duration) -> Option<usize> {
        let mut best: Option<(bool, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.rate.is_some() && e.selects(&self.settings.group_by, stage) {
                let open = e.in_window(now);
                if best.is_none_or(|(b_open, _)| open || !b_open) {
                    best = Some((open, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    fn compute_targets(&self, stages: &[StageView]) -> Vec<GroupTarget> {
        self.entries
            .iter()
            .map(|e| {
                let members: Vec<&StageView> = stages
                    .iter()
                    .filter(|s| e.selects(&self.settings.group_by, s))
                    .collect();
                let target = e.rate_at(self.now).filter(|&r| r < UNLIMITED);
                GroupTarget {
                    group: e.name.clone(),
                    demand_bytes_per_sec: e.rate.unwrap_or(0.0),
                    target_bytes_per_sec: target.unwrap_or(0.0),
                    achieved_bytes_per_sec: common::achieved(&self.settings, &members),
                    stages: members.len(),
                    hungry: false,
                }
            })
            .collect()
    }
}

impl ControlPolicy for StaticPolicy {
    fn kind(&self) -> &'static str {
        "static"
    }

    fn setup(&self, stage: &StageView) -> Vec<Rule> {
        let entry = self.rate_entry(stage, self.now);
        if entry.is_none() && stage.label(&self.settings.group_by).is_none() {
            return Vec::new();
        }
        let initial = entry
            .and_then(|i| self.entries[i].rate_at(self.now))
            .unwrap_or(UNLIMITED);
        self.settings.setup_rules(&stage.info, initial)
    }

    fn period(&mut self, now: Duration, stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)> {
        self.now = now;
        // Raw rules and rates go out as separate batches (each batch is one
        // transaction in the stage), so a raw rule the stage rejects never
        // holds back a rate.
        let mut raw: BTreeMap<StageId, Vec<Rule>> = BTreeMap::new();
        let mut out: BTreeMap<StageId, Vec<Rule>> = BTreeMap::new();
        // Raw rules, once per (entry, stage) while the window is open.
        let ids: BTreeSet<StageId> = stages.iter().map(|s| s.id).collect();
        self.sent.retain(|(_, id)| ids.contains(id));
        for (i, e) in self.entries.iter().enumerate() {
            if e.rules.is_empty() || !e.in_window(now) {
                continue;
            }
            for s in stages {
                if e.selects(&self.settings.group_by, s) && self.sent.insert((i, s.id)) {
                    raw.entry(s.id).or_default().extend(e.rules.iter().cloned());
                }
            }
        }
        // Rates: each entry's rate split among the stages it governs.
        let mut governed: BTreeMap<usize, Vec<&StageView>> = BTreeMap::new();
        for s in stages {
            if let Some(i) = self.rate_entry(s, now) {
                governed.entry(i).or_default().push(s);
            }
        }
        let mut rates = Vec::new();
        for (i, members) in &governed {
            let Some(total) = self.entries[*i].rate_at(now) else {
                continue;
            };
            if total >= UNLIMITED {
                rates.extend(members.iter().map(|s| (s.id, UNLIMITED)));
                continue;
            }
            let demands: Vec<StageDemand> =
                members.iter().map(|s| self.settings.demand(s)).collect();
            let split = common::split_by_demand(total, &demands);
            rates.extend(members.iter().map(|s| s.id).zip(split));
        }
        for (id, rules) in self.tracker.update(&self.settings, &rates) {
            out.entry(id).or_default().extend(rules);
        }
        self.last = self.compute_targets(stages);
        raw.into_iter().chain(out).collect()
    }

    fn group_label(&self) -> Option<&str> {
        Some(&self.settings.group_by)
    }

    fn set(&mut self, group: &str, key: &str, value: &str) -> Result<(), PolicyError> {
        common::check_group(group)?;
        let rate = match key {
            "rate" | "otherwise" => common::parse_byte_rate(value)
                .map_err(|e| PolicyError::new(format!("{key}: {e}")))?,
            other => {
                return Err(PolicyError::new(format!(
                    "unknown key {other:?} for policy static (known: rate, otherwise)"
                )))
            }
        };
        let found = self.entries.iter().position(|e| e.name == group);
        if key == "otherwise" && found.is_none_or(|i| self.entries[i].rate.is_none()) {
            return Err(PolicyError::new(format!(
                "group {group:?} has no rate: set its rate first"
            )));
        }
        let i = match found {
            Some(i) => i,
            None => {
                common::room_for_group(group, self.entries.len(), true)?;
                self.entries.push(StaticEntry {
                    name: group.to_string(),
                    ..StaticEntry::default()
                });
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[i];
        if key == "rate" {
            e.rate = Some(rate);
        } else {
            e.otherwise = Some(rate);
        }
        Ok(())
    }

    fn targets(&self) -> Vec<GroupTarget> {
        self.last.clone()
    }

    fn controls(&self, stage: &StageView, channel: &str, object: &str) -> bool {
        self.settings.is_controlled(channel, object) && self.rate_entry(stage, self.now).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::super::common::RATE_FLOOR;
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn empty_policy_only_observes() {
        let mut p = StaticPolicy::new(ControlSettings::default(), vec![]);
        let stages = [view(1, "a", Some(5e6), 0)];
        assert!(p.period(secs(1), &stages).is_empty());
        assert!(p.targets().is_empty());
        // Labelled stages still get the (unlimited) DRL, so `set` can limit them.
        let rules = p.setup(&StageView {
            info: info("s", &[("job", "a")], false),
            ..view(1, "a", None, 0)
        });
        assert!(!rules.is_empty());
        assert!(p
            .setup(&StageView {
                info: info("s", &[], false),
                ..view(1, "a", None, 0)
            })
            .is_empty());
    }

    #[test]
    fn scheduled_rate_with_otherwise_and_lift() {
        let entries = vec![
            StaticEntry {
                name: "a".into(),
                rate: Some(10e6),
                start: Some(secs(10)),
                stop: Some(secs(20)),
                ..Default::default()
            },
            StaticEntry {
                name: "b".into(),
                rate: Some(30e6),
                otherwise: Some(5e6),
                start: Some(secs(10)),
                ..Default::default()
            },
        ];
        let mut p = StaticPolicy::new(ControlSettings::default(), entries);
        let stages = [
            view(1, "a", None, 0),
            view(2, "b", None, 0),
            view(3, "b", None, 0),
        ];
        let out = p.period(secs(0), &stages);
        assert_eq!(rate_of(&out, 1), Some(UNLIMITED as u64));
        assert_eq!(rate_of(&out, 2), Some(2_500_000));
        assert_eq!(rate_of(&out, 3), Some(2_500_000));
        assert!(p.period(secs(5), &stages).is_empty());
        let out = p.period(secs(10), &stages);
        assert_eq!(rate_of(&out, 1), Some(10_000_000));
        assert_eq!(rate_of(&out, 2), Some(15_000_000));
        let t = p.targets();
        assert_eq!(t[0].target_bytes_per_sec, 10e6);
        assert_eq!(t[1].stages, 2);
        let out = p.period(secs(20), &stages);
        assert_eq!(rate_of(&out, 1), Some(UNLIMITED as u64));
        assert_eq!(rate_of(&out, 2), None);
        assert_eq!(p.targets()[0].target_bytes_per_sec, 0.0);
    }

    #[test]
    fn label_selection_precedence_and_raw_rules() {
        let rule = Rule::CreateChannel { name: "bg".into() };
        let entries = vec![
            StaticEntry {
                name: "gold".into(),
                labels: [("tier".to_string(), "gold".to_string())].into(),
                rate: Some(50e6),
                rules: vec![rule.clone()],
                ..Default::default()
            },
            StaticEntry {
                name: "night".into(),
                labels: [("tier".to_string(), "gold".to_string())].into(),
                rate: Some(1e6),
                start: Some(secs(100)),
                ..Default::default()
            },
        ];
        let mut p = StaticPolicy::new(ControlSettings::default(), entries);
        let mut gold = view(1, "x", Some(0.0), 0);
        gold.info
            .identity
            .labels
            .insert("tier".into(), "gold".into());
        let other = view(2, "x", None, 0);
        let out = p.period(secs(0), &[gold.clone(), other.clone()]);
        // The open entry wins over the later closed one.
        assert_eq!(rate_of(&out, 1), Some(50_000_000));
        // The raw rules come first, in a batch of their own.
        assert_eq!(
            out.iter().find(|(i, _)| *i == 1).unwrap().1,
            vec![rule.clone()]
        );
        assert_eq!(out.iter().filter(|(i, _)| *i == 1).count(), 2);
        assert!(out.iter().all(|(i, _)| *i != 2));
        // Raw rules are sent once.
        assert!(p.period(secs(1), &[gold.clone()]).is_empty());
        // Later open entry wins.
        let out = p.period(secs(100), &[gold.clone()]);
        assert_eq!(rate_of(&out, 1), Some(1_000_000));
    }

    /// A rate on a channel whose objects take requests by pattern (the
    /// RocksDB plugin's `compaction`): setup removes those mappings, so the
    /// `paiod` DRL receives every request of the channel and the rate holds.
    #[test]
    fn a_rate_on_the_rocksdb_plugins_compaction_channel_reaches_every_request() {
        use paio::{Context, RequestContext, RequestType, Stage};
        let layout = include_str!("../../../../integrations/rocksdb/paio-rocksdb.toml");
        let stage = Stage::from_policy_str(layout, "<plugin>").unwrap();
        let pattern = paio::Pattern {
            request_context: Some(RequestContext::named("compaction_l0").unwrap()),
            ..paio::Pattern::ANY
        };
        let settings = ControlSettings::new("db", "compaction", Some(pattern), false).unwrap();
        let mut p = StaticPolicy::new(
            settings,
            vec![StaticEntry {
                name: "a".into(),
                rate: Some(20.0 * 1048576.0),
                ..Default::default()
            }],
        );
        let live = |stage: &Stage| StageView {
            id: 1,
            info: {
                let mut i = stage.info();
                i.identity.labels.insert("db".into(), "a".into());
                i
            },
            stats: Some(stage.collect()),
            proc_io: None,
        };
        let rules = p.setup(&live(&stage));
        let unmaps = rules
            .iter()
            .filter(|r| matches!(r, Rule::UnmapObject { .. }))
            .count();
        assert_eq!(unmaps, 4, "l0, ln and two reads mappings: {rules:?}");
        stage.apply_all(&rules).unwrap();
        let route = |ctx: &str, rt: RequestType| {
            let c = Context::explicit(1, rt, RequestContext::named(ctx).unwrap(), 10);
            stage.route(&c)
        };
        let paiod = Some(("compaction".to_string(), super::common::OBJECT.to_string()));
        for ctx in ["compaction_l0", "compaction_ln"] {
            assert_eq!(route(ctx, RequestType::WRITE), paiod, "{ctx}");
            assert_eq!(route(ctx, RequestType::READ), paiod, "{ctx}");
        }
        // Other channels keep their objects.
        assert_eq!(
            route("flush", RequestType::WRITE),
            Some(("flush".to_string(), "limit".to_string()))
        );
        // Nothing more to set up; the rate goes to the paiod object.
        assert!(crate::server::missing(p.setup(&live(&stage)), &live(&stage)).is_empty());
        let out = p.period(secs(1), &[live(&stage)]);
        assert_eq!(rate_of(&out, 1), Some(20 << 20));
        stage.apply_all(&out[0].1).unwrap();
    }

    #[test]
    fn set_adds_and_changes_groups() {
        let mut p = StaticPolicy::new(ControlSettings::default(), vec![]);
        p.set("I5", "rate", "100MiB/s").unwrap();
        let stages = [view(1, "I5", Some(0.0), 0), view(2, "I5", Some(90e6), 4)];
        let out = p.period(secs(0), &stages);
        assert_eq!(rate_of(&out, 1), Some(RATE_FLOOR as u64));
        assert_eq!(rate_of(&out, 2), Some((100 << 20) - RATE_FLOOR as u64));
        p.set("I5", "otherwise", "1MiB/s").unwrap();
        assert!(p.set("I6", "otherwise", "1MiB/s").is_err());
        // The refusal left no group behind.
        assert_eq!(p.entries.len(), 1);
        assert!(p
            .set("I5", "demand", "1MiB/s")
            .unwrap_err()
            .message
            .contains("unknown key"));
        assert!(p.set("I5", "rate", "0B/s").is_err());
        assert!(p.set("I5", "rate", "lots").is_err());
        assert!(p.set("*", "max_bandwidth", "1GiB/s").is_err());
        assert_eq!(p.targets()[0].demand_bytes_per_sec, (100 << 20) as f64);
    }

    #[test]
    fn set_keeps_at_most_max_groups() {
        let mut p = StaticPolicy::new(ControlSettings::default(), vec![]);
        fill_groups(0, |g| p.set(g, "rate", "1MiB/s"));
        p.set("g0", "rate", "2MiB/s").unwrap();
    }
}
