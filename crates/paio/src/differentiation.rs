//! Differentiation: which channel, and which object inside it, handles a
//! request (§4).
//!
//! A [`Pattern`] names values for some classifiers and leaves the others as
//! wildcards. Patterns are compiled into a [`Matcher`]: one integer-keyed hash
//! table per combination of named classifiers, probed from the most specific
//! combination to the least. No string is built or hashed per request.
//!
//! **Which rule wins.** Among the patterns that match a request, the one that
//! names the most classifiers wins; between patterns naming the same number,
//! the order of precedence is workflow, then criticality, then request
//! context, then file class, then request type. Two patterns naming the same
//! classifiers with the same values are the
//! same pattern: adding it again replaces its target. So exactly one pattern
//! wins, whatever order rules arrived in.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};

use crate::context::{Context, Criticality, FileClass, RequestContext, RequestType, WorkflowId};

/// A request classifier (the paper's I/O classifiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Classifier {
    /// [`Context::workflow`].
    Workflow,
    /// [`Context::request_type`].
    RequestType,
    /// [`Context::request_context`].
    RequestContext,
    /// [`Context::file_class`].
    FileClass,
    /// [`Context::criticality`].
    Criticality,
}

impl Classifier {
    /// All classifiers.
    pub const ALL: [Classifier; 5] = [
        Classifier::Workflow,
        Classifier::RequestType,
        Classifier::RequestContext,
        Classifier::FileClass,
        Classifier::Criticality,
    ];

    /// The classifier's bit in a mask; between patterns naming equally many
    /// classifiers, the larger mask wins (see the module docs).
    const fn bit(self) -> u8 {
        match self {
            Classifier::Workflow => 0b1_0000,
            Classifier::Criticality => 0b0_1000,
            Classifier::RequestContext => 0b0_0100,
            Classifier::FileClass => 0b0_0010,
            Classifier::RequestType => 0b0_0001,
        }
    }
}

impl fmt::Display for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Classifier::Workflow => "workflow",
            Classifier::RequestType => "request_type",
            Classifier::RequestContext => "request_context",
            Classifier::FileClass => "file_class",
            Classifier::Criticality => "criticality",
        })
    }
}

/// A set of classifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassifierSet(u8);

impl ClassifierSet {
    /// Every classifier.
    pub const ALL: ClassifierSet = ClassifierSet(0b1_1111);

    /// The set of `classifiers`.
    pub fn of(classifiers: &[Classifier]) -> Self {
        Self(classifiers.iter().fold(0, |m, c| m | c.bit()))
    }

    /// Whether `c` is in the set.
    pub const fn contains(self, c: Classifier) -> bool {
        self.0 & c.bit() != 0
    }

    /// The classifiers in the set.
    pub fn to_vec(self) -> Vec<Classifier> {
        Classifier::ALL
            .into_iter()
            .filter(|c| self.contains(*c))
            .collect()
    }
}

/// Values for some classifiers; a `None` field matches anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pattern {
    /// Match only this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowId>,
    /// Match only this request type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_type: Option<RequestType>,
    /// Match only this request context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_context: Option<RequestContext>,
    /// Match only this file class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_class: Option<FileClass>,
    /// Match only this criticality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criticality: Option<Criticality>,
}

impl Pattern {
    /// The pattern that matches every request.
    pub const ANY: Pattern = Pattern {
        workflow: None,
        request_type: None,
        request_context: None,
        file_class: None,
        criticality: None,
    };

    /// The classifiers this pattern names.
    pub fn classifiers(&self) -> ClassifierSet {
        let mut m = 0;
        if self.workflow.is_some() {
            m |= Classifier::Workflow.bit();
        }
        if self.request_context.is_some() {
            m |= Classifier::RequestContext.bit();
        }
        if self.file_class.is_some() {
            m |= Classifier::FileClass.bit();
        }
        if self.request_type.is_some() {
            m |= Classifier::RequestType.bit();
        }
        if self.criticality.is_some() {
            m |= Classifier::Criticality.bit();
        }
        ClassifierSet(m)
    }

