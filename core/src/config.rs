//! `NCCL_*` parameters: environment plus `nccl.conf` files, read once per process.
//!
//! Follows NCCL's `src/misc/param.cc` (`initEnv`, `setEnvFile`, `ncclLoadParam`):
//!
//! * precedence: real environment > `$NCCL_CONF_FILE` (if set and non-empty,
//!   otherwise `$HOME/.nccl.conf`) > `/etc/nccl.conf`; missing files are skipped;
//!   within one file the first assignment of a name wins (NCCL uses
//!   `setenv(name, value, 0)`);
//! * file syntax: one `NAME=VALUE` per line, trailing `\n` then `\r` stripped, a line
//!   whose first character is `#` is a comment, lines without `=` are ignored, the
//!   name is everything before the first `=` and the value everything after, no
//!   trimming, no quotes, no inline comments; name and value truncated to 1023
//!   bytes (NCCL's 4096-byte line pieces are not emulated: long lines stay whole);
//! * integers: `strtoll(s, NULL, 0)` syntax (optional leading whitespace and sign,
//!   `0x` hex, leading-`0` octal, else decimal); an empty value means the default.
//!   Unlike NCCL (which silently falls back to the default or ignores trailing
//!   garbage), unparsable or out-of-range values are a [`ConfigError`] naming the
//!   variable, where it came from and the accepted range.
//!
//! * **the files reach the environment**, as in NCCL: the first call of
//!   [`Config::global`] (made before the plugin host opens any library, and by
//!   every runtime entry point) applies every `NAME=VALUE` of the files with
//!   `setenv(name, value, 0)` semantics (never overwriting), so plugins reading
//!   their own `NCCL_*` variables with `getenv` see `nccl.conf` values too;
//! * **the env plugin** (`NCCL_ENV_PLUGIN`, NCCL's `src/plugin/env.cc`): right
//!   after the files reach the environment, [`Config::global`] loads and
//!   initialises the env plugin ([`crate::plugin::env`]); from then on every
//!   lookup of a name ([`Config::setting`] and everything built on it) returns
//!   what the plugin's `getEnv(name)` returns, as NCCL's `ncclGetEnv` does, so a
//!   plugin can override or hide any `NCCL_*` value ([`Source::EnvPlugin`]);
//! * **bounded reads** (not in NCCL): only regular files are read (a directory, a
//!   FIFO or a device such as `/dev/urandom` is skipped), at most
//!   [`MAX_CONF_BYTES`]; a file that is not read gets a WARN line once logging is
//!   up ([`Config::warnings`]); missing files stay silent.
//!
//! Every variable the runtime reads is declared here once, one line each
//! ([`params`], the list [`PARAMS`]; [`runtime_params`]): validated, and echoed
//! once at `NCCL_DEBUG=INFO` ([`Config::echo`]). The in-tree plugins declare,
//! read and export their own parameters (`ferroccl_plugin_api::params!`,
//! `ferrocclParams_v1`); the runtime does not list them. The merged view lives in a [`Config`]
//! (process-wide one via [`Config::global`]); tests build their own with
//! [`Config::from_sources`] or [`Config::load`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Max in-flight steps per connection (`NCCL_STEPS`); a constant, not a variable.
pub const NCCL_STEPS: usize = 8;

/// Max channels (`MAXCHANNELS` in NCCL).
pub const MAXCHANNELS: i64 = 64;

/// Where a variable's value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// The process environment.
    Env,
    /// A `nccl.conf`-syntax file.
    File(PathBuf),
    /// The env plugin named here (its table's `name`): its `getEnv` returned a
    /// value that differs from the environment's and the files' (or one they do
    /// not set). A plugin that passes a variable through keeps the variable's own
    /// source.
    EnvPlugin(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Env => f.write_str("environment"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::EnvPlugin(n) => write!(f, "env plugin {n}"),
        }
    }
}

