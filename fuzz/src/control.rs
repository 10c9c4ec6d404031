//! Checks of paiod's and `paio plot`'s readers of files and stored values:
//! paiod's configuration, a recording of statistics, and a cluster node's
//! report in etcd. Shared by the fuzz targets (`fuzz_targets/paiod_config.rs`,
//! `recording.rs`, `cluster_report.rs`) and the stable replay
//! `crates/paio-control/tests/fuzz_control.rs`, which include this file with
//! `#[path]`: only `paio_control` and `serde_json` may be used here.
//!
//! Each check panics when an invariant breaks; it returns whether the input
//! was accepted (`false`: refused, or not text).

use std::path::Path;
use std::time::Duration;

use paio_control::cluster::{check_name, NodeReport, MAX_JOBS_PER_NODE};
use paio_control::config::{PaiodConfig, MAX_CONFIG_BYTES};

/// The origin given to fuzzed configurations; errors must name it.
pub const ORIGIN: &str = "fuzz.toml";

/// The `paiod_config` target: text is a configuration or an error that
/// names the origin, a line and column inside the text, and a field; an
/// accepted configuration has positive periods and builds a policy that
/// runs a period over no stages without panicking.
pub fn check_paiod_config(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    match PaiodConfig::parse(text, ORIGIN) {
        Err(e) => {
            let shown = e.to_string();
            assert_eq!(e.origin, ORIGIN, "{shown}");
            assert!(!e.field.is_empty() && !e.message.is_empty(), "{shown}");
            assert!(!e.field.contains("$__"), "internal field name: {shown}");
            assert!(e.line >= 1 && e.column >= 1, "{shown}");
            if text.len() <= MAX_CONFIG_BYTES {
                let lines = text.split('\n').count();
                assert!(e.line <= lines, "line {} of {lines}: {shown}", e.line);
                let line = text.split('\n').nth(e.line - 1).unwrap_or("");
                assert!(
                    e.column <= line.chars().count() + 1,
                    "column {} past the end of line {line:?}: {shown}",
                    e.column
                );
            }
            false
        }
        Ok(c) => {
            assert!(!c.period.is_zero() && !c.collect_timeout.is_zero());
            let mut policy = c.policy.build();
            assert_eq!(policy.kind(), c.policy.kind.name());
            let _ = policy.period(Duration::ZERO, &[]);
            let _ = policy.period(c.period, &[]);
            let _ = policy.targets();
            true
        }
    }
}

/// The `recording` target (`paio plot`'s reader of `--record` files): text
/// is samples or an error, and what it accepts writes back to as many
/// samples.
pub fn check_recording(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(samples) = paio_control::record::parse(text, Path::new("fuzz")) else {
        return false;
    };
    let again: String = samples
        .iter()
        .map(|s| serde_json::to_string(s).expect("a sample serializes") + "\n")
        .collect();
    let back = paio_control::record::parse(&again, Path::new("fuzz"))
        .unwrap_or_else(|e| panic!("written samples do not parse back: {e}"));
    assert_eq!(back.len(), samples.len());
    true
}

/// The `cluster_report` target (the leader's reading of `node/<node>` in
/// etcd): any bytes are a checked report or an error; what it accepts has
/// a bounded number of jobs with valid names and rates, and writes back to
/// the same report.
pub fn check_cluster_report(data: &[u8]) -> bool {
    let Ok(r) = NodeReport::decode("n1", data) else {
        return false;
    };
    assert_eq!(r.node, "n1");
    assert!(r.jobs.len() <= MAX_JOBS_PER_NODE);
    for (job, u) in &r.jobs {
        assert!(check_name(job).is_ok(), "job {job:?}");
        assert!(u.achieved.is_none_or(|a| a.is_finite() && a >= 0.0));
    }
    let again = serde_json::to_vec(&r).expect("a report serializes");
    assert_eq!(NodeReport::decode("n1", &again).unwrap(), r);
    true
}
