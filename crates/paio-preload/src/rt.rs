//! The per-process runtime: configuration (from the constructor's envp), the
//! stage, the depth guard, classification, fork handling and the statistics
//! file.

use std::ffi::{c_char, c_int, CStr};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use paio::context::{FileClass, ThreadRef};
use paio::{
    Admission, Context, Pattern, Policy, RequestContext, RequestType, Rule, Stage, StageStats,
};

use crate::board::{self, Board};
use crate::fdtable;

/// The shared board of critical I/O, once opened.
static BOARD: std::sync::OnceLock<std::sync::Arc<Board>> = std::sync::OnceLock::new();

/// The policy's `[criticality]` names, when it has any.
static NAMES: std::sync::OnceLock<paio::CriticalNames> = std::sync::OnceLock::new();
/// Bumped when a thread names *another* thread: every thread re-checks its
/// own name against [`NAMES`] at its next data call.
static NAMES_GENERATION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The policy a process runs when `PAIO_POLICY` is not set: pass-through,
/// with statistics per kind of call (reads, writes, everything else). Built
/// from rules, not parsed: parsing a policy costs every process start about
/// 0.1 ms (docs/performance.md, "Small files"). docs/preload.md shows it as
/// a policy file, and a test checks that both build the same stage.
fn default_policy() -> Policy {
    let channel = |name: &str| Rule::CreateChannel { name: name.into() };
    let route = |rt: RequestType, name: &str| Rule::MapChannel {
        pattern: Pattern {
            request_type: Some(rt),
            ..Pattern::ANY
        },
        channel: name.into(),
    };
    Policy::from_rules(
        Some("preload".into()),
        vec![
            channel("read"),
            route(RequestType::READ, "read"),
            channel("write"),
            route(RequestType::WRITE, "write"),
            channel("metadata"),
            Rule::SetDefaultChannel {
                channel: Some("metadata".into()),
            },
        ],
    )
}

const UNINIT: u8 = 0;
const ACTIVE: u8 = 1;
const OFF: u8 = 2;

/// UNINIT before the constructor ran (every call passes through), ACTIVE
/// after, OFF when the configuration was unusable (pass-through for good).
static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Leaked at construction, never freed.
static CONFIG: AtomicPtr<Config> = AtomicPtr::new(ptr::null_mut());
/// This process's stage; leaked, never freed. Reset to null in a forked
/// child, which then builds its own on its first call.
static STAGE: AtomicPtr<Stage> = AtomicPtr::new(ptr::null_mut());
/// The process id (workflow for `PAIO_WORKFLOW=process`); reset at fork.
static PID: AtomicU64 = AtomicU64::new(0);
/// CLOCK_MONOTONIC_COARSE nanoseconds at which the next statistics push is due.
static NEXT_PUSH_NS: AtomicU64 = AtomicU64::new(0);
/// Set while one thread writes the statistics file.
static PUSHING: AtomicBool = AtomicBool::new(false);
/// Set once this process said on stderr that a statistics file could not be
/// written; later failures go to the `PAIO_LOG` log only. Reset at fork.
static STATS_LOST_SAID: AtomicBool = AtomicBool::new(false);
/// Bit `t`: metadata calls of request type `t` go straight to libc, because
/// nothing would observe them ([`unobserved_meta`]). Set once, before the
/// library turns active; a forked child keeps it (same configuration, same
/// policy).
static UNOBSERVED_META: AtomicU64 = AtomicU64::new(0);

/// Calls between two clock reads for the periodic statistics push.
const CLOCK_EVERY: u32 = 16;

pub(crate) struct Config {
    /// Whether requests need [`adjust`]: a process workflow, a process-wide
    /// request context or file classes are configured.
    adjusts: bool,
    /// paiod's socket (`PAIO_CONTROL`), when the stage registers with it.
    control: Option<std::path::PathBuf>,
    /// `PAIO_POLICY`'s (text, path); `None`: [`default_policy`].
    policy_file: Option<(String, String)>,
    stage_name: Option<String>,
    labels: Vec<(String, String)>,
    workflow_process: bool,
    stats_path: Option<String>,
    interval_ns: u64,
    pub(crate) log: bool,
    /// The process-wide request context (`PAIO_CONTEXT`).
    default_context: RequestContext,
    /// (canonical prefix, class) sorted longest first.
    class_rules: Vec<(String, u16)>,
    /// `PAIO_CRITICAL=1`: the whole process is critical.
    critical: bool,
    /// The shared board's path (`PAIO_BOARD`; `None` for `off`).
    board: Option<PathBuf>,
    /// The file of shared limits' buckets (`PAIO_SHARED`).
    shared: Option<PathBuf>,
    /// Interned classes; table class `i` is `classes[i - 1]`.
    classes: Vec<FileClass>,
    /// The table class of pipes and sockets ([`paio::env::STREAM_CLASS`]),
    /// given only when the policy names that class
    /// ([`Config::classify_streams`]); 0: off.
    stream_class: u16,
}

#[inline]
fn config() -> Option<&'static Config> {
    let p = CONFIG.load(Ordering::Acquire);
    // SAFETY: CONFIG is either null or a leaked Box that is never freed.
    unsafe { p.as_ref() }
}

// ---------------------------------------------------------------- errno

#[inline]
pub(crate) fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[inline]
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: as in errno().
    unsafe { *libc::__errno_location() = e }
}

// ---------------------------------------------------------------- guard

/// Held while the library does its own work on this thread: restores errno
/// and the depth when dropped.
///
/// The per-thread state is the stage's own ([`paio::context::with_thread_ref`]:
/// constant initialiser, no destructor, so usable before the constructor and
/// during thread exit), with this library's depth and clock countdown in its
/// [`paio::context::EmbedderCells`]: one thread-local lookup per call for the
/// guard and the request together.
pub(crate) struct Guard {
    errno: c_int,
    /// This thread's errno slot (`__errno_location()`, constant per thread),
    /// kept so that restoring errno costs no second call.
    errno_slot: *mut c_int,
    /// This thread's state, valid while the thread lives (the guard never
    /// leaves its thread's stack; `ThreadRef` is neither `Send` nor `Sync`).
    thread: ThreadRef<'static>,
}

impl Guard {
    /// `None` when the call must pass through: before the constructor, when
    /// disabled, or when the library is already on this thread's stack.
    #[inline]
    pub(crate) fn enter() -> Option<Guard> {
        if STATE.load(Ordering::Relaxed) != ACTIVE {
            return None;
        }
        Self::enter_always()
    }

    /// As [`Guard::enter`] but also before/after activation (constructor,
    /// exit paths).
    #[inline]
    fn enter_always() -> Option<Guard> {
        let thread = paio::context::with_thread_ref(|t| {
            // SAFETY: the stage's per-thread state has no destructor and
            // lives as long as its thread (documented by `with_thread_ref`);
            // the guard holding it never leaves this thread's stack.
            unsafe { std::mem::transmute::<ThreadRef<'_>, ThreadRef<'static>>(t) }
        });
        let cells = thread.embedder();
        if cells.depth.get() != 0 {
            return None;
        }
        cells.depth.set(1);
        // The thread's errno address, looked up once per thread (a forked
        // child's thread keeps its address: the address space is copied).
        let mut errno_slot = cells.word.get() as *mut c_int;
        if errno_slot.is_null() {
            // SAFETY: __errno_location returns the calling thread's errno
            // slot, valid for the thread's lifetime.
            errno_slot = unsafe { libc::__errno_location() };
            cells.word.set(errno_slot as usize);
        }
        Some(Guard {
            // SAFETY: as above.
            errno: unsafe { *errno_slot },
            errno_slot,
            thread,
        })
    }
}

impl Guard {
    /// Enters again on the thread of an earlier guard (`thread`, the calling
    /// thread), without looking the thread up: the two-phase path's way back
    /// in after the real call. `None` if the library is on the stack.
    #[inline]
    pub(crate) fn reenter(thread: ThreadRef<'static>) -> Option<Guard> {
        let cells = thread.embedder();
        if cells.depth.get() != 0 {
            return None;
        }
        cells.depth.set(1);
        // Set by the first guard of this thread (enter_always).
        let errno_slot = cells.word.get() as *mut c_int;
        Some(Guard {
            // SAFETY: this thread's errno slot, recorded by enter_always.
            errno: unsafe { *errno_slot },
            errno_slot,
            thread,
        })
    }

    /// The errno this guard restores when dropped.
    #[inline]
    pub(crate) fn restore_errno_to(&mut self, e: c_int) {
        self.errno = e;
    }

    /// The errno the thread had when the guard was entered.
    #[inline]
    pub(crate) fn saved_errno(&self) -> c_int {
        self.errno
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        self.thread.embedder().depth.set(0);
        // SAFETY: `errno_slot` is this thread's errno slot (see the field).
        unsafe { *self.errno_slot = self.errno };
    }
}

// ---------------------------------------------------------------- logging

/// Writes `msg` to fd 2 through a raw syscall (never through our `write`).
pub(crate) fn raw_stderr(msg: &str) {
    let b = msg.as_bytes();
    let mut off = 0;
    while off < b.len() {
        // SAFETY: the pointer/length pair is within `b`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_write,
                2 as libc::c_long,
                b[off..].as_ptr(),
                b.len() - off,
            )
        };
        if n <= 0 {
            break;
        }
        off += n as usize;
    }
}

/// Diagnostics: only with PAIO_LOG set, so the host's stderr stays untouched.
pub(crate) fn log(msg: &str) {
    if config().is_some_and(|c| c.log) {
        raw_stderr(&format!("paio[{}]: {msg}\n", std::process::id()));
    }
}

// ---------------------------------------------------------------- construction

