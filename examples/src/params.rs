//! `ferroccl-info params`: every parameter, the runtime's
//! ([`ferroccl::config::runtime_params`]) and each in-tree plugin's as the
//! plugin itself declares it (its `ferrocclParams_v1` export, read from the
//! built library: [`plugin_params`]), with its type, default, accepted range,
//! current value and where that value came from, as NCCL 2.30's parameter
//! lister does. Sources, in NCCL's precedence (`src/misc/param.cc`,
//! `initEnv`): `environment`, `NCCL_CONF_FILE`, `~/.nccl.conf`,
//! `/etc/nccl.conf`, `default`; and `env plugin <name>` for a value the env
//! plugin (`NCCL_ENV_PLUGIN`) returned in place of those (`src/plugin/env.cc`).

use std::path::{Path, PathBuf};

use ferroccl::config::{Config, IntParamExt, Param, Source, StrParamExt, params, runtime_params};
use serde::Serialize;

/// The in-tree plugins whose parameters are listed, in this order: who reads
/// them (the `read by` column), the name `NCCL_*_PLUGIN` takes for them, and
/// their library prefix (NCCL's `openPluginLib()`).
pub const IN_TREE_PLUGINS: [(&str, &str, &str); 4] = [
    ("tuner-rules", "rules", "libnccl-tuner"),
    ("profiler-trace", "trace", "libnccl-profiler"),
    ("net-socket", "socket", "libnccl-net"),
    ("net-ib", "ib", "libnccl-net"),
];