    /// Whether some request matches both this pattern and `other`: on every
    /// classifier they name a value of, they name the same one.
    pub fn overlaps(&self, other: &Pattern) -> bool {
        fn agree<T: PartialEq>(a: Option<T>, b: Option<T>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        }
        agree(self.workflow, other.workflow)
            && agree(self.request_type, other.request_type)
            && agree(self.request_context, other.request_context)
            && agree(self.file_class, other.file_class)
            && agree(self.criticality, other.criticality)
    }

    /// Whether `ctx` matches this pattern.
    pub fn matches(&self, ctx: &Context) -> bool {
        self.workflow.is_none_or(|w| w == ctx.workflow)
            && self.request_type.is_none_or(|t| t == ctx.request_type)
            && self
                .request_context
                .is_none_or(|c| c == ctx.request_context)
            && self.file_class.is_none_or(|f| f == ctx.file_class)
            && self.criticality.is_none_or(|c| c == ctx.criticality)
    }

    fn key(&self) -> Key {
        Key {
            workflow: self.workflow.unwrap_or(0),
            kinds: pack(
                self.request_type.map_or(0, RequestType::raw),
                self.request_context.map_or(0, RequestContext::raw),
                self.file_class.map_or(0, FileClass::raw),
                self.criticality.map_or(0, Criticality::raw),
            ),
        }
    }