/// Runs from `.init_array` with (argc, argv, envp), before `main` and
/// before `environ` is guaranteed to be set up for preinit code.
extern "C" fn constructor(_argc: c_int, _argv: *const *const c_char, envp: *const *const c_char) {
    let Some(_g) = Guard::enter_always() else {
        return;
    };
    std::panic::set_hook(Box::new(|info| {
        raw_stderr(&format!("paio: internal error, aborting: {info}\n"));
        // SAFETY: abort never returns and unwinds nothing.
        unsafe { libc::abort() }
    }));
    // SAFETY: the dynamic loader passes a NULL-terminated envp array.
    let env = unsafe { read_env(envp) };
    if secure_execution() {
        refuse_secure(&env);
        return;
    }
    match Config::from_env(&env) {
        Ok(mut cfg) => {
            if let Some(path) = &cfg.shared {
                // Mapped when the policy first names a shared bucket.
                paio::object::install_shared_buckets(std::sync::Arc::new(
                    crate::buckets::FileBuckets::new(path),
                ));
            }
            match cfg.build_stage() {
                Ok(stage) => {
                    cfg.classify_streams(&stage);
                    let cfg: &'static Config = Box::leak(Box::new(cfg));
                    CONFIG.store(cfg as *const Config as *mut Config, Ordering::Release);
                    classify_inherited(cfg);
                    mark_process(cfg);
                    open_board(cfg);
                    let unobserved = unobserved_meta(cfg, &stage);
                    UNOBSERVED_META.store(unobserved, Ordering::Relaxed);
                    let stage = Box::into_raw(Box::new(stage));
                    STAGE.store(stage, Ordering::Release);
                    reset_process();
                    // SAFETY: just leaked, never freed.
                    start_control(cfg, unsafe { &*stage });
                    // SAFETY: registering a plain extern "C" fn handler.
                    unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) };
                    STATE.store(ACTIVE, Ordering::Release);
                    log(if unobserved == 0 {
                        "active"
                    } else {
                        "active; metadata calls that meet only Noop objects are not \
                         counted (no statistics file, no control plane)"
                    });
                }
                Err(e) => unusable(&env, &e),
            }
        }
        Err(e) => unusable(&env, &e),
    }
}

/// Whether the process runs in secure-execution mode (`AT_SECURE`: a
/// set-user-ID or set-group-ID program, or one with file capabilities). The
/// loader then ignores `LD_PRELOAD` paths with a slash, so the library gets
/// here only through `/etc/ld.so.preload` or a set-user-ID copy in a system
/// directory; the environment is the invoking user's and cannot be trusted
/// with the program's privileges.
fn secure_execution() -> bool {
    // SAFETY: getauxval only reads the auxiliary vector the kernel passed;
    // it returns 0 for a type it does not know.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Secure-execution mode: no `PAIO_*` variable is acted on (`PAIO_STATS`
/// would create files, `PAIO_POLICY` read them and `PAIO_CONTROL` and
/// `PAIO_BOARD` open sockets and shared memory, all with the program's
/// privileges, where the invoking user chose the paths), and the process runs
/// without a stage. Said on stderr when some `PAIO_*` variable was set, as
/// glibc's own variables are dropped there, so limits asked for are never
/// dropped silently.
#[cold]
fn refuse_secure(env: &[(String, String)]) {
    STATE.store(OFF, Ordering::Release);
    if env.iter().any(|(k, _)| k.starts_with("PAIO_")) {
        raw_stderr(
            "paio: this program runs with privileges its user does not have (set-user-ID, \
             set-group-ID or file capabilities): PAIO_* variables are ignored and it runs \
             without a stage (the caller's environment is not trusted with the program's \
             privileges)\n",
        );
    }
}

/// The configuration in `env` cannot be used (`why`). With limits asked for
/// (`PAIO_POLICY` or `PAIO_CONTROL` set) the process ends with status 2
/// before `main`: running it unenforced would drop those limits with only a
/// line on stderr to show for it. Without, it runs without a stage (nothing
/// to enforce is lost) after saying so.
#[cold]
fn unusable(env: &[(String, String)], why: &str) {
    let asked = ["PAIO_POLICY", "PAIO_CONTROL"]
        .into_iter()
        .find(|k| env_get(env, k).is_some_and(|v| !v.is_empty()));
    STATE.store(OFF, Ordering::Release);
    match asked {
        Some(var) => {
            raw_stderr(&format!(
                "paio: {why}\npaio: exiting with status 2 rather than run without the limits {var} asks for; \
                 fix the setting, or unset {var} to run unenforced\n"
            ));
            loop {
                // SAFETY: exit_group ends the process; nothing runs after it
                // (before `main`, nothing of the program's is lost).
                unsafe { libc::syscall(libc::SYS_exit_group, 2 as libc::c_long) };
            }
        }
        None => raw_stderr(&format!("paio: {why}; running without a stage\n")),
    }
}

/// Runs from `.fini_array` at normal exit (after the program's own atexit
/// handlers, before stdio flushes its buffers): the exiting thread's
/// carried stdio bytes with what the open streams' buffers took since
/// their last charged call, then the final statistics push.
extern "C" fn destructor() {
    if STATE.load(Ordering::Acquire) == ACTIVE {
        let unseen = crate::stdio::at_exit();
        if let Some(g) = Guard::enter_always() {
            add_carried(&g, unseen);
            charge_carried_on(
                &g,
                ptr::null_mut(),
                &[RequestType::READ, RequestType::WRITE],
            );
            push_stats(true);
        }
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = constructor;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = destructor;

/// Called by `_exit`/`_Exit` before the real call.
pub(crate) fn before_exit() {
    if STATE.load(Ordering::Acquire) == ACTIVE {
        if let Some(g) = Guard::enter_always() {
            // stdio's buffered output is discarded by _exit: only the bytes
            // read are charged.
            charge_carried_on(&g, ptr::null_mut(), &[RequestType::READ]);
            push_stats(true);
        }
    }
}

extern "C" fn atfork_child() {
    // The child is single-threaded and owns nothing of its parent's stage:
    // a lock another parent thread held stays held in the leaked copy. The
    // child builds a fresh stage (fresh statistics) on its first call.
    STAGE.store(ptr::null_mut(), Ordering::Release);
    PUSHING.store(false, Ordering::Relaxed);
    STATS_LOST_SAID.store(false, Ordering::Relaxed);
    paio::context::forget_thread_id();
    // The parent's waits and loans name threads the child does not have.
    paio::inheritance::forget_after_fork();
    reset_process();
    if let Some(b) = BOARD.get() {
        // The child's critical requests are its own: a slot of its own.
        b.claim_slot();
    }
}

/// Opens the shared board and makes it the process's
/// ([`paio::criticality::install_board`]); says why on stderr if it cannot:
/// then only this process's critical I/O holds its background requests.
fn open_board(cfg: &Config) {
    let Some(path) = &cfg.board else { return };
    match Board::open(path) {
        Ok(b) => {
            let b = std::sync::Arc::new(b);
            if BOARD.set(b.clone()).is_ok() {
                paio::criticality::install_board(b);
            }
        }
        Err(e) => raw_stderr(&format!(
            "paio: {e}; critical I/O of other processes is not seen (PAIO_BOARD=off silences this)\n"
        )),
    }
}

fn reset_process() {
    PID.store(std::process::id() as u64, Ordering::Relaxed);
    NEXT_PUSH_NS.store(0, Ordering::Relaxed);
}

/// # Safety
/// `envp` is null or a NULL-terminated array of NUL-terminated strings.
unsafe fn read_env(envp: *const *const c_char) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if envp.is_null() {
        return out;
    }
    let mut p = envp;
    loop {
        // SAFETY: p is within the NULL-terminated array (caller's contract).
        let s = unsafe { *p };
        if s.is_null() {
            break;
        }
        // SAFETY: every entry is a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(s) }.to_bytes();
        if bytes.starts_with(b"PAIO_") || bytes.starts_with(b"XDG_RUNTIME_DIR=") {
            if let Some(eq) = bytes.iter().position(|&b| b == b'=') {
                out.push((
                    String::from_utf8_lossy(&bytes[..eq]).into_owned(),
                    String::from_utf8_lossy(&bytes[eq + 1..]).into_owned(),
                ));
            }
        }
        // SAFETY: not past the terminating NULL yet.
        p = unsafe { p.add(1) };
    }
    out
}

fn env_get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl Config {
    /// The configuration of `env` (checked by [`paio::env::parse`], the
    /// parser `paio run` validates with), the policy file read.
    fn from_env(env: &[(String, String)]) -> Result<Config, String> {
        let e = paio::env::parse(env).map_err(|e| e.to_string())?;
        let policy_file = match &e.policy {
            Some(path) => Some((
                paio::textfile::read_bounded(path, paio::policy::MAX_POLICY_BYTES)
                    .map_err(|err| format!("PAIO_POLICY {}: {err}", path.display()))?,
                path.display().to_string(),
            )),
            None => None,
        };
        let control = e
            .control
            .map(|c| c.path_with(env_get(env, "XDG_RUNTIME_DIR").map(std::path::PathBuf::from)));
        let board = match e.board {
            paio::env::BoardSetting::Off => None,
            paio::env::BoardSetting::Default => Some(board::default_path(None)),
            paio::env::BoardSetting::Path(p) => Some(p),
        };
        // Interned classes (table class i is classes[i - 1]) and their
        // canonical prefixes, longest first.
        let mut classes: Vec<FileClass> = Vec::new();
        let mut class_rules = Vec::new();
        for (fc, prefix) in &e.file_classes {
            let idx = match classes.iter().position(|c| c == fc) {
                Some(i) => i,
                None => {
                    classes.push(*fc);
                    classes.len() - 1
                }
            };
            let class = u16::try_from(idx + 1)
                .ok()
                .filter(|&c| c <= fdtable::MAX_CLASS)
                .ok_or("PAIO_FILE_CLASSES: too many classes")?;
            let canon = std::fs::canonicalize(prefix)
                .ok()
                .and_then(|p| p.to_str().map(str::to_string))
                .unwrap_or_else(|| prefix.clone());
            class_rules.push((canon.trim_end_matches('/').to_string(), class));
        }
        class_rules.sort_by_key(|r: &(String, u16)| std::cmp::Reverse(r.0.len()));
        Ok(Config {
            adjusts: e.workflow_process
                || e.context != RequestContext::NONE
                || !class_rules.is_empty(),
            control,
            policy_file,
            stage_name: e.stage_name,
            labels: e.labels,
            workflow_process: e.workflow_process,
            stats_path: e.stats,
            interval_ns: e.stats_interval.as_nanos().clamp(1, u64::MAX as u128) as u64,
            log: e.log,
            default_context: e.context,
            class_rules,
            critical: e.critical,
            board,
            shared: e.shared,
            classes,
            stream_class: 0,
        })
    }

    fn build_stage(&self) -> Result<Stage, String> {
        let policy = match &self.policy_file {
            Some((text, origin)) => Policy::parse(text, origin).map_err(|e| e.to_string())?,
            None => default_policy(),
        };
        // PAIO_STAGE_NAME, else the policy's `[stage] name`, else "preload".
        let name = (self.stage_name.clone())
            .or_else(|| policy.name.clone())
            .unwrap_or_else(|| "preload".to_string());
        let mut builder = Stage::builder(name);
        for (k, v) in &self.labels {
            builder = builder.label(k.clone(), v.clone());
        }
        let names = policy.critical_names.clone();
        INHERIT.store(policy.inherit, Ordering::Relaxed);
        HELPER_WINDOW_MS.store(
            policy.helper_window.as_millis().min(u128::from(u32::MAX)) as u64,
            Ordering::Relaxed,
        );
        crate::dirty::configure(policy.dirty);
        let stage = policy.build_stage(builder).map_err(|e| e.to_string())?;
        if !names.is_empty() {
            // Leaked once per process (a forked child keeps its parent's).
            let _ = NAMES.set(names);
        }
        Ok(stage)
    }

    /// Gives pipes and sockets a class of their own when `stage`'s rules
    /// name it ([`paio::env::STREAM_CLASS`]): `paio run --limit`'s policy
    /// does, so that data between processes passes its limits. Off
    /// otherwise: no descriptor is looked at.
    fn classify_streams(&mut self, stage: &Stage) {
        let Ok(stream) = FileClass::named(paio::env::STREAM_CLASS) else {
            return;
        };
        let info = stage.info();
        let named = info
            .channel_rules
            .iter()
            .chain(info.channels.iter().flat_map(|c| c.object_rules.iter()))
            .any(|(p, _)| p.file_class == Some(stream));
        if named {
            self.classes.push(stream);
            self.stream_class = u16::try_from(self.classes.len()).unwrap_or(0);
            self.adjusts |= self.stream_class != 0;
        }
    }

    /// The class of an absolute, canonical path: longest prefix wins.
    fn class_of(&self, path: &[u8]) -> u16 {
        for (prefix, class) in &self.class_rules {
            if path.starts_with(prefix.as_bytes())
                && (path.len() == prefix.len() || path[prefix.len()] == b'/')
            {
                return *class;
            }
        }
        0
    }
}

// ---------------------------------------------------------------- stage

/// This process's stage, building it after a fork.
#[inline]
fn stage() -> Option<&'static Stage> {
    let p = STAGE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: STAGE holds a leaked Box that is never freed.
        return Some(unsafe { &*p });
    }
    stage_slow()
}

