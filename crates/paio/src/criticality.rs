//! Criticality: which requests a latency-critical activity waits for (RCP
//! §4.1, FastResponse §3).
//!
//! A request is [`Criticality::Critical`] when the thread that issues it is
//! marked critical, or the whole process is. Marking is the *enlightenment
//! API* of RCP: the layer that knows which work serves a user (a database's
//! query threads, RocksDB's user threads, a program run with
//! `paio run --critical`) says so, and every request that work issues carries
//! the mark in its [`Context`](crate::Context), where differentiation rules can
//! match it (`match = { criticality = "critical" }`) and a
//! [`Priority`](crate::object::Priority) object orders by it.
//!
//! Three scopes, combined with "or":
//! - a scope guard, [`CriticalScope::enter`], for a stretch of one thread's
//!   work (scopes nest);
//! - a per-thread switch, [`set_thread_critical`], for code that cannot hold a
//!   guard (C callers, thread pools);
//! - a per-process switch, [`set_process_critical`], for a whole program.
//!
//! Reading the mark costs one thread-local cell and one relaxed atomic load,
//! taken when [`Context::new`](crate::Context::new) builds a request's context.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::clock::Clock;
use serde::{Deserialize, Serialize};

use crate::context::with_thread;

/// How much a request matters to latency. One byte.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Criticality {
    /// Background work: may be held back, split and rate limited.
    #[default]
    Normal = 0,
    /// A latency-critical activity waits for this request: admitted first.
    Critical = 1,
}

impl Criticality {
    /// The value as a small integer (0 normal, 1 critical), as the C ABI and
    /// the matcher's keys carry it.
    pub const fn raw(self) -> u8 {
        self as u8
    }

    /// The criticality of a small integer: 0 normal, 1 critical.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Criticality::Normal),
            1 => Some(Criticality::Critical),
            _ => None,
        }
    }

    /// Whether this is [`Criticality::Critical`].
    pub const fn is_critical(self) -> bool {
        matches!(self, Criticality::Critical)
    }

    /// The name used in policies and on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            Criticality::Normal => "normal",
            Criticality::Critical => "critical",
        }
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The per-thread switch's bit in the thread's criticality cell; the bits
/// below it count the thread's open [`CriticalScope`]s.
const THREAD_SWITCH: u32 = 1 << 31;

/// The process-wide word a context reads: bit 0 is the process mark, the
/// bits above it count the loans outstanding in the process
/// ([`crate::inheritance`]). One load tells a thread whether it can be
/// critical by anything but its own marks.
static PROCESS: AtomicU64 = AtomicU64::new(0);

/// The process mark's bit in [`PROCESS`]; one loan counts 2.
const PROCESS_MARK: u64 = 1;

/// Marks every request of the process critical (`true`) or not (`false`).
/// Threads marked critical themselves stay critical either way.
pub fn set_process_critical(critical: bool) {
    if critical {
        PROCESS.fetch_or(PROCESS_MARK, Ordering::Relaxed);
    } else {
        PROCESS.fetch_and(!PROCESS_MARK, Ordering::Relaxed);
    }
}

/// Whether the whole process is marked critical.
pub fn process_critical() -> bool {
    PROCESS.load(Ordering::Relaxed) & PROCESS_MARK != 0
}

/// One loan more (`1`) or fewer (`-1`) in the process.
pub(crate) fn loans_changed(delta: i64) {
    if delta > 0 {
        PROCESS.fetch_add(2, Ordering::AcqRel);
    } else {
        PROCESS.fetch_sub(2, Ordering::AcqRel);
    }
}

/// No loans outstanding any more (a forked child's tables were cleared).
pub(crate) fn forget_loans() {
    PROCESS.fetch_and(PROCESS_MARK, Ordering::AcqRel);
}

/// Loans outstanding in the process ([`crate::inheritance`]).
pub fn loans_outstanding() -> u64 {
    PROCESS.load(Ordering::Relaxed) >> 1
}

