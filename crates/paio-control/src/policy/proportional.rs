//! Work-conserving proportional share (kind `proportional`).
//!
//! Each active group (≥ 1 registered stage) has a weight `w` (configured,
//! or 1 for a group that is not in the configuration); its nominal share is
//! `MaxB · w / Σw` over the active groups. The policy is usage-aware:
//!
//! - a group is *underusing* when it has statistics, none of its stages
//!   waited in the DRL last period, it achieved less than its nominal share
//!   and less than [`SATURATION`] (90 %) of the rate it was given last
//!   period. Its demand is capped at `usage × (1 + HEADROOM) + RATE_FLOOR`
//!   ([`HEADROOM`] = 25 %);
//! - every other group (new, throttled, saturated) has an unbounded demand;
//! - [`proportional_share`] then gives capped groups their cap when it is
//!   below their weighted share and redistributes the rest among the others
//!   by weight, in the same period; if every group is capped, what remains
//!   is spread over all groups by weight, so all of `MaxB` is always given
//!   out.
//!
//! A group that ramps back up reaches its capped rate (its usage is then
//! about the rate it was given, ≥ 90 % of it, and its DRL makes it wait), so
//! the next period it is no longer underusing and gets its full weighted
//! share back: at most one period at the cap, then the share.

use std::collections::BTreeMap;
use std::time::Duration;

use paio::Rule;

use super::calibrate::Calibrator;
use super::common::{self, ControlSettings, RateTracker, RATE_FLOOR};
use super::{group_by, ControlPolicy, GroupTarget, PolicyError, StageId, StageView};

/// Margin above its usage that an underusing group keeps.
pub const HEADROOM: f64 = 0.25;
/// Fraction of its last rate above which a group counts as saturated.
pub const SATURATION: f64 = 0.9;

/// Weighted max-min (water-filling) share of `max_b` among groups with
/// `weights` and demand `caps` (`f64::INFINITY`: no cap).
///
/// Groups whose cap is below their weighted share of what is left get
/// their cap; the others share the rest in proportion to their weights;
/// bandwidth still left when every group is capped is spread over all
/// groups by weight. Properties (for a non-empty input with a positive
/// weight): the sum is `max_b`; each group gets at least
/// `min(cap, max_b · w / Σw)`; without caps, exactly `max_b · w / Σw`.
/// Non-positive or NaN weights count as 0 (such groups get nothing unless
/// every weight is 0, in which case the split is equal); NaN or negative
/// caps count as 0.
pub fn proportional_share(max_b: f64, weights: &[f64], caps: &[f64]) -> Vec<f64> {
    let n = weights.len();
    let mut out = vec![0.0; n];
    if n == 0 {
        return out;
    }
    let max_b = common::finite(max_b);
    let mut w: Vec<f64> = weights.iter().map(|&x| common::finite(x)).collect();
    if w.iter().all(|&x| x == 0.0) {
        w = vec![1.0; n];
    }
    let cap = |i: usize| {
        let c = caps.get(i).copied().unwrap_or(f64::INFINITY);
        if c.is_nan() || c < 0.0 {
            0.0
        } else {
            c
        }
    };
    let mut open: Vec<usize> = (0..n).filter(|&i| w[i] > 0.0).collect();
    let mut left = max_b;
    loop {
        let total_w: f64 = open.iter().map(|&i| w[i]).sum();
        if open.is_empty() || total_w <= 0.0 {
            break;
        }
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| cap(i) <= left * w[i] / total_w)
            .collect();
        if capped.is_empty() {
            for &i in &open {
                out[i] = left * w[i] / total_w;
            }
            left = 0.0;
            break;
        }
        for &i in &capped {
            out[i] = cap(i);
            left = (left - cap(i)).max(0.0);
        }
        open.retain(|i| !capped.contains(i));
    }
    if left > 0.0 {
        let total_w: f64 = w.iter().sum();
        for i in 0..n {
            out[i] += left * w[i] / total_w;
        }
    }
    out
}

/// The `proportional` policy.
#[derive(Debug, Clone)]
pub struct ProportionalPolicy {
    settings: ControlSettings,
    max_b: f64,
    weights: BTreeMap<String, f64>,
    /// Rate each group was given last period.
    given: BTreeMap<String, f64>,
    tracker: RateTracker,
    calibrator: Calibrator,
    last: Vec<GroupTarget>,
    cluster: BTreeMap<String, f64>,
}

impl ProportionalPolicy {
    /// A policy sharing `max_bandwidth` bytes/s among `groups` (name,
    /// weight). Non-positive weights count as 0.
    pub fn new(
        settings: ControlSettings,
        max_bandwidth: f64,
        groups: impl IntoIterator<Item = (String, f64)>,
    ) -> Self {
        let weights: BTreeMap<String, f64> = groups
            .into_iter()
            .map(|(g, w)| (g, common::finite(w)))
            .collect();
        let last = weights
            .keys()
            .map(|g| GroupTarget {
                group: g.clone(),
                demand_bytes_per_sec: 0.0,
                target_bytes_per_sec: 0.0,
                achieved_bytes_per_sec: 0.0,
                stages: 0,
                hungry: false,
            })
            .collect();
        Self {
            settings,
            max_b: common::finite(max_bandwidth),
            weights,
            given: BTreeMap::new(),
            tracker: RateTracker::default(),
            calibrator: Calibrator::default(),
            last,
            cluster: BTreeMap::new(),
        }
    }

