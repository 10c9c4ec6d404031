//! Priority inheritance through locks (RCP §4.2): a critical thread that
//! blocks on a pthread mutex or rwlock held by another thread lends that
//! thread its criticality until it gets the lock ([`paio::inheritance`]).
//!
//! Each hook first tries the lock without blocking (the real `trylock`): an
//! uncontended lock costs one more call and nothing else; an unlock costs
//! one load of a process-wide counter while no loan exists, and otherwise
//! ends the unlocking thread's loans about that lock before the real
//! unlock. Only when the lock is held does the hook find the holder — glibc
//! records its kernel thread id in the lock (a mutex's `__owner`, a
//! rwlock's writer in `__cur_writer`) — record the wait, and, if the
//! calling thread is critical, lend the holder (and the chain of threads it
//! waits for) criticality and promote their requests already waiting in the
//! stage. Then it blocks in the real call with the caller's arguments; the
//! loan ends when the holder unlocks or that call returns, whatever it
//! returns, and the record when the call returns.
//!
//! Semantics are the real calls': `trylock` acquires exactly when `lock`
//! would without waiting (a recursive mutex's count, a robust mutex's
//! `EOWNERDEAD` included), and its failure is followed by the real blocking
//! call, which returns what it returns (`EDEADLK`, `ETIMEDOUT`, ...).
//! Readers of a rwlock are not recorded by glibc, so the hooks record them
//! (up to [`paio::inheritance::MAX_READ_HOLDS`] per thread): a critical
//! writer blocked by readers lends each of them its criticality until it
//! releases the lock.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{pthread_mutex_t, pthread_rwlock_t, timespec};

use crate::real::real_fn;
use crate::rt;

/// Byte offset of the holder's kernel thread id in glibc's `pthread_mutex_t`
/// (`__data.__owner`) and `pthread_rwlock_t` (`__data.__cur_writer`), the
/// same on every 64-bit Linux architecture glibc supports; checked against
/// the C headers by tests/locks.c.
const MUTEX_OWNER: usize = 8;
const RWLOCK_WRITER: usize = 24;

/// The thread id glibc recorded at `offset` in a lock (0: none).
///
/// # Safety
/// `lock` points to a lock of at least `offset + 4` bytes that the caller
/// passed to a lock call (valid while that call runs).
unsafe fn holder(lock: *const u8, offset: usize) -> i32 {
    // SAFETY: the field is an aligned `int` inside the caller's lock, written
    // by other threads with atomic instructions; read it atomically.
    unsafe { (*lock.add(offset).cast::<AtomicI32>()).load(Ordering::Relaxed) }
}

/// How a lock call holds its lock once it returns 0.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// A mutex, or a rwlock for writing: glibc records the holder.
    Exclusive,
    /// A rwlock for reading: glibc records no readers, so the hook does
    /// ([`paio::inheritance::read_locked`]).
    Read,
}

/// One lock hook: try the lock, and on `EBUSY` block in the real call with
/// inheritance ([`rt::wait_for_thread`]); a read lock taken is recorded.
macro_rules! lock_hook {
    ($name:ident, $sym:literal, $try:literal, $ty:ty, $offset:expr, $hold:ident, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(lock: *mut $ty $(, $a: $t)*) -> c_int {
            let Some(real) = real_fn!($sym, fn(*mut $ty $(, $t)*) -> c_int) else {
                return libc::ENOSYS;
            };
            if !rt::inherits() {
                // SAFETY: the caller's arguments, unchanged.
                return unsafe { real(lock $(, $a)*) };
            }
            if let Some(try_lock) = real_fn!($try, fn(*mut $ty) -> c_int) {
                // SAFETY: the caller's lock, to the real trylock.
                match unsafe { try_lock(lock) } {
                    libc::EBUSY => {}
                    r => return rt::lock_taken(Hold::$hold, lock as usize, r),
                }
            }
            // SAFETY: the caller's lock, valid during this call.
            let owner = unsafe { holder(lock.cast(), $offset) };
            let r = rt::wait_for_thread(owner, lock as usize, Hold::$hold, || {
                // SAFETY: the caller's arguments, unchanged.
                unsafe { real(lock $(, $a)*) }
            });
            rt::lock_taken(Hold::$hold, lock as usize, r)
        }
    };
}

lock_hook!(
    pthread_mutex_lock,
    c"pthread_mutex_lock",
    c"pthread_mutex_trylock",
    pthread_mutex_t,
    MUTEX_OWNER,
    Exclusive,
    ()
);
lock_hook!(pthread_mutex_timedlock, c"pthread_mutex_timedlock", c"pthread_mutex_trylock",
    pthread_mutex_t, MUTEX_OWNER, Exclusive, (abstime: *const timespec));
