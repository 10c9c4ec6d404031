//! The stage's side of the control plane: a background thread that
//! registers the stage with `paiod`, applies the rules it sends, answers its
//! collect requests, and reconnects when it goes away.
//!
//! Guarantees:
//! - The request path never waits for this thread: rules are applied with
//!   [`Stage::try_apply_all`], which swaps an immutable snapshot.
//! - If paiod is absent, the stage keeps running whatever it has (its policy
//!   file or embedded default, then the last rules received) and the thread
//!   retries with exponential backoff between [`ControlOptions::backoff_min`]
//!   and [`ControlOptions::backoff_max`]; after a session it re-registers
//!   and paiod re-installs its policy.
//! - Rules are accepted only from a peer whose kernel-reported uid
//!   (`SO_PEERCRED`) and socket file owner are this process's uid or root
//!   (or [`ControlOptions::owner_uid`]).
//! - No async runtime: one thread, blocking I/O with a short read timeout
//!   so [`ControlClient::stop`] returns promptly.

use std::io::{self, Read};
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::protocol::{self, ErrorCode, FrameDecoder, FrameError, Hello, Message};
use crate::stage::Stage;

/// File name of paiod's socket inside its runtime directory.
pub const SOCKET_NAME: &str = "paiod.sock";

/// Bytes a Unix socket's path may have (`sun_path` less its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Checks that `path` can name a Unix socket: a longer path can never be
/// connected to, so a stage given one would wait for paiod forever.
pub fn check_socket_path(path: &Path) -> Result<(), String> {
    let n = path.as_os_str().len();
    if n > MAX_SOCKET_PATH {
        return Err(format!(
            "{n} bytes, more than a Unix socket's path may have ({MAX_SOCKET_PATH}); choose a \
             shorter path"
        ));
    }
    Ok(())
}

/// The default socket: `$XDG_RUNTIME_DIR/paio/paiod.sock`, else
/// `/run/paio/paiod.sock` for root, else `/tmp/paio-<uid>/paiod.sock`.
pub fn default_socket_path() -> PathBuf {
    default_socket_path_from(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from))
}

/// [`default_socket_path`] with the runtime directory given explicitly.
pub fn default_socket_path_from(xdg_runtime_dir: Option<PathBuf>) -> PathBuf {
    match xdg_runtime_dir.filter(|d| d.is_absolute()) {
        Some(dir) => dir.join("paio").join(SOCKET_NAME),
        None => {
            let uid = rustix::process::geteuid().as_raw();
            if uid == 0 {
                PathBuf::from("/run/paio").join(SOCKET_NAME)
            } else {
                PathBuf::from(format!("/tmp/paio-{uid}")).join(SOCKET_NAME)
            }
        }
    }
}

/// How a [`ControlClient`] connects and retries.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// paiod's socket.
    pub socket: PathBuf,
    /// First wait after a failed connection attempt. Shorter reconnects
    /// sooner after a paiod restart; longer costs fewer wake-ups while paiod
    /// is away. Default 50 ms.
    pub backoff_min: Duration,
    /// Longest wait between attempts (the backoff doubles up to it).
    /// Default 2 s.
    pub backoff_max: Duration,
    /// The uid paiod must run as; `None`: this process's uid or root.
    pub owner_uid: Option<u32>,
    /// Largest frame accepted from paiod. Default
    /// [`protocol::DEFAULT_MAX_FRAME`].
    pub max_frame: usize,
    /// The executable reported in the hello, when known.
    pub exe: Option<String>,
    /// Called first thing on the client's thread (the interposer uses it to
    /// let the thread's own I/O pass through).
    pub on_thread_start: Option<fn()>,
    /// Where diagnostics go (none by default: the host's stderr stays
    /// untouched).
    pub log: Option<fn(&str)>,
}

impl ControlOptions {
    /// Options for `socket` with the defaults above.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            owner_uid: None,
            max_frame: protocol::DEFAULT_MAX_FRAME,
            exe: None,
            on_thread_start: None,
            log: None,
        }
    }
}

