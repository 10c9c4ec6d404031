//! Enforcement objects: the mechanisms a channel applies to its requests (§5,
//! §6.3).
//!
//! An object implements the paper's three calls: `obj_init` is its
//! constructor (for built-in kinds, [`build`] from an [`ObjectConfig`]),
//! `obj_config` is [`EnforcementObject::configure`], and `obj_enf` is
//! [`EnforcementObject::enforce`]. Objects are shared by all threads of a
//! stage and must not block one another except as their mechanism demands
//! (a rate limiter makes requests wait; a configuration change never waits
//! behind them).

pub(crate) mod drl;
mod noop;
mod priority;
pub mod shared_drl;

pub use drl::{Drl, DrlConfig, DrlStatus};
pub use noop::Noop;
pub(crate) use priority::SPLIT_REASON;
pub use priority::{Priority, PriorityConfig, PriorityStatus, SplitWhen, MAX_DEPTH, SPLIT_ALIGN};
pub use shared_drl::{install_shared_buckets, LocalBuckets, SharedBuckets, SharedDrl};

use crate::criticality::CriticalActivity;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::SharedClock;
use crate::context::Context;

/// One request as an object sees it (the paper's `r`): the caller's content,
/// if supplied, and room for new content from objects that transform data.
///
/// Objects that do not transform data never look at it; nothing is copied
/// unless an object calls [`Request::replace`].
#[derive(Debug, Default)]
pub struct Request<'a> {
    data: Option<&'a [u8]>,
    replacement: Option<Vec<u8>>,
}

impl<'a> Request<'a> {
    /// A request carrying `data` (or only its context, with `None`).
    #[inline]
    pub fn new(data: Option<&'a [u8]>) -> Self {
        Self {
            data,
            replacement: None,
        }
    }

    /// The content as it stands: the last replacement, else the caller's.
    pub fn data(&self) -> Option<&[u8]> {
        self.replacement.as_deref().or(self.data)
    }

    /// Replaces the content (compression, encryption, ...). The caller then
    /// issues the new bytes instead of its own buffer.
    pub fn replace(&mut self, data: Vec<u8>) {
        self.replacement = Some(data);
    }

    /// The new content, if an object replaced it.
    pub fn into_replacement(self) -> Option<Vec<u8>> {
        self.replacement
    }
}

/// What the stage did with a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// How long the request was held back, in nanoseconds.
    pub waited_ns: u64,
    /// New request content, for objects that transform data (compression,
    /// encryption). `None` means "unchanged": the caller uses its own buffer,
    /// which was never copied.
    pub data: Option<Vec<u8>>,
}

impl Outcome {
    /// Passed at once, content unchanged.
    pub const PASS: Outcome = Outcome {
        waited_ns: 0,
        data: None,
    };
}

/// Why an object refused a request. One pointer wide, so results on the
/// request path fit in two registers.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("object {:?} refused the request: {}", .0.object, .0.reason)]
pub struct EnforceError(Box<Refusal>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    object: String,
    reason: String,
}

impl EnforceError {
    /// A refusal by an object of kind `object`, saying why.
    pub fn new(object: impl Into<String>, reason: impl Into<String>) -> Self {
        Self(Box::new(Refusal {
            object: object.into(),
            reason: reason.into(),
        }))
    }

    /// The refusing object's kind.
    pub fn object(&self) -> &str {
        &self.0.object
    }

    /// What went wrong.
    pub fn reason(&self) -> &str {
        &self.0.reason
    }
}

impl fmt::Debug for EnforceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnforceError")
            .field("object", &self.0.object)
            .field("reason", &self.0.reason)
            .finish()
    }
}

/// Why an object could not be created or configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The new state is for another kind of object.
    #[error("cannot configure a {object} object with {given} settings")]
    WrongKind {
        /// The object's kind.
        object: &'static str,
        /// The kind of the settings given.
        given: &'static str,
    },
    /// A setting is out of range.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// A mechanism applied to requests (the paper's enforcement object).
