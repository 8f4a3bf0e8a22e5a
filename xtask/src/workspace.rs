//! The workspace as `cargo metadata` describes it: where it is, where cargo
//! builds, the tool binaries and the plugin crates under `plugins/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The package whose binaries `dist` ships as the tools.
pub const TOOLS_PACKAGE: &str = "ferroccl-examples";

/// Plugin kinds and NCCL's file prefix for each (`libnccl-<kind>-<name>.so`,
/// NCCL 2.30.7 `src/plugin/plugin_open.cc`: `libnccl-net`, `libnccl-tuner`,
/// `libnccl-profiler`, `libnccl-env`).
pub const PLUGIN_KINDS: [&str; 4] = ["net", "tuner", "profiler", "env"];

/// One plugin crate under `plugins/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    /// Cargo package name (`ferroccl-net-socket`).
    pub package: String,
    /// The cdylib's crate name (`nccl_net_socket`); cargo writes `lib<lib_name>.so`.
    pub lib_name: String,
    /// The file name NCCL looks for (`libnccl-net-socket.so`).
    pub nccl_file: String,
    /// The group of `scripts/system-packages.txt` its build needs
    /// (`[package.metadata.ferroccl] system-deps`), if any.
    pub system_deps: Option<String>,
}

impl Plugin {
    /// The name to give `NCCL_NET_PLUGIN` & co. (`socket` for `libnccl-net-socket.so`).
    pub fn short_name(&self) -> &str {
        let stem = self.nccl_file.trim_start_matches("lib").trim_end_matches(".so");
        PLUGIN_KINDS
            .iter()
            .find_map(|k| stem.strip_prefix(&format!("nccl-{k}-")))
            .unwrap_or(stem)
    }
}

/// What `dist` needs to know about the workspace.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The workspace root (where `Cargo.toml`, `README.md` and `scripts/` are).
    pub root: PathBuf,
    /// Cargo's target directory.
    pub target_dir: PathBuf,
    /// Binary names of [`TOOLS_PACKAGE`].
    pub tools: Vec<String>,
    /// Every plugin crate under `plugins/`, sorted by package name.
    pub plugins: Vec<Plugin>,
}

/// The cargo to run: `$CARGO` (set by `cargo run`/`cargo test`), else `cargo`.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The NCCL file name for a plugin cdylib crate name `nccl_<kind>_<name>`:
/// `libnccl-<kind>-<name>.so` (the part after the kind is kept as written).
///
/// # Errors
/// When `lib_name` does not follow `nccl_<kind>_<name>` with a kind of
/// [`PLUGIN_KINDS`]; such a crate must set `[package.metadata.ferroccl] nccl-file`.
pub fn nccl_file_name(lib_name: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "lib name '{lib_name}' does not follow nccl_<kind>_<name> with kind one of {PLUGIN_KINDS:?} \
             (or set [package.metadata.ferroccl] nccl-file = \"libnccl-<kind>-<name>.so\")"
        )
    };
    let rest = lib_name.strip_prefix("nccl_").ok_or_else(bad)?;
    let (kind, name) = rest.split_once('_').ok_or_else(bad)?;
    if !PLUGIN_KINDS.contains(&kind) || name.is_empty() {
        return Err(bad());
    }
    Ok(format!("libnccl-{kind}-{name}.so"))
}

