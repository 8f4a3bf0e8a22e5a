//! NCCL-style logging through `tracing`: `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS`,
//! `NCCL_DEBUG_FILE`, and NCCL's line shape (`src/debug.cc`):
//!
//! ```text
//! host:pid:tid [rank] NCCL INFO message
//! host:pid:tid [rank] file.rs:123 NCCL WARN message
//! host:pid:tid [rank] 12.345678 file.rs:123 NCCL TRACE message
//! ```
//!
//! `host` is the host name up to the first `.`, `tid` the Linux thread id, `rank` the
//! value set on the emitting thread with [`set_rank`] (`-1` when unset; NCCL prints
//! the CUDA device there), the TRACE timestamp is milliseconds since the layer was
//! created. NCCL puts an empty line before each WARN line; we do not.
//!
//! Levels follow NCCL: with `NCCL_DEBUG` unset nothing is printed (not even WARN);
//! `VERSION < WARN < INFO < ABORT < TRACE`. WARN and VERSION lines ignore the
//! subsystem mask (NCCL logs them with `NCCL_ALL`); INFO and TRACE lines need their
//! subsystem in `NCCL_DEBUG_SUBSYS` (default `INIT,BOOTSTRAP,ENV`; `^` inverts).
//! Output goes to stdout (NCCL's default) or `NCCL_DEBUG_FILE` (`%h` host, `%p` pid).
//!
//! Events: use [`nccl_info!`](crate::nccl_info), [`nccl_warn!`](crate::nccl_warn),
//! [`nccl_trace!`](crate::nccl_trace), [`nccl_version!`](crate::nccl_version); they
//! are ordinary `tracing` events with target `nccl::<SUBSYS>`. Plain `tracing` events
//! from targets starting with `ferroccl` or `nccl` are shown too (ERROR/WARN as WARN,
//! INFO as INFO, DEBUG/TRACE as TRACE, subsystem ALL). [`log_raw`] serves the C
//! logger handed to plugins (dynamic level and flags).

use std::cell::Cell;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::config::{Config, params};

pub use ferroccl_plugin_api::log::Level;

/// `ncclDebugLogSubSys` flags (`src/include/nccl_common.h`).
pub mod subsys {
    /// `NCCL_INIT`
    pub const INIT: u64 = 0x1;
    /// `NCCL_COLL`
    pub const COLL: u64 = 0x2;
    /// `NCCL_P2P`
    pub const P2P: u64 = 0x4;
    /// `NCCL_SHM`
    pub const SHM: u64 = 0x8;
    /// `NCCL_NET`
    pub const NET: u64 = 0x10;
    /// `NCCL_GRAPH`
    pub const GRAPH: u64 = 0x20;
    /// `NCCL_TUNING`
    pub const TUNING: u64 = 0x40;
    /// `NCCL_ENV`
    pub const ENV: u64 = 0x80;
    /// `NCCL_ALLOC`
    pub const ALLOC: u64 = 0x100;
    /// `NCCL_CALL`
    pub const CALL: u64 = 0x200;
    /// `NCCL_PROXY`
    pub const PROXY: u64 = 0x400;
    /// `NCCL_NVLS`
    pub const NVLS: u64 = 0x800;
    /// `NCCL_BOOTSTRAP`
    pub const BOOTSTRAP: u64 = 0x1000;
    /// `NCCL_REG`
    pub const REG: u64 = 0x2000;
    /// `NCCL_PROFILE`
    pub const PROFILE: u64 = 0x4000;
    /// `NCCL_RAS`
    pub const RAS: u64 = 0x8000;
    /// `NCCL_DESTROY`
    pub const DESTROY: u64 = 0x10000;
    /// `NCCL_ALLOC_HOST`
    pub const ALLOC_HOST: u64 = 0x20000;
    /// `NCCL_ALL`
    pub const ALL: u64 = !0;

