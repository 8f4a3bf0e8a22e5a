//! Shared by the CUDA tests: where NVRTC is.

use std::path::PathBuf;

/// `FERROCCL_NVRTC_LIB`, else the `nvidia-cuda-nvrtc-cu12` wheel's library,
/// found by asking `python3` where `nvidia.cuda_nvrtc` is installed; `None`
/// leaves the search to the loader path.
#[allow(dead_code)]
pub fn nvrtc_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(ferroccl_kernels::cuda::NVRTC_LIB_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import nvidia.cuda_nvrtc as m; print(list(m.__path__)[0])"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let lib = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim())
        .join("lib")
        .join("libnvrtc.so.12");
    lib.is_file().then_some(lib)
}

/// The first compiler that answers `--version`: `$env_var` if set, then each
/// of `names`. The error names them all.
#[allow(dead_code)]
pub fn find_compiler(env_var: &str, names: &[&str]) -> Result<String, String> {
    std::env::var(env_var)
        .ok()
        .into_iter()
        .chain(names.iter().map(|n| n.to_string()))
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or_else(|| format!("no compiler (${env_var}, {})", names.join(", ")))
}
