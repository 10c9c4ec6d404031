//! The C ABI of paio: `libpaio.so`, `libpaio.a` and `include/paio.h`.
//!
//! Conventions, for every exported function:
//! - it returns a [`paio_status`]; on failure `paio_last_error()` gives the
//!   message on the same thread (a success clears it);
//! - NULL where a pointer is required, text that is not UTF-8 and unknown
//!   ids are `PAIO_ERR_INVALID_ARGUMENT`, never a crash;
//! - its body runs under `catch_unwind`: a Rust panic never crosses into C,
//!   it becomes `PAIO_ERR_PANIC`;
//! - output arguments come last; on failure, pointer outputs are set to NULL.
//!
//! The header is generated from this crate by cbindgen (`make header`); the
//! doc comments below are the header's comments. The guide is `docs/c-api.md`.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod args;
// The shared board of critical I/O, the interposer's own module compiled in
// here too (libpaio cannot be linked into the interposer: its exported
// symbols would come along).
#[path = "../../paio-preload/src/board.rs"]
mod board;
// The buckets of limits shared by processes (`PAIO_SHARED`), and the page of
// shared memory both map: the interposer's modules too.
#[path = "../../paio-preload/src/buckets.rs"]
mod buckets;
#[path = "../../paio-preload/src/shm.rs"]
mod shm;
mod status;
// The board maps and inspects its file with the system-call instruction
// (the interposer defines mmap itself); the same here.
#[path = "../../paio-preload/src/sys.rs"]
mod sys;

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use paio::{Context, Stage};

use args::{c_bytes, c_str, out_ptr};
use status::{guard, guard_value, guard_void, rule_json_error, Error};
pub use status::{paio_last_error, paio_status, paio_status_str};

/// Request type id of `other`: requests of no more specific type.
pub const PAIO_REQ_OTHER: u16 = 0;
/// Request type id of `read`.
pub const PAIO_REQ_READ: u16 = 1;
/// Request type id of `write`.
pub const PAIO_REQ_WRITE: u16 = 2;
/// Request type id of `open`.
pub const PAIO_REQ_OPEN: u16 = 3;
/// Request type id of `close`.
pub const PAIO_REQ_CLOSE: u16 = 4;
/// Request type id of `fsync`.
pub const PAIO_REQ_FSYNC: u16 = 5;
/// Request type id of `fdatasync`.
pub const PAIO_REQ_FDATASYNC: u16 = 6;
/// Request type id of `sync_file_range`.
pub const PAIO_REQ_SYNC_FILE_RANGE: u16 = 7;
/// Request type id of `stat`.
pub const PAIO_REQ_STAT: u16 = 8;
/// Request type id of `unlink`.
pub const PAIO_REQ_UNLINK: u16 = 9;
/// Request type id of `rename`.
pub const PAIO_REQ_RENAME: u16 = 10;
/// Request type id of `mkdir`.
pub const PAIO_REQ_MKDIR: u16 = 11;
/// Request type id of `rmdir`.
pub const PAIO_REQ_RMDIR: u16 = 12;
/// Request type id of `truncate`.
pub const PAIO_REQ_TRUNCATE: u16 = 13;
/// Request type id of `fallocate`.
pub const PAIO_REQ_FALLOCATE: u16 = 14;
/// Request type id of `put` (key-value stores).
pub const PAIO_REQ_PUT: u16 = 15;
/// Request type id of `get` (key-value stores).
pub const PAIO_REQ_GET: u16 = 16;
/// Request type id of `delete` (key-value stores).
pub const PAIO_REQ_DELETE: u16 = 17;
/// Request type id of `scan` (key-value stores).
pub const PAIO_REQ_SCAN: u16 = 18;
/// Request type id of `merge` (key-value stores).
pub const PAIO_REQ_MERGE: u16 = 19;
/// Ids that `paio_request_type` gives to names that are not built in start
/// here.
pub const PAIO_REQ_FIRST_CUSTOM: u16 = 1024;
/// The request context id meaning "no request context" (the name `none`).
pub const PAIO_CONTEXT_NONE: u16 = 0;
/// The file class id meaning "no file class" (the name `none`).
pub const PAIO_FILE_CLASS_NONE: u16 = 0;

/// A data plane stage. Opaque: create it with `paio_stage_new`,
/// `paio_stage_from_policy` or `paio_stage_from_policy_file`, and release it
/// with `paio_stage_free`.
///
/// Thread-safe: every function that takes a `const paio_stage *` may be
/// called on the same stage from any number of threads at once (requests
/// are enforced in parallel; rules and collections are serialized inside
/// the stage and never stall requests).
pub struct paio_stage {
    stage: std::sync::Arc<Stage>,
    /// The connection to paiod, once `paio_stage_connect` was called.
    control: std::sync::Mutex<Option<paio::control::ControlClient>>,
}

/// The classifiers of one request. A plain value: fill it with
/// `paio_context_new` (the calling thread's workflow and request context) or
/// `paio_context_explicit`, or set the fields directly; `paio_stage_enforce`
/// checks the ids.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct paio_context {
    /// Who issues the request; by default the kernel id of the calling thread.
    pub workflow: u64,
    /// What the request does: a `PAIO_REQ_*` constant or an id returned by
    /// `paio_request_type`.
    pub request_type: u16,
    /// Why the request happens: `PAIO_CONTEXT_NONE` or an id returned by
    /// `paio_request_context`.
    pub request_context: u16,
    /// Which kind of file the request touches: `PAIO_FILE_CLASS_NONE` (what
    /// `paio_context_new` and `paio_context_explicit` set) or an id returned
    /// by `paio_file_class`.
    pub file_class: u16,
    /// `PAIO_NORMAL` or `PAIO_CRITICAL`: whether a latency-critical activity
    /// waits for the request. `paio_context_new` sets the calling thread's
    /// mark (`paio_set_thread_critical`, `paio_set_process_critical`);
    /// `paio_context_explicit` sets `PAIO_NORMAL`. Any other value is
    /// refused. (It sits in what was padding: the struct's size and the
    /// other fields' offsets are unchanged.)
    pub criticality: u8,
    /// Size in bytes (0 for requests without data, such as `open`).
    pub size: u64,
}

