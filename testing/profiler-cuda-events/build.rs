//! Compiles `csrc/profiler_cuda_events.c` with `-shared` only (no `-lcudart`, as
//! NCCL's example profiler's Makefile does) into
//! `target/<profile>/libnccl-profiler-cudaevents.so`.

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/profiler_cuda_events.c");
    compile_plugin::<&str>(
        Path::new("csrc/profiler_cuda_events.c"),
        &["-fvisibility=hidden"],
        &[],
        &profile_dir().join("libnccl-profiler-cudaevents.so"),
    );
}
