//! The plugin host: finds, loads and drives NCCL plugins (net, collnet, tuner,
//! profiler) exactly as NCCL 2.30.7 does (`src/plugin/*.cc`; reference
//! `docs/reference/nccl-plugin-abi.md` §1.5, §5).
//!
//! # Net plugin resolution ([`load_net`])
//!
//! Candidates, in order:
//! 1. **External**: `NCCL_NET_PLUGIN` unset → `libnccl-net.so`; `none` → no external
//!    candidate; otherwise the comma-separated entries (empty ones skipped, names of
//!    ≥ 255 characters ignored, at most 14). Each entry is opened by NCCL's
//!    `openPluginLib()` rule ([`library::open_plugin_lib`]): the name as given
//!    (`dlopen(name, RTLD_NOW | RTLD_LOCAL)`, so a bare name uses the loader's path
//!    and a name with `/` is a path), then `libnccl-net-<name>.so` unless the name
//!    contains `/` or is `lib*.so`; a case-insensitive prefix of `STATIC_PLUGIN`
//!    means the main program (`dlopen(NULL)`).
//! 2. **In-tree IB**, then **in-tree Socket** (unless [`LoadOptions::in_tree`] is
//!    off): ferroccl's own `libnccl-net-ib.so` / `libnccl-net-socket.so`, loaded
//!    through the very same path as third-party plugins.
//!
//! **Where the host looks** (a ferroccl extension to NCCL, logged at INFO when it
//! is what found the file): for in-tree plugins, and for bare names the dynamic
//! loader did not find, the directories
//! * `$FERROCCL_PLUGIN_PATH` (colon-separated), then
//! * the directory of the running executable, then its parent (cargo puts test
//!   binaries in `target/<profile>/deps/` and the plugin `.so` files in
//!   `target/<profile>/`),
//!
//! accepting both the NCCL file name (`libnccl-net-socket.so`) and cargo's output
//! name (`libnccl_net_socket.so`). In-tree plugins are then also looked up on the
//! loader's path (`LD_LIBRARY_PATH`, `ld.so.cache`).
//!
//! For each candidate: open → probe `ncclNetPlugin_v12` … `_v6` (only versions
//! ≤ `FERROCCL_NET_MAX_VERSION`, default 12; first found wins) → probe
//! `ncclCollNetPlugin_v12` … `_v6` independently (absence only disables CollNet)
//! → skip it unless `NCCL_NET` is unset or equals its vtable `name`
//! case-insensitively (`Socket` / `IB` also select the in-tree `FerrocclSocket` /
//! `FerrocclIB`) → `init` → `devices()` (0 or error rejects it) → `getProperties(0)`
//! device-type check (HOST only: ferroccl cannot drive NCCL's device-side UNPACK
//! offload). The first candidate that passes is chosen; so `NCCL_NET` disables
//! fallback to differently named plugins, and otherwise the order is external →
//! IB → Socket.
//!
//! **Strict mode** (`FERROCCL_NET_STRICT=1`): the first candidate actually tried must
//! be chosen; any rejection is an error instead of a fallback. Not counted as
//! tried: candidates skipped because `NCCL_NET` names another plugin, and the
//! implicit `libnccl-net.so` when `NCCL_NET_PLUGIN` is unset and no such file exists.
//!
//! **Loud resolution.** Every candidate is logged once at INFO (target
//! `ferroccl::plugin`) with each file tried and why it was rejected (not found;
//! dlopen failed, with the `dlerror()` text; no symbol; name mismatch; init failed
//! with its code; 0 devices; device type unusable), and the choice (name, API
//! version, file). The same facts are returned as data ([`LoadReport`]).
//!
//! **Configuration first.** Every load path first runs
//! [`crate::config::Config::global`], which applies `nccl.conf` to the
//! environment as NCCL's `initEnv` does, so a plugin's own `getenv("NCCL_…")` sees
//! file values; [`LoadOptions::from_env`] reads the same merged view
//! (`NCCL_NET_PLUGIN`, `NCCL_NET` set in `nccl.conf` select plugins).
//!
//! # Lifetime rules
//!
//! * Function pointers are read only after `init` (see [`adapter`]).
//! * **A library is never `dlclose`d once any of its code ran**: the host pins a
//!   library before its first `init` and keeps it loaded for the life of the
//!   process (NCCL's `NCCL_NET_PLUGIN_REF_COUNT=1` behaviour); libraries rejected
//!   before `init` (not a plugin, name mismatch, version cap) are closed.
//! * A plugin that was initialised is kept in a process-wide registry keyed by its
//!   vtable address, so loading it again (another communicator, another
//!   `load_net` call) reuses the same adapter and never repeats a v6–v10 `init`.
//!   A v6–v10 plugin whose `init` failed stays disabled for the process.
//!
//! # Other plugin types
//!
//! [`tuner_profiler`] loads tuner and profiler plugins with NCCL's fallback into
//! the net library and its sticky failures; [`mod@env`] loads the env plugin
//! (`NCCL_ENV_PLUGIN`) every parameter lookup goes through; [`symbols`] lists what a library
//! exports; [`logger`] is the `ncclDebugLogger_t` given to plugins; [`params`]
//! reads the parameters a plugin declares (`ferrocclParams_v1`).

