//! Replays the `stats_file` fuzz corpus on stable Rust, through the check
//! it shares with the fuzz target (`fuzz/src/cli.rs`).

#[path = "../../../fuzz/src/cli.rs"]
#[allow(dead_code)] // the other target's check
mod checks;
#[path = "../../../fuzz/src/replay.rs"]
mod replay;

#[test]
fn stats_file_corpus() {
    replay::replay("stats_file", checks::check_stats_file, &[], 5);
}

/// The check takes both paths: one that refused everything would pass any
/// corpus.
#[test]
fn the_check_accepts_and_rejects() {
    let written =
        std::fs::read(replay::root().join("fuzz/corpus/stats_file/interposer-1.json")).unwrap();
    assert!(checks::check_stats_file(&written));
    assert!(!checks::check_stats_file(b"{\"pid\": 1"));
}
