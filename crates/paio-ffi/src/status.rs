//! Status codes, the thread-local last-error message, and the panic guard
//! every exported function runs its body in.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CString};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use paio::context::InternError;
use paio::{EnforceError, PolicyError, RuleError};

/// The result of a libpaio call. `PAIO_OK` (0) means success; every other
/// value is an error whose message `paio_last_error()` returns on the same
/// thread. Values are stable: new codes are only ever appended.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum paio_status {
    /// The call succeeded.
    PAIO_OK = 0,
    /// An argument was NULL where a pointer is required, a string was not
    /// valid UTF-8, a name was empty or too long, or an id was unknown. Nothing
    /// was changed.
    PAIO_ERR_INVALID_ARGUMENT = 1,
    /// A policy could not be read, parsed or applied; the message names the
    /// origin, line, column and field (`origin:line:column: field: message`).
    PAIO_ERR_POLICY = 2,
    /// A rule was not valid JSON of the rule format, or the stage rejected it
    /// (unknown channel, name in use, ...). The stage is unchanged.
    PAIO_ERR_RULE = 3,
    /// An enforcement object refused the request.
    PAIO_ERR_ENFORCE = 4,
    /// libpaio failed internally (a Rust panic was caught at the boundary, or
    /// an internal invariant did not hold). The call had no effect that can be
    /// relied on, but the process and other stages remain usable.
    PAIO_ERR_PANIC = 5,
    /// A fixed capacity was exhausted (for example: every id of the request
    /// type or request context namespace is taken).
    PAIO_ERR_LIMIT = 6,
}

/// Every status, in numeric order (for `paio_status_str` and tests).
pub(crate) const ALL_STATUSES: [paio_status; 7] = [
    paio_status::PAIO_OK,
    paio_status::PAIO_ERR_INVALID_ARGUMENT,
    paio_status::PAIO_ERR_POLICY,
    paio_status::PAIO_ERR_RULE,
    paio_status::PAIO_ERR_ENFORCE,
    paio_status::PAIO_ERR_PANIC,
    paio_status::PAIO_ERR_LIMIT,
];

impl paio_status {
    /// The constant's name, NUL-terminated.
    const fn c_name(self) -> &'static std::ffi::CStr {
        match self {
            paio_status::PAIO_OK => c"PAIO_OK",
            paio_status::PAIO_ERR_INVALID_ARGUMENT => c"PAIO_ERR_INVALID_ARGUMENT",
            paio_status::PAIO_ERR_POLICY => c"PAIO_ERR_POLICY",
            paio_status::PAIO_ERR_RULE => c"PAIO_ERR_RULE",
            paio_status::PAIO_ERR_ENFORCE => c"PAIO_ERR_ENFORCE",
            paio_status::PAIO_ERR_PANIC => c"PAIO_ERR_PANIC",
            paio_status::PAIO_ERR_LIMIT => c"PAIO_ERR_LIMIT",
        }
    }
}

/// A failed call: the status to return and the message to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error {
    pub(crate) status: paio_status,
    pub(crate) message: String,
}

impl Error {
    pub(crate) fn new(status: paio_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(paio_status::PAIO_ERR_INVALID_ARGUMENT, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(
            paio_status::PAIO_ERR_PANIC,
            format!("internal error: {}", message.into()),
        )
    }
}

impl From<PolicyError> for Error {
    fn from(e: PolicyError) -> Self {
        Self::new(paio_status::PAIO_ERR_POLICY, e.to_string())
    }
}

impl From<RuleError> for Error {
    fn from(e: RuleError) -> Self {
        Self::new(paio_status::PAIO_ERR_RULE, e.to_string())
    }
}

impl From<EnforceError> for Error {
    fn from(e: EnforceError) -> Self {
        Self::new(paio_status::PAIO_ERR_ENFORCE, e.to_string())
    }
}

impl From<InternError> for Error {
    fn from(e: InternError) -> Self {
        let status = match e {
            InternError::Empty | InternError::TooLong(_) => paio_status::PAIO_ERR_INVALID_ARGUMENT,
            InternError::Full(_) => paio_status::PAIO_ERR_LIMIT,
        };
        Self::new(status, e.to_string())
    }
}

/// A rule that is not valid JSON of the `paio::Rule` form.
pub(crate) fn rule_json_error(e: serde_json::Error) -> Error {
    Error::new(
        paio_status::PAIO_ERR_RULE,
        format!("invalid rule JSON: {e}"),
    )
}

thread_local! {
    /// The message of the calling thread's last failed call, if the last call
    /// failed.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    /// Whether the last call failed while `LAST_ERROR` was gone (thread
    /// teardown). No destructor, so it outlives `LAST_ERROR`.
    static LOST_ERROR: Cell<bool> = const { Cell::new(false) };
}

/// What `paio_last_error` says after a call that failed while the thread's
/// error slot was gone (a call from a thread-exit destructor).
const LOST_MESSAGE: &std::ffi::CStr =
    c"(the call failed during thread exit, where libpaio cannot keep its message)";

/// Whether any thread of the process ever kept a last error: until one
/// does, no thread has one to forget, and a successful call skips the
/// thread-local (a lookup through the dynamic loader in a shared library,
/// twice per two-phase pair otherwise).
static ANY_ERROR: AtomicBool = AtomicBool::new(false);

/// Keeps `message` as the thread's last error (NUL bytes are shown as `\0`).
pub(crate) fn set_last_error(message: &str) {
    // Before the slot is written: a thread that finds no flag has no error.
    ANY_ERROR.store(true, Ordering::Relaxed);
    let c = CString::new(message.replace('\0', "\\0"))
        .unwrap_or_else(|_| CString::from(c"(unprintable error message)"));
    // During thread teardown the slot may be gone; the message is then lost,
    // which is harmless: nobody on this thread can ask for it any more.
    let kept = LAST_ERROR
        .try_with(|e| match e.try_borrow_mut() {
            Ok(mut slot) => {
                *slot = Some(c);
                true
            }
            Err(_) => false,
        })
        .unwrap_or(false);
    LOST_ERROR.set(!kept);
}

/// Forgets the thread's last error. Cheap when there is none (no allocation).
pub(crate) fn clear_last_error() {
    // Relaxed suffices: only this thread writes its own slot, after its own
    // store of the flag, which it sees in program order.
    if !ANY_ERROR.load(Ordering::Relaxed) {
        return;
    }
    LOST_ERROR.set(false);
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut slot) = e.try_borrow_mut() {
            if slot.is_some() {
                *slot = None;
            }
        }
    });
}

