//! Builds the C-variadic NCCL logger shim (`csrc/logger.c`) that the plugin host
//! passes to plugins as their `ncclDebugLogger_t` (see `src/plugin/logger.rs`),
//! and the CUDA runtime stand-in (`csrc/cudart_stub.c`) that the host embeds and
//! loads only for profiler plugins that need `cudaEvent*` when no CUDA runtime is
//! loaded (see `src/plugin/cuda_stub.rs`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/logger.c");
    println!("cargo:rerun-if-changed=csrc/cudart_stub.c");
    cc::Build::new()
        .file("csrc/logger.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("ferroccl_logger_shim");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let so = out.join("libferroccl-cudart-stub.so");
    let mut c = cc::Build::new().get_compiler().to_command();
    c.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-fvisibility=hidden",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-std=c11",
    ])
    .arg("csrc/cudart_stub.c")
    .arg("-o")
    .arg(&so);
    let status = c.status().expect("run the C compiler for csrc/cudart_stub.c");
    assert!(
        status.success(),
        "compiling csrc/cudart_stub.c into {} failed",
        so.display()
    );
}
