#![no_main]

//! The leader's reading of a node's report (`node/<node>` in etcd): any
//! bytes are a checked report or an error, never a panic; what it accepts
//! has a bounded number of jobs with valid names and rates, and writes back
//! to the same report.

use libfuzzer_sys::fuzz_target;
use paio_control::cluster::{check_name, NodeReport, MAX_JOBS_PER_NODE};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = NodeReport::decode("n1", data) {
        assert_eq!(r.node, "n1");
        assert!(r.jobs.len() <= MAX_JOBS_PER_NODE);
        for (job, u) in &r.jobs {
            assert!(check_name(job).is_ok());
            assert!(u.achieved.is_none_or(|a| a.is_finite() && a >= 0.0));
        }
        let again = serde_json::to_vec(&r).unwrap();
        assert_eq!(NodeReport::decode("n1", &again).unwrap(), r);
    }
});
