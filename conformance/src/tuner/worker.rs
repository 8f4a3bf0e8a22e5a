//! The worker side of the tuner section: one check on one API version in this
//! process (`--tuner --worker ID`); the symbol probe (`--tuner --probe`) is
//! [`crate::section::Section::probe_main`].
//!
//! Every tuner call is announced with [`enter`]; a watchdog thread fails the
//! check when a call does not return within 20 s, and a fatal signal prints the
//! call that was running (the parent turns that into the failure message).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferroccl::plugin::tuner::TunerAdapter;

use super::SECTION;
use super::checks::TunerCx;
use crate::outcome::CheckOutcome;
use crate::section::{die_with_parent, judge_body, on_fatal_signals};
use crate::watch::{CRASH_MARKER, emit_result};

/// Tuner entry points the watchdog names.
const CALLS: [&str; 6] = ["", "load", "init", "getCollInfo", "getChunkSize", "finalize"];
/// Longest a tuner call may take.
const LIMIT: Duration = Duration::from_secs(20);

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static STARTED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A running tuner call; the watchdog stops watching when it drops.
#[derive(Debug)]
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        CURRENT.store(0, Ordering::Release);
    }
}

/// Marks the tuner call `name` (`init`, `getCollInfo`, …) as running.
pub fn enter(name: &str) -> Guard {
    let i = CALLS.iter().position(|c| *c == name).unwrap_or(0);
    STARTED_MS.store(now_ms(), Ordering::Release);
    CURRENT.store(i, Ordering::Release);
    Guard(())
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let i = CURRENT.load(Ordering::Acquire);
    let name = if i == 0 { "no tuner call" } else { CALLS[i] };
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
    let _ = std::thread::Builder::new().name("tuner-watchdog".into()).spawn(|| {
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
                        "{name} returns within {} s (a tuner call that never returns hangs NCCL)",
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

/// Runs tuner check `id` on version `version` of `plugin` (never panics).
pub fn run_check(id: &str, plugin: &str, version: u32) -> CheckOutcome {
    let check = match SECTION.find(id) {
        Ok(c) => c,
        Err(out) => return *out,
    };
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let adapter = {
            let _g = enter("load");
            match TunerAdapter::open_version(plugin, version) {
                Ok(a) => Arc::new(a),
                Err(e) => return CheckOutcome::fail("the plugin loads through the host", e.to_string()),
            }
        };
        let mut cx = TunerCx {
            adapter,
            version,
            notes: Vec::new(),
        };
        let mut out = judge_body(check.body, &mut cx, CheckOutcome::pass);
        out.notes.append(&mut cx.notes);
        out
    }));
    r.unwrap_or_else(|_| CheckOutcome::fail("the check runs to completion", "the conformance suite itself panicked"))
}

/// Body of `--tuner --worker ID`.
pub fn worker_main(id: &str, plugin: &str, version: u32) -> i32 {
    die_with_parent();
    start_watch();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
