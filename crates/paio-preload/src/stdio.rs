//! Charging stdio calls for what reaches the kernel.
//!
//! stdio moves file data through libc's internal `read`/`write`, which no
//! preload sees, so the stdio calls themselves are charged. Most of them
//! only copy to or from the stream's buffer: charging each as an operation
//! made an IOPS limit count `fputs` calls (`sort` writing 3,000 lines with 4
//! `write(2)` calls was charged 3,000 operations). So a stdio call is one
//! request only when it reached the kernel, and the bytes of the calls that
//! did not are carried on the thread and charged with the next one that
//! does:
//! - a call *reached the kernel* unless it only moved the stream's buffer
//!   pointers by the bytes it moved (glibc's `struct _IO_FILE`, public in
//!   `<bits/types/struct_FILE.h>`, read under the stream's lock);
//! - `fflush` and `fclose` of a stream with buffered output reach the
//!   kernel: they charge the carried bytes; so does the process's exit
//!   (stdio flushes its buffers after the interposer's destructor);
//! - bytes are charged as the program handed them over or took them (not
//!   the read-ahead stdio fetched), so byte limits and statistics stay exact
//!   for a thread's stdio; the carried bytes of a thread that ends without
//!   another such call are not charged (at most what its streams buffered).

use std::ffi::{c_char, c_int};

use libc::FILE;
use paio::RequestType;

use crate::rt;

extern "C" {
    // POSIX stream locks (recursive in glibc; not in the libc crate).
    fn flockfile(stream: *mut FILE);
    fn funlockfile(stream: *mut FILE);
}

/// The leading fields of glibc's `struct _IO_FILE` (unchanged since glibc
/// 2.1: it is the public layout of `FILE`).
#[repr(C)]
struct IoFilePrefix {
    flags: c_int,
    read_ptr: *mut c_char,
    read_end: *mut c_char,
    read_base: *mut c_char,
    write_base: *mut c_char,
    write_ptr: *mut c_char,
}

/// Where a stream's buffer pointers stood.
#[derive(Clone, Copy)]
struct Marks {
    read_ptr: usize,
    read_end: usize,
    /// Bytes of output waiting in the buffer.
    pending: usize,
}

/// # Safety
/// `stream` is a valid, open stream whose lock the caller holds (or that no
/// other thread uses: the `_unlocked` calls' contract).
unsafe fn marks(stream: *mut FILE) -> Marks {
    // SAFETY: a glibc FILE starts with `struct _IO_FILE` (caller's contract
    // for validity; the lock for exclusive access).
    let f = unsafe { &*(stream as *const IoFilePrefix) };
    Marks {
        read_ptr: f.read_ptr as usize,
        read_end: f.read_end as usize,
        pending: (f.write_ptr as usize).saturating_sub(f.write_base as usize),
    }
}

/// Whether a call that moved `bytes` in direction `rt` went past the
/// stream's buffer (`before`/`after` its marks).
fn reached_kernel(rt: RequestType, before: Marks, after: Marks, bytes: u64) -> bool {
    let bytes = bytes as usize;
    if rt == RequestType::READ {
        !(after.read_end == before.read_end
            && after.read_ptr == before.read_ptr.wrapping_add(bytes))
    } else {
        after.pending != before.pending.wrapping_add(bytes)
    }
}

/// Whether a call takes the stream's lock itself (`fread`) or leaves that
/// to its caller (`fread_unlocked`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    /// Take the stream's lock around the call (a recursive lock: the real
    /// call takes it again).
    Take,
    /// The caller holds it, or no other thread uses the stream.
    Held,
}

/// Runs the stdio call `call` on `stream` (direction `rt`) and charges it:
/// `moved` gives the bytes it moved from its result (negative: none).
#[inline]
pub(crate) fn call<R>(
    rt: RequestType,
    stream: *mut FILE,
    lock: Lock,
    call: impl FnOnce() -> R,
    moved: impl FnOnce(&R) -> i64,
) -> R {
    if !rt::active() || stream.is_null() {
        return call();
    }
    if lock == Lock::Take {
        // SAFETY: a valid stream (the stdio call's own contract); locks
        // are recursive, so the real call takes it again.
        unsafe { flockfile(stream) };
    }
    // SAFETY: the stream is valid and locked (or the caller's, unlocked).
    let before = unsafe { marks(stream) };
    let r = call();
    // SAFETY: as above; the call does not close the stream.
    let after = unsafe { marks(stream) };
    if lock == Lock::Take {
        // SAFETY: taken above on this thread.
        unsafe { funlockfile(stream) };
    }
    let bytes = moved(&r).max(0) as u64;
    rt::after_stdio(rt, stream, bytes, reached_kernel(rt, before, after, bytes));
    r
}

/// Before `fflush(stream)`/`fclose(stream)`: if it will write buffered
/// output (or `stream` is NULL: every stream), the thread's carried bytes
/// are charged now.
#[inline]
pub(crate) fn before_flush(stream: *mut FILE) {
    if !rt::active() {
        return;
    }
    let flushes = stream.is_null() || {
        // SAFETY: a valid stream (the caller's contract for fflush/fclose).
        unsafe { flockfile(stream) };
        // SAFETY: valid and locked.
        let pending = unsafe { marks(stream) }.pending;
        // SAFETY: taken above.
        unsafe { funlockfile(stream) };
        pending > 0
    };
    if flushes {
        rt::charge_carried(stream);
    }
}
