//! The priority object: critical requests first, and a limited depth of
//! non-critical ones (RCP §4.4's split admission control and critical-first
//! queue, FastResponse §3.3's limited-depth tokens).
//!
//! Semantics, for requests admitted with [`crate::Stage::admit`] and
//! completed with [`crate::Stage::complete`] (a one-phase
//! [`crate::Stage::enforce`] is admitted and completed at once, so it is
//! ordered but holds no slot):
//! - **Two classes, two sets of slots.** A request is critical when its
//!   context says so ([`crate::Criticality`]). At most `critical_depth`
//!   critical requests (unlimited by default) and at most `depth`
//!   non-critical requests are admitted and not yet completed at any time;
//!   neither class ever takes the other's slots.
//! - **Critical first.** While critical I/O is *active* — a critical request
//!   waits, is outstanding, or completed less than `window` ago — at most
//!   `busy_depth` non-critical requests are outstanding, and no non-critical
//!   request is admitted while a critical one waits.
//! - **FIFO among equals.** Each class is admitted in arrival order.
//! - **Starvation guard.** The oldest non-critical request is admitted
//!   anyway once it, and the class, have gone `starvation` without an
//!   admission, if fewer than `max(busy_depth, 1)` non-critical requests are
//!   outstanding: at least one non-critical request per `starvation`
//!   interval, never more than `depth` outstanding.
//! - **Promotion.** [`Priority::promote`] turns a workflow's waiting
//!   non-critical requests into critical ones (a critical activity waits for
//!   them); they keep their arrival order and take critical slots.
//! - **Rate.** With `rate`, non-critical requests also pass a token bucket
//!   ([`crate::object::Drl`] semantics, refunded at completion for bytes not
//!   moved) before they queue for a slot; critical requests do only with
//!   `rate_critical` (the rate is then a budget for everything the object
//!   admits, and criticality only orders).
//!
//! A request that nobody waits ahead of and that may go at once is admitted
//! by one compare-and-swap on a word of slot counts, and completed by one
//! atomic update, with no lock. Waiting requests queue under the state's
//! mutex and sleep on a condition variable; the mutex is held for a few
//! comparisons, never while a request sleeps, so configuration and
//! completion never wait behind requests.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use crate::criticality::{self, CriticalActivity, CriticalBoard};
use serde::{Deserialize, Serialize};

use super::Request;
use super::{
    Admitted, ConfigError, Drl, DrlConfig, EnforceError, EnforcementObject, ObjectConfig,
    TryEnforceError,
};
use crate::clock::SharedClock;
use crate::context::{Context, WorkflowId};
use crate::sync::atomic::AtomicU64;
use crate::sync::{Condvar, Mutex, MutexGuard};
use crate::units::{HumanDuration, Rate, Size};

/// The largest `depth` (and `busy_depth`, `critical_depth`) a [`Priority`]
/// object takes: what its counters hold.
pub const MAX_DEPTH: u32 = counts::MAX_OUTSTANDING;

/// Settings of a [`Priority`] object. Every field has a default, so
/// `kind = "priority"` alone is a working object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityConfig {
    /// Most non-critical requests outstanding (admitted, not completed)
    /// while no critical I/O is active: FastResponse's tokens. Larger keeps
    /// the device busier with background work; smaller shortens the queue a
    /// critical request finds when it arrives. Default 4; at least 1, at
    /// most 4,194,303 (the slot counter's size).
    #[serde(default = "default_depth")]
    pub depth: u32,
    /// Most non-critical requests outstanding while critical I/O is active.
    /// RCP uses 1. 0 holds background work back entirely while critical I/O
    /// is active, except for the starvation guard; larger values trade
    /// critical latency for background throughput. Default 1; at most
    /// `depth`.
    #[serde(default = "default_busy_depth")]
    pub busy_depth: u32,
    /// Most critical requests outstanding. Absent (the default): no limit
    /// below the slot counter's size (4,194,303 at once), so critical
    /// requests do not wait in the stage. A limit keeps a burst of
    /// critical requests from flooding the device itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_depth: Option<u32>,
    /// Most non-critical requests outstanding while critical I/O is active,
    /// counted over every process on the machine's board (and every object
    /// in them) that sets it: FastResponse's per-device tokens. `busy_depth`
    /// bounds each object alone, so N background processes put up to N ×
    /// `busy_depth` requests ahead of a critical one; this bounds their sum.
    /// Every non-critical request of such an object holds a token while
    /// outstanding (tokens are free while nothing critical is active), so
    /// requests already in the device count too. Smaller shortens the queue
    /// a critical request finds and slows background work more while
    /// critical I/O runs; all objects sharing it should give the same value
    /// (each compares the count with its own). A process without a board
    /// (`PAIO_BOARD=off`, or the Rust API without one installed) counts
    /// over its own objects. Absent (the default): no shared bound. At
    /// least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_busy_depth: Option<u32>,
    /// How long critical I/O stays active after the last critical request
    /// completed. It should cover the gap between a critical thread's
    /// requests (its think time); longer protects a bursty critical stream
    /// better and holds background work back longer. 0: active only while a
    /// critical request waits or is outstanding. Default 2 ms.
    #[serde(default = "default_window")]
    pub window: HumanDuration,
    /// Starvation guard: at least one non-critical request is admitted per
    /// this interval, whatever critical I/O does. RCP uses 10 ms. Shorter
    /// lets background work progress faster under constant critical load and
    /// puts more of it in the critical requests' way. Default 10 ms; more
    /// than 0.
    #[serde(default = "default_starvation")]
    pub starvation: HumanDuration,
    /// A rate limit on non-critical requests, in bytes or operations per
    /// second (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Whether critical requests pass `rate` too. false (the default): they
    /// never wait for tokens, so a background request made critical (a
    /// promotion, a loan, RocksDB's stall inheritance) leaves the rate
    /// behind, at the cost of everything else on the device. true: the rate
    /// is a budget nothing the object admits exceeds, and criticality only
    /// orders requests and gives them the critical slots (SILK's allocation
    /// is such a budget). Needs `rate`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rate_critical: bool,
    /// The burst of `rate`, in tokens (default: 10 ms of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<Size>,
    /// Pieces that large non-critical positional reads and writes of regular
    /// files are split into by the interposer (FastResponse §3.3), each
    /// admitted separately, so a critical request waits behind at most
    /// `depth` pieces instead of `depth` whole calls. Smaller pieces cut
    /// critical latency further and cost background work more system calls;
    /// FastResponse found 32 KiB keeps a fast SSD at full bandwidth. `"0"`
    /// turns splitting off. Default 32 KiB.
    #[serde(default = "default_split")]
    pub split: Size,
    /// When large non-critical calls are split: see [`SplitWhen`].
    #[serde(default, skip_serializing_if = "SplitWhen::is_busy")]
    pub split_when: SplitWhen,
}

/// When a [`Priority`] object asks for large non-critical calls to be split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitWhen {
    /// Only while critical I/O is active (here, or in another process per
    /// the board), the default: pieces keep fewer bytes of a call in flight
    /// (one piece at a time, except direct calls under the interposer),
    /// which costs background throughput, and are worth it only
    /// when a critical request may be waiting behind the call. A call that
    /// starts whole while nothing is critical stays whole.
    #[default]
    Busy,
    /// Always: the wait of a critical request that arrives behind a call is
    /// bounded even before the stage has seen any critical I/O, at the
    /// throughput cost at all times.
    Always,
}

impl SplitWhen {
    fn is_busy(&self) -> bool {
        *self == SplitWhen::Busy
    }
}

fn default_split() -> Size {
    Size(32 << 10)
}
fn default_depth() -> u32 {
    4
}
fn default_busy_depth() -> u32 {
    1
}
fn default_window() -> HumanDuration {
    HumanDuration(Duration::from_millis(2))
}
fn default_starvation() -> HumanDuration {
    HumanDuration(Duration::from_millis(10))
}

impl Default for PriorityConfig {
    fn default() -> Self {
        Self {
            depth: default_depth(),
            busy_depth: default_busy_depth(),
            critical_depth: None,
            shared_busy_depth: None,
            window: default_window(),
            starvation: default_starvation(),
            rate: None,
            rate_critical: false,
            burst: None,
            split: default_split(),
            split_when: SplitWhen::Busy,
        }
    }
}

