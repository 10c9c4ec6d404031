//! The interposed libc symbols. Every function calls the real one with the
//! caller's arguments unchanged and returns its result unchanged; the
//! library's own work happens under `rt::Guard`, which restores errno.

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{iovec, mode_t, off64_t, off_t, size_t, ssize_t, FILE};
use paio::RequestType;

use crate::aio;
use crate::fdtable;
use crate::real::real_fn;
use crate::rt;
use crate::stdio;
use crate::streams;

type Loff = libc::loff_t;

/// What a hook returns when libc has no such symbol (never on glibc 2.36).
#[cold]
fn nosys() -> c_int {
    rt::set_errno(libc::ENOSYS);
    -1
}

/// `open`'s mode argument is read only with O_CREAT or O_TMPFILE.
#[inline]
fn needs_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

/// `fileno(stream)` without disturbing errno (-1 for a stream without fd).
#[inline]
fn stream_fd(stream: *mut FILE) -> c_int {
    if stream.is_null() {
        return -1;
    }
    let e = rt::errno();
    // SAFETY: the caller passed a valid stream to the stdio call we wrap.
    let fd = unsafe { libc::fileno(stream) };
    rt::set_errno(e);
    fd
}

// ------------------------------------------------------------ data calls

/// A data call on the file offset (`read`, `writev`, ...; also the sync
/// calls, with size 0 and an `int` result): two phases, never split. `$size`
/// computes the requested size (only when a stage is active).
macro_rules! data_hook {
    ($name:ident, $sym:literal, $rt:ident, $fd:ident, $size:expr, ($($a:ident : $t:ty),*)) => {
        data_hook!($name, $sym, $rt, $fd, $size, ($($a: $t),*) -> ssize_t);
    };
    ($name:ident, $sym:literal, $rt:ident, $fd:ident, $size:expr, ($($a:ident : $t:ty),*) -> $ret:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            let Some(real) = real_fn!($sym, fn($($t),*) -> $ret) else {
                return nosys() as $ret;
            };
            rt::data_call(RequestType::$rt, $fd, None, || $size, rt::Split::Never, |_, _| {
                // SAFETY: the caller's arguments, unchanged, to the real
                // function of the same prototype.
                unsafe { real($($a),*) as i64 }
            }) as $ret
        }
    };
}

data_hook!(read, c"read", READ, fd, count as u64, (fd: c_int, buf: *mut c_void, count: size_t));
data_hook!(write, c"write", WRITE, fd, count as u64, (fd: c_int, buf: *const c_void, count: size_t));
data_hook!(readv, c"readv", READ, fd, iov_len_of(iov, cnt), (fd: c_int, iov: *const iovec, cnt: c_int));
data_hook!(writev, c"writev", WRITE, fd, iov_len_of(iov, cnt), (fd: c_int, iov: *const iovec, cnt: c_int));
// _FORTIFY_SOURCE variants: the real ones check and call libc's internal
// read, which no preload sees, so nothing is counted twice.
data_hook!(__read_chk, c"__read_chk", READ, fd, count as u64, (fd: c_int, buf: *mut c_void, count: size_t, buflen: size_t));

/// A positional call with one buffer (`pread`, `pwrite64`, ...): two
/// phases; split into pieces when the stage asks and the file allows,
/// several in flight at once on a descriptor opened with `O_DIRECT`.
/// `$extra` are trailing arguments passed unchanged (a fortify length).
macro_rules! positional_hook {
    ($name:ident, $sym:literal, $rt:ident, $buf:ty, $off:ty, ($($extra:ident : $et:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: $buf, count: size_t, off: $off $(, $extra: $et)*) -> ssize_t {
            let Some(real) = real_fn!($sym, fn(c_int, $buf, size_t, $off $(, $et)*) -> ssize_t) else {
                return nosys() as ssize_t;
            };
            // A fortified call whose buffer is too short goes piece after
            // piece through the real checking function, which aborts.
            let split = if true $(&& $extra >= count)* {
                rt::Split::Buffer(rt::Buffer { buf: buf as *mut u8, offset: off as i64 })
            } else {
                rt::Split::IfRegular
            };
            rt::data_call(RequestType::$rt, fd, Some(off as i64), || count as u64, split, |at, len| {
                if len == u64::MAX {
                    // SAFETY: the caller's arguments, unchanged.
                    return unsafe { real(fd, buf, count, off $(, $extra)*) as i64 };
                }
                // A piece: `len` bytes at `at` into the caller's buffer and
                // file range, both within what the caller passed.
                // SAFETY: `at + len <= count`, so the piece lies inside the
                // caller's buffer; a fortify length shrinks by the same `at`.
                unsafe {
                    real(fd, buf.byte_add(at as usize), len as size_t, off + at as $off
                        $(, $extra - at as $et)*) as i64
                }
            }) as ssize_t
        }
    };
}

positional_hook!(pread, c"pread", READ, *mut c_void, off_t, ());
positional_hook!(pread64, c"pread64", READ, *mut c_void, off64_t, ());
positional_hook!(pwrite, c"pwrite", WRITE, *const c_void, off_t, ());
positional_hook!(pwrite64, c"pwrite64", WRITE, *const c_void, off64_t, ());
positional_hook!(__pread_chk, c"__pread_chk", READ, *mut c_void, off_t, (buflen: size_t));
positional_hook!(__pread64_chk, c"__pread64_chk", READ, *mut c_void, off64_t, (buflen: size_t));

/// Linux's limit on a vectored call's iovec count (`UIO_MAXIOV`).
const IOV_MAX: c_int = 1024;

/// Total length of an iovec array (0 when the array is invalid by count or
/// NULL: the real call then fails with EINVAL/EFAULT by itself).
///
/// # Safety
/// `iov` points to `cnt` iovecs when `0 < cnt <= IOV_MAX` and it is not NULL.
pub(crate) unsafe fn iov_len(iov: *const iovec, cnt: c_int) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { iovecs(iov, cnt) }
        .iter()
        .fold(0u64, |n, v| n.saturating_add(v.iov_len as u64))
}

/// [`iov_len`] of the iovec array a hook's caller passed (the real call
/// reads the same array).
#[inline]
fn iov_len_of(iov: *const iovec, cnt: c_int) -> u64 {
    // SAFETY: called only from vectored hooks with the caller's arguments,
    // which the libc contract requires to describe `cnt` iovecs.
    unsafe { iov_len(iov, cnt) }
}

/// The caller's iovec array as a slice (empty when invalid by count or
/// NULL).
///
/// # Safety
/// As [`iov_len`].
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> &'a [iovec] {
    if iov.is_null() || cnt <= 0 || cnt > IOV_MAX {
        return &[];
    }
    // SAFETY: the caller's contract: `cnt` valid iovecs at `iov`.
    unsafe { std::slice::from_raw_parts(iov, cnt as usize) }
}

/// The iovecs covering bytes `at .. at + len` of `iov` (a piece of a split
/// vectored call).
fn iov_piece(iov: &[iovec], at: u64, len: u64) -> Vec<iovec> {
    let mut out = Vec::new();
    let (mut skip, mut left) = (at, len);
    for v in iov {
        if left == 0 {
            break;
        }
        let n = v.iov_len as u64;
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        out.push(iovec {
            iov_base: v.iov_base.wrapping_byte_add(skip as usize),
            iov_len: take as size_t,
        });
        left -= take;
        skip = 0;
    }
    out
}

