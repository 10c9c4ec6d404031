//! Lazy lookup of the real libc functions (`dlsym(RTLD_NEXT, name)`).

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of the next definition of `name` after this library, cached
/// in `slot`; 0 if there is none.
#[inline]
pub(crate) fn resolve(slot: &AtomicUsize, name: &CStr) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    resolve_slow(slot, name)
}

/// As [`resolve`], for the definition of `name` at symbol version `version`
/// (`dlvsym`): for symbols libc defines in several versions, where
/// `dlsym` may not return the one programs link against.
#[inline]
pub(crate) fn resolve_version(slot: &AtomicUsize, name: &CStr, version: &CStr) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    resolve_slow_in(slot, name, Some(version))
}

#[cold]
fn resolve_slow(slot: &AtomicUsize, name: &CStr) -> usize {
    resolve_slow_in(slot, name, None)
}

#[cold]
fn resolve_slow_in(slot: &AtomicUsize, name: &CStr, version: Option<&CStr>) -> usize {
    let saved = crate::rt::errno();
    let p = match version {
        // SAFETY: RTLD_NEXT is a valid pseudo-handle; both strings are
        // NUL-terminated.
        Some(v) => unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), v.as_ptr()) },
        // SAFETY: RTLD_NEXT is a valid pseudo-handle and `name` is
        // NUL-terminated.
        None => unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) },
    } as usize;
    crate::rt::set_errno(saved);
    if p != 0 {
        slot.store(p, Ordering::Relaxed);
    }
    p
}

/// `real_fn!(c"read", fn(c_int, *mut c_void, size_t) -> ssize_t)`: the real
/// function as a typed pointer, or `None` if libc has no such symbol.
macro_rules! real_fn {
    ($sym:literal, fn($($t:ty),*) -> $r:ty) => {{
        static SLOT: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::real::resolve(&SLOT, $sym);
        if p == 0 {
            None
        } else {
            // SAFETY: `p` is the address dlsym returned for this symbol, whose
            // C prototype is the one written here (see the man page).
            Some(unsafe { ::std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) })
        }
    }};
    ($sym:literal, fn($($t:ty),* ; ...) -> $r:ty) => {{
        static SLOT: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::real::resolve(&SLOT, $sym);
        if p == 0 {
            None
        } else {
            // SAFETY: `p` is the address dlsym returned for this variadic
            // symbol, whose C prototype is the one written here.
            Some(unsafe { ::std::mem::transmute::<usize, unsafe extern "C" fn($($t),* , ...) -> $r>(p) })
        }
    }};
}
pub(crate) use real_fn;

/// `real_vfn!(c"pthread_cond_wait", c"GLIBC_2.3.2", fn(...) -> c_int)`: as
/// [`real_fn!`], at one symbol version.
macro_rules! real_vfn {
    ($sym:literal, $version:literal, fn($($t:ty),*) -> $r:ty) => {{
        static SLOT: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::real::resolve_version(&SLOT, $sym, $version);
        if p == 0 {
            None
        } else {
            // SAFETY: `p` is the address dlvsym returned for this symbol at
            // this version, whose C prototype is the one written here.
            Some(unsafe { ::std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) })
        }
    }};
}
pub(crate) use real_vfn;
