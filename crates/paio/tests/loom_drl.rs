//! Model checking of the DRL's ticket queue with loom: every interleaving
//! of a waiting request with the refund or the rate change that releases
//! it. Built only with `--cfg loom` (`make test-loom`); the crate's locks
//! are then loom's (`src/sync.rs`), so a lost wake-up shows up as a
//! deadlock in some interleaving and fails the test.

#![cfg(loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use paio::object::{Drl, DrlConfig};
use paio::{Context, EnforcementObject, FakeClock, ObjectConfig, Rate, Request, RequestType};

fn write(size: u64) -> Context {
    Context::new(RequestType::WRITE, size)
}

/// A request waiting for tokens that a concurrent refund provides is
/// always released: the refund's "wake only if someone waits" check never
/// misses the waiter, whichever runs first.
#[test]
fn a_refund_always_releases_the_request_it_pays_for() {
    loom::model(|| {
        let clock = FakeClock::new();
        // 1 B/s: time does not move, so only the refund can pay.
        let cfg = DrlConfig::new(Rate::bytes_per_sec(1)).with_burst(1000);
        let drl = Arc::new(Drl::new(cfg, Arc::new(clock)).unwrap());
        // An earlier request takes the whole burst...
        drl.enforce(&write(1000), &mut Request::new(None)).unwrap();
        // ...a second one waits for tokens...
        let waiter = {
            let d = drl.clone();
            thread::spawn(move || d.enforce(&write(500), &mut Request::new(None)).unwrap())
        };
        // ...and the first call moved nothing: its 1000 bytes come back.
        drl.refund(&write(1000), 0);
        waiter.join().unwrap();
        assert_eq!(drl.status().waiting, 0);
    });
}

/// A paused bucket's waiter is released by a rate change followed by time
/// passing (a fake clock's jump needs `wake_waiters`), in every order of
/// the waiter's checks against the change, the jump and the wake-up.
#[test]
fn a_rate_change_always_releases_a_paused_waiter() {
    loom::model(|| {
        let clock = FakeClock::new();
        let cfg = DrlConfig::new(Rate::bytes_per_sec(0)).with_burst(100);
        let drl = Arc::new(Drl::new(cfg, Arc::new(clock.clone())).unwrap());
        drl.enforce(&write(100), &mut Request::new(None)).unwrap();
        let waiter = {
            let d = drl.clone();
            thread::spawn(move || d.enforce(&write(100), &mut Request::new(None)).unwrap())
        };
        drl.configure(&ObjectConfig::Drl(
            DrlConfig::new(Rate::bytes_per_sec(1000)).with_burst(100),
        ))
        .unwrap();
        clock.advance(Duration::from_millis(100));
        drl.wake_waiters();
        waiter.join().unwrap();
        assert_eq!(drl.status().waiting, 0);
    });
}
