//! The locks the DRL's ticket queue uses: std's, or loom's when the crate
//! is built with `--cfg loom`, so that `make test-loom`
//! (`tests/loom_drl.rs`) model-checks every interleaving of its waiters,
//! refunds, rate changes and wake-ups.

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
