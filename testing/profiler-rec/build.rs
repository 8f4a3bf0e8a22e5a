//! Compiles the C recording profiler once per API version into
//! `libnccl-profiler-recv<N>.so` in the cargo profile directory.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/profiler_rec.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → profile dir is three levels up.
    let profile_dir = out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf();
    let compiler = cc::Build::new().get_compiler();
    for v in 1..=6 {
        let mut c = compiler.to_command();
        c.args([
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-std=c11",
            "-D_GNU_SOURCE",
            "-pthread",
        ])
        .arg(format!("-DPROF_VERSION={v}"))
        .arg("csrc/profiler_rec.c")
        .arg("-o")
        .arg(profile_dir.join(format!("libnccl-profiler-recv{v}.so")));
        let shown = format!("{c:?}");
        let status = c.status().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
        assert!(status.success(), "{shown} failed with {status}");
    }
}
