//! Env plugins (`ncclEnv_v1` / `ncclEnv_v2`): every parameter lookup goes through
//! the chosen plugin's `getEnv`, as in NCCL 2.30.7 (`src/plugin/env.cc`,
//! `src/misc/param.cc`; reference `docs/reference/nccl-plugin-abi.md` §3.3).
//!
//! What NCCL does, and this module with [`crate::config::Config::global`]:
//!
//! * **When**: on the first parameter lookup of the process (`ncclGetEnv` →
//!   `ncclInitEnv` → `ncclEnvPluginInit`), once. `ncclEnvPluginInit` first runs
//!   `initEnv()` (the `nccl.conf` files are applied with `setenv(…, 0)`), *then*
//!   loads the plugin, so `NCCL_ENV_PLUGIN` may come from a `nccl.conf` file and the
//!   plugin's own `getenv` sees the files' values.
//! * **Which** (`ncclEnvPluginLoad`): `NCCL_ENV_PLUGIN` read with plain `getenv`;
//!   `none` (case-insensitive) → NCCL's internal default (`getenv`); unset →
//!   `libnccl-env.so`; otherwise the name by the rules of every plugin kind
//!   (`openPluginLib()`: the name, then `libnccl-env-<name>.so`; ferroccl also
//!   searches its plugin directories: [`super::library::open_plugin_lib`]). Symbols
//!   `ncclEnvPlugin_v2`, then `ncclEnvPlugin_v1`; a library with neither is closed
//!   and the internal default is used (NCCL: `ATTN` "External env plugin %s is
//!   unsupported" when it was requested, INFO otherwise). A library that does not
//!   open also falls back to the internal default.
//! * **init**: `init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX[, ncclDebugLog])`
//!   = `(2, 30, 7, "")`, once. If it fails, `ncclInitEnv` latches the error: every
//!   API entry point that checks it (`ncclGetUniqueId`, `ncclCommInitRank`, …)
//!   returns it, for the life of the process; `finalize` is then never registered.
//!   Lookups (`ncclGetEnv`, which ignores `ncclInitEnv`'s result) still go to the
//!   external plugin's `getEnv`. ferroccl does the same: the error is kept in the
//!   process configuration ([`crate::config::Config::env_plugin_result`]) and
//!   communicator creation fails with it.
//! * **finalize** (`ncclEnvPluginFinalize`): registered with `atexit` after a
//!   successful `init`; after it, lookups use the internal default again
//!   (`ncclEnvPluginUnload`).
//!
//! [`EnvPlugin`] is one loaded table, usable on its own (the conformance suite's
//! `--env` section drives it call by call); [`load_for_process`] is the
//! resolution above, used once by the process configuration.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use ferroccl_plugin_api::abi::{ENV_PLUGIN_SYMBOLS, ncclEnv_v1_t, ncclEnv_v2_t, ncclResult_t};

use super::library::{OpenAttempt, PluginLibrary, open_plugin_lib, search_dirs};
use super::symbols::vtable_name;

/// The NCCL version an env plugin's `init` is told: `NCCL_MAJOR`, `NCCL_MINOR`,
/// `NCCL_PATCH` of the API ferroccl implements (2.30.7).
pub const NCCL_VERSION: (u8, u8, u8) = (2, 30, 7);
/// `NCCL_SUFFIX` passed to `init` (release builds of NCCL pass `""`).
pub const NCCL_SUFFIX: &CStr = c"";
/// The variable naming the env plugin.
pub const ENV_PLUGIN_VAR: &str = crate::config::params::ENV_PLUGIN.name;
/// The library-name prefix (`openPluginLib()`'s `ncclPluginTypeEnv`).
pub const ENV_PLUGIN_PREFIX: &str = "libnccl-env";
/// The internal default's table name in NCCL (`ncclIntEnv_v2.name`).
pub const INTERNAL_NAME: &str = "ncclEnvDefault";

/// Why an env plugin could not be loaded or a call into it failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvPluginError {
    /// No file opened for the requested name.
    #[error("env plugin '{requested}' not found (tried: {tried})")]
    NotFound {
        /// `NCCL_ENV_PLUGIN` (or the name given).
        requested: String,
        /// Every file tried, with why it did not open.
        tried: String,
    },
    /// The library exports no table of the versions searched.
    #[error("{file} exports none of {expected}")]
    NoSymbol {
        /// The library.
        file: String,
        /// The symbols searched.
        expected: String,
    },
    /// A function slot NCCL calls without a NULL check is NULL.
    #[error("env plugin '{plugin}' (ncclEnv v{version}) has a NULL '{slot}' function pointer, which NCCL calls")]
    NullSlot {
        /// Table name.
        plugin: String,
        /// API version.
        version: u32,
        /// The slot.
        slot: &'static str,
    },
    /// `init` or `finalize` returned an error.
    #[error("env plugin '{plugin}' (ncclEnv v{version}) {call} returned {} ({code})", ncclResult_t(*.code).name())]
    Call {
        /// Table name.
        plugin: String,
        /// API version.
        version: u32,
        /// `init` or `finalize`.
        call: &'static str,
        /// The `ncclResult_t` returned.
        code: i32,
    },
}

