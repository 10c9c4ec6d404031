//! The dynamic rate limiter (DRL): a token bucket with debt accounting.
//!
//! Semantics (all exact integer arithmetic in nanotokens, 10⁻⁹ token):
//! - Tokens accrue continuously at `rate` per second, up to `burst` tokens.
//!   There is no refill period: a request is released the first nanosecond
//!   at which its tokens have accrued.
//! - A request costs its size in bytes (`unit = bytes`; a zero-byte request
//!   costs `zero_size_cost`, 0 by default) or one token (`unit = ops`).
//! - Every request is charged in full at arrival: a request larger than the
//!   burst puts the bucket into debt and waits until the debt is paid; it is
//!   never split into chunks.
//! - Requests are released in arrival (FIFO) order: each is given the
//!   cumulative charge as its ticket and released when cumulative credit
//!   reaches it. So over any window, released tokens ≤ rate × window +
//!   max(burst, largest request), and no request waits while its tokens are
//!   due.
//! - [`EnforcementObject::configure`] changes the rate or burst at once: credit
//!   up to that instant accrues at the old rate, afterwards at the new one,
//!   and waiting requests are woken to recompute their release time. A rate
//!   of 0 pauses the bucket: requests wait until the rate is raised.
//! - In two-phase use ([`crate::Stage::admit`], then
//!   [`crate::Stage::complete`]) a request is charged its requested size at
//!   admission, and the bytes its call did not move (a short read, an error)
//!   are refunded at completion ([`Drl::refund`]), so the rate counts exactly
//!   the bytes moved.
//! - The bucket's mutex is held only to update the arithmetic, never while a
//!   request sleeps, so a control-plane update never waits behind requests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    ConfigError, EnforceError, EnforcementObject, ObjectConfig, Request, TryEnforceError,
    SPLIT_ALIGN, SPLIT_REASON,
};
use crate::clock::SharedClock;
use crate::context::Context;
use crate::sync::{Condvar, Mutex, MutexGuard};
use crate::units::{Rate, RateUnit, Size};

const NANO: u128 = 1_000_000_000;

/// Settings of a [`Drl`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrlConfig {
    /// Tokens per second, in bytes or operations.
    pub rate: Rate,
    /// Most tokens the bucket holds, i.e. how far a workflow that was idle may
    /// run ahead of the rate. Larger bursts absorb spikes but let short windows
    /// exceed the rate; smaller ones smooth traffic but make requests wait more
    /// often. Default: 10 ms worth of `rate` (at least one token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<Size>,
    /// Cost of a zero-byte request in a byte-rate bucket (opens, fsyncs...).
    /// Default 0: metadata requests pass byte limits unhindered but still keep
    /// their FIFO place. Ignored by operation-rate buckets, where every request
    /// costs one token.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zero_size_cost: u64,
    /// Pieces that a layer able to split calls (the interposer, for
    /// positional reads and writes of regular files; the RocksDB plugin, for
    /// reads of direct-I/O files) issues a larger non-critical request as,
    /// each charged and admitted on its own (FastResponse §3.3). The pieces
    /// of one call go out one after another, so whatever queues behind the
    /// call below the stage (a critical read in the device's or a cgroup
    /// throttle's queue) waits behind one piece, not the whole call, and the
    /// rate is charged as the bytes go out; the cost is more, smaller calls
    /// (and less throughput for the split work when each call has a fixed
    /// cost). A multiple of 4 KiB, so pieces of direct I/O stay aligned.
    /// 0, the default: off. Critical requests are never split.
    #[serde(default = "no_split", skip_serializing_if = "is_zero_size")]
    pub split: Size,
    /// The name of a bucket shared with other processes
    /// ([`crate::object::shared_drl`]): every object naming it in the same
    /// shared memory (the interposer's `PAIO_SHARED`, one per `paio run`)
    /// draws on one budget, so the rate holds for all of them together.
    /// The cost: one atomic update of a shared word per request, and waits
    /// that sleep to their release time (a rate raised reprices them; a
    /// rate lowered does not move them).
    /// `None`, the default: the bucket is this object's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<String>,
    /// The most `rate` may be, in the same unit: a configuration asking
    /// more (a control plane's rule) gets this. Kept by a reconfiguration
    /// that leaves it unset, so a control plane that knows nothing of it
    /// cannot lift it: a limit the stage's owner set holds under the
    /// control plane's rates too, at the price of the control plane's
    /// allocation not being met where it is higher. `None`, the default:
    /// no ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<Rate>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_size(v: &Size) -> bool {
    v.0 == 0
}

