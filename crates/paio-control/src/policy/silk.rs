//! SILK's tail-latency control for LSM key-value stores (Algorithm 1 of the
//! paper, §8.1; kind `silk`).
//!
//! # The stage layout (contract with the RocksDB plugin)
//!
//! The policy controls stages laid out as follows (names are fixed, not
//! configurable; they are the constants of this module):
//!
//! | channel | objects | request contexts | figure |
//! |---|---|---|---|
//! | `foreground` | `default` (noop) | `foreground`: user threads' reads and writes | `Fg`: the channel's bytes/s |
//! | `flush` | `limit` (DRL, default object) | `flush` | `Fl`: the channel's bytes/s |
//! | `compaction` | `l0` (DRL, high priority), `ln` (DRL, default object) | `compaction_l0` → `l0` (L0→L0 and L0→Lbase compactions), `compaction_ln` → `ln` (higher levels) | `L0`, `LN`: the objects' bytes/s |
//! | `unthrottled` | `default` (noop) | WAL, MANIFEST, CURRENT, OPTIONS: never limited | ignored |
//! | `other` (default channel) | `default` (noop) | everything else | ignored |
//!
//! Only stages whose configuration (as paiod knows it) has both a `flush`
//! and a `compaction` channel are controlled; the policy neither reads nor
//! limits `unthrottled` and `other`.
//!
//! # Setup
//!
//! [`ControlPolicy::setup`] gives every registering stage what the policy
//! needs of that layout, creating only what is missing: the
//! `request_context` classifier (a `set_classifiers` keeping the enabled
//! ones, only when it is not enabled: patterns may only name enabled
//! classifiers), the `foreground`, `flush` and `compaction` channels, the
//! DRL objects `limit`, `l0` and `ln` at `{minB, minB, KVSB}` (priority
//! objects under [`SilkPolicy::write_priority`], which replace a layout's
//! DRLs keeping their mappings), `limit` and `ln` as default objects, the
//! object mapping `compaction_l0 → l0` and the channel mappings of the four
//! request contexts. Mapping rules
//! (`map_channel`, `map_object`, `set_default_object`) are idempotent in the
//! stage (an identical pattern is replaced, not duplicated), and are only
//! emitted when the stage's configuration lacks them. The `unthrottled` and
//! `other` channels and the default channel are left alone: the policy does
//! not use them and their classification (by file) belongs to the plugin. So
//! on a stage with only the interposer's default layout, requests carrying
//! the four contexts are routed (a request-context pattern beats a
//! request-type one) and everything else keeps going where it went.
//!
//! Without [`SilkPolicy::writes_only`] a class's reads and writes are
//! limited together: where the layout sends flush or compaction reads to a
//! [`READS_OBJECT`] (the RocksDB plugin's layout does, so that its rate keys
//! limit writes), setup unmaps those patterns.
//!
//! With [`SilkPolicy::writes_only`] it also enables the `request_type`
//! classifier and sends each class's reads to an object [`READS_OBJECT`] in
//! `flush` and `compaction` (`{request_context, request_type = read}`
//! patterns: two classifiers outrank one); the one in `compaction` is a DRL
//! at `KVSB_r` under a read budget ([`SilkPolicy::read_bandwidth`]), every
//! other one Noop.
//!
//! # Each period (Algorithm 1)
//!
//! For each controlled stage, from the period's statistics (`bytes_per_sec`,
//! which paiod rewrites as rates over its own interval):
//!
//! 1. `leftB = max(KVSB − Fg, minB)`;
//! 2. with `Fl > 0` meaning "flushes are active" and `L0 > 0` "high-priority
//!    compactions are active":
//!    - both: `{B_Fl, B_L0, B_LN} = {leftB/2, leftB/2, minB}`;
//!    - flushes only: `{leftB, minB, minB}`;
//!    - L0 only: `{minB, leftB, minB}`;
//!    - neither: `{minB, minB, leftB}`;
//! 3. with a read budget `KVSB_r` (`writes_only` and `read_bandwidth`):
//!    `B_r = max(KVSB_r − Fg, minB)` for `compaction/reads`, the reads of
//!    compactions of every level; with a read-latency target as well
//!    ([`SilkPolicy::read_latency_target`]), `KVSB_r` is replaced by the
//!    stage's read cap `C_r ≤ KVSB_r`: halved (never below `minB`) in a
//!    period whose foreground p99 latency exceeded the target, raised by
//!    [`READ_CAP_STEP`]` · KVSB_r` (never above `KVSB_r`) in any other;
//! 4. `configure` rules set the rates of `flush/limit`, `compaction/l0`,
//!    `compaction/ln` (and `compaction/reads`, with
//!    [`SilkPolicy::read_split`] as its `split`), only for rates that moved by more than
//!    [`DEADBAND`] since the last one sent to that
//!    object, and never below [`RATE_FLOOR`](super::common::RATE_FLOOR).
//!
//! Choices:
//!
//! - **Activity.** A class is active when its bytes/s in the period are
//!   positive *or* requests waited in its object during the period
//!   (`wait.waited_ops > 0`): a throttled class still moves bytes, but one
//!   held back for a whole period may move none, and must not be mistaken
//!   for an idle one (which would hand its bandwidth away and keep it
//!   starved). A request still waiting when the period ends is only counted
//!   when its wait completes. A stage without statistics yet is all idle.
//! - **Each high-priority class gets at least `minB`.** When `leftB < 2·minB`
//!   (the foreground takes nearly all of `KVSB`) the both-active branch
//!   gives `max(leftB/2, minB)` to flushes and to L0 compactions, following
//!   the paper's "flushes and L0→L1 compactions … are provisioned with
//!   minimum I/O bandwidth (minB)". Everywhere else the allocation is
//!   exactly the algorithm's. So every rate is at least `minB` and
//!   `B_Fl + B_L0 + B_LN ≤ leftB + 2·minB` (the algorithm over-commits `KVSB`
//!   by up to `2·minB` to keep every background flow moving).
//! - **Missing objects.** A `configure` is only sent for objects the stage
//!   has (a batch is one transaction: one unknown object would void it).
//!
//! # Figures (`paio status`, metrics)
//!
//! One [`GroupTarget`] per stage, named by the stage's `instance` label or
//! else `name:pid` (stages sharing an `instance` are summed):
//! `demand` = KVSB, the store's budget; `target` = `Fg + B_Fl + B_L0 + B_LN`,
//! what the policy lets the store use this period (the foreground is not
//! limited, so its measured rate counts as granted); `achieved` =
//! `Fg + Fl + L0 + LN`, what the four classes used.
//!
//! # Run-time changes
//!
//! `paio ctl set '*' kvs_bandwidth=200MiB/s`, `min_bandwidth=10MiB/s` and
//! (with `writes_only`) `read_bandwidth=150MiB/s`, (with a read budget)
//! `read_split=256KiB` (sent with the next period's rates), (with a read
//! budget) `read_latency_target=2ms` or `off`; `minB < KVSB` and
//! `minB < KVSB_r` must keep holding. A `read_bandwidth` set at run time
//! applies to stages whose compaction `reads` object is a DRL: the RocksDB
//! plugin's, and stages that registered while a read budget was configured.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use paio::object::{PriorityConfig, SPLIT_ALIGN};
use paio::stats::{Counts, LatencySummary};
use paio::units::Rate;
use paio::{Classifier, ObjectConfig, Pattern, RequestContext, Rule, StageInfo};

use super::common::{self, DEADBAND};
use super::{ControlPolicy, GroupTarget, PolicyError, StageId, StageView};

/// Channel of user threads' reads and writes (measured, not limited).
pub const FOREGROUND: &str = "foreground";
/// Channel of memtable flushes.
pub const FLUSH: &str = "flush";
/// The rate-limited object of [`FLUSH`] (its default object): a DRL, or a
/// priority object under [`SilkPolicy::write_priority`].
pub const FLUSH_OBJECT: &str = "limit";
/// Channel of compactions.
pub const COMPACTION: &str = "compaction";
/// The high-priority rate-limited object of [`COMPACTION`] (L0
/// compactions), of the same kind as [`FLUSH_OBJECT`].
pub const L0_OBJECT: &str = "l0";
/// The low-priority rate-limited object of [`COMPACTION`] (its default
/// object), of the same kind as [`FLUSH_OBJECT`].
pub const LN_OBJECT: &str = "ln";
/// The object of [`FLUSH`] and [`COMPACTION`] that takes their reads when
/// only writes are limited ([`SilkPolicy::writes_only`]): Noop, except in
/// [`COMPACTION`] under a read budget ([`SilkPolicy::read_bandwidth`]),
/// where it is a DRL.
pub const READS_OBJECT: &str = "reads";
/// Request context of foreground requests.
pub const CTX_FOREGROUND: &str = "foreground";
/// Request context of flushes.
pub const CTX_FLUSH: &str = "flush";
/// Request context of L0→L0 and L0→Lbase compactions.
pub const CTX_L0: &str = "compaction_l0";
/// Request context of higher-level compactions.
pub const CTX_LN: &str = "compaction_ln";
/// Label that names a stage's figures, when present.
pub const INSTANCE_LABEL: &str = "instance";
/// `minB` when not configured: 10 MiB/s, as in the paper.
pub const DEFAULT_MIN_BANDWIDTH: f64 = 10.0 * 1024.0 * 1024.0;
/// Under a read-latency target, the fraction of `KVSB_r` the read cap
/// regains in each period the target is met (additive increase): from
/// `minB` back to `KVSB_r` in about 20 periods (2 s at paiod's 100 ms).
/// Larger steps give compactions their reads back sooner after a burst of
/// slow foreground reads and probe the device's limit harder (more periods
/// above the target); smaller ones keep the foreground safer for longer and
/// leave more of a backlog.
pub const READ_CAP_STEP: f64 = 0.05;
/// Consecutive periods in which a stage's foreground moves bytes with no
/// call latency before paiod warns that its read-latency target cannot be
/// judged (one such period can be a collection taken by another collector).
pub const UNJUDGED_PERIODS: u32 = 10;

/// Which branch of Algorithm 1 applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// Flushes and L0 compactions active: they share `leftB`.
    FlushAndL0,
    /// Only flushes active: they get `leftB`.
    Flush,
    /// Only L0 compactions active: they get `leftB`.
    L0,
    /// Neither: higher-level compactions get `leftB`.
    Neither,
}

/// One period's allocation, bytes/s (before flooring and rounding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allocation {
    /// `leftB = max(KVSB − Fg, minB)`.
    pub left: f64,
    /// `B_Fl`.
    pub flush: f64,
    /// `B_L0`.
    pub l0: f64,
    /// `B_LN`.
    pub ln: f64,
    /// The branch taken.
    pub branch: Branch,
}

impl Allocation {
    /// `B_Fl + B_L0 + B_LN`.
    pub fn total(&self) -> f64 {
        self.flush + self.l0 + self.ln
    }
}

/// Algorithm 1: the allocation for a foreground rate `fg` and the activity
/// of flushes and L0 compactions. A negative or non-finite `fg` counts as 0;
/// both-active shares are raised to `min_b` (see the module doc).
pub fn silk_allocate(
    kvs_b: f64,
    min_b: f64,
    fg: f64,
    flush_active: bool,
    l0_active: bool,
) -> Allocation {
    let kvs_b = common::finite(kvs_b);
    let min_b = common::finite(min_b);
    let left = (kvs_b - common::finite(fg)).max(min_b);
    let (flush, l0, ln, branch) = match (flush_active, l0_active) {
        (true, true) => {
            let half = (left / 2.0).max(min_b);
            (half, half, min_b, Branch::FlushAndL0)
        }
        (true, false) => (left, min_b, min_b, Branch::Flush),
        (false, true) => (min_b, left, min_b, Branch::L0),
        (false, false) => (min_b, min_b, left, Branch::Neither),
    };
    Allocation {
        left,
        flush,
        l0,
        ln,
        branch,
    }
}

/// The compactions' read rate under a read budget `read_b`:
/// `max(read_b − fg, min_b)` (a negative or non-finite `fg` counts as 0).
pub fn read_allocation(read_b: f64, min_b: f64, fg: f64) -> f64 {
    (common::finite(read_b) - common::finite(fg)).max(common::finite(min_b))
}

