//! Where each stream's buffer stood when the library last saw it.
//!
//! glibc's `<stdio.h>` inlines `getc_unlocked`, `putc_unlocked` and their
//! kin into optimized programs: they move bytes through a stream's buffer
//! with no call at all, and call `__uflow`/`__overflow` only when the
//! buffer is empty or full (coreutils' `cut` reads and writes only so). The
//! bytes between two calls the library sees are the distance the buffer's
//! pointers moved in between, so each stream's pointers are kept here after
//! every call the library sees on it.
//!
//! A fixed table of [`SLOTS`] entries keyed by the stream's address, with no
//! allocation and no lock: a stream takes the first free entry among the
//! [`PROBE`] its address hashes to, and leaves it at `fclose`. A stream
//! that finds none of them free is not tracked (its inline bytes are not
//! counted; its calls carry their bytes on the thread), and is remembered
//! in [`ORPHANS`] so that, given an entry later (other streams closed),
//! it counts nothing of what its buffer held then: those bytes were counted
//! by its calls. An entry is written under its stream's lock (or by the one
//! thread that uses it, the `_unlocked` calls' contract); its fields are
//! atomics, so a program breaking that contract gets wrong counts, never
//! undefined behaviour in the library.
//!
//! Beside the marks, each entry owes the bytes the program pushed back
//! with `ungetc` since: the next that many bytes it takes from the stream
//! came from the kernel before (or never, when it pushed back bytes of its
//! own), so they are not counted again, whether glibc put them back in the
//! buffer or in its separate backup area.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::FILE;

/// Entries in the table: streams tracked at once (at most; fewer when
/// addresses collide).
pub(crate) const SLOTS: usize = 512;

/// Entries a stream may take: the one its address hashes to and the next
/// `PROBE - 1`.
pub(crate) const PROBE: usize = 8;

/// A stream's buffer pointers (glibc's `struct _IO_FILE`) as addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    /// Next byte the program reads.
    pub(crate) read_ptr: usize,
    /// End of the bytes read ahead.
    pub(crate) read_end: usize,
    /// Start of the read buffer.
    pub(crate) read_base: usize,
    /// Start of the output not yet written to the kernel.
    pub(crate) write_base: usize,
    /// Where the program's next output byte goes.
    pub(crate) write_ptr: usize,
}

impl Marks {
    /// Bytes of output waiting in the buffer.
    pub(crate) fn pending(&self) -> usize {
        self.write_ptr.saturating_sub(self.write_base)
    }

    /// Bytes read and written through the buffer since `last` (as
    /// `[read, written]`), with no call seen in between. When the buffer
    /// changed unseen (a first sight, a refill or flush by a call the
    /// library does not see), what the current buffer shows: the bytes
    /// taken from it and the output waiting in it.
    pub(crate) fn since(&self, last: &Marks) -> [u64; 2] {
        let read = if last.read_end == self.read_end && last.read_ptr <= self.read_ptr {
            self.read_ptr - last.read_ptr
        } else {
            self.read_ptr.saturating_sub(self.read_base)
        };
        let written = if last.write_base == self.write_base && last.write_ptr <= self.write_ptr {
            self.write_ptr - last.write_ptr
        } else {
            self.pending()
        };
        [read as u64, written as u64]
    }
}

/// One stream's entry: its address (0 when free), its marks and the bytes
/// pushed back it owes.
struct Slot {
    key: AtomicUsize,
    /// Taken by a stream that was not tracked before: its first sight
    /// counts nothing ([`Entry::saw`]).
    adopted: AtomicBool,
    owed: AtomicUsize,
    read_ptr: AtomicUsize,
    read_end: AtomicUsize,
    read_base: AtomicUsize,
    write_base: AtomicUsize,
    write_ptr: AtomicUsize,
}

impl Slot {
    const fn free() -> Slot {
        Slot {
            key: AtomicUsize::new(0),
            adopted: AtomicBool::new(false),
            owed: AtomicUsize::new(0),
            read_ptr: AtomicUsize::new(0),
            read_end: AtomicUsize::new(0),
            read_base: AtomicUsize::new(0),
            write_base: AtomicUsize::new(0),
            write_ptr: AtomicUsize::new(0),
        }
    }

    fn load(&self) -> Marks {
        Marks {
            read_ptr: self.read_ptr.load(Ordering::Relaxed),
            read_end: self.read_end.load(Ordering::Relaxed),
            read_base: self.read_base.load(Ordering::Relaxed),
            write_base: self.write_base.load(Ordering::Relaxed),
            write_ptr: self.write_ptr.load(Ordering::Relaxed),
        }
    }

    fn store(&self, m: &Marks) {
        self.read_ptr.store(m.read_ptr, Ordering::Relaxed);
        self.read_end.store(m.read_end, Ordering::Relaxed);
        self.read_base.store(m.read_base, Ordering::Relaxed);
        self.write_base.store(m.write_base, Ordering::Relaxed);
        self.write_ptr.store(m.write_ptr, Ordering::Relaxed);
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::free() }; SLOTS];

/// The first of the [`PROBE`] entries `key` may take.
#[inline]
fn home(key: usize) -> usize {
    // Fibonacci hashing of the address (FILEs are 8-aligned and ~0.5 KiB
    // apart: the low bits carry little).
    ((key as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros()))
        as usize
}

