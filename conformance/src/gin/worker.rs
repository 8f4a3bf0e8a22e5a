//! The worker side of the GIN section: one check on one API version in this
//! process (`--gin --worker ID`); the symbol probe (`--gin --probe`) is
//! [`crate::section::Section::probe_main`].
//!
//! Every GIN call is announced with [`enter`]; a watchdog thread fails the check
//! when a call does not return within 20 s, and a fatal signal prints the call that
//! was running (the parent turns that into the failure message).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::abi::GinHostSlots;

use super::SECTION;
use super::checks::GinCx;
use crate::outcome::CheckOutcome;
use crate::section::{die_with_parent, judge_body, on_fatal_signals};
use crate::watch::{CRASH_MARKER, emit_result};

/// GIN entry points the watchdog names.
const CALLS: [&str; 6] = ["", "init", "devices", "getProperties", "getGinProperties", "finalize"];
/// Longest a GIN host-side call may take.
const LIMIT: Duration = Duration::from_secs(20);

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static STARTED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A running GIN call; the watchdog stops watching when it drops.
#[derive(Debug)]
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        CURRENT.store(0, Ordering::Release);
    }
}

/// Marks the GIN call `name` (`init`, `devices`, …) as running.
pub fn enter(name: &str) -> Guard {
    let i = CALLS.iter().position(|c| *c == name).unwrap_or(0);
    STARTED_MS.store(now_ms(), Ordering::Release);
    CURRENT.store(i, Ordering::Release);
    Guard(())
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let i = CURRENT.load(Ordering::Acquire);
    let name = if i == 0 { "no GIN call" } else { CALLS[i] };
    let mut line = Vec::with_capacity(64);
    line.extend_from_slice(b"\n");
    line.extend_from_slice(CRASH_MARKER.as_bytes());
    line.extend_from_slice(b"signal during ");
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b"\n");
    // SAFETY: write(2) on stderr from a valid buffer, then restoring the default
    // action and re-raising; all async-signal-safe.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn start_watch() {
    EPOCH.get_or_init(Instant::now);
    on_fatal_signals(on_fatal_signal);
    let _ = std::thread::Builder::new().name("gin-watchdog".into()).spawn(|| {
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let cur = CURRENT.load(Ordering::Acquire);
            if cur == 0 {
                continue;
            }
            let elapsed = Duration::from_millis(now_ms().saturating_sub(STARTED_MS.load(Ordering::Acquire)));
            if elapsed > LIMIT && CURRENT.load(Ordering::Acquire) == cur {
                let name = CALLS[cur];
                emit_result(&CheckOutcome::fail(
                    format!(
                        "{name} returns within {} s (NCCL calls it at communicator init)",
                        LIMIT.as_secs()
                    ),
                    format!(
                        "{name} did not return within {} s (the worker was stopped)",
                        LIMIT.as_secs()
                    ),
                ));
                // SAFETY: ending the worker while the main thread is stuck in the plugin.
                unsafe { libc::_exit(0) };
            }
        }
    });
}

/// Runs GIN check `id` on version `version` of `plugin` (never panics).
pub fn run_check(id: &str, plugin: &str, version: u32) -> CheckOutcome {
    let check = match SECTION.find(id) {
        Ok(c) => c,
        Err(out) => return *out,
    };
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let lib = match SECTION.open(plugin) {
            Ok(l) => l,
            Err(e) => return CheckOutcome::fail("the GIN library opens", e),
        };
        let sym = format!("{}{version}", SECTION.symbol);
        let table = std::ffi::CString::new(sym.clone()).ok().and_then(|s| lib.symbol(&s));
        let Some(table) = table else {
            return CheckOutcome::fail(format!("the library exports {sym}"), format!("{sym} not found"));
        };
        // SAFETY: `table` is the library's `ncclGinPlugin_v<version>` data symbol, of that layout.
        let Some(slots) = (unsafe { GinHostSlots::read(table, version) }) else {
            return CheckOutcome::fail("GIN version 13 or 14", format!("version {version}"));
        };
        let mut cx = GinCx {
            slots,
            version,
            notes: Vec::new(),
        };
        let mut out = judge_body(check.body, &mut cx, CheckOutcome::pass);
        out.notes.append(&mut cx.notes);
        drop(lib);
        out
    }));
    r.unwrap_or_else(|_| CheckOutcome::fail("the check runs to completion", "the conformance suite itself panicked"))
}

/// Body of `--gin --worker ID`.
pub fn worker_main(id: &str, plugin: &str, version: u32) -> i32 {
    die_with_parent();
    start_watch();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
