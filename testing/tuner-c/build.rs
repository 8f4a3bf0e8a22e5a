//! Compiles the C test tuners into shared libraries in the cargo profile
//! directory (see `src/lib.rs` for the list).

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/tuner.c");
    let profile_dir = profile_dir();
    let mut variants: Vec<(String, Vec<String>)> = (2..=6)
        .map(|v| (format!("cv{v}"), vec![format!("-DTUNER_VERSION={v}")]))
        .collect();
    for (name, def) in [
        ("ccrash", "ZOO_CRASH"),
        ("coob", "ZOO_OOB"),
        ("cerror", "ZOO_ERROR"),
        ("cinitfail", "ZOO_INITFAIL"),
    ] {
        variants.push((name.into(), vec!["-DTUNER_VERSION=6".into(), format!("-D{def}")]));
    }
    for (name, defs) in variants {
        compile_plugin(
            Path::new("csrc/tuner.c"),
            &[],
            &defs,
            &profile_dir.join(format!("libnccl-tuner-{name}.so")),
        );
    }
}
