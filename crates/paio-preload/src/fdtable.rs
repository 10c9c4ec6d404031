//! The fd → file class table: one `AtomicU16` per descriptor, lock-free,
//! filled at open time and kept correct across
//! dup/dup2/dup3/fcntl(F_DUPFD)/close/close_range/fclose. A forked child
//! inherits it with its memory, exactly as it inherits the descriptors.
//! Class 0 means "no class"; class `i` (1-based) is the i-th name of
//! `PAIO_FILE_CLASSES`.
//!
//! Beside it, one word per descriptor for the dirty-data bound
//! ([`crate::dirty`]), reset to 0 whenever the descriptor's class is set
//! (open, close, dup): a new open file starts unknown. The class word's top
//! two bits say what the descriptor is ([`kind_of`]: storage or a stream),
//! learnt at its first data call, reset with the class and copied by dup:
//! the data path reads both with one load.
//!
//! Every descriptor a process can have (0 to `c_int::MAX`) has its entries:
//! they live in chunks of [`CHUNK`] descriptors, mapped (zeroed, with a raw
//! `mmap`: no allocator, so safe in a signal handler and after `fork`) the
//! first time one of their descriptors needs a class, a kind or a dirty
//! word, and never unmapped. A process with descriptors below 4,096 maps one
//! chunk of 40 KiB; the table of chunk pointers is 4 MiB of untouched, unbacked
//! memory.

use std::sync::atomic::{AtomicPtr, AtomicU16, AtomicU64, AtomicUsize, Ordering};

/// Descriptors per chunk.
const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Chunks to cover every non-negative `c_int`.
const CHUNKS: usize = 1 << (31 - CHUNK_BITS);

/// The entries of [`CHUNK`] consecutive descriptors. All-zero is a valid
/// value (atomics of 0), which is what a fresh anonymous mapping holds.
struct Chunk {
    /// The class (low bits, [`MAX_CLASS`] at most) and the kind (the top
    /// two bits).
    class: [AtomicU16; CHUNK],
    dirty: [AtomicU64; CHUNK],
}

/// Where the kind starts in a class word.
const KIND_SHIFT: u32 = 14;
/// The largest class a descriptor can have.
pub(crate) const MAX_CLASS: u16 = (1 << KIND_SHIFT) - 1;

/// [`kind_of`]: storage (a regular file, a block device, anything not a
/// stream).
pub(crate) const KIND_STORAGE: u8 = 1;
/// [`kind_of`]: a stream (a pipe, a socket, a character device such as a
/// terminal), whose calls may wait for a peer rather than for storage.
pub(crate) const KIND_STREAM: u8 = 2;

static CHUNK_TABLE: [AtomicPtr<Chunk>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];
/// One more than the highest chunk index mapped: [`clear_range`] looks no
/// further.
static CHUNKS_USED: AtomicUsize = AtomicUsize::new(0);

/// The chunk of `fd` and its index in it, if mapped.
#[inline]
fn find(fd: libc::c_int) -> Option<(&'static Chunk, usize)> {
    let i = usize::try_from(fd).ok()?;
    let p = CHUNK_TABLE[i >> CHUNK_BITS].load(Ordering::Acquire);
    // SAFETY: a non-null pointer in the table is a mapping of one `Chunk`
    // that `map_chunk` published with Release (its zeroed contents are
    // visible through the Acquire load) and that is never unmapped.
    let chunk = unsafe { p.as_ref() }?;
    Some((chunk, i & (CHUNK - 1)))
}

/// The chunk of `fd` and its index in it, mapping the chunk if needed;
/// `None` for a negative `fd` or when the kernel refuses the mapping.
#[inline]
fn find_or_map(fd: libc::c_int) -> Option<(&'static Chunk, usize)> {
    match find(fd) {
        Some(found) => Some(found),
        None => map_chunk(usize::try_from(fd).ok()?),
    }
}

