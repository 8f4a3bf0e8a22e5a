//! NVRTC: finding the library, compiling the kernel units, caching the PTX.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use super::source::{self, Unit};
use super::{NVRTC_LIB_ENV, NVRTC_OPTIONS, NvrtcInfo};
use crate::KernelError;

/// The sonames searched on the loader path, newest CUDA first, then the
/// toolkit's unversioned development link.
pub const NVRTC_SONAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// The NVRTC this process loaded (set once, on the first success).
static LOADED: Mutex<Option<(NvrtcInfo, &'static Api)>> = Mutex::new(None);

/// PTX per (virtual architecture, unit), for the life of the process.
static PTX: Mutex<Option<PtxCache>> = Mutex::new(None);

/// Compiled PTX by (virtual architecture, unit).
type PtxCache = HashMap<(u32, Unit), Arc<str>>;

type Prog = *mut c_void;

/// The NVRTC entry points used (`nvrtc.h`; the same signatures in CUDA 12
/// and 13), resolved from one library.
struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    create: unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Prog) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
}

/// One place to look for NVRTC, in search order ([`nvrtc_candidates`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvrtcCandidate {
    /// What `dlopen` is given: a file path, or a soname for the loader path.
    pub name: PathBuf,
    /// Why it is tried (`FERROCCL_NVRTC_LIB`, `the caller`, `loader path`).
    pub from: &'static str,
}

/// Where NVRTC is looked for, in order: the file `path` the caller names, else
/// the file named by [`NVRTC_LIB_ENV`] (only that one: a file named on purpose
/// that fails to load is an error, not a reason to load another), else
/// [`NVRTC_SONAMES`] on the loader path (`libnvrtc.so.13`, `libnvrtc.so.12`,
/// `libnvrtc.so`), then `lib64/libnvrtc.so.13` and `lib64/libnvrtc.so.12` of
/// each CUDA toolkit directory in `toolkits` ([`cuda_toolkit_dirs`]: a toolkit
/// installed but not on the loader path, as `/usr/local/cuda-13.0` usually is).
pub fn nvrtc_candidates(
    path: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    toolkits: &[PathBuf],
) -> Vec<NvrtcCandidate> {
    if let Some(p) = path {
        return vec![NvrtcCandidate {
            name: p.to_path_buf(),
            from: "the caller",
        }];
    }
    if let Some(v) = env.filter(|v| !v.is_empty()) {
        return vec![NvrtcCandidate {
            name: PathBuf::from(v),
            from: NVRTC_LIB_ENV,
        }];
    }
    let mut c: Vec<NvrtcCandidate> = NVRTC_SONAMES
        .iter()
        .map(|s| NvrtcCandidate {
            name: PathBuf::from(s),
            from: "loader path",
        })
        .collect();
    for t in toolkits {
        for so in &NVRTC_SONAMES[..2] {
            c.push(NvrtcCandidate {
                name: t.join("lib64").join(so),
                from: "CUDA toolkit",
            });
        }
    }
    c
}

/// CUDA toolkit directories, in the order NVRTC is looked for in them:
/// `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, then every
/// `/usr/local/cuda-X.Y`, newest first (those that exist).
pub fn cuda_toolkit_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()).map(PathBuf::from))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda"));
    let mut versioned: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/local")
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                let v = name.strip_prefix("cuda-")?;
                let key: Vec<u32> = v.split('.').map(|x| x.parse().ok()).collect::<Option<_>>()?;
                Some((key, e.path()))
            })
            .collect()
        })
        .unwrap_or_default();
    versioned.sort_by(|a, b| b.0.cmp(&a.0));
    dirs.extend(versioned.into_iter().map(|(_, p)| p));
    let mut seen = Vec::new();
    dirs.retain(|d| {
        d.is_dir() && !seen.contains(d) && {
            seen.push(d.clone());
            true
        }
    });
    dirs
}

/// Tries `candidates` in order with `open`; the first success and its index,
/// or every failure (`name: why`).
pub fn search_first<T>(
    candidates: &[NvrtcCandidate],
    mut open: impl FnMut(&NvrtcCandidate) -> Result<T, String>,
) -> Result<(T, usize), Vec<String>> {
    let mut why = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        match open(c) {
            Ok(t) => return Ok((t, i)),
            Err(e) => why.push(format!("{} ({}): {e}", c.name.display(), c.from)),
        }
    }
    Err(why)
}

