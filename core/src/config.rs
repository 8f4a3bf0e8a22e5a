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
//! * **bounded reads** (not in NCCL): only regular files are read (a directory, a
//!   FIFO or a device such as `/dev/urandom` is skipped), at most
//!   [`MAX_CONF_BYTES`]; a file that is not read gets a WARN line once logging is
//!   up ([`Config::warnings`]); missing files stay silent.
//!
//! Every variable the runtime and the in-tree plugins read is registered here
//! ([`PARAMS`], [`PLUGIN_PARAMS`]; [`all_params`]): validated, and echoed once at
//! `NCCL_DEBUG=INFO` ([`Config::echo`]). The merged view lives in a [`Config`]
//! (process-wide one via [`Config::global`]); tests build their own with
//! [`Config::from_sources`] or [`Config::load`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Env => f.write_str("environment"),
            Source::File(p) => write!(f, "file {}", p.display()),
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
}

/// One variable as set in the environment or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The value, verbatim.
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// The merged view of environment and `nccl.conf` files.
#[derive(Debug, Clone, Default)]
pub struct Config {
    vars: HashMap<String, Setting>,
    /// Files that were not read, and why (WARN lines once logging starts).
    warnings: Vec<String>,
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
            let c = Config::from_process();
            c.apply_to_environment();
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
        match lookup("NCCL_CONF_FILE") {
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

    /// Why configuration files were not read (each becomes a WARN line once
    /// logging is initialised).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
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
            warnings: Vec::new(),
        }
    }

    /// The raw setting of `name`, if set anywhere (even to the empty string).
    pub fn setting(&self, name: &str) -> Option<&Setting> {
        self.vars.get(name)
    }

    /// The raw value of `name`, if set anywhere (even to the empty string).
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(|s| s.value.as_str())
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
    /// sorted by name, with its source and whether it is a registered [`PARAMS`] entry.
    pub fn set_params(&self) -> Vec<(&str, &Setting, bool)> {
        let mut v: BTreeMap<&str, &Setting> = BTreeMap::new();
        for (k, s) in &self.vars {
            if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
                v.insert(k.as_str(), s);
            }
        }
        v.into_iter().map(|(k, s)| (k, s, find_param(k).is_some())).collect()
    }

    /// The echo NCCL prints at `NCCL_DEBUG=INFO` (`"%s set by environment to %s."`),
    /// one line per variable from [`set_params`](Self::set_params), e.g.
    /// `NCCL_BUFFSIZE set by environment to 1048576.` or
    /// `NCCL_DEBUG set by file /etc/nccl.conf to INFO.`; unregistered names get a
    /// ` (not a parameter ferroccl uses)` suffix, invalid values
    /// ` (invalid: <why>)`.
    pub fn echo(&self) -> Vec<String> {
        self.set_params()
            .into_iter()
            .map(|(k, s, _)| {
                let note = match find_param(k).map(|(_, p)| p.check(self)) {
                    None => " (not a parameter ferroccl uses)".to_owned(),
                    Some(Err(e)) => format!(" (invalid: {e})"),
                    Some(Ok(())) => String::new(),
                };
                format!("{k} set by {} to {}.{note}", s.source, s.value)
            })
            .collect()
    }

    /// Checks every registered integer and choice parameter ([`all_params`]);
    /// returns all errors.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let errs: Vec<ConfigError> = all_params().filter_map(|(_, p)| p.check(self).err()).collect();
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }
}

/// A registered integer parameter.
#[derive(Debug, Clone, Copy)]
pub struct IntParam {
    /// Variable name.
    pub name: &'static str,
    /// Value when unset or empty.
    pub default: i64,
    /// Smallest accepted value.
    pub min: i64,
    /// Largest accepted value.
    pub max: i64,
    /// What it controls.
    pub description: &'static str,
}

impl IntParam {
    /// The value from `cfg` ([`Config::get_int`] with this parameter's default/range).
    pub fn get(&self, cfg: &Config) -> Result<i64, ConfigError> {
        cfg.get_int(self.name, self.default, self.min..=self.max)
    }
}

/// A registered string parameter.
#[derive(Debug, Clone, Copy)]
pub struct StrParam {
    /// Variable name.
    pub name: &'static str,
    /// Value when unset or empty (`None` = no value).
    pub default: Option<&'static str>,
    /// Accepted values (ASCII case-insensitive); empty = anything.
    pub choices: &'static [&'static str],
    /// What it controls.
    pub description: &'static str,
}

impl StrParam {
    /// The value from `cfg` (set and non-empty), else the default.
    pub fn get<'a>(&self, cfg: &'a Config) -> Option<&'a str> {
        cfg.get_str(self.name).or(self.default)
    }

    /// Like [`get`](Self::get), but checks the value against `choices`.
    pub fn get_checked<'a>(&self, cfg: &'a Config) -> Result<Option<&'a str>, ConfigError> {
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

/// Any registered parameter.
#[derive(Debug, Clone, Copy)]
pub enum Param {
    /// Integer.
    Int(&'static IntParam),
    /// String.
    Str(&'static StrParam),
}

impl Param {
    /// Variable name.
    pub fn name(&self) -> &'static str {
        match self {
            Param::Int(p) => p.name,
            Param::Str(p) => p.name,
        }
    }

    /// Description.
    pub fn description(&self) -> &'static str {
        match self {
            Param::Int(p) => p.description,
            Param::Str(p) => p.description,
        }
    }

    /// Validates the value in `cfg`.
    pub fn check(&self, cfg: &Config) -> Result<(), ConfigError> {
        match self {
            Param::Int(p) => p.get(cfg).map(|_| ()),
            Param::Str(p) => p.get_checked(cfg).map(|_| ()),
        }
    }
}

