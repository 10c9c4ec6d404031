//! The shared board: critical I/O of one user's processes, visible to all of
//! them through one page of shared memory, so a background program's
//! priority objects hold back while another program's critical requests are
//! in flight, with no message and no system call on the request path
//! ([`paio::CriticalBoard`]; docs/criticality.md).
//!
//! The file is `$PAIO_BOARD`, else `/dev/shm/paio-<uid>-v3.board`: one page of
//! 64-bit words, all accessed atomically. The name carries the layout's
//! version, so a new layout never meets an older paio's board (a board
//! named explicitly in another layout is refused).
//!
//! | words | content |
//! |---|---|
//! | 0 | magic (`PAIOBRD3`), stored last by the creator |
//! | 1 | number of slots |
//! | 2 | critical requests in flight, all processes |
//! | 3 | `CLOCK_MONOTONIC` ns of the latest critical completion |
//! | 4 | pid of the process that completed it |
//! | 5 | `CLOCK_MONOTONIC` ns of the latest scan for dead processes |
//! | 6 | `shared_busy_depth` tokens taken, all processes |
//! | 8.. | slots of two words: owner (pid in the low 32 bits, the low 32 bits of its start time in clock ticks since boot in the high ones); that process's critical requests in flight (low 32 bits) and tokens (high 32 bits) |
//!
//! Each process claims a slot (by pid and start time) and counts its own
//! requests and tokens there as well as in the totals, so it can tell
//! others' activity from its own and so a process that dies with requests
//! in flight or tokens taken can be subtracted: when a total stays non-zero
//! (critical I/O of others, or a full pool), a reader checks at most once a
//! second which slot owners are gone (`kill(pid, 0)` says no such process,
//! or the process with that pid started at another time: the pid was
//! reused) and takes their counts back.
//! A process that finds no free slot still counts in the totals (and is
//! then never reclaimed: the board has 252 slots).
//!
//! Trust: the file must belong to the user and be readable by nobody else
//! ([`crate::shm`]): one user's programs never slow another user's.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"PAIOBRD3");
const HEADER: usize = 8;
const SLOTS: usize = (crate::shm::WORDS - HEADER) / 2;
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

/// The board's path: `$PAIO_BOARD`, else `/dev/shm/paio-<uid>-v3.board`.
pub(crate) fn default_path(env: Option<&str>) -> PathBuf {
    match env.filter(|s| !s.is_empty()) {
        Some(p) => PathBuf::from(p),
        // SAFETY: getuid has no preconditions.
        None => PathBuf::from(format!("/dev/shm/paio-{}-v3.board", unsafe {
            libc::getuid()
        })),
    }
}

const KIND: crate::shm::Kind = crate::shm::Kind {
    what: "board",
    var: "PAIO_BOARD",
    magic: MAGIC,
};

