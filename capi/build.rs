//! Builds libnccl.so.2: the soname, and `nccl.h` generated with cbindgen from
//! `src/abi.rs` (types, structs, integer macros) and `src/exports.rs` (every
//! function), with the enums of `src/enums.rs` and the function-like macros of
//! `header/`. The header is written to `$OUT_DIR/nccl.h`; its path is given to
//! the crate as `FERROCCL_NCCL_H` (tests) and found by `cargo xtask dist`.

use std::path::PathBuf;

#[path = "src/enums.rs"]
mod enums;

fn main() {
    // NCCL's soname: programs linked against libnccl.so record libnccl.so.2.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let inputs = [
        "cbindgen.toml",
        "src/abi.rs",
        "src/exports.rs",
        "src/enums.rs",
        "header/prologue.h",
        "header/epilogue.h",
    ];
    for f in inputs {
        println!("cargo:rerun-if-changed={f}");
    }
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("cannot read {f}: {e}"));
    let mut config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = Some(format!("\n{}\n{}", read("header/prologue.h"), enums::c_text()));
    config.trailer = Some(read("header/epilogue.h"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("nccl.h");
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/abi.rs"))
        .with_src(dir.join("src/exports.rs"))
        .generate()
        .expect("cbindgen could not generate nccl.h")
        .write_to_file(&out);
    println!("cargo:rustc-env=FERROCCL_NCCL_H={}", out.display());
}
