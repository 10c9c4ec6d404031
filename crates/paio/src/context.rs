//! Context objects: the classifiers that describe one request (§3.1, §4).
//!
//! A [`Context`] is a handful of integers — workflow id, request type,
//! request context, file class, criticality and size — so creating one never allocates and matching it never touches a
//! string. Names ("read", "flush", "compaction_l0") are interned once, at
//! configuration time, into small integers ([`RequestType`], [`RequestContext`]).
//!
//! Context propagation: a layer that knows why I/O happens (a flush job starts)
//! sets the calling thread's request context with [`ContextScope::enter`] (or
//! [`set_request_context`] / [`clear_request_context`]); [`Context::new`] picks
//! it up. A request context given explicitly with
//! [`Context::with_request_context`] overrides the thread's.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{OnceLock, RwLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::criticality::Criticality;

/// Identifies a workflow: by default the kernel id of the calling thread.
pub type WorkflowId = u64;

/// The kind of operation a request performs (read, write, put, ...).
///
/// Built-in types have fixed numbers (the C ABI exports them as constants);
/// [`RequestType::named`] interns any other name at or above
/// [`RequestType::FIRST_CUSTOM`], so the set is extensible at run time.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct RequestType(u16);

macro_rules! builtin_request_types {
    ($($konst:ident = $num:literal => $name:literal,)*) => {
        impl RequestType {
            $(
                #[doc = concat!("The built-in `", $name, "` request type.")]
                pub const $konst: RequestType = RequestType($num);
            )*
        }
        const BUILTIN_TYPES: &[(u16, &str)] = &[$(($num, $name),)*];
    };
}

builtin_request_types! {
    OTHER = 0 => "other",
    READ = 1 => "read",
    WRITE = 2 => "write",
    OPEN = 3 => "open",
    CLOSE = 4 => "close",
    FSYNC = 5 => "fsync",
    FDATASYNC = 6 => "fdatasync",
    SYNC_FILE_RANGE = 7 => "sync_file_range",
    STAT = 8 => "stat",
    UNLINK = 9 => "unlink",
    RENAME = 10 => "rename",
    MKDIR = 11 => "mkdir",
    RMDIR = 12 => "rmdir",
    TRUNCATE = 13 => "truncate",
    FALLOCATE = 14 => "fallocate",
    PUT = 15 => "put",
    GET = 16 => "get",
    DELETE = 17 => "delete",
    SCAN = 18 => "scan",
    MERGE = 19 => "merge",
}

impl RequestType {
    /// Custom request types are numbered from here.
    pub const FIRST_CUSTOM: u16 = 1024;

    /// The request type called `name`: a built-in one, or a custom one interned
    /// on first use. Fails only when 64,512 custom names already exist or the
    /// name is empty.
    pub fn named(name: &str) -> Result<Self, InternError> {
        if let Some(&(n, _)) = BUILTIN_TYPES.iter().find(|(_, s)| *s == name) {
            return Ok(Self(n));
        }
        interner().intern(Namespace::RequestType, name).map(Self)
    }

    /// The type with number `raw`, if it is built in or was interned.
    /// Lock-free: cheap enough to validate ids on every request.
    #[inline]
    pub fn from_raw(raw: u16) -> Option<Self> {
        let known = if raw < Self::FIRST_CUSTOM {
            (raw as usize) < BUILTIN_TYPES.len()
        } else {
            raw - Self::FIRST_CUSTOM < interner().type_count.load(Ordering::Acquire)
        };
        known.then_some(Self(raw))
    }

    /// The type's number.
    pub const fn raw(self) -> u16 {
        self.0
    }

    /// The type's name.
    pub fn name(self) -> String {
        self.lookup_name().unwrap_or_else(|| format!("#{}", self.0))
    }

    /// Whether the type is one of paio's built-in types (not interned by a
    /// program or policy).
    pub const fn is_builtin(self) -> bool {
        self.0 < Self::FIRST_CUSTOM
    }

    /// The names of the built-in types, in number order.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN_TYPES.iter().map(|(_, s)| *s)
    }

    fn lookup_name(self) -> Option<String> {
        if self.0 < Self::FIRST_CUSTOM {
            BUILTIN_TYPES
                .iter()
                .find(|(n, _)| *n == self.0)
                .map(|(_, s)| s.to_string())
        } else {
            interner().name(Namespace::RequestType, self.0)
        }
    }
}

