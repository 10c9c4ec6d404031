//! The fd → file class table: one `AtomicU16` per descriptor below
//! [`FDS`], lock-free, filled at open time and kept correct across
//! dup/dup2/dup3/fcntl(F_DUPFD)/close/close_range/fclose. A forked child
//! inherits it with its memory, exactly as it inherits the descriptors.
//! Class 0 means "no class"; class `i` (1-based) is the i-th name of
//! `PAIO_FILE_CLASSES`.
//!
//! Beside it, one word per descriptor for the dirty-data bound
//! ([`crate::dirty`]), reset to 0 whenever the descriptor's class is set
//! (open, close, dup): a new open file starts unknown.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

/// Descriptors at or above this number have no class.
pub(crate) const FDS: usize = 65536;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU16 = AtomicU16::new(0);
static TABLE: [AtomicU16; FDS] = [ZERO; FDS];
static DIRTY: [AtomicU64; FDS] = [const { AtomicU64::new(0) }; FDS];

/// The dirty-data word of `fd` ([`crate::dirty`]); `None` above [`FDS`].
#[inline]
pub(crate) fn dirty(fd: libc::c_int) -> Option<&'static AtomicU64> {
    usize::try_from(fd).ok().and_then(|i| DIRTY.get(i))
}

#[inline]
pub(crate) fn get(fd: libc::c_int) -> u16 {
    usize::try_from(fd)
        .ok()
        .and_then(|i| TABLE.get(i))
        .map_or(0, |c| c.load(Ordering::Relaxed))
}

#[inline]
pub(crate) fn set(fd: libc::c_int, class: u16) {
    if let Some(c) = usize::try_from(fd).ok().and_then(|i| TABLE.get(i)) {
        c.store(class, Ordering::Relaxed);
    }
    if let Some(d) = dirty(fd) {
        d.store(0, Ordering::Relaxed);
    }
}

/// `new` now refers to the same open file as `old`.
#[inline]
pub(crate) fn copy(old: libc::c_int, new: libc::c_int) {
    set(new, get(old));
}

/// Clears `first..=last` (close_range).
pub(crate) fn clear_range(first: libc::c_uint, last: libc::c_uint) {
    let first = first as usize;
    let last = (last as usize).min(FDS - 1);
    if first <= last {
        for c in &TABLE[first..=last] {
            c.store(0, Ordering::Relaxed);
        }
        for d in &DIRTY[first..=last] {
            d.store(0, Ordering::Relaxed);
        }
    }
}
