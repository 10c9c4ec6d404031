//! errno and results of failing calls, with and without waiting; the fd →
//! file class table; fio with verification.

mod support;
use std::path::Path;
use std::process::Command;
use support::*;

fn compile_errno(dir: &Path) -> String {
    let exe = compile(dir, "errno", &["-D_FORTIFY_SOURCE=2"]);
    std::fs::write(dir.join("ro.txt"), "hello world\n").unwrap();
    exe
}

#[test]
fn failing_calls_return_the_same_result_and_errno() {
    let dir = scratch("errno");
    let exe = compile_errno(&dir);
    let out = same(&dir, &[&exe], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Without a statistics file the metadata calls skip the stage
    // (`unobserved_metadata_calls_skip_the_stage_and_limits_hold`): the
    // same results and errno on that path too.
    let unobserved = same(&dir, &[&exe], &[("PAIO_STATS", "")]);
    assert_eq!(String::from_utf8_lossy(&unobserved.stdout), text);
    assert!(text.lines().count() >= 27, "{text}");
    assert!(text.contains("read-ok 5 777 hello"), "{text}");
    assert!(text.contains("stat-ok 0 778 12"), "{text}");
    // Every failing line has a non-zero errno.
    for l in text
        .lines()
        .filter(|l| !l.contains("-ok ") && !l.starts_with("fopen"))
    {
        assert!(!l.ends_with(" 0"), "{l}");
    }
}

#[test]
fn errno_is_kept_when_calls_wait() {
    let dir = scratch("errnowait");
    let exe = compile_errno(&dir);
    // Every request waits: 200 ops/s for everything (burst 1).
    std::fs::write(
        dir.join("slow.toml"),
        r#"
[stage]
name = "slow"
default_channel = "all"
[[channel]]
name = "all"
default_object = "slow"
[[channel.object]]
name = "slow"
kind = "drl"
rate = "200ops/s"
burst = 1
"#,
    )
    .unwrap();
    let policy = dir.join("slow.toml");
    let out = same(&dir, &[&exe], &[("PAIO_POLICY", policy.to_str().unwrap())]);
    let stats = take_stats(&dir);
    let waited = stats[0].json["stats"]["channels"][0]["wait_total"]["waited_ops"]
        .as_u64()
        .unwrap();
    assert!(waited >= 20, "only {waited} requests waited");
    assert!(String::from_utf8_lossy(&out.stdout).contains("read-ok 5 777"));
}

/// A policy with one channel per metadata request type the `meta` program
/// makes; `stat_object` is the `stat` channel's object, if any.
fn meta_policy(stat_object: &str) -> String {
    format!(
        r#"
[stage]
name = "meta"
default_channel = "other"
[[channel]]
name = "stat"
match = {{ request_type = "stat" }}
{stat_object}
[[channel]]
name = "open"
match = {{ request_type = "open" }}
[[channel]]
name = "close"
match = {{ request_type = "close" }}
[[channel]]
name = "other"
"#
    )
}

/// [`meta_policy`]'s `stat` object limiting it to 5,000 calls a second,
/// with a burst of 1.
const STAT_LIMIT: &str = "default_object = \"limit\"\n[[channel.object]]\nname = \"limit\"\n\
                          kind = \"drl\"\nrate = \"5000ops/s\"\nburst = 1\n";

#[test]
fn metadata_calls_are_each_counted_once_and_limited() {
    let dir = scratch("meta");
    let exe = compile(&dir, "meta", &[]);
    std::fs::write(dir.join("f"), "small file\n").unwrap();
    let n = 5000u64;
    let policy = dir.join("meta.toml");
    // Pass-through: counted on the path that skips the library's guard once
    // a thread's route is known (the statistics file is pushed meanwhile,
    // every 16th call at most, from the full path).
    std::fs::write(&policy, meta_policy("")).unwrap();
    let env = [
        ("PAIO_POLICY", policy.to_str().unwrap()),
        ("PAIO_STATS_INTERVAL", "10ms"),
    ];
    let out = same(&dir, &[&exe, &n.to_string()], &env);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("meta {n}\n"));
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(
        stats[0].channel("stat").0,
        3 * n,
        "fstatat twice and fstat per round"
    );
    assert_eq!(stats[0].channel("open").0, n);
    assert_eq!(stats[0].channel("close").0, n);
    // Limited: every stat call goes through the DRL (1 request of burst at
    // 5,000 ops/s: 900 calls take at least 180 ms, and nearly all wait; at a
    // higher rate a sleep's overshoot lets every other call through).
    let n = 300u64;
    std::fs::write(&policy, meta_policy(STAT_LIMIT)).unwrap();
    let started = std::time::Instant::now();
    let out = run(&dir, &[&exe, &n.to_string()], true, &env);
    let took = started.elapsed();
    assert!(out.status.success(), "{out:?}");
    let stats = take_stats(&dir);
    let stat = stats[0].channel_json("stat").unwrap();
    assert_eq!(stat["ops"].as_u64().unwrap(), 3 * n);
    // The time proves the limit: 900 calls at 5,000 ops/s take 180 ms, so
    // at least 85 % went through the DRL. A call that comes more than
    // 200 µs after the one before (the process preempted on a loaded
    // machine) passes without waiting, so fewer wait than that: half, at
    // least.
    assert!(took >= std::time::Duration::from_millis(170), "{took:?}");
    let waited = stat["wait_total"]["waited_ops"].as_u64().unwrap();
    assert!(
        waited >= 3 * n / 2,
        "only {waited} of {} stat calls waited",
        3 * n
    );
}