pub mod adapter;
pub mod collnet;
pub mod cuda_stub;
pub mod env;
pub mod error;
pub mod library;
pub mod logger;
pub mod net;
pub mod options;
pub mod params;
pub mod report;
pub mod rma;
pub mod symbols;
pub mod tuner;
pub mod tuner_profiler;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use adapter::NetAdapter;
pub use error::PluginError;
pub use net::NetPlugin;
pub use options::LoadOptions;
pub use report::{CandidateKind, CandidateReport, LoadReport, Outcome, Rejection};

use ferroccl_plugin_api::abi::{NCCL_NET_DEVICE_HOST, NCCL_NET_DEVICE_UNPACK, NCCL_NET_DEVICE_UNPACK_VERSION};
use library::{AttemptResult, OpenOutcome, PluginLibrary, open_in_tree, open_plugin_lib, search_dirs};
use net::CommConfig;
use symbols::PluginType;

/// vtable name of ferroccl's in-tree Socket plugin.
pub const IN_TREE_SOCKET_NAME: &str = "FerrocclSocket";
/// vtable name of ferroccl's in-tree IB plugin.
pub const IN_TREE_IB_NAME: &str = "FerrocclIB";
/// At most this many `NCCL_NET_PLUGIN` entries are used (`NCCL_NET_MAX_PLUGINS` − 2).
pub const MAX_EXTERNAL_PLUGINS: usize = 14;
/// `NCCL_NET_PLUGIN` entries this long or longer are ignored.
pub const MAX_PLUGIN_NAME_LEN: usize = 255;

/// A chosen, initialised net plugin and how it was found.
#[derive(Clone)]
pub struct LoadedNet {
    /// The plugin, behind the version-free trait.
    pub plugin: Arc<dyn NetPlugin>,
    /// Every candidate tried, the chosen one last.
    pub report: LoadReport,
}

impl std::fmt::Debug for LoadedNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedNet")
            .field("info", self.plugin.info())
            .field("report", &self.report)
            .finish()
    }
}

impl LoadedNet {
    /// Whether the chosen plugin is an external one (an `NCCL_NET_PLUGIN` entry or
    /// a directly loaded library), as opposed to ferroccl's in-tree IB/Socket.
    pub fn is_external(&self) -> bool {
        self.report
            .chosen()
            .is_some_and(|c| matches!(c.kind, CandidateKind::External | CandidateKind::Direct))
    }
}

/// The external entries of `NCCL_NET_PLUGIN` (reference §5.2): unset →
/// `["libnccl-net.so"]`, `none` → `[]`, else the comma-separated non-empty entries
/// shorter than 255 characters, at most 14.
pub fn net_plugin_list(net_plugin: Option<&str>) -> Vec<String> {
    match net_plugin {
        None => vec!["libnccl-net.so".to_owned()],
        Some(v) if v.trim().eq_ignore_ascii_case("none") => Vec::new(),
        Some(v) => v
            .split(',')
            .filter(|s| !s.is_empty() && s.len() < MAX_PLUGIN_NAME_LEN)
            .take(MAX_EXTERNAL_PLUGINS)
            .map(str::to_owned)
            .collect(),
    }
}