/// The registered parameters the runtime reads.
pub mod params {
    use super::{IntParam, MAXCHANNELS, StrParam};

    const fn s(name: &'static str, default: Option<&'static str>, description: &'static str) -> StrParam {
        StrParam {
            name,
            default,
            choices: &[],
            description,
        }
    }

    /// `NCCL_DEBUG`: log level (VERSION, WARN, INFO, ABORT, TRACE); unset = no output.
    pub static DEBUG: StrParam = StrParam {
        name: "NCCL_DEBUG",
        default: None,
        choices: &["VERSION", "WARN", "INFO", "ABORT", "TRACE"],
        description: "log level: VERSION, WARN, INFO, ABORT or TRACE (unset: no output)",
    };
    /// `NCCL_DEBUG_SUBSYS`: comma list of subsystems, `^` inverts.
    pub static DEBUG_SUBSYS: StrParam = s(
        "NCCL_DEBUG_SUBSYS",
        Some("INIT,BOOTSTRAP,ENV"),
        "subsystems logged at INFO/TRACE, comma separated; a leading ^ excludes them",
    );
    /// `NCCL_DEBUG_FILE`: log file, `%h` = host, `%p` = pid; default stdout.
    pub static DEBUG_FILE: StrParam = s(
        "NCCL_DEBUG_FILE",
        None,
        "log file path (%h host name, %p pid); default stdout",
    );
    /// `NCCL_CONF_FILE`: the user config file read instead of `~/.nccl.conf`.
    pub static CONF_FILE: StrParam = s(
        "NCCL_CONF_FILE",
        None,
        "config file read instead of ~/.nccl.conf (environment only)",
    );
    /// `NCCL_COMM_ID`: `host:port` of the bootstrap root.
    pub static COMM_ID: StrParam = s(
        "NCCL_COMM_ID",
        None,
        "bootstrap root address host:port (rank 0 listens there)",
    );
    /// `NCCL_SOCKET_IFNAME`: interface selection (`^` exclude, `=` exact).
    pub static SOCKET_IFNAME: StrParam = s(
        "NCCL_SOCKET_IFNAME",
        None,
        "network interfaces to use: prefix list, ^ excludes, = exact match",
    );
    /// `NCCL_SOCKET_FAMILY`: `AF_INET` or `AF_INET6`.
    pub static SOCKET_FAMILY: StrParam = StrParam {
        name: "NCCL_SOCKET_FAMILY",
        default: None,
        choices: &["AF_INET", "AF_INET6"],
        description: "address family for sockets: AF_INET or AF_INET6 (default: any)",
    };
    /// `NCCL_NET_PLUGIN`: net plugin library name(s).
    pub static NET_PLUGIN: StrParam = s(
        "NCCL_NET_PLUGIN",
        None,
        "net plugin library: name, suffix or path; comma list; \"none\" disables",
    );
    /// `NCCL_NET`: name of the network to use (plugin `name` field).
    pub static NET: StrParam = s("NCCL_NET", None, "name of the network to use (e.g. Socket, IB)");
    /// `NCCL_TUNER_PLUGIN`.
    pub static TUNER_PLUGIN: StrParam = s("NCCL_TUNER_PLUGIN", None, "tuner plugin library");
    /// `NCCL_PROFILER_PLUGIN`.
    pub static PROFILER_PLUGIN: StrParam = s("NCCL_PROFILER_PLUGIN", None, "profiler plugin library");
    /// `NCCL_PROTO`: protocols allowed (NCCL's grammar, `tune::enable`).
    pub static PROTO: StrParam = s(
        "NCCL_PROTO",
        None,
        "protocols allowed, NCCL's grammar (e.g. LL,Simple or ^LL; shared memory carries LL or Simple, the network Simple)",
    );
    /// `NCCL_ALGO`: algorithms allowed (NCCL's grammar, `tune::enable`).
    pub static ALGO: StrParam = s(
        "NCCL_ALGO",
        None,
        "algorithms allowed, NCCL's grammar (e.g. Ring, ^Tree or allreduce:tree); this runtime runs Ring and Tree",
    );