/// A positional vectored call (`preadv`, `pwritev2`, ...): two phases; split
/// into pieces when the stage asks, the file allows and (for the `v2` calls)
/// `flags` is 0: RWF_APPEND, RWF_NOWAIT and the others change what a piece
/// would mean.
macro_rules! positional_vec_hook {
    ($name:ident, $sym:literal, $rt:ident, $off:ty, ($($flags:ident : $ft:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, cnt: c_int, off: $off $(, $flags: $ft)*) -> ssize_t {
            let Some(real) = real_fn!($sym, fn(c_int, *const iovec, c_int, $off $(, $ft)*) -> ssize_t) else {
                return nosys() as ssize_t;
            };
            let split = if true $(&& $flags == 0)* { rt::Split::IfRegular } else { rt::Split::Never };
            let size = || iov_len_of(iov, cnt);
            rt::data_call(RequestType::$rt, fd, Some(off as i64), size, split, |at, len| {
                if len == u64::MAX {
                    // SAFETY: the caller's arguments, unchanged.
                    return unsafe { real(fd, iov, cnt, off $(, $flags)*) as i64 };
                }
                // SAFETY: the caller's iovec array, as the real call reads it.
                let piece = iov_piece(unsafe { iovecs(iov, cnt) }, at, len);
                // SAFETY: the piece's iovecs lie inside the caller's buffers;
                // the array lives until the call returns.
                unsafe { real(fd, piece.as_ptr(), piece.len() as c_int, off + at as $off $(, $flags)*) as i64 }
            }) as ssize_t
        }
    };
}

positional_vec_hook!(preadv, c"preadv", READ, off_t, ());
positional_vec_hook!(preadv64, c"preadv64", READ, off64_t, ());
positional_vec_hook!(preadv2, c"preadv2", READ, off_t, (flags: c_int));
positional_vec_hook!(preadv64v2, c"preadv64v2", READ, off64_t, (flags: c_int));
positional_vec_hook!(pwritev, c"pwritev", WRITE, off_t, ());
positional_vec_hook!(pwritev64, c"pwritev64", WRITE, off64_t, ());
positional_vec_hook!(pwritev2, c"pwritev2", WRITE, off_t, (flags: c_int));
positional_vec_hook!(pwritev64v2, c"pwritev64v2", WRITE, off64_t, (flags: c_int));

/// Calls moving bytes between two descriptors: a read of `fd_in` (in two
/// phases when the bytes the call can move are known before it runs) and a
/// write of `fd_out` ([`rt::copy_call`]).
macro_rules! copy_hook {
    ($name:ident, $sym:literal, $fin:ident, $off:ident, $fout:ident, $len:ident, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> ssize_t {
            let Some(real) = real_fn!($sym, fn($($t),*) -> ssize_t) else {
                return nosys() as ssize_t;
            };
            // SAFETY: the libc contract: the input offset is NULL or points
            // to one offset, which the real call reads too.
            let from = unsafe { $off.as_ref() }.map(|&o| o as i64);
            rt::copy_call($fin, from, $fout, $len as u64, || {
                // SAFETY: the caller's arguments, unchanged, to the real
                // function of the same prototype.
                unsafe { real($($a),*) as i64 }
            }) as ssize_t
        }
    };
}

copy_hook!(copy_file_range, c"copy_file_range", fd_in, off_in, fd_out, len,
    (fd_in: c_int, off_in: *mut Loff, fd_out: c_int, off_out: *mut Loff, len: size_t, flags: c_uint));
copy_hook!(splice, c"splice", fd_in, off_in, fd_out, len,
    (fd_in: c_int, off_in: *mut Loff, fd_out: c_int, off_out: *mut Loff, len: size_t, flags: c_uint));
copy_hook!(sendfile, c"sendfile", in_fd, offset, out_fd, count,
    (out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t));
copy_hook!(sendfile64, c"sendfile64", in_fd, offset, out_fd, count,
    (out_fd: c_int, in_fd: c_int, offset: *mut off64_t, count: size_t));

// ------------------------------------------------------------ stdio data
// stdio moves file data through libc's internal read/write, which no
// preload can see: the stdio calls themselves are charged, one request per
// call that reached the kernel (crate::stdio).

macro_rules! fread_hook {
    ($name:ident, $sym:literal, $rt:ident, $lock:ident, $buf:ty, ($($pre:ident : $pt:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ptr: $buf, $($pre: $pt,)* size: size_t, n: size_t, stream: *mut FILE) -> size_t {
            let Some(real) = real_fn!($sym, fn($buf, $($pt,)* size_t, size_t, *mut FILE) -> size_t) else {
                return 0;
            };
            stdio::call(RequestType::$rt, stream, stdio::Lock::$lock, size.saturating_mul(n),
                // SAFETY: the caller's arguments, unchanged, to the real
                // function of the same prototype.
                || unsafe { real(ptr, $($pre,)* size, n, stream) },
                |&r| r.saturating_mul(size) as i64)
        }
    };
}

fread_hook!(fread, c"fread", READ, Take, *mut c_void, ());
fread_hook!(
    fread_unlocked,
    c"fread_unlocked",
    READ,
    Held,
    *mut c_void,
    ()
);
fread_hook!(__fread_chk, c"__fread_chk", READ, Take, *mut c_void, (ptrlen: size_t));
fread_hook!(__fread_unlocked_chk, c"__fread_unlocked_chk", READ, Held, *mut c_void, (ptrlen: size_t));
fread_hook!(fwrite, c"fwrite", WRITE, Take, *const c_void, ());
fread_hook!(
    fwrite_unlocked,
    c"fwrite_unlocked",
    WRITE,
    Held,
    *const c_void,
    ()
);

/// Length of a C string, or 0 for NULL.
#[inline]
fn c_len(s: *const c_char) -> i64 {
    if s.is_null() {
        0
    } else {
        // SAFETY: a non-null string from (or returned to) the caller is
        // NUL-terminated.
        unsafe { CStr::from_ptr(s) }.to_bytes().len() as i64
    }
}

macro_rules! fgets_hook {
    ($name:ident, $sym:literal, $lock:ident, ($($pre:ident : $pt:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(s: *mut c_char, $($pre: $pt,)* n: c_int, stream: *mut FILE) -> *mut c_char {
            let Some(real) = real_fn!($sym, fn(*mut c_char, $($pt,)* c_int, *mut FILE) -> *mut c_char) else {
                nosys();
                return std::ptr::null_mut();
            };
            // At most n - 1 bytes (fewer at a newline).
            let asks = (n.max(1) - 1) as usize;
            stdio::call(RequestType::READ, stream, stdio::Lock::$lock, asks,
                // SAFETY: the caller's arguments, unchanged, to the real
                // function of the same prototype.
                || unsafe { real(s, $($pre,)* n, stream) },
                |&r| c_len(r))
        }
    };
}

fgets_hook!(fgets, c"fgets", Take, ());
fgets_hook!(fgets_unlocked, c"fgets_unlocked", Held, ());
fgets_hook!(__fgets_chk, c"__fgets_chk", Take, (size: size_t));
fgets_hook!(__fgets_unlocked_chk, c"__fgets_unlocked_chk", Held, (size: size_t));

macro_rules! fputs_hook {
    ($name:ident, $sym:literal, $lock:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(s: *const c_char, stream: *mut FILE) -> c_int {
            let Some(real) = real_fn!($sym, fn(*const c_char, *mut FILE) -> c_int) else {
                return nosys();
            };
            let len = c_len(s);
            stdio::call(
                RequestType::WRITE,
                stream,
                stdio::Lock::$lock,
                len as usize,
                // SAFETY: the caller's arguments, unchanged, to the real
                // function of the same prototype.
                || unsafe { real(s, stream) },
                |&r| if r >= 0 { len } else { -1 },
            )
        }
    };
}

fputs_hook!(fputs, c"fputs", Take);
fputs_hook!(fputs_unlocked, c"fputs_unlocked", Held);

#[no_mangle]
pub unsafe extern "C" fn getline(
    line: *mut *mut c_char,
    n: *mut size_t,
    stream: *mut FILE,
) -> ssize_t {
    let Some(real) = real_fn!(
        c"getline",
        fn(*mut *mut c_char, *mut size_t, *mut FILE) -> ssize_t
    ) else {
        return nosys() as ssize_t;
    };
    stdio::call(
        RequestType::READ,
        stream,
        stdio::Lock::Take,
        usize::MAX,
        // SAFETY: the caller's arguments, unchanged, to the real function.
        || unsafe { real(line, n, stream) },
        |&r| r as i64,
    )
}

macro_rules! getdelim_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            line: *mut *mut c_char,
            n: *mut size_t,
            delim: c_int,
            stream: *mut FILE,
        ) -> ssize_t {
            let Some(real) = real_fn!(
                $sym,
                fn(*mut *mut c_char, *mut size_t, c_int, *mut FILE) -> ssize_t
            ) else {
                return nosys() as ssize_t;
            };
            stdio::call(
                RequestType::READ,
                stream,
                stdio::Lock::Take,
                usize::MAX,
                // SAFETY: the caller's arguments, unchanged, to the real
                // function of the same prototype.
                || unsafe { real(line, n, delim, stream) },
                |&r| r as i64,
            )
        }
    };
}

getdelim_hook!(getdelim, c"getdelim");
getdelim_hook!(__getdelim, c"__getdelim");

macro_rules! fflush_hook {
    ($name:ident, $sym:literal, $lock:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: *mut FILE) -> c_int {
            let Some(real) = real_fn!($sym, fn(*mut FILE) -> c_int) else {
                return nosys();
            };
            // SAFETY: the caller's argument to the real function.
            stdio::flush(stream, stdio::Lock::$lock, || unsafe { real(stream) })
        }
    };
}

