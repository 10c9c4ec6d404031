//! The leader's loop: watch the nodes' reports and the cluster's
//! configuration, allocate ([`super::alloc::allocate`]), and write each
//! node's part in transactions fenced by the leader's epoch.
//!
//! Only a change of an input counts: a node's report that repeats its last
//! one (achieved figures within the dead band) changes nothing. Changes
//! are coalesced: the leader writes [`QUIET`] after the last one, or
//! [`MAX_DELAY`] after the first one not yet written while they keep
//! coming, and never sooner than [`MIN_WRITE_GAP`] after the previous
//! write. A node's `alloc/<node>` is written only when one of its jobs'
//! rates moved by more than the stages' dead band
//! ([`crate::policy::common::DEADBAND`]) from what the node was last sent,
//! or its jobs changed, and always once per epoch; more than
//! [`MAX_TXN_OPS`] writes go in several fenced transactions sent together.
//! The [`Summary`] for `paio status --cluster` is written at most once per
//! cluster period.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, Txn, TxnOp, WatchOptions,
};
use serde::{Deserialize, Serialize};

use super::alloc::{allocate, GlobalKind, JobDemand, NodeUse};
use super::keys::Keys;
use super::node::{prefixed, ClusterError};
use super::{use_change, JobRecord, NodeAllocation, NodeReport, PolicyRecord, UseChange};
use crate::peer::Escaped;
use crate::policy::common::DEADBAND;

/// The leader writes once the allocation's inputs have not changed for
/// this long: a burst of reports (nodes that see the same change) costs one
/// write. Longer saves writes and adds as much to every reaction.
pub const QUIET: Duration = Duration::from_millis(10);
/// ... or at the latest this long after the first change not yet written,
/// when inputs keep changing (1,000 nodes whose reports all change arrive
/// over a whole cluster period). Shorter reacts sooner to a change among
/// many, and rewrites every node's allocation more often meanwhile: each
/// such write costs etcd an update and a watch event per node, and a
/// report that queues behind it in etcd delays the next cycle.
pub const MAX_DELAY: Duration = Duration::from_millis(100);
/// Shortest time from the end of one write to the start of the next.
pub const MIN_WRITE_GAP: Duration = Duration::from_millis(10);
/// Operations per transaction (etcd's default `--max-txn-ops`); more nodes
/// than this are written in several transactions, each fenced.
pub const MAX_TXN_OPS: usize = 128;

/// The leader's view of the cluster, under `summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The leadership that wrote it.
    pub epoch: i64,
    /// The leader's node.
    pub leader: String,
    /// The policy in force.
    pub policy: Option<PolicyRecord>,
    /// How many nodes are live (have a report). Names are not listed: every
    /// node receives the summary each time it changes, so its size must not
    /// grow with the cluster (list them with `etcdctl get --prefix
    /// --keys-only /paio/<cluster>/node/`).
    pub nodes: u32,
    /// Every active job.
    pub jobs: Vec<JobSummary>,
}

/// One job in the [`Summary`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSummary {
    /// The job.
    pub job: String,
    /// Nodes where it has stages.
    pub nodes: u32,
    /// Its stages, over all nodes.
    pub stages: u32,
    /// Its configuration.
    pub config: JobRecord,
    /// Bytes/s it achieved, over all nodes.
    pub achieved: f64,
    /// Whether some of its stages were held back.
    pub hungry: bool,
    /// Bytes/s allocated to it.
    pub allocation: f64,
}

/// Bytes/s per job, per node.
type PerNode = BTreeMap<String, BTreeMap<String, f64>>;

/// The leader of one epoch.
pub struct Leader {
    keys: Keys,
    me: String,
    epoch: i64,
    period: Duration,
    reports: BTreeMap<String, (NodeReport, i64)>,
    jobs: BTreeMap<String, JobRecord>,
    policy: Option<PolicyRecord>,
    written: PerNode,
    /// Allocations found in etcd when this leadership began (a previous
    /// leader's): those of nodes without a report are deleted with the
    /// first write, as this leader's own are when their node goes.
    found: std::collections::BTreeSet<String>,
    summary_at: Option<Instant>,
}