    /// `NCCL_MIN_NCHANNELS`: at least this many channels (default 1: no lower bound
    /// beyond one, so `NCCL_MAX_NCHANNELS=1` alone is enough to get one ring).
    pub static MIN_NCHANNELS: IntParam = IntParam {
        name: "NCCL_MIN_NCHANNELS",
        default: 1,
        min: 1,
        max: MAXCHANNELS,
        description: "minimum number of channels (rings)",
    };
    /// `NCCL_MAX_NCHANNELS`: at most this many channels.
    pub static MAX_NCHANNELS: IntParam = IntParam {
        name: "NCCL_MAX_NCHANNELS",
        default: MAXCHANNELS,
        min: 1,
        max: MAXCHANNELS,
        description: "maximum number of channels (rings)",
    };
    /// `NCCL_BUFFSIZE`: bytes per connection buffer (split into `NCCL_STEPS` slots).
    pub static BUFFSIZE: IntParam = IntParam {
        name: "NCCL_BUFFSIZE",
        default: 1 << 22,
        min: 1 << 12,
        max: 1 << 30,
        description: "bytes of buffer per connection, split into NCCL_STEPS slots",
    };
    /// `NCCL_SOCKET_RETRY_CNT`: connect retries on ECONNREFUSED/ETIMEDOUT.
    pub static SOCKET_RETRY_CNT: IntParam = IntParam {
        name: "NCCL_SOCKET_RETRY_CNT",
        default: 34,
        min: 0,
        max: 1 << 20,
        description: "socket connect retries",
    };
    /// `NCCL_SOCKET_RETRY_SLEEP_MSEC`: base sleep between retries (grows linearly).
    pub static SOCKET_RETRY_SLEEP_MSEC: IntParam = IntParam {
        name: "NCCL_SOCKET_RETRY_SLEEP_MSEC",
        default: 100,
        min: 0,
        max: 60_000,
        description: "milliseconds between socket connect retries (times the retry number)",
    };
    /// `FERROCCL_TIMEOUT_SEC`: bound on every bootstrap wait and collective progress
    /// stall. NCCL has no such parameter (it waits forever, or until
    /// `ncclCommAbort`); ferroccl bounds every wait.
    pub static TIMEOUT_SEC: IntParam = IntParam {
        name: "FERROCCL_TIMEOUT_SEC",
        default: 300,
        min: 1,
        max: 7 * 86_400,
        description: "seconds before a bootstrap wait or a stalled collective fails (ferroccl only)",
    };
    /// `NCCL_P2P_NET_CHUNKSIZE`: bytes per network step of point-to-point
    /// operations (rounded down to 64).
    pub static P2P_NET_CHUNKSIZE: IntParam = IntParam {
        name: "NCCL_P2P_NET_CHUNKSIZE",
        default: 128 << 10,
        min: 4 << 10,
        max: 64 << 20,
        description: "bytes per network step of point-to-point operations",
    };
    /// `FERROCCL_MIN_CHANNEL_BYTES`: a collective spreads over another channel only
    /// when each gets at least this many bytes (the host's `threadThresholds`;
    /// default 16 MiB, see BENCHMARKS.md).
    pub static MIN_CHANNEL_BYTES: IntParam = IntParam {
        name: "FERROCCL_MIN_CHANNEL_BYTES",
        default: 16 << 20,
        min: 1,
        max: 1 << 40,
        description: "bytes per channel below which a collective uses fewer channels (ferroccl only)",
    };
    /// `FERROCCL_NET_USER_SEND_MIN`: operations with buffers of at least this many
    /// bytes send straight from registered user memory; -1 = never.
    pub static NET_USER_SEND_MIN: IntParam = IntParam {
        name: "FERROCCL_NET_USER_SEND_MIN",
        default: 64 << 10,
        min: -1,
        max: 1 << 40,
        description: "bytes from which buffers are sent from registered user memory, -1 never (ferroccl only)",
    };
    /// `FERROCCL_NET_STRICT`: fail instead of falling back past the first net plugin candidate.
    pub static NET_STRICT: StrParam = StrParam {
        name: "FERROCCL_NET_STRICT",
        default: Some("0"),
        choices: &["0", "1", "true", "false", "yes", "no"],
        description: "1: a rejected net plugin candidate is an error, no fallback (ferroccl only)",
    };
    /// `FERROCCL_NET_MAX_VERSION`: newest `ncclNetPlugin_vN` symbol probed.
    pub static NET_MAX_VERSION: StrParam = StrParam {
        name: "FERROCCL_NET_MAX_VERSION",
        default: Some("12"),
        choices: &[
            "6", "7", "8", "9", "10", "11", "12", "v6", "v7", "v8", "v9", "v10", "v11", "v12",
        ],
        description: "newest ncclNetPlugin_vN symbol the host probes, 6..12 (ferroccl only)",
    };
    /// `NCCL_SHM_DISABLE`: 1 = no shared-memory transport between local ranks.
    pub static SHM_DISABLE: IntParam = IntParam {
        name: "NCCL_SHM_DISABLE",
        default: 0,
        min: 0,
        max: 1,
        description: "1: ranks on one host do not use shared memory (they use the net plugin)",
    };
    /// `NCCL_NET_DISABLE_INTRA`: 1 = no network transport between ranks of one host.
    pub static NET_DISABLE_INTRA: IntParam = IntParam {
        name: "NCCL_NET_DISABLE_INTRA",
        default: 0,
        min: 0,
        max: 1,
        description: "1: ranks on one host do not use the network between them",
    };
    /// `NCCL_DMABUF_ENABLE`: 1 (default) = register device memory with the net
    /// plugin through DMA-BUF (`regMrDmaBuf`) when the plugin advertises
    /// `NCCL_PTR_DMABUF` and the driver supports it (NCCL's `ncclParamDmaBufEnable`,
    /// `src/init.cc`; decision in `transport::gdr`).
    pub static DMABUF_ENABLE: IntParam = IntParam {
        name: "NCCL_DMABUF_ENABLE",
        default: 1,
        min: 0,
        max: 1,
        description: "1: register GPU memory with the network through DMA-BUF when plugin and driver support it",
    };
    /// `FERROCCL_MAX_QUEUED_OPS`: operations (or groups) queued on one
    /// communicator before enqueue blocks.
    pub static MAX_QUEUED_OPS: IntParam = IntParam {
        name: "FERROCCL_MAX_QUEUED_OPS",
        default: 4096,
        min: 1,
        max: 1 << 24,
        description: "operations queued per communicator before enqueue blocks (ferroccl only)",
    };
    /// `FERROCCL_PROXY_SPIN_US`: how long the proxy thread busy-polls (without
    /// yielding the CPU) for a peer's next step, or for the next operation, before
    /// it yields and later sleeps; -1 = automatic: 50 µs while this host's ranks
    /// in the communicator do not outnumber its online CPUs, else 0 (the
    /// shared-memory transport's latency is the peer's proxy's reaction time, and
    /// a `sched_yield` hands the core to any other runnable task for a whole time
    /// slice; Open MPI likewise polls without yielding unless oversubscribed).
    pub static PROXY_SPIN_US: IntParam = IntParam {
        name: "FERROCCL_PROXY_SPIN_US",
        default: -1,
        min: -1,
        max: 1_000_000,
        description: "microseconds the proxy busy-polls before yielding; -1: 50 unless local ranks outnumber CPUs, then 0 (ferroccl only)",
    };
    /// `NCCL_HOSTID`: replaces the boot id in the host identity (`getHostHash`).
    pub static HOSTID: StrParam = s(
        "NCCL_HOSTID",
        None,
        "host identity used instead of the boot id: ranks with equal values share a host",
    );
    /// `FERROCCL_PLUGIN_PATH`: directories searched for plugins after the loader's path.
    pub static PLUGIN_PATH: StrParam = s(
        "FERROCCL_PLUGIN_PATH",
        None,
        "colon-separated directories searched for plugin libraries (ferroccl only)",
    );

