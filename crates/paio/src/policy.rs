//! Policy files: a stage described in TOML, the embedded default when no
//! control plane runs. The format is documented with examples in
//! `docs/policies.md`.
//!
//! Every error names the file, the line and column, and the field
//! (`channel[1].object[0].rate`), and says what was expected.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::differentiation::{Classifier, Pattern};
use crate::object::{DrlConfig, ObjectConfig};
use crate::rule::Rule;
use crate::stage::{Stage, StageBuilder};
use crate::units::{Rate, Size};

/// Largest policy file accepted.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// Why a policy could not be read or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {field}: {message}")]
pub struct PolicyError {
    /// The file name, or `<string>`.
    pub origin: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Path of the offending field (`channel[0].object[1].rate`), or `policy`.
    pub field: String,
    /// What was wrong and what was expected.
    pub message: String,
}

/// A parsed policy: the stage's name and labels, and the rules that build it.
#[derive(Debug, Clone)]
pub struct Policy {
    origin: String,
    text: String,
    /// Stage name (`[stage] name`), if given.
    pub name: Option<String>,
    /// Stage labels (`[stage.labels]`).
    pub labels: BTreeMap<String, String>,
    rules: Vec<Rule>,
    /// For each rule, where in the file it came from.
    sources: Vec<Source>,
}