/// The next read cap under a read-latency target: `cap / 2` (at least
/// `min_b`) when the foreground missed the target this period, else
/// `cap + READ_CAP_STEP · read_b` (at most `read_b`). The result is always
/// in `[min_b, read_b]` for `min_b < read_b`.
pub fn next_read_cap(cap: f64, read_b: f64, min_b: f64, missed: bool) -> f64 {
    let cap = if missed {
        cap / 2.0
    } else {
        cap + READ_CAP_STEP * read_b
    };
    cap.clamp(min_b, read_b)
}

/// A controlled stage's figures for one period, bytes/s.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// `Fg`: the `foreground` channel.
    pub fg: f64,
    /// `Fl`: the `flush` channel.
    pub fl: f64,
    /// `L0`: the `compaction/l0` object.
    pub l0: f64,
    /// `LN`: the `compaction/ln` object.
    pub ln: f64,
    /// Flushes moved bytes or waited in their DRL this period.
    pub flush_active: bool,
    /// L0 compactions moved bytes or waited in their DRL this period.
    pub l0_active: bool,
    /// The foreground requests' call latency over the stage's last
    /// collection interval (two-phase requests: the RocksDB plugin's).
    pub fg_latency: LatencySummary,
}

impl Usage {
    /// The stage's figures, `None` when it lacks the `flush` or
    /// `compaction` channel (it is not controlled). Without statistics,
    /// everything is 0 and idle.
    pub fn of(view: &StageView) -> Option<Usage> {
        if !has_channel(&view.info, FLUSH) || !has_channel(&view.info, COMPACTION) {
            return None;
        }
        let Some(stats) = &view.stats else {
            return Some(Usage::default());
        };
        let channel = |name: &str| stats.channels.iter().find(|c| c.name == name);
        let object = |ch: &str, obj: &str| {
            channel(ch)?
                .objects
                .iter()
                .find(|o| o.name == obj)
                .map(|o| &o.counts)
        };
        let fg = channel(FOREGROUND).map(|c| &c.counts);
        // The DRL object's figures: what the allocation limits (with only
        // writes limited, the flush's reads go to another object).
        let fl = object(FLUSH, FLUSH_OBJECT).or_else(|| channel(FLUSH).map(|c| &c.counts));
        let l0 = object(COMPACTION, L0_OBJECT);
        let ln = object(COMPACTION, LN_OBJECT);
        Some(Usage {
            fg: rate(fg),
            fl: rate(fl),
            l0: rate(l0),
            ln: rate(ln),
            flush_active: active(fl),
            l0_active: active(l0),
            fg_latency: fg.map(|c| c.latency).unwrap_or_default(),
        })
    }

    /// `Fg + Fl + L0 + LN`.
    pub fn total(&self) -> f64 {
        self.fg + self.fl + self.l0 + self.ln
    }
}

fn rate(c: Option<&Counts>) -> f64 {
    c.map_or(0.0, |c| common::finite(c.bytes_per_sec))
}

fn active(c: Option<&Counts>) -> bool {
    c.is_some_and(|c| common::finite(c.bytes_per_sec) > 0.0 || c.wait.waited_ops > 0)
}

fn has_channel(info: &StageInfo, name: &str) -> bool {
    info.channels.iter().any(|c| c.name == name)
}

fn has_object(info: &StageInfo, channel: &str, object: &str) -> bool {
    info.channels
        .iter()
        .any(|c| c.name == channel && c.objects.iter().any(|o| o.name == object))
}

/// The stage has `channel/object` and it is of `kind` (a `configure` of
/// another kind would void the whole batch).
fn has_kind(info: &StageInfo, channel: &str, object: &str, kind: &str) -> bool {
    info.channels
        .iter()
        .any(|c| c.name == channel && c.objects.iter().any(|o| o.name == object && o.kind == kind))
}

/// A priority object with settings `p` at `rate` bytes/s.
fn priority_at(p: &PriorityConfig, rate: f64) -> ObjectConfig {
    ObjectConfig::Priority(PriorityConfig {
        rate: Some(Rate::bytes_per_sec(common::to_rate(rate))),
        rate_critical: true,
        ..p.clone()
    })
}

/// The kind of a controlled object with `priority` settings or without.
fn kind_of(priority: Option<&PriorityConfig>) -> &'static str {
    if priority.is_some() {
        "priority"
    } else {
        "drl"
    }
}

/// Rules that replace `channel/object` of `info` by one configured as
/// `config`, in one batch: its mappings are removed and made again, and
/// the channel's default, when it is the object, passes to the
/// pass-through object meanwhile (the stage refuses to remove an object in
/// use).
fn replace_object(
    info: &StageInfo,
    channel: &str,
    object: &str,
    config: ObjectConfig,
) -> Vec<Rule> {
    let Some(c) = info.channels.iter().find(|c| c.name == channel) else {
        return Vec::new();
    };
    let patterns: Vec<Pattern> = (c.object_rules.iter())
        .filter(|(_, o)| o == object)
        .map(|(p, _)| *p)
        .collect();
    let is_default = c.default_object == object;
    let default = |object: &str| Rule::SetDefaultObject {
        channel: channel.into(),
        object: object.into(),
    };
    let mut rules: Vec<Rule> = (patterns.iter())
        .map(|p| Rule::UnmapObject {
            channel: channel.into(),
            pattern: *p,
        })
        .collect();
    if is_default {
        rules.push(default(paio::channel::DEFAULT_OBJECT));
    }
    rules.push(Rule::RemoveObject {
        channel: channel.into(),
        name: object.into(),
    });
    rules.push(Rule::CreateObject {
        channel: channel.into(),
        name: object.into(),
        config,
    });
    rules.extend(patterns.iter().map(|p| Rule::MapObject {
        channel: channel.into(),
        pattern: *p,
        object: object.into(),
    }));
    if is_default {
        rules.push(default(object));
    }
    rules
}

/// The pattern `{ request_context = name }`.
fn context_pattern(name: &str) -> Pattern {
    Pattern {
        request_context: Some(
            RequestContext::named(name).expect("a fixed request context name can be interned"),
        ),
        ..Pattern::ANY
    }
}

/// `r` bytes/s for messages: in MiB/s from 1 MiB/s up, else in B/s.
fn fmt_rate(r: f64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if r >= MIB {
        format!("{:.1} MiB/s", r / MIB)
    } else {
        format!("{} B/s", r.round())
    }
}

/// The `silk` policy.
#[derive(Debug, Clone)]
pub struct SilkPolicy {
    kvs_b: f64,
    min_b: f64,
    writes_only: bool,
    /// The read budget `KVSB_r` (bytes/s), only with `writes_only`.
    read_b: Option<f64>,
    /// `split` of the compaction reads' DRL in bytes (0: off), only with a
    /// read budget.
    read_split: u64,
    /// The compaction reads' priority object's settings (its `rate` set
    /// each period), instead of a DRL; only with a read budget.
    read_priority: Option<PriorityConfig>,
    /// The flush and compaction write objects' priority settings (their
    /// `rate` set each period), instead of DRLs; only with `writes_only`.
    write_priority: Option<PriorityConfig>,
    /// The foreground p99 latency the read caps steer by, only with a read
    /// budget.
    read_target: Option<Duration>,
    /// Each controlled stage's read cap `C_r` (bytes/s), under a target.
    read_caps: BTreeMap<StageId, f64>,
    /// Under a target: consecutive periods in which each stage's foreground
    /// moved bytes and reported no call latency.
    unjudged: BTreeMap<StageId, u32>,
    /// Rate last sent to each (stage, channel, object).
    last: BTreeMap<(StageId, &'static str, &'static str), u64>,
    targets: Vec<GroupTarget>,
}

/// Checks `0 < min_b < kvs_b`.
pub fn check_bandwidths(kvs_b: f64, min_b: f64) -> Result<(), PolicyError> {
    check_budget("kvs_bandwidth", kvs_b, min_b)
}

/// Checks a read budget: `0 < min_b < read_b`, and only with `writes_only`
/// (otherwise reads already share each class's rate).
pub fn check_read_bandwidth(read_b: f64, min_b: f64, writes_only: bool) -> Result<(), PolicyError> {
    if !writes_only {
        return Err(PolicyError::new(
            "read_bandwidth needs writes_only = true (without it, reads already share each class's rate)",
        ));
    }
    check_budget("read_bandwidth", read_b, min_b)
}

/// Checks a `read_split`: 0 (off), or a multiple of 4 KiB with a read
/// budget `read_b`.
pub fn check_read_split(bytes: u64, read_b: Option<f64>) -> Result<(), PolicyError> {
    if bytes == 0 {
        return Ok(());
    }
    if read_b.is_none() {
        return Err(PolicyError::new(
            "read_split needs read_bandwidth (it splits the reads of the compaction reads' DRL, \
             which exists only under a read budget)",
        ));
    }
    if !bytes.is_multiple_of(SPLIT_ALIGN) {
        return Err(PolicyError::new(format!(
            "read_split must be 0 (off) or a multiple of 4 KiB, got {bytes} bytes"
        )));
    }
    Ok(())
}

/// Checks that a `read_split` (bytes, 0: off) and a `read_priority` are
/// not both given: the priority object splits by its own `split`.
pub fn check_split_alone(bytes: u64, priority: Option<&PriorityConfig>) -> Result<(), PolicyError> {
    if bytes != 0 && priority.is_some() {
        return Err(PolicyError::new(
            "read_split and read_priority both given: the compaction reads' priority object \
             splits by its own `split` (set read_priority.split, and leave read_split out)",
        ));
    }
    Ok(())
}

/// Checks a `read_priority`: with a read budget `read_b`, valid settings,
/// and no `rate` or `burst` (the policy sets the rate each period).
pub fn check_read_priority(
    config: &PriorityConfig,
    read_b: Option<f64>,
) -> Result<(), PolicyError> {
    if read_b.is_none() {
        return Err(PolicyError::new(
            "read_priority needs read_bandwidth (its rate is the compaction reads' budget)",
        ));
    }
    check_priority("read_priority", "the compaction reads'", config)
}

/// Checks a `write_priority`: with `writes_only`, valid settings, no `rate`
/// or `burst` (the policy sets the rates each period).
pub fn check_write_priority(config: &PriorityConfig, writes_only: bool) -> Result<(), PolicyError> {
    if !writes_only {
        return Err(PolicyError::new(
            "write_priority needs writes_only = true (without it, the flush and compaction \
             objects carry their reads too)",
        ));
    }
    check_priority("write_priority", "each class's write", config)
}

/// The checks `read_priority` and `write_priority` share: no `rate`,
/// `burst` or `rate_critical` (the policy sets `whose` rate each period,
/// for critical requests too), valid settings.
fn check_priority(field: &str, whose: &str, config: &PriorityConfig) -> Result<(), PolicyError> {
    if config.rate.is_some() || config.burst.is_some() || config.rate_critical {
        return Err(PolicyError::new(format!(
            "{field} must not set rate, burst or rate_critical: the policy sets {whose} rate \
             each period (the burst is 10 ms of it), and critical requests pass it too"
        )));
    }
    config
        .validate()
        .map_err(|e| PolicyError::new(format!("{field}: {e}")))
}

/// Checks a `read_latency_target`: more than 0, with a read budget `read_b`.
pub fn check_read_latency_target(target: Duration, read_b: Option<f64>) -> Result<(), PolicyError> {
    if read_b.is_none() {
        return Err(PolicyError::new(
            "read_latency_target needs read_bandwidth (it steers the compaction reads' budget, \
             which exists only under a read budget)",
        ));
    }
    if target.is_zero() {
        return Err(PolicyError::new(
            "read_latency_target must be more than 0 (leave it out, or `off` at run time, for none)",
        ));
    }
    Ok(())
}

/// Checks `0 < min_b < budget`, naming the budget's field in errors.
fn check_budget(field: &str, budget: f64, min_b: f64) -> Result<(), PolicyError> {
    if !(budget.is_finite() && budget > 0.0) {
        return Err(PolicyError::new(format!(
            "{field} must be a positive byte rate, got {budget}"
        )));
    }
    if !(min_b.is_finite() && min_b > 0.0) {
        return Err(PolicyError::new(format!(
            "min_bandwidth must be a positive byte rate, got {min_b}"
        )));
    }
    if min_b >= budget {
        return Err(PolicyError::new(format!(
            "min_bandwidth ({}) must be less than {field} ({})",
            fmt_rate(min_b),
            fmt_rate(budget)
        )));
    }
    Ok(())
}