    /// Tuning parameters (read by [`crate::tune::TuneParams`]; NCCL 2.30.7
    /// `src/graph/tuning.cc`, `src/enqueue.cc`).
    pub mod tune {
        use super::{IntParam, StrParam};

        /// `NCCL_NTHREADS`: threads per block (-2: NCCL's default). A CPU host
        /// runs one thread per channel, so the value only enters the model.
        pub static NTHREADS: IntParam = IntParam {
            name: "NCCL_NTHREADS",
            default: -2,
            min: i64::MIN,
            max: i64::MAX,
            description: "threads per block in the cost model (-2: NCCL's default; no effect on a CPU host)",
        };
        /// `NCCL_LL128_NTHREADS`: LL128 threads per block (-2: NCCL's default).
        pub static LL128_NTHREADS: IntParam = IntParam {
            name: "NCCL_LL128_NTHREADS",
            default: -2,
            min: i64::MIN,
            max: i64::MAX,
            description: "LL128 threads per block in the cost model (-2: NCCL's default)",
        };
        /// `NCCL_PAT_ENABLE`: 0 off, 1 on, 2 automatic (NCCL's default).
        pub static PAT_ENABLE: IntParam = IntParam {
            name: "NCCL_PAT_ENABLE",
            default: 2,
            min: 0,
            max: 2,
            description: "PAT algorithm: 0 off, 1 on, 2 automatic",
        };
        /// `NCCL_LL128_C2C`: LL128 over C2C links (default 1).
        pub static LL128_C2C: IntParam = IntParam {
            name: "NCCL_LL128_C2C",
            default: 1,
            min: i64::MIN,
            max: i64::MAX,
            description: "allow LL128 over C2C links (non-zero: yes)",
        };
        /// `NCCL_NET_OVERHEAD`: network overhead in ns (-2: NCCL's default).
        pub static NET_OVERHEAD: IntParam = IntParam {
            name: "NCCL_NET_OVERHEAD",
            default: -2,
            min: i64::MIN,
            max: i64::MAX,
            description: "per-step network overhead in ns added by the cost model (-2: NCCL's default)",
        };
        /// `NCCL_THREAD_THRESHOLDS`: per algorithm and protocol thresholds.
        pub static THREAD_THRESHOLDS: StrParam = StrParam {
            name: "NCCL_THREAD_THRESHOLDS",
            default: None,
            choices: &[],
            description: "bytes per thread below which fewer channels are used, per algorithm/protocol (NCCL's grammar)",
        };
        /// `FERROCCL_SMALL_ALLREDUCE_BYTES`: the largest AllReduce that may run as
        /// all-gather + local reduction when the model prices it lower.
        pub static SMALL_ALLREDUCE_BYTES: IntParam = IntParam {
            name: "FERROCCL_SMALL_ALLREDUCE_BYTES",
            default: 256 << 10,
            min: 0,
            max: 1 << 40,
            description: "largest AllReduce run as all-gather + local reduce when the model prices it lower (ferroccl only)",
        };
        /// `NCCL_COLLNET_ENABLE`: CollNet algorithms (default 0; they also need a
        /// CollNet plugin).
        pub static COLLNET_ENABLE: IntParam = IntParam {
            name: "NCCL_COLLNET_ENABLE",
            default: 0,
            min: 0,
            max: 1,
            description: "CollNet algorithms: 0 off, 1 on when a CollNet plugin is present",
        };
        /// `NCCL_TUNER_CONFIG_FILE`: the rules of `libnccl-tuner-rules.so` (and
        /// NCCL's example tuner's CSV).
        pub static TUNER_CONFIG_FILE: StrParam = StrParam {
            name: "NCCL_TUNER_CONFIG_FILE",
            default: None,
            choices: &[],
            description: "rule file of the rules tuner (TOML or NCCL's example CSV; default nccl_tuner.conf)",
        };
    }

    /// Topology and graph parameters (read by [`crate::topo::TopoParams`], which
    /// parses and checks their values as NCCL's `src/graph/` does).
    pub mod topo {
        use super::StrParam;

