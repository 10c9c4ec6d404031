//! The stage: the data plane embedded in a process (§3.2, §6.1).
//!
//! Request path ([`Stage::enforce`]): read the current routing table, select
//! the channel (step 2), select the object (step 4), apply it (step 5), count
//! the request (step 6). No allocation, no lock shared between threads, no
//! string: the routing table is an immutable snapshot that each thread caches
//! and revalidates with one atomic load.
//!
//! Control path ([`Stage::apply`], [`Stage::collect`], [`Stage::info`]):
//! serialized by a mutex the request path never takes. A rule builds a new
//! snapshot and publishes it atomically, so a request sees either the old or
//! the new routing, never a mix, and never waits for the update. Enforcement
//! rules change objects in place (objects are shared between snapshots).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::admission::{Admission, ForeignAdmission};
use crate::channel::{next_uid, Channel, ChannelModel, ObjectEntry, DEFAULT_OBJECT};
use crate::clock::{counter, SharedClock};
use crate::context::{with_thread, Context, RequestType, ThreadRef, ThreadState};
use crate::criticality::CriticalActivity;
use crate::differentiation::{Classifier, ClassifierSet, Matcher, Pattern};
use crate::object::{
    self, Admitted, EnforceError, EnforcementObject, ObjectConfig, Outcome, Request,
    TryEnforceError,
};
use crate::rule::{Rule, RuleError};
use crate::stats::{
    thread_slot, ChannelStats, Histograms, ObjectRecorder, ObjectStats, Sample, StageStats,
};
use crate::sync::atomic::AtomicU64;
use crate::sync::swap::ArcSwap;

/// Who a stage is: reported to the control plane (`stage_info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageIdentity {
    /// The stage's name.
    pub name: String,
    /// The process id.
    pub pid: u32,
    /// The host name.
    pub host: String,
    /// Free-form labels (`job = "train1"`).
    pub labels: BTreeMap<String, String>,
}

/// Description of one object, as [`Stage::info`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    /// Name in its channel.
    pub name: String,
    /// Kind (`noop`, `drl`, ...).
    pub kind: String,
    /// Current state, for built-in kinds.
    pub config: Option<ObjectConfig>,
}

/// Description of one channel, as [`Stage::info`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelInfo {
    /// Name.
    pub name: String,
    /// Objects in creation order.
    pub objects: Vec<ObjectInfo>,
    /// Object mappings in the order they were added.
    pub object_rules: Vec<(Pattern, String)>,
    /// Where unmatched requests of the channel go.
    pub default_object: String,
}

/// A stage's identity and configuration (`stage_info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageInfo {
    /// Who the stage is.
    #[serde(flatten)]
    pub identity: StageIdentity,
    /// Classifiers rules may use.
    pub classifiers: Vec<Classifier>,
    /// Channels in creation order.
    pub channels: Vec<ChannelInfo>,
    /// Channel mappings in the order they were added.
    pub channel_rules: Vec<(Pattern, String)>,
    /// Where requests matching no channel go (`None`: pass unenforced).
    pub default_channel: Option<String>,
}

/// The control path's view of the stage.
#[derive(Debug, Clone)]
struct Model {
    classifiers: ClassifierSet,
    channels: Vec<ChannelModel>,
    /// Index of each channel in `channels`, so rules resolve names in O(1).
    channel_by_name: HashMap<String, usize>,
    channel_rules: Vec<(Pattern, String)>,
    default_channel: Option<String>,
    /// The latest channels removed ([`crate::channel::KEPT_REMOVED`]), kept
    /// so that requests admitted before complete and are counted.
    removed: Vec<ChannelModel>,
    /// The counts of channels removed before those, so the stage's totals
    /// stay exact.
    removed_before: Sample,
}

/// The request path's view: an immutable snapshot.
#[derive(Debug)]
struct Table {
    channels: Box<[Channel]>,
    matcher: Matcher<u32>,
    default_channel: Option<u32>,
    /// Every channel's objects, channel after channel: a route is an index
    /// here (see [`Table::route`]), so a remembered route reaches its object
    /// without going through the channel.
    entries: Box<[Arc<ObjectEntry>]>,
    /// Index in `entries` of each channel's first object.
    first_entry: Box<[u32]>,
    /// [`type_bit`]s of the request types that may reach an object other
    /// than a Noop ([`Stage::passes_at_once`]).
    acting_types: u64,
}

/// A request type's bit in [`Table::acting_types`]: bit `t` for type `t`
/// below 63, bit 63 for every other type (custom ones included).
#[inline]
fn type_bit(t: RequestType) -> u64 {
    1 << t.raw().min(63)
}

/// The route of requests that match no channel.
const UNMATCHED: u32 = u32::MAX;

impl Table {
    fn new(
        channels: Box<[Channel]>,
        matcher: Matcher<u32>,
        default_channel: Option<u32>,
        acting_types: u64,
    ) -> Self {
        let mut first_entry = Vec::with_capacity(channels.len());
        let mut entries = Vec::new();
        for c in channels.iter() {
            first_entry.push(entries.len() as u32);
            entries.extend(c.objects().iter().cloned());
        }
        Table {
            channels,
            matcher,
            default_channel,
            entries: entries.into_boxed_slice(),
            first_entry: first_entry.into_boxed_slice(),
            acting_types,
        }
    }

    #[inline]
    fn select_channel_index(&self, ctx: &Context) -> Option<u32> {
        self.matcher.find(ctx).or(self.default_channel)
    }

    #[inline]
    fn select_channel(&self, ctx: &Context) -> Option<&Channel> {
        self.select_channel_index(ctx)
            .map(|i| &self.channels[i as usize])
    }

    /// Where `ctx` goes: an index into `entries`, or [`UNMATCHED`]. A pure
    /// function of the table and of the context's workflow, request type,
    /// request context, file class and criticality (never of its size).
    fn route(&self, ctx: &Context) -> u32 {
        match self.select_channel_index(ctx) {
            Some(c) => {
                self.first_entry[c as usize] + self.channels[c as usize].select_object_index(ctx)
            }
            None => UNMATCHED,
        }
    }
}

/// Entries of a thread's [`RouteMemo`]: 16, so the built-in request types a
/// small-files walk alternates (stat, open, read, close, ...: numbers 0 to
/// 15) each keep their own entry; with 4, stat and close shared one and
/// missed twice per file.
const MEMO_SLOTS: usize = 16;

/// A thread's last routes on one table, direct-mapped by request type: a
/// request whose workflow, type, request context and file class equal a
/// remembered one takes its route without differentiation. It lives with the
/// cached table it belongs to, so a new table starts with an empty memo.
#[derive(Debug, Clone, Copy, Default)]
struct RouteMemo([MemoEntry; MEMO_SLOTS]);

#[derive(Debug, Clone, Copy, Default)]
struct MemoEntry {
    workflow: u64,
    /// Type, request context, file class and criticality, with bit 48 set
    /// (so that the zeroed, empty entry never matches).
    key: u64,
    route: u32,
}

impl RouteMemo {
    /// The memo key of `ctx` (everything routing reads but the workflow).
    #[inline]
    fn key(ctx: &Context) -> u64 {
        u64::from(ctx.request_type.raw())
            | u64::from(ctx.request_context.raw()) << 16
            | u64::from(ctx.file_class.raw()) << 32
            | 1 << 48
            | u64::from(ctx.criticality.raw()) << 49
    }

    #[inline]
    fn route(&mut self, table: &Table, ctx: &Context) -> u32 {
        let key = Self::key(ctx);
        let e = &mut self.0[ctx.request_type.raw() as usize % MEMO_SLOTS];
        if e.key == key && e.workflow == ctx.workflow {
            return e.route;
        }
        Self::miss(e, table, ctx, key)
    }

    /// The remembered route of `ctx`, if any (never routes).
    #[inline]
    fn peek(&self, ctx: &Context) -> Option<u32> {
        let e = &self.0[ctx.request_type.raw() as usize % MEMO_SLOTS];
        (e.key == Self::key(ctx) && e.workflow == ctx.workflow).then_some(e.route)
    }

    #[cold]
    #[inline(never)]
    fn miss(e: &mut MemoEntry, table: &Table, ctx: &Context, key: u64) -> u32 {
        let route = table.route(ctx);
        *e = MemoEntry {
            workflow: ctx.workflow,
            key,
            route,
        };
        route
    }
}

impl Model {
    fn channel_index(&self, name: &str) -> Result<usize, RuleError> {
        self.channel_by_name
            .get(name)
            .copied()
            .ok_or_else(|| RuleError::UnknownChannel(shown_name(name)))
    }

    /// Whether the stage may have one object more
    /// ([`crate::rule::MAX_STAGE_OBJECTS`]).
    fn room_for_object(&self) -> Result<(), RuleError> {
        let objects: usize = self.channels.iter().map(|c| c.objects.len()).sum();
        if objects >= crate::rule::MAX_STAGE_OBJECTS {
            return Err(RuleError::TooMany {
                what: "the stage".into(),
                items: "objects",
                max: crate::rule::MAX_STAGE_OBJECTS,
            });
        }
        Ok(())
    }

    fn channel_mut(&mut self, name: &str) -> Result<&mut ChannelModel, RuleError> {
        let i = self.channel_index(name)?;
        Ok(&mut self.channels[i])
    }

    fn check_pattern(&self, pattern: &Pattern) -> Result<(), RuleError> {
        let used = pattern.classifiers();
        for c in Classifier::ALL {
            if used.contains(c) && !self.classifiers.contains(c) {
                return Err(RuleError::ClassifierDisabled {
                    pattern: pattern.to_string(),
                    classifier: c,
                    enabled: names(self.classifiers),
                });
            }
        }
        Ok(())
    }

    fn compile(&self) -> Table {
        let index = |name: &str| {
            self.channel_index(name)
                .expect("validated: rules name existing channels") as u32
        };
        Table::new(
            self.channels.iter().map(ChannelModel::compile).collect(),
            Matcher::compile(self.channel_rules.iter().map(|(p, c)| (p, index(c)))),
            self.default_channel.as_deref().map(index),
            self.acting_types(),
        )
    }

    /// [`type_bit`]s of the request types that may reach a channel holding
    /// an object other than a Noop: through a rule naming the type, through
    /// a rule naming no type (every type), or as the default channel (every
    /// type). Conservative: a rule's other classifiers are not looked at.
    fn acting_types(&self) -> u64 {
        let acts = |name: &str| {
            self.channel_index(name)
                .is_ok_and(|i| self.channels[i].objects.iter().any(|o| !o.noop))
        };
        let mut types = 0;
        if self.default_channel.as_deref().is_some_and(acts) {
            types = u64::MAX;
        }
        for (pattern, channel) in &self.channel_rules {
            if acts(channel) {
                types |= pattern.request_type.map_or(u64::MAX, type_bit);
            }
        }
        types
    }

