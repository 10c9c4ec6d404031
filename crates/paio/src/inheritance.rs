//! Priority inheritance (RCP §4.2): a critical thread that waits for another
//! thread lends it its criticality until the wait ends.
//!
//! RCP's finding is that marking foreground work critical is not enough: a
//! critical thread often waits *indirectly*, on a lock held by a background
//! thread that is doing I/O. While it waits, the holder's I/O is on the
//! critical path, so the holder's requests must be admitted as critical.
//!
//! The mechanism, in one path:
//! 1. A thread about to block on a lock held by thread `owner` records the
//!    wait with [`Waiting::on`] (every blocking thread does, critical or not,
//!    so a chain can be followed later).
//! 2. If the waiting thread is critical ([`crate::criticality`], loans
//!    included), it calls [`lend`]: `owner` gets a *loan*, and so does the
//!    thread `owner` is itself recorded as waiting on, and so on, at most
//!    [`MAX_CHAIN`] threads, stopping at a cycle.
//! 3. While a thread holds a loan, every context it builds
//!    ([`crate::Context::new`]) is critical, and the embedding layer promotes
//!    its requests already waiting in a stage
//!    ([`crate::Stage::promote_thread`]).
//! 4. The loan ends when its borrower releases the lock ([`released`], from
//!    the unlock) or when the wait ends (the lock is acquired, or the call
//!    fails) and the [`Loan`] and the [`Waiting`] record are dropped:
//!    nothing is left behind, whether the holder still lives, exited, or
//!    the lock was destroyed.
//!
//! Two more kinds of waits lend the same way: a writer blocked by a
//! rwlock's readers, which glibc does not record ([`read_locked`],
//! [`lend_to_readers`]), and a thread waiting on a condition variable, to
//! the thread that signalled it last ([`Helpers`]).
//!
//! Cost: none on a thread that never blocks. Building a context reads one
//! process-wide counter it already reads for the process mark; only while a
//! loan exists somewhere in the process does a thread also scan the loan
//! table (at most [`TABLE`] words) for its own id.
//!
//! Both tables are fixed arrays of atomic words, claimed and released with
//! compare-and-swap: no allocation and no lock, so they are usable from a
//! lock hook. A full table refuses the record and counts it
//! ([`refused`]): the wait then proceeds without inheritance, never blocks.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::criticality;

/// The longest chain of waits a loan follows (the waited-for thread, the
/// thread it waits for, ...). Longer chains are rare and a cycle is a
/// deadlock of the program itself; the bound keeps a lend short.
pub const MAX_CHAIN: usize = 8;

/// Entries of each table: threads holding a loan at once, and threads
/// recorded as waiting at once. A record that finds its table full is
/// refused (counted by [`refused`]).
pub const TABLE: usize = 128;

/// One table entry: `id << 32 | value` (0 when free) and the address of the
/// lock it is about.
struct Entry {
    word: AtomicU64,
    lock: AtomicUsize,
}

/// A fixed table of entries, claimed and released with compare-and-swap.
struct Table([Entry; TABLE]);

impl Table {
    const fn new() -> Self {
        Self(
            [const {
                Entry {
                    word: AtomicU64::new(0),
                    lock: AtomicUsize::new(0),
                }
            }; TABLE],
        )
    }

