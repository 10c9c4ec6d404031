//! Many threads enforce on many channels while rules are applied and
//! statistics collected: totals must be exact and nothing may deadlock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use paio::object::{Drl, DrlConfig};
use paio::{
    Context, ContextScope, ObjectConfig, Pattern, Rate, RequestContext, RequestType, Rule, Stage,
};

const WORKERS: usize = 8;
const REQUESTS: u64 = 20_000;

fn class(i: usize) -> RequestContext {
    RequestContext::named(&format!("conc-{}", i % 4)).unwrap()
}

/// Runs `f` on a thread and fails the test if it takes longer than `limit`
/// (a deadlock), instead of hanging the suite.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("deadlock: the run did not finish in time")
}

#[test]
fn totals_are_exact_under_concurrent_rule_changes() {
    within(Duration::from_secs(120), || {
        let stage = Arc::new(Stage::builder("conc").build());
        let mut setup = Vec::new();
        for i in 0..4 {
            let ch = format!("ch{i}");
            setup.push(Rule::CreateChannel { name: ch.clone() });
            setup.push(Rule::CreateObject {
                channel: ch.clone(),
                name: "limit".into(),
                config: ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(50_000_000))),
            });
            setup.push(Rule::MapChannel {
                pattern: Pattern {
                    request_context: Some(class(i)),
                    ..Pattern::ANY
                },
                channel: ch,
            });
        }
        stage.apply_all(&setup).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let controller = {
            let (stage, stop) = (stage.clone(), stop.clone());
            thread::spawn(move || {
                let mut round = 0u64;
                let mut collections = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let ch = format!("ch{}", round % 4);
                    let tmp = format!("tmp{round}");
                    let fast =
                        ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(10_000_000 + round)));
                    // Route the channel's requests through a new object, then
                    // retire it; remap a whole channel; change a rate.
                    stage
                        .apply_all(&[
                            Rule::CreateObject {
                                channel: ch.clone(),
                                name: tmp.clone(),
                                config: ObjectConfig::Noop,
                            },
                            Rule::SetDefaultObject {
                                channel: ch.clone(),
                                object: tmp.clone(),
                            },
                            Rule::Configure {
                                channel: ch.clone(),
                                object: "limit".into(),
                                config: fast,
                            },
                        ])
                        .unwrap();
                    thread::yield_now();
                    stage
                        .apply_all(&[
                            Rule::SetDefaultObject {
                                channel: ch.clone(),
                                object: "default".into(),
                            },
                            Rule::RemoveObject {
                                channel: ch.clone(),
                                name: tmp,
                            },
                        ])
                        .unwrap();
                    let target = if round.is_multiple_of(2) {
                        "limit"
                    } else {
                        "default"
                    };
                    stage
                        .apply(&Rule::MapObject {
                            channel: ch,
                            pattern: Pattern {
                                request_type: Some(RequestType::WRITE),
                                ..Pattern::ANY
                            },
                            object: target.into(),
                        })
                        .unwrap();
                    collections.push(stage.collect());
                    round += 1;
                }
                (round, collections)
            })
        };

        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let stage = stage.clone();
                thread::spawn(move || {
                    let _scope = ContextScope::enter(class(w));
                    for n in 0..REQUESTS {
                        let t = if n % 2 == 0 {
                            RequestType::WRITE
                        } else {
                            RequestType::READ
                        };
                        stage
                            .enforce(&Context::new(t, (w as u64 + 1) * 10), None)
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let (rounds, collections) = controller.join().unwrap();
        assert!(rounds > 0);

        let s = stage.collect();
        let ops: u64 =
            s.channels.iter().map(|c| c.counts.ops).sum::<u64>() + s.unmatched.ops + s.removed.ops;
        let bytes: u64 = s.channels.iter().map(|c| c.counts.bytes).sum::<u64>()
            + s.unmatched.bytes
            + s.removed.bytes;
        let expect_bytes: u64 = (0..WORKERS as u64).map(|w| (w + 1) * 10 * REQUESTS).sum();
        assert_eq!(ops, WORKERS as u64 * REQUESTS);
        assert_eq!(bytes, expect_bytes);
        assert_eq!(s.unmatched.ops, 0);
        // Each channel got exactly its two workers' requests.
        for (i, c) in s.channels.iter().enumerate() {
            let expect: u64 = (0..WORKERS)
                .filter(|w| w % 4 == i)
                .map(|w| (w as u64 + 1) * 10 * REQUESTS)
                .sum();
            assert_eq!(c.counts.bytes, expect, "channel {}", c.name);
            let objects: u64 = c.objects.iter().map(|o| o.counts.bytes).sum();
            assert!(
                objects <= c.counts.bytes,
                "retired objects count only in the channel total"
            );
        }
        // Cumulative totals never go backwards between collections.
        for pair in collections.windows(2) {
            for (a, b) in pair[0].channels.iter().zip(&pair[1].channels) {
                assert!(b.counts.ops >= a.counts.ops);
            }
        }
    })
}