impl PriorityConfig {
    /// Checks the settings' ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_string(),
            })
        };
        if self.depth == 0 {
            return invalid("depth", "must be at least 1");
        }
        if self.depth > counts::MAX_OUTSTANDING {
            return invalid(
                "depth",
                &format!("must be at most {}", counts::MAX_OUTSTANDING),
            );
        }
        if self.busy_depth > self.depth {
            return invalid(
                "busy_depth",
                &format!("must be at most depth ({})", self.depth),
            );
        }
        if self.critical_depth == Some(0) {
            return invalid(
                "critical_depth",
                "must be at least 1 (omit it for no limit)",
            );
        }
        if self.shared_busy_depth == Some(0) {
            return invalid(
                "shared_busy_depth",
                "must be at least 1 (omit it for no shared bound; busy_depth 0 holds \
                 this object's background work back entirely)",
            );
        }
        if self.starvation.0.is_zero() {
            return invalid("starvation", "must be more than 0");
        }
        if self.burst == Some(Size(0)) {
            return invalid("burst", "must be at least one token");
        }
        if self.burst.is_some() && self.rate.is_none() {
            return invalid("burst", "needs a rate");
        }
        if self.rate_critical && self.rate.is_none() {
            return invalid("rate_critical", "needs a rate");
        }
        if !self.split.0.is_multiple_of(SPLIT_ALIGN) {
            return invalid("split", SPLIT_REASON);
        }
        Ok(())
    }

    fn drl(&self) -> Option<DrlConfig> {
        self.rate.map(|rate| DrlConfig {
            burst: self.burst,
            ..DrlConfig::new(rate)
        })
    }
}

/// A snapshot of a [`Priority`] object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PriorityStatus {
    /// Non-critical requests outstanding.
    pub normal_outstanding: u32,
    /// Critical requests outstanding.
    pub critical_outstanding: u32,
    /// Non-critical requests waiting for a slot.
    pub normal_waiting: u32,
    /// Critical requests waiting for a slot.
    pub critical_waiting: u32,
    /// Whether critical I/O is active now.
    pub critical_active: bool,
    /// Non-critical requests admitted by the starvation guard so far.
    pub starvation_admissions: u64,
    /// Requests promoted to critical so far.
    pub promotions: u64,
}

/// Note bits: the slot class taken, whether the rate limiter charged it,
/// and which pool's `shared_busy_depth` token it holds (the board's, or the
/// process's own when it has none).
const NOTE_CRITICAL: u32 = 1;
const NOTE_RATED: u32 = 2;
const NOTE_TOKEN: u32 = 4;
const NOTE_TOKEN_LOCAL: u32 = 8;

#[derive(Debug)]
struct Waiter {
    seq: u64,
    workflow: WorkflowId,
    /// The kernel thread that issued it ([`Priority::promote_thread`]).
    thread: u64,
    critical: bool,
}

/// Pieces of a split call are multiples of this many bytes, so a piece of an
/// `O_DIRECT` call keeps the alignment the whole call had.
pub const SPLIT_ALIGN: u64 = 4096;

/// Why a `split` that is not a multiple of [`SPLIT_ALIGN`] is refused.
pub(crate) const SPLIT_REASON: &str =
    "must be 0 (off) or a multiple of 4 KiB, so pieces of direct I/O stay aligned";

/// The object's slot counters in one word, so that admitting or completing
/// a request nobody waits behind is one atomic operation, with no lock:
/// non-critical outstanding in bits 0–21, critical outstanding in bits
/// 22–43, queued waiters in bits 44–63. A request is admitted without the
/// lock only by a compare-and-swap that sees no waiter, so nobody overtakes
/// a queued request.
mod counts {
    const FIELD: u32 = 22;
    const FIELD_MASK: u64 = (1 << FIELD) - 1;
    /// Most requests of one class outstanding at once (the counter's size):
    /// a request beyond it waits for a slot.
    pub const MAX_OUTSTANDING: u32 = FIELD_MASK as u32;
    /// Most requests queued at once: an arrival beyond it waits, unqueued,
    /// until one leaves the queue.
    pub const MAX_WAITING: u32 = (1 << (64 - 2 * FIELD)) - 1;
    /// One queued waiter.
    pub const WAITER: u64 = 1 << (2 * FIELD);

    /// One outstanding request of class `critical`.
    #[inline]
    pub const fn one(critical: bool) -> u64 {
        if critical {
            1 << FIELD
        } else {
            1
        }
    }

    /// Outstanding requests: `[non-critical, critical]`.
    #[inline]
    pub const fn outstanding(w: u64) -> [u32; 2] {
        [(w & FIELD_MASK) as u32, ((w >> FIELD) & FIELD_MASK) as u32]
    }

    /// Queued waiters.
    #[inline]
    pub const fn waiting(w: u64) -> u32 {
        (w >> (2 * FIELD)) as u32
    }
}

/// What admission decisions read besides the queue: the outstanding
/// requests of each class and when the last critical one (that the object
/// itself records) completed.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    /// `[non-critical, critical]`.
    outstanding: [u32; 2],
    last_critical_ns: Option<u64>,
}

#[derive(Debug)]
struct State {
    config: PriorityConfig,
    /// Waiting requests of both classes, in arrival order.
    waiting: VecDeque<Waiter>,
    next_seq: u64,
    /// When the last non-critical request was admitted.
    last_normal_ns: u64,
    starvation_admissions: u64,
    promotions: u64,
}

/// What a waiting request may do now.
enum Verdict {
    Admit {
        critical: bool,
        starved: bool,
    },
    /// Wait; re-check by this time at the latest (`None`: until woken).
    Wait(Option<u64>),
}

impl PriorityConfig {
    fn critical_limit(&self) -> u32 {
        self.critical_depth
            .unwrap_or(u32::MAX)
            .min(counts::MAX_OUTSTANDING)
    }
}

/// Until when critical I/O stays active through its window alone.
fn window_end(load: Load, window_ns: u64) -> Option<u64> {
    load.last_critical_ns.map(|t| t.saturating_add(window_ns))
}

impl State {
    fn window_ns(&self) -> u64 {
        self.config.window.0.as_nanos() as u64
    }

    fn critical_active(&self, load: Load, now: u64, critical_waiting: bool) -> bool {
        critical_waiting
            || load.outstanding[1] > 0
            || window_end(load, self.window_ns()).is_some_and(|e| now < e)
    }

    /// How often a non-critical waiter held back by other processes' critical
    /// I/O re-reads the board (nothing notifies across processes): half the
    /// window, between 50 µs and 1 ms.
    fn board_poll_ns(&self) -> u64 {
        (self.window_ns() / 2).clamp(50_000, 1_000_000)
    }

    /// The verdict for a queued request of class `critical`, number `seq`,
    /// queued since `since_ns`, with `load` outstanding. `others`: whether
    /// critical I/O of other processes is active (the board's answer; read
    /// only for non-critical requests).
    fn verdict(
        &self,
        seq: u64,
        critical: bool,
        since_ns: u64,
        now: u64,
        load: Load,
        others: bool,
    ) -> Verdict {
        let first = self
            .waiting
            .iter()
            .find(|w| w.critical == critical)
            .is_some_and(|w| w.seq == seq);
        if critical {
            return if first && load.outstanding[1] < self.config.critical_limit() {
                Verdict::Admit {
                    critical: true,
                    starved: false,
                }
            } else {
                Verdict::Wait(None)
            };
        }
        if !first {
            return Verdict::Wait(None);
        }
        let critical_waiting = self.waiting.iter().any(|w| w.critical);
        let active = others || self.critical_active(load, now, critical_waiting);
        let limit = if active {
            self.config.busy_depth
        } else {
            self.config.depth
        };
        if !critical_waiting && load.outstanding[0] < limit {
            return Verdict::Admit {
                critical: false,
                starved: false,
            };
        }
        let starved_at = self.starved_at(since_ns);
        if self.starved(since_ns, now, load) {
            return Verdict::Admit {
                critical: false,
                starved: true,
            };
        }
        // Re-check when a window that blocks it closes or the guard falls
        // due; anything else (a completion, a critical waiter leaving)
        // notifies.
        let window = if critical_waiting || load.outstanding[1] > 0 {
            None
        } else {
            window_end(load, self.window_ns())
        };
        let poll = others.then(|| now.saturating_add(self.board_poll_ns()));
        let deadline = [window, Some(starved_at), poll]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .min();
        Verdict::Wait(deadline)
    }

    /// When a non-critical request queued since `since_ns` falls due for
    /// the starvation guard.
    fn starved_at(&self, since_ns: u64) -> u64 {
        let starvation = self.config.starvation.0.as_nanos() as u64;
        since_ns.max(self.last_normal_ns).saturating_add(starvation)
    }

    /// Whether the starvation guard admits a non-critical request queued
    /// since `since_ns` now, with `load` outstanding.
    fn starved(&self, since_ns: u64, now: u64, load: Load) -> bool {
        now >= self.starved_at(since_ns) && load.outstanding[0] < self.config.busy_depth.max(1)
    }

    /// Bookkeeping of a queued request's admission.
    fn take(&mut self, critical: bool, starved: bool, now: u64) {
        if !critical {
            self.last_normal_ns = now;
            if starved {
                self.starvation_admissions += 1;
            }
        }
    }
}

/// The settings the lock-free admission reads, mirrored from the
/// configuration (a request racing a change may see either value of each).
#[derive(Debug)]
struct Limits {
    depth: AtomicU32,
    busy_depth: AtomicU32,
    /// `shared_busy_depth` (0: none).
    shared: AtomicU32,
    critical: AtomicU32,
    window_ns: AtomicU64,
    /// `split` in bytes (0: off).
    split: AtomicU64,
    /// `split_when = "always"`.
    split_always: AtomicBool,
    /// `rate_critical`.
    rate_critical: AtomicBool,
}

