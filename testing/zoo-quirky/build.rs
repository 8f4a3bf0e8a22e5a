//! Compiles conformance/zoo/zoo_net.c as a standalone C plugin once per variant
//! (see `src/lib.rs`) into the cargo profile directory (`target/<profile>/`),
//! where the tests find them, the way third-party plugins are built: the system C
//! compiler, `-shared -fPIC`, no Rust in the library.

use std::path::PathBuf;

/// (file suffix, defines).
const VARIANTS: [(&str, &[&str]); 10] = [
    ("handle-state", &["ZOO_QUIRK_HANDLE_STATE"]),
    ("deref-mhandle", &["ZOO_QUIRK_DEREF_MHANDLE"]),
    ("oldest-test", &["ZOO_QUIRK_OLDEST_TEST"]),
    ("slow-connect", &["ZOO_QUIRK_SLOW_CONNECT"]),
    ("threads", &["ZOO_QUIRK_THREADS"]),
    ("ctx-teardown", &["ZOO_EXPORT_V12", "ZOO_QUIRK_CTX_TEARDOWN"]),
    ("no-sizes", &["ZOO_FAULT_NO_SIZES"]),
    ("no-devices", &["ZOO_FAULT_NO_DEVICES"]),
    ("gdr", &["ZOO_QUIRK_GDR"]),
    ("traffic-class", &["ZOO_EXPORT_V12", "ZOO_FAULT_TRAFFIC_CLASS"]),
];

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../conformance/zoo");
    let src = dir.join("zoo_net.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", dir.join("zoo_v12.h").display());
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → the profile dir is three levels up.
    let profile_dir = out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf();
    let compiler = cc::Build::new().get_compiler();
    for (name, defines) in VARIANTS {
        let dst = profile_dir.join(format!("libnccl-net-zoo-{name}.so"));
        let mut c = compiler.to_command();
        c.args([
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-std=c11",
            "-fvisibility=hidden",
            "-DZOO_STANDALONE",
        ]);
        c.arg(format!("-DZOO_FAULT_NAME=\"{name}\""));
        for d in defines {
            c.arg(format!("-D{d}"));
        }
        c.arg(&src).arg("-o").arg(&dst).arg("-lpthread");
        let shown = format!(
            "{} {}",
            c.get_program().to_string_lossy(),
            c.get_args().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
        );
        let status = c.status().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
        assert!(status.success(), "{shown} failed with {status}");
    }
}