/// Maps the chunk of descriptor `i` and publishes it (another thread may
/// have published one first: that one is kept and this one unmapped).
#[cold]
fn map_chunk(i: usize) -> Option<(&'static Chunk, usize)> {
    let slot = &CHUNK_TABLE[i >> CHUNK_BITS];
    let size = std::mem::size_of::<Chunk>();
    // The caller's errno survives a refusal (glibc's `syscall` sets it).
    let saved = crate::rt::errno();
    // SAFETY: an anonymous private mapping of `size` bytes at an address
    // the kernel chooses; no existing memory is touched. A raw system call:
    // nothing of ours is interposed.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<libc::c_void>(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == -1 {
        crate::rt::set_errno(saved);
        no_memory();
        return None;
    }
    let new = p as *mut Chunk;
    let chunk = match slot.compare_exchange(
        std::ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => {
            CHUNKS_USED.fetch_max((i >> CHUNK_BITS) + 1, Ordering::Relaxed);
            new
        }
        Err(published) => {
            // SAFETY: `new` is the mapping made above, of `size` bytes,
            // never published, so nothing else refers to it.
            unsafe { libc::syscall(libc::SYS_munmap, new, size) };
            published
        }
    };
    // SAFETY: `chunk` is a published mapping of one zeroed `Chunk` (see
    // `find`), never unmapped.
    Some((unsafe { &*chunk }, i & (CHUNK - 1)))
}

/// The dirty-data word of `fd` ([`crate::dirty`]); `None` for a negative
/// descriptor or if the kernel refused memory for its chunk (said once).
#[inline]
pub(crate) fn dirty(fd: libc::c_int) -> Option<&'static AtomicU64> {
    find_or_map(fd).map(|(c, i)| &c.dirty[i])
}

/// The class word of `fd`: its class ([`class_of`]) and kind
/// ([`kind_of`]); 0 for a descriptor whose chunk is not mapped.
#[inline]
pub(crate) fn entry(fd: libc::c_int) -> u16 {
    find(fd).map_or(0, |(c, i)| c.class[i].load(Ordering::Relaxed))
}

/// The class of a class word (0: none).
#[inline]
pub(crate) fn class_of(entry: u16) -> u16 {
    entry & MAX_CLASS
}

/// What a class word says the descriptor is, as learnt at its first data
/// call ([`KIND_STORAGE`], [`KIND_STREAM`]; 0 until then).
#[inline]
pub(crate) fn kind_of(entry: u16) -> u8 {
    (entry >> KIND_SHIFT) as u8
}

/// Records what `fd` is, keeping its class.
#[inline]
pub(crate) fn set_kind(fd: libc::c_int, kind: u8) {
    if let Some((c, i)) = find_or_map(fd) {
        let _ = c.class[i].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(class_of(v) | u16::from(kind) << KIND_SHIFT)
        });
    }
}

/// The class of `fd` (0: none).
#[inline]
pub(crate) fn get(fd: libc::c_int) -> u16 {
    class_of(entry(fd))
}

/// `fd` now has class `class` (0: none; a class word's kind, if it holds
/// one, too) and an unknown dirty state.
#[inline]
pub(crate) fn set(fd: libc::c_int, class: u16) {
    // An unmapped chunk already holds 0 everywhere.
    let found = if class == 0 {
        find(fd)
    } else {
        find_or_map(fd)
    };
    if let Some((c, i)) = found {
        c.class[i].store(class, Ordering::Relaxed);
        c.dirty[i].store(0, Ordering::Relaxed);
    }
}

/// The kernel refused a chunk: said once per process.
#[cold]
fn no_memory() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::rt::raw_stderr(
            "paio: no memory for part of the descriptor table (mmap refused): some descriptors have no file class and no dirty-data bound\n",
        );
    }
}

/// `new` now refers to the same open file as `old`.
#[inline]
pub(crate) fn copy(old: libc::c_int, new: libc::c_int) {
    set(new, entry(old));
}

/// Clears `first..=last` (close_range).
pub(crate) fn clear_range(first: libc::c_uint, last: libc::c_uint) {
    let end = CHUNKS_USED.load(Ordering::Relaxed) << CHUNK_BITS;
    let (first, last) = (first as usize, (last as usize).min(end.saturating_sub(1)));
    let mut fd = first;
    while fd <= last {
        let chunk_end = (fd | (CHUNK - 1)).min(last);
        if let Some((c, i)) = find(fd as libc::c_int) {
            let j = i + (chunk_end - fd);
            for e in &c.class[i..=j] {
                e.store(0, Ordering::Relaxed);
            }
            for d in &c.dirty[i..=j] {
                d.store(0, Ordering::Relaxed);
            }
        }
        fd = chunk_end + 1;
    }
}
