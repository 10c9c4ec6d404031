#![no_main]

//! `paio plot --figure`'s decoder: any text is a figure or an error naming
//! the field at fault, never a panic.

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = paio_cli::plot::parse_figure(text, Path::new("fuzz")) {
        assert!(e.to_string().starts_with("fuzz: "));
    }
});
