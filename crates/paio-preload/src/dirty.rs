//! The bound on non-critical writers' dirty data (RCP §4.3, the caching
//! layer), configured by [`paio::criticality::DirtyLimits`].
//!
//! A non-critical buffered write of `n` bytes to a regular file adds `n` to
//! the descriptor's pending count and to the process's. When the file's
//! pending bytes reach half of `per_file`, or the process's reach half of
//! `per_process`, the writer writes the file back
//! (`sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE |
//! SYNC_FILE_RANGE_WRITE)`): it waits for the write-back it started the
//! time before, starts this one and goes on, and the pending counts drop by
//! what the file had. The device always has one half-bound of the writer's
//! data to write while the next half fills; a file's dirty data (half
//! dirty, half being written) so stays below `per_file`, and the writer
//! goes at the pace the device takes its data instead of filling the page
//! cache at memory speed and leaving the kernel a burst to write later, in
//! a critical `fsync`'s way. (Starting the write-back without waiting for
//! any was tried first: the writer ran ahead of the device, and critical
//! commits next to it lost at p99 what they gained at p99.9.)
//!
//! Without `overlap` (`dirty_overlap = false`) the flags add
//! `SYNC_FILE_RANGE_WAIT_AFTER`: the writer waits until this write-back is
//! on the device, so at most half the bound is in an `fsync`'s way, and the
//! device idles while the writer fills the next half (at a measured cost of
//! 10–40 % of its throughput).
//!
//! The write-back is a request of the stage (a `sync_file_range` of size
//! 0, non-critical): a priority object holds it, and so the writer, while
//! critical I/O is active, here or in another process.
//!
//! Not bounded: critical writes, `O_DIRECT` descriptors (no page cache),
//! descriptors that are not regular files, and memory-mapped writes (never
//! seen). The pending count is per descriptor: two descriptors of one file
//! count apart, and the process bound covers both.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use paio::criticality::DirtyLimits;

use crate::fdtable;

/// A descriptor's word: its kind in the top two bits, pending bytes below.
const KIND: u64 = 3 << 62;
const TRACKED: u64 = 1 << 62;
const SKIPPED: u64 = 2 << 62;
const PENDING: u64 = !KIND;

static ON: AtomicBool = AtomicBool::new(false);
/// Pending bytes of one file that start its write-back (0: no bound).
static FILE_TRIGGER: AtomicU64 = AtomicU64::new(0);
/// Pending bytes of the process that start a write-back (0: no bound).
static PROCESS_TRIGGER: AtomicU64 = AtomicU64::new(0);
static PROCESS_PENDING: AtomicU64 = AtomicU64::new(0);
/// The `sync_file_range` flags of a write-back ([`DirtyLimits::overlap`]).
static FLAGS: AtomicU32 = AtomicU32::new(WAIT_ALL);

const WAIT_ALL: u32 = libc::SYNC_FILE_RANGE_WAIT_BEFORE
    | libc::SYNC_FILE_RANGE_WRITE
    | libc::SYNC_FILE_RANGE_WAIT_AFTER;
const WAIT_PREVIOUS: u32 = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE;
/// Write-backs started.
static WRITEBACKS: AtomicU64 = AtomicU64::new(0);

/// Adopts the policy's bounds (once per stage built).
pub(crate) fn configure(limits: DirtyLimits) {
    FILE_TRIGGER.store(
        limits.per_file.map_or(0, |b| (b / 2).max(1)),
        Ordering::Relaxed,
    );
    PROCESS_TRIGGER.store(
        limits.per_process.map_or(0, |b| (b / 2).max(1)),
        Ordering::Relaxed,
    );
    let flags = if limits.overlap {
        WAIT_PREVIOUS
    } else {
        WAIT_ALL
    };
    FLAGS.store(flags, Ordering::Relaxed);
    ON.store(limits.is_on(), Ordering::Release);
}

/// Write-backs this process started for the bound.
pub(crate) fn writebacks() -> u64 {
    WRITEBACKS.load(Ordering::Relaxed)
}

/// A non-critical write moved `bytes` bytes to `fd` (library work: called
/// under the depth guard, which restores errno). Whether a bound is reached:
/// the caller then calls [`write_back`].
#[inline]
pub(crate) fn wrote(fd: libc::c_int, bytes: u64) -> bool {
    if bytes == 0 || !ON.load(Ordering::Relaxed) {
        return false;
    }
    let Some(word) = fdtable::dirty(fd) else {
        return false;
    };
    let mut w = word.load(Ordering::Relaxed);
    if w & KIND == 0 {
        w = classify(fd, word);
    }
    if w & KIND != TRACKED {
        return false;
    }
    let pending = (word.fetch_add(bytes, Ordering::Relaxed) & PENDING) + bytes;
    let total = PROCESS_PENDING.fetch_add(bytes, Ordering::Relaxed) + bytes;
    let over = |trigger: &AtomicU64, n: u64| {
        let t = trigger.load(Ordering::Relaxed);
        t != 0 && n >= t
    };
    over(&FILE_TRIGGER, pending) || over(&PROCESS_TRIGGER, total)
}

/// Whether `fd` is a regular file without `O_DIRECT`; recorded in `word`.
#[cold]
fn classify(fd: libc::c_int, word: &AtomicU64) -> u64 {
    // SAFETY: F_GETFL takes no third argument.
    let flags = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    let regular = crate::rt::file_kind(fd).map(|(kind, _)| kind) == Some(libc::S_IFREG);
    let kind = if flags >= 0 && flags as libc::c_int & libc::O_DIRECT == 0 && regular {
        TRACKED
    } else {
        SKIPPED
    };
    let _ = word.compare_exchange(0, kind, Ordering::Relaxed, Ordering::Relaxed);
    word.load(Ordering::Relaxed)
}

/// Writes `fd`'s file back: waits for its write-back in progress, starts
/// the next, waits for it unless the bound overlaps, and takes its pending
/// bytes off the counts.
#[cold]
pub(crate) fn write_back(fd: libc::c_int) {
    let Some(word) = fdtable::dirty(fd) else {
        return;
    };
    let took = word.fetch_and(!PENDING, Ordering::Relaxed) & PENDING;
    let _ = PROCESS_PENDING.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
        Some(p.saturating_sub(took))
    });
    WRITEBACKS.fetch_add(1, Ordering::Relaxed);
    // A raw system call: nothing of ours is interposed, errno is restored by
    // the caller's guard. Errors (EBADF after a race with close, EIO) only
    // mean no early write-back; the data stays the kernel's to write.
    // SAFETY: sync_file_range takes a descriptor, two offsets and flags.
    unsafe {
        libc::syscall(
            libc::SYS_sync_file_range,
            fd,
            0 as libc::off64_t,
            0 as libc::off64_t,
            FLAGS.load(Ordering::Relaxed),
        );
    }
}