impl Limits {
    fn new(config: &PriorityConfig) -> Self {
        let l = Self {
            depth: AtomicU32::new(0),
            busy_depth: AtomicU32::new(0),
            shared: AtomicU32::new(0),
            critical: AtomicU32::new(0),
            window_ns: AtomicU64::new(0),
            split: AtomicU64::new(0),
            split_always: AtomicBool::new(false),
            rate_critical: AtomicBool::new(false),
        };
        l.set(config);
        l
    }

    fn set(&self, c: &PriorityConfig) {
        self.depth.store(c.depth, Ordering::Relaxed);
        self.busy_depth.store(c.busy_depth, Ordering::Relaxed);
        self.shared
            .store(c.shared_busy_depth.unwrap_or(0), Ordering::Relaxed);
        self.critical.store(c.critical_limit(), Ordering::Relaxed);
        self.window_ns
            .store(c.window.0.as_nanos() as u64, Ordering::Relaxed);
        self.split.store(c.split.0, Ordering::Relaxed);
        self.split_always
            .store(c.split_when == SplitWhen::Always, Ordering::Relaxed);
        self.rate_critical.store(c.rate_critical, Ordering::Relaxed);
    }
}

/// Critical-first, limited-depth admission (see the module documentation
/// for its exact semantics).
#[derive(Debug)]
pub struct Priority {
    /// Outstanding requests and queued waiters ([`counts`]).
    counts: AtomicU64,
    /// When the last critical request this object records completed, plus
    /// one (0: none).
    last_critical: AtomicU64,
    limits: Limits,
    /// The queue and everything else; held for a few comparisons, never
    /// while a request sleeps, and not at all by a request nobody waits
    /// behind.
    state: Mutex<State>,
    changed: Condvar,
    /// The non-critical rate limiter, when a rate is set.
    rate: ArcSwapOption<Drl>,
    /// Whether `rate` is set, read before it (loading an `ArcSwapOption`
    /// costs more than the rest of an admission).
    rated: AtomicBool,
    clock: SharedClock,
    /// The board to ask about other processes' critical I/O; `None`: the
    /// process's ([`criticality::board`]), if installed.
    board: Option<Arc<dyn CriticalBoard>>,
    /// The critical requests of the object's stage, whatever their route.
    activity: Option<Arc<CriticalActivity>>,
}

impl Priority {
    /// `obj_init`: an object with no request outstanding.
    pub fn new(config: PriorityConfig, clock: SharedClock) -> Result<Self, ConfigError> {
        config.validate()?;
        let rate = match config.drl() {
            Some(c) => Some(Arc::new(Drl::new(c, clock.clone())?)),
            None => None,
        };
        Ok(Self {
            counts: AtomicU64::new(0),
            last_critical: AtomicU64::new(0),
            limits: Limits::new(&config),
            state: Mutex::new(State {
                config,
                waiting: VecDeque::new(),
                next_seq: 0,
                last_normal_ns: clock.now_ns(),
                starvation_admissions: 0,
                promotions: 0,
            }),
            changed: Condvar::new(),
            rated: AtomicBool::new(rate.is_some()),
            rate: ArcSwapOption::new(rate),
            clock,
            board: None,
            activity: None,
        })
    }

    /// The same object, also holding non-critical requests back while
    /// `activity` (its stage's critical requests, whichever object they go
    /// through) is active.
    pub fn with_activity(self, activity: Arc<CriticalActivity>) -> Self {
        Self {
            activity: Some(activity),
            ..self
        }
    }

