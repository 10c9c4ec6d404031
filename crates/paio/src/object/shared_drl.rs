//! A token bucket shared by processes: what a [`DrlConfig`] with
//! [`DrlConfig::shared`] builds.
//!
//! Every object, in any process, that names the same bucket in the same
//! shared memory ([`SharedBuckets`]; the interposer's is the file
//! `PAIO_SHARED`, which `paio run` gives every process of its command)
//! draws on one budget: `paio run --limit read=20MiB/s -- fio --numjobs=4`
//! reads 20 MiB/s in all, not 20 per process.
//!
//! Semantics (integer arithmetic in nanoseconds of `CLOCK_MONOTONIC`, the
//! one time line of every process of the machine):
//! - The bucket is one 64-bit word `T`: the time at which the bucket,
//!   charged with every request so far, holds no tokens. At time `t` it
//!   holds min(burst, (t − T) × rate) tokens (negative: debt). A new bucket
//!   (`T` = 0) is full.
//! - A request of `c` tokens (its size with a byte rate, `zero_size_cost`
//!   for a zero-byte one, one token with an operation rate) arriving at `t`
//!   sets `T` ← max(T, t − burst ÷ rate) + c ÷ rate in one atomic update,
//!   and is released at the new `T`: at once when that is not later than
//!   `t`. As with a [`Drl`](super::Drl), a request is charged in full at
//!   arrival, one larger than the burst waits for its debt, requests are
//!   released in the order their charges were made (FIFO across processes),
//!   and over any window the tokens released are at most rate × window +
//!   max(burst, largest request): `c ÷ rate` is rounded up to the
//!   nanosecond, never down.
//! - A waiting request sleeps until its release time: no lock is shared
//!   and no process wakes another (only its own object's reconfiguration,
//!   below, wakes it early).
//! - In two-phase use the bytes a call did not move are refunded:
//!   `T` ← `T` − unused ÷ rate (rounded down). Requests already waiting keep
//!   their release times; the credit goes to the next arrivals (beyond the
//!   burst it is lost, as unused tokens are).
//! - [`EnforcementObject::configure`] changes the rate and burst for the
//!   charges made from then on. A request of this object waiting when the
//!   rate is raised pays the new rate instead: the difference between its
//!   charge at the old rate and at the new one comes off its release time
//!   and off `T` (a refund, as above), so a control plane that raises a
//!   rate releases it sooner; one that lowers it leaves waiting requests
//!   their release times. A shared bucket cannot be paused: its rate must
//!   be positive.
//! - A process that dies while its request waits leaves that request's
//!   charge in the bucket: the others lose at most its tokens.
//! - Each process charges at the rate of its own object: the objects naming
//!   one bucket should have the same rate and burst (`paio run` gives every
//!   process the same policy).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{
    ConfigError, DrlConfig, EnforceError, EnforcementObject, ObjectConfig, Request, TryEnforceError,
};
use crate::clock::SharedClock;
use crate::context::Context;
use crate::sync::{Condvar, Mutex};
use crate::units::RateUnit;

const NANO: u128 = 1_000_000_000;

/// Most bytes in a bucket's name.
pub const MAX_BUCKET_NAME: usize = 64;

/// Memory shared by the processes whose limits are shared
/// ([`DrlConfig::shared`]): one 64-bit word per bucket name.
pub trait SharedBuckets: Send + Sync + fmt::Debug {
    /// The word of the bucket named `name`: the same word in every process
    /// that maps this memory, 0 when first used. Fails, saying why, when the
    /// memory cannot be had or holds no room for another bucket.
    fn word(&self, name: &str) -> Result<&'static AtomicU64, String>;
}

static BUCKETS: OnceLock<Arc<dyn SharedBuckets>> = OnceLock::new();

/// Installs the process's shared buckets, which shared limits built from
/// then on use. Only the first call takes effect; returns whether it was
/// this one.
pub fn install_shared_buckets(buckets: Arc<dyn SharedBuckets>) -> bool {
    BUCKETS.set(buckets).is_ok()
}

