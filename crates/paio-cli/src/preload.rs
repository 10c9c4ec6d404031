//! Finding `libpaio_preload.so` and composing `LD_PRELOAD`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The interposer's file name.
pub const LIBRARY_NAME: &str = "libpaio_preload.so";

/// Why the interposer cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PreloadError {
    /// `PAIO_LIB` names no file.
    #[error("PAIO_LIB={path:?} does not name a readable file: {reason}")]
    BadPaioLib {
        /// The value of `PAIO_LIB`.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Not found next to the executable.
    #[error("cannot find {LIBRARY_NAME}: looked at {}; build it (cargo build -p paio-preload, next to the paio binary) or set PAIO_LIB to its path", .looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and "))]
    NotFound {
        /// Where it looked.
        looked: Vec<PathBuf>,
    },
    /// The path cannot be written into `LD_PRELOAD`.
    #[error("{path:?}: the dynamic loader splits LD_PRELOAD at spaces and colons, so the interposer's path may contain neither; move or link it elsewhere and set PAIO_LIB")]
    Unrepresentable {
        /// The library's path.
        path: PathBuf,
    },
}

/// Where `paio` looks for the interposer when `PAIO_LIB` is not set: the
/// directory of its own executable `exe`, then `../lib/` from there.
pub fn candidates(exe: &Path) -> Vec<PathBuf> {
    let dir = exe.parent().unwrap_or_else(|| Path::new("."));
    vec![
        dir.join(LIBRARY_NAME),
        dir.join("..").join("lib").join(LIBRARY_NAME),
    ]
}

/// The interposer's absolute path: `paio_lib` (the value of `PAIO_LIB`) if
/// set and not empty, else the first of [`candidates`] that is a file.
pub fn find_library(paio_lib: Option<&OsStr>, exe: &Path) -> Result<PathBuf, PreloadError> {
    if let Some(lib) = paio_lib.filter(|v| !v.is_empty()) {
        let path = PathBuf::from(lib);
        let bad = |reason: String| PreloadError::BadPaioLib {
            path: path.clone(),
            reason,
        };
        let meta = std::fs::metadata(&path).map_err(|e| bad(e.to_string()))?;
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        return std::fs::canonicalize(&path).map_err(|e| bad(e.to_string()));
    }
    let looked = candidates(exe);
    for c in &looked {
        if c.is_file() {
            if let Ok(abs) = std::fs::canonicalize(c) {
                return Ok(abs);
            }
        }
    }
    Err(PreloadError::NotFound { looked })
}

/// The `LD_PRELOAD` value that adds `lib` after the user's `existing`
/// entries. The user's value is kept as it was (entries separated by spaces
/// or colons, as the dynamic loader accepts); `lib` is appended after a
/// colon, unless it is already listed.
pub fn compose_ld_preload(existing: Option<&OsStr>, lib: &Path) -> Result<OsString, PreloadError> {
    let lib_bytes = lib.as_os_str().as_bytes();
    if lib_bytes.is_empty() || lib_bytes.iter().any(|&b| b == b' ' || b == b':') {
        return Err(PreloadError::Unrepresentable {
            path: lib.to_path_buf(),
        });
    }
    let existing = existing.map(OsStr::as_bytes).unwrap_or_default();
    let is_sep = |b: &u8| *b == b' ' || *b == b':';
    if existing.split(is_sep).any(|entry| entry == lib_bytes) {
        return Ok(OsString::from_vec(existing.to_vec()));
    }
    // Drop trailing separators so the result has no empty entry.
    let end = existing
        .iter()
        .rposition(|b| !is_sep(b))
        .map_or(0, |i| i + 1);
    let mut out = existing[..end].to_vec();
    if !out.is_empty() {
        out.push(b':');
    }
    out.extend_from_slice(lib_bytes);
    Ok(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compose(existing: Option<&str>, lib: &str) -> String {
        compose_ld_preload(existing.map(OsStr::new), Path::new(lib))
            .unwrap()
            .into_string()
            .unwrap()
    }

    #[test]
    fn ld_preload_appends_and_keeps_user_entries() {
        let lib = "/opt/paio/libpaio_preload.so";
        assert_eq!(compose(None, lib), lib);
        assert_eq!(compose(Some(""), lib), lib);
        assert_eq!(compose(Some("  "), lib), lib);
        assert_eq!(compose(Some("/a.so"), lib), format!("/a.so:{lib}"));
        assert_eq!(
            compose(Some("/a.so /b.so"), lib),
            format!("/a.so /b.so:{lib}")
        );
        assert_eq!(
            compose(Some("/a.so:/b.so:"), lib),
            format!("/a.so:/b.so:{lib}")
        );
        assert_eq!(compose(Some("libfoo.so "), lib), format!("libfoo.so:{lib}"));
        // Already listed: unchanged, not loaded twice.
        assert_eq!(
            compose(Some(&format!("{lib} /a.so")), lib),
            format!("{lib} /a.so")
        );
        // A path the loader would split is refused.
        for bad in ["/opt/my libs/libpaio_preload.so", "/a:b/libpaio_preload.so"] {
            let e = compose_ld_preload(None, Path::new(bad)).unwrap_err();
            assert!(matches!(e, PreloadError::Unrepresentable { .. }), "{bad}");
        }
    }

    #[test]
    fn library_lookup_order_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let lib = dir.path().join("lib");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let exe = bin.join("paio");

        let e = find_library(None, &exe).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot find libpaio_preload.so: looked at "),
            "{e}"
        );
        assert!(
            e.contains(&bin.join(LIBRARY_NAME).display().to_string()),
            "{e}"
        );
        assert!(e.contains("bin/../lib/libpaio_preload.so"), "{e}");

        std::fs::write(lib.join(LIBRARY_NAME), b"").unwrap();
        let found = find_library(None, &exe).unwrap();
        assert_eq!(
            found,
            std::fs::canonicalize(lib.join(LIBRARY_NAME)).unwrap()
        );

        std::fs::write(bin.join(LIBRARY_NAME), b"").unwrap();
        let found = find_library(None, &exe).unwrap();
        assert_eq!(
            found,
            std::fs::canonicalize(bin.join(LIBRARY_NAME)).unwrap()
        );

        // PAIO_LIB wins, and must exist.
        let other = dir.path().join("other.so");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(
            find_library(Some(other.as_os_str()), &exe).unwrap(),
            std::fs::canonicalize(&other).unwrap()
        );
        assert_eq!(find_library(Some(OsStr::new("")), &exe).unwrap(), found);
        let e = find_library(Some(OsStr::new("/nonexistent/x.so")), &exe).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("PAIO_LIB=\"/nonexistent/x.so\" does not name"),
            "{e}"
        );
        let e = find_library(Some(dir.path().as_os_str()), &exe).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