/// Starts the thread that registers `stage` with paiod when `PAIO_CONTROL`
/// is set (once per process: a forked child starts its own with its own
/// stage). The thread lives as long as the process; its own I/O passes
/// through the interposer untouched.
fn start_control(cfg: &Config, stage: &'static Stage) {
    let Some(socket) = &cfg.control else { return };
    let mut options = paio::control::ControlOptions::new(socket);
    options.exe = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| p.to_str().map(str::to_string));
    options.on_thread_start = Some(pass_through_forever);
    options.log = Some(log);
    match paio::control::ControlClient::start(stage, options) {
        // The client runs until the process ends.
        Ok(client) => std::mem::forget(client),
        Err(e) => log(&format!("cannot start the control thread: {e}")),
    }
}

/// Marks the calling thread as inside the library for good: every call it
/// makes passes through.
fn pass_through_forever() {
    paio::context::with_thread_ref(|t| t.embedder().depth.set(1));
}

#[cold]
fn stage_slow() -> Option<&'static Stage> {
    let cfg = config()?;
    let fresh = match cfg.build_stage() {
        Ok(s) => Box::into_raw(Box::new(s)),
        Err(e) => {
            raw_stderr(&format!("paio: {e}; running without a stage\n"));
            STATE.store(OFF, Ordering::Release);
            return None;
        }
    };
    match STAGE.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            // SAFETY: `fresh` was just leaked and is now published, never freed.
            let stage = unsafe { &*fresh };
            start_control(cfg, stage);
            Some(stage)
        }
        Err(existing) => {
            // SAFETY: `fresh` lost the race and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `existing` is a published, never-freed stage.
            Some(unsafe { &*existing })
        }
    }
}

/// The request's context overrides: the configured workflow and default
/// request context, then the file class of table class `class`.
#[inline]
fn adjust(cfg: &Config, mut ctx: Context, class: u16) -> Context {
    if !cfg.adjusts {
        return ctx;
    }
    if cfg.workflow_process {
        ctx = ctx.with_workflow(PID.load(Ordering::Relaxed));
    }
    if ctx.request_context == RequestContext::NONE {
        ctx = ctx.with_request_context(cfg.default_context);
    }
    with_class(cfg, ctx, class)
}

/// Submits one request (the guard is held). `class` is the fdtable class.
/// The context is the thread's (`Context::new`, from the guard's thread
/// state: no further thread-local lookup), then the configured overrides.
#[inline]
fn submit(g: &Guard, rt: RequestType, size: u64, class: u16) {
    let Some(cfg) = config() else { return };
    let Some(stage) = stage() else { return };
    let ctx = adjust(cfg, g.thread.context(rt, size), class);
    let _ = stage.enforce_on_thread(g.thread, &ctx);
    maybe_push(g, cfg);
}

/// Attaches the file class of table class `class` (0 = none).
#[inline]
fn with_class(cfg: &Config, ctx: Context, class: u16) -> Context {
    match (class as usize)
        .checked_sub(1)
        .and_then(|i| cfg.classes.get(i))
    {
        Some(&fc) => ctx.with_file_class(fc),
        None => ctx,
    }
}

// ---------------------------------------------------------------- data calls

/// How a data call may be split (positional calls only).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Split {
    /// Never: a call on the file offset, or with flags.
    Never,
    /// If the descriptor is a regular file opened without `O_APPEND`; the
    /// pieces go one after another.
    IfRegular,
    /// As `IfRegular`, for a call on one buffer (`pread`, `pwrite`): on a
    /// descriptor opened with `O_DIRECT`, pieces may be in flight together
    /// ([`concurrent_call`]).
    Buffer(Buffer),
}

/// The buffer and file offset of a positional call on one buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buffer {
    /// The caller's buffer (written by a read, read by a write).
    pub(crate) buf: *mut u8,
    /// The call's file offset.
    pub(crate) offset: i64,
}

/// A data call being split into pieces ([`split_call`],
/// [`concurrent_call`]): `ctx` is the whole call's context, `piece_size`
/// its object's first answer.
struct SplitCall<'a> {
    cfg: &'a Config,
    stage: &'static Stage,
    fd: c_int,
    ctx: Context,
    piece_size: u64,
}

/// What [`splittable`] found out about a descriptor.
struct Regular {
    direct: bool,
    /// The file's size when asked.
    size: u64,
}

/// Linux moves at most this many bytes in one read or write call
/// (`MAX_RW_COUNT`); a concurrent split moves no more either.
const MAX_RW_COUNT: u64 = 0x7fff_f000;

/// Runs a data call of `size` bytes on `fd` through the stage in two phases:
/// admitted before the real call (where a priority object may hold it and a
/// rate limiter charges `size`), completed after it with the bytes it really
/// moved (refunds, latency). A large non-critical positional call whose
/// object asks for pieces is issued as pieces, each admitted on its own
/// ([`split_call`]). A read larger than [`READ_BOUND_ABOVE`] through a
/// route that charges bytes is admitted for what the file can give
/// ([`read_bound`]), not for its buffer: a 100 MiB buffer over a 4 MiB
/// file waited for 100 MiB of tokens before its refund. The caller's errno
/// after this function is the real call's; nothing of this library is held
/// across the real call.
///
/// `pos` is a positional call's file offset (`None`: the file's own).
/// `piece(offset into the call, length)` issues the real call for that range
/// (bytes moved, or -1 with errno set); `(0, u64::MAX)` is the whole call
/// with the caller's arguments unchanged.
#[inline]
pub(crate) fn data_call(
    rt: RequestType,
    fd: c_int,
    pos: Option<i64>,
    size: impl FnOnce() -> u64,
    split: Split,
    mut piece: impl FnMut(u64, u64) -> i64,
) -> i64 {
    let Some(g) = Guard::enter() else {
        return piece(0, u64::MAX);
    };
    let (Some(cfg), Some(stage)) = (config(), stage()) else {
        drop(g);
        return piece(0, u64::MAX);
    };
    check_thread_name(&g);
    let entry = fdtable::entry(fd);
    let class = fdtable::class_of(entry);
    if is_stream_fd(fd, entry) {
        return stream_call(g, rt, class, &mut piece);
    }
    let size = size();
    let ctx = adjust(cfg, g.thread.context(rt, size), class);
    // Pieces are multiples of 4 KiB and a call is split only when larger
    // than a piece: smaller calls skip the question (one routing fewer).
    if split != Split::Never && size > paio::object::SPLIT_ALIGN {
        if let Some(p) = stage.split_size_on_thread(g.thread, &ctx) {
            if p > 0 && size > p {
                if let Some(file) = splittable(fd) {
                    let call = SplitCall {
                        cfg,
                        stage,
                        fd,
                        ctx,
                        piece_size: p,
                    };
                    if let Split::Buffer(b) = split {
                        if let Some(ring) = concurrent(rt, &b, size, &file) {
                            return concurrent_call(g, call, b, ring, &mut piece);
                        }
                    }
                    return split_call(g, call, &mut piece);
                }
            }
        }
    }
    let admitted = if rt == RequestType::READ
        && size > READ_BOUND_ABOVE
        && stage.charges_bytes_on_thread(g.thread, &ctx)
    {
        read_bound(fd, pos, size)
    } else {
        size
    };
    let admission = stage.admit_on_thread(
        g.thread,
        &Context {
            size: admitted,
            ..ctx
        },
    );
    let thread = g.thread;
    // Restores the caller's errno before the real call: a wait in the stage
    // leaves no trace.
    drop(g);
    let r = piece(0, u64::MAX);
    // The guard saves the real call's errno and restores it on drop.
    if let Some(g) = Guard::reenter(thread) {
        let moved = r.max(0) as u64;
        if let Ok(a) = admission {
            let _ = stage.complete_on_thread(g.thread, a, moved.min(admitted));
        }
        if moved > admitted {
            // The file grew meanwhile: the rest as a request of its own.
            submit(&g, rt, moved - admitted, class);
        }
        wrote(&g, rt, &ctx, fd, r);
        maybe_push(&g, cfg);
    }
    r
}