/// The process's shared buckets, if installed.
pub fn shared_buckets() -> Option<&'static Arc<dyn SharedBuckets>> {
    BUCKETS.get()
}

/// Buckets in this process's memory: shared by its stages only. For tests,
/// and for checking a policy that names shared buckets in a process that
/// enforces nothing (`paio run` before it starts the command).
#[derive(Debug, Default)]
pub struct LocalBuckets {
    words: Mutex<Vec<(String, &'static AtomicU64)>>,
}

/// Most buckets a [`LocalBuckets`] holds (each is a word leaked for the
/// process's lifetime).
const LOCAL_BUCKETS: usize = 256;

impl SharedBuckets for LocalBuckets {
    fn word(&self, name: &str) -> Result<&'static AtomicU64, String> {
        let mut words = self.words.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, w)) = words.iter().find(|(n, _)| n == name) {
            return Ok(w);
        }
        if words.len() >= LOCAL_BUCKETS {
            return Err(format!("more than {LOCAL_BUCKETS} shared buckets"));
        }
        let w: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        words.push((name.to_string(), w));
        Ok(w)
    }
}

/// The bucket's word after charging `cost_ns` at `now` to a bucket whose
/// word is `t` and whose burst lasts `burst_ns`: also the charged
/// request's release time (see the module documentation).
#[inline]
pub fn charge(t: u64, now: u64, cost_ns: u64, burst_ns: u64) -> u64 {
    t.max(now.saturating_sub(burst_ns)).saturating_add(cost_ns)
}

/// Checks what a shared bucket needs of `config` beyond what every DRL
/// does: a name of at most [`MAX_BUCKET_NAME`] printable bytes, and a rate.
pub(crate) fn validate_shared(config: &DrlConfig) -> Result<(), ConfigError> {
    let Some(name) = &config.shared else {
        return Ok(());
    };
    if name.is_empty()
        || name.len() > MAX_BUCKET_NAME
        || name.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(ConfigError::Invalid {
            field: "shared",
            reason: format!(
                "{name:?}: a bucket's name is 1 to {MAX_BUCKET_NAME} bytes without spaces or control characters"
            ),
        });
    }
    if config.rate.per_second == 0 {
        return Err(ConfigError::Invalid {
            field: "rate",
            reason: "a shared bucket cannot be paused: its rate must be positive".to_string(),
        });
    }
    Ok(())
}

/// An object's waiting requests.
#[derive(Debug, Default)]
struct Waiters {
    waiting: u32,
    /// Reconfigurations so far.
    generation: u64,
}

/// A token bucket whose state is a word of shared memory (see the module
/// documentation for its exact semantics).
#[derive(Debug)]
pub struct SharedDrl {
    word: &'static AtomicU64,
    config: Mutex<DrlConfig>,
    /// The rate's tokens per second (never 0).
    per_second: AtomicU64,
    /// How long the burst lasts at the rate, in ns.
    burst_ns: AtomicU64,
    zero_size_cost: AtomicU64,
    ops: AtomicBool,
    split: AtomicU64,
    clock: SharedClock,
    /// This object's waiting requests and its configuration's generation:
    /// a waiter that sees the generation move looks at the rate again.
    waiters: Mutex<Waiters>,
    moved: Condvar,
}

impl SharedDrl {
    /// A bucket of the process's [`SharedBuckets`] named by
    /// `config.shared` (which must be set), charged at `config`'s rate.
    pub fn new(config: DrlConfig, clock: SharedClock) -> Result<Self, ConfigError> {
        super::drl::validate(&config)?;
        validate_shared(&config)?;
        let name = config.shared.as_deref().ok_or(ConfigError::Invalid {
            field: "shared",
            reason: "a shared bucket needs a name".to_string(),
        })?;
        let buckets = shared_buckets().ok_or_else(|| ConfigError::Invalid {
            field: "shared",
            reason: format!(
                "bucket {name:?}: this process has no memory shared with others for it \
                 (the interposer has it when PAIO_SHARED names a file, as `paio run` sets; \
                 remove `shared` for a limit of this process alone)"
            ),
        })?;
        let word = buckets.word(name).map_err(|reason| ConfigError::Invalid {
            field: "shared",
            reason: format!("bucket {name:?}: {reason}"),
        })?;
        Ok(Self::with_word(config, clock, word))
    }

