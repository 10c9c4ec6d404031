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

/// An [`Admission`] taken apart into plain words, for layers that must hold
/// it where a Rust value cannot live (a C caller's ticket). Only
/// [`Admission::from_raw`] of a value that [`Admission::into_raw`] returned
/// means anything: `internal` is opaque, and a forged one can make the stage
/// release a slot or refund bytes it never reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawAdmission {
    /// The request's context, as admitted.
    pub ctx: Context,
    /// Everything else, opaque.
    pub internal: [u64; 5],
}

impl Admission {
    /// Takes the admission apart (see [`RawAdmission`]).
    pub fn into_raw(self) -> RawAdmission {
        RawAdmission {
            ctx: self.ctx,
            internal: [
                self.stage,
                self.entry,
                u64::from(self.route) | u64::from(self.note) << 32,
                self.waited_ns << 1 | u64::from(self.on_board),
                self.start_ticks,
            ],
        }
    }

    /// Puts back an admission that [`Admission::into_raw`] took apart, to be
    /// completed exactly once.
    pub fn from_raw(raw: RawAdmission) -> Self {
        let [stage, entry, route_note, waited, start_ticks] = raw.internal;
        Self {
            ctx: raw.ctx,
            stage,
            entry,
            route: route_note as u32,
            note: (route_note >> 32) as u32,
            on_board: waited & 1 != 0,
            waited_ns: waited >> 1,
            start_ticks,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{RequestContext, RequestType};

    #[test]
    fn raw_round_trip_keeps_every_field() {
        let a = Admission {
            ctx: Context::explicit(7, RequestType::WRITE, RequestContext::NONE, 4096),
            stage: 3,
            entry: u64::MAX - 1,
            route: 0xdead_beef,
            note: 0x8000_0001,
            on_board: true,
            waited_ns: (1 << 62) + 5,
            start_ticks: 42,
        };
        let b = Admission {
            ctx: a.ctx,
            stage: a.stage,
            entry: a.entry,
            route: a.route,
            note: a.note,
            on_board: a.on_board,
            waited_ns: a.waited_ns,
            start_ticks: a.start_ticks,
        };
        assert_eq!(Admission::from_raw(a.into_raw()), b);
    }
}
