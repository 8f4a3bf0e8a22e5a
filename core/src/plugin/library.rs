//! Opening plugin libraries: NCCL 2.30.7's `openPluginLib()` (reference §5.1)
//! plus ferroccl's search directories, and the never-`dlclose`-after-`init` rule.

use std::ffi::{CStr, c_void};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use super::options::LoadOptions;

/// An open plugin library.
///
/// **Unloading rule.** A library is `dlclose`d when its last `PluginLibrary` is
/// dropped *only if no plugin function was ever called in it* (it failed before
/// `init`: no symbol, name mismatch, version cap). As soon as the host is about to
/// call any `init`, the library is [pinned](PluginLibrary::pin): it then stays
/// loaded for the life of the process (like NCCL with
/// `NCCL_NET_PLUGIN_REF_COUNT=1`), because a plugin may have started threads,
/// registered `atexit` handlers or handed out pointers into its own code (its
/// vtable, property strings) that outlive any refcount the host can see.
#[derive(Debug)]
pub struct PluginLibrary {
    lib: ManuallyDrop<Library>,
    opened_as: String,
    pinned: AtomicBool,
}

// SAFETY: a `dlopen` handle may be used from any thread; `dlsym` is thread-safe on
// the platforms ferroccl supports (glibc, musl).
unsafe impl Send for PluginLibrary {}
// SAFETY: as above; `&PluginLibrary` only allows `dlsym` and setting the pin flag.
unsafe impl Sync for PluginLibrary {}

impl PluginLibrary {
    /// `dlopen(file, RTLD_NOW | RTLD_LOCAL)`; the error is the `dlerror()` text.
    pub fn open(file: &str) -> Result<Self, String> {
        if file.contains('\0') {
            return Err(format!("{file:?}: file name contains a NUL byte"));
        }
        // SAFETY: loading a library runs its initialisers; that is the point of a
        // plugin host, and NCCL does exactly the same.
        let r = unsafe { Library::open(Some(file), RTLD_NOW | RTLD_LOCAL) };
        match r {
            Ok(lib) => Ok(PluginLibrary {
                lib: ManuallyDrop::new(lib),
                opened_as: file.to_owned(),
                pinned: false.into(),
            }),
            Err(e) => Err(dl_error_text(&e)),
        }
    }

    /// `dlopen(NULL, RTLD_NOW | RTLD_LOCAL)`: the main program and what it links
    /// (NCCL's `STATIC_PLUGIN`).
    pub fn open_main_program() -> Result<Self, String> {
        // SAFETY: opening the main program loads nothing new.
        let r = unsafe { Library::open(None::<&str>, RTLD_NOW | RTLD_LOCAL) };
        match r {
            Ok(lib) => Ok(PluginLibrary {
                lib: ManuallyDrop::new(lib),
                opened_as: "<main program>".into(),
                pinned: false.into(),
            }),
            Err(e) => Err(dl_error_text(&e)),
        }
    }

    /// What was passed to `dlopen` (a bare name, a path, or `<main program>`).
    pub fn opened_as(&self) -> &str {
        &self.opened_as
    }

    /// The address of data symbol `name`, or `None` if the library does not export it.
    pub fn symbol(&self, name: &CStr) -> Option<*const c_void> {
        // SAFETY: the symbol is only turned into an address, never called or read here.
        let s = unsafe { self.lib.get::<*const c_void>(name) }.ok()?;
        let p = s.into_raw() as *const c_void;
        (!p.is_null()).then_some(p)
    }

    /// Keeps the library loaded for the life of the process (call before the first
    /// `init` into it; see the type docs).
    pub fn pin(&self) {
        self.pinned.store(true, Ordering::Release);
    }

    /// Whether [`PluginLibrary::pin`] was called.
    pub fn is_pinned(&self) -> bool {
        self.pinned.load(Ordering::Acquire)
    }

