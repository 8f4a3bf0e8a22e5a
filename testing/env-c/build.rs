//! Compiles the C test env plugins into shared libraries in the cargo profile
//! directory (see `src/lib.rs` for the list).

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/env.c");
    let profile_dir = profile_dir();
    let variants: [(&str, &[&str]); 8] = [
        ("cv1", &["-DENV_VERSION=1"]),
        ("cv2", &["-DENV_VERSION=2"]),
        ("zinitfail", &["-DENV_VERSION=2", "-DZOO_INITFAIL"]),
        ("znoname", &["-DENV_VERSION=2", "-DZOO_NONAME"]),
        ("zdangling", &["-DENV_VERSION=2", "-DZOO_DANGLING"]),
        ("zemptyunset", &["-DENV_VERSION=2", "-DZOO_EMPTY_UNSET"]),
        ("zthreadaffine", &["-DENV_VERSION=2", "-DZOO_THREAD_AFFINE"]),
        ("zfinalizefail", &["-DENV_VERSION=2", "-DZOO_FINALIZEFAIL"]),
    ];
    for (name, defs) in variants {
        compile_plugin(
            Path::new("csrc/env.c"),
            &["-pthread"],
            defs,
            &profile_dir.join(format!("libnccl-env-{name}.so")),
        );
    }
}