    /// Names as `NCCL_DEBUG_SUBSYS` spells them, with their flags.
    pub const NAMES: &[(&str, u64)] = &[
        ("INIT", INIT),
        ("COLL", COLL),
        ("P2P", P2P),
        ("SHM", SHM),
        ("NET", NET),
        ("GRAPH", GRAPH),
        ("TUNING", TUNING),
        ("ENV", ENV),
        ("ALLOC", ALLOC),
        ("CALL", CALL),
        ("PROXY", PROXY),
        ("NVLS", NVLS),
        ("BOOTSTRAP", BOOTSTRAP),
        ("REG", REG),
        ("PROFILE", PROFILE),
        ("RAS", RAS),
        ("DESTROY", DESTROY),
        ("ALLOC_HOST", ALLOC_HOST),
        ("ALL", ALL),
    ];

    /// The flag of a subsystem name (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<u64> {
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, f)| f)
    }
}

/// Parses `NCCL_DEBUG` (ASCII case-insensitive); unset, empty or unknown = `None`
/// level (NCCL ignores unknown values too).
pub fn parse_level(v: Option<&str>) -> Level {
    match v.map(|s| s.to_ascii_uppercase()).as_deref() {
        Some("VERSION") => Level::Version,
        Some("WARN") => Level::Warn,
        Some("INFO") => Level::Info,
        Some("ABORT") => Level::Abort,
        Some("TRACE") => Level::Trace,
        _ => Level::None,
    }
}

/// Parses `NCCL_DEBUG_SUBSYS` into a mask: comma list of names, a leading `^`
/// inverts (all but those); unknown names are ignored. `None` = the default
/// `INIT,BOOTSTRAP,ENV`.
pub fn parse_subsys(v: Option<&str>) -> u64 {
    let s = v.unwrap_or("INIT,BOOTSTRAP,ENV");
    let (invert, list) = match s.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let mask = list.split(',').filter_map(subsys::from_name).fold(0u64, |m, f| m | f);
    if invert { !mask } else { mask }
}