impl Workspace {
    /// Reads the workspace with `cargo metadata --no-deps` (run from `dir`).
    ///
    /// # Errors
    /// When cargo fails, or a plugin crate has no cdylib or an unusable name.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let out = cargo()
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(dir)
            .output()
            .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: bad JSON: {e}"))?;
        Self::from_metadata(&v)
    }

    /// Builds the description from `cargo metadata` JSON (`--no-deps`).
    ///
    /// # Errors
    /// As [`Workspace::load`].
    pub fn from_metadata(v: &Value) -> Result<Self, String> {
        let root = PathBuf::from(
            v["workspace_root"]
                .as_str()
                .ok_or("cargo metadata: no workspace_root")?,
        );
        let target_dir = PathBuf::from(
            v["target_directory"]
                .as_str()
                .ok_or("cargo metadata: no target_directory")?,
        );
        let plugins_dir = root.join("plugins");
        let mut tools = Vec::new();
        let mut plugins = Vec::new();
        for p in v["packages"].as_array().into_iter().flatten() {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            let has_kind = |t: &Value, k: &str| t["kind"].as_array().is_some_and(|ks| ks.iter().any(|x| x == k));
            if name == TOOLS_PACKAGE {
                tools = targets
                    .iter()
                    .filter(|t| has_kind(t, "bin"))
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect();
            }
            if !manifest.starts_with(&plugins_dir) {
                continue;
            }
            let lib = targets
                .iter()
                .find(|t| has_kind(t, "cdylib"))
                .and_then(|t| t["name"].as_str())
                .ok_or_else(|| format!("plugin crate {name} ({}) builds no cdylib", manifest.display()))?
                .replace('-', "_");
            let meta = &p["metadata"]["ferroccl"];
            let nccl_file = match meta["nccl-file"].as_str() {
                Some(f) => f.to_string(),
                None => nccl_file_name(&lib).map_err(|e| format!("plugin crate {name}: {e}"))?,
            };
            plugins.push(Plugin {
                package: name,
                lib_name: lib,
                nccl_file,
                system_deps: meta["system-deps"].as_str().map(str::to_owned),
            });
        }
        if tools.is_empty() {
            return Err(format!(
                "cargo metadata: package {TOOLS_PACKAGE} with binaries not found"
            ));
        }
        plugins.sort_by(|a, b| a.package.cmp(&b.package));
        Ok(Workspace {
            root,
            target_dir,
            tools,
            plugins,
        })
    }

    /// The packages `cargo xtask dist` builds on every machine: the tools and the
    /// plugins that need no system packages. These are the quick start's crates.
    pub fn unconditional_packages(&self) -> Vec<String> {
        let mut v = vec![TOOLS_PACKAGE.to_string()];
        v.extend(
            self.plugins
                .iter()
                .filter(|p| p.system_deps.is_none())
                .map(|p| p.package.clone()),
        );
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_names() {
        assert_eq!(nccl_file_name("nccl_net_socket").unwrap(), "libnccl-net-socket.so");
        assert_eq!(nccl_file_name("nccl_net_ib").unwrap(), "libnccl-net-ib.so");
        assert_eq!(nccl_file_name("nccl_tuner_table").unwrap(), "libnccl-tuner-table.so");
        assert_eq!(
            nccl_file_name("nccl_profiler_trace").unwrap(),
            "libnccl-profiler-trace.so"
        );
        assert_eq!(nccl_file_name("nccl_net_my_nic").unwrap(), "libnccl-net-my_nic.so");
        for bad in ["net_socket", "nccl_net", "nccl_net_", "nccl_bogus_x", "socket"] {
            let e = nccl_file_name(bad).expect_err(bad);
            assert!(e.contains(bad) && e.contains("nccl-file"), "{e}");
        }
    }

    #[test]
    fn plugins_from_metadata() {
        let v = serde_json::json!({
            "workspace_root": "/ws",
            "target_directory": "/ws/target",
            "packages": [
                { "name": "ferroccl-examples", "manifest_path": "/ws/examples/Cargo.toml", "metadata": null,
                  "targets": [ { "name": "ferroccl-perf", "kind": ["bin"] }, { "name": "ferroccl_examples", "kind": ["lib"] } ] },
                { "name": "ferroccl-net-socket", "manifest_path": "/ws/plugins/net-socket/Cargo.toml", "metadata": null,
                  "targets": [ { "name": "nccl_net_socket", "kind": ["cdylib", "rlib"] } ] },
                { "name": "ferroccl-net-ib", "manifest_path": "/ws/plugins/net-ib/Cargo.toml",
                  "metadata": { "ferroccl": { "system-deps": "ib" } },
                  "targets": [ { "name": "nccl_net_ib", "kind": ["cdylib", "rlib"] } ] },
                { "name": "zoo-good", "manifest_path": "/ws/testing/zoo-good/Cargo.toml", "metadata": null,
                  "targets": [ { "name": "zoo_good", "kind": ["cdylib"] } ] },
            ]
        });
        let ws = Workspace::from_metadata(&v).unwrap();
        assert_eq!(ws.tools, ["ferroccl-perf"]);
        assert_eq!(ws.plugins.len(), 2, "only crates under plugins/: {:?}", ws.plugins);
        assert_eq!(ws.plugins[0].nccl_file, "libnccl-net-ib.so");
        assert_eq!(ws.plugins[0].system_deps.as_deref(), Some("ib"));
        assert_eq!(ws.plugins[1].short_name(), "socket");
        assert_eq!(
            ws.unconditional_packages(),
            ["ferroccl-examples", "ferroccl-net-socket"]
        );
    }

    #[test]
    fn a_plugin_without_cdylib_is_an_error() {
        let v = serde_json::json!({
            "workspace_root": "/ws", "target_directory": "/ws/target",
            "packages": [
                { "name": "ferroccl-examples", "manifest_path": "/ws/examples/Cargo.toml", "metadata": null,
                  "targets": [ { "name": "ferroccl-perf", "kind": ["bin"] } ] },
                { "name": "half-done", "manifest_path": "/ws/plugins/half/Cargo.toml", "metadata": null,
                  "targets": [ { "name": "half_done", "kind": ["lib"] } ] },
            ]
        });
        let e = Workspace::from_metadata(&v).unwrap_err();
        assert!(e.contains("half-done") && e.contains("cdylib"), "{e}");
    }
}
