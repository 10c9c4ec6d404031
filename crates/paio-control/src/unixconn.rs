//! Talking to a Unix socket's server within a deadline.
//!
//! A blocking `connect` to a listener whose queue is full (a stopped or
//! overloaded paiod) waits until the server accepts, possibly forever, and a
//! per-read timeout lets a server that trickles a byte at a time hold a
//! client forever. [`connect`] and [`DeadlineStream`] bound both.

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// Connects to the stream socket at `path`, waiting at most `timeout` for a
/// place in its listen queue (`Duration::ZERO`: one try). A queue still
/// full at the deadline is [`io::ErrorKind::TimedOut`], saying so; every
/// other failure is `connect`'s own error. The stream returned is blocking.
pub fn connect(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let addr = SocketAddrUnix::new(path)?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        // A Unix stream connect never returns EINPROGRESS: it succeeds at
        // once, or fails with EAGAIN while the listener's queue is full.
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => {
                let s = UnixStream::from(fd);
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(Errno::AGAIN) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "its listen queue stayed full for {timeout:?} (the server is \
                             stopped, hung or overloaded)"
                        ),
                    ));
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A stream whose reads all end by one deadline: each read waits at most
/// what is left, and a read at or past the deadline is
/// [`io::ErrorKind::TimedOut`].
pub struct DeadlineStream<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl<'a> DeadlineStream<'a> {
    /// Reads of `stream` that end within `timeout` from now, all together.
    pub fn new(stream: &'a UnixStream, timeout: Duration) -> Self {
        DeadlineStream {
            stream,
            deadline: Instant::now() + timeout,
        }
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        match (&*self.stream).read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::TimedOut.into()),
            r => r,
        }
    }
}

/// A stream socket listening at `path` with a queue of `backlog`, which
/// never accepts: a stopped server, for tests.
#[cfg(test)]
pub(crate) fn listener_that_never_accepts(path: &Path, backlog: i32) -> rustix::fd::OwnedFd {
    let l = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    rustix::net::bind(&l, &SocketAddrUnix::new(path).unwrap()).unwrap();
    rustix::net::listen(&l, backlog).unwrap();
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_full_listen_queue_times_out_instead_of_hanging() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("s");
        // Its queue fills after two connections.
        let listener = listener_that_never_accepts(&path, 1);
        let mut held = Vec::new();
        let err = loop {
            match connect(&path, Duration::ZERO) {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
            assert!(held.len() < 100, "the queue never filled");
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(
            err.to_string().contains("listen queue stayed full"),
            "{err}"
        );
        let t = Instant::now();
        let err = connect(&path, Duration::from_millis(100)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(100));
        // Nothing listening: connect's own error.
        drop(listener);
        let err = connect(&d.path().join("none"), Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn reads_end_by_one_deadline_however_the_bytes_trickle() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            // A byte every 40 ms: each read is quick, the whole is not.
            for _ in 0..20 {
                if b.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        let mut r = DeadlineStream::new(&a, Duration::from_millis(200));
        let mut got = 0;
        let err = loop {
            match r.read(&mut [0u8; 16]) {
                Ok(n) => got += n,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(got < 20, "all {got} bytes arrived within 200 ms of 800");
        drop(a);
        writer.join().unwrap();
    }
}
