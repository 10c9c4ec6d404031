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
//! - bytes moved with no call at all, by the macros `<stdio.h>` inlines
//!   (`getc_unlocked`, `putc_unlocked`), are the distance the buffer's
//!   pointers moved since the library last saw the stream
//!   ([`crate::streams`]): they join the next call seen on the stream;
//! - `fflush`, `fseek` and `fclose` of a stream with buffered output reach
//!   the kernel: they charge the carried bytes; so does the process's exit
//!   (stdio flushes its buffers after the interposer's destructor), with
//!   what the open streams' buffers took since last seen;
//! - bytes are charged as the program handed them over or took them (not
//!   the read-ahead stdio fetched), so byte limits and statistics stay exact
//!   for a thread's stdio; the carried bytes of a thread that ends without
//!   another such call are not charged (at most what its streams buffered).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use libc::FILE;
use paio::RequestType;

use crate::rt;
use crate::streams::{self, Marks};

extern "C" {
    // POSIX stream locks (recursive in glibc; not in the libc crate).
    fn flockfile(stream: *mut FILE);
    fn ftrylockfile(stream: *mut FILE) -> c_int;
    fn funlockfile(stream: *mut FILE);
    // glibc's list of open streams (exported since glibc 2.2.5, as
    // `fflush(NULL)` and the exit flush walk it) and its lock (recursive).
    static mut _IO_list_all: *mut FILE;
    fn _IO_list_lock();
    fn _IO_list_unlock();
}

/// The leading fields of glibc's `struct _IO_FILE` (unchanged since glibc
/// 2.1: it is the public layout of `FILE`, `<bits/types/struct_FILE.h>`).
#[repr(C)]
struct IoFilePrefix {
    flags: c_int,
    read_ptr: *mut c_char,
    read_end: *mut c_char,
    read_base: *mut c_char,
    write_base: *mut c_char,
    write_ptr: *mut c_char,
    write_end: *mut c_char,
    buf_base: *mut c_char,
    buf_end: *mut c_char,
    save_base: *mut c_char,
    backup_base: *mut c_char,
    save_end: *mut c_char,
    markers: *mut c_void,
    /// The next open stream in `_IO_list_all`.
    chain: *mut FILE,
    /// Its descriptor, when `flags` has [`IS_FILEBUF`] (`open_memstream`
    /// leaves 0 here) and it is not -1 (`fopencookie`).
    fileno: c_int,
    // Not read: the layout up to `mode`.
    _flags2: c_int,
    _old_offset: libc::c_long,
    _cur_column: u16,
    _vtable_offset: i8,
    _shortbuf: [c_char; 1],
    _lock: *mut c_void,
    _offset: i64,
    _codecvt: *mut c_void,
    _wide_data: *mut c_void,
    _freeres_list: *mut FILE,
    _freeres_buf: *mut c_void,
    _pad5: usize,
    /// The stream's orientation: above 0 wide-character, below 0 byte,
    /// 0 not decided yet.
    mode: c_int,
}

// The public layout (`<bits/types/struct_FILE.h>`) on x86-64.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(std::mem::offset_of!(IoFilePrefix, mode) == 0xc0);

/// glibc's `_IO_IS_FILEBUF` flag (libio.h, unchanged since 2.1): a stream
/// on a file descriptor, as `fileno(3)` checks.
const IS_FILEBUF: c_int = 0x2000;

/// Whether `stream` has a descriptor. A memory stream moves no I/O, and a
/// cookie stream's functions make their own (interposed) calls: neither is
/// charged.
///
/// # Safety
/// `stream` is a valid, open stream (its descriptor changes only in
/// `freopen`, which the caller's contract excludes during its call).
#[inline]
unsafe fn has_fd(stream: *mut FILE) -> bool {
    // SAFETY: the caller's contract.
    let f = unsafe { &*(stream as *const IoFilePrefix) };
    f.flags & IS_FILEBUF != 0 && f.fileno >= 0
}

/// Set once the process was told that wide-character stdio is not charged.
static WIDE_SAID: AtomicBool = AtomicBool::new(false);

/// Says once per process that `stream`, a stream on a descriptor, is
/// wide-oriented: its bytes went through calls the interposer does not
/// charge (`fwprintf`, `fputwc`, ...). Seen when the stream is closed or
/// flushed with every stream, and at exit.
///
/// # Safety
/// As [`has_fd`].
unsafe fn say_if_wide(stream: *mut FILE) {
    // SAFETY: the caller's contract.
    let f = unsafe { &*(stream as *const IoFilePrefix) };
    if f.mode > 0 && !WIDE_SAID.swap(true, Ordering::Relaxed) {
        rt::raw_stderr(&format!(
            "paio: process {} reads or writes a file through wide-character stdio \
             (fwprintf, fputwc, getwc, ...): those bytes are neither enforced nor counted \
             (docs/preload.md)\n",
            std::process::id()
        ));
    }
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
        read_base: f.read_base as usize,
        write_base: f.write_base as usize,
        write_ptr: f.write_ptr as usize,
    }
}

