//! Tuner and profiler plugin loading (NCCL 2.30.7 `src/plugin/tuner.cc`,
//! `src/plugin/profiler.cc`; reference `docs/reference/nccl-plugin-abi.md` §5.3,
//! §5.4): finding the library and the newest vtable symbol it exports. The
//! callers drive what is loaded here: the tuner through
//! [`crate::plugin::tuner`] and [`crate::tune`], the profiler through
//! [`crate::profiler`].
//!
//! Rules, per plugin type:
//! 1. `NCCL_TUNER_PLUGIN` / `NCCL_PROFILER_PLUGIN` = `none` (case-insensitive) → no plugin;
//! 2. otherwise the library is opened by §5.1 with prefix `libnccl-tuner` /
//!    `libnccl-profiler` (unset → `libnccl-tuner.so`; `foo` → `foo`, then
//!    `libnccl-tuner-foo.so`; `STATIC_PLUGIN` → the main program);
//! 3. if that fails and an **external** net plugin is loaded, the same net library
//!    file is opened again and searched (a net plugin may ship a tuner/profiler);
//! 4. symbols `ncclTunerPlugin_v6` … `_v2` / `ncclProfiler_v6` … `_v1`, newest first;
//!    none → library closed (it never ran code), no plugin;
//! 5. the outcome is **sticky for the process**: after a failure (or `none`) the
//!    load is never retried; after a success later callers share the same plugin.
//!
//! A profiler that fails to open only for want of `cudaEvent*` symbols (NCCL's
//! example profiler expects the application's CUDA runtime) is opened again after
//! the host provides them ([`super::cuda_stub`]).
//!
//! [`AuxLoader`] holds that status; [`tuner_loader`] / [`profiler_loader`] are the
//! process-wide instances; tests make their own with [`AuxLoader::new`].

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::library::{AttemptResult, OpenAttempt, PluginLibrary, open_plugin_lib, search_dirs};
use super::symbols::{PluginType, probe, vtable_name};
use super::{LoadOptions, LoadedNet, PluginError};

/// Tuner or profiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuxKind {
    /// `ncclTunerPlugin_vN`.
    Tuner,
    /// `ncclProfiler_vN`.
    Profiler,
}

impl AuxKind {
    fn prefix(self) -> &'static str {
        match self {
            AuxKind::Tuner => "libnccl-tuner",
            AuxKind::Profiler => "libnccl-profiler",
        }
    }
    fn variable(self) -> &'static str {
        match self {
            AuxKind::Tuner => crate::config::params::TUNER_PLUGIN.name,
            AuxKind::Profiler => crate::config::params::PROFILER_PLUGIN.name,
        }
    }
    fn what(self) -> &'static str {
        match self {
            AuxKind::Tuner => "tuner",
            AuxKind::Profiler => "profiler",
        }
    }
    fn plugin_type(self) -> PluginType {
        match self {
            AuxKind::Tuner => PluginType::Tuner,
            AuxKind::Profiler => PluginType::Profiler,
        }
    }
}

/// A loaded tuner or profiler plugin (not initialised).
#[derive(Debug)]
pub struct AuxPlugin {
    /// Tuner or profiler.
    pub kind: AuxKind,
    /// API version of the symbol found.
    pub version: u32,
    /// The symbol found (e.g. `ncclTunerPlugin_v6`).
    pub symbol: &'static str,
    /// The vtable's `name`.
    pub name: String,
    /// The file it was loaded from.
    pub file: Option<PathBuf>,
    /// Whether it was found in the net plugin's library (fallback step 3).
    pub from_net_library: bool,
    /// Every file tried.
    pub attempts: Vec<OpenAttempt>,
    sym: usize,
    lib: Arc<PluginLibrary>,
}

impl AuxPlugin {
    /// Address of the exported vtable struct (`ncclTuner_vN_t` / `ncclProfiler_vN_t`
    /// of [`AuxPlugin::version`]); cast it to the matching `ferroccl_plugin_api::abi`
    /// type to call into it. Valid while this value (which keeps the library open) lives.
    pub fn vtable(&self) -> *const c_void {
        self.sym as *const c_void
    }

    /// The library (pin it with [`PluginLibrary::pin`] before calling `init`).
    pub fn library(&self) -> &Arc<PluginLibrary> {
        &self.lib
    }
}

#[derive(Debug)]
enum Status {
    Ready,
    Loaded(Arc<AuxPlugin>),
    Failed(String),
}

/// Loads one kind of auxiliary plugin with NCCL's sticky per-process status.
#[derive(Debug)]
pub struct AuxLoader {
    kind: AuxKind,
    status: Mutex<Status>,
}

static TUNER: AuxLoader = AuxLoader::new(AuxKind::Tuner);
static PROFILER: AuxLoader = AuxLoader::new(AuxKind::Profiler);

/// The process-wide tuner loader.
pub fn tuner_loader() -> &'static AuxLoader {
    &TUNER
}

/// The process-wide profiler loader.
pub fn profiler_loader() -> &'static AuxLoader {
    &PROFILER
}

impl AuxLoader {
    /// A fresh loader (status "ready").
    pub const fn new(kind: AuxKind) -> Self {
        AuxLoader {
            kind,
            status: Mutex::new(Status::Ready),
        }
    }

    /// Loads (once) the plugin selected by `opts.tuner_plugin` / `opts.profiler_plugin`,
    /// falling back into `net`'s library when `net` is an external plugin.
    ///
    /// Errors: [`PluginError::Disabled`] for `none`, [`PluginError::NotFound`] /
    /// [`PluginError::DlOpen`] / [`PluginError::NoSymbol`] on the first failure, and
    /// [`PluginError::StickyFailure`] on every later call after a failure.
    pub fn load(&self, opts: &LoadOptions, net: Option<&LoadedNet>) -> Result<Arc<AuxPlugin>, PluginError> {
        let path = net.filter(|n| n.is_external()).map(|n| n.plugin.info().path.clone());
        self.load_with_net_path(opts, path.as_deref())
    }

