//! `paio doctor`: why a program would not be enforced under `paio run`, or
//! why a running one is not, each problem with its fix.
//!
//! For a command it checks, without running it: that the interposer is
//! found; that the command resolves; that the executable (and a script's
//! interpreter) is dynamically linked, not Go, not privilege-elevating for
//! the caller (set-ID to another id, capabilities for a non-root caller: the
//! loader drops `LD_PRELOAD` for those), and which I/O
//! libraries it links (liburing bypasses the interposer, libaio is enforced
//! at submission); the policy file, as `paio run` checks it; and that
//! paiod answers on the control socket. For a process (`--pid`) it checks
//! that the interposer is mapped in it and, when its environment names a
//! control socket, that paiod lists its stage.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use paio_control::ctl::{self, CtlCommand, StatusReport};

use crate::privilege::Elevation;
use crate::{args, exe, preload};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// As it should be.
    Ok,
    /// Worth knowing; not in the way of enforcement.
    Note,
    /// Requests will not be (fully) enforced.
    Problem,
}

/// One thing `paio doctor` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// What was found.
    pub what: String,
    /// What to do about it (problems and notes).
    pub fix: Option<String>,
}

impl Finding {
    fn ok(what: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Ok,
            what: what.into(),
            fix: None,
        }
    }

    fn note(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Note,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }

    fn problem(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Problem,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.severity {
            Severity::Ok => "ok",
            Severity::Note => "note",
            Severity::Problem => "problem",
        };
        write!(f, "{tag}: {}", self.what)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n  fix: {fix}")?;
        }
        Ok(())
    }
}

/// What `paio doctor -- CMD` checks.
#[derive(Debug, Clone)]
pub struct CommandCheck<'a> {
    /// The command, as given to `paio run`.
    pub command: &'a OsStr,
    /// `PATH`.
    pub path_env: Option<&'a OsStr>,
    /// `--policy`.
    pub policy: Option<&'a Path>,
    /// `--control`'s socket.
    pub control: Option<&'a Path>,
    /// The `paio` executable (the interposer is looked for next to it).
    pub paio_exe: &'a Path,
    /// `PAIO_LIB`.
    pub paio_lib: Option<&'a OsStr>,
}

/// The findings for a command that would run under `paio run`.
pub fn check_command(c: &CommandCheck<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    match preload::find_library(c.paio_lib, c.paio_exe) {
        Ok(lib) => out.push(Finding::ok(format!("interposer: {}", lib.display()))),
        Err(e) => out.push(Finding::problem(
            e.to_string(),
            "install paio (make install) or set PAIO_LIB to libpaio_preload.so",
        )),
    }
    match exe::resolve_command(c.command, c.path_env) {
        Ok(path) => {
            executable(&path, c.path_env, &mut out, 0);
            let name = path.file_name().and_then(OsStr::to_str).unwrap_or_default();
            if LAUNCHERS.contains(&name) {
                out.push(Finding::note(
                    format!(
                        "{name} starts another program: this checked {name}, not the program \
                         it runs (a static one would not be enforced)"
                    ),
                    "check that program too: paio doctor -- PROGRAM",
                ));
            }
        }
        Err(e) => {
            let fix = match e {
                exe::ResolveError::NotFound(_) => {
                    "give the command's path, or add its directory to PATH"
                }
                exe::ResolveError::NotExecutable { .. } => {
                    "give a program: make the file executable (chmod +x), or name the program \
                     that runs it"
                }
            };
            out.push(Finding::problem(e.to_string(), fix))
        }
    }
    if let Some(p) = c.policy {
        match args::check_policy_file(p) {
            Ok(stage) => match args::check_not_paused_forever(&stage, p, c.control.is_some()) {
                Ok(()) => out.push(Finding::ok(format!("policy {}: valid", p.display()))),
                Err(e) => out.push(Finding::problem(e.to_string(), "see the message")),
            },
            Err(e) => out.push(Finding::problem(
                e.to_string(),
                "correct the policy (docs/policies.md)",
            )),
        }
    }
    if let Some(sock) = c.control {
        out.push(control(sock));
    }
    out
}