/// One loaded env plugin table (v1 or v2). The library stays loaded for the life
/// of the process once [`EnvPlugin::init`] ran (the host's never-`dlclose` rule,
/// [`PluginLibrary`]).
#[derive(Debug)]
pub struct EnvPlugin {
    lib: PluginLibrary,
    /// Address of the exported `ncclEnv_vN_t`.
    table: usize,
    version: u32,
    name: Option<String>,
    file: Option<PathBuf>,
    attempts: Vec<OpenAttempt>,
    finalized: AtomicBool,
}

impl EnvPlugin {
    /// Opens `requested` by NCCL's `openPluginLib()` rule with prefix
    /// `libnccl-env` (an empty name is `libnccl-env.so`) and ferroccl's search
    /// directories `dirs`, then takes the newest table among `versions` (each 1 or
    /// 2, searched newest first as NCCL does: `ncclEnvPlugin_v2`, then `_v1`).
    ///
    /// Errors: [`EnvPluginError::NotFound`] (the text names every file tried and
    /// the `dlerror()` of one that failed to load), [`EnvPluginError::NoSymbol`].
    pub fn open(requested: &str, dirs: &[PathBuf], versions: &[u32]) -> Result<EnvPlugin, EnvPluginError> {
        let out = open_plugin_lib(requested, ENV_PLUGIN_PREFIX, dirs);
        let tried = out.tried();
        let Some(lib) = out.lib else {
            return Err(EnvPluginError::NotFound {
                requested: requested.to_owned(),
                tried,
            });
        };
        let found = ENV_PLUGIN_SYMBOLS
            .iter()
            .filter(|(_, v)| versions.contains(v))
            .find_map(|(s, v)| lib.symbol(s).map(|p| (p, *v)));
        let Some((table, version)) = found else {
            let expected: Vec<String> = ENV_PLUGIN_SYMBOLS
                .iter()
                .filter(|(_, v)| versions.contains(v))
                .map(|(s, _)| s.to_string_lossy().into_owned())
                .collect();
            return Err(EnvPluginError::NoSymbol {
                file: lib.opened_as().to_owned(),
                expected: expected.join(", "),
            });
        };
        // SAFETY: `table` is the address of an exported env plugin struct, whose
        // first field is `const char* name`.
        let name = unsafe { vtable_name(table) };
        let file = PluginLibrary::file_of(table);
        Ok(EnvPlugin {
            lib,
            table: table as usize,
            version,
            name,
            file,
            attempts: out.attempts,
            finalized: AtomicBool::new(false),
        })
    }

    /// Opens `plugin` (a path or a name, as `NCCL_ENV_PLUGIN`) and takes exactly
    /// the `ncclEnvPlugin_v<version>` table (the conformance suite tests each
    /// exported version on its own).
    pub fn open_version(plugin: &str, version: u32) -> Result<EnvPlugin, EnvPluginError> {
        let dirs = search_dirs(&super::LoadOptions::default());
        EnvPlugin::open(plugin, &dirs, &[version])
    }