/// Turns the calling thread's switch on or off. Open [`CriticalScope`]s are
/// not affected: a thread is critical while its switch is on or any of its
/// scopes is open.
pub fn set_thread_critical(critical: bool) {
    with_thread(|t| {
        let v = t.critical.get();
        t.critical.set(if critical {
            v | THREAD_SWITCH
        } else {
            v & !THREAD_SWITCH
        });
    });
}

/// Whether the calling thread is marked critical (switch or scope), not
/// counting the process-wide mark.
pub fn thread_critical() -> bool {
    with_thread(|t| t.critical.get() != 0)
}

/// The criticality the calling thread's next request gets: critical when the
/// thread or the process is marked, or the thread holds a loan
/// ([`crate::inheritance`]).
pub fn current_criticality() -> Criticality {
    with_thread(|t| of_thread(t.critical.get(), || t.id()))
}

/// The criticality of a thread whose criticality cell holds `cell` and whose
/// kernel thread id is `id()` (read only while a loan exists in the
/// process).
#[inline]
pub(crate) fn of_thread(cell: u32, id: impl FnOnce() -> u64) -> Criticality {
    if cell != 0 {
        return Criticality::Critical;
    }
    match PROCESS.load(Ordering::Relaxed) {
        0 => Criticality::Normal,
        p if p & PROCESS_MARK != 0 => Criticality::Critical,
        _ => loaned(id()),
    }
}

#[cold]
fn loaned(id: u64) -> Criticality {
    if crate::inheritance::holds_loan(id as u32) {
        Criticality::Critical
    } else {
        Criticality::Normal
    }
}

/// Marks the calling thread critical until dropped. Scopes nest; the thread
/// stays critical until the last one closes (or longer, while its switch or
/// the process mark is on). Not `Send`: it belongs to its thread.
#[must_use = "the thread is critical only while the scope lives"]
pub struct CriticalScope {
    _thread_bound: PhantomData<*const ()>,
}

impl CriticalScope {
    /// Opens a critical scope on the calling thread.
    pub fn enter() -> Self {
        with_thread(|t| t.critical.set(t.critical.get().saturating_add(1)));
        Self {
            _thread_bound: PhantomData,
        }
    }
}

impl Drop for CriticalScope {
    fn drop(&mut self) {
        with_thread(|t| {
            let v = t.critical.get();
            // The scope count is never 0 while a scope lives.
            let scopes = (v & !THREAD_SWITCH).saturating_sub(1);
            t.critical.set(v & THREAD_SWITCH | scopes);
        });
    }
}

/// The longest name pattern [`CriticalNames`] accepts, in bytes. Linux
/// truncates a thread's or process's name (its `comm`) to 15 bytes; a pattern
/// may add a trailing `*`.
pub const MAX_NAME_PATTERN: usize = 16;

/// The most patterns of each kind [`CriticalNames`] accepts.
pub const MAX_NAME_PATTERNS: usize = 64;

/// Why a name pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamePatternError {
    /// Empty, or only `*`: it would mark everything critical.
    #[error("a name pattern must not be empty or only \"*\" (use `paio run --critical` to mark a whole program)")]
    Empty,
    /// Longer than [`MAX_NAME_PATTERN`] bytes.
    #[error("name pattern {0:?} is longer than {MAX_NAME_PATTERN} bytes; Linux keeps only the first 15 bytes of a thread's or process's name")]
    TooLong(String),
    /// A `*` anywhere but at the end.
    #[error("name pattern {0:?} may hold `*` only as its last character (a prefix match)")]
    Wildcard(String),
    /// More than [`MAX_NAME_PATTERNS`] patterns.
    #[error("more than {MAX_NAME_PATTERNS} name patterns")]
    TooMany,
}

