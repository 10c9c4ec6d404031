//! The leader's global allocation: a shared back end's bandwidth among
//! jobs whose stages run on many nodes, then each job's part among its
//! nodes.
//!
//! A node *wants* `achieved × (1 + SPLIT_HEADROOM) + RATE_FLOOR` bytes/s
//! for a job, or an unbounded rate when the job's stages there were held
//! back or have no statistics yet (the estimate of
//! [`split_by_demand`]); a job wants the sum over its nodes. With
//! [`GlobalKind::MaxMin`] the configured demands are served first (the
//! served part of Algorithm 2, [`max_min_served`]) and the leftover goes
//! max-min fairly to what the jobs want beyond that; with
//! [`GlobalKind::Proportional`] the capacity is shared by weight, capped
//! by what each job wants ([`proportional_share`]). Either way all of the
//! capacity is handed out, and each job's total is split among its nodes
//! by what they want ([`split_by_demand`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::common::{finite, split_by_demand, StageDemand};
use crate::policy::max_min::{max_min_fair, max_min_served};
use crate::policy::proportional::proportional_share;

/// The global policy's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GlobalKind {
    /// Demands are guarantees (`max_min`): served first, the rest goes to
    /// what the jobs want beyond them.
    MaxMin,
    /// Weighted share (`proportional`), capped by what each job wants.
    Proportional,
}

impl GlobalKind {
    /// The name used in configurations and etcd (`max_min`, `proportional`).
    pub fn name(self) -> &'static str {
        match self {
            GlobalKind::MaxMin => "max_min",
            GlobalKind::Proportional => "proportional",
        }
    }
}

/// One node's use of one job, as the node reported it for its last period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeUse {
    /// The node's name.
    pub node: String,
    /// The job's stages on that node (a node with 0 is ignored).
    pub stages: u32,
    /// Bytes/s the job's stages achieved on that node; None before their
    /// first statistics.
    pub achieved: Option<f64>,
    /// Whether any of those stages was held back (requests waited), i.e.
    /// wants more than it achieved.
    pub hungry: bool,
}

/// A job as the leader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobDemand {
    /// The job's name.
    pub job: String,
    /// Configured demand (max_min's guarantee), bytes/s; 0 when not
    /// configured.
    pub demand: f64,
    /// Configured weight (proportional); 1 when not configured.
    pub weight: f64,
    /// The nodes where the job has stages.
    pub nodes: Vec<NodeUse>,
}

/// A job's allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobAllocation {
    /// The job's name.
    pub job: String,
    /// Bytes/s for the whole job.
    pub total: f64,
    /// Each node's part of `total`, by node name (sums to `total`).
    pub nodes: BTreeMap<String, f64>,
}