fflush_hook!(fflush, c"fflush", Take);
fflush_hook!(fflush_unlocked, c"fflush_unlocked", Held);

/// A repositioning call: it writes the stream's buffered output first.
macro_rules! fseek_hook {
    ($name:ident, $sym:literal, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: *mut FILE, $($a: $t),*) -> c_int {
            let Some(real) = real_fn!($sym, fn(*mut FILE, $($t),*) -> c_int) else {
                return nosys();
            };
            // SAFETY: the caller's arguments to the real function.
            stdio::reposition(stream, || unsafe { real(stream, $($a),*) })
        }
    };
}

fseek_hook!(fseek, c"fseek", (offset: c_long, whence: c_int));
fseek_hook!(fseeko, c"fseeko", (offset: off_t, whence: c_int));
fseek_hook!(fseeko64, c"fseeko64", (offset: off64_t, whence: c_int));
fseek_hook!(fsetpos, c"fsetpos", (pos: *const libc::fpos_t));
fseek_hook!(fsetpos64, c"fsetpos64", (pos: *const libc::fpos64_t));

#[no_mangle]
pub unsafe extern "C" fn rewind(stream: *mut FILE) {
    let Some(real) = real_fn!(c"rewind", fn(*mut FILE) -> ()) else {
        nosys();
        return;
    };
    // SAFETY: the caller's argument to the real function.
    stdio::reposition(stream, || unsafe { real(stream) })
}

// One byte at a time: the calls glibc exports (`putc`, ...) and the two its
// inline macros call when a buffer is full or empty (`__overflow`,
// `__uflow`). Bytes the macros move with no call are counted at the next
// call seen on the stream (crate::streams).

extern "C" {
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
}

/// The stream `stdin` or `stdout` (`which`) names now (a program may
/// reassign them).
#[inline]
fn std_stream(which: *const *mut FILE) -> *mut FILE {
    // SAFETY: a pointer-sized libc variable, written by programs only
    // before they use it from several threads (as for any stdio use).
    unsafe { std::ptr::read_volatile(which) }
}

/// The bytes a one-byte call moved: 1 unless it returned EOF.
#[inline]
fn one(r: c_int) -> i64 {
    (r != libc::EOF) as i64
}

macro_rules! putc_hook {
    ($name:ident, $sym:literal, $lock:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(c: c_int, stream: *mut FILE) -> c_int {
            let Some(real) = real_fn!($sym, fn(c_int, *mut FILE) -> c_int) else {
                return nosys();
            };
            stdio::call(
                RequestType::WRITE,
                stream,
                stdio::Lock::$lock,
                1,
                // SAFETY: the caller's arguments to the real function.
                || unsafe { real(c, stream) },
                |&r| one(r),
            )
        }
    };
}

putc_hook!(fputc, c"fputc", Take);
putc_hook!(putc, c"putc", Take);
putc_hook!(_IO_putc, c"_IO_putc", Take);
putc_hook!(fputc_unlocked, c"fputc_unlocked", Held);
putc_hook!(putc_unlocked, c"putc_unlocked", Held);

macro_rules! putchar_hook {
    ($name:ident, $sym:literal, $lock:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(c: c_int) -> c_int {
            let Some(real) = real_fn!($sym, fn(c_int) -> c_int) else {
                return nosys();
            };
            let stream = std_stream(&raw const stdout);
            stdio::call(
                RequestType::WRITE,
                stream,
                stdio::Lock::$lock,
                1,
                // SAFETY: the caller's argument to the real function.
                || unsafe { real(c) },
                |&r| one(r),
            )
        }
    };
}

putchar_hook!(putchar, c"putchar", Take);
putchar_hook!(putchar_unlocked, c"putchar_unlocked", Held);

/// `putc_unlocked`'s inline body calls it with a full buffer (or on a
/// line-buffered or unbuffered stream, every time).
#[no_mangle]
pub unsafe extern "C" fn __overflow(stream: *mut FILE, c: c_int) -> c_int {
    let Some(real) = real_fn!(c"__overflow", fn(*mut FILE, c_int) -> c_int) else {
        return nosys();
    };
    stdio::call(
        RequestType::WRITE,
        stream,
        stdio::Lock::Held,
        // Called when the byte does not fit (or on a line-buffered stream).
        usize::MAX,
        // SAFETY: the caller's arguments to the real function.
        || unsafe { real(stream, c) },
        |&r| if c == libc::EOF { 0 } else { one(r) },
    )
}

macro_rules! getc_hook {
    ($name:ident, $sym:literal, $lock:ident, $asks:expr, $moved:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: *mut FILE) -> c_int {
            let Some(real) = real_fn!($sym, fn(*mut FILE) -> c_int) else {
                return nosys();
            };
            stdio::call(
                RequestType::READ,
                stream,
                stdio::Lock::$lock,
                $asks,
                // SAFETY: the caller's argument to the real function.
                || unsafe { real(stream) },
                $moved,
            )
        }
    };
}

getc_hook!(fgetc, c"fgetc", Take, 1, |&r| one(r));
getc_hook!(getc, c"getc", Take, 1, |&r| one(r));
getc_hook!(_IO_getc, c"_IO_getc", Take, 1, |&r| one(r));
getc_hook!(fgetc_unlocked, c"fgetc_unlocked", Held, 1, |&r| one(r));
getc_hook!(getc_unlocked, c"getc_unlocked", Held, 1, |&r| one(r));
// `getc_unlocked`'s inline body calls it on an empty buffer: it refills it
// and takes a byte.
getc_hook!(__uflow, c"__uflow", Held, usize::MAX, |&r| one(r));
// It refills an empty buffer and takes nothing (a peek).
getc_hook!(__underflow, c"__underflow", Held, usize::MAX, |_| 0);

