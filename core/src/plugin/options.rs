//! Host options for plugin loading (`NCCL_NET_PLUGIN`, `NCCL_NET`, ferroccl extensions),
//! read from the process configuration (environment and `nccl.conf`, NCCL's precedence).

use std::collections::HashMap;
use std::path::PathBuf;

use super::PluginError;
use crate::config::StrParam;
use crate::config::params::{NET, NET_MAX_VERSION, NET_PLUGIN, NET_STRICT, PLUGIN_PATH, PROFILER_PLUGIN, TUNER_PLUGIN};

/// Newest `ncclNet` version the host can drive.
pub const MAX_NET_VERSION: u32 = 12;
/// Oldest `ncclNet` version NCCL 2.30.7 (and ferroccl) accepts.
pub const MIN_NET_VERSION: u32 = 6;

/// Everything that steers plugin resolution. Build it with [`LoadOptions::from_env`]
/// (or [`LoadOptions::from_env_map`] in tests), or field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// `NCCL_NET_PLUGIN`: `None` = unset (→ `libnccl-net.so`), `"none"`, a name, a
    /// path, a comma-separated list, or a prefix of `STATIC_PLUGIN`.
    pub net_plugin: Option<String>,
    /// `NCCL_NET`: only a plugin whose vtable `name` equals this (case-insensitively)
    /// may be chosen; disables fallback to differently named plugins. `"Socket"` and
    /// `"IB"` also select ferroccl's in-tree plugins (`FerrocclSocket`, `FerrocclIB`).
    pub net: Option<String>,
    /// `FERROCCL_NET_STRICT=1`: fail instead of falling back past the first
    /// candidate (see the module docs of [`crate::plugin`] for the exact rule).
    pub strict: bool,
    /// `FERROCCL_NET_MAX_VERSION`: newest `ncclNetPlugin_vN` symbol to probe
    /// (6 ..= 12; default 12). Symbols above the cap are ignored as if absent.
    pub max_net_version: u32,
    /// `FERROCCL_PLUGIN_PATH`: colon-separated directories searched for in-tree
    /// plugins and for bare names the dynamic loader did not find.
    pub plugin_path: Vec<PathBuf>,
    /// Also search the running executable's directory and its parent (default true).
    pub search_exe_dirs: bool,
    /// Append the in-tree IB and Socket plugins after the external ones (default true;
    /// NCCL always does; tests turn it off to stay independent of those plugins).
    pub in_tree: bool,
    /// `NCCL_TUNER_PLUGIN`.
    pub tuner_plugin: Option<String>,
    /// `NCCL_PROFILER_PLUGIN`.
    pub profiler_plugin: Option<String>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            net_plugin: None,
            net: None,
            strict: false,
            max_net_version: MAX_NET_VERSION,
            plugin_path: Vec::new(),
            search_exe_dirs: true,
            in_tree: true,
            tuner_plugin: None,
            profiler_plugin: None,
        }
    }
}

impl LoadOptions {
    /// Reads the process configuration as NCCL does: the environment over
    /// `NCCL_CONF_FILE` / `~/.nccl.conf` over `/etc/nccl.conf`
    /// ([`crate::config::Config::global`], which also applies the files to the
    /// environment). Invalid values of ferroccl's own variables are logged (WARN)
    /// and replaced by their defaults; use [`LoadOptions::try_from_config`] to get
    /// them as errors.
    pub fn from_env() -> Self {
        let cfg = crate::config::Config::global();
        Self::from_lookup_lossy(|k| cfg.raw(k).map(str::to_owned))
    }

    /// Like [`LoadOptions::from_env`], with invalid values of ferroccl's own
    /// variables as errors.
    pub fn try_from_config() -> Result<Self, PluginError> {
        let cfg = crate::config::Config::global();
        Self::try_from_lookup(|k| cfg.raw(k).map(str::to_owned))
    }

    /// Like [`LoadOptions::from_env`], from a map of variable → value (tests).
    pub fn from_env_map(vars: &HashMap<String, String>) -> Self {
        Self::from_lookup_lossy(|k| vars.get(k).cloned())
    }