    /// The file the object containing `addr` was loaded from (`dladdr`), e.g. the
    /// resolved path of a library opened by bare name.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // dladdr only looks the address up; it never reads through it
    pub fn file_of(addr: *const c_void) -> Option<PathBuf> {
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
        // SAFETY: `dladdr` only inspects the address and fills `info`.
        let ok = unsafe { libc::dladdr(addr, info.as_mut_ptr()) };
        if ok == 0 {
            return None;
        }
        // SAFETY: `dladdr` succeeded, so `info` is initialised.
        let info = unsafe { info.assume_init() };
        if info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: `dli_fname` is a NUL-terminated string owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
        let p = PathBuf::from(name);
        Some(std::fs::canonicalize(&p).unwrap_or(p))
    }
}

impl Drop for PluginLibrary {
    fn drop(&mut self) {
        if !self.is_pinned() {
            // SAFETY: dropped exactly once, here; no plugin code was ever run (the
            // library is not pinned), so nothing of it can still execute.
            unsafe { ManuallyDrop::drop(&mut self.lib) };
        }
    }
}

fn dl_error_text(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(s) => s.to_string(),
        None => e.to_string(),
    }
}

/// Outcome of one `dlopen` attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// The library was opened.
    Opened,
    /// No such file (on the loader path or at that path).
    NotFound(String),
    /// The file exists but `dlopen` failed; the `dlerror()` text.
    Failed(String),
}

/// One file name tried while resolving a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAttempt {
    /// What was passed to `dlopen` (or checked in a search directory).
    pub file: String,
    /// Whether it came from ferroccl's search directories (an extension to NCCL).
    pub from_search_dir: bool,
    /// The outcome.
    pub result: AttemptResult,
}

/// Result of resolving one requested name.
#[derive(Debug)]
pub struct OpenOutcome {
    /// The library, if some attempt opened one.
    pub lib: Option<PluginLibrary>,
    /// Every attempt, in order.
    pub attempts: Vec<OpenAttempt>,
}

impl OpenOutcome {
    /// Every file tried, comma separated, each with why it did not open:
    /// `a.so (not found), /x/b.so (dlopen failed: …)`.
    pub fn tried(&self) -> String {
        let files: Vec<String> = self
            .attempts
            .iter()
            .map(|a| match &a.result {
                AttemptResult::NotFound(_) => format!("{} (not found)", a.file),
                AttemptResult::Failed(e) => format!("{} (dlopen failed: {e})", a.file),
                AttemptResult::Opened => a.file.clone(),
            })
            .collect();
        files.join(", ")
    }

    /// The first "found but failed" attempt (file name and dlerror text).
    pub fn failure(&self) -> Option<(&str, &str)> {
        self.attempts.iter().find_map(|a| match &a.result {
            AttemptResult::Failed(e) => Some((a.file.as_str(), e.as_str())),
            _ => None,
        })
    }
}

/// Whether `name` selects the main program (NCCL: `strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0`).
pub fn is_static_plugin(name: &str) -> bool {
    !name.is_empty() && name.len() <= "STATIC_PLUGIN".len() && "STATIC_PLUGIN"[..name.len()].eq_ignore_ascii_case(name)
}

/// Whether NCCL's second try `<prefix>-<name>.so` applies to `name` (non-empty,
/// no `/`, not of the form `lib*.so`).
pub fn wants_prefixed_retry(name: &str) -> bool {
    !(name.is_empty() || name.contains('/') || (name.starts_with("lib") && name.ends_with(".so")))
}

/// Directories searched after the dynamic loader: `FERROCCL_PLUGIN_PATH` entries,
/// then (if enabled) the directory of the running executable and its parent.
pub fn search_dirs(opts: &LoadOptions) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = opts.plugin_path.clone();
    if opts.search_exe_dirs
        && let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        let parent = dir.parent().map(Path::to_path_buf);
        dirs.push(dir);
        dirs.extend(parent);
    }
    let mut seen = Vec::new();
    dirs.retain(|d| {
        let fresh = !seen.contains(d);
        if fresh {
            seen.push(d.clone());
        }
        fresh
    });
    dirs
}

