#![no_main]

// The check lives in fuzz/src/paiod.rs, shared with the stable replay
// crates/paio-control/tests/fuzz_connection.rs.
#[path = "../src/paiod.rs"]
mod paiod;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| paiod::check_paiod_connection(data));
