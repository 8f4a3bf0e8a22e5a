//! What the build scripts of the C test plugins share: where the `.so` files
//! go (the cargo profile directory, `target/<profile>/`, where the tests
//! dlopen them) and how one C source is compiled into one plugin library
//! (`-shared -fPIC -O1 -Wall -Wextra -Werror -std=c11 -D_GNU_SOURCE`, the
//! flags NCCL's example plugins' Makefiles use plus strict warnings).
//!
//! For build scripts only: every function panics (failing the build) with the
//! command that failed.

use std::path::{Path, PathBuf};

/// The flags every C test plugin is compiled with.
pub const C_FLAGS: [&str; 8] = [
    "-shared",
    "-fPIC",
    "-O1",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-std=c11",
    "-D_GNU_SOURCE",
];

/// The cargo profile directory (`target/<profile>/`) of the running build script.
///
/// Panics when `OUT_DIR` is unset or not three levels below it.
pub fn profile_dir() -> PathBuf {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out → profile dir is three levels up.
    out.ancestors().nth(3).expect("profile dir above OUT_DIR").to_path_buf()
}

/// Compiles `src` with [`C_FLAGS`], then `extra` flags (`-pthread`, …), then
/// `defs` (`-DNAME=VALUE`) into the shared library `dst`.
///
/// Panics naming the command when the compiler cannot be run or fails.
pub fn compile_plugin<S: AsRef<std::ffi::OsStr>>(src: &Path, extra: &[&str], defs: &[S], dst: &Path) {
    let mut c = cc::Build::new().get_compiler().to_command();
    c.args(C_FLAGS).args(extra).args(defs).arg(src).arg("-o").arg(dst);
    let shown = format!("{c:?}");
    let status = c.status().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(status.success(), "{shown} failed with {status}");
}