/// Defines an interned class name: a `u16` newtype whose 0 is `NONE` (the
/// name `"none"`) and whose other values are names interned in `$ns`.
macro_rules! interned_class {
    ($(#[$doc:meta])* $ty:ident, $ns:ident, $count:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        #[repr(transparent)]
        pub struct $ty(u16);

        impl $ty {
            #[doc = concat!("No ", $what, ".")]
            pub const NONE: $ty = $ty(0);

            #[doc = concat!("The ", $what, " called `name`, interned on first use (`\"none\"` is `NONE`). ")]
            #[doc = "Fails when 65,535 names exist already or the name is empty."]
            pub fn named(name: &str) -> Result<Self, InternError> {
                if name == "none" {
                    return Ok(Self::NONE);
                }
                interner().intern(Namespace::$ns, name).map(Self)
            }

            #[doc = concat!("The ", $what, " with number `raw`, if it is `NONE` or was interned. ")]
            #[doc = "Lock-free: cheap enough to validate ids on every request."]
            #[inline]
            pub fn from_raw(raw: u16) -> Option<Self> {
                // `NONE` without the interner: most requests carry it.
                (raw == 0 || raw <= interner().$count.load(Ordering::Acquire)).then_some(Self(raw))
            }

            #[doc = concat!("The ", $what, "'s number.")]
            pub const fn raw(self) -> u16 {
                self.0
            }

            #[doc = concat!("The ", $what, "'s name (`\"none\"` for `NONE`).")]
            pub fn name(self) -> String {
                if self.0 == 0 {
                    return "none".to_string();
                }
                interner()
                    .name(Namespace::$ns, self.0)
                    .unwrap_or_else(|| format!("#{}", self.0))
            }
        }
    };
}

interned_class!(
    /// The application-defined class of a request (`flush`,
    /// `compaction_l0`, ...), interned to a small integer.
    /// [`RequestContext::NONE`] means "not set".
    RequestContext,
    RequestContext,
    context_count,
    "request context"
);

interned_class!(
    /// The class of the file a request touches (`data`, `logs`, ...), as an
    /// interposer derives it from the file's path, interned to a small
    /// integer. [`FileClass::NONE`] means "unknown or not classified".
    FileClass,
    FileClass,
    file_class_count,
    "file class"
);

macro_rules! named_serde {
    ($ty:ident, $what:literal) => {
        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($ty), self.name())
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.name())
            }
        }
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.name())
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                $ty::named(&name).map_err(|e| {
                    serde::de::Error::custom(format!(concat!("invalid ", $what, ": {}"), e))
                })
            }
        }
    };
}
named_serde!(RequestType, "request type");
named_serde!(RequestContext, "request context");
named_serde!(FileClass, "file class");

/// Why a name could not be interned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InternError {
    /// The name was empty.
    #[error("a name must not be empty")]
    Empty,
    /// The name was longer than 256 bytes.
    #[error("name of {0} bytes is longer than the 256 allowed")]
    TooLong(usize),
    /// Every number of the namespace is taken.
    #[error("no more {0} names can be interned (limit reached)")]
    Full(&'static str),
}

#[derive(Clone, Copy)]
enum Namespace {
    RequestType,
    RequestContext,
    FileClass,
}

#[derive(Default)]
struct Names {
    by_name: HashMap<String, u16>,
    by_id: Vec<String>,
}

#[derive(Default)]
struct Interner {
    types: RwLock<Names>,
    contexts: RwLock<Names>,
    file_classes: RwLock<Names>,
    /// Number of interned names of each namespace, readable without a lock.
    type_count: AtomicU16,
    context_count: AtomicU16,
    file_class_count: AtomicU16,
}

fn interner() -> &'static Interner {
    static I: OnceLock<Interner> = OnceLock::new();
    I.get_or_init(Interner::default)
}

impl Interner {
    fn table(&self, ns: Namespace) -> (&RwLock<Names>, &AtomicU16, u16, &'static str) {
        match ns {
            Namespace::RequestType => (
                &self.types,
                &self.type_count,
                RequestType::FIRST_CUSTOM,
                "request type",
            ),
            Namespace::RequestContext => {
                (&self.contexts, &self.context_count, 1, "request context")
            }
            Namespace::FileClass => (&self.file_classes, &self.file_class_count, 1, "file class"),
        }
    }

    fn intern(&self, ns: Namespace, name: &str) -> Result<u16, InternError> {
        if name.is_empty() {
            return Err(InternError::Empty);
        }
        if name.len() > 256 {
            return Err(InternError::TooLong(name.len()));
        }
        let (lock, count, first, what) = self.table(ns);
        if let Some(&id) = read(lock).by_name.get(name) {
            return Ok(id);
        }
        let mut names = lock.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = names.by_name.get(name) {
            return Ok(id);
        }
        let id = u16::try_from(first as usize + names.by_id.len())
            .map_err(|_| InternError::Full(what))?;
        names.by_id.push(name.to_string());
        names.by_name.insert(name.to_string(), id);
        count.store(names.by_id.len() as u16, Ordering::Release);
        Ok(id)
    }