fn no_split() -> Size {
    Size(0)
}

impl DrlConfig {
    /// A configuration with `rate` and the default burst and zero-size cost.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            burst: None,
            zero_size_cost: 0,
            split: Size(0),
            shared: None,
            max_rate: None,
        }
    }

    /// The same configuration with a ceiling on its rate
    /// ([`DrlConfig::max_rate`]).
    pub fn with_max_rate(mut self, max_rate: Rate) -> Self {
        self.max_rate = Some(max_rate);
        self
    }

    /// This configuration as an object applies it: `rate` no higher than
    /// `max_rate`.
    pub fn capped(mut self) -> Self {
        if let Some(max) = self.max_rate {
            if max.unit == self.rate.unit && self.rate.per_second > max.per_second {
                self.rate = max;
            }
        }
        self
    }

    /// `next` as a reconfiguration of an object now configured as `self`
    /// applies it: the bucket (`shared`) and the ceiling (`max_rate`) kept
    /// when `next` leaves them unset, as a control plane's rate rule does,
    /// and the rate capped by the ceiling. (Whether `next` may name another
    /// bucket is the object's to check.)
    pub fn reconfigured(&self, next: &DrlConfig) -> DrlConfig {
        let mut c = next.clone();
        if c.shared.is_none() {
            c.shared.clone_from(&self.shared);
        }
        if c.max_rate.is_none() {
            c.max_rate = self.max_rate;
        }
        c.capped()
    }

    /// The same configuration drawing on the shared bucket `name`
    /// ([`DrlConfig::shared`]).
    pub fn shared_as(mut self, name: &str) -> Self {
        self.shared = Some(name.to_string());
        self
    }

    /// The same configuration with `split` ([`DrlConfig::split`]) in bytes.
    pub fn with_split(mut self, split: u64) -> Self {
        self.split = Size(split);
        self
    }

    /// The same configuration with an explicit burst, in tokens.
    pub fn with_burst(mut self, burst: u64) -> Self {
        self.burst = Some(Size(burst));
        self
    }

    /// The burst in tokens, resolving the default.
    pub fn effective_burst(&self) -> u64 {
        self.burst
            .map(|b| b.0)
            .unwrap_or(self.rate.per_second / 100)
            .max(1)
    }
}

/// A snapshot of a [`Drl`]'s bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrlStatus {
    /// Current rate.
    pub rate: Rate,
    /// Current burst, in tokens.
    pub burst: u64,
    /// Tokens available now; negative when requests owe tokens (debt).
    pub level: i128,
    /// Requests blocked in [`EnforcementObject::enforce`] right now.
    pub waiting: u32,
}

#[derive(Debug)]
struct Bucket {
    config: DrlConfig,
    burst_nt: u128,
    last_ns: u64,
    /// Cumulative nanotokens charged to requests.
    charged: u128,
    /// Cumulative nanotokens credited, never more than `charged + burst`.
    credited: u128,
    waiting: u32,
}

impl Bucket {
    fn refill(&mut self, now: u64) {
        if now > self.last_ns {
            let add = self.config.rate.per_second as u128 * (now - self.last_ns) as u128;
            self.credited = (self.credited + add).min(self.charged + self.burst_nt);
            self.last_ns = now;
        }
    }

    fn cost(&self, ctx: &Context) -> u128 {
        let tokens = match self.config.rate.unit {
            RateUnit::Ops => 1,
            RateUnit::Bytes if ctx.size == 0 => self.config.zero_size_cost,
            RateUnit::Bytes => ctx.size,
        };
        tokens as u128 * NANO
    }