    /// Claims a free entry for `word` (whose low 32 bits are not 0) about
    /// `lock`; its index, or `None` when full. The entry is first taken
    /// with its low bits 0, which [`Table::find`] skips, and shows `word`
    /// only once its lock is stored: no finder pairs it with the lock of
    /// the entry's previous use.
    fn claim(&self, word: u64, lock: usize) -> Option<usize> {
        let taking = word & !0xffff_ffff;
        let i = self.0.iter().position(|e| {
            e.word
                .compare_exchange(0, taking, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        self.0[i].lock.store(lock, Ordering::Release);
        self.0[i].word.store(word, Ordering::Release);
        Some(i)
    }

    /// The first live entry whose word `matches`: its index and word.
    fn find(&self, matches: impl Fn(u64, &Entry) -> bool) -> Option<(usize, u64)> {
        self.0.iter().enumerate().find_map(|(i, e)| {
            let w = e.word.load(Ordering::Acquire);
            (w as u32 != 0 && matches(w, e)).then_some((i, w))
        })
    }
}

/// Loans: the borrowing thread's id, a released bit and a count of lenders
/// (bits 0..31), about the lock the borrower holds.
static LOANS: Table = Table::new();
/// Waits: the waiting thread's id and the thread it waits for, about the
/// lock it waits on.
static WAITS: Table = Table::new();
/// Records refused because a table was full.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// A loan's bit saying its lock was released: it no longer counts, and its
/// lenders remove it when their waits end.
const RELEASED: u64 = 1 << 31;
const COUNT: u64 = RELEASED - 1;

fn id_of(word: u64) -> u32 {
    (word >> 32) as u32
}

/// Records refused so far because a table was full (each such wait went on
/// without inheritance).
pub fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Gives thread `id` one more loan, about `lock`: the index of the entry
/// counting it, or `None` if the table is full.
fn add_loan(id: u32, lock: usize) -> Option<usize> {
    loop {
        let live = LOANS.find(|w, e| {
            id_of(w) == id && w & RELEASED == 0 && e.lock.load(Ordering::Acquire) == lock
        });
        let entry = match live {
            Some((i, old)) => LOANS.0[i]
                .word
                .compare_exchange(old, old + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
                .then_some(i),
            None => match LOANS.claim(u64::from(id) << 32 | 1, lock) {
                Some(i) => Some(i),
                None => {
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
        };
        if let Some(i) = entry {
            criticality::loans_changed(1);
            return Some(i);
        }
    }
}

/// Takes back the loan counted in entry `i` (released or not); the entry is
/// freed with its last lender.
fn remove_loan(i: usize) {
    let e = &LOANS.0[i].word;
    let mut old = e.load(Ordering::Acquire);
    loop {
        let new = if old & COUNT <= 1 { 0 } else { old - 1 };
        match e.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => old = now,
        }
    }
    criticality::loans_changed(-1);
}

/// Thread `id` released `lock`: its loans about that lock stop counting at
/// once (their lenders remove them when their own waits end). Cheap when no
/// loan exists in the process: call it before every unlock.
#[inline]
pub fn released(id: u32, lock: usize) {
    if criticality::loans_outstanding() > 0 {
        release_slow(id, lock);
    }
}

#[cold]
fn release_slow(id: u32, lock: usize) {
    for e in &LOANS.0 {
        let w = e.word.load(Ordering::Acquire);
        if w & COUNT != 0
            && id_of(w) == id
            && w & RELEASED == 0
            && e.lock.load(Ordering::Acquire) == lock
        {
            let _ = e
                .word
                .compare_exchange(w, w | RELEASED, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// Whether thread `id` holds a loan now (one whose lock it has not
/// released).
pub fn holds_loan(id: u32) -> bool {
    LOANS
        .find(|w, _| id_of(w) == id && w & RELEASED == 0)
        .is_some()
}

/// Clears both tables in a forked child: the parent's waits and loans name
/// threads the child does not have, and their owners will never end them
/// there. Call it in the child before it makes requests (the interposer's
/// `atfork` handler does).
pub fn forget_after_fork() {
    for e in LOANS.0.iter().chain(WAITS.0.iter()) {
        e.word.store(0, Ordering::Relaxed);
    }
    criticality::forget_loans();
    // The parent's other threads are gone, and the forking thread has a
    // new id: its record is made again at its next read lock.
    if let Ok(mut all) = READERS.try_lock() {
        all.clear();
    }
    let _ = MY_READS.try_with(|cell| cell.borrow_mut().take());
}

/// Whether the calling thread holds a loan now (one load when no loan exists
/// in the process).
pub fn calling_thread_holds_loan() -> bool {
    criticality::loans_outstanding() > 0 && holds_loan(crate::context::current_workflow() as u32)
}

/// The thread `id` is recorded as waiting for, and the lock it waits on.
pub fn waits_for(id: u32) -> Option<(u32, usize)> {
    WAITS
        .find(|w, _| id_of(w) == id)
        .map(|(i, w)| (w as u32, WAITS.0[i].lock.load(Ordering::Acquire)))
}

/// The record that a thread waits for another (see [`Waiting::on`]); the
/// record is removed when this is dropped.
#[derive(Debug)]
#[must_use = "the wait is recorded only while this lives"]
pub struct Waiting {
    entry: Option<usize>,
}

impl Waiting {
    /// Records that thread `waiter` is about to wait for thread `owner` to
    /// release `lock` (kernel thread ids, neither 0; the lock's address).
    /// Not recorded (and counted by [`refused`]) when the table is full.
    pub fn on(waiter: u32, owner: u32, lock: usize) -> Self {
        if waiter == 0 || owner == 0 {
            return Self { entry: None };
        }
        let entry = WAITS.claim(u64::from(waiter) << 32 | u64::from(owner), lock);
        if entry.is_none() {
            REFUSED.fetch_add(1, Ordering::Relaxed);
        }
        Self { entry }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(i) = self.entry {
            WAITS.0[i].word.store(0, Ordering::Release);
        }
    }
}

/// The loans one critical wait gave: the waited-for thread and the chain of
/// threads it waits for, each about the lock it holds. Taken back when
/// dropped.
#[derive(Debug)]
#[must_use = "the loans are taken back when this is dropped"]
pub struct Loan {
    threads: [u32; MAX_CHAIN],
    /// The loan table entry counting each thread's loan.
    entries: [usize; MAX_CHAIN],
    len: usize,
}

impl Loan {
    /// The threads that got a loan, the waited-for thread first.
    pub fn threads(&self) -> &[u32] {
        &self.threads[..self.len]
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        for &i in &self.entries[..self.len] {
            remove_loan(i);
        }
    }
}

/// Lends criticality to thread `owner`, which holds `lock`, for a critical
/// thread `lender` that waits for it, and along the chain of threads `owner`
/// waits for (at most [`MAX_CHAIN`] threads, never `lender` itself,
/// stopping at a cycle). Each loan lasts until its borrower releases its
/// lock ([`released`]) or the returned [`Loan`] is dropped, whichever comes
/// first.
pub fn lend(lender: u32, owner: u32, lock: usize) -> Loan {
    let mut loan = Loan {
        threads: [0; MAX_CHAIN],
        entries: [0; MAX_CHAIN],
        len: 0,
    };
    let mut next = Some((owner, lock));
    while let Some((id, lock)) = next {
        if id == 0 || id == lender || loan.threads().contains(&id) || loan.len == MAX_CHAIN {
            break;
        }
        let Some(entry) = add_loan(id, lock) else {
            break;
        };
        loan.threads[loan.len] = id;
        loan.entries[loan.len] = entry;
        loan.len += 1;
        next = waits_for(id);
    }
    loan
}

/// Read locks recorded per thread (glibc's rwlocks record no readers).
pub const MAX_READ_HOLDS: usize = 8;

/// The read locks one thread holds: written only by that thread, read by a
/// writer looking for the readers it waits for.
#[derive(Debug)]
struct Reads {
    tid: u32,
    locks: [AtomicUsize; MAX_READ_HOLDS],
}

/// Every thread that ever took a read lock, while it lives.
static READERS: Mutex<Vec<Weak<Reads>>> = Mutex::new(Vec::new());

thread_local! {
    static MY_READS: RefCell<Option<Arc<Reads>>> = const { RefCell::new(None) };
}

fn readers() -> std::sync::MutexGuard<'static, Vec<Weak<Reads>>> {
    READERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling thread, whose kernel thread id `me()` returns (asked only
/// at its first read lock), took a read lock on the rwlock at `lock`. Not
/// recorded (counted by [`refused`]) beyond [`MAX_READ_HOLDS`] at once, or
/// during thread exit.
pub fn read_locked(me: impl FnOnce() -> u32, lock: usize) {
    let recorded = MY_READS.try_with(|cell| {
        let mut mine = cell.borrow_mut();
        if mine.is_none() {
            // First read lock of this thread.
            let fresh = Arc::new(Reads {
                tid: me(),
                locks: [const { AtomicUsize::new(0) }; MAX_READ_HOLDS],
            });
            let mut all = readers();
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&fresh));
            *mine = Some(fresh);
        }
        let reads = mine.as_ref().expect("set above");
        match reads.locks.iter().find(|l| l.load(Ordering::Relaxed) == 0) {
            Some(slot) => {
                slot.store(lock, Ordering::Release);
                true
            }
            None => false,
        }
    });
    if recorded != Ok(true) {
        REFUSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The calling thread released the rwlock at `lock` (as a reader or a
/// writer): a read hold of it, if recorded, is forgotten. One look at the
/// thread's own few slots.
pub fn read_unlocked(lock: usize) {
    let _ = MY_READS.try_with(|cell| {
        if let Some(reads) = cell.borrow().as_ref() {
            if let Some(slot) = reads
                .locks
                .iter()
                .find(|l| l.load(Ordering::Relaxed) == lock)
            {
                slot.store(0, Ordering::Release);
            }
        }
    });
}

/// Lends criticality to the threads recorded as holding the rwlock at
/// `lock` for reading (at most [`MAX_CHAIN`], never `lender`), for a
/// critical thread `lender` that waits to write it; each loan ends when its
/// reader releases the lock or the returned [`Loan`] is dropped.
pub fn lend_to_readers(lender: u32, lock: usize) -> Loan {
    let mut loan = Loan {
        threads: [0; MAX_CHAIN],
        entries: [0; MAX_CHAIN],
        len: 0,
    };
    for w in readers().iter() {
        let Some(r) = w.upgrade() else { continue };
        if r.tid == lender
            || loan.len == MAX_CHAIN
            || !r.locks.iter().any(|l| l.load(Ordering::Acquire) == lock)
        {
            continue;
        }
        if let Some(entry) = add_loan(r.tid, lock) {
            loan.threads[loan.len] = r.tid;
            loan.entries[loan.len] = entry;
            loan.len += 1;
        }
    }
    loan
}

/// Entries of [`Helpers`].
pub const HELPER_SLOTS: usize = 256;

/// Condition variables' last signallers (RCP's helper inference): a lossy
/// table indexed by the condition variable's address. Each entry holds the
/// address and `thread id << 32 | milliseconds` of the last signal; a
/// condition variable whose entry another one took has no helper (the wait
/// goes on without a loan).
#[derive(Debug)]
pub struct Helpers {
    cond: [AtomicU64; HELPER_SLOTS],
    who: [AtomicU64; HELPER_SLOTS],
}

/// The process's helper table (the interposer's condition-variable hooks).
pub static HELPERS: Helpers = Helpers::new();

impl Helpers {
    /// An empty table.
    pub const fn new() -> Self {
        Self {
            cond: [const { AtomicU64::new(0) }; HELPER_SLOTS],
            who: [const { AtomicU64::new(0) }; HELPER_SLOTS],
        }
    }

    fn slot(cond: usize) -> usize {
        // Condition variables are 48-byte objects: drop the low bits, mix.
        ((cond >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) % HELPER_SLOTS
    }

    /// Thread `tid` signalled the condition variable at `cond` at `now_ms`
    /// (any millisecond clock; only differences are used, modulo 2^32).
    pub fn signalled(&self, cond: usize, tid: u32, now_ms: u64) {
        let i = Self::slot(cond);
        self.who[i].store(
            u64::from(tid) << 32 | (now_ms & 0xffff_ffff),
            Ordering::Relaxed,
        );
        self.cond[i].store(cond as u64, Ordering::Release);
    }

    /// The thread that signalled `cond` last, if at most `window_ms` before
    /// `now_ms`.
    pub fn helper_of(&self, cond: usize, now_ms: u64, window_ms: u64) -> Option<u32> {
        let i = Self::slot(cond);
        if self.cond[i].load(Ordering::Acquire) != cond as u64 {
            return None;
        }
        let who = self.who[i].load(Ordering::Relaxed);
        let age = (now_ms & 0xffff_ffff).wrapping_sub(who & 0xffff_ffff) & 0xffff_ffff;
        (age <= window_ms).then_some((who >> 32) as u32)
    }
}

impl Default for Helpers {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Mutex;

    /// The tables are process-wide: tests that use them run one at a time,
    /// with thread ids no other test uses.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock thread `owner` holds in these tests.
    fn lock_of(owner: u32) -> usize {
        0x1000 + owner as usize
    }

    fn wait(waiter: u32, owner: u32) -> Waiting {
        Waiting::on(waiter, owner, lock_of(owner))
    }

    fn lend_to(lender: u32, owner: u32) -> Loan {
        lend(lender, owner, lock_of(owner))
    }

    #[test]
    fn a_loan_follows_the_chain_and_is_taken_back() {
        let _s = serial();
        // c (critical) waits for a, which waits for b, which waits for d.
        let (c, a, b, d) = (1_000_001, 1_000_002, 1_000_003, 1_000_004);
        let w1 = wait(a, b);
        let w2 = wait(b, d);
        let _w0 = wait(c, a);
        assert_eq!(waits_for(a), Some((b, lock_of(b))));
        assert!(!holds_loan(a));
        let loan = lend_to(c, a);
        assert_eq!(loan.threads(), &[a, b, d]);
        assert!(holds_loan(a) && holds_loan(b) && holds_loan(d));
        assert!(!holds_loan(c), "the lender lends, it does not borrow");
        drop(w2);
        drop(loan);
        assert!(!holds_loan(a) && !holds_loan(b) && !holds_loan(d));
        drop(w1);
    }

    #[test]
    fn releasing_the_lock_ends_the_loan_at_once() {
        let _s = serial();
        let (c1, c2, h) = (1_500_001, 1_500_002, 1_500_003);
        let first = lend_to(c1, h);
        assert!(holds_loan(h));
        released(h, lock_of(h) + 1);
        assert!(holds_loan(h), "another lock: still lent");
        released(h, lock_of(h));
        assert!(!holds_loan(h), "released: no longer lent");
        // h takes the lock again and another critical thread waits: the
        // first lender leaving does not end the second loan.
        let second = lend_to(c2, h);
        assert!(holds_loan(h));
        drop(first);
        assert!(holds_loan(h));
        drop(second);
        assert!(!holds_loan(h));
        assert_eq!(criticality::loans_outstanding(), 0);
    }

    #[test]
    fn loans_nest_and_a_cycle_stops_the_chain() {
        let _s = serial();
        let (c1, c2, a, b) = (2_000_001, 2_000_002, 2_000_003, 2_000_004);
        // a and b wait for each other (the program deadlocked): the chain
        // stops where it started.
        let _wa = wait(a, b);
        let _wb = wait(b, a);
        let l1 = lend_to(c1, a);
        assert_eq!(l1.threads(), &[a, b]);
        let l2 = lend_to(c2, b);
        assert_eq!(l2.threads(), &[b, a]);
        drop(l1);
        assert!(holds_loan(a) && holds_loan(b), "the second loan remains");
        drop(l2);
        assert!(!holds_loan(a) && !holds_loan(b));
        // A lender at the end of the chain is not lent to.
        let _wl = wait(3_000_001, 3_000_002);
        let l = lend_to(3_000_002, 3_000_001);
        assert_eq!(l.threads(), &[3_000_001]);
    }

    #[test]
    fn a_full_table_refuses_and_the_wait_goes_on() {
        let _s = serial();
        let before = refused();
        let held: Vec<Waiting> = (0..TABLE as u32).map(|i| wait(4_000_000 + i, 1)).collect();
        let extra = wait(4_100_000, 1);
        assert_eq!(refused(), before + 1);
        assert!(waits_for(4_100_000).is_none());
        drop(extra);
        drop(held);
        assert!(waits_for(4_000_000).is_none());
    }

    #[test]
    fn a_thread_with_a_loan_builds_critical_contexts() {
        let _s = serial();
        let me = crate::context::current_workflow() as u32;
        let normal = || crate::Context::new(crate::RequestType::WRITE, 1).criticality;
        assert_eq!(normal(), crate::Criticality::Normal);
        assert!(!calling_thread_holds_loan());
        let loan = std::thread::spawn(move || {
            let lender = crate::context::current_workflow() as u32;
            lend_to(lender, me)
        })
        .join()
        .unwrap();
        assert_eq!(normal(), crate::Criticality::Critical);
        assert!(calling_thread_holds_loan());
        let other = std::thread::spawn(normal).join().unwrap();
        assert_eq!(other, crate::Criticality::Normal, "only the borrower");
        released(me, lock_of(me));
        assert_eq!(normal(), crate::Criticality::Normal, "released");
        drop(loan);
        assert_eq!(criticality::loans_outstanding(), 0);
    }

    #[test]
    fn a_writer_lends_to_the_readers_it_waits_for() {
        let _s = serial();
        let lock = 0x7000;
        let (me, writer) = (6_000_001, 6_000_002);
        // Two readers on two threads (their ids chosen by the test), and
        // this thread reading another lock.
        let reader = |id: u32| {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (held_tx, held_rx) = std::sync::mpsc::channel();
            let h = std::thread::spawn(move || {
                read_locked(|| id, lock);
                held_tx.send(()).unwrap();
                rx.recv().unwrap();
                read_unlocked(lock);
                released(id, lock);
            });
            held_rx.recv().unwrap();
            (tx, h)
        };
        let (r1, h1) = reader(6_000_010);
        let (r2, h2) = reader(6_000_011);
        read_locked(|| me, lock + 64);
        let loan = lend_to_readers(writer, lock);
        let mut lent = loan.threads().to_vec();
        lent.sort_unstable();
        assert_eq!(
            lent,
            vec![6_000_010, 6_000_011],
            "not the reader of another lock"
        );
        r1.send(()).unwrap();
        h1.join().unwrap();
        assert!(!holds_loan(6_000_010), "released its read lock");
        assert!(holds_loan(6_000_011));
        drop(loan);
        r2.send(()).unwrap();
        h2.join().unwrap();
        read_unlocked(lock + 64);
        assert_eq!(lend_to_readers(writer, lock + 64).threads(), &[] as &[u32]);
        assert_eq!(criticality::loans_outstanding(), 0);
    }

    /// Threads lending to, releasing and dropping loans of the same few
    /// borrowers at once leave the tables and the process word empty (the
    /// compare-and-swap paths under real contention).
    #[test]
    fn concurrent_loans_balance() {
        let _s = serial();
        let borrowers = [7_000_001u32, 7_000_002, 7_000_003];
        let workers: Vec<_> = (0..4u32)
            .map(|w| {
                std::thread::spawn(move || {
                    for i in 0..2_000u32 {
                        let owner = borrowers[((i + w) % 3) as usize];
                        let loan = lend_to(8_000_000 + w, owner);
                        assert_eq!(loan.threads(), &[owner]);
                        if i % 7 == 0 {
                            released(owner, lock_of(owner));
                        }
                        drop(loan);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(criticality::loans_outstanding(), 0);
        assert!(LOANS.0.iter().all(|e| e.word.load(Ordering::Relaxed) == 0));
        assert!(borrowers.iter().all(|&b| !holds_loan(b)));
    }

    #[test]
    fn a_helper_counts_within_its_window_and_the_last_signaller_wins() {
        let h = Helpers::new();
        let (cv, other) = (0x10_0000usize, 0x20_0030usize);
        assert_eq!(h.helper_of(cv, 0, 100), None, "never signalled");
        h.signalled(cv, 11, 1_000);
        assert_eq!(h.helper_of(cv, 1_000, 100), Some(11));
        assert_eq!(h.helper_of(cv, 1_100, 100), Some(11), "at the window's end");
        assert_eq!(h.helper_of(cv, 1_101, 100), None, "quiet for longer");
        h.signalled(cv, 12, 1_200);
        assert_eq!(h.helper_of(cv, 1_250, 100), Some(12), "the last signaller");
        assert_eq!(h.helper_of(other, 1_250, 100), None, "another condvar");
        // The millisecond clock wrapping at 2^32 does not age a helper.
        h.signalled(cv, 13, (1 << 32) - 10);
        assert_eq!(h.helper_of(cv, (1 << 32) + 50, 100), Some(13));
        // Two condition variables in one slot: the later one takes it.
        let same_slot = (0..1 << 20)
            .map(|k| cv + 64 * k)
            .find(|&c| c != cv && Helpers::slot(c) == Helpers::slot(cv))
            .unwrap();
        h.signalled(same_slot, 14, 2_000);
        assert_eq!(h.helper_of(cv, 2_000, 100), None, "lost to a collision");
        assert_eq!(h.helper_of(same_slot, 2_000, 100), Some(14));
    }

    #[test]
    fn a_borrower_that_exits_leaves_nothing_once_the_wait_ends() {
        let _s = serial();
        let lender = 9_000_001;
        let (tx, rx) = std::sync::mpsc::channel();
        let borrower = std::thread::spawn(move || {
            tx.send(crate::context::current_workflow() as u32).unwrap();
        });
        let tid = rx.recv().unwrap();
        let _w = wait(lender, tid);
        let loan = lend_to(lender, tid);
        borrower.join().unwrap(); // exits holding the loan (never unlocked)
        assert!(holds_loan(tid));
        drop(loan); // the lender's wait ended (EOWNERDEAD, or a timeout)
        assert!(!holds_loan(tid));
        assert_eq!(criticality::loans_outstanding(), 0);
    }

    /// One step of the property test below.
    #[derive(Debug, Clone)]
    enum Step {
        /// Drop the i-th live loan.
        DropLoan(prop::sample::Index),
        /// Drop the i-th wait record.
        DropWait(prop::sample::Index),
        /// Thread i releases the lock it holds.
        Release(u32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            any::<prop::sample::Index>().prop_map(Step::DropLoan),
            any::<prop::sample::Index>().prop_map(Step::DropWait),
            (0u32..6).prop_map(Step::Release),
        ]
    }

    proptest! {
        /// Any interleaving of waits, loans and releases, undone in any
        /// order, leaves the tables empty; at every step a thread holds a
        /// loan exactly when a live loan names it and it has not released
        /// its lock since.
        #[test]
        fn loans_and_waits_leave_nothing_behind(
            edges in proptest::collection::vec((0u32..6, 0u32..6), 0..8),
            lends in proptest::collection::vec((0u32..6, 0u32..6), 1..6),
            steps in proptest::collection::vec(step(), 0..20),
        ) {
            let _s = serial();
            let id = |i: u32| 5_000_000 + i;
            let ids: Vec<u32> = (0..6).map(id).collect();
            let mut waits: Vec<Waiting> =
                edges.iter().map(|&(w, o)| wait(id(w), id(o))).collect();
            let mut loans: Vec<Loan> =
                lends.iter().map(|&(l, o)| lend_to(id(l), id(o))).collect();
            let mut released_by: Vec<u32> = Vec::new();
            for loan in &loans {
                prop_assert!(loan.threads().len() <= MAX_CHAIN);
            }
            let check = |loans: &[Loan], released_by: &[u32]| -> Result<(), TestCaseError> {
                for &t in &ids {
                    let named = loans.iter().any(|l| l.threads().contains(&t));
                    prop_assert_eq!(holds_loan(t), named && !released_by.contains(&t));
                }
                Ok(())
            };
            check(&loans, &released_by)?;
            for s in steps {
                match s {
                    Step::DropLoan(ix) if !loans.is_empty() => {
                        drop(loans.remove(ix.index(loans.len())));
                    }
                    Step::DropWait(ix) if !waits.is_empty() => {
                        drop(waits.remove(ix.index(waits.len())));
                    }
                    Step::Release(t) => {
                        released(id(t), lock_of(id(t)));
                        released_by.push(id(t));
                    }
                    _ => {}
                }
                check(&loans, &released_by)?;
            }
            drop(loans);
            drop(waits);
            for &t in &ids {
                prop_assert!(!holds_loan(t) && waits_for(t).is_none());
            }
            prop_assert_eq!(criticality::loans_outstanding(), 0);
            prop_assert!(LOANS.0.iter().all(|e| e.word.load(Ordering::Relaxed) == 0));
        }
    }
}