macro_rules! ungetc_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(c: c_int, stream: *mut FILE) -> c_int {
            let Some(real) = real_fn!($sym, fn(c_int, *mut FILE) -> c_int) else {
                return nosys();
            };
            // SAFETY: the caller's arguments to the real function.
            stdio::unget(stream, || unsafe { real(c, stream) })
        }
    };
}

// A byte pushed back is read again: not counted twice.
ungetc_hook!(ungetc, c"ungetc");
ungetc_hook!(_IO_ungetc, c"_IO_ungetc");

macro_rules! getchar_hook {
    ($name:ident, $sym:literal, $lock:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name() -> c_int {
            let Some(real) = real_fn!($sym, fn() -> c_int) else {
                return nosys();
            };
            let stream = std_stream(&raw const stdin);
            stdio::call(
                RequestType::READ,
                stream,
                stdio::Lock::$lock,
                1,
                // SAFETY: no arguments.
                || unsafe { real() },
                |&r| one(r),
            )
        }
    };
}

getchar_hook!(getchar, c"getchar", Take);
getchar_hook!(getchar_unlocked, c"getchar_unlocked", Held);

#[no_mangle]
pub unsafe extern "C" fn puts(s: *const c_char) -> c_int {
    let Some(real) = real_fn!(c"puts", fn(*const c_char) -> c_int) else {
        return nosys();
    };
    let stream = std_stream(&raw const stdout);
    // The string and a newline.
    let len = c_len(s) + 1;
    stdio::call(
        RequestType::WRITE,
        stream,
        stdio::Lock::Take,
        len as usize,
        // SAFETY: the caller's argument to the real function.
        || unsafe { real(s) },
        |&r| if r >= 0 { len } else { -1 },
    )
}

// ------------------------------------------------------------ open / close
// open and openat are variadic in C. Defining a variadic function is not
// stable Rust, so they are defined with a fixed third (fourth) `mode`
// argument: on the x86-64 and AArch64 Linux calling conventions a variadic
// integer argument travels in the same register as a fixed one, so reading
// `mode` is sound; its value is only *used* with O_CREAT or O_TMPFILE, the
// only cases where the caller passed it. The real functions are called
// through variadic function pointers, which stable Rust allows.

macro_rules! open_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let Some(real) = real_fn!($sym, fn(*const c_char, c_int; ...) -> c_int) else {
                return nosys();
            };
            // SAFETY: path is the caller's NUL-terminated path (or null).
            unsafe { rt::before_meta_path(RequestType::OPEN, path) };
            let mode: c_uint = if needs_mode(flags) { mode as c_uint } else { 0 };
            // SAFETY: the caller's arguments to the real variadic open; mode
            // is passed as the unsigned int open reads with va_arg.
            let fd = unsafe { real(path, flags, mode) };
            rt::opened(fd);
            fd
        }
    };
}

open_hook!(open, c"open");
open_hook!(open64, c"open64");

macro_rules! openat_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let Some(real) = real_fn!($sym, fn(c_int, *const c_char, c_int; ...) -> c_int) else {
                return nosys();
            };
            // SAFETY: path is the caller's NUL-terminated path (or null).
            unsafe { rt::before_meta_path(RequestType::OPEN, path) };
            let mode: c_uint = if needs_mode(flags) { mode as c_uint } else { 0 };
            // SAFETY: the caller's arguments to the real variadic openat.
            let fd = unsafe { real(dirfd, path, flags, mode) };
            rt::opened(fd);
            fd
        }
    };
}

openat_hook!(openat, c"openat");
openat_hook!(openat64, c"openat64");

macro_rules! fixed_open_hook {
    ($name:ident, $sym:literal, $path:ident, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let Some(real) = real_fn!($sym, fn($($t),*) -> c_int) else {
                return nosys();
            };
            // SAFETY: the path is the caller's NUL-terminated path (or null).
            unsafe { rt::before_meta_path(RequestType::OPEN, $path) };
            // SAFETY: the caller's arguments, unchanged, to the real function.
            let fd = unsafe { real($($a),*) };
            rt::opened(fd);
            fd
        }
    };
}

fixed_open_hook!(creat, c"creat", path, (path: *const c_char, mode: mode_t));
fixed_open_hook!(creat64, c"creat64", path, (path: *const c_char, mode: mode_t));
fixed_open_hook!(__open_2, c"__open_2", path, (path: *const c_char, flags: c_int));
fixed_open_hook!(__open64_2, c"__open64_2", path, (path: *const c_char, flags: c_int));
fixed_open_hook!(__openat_2, c"__openat_2", path, (dirfd: c_int, path: *const c_char, flags: c_int));
fixed_open_hook!(__openat64_2, c"__openat64_2", path, (dirfd: c_int, path: *const c_char, flags: c_int));

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let Some(real) = real_fn!(c"close", fn(c_int) -> c_int) else {
        return nosys();
    };
    if crate::ring::is_ring_fd(fd) {
        // The interposer's own ring: the program never opened it.
        return 0;
    }
    rt::before_meta(RequestType::CLOSE, fd);
    // SAFETY: the caller's argument to the real close.
    let r = unsafe { real(fd) };
    // On Linux the descriptor is gone even when close reports an error.
    fdtable::set(fd, 0);
    r
}

/// close_range's flag that marks descriptors close-on-exec instead of closing.
const CLOSE_RANGE_CLOEXEC: c_int = 1 << 2;

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let Some(real) = real_fn!(c"close_range", fn(c_uint, c_uint, c_int) -> c_int) else {
        return nosys();
    };
    rt::before_meta(RequestType::CLOSE, -1);
    // The interposer's ring descriptors are left open: the range is closed
    // around them.
    let r = around_rings(first, last, |a, b| {
        // SAFETY: the caller's flags and a part of the caller's range, to
        // the real close_range.
        unsafe { real(a, b, flags) }
    });
    if r == 0 && flags & CLOSE_RANGE_CLOEXEC == 0 && !rt::in_vfork_child() {
        fdtable::clear_range(first, last);
    }
    r
}

/// Calls `close(a, b)` for each part of `[first, last]` between the
/// interposer's ring descriptors; the first failure's result, or 0.
fn around_rings(
    first: c_uint,
    last: c_uint,
    mut close: impl FnMut(c_uint, c_uint) -> c_int,
) -> c_int {
    let clamp = |v: c_uint| c_int::try_from(v).unwrap_or(c_int::MAX);
    let mut from = first;
    for fd in crate::ring::ring_fds_in(clamp(first), clamp(last)) {
        if fd < 0 {
            break;
        }
        let fd = fd as c_uint;
        if fd > from {
            let r = close(from, fd - 1);
            if r != 0 {
                return r;
            }
        }
        from = fd + 1;
    }
    if from > last {
        return 0;
    }
    close(from, last)
}