    /// Nanoseconds from `last_ns` until credit reaches `ticket`; `None` when
    /// the rate is 0 and the ticket is not covered.
    fn time_to(&self, ticket: u128) -> Option<u64> {
        if self.credited >= ticket {
            return Some(0);
        }
        let rate = self.config.rate.per_second as u128;
        if rate == 0 {
            return None;
        }
        let ns = (ticket - self.credited).div_ceil(rate);
        Some(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// A dynamic token-bucket rate limiter (see the module documentation for its
/// exact semantics).
#[derive(Debug)]
pub struct Drl {
    bucket: Mutex<Bucket>,
    released: Condvar,
    clock: SharedClock,
    /// `split` of the configuration, readable without the bucket's lock.
    split: AtomicU64,
    /// Whether the rate is in bytes, readable without the bucket's lock.
    bytes: AtomicBool,
}

pub(crate) fn validate(config: &DrlConfig) -> Result<(), ConfigError> {
    if config.burst == Some(Size(0)) {
        return Err(ConfigError::Invalid {
            field: "burst",
            reason: "must be at least one token".to_string(),
        });
    }
    if !config.split.0.is_multiple_of(SPLIT_ALIGN) {
        return Err(ConfigError::Invalid {
            field: "split",
            reason: SPLIT_REASON.to_string(),
        });
    }
    if let Some(max) = config.max_rate {
        if max.unit != config.rate.unit {
            return Err(ConfigError::Invalid {
                field: "max_rate",
                reason: format!(
                    "{max} is not in the unit of the rate ({}): give both in bytes or both in ops",
                    config.rate
                ),
            });
        }
        if max.per_second == 0 {
            return Err(ConfigError::Invalid {
                field: "max_rate",
                reason: "must be above 0 (a ceiling of 0 would pause the object for good; \
                         set `rate` to 0 to pause it)"
                    .to_string(),
            });
        }
    }
    Ok(())
}

impl Drl {
    /// `obj_init`: a bucket that starts full.
    pub fn new(config: DrlConfig, clock: SharedClock) -> Result<Self, ConfigError> {
        validate(&config)?;
        let config = config.capped();
        let burst_nt = config.effective_burst() as u128 * NANO;
        let split = config.split.0;
        let bytes = config.rate.unit == RateUnit::Bytes;
        let bucket = Bucket {
            config,
            burst_nt,
            last_ns: clock.now_ns(),
            charged: 0,
            credited: burst_nt,
            waiting: 0,
        };
        Ok(Self {
            split: AtomicU64::new(split),
            bytes: AtomicBool::new(bytes),
            bucket: Mutex::new(bucket),
            released: Condvar::new(),
            clock,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges the request now and returns how long the caller must wait
    /// before issuing it (zero if at once). The charge is a commitment: later
    /// requests queue behind it. `None` means the bucket is paused (rate 0);
    /// the request is still charged and is due once the rate is raised.
    pub fn reserve(&self, ctx: &Context) -> Option<Duration> {
        let now = self.clock.now_ns();
        let mut b = self.lock();
        b.refill(now);
        let cost = b.cost(ctx);
        b.charged += cost;
        let ticket = b.charged;
        b.time_to(ticket).map(Duration::from_nanos)
    }

    /// Charges and admits the request only if it can go at once and nobody
    /// waits ahead of it. Otherwise charges nothing and returns how long the
    /// caller would have to wait at the current rate (`Duration::MAX` when the
    /// bucket is paused).
    pub fn try_acquire(&self, ctx: &Context) -> Result<(), Duration> {
        let now = self.clock.now_ns();
        let mut b = self.lock();
        b.refill(now);
        let ticket = b.charged + b.cost(ctx);
        match b.time_to(ticket) {
            Some(0) => {
                b.charged = ticket;
                Ok(())
            }
            Some(ns) => Err(Duration::from_nanos(ns)),
            None => Err(Duration::MAX),
        }
    }

    /// Gives back the tokens charged for `ctx` beyond the `moved` bytes its
    /// call really moved, when the bucket counts bytes (an operation is
    /// charged in full whatever it moved). The tokens are credited now, so
    /// waiting requests are released earlier; credit still never exceeds the
    /// burst, so a refund to a full bucket is lost, as unused tokens are.
    pub fn refund(&self, ctx: &Context, moved: u64) {
        if moved >= ctx.size {
            return;
        }
        let waiting = {
            let mut b = self.lock();
            if b.config.rate.unit != RateUnit::Bytes {
                return;
            }
            let unused = (ctx.size - moved) as u128 * NANO;
            b.credited = (b.credited + unused).min(b.charged + b.burst_nt);
            b.waiting > 0
        };
        // Waking costs a system call even with nobody asleep: only if needed.
        if waiting {
            self.released.notify_all();
        }
    }

    /// Gives back everything an admission of `ctx` charged, in either unit:
    /// for a request admitted but then not issued at all ([`Priority`]'s
    /// non-blocking admission when no slot is free). Credited now, capped
    /// at the burst, as [`Drl::refund`] is.
    ///
    /// [`Priority`]: crate::object::Priority
    pub fn give_back(&self, ctx: &Context) {
        let waiting = {
            let mut b = self.lock();
            let cost = b.cost(ctx);
            b.credited = (b.credited + cost).min(b.charged + b.burst_nt);
            b.waiting > 0
        };
        if waiting {
            self.released.notify_all();
        }
    }

    /// Wakes blocked requests so they re-read the clock. Needed only with a
    /// clock that jumps (a test's [`crate::FakeClock`]); a real clock wakes
    /// them by itself.
    pub fn wake_waiters(&self) {
        // Taking the lock first means a waiter is either still before its
        // clock read (and sees the new time) or already asleep (and is
        // woken): never in between, where the wake-up would be lost.
        drop(self.lock());
        self.released.notify_all();
    }

    /// The bucket's current state.
    pub fn status(&self) -> DrlStatus {
        let now = self.clock.now_ns();
        let mut b = self.lock();
        b.refill(now);
        DrlStatus {
            rate: b.config.rate,
            burst: (b.burst_nt / NANO) as u64,
            level: (b.credited as i128 - b.charged as i128) / NANO as i128,
            waiting: b.waiting,
        }
    }
}

impl EnforcementObject for Drl {
    fn kind(&self) -> &'static str {
        "drl"
    }

    fn waiting_now(&self) -> u64 {
        u64::from(self.lock().waiting)
    }

    fn configure(&self, config: &ObjectConfig) -> Result<(), ConfigError> {
        let new = drl_settings(config)?;
        if let Some(name) = &new.shared {
            return Err(ConfigError::Invalid {
                field: "shared",
                reason: format!(
                    "{name:?}: this object's bucket is its own and cannot become shared; \
                     add an object with `shared` instead"
                ),
            });
        }
        let now = self.clock.now_ns();
        let new = {
            let mut b = self.lock();
            let new = b.config.reconfigured(new);
            validate(&new)?;
            b.refill(now); // credit so far at the old rate
            b.burst_nt = new.effective_burst() as u128 * NANO;
            b.credited = b.credited.min(b.charged + b.burst_nt);
            b.config = new.clone();
            new
        };
        self.split.store(new.split.0, Ordering::Relaxed);
        self.bytes
            .store(new.rate.unit == RateUnit::Bytes, Ordering::Relaxed);
        self.released.notify_all();
        Ok(())
    }

    fn enforce(&self, ctx: &Context, _request: &mut Request<'_>) -> Result<u64, EnforceError> {
        let arrival = self.clock.now_ns();
        let mut b = self.lock();
        b.refill(arrival);
        let cost = b.cost(ctx);
        b.charged += cost;
        let ticket = b.charged;
        if b.credited >= ticket {
            return Ok(0);
        }
        b.waiting += 1;
        let real_time = self.clock.is_real_time();
        loop {
            // The clock is read under the lock, right before deciding to
            // wait: a clock moved (and waiters woken) between the arrival
            // and here is seen, not slept through. (Found by loom,
            // tests/loom_drl.rs.)
            b.refill(self.clock.now_ns());
            b = match b.time_to(ticket) {
                Some(0) => break,
                Some(ns) if real_time => {
                    self.released
                        .wait_timeout(b, Duration::from_nanos(ns))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                _ => self.released.wait(b).unwrap_or_else(|e| e.into_inner()),
            };
        }
        b.waiting -= 1;
        drop(b);
        Ok(self.clock.now_ns().saturating_sub(arrival).max(1))
    }

    fn config(&self) -> ObjectConfig {
        ObjectConfig::Drl(self.lock().config.clone())
    }

    fn try_enforce(
        &self,
        ctx: &Context,
        _request: &mut Request<'_>,
    ) -> Result<u64, TryEnforceError> {
        self.try_acquire(ctx)
            .map(|()| 0)
            .map_err(TryEnforceError::Wait)
    }

    fn two_phase(&self) -> bool {
        true
    }

    /// Refunds the bytes a byte-rate admission charged but the call did not
    /// move (a short read, an error): see [`Drl::refund`].
    fn complete(&self, ctx: &Context, _note: u32, moved: u64) {
        self.refund(ctx, moved);
    }

    /// A rate in bytes charges every request's size.
    fn charges_bytes(&self, _ctx: &Context) -> bool {
        self.bytes.load(Ordering::Relaxed)
    }

    /// `split` ([`DrlConfig::split`]) for a non-critical request larger than
    /// it; `None` when it is 0 (off). One relaxed load.
    fn split_size(&self, ctx: &Context) -> Option<u64> {
        split_piece(self.split.load(Ordering::Relaxed), ctx)
    }
}

/// The DRL settings of `config`, which a DRL (its own bucket or a shared
/// one) adopts; any other kind is refused.
pub(super) fn drl_settings(config: &ObjectConfig) -> Result<&DrlConfig, ConfigError> {
    match config {
        ObjectConfig::Drl(c) => Ok(c),
        other => Err(ConfigError::WrongKind {
            object: "drl",
            given: other.kind(),
        }),
    }
}

/// A DRL's piece size for `ctx` with `split` set to `n`: `n` for a
/// non-critical request larger than it, `None` when `n` is 0 (off).
#[inline]
pub(super) fn split_piece(n: u64, ctx: &Context) -> Option<u64> {
    (n != 0 && ctx.size > n && !ctx.criticality.is_critical()).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::context::RequestType;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn ctx(size: u64) -> Context {
        Context::explicit(1, RequestType::WRITE, Default::default(), size)
    }

    fn drl(rate: Rate, burst: u64) -> (Drl, FakeClock) {
        let clock = FakeClock::new();
        let d = Drl::new(
            DrlConfig::new(rate).with_burst(burst),
            Arc::new(clock.clone()),
        )
        .unwrap();
        (d, clock)
    }

    #[test]
    fn starts_full_then_paces() {
        let (d, clock) = drl(Rate::bytes_per_sec(1000), 100);
        assert_eq!(d.reserve(&ctx(100)), Some(Duration::ZERO));
        assert_eq!(d.reserve(&ctx(100)), Some(Duration::from_millis(100)));
        assert_eq!(d.reserve(&ctx(50)), Some(Duration::from_millis(150)));
        clock.advance(Duration::from_millis(150));
        assert_eq!(d.status().level, 0);
        assert_eq!(d.try_acquire(&ctx(1)), Err(Duration::from_millis(1)));
    }

    #[test]
    fn split_only_larger_non_critical_requests_when_set() {
        let (d, _clock) = drl(Rate::bytes_per_sec(1 << 20), 4096);
        assert_eq!(d.split_size(&ctx(1 << 20)), None, "off by default");
        let cfg = DrlConfig::new(Rate::bytes_per_sec(1 << 20)).with_split(64 << 10);
        d.configure(&ObjectConfig::Drl(cfg.clone())).unwrap();
        assert_eq!(d.split_size(&ctx(1 << 20)), Some(64 << 10));
        assert_eq!(
            d.split_size(&ctx(64 << 10)),
            None,
            "not larger than a piece"
        );
        let critical = ctx(1 << 20).with_criticality(crate::Criticality::Critical);
        assert_eq!(d.split_size(&critical), None, "critical: never split");
        d.configure(&ObjectConfig::Drl(cfg.with_split(0))).unwrap();
        assert_eq!(d.split_size(&ctx(1 << 20)), None, "turned off again");
        let bad = DrlConfig::new(Rate::bytes_per_sec(1)).with_split(5000);
        let e = d.configure(&ObjectConfig::Drl(bad.clone())).unwrap_err();
        assert!(e.to_string().contains("multiple of 4 KiB"), "{e}");
        assert!(Drl::new(bad, Arc::new(FakeClock::new())).is_err());
    }

    #[test]
    fn max_rate_caps_every_rate_and_outlives_reconfigurations_without_it() {
        let clock = FakeClock::new();
        let cfg = DrlConfig::new(Rate::bytes_per_sec(4000))
            .with_burst(100)
            .with_max_rate(Rate::bytes_per_sec(1000));
        let d = Drl::new(cfg, Arc::new(clock.clone())).unwrap();
        assert_eq!(
            d.status().rate,
            Rate::bytes_per_sec(1000),
            "capped at creation"
        );
        assert_eq!(d.reserve(&ctx(100)), Some(Duration::ZERO));
        assert_eq!(d.reserve(&ctx(100)), Some(Duration::from_millis(100)));
        // A control plane's rule knows nothing of the ceiling: it stays.
        let rule = |r| ObjectConfig::Drl(DrlConfig::new(Rate::bytes_per_sec(r)).with_burst(100));
        d.configure(&rule(1 << 30)).unwrap();
        assert_eq!(d.status().rate, Rate::bytes_per_sec(1000));
        let ObjectConfig::Drl(c) = d.config() else {
            unreachable!()
        };
        assert_eq!(c.max_rate, Some(Rate::bytes_per_sec(1000)));
        // Lower than the ceiling: the rule's rate; 0 still pauses.
        d.configure(&rule(500)).unwrap();
        assert_eq!(d.status().rate, Rate::bytes_per_sec(500));
        d.configure(&rule(0)).unwrap();
        assert_eq!(d.status().rate, Rate::bytes_per_sec(0));
        // Given explicitly, the ceiling changes.
        let raised =
            DrlConfig::new(Rate::bytes_per_sec(1 << 30)).with_max_rate(Rate::bytes_per_sec(3000));
        d.configure(&ObjectConfig::Drl(raised)).unwrap();
        assert_eq!(d.status().rate, Rate::bytes_per_sec(3000));
        // A ceiling in another unit, or of 0, is refused, naming the field.
        for bad in [Rate::ops_per_sec(10), Rate::bytes_per_sec(0)] {
            let c = DrlConfig::new(Rate::bytes_per_sec(10)).with_max_rate(bad);
            let e = d.configure(&ObjectConfig::Drl(c.clone())).unwrap_err();
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
            assert!(Drl::new(c, Arc::new(FakeClock::new())).is_err());
        }
        assert_eq!(
            d.status().rate,
            Rate::bytes_per_sec(3000),
            "unchanged by refusals"
        );
    }

    #[test]
    fn large_requests_go_into_debt_and_are_charged_in_full() {
        let (d, clock) = drl(Rate::bytes_per_sec(1 << 20), 4096);
        // 1 MiB through a 4 KiB burst: waits (1 MiB − 4 KiB) / rate, one piece.
        let w = d.reserve(&ctx(1 << 20)).unwrap();
        let expect = ((1u128 << 20) - 4096) * NANO / (1 << 20);
        assert_eq!(w.as_nanos(), expect);
        assert!(d.status().level < 0);
        clock.advance(w);
        assert_eq!(d.status().level, 0);
    }

    #[test]
    fn zero_byte_requests_cost_the_configured_amount() {
        let clock = FakeClock::new();
        let mut cfg = DrlConfig::new(Rate::bytes_per_sec(1000)).with_burst(10);
        let d = Drl::new(cfg.clone(), Arc::new(clock.clone())).unwrap();
        for _ in 0..100 {
            assert_eq!(d.reserve(&ctx(0)), Some(Duration::ZERO));
        }
        cfg.zero_size_cost = 5;
        d.configure(&ObjectConfig::Drl(cfg)).unwrap();
        assert_eq!(d.reserve(&ctx(0)), Some(Duration::ZERO));
        assert_eq!(d.reserve(&ctx(0)), Some(Duration::ZERO));
        assert_eq!(d.reserve(&ctx(0)), Some(Duration::from_millis(5)));
    }

    #[test]
    fn ops_buckets_charge_one_token_per_request() {
        let (d, _clock) = drl(Rate::ops_per_sec(10), 2);
        assert_eq!(d.reserve(&ctx(1 << 30)), Some(Duration::ZERO));
        assert_eq!(d.reserve(&ctx(0)), Some(Duration::ZERO));
        assert_eq!(d.reserve(&ctx(7)), Some(Duration::from_millis(100)));
    }

    #[test]
    fn try_acquire_does_not_jump_the_queue() {
        let (d, clock) = drl(Rate::bytes_per_sec(1000), 100);
        assert_eq!(d.try_acquire(&ctx(60)), Ok(()));
        assert_eq!(d.try_acquire(&ctx(60)), Err(Duration::from_millis(20)));
        // A reservation queues behind; try_acquire then sees it.
        assert_eq!(d.reserve(&ctx(60)), Some(Duration::from_millis(20)));
        clock.advance(Duration::from_millis(20));
        assert_eq!(d.try_acquire(&ctx(10)), Err(Duration::from_millis(10)));
        clock.advance(Duration::from_millis(10));
        assert_eq!(d.try_acquire(&ctx(10)), Ok(()));
    }

    #[test]
    fn rate_change_applies_at_once_to_pending_time() {
        let (d, clock) = drl(Rate::bytes_per_sec(1000), 100);
        assert_eq!(d.reserve(&ctx(100)), Some(Duration::ZERO));
        clock.advance(Duration::from_millis(50)); // 50 tokens accrued at 1000/s
        d.configure(&ObjectConfig::Drl(
            DrlConfig::new(Rate::bytes_per_sec(10_000)).with_burst(100),
        ))
        .unwrap();
        // 50 more tokens at 10,000/s take 5 ms.
        assert_eq!(d.try_acquire(&ctx(100)), Err(Duration::from_millis(5)));
        d.configure(&ObjectConfig::Drl(
            DrlConfig::new(Rate::bytes_per_sec(0)).with_burst(100),
        ))
        .unwrap();
        assert_eq!(d.try_acquire(&ctx(100)), Err(Duration::MAX));
        assert_eq!(d.reserve(&ctx(100)), None);
    }

    #[test]
    fn shrinking_the_burst_drops_excess_tokens() {
        let (d, _clock) = drl(Rate::bytes_per_sec(1000), 1000);
        d.configure(&ObjectConfig::Drl(
            DrlConfig::new(Rate::bytes_per_sec(1000)).with_burst(10),
        ))
        .unwrap();
        assert_eq!(d.status().level, 10);
        assert!(d.configure(&ObjectConfig::Noop).is_err());
        let zero = DrlConfig::new(Rate::bytes_per_sec(1)).with_burst(0);
        assert!(d.configure(&ObjectConfig::Drl(zero.clone())).is_err());
        assert!(Drl::new(zero, Arc::new(FakeClock::new())).is_err());
    }

    #[test]
    fn default_burst_is_ten_milliseconds() {
        assert_eq!(
            DrlConfig::new(Rate::bytes_per_sec(100 << 20)).effective_burst(),
            (100 << 20) / 100
        );
        assert_eq!(DrlConfig::new(Rate::ops_per_sec(10)).effective_burst(), 1);
    }

    /// Waits until `n` requests are blocked in the bucket.
    fn until_waiting(d: &Drl, n: u32) {
        while d.status().waiting != n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn blocked_requests_are_released_in_fifo_order_and_follow_rate_changes() {
        let (d, clock) = drl(Rate::bytes_per_sec(100), 100);
        let d = Arc::new(d);
        assert_eq!(d.reserve(&ctx(100)), Some(Duration::ZERO)); // empty the bucket
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for i in 0..3u32 {
            let (d2, o2) = (d.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                let waited = d2.enforce(&ctx(100), &mut Request::new(None)).unwrap();
                o2.lock().unwrap().push(i);
                waited
            }));
            until_waiting(&d, i + 1);
        }
        // At 100 B/s nothing is due for a second. Raise the rate, then give
        // the waiters their tokens 100 ms (one request) at a time: exactly
        // one more request must be released at each step, in arrival order.
        d.configure(&ObjectConfig::Drl(
            DrlConfig::new(Rate::bytes_per_sec(1000)).with_burst(100),
        ))
        .unwrap();
        for released in 1..=3u32 {
            clock.advance(Duration::from_millis(100));
            d.wake_waiters();
            while order.lock().unwrap().len() < released as usize {
                std::thread::yield_now();
            }
            assert_eq!(d.status().waiting, 3 - released);
        }
        let waits: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert!(waits.iter().all(|&w| w > 0));
        assert_eq!(clock.now_ns(), 300_000_000);
    }

    #[test]
    fn blocking_enforce_with_real_clock_paces() {
        let d = Drl::new(
            DrlConfig::new(Rate::ops_per_sec(1000)).with_burst(1),
            crate::clock::monotonic(),
        )
        .unwrap();
        let start = std::time::Instant::now();
        for _ in 0..21 {
            d.enforce(&ctx(0), &mut Request::new(None)).unwrap();
        }
        // 20 tokens beyond the first at 1000/s take at least 20 ms; only a
        // lower bound is asserted (the machine may be slow, never fast).
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[derive(Debug, Clone)]
    struct Arrival {
        gap_ns: u64,
        cost: u64,
    }

    fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
        proptest::collection::vec(
            (0u64..5_000_000, 0u64..3000).prop_map(|(gap_ns, cost)| Arrival { gap_ns, cost }),
            1..120,
        )
    }

    proptest! {
        /// Over any window between two releases, released tokens never exceed
        /// rate × window + max(burst, largest request); each request is
        /// released the first nanosecond its tokens are due (never idles),
        /// and releases are in arrival order.
        #[test]
        fn never_exceeds_rate_and_never_idles(
            rate in 1u64..2_000_000,
            burst in 1u64..5000,
            reqs in arrivals(),
        ) {
            let (d, clock) = drl(Rate::bytes_per_sec(rate), burst);
            let mut releases: Vec<(u64, u64)> = Vec::new(); // (time, cost)
            let mut charged: u128 = 0;
            for a in &reqs {
                clock.advance(Duration::from_nanos(a.gap_ns));
                let now = clock.now_ns();
                let wait = d.reserve(&ctx(a.cost)).unwrap().as_nanos() as u64;
                charged += a.cost as u128 * NANO;
                let release = now + wait;
                // Never idles: one nanosecond before its release the bucket's
                // credit did not yet cover the request; at release it does.
                if wait > 0 {
                    let b = d.lock();
                    let credit_at = |t: u64| -> u128 {
                        (b.credited + rate as u128 * (t - b.last_ns) as u128)
                            .min(b.charged + b.burst_nt)
                    };
                    prop_assert!(credit_at(release) >= charged);
                    prop_assert!(credit_at(release - 1) < charged);
                }
                if let Some(&(prev, _)) = releases.last() {
                    prop_assert!(release >= prev, "FIFO order");
                }
                releases.push((release, a.cost));
            }
            let max_cost = reqs.iter().map(|a| a.cost).max().unwrap_or(0);
            // Release times are rounded up to whole nanoseconds, which may
            // shorten a window by up to 1 ns of accrual.
            let slack = burst.max(max_cost) as u128 * NANO + rate as u128;
            for i in 0..releases.len() {
                let mut sum: u128 = 0;
                for j in i..releases.len() {
                    sum += releases[j].1 as u128 * NANO;
                    let window = (releases[j].0 - releases[i].0) as u128;
                    prop_assert!(sum <= rate as u128 * window + slack,
                        "window {}..{}: {} > {}", i, j, sum, rate as u128 * window + slack);
                }
            }
        }

        /// A rate change mid-stream: tokens accrue at the old rate until the
        /// change and at the new rate after it, exactly.
        #[test]
        fn rate_changes_split_accrual_exactly(
            r1 in 1u64..1_000_000, r2 in 1u64..1_000_000,
            before in 0u64..10_000_000, after in 0u64..10_000_000,
        ) {
            let (d, clock) = drl(Rate::bytes_per_sec(r1), u64::MAX / NANO as u64);
            // Empty the bucket completely.
            let level = d.status().level as u64;
            d.reserve(&ctx(level)).unwrap();
            clock.advance(Duration::from_nanos(before));
            d.configure(&ObjectConfig::Drl(
                DrlConfig::new(Rate::bytes_per_sec(r2)).with_burst(u64::MAX / NANO as u64),
            )).unwrap();
            clock.advance(Duration::from_nanos(after));
            let expect = (r1 as u128 * before as u128 + r2 as u128 * after as u128) / NANO;
            prop_assert_eq!(d.status().level as u128, expect);
        }
    }
}