/// Expands `NCCL_DEBUG_FILE`: `%h` → host name, `%p` → pid, `%%` → `%`; any other
/// `%x` is kept as is.
pub fn expand_debug_file(pattern: &str, host: &str, pid: u32) -> String {
    let mut out = String::new();
    let mut it = pattern.chars().peekable();
    while let Some(c) = it.next() {
        if c == '%' {
            match it.peek() {
                Some('h') => {
                    out.push_str(host);
                    it.next();
                }
                Some('p') => {
                    let _ = write!(out, "{pid}");
                    it.next();
                }
                Some('%') => {
                    out.push('%');
                    it.next();
                }
                _ => out.push('%'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The host name up to the first `.` (NCCL's `getHostName(…, '.')`).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for `buf.len()` bytes; gethostname NUL-terminates on success
    // (we also search for the NUL within the buffer only).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    name.split('.').next().unwrap_or_default().to_string()
}

/// The Linux thread id of the calling thread.
pub fn gettid() -> i64 {
    // SAFETY: gettid has no preconditions.
    i64::from(unsafe { libc::gettid() })
}

thread_local! {
    static RANK: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Sets the rank shown in `[rank]` on lines logged by the calling thread.
pub fn set_rank(rank: Option<i32>) {
    RANK.with(|r| r.set(rank));
}

/// The rank set on the calling thread.
pub fn rank() -> Option<i32> {
    RANK.with(|r| r.get())
}

/// Log filtering and destination, from `NCCL_DEBUG*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// `NCCL_DEBUG`.
    pub level: Level,
    /// `NCCL_DEBUG_SUBSYS` mask.
    pub mask: u64,
    /// `NCCL_DEBUG_FILE` (already expanded); `None` = stdout.
    pub file: Option<PathBuf>,
}

impl LogSettings {
    /// Reads `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS`, `NCCL_DEBUG_FILE` from `cfg`.
    pub fn from_config(cfg: &Config) -> LogSettings {
        LogSettings {
            level: parse_level(cfg.get_str(params::DEBUG.name)),
            mask: parse_subsys(cfg.get_str(params::DEBUG_SUBSYS.name)),
            file: cfg
                .get_str(params::DEBUG_FILE.name)
                .map(|p| PathBuf::from(expand_debug_file(p, &hostname(), std::process::id()))),
        }
    }

    /// Whether a line of `level` for subsystem `flags` is printed (NCCL's check:
    /// `level <= NCCL_DEBUG` and, for INFO/TRACE/ABORT, `flags & mask != 0`).
    pub fn enabled(&self, level: Level, flags: u64) -> bool {
        if level == Level::None || level > self.level {
            return false;
        }
        matches!(level, Level::Warn | Level::Version) || flags & self.mask != 0
    }
}

/// Classification of a tracing event's metadata: (NCCL level, subsystem flags), or
/// `None` for events this layer does not print. `nccl::RAW` events carry their level
/// and flags in fields and report `(Warn, ALL)` here (lowest bar), refined per event.
fn classify(meta: &Metadata<'_>) -> Option<(Level, u64)> {
    let target = meta.target();
    let tl = *meta.level();
    let level = if tl <= tracing::Level::WARN {
        Level::Warn
    } else if tl == tracing::Level::INFO {
        Level::Info
    } else {
        Level::Trace
    };
    if let Some(name) = target.strip_prefix("nccl::") {
        return match name {
            "RAW" => Some((Level::Warn, subsys::ALL)),
            "VERSION" => Some((Level::Version, subsys::ALL)),
            _ => Some((level, subsys::from_name(name).unwrap_or(subsys::ALL))),
        };
    }
    if target.starts_with("ferroccl") || target == "nccl" {
        return Some((level, subsys::ALL));
    }
    None
}

#[derive(Default)]
struct Fields {
    message: String,
    level: Option<i64>,
    flags: Option<u64>,
    file: Option<String>,
    line: Option<u64>,
    extra: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            "nccl_file" => self.file = Some(format!("{value:?}").trim_matches('"').to_string()),
            n => {
                let _ = write!(self.extra, " {n}={value:?}");
            }
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "nccl_file" => self.file = Some(value.to_string()),
            n => {
                let _ = write!(self.extra, " {n}={value:?}");
            }
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "nccl_level" => self.level = Some(value),
            "nccl_line" => self.line = u64::try_from(value).ok(),
            n => {
                let _ = write!(self.extra, " {n}={value}");
            }
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "nccl_flags" => self.flags = Some(value),
            "nccl_line" => self.line = Some(value),
            "nccl_level" => self.level = i64::try_from(value).ok(),
            n => {
                let _ = write!(self.extra, " {n}={value}");
            }
        }
    }
}

fn level_from_i64(v: i64) -> Level {
    match v {
        1 => Level::Version,
        2 => Level::Warn,
        3 => Level::Info,
        4 => Level::Abort,
        5 => Level::Trace,
        _ => Level::None,
    }
}

/// The `tracing-subscriber` layer that filters per [`LogSettings`] and writes NCCL
/// lines to a writer (stdout, `NCCL_DEBUG_FILE`, or anything for tests). Each line is
/// written and flushed with one `write_all` under a lock.
pub struct NcclLayer {
    settings: LogSettings,
    writer: Mutex<Box<dyn Write + Send>>,
    host: String,
    pid: u32,
    start: Instant,
}

impl std::fmt::Debug for NcclLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclLayer")
            .field("settings", &self.settings)
            .field("host", &self.host)
            .finish()
    }
}

impl NcclLayer {
    /// A layer with explicit settings writing to `writer` (`settings.file` is ignored).
    pub fn new(settings: LogSettings, writer: Box<dyn Write + Send>) -> NcclLayer {
        NcclLayer {
            settings,
            writer: Mutex::new(writer),
            host: hostname(),
            pid: std::process::id(),
            start: Instant::now(),
        }
    }

    /// A layer for `cfg`: writes to `NCCL_DEBUG_FILE` (created/truncated, as NCCL's
    /// `fopen(…, "w")`) or stdout when unset or when the file cannot be opened.
    pub fn from_config(cfg: &Config) -> NcclLayer {
        let settings = LogSettings::from_config(cfg);
        let writer: Box<dyn Write + Send> = match settings.file.as_ref().and_then(|p| std::fs::File::create(p).ok()) {
            Some(f) => Box::new(f),
            None => Box::new(std::io::stdout()),
        };
        NcclLayer::new(settings, writer)
    }

    /// The settings this layer filters with.
    pub fn settings(&self) -> &LogSettings {
        &self.settings
    }

    /// Formats one line (without the trailing newline).
    fn format(&self, level: Level, file: &str, line: u64, msg: &str) -> String {
        let tid = gettid();
        let rank = rank().unwrap_or(-1);
        let head = format!("{}:{}:{} [{}]", self.host, self.pid, tid, rank);
        match level {
            Level::Warn => format!("{head} {file}:{line} NCCL WARN {msg}"),
            Level::Trace => {
                let ms = self.start.elapsed().as_secs_f64() * 1000.0;
                format!("{head} {ms:.6} {file}:{line} NCCL TRACE {msg}")
            }
            Level::Abort => format!("{head} {file}:{line} NCCL ABORT {msg}"),
            _ => format!("{head} NCCL INFO {msg}"),
        }
    }
}

impl<S: Subscriber> Layer<S> for NcclLayer {
    fn register_callsite(&self, _meta: &'static Metadata<'static>) -> Interest {
        // Settings differ between layers (tests); decide per event.
        Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        classify(meta).is_some_and(|(l, f)| self.settings.enabled(l, f))
    }

    /// The most verbose `tracing` level this layer can print, so that events
    /// above it cost one comparison at their call site (with `NCCL_DEBUG`
    /// unset, none: the per-operation INFO lines are skipped before any
    /// metadata is looked at). `nccl::RAW` and `nccl::VERSION` events are
    /// emitted at `tracing` INFO whatever the NCCL level they carry.
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        use tracing::level_filters::LevelFilter;
        Some(match self.settings.level {
            Level::None => LevelFilter::OFF,
            Level::Version | Level::Warn | Level::Info => LevelFilter::INFO,
            _ => LevelFilter::TRACE,
        })
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let Some((mut level, mut flags)) = classify(meta) else {
            return;
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(l) = fields.level {
            level = level_from_i64(l);
        }
        if let Some(f) = fields.flags {
            flags = f;
        }
        if !self.settings.enabled(level, flags) {
            return;
        }
        let file = fields.file.unwrap_or_else(|| {
            meta.file()
                .map(|f| f.rsplit('/').next().unwrap_or(f).to_string())
                .unwrap_or_default()
        });
        let line = fields.line.or(meta.line().map(u64::from)).unwrap_or(0);
        let mut msg = fields.message;
        msg.push_str(&fields.extra);
        let mut text = self.format(level, &file, line, &msg);
        text.push('\n');
        if let Ok(mut w) = self.writer.lock() {
            let _ = w.write_all(text.as_bytes());
            let _ = w.flush();
        }
    }
}

/// What [`init_from_config`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// Installed the NCCL layer as the global subscriber.
    Installed,
    /// Already initialised by an earlier call (nothing changed).
    AlreadyInitialized,
    /// Another global subscriber exists; events go to it (compose
    /// [`NcclLayer::from_config`] into it for NCCL-shaped lines).
    ExistingSubscriber,
}

