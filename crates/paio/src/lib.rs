//! paio: programmable data plane stages for software-defined storage.
//!
//! A [`Stage`] sits in an application's I/O path. Each request arrives with a
//! [`Context`] (workflow, request type, request context, size); the stage's
//! differentiation picks a channel and, inside it, an enforcement object
//! ([`object::Noop`], [`object::Drl`], or your own [`EnforcementObject`]);
//! the object applies its mechanism and the request returns to its path.
//! [`Rule`]s change the stage at run time without stalling requests;
//! [`Stage::collect`] reports per-channel and per-object statistics.
//!
//! ```
//! use paio::{Context, ContextScope, RequestContext, RequestType, Stage};
//!
//! let stage = Stage::from_policy_str(r#"
//!     [[channel]]
//!     name = "background"
//!     match = { request_context = "flush" }
//!     default_object = "limit"
//!     [[channel.object]]
//!     name = "limit"
//!     kind = "drl"
//!     rate = "50MiB/s"
//! "#, "<example>").unwrap();
//!
//! let flush = RequestContext::named("flush").unwrap();
//! let _scope = ContextScope::enter(flush); // e.g. where a flush job starts
//! let outcome = stage.enforce(&Context::new(RequestType::WRITE, 4096), None).unwrap();
//! assert!(outcome.data.is_none()); // the buffer is untouched
//! let stats = stage.collect();
//! assert_eq!(stats.channels[0].counts.bytes, 4096);
//! assert_eq!(stats.channels[0].objects[1].name, "limit");
//! assert_eq!(stats.channels[0].objects[1].counts.bytes, 4096);
//! ```
//!
//! Module map, one per abstraction of the paper: [`context`], [`differentiation`],
//! [`channel`], [`object`], [`rule`], [`stage`], [`stats`], [`policy`]; plus
//! [`clock`] and [`units`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

pub mod admission;
pub mod channel;
pub mod clock;
pub mod context;
pub mod control;
pub mod criticality;
pub mod differentiation;
pub mod env;
pub mod inheritance;
pub mod object;
pub mod policy;
pub mod protocol;
pub mod rule;
pub mod stage;
pub mod stats;
mod sync;
pub mod textfile;
pub mod units;

pub use admission::{Admission, ForeignAdmission, RawAdmission};
pub use clock::{Clock, FakeClock, MonotonicClock, SharedClock};
pub use context::{
    clear_request_context, current_request_context, set_request_context, Context, ContextScope,
    FileClass, RequestContext, RequestType, WorkflowId,
};
pub use criticality::{CriticalBoard, CriticalNames, CriticalScope, Criticality};
pub use differentiation::{Classifier, Pattern};
pub use object::{
    EnforceError, EnforcementObject, ObjectConfig, Outcome, Request, SharedBuckets, TryEnforceError,
};
pub use policy::{Policy, PolicyError};
pub use rule::{Rule, RuleError};
pub use stage::{Stage, StageBuilder, StageHandle, StageInfo};
pub use stats::StageStats;
pub use units::Rate;
