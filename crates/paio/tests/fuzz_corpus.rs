//! Replays the fuzzing corpus on stable Rust: every file in
//! `fuzz/corpus/<target>/` (and in `fuzz/artifacts/<target>/`, where
//! `cargo fuzz` leaves crashing inputs, if any) goes through the same checks
//! as the fuzz targets, which live in `fuzz/src/lib.rs` and are included here.

#[path = "../../../fuzz/src/lib.rs"]
mod checks;
#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::{files, replay, root};

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
fn env_corpus() {
    replay("env", checks::check_env, &[], 18);
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
        checks::check_policy(b"[[channel]]\nname = \"a\"\nmatch = {}\n"),
        Accepted
    );
    // Builds, but no request could reach the channel: refused.
    assert_eq!(
        checks::check_policy(b"[[channel]]\nname = \"a\"\n"),
        Rejected
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
    assert_eq!(
        checks::check_env(b"PAIO_CONTROL=/a\nPAIO_CONTROL=/b\nHOME=/root"),
        Accepted
    );
    assert_eq!(checks::check_env(b"PAIO_CRITICAL=yes"), Rejected);
    assert_eq!(checks::check_env(&[0xff]), Skipped);
}
