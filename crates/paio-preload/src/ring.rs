//! Rings for the pieces of split calls: io_uring instances through which
//! the interposer keeps several pieces of one direct call in flight at once
//! ([`crate::rt`]'s concurrent split), as FastResponse's scheduler queues a
//! request's pieces together.
//!
//! - A process has at most [`RINGS`] rings, made when first needed and kept
//!   for its life. A call takes a free one for its whole duration and
//!   returns it with nothing in flight; it never waits for one (with none
//!   free, its pieces go one after another, as without rings).
//! - A ring's descriptor is moved to [`FD_FLOOR`] or above, away from the
//!   low numbers a program reuses, and the program's `close`, `close_range`
//!   and `closefrom` pass over it ([`is_ring_fd`], [`crate::hooks`]): a
//!   program closing every descriptor it did not open does not take it. A
//!   ring whose submission fails anyway is abandoned (never closed: its
//!   number may be the program's by then); the call drains what it had in
//!   flight and goes on piece after piece.
//! - After `fork` the child makes rings of its own; the parent's stay
//!   untouched in it.
//! - When the kernel refuses io_uring (ENOSYS, EPERM from a seccomp filter
//!   or `kernel.io_uring_disabled`), the process says so once on stderr and
//!   split calls issue their pieces one after another.
//! - System calls are made directly (io-uring's `direct-syscall`), not
//!   through libc's `syscall`, which this library interposes.

use std::ffi::c_int;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use io_uring::{opcode, types, IoUring};

use crate::rt;

/// Most rings per process: more calls than this splitting at once issue
/// their pieces one after another.
const RINGS: usize = 8;

/// Most pieces one call keeps in flight (the ring's size).
pub(crate) const MAX_IN_FLIGHT: usize = 16;

/// A ring's descriptor is moved to the lowest free number at or above this.
const FD_FLOOR: c_int = 512;

struct Ring {
    uring: IoUring,
    /// The process that made it (a forked child makes its own).
    pid: u32,
}

static POOL: [Mutex<Option<Ring>>; RINGS] = [const { Mutex::new(None) }; RINGS];

/// The descriptors of this process's rings, for the close hooks.
static FDS: [AtomicI32; RINGS] = [const { AtomicI32::new(-1) }; RINGS];

/// Set once the kernel refused io_uring or a ring failed: no ring is made
/// again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether `fd` is one of the interposer's ring descriptors (the close
/// hooks leave it open).
#[inline]
pub(crate) fn is_ring_fd(fd: c_int) -> bool {
    fd >= FD_FLOOR && FDS.iter().any(|f| f.load(Ordering::Relaxed) == fd)
}

/// The ring descriptors at or above `first` and at most `last`, ascending
/// (`-1` fills the rest).
pub(crate) fn ring_fds_in(first: c_int, last: c_int) -> [c_int; RINGS] {
    let mut out = [-1; RINGS];
    let mut n = 0;
    for f in &FDS {
        let fd = f.load(Ordering::Relaxed);
        if fd >= first && fd <= last && fd >= 0 {
            out[n] = fd;
            n += 1;
        }
    }
    out[..n].sort_unstable();
    out
}

/// A ring held by the calling thread for one call.
pub(crate) struct Held {
    slot: usize,
    guard: MutexGuard<'static, Option<Ring>>,
}

/// Why a submission or wait failed.
pub(crate) struct Broken;

/// A free ring of this process, made if needed; `None` when none is free
/// or io_uring is unavailable.
pub(crate) fn take() -> Option<Held> {
    if REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    let pid = std::process::id();
    let mut free = None;
    for (slot, m) in POOL.iter().enumerate() {
        let guard = match m.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => continue,
        };
        match &*guard {
            Some(r) if r.pid == pid => return Some(Held { slot, guard }),
            _ if free.is_none() => free = Some((slot, guard)),
            _ => {}
        }
    }
    let (slot, mut guard) = free?;
    // The parent's ring, in a forked child: left as it is.
    if let Some(old) = guard.take() {
        std::mem::forget(old);
    }
    match make(pid) {
        Ok((ring, fd)) => {
            FDS[slot].store(fd, Ordering::Relaxed);
            *guard = Some(ring);
            Some(Held { slot, guard })
        }
        Err(e) => {
            refused(&e);
            None
        }
    }
}

