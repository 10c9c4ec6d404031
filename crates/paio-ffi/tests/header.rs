//! The checked-in `include/paio.h` must be exactly what cbindgen generates
//! from this crate and `cbindgen.toml`. Run `make header` (which sets
//! `PAIO_BLESS_HEADER=1`) to rewrite it after changing the C ABI.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable and valid");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");

    let path = crate_dir.join("include").join("paio.h");
    if std::env::var_os("PAIO_BLESS_HEADER").is_some_and(|v| !v.is_empty() && v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()))
            + 1;
        panic!(
            "{} is out of date with the C ABI in src/ (first difference at line {line}); \
             run `make header` (PAIO_BLESS_HEADER=1 cargo test -p paio-ffi --test header) \
             and commit the result",
            path.display()
        );
    }
}