/// Whether `fd` is a stream (a pipe, a socket, a character device such as
/// a terminal), `entry` its class word: learnt with one `fstat` at the
/// descriptor's first data call and kept in the descriptor table. Raw
/// system call: errno restored by the caller's guard. A descriptor `fstat`
/// refuses is taken for storage (its call fails as well).
#[inline(always)]
fn is_stream_fd(fd: c_int, entry: u16) -> bool {
    match fdtable::kind_of(entry) {
        fdtable::KIND_STREAM => true,
        fdtable::KIND_STORAGE => false,
        _ => learn_kind(fd),
    }
}

#[cold]
#[inline(never)]
fn learn_kind(fd: c_int) -> bool {
    let Some((mode, _)) = file_kind(fd) else {
        return false;
    };
    // Storage is a regular file or a block device; everything else waits
    // for a peer or an event: pipes, sockets, terminals and other character
    // devices, and anonymous inodes (mode 0: eventfd, timerfd, signalfd,
    // inotify, epoll, pidfd).
    let stream = !matches!(mode, libc::S_IFREG | libc::S_IFBLK | libc::S_IFDIR);
    fdtable::set_kind(
        fd,
        if stream {
            fdtable::KIND_STREAM
        } else {
            fdtable::KIND_STORAGE
        },
    );
    stream
}

/// A data call on a stream ([`is_stream_fd`]), charged after it with the
/// bytes it moved, in one phase: such a call may wait for its peer (a
/// pipe's writer, a socket's client, a terminal's user) as long as it
/// likes, and a wait for a peer is not storage I/O. Admitted before the
/// call, it held a priority object's slot all that time (four threads
/// waiting on a pipe blocked every other request of a `depth = 4` object
/// for good), stood on the board as critical I/O in flight, and counted
/// its wait as the call's latency. Out of line: the storage path stays as
/// tight as it was.
#[cold]
#[inline(never)]
fn stream_call(
    g: Guard,
    rt: RequestType,
    class: u16,
    piece: &mut impl FnMut(u64, u64) -> i64,
) -> i64 {
    let thread = g.thread;
    drop(g);
    let r = piece(0, u64::MAX);
    // The guard saves the real call's errno and restores it on drop.
    if let Some(g) = Guard::reenter(thread) {
        submit(&g, rt, r.max(0) as u64, class);
    }
    r
}

/// Reads of at most this many bytes are admitted for the size asked (one
/// `fstat`, and for `read` an `lseek`, would cost more than the tokens
/// over-admitted and refunded after the call).
const READ_BOUND_ABOVE: u64 = 64 * 1024;

/// The most bytes a read of `size` from `fd` (at `pos`, else its file
/// offset) can move: to the end of a regular file, and at most
/// `MAX_RW_COUNT`; `size` for other descriptors (a pipe or a socket gives
/// what arrives). Raw system calls: nothing interposed, errno restored by
/// the caller's guard.
fn read_bound(fd: c_int, pos: Option<i64>, size: u64) -> u64 {
    let size = size.min(MAX_RW_COUNT);
    file_left(fd, pos.filter(|&p| p >= 0)).map_or(size, |left| size.min(left))
}

/// The bytes a regular file holds from `pos` (`None`: its file offset) to
/// its end; `None` for other descriptors, or a position that is negative
/// or cannot be had. Raw system calls, errno restored by the caller's guard.
fn file_left(fd: c_int, pos: Option<i64>) -> Option<u64> {
    let Some((libc::S_IFREG, size)) = file_kind(fd) else {
        return None;
    };
    let pos = match pos {
        Some(p) => p,
        // SAFETY: lseek takes plain integers.
        None => unsafe { libc::syscall(libc::SYS_lseek, fd, 0, libc::SEEK_CUR) },
    };
    u64::try_from(pos).ok().map(|p| size.saturating_sub(p))
}

/// A data call of `ctx` on `fd` returned `r`: a non-critical write's bytes
/// count toward the dirty-data bound ([`crate::dirty`]). When a write-back
/// is due, it goes through the stage as a non-critical `sync_file_range`
/// request of size 0 (charging no bytes twice), so a priority object holds
/// the writer back while critical I/O is active, here or in another process.
/// Under the guard `g`.
#[inline]
fn wrote(g: &Guard, rt: RequestType, ctx: &Context, fd: c_int, r: i64) {
    if rt == RequestType::WRITE
        && r > 0
        && !ctx.criticality.is_critical()
        && crate::dirty::wrote(fd, r as u64)
    {
        write_back(g, ctx, fd);
    }
}

#[cold]
fn write_back(g: &Guard, ctx: &Context, fd: c_int) {
    let admission = stage().map(|stage| {
        let sync = Context {
            request_type: RequestType::SYNC_FILE_RANGE,
            size: 0,
            ..*ctx
        };
        (stage, stage.admit_on_thread(g.thread, &sync))
    });
    crate::dirty::write_back(fd);
    if let Some((stage, Ok(a))) = admission {
        let _ = stage.complete_on_thread(g.thread, a, 0);
    }
}

/// Charges one request handed to the kernel asynchronously (a libaio
/// iocb, [`crate::aio`]): admitted (a rate limiter may delay it, a priority
/// object orders it) and completed at once with its size, untimed: its
/// completion is not seen. Called before the batch is submitted.
pub(crate) fn async_request(rt: RequestType, fd: c_int, size: u64) {
    let Some(g) = Guard::enter() else { return };
    let (Some(cfg), Some(stage)) = (config(), stage()) else {
        return;
    };
    check_thread_name(&g);
    let ctx = adjust(cfg, g.thread.context(rt, size), fdtable::get(fd));
    if let Ok(a) = stage.admit_on_thread(g.thread, &ctx) {
        let _ = stage.complete_untimed_on_thread(g.thread, a, size);
    }
    maybe_push(&g, cfg);
}

/// Whether `fd` is a regular file opened without `O_APPEND` (Linux ignores
/// a positional write's offset under `O_APPEND`: pieces would append out of
/// order). Raw system calls: nothing interposed, errno restored by the guard.
fn splittable(fd: c_int) -> Option<Regular> {
    // SAFETY: F_GETFL takes no third argument.
    let flags = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    if flags < 0 || flags as c_int & libc::O_APPEND != 0 {
        return None;
    }
    let (kind, size) = file_kind(fd)?;
    (kind == libc::S_IFREG).then_some(Regular {
        direct: flags as c_int & libc::O_DIRECT != 0,
        size,
    })
}

/// A ring for a call of `size` bytes on buffer `b` of `file`, if its pieces
/// may be in flight together: a direct read, or a direct write that ends
/// within the file (one that extends it goes piece after piece, so a
/// failing piece never leaves the file longer than what the call
/// returns), with a ring free.
fn concurrent(rt: RequestType, b: &Buffer, size: u64, file: &Regular) -> Option<crate::ring::Held> {
    // A negative offset fails as a plain call would (EINVAL).
    let offset = u64::try_from(b.offset).ok()?;
    let fits =
        rt == RequestType::READ || offset.checked_add(size).is_some_and(|end| end <= file.size);
    (file.direct && fits).then(crate::ring::take)?
}

/// Issues the call as pieces of `piece_size` bytes, each admitted and
/// completed on its own, with the semantics of one call: a short piece ends
/// it with the bytes done so far; an error after some progress returns the
/// progress with the caller's errno untouched; an error before any returns
/// -1 with the real errno.
#[cold]
fn split_call(g: Guard, call: SplitCall<'_>, piece: &mut dyn FnMut(u64, u64) -> i64) -> i64 {
    let SplitCall {
        cfg,
        stage,
        fd,
        ctx,
        piece_size,
    } = call;
    let caller_errno = g.saved_errno();
    let total = ctx.size;
    let mut g = Some(g);
    let mut done = 0u64;
    let mut failed = None;
    while done < total {
        let Some(guard) = g.take().or_else(Guard::enter) else {
            // Cannot happen on this thread (the depth is ours); issue the
            // rest as one piece, unadmitted, rather than lose it.
            let r = piece(done, total - done);
            return finish(done, r);
        };
        let pctx = next_piece(stage, guard.thread, ctx, done, piece_size);
        let len = pctx.size;
        let admission = stage.admit_on_thread(guard.thread, &pctx);
        drop(guard);
        let r = piece(done, len);
        let real_errno = errno();
        if let Some(mut guard) = Guard::enter_always() {
            if let Ok(a) = admission {
                let _ = stage.complete_on_thread(guard.thread, a, r.max(0) as u64);
            }
            maybe_push(&guard, cfg);
            // What the caller sees: the caller's errno unless the whole call
            // fails below.
            guard.restore_errno_to(caller_errno);
        }
        if r < 0 {
            failed = Some(real_errno);
            break;
        }
        done += r as u64;
        if (r as u64) < len {
            break;
        }
    }
    if let Some(g) = Guard::enter_always() {
        wrote(&g, ctx.request_type, &ctx, fd, done as i64);
    }
    match failed {
        Some(e) if done == 0 => {
            set_errno(e);
            -1
        }
        _ => done as i64,
    }
}

/// The pieces of a [`concurrent_call`] issued and not yet counted into its
/// result, numbered in issue order (`head..tail`), with their admissions.
struct Window {
    pieces: [Piece; crate::ring::MAX_IN_FLIGHT],
    admissions: [Option<Admission>; crate::ring::MAX_IN_FLIGHT],
    head: usize,
    tail: usize,
    /// Pieces submitted to the ring and not reaped.
    in_flight: usize,
}