    fn name(&self, ns: Namespace, id: u16) -> Option<String> {
        let (lock, _, first, _) = self.table(ns);
        let idx = id.checked_sub(first)? as usize;
        read(lock).by_id.get(idx).cloned()
    }
}

fn read(lock: &RwLock<Names>) -> std::sync::RwLockReadGuard<'_, Names> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

/// The classifiers of one request. `Copy`, 24 bytes, no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context {
    /// Whether a latency-critical activity waits for the request (default:
    /// the calling thread's or process's mark, [`crate::criticality`]).
    pub criticality: Criticality,
    /// Who issued the request (default: the calling thread's kernel id).
    pub workflow: WorkflowId,
    /// What the request does.
    pub request_type: RequestType,
    /// Why the request happens (propagated from the layer above).
    pub request_context: RequestContext,
    /// Which kind of file it touches ([`FileClass::NONE`] unless a layer that
    /// knows the file, such as the interposer, sets it).
    pub file_class: FileClass,
    /// Size in bytes (0 for context-only requests such as `open`).
    pub size: u64,
}

impl Context {
    /// A context for the calling thread: workflow = its kernel thread id,
    /// request context = the one the thread has set (or `NONE`).
    #[inline]
    pub fn new(request_type: RequestType, size: u64) -> Self {
        THREAD.with(|t| t.context(request_type, size))
    }

    /// A context with the given classifiers, no file class and normal
    /// criticality.
    #[inline]
    pub const fn explicit(
        workflow: WorkflowId,
        request_type: RequestType,
        request_context: RequestContext,
        size: u64,
    ) -> Self {
        Self {
            criticality: Criticality::Normal,
            workflow,
            request_type,
            request_context,
            file_class: FileClass::NONE,
            size,
        }
    }

    /// The same context with another criticality.
    #[inline]
    pub const fn with_criticality(mut self, criticality: Criticality) -> Self {
        self.criticality = criticality;
        self
    }

    /// The same context with another workflow id.
    #[inline]
    pub const fn with_workflow(mut self, workflow: WorkflowId) -> Self {
        self.workflow = workflow;
        self
    }

    /// The same context with a file class.
    #[inline]
    pub const fn with_file_class(mut self, file_class: FileClass) -> Self {
        self.file_class = file_class;
        self
    }

    /// The same context with an explicit request context, which overrides the
    /// one propagated through the thread.
    #[inline]
    pub const fn with_request_context(mut self, request_context: RequestContext) -> Self {
        self.request_context = request_context;
        self
    }
}

/// Everything the request path keeps per thread, in one thread-local: the
/// thread's id and propagated request context, its statistics slot
/// ([`crate::stats`]) and its routing-table cache ([`crate::stage`]). One
/// lookup per request, which matters where thread-locals cost a function call,
/// as in a preloaded library.
///
/// It has a constant initialiser and no destructor, so it is usable before
/// anything else ran on the thread and during thread exit. What needs
/// releasing at thread exit (the statistics slot, cached tables) is released
/// by small separate thread-locals registered on first use, off the request
/// path.
pub(crate) struct ThreadState {
    /// Cached kernel thread id; 0 until first read.
    id: Cell<u64>,
    /// The propagated request context.
    context: Cell<RequestContext>,
    /// The thread's criticality marks ([`crate::criticality`]): a switch bit
    /// and a count of open scopes; 0 when unmarked.
    pub(crate) critical: Cell<u32>,
    /// Cells of the layer embedding the stage ([`ThreadRef::embedder`]).
    embedder: EmbedderCells,
    /// The thread's counter slot index ([`crate::stats`]); unassigned until
    /// the thread first records a request.
    pub(crate) slot: Cell<usize>,
    /// The thread's routing-table cache ([`crate::stage`]).
    pub(crate) tables: crate::stage::TableCache,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            id: Cell::new(0),
            context: Cell::new(RequestContext::NONE),
            critical: Cell::new(0),
            embedder: EmbedderCells {
                depth: Cell::new(0),
                countdown: Cell::new(0),
                names: Cell::new(0),
                word: Cell::new(0),
                carried: [Cell::new(0), Cell::new(0)],
            },
            slot: Cell::new(crate::stats::UNASSIGNED),
            tables: crate::stage::TableCache::new(),
        }
    };
}

/// Runs `f` on the calling thread's [`ThreadState`]. Never fails: the state
/// has no destructor, so it outlives every other thread-local of the thread.
#[inline]
pub(crate) fn with_thread<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    THREAD.with(f)
}

