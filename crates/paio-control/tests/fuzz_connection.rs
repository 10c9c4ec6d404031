//! Replays the `paiod_connection` fuzz corpus on stable Rust: every input
//! goes through paiod's real connection handler with a reading, a
//! non-reading and a slow peer (`fuzz/src/paiod.rs`, shared with the fuzz
//! target).

#[path = "../../../fuzz/src/paiod.rs"]
mod checks;
#[path = "../../../fuzz/src/replay.rs"]
mod replay;

#[test]
fn paiod_connection_corpus() {
    replay::replay("paiod_connection", checks::check_paiod_connection, &[], 8);
}

/// The reply check can fail: a frame cut short is refused.
#[test]
#[should_panic(expected = "a partial frame")]
fn the_check_refuses_a_cut_frame() {
    checks::check_replies(&[0, 0, 0, 9, b'{']);
}