impl Leader {
    /// The leader `me` of `epoch`, writing the summary at most once per
    /// `period`.
    pub fn new(keys: Keys, me: String, epoch: i64, period: Duration) -> Self {
        Self {
            keys,
            me,
            epoch,
            period,
            reports: BTreeMap::new(),
            jobs: BTreeMap::new(),
            policy: None,
            written: BTreeMap::new(),
            found: Default::default(),
            summary_at: None,
        }
    }

    /// Leads until deposed (Ok) or an etcd error (Err).
    pub async fn run(mut self, mut client: Client) -> Result<(), ClusterError> {
        let mut rev = 0;
        for prefix in [self.keys.nodes(), self.keys.jobs(), self.keys.policy()] {
            let got = client.get(prefix.as_str(), prefixed()).await?;
            rev = rev.max(got.header().map_or(0, |h| h.revision()));
            for kv in got.kvs() {
                self.absorb(EventType::Put, kv);
            }
        }
        let allocs = self.keys.allocs();
        let got = client
            .get(
                allocs.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await?;
        self.found = got
            .kvs()
            .iter()
            .filter_map(|kv| {
                kv.key_str()
                    .ok()?
                    .strip_prefix(allocs.as_str())
                    .map(str::to_string)
            })
            .collect();
        let from = WatchOptions::new().with_start_revision(rev + 1);
        let mut nodes = client
            .watch(self.keys.nodes(), Some(from.clone().with_prefix()))
            .await?;
        let mut jobs = client
            .watch(self.keys.jobs(), Some(from.clone().with_prefix()))
            .await?;
        let mut policy = client.watch(self.keys.policy(), Some(from)).await?;
        // The first and the last change not yet written (at the start:
        // everything).
        let mut pending: Option<(Instant, Instant)> = Some((Instant::now(), Instant::now()));
        let mut last_write: Option<Instant> = None;
        loop {
            let wait = pending.map(|(first, last)| {
                let due = (last + QUIET).min(first + MAX_DELAY);
                let due = last_write.map_or(due, |t| due.max(t + MIN_WRITE_GAP));
                due.saturating_duration_since(Instant::now())
            });
            let summary_due = self
                .summary_at
                .map_or(Duration::ZERO, |t| self.period.saturating_sub(t.elapsed()));
            let mut changed = false;
            tokio::select! {
                m = nodes.message() => changed = self.events(m?)?,
                m = jobs.message() => changed = self.events(m?)?,
                m = policy.message() => changed = self.events(m?)?,
                _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {
                    if !self.write(&mut client).await? {
                        return Ok(());
                    }
                    pending = None;
                    last_write = Some(Instant::now());
                }
                _ = tokio::time::sleep(summary_due), if wait.is_none() => {
                    // Nothing changed: the summary still goes out once a
                    // period (a node's report can only have changed within
                    // the dead band, see `absorb`).
                    let now = Instant::now();
                    pending = Some((now, now.checked_sub(QUIET).unwrap_or(now)));
                }
            }
            if changed {
                let now = Instant::now();
                pending = Some((pending.map_or(now, |(f, _)| f), now));
            }
        }
    }

    /// Absorbs a watch message; true when it changed an input of the
    /// allocation.
    fn events(&mut self, m: Option<etcd_client::WatchResponse>) -> Result<bool, ClusterError> {
        let m = m.ok_or_else(|| ClusterError::Protocol("etcd ended a leader's watch".into()))?;
        if m.canceled() {
            return Err(ClusterError::Protocol(format!(
                "etcd canceled a leader's watch: {}",
                m.cancel_reason()
            )));
        }
        let mut changed = false;
        for e in m.events() {
            if let Some(kv) = e.kv() {
                changed |= self.absorb(e.event_type(), kv);
            }
        }
        Ok(changed)
    }

    /// Takes one key's new value; true when it changed an input of the
    /// allocation. A node's report that repeats its last one (every node
    /// publishes each period) changes nothing.
    fn absorb(&mut self, kind: EventType, kv: &KeyValue) -> bool {
        let key = kv.key();
        if let Some(node) = Keys::name_in(key, &self.keys.nodes()) {
            match kind {
                EventType::Delete => self.reports.remove(node).is_some(),
                EventType::Put => match NodeReport::decode(node, kv.value()) {
                    Ok(r) => match self.reports.get_mut(node) {
                        Some((old, rev)) if use_change(&old.jobs, &r.jobs) == UseChange::None => {
                            *rev = kv.mod_revision();
                            false
                        }
                        _ => {
                            self.reports
                                .insert(node.to_string(), (r, kv.mod_revision()));
                            true
                        }
                    },
                    Err(e) => {
                        // Its last good report (if any) is dropped too: the
                        // node's use is unknown.
                        tracing::warn!("node {}'s report is ignored: {e}", Escaped(node));
                        self.reports.remove(node).is_some()
                    }
                },
            }
        } else if let Some(job) = Keys::name_in(key, &self.keys.jobs()) {
            match kind {
                EventType::Delete => self.jobs.remove(job).is_some(),
                EventType::Put => match serde_json::from_slice::<JobRecord>(kv.value()) {
                    Ok(r) => self.jobs.insert(job.to_string(), r.clone()) != Some(r),
                    Err(e) => {
                        tracing::warn!("job {}'s configuration is unreadable: {e}", Escaped(job));
                        false
                    }
                },
            }
        } else if key == self.keys.policy().as_bytes() {
            let policy = match kind {
                EventType::Delete => None,
                EventType::Put => match serde_json::from_slice(kv.value()) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!("the cluster's policy is unreadable: {e}");
                        None
                    }
                },
            };
            std::mem::replace(&mut self.policy, policy) != self.policy
        } else {
            false
        }
    }

    /// The global allocation of the current reports: per node, per job.
    fn allocation(&self) -> (Vec<JobDemand>, PerNode, Vec<f64>) {
        let mut by_job: BTreeMap<&str, Vec<NodeUse>> = BTreeMap::new();
        for (node, (r, _)) in &self.reports {
            for (job, u) in &r.jobs {
                by_job.entry(job).or_default().push(NodeUse {
                    node: node.clone(),
                    stages: u.stages,
                    achieved: u.achieved,
                    hungry: u.hungry,
                });
            }
        }
        let demands: Vec<JobDemand> = by_job
            .into_iter()
            .map(|(job, nodes)| {
                let cfg = self.jobs.get(job).cloned().unwrap_or_default();
                JobDemand {
                    job: job.to_string(),
                    demand: cfg.demand.unwrap_or(0.0),
                    weight: cfg.weight.unwrap_or(1.0),
                    nodes,
                }
            })
            .collect();
        let (kind, capacity) = match &self.policy {
            Some(p) => (p.kind, p.max_bandwidth),
            None => (GlobalKind::MaxMin, 0.0),
        };
        let mut per_node: PerNode = self
            .reports
            .keys()
            .map(|n| (n.clone(), BTreeMap::new()))
            .collect();
        let mut totals = Vec::new();
        for a in allocate(kind, capacity, &demands) {
            totals.push(a.total);
            for (node, rate) in a.nodes {
                per_node
                    .entry(node)
                    .or_default()
                    .insert(a.job.clone(), rate);
            }
        }
        (demands, per_node, totals)
    }

    /// Writes what changed; false when deposed.
    async fn write(&mut self, client: &mut Client) -> Result<bool, ClusterError> {
        if self.policy.is_none() {
            // No capacity to share yet (a node seeds it when it connects).
            return Ok(true);
        }
        let (demands, per_node, totals) = self.allocation();
        let based_on = self
            .reports
            .values()
            .map(|(_, rev)| *rev)
            .max()
            .unwrap_or(0);
        let changed = outdated(&self.written, per_node);
        let mut ops: Vec<TxnOp> = changed
            .iter()
            .map(|(node, jobs)| {
                let alloc = NodeAllocation {
                    epoch: self.epoch,
                    leader: self.me.clone(),
                    based_on,
                    jobs: jobs.clone(),
                };
                TxnOp::put(self.keys.alloc(node), to_json(&alloc), None)
            })
            .collect();
        let gone: Vec<String> = self
            .written
            .keys()
            .chain(&self.found)
            .filter(|n| !self.reports.contains_key(*n))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for node in &gone {
            ops.push(TxnOp::delete(self.keys.alloc(node), None));
        }
        let summary_due = self.summary_at.is_none_or(|t| t.elapsed() >= self.period);
        if summary_due {
            let summary = self.summary(&demands, &totals);
            ops.push(TxnOp::put(self.keys.summary(), to_json(&summary), None));
        }
        let fence = Compare::create_revision(self.keys.leader(), CompareOp::Equal, self.epoch);
        // The transactions go out together (etcd commits them in one
        // batch), and each is fenced on its own.
        let sent: Vec<_> = ops
            .chunks(MAX_TXN_OPS)
            .map(|chunk| {
                let mut c = client.clone();
                let txn = Txn::new().when([fence.clone()]).and_then(chunk.to_vec());
                tokio::spawn(async move { c.txn(txn).await })
            })
            .collect();
        let mut deposed = false;
        for h in sent {
            let r = h
                .await
                .map_err(|e| ClusterError::Protocol(format!("an allocation write ended: {e}")))??;
            deposed |= !r.succeeded();
        }
        if deposed {
            tracing::warn!("epoch {} is over: another node leads", self.epoch);
            return Ok(false);
        }
        if summary_due {
            self.summary_at = Some(Instant::now());
        }
        for node in gone {
            self.written.remove(&node);
        }
        self.written.extend(changed);
        self.found.clear();
        Ok(true)
    }

    fn summary(&self, demands: &[JobDemand], totals: &[f64]) -> Summary {
        let jobs = demands
            .iter()
            .filter(|d| d.nodes.iter().any(|n| n.stages > 0))
            .zip(totals)
            .map(|(d, &allocation)| JobSummary {
                job: d.job.clone(),
                nodes: d.nodes.iter().filter(|n| n.stages > 0).count() as u32,
                stages: d.nodes.iter().map(|n| n.stages).sum(),
                config: self.jobs.get(&d.job).cloned().unwrap_or_default(),
                achieved: d.nodes.iter().filter_map(|n| n.achieved).sum(),
                hungry: d.nodes.iter().any(|n| n.hungry),
                allocation,
            })
            .collect();
        Summary {
            epoch: self.epoch,
            leader: self.me.clone(),
            policy: self.policy.clone(),
            nodes: self.reports.len() as u32,
            jobs,
        }
    }
}

