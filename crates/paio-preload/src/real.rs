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

#[cold]
fn resolve_slow(slot: &AtomicUsize, name: &CStr) -> usize {
    let saved = crate::rt::errno();
    // SAFETY: RTLD_NEXT is a valid pseudo-handle and `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
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