    /// How specific the pattern is; larger wins (see the module docs).
    fn rank(mask: u8) -> (u32, u8) {
        (mask.count_ones(), mask)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(w) = self.workflow {
            parts.push(format!("workflow = {w}"));
        }
        if let Some(t) = self.request_type {
            parts.push(format!("request_type = {t}"));
        }
        if let Some(c) = self.request_context {
            parts.push(format!("request_context = {c}"));
        }
        if let Some(c) = self.file_class {
            parts.push(format!("file_class = {c}"));
        }
        if let Some(c) = self.criticality {
            parts.push(format!("criticality = {c}"));
        }
        if parts.is_empty() {
            f.write_str("{any}")
        } else {
            write!(f, "{{{}}}", parts.join(", "))
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Key {
    workflow: u64,
    kinds: u64,
}

const fn pack(request_type: u16, request_context: u16, file_class: u16, criticality: u8) -> u64 {
    (criticality as u64) << 48
        | (request_type as u64) << 32
        | (request_context as u64) << 16
        | file_class as u64
}

/// The request type in a packed key.
const fn type_of(kinds: u64) -> usize {
    (kinds >> 32) as u16 as usize
}

/// For each classifier mask, the bits of [`Key::kinds`] it keeps.
const KIND_MASKS: [u64; 32] = {
    const fn keep(mask: usize, c: Classifier, bits: u64) -> u64 {
        if mask as u8 & c.bit() != 0 {
            bits
        } else {
            0
        }
    }
    let mut masks = [0u64; 32];
    let mut m = 0;
    while m < 32 {
        masks[m] = keep(m, Classifier::RequestType, pack(u16::MAX, 0, 0, 0))
            | keep(m, Classifier::RequestContext, pack(0, u16::MAX, 0, 0))
            | keep(m, Classifier::FileClass, pack(0, 0, u16::MAX, 0))
            | keep(m, Classifier::Criticality, pack(0, 0, 0, u8::MAX));
        m += 1;
    }
    masks
};

impl Key {
    /// The key of `ctx` in the table of patterns naming the classifiers of
    /// `mask`: the other classifiers are zeroed (branch-free).
    #[inline]
    fn of(ctx: &Context, mask: u8) -> Key {
        let workflow_mask = 0u64.wrapping_sub(u64::from(mask & Classifier::Workflow.bit() != 0));
        Key {
            workflow: ctx.workflow & workflow_mask,
            kinds: pack(
                ctx.request_type.raw(),
                ctx.request_context.raw(),
                ctx.file_class.raw(),
                ctx.criticality.raw(),
            ) & KIND_MASKS[(mask & 0b1_1111) as usize],
        }
    }
}

/// A multiply-rotate hasher for the two integers of a key (keys are not
/// attacker-chosen strings: they come from the stage's own rules).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
}

type KeyMap<T> = HashMap<Key, T, BuildHasherDefault<KeyHasher>>;

/// Tables with at most this many patterns are scanned linearly, which beats
/// hashing for small tables (the common case: a few channels).
const LINEAR_MAX: usize = 8;

/// The patterns of one combination of classifiers.
#[derive(Debug, Clone)]
enum Table<T> {
    /// Patterns on the request type alone, all built-in types: indexed by
    /// the type's number (the common case of per-operation channels).
    ByType(Box<[Option<T>]>),
    /// Few patterns: compared one by one.
    Small(Vec<(Key, T)>),
    /// Many patterns: an integer-keyed hash table.
    Large(KeyMap<T>),
}

/// Request types below this number can be indexed directly (the built-in
/// types are 0 to 19).
const BY_TYPE_MAX: usize = 32;

impl<T: Copy> Table<T> {
    #[inline]
    fn get(&self, key: &Key) -> Option<T> {
        match self {
            Table::ByType(targets) => targets.get(type_of(key.kinds)).copied().flatten(),
            Table::Small(entries) => {
                for (k, t) in entries {
                    if k == key {
                        return Some(*t);
                    }
                }
                None
            }
            Table::Large(map) => map.get(key).copied(),
        }
    }
}

/// Compiled patterns mapping requests to targets of type `T`.
#[derive(Debug, Clone)]
pub struct Matcher<T> {
    /// Tables in the order they are probed (most specific first).
    tables: Vec<(u8, Table<T>)>,
}

impl<T> Default for Matcher<T> {
    fn default() -> Self {
        Self { tables: Vec::new() }
    }
}

impl<T: Copy> Matcher<T> {
    /// Compiles `(pattern, target)` pairs; a later pair with the same pattern
    /// replaces an earlier one.
    pub fn compile<'a>(rules: impl IntoIterator<Item = (&'a Pattern, T)>) -> Self {
        let mut maps: Vec<(u8, KeyMap<T>)> = Vec::new();
        for (pattern, target) in rules {
            let mask = pattern.classifiers().0;
            let map = match maps.iter().position(|(m, _)| *m == mask) {
                Some(i) => &mut maps[i].1,
                None => {
                    maps.push((mask, KeyMap::default()));
                    &mut maps.last_mut().expect("just pushed").1
                }
            };
            map.insert(pattern.key(), target);
        }
        maps.sort_by_key(|(mask, _)| std::cmp::Reverse(Pattern::rank(*mask)));
        let tables = maps
            .into_iter()
            .map(|(mask, map)| {
                let by_type = mask == Classifier::RequestType.bit()
                    && map.keys().all(|k| type_of(k.kinds) < BY_TYPE_MAX);
                let table = if by_type {
                    let mut targets = vec![None; BY_TYPE_MAX];
                    for (k, t) in map {
                        targets[type_of(k.kinds)] = Some(t);
                    }
                    Table::ByType(targets.into_boxed_slice())
                } else if map.len() <= LINEAR_MAX {
                    Table::Small(map.into_iter().collect())
                } else {
                    Table::Large(map)
                };
                (mask, table)
            })
            .collect();
        Self { tables }
    }

    /// The target of the most specific pattern matching `ctx`.
    #[inline]
    pub fn find(&self, ctx: &Context) -> Option<T> {
        // Fast paths, inlined into the request path: no pattern, or one
        // combination of classifiers (the common policies), where a
        // request-type table is indexed without building a key.
        match self.tables.as_slice() {
            [] => None,
            [(_, Table::ByType(targets))] => targets
                .get(ctx.request_type.raw() as usize)
                .copied()
                .flatten(),
            [(mask, Table::Small(entries))] => {
                let key = Key::of(ctx, *mask);
                entries.iter().find(|(k, _)| *k == key).map(|(_, t)| *t)
            }
            tables => Self::find_in(tables, ctx),
        }
    }