/// Initialised adapters, by vtable address (see "Lifetime rules").
static REGISTRY: Mutex<Vec<Arc<NetAdapter>>> = Mutex::new(Vec::new());

/// Whether `NCCL_NET=wanted` selects a plugin named `name` of kind `kind`.
fn name_matches(wanted: &str, name: &str, kind: CandidateKind) -> bool {
    name.eq_ignore_ascii_case(wanted)
        || (kind == CandidateKind::InTreeSocket && wanted.eq_ignore_ascii_case("Socket"))
        || (kind == CandidateKind::InTreeIb && wanted.eq_ignore_ascii_case("IB"))
}

/// Runs the load checks on one opened candidate. Fills `c` and returns the adapter
/// when the candidate can be used.
fn evaluate(
    c: &mut CandidateReport,
    outcome: OpenOutcome,
    opts: &LoadOptions,
    check_name: bool,
) -> Result<Arc<NetAdapter>, Rejection> {
    c.attempts = outcome.attempts;
    let Some(lib) = outcome.lib else {
        return Err(
            match c.attempts.iter().find_map(|a| match &a.result {
                AttemptResult::Failed(e) => Some((a.file.clone(), e.clone())),
                _ => None,
            }) {
                Some((file, dlerror)) => Rejection::DlOpenFailed { file, dlerror },
                None => Rejection::NotFound,
            },
        );
    };
    c.file = Some(PathBuf::from(lib.opened_as()));
    let cap = opts.max_net_version;
    let Some((sym, version)) = symbols::probe(&lib, PluginType::Net, cap) else {
        let above_cap: Vec<u32> = PluginType::Net
            .symbols()
            .iter()
            .filter(|(s, v)| *v > cap && lib.symbol(s).is_some())
            .map(|(_, v)| *v)
            .collect();
        return Err(Rejection::NoSymbol { cap, above_cap });
    };
    // NCCL 2.30.7 src/plugin/net.cc ncclNetPluginLoad: the CollNet table is searched
    // in the same library, newest first, independently of the net version.
    let collnet = symbols::probe(&lib, PluginType::CollNet, cap);
    let path = PluginLibrary::file_of(sym).unwrap_or_else(|| PathBuf::from(lib.opened_as()));
    c.file = Some(path.clone());
    c.net_version = Some(version);
    c.collnet_version = collnet.map(|(_, v)| v);
    let adapter = {
        let reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        reg.iter().find(|a| a.symbol_address() == sym as usize).cloned()
    };
    let adapter = match adapter {
        Some(a) => a,
        // SAFETY: `sym` is the address of `ncclNetPlugin_v<version>` in `lib`, the
        // CollNet one that of `ncclCollNetPlugin_v<N>` (probe checked both names).
        None => Arc::new(unsafe { NetAdapter::new(Arc::new(lib), sym, version, path, collnet) }),
    };
    let name = adapter.info().name.clone();
    c.name = Some(name.clone());
    if check_name
        && let Some(wanted) = &opts.net
        && !name_matches(wanted, &name, c.kind)
    {
        return Err(Rejection::NameMismatch {
            name,
            wanted: wanted.clone(),
        });
    }
    // From here on plugin code runs; the adapter pins the library in init_ctx.
    let first_time = !adapter.library().is_pinned();
    let ctx = adapter
        .init_ctx(0, &CommConfig::default())
        .map_err(|e| Rejection::InitFailed {
            code: Some(e.code().0),
            error: e.to_string(),
        });
    if first_time || ctx.is_ok() {
        let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if !reg.iter().any(|a| Arc::ptr_eq(a, &adapter)) {
            reg.push(adapter.clone());
        }
    }
    let ctx = ctx?;
    let checked = check_initialised(&adapter);
    if checked.is_ok() {
        c.collnet_state = adapter.collnet().map(|cn| probe_collnet(&cn));
    }
    if let Err(e) = adapter.finalize_ctx(ctx) {
        tracing::info!(target: "ferroccl::plugin", "NET/Plugin: '{name}' finalize of the probe context failed: {e}");
    }
    checked?;
    Ok(adapter)
}