    /// [`AuxLoader::load`] given the file of the external net plugin in use
    /// (`None` when the net plugin is an in-tree one or unknown).
    pub fn load_with_net_path(
        &self,
        opts: &LoadOptions,
        external_net: Option<&std::path::Path>,
    ) -> Result<Arc<AuxPlugin>, PluginError> {
        crate::config::Config::global();
        let mut st = self.status.lock().unwrap_or_else(|e| e.into_inner());
        match &*st {
            Status::Loaded(p) => return Ok(p.clone()),
            Status::Failed(e) => {
                return Err(PluginError::StickyFailure {
                    what: self.kind.what(),
                    first_error: e.clone(),
                });
            }
            Status::Ready => {}
        }
        let r = self.load_uncached(opts, external_net);
        match &r {
            Ok(p) => {
                tracing::info!(target: "ferroccl::plugin",
                    "{}/Plugin: loaded '{}' ({} from {})", self.kind.what(), p.name, p.symbol,
                    p.file.as_ref().map_or("?".into(), |f| f.display().to_string()));
                *st = Status::Loaded(p.clone());
            }
            Err(e) => {
                tracing::info!(target: "ferroccl::plugin", "{}/Plugin: no plugin: {e}", self.kind.what());
                *st = Status::Failed(e.to_string());
            }
        }
        r
    }

    fn load_uncached(
        &self,
        opts: &LoadOptions,
        external_net: Option<&std::path::Path>,
    ) -> Result<Arc<AuxPlugin>, PluginError> {
        let kind = self.kind;
        let setting = match kind {
            AuxKind::Tuner => opts.tuner_plugin.as_deref(),
            AuxKind::Profiler => opts.profiler_plugin.as_deref(),
        };
        if setting.is_some_and(|s| s.eq_ignore_ascii_case("none")) {
            return Err(PluginError::Disabled {
                what: kind.what(),
                variable: kind.variable(),
            });
        }
        let requested = setting.unwrap_or("");
        let dirs = search_dirs(opts);
        let mut outcome = open_plugin_lib(requested, kind.prefix(), &dirs);
        // A profiler that needs cudaEvent* from the host (NCCL's example does):
        // provide them when no CUDA runtime is loaded, then open it again
        // (see `cuda_stub`).
        if kind == AuxKind::Profiler
            && outcome.lib.is_none()
            && let Some(e) = outcome.attempts.iter().find_map(|a| match &a.result {
                AttemptResult::Failed(e) if super::cuda_stub::needs_stub(e) => Some(e.clone()),
                _ => None,
            })
        {
            match super::cuda_stub::provide() {
                Ok(how) => {
                    tracing::info!(target: "ferroccl::plugin",
                        "PROFILER/Plugin: {e}; cudaEvent* now provided ({how:?}), opening it again");
                    outcome = open_plugin_lib(requested, kind.prefix(), &dirs);
                }
                Err(err) => tracing::info!(target: "ferroccl::plugin", "PROFILER/Plugin: {e}; {err}"),
            }
        }
        let mut from_net = false;
        if outcome.lib.is_none()
            && let Some(path) = external_net
        {
            let file = path.to_string_lossy().into_owned();
            match PluginLibrary::open(&file) {
                Ok(l) => {
                    outcome.attempts.push(OpenAttempt {
                        file,
                        from_search_dir: false,
                        result: AttemptResult::Opened,
                    });
                    outcome.lib = Some(l);
                    from_net = true;
                }
                Err(e) => outcome.attempts.push(OpenAttempt {
                    file,
                    from_search_dir: false,
                    result: AttemptResult::Failed(e),
                }),
            }
        }
        let attempts = outcome.attempts.clone();
        let Some(lib) = outcome.lib else {
            if let Some((file, dlerror)) = outcome.attempts.iter().find_map(|a| match &a.result {
                AttemptResult::Failed(e) => Some((a.file.clone(), e.clone())),
                _ => None,
            }) {
                return Err(PluginError::DlOpen { file, dlerror });
            }
            let requested = if requested.is_empty() {
                format!("{}.so", kind.prefix())
            } else {
                requested.to_owned()
            };
            return Err(PluginError::NotFound {
                requested,
                tried: attempts.iter().map(|a| a.file.clone()).collect(),
            });
        };
        let ty = kind.plugin_type();
        let Some((sym, version)) = probe(&lib, ty, u32::MAX) else {
            let file = PathBuf::from(lib.opened_as());
            // `lib` drops here: never initialised, so it is dlclosed.
            let (newest, oldest) = (ty.symbols()[0].0, ty.symbols()[ty.symbols().len() - 1].0);
            return Err(PluginError::NoSymbol {
                file,
                expected: format!("{} … {}", newest.to_string_lossy(), oldest.to_string_lossy()),
                cap: ty.symbols()[0].1,
            });
        };
        let symbol = ty
            .symbols()
            .iter()
            .find(|(_, v)| *v == version)
            .map_or("?", |(s, _)| s.to_str().unwrap_or("?"));
        Ok(Arc::new(AuxPlugin {
            kind,
            version,
            symbol,
            // SAFETY: `sym` is the address of this type's plugin struct.
            name: unsafe { vtable_name(sym) }.unwrap_or_default(),
            file: PluginLibrary::file_of(sym),
            from_net_library: from_net,
            attempts,
            sym: sym as usize,
            lib: Arc::new(lib),
        }))
    }
}
