//! The locks and atomics the DRL's ticket queue and the priority object's
//! slots use: std's, or loom's when the crate is built with `--cfg loom`,
//! so that `make test-loom` (`tests/loom_drl.rs`, `tests/loom_priority.rs`)
//! model-checks every interleaving of their waiters, completions, refunds,
//! rate changes and wake-ups.

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Atomics shared with the lock-free admission path.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::AtomicU64;
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::AtomicU64;
}
