//! Cluster mode: paiod nodes coordinated through etcd (`[cluster]` in
//! paiod's configuration).
//!
//! Every node keeps a lease (its liveness) and, every cluster period,
//! publishes one record of its jobs' use ([`NodeReport`], key
//! `node/<node>`, bound to the lease). One node, the leader, holds key
//! `leader` (created in a transaction, bound to its lease); its *epoch* is
//! that key's create revision, which no later leadership can repeat. The
//! leader watches the reports, computes the global allocation
//! ([`alloc::allocate`]) and writes each node's part ([`NodeAllocation`],
//! key `alloc/<node>`) in a transaction that succeeds only while
//! `leader`'s create revision is still its epoch: a deposed leader's
//! writes are rejected by etcd. Each node watches its own `alloc/<node>`
//! and hands the rates to its local policy, which splits every job's rate
//! among the job's local stages by measured demand.
//!
//! The cluster-wide configuration is in etcd too: `policy` (the global
//! kind and capacity) and `job/<job>` (a job's demand or weight). A node
//! seeds them from its own `[policy]` when they do not exist yet; `paio
//! ctl set` on any node changes them.
//!
//! When etcd cannot be reached, a node keeps its last allocation, its
//! stages keep their rules and its policy keeps controlling locally; it
//! reconnects with a new lease. Nothing on a stage's path waits for etcd.
//! All keys are under `/paio/<cluster>/`.

pub mod alloc;
pub mod keys;
pub mod leader;
pub mod node;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use alloc::{GlobalKind, JobAllocation};

/// Default cluster name.
pub const DEFAULT_CLUSTER: &str = "paio";
/// Default lease: a node (or leader) that stops renewing it is gone after
/// this long; a failover takes at most two of them.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(2);
/// Default cluster period: how often a node publishes its use. etcd takes
/// one write per node per period.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(1);
/// Longest cluster, node or job name.
pub const MAX_NAME: usize = 64;
/// Most jobs one node may report; the leader ignores a report with more.
pub const MAX_JOBS_PER_NODE: usize = 1024;

/// `[cluster]` of paiod's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd's client URLs (`http://host:port`).
    pub endpoints: Vec<String>,
    /// The cluster: the key prefix `/paio/<name>/`.
    pub name: String,
    /// This node's name, unique in the cluster.
    pub node: String,
    /// The liveness lease (whole seconds; etcd raises leases below its
    /// minimum, 2 s with its default timing).
    pub lease: Duration,
    /// How often the node publishes its use (and the leader's slowest
    /// pace). Shorter reacts sooner and costs etcd more writes.
    pub period: Duration,
}

/// What of a `[policy]` reloaded from `new` in cluster mode does not apply,
/// against the `old` one: the kind, `max_bandwidth` and the groups are the
/// cluster's (in etcd, seeded by the first node to connect, changed with
/// `paio ctl set`), so a file's changes to them are said, not silently
/// dropped. `None` when they are the same.
pub fn unapplied_policy_changes(
    old: &crate::config::PolicyConfig,
    new: &crate::config::PolicyConfig,
) -> Option<String> {
    let mut changed = Vec::new();
    if old.kind != new.kind {
        changed.push("kind");
    }
    if old.max_bandwidth != new.max_bandwidth {
        changed.push("max_bandwidth");
    }
    if old.groups != new.groups {
        changed.push("the groups");
    }
    (!changed.is_empty()).then(|| {
        format!(
            "{} changed in the file, but in cluster mode they are the cluster's (kept in etcd, \
             seeded by the first node to connect): the change does not apply; make it with \
             `paio ctl set` on any node, for the whole cluster",
            changed.join(", ")
        )
    })
}

/// Checks a cluster, node or job name: 1 to [`MAX_NAME`] bytes of ASCII
/// letters, digits, `.`, `_` and `-` (so it is one etcd key segment).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "{name:?} must have 1 to {MAX_NAME} characters, has {}",
            name.len()
        ));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(format!(
            "{name:?} has {c:?}; use ASCII letters, digits, `.`, `_` and `-`"
        )),
        None => Ok(()),
    }
}

/// Checks an etcd client URL: `http://host:port` (TLS is not supported).
pub fn check_endpoint(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        if url.starts_with("https://") {
            format!(
                "{url:?}: TLS to etcd is not supported; use an http:// URL on a trusted network"
            )
        } else {
            format!("{url:?} is not an http://host:port URL")
        }
    })?;
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .ok_or_else(|| format!("{url:?} has no port (http://host:port)"))?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("{url:?} is not an http://host:port URL"));
    }
    Ok(())
}

