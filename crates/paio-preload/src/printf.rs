//! The printf family (`printf`, `fprintf`, `vfprintf`, `dprintf`, their
//! `_chk` forms, ...), charged as stdio calls ([`crate::stdio::call`]) or,
//! for the `dprintf` forms that write straight to a descriptor, as one
//! write after the call; and the scanf family (`fscanf`, `scanf`, their
//! `__isoc99_` forms and glibc 2.38's `__isoc23_` ones), charged as stdio
//! reads of what they took from the stream's buffer
//! ([`crate::stdio::scan`]).
//!
//! Stable Rust cannot define a variadic function, so the bodies are C
//! (csrc/printf.c, hidden in the library): each starts its argument list,
//! then calls back here with a closure-like `run` that formats with libc's
//! own `v*` function. This module exports them under libc's names: each
//! export is one jump to its C body, leaving arguments, registers and
//! stack exactly as the caller set them (a naked function).

use std::ffi::{c_int, c_void};

use libc::FILE;
use paio::RequestType;

use crate::rt;
use crate::stdio;

/// Formats one call (csrc/printf.c's `struct call`, opaque here).
type Run = unsafe extern "C" fn(*mut c_void) -> c_int;

type OnStream = unsafe extern "C" fn(*mut FILE, Run, *mut c_void) -> c_int;
type FdWrite = unsafe extern "C" fn(c_int, Run, *mut c_void) -> c_int;

extern "C" {
    /// Hands the C bodies the three functions below (hidden in the
    /// library).
    fn paio_c_printf_init(write: OnStream, to_fd: FdWrite, read: OnStream);
}

extern "C" fn init() {
    // SAFETY: the three functions have the C prototypes csrc/printf.c
    // declares for them.
    unsafe { paio_c_printf_init(stream_write, fd_write, stream_read) };
}

// As the library loads (not exported: no other code can call them).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// Runs the formatting call `call` onto `stream` through `run`, charged as
/// a stdio write of the bytes it returns (called by csrc/printf.c).
unsafe extern "C" fn stream_write(stream: *mut FILE, run: Run, call: *mut c_void) -> c_int {
    stdio::call(
        RequestType::WRITE,
        stream,
        stdio::Lock::Take,
        // Its length is known only once formatted.
        usize::MAX,
        // SAFETY: csrc/printf.c passes its own run function and call.
        || unsafe { run(call) },
        |&r| r as i64,
    )
}

/// Runs the scanning call `call` from `stream` through `run`, charged as a
/// stdio read of the bytes it took from the stream (called by
/// csrc/printf.c).
unsafe extern "C" fn stream_read(stream: *mut FILE, run: Run, call: *mut c_void) -> c_int {
    // SAFETY: csrc/printf.c passes its own run function and call.
    stdio::scan(stream, || unsafe { run(call) })
}

/// Runs the formatting call `call` onto descriptor `fd` through `run`,
/// charged as one write of the bytes it returns, after it (called by
/// csrc/printf.c).
unsafe extern "C" fn fd_write(fd: c_int, run: Run, call: *mut c_void) -> c_int {
    // SAFETY: csrc/printf.c passes its own run function and call.
    let r = unsafe { run(call) };
    rt::after_write(fd, r as i64);
    r
}

/// Exports `$name` as a jump to the hidden C function `$body`.
macro_rules! jump {
    ($name:ident, $body:ident) => {
        extern "C" {
            fn $body();
        }

        #[no_mangle]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {body}", body = sym $body);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {body}", body = sym $body);
        }
    };
}

jump!(printf, paio_c_printf);
jump!(fprintf, paio_c_fprintf);
jump!(vprintf, paio_c_vprintf);
jump!(vfprintf, paio_c_vfprintf);
jump!(__printf_chk, paio_c_printf_chk);
jump!(__fprintf_chk, paio_c_fprintf_chk);
jump!(__vprintf_chk, paio_c_vprintf_chk);
jump!(__vfprintf_chk, paio_c_vfprintf_chk);
jump!(dprintf, paio_c_dprintf);
jump!(vdprintf, paio_c_vdprintf);
jump!(__dprintf_chk, paio_c_dprintf_chk);
jump!(__vdprintf_chk, paio_c_vdprintf_chk);
jump!(fscanf, paio_c_fscanf);
jump!(scanf, paio_c_scanf);
jump!(vfscanf, paio_c_vfscanf);
jump!(vscanf, paio_c_vscanf);
jump!(__isoc99_fscanf, paio_c_isoc99_fscanf);
jump!(__isoc99_scanf, paio_c_isoc99_scanf);
jump!(__isoc99_vfscanf, paio_c_isoc99_vfscanf);
jump!(__isoc99_vscanf, paio_c_isoc99_vscanf);
jump!(__isoc23_fscanf, paio_c_isoc23_fscanf);
jump!(__isoc23_scanf, paio_c_isoc23_scanf);
jump!(__isoc23_vfscanf, paio_c_isoc23_vfscanf);
jump!(__isoc23_vscanf, paio_c_isoc23_vscanf);
