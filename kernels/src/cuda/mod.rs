//! The CUDA backend: the reduction and copy kernels of [`source`] (CUDA C++),
//! compiled at run time by NVRTC for the device's architecture, launched through
//! the CUDA driver API.
//!
//! Both libraries are opened with `dlopen` at run time (cudarc's
//! `dynamic-loading`), so nothing CUDA is needed to build or to run without a
//! GPU. Every entry point first checks that the library is present
//! (`is_culib_present`) and that `cuInit` succeeds; otherwise it returns
//! [`KernelError::NoCuda`](crate::KernelError::NoCuda) (driver) or [`KernelError::NoNvrtc`](crate::KernelError::NoNvrtc) (compiler) with
//! the reason, and never panics (cudarc calls also run under `catch_unwind`).
//!
//! Where the libraries come from:
//! * the driver: `libcuda.so.1` from the NVIDIA driver, on the loader path;
//! * NVRTC (CUDA 12 or 13): the file named by `FERROCCL_NVRTC_LIB` (e.g. the
//!   `nvidia-cuda-nvrtc-cu12` wheel's `nvidia/cuda_nvrtc/lib/libnvrtc.so.12`),
//!   else `libnvrtc.so.13`, `libnvrtc.so.12`, then `libnvrtc.so` on the loader
//!   path, then the CUDA toolkits' `lib64` (`$CUDA_HOME`, `/usr/local/cuda*`); its entry points are resolved from that one library (our own
//!   bindings: cudarc's would look for CUDA 12 names only).
//!
//! Which parts need a GPU: everything that touches the driver ([`CudaBackend`],
//! `DeviceBuffer`, `PinnedBuffer`, [`crate::memory_space`] of device memory).
//! NVRTC compilation ([`compile`]) and launch planning ([`plan`]) do not.
//!
//! Without the `cuda` cargo feature the same functions exist and return
//! [`KernelError::NoCuda`](crate::KernelError::NoCuda).

pub mod plan;
pub mod source;

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod guard;
#[cfg(feature = "cuda")]
mod hostflag;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod nvrtc;

#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, VouchedCuda};
#[cfg(feature = "cuda")]
pub use driver::{
    CuMemBuffer, DeviceAttrs, IpcMapping, can_access_peer, cumem_unsupported, current_device, device_attrs,
    device_count, dmabuf_fd_for, driver_info, ipc_get_mem_handle, launch_host_func,
};
#[cfg(feature = "cuda")]
pub(crate) use driver::{classify, ctx_guard, device_attribute, device_backend};
#[cfg(feature = "cuda")]
pub use hostflag::{alloc_host_flags, stream_wait_value32};
#[cfg(feature = "cuda")]
pub use memory::{DeviceBuffer, PinnedBuffer};
#[cfg(feature = "cuda")]
pub use nvrtc::{
    NVRTC_SONAMES, NvrtcCandidate, compile, compile_program, nvrtc_candidates, nvrtc_info, nvrtc_load, search_first,
};

/// Environment variable naming the NVRTC library file to load
/// (`.../nvidia/cuda_nvrtc/lib/libnvrtc.so.12`); when unset, `libnvrtc.so.13`,
/// `libnvrtc.so.12` and `libnvrtc.so` are looked up on the loader path.
pub const NVRTC_LIB_ENV: &str = "FERROCCL_NVRTC_LIB";

/// NVRTC compile options besides the architecture: no FMA contraction (a
/// PreMulSum's multiply and add round separately, as on the CPU), IEEE
/// denormals, C++17.
pub const NVRTC_OPTIONS: [&str; 3] = ["--fmad=false", "--ftz=false", "--std=c++17"];

/// The CUDA driver as this process sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverInfo {
    /// `cuDriverGetVersion`, e.g. 12090 for 12.9.
    pub version: i32,
    /// `cuDeviceGetCount` (at least 1; no device is [`KernelError::NoCuda`](crate::KernelError::NoCuda)).
    pub devices: usize,
}

/// The NVRTC library this process loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvrtcInfo {
    /// `nvrtcVersion`: (major, minor).
    pub version: (i32, i32),
    /// The file the loader mapped (from `dladdr`, symbolic links resolved).
    pub path: Option<std::path::PathBuf>,
    /// The name it was loaded by and why that name was tried, e.g.
    /// `libnvrtc.so.13 (loader path)` or `/x/libnvrtc.so.12 (FERROCCL_NVRTC_LIB)`.
    pub found_by: String,
}

#[cfg(not(feature = "cuda"))]
mod disabled {
    use super::{DriverInfo, NvrtcInfo, source::Unit};
    use crate::KernelError;

    fn off() -> KernelError {
        KernelError::NoCuda("ferroccl-kernels was built without its `cuda` feature".into())
    }

    /// The CUDA driver: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn driver_info() -> Result<DriverInfo, KernelError> {
        Err(off())
    }

    /// CUDA devices: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn device_count() -> Result<usize, KernelError> {
        Err(off())
    }

    /// The current device: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn current_device() -> Result<Option<usize>, KernelError> {
        Err(off())
    }

    /// NVRTC: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn nvrtc_info() -> Result<NvrtcInfo, KernelError> {
        Err(off())
    }

    /// NVRTC: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn nvrtc_load(_path: Option<&std::path::Path>) -> Result<NvrtcInfo, KernelError> {
        Err(off())
    }

    /// Kernel compilation: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn compile(_unit: Unit, _arch: u32) -> Result<std::sync::Arc<str>, KernelError> {
        Err(off())
    }

    /// Kernel compilation: always [`KernelError::NoCuda`](crate::KernelError::NoCuda) in this build.
    pub fn compile_program(_name: &str, _src: &str, _arch: u32) -> Result<String, KernelError> {
        Err(off())
    }
}

#[cfg(not(feature = "cuda"))]
pub use disabled::{compile, compile_program, current_device, device_count, driver_info, nvrtc_info, nvrtc_load};
