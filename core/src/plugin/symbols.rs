//! Which NCCL plugin symbols a library exports (for reports and `ferroccl-info`).

use std::ffi::{CStr, c_char, c_void};

use ferroccl_plugin_api::abi::{
    COLLNET_PLUGIN_SYMBOLS, ENV_PLUGIN_SYMBOLS, GIN_PLUGIN_SYMBOLS, NET_PLUGIN_SYMBOLS, PROFILER_PLUGIN_SYMBOLS,
    RMA_PLUGIN_SYMBOLS, TUNER_PLUGIN_SYMBOLS,
};

use super::library::PluginLibrary;

/// The RMA tables proper (the first two of [`RMA_PLUGIN_SYMBOLS`]).
static RMA_TABLE_SYMBOLS: [(&CStr, u32); 2] = [RMA_PLUGIN_SYMBOLS[0], RMA_PLUGIN_SYMBOLS[1]];

/// A plugin API NCCL loads from shared objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginType {
    /// `ncclNetPlugin_vN` (N = 6 … 12).
    Net,
    /// `ncclCollNetPlugin_vN` (N = 6 … 12).
    CollNet,
    /// `ncclTunerPlugin_vN` (N = 2 … 6).
    Tuner,
    /// `ncclProfiler_vN` (N = 1 … 6; no `Plugin` in the name).
    Profiler,
    /// `ncclEnvPlugin_vN` (N = 1, 2).
    Env,
    /// `ncclGinPlugin_vN` (N = 13, 14): inspected (listed, host-side calls in the
    /// conformance suite), not hosted.
    Gin,
    /// `ncclRmaPlugin_vN` (N = 13, 14): hosted through `plugin::rma` (the adapter also
    /// reads `ncclGinPlugin_v13` as an RMA v13 table, but that symbol is listed as GIN).
    Rma,
}

impl PluginType {
    /// Every type, in display order.
    pub const ALL: [PluginType; 7] = [
        PluginType::Net,
        PluginType::CollNet,
        PluginType::Tuner,
        PluginType::Profiler,
        PluginType::Env,
        PluginType::Gin,
        PluginType::Rma,
    ];

    /// The symbols NCCL 2.30.7 searches for this type, newest first, with their version.
    pub fn symbols(self) -> &'static [(&'static CStr, u32)] {
        match self {
            PluginType::Net => &NET_PLUGIN_SYMBOLS,
            PluginType::CollNet => &COLLNET_PLUGIN_SYMBOLS,
            PluginType::Tuner => &TUNER_PLUGIN_SYMBOLS,
            PluginType::Profiler => &PROFILER_PLUGIN_SYMBOLS,
            PluginType::Env => &ENV_PLUGIN_SYMBOLS,
            PluginType::Gin => &GIN_PLUGIN_SYMBOLS,
            // `ncclRmaPlugin_v14`, `ncclRmaPlugin_v13`: the GIN v13 fallback of NCCL's
            // search order (`rma.cc`, `getNcclRma_v13`) stays under `Gin`.
            PluginType::Rma => &RMA_TABLE_SYMBOLS,
        }
    }

    /// Lower-case name (`net`, `collnet`, `tuner`, `profiler`, `env`, `gin`, `rma`).
    pub fn as_str(self) -> &'static str {
        match self {
            PluginType::Net => "net",
            PluginType::CollNet => "collnet",
            PluginType::Tuner => "tuner",
            PluginType::Profiler => "profiler",
            PluginType::Env => "env",
            PluginType::Gin => "gin",
            PluginType::Rma => "rma",
        }
    }
}

/// One exported plugin symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedSymbol {
    /// The plugin type.
    pub ty: PluginType,
    /// The symbol name, e.g. `ncclNetPlugin_v9`.
    pub symbol: &'static str,
    /// Its API version.
    pub version: u32,
    /// The vtable's `name` field (slot 0 of every plugin struct), if non-NULL.
    pub name: Option<String>,
}

/// Finds the first (newest) symbol of `ty` with version ≤ `cap` in `lib`.
pub fn probe(lib: &PluginLibrary, ty: PluginType, cap: u32) -> Option<(*const c_void, u32)> {
    ty.symbols()
        .iter()
        .filter(|(_, v)| *v <= cap)
        .find_map(|(s, v)| lib.symbol(s).map(|p| (p, *v)))
}

/// Reads slot 0 (`const char* name`) of a plugin struct.
///
/// # Safety
/// `sym` must be the address of an NCCL plugin struct (all start with `name`).
pub unsafe fn vtable_name(sym: *const c_void) -> Option<String> {
    // SAFETY: per the caller's guarantee, the first field is a `const char*`.
    let p = unsafe { std::ptr::read_unaligned(sym.cast::<*const c_char>()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a plugin's name is a NUL-terminated string that lives as long as the library.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Every plugin symbol (all types, all versions) `lib` exports.
pub fn exported_symbols(lib: &PluginLibrary) -> Vec<ExportedSymbol> {
    let mut out = Vec::new();
    for ty in PluginType::ALL {
        for (s, v) in ty.symbols() {
            if let Some(p) = lib.symbol(s) {
                out.push(ExportedSymbol {
                    ty,
                    symbol: s.to_str().unwrap_or("?"),
                    version: *v,
                    // SAFETY: `p` is the address of the plugin struct this symbol names.
                    name: unsafe { vtable_name(p) },
                });
            }
        }
    }
    out
}