/// One piece of a [`concurrent_call`].
#[derive(Clone, Copy)]
struct Piece {
    /// Offset into the call.
    at: u64,
    len: u64,
    /// Bytes moved, or `-errno`; `None` while in flight.
    result: Option<i64>,
}

/// Errors only a ring returns (a request cancelled with its ring, an
/// operation the ring does not offer for this file): the piece is issued
/// again as a plain call.
fn ring_only(res: i32) -> bool {
    matches!(-res, libc::ECANCELED | libc::EOPNOTSUPP | libc::EAGAIN)
}

impl Window {
    const N: usize = crate::ring::MAX_IN_FLIGHT;

    /// Puts piece number `tail` (`len` bytes at `at`) in the window.
    fn push(&mut self, at: u64, len: u64, admission: Option<Admission>) -> usize {
        let slot = self.tail % Self::N;
        self.pieces[slot] = Piece {
            at,
            len,
            result: None,
        };
        self.admissions[slot] = admission;
        self.tail += 1;
        slot
    }

    /// Piece `slot` returned `r` (bytes, or `-errno`): completes its
    /// admission in the stage.
    fn settle(
        &mut self,
        slot: usize,
        r: i64,
        stage: &'static Stage,
        thread: ThreadRef<'static>,
        cfg: &Config,
    ) {
        self.pieces[slot].result = Some(r);
        if let Some(guard) = Guard::reenter(thread) {
            if let Some(a) = self.admissions[slot].take() {
                let _ = stage.complete_on_thread(guard.thread, a, r.max(0) as u64);
            }
            maybe_push(&guard, cfg);
        }
    }
}

/// [`split_call`] for a direct call on one buffer, with several pieces in
/// flight at once through an io_uring ring: before each piece the object
/// is asked without waiting ([`Stage::try_admit_on_thread`]) whether
/// another may go; when not, the call waits for one of its pieces to
/// complete (or, with none in flight, waits in the stage as a sequential
/// split does). Each piece is completed in the stage as soon as it is in,
/// with its latency. The caller sees one call: the bytes of the leading
/// pieces up to the first short or failed one; -1 with its errno if the
/// first failed. Pieces after a failed one may have moved data (as the
/// kernel's own large direct calls, issued as several device requests, may
/// too); a write never ends beyond the file ([`concurrent`]).
#[cold]
fn concurrent_call(
    g: Guard,
    call: SplitCall<'_>,
    b: Buffer,
    ring: crate::ring::Held,
    piece: &mut dyn FnMut(u64, u64) -> i64,
) -> i64 {
    let SplitCall {
        cfg,
        stage,
        fd,
        ctx,
        piece_size,
    } = call;
    let caller_errno = g.saved_errno();
    let thread = g.thread;
    // Nothing of this library is held while pieces wait or run.
    drop(g);
    let mut ring = Some(ring);
    let write = ctx.request_type == RequestType::WRITE;
    let total = ctx.size.min(MAX_RW_COUNT);
    let mut w = Window {
        pieces: [Piece {
            at: 0,
            len: 0,
            result: None,
        }; Window::N],
        admissions: [const { None }; Window::N],
        head: 0,
        tail: 0,
        in_flight: 0,
    };
    // Piece `slot` is in with the ring's result `res`; with `None` (no
    // ring) or an error only a ring returns, it is issued as a plain call.
    let mut finish = |w: &mut Window, slot: usize, res: Option<i32>| {
        let r = match res {
            Some(res) if !ring_only(res) => res.into(),
            _ => {
                let p = w.pieces[slot];
                let r = piece(p.at, p.len);
                if r < 0 {
                    -i64::from(errno())
                } else {
                    r
                }
            }
        };
        w.settle(slot, r, stage, thread, cfg);
    };
    // A completion from the ring.
    let slot_of = |tag: u64| tag as usize % Window::N;
    let mut issued = 0u64;
    let mut done = 0u64;
    let mut ended = false;
    let mut failed = None;
    loop {
        // Issue what may go now.
        while !ended && issued < total && w.tail - w.head < Window::N {
            let pctx = next_piece(
                stage,
                thread,
                Context { size: total, ..ctx },
                issued,
                piece_size,
            );
            let len = pctx.size;
            // (The library is not on this thread's stack here: entering
            // works; were it not to, the piece would go unadmitted rather
            // than be lost.)
            let guard = Guard::reenter(thread);
            let admission = match &guard {
                None => None,
                Some(_) if w.in_flight == 0 => stage.admit_on_thread(thread, &pctx).ok(),
                Some(_) => match stage.try_admit_on_thread(thread, &pctx) {
                    Ok(a) => Some(a),
                    Err(paio::object::TryEnforceError::Wait(_)) => break,
                    Err(paio::object::TryEnforceError::Refused(_)) => None,
                },
            };
            drop(guard);
            let (at, tag) = (issued, w.tail as u64);
            let slot = w.push(at, len, admission);
            issued += len;
            let sent = ring.as_mut().is_some_and(|r| {
                // SAFETY: `at + len <= count`: the piece lies in the
                // caller's buffer, which outlives this call; every
                // submitted piece is reaped before it returns.
                unsafe {
                    r.submit(
                        fd,
                        write,
                        b.buf.add(at as usize),
                        len as u32,
                        b.offset as u64 + at,
                        tag,
                    )
                }
                .is_ok()
            });
            if sent {
                w.in_flight += 1;
                continue;
            }
            // No ring (any more): the pieces in flight are drained and this
            // one and the rest go one after another.
            if let Some(r) = ring.take() {
                let n = w.in_flight;
                r.abandon(n, |tag, res| {
                    w.in_flight -= 1;
                    finish(&mut w, slot_of(tag), Some(res));
                });
            }
            finish(&mut w, slot, None);
        }
        // The leading pieces that are in make the call's result.
        while w.head < w.tail {
            let p = w.pieces[w.head % Window::N];
            let Some(r) = p.result else { break };
            w.head += 1;
            if ended {
                continue;
            }
            if r < 0 {
                failed = Some(-r as c_int);
                ended = true;
            } else {
                done += r as u64;
                ended = (r as u64) < p.len;
            }
        }
        if w.head == w.tail && (ended || issued >= total) {
            break;
        }
        // Wait for pieces of this call to complete (with none in flight,
        // the next piece waits in the stage instead).
        if w.in_flight > 0 {
            // A failed wait handled no completion: all are still out.
            let n = w.in_flight;
            let mut reaped = |tag: u64, res: i32| {
                w.in_flight -= 1;
                finish(&mut w, slot_of(tag), Some(res));
            };
            if let Some(r) = ring.as_mut() {
                if r.wait(&mut reaped).is_err() {
                    if let Some(r) = ring.take() {
                        r.abandon(n, &mut reaped);
                    }
                }
            }
        }
    }
    drop(ring);
    if let Some(g) = Guard::reenter(thread) {
        wrote(&g, ctx.request_type, &ctx, fd, done as i64);
    }
    match failed {
        Some(e) if done == 0 => {
            set_errno(e);
            -1
        }
        _ => {
            set_errno(caller_errno);
            done as i64
        }
    }
}

/// The context of a split call `ctx` (of `ctx.size` bytes) for its next
/// piece, `done` bytes into it: the first piece is `piece_size` long. The
/// object is asked again before each later piece: once critical I/O is
/// over, the rest goes as one piece. The thread's criticality is read again
/// too: a thread lent criticality meanwhile (a critical thread waits for a
/// lock it holds) issues the rest as one critical request.
fn next_piece(
    stage: &Stage,
    thread: ThreadRef<'_>,
    ctx: Context,
    done: u64,
    piece_size: u64,
) -> Context {
    let rest = ctx.size - done;
    if done == 0 {
        return Context {
            size: piece_size.min(rest),
            ..ctx
        };
    }
    let ctx = Context {
        criticality: piece_criticality(thread, ctx.criticality),
        ..ctx
    };
    let len = stage
        .split_size_on_thread(thread, &Context { size: rest, ..ctx })
        .map_or(rest, |p| p.clamp(1, rest));
    Context { size: len, ..ctx }
}

/// A split call's criticality for its next piece: critical once the thread
/// is (a loan may have come meanwhile), never less than it was.
fn piece_criticality(thread: ThreadRef<'_>, was: paio::Criticality) -> paio::Criticality {
    match thread.context(RequestType::WRITE, 0).criticality {
        paio::Criticality::Critical => paio::Criticality::Critical,
        _ => was,
    }
}

/// The result of a split call whose remainder `r` ran as one piece.
fn finish(done: u64, r: i64) -> i64 {
    match (done, r) {
        (0, r) => r,
        (d, r) if r < 0 => d as i64,
        (d, r) => d as i64 + r,
    }
}

// ---------------------------------------------------------------- inheritance

/// The policy's `[criticality] inherit` (default on); read by the lock hooks
/// ([`crate::locks`]) before they try a lock.
static INHERIT: AtomicBool = AtomicBool::new(true);

/// Whether the lock hooks look for a holder to lend criticality to.
#[inline]
pub(crate) fn inherits() -> bool {
    INHERIT.load(Ordering::Relaxed)
}

/// Blocks in `wait` (a real lock call) for the lock at `lock` that kernel
/// thread `owner` holds (0 or negative: unknown): records the wait and, when the calling
/// thread is critical, lends `owner` (and the threads it waits for) its
/// criticality and promotes their requests waiting in the stage
/// ([`paio::inheritance`]). The loan ends when the owner releases the lock
/// ([`crate::locks`]' unlock hooks) or `wait` returns; its result is
/// returned unchanged, with the caller's errno as `wait` left it.
///
/// A rwlock wanted for writing (`hold` exclusive) whose holders are readers
/// (`owner` 0) lends to the readers the hooks recorded.
#[cold]
pub(crate) fn wait_for_thread(
    owner: i32,
    lock: usize,
    hold: crate::locks::Hold,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    let owner = u32::try_from(owner).unwrap_or(0);
    let readers = owner == 0 && hold == crate::locks::Hold::Exclusive;
    if owner == 0 && !readers {
        return wait();
    }
    let Some(g) = Guard::enter() else {
        return wait();
    };
    let Some(stage) = stage() else {
        drop(g);
        return wait();
    };
    let me = paio::context::current_workflow() as u32;
    if !inherits() || owner == me {
        drop(g);
        return wait();
    }
    check_thread_name(&g);
    let waiting = paio::inheritance::Waiting::on(me, owner, lock);
    let loan = paio::criticality::current_criticality()
        .is_critical()
        .then(|| {
            promote_borrowers(
                stage,
                if readers {
                    paio::inheritance::lend_to_readers(me, lock)
                } else {
                    paio::inheritance::lend(me, owner, lock)
                },
            )
        });
    drop(g);
    let r = wait();
    drop(loan);
    drop(waiting);
    r
}