/// `paio_context.criticality` of background work: may be held back, split
/// and rate limited by a priority object.
pub const PAIO_NORMAL: u8 = 0;
/// `paio_context.criticality` of a request a latency-critical activity waits
/// for: a priority object admits it first (docs/criticality.md).
pub const PAIO_CRITICAL: u8 = 1;

impl paio_context {
    fn from_rust(c: &Context) -> Self {
        Self {
            workflow: c.workflow,
            request_type: c.request_type.raw(),
            request_context: c.request_context.raw(),
            file_class: c.file_class.raw(),
            criticality: c.criticality.raw(),
            size: c.size,
        }
    }

    fn to_rust(self) -> Result<Context, Error> {
        check_bytes("ctx.size", self.size)?;
        Ok(Context::explicit(
            self.workflow,
            args::request_type(self.request_type)?,
            args::request_context(self.request_context)?,
            self.size,
        )
        .with_file_class(args::file_class(self.file_class)?)
        .with_criticality(
            paio::Criticality::from_raw(self.criticality).ok_or_else(|| {
                Error::invalid(format!(
                    "criticality {} is neither PAIO_NORMAL (0) nor PAIO_CRITICAL (1)",
                    self.criticality
                ))
            })?,
        ))
    }
}

/// Checks a byte count a caller gives (`what`): at most `SSIZE_MAX`, what
/// one call can move. A larger one is a negative `ssize_t` (a failed call's
/// -1) cast to `uint64_t`, which would put a rate limiter into a debt it
/// never leaves, or wrap the statistics.
fn check_bytes(what: &str, n: u64) -> Result<(), Error> {
    if n > i64::MAX as u64 {
        return Err(Error::invalid(format!(
            "{what} is {n}, above SSIZE_MAX: a failed call's -1 cast to uint64_t? Give the \
             bytes the call asks for (admit) or moved (complete: 0 when it failed)"
        )));
    }
    Ok(())
}

/// What the stage did with one request (filled by `paio_stage_enforce`).
#[repr(C)]
#[derive(Debug)]
pub struct paio_outcome {
    /// How long the request was held back, in nanoseconds.
    pub waited_ns: u64,
    /// NULL when the request's content is unchanged: keep using your own
    /// buffer, which libpaio never copied. Non-NULL when an enforcement object
    /// transformed the content (compression, encryption, ...): the new
    /// content is `data[0..len)` (`len` may be 0), owned by the caller and
    /// released with `paio_outcome_free`.
    pub data: *mut u8,
    /// Length of `data` in bytes (0 when `data` is NULL).
    pub len: usize,
}

impl paio_outcome {
    const EMPTY: paio_outcome = paio_outcome {
        waited_ns: 0,
        data: std::ptr::null_mut(),
        len: 0,
    };
}

const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the version contains a NUL byte"),
    };

/// Returns libpaio's version (`"0.1.0"`). Static text: never NULL, never
/// freed. Thread-safe; does not change the last error.
#[no_mangle]
pub extern "C" fn paio_version() -> *const c_char {
    guard_value(c"".as_ptr(), || VERSION.as_ptr())
}

/// Writes `value` to the non-NULL `out`.
///
/// # Safety
/// `out` is valid for writes of a `T`.
unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: the caller promises `out` is valid for writes (and it was
    // checked for NULL by `out_ptr`).
    unsafe { out.write(value) }
}

/// The stage behind a handle, or an error if it is NULL.
///
/// # Safety
/// `stage` is NULL or a live handle from a `paio_stage_*` constructor.
unsafe fn stage_ref<'a>(stage: *const paio_stage) -> Result<&'a Stage, Error> {
    if stage.is_null() {
        return Err(Error::invalid("stage is NULL"));
    }
    // SAFETY: non-NULL, and the caller promises a live handle: a pointer from
    // Box::into_raw not yet passed to paio_stage_free. `paio::Stage` is Sync,
    // so a shared reference may be used from any thread.
    Ok(unsafe { &(*stage).stage })
}

/// The handle itself, or an error if it is NULL.
///
/// # Safety
/// As [`stage_ref`].
unsafe fn handle_ref<'a>(stage: *const paio_stage) -> Result<&'a paio_stage, Error> {
    if stage.is_null() {
        return Err(Error::invalid("stage is NULL"));
    }
    // SAFETY: as in stage_ref; `paio_stage` is Sync (an Arc and a Mutex).
    Ok(unsafe { &*stage })
}

/// The name a policy text is given in errors: `origin`, or `"<string>"`
/// when it is NULL.
///
/// # Safety
/// `origin` is NULL or a NUL-terminated string.
unsafe fn origin_str<'a>(origin: *const c_char) -> Result<&'a str, Error> {
    if origin.is_null() {
        return Ok("<string>");
    }
    // SAFETY: non-NULL and NUL-terminated (this function's contract).
    unsafe { c_str(origin, "origin") }
}

/// The process's board, opened by its first stage.
static BOARD: std::sync::OnceLock<std::sync::Arc<board::Board>> = std::sync::OnceLock::new();

/// Opens the user's board of critical I/O (`PAIO_BOARD`: a path, or `off`;
/// default `/dev/shm/paio-<uid>-v3.board`) once per process and installs it,
/// so this process's priority objects see other programs' critical I/O and
/// its critical requests hold theirs. A board that cannot be used is
/// reported once on stderr: the stages work, without the cross-process view.
fn open_board_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let env = std::env::var("PAIO_BOARD").ok();
        if secure_execution() {
            if env.is_some() {
                eprintln!(
                    "paio: this program runs with privileges its user does not have \
                     (set-user-ID, set-group-ID or file capabilities): PAIO_BOARD is ignored \
                     and no board is used (critical I/O of other processes is not seen)"
                );
            }
            return;
        }
        let path = match env.as_deref() {
            Some("off") => return,
            Some(p) if !p.is_empty() && !p.starts_with('/') => {
                eprintln!("paio: PAIO_BOARD {p:?}: expected an absolute path, or \"off\"");
                return;
            }
            other => board::default_path(other),
        };
        match board::Board::open(&path) {
            Ok(b) => {
                let b = std::sync::Arc::new(b);
                if BOARD.set(b.clone()).is_ok() {
                    paio::criticality::install_board(b);
                    // SAFETY: registering a plain extern "C" handler.
                    unsafe { libc::pthread_atfork(None, None, Some(board_after_fork)) };
                }
            }
            Err(e) => eprintln!(
                "paio: {e}; critical I/O of other processes is not seen (PAIO_BOARD=off silences this)"
            ),
        }
    });
}

