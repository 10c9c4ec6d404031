//! One page of memory shared by one user's processes through a file: the
//! board of critical I/O ([`crate::board`]) and the buckets of shared limits
//! ([`crate::buckets`]). 64-bit words, all accessed atomically.
//!
//! The first process creates the file (`O_EXCL`, mode 0600), sizes it,
//! fills in the header and stores the magic word last; the others open it
//! (`O_NOFOLLOW`), check that it belongs to the user, is readable by nobody
//! else and is one page, and wait up to 100 ms for the magic: one user's
//! programs never read or slow another user's.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes in the page.
pub(crate) const SIZE: usize = 4096;
/// Words in the page.
pub(crate) const WORDS: usize = SIZE / 8;

/// What a page is for, for its checks and messages.
pub(crate) struct Kind {
    /// Its name in messages (`board`).
    pub(crate) what: &'static str,
    /// The variable that names its file (`PAIO_BOARD`).
    pub(crate) var: &'static str,
    /// Word 0 once the creator has filled in the header.
    pub(crate) magic: u64,
}

/// The words of the page at `path` (creating the file if needed, with
/// `init` filling in the header before the magic is stored); `check` says
/// whether an existing page's header is one this library can use. Errors
/// name the file and say how to go on.
pub(crate) fn open(
    path: &Path,
    kind: &Kind,
    init: impl FnOnce(&[AtomicU64]),
    check: impl FnOnce(&[AtomicU64]) -> bool,
) -> Result<&'static [AtomicU64], String> {
    let error = |what: &dyn std::fmt::Display| format!("{} {}: {what}", kind.what, path.display());
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| error(&"the path holds a NUL byte"))?;
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: a NUL-terminated path; libc's open, not this library's own
    // (the caller holds the guard anyway).
    let mut fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CREAT | libc::O_EXCL, 0o600) };
    let created = fd >= 0;
    if !created {
        // SAFETY: as above.
        fd = unsafe { libc::open(c.as_ptr(), flags) };
    }
    if fd < 0 {
        let e = io::Error::last_os_error();
        let fix = match e.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "it is a symbolic link, which is not followed (another user could point it \
                 at a file of theirs): set {} to the file itself",
                kind.var
            ),
            Some(libc::ENOENT) => format!(
                "its directory does not exist: create it, or set {} to a path in one that does",
                kind.var
            ),
            _ => format!("set {} to a file of your own", kind.var),
        };
        return Err(error(&format_args!("{e}; {fix}")));
    }
    let result = map(fd, created, kind, &error);
    // SAFETY: `fd` is ours; the mapping (if any) outlives it.
    unsafe { libc::close(fd) };
    let words = result?;
    if created {
        init(words);
        words[0].store(kind.magic, Ordering::Release);
        return Ok(words);
    }
    for _ in 0..100 {
        if words[0].load(Ordering::Acquire) == kind.magic {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    if words[0].load(Ordering::Acquire) != kind.magic || !check(words) {
        return Err(error(&format_args!(
            "not a paio {} of this version (an older paio's?): remove it",
            kind.what
        )));
    }
    Ok(words)
}

fn map(
    fd: libc::c_int,
    created: bool,
    kind: &Kind,
    error: &dyn Fn(&dyn std::fmt::Display) -> String,
) -> Result<&'static [AtomicU64], String> {
    if created {
        // SAFETY: `fd` is an open, writable file.
        if unsafe { libc::ftruncate(fd, SIZE as libc::off_t) } != 0 {
            return Err(error(&io::Error::last_os_error()));
        }
    } else {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
        // The creator may still be sizing it: wait up to 100 ms, but only
        // for a file that could be ours. Another user's file (or a FIFO,
        // or an open mode) is refused at once: squatted, it cost each of
        // the victim's processes 100 ms at its start.
        for _ in 0..100 {
            let r = crate::sys::fstat(fd, &mut st);
            if crate::sys::failed(r) {
                return Err(error(&io::Error::from_raw_os_error(-r as i32)));
            }
            // SAFETY: fstat filled it.
            let st = unsafe { st.assume_init_ref() };
            if st.st_uid != uid {
                return Err(error(&format_args!(
                    "owned by uid {}, not {uid}: remove it, or set {} to a file of your own",
                    st.st_uid, kind.var
                )));
            }
            if st.st_mode & 0o077 != 0 {
                return Err(error(&format_args!(
                    "mode {:o} lets other users in: remove it (it is created 0600)",
                    st.st_mode & 0o777
                )));
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(error(&format_args!(
                    "not a {SIZE}-byte regular file: remove it"
                )));
            }
            if st.st_size != 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: fstat filled it.
        if unsafe { st.assume_init() }.st_size != SIZE as libc::off_t {
            return Err(error(&format_args!(
                "not a {SIZE}-byte regular file: remove it"
            )));
        }
    }
    // SAFETY: a shared, read-write mapping of the whole (SIZE-byte) file
    // (directly: not through this library's own mmap, which looks at the
    // program's mappings); checked for failure below.
    let r = unsafe {
        crate::sys::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if crate::sys::failed(r) {
        return Err(error(&io::Error::from_raw_os_error(-r as i32)));
    }
    // SAFETY: the mapping is SIZE bytes, page-aligned (so aligned for u64),
    // never unmapped (it lives as long as the process), and every access to
    // it goes through these atomics: other processes write it concurrently,
    // which atomics allow.
    Ok(unsafe { std::slice::from_raw_parts(r as *const AtomicU64, WORDS) })
}