lock_hook!(
    pthread_rwlock_rdlock,
    c"pthread_rwlock_rdlock",
    c"pthread_rwlock_tryrdlock",
    pthread_rwlock_t,
    RWLOCK_WRITER,
    Read,
    ()
);
lock_hook!(pthread_rwlock_timedrdlock, c"pthread_rwlock_timedrdlock", c"pthread_rwlock_tryrdlock",
    pthread_rwlock_t, RWLOCK_WRITER, Read, (abstime: *const timespec));
lock_hook!(
    pthread_rwlock_wrlock,
    c"pthread_rwlock_wrlock",
    c"pthread_rwlock_trywrlock",
    pthread_rwlock_t,
    RWLOCK_WRITER,
    Exclusive,
    ()
);
lock_hook!(pthread_rwlock_timedwrlock, c"pthread_rwlock_timedwrlock", c"pthread_rwlock_trywrlock",
    pthread_rwlock_t, RWLOCK_WRITER, Exclusive, (abstime: *const timespec));

/// `pthread_rwlock_tryrdlock`: a read lock taken is recorded (the lock hooks
/// record theirs), so a writer can find this reader.
#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_tryrdlock(lock: *mut pthread_rwlock_t) -> c_int {
    let Some(real) = real_fn!(
        c"pthread_rwlock_tryrdlock",
        fn(*mut pthread_rwlock_t) -> c_int
    ) else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller's lock, unchanged.
    let r = unsafe { real(lock) };
    if rt::inherits() {
        rt::lock_taken(Hold::Read, lock as usize, r)
    } else {
        r
    }
}

/// One unlock hook: the calling thread's loans about this lock end
/// ([`paio::inheritance::released`]) and, for a rwlock, its read hold is
/// forgotten; then the real unlock.
macro_rules! unlock_hook {
    ($name:ident, $sym:literal, $ty:ty, $reads:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(lock: *mut $ty) -> c_int {
            let Some(real) = real_fn!($sym, fn(*mut $ty) -> c_int) else {
                return libc::ENOSYS;
            };
            if $reads && rt::inherits() {
                paio::inheritance::read_unlocked(lock as usize);
            }
            if paio::criticality::loans_outstanding() > 0 {
                rt::releasing(lock as usize);
            }
            // SAFETY: the caller's lock, unchanged.
            unsafe { real(lock) }
        }
    };
}

unlock_hook!(
    pthread_mutex_unlock,
    c"pthread_mutex_unlock",
    pthread_mutex_t,
    false
);
unlock_hook!(
    pthread_rwlock_unlock,
    c"pthread_rwlock_unlock",
    pthread_rwlock_t,
    true
);

// ------------------------------------------------------------ condition variables
// RCP's helper inference: a thread that signals a condition variable is a
// helper of the threads that wait on it. A critical thread that waits on a
// condition variable lends its criticality to the thread that signalled it
// last, if that was less than `helper_window` ago ([`rt::cond_wait`]); the
// loan ends when that thread signals it again or the wait returns.
//
// Programs link the GLIBC_2.3.2 versions of these symbols (the 2.2.5 ones
// are compatibility code for binaries from before 2003); the real functions
// are looked up at that version (dlvsym), since an unversioned dlsym may give
// the old one.

type Cond = libc::pthread_cond_t;
type Mutex = libc::pthread_mutex_t;

macro_rules! signal_hook {
    ($name:ident, $sym:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(cond: *mut Cond) -> c_int {
            let Some(real) = crate::real::real_vfn!($sym, c"GLIBC_2.3.2", fn(*mut Cond) -> c_int)
            else {
                return libc::ENOSYS;
            };
            if rt::inherits() {
                rt::signalled(cond as usize);
            }
            // SAFETY: the caller's condition variable, unchanged.
            unsafe { real(cond) }
        }
    };
}

signal_hook!(pthread_cond_signal, c"pthread_cond_signal");
signal_hook!(pthread_cond_broadcast, c"pthread_cond_broadcast");

macro_rules! wait_hook {
    ($name:ident, $sym:literal, $version:literal, ($($a:ident : $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(cond: *mut Cond, mutex: *mut Mutex $(, $a: $t)*) -> c_int {
            let Some(real) = crate::real::real_vfn!(
                $sym, $version, fn(*mut Cond, *mut Mutex $(, $t)*) -> c_int)
            else {
                return libc::ENOSYS;
            };
            if !rt::inherits() {
                // SAFETY: the caller's arguments, unchanged.
                return unsafe { real(cond, mutex $(, $a)*) };
            }
            rt::cond_wait(cond as usize, || {
                // SAFETY: the caller's arguments, unchanged.
                unsafe { real(cond, mutex $(, $a)*) }
            })
        }
    };
}

wait_hook!(pthread_cond_wait, c"pthread_cond_wait", c"GLIBC_2.3.2", ());
wait_hook!(pthread_cond_timedwait, c"pthread_cond_timedwait", c"GLIBC_2.3.2",
    (abstime: *const timespec));
wait_hook!(pthread_cond_clockwait, c"pthread_cond_clockwait", c"GLIBC_2.34",
    (clock: libc::clockid_t, abstime: *const timespec));