/// Installs the buckets of limits shared by processes from `PAIO_SHARED`
/// (an absolute path; `paio run` sets one for its command) once per
/// process, before its first stage is built, so a policy's `shared` limits
/// draw on them with the other processes'. A bad value is said once on
/// stderr; a policy that names a shared bucket then fails, saying why.
fn install_shared_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Some(path) = std::env::var_os("PAIO_SHARED").filter(|p| !p.is_empty()) else {
            return;
        };
        let path = std::path::PathBuf::from(path);
        if secure_execution() {
            eprintln!(
                "paio: this program runs with privileges its user does not have \
                 (set-user-ID, set-group-ID or file capabilities): PAIO_SHARED is ignored"
            );
        } else if !path.is_absolute() {
            eprintln!(
                "paio: PAIO_SHARED {:?}: expected the absolute path of the file of shared limits",
                path.display()
            );
        } else {
            paio::object::install_shared_buckets(std::sync::Arc::new(buckets::FileBuckets::new(
                &path,
            )));
        }
    });
}

/// Whether the process runs in secure-execution mode (`AT_SECURE`: a
/// set-user-ID or set-group-ID program, or one with file capabilities): its
/// environment is the invoking user's and is not acted on with the
/// program's privileges (as `secure_getenv`).
fn secure_execution() -> bool {
    // SAFETY: getauxval only reads the auxiliary vector the kernel passed;
    // it returns 0 for a type it does not know.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// A forked child's critical requests are its own: a slot of its own.
extern "C" fn board_after_fork() {
    if let Some(b) = BOARD.get() {
        b.claim_slot();
    }
}

/// Returns a new handle for `stage` through `out`.
///
/// # Safety
/// `out` is non-NULL and valid for writes.
unsafe fn put_stage(out: *mut *mut paio_stage, stage: Stage) {
    open_board_once();
    let handle = Box::into_raw(Box::new(paio_stage {
        stage: std::sync::Arc::new(stage),
        control: std::sync::Mutex::new(None),
    }));
    // SAFETY: forwarded from this function's contract.
    unsafe { put(out, handle) }
}

/// Checks a `paio_stage **` output and sets it to NULL.
///
/// # Safety
/// `out` is NULL or valid for writes.
unsafe fn stage_out(out: *mut *mut paio_stage) -> Result<*mut *mut paio_stage, Error> {
    install_shared_once();
    let out = out_ptr(out, "out")?;
    // SAFETY: non-NULL, and valid for writes by the caller's contract.
    unsafe { put(out, std::ptr::null_mut()) };
    Ok(out)
}

/// Creates an empty stage called `name`: no channels, every classifier
/// enabled; requests pass unenforced (counted as `unmatched`) until rules
/// given to `paio_stage_apply` say otherwise.
///
/// Returns `PAIO_OK` and the new stage in `*out`, or an error with `*out` set
/// to NULL (`PAIO_ERR_INVALID_ARGUMENT` if `name` or `out` is NULL, or
/// `name` is not UTF-8, not 1 to 128 bytes or has control characters: it is
/// shown by paiod, `paio status` and logs).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_new(
    name: *const c_char,
    out: *mut *mut paio_stage,
) -> paio_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable (this function's contract).
        let out = unsafe { stage_out(out) }?;
        // SAFETY: `name` is NULL or NUL-terminated (this function's contract).
        let name = unsafe { c_str(name, "name") }?;
        paio::env::check_stage_name(name).map_err(|e| Error::invalid(format!("name: {e}")))?;
        let stage = Stage::builder(name).build();
        // SAFETY: `out` was checked non-NULL by stage_out and is writable.
        unsafe { put_stage(out, stage) };
        Ok(())
    })
}

/// Creates a stage from a policy given as TOML text (the format of
/// `docs/policies.md`). `origin` names the text in error messages (a file
/// name, say); NULL means `"<string>"`.
///
/// Returns `PAIO_OK` and the new stage in `*out`, or an error with `*out` set
/// to NULL: `PAIO_ERR_POLICY` if the policy is invalid, with a message of the
/// form `origin:line:column: field: what was expected`;
/// `PAIO_ERR_INVALID_ARGUMENT` if `policy` or `out` is NULL or a string is
/// not UTF-8.
///
/// # Safety
/// `policy` and `origin` are NULL or NUL-terminated strings; `out` is NULL
/// or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_from_policy(
    policy: *const c_char,
    origin: *const c_char,
    out: *mut *mut paio_stage,
) -> paio_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable (this function's contract).
        let out = unsafe { stage_out(out) }?;
        // SAFETY: `policy` is NULL or NUL-terminated (this function's contract).
        let text = unsafe { c_str(policy, "policy") }?;
        // SAFETY: `origin` is NULL or NUL-terminated (this function's contract).
        let origin = unsafe { origin_str(origin) }?;
        let stage = paio::Policy::parse(text, origin)?.new_stage()?;
        // SAFETY: `out` was checked non-NULL by stage_out and is writable.
        unsafe { put_stage(out, stage) };
        Ok(())
    })
}

