//! Asynchronous I/O: libaio's submissions are charged, io_uring is reported.
//!
//! - **libaio** (`io_submit`, a library call in `libaio.so.1` that InnoDB,
//!   fio and many databases use): every data iocb is admitted through the
//!   stage *before* the batch is handed to the kernel (a rate limiter delays
//!   the submission), in the order of the array, and completed at once with
//!   its size: holding one iocb's admission while the next waits could
//!   deadlock on a priority object's depth. The kernel's completion is not
//!   seen (it is reaped with `io_getevents` or from the ring in user
//!   space), so these requests have no latency sample, a priority object's
//!   depth counts them only until they are submitted, and iocbs the kernel
//!   refuses (`io_submit` returning fewer than `nr`) stay charged.
//! - **POSIX AIO** (`aio_read`, `aio_write`, `aio_fsync`, `lio_listio` and
//!   their `64` forms): glibc runs each request on a helper thread that
//!   calls its internal `pread`/`pwrite`, which no interposer sees, so each
//!   control block is charged at submission as libaio's iocbs are (the same
//!   consequences: no latency sample, charged even if the submission
//!   fails).
//! - **io_uring** submits through shared rings that no library call
//!   crosses: nothing is enforced. Its setup (`io_uring_setup` through
//!   `syscall`, or liburing's setup calls) makes the process say so on
//!   stderr, once.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use paio::RequestType;

use crate::rt;

/// The kernel's `struct iocb` (`<linux/aio_abi.h>`; libaio's `struct iocb`
/// has the same layout on little-endian 64-bit Linux).
#[repr(C)]
pub(crate) struct Iocb {
    data: u64,
    key: u32,
    rw_flags: u32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    /// The buffer, or the iovec array for the vectored opcodes.
    buf: u64,
    /// Bytes, or the iovec count for the vectored opcodes.
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FSYNC: u16 = 2;
const IOCB_CMD_FDSYNC: u16 = 3;
const IOCB_CMD_PREADV: u16 = 7;
const IOCB_CMD_PWRITEV: u16 = 8;

/// What one iocb asks for: (request type, descriptor, bytes), or `None`
/// for the opcodes that move no file data (poll, no-op).
///
/// # Safety
/// `iocb` points to a valid iocb; for the vectored opcodes its `buf` and
/// `nbytes` describe an iovec array (libaio's contract: the kernel reads
/// the same array).
pub(crate) unsafe fn request_of(iocb: *const Iocb) -> Option<(RequestType, c_int, u64)> {
    // SAFETY: the caller's contract.
    let io = unsafe { &*iocb };
    let fd = io.fildes as c_int;
    let vec_len = || {
        // SAFETY: the caller's contract for the vectored opcodes.
        unsafe { crate::hooks::iov_len(io.buf as *const libc::iovec, io.nbytes as c_int) }
    };
    match io.opcode {
        IOCB_CMD_PREAD => Some((RequestType::READ, fd, io.nbytes)),
        IOCB_CMD_PWRITE => Some((RequestType::WRITE, fd, io.nbytes)),
        IOCB_CMD_PREADV => Some((RequestType::READ, fd, vec_len())),
        IOCB_CMD_PWRITEV => Some((RequestType::WRITE, fd, vec_len())),
        IOCB_CMD_FSYNC => Some((RequestType::FSYNC, fd, 0)),
        IOCB_CMD_FDSYNC => Some((RequestType::FDATASYNC, fd, 0)),
        _ => None,
    }
}

/// What one POSIX AIO control block asks for when submitted as `op`
/// (`LIO_READ`, `LIO_WRITE`; `LIO_NOP` and anything else move nothing):
/// (request type, descriptor, bytes).
///
/// # Safety
/// `cb` points to a valid control block (the AIO call's own contract: glibc
/// reads the same fields).
pub(crate) unsafe fn posix_request(
    cb: *const libc::aiocb,
    op: c_int,
) -> Option<(RequestType, c_int, u64)> {
    // SAFETY: the caller's contract.
    let cb = unsafe { &*cb };
    let rt = match op {
        libc::LIO_READ => RequestType::READ,
        libc::LIO_WRITE => RequestType::WRITE,
        _ => return None,
    };
    Some((rt, cb.aio_fildes, cb.aio_nbytes as u64))
}

/// Set once the process was told that io_uring is not enforced.
static URING_REPORTED: AtomicBool = AtomicBool::new(false);

/// The process is setting up an io_uring instance: say once that its I/O
/// passes unenforced and uncounted.
pub(crate) fn uring_setup() {
    if rt::active() && !URING_REPORTED.swap(true, Ordering::Relaxed) {
        rt::raw_stderr(&format!(
            "paio: process {} uses io_uring: its io_uring I/O is neither enforced nor counted \
             (paio sees libc's I/O calls and libaio's io_submit; docs/preload.md)\n",
            std::process::id()
        ));
    }
}
