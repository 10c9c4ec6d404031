//! Replays the corpora of the `paiod_config`, `recording` and
//! `cluster_report` fuzz targets on stable Rust, through the checks they
//! share with the targets (`fuzz/src/control.rs`).

#[path = "../../../fuzz/src/control.rs"]
mod checks;
#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::{files, replay, root};

#[test]
fn paiod_config_corpus() {
    // The shipped configurations are seeds too.
    let examples = files(&root().join("policies/paiod"));
    assert!(examples.len() >= 5, "policies/paiod: {examples:?}");
    replay("paiod_config", checks::check_paiod_config, &examples, 11);
}

#[test]
fn recording_corpus() {
    replay("recording", checks::check_recording, &[], 4);
}

#[test]
fn cluster_report_corpus() {
    replay("cluster_report", checks::check_cluster_report, &[], 3);
}

/// The checks take the path each input calls for: a check that refused
/// everything would pass any corpus.
#[test]
fn checks_accept_and_reject() {
    let examples = files(&root().join("policies/paiod"));
    for path in &examples {
        let text = std::fs::read(path).unwrap();
        assert!(checks::check_paiod_config(&text), "{}", path.display());
    }
    assert!(!checks::check_paiod_config(b"period = \"0ms\"\n"));
    assert!(!checks::check_paiod_config(&[0xff, 0xfe]));
    let recording = std::fs::read(root().join("fuzz/corpus/recording/documented.jsonl")).unwrap();
    assert!(checks::check_recording(&recording));
    assert!(!checks::check_recording(b"{\"v\":1"));
    let report = std::fs::read(root().join("fuzz/corpus/cluster_report/report")).unwrap();
    assert!(checks::check_cluster_report(&report));
    assert!(!checks::check_cluster_report(b"[]"));
}
