#![no_main]

// The check lives in fuzz/src/cli.rs, shared with the stable replay
// crates/paio-cli/tests/fuzz_stats_file.rs.
#[path = "../src/cli.rs"]
#[allow(dead_code)] // the other target's check
mod cli;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cli::check_stats_file(data);
});
