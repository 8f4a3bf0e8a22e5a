//! Compiles the C zoo profilers into shared libraries in the cargo profile
//! directory (see `src/lib.rs` for the list).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/profiler_zoo.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → profile dir is three levels up.
    let profile_dir = out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf();
    let compiler = cc::Build::new().get_compiler();
    let mut variants: Vec<(String, Vec<String>)> = (1..=6)
        .map(|v| (format!("zgood-v{v}"), vec![format!("-DPROF_VERSION={v}")]))
        .collect();
    for (name, def) in [
        ("zcrash", "ZOO_CRASH"),
        ("zblock", "ZOO_BLOCK"),
        ("zinitfail", "ZOO_INITFAIL"),
        ("zbogus", "ZOO_BOGUS"),
        ("znull", "ZOO_NULL"),
        ("zleak", "ZOO_LEAK"),
    ] {
        variants.push((name.into(), vec!["-DPROF_VERSION=6".into(), format!("-D{def}")]));
    }
    for (name, defs) in variants {
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
        .args(&defs)
        .arg("csrc/profiler_zoo.c")
        .arg("-o")
        .arg(profile_dir.join(format!("libnccl-profiler-{name}.so")));
        let shown = format!("{c:?}");
        let status = c.status().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
        assert!(status.success(), "{shown} failed with {status}");
    }
}