/// Per-thread cells the stage keeps for the layer that embeds it (an I/O
/// interposer's re-entrancy depth, a countdown between periodic jobs), so
/// that layer needs no thread-local of its own: it reaches them with
/// [`with_thread_ref`], in the same lookup as the stage's per-thread state.
/// Zero on every new thread; this crate never reads or writes them.
#[derive(Debug)]
pub struct EmbedderCells {
    /// Free for the embedder (the interposer: its re-entrancy depth).
    pub depth: Cell<u32>,
    /// Free for the embedder (the interposer: calls left before it looks at
    /// the clock).
    pub countdown: Cell<u32>,
    /// Free for the embedder (the interposer: the address of the thread's
    /// `errno`, looked up once).
    pub word: Cell<usize>,
    /// Free for the embedder (the interposer: the generation of thread names
    /// it last checked this thread's name against).
    pub names: Cell<u32>,
    /// Free for the embedder (the interposer: bytes of stdio reads and
    /// writes not charged yet).
    pub carried: [Cell<u64>; 2],
}

/// The calling thread's per-thread state (from [`with_thread_ref`]): its
/// request classifiers, statistics slot, routing-table cache and
/// [`EmbedderCells`]. Neither `Send` nor `Sync`: it belongs to its thread.
/// Pass it to [`crate::Stage::enforce_on_thread`] to create and enforce a
/// request with no further thread-local lookup.
#[derive(Clone, Copy)]
pub struct ThreadRef<'t>(pub(crate) &'t ThreadState);

impl<'t> ThreadRef<'t> {
    /// The embedding layer's cells.
    #[inline]
    pub fn embedder(self) -> &'t EmbedderCells {
        &self.0.embedder
    }

    /// [`Context::new`] for this thread, without a thread-local lookup.
    #[inline]
    pub fn context(self, request_type: RequestType, size: u64) -> Context {
        self.0.context(request_type, size)
    }
}

impl fmt::Debug for ThreadRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadRef")
            .field("workflow", &self.0.id())
            .field("request_context", &self.0.context.get())
            .finish_non_exhaustive()
    }
}

/// Runs `f` with the calling thread's state, in one thread-local lookup
/// (one function call where thread-locals cost one, as in a preloaded
/// library). The state has a constant initialiser and no destructor: it is
/// usable at any time, also before `main` and during thread exit, and lives
/// as long as its thread.
#[inline]
pub fn with_thread_ref<R>(f: impl FnOnce(ThreadRef<'_>) -> R) -> R {
    THREAD.with(|t| f(ThreadRef(t)))
}

impl ThreadState {
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        match self.id.get() {
            0 => read_thread_id(&self.id),
            id => id,
        }
    }

    /// A context for this thread (see [`Context::new`]).
    #[inline]
    pub(crate) fn context(&self, request_type: RequestType, size: u64) -> Context {
        Context {
            criticality: crate::criticality::of_thread(self.critical.get(), || self.id()),
            workflow: self.id(),
            request_type,
            request_context: self.context.get(),
            file_class: FileClass::NONE,
            size,
        }
    }
}

#[cold]
fn read_thread_id(cache: &Cell<u64>) -> u64 {
    let id = rustix::thread::gettid().as_raw_nonzero().get() as u64;
    cache.set(id);
    id
}

/// The calling thread's kernel thread id, read once per thread and cached.
///
/// A forked child's first thread inherits its parent's cached value; call
/// [`forget_thread_id`] in the child (the preload library does so from its
/// `atfork` handler).
#[inline]
pub fn current_workflow() -> WorkflowId {
    THREAD.with(ThreadState::id)
}

/// Drops the calling thread's cached thread id so the next
/// [`current_workflow`] reads it from the kernel again.
pub fn forget_thread_id() {
    THREAD.with(|t| t.id.set(0));
}

/// The calling thread's propagated request context (`NONE` if unset).
#[inline]
pub fn current_request_context() -> RequestContext {
    THREAD.with(|t| t.context.get())
}

/// Sets the calling thread's request context until changed or cleared.
#[inline]
pub fn set_request_context(ctx: RequestContext) {
    THREAD.with(|t| t.context.set(ctx));
}

/// Clears the calling thread's request context (back to `NONE`).
#[inline]
pub fn clear_request_context() {
    set_request_context(RequestContext::NONE);
}

/// Sets the thread's request context for a scope and restores the previous
/// one when dropped, so scopes nest. Not `Send`: it belongs to its thread.
#[must_use = "the context is restored as soon as the scope is dropped"]
pub struct ContextScope {
    previous: RequestContext,
    _thread_bound: PhantomData<*const ()>,
}