/// With no statistics file and no control plane nothing reads the stage's
/// counts and its rules never change: metadata calls whose every route is a
/// Noop go straight to libc, and the ones a rule limits are still enforced.
#[test]
fn unobserved_metadata_calls_skip_the_stage_and_limits_hold() {
    let dir = scratch("unobserved");
    let exe = compile(&dir, "meta", &[]);
    std::fs::write(dir.join("f"), "small file\n").unwrap();
    let skipped = "metadata calls that meet only Noop objects are not counted";
    let log_of = |env: &[(&str, &str)]| {
        let out = run(&dir, &[&exe, "300"], true, env);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "meta 300\n");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let log = log_of(&[("PAIO_STATS", ""), ("PAIO_LOG", "1")]);
    assert!(log.contains(skipped), "{log}");
    // A statistics file or a control plane observes every call.
    let log = log_of(&[("PAIO_LOG", "1")]);
    assert!(log.contains("active") && !log.contains(skipped), "{log}");
    let control = dir.join("no-paiod.sock");
    let log = log_of(&[
        ("PAIO_STATS", ""),
        ("PAIO_LOG", "1"),
        ("PAIO_CONTROL", control.to_str().unwrap()),
    ]);
    assert!(log.contains("active") && !log.contains(skipped), "{log}");
    take_stats(&dir);
    // A limit on `stat` holds without a statistics file (as in
    // `metadata_calls_are_each_counted_once_and_limited`: 900 calls at
    // 5,000 ops/s take at least 180 ms); open and close still skip.
    let policy = dir.join("meta.toml");
    std::fs::write(&policy, meta_policy(STAT_LIMIT)).unwrap();
    let started = std::time::Instant::now();
    let log = log_of(&[
        ("PAIO_STATS", ""),
        ("PAIO_LOG", "1"),
        ("PAIO_POLICY", policy.to_str().unwrap()),
    ]);
    let took = started.elapsed();
    assert!(log.contains(skipped), "{log}");
    assert!(took >= std::time::Duration::from_millis(170), "{took:?}");
}

const PY_CLASSES: &str = r#"
import os
a = os.open("data/a.bin", os.O_RDONLY)
b = os.dup(a)            # class follows the dup
os.close(a)
assert len(os.read(b, 1000)) == 1000
# An open that returns a descriptor of several digits is classified too.
held = [os.open("other.bin", os.O_RDONLY) for _ in range(120)]
m = os.open("data/a.bin", os.O_RDONLY)
assert m >= 100, m
assert len(os.pread(m, 40, 0)) == 40
os.close(m)
for h in held:
    os.close(h)
c = os.open("logs/l.txt", os.O_RDONLY)
os.dup2(c, 50)           # 50 is now a log file
os.close(c)
assert len(os.read(50, 10)) == 10
os.dup2(b, 50)           # replaced behind our back: now data
assert len(os.pread(50, 100, 0)) == 100
os.close(50)
os.close(b)
n = os.open("other.bin", os.O_RDONLY)
assert len(os.read(n, 7)) == 7
# A data descriptor closed behind the library's back; its number is reused
# by a pipe, which must not inherit the class.
import ctypes, platform
x = os.open("data/a.bin", os.O_RDONLY)
ctypes.CDLL(None).syscall(3 if platform.machine() == "x86_64" else 57, x)
r, w = os.pipe()
assert x in (r, w), (x, r, w)
os.write(w, b"12345")
assert os.read(r, 5) == b"12345"
# Descriptors far above the first few thousand keep their class too (the
# table maps them in chunks of 4,096), and lose it when closed, one by one
# or by close_range.
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
high = 12345 if hard == resource.RLIM_INFINITY else min(hard - 1, 12345)
assert high >= 8192, f"needs descriptors above 8192; RLIMIT_NOFILE's hard limit is {hard}"
resource.setrlimit(resource.RLIMIT_NOFILE, (high + 1, hard))
d = os.open("data/a.bin", os.O_RDONLY)
os.dup2(d, high)
os.close(d)
assert len(os.pread(high, 300, 0)) == 300
os.close(high)
r2, w2 = os.pipe()
os.dup2(r2, high)
os.write(w2, b"abc")
assert os.read(high, 3) == b"abc"
d = os.open("data/a.bin", os.O_RDONLY)
os.dup2(d, high)
os.dup2(d, 5000)
assert len(os.pread(5000, 20, 0)) == 20
os.closerange(4096, high + 1)
os.dup2(r2, high)
os.write(w2, b"xyz")
assert os.read(high, 3) == b"xyz"
"#;

/// Directories `data` (with a 5,000-byte `a.bin`) and `logs` in `dir`, a
/// policy counting each class's reads in a channel of its name (`other`
/// for the rest) and the `PAIO_FILE_CLASSES` value naming them.
fn with_file_classes(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    random_file(&dir.join("data/a.bin"), 5000);
    let policy = dir.join("classes.toml");
    std::fs::write(
        &policy,
        r#"
[stage]
name = "classes"
default_channel = "other"
[[channel]]
name = "data"
match = { file_class = "data", request_type = "read" }
[[channel]]
name = "logs"
match = { file_class = "logs", request_type = "read" }
[[channel]]
name = "other"
"#,
    )
    .unwrap();
    (
        policy,
        format!("data={0}/data,logs={0}/logs", dir.display()),
    )
}

#[test]
fn file_classes_follow_dup_and_close() {
    let dir = scratch("classes");
    let (policy, classes) = with_file_classes(&dir);
    random_file(&dir.join("logs/l.txt"), 5000);
    random_file(&dir.join("other.bin"), 5000);
    std::fs::write(dir.join("c.py"), PY_CLASSES).unwrap();
    same(
        &dir,
        &["/usr/bin/python3", "-S", "c.py"],
        &[
            ("PAIO_POLICY", policy.to_str().unwrap()),
            ("PAIO_FILE_CLASSES", &classes),
        ],
    );
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].channel("data"), (5, 1460));
    assert_eq!(stats[0].channel("logs"), (1, 10));
}