/// glibc's `_IO_IN_BACKUP` flag (libio.h, unchanged since 2.1): the read
/// pointers are in the backup area holding bytes pushed back with
/// `ungetc`, and `save_base`/`save_end` keep the buffer's unread part.
const IN_BACKUP: c_int = 0x100;

/// Where the unread part of `stream`'s buffer is (`[start, end)`) while
/// its read pointers are in the backup area; `None` otherwise.
///
/// # Safety
/// As [`marks`].
unsafe fn buffer_behind_backup(stream: *mut FILE) -> Option<(usize, usize)> {
    // SAFETY: the caller's contract.
    let f = unsafe { &*(stream as *const IoFilePrefix) };
    (f.flags & IN_BACKUP != 0).then_some((f.save_base as usize, f.save_end as usize))
}

/// Whether a call that moved `bytes` in direction `rt` went past the
/// stream's buffer (`before`/`after` its marks). A read that started in
/// the backup area (`behind_backup`: the buffer's unread part then) and
/// went on in the buffer's unread part only did not.
fn reached_kernel(
    rt: RequestType,
    before: &Marks,
    after: &Marks,
    bytes: u64,
    behind_backup: Option<(usize, usize)>,
) -> bool {
    let bytes = bytes as usize;
    if rt == RequestType::READ {
        let in_buffer = after.read_end == before.read_end
            && after.read_ptr == before.read_ptr.wrapping_add(bytes);
        let back_in_buffer = behind_backup.is_some_and(|(start, end)| {
            let from_backup = before.read_end.saturating_sub(before.read_ptr);
            start < end
                && after.read_base == start
                && after.read_end == end
                && after.read_ptr.wrapping_sub(start) == bytes.wrapping_sub(from_backup)
        });
        !(in_buffer || back_in_buffer)
    } else {
        after.pending() != before.pending().wrapping_add(bytes)
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

/// Runs `f` with `stream` locked if `lock` says so.
#[inline]
fn locked<R>(stream: *mut FILE, lock: Lock, f: impl FnOnce() -> R) -> R {
    if lock == Lock::Take {
        // SAFETY: a valid stream (the stdio call's own contract); locks
        // are recursive, so the real call takes it again.
        unsafe { flockfile(stream) };
    }
    let r = f();
    if lock == Lock::Take {
        // SAFETY: taken above on this thread.
        unsafe { funlockfile(stream) };
    }
    r
}

/// The bytes a call in direction `rt` can move through `stream`'s buffer
/// without a refill or a flush: what is left to read in it, or its room
/// for output (none on a line-buffered or unbuffered stream, whose
/// `write_end` glibc keeps at the buffer's start).
///
/// # Safety
/// As [`marks`].
unsafe fn room(stream: *mut FILE, rt: RequestType) -> usize {
    // SAFETY: as `marks` (the caller's contract).
    let f = unsafe { &*(stream as *const IoFilePrefix) };
    if rt == RequestType::READ {
        (f.read_end as usize).saturating_sub(f.read_ptr as usize)
    } else {
        (f.write_end as usize).saturating_sub(f.write_ptr as usize)
    }
}

/// Runs the stdio call `call` on `stream` (direction `rt`, asking to move
/// at most `asks` bytes; `usize::MAX` when that is not known beforehand)
/// and charges it: `moved` gives the bytes it moved from its result
/// (negative: none).
///
/// A call that only copied to or from the buffer is not charged on its
/// own: its bytes are counted at the next call seen on the stream as the
/// distance the buffer's pointers moved ([`crate::streams`]), like the
/// inline macros' bytes. When its `asks` bytes fit in the buffer (glibc
/// then neither refills nor flushes it), it is made with no more than a
/// look at the buffer.
#[inline]
pub(crate) fn call<R>(
    rt: RequestType,
    stream: *mut FILE,
    lock: Lock,
    asks: usize,
    call: impl FnOnce() -> R,
    moved: impl FnOnce(&R) -> i64,
) -> R {
    call_with(rt, stream, lock, asks, call, |r, _, _| moved(r))
}

/// As [`call`], for a read whose result does not say how many bytes it
/// took (`fscanf`): the distance the buffer's read pointer moved, across
/// one refill when there was one (one that took more than a buffer's
/// worth counts the last two buffers' share).
#[inline]
pub(crate) fn scan<R>(stream: *mut FILE, call: impl FnOnce() -> R) -> R {
    call_with(
        RequestType::READ,
        stream,
        Lock::Take,
        usize::MAX,
        call,
        |_, before, after| {
            let taken = if after.read_end == before.read_end && after.read_ptr >= before.read_ptr {
                after.read_ptr - before.read_ptr
            } else {
                before.read_end.saturating_sub(before.read_ptr)
                    + after.read_ptr.saturating_sub(after.read_base)
            };
            taken as i64
        },
    )
}

#[inline]
fn call_with<R>(
    rt: RequestType,
    stream: *mut FILE,
    lock: Lock,
    asks: usize,
    call: impl FnOnce() -> R,
    moved: impl FnOnce(&R, &Marks, &Marks) -> i64,
) -> R {
    // SAFETY: a valid stream (the stdio call's own contract).
    if !rt::active() || stream.is_null() || !unsafe { has_fd(stream) } {
        return call();
    }
    let seen = locked(stream, lock, || {
        // SAFETY: the stream is valid and locked (or the caller's,
        // unlocked).
        if asks <= unsafe { room(stream, rt) } && streams::entry(stream).is_some() {
            return Err(call());
        }
        // SAFETY: as above.
        let before = unsafe { marks(stream) };
        // SAFETY: as above.
        let behind_backup = unsafe { buffer_behind_backup(stream) };
        let r = call();
        // SAFETY: as above; the call does not close the stream.
        let after = unsafe { marks(stream) };
        let bytes = moved(&r, &before, &after).max(0) as u64;
        let reached = reached_kernel(rt, &before, &after, bytes, behind_backup);
        // A call that reached nothing past the buffer is counted later, by
        // the distance its pointers moved, unless it moved them to another
        // area (from glibc's backup area back to the buffer).
        let same_area = after.read_end == before.read_end
            && after.read_base == before.read_base
            && after.write_base == before.write_base;
        let (unseen, bytes) = match streams::entry(stream) {
            Some(_) if !reached && same_area => return Err(r),
            Some(e) => {
                let unseen = e.saw(&before, &after);
                // Bytes pushed back and read again by this call.
                let bytes = if rt == RequestType::READ {
                    e.settle(bytes)
                } else {
                    bytes
                };
                (unseen, bytes)
            }
            None => ([0, 0], bytes),
        };
        Ok((r, bytes, unseen, reached))
    });
    match seen {
        Ok((r, bytes, unseen, reached)) => {
            rt::after_stdio(rt, stream, bytes, unseen, reached);
            r
        }
        Err(r) => r,
    }
}

/// Runs `call`, which writes `stream`'s buffered output if it has any
/// (`fflush`; NULL for `fflush(NULL)`: every stream), and charges the
/// thread's carried bytes if it did.
#[inline]
pub(crate) fn flush<R>(stream: *mut FILE, lock: Lock, call: impl FnOnce() -> R) -> R {
    flush_and(stream, lock, false, call)
}

/// [`flush`]; when `repositions`, `call` also discards the bytes pushed
/// back with `ungetc` (`fseek`, `rewind`), and so does the entry.
#[inline]
fn flush_and<R>(stream: *mut FILE, lock: Lock, repositions: bool, call: impl FnOnce() -> R) -> R {
    // SAFETY: a valid stream or NULL (the call's own contract).
    if !rt::active() || (!stream.is_null() && !unsafe { has_fd(stream) }) {
        return call();
    }
    if stream.is_null() {
        // Every open stream is flushed, each under its own lock taken
        // inside (holding one across the call could deadlock with another
        // thread's `fflush(NULL)`): each is seen before and after.
        let mut unseen = [0, 0];
        each_open_stream(|s| unseen = add(unseen, &observe(s, Lock::Take, true)));
        rt::charge_carried(stream, unseen);
        let r = call();
        each_open_stream(|s| {
            observe(s, Lock::Take, false);
        });
        return r;
    }
    let (r, before, unseen) = locked(stream, lock, || {
        // SAFETY: valid and locked (or the caller's, unlocked).
        let before = unsafe { marks(stream) };
        let r = call();
        // SAFETY: as above; the call does not close the stream.
        let after = unsafe { marks(stream) };
        let unseen = streams::entry(stream).map_or([0, 0], |e| {
            let unseen = e.saw(&before, &after);
            if repositions {
                e.discard_pushed_back();
            }
            unseen
        });
        (r, before, unseen)
    });
    if before.pending() > 0 {
        rt::charge_carried(stream, unseen);
    } else {
        rt::carry(unseen);
    }
    r
}

/// Runs `call`, which repositions `stream` (`fseek`, `fsetpos`, `rewind`),
/// writing its buffered output first and discarding the bytes pushed back
/// with `ungetc`: as [`flush`], except that a NULL stream is passed on as
/// it is (it means no stream here).
#[inline]
pub(crate) fn reposition<R>(stream: *mut FILE, call: impl FnOnce() -> R) -> R {
    if stream.is_null() {
        return call();
    }
    flush_and(stream, Lock::Take, true, call)
}

/// Runs `call`, which pushes a byte back onto `stream` (`ungetc`, which
/// returns `EOF` when it could not): what the buffer took since last seen
/// is carried, and the byte, when pushed back, is not counted when it is
/// read again ([`crate::streams`]). Nothing reaches the kernel.
#[inline]
pub(crate) fn unget(stream: *mut FILE, call: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: a valid stream (ungetc's own contract).
    if !rt::active() || stream.is_null() || !unsafe { has_fd(stream) } {
        return call();
    }
    let (r, unseen) = locked(stream, Lock::Take, || {
        // SAFETY: valid and locked.
        let before = unsafe { marks(stream) };
        let r = call();
        // SAFETY: as above.
        let after = unsafe { marks(stream) };
        let unseen = streams::entry(stream).map_or([0, 0], |e| {
            let unseen = e.saw(&before, &after);
            if r != libc::EOF {
                e.pushed_back();
            }
            unseen
        });
        (r, unseen)
    });
    rt::carry(unseen);
    r
}

/// Before `fclose(stream)`: counts what its buffer took since last seen
/// and frees its entry; if it will write buffered output, the thread's
/// carried bytes are charged now (the stream is gone after the call).
#[inline]
pub(crate) fn before_close(stream: *mut FILE) {
    // SAFETY: a valid stream or NULL (fclose's own contract).
    if !rt::active() || stream.is_null() || !unsafe { has_fd(stream) } {
        return;
    }
    let (pending, unseen) = locked(stream, Lock::Take, || {
        // SAFETY: valid (the caller's contract for fclose) and locked.
        unsafe { say_if_wide(stream) };
        // SAFETY: as above.
        let m = unsafe { marks(stream) };
        let unseen = match streams::entry(stream) {
            Some(e) => {
                let unseen = e.saw(&m, &m);
                e.free();
                unseen
            }
            // Not tracked: no longer remembered as such either.
            None => {
                streams::forget(stream);
                [0, 0]
            }
        };
        (m.pending(), unseen)
    });
    if pending > 0 {
        rt::charge_carried(stream, unseen);
    } else {
        rt::carry(unseen);
    }
}

/// At the process's exit, before stdio's final flush: what the open
/// streams' buffers took since last seen (`[read, written]`). Walked as
/// glibc's exit flush walks them, without the list's lock; a stream another
/// thread holds locked is skipped (waiting could hang the exit).
pub(crate) fn at_exit() -> [u64; 2] {
    let mut unseen = [0, 0];
    // SAFETY: glibc's exported list head, read as its own exit flush does.
    let mut s = unsafe { (&raw const _IO_list_all).read() };
    while !s.is_null() {
        // SAFETY: an open stream on glibc's list.
        if unsafe { ftrylockfile(s) } == 0 {
            unseen = add(unseen, &observe(s, Lock::Held, true));
            // SAFETY: locked above by this thread.
            unsafe { funlockfile(s) };
        }
        // SAFETY: as above; `chain` links the list.
        s = unsafe { (*(s as *const IoFilePrefix)).chain };
    }
    unseen
}

/// Runs `f` on every open stream (glibc's list, under its lock: the order
/// `fflush(NULL)` takes the list's lock, then each stream's).
fn each_open_stream(mut f: impl FnMut(*mut FILE)) {
    // SAFETY: glibc's list lock, released below on this thread.
    unsafe { _IO_list_lock() };
    // SAFETY: the list head, read under its lock.
    let mut s = unsafe { (&raw const _IO_list_all).read() };
    while !s.is_null() {
        f(s);
        // SAFETY: an open stream on the list, which stays linked while the
        // list's lock is held.
        s = unsafe { (*(s as *const IoFilePrefix)).chain };
    }
    // SAFETY: taken above.
    unsafe { _IO_list_unlock() };
}

/// Sees `stream` with no call of its own: counts what its buffer took
/// since last seen (when `count`), or only keeps where it stands. Streams
/// without a descriptor count nothing.
fn observe(stream: *mut FILE, lock: Lock, count: bool) -> [u64; 2] {
    // SAFETY: an open stream on glibc's list (the callers').
    if !unsafe { has_fd(stream) } {
        return [0, 0];
    }
    locked(stream, lock, || {
        // SAFETY: valid and locked.
        unsafe { say_if_wide(stream) };
        // SAFETY: as above.
        let m = unsafe { marks(stream) };
        match streams::entry(stream) {
            Some(e) if count => e.saw(&m, &m),
            Some(e) => {
                e.reset(&m);
                [0, 0]
            }
            None => [0, 0],
        }
    })
}

fn add(a: [u64; 2], b: &[u64; 2]) -> [u64; 2] {
    [a[0].saturating_add(b[0]), a[1].saturating_add(b[1])]
}