static SETTINGS: OnceLock<(LogSettings, InitOutcome)> = OnceLock::new();

/// Installs an [`NcclLayer`] built from `cfg` as the global `tracing` subscriber,
/// then logs `cfg`'s problems once as WARN lines: configuration files that were
/// not read ([`Config::warnings`]) and registered parameters with invalid values
/// ([`Config::validate`]). Idempotent: only the first call acts; never panics when
/// a global subscriber was already set by someone else.
pub fn init_from_config(cfg: &Config) -> InitOutcome {
    let mut first = false;
    let (_, outcome) = SETTINGS.get_or_init(|| {
        first = true;
        use tracing_subscriber::layer::SubscriberExt;
        let layer = NcclLayer::from_config(cfg);
        let settings = layer.settings().clone();
        let subscriber = tracing_subscriber::registry().with(layer);
        let outcome = match tracing::subscriber::set_global_default(subscriber) {
            Ok(()) => InitOutcome::Installed,
            Err(_) => InitOutcome::ExistingSubscriber,
        };
        (settings, outcome)
    });
    if first {
        // Once: configuration files that were not read, and registered
        // parameters with invalid values (NCCL warns about bad values as it reads them).
        for w in cfg.warnings() {
            crate::log::nccl_warn!("{w}");
        }
        for l in cfg.env_plugin_info() {
            crate::log::nccl_info!(ENV, "{l}");
        }
        if let Err(errs) = cfg.validate() {
            for e in errs {
                crate::log::nccl_warn!("{e}");
            }
        }
        *outcome
    } else {
        InitOutcome::AlreadyInitialized
    }
}