/// A read with a buffer far larger than what the file holds is admitted
/// for what it can move: an 8 MiB buffer over a 200 KiB file (and the read
/// at its end) waited for 8 MiB of tokens each, refunded only after.
#[test]
fn a_read_is_charged_what_the_file_can_give_not_its_buffer() {
    let dir = scratch("read-bound");
    random_file(&dir.join("f"), 200 << 10);
    let policy = dir.join("limit.toml");
    std::fs::write(
        &policy,
        "[[channel]]\nname = \"read\"\nmatch = { request_type = \"read\" }\n\
         default_object = \"limit\"\n[[channel.object]]\nname = \"limit\"\nkind = \"drl\"\n\
         rate = \"1MiB/s\"\nburst = 1048576\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("r.py"),
        "import os\nfd = os.open('f', os.O_RDONLY)\n\
         assert len(os.read(fd, 8 << 20)) == 200 << 10\nassert os.read(fd, 8 << 20) == b''\n\
         assert len(os.pread(fd, 8 << 20, 100 << 10)) == 100 << 10\n",
    )
    .unwrap();
    let out = run(
        &dir,
        &["/usr/bin/python3", "-S", "r.py"],
        true,
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    assert!(out.status.success(), "{out:?}");
    let stats = take_stats(&dir);
    let py: Vec<_> = stats.iter().filter(|s| s.exe.contains("python")).collect();
    assert_eq!(py.len(), 1, "{:?}", summary(&stats));
    let read = py[0].channel_json("read").unwrap();
    // Within the 1 MiB burst: nobody waited, and every byte was counted.
    assert_eq!(read["wait_total"]["waited_ops"], 0, "{read}");
    assert!(read["bytes"].as_u64().unwrap() >= 300 << 10, "{read}");
}

/// A number that was a pipe's and was closed where the interposer did not
/// see it (`syscall(SYS_close)`) is reset when a regular file gets it, by
/// `open` or over a Unix socket, with no file class configured: the file's
/// reads went as a stream's (one phase, no latency, no priority slot).
#[test]
fn a_file_on_a_reused_stream_number_is_storage() {
    let dir = scratch("fd-reuse");
    random_file(&dir.join("f"), 1 << 20);
    let exe = compile(&dir, "fd_reuse", &[]);
    let policy = dir.join("all.toml");
    std::fs::write(&policy, "[[channel]]\nname = \"all\"\nmatch = {}\n").unwrap();
    for mode in ["rawclose", "scmraw"] {
        let out = run(
            &dir,
            &[&exe, mode, "f"],
            true,
            &[("PAIO_POLICY", policy.to_str().unwrap())],
        );
        assert!(out.status.success(), "{mode}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1048576\n", "{mode}");
        let stats = take_stats(&dir);
        let mine: Vec<_> = stats.iter().filter(|s| s.exe == exe).collect();
        assert_eq!(mine.len(), 1, "{mode}: {:?}", summary(&stats));
        let all = mine[0].channel_json("all").unwrap();
        // 16 reads of 64 KiB and the one at the end, each timed.
        assert_eq!(
            all["latency_total"]["ops"].as_u64(),
            Some(17),
            "{mode}: {all}"
        );
    }
}

/// A read that moves more than its bound (the file grew between the bound's
/// `fstat` and the call; a `/proc` file, whose size is 0, always does) is
/// charged the bytes beyond it after the call: every byte is counted.
#[test]
fn bytes_beyond_a_reads_bound_are_charged_after_it() {
    let dir = scratch("read-beyond-bound");
    let exe = compile(&dir, "proc_read", &[]);
    let policy = dir.join("limit.toml");
    std::fs::write(
        &policy,
        "[[channel]]\nname = \"read\"\nmatch = { request_type = \"read\" }\n\
         default_object = \"limit\"\n[[channel.object]]\nname = \"limit\"\nkind = \"drl\"\n\
         rate = \"1GiB/s\"\n",
    )
    .unwrap();
    let out = run(
        &dir,
        &[&exe],
        true,
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    assert!(out.status.success(), "{out:?}");
    let moved: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(moved > 0);
    let stats = take_stats(&dir);
    let mine: Vec<_> = stats.iter().filter(|s| s.exe == exe).collect();
    assert_eq!(mine.len(), 1, "{:?}", summary(&stats));
    let read = mine[0].channel_json("read").unwrap();
    // Admitted for 0 bytes (the bound), then the rest as a request of its own.
    assert_eq!(read["bytes"].as_u64(), Some(moved), "{read}");
    assert_eq!(read["ops"].as_u64(), Some(2), "{read}");
}

/// A `popen`ed pipe is a stream (glibc makes it with an internal `pipe2`
/// no preload sees): under `--limit` it was limited as storage.
#[test]
fn popen_pipes_are_streams() {
    let dir = scratch("popen");
    let exe = compile(&dir, "popen", &[]);
    let policy = dir.join("streams.toml");
    std::fs::write(
        &policy,
        "[stage]\ndefault_channel = \"other\"\n[[channel]]\nname = \"streams\"\n\
         match = { file_class = \"stream\" }\n[[channel]]\nname = \"other\"\n",
    )
    .unwrap();
    let out = same(&dir, &[&exe], &[("PAIO_POLICY", policy.to_str().unwrap())]);
    assert!(out.status.success(), "{out:?}");
    let stats = take_stats(&dir);
    let mine: Vec<_> = stats.iter().filter(|s| s.exe == exe).collect();
    assert_eq!(mine.len(), 1, "{:?}", summary(&stats));
    // 1,000,000 bytes read from head, 100,000 written to cat.
    assert_eq!(mine[0].channel("streams").1, 1_100_000);
    assert_eq!(mine[0].channel("other").1, 0);
}

/// A file the process inherited open (a shell's redirect, `cat < f`) has
/// its path's class, as one it opens: a limit on the class held for `cat f`
/// and not for `cat < f`.
#[test]
fn inherited_descriptors_have_their_file_class() {
    let dir = scratch("inherited-class");
    let (policy, classes) = with_file_classes(&dir);
    let out = run(
        &dir,
        &[
            "/bin/sh",
            "-c",
            "cat < data/a.bin > /dev/null && cat data/a.bin > /dev/null",
        ],
        true,
        &[
            ("PAIO_POLICY", policy.to_str().unwrap()),
            ("PAIO_FILE_CLASSES", &classes),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let stats = take_stats(&dir);
    let cats: Vec<_> = stats
        .iter()
        .filter(|s| Path::new(&s.exe).file_name().is_some_and(|n| n == "cat"))
        .collect();
    assert_eq!(cats.len(), 2, "{:?}", summary(&stats));
    for c in cats {
        assert_eq!(c.channel("data").1, 5000, "{:?}", summary(&stats));
    }
}

/// A descriptor received over a Unix socket (`SCM_RIGHTS`, here through
/// `recvmmsg`) has the class of the file it opens.
#[test]
fn received_descriptors_have_their_file_class() {
    let dir = scratch("received");
    let (policy, classes) = with_file_classes(&dir);
    let exe = compile(&dir, "received", &[]);
    let out = same(
        &dir,
        &[&exe, "data/a.bin"],
        &[
            ("PAIO_POLICY", policy.to_str().unwrap()),
            ("PAIO_FILE_CLASSES", &classes),
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].channel("data"), (1, 100));
}

/// A descriptor whose part of the table cannot be mapped (RLIMIT_AS) keeps
/// working without a class, and the process says so once.
#[test]
fn descriptor_table_without_memory_is_said_once() {
    let dir = scratch("fdchunk");
    let (policy, classes) = with_file_classes(&dir);
    let exe = compile(&dir, "fdchunk", &[]);
    let out = run(
        &dir,
        &[&exe, "data/a.bin"],
        true,
        &[
            ("PAIO_POLICY", policy.to_str().unwrap()),
            ("PAIO_FILE_CLASSES", &classes),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok 300\n");
    let said = "paio: no memory for part of the descriptor table (mmap refused): \
                some descriptors have no file class and no dirty-data bound\n";
    assert_eq!(String::from_utf8_lossy(&out.stderr), said);
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1);
    // The read before the cap has its class; the three after it none, and
    // are counted elsewhere.
    assert_eq!(stats[0].channel("data"), (1, 100));
    let other = stats[0].channel("other");
    assert!(other.0 >= 3 && other.1 >= 300, "{:?}", summary(&stats));
}

fn fio(engine: &str) {
    require("fio");
    let dir = scratch(&format!("fio-{engine}"));
    let args = [
        "fio",
        "--name=job",
        &format!("--ioengine={engine}"),
        "--rw=write",
        "--bs=64k",
        "--size=16m",
        "--verify=crc32c",
        "--do_verify=1",
        "--filename=fio.dat",
        "--output-format=terse",
    ];
    let out = run(&dir, &args, true, &[]);
    assert!(
        out.status.success(),
        "fio {engine} failed under the interposer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plain = run(&dir, &args, false, &[]);
    assert!(plain.status.success());
    // terse field 5 (1-based) is the error code: 0 in both.
    let err = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .split(';')
            .nth(4)
            .unwrap_or("?")
            .to_string()
    };
    assert_eq!(err(&out), "0");
    assert_eq!(err(&plain), "0");
    let stats = take_stats(&dir);
    let (r, w) = stats.iter().fold((0, 0), |(r, w), s| {
        (r + s.channel("read").1, w + s.channel("write").1)
    });
    // 16 MiB written, then read back for verification (fio's job process
    // ends with _exit; its statistics are pushed from the _exit hook).
    assert!(
        w >= 16 << 20,
        "fio {engine}: wrote {w}: {:?}",
        summary(&stats)
    );
    assert!(
        r >= 16 << 20,
        "fio {engine}: read {r}: {:?}",
        summary(&stats)
    );
}

#[test]
fn fio_libaio_verify() {
    fio("libaio");
}

/// libaio is enforced: fio's io_submit batches are charged per iocb before
/// they are submitted (fio ran at 90.9 MiB/s under a 10 MiB/s limit when
/// only libc's calls were seen). fio's own figure is the judge.
#[test]
fn fio_libaio_is_rate_limited() {
    fio_under_a_write_limit("libaio");
}

/// fio with `engine` (queue depth 8, verification on) under an 8 MiB/s
/// write limit: it writes at the limit, its verification passes, and the
/// file's 16 MiB are charged once.
fn fio_under_a_write_limit(engine: &str) {
    require("fio");
    let dir = scratch(&format!("fio-{engine}-limit"));
    std::fs::write(
        dir.join("limit.toml"),
        r#"
[stage]
name = "aio"
default_channel = "other"
[[channel]]
name = "write"
match = { request_type = "write" }
default_object = "drl"
[[channel.object]]
name = "drl"
kind = "drl"
rate = "8MiB/s"
burst = "1MiB"
[[channel]]
name = "other"
"#,
    )
    .unwrap();
    let policy = dir.join("limit.toml");
    let out = run(
        &dir,
        &[
            "fio",
            &format!("--name={engine}"),
            &format!("--ioengine={engine}"),
            "--iodepth=8",
            "--rw=write",
            "--bs=64k",
            "--size=16m",
            "--verify=crc32c",
            "--do_verify=1",
            "--filename=fio.dat",
            "--output-format=terse",
        ],
        true,
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let terse = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |i: usize| terse.split(';').nth(i).unwrap_or("?").to_string();
    // terse v3: field 5 (1-based) is the error code, 48 the write KiB/s.
    assert_eq!(field(4), "0", "{terse}");
    let mib = field(47)
        .parse::<f64>()
        .unwrap_or_else(|_| panic!("no write bandwidth in {terse}"))
        / 1024.0;
    assert!(
        (6.0..=8.8).contains(&mib),
        "fio {engine} wrote at {mib:.2} MiB/s under an 8 MiB/s limit"
    );
    // The file's 16 MiB once, and fio's output (about 1.5 KiB).
    let stats = take_stats(&dir);
    let w: u64 = stats.iter().map(|s| s.channel("write").1).sum();
    assert!(
        ((16 << 20)..(16 << 20) + 8192).contains(&w),
        "{:?}",
        summary(&stats)
    );
}

/// mmap keeps its results and errno exactly; a process that maps a regular
/// file while its reads or writes meet a limit says once that I/O through
/// the mapping is neither enforced nor counted, and nothing otherwise (no
/// enforcement, anonymous memory, /dev/zero).
#[test]
fn file_mappings_under_enforcement_are_said_once() {
    let dir = scratch("mmap");
    let exe = compile(&dir, "mmap", &[]);
    random_file(&dir.join("f"), 100_000);
    let errors = same(&dir, &[exe.as_str(), "errors", "f"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&errors.stdout),
        "unaligned 1 22\nbad fd 1 9\nempty 1 22\nclosed 1 9\nkept 1 42\n"
    );
    // No enforcement (the default policy): nothing said.
    same(&dir, &[exe.as_str(), "file", "f"], &[]);
    take_stats(&dir);
    let policy = dir.join("limit.toml");
    std::fs::write(
        &policy,
        r#"
[[channel]]
name = "read"
match = { request_type = "read" }
default_object = "drl"
[[channel.object]]
name = "drl"
kind = "drl"
rate = "1GiB/s"
"#,
    )
    .unwrap();
    let limited = [("PAIO_POLICY", policy.to_str().unwrap())];
    let plain = run(&dir, &[exe.as_str(), "file", "f"], false, &[]);
    let out = run(&dir, &[exe.as_str(), "file", "f"], true, &limited);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, plain.stdout);
    let said = format!(
        "paio: process {} maps a file with mmap: reads and writes through the mapping \
         are neither enforced nor counted (docs/preload.md)\n",
        take_stats(&dir)[0].pid
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), said);
    let out = run(&dir, &[exe.as_str(), "anon"], true, &limited);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "anon 7\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    take_stats(&dir);
}

/// A statistics file carries each channel's wait and latency histograms
/// (what `paio run --summary` merges across processes), their counts those
/// of the channel's figures.
#[test]
fn statistics_files_carry_each_channels_histograms() {
    let dir = scratch("histograms");
    random_file(&dir.join("f"), 100_000);
    let out = run(&dir, &["cat", "f"], true, &[]);
    assert!(out.status.success(), "{out:?}");
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1);
    let read = stats[0].channel_json("read").unwrap();
    let latency: u64 = read["histograms"]["latency"]
        .as_array()
        .unwrap_or_else(|| panic!("no latency histogram: {read}"))
        .iter()
        .map(|b| b[1].as_u64().unwrap())
        .sum();
    assert!(latency > 0);
    assert_eq!(latency, read["latency_total"]["ops"].as_u64().unwrap());
    assert_eq!(read["histograms"]["wait"], serde_json::json!([]), "{read}");
}

/// POSIX AIO is charged at submission: each aio_write, aio_fsync and
/// lio_listio entry once, with its size (glibc's helper threads call its
/// internal pread/pwrite, which nothing else sees: 0 bytes before).
#[test]
fn posix_aio_requests_are_charged_once() {
    let dir = scratch("posix-aio");
    let exe = compile(&dir, "posix_aio", &[]);
    std::fs::write(
        dir.join("aio.toml"),
        r#"
[stage]
name = "posix-aio"
default_channel = "other"
[[channel]]
name = "read"
match = { request_type = "read" }
[[channel]]
name = "write"
match = { request_type = "write" }
[[channel]]
name = "sync"
match = { request_type = "fdatasync" }
[[channel]]
name = "other"
"#,
    )
    .unwrap();
    let policy = dir.join("aio.toml");
    let out = same(
        &dir,
        &[exe.as_str()],
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "aio ok\n");
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
    // Three aio_write calls, and the line on stdout.
    assert_eq!(stats[0].channel("write"), (4, 6007));
    assert_eq!(stats[0].channel("read"), (2, 1200));
    assert_eq!(stats[0].channel("sync"), (1, 0));
}

/// fio's posixaio engine: glibc's helper threads make its calls, so only
/// the submissions charge it.
#[test]
fn fio_posixaio_is_rate_limited() {
    fio_under_a_write_limit("posixaio");
}

/// io_uring is not enforced, and the process says so once on stderr; the
/// program itself runs as without the interposer.
#[test]
fn fio_io_uring_is_reported_once() {
    require("fio");
    let dir = scratch("fio-uring");
    let args = [
        "fio",
        "--name=uring",
        "--ioengine=io_uring",
        "--rw=write",
        "--bs=64k",
        "--size=4m",
        "--filename=fio.dat",
        "--output-format=terse",
    ];
    let plain = run(&dir, &args, false, &[]);
    let out = run(&dir, &args, true, &[]);
    assert_eq!(out.status.code(), plain.status.code());
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<_> = err
        .lines()
        .filter(|l| l.contains("uses io_uring"))
        .collect();
    // One per process that set a ring up (fio's job process), each once.
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].starts_with("paio: process ")
            && warnings[0].contains("neither enforced nor counted"),
        "{err}"
    );
    take_stats(&dir);
}

#[test]
fn fio_psync_verify() {
    fio("psync");
}

#[test]
fn fio_sync_verify() {
    fio("sync");
}

#[test]
fn fio_pvsync_verify() {
    fio("pvsync");
}

#[test]
fn preinit_thread_exit_envp_and_context_call() {
    let dir = scratch("edge");
    let exe = compile(&dir, "edge", &["-pthread", "-ldl"]);
    std::fs::write(dir.join("in.txt"), "0123456789abcdef").unwrap();
    std::fs::write(
        dir.join("ctx.toml"),
        r#"
[stage]
default_channel = "rest"
[[channel]]
name = "flush"
match = { request_context = "flush", request_type = "read" }
[[channel]]
name = "rest"
"#,
    )
    .unwrap();
    let policy = dir.join("ctx.toml");
    let out = same(
        &dir,
        &[exe.as_str()],
        &[("PAIO_POLICY", policy.to_str().unwrap())],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("early=01234"), "{text}");
    assert!(text.contains("tls=22 written-at-thread-exit"), "{text}");
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1);
    // The constructor read PAIO_STAGE_NAME from its envp (unset), not from
    // the environment the program changed before it ran.
    assert_eq!(stats[0].json["stats"]["stage"], "preload");
    // Only the read after paio_preload_set_context("flush") is in "flush".
    assert_eq!(stats[0].channel("flush"), (1, 3));
}