/// Pointer to the thread's last error message, or to `""`.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| match e.try_borrow() {
            Ok(slot) => slot.as_ref().map_or(c"".as_ptr(), |c| c.as_ptr()),
            Err(_) => c"".as_ptr(),
        })
        .unwrap_or_else(|_| {
            if LOST_ERROR.get() {
                LOST_MESSAGE.as_ptr()
            } else {
                c"".as_ptr()
            }
        })
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(non-string panic payload)"
    }
}

/// Runs the body of an exported function that returns a status: `Ok` clears
/// the last error and returns `PAIO_OK`; `Err` keeps its message and returns
/// its status; a panic is caught (it must never unwind into C) and becomes
/// `PAIO_ERR_PANIC` with the panic's message.
///
/// `AssertUnwindSafe` is sound here: after a caught panic the caller only
/// gets an error code, and the state a panic could interrupt (a stage's
/// mutexes) is recovered from poisoning by paio itself.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Error>) -> paio_status {
    let _errno = KeepErrno::new();
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            clear_last_error();
            paio_status::PAIO_OK
        }
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(payload) => {
            set_last_error(&format!(
                "panic inside libpaio: {}",
                panic_message(&*payload)
            ));
            // Dropping a payload could itself panic; keep that from unwinding.
            let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
            paio_status::PAIO_ERR_PANIC
        }
    }
}

/// Restores the caller's `errno` when dropped: a libpaio call leaves it as
/// it found it, whatever the system calls inside did (a wait on a futex, a
/// board file that exists already).
struct KeepErrno(c_int);

impl KeepErrno {
    fn new() -> Self {
        // SAFETY: __errno_location returns the calling thread's errno,
        // valid for the thread's life.
        Self(unsafe { *libc::__errno_location() })
    }
}