    /// A bucket whose state is `word` (its other users being whoever else
    /// holds it), charged at `config`'s rate. `config` is checked by the
    /// caller ([`SharedDrl::new`] does).
    pub fn with_word(config: DrlConfig, clock: SharedClock, word: &'static AtomicU64) -> Self {
        let config = config.capped();
        let me = Self {
            word,
            config: Mutex::new(config.clone()),
            per_second: AtomicU64::new(1),
            burst_ns: AtomicU64::new(0),
            zero_size_cost: AtomicU64::new(0),
            ops: AtomicBool::new(false),
            split: AtomicU64::new(0),
            clock,
            waiters: Mutex::new(Waiters::default()),
            moved: Condvar::new(),
        };
        me.adopt(&config);
        me
    }

    fn adopt(&self, c: &DrlConfig) {
        let per_second = c.rate.per_second.max(1);
        let burst_ns = (c.effective_burst() as u128 * NANO / per_second as u128)
            .try_into()
            .unwrap_or(u64::MAX);
        self.per_second.store(per_second, Ordering::Relaxed);
        self.burst_ns.store(burst_ns, Ordering::Relaxed);
        self.zero_size_cost
            .store(c.zero_size_cost, Ordering::Relaxed);
        self.ops
            .store(c.rate.unit == RateUnit::Ops, Ordering::Relaxed);
        self.split.store(c.split.0, Ordering::Relaxed);
    }

    /// Nanoseconds on the time line every process shares: `CLOCK_MONOTONIC`
    /// with a real clock, the clock itself with a test's.
    fn now(&self) -> u64 {
        if self.clock.is_real_time() {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            (t.tv_sec as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(t.tv_nsec as u64)
        } else {
            self.clock.now_ns()
        }
    }

    fn tokens(&self, ctx: &Context) -> u64 {
        if self.ops.load(Ordering::Relaxed) {
            1
        } else if ctx.size == 0 {
            self.zero_size_cost.load(Ordering::Relaxed)
        } else {
            ctx.size
        }
    }

    /// `tokens` at the rate, in ns: rounded up, or down with `down`.
    fn ns_of(&self, tokens: u64, down: bool) -> u64 {
        let per_second = self.per_second.load(Ordering::Relaxed) as u128;
        let n = tokens as u128 * NANO;
        let ns = if down {
            n / per_second
        } else {
            n.div_ceil(per_second)
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Charges `ctx` at `now`; its release time and the charge, in ns.
    fn reserve(&self, ctx: &Context, now: u64) -> (u64, u64) {
        let cost = self.ns_of(self.tokens(ctx), false);
        let burst = self.burst_ns.load(Ordering::Relaxed);
        let before = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(charge(t, now, cost, burst))
            })
            .unwrap_or_else(|t| t);
        (charge(before, now, cost, burst), cost)
    }

    /// Sleeps until `release`, the release time of a charge of `cost` ns;
    /// when a reconfiguration raises the rate meanwhile, the charge is
    /// repriced at the new rate (see the module documentation).
    fn wait_until(&self, ctx: &Context, mut release: u64, mut cost: u64) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        w.waiting += 1;
        let mut seen = w.generation;
        // The clock is read under the lock: a wake-up after the read finds
        // this thread asleep, never between.
        loop {
            if w.generation != seen {
                seen = w.generation;
                let now_cost = self.ns_of(self.tokens(ctx), false);
                if now_cost < cost {
                    let less = cost - now_cost;
                    self.credit(less);
                    release = release.saturating_sub(less);
                    cost = now_cost;
                }
            }
            let now = self.now();
            if now >= release {
                break;
            }
            w = if self.clock.is_real_time() {
                self.moved
                    .wait_timeout(w, Duration::from_nanos(release - now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            } else {
                self.moved.wait(w).unwrap_or_else(|e| e.into_inner())
            };
        }
        w.waiting -= 1;
    }

    /// Wakes this object's waiting requests so they read the clock (a
    /// test's, which does not wake them by itself) and the rate again.
    pub fn wake_waiters(&self) {
        drop(self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
        self.moved.notify_all();
    }

    /// This object's requests waiting now.
    pub fn waiting(&self) -> u32 {
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
    }

    /// Gives back the tokens charged for `ctx` beyond the `moved` bytes its
    /// call moved, with a byte rate (see the module documentation).
    pub fn refund(&self, ctx: &Context, moved: u64) {
        if moved >= ctx.size || self.ops.load(Ordering::Relaxed) {
            return;
        }
        self.credit(self.ns_of(ctx.size - moved, true));
    }

    /// Gives `ns` of charges back to the bucket: `T` ← `T` − `ns`.
    fn credit(&self, ns: u64) {
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_sub(ns))
            });
    }
}

