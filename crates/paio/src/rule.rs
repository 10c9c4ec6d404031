//! Rules: the control interface that changes a stage (§3.1, §6.1).
//!
//! Three families, as in the paper: housekeeping rules create and remove
//! channels and objects; differentiation rules choose the classifiers and map
//! requests to channels and objects; enforcement rules change an object's
//! state. Rules are plain serde values: in JSON, an object whose `"rule"`
//! field names the operation, e.g.
//! `{"rule":"configure","channel":"bg","object":"limit","config":{"kind":"drl","rate":"50MiB/s"}}`.
//! [`crate::Stage::apply`] applies one rule atomically: it either takes
//! effect whole or fails with a [`RuleError`] and changes nothing.

use serde::{Deserialize, Serialize};

use crate::differentiation::{Classifier, Pattern};
use crate::object::{ConfigError, ObjectConfig};

/// One change to a stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum Rule {
    /// Housekeeping: a new channel, with the built-in pass-through object
    /// `default` as its default object.
    CreateChannel {
        /// Channel name, unique in the stage.
        name: String,
    },
    /// Housekeeping: removes a channel that no differentiation rule maps to.
    /// Its counts move to the stage's `removed` statistics.
    RemoveChannel {
        /// Channel name.
        name: String,
    },
    /// Housekeeping: a new enforcement object in a channel (`obj_init`).
    CreateObject {
        /// The channel.
        channel: String,
        /// Object name, unique in the channel (`default` is reserved).
        name: String,
        /// Kind and initial state.
        config: ObjectConfig,
    },
    /// Housekeeping: removes an object no rule of its channel refers to.
    RemoveObject {
        /// The channel.
        channel: String,
        /// The object.
        name: String,
    },
    /// Differentiation: the classifiers rules may use. Rejected if an
    /// existing rule uses a classifier left out.
    SetClassifiers {
        /// The classifiers that matter.
        classifiers: Vec<Classifier>,
    },
    /// Differentiation: requests matching `pattern` go to `channel`
    /// (replacing the channel of an identical pattern).
    MapChannel {
        /// Which requests.
        #[serde(default)]
        pattern: Pattern,
        /// The channel.
        channel: String,
    },
    /// Differentiation: removes the mapping of `pattern` to a channel.
    UnmapChannel {
        /// The pattern of the mapping.
        #[serde(default)]
        pattern: Pattern,
    },
    /// Differentiation: where requests matching no channel pattern go; `None`
    /// lets them pass unenforced (counted as `unmatched`).
    SetDefaultChannel {
        /// The channel, or none.
        #[serde(default)]
        channel: Option<String>,
    },
    /// Differentiation: requests of `channel` matching `pattern` go to
    /// `object`.
    MapObject {
        /// The channel.
        channel: String,
        /// Which requests.
        #[serde(default)]
        pattern: Pattern,
        /// The object.
        object: String,
    },
    /// Differentiation: removes the mapping of `pattern` in `channel`.
    UnmapObject {
        /// The channel.
        channel: String,
        /// The pattern of the mapping.
        #[serde(default)]
        pattern: Pattern,
    },
    /// Differentiation: the object that takes the channel's requests that
    /// match no object pattern.
    SetDefaultObject {
        /// The channel.
        channel: String,
        /// The object.
        object: String,
    },
    /// Enforcement: new state for an object (`obj_config`); takes effect at
    /// once, including for requests already waiting (as each kind's
    /// [`EnforcementObject::configure`](crate::object::EnforcementObject::configure)
    /// says).
    Configure {
        /// The channel.
        channel: String,
        /// The object.
        object: String,
        /// The new state; its kind must be the object's.
        config: ObjectConfig,
    },
}

/// The paper's three rule families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleFamily {
    /// `hsk_rule`.
    Housekeeping,
    /// `dif_rule`.
    Differentiation,
    /// `enf_rule`.
    Enforcement,
}

impl Rule {
    /// The family this rule belongs to.
    pub fn family(&self) -> RuleFamily {
        match self {
            Rule::CreateChannel { .. }
            | Rule::RemoveChannel { .. }
            | Rule::CreateObject { .. }
            | Rule::RemoveObject { .. } => RuleFamily::Housekeeping,
            Rule::SetClassifiers { .. }
            | Rule::MapChannel { .. }
            | Rule::UnmapChannel { .. }
            | Rule::SetDefaultChannel { .. }
            | Rule::MapObject { .. }
            | Rule::UnmapObject { .. }
            | Rule::SetDefaultObject { .. } => RuleFamily::Differentiation,
            Rule::Configure { .. } => RuleFamily::Enforcement,
        }
    }
}

/// Channels a stage may have: a `create_channel` beyond is refused. paiod
/// refuses a stage reporting more (its registration and statistics are
/// bounded by the same numbers), so a stage never grows past what its
/// control plane accepts.
pub const MAX_CHANNELS: usize = 1024;
/// Objects a channel may have, its `default` pass-through object included:
/// a `create_object` beyond is refused.
pub const MAX_OBJECTS: usize = 256;

