// Shared build script body of the testing/zoo-* crates (included with `include!`):
// compiles conformance/zoo/zoo_net.c with one fault switch into a static library
// that the crate's cdylib links.

/// Compiles the zoo plugin with `-DZOO_FAULT_<fault>`.
fn build_zoo(fault: &str) {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../../conformance/zoo/zoo_net.c");
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=build.rs");
    cc::Build::new()
        .file(src)
        .define(&format!("ZOO_FAULT_{fault}"), None)
        .define("ZOO_FAULT_NAME", Some(format!("\"{}\"", fault.to_lowercase()).as_str()))
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .compile("zoo_net");
}