/// `[criticality] helper_window` in milliseconds (0: off).
static HELPER_WINDOW_MS: AtomicU64 = AtomicU64::new(100);

fn coarse_ms() -> u64 {
    coarse_now_ns() / 1_000_000
}

/// The calling thread signals the condition variable at `cond`: it becomes
/// its helper ([`paio::inheritance::Helpers`]), and loans it got from
/// threads waiting on it end (it did what they waited for). Errno is
/// untouched.
#[inline]
pub(crate) fn signalled(cond: usize) {
    let me = paio::context::current_workflow() as u32;
    paio::inheritance::released(me, cond);
    if HELPER_WINDOW_MS.load(Ordering::Relaxed) != 0 {
        paio::inheritance::HELPERS.signalled(cond, me, coarse_ms());
    }
}

/// The helper of the condition variable at `cond`: the thread that signalled
/// it last, if less than the helper window ago.
fn helper_of(cond: usize) -> Option<u32> {
    match HELPER_WINDOW_MS.load(Ordering::Relaxed) {
        0 => None,
        window => paio::inheritance::HELPERS.helper_of(cond, coarse_ms(), window),
    }
}

thread_local! {
    /// The loan a critical thread gave while it waits on a condition
    /// variable. Kept here, not on the stack, so that a thread cancelled in
    /// the wait (a cancellation point) takes it back in its thread-local
    /// destructor.
    static COND_LOAN: std::cell::RefCell<Option<(paio::inheritance::Loan, paio::inheritance::Waiting)>> =
        const { std::cell::RefCell::new(None) };
}

/// Blocks in `wait` (a real condition-variable wait on `cond`): when the
/// calling thread is critical, the condition variable's helper is lent its
/// criticality until the helper signals again or `wait` returns
/// ([`paio::inheritance`]); the result is returned unchanged.
pub(crate) fn cond_wait(cond: usize, wait: impl FnOnce() -> c_int) -> c_int {
    let Some(g) = Guard::enter() else {
        return wait();
    };
    let Some(stage) = stage() else {
        drop(g);
        return wait();
    };
    check_thread_name(&g);
    let me = paio::context::current_workflow() as u32;
    let lent = match helper_of(cond) {
        Some(helper) if helper != me && paio::criticality::current_criticality().is_critical() => {
            let waiting = paio::inheritance::Waiting::on(me, helper, cond);
            let loan = promote_borrowers(stage, paio::inheritance::lend(me, helper, cond));
            COND_LOAN
                .try_with(|slot| *slot.borrow_mut() = Some((loan, waiting)))
                .is_ok()
        }
        _ => false,
    };
    drop(g);
    let r = wait();
    if lent {
        let e = errno();
        let _ = COND_LOAN.try_with(|slot| slot.borrow_mut().take());
        set_errno(e);
    }
    r
}

/// Promotes the requests that `loan`'s borrowers have waiting in `stage`
/// (they are critical now); returns the loan.
fn promote_borrowers(stage: &Stage, loan: paio::inheritance::Loan) -> paio::inheritance::Loan {
    for &t in loan.threads() {
        stage.promote_thread(u64::from(t));
    }
    loan
}

/// A lock call on `lock` returned `r`: a read lock taken (`r` 0, `hold`
/// read) is recorded so that a writer can find its reader. Returns `r`;
/// errno is untouched.
#[inline]
pub(crate) fn lock_taken(hold: crate::locks::Hold, lock: usize, r: c_int) -> c_int {
    if r == 0 && hold == crate::locks::Hold::Read {
        paio::inheritance::read_locked(|| paio::context::current_workflow() as u32, lock);
    }
    r
}

/// The calling thread is about to release the lock at `lock`: its loans
/// about it end ([`paio::inheritance::released`]). Errno is untouched (only
/// the thread id is read, cached after the first time).
#[cold]
pub(crate) fn releasing(lock: usize) {
    paio::inheritance::released(paio::context::current_workflow() as u32, lock);
}

// ---------------------------------------------------------------- criticality by name

/// `PAIO_CRITICAL=1`, or the process's name matching the policy's
/// `[criticality] processes`, marks the whole process critical.
fn mark_process(cfg: &Config) {
    let by_name = NAMES.get().is_some_and(|n| {
        std::fs::read_to_string("/proc/self/comm")
            .is_ok_and(|comm| n.process_matches(comm.trim_end_matches('\n')))
    });
    if cfg.critical || by_name {
        paio::criticality::set_process_critical(true);
    }
}

/// The calling thread named itself `name`: it is critical iff the name
/// matches the policy's `[criticality] threads`.
pub(crate) fn thread_named_self(name: &CStr) {
    let Some(names) = NAMES.get() else { return };
    if let Some(g) = Guard::enter() {
        apply_thread_name(&g, names, name);
    }
}

/// A thread named another thread: every thread re-reads its own name at its
/// next data call.
pub(crate) fn thread_named_other() {
    if NAMES.get().is_some() {
        NAMES_GENERATION.fetch_add(1, Ordering::Release);
    }
}

fn apply_thread_name(g: &Guard, names: &paio::CriticalNames, name: &CStr) {
    let critical = name.to_str().is_ok_and(|n| names.thread_matches(n));
    paio::criticality::set_thread_critical(critical);
    g.thread
        .embedder()
        .names
        .set(NAMES_GENERATION.load(Ordering::Acquire));
}

/// Re-reads the calling thread's name if another thread renamed some thread
/// since it last looked (one relaxed load otherwise).
#[inline]
fn check_thread_name(g: &Guard) {
    let generation = NAMES_GENERATION.load(Ordering::Relaxed);
    if generation != g.thread.embedder().names.get() {
        reread_thread_name(g);
    }
}

#[cold]
fn reread_thread_name(g: &Guard) {
    let Some(names) = NAMES.get() else { return };
    let mut buf = [0u8; 16];
    // A raw system call: this library's own `prctl` is not needed here.
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated, to `buf`.
    let r = unsafe { libc::syscall(libc::SYS_prctl, libc::PR_GET_NAME, buf.as_mut_ptr()) };
    if r == 0 {
        if let Ok(name) = CStr::from_bytes_until_nul(&buf) {
            apply_thread_name(g, names, name);
        }
    }
}

/// Runs a call moving bytes from `fd_in` to `fd_out` (`sendfile`,
/// `copy_file_range`, `splice`; `call` is the real call with the caller's
/// arguments, asking for `len` bytes) as a read of `fd_in` and a write of
/// `fd_out`.
///
/// The read goes in two phases like a data call: admitted before the call
/// (a priority object may hold it back), completed after it with the bytes
/// it moved and the call's latency; from or to a stream ([`is_stream_fd`])
/// it is charged after the call, in one phase. Only a route that charges bytes (a rate
/// in bytes) needs to know beforehand how many the call will move: for it
/// the read is admitted with [`copy_bound`], anything moved beyond that (a
/// file that grew meanwhile) is charged after the call as a request of its
/// own, and a call whose bound is not known (a socket) is charged after it
/// runs, as one request. The write is charged after the call with the bytes
/// moved. Only one admission is ever held across the call, so a copy never
/// waits for a slot of its own object. The caller sees the real call's
/// result and errno.
pub(crate) fn copy_call(
    fd_in: c_int,
    off_in: Option<i64>,
    fd_out: c_int,
    len: u64,
    call: impl FnOnce() -> i64,
) -> i64 {
    let Some(g) = Guard::enter() else {
        return call();
    };
    let (Some(cfg), Some(stage)) = (config(), stage()) else {
        drop(g);
        return call();
    };
    check_thread_name(&g);
    let in_entry = fdtable::entry(fd_in);
    let in_class = fdtable::class_of(in_entry);
    let asked = adjust(cfg, g.thread.context(RequestType::READ, len), in_class);
    // The size admitted, when the read is admitted before the call. A copy
    // from or to a stream may wait for its peer as long as it likes: charged
    // after it, as a stream's data call is.
    let admitted = if is_stream_fd(fd_in, in_entry) || is_stream_fd(fd_out, fdtable::entry(fd_out))
    {
        None
    } else if stage.charges_bytes_on_thread(g.thread, &asked) {
        Some(copy_bound(fd_in, off_in, fd_out, len)).filter(|&n| n > 0)
    } else {
        Some(len)
    };
    let read = admitted.map(|n| {
        let ctx = Context { size: n, ..asked };
        (n, stage.admit_on_thread(g.thread, &ctx))
    });
    let thread = g.thread;
    drop(g);
    let r = call();
    if let Some(g) = Guard::reenter(thread) {
        let moved = r.max(0) as u64;
        let unadmitted = match read {
            Some((n, admission)) => {
                if let Ok(a) = admission {
                    let _ = stage.complete_on_thread(g.thread, a, moved.min(n));
                }
                moved.checked_sub(n).filter(|&extra| extra > 0)
            }
            None => Some(moved),
        };
        if let Some(n) = unadmitted {
            submit(&g, RequestType::READ, n, in_class);
        }
        let out_class = fdtable::get(fd_out);
        submit(&g, RequestType::WRITE, moved, out_class);
        let written = adjust(cfg, g.thread.context(RequestType::WRITE, moved), out_class);
        wrote(&g, RequestType::WRITE, &written, fd_out, r);
    }
    r
}