/// This machine's host name (`uname -n`).
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// One job's use on one node, for one cluster period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobUse {
    /// The job's stages on the node.
    pub stages: u32,
    /// Bytes/s they achieved; none before their first statistics.
    pub achieved: Option<f64>,
    /// Whether any of them was held back (wants more than it achieved).
    pub hungry: bool,
}

/// How a node's use of its jobs (a report's `jobs`) differs from an
/// earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseChange {
    /// The same jobs, stages and hungry flags, every achieved figure within
    /// the dead band ([`crate::policy::common::DEADBAND`]) of the earlier
    /// one: nothing for the leader to recompute.
    None,
    /// Only achieved figures moved, by more than the dead band.
    Usage,
    /// A job appeared or left, its stages changed, it became held back or
    /// stopped being so, or its first statistics arrived: the global
    /// allocation may change much, so the node reports it at once.
    Shape,
}

/// How `new` differs from `old` (see [`UseChange`]).
pub fn use_change(old: &BTreeMap<String, JobUse>, new: &BTreeMap<String, JobUse>) -> UseChange {
    let mut change = UseChange::None;
    if old.len() != new.len() {
        return UseChange::Shape;
    }
    for ((j0, u0), (j1, u1)) in old.iter().zip(new) {
        if j0 != j1 || u0.stages != u1.stages || u0.hungry != u1.hungry {
            return UseChange::Shape;
        }
        match (u0.achieved, u1.achieved) {
            (Some(a0), Some(a1)) => {
                if (a1 - a0).abs() > crate::policy::common::DEADBAND * a0.abs() {
                    change = UseChange::Usage;
                }
            }
            (None, None) => {}
            _ => return UseChange::Shape,
        }
    }
    change
}

/// What a node publishes every cluster period, under `node/<node>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeReport {
    /// The node.
    pub node: String,
    /// Counts the node's reports since it started.
    pub seq: u64,
    /// Its jobs (those with local stages).
    pub jobs: BTreeMap<String, JobUse>,
}

impl NodeReport {
    /// Decodes and checks a report read from `node/<node>`: it must name
    /// `node`, have at most [`MAX_JOBS_PER_NODE`] jobs with names
    /// [`check_name`] accepts, and finite, non-negative rates.
    pub fn decode(node: &str, value: &[u8]) -> Result<NodeReport, String> {
        let r: NodeReport = serde_json::from_slice(value).map_err(|e| e.to_string())?;
        if r.node != node {
            return Err(format!("names node {:?} under the key of {node:?}", r.node));
        }
        if r.jobs.len() > MAX_JOBS_PER_NODE {
            return Err(format!(
                "has {} jobs, more than {MAX_JOBS_PER_NODE}",
                r.jobs.len()
            ));
        }
        for (job, u) in &r.jobs {
            check_name(job).map_err(|e| format!("job {e}"))?;
            if u.achieved.is_some_and(|a| !(a.is_finite() && a >= 0.0)) {
                return Err(format!(
                    "job {job}: achieved {:?} is not a rate",
                    u.achieved
                ));
            }
        }
        Ok(r)
    }
}

/// A node's part of the global allocation, under `alloc/<node>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAllocation {
    /// The leadership that wrote it (the `leader` key's create revision).
    pub epoch: i64,
    /// The leader's node name.
    pub leader: String,
    /// The newest report revision the allocation took into account.
    pub based_on: i64,
    /// Bytes/s per job for this node.
    pub jobs: BTreeMap<String, f64>,
}

/// The leader's record, under `leader`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderRecord {
    /// The leader's node name.
    pub node: String,
}

/// The cluster's policy, under `policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    /// Max-min (demands as guarantees) or proportional (weights).
    pub kind: GlobalKind,
    /// The shared back end's bandwidth, bytes/s.
    pub max_bandwidth: f64,
}

