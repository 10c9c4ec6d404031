//! The checks of `paio plot --figure`'s decoder and of statistics files as
//! `paio run --summary`, `--progress` and `--record` read them, shared by
//! the fuzz targets (`fuzz_targets/figure.rs`, `fuzz_targets/stats_file.rs`)
//! and the stable replays `crates/paio-cli/tests/fuzz_figure.rs` and
//! `fuzz_stats_file.rs`, which include this file with `#[path]`: only
//! `paio_cli` may be used here.

use std::path::Path;
use std::time::{Duration, SystemTime};

use paio_cli::summary::{self, FileSampler, StatsFile};

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

/// The `stats_file` target: any bytes are a statistics file or an error
/// that starts with the file's name, never a panic; a file decoded is
/// summarized (alone and beside a copy of itself, its histograms merged),
/// put in a progress line and sampled twice for a recording. Returns
/// whether it was accepted.
pub fn check_stats_file(data: &[u8]) -> bool {
    match summary::parse_file(data, Path::new("fuzz")) {
        Ok(f) => {
            let files = [f.clone(), f];
            let _ = summary::format_summary(&files, Duration::from_secs(1));
            let _ = summary::format_summary(&files[..1], Duration::ZERO);
            let refs: Vec<&StatsFile> = files.iter().collect();
            let _ = summary::progress_line(
                &refs,
                Duration::from_secs(3),
                (u64::MAX, 7),
                Duration::ZERO,
            );
            let mut sampler = FileSampler::default();
            let _ = sampler.sample(&refs, 1.0, SystemTime::UNIX_EPOCH);
            let _ = sampler.sample(&refs[..1], 2.5, SystemTime::UNIX_EPOCH);
            let _ = files[0].stage_label();
            true
        }
        Err(e) => {
            assert!(e.to_string().starts_with("fuzz: "), "{e}");
            false
        }
    }
}