pub trait EnforcementObject: Send + Sync + fmt::Debug {
    /// A short name of the mechanism (`"noop"`, `"drl"`).
    fn kind(&self) -> &'static str;

    /// `obj_config`: adopts a new state. Takes effect at once, also for
    /// requests already waiting (a shared bucket's waiters pay a raised rate
    /// but not a lowered one: [`shared_drl`]); never waits for requests in
    /// flight.
    fn configure(&self, config: &ObjectConfig) -> Result<(), ConfigError>;

    /// `obj_enf`: applies the mechanism to one request, blocking as long as
    /// the mechanism demands, and returns how long it held the request back
    /// (nanoseconds; 0 if not at all). Objects that transform data read
    /// [`Request::data`] and call [`Request::replace`]; others must not touch
    /// the request.
    fn enforce(&self, ctx: &Context, request: &mut Request<'_>) -> Result<u64, EnforceError>;

    /// The object's current state, as a configuration that would recreate it.
    fn config(&self) -> ObjectConfig;

    /// Non-blocking `obj_enf`: applies the mechanism only if the request can
    /// go at once; otherwise changes nothing and returns
    /// [`TryEnforceError::Wait`] with how long the caller would have to wait
    /// (`Duration::MAX`: indefinitely). The default suits objects that never
    /// wait: it calls [`EnforcementObject::enforce`].
    fn try_enforce(
        &self,
        ctx: &Context,
        request: &mut Request<'_>,
    ) -> Result<u64, TryEnforceError> {
        self.enforce(ctx, request).map_err(TryEnforceError::Refused)
    }

    /// Whether the object acts in the complete phase of two-phase requests
    /// ([`EnforcementObject::complete`]). Asked once, when the object joins a
    /// stage; objects answering `false` (the default) cost the complete
    /// phase nothing beyond the statistics.
    fn two_phase(&self) -> bool {
        false
    }

    /// Admit phase of a two-phase request ([`crate::Stage::admit`]): applies
    /// the mechanism before the request's call runs, blocking as long as the
    /// mechanism demands, with `ctx.size` the size the call asks for. Returns
    /// how long the request was held back and a note the stage hands back to
    /// [`EnforcementObject::complete`]. Default: [`EnforcementObject::enforce`]
    /// without data, note 0.
    fn admit(&self, ctx: &Context) -> Result<Admitted, EnforceError> {
        self.enforce(ctx, &mut Request::new(None))
            .map(|waited_ns| Admitted { waited_ns, note: 0 })
    }

    /// Non-blocking admit phase, for a caller that holds admitted requests of
    /// its own while it asks (the interposer keeping several pieces of one
    /// call in flight): admits the request only if it can go at once, and
    /// otherwise changes nothing and returns [`TryEnforceError::Wait`], so
    /// the caller never sleeps waiting for slots that only its own
    /// completions would free. An admission is completed like any other.
    /// Default: [`EnforcementObject::try_enforce`] without data, note 0.
    fn try_admit(&self, ctx: &Context) -> Result<Admitted, TryEnforceError> {
        self.try_enforce(ctx, &mut Request::new(None))
            .map(|waited_ns| Admitted { waited_ns, note: 0 })
    }

    /// Complete phase: the call of a request this object admitted (`ctx`
    /// and `note` as at admission) returned having moved `moved` bytes (0 on
    /// error; at most `ctx.size`). Called exactly once per successful
    /// [`EnforcementObject::admit`] or [`EnforcementObject::try_admit`],
    /// only on objects whose
    /// [`EnforcementObject::two_phase`] is `true`; must not block. Default:
    /// nothing.
    fn complete(&self, ctx: &Context, note: u32, moved: u64) {
        let _ = (ctx, note, moved);
    }

    /// The size of the pieces a layer that can split calls (the interposer,
    /// for positional reads and writes of regular files) should issue a
    /// request of `ctx` as, each admitted separately; `None` (the default):
    /// do not split. Must be cheap: it is asked before large calls.
    fn split_size(&self, ctx: &Context) -> Option<u64> {
        let _ = ctx;
        None
    }

    /// Whether admitting a request of `ctx` charges its size (a rate in
    /// bytes), so that a layer that cannot tell before a call how many bytes
    /// it will move must find that out first; `false` (the default): the
    /// size asked for only reaches the statistics, which count what the
    /// call moved. Must be cheap: it is asked before such calls.
    fn charges_bytes(&self, ctx: &Context) -> bool {
        let _ = ctx;
        false
    }

    /// Turns the requests that kernel thread `thread` has waiting in this
    /// object into critical ones (a critical thread waits for that thread:
    /// [`crate::inheritance`]), keeping their order; returns how many. Must
    /// not block beyond the object's own short locks. Default: nothing waits
    /// by class here, 0.
    fn promote_thread(&self, thread: u64) -> u32 {
        let _ = thread;
        0
    }

    /// Requests held back in this object at this moment (a gauge). A
    /// request waits in no statistic until it is admitted, so a request
    /// held for longer than a collection interval (a large one at a low
    /// rate) shows only here. Read at collection; default 0.
    fn waiting_now(&self) -> u64 {
        0
    }
}

/// What an object's admit phase returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admitted {
    /// How long the request was held back, in nanoseconds.
    pub waited_ns: u64,
    /// The object's own note about the admission (for instance, which of its
    /// slots the request took), handed back to its complete phase.
    pub note: u32,
}