impl ContextScope {
    /// Enters `ctx` on the calling thread.
    pub fn enter(ctx: RequestContext) -> Self {
        let previous = THREAD.with(|t| t.context.replace(ctx));
        Self {
            previous,
            _thread_bound: PhantomData,
        }
    }
}

impl Drop for ContextScope {
    fn drop(&mut self) {
        set_request_context(self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_types_round_trip() {
        for &(n, name) in BUILTIN_TYPES {
            let t = RequestType::named(name).unwrap();
            assert_eq!(t.raw(), n);
            assert_eq!(t.name(), name);
            assert_eq!(RequestType::from_raw(n), Some(t));
        }
        assert_eq!(RequestType::named("read").unwrap(), RequestType::READ);
    }

    #[test]
    fn custom_names_intern_to_stable_ids() {
        let a = RequestType::named("ctx-test-custom-op").unwrap();
        assert!(a.raw() >= RequestType::FIRST_CUSTOM);
        assert_eq!(RequestType::named("ctx-test-custom-op").unwrap(), a);
        assert_eq!(a.name(), "ctx-test-custom-op");
        let f = RequestContext::named("ctx-test-flush").unwrap();
        assert_ne!(f, RequestContext::NONE);
        assert_eq!(RequestContext::named("ctx-test-flush").unwrap(), f);
        assert_eq!(RequestContext::from_raw(f.raw()), Some(f));
        assert_eq!(RequestContext::named("none").unwrap(), RequestContext::NONE);
        assert_eq!(RequestContext::from_raw(u16::MAX), None);
        assert_eq!(RequestType::from_raw(u16::MAX), None);
    }

    #[test]
    fn file_classes_intern_and_attach_to_contexts() {
        let data = FileClass::named("ctx-test-data").unwrap();
        assert_ne!(data, FileClass::NONE);
        assert_eq!(FileClass::named("ctx-test-data").unwrap(), data);
        assert_eq!(FileClass::from_raw(data.raw()), Some(data));
        assert_eq!(FileClass::named("none").unwrap(), FileClass::NONE);
        assert_eq!(data.name(), "ctx-test-data");
        let c = Context::new(RequestType::READ, 1);
        assert_eq!(c.file_class, FileClass::NONE);
        assert_eq!(c.with_file_class(data).file_class, data);
        assert_eq!(serde_json::to_string(&data).unwrap(), "\"ctx-test-data\"");
    }

    #[test]
    fn bad_names_are_rejected() {
        assert_eq!(RequestContext::named(""), Err(InternError::Empty));
        assert_eq!(
            RequestType::named(&"x".repeat(300)),
            Err(InternError::TooLong(300))
        );
    }

    #[test]
    fn context_takes_thread_state_and_explicit_overrides() {
        let flush = RequestContext::named("ctx-test-scope").unwrap();
        let other = RequestContext::named("ctx-test-other").unwrap();
        assert_eq!(
            Context::new(RequestType::READ, 1).request_context,
            RequestContext::NONE
        );
        {
            let _s = ContextScope::enter(flush);
            let c = Context::new(RequestType::WRITE, 4096);
            assert_eq!(c.request_context, flush);
            assert_eq!(c.size, 4096);
            assert_eq!(c.workflow, current_workflow());
            {
                let _inner = ContextScope::enter(other);
                assert_eq!(current_request_context(), other);
            }
            assert_eq!(current_request_context(), flush);
            assert_eq!(c.with_request_context(other).request_context, other);
        }
        assert_eq!(current_request_context(), RequestContext::NONE);
        set_request_context(flush);
        assert_eq!(current_request_context(), flush);
        clear_request_context();
        assert_eq!(current_request_context(), RequestContext::NONE);
    }

    #[test]
    fn context_stays_three_words() {
        assert_eq!(std::mem::size_of::<Context>(), 24);
    }

    #[test]
    fn workflow_is_per_thread() {
        let here = current_workflow();
        assert_eq!(here, current_workflow());
        let there = std::thread::spawn(current_workflow).join().unwrap();
        assert_ne!(here, there);
        forget_thread_id();
        assert_eq!(current_workflow(), here);
    }

    #[test]
    fn serde_uses_names() {
        let j = serde_json::to_string(&RequestType::FSYNC).unwrap();
        assert_eq!(j, "\"fsync\"");
        let t: RequestType = serde_json::from_str("\"get\"").unwrap();
        assert_eq!(t, RequestType::GET);
        assert!(serde_json::from_str::<RequestContext>("\"\"").is_err());
    }
}