/// A job's configuration, under `job/<job>`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    /// Guarantee in bytes/s (max_min).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demand: Option<f64>,
    /// Weight (proportional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_compared_by_shape_then_by_usage() {
        let u = |stages, achieved, hungry| {
            BTreeMap::from([(
                "j".to_string(),
                JobUse {
                    stages,
                    achieved,
                    hungry,
                },
            )])
        };
        let old = u(4, Some(1000.0), false);
        let cases = [
            (u(4, Some(1004.0), false), UseChange::None),
            (u(4, Some(1010.0), false), UseChange::Usage),
            (u(5, Some(1000.0), false), UseChange::Shape),
            (u(4, Some(1000.0), true), UseChange::Shape),
            (u(4, None, false), UseChange::Shape),
        ];
        for (new, want) in cases {
            assert_eq!(use_change(&old, &new), want, "{new:?}");
        }
        assert_eq!(
            use_change(&u(4, None, true), &u(4, None, true)),
            UseChange::None
        );
        assert_eq!(use_change(&old, &BTreeMap::new()), UseChange::Shape);
        let other = BTreeMap::from([(
            "k".to_string(),
            JobUse {
                stages: 4,
                achieved: Some(1000.0),
                hungry: false,
            },
        )]);
        assert_eq!(use_change(&old, &other), UseChange::Shape);
    }

    #[test]
    fn names_are_one_key_segment() {
        assert!(check_name("node-1.rack_2").is_ok());
        assert!(check_name("").unwrap_err().contains("1 to 64"));
        assert!(check_name(&"x".repeat(65)).unwrap_err().contains("has 65"));
        assert!(check_name("a/b").unwrap_err().contains("'/'"));
        assert!(check_name("é").is_err());
    }

    #[test]
    fn reports_are_checked() {
        let ok = br#"{"node":"n1","seq":3,"jobs":{"a":{"stages":2,"achieved":5.0,"hungry":true}}}"#;
        assert_eq!(NodeReport::decode("n1", ok).unwrap().jobs["a"].stages, 2);
        assert!(NodeReport::decode("n2", ok)
            .unwrap_err()
            .contains("under the key"));
        let bad_job =
            br#"{"node":"n1","seq":3,"jobs":{"a/b":{"stages":2,"achieved":5.0,"hungry":true}}}"#;
        assert!(NodeReport::decode("n1", bad_job)
            .unwrap_err()
            .contains("job"));
        let negative =
            br#"{"node":"n1","seq":3,"jobs":{"a":{"stages":2,"achieved":-5.0,"hungry":true}}}"#;
        assert!(NodeReport::decode("n1", negative)
            .unwrap_err()
            .contains("not a rate"));
        let jobs: Vec<String> = (0..=MAX_JOBS_PER_NODE)
            .map(|i| format!(r#""j{i}":{{"stages":1,"achieved":null,"hungry":false}}"#))
            .collect();
        let many = format!(r#"{{"node":"n1","seq":1,"jobs":{{{}}}}}"#, jobs.join(","));
        assert!(NodeReport::decode("n1", many.as_bytes())
            .unwrap_err()
            .contains("more than"));
        assert!(NodeReport::decode("n1", b"{").is_err());
    }

    #[test]
    fn endpoints_are_http_urls_with_a_port() {
        assert!(check_endpoint("http://127.0.0.1:2379").is_ok());
        assert!(check_endpoint("http://etcd-1:2379/").is_ok());
        assert!(check_endpoint("https://e:2379")
            .unwrap_err()
            .contains("TLS"));
        assert!(check_endpoint("127.0.0.1:2379")
            .unwrap_err()
            .contains("not an http"));
        assert!(check_endpoint("http://e").unwrap_err().contains("no port"));
        assert!(check_endpoint("http://e:0").is_err());
        assert!(check_endpoint("http://:2379").is_err());
    }

    /// A reload's changes to what the cluster owns are said, field by field.
    #[test]
    fn a_reload_changing_the_clusters_figures_is_said() {
        let cfg = |text: &str| {
            crate::config::PaiodConfig::parse(text, "<t>")
                .unwrap()
                .policy
        };
        let base = "[policy]\nkind = \"max_min\"\nmax_bandwidth = \"60MiB/s\"\n\
                    [[policy.group]]\nname = \"train\"\ndemand = \"20MiB/s\"\n";
        let old = cfg(base);
        assert_eq!(unapplied_policy_changes(&old, &cfg(base)), None);
        let lower = cfg(&base.replace("60MiB/s", "30MiB/s"));
        let said = unapplied_policy_changes(&old, &lower).unwrap();
        assert!(said.starts_with("max_bandwidth changed"), "{said}");
        assert!(said.contains("paio ctl set"), "{said}");
        let both = cfg(&base
            .replace("60MiB/s", "30MiB/s")
            .replace("20MiB/s", "25MiB/s"));
        let said = unapplied_policy_changes(&old, &both).unwrap();
        assert!(
            said.starts_with("max_bandwidth, the groups changed"),
            "{said}"
        );
    }
}
