//! The locks and atomics the DRL's ticket queue, the priority object's
//! slots and the stage's routing-table swap use: std's (and arc-swap's), or
//! loom's when the crate is built with `--cfg loom`, so that `make
//! test-loom` (`tests/loom_drl.rs`, `tests/loom_priority.rs`,
//! `tests/loom_routing.rs`) model-checks every interleaving of their
//! waiters, completions, refunds, rate changes, wake-ups and table swaps.

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

/// The stage's swappable routing table: arc-swap's `ArcSwap`, or under loom
/// a lock-based stand-in with the same methods, whose `store` and loads
/// order like arc-swap's (a load that sees a stored table happens after
/// the store) and which loom can schedule.
pub(crate) mod swap {
    #[cfg(not(loom))]
    pub(crate) use arc_swap::ArcSwap;

    #[cfg(loom)]
    pub(crate) use self::model::ArcSwap;

    #[cfg(loom)]
    mod model {
        use std::sync::Arc;

        /// `arc_swap::ArcSwap` as loom sees it.
        #[derive(Debug)]
        pub(crate) struct ArcSwap<T>(loom::sync::Mutex<Arc<T>>);

        impl<T> ArcSwap<T> {
            pub(crate) fn from_pointee(value: T) -> Self {
                ArcSwap(loom::sync::Mutex::new(Arc::new(value)))
            }
            pub(crate) fn load_full(&self) -> Arc<T> {
                self.0.lock().unwrap().clone()
            }
            pub(crate) fn load(&self) -> Arc<T> {
                self.load_full()
            }
            pub(crate) fn store(&self, value: Arc<T>) {
                *self.0.lock().unwrap() = value;
            }
        }
    }
}