/// CollNet `init` and `devices()` right after the net plugin's, as NCCL's
/// `ncclNetPluginInit` does (`src/plugin/net.cc`); a failure only disables CollNet.
/// The probe context is given back at once.
fn probe_collnet(cn: &collnet::CollNetAdapter) -> collnet::CollNetState {
    match cn.init_ctx(0) {
        Ok(ctx) => {
            if let Err(e) = cn.finalize_ctx(ctx) {
                tracing::info!(target: "ferroccl::plugin",
                    "NET/Plugin: CollNet plugin '{}' finalize of the probe context failed: {e}", cn.info().name);
            }
        }
        Err(e) => {
            tracing::debug!(target: "ferroccl::plugin", "NET/Plugin: CollNet probe: {e}");
        }
    }
    cn.state()
}

/// The checks NCCL makes right after `init` (reference §1.5, §5.2 step 3–4).
fn check_initialised(a: &NetAdapter) -> Result<(), Rejection> {
    if let Some(s) = a.missing_required_slot() {
        return Err(Rejection::NullSlot(s));
    }
    let n = a.devices().map_err(|e| Rejection::DevicesFailed(e.to_string()))?;
    if n == 0 {
        return Err(Rejection::NoDevices);
    }
    let p = a
        .properties(0)
        .map_err(|e| Rejection::PropertiesFailed(e.to_string()))?;
    let (ty, ver) = (p.net_device_type, p.net_device_version);
    if ty == NCCL_NET_DEVICE_HOST {
        return Ok(());
    }
    let why = if ty == NCCL_NET_DEVICE_UNPACK && ver == NCCL_NET_DEVICE_UNPACK_VERSION {
        "NCCL_NET_DEVICE_UNPACK needs NCCL's device-side unpack kernels, which ferroccl does not have".to_owned()
    } else if ty == NCCL_NET_DEVICE_UNPACK {
        format!("NCCL_NET_DEVICE_UNPACK version {ver} (NCCL accepts only version {NCCL_NET_DEVICE_UNPACK_VERSION})")
    } else {
        "a net plugin may only report NCCL_NET_DEVICE_HOST (0) or NCCL_NET_DEVICE_UNPACK (1)".to_owned()
    };
    Err(Rejection::DeviceTypeUnusable {
        device_type: ty,
        device_version: ver,
        why,
    })
}

fn log_candidate(c: &CandidateReport) {
    match &c.outcome {
        Outcome::Chosen => tracing::info!(target: "ferroccl::plugin",
            "NET/Plugin: using '{}' (ncclNet v{}{}) from {}",
            c.name.as_deref().unwrap_or("?"),
            c.net_version.unwrap_or(0),
            c.collnet_version.map_or(String::new(), |v| match &c.collnet_state {
                Some(st) => format!(", ncclCollNet v{v} {st}"),
                None => format!(", ncclCollNet v{v}"),
            }),
            c.file.as_ref().map_or("?".into(), |f| f.display().to_string())),
        Outcome::Rejected(_) => tracing::info!(target: "ferroccl::plugin", "NET/Plugin: candidate {c}"),
    }
}

