//! The buckets of limits shared by processes ([`paio::SharedBuckets`]):
//! one page of shared memory ([`crate::shm`]) in the file `$PAIO_SHARED`,
//! which `paio run` names in a directory of its own, so every process of
//! its command (and nobody else) draws on the same buckets.
//!
//! | words | content |
//! |---|---|
//! | 0 | magic (`PAIOLIM1`), stored last by the creator |
//! | 1 | number of places |
//! | 2.. | places of two words: a hash of the bucket's name (0: free), the bucket's word |
//!
//! A bucket's place is claimed by the first process that names it (a
//! compare-and-swap of the hash into a free place) and found by the others
//! by its hash. Places are never freed: the file lives as long as the run
//! that named it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const KIND: crate::shm::Kind = crate::shm::Kind {
    what: "shared limits",
    var: "PAIO_SHARED",
    magic: u64::from_le_bytes(*b"PAIOLIM1"),
};
const HEADER: usize = 2;
const PLACES: usize = (crate::shm::WORDS - HEADER) / 2;

/// The buckets in the file at a path, mapped when a stage first names one.
#[derive(Debug)]
pub(crate) struct FileBuckets {
    path: PathBuf,
    words: OnceLock<Result<&'static [AtomicU64], String>>,
}

impl FileBuckets {
    /// The buckets of the file at `path` (opened on first use).
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            words: OnceLock::new(),
        }
    }

    fn words(&self) -> Result<&'static [AtomicU64], String> {
        self.words
            .get_or_init(|| {
                crate::shm::open(
                    &self.path,
                    &KIND,
                    |w| w[1].store(PLACES as u64, Ordering::Relaxed),
                    |w| w[1].load(Ordering::Relaxed) == PLACES as u64,
                )
            })
            .clone()
    }
}

/// FNV-1a of `name`, never 0 (a free place).
fn hash(name: &str) -> u64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h.max(1)
}

impl paio::SharedBuckets for FileBuckets {
    fn word(&self, name: &str) -> Result<&'static AtomicU64, String> {
        let words = self.words()?;
        let h = hash(name);
        for p in 0..PLACES {
            let i = HEADER + 2 * p;
            match words[i].compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(&words[i + 1]),
                Err(found) if found == h => return Ok(&words[i + 1]),
                Err(_) => {}
            }
        }
        Err(format!(
            "{} {}: all {PLACES} places hold other buckets",
            KIND.what,
            self.path.display()
        ))
    }
}