/// Why a non-blocking enforce did not admit a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TryEnforceError {
    /// The request would have to wait this long; nothing was charged.
    #[error("the request would wait {0:?}")]
    Wait(Duration),
    /// The object refused the request.
    #[error(transparent)]
    Refused(#[from] EnforceError),
}

/// The state of a built-in object: what `obj_init` and `obj_config` take.
/// Unknown fields are refused, a `noop`'s too (it has none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "RawObjectConfig"
)]
pub enum ObjectConfig {
    /// A pass-through [`Noop`].
    Noop,
    /// A token-bucket [`Drl`].
    Drl(DrlConfig),
    /// A critical-first, limited-depth admission [`Priority`].
    Priority(PriorityConfig),
}

/// [`ObjectConfig`] as it is read: serde ignores `deny_unknown_fields` for
/// a unit variant of an internally tagged enum, so `{"kind": "noop",
/// "rate": "1MiB/s"}` made a pass-through object silently.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum RawObjectConfig {
    Noop(NoFields),
    Drl(DrlConfig),
    Priority(PriorityConfig),
}

/// A configuration without fields, refusing any.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

impl From<RawObjectConfig> for ObjectConfig {
    fn from(raw: RawObjectConfig) -> Self {
        match raw {
            RawObjectConfig::Noop(NoFields {}) => ObjectConfig::Noop,
            RawObjectConfig::Drl(c) => ObjectConfig::Drl(c),
            RawObjectConfig::Priority(c) => ObjectConfig::Priority(c),
        }
    }
}

impl ObjectConfig {
    /// The kind named by this configuration.
    pub fn kind(&self) -> &'static str {
        match self {
            ObjectConfig::Noop => "noop",
            ObjectConfig::Drl(_) => "drl",
            ObjectConfig::Priority(_) => "priority",
        }
    }
}

/// `obj_init`: creates a built-in object from its configuration, for a
/// stage whose clock is `clock` and whose critical requests `activity`
/// counts.
pub fn build(
    config: &ObjectConfig,
    clock: &SharedClock,
    activity: &Arc<CriticalActivity>,
) -> Result<Arc<dyn EnforcementObject>, ConfigError> {
    Ok(match config {
        ObjectConfig::Noop => Arc::new(Noop),
        ObjectConfig::Drl(c) if c.shared.is_some() => {
            Arc::new(SharedDrl::new(c.clone(), clock.clone())?)
        }
        ObjectConfig::Drl(c) => Arc::new(Drl::new(c.clone(), clock.clone())?),
        ObjectConfig::Priority(c) => {
            Arc::new(Priority::new(c.clone(), clock.clone())?.with_activity(activity.clone()))
        }
    })
}
