//! Policy files: a stage described in TOML, the embedded default when no
//! control plane runs. The format is documented with examples in
//! `docs/policies.md`.
//!
//! Every error names the file, the line and column, and the field
//! (`channel[1].object[0].rate`), and says what was expected.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::context::RequestType;
use crate::criticality::{CriticalNames, DirtyLimits};
use crate::differentiation::{Classifier, Pattern};
use crate::object::{
    ConfigError, DrlConfig, ObjectConfig, PriorityConfig, SplitWhen, SPLIT_ALIGN, SPLIT_REASON,
};
use crate::rule::Rule;
use crate::stage::{Stage, StageBuilder};
use crate::units::{HumanDuration, Rate, Size};

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
    /// Threads and processes critical by name (`[criticality]`), applied by
    /// the layer that sees names (the interposer).
    pub critical_names: CriticalNames,
    /// Whether a critical thread that blocks on a lock lends the holder its
    /// criticality (`[criticality] inherit`, default `true`), applied by the
    /// layer that sees locks (the interposer; [`crate::inheritance`]).
    pub inherit: bool,
    /// The bound on non-critical writers' dirty data (`[criticality]
    /// dirty_per_file`, `dirty_per_process`; default none), applied by the
    /// interposer.
    pub dirty: DirtyLimits,
    /// How recently a thread must have signalled a condition variable to be
    /// lent criticality by a critical thread that waits on it
    /// (`[criticality] helper_window`, default 100 ms; 0 turns helper
    /// inference off). Longer also lends to threads that help rarely (a
    /// flusher woken every few hundred ms) and to threads that signalled
    /// once long ago and no longer help; shorter lends only to helpers
    /// that signal often.
    pub helper_window: Duration,
    rules: Vec<Rule>,
    /// For each rule, where in the file it came from.
    sources: Vec<Source>,
    /// A channel, object or pattern of the file that no request can reach
    /// ([`check_reachable`]): refused when the policy is applied.
    unreachable: Option<PolicyError>,
}

#[derive(Debug, Clone)]
struct Source {
    span: Range<usize>,
    field: String,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a policy: a [stage] table, a [criticality] table and [[channel]] tables"
)]
struct PolicyFile {
    #[serde(default)]
    stage: StageSection,
    criticality: Option<Spanned<CriticalitySection>>,
    #[serde(default)]
    channel: Vec<ChannelSection>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a [stage] table with name, classifiers, default_channel, labels and request_types"
)]
struct StageSection {
    name: Option<String>,
    /// Custom request types the policy's patterns may name (a name that is
    /// neither built in nor declared is refused: most are typos).
    #[serde(default)]
    request_types: Vec<String>,
    classifiers: Option<Spanned<Vec<Classifier>>>,
    default_channel: Option<Spanned<String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [criticality] table with processes and threads (lists of names), inherit (true or false), helper_window (a duration), dirty_per_file and dirty_per_process (sizes), dirty_overlap (true or false)"
)]
struct CriticalitySection {
    #[serde(default)]
    processes: Vec<String>,
    #[serde(default)]
    threads: Vec<String>,
    #[serde(default = "default_inherit")]
    inherit: bool,
    dirty_per_file: Option<Spanned<Size>>,
    dirty_per_process: Option<Spanned<Size>>,
    dirty_overlap: Option<Spanned<bool>>,
    helper_window: Option<HumanDuration>,
}

fn default_inherit() -> bool {
    true
}

/// [`Policy::helper_window`]'s default.
const DEFAULT_HELPER_WINDOW: Duration = Duration::from_millis(100);

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [[channel]] table with name, match, default_object and object"
)]
struct ChannelSection {
    name: Spanned<String>,
    #[serde(default, rename = "match")]
    matches: Option<Spanned<OneOrMany>>,
    default_object: Option<Spanned<String>>,
    #[serde(default)]
    object: Vec<ObjectSection>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [[channel.object]] table with name, kind, its settings and match"
)]
struct ObjectSection {
    name: Spanned<String>,
    kind: Spanned<Kind>,
    rate: Option<Spanned<Rate>>,
    rate_critical: Option<Spanned<bool>>,
    burst: Option<Spanned<Size>>,
    zero_size_cost: Option<Spanned<u64>>,
    depth: Option<Spanned<u32>>,
    busy_depth: Option<Spanned<u32>>,
    critical_depth: Option<Spanned<u32>>,
    shared_busy_depth: Option<Spanned<u32>>,
    window: Option<Spanned<HumanDuration>>,
    starvation: Option<Spanned<HumanDuration>>,
    split: Option<Spanned<Size>>,
    split_when: Option<Spanned<SplitWhen>>,
    shared: Option<Spanned<String>>,
    max_rate: Option<Spanned<Rate>>,
    #[serde(default, rename = "match")]
    matches: Option<Spanned<OneOrMany>>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Noop,
    Drl,
    Priority,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Noop => "noop",
            Kind::Drl => "drl",
            Kind::Priority => "priority",
        }
    }

    /// The settings an object of this kind takes.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Noop => &[],
            Kind::Drl => &[
                "rate",
                "burst",
                "zero_size_cost",
                "split",
                "shared",
                "max_rate",
            ],
            Kind::Priority => &[
                "depth",
                "busy_depth",
                "critical_depth",
                "shared_busy_depth",
                "window",
                "starvation",
                "rate",
                "rate_critical",
                "burst",
                "split",
                "split_when",
            ],
        }
    }
}

const KINDS: [Kind; 3] = [Kind::Noop, Kind::Drl, Kind::Priority];

/// Refuses a pattern whose request type is neither built in nor in
/// `declared`, suggesting the nearest built-in name.
fn check_request_type(pattern: &Pattern, declared: &[String]) -> Result<(), String> {
    let Some(t) = pattern.request_type else {
        return Ok(());
    };
    let name = t.name();
    if t.is_builtin() || declared.contains(&name) {
        return Ok(());
    }
    let nearest = RequestType::builtin_names()
        .map(|b| (edit_distance(&name, b), b))
        .min()
        .filter(|(d, _)| *d <= 2)
        .map(|(_, b)| format!(" (did you mean {b:?}?)"))
        .unwrap_or_default();
    let all: Vec<&str> = RequestType::builtin_names().collect();
    Err(format!(
        "unknown request type {name:?}{nearest}; the built-in types are {}; a custom type \
         must be declared: [stage] request_types = [{name:?}]",
        all.join(", ")
    ))
}

/// Levenshtein distance between `a` and `b` (by characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// A `match` value: one pattern table, or an array of them (each with its
/// own span, so errors point at the element).
///
/// Deserialized by hand rather than as an untagged enum, so that an error
/// inside a pattern (an unknown classifier, an empty name) is reported as
/// such instead of as "did not match any variant".
enum OneOrMany {
    One(Pattern),
    Many(Vec<Spanned<Pattern>>),
}

const PATTERN_EXPECTED: &str =
    "a pattern table such as { request_type = \"read\" } or an array of them";

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(PATTERN_EXPECTED)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OneOrMany, A::Error> {
                Pattern::deserialize(MapAccessDeserializer::new(map)).map(OneOrMany::One)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrMany, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(OneOrMany::Many)
            }
        }
        d.deserialize_any(V)
    }
}

impl OneOrMany {
    /// Each pattern with its span and its field suffix (`match` or
    /// `match[i]`); `whole` is the span of the entire value.
    fn patterns(&self, whole: Range<usize>) -> Vec<(Pattern, Range<usize>, String)> {
        match self {
            OneOrMany::One(p) => vec![(*p, whole, "match".to_string())],
            OneOrMany::Many(v) => v
                .iter()
                .enumerate()
                .map(|(i, p)| (*p.get_ref(), p.span(), format!("match[{i}]")))
                .collect(),
        }
    }
}

