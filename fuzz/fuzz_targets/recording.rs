#![no_main]

//! `paio plot`'s recording reader: any text is samples or an error naming
//! its line, never a panic; what it accepts writes back to the same samples.

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(samples) = paio_control::record::parse(text, Path::new("fuzz")) {
        let again: String = samples
            .iter()
            .map(|s| serde_json::to_string(s).unwrap() + "\n")
            .collect();
        let back = paio_control::record::parse(&again, Path::new("fuzz")).unwrap();
        assert_eq!(back.len(), samples.len());
    }
});