impl SilkPolicy {
    /// A policy with `KVSB = kvs_bandwidth` and `minB = min_bandwidth`
    /// (bytes/s); requires `0 < minB < KVSB`.
    pub fn new(kvs_bandwidth: f64, min_bandwidth: f64) -> Result<Self, PolicyError> {
        check_bandwidths(kvs_bandwidth, min_bandwidth)?;
        Ok(Self {
            kvs_b: kvs_bandwidth,
            min_b: min_bandwidth,
            writes_only: false,
            read_b: None,
            read_split: 0,
            read_priority: None,
            write_priority: None,
            read_target: None,
            read_caps: BTreeMap::new(),
            unjudged: BTreeMap::new(),
            last: BTreeMap::new(),
            targets: Vec::new(),
        })
    }

    /// Limits only the writes of flushes and compactions, as RocksDB's rate
    /// limiter (which SILK drives) does in its default mode: their reads go
    /// to a Noop object [`READS_OBJECT`] that [`ControlPolicy::setup`]
    /// creates, and `Fl`, `L0` and `LN` are write rates. `Fg` stays all of
    /// the foreground's I/O. Without it (the default), reads and writes share
    /// each class's rate, and turning it off drops any
    /// [`read_bandwidth`](Self::read_bandwidth) and
    /// [`write_priority`](Self::write_priority).
    pub fn writes_only(mut self, on: bool) -> Self {
        self.writes_only = on;
        if !on {
            self.read_b = None;
            self.read_split = 0;
            self.read_priority = None;
            self.write_priority = None;
            self.read_target = None;
        }
        self
    }

    /// With [`writes_only`](Self::writes_only): limits compactions' reads
    /// (all levels together, one DRL [`COMPACTION`]/[`READS_OBJECT`]) to
    /// `B_r = max(KVSB_r − Fg, minB)` each period, where `KVSB_r =
    /// read_bandwidth` is the store's read budget (typically the device's
    /// read rate), so that compaction reads beyond what the device can serve
    /// wait in the stage instead of in the device's queue ahead of the
    /// foreground's reads. Requires `writes_only` and `minB < KVSB_r`; `None` (the
    /// default) leaves their reads unlimited.
    pub fn read_bandwidth(mut self, read_bandwidth: Option<f64>) -> Result<Self, PolicyError> {
        if let Some(r) = read_bandwidth {
            check_read_bandwidth(r, self.min_b, self.writes_only)?;
        }
        self.read_b = read_bandwidth;
        Ok(self)
    }

    /// With a [`read_bandwidth`](Self::read_bandwidth): the compaction
    /// reads' DRL asks for reads larger than `read_split` bytes to be issued
    /// in pieces of that size ([`paio::object::DrlConfig::split`]; the
    /// RocksDB plugin splits direct reads), so that a foreground read that
    /// queues behind a compaction read below the stage (in the device's
    /// queue, or a cgroup throttle's) waits behind a piece instead of a
    /// whole readahead (2 MiB with direct I/O). Smaller pieces shorten that
    /// wait and cost compactions more system calls. 0 (the default): reads
    /// go whole. Requires a read budget; a multiple of 4 KiB.
    pub fn read_split(mut self, bytes: u64) -> Result<Self, PolicyError> {
        check_read_split(bytes, self.read_b)?;
        check_split_alone(bytes, self.read_priority.as_ref())?;
        self.read_split = bytes;
        Ok(self)
    }

    /// With a [`read_bandwidth`](Self::read_bandwidth): the compaction
    /// reads' object [`COMPACTION`]/[`READS_OBJECT`] is a priority object
    /// with these settings ([`paio::object::PriorityConfig`]) instead of a
    /// DRL, its `rate` set to `B_r` each period, so that besides the budget
    /// compaction reads wait in the stage while the store's critical
    /// requests (the RocksDB plugin marks user threads' reads and writes
    /// critical) are in flight or were `window` ago: at most `busy_depth`
    /// of them outstanding then, `depth` otherwise, and no new one while a
    /// critical request waits. A per-period budget cannot see the moment a
    /// foreground read arrives; this holds compaction reads back at that
    /// moment, at the cost of compaction throughput while the foreground
    /// is busy (the starvation guard still admits one per `starvation`).
    /// Its `split` replaces [`read_split`](Self::read_split) (given both,
    /// this is refused). At setup, a stage's `compaction/reads` of another
    /// kind than the budget's (the RocksDB plugin's DRL under this, or a
    /// Noop created while no budget was configured) is replaced. `None`
    /// (the default): a DRL. Requires a read budget; `rate`, `burst` and
    /// `rate_critical` must be absent: the policy sets the rate (the burst
    /// is 10 ms of it), and critical requests pass it too (`rate_critical`),
    /// so compaction reads the RocksDB plugin makes critical during a write
    /// stall are ordered first but stay within the budget.
    pub fn read_priority(mut self, config: Option<PriorityConfig>) -> Result<Self, PolicyError> {
        if let Some(c) = &config {
            check_read_priority(c, self.read_b)?;
            check_split_alone(self.read_split, Some(c))?;
        }
        self.read_priority = config;
        Ok(self)
    }

    /// With [`writes_only`](Self::writes_only): the write objects
    /// [`FLUSH`]/[`FLUSH_OBJECT`], [`COMPACTION`]/[`L0_OBJECT`] and
    /// [`COMPACTION`]/[`LN_OBJECT`] are priority objects with these settings
    /// instead of DRLs, each one's `rate` set to its class's SILK allocation
    /// each period, so that besides the allocation flush and compaction
    /// writes wait in the stage while the store's critical requests are in
    /// flight or were `window` ago (at most `busy_depth` of each object's
    /// writes outstanding then, `depth` otherwise). With direct I/O for
    /// flush and compaction, a write the stage admits goes straight to the
    /// device, where a foreground read arriving after it waits; this holds
    /// writes back at that moment, at the cost of background throughput
    /// while the foreground is busy (more write stalls if compactions fall
    /// behind; the starvation guard still admits one per `starvation`).
    /// Buffered writes only fill the page cache, so it does little for
    /// them. At setup, a stage's objects of another kind (the RocksDB
    /// plugin's DRLs) are replaced in one batch, their mappings and default
    /// kept. With a `split`, the RocksDB plugin writes a direct flush or
    /// compaction write larger than it as pieces of at most `split` bytes,
    /// each admitted on its own, so that a read arriving behind it in the
    /// device's queue waits behind one piece (more, smaller writes); 0
    /// (what a configuration file gets when it leaves `split` out): writes
    /// go whole. `None` (the default): DRLs. Requires `writes_only`; `rate`,
    /// `burst` and `rate_critical` must be absent. Critical
    /// requests pass the rate too (`rate_critical`): the RocksDB plugin makes
    /// flush and L0 compaction requests critical while RocksDB stalls or
    /// delays writes, and past the allocation they took the device from the
    /// Gets (a 40× higher p99 in bench/results/taillat-priority/).
    pub fn write_priority(mut self, config: Option<PriorityConfig>) -> Result<Self, PolicyError> {
        if let Some(c) = &config {
            check_write_priority(c, self.writes_only)?;
        }
        self.write_priority = config;
        Ok(self)
    }

    /// With a [`read_bandwidth`](Self::read_bandwidth): steers the
    /// compaction reads' budget by the foreground's latency. Each period,
    /// each stage's read cap `C_r` (starting at `KVSB_r`) is halved, never
    /// below `minB`, when the p99 call latency of the stage's foreground
    /// requests over its last collection interval exceeded `target`, and
    /// raised by [`READ_CAP_STEP`]` · KVSB_r`, never above `KVSB_r`,
    /// otherwise (also when no foreground request completed); the reads get
    /// `B_r = max(C_r − Fg, minB)`. A fixed `KVSB_r` promises a device rate;
    /// when the device gives less (another tenant, a slower disk), only the
    /// foreground's latency shows it. A lower target protects the
    /// foreground's reads more and lets a compaction backlog grow (more
    /// write stalls later); it should sit above what the device gives a
    /// foreground read while compactions run fast enough to keep L0 short,
    /// or the cap stays at `minB` and the backlog becomes write stalls.
    /// `None` (the default): `KVSB_r` alone. Requires a read budget.
    pub fn read_latency_target(mut self, target: Option<Duration>) -> Result<Self, PolicyError> {
        if let Some(t) = target {
            check_read_latency_target(t, self.read_b)?;
        }
        self.read_target = target;
        Ok(self)
    }

    /// `KVSB`, bytes/s.
    pub fn kvs_bandwidth(&self) -> f64 {
        self.kvs_b
    }

    /// `minB`, bytes/s.
    pub fn min_bandwidth(&self) -> f64 {
        self.min_b
    }

    /// `KVSB_r`, bytes/s, when compactions' reads are limited.
    pub fn read_budget(&self) -> Option<f64> {
        self.read_b
    }

    /// The compaction reads' object at `rate` bytes/s: the priority object
    /// of [`read_priority`](Self::read_priority), or a DRL with
    /// `read_split`.
    fn reads_object(&self, rate: f64) -> ObjectConfig {
        match &self.read_priority {
            Some(p) => priority_at(p, rate),
            None => ObjectConfig::Drl(common::drl_config(rate).with_split(self.read_split)),
        }
    }

    /// The kind of object [`reads_object`](Self::reads_object) configures.
    fn reads_kind(&self) -> &'static str {
        kind_of(self.read_priority.as_ref())
    }

    /// A write object ([`FLUSH_OBJECT`], [`L0_OBJECT`], [`LN_OBJECT`]) at
    /// `rate` bytes/s: the priority object of
    /// [`write_priority`](Self::write_priority), or a DRL.
    fn writes_object(&self, rate: f64) -> ObjectConfig {
        match &self.write_priority {
            Some(p) => priority_at(p, rate),
            None => common::drl(rate),
        }
    }

    /// The kind of object `channel/object` (one the policy controls) is
    /// configured as.
    fn kind_for(&self, object: &str) -> &'static str {
        if object == READS_OBJECT {
            self.reads_kind()
        } else {
            kind_of(self.write_priority.as_ref())
        }
    }

    /// `object`'s configuration at `rate` bytes/s.
    fn object_at(&self, object: &str, rate: f64) -> ObjectConfig {
        if object == READS_OBJECT {
            self.reads_object(rate)
        } else {
            self.writes_object(rate)
        }
    }

    /// Stage `view`'s read cap for this period under `target`
    /// ([`next_read_cap`] from its last one), counting in `unjudged` the
    /// periods its foreground moves bytes with no call latency and warning
    /// at the [`UNJUDGED_PERIODS`]th.
    fn next_cap(
        &self,
        view: &StageView,
        usage: &Usage,
        read_b: f64,
        target: Duration,
        unjudged: &mut BTreeMap<StageId, u32>,
    ) -> f64 {
        let latency = &usage.fg_latency;
        if usage.fg > 0.0 && latency.ops == 0 {
            let n = self
                .unjudged
                .get(&view.id)
                .map_or(1, |n| n.saturating_add(1));
            if n == UNJUDGED_PERIODS {
                tracing::warn!(
                    "silk: stage {}'s foreground moves {} and reports no call latency (its \
                     requests are not admitted and completed, as the RocksDB plugin's are), so \
                     read_latency_target cannot be judged for it: its compaction reads get \
                     read_bandwidth",
                    Self::group(view),
                    fmt_rate(usage.fg)
                );
            }
            unjudged.insert(view.id, n);
        }
        let cap = self.read_caps.get(&view.id).copied().unwrap_or(read_b);
        let missed = latency.ops > 0 && latency.p99_ns > target.as_nanos() as u64;
        next_read_cap(cap, read_b, self.min_b, missed)
    }

    /// The name of a stage's figures.
    fn group(view: &StageView) -> String {
        match view.label(INSTANCE_LABEL) {
            Some(i) => i.to_string(),
            None => format!("{}:{}", view.info.identity.name, view.info.identity.pid),
        }
    }
}

