//! Running the command: signal forwarding and exit status.
//!
//! While the command runs, `paio` blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT
//! (so it never dies before the command) and a thread reads them from a
//! `signalfd`. A signal sent to `paio` by a process (`kill`, a job
//! scheduler, a container runtime) is forwarded to the command. A signal the
//! kernel sent (`si_code == SI_KERNEL`: Ctrl-C, Ctrl-\, a terminal hangup) is
//! not: the command is in `paio`'s process group and got it from the
//! terminal already, and sending it twice would break programs that react
//! to a second Ctrl-C. `paio` then waits for the command to end, whatever
//! it does with the signal.
//!
//! The command is started with `posix_spawn`, which sets its signal mask
//! back to the one `paio` had before blocking (`std::process::Command`
//! passes the spawning thread's mask on, with the forwarded signals
//! blocked, and can only change it with an `unsafe` `pre_exec`) and resets
//! SIGPIPE to its default action, as `std` does. (glibc's `posix_spawn`,
//! which `std` also uses when it can, leaves glibc's two internal real-time
//! signals, 32 and 33, ignored in the command; glibc programs install their
//! own handlers for them.)
//!
//! The command is waited for without being reaped first (`waitid` with
//! `WNOWAIT`), and a signal is forwarded only while it has not been reaped,
//! so a forwarded signal never reaches a recycled pid.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::spawn::{posix_spawn, PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{kill, raise, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// The signals forwarded to the command.
pub const FORWARDED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// The shell that runs a command `execve` rejects with ENOEXEC (a script
/// without `#!`), as `execvp` does.
const SHELL: &str = "/bin/sh";

/// The exit status `paio` returns for the command's `status`: its exit code,
/// or 128 + the signal that killed it (the shell's convention, used when
/// [`die_by_signal`] cannot end `paio` by that signal).
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => crate::EXIT_PAIO_FAILED,
    }
}

/// Ends `paio` the way a signal `sig` ended the command: by that signal,
/// so that the parent sees `paio` killed by it (a shell running a script
/// then stops at a Ctrl-C as it would without `paio`), as GNU `timeout`
/// does. `paio` leaves no core file of its own (the command wrote its own,
/// if any). Returns 128 + `sig` only when the signal does not end the
/// process: SIGPIPE, which the Rust runtime ignores, or a signal ignored
/// since `paio` started (SIGINT in a background job); `paio` then exits
/// with the shell's number for it.
pub fn die_by_signal(sig: i32) -> i32 {
    if let Ok(signal) = Signal::try_from(sig) {
        if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, hard);
        }
        let _ = SigSet::from(signal).thread_unblock();
        // The Rust runtime's stack-overflow handler takes SIGSEGV and SIGBUS
        // first and puts back the default action for anything but a guard
        // page hit, so a second raise ends the process for those.
        let _ = raise(signal);
        let _ = raise(signal);
    }
    128 + sig
}

/// The exit status for a command that could not be started (`execve`
/// failed with `err`): 127 if not found, 126 otherwise.
pub fn spawn_error_code(err: &io::Error) -> i32 {
    match err.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOENT) | Some(Errno::ENOTDIR) => crate::EXIT_NOT_FOUND,
        _ => crate::EXIT_CANNOT_EXECUTE,
    }
}

/// Runs `cmd`'s program with `arg0` as `argv[0]`, `cmd`'s arguments and
/// `paio`'s environment with `cmd`'s changes, and waits for it, forwarding
/// signals (see the module documentation). The command inherits `paio`'s
/// standard streams and working directory (`cmd`'s other settings are not
/// used). Returns the spawn error if it could not be started.
///
/// The forwarded signals stay blocked in the calling process afterwards, so
/// that `paio` finishes its summary and clean-up whatever arrives; the
/// caller is expected to exit soon after.
pub fn run_forwarding_signals(cmd: &Command, arg0: &OsStr) -> io::Result<ExitStatus> {
    let set: SigSet = FORWARDED.into_iter().collect();
    // Blocking before the signalfd and the forwarding thread exist means no
    // forwarded signal can end paio from here on; the command gets the old
    // mask back.
    let old = set.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
    // Without the signalfd (out of resources), the command still runs and is
    // waited for; signals to paio then stay pending, unforwarded. Close on
    // exec: the command does not inherit it.
    let signals = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC).ok();
    let pid = match spawn(cmd, arg0, &old) {
        Ok(pid) => pid,
        Err(e) => {
            // Restores the mask saved above.
            let _ = old.thread_set_mask();
            return Err(e);
        }
    };
    let reaped = Arc::new(Mutex::new(false));
    if let Some(signals) = signals {
        let reaped = reaped.clone();
        // Without the thread, as without the signalfd.
        let _ = std::thread::Builder::new()
            .name("paio-signals".into())
            .spawn(move || forward_loop(&signals, pid, &reaped));
    }
    wait_unreaped(pid);
    *reaped.lock().unwrap_or_else(|e| e.into_inner()) = true;
    wait(pid)
}

