//! Compiles the C CollNet test plugin once per ncclCollNet version, plus the
//! failure variants, into `libnccl-net-cn*.so` in the cargo profile directory.

use std::path::Path;

use ferroccl_test_cbuild::{compile_plugin, profile_dir};

fn main() {
    println!("cargo:rerun-if-changed=csrc/collnet.c");
    println!("cargo:rerun-if-changed=csrc/deaf.c");
    let dir = profile_dir();
    let src = Path::new("csrc/collnet.c");
    let mut variants: Vec<(String, Vec<String>)> = (6..=12)
        .map(|v| (format!("cn{v}"), vec![format!("-DCN_VERSION={v}")]))
        .collect();
    variants.push((
        "cnnone".into(),
        vec!["-DCN_VERSION=12".into(), "-DCN_NO_COLLNET".into()],
    ));
    variants.push((
        "cn12initfail".into(),
        vec!["-DCN_VERSION=12".into(), "-DCN_INIT_FAIL".into()],
    ));
    variants.push((
        "cn8initfail".into(),
        vec!["-DCN_VERSION=8".into(), "-DCN_INIT_FAIL".into()],
    ));
    variants.push((
        "cn9zerodev".into(),
        vec!["-DCN_VERSION=9".into(), "-DCN_ZERO_DEVICES".into()],
    ));
    variants.push((
        "cn11nullslot".into(),
        vec!["-DCN_VERSION=11".into(), "-DCN_NULL_TEST".into()],
    ));
    // The conformance suite's CollNet zoo: each broken in one way (conformance/tests/collnet.rs).
    for (name, def) in [
        ("cnzbadreduce", "CN_BAD_REDUCE"),
        ("cnzhang", "CN_HANG_LARGE"),
        ("cnzbadsge", "CN_BAD_SGE"),
        ("cnzbadsgeag", "CN_BAD_SGE_AG"),
        ("cnzwrongsize", "CN_WRONG_SIZE"),
    ] {
        variants.push((name.into(), vec!["-DCN_VERSION=12".into(), format!("-D{def}")]));
    }
    for (name, defs) in variants {
        compile_plugin(src, &["-pthread"], &defs, &dir.join(format!("libnccl-net-{name}.so")));
    }
    // The zoo's deaf plugin: the in-tree CollNet plugin behind a shim that hides a
    // dead peer (csrc/deaf.c; caught by collnet.fault.peer_killed only).
    compile_plugin(
        Path::new("csrc/deaf.c"),
        &["-pthread", "-ldl"],
        &[] as &[&str],
        &dir.join("libnccl-net-cnzdeaf.so"),
    );
    // The same shim refusing NULL mhandles (the host passes registrations as NCCL does).
    compile_plugin(
        Path::new("csrc/deaf.c"),
        &["-pthread", "-ldl"],
        &["-DCN_STRICT_MR"],
        &dir.join("libnccl-net-cnstrictmr.so"),
    );
    // The same shim whose every connect fails (the host's CollNet setup fallback).
    compile_plugin(
        Path::new("csrc/deaf.c"),
        &["-pthread", "-ldl"],
        &["-DCN_CONNECT_FAIL"],
        &dir.join("libnccl-net-cnconnfail.so"),
    );
}
