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
use std::sync::atomic::{AtomicBool, Ordering};

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

static PROCESS_CRITICAL: AtomicBool = AtomicBool::new(false);

/// Marks every request of the process critical (`true`) or not (`false`).
/// Threads marked critical themselves stay critical either way.
pub fn set_process_critical(critical: bool) {
    PROCESS_CRITICAL.store(critical, Ordering::Relaxed);
}

/// Whether the whole process is marked critical.
pub fn process_critical() -> bool {
    PROCESS_CRITICAL.load(Ordering::Relaxed)
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
/// thread or the process is marked.
pub fn current_criticality() -> Criticality {
    with_thread(|t| of_cell(t.critical.get()))
}

/// The criticality of a thread whose criticality cell holds `cell`.
#[inline]
pub(crate) fn of_cell(cell: u32) -> Criticality {
    if cell != 0 || PROCESS_CRITICAL.load(Ordering::Relaxed) {
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
}
