//! Compiles the C zoo profilers into shared libraries in the cargo profile
//! directory (see `src/lib.rs` for the list).

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/profiler_zoo.c");
    let profile_dir = profile_dir();
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
        compile_plugin(
            Path::new("csrc/profiler_zoo.c"),
            &["-pthread"],
            &defs,
            &profile_dir.join(format!("libnccl-profiler-{name}.so")),
        );
    }
}