/// Creates a stage from a policy given as TOML text, as
/// `paio_stage_from_policy`, with the stage's name and labels given by the
/// caller: `name` replaces the policy's `[stage] name` (NULL keeps it, or
/// `"paio"` if it has none); `n_labels` labels `label_keys[i] =
/// label_values[i]` are added to the policy's `[stage.labels]`, replacing
/// labels of the same key. For applications that ship one policy and run
/// several instances (the control plane groups stages by their labels).
///
/// Returns `PAIO_OK` and the new stage in `*out`, or an error with `*out` set
/// to NULL: `PAIO_ERR_POLICY` if the policy is invalid;
/// `PAIO_ERR_INVALID_ARGUMENT` if `policy` or `out` is NULL, a label array is
/// NULL while `n_labels` > 0, a string is NULL or not UTF-8, or a name or key
/// is empty.
///
/// # Safety
/// `policy`, `origin` and `name` are NULL or NUL-terminated strings;
/// `label_keys` and `label_values` are NULL or point to `n_labels`
/// NUL-terminated strings each; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_from_policy_as(
    policy: *const c_char,
    origin: *const c_char,
    name: *const c_char,
    label_keys: *const *const c_char,
    label_values: *const *const c_char,
    n_labels: usize,
    out: *mut *mut paio_stage,
) -> paio_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable (this function's contract).
        let out = unsafe { stage_out(out) }?;
        // SAFETY: `policy` is NULL or NUL-terminated (this function's contract).
        let text = unsafe { c_str(policy, "policy") }?;
        // SAFETY: `origin` is NULL or NUL-terminated (this function's contract).
        let origin = unsafe { origin_str(origin) }?;
        let mut parsed = paio::Policy::parse(text, origin)?;
        if !name.is_null() {
            // SAFETY: non-NULL and NUL-terminated (this function's contract).
            let name = unsafe { c_str(name, "name") }?;
            if name.is_empty() {
                return Err(Error::invalid(
                    "name is empty; pass NULL to keep the policy's",
                ));
            }
            paio::env::check_stage_name(name).map_err(|e| Error::invalid(format!("name: {e}")))?;
            parsed.name = Some(name.to_string());
        }
        if n_labels > 0 && (label_keys.is_null() || label_values.is_null()) {
            return Err(Error::invalid(format!(
                "n_labels is {n_labels} but label_keys or label_values is NULL"
            )));
        }
        for i in 0..n_labels {
            // SAFETY: both arrays hold `n_labels` pointers (this function's
            // contract) and were checked non-NULL above.
            let (k, v) = unsafe { (*label_keys.add(i), *label_values.add(i)) };
            // SAFETY: each entry is NULL or NUL-terminated (the contract).
            let k = unsafe { c_str(k, "label key") }?;
            // SAFETY: as above.
            let v = unsafe { c_str(v, "label value") }?;
            if k.is_empty() {
                return Err(Error::invalid(format!("label {i}: the key is empty")));
            }
            parsed.labels.insert(k.to_string(), v.to_string());
        }
        let stage = parsed.new_stage()?;
        // SAFETY: `out` was checked non-NULL by stage_out and is writable.
        unsafe { put_stage(out, stage) };
        Ok(())
    })
}

/// Creates a stage from the policy file at `path` (any bytes the operating
/// system accepts as a path; at most 1 MiB of TOML).
///
/// Returns `PAIO_OK` and the new stage in `*out`, or an error with `*out` set
/// to NULL: `PAIO_ERR_POLICY` if the file cannot be read or is invalid (the
/// message starts with `path:line:column:`); `PAIO_ERR_INVALID_ARGUMENT` if
/// `path` or `out` is NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_from_policy_file(
    path: *const c_char,
    out: *mut *mut paio_stage,
) -> paio_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable (this function's contract).
        let out = unsafe { stage_out(out) }?;
        // SAFETY: `path` is NULL or NUL-terminated (this function's contract).
        let bytes = unsafe { c_bytes(path, "path") }?;
        #[cfg(unix)]
        let path = {
            use std::os::unix::ffi::OsStrExt;
            std::path::Path::new(std::ffi::OsStr::from_bytes(bytes))
        };
        #[cfg(not(unix))]
        let path = std::path::Path::new(
            std::str::from_utf8(bytes)
                .map_err(|e| Error::invalid(format!("path is not valid UTF-8: {e}")))?,
        );
        let stage = paio::Policy::from_file(path)?.new_stage()?;
        // SAFETY: `out` was checked non-NULL by stage_out and is writable.
        unsafe { put_stage(out, stage) };
        Ok(())
    })
}

/// Releases a stage. NULL is ignored. No other thread may be using the stage
/// or use it afterwards; transformed outcomes and JSON strings obtained from
/// it remain valid (they belong to the caller).
///
/// # Safety
/// `stage` is NULL or a handle from a `paio_stage_*` constructor that was not
/// freed yet and that no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_free(stage: *mut paio_stage) {
    guard_void(|| {
        if !stage.is_null() {
            // SAFETY: the caller hands back a pointer from Box::into_raw (in
            // put_stage) that is freed only once and no longer shared.
            drop(unsafe { Box::from_raw(stage) });
        }
    })
}