impl EnforcementObject for SharedDrl {
    fn kind(&self) -> &'static str {
        "drl"
    }

    fn waiting_now(&self) -> u64 {
        u64::from(self.waiting())
    }

    /// Adopts a DRL's settings: the same bucket (`shared` the same, or unset
    /// to keep it, as a control plane's rate rule leaves it), a positive
    /// rate.
    fn configure(&self, config: &ObjectConfig) -> Result<(), ConfigError> {
        let new = super::drl::drl_settings(config)?;
        let mut current = self.config.lock().unwrap_or_else(|e| e.into_inner());
        if new.shared.is_some() && new.shared != current.shared {
            return Err(ConfigError::Invalid {
                field: "shared",
                reason: format!(
                    "{:?}: an object cannot move to another bucket (it draws on {:?}); \
                     add an object for the other bucket",
                    new.shared.as_deref().unwrap_or_default(),
                    current.shared.as_deref().unwrap_or_default()
                ),
            });
        }
        let new = current.reconfigured(new);
        super::drl::validate(&new)?;
        validate_shared(&new)?;
        self.adopt(&new);
        *current = new;
        drop(current);
        // Waiting requests look at the rate again.
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation += 1;
        self.moved.notify_all();
        Ok(())
    }

    fn enforce(&self, ctx: &Context, _request: &mut Request<'_>) -> Result<u64, EnforceError> {
        let arrival = self.now();
        let (release, cost) = self.reserve(ctx, arrival);
        if release <= arrival {
            return Ok(0);
        }
        self.wait_until(ctx, release, cost);
        Ok(self.now().saturating_sub(arrival).max(1))
    }

    fn config(&self) -> ObjectConfig {
        ObjectConfig::Drl(
            self.config
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }

    /// Charges only a request that can go at once; otherwise nothing, and
    /// how long it would wait.
    fn try_enforce(
        &self,
        ctx: &Context,
        _request: &mut Request<'_>,
    ) -> Result<u64, TryEnforceError> {
        let now = self.now();
        let cost = self.ns_of(self.tokens(ctx), false);
        let burst = self.burst_ns.load(Ordering::Relaxed);
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                let after = charge(t, now, cost, burst);
                (after <= now).then_some(after)
            })
            .map(|_| 0)
            .map_err(|t| {
                TryEnforceError::Wait(Duration::from_nanos(charge(t, now, cost, burst) - now))
            })
    }

    fn two_phase(&self) -> bool {
        true
    }

    /// Refunds the bytes a byte-rate admission charged but the call did not
    /// move: see [`SharedDrl::refund`].
    fn complete(&self, ctx: &Context, _note: u32, moved: u64) {
        self.refund(ctx, moved);
    }

    /// A rate in bytes charges every request's size.
    fn charges_bytes(&self, _ctx: &Context) -> bool {
        !self.ops.load(Ordering::Relaxed)
    }

    /// As a DRL's: `split` for a non-critical request larger than it.
    fn split_size(&self, ctx: &Context) -> Option<u64> {
        super::drl::split_piece(self.split.load(Ordering::Relaxed), ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::context::RequestType;
    use crate::units::Rate;
    use proptest::prelude::*;

    fn ctx(size: u64) -> Context {
        Context::explicit(1, RequestType::READ, Default::default(), size)
    }

    fn leak() -> &'static AtomicU64 {
        Box::leak(Box::new(AtomicU64::new(0)))
    }

    /// Two objects on one word, as two processes would be, on a fake clock
    /// that starts at `start_ns`.
    fn pair(rate: Rate, burst: u64, start_ns: u64) -> (SharedDrl, SharedDrl, FakeClock) {
        let clock = FakeClock::new();
        clock.set_ns(start_ns);
        let word = leak();
        let config = DrlConfig::new(rate).with_burst(burst).shared_as("b");
        let a = SharedDrl::with_word(config.clone(), Arc::new(clock.clone()), word);
        let b = SharedDrl::with_word(config, Arc::new(clock.clone()), word);
        (a, b, clock)
    }

    #[test]
    fn two_users_of_one_bucket_share_its_rate() {
        // 1,000 B/s, burst 100: the first 100 bytes go at once, whoever
        // asks; after that each user waits for the other's charges too.
        let (a, b, clock) = pair(Rate::bytes_per_sec(1000), 100, 10_000_000_000);
        let r = |o: &SharedDrl, n| o.try_enforce(&ctx(n), &mut Request::new(None));
        assert_eq!(r(&a, 60), Ok(0));
        assert_eq!(r(&b, 40), Ok(0));
        assert_eq!(
            r(&a, 10),
            Err(TryEnforceError::Wait(Duration::from_millis(10)))
        );
        clock.advance(Duration::from_millis(10));
        assert_eq!(r(&b, 10), Ok(0));
        assert_eq!(
            r(&a, 10),
            Err(TryEnforceError::Wait(Duration::from_millis(10)))
        );
    }

    #[test]
    fn a_waiting_request_is_released_at_its_charge_and_refunds_go_to_later_ones() {
        let (a, b, clock) = pair(Rate::bytes_per_sec(1000), 100, 5_000_000_000);
        let start = clock.now_ns();
        assert_eq!(a.reserve(&ctx(100), start).0, start);
        // 50 bytes of debt: released 50 ms later.
        let release = b.reserve(&ctx(50), start).0;
        assert_eq!(release, start + 50_000_000);
        // The call moved 10 of them: 40 ms of credit for the next arrival.
        b.refund(&ctx(50), 10);
        assert_eq!(a.reserve(&ctx(40), start).0, start + 50_000_000);
        let a = Arc::new(a);
        let waiter = {
            let a = a.clone();
            std::thread::spawn(move || a.enforce(&ctx(1), &mut Request::new(None)))
        };
        while a.waiting() == 0 {
            std::thread::yield_now();
        }
        clock.advance(Duration::from_millis(50));
        a.wake_waiters();
        clock.advance(Duration::from_millis(1));
        a.wake_waiters();
        assert_eq!(waiter.join().unwrap(), Ok(51_000_000));
    }

    #[test]
    fn a_rate_raised_releases_waiting_requests_at_the_new_rate() {
        let (a, b, clock) = pair(Rate::bytes_per_sec(1000), 100, 5_000_000_000);
        let start = clock.now_ns();
        assert_eq!(a.reserve(&ctx(100), start).0, start, "the burst");
        let a = Arc::new(a);
        let waiter = |a: &Arc<SharedDrl>| {
            let a = a.clone();
            std::thread::spawn(move || a.enforce(&ctx(100), &mut Request::new(None)))
        };
        let until_waiting = |a: &SharedDrl| {
            while a.waiting() == 0 {
                std::thread::yield_now();
            }
        };
        // Charged 100 ms at 1,000 B/s; at 10,000 B/s it costs 10 ms, and
        // the 90 ms go back to the bucket.
        let w = waiter(&a);
        until_waiting(&a);
        let fast = |r| ObjectConfig::Drl(DrlConfig::new(Rate::bytes_per_sec(r)).with_burst(100));
        a.configure(&fast(10_000)).unwrap();
        clock.advance(Duration::from_millis(10));
        a.wake_waiters();
        assert_eq!(w.join().unwrap(), Ok(10_000_000));
        let now = clock.now_ns();
        assert_eq!(
            b.reserve(&ctx(10), now).0,
            now + 10_000_000,
            "T was refunded"
        );
        // Lowered: a waiting request keeps its release time.
        let w = waiter(&a);
        until_waiting(&a);
        a.configure(&fast(1000)).unwrap();
        clock.advance(Duration::from_millis(20));
        a.wake_waiters();
        assert_eq!(w.join().unwrap(), Ok(20_000_000));
    }

    #[test]
    fn an_operation_rate_charges_one_token_and_refunds_nothing() {
        let (a, _, _) = pair(Rate::ops_per_sec(100), 1, 1_000_000_000);
        let now = 1_000_000_000;
        assert_eq!(a.reserve(&ctx(1 << 20), now).0, now);
        assert_eq!(a.reserve(&ctx(0), now).0, now + 10_000_000);
        a.refund(&ctx(1 << 20), 0);
        assert_eq!(a.reserve(&ctx(7), now).0, now + 20_000_000);
    }

    #[test]
    fn configure_keeps_the_bucket_and_refuses_another_or_a_pause() {
        let (a, _, _) = pair(Rate::bytes_per_sec(1000), 100, 0);
        // A control plane's rate rule carries no bucket: it is kept.
        a.configure(&ObjectConfig::Drl(DrlConfig::new(Rate::bytes_per_sec(
            2000,
        ))))
        .unwrap();
        let ObjectConfig::Drl(c) = a.config() else {
            unreachable!()
        };
        assert_eq!((c.rate.per_second, c.shared.as_deref()), (2000, Some("b")));
        assert_eq!(a.ns_of(1000, false), 500_000_000);
        let other = DrlConfig::new(Rate::bytes_per_sec(2000)).shared_as("c");
        assert!(matches!(
            a.configure(&ObjectConfig::Drl(other)),
            Err(ConfigError::Invalid {
                field: "shared",
                ..
            })
        ));
        assert!(matches!(
            a.configure(&ObjectConfig::Drl(DrlConfig::new(Rate::bytes_per_sec(0)))),
            Err(ConfigError::Invalid { field: "rate", .. })
        ));
    }

    #[test]
    fn a_ceiling_holds_under_rate_rules_on_a_shared_bucket() {
        let clock = FakeClock::new();
        let config = DrlConfig::new(Rate::bytes_per_sec(1000))
            .with_burst(100)
            .shared_as("b")
            .with_max_rate(Rate::bytes_per_sec(1000));
        let a = SharedDrl::with_word(config, Arc::new(clock.clone()), leak());
        a.configure(&ObjectConfig::Drl(DrlConfig::new(Rate::bytes_per_sec(
            1 << 30,
        ))))
        .unwrap();
        let ObjectConfig::Drl(c) = a.config() else {
            unreachable!()
        };
        assert_eq!(
            (c.rate.per_second, c.max_rate, c.shared.as_deref()),
            (1000, Some(Rate::bytes_per_sec(1000)), Some("b"))
        );
        assert_eq!(a.ns_of(1000, false), 1_000_000_000);
    }

    /// A rule creating a shared bucket gets a DRL's checks too: a ceiling
    /// in another unit is refused, not ignored.
    #[test]
    fn a_shared_bucket_is_checked_as_a_drl() {
        let c = DrlConfig::new(Rate::bytes_per_sec(1000))
            .shared_as("b")
            .with_max_rate(Rate::ops_per_sec(10));
        let e = SharedDrl::new(c, Arc::new(FakeClock::new())).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Invalid {
                    field: "max_rate",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn names_and_rates_are_checked() {
        for bad in ["", "a b", "x\u{7}", &"n".repeat(MAX_BUCKET_NAME + 1)] {
            let c = DrlConfig::new(Rate::bytes_per_sec(1)).shared_as(bad);
            assert!(validate_shared(&c).is_err(), "{bad:?}");
        }
        let c = DrlConfig::new(Rate::bytes_per_sec(0)).shared_as("read");
        assert!(validate_shared(&c).is_err());
        assert!(validate_shared(&DrlConfig::new(Rate::bytes_per_sec(1)).shared_as("read")).is_ok());
    }

    #[test]
    fn local_buckets_give_one_word_per_name() {
        let l = LocalBuckets::default();
        let (a, b) = (l.word("read").unwrap(), l.word("write").unwrap());
        assert!(std::ptr::eq(a, l.word("read").unwrap()));
        assert!(!std::ptr::eq(a, b));
    }

    proptest! {
        /// Requests of several users, arriving in time order, each charged
        /// at arrival: over every window of release times the bytes
        /// released are at most rate × window + max(burst, largest
        /// request); releases follow the order of the charges; and a
        /// request that waits is released no later than a lone bucket
        /// holding the same debt would release it.
        #[test]
        fn releases_keep_the_rate_in_every_window(
            rate in 1u64..5_000_000,
            burst in 1u64..100_000,
            start in 0u64..10_000_000_000,
            reqs in proptest::collection::vec((0u64..50_000_000, 0u64..200_000, 0usize..3), 1..60),
        ) {
            let clock = FakeClock::new();
            clock.set_ns(start);
            let word = leak();
            let config = DrlConfig::new(Rate::bytes_per_sec(rate)).with_burst(burst).shared_as("p");
            let users: Vec<SharedDrl> = (0..3)
                .map(|_| SharedDrl::with_word(config.clone(), Arc::new(clock.clone()), word))
                .collect();
            let mut now = start;
            let mut released: Vec<(u64, u64)> = Vec::new();
            let mut largest = 0;
            for (gap, size, who) in reqs {
                now += gap;
                largest = largest.max(size);
                // Released at its charge, or at arrival when that is past.
                let r = users[who].reserve(&ctx(size), now).0.max(now);
                prop_assert!(r >= released.last().map_or(0, |l| l.0), "FIFO");
                released.push((r, size));
            }
            let slack = burst.max(largest) as u128;
            for i in 0..released.len() {
                for j in i..released.len() {
                    let window = (released[j].0 - released[i].0) as u128;
                    let bytes: u128 = released[i..=j].iter().map(|r| r.1 as u128).sum();
                    prop_assert!(
                        bytes * NANO <= rate as u128 * window + slack * NANO,
                        "{bytes} B in {window} ns at {rate} B/s, burst {burst}"
                    );
                }
            }
        }

        /// A bucket shared by users who each charge what a lone user would
        /// have: the same release times.
        #[test]
        fn sharing_changes_nothing_but_who_asks(
            rate in 1u64..5_000_000,
            burst in 1u64..100_000,
            reqs in proptest::collection::vec((0u64..50_000_000, 0u64..200_000, 0usize..3), 1..40),
        ) {
            let (a, b, clock) = pair(Rate::bytes_per_sec(rate), burst, 1);
            let lone = SharedDrl::with_word(
                DrlConfig::new(Rate::bytes_per_sec(rate)).with_burst(burst).shared_as("x"),
                Arc::new(clock.clone()),
                leak(),
            );
            let mut now = 1;
            for (gap, size, who) in reqs {
                now += gap;
                let shared = if who == 0 { &a } else { &b };
                prop_assert_eq!(shared.reserve(&ctx(size), now), lone.reserve(&ctx(size), now));
            }
        }
    }
}