    /// API version of the table (1 or 2).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The table's `name` field (`None` for NULL).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The name for messages (`<unnamed>` for NULL).
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("<unnamed>")
    }

    /// The symbol the table was found under (`ncclEnvPlugin_v2`).
    pub fn symbol(&self) -> String {
        format!("ncclEnvPlugin_v{}", self.version)
    }

    /// The file the table was loaded from, if the loader says.
    pub fn file(&self) -> Option<&PathBuf> {
        self.file.as_ref()
    }

    /// Every file tried while opening the library.
    pub fn attempts(&self) -> &[OpenAttempt] {
        &self.attempts
    }

    /// The library (what was passed to `dlopen`: [`PluginLibrary::opened_as`]).
    pub fn library(&self) -> &PluginLibrary {
        &self.lib
    }

    /// `(init, finalize, getEnv)` of the table. v1 and v2 share the layout except
    /// for `init`'s trailing logger argument, so `init` is returned untyped.
    fn slots(
        &self,
    ) -> (
        *const c_void,
        *const c_void,
        Option<unsafe extern "C" fn(*const c_char) -> *const c_char>,
    ) {
        if self.version >= 2 {
            // SAFETY: `table` is the exported `ncclEnv_v2_t` (found under its symbol),
            // which lives as long as the library; read unaligned as foreign data.
            let t = unsafe { std::ptr::read_unaligned(self.table as *const ncclEnv_v2_t) };
            (
                t.init.map_or(std::ptr::null(), |f| f as *const c_void),
                t.finalize.map_or(std::ptr::null(), |f| f as *const c_void),
                t.getEnv,
            )
        } else {
            // SAFETY: as above, for `ncclEnv_v1_t`.
            let t = unsafe { std::ptr::read_unaligned(self.table as *const ncclEnv_v1_t) };
            (
                t.init.map_or(std::ptr::null(), |f| f as *const c_void),
                t.finalize.map_or(std::ptr::null(), |f| f as *const c_void),
                t.getEnv,
            )
        }
    }

    fn null_slot(&self, slot: &'static str) -> EnvPluginError {
        EnvPluginError::NullSlot {
            plugin: self.display_name().to_owned(),
            version: self.version,
            slot,
        }
    }

    /// Calls `init(2, 30, 7, ""[, logger])` as `ncclEnvPluginInit` does (v2 gets
    /// the host's `ncclDebugLogger_t`, [`super::logger::nccl_logger`]). Pins the
    /// library first: it is never closed after its code ran.
    ///
    /// Errors: [`EnvPluginError::NullSlot`] for a NULL `init`,
    /// [`EnvPluginError::Call`] with the code it returned.
    pub fn init(&self) -> Result<(), EnvPluginError> {
        let (init, _, _) = self.slots();
        if init.is_null() {
            return Err(self.null_slot("init"));
        }
        self.lib.pin();
        let (ma, mi, pa) = NCCL_VERSION;
        let rc = if self.version >= 2 {
            type InitV2 = unsafe extern "C" fn(
                u8,
                u8,
                u8,
                *const c_char,
                ferroccl_plugin_api::abi::ncclDebugLogger_t,
            ) -> ncclResult_t;
            // SAFETY: the slot of a v2 table has the v2 `init` signature.
            let f = unsafe { std::mem::transmute::<*const c_void, InitV2>(init) };
            // SAFETY: calling the plugin's init with NCCL's arguments; the suffix is a
            // static C string and the logger lives for the process.
            unsafe { f(ma, mi, pa, NCCL_SUFFIX.as_ptr(), Some(super::logger::nccl_logger())) }
        } else {
            type InitV1 = unsafe extern "C" fn(u8, u8, u8, *const c_char) -> ncclResult_t;
            // SAFETY: the slot of a v1 table has the v1 `init` signature.
            let f = unsafe { std::mem::transmute::<*const c_void, InitV1>(init) };
            // SAFETY: as above.
            unsafe { f(ma, mi, pa, NCCL_SUFFIX.as_ptr()) }
        };
        self.check(rc, "init")
    }

    fn check(&self, rc: ncclResult_t, call: &'static str) -> Result<(), EnvPluginError> {
        if rc.is_success() {
            Ok(())
        } else {
            Err(EnvPluginError::Call {
                plugin: self.display_name().to_owned(),
                version: self.version,
                call,
                code: rc.0,
            })
        }
    }

    /// `getEnv(name)` as the plugin returns it: the raw pointer (NULL = unset).
    /// `Err` only for a NULL `getEnv` slot.
    pub fn get_env_raw(&self, name: &CStr) -> Result<*const c_char, EnvPluginError> {
        let (_, _, get) = self.slots();
        let get = get.ok_or_else(|| self.null_slot("getEnv"))?;
        // SAFETY: calling the plugin's getEnv with a NUL-terminated name, as
        // `ncclEnvPluginGetEnv` does.
        Ok(unsafe { get(name.as_ptr()) })
    }

    /// `getEnv(name)` copied out (`None`: NULL, a name with a NUL byte, or a NULL
    /// `getEnv` slot; invalid UTF-8 is replaced). After [`EnvPlugin::finalize`] the
    /// process environment answers, as NCCL's internal default does after
    /// `ncclEnvPluginUnload`.
    pub fn get_env(&self, name: &str) -> Option<String> {
        if self.finalized.load(Ordering::Acquire) {
            return std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        }
        let c = CString::new(name).ok()?;
        let p = self.get_env_raw(&c).ok()?;
        if p.is_null() {
            return None;
        }
        // SAFETY: the plugin returned a non-NULL `const char*`, which by the getEnv
        // contract is a NUL-terminated string valid at least until the next call.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// Calls `finalize` once (later calls do nothing) and hands lookups back to the
    /// process environment. A NULL `finalize` is skipped, as `ncclEnvPluginFinalize`
    /// does.
    ///
    /// Errors: [`EnvPluginError::Call`] with the code it returned.
    pub fn finalize(&self) -> Result<(), EnvPluginError> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let (_, fin, _) = self.slots();
        if fin.is_null() {
            return Ok(());
        }
        type Fin = unsafe extern "C" fn() -> ncclResult_t;
        // SAFETY: the `finalize` slot has this signature in v1 and v2.
        let f = unsafe { std::mem::transmute::<*const c_void, Fin>(fin) };
        // SAFETY: calling the plugin's finalize, once.
        let rc = unsafe { f() };
        self.check(rc, "finalize")
    }
}