/// `stream`'s entry, taken now if it has none; `None` if all its entries
/// belong to other streams (its inline bytes are then not counted). Looked
/// up once per call the library sees.
#[inline]
pub(crate) fn entry(stream: *mut FILE) -> Option<Entry> {
    let key = stream as usize;
    let h = home(key);
    let mut free = None;
    for i in 0..PROBE {
        let s = &TABLE[(h + i) % SLOTS];
        match s.key.load(Ordering::Relaxed) {
            k if k == key => return Some(Entry(s)),
            0 if free.is_none() => free = Some(s),
            _ => {}
        }
    }
    let Some(s) = free else {
        untracked(key);
        return None;
    };
    // Another thread may take the same free entry first (for another
    // stream, or this one from a thread breaking the stream's lock).
    s.key
        .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
        .ok()?;
    s.store(&Marks::default());
    s.owed.store(0, Ordering::Relaxed);
    s.adopted.store(unorphan(key), Ordering::Relaxed);
    Some(Entry(s))
}

/// Streams that found no entry, while they stay open (0: free): a table
/// like [`TABLE`], a stream in one of the [`PROBE`] places its address
/// hashes to. A stream that finds those taken too is not remembered: given
/// an entry later, it counts its buffer's bytes a second time (at most a
/// buffer's worth).
static ORPHANS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

/// The places stream `key` may take among [`ORPHANS`].
fn orphan_places(key: usize) -> impl Iterator<Item = &'static AtomicUsize> {
    let h = home(key);
    (0..PROBE).map(move |i| &ORPHANS[(h + i) % SLOTS])
}

/// Remembers stream `key` as not tracked (once).
#[cold]
fn orphan(key: usize) {
    if orphan_places(key).any(|o| o.load(Ordering::Relaxed) == key) {
        return;
    }
    for o in orphan_places(key) {
        if o.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Forgets stream `key` as not tracked; whether it was.
fn unorphan(key: usize) -> bool {
    let mut was = false;
    for o in orphan_places(key) {
        if o.load(Ordering::Relaxed) == key {
            o.store(0, Ordering::Relaxed);
            was = true;
        }
    }
    was
}

/// Set once the process was told that a stream could not be tracked.
static UNTRACKED_SAID: AtomicBool = AtomicBool::new(false);

/// Stream `key` found all its entries taken: remember it, and say so once
/// per process.
#[cold]
fn untracked(key: usize) {
    orphan(key);
    if !UNTRACKED_SAID.swap(true, Ordering::Relaxed) {
        crate::rt::raw_stderr(&format!(
            "paio: process {} has more stdio streams open than the interposer tracks \
             ({SLOTS} at most): the bytes of some are counted inexactly, those \
             <stdio.h>'s inline macros move not at all (docs/preload.md)\n",
            std::process::id()
        ));
    }
}

/// One stream's entry in the table.
#[derive(Clone, Copy)]
pub(crate) struct Entry(&'static Slot);

impl Entry {
    /// A call the library saw on the stream, which found its buffer at
    /// `before` and left it at `after`: returns the bytes moved through the
    /// buffer since the library last saw it (`[read, written]`, see
    /// [`Marks::since`]; bytes pushed back and read again are taken off,
    /// [`Entry::settle`]), and keeps `after`.
    #[inline]
    pub(crate) fn saw(self, before: &Marks, after: &Marks) -> [u64; 2] {
        let [read, written] = if self.0.adopted.load(Ordering::Relaxed) {
            self.0.adopted.store(false, Ordering::Relaxed);
            [0, 0]
        } else {
            before.since(&self.0.load())
        };
        self.0.store(after);
        [self.settle(read), written]
    }

    /// Of `read` bytes the program took from the stream, those not read
    /// before: the first ones pay off what the entry owes for bytes pushed
    /// back ([`Entry::pushed_back`]).
    #[inline]
    pub(crate) fn settle(self, read: u64) -> u64 {
        let owed = self.0.owed.load(Ordering::Relaxed);
        if owed == 0 {
            return read;
        }
        let paid = (owed as u64).min(read);
        self.0.owed.store(owed - paid as usize, Ordering::Relaxed);
        read - paid
    }

    /// The program pushed a byte back (`ungetc`): the next byte it takes
    /// is not counted.
    pub(crate) fn pushed_back(self) {
        self.0.owed.fetch_add(1, Ordering::Relaxed);
    }

    /// The stream's pushed-back bytes were discarded (`fseek`, `rewind`).
    pub(crate) fn discard_pushed_back(self) {
        self.0.owed.store(0, Ordering::Relaxed);
    }

    /// Keeps `now` as the last seen marks, counting nothing: after a call
    /// that moved the buffer in a way [`Marks::since`] cannot tell
    /// (`fflush(NULL)` flushing it back to where it was).
    pub(crate) fn reset(self, now: &Marks) {
        self.0.store(now);
        self.0.adopted.store(false, Ordering::Relaxed);
    }

    /// Frees the entry (its stream is being closed).
    pub(crate) fn free(self) {
        self.0.key.store(0, Ordering::Relaxed);
    }
}

/// Frees `stream`'s entry (it is being closed, or reopened on another
/// file).
pub(crate) fn forget(stream: *mut FILE) {
    let key = stream as usize;
    unorphan(key);
    let h = home(key);
    for i in 0..PROBE {
        let s = &TABLE[(h + i) % SLOTS];
        if s.key.load(Ordering::Relaxed) == key {
            s.key.store(0, Ordering::Relaxed);
        }
    }
}

/// Frees every entry (`fcloseall`).
pub(crate) fn forget_all() {
    for s in &TABLE {
        s.key.store(0, Ordering::Relaxed);
    }
    for o in &ORPHANS {
        o.store(0, Ordering::Relaxed);
    }
}