impl ControlPolicy for SilkPolicy {
    fn kind(&self) -> &'static str {
        "silk"
    }

    fn setup(&self, stage: &StageView) -> Vec<Rule> {
        let info = &stage.info;
        let mut rules = Vec::new();
        let mut needed = vec![Classifier::RequestContext];
        if self.writes_only {
            needed.push(Classifier::RequestType);
        }
        if needed.iter().any(|c| !info.classifiers.contains(c)) {
            let mut all = info.classifiers.clone();
            all.extend(needed.into_iter().filter(|c| !info.classifiers.contains(c)));
            rules.push(Rule::SetClassifiers { classifiers: all });
        }
        for ch in [FOREGROUND, FLUSH, COMPACTION] {
            if !has_channel(info, ch) {
                rules.push(Rule::CreateChannel { name: ch.into() });
            }
        }
        for (ch, obj, rate) in [
            (FLUSH, FLUSH_OBJECT, self.min_b),
            (COMPACTION, L0_OBJECT, self.min_b),
            (COMPACTION, LN_OBJECT, self.kvs_b),
        ] {
            let config = self.writes_object(rate);
            if !has_object(info, ch, obj) {
                rules.push(Rule::CreateObject {
                    channel: ch.into(),
                    name: obj.into(),
                    config,
                });
            } else if !has_kind(info, ch, obj, self.kind_for(obj)) {
                // The RocksDB plugin's DRLs under write_priority, or back.
                rules.extend(replace_object(info, ch, obj, config));
            }
        }
        let channel = |name: &str| info.channels.iter().find(|c| c.name == name);
        for (ch, obj) in [(FLUSH, FLUSH_OBJECT), (COMPACTION, LN_OBJECT)] {
            if channel(ch).is_none_or(|c| c.default_object != obj) {
                rules.push(Rule::SetDefaultObject {
                    channel: ch.into(),
                    object: obj.into(),
                });
            }
        }
        let l0 = context_pattern(CTX_L0);
        if channel(COMPACTION).is_none_or(|c| !c.object_rules.contains(&(l0, L0_OBJECT.into()))) {
            rules.push(Rule::MapObject {
                channel: COMPACTION.into(),
                pattern: l0,
                object: L0_OBJECT.into(),
            });
        }
        let read_patterns = [
            (FLUSH, CTX_FLUSH),
            (COMPACTION, CTX_L0),
            (COMPACTION, CTX_LN),
        ]
        .map(|(ch, ctx)| {
            let pattern = Pattern {
                request_type: Some(paio::RequestType::READ),
                ..context_pattern(ctx)
            };
            let mapped = channel(ch)
                .is_some_and(|c| c.object_rules.contains(&(pattern, READS_OBJECT.into())));
            (ch, pattern, mapped)
        });
        if !self.writes_only {
            // Reads and writes together: a layout that sends reads to
            // `reads` objects (the RocksDB plugin's) gives them back.
            for (ch, pattern, mapped) in read_patterns {
                if mapped {
                    rules.push(Rule::UnmapObject {
                        channel: ch.into(),
                        pattern,
                    });
                }
            }
        }
        if self.writes_only {
            for ch in [FLUSH, COMPACTION] {
                let config = match self.read_b {
                    Some(r) if ch == COMPACTION => self.reads_object(r),
                    _ => paio::ObjectConfig::Noop,
                };
                if !has_object(info, ch, READS_OBJECT) {
                    rules.push(Rule::CreateObject {
                        channel: ch.into(),
                        name: READS_OBJECT.into(),
                        config,
                    });
                } else if ch == COMPACTION
                    && self.read_b.is_some()
                    && !has_kind(info, ch, READS_OBJECT, self.reads_kind())
                {
                    // A layout's compaction `reads` of another kind than the
                    // read budget's (the RocksDB plugin's DRL, under
                    // read_priority).
                    rules.extend(replace_object(info, ch, READS_OBJECT, config));
                }
            }
            // Two classifiers outrank the request context alone, so these
            // take the reads from `limit`, `l0` and `ln`.
            for (ch, pattern, mapped) in read_patterns {
                if !mapped {
                    rules.push(Rule::MapObject {
                        channel: ch.into(),
                        pattern,
                        object: READS_OBJECT.into(),
                    });
                }
            }
        }
        for (ctx, ch) in [
            (CTX_FOREGROUND, FOREGROUND),
            (CTX_FLUSH, FLUSH),
            (CTX_L0, COMPACTION),
            (CTX_LN, COMPACTION),
        ] {
            let pattern = context_pattern(ctx);
            if !info.channel_rules.contains(&(pattern, ch.into())) {
                rules.push(Rule::MapChannel {
                    pattern,
                    channel: ch.into(),
                });
            }
        }
        rules
    }

    fn period(&mut self, _now: Duration, stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)> {
        let mut out = Vec::new();
        let mut next = BTreeMap::new();
        let mut caps = BTreeMap::new();
        let mut unjudged = BTreeMap::new();
        let mut groups: BTreeMap<String, GroupTarget> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for view in stages {
            let Some(usage) = Usage::of(view) else {
                continue;
            };
            if !seen.insert(view.id) {
                continue;
            }
            let alloc = silk_allocate(
                self.kvs_b,
                self.min_b,
                usage.fg,
                usage.flush_active,
                usage.l0_active,
            );
            let reads = self.read_b.map(|read_b| {
                let budget = match self.read_target {
                    Some(target) => {
                        let cap = self.next_cap(view, &usage, read_b, target, &mut unjudged);
                        caps.insert(view.id, cap);
                        cap
                    }
                    None => read_b,
                };
                read_allocation(budget, self.min_b, usage.fg)
            });
            let mut rules = Vec::new();
            for (ch, obj, rate) in [
                (FLUSH, FLUSH_OBJECT, Some(alloc.flush)),
                (COMPACTION, L0_OBJECT, Some(alloc.l0)),
                (COMPACTION, LN_OBJECT, Some(alloc.ln)),
                (COMPACTION, READS_OBJECT, reads),
            ] {
                let Some(rate) = rate else { continue };
                if !has_kind(&view.info, ch, obj, self.kind_for(obj)) {
                    continue;
                }
                let key = (view.id, ch, obj);
                let r = common::to_rate(rate);
                match self.last.get(&key) {
                    Some(&old) if (r as f64 - old as f64).abs() <= DEADBAND * old as f64 => {
                        next.insert(key, old);
                    }
                    _ => {
                        next.insert(key, r);
                        rules.push(Rule::Configure {
                            channel: ch.into(),
                            object: obj.into(),
                            config: self.object_at(obj, r as f64),
                        });
                    }
                }
            }
            if !rules.is_empty() {
                out.push((view.id, rules));
            }
            let g = groups
                .entry(Self::group(view))
                .or_insert_with_key(|name| GroupTarget {
                    group: name.clone(),
                    demand_bytes_per_sec: 0.0,
                    target_bytes_per_sec: 0.0,
                    achieved_bytes_per_sec: 0.0,
                    stages: 0,
                    hungry: false,
                });
            g.demand_bytes_per_sec += self.kvs_b;
            g.target_bytes_per_sec += usage.fg + alloc.total();
            g.achieved_bytes_per_sec += usage.total();
            g.stages += 1;
        }
        self.last = next;
        self.read_caps = caps;
        self.unjudged = unjudged;
        self.targets = groups.into_values().collect();
        out
    }

    fn set(&mut self, group: &str, key: &str, value: &str) -> Result<(), PolicyError> {
        if !matches!(
            key,
            "kvs_bandwidth"
                | "min_bandwidth"
                | "read_bandwidth"
                | "read_split"
                | "read_latency_target"
        ) {
            return Err(PolicyError::new(format!(
                "unknown key {key:?} for policy silk (known: kvs_bandwidth, min_bandwidth, \
                 read_bandwidth, read_split, read_latency_target)"
            )));
        }
        if group != "*" {
            return Err(PolicyError::new(format!(
                "{key} applies to every stage: use group `*`, not {group:?}"
            )));
        }
        if key == "read_latency_target" {
            let target = match value {
                "off" => None,
                v => {
                    let t = paio::units::parse_duration(v)
                        .map_err(|e| PolicyError::new(format!("{key}: {e} (or `off`)")))?;
                    check_read_latency_target(t, self.read_b)?;
                    Some(t)
                }
            };
            if target.is_none() {
                self.read_caps.clear();
                self.unjudged.clear();
            }
            self.read_target = target;
            return Ok(());
        }
        if key == "read_split" {
            let bytes = paio::units::parse_size(value)
                .map_err(|e| PolicyError::new(format!("{key}: {e}")))?;
            check_read_split(bytes, self.read_b)?;
            check_split_alone(bytes, self.read_priority.as_ref())?;
            self.read_split = bytes;
            // Sent with the next period's rate, whether or not it moved.
            self.last.retain(|k, _| k.2 != READS_OBJECT);
            return Ok(());
        }
        let v =
            common::parse_byte_rate(value).map_err(|e| PolicyError::new(format!("{key}: {e}")))?;
        let (mut kvs, mut min, mut read) = (self.kvs_b, self.min_b, self.read_b);
        match key {
            "kvs_bandwidth" => kvs = v,
            "min_bandwidth" => min = v,
            _ => read = Some(v),
        }
        check_bandwidths(kvs, min)?;
        if let Some(r) = read {
            check_read_bandwidth(r, min, self.writes_only)?;
        }
        (self.kvs_b, self.min_b, self.read_b) = (kvs, min, read);
        Ok(())
    }

    fn targets(&self) -> Vec<GroupTarget> {
        self.targets.clone()
    }

    fn controls(&self, stage: &StageView, channel: &str, object: &str) -> bool {
        let set_each_period = match (channel, object) {
            (FLUSH, FLUSH_OBJECT) | (COMPACTION, L0_OBJECT) | (COMPACTION, LN_OBJECT) => true,
            (COMPACTION, READS_OBJECT) => self.read_b.is_some(),
            _ => false,
        };
        // The stages the policy controls (those Usage::of reads).
        set_each_period && has_channel(&stage.info, FLUSH) && has_channel(&stage.info, COMPACTION)
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::{to_rate, RATE_FLOOR};
    use super::*;
    use paio::{ObjectConfig, Stage, StageStats};
    use proptest::prelude::*;
    use std::sync::OnceLock;

    const MIB: f64 = 1024.0 * 1024.0;
    const KVSB: f64 = 200.0 * MIB;
    const MINB: f64 = 10.0 * MIB;

    /// The plugin's layout, as a stage policy.
    const LAYOUT: &str = r#"
[stage]
name = "rocksdb"
classifiers = ["request_context"]
default_channel = "other"

[stage.labels]
instance = "db1"

[[channel]]
name = "foreground"
match = { request_context = "foreground" }

[[channel]]
name = "flush"
match = { request_context = "flush" }
default_object = "limit"

[[channel.object]]
name = "limit"
kind = "drl"
rate = "10MiB/s"

[[channel]]
name = "compaction"
match = [{ request_context = "compaction_l0" }, { request_context = "compaction_ln" }]
default_object = "ln"

[[channel.object]]
name = "l0"
kind = "drl"
rate = "10MiB/s"
match = { request_context = "compaction_l0" }

[[channel.object]]
name = "ln"
kind = "drl"
rate = "200MiB/s"

[[channel]]
name = "unthrottled"
match = { request_context = "unthrottled" }

[[channel]]
name = "other"
"#;

    /// The interposer's default layout.
    const PRELOAD: &str = r#"
[stage]
name = "preload"
default_channel = "metadata"

[[channel]]
name = "read"
match = { request_type = "read" }

[[channel]]
name = "write"
match = { request_type = "write" }

[[channel]]
name = "metadata"
"#;

    /// The layout's info and a zero collection of it, built once.
    fn base() -> &'static (StageInfo, StageStats) {
        static BASE: OnceLock<(StageInfo, StageStats)> = OnceLock::new();
        BASE.get_or_init(|| {
            let stage = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
            (stage.info(), stage.collect())
        })
    }

    fn policy() -> SilkPolicy {
        SilkPolicy::new(KVSB, MINB).unwrap()
    }

    /// [`policy`] with `writes_only` and a 150 MiB/s read budget.
    fn read_budget() -> SilkPolicy {
        policy()
            .writes_only(true)
            .read_bandwidth(Some(150.0 * MIB))
            .unwrap()
    }

    /// Per-class figures of one period: bytes/s and waited operations.
    #[derive(Debug, Clone, Copy, Default)]
    struct Figures {
        fg: f64,
        fl: f64,
        l0: f64,
        ln: f64,
        fl_waited: u64,
        l0_waited: u64,
    }

    fn fig(fg: f64, fl: f64, l0: f64, ln: f64) -> Figures {
        Figures {
            fg,
            fl,
            l0,
            ln,
            ..Default::default()
        }
    }

    fn set_counts(c: &mut Counts, bps: f64, waited: u64) {
        c.bytes_per_sec = bps;
        c.interval_bytes = (bps / 10.0) as u64;
        c.wait.waited_ops = waited;
    }

    /// A view of stage `id` with the layout and these figures.
    fn view(id: StageId, f: Figures) -> StageView {
        let (info, stats) = base();
        let mut stats = stats.clone();
        for ch in &mut stats.channels {
            match ch.name.as_str() {
                FOREGROUND => set_counts(&mut ch.counts, f.fg, 0),
                FLUSH => {
                    set_counts(&mut ch.counts, f.fl, f.fl_waited);
                    for o in &mut ch.objects {
                        if o.name == FLUSH_OBJECT {
                            set_counts(&mut o.counts, f.fl, f.fl_waited);
                        }
                    }
                }
                COMPACTION => {
                    set_counts(&mut ch.counts, f.l0 + f.ln, f.l0_waited);
                    for o in &mut ch.objects {
                        match o.name.as_str() {
                            L0_OBJECT => set_counts(&mut o.counts, f.l0, f.l0_waited),
                            LN_OBJECT => set_counts(&mut o.counts, f.ln, 0),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        StageView {
            id,
            info: info.clone(),
            stats: Some(stats),
            proc_io: None,
        }
    }

    /// A view of a live stage `id`: its configuration and a fresh collection.
    fn live(stage: &Stage, id: StageId) -> StageView {
        StageView {
            id,
            info: stage.info(),
            stats: Some(stage.collect()),
            proc_io: None,
        }
    }

    /// The rate configured for `channel/object` of stage `id`, if sent.
    fn sent(out: &[(StageId, Vec<Rule>)], id: StageId, channel: &str, object: &str) -> Option<u64> {
        out.iter()
            .filter(|(i, _)| *i == id)
            .flat_map(|(_, rules)| rules)
            .find_map(|r| match r {
                Rule::Configure {
                    channel: c,
                    object: o,
                    config,
                } if c == channel && o == object => match config {
                    ObjectConfig::Drl(d) => Some(d.rate.per_second),
                    ObjectConfig::Priority(p) => p.rate.map(|r| r.per_second),
                    _ => None,
                },
                _ => None,
            })
    }

    /// `[B_Fl, B_L0, B_LN]` sent to stage `id` (all three must be sent).
    fn rates(out: &[(StageId, Vec<Rule>)], id: StageId) -> [u64; 3] {
        [
            sent(out, id, FLUSH, FLUSH_OBJECT).expect("flush rate"),
            sent(out, id, COMPACTION, L0_OBJECT).expect("l0 rate"),
            sent(out, id, COMPACTION, LN_OBJECT).expect("ln rate"),
        ]
    }

    fn run(f: Figures) -> [u64; 3] {
        let mut p = policy();
        rates(&p.period(Duration::ZERO, &[view(1, f)]), 1)
    }

    fn r(x: f64) -> u64 {
        to_rate(x)
    }

    #[test]
    fn every_branch_of_algorithm_1() {
        // Fg = 60 → leftB = 140.
        let left = KVSB - 60.0 * MIB;
        // Fl > 0 ∧ L0 > 0: the high-priority classes share leftB.
        assert_eq!(
            run(fig(60.0 * MIB, 5.0 * MIB, 5.0 * MIB, 1.0)),
            [r(left / 2.0), r(left / 2.0), r(MINB)]
        );
        // Fl > 0 ∧ L0 = 0.
        assert_eq!(
            run(fig(60.0 * MIB, 5.0 * MIB, 0.0, 3.0 * MIB)),
            [r(left), r(MINB), r(MINB)]
        );
        // Fl = 0 ∧ L0 > 0.
        assert_eq!(
            run(fig(60.0 * MIB, 0.0, 1.0, 3.0 * MIB)),
            [r(MINB), r(left), r(MINB)]
        );
        // Neither: the low-priority compactions get leftB.
        assert_eq!(
            run(fig(60.0 * MIB, 0.0, 0.0, 3.0 * MIB)),
            [r(MINB), r(MINB), r(left)]
        );
        // Fg ≥ KVSB: leftB = minB.
        assert_eq!(
            run(fig(500.0 * MIB, 0.0, 0.0, 0.0)),
            [r(MINB), r(MINB), r(MINB)]
        );
        // Both active with leftB < 2·minB: each high-priority class keeps minB.
        assert_eq!(
            run(fig(KVSB - 15.0 * MIB, 1.0, 1.0, 0.0)),
            [r(MINB), r(MINB), r(MINB)]
        );
        // No statistics yet: all idle, the initial rates.
        let mut p = policy();
        let v = StageView {
            stats: None,
            ..view(1, Figures::default())
        };
        assert_eq!(
            rates(&p.period(Duration::ZERO, &[v]), 1),
            [r(MINB), r(MINB), r(KVSB)]
        );
    }

    #[test]
    fn a_class_blocked_in_its_drl_counts_as_active() {
        // No bytes, but requests waited: still active.
        let f = Figures {
            fl_waited: 3,
            ..fig(0.0, 0.0, 0.0, 0.0)
        };
        assert_eq!(run(f), [r(KVSB), r(MINB), r(MINB)]);
        let f = Figures {
            l0_waited: 1,
            ..fig(0.0, 0.0, 0.0, 0.0)
        };
        assert_eq!(run(f), [r(MINB), r(KVSB), r(MINB)]);
        let f = Figures {
            fl_waited: 1,
            l0_waited: 1,
            ..fig(0.0, 0.0, 0.0, 0.0)
        };
        assert_eq!(run(f), [r(KVSB / 2.0), r(KVSB / 2.0), r(MINB)]);
        // NaN and negative rates are idle.
        assert_eq!(
            run(fig(f64::NAN, f64::NAN, -1.0, 0.0)),
            [r(MINB), r(MINB), r(KVSB)]
        );
    }

    #[test]
    fn tiny_min_bandwidth_is_raised_to_the_floor() {
        let mut p = SilkPolicy::new(KVSB, 1000.0).unwrap();
        let out = p.period(Duration::ZERO, &[view(1, fig(KVSB * 2.0, 1.0, 1.0, 1.0))]);
        assert_eq!(rates(&out, 1), [RATE_FLOOR as u64; 3]);
    }

    #[test]
    fn unchanged_rates_are_not_resent() {
        let mut p = policy();
        let f = fig(60.0 * MIB, 5.0 * MIB, 0.0, 3.0 * MIB);
        let out = p.period(Duration::ZERO, &[view(1, f)]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1.len(), 3);
        // Same figures, and Fg within the deadband: nothing.
        assert!(p.period(Duration::ZERO, &[view(1, f)]).is_empty());
        let f2 = Figures {
            fg: 60.0 * MIB + 1000.0,
            ..f
        };
        assert!(p.period(Duration::ZERO, &[view(1, f2)]).is_empty());
        // Flushes stop: only flush/limit (leftB → minB) and ln (minB → leftB)
        // change; l0 stays at minB and is not sent.
        let out = p.period(Duration::ZERO, &[view(1, fig(60.0 * MIB, 0.0, 0.0, 1.0))]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1.len(), 2, "{out:?}");
        assert_eq!(sent(&out, 1, FLUSH, FLUSH_OBJECT), Some(r(MINB)));
        assert_eq!(sent(&out, 1, COMPACTION, L0_OBJECT), None);
        assert_eq!(
            sent(&out, 1, COMPACTION, LN_OBJECT),
            Some(r(KVSB - 60.0 * MIB))
        );
        // A stage that left is forgotten: back, it gets all three again.
        assert!(p.period(Duration::ZERO, &[]).is_empty());
        let out = p.period(Duration::ZERO, &[view(1, fig(60.0 * MIB, 0.0, 0.0, 1.0))]);
        assert_eq!(out[0].1.len(), 3);
        // Stages are tracked separately.
        let out = p.period(
            Duration::ZERO,
            &[
                view(1, fig(60.0 * MIB, 0.0, 0.0, 1.0)),
                view(2, fig(60.0 * MIB, 0.0, 0.0, 1.0)),
            ],
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 2);
    }

    #[test]
    fn stages_without_the_layout_are_ignored_and_missing_objects_skipped() {
        let mut p = policy();
        let preload = Stage::from_policy_str(PRELOAD, "<p>").unwrap();
        let other = live(&preload, 7);
        assert!(p.period(Duration::ZERO, &[other]).is_empty());
        assert!(p.targets().is_empty());
        // A layout whose compaction channel lacks `l0`: l0 is not configured.
        let mut v = view(3, fig(0.0, 0.0, 0.0, 0.0));
        let c = v.info.channels.iter_mut().find(|c| c.name == COMPACTION);
        c.unwrap().objects.retain(|o| o.name != L0_OBJECT);
        let out = p.period(Duration::ZERO, &[v]);
        assert_eq!(out[0].1.len(), 2, "{out:?}");
        assert_eq!(sent(&out, 3, COMPACTION, L0_OBJECT), None);
    }

    #[test]
    fn targets_per_stage() {
        let mut p = policy();
        let f = fig(60.0 * MIB, 5.0 * MIB, 0.0, 3.0 * MIB);
        let mut anonymous = view(2, f);
        anonymous.info.identity.labels.clear();
        p.period(Duration::ZERO, &[view(1, f), anonymous]);
        let t = p.targets();
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(t[0].group, "db1");
        assert_eq!(t[1].group, format!("rocksdb:{}", std::process::id()));
        for g in &t {
            assert_eq!(g.stages, 1);
            assert_eq!(g.demand_bytes_per_sec, KVSB);
            // Fg + leftB + 2·minB = KVSB + 2·minB in the flush-only branch.
            assert!((g.target_bytes_per_sec - (KVSB + 2.0 * MINB)).abs() < 1.0);
            assert!((g.achieved_bytes_per_sec - 68.0 * MIB).abs() < 1.0);
        }
        // Two stages sharing an instance are summed.
        p.period(Duration::ZERO, &[view(1, f), view(2, f)]);
        let t = p.targets();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].stages, 2);
        assert_eq!(t[0].demand_bytes_per_sec, 2.0 * KVSB);
    }

    #[test]
    fn set_changes_bandwidths_and_checks_them() {
        let mut p = policy();
        p.set("*", "kvs_bandwidth", "100MiB/s").unwrap();
        p.set("*", "min_bandwidth", "20MiB/s").unwrap();
        assert_eq!(p.kvs_bandwidth(), 100.0 * MIB);
        assert_eq!(p.min_bandwidth(), 20.0 * MIB);
        assert_eq!(
            run_with(&mut p, fig(30.0 * MIB, 1.0, 0.0, 0.0)),
            [r(70.0 * MIB), r(20.0 * MIB), r(20.0 * MIB)]
        );
        let e = p.set("*", "min_bandwidth", "100MiB/s").unwrap_err();
        assert!(e.message.contains("less than kvs_bandwidth"), "{e}");
        let e = p.set("*", "kvs_bandwidth", "20MiB/s").unwrap_err();
        assert!(e.message.contains("less than kvs_bandwidth"), "{e}");
        // Failed sets change nothing.
        assert_eq!(p.kvs_bandwidth(), 100.0 * MIB);
        assert_eq!(p.min_bandwidth(), 20.0 * MIB);
        let e = p.set("db1", "kvs_bandwidth", "1GiB/s").unwrap_err();
        assert!(e.message.contains("group `*`"), "{e}");
        let e = p.set("*", "demand", "1GiB/s").unwrap_err();
        assert!(e.message.contains("unknown key"), "{e}");
        let e = p.set("*", "kvs_bandwidth", "0B/s").unwrap_err();
        assert!(e.message.contains("greater than 0"), "{e}");
        assert!(p.set("*", "kvs_bandwidth", "100 iops").is_err());
        assert!(p.set("*", "min_bandwidth", "fast").is_err());
        assert!(SilkPolicy::new(10.0, 10.0).is_err());
        assert!(SilkPolicy::new(f64::NAN, 1.0).is_err());
        assert!(SilkPolicy::new(10.0, 0.0).is_err());
    }

    fn run_with(p: &mut SilkPolicy, f: Figures) -> [u64; 3] {
        rates(&p.period(Duration::ZERO, &[view(1, f)]), 1)
    }

    #[test]
    fn setup_on_the_full_layout_is_empty() {
        let p = policy();
        assert!(p.setup(&view(1, Figures::default())).is_empty());
    }

    #[test]
    fn setup_builds_the_layout_on_a_preload_stage() {
        let p = policy();
        let stage = Stage::from_policy_str(
            &PRELOAD.replace("[stage]\n", "[stage]\nclassifiers = [\"request_type\"]\n"),
            "<p>",
        )
        .unwrap();
        let v = |stage: &Stage| StageView {
            id: 1,
            info: stage.info(),
            stats: None,
            proc_io: None,
        };
        let rules = p.setup(&v(&stage));
        assert!(
            matches!(&rules[0], Rule::SetClassifiers { classifiers }
                if classifiers == &[Classifier::RequestType, Classifier::RequestContext]),
            "{rules:?}"
        );
        stage.apply_all(&rules).unwrap();
        let info = stage.info();
        // Initial rates {minB, minB, KVSB}.
        let drl_rate = |ch: &str, obj: &str| {
            let c = info.channels.iter().find(|c| c.name == ch).unwrap();
            match &c.objects.iter().find(|o| o.name == obj).unwrap().config {
                Some(ObjectConfig::Drl(d)) => d.rate.per_second,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(drl_rate(FLUSH, FLUSH_OBJECT), r(MINB));
        assert_eq!(drl_rate(COMPACTION, L0_OBJECT), r(MINB));
        assert_eq!(drl_rate(COMPACTION, LN_OBJECT), r(KVSB));
        // Routing by request context; the rest as before.
        let route = |ctx: &str, rt: paio::RequestType| {
            let c = paio::Context::explicit(1, rt, RequestContext::named(ctx).unwrap(), 10);
            stage.route(&c)
        };
        let w = paio::RequestType::WRITE;
        let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(route(CTX_FOREGROUND, w), pair(FOREGROUND, "default"));
        assert_eq!(route(CTX_FLUSH, w), pair(FLUSH, FLUSH_OBJECT));
        assert_eq!(route(CTX_L0, w), pair(COMPACTION, L0_OBJECT));
        assert_eq!(route(CTX_LN, w), pair(COMPACTION, LN_OBJECT));
        assert_eq!(route("none", w), pair("write", "default"));
        // Complete now: nothing more to set up, and the policy controls it.
        assert!(p.setup(&v(&stage)).is_empty());
        let mut q = policy();
        let out = q.period(Duration::ZERO, &[v(&stage)]);
        stage.apply_all(&out[0].1).unwrap();
        // Re-sending the mapping rules (as after a paiod restart) is harmless.
        let mappings: Vec<Rule> = rules
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Rule::MapChannel { .. }
                        | Rule::MapObject { .. }
                        | Rule::SetDefaultObject { .. }
                        | Rule::SetClassifiers { .. }
                )
            })
            .cloned()
            .collect();
        assert_eq!(mappings.len(), 8, "{mappings:?}");
        stage.apply_all(&mappings).unwrap();
        assert_eq!(stage.info(), info);
        // paiod filters the creations of what exists: the rest applies.
        let again = crate::server::missing(rules.clone(), &v(&stage));
        assert_eq!(again.len(), 8);
        stage.apply_all(&again).unwrap();
    }

    #[test]
    fn writes_only_sends_reads_to_a_noop_object_and_measures_writes() {
        let p = policy().writes_only(true);
        let stage = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
        let v = |stage: &Stage| live(stage, 1);
        // On the full layout only the request-type classifier, the reads
        // objects and their mappings are missing.
        let rules = p.setup(&v(&stage));
        assert_eq!(rules.len(), 6, "{rules:?}");
        stage.apply_all(&rules).unwrap();
        assert!(p.setup(&v(&stage)).is_empty());
        let route = |ctx: &str, rt: paio::RequestType| {
            let c = paio::Context::explicit(1, rt, RequestContext::named(ctx).unwrap(), 10);
            stage.route(&c).map(|(_, o)| o)
        };
        let (rd, wr) = (paio::RequestType::READ, paio::RequestType::WRITE);
        for (ctx, limited) in [
            (CTX_FLUSH, FLUSH_OBJECT),
            (CTX_L0, L0_OBJECT),
            (CTX_LN, LN_OBJECT),
        ] {
            assert_eq!(route(ctx, rd).as_deref(), Some(READS_OBJECT), "{ctx}");
            assert_eq!(route(ctx, wr).as_deref(), Some(limited), "{ctx}");
        }
        // Only the limited objects' bytes are Fl, L0 and LN: reads alone leave
        // every class idle (LN gets leftB), a flush write makes flushes active.
        for ctx in [CTX_FLUSH, CTX_L0, CTX_LN] {
            let c = paio::Context::explicit(1, rd, RequestContext::named(ctx).unwrap(), 1 << 20);
            stage.enforce(&c, None).unwrap();
        }
        let u = Usage::of(&v(&stage)).unwrap();
        assert!(!u.flush_active && !u.l0_active, "{u:?}");
        let c = paio::Context::explicit(1, wr, RequestContext::named(CTX_FLUSH).unwrap(), 4096);
        stage.enforce(&c, None).unwrap();
        let u = Usage::of(&v(&stage)).unwrap();
        assert!(u.flush_active && !u.l0_active, "{u:?}");
        // Without the option nothing about reads is set up, and reads sent
        // to `reads` objects are given back to the limited ones.
        let fresh = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
        assert!(policy().setup(&v(&fresh)).is_empty());
        let back = policy().setup(&v(&stage));
        assert_eq!(back.len(), 3, "{back:?}");
        assert!(back.iter().all(|r| matches!(r, Rule::UnmapObject { .. })));
        stage.apply_all(&back).unwrap();
        for (ctx, limited) in [
            (CTX_FLUSH, FLUSH_OBJECT),
            (CTX_L0, L0_OBJECT),
            (CTX_LN, LN_OBJECT),
        ] {
            assert_eq!(route(ctx, rd).as_deref(), Some(limited), "{ctx}");
        }
        assert!(policy().setup(&v(&stage)).is_empty());
    }

    /// The RocksDB plugin's real layout, as it ships.
    const PLUGIN_LAYOUT: &str = include_str!("../../../../integrations/rocksdb/paio-rocksdb.toml");

    #[test]
    fn the_plugin_layout_needs_nothing_in_writes_only_mode_and_gives_reads_back_otherwise() {
        let stage = Stage::from_policy_str(PLUGIN_LAYOUT, "<plugin>").unwrap();
        let v = live(&stage, 1);
        assert!(policy().writes_only(true).setup(&v).is_empty());
        let rules = policy().setup(&v);
        assert_eq!(rules.len(), 3, "{rules:?}");
        stage.apply_all(&rules).unwrap();
        let c = paio::Context::explicit(
            1,
            paio::RequestType::READ,
            RequestContext::named(CTX_LN).unwrap(),
            10,
        );
        assert_eq!(stage.route(&c).map(|(_, o)| o).as_deref(), Some(LN_OBJECT));
    }

    #[test]
    fn a_read_budget_limits_compaction_reads_to_what_the_foreground_leaves() {
        let p = read_budget();
        let stage = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
        let info = |stage: &Stage| live(stage, 1);
        let rules = p.setup(&info(&stage));
        stage.apply_all(&rules).unwrap();
        assert!(p.setup(&info(&stage)).is_empty());
        let kind = |ch: &str| {
            let i = stage.info();
            let c = i.channels.iter().find(|c| c.name == ch).unwrap();
            c.objects
                .iter()
                .find(|o| o.name == READS_OBJECT)
                .map(|o| (o.kind.clone(), o.config.clone()))
                .unwrap()
        };
        // Compactions' reads (every level) go to one DRL at KVSB_r; the
        // flush's stay Noop.
        assert_eq!(kind(FLUSH).0, "noop");
        match kind(COMPACTION) {
            (k, Some(ObjectConfig::Drl(d))) => {
                assert_eq!(k, "drl");
                assert_eq!(d.rate.per_second, r(150.0 * MIB));
            }
            other => panic!("compaction/reads: {other:?}"),
        }
        let rd = paio::RequestType::READ;
        for ctx in [CTX_L0, CTX_LN] {
            let c = paio::Context::explicit(1, rd, RequestContext::named(ctx).unwrap(), 10);
            assert_eq!(
                stage.route(&c),
                Some((COMPACTION.to_string(), READS_OBJECT.to_string()))
            );
        }
        // Each period: B_r = max(KVSB_r − Fg, minB), next to Algorithm 1's
        // rates, resent only when it moves.
        let mut p = p;
        let mut reads = |fg: f64| {
            let mut v = view(1, fig(fg, 1.0, 0.0, 0.0));
            v.info = stage.info();
            let out = p.period(Duration::ZERO, &[v]);
            sent(&out, 1, COMPACTION, READS_OBJECT)
        };
        assert_eq!(reads(20.0 * MIB), Some(r(130.0 * MIB)));
        assert_eq!(reads(20.0 * MIB), None);
        assert_eq!(reads(0.0), Some(r(150.0 * MIB)));
        assert_eq!(reads(400.0 * MIB), Some(r(MINB)));
        // Without a read budget, or on a stage whose `reads` is Noop,
        // nothing is sent for it.
        let mut plain = policy().writes_only(true);
        let mut v = view(1, fig(20.0 * MIB, 1.0, 0.0, 0.0));
        v.info = stage.info();
        assert_eq!(
            sent(
                &plain.period(Duration::ZERO, &[v]),
                1,
                COMPACTION,
                READS_OBJECT
            ),
            None
        );
        let noop_stage = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
        noop_stage
            .apply_all(&plain.setup(&info(&noop_stage)))
            .unwrap();
        let mut budget = read_budget();
        let mut v = view(1, fig(20.0 * MIB, 1.0, 0.0, 0.0));
        v.info = noop_stage.info();
        let out = budget.period(Duration::ZERO, &[v]);
        assert_eq!(sent(&out, 1, COMPACTION, READS_OBJECT), None);
        assert!(sent(&out, 1, FLUSH, FLUSH_OBJECT).is_some(), "{out:?}");
    }

    #[test]
    fn a_read_split_goes_with_every_configuration_of_the_compaction_reads() {
        let mut p = read_budget().read_split(256 << 10).unwrap();
        let stage = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
        stage.apply_all(&p.setup(&live(&stage, 1))).unwrap();
        let split_in_stage = || {
            let i = stage.info();
            let c = i.channels.iter().find(|c| c.name == COMPACTION).unwrap();
            match &c
                .objects
                .iter()
                .find(|o| o.name == READS_OBJECT)
                .unwrap()
                .config
            {
                Some(ObjectConfig::Drl(d)) => d.split.0,
                other => panic!("compaction/reads: {other:?}"),
            }
        };
        assert_eq!(split_in_stage(), 256 << 10, "created with it");
        let split_sent = |p: &mut SilkPolicy| {
            let mut v = view(1, fig(20.0 * MIB, 1.0, 0.0, 0.0));
            v.info = stage.info();
            p.period(Duration::ZERO, &[v])
                .iter()
                .flat_map(|(_, rules)| rules)
                .find_map(|r| match r {
                    Rule::Configure {
                        object,
                        config: ObjectConfig::Drl(d),
                        ..
                    } if object == READS_OBJECT => Some(d.split.0),
                    _ => None,
                })
        };
        assert_eq!(split_sent(&mut p), Some(256 << 10), "with each rate");
        assert_eq!(split_sent(&mut p), None, "the rate did not move");
        p.set("*", "read_split", "64KiB").unwrap();
        assert_eq!(split_sent(&mut p), Some(64 << 10), "resent once changed");
        p.set("*", "read_split", "0").unwrap();
        assert_eq!(split_sent(&mut p), Some(0), "turned off");
        let e = p.set("*", "read_split", "5000B").unwrap_err();
        assert!(e.message.contains("multiple of 4 KiB"), "{e}");
        let e = policy().writes_only(true).read_split(4096).unwrap_err();
        assert!(e.message.contains("needs read_bandwidth"), "{e}");
        assert!(read_budget().read_split(0).is_ok());
        let mut plain = read_budget().writes_only(false);
        let e = plain.set("*", "read_split", "64KiB").unwrap_err();
        assert!(e.message.contains("needs read_bandwidth"), "{e}");
    }

    #[test]
    fn a_read_priority_replaces_the_plugins_reads_drl_and_holds_reads_behind_gets() {
        let settings = PriorityConfig {
            busy_depth: 0,
            ..PriorityConfig::default()
        };
        let mut p = read_budget().read_priority(Some(settings.clone())).unwrap();
        let stage = Stage::from_policy_str(PLUGIN_LAYOUT, "<plugin>").unwrap();
        // As paiod sends them: without what the stage already has.
        let setup =
            |p: &SilkPolicy| crate::server::missing(p.setup(&live(&stage, 1)), &live(&stage, 1));
        let rules = setup(&p);
        let removes = (rules.iter())
            .filter(|r| matches!(r, Rule::RemoveObject { name, .. } if name == READS_OBJECT))
            .count();
        assert_eq!(removes, 1, "{rules:?}");
        stage.apply_all(&rules).unwrap();
        assert!(p.setup(&live(&stage, 1)).is_empty(), "replaced once");
        let reads = || {
            let i = stage.info();
            let c = i.channels.iter().find(|c| c.name == COMPACTION).unwrap();
            let o = c.objects.iter().find(|o| o.name == READS_OBJECT).unwrap();
            (o.kind.clone(), o.config.clone())
        };
        match reads() {
            (k, Some(ObjectConfig::Priority(c))) => {
                assert_eq!(k, "priority");
                assert_eq!(c.rate, Some(Rate::bytes_per_sec(r(150.0 * MIB))));
                assert_eq!(c.busy_depth, 0);
            }
            other => panic!("compaction/reads: {other:?}"),
        }
        let rd = paio::RequestType::READ;
        let ctx =
            |name: &str| paio::Context::explicit(1, rd, RequestContext::named(name).unwrap(), 4096);
        for c in [CTX_L0, CTX_LN] {
            assert_eq!(
                stage.route(&ctx(c)),
                Some((COMPACTION.to_string(), READS_OBJECT.to_string()))
            );
        }
        // Each period's B_r is the priority object's rate, its settings kept.
        let mut v = view(1, fig(20.0 * MIB, 1.0, 0.0, 0.0));
        v.info = stage.info();
        let out = p.period(Duration::ZERO, &[v]);
        assert_eq!(
            sent(&out, 1, COMPACTION, READS_OBJECT),
            Some(r(130.0 * MIB))
        );
        stage.apply_all(&out[0].1).unwrap();
        match reads() {
            (_, Some(ObjectConfig::Priority(c))) => {
                assert_eq!(c.rate, Some(Rate::bytes_per_sec(r(130.0 * MIB))));
                assert_eq!(c.busy_depth, 0);
            }
            other => panic!("compaction/reads: {other:?}"),
        }
        // A compaction read goes at once while nothing is critical, and
        // waits while a critical foreground request is in flight.
        paio::context::with_thread_ref(|t| {
            let a = stage.try_admit_on_thread(t, &ctx(CTX_LN)).unwrap();
            stage.complete(a, 4096).unwrap();
            let mut get = ctx(CTX_FOREGROUND);
            get.criticality = paio::Criticality::Critical;
            let g = stage.try_admit_on_thread(t, &get).unwrap();
            assert!(matches!(
                stage.try_admit_on_thread(t, &ctx(CTX_LN)),
                Err(paio::object::TryEnforceError::Wait(_))
            ));
            stage.complete(g, 4096).unwrap();
        });
        // Its split replaces read_split; both, or no read budget, are refused.
        let e = read_budget()
            .read_split(64 << 10)
            .unwrap()
            .read_priority(Some(settings.clone()))
            .unwrap_err();
        assert!(e.message.contains("read_priority.split"), "{e}");
        let e = p.set("*", "read_split", "64KiB").unwrap_err();
        assert!(e.message.contains("both given"), "{e}");
        let e = (policy().writes_only(true))
            .read_priority(Some(settings.clone()))
            .unwrap_err();
        assert!(e.message.contains("needs read_bandwidth"), "{e}");
        let rated = PriorityConfig {
            rate: Some(Rate::bytes_per_sec(1 << 20)),
            ..settings
        };
        let e = read_budget().read_priority(Some(rated)).unwrap_err();
        assert!(e.message.contains("must not set rate"), "{e}");
        let deep = PriorityConfig {
            busy_depth: 9,
            ..PriorityConfig::default()
        };
        let e = read_budget().read_priority(Some(deep)).unwrap_err();
        assert!(e.message.contains("busy_depth"), "{e}");
        // Back to a DRL: the priority object is replaced in turn.
        stage.apply_all(&setup(&read_budget())).unwrap();
        assert_eq!(reads().0, "drl");
    }

    #[test]
    fn a_write_priority_split_reaches_every_write_object() {
        let settings = PriorityConfig {
            busy_depth: 0,
            split: paio::units::Size(256 << 10),
            ..PriorityConfig::default()
        };
        let p = read_budget().write_priority(Some(settings)).unwrap();
        let stage = Stage::from_policy_str(PLUGIN_LAYOUT, "<plugin>").unwrap();
        let rules = crate::server::missing(p.setup(&live(&stage, 1)), &live(&stage, 1));
        let created: Vec<(&str, u64)> = (rules.iter())
            .filter_map(|r| match r {
                Rule::CreateObject {
                    name,
                    config: ObjectConfig::Priority(c),
                    ..
                } => Some((name.as_str(), c.split.0)),
                _ => None,
            })
            .collect();
        assert_eq!(
            created,
            [
                (FLUSH_OBJECT, 256 << 10),
                (L0_OBJECT, 256 << 10),
                (LN_OBJECT, 256 << 10)
            ],
            "{rules:?}"
        );
        stage.apply_all(&rules).unwrap();
    }

    #[test]
    fn a_write_priority_replaces_the_plugins_drls_keeping_routes_and_holds_writes_behind_gets() {
        let settings = PriorityConfig {
            busy_depth: 0,
            split: paio::units::Size(0),
            ..PriorityConfig::default()
        };
        let mut p = read_budget()
            .write_priority(Some(settings.clone()))
            .unwrap();
        let stage = Stage::from_policy_str(PLUGIN_LAYOUT, "<plugin>").unwrap();
        let setup =
            |p: &SilkPolicy| crate::server::missing(p.setup(&live(&stage, 1)), &live(&stage, 1));
        let rules = setup(&p);
        let removed: Vec<&str> = (rules.iter())
            .filter_map(|r| match r {
                Rule::RemoveObject { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(removed, [FLUSH_OBJECT, L0_OBJECT, LN_OBJECT], "{rules:?}");
        stage.apply_all(&rules).unwrap();
        assert!(p.setup(&live(&stage, 1)).is_empty(), "replaced once");
        let kind = |ch: &str, obj: &str| {
            let i = stage.info();
            let c = i.channels.iter().find(|c| c.name == ch).unwrap();
            (c.objects.iter().find(|o| o.name == obj))
                .map(|o| o.kind.clone())
                .unwrap()
        };
        for (ch, obj) in [
            (FLUSH, FLUSH_OBJECT),
            (COMPACTION, L0_OBJECT),
            (COMPACTION, LN_OBJECT),
        ] {
            assert_eq!(kind(ch, obj), "priority", "{ch}/{obj}");
        }
        assert_eq!(kind(COMPACTION, READS_OBJECT), "drl");
        // Every route is as before: defaults and mappings kept.
        let ctx = |ty: paio::RequestType, name: &str| {
            paio::Context::explicit(1, ty, RequestContext::named(name).unwrap(), 4096)
        };
        let wr = paio::RequestType::WRITE;
        for (c, ch, obj) in [
            (CTX_FLUSH, FLUSH, FLUSH_OBJECT),
            (CTX_L0, COMPACTION, L0_OBJECT),
            (CTX_LN, COMPACTION, LN_OBJECT),
        ] {
            assert_eq!(
                stage.route(&ctx(wr, c)),
                Some((ch.into(), obj.into())),
                "{c}"
            );
        }
        assert_eq!(
            stage.route(&ctx(paio::RequestType::READ, CTX_LN)),
            Some((COMPACTION.into(), READS_OBJECT.into()))
        );
        // Each period's allocation is each priority object's rate, as the
        // DRLs' would be, its settings kept.
        let mut v = view(1, fig(20.0 * MIB, 5.0 * MIB, 0.0, 30.0 * MIB));
        v.info = stage.info();
        let out = p.period(Duration::ZERO, std::slice::from_ref(&v));
        let mut drls = read_budget();
        v.info = live(
            &Stage::from_policy_str(PLUGIN_LAYOUT, "<plugin>").unwrap(),
            1,
        )
        .info;
        let expected = drls.period(Duration::ZERO, &[v]);
        for (ch, obj) in [
            (FLUSH, FLUSH_OBJECT),
            (COMPACTION, L0_OBJECT),
            (COMPACTION, LN_OBJECT),
        ] {
            let rate = sent(&out, 1, ch, obj);
            assert!(rate.is_some(), "{ch}/{obj}: {out:?}");
            assert_eq!(rate, sent(&expected, 1, ch, obj), "{ch}/{obj}");
        }
        stage.apply_all(&out[0].1).unwrap();
        let i = stage.info();
        let c = i.channels.iter().find(|c| c.name == COMPACTION).unwrap();
        match &c
            .objects
            .iter()
            .find(|o| o.name == LN_OBJECT)
            .unwrap()
            .config
        {
            Some(ObjectConfig::Priority(c)) => {
                assert_eq!(c.busy_depth, 0);
                assert_eq!(
                    c.rate.map(|r| r.per_second),
                    sent(&out, 1, COMPACTION, LN_OBJECT)
                );
                assert!(c.rate_critical);
            }
            other => panic!("compaction/ln: {other:?}"),
        }
        // A compaction write goes at once while nothing is critical, and
        // waits while a critical foreground request is in flight.
        paio::context::with_thread_ref(|t| {
            let a = stage.try_admit_on_thread(t, &ctx(wr, CTX_LN)).unwrap();
            stage.complete(a, 4096).unwrap();
            let mut get = ctx(paio::RequestType::READ, CTX_FOREGROUND);
            get.criticality = paio::Criticality::Critical;
            let g = stage.try_admit_on_thread(t, &get).unwrap();
            for c in [CTX_FLUSH, CTX_L0, CTX_LN] {
                assert!(
                    matches!(
                        stage.try_admit_on_thread(t, &ctx(wr, c)),
                        Err(paio::object::TryEnforceError::Wait(_))
                    ),
                    "{c}"
                );
            }
            stage.complete(g, 4096).unwrap();
            // Critical L0 writes (the plugin's stall inheritance) pass the
            // allocation too: once its burst is spent, one waits for tokens.
            let mut stalled = ctx(wr, CTX_L0);
            stalled.criticality = paio::Criticality::Critical;
            let mut admitted = Vec::new();
            while admitted.len() < 1000 {
                match stage.try_admit_on_thread(t, &stalled) {
                    Ok(a) => admitted.push(a),
                    Err(paio::object::TryEnforceError::Wait(_)) => break,
                    Err(e) => panic!("{e:?}"),
                }
            }
            assert!(admitted.len() < 1000, "critical L0 writes passed the rate");
            for a in admitted {
                stage.complete(a, 4096).unwrap();
            }
        });
        // Refused: without writes_only, with a rate, burst or rate_critical.
        let e = policy().write_priority(Some(settings.clone())).unwrap_err();
        assert!(e.message.contains("needs writes_only"), "{e}");
        for (bad, what) in [
            (
                PriorityConfig {
                    rate: Some(Rate::bytes_per_sec(1 << 20)),
                    ..settings.clone()
                },
                "must not set rate",
            ),
            (
                PriorityConfig {
                    rate_critical: true,
                    ..settings.clone()
                },
                "must not set rate, burst or rate_critical",
            ),
            (
                PriorityConfig {
                    busy_depth: 9,
                    ..settings.clone()
                },
                "busy_depth",
            ),
        ] {
            let e = read_budget().write_priority(Some(bad)).unwrap_err();
            assert!(e.message.contains(what), "{e}");
        }
        // Back to DRLs: replaced in turn, routes kept.
        stage.apply_all(&setup(&read_budget())).unwrap();
        assert_eq!(kind(FLUSH, FLUSH_OBJECT), "drl");
        assert_eq!(kind(COMPACTION, LN_OBJECT), "drl");
        assert_eq!(
            stage.route(&ctx(wr, CTX_L0)),
            Some((COMPACTION.into(), L0_OBJECT.into()))
        );
    }

    /// A policy with a 150 MiB/s read budget and a 2 ms read-latency
    /// target, and a stage with its setup applied.
    fn with_target() -> (SilkPolicy, Stage) {
        let p = read_budget()
            .read_latency_target(Some(Duration::from_millis(2)))
            .unwrap();
        let stage = Stage::from_policy_str(LAYOUT, "<layout>").unwrap();
        stage.apply_all(&p.setup(&live(&stage, 1))).unwrap();
        (p, stage)
    }

    /// One period of stage 1 with a foreground at `fg` bytes/s whose p99 is
    /// `p99_us` over `ops` completed requests: the compaction reads' rate
    /// sent.
    fn latency_period(
        p: &mut SilkPolicy,
        stage: &Stage,
        fg: f64,
        ops: u64,
        p99_us: u64,
    ) -> Option<u64> {
        let mut v = view(1, fig(fg, 1.0, 0.0, 0.0));
        v.info = stage.info();
        let stats = v.stats.as_mut().unwrap();
        let ch = stats
            .channels
            .iter_mut()
            .find(|c| c.name == FOREGROUND)
            .unwrap();
        ch.counts.latency.ops = ops;
        ch.counts.latency.p99_ns = p99_us * 1000;
        sent(&p.period(Duration::ZERO, &[v]), 1, COMPACTION, READS_OBJECT)
    }

    #[test]
    fn a_read_latency_target_halves_the_read_cap_when_missed_and_steps_it_back() {
        const READ_B: f64 = 150.0 * MIB;
        let (mut p, stage) = with_target();
        // Periods with a foreground at 10 MiB/s.
        let period = |p: &mut SilkPolicy, ops: u64, p99_us: u64| {
            latency_period(p, &stage, 10.0 * MIB, ops, p99_us)
        };
        // Met: the cap stays at KVSB_r (B_r = 150 − 10).
        assert_eq!(period(&mut p, 100, 1500), Some(r(140.0 * MIB)));
        // Missed (p99 above 2 ms): 75, then 37.5 MiB/s, each minus Fg.
        assert_eq!(period(&mut p, 100, 2500), Some(r(65.0 * MIB)));
        assert_eq!(period(&mut p, 100, 9000), Some(r(27.5 * MIB)));
        // Never below minB, however often it is missed.
        for _ in 0..10 {
            period(&mut p, 100, 9000);
        }
        assert_eq!(p.read_caps.get(&1), Some(&MINB));
        // Met, or no foreground request at all: back by 5 % of KVSB_r each.
        period(&mut p, 100, 2000);
        assert_eq!(p.read_caps.get(&1), Some(&(MINB + READ_CAP_STEP * READ_B)));
        period(&mut p, 0, 0);
        assert_eq!(
            p.read_caps.get(&1),
            Some(&(MINB + 2.0 * READ_CAP_STEP * READ_B))
        );
        for _ in 0..40 {
            period(&mut p, 0, 0);
        }
        assert_eq!(p.read_caps.get(&1), Some(&READ_B), "never above KVSB_r");
        // A stage that leaves takes its cap with it.
        p.period(Duration::ZERO, &[]);
        assert!(p.read_caps.is_empty());
        // `off` at run time: KVSB_r alone, whatever the latency.
        period(&mut p, 100, 9000);
        p.set("*", "read_latency_target", "off").unwrap();
        assert!(p.read_caps.is_empty());
        period(&mut p, 100, 9000);
        assert!(p.read_caps.is_empty());
        p.set("*", "read_latency_target", "1ms").unwrap();
        assert_eq!(period(&mut p, 100, 1500), Some(r(65.0 * MIB)));
        let e = p.set("*", "read_latency_target", "soon").unwrap_err();
        assert!(
            e.message.contains("read_latency_target") && e.message.contains("off"),
            "{e}"
        );
        let e = p.set("*", "read_latency_target", "0ms").unwrap_err();
        assert!(e.message.contains("more than 0"), "{e}");
    }

    #[test]
    fn a_foreground_without_latency_is_counted_towards_a_warning() {
        let (mut p, stage) = with_target();
        let period = |p: &mut SilkPolicy, fg: f64, ops: u64| {
            latency_period(p, &stage, fg, ops, 100);
        };
        for n in 1..=UNJUDGED_PERIODS + 2 {
            period(&mut p, 10.0 * MIB, 0);
            assert_eq!(p.unjudged.get(&1), Some(&n));
        }
        // A period with latency, or one with no foreground bytes, ends the run.
        period(&mut p, 10.0 * MIB, 50);
        assert!(p.unjudged.is_empty());
        period(&mut p, 10.0 * MIB, 0);
        period(&mut p, 0.0, 0);
        assert!(p.unjudged.is_empty());
    }

    #[test]
    fn a_read_latency_target_needs_a_read_budget() {
        let t = Some(Duration::from_millis(2));
        let e = policy()
            .writes_only(true)
            .read_latency_target(t)
            .unwrap_err();
        assert!(e.message.contains("needs read_bandwidth"), "{e}");
        let mut p = policy().writes_only(true);
        let e = p.set("*", "read_latency_target", "2ms").unwrap_err();
        assert!(e.message.contains("needs read_bandwidth"), "{e}");
        let budget = read_budget();
        let e = budget
            .clone()
            .read_latency_target(Some(Duration::ZERO))
            .unwrap_err();
        assert!(e.message.contains("more than 0"), "{e}");
        // Turning writes_only off drops it with the budget.
        let p = budget.read_latency_target(t).unwrap().writes_only(false);
        assert_eq!(p.read_target, None);
    }

    proptest! {
        #[test]
        fn the_read_cap_stays_between_min_b_and_the_read_budget(
            misses in proptest::collection::vec(any::<bool>(), 1..200),
            read_mib in 20.0f64..2000.0,
        ) {
            let read_b = read_mib * MIB;
            let mut cap = read_b;
            for missed in misses {
                let next = next_read_cap(cap, read_b, MINB, missed);
                prop_assert!((MINB..=read_b).contains(&next));
                if missed {
                    prop_assert!(next <= cap);
                } else {
                    prop_assert!(next >= cap);
                }
                cap = next;
            }
        }
    }

    #[test]
    fn a_read_budget_needs_writes_only_and_more_than_min_bandwidth() {
        let e = policy().read_bandwidth(Some(150.0 * MIB)).unwrap_err();
        assert!(e.message.contains("needs writes_only"), "{e}");
        let wo = || policy().writes_only(true);
        let e = wo().read_bandwidth(Some(MINB)).unwrap_err();
        assert!(e.message.contains("less than read_bandwidth"), "{e}");
        assert!(wo().read_bandwidth(Some(f64::NAN)).is_err());
        assert!(wo().read_bandwidth(Some(-1.0)).is_err());
        // Turning writes_only off drops the budget.
        let p = wo().read_bandwidth(Some(150.0 * MIB)).unwrap();
        assert_eq!(p.read_budget(), Some(150.0 * MIB));
        assert_eq!(p.writes_only(false).read_budget(), None);
        // At run time.
        let mut p = policy();
        let e = p.set("*", "read_bandwidth", "150MiB/s").unwrap_err();
        assert!(e.message.contains("needs writes_only"), "{e}");
        let mut p = wo();
        p.set("*", "read_bandwidth", "150MiB/s").unwrap();
        assert_eq!(p.read_budget(), Some(150.0 * MIB));
        let e = p.set("*", "min_bandwidth", "150MiB/s").unwrap_err();
        assert!(e.message.contains("less than"), "{e}");
        let e = p.set("*", "read_bandwidth", "5MiB/s").unwrap_err();
        assert!(e.message.contains("less than read_bandwidth"), "{e}");
        assert_eq!(
            (p.min_bandwidth(), p.read_budget()),
            (MINB, Some(150.0 * MIB))
        );
        let e = p.set("db1", "read_bandwidth", "1GiB/s").unwrap_err();
        assert!(e.message.contains("group `*`"), "{e}");
    }

    #[test]
    fn setup_fixes_a_partial_layout() {
        let p = policy();
        let stage = Stage::from_policy_str(
            "[stage]\nname = \"kv\"\n[[channel]]\nname = \"flush\"\nmatch = { request_context = \"flush\" }\n",
            "<p>",
        )
        .unwrap();
        let v = StageView {
            id: 1,
            info: stage.info(),
            stats: None,
            proc_io: None,
        };
        let rules = p.setup(&v);
        assert!(!rules
            .iter()
            .any(|r| matches!(r, Rule::SetClassifiers { .. })));
        assert!(!rules
            .iter()
            .any(|r| matches!(r, Rule::CreateChannel { name } if name == FLUSH)));
        assert!(!rules
            .iter()
            .any(|r| matches!(r, Rule::MapChannel { channel, .. } if channel == FLUSH)));
        stage.apply_all(&rules).unwrap();
        assert!(p
            .setup(&StageView {
                info: stage.info(),
                ..v
            })
            .is_empty());
    }

    fn rate_strategy() -> impl Strategy<Value = f64> {
        prop_oneof![Just(0.0), 1.0..1e10f64]
    }

    proptest! {
        #[test]
        fn allocation_follows_algorithm_1(
            fg in rate_strategy(),
            fl in rate_strategy(),
            l0 in rate_strategy(),
            ln in rate_strategy(),
            kvs in 1e6..1e11f64,
            min_frac in 1e-4..0.999f64,
        ) {
            let min = kvs * min_frac;
            let a = silk_allocate(kvs, min, fg, fl > 0.0, l0 > 0.0);
            let left = (kvs - fg).max(min);
            let eps = 1e-9 * kvs;
            prop_assert!((a.left - left).abs() <= eps);
            prop_assert!(a.left >= min);
            prop_assert!(a.flush >= min && a.l0 >= min && a.ln >= min);
            prop_assert!(a.total() <= left + 2.0 * min + eps);
            match (fl > 0.0, l0 > 0.0) {
                (true, true) => {
                    prop_assert_eq!(a.branch, Branch::FlushAndL0);
                    prop_assert_eq!(a.flush, a.l0);
                    prop_assert_eq!(a.flush, (left / 2.0).max(min));
                    prop_assert_eq!(a.ln, min);
                    if left >= 2.0 * min {
                        prop_assert!((a.total() - (left + min)).abs() <= eps);
                    } else {
                        prop_assert!((a.total() - 3.0 * min).abs() <= eps);
                    }
                }
                (true, false) => {
                    prop_assert_eq!(a.branch, Branch::Flush);
                    prop_assert_eq!((a.flush, a.l0, a.ln), (left, min, min));
                    prop_assert!((a.total() - (left + 2.0 * min)).abs() <= eps);
                }
                (false, true) => {
                    prop_assert_eq!(a.branch, Branch::L0);
                    prop_assert_eq!((a.flush, a.l0, a.ln), (min, left, min));
                    prop_assert!((a.total() - (left + 2.0 * min)).abs() <= eps);
                }
                (false, false) => {
                    prop_assert_eq!(a.branch, Branch::Neither);
                    prop_assert_eq!((a.flush, a.l0, a.ln), (min, min, left));
                    prop_assert!((a.total() - (left + 2.0 * min)).abs() <= eps);
                }
            }
            // Through the policy: the rules carry these rates, floored and
            // rounded, never below the floor nor below minB.
            let mut p = SilkPolicy::new(kvs, min).unwrap();
            let out = p.period(Duration::ZERO, &[view(1, fig(fg, fl, l0, ln))]);
            let got = rates(&out, 1);
            prop_assert_eq!(got, [to_rate(a.flush), to_rate(a.l0), to_rate(a.ln)]);
            for x in got {
                prop_assert!(x >= RATE_FLOOR as u64);
                prop_assert!(x as f64 >= min.floor());
            }
            let sum: u64 = got.iter().sum();
            let floored = left.max(RATE_FLOOR) + 2.0 * min.max(RATE_FLOOR);
            prop_assert!(sum as f64 <= floored + 3.0);
            // The same figures again: nothing re-sent.
            prop_assert!(p.period(Duration::ZERO, &[view(1, fig(fg, fl, l0, ln))]).is_empty());
            // The read budget's share: what the foreground leaves, at least minB.
            let read_b = kvs * (1.0 + min_frac);
            let b_r = read_allocation(read_b, min, fg);
            prop_assert!(b_r >= min);
            prop_assert!(b_r <= read_b.max(min));
            if fg.is_finite() && fg >= 0.0 && read_b - fg >= min {
                prop_assert!((b_r + fg - read_b).abs() <= 1e-9 * read_b);
            }
        }
    }
}