        /// `NCCL_TOPO_FILE`: topology XML to start from instead of detection (default /var/run/nvidia-topologyd/virtualTopology.xml when present).
        pub static TOPO_FILE: StrParam = StrParam {
            name: "NCCL_TOPO_FILE",
            default: None,
            choices: &[],
            description: "topology XML to start from instead of detection (default /var/run/nvidia-topologyd/virtualTopology.xml when present)",
        };
        /// `NCCL_TOPO_DUMP_FILE`: file the fused topology XML is written to.
        pub static TOPO_DUMP_FILE: StrParam = StrParam {
            name: "NCCL_TOPO_DUMP_FILE",
            default: None,
            choices: &[],
            description: "file the fused topology XML is written to",
        };
        /// `NCCL_TOPO_DUMP_FILE_RANK`: rank that writes NCCL_TOPO_DUMP_FILE (default 0).
        pub static TOPO_DUMP_FILE_RANK: StrParam = StrParam {
            name: "NCCL_TOPO_DUMP_FILE_RANK",
            default: None,
            choices: &[],
            description: "rank that writes NCCL_TOPO_DUMP_FILE (default 0)",
        };
        /// `NCCL_GRAPH_FILE`: graph XML to load instead of searching.
        pub static GRAPH_FILE: StrParam = StrParam {
            name: "NCCL_GRAPH_FILE",
            default: None,
            choices: &[],
            description: "graph XML to load instead of searching",
        };
        /// `NCCL_GRAPH_DUMP_FILE`: file the searched graphs are written to.
        pub static GRAPH_DUMP_FILE: StrParam = StrParam {
            name: "NCCL_GRAPH_DUMP_FILE",
            default: None,
            choices: &[],
            description: "file the searched graphs are written to",
        };
        /// `NCCL_GRAPH_DUMP_FILE_RANK`: rank that writes NCCL_GRAPH_DUMP_FILE (default 0).
        pub static GRAPH_DUMP_FILE_RANK: StrParam = StrParam {
            name: "NCCL_GRAPH_DUMP_FILE_RANK",
            default: None,
            choices: &[],
            description: "rank that writes NCCL_GRAPH_DUMP_FILE (default 0)",
        };
        /// `NCCL_CROSS_NIC`: rings may use different NICs at each end: 0 no, 1 yes, 2 alternate (default 2).
        pub static CROSS_NIC: StrParam = StrParam {
            name: "NCCL_CROSS_NIC",
            default: None,
            choices: &[],
            description: "rings may use different NICs at each end: 0 no, 1 yes, 2 alternate (default 2)",
        };
        /// `NCCL_NVLS_ENABLE`: NVLink SHARP: 0 off, 1 on, 2 when the GPUs support multicast (default 2).
        pub static NVLS_ENABLE: StrParam = StrParam {
            name: "NCCL_NVLS_ENABLE",
            default: None,
            choices: &[],
            description: "NVLink SHARP: 0 off, 1 on, 2 when the GPUs support multicast (default 2)",
        };
        /// `NCCL_P2P_LEVEL`: farthest path type for P2P (LOC, NVL, PIX, PXB, PHB, SYS or 0-5).
        pub static P2P_LEVEL: StrParam = StrParam {
            name: "NCCL_P2P_LEVEL",
            default: None,
            choices: &[],
            description: "farthest path type for P2P (LOC, NVL, PIX, PXB, PHB, SYS or 0-5)",
        };
        /// `NCCL_P2P_DISABLE`: 1: no P2P between GPUs.
        pub static P2P_DISABLE: StrParam = StrParam {
            name: "NCCL_P2P_DISABLE",
            default: None,
            choices: &[],
            description: "1: no P2P between GPUs",
        };
        /// `NCCL_NVB_DISABLE`: 1: no NVLink paths through a relay GPU.
        pub static NVB_DISABLE: StrParam = StrParam {
            name: "NCCL_NVB_DISABLE",
            default: None,
            choices: &[],
            description: "1: no NVLink paths through a relay GPU",
        };
        /// `NCCL_PXN_DISABLE`: 1: no PXN (send through a peer GPU's NIC).
        pub static PXN_DISABLE: StrParam = StrParam {
            name: "NCCL_PXN_DISABLE",
            default: None,
            choices: &[],
            description: "1: no PXN (send through a peer GPU's NIC)",
        };
        /// `NCCL_PXN_C2C`: PXN over C2C links (default 1).
        pub static PXN_C2C: StrParam = StrParam {
            name: "NCCL_PXN_C2C",
            default: None,
            choices: &[],
            description: "PXN over C2C links (default 1)",
        };
        /// `NCCL_P2P_PXN_LEVEL`: PXN for p2p: 0 never, 1 when needed, 2 always (default 2).
        pub static P2P_PXN_LEVEL: StrParam = StrParam {
            name: "NCCL_P2P_PXN_LEVEL",
            default: None,
            choices: &[],
            description: "PXN for p2p: 0 never, 1 when needed, 2 always (default 2)",
        };
        /// `NCCL_NETDEVS_POLICY`: which NICs a GPU uses: AUTO, MAX:n or ALL.
        pub static NETDEVS_POLICY: StrParam = StrParam {
            name: "NCCL_NETDEVS_POLICY",
            default: None,
            choices: &[],
            description: "which NICs a GPU uses: AUTO, MAX:n or ALL",
        };
        /// `NCCL_NET_GDR_LEVEL`: farthest path type for GPUDirect RDMA (LOC .. SYS or 0-5).
        pub static NET_GDR_LEVEL: StrParam = StrParam {
            name: "NCCL_NET_GDR_LEVEL",
            default: None,
            choices: &[],
            description: "farthest path type for GPUDirect RDMA (LOC .. SYS or 0-5)",
        };
        /// `NCCL_NET_GDR_READ`: GPUDirect RDMA for sends (default -2: by compute capability / NVLink).
        pub static NET_GDR_READ: StrParam = StrParam {
            name: "NCCL_NET_GDR_READ",
            default: None,
            choices: &[],
            description: "GPUDirect RDMA for sends (default -2: by compute capability / NVLink)",
        };
        /// `NCCL_NET_GDR_C2C`: GPUDirect RDMA over C2C links (default 1).
        pub static NET_GDR_C2C: StrParam = StrParam {
            name: "NCCL_NET_GDR_C2C",
            default: None,
            choices: &[],
            description: "GPUDirect RDMA over C2C links (default 1)",
        };
        /// `NCCL_NET_GDR_MLOPART`: GPUDirect RDMA for multi-level partitions (default 0).
        pub static NET_GDR_MLOPART: StrParam = StrParam {
            name: "NCCL_NET_GDR_MLOPART",
            default: None,
            choices: &[],
            description: "GPUDirect RDMA for multi-level partitions (default 0)",
        };
        /// `NCCL_MIN_CTAS`: minimum CTAs (channels) per kernel, as config.minCTAs (default 1).
        pub static MIN_CTAS: StrParam = StrParam {
            name: "NCCL_MIN_CTAS",
            default: None,
            choices: &[],
            description: "minimum CTAs (channels) per kernel, as config.minCTAs (default 1)",
        };
        /// `NCCL_MAX_CTAS`: maximum CTAs (channels) per kernel, as config.maxCTAs (default 64).
        pub static MAX_CTAS: StrParam = StrParam {
            name: "NCCL_MAX_CTAS",
            default: None,
            choices: &[],
            description: "maximum CTAs (channels) per kernel, as config.maxCTAs (default 64)",
        };
        /// `NCCL_MIN_NRINGS`: old name of NCCL_MIN_NCHANNELS.
        pub static MIN_NRINGS: StrParam = StrParam {
            name: "NCCL_MIN_NRINGS",
            default: None,
            choices: &[],
            description: "old name of NCCL_MIN_NCHANNELS",
        };
        /// `NCCL_MAX_NRINGS`: old name of NCCL_MAX_NCHANNELS.
        pub static MAX_NRINGS: StrParam = StrParam {
            name: "NCCL_MAX_NRINGS",
            default: None,
            choices: &[],
            description: "old name of NCCL_MAX_NCHANNELS",
        };
    }