/// A parameter value that was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not an integer in `strtoll(…, 0)` syntax, or it overflows `i64`.
    #[error("{name}={value:?} (from {origin}) is not a valid integer; expected an integer in [{min}, {max}]")]
    NotAnInteger {
        /// Variable name.
        name: String,
        /// The raw value.
        value: String,
        /// Where it was set.
        origin: Source,
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// An integer outside the accepted range.
    #[error("{name}={value} (from {origin}) is out of range; expected an integer in [{min}, {max}]")]
    OutOfRange {
        /// Variable name.
        name: String,
        /// The parsed value.
        value: i64,
        /// Where it was set.
        origin: Source,
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// Not a boolean.
    #[error("{name}={value:?} (from {origin}) is not a boolean; expected 0, 1, true, false, yes, no, on or off")]
    NotABool {
        /// Variable name.
        name: String,
        /// The raw value.
        value: String,
        /// Where it was set.
        origin: Source,
    },
    /// A string parameter with a value outside its accepted set.
    #[error("{name}={value:?} (from {origin}) is not accepted; expected one of {expected}")]
    BadChoice {
        /// Variable name.
        name: String,
        /// The raw value.
        value: String,
        /// Where it was set.
        origin: Source,
        /// The accepted values, comma separated.
        expected: String,
    },
    /// The env plugin's `init` failed: NCCL latches that error for the process
    /// (`ncclInitEnv`), so no communicator can be created.
    #[error("{0}")]
    EnvPluginInit(crate::plugin::env::EnvPluginError),
}

/// One variable as set in the environment or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The value, verbatim.
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// The merged view of environment and `nccl.conf` files, seen through the env
/// plugin when one is loaded.
#[derive(Debug, Clone, Default)]
pub struct Config {
    vars: HashMap<String, Setting>,
    /// Files that were not read, and why (WARN lines once logging starts).
    warnings: Vec<String>,
    /// The env plugin every lookup goes through (NCCL's `ncclGetEnv`), if any.
    env: Option<Arc<EnvLookup>>,
    /// INFO lines of the env plugin's loading (logged once logging starts).
    env_info: Vec<String>,
    /// The env plugin's latched `init` error.
    env_error: Option<crate::plugin::env::EnvPluginError>,
}

/// What a lookup through the env plugin gave, cached per name so that every
/// reader of a name sees one value for the life of the configuration (NCCL
/// caches parameters per process, `ncclLoadParam`).
#[derive(Clone, Copy)]
enum Looked {
    /// The plugin returned NULL: unset.
    Unset,
    /// The plugin returned the environment's (or file's) value: that setting.
    Same,
    /// The plugin's own value.
    Plugin(&'static Setting),
}

/// An env plugin's `getEnv`, copied out (`None`: NULL).
type GetEnv = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Lookups through an env plugin's `getEnv`.
struct EnvLookup {
    name: String,
    get: GetEnv,
    cache: Mutex<HashMap<String, Looked>>,
}

impl fmt::Debug for EnvLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvLookup")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl EnvLookup {
    fn lookup<'a>(&self, name: &str, base: Option<&'a Setting>) -> Option<&'a Setting> {
        let cached = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(name).copied();
        let looked = match cached {
            Some(l) => l,
            None => {
                // Called without the lock held: getEnv may be slow, and NCCL calls it
                // from any thread.
                let got = (self.get)(name);
                let fresh = match got {
                    None => Looked::Unset,
                    Some(v) if base.is_some_and(|b| b.value == v) => Looked::Same,
                    // Leaked once per name: a lookup's answer lives as long as the
                    // process, as the strings NCCL's getEnv returns do.
                    Some(v) => Looked::Plugin(Box::leak(Box::new(Setting {
                        value: v,
                        source: Source::EnvPlugin(self.name.clone()),
                    }))),
                };
                // A racing lookup of the same name may have won: keep its answer.
                *self
                    .cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(name.to_owned())
                    .or_insert(fresh)
            }
        };
        match looked {
            Looked::Unset => None,
            Looked::Same => base,
            Looked::Plugin(s) => Some(s),
        }
    }
}

/// Largest `nccl.conf` read, in bytes (NCCL has no limit; a configuration file is
/// a few hundred bytes, and a larger "file" is a mistake such as a device).
pub const MAX_CONF_BYTES: u64 = 1 << 20;

/// What reading one configuration file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfFile {
    /// No such file: silently skipped, as in NCCL.
    Missing,
    /// The file's text (invalid UTF-8 replaced).
    Text(String),
    /// Not read: the reason, for a WARN line.
    Skipped(String),
}

/// Reads `path` as NCCL's `setEnvFile` does, but bounded: only a regular file of
/// at most [`MAX_CONF_BYTES`] is read (a directory, FIFO, socket or device is
/// skipped, without blocking on a FIFO: it is opened non-blocking).
pub fn read_conf_file(path: &Path) -> ConfFile {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ConfFile::Missing,
        Err(e) => return ConfFile::Skipped(format!("config file {} cannot be opened: {e}; skipped", path.display())),
    };
    let meta = match f.metadata() {
        Ok(m) => m,
        Err(e) => return ConfFile::Skipped(format!("config file {}: fstat failed: {e}; skipped", path.display())),
    };
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return ConfFile::Skipped(format!(
            "config file {} is {what}, not a regular file; skipped",
            path.display()
        ));
    }
    if meta.len() > MAX_CONF_BYTES {
        return ConfFile::Skipped(format!(
            "config file {} is {} bytes, more than the {MAX_CONF_BYTES} bytes ferroccl reads from an nccl.conf; skipped",
            path.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    // `take` bounds a file that grows while it is read.
    if let Err(e) = f.take(MAX_CONF_BYTES + 1).read_to_end(&mut bytes) {
        return ConfFile::Skipped(format!("config file {} cannot be read: {e}; skipped", path.display()));
    }
    if bytes.len() as u64 > MAX_CONF_BYTES {
        return ConfFile::Skipped(format!(
            "config file {} grew past {MAX_CONF_BYTES} bytes while it was read; skipped",
            path.display()
        ));
    }
    ConfFile::Text(String::from_utf8_lossy(&bytes).into_owned())
}

/// Parses `nccl.conf` text into `(name, value)` pairs in file order (see module docs).
pub fn parse_conf(contents: &str) -> Vec<(String, String)> {
    fn trunc(s: &str) -> &str {
        let mut end = s.len().min(1023);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        &s[..end]
    }
    let mut out = Vec::new();
    for line in contents.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if name.is_empty() {
            continue; // setenv("") fails with EINVAL in NCCL
        }
        out.push((trunc(name).to_string(), trunc(value).to_string()));
    }
    out
}

/// Parses an integer the way `strtoll(s, NULL, 0)` reads it, but strictly: the whole
/// string (after leading whitespace, before trailing whitespace) must be the number.
/// Returns `None` if unparsable or out of `i64`.
pub fn parse_int(s: &str) -> Option<i64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let t = t.trim_end_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let mag = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        if mag == 1 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(mag).ok().map(|v| -v)
        }
    } else {
        i64::try_from(mag).ok()
    }
}

