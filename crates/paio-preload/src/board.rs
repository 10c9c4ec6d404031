//! The shared board: critical I/O of one user's processes, visible to all of
//! them through one page of shared memory, so a background program's
//! priority objects hold back while another program's critical requests are
//! in flight, with no message and no system call on the request path
//! ([`paio::CriticalBoard`]; docs/criticality.md).
//!
//! The file is `$PAIO_BOARD`, else `/dev/shm/paio-<uid>-v2.board`: one page of
//! 64-bit words, all accessed atomically. The name carries the layout's
//! version, so a new layout never meets an older paio's board (a board
//! named explicitly in another layout is refused).
//!
//! | words | content |
//! |---|---|
//! | 0 | magic (`PAIOBRD2`), stored last by the creator |
//! | 1 | number of slots |
//! | 2 | critical requests in flight, all processes |
//! | 3 | `CLOCK_MONOTONIC` ns of the latest critical completion |
//! | 4 | pid of the process that completed it |
//! | 5 | `CLOCK_MONOTONIC` ns of the latest scan for dead processes |
//! | 6 | `shared_busy_depth` tokens taken, all processes |
//! | 8.. | slots of two words: pid; that process's critical requests in flight (low 32 bits) and tokens (high 32 bits) |
//!
//! Each process claims a slot (by pid) and counts its own requests and
//! tokens there as well as in the totals, so it can tell others' activity
//! from its own and so a process that dies with requests in flight or
//! tokens taken can be subtracted: when a total stays non-zero (critical
//! I/O of others, or a full pool), a reader checks at most once a second
//! which slot owners are gone (`kill(pid, 0)`) and takes their counts back.
//! A process that finds no free slot still counts in the totals (and is
//! then never reclaimed: the board has 252 slots).
//!
//! Trust: the file must belong to the user and be readable by nobody else
//! (created 0600 with `O_EXCL`, opened with `O_NOFOLLOW`, owner and mode
//! checked): one user's programs never slow another user's.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"PAIOBRD2");
const SIZE: usize = 4096;
const WORDS: usize = SIZE / 8;
const HEADER: usize = 8;
const SLOTS: usize = (WORDS - HEADER) / 2;
const W_MAGIC: usize = 0;
const W_SLOTS: usize = 1;
const W_INFLIGHT: usize = 2;
const W_LAST_NS: usize = 3;
const W_LAST_PID: usize = 4;
const W_SCAN_NS: usize = 5;
const W_TOKENS: usize = 6;

/// A slot's count word: critical requests in the low half, tokens in the
/// high half.
const ONE_TOKEN: u64 = 1 << 32;
const CRITICAL_MASK: u64 = ONE_TOKEN - 1;

/// Nanoseconds between two scans for dead processes.
const SCAN_EVERY_NS: u64 = 1_000_000_000;

/// The board of this process (see the module documentation).
#[derive(Debug)]
pub(crate) struct Board {
    words: &'static [AtomicU64],
    /// Index of this process's slot's first word, if it has one.
    slot: AtomicU64,
    pid: AtomicU64,
}