impl Drop for KeepErrno {
    fn drop(&mut self) {
        // SAFETY: as in `new`; the same thread (the value never leaves it).
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// Runs the body of an exported function that returns nothing (the free
/// functions): a panic is caught and kept as the last error; otherwise the
/// last error is left as it was.
pub(crate) fn guard_void(body: impl FnOnce()) {
    let _errno = KeepErrno::new();
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(body)) {
        set_last_error(&format!(
            "panic inside libpaio: {}",
            panic_message(&*payload)
        ));
        let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

/// Runs the body of an exported function that returns a plain value (a
/// pointer to static text, a flag): a panic yields `fallback` instead of
/// unwinding.
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    let _errno = KeepErrno::new();
    panic::catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// Returns the message of the calling thread's last failed libpaio call, as
/// NUL-terminated UTF-8 text; never NULL. After a call that returned
/// `PAIO_OK` it is the empty string.
///
/// The text belongs to libpaio: do not free it. It stays valid until the
/// calling thread's next call of a function that returns `paio_status` (or of
/// a free function); copy it to keep it longer. Other threads' calls never
/// change it. Thread-safe.
#[no_mangle]
pub extern "C" fn paio_last_error() -> *const c_char {
    guard_value(c"".as_ptr(), last_error_ptr)
}

/// Returns the name of a status code (`"PAIO_ERR_POLICY"`), or
/// `"PAIO_UNKNOWN_STATUS"` for a value that is not a `paio_status`. Static
/// text: never NULL, never freed. Takes an `int` so any value is safe to pass.
/// Thread-safe; does not change the last error.
#[no_mangle]
pub extern "C" fn paio_status_str(status: c_int) -> *const c_char {
    guard_value(c"PAIO_UNKNOWN_STATUS".as_ptr(), || {
        ALL_STATUSES
            .iter()
            .find(|s| **s as c_int == status)
            .map_or(c"PAIO_UNKNOWN_STATUS".as_ptr(), |s| s.c_name().as_ptr())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: paio_last_error never returns NULL and the text is valid
        // until this thread's next status-returning call; we copy it at once.
        unsafe { CStr::from_ptr(paio_last_error()) }
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn status_values_are_stable() {
        for (i, s) in ALL_STATUSES.iter().enumerate() {
            assert_eq!(*s as usize, i, "{s:?}");
        }
        assert_eq!(paio_status::PAIO_OK as i32, 0);
        assert_eq!(paio_status::PAIO_ERR_INVALID_ARGUMENT as i32, 1);
        assert_eq!(paio_status::PAIO_ERR_PANIC as i32, 5);
    }

    #[test]
    fn status_names_match_constants() {
        for s in ALL_STATUSES {
            // SAFETY: paio_status_str returns static NUL-terminated text.
            let name = unsafe { CStr::from_ptr(paio_status_str(s as c_int)) };
            assert_eq!(name.to_str().unwrap(), format!("{s:?}"));
        }
        for bad in [-1, 7, 1000, c_int::MIN, c_int::MAX] {
            // SAFETY: as above.
            let name = unsafe { CStr::from_ptr(paio_status_str(bad)) };
            assert_eq!(name.to_str().unwrap(), "PAIO_UNKNOWN_STATUS");
        }
    }

    #[test]
    fn guard_maps_ok_error_and_panic() {
        assert_eq!(guard(|| Ok(())), paio_status::PAIO_OK);
        assert_eq!(last_error(), "");

        let status = guard(|| Err(Error::new(paio_status::PAIO_ERR_RULE, "bad rule")));
        assert_eq!(status, paio_status::PAIO_ERR_RULE);
        assert_eq!(last_error(), "bad rule");

        // A success clears the message.
        assert_eq!(guard(|| Ok(())), paio_status::PAIO_OK);
        assert_eq!(last_error(), "");

        let status = guard(|| panic!("boom {}", 42));
        assert_eq!(status, paio_status::PAIO_ERR_PANIC);
        assert_eq!(last_error(), "panic inside libpaio: boom 42");

        let status = guard(|| std::panic::panic_any(7u8));
        assert_eq!(status, paio_status::PAIO_ERR_PANIC);
        assert!(last_error().contains("non-string"), "{}", last_error());

        // The thread is still fully usable after a caught panic.
        assert_eq!(guard(|| Ok(())), paio_status::PAIO_OK);
    }

    #[test]
    fn void_and_pointer_guards_catch_panics() {
        assert_eq!(guard(|| Ok(())), paio_status::PAIO_OK);
        guard_void(|| {});
        assert_eq!(last_error(), "");
        guard_void(|| panic!("in a free function"));
        assert_eq!(last_error(), "panic inside libpaio: in a free function");
        let p = guard_value(c"fallback".as_ptr(), || panic!("no"));
        // SAFETY: the fallback is a static C string literal.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"fallback");
    }

    #[test]
    fn messages_with_nul_bytes_are_kept() {
        let status = guard(|| Err(Error::invalid("a\0b")));
        assert_eq!(status, paio_status::PAIO_ERR_INVALID_ARGUMENT);
        assert_eq!(last_error(), "a\\0b");
    }

    #[test]
    fn last_error_is_per_thread() {
        let _ = guard(|| Err(Error::invalid("here")));
        let there = std::thread::spawn(last_error).join().unwrap();
        assert_eq!(there, "");
        assert_eq!(last_error(), "here");
    }

    #[test]
    fn errors_map_to_their_codes() {
        let policy = paio::Stage::from_policy_str("[stage]\nnope = 1\n", "<t>").unwrap_err();
        let e = Error::from(policy);
        assert_eq!(e.status, paio_status::PAIO_ERR_POLICY);
        assert!(e.message.starts_with("<t>:2:"), "{}", e.message);

        let rule = RuleError::UnknownChannel("x".into());
        assert_eq!(Error::from(rule).status, paio_status::PAIO_ERR_RULE);

        let json = serde_json::from_str::<paio::Rule>("{").unwrap_err();
        let e = rule_json_error(json);
        assert_eq!(e.status, paio_status::PAIO_ERR_RULE);
        assert!(
            e.message.starts_with("invalid rule JSON: "),
            "{}",
            e.message
        );

        let enforce = EnforceError::new("x", "no");
        assert_eq!(Error::from(enforce).status, paio_status::PAIO_ERR_ENFORCE);

        assert_eq!(
            Error::from(InternError::Empty).status,
            paio_status::PAIO_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            Error::from(InternError::TooLong(300)).status,
            paio_status::PAIO_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            Error::from(InternError::Full("request type")).status,
            paio_status::PAIO_ERR_LIMIT
        );
        assert_eq!(
            Error::internal("x").status,
            paio_status::PAIO_ERR_PANIC,
            "internal errors share the panic code"
        );
    }
}