#[test]
fn pthread_cancel_in_a_blocked_read() {
    let dir = scratch("cancel");
    let exe = compile(&dir, "cancel", &["-pthread"]);
    let out = same(&dir, &[exe.as_str()], &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "cancelled=1\n");
}

#[test]
fn vfork_children_exiting_write_no_statistics() {
    let dir = scratch("vfork");
    let exe = compile(&dir, "vfork", &[]);
    std::fs::write(dir.join("in.txt"), "x".repeat(60)).unwrap();
    let out = same(&dir, &[exe.as_str()], &[("PAIO_STATS_INTERVAL", "1ms")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "read 60\n");
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
    assert_eq!(stats[0].channel("read"), (1, 60));
}

/// The statistics file's temporary name is predictable (`<file>.tmp.<pid>.<tid>`):
/// a symbolic link planted there, as another user could in `/tmp`, is not
/// followed. The shell plants it under its own pid, then execs `cat`, which
/// keeps the pid and writes its statistics at exit from its main thread.
#[test]
fn the_statistics_file_never_follows_a_planted_link() {
    let dir = scratch("planted");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let stats = dir.join("stats");
    std::fs::create_dir_all(&stats).unwrap();
    let file = stats.join("s.json");
    let script = format!(
        "ln -s {victim} {file}.tmp.$$.$$ && exec cat /dev/null",
        victim = victim.display(),
        file = file.display()
    );
    let out = run(
        &dir,
        &["/bin/sh", "-c", &script],
        true,
        &[("PAIO_STATS", file.to_str().unwrap())],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.is_file(), "{meta:?}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        written["exe"].as_str().unwrap().ends_with("/cat"),
        "{written}"
    );
    let left: Vec<_> = std::fs::read_dir(&stats)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("s.json")]);
}

