//! Logging from a plugin through NCCL's C-variadic `ncclDebugLogger_t`.
//!
//! The export shims store the logger NCCL passes to `init` with [`set_logger`];
//! plugin code then logs with [`net_warn!`](crate::net_warn),
//! [`net_info!`](crate::net_info) and [`net_trace!`](crate::net_trace), which
//! format in Rust and call the C logger with the format `"%s"`, so no Rust text is
//! ever interpreted as a printf format. Before `init` (or with a NULL logger)
//! messages are dropped.

use std::ffi::{CString, c_char, c_int, c_ulong};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `ncclDebugLogLevel` values (`src/include/nccl_common.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum Level {
    /// `NCCL_LOG_NONE`
    None = 0,
    /// `NCCL_LOG_VERSION`
    Version = 1,
    /// `NCCL_LOG_WARN`
    Warn = 2,
    /// `NCCL_LOG_INFO`
    Info = 3,
    /// `NCCL_LOG_ABORT`
    Abort = 4,
    /// `NCCL_LOG_TRACE`
    Trace = 5,
}

/// `ncclDebugLogger_t`: `void (*)(ncclDebugLogLevel level, unsigned long flags,
/// const char* file, int line, const char* fmt, ...)`.
pub type DebugLogger =
    unsafe extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...);

static LOGGER: AtomicUsize = AtomicUsize::new(0);

/// Stores the logger NCCL passed to `init` (NULL clears it).
pub fn set_logger(logger: Option<DebugLogger>) {
    LOGGER.store(logger.map_or(0, |f| f as usize), Ordering::Release);
}

/// The stored logger, if any.
pub fn logger() -> Option<DebugLogger> {
    let p = LOGGER.load(Ordering::Acquire);
    if p == 0 {
        None
    } else {
        // SAFETY: only `set_logger` stores non-zero values, and they come from a
        // valid `DebugLogger` function pointer.
        Some(unsafe { std::mem::transmute::<usize, DebugLogger>(p) })
    }
}

/// Sends one message to the stored logger: `level`, subsystem `flags`
/// (`NCCL_INIT` = 0x1, `NCCL_NET` = 0x10, …), source `file`/`line`.
/// Interior NUL bytes in the message are replaced.
pub fn log(level: Level, flags: u64, file: &str, line: u32, msg: std::fmt::Arguments<'_>) {
    let Some(f) = logger() else { return };
    let text = std::fmt::format(msg).replace('\0', "\u{FFFD}");
    let text = CString::new(text).unwrap_or_default();
    let file = CString::new(file.replace('\0', "")).unwrap_or_default();
    // SAFETY: `f` is a valid logger; "%s" consumes exactly one `char*` argument,
    // which is a NUL-terminated string alive for the call.
    unsafe {
        f(
            level as c_int,
            flags as c_ulong,
            file.as_ptr(),
            line as c_int,
            c"%s".as_ptr(),
            text.as_ptr(),
        )
    }
}

/// Subsystem flag `NCCL_INIT` (0x1).
pub const NCCL_INIT: u64 = 0x1;
/// Subsystem flag `NCCL_NET` (0x10).
pub const NCCL_NET: u64 = 0x10;
/// Subsystem flag `NCCL_ALL` (~0).
pub const NCCL_ALL: u64 = !0;

/// Logs at `NCCL_LOG_WARN` to all subsystems: `net_warn!("peer {} died", addr)`.
#[macro_export]
macro_rules! net_warn {
    ($($arg:tt)*) => {
        $crate::log::log($crate::log::Level::Warn, $crate::log::NCCL_ALL, file!(), line!(), format_args!($($arg)*))
    };
}

/// Logs at `NCCL_LOG_INFO` for subsystem flags: `net_info!(NCCL_NET, "...")`.
#[macro_export]
macro_rules! net_info {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::log($crate::log::Level::Info, $flags, file!(), line!(), format_args!($($arg)*))
    };
}

/// Logs at `NCCL_LOG_TRACE` for subsystem flags.
#[macro_export]
macro_rules! net_trace {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::log($crate::log::Level::Trace, $flags, file!(), line!(), format_args!($($arg)*))
    };
}