/// Starts the command with `posix_spawn`: signal mask `mask`, SIGPIPE reset
/// to its default action. A file `execve` rejects with ENOEXEC is run by
/// `/bin/sh`, as `execvp` (which `std::process::Command` uses) does.
fn spawn(cmd: &Command, arg0: &OsStr, mask: &SigSet) -> io::Result<Pid> {
    let program = c_string(cmd.get_program())?;
    let args = cmd
        .get_args()
        .map(c_string)
        .collect::<io::Result<Vec<_>>>()?;
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => env.insert(k.to_os_string(), v.to_os_string()),
            None => env.remove(k),
        };
    }
    let envp = env
        .into_iter()
        .map(|(mut k, v)| {
            k.push("=");
            k.push(v);
            c_string(&k)
        })
        .collect::<io::Result<Vec<_>>>()?;

    let actions = PosixSpawnFileActions::init()?;
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_sigmask(mask)?;
    attr.set_sigdefault(&SigSet::from(Signal::SIGPIPE))?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;

    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(c_string(arg0)?);
    argv.extend(args.iter().cloned());
    match posix_spawn(program.as_c_str(), &actions, &attr, &argv, &envp) {
        Err(Errno::ENOEXEC) => {
            let shell = c_string(OsStr::new(SHELL))?;
            let mut argv = Vec::with_capacity(args.len() + 2);
            argv.push(shell.clone());
            argv.push(program);
            argv.extend(args);
            Ok(posix_spawn(
                shell.as_c_str(),
                &actions,
                &attr,
                &argv,
                &envp,
            )?)
        }
        r => Ok(r?),
    }
}

/// `s` as a C string; an interior NUL byte is an error, as with `Command`.
fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.to_os_string().into_vec()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("nul byte found in provided data: {:?}", s),
        )
    })
}

fn forward_loop(signals: &SignalFd, pid: Pid, reaped: &Mutex<bool>) {
    loop {
        // Blocks until one of the forwarded signals is pending.
        let info = match signals.read_signal() {
            Ok(Some(info)) => info,
            Ok(None) | Err(Errno::EINTR) => continue,
            Err(_) => return,
        };
        if info.ssi_code == nix::libc::SI_KERNEL {
            // From the terminal, to the whole foreground process group: the
            // command got it too.
            continue;
        }
        let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
            continue;
        };
        let done = reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*done {
            // `pid` is our unreaped child (a zombie at worst).
            let _ = kill(pid, sig);
        }
    }
}

/// Waits until `pid` has ended, leaving it to be reaped.
fn wait_unreaped(pid: Pid) {
    // WNOWAIT leaves the child waitable.
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    while waitid(Id::Pid(pid), flags) == Err(Errno::EINTR) {}
}

/// Reaps `pid` and returns its status.
fn wait(pid: Pid) -> io::Result<ExitStatus> {
    let status = loop {
        match waitpid(pid, None) {
            Err(Errno::EINTR) => continue,
            r => break r?,
        }
    };
    // The raw wait status `ExitStatus` decodes: the exit code in bits 8..16,
    // or the signal in bits 0..=6 and the core dump flag in bit 7.
    match status {
        WaitStatus::Exited(_, code) => Ok(ExitStatus::from_raw((code & 0xff) << 8)),
        WaitStatus::Signaled(_, sig, core) => Ok(ExitStatus::from_raw(
            sig as i32 | if core { 0x80 } else { 0 },
        )),
        other => Err(io::Error::other(format!(
            "unexpected wait status {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        let st = Command::new("sh").args(["-c", "exit 3"]).status().unwrap();
        assert_eq!(exit_code(st), 3);
        let st = Command::new("sh")
            .args(["-c", "kill -TERM $$"])
            .status()
            .unwrap();
        assert_eq!(exit_code(st), 143);
        assert_eq!(
            spawn_error_code(&io::Error::from_raw_os_error(Errno::ENOENT as i32)),
            127
        );
        assert_eq!(
            spawn_error_code(&io::Error::from_raw_os_error(Errno::EACCES as i32)),
            126
        );
        assert_eq!(
            spawn_error_code(&io::Error::from_raw_os_error(Errno::ENOEXEC as i32)),
            126
        );
    }
}