/// Programs that start the program their arguments name.
const LAUNCHERS: [&str; 11] = [
    "env", "nice", "timeout", "nohup", "stdbuf", "taskset", "ionice", "chrt", "setsid", "time",
    "xargs",
];

/// Whether the start of the file at `path` reads as text (no NUL byte in
/// its first 512 bytes), as a script without `#!` does.
fn is_text(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 512];
    std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .is_ok_and(|n| n > 0 && !head[..n].contains(&0))
}

/// Checks executable `path`; `depth` > 0 for a script's interpreter.
fn executable(path: &Path, path_env: Option<&OsStr>, out: &mut Vec<Finding>, depth: u32) {
    let p = path.display();
    match Elevation::of(path) {
        Some(Elevation::Harmless(why)) => {
            out.push(Finding::ok(format!("{p}: {why}; LD_PRELOAD applies")));
        }
        Some(e) => {
            if let (Some(what), Some(fix)) = (e.problem(&p.to_string()), e.fix()) {
                out.push(Finding::problem(what, fix));
            }
        }
        None => {}
    }
    let info = match exe::inspect(path) {
        Ok(i) => i,
        Err(e) => {
            out.push(Finding::problem(
                format!("{p}: cannot read its headers: {e}"),
                "check that the file is readable",
            ));
            return;
        }
    };
    if let Some(w) = info.warning(path) {
        let w = w.strip_prefix("warning: ").unwrap_or(&w).to_string();
        out.push(Finding::problem(
            w,
            "nothing at user level can interpose it: limit it from outside (cgroup io.max), or use a dynamically linked build",
        ));
        return;
    }
    match &info.linkage {
        exe::Linkage::Dynamic(_) => {
            out.push(Finding::ok(format!(
                "{p}: dynamically linked, LD_PRELOAD applies"
            )));
        }
        exe::Linkage::Script(line) if depth == 0 => {
            out.push(Finding::ok(format!("{p}: a script run by {line}")));
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or_default();
            // `#!/usr/bin/env prog`: the program is found through PATH.
            let interp = if first.ends_with("/env") {
                words.find(|w| !w.starts_with('-')).unwrap_or_default()
            } else {
                first
            };
            match exe::resolve_command(OsStr::new(interp), path_env) {
                Ok(i) => executable(&i, path_env, out, depth + 1),
                Err(e) => out.push(Finding::problem(
                    format!("{p}'s interpreter: {e}"),
                    "install the interpreter",
                )),
            }
            return;
        }
        exe::Linkage::Script(line) => {
            out.push(Finding::problem(
                format!("{p}: an interpreter that is itself a script ({line})"),
                "run the real interpreter directly",
            ));
            return;
        }
        exe::Linkage::Unknown if depth == 0 && is_text(path) => {
            // As execvp and shells do with a text file without `#!`.
            out.push(Finding::ok(format!(
                "{p}: a script without #!, run by /bin/sh"
            )));
            executable(Path::new("/bin/sh"), path_env, out, depth + 1);
            return;
        }
        exe::Linkage::Unknown => {
            out.push(Finding::problem(
                format!("{p}: neither an ELF executable nor a script"),
                "give paio run the program itself",
            ));
            return;
        }
        exe::Linkage::Static { .. } => unreachable!("static executables have a warning"),
    }
    if info.imports.iter().any(|i| i.starts_with("mmap")) {
        out.push(Finding::note(
            format!(
                "{p} imports {}: data it reads or writes through mapped files moves by page faults and writeback, which the interposer does not see (it sees only the calls)",
                info.imports.join(", ")
            ),
            "nothing to do if it maps no data files; if it does (fio ioengine=mmap, LMDB-style stores), use its read/write path, or limit it from outside (cgroup io.max)",
        ));
    }
    for lib in &info.needed {
        if lib.starts_with("liburing.so") {
            out.push(Finding::problem(
                format!("{p} links {lib}: requests it submits through io_uring bypass the interposer (only their setup is seen)"),
                "use its synchronous or libaio path (fio: ioengine=psync or libaio), or limit it from outside (cgroup io.max)",
            ));
        } else if lib.starts_with("libaio.so") {
            out.push(Finding::note(
                format!("{p} links {lib}: io_submit is enforced at submission, its completions are not timed"),
                "nothing to do; latency statistics miss these requests (docs/preload.md)",
            ));
        }
    }
}