/// The settings installed by [`init_from_config`], if it ran.
pub fn global_settings() -> Option<&'static LogSettings> {
    SETTINGS.get().map(|(s, _)| s)
}

/// Whether a line would be printed by the global layer (`false` before
/// [`init_from_config`]). Cheap: use to skip building expensive messages.
pub fn enabled(level: Level, flags: u64) -> bool {
    global_settings().is_some_and(|s| s.enabled(level, flags))
}

/// Logs one message with dynamic level and subsystem flags, e.g. from the C
/// `ncclDebugLogger_t` handed to plugins (after it formatted the printf message).
pub fn log_raw(level: Level, flags: u64, file: &str, line: u32, msg: &str) {
    tracing::event!(
        target: "nccl::RAW",
        tracing::Level::INFO,
        nccl_level = level as i64,
        nccl_flags = flags,
        nccl_file = file,
        nccl_line = u64::from(line),
        "{}",
        msg
    );
}

/// Re-exports for the macros.
#[doc(hidden)]
pub mod __private {
    pub use tracing;
}

/// INFO line for a subsystem: `nccl_info!(INIT, "comm {:p} rank {}", comm, rank)`.
/// Subsystem names as in `NCCL_DEBUG_SUBSYS` (INIT, COLL, P2P, NET, BOOTSTRAP, ENV, …).
#[macro_export]
macro_rules! nccl_info {
    ($sub:ident, $($arg:tt)+) => {
        $crate::log::__private::tracing::event!(
            target: concat!("nccl::", stringify!($sub)), $crate::log::__private::tracing::Level::INFO, $($arg)+
        )
    };
}

/// TRACE line for a subsystem: `nccl_trace!(NET, "isend {} bytes", n)`.
#[macro_export]
macro_rules! nccl_trace {
    ($sub:ident, $($arg:tt)+) => {
        $crate::log::__private::tracing::event!(
            target: concat!("nccl::", stringify!($sub)), $crate::log::__private::tracing::Level::TRACE, $($arg)+
        )
    };
}

/// WARN line (all subsystems, as NCCL's `WARN()`): `nccl_warn!("connect to {} failed", addr)`.
#[macro_export]
macro_rules! nccl_warn {
    ($($arg:tt)+) => {
        $crate::log::__private::tracing::event!(
            target: "nccl::ALL", $crate::log::__private::tracing::Level::WARN, $($arg)+
        )
    };
}

/// VERSION line (shown from `NCCL_DEBUG=VERSION` up, as NCCL's version banner):
/// `nccl_version!("ferroccl version {}", v)`.
#[macro_export]
macro_rules! nccl_version {
    ($($arg:tt)+) => {
        $crate::log::__private::tracing::event!(
            target: "nccl::VERSION", $crate::log::__private::tracing::Level::INFO, $($arg)+
        )
    };
}

// The macros by their module path as well (`crate::log::nccl_info!`), so the
// runtime's own modules name this one, not the crate root, where
// `#[macro_export]` also puts them for users of the crate.
pub use {nccl_info, nccl_trace, nccl_version, nccl_warn};