/// Enforces one request: the stage selects the request's channel and
/// enforcement object from `*ctx` and applies the object, blocking the calling
/// thread as long as its mechanism demands (a rate limiter makes requests
/// wait). Requests that match no channel pass at once and are counted as
/// `unmatched`.
///
/// `data`/`len` is the request's content when you have it (NULL and 0
/// otherwise); it is never copied unless an object transforms it. `ctx->size`
/// is what is charged, independently of `len`.
///
/// If `out` is not NULL it is always overwritten (without freeing what it
/// held): with the time waited and, when an object transformed the content,
/// the new bytes, which you release with `paio_outcome_free`. With `out`
/// NULL, transformed bytes are discarded.
///
/// Returns `PAIO_OK`; `PAIO_ERR_ENFORCE` if an object refused the request;
/// `PAIO_ERR_INVALID_ARGUMENT` if `stage` or `ctx` is NULL, a context id is
/// unknown, `ctx->size` is above `SSIZE_MAX` (a failed call's -1 cast to
/// `uint64_t`), or `data` is NULL with `len` > 0.
///
/// Thread-safe: call it from any number of threads on the same stage.
///
/// # Safety
/// `stage` is NULL or a live stage; `ctx` is NULL or points to a
/// `paio_context`; `data` is NULL or points to `len` readable bytes that no
/// one writes during the call; `out` is NULL or valid for writing a
/// `paio_outcome`.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_enforce(
    stage: *const paio_stage,
    ctx: *const paio_context,
    data: *const c_void,
    len: usize,
    out: *mut paio_outcome,
) -> paio_status {
    guard(|| {
        if !out.is_null() {
            // SAFETY: non-NULL and writable (this function's contract).
            unsafe { put(out, paio_outcome::EMPTY) };
        }
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        if ctx.is_null() {
            return Err(Error::invalid("ctx is NULL"));
        }
        // SAFETY: non-NULL and points to a paio_context (this function's
        // contract); the struct is plain old data, so any bit pattern of its
        // fields is a valid value.
        let ctx = unsafe { ctx.read() }.to_rust()?;
        let data = if data.is_null() {
            if len != 0 {
                return Err(Error::invalid(format!("data is NULL but len is {len}")));
            }
            None
        } else {
            if len > isize::MAX as usize {
                return Err(Error::invalid(format!("len {len} is too large")));
            }
            // SAFETY: non-NULL, `len` readable bytes not written during the
            // call (this function's contract), and len <= isize::MAX.
            Some(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
        };
        let outcome = stage.enforce(&ctx, data)?;
        if !out.is_null() {
            let (data, len) = match outcome.data {
                Some(bytes) => {
                    let len = bytes.len();
                    (Box::into_raw(bytes.into_boxed_slice()).cast::<u8>(), len)
                }
                None => (std::ptr::null_mut(), 0),
            };
            // SAFETY: non-NULL and writable (this function's contract).
            unsafe {
                put(
                    out,
                    paio_outcome {
                        waited_ns: outcome.waited_ns,
                        data,
                        len,
                    },
                )
            };
        }
        Ok(())
    })
}

/// Releases the transformed bytes an outcome holds, if any, and resets
/// `data` to NULL and `len` to 0, so calling it twice is harmless. NULL is
/// ignored.
///
/// # Safety
/// `outcome` is NULL or points to a `paio_outcome` filled by
/// `paio_stage_enforce` (or reset by this function) whose `data` and `len`
/// were not changed since.
#[no_mangle]
pub unsafe extern "C" fn paio_outcome_free(outcome: *mut paio_outcome) {
    guard_void(|| {
        if outcome.is_null() {
            return;
        }
        // SAFETY: non-NULL and points to a paio_outcome (this function's
        // contract), which we may read and write.
        let o = unsafe { &mut *outcome };
        if !o.data.is_null() {
            let slice = std::ptr::slice_from_raw_parts_mut(o.data, o.len);
            // SAFETY: `data`/`len` come unchanged from Box::into_raw of a
            // boxed slice in paio_stage_enforce, and are released only once
            // because they are reset below.
            drop(unsafe { Box::from_raw(slice) });
        }
        o.data = std::ptr::null_mut();
        o.len = 0;
    })
}

/// Applies one rule to the stage, atomically: it takes effect whole, or the
/// stage is unchanged. `rule_json` is a rule in the JSON form of `paio::Rule`,
/// an object whose `"rule"` field names the operation, e.g.
/// `{"rule":"create_channel","name":"bg"}` or
/// `{"rule":"configure","channel":"bg","object":"limit","config":{"kind":"drl","rate":"50MiB/s"}}`.
///
/// Returns `PAIO_OK`; `PAIO_ERR_RULE` if the text is not such a rule (the
/// message says where and why) or the stage rejects it (unknown channel or
/// object, name in use, ...); `PAIO_ERR_INVALID_ARGUMENT` if an argument is
/// NULL or not UTF-8.
///
/// Thread-safe; requests being enforced meanwhile see the stage either
/// before or after the rule, never in between, and never wait for it.
///
/// # Safety
/// `stage` is NULL or a live stage; `rule_json` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_apply(
    stage: *const paio_stage,
    rule_json: *const c_char,
) -> paio_status {
    guard(|| {
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        // SAFETY: `rule_json` is NULL or NUL-terminated (this function's contract).
        let text = unsafe { c_str(rule_json, "rule_json") }?;
        let rule: paio::Rule = serde_json::from_str(text).map_err(rule_json_error)?;
        stage.apply(&rule)?;
        Ok(())
    })
}

/// Serializes `value` as a NUL-terminated JSON string owned by the caller.
fn json_string<T: serde::Serialize>(value: &T) -> Result<*mut c_char, Error> {
    let json =
        serde_json::to_string(value).map_err(|e| Error::internal(format!("serializing: {e}")))?;
    // JSON escapes control characters, so it holds no NUL byte.
    let c = CString::new(json).map_err(|e| Error::internal(format!("serializing: {e}")))?;
    Ok(c.into_raw())
}

/// Checks a `char **` output and sets it to NULL.
///
/// # Safety
/// `out` is NULL or valid for writes.
unsafe fn string_out(out: *mut *mut c_char) -> Result<*mut *mut c_char, Error> {
    let out = out_ptr(out, "out_json")?;
    // SAFETY: non-NULL, and valid for writes by the caller's contract.
    unsafe { put(out, std::ptr::null_mut()) };
    Ok(out)
}

/// Collects the stage's statistics as JSON (the serde form of
/// `paio::StageStats`): the stage name, `collected_at_ns`, `interval_ns`, a
/// `channels` array where each channel has `name`, `ops`, `bytes`,
/// `interval_ops`, `interval_bytes`, `ops_per_sec`, `bytes_per_sec`, `wait`
/// and its `objects` (same figures plus `kind`), then `unmatched` and
/// `removed`. `ops` and `bytes` are totals since the stage was created;
/// `interval_*` figures cover the time since the previous collection.
///
/// Returns `PAIO_OK` and a NUL-terminated string in `*out_json` that you
/// release with `paio_string_free`, or an error with `*out_json` set to NULL
/// (`PAIO_ERR_INVALID_ARGUMENT` if an argument is NULL). Thread-safe.
///
/// # Safety
/// `stage` is NULL or a live stage; `out_json` is NULL or valid for writing a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_collect(
    stage: *const paio_stage,
    out_json: *mut *mut c_char,
) -> paio_status {
    guard(|| {
        // SAFETY: `out_json` is NULL or writable (this function's contract).
        let out = unsafe { string_out(out_json) }?;
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        let json = json_string(&stage.collect())?;
        // SAFETY: checked non-NULL by string_out and writable.
        unsafe { put(out, json) };
        Ok(())
    })
}

