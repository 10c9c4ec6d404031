//! Two-phase requests: admitted before their call, completed after it.
//!
//! [`Stage::admit`](crate::Stage::admit) routes a request and applies its
//! object's admit phase *before* the caller issues the real call: the object
//! may hold it back (a rate limit, a depth limit, critical requests first).
//! [`Stage::complete`](crate::Stage::complete) tells the stage the call
//! returned, with the bytes it really moved: the object's complete phase runs
//! (a rate limiter refunds bytes not moved; a priority object frees the
//! slot), and the request is counted with those bytes, its wait and the
//! call's latency (from the end of admission to completion).
//!
//! Contract: every [`Admission`] is completed exactly once, on the stage that
//! made it. The type is not `Clone`, so a completed admission cannot be
//! completed again; an admission that is dropped instead leaks what its
//! object reserved (a priority object's slot), so callers complete on every
//! path, errors included (with `moved = 0`).

use crate::context::Context;

/// [`Stage::complete`](crate::Stage::complete) was given an admission made
/// by another stage; nothing was counted or released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the admission was made by another stage; complete it on the stage that admitted it")]
pub struct ForeignAdmission;

/// A request admitted by [`Stage::admit`](crate::Stage::admit), waiting to
/// be completed. Plain data (no reference, no destructor), so it can cross
/// the C ABI as a value.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an admitted request must be completed with Stage::complete"]
pub struct Admission {
    pub(crate) ctx: Context,
    /// The stage that admitted it.
    pub(crate) stage: u64,
    /// Uid of the object that admitted it; 0 when it matched no channel.
    pub(crate) entry: u64,
    /// Where it was routed: an index into the routing table's objects, a
    /// hint checked against `entry`.
    pub(crate) route: u32,
    /// The object's note ([`crate::object::Admitted::note`]).
    pub(crate) note: u32,
    /// Whether admission reported it to the process's critical board
    /// ([`crate::criticality::CriticalBoard`]), so completion does too.
    pub(crate) on_board: bool,
    pub(crate) waited_ns: u64,
    /// The stage clock's ticks when admission ended.
    pub(crate) start_ticks: u64,
}

impl Admission {
    /// The request's context, as admitted.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// How long the stage held the request back before admitting it, in
    /// nanoseconds (0 if not at all).
    pub fn waited_ns(&self) -> u64 {
        self.waited_ns
    }
}