    fn from_lookup_lossy(get: impl Fn(&str) -> Option<String>) -> Self {
        let own = [NET_STRICT.name, NET_MAX_VERSION.name];
        // Without ferroccl's own variables nothing can fail to parse.
        let mut o = Self::try_from_lookup(|k| if own.contains(&k) { None } else { get(k) }).unwrap_or_default();
        if let Some(v) = get(NET_STRICT.name).filter(|v| !v.is_empty()) {
            match parse_bool(&v) {
                Some(b) => o.strict = b,
                None => tracing::warn!(target: "ferroccl::plugin", "{}={v} is not 0 or 1; ignored", NET_STRICT.name),
            }
        }
        if let Some(v) = get(NET_MAX_VERSION.name).filter(|v| !v.is_empty()) {
            match parse_version(&v) {
                Ok(n) => o.max_net_version = n,
                Err(e) => tracing::warn!(target: "ferroccl::plugin", "{e}; using {MAX_NET_VERSION}"),
            }
        }
        o
    }

    /// Reads options through `get` (variable name → value), reporting invalid
    /// values of `FERROCCL_NET_MAX_VERSION` / `FERROCCL_NET_STRICT` as errors.
    /// Empty values count as unset, as in NCCL's `ncclGetEnv` users.
    pub fn try_from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, PluginError> {
        let get = |p: &StrParam| get(p.name).filter(|v| !v.is_empty());
        let mut o = LoadOptions {
            net_plugin: get(&NET_PLUGIN),
            net: get(&NET),
            ..Default::default()
        };
        if let Some(v) = get(&NET_STRICT) {
            o.strict = parse_bool(&v).ok_or(PluginError::InvalidOption {
                option: NET_STRICT.name,
                value: v,
                expected: "0 or 1",
            })?;
        }
        if let Some(v) = get(&NET_MAX_VERSION) {
            o.max_net_version = parse_version(&v)?;
        }
        if let Some(v) = get(&PLUGIN_PATH) {
            o.plugin_path = v.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect();
        }
        o.tuner_plugin = get(&TUNER_PLUGIN);
        o.profiler_plugin = get(&PROFILER_PLUGIN);
        Ok(o)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "true" | "TRUE" | "True" | "yes" => Some(true),
        "0" | "false" | "FALSE" | "False" | "no" => Some(false),
        _ => None,
    }
}

fn parse_version(v: &str) -> Result<u32, PluginError> {
    let bad = || PluginError::InvalidOption {
        option: NET_MAX_VERSION.name,
        value: v.to_owned(),
        expected: "an integer from 6 to 12",
    };
    let n: u32 = v.trim().trim_start_matches(['v', 'V']).parse().map_err(|_| bad())?;
    if (MIN_NET_VERSION..=MAX_NET_VERSION).contains(&n) {
        Ok(n)
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn env_map_is_read() {
        let o = LoadOptions::from_env_map(&map(&[
            ("NCCL_NET_PLUGIN", "a,b"),
            ("NCCL_NET", "Socket"),
            ("FERROCCL_NET_STRICT", "1"),
            ("FERROCCL_NET_MAX_VERSION", "9"),
            ("FERROCCL_PLUGIN_PATH", "/x:/y"),
        ]));
        assert_eq!(o.net_plugin.as_deref(), Some("a,b"));
        assert_eq!(o.net.as_deref(), Some("Socket"));
        assert!(o.strict);
        assert_eq!(o.max_net_version, 9);
        assert_eq!(o.plugin_path, vec![PathBuf::from("/x"), PathBuf::from("/y")]);
    }

    #[test]
    fn bad_cap_is_an_error_or_default() {
        let m = map(&[("FERROCCL_NET_MAX_VERSION", "5")]);
        assert!(matches!(
            LoadOptions::try_from_lookup(|k| m.get(k).cloned()),
            Err(PluginError::InvalidOption {
                option: "FERROCCL_NET_MAX_VERSION",
                ..
            })
        ));
        assert_eq!(LoadOptions::from_env_map(&m).max_net_version, 12);
        let m = map(&[("FERROCCL_NET_MAX_VERSION", "v7"), ("NCCL_NET", "")]);
        let o = LoadOptions::from_env_map(&m);
        assert_eq!(o.max_net_version, 7);
        assert_eq!(o.net, None);
    }
}