#[test]
fn rate_changes_are_not_blocked_by_waiting_requests() {
    within(Duration::from_secs(60), || {
        let stage = Arc::new(Stage::builder("wait").build());
        stage
            .apply(&Rule::CreateChannel {
                name: "slow".into(),
            })
            .unwrap();
        // Paused (rate 0) with two tokens: the first two requests pass, every
        // later one waits until the rate is raised.
        let paused = DrlConfig::new(Rate::ops_per_sec(0)).with_burst(2);
        let drl = Arc::new(Drl::new(paused, stage.clock().clone()).unwrap());
        stage.add_object("slow", "limit", drl.clone()).unwrap();
        stage
            .apply_all(&[
                Rule::SetDefaultObject {
                    channel: "slow".into(),
                    object: "limit".into(),
                },
                Rule::SetDefaultChannel {
                    channel: Some("slow".into()),
                },
            ])
            .unwrap();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let stage = stage.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        stage
                            .enforce(&Context::new(RequestType::READ, 1), None)
                            .unwrap();
                    }
                })
            })
            .collect();
        // At least three workers end up blocked (four unless both free tokens
        // went to the same worker, which then finished).
        while drl.status().waiting < 3 {
            thread::yield_now();
        }
        // This must return at once even though requests sleep in the
        // bucket, and release them.
        let fast = ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(1_000_000)).with_burst(1));
        stage
            .apply(&Rule::Configure {
                channel: "slow".into(),
                object: "limit".into(),
                config: fast,
            })
            .unwrap();
        for w in workers {
            w.join().unwrap();
        }
        let s = stage.collect();
        assert_eq!(s.channels[0].counts.ops, 8);
        assert!(s.channels[0].counts.wait_total.waited_ops >= 3);
    })
}

/// Critical and background threads admit and complete through one priority
/// object on a real clock: background never has more than `depth`
/// outstanding, critical requests never wait (no critical limit), and every
/// admission is completed and counted.
#[test]
fn priority_depth_holds_under_contention() {
    use paio::criticality::CriticalScope;
    use std::sync::atomic::AtomicI64;
    within(Duration::from_secs(120), || {
        let stage = Arc::new(
            Stage::from_policy_str(
                r#"
                [stage]
                default_channel = "all"
                [[channel]]
                name = "all"
                default_object = "prio"
                [[channel.object]]
                name = "prio"
                kind = "priority"
                depth = 2
                busy_depth = 1
                window = "50us"
                starvation = "1ms"
                "#,
                "<conc-priority>",
            )
            .unwrap(),
        );
        let outstanding = Arc::new(AtomicI64::new(0));
        let peak = Arc::new(AtomicI64::new(0));
        let critical_waits = Arc::new(AtomicI64::new(0));
        let mut handles = Vec::new();
        for w in 0..6 {
            let (stage, outstanding, peak, critical_waits) = (
                stage.clone(),
                outstanding.clone(),
                peak.clone(),
                critical_waits.clone(),
            );
            handles.push(thread::spawn(move || {
                let critical = w < 2;
                let _scope = critical.then(CriticalScope::enter);
                for _ in 0..2_000 {
                    let a = stage.admit(&Context::new(RequestType::READ, 4096)).unwrap();
                    if critical {
                        if a.waited_ns() > 0 {
                            critical_waits.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        let now = outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        thread::yield_now();
                        outstanding.fetch_sub(1, Ordering::SeqCst);
                    }
                    stage.complete(a, 4096).unwrap();
                }
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2, "depth exceeded");
        assert_eq!(critical_waits.load(Ordering::Relaxed), 0);
        let counts = &stage.collect().channels[0].counts;
        assert_eq!(counts.ops, 6 * 2_000);
        assert_eq!(counts.latency_total.ops, 6 * 2_000);
    });
}
