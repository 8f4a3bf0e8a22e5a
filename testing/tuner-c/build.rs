//! Compiles the C test tuners into shared libraries in the cargo profile
//! directory (see `src/lib.rs` for the list).

use std::path::PathBuf;
use std::process::Command;

fn run(mut cmd: Command) {
    let shown = format!("{cmd:?}");
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(status.success(), "{shown} failed with {status}");
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/tuner.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → profile dir is three levels up.
    let profile_dir = out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf();
    let compiler = cc::Build::new().get_compiler();
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
        ]);
        c.args(&defs)
            .arg("csrc/tuner.c")
            .arg("-o")
            .arg(profile_dir.join(format!("libnccl-tuner-{name}.so")));
        run(c);
    }
}