/// `CLOCK_MONOTONIC` in nanoseconds: one time line for every process.
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The time of clock `id` in nanoseconds, through libc (its vDSO path; the
/// interposer's clocks read time only this way).
pub(crate) fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The board's path: `$PAIO_BOARD`, else `/dev/shm/paio-<uid>-v2.board`.
pub(crate) fn default_path(env: Option<&str>) -> PathBuf {
    match env.filter(|s| !s.is_empty()) {
        Some(p) => PathBuf::from(p),
        // SAFETY: getuid has no preconditions.
        None => PathBuf::from(format!("/dev/shm/paio-{}-v2.board", unsafe {
            libc::getuid()
        })),
    }
}

fn error(path: &Path, what: impl std::fmt::Display) -> String {
    format!("board {}: {what}", path.display())
}

impl Board {
    /// Opens (creating if needed) the board at `path` and claims a slot.
    pub(crate) fn open(path: &Path) -> Result<Board, String> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| error(path, "the path holds a NUL byte"))?;
        let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        // SAFETY: a NUL-terminated path; raw syscalls avoid this library's
        // own `open` (the caller holds the guard anyway).
        let mut fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CREAT | libc::O_EXCL, 0o600) };
        let created = fd >= 0;
        if !created {
            // SAFETY: as above.
            fd = unsafe { libc::open(c.as_ptr(), flags) };
        }
        if fd < 0 {
            return Err(error(path, io::Error::last_os_error()));
        }
        let result = Self::map(path, fd, created);
        // SAFETY: `fd` is ours; the mapping (if any) outlives it.
        unsafe { libc::close(fd) };
        result
    }

    fn map(path: &Path, fd: libc::c_int, created: bool) -> Result<Board, String> {
        if created {
            // SAFETY: `fd` is an open, writable file.
            if unsafe { libc::ftruncate(fd, SIZE as libc::off_t) } != 0 {
                return Err(error(path, io::Error::last_os_error()));
            }
        } else {
            let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
            // The creator may still be sizing it: wait up to 100 ms.
            for _ in 0..100 {
                let r = crate::sys::fstat(fd, &mut st);
                if crate::sys::failed(r) {
                    return Err(error(path, io::Error::from_raw_os_error(-r as i32)));
                }
                // SAFETY: fstat filled it.
                if unsafe { st.assume_init_ref() }.st_size != 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // SAFETY: fstat filled it.
            let st = unsafe { st.assume_init() };
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            if st.st_uid != uid {
                return Err(error(
                    path,
                    format_args!(
                        "owned by uid {}, not {uid}: remove it, or set PAIO_BOARD to a file of your own",
                        st.st_uid
                    ),
                ));
            }
            if st.st_mode & 0o077 != 0 {
                return Err(error(
                    path,
                    format_args!(
                        "mode {:o} lets other users in: remove it (it is created 0600)",
                        st.st_mode & 0o777
                    ),
                ));
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_size != SIZE as libc::off_t {
                return Err(error(
                    path,
                    format_args!("not a {SIZE}-byte regular file: remove it"),
                ));
            }
        }
        // SAFETY: a shared, read-write mapping of the whole (SIZE-byte) file
        // (directly: not through this library's own mmap, which looks at
        // the program's mappings); checked for failure below.
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
            return Err(error(path, io::Error::from_raw_os_error(-r as i32)));
        }
        let p = r as *mut libc::c_void;
        // SAFETY: the mapping is SIZE bytes, page-aligned (so aligned for
        // u64), never unmapped (the board lives as long as the process), and
        // every access to it goes through these atomics: other processes
        // write it concurrently, which atomics allow.
        let words: &'static [AtomicU64] =
            unsafe { std::slice::from_raw_parts(p as *const AtomicU64, WORDS) };
        if created {
            words[W_SLOTS].store(SLOTS as u64, Ordering::Relaxed);
            words[W_MAGIC].store(MAGIC, Ordering::Release);
        } else {
            let mut ready = false;
            for _ in 0..100 {
                if words[W_MAGIC].load(Ordering::Acquire) == MAGIC {
                    ready = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if !ready || words[W_SLOTS].load(Ordering::Relaxed) != SLOTS as u64 {
                return Err(error(
                    path,
                    "not a paio board of this version (an older paio's?): remove it",
                ));
            }
        }
        let board = Board {
            words,
            slot: AtomicU64::new(0),
            pid: AtomicU64::new(0),
        };
        board.claim_slot();
        Ok(board)
    }

    /// Claims a slot for the calling process (again after a fork), freeing
    /// slots of processes that are gone if none is free.
    pub(crate) fn claim_slot(&self) {
        let pid = u64::from(std::process::id());
        self.pid.store(pid, Ordering::Relaxed);
        self.slot.store(0, Ordering::Relaxed);
        for pass in 0..2 {
            for s in 0..SLOTS {
                let i = HEADER + 2 * s;
                if self.words[i]
                    .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    self.words[i + 1].store(0, Ordering::Relaxed);
                    self.slot.store(i as u64, Ordering::Relaxed);
                    return;
                }
            }
            if pass == 0 {
                self.reclaim();
            }
        }
    }

    fn own(&self) -> Option<&AtomicU64> {
        match self.slot.load(Ordering::Relaxed) as usize {
            0 => None,
            i => Some(&self.words[i + 1]),
        }
    }

    /// Takes back the counts of slots whose process is gone.
    fn reclaim(&self) {
        for s in 0..SLOTS {
            let i = HEADER + 2 * s;
            let pid = self.words[i].load(Ordering::Acquire);
            if pid == 0 || pid > i32::MAX as u64 {
                continue;
            }
            // SAFETY: signal 0 only checks that the process exists.
            let gone = unsafe { libc::kill(pid as libc::pid_t, 0) } != 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone
                && self.words[i]
                    .compare_exchange(pid, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // Only this reader won the slot: return its counts, free it.
                let n = self.words[i + 1].swap(0, Ordering::AcqRel);
                for (word, count) in [(W_INFLIGHT, n & CRITICAL_MASK), (W_TOKENS, n >> 32)] {
                    if count > 0 {
                        let _ = self.words[word].fetch_update(
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                            |v| Some(v.saturating_sub(count)),
                        );
                    }
                }
                self.words[i].store(0, Ordering::Release);
            }
        }
    }

    /// Critical requests in flight, this process's and everyone's.
    fn in_flight(&self) -> (u64, u64) {
        let own = self
            .own()
            .map_or(0, |o| o.load(Ordering::Relaxed) & CRITICAL_MASK);
        (own, self.words[W_INFLIGHT].load(Ordering::Relaxed))
    }

    /// Scans for dead processes if none did in the last second; whether
    /// this call did.
    fn scan_if_due(&self) -> bool {
        let now = monotonic_ns();
        let last_scan = self.words[W_SCAN_NS].load(Ordering::Relaxed);
        if now.saturating_sub(last_scan) >= SCAN_EVERY_NS
            && self.words[W_SCAN_NS]
                .compare_exchange(last_scan, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.reclaim();
            return true;
        }
        false
    }
}

/// Subtracts `one` from a slot's count word unless the half it counts in
/// (`mask`) is zero: never below zero, even if a reclaim raced with a live
/// process.
fn slot_sub(word: &AtomicU64, one: u64, mask: u64) {
    let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        (v & mask != 0).then(|| v - one)
    });
}