/// glibc's `closefrom` closes with its own internal `close_range`, which no
/// hook sees: done here as `close_range(lowfd, ~0, 0)` around the ring
/// descriptors, falling back to the real `closefrom` where the kernel has
/// no `close_range`.
#[no_mangle]
pub unsafe extern "C" fn closefrom(lowfd: c_int) {
    let Some(real) = real_fn!(c"closefrom", fn(c_int) -> ()) else {
        return;
    };
    let first = lowfd.max(0) as c_uint;
    rt::before_meta(RequestType::CLOSE, -1);
    let saved = rt::errno();
    let r = around_rings(first, c_uint::MAX, |a, b| {
        // SAFETY: a raw close_range over part of the caller's range.
        unsafe { libc::syscall(libc::SYS_close_range, a, b, 0) as c_int }
    });
    rt::set_errno(saved);
    if r != 0 {
        // SAFETY: the caller's argument to the real closefrom.
        unsafe { real(lowfd) };
    }
    if !rt::in_vfork_child() {
        fdtable::clear_range(first, c_uint::MAX);
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let Some(real) = real_fn!(c"dup", fn(c_int) -> c_int) else {
        return nosys();
    };
    // SAFETY: the caller's argument to the real dup.
    let r = unsafe { real(old) };
    if r >= 0 && !rt::in_vfork_child() {
        fdtable::copy(old, r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let Some(real) = real_fn!(c"dup2", fn(c_int, c_int) -> c_int) else {
        return nosys();
    };
    // SAFETY: the caller's arguments to the real dup2.
    let r = unsafe { real(old, new) };
    if r >= 0 && !rt::in_vfork_child() {
        fdtable::copy(old, r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let Some(real) = real_fn!(c"dup3", fn(c_int, c_int, c_int) -> c_int) else {
        return nosys();
    };
    // SAFETY: the caller's arguments to the real dup3.
    let r = unsafe { real(old, new, flags) };
    if r >= 0 && !rt::in_vfork_child() {
        fdtable::copy(old, r);
    }
    r
}

// fcntl is variadic too: its optional third argument is an int or a
// pointer, both passed in the third integer register on x86-64/AArch64, so
// it is taken as an unsigned long and passed on unchanged.
macro_rules! fcntl_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
            let Some(real) = real_fn!($sym, fn(c_int, c_int; ...) -> c_int) else {
                return nosys();
            };
            // SAFETY: the caller's arguments to the real variadic fcntl; the
            // third is passed in the same register class it arrived in.
            let r = unsafe { real(fd, cmd, arg) };
            if r >= 0
                && (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC)
                && !rt::in_vfork_child()
            {
                fdtable::copy(fd, r);
            }
            r
        }
    };
}

fcntl_hook!(fcntl, c"fcntl");
fcntl_hook!(fcntl64, c"fcntl64");

macro_rules! fopen_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut FILE {
            let Some(real) = real_fn!($sym, fn(*const c_char, *const c_char) -> *mut FILE) else {
                nosys();
                return std::ptr::null_mut();
            };
            // SAFETY: the caller's NUL-terminated path (or null).
            unsafe { rt::before_meta_path(RequestType::OPEN, path) };
            // SAFETY: the caller's arguments to the real function.
            let r = unsafe { real(path, mode) };
            if !r.is_null() {
                // A stream closed where the library did not see it (by
                // libc itself: endmntent, ...) may have left its entry to
                // this address.
                streams::forget(r);
                rt::opened(stream_fd(r));
            }
            r
        }
    };
}

fopen_hook!(fopen, c"fopen");
fopen_hook!(fopen64, c"fopen64");

/// `popen`: the call unchanged; its pipe (made by glibc's internal
/// `pipe2`, which no preload sees) is a stream, as `pipe`'s are.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    let Some(real) = real_fn!(c"popen", fn(*const c_char, *const c_char) -> *mut FILE) else {
        nosys();
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's arguments to the real popen.
    let r = unsafe { real(command, mode) };
    if !r.is_null() {
        // As fopen: an entry a stream at this address left behind.
        streams::forget(r);
        fdtable::set(stream_fd(r), rt::new_stream_class());
    }
    r
}

macro_rules! freopen_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            mode: *const c_char,
            stream: *mut FILE,
        ) -> *mut FILE {
            let Some(real) = real_fn!(
                $sym,
                fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE
            ) else {
                nosys();
                return std::ptr::null_mut();
            };
            let old = stream_fd(stream);
            // The stream's output is written and its file closed (or, with
            // no path, its mode changed): as for fclose.
            stdio::before_close(stream);
            // SAFETY: the caller's NUL-terminated path (or null).
            unsafe { rt::before_meta_path(RequestType::OPEN, path) };
            // SAFETY: the caller's arguments to the real function.
            let r = unsafe { real(path, mode, stream) };
            if !path.is_null() {
                fdtable::set(old, 0);
                if !r.is_null() {
                    rt::opened(stream_fd(r));
                }
            }
            r
        }
    };
}

freopen_hook!(freopen, c"freopen");
freopen_hook!(freopen64, c"freopen64");

#[no_mangle]
pub unsafe extern "C" fn fclose(stream: *mut FILE) -> c_int {
    let Some(real) = real_fn!(c"fclose", fn(*mut FILE) -> c_int) else {
        return nosys();
    };
    let fd = stream_fd(stream);
    stdio::before_close(stream);
    // A memory or cookie stream (no descriptor) closes no file.
    if fd >= 0 {
        rt::before_meta(RequestType::CLOSE, fd);
    }
    // SAFETY: the caller's argument to the real fclose.
    let r = unsafe { real(stream) };
    fdtable::set(fd, 0);
    r
}

/// `pclose` closes the stream as `fclose` does, then waits for the command.
#[no_mangle]
pub unsafe extern "C" fn pclose(stream: *mut FILE) -> c_int {
    let Some(real) = real_fn!(c"pclose", fn(*mut FILE) -> c_int) else {
        return nosys();
    };
    stdio::before_close(stream);
    // SAFETY: the caller's argument to the real pclose.
    unsafe { real(stream) }
}

/// `fcloseall` writes every stream's output and closes them all.
#[no_mangle]
pub unsafe extern "C" fn fcloseall() -> c_int {
    let Some(real) = real_fn!(c"fcloseall", fn() -> c_int) else {
        return nosys();
    };
    // SAFETY: no arguments.
    let r = stdio::flush(std::ptr::null_mut(), stdio::Lock::Take, || unsafe {
        real()
    });
    streams::forget_all();
    r
}

// ------------------------------------------------------------ sync

/// A metadata hook: when nothing observes its calls ([`rt::unobserved`])
/// and the real function is known, a test and a jump to it, with no frame
/// of its own; otherwise a separate function charges the call (`$charge`)
/// and makes it.
macro_rules! meta_hook {
    ($name:ident, $sym:literal, $rt:ident, ($($a:ident : $t:ty),*), $charge:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            type Real = unsafe extern "C" fn($($t),*) -> c_int;
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = SLOT.load(Ordering::Relaxed);
            if p != 0 && rt::unobserved(RequestType::$rt) {
                // SAFETY: `p` is the address dlsym returned for this symbol
                // (stored by `real::resolve` below), whose C prototype is
                // this function's; the caller's arguments, unchanged.
                return unsafe { std::mem::transmute::<usize, Real>(p)($($a),*) };
            }
            #[inline(never)]
            unsafe extern "C" fn counted($($a: $t),*) -> c_int {
                let p = crate::real::resolve(&SLOT, $sym);
                if p == 0 {
                    return nosys();
                }
                $charge
                // SAFETY: as above.
                unsafe { std::mem::transmute::<usize, Real>(p)($($a),*) }
            }
            // SAFETY: the caller's arguments, unchanged.
            unsafe { counted($($a),*) }
        }
    };
}

macro_rules! fd_meta_hook {
    ($name:ident, $sym:literal, $rt:ident, $fd:ident, ($($a:ident : $t:ty),*)) => {
        meta_hook!($name, $sym, $rt, ($($a: $t),*), {
            rt::count_meta(RequestType::$rt, $fd);
        });
    };
}

// Sync calls: two-phase requests of size 0, so that they are ordered and
// held like other I/O before they run (a non-critical `fsync` can flush a
// lot), counted on the board while a critical one runs, and their latency
// is in the statistics (a commit's `fsync` is what a database waits for).
data_hook!(fsync, c"fsync", FSYNC, fd, 0, (fd: c_int) -> c_int);
data_hook!(fdatasync, c"fdatasync", FDATASYNC, fd, 0, (fd: c_int) -> c_int);
data_hook!(sync_file_range, c"sync_file_range", SYNC_FILE_RANGE, fd, 0,
    (fd: c_int, off: off64_t, n: off64_t, flags: c_uint) -> c_int);