/// Classifies a `dlopen` failure: a "No such file" about the file itself means
/// not found; anything else (including a missing *dependency*) means the file was
/// found but could not be loaded.
fn classify(file: &str, dlerror: String) -> AttemptResult {
    let about_itself = dlerror.starts_with(&format!("{file}:"));
    let missing = dlerror.contains("No such file or directory");
    let path_missing = file.contains('/') && !Path::new(file).exists();
    if path_missing || (about_itself && missing) {
        AttemptResult::NotFound(dlerror)
    } else {
        AttemptResult::Failed(dlerror)
    }
}

fn try_open(file: &str, from_search_dir: bool, attempts: &mut Vec<OpenAttempt>) -> Option<PluginLibrary> {
    match PluginLibrary::open(file) {
        Ok(lib) => {
            attempts.push(OpenAttempt {
                file: file.to_owned(),
                from_search_dir,
                result: AttemptResult::Opened,
            });
            Some(lib)
        }
        Err(e) => {
            attempts.push(OpenAttempt {
                file: file.to_owned(),
                from_search_dir,
                result: classify(file, e),
            });
            None
        }
    }
}

/// Looks for the first existing `dir/name` over `dirs` × `names` and opens it.
/// Returns `None` when no such file exists; stops at the first existing file
/// whether it opens or not (as the dynamic loader would).
fn open_from_dirs(
    dirs: &[PathBuf],
    names: &[String],
    attempts: &mut Vec<OpenAttempt>,
) -> Option<Option<PluginLibrary>> {
    for dir in dirs {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                let s = p.to_string_lossy().into_owned();
                return Some(try_open(&s, true, attempts));
            }
        }
    }
    None
}

/// The file name with `-` replaced by `_` (cargo's output name), if different.
fn cargo_name(n: &str) -> Option<String> {
    let c = n.replace('-', "_");
    (c != n).then_some(c)
}