/// Whether paiod answers on `sock`, and if not, why.
fn control(sock: &Path) -> Finding {
    let s = sock.display();
    match std::fs::symlink_metadata(sock) {
        Err(e) => {
            return Finding::problem(
                format!("no socket at {s} ({e}): paiod is not running there"),
                "start paiod (paiod --socket PATH, or systemctl start paiod.socket), or give the socket it listens on",
            )
        }
        Ok(m) if !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            return Finding::problem(
                format!("{s} is not a socket"),
                "point --control at paiod's socket",
            )
        }
        Ok(_) => {}
    }
    match ctl::request(sock, CtlCommand::Status, Duration::from_secs(5)) {
        Ok(reply) => match reply.status {
            Some(r) => Finding::ok(format!(
                "paiod {} answers at {s}: policy {}, {} stage(s)",
                r.pid,
                r.policy,
                r.stages.len()
            )),
            None => Finding::problem(format!("paiod at {s} sent no status"), "restart paiod"),
        },
        Err(e) => {
            let text = e.to_string();
            let fix = if text.contains("ermission denied") {
                "the socket is not yours to connect to: run as its owner, or a paiod of your own (paiod --socket PATH)"
            } else {
                "check that paiod runs (paio status --socket PATH) and is yours"
            };
            Finding::problem(text, fix)
        }
    }
}

/// The findings for running process `pid`.
pub fn check_pid(pid: u32) -> Vec<Finding> {
    let mut out = Vec::new();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let maps = match std::fs::read_to_string(proc_dir.join("maps")) {
        Ok(m) => m,
        Err(e) => {
            out.push(Finding::problem(
                format!("process {pid}: cannot read /proc/{pid}/maps: {e}"),
                "check the pid, and run as its owner or root",
            ));
            return out;
        }
    };
    if maps.lines().any(|l| l.ends_with("/libpaio_preload.so")) {
        out.push(Finding::ok(format!(
            "process {pid}: the interposer is loaded"
        )));
    } else {
        out.push(Finding::problem(
            format!("process {pid}: the interposer is not loaded, so it has no stage"),
            "start it under paio run (or LD_PRELOAD=libpaio_preload.so); `paio doctor -- CMD` says why a program could not load it",
        ));
        if let Ok(auxv) = std::fs::read(proc_dir.join("auxv")) {
            if secure_execution(&auxv) {
                out.push(Finding::problem(
                    format!("process {pid} runs in secure-execution mode (AT_SECURE: it was executed set-user-ID, set-group-ID or with file capabilities), so the dynamic loader dropped LD_PRELOAD, even when a program under paio run executed it"),
                    "run the program without its set-ID bit or capabilities (as the user it needs), or limit it from outside (cgroup io.max)",
                ));
            }
        }
        if let Ok(exe_path) = std::fs::read_link(proc_dir.join("exe")) {
            executable(&exe_path, None, &mut out, 1);
        }
        return out;
    }
    let environ = match std::fs::read(proc_dir.join("environ")) {
        Ok(e) => e,
        Err(e) => {
            out.push(Finding::note(
                format!("process {pid}: cannot read its environment ({e}), so its control socket is unknown"),
                "run as its owner or root to check its registration with paiod",
            ));
            return out;
        }
    };
    let var = |name: &[u8]| {
        environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(name))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    // `default` as the process's stage reads it: paiod's default socket for
    // the process's XDG_RUNTIME_DIR.
    let control = var(b"PAIO_CONTROL=").filter(|v| !v.is_empty()).map(|v| {
        match paio::env::control_socket(&v) {
            Some(s) => s.path_with(var(b"XDG_RUNTIME_DIR=").map(PathBuf::from)),
            None => PathBuf::from(v),
        }
    });
    match control {
        None => out.push(Finding::note(
            format!("process {pid}: no PAIO_CONTROL, so its stage runs its own policy without paiod"),
            "start it with paio run --control to have paiod govern it",
        )),
        Some(sock) => match registered(&sock, pid) {
            Ok(Some(id)) => out.push(Finding::ok(format!(
                "process {pid}: registered with paiod at {} as stage {id}",
                sock.display()
            ))),
            Ok(None) => out.push(Finding::problem(
                format!("process {pid}: paiod at {} does not list its stage", sock.display()),
                "the stage reconnects by itself when paiod runs; check paiod's log for a refused registration (a connection cap)",
            )),
            Err(f) => out.push(f),
        },
    }
    out
}