/// Opens one NVRTC library and resolves its entry points; the library stays
/// loaded for the life of the process.
fn open_api(c: &NvrtcCandidate) -> Result<(&'static Api, (i32, i32), PathBuf), String> {
    // SAFETY: opening NVRTC runs its initialisers, which have no
    // preconditions; the handle is leaked (never closed) so that the
    // resolved entry points stay valid for the life of the process.
    let lib = unsafe { Library::open(Some(&c.name), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| with_sources(&e))?;
    let lib: &'static Library = Box::leak(Box::new(lib));
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol has the signature of the field it fills (nvrtc.h).
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("not NVRTC (no {}): {}", $name, with_sources(&e)))?
        };
    }
    let api: &'static Api = Box::leak(Box::new(Api {
        version: sym!("nvrtcVersion"),
        create: sym!("nvrtcCreateProgram"),
        compile: sym!("nvrtcCompileProgram"),
        log_size: sym!("nvrtcGetProgramLogSize"),
        log: sym!("nvrtcGetProgramLog"),
        ptx_size: sym!("nvrtcGetPTXSize"),
        ptx: sym!("nvrtcGetPTX"),
        destroy: sym!("nvrtcDestroyProgram"),
        error_string: sym!("nvrtcGetErrorString"),
    }));
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    let r = unsafe { (api.version)(&mut major, &mut minor) };
    if r != 0 {
        return Err(format!("nvrtcVersion failed with {r}"));
    }
    if major < 12 {
        return Err(format!(
            "NVRTC {major}.{minor} is too old (CUDA 12 or 13 NVRTC is needed for the kernels' C++17)"
        ));
    }
    Ok((
        api,
        (major, minor),
        loaded_file(api.version as *const c_void).unwrap_or_else(|| c.name.clone()),
    ))
}

/// The file the loader mapped the symbol at `addr` from (`dladdr`).
fn loaded_file(addr: *const c_void) -> Option<PathBuf> {
    // SAFETY: an all-zero Dl_info is valid (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` is a function of a loaded library; one out-struct.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set a NUL-terminated path owned by the loader.
    let s = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    std::fs::canonicalize(&s).ok().or(Some(PathBuf::from(s)))
}

/// Loads NVRTC once for the process and returns which one.
///
/// Searched in [`nvrtc_candidates`]'s order: `path`, else the file named by
/// [`NVRTC_LIB_ENV`], else `libnvrtc.so.13`, `libnvrtc.so.12` and `libnvrtc.so`
/// on the loader path. NVRTC 12 and 13 both work (the entry points used are the
/// same). After the first success later calls return the same [`NvrtcInfo`] and
/// ignore `path`.
///
/// Errors: [`KernelError::NoNvrtc`] naming every place tried and why it failed.
pub fn nvrtc_load(path: Option<&Path>) -> Result<NvrtcInfo, KernelError> {
    load(path).map(|(i, _)| i)
}