    /// Parameters of `plugins/profiler-trace` (`libnccl-profiler-trace.so`).
    pub mod trace {
        use super::{IntParam, StrParam};

        /// `NCCL_PROFILER_TRACE_FILE`: the trace file, `%h` host name, `%p` pid.
        pub static TRACE_FILE: StrParam = StrParam {
            name: "NCCL_PROFILER_TRACE_FILE",
            default: Some("ferroccl-trace-%h-%p.json"),
            choices: &[],
            description: "trace profiler: Chrome trace JSON output path (%h host name, %p process id)",
        };
        /// `NCCL_PROFILE_EVENT_MASK`: the activation mask (NCCL's example profiler's variable).
        pub static EVENT_MASK: IntParam = IntParam {
            name: "NCCL_PROFILE_EVENT_MASK",
            default: 0x7fdf,
            min: 0,
            max: 0x7fff,
            description: "trace profiler: ncclProfile* event bits to record (default all but ProxyCtrl)",
        };
    }

    /// Parameters of the in-tree socket plugin (`plugins/net-socket`,
    /// `libnccl-net-socket.so`), as NCCL's built-in socket transport reads them
    /// (`src/transport/net_socket.cc`). `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`
    /// and `NCCL_SOCKET_RETRY_*` are shared with the bootstrap ([`super::PARAMS`]).
    pub mod socket {
        use super::IntParam;

        /// `NCCL_SOCKET_NTHREADS`: helper threads per connection (-2 automatic).
        pub static NTHREADS: IntParam = IntParam {
            name: "NCCL_SOCKET_NTHREADS",
            default: -2,
            min: -2,
            max: 16,
            description: "socket plugin: helper threads per connection, 1..16 (-2: automatic)",
        };
        /// `NCCL_NSOCKS_PERTHREAD`: data sockets per helper thread (-2 automatic).
        pub static NSOCKS_PERTHREAD: IntParam = IntParam {
            name: "NCCL_NSOCKS_PERTHREAD",
            default: -2,
            min: -2,
            max: 64,
            description: "socket plugin: data sockets per helper thread (-2: automatic)",
        };
        /// `NCCL_SOCKET_INLINE`: messages of at most this many bytes go on the control stream.
        pub static INLINE: IntParam = IntParam {
            name: "NCCL_SOCKET_INLINE",
            default: 128,
            min: 0,
            max: 1 << 30,
            description: "socket plugin: messages up to this many bytes travel on the control stream",
        };
        /// `NCCL_SOCKET_MIN_TASKSIZE`: smallest chunk per data stream.
        pub static MIN_TASKSIZE: IntParam = IntParam {
            name: "NCCL_SOCKET_MIN_TASKSIZE",
            default: 65536,
            min: 1,
            max: 1 << 30,
            description: "socket plugin: smallest chunk per data stream, bytes",
        };
        /// `NCCL_SOCKET_SNDBUF`: SO_SNDBUF (<= 0: system default).
        pub static SNDBUF: IntParam = IntParam {
            name: "NCCL_SOCKET_SNDBUF",
            default: -1,
            min: -1,
            max: i32::MAX as i64,
            description: "socket plugin: SO_SNDBUF bytes (-1: system default)",
        };
        /// `NCCL_SOCKET_RCVBUF`: SO_RCVBUF (<= 0: system default).
        pub static RCVBUF: IntParam = IntParam {
            name: "NCCL_SOCKET_RCVBUF",
            default: -1,
            min: -1,
            max: i32::MAX as i64,
            description: "socket plugin: SO_RCVBUF bytes (-1: system default)",
        };
        /// `NCCL_SOCKET_MAGIC`: connection magic.
        pub static MAGIC: IntParam = IntParam {
            name: "NCCL_SOCKET_MAGIC",
            default: 0x564a_b9f2_fc4b_9d6c,
            min: i64::MIN,
            max: i64::MAX,
            description: "socket plugin: 64-bit magic that starts every connection",
        };
    }