/// A snapshot of the client's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlStatus {
    /// Registered with paiod right now.
    pub connected: bool,
    /// Sessions that reached `welcome` so far.
    pub sessions: u64,
    /// Rule batches applied (acknowledged) so far.
    pub rule_batches: u64,
    /// Collect requests answered so far.
    pub collects: u64,
    /// paiod's id of the current (or last) registration.
    pub stage_id: u64,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    connected: AtomicBool,
    sessions: AtomicU64,
    rule_batches: AtomicU64,
    collects: AtomicU64,
    stage_id: AtomicU64,
    /// A clone of the live connection, so `stop` can shut it down.
    stream: Mutex<Option<UnixStream>>,
}

/// The background thread connecting a stage to paiod. Dropping it stops the
/// thread (after a goodbye to paiod when connected).
pub struct ControlClient {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl ControlClient {
    /// Starts the thread for `stage` (an `Arc<Stage>`, a `&'static Stage`,
    /// ...). Fails only if the thread cannot be spawned.
    pub fn start<S>(stage: S, options: ControlOptions) -> io::Result<ControlClient>
    where
        S: Deref<Target = Stage> + Send + 'static,
    {
        let shared = Arc::new(Shared::default());
        let inner = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("paio-control".into())
            .spawn(move || {
                if let Some(f) = options.on_thread_start {
                    f();
                }
                run(&stage, &options, &inner);
            })?;
        Ok(ControlClient {
            shared,
            thread: Some(thread),
        })
    }

    /// The client's state now.
    pub fn status(&self) -> ControlStatus {
        let s = &self.shared;
        ControlStatus {
            connected: s.connected.load(Ordering::Acquire),
            sessions: s.sessions.load(Ordering::Acquire),
            rule_batches: s.rule_batches.load(Ordering::Acquire),
            collects: s.collects.load(Ordering::Acquire),
            stage_id: s.stage_id.load(Ordering::Acquire),
        }
    }

    /// Stops the thread: says goodbye to paiod when connected and waits for
    /// the thread to end (at most one read timeout, 100 ms).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ControlClient {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How often a blocked read wakes up to check for `stop`.
const POLL: Duration = Duration::from_millis(100);
/// How long paiod has to answer the hello.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(5);

fn log(options: &ControlOptions, msg: &str) {
    if let Some(f) = options.log {
        f(msg);
    }
}

/// The thread: connect, serve, back off, repeat until stopped.
fn run(stage: &Stage, options: &ControlOptions, shared: &Shared) {
    let mut backoff = options.backoff_min;
    let mut last_error = String::new();
    while !shared.stop.load(Ordering::Acquire) {
        match session(stage, options, shared) {
            Ok(SessionEnd::Stopped) => break,
            Ok(SessionEnd::Closed { registered }) => {
                if registered {
                    backoff = options.backoff_min;
                    log(options, "paiod closed the connection; reconnecting");
                }
            }
            Err(e) => {
                let msg = e.to_string();
                if msg != last_error {
                    log(options, &format!("control plane: {msg}; retrying"));
                    last_error = msg;
                }
            }
        }
        shared.connected.store(false, Ordering::Release);
        *shared.stream.lock().unwrap_or_else(|e| e.into_inner()) = None;
        sleep_unless_stopped(shared, backoff);
        backoff = (backoff * 2).min(options.backoff_max);
    }
    shared.connected.store(false, Ordering::Release);
}

fn sleep_unless_stopped(shared: &Shared, total: Duration) {
    let deadline = Instant::now() + total;
    while !shared.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(POLL));
    }
}

enum SessionEnd {
    Stopped,
    Closed { registered: bool },
}

/// Why a session could not start or ended badly.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{path}: {source}")]
    Connect { path: String, source: io::Error },
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Protocol(String),
}

