//! Compiles the C recording profiler once per API version into
//! `libnccl-profiler-recv<N>.so` in the cargo profile directory.

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/profiler_rec.c");
    let profile_dir = profile_dir();
    for v in 1..=6 {
        compile_plugin(
            Path::new("csrc/profiler_rec.c"),
            &["-pthread"],
            &[format!("-DPROF_VERSION={v}")],
            &profile_dir.join(format!("libnccl-profiler-recv{v}.so")),
        );
    }
}