fn load(path: Option<&Path>) -> Result<(NvrtcInfo, &'static Api), KernelError> {
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = loaded.as_ref() {
        return Ok(l.clone());
    }
    let env = std::env::var_os(NVRTC_LIB_ENV);
    let cands = nvrtc_candidates(path, env.as_deref(), &cuda_toolkit_dirs());
    let ((api, version, file), i) = search_first(&cands, open_api).map_err(|why| {
        KernelError::NoNvrtc(format!(
            "no usable NVRTC (CUDA 12 or 13): {}. Install the CUDA toolkit's NVRTC (cuda-nvrtc-13-0 or -12-x) \
             or the nvidia-cuda-nvrtc wheel (pip) and set {NVRTC_LIB_ENV} to its nvidia/cu13/lib/libnvrtc.so.13 \
             (or nvidia/cuda_nvrtc/lib/libnvrtc.so.12), or put that directory on LD_LIBRARY_PATH",
            why.join("; ")
        ))
    })?;
    let info = NvrtcInfo {
        version,
        path: Some(file),
        found_by: format!("{} ({})", cands[i].name.display(), cands[i].from),
    };
    *loaded = Some((info.clone(), api));
    Ok((info, api))
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
    let (_, api) = load(None)?;
    let fail = |log: String| KernelError::Compile {
        program: name.to_string(),
        arch,
        log,
    };
    let err = |r: c_int| {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string.
        let p = unsafe { (api.error_string)(r) };
        if p.is_null() {
            format!("NVRTC error {r}")
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let csrc = CString::new(src).map_err(|_| fail("the source holds a NUL byte".into()))?;
    let cname = CString::new(format!("{name}.cu")).map_err(|_| fail("the name holds a NUL byte".into()))?;
    let mut options = vec![format!("--gpu-architecture=compute_{arch}")];
    options.extend(NVRTC_OPTIONS.iter().map(|s| s.to_string()));
    let copts: Vec<CString> = options
        .into_iter()
        .map(|o| CString::new(o).expect("options hold no NUL"))
        .collect();
    let optp: Vec<*const c_char> = copts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: Prog = std::ptr::null_mut();
    // SAFETY: NUL-terminated source and name; no headers.
    let r = unsafe {
        (api.create)(
            &mut prog,
            csrc.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(fail(format!("nvrtcCreateProgram: {}", err(r))));
    }
    let result = (|| {
        // SAFETY: a live program; `optp` holds `optp.len()` NUL-terminated options.
        let r = unsafe { (api.compile)(prog, optp.len() as c_int, optp.as_ptr()) };
        if r != 0 {
            let mut n = 0usize;
            let mut log = String::new();
            // SAFETY: a live program; one out-pointer; then a buffer of the size given.
            if unsafe { (api.log_size)(prog, &mut n) } == 0 && n > 0 {
                let mut buf = vec![0u8; n];
                // SAFETY: `buf` holds the `n` bytes NVRTC asked for.
                if unsafe { (api.log)(prog, buf.as_mut_ptr().cast()) } == 0 {
                    log = String::from_utf8_lossy(&buf).trim_end_matches('\0').trim().to_string();
                }
            }
            return Err(fail(format!("{}: {log}", err(r))));
        }
        let mut n = 0usize;
        // SAFETY: a live, compiled program; one out-pointer.
        let r = unsafe { (api.ptx_size)(prog, &mut n) };
        if r != 0 {
            return Err(fail(format!("nvrtcGetPTXSize: {}", err(r))));
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` holds the `n` bytes NVRTC asked for.
        let r = unsafe { (api.ptx)(prog, buf.as_mut_ptr().cast()) };
        if r != 0 {
            return Err(fail(format!("nvrtcGetPTX: {}", err(r))));
        }
        while buf.last() == Some(&0) {
            buf.pop();
        }
        String::from_utf8(buf).map_err(|_| fail("NVRTC returned PTX that is not UTF-8".into()))
    })();
    // SAFETY: created above, destroyed once.
    unsafe { (api.destroy)(&mut prog) };
    result
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(c: &[NvrtcCandidate]) -> Vec<String> {
        c.iter().map(|c| format!("{} {}", c.name.display(), c.from)).collect()
    }

    /// Without an override: CUDA 13's soname, then 12's, then the unversioned link.
    #[test]
    fn search_order_is_13_then_12_then_unversioned() {
        assert_eq!(
            names(&nvrtc_candidates(None, None, &[])),
            [
                "libnvrtc.so.13 loader path",
                "libnvrtc.so.12 loader path",
                "libnvrtc.so loader path"
            ]
        );
        // An empty variable is no override.
        assert_eq!(nvrtc_candidates(None, Some("".as_ref()), &[]).len(), 3);
    }

    /// After the loader path: each toolkit's lib64, CUDA 13 then 12.
    #[test]
    fn toolkits_follow_the_loader_path() {
        let t = [
            PathBuf::from("/usr/local/cuda-13.0"),
            PathBuf::from("/usr/local/cuda-12.9"),
        ];
        assert_eq!(
            names(&nvrtc_candidates(None, None, &t))[3..],
            [
                "/usr/local/cuda-13.0/lib64/libnvrtc.so.13 CUDA toolkit",
                "/usr/local/cuda-13.0/lib64/libnvrtc.so.12 CUDA toolkit",
                "/usr/local/cuda-12.9/lib64/libnvrtc.so.13 CUDA toolkit",
                "/usr/local/cuda-12.9/lib64/libnvrtc.so.12 CUDA toolkit"
            ]
        );
    }

    /// The variable, or a path from the caller, is the only candidate.
    #[test]
    fn an_override_is_the_only_candidate() {
        assert_eq!(
            names(&nvrtc_candidates(
                None,
                Some("/w/libnvrtc.so.12".as_ref()),
                &[PathBuf::from("/t")]
            )),
            [format!("/w/libnvrtc.so.12 {NVRTC_LIB_ENV}")]
        );
        assert_eq!(
            names(&nvrtc_candidates(
                Some(Path::new("/c/x.so")),
                Some("/w/y.so".as_ref()),
                &[]
            )),
            ["/c/x.so the caller"]
        );
    }

    /// The first candidate that opens wins: a machine with only NVRTC 12 finds
    /// it after 13 fails; every failure is named when none opens.
    #[test]
    fn the_first_that_opens_wins_and_failures_are_named() {
        let c = nvrtc_candidates(None, None, &[]);
        let only12 = |c: &NvrtcCandidate| {
            if c.name == Path::new("libnvrtc.so.12") {
                Ok(12)
            } else {
                Err("cannot open shared object file".to_string())
            }
        };
        assert_eq!(search_first(&c, only12), Ok((12, 1)));
        let both = |c: &NvrtcCandidate| {
            c.name
                .to_str()
                .unwrap()
                .strip_prefix("libnvrtc.so.")
                .map(|v| v.to_string())
                .ok_or("no".to_string())
        };
        assert_eq!(search_first(&c, both), Ok(("13".to_string(), 0)));
        let none = search_first(&c, |_| Err::<(), _>("missing".to_string())).unwrap_err();
        assert_eq!(none.len(), 3);
        assert!(none[2].starts_with("libnvrtc.so (loader path): missing"), "{none:?}");
    }

    /// A real dlopen of a file that does not exist fails with its name.
    #[test]
    fn a_missing_file_is_named() {
        let c = nvrtc_candidates(Some(Path::new("/nonexistent/libnvrtc.so.13")), None, &[]);
        let e = search_first(&c, open_api).map(|_| ()).unwrap_err();
        assert!(e[0].contains("/nonexistent/libnvrtc.so.13 (the caller)"), "{e:?}");
    }
}