/// Checks that the paiod answering on `stream` (connected to `path`) runs
/// as an allowed user, `owner_uid` or else this process's effective uid or
/// root (a set-user-ID program talks to its owner's paiod, not its
/// caller's): the
/// peer's uid from the kernel (`SO_PEERCRED`) and the socket file's owner.
/// Err: a message naming the socket, the uid found and the one expected.
/// A stage checks this before it accepts rules; `paio status` and
/// `paio ctl` before they trust a report or say a value was set.
pub fn check_paiod(stream: &UnixStream, path: &Path, owner_uid: Option<u32>) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    let allowed = |uid: u32| match owner_uid {
        Some(owner) => uid == owner,
        None => uid == me || uid == 0,
    };
    let cred = rustix::net::sockopt::socket_peercred(stream)
        .map_err(|e| format!("{}: SO_PEERCRED: {e}", path.display()))?;
    let peer = cred.uid.as_raw();
    if !allowed(peer) {
        return Err(format!(
            "{}: paiod runs as uid {peer}; expected uid {} or root",
            path.display(),
            owner_uid.unwrap_or(me)
        ));
    }
    let owner = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .uid();
    if !allowed(owner) {
        return Err(format!(
            "{}: the socket belongs to uid {owner}; expected uid {} or root",
            path.display(),
            owner_uid.unwrap_or(me)
        ));
    }
    Ok(())
}

fn session(
    stage: &Stage,
    options: &ControlOptions,
    shared: &Shared,
) -> Result<SessionEnd, SessionError> {
    let path = &options.socket;
    let mut stream = UnixStream::connect(path).map_err(|source| SessionError::Connect {
        path: path.display().to_string(),
        source,
    })?;
    check_paiod(&stream, path, options.owner_uid).map_err(SessionError::Denied)?;
    stream.set_read_timeout(Some(POLL))?;
    *shared.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream.try_clone()?);

    let hello = Message::Hello(Box::new(Hello {
        version: protocol::VERSION,
        ppid: rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32),
        user: user_name(rustix::process::getuid().as_raw()),
        exe: options.exe.clone(),
        info: stage.info(),
    }));
    protocol::write_message(&mut stream, &hello)?;

    let mut decoder = FrameDecoder::new(options.max_frame);
    let mut buf = vec![0u8; 64 * 1024];
    let mut registered = false;
    let started = Instant::now();
    loop {
        if shared.stop.load(Ordering::Acquire) {
            if registered {
                let _ = protocol::write_message(
                    &mut stream,
                    &Message::Goodbye {
                        reason: Some("stage stopping".into()),
                    },
                );
            }
            return Ok(SessionEnd::Stopped);
        }
        if !registered && started.elapsed() > WELCOME_TIMEOUT {
            return Err(SessionError::Protocol(format!(
                "no welcome from paiod within {WELCOME_TIMEOUT:?}"
            )));
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(SessionEnd::Closed { registered }),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                return if registered {
                    Ok(SessionEnd::Closed { registered })
                } else {
                    Err(e.into())
                }
            }
        };
        decoder.push(&buf[..n]);
        loop {
            let payload = match decoder.next_frame() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(FrameError::TooLarge { len, max }) => {
                    let msg = Message::error(
                        None,
                        ErrorCode::TooLarge,
                        format!("frame of {len} bytes exceeds the stage's limit of {max}"),
                    );
                    protocol::write_message(&mut stream, &msg)?;
                    continue;
                }
                Err(e) => return Err(SessionError::Protocol(e.to_string())),
            };
            let reply = match protocol::decode(&payload) {
                Err(e) => Some(Message::error(None, ErrorCode::BadMessage, e.to_string())),
                Ok(msg) => match handle(stage, shared, msg, &mut registered, options) {
                    Handled::Reply(m) => Some(m),
                    Handled::Nothing => None,
                    Handled::Close => return Ok(SessionEnd::Closed { registered }),
                },
            };
            if let Some(reply) = reply {
                protocol::write_message(&mut stream, &reply)?;
            }
        }
    }
}

