//! Model checking of the priority object's slots with loom: a request
//! admitted without the lock (one compare-and-swap on the counts word) and
//! completed without it, racing a request that queues. Built only with
//! `--cfg loom` (`make test-loom`); the object's atomics and locks are then
//! loom's (`src/sync.rs`), so a lost wake-up shows up as a deadlock in some
//! interleaving and fails the test.

#![cfg(loom)]

use std::sync::Arc;

use loom::thread;
use paio::object::{Priority, PriorityConfig};
use paio::{Context, Criticality, EnforcementObject, FakeClock, RequestType};

fn read(critical: bool) -> Context {
    let c = if critical {
        Criticality::Critical
    } else {
        Criticality::Normal
    };
    Context::new(RequestType::READ, 4096).with_criticality(c)
}

fn object(config: PriorityConfig) -> Arc<Priority> {
    Arc::new(Priority::new(config, Arc::new(FakeClock::new())).unwrap())
}

/// One slot: a second request waits for it, and the completion of the
/// first (which reads "someone waits" from the same word the waiter
/// counts itself in) always wakes it, whichever runs first.
#[test]
fn a_completion_always_releases_the_request_waiting_for_its_slot() {
    loom::model(|| {
        let p = object(PriorityConfig {
            depth: 1,
            busy_depth: 1,
            ..PriorityConfig::default()
        });
        let first = p.admit(&read(false)).unwrap();
        let waiter = {
            let p = p.clone();
            thread::spawn(move || {
                let a = p.admit(&read(false)).unwrap();
                p.complete(&read(false), a.note, 4096);
            })
        };
        p.complete(&read(false), first.note, 4096);
        waiter.join().unwrap();
        let s = p.status();
        assert_eq!((s.normal_outstanding, s.normal_waiting), (0, 0));
    });
}

/// A critical request waits for its class's only slot while a
/// non-critical one holds its own: the critical completion releases it,
/// and the classes never take each other's slots.
#[test]
fn critical_slots_are_released_and_kept_apart() {
    loom::model(|| {
        let p = object(PriorityConfig {
            depth: 1,
            busy_depth: 1,
            critical_depth: Some(1),
            ..PriorityConfig::default()
        });
        let background = p.admit(&read(false)).unwrap();
        let first = p.admit(&read(true)).unwrap();
        let waiter = {
            let p = p.clone();
            thread::spawn(move || {
                let a = p.admit(&read(true)).unwrap();
                let s = p.status();
                assert_eq!(s.critical_outstanding, 1, "one critical slot");
                p.complete(&read(true), a.note, 4096);
            })
        };
        p.complete(&read(true), first.note, 4096);
        waiter.join().unwrap();
        p.complete(&read(false), background.note, 4096);
        let s = p.status();
        assert_eq!((s.normal_outstanding, s.critical_outstanding), (0, 0));
        assert_eq!((s.normal_waiting, s.critical_waiting), (0, 0));
    });
}