/// Registers the stage with the control plane, paiod, listening at `socket`
/// (NULL or "": paiod's default socket, `$XDG_RUNTIME_DIR/paio/paiod.sock`,
/// else `/run/paio/paiod.sock` for root and `/tmp/paio-<uid>/paiod.sock`
/// for other users; a set-user-ID or set-group-ID program does not read
/// `XDG_RUNTIME_DIR`). Starts one background thread and
/// returns at once: the stage keeps working without paiod, connects when
/// paiod appears, applies the rules paiod sends, answers its statistics
/// requests, and keeps its rules and reconnects if paiod goes away
/// (docs/control-plane.md). The connection ends with `paio_stage_free`.
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` if `stage` is NULL,
/// `socket` is not UTF-8, relative or longer than a Unix socket's path may
/// be (107 bytes), or `paio_stage_connect` was called for the stage already;
/// `PAIO_ERR_LIMIT` if the thread cannot be started.
///
/// # Safety
/// `stage` is NULL or a live stage; `socket` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_connect(
    stage: *const paio_stage,
    socket: *const c_char,
) -> paio_status {
    guard(|| {
        // SAFETY: `stage` is NULL or live (this function's contract).
        let handle = unsafe { handle_ref(stage) }?;
        let path = if socket.is_null() {
            None
        } else {
            // SAFETY: non-NULL and NUL-terminated (this function's contract).
            Some(unsafe { c_str(socket, "socket") }?).filter(|s| !s.is_empty())
        };
        let path = match path {
            // `XDG_RUNTIME_DIR` is the caller's in a set-ID program.
            None if secure_execution() => paio::control::default_socket_path_from(None),
            None => paio::control::default_socket_path(),
            Some(p) if p.starts_with('/') => std::path::PathBuf::from(p),
            Some(p) => {
                return Err(Error::invalid(format!(
                    "socket {p:?}: expected an absolute path, or NULL for paiod's default"
                )))
            }
        };
        paio::control::check_socket_path(&path)
            .map_err(|e| Error::invalid(format!("socket {}: {e}", path.display())))?;
        let mut control = handle.control.lock().unwrap_or_else(|e| e.into_inner());
        if control.is_some() {
            return Err(Error::invalid(
                "paio_stage_connect was called for this stage already (one control \
                 connection per stage; it connects whenever paiod is there): free the stage \
                 to end it",
            ));
        }
        let options = paio::control::ControlOptions::new(path);
        let client =
            paio::control::ControlClient::start(std::sync::Arc::clone(&handle.stage), options)
                .map_err(|e| {
                    Error::new(
                        paio_status::PAIO_ERR_LIMIT,
                        format!("cannot start the control thread: {e}"),
                    )
                })?;
        *control = Some(client);
        Ok(())
    })
}

/// 1 if the stage is registered with paiod right now, 0 if not (not
/// connected yet, paiod away, never asked to connect, or `stage` NULL).
///
/// # Safety
/// `stage` is NULL or a live stage.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_connected(stage: *const paio_stage) -> c_int {
    // The closure only reads an atomic flag under a lock; a panic in it
    // leaves nothing half-done.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `stage` is NULL or live (this function's contract).
        let Ok(handle) = (unsafe { handle_ref(stage) }) else {
            return 0;
        };
        let control = handle.control.lock().unwrap_or_else(|e| e.into_inner());
        c_int::from(control.as_ref().is_some_and(|c| c.status().connected))
    }));
    r.unwrap_or(0)
}

/// Describes the stage as JSON (the serde form of `paio::StageInfo`): its
/// `name`, `pid`, `host`, `labels`, enabled `classifiers`, `channels` with
/// their objects and object mappings, `channel_rules` and `default_channel`.
///
/// Returns `PAIO_OK` and a NUL-terminated string in `*out_json` that you
/// release with `paio_string_free`, or an error with `*out_json` set to NULL
/// (`PAIO_ERR_INVALID_ARGUMENT` if an argument is NULL). Thread-safe.
///
/// # Safety
/// `stage` is NULL or a live stage; `out_json` is NULL or valid for writing a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_info(
    stage: *const paio_stage,
    out_json: *mut *mut c_char,
) -> paio_status {
    guard(|| {
        // SAFETY: `out_json` is NULL or writable (this function's contract).
        let out = unsafe { string_out(out_json) }?;
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        let json = json_string(&stage.info())?;
        // SAFETY: checked non-NULL by string_out and writable.
        unsafe { put(out, json) };
        Ok(())
    })
}

/// Releases a string returned by `paio_stage_collect` or `paio_stage_info`.
/// NULL is ignored. Do not pass any other string (in particular not the
/// result of `paio_last_error`).
///
/// # Safety
/// `s` is NULL or a string from `paio_stage_collect` or `paio_stage_info`
/// not released yet.
#[no_mangle]
pub unsafe extern "C" fn paio_string_free(s: *mut c_char) {
    guard_void(|| {
        if !s.is_null() {
            // SAFETY: the caller hands back a pointer from CString::into_raw
            // (in json_string), released only once.
            drop(unsafe { CString::from_raw(s) });
        }
    })
}

/// Fills `*out` for a request of the calling thread, like `Context::new` in
/// Rust: `workflow` is the thread's kernel id, `request_context` is the one
/// the thread set with `paio_set_request_context` (or `PAIO_CONTEXT_NONE`).
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` (with `*out` unchanged) if
/// `out` is NULL or `request_type` is neither a `PAIO_REQ_*` constant nor an
/// id returned by `paio_request_type`.
///
/// # Safety
/// `out` is NULL or valid for writing a `paio_context`.
#[no_mangle]
pub unsafe extern "C" fn paio_context_new(
    request_type: u16,
    size: u64,
    out: *mut paio_context,
) -> paio_status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        let ctx = Context::new(args::request_type(request_type)?, size);
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(out, paio_context::from_rust(&ctx)) };
        Ok(())
    })
}

/// Fills `*out` with every classifier given explicitly, after checking the
/// ids.
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` (with `*out` unchanged) if
/// `out` is NULL, `request_type` is neither a `PAIO_REQ_*` constant nor an id
/// returned by `paio_request_type`, or `request_context` is neither
/// `PAIO_CONTEXT_NONE` nor an id returned by `paio_request_context`.
///
/// # Safety
/// `out` is NULL or valid for writing a `paio_context`.
#[no_mangle]
pub unsafe extern "C" fn paio_context_explicit(
    workflow: u64,
    request_type: u16,
    request_context: u16,
    size: u64,
    out: *mut paio_context,
) -> paio_status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        let ctx = paio_context {
            workflow,
            request_type,
            request_context,
            file_class: PAIO_FILE_CLASS_NONE,
            criticality: PAIO_NORMAL,
            size,
        };
        ctx.to_rust()?;
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(out, ctx) };
        Ok(())
    })
}

/// Interns `name` with `named` and writes its id to `out_id`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out_id` is NULL or valid for
/// writing a `uint16_t`.
unsafe fn intern(
    name: *const c_char,
    out_id: *mut u16,
    named: impl FnOnce(&str) -> Result<u16, paio::context::InternError>,
) -> paio_status {
    guard(|| {
        let out = out_ptr(out_id, "out_id")?;
        // SAFETY: `name` is NULL or NUL-terminated (this function's contract).
        let name = unsafe { c_str(name, "name") }?;
        let id = named(name)?;
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(out, id) };
        Ok(())
    })
}