    /// Like [`Priority::new`], asking `board` (instead of the process's
    /// installed one) about other processes' critical I/O.
    pub fn with_board(
        config: PriorityConfig,
        clock: SharedClock,
        board: Arc<dyn CriticalBoard>,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            board: Some(board),
            ..Self::new(config, clock)?
        })
    }

    /// The outstanding requests and the last critical completion, as of
    /// counts word `w`.
    fn load(&self, w: u64) -> Load {
        let last = self.last_critical.load(Ordering::Acquire);
        Load {
            outstanding: counts::outstanding(w),
            last_critical_ns: last.checked_sub(1),
        }
    }

    /// Whether critical I/O outside this object is active: its stage's
    /// requests through other objects, or other processes' per the board.
    fn others_active(&self, window_ns: u64) -> bool {
        if self
            .activity
            .as_ref()
            .is_some_and(|a| a.active(self.clock.as_ref(), window_ns))
        {
            return true;
        }
        self.board().is_some_and(|b| b.others_active(window_ns))
    }

    /// The board this object asks: its own, else the process's.
    fn board(&self) -> Option<&Arc<dyn CriticalBoard>> {
        self.board.as_ref().or_else(|| criticality::board())
    }

    /// Takes a `shared_busy_depth` token (see [`CriticalBoard::normal_take`])
    /// from the board, or the process's pool without one; the note bit that
    /// records which, or `None` if the pool is full.
    #[cold]
    fn take_token(&self, limit: Option<u32>) -> Option<u32> {
        match self.board() {
            Some(b) => b.normal_take(limit).then_some(NOTE_TOKEN),
            None => criticality::local_normal_take(limit).then_some(NOTE_TOKEN_LOCAL),
        }
    }

    /// Returns the token that `note` records, if any.
    #[inline]
    fn release_token(&self, note: u32) {
        if note & (NOTE_TOKEN | NOTE_TOKEN_LOCAL) != 0 {
            self.release_token_slow(note);
        }
    }

    #[cold]
    fn release_token_slow(&self, note: u32) {
        if note & NOTE_TOKEN != 0 {
            if let Some(b) = self.board() {
                b.normal_release();
            }
        } else if note & NOTE_TOKEN_LOCAL != 0 {
            criticality::local_normal_release();
        }
    }

    /// The bound on the shared pool for a non-critical request admitted
    /// with `w` outstanding, as of now: `shared_busy_depth` while critical
    /// I/O is active (here, in the stage, or in another process), none
    /// while it is not.
    #[cold]
    fn shared_limit(&self, w: u64) -> Option<u32> {
        let shared = self.limits.shared.load(Ordering::Relaxed);
        self.active_now(w, || false).then_some(shared)
    }

    /// Whether critical I/O is active now, as of counts word `w`: a critical
    /// request outstanding here, this object's window open, `waiting()` (a
    /// critical request queued; asked only if neither), or critical I/O
    /// outside the object. Cheapest first: the board last.
    fn active_now(&self, w: u64, waiting: impl FnOnce() -> bool) -> bool {
        let window_ns = self.limits.window_ns.load(Ordering::Relaxed);
        let load = self.load(w);
        load.outstanding[1] > 0
            || window_end(load, window_ns).is_some_and(|e| self.clock.now_ns() < e)
            || waiting()
            || self.others_active(window_ns)
    }

    /// Gives back a slot of class `critical` (never one it does not hold)
    /// and wakes the waiters, if any, to look at the counts again.
    #[inline]
    fn release_slot(&self, critical: bool) {
        let class = usize::from(critical);
        let before = self
            .counts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (counts::outstanding(w)[class] > 0).then(|| w - counts::one(critical))
            })
            .unwrap_or_else(|w| w);
        // Waking costs a system call even with nobody asleep: only if
        // someone waits. The lock orders the wake after a waiter that
        // looked at the counts before this release is asleep.
        if counts::waiting(before) > 0 {
            drop(self.lock());
            self.changed.notify_all();
        }
    }

    /// Whether a request of class `critical` passes the rate limiter.
    #[inline]
    fn pays_rate(&self, critical: bool) -> bool {
        self.rated.load(Ordering::Acquire)
            && (!critical || self.limits.rate_critical.load(Ordering::Relaxed))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Promotes the waiting non-critical requests of `workflow` to critical
    /// (a critical activity waits for them), keeping their arrival order.
    /// Returns how many were promoted. Requests still in the rate limiter are
    /// promoted once they queue for a slot only if this is called again.
    pub fn promote(&self, workflow: WorkflowId) -> u32 {
        self.promote_where(|w| w.workflow == workflow)
    }

    /// Promotes the waiting non-critical requests that match `which`.
    fn promote_where(&self, which: impl Fn(&Waiter) -> bool) -> u32 {
        let mut n = 0;
        {
            let mut st = self.lock();
            for w in st.waiting.iter_mut() {
                if !w.critical && which(w) {
                    w.critical = true;
                    n += 1;
                }
            }
            st.promotions += u64::from(n);
        }
        if n > 0 {
            self.changed.notify_all();
        }
        n
    }

    /// Wakes waiting requests so they re-read the clock. Needed only with a
    /// clock that jumps (a test's [`crate::FakeClock`]); a real clock wakes
    /// them by itself.
    pub fn wake_waiters(&self) {
        self.changed.notify_all();
        if let Some(drl) = self.rate.load().as_ref() {
            drl.wake_waiters();
        }
    }

    /// The object's current state.
    pub fn status(&self) -> PriorityStatus {
        let now = self.clock.now_ns();
        let st = self.lock();
        let load = self.load(self.counts.load(Ordering::Acquire));
        let critical_waiting = st.waiting.iter().filter(|w| w.critical).count() as u32;
        PriorityStatus {
            normal_outstanding: load.outstanding[0],
            critical_outstanding: load.outstanding[1],
            normal_waiting: st.waiting.len() as u32 - critical_waiting,
            critical_waiting,
            critical_active: st.critical_active(load, now, critical_waiting > 0),
            starvation_admissions: st.starvation_admissions,
            promotions: st.promotions,
        }
    }

    /// Whether a request of class `critical` that nobody waits ahead of may
    /// take a slot with `w` outstanding. Reads the clock only where the
    /// answer depends on it. (The last admission time matters only to
    /// waiters, which arrive later.)
    #[inline]
    fn may_go_now(&self, w: u64, critical: bool) -> bool {
        let [normal, crit] = counts::outstanding(w);
        let l = &self.limits;
        if critical {
            return crit < l.critical.load(Ordering::Relaxed);
        }
        if normal < l.busy_depth.load(Ordering::Relaxed) {
            return true;
        }
        if normal >= l.depth.load(Ordering::Relaxed) || crit > 0 {
            return false;
        }
        let window_ns = l.window_ns.load(Ordering::Relaxed);
        window_end(self.load(w), window_ns).is_none_or(|end| self.clock.now_ns() >= end)
            && !self.others_active(window_ns)
    }

    /// Takes a slot for a request of class `critical` (and a shared token
    /// for a non-critical one, with `shared_busy_depth`), waiting as long as
    /// the semantics demand. Returns whether it was admitted as critical (it
    /// may have been promoted while waiting), how long it waited (0: not at
    /// all) and the token's note bit (0: none).
    #[inline]
    fn acquire(&self, ctx: &Context, critical: bool) -> (bool, u64, u32) {
        if let Some(token) = self.acquire_now(critical) {
            return (critical, 0, token);
        }
        self.acquire_queued(ctx, critical)
    }

    /// Takes a slot for a request of class `critical` if nobody waits and
    /// it may go at once: one compare-and-swap (then a shared token, for a
    /// non-critical request of an object with `shared_busy_depth`; the
    /// slot is given back if the pool is full). Returns the token's note
    /// bit (0: none) if it did.
    #[inline]
    fn acquire_now(&self, critical: bool) -> Option<u32> {
        let mut w = self.counts.load(Ordering::Acquire);
        while counts::waiting(w) == 0 && self.may_go_now(w, critical) {
            let taken = w + counts::one(critical);
            match self
                .counts
                .compare_exchange_weak(w, taken, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if critical || self.limits.shared.load(Ordering::Relaxed) == 0 {
                        return Some(0);
                    }
                    let token = self.take_token(self.shared_limit(taken));
                    if token.is_none() {
                        self.release_slot(false);
                    }
                    return token;
                }
                Err(now) => w = now,
            }
        }
        None
    }

    /// [`Priority::acquire`] behind other waiters, or when the request must
    /// wait: it queues, and sleeps until its verdict admits it.
    #[cold]
    fn acquire_queued(&self, ctx: &Context, critical: bool) -> (bool, u64, u32) {
        let mut st = self.lock();
        let arrival = self.clock.now_ns();
        // Only more than a million threads waiting at once fill the queue.
        while counts::waiting(self.counts.load(Ordering::Acquire)) >= counts::MAX_WAITING {
            st = self
                .changed
                .wait_timeout(st, Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        // Counted as waiting before its first look at the counts: a
        // completion that does not see it is seen by that look, one that
        // sees it takes the lock and notifies.
        self.counts.fetch_add(counts::WAITER, Ordering::AcqRel);
        let seq = st.next_seq;
        st.next_seq += 1;
        st.waiting.push_back(Waiter {
            seq,
            workflow: ctx.workflow,
            thread: crate::context::current_workflow(),
            critical,
        });
        let mut slept = false;
        loop {
            let now = self.clock.now_ns();
            let pos = st
                .waiting
                .iter()
                .position(|w| w.seq == seq)
                .expect("a waiter stays queued until it leaves");
            let class = st.waiting[pos].critical;
            let others = !class && self.others_active(st.window_ns());
            let w = self.counts.load(Ordering::Acquire);
            match st.verdict(seq, class, arrival, now, self.load(w), others) {
                Verdict::Admit { critical, starved } => {
                    // A shared token first (the starvation guard's admission
                    // takes one whatever the pool holds); with the pool
                    // full, the board is read again after a poll interval
                    // (nothing notifies across processes), or when the
                    // guard falls due.
                    let mut token = 0;
                    let mut starved = starved;
                    let shared = st.config.shared_busy_depth;
                    if let (false, Some(shared)) = (critical, shared) {
                        let load = self.load(w);
                        let active = others || st.critical_active(load, now, false);
                        let mut taken = self.take_token((active && !starved).then_some(shared));
                        if taken.is_none() && st.starved(arrival, now, load) {
                            starved = true;
                            taken = self.take_token(None);
                        }
                        match taken {
                            Some(t) => token = t,
                            None => {
                                slept = true;
                                let poll = now.saturating_add(st.board_poll_ns());
                                let deadline = poll.min(st.starved_at(arrival));
                                st = self.sleep(st, Some(deadline), now);
                                continue;
                            }
                        }
                    }
                    // Only completions change the counts meanwhile (nobody
                    // else admits while a waiter is counted, and other
                    // waiters hold the lock): look again if one did.
                    let taken = w - counts::WAITER + counts::one(critical);
                    if self
                        .counts
                        .compare_exchange(w, taken, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        self.release_token(token);
                        continue;
                    }
                    st.waiting.remove(pos);
                    st.take(critical, starved, now);
                    let others = !st.waiting.is_empty();
                    drop(st);
                    if others {
                        // The next of either class may now be first in line.
                        self.changed.notify_all();
                    }
                    // Admitted at its first look: it did not wait.
                    let waited = if slept {
                        now.saturating_sub(arrival).max(1)
                    } else {
                        0
                    };
                    return (critical, waited, token);
                }
                Verdict::Wait(deadline) => {
                    slept = true;
                    st = self.sleep(st, deadline, now);
                }
            }
        }
    }

    /// Sleeps on the condition variable until notified, or until `deadline`
    /// (stage-clock ns; `None`: no deadline) with a real clock; a test's
    /// clock does not move while the thread sleeps, so it waits until woken
    /// ([`Priority::wake_waiters`]).
    fn sleep<'a>(
        &self,
        st: MutexGuard<'a, State>,
        deadline: Option<u64>,
        now: u64,
    ) -> MutexGuard<'a, State> {
        match deadline {
            Some(deadline) if self.clock.is_real_time() => {
                let ns = deadline.saturating_sub(now).max(1);
                self.changed
                    .wait_timeout(st, Duration::from_nanos(ns))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            _ => self.changed.wait(st).unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl EnforcementObject for Priority {
    fn kind(&self) -> &'static str {
        "priority"
    }

    fn waiting_now(&self) -> u64 {
        let queued = self.lock().waiting.len() as u64;
        queued + self.rate.load().as_ref().map_or(0, |d| d.waiting_now())
    }

    fn configure(&self, config: &ObjectConfig) -> Result<(), ConfigError> {
        let ObjectConfig::Priority(new) = config else {
            return Err(ConfigError::WrongKind {
                object: "priority",
                given: config.kind(),
            });
        };
        new.validate()?;
        match (new.drl(), self.rate.load_full()) {
            (Some(c), Some(drl)) => drl.configure(&ObjectConfig::Drl(c))?,
            (Some(c), None) => {
                self.rate
                    .store(Some(Arc::new(Drl::new(c, self.clock.clone())?)));
                self.rated.store(true, Ordering::Release);
            }
            (None, Some(drl)) => {
                self.rated.store(false, Ordering::Release);
                self.rate.store(None);
                // Requests still waiting in the old bucket are released.
                drl.configure(&ObjectConfig::Drl(DrlConfig::new(Rate::bytes_per_sec(
                    u64::MAX / 1_000_000_000,
                ))))?;
            }
            (None, None) => {}
        }
        {
            let mut st = self.lock();
            self.limits.set(new);
            st.config = new.clone();
        }
        self.changed.notify_all();
        Ok(())
    }

    /// One-phase use: ordered and admitted like a two-phase request, then
    /// completed at once (it holds no slot while its call runs).
    fn enforce(&self, ctx: &Context, _request: &mut Request<'_>) -> Result<u64, EnforceError> {
        let admitted = self.admit(ctx)?;
        self.complete(ctx, admitted.note, ctx.size);
        Ok(admitted.waited_ns)
    }

    fn config(&self) -> ObjectConfig {
        ObjectConfig::Priority(self.lock().config.clone())
    }

    fn two_phase(&self) -> bool {
        true
    }

    /// `split` for a non-critical request larger than it while critical I/O
    /// is active (here, or in another process per the board): splitting
    /// bounds how long a critical request waits behind it, and costs
    /// throughput (fewer bytes in flight per call), so a request is
    /// issued whole when nothing critical runs. Critical requests are never
    /// split.
    fn split_size(&self, ctx: &Context) -> Option<u64> {
        let n = self.limits.split.load(Ordering::Relaxed);
        if n == 0 || ctx.size <= n || ctx.criticality.is_critical() {
            return None;
        }
        if self.limits.split_always.load(Ordering::Relaxed) {
            return Some(n);
        }
        let w = self.counts.load(Ordering::Acquire);
        let critical_queued =
            || counts::waiting(w) > 0 && self.lock().waiting.iter().any(|w| w.critical);
        self.active_now(w, critical_queued).then_some(n)
    }

    /// A request that passes a rate in bytes ([`PriorityConfig::rate`]) is
    /// charged its size.
    fn charges_bytes(&self, ctx: &Context) -> bool {
        self.pays_rate(ctx.criticality.is_critical())
            && self
                .rate
                .load()
                .as_ref()
                .is_some_and(|drl| drl.charges_bytes(ctx))
    }

    fn promote_thread(&self, thread: u64) -> u32 {
        self.promote_where(|w| w.thread == thread)
    }

    #[inline]
    fn admit(&self, ctx: &Context) -> Result<Admitted, EnforceError> {
        let mut critical = ctx.criticality.is_critical();
        let mut note = 0;
        let mut waited_ns = 0;
        if self.pays_rate(critical) {
            if let Some(drl) = self.rate.load_full() {
                waited_ns = drl.enforce(ctx, &mut Request::new(None))?;
                note |= NOTE_RATED;
                // A critical thread may have started waiting for this one
                // while it waited for tokens.
                critical = critical || crate::inheritance::calling_thread_holds_loan();
            }
        }
        let (as_critical, queued_ns, token) = self.acquire(ctx, critical);
        note |= token;
        if as_critical {
            note |= NOTE_CRITICAL;
        }
        Ok(Admitted {
            waited_ns: waited_ns + queued_ns,
            note,
        })
    }

    /// Admits only what [`EnforcementObject::admit`] would admit without
    /// waiting: tokens already in the bucket (with `rate`) and a slot free
    /// with nobody waiting ahead; otherwise nothing is taken and the request
    /// would wait indefinitely (until completions free a slot).
    fn try_admit(&self, ctx: &Context) -> Result<Admitted, TryEnforceError> {
        let critical = ctx.criticality.is_critical();
        let mut note = 0;
        let mut rated = None;
        if self.pays_rate(critical) {
            if let Some(drl) = self.rate.load_full() {
                drl.try_enforce(ctx, &mut Request::new(None))?;
                note |= NOTE_RATED;
                rated = Some(drl);
            }
        }
        let Some(token) = self.acquire_now(critical) else {
            if let Some(drl) = rated {
                drl.give_back(ctx);
            }
            return Err(TryEnforceError::Wait(Duration::MAX));
        };
        note |= token;
        if critical {
            note |= NOTE_CRITICAL;
        }
        Ok(Admitted { waited_ns: 0, note })
    }

    #[inline]
    fn complete(&self, ctx: &Context, note: u32, moved: u64) {
        let critical = note & NOTE_CRITICAL != 0;
        // The window after a critical request: the stage's activity records
        // it for requests that were critical from the start (one clock read
        // per request, not two); this object keeps it for the others
        // (promoted ones) and when it has no stage.
        let stage_records = self.activity.is_some() && ctx.criticality.is_critical();
        if critical && !stage_records {
            let now = self.clock.now_ns();
            self.last_critical
                .fetch_max(now.saturating_add(1), Ordering::AcqRel);
        }
        self.release_slot(critical);
        self.release_token(note);
        if note & NOTE_RATED != 0 {
            if let Some(drl) = self.rate.load().as_ref() {
                drl.refund(ctx, moved);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::context::{Criticality, RequestContext, RequestType};
    use proptest::prelude::*;
    use std::sync::mpsc;

    fn ctx(workflow: u64, critical: bool, size: u64) -> Context {
        let c = if critical {
            Criticality::Critical
        } else {
            Criticality::Normal
        };
        Context::explicit(workflow, RequestType::READ, RequestContext::NONE, size)
            .with_criticality(c)
    }

    fn object(config: PriorityConfig) -> (Arc<Priority>, FakeClock) {
        let clock = FakeClock::new();
        let p = Priority::new(config, Arc::new(clock.clone())).unwrap();
        (Arc::new(p), clock)
    }

    /// Spawns a thread that admits `c` and reports `(tag, note)` on `tx`
    /// once admitted; returns when the request is queued (or admitted).
    fn spawn_admit(
        p: &Arc<Priority>,
        c: Context,
        tag: u64,
        tx: &mpsc::Sender<(u64, u32)>,
    ) -> std::thread::JoinHandle<()> {
        let (p2, tx2) = (p.clone(), tx.clone());
        let before = p.status();
        let h = std::thread::spawn(move || {
            let a = p2.admit(&c).unwrap();
            tx2.send((tag, a.note)).unwrap();
        });
        // Wait until the request is queued or admitted (bounded polling,
        // no sleep-as-synchronisation).
        for _ in 0..10_000_000 {
            let s = p.status();
            let queued = s.normal_waiting + s.critical_waiting
                > before.normal_waiting + before.critical_waiting;
            let admitted = s.normal_outstanding + s.critical_outstanding
                > before.normal_outstanding + before.critical_outstanding;
            if queued || admitted {
                return h;
            }
            std::thread::yield_now();
        }
        panic!("request {tag} neither queued nor admitted");
    }

    fn no_more(rx: &mpsc::Receiver<(u64, u32)>) {
        assert!(
            rx.recv_timeout(Duration::from_millis(20)).is_err(),
            "a request was admitted that should still wait"
        );
    }

    #[test]
    fn idle_object_admits_both_classes_at_once() {
        let (p, _) = object(PriorityConfig::default());
        let a = p.admit(&ctx(1, false, 10)).unwrap();
        let b = p.admit(&ctx(2, true, 10)).unwrap();
        assert_eq!((a.waited_ns, a.note), (0, 0));
        assert_eq!((b.waited_ns, b.note), (0, NOTE_CRITICAL));
        let s = p.status();
        assert_eq!((s.normal_outstanding, s.critical_outstanding), (1, 1));
        p.complete(&ctx(1, false, 10), a.note, 10);
        p.complete(&ctx(2, true, 10), b.note, 10);
        let s = p.status();
        assert_eq!((s.normal_outstanding, s.critical_outstanding), (0, 0));
    }

    #[test]
    fn depth_limits_background_and_fifo_holds() {
        let (p, _) = object(PriorityConfig {
            depth: 2,
            ..PriorityConfig::default()
        });
        let (tx, rx) = mpsc::channel();
        let handles: Vec<_> = (0..5)
            .map(|i| spawn_admit(&p, ctx(10 + i, false, 1), i, &tx))
            .collect();
        let first: Vec<u64> = (0..2).map(|_| rx.recv().unwrap().0).collect();
        assert_eq!(first, [0, 1]);
        no_more(&rx);
        assert_eq!(p.status().normal_outstanding, 2);
        for expect in 2..5 {
            p.complete(&ctx(0, false, 1), 0, 1);
            assert_eq!(rx.recv().unwrap().0, expect, "FIFO order");
            assert!(p.status().normal_outstanding <= 2);
        }
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn critical_waiters_go_before_background_waiters() {
        let (p, clock) = object(PriorityConfig {
            depth: 1,
            busy_depth: 0,
            critical_depth: Some(1),
            ..PriorityConfig::default()
        });
        let n = p.admit(&ctx(1, false, 1)).unwrap();
        let c = p.admit(&ctx(2, true, 1)).unwrap();
        let (tx, rx) = mpsc::channel();
        let hb = spawn_admit(&p, ctx(3, false, 1), 3, &tx); // background
        let hc = spawn_admit(&p, ctx(4, true, 1), 4, &tx); // critical
                                                           // A background slot frees, but a critical request waits: it stays.
        p.complete(&ctx(1, false, 1), n.note, 1);
        no_more(&rx);
        // The critical slot frees: the critical waiter goes first.
        p.complete(&ctx(2, true, 1), c.note, 1);
        assert_eq!(rx.recv().unwrap(), (4, NOTE_CRITICAL));
        no_more(&rx);
        // It completes; inside its window busy_depth 0 still applies.
        p.complete(&ctx(4, true, 1), NOTE_CRITICAL, 1);
        assert!(p.status().critical_active);
        no_more(&rx);
        // Once the window has passed, background goes.
        clock.advance(Duration::from_millis(2));
        p.wake_waiters();
        assert_eq!(rx.recv().unwrap(), (3, 0));
        assert!(!p.status().critical_active);
        hb.join().unwrap();
        hc.join().unwrap();
    }

    /// A board whose answer the test sets, with a real token pool.
    #[derive(Debug, Default)]
    struct FakeBoard {
        others: std::sync::atomic::AtomicBool,
        tokens: std::sync::atomic::AtomicU64,
    }

    impl FakeBoard {
        fn tokens(&self) -> u64 {
            self.tokens.load(Ordering::Relaxed)
        }
    }

    impl CriticalBoard for FakeBoard {
        fn critical_admitted(&self) {}
        fn critical_completed(&self, _now_ns: Option<u64>) {}
        fn others_active(&self, _window_ns: u64) -> bool {
            self.others.load(Ordering::Relaxed)
        }
        fn normal_take(&self, limit: Option<u32>) -> bool {
            criticality::take_below(&self.tokens, limit)
        }
        fn normal_release(&self) {
            self.tokens.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Two objects on one board, as two background processes would be:
    /// while critical I/O is active their non-critical requests together
    /// hold at most `shared_busy_depth` tokens, each below its own
    /// `busy_depth`; while it is not, tokens are taken without a bound (so
    /// requests already in flight count once it starts).
    #[test]
    fn shared_busy_depth_bounds_the_sum_over_objects_on_one_board() {
        let board = Arc::new(FakeBoard::default());
        let clock = FakeClock::new();
        let config = PriorityConfig {
            depth: 4,
            busy_depth: 4,
            shared_busy_depth: Some(2),
            ..PriorityConfig::default()
        };
        let new = || {
            let c = Arc::new(clock.clone());
            Arc::new(Priority::with_board(config.clone(), c, board.clone()).unwrap())
        };
        let (a, b) = (new(), new());
        let a1 = a.admit(&ctx(1, false, 1)).unwrap();
        let a2 = a.admit(&ctx(1, false, 1)).unwrap();
        let a3 = a.admit(&ctx(1, false, 1)).unwrap();
        assert_eq!(a1.note, NOTE_TOKEN);
        assert_eq!(board.tokens(), 3, "nothing critical: no bound");
        board.others.store(true, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let h = spawn_admit(&b, ctx(2, false, 1), 2, &tx);
        no_more(&rx);
        assert!(
            matches!(
                a.try_admit(&ctx(1, false, 1)),
                Err(TryEnforceError::Wait(_))
            ),
            "the pool is full"
        );
        assert_eq!(a.status().normal_outstanding, 3, "the slot was given back");
        // Critical requests take no token and are not held.
        let c = b.admit(&ctx(3, true, 1)).unwrap();
        assert_eq!(c.note, NOTE_CRITICAL);
        b.complete(&ctx(3, true, 1), c.note, 1);
        a.complete(&ctx(1, false, 1), a1.note, 1);
        b.wake_waiters();
        no_more(&rx);
        assert_eq!(board.tokens(), 2);
        a.complete(&ctx(1, false, 1), a2.note, 1);
        b.wake_waiters();
        assert_eq!(rx.recv().unwrap(), (2, NOTE_TOKEN), "a token freed");
        h.join().unwrap();
        assert_eq!(board.tokens(), 2);
        // The starvation guard admits one anyway, beyond the pool.
        let h = spawn_admit(&a, ctx(1, false, 1), 1, &tx);
        no_more(&rx);
        clock.advance(Duration::from_millis(10));
        a.wake_waiters();
        assert_eq!(rx.recv().unwrap(), (1, NOTE_TOKEN));
        h.join().unwrap();
        assert_eq!(board.tokens(), 3);
        assert_eq!(a.status().starvation_admissions, 1);
        a.complete(&ctx(1, false, 1), a3.note, 1);
        a.complete(&ctx(1, false, 1), NOTE_TOKEN, 1);
        b.complete(&ctx(2, false, 1), NOTE_TOKEN, 1);
        assert_eq!(board.tokens(), 0, "every token given back");
    }

    /// Without `shared_busy_depth` no token is taken; without a board the
    /// process's own pool is used.
    #[test]
    fn shared_tokens_only_when_asked_and_locally_without_a_board() {
        let board = Arc::new(FakeBoard::default());
        let clock: SharedClock = Arc::new(FakeClock::new());
        let p =
            Priority::with_board(PriorityConfig::default(), clock.clone(), board.clone()).unwrap();
        let a = p.admit(&ctx(1, false, 1)).unwrap();
        assert_eq!((a.note, board.tokens()), (0, 0));
        p.complete(&ctx(1, false, 1), a.note, 1);
        let config = PriorityConfig {
            busy_depth: 4,
            shared_busy_depth: Some(1),
            ..PriorityConfig::default()
        };
        let local = Priority::new(config, clock).unwrap();
        let a = local.admit(&ctx(1, false, 1)).unwrap();
        assert_eq!(a.note, NOTE_TOKEN_LOCAL);
        // Its own window after a critical request makes the bound apply.
        let c = local.admit(&ctx(2, true, 1)).unwrap();
        assert!(
            local.try_admit(&ctx(1, false, 1)).is_err(),
            "one token, taken"
        );
        local.complete(&ctx(2, true, 1), c.note, 1);
        local.complete(&ctx(1, false, 1), a.note, 1);
        let again = local.try_admit(&ctx(1, false, 1)).unwrap();
        assert_eq!(again.note, NOTE_TOKEN_LOCAL, "the token came back");
        local.complete(&ctx(1, false, 1), again.note, 1);
    }

    #[test]
    fn other_processes_critical_io_holds_background_to_busy_depth() {
        let board = Arc::new(FakeBoard::default());
        let clock = FakeClock::new();
        let config = PriorityConfig {
            depth: 4,
            busy_depth: 1,
            ..PriorityConfig::default()
        };
        let p = Arc::new(Priority::with_board(config, Arc::new(clock), board.clone()).unwrap());
        board.others.store(true, Ordering::Relaxed);
        let a = p.admit(&ctx(1, false, 1)).unwrap();
        let (tx, rx) = mpsc::channel();
        let h = spawn_admit(&p, ctx(2, false, 1), 2, &tx);
        no_more(&rx);
        // Critical requests of this process are not held by others' I/O.
        let c = p.admit(&ctx(3, true, 1)).unwrap();
        assert_eq!(c.note, NOTE_CRITICAL);
        p.complete(&ctx(3, true, 1), c.note, 1);
        board.others.store(false, Ordering::Relaxed);
        // Still inside this process's own window after its critical request.
        p.wake_waiters();
        no_more(&rx);
        p.complete(&ctx(1, false, 1), a.note, 1);
        assert_eq!(rx.recv().unwrap().0, 2, "a busy-depth slot freed");
        h.join().unwrap();
    }

    #[test]
    fn window_holds_background_to_busy_depth() {
        let (p, clock) = object(PriorityConfig {
            depth: 4,
            busy_depth: 1,
            ..PriorityConfig::default()
        });
        let c = p.admit(&ctx(1, true, 1)).unwrap();
        p.complete(&ctx(1, true, 1), c.note, 1);
        let a = p.admit(&ctx(2, false, 1)).unwrap();
        let (tx, rx) = mpsc::channel();
        let h = spawn_admit(&p, ctx(3, false, 1), 3, &tx);
        no_more(&rx);
        clock.advance(Duration::from_millis(2)); // the 2 ms window closes
        p.wake_waiters();
        assert_eq!(rx.recv().unwrap().0, 3);
        assert_eq!(p.status().normal_outstanding, 2);
        p.complete(&ctx(2, false, 1), a.note, 1);
        h.join().unwrap();
    }

    #[test]
    fn starvation_guard_admits_one_per_interval() {
        let (p, clock) = object(PriorityConfig {
            depth: 4,
            busy_depth: 0,
            ..PriorityConfig::default()
        });
        // Critical I/O stays outstanding throughout.
        let _c = p.admit(&ctx(1, true, 1)).unwrap();
        let (tx, rx) = mpsc::channel();
        let h1 = spawn_admit(&p, ctx(2, false, 1), 2, &tx);
        let h2 = spawn_admit(&p, ctx(3, false, 1), 3, &tx);
        clock.advance(Duration::from_millis(9));
        p.wake_waiters();
        no_more(&rx);
        clock.advance(Duration::from_millis(1)); // 10 ms: the guard fires
        p.wake_waiters();
        assert_eq!(rx.recv().unwrap().0, 2);
        assert_eq!(p.status().starvation_admissions, 1);
        // The next one waits for the guard slot and a new interval.
        p.complete(&ctx(2, false, 1), 0, 1);
        p.wake_waiters();
        no_more(&rx);
        clock.advance(Duration::from_millis(10));
        p.wake_waiters();
        assert_eq!(rx.recv().unwrap().0, 3);
        assert_eq!(p.status().starvation_admissions, 2);
        h1.join().unwrap();
        h2.join().unwrap();
    }

    #[test]
    fn promoted_waiter_is_admitted_as_critical() {
        let (p, _) = object(PriorityConfig {
            depth: 1,
            ..PriorityConfig::default()
        });
        let held = p.admit(&ctx(1, false, 1)).unwrap();
        let (tx, rx) = mpsc::channel();
        let h = spawn_admit(&p, ctx(7, false, 1), 7, &tx);
        no_more(&rx);
        assert_eq!(p.promote(8), 0, "another workflow: nothing to promote");
        assert_eq!(p.promote(7), 1);
        assert_eq!(rx.recv().unwrap(), (7, NOTE_CRITICAL));
        let s = p.status();
        assert_eq!((s.normal_outstanding, s.critical_outstanding), (1, 1));
        assert_eq!(s.promotions, 1);
        p.complete(&ctx(7, false, 1), NOTE_CRITICAL, 1);
        p.complete(&ctx(1, false, 1), held.note, 1);
        h.join().unwrap();
    }

    #[test]
    fn promote_thread_promotes_only_that_threads_waiters() {
        let (p, _) = object(PriorityConfig {
            depth: 1,
            ..PriorityConfig::default()
        });
        let held = p.admit(&ctx(1, false, 1)).unwrap();
        let (tx, rx) = mpsc::channel();
        // Two waiters of one workflow (a process-wide workflow), on two
        // threads: only the thread a critical thread waits for is promoted.
        let mut threads = Vec::new();
        let mut handles = Vec::new();
        for tag in [10, 11] {
            let (id_tx, id_rx) = mpsc::channel();
            let (p2, tx2) = (p.clone(), tx.clone());
            let before = p.status().normal_waiting;
            handles.push(std::thread::spawn(move || {
                id_tx.send(crate::context::current_workflow()).unwrap();
                let a = p2.admit(&ctx(7, false, 1)).unwrap();
                tx2.send((tag, a.note)).unwrap();
            }));
            threads.push(id_rx.recv().unwrap());
            while p.status().normal_waiting == before {
                std::thread::yield_now();
            }
        }
        assert_eq!(p.promote_thread(crate::context::current_workflow()), 0);
        assert_eq!(p.promote_thread(threads[1]), 1);
        assert_eq!(rx.recv().unwrap(), (11, NOTE_CRITICAL));
        no_more(&rx);
        p.complete(&ctx(7, false, 1), NOTE_CRITICAL, 1);
        p.complete(&ctx(1, false, 1), held.note, 1);
        assert_eq!(rx.recv().unwrap(), (10, 0), "the other stays normal");
        p.complete(&ctx(7, false, 1), 0, 1);
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn rate_applies_to_background_only_and_refunds() {
        let (p, _) = object(PriorityConfig {
            rate: Some(Rate::bytes_per_sec(1000)),
            burst: Some(Size(1000)),
            ..PriorityConfig::default()
        });
        let a = p.admit(&ctx(1, false, 1000)).unwrap();
        assert_eq!(a.note, NOTE_RATED);
        // A short call refunds 600 bytes: the next 600 go at once.
        p.complete(&ctx(1, false, 1000), a.note, 400);
        let b = p.admit(&ctx(1, false, 600)).unwrap();
        assert_eq!(b.waited_ns, 0);
        p.complete(&ctx(1, false, 600), b.note, 600);
        // Critical requests never touch the bucket.
        let c = p.admit(&ctx(2, true, 1 << 30)).unwrap();
        assert_eq!((c.waited_ns, c.note), (0, NOTE_CRITICAL));
        p.complete(&ctx(2, true, 1 << 30), c.note, 0);
    }

    #[test]
    fn rate_critical_makes_the_rate_a_budget_for_critical_requests_too() {
        let config = PriorityConfig {
            rate: Some(Rate::bytes_per_sec(1000)),
            burst: Some(Size(1000)),
            rate_critical: true,
            ..PriorityConfig::default()
        };
        let (p, clock) = object(config.clone());
        let k = ctx(2, true, 1000);
        // Charged, and still admitted as critical.
        let a = p.admit(&k).unwrap();
        assert_eq!(a.note, NOTE_RATED | NOTE_CRITICAL);
        // The bucket is empty: a critical request waits for tokens too.
        assert!(p.try_admit(&ctx(2, true, 1)).is_err());
        // A short call refunds what it did not move.
        p.complete(&k, a.note, 400);
        let b = p.try_admit(&ctx(2, true, 600)).unwrap();
        assert_eq!(b.note, NOTE_RATED | NOTE_CRITICAL);
        p.complete(&ctx(2, true, 600), b.note, 600);
        assert!(p.try_admit(&ctx(2, true, 1)).is_err());
        clock.advance(Duration::from_secs(1));
        let c = p.try_admit(&ctx(2, true, 1000)).unwrap();
        p.complete(&ctx(2, true, 1000), c.note, 1000);
        // Switched off at run time: critical requests pass the empty bucket.
        p.configure(&ObjectConfig::Priority(PriorityConfig {
            rate_critical: false,
            ..config
        }))
        .unwrap();
        let d = p.try_admit(&ctx(2, true, 1000)).unwrap();
        assert_eq!(d.note, NOTE_CRITICAL);
        p.complete(&ctx(2, true, 1000), d.note, 1000);
    }

    #[test]
    fn rate_critical_needs_a_rate() {
        let e = PriorityConfig {
            rate_critical: true,
            ..PriorityConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e,
            ConfigError::Invalid {
                field: "rate_critical",
                reason: "needs a rate".into()
            }
        );
    }

    #[test]
    fn try_admit_takes_free_slots_and_never_waits() {
        let (p, _) = object(PriorityConfig {
            depth: 2,
            ..PriorityConfig::default()
        });
        let c = ctx(1, false, 10);
        let a = p.try_admit(&c).unwrap();
        let b = p.try_admit(&c).unwrap();
        // Both slots are the caller's own: a third would wait for them.
        assert_eq!(p.try_admit(&c), Err(TryEnforceError::Wait(Duration::MAX)));
        let s = p.status();
        assert_eq!((s.normal_outstanding, s.normal_waiting), (2, 0));
        // Critical slots are separate.
        let k = p.try_admit(&ctx(2, true, 10)).unwrap();
        assert_eq!(k.note, NOTE_CRITICAL);
        p.complete(&ctx(2, true, 10), k.note, 10);
        p.complete(&c, a.note, 10);
        // Critical I/O is active (its window): busy_depth 1 is the bound, and
        // one non-critical request is still outstanding.
        assert!(p.try_admit(&c).is_err());
        p.complete(&c, b.note, 10);
        let d = p.try_admit(&c).unwrap();
        p.complete(&c, d.note, 10);
    }

    #[test]
    fn try_admit_does_not_pass_waiters() {
        let (p, _) = object(PriorityConfig {
            depth: 1,
            ..PriorityConfig::default()
        });
        let c = ctx(1, false, 1);
        let held = p.admit(&c).unwrap();
        let (tx, rx) = mpsc::channel();
        let h = spawn_admit(&p, ctx(2, false, 1), 2, &tx);
        // A slot frees, but a waiter was first: it goes, not the try.
        p.complete(&c, held.note, 1);
        assert_eq!(rx.recv().unwrap().0, 2);
        assert!(p.try_admit(&c).is_err());
        h.join().unwrap();
    }

    #[test]
    fn failed_try_admit_gives_the_rate_back() {
        let (p, _) = object(PriorityConfig {
            depth: 1,
            rate: Some(Rate::ops_per_sec(1)),
            burst: Some(Size(1)),
            ..PriorityConfig::default()
        });
        let c = ctx(1, false, 4096);
        let a = p.try_admit(&c).unwrap();
        assert_eq!(a.note, NOTE_RATED);
        // No token left (an operation costs one whatever it moved).
        p.complete(&c, a.note, 4096);
        assert!(p.try_admit(&c).is_err());
        // A token, but no slot: the token is given back, not lost.
        let (p, clock) = object(PriorityConfig {
            depth: 1,
            rate: Some(Rate::ops_per_sec(1)),
            burst: Some(Size(2)),
            ..PriorityConfig::default()
        });
        let held = p.admit(&c).unwrap();
        assert!(p.try_admit(&c).is_err());
        p.complete(&c, held.note, 4096);
        let b = p.try_admit(&c).unwrap();
        p.complete(&c, b.note, 4096);
        assert!(
            p.try_admit(&c).is_err(),
            "two tokens in the burst, two used"
        );
        clock.advance(Duration::from_secs(1));
        assert!(p.try_admit(&c).is_ok());
    }

    #[test]
    fn configure_validates_and_changes_limits() {
        let (p, clock) = object(PriorityConfig::default());
        let bad = PriorityConfig {
            busy_depth: 9,
            ..PriorityConfig::default()
        };
        assert!(matches!(
            p.configure(&ObjectConfig::Priority(bad)),
            Err(ConfigError::Invalid {
                field: "busy_depth",
                ..
            })
        ));
        assert!(matches!(
            p.configure(&ObjectConfig::Noop),
            Err(ConfigError::WrongKind { .. })
        ));
        let new = PriorityConfig {
            depth: 1,
            split: Size(0),
            rate: Some(Rate::ops_per_sec(5)),
            ..PriorityConfig::default()
        };
        p.configure(&ObjectConfig::Priority(new.clone())).unwrap();
        assert_eq!(p.config(), ObjectConfig::Priority(new));
        assert_eq!(p.split_size(&ctx(1, false, 1 << 20)), None);
        p.configure(&ObjectConfig::Priority(PriorityConfig::default()))
            .unwrap();
        // Split only while critical I/O is active, and only what is larger
        // than a piece; never a critical request.
        assert_eq!(
            p.split_size(&ctx(1, false, 1 << 20)),
            None,
            "nothing critical"
        );
        let c = p.admit(&ctx(2, true, 1)).unwrap();
        assert_eq!(p.split_size(&ctx(1, false, 1 << 20)), Some(32 << 10));
        assert_eq!(p.split_size(&ctx(1, false, 32 << 10)), None, "one piece");
        assert_eq!(p.split_size(&ctx(1, true, 1 << 20)), None);
        p.complete(&ctx(2, true, 1), c.note, 1);
        assert_eq!(
            p.split_size(&ctx(1, false, 1 << 20)),
            Some(32 << 10),
            "window"
        );
        clock.advance(Duration::from_millis(2));
        assert_eq!(p.split_size(&ctx(1, false, 1 << 20)), None, "window over");
        p.configure(&ObjectConfig::Priority(PriorityConfig {
            split_when: SplitWhen::Always,
            ..PriorityConfig::default()
        }))
        .unwrap();
        assert_eq!(
            p.split_size(&ctx(1, false, 1 << 20)),
            Some(32 << 10),
            "always"
        );
    }

    /// A single-threaded model of waiting threads: requests arrive, queue,
    /// and every queued request whose verdict is "admit" is admitted (as its
    /// woken thread would be) until none is.
    struct Sim {
        st: State,
        load: Load,
        now: u64,
        queued: Vec<(u64, bool, u64)>, // (seq, critical at arrival, arrival)
        outstanding: Vec<bool>,        // class of each outstanding request
        admitted: Vec<(u64, bool)>,    // (seq, admitted as critical), in order
    }

    impl Sim {
        fn new(config: PriorityConfig) -> Self {
            Sim {
                st: State {
                    config,
                    waiting: VecDeque::new(),
                    next_seq: 0,
                    last_normal_ns: 0,
                    starvation_admissions: 0,
                    promotions: 0,
                },
                load: Load::default(),
                now: 0,
                queued: Vec::new(),
                outstanding: Vec::new(),
                admitted: Vec::new(),
            }
        }

        fn arrive(&mut self, critical: bool) {
            let seq = self.st.next_seq;
            self.st.next_seq += 1;
            self.st.waiting.push_back(Waiter {
                seq,
                workflow: seq,
                thread: seq,
                critical,
            });
            self.queued.push((seq, critical, self.now));
            self.settle();
        }

        fn complete(&mut self, i: usize) {
            let critical = self.outstanding.remove(i);
            self.load.outstanding[usize::from(critical)] -= 1;
            if critical {
                self.load.last_critical_ns = Some(self.now);
            }
            self.settle();
        }

        fn advance(&mut self, ns: u64) {
            self.now += ns;
            self.settle();
        }

        /// Invariants at the moment a request is admitted.
        fn check_admission(&self, critical: bool, starved: bool) {
            let c = &self.st.config;
            if critical {
                assert!(self.load.outstanding[1] < c.critical_depth.unwrap_or(u32::MAX));
            } else {
                assert!(self.load.outstanding[0] < c.depth, "depth exceeded");
                if !starved {
                    assert!(
                        !self.st.waiting.iter().any(|w| w.critical),
                        "background admitted while a critical request waits"
                    );
                }
            }
        }

        fn settle(&mut self) {
            loop {
                let mut any = false;
                let seqs: Vec<(u64, bool)> = self
                    .st
                    .waiting
                    .iter()
                    .map(|w| (w.seq, w.critical))
                    .collect();
                for (seq, class) in seqs {
                    let since = self.queued.iter().find(|q| q.0 == seq).unwrap().2;
                    if let Verdict::Admit { critical, starved } = self
                        .st
                        .verdict(seq, class, since, self.now, self.load, false)
                    {
                        self.check_admission(critical, starved);
                        let pos = self.st.waiting.iter().position(|w| w.seq == seq).unwrap();
                        self.st.waiting.remove(pos);
                        self.st.take(critical, starved, self.now);
                        self.load.outstanding[usize::from(critical)] += 1;
                        self.outstanding.push(critical);
                        self.admitted.push((seq, critical));
                        any = true;
                    }
                }
                if !any {
                    return;
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Arrive(bool),
        Complete(usize),
        Advance(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => any::<bool>().prop_map(Step::Arrive),
            3 => (0usize..16).prop_map(Step::Complete),
            1 => (0u64..15_000_000).prop_map(Step::Advance),
        ]
    }

    #[derive(Debug, Clone)]
    enum PoolStep {
        /// Object 0 or 1 tries to admit a request (critical or not).
        Admit(usize, bool),
        Complete(usize),
        /// Other processes' critical I/O starts or stops.
        Others(bool),
        Advance(u64),
    }

    fn pool_step() -> impl Strategy<Value = PoolStep> {
        prop_oneof![
            4 => (0usize..2, any::<bool>()).prop_map(|(o, c)| PoolStep::Admit(o, c)),
            3 => (0usize..16).prop_map(PoolStep::Complete),
            1 => any::<bool>().prop_map(PoolStep::Others),
            1 => (0u64..5_000_000).prop_map(PoolStep::Advance),
        ]
    }

    proptest! {
        /// Two objects on one board (two background processes), driven by
        /// `try_admit` over any sequence: the board's tokens always equal
        /// the non-critical requests outstanding, a non-critical request is
        /// admitted while critical I/O is active only with fewer than
        /// `shared_busy_depth` tokens taken, and every token comes back.
        #[test]
        fn shared_tokens_follow_the_outstanding_background(
            shared in 1u32..4,
            steps in proptest::collection::vec(pool_step(), 1..80),
        ) {
            let board = Arc::new(FakeBoard::default());
            let clock = FakeClock::new();
            let config = PriorityConfig {
                depth: 4,
                busy_depth: 4,
                shared_busy_depth: Some(shared),
                ..PriorityConfig::default()
            };
            let objects: Vec<Priority> = (0..2)
                .map(|_| {
                    Priority::with_board(config.clone(), Arc::new(clock.clone()), board.clone())
                        .unwrap()
                })
                .collect();
            let mut outstanding: Vec<(usize, bool, u32)> = Vec::new();
            for s in steps {
                match s {
                    PoolStep::Admit(o, critical) => {
                        let before = board.tokens();
                        let active = board.others.load(Ordering::Relaxed)
                            || objects[o].status().critical_active;
                        if let Ok(a) = objects[o].try_admit(&ctx(1, critical, 1)) {
                            prop_assert_eq!(a.note & NOTE_TOKEN != 0, !critical);
                            if !critical && active {
                                prop_assert!(before < u64::from(shared), "pool bound broken");
                            }
                            outstanding.push((o, critical, a.note));
                        }
                    }
                    PoolStep::Complete(i) if !outstanding.is_empty() => {
                        let (o, critical, note) = outstanding.remove(i % outstanding.len());
                        objects[o].complete(&ctx(1, critical, 1), note, 1);
                    }
                    PoolStep::Complete(_) => {}
                    PoolStep::Others(on) => board.others.store(on, Ordering::Relaxed),
                    PoolStep::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
                }
                let normal = outstanding.iter().filter(|r| !r.1).count() as u64;
                prop_assert_eq!(board.tokens(), normal);
            }
            for (o, critical, note) in outstanding {
                objects[o].complete(&ctx(1, critical, 1), note, 1);
            }
            prop_assert_eq!(board.tokens(), 0);
        }

        /// Over any sequence of arrivals, completions and clock steps: the
        /// depth is never exceeded, background is never admitted past a
        /// waiting critical request except by the starvation guard, each
        /// class is admitted in arrival order, and nothing waits forever
        /// once the device drains.
        #[test]
        fn admission_order_and_limits(
            depth in 1u32..4,
            busy in 0u32..4,
            critical_depth in proptest::option::of(1u32..3),
            steps in proptest::collection::vec(step(), 1..80),
        ) {
            let mut sim = Sim::new(PriorityConfig {
                depth,
                busy_depth: busy.min(depth),
                critical_depth,
                ..PriorityConfig::default()
            });
            for s in steps {
                match s {
                    Step::Arrive(c) => sim.arrive(c),
                    Step::Complete(i) if !sim.outstanding.is_empty() => {
                        let i = i % sim.outstanding.len();
                        sim.complete(i);
                    }
                    Step::Complete(_) => {}
                    Step::Advance(ns) => sim.advance(ns),
                }
                prop_assert!(sim.load.outstanding[0] <= depth);
            }
            // FIFO within each class (no promotion here).
            for class in [false, true] {
                let order: Vec<u64> = sim
                    .admitted
                    .iter()
                    .filter(|a| a.1 == class)
                    .map(|a| a.0)
                    .collect();
                let mut sorted = order.clone();
                sorted.sort_unstable();
                prop_assert_eq!(order, sorted);
            }
            // Drain: complete everything, let every window and guard pass.
            while !sim.outstanding.is_empty() || !sim.st.waiting.is_empty() {
                if sim.outstanding.is_empty() {
                    sim.advance(20_000_000);
                    prop_assert!(sim.st.waiting.is_empty() || !sim.outstanding.is_empty(),
                        "a request waits with nothing outstanding");
                } else {
                    sim.complete(0);
                }
            }
        }
    }
}