/// Whether an auxiliary vector (`/proc/PID/auxv`: pairs of native words)
/// has `AT_SECURE` set: the loader ran the program in secure-execution
/// mode, in which glibc ignores LD_PRELOAD outside its trusted paths.
fn secure_execution(auxv: &[u8]) -> bool {
    const AT_SECURE: u64 = 23;
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |b: &[u8]| {
        let mut a = [0u8; 8];
        a[..WORD].copy_from_slice(&b[..WORD]);
        u64::from_ne_bytes(a)
    };
    auxv.chunks_exact(2 * WORD)
        .map(|p| (word(p), word(&p[WORD..])))
        .take_while(|&(key, _)| key != 0)
        .any(|(key, value)| key == AT_SECURE && value != 0)
}

/// The stage id paiod at `sock` lists for `pid`.
fn registered(sock: &Path, pid: u32) -> Result<Option<u64>, Finding> {
    let report: StatusReport = match ctl::request(sock, CtlCommand::Status, Duration::from_secs(5))
    {
        Ok(r) => r.status.map(|b| *b).ok_or_else(|| {
            Finding::problem(
                format!("paiod at {} sent no status", sock.display()),
                "restart paiod",
            )
        })?,
        Err(_) => return Err(control(sock)),
    };
    Ok(report.stages.iter().find(|s| s.pid == pid).map(|s| s.id))
}

/// Prints `findings` and returns the exit status: 1 if any is a problem.
pub fn report(findings: &[Finding]) -> (String, i32) {
    let mut text = String::new();
    for f in findings {
        text.push_str(&f.to_string());
        text.push('\n');
    }
    let problems = findings
        .iter()
        .filter(|f| f.severity == Severity::Problem)
        .count();
    if problems == 0 {
        text.push_str("no problem found\n");
        (text, 0)
    } else {
        text.push_str(&format!("{problems} problem(s)\n"));
        (text, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_execution_is_read_from_the_auxiliary_vector() {
        let pair = |k: usize, v: usize| [k.to_ne_bytes(), v.to_ne_bytes()].concat();
        let auxv = |secure: usize| [pair(6, 4096), pair(23, secure), pair(0, 0)].concat();
        assert!(secure_execution(&auxv(1)));
        assert!(!secure_execution(&auxv(0)));
        // Nothing after AT_NULL counts.
        assert!(!secure_execution(&[pair(0, 0), pair(23, 1)].concat()));
        // This test process was not started set-user-ID.
        assert!(!secure_execution(
            &std::fs::read("/proc/self/auxv").unwrap()
        ));
    }

    #[test]
    fn report_exits_1_only_with_a_problem() {
        let (t, code) = report(&[Finding::ok("a"), Finding::note("b", "c")]);
        assert_eq!(code, 0);
        assert!(
            t.contains("ok: a\nnote: b\n  fix: c\nno problem found"),
            "{t}"
        );
        let (t, code) = report(&[Finding::problem("x", "y")]);
        assert_eq!(code, 1);
        assert!(t.contains("problem: x\n  fix: y\n1 problem(s)"), "{t}");
    }

    #[test]
    fn a_missing_socket_and_a_plain_file_are_problems() {
        let d = tempfile::tempdir().unwrap();
        let f = control(&d.path().join("none.sock"));
        assert_eq!(f.severity, Severity::Problem);
        assert!(f.what.contains("no socket at"), "{f}");
        let file = d.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(control(&file).what.contains("is not a socket"));
    }
}