/// The most bytes a copy of `len` from `fd_in` (at `off_in`, else its file
/// offset) to `fd_out` can move, when that is known before the call; 0 when
/// not. Both ends are storage here (a copy with a stream at either end is
/// charged after it): known for a regular file copied to a regular file,
/// to the input's end, which Linux moves no more than and in the common
/// case exactly. Raw system calls: nothing interposed, errno restored by
/// the caller's guard.
fn copy_bound(fd_in: c_int, off_in: Option<i64>, fd_out: c_int, len: u64) -> u64 {
    if !matches!(file_kind(fd_out), Some((libc::S_IFREG, _))) {
        return 0;
    }
    file_left(fd_in, off_in).map_or(0, |left| len.min(MAX_RW_COUNT).min(left))
}

/// A descriptor's file type (`S_IFMT` bits) and size, by a raw `fstat`
/// (crate::sys: neither libc nor this library's own `syscall` hook).
pub(crate) fn file_kind(fd: c_int) -> Option<(libc::mode_t, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    if crate::sys::fstat(fd, &mut st) != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some((st.st_mode & libc::S_IFMT, st.st_size.max(0) as u64))
}

/// Charges an open/close/metadata call on `fd` before it runs (size 0),
/// unless nothing would observe it ([`unobserved`]).
#[inline]
pub(crate) fn before_meta(rt: RequestType, fd: c_int) {
    if !unobserved(rt) {
        count_meta(rt, fd);
    }
}

/// [`before_meta`] for a caller that found the call observed.
#[inline]
pub(crate) fn count_meta(rt: RequestType, fd: c_int) {
    meta(rt, |_| fdtable::get(fd));
}

/// As [`before_meta`] for a call naming a path: an absolute path is
/// classified lexically (no realpath: the file may not exist).
///
/// # Safety
/// `path` is null or NUL-terminated.
#[inline]
pub(crate) unsafe fn before_meta_path(rt: RequestType, path: *const c_char) {
    if !unobserved(rt) {
        // SAFETY: the caller's contract.
        unsafe { count_meta_path(rt, path) };
    }
}

/// [`before_meta_path`] for a caller that found the call observed.
///
/// # Safety
/// `path` is null or NUL-terminated.
#[inline]
pub(crate) unsafe fn count_meta_path(rt: RequestType, path: *const c_char) {
    meta(rt, |cfg| {
        if cfg.class_rules.is_empty() || path.is_null() {
            return 0;
        }
        // SAFETY: path is NUL-terminated (caller's contract).
        let p = unsafe { CStr::from_ptr(path) }.to_bytes();
        if p.starts_with(b"/") {
            cfg.class_of(p)
        } else {
            0
        }
    });
}

/// Whether metadata calls of type `rt` skip the stage: nothing would
/// observe them ([`unobserved_meta`]). `rt` is a constant at every call, so
/// the range test folds away.
#[inline(always)]
pub(crate) fn unobserved(rt: RequestType) -> bool {
    rt.raw() < 64 && UNOBSERVED_META.load(Ordering::Relaxed) >> rt.raw() & 1 != 0
}

/// The request types below 64 whose calls nothing would observe, as bits
/// of [`UNOBSERVED_META`] (only the metadata hooks consult it): with no
/// statistics file and no control plane nobody
/// reads the stage's counts, and without a control plane its routing never
/// changes, so a call whose every route ends at a Noop object or at no
/// channel ([`Stage::passes_at_once`]) would only be counted. Such calls
/// skip the stage: a `stat` costs a load and a test instead of the counted
/// path (~20 ns; docs/performance.md, small files).
fn unobserved_meta(cfg: &Config, stage: &Stage) -> u64 {
    if cfg.stats_path.is_some() || cfg.control.is_some() {
        return 0;
    }
    (0..64)
        .filter_map(RequestType::from_raw)
        .filter(|t| stage.passes_at_once(*t))
        .fold(0, |bits, t| bits | 1 << t.raw())
}

/// Charges a metadata call of file class `class(config)` (size 0). Most
/// such calls go where the thread's previous one of the same type went,
/// to an object that passes them at once: [`Stage::pass_on_thread`] counts
/// them without this library's guard (nothing on that path touches errno,
/// allocates or calls libc), in one thread-local lookup. Every other call
/// (a new route, a new table, an object that acts, a statistics push due,
/// a thread's first request) takes the full path, [`submit`]. Callers skip
/// it for calls that nothing would observe ([`unobserved`]).
#[inline]
fn meta(rt: RequestType, class: impl FnOnce(&Config) -> u16) {
    if STATE.load(Ordering::Relaxed) != ACTIVE {
        return;
    }
    let Some(cfg) = config() else { return };
    // The class, when the call needs the full path.
    let slow = paio::context::with_thread_ref(|thread| {
        let cells = thread.embedder();
        // Inside the library (depth 1) every call passes through uncounted.
        if cells.depth.get() != 0 {
            return None;
        }
        let class = class(cfg);
        let p = STAGE.load(Ordering::Acquire);
        // SAFETY: STAGE is null or a leaked Box that is never freed.
        let Some(stage) = (unsafe { p.as_ref() }) else {
            return Some(class);
        };
        // A due statistics push ([`maybe_push`]) needs the full path.
        let countdown = &cells.countdown;
        let pushing = cfg.stats_path.is_some();
        let left = countdown.get();
        if (pushing && left == 0)
            || !stage.pass_on_thread(thread, &adjust(cfg, thread.context(rt, 0), class))
        {
            return Some(class);
        }
        if pushing {
            countdown.set(left - 1);
        }
        None
    });
    if let Some(class) = slow {
        if let Some(g) = Guard::enter() {
            submit(&g, rt, 0, class);
        }
    }
}

/// Whether `fd` is a pipe (or FIFO) or a socket.
fn is_stream(fd: c_int) -> bool {
    file_kind(fd)
        .is_some_and(|(mode, _)| matches!(mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK))
}

/// At the start, with streams or file classes: every descriptor the
/// process inherited gets its class as an opened one does: a
/// shell's pipes on 0–2 and a jobserver's above are streams, a file
/// redirected in (`cmd < data/f`) has its path's class. They are the ones
/// `/proc/self/fd` lists; without `/proc`, the standard three, and
/// `PAIO_LOG` says so.
fn classify_inherited(cfg: &Config) {
    if cfg.stream_class == 0 && cfg.class_rules.is_empty() {
        return;
    }
    let fds: Vec<c_int> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(e) => {
            log(&format!(
                "cannot list /proc/self/fd ({e}): only descriptors 0-2 are checked \
                 for inherited pipes, sockets and classified files"
            ));
            (0..3).collect()
        }
    };
    // The listing's own descriptor is closed by now: fstat fails or finds
    // whatever reused the number, classified by what it is. (The
    // constructor holds the guard: `opened`'s own would not be had.)
    for fd in fds {
        if classify_by_kind(cfg, fd) {
            classify_path(cfg, fd);
        }
    }
}

/// Gives `fd` the class its kind decides: the stream class for a FIFO or
/// socket (one `fstat`, only when streams are classified), 0 when no class
/// rule could give it another. True when its path must decide
/// ([`classify_path`]).
fn classify_by_kind(cfg: &Config, fd: c_int) -> bool {
    if cfg.stream_class != 0 && is_stream(fd) {
        fdtable::set(fd, cfg.stream_class);
        // Its kind too: the first data call need not ask again.
        fdtable::set_kind(fd, fdtable::KIND_STREAM);
        return false;
    }
    if cfg.class_rules.is_empty() {
        // No class, and a kind to learn at the first data call, whatever
        // the number was before a close this library did not see
        // (`syscall(SYS_close)`): its reads went as a stream's.
        fdtable::set(fd, 0);
        return false;
    }
    true
}

/// Gives `fd` the class of its canonical path (0 when it has none or the
/// path cannot be read).
fn classify_path(cfg: &Config, fd: c_int) {
    let mut buf = [0u8; 4096];
    let class = fd_path(fd, &mut buf).map_or(0, |p| cfg.class_of(p));
    fdtable::set(fd, class);
}

/// The class of a descriptor a call just created that is not storage
/// (`pipe`, `socket`, `accept`, ...): the stream class when the policy
/// names it, else 0.
#[inline]
pub(crate) fn new_stream_class() -> u16 {
    config().map_or(0, |c| c.stream_class)
}

/// The path `/proc/self/fd/<fd>` links to (the kernel's canonical path of
/// the open file) in `buf`: its bytes, or `None` when the link cannot be
/// read or does not fit. No allocation, no libc call.
pub(crate) fn fd_path(fd: c_int, buf: &mut [u8; 4096]) -> Option<&[u8]> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut name = [0u8; PREFIX.len() + 11];
    name[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digit_buf = [0; 10];
    let digits = crate::sys::decimal(u32::try_from(fd).ok()?, &mut digit_buf);
    name[PREFIX.len()..PREFIX.len() + digits.len()].copy_from_slice(digits);
    // SAFETY: `name` is NUL-terminated (its last byte is never written);
    // `buf` is valid for writes of its length.
    let r = unsafe {
        crate::sys::syscall6(
            libc::SYS_readlinkat,
            [
                libc::AT_FDCWD as usize,
                name.as_ptr() as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
                0,
            ],
        )
    };
    let n = usize::try_from(r).ok()?;
    (n > 0 && n < buf.len()).then(|| &buf[..n])
}

/// A call returned the new descriptor `fd` for a freshly opened file (or a
/// negative result): record its class, the stream class for a
/// FIFO or socket wherever it is (`/dev/stdout`, `/dev/fd/N`, a named
/// FIFO: one `fstat`, only when streams are classified), else from its
/// canonical path.
#[inline]
pub(crate) fn opened(fd: c_int) {
    if fd < 0 {
        return;
    }
    let Some(cfg) = config() else { return };
    if classify_by_kind(cfg, fd) {
        if let Some(_g) = Guard::enter() {
            classify_path(cfg, fd);
        }
    }
}

/// The thread's request context from a C string (NULL or "" clears it).
pub(crate) fn set_context(name: Option<&str>) -> c_int {
    let Some(_g) = Guard::enter_always() else {
        return -1;
    };
    match name.filter(|s| !s.is_empty()) {
        None => {
            paio::clear_request_context();
            0
        }
        Some(n) => match RequestContext::named(n) {
            Ok(rc) => {
                paio::set_request_context(rc);
                0
            }
            Err(e) => {
                log(&format!("paio_preload_set_context({n:?}): {e}"));
                -1
            }
        },
    }
}