    /// Applies `rule` to this model; `Ok(true)` when the routing changed.
    fn apply(
        &mut self,
        rule: &Rule,
        clock: &SharedClock,
        activity: &Arc<CriticalActivity>,
    ) -> Result<bool, RuleError> {
        match rule {
            Rule::CreateChannel { name } => {
                check_name(name)?;
                if self.channel_index(name).is_ok() {
                    return Err(RuleError::Exists {
                        what: "channel",
                        name: name.clone(),
                    });
                }
                if self.channels.len() >= crate::rule::MAX_CHANNELS {
                    return Err(RuleError::TooMany {
                        what: "the stage".into(),
                        items: "channels",
                        max: crate::rule::MAX_CHANNELS,
                    });
                }
                self.room_for_object()?;
                self.channel_by_name
                    .insert(name.clone(), self.channels.len());
                self.channels.push(ChannelModel::new(name.clone()));
            }
            Rule::RemoveChannel { name } => {
                let i = self.channel_index(name)?;
                if let Some((p, _)) = self.channel_rules.iter().find(|(_, c)| c == name) {
                    return Err(in_use("channel", name, format!("the mapping of {p}")));
                }
                if self.default_channel.as_deref() == Some(name) {
                    return Err(in_use("channel", name, "the default channel rule".into()));
                }
                let removed = self.channels.remove(i);
                self.channel_by_name = (self.channels.iter().enumerate())
                    .map(|(i, c)| (c.name.clone(), i))
                    .collect();
                crate::channel::keep_removed(
                    &mut self.removed,
                    &mut self.removed_before,
                    removed,
                    ChannelModel::sample,
                );
            }
            Rule::CreateObject {
                channel,
                name,
                config,
            } => {
                check_name(name)?;
                if name == DEFAULT_OBJECT {
                    return Err(RuleError::BadName {
                        name: name.clone(),
                        reason: "reserved for the channel's pass-through object",
                    });
                }
                let room = self.room_for_object();
                let ch = self.channel_mut(channel)?;
                if ch.object_index(name).is_some() {
                    return Err(RuleError::Exists {
                        what: "object",
                        name: name.clone(),
                    });
                }
                if ch.objects.len() >= crate::rule::MAX_OBJECTS {
                    return Err(RuleError::TooMany {
                        what: format!("channel {channel:?}"),
                        items: "objects",
                        max: crate::rule::MAX_OBJECTS,
                    });
                }
                room?;
                let object =
                    object::build(config, clock, activity).map_err(|source| RuleError::Config {
                        channel: channel.clone(),
                        object: name.clone(),
                        source,
                    })?;
                ch.objects.push(match config {
                    ObjectConfig::Noop => ObjectEntry::noop(name.clone()),
                    _ => ObjectEntry::new(name.clone(), object),
                });
            }
            Rule::RemoveObject { channel, name } => {
                let ch = self.channel_mut(channel)?;
                let i = ch
                    .object_index(name)
                    .ok_or_else(|| unknown_object(channel, name))?;
                if name == DEFAULT_OBJECT {
                    return Err(RuleError::BadName {
                        name: name.clone(),
                        reason: "the pass-through object cannot be removed",
                    });
                }
                if let Some((p, _)) = ch.rules.iter().find(|(_, o)| o == name) {
                    return Err(in_use(
                        "object",
                        name,
                        format!("the mapping of {p} in channel {channel:?}"),
                    ));
                }
                if ch.default_object == *name {
                    return Err(in_use(
                        "object",
                        name,
                        format!("channel {channel:?} as its default object"),
                    ));
                }
                let removed = ch.objects.remove(i);
                ch.retire(removed);
            }
            Rule::SetClassifiers { classifiers } => {
                let set = ClassifierSet::of(classifiers);
                let previous = std::mem::replace(&mut self.classifiers, set);
                let patterns = self
                    .channel_rules
                    .iter()
                    .chain(self.channels.iter().flat_map(|c| &c.rules))
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>();
                if let Err(e) = patterns.iter().try_for_each(|p| self.check_pattern(p)) {
                    self.classifiers = previous;
                    return Err(e);
                }
                return Ok(false);
            }
            Rule::MapChannel { pattern, channel } => {
                self.check_pattern(pattern)?;
                self.channel_index(channel)?;
                upsert(&mut self.channel_rules, *pattern, channel.clone(), || {
                    "the stage".into()
                })?;
            }
            Rule::UnmapChannel { pattern } => remove_pattern(&mut self.channel_rules, pattern)?,
            Rule::SetDefaultChannel { channel } => {
                if let Some(c) = channel {
                    self.channel_index(c)?;
                }
                self.default_channel = channel.clone();
            }
            Rule::MapObject {
                channel,
                pattern,
                object,
            } => {
                self.check_pattern(pattern)?;
                let ch = self.channel_mut(channel)?;
                ch.object_index(object)
                    .ok_or_else(|| unknown_object(channel, object))?;
                upsert(&mut ch.rules, *pattern, object.clone(), || {
                    format!("channel {channel:?}")
                })?;
            }
            Rule::UnmapObject { channel, pattern } => {
                remove_pattern(&mut self.channel_mut(channel)?.rules, pattern)?
            }
            Rule::SetDefaultObject { channel, object } => {
                let ch = self.channel_mut(channel)?;
                ch.object_index(object)
                    .ok_or_else(|| unknown_object(channel, object))?;
                ch.default_object = object.clone();
            }
            Rule::Configure {
                channel,
                object,
                config,
            } => {
                let ch = &self.channels[self.channel_index(channel)?];
                let i = ch
                    .object_index(object)
                    .ok_or_else(|| unknown_object(channel, object))?;
                ch.objects[i]
                    .object
                    .configure(config)
                    .map_err(|source| RuleError::Config {
                        channel: channel.clone(),
                        object: object.clone(),
                        source,
                    })?;
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn names(set: ClassifierSet) -> String {
    let v: Vec<String> = set.to_vec().iter().map(|c| c.to_string()).collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

fn in_use(what: &'static str, name: &str, by: String) -> RuleError {
    RuleError::InUse {
        what,
        name: name.to_string(),
        by,
    }
}

fn unknown_object(channel: &str, object: &str) -> RuleError {
    RuleError::UnknownObject {
        channel: shown_name(channel),
        object: shown_name(object),
    }
}

/// A name a rule gave, as an error shows it: one longer than any name may
/// be (a 100 MB one made a 100 MB message) is cut after 128 bytes, with its
/// length said.
fn shown_name(name: &str) -> String {
    const SHOWN: usize = 128;
    if name.len() <= SHOWN {
        return name.to_string();
    }
    let mut end = SHOWN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len())
}

fn check_name(name: &str) -> Result<(), RuleError> {
    let bad = |reason| {
        Err(RuleError::BadName {
            name: name.chars().take(80).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > 128 {
        return bad("longer than 128 bytes");
    }
    if name.chars().any(|c| c.is_control()) {
        return bad("contains control characters");
    }
    Ok(())
}

/// Maps `pattern` to `target` in `rules` (those of `owner`), replacing the
/// target of an identical pattern; a new pattern beyond
/// [`crate::rule::MAX_MAPPINGS`] is refused.
fn upsert(
    rules: &mut Vec<(Pattern, String)>,
    pattern: Pattern,
    target: String,
    owner: impl FnOnce() -> String,
) -> Result<(), RuleError> {
    let full = rules.len() >= crate::rule::MAX_MAPPINGS;
    match rules.iter_mut().find(|(p, _)| *p == pattern) {
        Some(r) => r.1 = target,
        None if full => {
            return Err(RuleError::TooMany {
                what: owner(),
                items: "mappings",
                max: crate::rule::MAX_MAPPINGS,
            })
        }
        None => rules.push((pattern, target)),
    }
    Ok(())
}

fn remove_pattern(rules: &mut Vec<(Pattern, String)>, pattern: &Pattern) -> Result<(), RuleError> {
    let i = rules
        .iter()
        .position(|(p, _)| p == pattern)
        .ok_or_else(|| RuleError::UnknownPattern(pattern.to_string()))?;
    rules.remove(i);
    Ok(())
}

/// Collection bookkeeping: the previous cumulative sample of each thing.
#[derive(Debug, Default)]
struct Collected {
    at_ns: u64,
    previous: HashMap<u64, Sample>,
}

/// A data plane stage. Share it between threads (`Arc<Stage>` or a static):
/// every method takes `&self`.
#[derive(Debug)]
pub struct Stage {
    identity: StageIdentity,
    uid: u64,
    clock: SharedClock,
    /// Whether `clock` is the process's counter clock reading the
    /// time-stamp counter: latency ticks are then read inline.
    tsc_ticks: bool,
    /// Its critical requests, whichever object they go through.
    activity: Arc<CriticalActivity>,
    model: Mutex<Model>,
    table: ArcSwap<Table>,
    generation: AtomicU64,
    unmatched: ObjectRecorder,
    /// Its completed critical requests, whichever object they went through.
    critical: ObjectRecorder,
    collected: Mutex<Collected>,
}

const UNMATCHED_KEY: u64 = 0;
const REMOVED_KEY: u64 = u64::MAX;
const CRITICAL_KEY: u64 = u64::MAX - 1;
const TABLE_CACHE_SLOTS: usize = 4;

pub(crate) struct CachedTable {
    stage: u64,
    generation: u64,
    table: Arc<Table>,
    memo: RouteMemo,
}

impl CachedTable {
    /// Whether this is stage `uid`'s table of `generation`.
    #[inline]
    fn is(&self, uid: u64, generation: u64) -> bool {
        self.stage == uid && self.generation == generation
    }
}

/// A thread's cache of routing tables, direct-mapped by stage uid. It lives
/// in the thread's [`ThreadState`] (one thread-local for everything the
/// request path keeps per thread), which has no destructor: the cached `Arc`s
/// are released at thread exit by [`TableOwner`], registered when the thread
/// first caches a table.
pub(crate) struct TableCache {
    slots: ManuallyDrop<RefCell<[Option<CachedTable>; TABLE_CACHE_SLOTS]>>,
}

impl TableCache {
    pub(crate) const fn new() -> Self {
        Self {
            slots: ManuallyDrop::new(RefCell::new([None, None, None, None])),
        }
    }
}

thread_local! {
    /// Empties the thread's table cache when the thread exits.
    static TABLE_OWNER: TableOwner = const { TableOwner };
}

/// Releases the thread's cached tables at thread exit. Once it has run (or
/// while it runs), [`Stage::refresh`] caches nothing more on the thread, so
/// no reference outlives the thread.
struct TableOwner;

impl Drop for TableOwner {
    fn drop(&mut self) {
        with_thread(|t| {
            if let Ok(mut slots) = t.tables.slots.try_borrow_mut() {
                *slots = [None, None, None, None];
            }
        });
    }
}

/// Runs `enforce` on a [`Request`] carrying `data` and builds the [`Outcome`]
/// in the caller's frame: only a two-register result crosses the layers
/// below.
#[inline]
fn with_request<E>(
    data: Option<&[u8]>,
    enforce: impl FnOnce(&mut Request<'_>) -> Result<u64, E>,
) -> Result<Outcome, E> {
    let mut request = Request::new(data);
    let waited_ns = enforce(&mut request)?;
    Ok(Outcome {
        waited_ns,
        data: request.into_replacement(),
    })
}

/// A stage handle owned by one thread: see [`Stage::handle`]. It holds the
/// routing table it last used (an `Arc`), released when the handle is
/// dropped or sees a newer table.
#[derive(Debug)]
pub struct StageHandle<'s> {
    stage: &'s Stage,
    generation: u64,
    table: Arc<Table>,
}

impl StageHandle<'_> {
    /// The stage this handle belongs to.
    pub fn stage(&self) -> &Stage {
        self.stage
    }

    #[inline]
    fn current(&mut self) -> &Table {
        let generation = self.stage.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.refresh(generation);
        }
        &self.table
    }

    #[cold]
    fn refresh(&mut self, generation: u64) {
        self.generation = generation;
        self.table = self.stage.table.load_full();
    }

    /// [`Stage::enforce`] through this handle.
    #[inline]
    pub fn enforce(&mut self, ctx: &Context, data: Option<&[u8]>) -> Result<Outcome, EnforceError> {
        let stage = self.stage;
        let table = self.current();
        let slot = with_thread(thread_slot);
        with_request(data, |request| {
            stage.enforce_on(table, ctx, request, slot, |channel, request, slot| {
                channel.enforce(ctx, request, slot)
            })
        })
    }

    /// [`Stage::try_enforce`] through this handle.
    #[inline]
    pub fn try_enforce(
        &mut self,
        ctx: &Context,
        data: Option<&[u8]>,
    ) -> Result<Outcome, TryEnforceError> {
        let stage = self.stage;
        let table = self.current();
        let slot = with_thread(thread_slot);
        with_request(data, |request| {
            stage.enforce_on(table, ctx, request, slot, |channel, request, slot| {
                channel.try_enforce(ctx, request, slot)
            })
        })
    }
}

/// Builds a [`Stage`].
#[derive(Debug, Clone)]
pub struct StageBuilder {
    name: String,
    labels: BTreeMap<String, String>,
    clock: Option<SharedClock>,
}

impl StageBuilder {
    /// Adds a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Uses `clock` for the stage and its objects (default: the process's
    /// [`crate::clock::CounterClock`], [`crate::clock::counter`]).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// An empty stage: no channels, every classifier enabled, requests pass
    /// unenforced (counted as `unmatched`) until rules say otherwise.
    pub fn build(self) -> Stage {
        let tsc_ticks = self.clock.is_none() && crate::clock::counter_is_tsc();
        let clock = self.clock.unwrap_or_else(counter);
        let model = Model {
            classifiers: ClassifierSet::ALL,
            channels: Vec::new(),
            channel_by_name: HashMap::new(),
            channel_rules: Vec::new(),
            default_channel: None,
            removed: Vec::new(),
            removed_before: Sample::default(),
        };
        let table = model.compile();
        Stage {
            identity: StageIdentity {
                name: self.name,
                pid: std::process::id(),
                host: hostname(),
                labels: self.labels,
            },
            uid: next_uid(),
            collected: Mutex::new(Collected {
                at_ns: clock.now_ns(),
                previous: HashMap::new(),
            }),
            clock,
            tsc_ticks,
            activity: Arc::default(),
            model: Mutex::new(model),
            table: ArcSwap::from_pointee(table),
            generation: AtomicU64::new(0),
            unmatched: ObjectRecorder::default(),
            critical: ObjectRecorder::default(),
        }
    }
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

impl Stage {
    /// Starts building a stage called `name`.
    pub fn builder(name: impl Into<String>) -> StageBuilder {
        StageBuilder {
            name: name.into(),
            labels: BTreeMap::new(),
            clock: None,
        }
    }

    /// The stage's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// [`crate::Clock::ticks`] of the stage's clock, inline where it is the
    /// time-stamp counter.
    #[inline(always)]
    fn ticks(&self) -> u64 {
        if self.tsc_ticks {
            crate::clock::counter_ticks()
        } else {
            self.clock.ticks()
        }
    }

    /// Runs `f` on the current routing table without touching its reference
    /// count: the thread's cached snapshot (in `t`, the calling thread's
    /// state) and its route memo when it is current, else a fresh one (cached
    /// for the next request), without a memo when nothing may be cached.
    #[inline]
    fn with_table<R>(
        &self,
        t: &ThreadState,
        f: impl FnOnce(&Table, Option<&mut RouteMemo>) -> R,
    ) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        // `f` is called in one place only, so it is inlined.
        let fresh;
        let mut slots = t.tables.slots.try_borrow_mut();
        let (table, memo): (&Table, Option<&mut RouteMemo>) = match &mut slots {
            Ok(slots) => {
                let slot = &mut slots[self.uid as usize % TABLE_CACHE_SLOTS];
                let current = matches!(slot, Some(c) if c.is(self.uid, generation));
                let cached = if current {
                    slot.as_mut()
                } else {
                    self.refresh(slot, generation)
                };
                match cached {
                    Some(c) => (&c.table, Some(&mut c.memo)),
                    // During thread exit: nothing may be cached any more.
                    None => {
                        fresh = self.table.load();
                        (&fresh, None)
                    }
                }
            }
            // Re-entered from inside an object.
            Err(_) => {
                fresh = self.table.load();
                (&fresh, None)
            }
        };
        f(table, memo)
    }

    /// Caches the current table in `slot`, unless the thread is exiting.
    #[cold]
    fn refresh<'c>(
        &self,
        slot: &'c mut Option<CachedTable>,
        generation: u64,
    ) -> Option<&'c mut CachedTable> {
        // Registers the owner that empties the cache at thread exit; fails
        // once it has run, and then nothing is cached.
        TABLE_OWNER.try_with(|_| ()).ok()?;
        Some(slot.insert(CachedTable {
            stage: self.uid,
            generation,
            table: self.table.load_full(),
            memo: RouteMemo::default(),
        }))
    }

    /// Enforces one request: selects its channel and object from `ctx` and
    /// applies the object, blocking if its mechanism says so. `data` is the
    /// request's content if the caller has it; it is never copied unless an
    /// object transforms it (then [`Outcome::data`] holds the new content).
    /// Requests matching no channel pass at once and are counted as
    /// unmatched.
    #[inline]
    pub fn enforce(&self, ctx: &Context, data: Option<&[u8]>) -> Result<Outcome, EnforceError> {
        with_thread(|t| {
            self.dispatch(t, ctx, data, |channel, request, slot| {
                channel.enforce(ctx, request, slot)
            })
        })
    }

    /// [`Stage::enforce`] without data on the thread whose state `thread`
    /// is (the calling thread: a [`ThreadRef`] never leaves its thread),
    /// returning the time waited: no thread-local lookup at all. `ctx` is
    /// typically [`ThreadRef::context`] with overrides; anything an object
    /// puts in the request is dropped.
    #[inline]
    pub fn enforce_on_thread(
        &self,
        thread: ThreadRef<'_>,
        ctx: &Context,
    ) -> Result<u64, EnforceError> {
        let t = thread.0;
        let slot = thread_slot(t);
        let mut request = Request::new(None);
        self.with_table(t, |table, memo| match memo {
            Some(memo) => match table.entries.get(memo.route(table, ctx) as usize) {
                Some(entry) => entry.enforce(ctx, &mut request, slot),
                None => {
                    self.unmatched.record_at(slot, ctx.size, 0);
                    Ok(0)
                }
            },
            None => self.enforce_on(table, ctx, &mut request, slot, |channel, request, slot| {
                channel.enforce(ctx, request, slot)
            }),
        })
    }

    /// Counts a request the way [`Stage::enforce_on_thread`] would when the
    /// calling thread already knows where it goes and it goes through at
    /// once: the thread's cached routing table is the current one, its route
    /// memo holds `ctx`, and that route is a Noop object or no channel.
    /// Returns `true` when it counted the request; otherwise `false`, having
    /// changed nothing, and the caller enforces it with
    /// [`Stage::enforce_on_thread`]. Never blocks, allocates, registers
    /// anything or calls the C library (so it leaves errno alone): the
    /// interposer counts its metadata calls through it without entering its
    /// guard.
    #[inline(always)]
    pub fn pass_on_thread(&self, thread: ThreadRef<'_>, ctx: &Context) -> bool {
        let t = thread.0;
        // A thread without a statistics slot claims one on the full path.
        let slot = t.slot.get();
        if slot == crate::stats::UNASSIGNED {
            return false;
        }
        let generation = self.generation.load(Ordering::Acquire);
        let Ok(slots) = t.tables.slots.try_borrow() else {
            return false;
        };
        let Some(cached) = slots[self.uid as usize % TABLE_CACHE_SLOTS]
            .as_ref()
            .filter(|c| c.is(self.uid, generation))
        else {
            return false;
        };
        let Some(route) = cached.memo.peek(ctx) else {
            return false;
        };
        match cached.table.entries.get(route as usize) {
            Some(entry) if entry.noop => entry.recorder.record_at(slot, ctx.size, 0),
            Some(_) => return false,
            None => self.unmatched.record_at(slot, ctx.size, 0),
        }
        true
    }

    /// Whether every request of type `rt` passes the current routing table
    /// at once, whatever the rest of its context: no channel it can reach
    /// (through a rule naming `rt` or no request type, or as the default
    /// channel) holds an object other than a Noop, so all such a request
    /// meets is counting. Conservative (`false` may be said of a type whose
    /// requests would all pass); holds until a rule changes the routing.
    pub fn passes_at_once(&self, rt: RequestType) -> bool {
        self.table.load().acting_types & type_bit(rt) == 0
    }

    /// Admit phase of a two-phase request ([`crate::admission`]): routes
    /// `ctx` and applies its object's admit phase before the caller issues
    /// the call, blocking as long as the object's mechanism demands.
    /// `ctx.size` is the size the call asks for. The request is counted when
    /// it is completed; a refused request is counted now, and has nothing to
    /// complete.
    #[inline]
    pub fn admit(&self, ctx: &Context) -> Result<Admission, EnforceError> {
        with_thread(|t| self.admit_in(t, ctx))
    }

    /// [`Stage::admit`] on the thread whose state `thread` is (the calling
    /// thread), with no thread-local lookup: the interposer's path.
    #[inline]
    pub fn admit_on_thread(
        &self,
        thread: ThreadRef<'_>,
        ctx: &Context,
    ) -> Result<Admission, EnforceError> {
        self.admit_in(thread.0, ctx)
    }

    /// [`Stage::admit_on_thread`] that never waits
    /// ([`EnforcementObject::try_admit`]): for a caller holding admissions
    /// of its own while it asks, which a blocking admission could wait for
    /// forever (the interposer keeping several pieces of one call in
    /// flight). [`TryEnforceError::Wait`]: nothing was taken or counted;
    /// complete some of the caller's own requests, or admit with
    /// [`Stage::admit_on_thread`] once it holds none.
    #[inline]
    pub fn try_admit_on_thread(
        &self,
        thread: ThreadRef<'_>,
        ctx: &Context,
    ) -> Result<Admission, TryEnforceError> {
        self.admit_with(
            thread.0,
            ctx,
            |o| o.try_admit(ctx),
            |e| match e {
                TryEnforceError::Refused(_) => true,
                TryEnforceError::Wait(_) => false,
            },
        )
    }

    #[inline]
    fn admit_in(&self, t: &ThreadState, ctx: &Context) -> Result<Admission, EnforceError> {
        self.admit_with(t, ctx, |o| o.admit(ctx), |_| true)
    }

    /// Routes `ctx` and admits it with `admit` on its object; an error for
    /// which `refused` is true counts the request now.
    #[inline]
    fn admit_with<E>(
        &self,
        t: &ThreadState,
        ctx: &Context,
        admit: impl FnOnce(&dyn EnforcementObject) -> Result<Admitted, E>,
        refused: impl FnOnce(&E) -> bool,
    ) -> Result<Admission, E> {
        let (entry, route, admitted) = self.with_table(t, |table, memo| {
            let route = match memo {
                Some(memo) => memo.route(table, ctx),
                None => table.route(ctx),
            };
            let Some(e) = table.entries.get(route as usize) else {
                return Ok((0, route, Admitted::default()));
            };
            if e.noop {
                return Ok((e.uid, route, Admitted::default()));
            }
            match admit(&*e.object) {
                Ok(admitted) => Ok((e.uid, route, admitted)),
                Err(err) => {
                    if refused(&err) {
                        e.recorder.record_at(thread_slot(t), ctx.size, 0);
                    }
                    Err(err)
                }
            }
        })?;
        // Other processes' priority objects hold their non-critical requests
        // back while this one is in flight.
        let board = if ctx.criticality.is_critical() {
            self.activity.admitted();
            crate::criticality::board().inspect(|b| b.critical_admitted())
        } else {
            None
        };
        Ok(Admission {
            ctx: *ctx,
            stage: self.uid,
            entry,
            route,
            note: admitted.note,
            on_board: board.is_some(),
            waited_ns: admitted.waited_ns,
            start_ticks: self.ticks(),
        })
    }

    /// The piece size a layer that can split calls should issue a request of
    /// `ctx` as ([`EnforcementObject::split_size`] of the object it routes
    /// to), on the calling thread whose state `thread` is; `None`: do not
    /// split. Routing only: nothing is enforced or counted.
    #[inline]
    pub fn split_size_on_thread(&self, thread: ThreadRef<'_>, ctx: &Context) -> Option<u64> {
        self.with_table(thread.0, |table, memo| {
            let route = match memo {
                Some(memo) => memo.route(table, ctx),
                None => table.route(ctx),
            };
            let e = table.entries.get(route as usize)?;
            if e.noop {
                None
            } else {
                e.object.split_size(ctx)
            }
        })
    }

    /// Whether admitting a request of `ctx` would charge its size
    /// ([`EnforcementObject::charges_bytes`] of the object it routes to), on
    /// the calling thread whose state `thread` is. Routing only: nothing is
    /// enforced or counted.
    #[inline]
    pub fn charges_bytes_on_thread(&self, thread: ThreadRef<'_>, ctx: &Context) -> bool {
        self.with_table(thread.0, |table, memo| {
            let route = match memo {
                Some(memo) => memo.route(table, ctx),
                None => table.route(ctx),
            };
            table
                .entries
                .get(route as usize)
                .is_some_and(|e| !e.noop && e.object.charges_bytes(ctx))
        })
    }

    /// Promotes the requests kernel thread `thread` has waiting in the
    /// stage's objects to critical ([`EnforcementObject::promote_thread`]):
    /// a critical thread waits for that thread ([`crate::inheritance`]).
    /// Returns how many were promoted. Off the request path: it walks the
    /// current table's objects.
    pub fn promote_thread(&self, thread: u64) -> u32 {
        let table = self.table.load();
        table
            .entries
            .iter()
            .filter(|e| e.two_phase)
            .map(|e| e.object.promote_thread(thread))
            .sum()
    }

    /// Complete phase of a two-phase request: its call returned having moved
    /// `moved` bytes (0 on error). Runs the object's complete phase (a rate
    /// limiter refunds what was not moved, a priority object frees the slot)
    /// and counts the request with `moved` bytes, its wait and the call's
    /// latency. Never blocks. Works after rule changes, also when the
    /// admitting object was removed meanwhile.
    #[inline]
    pub fn complete(&self, admission: Admission, moved: u64) -> Result<(), ForeignAdmission> {
        with_thread(|t| self.complete_in(t, admission, moved, true))
    }

    /// [`Stage::complete`] on the thread whose state `thread` is (the calling
    /// thread), with no thread-local lookup: the interposer's path.
    #[inline]
    pub fn complete_on_thread(
        &self,
        thread: ThreadRef<'_>,
        admission: Admission,
        moved: u64,
    ) -> Result<(), ForeignAdmission> {
        self.complete_in(thread.0, admission, moved, true)
    }

    /// [`Stage::complete_on_thread`] for a call whose completion the layer
    /// does not see, completed when it was handed over (an asynchronous
    /// submission: libaio's `io_submit`): the object's complete phase (a
    /// rate limiter refunds what was not `moved`, i.e. not submitted; a
    /// priority object frees its slot at submission) and the counts, but no
    /// latency sample, since the call's latency is unknown.
    #[inline]
    pub fn complete_untimed_on_thread(
        &self,
        thread: ThreadRef<'_>,
        admission: Admission,
        moved: u64,
    ) -> Result<(), ForeignAdmission> {
        self.complete_in(thread.0, admission, moved, false)
    }

    #[inline]
    fn complete_in(
        &self,
        t: &ThreadState,
        a: Admission,
        moved: u64,
        timed: bool,
    ) -> Result<(), ForeignAdmission> {
        let end_ticks = timed.then(|| self.ticks());
        let latency = end_ticks.map(|end| end.saturating_sub(a.start_ticks));
        if a.stage != self.uid {
            return Err(ForeignAdmission);
        }
        let slot = thread_slot(t);
        if a.ctx.criticality.is_critical() {
            let end = end_ticks.unwrap_or_else(|| self.ticks());
            self.activity.completed(end);
            if a.on_board {
                if let Some(b) = crate::criticality::board() {
                    b.critical_completed(self.clock.monotonic_ns_at(end));
                }
            }
            self.critical
                .record_completion_at(slot, moved, a.waited_ns, latency);
        }
        let finish = |e: &ObjectEntry| {
            if e.two_phase {
                e.object.complete(&a.ctx, a.note, moved);
            }
            e.recorder
                .record_completion_at(slot, moved, a.waited_ns, latency);
        };
        if a.entry == 0 {
            self.unmatched
                .record_completion_at(slot, moved, a.waited_ns, latency);
            return Ok(());
        }
        let found = self.with_table(t, |table, _| match table.entries.get(a.route as usize) {
            Some(e) if e.uid == a.entry => {
                finish(e);
                true
            }
            _ => false,
        });
        if !found {
            // The routing changed since admission: find the object itself.
            if let Some(e) = self.entry_by_uid(a.entry) {
                finish(&e);
            }
        }
        Ok(())
    }

    /// The object with uid `uid`, live or removed (the model keeps removed
    /// objects for their counts).
    #[cold]
    fn entry_by_uid(&self, uid: u64) -> Option<Arc<ObjectEntry>> {
        let model = self.model();
        model
            .channels
            .iter()
            .chain(&model.removed)
            .flat_map(|c| c.objects.iter().chain(&c.retired))
            .find(|e| e.uid == uid)
            .cloned()
    }

    /// Non-blocking [`Stage::enforce`]: the request is admitted (and counted)
    /// only if its object lets it go at once; otherwise nothing changes and
    /// [`TryEnforceError::Wait`] says how long it would wait, so an
    /// event-driven caller can retry later instead of blocking a thread.
    #[inline]
    pub fn try_enforce(
        &self,
        ctx: &Context,
        data: Option<&[u8]>,
    ) -> Result<Outcome, TryEnforceError> {
        with_thread(|t| {
            self.dispatch(t, ctx, data, |channel, request, slot| {
                channel.try_enforce(ctx, request, slot)
            })
        })
    }

    /// Routes `ctx` to its channel and runs `enforce` there (or counts it as
    /// unmatched), on the current routing table.
    #[inline]
    fn dispatch<E>(
        &self,
        t: &ThreadState,
        ctx: &Context,
        data: Option<&[u8]>,
        enforce: impl FnOnce(&Channel, &mut Request<'_>, usize) -> Result<u64, E>,
    ) -> Result<Outcome, E> {
        let slot = thread_slot(t);
        with_request(data, |request| {
            self.with_table(t, |table, _| {
                self.enforce_on(table, ctx, request, slot, enforce)
            })
        })
    }

    /// Routes `ctx` on `table`, recording in the calling thread's counter
    /// slot `slot`. Only a two-register result crosses the layers below;
    /// callers assemble the [`Outcome`] in their own frame.
    #[inline]
    fn enforce_on<E>(
        &self,
        table: &Table,
        ctx: &Context,
        request: &mut Request<'_>,
        slot: usize,
        enforce: impl FnOnce(&Channel, &mut Request<'_>, usize) -> Result<u64, E>,
    ) -> Result<u64, E> {
        match table.select_channel(ctx) {
            Some(channel) => enforce(channel, request, slot),
            None => {
                self.unmatched.record_at(slot, ctx.size, 0);
                Ok(0)
            }
        }
    }

    /// A handle for one thread (or task) that keeps the current routing table
    /// itself, so its [`StageHandle::enforce`] skips the thread-local table
    /// cache of [`Stage::enforce`]: one atomic load checks that the table is
    /// current. Same semantics as the stage's own calls.
    pub fn handle(&self) -> StageHandle<'_> {
        let generation = self.generation.load(Ordering::Acquire);
        StageHandle {
            stage: self,
            generation,
            table: self.table.load_full(),
        }
    }

    /// Where `ctx` would go: `(channel, object)` names, or `None` when it
    /// matches no channel. Does not enforce or count anything.
    pub fn route(&self, ctx: &Context) -> Option<(String, String)> {
        with_thread(|thread| {
            self.with_table(thread, |t, _| {
                let channel = t.select_channel(ctx)?;
                Some((
                    channel.name.clone(),
                    channel.select_object(ctx).name.clone(),
                ))
            })
        })
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one rule atomically: on error the stage is unchanged.
    pub fn apply(&self, rule: &Rule) -> Result<(), RuleError> {
        self.apply_all(std::slice::from_ref(rule))
    }

    /// Applies rules in order as one transaction: all take effect, or none
    /// does and the error of the first failing rule is returned with its
    /// index. Enforcement rules already applied to objects before a later
    /// failure are rolled back.
    pub fn apply_all(&self, rules: &[Rule]) -> Result<(), RuleError> {
        self.try_apply_all(rules).map_err(|(_, e)| e)
    }

    /// Like [`Stage::apply_all`], also telling which rule failed.
    pub fn try_apply_all(&self, rules: &[Rule]) -> Result<(), (usize, RuleError)> {
        let mut model = self.model();
        let mut next = model.clone();
        let mut rerouted = false;
        let mut undo: Vec<(Arc<ObjectEntry>, ObjectConfig)> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            if let Rule::Configure {
                channel, object, ..
            } = rule
            {
                if let Some(entry) = next.channel_index(channel).ok().and_then(|c| {
                    next.channels[c]
                        .object_index(object)
                        .map(|o| next.channels[c].objects[o].clone())
                }) {
                    undo.push((entry.clone(), entry.object.config()));
                }
            }
            match next.apply(rule, &self.clock, &self.activity) {
                Ok(changed) => rerouted |= changed,
                Err(e) => {
                    for (entry, config) in undo.into_iter().rev() {
                        // Restoring a state the object had cannot fail.
                        let _ = entry.object.configure(&config);
                    }
                    return Err((i, e));
                }
            }
        }
        if rerouted {
            self.table.store(Arc::new(next.compile()));
            self.generation.fetch_add(1, Ordering::Release);
        }
        *model = next;
        Ok(())
    }

    /// Adds an object of a kind defined outside this crate to `channel`.
    /// It can then be mapped and configured like built-in ones.
    pub fn add_object(
        &self,
        channel: &str,
        name: &str,
        object: Arc<dyn EnforcementObject>,
    ) -> Result<(), RuleError> {
        check_name(name)?;
        let mut model = self.model();
        let mut next = model.clone();
        let ch = next.channel_mut(channel)?;
        if name == DEFAULT_OBJECT || ch.object_index(name).is_some() {
            return Err(RuleError::Exists {
                what: "object",
                name: name.to_string(),
            });
        }
        ch.objects.push(ObjectEntry::new(name.to_string(), object));
        self.table.store(Arc::new(next.compile()));
        self.generation.fetch_add(1, Ordering::Release);
        *model = next;
        Ok(())
    }

    /// `stage_info`: identity and current configuration.
    pub fn info(&self) -> StageInfo {
        let model = self.model();
        StageInfo {
            identity: self.identity.clone(),
            classifiers: model.classifiers.to_vec(),
            channels: model
                .channels
                .iter()
                .map(|c| ChannelInfo {
                    name: c.name.clone(),
                    objects: c
                        .objects
                        .iter()
                        .map(|o| {
                            let config = o.object.config();
                            ObjectInfo {
                                name: o.name.clone(),
                                kind: o.object.kind().to_string(),
                                config: Some(config),
                            }
                        })
                        .collect(),
                    object_rules: c.rules.clone(),
                    default_object: c.default_object.clone(),
                })
                .collect(),
            channel_rules: model.channel_rules.clone(),
            default_channel: model.default_channel.clone(),
        }
    }

    /// The stage's identity.
    pub fn identity(&self) -> &StageIdentity {
        &self.identity
    }

    /// `collect`: statistics of every channel and object; interval figures
    /// cover the time since the previous call.
    pub fn collect(&self) -> StageStats {
        self.collect_with(false)
    }

    /// [`Stage::collect`], each channel with its wait and latency
    /// distributions ([`ChannelStats::histograms`]), from the same counts:
    /// for a statistics file that a reader merges with other processes'.
    pub fn collect_histograms(&self) -> StageStats {
        self.collect_with(true)
    }

    fn collect_with(&self, histograms: bool) -> StageStats {
        let model = self.model();
        let mut collected = self.collected.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.now_ns();
        let interval = now.saturating_sub(collected.at_ns);
        // The clock's rate is asked for only when a latency needs
        // converting: the interposer's clock measures it, waiting for the
        // rest of its calibration if the process is young, and a process
        // that recorded no latency never needs it.
        let rate = std::cell::OnceCell::new();
        let ns_per_tick = |sample: &Sample| {
            if sample.latency.waited() == 0 {
                1.0
            } else {
                *rate.get_or_init(|| self.clock.ns_per_tick())
            }
        };
        let mut previous = std::mem::take(&mut collected.previous);
        let mut seen = HashMap::new();
        let mut counts = |key: u64, sample: Sample| {
            let before = previous.remove(&key).unwrap_or_default();
            let c = sample.counts_since(&before, interval, ns_per_tick(&sample));
            seen.insert(key, sample);
            c
        };
        let channels = model
            .channels
            .iter()
            .map(|ch| {
                let objects: Vec<ObjectStats> = ch
                    .objects
                    .iter()
                    .map(|o| ObjectStats {
                        name: o.name.clone(),
                        kind: o.object.kind().to_string(),
                        counts: crate::stats::Counts {
                            waiting: o.object.waiting_now(),
                            ..counts(o.uid, o.recorder.sample())
                        },
                    })
                    .collect();
                let sample = ch.sample();
                let histograms = histograms.then(|| Histograms {
                    wait: sample.waits.latency_buckets(1.0),
                    latency: sample.latency.latency_buckets(ns_per_tick(&sample)),
                });
                ChannelStats {
                    name: ch.name.clone(),
                    counts: crate::stats::Counts {
                        waiting: objects.iter().map(|o| o.counts.waiting).sum(),
                        ..counts(ch.uid, sample)
                    },
                    objects,
                    histograms,
                }
            })
            .collect();
        let unmatched = counts(UNMATCHED_KEY, self.unmatched.sample());
        let mut removed_sample = model.removed_before.clone();
        for ch in &model.removed {
            removed_sample.merge(&ch.sample());
        }
        let removed = counts(REMOVED_KEY, removed_sample);
        let critical_sample = self.critical.sample();
        let critical_latency = critical_sample
            .latency
            .latency_buckets(ns_per_tick(&critical_sample));
        let critical = counts(CRITICAL_KEY, critical_sample);
        collected.previous = seen;
        collected.at_ns = now;
        StageStats {
            stage: self.identity.name.clone(),
            collected_at_ns: now,
            interval_ns: interval,
            channels,
            unmatched,
            removed,
            critical,
            critical_latency,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::context::{RequestContext, RequestType};
    use crate::object::{ConfigError, DrlConfig};
    use crate::units::Rate;
    use std::time::Duration;

    fn rc(name: &str) -> RequestContext {
        RequestContext::named(name).unwrap()
    }

    fn ctx(t: RequestType, c: RequestContext, size: u64) -> Context {
        Context::explicit(1, t, c, size)
    }

    fn route(stage: &Stage, c: &Context) -> Option<(String, String)> {
        stage.route(c)
    }

    fn pair(a: &str, b: &str) -> Option<(String, String)> {
        Some((a.to_string(), b.to_string()))
    }

    fn channel(name: &str) -> Rule {
        Rule::CreateChannel { name: name.into() }
    }

    fn drl(channel: &str, name: &str, rate: Rate) -> Rule {
        Rule::CreateObject {
            channel: channel.into(),
            name: name.into(),
            config: ObjectConfig::Drl(DrlConfig::new(rate)),
        }
    }

    fn by_context(c: RequestContext) -> Pattern {
        Pattern {
            request_context: Some(c),
            ..Pattern::ANY
        }
    }

    const TWO_PHASE_POLICY: &str = r#"
        [[channel]]
        name = "bg"
        match = { criticality = "normal" }
        default_object = "prio"
        [[channel.object]]
        name = "prio"
        kind = "priority"
        depth = 1
        [[channel]]
        name = "limited"
        match = { request_type = "write", criticality = "normal" }
        default_object = "limit"
        [[channel.object]]
        name = "limit"
        kind = "drl"
        rate = "1000B/s"
        burst = 1000
    "#;

    fn two_phase_stage() -> (Stage, FakeClock) {
        let clock = FakeClock::new();
        let policy = crate::Policy::parse(TWO_PHASE_POLICY, "<two-phase>").unwrap();
        let stage = policy
            .build_stage(Stage::builder("tp").clock(Arc::new(clock.clone())))
            .unwrap();
        (stage, clock)
    }

    fn channel_counts(stage: &Stage, name: &str) -> crate::stats::Counts {
        let s = stage.collect();
        s.channels
            .into_iter()
            .find(|c| c.name == name)
            .unwrap()
            .counts
    }

    /// A request held back in an object shows in its object's and its
    /// channel's `waiting` while it waits (it is in no other figure until
    /// admitted), and no longer once admitted.
    #[test]
    fn a_request_held_back_shows_as_waiting_until_admitted() {
        let (stage, clock) = two_phase_stage();
        let write = ctx(RequestType::WRITE, RequestContext::NONE, 1000)
            .with_criticality(crate::Criticality::Normal);
        let waiting = |stage: &Stage| {
            let c = stage.collect();
            let ch = c.channels.iter().find(|c| c.name == "limited").unwrap();
            (
                ch.counts.waiting,
                ch.objects.iter().map(|o| o.counts.waiting).sum::<u64>(),
            )
        };
        // The burst's 1000 bytes go at once; the next 1000 wait a second.
        let first = stage.admit(&write).unwrap();
        stage.complete(first, 1000).unwrap();
        assert_eq!(waiting(&stage), (0, 0));
        std::thread::scope(|sc| {
            let held = sc.spawn(|| {
                let a = stage.admit(&write).unwrap();
                stage.complete(a, 1000).unwrap();
            });
            while waiting(&stage) != (1, 1) {
                assert!(!held.is_finished(), "admitted without waiting");
                std::thread::yield_now();
            }
            clock.advance(Duration::from_secs(1));
            // Reconfigured at the same rate: the waiter reads the clock again.
            let limit = stage.info().channels[1].objects[1].config.clone().unwrap();
            stage
                .apply(&Rule::Configure {
                    channel: "limited".into(),
                    object: "limit".into(),
                    config: limit,
                })
                .unwrap();
            held.join().unwrap();
        });
        assert_eq!(waiting(&stage), (0, 0));
        assert_eq!(channel_counts(&stage, "limited").wait_total.waited_ops, 1);
    }

    /// `collect_histograms` carries each channel's distributions, which
    /// merge across stages to the percentiles of all their requests;
    /// `collect` does not.
    #[test]
    fn histograms_merge_across_stages() {
        let (a, clock_a) = two_phase_stage();
        let (b, clock_b) = two_phase_stage();
        let read = ctx(RequestType::READ, RequestContext::NONE, 1);
        for (stage, clock, micros, n) in [(&a, &clock_a, 100, 99), (&b, &clock_b, 5_000, 1)] {
            for _ in 0..n {
                let r = stage.admit(&read).unwrap();
                clock.advance(Duration::from_micros(micros));
                stage.complete(r, 1).unwrap();
            }
        }
        assert!(a.collect().channels.iter().all(|c| c.histograms.is_none()));
        let mut merged = crate::stats::MergedHistograms::default();
        let mut ops = 0;
        for stage in [&a, &b] {
            let s = stage.collect_histograms();
            let bg = s.channels.iter().find(|c| c.name == "bg").unwrap();
            let h = bg.histograms.as_ref().unwrap();
            let timed: u64 = h.latency.iter().map(|&(_, n)| n).sum();
            assert_eq!(timed, bg.counts.latency_total.ops);
            assert!(h.wait.is_empty(), "nothing waited: {h:?}");
            merged.merge(h);
            ops += bg.counts.ops;
        }
        let l = merged.latency();
        assert_eq!(l.ops, 100);
        // Bucket upper bounds: within 12.5 % above 100 µs and 5 ms.
        assert!((100_000..=112_500).contains(&l.p99_ns), "{l:?}");
        assert!((5_000_000..=5_625_000).contains(&l.p999_ns), "{l:?}");
        assert_eq!(merged.wait(ops).p99_ns, 0);
    }

    #[test]
    fn two_phase_counts_bytes_moved_wait_and_latency() {
        let (stage, clock) = two_phase_stage();
        let c = ctx(RequestType::READ, RequestContext::NONE, 4096);
        let a = stage.admit(&c).unwrap();
        assert_eq!(a.context(), &c);
        assert_eq!(a.waited_ns(), 0);
        assert_eq!(channel_counts(&stage, "bg").ops, 0, "counted at completion");
        clock.advance(Duration::from_micros(300));
        stage.complete(a, 1000).unwrap(); // a short read
        let counts = channel_counts(&stage, "bg");
        assert_eq!((counts.ops, counts.bytes), (1, 1000));
        let l = counts.latency_total;
        assert_eq!(l.ops, 1);
        // Bucket upper bounds: within 12.5 % above the true 300 µs.
        assert!((300_000..=337_500).contains(&l.p50_ns), "{l:?}");
        assert_eq!(l.p999_ns, l.p50_ns);
        assert_eq!(counts.latency.ops, 1, "interval figures too");
        // Unmatched requests (critical ones match no channel here) too.
        let u = stage
            .admit(
                &c.with_criticality(crate::Criticality::Critical)
                    .with_workflow(9),
            )
            .unwrap();
        clock.advance(Duration::from_micros(5));
        stage.complete(u, 0).unwrap();
        let s = stage.collect();
        assert_eq!(s.unmatched.ops, 1);
        assert_eq!(s.unmatched.latency_total.ops, 1);
    }

    /// A fake clock whose ticks are half nanoseconds, counting how often
    /// its rate is asked for.
    #[derive(Debug)]
    struct HalfNsClock {
        fake: FakeClock,
        asked: std::sync::atomic::AtomicU32,
    }

    impl Clock for HalfNsClock {
        fn now_ns(&self) -> u64 {
            self.fake.now_ns()
        }
        fn ticks(&self) -> u64 {
            self.fake.now_ns() * 2
        }
        fn ns_per_tick(&self) -> f64 {
            self.asked.fetch_add(1, Ordering::Relaxed);
            0.5
        }
        fn is_real_time(&self) -> bool {
            false
        }
    }

    #[test]
    fn the_clock_rate_is_asked_for_only_when_a_latency_is_converted() {
        let clock = Arc::new(HalfNsClock {
            fake: FakeClock::new(),
            asked: std::sync::atomic::AtomicU32::new(0),
        });
        let policy = crate::Policy::parse(TWO_PHASE_POLICY, "<two-phase>").unwrap();
        let stage = policy
            .build_stage(Stage::builder("tp").clock(clock.clone()))
            .unwrap();
        let c = ctx(RequestType::READ, RequestContext::NONE, 4096);
        // One-phase requests record no latency: nothing to convert.
        stage.enforce(&c, None).unwrap();
        stage.enforce(&c.with_workflow(9), None).unwrap();
        let s = stage.collect();
        assert_eq!(s.channels.iter().map(|c| c.counts.ops).sum::<u64>(), 2);
        assert_eq!(clock.asked.load(Ordering::Relaxed), 0);
        // A completed two-phase request's latency is converted at the
        // clock's rate, asked for once per collection.
        for _ in 0..2 {
            let a = stage.admit(&c).unwrap();
            clock.fake.advance(Duration::from_micros(300));
            stage.complete(a, 4096).unwrap();
        }
        let l = channel_counts(&stage, "bg").latency_total;
        assert_eq!(l.ops, 2);
        assert!((300_000..=337_500).contains(&l.p50_ns), "{l:?}");
        assert_eq!(clock.asked.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn critical_requests_are_counted_apart_with_their_latency_histogram() {
        let (stage, clock) = two_phase_stage();
        let normal = ctx(RequestType::READ, RequestContext::NONE, 4096);
        let critical = normal.with_criticality(crate::Criticality::Critical);
        for (c, us) in [(&normal, 900), (&critical, 100), (&critical, 300)] {
            let a = stage.admit(c).unwrap();
            clock.advance(Duration::from_micros(us));
            stage.complete(a, 4096).unwrap();
        }
        let s = stage.collect();
        assert_eq!((s.critical.ops, s.critical.bytes), (2, 8192));
        assert_eq!(s.critical.latency.ops, 2);
        // Two buckets, ascending, each value within 6.25 % of the latency.
        let b = &s.critical_latency;
        assert_eq!(b.len(), 2, "{b:?}");
        assert!((94_000..=106_250).contains(&b[0].0) && b[0].1 == 1, "{b:?}");
        assert!(
            (282_000..=318_750).contains(&b[1].0) && b[1].1 == 1,
            "{b:?}"
        );
        // Cumulative: the next collection has them all, plus the new one.
        let a = stage.admit(&critical).unwrap();
        clock.advance(Duration::from_micros(100));
        stage.complete(a, 0).unwrap();
        let s = stage.collect();
        assert_eq!((s.critical.ops, s.critical.interval_ops), (3, 1));
        assert_eq!(s.critical_latency, vec![(b[0].0, 2), b[1]]);
        // Merged back into a histogram, each value is in its own bucket, and
        // a slightly different tick length does not move it.
        let mut h = crate::stats::HistogramSnapshot::default();
        for &(ns, n) in &s.critical_latency {
            h.add(ns, n);
            h.add((ns as f64 * 1.001) as u64, n);
        }
        assert_eq!(h.latency(1.0).p50_ns, 106_495, "the 100 µs bucket's bound");
        assert!((300_000..=337_500).contains(&h.quantile(0.99, 0)));
        // With nothing critical the histogram is left out of the serialized
        // form, and the stats still round-trip.
        let (quiet, _) = two_phase_stage();
        let quiet = quiet.collect();
        assert!(quiet.critical_latency.is_empty());
        let json = serde_json::to_string(&quiet).unwrap();
        assert!(!json.contains("critical_latency"), "{json}");
        let back: StageStats = serde_json::from_str(&json).unwrap();
        assert_eq!(back, quiet);
    }

    #[test]
    fn two_phase_refunds_bytes_not_moved() {
        let (stage, _clock) = two_phase_stage();
        let w = ctx(RequestType::WRITE, RequestContext::NONE, 1000);
        let a = stage.admit(&w).unwrap(); // the whole burst
        stage.complete(a, 0).unwrap(); // an error: nothing moved
        let next = stage.try_enforce(&w, None);
        assert!(next.is_ok(), "the refund paid for the next request");
        assert!(
            matches!(stage.try_enforce(&w, None), Err(TryEnforceError::Wait(_))),
            "without a refund it waits"
        );
    }

    #[test]
    fn completion_finds_its_object_after_rule_changes() {
        let (stage, _clock) = two_phase_stage();
        let c = ctx(RequestType::READ, RequestContext::NONE, 10);
        let held = stage.admit(&c).unwrap(); // takes the only slot
                                             // A rule change builds a new table; then the object is removed.
        stage.apply(&channel("other")).unwrap();
        stage
            .apply_all(&[
                Rule::MapChannel {
                    pattern: by_context(rc("two-phase-x")),
                    channel: "other".into(),
                },
                Rule::SetDefaultObject {
                    channel: "bg".into(),
                    object: DEFAULT_OBJECT.into(),
                },
                Rule::RemoveObject {
                    channel: "bg".into(),
                    name: "prio".into(),
                },
            ])
            .unwrap();
        stage.complete(held, 10).unwrap();
        let counts = channel_counts(&stage, "bg");
        assert_eq!(
            (counts.ops, counts.bytes),
            (1, 10),
            "counted in the removed object"
        );
    }

    #[test]
    fn foreign_admissions_are_refused() {
        let (a, _) = two_phase_stage();
        let (b, _) = two_phase_stage();
        let adm = a
            .admit(&ctx(RequestType::READ, RequestContext::NONE, 1))
            .unwrap();
        assert_eq!(b.complete(adm, 1), Err(ForeignAdmission));
        assert_eq!(b.collect().channels[0].counts.ops, 0);
    }

    #[test]
    fn try_admit_admits_what_goes_at_once_and_counts_no_wait() {
        let (stage, _clock) = two_phase_stage();
        let read = ctx(RequestType::READ, RequestContext::NONE, 4096);
        crate::context::with_thread_ref(|t| {
            // depth 1: the first piece takes the slot, the second would wait
            // for it and is neither taken nor counted.
            let a = stage.try_admit_on_thread(t, &read).unwrap();
            assert_eq!(
                stage.try_admit_on_thread(t, &read).err(),
                Some(TryEnforceError::Wait(Duration::MAX))
            );
            stage.complete_on_thread(t, a, 4096).unwrap();
            let b = stage.try_admit_on_thread(t, &read).unwrap();
            stage.complete_on_thread(t, b, 100).unwrap();
            // A write goes to the rate limiter: 1000 B of burst.
            let write = ctx(RequestType::WRITE, RequestContext::NONE, 600);
            let w = stage.try_admit_on_thread(t, &write).unwrap();
            assert!(stage.try_admit_on_thread(t, &write).is_err());
            stage.complete_on_thread(t, w, 600).unwrap();
        });
        let counts = channel_counts(&stage, "bg");
        assert_eq!((counts.ops, counts.bytes), (2, 4196));
        assert_eq!(channel_counts(&stage, "limited").ops, 1);
    }

    #[test]
    fn split_size_follows_the_route() {
        let (stage, _clock) = two_phase_stage();
        crate::context::with_thread_ref(|t| {
            let read = ctx(RequestType::READ, RequestContext::NONE, 1 << 20);
            assert_eq!(
                stage.split_size_on_thread(t, &read),
                None,
                "nothing critical in flight"
            );
            let busy = stage
                .admit(&read.with_criticality(crate::Criticality::Critical))
                .unwrap();
            assert_eq!(stage.split_size_on_thread(t, &read), Some(32 << 10));
            let critical = read.with_criticality(crate::Criticality::Critical);
            assert_eq!(stage.split_size_on_thread(t, &critical), None);
            let write = ctx(RequestType::WRITE, RequestContext::NONE, 1 << 20);
            assert_eq!(
                stage.split_size_on_thread(t, &write),
                None,
                "a drl without split never splits"
            );
            stage.complete(busy, 0).unwrap();
        });
        let policy = "[[channel]]\nname = \"c\"\nmatch = { request_type = \"read\" }\n\
                      default_object = \"l\"\n\
                      [[channel.object]]\nname = \"l\"\n\
                      kind = \"drl\"\nrate = \"1MiB/s\"\nsplit = \"128KiB\"\n";
        let stage = Stage::from_policy_str(policy, "<drl-split>").unwrap();
        crate::context::with_thread_ref(|t| {
            let read = ctx(RequestType::READ, RequestContext::NONE, 1 << 20);
            assert_eq!(
                stage.split_size_on_thread(t, &read),
                Some(128 << 10),
                "a drl with split splits whether or not critical I/O runs"
            );
            let critical = read.with_criticality(crate::Criticality::Critical);
            assert_eq!(stage.split_size_on_thread(t, &critical), None);
        });
    }

    #[test]
    fn charges_bytes_follows_the_route_and_the_rates_unit() {
        let policy = "[stage]\ndefault_channel = \"free\"\n\
                      [[channel]]\nname = \"free\"\n\
                      [[channel]]\nname = \"bytes\"\nmatch = { request_type = \"read\" }\n\
                      default_object = \"l\"\n\
                      [[channel.object]]\nname = \"l\"\nkind = \"drl\"\nrate = \"1MiB/s\"\n\
                      [[channel]]\nname = \"ops\"\nmatch = { request_type = \"write\" }\n\
                      default_object = \"o\"\n\
                      [[channel.object]]\nname = \"o\"\nkind = \"drl\"\nrate = \"100ops/s\"\n\
                      [[channel]]\nname = \"prio\"\nmatch = { request_type = \"get\" }\n\
                      default_object = \"p\"\n\
                      [[channel.object]]\nname = \"p\"\nkind = \"priority\"\nrate = \"1MiB/s\"\n\
                      [[channel]]\nname = \"slots\"\nmatch = { request_type = \"put\" }\n\
                      default_object = \"q\"\n\
                      [[channel.object]]\nname = \"q\"\nkind = \"priority\"\n";
        let stage = Stage::from_policy_str(policy, "<charges-bytes>").unwrap();
        crate::context::with_thread_ref(|t| {
            let of = |rt| ctx(rt, RequestContext::NONE, 4096);
            assert!(
                stage.charges_bytes_on_thread(t, &of(RequestType::READ)),
                "drl in bytes"
            );
            assert!(
                !stage.charges_bytes_on_thread(t, &of(RequestType::WRITE)),
                "drl in operations"
            );
            assert!(
                !stage.charges_bytes_on_thread(t, &of(RequestType::OPEN)),
                "noop"
            );
            assert!(
                !stage.charges_bytes_on_thread(t, &of(RequestType::PUT)),
                "priority without a rate"
            );
            let get = of(RequestType::GET);
            assert!(
                stage.charges_bytes_on_thread(t, &get),
                "priority with a rate in bytes"
            );
            let critical = get.with_criticality(crate::Criticality::Critical);
            assert!(
                !stage.charges_bytes_on_thread(t, &critical),
                "critical requests skip the rate without rate_critical"
            );
        });
    }

    #[test]
    fn passes_at_once_names_the_types_that_meet_only_noops() {
        let policy = "[[channel]]\nname = \"meta\"\nmatch = { request_type = \"stat\" }\n\
                      [[channel]]\nname = \"reads\"\nmatch = { request_type = \"read\" }\n\
                      default_object = \"l\"\n\
                      [[channel.object]]\nname = \"l\"\nkind = \"drl\"\nrate = \"1GiB/s\"\n";
        let stage = Stage::from_policy_str(policy, "<at-once>").unwrap();
        let custom = RequestType::named("at-once-custom").unwrap();
        for t in [
            RequestType::STAT,
            RequestType::OPEN,
            RequestType::WRITE,
            custom,
        ] {
            assert!(
                stage.passes_at_once(t),
                "{t:?} meets only Noops or no channel"
            );
        }
        assert!(
            !stage.passes_at_once(RequestType::READ),
            "reads meet the drl"
        );
        // An object that acts in the stat channel, selected only for one
        // request context: stat may now reach it.
        stage
            .apply_all(&[
                drl("meta", "m", Rate::ops_per_sec(5)),
                Rule::MapObject {
                    channel: "meta".into(),
                    pattern: Pattern {
                        request_context: Some(rc("at-once")),
                        ..Pattern::ANY
                    },
                    object: "m".into(),
                },
            ])
            .unwrap();
        assert!(!stage.passes_at_once(RequestType::STAT));
        assert!(stage.passes_at_once(RequestType::OPEN));
        // A rule naming no request type, or a default channel that acts,
        // reaches every type.
        stage
            .apply(&Rule::SetDefaultChannel {
                channel: Some("reads".into()),
            })
            .unwrap();
        for t in [RequestType::OPEN, RequestType::WRITE, custom] {
            assert!(
                !stage.passes_at_once(t),
                "{t:?} may reach the default channel"
            );
        }
        let any = Stage::builder("any").build();
        any.apply_all(&[
            channel("c"),
            drl("c", "x", Rate::ops_per_sec(5)),
            Rule::MapChannel {
                pattern: Pattern {
                    workflow: Some(7),
                    ..Pattern::ANY
                },
                channel: "c".into(),
            },
        ])
        .unwrap();
        assert!(!any.passes_at_once(RequestType::STAT));
        assert!(Stage::builder("empty")
            .build()
            .passes_at_once(RequestType::STAT));
    }

    #[test]
    fn pass_on_thread_counts_only_known_routes_that_pass_at_once() {
        let policy = "[[channel]]\nname = \"meta\"\nmatch = { request_type = \"stat\" }\n\
                      [[channel]]\nname = \"reads\"\nmatch = { request_type = \"read\" }\n\
                      default_object = \"l\"\n\
                      [[channel.object]]\nname = \"l\"\nkind = \"drl\"\nrate = \"1GiB/s\"\n";
        let stage = Stage::from_policy_str(policy, "<pass>").unwrap();
        let stat = ctx(RequestType::STAT, RequestContext::NONE, 0);
        let read = ctx(RequestType::READ, RequestContext::NONE, 0);
        let open = ctx(RequestType::OPEN, RequestContext::NONE, 0);
        // A fresh thread: no statistics slot, no cached table, no memo.
        let ops = |s: &Stage| {
            let st = s.collect();
            (
                st.channels.iter().map(|c| c.counts.ops).sum::<u64>(),
                st.unmatched.ops,
            )
        };
        std::thread::scope(|sc| {
            sc.spawn(|| {
                crate::context::with_thread_ref(|t| {
                    assert!(!stage.pass_on_thread(t, &stat), "no slot, no memo yet");
                    stage.enforce_on_thread(t, &stat).unwrap();
                    assert!(stage.pass_on_thread(t, &stat), "a remembered Noop route");
                    assert_eq!(ops(&stage), (2, 0));
                    assert!(!stage.pass_on_thread(t, &open), "not remembered yet");
                    stage.enforce_on_thread(t, &open).unwrap();
                    assert!(stage.pass_on_thread(t, &open), "unmatched passes at once");
                    assert_eq!(ops(&stage), (2, 2));
                    stage.enforce_on_thread(t, &read).unwrap();
                    assert!(!stage.pass_on_thread(t, &read), "a drl route is enforced");
                    assert_eq!(ops(&stage), (3, 2), "a refusal counts nothing");
                    let critical = stat.with_criticality(crate::Criticality::Critical);
                    assert!(!stage.pass_on_thread(t, &critical), "another memo key");
                    stage
                        .apply(&Rule::SetDefaultChannel {
                            channel: Some("meta".into()),
                        })
                        .unwrap();
                    assert!(!stage.pass_on_thread(t, &stat), "a new table is not cached");
                    stage.enforce_on_thread(t, &open).unwrap();
                    assert!(stage.pass_on_thread(t, &open));
                    let st = stage.collect();
                    assert_eq!(st.unmatched.ops, 2);
                    assert_eq!(
                        st.channels
                            .iter()
                            .find(|c| c.name == "meta")
                            .unwrap()
                            .counts
                            .ops,
                        4
                    );
                });
            });
        });
    }

    #[test]
    fn empty_stage_passes_and_counts_unmatched() {
        let stage = Stage::builder("s").label("job", "j1").build();
        let out = stage
            .enforce(&ctx(RequestType::READ, RequestContext::NONE, 10), None)
            .unwrap();
        assert_eq!(out, Outcome::PASS);
        let stats = stage.collect();
        assert_eq!(stats.unmatched.ops, 1);
        assert_eq!(stats.unmatched.bytes, 10);
        assert!(stats.channels.is_empty());
        let info = stage.info();
        assert_eq!(info.identity.name, "s");
        assert_eq!(info.identity.labels["job"], "j1");
        assert_eq!(info.identity.pid, std::process::id());
        assert!(!info.identity.host.is_empty());
        assert_eq!(info.classifiers.len(), Classifier::ALL.len());
    }

    #[test]
    fn rules_route_requests_to_channels_and_objects() {
        let stage = Stage::builder("s").build();
        let flush = rc("stage-test-flush");
        stage
            .apply_all(&[
                channel("bg"),
                channel("fg"),
                drl("bg", "limit", Rate::bytes_per_sec(1 << 30)),
                Rule::MapChannel {
                    pattern: by_context(flush),
                    channel: "bg".into(),
                },
                Rule::MapObject {
                    channel: "bg".into(),
                    pattern: Pattern {
                        request_type: Some(RequestType::WRITE),
                        ..Pattern::ANY
                    },
                    object: "limit".into(),
                },
                Rule::SetDefaultChannel {
                    channel: Some("fg".into()),
                },
            ])
            .unwrap();
        assert_eq!(
            route(&stage, &ctx(RequestType::WRITE, flush, 1)),
            pair("bg", "limit")
        );
        assert_eq!(
            route(&stage, &ctx(RequestType::READ, flush, 1)),
            pair("bg", "default")
        );
        assert_eq!(
            route(&stage, &ctx(RequestType::WRITE, RequestContext::NONE, 1)),
            pair("fg", "default")
        );
        stage
            .apply(&Rule::SetDefaultObject {
                channel: "bg".into(),
                object: "limit".into(),
            })
            .unwrap();
        assert_eq!(
            route(&stage, &ctx(RequestType::READ, flush, 1)),
            pair("bg", "limit")
        );
        stage
            .apply(&Rule::SetDefaultChannel { channel: None })
            .unwrap();
        assert_eq!(
            route(&stage, &ctx(RequestType::READ, RequestContext::NONE, 1)),
            None
        );
        for (t, size) in [(RequestType::WRITE, 100), (RequestType::READ, 7)] {
            stage.enforce(&ctx(t, flush, size), None).unwrap();
        }
        let stats = stage.collect();
        let bg = &stats.channels[0];
        assert_eq!(
            (bg.name.as_str(), bg.counts.ops, bg.counts.bytes),
            ("bg", 2, 107)
        );
        let limit = bg.objects.iter().find(|o| o.name == "limit").unwrap();
        assert_eq!((limit.kind.as_str(), limit.counts.bytes), ("drl", 107));
    }

    #[test]
    fn invalid_rules_are_rejected_with_reasons() {
        let stage = Stage::builder("s").build();
        stage
            .apply_all(&[channel("a"), drl("a", "x", Rate::ops_per_sec(5))])
            .unwrap();
        let err = |r: Rule| stage.apply(&r).unwrap_err();
        assert_eq!(
            err(channel("a")),
            RuleError::Exists {
                what: "channel",
                name: "a".into()
            }
        );
        assert_eq!(
            err(Rule::RemoveChannel { name: "zz".into() }),
            RuleError::UnknownChannel("zz".into())
        );
        assert!(matches!(err(channel("")), RuleError::BadName { .. }));
        assert!(matches!(
            err(channel(&"n".repeat(200))),
            RuleError::BadName { .. }
        ));
        assert!(matches!(
            err(drl("a", "default", Rate::ops_per_sec(1))),
            RuleError::BadName { .. }
        ));
        assert!(matches!(
            err(drl("a", "x", Rate::ops_per_sec(1))),
            RuleError::Exists { what: "object", .. }
        ));
        assert!(matches!(
            err(Rule::RemoveObject {
                channel: "a".into(),
                name: "default".into()
            }),
            RuleError::BadName { .. }
        ));
        assert!(matches!(
            err(Rule::MapObject {
                channel: "a".into(),
                pattern: Pattern::ANY,
                object: "nope".into()
            }),
            RuleError::UnknownObject { .. }
        ));
        assert!(matches!(
            err(Rule::UnmapChannel {
                pattern: Pattern::ANY
            }),
            RuleError::UnknownPattern(_)
        ));
        let bad = Rule::Configure {
            channel: "a".into(),
            object: "x".into(),
            config: ObjectConfig::Noop,
        };
        assert!(matches!(
            err(bad),
            RuleError::Config {
                source: ConfigError::WrongKind {
                    object: "drl",
                    given: "noop"
                },
                ..
            }
        ));
        // In use: a mapped channel and a default object cannot be removed.
        stage
            .apply(&Rule::MapChannel {
                pattern: Pattern::ANY,
                channel: "a".into(),
            })
            .unwrap();
        assert!(matches!(
            err(Rule::RemoveChannel { name: "a".into() }),
            RuleError::InUse { .. }
        ));
        stage
            .apply(&Rule::SetDefaultObject {
                channel: "a".into(),
                object: "x".into(),
            })
            .unwrap();
        assert!(matches!(
            err(Rule::RemoveObject {
                channel: "a".into(),
                name: "x".into()
            }),
            RuleError::InUse { .. }
        ));
        // Classifiers: patterns may only use enabled ones.
        let wf = Pattern {
            workflow: Some(3),
            ..Pattern::ANY
        };
        stage
            .apply(&Rule::SetClassifiers {
                classifiers: vec![Classifier::RequestType],
            })
            .unwrap();
        let e = err(Rule::MapChannel {
            pattern: wf,
            channel: "a".into(),
        });
        assert!(e.to_string().contains("does not differentiate by"), "{e}");
        stage
            .apply(&Rule::SetClassifiers {
                classifiers: Classifier::ALL.to_vec(),
            })
            .unwrap();
        stage
            .apply(&Rule::MapChannel {
                pattern: wf,
                channel: "a".into(),
            })
            .unwrap();
        let e = err(Rule::SetClassifiers {
            classifiers: vec![Classifier::RequestType],
        });
        assert!(matches!(
            e,
            RuleError::ClassifierDisabled {
                classifier: Classifier::Workflow,
                ..
            }
        ));
        assert_eq!(
            stage.info().classifiers.len(),
            Classifier::ALL.len(),
            "failed rule changed nothing"
        );
    }

    #[test]
    fn apply_all_is_a_transaction() {
        let clock = FakeClock::new();
        let stage = Stage::builder("s").clock(Arc::new(clock)).build();
        stage
            .apply_all(&[channel("a"), drl("a", "x", Rate::ops_per_sec(5))])
            .unwrap();
        let before = stage.info();
        let faster = ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(500)));
        let (i, e) = stage
            .try_apply_all(&[
                channel("b"),
                Rule::Configure {
                    channel: "a".into(),
                    object: "x".into(),
                    config: faster,
                },
                Rule::MapChannel {
                    pattern: Pattern::ANY,
                    channel: "missing".into(),
                },
            ])
            .unwrap_err();
        assert_eq!(i, 2);
        assert_eq!(e, RuleError::UnknownChannel("missing".into()));
        let long = "é".repeat(1_000_000);
        let e = stage
            .apply(&Rule::RemoveChannel { name: long })
            .unwrap_err();
        let shown = e.to_string();
        assert!(shown.len() < 200, "{}", shown.len());
        assert!(shown.ends_with("... (2000000 bytes)\""), "{shown}");
        // Neither the new channel nor the rate change survived.
        assert_eq!(stage.info(), before);
    }

    #[test]
    fn configure_changes_rate_in_place_and_keeps_counts() {
        let clock = FakeClock::new();
        let stage = Stage::builder("s").clock(Arc::new(clock.clone())).build();
        let c = rc("stage-test-cfg");
        stage
            .apply_all(&[
                channel("a"),
                drl("a", "x", Rate::ops_per_sec(1_000_000)),
                Rule::MapChannel {
                    pattern: by_context(c),
                    channel: "a".into(),
                },
                Rule::SetDefaultObject {
                    channel: "a".into(),
                    object: "x".into(),
                },
            ])
            .unwrap();
        for _ in 0..5 {
            stage.enforce(&ctx(RequestType::READ, c, 1), None).unwrap();
        }
        let slower = ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(10)).with_burst(3));
        stage
            .apply(&Rule::Configure {
                channel: "a".into(),
                object: "x".into(),
                config: slower.clone(),
            })
            .unwrap();
        let info = stage.info();
        assert_eq!(info.channels[0].objects[1].config, Some(slower));
        assert_eq!(stage.collect().channels[0].counts.ops, 5);
    }

    #[test]
    fn collect_reports_interval_throughput_and_waits() {
        let clock = FakeClock::new();
        let stage = Stage::builder("s").clock(Arc::new(clock.clone())).build();
        stage
            .apply_all(&[
                channel("a"),
                Rule::SetDefaultChannel {
                    channel: Some("a".into()),
                },
            ])
            .unwrap();
        for _ in 0..10 {
            stage
                .enforce(&ctx(RequestType::WRITE, RequestContext::NONE, 1000), None)
                .unwrap();
        }
        clock.advance(Duration::from_secs(2));
        let s = stage.collect();
        assert_eq!(s.interval_ns, 2_000_000_000);
        let a = &s.channels[0].counts;
        assert_eq!((a.interval_ops, a.interval_bytes), (10, 10_000));
        assert_eq!(a.bytes_per_sec, 5_000.0);
        assert_eq!(a.ops_per_sec, 5.0);
        assert_eq!(a.wait.waited_ops, 0);
        stage
            .enforce(&ctx(RequestType::WRITE, RequestContext::NONE, 1), None)
            .unwrap();
        clock.advance(Duration::from_secs(1));
        let s = stage.collect();
        let a = &s.channels[0].counts;
        assert_eq!((a.ops, a.interval_ops, a.interval_bytes), (11, 1, 1));
    }

    #[test]
    fn removed_objects_and_channels_keep_totals_exact() {
        let stage = Stage::builder("s").build();
        let c = rc("stage-test-rm");
        stage
            .apply_all(&[
                channel("a"),
                drl("a", "x", Rate::bytes_per_sec(1 << 40)),
                Rule::MapObject {
                    channel: "a".into(),
                    pattern: Pattern::ANY,
                    object: "x".into(),
                },
                Rule::MapChannel {
                    pattern: by_context(c),
                    channel: "a".into(),
                },
            ])
            .unwrap();
        stage.enforce(&ctx(RequestType::READ, c, 5), None).unwrap();
        stage
            .apply_all(&[
                Rule::UnmapObject {
                    channel: "a".into(),
                    pattern: Pattern::ANY,
                },
                Rule::RemoveObject {
                    channel: "a".into(),
                    name: "x".into(),
                },
            ])
            .unwrap();
        stage.enforce(&ctx(RequestType::READ, c, 7), None).unwrap();
        let s = stage.collect();
        assert_eq!(s.channels[0].counts.bytes, 12);
        assert_eq!(s.channels[0].objects.len(), 1);
        stage
            .apply_all(&[
                Rule::UnmapChannel {
                    pattern: by_context(c),
                },
                Rule::RemoveChannel { name: "a".into() },
            ])
            .unwrap();
        let s = stage.collect();
        assert!(s.channels.is_empty());
        assert_eq!((s.removed.ops, s.removed.bytes), (2, 12));
    }

    /// A control plane that keeps creating and removing objects and channels
    /// leaves at most `KEPT_REMOVED` of each behind (each holds a recorder
    /// of about 260 KiB of address space), and the totals stay exact.
    #[test]
    fn removed_objects_and_channels_are_bounded_and_still_counted() {
        use crate::channel::KEPT_REMOVED;
        let stage = Stage::builder("s").build();
        let c = rc("stage-test-churn");
        let rounds = 3 * KEPT_REMOVED as u64;
        for i in 0..rounds {
            let ch = format!("c{i}");
            stage
                .apply_all(&[
                    channel(&ch),
                    drl(&ch, "x", Rate::bytes_per_sec(1 << 40)),
                    Rule::MapObject {
                        channel: ch.clone(),
                        pattern: Pattern::ANY,
                        object: "x".into(),
                    },
                    Rule::MapChannel {
                        pattern: by_context(c),
                        channel: ch.clone(),
                    },
                ])
                .unwrap();
            stage.enforce(&ctx(RequestType::READ, c, 3), None).unwrap();
            // The object goes first (retired in its channel), then the
            // channel; a request between them goes to the channel's default.
            stage
                .apply_all(&[
                    Rule::UnmapObject {
                        channel: ch.clone(),
                        pattern: Pattern::ANY,
                    },
                    Rule::RemoveObject {
                        channel: ch.clone(),
                        name: "x".into(),
                    },
                ])
                .unwrap();
            stage.enforce(&ctx(RequestType::READ, c, 4), None).unwrap();
            stage
                .apply_all(&[
                    Rule::UnmapChannel {
                        pattern: by_context(c),
                    },
                    Rule::RemoveChannel { name: ch },
                ])
                .unwrap();
        }
        let s = stage.collect();
        assert_eq!((s.removed.ops, s.removed.bytes), (2 * rounds, 7 * rounds));
        assert_eq!(stage.model().removed.len(), KEPT_REMOVED);
        // Objects within one channel.
        stage
            .apply_all(&[
                channel("keep"),
                Rule::MapChannel {
                    pattern: by_context(c),
                    channel: "keep".into(),
                },
            ])
            .unwrap();
        for _ in 0..rounds {
            stage
                .apply_all(&[
                    drl("keep", "x", Rate::bytes_per_sec(1 << 40)),
                    Rule::MapObject {
                        channel: "keep".into(),
                        pattern: Pattern::ANY,
                        object: "x".into(),
                    },
                ])
                .unwrap();
            stage.enforce(&ctx(RequestType::READ, c, 5), None).unwrap();
            stage
                .apply_all(&[
                    Rule::UnmapObject {
                        channel: "keep".into(),
                        pattern: Pattern::ANY,
                    },
                    Rule::RemoveObject {
                        channel: "keep".into(),
                        name: "x".into(),
                    },
                ])
                .unwrap();
        }
        let s = stage.collect();
        assert_eq!(
            (s.channels[0].counts.ops, s.channels[0].counts.bytes),
            (rounds, 5 * rounds)
        );
        let model = stage.model();
        assert_eq!(model.channels[0].retired.len(), KEPT_REMOVED);
    }

    /// Rules cannot grow a stage past what paiod accepts from it.
    #[test]
    fn channels_and_objects_are_capped() {
        use crate::rule::{MAX_CHANNELS, MAX_OBJECTS};
        let stage = Stage::builder("s").build();
        let channels: Vec<Rule> = (0..MAX_CHANNELS)
            .map(|i| channel(&format!("c{i}")))
            .collect();
        stage.apply_all(&channels).unwrap();
        let e = stage.apply(&channel("one-more")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the stage has 1024 channels already, the most it may have: remove one first"
        );
        // The default object counts.
        let objects: Vec<Rule> = (1..MAX_OBJECTS)
            .map(|i| drl("c0", &format!("o{i}"), Rate::bytes_per_sec(1 << 20)))
            .collect();
        stage.apply_all(&objects).unwrap();
        let e = stage
            .apply(&drl("c0", "one-more", Rate::bytes_per_sec(1 << 20)))
            .unwrap_err();
        assert!(matches!(e, RuleError::TooMany { max: 256, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("channel \"c0\" has 256 objects already"),
            "{e}"
        );
        // Room again once one is removed.
        stage
            .apply(&Rule::RemoveObject {
                channel: "c0".into(),
                name: "o1".into(),
            })
            .unwrap();
        stage
            .apply(&drl("c0", "one-more", Rate::bytes_per_sec(1 << 20)))
            .unwrap();
        // Mappings: the stage's to channels, a channel's to objects.
        let by_workflow = |w: u64| Pattern {
            workflow: Some(w),
            ..Pattern::ANY
        };
        stage
            .apply(&Rule::SetClassifiers {
                classifiers: vec![crate::Classifier::Workflow],
            })
            .unwrap();
        let maps = |n: usize| -> Vec<Rule> {
            (0..n as u64)
                .flat_map(|w| {
                    [
                        Rule::MapChannel {
                            pattern: by_workflow(w),
                            channel: "c1".into(),
                        },
                        Rule::MapObject {
                            channel: "c0".into(),
                            pattern: by_workflow(w),
                            object: "o2".into(),
                        },
                    ]
                })
                .collect()
        };
        stage.apply_all(&maps(crate::rule::MAX_MAPPINGS)).unwrap();
        // An existing pattern is remapped, a new one refused.
        stage.apply_all(&maps(1)).unwrap();
        let beyond = maps(crate::rule::MAX_MAPPINGS + 1).split_off(2 * crate::rule::MAX_MAPPINGS);
        for rule in &beyond {
            let e = stage.apply(rule).unwrap_err();
            assert!(e.to_string().contains("has 1024 mappings already"), "{e}");
        }
    }

    /// Objects over all channels are capped too, default objects included:
    /// beyond, neither an object nor a channel (which makes one) is created.
    #[test]
    fn objects_of_the_whole_stage_are_capped() {
        use crate::rule::{MAX_OBJECTS, MAX_STAGE_OBJECTS};
        let stage = Stage::builder("s").build();
        let full = MAX_STAGE_OBJECTS / MAX_OBJECTS;
        for c in 0..full {
            let name = format!("c{c}");
            stage.apply(&channel(&name)).unwrap();
            let objects: Vec<Rule> = (1..MAX_OBJECTS)
                .map(|i| drl(&name, &format!("o{i}"), Rate::bytes_per_sec(1 << 20)))
                .collect();
            stage.apply_all(&objects).unwrap();
        }
        let e = stage.apply(&channel("one-more")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the stage has 4096 objects already, the most it may have: remove one first"
        );
        stage
            .apply(&Rule::RemoveObject {
                channel: "c0".into(),
                name: "o1".into(),
            })
            .unwrap();
        stage.apply(&channel("one-more")).unwrap();
        let e = stage
            .apply(&drl("one-more", "o", Rate::bytes_per_sec(1 << 20)))
            .unwrap_err();
        assert!(matches!(e, RuleError::TooMany { max: 4096, .. }), "{e}");
        // An unknown channel is still said first.
        let e = stage
            .apply(&drl("nowhere", "o", Rate::bytes_per_sec(1 << 20)))
            .unwrap_err();
        assert!(matches!(e, RuleError::UnknownChannel(_)), "{e}");
    }

    /// Upper-cases the request: a transforming object.
    #[derive(Debug)]
    struct Upper;
    impl EnforcementObject for Upper {
        fn kind(&self) -> &'static str {
            "upper"
        }
        fn configure(&self, _: &ObjectConfig) -> Result<(), ConfigError> {
            Err(ConfigError::Invalid {
                field: "kind",
                reason: "not configurable".into(),
            })
        }
        fn enforce(&self, _: &Context, request: &mut Request<'_>) -> Result<u64, EnforceError> {
            match request.data() {
                Some(d) => {
                    let upper = d.to_ascii_uppercase();
                    request.replace(upper);
                    Ok(0)
                }
                None => Err(EnforceError::new("upper", "needs the request's content")),
            }
        }
        fn config(&self) -> ObjectConfig {
            ObjectConfig::Noop
        }
    }

    #[test]
    fn custom_objects_transform_data_and_report_errors() {
        let stage = Stage::builder("s").build();
        stage.apply(&channel("a")).unwrap();
        stage.add_object("a", "up", Arc::new(Upper)).unwrap();
        assert!(stage.add_object("a", "up", Arc::new(Upper)).is_err());
        assert!(stage.add_object("zz", "up", Arc::new(Upper)).is_err());
        stage
            .apply_all(&[
                Rule::SetDefaultObject {
                    channel: "a".into(),
                    object: "up".into(),
                },
                Rule::SetDefaultChannel {
                    channel: Some("a".into()),
                },
            ])
            .unwrap();
        let c = ctx(RequestType::WRITE, RequestContext::NONE, 3);
        let out = stage.enforce(&c, Some(b"abc")).unwrap();
        assert_eq!(out.data.as_deref(), Some(&b"ABC"[..]));
        let e = stage.enforce(&c, None).unwrap_err();
        assert!(e.to_string().contains("needs the request's content"));
        // Refused requests are counted too.
        assert_eq!(stage.collect().channels[0].counts.ops, 2);
    }

    /// An object that enforces on a stage from inside its own enforce call.
    #[derive(Debug)]
    struct Reenter(Arc<Stage>);
    impl EnforcementObject for Reenter {
        fn kind(&self) -> &'static str {
            "reenter"
        }
        fn configure(&self, _: &ObjectConfig) -> Result<(), ConfigError> {
            Ok(())
        }
        fn enforce(&self, ctx: &Context, _: &mut Request<'_>) -> Result<u64, EnforceError> {
            self.0.enforce(ctx, None).map(|o| o.waited_ns)
        }
        fn config(&self) -> ObjectConfig {
            ObjectConfig::Noop
        }
    }

    #[test]
    fn reentrant_enforce_works() {
        let inner = Arc::new(Stage::builder("inner").build());
        let outer = Stage::builder("outer").build();
        outer.apply(&channel("a")).unwrap();
        outer
            .add_object("a", "re", Arc::new(Reenter(inner.clone())))
            .unwrap();
        outer
            .apply_all(&[
                Rule::SetDefaultObject {
                    channel: "a".into(),
                    object: "re".into(),
                },
                Rule::SetDefaultChannel {
                    channel: Some("a".into()),
                },
            ])
            .unwrap();
        outer
            .enforce(&ctx(RequestType::READ, RequestContext::NONE, 4), None)
            .unwrap();
        assert_eq!(inner.collect().unmatched.bytes, 4);
        assert_eq!(outer.collect().channels[0].counts.bytes, 4);
    }

    #[test]
    fn updates_are_visible_at_once_across_many_stages_on_one_thread() {
        // More stages than cache slots, alternating, each updated in turn.
        let stages: Vec<Stage> = (0..TABLE_CACHE_SLOTS * 2 + 1)
            .map(|i| Stage::builder(format!("s{i}")).build())
            .collect();
        let c = ctx(RequestType::READ, RequestContext::NONE, 1);
        for round in 0..3 {
            for (i, s) in stages.iter().enumerate() {
                let name = format!("c{round}");
                s.apply_all(&[
                    channel(&name),
                    Rule::SetDefaultChannel {
                        channel: Some(name.clone()),
                    },
                ])
                .unwrap();
                assert_eq!(
                    route(s, &c),
                    pair(&name, "default"),
                    "stage {i} round {round}"
                );
                s.enforce(&c, None).unwrap();
            }
        }
        for s in &stages {
            let st = s.collect();
            assert_eq!(st.channels.iter().map(|c| c.counts.ops).sum::<u64>(), 3);
        }
    }

    /// Channel `a`, the default, whose default object is a DRL at 10 ops/s
    /// with a burst of one.
    fn everything_through_a_10_ops_limit() -> Vec<Rule> {
        vec![
            channel("a"),
            Rule::CreateObject {
                channel: "a".into(),
                name: "x".into(),
                config: ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(10)).with_burst(1)),
            },
            Rule::SetDefaultObject {
                channel: "a".into(),
                object: "x".into(),
            },
            Rule::SetDefaultChannel {
                channel: Some("a".into()),
            },
        ]
    }

    #[test]
    fn try_enforce_admits_or_says_how_long() {
        let clock = FakeClock::new();
        let stage = Stage::builder("s").clock(Arc::new(clock.clone())).build();
        stage
            .apply_all(&everything_through_a_10_ops_limit())
            .unwrap();
        let c = ctx(RequestType::READ, RequestContext::NONE, 1);
        assert_eq!(stage.try_enforce(&c, None), Ok(Outcome::PASS));
        assert_eq!(
            stage.try_enforce(&c, None),
            Err(TryEnforceError::Wait(Duration::from_millis(100)))
        );
        clock.advance(Duration::from_millis(100));
        assert_eq!(stage.try_enforce(&c, None), Ok(Outcome::PASS));
        assert_eq!(
            stage.collect().channels[0].counts.ops,
            2,
            "the refused try is not counted"
        );
    }

    #[test]
    fn handles_follow_rule_changes_and_count_like_the_stage() {
        let clock = FakeClock::new();
        let stage = Stage::builder("s").clock(Arc::new(clock.clone())).build();
        let mut handle = stage.handle();
        let c = ctx(RequestType::READ, RequestContext::NONE, 3);
        handle.enforce(&c, None).unwrap();
        assert_eq!(stage.collect().unmatched.ops, 1);
        stage
            .apply_all(&everything_through_a_10_ops_limit())
            .unwrap();
        // The next request through the old handle sees the new routing.
        assert_eq!(handle.enforce(&c, None).unwrap(), Outcome::PASS);
        assert_eq!(
            handle.try_enforce(&c, None),
            Err(TryEnforceError::Wait(Duration::from_millis(100)))
        );
        clock.advance(Duration::from_millis(100));
        assert_eq!(handle.try_enforce(&c, None), Ok(Outcome::PASS));
        let s = handle.stage().collect();
        assert_eq!(
            (s.channels[0].counts.ops, s.channels[0].counts.bytes),
            (2, 6)
        );
        // Handles work from other threads, each its own.
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let mut h = stage.handle();
                    clock.advance(Duration::from_millis(100));
                    stage
                        .apply(&Rule::SetDefaultChannel { channel: None })
                        .unwrap();
                    h.enforce(&c, None).unwrap();
                });
            }
        });
        let s = stage.collect();
        assert_eq!(s.unmatched.ops + s.channels[0].counts.ops, 5);
    }

    #[test]
    fn stage_info_serializes_to_json() {
        let stage = Stage::builder("s").build();
        stage
            .apply_all(&[channel("a"), drl("a", "x", Rate::ops_per_sec(5))])
            .unwrap();
        let j = serde_json::to_value(stage.info()).unwrap();
        assert_eq!(j["name"], "s");
        assert_eq!(j["channels"][0]["objects"][1]["config"]["kind"], "drl");
        assert_eq!(j["channels"][0]["objects"][1]["config"]["rate"], "5 ops/s");
        let s = serde_json::to_value(stage.collect()).unwrap();
        assert_eq!(s["channels"][0]["ops"], 0);
    }
    /// A request type of raw number `i` (those below 20 are built in).
    fn rtype(i: u16) -> RequestType {
        RequestType::from_raw(i).unwrap()
    }

    fn pattern_strategy() -> impl proptest::strategy::Strategy<Value = Pattern> {
        use proptest::prelude::*;
        (
            proptest::option::of(1u64..3),
            // READ (1), FSYNC (5) and MKDIR (11) share a memo entry (n % 4
            // == 1, 1, 3: READ and FSYNC collide), WRITE (2) has its own.
            proptest::option::of(prop::sample::select(vec![1u16, 2, 5, 11])),
            proptest::option::of(0u16..2),
            proptest::option::of(0u16..2),
            proptest::option::of(0u8..2),
        )
            .prop_map(|(w, t, c, f, k)| Pattern {
                workflow: w,
                request_type: t.map(rtype),
                request_context: c.map(|i| rc(&format!("memo-prop-{i}"))),
                file_class: f
                    .map(|i| crate::FileClass::named(&format!("memo-prop-file-{i}")).unwrap()),
                criticality: k.and_then(crate::Criticality::from_raw),
            })
    }

    fn context_strategy() -> impl proptest::strategy::Strategy<Value = Context> {
        use proptest::prelude::*;
        (
            1u64..3,
            prop::sample::select(vec![1u16, 2, 5, 11]),
            0u16..3,
            0u16..3,
            0u8..2,
        )
            .prop_map(|(w, t, c, f, k)| {
                let c = if c == 2 {
                    RequestContext::NONE
                } else {
                    rc(&format!("memo-prop-{c}"))
                };
                let f = if f == 2 {
                    crate::FileClass::NONE
                } else {
                    crate::FileClass::named(&format!("memo-prop-file-{f}")).unwrap()
                };
                Context::explicit(w, rtype(t), c, 1)
                    .with_file_class(f)
                    .with_criticality(crate::Criticality::from_raw(k).unwrap())
            })
    }

    /// Per (channel, object) and unmatched: the requests each received.
    fn tally(stage: &Stage) -> BTreeMap<Option<(String, String)>, u64> {
        let s = stage.collect();
        let mut m = BTreeMap::new();
        m.insert(None, s.unmatched.ops);
        for c in s.channels {
            for o in c.objects {
                m.insert(Some((c.name.clone(), o.name)), o.counts.ops);
            }
        }
        m
    }

    proptest::proptest! {
        /// `passes_at_once` is never wrong: whatever the channels, their
        /// objects and the rules, a request whose type it says passes at
        /// once is routed to a Noop object or to no channel.
        #[test]
        fn passes_at_once_only_when_every_route_is_a_noop(
            acting in proptest::collection::vec(proptest::bool::ANY, 3),
            rules in proptest::collection::vec((pattern_strategy(), 0usize..3), 0..8),
            object_rule in proptest::option::of((pattern_strategy(), 0usize..3)),
            default in proptest::option::of(0usize..3),
            ctxs in proptest::collection::vec(context_strategy(), 1..30),
        ) {
            let names = ["c0", "c1", "c2"];
            let stage = Stage::builder("at-once").build();
            let mut setup: Vec<Rule> = names.iter().map(|n| channel(n)).collect();
            for (n, acts) in names.iter().zip(&acting) {
                // Every channel has an object "o": a drl where it acts.
                setup.push(if *acts {
                    drl(n, "o", Rate::ops_per_sec(1_000_000))
                } else {
                    Rule::CreateObject { channel: (*n).into(), name: "o".into(), config: ObjectConfig::Noop }
                });
            }
            if let Some((p, c)) = object_rule {
                setup.push(Rule::MapObject { channel: names[c].into(), pattern: p, object: "o".into() });
            }
            for (p, c) in rules {
                setup.push(Rule::MapChannel { pattern: p, channel: names[c].into() });
            }
            setup.push(Rule::SetDefaultChannel { channel: default.map(|c| names[c].into()) });
            stage.apply_all(&setup).unwrap();
            for c in &ctxs {
                if stage.passes_at_once(c.request_type) {
                    if let Some((channel, object)) = stage.route(c) {
                        let i = names.iter().position(|n| *n == channel).unwrap();
                        proptest::prop_assert!(
                            !acting[i] || object != "o",
                            "{:?} reaches the drl of {}", c, channel
                        );
                    }
                }
            }
        }

        /// The route memo never changes where a request goes: whatever
        /// order contexts arrive in (colliding in the memo or not), mixed
        /// with requests through `Stage::enforce` and a handle, and across
        /// a rule change in the middle, each request is counted where
        /// `route` (which bypasses the memo) says it goes.
        #[test]
        fn route_memo_agrees_with_routing(
            rules in proptest::collection::vec((pattern_strategy(), 0usize..3), 0..8),
            object_rule in proptest::option::of(pattern_strategy()),
            default in proptest::option::of(0usize..3),
            change in (pattern_strategy(), 0usize..3),
            before in proptest::collection::vec(context_strategy(), 1..30),
            after in proptest::collection::vec(context_strategy(), 1..30),
        ) {
            let names = ["c0", "c1", "c2"];
            let stage = Stage::builder("memo").build();
            let mut setup: Vec<Rule> = names.iter().map(|n| channel(n)).collect();
            setup.push(Rule::CreateObject {
                channel: "c0".into(),
                name: "o".into(),
                config: ObjectConfig::Noop,
            });
            if let Some(p) = object_rule {
                setup.push(Rule::MapObject { channel: "c0".into(), pattern: p, object: "o".into() });
            }
            for (p, c) in rules {
                setup.push(Rule::MapChannel { pattern: p, channel: names[c].into() });
            }
            setup.push(Rule::SetDefaultChannel { channel: default.map(|c| names[c].into()) });
            stage.apply_all(&setup).unwrap();
            let mut handle = stage.handle();
            let mut expect = tally(&stage);
            for (phase, ctxs) in [before, after].into_iter().enumerate() {
                if phase == 1 {
                    stage
                        .apply(&Rule::MapChannel { pattern: change.0, channel: names[change.1].into() })
                        .unwrap();
                }
                for (i, c) in ctxs.iter().enumerate() {
                    *expect.entry(stage.route(c)).or_default() += 1;
                    // The memo serves `enforce_on_thread` and
                    // `pass_on_thread`; the other entry points route
                    // without it and must agree.
                    match i % 4 {
                        0 => {
                            stage.enforce(c, None).unwrap();
                        }
                        1 => {
                            handle.enforce(c, None).unwrap();
                        }
                        2 => {
                            crate::context::with_thread_ref(|t| stage.enforce_on_thread(t, c))
                                .unwrap();
                        }
                        _ => crate::context::with_thread_ref(|t| {
                            if !stage.pass_on_thread(t, c) {
                                stage.enforce_on_thread(t, c).unwrap();
                            }
                        }),
                    }
                }
                proptest::prop_assert_eq!(tally(&stage), expect.clone());
            }
        }
    }
}
