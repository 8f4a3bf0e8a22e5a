//! Compiles the RMA zoo (one C source, one fault per library) into
//! `libnccl-rma-zoo-*.so` in the cargo profile directory.

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/rma_zoo.c");
    let dir = profile_dir();
    let src = Path::new("csrc/rma_zoo.c");
    for (name, fault) in [
        ("good", "ZOO_GOOD"),
        ("nodev", "ZOO_NODEV"),
        ("signal-early", "ZOO_SIGNAL_EARLY"),
        ("odd-get", "ZOO_ODD_GET"),
        ("stuck-test", "ZOO_STUCK_TEST"),
    ] {
        compile_plugin(
            src,
            &["-pthread", "-ldl"],
            &[format!("-D{fault}"), format!("-DZOO_NAME=\"RmaZoo-{name}\"")],
            &dir.join(format!("libnccl-rma-zoo-{name}.so")),
        );
    }
}