/// Objects a stage may have over all its channels, their `default` objects
/// included: a `create_object`, or a `create_channel` (which makes its
/// `default` object), beyond is refused. paiod refuses a stage reporting
/// more, so what one stage makes paiod hold stays small (a few MB).
pub const MAX_STAGE_OBJECTS: usize = 4096;

/// Mappings (patterns) a stage may have to its channels, and a channel to
/// its objects: a `map_channel` or `map_object` with a new pattern beyond
/// is refused.
pub const MAX_MAPPINGS: usize = 1024;

/// Why a rule was rejected. The stage is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The named channel does not exist.
    #[error("no channel named {0:?}")]
    UnknownChannel(String),
    /// The named object does not exist in the channel.
    #[error("no object named {object:?} in channel {channel:?}")]
    UnknownObject {
        /// The channel.
        channel: String,
        /// The object.
        object: String,
    },
    /// A channel or object of that name exists already.
    #[error("{what} {name:?} exists already")]
    Exists {
        /// `"channel"` or `"object"`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The name is empty, too long, or reserved.
    #[error("invalid name {name:?}: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The channel or object is still referred to.
    #[error("{what} {name:?} is still used by {by}")]
    InUse {
        /// `"channel"` or `"object"`.
        what: &'static str,
        /// The name.
        name: String,
        /// The rule that uses it.
        by: String,
    },
    /// No mapping with that pattern exists.
    #[error("no mapping for pattern {0}")]
    UnknownPattern(String),
    /// The pattern uses a classifier the stage does not differentiate by.
    #[error("pattern {pattern} uses classifier {classifier}, which the stage does not differentiate by (enabled: {enabled})")]
    ClassifierDisabled {
        /// The pattern.
        pattern: String,
        /// The classifier.
        classifier: Classifier,
        /// The enabled classifiers.
        enabled: String,
    },
    /// The stage has [`MAX_CHANNELS`] channels or [`MAX_STAGE_OBJECTS`]
    /// objects, a channel [`MAX_OBJECTS`] objects, or either
    /// [`MAX_MAPPINGS`] mappings, already.
    #[error("{what} has {max} {items} already, the most it may have: remove one first")]
    TooMany {
        /// `the stage` or `channel "x"`.
        what: String,
        /// `channels`, `objects` or `mappings`.
        items: &'static str,
        /// The cap.
        max: usize,
    },
    /// The object rejected its configuration.
    #[error("object {object:?} in channel {channel:?}: {source}")]
    Config {
        /// The channel.
        channel: String,
        /// The object.
        object: String,
        /// What the object said.
        #[source]
        source: ConfigError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Rate;

    #[test]
    fn rules_round_trip_through_json() {
        let rules = vec![
            Rule::CreateChannel { name: "bg".into() },
            Rule::CreateObject {
                channel: "bg".into(),
                name: "limit".into(),
                config: ObjectConfig::Drl(crate::object::DrlConfig::new(Rate::bytes_per_sec(
                    1 << 20,
                ))),
            },
            Rule::SetClassifiers {
                classifiers: vec![Classifier::RequestType],
            },
            Rule::MapChannel {
                pattern: Pattern::ANY,
                channel: "bg".into(),
            },
            Rule::SetDefaultChannel { channel: None },
            Rule::Configure {
                channel: "bg".into(),
                object: "limit".into(),
                config: ObjectConfig::Noop,
            },
        ];
        for r in rules {
            let j = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Rule>(&j).unwrap(), r, "{j}");
        }
    }

    #[test]
    fn json_form_is_readable() {
        let r: Rule = serde_json::from_str(
            r#"{"rule":"configure","channel":"bg","object":"limit","config":{"kind":"drl","rate":"50MiB/s","burst":"1MiB"}}"#,
        )
        .unwrap();
        assert_eq!(r.family(), RuleFamily::Enforcement);
        let Rule::Configure {
            config: ObjectConfig::Drl(c),
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(c.rate, Rate::bytes_per_sec(50 << 20));
        assert_eq!(c.effective_burst(), 1 << 20);
        assert!(serde_json::from_str::<Rule>(r#"{"rule":"explode"}"#).is_err());
        assert!(
            serde_json::from_str::<Rule>(r#"{"rule":"create_channel","name":"x","extra":1}"#)
                .is_err()
        );
        assert!(serde_json::from_str::<Rule>(
            r#"{"rule":"configure","channel":"bg","object":"l","config":{"kind":"drl","rate":"1B/s","colour":1}}"#
        )
        .is_err());
        // A noop has no fields: a rate there is a mistake, not a noop.
        let e = serde_json::from_str::<Rule>(
            r#"{"rule":"create_object","channel":"bg","name":"l","config":{"kind":"noop","rate":"1MiB/s"}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `rate`"), "{e}");
        let r: Rule = serde_json::from_str(
            r#"{"rule":"create_object","channel":"bg","name":"l","config":{"kind":"noop"}}"#,
        )
        .unwrap();
        assert!(matches!(
            r,
            Rule::CreateObject {
                config: ObjectConfig::Noop,
                ..
            }
        ));
        assert_eq!(
            serde_json::to_string(&ObjectConfig::Noop).unwrap(),
            r#"{"kind":"noop"}"#
        );
    }
}
