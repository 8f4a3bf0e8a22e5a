//! Compiles `csrc/profiler_cuda_events.c` with `-shared` only (no `-lcudart`, as
//! NCCL's example profiler's Makefile does) into
//! `target/<profile>/libnccl-profiler-cudaevents.so`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/profiler_cuda_events.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → the profile dir is three levels up.
    let profile_dir = out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf();
    let dst = profile_dir.join("libnccl-profiler-cudaevents.so");
    let mut c = cc::Build::new().get_compiler().to_command();
    c.args([
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-std=c11",
        "-D_GNU_SOURCE",
        "-fvisibility=hidden",
    ])
    .arg("csrc/profiler_cuda_events.c")
    .arg("-o")
    .arg(&dst);
    let status = c.status().expect("run the C compiler");
    assert!(status.success(), "compiling {} failed", dst.display());
}