// ------------------------------------------------------------ metadata

macro_rules! path_meta_hook {
    ($name:ident, $sym:literal, $rt:ident, $path:ident, ($($a:ident : $t:ty),*)) => {
        meta_hook!($name, $sym, $rt, ($($a: $t),*), {
            // SAFETY: the caller's NUL-terminated path (or null).
            unsafe { rt::count_meta_path(RequestType::$rt, $path) };
        });
    };
}

type Buf = *mut c_void;
type Path = *const c_char;

path_meta_hook!(stat, c"stat", STAT, path, (path: Path, buf: Buf));
path_meta_hook!(stat64, c"stat64", STAT, path, (path: Path, buf: Buf));
path_meta_hook!(lstat, c"lstat", STAT, path, (path: Path, buf: Buf));
path_meta_hook!(lstat64, c"lstat64", STAT, path, (path: Path, buf: Buf));
path_meta_hook!(fstatat, c"fstatat", STAT, path, (dirfd: c_int, path: Path, buf: Buf, flags: c_int));
path_meta_hook!(fstatat64, c"fstatat64", STAT, path, (dirfd: c_int, path: Path, buf: Buf, flags: c_int));
path_meta_hook!(statx, c"statx", STAT, path, (dirfd: c_int, path: Path, flags: c_int, mask: c_uint, buf: Buf));
path_meta_hook!(__xstat, c"__xstat", STAT, path, (ver: c_int, path: Path, buf: Buf));
path_meta_hook!(__xstat64, c"__xstat64", STAT, path, (ver: c_int, path: Path, buf: Buf));
path_meta_hook!(__lxstat, c"__lxstat", STAT, path, (ver: c_int, path: Path, buf: Buf));
path_meta_hook!(__lxstat64, c"__lxstat64", STAT, path, (ver: c_int, path: Path, buf: Buf));
path_meta_hook!(__fxstatat, c"__fxstatat", STAT, path, (ver: c_int, dirfd: c_int, path: Path, buf: Buf, flags: c_int));
path_meta_hook!(__fxstatat64, c"__fxstatat64", STAT, path, (ver: c_int, dirfd: c_int, path: Path, buf: Buf, flags: c_int));
fd_meta_hook!(fstat, c"fstat", STAT, fd, (fd: c_int, buf: Buf));
fd_meta_hook!(fstat64, c"fstat64", STAT, fd, (fd: c_int, buf: Buf));
fd_meta_hook!(__fxstat, c"__fxstat", STAT, fd, (ver: c_int, fd: c_int, buf: Buf));
fd_meta_hook!(__fxstat64, c"__fxstat64", STAT, fd, (ver: c_int, fd: c_int, buf: Buf));

path_meta_hook!(unlink, c"unlink", UNLINK, path, (path: Path));
path_meta_hook!(unlinkat, c"unlinkat", UNLINK, path, (dirfd: c_int, path: Path, flags: c_int));
path_meta_hook!(rename, c"rename", RENAME, old, (old: Path, new: Path));
path_meta_hook!(renameat, c"renameat", RENAME, old, (olddir: c_int, old: Path, newdir: c_int, new: Path));
path_meta_hook!(renameat2, c"renameat2", RENAME, old,
    (olddir: c_int, old: Path, newdir: c_int, new: Path, flags: c_uint));
path_meta_hook!(mkdir, c"mkdir", MKDIR, path, (path: Path, mode: mode_t));
path_meta_hook!(mkdirat, c"mkdirat", MKDIR, path, (dirfd: c_int, path: Path, mode: mode_t));
path_meta_hook!(rmdir, c"rmdir", RMDIR, path, (path: Path));
path_meta_hook!(truncate, c"truncate", TRUNCATE, path, (path: Path, len: off_t));
path_meta_hook!(truncate64, c"truncate64", TRUNCATE, path, (path: Path, len: off64_t));
fd_meta_hook!(ftruncate, c"ftruncate", TRUNCATE, fd, (fd: c_int, len: off_t));
fd_meta_hook!(ftruncate64, c"ftruncate64", TRUNCATE, fd, (fd: c_int, len: off64_t));
fd_meta_hook!(fallocate, c"fallocate", FALLOCATE, fd, (fd: c_int, mode: c_int, off: off_t, len: off_t));
fd_meta_hook!(fallocate64, c"fallocate64", FALLOCATE, fd, (fd: c_int, mode: c_int, off: off64_t, len: off64_t));
// posix_fallocate returns an error number instead of setting errno; the
// value is passed back unchanged either way.
fd_meta_hook!(posix_fallocate, c"posix_fallocate", FALLOCATE, fd, (fd: c_int, off: off_t, len: off_t));
fd_meta_hook!(posix_fallocate64, c"posix_fallocate64", FALLOCATE, fd, (fd: c_int, off: off64_t, len: off64_t));

// ------------------------------------------------------------ memory mapping

/// `mmap` (and `mmap64`, the same call on 64-bit Linux): made with the
/// system-call instruction itself (crate::sys), since allocators call it
/// before anything may be looked up; the kernel checks what glibc's wrapper
/// checks, so the result and errno are the same. I/O through a file's
/// mapping is page faults, which nothing sees: a process that maps a
/// regular file while its reads or writes meet enforcement says so once
/// (rt::mapped_file).
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments, unchanged (mmap's own contract).
    let r = unsafe { crate::sys::mmap(addr, len, prot, flags, fd, off) };
    mapped(r, flags, fd)
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    // SAFETY: as in mmap.
    let r = unsafe { crate::sys::mmap(addr, len, prot, flags, fd, off) };
    mapped(r, flags, fd)
}

/// The result of a raw mmap as libc returns it (`MAP_FAILED` and errno on
/// failure); a file mapping is looked at.
#[inline]
fn mapped(r: isize, flags: c_int, fd: c_int) -> *mut c_void {
    if crate::sys::failed(r) {
        rt::set_errno(-r as c_int);
        return libc::MAP_FAILED;
    }
    if flags & libc::MAP_ANONYMOUS == 0 && fd >= 0 {
        rt::mapped_file(fd);
    }
    r as *mut c_void
}

// ------------------------------------------------------------ asynchronous I/O