    /// Parameters of the in-tree IB verbs plugin (`plugins/net-ib`,
    /// `libnccl-net-ib.so`), as NCCL's built-in IB transport reads them
    /// (`src/transport/net_ib/`); ranges as the plugin enforces them.
    pub mod ib {
        use super::{IntParam, StrParam, s};

        /// `NCCL_IB_DISABLE`: 1 makes the plugin's init fail.
        pub static DISABLE: IntParam = IntParam {
            name: "NCCL_IB_DISABLE",
            default: 0,
            min: 0,
            max: 1,
            description: "IB plugin: 1 disables it",
        };
        /// `NCCL_IB_HCA`: HCA/port filter (`^` exclude, `=` exact, `:port`).
        pub static HCA: StrParam = s(
            "NCCL_IB_HCA",
            None,
            "IB plugin: HCAs and ports to use (^ excludes, = exact)",
        );
        /// `NCCL_IB_GID_INDEX`: GID index (-1 automatic).
        pub static GID_INDEX: IntParam = IntParam {
            name: "NCCL_IB_GID_INDEX",
            default: -1,
            min: -1,
            max: 65_535,
            description: "IB plugin: RoCE GID index (-1: automatic)",
        };
        /// `NCCL_IB_ADDR_FAMILY`: family of automatically chosen RoCE GIDs.
        pub static ADDR_FAMILY: StrParam = StrParam {
            name: "NCCL_IB_ADDR_FAMILY",
            default: Some("AF_INET"),
            choices: &["AF_INET", "AF_INET6"],
            description: "IB plugin: address family of automatically chosen RoCE GIDs",
        };
        /// `NCCL_IB_ADDR_RANGE`: `addr/prefixlen` of automatically chosen GIDs.
        pub static ADDR_RANGE: StrParam = s(
            "NCCL_IB_ADDR_RANGE",
            None,
            "IB plugin: addr/prefixlen that automatically chosen RoCE GIDs must lie in",
        );
        /// `NCCL_IB_ROCE_VERSION_NUM`: RoCE version of automatic GIDs.
        pub static ROCE_VERSION_NUM: IntParam = IntParam {
            name: "NCCL_IB_ROCE_VERSION_NUM",
            default: 2,
            min: 1,
            max: 2,
            description: "IB plugin: RoCE version of automatically chosen GIDs",
        };
        /// `NCCL_IB_QPS_PER_CONNECTION`.
        pub static QPS_PER_CONNECTION: IntParam = IntParam {
            name: "NCCL_IB_QPS_PER_CONNECTION",
            default: 1,
            min: 1,
            max: 128,
            description: "IB plugin: queue pairs per connection",
        };
        /// `NCCL_IB_TIMEOUT`: ACK timeout exponent (4.096 us x 2^value).
        pub static TIMEOUT: IntParam = IntParam {
            name: "NCCL_IB_TIMEOUT",
            default: 20,
            min: 1,
            max: 31,
            description: "IB plugin: ACK timeout exponent, 4.096 us x 2^value",
        };
        /// `NCCL_IB_RETRY_CNT`.
        pub static RETRY_CNT: IntParam = IntParam {
            name: "NCCL_IB_RETRY_CNT",
            default: 7,
            min: 0,
            max: 7,
            description: "IB plugin: transport retries",
        };
        /// `NCCL_IB_SL`: service level (-1: from the comm's traffic class, else 0).
        pub static SL: IntParam = IntParam {
            name: "NCCL_IB_SL",
            default: -1,
            min: -1,
            max: 15,
            description: "IB plugin: service level (-1: automatic)",
        };
        /// `NCCL_IB_TC`: traffic class (-1: from the comm, else 0).
        pub static TC: IntParam = IntParam {
            name: "NCCL_IB_TC",
            default: -1,
            min: -1,
            max: 255,
            description: "IB plugin: traffic class (-1: automatic)",
        };
        /// `NCCL_IB_PKEY`: partition key index.
        pub static PKEY: IntParam = IntParam {
            name: "NCCL_IB_PKEY",
            default: 0,
            min: 0,
            max: 65_535,
            description: "IB plugin: partition key index",
        };
        /// `NCCL_IBVERBS_LIB`: the libibverbs to dlopen (NCCL's name).
        pub static IBVERBS_LIB: StrParam = s(
            "NCCL_IBVERBS_LIB",
            Some("libibverbs.so.1"),
            "IB plugin: libibverbs library to load",
        );
        /// `NCCL_IB_VERBS_LIB`: the name the IB plugin read before it followed
        /// NCCL's `NCCL_IBVERBS_LIB` (issue 20); kept registered while it is read.
        pub static IB_VERBS_LIB: StrParam = s(
            "NCCL_IB_VERBS_LIB",
            None,
            "IB plugin: former name of NCCL_IBVERBS_LIB (ferroccl only)",
        );
    }
}