/// Makes a ring whose descriptor is at [`FD_FLOOR`] or above when the
/// process may have one there; returns it with its descriptor.
fn make(pid: u32) -> io::Result<(Ring, c_int)> {
    let first = IoUring::new(MAX_IN_FLIGHT as u32)?;
    let low = std::os::fd::AsRawFd::as_raw_fd(&first);
    // SAFETY: F_DUPFD_CLOEXEC takes an int argument.
    let high = unsafe { libc::fcntl(low, libc::F_DUPFD_CLOEXEC, FD_FLOOR) };
    if high < 0 {
        return Ok((Ring { uring: first, pid }, low));
    }
    let params = first.params().clone();
    // Unmaps the first mapping and closes `low`; `high` keeps the ring.
    drop(first);
    // SAFETY: `high` is a descriptor of the io_uring instance whose
    // parameters the kernel filled in `params`, owned by nothing else.
    let uring = unsafe { IoUring::from_fd(high, params) }?;
    Ok((Ring { uring, pid }, high))
}

/// io_uring is unavailable to this process: say so once.
fn refused(e: &io::Error) {
    let refused = matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS | libc::EPERM | libc::EACCES)
    );
    if refused && !REFUSED.swap(true, Ordering::Relaxed) {
        rt::raw_stderr(&format!(
            "paio: process {}: io_uring is unavailable ({e}): pieces of split direct calls \
             are issued one after another (docs/criticality.md)\n",
            std::process::id()
        ));
    }
}

impl Held {
    fn ring(&mut self) -> &mut IoUring {
        &mut self.guard.as_mut().expect("a held slot has a ring").uring
    }

    /// Submits a positional read (`write` false) into, or write from, the
    /// `len` bytes at `buf`, at `offset` of `fd`, tagged `tag`.
    ///
    /// # Safety
    /// The `len` bytes at `buf` stay valid (writable for a read) until the
    /// piece's completion is reaped.
    pub(crate) unsafe fn submit(
        &mut self,
        fd: c_int,
        write: bool,
        buf: *mut u8,
        len: u32,
        offset: u64,
        tag: u64,
    ) -> Result<(), Broken> {
        let entry = if write {
            opcode::Write::new(types::Fd(fd), buf, len)
                .offset(offset)
                .build()
        } else {
            opcode::Read::new(types::Fd(fd), buf, len)
                .offset(offset)
                .build()
        }
        .user_data(tag);
        let ring = self.ring();
        // SAFETY: the caller keeps the buffer valid until completion.
        if unsafe { ring.submission().push(&entry) }.is_err() {
            return Err(Broken);
        }
        loop {
            let r = ring.submit();
            // Taken by the kernel: it will complete. Not taken after a
            // failure: it never will, as the ring is not entered again.
            if ring.submission().is_empty() {
                return Ok(());
            }
            match r {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                _ => return Err(Broken),
            }
        }
    }

    /// Waits until at least one completion is in, then hands each `(tag,
    /// result)` to `f` (result: bytes moved, or `-errno`).
    pub(crate) fn wait(&mut self, mut f: impl FnMut(u64, i32)) -> Result<(), Broken> {
        let ring = self.ring();
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                    if !ring.completion().is_empty() {
                        break;
                    }
                }
                Err(_) => return Err(Broken),
            }
        }
        for cqe in ring.completion() {
            f(cqe.user_data(), cqe.result());
        }
        Ok(())
    }

    /// After [`Broken`]: waits without system calls on the ring for the
    /// `in_flight` pieces already submitted (their buffers are the
    /// caller's), handing each completion to `f`, then abandons the ring.
    pub(crate) fn abandon(mut self, mut in_flight: usize, mut f: impl FnMut(u64, i32)) {
        let ring = self.ring();
        while in_flight > 0 {
            let mut cq = ring.completion();
            cq.sync();
            for cqe in &mut cq {
                f(cqe.user_data(), cqe.result());
                in_flight -= 1;
            }
            drop(cq);
            if in_flight > 0 {
                // Any system call runs the task work that posts completions.
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        FDS[self.slot].store(-1, Ordering::Relaxed);
        // Never closed: its descriptor may be the program's by now. No ring
        // is made again, so at most one descriptor is left behind.
        if let Some(r) = self.guard.take() {
            std::mem::forget(r);
        }
        if !REFUSED.swap(true, Ordering::Relaxed) {
            rt::raw_stderr(&format!(
                "paio: process {}: an io_uring submission failed: pieces of split direct \
                 calls are issued one after another from now on (docs/criticality.md)\n",
                std::process::id()
            ));
        }
    }
}