    /// [`Matcher::find`] over several tables, most specific first.
    #[inline(never)]
    fn find_in(tables: &[(u8, Table<T>)], ctx: &Context) -> Option<T> {
        for (mask, table) in tables {
            if let Some(t) = table.get(&Key::of(ctx, *mask)) {
                return Some(t);
            }
        }
        None
    }

    /// Whether no pattern was compiled.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rc(name: &str) -> RequestContext {
        RequestContext::named(name).unwrap()
    }

    fn fc(name: &str) -> FileClass {
        FileClass::named(name).unwrap()
    }

    #[test]
    fn most_specific_wins_regardless_of_order() {
        let flush = rc("dif-test-flush");
        let any = Pattern::ANY;
        let writes = Pattern {
            request_type: Some(RequestType::WRITE),
            ..any
        };
        let flushes = Pattern {
            request_context: Some(flush),
            ..any
        };
        let flush_writes = Pattern {
            request_type: Some(RequestType::WRITE),
            request_context: Some(flush),
            ..any
        };
        let wf7 = Pattern {
            workflow: Some(7),
            ..any
        };
        let rules = [
            (&any, 0),
            (&writes, 1),
            (&flushes, 2),
            (&flush_writes, 3),
            (&wf7, 4),
        ];
        for perm in [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 0, 3, 1]] {
            let m = Matcher::compile(perm.iter().map(|&i| rules[i]));
            let c = |w, t, x| Context::explicit(w, t, x, 0);
            assert_eq!(
                m.find(&c(1, RequestType::READ, RequestContext::NONE)),
                Some(0)
            );
            assert_eq!(
                m.find(&c(1, RequestType::WRITE, RequestContext::NONE)),
                Some(1)
            );
            assert_eq!(m.find(&c(1, RequestType::READ, flush)), Some(2));
            assert_eq!(m.find(&c(1, RequestType::WRITE, flush)), Some(3));
            // Two classifiers beat one, even the workflow.
            assert_eq!(m.find(&c(7, RequestType::WRITE, flush)), Some(3));
            // Workflow beats request context at equal specificity.
            assert_eq!(m.find(&c(7, RequestType::READ, flush)), Some(4));
        }
    }

    #[test]
    fn type_only_tables_handle_builtin_and_custom_types() {
        let custom = RequestType::named("dif-test-custom").unwrap();
        let by = |t| Pattern {
            request_type: Some(t),
            ..Pattern::ANY
        };
        let (read, fsync, odd) = (by(RequestType::READ), by(RequestType::FSYNC), by(custom));
        let builtin = Matcher::compile([(&read, 1), (&fsync, 2)]);
        let mixed = Matcher::compile([(&read, 1), (&fsync, 2), (&odd, 3)]);
        let c = |t| Context::explicit(0, t, RequestContext::NONE, 0);
        for m in [&builtin, &mixed] {
            assert_eq!(m.find(&c(RequestType::READ)), Some(1));
            assert_eq!(m.find(&c(RequestType::FSYNC)), Some(2));
            assert_eq!(m.find(&c(RequestType::WRITE)), None);
        }
        assert_eq!(builtin.find(&c(custom)), None);
        assert_eq!(mixed.find(&c(custom)), Some(3));
    }

    #[test]
    fn same_pattern_replaces() {
        let p = Pattern {
            request_type: Some(RequestType::READ),
            ..Pattern::ANY
        };
        let m = Matcher::compile([(&p, 1), (&p, 2)]);
        assert_eq!(
            m.find(&Context::explicit(
                0,
                RequestType::READ,
                RequestContext::NONE,
                0
            )),
            Some(2)
        );
        assert_eq!(
            m.find(&Context::explicit(
                0,
                RequestType::WRITE,
                RequestContext::NONE,
                0
            )),
            None
        );
        assert!(Matcher::<u8>::compile([]).is_empty());
    }

    #[test]
    fn display_and_serde() {
        let p = Pattern {
            workflow: Some(3),
            request_type: Some(RequestType::GET),
            ..Pattern::ANY
        };
        assert_eq!(p.to_string(), "{workflow = 3, request_type = get}");
        assert_eq!(Pattern::ANY.to_string(), "{any}");
        let j = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Pattern>(&j).unwrap(), p);
        assert!(serde_json::from_str::<Pattern>(r#"{"flavour": 1}"#).is_err());
        assert_eq!(
            ClassifierSet::of(&[Classifier::Workflow]).to_vec(),
            vec![Classifier::Workflow]
        );
    }

    fn pattern() -> impl Strategy<Value = Pattern> {
        let types = TYPES;
        (
            proptest::option::of(0u64..3),
            proptest::option::of(0usize..3),
            proptest::option::of(0u16..3),
            proptest::option::of(0u16..2),
            proptest::option::of(0u8..2),
        )
            .prop_map(move |(w, t, c, f, k)| Pattern {
                workflow: w,
                request_type: t.map(|i| types[i]),
                request_context: c.map(|i| rc(&format!("dif-prop-{i}"))),
                file_class: f.map(|i| fc(&format!("dif-prop-file-{i}"))),
                criticality: k.and_then(Criticality::from_raw),
            })
    }

    const TYPES: [RequestType; 3] = [RequestType::READ, RequestType::WRITE, RequestType::FSYNC];

    /// A request of the values [`pattern`] draws from (`c == 3`: no request
    /// context, `f == 2`: no file class).
    fn request(w: u64, t: usize, c: u16, f: u16, k: u8) -> Context {
        Context::explicit(
            w,
            TYPES[t],
            if c == 3 {
                RequestContext::NONE
            } else {
                rc(&format!("dif-prop-{c}"))
            },
            0,
        )
        .with_file_class(if f == 2 {
            FileClass::NONE
        } else {
            fc(&format!("dif-prop-file-{f}"))
        })
        .with_criticality(Criticality::from_raw(k).unwrap())
    }

    proptest! {
        /// The compiled matcher agrees with a brute-force search for the
        /// highest-ranked matching pattern (last one added among equals).
        #[test]
        fn matcher_agrees_with_brute_force(
            patterns in proptest::collection::vec(pattern(), 0..24),
            w in 0u64..3, t in 0usize..3, c in 0u16..4, f in 0u16..3, k in 0u8..2,
        ) {
            let ctx = request(w, t, c, f, k);
            let m = Matcher::compile(patterns.iter().enumerate().map(|(i, p)| (p, i)));
            let expect = patterns
                .iter()
                .enumerate()
                .filter(|(_, p)| p.matches(&ctx))
                .max_by_key(|(i, p)| (Pattern::rank(p.classifiers().0), *i))
                .map(|(i, _)| i);
            prop_assert_eq!(m.find(&ctx), expect);
        }

        /// Two patterns overlap exactly when some request matches both: a
        /// request matching both proves it, and when they overlap, the
        /// request taking each classifier's value from whichever names one
        /// matches both.
        #[test]
        fn overlaps_exactly_when_a_request_matches_both(
            a in pattern(), b in pattern(),
            w in 0u64..3, t in 0usize..3, c in 0u16..4, f in 0u16..3, k in 0u8..2,
        ) {
            let types = TYPES;
            let ctx = request(w, t, c, f, k);
            prop_assert_eq!(a.overlaps(&b), b.overlaps(&a));
            if a.matches(&ctx) && b.matches(&ctx) {
                prop_assert!(a.overlaps(&b));
            }
            if a.overlaps(&b) {
                let both = Context::explicit(
                    a.workflow.or(b.workflow).unwrap_or(w),
                    a.request_type.or(b.request_type).unwrap_or(types[t]),
                    a.request_context.or(b.request_context).unwrap_or(RequestContext::NONE),
                    0,
                )
                .with_file_class(a.file_class.or(b.file_class).unwrap_or(FileClass::NONE))
                .with_criticality(a.criticality.or(b.criticality).unwrap_or(ctx.criticality));
                prop_assert!(a.matches(&both) && b.matches(&both), "{} {}", a, b);
            }
        }
    }
}
