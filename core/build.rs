//! Builds the C-variadic NCCL logger shim (`csrc/logger.c`) that the plugin host
//! passes to plugins as their `ncclDebugLogger_t` (see `src/plugin/logger.rs`).

fn main() {
    println!("cargo:rerun-if-changed=csrc/logger.c");
    cc::Build::new()
        .file("csrc/logger.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("ferroccl_logger_shim");
}
