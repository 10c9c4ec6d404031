//! Runs the built `paio` binary with a stand-in interposer: a tiny C library
//! whose constructor writes a statistics file in the documented format, so
//! these tests do not depend on the real `libpaio_preload.so`.

#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

const PAIO: &str = env!("CARGO_BIN_EXE_paio");

/// The stand-in: writes `{"pid","ppid","exe","stats"}` to PAIO_STATS (with
/// %p replaced by the pid) at load time, through a temporary file and a
/// rename. Its read channel counts 16 ops and 1 MiB; write 0; metadata 2
/// ops.
const STANDIN_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void counts(FILE *f, unsigned long ops, unsigned long bytes) {
    const char *w = "{\"waited_ops\":0,\"total_ns\":0,\"mean_ns\":0,\"p50_ns\":0,\"p99_ns\":0,\"p999_ns\":0,\"max_ns\":0}";
    fprintf(f, "\"ops\":%lu,\"bytes\":%lu,\"interval_ops\":0,\"interval_bytes\":0,"
               "\"ops_per_sec\":0.0,\"bytes_per_sec\":0.0,\"wait\":%s,\"wait_total\":%s", ops, bytes, w, w);
}

static void channel(FILE *f, const char *name, unsigned long ops, unsigned long bytes, int last) {
    fprintf(f, "{\"name\":\"%s\",", name);
    counts(f, ops, bytes);
    fprintf(f, ",\"objects\":[]}%s", last ? "" : ",");
}

__attribute__((constructor)) static void standin(void) {
    const char *pattern = getenv("PAIO_STATS");
    if (!pattern) return;
    char path[4096] = {0}, tmp[4200], exe[4096] = {0};
    size_t n = 0;
    for (const char *p = pattern; *p && n < sizeof path - 32; p++) {
        if (p[0] == '%' && p[1] == 'p') { n += snprintf(path + n, 32, "%d", (int)getpid()); p++; }
        else path[n++] = *p;
    }
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) strcpy(exe, "?");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    const char *name = getenv("PAIO_STAGE_NAME");
    fprintf(f, "{\"pid\":%d,\"ppid\":%d,\"exe\":\"%s\",\"stats\":{\"stage\":\"%s\","
               "\"collected_at_ns\":1,\"interval_ns\":1,\"channels\":[",
            (int)getpid(), (int)getppid(), exe, name ? name : "paio");
    channel(f, "read", 16, 1048576, 0);
    channel(f, "write", 0, 0, 0);
    channel(f, "metadata", 2, 0, 1);
    fprintf(f, "],\"unmatched\":{");
    counts(f, 0, 0);
    fprintf(f, "},\"removed\":{");
    counts(f, 0, 0);
    fprintf(f, "}}}\n");
    fclose(f);
    rename(tmp, path);
}
"#;

/// Counts SIGINTs and SIGTERMs for a while, then exits with
/// 10 * SIGINTs + SIGTERMs.
const SIGCOUNT_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t ints, terms;
static void on(int s) { if (s == SIGINT) ints++; else terms++; }
int main(int argc, char **argv) {
    struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = on;
    sigaction(SIGINT, &sa, 0); sigaction(SIGTERM, &sa, 0);
    printf("ready\n"); fflush(stdout);
    for (int i = 0; i < 15; i++) usleep(100000);
    return 10 * ints + terms;
}
"#;

struct Built {
    dir: PathBuf,
    standin: PathBuf,
    other: PathBuf,
    sigcount: PathBuf,
}

fn cc(dir: &Path, name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {name} failed");
    out
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("paio-cli-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Built {
            standin: cc(&dir, "libstandin.so", STANDIN_C, &["-shared", "-fPIC"]),
            other: cc(
                &dir,
                "libother.so",
                "int paio_test_other;\n",
                &["-shared", "-fPIC"],
            ),
            sigcount: cc(&dir, "sigcount", SIGCOUNT_C, &[]),
            dir,
        }
    })
}