#[derive(Debug, Clone)]
struct Source {
    span: Range<usize>,
    field: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    stage: StageSection,
    #[serde(default)]
    channel: Vec<ChannelSection>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StageSection {
    name: Option<String>,
    classifiers: Option<Spanned<Vec<Classifier>>>,
    default_channel: Option<Spanned<String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelSection {
    name: Spanned<String>,
    #[serde(default, rename = "match")]
    matches: Option<Spanned<OneOrMany>>,
    default_object: Option<Spanned<String>>,
    #[serde(default)]
    object: Vec<ObjectSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectSection {
    name: Spanned<String>,
    kind: Spanned<Kind>,
    rate: Option<Spanned<Rate>>,
    burst: Option<Spanned<Size>>,
    zero_size_cost: Option<Spanned<u64>>,
    #[serde(default, rename = "match")]
    matches: Option<Spanned<OneOrMany>>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Noop,
    Drl,
}

#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "a pattern table such as { request_type = \"read\" } or an array of them"
)]
enum OneOrMany {
    One(Pattern),
    Many(Vec<Pattern>),
}

impl OneOrMany {
    fn patterns(&self) -> &[Pattern] {
        match self {
            OneOrMany::One(p) => std::slice::from_ref(p),
            OneOrMany::Many(v) => v,
        }
    }
}

/// 1-based (line, column) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

impl Policy {
    /// Parses policy `text`; `origin` names it in errors (a path or
    /// `<string>`).
    pub fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let error = |span: Option<Range<usize>>, field: String, message: String| {
            let (line, column) = span.map_or((1, 1), |s| line_col(text, s.start));
            PolicyError {
                origin: origin.to_string(),
                line,
                column,
                field,
                message,
            }
        };
        if text.len() > MAX_POLICY_BYTES {
            return Err(error(
                None,
                "policy".into(),
                format!(
                    "file of {} bytes exceeds the {MAX_POLICY_BYTES} allowed",
                    text.len()
                ),
            ));
        }
        let de = toml::Deserializer::parse(text)
            .map_err(|e| error(e.span(), "policy".into(), e.message().trim().to_string()))?;
        let file: PolicyFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            let field = if field == "." || field.is_empty() {
                "policy".into()
            } else {
                field
            };
            error(inner.span(), field, inner.message().trim().to_string())
        })?;
        let mut p = Policy {
            origin: origin.to_string(),
            text: text.to_string(),
            name: file.stage.name,
            labels: file.stage.labels,
            rules: Vec::new(),
            sources: Vec::new(),
        };
        let mut push = |rule: Rule, span: Range<usize>, field: String| {
            p.rules.push(rule);
            p.sources.push(Source { span, field });
        };
        if let Some(c) = &file.stage.classifiers {
            push(
                Rule::SetClassifiers {
                    classifiers: c.get_ref().clone(),
                },
                c.span(),
                "stage.classifiers".into(),
            );
        }
        for (ci, ch) in file.channel.iter().enumerate() {
            let at = format!("channel[{ci}]");
            let channel = ch.name.get_ref().clone();
            push(
                Rule::CreateChannel {
                    name: channel.clone(),
                },
                ch.name.span(),
                format!("{at}.name"),
            );
            for (oi, obj) in ch.object.iter().enumerate() {
                let at = format!("{at}.object[{oi}]");
                let config = object_config(obj)
                    .map_err(|(span, f, m)| error(Some(span), format!("{at}.{f}"), m))?;
                let name = obj.name.get_ref().clone();
                push(
                    Rule::CreateObject {
                        channel: channel.clone(),
                        name: name.clone(),
                        config,
                    },
                    obj.name.span(),
                    format!("{at}.name"),
                );
                if let Some(m) = &obj.matches {
                    for pattern in m.get_ref().patterns() {
                        push(
                            Rule::MapObject {
                                channel: channel.clone(),
                                pattern: *pattern,
                                object: name.clone(),
                            },
                            m.span(),
                            format!("{at}.match"),
                        );
                    }
                }
            }
            if let Some(d) = &ch.default_object {
                push(
                    Rule::SetDefaultObject {
                        channel: channel.clone(),
                        object: d.get_ref().clone(),
                    },
                    d.span(),
                    format!("{at}.default_object"),
                );
            }
            if let Some(m) = &ch.matches {
                for pattern in m.get_ref().patterns() {
                    push(
                        Rule::MapChannel {
                            pattern: *pattern,
                            channel: channel.clone(),
                        },
                        m.span(),
                        format!("{at}.match"),
                    );
                }
            }
        }
        if let Some(d) = &file.stage.default_channel {
            push(
                Rule::SetDefaultChannel {
                    channel: Some(d.get_ref().clone()),
                },
                d.span(),
                "stage.default_channel".into(),
            );
        }
        Ok(p)
    }

    /// Reads and parses the policy file at `path`.
    pub fn from_file(path: &Path) -> Result<Policy, PolicyError> {
        let origin = path.display().to_string();
        let fail = |message: String| PolicyError {
            origin: origin.clone(),
            line: 1,
            column: 1,
            field: "policy".into(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        if meta.len() > MAX_POLICY_BYTES as u64 {
            return Err(fail(format!(
                "file of {} bytes exceeds the {MAX_POLICY_BYTES} allowed",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        Self::parse(&text, &origin)
    }

    /// The rules this policy applies, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Applies the policy to an existing stage, as one transaction.
    pub fn apply_to(&self, stage: &Stage) -> Result<(), PolicyError> {
        stage.try_apply_all(&self.rules).map_err(|(i, e)| {
            let src = &self.sources[i];
            let (line, column) = line_col(&self.text, src.span.start);
            PolicyError {
                origin: self.origin.clone(),
                line,
                column,
                field: src.field.clone(),
                message: e.to_string(),
            }
        })
    }

    /// A stage named by the policy (`paio` if it names none) and built from
    /// it.
    pub fn new_stage(&self) -> Result<Stage, PolicyError> {
        let name = self.name.clone().unwrap_or_else(|| "paio".into());
        self.build_stage(Stage::builder(name))
    }

    /// A stage from `builder` (its name and clock), with the policy's labels
    /// added and its rules applied.
    pub fn build_stage(&self, builder: StageBuilder) -> Result<Stage, PolicyError> {
        let mut builder = builder;
        for (k, v) in &self.labels {
            builder = builder.label(k.clone(), v.clone());
        }
        let stage = builder.build();
        self.apply_to(&stage)?;
        Ok(stage)
    }
}

fn object_config(
    obj: &ObjectSection,
) -> Result<ObjectConfig, (Range<usize>, &'static str, String)> {
    match obj.kind.get_ref() {
        Kind::Noop => {
            let stray = [
                obj.rate.as_ref().map(|r| (r.span(), "rate")),
                obj.burst.as_ref().map(|b| (b.span(), "burst")),
                obj.zero_size_cost
                    .as_ref()
                    .map(|z| (z.span(), "zero_size_cost")),
            ];
            if let Some((span, field)) = stray.into_iter().flatten().next() {
                return Err((
                    span,
                    field,
                    format!("a noop object takes no {field}; only drl objects do"),
                ));
            }
            Ok(ObjectConfig::Noop)
        }
        Kind::Drl => {
            let rate = obj.rate.as_ref().ok_or_else(|| {
                (
                    obj.kind.span(),
                    "rate",
                    "a drl object needs a rate such as \"50MiB/s\" or \"20k ops/s\"".to_string(),
                )
            })?;
            if let Some(b) = &obj.burst {
                if b.get_ref().0 == 0 {
                    return Err((b.span(), "burst", "must be at least one token".to_string()));
                }
            }
            Ok(ObjectConfig::Drl(DrlConfig {
                rate: *rate.get_ref(),
                burst: obj.burst.as_ref().map(|b| *b.get_ref()),
                zero_size_cost: obj.zero_size_cost.as_ref().map_or(0, |z| *z.get_ref()),
            }))
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy {} ({} rules)", self.origin, self.rules.len())
    }
}

impl Stage {
    /// A stage built from the policy in `text`; `origin` names it in errors.
    pub fn from_policy_str(text: &str, origin: &str) -> Result<Stage, PolicyError> {
        Policy::parse(text, origin)?.new_stage()
    }

    /// A stage built from the policy file at `path`.
    pub fn from_policy_file(path: &Path) -> Result<Stage, PolicyError> {
        Policy::from_file(path)?.new_stage()
    }
}