impl Config {
    /// The process-wide configuration: built on first call from the real
    /// environment and the files NCCL would read, then never changed. The first
    /// call also applies the files' assignments to the process environment without
    /// overwriting (NCCL's `initEnv`/`setEnvFile`: `setenv(name, value, 0)`), so
    /// that plugins reading `NCCL_*` with `getenv` see them; the plugin host calls
    /// this before it opens any library.
    pub fn global() -> &'static Config {
        static GLOBAL: OnceLock<Config> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let mut c = Config::from_process();
            // NCCL's ncclEnvPluginInit: initEnv() (the files reach the environment),
            // then the env plugin is loaded and initialised (src/plugin/env.cc).
            c.apply_to_environment();
            let load = crate::plugin::env::load_for_process();
            c.env_info = load.info;
            c.warnings.extend(load.warn);
            c.env_error = load.init_error;
            if let Some(p) = load.plugin {
                c = c.with_env_plugin(p.display_name(), move |n| p.get_env(n));
            }
            c
        })
    }

    /// Builds a configuration from the real environment and files (not cached,
    /// and not applied to the environment).
    pub fn from_process() -> Config {
        let env = std::env::vars_os()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect::<Vec<_>>();
        Config::load_with(env, read_conf_file)
    }

    /// Sets every variable that came from a file and is not in the environment
    /// (never overwriting: the environment wins, as with `setenv(…, 0)`).
    fn apply_to_environment(&self) {
        let mut names: Vec<&String> = self
            .vars
            .iter()
            .filter(|(_, s)| matches!(s.source, Source::File(_)))
            .map(|(k, _)| k)
            .collect();
        names.sort();
        for k in names {
            let v = &self.vars[k].value;
            if k.contains('\0') || v.contains('\0') || std::env::var_os(k).is_some() {
                continue;
            }
            // SAFETY: runs once, inside `Config::global`'s initialisation, which the
            // runtime and the plugin host reach before they open any plugin
            // library, as NCCL's own `initEnv` does on its first environment
            // lookup. Rust's environment accesses are synchronised with this;
            // the remaining hazard, foreign code calling `getenv` on another
            // thread at this very moment, is the one NCCL accepts too.
            unsafe { std::env::set_var(k, v) };
        }
    }

    /// Builds a configuration from an explicit environment, choosing files exactly as
    /// NCCL does (`$NCCL_CONF_FILE` if non-empty else `$HOME/.nccl.conf`, then
    /// `/etc/nccl.conf`) and reading them with `read_file` (`None` = missing).
    pub fn load(
        env: impl IntoIterator<Item = (String, String)>,
        read_file: impl Fn(&Path) -> Option<String>,
    ) -> Config {
        Config::load_with(env, |p| read_file(p).map_or(ConfFile::Missing, ConfFile::Text))
    }

    /// Like [`Config::load`], with a reader that can also refuse a file
    /// ([`ConfFile::Skipped`], kept in [`Config::warnings`]); [`read_conf_file`] is
    /// the real one.
    pub fn load_with(env: impl IntoIterator<Item = (String, String)>, read_file: impl Fn(&Path) -> ConfFile) -> Config {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let lookup = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        let mut files: Vec<PathBuf> = Vec::new();
        match lookup(params::CONF_FILE.name) {
            Some(f) if !f.is_empty() => files.push(PathBuf::from(f)),
            _ => {
                if let Some(home) = lookup("HOME") {
                    files.push(Path::new(home).join(".nccl.conf"));
                }
            }
        }
        files.push(PathBuf::from("/etc/nccl.conf"));
        let mut warnings = Vec::new();
        let contents: Vec<(PathBuf, String)> = files
            .into_iter()
            .filter_map(|p| match read_file(&p) {
                ConfFile::Text(c) => Some((p, c)),
                ConfFile::Missing => None,
                ConfFile::Skipped(why) => {
                    warnings.push(why);
                    None
                }
            })
            .collect();
        let mut c = Config::from_sources(env, contents.iter().map(|(p, c)| (p.as_path(), c.as_str())));
        c.warnings = warnings;
        c
    }

    /// Why configuration files were not read, and env plugin problems (each
    /// becomes a WARN line once logging is initialised).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// This configuration seen through an env plugin named `name` whose `getEnv`
    /// is `get`: every lookup of a name returns what `get` returns (NCCL's
    /// `ncclGetEnv`), asked once per name and then cached. A value equal to the
    /// environment's or a file's keeps that source; any other is
    /// [`Source::EnvPlugin`]; `None` makes the name unset.
    pub fn with_env_plugin(
        mut self,
        name: impl Into<String>,
        get: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Config {
        self.env = Some(Arc::new(EnvLookup {
            name: name.into(),
            get: Box::new(get),
            cache: Mutex::new(HashMap::new()),
        }));
        self
    }

    /// The name of the env plugin lookups go through (`None`: NCCL's internal
    /// default, the environment and files).
    pub fn env_plugin(&self) -> Option<&str> {
        self.env.as_ref().map(|e| e.name.as_str())
    }

    /// INFO lines of the env plugin's loading (which file, which version), for
    /// the log once it starts.
    pub fn env_plugin_info(&self) -> &[String] {
        &self.env_info
    }

    /// `Err` when the env plugin's `init` failed: NCCL's `ncclInitEnv` latches
    /// that error and every entry point returns it, so communicator creation
    /// fails with it.
    pub fn env_plugin_result(&self) -> Result<(), ConfigError> {
        match &self.env_error {
            Some(e) => Err(ConfigError::EnvPluginInit(e.clone())),
            None => Ok(()),
        }
    }

    /// Builds a configuration from an explicit environment and file contents given in
    /// precedence order (highest first). Earlier sources win; inside a file the first
    /// assignment wins.
    pub fn from_sources<'a>(
        env: impl IntoIterator<Item = (String, String)>,
        files: impl IntoIterator<Item = (&'a Path, &'a str)>,
    ) -> Config {
        let mut vars = HashMap::new();
        for (k, v) in env {
            vars.entry(k).or_insert(Setting {
                value: v,
                source: Source::Env,
            });
        }
        for (path, text) in files {
            for (k, v) in parse_conf(text) {
                vars.entry(k).or_insert_with(|| Setting {
                    value: v,
                    source: Source::File(path.to_path_buf()),
                });
            }
        }
        Config {
            vars,
            ..Config::default()
        }
    }

    /// The raw setting of `name`, if set anywhere (even to the empty string):
    /// with an env plugin, what its `getEnv` returns ([`Config::with_env_plugin`]).
    pub fn setting(&self, name: &str) -> Option<&Setting> {
        let base = self.vars.get(name);
        match &self.env {
            None => base,
            Some(e) => e.lookup(name, base),
        }
    }

    /// The raw value of `name`, if set anywhere (even to the empty string).
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.setting(name).map(|s| s.value.as_str())
    }

    /// The value of `name` if set and non-empty (NCCL treats empty as unset).
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.raw(name).filter(|v| !v.is_empty())
    }

    /// The value of `name` if set and non-empty, else `default`.
    pub fn get_str_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get_str(name).unwrap_or(default)
    }

    /// Integer parameter: `default` if unset or empty, else the value parsed with
    /// [`parse_int`], which must lie in `range`.
    pub fn get_int(&self, name: &str, default: i64, range: RangeInclusive<i64>) -> Result<i64, ConfigError> {
        let Some(s) = self.setting(name).filter(|s| !s.value.is_empty()) else {
            return Ok(default);
        };
        let (min, max) = (*range.start(), *range.end());
        let v = parse_int(&s.value).ok_or_else(|| ConfigError::NotAnInteger {
            name: name.to_string(),
            value: s.value.clone(),
            origin: s.source.clone(),
            min,
            max,
        })?;
        if !range.contains(&v) {
            return Err(ConfigError::OutOfRange {
                name: name.to_string(),
                value: v,
                origin: s.source.clone(),
                min,
                max,
            });
        }
        Ok(v)
    }

    /// Boolean parameter: `default` if unset or empty; integers (non-zero = true) or
    /// `true/false/yes/no/on/off` (ASCII case-insensitive).
    pub fn get_bool(&self, name: &str, default: bool) -> Result<bool, ConfigError> {
        let Some(s) = self.setting(name).filter(|s| !s.value.is_empty()) else {
            return Ok(default);
        };
        if let Some(v) = parse_int(&s.value) {
            return Ok(v != 0);
        }
        match s.value.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => Ok(true),
            "false" | "no" | "off" => Ok(false),
            _ => Err(ConfigError::NotABool {
                name: name.to_string(),
                value: s.value.clone(),
                origin: s.source.clone(),
            }),
        }
    }

    /// Every `NCCL_*` / `FERROCCL_*` variable that was set (environment or file),
    /// sorted by name, with its source and whether the runtime reads it (a
    /// [`PARAMS`] entry).
    ///
    /// With an env plugin each name is looked up through it; the names asked are
    /// those set in the environment or a file and every runtime parameter (a
    /// plugin cannot be asked which names it knows).
    pub fn set_params(&self) -> Vec<(&str, &Setting, bool)> {
        let mut v: BTreeMap<&str, &Setting> = BTreeMap::new();
        let names = self.vars.keys().map(String::as_str);
        let names: Vec<&str> = match self.env {
            Some(_) => names.chain(runtime_params().map(|p| p.name())).collect(),
            None => names.collect(),
        };
        for k in names {
            if (k.starts_with("NCCL_") || k.starts_with("FERROCCL_"))
                && let Some(s) = self.setting(k)
            {
                v.insert(k, s);
            }
        }
        v.into_iter().map(|(k, s)| (k, s, find_param(k).is_some())).collect()
    }

    /// The echo NCCL prints at `NCCL_DEBUG=INFO` (`"%s set by environment to %s."`),
    /// one line per variable from [`set_params`](Self::set_params), e.g.
    /// `NCCL_BUFFSIZE set by environment to 1048576.` or
    /// `NCCL_DEBUG set by file /etc/nccl.conf to INFO.`; invalid values of runtime
    /// parameters get ` (invalid: <why>)`, names the runtime does not read
    /// ` (not a runtime parameter)`: a plugin may read them (the in-tree plugins
    /// declare their own parameters, `ferroccl-info params` lists them), but the
    /// runtime does not know its plugins' parameters.
    pub fn echo(&self) -> Vec<String> {
        self.set_params()
            .into_iter()
            .map(|(k, s, _)| {
                let note = match find_param(k).map(|p| self.check(p)) {
                    None => " (not a runtime parameter)".to_owned(),
                    Some(Err(e)) => format!(" (invalid: {e})"),
                    Some(Ok(())) => String::new(),
                };
                format!("{k} set by {} to {}.{note}", s.source, s.value)
            })
            .collect()
    }

    /// Checks every runtime integer and choice parameter ([`runtime_params`]);
    /// returns all errors.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let errs: Vec<ConfigError> = runtime_params().filter_map(|p| self.check(p).err()).collect();
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    /// Validates the value of `p` (an integer in its range, a string among its
    /// choices); unset or empty is valid.
    pub fn check(&self, p: Param) -> Result<(), ConfigError> {
        match p {
            Param::Int(p) => p.get(self).map(|_| ()),
            Param::Str(p) => p.get_checked(self).map(|_| ()),
        }
    }
}

