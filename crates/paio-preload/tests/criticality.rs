//! The two-phase data path under the interposer: splitting with the
//! semantics of one call, call latency in the statistics, and criticality
//! from PAIO_CRITICAL and from a policy's thread and process names.

mod support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

/// A policy sending every request to one priority object splitting at
/// `split`.
fn split_policy(dir: &Path, split: &str) -> PathBuf {
    let p = dir.join(format!("split-{split}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"
[[channel]]
name = "all"
match = {{}}
default_object = "p"
[[channel.object]]
name = "p"
kind = "priority"
depth = 2
split = "{split}"
split_when = "always"
"#
        ),
    )
    .unwrap();
    p
}

fn ops_of(stats: &[Stats], channel: &str) -> u64 {
    stats.iter().map(|s| s.channel(channel).0).sum()
}

#[test]
fn split_calls_return_what_one_call_returns() {
    let dir = scratch("split");
    let exe = compile(&dir, "split", &["-pthread"]);
    // Short reads at end of file, an error after progress and before any,
    // vectored calls, O_APPEND and pipes: stdout (results, errno, checksums)
    // equals the plain run's.
    let pieces = split_policy(&dir, "4KiB");
    let out = same(&dir, &[&exe], &[("PAIO_POLICY", pieces.to_str().unwrap())]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pread-fault-after 4096 777"), "{text}");
    assert!(text.contains("pread-fault-before -1 14"), "{text}");
    let split_ops = ops_of(&take_stats(&dir), "all");
    // The same program without splitting: the difference is the pieces.
    let whole = split_policy(&dir, "0B");
    same(&dir, &[&exe], &[("PAIO_POLICY", whole.to_str().unwrap())]);
    let whole_ops = ops_of(&take_stats(&dir), "all");
    assert!(
        split_ops >= whole_ops + 40,
        "split into 4 KiB pieces: {split_ops} requests, whole: {whole_ops}"
    );
}

/// A scratch directory on the build's file system (direct I/O needs one
/// that supports it; /tmp may be a tmpfs).
fn direct_scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A policy like [`split_policy`] with `depth` slots: a split direct call
/// may keep that many pieces in flight.
fn deep_split_policy(dir: &Path, split: &str, depth: u32) -> PathBuf {
    let p = dir.join(format!("deep-{split}-{depth}.toml"));
    std::fs::write(
        &p,
        format!(
            "[[channel]]\nname = \"all\"\nmatch = {{}}\ndefault_object = \"p\"\n\
             [[channel.object]]\nname = \"p\"\nkind = \"priority\"\ndepth = {depth}\n\
             split = \"{split}\"\nsplit_when = \"always\"\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn direct_calls_in_concurrent_pieces_return_what_one_call_returns() {
    let dir = direct_scratch("direct");
    let exe = compile(&dir, "direct", &[]);
    let policy = deep_split_policy(&dir, "64KiB", 8);
    let env = [("PAIO_POLICY", policy.to_str().unwrap())];
    // Whole calls, end of file, a write inside and one extending the file,
    // errors before progress: stdout (results, errno, checksums) equals the
    // plain run's.
    let out = same(&dir, &[&exe], &env);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pread-eof 534288 777"), "{text}");
    assert!(text.contains("pread-misaligned -1 22"), "{text}");
    // 1 MiB calls in 64 KiB pieces: 15 more requests per call at least.
    let split_ops = ops_of(&take_stats(&dir), "all");
    let whole = deep_split_policy(&dir, "0B", 8);
    same(&dir, &[&exe], &[("PAIO_POLICY", whole.to_str().unwrap())]);
    let whole_ops = ops_of(&take_stats(&dir), "all");
    assert!(
        split_ops >= whole_ops + 6 * 15,
        "split: {split_ops} requests, whole: {whole_ops}"
    );
    // An error after progress returns the progress with the caller's errno
    // (16 pages of 4 KiB before the unwritable one).
    let fault = run(&dir, &[&exe, "fault"], true, &env);
    let text = String::from_utf8_lossy(&fault.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("pread-fault-after 65536 777 "), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn direct_pieces_go_through_a_ring_that_survives_closing_every_descriptor() {
    let dir = direct_scratch("direct-rings");
    let exe = compile(&dir, "direct", &[]);
    let policy = deep_split_policy(&dir, "64KiB", 8);
    let env = [("PAIO_POLICY", policy.to_str().unwrap())];
    let plain = run(&dir, &[&exe, "rings"], false, &[]);
    let pre = run(&dir, &[&exe, "rings"], true, &env);
    assert!(
        pre.status.success(),
        "{}",
        String::from_utf8_lossy(&pre.stderr)
    );
    let lines = |o: &Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (plain, pre) = (lines(&plain), lines(&pre));
    assert_eq!(plain.len(), 10, "{plain:?}");
    for (p, q) in plain.iter().zip(&pre) {
        if p.starts_with("rings") {
            // One ring, kept across closefrom(3), a close() loop and
            // close_range(3, ~0U, 0).
            let name = p.split(' ').next().unwrap();
            assert_eq!(p, &format!("{name} 0"));
            assert_eq!(q, &format!("{name} 1"));
        } else {
            assert_eq!(p, q, "the same bytes read");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fio_direct_verifies_through_concurrent_pieces() {
    require("fio");
    let dir = direct_scratch("direct-fio");
    let policy = deep_split_policy(&dir, "4KiB", 8);
    let (ops, _) = fio_run(&dir, "psync", &policy, &["--direct=1"]);
    // Reads and writes in 4 KiB pieces: 64 requests per 256 KiB call.
    assert!(ops >= 63 * ((8 << 20) / (256 << 10)), "{ops} requests");
    let _ = std::fs::remove_dir_all(&dir);
}

/// fio with verification (and `extra` arguments) under `policy`:
/// (requests, bytes) the stage counted.
fn fio_run(dir: &Path, engine: &str, policy: &Path, extra: &[&str]) -> (u64, u64) {
    let engine = format!("--ioengine={engine}");
    let mut args = vec![
        "fio",
        "--name=job",
        &engine,
        "--rw=randrw",
        "--bs=256k",
        "--size=8m",
        "--verify=crc32c",
        "--do_verify=1",
        "--filename=fio.dat",
        "--output-format=terse",
    ];
    args.extend_from_slice(extra);
    let out = run(
        dir,
        &args,
        true,
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    assert!(
        out.status.success(),
        "fio {engine} failed under the interposer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // terse field 5 (1-based) is the error code.
    let err = String::from_utf8_lossy(&out.stdout)
        .split(';')
        .nth(4)
        .unwrap_or("?")
        .to_string();
    assert_eq!(err, "0", "fio {engine} reported an error");
    take_stats(dir).iter().fold((0, 0), |(o, b), s| {
        let (so, sb) = s.channel("all");
        (o + so, b + sb)
    })
}

fn fio_split(engine: &str) {
    require("fio");
    let dir = scratch(&format!("split-fio-{engine}"));
    let (split_ops, split_bytes) = fio_run(&dir, engine, &split_policy(&dir, "4KiB"), &[]);
    let (whole_ops, whole_bytes) = fio_run(&dir, engine, &split_policy(&dir, "0B"), &[]);
    // 8 MiB of 256 KiB calls (reads, writes, then verification reads):
    // as 4 KiB pieces, at least 63 more requests per 256 KiB of data.
    assert!(split_bytes >= 8 << 20, "fio {engine}: {split_bytes} bytes");
    assert!(
        split_ops >= whole_ops + 63 * ((8 << 20) / (256 << 10)),
        "fio {engine}: {split_ops} requests split, {whole_ops} whole ({split_bytes} / {whole_bytes} bytes)"
    );
}

#[test]
fn fio_psync_verifies_through_pieces() {
    fio_split("psync");
}

#[test]
fn fio_pvsync_verifies_through_pieces() {
    fio_split("pvsync");
}

#[test]
fn data_calls_have_latency_percentiles() {
    let dir = scratch("latency");
    random_file(&dir.join("in.bin"), 1 << 20);
    run(&dir, &["dd", "if=in.bin", "of=out.bin", "bs=4k"], true, &[]);
    let stats = take_stats(&dir);
    let read = stats[0].channel_json("read").unwrap();
    let lat = &read["latency_total"];
    assert_eq!(lat["ops"].as_u64(), Some(257), "{read}");
    let (p50, p99, max) = (
        lat["p50_ns"].as_u64().unwrap(),
        lat["p99_ns"].as_u64().unwrap(),
        lat["max_ns"].as_u64().unwrap(),
    );
    // A page-cache read of 4 KiB takes microseconds, not nothing and not
    // seconds; percentiles are ordered.
    assert!((100..1_000_000).contains(&p50), "{lat}");
    assert!(p50 <= p99 && p99 <= max, "{lat}");
}

/// Calls on streams (pipes, sockets, terminals, anonymous inodes such as an
/// eventfd) wait for their peer or an event, not for storage: they are
/// charged after they return, in one phase. Four threads waiting on a pipe
/// held all four slots of a `depth = 4` priority object, so no read of a
/// file ever went; so did two waiting on an eventfd; now the reads go, and
/// only they have a latency.
#[test]
fn threads_waiting_on_a_pipe_hold_no_slot() {
    let dir = board_scratch("idle-pipe", "depth = 2");
    let exe = compile(&dir, "idle_pipe", &["-pthread"]);
    let board = dir.join("test.board");
    let out = run(
        &dir,
        &["timeout", "60", &exe, "4", "in.bin"],
        true,
        &[
            ("PAIO_POLICY", dir.join("bg.toml").to_str().unwrap()),
            ("PAIO_BOARD", board.to_str().unwrap()),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "100 reads\n");
    let stats = take_stats(&dir);
    let prog = stats
        .iter()
        .find(|s| s.exe.ends_with("/idle_pipe"))
        .unwrap_or_else(|| panic!("no statistics of idle_pipe: {stats:?}"));
    let all = prog.channel_json("all").unwrap();
    // 100 preads with a latency; the waiters' reads and the writes that
    // let them go counted without one (stdout is the test's pipe too).
    assert_eq!(all["latency_total"]["ops"].as_u64(), Some(100), "{all}");
    assert!(all["ops"].as_u64().unwrap() >= 109, "{all}");
}

/// A critical program waiting for input on a FIFO is not critical I/O in
/// flight: the board's count stays 0 while it waits (it held every other
/// program's background work back for as long as it waited).
#[test]
fn a_critical_program_waiting_for_input_is_not_on_the_board() {
    use std::io::Write;
    let dir = board_scratch("critical-fifo", "busy_depth = 0");
    let board = dir.join("test.board");
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut critical = Reaped(
        Command::new("dd")
            .args(["if=fifo", "of=/dev/null", "bs=1", "count=1"])
            .current_dir(&dir)
            .env("LD_PRELOAD", lib())
            .env("PAIO_CRITICAL", "1")
            .env("PAIO_BOARD", &board)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    // dd has the FIFO open and waits in read(2); a background program's
    // reads go meanwhile.
    let out = run(
        &dir,
        BACKGROUND_DD,
        true,
        &[
            ("PAIO_POLICY", dir.join("bg.toml").to_str().unwrap()),
            ("PAIO_BOARD", board.to_str().unwrap()),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_nothing_critical_on(&board);
    writer.write_all(b"x").unwrap();
    drop(writer);
    assert!(critical.wait().unwrap().success());
}

/// A vfork child's `dup2` (Python starts subprocesses with vfork) changed
/// its parent's descriptor table, which it shares: the parent's pipe became
/// storage, its reads timed and, if critical, on the board while waiting.
#[test]
fn a_vfork_childs_dup2_leaves_the_parents_descriptors_alone() {
    let dir = scratch("vfork-dup");
    random_file(&dir.join("f"), 4096);
    let exe = compile(&dir, "vfork_dup", &[]);
    let policy = dir.join("all.toml");
    std::fs::write(&policy, "[[channel]]\nname = \"all\"\nmatch = {}\n").unwrap();
    let out = run(
        &dir,
        &[&exe, "f"],
        true,
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    assert!(out.status.success(), "{out:?}");
    let stats = take_stats(&dir);
    let mine: Vec<_> = stats.iter().filter(|s| s.exe == exe).collect();
    assert_eq!(mine.len(), 1, "{:?}", summary(&stats));
    let all = mine[0].channel_json("all").unwrap();
    // The file's read only: the pipe's reads and writes are a stream's.
    assert_eq!(all["latency_total"]["ops"].as_u64(), Some(1), "{all}");
}

/// A copy call from a stream (`splice` from a pipe) waits for its peer: it
/// is charged after the call, so a critical program waiting in it is not
/// critical I/O in flight on the board.
#[test]
fn a_critical_splice_waiting_on_a_pipe_is_not_on_the_board() {
    use std::io::Write;
    let dir = scratch("splice-wait");
    let exe = compile(&dir, "splice_wait", &[]);
    let board = dir.join("test.board");
    let mut child = Reaped(
        Command::new(&exe)
            .arg("out.bin")
            .current_dir(&dir)
            .env("LD_PRELOAD", lib())
            .env("PAIO_CRITICAL", "1")
            .env("PAIO_BOARD", &board)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.stdin.take().unwrap();
    // Until it is in splice(2), waiting: its state is S with splice's
    // system call number in /proc/PID/syscall.
    let syscall = format!("/proc/{}/syscall", child.id());
    let t0 = std::time::Instant::now();
    let waiting = format!("{} ", libc::SYS_splice);
    while !std::fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with(&waiting)) {
        assert!(t0.elapsed().as_secs() < 20, "never waited in splice");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_nothing_critical_on(&board);
    stdin.write_all(b"data").unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::read(dir.join("out.bin")).unwrap(), b"data");
}

/// A critical process's sync calls are two-phase requests: counted among
/// its critical requests with their latency (and so seen by paiod's latency
/// target and, while they run, by the board).
#[test]
fn sync_calls_are_critical_requests_with_a_latency() {
    let dir = scratch("sync-latency");
    // A file, not /dev/zero: calls on a character device are a stream's,
    // charged in one phase without a latency.
    random_file(&dir.join("in.bin"), 16_384);
    let critical_ops = |conv: &str| {
        let mut argv = vec!["dd", "if=in.bin", "of=out.bin", "bs=4k", "count=4"];
        if !conv.is_empty() {
            argv.push(conv);
        }
        let out = run(&dir, &argv, true, &[("PAIO_CRITICAL", "1")]);
        assert!(out.status.success(), "{out:?}");
        let stats = take_stats(&dir);
        assert_eq!(stats.len(), 1);
        let c = &stats[0].json["stats"]["critical"];
        assert_eq!(c["latency_total"]["ops"], c["ops"], "{c}");
        c["ops"].as_u64().unwrap()
    };
    let plain = critical_ops("");
    assert!(plain >= 8, "4 reads and 4 writes at least: {plain}");
    assert_eq!(critical_ops("conv=fsync"), plain + 1, "one fsync");
    assert_eq!(critical_ops("conv=fdatasync"), plain + 1, "one fdatasync");
}

const ROUTE_BY_CRITICALITY: &str = r#"
[[channel]]
name = "critical-reads"
match = { criticality = "critical", request_type = "read" }
[[channel]]
name = "normal-reads"
match = { criticality = "normal", request_type = "read" }
"#;

fn routed(dir: &Path, extra: &str, env: &[(&str, &str)], argv: &[&str]) -> (u64, u64, Output) {
    let policy = dir.join("route.toml");
    std::fs::write(&policy, format!("{extra}\n{ROUTE_BY_CRITICALITY}")).unwrap();
    let mut env = env.to_vec();
    env.push(("PAIO_POLICY", policy.to_str().unwrap()));
    let out = run(dir, argv, true, &env);
    let stats = take_stats(dir);
    let bytes = |c: &str| stats.iter().map(|s| s.channel(c).1).sum::<u64>();
    (bytes("critical-reads"), bytes("normal-reads"), out)
}

#[test]
fn paio_critical_marks_the_process() {
    let dir = scratch("critical-env");
    random_file(&dir.join("in.bin"), 100_000);
    let dd = ["dd", "if=in.bin", "of=/dev/null", "bs=10000"];
    let (c, n, _) = routed(&dir, "", &[("PAIO_CRITICAL", "1")], &dd);
    assert_eq!((c, n), (100_000, 0));
    let (c, n, _) = routed(&dir, "", &[("PAIO_CRITICAL", "0")], &dd);
    assert_eq!((c, n), (0, 100_000));
    let (c, n, _) = routed(&dir, "[criticality]\nprocesses = [\"dd\"]", &[], &dd);
    assert_eq!((c, n), (100_000, 0), "the process name matches");
}

#[test]
fn a_bad_paio_critical_is_refused_with_its_reason() {
    let dir = scratch("critical-bad");
    let out = run(&dir, &["true"], true, &[("PAIO_CRITICAL", "yes")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PAIO_CRITICAL=\"yes\": expected 1 (the process is critical) or 0"),
        "{err}"
    );
}

#[test]
fn thread_names_mark_threads_critical() {
    let dir = scratch("critical-names");
    let exe = compile(&dir, "names", &["-pthread"]);
    let (c, n, out) = routed(&dir, "[criticality]\nthreads = [\"crit-*\"]", &[], &[&exe]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    // Critical: the worker its parent named (10 × 1000 bytes) and the main
    // thread while it called itself crit-main (10 × 300); not the
    // background worker (10 × 70) nor main once renamed (10 × 5).
    assert_eq!((c, n), (13_000, 750));
}

/// The board's 64-bit word `i` (0 if the board is not there yet).
fn board_word(board: &Path, i: usize) -> u64 {
    let words = std::fs::read(board).unwrap_or_default();
    if words.len() != 4096 {
        return 0;
    }
    u64::from_le_bytes(words[8 * i..8 * i + 8].try_into().unwrap())
}

/// Asserts that the board has no critical request in flight (word 2).
fn assert_nothing_critical_on(board: &Path) {
    assert_eq!(
        board_word(board, 2),
        0,
        "critical I/O in flight on the board"
    );
}

/// Waits up to 20 s until the board's word `i` is `value`.
fn await_board_word(board: &Path, i: usize, value: u64, what: &str) {
    let t0 = std::time::Instant::now();
    while board_word(board, i) != value {
        assert!(
            t0.elapsed().as_secs() < 20,
            "{what}: word {i} never became {value}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A scratch directory `name` with a 40 KiB `in.bin` and `bg.toml`: one
/// priority object with `settings` for everything, and a starvation guard
/// of 60 s (so that it never releases a held request during a test).
fn board_scratch(name: &str, settings: &str) -> Scratch {
    let dir = scratch(name);
    random_file(&dir.join("in.bin"), 40_960);
    let policy = format!(
        "[[channel]]\nname = \"all\"\nmatch = {{}}\ndefault_object = \"p\"\n\
         [[channel.object]]\nname = \"p\"\nkind = \"priority\"\n{settings}\n\
         starvation = \"60s\"\n"
    );
    std::fs::write(dir.join("bg.toml"), policy).unwrap();
    dir
}

/// A child process killed and reaped when dropped, so that a failed
/// assertion leaves no program behind (a held background one polls the
/// board until it is let go).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// The background program of [`held_background`]: `dd` reading `in.bin`.
const BACKGROUND_DD: &[&str] = &["dd", "if=in.bin", "of=/dev/null", "bs=4096"];

/// Starts a background program (`argv`, in `dir`) under `dir/bg.toml` and
/// the board `board`, and checks that it is still held 500 ms later
/// (`why`: what should hold it).
fn held_background(dir: &Path, board: &Path, argv: &[&str], why: &str) -> Reaped {
    let mut background = Reaped(
        Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(dir)
            .env("LD_PRELOAD", lib())
            .env("PAIO_POLICY", dir.join("bg.toml"))
            .env("PAIO_BOARD", board)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        background.try_wait().unwrap().is_none(),
        "the background read went ahead with {why}"
    );
    background
}

/// Waits up to 30 s for a held background program to finish, and checks
/// that it succeeded (a starvation guard of 60 s would release it only
/// later).
fn await_success(background: &mut Reaped) {
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = background.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed().as_secs() < 30, "background still held");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(status.success());
}

/// A background program under a priority object with `busy_depth = 0` holds
/// its reads while another program's critical read is in flight (seen through
/// the shared board), and goes on once it completed.
///
/// With `copy`, the background program is `cp` (one `copy_file_range`)
/// under a priority object for reads only: it is held before its copy
/// moves a byte, not after (its output stays empty while held).
fn background_and_critical(kill_critical: bool, copy: bool) {
    use std::io::Write;
    let dir = board_scratch(
        match (kill_critical, copy) {
            (true, _) => "board-kill",
            (false, false) => "board",
            (false, true) => "board-copy",
        },
        "busy_depth = 0",
    );
    let background_argv: &[&str] = if copy {
        // Opens, stats and the write side pass; the copy's read is held.
        std::fs::write(
            dir.join("bg.toml"),
            "[[channel]]\nname = \"reads\"\nmatch = { request_type = \"read\" }\n\
             default_object = \"p\"\n[[channel.object]]\nname = \"p\"\n\
             kind = \"priority\"\nbusy_depth = 0\nstarvation = \"60s\"\n",
        )
        .unwrap();
        &["cp", "in.bin", "out.bin"]
    } else {
        BACKGROUND_DD
    };
    let board = dir.join("test.board");
    let board = board.to_str().unwrap();
    // The critical program holds a read admitted until the test writes a
    // byte to it: in flight on the board meanwhile.
    let (mut critical, mut writer) = holder(&dir, Path::new(board), None);
    // The critical read is on the board (its in-flight word).
    await_board_word(Path::new(board), 2, 1, "the critical read");
    let mut background = held_background(
        &dir,
        Path::new(board),
        background_argv,
        "the critical one in flight",
    );
    if copy {
        let held = std::fs::metadata(dir.join("out.bin")).map_or(0, |m| m.len());
        assert_eq!(held, 0, "the copy moved {held} bytes while held");
    }
    if kill_critical {
        // Dies with its request in flight: the board takes it back.
        critical.kill().unwrap();
        critical.wait().unwrap();
    } else {
        let before = monotonic_ns();
        writer.write_all(b"x").unwrap();
        drop(writer);
        assert!(critical.wait().unwrap().success());
        // The read completed after the write and before dd exited: the
        // board's time of the latest critical completion (word 3, the
        // interposer's counter reading converted to CLOCK_MONOTONIC) is
        // between the two.
        let (last, after) = (board_word(Path::new(board), 3), monotonic_ns());
        assert!(
            before < last && last < after,
            "latest critical completion at {last} ns, not between {before} and {after}"
        );
    }
    await_success(&mut background);
    if copy {
        assert!(
            std::fs::read(dir.join("out.bin")).unwrap()
                == std::fs::read(dir.join("in.bin")).unwrap()
        );
    }
}

/// Starts tests/hold.c under the board `board`: with `policy`, it holds a
/// non-critical read admitted through that policy's objects, else a
/// critical read through a plain channel. Returns once the read is
/// admitted, with the program and its stdin: a byte there completes the
/// read and ends it.
fn holder(dir: &Path, board: &Path, policy: Option<&Path>) -> (Reaped, std::process::ChildStdin) {
    use std::io::BufRead;
    use std::process::Stdio;
    let exe = compile_with_libpaio(dir, "hold");
    let plain = dir.join("plain.toml");
    std::fs::write(&plain, "[[channel]]\nname = \"all\"\nmatch = {}\n").unwrap();
    let mut cmd = Command::new(exe);
    match policy {
        Some(p) => cmd.arg(p),
        None => cmd.arg(&plain).arg("critical"),
    };
    let mut child = Reaped(
        cmd.current_dir(dir)
            .env_remove("LD_PRELOAD")
            // cargo's, which names its profile's libpaio (maybe another
            // build's) ahead of the one hold was linked with.
            .env_remove("LD_LIBRARY_PATH")
            .env("PAIO_BOARD", board)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "admitted\n", "hold did not admit its read");
    (child, stdin)
}

/// `CLOCK_MONOTONIC` in nanoseconds, the board's time line.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn background_waits_for_another_programs_critical_io() {
    background_and_critical(false, false);
}

/// A background copy (`cp`: `copy_file_range`) waits before it moves a
/// byte while another program's critical read is in flight.
#[test]
fn a_background_copy_waits_before_it_moves_bytes() {
    background_and_critical(false, true);
}

/// A critical program killed with a request in flight does not hold the
/// others back: readers reclaim a dead process's count (within a second).
#[test]
fn a_dead_critical_program_is_reclaimed() {
    background_and_critical(true, false);
}

/// `shared_busy_depth` across programs: one background program holds the
/// pool's only token (a read held admitted, taken while nothing was
/// critical), a critical read is in flight in a second program, and a third
/// program's background reads wait although its own object would admit
/// them; they go once the holder's token comes back, when its read
/// completes or when it is killed (the board takes a dead process's tokens
/// back within a second).
fn shared_pool(kill_holder: bool) {
    use std::io::Write;
    let dir = board_scratch(
        if kill_holder { "pool-kill" } else { "pool" },
        "depth = 4\nbusy_depth = 4\nshared_busy_depth = 1",
    );
    let board = dir.join("test.board");
    let (mut keeper, mut held) = holder(&dir, &board, Some(&dir.join("bg.toml")));
    await_board_word(&board, 6, 1, "the holder's token");
    let (mut critical, mut crit) = holder(&dir, &board, None);
    await_board_word(&board, 2, 1, "the critical read");
    let mut background = held_background(&dir, &board, BACKGROUND_DD, "the pool full");
    if kill_holder {
        keeper.kill().unwrap();
        keeper.wait().unwrap();
    } else {
        held.write_all(b"x").unwrap();
        assert!(keeper.wait().unwrap().success());
    }
    drop(held);
    await_success(&mut background);
    assert_eq!(board_word(&board, 6), 0, "every token given back");
    crit.write_all(b"x").unwrap();
    drop(crit);
    assert!(critical.wait().unwrap().success());
}

#[test]
fn a_full_shared_pool_holds_other_programs_background() {
    shared_pool(false);
}

/// A background program killed holding tokens does not shrink the pool.
#[test]
fn a_dead_programs_tokens_are_reclaimed() {
    shared_pool(true);
}

/// What `true` under the interposer says on stderr with the board `board`
/// (it succeeds whatever the board: a board it cannot use costs only the
/// cross-process view).
fn board_said(dir: &Path, board: &Path) -> String {
    let out = run(
        dir,
        &["true"],
        true,
        &[("PAIO_BOARD", board.to_str().unwrap())],
    );
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_board_others_can_read_is_refused() {
    let dir = scratch("board-mode");
    let board = dir.join("open.board");
    std::fs::write(&board, vec![0u8; 4096]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&board, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = board_said(&dir, &board);
    assert!(
        err.contains("mode 644 lets other users in: remove it")
            && err.contains("critical I/O of other processes is not seen"),
        "{err}"
    );
}

/// A process that execs keeps one slot on the board: the new image of the
/// library takes over the slot of the old (same pid, same start time). Each
/// exec took a slot of its own, held while the process lived.
#[test]
fn a_process_that_execs_keeps_one_slot() {
    let dir = scratch("board-exec");
    random_file(&dir.join("in.bin"), 64);
    let board = dir.join("test.board");
    let mut child = Reaped(
        Command::new("sh")
            .args([
                "-c",
                "read a < in.bin; exec sh -c 'read b < in.bin; exec sh -c \"read c < in.bin; exec sleep 5\"'",
            ])
            .current_dir(&dir)
            .env("LD_PRELOAD", lib())
            .env("PAIO_CRITICAL", "1")
            .env("PAIO_BOARD", &board)
            .spawn()
            .unwrap(),
    );
    let pid = u64::from(child.id());
    let slots = || {
        (0..252)
            .filter(|s| board_word(&board, 8 + 2 * s) & 0xffff_ffff == pid)
            .count()
    };
    // The three shells have read (their stages claimed slots) once sleep runs.
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c == "sleep\n") {
        assert!(t0.elapsed().as_secs() < 20, "sleep never ran");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(slots(), 1, "slots of pid {pid}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Another user's file at the board's path (empty, open to all: the size
/// a creator may still be setting) is refused at once: waiting up to 100 ms
/// for it to be sized cost each of the victim's processes 100 ms.
#[test]
fn a_squatted_board_is_refused_without_waiting() {
    use std::os::unix::fs::PermissionsExt;
    require("strace");
    let dir = scratch("board-squat");
    let board = dir.join("squat.board");
    std::fs::write(&board, b"").unwrap();
    std::fs::set_permissions(&board, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&board, Some(65534), Some(65534)).unwrap();
    let out = Command::new("strace")
        .args([
            "-f",
            "-e",
            "trace=nanosleep,clock_nanosleep",
            "-o",
            "trace.txt",
            "true",
        ])
        .current_dir(&dir)
        .env("LD_PRELOAD", lib())
        .env("PAIO_BOARD", &board)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("owned by uid 65534"), "{err}");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    let sleeps = trace.lines().filter(|l| l.contains("sleep(")).count();
    assert_eq!(sleeps, 0, "{trace}");
}

/// A board path that cannot be opened says why and what to do, not only
/// the system's error.
#[test]
fn an_unusable_board_path_says_what_to_do() {
    let dir = scratch("board-path");
    let link = dir.join("link.board");
    std::os::unix::fs::symlink(dir.join("elsewhere.board"), &link).unwrap();
    for (board, says) in [
        (link, "symbolic link, which is not followed"),
        (
            dir.join("missing/dir.board"),
            "its directory does not exist: create it, or set PAIO_BOARD",
        ),
    ] {
        let err = board_said(&dir, &board);
        assert!(err.contains(says), "{err}");
    }
}

/// Bytes written by critical and by normal requests when tests/locks.c runs
/// with `[criticality] inherit = {inherit}` (and `args`; it prints
/// `expect`), helper window 5 s.
fn lock_run(dir: &Path, exe: &str, args: &[&str], expect: &str, inherit: bool) -> (u64, u64) {
    let policy = dir.join("locks.toml");
    let head = format!("inherit = {inherit}\nhelper_window = \"5s\"");
    std::fs::write(&policy, writes_by_criticality(&head, "", "")).unwrap();
    let mut argv = vec![exe];
    argv.extend_from_slice(args);
    let out = same(dir, &argv, &[("PAIO_POLICY", policy.to_str().unwrap())]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), expect);
    let stats = take_stats(dir);
    let bytes = |c: &str| stats.iter().map(|s| s.channel(c).1).sum::<u64>();
    (bytes("critical-writes"), bytes("normal-writes"))
}

/// A policy marking threads named `crit-*` critical (with `criticality`,
/// more `[criticality]` keys) and counting writes in channels
/// `critical-writes` and `normal-writes`, each with the object settings
/// given (empty: no object).
fn writes_by_criticality(criticality: &str, critical_object: &str, normal_object: &str) -> String {
    let channel = |class: &str, object: &str| {
        let mut c = format!(
            "[[channel]]\nname = \"{class}-writes\"\n\
             match = {{ criticality = \"{class}\", request_type = \"write\" }}\n"
        );
        if !object.is_empty() {
            c += &format!("default_object = \"p\"\n[[channel.object]]\nname = \"p\"\n{object}\n");
        }
        c
    };
    format!(
        "[criticality]\nthreads = [\"crit-*\"]\n{criticality}\n{}{}",
        channel("critical", critical_object),
        channel("normal", normal_object)
    )
}

/// A critical thread blocked on a mutex, then on a rwlock, lends the holder
/// its criticality: the holder's writes while it waits are critical, its
/// writes after releasing the lock are not; with `inherit = false`, none of
/// the holder's writes are.
#[test]
fn a_lock_holder_inherits_criticality_while_a_critical_thread_waits() {
    let lent = 10 * 4000 + 10 * 2000;
    inheritance_case("locks", "offsets ok", 2 * 3 * 300, lent, 2 * 5 * 700);
}

/// tests/locks.c in `mode` ("locks": no argument) prints `<expect>`; the
/// bytes its critical thread writes itself (`own`), the bytes a thread it
/// waits for writes meanwhile (`lent`) and after (`after`) are critical,
/// critical, normal with inheritance, and critical, normal, normal with
/// `inherit = false`.
fn inheritance_case(mode: &str, expect: &str, own: u64, lent: u64, after: u64) {
    let dir = scratch(&format!("inherit-{mode}"));
    let exe = compile(&dir, "locks", &["-pthread"]);
    let args: &[&str] = if mode == "locks" { &[] } else { &[mode] };
    let expect = format!("{expect}\n");
    let run = |inherit| lock_run(&dir, &exe, args, &expect, inherit);
    // The critical main thread prints `expect` too.
    let own = own + expect.len() as u64;
    assert_eq!(run(true), (own + lent, after), "{mode}, inheriting");
    assert_eq!(run(false), (own, lent + after), "{mode}, inherit = false");
}

/// A critical thread blocked to write a rwlock that another thread holds
/// for reading lends the reader its criticality until it unlocks (glibc
/// records no readers: the hooks do); not with `inherit = false`.
#[test]
fn a_rwlock_reader_inherits_from_a_blocked_critical_writer() {
    inheritance_case("readers", "readers ok", 3 * 300, 10 * 1500, 5 * 700);
}

/// A critical thread waiting on a condition variable lends its criticality
/// to the thread that signalled it last (its helper) until the helper
/// signals again; not with `inherit = false`.
#[test]
fn a_condition_variables_helper_inherits_criticality() {
    inheritance_case("cond", "cond ok", 3 * 300, 10 * 3000, 5 * 700);
}

/// dd writing 64 MiB of zeros to `out.bin` in 1 MiB writes.
const DD_64MIB: [&str; 6] = [
    "dd",
    "if=/dev/zero",
    "of=out.bin",
    "bs=1M",
    "count=64",
    "status=none",
];

/// Write-backs the dirty-data bound started in `dd ...` runs of 64 MiB in
/// 1 MiB writes under `dirty_per_file = "4MiB"`, with `env` and dd's extra
/// arguments; the file's bytes are checked.
fn dirty_writebacks(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> u64 {
    let policy = dir.join("dirty.toml");
    std::fs::write(&policy, "[criticality]\ndirty_per_file = \"4MiB\"\n").unwrap();
    let mut argv = DD_64MIB.to_vec();
    argv.extend_from_slice(extra);
    let mut env = env.to_vec();
    env.push(("PAIO_POLICY", policy.to_str().unwrap()));
    let out = run(dir, &argv, true, &env);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::metadata(dir.join("out.bin")).unwrap().len(),
        64 << 20
    );
    let stats = take_stats(dir);
    assert_eq!(stats.len(), 1, "{stats:?}");
    stats[0].json["dirty_writebacks"].as_u64().unwrap()
}

/// A non-critical buffered writer's file is written back every half of
/// `dirty_per_file` (64 MiB at a 4 MiB bound: every 2 MiB, 32 times); a
/// critical writer and an O_DIRECT writer are not bounded.
#[test]
fn the_dirty_bound_writes_back_non_critical_writers_early() {
    let dir = scratch("dirty");
    assert_eq!(dirty_writebacks(&dir, &[], &[]), 32);
    assert_eq!(dirty_writebacks(&dir, &[], &[("PAIO_CRITICAL", "1")]), 0);
    assert_eq!(dirty_writebacks(&dir, &["oflag=direct"], &[]), 0);
    // What the kernel saw: the same number of sync_file_range calls, each
    // waiting only for the write-back before it (the default, and said
    // explicitly), or with `dirty_overlap = false` for its own.
    let overlapped = "SYNC_FILE_RANGE_WAIT_BEFORE|SYNC_FILE_RANGE_WRITE)";
    let cases = [
        ("dirty_per_file = \"4MiB\"", overlapped),
        (
            "dirty_per_file = \"4MiB\"\ndirty_overlap = true",
            overlapped,
        ),
        (
            "dirty_per_file = \"4MiB\"\ndirty_overlap = false",
            "SYNC_FILE_RANGE_WAIT_BEFORE|SYNC_FILE_RANGE_WRITE|SYNC_FILE_RANGE_WAIT_AFTER)",
        ),
    ];
    for (section, flags) in cases {
        let calls = traced_writebacks(&dir, section);
        assert_eq!(calls.len(), 32, "{calls:?}");
        assert!(
            calls.iter().all(|c| c.ends_with(flags)),
            "{section}: {calls:?}"
        );
    }
}

/// The `sync_file_range` calls (strace's lines, up to the flags) of dd
/// writing 64 MiB under `[criticality]` with `section`.
fn traced_writebacks(dir: &Path, section: &str) -> Vec<String> {
    require("strace");
    let policy = dir.join("traced.toml");
    std::fs::write(&policy, format!("[criticality]\n{section}\n")).unwrap();
    let out = Command::new("strace")
        .args(["-f", "-e", "trace=sync_file_range", "-o", "trace.txt"])
        .args(DD_64MIB)
        .current_dir(dir)
        .env("LD_PRELOAD", lib())
        .env("PAIO_POLICY", &policy)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    trace
        .lines()
        .filter(|l| l.contains("sync_file_range("))
        .map(|l| l.rsplit_once(" = ").map_or(l, |(call, _)| call).to_string())
        .collect()
}

/// A split call whose thread is lent criticality between pieces issues the
/// rest as one critical request: the critical thread waits for it, and
/// critical requests pass the priority object's rate. The pieces are slow
/// (4 KiB at 40 KiB/s: 100 ms each), so the loan arrives while the first
/// ones wait.
#[test]
fn a_split_call_lent_criticality_issues_the_rest_at_once() {
    let dir = scratch("inherit-split");
    let exe = compile(&dir, "locks", &["-pthread"]);
    let policy = dir.join("split-loan.toml");
    let pieces = "kind = \"priority\"\nsplit = \"4KiB\"\nsplit_when = \"always\"";
    let slow = format!("{pieces}\nrate = \"40KiB/s\"\nburst = \"4KiB\"");
    std::fs::write(&policy, writes_by_criticality("", pieces, &slow)).unwrap();
    let t0 = std::time::Instant::now();
    let out = run(
        &dir,
        &[&exe, "split"],
        true,
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    let took = t0.elapsed();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "split ok\n",
        "{out:?}"
    );
    let stats = take_stats(&dir);
    let (c_ops, c_bytes) = stats[0].channel("critical-writes");
    let (n_ops, n_bytes) = stats[0].channel("normal-writes");
    // The split write, and "split ok\n" printed by the critical main
    // thread at exit.
    assert_eq!(c_bytes + n_bytes, 65536 + 9);
    assert_eq!(c_ops, 2, "the rest in one critical request, and the line");
    assert!(
        (1..=4).contains(&n_ops) && n_bytes == n_ops * 4096,
        "a few 4 KiB pieces before the loan: {n_ops} requests, {n_bytes} bytes"
    );
    // 16 pieces at the rate would take 1.5 s.
    assert!(took < std::time::Duration::from_millis(1200), "{took:?}");
}
