//! Channels: streams of requests, each holding enforcement objects (§3.1, §5).
//!
//! A channel maps its requests to one of its objects with its own
//! differentiation patterns; requests that match none go to the channel's
//! default object, which is the built-in pass-through object
//! [`DEFAULT_OBJECT`] unless a rule chose another. A request is never dropped
//! for want of a match.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::context::Context;
use crate::differentiation::{Matcher, Pattern};
use crate::object::{EnforceError, EnforcementObject, Request, TryEnforceError};
use crate::stats::{ObjectRecorder, Sample};

/// Name of the pass-through object every channel has.
pub const DEFAULT_OBJECT: &str = "default";

/// An object with its statistics. Shared between routing-table versions, so
/// an object's state and counts survive rule changes that do not remove it.
#[derive(Debug)]
pub(crate) struct ObjectEntry {
    pub(crate) uid: u64,
    pub(crate) name: String,
    pub(crate) object: Arc<dyn EnforcementObject>,
    pub(crate) recorder: ObjectRecorder,
    /// The object is the built-in [`crate::object::Noop`], which passes every
    /// request at once: the request path applies it inline, without the
    /// indirect call. (A Noop stays a Noop: it accepts no other
    /// configuration.)
    pub(crate) noop: bool,
    /// The object has a complete phase ([`EnforcementObject::two_phase`]).
    pub(crate) two_phase: bool,
}

pub(crate) fn next_uid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl ObjectEntry {
    pub(crate) fn new(name: String, object: Arc<dyn EnforcementObject>) -> Arc<Self> {
        Arc::new(Self {
            uid: next_uid(),
            name,
            two_phase: object.two_phase(),
            object,
            recorder: ObjectRecorder::default(),
            noop: false,
        })
    }

    /// A built-in [`crate::object::Noop`] object.
    pub(crate) fn noop(name: String) -> Arc<Self> {
        Arc::new(Self {
            uid: next_uid(),
            name,
            object: Arc::new(crate::object::Noop),
            recorder: ObjectRecorder::default(),
            noop: true,
            two_phase: false,
        })
    }
}

/// A channel as the control path sees it: names, patterns, history.
#[derive(Debug, Clone)]
pub(crate) struct ChannelModel {
    pub(crate) uid: u64,
    pub(crate) name: String,
    pub(crate) objects: Vec<Arc<ObjectEntry>>,
    /// Object patterns in the order they were added; unique patterns.
    pub(crate) rules: Vec<(Pattern, String)>,
    pub(crate) default_object: String,
    /// The latest [`KEPT_REMOVED`] objects removed from the channel, kept
    /// so that a request admitted before the removal completes through its
    /// object and is counted.
    pub(crate) retired: Vec<Arc<ObjectEntry>>,
    /// The counts of objects removed before those, folded when they were
    /// freed, so the channel's totals stay exact.
    retired_before: Sample,
}

/// How many removed objects a channel (or removed channels a stage) keeps
/// whole. Each holds its recorder (a latency histogram per thread slot:
/// about 260 KiB of address space), so keeping every one let a control
/// plane that creates and removes objects grow the application's memory
/// without bound. A request still in flight through an object older than
/// this many removals when it is freed is not counted, and that object's
/// complete phase does not run (nothing else uses it any more).
pub(crate) const KEPT_REMOVED: usize = 16;

/// Appends `item` to `kept`, folding the oldest beyond [`KEPT_REMOVED`]
/// into `before` (by `sample`) and freeing it.
pub(crate) fn keep_removed<T>(
    kept: &mut Vec<T>,
    before: &mut Sample,
    item: T,
    sample: impl Fn(&T) -> Sample,
) {
    kept.push(item);
    if kept.len() > KEPT_REMOVED {
        let oldest = kept.remove(0);
        before.merge(&sample(&oldest));
    }
}

impl ChannelModel {
    pub(crate) fn new(name: String) -> Self {
        Self {
            uid: next_uid(),
            name,
            objects: vec![ObjectEntry::noop(DEFAULT_OBJECT.to_string())],
            rules: Vec::new(),
            default_object: DEFAULT_OBJECT.to_string(),
            retired: Vec::new(),
            retired_before: Sample::default(),
        }
    }

    /// Moves `entry`, just removed from the channel's objects, to the
    /// retired ones ([`keep_removed`]).
    pub(crate) fn retire(&mut self, entry: Arc<ObjectEntry>) {
        keep_removed(&mut self.retired, &mut self.retired_before, entry, |e| {
            e.recorder.sample()
        });
    }