/// A statistics file that cannot be written is said once per process on
/// stderr (it was logged only with `PAIO_LOG`), and the program runs as
/// without the library: same output and status. `PAIO_LOG=1` shows that `dd`
/// failed many pushes, so "once" is not one push.
#[test]
fn an_unwritable_statistics_file_is_said_once() {
    let dir = scratch("unwritable-stats");
    let missing = dir.join("missing/s-%p.json");
    // dd makes 400,000 calls over more than a few 1 ms intervals.
    let script = "dd if=/dev/zero of=/dev/null bs=1 count=200000 status=none && \
                  echo done && exec cat /dev/null";
    let said = |log: &str| {
        let out = run(
            &dir,
            &["/bin/sh", "-c", script],
            true,
            &[
                ("PAIO_STATS", missing.to_str().unwrap()),
                ("PAIO_STATS_INTERVAL", "1ms"),
                ("PAIO_LOG", log),
            ],
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"done\n");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = said("0");
    let lines: Vec<&str> = stderr.lines().collect();
    // One line per program: the shell, dd, and the `cat` the shell became
    // (same pid as the shell, a fresh load of the library).
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("paio: cannot write statistics to ")
                && l.contains("No such file or directory")),
        "{stderr}"
    );
    let mut lines = lines;
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), 2, "the shell's pid twice, dd's once: {stderr}");
    let logged = said("1");
    let failures = logged
        .lines()
        .filter(|l| l.contains("]: statistics to "))
        .count();
    assert!(failures > 3, "dd pushed only {failures} times: {logged}");
}