/// libaio's `io_submit(io_context_t, long nr, struct iocb *[])`: every data
/// iocb is charged before the batch is handed over (crate::aio). The result
/// (the number submitted, or a negative error number, libaio's convention)
/// is passed back unchanged.
#[no_mangle]
pub unsafe extern "C" fn io_submit(
    ctx: *mut c_void,
    nr: c_long,
    iocbs: *mut *mut aio::Iocb,
) -> c_int {
    let Some(real) = real_fn!(
        c"io_submit",
        fn(*mut c_void, c_long, *mut *mut aio::Iocb) -> c_int
    ) else {
        return -libc::ENOSYS;
    };
    if rt::active() && nr > 0 && !iocbs.is_null() {
        for i in 0..nr as usize {
            // SAFETY: libaio's contract: `iocbs` holds `nr` iocb pointers.
            let iocb = unsafe { *iocbs.add(i) };
            if iocb.is_null() {
                // The kernel stops at a NULL entry (EFAULT): so does charging.
                break;
            }
            // SAFETY: a valid iocb the kernel is about to read.
            if let Some((rt, fd, size)) = unsafe { aio::request_of(iocb) } {
                rt::async_request(rt, fd, size);
            }
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { real(ctx, nr, iocbs) }
}

/// POSIX AIO's `aio_read`/`aio_write` (and their `64` aliases): the control
/// block is charged before glibc queues it (crate::aio); the result is
/// passed back unchanged.
macro_rules! posix_aio_hook {
    ($name:ident, $sym:literal, $op:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut libc::aiocb) -> c_int {
            let Some(real) = real_fn!($sym, fn(*mut libc::aiocb) -> c_int) else {
                return nosys();
            };
            if rt::active() && !cb.is_null() {
                // SAFETY: the caller's control block, which glibc reads next.
                if let Some((rt, fd, size)) = unsafe { aio::posix_request(cb, $op) } {
                    rt::async_request(rt, fd, size);
                }
            }
            // SAFETY: the caller's argument, unchanged.
            unsafe { real(cb) }
        }
    };
}

posix_aio_hook!(aio_read, c"aio_read", libc::LIO_READ);
posix_aio_hook!(aio_read64, c"aio_read64", libc::LIO_READ);
posix_aio_hook!(aio_write, c"aio_write", libc::LIO_WRITE);
posix_aio_hook!(aio_write64, c"aio_write64", libc::LIO_WRITE);

/// POSIX AIO's `aio_fsync(op, cb)` (and `aio_fsync64`): a sync request of
/// the block's descriptor (`O_DSYNC`: data only), charged before glibc
/// queues it.
macro_rules! posix_aio_fsync_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(op: c_int, cb: *mut libc::aiocb) -> c_int {
            let Some(real) = real_fn!($sym, fn(c_int, *mut libc::aiocb) -> c_int) else {
                return nosys();
            };
            if rt::active() && !cb.is_null() {
                let rt = if op == libc::O_DSYNC {
                    RequestType::FDATASYNC
                } else {
                    RequestType::FSYNC
                };
                // SAFETY: the caller's control block, which glibc reads next.
                rt::async_request(rt, unsafe { (*cb).aio_fildes }, 0);
            }
            // SAFETY: the caller's arguments, unchanged.
            unsafe { real(op, cb) }
        }
    };
}

posix_aio_fsync_hook!(aio_fsync, c"aio_fsync");
posix_aio_fsync_hook!(aio_fsync64, c"aio_fsync64");

/// POSIX AIO's `lio_listio(mode, list, nent, sig)` (and `lio_listio64`):
/// every block of the list is charged as its `aio_lio_opcode` asks, in the
/// list's order, before glibc queues them (NULL entries are skipped, as
/// glibc does).
macro_rules! posix_lio_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            mode: c_int,
            list: *const *mut libc::aiocb,
            nent: c_int,
            sig: *mut libc::sigevent,
        ) -> c_int {
            let Some(real) = real_fn!(
                $sym,
                fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int
            ) else {
                return nosys();
            };
            if rt::active() && !list.is_null() && nent > 0 {
                for i in 0..nent as usize {
                    // SAFETY: lio_listio's contract: `list` holds `nent`
                    // pointers, each NULL or a valid control block.
                    let cb = unsafe { *list.add(i) };
                    if cb.is_null() {
                        continue;
                    }
                    // SAFETY: as above.
                    let op = unsafe { (*cb).aio_lio_opcode };
                    // SAFETY: as above.
                    if let Some((rt, fd, size)) = unsafe { aio::posix_request(cb, op) } {
                        rt::async_request(rt, fd, size);
                    }
                }
            }
            // SAFETY: the caller's arguments, unchanged.
            unsafe { real(mode, list, nent, sig) }
        }
    };
}

posix_lio_hook!(lio_listio, c"lio_listio");
posix_lio_hook!(lio_listio64, c"lio_listio64");

/// libc's `syscall` is variadic: defined with six fixed `long` arguments,
/// which on x86-64 and AArch64 travel in the registers a variadic call puts
/// them in (as for `open` above); all six are passed on, and the kernel
/// reads only those the call has. Only io_uring's setup is looked at.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let Some(real) = real_fn!(c"syscall", fn(c_long; ...) -> c_long) else {
        return nosys() as c_long;
    };
    if n == libc::SYS_io_uring_setup {
        aio::uring_setup();
    }
    // SAFETY: the caller's arguments to the real variadic syscall.
    unsafe { real(n, a1, a2, a3, a4, a5, a6) }
}

/// liburing's setup calls (liburing makes its system calls itself, not
/// through `syscall`): reported, then passed on unchanged.
macro_rules! uring_setup_hook {
    ($name:ident, $sym:literal, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let Some(real) = real_fn!($sym, fn($($t),*) -> c_int) else {
                return -libc::ENOSYS;
            };
            aio::uring_setup();
            // SAFETY: the caller's arguments, unchanged, to the real function
            // of the same prototype.
            unsafe { real($($a),*) }
        }
    };
}

uring_setup_hook!(io_uring_setup, c"io_uring_setup", (entries: c_uint, params: *mut c_void));
uring_setup_hook!(io_uring_queue_init, c"io_uring_queue_init", (entries: c_uint, ring: *mut c_void, flags: c_uint));
uring_setup_hook!(io_uring_queue_init_params, c"io_uring_queue_init_params",
    (entries: c_uint, ring: *mut c_void, params: *mut c_void));

// ------------------------------------------------------------ exit

macro_rules! exit_hook {
    ($name:ident, $sym:literal) => {
        /// Processes ending with `_exit` run no atexit handlers or
        /// destructors: push the statistics file first.
        #[no_mangle]
        pub unsafe extern "C" fn $name(status: c_int) -> ! {
            rt::before_exit();
            if let Some(real) = real_fn!($sym, fn(c_int) -> !) {
                // SAFETY: the caller's argument to the real function.
                unsafe { real(status) }
            }
            loop {
                // SAFETY: exit_group ends the process; it does not return.
                unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
            }
        }
    };
}

exit_hook!(_exit, c"_exit");
exit_hook!(_Exit, c"_Exit");

// ------------------------------------------------------------ paio's own C calls

/// Sets the calling thread's request context by name (NULL or "" clears
/// it). Returns 0, or -1 if the name cannot be interned.
#[no_mangle]
pub unsafe extern "C" fn paio_preload_set_context(name: *const c_char) -> c_int {
    let name = if name.is_null() {
        None
    } else {
        // SAFETY: a non-null argument is a NUL-terminated string (contract).
        match unsafe { CStr::from_ptr(name) }.to_str() {
            Ok(s) => Some(s),
            Err(_) => return -1,
        }
    };
    rt::set_context(name)
}

/// 1 when the interposer is active in this process (its constructor ran
/// and the stage was built), else 0.
#[no_mangle]
pub extern "C" fn paio_preload_active() -> c_int {
    rt::active() as c_int
}

// ------------------------------------------------------------ other new descriptors
// Descriptors that are not files opened by path get class 0: a number whose
// previous owner was closed behind the library's back (closedir, fcloseall,
// a raw syscall) would otherwise keep that owner's class.

// `$class` is the new descriptor's class: 0, or for a socket the stream
// class (when the policy names it: rt::new_stream_class).
macro_rules! fresh_fd_hook {
    ($name:ident, $sym:literal, $class:expr, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let Some(real) = real_fn!($sym, fn($($t),*) -> c_int) else {
                return nosys();
            };
            // SAFETY: the caller's arguments, unchanged, to the real function
            // of the same prototype.
            let fd = unsafe { real($($a),*) };
            fdtable::set(fd, $class);
            fd
        }
    };
}

