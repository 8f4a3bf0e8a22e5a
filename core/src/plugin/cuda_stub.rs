//! CUDA runtime symbols for profiler plugins that expect the host to provide them.
//!
//! NCCL's example profiler (`plugins/profiler/example` in NVIDIA/nccl) calls
//! `cudaEventCreateWithFlags`, `cudaEventRecord`, `cudaEventQuery`,
//! `cudaEventElapsedTime` and `cudaEventDestroy` but is linked with `-shared`
//! only: under NCCL it loads because the application (PyTorch, nccl-tests) has
//! `libcudart.so` in the global symbol scope; otherwise `dlopen(RTLD_NOW)` fails
//! and NCCL runs without a profiler (reference `docs/reference/nccl-graph-tuning.md` §6.8).
//!
//! A ferroccl process usually has no CUDA runtime at all. So when a profiler
//! plugin fails to open with `undefined symbol: <one of the names below>` and no
//! `cudaEventCreate` is visible in the process ([`cuda_runtime_loaded`]), the host
//! loads a small embedded stand-in library `RTLD_GLOBAL` ([`provide`]) and opens
//! the plugin again. Nothing else ever loads it: a process that has a CUDA runtime
//! keeps it, and net/tuner plugins are never affected.
//!
//! **Behaviour of the stand-in** (`core/csrc/cudart_stub.c`): what the real
//! runtime gives on a machine without a GPU. Every call returns
//! `cudaErrorNoDevice` (100) and creates nothing (events NULL, elapsed time 0,
//! `cudaGetErrorString` says so). A profiler therefore never sees GPU timing
//! complete — what NCCL's users see when no GPU work is timed: the example only
//! creates CUDA events for copy-engine collectives, which a host without GPUs
//! never runs, and its other events are timed on the CPU.

use std::ffi::{CStr, c_void};
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::OnceLock;

/// The stand-in library, built from `csrc/cudart_stub.c` by `build.rs`.
static STUB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libferroccl-cudart-stub.so"));

/// The entry points the stand-in provides (`cudaError_t` functions unless noted).
pub const PROVIDED: [&str; 13] = [
    "cudaEventCreate",
    "cudaEventCreateWithFlags",
    "cudaEventRecord",
    "cudaEventRecordWithFlags",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaEventElapsedTime",
    "cudaEventElapsedTime_v2",
    "cudaEventDestroy",
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaGetErrorString",
    "cudaGetErrorName",
];

/// `cudaErrorNoDevice`: what every stand-in call returns.
pub const CUDA_ERROR_NO_DEVICE: i32 = 100;

/// Whether `dlerror` text says a library failed for want of a symbol the
/// stand-in provides (`... undefined symbol: cudaEventQuery`).
pub fn needs_stub(dlerror: &str) -> bool {
    dlerror
        .split("undefined symbol: ")
        .nth(1)
        .map(|rest| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
        })
        .is_some_and(|sym| PROVIDED.contains(&sym))
}

/// Whether a CUDA runtime (or the stand-in) is in the global symbol scope.
pub fn cuda_runtime_loaded() -> bool {
    let name: &CStr = c"cudaEventCreate";
    // SAFETY: dlsym with RTLD_DEFAULT only looks the name up.
    let p: *mut c_void = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    !p.is_null()
}

/// What [`provide`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provided {
    /// A CUDA runtime was already loaded; nothing was done.
    RuntimePresent,
    /// The stand-in is loaded (now or by an earlier call).
    StandIn,
}

/// Makes the `cudaEvent*` symbols available to libraries loaded from now on:
/// nothing if a CUDA runtime is loaded, else the embedded stand-in, loaded once
/// with `RTLD_NOW | RTLD_GLOBAL` from an anonymous in-memory file (`memfd`).
/// Errors name the step that failed.
pub fn provide() -> Result<Provided, String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    if LOADED.get().is_none() && cuda_runtime_loaded() {
        return Ok(Provided::RuntimePresent);
    }
    LOADED.get_or_init(load_stand_in).clone().map(|()| Provided::StandIn)
}

fn load_stand_in() -> Result<(), String> {
    let name: &CStr = c"ferroccl-cudart-stub";
    // SAFETY: memfd_create with a valid name; the result is checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "memfd_create for the CUDA runtime stand-in failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` is a new descriptor owned by nobody else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(STUB)
        .map_err(|e| format!("writing the CUDA runtime stand-in to a memfd failed: {e}"))?;
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
    // SAFETY: loading a library we built (only constructors-free C functions);
    // RTLD_GLOBAL puts its symbols in the global scope for later dlopens. The
    // handle is kept for the life of the process (never dlclosed).
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    drop(file); // the mapping stays; the descriptor is no longer needed
    if h.is_null() {
        // SAFETY: dlerror returns a thread-local C string or NULL.
        let e = unsafe { libc::dlerror() };
        let msg = if e.is_null() {
            "unknown error".to_owned()
        } else {
            // SAFETY: non-NULL dlerror text is NUL-terminated.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        };
        return Err(format!("loading the CUDA runtime stand-in failed: {msg}"));
    }
    tracing::info!(target: "ferroccl::plugin",
        "PROFILER/Plugin: no CUDA runtime is loaded; providing cudaEvent* from ferroccl's stand-in \
         (every call returns cudaErrorNoDevice: no GPU work is timed)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_missing_cuda_event_symbols() {
        assert!(needs_stub(
            "/x/libnccl-profiler-example.so: undefined symbol: cudaEventQuery"
        ));
        assert!(needs_stub(
            "libp.so: undefined symbol: cudaEventElapsedTime_v2, version foo"
        ));
        assert!(!needs_stub("libp.so: undefined symbol: cudaMalloc"));
        assert!(!needs_stub("libp.so: cannot open shared object file"));
    }
}