/// A set-user-ID program that gets the library (through `/etc/ld.so.preload`:
/// the loader ignores `LD_PRELOAD` paths for it) does not act on its caller's
/// `PAIO_*` variables: `PAIO_STATS` would otherwise have it create a file,
/// with root's rights, in a directory only root may write. It says so and
/// runs as it would without the library. The system-wide preload lives in a
/// private mount namespace (a tmpfs over `/etc`), the caller is `nobody`.
#[test]
fn set_user_id_programs_ignore_the_callers_paio_variables() {
    use std::os::unix::fs::PermissionsExt as _;
    assert!(
        running_as_root(),
        "this test makes a set-user-ID root program and runs it as nobody: run it as root"
    );
    require("unshare");
    require("setpriv");
    let dir = scratch("secure");
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(&dir, 0o755);
    let cat = dir.join("cat");
    std::fs::copy("/bin/cat", &cat).unwrap();
    mode(&cat, 0o4755);
    let input = dir.join("in");
    std::fs::write(&input, "bytes of the caller\n").unwrap();
    mode(&input, 0o644);
    let root_only = dir.join("root-only");
    std::fs::create_dir(&root_only).unwrap();
    mode(&root_only, 0o755);
    let script = format!(
        "mount -t tmpfs paio-test /etc && echo {lib} > /etc/ld.so.preload && \
         exec setpriv --reuid=65534 --regid=65534 --clear-groups \
         env PAIO_STATS={root_only}/s-%p.json PAIO_LOG=1 PAIO_BOARD=off {cat} {input}",
        lib = lib().display(),
        root_only = root_only.display(),
        cat = cat.display(),
        input = input.display(),
    );
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script])
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("PAIO_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("spawn unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"bytes of the caller\n");
    let written: Vec<_> = std::fs::read_dir(&root_only)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(written.is_empty(), "written as root: {written:?}");
    assert!(
        stderr.contains("PAIO_* variables are ignored and it runs without a stage"),
        "the program did not run in secure-execution mode with the library: {stderr}"
    );
}

