//! Replays the `figure` fuzz corpus on stable Rust, through the check it
//! shares with the fuzz target (`fuzz/src/cli.rs`).

#[path = "../../../fuzz/src/cli.rs"]
#[allow(dead_code)] // the other target's check
mod checks;
#[path = "../../../fuzz/src/replay.rs"]
mod replay;

#[test]
fn figure_corpus() {
    replay::replay("figure", checks::check_figure, &[], 3);
}

/// The check takes both paths: one that refused everything would pass any
/// corpus.
#[test]
fn the_check_accepts_and_rejects() {
    let documented =
        std::fs::read(replay::root().join("fuzz/corpus/figure/documented.json")).unwrap();
    assert!(checks::check_figure(&documented));
    assert!(!checks::check_figure(b"{\"panels\": []"));
}