/// Resolves, loads and initialises the net plugin the way NCCL 2.30.7 does (see
/// the module docs), logging every candidate once at INFO.
///
/// Errors: [`PluginError::NoPlugin`] (with the full report) when no candidate is
/// usable — which with `NCCL_NET` set includes "no plugin of that name";
/// [`PluginError::Strict`] in strict mode; [`PluginError::InvalidOption`] for a
/// version cap outside 6 ..= 12.
pub fn load_net(opts: &LoadOptions) -> Result<LoadedNet, PluginError> {
    // nccl.conf reaches the environment before any plugin reads it (NCCL's initEnv).
    crate::config::Config::global();
    check_cap(opts)?;
    let dirs = search_dirs(opts);
    let mut todo: Vec<(String, CandidateKind)> = net_plugin_list(opts.net_plugin.as_deref())
        .into_iter()
        .map(|n| (n, CandidateKind::External))
        .collect();
    if opts.in_tree {
        todo.push(("ib".into(), CandidateKind::InTreeIb));
        todo.push(("socket".into(), CandidateKind::InTreeSocket));
    }
    let mut report = LoadReport::default();
    for (requested, kind) in todo {
        let outcome = match kind {
            CandidateKind::InTreeIb | CandidateKind::InTreeSocket => open_in_tree(&requested, &dirs),
            _ => open_plugin_lib(&requested, "libnccl-net", &dirs),
        };
        let mut c = CandidateReport {
            requested: requested.clone(),
            kind,
            attempts: Vec::new(),
            file: None,
            net_version: None,
            collnet_version: None,
            collnet_state: None,
            name: None,
            outcome: Outcome::Chosen,
        };
        let r = evaluate(&mut c, outcome, opts, true);
        match r {
            Ok(adapter) => {
                c.outcome = Outcome::Chosen;
                log_candidate(&c);
                report.candidates.push(c);
                return Ok(LoadedNet {
                    plugin: adapter,
                    report,
                });
            }
            Err(rej) => {
                let silent = matches!(rej, Rejection::NameMismatch { .. })
                    || (opts.net_plugin.is_none() && kind == CandidateKind::External && rej == Rejection::NotFound);
                c.outcome = Outcome::Rejected(rej.clone());
                log_candidate(&c);
                report.candidates.push(c);
                if opts.strict && !silent {
                    tracing::warn!(target: "ferroccl::plugin",
                        "NET/Plugin: FERROCCL_NET_STRICT=1 and candidate '{requested}' was rejected ({rej}); not falling back");
                    return Err(PluginError::Strict {
                        candidate: requested,
                        why: rej.to_string(),
                    });
                }
            }
        }
    }
    let text = report.to_string();
    tracing::warn!(target: "ferroccl::plugin", "NET/Plugin: Failed to initialize any NET plugin:\n{text}");
    Err(PluginError::NoPlugin { report: text })
}

fn check_cap(opts: &LoadOptions) -> Result<(), PluginError> {
    if (options::MIN_NET_VERSION..=options::MAX_NET_VERSION).contains(&opts.max_net_version) {
        Ok(())
    } else {
        Err(PluginError::InvalidOption {
            option: "LoadOptions::max_net_version",
            value: opts.max_net_version.to_string(),
            expected: "an integer from 6 to 12",
        })
    }
}

/// Loads one specific library (a name resolved by NCCL's `openPluginLib()` rule
/// plus ferroccl's search directories, or a path) and runs the same checks as
/// [`load_net`] (`NCCL_NET`, `NCCL_NET_PLUGIN` and strict mode are not consulted;
/// the version cap is). Used by the conformance suite and `ferroccl-info`.
///
/// Errors: [`PluginError::NotFound`], [`PluginError::DlOpen`],
/// [`PluginError::NoSymbol`], [`PluginError::NullSlot`], [`PluginError::Call`]
/// (init, devices or getProperties failed), [`PluginError::NoDevices`],
/// [`PluginError::DeviceTypeUnusable`].
pub fn load_net_from(name_or_path: &str, opts: &LoadOptions) -> Result<LoadedNet, PluginError> {
    crate::config::Config::global();
    check_cap(opts)?;
    let dirs = search_dirs(opts);
    let outcome = open_plugin_lib(name_or_path, "libnccl-net", &dirs);
    let mut c = CandidateReport {
        requested: name_or_path.to_owned(),
        kind: CandidateKind::Direct,
        attempts: Vec::new(),
        file: None,
        net_version: None,
        collnet_version: None,
        collnet_state: None,
        name: None,
        outcome: Outcome::Chosen,
    };
    match evaluate(&mut c, outcome, opts, false) {
        Ok(adapter) => {
            log_candidate(&c);
            Ok(LoadedNet {
                plugin: adapter,
                report: LoadReport { candidates: vec![c] },
            })
        }
        Err(rej) => {
            c.outcome = Outcome::Rejected(rej.clone());
            log_candidate(&c);
            Err(rejection_error(&c, rej, opts.max_net_version))
        }
    }
}