/// Opens the library for `requested` as NCCL 2.30.7's `openPluginLib()` does
/// (reference §5.1), with `prefix` such as `libnccl-net`:
///
/// 1. `requested` itself, or `<prefix>.so` when empty; a case-insensitive prefix
///    of `STATIC_PLUGIN` opens the main program;
/// 2. if that fails and `requested` is non-empty, has no `/` and is not `lib*.so`:
///    `<prefix>-<requested>.so`;
/// 3. ferroccl extension, only when every try was "not found" and the names are
///    bare: the same file names (and their cargo spelling with `_`) in
///    [`search_dirs`]. Such a hit is logged at INFO.
pub fn open_plugin_lib(requested: &str, prefix: &str, dirs: &[PathBuf]) -> OpenOutcome {
    let mut attempts = Vec::new();
    let first = if requested.is_empty() {
        format!("{prefix}.so")
    } else {
        requested.to_owned()
    };
    if is_static_plugin(&first) {
        let lib = match PluginLibrary::open_main_program() {
            Ok(l) => {
                attempts.push(OpenAttempt {
                    file: first,
                    from_search_dir: false,
                    result: AttemptResult::Opened,
                });
                Some(l)
            }
            Err(e) => {
                attempts.push(OpenAttempt {
                    file: first,
                    from_search_dir: false,
                    result: AttemptResult::Failed(e),
                });
                None
            }
        };
        return OpenOutcome { lib, attempts };
    }
    let mut names = vec![first.clone()];
    if let Some(lib) = try_open(&first, false, &mut attempts) {
        return OpenOutcome {
            lib: Some(lib),
            attempts,
        };
    }
    if wants_prefixed_retry(requested) {
        let second = format!("{prefix}-{requested}.so");
        names.push(second.clone());
        if let Some(lib) = try_open(&second, false, &mut attempts) {
            return OpenOutcome {
                lib: Some(lib),
                attempts,
            };
        }
    }
    let all_missing = attempts.iter().all(|a| matches!(a.result, AttemptResult::NotFound(_)));
    if all_missing && !first.contains('/') {
        let mut with_cargo = names.clone();
        with_cargo.extend(names.iter().filter_map(|n| cargo_name(n)));
        match open_from_dirs(dirs, &with_cargo, &mut attempts) {
            Some(Some(lib)) => {
                tracing::info!(
                    target: "ferroccl::plugin",
                    "'{requested}' is not on the dynamic loader's path; loaded {} from a ferroccl plugin directory",
                    lib.opened_as()
                );
                return OpenOutcome {
                    lib: Some(lib),
                    attempts,
                };
            }
            Some(None) => {}
            None => attempts.push(OpenAttempt {
                file: format!(
                    "{} in [{}]",
                    with_cargo.join(" | "),
                    dirs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                from_search_dir: true,
                result: AttemptResult::NotFound("no such file in the ferroccl plugin directories".into()),
            }),
        }
    }
    OpenOutcome { lib: None, attempts }
}

/// Opens an in-tree plugin (`short` = `"ib"` or `"socket"`): `libnccl-net-<short>.so`
/// or cargo's `libnccl_net_<short>.so` in [`search_dirs`] first, then
/// `libnccl-net-<short>.so` on the dynamic loader's path (`LD_LIBRARY_PATH`, …).
pub fn open_in_tree(short: &str, dirs: &[PathBuf]) -> OpenOutcome {
    let mut attempts = Vec::new();
    let file = format!("libnccl-net-{short}.so");
    let names = vec![file.clone(), format!("libnccl_net_{short}.so")];
    match open_from_dirs(dirs, &names, &mut attempts) {
        Some(lib) => return OpenOutcome { lib, attempts },
        None => attempts.push(OpenAttempt {
            file: format!(
                "{} in [{}]",
                names.join(" | "),
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            from_search_dir: true,
            result: AttemptResult::NotFound("no such file in the ferroccl plugin directories".into()),
        }),
    }
    let lib = try_open(&file, false, &mut attempts);
    OpenOutcome { lib, attempts }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_plugin_prefix_rule() {
        assert!(is_static_plugin("STATIC_PLUGIN"));
        assert!(is_static_plugin("static"));
        assert!(is_static_plugin("S"));
        assert!(!is_static_plugin(""));
        assert!(!is_static_plugin("STATIC_PLUGINX"));
        assert!(!is_static_plugin("socket"));
    }

    #[test]
    fn prefixed_retry_rule() {
        assert!(wants_prefixed_retry("ofi"));
        assert!(wants_prefixed_retry("libfoo"));
        assert!(!wants_prefixed_retry("libfoo.so"));
        assert!(!wants_prefixed_retry("./x.so"));
        assert!(!wants_prefixed_retry(""));
    }

    #[test]
    fn missing_bare_name_tries_prefixed_name() {
        let o = open_plugin_lib("ferroccl-no-such", "libnccl-net", &[]);
        assert!(o.lib.is_none());
        let files: Vec<_> = o.attempts.iter().map(|a| a.file.as_str()).collect();
        assert_eq!(files[..2], ["ferroccl-no-such", "libnccl-net-ferroccl-no-such.so"]);
        assert!(
            o.attempts
                .iter()
                .all(|a| matches!(a.result, AttemptResult::NotFound(_))),
            "{o:?}"
        );
    }

    #[test]
    fn main_program_opens() {
        let o = open_plugin_lib("STATIC_PLUGIN", "libnccl-net", &[]);
        let lib = o.lib.expect("dlopen(NULL)");
        assert!(lib.symbol(c"ncclNetPlugin_v12").is_none());
    }
}
