//! Reading a text file whose size the reader bounds: policies, paiod's
//! configuration, figures, recordings. The length a file's metadata gives is not a
//! bound (`/dev/zero` and pipes say 0), so the file is read through a
//! limit: at most `max` bytes are kept, and one more byte means the file is
//! too large, whatever it is. Pipes and process substitution
//! (`--policy <(...)`) are read as files are.

use std::io::Read as _;
use std::path::Path;

/// Why a text file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TextFileError {
    /// Opening or reading failed.
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// More than the bound.
    #[error("more than the {max} bytes allowed")]
    TooLarge {
        /// The bound, in bytes.
        max: usize,
    },
    /// Not UTF-8.
    #[error("not UTF-8 text")]
    NotUtf8,
}

/// The text of the file at `path`, if it has at most `max` bytes of UTF-8.
/// Never reads more than `max + 1` bytes.
pub fn read_bounded(path: &Path, max: usize) -> Result<String, TextFileError> {
    let bytes =
        read_at_most(std::fs::File::open(path)?, max)?.ok_or(TextFileError::TooLarge { max })?;
    String::from_utf8(bytes).map_err(|_| TextFileError::NotUtf8)
}

/// What `reader` yields up to its end, if that is at most `max` bytes;
/// `None` if it yields more. Never reads more than `max + 1` bytes (for a
/// file the caller opened itself, with checks of its own).
pub fn read_at_most(reader: impl std::io::Read, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    reader.take(max as u64 + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= max).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_within_the_bound_and_refuses_beyond_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "abcd").unwrap();
        assert_eq!(read_bounded(&p, 4).unwrap(), "abcd");
        assert!(matches!(
            read_bounded(&p, 3),
            Err(TextFileError::TooLarge { max: 3 })
        ));
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_bounded(&p, 4), Err(TextFileError::NotUtf8)));
        assert!(matches!(
            read_bounded(&dir.path().join("none"), 4),
            Err(TextFileError::Io(_))
        ));
    }

    /// A device that never ends is cut at the bound, not read to the end of
    /// memory; its metadata says 0 bytes.
    #[test]
    fn an_endless_device_is_too_large() {
        let e = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "more than the 1048576 bytes allowed");
    }
}
