//! Gives `libpaio.so` the SONAME `libpaio.so.0`, so that programs linked
//! against it record that name (not the path they were linked with) and an
//! installed copy is found by the dynamic loader. For programs built against
//! the build tree (the tests, the RocksDB plugin, `-L target/release`), it
//! also puts `libpaio.so.0 -> libpaio.so` next to the library, where cargo
//! writes it.

#![forbid(unsafe_code)]

use std::path::Path;

/// The library's SONAME: the major version of its C ABI.
const SONAME: &str = "libpaio.so.0";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    let Some(out) = std::env::var_os("OUT_DIR") else {
        println!("cargo:warning=OUT_DIR is not set: no {SONAME} link in the build tree");
        return;
    };
    // OUT_DIR is <profile dir>/build/paio-ffi-<hash>/out.
    let out = Path::new(&out);
    let profile = out.ancestors().nth(3);
    let build = out.ancestors().nth(2);
    match (profile, build) {
        (Some(dir), Some(b)) if b.file_name().is_some_and(|n| n == "build") => {
            let link = dir.join(SONAME);
            if std::fs::symlink_metadata(&link).is_err() {
                if let Err(e) = std::os::unix::fs::symlink("libpaio.so", &link) {
                    println!("cargo:warning=cannot create {}: {e}", link.display());
                }
            }
        }
        _ => println!(
            "cargo:warning=unexpected OUT_DIR layout ({}): no {SONAME} link in the build tree",
            out.display()
        ),
    }
}