enum Handled {
    Reply(Message),
    Nothing,
    Close,
}

/// One message from paiod.
fn handle(
    stage: &Stage,
    shared: &Shared,
    msg: Message,
    registered: &mut bool,
    options: &ControlOptions,
) -> Handled {
    match msg {
        Message::Welcome {
            version, stage_id, ..
        } => {
            if version != protocol::VERSION {
                return Handled::Close;
            }
            *registered = true;
            shared.stage_id.store(stage_id, Ordering::Release);
            shared.sessions.fetch_add(1, Ordering::AcqRel);
            shared.connected.store(true, Ordering::Release);
            log(
                options,
                &format!("registered with paiod as stage {stage_id}"),
            );
            Handled::Nothing
        }
        Message::Rules { id, rules } if *registered => match stage.try_apply_all(&rules) {
            Ok(()) => {
                shared.rule_batches.fetch_add(1, Ordering::AcqRel);
                Handled::Reply(Message::Ack { id })
            }
            Err((index, e)) => Handled::Reply(Message::Error {
                id: Some(id),
                code: ErrorCode::Rule,
                message: format!("rule {index}: {e}"),
                index: Some(index),
            }),
        },
        Message::Collect { id } if *registered => {
            shared.collects.fetch_add(1, Ordering::AcqRel);
            Handled::Reply(Message::Stats {
                id,
                stats: Box::new(stage.collect()),
            })
        }
        Message::Goodbye { reason } => {
            log(
                options,
                &format!("paiod said goodbye: {}", reason.unwrap_or_default()),
            );
            Handled::Close
        }
        Message::Error { code, message, .. } => {
            log(options, &format!("paiod reported {code:?}: {message}"));
            if *registered {
                Handled::Nothing
            } else {
                // Refused registration (version, credentials): retry later.
                Handled::Close
            }
        }
        Message::Rules { id, .. } | Message::Collect { id } => Handled::Reply(Message::error(
            Some(id),
            ErrorCode::Unexpected,
            "expected welcome before rules or collect",
        )),
        other => Handled::Reply(Message::error(
            None,
            ErrorCode::Unexpected,
            format!(
                "a stage does not accept `{}` messages",
                message_type(&other)
            ),
        )),
    }
}

/// The `"type"` tag of `msg`.
pub fn message_type(msg: &Message) -> &'static str {
    match msg {
        Message::Hello(_) => "hello",
        Message::Welcome { .. } => "welcome",
        Message::Rules { .. } => "rules",
        Message::Ack { .. } => "ack",
        Message::Collect { .. } => "collect",
        Message::Stats { .. } => "stats",
        Message::Error { .. } => "error",
        Message::Goodbye { .. } => "goodbye",
    }
}