/// Every registered parameter, for validation, echo and documentation.
pub static PARAMS: &[Param] = &[
    Param::Str(&params::DEBUG),
    Param::Str(&params::DEBUG_SUBSYS),
    Param::Str(&params::DEBUG_FILE),
    Param::Str(&params::CONF_FILE),
    Param::Str(&params::COMM_ID),
    Param::Str(&params::SOCKET_IFNAME),
    Param::Str(&params::SOCKET_FAMILY),
    Param::Str(&params::NET_PLUGIN),
    Param::Str(&params::NET),
    Param::Str(&params::TUNER_PLUGIN),
    Param::Str(&params::PROFILER_PLUGIN),
    Param::Str(&params::PROTO),
    Param::Str(&params::ALGO),
    Param::Int(&params::MIN_NCHANNELS),
    Param::Int(&params::MAX_NCHANNELS),
    Param::Int(&params::BUFFSIZE),
    Param::Int(&params::SOCKET_RETRY_CNT),
    Param::Int(&params::SOCKET_RETRY_SLEEP_MSEC),
    Param::Int(&params::TIMEOUT_SEC),
    Param::Int(&params::P2P_NET_CHUNKSIZE),
    Param::Int(&params::MIN_CHANNEL_BYTES),
    Param::Int(&params::NET_USER_SEND_MIN),
    Param::Str(&params::NET_STRICT),
    Param::Str(&params::NET_MAX_VERSION),
    Param::Str(&params::PLUGIN_PATH),
    Param::Int(&params::MAX_QUEUED_OPS),
    Param::Int(&params::PROXY_SPIN_US),
    Param::Str(&params::HOSTID),
    Param::Int(&params::SHM_DISABLE),
    Param::Int(&params::NET_DISABLE_INTRA),
    Param::Int(&params::tune::NTHREADS),
    Param::Int(&params::tune::LL128_NTHREADS),
    Param::Int(&params::tune::PAT_ENABLE),
    Param::Int(&params::tune::LL128_C2C),
    Param::Int(&params::tune::NET_OVERHEAD),
    Param::Str(&params::tune::THREAD_THRESHOLDS),
    Param::Int(&params::tune::SMALL_ALLREDUCE_BYTES),
    Param::Int(&params::tune::COLLNET_ENABLE),
    Param::Int(&params::DMABUF_ENABLE),
    Param::Str(&params::topo::TOPO_FILE),
    Param::Str(&params::topo::TOPO_DUMP_FILE),
    Param::Str(&params::topo::TOPO_DUMP_FILE_RANK),
    Param::Str(&params::topo::GRAPH_FILE),
    Param::Str(&params::topo::GRAPH_DUMP_FILE),
    Param::Str(&params::topo::GRAPH_DUMP_FILE_RANK),
    Param::Str(&params::topo::CROSS_NIC),
    Param::Str(&params::topo::NVLS_ENABLE),
    Param::Str(&params::topo::P2P_LEVEL),
    Param::Str(&params::topo::P2P_DISABLE),
    Param::Str(&params::topo::NVB_DISABLE),
    Param::Str(&params::topo::PXN_DISABLE),
    Param::Str(&params::topo::PXN_C2C),
    Param::Str(&params::topo::P2P_PXN_LEVEL),
    Param::Str(&params::topo::NETDEVS_POLICY),
    Param::Str(&params::topo::NET_GDR_LEVEL),
    Param::Str(&params::topo::NET_GDR_READ),
    Param::Str(&params::topo::NET_GDR_C2C),
    Param::Str(&params::topo::NET_GDR_MLOPART),
    Param::Str(&params::topo::MIN_CTAS),
    Param::Str(&params::topo::MAX_CTAS),
    Param::Str(&params::topo::MIN_NRINGS),
    Param::Str(&params::topo::MAX_NRINGS),
];

/// The in-tree plugins' own parameters, by plugin (registered here so that they
/// are validated and echoed like the runtime's; the plugins read them with
/// `getenv`, which sees `nccl.conf` values once [`Config::global`] ran).
pub static PLUGIN_PARAMS: &[(&str, &[Param])] = &[
    ("tuner-rules", &[Param::Str(&params::tune::TUNER_CONFIG_FILE)]),
    (
        "profiler-trace",
        &[
            Param::Str(&params::trace::TRACE_FILE),
            Param::Int(&params::trace::EVENT_MASK),
        ],
    ),
    (
        "net-socket",
        &[
            Param::Int(&params::socket::NTHREADS),
            Param::Int(&params::socket::NSOCKS_PERTHREAD),
            Param::Int(&params::socket::INLINE),
            Param::Int(&params::socket::MIN_TASKSIZE),
            Param::Int(&params::socket::SNDBUF),
            Param::Int(&params::socket::RCVBUF),
            Param::Int(&params::socket::MAGIC),
        ],
    ),
    (
        "net-ib",
        &[
            Param::Int(&params::ib::DISABLE),
            Param::Str(&params::ib::HCA),
            Param::Int(&params::ib::GID_INDEX),
            Param::Str(&params::ib::ADDR_FAMILY),
            Param::Str(&params::ib::ADDR_RANGE),
            Param::Int(&params::ib::ROCE_VERSION_NUM),
            Param::Int(&params::ib::QPS_PER_CONNECTION),
            Param::Int(&params::ib::TIMEOUT),
            Param::Int(&params::ib::RETRY_CNT),
            Param::Int(&params::ib::SL),
            Param::Int(&params::ib::TC),
            Param::Int(&params::ib::PKEY),
            Param::Str(&params::ib::IBVERBS_LIB),
            Param::Str(&params::ib::IB_VERBS_LIB),
        ],
    ),
];

/// Every registered parameter with who reads it (`"runtime"`, `"net-socket"`,
/// `"net-ib"`).
pub fn all_params() -> impl Iterator<Item = (&'static str, Param)> {
    PARAMS.iter().map(|p| ("runtime", *p)).chain(
        PLUGIN_PARAMS
            .iter()
            .flat_map(|(o, ps)| ps.iter().map(move |p| (*o, *p))),
    )
}

/// The registered parameter `name`, with who reads it.
pub fn find_param(name: &str) -> Option<(&'static str, Param)> {
    all_params().find(|(_, p)| p.name() == name)
}