// ---------------------------------------------------------------- statistics file

fn coarse_now_ns() -> u64 {
    crate::board::clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// Every [`CLOCK_EVERY`] calls per thread, reads the coarse clock and pushes
/// the statistics file if the interval has passed (one thread wins the CAS).
#[inline]
fn maybe_push(g: &Guard, cfg: &Config) {
    if cfg.stats_path.is_none() {
        return;
    }
    let due = {
        let c = &g.thread.embedder().countdown;
        let v = c.get();
        if v == 0 {
            c.set(CLOCK_EVERY - 1);
            true
        } else {
            c.set(v - 1);
            false
        }
    };
    if !due {
        return;
    }
    let now = coarse_now_ns();
    let next = NEXT_PUSH_NS.load(Ordering::Relaxed);
    if now >= next
        && NEXT_PUSH_NS
            .compare_exchange(
                next,
                now + cfg.interval_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    {
        push_stats(false);
    }
}

#[derive(serde::Serialize)]
struct Record<'a> {
    pid: u32,
    ppid: u32,
    exe: &'a str,
    stats: &'a StageStats,
    /// Write-backs started by the dirty-data bound ([`crate::dirty`]).
    dirty_writebacks: u64,
}

/// Whether the caller is a vfork child (between `vfork` and `exec` or
/// `_exit`): it shares its parent's memory and ran no atfork handler, so
/// what it changes in this library's tables it changes in its parent's,
/// although its descriptors are its own (Python starts subprocesses so, and
/// its child's `dup2` onto 1 made the parent's stdout pipe storage). One
/// `getpid` system call: asked by the calls that copy or clear descriptor
/// entries in bulk (`dup`s, `close_range`), not by `close`.
pub(crate) fn in_vfork_child() -> bool {
    // SAFETY: getpid has no preconditions.
    (unsafe { libc::getpid() }) as u64 != PID.load(Ordering::Relaxed)
}

/// Writes `{"pid","ppid","exe","stats"}` to PAIO_STATS (`%p` → pid)
/// atomically: a temporary file in the same directory, then rename.
/// `force` (exit paths) waits briefly for a concurrent push to finish.
fn push_stats(force: bool) {
    let Some(cfg) = config() else { return };
    let Some(template) = &cfg.stats_path else {
        return;
    };
    // A vfork child must not allocate or write the parent's statistics
    // under its own pid.
    if in_vfork_child() {
        return;
    }
    let mut tries = 0;
    while PUSHING.swap(true, Ordering::Acquire) {
        if !force || tries >= 200 {
            if !force {
                return;
            }
            break;
        }
        tries += 1;
        std::thread::sleep(std::time::Duration::from_micros(250));
    }
    if let Some(stage) = stage() {
        let pid = std::process::id();
        let stats = stage.collect_histograms();
        let exe = std::fs::read_link("/proc/self/exe")
            .ok()
            .and_then(|p| p.to_str().map(str::to_string))
            .unwrap_or_default();
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() } as u32;
        let record = Record {
            pid,
            ppid,
            exe: &exe,
            stats: &stats,
            dirty_writebacks: crate::dirty::writebacks(),
        };
        if let Ok(json) = serde_json::to_string(&record) {
            let path = template.replace("%p", &pid.to_string());
            let tid = paio::context::current_workflow();
            let tmp = format!("{path}.tmp.{pid}.{tid}");
            let result = write_new(&tmp, (json + "\n").as_bytes())
                .and_then(|()| std::fs::rename(&tmp, Path::new(&path)));
            if let Err(e) = result {
                let _ = std::fs::remove_file(&tmp);
                if STATS_LOST_SAID.swap(true, Ordering::Relaxed) {
                    log(&format!("statistics to {path}: {e}"));
                } else {
                    raw_stderr(&format!(
                        "paio: cannot write statistics to {path}: {e}; they are lost until a \
                         write succeeds (PAIO_LOG=1 logs each failure)\n"
                    ));
                }
            }
        }
    }
    PUSHING.store(false, Ordering::Release);
}

/// Writes `data` to a new file at `path`, refusing to follow a symbolic link
/// or to write into a file that exists (`O_CREAT | O_EXCL`): the temporary
/// name is predictable, and in a shared directory such as `/tmp` another
/// user could have put a link there to a file of ours. A file left by an
/// earlier process of the same pid and thread is removed and the write
/// tried once more (removing another user's file in a sticky directory
/// fails, and the error is logged).
fn write_new(path: &str, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
    };
    let mut file = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(path)?;
            create()?
        }
        other => other?,
    };
    file.write_all(data)
}

/// Whether the interposer is active (constructor ran, stage usable).
#[inline]
pub(crate) fn active() -> bool {
    STATE.load(Ordering::Relaxed) == ACTIVE
}

/// Set once the process was told that mapped I/O is not enforced.
static MAPPED_SAID: AtomicBool = AtomicBool::new(false);

/// The program mapped descriptor `fd` (not anonymous memory): if it is a
/// regular file and the stage enforces something on reads or writes (an
/// object other than a Noop may meet them), say once that I/O through the
/// mapping is neither enforced nor counted.
#[inline]
pub(crate) fn mapped_file(fd: c_int) {
    if !MAPPED_SAID.load(Ordering::Relaxed) && active() {
        mapped_file_slow(fd);
    }
}

#[cold]
fn mapped_file_slow(fd: c_int) {
    // The library's own mappings (and a signal handler's inside it) pass.
    let Some(_g) = Guard::enter() else { return };
    let Some(stage) = stage() else { return };
    if stage.passes_at_once(RequestType::READ) && stage.passes_at_once(RequestType::WRITE) {
        return;
    }
    if file_kind(fd).map(|(kind, _)| kind) != Some(libc::S_IFREG) {
        return;
    }
    if !MAPPED_SAID.swap(true, Ordering::Relaxed) {
        raw_stderr(&format!(
            "paio: process {} maps a file with mmap: reads and writes through the mapping \
             are neither enforced nor counted (docs/preload.md)\n",
            std::process::id()
        ));
    }
}

/// Whether file classes are configured (fd table in use).
#[inline]
pub(crate) fn classifying() -> bool {
    config().is_some_and(|c| !c.class_rules.is_empty() || c.stream_class != 0)
}

/// The fdtable class of `stream`'s descriptor (0 without file classes).
#[inline]
fn stream_class(stream: *mut libc::FILE) -> u16 {
    if classifying() && !stream.is_null() {
        // SAFETY: a stream the caller uses; errno is restored by the guard.
        fdtable::get(unsafe { libc::fileno(stream) })
    } else {
        0
    }
}

/// Index of a stdio direction in [`paio::context::EmbedderCells::carried`].
#[inline]
fn carry_slot(rt: RequestType) -> usize {
    (rt != RequestType::READ) as usize
}

/// Charges a stdio call on `stream` that moved `bytes` in direction `rt`
/// ([`crate::stdio`]), after `unseen` bytes (`[read, written]`) moved
/// through its buffer with no call: one request of the bytes carried so far
/// plus these when it `reached` the kernel, else the bytes are carried.
#[inline]
pub(crate) fn after_stdio(
    rt: RequestType,
    stream: *mut libc::FILE,
    bytes: u64,
    unseen: [u64; 2],
    reached: bool,
) {
    if let Some(g) = Guard::enter() {
        let cells = &g.thread.embedder().carried;
        let here = carry_slot(rt);
        let other = &cells[1 - here];
        other.set(other.get().saturating_add(unseen[1 - here]));
        let bytes = bytes.saturating_add(unseen[here]);
        let carried = &cells[here];
        if reached {
            let size = carried.replace(0).saturating_add(bytes);
            submit(&g, rt, size, stream_class(stream));
            if rt == RequestType::WRITE && !stream.is_null() {
                let ctx = g.thread.context(rt, size);
                // SAFETY: a stream the caller uses; errno is restored by the
                // guard.
                wrote(&g, rt, &ctx, unsafe { libc::fileno(stream) }, size as i64);
            }
        } else {
            carried.set(carried.get().saturating_add(bytes));
        }
    }
}

/// Charges a write of `r` bytes to `fd` that a call made without an
/// interposed `write` (`dprintf`, formatting in libc), after it: one
/// request of the bytes written (none on an error).
pub(crate) fn after_write(fd: c_int, r: i64) {
    if r < 0 {
        return;
    }
    if let Some(g) = Guard::enter() {
        let class = fdtable::get(fd);
        submit(&g, RequestType::WRITE, r as u64, class);
        if let Some(cfg) = config() {
            let ctx = adjust(cfg, g.thread.context(RequestType::WRITE, r as u64), class);
            wrote(&g, RequestType::WRITE, &ctx, fd, r);
        }
    }
}

/// Adds `unseen` bytes (`[read, written]`, moved through a stream's buffer
/// with no call) to the calling thread's carried stdio bytes.
pub(crate) fn carry(unseen: [u64; 2]) {
    if unseen == [0, 0] {
        return;
    }
    if let Some(g) = Guard::enter() {
        add_carried(&g, unseen);
    }
}

fn add_carried(g: &Guard, unseen: [u64; 2]) {
    let cells = &g.thread.embedder().carried;
    for (cell, n) in cells.iter().zip(unseen) {
        cell.set(cell.get().saturating_add(n));
    }
}

/// Charges the calling thread's carried stdio bytes (reads and writes), and
/// `unseen` more, as requests on `stream`'s class: its buffered output is
/// about to reach the kernel (`fflush`, `fclose`, ...).
pub(crate) fn charge_carried(stream: *mut libc::FILE, unseen: [u64; 2]) {
    if let Some(g) = Guard::enter() {
        add_carried(&g, unseen);
        charge_carried_on(&g, stream, &[RequestType::READ, RequestType::WRITE]);
    }
}

/// Charges the carried bytes of the directions `rts` (guard held).
fn charge_carried_on(g: &Guard, stream: *mut libc::FILE, rts: &[RequestType]) {
    for &rt in rts {
        let n = g.thread.embedder().carried[carry_slot(rt)].replace(0);
        if n > 0 {
            submit(g, rt, n, stream_class(stream));
        }
    }
}
