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
//! We never call `setenv`: the merged view lives in a [`Config`] (process-wide one
//! via [`Config::global`]); tests build their own with [`Config::from_sources`] or
//! [`Config::load`].

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
    /// environment and the files NCCL would read, then never changed.
    pub fn global() -> &'static Config {
        static GLOBAL: OnceLock<Config> = OnceLock::new();
        GLOBAL.get_or_init(Config::from_process)
    }

    /// Builds a configuration from the real environment and files (not cached).
    pub fn from_process() -> Config {
        let env = std::env::vars_os()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect::<Vec<_>>();
        Config::load(env, |p| {
            std::fs::read(p).ok().map(|b| String::from_utf8_lossy(&b).into_owned())
        })
    }

    /// Builds a configuration from an explicit environment, choosing files exactly as
    /// NCCL does (`$NCCL_CONF_FILE` if non-empty else `$HOME/.nccl.conf`, then
    /// `/etc/nccl.conf`) and reading them with `read_file` (`None` = missing).
    pub fn load(
        env: impl IntoIterator<Item = (String, String)>,
        read_file: impl Fn(&Path) -> Option<String>,
    ) -> Config {
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
        let contents: Vec<(PathBuf, String)> = files
            .into_iter()
            .filter_map(|p| read_file(&p).map(|c| (p, c)))
            .collect();
        Config::from_sources(env, contents.iter().map(|(p, c)| (p.as_path(), c.as_str())))
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
        Config { vars }
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
        v.into_iter()
            .map(|(k, s)| (k, s, PARAMS.iter().any(|p| p.name() == k)))
            .collect()
    }

    /// The echo NCCL prints at `NCCL_DEBUG=INFO` (`"%s set by environment to %s."`),
    /// one line per variable from [`set_params`](Self::set_params), e.g.
    /// `NCCL_BUFFSIZE set by environment to 1048576.` or
    /// `NCCL_DEBUG set by file /etc/nccl.conf to INFO.`; unregistered names get a
    /// ` (not a parameter ferroccl uses)` suffix.
    pub fn echo(&self) -> Vec<String> {
        self.set_params()
            .into_iter()
            .map(|(k, s, known)| {
                format!(
                    "{k} set by {} to {}.{}",
                    s.source,
                    s.value,
                    if known { "" } else { " (not a parameter ferroccl uses)" }
                )
            })
            .collect()
    }

    /// Checks every registered integer and choice parameter; returns all errors.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let errs: Vec<ConfigError> = PARAMS.iter().filter_map(|p| p.check(self).err()).collect();
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
    /// `NCCL_PROTO` (accepted and echoed; only Simple exists).
    pub static PROTO: StrParam = s(
        "NCCL_PROTO",
        None,
        "protocols allowed (accepted and echoed; ferroccl uses Simple)",
    );
    /// `NCCL_ALGO` (accepted and echoed; only Ring exists).
    pub static ALGO: StrParam = s(
        "NCCL_ALGO",
        None,
        "algorithms allowed (accepted and echoed; ferroccl uses Ring)",
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
];