/// Whether this process runs as root (effective uid 0).
fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Calls that move bytes between two descriptors (`copy_file_range`,
/// `sendfile`, `splice`, with and without explicit offsets, file to file,
/// file to pipe, pipe to file) copy byte-exact and are charged every byte
/// they moved as a read and a write. Each between files is a timed
/// two-phase read; under a rate in bytes, each whose size is known
/// beforehand (every call that moved bytes here; the calls at the end of
/// the file are charged after they ran), and the rate is charged exactly
/// what moved. A call with a pipe at one end may wait for its peer: charged
/// after it ran, untimed.
#[test]
fn copy_calls_are_charged_exactly_and_timed() {
    let dir = scratch("copy");
    let n: u64 = 3 * (1 << 20) + 4321;
    random_file(&dir.join("in"), n as usize);
    let exe = compile(&dir, "copy", &[]);
    let limit = dir.join("limit.toml");
    std::fs::write(
        &limit,
        "[[channel]]\nname = \"read\"\nmatch = { request_type = \"read\" }\n\
         default_object = \"d\"\n[[channel.object]]\nname = \"d\"\nkind = \"drl\"\n\
         rate = \"100GiB/s\"\n[[channel]]\nname = \"write\"\n\
         match = { request_type = \"write\" }\n",
    )
    .unwrap();
    let input = std::fs::read(dir.join("in")).unwrap();
    for policy in [None, Some(&limit)] {
        let env: Vec<(&str, &str)> = policy
            .map(|p| ("PAIO_POLICY", p.to_str().unwrap()))
            .into_iter()
            .collect();
        let out = same(&dir, &[exe.as_str()], &env);
        for (i, skip) in [(1, 0), (2, 1000), (3, 0), (4, 0)] {
            let copy = std::fs::read(dir.join(format!("out{i}"))).unwrap();
            assert!(copy == input[skip..], "out{i} differs from in[{skip}..]");
        }
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let figures: Vec<u64> = text
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        let [moved, calls, moving, piped, piped_moving] = figures[..] else {
            panic!("unexpected output {text:?}")
        };
        // out1, out2 (from offset 1000), out3, and out4 through the pipe: in and out.
        assert_eq!(moved, 5 * n - 1000);
        let stats = take_stats(&dir);
        assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
        // Written: the copies, and the figures printed on stdout.
        assert_eq!(
            bytes_of(&stats, "copy"),
            (moved, moved + text.len() as u64),
            "{policy:?}"
        );
        let read = stats[0].channel_json("read").unwrap();
        let timed = if policy.is_some() {
            moving - piped_moving
        } else {
            calls - piped
        };
        assert_eq!(
            read["latency_total"]["ops"].as_u64(),
            Some(timed),
            "{policy:?}: {read}"
        );
        assert_eq!(read["ops"].as_u64(), Some(calls), "{policy:?}: {read}");
    }
}

/// Buffered stdio writes are charged when they reach the kernel — a full
/// buffer, `fflush`, `fclose`, the flush at exit — with every byte, and one
/// operation per call that reached it; reads likewise.
#[test]
fn stdio_charges_what_reaches_the_kernel() {
    let dir = scratch("stdio");
    let exe = compile(&dir, "stdio", &[]);
    let out = same(&dir, &[exe.as_str()], &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "read 20014\nbye\n");
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
    let (write_ops, write_bytes) = stats[0].channel("write");
    let (read_ops, read_bytes) = stats[0].channel("read");
    // Every byte handed to fputs/fwrite/fprintf, stdout's "read 20014\n"
    // and "bye\n" too.
    assert_eq!(write_bytes, 20014 + 15);
    assert_eq!(read_bytes, 20014);
    // 20,014 bytes through a 4 KiB buffer: 5 full-buffer writes, the
    // fflush, the fclose, the exit flush — about 8, never one per call
    // (1,003 calls).
    assert!(
        (3..=24).contains(&write_ops),
        "{write_ops} write operations"
    );
    assert!((2..=24).contains(&read_ops), "{read_ops} read operations");
}

/// stdio one byte at a time and formatted is charged every byte: the
/// macros `<stdio.h>` inlines into optimized programs (`putc_unlocked`,
/// `getc_unlocked`: no call until a buffer is full or empty), across
/// `fseek`, `fflush(NULL)`, `rewind` and the exit flush; the one-byte
/// calls, `puts`, the printf family with and without `_FORTIFY_SOURCE`
/// (`__printf_chk`, ...), `dprintf`, and `fscanf` (`__isoc99_fscanf`, the
/// plain symbol C89 programs call, and glibc 2.38's `__isoc23_fscanf`, of
/// which nothing was counted before it was interposed). Before, `cut -c` ran with 0 bytes
/// read or written, whatever the limit. Memory streams (`open_memstream`,
/// `fmemopen`) move no I/O: none of their bytes, opens or closes count.
#[test]
fn stdio_byte_by_byte_and_formatted_is_charged_every_byte() {
    let dir = scratch("bytewise");
    // glibc 2.38's __isoc23_fscanf, which this glibc lacks: from a library
    // the program links (tests/fake_isoc23.c).
    require("cc");
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_isoc23.c");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(dir.join("libfake_isoc23.so"))
        .arg(&fake)
        .arg("-ldl")
        .status()
        .expect("run cc");
    assert!(st.success(), "cc fake_isoc23.c failed");
    let link_dir = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    for (flags, calls) in [
        (
            &["-U_FORTIFY_SOURCE"][..],
            &[
                "printf",
                "fprintf",
                "vfprintf",
                "dprintf",
                "__isoc99_fscanf",
            ][..],
        ),
        (
            &["-D_FORTIFY_SOURCE=2", "-DPLAIN_SCANF"],
            &[
                "__printf_chk",
                "__fprintf_chk",
                "__vfprintf_chk",
                "__dprintf_chk",
                "fscanf",
            ],
        ),
        (
            &[
                "-DISOC23_SCANF",
                "-U_FORTIFY_SOURCE",
                &link_dir,
                &rpath,
                "-lfake_isoc23",
            ],
            &["printf", "fprintf", "__isoc23_fscanf"],
        ),
    ] {
        let fortify = flags[0];
        let exe = compile(&dir, "bytewise", flags);
        // The program must reach each path through the symbol meant.
        let nm = Command::new("nm")
            .args(["-D", "--undefined-only", &exe])
            .output()
            .expect("run nm");
        let imports = String::from_utf8_lossy(&nm.stdout).to_string();
        let symbols: Vec<&str> = imports
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .map(|s| s.split('@').next().unwrap())
            .collect();
        for want in [
            "__overflow",
            "__uflow",
            "fputc",
            "putc",
            "fgetc",
            "getc",
            "puts",
        ]
        .iter()
        .chain(calls)
        {
            assert!(
                symbols.contains(want),
                "{fortify}: {want} not in {symbols:?}"
            );
        }
        let out = same(&dir, &[exe.as_str()], &[]);
        assert_eq!(out.stdout.len(), 42, "{fortify}");
        assert_eq!(std::fs::metadata(dir.join("a.txt")).unwrap().len(), 11_350);
        assert_eq!(std::fs::metadata(dir.join("b.txt")).unwrap().len(), 700);
        assert_eq!(std::fs::metadata(dir.join("c.txt")).unwrap().len(), 210_000);
        let stats = take_stats(&dir);
        assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
        let (write_ops, written) = stats[0].channel("write");
        let (read_ops, read) = stats[0].channel("read");
        // a.txt, b.txt (dprintf), c.txt and stdout; a.txt read back whole,
        // then 200 bytes more, and c.txt by fscanf. Nothing of the memory
        // streams.
        assert_eq!(
            (read, written),
            (11_550 + 210_000, 11_350 + 700 + 210_000 + 42),
            "{fortify}"
        );
        // Opened and closed: a.txt, b.txt and c.txt, not the memory
        // streams.
        assert_eq!(stats[0].channel("metadata").0, 6, "{fortify}");
        // One request per call that reached the kernel: 100 dprintf calls
        // and a buffer's worth each (52 for c.txt), not one per byte.
        assert!(
            (150..=190).contains(&write_ops),
            "{write_ops} write operations"
        );
        assert!((50..=90).contains(&read_ops), "{read_ops} read operations");
    }
}

/// Threads sharing a stream (locked calls, and the inline macro under the
/// stream's lock) and each writing a stream of its own are charged every
/// byte once: a stream's inline bytes are counted by whichever thread
/// next makes a call on it, never twice.
#[test]
fn threads_sharing_a_stream_are_charged_every_byte_once() {
    let dir = scratch("stdio-threads");
    let exe = compile(&dir, "stdio_threads", &["-pthread"]);
    for _ in 0..3 {
        same(&dir, &[exe.as_str()], &[]);
        let files: u64 = ["shared.txt", "own0.txt", "own1.txt", "own2.txt", "own3.txt"]
            .iter()
            .map(|f| std::fs::metadata(dir.join(f)).unwrap().len())
            .sum();
        // 4 threads x 5,000 x ("line\n", "T:NNNN\n", ".", "u\n") shared,
        // and "o" with the number and a newline each of their own.
        assert_eq!(files, 415_560);
        let stats = take_stats(&dir);
        assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
        assert_eq!(stats[0].channel("write").1, files);
    }
}

/// Bytes pushed back with `ungetc` and read again are charged once: put
/// back in place and read by a call the interposer sees, pushed back into
/// glibc's backup area and read by the inline macro (the program's own
/// bytes, never from the kernel, are not charged, and the return to the
/// buffer is no request), and discarded by `fseek`.
#[test]
fn bytes_pushed_back_are_charged_once() {
    let dir = scratch("ungetc");
    let exe = compile(&dir, "ungetc", &[]);
    for _ in 0..2 {
        let out = same(&dir, &[exe.as_str()], &[]);
        let stats = take_stats(&dir);
        assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
        // Three passes over the 100,000-byte file and 10 bytes more.
        let (read_ops, read) = stats[0].channel("read");
        assert_eq!(read, 300_010);
        // A request per refill and per fread past the buffer (72), none
        // for returning from the backup area to the buffer (100 more).
        assert!((60..=90).contains(&read_ops), "{read_ops} read operations");
        assert_eq!(
            stats[0].channel("write").1,
            100_000 + out.stdout.len() as u64
        );
    }
}

/// Wide-character stdio on a file is not charged, and the process says so
/// on stderr, once for its two wide streams (one closed, one left open
/// until exit); it runs as it does without the interposer.
#[test]
fn wide_character_stdio_is_said_once() {
    let dir = scratch("wide");
    let exe = compile(&dir, "wide", &[]);
    let plain = run(&dir, &[exe.as_str()], false, &[]);
    let written = std::fs::read(dir.join("wide-a.txt")).unwrap();
    let pre = run(&dir, &[exe.as_str()], true, &[]);
    assert!(
        plain.status.success() && plain.stderr.is_empty(),
        "{plain:?}"
    );
    assert_eq!(plain.status.code(), pre.status.code());
    assert_eq!(plain.stdout, pre.stdout);
    assert_eq!(std::fs::read(dir.join("wide-a.txt")).unwrap(), written);
    let err = String::from_utf8_lossy(&pre.stderr);
    assert_eq!(
        err.matches("through wide-character stdio").count(),
        1,
        "{err}"
    );
    take_stats(&dir);
}

/// A process with more streams open than the interposer's table holds is
/// told so once on stderr. The bytes of the calls it makes on them are
/// still charged, once: a stream charged untracked and given an entry
/// later, when others closed, does not count its buffer again (888 bytes
/// for 700 before it was remembered).
#[test]
fn more_streams_than_tracked_is_said_once() {
    let dir = scratch("many-streams");
    let exe = compile(&dir, "many_streams", &[]);
    let out = run(&dir, &[exe.as_str()], true, &[]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("has more stdio streams open than the interposer tracks")
            .count(),
        1,
        "{err}"
    );
    let stats = take_stats(&dir);
    assert_eq!(stats.len(), 1, "{:?}", summary(&stats));
    assert_eq!(stats[0].channel("write").1, 700);
}

/// The policy a process runs without `PAIO_POLICY` is built in code (no
/// parsing at every start); docs/preload.md shows it as a policy file. Both
/// must make the same stage: the same channels, counting the same calls.
#[test]
fn the_default_policy_is_the_one_docs_preload_md_shows() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/preload.md"
    ))
    .unwrap();
    let at = doc
        .find("The embedded default policy")
        .expect("docs/preload.md describes the embedded default policy");
    let block = &doc[at..];
    let start = block.find("```toml\n").expect("followed by a toml block") + 8;
    let end = start + block[start..].find("```").unwrap();
    let dir = scratch("default-policy");
    let policy = dir.join("default.toml");
    std::fs::write(&policy, &block[start..end]).unwrap();
    std::fs::write(dir.join("f"), "x".repeat(10_000)).unwrap();
    let argv = [
        "sh",
        "-c",
        "cat f f > g && cat g > /dev/null && stat -c %s g",
    ];
    let shape = |env: &[(&str, &str)]| {
        let out = same(&dir, &argv, env);
        let stats = take_stats(&dir);
        // Per process (the shell and each command), in pid order: the
        // stage's name, then every channel's name and counts.
        let mut rows: Vec<(u64, String)> = stats
            .iter()
            .map(|s| {
                let channels: Vec<String> = s.json["stats"]["channels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        let name = c["name"].as_str().unwrap();
                        format!("{name}:{}:{}", c["ops"], c["bytes"])
                    })
                    .collect();
                let unmatched = &s.json["stats"]["unmatched"];
                let row = format!(
                    "{} {} {} unmatched:{}:{}",
                    s.exe,
                    s.json["stats"]["stage"],
                    channels.join(" "),
                    unmatched["ops"],
                    unmatched["bytes"]
                );
                (s.pid, row)
            })
            .collect();
        rows.sort();
        let _ = std::fs::remove_file(dir.join("g"));
        (
            out.stdout,
            rows.into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
        )
    };
    let built = shape(&[]);
    let parsed = shape(&[("PAIO_POLICY", policy.to_str().unwrap())]);
    assert_eq!(built.0, parsed.0);
    assert_eq!(built.1.len(), 4, "{:?}", built.1);
    assert_eq!(built.1, parsed.1);
    let read_all = |r: &String| {
        r.split(' ')
            .any(|c| c.starts_with("read:") && c.ends_with(":20000"))
    };
    assert!(built.1.iter().any(read_all), "{:?}", built.1);
}

/// docs/preload.md's table of interposed symbols names every symbol the
/// library exports, and its heading counts them.
#[test]
fn the_documented_symbols_are_the_exported_ones() {
    require("nm");
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let exported: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T").then(|| f[2].to_string())
        })
        .collect();
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/preload.md"
    ))
    .unwrap();
    let start = doc.find("## Interposed symbols").unwrap();
    let end = start + doc[start..].find("\n## ").unwrap_or(doc.len() - start);
    let section = &doc[start..end];
    let named: std::collections::BTreeSet<String> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split('(').next().unwrap_or(s).to_string())
        .collect();
    let own: Vec<&String> = exported.iter().filter(|s| s.starts_with("paio_")).collect();
    let libc: Vec<&String> = exported
        .iter()
        .filter(|s| !s.starts_with("paio_"))
        .collect();
    let missing: Vec<&&String> = libc.iter().filter(|s| !named.contains(**s)).collect();
    assert!(
        missing.is_empty(),
        "exported but not in docs/preload.md: {missing:?}"
    );
    let heading = format!(
        "## Interposed symbols ({} from libc, {} of its own)",
        libc.len(),
        own.len()
    );
    assert!(
        section.starts_with(&heading),
        "expected the heading {heading:?}"
    );
}