impl Board {
    /// Opens (creating if needed) the board at `path` and claims a slot.
    pub(crate) fn open(path: &Path) -> Result<Board, String> {
        let words = crate::shm::open(
            path,
            &KIND,
            |words| words[W_SLOTS].store(SLOTS as u64, Ordering::Relaxed),
            |words| words[W_SLOTS].load(Ordering::Relaxed) == SLOTS as u64,
        )?;
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
        let pid = std::process::id();
        self.pid.store(u64::from(pid), Ordering::Relaxed);
        self.slot.store(0, Ordering::Relaxed);
        let owner = owner_word(pid, start_ticks(None).unwrap_or(0));
        if self.take_over(owner) {
            return;
        }
        for pass in 0..2 {
            for s in 0..SLOTS {
                let i = HEADER + 2 * s;
                if self.words[i]
                    .compare_exchange(0, owner, Ordering::AcqRel, Ordering::Relaxed)
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

    /// Takes over the slot `owner` holds already, if any: this process
    /// before an `exec` (same pid, same start time; a new image of the
    /// library), whose slot would otherwise stay taken while the process
    /// lives (a program started through shims took 84 of the 252). Counts
    /// left in it by threads the `exec` ended are given back.
    fn take_over(&self, owner: u64) -> bool {
        let Some(i) = (0..SLOTS)
            .map(|s| HEADER + 2 * s)
            .find(|&i| self.words[i].load(Ordering::Acquire) == owner)
        else {
            return false;
        };
        self.give_back(i);
        self.slot.store(i as u64, Ordering::Relaxed);
        true
    }

    /// Returns the counts of slot `i` to the totals and zeroes them.
    fn give_back(&self, i: usize) {
        let n = self.words[i + 1].swap(0, Ordering::AcqRel);
        for (word, count) in [(W_INFLIGHT, n & CRITICAL_MASK), (W_TOKENS, n >> 32)] {
            if count > 0 {
                let _ = self.words[word].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(count))
                });
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
            let owner = self.words[i].load(Ordering::Acquire);
            if owner == 0 || owner == u64::MAX {
                continue;
            }
            if !owner_gone(owner) {
                continue;
            }
            if self.words[i]
                .compare_exchange(owner, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // Only this reader won the slot: return its counts, free it.
                self.give_back(i);
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

/// Whether a critical completion at `last` is within `window_ns` before
/// `now`. A time more than a window after `now` is no completion of this
/// time line (a process in a time namespace whose `CLOCK_MONOTONIC` runs a
/// day ahead left one, and every background program of its user was held
/// for that day); one less ahead is a conversion's skew, and counts.
fn recent(last: u64, now: u64, window_ns: u64) -> bool {
    last <= now.saturating_add(window_ns) && now < last.saturating_add(window_ns)
}

/// A slot's owner word: `pid`, and the low 32 bits of its start time.
fn owner_word(pid: u32, start_ticks: u64) -> u64 {
    u64::from(pid) | (start_ticks & 0xffff_ffff) << 32
}

/// Whether the process an owner word names is gone: no process has its pid,
/// or the one that has it started at another time (the pid was reused; a
/// start time that cannot be read counts as the same).
fn owner_gone(owner: u64) -> bool {
    let pid = owner as u32;
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let started = owner >> 32;
    started != 0 && start_ticks(Some(pid)).is_some_and(|t| t & 0xffff_ffff != started)
}

/// The start time of process `pid` (`None`: the calling one), in clock
/// ticks since boot: field 22 of `/proc/PID/stat`. Raw system calls and a
/// buffer on the stack, no allocation: safe in a forked child of a threaded
/// parent. `None` when it cannot be read (no `/proc`, `hidepid`).
fn start_ticks(pid: Option<u32>) -> Option<u64> {
    let mut path = [0u8; 32];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        path[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    put(b"/proc/");
    match pid {
        None => put(b"self"),
        Some(p) => put(crate::sys::decimal(p, &mut [0; 10])),
    }
    put(b"/stat\0");
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path on the stack; read into a buffer on the
    // stack of the length given; the descriptor is ours and closed once.
    let len = unsafe {
        let fd = crate::sys::syscall6(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as usize,
                path.as_ptr() as usize,
                (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
                0,
                0,
                0,
            ],
        );
        if crate::sys::failed(fd) {
            return None;
        }
        let len = crate::sys::syscall6(
            libc::SYS_read,
            [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
        );
        crate::sys::syscall6(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]);
        len
    };
    if crate::sys::failed(len) {
        return None;
    }
    parse_start_ticks(&buf[..len as usize])
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may hold anything, so fields are
/// counted after its last `)`.
fn parse_start_ticks(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After the name: field 3 (state) is the first.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
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
            && recent(last, monotonic_ns(), window_ns)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_from_the_future_is_not_recent() {
        assert!(recent(1_000, 1_500, 1_000));
        assert!(recent(1_200, 1_000, 1_000), "a skew within a window");
        assert!(!recent(1_000, 2_000, 1_000));
        assert!(!recent(1_000 + 86_400_000_000_000, 1_500, 1_000));
    }

    #[test]
    fn the_start_time_is_field_22_whatever_the_command_name() {
        let stat =
            b"4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_ticks(stat), Some(987_654));
        assert_eq!(parse_start_ticks(b"4242 (x) S 1"), None);
        assert_eq!(parse_start_ticks(b"no parenthesis"), None);
    }

    /// A slot whose pid is alive but started at another time is a reused
    /// pid's: its owner is gone. A live owner, or an unknown start time, is
    /// not.
    #[test]
    fn a_reused_pid_is_gone_a_live_owner_is_not() {
        let pid = std::process::id();
        let started = start_ticks(None).expect("this process's start time");
        assert_eq!(start_ticks(Some(pid)), Some(started));
        assert!(!owner_gone(owner_word(pid, started)));
        assert!(!owner_gone(owner_word(pid, 0)), "start time unknown");
        assert!(owner_gone(owner_word(pid, started + 1)), "pid reused");
        // No such process (pid_max is at most 4,194,304).
        assert!(owner_gone(owner_word(i32::MAX as u32, started)));
    }
}