pub use ferroccl_plugin_api::params::{IntParam, Param, StrParam};

/// Reading a declared integer parameter from a [`Config`].
pub trait IntParamExt {
    /// The value from `cfg` ([`Config::get_int`] with this parameter's default and range).
    fn get(&self, cfg: &Config) -> Result<i64, ConfigError>;
}

impl IntParamExt for IntParam {
    fn get(&self, cfg: &Config) -> Result<i64, ConfigError> {
        cfg.get_int(self.name, self.default, self.min..=self.max)
    }
}

/// Reading a declared string parameter from a [`Config`].
pub trait StrParamExt {
    /// The value from `cfg` (set and non-empty), else the default.
    fn get<'a>(&self, cfg: &'a Config) -> Option<&'a str>;
    /// Like [`get`](Self::get), but checks the value against the choices.
    fn get_checked<'a>(&self, cfg: &'a Config) -> Result<Option<&'a str>, ConfigError>;
}

impl StrParamExt for StrParam {
    fn get<'a>(&self, cfg: &'a Config) -> Option<&'a str> {
        cfg.get_str(self.name).or(self.default)
    }

    fn get_checked<'a>(&self, cfg: &'a Config) -> Result<Option<&'a str>, ConfigError> {
        let set = cfg.setting(self.name).filter(|s| !s.value.is_empty());
        if let Some(s) =
            set.filter(|s| !self.choices.is_empty() && !self.choices.iter().any(|c| c.eq_ignore_ascii_case(&s.value)))
        {
            return Err(ConfigError::BadChoice {
                name: self.name.to_string(),
                value: s.value.clone(),
                origin: s.source.clone(),
                expected: self.choices.join(", "),
            });
        }
        Ok(self.get(cfg))
    }
}