/// Every parameter listed, with who reads it: the runtime's, then each in-tree
/// plugin's, asked from its library (found as `NCCL_*_PLUGIN=<name>` would find
/// it, with ferroccl's search directories `dirs`); and one line per plugin
/// whose parameters could not be read (library not found, no export), saying why.
pub fn listed_params(dirs: &[PathBuf]) -> (Vec<(&'static str, Param)>, Vec<String>) {
    let mut list: Vec<(&'static str, Param)> = runtime_params().map(|p| ("runtime", p)).collect();
    let mut missing = Vec::new();
    for (reader, name, prefix) in IN_TREE_PLUGINS {
        match ferroccl::plugin::params::library_params(name, prefix, dirs) {
            Ok(ps) => list.extend(ps.into_iter().map(|p| (reader, p))),
            Err(e) => missing.push(format!("{reader}: parameters not listed: {e}")),
        }
    }
    (list, missing)
}

/// [`listed_params`] with the plugin directories the runtime searches under `cfg`
/// (`FERROCCL_PLUGIN_PATH`, then the executable's directory and its parent).
pub fn plugin_params(cfg: &Config) -> (Vec<(&'static str, Param)>, Vec<String>) {
    let path = params::PLUGIN_PATH.name;
    let vars = cfg
        .raw(path)
        .map(|v| (path.to_owned(), v.to_owned()))
        .into_iter()
        .collect();
    let opts = ferroccl::plugin::LoadOptions::from_env_map(&vars);
    listed_params(&ferroccl::plugin::library::search_dirs(&opts))
}

/// One parameter as listed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ParamRow {
    /// Variable name (`NCCL_BUFFSIZE`).
    pub name: String,
    /// Who reads it: `runtime`, `net-socket`, `net-ib`.
    pub reader: String,
    /// `int` or `string`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Value when unset (`null`: none).
    pub default: Option<String>,
    /// Accepted values: `[min, max]` for integers, the choices for a string with
    /// a fixed set, `any` otherwise.
    pub range: String,
    /// The value in effect: the setting if valid, else the default.
    pub value: Option<String>,
    /// `environment`, `NCCL_CONF_FILE`, `~/.nccl.conf`, `/etc/nccl.conf`,
    /// `env plugin <name>` or `default`.
    pub source: String,
    /// The file a file source names.
    pub file: Option<String>,
    /// Why the set value is rejected, if it is.
    pub error: Option<String>,
    /// What it controls.
    pub description: String,
}

/// Names the source of `setting` as NCCL's precedence list does; `env` is the
/// environment the configuration was read from (for `NCCL_CONF_FILE`).
pub fn source_name(source: &Source, conf_file: Option<&str>) -> String {
    match source {
        Source::Env => "environment".into(),
        Source::File(p) if p == Path::new("/etc/nccl.conf") => "/etc/nccl.conf".into(),
        Source::File(p) if conf_file.is_some_and(|c| !c.is_empty() && Path::new(c) == p) => {
            params::CONF_FILE.name.into()
        }
        Source::File(_) => "~/.nccl.conf".into(),
        Source::EnvPlugin(n) => format!("env plugin {n}"),
    }
}

/// The parameters `list` (with who reads each), in order, as `cfg` sees them.
/// `conf_file` is `NCCL_CONF_FILE` as the process environment had it.
pub fn rows(cfg: &Config, conf_file: Option<&str>, list: &[(&str, Param)]) -> Vec<ParamRow> {
    list.iter()
        .map(|&(reader, p)| {
            let set = cfg.setting(p.name()).filter(|s| !s.value.is_empty());
            let (source, file) = match set {
                Some(s) => (
                    source_name(&s.source, conf_file),
                    match &s.source {
                        Source::File(f) => Some(f.display().to_string()),
                        Source::Env | Source::EnvPlugin(_) => None,
                    },
                ),
                None => ("default".to_string(), None),
            };
            let error = cfg.check(p).err().map(|e| e.to_string());
            let (kind, default, range, value) = match p {
                Param::Int(ip) => {
                    let value = ip.get(cfg).unwrap_or(ip.default);
                    (
                        "int",
                        Some(ip.default.to_string()),
                        format!("[{}, {}]", ip.min, ip.max),
                        Some(value.to_string()),
                    )
                }
                Param::Str(sp) => {
                    let value = match sp.get_checked(cfg) {
                        Ok(v) => v.map(str::to_string),
                        Err(_) => sp.default.map(str::to_string),
                    };
                    let range = if sp.choices.is_empty() {
                        "any".to_string()
                    } else {
                        sp.choices.join("|")
                    };
                    ("string", sp.default.map(str::to_string), range, value)
                }
            };
            ParamRow {
                name: p.name().to_string(),
                reader: reader.to_string(),
                kind: kind.to_string(),
                default,
                range,
                value,
                source,
                file,
                error,
                description: p.description().to_string(),
            }
        })
        .collect()
}

/// The table `ferroccl-info params` prints.
pub fn render(rows: &[ParamRow]) -> String {
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut s = format!(
        "{:<w$}  {:<10}  {:<6}  {:<16}  {:<24}  {:<16}  {:<14}  description\n",
        "name", "read by", "type", "default", "range", "value", "source"
    );
    for r in rows {
        let source = match &r.file {
            Some(f) => format!("{} ({f})", r.source),
            None => r.source.clone(),
        };
        s.push_str(&format!(
            "{:<w$}  {:<10}  {:<6}  {:<16}  {:<24}  {:<16}  {:<14}  {}\n",
            r.name,
            r.reader,
            r.kind,
            dash(&r.default),
            r.range,
            dash(&r.value),
            source,
            r.description
        ));
        if let Some(e) = &r.error {
            s.push_str(&format!("{:<w$}  invalid: {e}\n", ""));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_named_as_nccl_orders_them() {
        // The IB plugin's parameters come from the built plugin (cargo build --workspace).
        let (list, missing) = listed_params(&ferroccl::plugin::library::search_dirs(&Default::default()));
        assert!(missing.is_empty(), "{missing:?}");
        let cfg = Config::from_sources(
            [("NCCL_DEBUG".to_string(), "WARN".to_string())],
            [
                (Path::new("/x/my.conf"), "NCCL_BUFFSIZE=8192\nNCCL_DEBUG=INFO\n"),
                (Path::new("/etc/nccl.conf"), "NCCL_BUFFSIZE=1\nNCCL_IB_SL=3\n"),
            ],
        );
        let rows = rows(&cfg, Some("/x/my.conf"), &list);
        let get = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert_eq!(get("NCCL_DEBUG").source, "environment");
        assert_eq!(get("NCCL_BUFFSIZE").source, "NCCL_CONF_FILE");
        assert_eq!(get("NCCL_BUFFSIZE").value.as_deref(), Some("8192"));
        assert_eq!(get("NCCL_IB_SL").source, "/etc/nccl.conf");
        assert_eq!(get("NCCL_IB_SL").file.as_deref(), Some("/etc/nccl.conf"));
        assert_eq!(get("NCCL_IB_TC").source, "default");
        // Without NCCL_CONF_FILE the first file is ~/.nccl.conf.
        let rows = super::rows(&cfg, None, &list);
        assert_eq!(
            rows.iter().find(|r| r.name == "NCCL_BUFFSIZE").unwrap().source,
            "~/.nccl.conf"
        );
        assert!(render(&rows).contains("NCCL_IB_SL"));
    }
}