/// [`paio`] started through python3, which first resets SIGINT and SIGQUIT
/// to their default actions, then execs `paio` (same pid) with the
/// arguments added to the returned command. Tests that expect a command to
/// die of SIGINT need it: run from a non-interactive shell's background job
/// (`make test &`), the test process has them ignored (POSIX), which paio
/// rightly passes on to the command.
fn paio_with_default_sigint() -> Command {
    let mut c = Command::new("python3");
    c.args([
        "-c",
        "import os, signal, sys\n\
         signal.signal(signal.SIGINT, signal.SIG_DFL)\n\
         signal.signal(signal.SIGQUIT, signal.SIG_DFL)\n\
         os.execv(sys.argv[1], sys.argv[1:])",
        PAIO,
    ]);
    let template = paio();
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// `paio` with the stand-in as PAIO_LIB and no inherited PAIO_* variables.
fn paio() -> Command {
    let mut c = Command::new(PAIO);
    c.env("PAIO_LIB", &built().standin).env_remove("LD_PRELOAD");
    for v in [
        "PAIO_POLICY",
        "PAIO_STATS",
        "PAIO_LABELS",
        "PAIO_STAGE_NAME",
        "PAIO_LOG",
    ] {
        c.env_remove(v);
    }
    c
}

fn run(args: &[&str]) -> Output {
    paio().args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    // Tests run in parallel: two sharing a name would remove each other's.
    static NAMES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        !names.iter().any(|n| n == name),
        "scratch(\"{name}\") is taken by another test: give each test its own name"
    );
    names.push(name.to_owned());
    drop(names);
    let d = built().dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn exit_status_passes_through() {
    let o = run(&["run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = run(&["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0));
    // Without `--` too.
    let o = run(&["run", "sh", "-c", "exit 4"]);
    assert_eq!(o.status.code(), Some(4));
}

#[test]
fn death_by_signal_is_passed_on_as_the_same_signal() {
    use std::os::unix::process::ExitStatusExt;
    let o = run(&["run", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(
        o.status.signal(),
        Some(Signal::SIGTERM as i32),
        "{}",
        stderr(&o)
    );
    let o = run(&["run", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(o.status.signal(), Some(Signal::SIGKILL as i32));
    // Past the Rust runtime's own SIGSEGV handler, and without a core file
    // of paio's.
    let o = run(&["run", "--", "sh", "-c", "kill -SEGV $$"]);
    assert_eq!(o.status.signal(), Some(Signal::SIGSEGV as i32));
    assert!(!o.status.core_dumped());
    // SIGPIPE, which the Rust runtime ignores, cannot end paio: 128 + 13.
    let o = run(&["run", "--", "sh", "-c", "kill -PIPE $$"]);
    assert_eq!(o.status.code(), Some(141));
}

#[test]
fn missing_and_unexecutable_commands() {
    let o = run(&["run", "--", "no-such-command-paio-test"]);
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        stderr(&o).trim(),
        "paio: no-such-command-paio-test: command not found"
    );
    let d = scratch("noexec");
    let f = d.join("script");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    let o = run(&["run", "--", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126));
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
}

/// Starts `paio run -- sigcount`, waits until it is ready, and returns it.
fn start_sigcount(process_group: bool) -> std::process::Child {
    let mut c = paio();
    c.args(["run", "--"])
        .arg(&built().sigcount)
        .stdout(Stdio::piped());
    if process_group {
        use std::os::unix::process::CommandExt;
        c.process_group(0);
    }
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    child
}

#[test]
fn signals_sent_to_paio_are_forwarded_and_paio_waits() {
    let mut child = start_sigcount(false);
    let pid = Pid::from_raw(child.id() as i32);
    let t = Instant::now();
    kill(pid, Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    kill(pid, Signal::SIGINT).unwrap();
    let st = child.wait().unwrap();
    // The command saw one SIGTERM and one SIGINT, and paio waited for it to
    // finish (it runs 1.5 s) and returned its status.
    assert_eq!(st.code(), Some(11));
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_signal_to_the_process_group_kills_the_command_too() {
    // `kill -INT -PGID`, as from a supervisor: the command gets the signal
    // directly and forwarded; paio survives until it has ended.
    // SIGINT must have its default action in the command (see
    // paio_with_default_sigint); python3 execs paio in place, so paio stays
    // the group leader.
    let mut c = paio_with_default_sigint();
    c.args(["run", "--", "sh", "-c", "echo ready; exec sleep 30"])
        .stdout(Stdio::piped());
    {
        use std::os::unix::process::CommandExt;
        c.process_group(0);
    }
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let t = Instant::now();
    killpg(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let st = child.wait().unwrap();
    // The command died of SIGINT, and so does paio (what a shell running
    // a script needs to stop there too).
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(Signal::SIGINT as i32),
        "{st:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn ctrl_c_on_a_terminal_reaches_the_command_once() {
    // A real terminal: python's pty makes paio a session leader with the pty
    // as controlling terminal; writing ^C to the master makes the kernel
    // send SIGINT to the foreground process group (paio and the command).
    let script = r#"
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
buf = b""
while b"ready" not in buf:
    buf += os.read(fd, 1024)
os.write(fd, b"\x03")
while True:
    try:
        if not os.read(fd, 1024): break
    except OSError:
        break
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"#;
    let pty = Command::new("python3").arg("-c").arg("import pty").output();
    assert!(
        pty.is_ok_and(|o| o.status.success()),
        "this test needs python3 with its pty module (scripts/setup.sh installs python3)"
    );
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(PAIO)
        .args(["run", "--"])
        .arg(&built().sigcount)
        .env("PAIO_LIB", &built().standin)
        .output()
        .unwrap();
    // One SIGINT (from the terminal), not two (none forwarded), and paio
    // returned the command's status.
    assert_eq!(stdout(&o).trim(), "10", "{}", stderr(&o));
}

#[test]
fn the_command_starts_with_the_signal_mask_paio_was_started_with() {
    // The signal mask and ignored signals of a command, as /proc shows them.
    fn mask_and_ignored(o: &Output) -> String {
        assert!(o.status.success(), "{}", stderr(o));
        stdout(o)
    }
    let args = ["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"];
    let direct = || Command::new(args[0]).args(&args[1..]).output().unwrap();
    let with_paio = || {
        let mut a = vec!["run", "--"];
        a.extend(args);
        run(&a)
    };
    // paio blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT while the command
    // runs; the command must not inherit that.
    let plain = mask_and_ignored(&with_paio());
    assert_eq!(plain, mask_and_ignored(&direct()));
    assert!(plain.contains("SigBlk:\t0000000000000000\n"), "{plain}");
    // Started with SIGUSR1 blocked (std's spawn passes this thread's mask
    // on to paio), paio passes it on to the command.
    let old = SigSet::from(Signal::SIGUSR1)
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .unwrap();
    let (blocked, blocked_direct) = (with_paio(), direct());
    old.thread_set_mask().unwrap();
    let blocked = mask_and_ignored(&blocked);
    assert_eq!(blocked, mask_and_ignored(&blocked_direct));
    assert!(blocked.contains("SigBlk:\t0000000000000200\n"), "{blocked}");
}

#[test]
fn ld_preload_is_appended_to_the_users() {
    let b = built();
    let user = format!("{} ", b.other.display());
    let o = paio()
        .env("LD_PRELOAD", &user)
        .args(["run", "--", "sh", "-c", "printf %s \"$LD_PRELOAD\""])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}:{}",
            b.other.display(),
            std::fs::canonicalize(&b.standin).unwrap().display()
        )
    );
    let o = run(&["run", "--", "sh", "-c", "printf %s \"$LD_PRELOAD\""]);
    assert_eq!(
        stdout(&o),
        std::fs::canonicalize(&b.standin)
            .unwrap()
            .display()
            .to_string()
    );
}

#[test]
fn environment_for_the_interposer() {
    let d = scratch("env");
    let stats = d.join("s.%p.json");
    let o = run(&[
        "run",
        "--label",
        "job=train1",
        "--label",
        "instance=I3",
        "--name",
        "trainer",
        "--stats",
        stats.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "printf '%s|%s|%s|%s' \"$PAIO_LABELS\" \"$PAIO_STAGE_NAME\" \"$PAIO_STATS\" \"${PAIO_POLICY-unset}\"",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("job=train1,instance=I3|trainer|{}|unset", stats.display())
    );
    // The stand-in wrote its file where --stats said, and it is kept.
    let files: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert_eq!(files.len(), 1);
}

#[test]
fn limits_become_a_temporary_policy() {
    let o = run(&[
        "run",
        "--limit",
        "read=50MiB/s",
        "--limit",
        "metadata=1k ops/s",
        "--",
        "sh",
        "-c",
        "echo \"$PAIO_POLICY\"; cat \"$PAIO_POLICY\"",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let path = out.lines().next().unwrap();
    assert!(out.contains("name = \"read\""), "{out}");
    assert!(out.contains("rate = \"52428800 B/s\""), "{out}");
    assert!(out.contains("rate = \"1000 ops/s\""), "{out}");
    assert!(out.contains("shared = \"read\""), "{out}");
    assert!(!Path::new(path).exists(), "{path} was not removed");
}

/// An inner `paio run` under the outer run's policy shares the outer run's
/// buckets (`PAIO_SHARED`), so its command counts against the outer
/// limits with the others (it had its own, which doubled the rate); with a
/// policy of its own it has its own.
#[test]
fn a_nested_run_under_the_outer_policy_shares_its_limits() {
    let shared = |inner: &str| {
        let o = run(&[
            "run",
            "--limit",
            "read=5MiB/s",
            "--",
            "sh",
            "-c",
            &format!("echo \"$PAIO_SHARED\"; {PAIO} run {inner} -- sh -c 'echo \"$PAIO_SHARED\"'"),
        ]);
        assert!(o.status.success(), "{o:?}");
        let out = stdout(&o);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(!lines[0].is_empty(), "{out}");
        lines[0] == lines[1]
    };
    assert!(
        shared(""),
        "without options the inner run keeps the outer buckets"
    );
    assert!(
        shared("--summary"),
        "statistics of its own do not change the limits"
    );
    assert!(
        !shared("--limit read=1MiB/s"),
        "a policy of its own has its own buckets"
    );
}

/// A `paio run` inside another replaces the outer run's policy and
/// statistics files for its command: it says so, once each, and only when
/// it does (an inner run with neither a policy nor statistics of its own
/// keeps both).
#[test]
fn a_nested_run_says_what_it_replaces() {
    let inner = |extra: &[&str]| {
        let mut v = vec![PAIO, "run"];
        v.extend_from_slice(extra);
        v.extend_from_slice(&["--", "true"]);
        v.join(" ")
    };
    let policy_said = "paio: warning: PAIO_POLICY is already set (";
    let stats_said = "paio: warning: PAIO_STATS is already set (";
    for (extra, policy, stats) in [
        (&["--limit", "read=1GiB/s", "--summary"][..], 1, 1),
        (&["--limit", "read=1GiB/s"][..], 1, 0),
        (&["--summary"][..], 0, 1),
        (&[][..], 0, 0),
    ] {
        let o = run(&[
            "run",
            "--limit",
            "read=5MiB/s",
            "--summary",
            "--",
            "sh",
            "-c",
            &inner(extra),
        ]);
        assert!(o.status.success(), "{o:?}");
        let e = stderr(&o);
        assert_eq!(e.matches(policy_said).count(), policy, "{extra:?}: {e}");
        assert_eq!(e.matches(stats_said).count(), stats, "{extra:?}: {e}");
    }
    // Another paiod for the inner command's stages, then the same one.
    let said = |inner_control: &str| {
        let o = run(&[
            "run",
            "--control",
            "/tmp/paio-test-outer.sock",
            "--",
            "sh",
            "-c",
            &inner(&["--control", inner_control]),
        ]);
        assert!(o.status.success(), "{o:?}");
        stderr(&o)
            .matches("paio: warning: PAIO_CONTROL is already set (")
            .count()
    };
    assert_eq!(said("/tmp/paio-test-inner.sock"), 1);
    assert_eq!(said("/tmp/paio-test-outer.sock"), 0);
    // Not nested: nothing to say.
    let o = run(&["run", "--limit", "read=1GiB/s", "--summary", "--", "true"]);
    assert!(!stderr(&o).contains("is already set"), "{}", stderr(&o));
}

#[test]
fn bad_arguments_exit_2_before_running_anything() {
    let d = scratch("badargs");
    let marker = d.join("ran");
    let touch = format!("touch {}", marker.display());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--limit", "read=fast"],
            "--limit \"read=fast\": invalid rate \"fast\"",
        ),
        (
            &["--limit", "reads=1MiB/s"],
            "unknown class \"reads\"; expected read, write or metadata",
        ),
        (&["--limit", "metadata=1MiB/s"], "must be an operation rate"),
        (
            &["--limit", "read=1MiB/s", "--limit", "read=2MiB/s"],
            "--limit given twice for class read",
        ),
        (
            &["--policy", "/nonexistent.toml", "--limit", "read=1MiB/s"],
            "--policy and --limit cannot be used together",
        ),
        (
            &["--policy", "/nonexistent.toml"],
            "--policy: /nonexistent.toml:1:1: policy: cannot read",
        ),
        (&["--label", "job"], "--label \"job\": no '='"),
        (&["--name", ""], "--name \"\": expected a stage name"),
        (
            &["--stats", "/tmp/%p/x.json"],
            "--stats \"/tmp/%p/x.json\": %p may only appear in the file name",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{flags:?}: {}", stderr(&o));
        assert!(
            stderr(&o).starts_with("paio: error: ") || stderr(&o).starts_with("error: "),
            "{}",
            stderr(&o)
        );
        assert!(!marker.exists(), "{flags:?}: the command ran");
    }
    // A policy error points at file:line:column.
    let p = d.join("p.toml");
    std::fs::write(
        &p,
        "[[channel]]\nname = \"bulk\"\ndefault_objet = \"limit\"\n",
    )
    .unwrap();
    let o = run(&[
        "run",
        "--policy",
        p.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!(
            "{}:3:1: channel[0].default_objet: unknown field",
            p.display()
        )),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists());
    // A good policy is passed as an absolute path.
    std::fs::write(&p, "[[channel]]\nname = \"bulk\"\nmatch = {}\n").unwrap();
    let o = paio()
        .current_dir(&d)
        .args([
            "run",
            "--policy",
            "p.toml",
            "--",
            "sh",
            "-c",
            "printf %s \"$PAIO_POLICY\"",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        std::path::absolute(&p).unwrap().display().to_string()
    );
}

#[test]
fn library_not_found_says_where_it_looked() {
    let d = scratch("nolib");
    let copy = d.join("paio");
    std::fs::copy(PAIO, &copy).unwrap();
    let o = Command::new(&copy)
        .env_remove("PAIO_LIB")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert!(
        e.starts_with("paio: error: cannot find libpaio_preload.so: looked at "),
        "{e}"
    );
    assert!(
        e.contains(&d.join("libpaio_preload.so").display().to_string()),
        "{e}"
    );
    assert!(e.contains("../lib/libpaio_preload.so"), "{e}");
    // Found next to the executable.
    std::fs::copy(&built().standin, d.join("libpaio_preload.so")).unwrap();
    let o = Command::new(&copy)
        .env_remove("PAIO_LIB")
        .env_remove("LD_PRELOAD")
        .args(["run", "--", "sh", "-c", "printf %s \"$LD_PRELOAD\""])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).ends_with("/nolib/libpaio_preload.so"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn summary_covers_every_process() {
    // sh, then cat (a second process), each loading the stand-in.
    let o = run(&[
        "run",
        "--summary",
        "--name",
        "demo",
        "--",
        "sh",
        "-c",
        "echo \"$PAIO_STATS\"; cat /dev/null; exit 5",
    ]);
    assert_eq!(o.status.code(), Some(5));
    let e = stderr(&o);
    assert!(
        e.contains("paio: summary: 2 processes with statistics"),
        "{e}"
    );
    assert!(e.contains("stage \"demo\""), "{e}");
    assert!(
        e.lines()
            .any(|l| l.starts_with("pid ") && l.contains("/cat")),
        "{e}"
    );
    assert!(
        e.lines().any(|l| l.starts_with("pid ") && l.contains("sh")),
        "{e}"
    );
    assert!(e.contains("total over 2 processes"), "{e}");
    let total_read = e
        .lines()
        .skip_while(|l| !l.starts_with("total"))
        .find(|l| l.trim_start().starts_with("read "))
        .unwrap();
    let cols: Vec<_> = total_read.split_whitespace().collect();
    assert_eq!(&cols[..4], ["read", "32", "2.00", "MiB"], "{total_read}");
    // The default statistics go to a temporary directory, removed afterwards.
    let pattern = PathBuf::from(stdout(&o).trim());
    assert!(pattern.ends_with("stats.%p.json"), "{}", pattern.display());
    assert!(
        !pattern.parent().unwrap().exists(),
        "{} left behind",
        pattern.display()
    );
    // Nothing else on stdout: the summary goes to stderr.
    assert_eq!(o.stdout.iter().filter(|&&b| b == b'\n').count(), 1);
}

#[test]
fn summary_when_the_command_is_killed() {
    let o = run(&["run", "--summary", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&o.status),
        Some(Signal::SIGTERM as i32)
    );
    assert!(
        stderr(&o).contains("paio: summary: 1 process with statistics"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn summary_with_explicit_stats_ignores_older_files() {
    let d = scratch("explicit");
    let stats = d.join("s.%p.json");
    // A stale file from an earlier run.
    std::fs::write(d.join("s.1.json"), "stale").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(d.join("s.1.json"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let o = run(&[
        "run",
        "--summary",
        "--stats",
        stats.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("paio: summary: 1 process with statistics"),
        "{e}"
    );
    assert!(!e.contains("warning"), "{e}");
}

#[test]
fn warns_about_static_binaries() {
    let d = scratch("static");
    let src = "int main(void) { return 0; }\n";
    let c = d.join("s.c");
    std::fs::write(&c, src).unwrap();
    let bin = d.join("s");
    let ok = Command::new("cc")
        .args(["-static", "-o"])
        .arg(&bin)
        .arg(&c)
        .status()
        .unwrap()
        .success();
    assert!(
        ok,
        "cc -static failed: this test needs the static C library (libc6-dev, \
         installed with build-essential by scripts/setup.sh)"
    );
    let o = run(&["run", "--", bin.to_str().unwrap()]);
    assert!(o.status.success());
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("paio: warning: ") && e.contains("statically linked"),
        "{e}"
    );
    // A recording of it would be empty: said too.
    let rec = d.join("r.jsonl");
    let o = run(&[
        "run",
        "--record",
        rec.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("--record: no process wrote statistics, the recording is empty"),
        "{e}"
    );
    // Dynamic programs and scripts: no warning.
    let o = run(&["run", "--", "true"]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

/// A program whose execution changes the user's ids runs without the
/// interposer (the loader drops LD_PRELOAD): `paio run` says so, with the
/// limits given or not; one whose set-ID bit changes nothing (set-user-ID
/// root run by root) runs enforced, with no word. Both verdicts are checked
/// against the statistics the program wrote.
#[test]
fn warns_about_programs_that_run_with_other_ids() {
    assert!(
        running_as_root(),
        "this test sets set-ID bits on copies owned by root and nogroup: run it as root"
    );
    let d = scratch("set-id");
    let make = |name: &str, group: Option<u32>, mode: u32| {
        let copy = d.join(name);
        std::fs::copy("/bin/cat", &copy).unwrap();
        std::os::unix::fs::chown(&copy, None, group).unwrap();
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
        copy
    };
    let input = d.join("in");
    std::fs::write(&input, "abc\n").unwrap();
    let dropped = make("sgid-nogroup", Some(65534), 0o2755);
    let kept = make("suid-root", None, 0o4755);
    for (copy, warned) in [(&dropped, true), (&kept, false)] {
        let stats = d.join(format!(
            "{}.%p.json",
            copy.file_name().unwrap().to_str().unwrap()
        ));
        let o = run(&[
            "run",
            "--limit",
            "read=1GiB/s",
            "--stats",
            stats.to_str().unwrap(),
            "--summary",
            "--",
            copy.to_str().unwrap(),
            input.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{o:?}");
        assert_eq!(o.stdout, b"abc\n");
        let e = stderr(&o);
        let said = e.contains(&format!(
            "paio: warning: {} is set-group-ID to gid 65534, and your gid is 0: the dynamic \
             loader ignores LD_PRELOAD for it",
            copy.display()
        ));
        assert_eq!(said, warned, "{e}");
        assert_eq!(e.contains("warning"), warned, "{e}");
        // The loader agrees: statistics exist exactly when nothing was said.
        assert_eq!(
            e.contains("paio: summary: 1 process with statistics"),
            !warned,
            "{e}"
        );
    }
}

#[test]
fn help_mentions_the_exit_statuses() {
    let mut out = String::new();
    let mut c = Command::new(PAIO)
        .args(["run", "--help"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.wait().unwrap();
    assert!(out.contains("--limit <CLASS=RATE>"), "{out}");
    assert!(out.contains("128+N"), "{out}");
}

/// The real interposer, built next to `paio` (`cargo build -p
/// paio-preload`, once per test binary: `cargo test` does not build a
/// cdylib whose lib target has `test = false`). Fails if it does not build.
fn real_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_next_to_paio("libpaio_preload.so", &["-p", "paio-preload"]))
}

/// Builds `file` with `cargo build -q ARGS` in `paio`'s profile (debug or
/// release), where it lands next to `paio`; fails if it does not build.
fn build_next_to_paio(file: &str, args: &[&str]) -> PathBuf {
    let out = Path::new(PAIO).with_file_name(file);
    let release = out.parent().and_then(Path::file_name) == Some("release".as_ref());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "-q"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if release {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "cargo build {args:?} failed");
    assert!(out.is_file(), "{} missing after the build", out.display());
    out
}

#[test]
fn real_interposer_counts_the_bytes_dd_reads() {
    let lib = real_library();
    let d = scratch("real-dd");
    let input = d.join("in");
    std::fs::write(&input, vec![7u8; 4 << 20]).unwrap();
    let stats = d.join("s.%p.json");
    let o = paio()
        .env("PAIO_LIB", lib)
        .env("LC_ALL", "C")
        .args(["run", "--summary", "--stats"])
        .arg(&stats)
        .args([
            "--",
            "dd",
            &format!("if={}", input.display()),
            "of=/dev/null",
            "bs=64k",
        ])
        .output()
        .unwrap();
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("4194304 bytes"), "{e}"); // dd's own report
    assert!(
        e.contains("paio: summary: 1 process with statistics"),
        "{e}"
    );
    let total_read = e
        .lines()
        .skip_while(|l| !l.starts_with("total"))
        .find(|l| l.trim_start().starts_with("read "))
        .unwrap();
    let cols: Vec<_> = total_read.split_whitespace().collect();
    assert_eq!(&cols[2..4], ["4.00", "MiB"], "{total_read}");
    // Exactly: the statistics file the summary was made from.
    let (files, errors) = paio_cli::summary::read_all(stats.as_os_str(), None);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(files.len(), 1);
    assert!(files[0].exe.ends_with("/dd"), "{}", files[0].exe);
    let read = files[0]
        .stats
        .channels
        .iter()
        .find(|c| c.name == "read")
        .unwrap();
    assert_eq!(read.counts.bytes, 4 << 20);
}

/// `paio run --summary --limit LIMIT ARGS(input)` with the real interposer
/// (ARGS: more flags, `--` and the command), where `input` is a 2 MiB file
/// in scratch directory `name`: the output, its stderr (checked
/// successful) and how long it took.
fn limited_run(
    name: &str,
    limit: &str,
    command: impl FnOnce(&Path) -> Vec<String>,
) -> (std::process::Output, String, Duration) {
    let lib = real_library();
    let d = scratch(name);
    let input = d.join("in");
    std::fs::write(&input, vec![1u8; 2 << 20]).unwrap();
    let t = Instant::now();
    let o = paio()
        .env("PAIO_LIB", lib)
        .env("LC_ALL", "C")
        .args(["run", "--summary", "--limit", limit])
        .args(command(&input))
        .output()
        .unwrap();
    let took = t.elapsed();
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    (o, e, took)
}

#[test]
fn real_interposer_enforces_a_read_limit() {
    let (_, e, took) = limited_run("real-limit", "read=4MiB/s", |input| {
        vec![
            "--".into(),
            "dd".into(),
            format!("if={}", input.display()),
            "of=/dev/null".into(),
            "bs=64k".into(),
        ]
    });
    // 2 MiB at 4 MiB/s (minus the 10 ms initial burst): about 0.5 s.
    assert!(took >= Duration::from_millis(400), "{took:?}\n{e}");
    assert!(took < Duration::from_secs(5), "{took:?}\n{e}");
}

/// `--limit` holds for the command as a whole: four processes reading at
/// once share one bucket (`PAIO_SHARED`), so together they take as long as
/// one reading all their bytes, not a quarter of that.
#[test]
fn a_limit_holds_for_all_the_commands_processes_together() {
    let (o, e, took) = limited_run("shared-limit", "read=8MiB/s", |input| {
        vec![
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!(
                "for i in 1 2 3 4; do dd if={} of=/dev/null bs=64k status=none & done; wait; \
                 test -f \"$PAIO_SHARED\" && echo shared",
                input.display()
            ),
        ]
    });
    assert_eq!(stdout(&o), "shared\n", "{e}");
    // 8 MiB at 8 MiB/s (minus the 80 KiB burst): about 1 s; each process
    // with a bucket of its own would take a quarter of that.
    assert!(took >= Duration::from_millis(900), "{took:?}\n{e}");
    assert!(took < Duration::from_secs(10), "{took:?}\n{e}");
    assert!(
        e.contains("4 processes") || e.contains("5 processes"),
        "{e}"
    );
}

/// The bytes the `write` channel's object `object` took, over every
/// statistics file that `stats` (a `--stats` pattern) names.
fn written_through(stats: &Path, object: &str) -> u64 {
    let (files, errors) = paio_cli::summary::read_all(stats.as_os_str(), None);
    assert!(errors.is_empty(), "{errors:?}");
    files
        .iter()
        .flat_map(|f| f.stats.channels.iter().filter(|c| c.name == "write"))
        .flat_map(|c| c.objects.iter().filter(|o| o.name == object))
        .map(|o| o.counts.bytes)
        .sum()
}

/// `--limit`'s limits are for storage: what a command writes into a pipe
/// or a named FIFO, created, opened or inherited on any descriptor, goes
/// through the `streams` object (counted, not limited); what it writes to
/// a file or a device (`/dev/null`, inherited or opened), through the
/// limit.
#[test]
fn a_limit_leaves_pipes_and_devices_out() {
    let d = scratch("stream-limit");
    let stats = d.join("s.%p.json");
    let (_, e, _) = limited_run("stream-limit-run", "write=16MiB/s", |input| {
        let out = d.join("out");
        let fifo = d.join("fifo");
        vec![
            "--stats".into(),
            stats.display().to_string(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!(
                "printf '%s' \"$(cat {i})\" | cat > /dev/null; \
                 dd if={i} of=/dev/null bs=64k status=none; dd if={i} of={o} bs=64k status=none; \
                 sh -c 'printf %s \"$(cat {i})\" >&3' 3>&1 | cat > /dev/null; \
                 mkfifo {f} && {{ cat {f} > /dev/null & dd if={i} of={f} bs=64k status=none; wait; }}",
                i = input.display(),
                o = out.display(),
                f = fifo.display()
            ),
        ]
    });
    let written = |object: &str| written_through(&stats, object);
    // Into pipes the writer inherited on 1 (two cats, into the command
    // substitutions), created itself (the shell's printf), inherited above
    // 2 (the inner shell's printf into its descriptor 3) and into a named
    // FIFO outside /dev/ (dd): 5 × 2 MiB; to /dev/null inherited (three
    // cats) and opened (dd), and to the file: 5 × 2 MiB.
    assert_eq!(written("streams"), 10 << 20, "{e}");
    assert_eq!(written("limit"), 10 << 20, "{e}");
}

/// A descriptor received over a Unix socket (`SCM_RIGHTS`, through
/// `recvmsg`) gets the class an open would give it: a pipe's is a stream
/// (counted, not limited), a file's is storage (limited).
#[test]
fn descriptors_received_over_a_socket_are_classified() {
    let d = scratch("scm-rights");
    let stats = d.join("s.%p.json");
    let out = d.join("out");
    let script = format!(
        r#"
import os, socket, threading
a, b = socket.socketpair(socket.AF_UNIX)
r, w = os.pipe()
f = os.open({out:?}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
socket.send_fds(a, [b"x"], [w, f])
os.close(w); os.close(f)
_, (w2, f2), _, _ = socket.recv_fds(b, 1, 2)
def drain():
    while os.read(r, 1 << 16):
        pass
t = threading.Thread(target=drain); t.start()
chunk = bytes(1 << 16)
for fd in (w2, f2):
    for _ in range(32):
        assert os.write(fd, chunk) == len(chunk)
os.close(w2); os.close(f2); t.join()
"#,
        out = out.display().to_string()
    );
    let (_, e, _) = limited_run("scm-rights-run", "write=16MiB/s", |_| {
        vec![
            "--stats".into(),
            stats.display().to_string(),
            "--".into(),
            "/usr/bin/python3".into(),
            "-S".into(),
            "-c".into(),
            script,
        ]
    });
    let written = |object: &str| written_through(&stats, object);
    // 2 MiB into the received pipe, 2 MiB into the received file.
    assert_eq!(written("streams"), 2 << 20, "{e}");
    assert_eq!(written("limit"), 2 << 20, "{e}");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 2 << 20);
}

/// A child process killed when the test ends, passing or not: a paiod left
/// behind would hold the test's output pipe open.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// paiod, built next to `paio` like the real interposer.
fn paiod_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_next_to_paio("paiod", &["-p", "paio-control", "--bin", "paiod"]))
}

#[test]
fn status_and_ctl_say_when_paiod_is_not_there() {
    let d = scratch("no-paiod");
    let sock = d.join("none.sock");
    let o = paio()
        .args(["status", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert!(
        e.contains("cannot reach paiod at") && e.contains("none.sock"),
        "{e}"
    );
    // PAIO_CONTROL=default is paiod's default socket, as the stages read
    // it (it was taken for a file named `default`).
    let o = paio()
        .env("PAIO_CONTROL", "default")
        .env("XDG_RUNTIME_DIR", &d)
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    let want = format!("cannot reach paiod at {}/paio/paiod.sock", d.display());
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    let o = paio()
        .args(["ctl", "--socket"])
        .arg(&sock)
        .args(["set", "job=", "demand=1MiB/s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A well-formed command that cannot reach paiod is 125, as documented.
    let o = paio()
        .args(["ctl", "--socket"])
        .arg(&sock)
        .args(["set", "job=I1", "demand=1MiB/s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot reach paiod at"),
        "{}",
        stderr(&o)
    );
}

/// A socket another user created at paiod's path (squatting) is not
/// trusted: `paio status` does not print its report and `paio ctl` does not
/// report a value as set (issue 14).
#[test]
fn status_and_ctl_refuse_a_socket_squatted_by_another_user() {
    assert!(
        running_as_root(),
        "this test runs a squatter as another uid (nobody) with setpriv: run it as root"
    );
    // Under /tmp: the squatter (nobody) must reach it.
    let d = std::env::temp_dir().join(format!("paio-squat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let sock = d.join("paiod.sock");
    // The squatter answers every connection with a forged, valid reply.
    let forged = r#"{"type":"ctl_reply","id":1,"ok":true,"status":{"pid":1,"uptime_s":1,"period_ms":100,"policy":"forged","groups":[],"stages":[]}}"#;
    let script = format!(
        "import socket,struct\ns=socket.socket(socket.AF_UNIX)\ns.bind({:?})\ns.listen(8)\n\
         while True:\n c,_=s.accept()\n try:\n  c.recv(65536)\n  b={forged:?}.encode()\n  \
         c.sendall(struct.pack('>I',len(b))+b)\n except OSError:\n  pass\n c.close()\n",
        sock.display().to_string()
    );
    let _squatter = KillOnDrop(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
            ])
            .arg(&script)
            .spawn()
            .expect("setpriv (util-linux) and /usr/bin/python3, which uid nobody can run"),
    );
    wait_until_listening(&sock, "the squatter");
    let o = paio()
        .args(["status", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("forged"));
    assert!(
        stderr(&o).contains("runs as uid 65534") && stderr(&o).contains("not talking to it"),
        "{}",
        stderr(&o)
    );
    let o = paio()
        .args(["ctl", "--socket"])
        .arg(&sock)
        .args(["set", "job=I1", "demand=1MiB/s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("set"));
    drop(_squatter);
    let _ = std::fs::remove_dir_all(&d);
}

/// paiod listening on `sock`, with a `static` policy of `period` that
/// gives group `group` (label `job`) `rate`; its configuration is written
/// into `dir`.
fn static_paiod(dir: &Path, sock: &Path, period: &str, group: &str, rate: &str) -> KillOnDrop {
    static_paiod_with(dir, sock, period, group, rate, &[])
}

/// [`static_paiod`] with more arguments for paiod.
fn static_paiod_with(
    dir: &Path,
    sock: &Path,
    period: &str,
    group: &str,
    rate: &str,
    more: &[&OsStr],
) -> KillOnDrop {
    let cfg = dir.join("paiod.toml");
    std::fs::write(
        &cfg,
        format!(
            "period = \"{period}\"\n[policy]\nkind = \"static\"\n[[policy.group]]\nname = \"{group}\"\nrate = \"{rate}\"\n"
        ),
    )
    .unwrap();
    let daemon = KillOnDrop(
        Command::new(paiod_binary())
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(sock)
            .args(more)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until_listening(sock, "paiod");
    daemon
}

/// The first child of process `parent` (the command `paio run` started),
/// once it exists (at most 30 s).
fn first_child(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "process {parent} started no command"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most 30 s) until something accepts connections on `sock`.
fn wait_until_listening(sock: &Path, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        assert!(
            Instant::now() < deadline,
            "{who} never listened on {}",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether this process runs as root (the squatting test needs another uid).
fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `paio status | head -1`: a reader that goes away ends the output
/// quietly, with no panic (it said "failed printing to stdout: Broken
/// pipe").
#[test]
fn status_into_a_closed_pipe_exits_quietly() {
    let d = scratch("closed-pipe");
    let sock = d.join("paiod.sock");
    let _daemon = KillOnDrop(
        Command::new(paiod_binary())
            .arg("--socket")
            .arg(&sock)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until_listening(&sock, "paiod");
    for json in [false, true] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // every write now fails with EPIPE
        let mut c = paio();
        c.args(["status", "--socket"]).arg(&sock);
        if json {
            c.arg("--json");
        }
        let o = c
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stderr(&o), "", "json {json}");
    }
}

#[test]
fn a_program_under_paio_run_control_is_governed_by_paiod() {
    let lib = real_library();
    let d = scratch("control");
    let sock = d.join("paiod.sock");
    let mut daemon = static_paiod(&d, &sock, "50ms", "dd", "16MiB/s");
    let input = d.join("in");
    std::fs::write(&input, vec![3u8; 24 << 20]).unwrap();
    let stats = d.join("s.%p.json");
    // The stage's own limit keeps dd running for 3 s, however long
    // registration takes on a loaded machine (unthrottled, dd is done in
    // milliseconds), and stays the ceiling of paiod's rates, 16 and then
    // 64 MiB/s, after paiod's DRL takes its place.
    let started = Instant::now();
    let mut run = paio()
        .env("PAIO_LIB", lib)
        .args([
            "run",
            "--label",
            "job=dd",
            "--limit",
            "read=8MiB/s",
            "--control",
        ])
        .arg(&sock)
        .arg("--stats")
        .arg(&stats)
        .args([
            "--",
            "dd",
            &format!("if={}", input.display()),
            "of=/dev/null",
            "bs=256k",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // paio status lists the stage while dd runs, with paiod's object.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = String::new();
    while !(seen.contains("job=dd") && seen.contains("object paiod")) {
        assert!(Instant::now() < deadline, "the stage never showed: {seen}");
        let o = paio()
            .args(["status", "--socket"])
            .arg(&sock)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        seen = stdout(&o);
        std::thread::sleep(Duration::from_millis(20));
    }
    // While dd still runs: one object's rate, by stage name; refused where
    // no request reaches the object and where the policy sets it.
    let set_rate = |object: &str, rate: &str| {
        paio()
            .args(["ctl", "set-rate", "--socket"])
            .arg(&sock)
            .args(["preload", "read", object, rate])
            .output()
            .unwrap()
    };
    // The stage's own limit, in paiod's DRL's place: setting it would
    // change nothing, and the reply says where the limit went.
    let refused = set_rate("limit", "100MiB/s");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("no request reaches read/limit")
            && stderr(&refused).contains("as its ceiling (max_rate)"),
        "{}",
        stderr(&refused)
    );
    let refused = set_rate("paiod", "1MiB/s");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("policy static sets read/paiod every period"),
        "{}",
        stderr(&refused)
    );
    let ok = paio()
        .args(["ctl", "--socket"])
        .arg(&sock)
        .args(["set", "job=dd", "rate=64MiB/s"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).contains("set dd: rate=64MiB/s"),
        "{}",
        stdout(&ok)
    );
    let bad = paio()
        .args(["ctl", "--socket"])
        .arg(&sock)
        .args(["set", "job=dd", "speed=1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("speed"), "{}", stderr(&bad));
    assert!(run.wait().unwrap().success());
    let took = started.elapsed();
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    // 24 MiB at 8 MiB/s, less the first 10 ms burst.
    assert!(took >= Duration::from_millis(2900), "{took:?}");
    // Every byte dd read went through the read channel, and those read after
    // registration through paiod's DRL.
    let file = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("s."))
        .expect("a statistics file");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let read = v["stats"]["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "read")
        .unwrap();
    assert_eq!(read["bytes"], 24 << 20);
    let paiod_obj = read["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "paiod")
        .expect("paiod's object in the stage");
    assert!(paiod_obj["bytes"].as_u64().unwrap() > 0, "{paiod_obj}");
}

/// Every PAIO_* the interposer would refuse, inherited from the environment,
/// and the flag mistakes new users make, stop `paio run` with exit status 2
/// and a message naming what is wrong, before the command runs.
#[test]
fn bad_environment_and_flag_mistakes_exit_2_before_running_anything() {
    let d = scratch("badenv");
    let marker = d.join("ran");
    let touch = format!("touch {}", marker.display());
    let long_name = "n".repeat(300);
    let cases: &[(&str, &str, &str)] = &[
        ("PAIO_LOG", "garbage", "PAIO_LOG=\"garbage\": expected 1"),
        ("PAIO_WORKFLOW", "proc", "PAIO_WORKFLOW=\"proc\": expected \"thread\" or \"process\""),
        ("PAIO_STATS_INTERVAL", "soon", "PAIO_STATS_INTERVAL=\"soon\""),
        ("PAIO_FILE_CLASSES", "wal=db/wal", "PAIO_FILE_CLASSES=\"wal=db/wal\": \"db/wal\" is not an absolute path"),
        ("PAIO_LABELS", "job", "PAIO_LABELS=\"job\": \"job\" is not key=value"),
        ("PAIO_CONTEXT", &"c".repeat(300), "PAIO_CONTEXT="),
        ("PAIO_CONTROL", "paiod.sock", "PAIO_CONTROL=\"paiod.sock\": expected an absolute socket path"),
        ("PAIO_STAGE_NAME", &long_name, "a stage name has 1 to 128 bytes, this one 300"),
        ("PAIO_CRITICAL", "yes", "PAIO_CRITICAL=\"yes\""),
        ("PAIO_POLICY", "garbage", "PAIO_POLICY (inherited from the environment; unset it or pass --policy): garbage:1:1: policy: cannot read"),
    ];
    for (var, value, expected) in cases {
        let o = paio()
            .env(var, value)
            .args(["run", "--", "sh", "-c", &touch])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{var}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{var}: {}", stderr(&o));
        if *var != "PAIO_POLICY" {
            assert!(
                stderr(&o).contains("inherited from the environment"),
                "{}",
                stderr(&o)
            );
        }
        assert!(!marker.exists(), "{var}: the command ran");
    }
    let zero = d.join("zero.toml");
    std::fs::write(
        &zero,
        "[[channel]]\nname = \"r\"\nmatch = { request_type = \"read\" }\ndefault_object = \"z\"\n\
         [[channel.object]]\nname = \"z\"\nkind = \"drl\"\nrate = \"0B/s\"\n",
    )
    .unwrap();
    let zero = zero.to_str().unwrap();
    let zero_priority = d.join("zero-priority.toml");
    std::fs::write(
        &zero_priority,
        "[[channel]]\nname = \"all\"\nmatch = {}\ndefault_object = \"p\"\n\
         [[channel.object]]\nname = \"p\"\nkind = \"priority\"\nrate = \"0 B/s\"\n",
    )
    .unwrap();
    let zero_priority = zero_priority.to_str().unwrap();
    let reed = d.join("reed.toml");
    std::fs::write(
        &reed,
        "[[channel]]\nname = \"r\"\nmatch = { request_type = \"reed\" }\n",
    )
    .unwrap();
    let reed = reed.to_str().unwrap();
    let flags: &[(&[&str], &str)] = &[
        (
            &["--limit", "read=100MiB/s,write=100MiB/s"],
            "one class per --limit; repeat the flag: --limit read=100MiB/s --limit write=100MiB/s",
        ),
        (
            &["--stats", "/nonexistent-paio-dir/s.%p.json"],
            "directory \"/nonexistent-paio-dir\" does not exist",
        ),
        (
            &["--policy", reed],
            ":3:9: channel[0].match.request_type: unknown request type \"reed\" (did you mean \"read\"?)",
        ),
        (
            &["--policy", "/dev/zero"],
            "--policy: /dev/zero:1:1: policy: more than the 1048576 bytes allowed",
        ),
        (
            &["--policy", zero],
            "object \"z\" of channel \"r\" has rate 0, which pauses every request it gets until a control rule raises it; without --control nothing will",
        ),
        (
            &["--policy", zero_priority],
            "object \"p\" of channel \"all\" has rate 0",
        ),
    ];
    for (f, expected) in flags {
        let mut args = vec!["run"];
        args.extend_from_slice(f);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{f:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{f:?}: {}", stderr(&o));
        assert!(!marker.exists(), "{f:?}: the command ran");
    }
    // With a control plane, a paused DRL is what the user asked for.
    let sock = d.join("none.sock");
    let o = run(&[
        "run",
        "--policy",
        zero,
        "--control",
        sock.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A policy matching a file class that `PAIO_FILE_CLASSES` does not define
/// limited nothing, with no word (40 MiB through a 10 MiB/s limit in
/// 0.014 s): refused before the command starts, naming the class, what is
/// defined and how to define it.
#[test]
fn a_policy_on_an_undefined_file_class_is_refused() {
    let d = scratch("undefined-class");
    let policy = d.join("data.toml");
    std::fs::write(
        &policy,
        "[[channel]]\nname = \"data\"\nmatch = { file_class = \"data\" }\n\
         default_object = \"limit\"\n[[channel.object]]\nname = \"limit\"\nkind = \"drl\"\n\
         rate = \"10MiB/s\"\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap();
    let with = |classes: Option<&str>| {
        let mut c = paio();
        if let Some(v) = classes {
            c.env("PAIO_FILE_CLASSES", v);
        }
        c.args(["run", "--policy", policy, "--", "true"])
            .output()
            .unwrap()
    };
    for (classes, defined) in [
        (None, "(it is not set)"),
        (Some("logs=/var/log"), "(it defines logs)"),
    ] {
        let o = with(classes);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("the mapping to channel \"data\" matches file_class \"data\", which PAIO_FILE_CLASSES does not define")
                && e.contains(defined)
                && e.contains("PAIO_FILE_CLASSES=\"data=/absolute/prefix\""),
            "{e}"
        );
    }
    let o = with(Some("data=/srv/data"));
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `--control` alone, `--control=default` and a relative path.
#[test]
fn control_without_a_value_or_default_means_paiods_default_socket() {
    let d = scratch("control-default");
    let show = ["sh", "-c", "printf %s \"$PAIO_CONTROL\""];
    let default = paio::control::default_socket_path();
    for flag in [&["--control"][..], &["--control=default"][..]] {
        let mut args = vec!["run"];
        args.extend_from_slice(flag);
        args.push("--");
        args.extend_from_slice(&show);
        let o = paio()
            .env_remove("PAIO_CONTROL")
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{flag:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), default.display().to_string(), "{flag:?}");
    }
    let o = paio()
        .current_dir(&d)
        .args(["run", "--control", "my.sock", "--"])
        .args(show)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), d.join("my.sock").display().to_string());
}

#[test]
fn log_flag_turns_the_interposers_diagnostics_on() {
    let o = run(&["run", "--log", "--", "sh", "-c", "echo \"log=$PAIO_LOG\""]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "log=1\n");
    let o = run(&["run", "--", "sh", "-c", "echo \"log=$PAIO_LOG\""]);
    assert_eq!(stdout(&o), "log=\n");
}

/// A tmux session that is killed when dropped.
struct Tmux(String);

/// The endless reader the `paio top` tests watch (it ends by itself after
/// a minute if a test does not).
const ENDLESS_DD: [&str; 7] = [
    "--",
    "timeout",
    "60",
    "dd",
    "if=/dev/zero",
    "of=/dev/null",
    "bs=64k",
];

impl Tmux {
    /// A detached session `name` running `command` in a 200x30 terminal.
    fn start(name: &str, command: &str) -> Tmux {
        let t = Tmux(format!("{name}-{}", std::process::id()));
        let ok = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &t.0,
                "-x",
                "200",
                "-y",
                "30",
                command,
            ])
            .status()
            .expect("tmux (make setup installs it)")
            .success();
        assert!(ok, "tmux new-session {command}");
        t
    }

    fn pane(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        let ok = Command::new("tmux")
            .args(["send-keys", "-t", &self.0, keys])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux send-keys {keys}");
    }

    fn alive(&self) -> bool {
        Command::new("tmux")
            .args(["has-session", "-t", &self.0])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// Waits (at most 30 s) until the pane shows what `ok` accepts.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let p = self.pane();
            if ok(&p) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "paio top never showed {what}:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

/// `paio top` in a real terminal (tmux): a stage reading under paiod's
/// static rate shows with its channel, its limit and a bandwidth, and a
/// sparkline; `s` sorts by the next column; `q` quits.
#[test]
fn top_shows_a_governed_stage_live_and_answers_its_keys() {
    let lib = real_library();
    let d = scratch("top");
    let sock = d.join("paiod.sock");
    let _daemon = static_paiod(&d, &sock, "100ms", "top", "8MiB/s");
    let _reader = KillOnDrop(
        paio()
            .env("PAIO_LIB", lib)
            .args(["run", "--name", "topjob", "--label", "job=top", "--control"])
            .arg(&sock)
            .args(ENDLESS_DD)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let tmux = Tmux::start(
        "paio-top",
        &format!("{PAIO} top --socket {} --interval 200ms", sock.display()),
    );
    // dd's read channel, limited by paiod's object (the static policy
    // calibrates the 8 MiB/s), moving MiB per second, with a sparkline.
    let pane = tmux.wait_for("dd's read channel at its limit", |p| {
        p.lines().any(|l| {
            l.contains("topjob[")
                && l.contains(" read ")
                && l.contains("paiod ")
                && l.matches("MiB/s").count() == 2
                && l.contains('█')
        })
    });
    assert!(pane.contains("STAGE") && pane.contains("LAT p99"), "{pane}");
    assert!(pane.contains("policy static"), "{pane}");
    assert!(pane.contains("sorted by bandwidth"), "{pane}");
    tmux.keys("s");
    tmux.wait_for("the next sort column", |p| p.contains("sorted by ops"));
    tmux.keys("r");
    tmux.wait_for("the reversed order", |p| {
        p.contains("sorted by ops (reversed)")
    });
    tmux.keys("q");
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.alive() {
        assert!(
            Instant::now() < deadline,
            "paio top did not quit on q:\n{}",
            tmux.pane()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `paio top --stats PATTERN` follows a `paio run --stats PATTERN` job
/// without paiod: its processes' channels, with the limit's object.
#[test]
fn top_follows_a_paio_run_through_its_statistics_files() {
    let lib = real_library();
    let d = scratch("top-stats");
    let pattern = d.join("s.%p.json");
    let _reader = KillOnDrop(
        paio()
            .env("PAIO_LIB", lib)
            .env("PAIO_STATS_INTERVAL", "200ms")
            .args(["run", "--limit", "read=8MiB/s", "--stats"])
            .arg(&pattern)
            .args(ENDLESS_DD)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let tmux = Tmux::start(
        "paio-top-stats",
        &format!(
            "{PAIO} top --stats '{}' --interval 200ms",
            pattern.display()
        ),
    );
    let pane = tmux.wait_for("dd's read channel", |p| {
        p.lines().any(|l| {
            l.contains("preload[dd]")
                && l.contains(" read ")
                && l.contains("limit (drl)")
                && l.contains("MiB/s")
        })
    });
    assert!(pane.contains("process(es) writing"), "{pane}");
    tmux.keys("q");
}

/// `paio doctor` on real programs of each kind: a dynamically linked one
/// (nothing in the way), fio (libaio: a note), a static binary (a problem,
/// exit 1), set-ID and capability copies (a problem exactly when the loader
/// drops LD_PRELOAD for root), a missing control socket, a policy
/// that would pause forever, and running processes with and without the
/// interposer, registered with paiod or not.
#[test]
fn doctor_says_why_a_program_is_or_would_not_be_enforced() {
    let lib = real_library();
    let d = scratch("doctor");
    let doctor = |args: &[&OsStr]| {
        let o = paio()
            .env("PAIO_LIB", lib)
            .arg("doctor")
            .args(args)
            .output()
            .unwrap();
        (o.status.code(), stdout(&o))
    };
    let os = |s: &str| OsStr::new(s).to_os_string();

    let (code, out) = doctor(&[&os("--"), &os("dd")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("dynamically linked, LD_PRELOAD applies") && out.contains("no problem found"),
        "{out}"
    );

    // A text file without `#!` runs by /bin/sh (as paio run runs it); a
    // launcher is said to hide the program it starts; a file that is not
    // executable gets a fix that fits.
    let plain = d.join("plain");
    std::fs::write(&plain, "echo hi\n").unwrap();
    std::fs::set_permissions(&plain, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (code, out) = doctor(&[&os("--"), plain.as_os_str()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("a script without #!, run by /bin/sh"), "{out}");
    let (code, out) = doctor(&[&os("--"), &os("timeout"), &os("5"), &os("true")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("note: timeout starts another program")
            && out.contains("fix: check that program too: paio doctor -- PROGRAM"),
        "{out}"
    );
    let data = d.join("data");
    std::fs::write(&data, "x").unwrap();
    let (code, out) = doctor(&[&os("--"), data.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("make the file executable (chmod +x)"), "{out}");

    let (code, out) = doctor(&[&os("--"), &os("fio")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("note: /usr/bin/fio links libaio.so.1"),
        "{out}"
    );
    assert!(
        out.contains("note: /usr/bin/fio imports mmap64, msync: data it reads or writes through mapped files"),
        "{out}"
    );
    assert!(!out.contains("dd imports"), "{out}");

    let stat = cc(&d, "static", "int main(void) { return 0; }\n", &["-static"]);
    let (code, out) = doctor(&[&os("--"), stat.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("is statically linked") && out.contains("fix: "),
        "{out}"
    );

    // Set-ID bits and capabilities, as root: the doctor's verdict must be
    // the loader's (the copy under LD_PRELOAD says `active` or nothing).
    assert!(
        running_as_root(),
        "the set-ID cases need root to set the bits on copies"
    );
    // name, mode, owner, group, file capabilities, what doctor says.
    type IdCase = (
        &'static str,
        u32,
        Option<u32>,
        Option<u32>,
        bool,
        &'static str,
    );
    let id_cases: [IdCase; 4] = [
        (
            "suid-root",
            0o4755,
            None,
            None,
            false,
            "changes no identity",
        ),
        (
            "suid-nobody",
            0o4755,
            Some(65534),
            None,
            false,
            "is set-user-ID to uid 65534, and you are uid 0",
        ),
        (
            "sgid-nogroup",
            0o2755,
            None,
            Some(65534),
            false,
            "is set-group-ID to gid 65534, and your gid is 0",
        ),
        (
            "caps",
            0o755,
            None,
            None,
            true,
            "file capabilities add nothing for root",
        ),
    ];
    for (name, mode, owner, group, caps, says) in id_cases {
        let copy = d.join(name);
        std::fs::copy("/bin/true", &copy).unwrap();
        std::os::unix::fs::chown(&copy, owner, group).unwrap();
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
        if caps {
            let st = Command::new("setcap")
                .arg("cap_net_raw+ep")
                .arg(&copy)
                .status()
                .expect("setcap (libcap2-bin, scripts/setup.sh) runs");
            assert!(st.success(), "setcap on {}", copy.display());
        }
        let (code, out) = doctor(&[&os("--"), copy.as_os_str()]);
        assert!(out.contains(says), "{name}: {out}");
        let loaded = Command::new(&copy)
            .env("LD_PRELOAD", lib)
            .env("PAIO_LOG", "1")
            .output()
            .unwrap();
        let active = String::from_utf8_lossy(&loaded.stderr).contains("]: active");
        assert_eq!(
            code,
            Some(if active { 0 } else { 1 }),
            "{name}: the loader {} the interposer, doctor said: {out}",
            if active { "kept" } else { "dropped" }
        );
    }

    let none = d.join("none.sock");
    let (code, out) = doctor(&[&os("--control"), none.as_os_str(), &os("--"), &os("dd")]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("no socket at") && out.contains("paiod is not running there"),
        "{out}"
    );

    let paused = d.join("paused.toml");
    std::fs::write(
        &paused,
        "[[channel]]\nname = \"all\"\ndefault_object = \"hold\"\n[[channel.object]]\nname = \"hold\"\nkind = \"drl\"\nrate = \"0\"\n",
    )
    .unwrap();
    let (code, out) = doctor(&[&os("--policy"), paused.as_os_str(), &os("--"), &os("dd")]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("problem: ") && out.contains("paused.toml"),
        "{out}"
    );

    // Running processes: one under paio run --control (registered), one not.
    let sock = d.join("paiod.sock");
    let _daemon = static_paiod(&d, &sock, "100ms", "doc", "64MiB/s");
    let governed = KillOnDrop(
        paio()
            .env("PAIO_LIB", lib)
            .args(["run", "--label", "job=doc", "--control"])
            .arg(&sock)
            .args(["--", "sleep", "30"])
            .spawn()
            .unwrap(),
    );
    let plain = KillOnDrop(Command::new("sleep").arg("30").spawn().unwrap());
    let sleeper = first_child(governed.0.id()).to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let (code, out) = doctor(&[&os("--pid"), &os(&sleeper)]);
        if code == Some(0) {
            break out;
        }
        assert!(Instant::now() < deadline, "never registered:\n{out}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        out.contains("the interposer is loaded") && out.contains("registered with paiod at"),
        "{out}"
    );
    let (code, out) = doctor(&[&os("--pid"), &os(&plain.0.id().to_string())]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("the interposer is not loaded"), "{out}");
    assert!(!out.contains("secure-execution"), "{out}");

    // A set-user-ID program that a command under paio run executes: the
    // loader drops LD_PRELOAD there. setpriv (under the interposer) becomes
    // nobody and executes a set-user-ID root copy of sleep (in a directory
    // that nobody may enter).
    let open_dir = Path::new("/tmp").join(format!("paio-doctor-suid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&open_dir);
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(
        &open_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let suid_sleep = open_dir.join("suid-sleep");
    std::fs::copy("/bin/sleep", &suid_sleep).unwrap();
    std::fs::set_permissions(
        &suid_sleep,
        std::os::unix::fs::PermissionsExt::from_mode(0o4755),
    )
    .unwrap();
    let elevated = KillOnDrop(
        paio()
            .env("PAIO_LIB", lib)
            .args([
                "run",
                "--",
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .arg(&suid_sleep)
            .arg("30")
            .spawn()
            .unwrap(),
    );
    let child = first_child(elevated.0.id());
    // setpriv's pid becomes sleep's at the exec.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_link(format!("/proc/{child}/exe"))
        .ok()
        .as_deref()
        != Some(&suid_sleep)
    {
        assert!(
            Instant::now() < deadline,
            "setpriv never executed {}",
            suid_sleep.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, out) = doctor(&[&os("--pid"), &os(&child.to_string())]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the interposer is not loaded")
            && out.contains("runs in secure-execution mode (AT_SECURE")
            && out.contains("dropped LD_PRELOAD"),
        "{out}"
    );
    drop(elevated);
    let _ = std::fs::remove_dir_all(&open_dir);
}

/// `--progress`: lines with the bytes so far while the command runs, and
/// the signals paio forwards still reach the command (the progress thread
/// blocks them).
#[test]
fn progress_lines_while_the_command_runs_and_signals_still_pass() {
    use std::os::unix::process::ExitStatusExt;
    let lib = real_library();
    let o = paio()
        .env("PAIO_LIB", lib)
        .args(["run", "--progress", "1s", "--limit", "read=4MiB/s", "--"])
        .args(["dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=200"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    let lines: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("paio: ") && l.contains(" s: read "))
        .collect();
    assert!(lines.len() >= 2, "{e}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" MiB (") && l.contains("1 process(es)")),
        "{e}"
    );
    let o = paio()
        .args(["run", "--progress", "100ms", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--progress: at least 1s"),
        "{}",
        stderr(&o)
    );

    // SIGTERM to paio reaches the command, and paio dies by it.
    let mut child = paio()
        .env("PAIO_LIB", lib)
        .args(["run", "--progress", "1s", "--", "sleep", "30"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    first_child(child.id());
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status:?}");
}

/// The width and height of a PNG file, from its IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(
        &b[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is not a PNG",
        path.display()
    );
    assert_eq!(&b[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// `paio run --record`: one line per second with each process's period
/// once (the periods add up to what dd read), and `paio plot` draws it,
/// the statistics files, and refuses what it cannot draw, saying why.
#[test]
fn record_a_run_and_plot_it() {
    let lib = real_library();
    let d = scratch("record");
    let rec = d.join("run.jsonl");
    let stats = d.join("s.%p.json");
    let o = paio()
        .env("PAIO_LIB", lib)
        .arg("run")
        .arg("--record")
        .arg(&rec)
        .arg("--stats")
        .arg(&stats)
        .args(["--limit", "read=4MiB/s", "--"])
        .args(["dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=200"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let samples = paio_control::record::read(&rec).unwrap();
    assert!(samples.len() >= 3, "{samples:?}");
    assert!(samples.windows(2).all(|w| w[0].t_s < w[1].t_s));
    let reads: Vec<f64> = samples
        .iter()
        .flat_map(|s| &s.channels)
        .filter(|c| c.stage.contains("[dd]") && c.channel == "read")
        .map(|c| c.bytes_per_sec)
        .collect();
    // 12.5 MiB at 4 MiB/s: about three full periods and a short last one,
    // whose rate counts for a whole second here; a period recorded twice
    // or left out would be off by a third or more.
    let mib: f64 = reads.iter().sum::<f64>() / (1024.0 * 1024.0);
    assert!((10.0..=17.5).contains(&mib), "{mib} MiB from {reads:?}");
    assert!(
        reads
            .iter()
            .any(|&r| (3.0..=5.0).contains(&(r / 1048576.0))),
        "{reads:?}"
    );

    let png = d.join("run.png");
    let o = paio()
        .arg("plot")
        .arg(&rec)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("3 panel(s)"), "{}", stderr(&o));
    assert_eq!(png_size(&png), (1000, 3 * 300 + 36));

    let totals = d.join("totals.png");
    let o = paio()
        .args(["plot", "--stats"])
        .arg(&stats)
        .arg("-o")
        .arg(&totals)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(png_size(&totals).1, 2 * 340 + 36);

    // What it refuses: exit 2, and what to do.
    let refused = |args: &[&OsStr], says: &str| {
        let o = paio().arg("plot").args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    };
    let os = |s: &str| d.join(s).into_os_string();
    refused(
        &[rec.as_os_str(), "-o".as_ref(), &os("x.jpg")],
        "the output is a PNG file",
    );
    refused(
        &[&os("none.jsonl"), "-o".as_ref(), png.as_os_str()],
        "none.jsonl: cannot read: No such file",
    );
    refused(
        &[
            rec.as_os_str(),
            "--channel".as_ref(),
            "nope".as_ref(),
            "-o".as_ref(),
            png.as_os_str(),
        ],
        "no channel matches nope; the recording has: ",
    );
    std::fs::write(
        d.join("bad.json"),
        r#"{"panels":[{"series":[{"kind":"pie"}]}]}"#,
    )
    .unwrap();
    refused(
        &[
            "--figure".as_ref(),
            &os("bad.json"),
            "-o".as_ref(),
            png.as_os_str(),
        ],
        "at panels[0].series[0].kind: unknown variant `pie`",
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `paiod --record`: a line per control period with each stage's channels,
/// and the last lines written when paiod stops.
#[test]
fn paiod_records_every_period() {
    let lib = real_library();
    let d = scratch("paiod-record");
    let sock = d.join("paiod.sock");
    let rec = d.join("paiod.jsonl");
    let mut daemon = static_paiod_with(
        &d,
        &sock,
        "200ms",
        "rec",
        "8MiB/s",
        &["--record".as_ref(), rec.as_os_str()],
    );
    let o = paio()
        .env("PAIO_LIB", lib)
        .arg("run")
        .arg("--control")
        .arg(&sock)
        // The stage's own limit holds dd until paiod's rule replaces it.
        .args(["--label", "job=rec", "--limit", "read=8MiB/s", "--"])
        .args(["dd", "if=/dev/zero", "of=/dev/null", "bs=64k", "count=200"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    kill(Pid::from_raw(daemon.0.id() as i32), Signal::SIGTERM).unwrap();
    daemon.0.wait().unwrap();
    let samples = paio_control::record::read(&rec).unwrap();
    // dd ran for about 1.5 s at 8 MiB/s: several 200 ms periods.
    assert!(samples.len() >= 5, "{samples:?}");
    let reads: Vec<f64> = samples
        .iter()
        .flat_map(|s| &s.channels)
        .filter(|c| c.stage.contains("] ") && c.channel == "read")
        .map(|c| c.bytes_per_sec / 1048576.0)
        .collect();
    assert!(reads.iter().any(|&r| r > 4.0), "{reads:?}");
    assert!(reads.iter().all(|&r| r < 12.0), "{reads:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// paio run's temporary directory (the generated policy, the shared limits,
/// the statistics of `--summary`) is the user's only: under umask 022 it
/// was 0755 and its files readable by every user.
#[test]
fn the_runs_temporary_directory_is_private() {
    let o = paio()
        .args([
            "run",
            "--limit",
            "read=1GiB/s",
            "--",
            "sh",
            "-c",
            "umask 022; stat -c %a \"$(dirname \"$PAIO_POLICY\")\"",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "700\n");
}