/// The parameters the runtime reads, declared one line each (NCCL's
/// `NCCL_PARAM`, `src/include/param.h`); the in-tree plugins declare their own
/// (`ferroccl_plugin_api::params!` in each plugin crate).
pub mod params {
    use super::MAXCHANNELS;

    pub use ferroccl_plugin_api::params::socket::{
        FAMILY as SOCKET_FAMILY, IFNAME as SOCKET_IFNAME, RETRY_CNT as SOCKET_RETRY_CNT,
        RETRY_SLEEP_MSEC as SOCKET_RETRY_SLEEP_MSEC,
    };

    ferroccl_plugin_api::params! {
        /// The runtime's own parameters (the shared `NCCL_SOCKET_*` ones are in
        /// `ferroccl_plugin_api::params::socket`).
        pub static ALL = [
            DEBUG: str "NCCL_DEBUG" = None, ["VERSION", "WARN", "INFO", "ABORT", "TRACE"], "log level: VERSION, WARN, INFO, ABORT or TRACE (unset: no output)";
            DEBUG_SUBSYS: str "NCCL_DEBUG_SUBSYS" = Some("INIT,BOOTSTRAP,ENV"), "subsystems logged at INFO/TRACE, comma separated; a leading ^ excludes them";
            DEBUG_FILE: str "NCCL_DEBUG_FILE" = None, "log file path (%h host name, %p pid); default stdout";
            CONF_FILE: str "NCCL_CONF_FILE" = None, "config file read instead of ~/.nccl.conf (environment only)";
            COMM_ID: str "NCCL_COMM_ID" = None, "bootstrap root address host:port (rank 0 listens there)";
            NET_PLUGIN: str "NCCL_NET_PLUGIN" = None, "net plugin library: name, suffix or path; comma list; \"none\" disables";
            NET: str "NCCL_NET" = None, "name of the network to use (e.g. Socket, IB)";
            TUNER_PLUGIN: str "NCCL_TUNER_PLUGIN" = None, "tuner plugin library";
            PROFILER_PLUGIN: str "NCCL_PROFILER_PLUGIN" = None, "profiler plugin library";
            /// Read with plain `getenv` after `nccl.conf` reached the environment (NCCL's `ncclEnvPluginLoad`).
            ENV_PLUGIN: str "NCCL_ENV_PLUGIN" = None, "env plugin library (ncclEnvPlugin_v2/_v1) every parameter lookup goes through; \"none\": the environment";
            PROTO: str "NCCL_PROTO" = None, "protocols allowed, NCCL's grammar (e.g. LL,Simple or ^LL; shared memory carries LL or Simple, the network Simple)";
            ALGO: str "NCCL_ALGO" = None, "algorithms allowed, NCCL's grammar (e.g. Ring, ^Tree or allreduce:tree); this runtime runs Ring and Tree";
            /// Default 1: no lower bound beyond one, so `NCCL_MAX_NCHANNELS=1` alone gives one ring.
            MIN_NCHANNELS: int "NCCL_MIN_NCHANNELS" = 1, 1..=MAXCHANNELS, "minimum number of channels (rings)";
            MAX_NCHANNELS: int "NCCL_MAX_NCHANNELS" = MAXCHANNELS, 1..=MAXCHANNELS, "maximum number of channels (rings)";
            BUFFSIZE: int "NCCL_BUFFSIZE" = 1 << 22, 1 << 12..=1 << 30, "bytes of buffer per connection, split into NCCL_STEPS slots";
            /// NCCL has no such parameter (it waits forever, or until `ncclCommAbort`); ferroccl bounds every wait.
            TIMEOUT_SEC: int "FERROCCL_TIMEOUT_SEC" = 300, 1..=7 * 86_400, "seconds before a bootstrap wait or a stalled collective fails (ferroccl only)";
            /// Rounded down to 64.
            P2P_NET_CHUNKSIZE: int "NCCL_P2P_NET_CHUNKSIZE" = 128 << 10, 4 << 10..=64 << 20, "bytes per network step of point-to-point operations";
            /// The host's `threadThresholds`; the default is measured in BENCHMARKS.md.
            MIN_CHANNEL_BYTES: int "FERROCCL_MIN_CHANNEL_BYTES" = 16 << 20, 1..=1 << 40, "bytes per channel below which a collective uses fewer channels (ferroccl only)";
            NET_USER_SEND_MIN: int "FERROCCL_NET_USER_SEND_MIN" = 64 << 10, -1..=1 << 40, "bytes from which buffers are sent from registered user memory, -1 never (ferroccl only)";
            NET_STRICT: str "FERROCCL_NET_STRICT" = Some("0"), ["0", "1", "true", "false", "yes", "no"], "1: a rejected net plugin candidate is an error, no fallback (ferroccl only)";
            NET_MAX_VERSION: str "FERROCCL_NET_MAX_VERSION" = Some("12"), ["6", "7", "8", "9", "10", "11", "12", "v6", "v7", "v8", "v9", "v10", "v11", "v12"], "newest ncclNetPlugin_vN symbol the host probes, 6..12 (ferroccl only)";
            PLUGIN_PATH: str "FERROCCL_PLUGIN_PATH" = None, "colon-separated directories searched for plugin libraries (ferroccl only)";
            /// Read once per process, at the first enqueue of device buffers.
            DEVICE_STEPS: int "FERROCCL_DEVICE_STEPS" = 1, 0..=1, "0: steps on device buffers stage through pinned host memory and the CPU reduces, instead of running as the GPU's kernels (for comparison; ferroccl only)";
            MAX_QUEUED_OPS: int "FERROCCL_MAX_QUEUED_OPS" = 4096, 1..=1 << 24, "operations queued per communicator before enqueue blocks (ferroccl only)";
            /// The shared-memory transport's latency is the peer's proxy's reaction
            /// time, and a `sched_yield` hands the core to any other runnable task for
            /// a whole time slice; Open MPI likewise polls without yielding unless
            /// oversubscribed.
            PROXY_SPIN_US: int "FERROCCL_PROXY_SPIN_US" = -1, -1..=1_000_000, "microseconds the proxy busy-polls before yielding; -1: 50 unless local ranks outnumber CPUs, then 0 (ferroccl only)";
            /// Replaces the boot id in NCCL's `getHostHash`.
            HOSTID: str "NCCL_HOSTID" = None, "host identity used instead of the boot id: ranks with equal values share a host";
            SHM_DISABLE: int "NCCL_SHM_DISABLE" = 0, 0..=1, "1: ranks on one host do not use shared memory (they use the net plugin)";
            NET_DISABLE_INTRA: int "NCCL_NET_DISABLE_INTRA" = 0, 0..=1, "1: ranks on one host do not use the network between them";
            /// NCCL's `ncclParamDmaBufEnable` (`src/init.cc`): `regMrDmaBuf` when the
            /// plugin advertises `NCCL_PTR_DMABUF` and the driver supports it (decision in
            /// `transport::gdr`).
            DMABUF_ENABLE: int "NCCL_DMABUF_ENABLE" = 1, 0..=1, "1: register GPU memory with the network through DMA-BUF when plugin and driver support it";
            /// NCCL 2.30.7 `src/misc/cudawrap.cc` (`ncclCuMemEnable`): a value of 0 or more
            /// decides (non-zero: on); -2 (the default): on when the driver is 12.0 or newer
            /// and the GPU supports virtual memory management with POSIX file descriptor
            /// handles; any other negative value: off. Read by `transport::p2p`.
            CUMEM_ENABLE: int "NCCL_CUMEM_ENABLE" = -2, i64::MIN..=i64::MAX, "P2P FIFOs through cuMem with file descriptors passed over a Unix socket: 0 off (legacy CUDA IPC), 1 on, -2 when the GPU supports it";
            /// NCCL's `ncclParamCommBlocking` (`src/init.cc`): overrides `ncclConfig_t.blocking`.
            COMM_BLOCKING: int "NCCL_COMM_BLOCKING" = -1, -1..=1, "C API: 0 non-blocking, 1 blocking communicators, overriding ncclConfig_t.blocking (-1: the config decides)";
            /// NCCL 2.30.7 `src/plugin/rma.cc` (`ncclRmaInit`); read by `comm::rma`.
            RMA_PLUGIN: str "NCCL_RMA_PLUGIN" = None, "RMA plugin libraries tried first (comma list; \"none\": only the net plugin's library; unset: libnccl-rma.so)";
            /// NCCL 2.30.7 `src/init.cc` (`envConfigOverride`: `ncclParamNumRmaCtx`, when set,
            /// overrides `ncclConfig_t.numRmaCtx`, whose default is 1; a negative value is
            /// ignored with an INFO line, 0 disables RMA). See `comm::params::resolve_num_rma_ctx`.
            NUM_RMA_CTX: int "NCCL_NUM_RMA_CTX" = 1, i32::MIN as i64..=64, "RMA contexts per communicator (the ctx argument of the one-sided calls is below it; 0: one-sided operations disabled)";
            RMA_EAGER_INIT: int "NCCL_RMA_EAGER_INIT" = 0, 0..=1, "1: set up the RMA plugin at communicator init instead of at the first window registration";
        ];
    }