/// The name of `uid` from /etc/passwd, or the number.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut f = line.split(':');
                let name = f.next()?;
                let id = f.nth(1)?.parse::<u32>().ok()?;
                (id == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{read_frame, write_message, DEFAULT_MAX_FRAME};
    use crate::rule::Rule;
    use std::os::unix::net::UnixListener;

    fn stage() -> Arc<Stage> {
        Arc::new(
            Stage::from_policy_str(
                r#"
                [stage]
                name = "client-test"
                [[channel]]
                name = "read"
                match = { request_type = "read" }
                "#,
                "<test>",
            )
            .unwrap(),
        )
    }

    fn recv(s: &mut UnixStream) -> Message {
        let p = read_frame(s, DEFAULT_MAX_FRAME).unwrap().unwrap();
        protocol::decode(&p).unwrap()
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn registers_applies_rules_answers_collect_and_reconnects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("paiod.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let stage = stage();
        let mut opts = ControlOptions::new(&path);
        opts.backoff_min = Duration::from_millis(5);
        opts.backoff_max = Duration::from_millis(20);
        let client = ControlClient::start(Arc::clone(&stage), opts).unwrap();

        let (mut s, _) = listener.accept().unwrap();
        let Message::Hello(hello) = recv(&mut s) else {
            panic!("expected hello")
        };
        assert_eq!(hello.version, protocol::VERSION);
        assert_eq!(hello.info.identity.name, "client-test");
        assert_eq!(hello.info.identity.pid, std::process::id());
        // Rules before welcome are refused.
        write_message(&mut s, &Message::Collect { id: 1 }).unwrap();
        assert!(matches!(
            recv(&mut s),
            Message::Error {
                id: Some(1),
                code: ErrorCode::Unexpected,
                ..
            }
        ));
        write_message(
            &mut s,
            &Message::Welcome {
                version: protocol::VERSION,
                stage_id: 42,
                period_ms: 100,
            },
        )
        .unwrap();
        let rules = vec![Rule::CreateChannel { name: "w".into() }];
        write_message(
            &mut s,
            &Message::Rules {
                id: 2,
                rules: rules.clone(),
            },
        )
        .unwrap();
        assert_eq!(recv(&mut s), Message::Ack { id: 2 });
        assert!(stage.info().channels.iter().any(|c| c.name == "w"));
        // The same creation again fails as a transaction, with its index.
        write_message(&mut s, &Message::Rules { id: 3, rules }).unwrap();
        assert!(matches!(
            recv(&mut s),
            Message::Error {
                id: Some(3),
                code: ErrorCode::Rule,
                index: Some(0),
                ..
            }
        ));
        // Garbage is answered, not fatal.
        s.write_all_frame(b"{\"type\":\"nope\"}");
        assert!(matches!(
            recv(&mut s),
            Message::Error {
                code: ErrorCode::BadMessage,
                ..
            }
        ));
        write_message(&mut s, &Message::Collect { id: 4 }).unwrap();
        let Message::Stats { id: 4, stats } = recv(&mut s) else {
            panic!("expected stats")
        };
        assert_eq!(stats.stage, "client-test");
        wait_for("connected", || client.status().connected);
        assert_eq!(client.status().stage_id, 42);
        assert_eq!(client.status().rule_batches, 1);

        // paiod goes away: the stage keeps its rules and comes back.
        drop(s);
        let (mut s, _) = listener.accept().unwrap();
        let Message::Hello(hello) = recv(&mut s) else {
            panic!("expected hello")
        };
        assert!(hello.info.channels.iter().any(|c| c.name == "w"));
        write_message(
            &mut s,
            &Message::Welcome {
                version: protocol::VERSION,
                stage_id: 43,
                period_ms: 100,
            },
        )
        .unwrap();
        wait_for("second session", || client.status().sessions == 2);
        client.stop();
        assert!(matches!(recv(&mut s), Message::Goodbye { .. }));
    }

    #[test]
    fn refuses_a_peer_of_another_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("paiod.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let stage = stage();
        let me = rustix::process::getuid().as_raw();
        let mut opts = ControlOptions::new(&path);
        opts.owner_uid = Some(me.wrapping_add(1));
        opts.backoff_min = Duration::from_millis(5);
        let client = ControlClient::start(stage, opts).unwrap();
        // The client connects, checks and hangs up without a hello.
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        assert!(read_frame(&mut s, DEFAULT_MAX_FRAME).unwrap().is_none());
        assert!(!client.status().connected);
        client.stop();
    }

    #[test]
    fn default_socket_paths() {
        assert_eq!(
            default_socket_path_from(Some("/run/user/1000".into())),
            PathBuf::from("/run/user/1000/paio/paiod.sock")
        );
        let fallback = default_socket_path_from(Some("relative".into()));
        assert!(fallback.ends_with("paiod.sock"));
        assert!(fallback.is_absolute());
    }

    trait WriteFrame {
        fn write_all_frame(&mut self, payload: &[u8]);
    }

    impl WriteFrame for UnixStream {
        fn write_all_frame(&mut self, payload: &[u8]) {
            use std::io::Write;
            let mut f = (payload.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(payload);
            self.write_all(&f).unwrap();
        }
    }
}
