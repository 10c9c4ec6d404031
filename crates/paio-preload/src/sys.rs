//! System calls made with the CPU's system-call instruction, not through
//! libc: for `mmap`, which this library both interposes and needs itself,
//! and which allocators call before anything may be looked up (no `dlsym`,
//! no allocation, no errno: results are the kernel's, `-errno` on failure).

use std::ffi::{c_int, c_long, c_void};

/// `mmap(2)`: the address, or `-errno`.
///
/// # Safety
/// As `mmap(2)`: a mapping over `addr` with `MAP_FIXED` replaces what was
/// there.
#[inline]
pub(crate) unsafe fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: i64,
) -> isize {
    // SAFETY: the caller's contract; `as usize` sign-extends `fd` and
    // `offset`, as the kernel reads them.
    unsafe {
        syscall6(
            libc::SYS_mmap,
            [
                addr as usize,
                len,
                prot as usize,
                flags as usize,
                fd as usize,
                offset as usize,
            ],
        )
    }
}

/// `fstat(2)` into `st`: 0, or `-errno`.
pub(crate) fn fstat(fd: c_int, st: &mut std::mem::MaybeUninit<libc::stat>) -> isize {
    // SAFETY: `st` is a valid out-pointer for one `struct stat`.
    unsafe {
        syscall6(
            libc::SYS_fstat,
            [fd as usize, st.as_mut_ptr() as usize, 0, 0, 0, 0],
        )
    }
}

/// `n` in decimal digits, written at the end of `buf`: the digits, for
/// building `/proc` paths with no allocation.
pub(crate) fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut d = buf.len();
    loop {
        d -= 1;
        buf[d] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[d..];
        }
    }
}

/// Whether a raw result is an error (`-4095..=-1`).
#[inline]
pub(crate) fn failed(r: isize) -> bool {
    (-4095..0).contains(&r)
}

#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) unsafe fn syscall6(n: c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux system-call convention: number in rax,
    // arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11 are clobbered.
    // The caller's contract covers what the call itself does.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
#[inline]
pub(crate) unsafe fn syscall6(n: c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the AArch64 Linux system-call convention: number in x8,
    // arguments in x0-x5, result in x0. The caller's contract covers what
    // the call itself does.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        );
    }
    ret
}
