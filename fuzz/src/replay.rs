//! Replays a fuzz target's corpus on stable Rust: included with `#[path]`
//! by the replay tests of `crates/paio` (`tests/fuzz_corpus.rs`) and
//! `crates/paio-control` (`tests/fuzz_connection.rs`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The repository's root (both including crates sit two levels below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files directly in `dir`, sorted; none if it does not exist.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs every input of `target` through `check`; fails listing the inputs
/// that panicked.
pub fn replay<R>(target: &str, check: fn(&[u8]) -> R, extra: &[PathBuf], min_corpus: usize) {
    let fuzz = root().join("fuzz");
    let corpus = files(&fuzz.join("corpus").join(target));
    assert!(
        corpus.len() >= min_corpus,
        "fuzz/corpus/{target} has {} files, expected at least {min_corpus}",
        corpus.len()
    );
    let mut inputs = corpus;
    inputs.extend(files(&fuzz.join("artifacts").join(target)));
    inputs.extend(extra.iter().cloned());
    let mut failed = Vec::new();
    for path in &inputs {
        let data = std::fs::read(path).expect("readable input");
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} {target} inputs failed (see the panics above):\n  {}",
        failed.len(),
        inputs.len(),
        failed.join("\n  ")
    );
}
