//! Builds csrc/printf.c, the printf family's variadic bodies (see
//! src/printf.rs).
//!
//! Debug builds (the library every preload test loads) compile it with
//! UndefinedBehaviorSanitizer's checks in trap mode: undefined behaviour
//! stops the program at once, and no sanitizer runtime is needed, which a
//! library preloaded into programs built without one could not bring.

fn main() {
    println!("cargo:rerun-if-changed=csrc/printf.c");
    println!("cargo:rerun-if-changed=build.rs");
    let mut build = cc::Build::new();
    build
        .file("csrc/printf.c")
        .flag("-fvisibility=hidden")
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true);
    if std::env::var("PROFILE").as_deref() == Ok("debug") {
        build
            .flag("-fsanitize=undefined")
            .flag("-fsanitize-undefined-trap-on-error");
    }
    build.compile("paio_printf");
}
