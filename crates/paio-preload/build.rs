//! Builds csrc/printf.c, the printf family's variadic bodies (see
//! src/printf.rs).

fn main() {
    println!("cargo:rerun-if-changed=csrc/printf.c");
    println!("cargo:rerun-if-changed=build.rs");
    cc::Build::new()
        .file("csrc/printf.c")
        .flag("-fvisibility=hidden")
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true)
        .compile("paio_printf");
}
