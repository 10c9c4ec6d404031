//! Model checking of the stage's routing-table swap with loom: a rule that
//! reroutes requests publishes a new table (`ArcSwap::store`) and then
//! bumps the stage's generation; a handle that sees the new generation
//! loads the table again. Built only with `--cfg loom` (`make test-loom`);
//! the table's swap and the generation are then loom's (`src/sync.rs`), so
//! a handle that kept a table older than the generation it saw, and routed
//! a request by it after the rule was applied, fails the test in some
//! interleaving (publishing the generation before the table does: checked).
//! The stand-in for arc-swap is a lock, so the model checks the order of
//! publication, not arc-swap's own memory orderings.

#![cfg(loom)]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use loom::sync::atomic::AtomicBool;
use loom::thread;
use paio::{Context, Pattern, RequestType, Rule, Stage};

const POLICY: &str = "[[channel]]\nname = \"a\"\nmatch = {}\n";

fn ops(stage: &Stage, channel: &str) -> u64 {
    stage
        .collect()
        .channels
        .iter()
        .find(|c| c.name == channel)
        .map_or(0, |c| c.counts.ops)
}

/// How the reader enforces: through a [`paio::StageHandle`] (its own
/// generation and table) or [`Stage::enforce`] (the thread's table cache).
#[derive(Clone, Copy)]
enum Path {
    Handle,
    ThreadCache,
}

/// One request is enforced while a rule moves every request from channel
/// `a` to a new channel `b`, then, once the rule is applied, one more: the
/// second always goes to `b`, and no request is lost.
fn reroute(path: Path) {
    loom::model(move || {
        let stage = Arc::new(Stage::from_policy_str(POLICY, "loom").unwrap());
        let applied = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stage, applied) = (stage.clone(), applied.clone());
            thread::spawn(move || {
                let ctx = Context::new(RequestType::READ, 4096);
                let mut handle = stage.handle();
                let mut enforce = || match path {
                    Path::Handle => handle.enforce(&ctx, None).unwrap(),
                    Path::ThreadCache => stage.enforce(&ctx, None).unwrap(),
                };
                enforce();
                while !applied.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                let before = ops(&stage, "b");
                enforce();
                assert_eq!(ops(&stage, "b"), before + 1, "routed by a stale table");
            })
        };
        stage
            .apply_all(&[
                Rule::CreateChannel { name: "b".into() },
                Rule::MapChannel {
                    pattern: Pattern::default(),
                    channel: "b".into(),
                },
            ])
            .unwrap();
        applied.store(true, Ordering::Release);
        reader.join().unwrap();
        assert_eq!(ops(&stage, "a") + ops(&stage, "b"), 2);
    });
}

#[test]
fn a_handle_takes_the_new_route_after_a_reroute() {
    reroute(Path::Handle);
}

/// The thread's table cache is a std thread-local: loom runs its threads
/// on one OS thread, so here it stands for the reader's own cache (the
/// writer enforces nothing), keyed by the stage as in a real thread.
#[test]
fn the_thread_cache_takes_the_new_route_after_a_reroute() {
    reroute(Path::ThreadCache);
}