/// Returns in `*out_id` the id of the request type called `name`: the
/// `PAIO_REQ_*` value of a built-in name (`"read"` gives `PAIO_REQ_READ`), or
/// an id >= `PAIO_REQ_FIRST_CUSTOM` that the name keeps for the life of the
/// process (interned on first use; the same in every thread and stage).
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` if an argument is NULL or
/// `name` is empty, longer than 256 bytes or not UTF-8; `PAIO_ERR_LIMIT` if
/// every custom id is taken. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out_id` is NULL or valid for
/// writing a `uint16_t`.
#[no_mangle]
pub unsafe extern "C" fn paio_request_type(name: *const c_char, out_id: *mut u16) -> paio_status {
    // SAFETY: forwarded from this function's contract.
    unsafe { intern(name, out_id, |n| Ok(paio::RequestType::named(n)?.raw())) }
}

/// Returns in `*out_id` the id of the request context called `name`
/// (`"flush"`, `"compaction_l0"`, ...), interned on first use and kept for the
/// life of the process; `"none"` gives `PAIO_CONTEXT_NONE`.
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` if an argument is NULL or
/// `name` is empty, longer than 256 bytes or not UTF-8; `PAIO_ERR_LIMIT` if
/// every id is taken. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out_id` is NULL or valid for
/// writing a `uint16_t`.
#[no_mangle]
pub unsafe extern "C" fn paio_request_context(
    name: *const c_char,
    out_id: *mut u16,
) -> paio_status {
    // SAFETY: forwarded from this function's contract.
    unsafe { intern(name, out_id, |n| Ok(paio::RequestContext::named(n)?.raw())) }
}

/// Returns in `*out_id` the id of the file class called `name` (`"data"`,
/// `"logs"`, ...), interned on first use and kept for the life of the
/// process; `"none"` gives `PAIO_FILE_CLASS_NONE`. Put it in
/// `paio_context.file_class` for policies that match on `file_class`.
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` if an argument is NULL or
/// `name` is empty, longer than 256 bytes or not UTF-8; `PAIO_ERR_LIMIT` if
/// every id is taken. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `out_id` is NULL or valid for
/// writing a `uint16_t`.
#[no_mangle]
pub unsafe extern "C" fn paio_file_class(name: *const c_char, out_id: *mut u16) -> paio_status {
    // SAFETY: forwarded from this function's contract.
    unsafe { intern(name, out_id, |n| Ok(paio::FileClass::named(n)?.raw())) }
}

/// Sets the calling thread's request context to `id` until it is changed or
/// cleared; `paio_context_new` then puts it in the contexts it builds. Other
/// threads are not affected. `PAIO_CONTEXT_NONE` clears it.
///
/// Returns `PAIO_OK`, or `PAIO_ERR_INVALID_ARGUMENT` (nothing changed) if
/// `id` was not returned by `paio_request_context`.
#[no_mangle]
pub extern "C" fn paio_set_request_context(id: u16) -> paio_status {
    guard(|| {
        paio::set_request_context(args::request_context(id)?);
        Ok(())
    })
}

/// Sets the calling thread's request context by name, interning the name
/// like `paio_request_context` (convenient; cache the id from
/// `paio_request_context` and use `paio_set_request_context` on hot paths).
///
/// Returns `PAIO_OK`; on error nothing is changed:
/// `PAIO_ERR_INVALID_ARGUMENT` if `name` is NULL, empty, too long or not
/// UTF-8; `PAIO_ERR_LIMIT` if every id is taken.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn paio_set_request_context_name(name: *const c_char) -> paio_status {
    guard(|| {
        // SAFETY: `name` is NULL or NUL-terminated (this function's contract).
        let name = unsafe { c_str(name, "name") }?;
        paio::set_request_context(paio::RequestContext::named(name)?);
        Ok(())
    })
}

/// Clears the calling thread's request context (back to
/// `PAIO_CONTEXT_NONE`). Always returns `PAIO_OK`.
#[no_mangle]
pub extern "C" fn paio_clear_request_context() -> paio_status {
    guard(|| {
        paio::clear_request_context();
        Ok(())
    })
}

/// Returns in `*out_id` the calling thread's request context
/// (`PAIO_CONTEXT_NONE` if none is set), e.g. to restore it after a nested
/// section.
///
/// Returns `PAIO_OK`, or `PAIO_ERR_INVALID_ARGUMENT` if `out_id` is NULL.
///
/// # Safety
/// `out_id` is NULL or valid for writing a `uint16_t`.
#[no_mangle]
pub unsafe extern "C" fn paio_get_request_context(out_id: *mut u16) -> paio_status {
    guard(|| {
        let out = out_ptr(out_id, "out_id")?;
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(out, paio::current_request_context().raw()) };
        Ok(())
    })
}

// ---------------------------------------------------------------- two phases

/// A request admitted by `paio_stage_admit` and not yet completed. A plain
/// value the caller keeps (on its stack, in its request object) between the
/// two calls; its fields other than `ctx` are opaque. Complete each ticket
/// exactly once, on the stage that admitted it, also when the call failed
/// (with `moved` = 0): an admitted request holds what its object reserved
/// for it (a priority object's slot) until then.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct paio_ticket {
    /// The request's context, as admitted.
    pub ctx: paio_context,
    /// Opaque.
    pub internal: [u64; 5],
    /// Opaque: `PAIO_TICKET_LIVE` from admission to completion, 0 after.
    pub state: u64,
}

/// `paio_ticket.state` of an admitted, not yet completed ticket.
pub const PAIO_TICKET_LIVE: u64 = 0x7061_696f_7469_636b;

/// Admit phase of a two-phase request: routes the request of `ctx` and
/// applies its object's admit phase *before* you issue the call, blocking as
/// long as the object's mechanism demands (a rate limit, a priority object's
/// depth; critical requests first). `ctx->size` is the size the call asks
/// for. Issue the call after it returns `PAIO_OK`, then pass the ticket to
/// `paio_stage_complete` with the bytes the call moved. A request is
/// counted when it is completed (with its bytes, wait and the call's
/// latency).
///
/// Returns `PAIO_OK` and a live ticket in `*out`; `PAIO_ERR_ENFORCE` if an
/// object refused the request (counted now; nothing to complete);
/// `PAIO_ERR_INVALID_ARGUMENT` if an argument is NULL or a context field is
/// invalid (`size` above `SSIZE_MAX` included). On error `out->state` is 0.
///
/// Thread-safe: call it from any number of threads on the same stage.
///
/// # Safety
/// `stage` is NULL or a live stage; `ctx` is NULL or points to a
/// `paio_context`; `out` is NULL or valid for writing a `paio_ticket`.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_admit(
    stage: *const paio_stage,
    ctx: *const paio_context,
    out: *mut paio_ticket,
) -> paio_status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { (*out).state = 0 };
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        if ctx.is_null() {
            return Err(Error::invalid("ctx is NULL"));
        }
        // SAFETY: non-NULL and points to a paio_context (this function's
        // contract); plain old data.
        let ctx = unsafe { ctx.read() }.to_rust()?;
        let raw = stage.admit(&ctx)?.into_raw();
        let ticket = paio_ticket {
            ctx: paio_context::from_rust(&raw.ctx),
            internal: raw.internal,
            state: PAIO_TICKET_LIVE,
        };
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(out, ticket) };
        Ok(())
    })
}

/// Complete phase of a two-phase request: the call admitted with `ticket`
/// returned, having moved `moved` bytes (0 on error). Runs the object's
/// complete phase (a rate limiter refunds what was charged and not moved, a
/// priority object frees the slot and lets the next request in) and counts
/// the request with `moved` bytes, its wait and the call's latency (the time
/// since admission ended). Never blocks. Marks the ticket completed.
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` (nothing counted or
/// released; a live ticket stays live) if an argument is NULL, the ticket is
/// not live (completed already, or never admitted), was admitted by another
/// stage, or `moved` is above `SSIZE_MAX` (a failed call's -1: give 0).
///
/// Whether a ticket is live is in the ticket itself: complete the
/// `paio_ticket` that `paio_stage_admit` filled, not a copy of it. A copy
/// completed as well counts the request twice and frees its priority slot
/// twice, which libpaio cannot tell from two requests.
///
/// Thread-safe, and callable from another thread than the admitting one.
///
/// # Safety
/// `stage` is NULL or a live stage; `ticket` is NULL or points to a
/// `paio_ticket` filled by `paio_stage_admit` and not changed since.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_complete(
    stage: *const paio_stage,
    ticket: *mut paio_ticket,
    moved: u64,
) -> paio_status {
    guard(|| {
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        let ticket = out_ptr(ticket, "ticket")?;
        // SAFETY: non-NULL and points to a paio_ticket (this function's
        // contract), which we may read and write.
        let t = unsafe { &mut *ticket };
        if t.state != PAIO_TICKET_LIVE {
            return Err(Error::invalid(
                "the ticket is not live: completed already, or not filled by paio_stage_admit",
            ));
        }
        check_bytes("moved", moved)?;
        let admission = paio::Admission::from_raw(paio::RawAdmission {
            ctx: t.ctx.to_rust()?,
            internal: t.internal,
        });
        stage
            .complete(admission, moved)
            .map_err(|e| Error::invalid(e.to_string()))?;
        t.state = 0;
        Ok(())
    })
}

