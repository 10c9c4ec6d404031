#![no_main]

// The check lives in fuzz/src/control.rs, shared with the stable replay
// crates/paio-control/tests/fuzz_control.rs.
#[path = "../src/control.rs"]
#[allow(dead_code)] // the other targets' checks
mod control;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    control::check_paiod_config(data);
});