/// Which threads and processes are critical by name: a policy's
/// `[criticality]` table (`processes = [...]`, `threads = [...]`).
///
/// A pattern is a name as Linux keeps it (`comm`, at most 15 bytes), matched
/// exactly, or a prefix followed by `*`. The interposer checks the process's
/// name when it starts and a thread's name when the thread names itself
/// (`pthread_setname_np`, `prctl(PR_SET_NAME)`); a match marks the process
/// ([`set_process_critical`]) or the thread ([`set_thread_critical`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CriticalNames {
    processes: Vec<String>,
    threads: Vec<String>,
}

impl CriticalNames {
    /// Name rules from process and thread patterns, each checked.
    pub fn new(processes: Vec<String>, threads: Vec<String>) -> Result<Self, NamePatternError> {
        for list in [&processes, &threads] {
            if list.len() > MAX_NAME_PATTERNS {
                return Err(NamePatternError::TooMany);
            }
            for p in list {
                check_pattern(p)?;
            }
        }
        Ok(Self { processes, threads })
    }

    /// Whether no names are given.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.threads.is_empty()
    }

    /// The process patterns, as given.
    pub fn processes(&self) -> &[String] {
        &self.processes
    }

    /// The thread patterns, as given.
    pub fn threads(&self) -> &[String] {
        &self.threads
    }

    /// Whether a process named `comm` is critical.
    pub fn process_matches(&self, comm: &str) -> bool {
        self.processes.iter().any(|p| name_matches(p, comm))
    }

    /// Whether a thread named `name` is critical.
    pub fn thread_matches(&self, name: &str) -> bool {
        self.threads.iter().any(|p| name_matches(p, name))
    }
}

fn check_pattern(p: &str) -> Result<(), NamePatternError> {
    let stem = p.strip_suffix('*').unwrap_or(p);
    if stem.is_empty() {
        return Err(NamePatternError::Empty);
    }
    if p.len() > MAX_NAME_PATTERN {
        return Err(NamePatternError::TooLong(p.to_string()));
    }
    if stem.contains('*') {
        return Err(NamePatternError::Wildcard(p.to_string()));
    }
    Ok(())
}

/// Whether `name` matches `pattern` (exact, or a prefix ending in `*`).
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// The bound on non-critical writers' dirty page-cache data (RCP §4.3), from
/// a policy's `[criticality] dirty_per_file` and `dirty_per_process`; applied
/// by the layer that sees buffered writes (the interposer).
///
/// A buffered writer's data reaches the device through the kernel's
/// write-back, later and in bulk; a critical `fsync` on the same file system
/// may then wait behind it. With a bound, a non-critical writer's file is
/// written back early (`sync_file_range`) once half of `per_file` is pending
/// in it, or half of `per_process` in the process; the writer then waits
/// for the write-back it started the time before (`overlap`, the default)
/// or for this one: its dirty data, being written or not, stays below the
/// bound and it writes at the device's pace. Smaller bounds keep less in a
/// critical fsync's way and cost more, smaller write-backs. Critical
/// writers are never bounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirtyLimits {
    /// Most dirty bytes a non-critical writer keeps in one file (`None`:
    /// no bound per file).
    pub per_file: Option<u64>,
    /// Most dirty bytes a non-critical process keeps over its files
    /// (`None`: no bound per process).
    pub per_process: Option<u64>,
    /// `[criticality] dirty_overlap` (true unless the policy says false):
    /// at each write-back the writer waits for the one before it, not for
    /// the one it starts, so the device always has the writer's data to
    /// write and the writer keeps its throughput; up to a whole bound (half
    /// dirty, half being written) is in a critical fsync's way. `false`:
    /// the writer waits for each write-back it starts, leaving the device
    /// idle while it fills the next half; up to half the bound is in the
    /// way.
    pub overlap: bool,
}

impl DirtyLimits {
    /// The smallest bound accepted: 64 KiB (smaller would write back every
    /// few pages).
    pub const MIN: u64 = 64 << 10;