    /// Tuning parameters (read by [`crate::tune::TuneParams`]; NCCL 2.30.7
    /// `src/graph/tuning.cc`, `src/enqueue.cc`).
    pub mod tune {
        ferroccl_plugin_api::params! {
            /// The tuning parameters.
            pub static ALL = [
                /// A CPU host runs one thread per channel, so the value only enters the model.
                NTHREADS: int "NCCL_NTHREADS" = -2, i64::MIN..=i64::MAX, "threads per block in the cost model (-2: NCCL's default; no effect on a CPU host)";
                LL128_NTHREADS: int "NCCL_LL128_NTHREADS" = -2, i64::MIN..=i64::MAX, "LL128 threads per block in the cost model (-2: NCCL's default)";
                PAT_ENABLE: int "NCCL_PAT_ENABLE" = 2, 0..=2, "PAT algorithm: 0 off, 1 on, 2 automatic";
                LL128_C2C: int "NCCL_LL128_C2C" = 1, i64::MIN..=i64::MAX, "allow LL128 over C2C links (non-zero: yes)";
                NET_OVERHEAD: int "NCCL_NET_OVERHEAD" = -2, i64::MIN..=i64::MAX, "per-step network overhead in ns added by the cost model (-2: NCCL's default)";
                THREAD_THRESHOLDS: str "NCCL_THREAD_THRESHOLDS" = None, "bytes per thread below which fewer channels are used, per algorithm/protocol (NCCL's grammar)";
                SMALL_ALLREDUCE_BYTES: int "FERROCCL_SMALL_ALLREDUCE_BYTES" = 256 << 10, 0..=1 << 40, "largest AllReduce run as all-gather + local reduce when the model prices it lower (ferroccl only)";
                /// NCCL's `config.collnetEnable` override (`src/init.cc`, `envConfigOverride`).
                COLLNET_ENABLE: int "NCCL_COLLNET_ENABLE" = 0, 0..=1, "CollNet: 0 off, 1 on when the net plugin's library has a usable CollNet table (overrides ncclConfig_t.collnetEnable)";
                /// NCCL's `ncclParamCollNetNodeThreshold` (`src/init.cc`, default 2).
                COLLNET_NODE_THRESHOLD: int "NCCL_COLLNET_NODE_THRESHOLD" = 2, i64::MIN..=i64::MAX, "fewest nodes for which CollNet stays enabled (default 2)";
            ];
        }
    }

