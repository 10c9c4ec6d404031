//! Replays the fuzzing corpus on stable Rust: every file in
//! `fuzz/corpus/<target>/` (and in `fuzz/artifacts/<target>/`, where
//! `cargo fuzz` leaves crashing inputs, if any) goes through the same checks
//! as the fuzz targets, which live in `fuzz/src/lib.rs` and are included here.

#[path = "../../../fuzz/src/lib.rs"]
mod checks;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files directly in `dir`, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
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
fn replay<R>(target: &str, check: fn(&[u8]) -> R, extra: &[PathBuf], min_corpus: usize) {
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

#[test]
fn policy_corpus() {
    // The example policies are seeds too, even if the corpus copies are stale.
    let examples = files(&root().join("policies"));
    replay("policy", checks::check_policy, &examples, 10);
}

#[test]
fn rule_json_corpus() {
    replay("rule_json", checks::check_rule_json, &[], 12);
}

#[test]
fn protocol_corpus() {
    replay("protocol", checks::check_protocol, &[], 8);
}

/// The checks take the path each input calls for: a sanity test of the
/// harness itself (a check that skipped everything would pass any corpus).
#[test]
fn checks_accept_and_reject() {
    use checks::Handled::{Accepted, Rejected, Skipped};
    assert_eq!(
        checks::check_policy(b"[[channel]]\nname = \"a\"\n"),
        Accepted
    );
    assert_eq!(checks::check_policy(b"[[channel]\n"), Rejected);
    // Parses, but the stage refuses a second channel of the same name.
    assert_eq!(
        checks::check_policy(b"[[channel]]\nname = \"a\"\n[[channel]]\nname = \"a\"\n"),
        Rejected
    );
    assert_eq!(checks::check_policy(&[0xff, 0xfe, b'[']), Skipped);
    assert_eq!(
        checks::check_rule_json(br#"{"rule":"create_channel","name":"z"}"#),
        Accepted
    );
    assert_eq!(
        checks::check_rule_json(br#"{"rule":"create_channel","name":"a"}"#),
        Rejected
    );
    assert_eq!(checks::check_rule_json(b"not json"), Skipped);
}
