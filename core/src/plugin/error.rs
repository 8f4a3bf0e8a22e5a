//! Errors of the plugin host.

use std::path::PathBuf;

use super::net::NetError;

/// Why loading a plugin failed. Every message says what was expected, what was
/// found and, where there is one, what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// No file could be opened for the requested library name.
    #[error("plugin library '{requested}' not found (tried: {}); give a full path, or put the library's directory on LD_LIBRARY_PATH or FERROCCL_PLUGIN_PATH", tried.join(", "))]
    NotFound {
        /// The name or path as requested.
        requested: String,
        /// Every file name tried, in order.
        tried: Vec<String>,
    },
    /// The file exists but `dlopen` failed (missing dependency, wrong architecture,
    /// undefined symbol, …).
    #[error("dlopen({file}) failed: {dlerror}")]
    DlOpen {
        /// The file given to `dlopen`.
        file: String,
        /// The `dlerror()` text.
        dlerror: String,
    },
    /// The library exports none of the symbols searched for.
    #[error("{file} exports none of {expected} (only symbols up to version {cap} were searched)")]
    NoSymbol {
        /// The library.
        file: PathBuf,
        /// A description of the symbols searched (e.g. `ncclNetPlugin_v12 … ncclNetPlugin_v6`).
        expected: String,
        /// The version cap in force.
        cap: u32,
    },
    /// A slot NCCL calls without a NULL check is NULL.
    #[error("plugin '{plugin}' (ncclNet v{version}) has a NULL '{slot}' function pointer, which NCCL requires")]
    NullSlot {
        /// Vtable `name`.
        plugin: String,
        /// API version.
        version: u32,
        /// The slot's field name.
        slot: &'static str,
    },
    /// A call made while loading (init, devices, getProperties) failed.
    #[error("plugin '{plugin}' (ncclNet v{version}) {call} failed: {source}")]
    Call {
        /// Vtable `name`.
        plugin: String,
        /// API version.
        version: u32,
        /// The call (`init`, `devices`, `getProperties(0)`).
        call: &'static str,
        /// The error the call returned.
        #[source]
        source: NetError,
    },
    /// `devices()` reported no device.
    #[error("plugin '{plugin}' (ncclNet v{version}) reports 0 devices; NCCL disables such a plugin")]
    NoDevices {
        /// Vtable `name`.
        plugin: String,
        /// API version.
        version: u32,
    },
    /// Device 0 reports a device-offload type ferroccl cannot drive.
    #[error("plugin '{plugin}' device 0 reports netDeviceType {device_type} version {device_version}: {why}")]
    DeviceTypeUnusable {
        /// Vtable `name`.
        plugin: String,
        /// `netDeviceType` of device 0.
        device_type: i32,
        /// `netDeviceVersion` of device 0.
        device_version: i32,
        /// Why it cannot be used.
        why: String,
    },
    /// No candidate could be used; the report lists each one and why it was rejected.
    #[error("failed to initialize any NET plugin:\n{report}")]
    NoPlugin {
        /// The formatted resolution report.
        report: String,
    },
    /// Strict mode (`FERROCCL_NET_STRICT=1`) refused to fall back.
    #[error("FERROCCL_NET_STRICT=1: the first candidate '{candidate}' was rejected ({why}); not falling back")]
    Strict {
        /// The candidate that had to succeed.
        candidate: String,
        /// Why it was rejected.
        why: String,
    },
    /// A host option has an invalid value.
    #[error("invalid value '{value}' for {option}: expected {expected}")]
    InvalidOption {
        /// The option or environment variable.
        option: &'static str,
        /// The value found.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The plugin type is disabled by its `NCCL_*_PLUGIN=none` setting.
    #[error("{what} disabled by {variable}=none")]
    Disabled {
        /// The plugin type (`tuner`, `profiler`).
        what: &'static str,
        /// The variable.
        variable: &'static str,
    },
    /// An earlier load attempt of this plugin type failed; NCCL never retries in that process.
    #[error("{what} plugin load failed earlier in this process and is not retried: {first_error}")]
    StickyFailure {
        /// The plugin type.
        what: &'static str,
        /// The first error.
        first_error: String,
    },
}
