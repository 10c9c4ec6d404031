//! Max-min fair share with per-group guarantees (Algorithm 2 of the paper,
//! kind `max_min`).
//!
//! Configuration: the total bandwidth `MaxB` (`max_bandwidth`) and each
//! group's `demand`. Each period:
//!
//! 1. the active groups are those with at least one registered stage; an
//!    active group that is not configured has demand 0 (it only gets its
//!    part of the leftover);
//! 2. [`max_min_fair`] serves the demands in increasing order, each getting
//!    `min(demand, leftB / groups_left)`, then splits what is left equally
//!    among all active groups (the paper's lines 9–10). So when the active
//!    demands fit in `MaxB` every group gets at least its demand, and all of
//!    `MaxB` is always handed out;
//! 3. each group's rate is split among its stages by measured demand
//!    ([`super::common::split_by_demand`]), calibrated if `calibrate` is
//!    set, and sent as `configure` rules for the stages whose rate changed.
//!
//! Stages without the grouping label are left alone. A stage that registers
//! gets the `paiod` DRL at `MaxB / (active groups + 1)` until the next
//! period sets its real rate.

use std::collections::BTreeMap;
use std::time::Duration;

use paio::Rule;

use super::calibrate::Calibrator;
use super::common::{self, ControlSettings, RateTracker};
use super::{group_by, ControlPolicy, GroupTarget, PolicyError, StageId, StageView};

/// Max-min fair allocation of `max_b` among `demands` (Algorithm 2).
///
/// Demands are served in increasing order, each receiving
/// `min(demand, left / remaining)`; the leftover is then split equally
/// among all entries. Properties: the sum is `max_b` (for a non-empty
/// input), each entry gets at least `min(demand, max_b / n)`, all demands
/// are met when their sum is at most `max_b`, and permuting the input
/// permutes the output. Negative or NaN demands count as 0, an infinite
/// demand takes whatever it can; a negative or non-finite `max_b` counts as
/// 0.
pub fn max_min_fair(max_b: f64, demands: &[f64]) -> Vec<f64> {
    let n = demands.len();
    let (mut out, left) = max_min_served(max_b, demands);
    if n == 0 {
        return out;
    }
    let extra = left / n as f64;
    for r in &mut out {
        *r += extra;
    }
    out
}

/// The served part of [`max_min_fair`] (Algorithm 2 before its lines
/// 9–10): demands served in increasing order, each receiving
/// `min(demand, left / remaining)`, and what is left of `max_b` after
/// them (all of it for an empty input). [`max_min_fair`] adds
/// `leftover / n` to every entry. Inputs are cleaned as there.
pub fn max_min_served(max_b: f64, demands: &[f64]) -> (Vec<f64>, f64) {
    let n = demands.len();
    let mut out = vec![0.0; n];
    let max_b = common::finite(max_b);
    let clean = |d: f64| if d.is_nan() || d < 0.0 { 0.0 } else { d };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| clean(demands[a]).total_cmp(&clean(demands[b])));
    let mut left = max_b;
    for (k, &i) in order.iter().enumerate() {
        let share = left / (n - k) as f64;
        let r = clean(demands[i]).min(share);
        out[i] = r;
        left = (left - r).max(0.0);
    }
    (out, left)
}

/// The `max_min` policy.
#[derive(Debug, Clone)]
pub struct MaxMinPolicy {
    settings: ControlSettings,
    max_b: f64,
    demands: BTreeMap<String, f64>,
    tracker: RateTracker,
    calibrator: Calibrator,
    active: usize,
    last: Vec<GroupTarget>,
    cluster: BTreeMap<String, f64>,
}

impl MaxMinPolicy {
    /// A policy sharing `max_bandwidth` bytes/s among `groups` (name,
    /// demand in bytes/s). Non-positive values count as 0.
    pub fn new(
        settings: ControlSettings,
        max_bandwidth: f64,
        groups: impl IntoIterator<Item = (String, f64)>,
    ) -> Self {
        let mut p = Self {
            settings,
            max_b: common::finite(max_bandwidth),
            demands: groups
                .into_iter()
                .map(|(g, d)| (g, common::finite(d)))
                .collect(),
            tracker: RateTracker::default(),
            calibrator: Calibrator::default(),
            active: 0,
            last: Vec::new(),
            cluster: BTreeMap::new(),
        };
        p.last = p.idle_targets();
        p
    }

    fn idle_targets(&self) -> Vec<GroupTarget> {
        self.demands
            .iter()
            .map(|(g, d)| GroupTarget {
                group: g.clone(),
                demand_bytes_per_sec: *d,
                target_bytes_per_sec: 0.0,
                achieved_bytes_per_sec: 0.0,
                stages: 0,
                hungry: false,
            })
            .collect()
    }
}