/// The [`PluginError`] for a rejected candidate.
fn rejection_error(c: &CandidateReport, rej: Rejection, cap: u32) -> PluginError {
    let plugin = c.name.clone().unwrap_or_default();
    let version = c.net_version.unwrap_or(0);
    let call = |call, msg: String| PluginError::Call {
        plugin: plugin.clone(),
        version,
        call,
        source: net::NetError::Internal(msg),
    };
    match rej {
        Rejection::NotFound => PluginError::NotFound {
            requested: c.requested.clone(),
            tried: c.attempts.iter().map(|a| a.file.clone()).collect(),
        },
        Rejection::DlOpenFailed { file, dlerror } => PluginError::DlOpen { file, dlerror },
        Rejection::NoSymbol { above_cap, .. } => PluginError::NoSymbol {
            file: c.file.clone().unwrap_or_default(),
            expected: if above_cap.is_empty() {
                format!("ncclNetPlugin_v{cap} … ncclNetPlugin_v6")
            } else {
                format!("ncclNetPlugin_v{cap} … ncclNetPlugin_v6 (it exports versions {above_cap:?})")
            },
            cap,
        },
        Rejection::NullSlot(slot) => PluginError::NullSlot { plugin, version, slot },
        Rejection::InitFailed { error, .. } => call("init", error),
        Rejection::DevicesFailed(e) => call("devices", e),
        Rejection::PropertiesFailed(e) => call("getProperties(0)", e),
        Rejection::NoDevices => PluginError::NoDevices { plugin, version },
        Rejection::DeviceTypeUnusable {
            device_type,
            device_version,
            why,
        } => PluginError::DeviceTypeUnusable {
            plugin,
            device_type,
            device_version,
            why,
        },
        Rejection::NameMismatch { name, wanted } => call("name check", format!("'{name}' is not '{wanted}'")),
        Rejection::NotTried(why) => call("load", why),
    }
}

/// Loads the tuner plugin once per process (see [`tuner_profiler`]).
pub fn load_tuner(opts: &LoadOptions, net: Option<&LoadedNet>) -> Result<Arc<tuner_profiler::AuxPlugin>, PluginError> {
    tuner_profiler::tuner_loader().load(opts, net)
}

/// Loads the profiler plugin once per process (see [`tuner_profiler`]).
pub fn load_profiler(
    opts: &LoadOptions,
    net: Option<&LoadedNet>,
) -> Result<Arc<tuner_profiler::AuxPlugin>, PluginError> {
    tuner_profiler::profiler_loader().load(opts, net)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_list_rules() {
        assert_eq!(net_plugin_list(None), vec!["libnccl-net.so"]);
        assert!(net_plugin_list(Some("none")).is_empty());
        assert!(net_plugin_list(Some("NoNe")).is_empty());
        assert_eq!(net_plugin_list(Some("a,,b,")), vec!["a", "b"]);
        let long = "x".repeat(255);
        assert_eq!(net_plugin_list(Some(&format!("{long},y"))), vec!["y"]);
        let many: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
        assert_eq!(net_plugin_list(Some(&many.join(","))).len(), 14);
    }

    #[test]
    fn aliases() {
        assert!(name_matches("socket", "FerrocclSocket", CandidateKind::InTreeSocket));
        assert!(!name_matches("socket", "FerrocclSocket", CandidateKind::External));
        assert!(name_matches("ferroccl-x", "FERROCCL-X", CandidateKind::External));
        assert!(name_matches("IB", "FerrocclIB", CandidateKind::InTreeIb));
    }
}
