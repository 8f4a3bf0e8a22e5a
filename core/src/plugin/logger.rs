//! The `ncclDebugLogger_t` the host hands to plugins.
//!
//! NCCL's logger is C-variadic (`void (*)(ncclDebugLogLevel level, unsigned long
//! flags, const char* file, int line, const char* fmt, ...)`), which stable Rust
//! cannot define. A tiny C shim (`core/csrc/logger.c`, built by `core/build.rs` with
//! the `cc` crate) provides `ferroccl_nccl_logger`: it `vsnprintf`s the message and
//! calls [`sink`] below with the finished text, which emits one `tracing` event:
//!
//! * target `"ferroccl::plugin"`;
//! * level: `NCCL_LOG_WARN`/`NCCL_LOG_ABORT` → `WARN`, `NCCL_LOG_INFO`/`NCCL_LOG_VERSION`
//!   → `INFO`, `NCCL_LOG_TRACE` → `TRACE` (`NCCL_LOG_NONE` and unknown levels → `DEBUG`);
//! * fields `flags` (the `ncclDebugLogSubSys` bit mask, e.g. `0x10` = `NCCL_NET`),
//!   `file`, `line`, and the message.
//!
//! Tests (and tools) can additionally capture the raw lines with [`LogCapture`].

use std::ffi::{CStr, c_char, c_int, c_ulong};
use std::sync::Mutex;
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use ferroccl_plugin_api::log::DebugLogger;

type Sink = extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, msg: *const c_char);

unsafe extern "C" {
    /// The C-variadic logger of `csrc/logger.c`.
    fn ferroccl_nccl_logger(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...);
    /// Installs the Rust sink the C logger forwards formatted messages to.
    fn ferroccl_logger_set_sink(sink: Option<Sink>);
}

static INSTALL: Once = Once::new();

/// The host's `ncclDebugLogger_t`, ready to pass to a plugin's `init`.
///
/// The first call installs the Rust sink in the C shim; messages logged through
/// the returned function then reach `tracing` (and any active [`LogCapture`]).
pub fn nccl_logger() -> DebugLogger {
    INSTALL.call_once(|| {
        // SAFETY: `sink` is a valid `extern "C"` function with the signature the
        // shim expects, and it lives for the whole process.
        unsafe { ferroccl_logger_set_sink(Some(sink)) };
    });
    ferroccl_nccl_logger
}

/// One message a plugin logged through [`nccl_logger`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLogLine {
    /// `ncclDebugLogLevel` (2 = WARN, 3 = INFO, 5 = TRACE, …).
    pub level: i32,
    /// Subsystem flags (`NCCL_INIT` = 0x1, `NCCL_NET` = 0x10, `NCCL_ALL` = !0).
    pub flags: u64,
    /// Source file (or function name) the plugin passed; empty for NULL.
    pub file: String,
    /// Source line the plugin passed.
    pub line: i32,
    /// The formatted message.
    pub message: String,
}

static CAPTURES: AtomicUsize = AtomicUsize::new(0);
static CAPTURED: Mutex<Vec<PluginLogLine>> = Mutex::new(Vec::new());

/// Records every plugin log line while at least one `LogCapture` is alive.
///
/// The buffer is process-global (plugins log from whatever thread calls them), so
/// concurrent tests see each other's lines: filter with [`LogCapture::lines_containing`].
#[derive(Debug)]
#[must_use = "capturing stops when the LogCapture is dropped"]
pub struct LogCapture {
    _private: (),
}

impl LogCapture {
    /// Starts capturing.
    pub fn start() -> Self {
        CAPTURES.fetch_add(1, Ordering::AcqRel);
        LogCapture { _private: () }
    }

    /// Every line captured so far (by this and any other live capture).
    pub fn lines(&self) -> Vec<PluginLogLine> {
        CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Captured lines whose message contains `needle`.
    pub fn lines_containing(&self, needle: &str) -> Vec<PluginLogLine> {
        self.lines()
            .into_iter()
            .filter(|l| l.message.contains(needle))
            .collect()
    }
}

impl Drop for LogCapture {
    fn drop(&mut self) {
        if CAPTURES.fetch_sub(1, Ordering::AcqRel) == 1 {
            CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}

/// Converts a possibly-NULL C string to an owned `String` (lossy UTF-8).
fn lossy(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the shim passes NUL-terminated strings (the plugin's `file` argument,
    // which NCCL's contract requires to be a C string, and its own buffer).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Called by the C shim with a formatted message. Never unwinds into C.
extern "C" fn sink(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, msg: *const c_char) {
    let _ = std::panic::catch_unwind(|| {
        let file = lossy(file);
        let message = lossy(msg);
        let message = message.trim_end_matches('\n');
        #[allow(clippy::unnecessary_cast)] // c_ulong is u32 on some targets
        let flags = flags as u64;
        match level {
            2 | 4 => {
                tracing::warn!(target: "ferroccl::plugin", flags = format_args!("{flags:#x}"), file = %file, line, "{message}")
            }
            1 | 3 => {
                tracing::info!(target: "ferroccl::plugin", flags = format_args!("{flags:#x}"), file = %file, line, "{message}")
            }
            5 => {
                tracing::trace!(target: "ferroccl::plugin", flags = format_args!("{flags:#x}"), file = %file, line, "{message}")
            }
            _ => {
                tracing::debug!(target: "ferroccl::plugin", level, flags = format_args!("{flags:#x}"), file = %file, line, "{message}")
            }
        }
        if CAPTURES.load(Ordering::Acquire) > 0 {
            CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).push(PluginLogLine {
                level,
                flags,
                file,
                line,
                message: message.to_owned(),
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variadic_logger_formats_and_captures() {
        let cap = LogCapture::start();
        let log = nccl_logger();
        // SAFETY: valid format string and matching arguments.
        unsafe {
            log(
                3,
                0x10,
                c"net.c".as_ptr(),
                42,
                c"unit-test %d %s".as_ptr(),
                7 as c_int,
                c"seven".as_ptr(),
            )
        };
        let lines = cap.lines_containing("unit-test 7 seven");
        assert_eq!(lines.len(), 1, "{:?}", cap.lines());
        assert_eq!(lines[0].level, 3);
        assert_eq!(lines[0].flags, 0x10);
        assert_eq!(lines[0].file, "net.c");
        assert_eq!(lines[0].line, 42);
    }

    #[test]
    fn long_messages_are_not_truncated() {
        let cap = LogCapture::start();
        let long = "x".repeat(5000) + "unit-long-end";
        let c = std::ffi::CString::new(long.clone()).unwrap();
        // SAFETY: "%s" with one C string argument.
        unsafe { nccl_logger()(2, !0, std::ptr::null(), 0, c"%s".as_ptr(), c.as_ptr()) };
        let lines = cap.lines_containing("unit-long-end");
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].message, long);
        assert_eq!(lines[0].file, "");
    }
}
