//! Compiles the C test plugins into shared libraries in the cargo profile
//! directory (see `src/lib.rs` for the list).

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(mut cmd: Command) {
    let shown = format!("{cmd:?}");
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(status.success(), "{shown} failed with {status}");
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/plugin_v6.c");
    println!("cargo:rerun-if-changed=csrc/missing_dep.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → profile dir is three levels up.
    let profile_dir = out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf();
    let compiler = cc::Build::new().get_compiler();
    let cc_cmd = |args: &[&str], src: &Path, dst: &Path, extra_after: &[&str]| {
        let mut c = compiler.to_command();
        c.args(ferroccl_test_cbuild::C_FLAGS);
        c.args(args)
            .arg(src)
            .arg("-o")
            .arg(dst)
            .args(extra_after)
            .arg("-lpthread");
        run(c);
    };
    let src = PathBuf::from("csrc/plugin_v6.c");
    let variants: [(&str, &[&str]); 6] = [
        ("cv6", &[]),
        ("cv6late", &["-DCV6_LATE_TABLE"]),
        ("cv6initfail", &["-DCV6_INIT_FAIL"]),
        ("cv6zerodev", &["-DCV6_ZERO_DEVICES"]),
        ("cv6nosym", &["-DCV6_NO_SYMBOL"]),
        ("cv6unpack", &["-DCV6_EXPORT_V7_UNPACK"]),
    ];
    for (name, defs) in variants {
        cc_cmd(defs, &src, &profile_dir.join(format!("libnccl-net-{name}.so")), &[]);
    }
    // A plugin whose dependency is gone: link against a stub, then delete the stub.
    let stub_dir = out.join("stub");
    std::fs::create_dir_all(&stub_dir).expect("mkdir stub");
    let stub_c = stub_dir.join("stub.c");
    std::fs::write(&stub_c, "int ferroccl_missing_fn(void) { return 42; }\n").expect("write stub.c");
    let stub_so = stub_dir.join("libferroccl_missing.so");
    cc_cmd(&[], &stub_c, &stub_so, &[]);
    let lib_dir = format!("-L{}", stub_dir.display());
    cc_cmd(
        &[],
        Path::new("csrc/missing_dep.c"),
        &profile_dir.join("libnccl-net-missingdep.so"),
        &[&lib_dir, "-Wl,--no-as-needed", "-lferroccl_missing"],
    );
    std::fs::remove_file(&stub_so).expect("remove stub library");
}