    fn weight(&self, group: &str) -> f64 {
        self.weights.get(group).copied().unwrap_or(1.0)
    }
}

impl ControlPolicy for ProportionalPolicy {
    fn kind(&self) -> &'static str {
        "proportional"
    }

    fn setup(&self, stage: &StageView) -> Vec<Rule> {
        let Some(g) = stage.label(&self.settings.group_by) else {
            return Vec::new();
        };
        // Its weighted share if it joined the groups of last period.
        let mut total_w: f64 = self.given.keys().map(|k| self.weight(k)).sum();
        if !self.given.contains_key(g) {
            total_w += self.weight(g);
        }
        let initial = if total_w > 0.0 {
            self.max_b * self.weight(g) / total_w
        } else {
            self.max_b
        };
        self.settings.setup_rules(&stage.info, initial)
    }

    fn period(&mut self, _now: Duration, stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)> {
        let groups = group_by(stages, &self.settings.group_by);
        let names: Vec<String> = groups.keys().cloned().collect();
        let weights: Vec<f64> = names.iter().map(|g| self.weight(g)).collect();
        let nominal = proportional_share(self.max_b, &weights, &[]);
        let mut usage = Vec::new();
        let caps: Vec<f64> = names
            .iter()
            .zip(&nominal)
            .map(|(g, &share)| {
                let members = &groups[g];
                let have_stats = members.iter().all(|v| self.settings.counts(v).is_some());
                let throttled = members.iter().any(|v| self.settings.demand(v).throttled);
                let used = common::achieved(&self.settings, members);
                usage.push(used);
                match self.given.get(g) {
                    Some(&given)
                        if have_stats
                            && !throttled
                            && used < share
                            && used < SATURATION * given =>
                    {
                        used * (1.0 + HEADROOM) + RATE_FLOOR
                    }
                    _ => f64::INFINITY,
                }
            })
            .collect();
        let alloc = proportional_share(self.max_b, &weights, &caps);
        let mut rates: BTreeMap<String, f64> =
            names.iter().cloned().zip(alloc.iter().copied()).collect();
        common::overlay(&mut rates, &self.cluster);
        let mut targets: Vec<GroupTarget> = self
            .weights
            .keys()
            .filter(|g| !groups.contains_key(*g))
            .map(|g| GroupTarget {
                group: g.clone(),
                demand_bytes_per_sec: 0.0,
                target_bytes_per_sec: 0.0,
                achieved_bytes_per_sec: 0.0,
                stages: 0,
                hungry: false,
            })
            .collect();
        for (k, g) in names.iter().enumerate() {
            targets.push(GroupTarget {
                group: g.clone(),
                demand_bytes_per_sec: nominal[k],
                target_bytes_per_sec: rates[g],
                achieved_bytes_per_sec: usage[k],
                stages: groups[g].len(),
                hungry: common::hungry(&self.settings, &groups[g]),
            });
        }
        targets.sort_by(|a, b| a.group.cmp(&b.group));
        self.last = targets;
        self.given = rates.clone();
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
            "weight" => {
                common::check_group(group)?;
                let w: f64 = value.trim().parse().map_err(|_| {
                    PolicyError::new(format!("weight: expected a positive number, got {value:?}"))
                })?;
                if !(w.is_finite() && w > 0.0) {
                    return Err(PolicyError::new(format!(
                        "weight: must be a positive number, got {value:?}"
                    )));
                }
                let is_new = !self.weights.contains_key(group);
                common::room_for_group(group, self.weights.len(), is_new)?;
                self.weights.insert(group.to_string(), w);
                Ok(())
            }
            other => Err(PolicyError::new(format!(
                "unknown key {other:?} for policy proportional (known: weight, max_bandwidth)"
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
    use super::*;
    use proptest::prelude::*;

    fn policy() -> ProportionalPolicy {
        ProportionalPolicy::new(
            ControlSettings::default(),
            100e6,
            [("a".to_string(), 1.0), ("b".to_string(), 3.0)],
        )
    }

    #[test]
    fn shares_follow_weights() {
        assert_eq!(
            proportional_share(100.0, &[1.0, 3.0], &[]),
            vec![25.0, 75.0]
        );
        assert_eq!(
            proportional_share(
                100.0,
                &[1.0, 1.0, 2.0],
                &[10.0, f64::INFINITY, f64::INFINITY]
            ),
            vec![10.0, 30.0, 60.0]
        );
        // Everyone capped: the leftover goes out by weight.
        assert_eq!(
            proportional_share(100.0, &[1.0, 1.0], &[10.0, 30.0]),
            vec![40.0, 60.0]
        );
        assert_eq!(
            proportional_share(100.0, &[0.0, 0.0], &[]),
            vec![50.0, 50.0]
        );
        assert!(proportional_share(100.0, &[], &[]).is_empty());
    }

    #[test]
    fn underusing_group_yields_and_regains_its_share() {
        let mut p = policy();
        // Period 1: no statistics, nominal shares 25/75.
        let out = p.period(
            Duration::ZERO,
            &[view(1, "a", None, 0), view(2, "b", None, 0)],
        );
        assert_eq!(rate_of(&out, 1), Some(25_000_000));
        assert_eq!(rate_of(&out, 2), Some(75_000_000));
        // Period 2: b uses only 20 of its 75 and never waits; a is throttled.
        let out = p.period(
            Duration::ZERO,
            &[view(1, "a", Some(25e6), 5), view(2, "b", Some(20e6), 0)],
        );
        let b = 20e6 * (1.0 + HEADROOM) + RATE_FLOOR;
        assert_eq!(rate_of(&out, 2), Some(b.round() as u64));
        assert_eq!(rate_of(&out, 1), Some((100e6 - b).round() as u64));
        let t = p.targets();
        assert_eq!(t[1].demand_bytes_per_sec, 75e6);
        assert_eq!(t[1].achieved_bytes_per_sec, 20e6);
        // Period 3: b ramps up, hits its cap and waits.
        let out = p.period(
            Duration::ZERO,
            &[view(1, "a", Some(75e6), 5), view(2, "b", Some(b), 7)],
        );
        assert_eq!(rate_of(&out, 2), Some(75_000_000));
        assert_eq!(rate_of(&out, 1), Some(25_000_000));
        // Even without waits, using ≥ 90 % of the cap counts as saturated.
        let mut p = policy();
        p.period(
            Duration::ZERO,
            &[view(1, "a", None, 0), view(2, "b", None, 0)],
        );
        p.period(
            Duration::ZERO,
            &[view(1, "a", Some(25e6), 5), view(2, "b", Some(20e6), 0)],
        );
        let out = p.period(
            Duration::ZERO,
            &[view(1, "a", Some(75e6), 5), view(2, "b", Some(0.95 * b), 0)],
        );
        assert_eq!(rate_of(&out, 2), Some(75_000_000));
    }

    #[test]
    fn set_keeps_at_most_max_groups() {
        let mut p = policy();
        fill_groups(2, |g| p.set(g, "weight", "2"));
        p.set("g0", "weight", "3").unwrap();
    }

    #[test]
    fn set_weight_and_errors() {
        let mut p = policy();
        p.set("c", "weight", "4").unwrap();
        let out = p.period(
            Duration::ZERO,
            &[
                view(1, "a", None, 0),
                view(3, "c", None, 0),
                view(4, "new", None, 0),
            ],
        );
        // Weights 1, 4 and 1 (unconfigured).
        assert_eq!(rate_of(&out, 1), Some(16_666_667));
        assert_eq!(rate_of(&out, 3), Some(66_666_667));
        assert_eq!(rate_of(&out, 4), Some(16_666_667));
        assert!(p.set("a", "weight", "0").is_err());
        assert!(p.set("a", "weight", "-1").is_err());
        assert!(p.set("a", "weight", "NaN").is_err());
        assert!(p.set("a", "weight", "x").is_err());
        assert!(p
            .set("a", "demand", "1MB/s")
            .unwrap_err()
            .message
            .contains("unknown key"));
        assert!(p.set("*", "weight", "1").is_err());
        p.set("*", "max_bandwidth", "1GB/s").unwrap();
        assert!(
            p.setup(&StageView {
                info: info("s", &[("job", "a")], false),
                ..view(1, "a", None, 0)
            })
            .len()
                > 2
        );
    }

    proptest! {
        #[test]
        fn proportional_properties(
            max_b in 0.0..1e12f64,
            groups in proptest::collection::vec((0.01..100.0f64, proptest::option::of(0.0..1e11f64)), 1..10),
        ) {
            let weights: Vec<f64> = groups.iter().map(|g| g.0).collect();
            let caps: Vec<f64> = groups.iter().map(|g| g.1.unwrap_or(f64::INFINITY)).collect();
            let v = proportional_share(max_b, &weights, &caps);
            let eps = 1e-9 * max_b.max(1.0);
            let sum: f64 = v.iter().sum();
            prop_assert!((sum - max_b).abs() <= eps, "{} vs {}", sum, max_b);
            let total_w: f64 = weights.iter().sum();
            for i in 0..v.len() {
                prop_assert!(v[i] >= 0.0);
                prop_assert!(v[i] >= caps[i].min(max_b * weights[i] / total_w) - eps);
            }
            let plain = proportional_share(max_b, &weights, &[]);
            for i in 0..v.len() {
                prop_assert!((plain[i] - max_b * weights[i] / total_w).abs() <= eps);
            }
        }
    }
}
