//! NVRTC: finding the library, compiling the kernel units, caching the PTX.

use std::collections::HashMap;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cudarc::nvrtc::{CompileError, CompileOptions, sys};

use super::source::{self, Unit};
use super::{NVRTC_LIB_ENV, NVRTC_OPTIONS, NvrtcInfo, guard};
use crate::KernelError;

/// The NVRTC this process loaded (set once, on the first success).
static LOADED: Mutex<Option<NvrtcInfo>> = Mutex::new(None);

/// PTX per (virtual architecture, unit), for the life of the process.
static PTX: Mutex<Option<PtxCache>> = Mutex::new(None);

/// Compiled PTX by (virtual architecture, unit).
type PtxCache = HashMap<(u32, Unit), Arc<str>>;

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

fn no_nvrtc_on_path() -> KernelError {
    KernelError::NoNvrtc(format!(
        "libnvrtc.so.12 (CUDA 12 NVRTC) is not on the loader path and {NVRTC_LIB_ENV} is not set: \
         install the nvidia-cuda-nvrtc-cu12 wheel (pip) and set {NVRTC_LIB_ENV} to its \
         nvidia/cuda_nvrtc/lib/libnvrtc.so.12, or put that directory on LD_LIBRARY_PATH"
    ))
}

/// Loads NVRTC once for the process and returns its version.
///
/// `path` (or else the file named by [`NVRTC_LIB_ENV`]) is opened first with
/// `RTLD_GLOBAL` and kept open; cudarc then finds it by its soname
/// (`libnvrtc.so.12`). Without either, the loader path is searched. After the
/// first success later calls return the same [`NvrtcInfo`] and ignore `path`.
///
/// Errors: [`KernelError::NoNvrtc`] when the file cannot be opened, when no CUDA
/// 12 NVRTC is found, or when the NVRTC cudarc resolved is not the file named
/// (another `libnvrtc.so` earlier on the loader path).
pub fn nvrtc_load(path: Option<&Path>) -> Result<NvrtcInfo, KernelError> {
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(info) = loaded.as_ref() {
        return Ok(info.clone());
    }
    let path: Option<PathBuf> = match path {
        Some(p) => Some(p.to_path_buf()),
        None => std::env::var_os(NVRTC_LIB_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    };
    let mut named_version = None;
    if let Some(p) = &path {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: opening NVRTC runs its initialisers, which have no
        // preconditions; the handle is kept (never closed) so that the symbols
        // cudarc resolves stay valid for the life of the process.
        let lib = unsafe { Library::open(Some(p), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| {
            KernelError::NoNvrtc(format!(
                "cannot load {} (from {NVRTC_LIB_ENV} or the caller): {e}",
                p.display()
            ))
        })?;
        // SAFETY: `nvrtcVersion` has this signature in every NVRTC (nvrtc.h).
        let version = unsafe { lib.get::<VersionFn>(b"nvrtcVersion") }.map_err(|e| {
            KernelError::NoNvrtc(format!(
                "{} is not NVRTC (no nvrtcVersion): {}",
                p.display(),
                with_sources(&e)
            ))
        })?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        unsafe { version(&mut major, &mut minor) };
        named_version = Some((major, minor));
        std::mem::forget(lib);
    }
    // SAFETY: `is_culib_present` only tries to dlopen candidate names.
    let present =
        guard::quiet("nvrtc is_culib_present", || unsafe { sys::is_culib_present() }).map_err(KernelError::NoNvrtc)?;
    if !present {
        return Err(match (&path, named_version) {
            (Some(p), Some((ma, mi))) => KernelError::NoNvrtc(format!(
                "{} (NVRTC {ma}.{mi}) was loaded but is not a CUDA 12 NVRTC (soname libnvrtc.so.12), which this build's bindings (cudarc, cuda-12090) look for",
                p.display()
            )),
            _ => no_nvrtc_on_path(),
        });
    }
    let (mut major, mut minor) = (0, 0);
    guard::call("nvrtcVersion", || {
        // SAFETY: NVRTC is present (checked above); two valid out-pointers.
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result()
    })?;
    if let (Some(p), Some(named)) = (&path, named_version)
        && named != (major, minor)
    {
        return Err(KernelError::NoNvrtc(format!(
            "{} is NVRTC {}.{} but the bindings resolved NVRTC {major}.{minor}: another libnvrtc earlier on the loader path (an unversioned libnvrtc.so?) takes precedence",
            p.display(),
            named.0,
            named.1
        )));
    }
    let info = NvrtcInfo {
        version: (major, minor),
        path,
    };
    *loaded = Some(info.clone());
    Ok(info)
}

/// An error and its sources (libloading puts `dlerror`'s text in the source).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// [`nvrtc_load`] with the library from [`NVRTC_LIB_ENV`] or the loader path.
pub fn nvrtc_info() -> Result<NvrtcInfo, KernelError> {
    nvrtc_load(None)
}

/// Compiles CUDA C++ `src` to PTX for `compute_{arch}` (e.g. 90) with the
/// kernels' options ([`NVRTC_OPTIONS`]); `name` names the program in errors.
/// Not cached. Errors: [`KernelError::NoNvrtc`], or [`KernelError::Compile`]
/// with NVRTC's log.
pub fn compile_program(name: &str, src: &str, arch: u32) -> Result<String, KernelError> {
    nvrtc_info()?;
    let mut options = vec![format!("--gpu-architecture=compute_{arch}")];
    options.extend(NVRTC_OPTIONS.iter().map(|s| s.to_string()));
    let opts = CompileOptions {
        options,
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    let compiled = guard::quiet("nvrtcCompileProgram", || {
        cudarc::nvrtc::compile_ptx_with_opts(src, opts)
    })
    .map_err(|m| KernelError::Compile {
        program: name.to_string(),
        arch,
        log: m,
    })?;
    match compiled {
        Ok(ptx) => guard::quiet("nvrtcGetPTX", || ptx.to_src()).map_err(|m| KernelError::Compile {
            program: name.to_string(),
            arch,
            log: m,
        }),
        Err(CompileError::CompileError { nvrtc, log, .. }) => Err(KernelError::Compile {
            program: name.to_string(),
            arch,
            log: format!("{nvrtc:?}: {}", log.to_string_lossy().trim()),
        }),
        Err(e) => Err(KernelError::Compile {
            program: name.to_string(),
            arch,
            log: format!("{e:?}"),
        }),
    }
}

/// The PTX of `unit` for `compute_{arch}`, compiled on first use and cached for
/// the life of the process (NCCL compiles its kernels ahead of time; ferroccl
/// compiles each unit once per architecture, on demand).
pub fn compile(unit: Unit, arch: u32) -> Result<Arc<str>, KernelError> {
    if let Some(p) = PTX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&(arch, unit)))
    {
        return Ok(p.clone());
    }
    // Compiled outside the lock: another thread may compile the same unit
    // meanwhile; both results are identical and the first stored wins.
    let ptx: Arc<str> = compile_program(&unit.to_string().replace(' ', "_"), &source::program(&[unit]), arch)?.into();
    let mut g = PTX.lock().unwrap_or_else(|e| e.into_inner());
    Ok(g.get_or_insert_with(HashMap::new)
        .entry((arch, unit))
        .or_insert(ptx)
        .clone())
}