/// The nodes whose `computed` allocation is not within the dead band of
/// the one `written` to them (or that have none yet). Only what goes out
/// joins `written`: an allocation that moves within the dead band time
/// after time is still compared with what the node has, so it cannot
/// drift away unwritten.
fn outdated(written: &PerNode, computed: PerNode) -> Vec<(String, BTreeMap<String, f64>)> {
    computed
        .into_iter()
        .filter(|(node, jobs)| !written.get(node).is_some_and(|old| same(old, jobs)))
        .collect()
}

/// Whether two allocations of one node are within the dead band.
fn same(old: &BTreeMap<String, f64>, new: &BTreeMap<String, f64>) -> bool {
    old.len() == new.len()
        && old
            .iter()
            .zip(new)
            .all(|((j0, r0), (j1, r1))| j0 == j1 && (r1 - r0).abs() <= DEADBAND * r0.abs())
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("cluster records serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_within_the_dead_band_are_not_rewritten() {
        let a = BTreeMap::from([("j".to_string(), 1000.0)]);
        let b = BTreeMap::from([("j".to_string(), 1004.0)]);
        let c = BTreeMap::from([("j".to_string(), 1010.0)]);
        let d = BTreeMap::from([("k".to_string(), 1000.0)]);
        assert!(same(&a, &b));
        assert!(!same(&a, &c));
        assert!(!same(&a, &d));
        assert!(!same(&a, &BTreeMap::new()));
    }

    #[test]
    fn an_allocation_that_creeps_within_the_dead_band_is_written_once_it_adds_up() {
        let mut written = PerNode::new();
        let mut sent = Vec::new();
        for rate in [1000.0, 1004.0, 1008.0, 1012.0] {
            let computed =
                PerNode::from([("n".to_string(), BTreeMap::from([("j".to_string(), rate)]))]);
            let changed = outdated(&written, computed);
            sent.extend(changed.iter().map(|(_, jobs)| jobs["j"]));
            written.extend(changed);
        }
        // 1004 is within 0.5 % of 1000 (what the node has), 1008 is not;
        // 1012 is within 0.5 % of 1008.
        assert_eq!(sent, [1000.0, 1008.0]);
    }
}
