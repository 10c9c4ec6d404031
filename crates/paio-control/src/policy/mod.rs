//! Control policies: the feedback loops of the control plane.
//!
//! Each control period paiod hands a [`ControlPolicy`] a [`StageView`] of
//! every registered stage (identity, labels, configuration, the statistics
//! it collected this period, and the kernel's own I/O counters for its
//! process) and applies the rules the policy returns. A stage that
//! (re-)registers first receives [`ControlPolicy::setup`]; paiod leaves out
//! the creation of channels and objects the stage reports it already has, so
//! a stage that outlived a paiod restart keeps its state and simply gets the
//! current targets again.

pub mod calibrate;
pub mod common;
pub mod criticality;
pub mod max_min;
pub mod proportional;
pub mod silk;
pub mod static_policy;

pub use calibrate::Calibrator;
pub use common::{split_by_demand, ControlSettings, StageDemand};
pub use criticality::{CriticalityPolicy, LatencyStatus, LatencyTarget};
pub use max_min::{max_min_fair, MaxMinPolicy};
pub use proportional::{proportional_share, ProportionalPolicy};
pub use silk::{silk_allocate, SilkPolicy};
pub use static_policy::{StaticEntry, StaticPolicy};

use std::collections::BTreeMap;
use std::time::Duration;

use paio::{Rule, StageInfo, StageStats};

/// paiod's identifier of one registration of one stage (a stage that
/// reconnects gets a new one).
pub type StageId = u64;

/// The kernel's I/O counters of a stage's process over the last period, from
/// `/proc/<pid>/io` (`read_bytes`, `write_bytes`: bytes the process caused
/// to be fetched from or sent to the storage layer).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcIo {
    /// `read_bytes` per second over the period.
    pub read_bytes_per_sec: f64,
    /// `write_bytes` per second over the period.
    pub write_bytes_per_sec: f64,
}

/// What a policy sees of one registered stage.
#[derive(Debug, Clone)]
pub struct StageView {
    /// paiod's id for this registration.
    pub id: StageId,
    /// The stage's identity and configuration as it reported them at
    /// registration, updated with the channels, objects and configurations
    /// of the rules paiod has sent it since.
    pub info: StageInfo,
    /// The statistics collected this period (`interval_*` counts and rates
    /// cover the period), `None` until the first collection answers.
    pub stats: Option<StageStats>,
    /// The process's kernel I/O counters over the period, when readable.
    pub proc_io: Option<ProcIo>,
}

impl StageView {
    /// The value of label `key`, if the stage has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.info.identity.labels.get(key).map(String::as_str)
    }
}

/// One group's figures, for `paio status` and the metrics.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupTarget {
    /// The group (the value of the grouping label).
    pub group: String,
    /// What the group asked for (its guarantee or weight-derived share), in
    /// bytes per second; 0 when the policy has no notion of demand.
    pub demand_bytes_per_sec: f64,
    /// The rate the policy allocated to the group this period, bytes/s.
    pub target_bytes_per_sec: f64,
    /// The bandwidth the group's stages achieved this period, bytes/s.
    pub achieved_bytes_per_sec: f64,
    /// Registered stages in the group.
    pub stages: usize,
    /// Whether some of its stages were held back this period or have no
    /// statistics yet (so the group may want more than it achieved).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hungry: bool,
}

/// Error of a policy operation (configuration or `paio ctl set`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PolicyError {
    /// What was expected and what was found.
    pub message: String,
}

impl PolicyError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A control algorithm.
pub trait ControlPolicy: Send {
    /// The policy's kind (`static`, `max_min`, `proportional`, `silk`,
    /// `criticality`).
    fn kind(&self) -> &'static str;

    /// Housekeeping and differentiation rules that prepare a stage that just
    /// registered, applied as one transaction before any
    /// [`ControlPolicy::period`] rules. paiod removes `create_channel` and
    /// `create_object` rules for what the stage already has.
    fn setup(&self, stage: &StageView) -> Vec<Rule>;

    /// One control period at `now` (time since paiod started): rule batches
    /// to apply, in order; each batch is one transaction in its stage, and a
    /// stage may get several. Stages not in the result keep their state.
    fn period(&mut self, now: Duration, stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)>;

    /// The label whose value names a stage's group (`group_by`), for the
    /// policies with groups.
    fn group_label(&self) -> Option<&str> {
        None
    }

    /// `paio ctl set GROUP KEY=VALUE`: changes one parameter at run time
    /// (for example a group's `demand`, or `max_bandwidth` with group `*`).
    fn set(&mut self, group: &str, key: &str, value: &str) -> Result<(), PolicyError>;

    /// The figures of every group the policy knows, as of the last period.
    fn targets(&self) -> Vec<GroupTarget>;

    /// Whether the policy sets the DRL `channel/object` of `stage` itself
    /// (so a rate set by hand would be overwritten in a later period).
    /// `paio ctl set-rate` refuses those objects.
    fn controls(&self, stage: &StageView, channel: &str, object: &str) -> bool;

    /// Whether [`ControlPolicy::period`] reads each stage's
    /// [`StageView::proc_io`] (rate calibration). paiod then samples
    /// `/proc/<pid>/io` every period; otherwise once a second, for `paio
    /// status`.
    fn uses_proc_io(&self) -> bool {
        false
    }

    /// The state of a latency target for critical I/O, for the policies
    /// that have one (`criticality`).
    fn latency(&self) -> Option<LatencyStatus> {
        None
    }

    /// Cluster mode: the rates (bytes/s per group) the cluster's leader
    /// allocated to this node. From the next period on they replace the
    /// policy's own group rates; a group without one keeps the policy's.
    /// Err for the kinds that cannot run in cluster mode (paiod's
    /// configuration refuses `[cluster]` with them).
    fn set_node_allocation(&mut self, rates: &BTreeMap<String, f64>) -> Result<(), PolicyError> {
        let _ = rates;
        Err(PolicyError::new(format!(
            "policy {} does not take cluster allocations (use max_min or proportional)",
            self.kind()
        )))
    }
}

/// Stages grouped by the value of label `key`; stages without it form no
/// group. Groups are ordered by name, stages by id.
pub fn group_by<'a>(stages: &'a [StageView], key: &str) -> BTreeMap<String, Vec<&'a StageView>> {
    let mut groups: BTreeMap<String, Vec<&StageView>> = BTreeMap::new();
    for s in stages {
        if let Some(v) = s.label(key) {
            groups.entry(v.to_string()).or_default().push(s);
        }
    }
    for members in groups.values_mut() {
        members.sort_by_key(|s| s.id);
    }
    groups
}