/// A serde path as users write it: `toml::Spanned` adds an internal
/// `$__serde_spanned_private_value` segment to every spanned field, which is
/// dropped here (`channel[0].match.$__serde_spanned_private_value[1]` →
/// `channel[0].match[1]`); the document itself is named `root`. Shared by
/// every TOML format of the project (policies, paiod's configuration).
pub fn field_path(path: &str, root: &str) -> String {
    let cleaned = path.replace(".$__serde_spanned_private_value", "");
    if cleaned == "." || cleaned.is_empty() {
        root.to_string()
    } else {
        cleaned
    }
}

fn clean_path(path: &str) -> String {
    field_path(path, "policy")
}

/// 1-based (line, column, in characters) of byte `offset` in `text`; an
/// offset past the end counts as the end.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
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
                    "a policy of {} bytes exceeds the {MAX_POLICY_BYTES} allowed",
                    text.len()
                ),
            ));
        }
        let de = toml::Deserializer::parse(text)
            .map_err(|e| error(e.span(), "policy".into(), e.message().trim().to_string()))?;
        let file: PolicyFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = clean_path(&e.path().to_string());
            let inner = e.into_inner();
            error(inner.span(), field, inner.message().trim().to_string())
        })?;
        let (critical_names, inherit, dirty, helper_window) = match file.criticality {
            Some(c) => {
                let span = c.span();
                let c = c.into_inner();
                let names = CriticalNames::new(c.processes, c.threads)
                    .map_err(|e| error(Some(span), "criticality".into(), e.to_string()))?;
                let bound = |field: &str, v: Option<Spanned<Size>>| {
                    match v {
                    Some(v) if v.get_ref().0 < DirtyLimits::MIN => Err(error(
                        Some(v.span()),
                        format!("criticality.{field}"),
                        format!(
                            "must be at least 64 KiB (smaller would write back every few pages); omit it for no bound, got {} bytes",
                            v.get_ref().0
                        ),
                    )),
                    v => Ok(v.map(|v| v.into_inner().0)),
                }
                };
                let per_file = bound("dirty_per_file", c.dirty_per_file)?;
                let per_process = bound("dirty_per_process", c.dirty_per_process)?;
                let mut dirty = DirtyLimits {
                    per_file,
                    per_process,
                    // A bound overlaps its write-backs unless told otherwise.
                    overlap: per_file.is_some() || per_process.is_some(),
                };
                if let Some(o) = c.dirty_overlap {
                    if !dirty.is_on() {
                        return Err(error(
                            Some(o.span()),
                            "criticality.dirty_overlap".into(),
                            "applies to the dirty-data bound, and none is set: add dirty_per_file or dirty_per_process, or remove dirty_overlap".into(),
                        ));
                    }
                    dirty.overlap = o.into_inner();
                }
                let window = c.helper_window.map_or(DEFAULT_HELPER_WINDOW, |w| w.0);
                (names, c.inherit, dirty, window)
            }
            None => (
                CriticalNames::default(),
                true,
                DirtyLimits::default(),
                DEFAULT_HELPER_WINDOW,
            ),
        };
        let mut p = Policy {
            origin: origin.to_string(),
            text: text.to_string(),
            name: file.stage.name,
            labels: file.stage.labels,
            critical_names,
            inherit,
            dirty,
            helper_window,
            rules: Vec::new(),
            sources: Vec::new(),
            unreachable: check_reachable(&file.channel, &file.stage.default_channel, error).err(),
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
        // Patterns seen so far, to reject one pattern given two targets (as
        // rules, the later would silently replace the earlier).
        let mut channel_patterns = HashMap::new();
        for (ci, ch) in file.channel.iter().enumerate() {
            let at = format!("channel[{ci}]");
            let mut object_patterns = HashMap::new();
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
                    for (pattern, span, f) in m.get_ref().patterns(m.span()) {
                        let field = format!("{at}.{f}");
                        check_request_type(&pattern, &file.stage.request_types).map_err(|m| {
                            error(Some(span.clone()), format!("{field}.request_type"), m)
                        })?;
                        claim(&mut object_patterns, pattern, &name, &field, "object")
                            .map_err(|m| error(Some(span.clone()), field.clone(), m))?;
                        push(
                            Rule::MapObject {
                                channel: channel.clone(),
                                pattern,
                                object: name.clone(),
                            },
                            span,
                            field,
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
                for (pattern, span, f) in m.get_ref().patterns(m.span()) {
                    let field = format!("{at}.{f}");
                    check_request_type(&pattern, &file.stage.request_types).map_err(|m| {
                        error(Some(span.clone()), format!("{field}.request_type"), m)
                    })?;
                    claim(&mut channel_patterns, pattern, &channel, &field, "channel")
                        .map_err(|m| error(Some(span.clone()), field.clone(), m))?;
                    push(
                        Rule::MapChannel {
                            pattern,
                            channel: channel.clone(),
                        },
                        span,
                        field,
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

    /// A policy of `rules`, applied in order, naming its stage `name`, with
    /// no labels and every `[criticality]` setting at its default: what
    /// [`Policy::parse`] gives for a file with only these channels, without
    /// parsing (a program that builds its policy in code, or a default
    /// built on every process start). Errors name the rule (`rule[2]`).
    pub fn from_rules(name: Option<String>, rules: Vec<Rule>) -> Policy {
        let sources = (0..rules.len())
            .map(|i| Source {
                span: 0..0,
                field: format!("rule[{i}]"),
            })
            .collect();
        Policy {
            origin: "<rules>".to_string(),
            text: String::new(),
            name,
            labels: BTreeMap::new(),
            critical_names: CriticalNames::default(),
            inherit: true,
            dirty: DirtyLimits::default(),
            helper_window: DEFAULT_HELPER_WINDOW,
            rules,
            sources,
            unreachable: None,
        }
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
        let text = crate::textfile::read_bounded(path, MAX_POLICY_BYTES)
            .map_err(|e| fail(e.to_string()))?;
        Self::parse(&text, &origin)
    }

    /// The rules this policy applies, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Applies the policy to an existing stage, as one transaction.
    pub fn apply_to(&self, stage: &Stage) -> Result<(), PolicyError> {
        if let Some(e) = &self.unreachable {
            return Err(e.clone());
        }
        self.apply_rules(stage)
    }

    /// The rules applied to `stage`, as one transaction.
    fn apply_rules(&self, stage: &Stage) -> Result<(), PolicyError> {
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
        self.build_stage(self.stage_builder())
    }

    /// A builder for this policy's stage: its `[stage] name`, else `"paio"`
    /// (what [`Policy::new_stage`] builds with), for a caller that sets more,
    /// such as the clock, before [`Policy::build_stage`].
    pub fn stage_builder(&self) -> StageBuilder {
        Stage::builder(self.name.clone().unwrap_or_else(|| "paio".into()))
    }

    /// A stage from `builder` (its name and clock), with the policy's labels
    /// added and its rules applied.
    pub fn build_stage(&self, builder: StageBuilder) -> Result<Stage, PolicyError> {
        let mut builder = builder;
        for (k, v) in &self.labels {
            builder = builder.label(k.clone(), v.clone());
        }
        let stage = builder.build();
        // The rules first: a name given twice or a default naming nothing
        // says more than "unreachable" would.
        self.apply_rules(&stage)?;
        match &self.unreachable {
            Some(e) => Err(e.clone()),
            None => Ok(stage),
        }
    }
}

/// Refuses a channel or an object that no request can reach: it has no
/// `match` and is not the default its parent names, so a limit written that
/// way would limit nothing, silently.
fn check_reachable(
    all: &[ChannelSection],
    default_channel: &Option<Spanned<String>>,
    error: impl Fn(Option<Range<usize>>, String, String) -> PolicyError,
) -> Result<(), PolicyError> {
    let is_default =
        |d: &Option<Spanned<String>>, name: &str| d.as_ref().is_some_and(|d| d.get_ref() == name);
    for (ci, ch) in all.iter().enumerate() {
        let channel = ch.name.get_ref();
        if ch.matches.is_none() && !is_default(default_channel, channel) {
            return Err(error(
                Some(ch.name.span()),
                format!("channel[{ci}].name"),
                format!(
                    "channel {channel:?} would receive no request: it has no `match` and is not \
                     the stage's default_channel; add `default_channel = {channel:?}` to [stage], \
                     or a `match` to the channel"
                ),
            ));
        }
        // The requests a channel other than the default gets all fit one of
        // its patterns; the default channel may get any.
        let takes: Option<Vec<Pattern>> = match &ch.matches {
            Some(m) if !is_default(default_channel, channel) => Some(
                m.get_ref()
                    .patterns(m.span())
                    .into_iter()
                    .map(|(p, ..)| p)
                    .collect(),
            ),
            _ => None,
        };
        for (oi, obj) in ch.object.iter().enumerate() {
            let object = obj.name.get_ref();
            if let (Some(takes), Some(m)) = (&takes, &obj.matches) {
                for (pattern, span, f) in m.get_ref().patterns(m.span()) {
                    if !takes.iter().any(|t| t.overlaps(&pattern)) {
                        let shown: Vec<String> = takes.iter().map(|t| t.to_string()).collect();
                        return Err(error(
                            Some(span),
                            format!("channel[{ci}].object[{oi}].{f}"),
                            format!(
                                "pattern {pattern} of object {object:?} fits no request channel \
                                 {channel:?} gets: the channel takes only requests fitting {}; \
                                 change the pattern, or move the object to a channel whose \
                                 requests it fits",
                                shown.join(" or ")
                            ),
                        ));
                    }
                }
            }
            if obj.matches.is_none() && !is_default(&ch.default_object, object) {
                let instead = ch.default_object.as_ref().map_or_else(
                    || "the built-in pass-through object \"default\"".to_string(),
                    |d| format!("{:?}", d.get_ref()),
                );
                return Err(error(
                    Some(obj.name.span()),
                    format!("channel[{ci}].object[{oi}].name"),
                    format!(
                        "object {object:?} would receive no request: it has no `match` and is \
                         not channel {channel:?}'s default_object (requests that fit no \
                         object's pattern go to {instead}); add `default_object = {object:?}` \
                         to the channel, or a `match` to the object"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Records that `field` sends `pattern` to `target` (a `what`); fails if an
/// earlier field sent the same pattern elsewhere. Repeating a pattern for the
/// same target is harmless and allowed.
fn claim(
    seen: &mut HashMap<Pattern, (String, String)>,
    pattern: Pattern,
    target: &str,
    field: &str,
    what: &str,
) -> Result<(), String> {
    match seen.get(&pattern) {
        Some((earlier, _)) if earlier == target => Ok(()),
        Some((earlier, at)) => Err(format!(
            "pattern {pattern} already sends requests to {what} {earlier:?} ({at}); \
             a pattern can lead to only one {what}"
        )),
        None => {
            seen.insert(pattern, (target.to_string(), field.to_string()));
            Ok(())
        }
    }
}

fn object_config(
    obj: &ObjectSection,
) -> Result<ObjectConfig, (Range<usize>, &'static str, String)> {
    let kind = *obj.kind.get_ref();
    let given = [
        obj.rate.as_ref().map(|v| (v.span(), "rate")),
        obj.rate_critical
            .as_ref()
            .map(|v| (v.span(), "rate_critical")),
        obj.burst.as_ref().map(|v| (v.span(), "burst")),
        obj.zero_size_cost
            .as_ref()
            .map(|v| (v.span(), "zero_size_cost")),
        obj.depth.as_ref().map(|v| (v.span(), "depth")),
        obj.busy_depth.as_ref().map(|v| (v.span(), "busy_depth")),
        obj.critical_depth
            .as_ref()
            .map(|v| (v.span(), "critical_depth")),
        obj.shared_busy_depth
            .as_ref()
            .map(|v| (v.span(), "shared_busy_depth")),
        obj.window.as_ref().map(|v| (v.span(), "window")),
        obj.starvation.as_ref().map(|v| (v.span(), "starvation")),
        obj.split.as_ref().map(|v| (v.span(), "split")),
        obj.split_when.as_ref().map(|v| (v.span(), "split_when")),
        obj.shared.as_ref().map(|v| (v.span(), "shared")),
        obj.max_rate.as_ref().map(|v| (v.span(), "max_rate")),
    ];
    if let Some((span, field)) = given
        .iter()
        .flatten()
        .find(|(_, f)| !kind.fields().contains(f))
        .cloned()
    {
        let takers: Vec<&str> = KINDS
            .iter()
            .filter(|k| k.fields().contains(&field))
            .map(|k| k.name())
            .collect();
        return Err((
            span,
            field,
            format!(
                "a {} object takes no {field}; only {} objects do",
                kind.name(),
                takers.join(" and ")
            ),
        ));
    }
    match kind {
        Kind::Noop => Ok(ObjectConfig::Noop),
        Kind::Priority => {
            let d = PriorityConfig::default();
            let config = PriorityConfig {
                depth: obj.depth.as_ref().map_or(d.depth, |v| *v.get_ref()),
                busy_depth: obj
                    .busy_depth
                    .as_ref()
                    .map_or(d.busy_depth, |v| *v.get_ref()),
                critical_depth: obj.critical_depth.as_ref().map(|v| *v.get_ref()),
                shared_busy_depth: obj.shared_busy_depth.as_ref().map(|v| *v.get_ref()),
                window: obj.window.as_ref().map_or(d.window, |v| *v.get_ref()),
                starvation: obj
                    .starvation
                    .as_ref()
                    .map_or(d.starvation, |v| *v.get_ref()),
                rate: obj.rate.as_ref().map(|v| *v.get_ref()),
                rate_critical: obj.rate_critical.as_ref().is_some_and(|v| *v.get_ref()),
                burst: obj.burst.as_ref().map(|v| *v.get_ref()),
                split: obj.split.as_ref().map_or(d.split, |v| *v.get_ref()),
                split_when: obj
                    .split_when
                    .as_ref()
                    .map_or(d.split_when, |v| *v.get_ref()),
            };
            config.validate().map_err(|e| {
                let ConfigError::Invalid { field, reason } = e else {
                    unreachable!("validate reports only invalid settings")
                };
                let span = given
                    .iter()
                    .flatten()
                    .find(|(_, f)| *f == field)
                    .map_or(obj.kind.span(), |(s, _)| s.clone());
                (span, field, reason)
            })?;
            Ok(ObjectConfig::Priority(config))
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
            if let Some(n) = &obj.split {
                if n.get_ref().0 % SPLIT_ALIGN != 0 {
                    return Err((n.span(), "split", SPLIT_REASON.to_string()));
                }
            }
            let config = DrlConfig {
                rate: *rate.get_ref(),
                burst: obj.burst.as_ref().map(|b| *b.get_ref()),
                zero_size_cost: obj.zero_size_cost.as_ref().map_or(0, |z| *z.get_ref()),
                split: obj.split.as_ref().map_or(Size(0), |n| *n.get_ref()),
                shared: obj.shared.as_ref().map(|n| n.get_ref().clone()),
                max_rate: obj.max_rate.as_ref().map(|r| *r.get_ref()),
            };
            crate::object::drl::validate(&config).map_err(|e| {
                let ConfigError::Invalid { field, reason } = e else {
                    unreachable!("validate reports only invalid settings")
                };
                let span = match field {
                    "max_rate" => obj.max_rate.as_ref().map_or(rate.span(), |r| r.span()),
                    _ => obj.kind.span(),
                };
                (span, field, reason)
            })?;
            crate::object::shared_drl::validate_shared(&config).map_err(|e| {
                let ConfigError::Invalid { field, reason } = e else {
                    unreachable!("validate_shared reports only invalid settings")
                };
                let span = match field {
                    "rate" => rate.span(),
                    _ => obj.shared.as_ref().map_or(obj.kind.span(), |n| n.span()),
                };
                (span, field, reason)
            })?;
            Ok(ObjectConfig::Drl(config))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Context, RequestContext, RequestType};
    use crate::units::RateUnit;

    fn rc(name: &str) -> RequestContext {
        RequestContext::named(name).unwrap()
    }

    fn route(stage: &Stage, w: u64, t: RequestType, c: RequestContext) -> Option<(String, String)> {
        stage.route(&Context::explicit(w, t, c, 4096))
    }

    fn to(channel: &str, object: &str) -> Option<(String, String)> {
        Some((channel.to_string(), object.to_string()))
    }

    const FULL: &str = r#"
# A stage using every section and key of the format.
[stage]
name = "full"
classifiers = ["workflow", "request_type", "request_context"]
default_channel = "fg"

[stage.labels]
job = "train1"
tier = "gold"

[[channel]]
name = "bg"
match = { request_context = "pt-flush" }   # one table
default_object = "slow"

[[channel.object]]
name = "slow"
kind = "drl"
rate = "50MiB/s"
burst = "1MiB"
zero_size_cost = 4096

[[channel.object]]
name = "reads"
kind = "drl"
rate = "2k ops/s"
match = { request_type = "read" }

[[channel]]
name = "compaction"
match = [{ request_context = "pt-compaction" }, { workflow = 7, request_type = "write" }]

[[channel.object]]
name = "pass"
kind = "noop"
match = [{ request_type = "write" }, { request_type = "fsync" }]

[[channel.object]]
name = "table-rate"
kind = "drl"
rate = { ops_per_sec = 100 }
burst = 4
match = { request_type = "read" }

[[channel]]
name = "fg"
"#;

    #[test]
    fn unknown_request_types_are_refused_with_a_suggestion_unless_declared() {
        let e = Policy::parse(
            "[[channel]]\nname = \"r\"\nmatch = { request_type = \"reed\" }\n",
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (3, "channel[0].match.request_type"),
            "{e}"
        );
        assert!(
            e.message
                .contains("unknown request type \"reed\" (did you mean \"read\"?)"),
            "{e}"
        );
        assert!(
            e.message.contains("[stage] request_types = [\"reed\"]"),
            "{e}"
        );
        // In an object's match, in an array, and with no near name.
        let e = Policy::parse(
            "[[channel]]\nname = \"r\"\n[[channel.object]]\nname = \"o\"\nkind = \"noop\"\n\
             match = [{ request_type = \"read\" }, { request_type = \"checkpoint\" }]\n",
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(e.field, "channel[0].object[0].match[1].request_type", "{e}");
        assert!(!e.message.contains("did you mean"), "{e}");
        // Declared: accepted and routed.
        let stage = Stage::from_policy_str(
            "[stage]\nrequest_types = [\"checkpoint\"]\n\
             [[channel]]\nname = \"ck\"\nmatch = { request_type = \"checkpoint\" }\n",
            "t.toml",
        )
        .unwrap();
        let ctx = crate::Context::new(crate::RequestType::named("checkpoint").unwrap(), 1);
        assert_eq!(stage.route(&ctx).map(|(c, _)| c).as_deref(), Some("ck"));
        assert_eq!(edit_distance("reed", "read"), 1);
        assert_eq!(edit_distance("", "stat"), 4);
        assert_eq!(edit_distance("fsnyc", "fsync"), 2);
    }

    #[test]
    fn full_policy_routes_as_written() {
        let stage = Stage::from_policy_str(FULL, "full.toml").unwrap();
        let (flush, compaction) = (rc("pt-flush"), rc("pt-compaction"));
        let none = RequestContext::NONE;
        use RequestType as T;
        // Channel `bg`: reads go to `reads`, the rest to its default `slow`.
        assert_eq!(route(&stage, 1, T::WRITE, flush), to("bg", "slow"));
        assert_eq!(route(&stage, 1, T::OPEN, flush), to("bg", "slow"));
        assert_eq!(route(&stage, 1, T::READ, flush), to("bg", "reads"));
        // Channel `compaction`, matched by either array element; objects not
        // matched go to the built-in `default`.
        assert_eq!(
            route(&stage, 1, T::WRITE, compaction),
            to("compaction", "pass")
        );
        assert_eq!(
            route(&stage, 1, T::FSYNC, compaction),
            to("compaction", "pass")
        );
        assert_eq!(
            route(&stage, 1, T::READ, compaction),
            to("compaction", "table-rate")
        );
        assert_eq!(
            route(&stage, 1, T::STAT, compaction),
            to("compaction", "default")
        );
        assert_eq!(route(&stage, 7, T::WRITE, none), to("compaction", "pass"));
        // Two classifiers (workflow + type) beat one (request context).
        assert_eq!(route(&stage, 7, T::WRITE, flush), to("compaction", "pass"));
        // Everything else: the default channel.
        assert_eq!(route(&stage, 7, T::READ, none), to("fg", "default"));
        assert_eq!(route(&stage, 2, T::WRITE, none), to("fg", "default"));

        let info = stage.info();
        assert_eq!(info.identity.name, "full");
        assert_eq!(info.identity.labels.len(), 2);
        assert_eq!(info.identity.labels["job"], "train1");
        assert_eq!(info.identity.labels["tier"], "gold");
        assert_eq!(
            info.classifiers,
            [
                Classifier::Workflow,
                Classifier::RequestType,
                Classifier::RequestContext
            ]
        );
        assert_eq!(info.default_channel.as_deref(), Some("fg"));
        let names: Vec<&str> = info.channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bg", "compaction", "fg"]);
        let pat = |w: Option<u64>, t: Option<RequestType>, c: Option<RequestContext>| Pattern {
            workflow: w,
            request_type: t,
            request_context: c,
            file_class: None,
            criticality: None,
        };
        assert_eq!(
            info.channel_rules,
            vec![
                (pat(None, None, Some(flush)), "bg".to_string()),
                (pat(None, None, Some(compaction)), "compaction".to_string()),
                (pat(Some(7), Some(T::WRITE), None), "compaction".to_string()),
            ]
        );

        let bg = &info.channels[0];
        assert_eq!(bg.default_object, "slow");
        let objects: Vec<(&str, &str)> = bg
            .objects
            .iter()
            .map(|o| (o.name.as_str(), o.kind.as_str()))
            .collect();
        assert_eq!(
            objects,
            [("default", "noop"), ("slow", "drl"), ("reads", "drl")]
        );
        assert_eq!(
            bg.objects[1].config,
            Some(ObjectConfig::Drl(DrlConfig {
                rate: Rate::bytes_per_sec(50 << 20),
                burst: Some(Size(1 << 20)),
                zero_size_cost: 4096,
                split: Size(0),
                shared: None,
                max_rate: None,
            }))
        );
        assert_eq!(
            bg.objects[2].config,
            Some(ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(2000))))
        );
        assert_eq!(
            bg.object_rules,
            vec![(pat(None, Some(T::READ), None), "reads".into())]
        );

        let cp = &info.channels[1];
        assert_eq!(cp.default_object, "default");
        assert_eq!(cp.objects[1].config, Some(ObjectConfig::Noop));
        assert_eq!(
            cp.objects[2].config,
            Some(ObjectConfig::Drl(DrlConfig {
                rate: Rate::ops_per_sec(100),
                burst: Some(Size(4)),
                zero_size_cost: 0,
                split: Size(0),
                shared: None,
                max_rate: None,
            }))
        );
        assert_eq!(
            cp.object_rules,
            vec![
                (pat(None, Some(T::WRITE), None), "pass".to_string()),
                (pat(None, Some(T::FSYNC), None), "pass".to_string()),
                (pat(None, Some(T::READ), None), "table-rate".to_string()),
            ]
        );
        let fg = &info.channels[2];
        assert_eq!(fg.objects.len(), 1);
        assert!(fg.object_rules.is_empty());
    }

    #[test]
    fn parse_exposes_name_labels_and_rules() {
        let p = Policy::parse(FULL, "full.toml").unwrap();
        assert_eq!(p.name.as_deref(), Some("full"));
        assert_eq!(p.labels["job"], "train1");
        assert_eq!(
            p.to_string(),
            format!("policy full.toml ({} rules)", p.rules().len())
        );
        // classifiers, 3 channels, 4 objects, 1 default object, 4 object
        // mappings, 3 channel mappings, default channel.
        assert_eq!(p.rules().len(), 1 + 3 + 4 + 1 + 4 + 3 + 1);
        assert!(matches!(p.rules()[0], Rule::SetClassifiers { .. }));
        assert!(matches!(
            p.rules().last(),
            Some(Rule::SetDefaultChannel { channel: Some(c) }) if c == "fg"
        ));
        // Rules are plain data: the policy is a rule list a control plane
        // could have sent.
        let json = serde_json::to_string(p.rules()).unwrap();
        let back: Vec<Rule> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p.rules());
    }

    #[test]
    fn empty_policy_lets_everything_pass_unmatched() {
        let stage = Stage::from_policy_str("", "<empty>").unwrap();
        assert_eq!(stage.identity().name, "paio");
        assert_eq!(
            route(&stage, 1, RequestType::READ, RequestContext::NONE),
            None
        );
        let ctx = Context::explicit(1, RequestType::READ, RequestContext::NONE, 10);
        stage.enforce(&ctx, None).unwrap();
        let stats = stage.collect();
        assert_eq!(stats.unmatched.ops, 1);
        assert_eq!(stats.unmatched.bytes, 10);
    }

    #[test]
    fn policy_without_default_channel_passes_unmatched_requests() {
        let stage = Stage::from_policy_str(
            "[[channel]]\nname = \"reads\"\nmatch = { request_type = \"read\" }\n",
            "t.toml",
        )
        .unwrap();
        let none = RequestContext::NONE;
        assert_eq!(
            route(&stage, 1, RequestType::READ, none),
            to("reads", "default")
        );
        assert_eq!(route(&stage, 1, RequestType::WRITE, none), None);
        // An empty pattern table matches everything.
        let stage =
            Stage::from_policy_str("[[channel]]\nname = \"all\"\nmatch = {}\n", "t").unwrap();
        assert_eq!(
            route(&stage, 9, RequestType::STAT, none),
            to("all", "default")
        );
    }

    #[test]
    fn apply_to_is_one_transaction() {
        let stage = Stage::from_policy_str("[[channel]]\nname = \"a\"\nmatch = {}\n", "t").unwrap();
        let before = stage.info();
        let p = Policy::parse(
            "[[channel]]\nname = \"b\"\nmatch = {}\n[[channel]]\nname = \"a\"\nmatch = { workflow = 1 }\n",
            "second.toml",
        )
        .unwrap();
        let e = p.apply_to(&stage).unwrap_err();
        assert_eq!(
            (e.line, e.column, e.field.as_str()),
            (5, 8, "channel[1].name")
        );
        assert!(e.message.contains("exists already"), "{e}");
        assert_eq!(stage.info(), before, "nothing of the failed policy applied");
    }

    #[test]
    fn build_stage_uses_the_builders_clock_and_merges_labels() {
        let clock = crate::clock::FakeClock::new();
        let p = Policy::parse("[stage.labels]\nb = \"2\"\n", "t").unwrap();
        let stage = p
            .build_stage(
                Stage::builder("mine")
                    .label("a", "1")
                    .clock(Arc::new(clock)),
            )
            .unwrap();
        let id = stage.identity();
        assert_eq!(id.name, "mine");
        assert_eq!(id.labels.len(), 2);
    }

    use std::sync::Arc;

    // ---- errors ----

    /// Asserts that `text` fails with the error at `line:column` on `field`,
    /// its message containing every one of `needles`.
    #[track_caller]
    fn fails(text: &str, line: usize, column: usize, field: &str, needles: &[&str]) -> PolicyError {
        let e = Stage::from_policy_str(text, "t.toml").unwrap_err();
        assert_eq!(
            (e.line, e.column, e.field.as_str()),
            (line, column, field),
            "wrong place for: {e}"
        );
        assert_eq!(e.origin, "t.toml");
        for n in needles {
            assert!(e.message.contains(n), "message lacks {n:?}: {e}");
        }
        assert_eq!(
            e.to_string(),
            format!("t.toml:{line}:{column}: {field}: {}", e.message)
        );
        assert!(!e.field.contains("serde"), "internal name leaked: {e}");
        e
    }

    const CH: &str = "[[channel]]\nname = \"a\"\n";
    const OBJ: &str = "[[channel]]\nname = \"a\"\n[[channel.object]]\nname = \"o\"\n";
    /// [`OBJ`] with its channel and object reachable, for policies that
    /// must build.
    const OBJ_REACHED: &str = "[[channel]]\nname = \"a\"\nmatch = {}\ndefault_object = \"o\"\n\
                               [[channel.object]]\nname = \"o\"\n";

    #[test]
    fn toml_syntax_error() {
        fails("[stage\nname = \"x\"\n", 1, 7, "policy", &["expected `]`"]);
        fails(
            "[stage]\nname = \"x\"\nname = \"y\"\n",
            3,
            1,
            "policy",
            &["duplicate key"],
        );
        fails("[[channel]]\nname = \"a\n", 2, 10, "policy", &["string"]);
    }

    #[test]
    fn unknown_keys() {
        fails(
            "colour = 1\n",
            1,
            1,
            "colour",
            &["unknown field `colour`", "`stage`", "`channel`"],
        );
        fails(
            "[stage]\nname = \"x\"\nflavour = 2\n",
            3,
            1,
            "stage.flavour",
            &["unknown field `flavour`", "`default_channel`"],
        );
        fails(
            &format!("{CH}speed = 1\n"),
            3,
            1,
            "channel[0].speed",
            &["unknown field `speed`", "`default_object`", "`object`"],
        );
        fails(
            &format!("{OBJ}kind = \"noop\"\ncolour = 1\n"),
            6,
            1,
            "channel[0].object[0].colour",
            &["unknown field `colour`", "`rate`", "`zero_size_cost`"],
        );
        fails(
            &format!("{CH}\n[[channel]]\nname = \"b\"\nmatch = {{ request_kind = \"x\" }}\n"),
            6,
            11,
            "channel[1].match.request_kind",
            &["unknown field `request_kind`", "`request_context`"],
        );
        fails(
            &format!("{CH}match = [{{ request_type = \"read\" }}, {{ request_kind = \"x\" }}]\n"),
            3,
            39,
            "channel[0].match[1].request_kind",
            &["unknown field `request_kind`"],
        );
    }

    #[test]
    fn wrong_types_say_what_was_expected() {
        fails(
            "stage = 3\n",
            1,
            9,
            "stage",
            &["integer `3`", "[stage] table"],
        );
        fails(
            &format!("{CH}match = 5\n"),
            3,
            9,
            "channel[0].match",
            &["integer `5`", "pattern table"],
        );
        fails(
            &format!("{CH}match = {{ request_type = \"\" }}\n"),
            3,
            26,
            "channel[0].match.request_type",
            &["must not be empty"],
        );
        fails(
            &format!("{OBJ}kind = \"blah\"\n"),
            5,
            8,
            "channel[0].object[0].kind",
            &["unknown variant `blah`", "`noop`, `drl`, `priority`"],
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = 5\n"),
            6,
            8,
            "channel[0].object[0].rate",
            &["integer `5`", "\"50MiB/s\""],
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = {{ bytes_per_sec = 1, ops_per_sec = 2 }}\n"),
            6,
            8,
            "channel[0].object[0].rate",
            &["exactly one of bytes_per_sec or ops_per_sec"],
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = {{ bits_per_sec = 1 }}\n"),
            6,
            10,
            "channel[0].object[0].rate.bits_per_sec",
            &["unknown field `bits_per_sec`"],
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = \"1MiB/s\"\nburst = \"1 parsec\"\n"),
            7,
            9,
            "channel[0].object[0].burst",
            &["unknown unit \"parsec\"", "\"4KiB\""],
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = \"1MiB/s\"\nzero_size_cost = -1\n"),
            7,
            18,
            "channel[0].object[0].zero_size_cost",
            &["-1", "u64"],
        );
        fails(
            "[stage]\nclassifiers = [\"workflow\", \"colour\"]\n",
            2,
            28,
            "stage.classifiers[1]",
            &["unknown variant `colour`", "`request_type`"],
        );
        fails(
            "[stage.labels]\nteam = 1\n",
            2,
            8,
            "stage.labels.team",
            &["expected a string"],
        );
        fails(
            &format!("{OBJ}kind = \"noop\"\nmatch = {{ workflow = -3 }}\n"),
            6,
            22,
            "channel[0].object[0].match.workflow",
            &["-3", "u64"],
        );
    }

    #[test]
    fn missing_fields() {
        fails(
            "[[channel]]\n",
            1,
            1,
            "channel[0]",
            &["missing field `name`"],
        );
        fails(
            &format!("{CH}[[channel.object]]\nkind = \"noop\"\n"),
            3,
            1,
            "channel[0].object[0]",
            &["missing field `name`"],
        );
        fails(
            &format!("{OBJ}rate = \"1MiB/s\"\n"),
            3,
            1,
            "channel[0].object[0]",
            &["missing field `kind`"],
        );
    }

    #[test]
    fn bad_rate_unit() {
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = \"50MiB\"\n"),
            6,
            8,
            "channel[0].object[0].rate",
            &["\"50MiB\"", "/s", "\"50MiB/s\""],
        );
    }

    #[test]
    fn drl_without_rate() {
        fails(
            &format!("{OBJ}kind = \"drl\"\nburst = 10\n"),
            5,
            8,
            "channel[0].object[0].rate",
            &["needs a rate", "\"50MiB/s\""],
        );
    }

    #[test]
    fn rate_critical_without_rate() {
        fails(
            &format!("{OBJ}kind = \"priority\"\nrate_critical = true\n"),
            6,
            17,
            "channel[0].object[0].rate_critical",
            &["needs a rate"],
        );
    }

    #[test]
    fn priority_objects_take_their_settings_and_defaults() {
        let text = format!(
            "{OBJ_REACHED}kind = \"priority\"\n\
             [[channel.object]]\nname = \"p2\"\nkind = \"priority\"\nmatch = {{ workflow = 1 }}\ndepth = 8\nbusy_depth = 0\n\
             critical_depth = 16\nshared_busy_depth = 2\nwindow = \"500us\"\nstarvation = \"20ms\"\nrate = \"10MiB/s\"\n\
             rate_critical = true\nsplit_when = \"always\"\n"
        );
        let stage = Stage::from_policy_str(&text, "t.toml").unwrap();
        let info = stage.info();
        let configs: Vec<_> = info.channels[0].objects[1..]
            .iter()
            .map(|o| o.config.clone().unwrap())
            .collect();
        assert_eq!(
            configs[0],
            ObjectConfig::Priority(PriorityConfig::default())
        );
        assert_eq!(
            configs[1],
            ObjectConfig::Priority(PriorityConfig {
                depth: 8,
                busy_depth: 0,
                critical_depth: Some(16),
                shared_busy_depth: Some(2),
                window: HumanDuration(std::time::Duration::from_micros(500)),
                starvation: HumanDuration(std::time::Duration::from_millis(20)),
                rate: Some(Rate::bytes_per_sec(10 << 20)),
                rate_critical: true,
                burst: None,
                split: Size(32 << 10),
                split_when: SplitWhen::Always,
            })
        );
    }

    #[test]
    fn criticality_names_are_read_and_checked() {
        let p = Policy::parse(
            "[criticality]\nprocesses = [\"postgres\"]\nthreads = [\"rocksdb:high*\"]\n",
            "<t>",
        )
        .unwrap();
        assert!(p.critical_names.process_matches("postgres"));
        assert!(p.critical_names.thread_matches("rocksdb:high0"));
        assert!(Policy::parse("", "<t>").unwrap().critical_names.is_empty());
        let e = Policy::parse("[criticality]\nthreads = [\"a*b\"]\n", "<t>").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "criticality"));
        assert!(e.message.contains("only as its last character"), "{e}");
        let e = Policy::parse("[criticality]\nthread = [\"x\"]\n", "<t>").unwrap_err();
        assert!(e.message.contains("unknown field `thread`"), "{e}");
    }

    #[test]
    fn dirty_limits_are_read_and_checked() {
        assert!(!Policy::parse("", "<t>").unwrap().dirty.is_on());
        let p = Policy::parse(
            "[criticality]\ndirty_per_file = \"8MiB\"\ndirty_per_process = 67108864\n",
            "<t>",
        )
        .unwrap();
        assert_eq!(
            p.dirty,
            DirtyLimits {
                per_file: Some(8 << 20),
                per_process: Some(64 << 20),
                overlap: true,
            }
        );
        let p = Policy::parse(
            "[criticality]\ndirty_per_file = \"8MiB\"\ndirty_overlap = false\n",
            "<t>",
        )
        .unwrap();
        assert!(!p.dirty.overlap);
        let p = Policy::parse(
            "[criticality]\ndirty_per_file = \"8MiB\"\ndirty_overlap = true\n",
            "<t>",
        )
        .unwrap();
        assert!(p.dirty.overlap);
        // Either value without a bound sets nothing: refused, not ignored.
        for v in ["true", "false"] {
            let text = format!("[criticality]\ndirty_overlap = {v}\n");
            let e = Policy::parse(&text, "<t>").unwrap_err();
            assert_eq!(
                (e.line, e.field.as_str()),
                (2, "criticality.dirty_overlap"),
                "{e}"
            );
            assert!(e.message.contains("add dirty_per_file"), "{e}");
        }
        let e = Policy::parse("[criticality]\ndirty_per_file = \"4KiB\"\n", "<t>").unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "criticality.dirty_per_file"),
            "{e}"
        );
        assert!(e.message.contains("at least 64 KiB"), "{e}");
    }

    #[test]
    fn a_policy_from_rules_is_the_parsed_file_with_those_rules() {
        let text = "[stage]\nname = \"s\"\n\n[[channel]]\nname = \"r\"\nmatch = { request_type = \"read\" }\n";
        let parsed = Policy::parse(text, "<t>").unwrap();
        let built = Policy::from_rules(Some("s".into()), parsed.rules().to_vec());
        assert_eq!(built.name, parsed.name);
        assert_eq!(built.labels, parsed.labels);
        assert_eq!(built.critical_names, parsed.critical_names);
        assert_eq!(built.inherit, parsed.inherit);
        assert_eq!(built.dirty, parsed.dirty);
        assert_eq!(built.helper_window, parsed.helper_window);
        assert_eq!(built.rules(), parsed.rules());
        let (a, b) = (built.new_stage().unwrap(), parsed.new_stage().unwrap());
        assert_eq!(a.info(), b.info());
        // A rule that cannot apply is named by its index.
        let bad = Policy::from_rules(
            None,
            vec![
                Rule::CreateChannel { name: "a".into() },
                Rule::SetDefaultChannel {
                    channel: Some("missing".into()),
                },
            ],
        );
        let e = bad.new_stage().unwrap_err();
        assert_eq!(
            (e.origin.as_str(), e.field.as_str()),
            ("<rules>", "rule[1]"),
            "{e}"
        );
        assert!(e.message.contains("missing"), "{e}");
    }

    #[test]
    fn inheritance_is_on_unless_turned_off() {
        assert!(Policy::parse("", "<t>").unwrap().inherit);
        assert!(Policy::parse("[criticality]\n", "<t>").unwrap().inherit);
        let p = Policy::parse("[criticality]\nhelper_window = \"20ms\"\n", "<t>").unwrap();
        assert_eq!(p.helper_window, Duration::from_millis(20));
        assert_eq!(
            Policy::parse("", "<t>").unwrap().helper_window,
            Duration::from_millis(100)
        );
        let off = Policy::parse("[criticality]\ninherit = false\n", "<t>").unwrap();
        assert!(!off.inherit);
        let e = Policy::parse("[criticality]\ninherit = \"no\"\n", "<t>").unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (2, "criticality.inherit"),
            "{e}"
        );
    }

    #[test]
    fn priority_settings_out_of_range() {
        for (settings, line, column, field, needle) in [
            ("depth = 0\n", 6, 9, "depth", "at least 1"),
            (
                "depth = 2\nbusy_depth = 3\n",
                7,
                14,
                "busy_depth",
                "at most depth (2)",
            ),
            (
                "critical_depth = 0\n",
                6,
                18,
                "critical_depth",
                "omit it for no limit",
            ),
            (
                "shared_busy_depth = 0\n",
                6,
                21,
                "shared_busy_depth",
                "omit it for no shared bound",
            ),
            ("starvation = \"0ms\"\n", 6, 14, "starvation", "more than 0"),
            ("burst = 10\n", 6, 9, "burst", "needs a rate"),
            ("window = \"2\"\n", 6, 10, "window", "a unit is required"),
            ("split = \"5000B\"\n", 6, 9, "split", "multiple of 4 KiB"),
        ] {
            fails(
                &format!("{OBJ}kind = \"priority\"\n{settings}"),
                line,
                column,
                &format!("channel[0].object[0].{field}"),
                &[needle],
            );
        }
    }

    /// The configuration of the object `settings` (a [`OBJ_REACHED`]
    /// object's keys after its name) has once built into a stage.
    fn built(settings: &str) -> Option<ObjectConfig> {
        let p = Policy::parse(&format!("{OBJ_REACHED}{settings}"), "<t>").unwrap();
        p.new_stage().unwrap().info().channels[0].objects[1]
            .config
            .clone()
    }

    #[test]
    fn drl_split_is_parsed_and_checked() {
        assert_eq!(
            built("kind = \"drl\"\nrate = \"1MiB/s\"\nsplit = \"256KiB\"\n"),
            Some(ObjectConfig::Drl(
                DrlConfig::new(Rate::bytes_per_sec(1 << 20)).with_split(256 << 10)
            ))
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = \"1MiB/s\"\nsplit = \"5000B\"\n"),
            7,
            9,
            "channel[0].object[0].split",
            &["multiple of 4 KiB"],
        );
        fails(
            &format!("{OBJ}kind = \"noop\"\nsplit = \"4KiB\"\n"),
            6,
            9,
            "channel[0].object[0].split",
            &["takes no split", "only drl and priority objects"],
        );
    }

    #[test]
    fn drl_max_rate_is_parsed_and_checked() {
        assert_eq!(
            built("kind = \"drl\"\nrate = \"2MiB/s\"\nmax_rate = \"1MiB/s\"\n"),
            Some(ObjectConfig::Drl(
                DrlConfig::new(Rate::bytes_per_sec(1 << 20))
                    .with_max_rate(Rate::bytes_per_sec(1 << 20))
            )),
            "the rate as the object applies it"
        );
        for (value, needle) in [
            ("\"10 ops/s\"", "not in the unit of the rate"),
            ("\"0B/s\"", "must be above 0"),
        ] {
            fails(
                &format!("{OBJ}kind = \"drl\"\nrate = \"1MiB/s\"\nmax_rate = {value}\n"),
                7,
                12,
                "channel[0].object[0].max_rate",
                &[needle],
            );
        }
        fails(
            &format!("{OBJ}kind = \"priority\"\nmax_rate = \"1MiB/s\"\n"),
            6,
            12,
            "channel[0].object[0].max_rate",
            &["takes no max_rate"],
        );
    }

    #[test]
    fn drl_settings_on_a_noop_object() {
        for (key, value, column, takers) in [
            ("rate", "\"1MiB/s\"", 8, "only drl and priority objects"),
            ("burst", "\"4KiB\"", 9, "only drl and priority objects"),
            ("zero_size_cost", "1", 18, "only drl objects"),
            ("depth", "2", 9, "only priority objects"),
        ] {
            fails(
                &format!("{OBJ}kind = \"noop\"\n{key} = {value}\n"),
                6,
                column,
                &format!("channel[0].object[0].{key}"),
                &[&format!("takes no {key}"), takers],
            );
        }
    }

    #[test]
    fn zero_burst() {
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = \"1MiB/s\"\nburst = 0\n"),
            7,
            9,
            "channel[0].object[0].burst",
            &["at least one token"],
        );
        fails(
            &format!("{OBJ}kind = \"drl\"\nrate = \"1MiB/s\"\nburst = \"0KiB\"\n"),
            7,
            9,
            "channel[0].object[0].burst",
            &["at least one token"],
        );
    }

    #[test]
    fn duplicate_names_point_at_the_second() {
        fails(
            &format!("{CH}match = {{}}\n\n[[channel]]\nname = \"a\"\n"),
            6,
            8,
            "channel[1].name",
            &["channel \"a\" exists already"],
        );
        fails(
            &format!("{OBJ}kind = \"noop\"\n[[channel.object]]\nname = \"o\"\nkind = \"noop\"\n"),
            7,
            8,
            "channel[0].object[1].name",
            &["object \"o\" exists already"],
        );
        fails(
            &format!("{CH}[[channel.object]]\nname = \"default\"\nkind = \"noop\"\n"),
            4,
            8,
            "channel[0].object[0].name",
            &["\"default\"", "reserved"],
        );
        fails(
            "[[channel]]\nname = \"\"\n",
            2,
            8,
            "channel[0].name",
            &["must not be empty"],
        );
    }

    #[test]
    fn one_pattern_with_two_targets() {
        fails(
            &format!(
                "{CH}match = {{ request_context = \"pt-bulk\" }}\n\
                 [[channel]]\nname = \"b\"\nmatch = [{{ workflow = 1 }}, {{ request_context = \"pt-bulk\" }}]\n"
            ),
            6,
            28,
            "channel[1].match[1]",
            &[
                "pattern {request_context = pt-bulk}",
                "channel \"a\" (channel[0].match)",
            ],
        );
        fails(
            &format!(
                "{OBJ}kind = \"noop\"\nmatch = {{ request_type = \"read\" }}\n\
                 [[channel.object]]\nname = \"p\"\nkind = \"noop\"\nmatch = {{ request_type = \"read\" }}\n"
            ),
            10,
            9,
            "channel[0].object[1].match",
            &["object \"o\" (channel[0].object[0].match)"],
        );
        // The same pattern in two channels' objects, or twice for the same
        // target, is fine.
        let ok = format!(
            "{OBJ_REACHED}kind = \"noop\"\nmatch = [{{ workflow = 1 }}, {{ workflow = 1 }}]\n\
             [[channel]]\nname = \"b\"\nmatch = {{ request_type = \"read\" }}\n[[channel.object]]\nname = \"o\"\nkind = \"noop\"\n\
             match = {{ workflow = 1 }}\n"
        );
        Stage::from_policy_str(&ok, "t").unwrap();
    }

    #[test]
    fn channels_and_objects_no_request_can_reach_are_refused() {
        // The trap docs/policies.md warns of: a limiter with no `match` in a
        // channel that does not name it its default_object.
        let e = fails(
            &format!("{CH}match = {{}}\n[[channel.object]]\nname = \"o\"\nkind = \"drl\"\nrate = \"1MiB/s\"\n"),
            5,
            8,
            "channel[0].object[0].name",
            &[
                "object \"o\" would receive no request",
                "go to the built-in pass-through object \"default\"",
                "add `default_object = \"o\"` to the channel, or a `match` to the object",
            ],
        );
        assert!(!e.message.contains("channel \"a\" would"), "{e}");
        // With another default object named, the message names it.
        fails(
            &format!(
                "{CH}match = {{}}\ndefault_object = \"p\"\n[[channel.object]]\nname = \"p\"\nkind = \"noop\"\n\
                 [[channel.object]]\nname = \"o\"\nkind = \"noop\"\n"
            ),
            9,
            8,
            "channel[0].object[1].name",
            &["go to \"p\""],
        );
        // A channel with no match that is not the stage's default_channel.
        fails(
            &format!("{CH}match = {{}}\n[[channel]]\nname = \"b\"\n"),
            5,
            8,
            "channel[1].name",
            &[
                "channel \"b\" would receive no request",
                "add `default_channel = \"b\"` to [stage], or a `match` to the channel",
            ],
        );
        // Reached as defaults, or through a match: accepted.
        for ok in [
            format!("[stage]\ndefault_channel = \"a\"\n{CH}"),
            format!("{OBJ_REACHED}kind = \"noop\"\n"),
            format!("{CH}match = {{}}\n[[channel.object]]\nname = \"o\"\nkind = \"noop\"\nmatch = {{}}\n"),
        ] {
            Stage::from_policy_str(&ok, "t").unwrap();
        }
        // An object pattern no request of its channel fits: refused, at the
        // pattern; in the default channel, which may get any request, not.
        fails(
            &format!(
                "{CH}match = {{ request_type = \"read\" }}\n[[channel.object]]\nname = \"o\"\n\
                 kind = \"noop\"\nmatch = [{{ workflow = 1 }}, {{ request_type = \"write\" }}]\n"
            ),
            7,
            28,
            "channel[0].object[0].match[1]",
            &[
                "pattern {request_type = write} of object \"o\" fits no request channel \"a\" gets",
                "takes only requests fitting {request_type = read}",
            ],
        );
        for ok in [
            format!(
                "[stage]\ndefault_channel = \"a\"\n{CH}match = {{ request_type = \"read\" }}\n\
                 [[channel.object]]\nname = \"o\"\nkind = \"noop\"\nmatch = {{ request_type = \"write\" }}\n"
            ),
            format!(
                "{CH}match = [{{ request_type = \"read\" }}, {{ workflow = 2 }}]\n\
                 [[channel.object]]\nname = \"o\"\nkind = \"noop\"\nmatch = {{ request_type = \"write\" }}\n"
            ),
        ] {
            Stage::from_policy_str(&ok, "t").unwrap();
        }
        // A misspelt default is reported as the name it is, not as the
        // channel or object it leaves unreached.
        fails(
            &format!("{CH}match = {{}}\ndefault_object = \"oo\"\n[[channel.object]]\nname = \"o\"\nkind = \"noop\"\n"),
            4,
            18,
            "channel[0].default_object",
            &["no object named \"oo\""],
        );
        fails(
            &format!("[stage]\ndefault_channel = \"aa\"\n{CH}"),
            2,
            19,
            "stage.default_channel",
            &["no channel named \"aa\""],
        );
    }

    #[test]
    fn references_to_missing_things() {
        fails(
            &format!("{CH}default_object = \"nope\"\n"),
            3,
            18,
            "channel[0].default_object",
            &["no object named \"nope\" in channel \"a\""],
        );
        fails(
            &format!("[stage]\ndefault_channel = \"nope\"\n\n{CH}"),
            2,
            19,
            "stage.default_channel",
            &["no channel named \"nope\""],
        );
    }

    #[test]
    fn match_on_a_disabled_classifier() {
        let stage = "[stage]\nclassifiers = [\"request_type\"]\n";
        fails(
            &format!("{stage}{CH}match = {{ request_context = \"pt-x\" }}\n"),
            5,
            9,
            "channel[0].match",
            &["classifier request_context", "enabled: request_type"],
        );
        // In an array, the error points at the element.
        fails(
            &format!("{stage}{CH}match = [{{ request_type = \"read\" }}, {{ workflow = 3 }}]\n"),
            5,
            37,
            "channel[0].match[1]",
            &["classifier workflow", "enabled: request_type"],
        );
        fails(
            &format!(
                "[stage]\nclassifiers = []\n{OBJ}kind = \"noop\"\nmatch = {{ request_type = \"read\" }}\n"
            ),
            8,
            9,
            "channel[0].object[0].match",
            &["classifier request_type", "enabled: none"],
        );
    }

    #[test]
    fn columns_count_characters_and_crlf_is_a_line_break() {
        fails(
            &format!("{CH}match = {{ request_type = \"é\", oops = 1 }}\n"),
            3,
            31,
            "channel[0].match.oops",
            &["unknown field `oops`"],
        );
        fails(
            "[[channel]]\r\nname = \"a\"\r\nspeed = 1\r\n",
            3,
            1,
            "channel[0].speed",
            &["unknown field"],
        );
    }

    #[test]
    fn oversized_text() {
        let big = "#".repeat(MAX_POLICY_BYTES + 1);
        fails(
            &big,
            1,
            1,
            "policy",
            &["exceeds", &MAX_POLICY_BYTES.to_string()],
        );
        // Exactly the limit is fine.
        assert!(Policy::parse(&big[1..], "t").is_ok());
    }

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("paio-policy-{}-{name}", std::process::id()))
    }

    #[test]
    fn from_file() {
        let path = temp_path("ok.toml");
        std::fs::write(&path, format!("{CH}\n[[channel]]\nname = \"a\"\n")).unwrap();
        let e = Stage::from_policy_file(&path).unwrap_err();
        let shown = path.display().to_string();
        assert_eq!(e.origin, shown);
        assert!(
            e.to_string()
                .starts_with(&format!("{shown}:5:8: channel[1].name: ")),
            "{e}"
        );

        std::fs::write(&path, format!("{CH}match = {{}}\n")).unwrap();
        assert!(Stage::from_policy_file(&path).is_ok());
        std::fs::write(&path, "#".repeat(MAX_POLICY_BYTES + 1)).unwrap();
        let e = Policy::from_file(&path).unwrap_err();
        assert!(e.message.contains("more than the 1048576 bytes"), "{e}");
        // Nor does an endless device, whose metadata says 0 bytes.
        let e = Policy::from_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.message.contains("more than the 1048576 bytes"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn from_missing_file_names_the_path() {
        let path = temp_path("does-not-exist.toml");
        let e = Policy::from_file(&path).unwrap_err();
        let shown = path.display().to_string();
        assert_eq!((e.line, e.column, e.field.as_str()), (1, 1, "policy"));
        assert!(e.message.starts_with("cannot read"), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{shown}:1:1: policy: cannot read")),
            "{e}"
        );
    }

    #[test]
    fn clean_path_drops_serde_internals() {
        assert_eq!(clean_path("."), "policy");
        assert_eq!(clean_path(""), "policy");
        assert_eq!(
            clean_path("channel[0].match.$__serde_spanned_private_value[1].workflow"),
            "channel[0].match[1].workflow"
        );
        assert_eq!(RateUnit::Ops, Rate::ops_per_sec(1).unit);
    }
}
