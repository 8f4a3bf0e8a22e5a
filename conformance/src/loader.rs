//! Loading the plugin under test through the runtime's own host code
//! (`ferroccl::plugin::load_net_from`, with a version cap per API version), and
//! probing which `ncclNetPlugin_vN` symbols the library exports.

use std::sync::Arc;

use ferroccl::plugin::library::{PluginLibrary, open_plugin_lib, search_dirs};
use ferroccl::plugin::symbols::{PluginType, exported_symbols};
use ferroccl::plugin::{LoadOptions, NetPlugin};
use serde::{Deserialize, Serialize};

/// One exported `ncclNetPlugin_vN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedVersion {
    /// N.
    pub version: u32,
    /// The vtable's `name`, `None` when NULL.
    pub name: Option<String>,
}

/// What the library exports, found without calling any plugin function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// The file that was opened.
    pub path: String,
    /// Exported `ncclNetPlugin_vN`, newest first.
    pub versions: Vec<ExportedVersion>,
    /// Exported `ncclCollNetPlugin_vN` versions.
    pub collnet_versions: Vec<u32>,
}

/// Load options that make the host load exactly `spec` with versions ≤ `version`.
pub fn options(version: u32) -> LoadOptions {
    LoadOptions {
        max_net_version: version,
        in_tree: false,
        strict: true,
        ..LoadOptions::default()
    }
}

/// Opens `spec` (a name resolved like NCCL's `openPluginLib()`, or a path) and
/// lists its plugin symbols. Runs library constructors, nothing else.
pub fn probe(spec: &str) -> Result<Probe, String> {
    let dirs = search_dirs(&options(12));
    let out = open_plugin_lib(spec, "libnccl-net", &dirs);
    let tried: Vec<String> = out
        .attempts
        .iter()
        .map(|a| format!("{} ({:?})", a.file, a.result))
        .collect();
    let Some(lib) = out.lib else {
        return Err(format!("could not open plugin '{spec}': tried {}", tried.join("; ")));
    };
    let syms = exported_symbols(&lib);
    let mut versions: Vec<ExportedVersion> = syms
        .iter()
        .filter(|s| s.ty == PluginType::Net)
        .map(|s| ExportedVersion {
            version: s.version,
            name: s.name.clone(),
        })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.version));
    let collnet_versions = syms
        .iter()
        .filter(|s| s.ty == PluginType::CollNet)
        .map(|s| s.version)
        .collect();
    let path = syms
        .iter()
        .find_map(|s| {
            let c = std::ffi::CString::new(s.symbol).ok()?;
            lib.symbol(&c).and_then(PluginLibrary::file_of)
        })
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| lib.opened_as().to_owned());
    Ok(Probe {
        path,
        versions,
        collnet_versions,
    })
}

/// Loads `spec` for API version `version` through the host (init, devices and the
/// device-type check included). An error is the host's message.
pub fn load(spec: &str, version: u32) -> Result<Arc<dyn NetPlugin>, String> {
    let loaded = ferroccl::plugin::load_net_from(spec, &options(version)).map_err(|e| e.to_string())?;
    let got = loaded.plugin.info().version;
    if got != version {
        return Err(format!(
            "the host loaded ncclNetPlugin_v{got}, not v{version} (is v{version} exported?)"
        ));
    }
    Ok(loaded.plugin)
}
