//! Compiles the fake GIN plugin and its broken variant into
//! `libnccl-gin-fake*.so` in the cargo profile directory.

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/gin_fake.c");
    let dir = profile_dir();
    let src = Path::new("csrc/gin_fake.c");
    for (name, defs) in [
        ("fake", vec![]),
        ("fake-hosttype", vec!["-DGIN_FAULT_HOST_TYPE".to_string()]),
    ] {
        compile_plugin(src, &[], &defs, &dir.join(format!("libnccl-gin-{name}.so")));
    }
}