    pub(crate) fn object_index(&self, name: &str) -> Option<usize> {
        self.objects.iter().position(|o| o.name == name)
    }

    /// The cumulative figures of every object the channel ever had.
    pub(crate) fn sample(&self) -> Sample {
        let mut total = self.retired_before.clone();
        for o in self.objects.iter().chain(&self.retired) {
            total.merge(&o.recorder.sample());
        }
        total
    }

    /// Compiles the channel for the request path.
    pub(crate) fn compile(&self) -> Channel {
        let index = |name: &str| {
            self.object_index(name)
                .expect("validated: rules name existing objects") as u32
        };
        Channel {
            name: self.name.clone(),
            objects: self.objects.clone().into_boxed_slice(),
            matcher: Matcher::compile(self.rules.iter().map(|(p, o)| (p, index(o)))),
            default_object: index(&self.default_object),
        }
    }
}

/// A channel as the request path sees it: immutable, shared by all threads.
#[derive(Debug)]
pub(crate) struct Channel {
    pub(crate) name: String,
    objects: Box<[Arc<ObjectEntry>]>,
    matcher: Matcher<u32>,
    default_object: u32,
}

impl Channel {
    /// Selects the object for `ctx` (the paper's step 4).
    #[inline]
    pub(crate) fn select_object(&self, ctx: &Context) -> &ObjectEntry {
        &self.objects[self.select_object_index(ctx) as usize]
    }

    /// The index in [`Channel::objects`] of the object for `ctx`.
    #[inline]
    pub(crate) fn select_object_index(&self, ctx: &Context) -> u32 {
        // Most channels map no object: skip the lookup entirely.
        if self.matcher.is_empty() {
            self.default_object
        } else {
            self.matcher.find(ctx).unwrap_or(self.default_object)
        }
    }

    /// The channel's objects, in creation order.
    pub(crate) fn objects(&self) -> &[Arc<ObjectEntry>] {
        &self.objects
    }

    /// Selects an object, applies it and records the request (steps 4–6) in
    /// the calling thread's counter slot `slot` ([`crate::stats`]). Returns
    /// the time waited.
    #[inline]
    pub(crate) fn enforce(
        &self,
        ctx: &Context,
        request: &mut Request<'_>,
        slot: usize,
    ) -> Result<u64, EnforceError> {
        // The body of `ObjectEntry::enforce`, written out: calling it here
        // made LLVM inline this function into `StageHandle::enforce` and
        // then stop inlining that into client loops (+3 ns per request in
        // the §9.1 micro loop).
        let entry = self.select_object(ctx);
        let result = if entry.noop {
            Ok(0)
        } else {
            entry.object.enforce(ctx, request)
        };
        entry
            .recorder
            .record_at(slot, ctx.size, *result.as_ref().unwrap_or(&0));
        result
    }

    /// Non-blocking [`Channel::enforce`]: counts the request only if admitted
    /// or refused, not when it would have to wait.
    #[inline]
    pub(crate) fn try_enforce(
        &self,
        ctx: &Context,
        request: &mut Request<'_>,
        slot: usize,
    ) -> Result<u64, TryEnforceError> {
        let entry = self.select_object(ctx);
        let result = if entry.noop {
            Ok(0)
        } else {
            entry.object.try_enforce(ctx, request)
        };
        match &result {
            Ok(waited) => entry.recorder.record_at(slot, ctx.size, *waited),
            Err(TryEnforceError::Refused(_)) => entry.recorder.record_at(slot, ctx.size, 0),
            Err(TryEnforceError::Wait(_)) => {}
        }
        result
    }
}

impl ObjectEntry {
    /// Applies the object and records the request (steps 5–6) in the calling
    /// thread's counter slot `slot`. Returns the time waited. Used by the
    /// route memo's path, which has the object without its channel.
    #[inline]
    pub(crate) fn enforce(
        &self,
        ctx: &Context,
        request: &mut Request<'_>,
        slot: usize,
    ) -> Result<u64, EnforceError> {
        let result = if self.noop {
            Ok(0)
        } else {
            self.object.enforce(ctx, request)
        };
        self.recorder
            .record_at(slot, ctx.size, *result.as_ref().unwrap_or(&0));
        result
    }
}