    /// Whether any bound is set.
    pub fn is_on(&self) -> bool {
        self.per_file.is_some() || self.per_process.is_some()
    }
}

/// Critical activity shared between the processes of one machine: the
/// cross-process half of a [`Priority`](crate::object::Priority) object's
/// decision.
///
/// Every stage of a process reports its critical requests to the board as they
/// are admitted and completed; a priority object asks it whether critical I/O
/// is active anywhere before admitting a non-critical request beyond its busy
/// depth. The implementation (a shared-memory board that every stage maps) is
/// installed once per process with [`install_board`]; without one, only the
/// process's own critical I/O counts.
///
/// Implementations must be cheap (no system call on [`CriticalBoard::critical_admitted`]
/// and [`CriticalBoard::critical_completed`] beyond a clock read) and must
/// never block.
pub trait CriticalBoard: Send + Sync + fmt::Debug {
    /// A critical request of this process was admitted below a stage.
    fn critical_admitted(&self);
    /// A critical request of this process completed (after
    /// [`CriticalBoard::critical_admitted`]) at `now_ns`, `CLOCK_MONOTONIC`
    /// nanoseconds, if the caller knows them without a clock read
    /// ([`Clock::monotonic_ns_at`]); `None`: the board reads the clock.
    fn critical_completed(&self, now_ns: Option<u64>);
    /// Whether critical I/O of *another* process is in flight, or completed
    /// less than `window_ns` ago.
    fn others_active(&self, window_ns: u64) -> bool;
    /// Takes a token of the machine's pool of non-critical requests in
    /// flight ([`PriorityConfig::shared_busy_depth`](crate::object::PriorityConfig::shared_busy_depth)):
    /// always when `limit` is `None`, else only while fewer than `limit`
    /// are taken. Returns whether it took one. Never blocks.
    fn normal_take(&self, limit: Option<u32>) -> bool;
    /// Returns a token [`CriticalBoard::normal_take`] took.
    fn normal_release(&self);
}

/// The pool of [`CriticalBoard::normal_take`] in a process without a board:
/// the tokens of its own objects.
static LOCAL_TOKENS: AtomicU64 = AtomicU64::new(0);

/// [`CriticalBoard::normal_take`] on the process's own pool.
pub(crate) fn local_normal_take(limit: Option<u32>) -> bool {
    take_below(&LOCAL_TOKENS, limit)
}

/// [`CriticalBoard::normal_release`] on the process's own pool.
pub(crate) fn local_normal_release() {
    let _ = LOCAL_TOKENS.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| v.checked_sub(1));
}

/// Adds one to `count` if `limit` is `None` or `count` is below it; whether
/// it did. The pools' one rule, for boards to share.
pub fn take_below(count: &AtomicU64, limit: Option<u32>) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| match limit {
            Some(l) if v >= u64::from(l) => None,
            _ => Some(v + 1),
        })
        .is_ok()
}

/// The critical requests of one stage, whichever channel and object they
/// went through: a [`Priority`](crate::object::Priority) object holds its
/// non-critical requests back while any critical request of its stage is in
/// flight or completed less than its window ago, also when critical requests
/// are routed to another channel.
#[derive(Debug, Default)]
pub struct CriticalActivity {
    in_flight: AtomicU64,
    /// Stage-clock ticks ([`Clock::ticks`]) of the latest completion, plus
    /// one (0: none).
    last: AtomicU64,
}