    /// Topology and graph parameters (read by [`crate::topo::TopoParams`], which
    /// parses and checks their values as NCCL's `src/graph/` does).
    pub mod topo {
        ferroccl_plugin_api::params! {
            /// The topology and graph parameters.
            pub static ALL = [
                TOPO_FILE: str "NCCL_TOPO_FILE" = None, "topology XML to start from instead of detection (default /var/run/nvidia-topologyd/virtualTopology.xml when present)";
                TOPO_DUMP_FILE: str "NCCL_TOPO_DUMP_FILE" = None, "file the fused topology XML is written to";
                TOPO_DUMP_FILE_RANK: str "NCCL_TOPO_DUMP_FILE_RANK" = None, "rank that writes NCCL_TOPO_DUMP_FILE (default 0)";
                GRAPH_FILE: str "NCCL_GRAPH_FILE" = None, "graph XML to load instead of searching";
                GRAPH_DUMP_FILE: str "NCCL_GRAPH_DUMP_FILE" = None, "file the searched graphs are written to";
                GRAPH_DUMP_FILE_RANK: str "NCCL_GRAPH_DUMP_FILE_RANK" = None, "rank that writes NCCL_GRAPH_DUMP_FILE (default 0)";
                CROSS_NIC: str "NCCL_CROSS_NIC" = None, "rings may use different NICs at each end: 0 no, 1 yes, 2 alternate (default 2)";
                NVLS_ENABLE: str "NCCL_NVLS_ENABLE" = None, "NVLink SHARP: 0 off, 1 on, 2 when the GPUs support multicast (default 2)";
                P2P_LEVEL: str "NCCL_P2P_LEVEL" = None, "farthest path type for P2P (LOC, NVL, PIX, PXB, PHB, SYS or 0-5)";
                P2P_DISABLE: str "NCCL_P2P_DISABLE" = None, "1: no P2P between GPUs";
                NVB_DISABLE: str "NCCL_NVB_DISABLE" = None, "1: no NVLink paths through a relay GPU";
                PXN_DISABLE: str "NCCL_PXN_DISABLE" = None, "1: no PXN (send through a peer GPU's NIC)";
                PXN_C2C: str "NCCL_PXN_C2C" = None, "PXN over C2C links (default 1)";
                P2P_PXN_LEVEL: str "NCCL_P2P_PXN_LEVEL" = None, "PXN for p2p: 0 never, 1 when needed, 2 always (default 2)";
                NETDEVS_POLICY: str "NCCL_NETDEVS_POLICY" = None, "which NICs a GPU uses: AUTO, MAX:n or ALL";
                NET_GDR_LEVEL: str "NCCL_NET_GDR_LEVEL" = None, "farthest path type for GPUDirect RDMA (LOC .. SYS or 0-5)";
                NET_GDR_READ: str "NCCL_NET_GDR_READ" = None, "GPUDirect RDMA for sends (default -2: by compute capability / NVLink)";
                NET_GDR_C2C: str "NCCL_NET_GDR_C2C" = None, "GPUDirect RDMA over C2C links (default 1)";
                NET_GDR_MLOPART: str "NCCL_NET_GDR_MLOPART" = None, "GPUDirect RDMA for multi-level partitions (default 0)";
                MIN_CTAS: str "NCCL_MIN_CTAS" = None, "minimum CTAs (channels) per kernel, as config.minCTAs (default 1)";
                MAX_CTAS: str "NCCL_MAX_CTAS" = None, "maximum CTAs (channels) per kernel, as config.maxCTAs (default 64)";
                MIN_NRINGS: str "NCCL_MIN_NRINGS" = None, "old name of NCCL_MIN_NCHANNELS";
                MAX_NRINGS: str "NCCL_MAX_NRINGS" = None, "old name of NCCL_MAX_NCHANNELS";
                NET_MERGE_LEVEL: str "NCCL_NET_MERGE_LEVEL" = None, "farthest path between net devices fused into one virtual NIC: LOC (no fusion), PORT, PIX, PXB, P2C, PXN, PHB, SYS (default PORT)";
                NET_FORCE_MERGE: str "NCCL_NET_FORCE_MERGE" = None, "net devices to fuse: groups separated by ';', devices by ',' (name[:port]), e.g. eth0,eth1;eth2,eth3";
                NET_MERGE_POLICY: str "NCCL_NET_MERGE_POLICY" = None, "which devices within NCCL_NET_MERGE_LEVEL fuse: ALL, or RAIL (same rail id only) (default ALL)";
            ];
        }
    }
}

