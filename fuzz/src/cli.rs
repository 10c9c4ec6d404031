//! The check of `paio plot --figure`'s decoder, shared by the fuzz target
//! (`fuzz_targets/figure.rs`) and the stable replay
//! `crates/paio-cli/tests/fuzz_figure.rs`, which include this file with
//! `#[path]`: only `paio_cli` may be used here.

use std::path::Path;

/// The `figure` target: any text is a figure or an error that starts with
/// the file's name, never a panic. Returns whether it was accepted.
pub fn check_figure(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    match paio_cli::plot::parse_figure(text, Path::new("fuzz")) {
        Ok(_) => true,
        Err(e) => {
            assert!(e.to_string().starts_with("fuzz: "), "{e}");
            false
        }
    }
}
