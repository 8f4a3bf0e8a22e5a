//! A plugin library's own parameters, as it exports them: `ferrocclParams_v1`
//! (a ferroccl extension, not NCCL's ABI; `ferroccl_plugin_api::params`). The
//! in-tree plugins declare, read and export their own `NCCL_*` parameters, so
//! the tools list them by asking each plugin, not from a copy in the runtime.

use std::path::PathBuf;

use ferroccl_plugin_api::params::{PARAMS_SYMBOL, Param, ferrocclParams_v1_fn, read_table};

use super::library::{PluginLibrary, open_plugin_lib};

/// The parameters `lib` exports: `None` when it has no `ferrocclParams_v1`,
/// else the table or why it could not be read (a failing call, a malformed
/// table). The library is pinned first: its code runs (see
/// [`PluginLibrary`]'s unloading rule). The descriptors live for the rest of
/// the process (see `ferroccl_plugin_api::params::read_table`).
pub fn exported_params(lib: &PluginLibrary) -> Option<Result<Vec<Param>, String>> {
    let sym = lib.symbol(PARAMS_SYMBOL)?;
    lib.pin();
    // SAFETY: a library exporting `ferrocclParams_v1` exports it with this C
    // signature (the extension's contract); `lib` is pinned, so it stays loaded.
    let f = unsafe { std::mem::transmute::<*const std::ffi::c_void, ferrocclParams_v1_fn>(sym) };
    // SAFETY: `f` is that function and its library stays loaded.
    Some(unsafe { read_table(f) }.map_err(|e| format!("{}: {e}", lib.opened_as())))
}

/// The parameters of the plugin library `requested` resolves to, opened as
/// NCCL's `openPluginLib()` opens it with `prefix` (`libnccl-net`,
/// `libnccl-tuner`, `libnccl-profiler`) and ferroccl's search directories
/// `dirs`. Errors: the library is not found or does not open (every file
/// tried is named), it does not export `ferrocclParams_v1`, or its table is
/// malformed.
pub fn library_params(requested: &str, prefix: &str, dirs: &[PathBuf]) -> Result<Vec<Param>, String> {
    let outcome = open_plugin_lib(requested, prefix, dirs);
    let Some(lib) = &outcome.lib else {
        return Err(format!("'{requested}' could not be loaded; tried {}", outcome.tried()));
    };
    exported_params(lib).unwrap_or_else(|| {
        Err(format!(
            "{} does not export {} (not a ferroccl plugin, or an older build)",
            lib.opened_as(),
            PARAMS_SYMBOL.to_string_lossy()
        ))
    })
}