impl ControlPolicy for MaxMinPolicy {
    fn kind(&self) -> &'static str {
        "max_min"
    }

    fn setup(&self, stage: &StageView) -> Vec<Rule> {
        if stage.label(&self.settings.group_by).is_none() {
            return Vec::new();
        }
        let initial = self.max_b / (self.active + 1) as f64;
        self.settings.setup_rules(&stage.info, initial)
    }

    fn period(&mut self, _now: Duration, stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)> {
        let groups = group_by(stages, &self.settings.group_by);
        let names: Vec<&String> = groups.keys().collect();
        let demands: Vec<f64> = names
            .iter()
            .map(|g| self.demands.get(*g).copied().unwrap_or(0.0))
            .collect();
        let alloc = max_min_fair(self.max_b, &demands);
        let mut rates: BTreeMap<String, f64> = names
            .iter()
            .zip(&alloc)
            .map(|(g, r)| ((*g).clone(), *r))
            .collect();
        common::overlay(&mut rates, &self.cluster);
        self.active = groups.len();
        let mut targets = self.idle_targets();
        targets.retain(|t| !groups.contains_key(&t.group));
        for (g, members) in &groups {
            targets.push(GroupTarget {
                group: g.clone(),
                demand_bytes_per_sec: self.demands.get(g).copied().unwrap_or(0.0),
                target_bytes_per_sec: rates[g],
                achieved_bytes_per_sec: common::achieved(&self.settings, members),
                stages: members.len(),
                hungry: common::hungry(&self.settings, members),
            });
        }
        targets.sort_by(|a, b| a.group.cmp(&b.group));
        self.last = targets;
        common::distribute(
            &self.settings,
            &mut self.calibrator,
            &mut self.tracker,
            &groups,
            &rates,
        )
    }

    fn group_label(&self) -> Option<&str> {
        Some(&self.settings.group_by)
    }

    fn set(&mut self, group: &str, key: &str, value: &str) -> Result<(), PolicyError> {
        match key {
            "max_bandwidth" => {
                self.max_b = common::parse_max_bandwidth(group, value)?;
                Ok(())
            }
            "demand" => {
                common::check_group(group)?;
                let d = common::parse_byte_rate(value)
                    .map_err(|e| PolicyError::new(format!("demand: {e}")))?;
                let is_new = !self.demands.contains_key(group);
                common::room_for_group(group, self.demands.len(), is_new)?;
                self.demands.insert(group.to_string(), d);
                Ok(())
            }
            other => Err(PolicyError::new(format!(
                "unknown key {other:?} for policy max_min (known: demand, max_bandwidth)"
            ))),
        }
    }

    fn targets(&self) -> Vec<GroupTarget> {
        self.last.clone()
    }

    fn controls(&self, stage: &StageView, channel: &str, object: &str) -> bool {
        self.settings.is_controlled(channel, object)
            && stage.label(&self.settings.group_by).is_some()
    }

    fn uses_proc_io(&self) -> bool {
        self.settings.calibrate
    }

    fn set_node_allocation(&mut self, rates: &BTreeMap<String, f64>) -> Result<(), PolicyError> {
        self.cluster = rates.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::super::common::RATE_FLOOR;
    use super::*;
    use proptest::prelude::*;

    const MIB: f64 = 1024.0 * 1024.0;

    #[test]
    fn paper_example() {
        // MaxB 1 GiB/s; demands 150, 200, 300, 400 MiB/s (sum 1050 > 1024).
        let v = max_min_fair(
            1024.0 * MIB,
            &[150.0 * MIB, 200.0 * MIB, 300.0 * MIB, 400.0 * MIB],
        );
        assert!((v[0] - 150.0 * MIB).abs() < 1.0);
        assert!((v[1] - 200.0 * MIB).abs() < 1.0);
        assert!((v[2] - 300.0 * MIB).abs() < 1.0);
        assert!((v[3] - 374.0 * MIB).abs() < 1.0, "{v:?}");
        // Sum fits: everyone gets demand + equal part of the leftover.
        let v = max_min_fair(1000.0, &[100.0, 200.0]);
        assert_eq!(v, vec![450.0, 550.0]);
        assert!(max_min_fair(10.0, &[]).is_empty());
        assert_eq!(max_min_fair(f64::NAN, &[1.0]), vec![0.0]);
        assert_eq!(max_min_fair(10.0, &[f64::NAN, -1.0]), vec![5.0, 5.0]);
    }

    fn policy() -> MaxMinPolicy {
        MaxMinPolicy::new(
            ControlSettings::default(),
            100e6,
            [("a".to_string(), 10e6), ("b".to_string(), 60e6)],
        )
    }

    #[test]
    fn only_active_groups_share_and_unchanged_rates_are_not_resent() {
        let mut p = policy();
        // Only group a is active: it gets all of MaxB.
        let out = p.period(Duration::ZERO, &[view(1, "a", None, 0)]);
        assert_eq!(rate_of(&out, 1), Some(100_000_000));
        // b joins: a gets 10 + 15, b 60 + 15.
        let stages = [view(1, "a", Some(10e6), 1), view(2, "b", None, 0)];
        let out = p.period(Duration::ZERO, &stages);
        assert_eq!(rate_of(&out, 1), Some(25_000_000));
        assert_eq!(rate_of(&out, 2), Some(75_000_000));
        // Same situation: nothing to send.
        let stages = [view(1, "a", Some(25e6), 1), view(2, "b", Some(70e6), 3)];
        assert!(p.period(Duration::ZERO, &stages).is_empty());
        let t = p.targets();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].group, "a");
        assert_eq!(t[0].demand_bytes_per_sec, 10e6);
        assert_eq!(t[0].target_bytes_per_sec, 25e6);
        assert_eq!(t[0].achieved_bytes_per_sec, 25e6);
        assert_eq!(t[1].stages, 1);
        // Stages without the label are ignored.
        let out = p.period(
            Duration::ZERO,
            &[
                view(1, "a", None, 0),
                StageView {
                    info: info("x", &[], true),
                    ..view(9, "z", None, 0)
                },
            ],
        );
        assert_eq!(rate_of(&out, 9), None);
        assert!(p
            .setup(&StageView {
                info: info("x", &[], false),
                ..view(9, "z", None, 0)
            })
            .is_empty());
    }

    #[test]
    fn group_stages_split_by_demand() {
        let mut p = policy();
        // a: one idle stage and one throttled; b absent.
        let stages = [view(1, "a", Some(0.0), 0), view(2, "a", Some(50e6), 10)];
        let out = p.period(Duration::ZERO, &stages);
        assert_eq!(rate_of(&out, 1), Some(RATE_FLOOR as u64));
        assert_eq!(rate_of(&out, 2), Some(100_000_000 - RATE_FLOOR as u64));
    }

    #[test]
    fn set_changes_demand_and_adds_groups() {
        let mut p = policy();
        p.set("I5", "demand", "20MB/s").unwrap();
        p.set("*", "max_bandwidth", "200MB/s").unwrap();
        let out = p.period(
            Duration::ZERO,
            &[view(1, "I5", None, 0), view(2, "b", None, 0)],
        );
        // 20 and 60 served, 120 left → +60 each.
        assert_eq!(rate_of(&out, 1), Some(80_000_000));
        assert_eq!(rate_of(&out, 2), Some(120_000_000));
        assert!(p
            .set("a", "weight", "2")
            .unwrap_err()
            .message
            .contains("unknown key"));
        assert!(p.set("a", "demand", "fast").is_err());
        assert!(p
            .set("a", "demand", "0MB/s")
            .unwrap_err()
            .message
            .contains("greater than 0"));
        assert!(p.set("a", "demand", "100 iops").is_err());
        assert!(p.set("a", "max_bandwidth", "1GB/s").is_err());
        assert!(p.set("*", "demand", "1GB/s").is_err());
        assert!(p.targets().iter().any(|t| t.group == "I5"));
    }

    #[test]
    fn set_keeps_at_most_max_groups() {
        let mut p = policy();
        fill_groups(2, |g| p.set(g, "demand", "1MiB/s"));
        p.set("g0", "demand", "2MiB/s").unwrap();
    }

    #[test]
    fn setup_installs_the_drl() {
        let p = policy();
        let rules = p.setup(&StageView {
            info: info("s", &[("job", "a")], false),
            ..view(1, "a", None, 0)
        });
        assert!(rules
            .iter()
            .any(|r| matches!(r, Rule::CreateObject { name, .. } if name == "paiod")));
    }

    #[test]
    fn calibration_is_applied_when_enabled() {
        let s = ControlSettings {
            calibrate: true,
            ..Default::default()
        };
        let mut p = MaxMinPolicy::new(s, 100e6, [("a".to_string(), 10e6)]);
        // The kernel sees half the stage's bytes: the rate goes up.
        let v = with_io(view(1, "a", Some(100e6), 1), 50e6);
        let out = p.period(Duration::ZERO, &[v]);
        assert_eq!(rate_of(&out, 1), Some(150_000_000));
    }

    proptest! {
        #[test]
        fn max_min_properties(max_b in 0.0..1e12f64, demands in proptest::collection::vec(0.0..1e11f64, 1..10), seed in any::<u64>()) {
            let v = max_min_fair(max_b, &demands);
            let n = demands.len() as f64;
            let eps = 1e-9 * max_b.max(1.0);
            let sum: f64 = v.iter().sum();
            prop_assert!(sum <= max_b + eps);
            prop_assert!((sum - max_b).abs() <= eps, "leftover not distributed: {} vs {}", sum, max_b);
            for (d, r) in demands.iter().zip(&v) {
                prop_assert!(*r >= 0.0);
                prop_assert!(*r >= d.min(max_b / n) - eps);
            }
            if demands.iter().sum::<f64>() <= max_b {
                for (d, r) in demands.iter().zip(&v) {
                    prop_assert!(*r >= d - eps);
                }
            }
            // Permuting the input permutes the output.
            let mut perm: Vec<usize> = (0..demands.len()).collect();
            let mut s = seed;
            for i in (1..perm.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                perm.swap(i, (s >> 33) as usize % (i + 1));
            }
            let permuted: Vec<f64> = perm.iter().map(|&i| demands[i]).collect();
            let w = max_min_fair(max_b, &permuted);
            for (k, &i) in perm.iter().enumerate() {
                prop_assert!((w[k] - v[i]).abs() <= eps);
            }
        }
    }
}