/// The allocation of `capacity` bytes/s among `jobs`: one entry per active
/// job (one with a node with `stages > 0`), in `jobs`' order; inactive jobs
/// and nodes with 0 stages are left out.
///
/// A node's wanted rate is unbounded when it is `hungry` or its `achieved`
/// is None, else `achieved × (1 + SPLIT_HEADROOM) + RATE_FLOOR`; a job's
/// wanted rate `W` is the sum over its active nodes.
///
/// - [`GlobalKind::MaxMin`]: `r` = [`max_min_served`]`(capacity, demands)`
///   and its leftover `L`; each total is `r + e` with
///   `e` = [`max_min_fair`]`(L, max(W − r, 0))`.
/// - [`GlobalKind::Proportional`]: totals are
///   [`proportional_share`]`(capacity, weights, W)`.
///
/// The totals sum to `capacity` (when some job is active). Each total is
/// split among the job's active nodes by [`split_by_demand`] over their
/// wanted rates (node entries with the same name are added together).
/// Non-finite or negative `capacity`, demands, weights and achieved rates
/// count as 0 (all weights 0: equal weights).
pub fn allocate(kind: GlobalKind, capacity: f64, jobs: &[JobDemand]) -> Vec<JobAllocation> {
    let active: Vec<(&JobDemand, Vec<&NodeUse>)> = jobs
        .iter()
        .filter_map(|j| {
            let nodes: Vec<&NodeUse> = j.nodes.iter().filter(|n| n.stages > 0).collect();
            (!nodes.is_empty()).then_some((j, nodes))
        })
        .collect();
    if active.is_empty() {
        return Vec::new();
    }
    let capacity = finite(capacity);
    let node_demands: Vec<Vec<StageDemand>> = active
        .iter()
        .map(|(_, nodes)| {
            nodes
                .iter()
                .map(|n| StageDemand {
                    achieved: n.achieved,
                    throttled: n.hungry,
                })
                .collect()
        })
        .collect();
    let wanted: Vec<f64> = node_demands
        .iter()
        .map(|ds| ds.iter().map(StageDemand::wanted).sum())
        .collect();
    let totals: Vec<f64> = match kind {
        GlobalKind::MaxMin => {
            let demands: Vec<f64> = active.iter().map(|(j, _)| finite(j.demand)).collect();
            let (served, left) = max_min_served(capacity, &demands);
            let extra: Vec<f64> = wanted
                .iter()
                .zip(&served)
                .map(|(w, r)| (w - r).max(0.0))
                .collect();
            served
                .iter()
                .zip(max_min_fair(left, &extra))
                .map(|(r, e)| r + e)
                .collect()
        }
        GlobalKind::Proportional => {
            let weights: Vec<f64> = active.iter().map(|(j, _)| finite(j.weight)).collect();
            proportional_share(capacity, &weights, &wanted)
        }
    };
    active
        .iter()
        .zip(&node_demands)
        .zip(totals)
        .map(|(((job, nodes), ds), total)| {
            let mut parts = BTreeMap::new();
            for (n, share) in nodes.iter().zip(split_by_demand(total, ds)) {
                *parts.entry(n.node.clone()).or_insert(0.0) += share;
            }
            JobAllocation {
                job: job.job.clone(),
                total,
                nodes: parts,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::common::RATE_FLOOR;
    use proptest::prelude::*;

    const F: f64 = RATE_FLOOR; // 65 536

    fn node(name: &str, achieved: Option<f64>, hungry: bool) -> NodeUse {
        NodeUse {
            node: name.to_string(),
            stages: 1,
            achieved,
            hungry,
        }
    }

    fn job(name: &str, demand: f64, weight: f64, nodes: Vec<NodeUse>) -> JobDemand {
        JobDemand {
            job: name.to_string(),
            demand,
            weight,
            nodes,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn max_min_example() {
        // Capacity 100 MB/s. a: demand 20, hungry (W = ∞); b: demand 10,
        // achieved 24 → W = 30 + F; c: no demand, idle → W = F.
        // Served (increasing demands): c min(0, 100/3) = 0, b min(10, 50) =
        // 10, a min(20, 90) = 20; L = 70.
        // Extra: a ∞, b 30 + F − 10 = 20 + F, c F. max_min_fair(70, …):
        // c F; b min(20 + F, (70 − F)/2) = 20 + F; a the rest, 50 − 2F.
        // Totals: a 70 − 2F, b 30 + F, c F (sum 100). Plain max_min_fair
        // would give 43.3, 33.3, 23.3.
        let jobs = [
            job("a", 20e6, 1.0, vec![node("n1", Some(5e6), true)]),
            job("b", 10e6, 1.0, vec![node("n1", Some(24e6), false)]),
            job("c", 0.0, 1.0, vec![node("n2", Some(0.0), false)]),
        ];
        let v = allocate(GlobalKind::MaxMin, 100e6, &jobs);
        let totals: Vec<f64> = v.iter().map(|a| a.total).collect();
        let want = [70e6 - 2.0 * F, 30e6 + F, F];
        assert!(totals.iter().zip(want).all(|(t, w)| close(*t, w)), "{v:?}");
        assert_eq!(v[0].job, "a");
        assert_eq!(v[2].nodes, BTreeMap::from([("n2".to_string(), v[2].total)]));
    }

    #[test]
    fn proportional_example() {
        // Capacity 90 MB/s, weights 1, 2, 3 → nominal 15, 30, 45. b is not
        // hungry and achieved 16 → capped at W = 20 + F < 30. a (hungry)
        // and c (no statistics yet) share 70 − F as 1:3:
        // a = 17.5 − F/4, c = 52.5 − 3F/4.
        let jobs = [
            job("a", 0.0, 1.0, vec![node("n1", Some(1e6), true)]),
            job("b", 0.0, 2.0, vec![node("n1", Some(16e6), false)]),
            job("c", 0.0, 3.0, vec![node("n2", None, false)]),
        ];
        let v = allocate(GlobalKind::Proportional, 90e6, &jobs);
        let want = [17.5e6 - F / 4.0, 20e6 + F, 52.5e6 - 3.0 * F / 4.0];
        for (a, w) in v.iter().zip(want) {
            assert!(close(a.total, w), "{v:?}");
        }
        assert_eq!(v.len(), 3);
    }

    #[test]
    fn inactive_jobs_and_nodes_are_left_out() {
        let idle = |n: &str| NodeUse {
            stages: 0,
            ..node(n, Some(1e6), true)
        };
        let jobs = [
            job("gone", 50e6, 1.0, vec![idle("n1"), idle("n2")]),
            job("empty", 50e6, 1.0, vec![]),
            job("y", 0.0, 1.0, vec![idle("n1"), node("n2", None, false)]),
        ];
        for kind in [GlobalKind::MaxMin, GlobalKind::Proportional] {
            let v = allocate(kind, 100e6, &jobs);
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].job, "y");
            assert_eq!(v[0].total, 100e6);
            assert_eq!(v[0].nodes, BTreeMap::from([("n2".to_string(), 100e6)]));
            assert!(allocate(kind, 100e6, &jobs[..2]).is_empty());
            assert!(allocate(kind, 100e6, &[]).is_empty());
            // Non-finite capacity counts as 0.
            let v = allocate(kind, f64::NAN, &jobs);
            assert_eq!(v[0].total, 0.0);
        }
    }

    #[test]
    fn a_job_on_three_nodes_is_split_by_demand() {
        // One job, so it gets all 100 MB/s. n1 wants 8·1.25 + F = 10 + F,
        // n2 4·1.25 + F = 5 + F, n3 is hungry (∞): n2 and n1 get what they
        // want, n3 the rest, 85 − 2F.
        let jobs = [job(
            "j",
            30e6,
            1.0,
            vec![
                node("n1", Some(8e6), false),
                node("n2", Some(4e6), false),
                node("n3", Some(30e6), true),
            ],
        )];
        for kind in [GlobalKind::MaxMin, GlobalKind::Proportional] {
            let v = allocate(kind, 100e6, &jobs);
            assert_eq!(v.len(), 1);
            assert_eq!(v[0].total, 100e6);
            let n = &v[0].nodes;
            assert_eq!(n.len(), 3);
            assert!(close(n["n1"], 10e6 + F), "{n:?}");
            assert!(close(n["n2"], 5e6 + F), "{n:?}");
            assert!(close(n["n3"], 85e6 - 2.0 * F), "{n:?}");
        }
    }

    #[test]
    fn global_kind_names() {
        assert_eq!(
            serde_json::to_string(&GlobalKind::MaxMin).unwrap(),
            "\"max_min\""
        );
        let k: GlobalKind = serde_json::from_str("\"proportional\"").unwrap();
        assert_eq!(k, GlobalKind::Proportional);
    }

    /// A node: 0–2 stages (0: ignored), achieved unknown or in [0, 1e9),
    /// hungry or not; `calm` forces known achieved and not hungry.
    fn node_use(calm: bool) -> impl Strategy<Value = (u32, Option<f64>, bool)> {
        (
            0u32..3,
            proptest::option::weighted(0.8, 0.0..1e9f64),
            any::<bool>(),
        )
            .prop_map(move |(stages, achieved, hungry)| {
                if calm {
                    (stages, Some(achieved.unwrap_or(0.0)), false)
                } else {
                    (stages, achieved, hungry)
                }
            })
    }

    /// 1–8 jobs `j<i>` on 1–5 nodes `n<k>` each, demands 0 (not
    /// configured) or in [0, 1e10), weights 1 or in [0, 100).
    fn jobs(calm: bool) -> impl Strategy<Value = Vec<JobDemand>> {
        let one = (
            prop_oneof![Just(0.0), 0.0..1e10f64],
            prop_oneof![Just(1.0), 0.0..100.0f64],
            proptest::collection::vec(node_use(calm), 1..=5),
        );
        proptest::collection::vec(one, 1..=8).prop_map(|js| {
            js.into_iter()
                .enumerate()
                .map(|(i, (demand, weight, nodes))| JobDemand {
                    job: format!("j{i}"),
                    demand,
                    weight,
                    nodes: nodes
                        .into_iter()
                        .enumerate()
                        .map(|(k, (stages, achieved, hungry))| NodeUse {
                            node: format!("n{k}"),
                            stages,
                            achieved,
                            hungry,
                        })
                        .collect(),
                })
                .collect()
        })
    }

    fn is_active(j: &JobDemand) -> bool {
        j.nodes.iter().any(|n| n.stages > 0)
    }

    /// A job's wanted rate, computed from the report (not with
    /// `StageDemand::wanted`).
    fn job_wanted(j: &JobDemand) -> f64 {
        j.nodes
            .iter()
            .filter(|n| n.stages > 0)
            .map(|n| match n.achieved {
                Some(a) if !n.hungry => a * 1.25 + RATE_FLOOR,
                _ => f64::INFINITY,
            })
            .sum()
    }

    fn kind() -> impl Strategy<Value = GlobalKind> {
        prop_oneof![Just(GlobalKind::MaxMin), Just(GlobalKind::Proportional)]
    }

    proptest! {
        /// Properties 1 and 2: all of the capacity is handed out, values
        /// are finite and non-negative, each job's nodes sum to its total
        /// and are exactly its active nodes.
        #[test]
        fn capacity_is_handed_out_and_split_among_active_nodes(
            kind in kind(), capacity in 0.0..1e11f64, jobs in jobs(false)
        ) {
            let v = allocate(kind, capacity, &jobs);
            let active: Vec<&JobDemand> = jobs.iter().filter(|j| is_active(j)).collect();
            prop_assert_eq!(v.len(), active.len());
            if active.is_empty() {
                return Ok(());
            }
            let sum: f64 = v.iter().map(|a| a.total).sum();
            prop_assert!((sum - capacity).abs() <= 1e-9 * capacity.max(1.0), "{} vs {}", sum, capacity);
            for (a, j) in v.iter().zip(&active) {
                prop_assert_eq!(&a.job, &j.job);
                prop_assert!(a.total.is_finite() && a.total >= 0.0);
                prop_assert!(a.nodes.values().all(|x| x.is_finite() && *x >= 0.0));
                let s: f64 = a.nodes.values().sum();
                prop_assert!((s - a.total).abs() <= 1e-9 * a.total.max(1.0), "{} vs {}", s, a.total);
                let names: Vec<&String> = j.nodes.iter().filter(|n| n.stages > 0).map(|n| &n.node).collect();
                prop_assert_eq!(a.nodes.keys().collect::<Vec<_>>(), names);
            }
        }

        /// Property 3: max_min's guarantees over the active jobs.
        #[test]
        fn max_min_guarantees(capacity in 0.0..1e11f64, jobs in jobs(false)) {
            let v = allocate(GlobalKind::MaxMin, capacity, &jobs);
            let active: Vec<&JobDemand> = jobs.iter().filter(|j| is_active(j)).collect();
            let fits = active.iter().map(|j| j.demand).sum::<f64>() <= capacity;
            let fair = capacity / active.len() as f64;
            for (a, j) in v.iter().zip(&active) {
                prop_assert!(a.total >= j.demand.min(fair) * (1.0 - 1e-9), "{} < min({}, {})", a.total, j.demand, fair);
                if fits {
                    prop_assert!(a.total >= j.demand * (1.0 - 1e-9), "{} < {}", a.total, j.demand);
                }
            }
        }

        /// Property 4: raising one job's demand (max_min) or weight
        /// (proportional), all else equal, never lowers its total.
        ///
        /// Why for max_min (all sums over active jobs, C the capacity,
        /// `M_J = max(W_J, r_J)`): `r_J + min(x_J, μ) = min(M_J, r_J + μ)`,
        /// so the total is `min(M_J, r_J + μ) + ℓ/n` where μ is the second
        /// max-min's level (`Σ min(M, r + μ) = C` when `ℓ = 0`) and
        /// `ℓ = max(C − Σ M, 0)` its equal leftover. Raising `d_J` raises
        /// `r_J` and lowers the others' `r` (water filling), so `M_J` rises
        /// and the others' `M` fall. With `ℓ' > 0` the total
        /// `M_J' + (C − Σ M')/n` cannot fall; with `ℓ' = 0` a lower total
        /// would need `r_J' + μ' < old total`, hence `μ' < μ`, making every
        /// term of `Σ min(M', r' + μ')` at most its old value and J's
        /// smaller, so the sum would be below C: impossible.
        #[test]
        fn raising_demand_or_weight_never_lowers_the_total(
            kind in kind(),
            capacity in 0.0..1e11f64,
            jobs in jobs(false),
            pick in any::<prop::sample::Index>(),
            raise in 0.0..1e10f64,
        ) {
            let k = pick.index(jobs.len());
            let mut more = jobs.clone();
            match kind {
                GlobalKind::MaxMin => more[k].demand += raise,
                GlobalKind::Proportional => more[k].weight += raise / 1e8,
            }
            let total = |js: &[JobDemand]| {
                allocate(kind, capacity, js)
                    .into_iter()
                    .find(|a| a.job == jobs[k].job)
                    .map(|a| a.total)
            };
            if let (Some(before), Some(after)) = (total(&jobs), total(&more)) {
                prop_assert!(after >= before - 1e-6 * capacity.max(1.0), "{} < {}", after, before);
            }
        }

        /// Property 5 (usage-aware max_min), upper bound: a job that is not
        /// hungry (finite `W_J`) gets at most `max(d_J, W_J)` plus an equal
        /// share of what is left of the capacity after every active job's
        /// wanted rate: `max(C − Σ W, 0) / n`.
        ///
        /// Proof: its total is `r_J + e_J` with `e_J` from
        /// `max_min_fair(L, x)`, `x_K = max(W_K − r_K, 0)`, `L = C − Σ r`.
        /// `e_J ≤ x_J + max(L − Σ x, 0)/n` (served at most its extra, plus
        /// its part of the equal leftover), so the total is at most
        /// `max(W_J, r_J) + max(C − Σ max(W_K, r_K), 0)/n`, and
        /// `r_J ≤ d_J`, `max(W_K, r_K) ≥ W_K`. In particular, when some
        /// job is hungry (`Σ W = ∞`) it gets at most `max(d_J, W_J)`.
        #[test]
        fn max_min_gives_no_more_than_a_job_wants(capacity in 0.0..1e11f64, jobs in jobs(false)) {
            let v = allocate(GlobalKind::MaxMin, capacity, &jobs);
            let active: Vec<&JobDemand> = jobs.iter().filter(|j| is_active(j)).collect();
            let all_wanted: f64 = active.iter().map(|j| job_wanted(j)).sum();
            let spare = (capacity - all_wanted).max(0.0) / active.len() as f64;
            for (a, j) in v.iter().zip(&active) {
                let w = job_wanted(j);
                if w.is_finite() {
                    let bound = j.demand.max(w) + spare;
                    prop_assert!(a.total <= bound + 1e-9 * capacity.max(1.0), "{} > {}", a.total, bound);
                }
            }
        }

        /// Property 5, exact case: when no job is hungry and
        /// `Σ max(W_K, d_K) ≤ C`, each job gets exactly
        /// `max(W_J, d_J) + (C − Σ max(W_K, d_K)) / n`.
        ///
        /// Proof: `Σ d ≤ C`, so `r = d` and `L = C − Σ d`; the extras
        /// `x_K = max(W_K − d_K, 0)` sum to `Σ max(W_K, d_K) − Σ d ≤ L`, so
        /// `max_min_fair(L, x)` meets them all and splits
        /// `L − Σ x = C − Σ max(W_K, d_K)` equally.
        #[test]
        fn max_min_meets_every_want_when_they_fit(capacity in 0.0..1e11f64, jobs in jobs(true)) {
            let v = allocate(GlobalKind::MaxMin, capacity, &jobs);
            let active: Vec<&JobDemand> = jobs.iter().filter(|j| is_active(j)).collect();
            let need: f64 = active.iter().map(|j| job_wanted(j).max(j.demand)).sum();
            if need <= capacity {
                let spare = (capacity - need) / active.len() as f64;
                for (a, j) in v.iter().zip(&active) {
                    let exact = job_wanted(j).max(j.demand) + spare;
                    prop_assert!((a.total - exact).abs() <= 1e-9 * capacity.max(1.0), "{} != {}", a.total, exact);
                }
            }
        }
    }
}
