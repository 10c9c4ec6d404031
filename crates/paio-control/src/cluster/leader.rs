//! The leader's loop: watch the nodes' reports and the cluster's
//! configuration, allocate ([`super::alloc::allocate`]), and write each
//! node's part in transactions fenced by the leader's epoch.
//!
//! Writes are coalesced: after one, the next waits at least
//! [`MIN_WRITE_GAP`] (events keep being read meanwhile), so a burst of
//! reports costs one allocation. A node's `alloc/<node>` is written only
//! when one of its jobs' rates moved by more than the stages' dead band
//! ([`crate::policy::common::DEADBAND`]) or its jobs changed, and always
//! once per epoch; more than [`MAX_TXN_OPS`] writes go in several fenced
//! transactions sent together. The [`Summary`] for `paio status --cluster` is written
//! at most once per cluster period.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, EventType, KeyValue, Txn, TxnOp, WatchOptions};
use serde::{Deserialize, Serialize};

use super::alloc::{allocate, GlobalKind, JobDemand, NodeUse};
use super::keys::Keys;
use super::node::{prefixed, ClusterError};
use super::{JobRecord, NodeAllocation, NodeReport, PolicyRecord};
use crate::peer::Escaped;
use crate::policy::common::DEADBAND;

/// Shortest time between two allocation writes.
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
    /// The live nodes (those with a report).
    pub nodes: Vec<String>,
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
        let from = WatchOptions::new().with_start_revision(rev + 1);
        let mut nodes = client
            .watch(self.keys.nodes(), Some(from.clone().with_prefix()))
            .await?;
        let mut jobs = client
            .watch(self.keys.jobs(), Some(from.clone().with_prefix()))
            .await?;
        let mut policy = client.watch(self.keys.policy(), Some(from)).await?;
        let mut dirty = true;
        let mut last_write: Option<Instant> = None;
        loop {
            let gap = last_write.map_or(Duration::ZERO, |t| {
                MIN_WRITE_GAP.saturating_sub(t.elapsed())
            });
            let summary_due = self
                .summary_at
                .map_or(Duration::ZERO, |t| self.period.saturating_sub(t.elapsed()));
            tokio::select! {
                m = nodes.message() => self.events(m?)?,
                m = jobs.message() => self.events(m?)?,
                m = policy.message() => self.events(m?)?,
                _ = tokio::time::sleep(gap), if dirty => {
                    if !self.write(&mut client).await? {
                        return Ok(());
                    }
                    dirty = false;
                    last_write = Some(Instant::now());
                    continue;
                }
                _ = tokio::time::sleep(summary_due), if !dirty => {
                    // Nothing changed: the summary still goes out once a
                    // period, so achieved figures stay current.
                    dirty = true;
                    continue;
                }
            }
            dirty = true;
        }
    }

    fn events(&mut self, m: Option<etcd_client::WatchResponse>) -> Result<(), ClusterError> {
        let m = m.ok_or_else(|| ClusterError::Protocol("etcd ended a leader's watch".into()))?;
        if m.canceled() {
            return Err(ClusterError::Protocol(format!(
                "etcd canceled a leader's watch: {}",
                m.cancel_reason()
            )));
        }
        for e in m.events() {
            if let Some(kv) = e.kv() {
                self.absorb(e.event_type(), kv);
            }
        }
        Ok(())
    }

    fn absorb(&mut self, kind: EventType, kv: &KeyValue) {
        let key = kv.key();
        if let Some(node) = Keys::name_in(key, &self.keys.nodes()) {
            match kind {
                EventType::Delete => {
                    self.reports.remove(node);
                }
                EventType::Put => match NodeReport::decode(node, kv.value()) {
                    Ok(r) => {
                        self.reports
                            .insert(node.to_string(), (r, kv.mod_revision()));
                    }
                    Err(e) => {
                        // Its last good report (if any) is dropped too: the
                        // node's use is unknown.
                        self.reports.remove(node);
                        tracing::warn!("node {}'s report is ignored: {e}", Escaped(node));
                    }
                },
            }
        } else if let Some(job) = Keys::name_in(key, &self.keys.jobs()) {
            match kind {
                EventType::Delete => {
                    self.jobs.remove(job);
                }
                EventType::Put => match serde_json::from_slice::<JobRecord>(kv.value()) {
                    Ok(r) => {
                        self.jobs.insert(job.to_string(), r);
                    }
                    Err(e) => {
                        tracing::warn!("job {}'s configuration is unreadable: {e}", Escaped(job))
                    }
                },
            }
        } else if key == self.keys.policy().as_bytes() {
            self.policy = match kind {
                EventType::Delete => None,
                EventType::Put => match serde_json::from_slice(kv.value()) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!("the cluster's policy is unreadable: {e}");
                        None
                    }
                },
            };
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
        let mut ops = Vec::new();
        for (node, jobs) in &per_node {
            if self.written.get(node).is_some_and(|old| same(old, jobs)) {
                continue;
            }
            let alloc = NodeAllocation {
                epoch: self.epoch,
                leader: self.me.clone(),
                based_on,
                jobs: jobs.clone(),
            };
            ops.push(TxnOp::put(self.keys.alloc(node), to_json(&alloc), None));
        }
        let gone: Vec<String> = self
            .written
            .keys()
            .filter(|n| !per_node.contains_key(*n))
            .cloned()
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
        self.written = per_node;
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
            nodes: self.reports.keys().cloned().collect(),
            jobs,
        }
    }
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
}