/// The piece size in which to issue a call for the request of `ctx`, when
/// the object the request routes to asks for large non-critical calls to be
/// split (a `drl` or `priority` object's `split`; docs/criticality.md): the
/// caller then issues the call as consecutive pieces of at most `*piece`
/// bytes, each with its own `paio_stage_admit` / `paio_stage_complete`, and
/// stops at the first piece that moves less than asked. `*piece` is 0 when
/// the call should be issued whole (no split asked for, a critical request,
/// or `ctx->size` not larger than a piece). Routing only: nothing is
/// enforced or counted. Never blocks.
///
/// Returns `PAIO_OK`; `PAIO_ERR_INVALID_ARGUMENT` (and `*piece` 0 if
/// `piece` is not NULL) if an argument is NULL or a context field is invalid.
///
/// # Safety
/// `stage` is NULL or a live stage; `ctx` is NULL or points to a
/// `paio_context`; `piece` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn paio_stage_split_size(
    stage: *const paio_stage,
    ctx: *const paio_context,
    piece: *mut u64,
) -> paio_status {
    guard(|| {
        let piece = out_ptr(piece, "piece")?;
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(piece, 0) };
        // SAFETY: `stage` is NULL or live (this function's contract).
        let stage = unsafe { stage_ref(stage) }?;
        if ctx.is_null() {
            return Err(Error::invalid("ctx is NULL"));
        }
        // SAFETY: non-NULL and points to a paio_context (this function's
        // contract); plain old data.
        let ctx = unsafe { ctx.read() }.to_rust()?;
        let n = paio::context::with_thread_ref(|t| stage.split_size_on_thread(t, &ctx));
        // SAFETY: checked non-NULL; writable by this function's contract.
        unsafe { put(piece, n.unwrap_or(0)) };
        Ok(())
    })
}

// ---------------------------------------------------------------- criticality

/// Marks the calling thread critical (`critical` non-zero) or not: the
/// contexts `paio_context_new` builds on it then carry `PAIO_CRITICAL`
/// (RCP's enlightenment API; docs/criticality.md). Other threads are not
/// affected. Always returns `PAIO_OK`.
#[no_mangle]
pub extern "C" fn paio_set_thread_critical(critical: c_int) -> paio_status {
    guard(|| {
        paio::criticality::set_thread_critical(critical != 0);
        Ok(())
    })
}

/// Returns 1 if the calling thread is marked critical (by
/// `paio_set_thread_critical`; the process mark is not counted), else 0.
#[no_mangle]
pub extern "C" fn paio_thread_critical() -> c_int {
    guard_value(0, || c_int::from(paio::criticality::thread_critical()))
}

/// Marks every thread of the process critical (`critical` non-zero) or
/// not; a thread marked critical itself stays critical either way. Always
/// returns `PAIO_OK`.
#[no_mangle]
pub extern "C" fn paio_set_process_critical(critical: c_int) -> paio_status {
    guard(|| {
        paio::criticality::set_process_critical(critical != 0);
        Ok(())
    })
}

#[cfg(test)]
mod tests;