impl CriticalActivity {
    /// A critical request was admitted.
    #[inline]
    pub fn admitted(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A critical request admitted before completed at `now_ticks` (the
    /// stage's clock's [`Clock::ticks`], typically the reading that ended
    /// the call's latency, so the window costs no clock read of its own).
    #[inline]
    pub fn completed(&self, now_ticks: u64) {
        self.last
            .fetch_max(now_ticks.saturating_add(1), Ordering::Relaxed);
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }

    /// Whether a critical request is in flight, or one completed less than
    /// `window_ns` ago on `clock` (the stage's).
    #[inline]
    pub fn active(&self, clock: &dyn Clock, window_ns: u64) -> bool {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return true;
        }
        let last = self.last.load(Ordering::Relaxed);
        last != 0 && clock.ns_since_ticks(last - 1) < window_ns
    }
}

static BOARD: OnceLock<Arc<dyn CriticalBoard>> = OnceLock::new();

/// Installs the process's board. Only the first call takes effect; returns
/// whether it was this one.
pub fn install_board(board: Arc<dyn CriticalBoard>) -> bool {
    BOARD.set(board).is_ok()
}

/// The process's board, if one was installed.
#[inline]
pub fn board() -> Option<&'static Arc<dyn CriticalBoard>> {
    BOARD.get()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Context, RequestType};

    #[test]
    fn scopes_nest_and_combine_with_the_switch() {
        assert_eq!(current_criticality(), Criticality::Normal);
        {
            let _a = CriticalScope::enter();
            {
                let _b = CriticalScope::enter();
                assert!(thread_critical());
            }
            assert!(thread_critical(), "the outer scope is still open");
            set_thread_critical(true);
        }
        assert!(thread_critical(), "the switch outlives the scopes");
        assert_eq!(
            Context::new(RequestType::READ, 1).criticality,
            Criticality::Critical
        );
        {
            let _c = CriticalScope::enter();
            set_thread_critical(false);
            assert!(thread_critical(), "a scope is still open");
        }
        assert!(!thread_critical());
        assert_eq!(
            Context::new(RequestType::READ, 1).criticality,
            Criticality::Normal
        );
    }

    #[test]
    fn marks_are_per_thread() {
        let _s = CriticalScope::enter();
        let other = std::thread::spawn(current_criticality).join().unwrap();
        assert_eq!(other, Criticality::Normal);
        assert_eq!(current_criticality(), Criticality::Critical);
    }

    #[test]
    fn names_and_raw_values_round_trip() {
        for c in [Criticality::Normal, Criticality::Critical] {
            assert_eq!(Criticality::from_raw(c.raw()), Some(c));
            let j = serde_json::to_string(&c).unwrap();
            assert_eq!(j, format!("\"{c}\""));
            assert_eq!(serde_json::from_str::<Criticality>(&j).unwrap(), c);
        }
        assert_eq!(Criticality::from_raw(2), None);
        assert!(serde_json::from_str::<Criticality>("\"urgent\"").is_err());
    }

    #[test]
    fn name_patterns_match_exactly_or_by_prefix() {
        let n = CriticalNames::new(vec!["postgres".into()], vec!["rocksdb:low*".into()]).unwrap();
        assert!(n.process_matches("postgres"));
        assert!(!n.process_matches("postgres2"), "exact without *");
        assert!(n.thread_matches("rocksdb:low"));
        assert!(n.thread_matches("rocksdb:low12"));
        assert!(!n.thread_matches("rocksdb:high"));
        assert!(!n.is_empty());
        assert!(CriticalNames::default().is_empty());
    }

    #[test]
    fn bad_name_patterns_are_refused() {
        let one = |p: &str| CriticalNames::new(vec![p.into()], vec![]);
        assert_eq!(one(""), Err(NamePatternError::Empty));
        assert_eq!(one("*"), Err(NamePatternError::Empty));
        assert!(matches!(one("a*b"), Err(NamePatternError::Wildcard(_))));
        assert!(matches!(
            one("abcdefghijklmnopq"),
            Err(NamePatternError::TooLong(_))
        ));
        assert!(one("abcdefghijklmno*").is_ok(), "15 bytes and a star");
        let many = vec!["x".to_string(); MAX_NAME_PATTERNS + 1];
        assert_eq!(
            CriticalNames::new(vec![], many),
            Err(NamePatternError::TooMany)
        );
    }
}
