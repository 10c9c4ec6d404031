//! Shared helpers: build the cdylib once, run programs with and without it,
//! read the statistics files.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// Builds `libpaio_preload.so` (debug profile, default target dir) once per
/// test binary and returns its path.
pub fn lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "paio-preload"])
            .current_dir(manifest)
            .status()
            .expect("run cargo build -p paio-preload");
        assert!(status.success(), "cargo build -p paio-preload failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../../target"));
        let lib = target.join("debug/libpaio_preload.so");
        assert!(lib.exists(), "{} missing after build", lib.display());
        lib
    })
}

/// A fresh scratch directory for one test: removed when the test ends,
/// unless it fails (then kept for a look, and its path printed).
pub fn scratch(name: &str) -> Scratch {
    // Tests run in parallel: two sharing a name would remove each other's.
    static NAMES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        !names.iter().any(|n| n == name),
        "scratch(\"{name}\") is taken by another test: give each test its own name"
    );
    names.push(name.to_owned());
    drop(names);
    let dir = std::env::temp_dir().join(format!("paio-preload-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A test's scratch directory ([`scratch`]); derefs to its path.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("scratch directory kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Compiles `tests/NAME.c` into `dir/NAME` with `cc -O1 -Wall` and `flags`
/// (after the source: defines, `-pthread`, libraries); returns its path.
pub fn compile(dir: &Path, name: &str, flags: &[&str]) -> String {
    require("cc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/{name}.c"));
    let exe = dir.join(name);
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(flags)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc {name}.c failed");
    exe.to_str().unwrap().to_string()
}

/// Compiles `tests/NAME.c` against libpaio's C ABI (built here in debug,
/// as [`lib`] builds the interposer) into `dir/NAME`; returns its path.
pub fn compile_with_libpaio(dir: &Path, name: &str) -> String {
    static LIBDIR: OnceLock<PathBuf> = OnceLock::new();
    let libdir = LIBDIR.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "paio-ffi"])
            .current_dir(manifest)
            .status()
            .expect("run cargo build -p paio-ffi");
        assert!(status.success(), "cargo build -p paio-ffi failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../../target"));
        target.join("debug")
    });
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../paio-ffi/include");
    compile(
        dir,
        name,
        &[
            &format!("-I{}", include.display()),
            &format!("-L{}", libdir.display()),
            "-lpaio",
            &format!("-Wl,-rpath,{}", libdir.display()),
        ],
    )
}

pub fn require(program: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{program}` is not installed: this test needs it (Debian package; see scripts/setup.sh)"
    );
}

/// Runs `argv` in `dir`; with `preload`, under the interposer with `env`
/// (PAIO_STATS defaults to `dir/stats/%p.json`).
pub fn run(dir: &Path, argv: &[&str], preload: bool, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .env_remove("LD_PRELOAD");
    for (k, _) in std::env::vars() {
        if k.starts_with("PAIO_") {
            cmd.env_remove(k);
        }
    }
    if preload {
        let stats = dir.join("stats");
        std::fs::create_dir_all(&stats).unwrap();
        cmd.env("LD_PRELOAD", lib())
            .env("PAIO_STATS", stats.join("%p.json"));
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    cmd.output().expect("spawn")
}

/// Runs with and without the interposer and asserts identical status,
/// stdout and stderr; returns the preloaded run's output.
pub fn same(dir: &Path, argv: &[&str], env: &[(&str, &str)]) -> Output {
    let plain = run(dir, argv, false, &[]);
    let pre = run(dir, argv, true, env);
    assert_eq!(
        plain.status.code(),
        pre.status.code(),
        "{argv:?}: exit status differs"
    );
    assert_eq!(
        String::from_utf8_lossy(&plain.stderr),
        String::from_utf8_lossy(&pre.stderr),
        "{argv:?}: stderr differs"
    );
    assert!(plain.stdout == pre.stdout, "{argv:?}: stdout differs");
    pre
}

/// One statistics file.
#[derive(Debug, Clone)]
pub struct Stats {
    pub pid: u64,
    pub exe: String,
    pub json: serde_json::Value,
}

impl Stats {
    /// (ops, bytes) of channel `name`.
    pub fn channel(&self, name: &str) -> (u64, u64) {
        self.channel_json(name)
            .map(|c| (c["ops"].as_u64().unwrap(), c["bytes"].as_u64().unwrap()))
            .unwrap_or((0, 0))
    }

    /// Every figure of channel `name`, as written.
    pub fn channel_json(&self, name: &str) -> Option<&serde_json::Value> {
        self.json["stats"]["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
    }
}

/// Every statistics file under `dir/stats`, then removes them.
pub fn take_stats(dir: &Path) -> Vec<Stats> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir.join("stats")) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(!name.contains(".tmp."), "leftover temporary file {name}");
        let text = std::fs::read_to_string(&p).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", p.display()));
        out.push(Stats {
            pid: json["pid"].as_u64().unwrap(),
            exe: json["exe"].as_str().unwrap().to_string(),
            json,
        });
        std::fs::remove_file(&p).unwrap();
    }
    out
}

/// Sum of (read bytes, write bytes) over the files of processes whose
/// executable's file name is `exe`.
pub fn bytes_of(stats: &[Stats], exe: &str) -> (u64, u64) {
    let mine: Vec<_> = stats
        .iter()
        .filter(|s| Path::new(&s.exe).file_name().is_some_and(|n| n == exe))
        .collect();
    assert!(!mine.is_empty(), "no statistics file from {exe}: {stats:?}");
    mine.iter().fold((0, 0), |(r, w), s| {
        (r + s.channel("read").1, w + s.channel("write").1)
    })
}

/// Per-exe read/write bytes, for messages.
pub fn summary(stats: &[Stats]) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for s in stats {
        let e = m.entry(format!("{}[{}]", s.exe, s.pid)).or_insert((0, 0));
        e.0 += s.channel("read").1;
        e.1 += s.channel("write").1;
    }
    m
}

/// A file of `len` pseudo-random bytes (deterministic).
pub fn random_file(path: &Path, len: usize) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ len as u64;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    std::fs::write(path, v).unwrap();
}