impl paio::CriticalBoard for Board {
    fn critical_admitted(&self) {
        if let Some(o) = self.own() {
            o.fetch_add(1, Ordering::Relaxed);
        }
        self.words[W_INFLIGHT].fetch_add(1, Ordering::Release);
    }

    fn critical_completed(&self, now_ns: Option<u64>) {
        let now = now_ns.unwrap_or_else(monotonic_ns);
        self.words[W_LAST_NS].fetch_max(now, Ordering::Relaxed);
        self.words[W_LAST_PID].store(self.pid.load(Ordering::Relaxed), Ordering::Relaxed);
        if let Some(o) = self.own() {
            slot_sub(o, 1, CRITICAL_MASK);
        }
        let _ = self.words[W_INFLIGHT]
            .fetch_update(Ordering::Release, Ordering::Relaxed, |v| v.checked_sub(1));
    }

    fn others_active(&self, window_ns: u64) -> bool {
        let (own, all) = self.in_flight();
        if all > own {
            if self.scan_if_due() {
                let (own, all) = self.in_flight();
                return all > own;
            }
            return true;
        }
        let last = self.words[W_LAST_NS].load(Ordering::Relaxed);
        last != 0
            && self.words[W_LAST_PID].load(Ordering::Relaxed) != self.pid.load(Ordering::Relaxed)
            && monotonic_ns() < last.saturating_add(window_ns)
    }

    fn normal_take(&self, limit: Option<u32>) -> bool {
        let tokens = &self.words[W_TOKENS];
        let taken = paio::criticality::take_below(tokens, limit)
            || (self.scan_if_due() && paio::criticality::take_below(tokens, limit));
        if taken {
            if let Some(o) = self.own() {
                o.fetch_add(ONE_TOKEN, Ordering::Relaxed);
            }
        }
        taken
    }

    fn normal_release(&self) {
        if let Some(o) = self.own() {
            slot_sub(o, ONE_TOKEN, !CRITICAL_MASK);
        }
        let _ = self.words[W_TOKENS]
            .fetch_update(Ordering::Release, Ordering::Relaxed, |v| v.checked_sub(1));
    }
}