/// What [`load_for_process`] found: the plugin (if an external one is in use),
/// the latched `init` error, and the log lines NCCL prints while loading (kept,
/// because logging starts only after the configuration is read).
#[derive(Debug, Default)]
pub struct EnvLoad {
    /// The external plugin whose `getEnv` answers lookups (also after a failed
    /// `init`, as in NCCL); `None`: the internal default (the process environment).
    pub plugin: Option<&'static EnvPlugin>,
    /// `init`'s error, latched for the process.
    pub init_error: Option<EnvPluginError>,
    /// INFO lines (subsystem ENV/INIT), in order.
    pub info: Vec<String>,
    /// WARN lines (NCCL's `ATTN`).
    pub warn: Vec<String>,
}

static PROCESS_PLUGIN: OnceLock<EnvPlugin> = OnceLock::new();

/// `ncclEnvPluginFinalize` at process exit.
extern "C" fn finalize_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(p) = PROCESS_PLUGIN.get() {
            let _ = p.finalize();
        }
    });
}

/// NCCL's `ncclEnvPluginLoad` + `ncclEnvPluginInit` for this process (see the module
/// docs). Call once, after the `nccl.conf` files were applied to the environment;
/// [`crate::config::Config::global`] does. Plugin directories are
/// `FERROCCL_PLUGIN_PATH` (read with plain `getenv`, like `NCCL_ENV_PLUGIN`) and
/// the executable's directory and its parent.
pub fn load_for_process() -> EnvLoad {
    let mut out = EnvLoad::default();
    let requested = std::env::var(ENV_PLUGIN_VAR).ok();
    if let Some(r) = &requested {
        out.info.push(format!("{ENV_PLUGIN_VAR} set by environment to {r}"));
        if r.eq_ignore_ascii_case("none") {
            return out;
        }
    }
    let opts = super::LoadOptions {
        plugin_path: std::env::var(crate::config::params::PLUGIN_PATH.name)
            .map(|v| v.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect())
            .unwrap_or_default(),
        ..Default::default()
    };
    let name = requested.clone().unwrap_or_default();
    let plugin = match EnvPlugin::open(&name, &search_dirs(&opts), &[2, 1]) {
        Ok(p) => p,
        Err(e) => {
            // NCCL: INFO "Could not find: …" from openPluginLib, ATTN "External env plugin
            // %s is unsupported" for a requested library without a table; internal default.
            match (&e, &requested) {
                (EnvPluginError::NotFound { .. }, None) => {}
                (_, Some(_)) => out.warn.push(format!(
                    "ENV/Plugin: {e}; using the internal default ({INTERNAL_NAME}: the process environment)"
                )),
                (_, None) => out.info.push(format!("ENV/Plugin: {e}; using the internal default")),
            }
            return out;
        }
    };
    out.info.push(format!(
        "ENV/Plugin: Using {} (v{}) from {}",
        plugin.display_name(),
        plugin.version(),
        plugin
            .file()
            .map_or_else(|| plugin.library().opened_as().to_owned(), |f| f.display().to_string())
    ));
    let plugin = PROCESS_PLUGIN.get_or_init(|| plugin);
    match plugin.init() {
        Ok(()) => {
            out.info.push(format!(
                "Successfully loaded external env plugin {}",
                plugin.display_name()
            ));
            // SAFETY: registering a plain `extern "C" fn()` that never unwinds.
            unsafe { libc::atexit(finalize_at_exit) };
        }
        Err(e) => {
            out.warn.push(format!(
                "ENV/Plugin: {e}; communicators cannot be created in this process (NCCL latches the env plugin's init failure)"
            ));
            out.init_error = Some(e);
        }
    }
    out.plugin = Some(plugin);
    out
}