/// Every parameter the runtime reads, by group, in the order `ferroccl-info
/// params` lists them: the runtime's own, the socket ones it shares with the
/// net plugins, tuning, topology and graph.
pub static PARAMS: &[&[Param]] = &[
    params::ALL,
    ferroccl_plugin_api::params::socket::PARAMS,
    params::tune::ALL,
    params::topo::ALL,
];

/// Every parameter the runtime reads ([`PARAMS`] flattened), for validation,
/// echo and documentation. The in-tree plugins' parameters are not here: each
/// plugin declares its own and exports them (`ferrocclParams_v1`).
pub fn runtime_params() -> impl Iterator<Item = Param> {
    PARAMS.iter().flat_map(|group| group.iter().copied())
}

/// The runtime parameter `name`.
pub fn find_param(name: &str) -> Option<Param> {
    runtime_params().find(|p| p.name() == name)
}

#[cfg(test)]
mod env_plugin_tests {
    use super::*;

    fn base() -> Config {
        Config::from_sources(
            [
                ("NCCL_BUFFSIZE".to_string(), "65536".to_string()),
                ("NCCL_DEBUG".to_string(), "WARN".to_string()),
                ("NCCL_PROTO".to_string(), "Simple".to_string()),
            ],
            [(Path::new("/etc/nccl.conf"), "NCCL_MAX_NCHANNELS=4\n")],
        )
    }

    /// A plugin that overrides NCCL_BUFFSIZE, hides NCCL_PROTO, adds
    /// NCCL_MIN_NCHANNELS and passes the rest through; it counts its calls.
    fn plugged(calls: Arc<std::sync::atomic::AtomicUsize>) -> Config {
        let vars = base();
        let snapshot = vars.clone();
        vars.with_env_plugin("TestEnv", move |n| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match n {
                "NCCL_BUFFSIZE" => Some("1048576".into()),
                "NCCL_PROTO" => None,
                "NCCL_MIN_NCHANNELS" => Some("2".into()),
                _ => snapshot.raw(n).map(str::to_owned),
            }
        })
    }

    #[test]
    fn lookups_return_what_get_env_returns_with_its_source() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = plugged(calls.clone());
        assert_eq!(c.env_plugin(), Some("TestEnv"));
        let s = c.setting("NCCL_BUFFSIZE").unwrap();
        assert_eq!(
            (s.value.as_str(), &s.source),
            ("1048576", &Source::EnvPlugin("TestEnv".into()))
        );
        assert_eq!(params::BUFFSIZE.get(&c).unwrap(), 1 << 20);
        // Passed through: the variable keeps its own source.
        assert_eq!(c.setting("NCCL_DEBUG").unwrap().source, Source::Env);
        assert_eq!(
            c.setting("NCCL_MAX_NCHANNELS").unwrap().source,
            Source::File("/etc/nccl.conf".into())
        );
        // Hidden by the plugin, and one only the plugin sets.
        assert_eq!(c.raw("NCCL_PROTO"), None);
        assert_eq!(params::MIN_NCHANNELS.get(&c).unwrap(), 2);
        // Asked once per name, then cached.
        let n = calls.load(std::sync::atomic::Ordering::Relaxed);
        let _ = c.setting("NCCL_BUFFSIZE");
        let _ = c.raw("NCCL_PROTO");
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), n);
        // Without the plugin the same sources answer as before.
        assert_eq!(base().raw("NCCL_BUFFSIZE"), Some("65536"));
        assert_eq!(base().env_plugin(), None);
    }

    #[test]
    fn echo_and_set_params_name_the_env_plugin() {
        let c = plugged(Arc::default());
        let echo = c.echo();
        assert!(
            echo.iter()
                .any(|l| l == "NCCL_BUFFSIZE set by env plugin TestEnv to 1048576."),
            "{echo:?}"
        );
        assert!(
            echo.iter()
                .any(|l| l == "NCCL_MIN_NCHANNELS set by env plugin TestEnv to 2."),
            "{echo:?}"
        );
        assert!(
            echo.iter().any(|l| l == "NCCL_DEBUG set by environment to WARN."),
            "{echo:?}"
        );
        assert!(!echo.iter().any(|l| l.starts_with("NCCL_PROTO")), "{echo:?}");
        assert!(c.env_plugin_result().is_ok());
    }

    #[test]
    fn a_bad_plugin_value_is_an_error_naming_the_plugin() {
        let c = base().with_env_plugin("Bad", |n| (n == "NCCL_BUFFSIZE").then(|| "lots".to_string()));
        let e = params::BUFFSIZE.get(&c).unwrap_err().to_string();
        assert!(e.contains("(from env plugin Bad)"), "{e}");
    }
}