fresh_fd_hook!(socket, c"socket", rt::new_stream_class(), (domain: c_int, ty: c_int, proto: c_int));
fresh_fd_hook!(accept, c"accept", rt::new_stream_class(), (fd: c_int, addr: *mut c_void, len: *mut c_void));
fresh_fd_hook!(accept4, c"accept4", rt::new_stream_class(), (fd: c_int, addr: *mut c_void, len: *mut c_void, flags: c_int));
fresh_fd_hook!(memfd_create, c"memfd_create", 0, (name: *const c_char, flags: c_uint));
fresh_fd_hook!(eventfd, c"eventfd", 0, (initval: c_uint, flags: c_int));
fresh_fd_hook!(epoll_create1, c"epoll_create1", 0, (flags: c_int));

macro_rules! fd_pair_hook {
    ($name:ident, $sym:literal, $fds:ident, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let Some(real) = real_fn!($sym, fn($($t),*) -> c_int) else {
                return nosys();
            };
            // SAFETY: the caller's arguments, unchanged, to the real function
            // of the same prototype.
            let r = unsafe { real($($a),*) };
            if r == 0 {
                // SAFETY: on success the real call stored two descriptors in
                // the caller's int[2].
                let (a, b) = unsafe { (*$fds, *$fds.add(1)) };
                let class = rt::new_stream_class();
                fdtable::set(a, class);
                fdtable::set(b, class);
            }
            r
        }
    };
}

/// Gives every descriptor that the `SCM_RIGHTS` messages of `msg` carried
/// its class, as an open does ([`rt::opened`]: a pipe or a socket is a
/// stream, a file is classified by its path). Only the control data the
/// kernel reported (`msg_controllen`) is read.
///
/// # Safety
/// `msg` is null or the header a successful `recvmsg` just filled.
unsafe fn received(msg: *const libc::msghdr) {
    // SAFETY: the caller's contract: null or a filled header.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return;
    };
    if m.msg_control.is_null() || m.msg_controllen == 0 {
        return;
    }
    let end = m.msg_control as usize + m.msg_controllen;
    // SAFETY: the header's control buffer holds `msg_controllen` bytes of
    // cmsgs the kernel wrote; CMSG_FIRSTHDR/NXTHDR stay within it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: a non-null cmsg pointer from CMSG_FIRSTHDR/NXTHDR has a
        // whole header within the buffer.
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_DATA is the header's data, within the buffer.
            let data = unsafe { libc::CMSG_DATA(c) } as usize;
            // SAFETY: CMSG_LEN is arithmetic only.
            let len = (h.cmsg_len as usize).saturating_sub(unsafe { libc::CMSG_LEN(0) } as usize);
            let n = len.min(end.saturating_sub(data)) / std::mem::size_of::<c_int>();
            for i in 0..n {
                // SAFETY: within the kernel-written data (bounded by both
                // cmsg_len and the buffer's end); it may be unaligned.
                let fd = unsafe { std::ptr::read_unaligned((data as *const c_int).add(i)) };
                rt::opened(fd);
            }
        }
        // SAFETY: as CMSG_FIRSTHDR; returns null past the buffer's end.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
}

/// `recvmsg`: the call unchanged; the descriptors it received get their
/// class ([`received`]).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    let Some(real) = real_fn!(c"recvmsg", fn(c_int, *mut libc::msghdr, c_int) -> ssize_t) else {
        return nosys() as ssize_t;
    };
    // SAFETY: the caller's arguments, unchanged, to the real recvmsg.
    let r = unsafe { real(fd, msg, flags) };
    if r >= 0 {
        // SAFETY: recvmsg succeeded, so `msg` is the header it filled.
        unsafe { received(msg) };
    }
    r
}

/// `recvmmsg`: the call unchanged; the descriptors each received message
/// carried get their class ([`received`]).
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    let Some(real) = real_fn!(
        c"recvmmsg",
        fn(c_int, *mut libc::mmsghdr, c_uint, c_int, *mut libc::timespec) -> c_int
    ) else {
        return nosys();
    };
    // SAFETY: the caller's arguments, unchanged, to the real recvmmsg.
    let r = unsafe { real(fd, msgs, vlen, flags, timeout) };
    for i in 0..usize::try_from(r).unwrap_or(0) {
        // SAFETY: recvmmsg filled the first `r` (≤ vlen) headers of `msgs`.
        unsafe { received(&(*msgs.add(i)).msg_hdr) };
    }
    r
}

fd_pair_hook!(pipe, c"pipe", fds, (fds: *mut c_int));
fd_pair_hook!(pipe2, c"pipe2", fds, (fds: *mut c_int, flags: c_int));
fd_pair_hook!(socketpair, c"socketpair", fds, (domain: c_int, ty: c_int, proto: c_int, fds: *mut c_int));

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    let Some(real) = real_fn!(c"opendir", fn(*const c_char) -> *mut libc::DIR) else {
        nosys();
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's argument to the real opendir.
    let d = unsafe { real(path) };
    if !d.is_null() {
        let e = rt::errno();
        // SAFETY: `d` is the valid directory stream just returned.
        fdtable::set(unsafe { libc::dirfd(d) }, 0);
        rt::set_errno(e);
    }
    d
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    let Some(real) = real_fn!(c"closedir", fn(*mut libc::DIR) -> c_int) else {
        return nosys();
    };
    let fd = if d.is_null() {
        -1
    } else {
        let e = rt::errno();
        // SAFETY: the caller passes a valid directory stream.
        let fd = unsafe { libc::dirfd(d) };
        rt::set_errno(e);
        fd
    };
    // SAFETY: the caller's argument to the real closedir.
    let r = unsafe { real(d) };
    fdtable::set(fd, 0);
    r
}

// ------------------------------------------------------------ thread names
// A policy's `[criticality] threads` marks threads critical by name: these
// calls are where names are given.

#[no_mangle]
pub unsafe extern "C" fn pthread_setname_np(thread: libc::pthread_t, name: *const c_char) -> c_int {
    let Some(real) = real_fn!(
        c"pthread_setname_np",
        fn(libc::pthread_t, *const c_char) -> c_int
    ) else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller's arguments, unchanged.
    let r = unsafe { real(thread, name) };
    if r == 0 && !name.is_null() {
        // SAFETY: pthread_self has no preconditions.
        if thread == unsafe { libc::pthread_self() } {
            // SAFETY: the name the real call accepted is NUL-terminated.
            rt::thread_named_self(unsafe { CStr::from_ptr(name) });
        } else {
            rt::thread_named_other();
        }
    }
    r
}

// prctl is variadic: its optional arguments are unsigned longs, passed on in
// the registers they arrived in (as for fcntl above).
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: c_int,
    a2: c_ulong,
    a3: c_ulong,
    a4: c_ulong,
    a5: c_ulong,
) -> c_int {
    let Some(real) = real_fn!(c"prctl", fn(c_int; ...) -> c_int) else {
        return nosys();
    };
    // SAFETY: the caller's arguments to the real variadic prctl.
    let r = unsafe { real(option, a2, a3, a4, a5) };
    if r == 0 && option == libc::PR_SET_NAME && a2 != 0 {
        // PR_SET_NAME copies at most 16 bytes, NUL-terminated by the kernel:
        // read the name back from the kernel rather than trust the buffer.
        let mut buf = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes to `buf`.
        let got = unsafe {
            real(
                libc::PR_GET_NAME,
                buf.as_mut_ptr() as c_ulong,
                0 as c_ulong,
                0 as c_ulong,
                0 as c_ulong,
            )
        };
        if got == 0 {
            if let Ok(name) = CStr::from_bytes_until_nul(&buf) {
                rt::thread_named_self(name);
            }
        }
        // The real PR_GET_NAME leaves errno alone on success.
    }
    r
}
