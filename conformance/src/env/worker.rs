//! The worker side of the env section: one check on one API version in this
//! process (`--env --worker ID`); the symbol probe (`--env --probe`) is
//! [`crate::section::Section::probe_main`].
//!
//! Before the plugin is opened the worker sets the variables the checks look up
//! ([`SET_VARS`]) and clears the ones that must be unset ([`unset_names`]). Every
//! plugin call is announced with [`enter`]; a watchdog thread fails the check
//! when a call does not return within 20 s, and a fatal signal prints the call
//! that was running (the parent turns that into the failure message).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferroccl::plugin::env::EnvPlugin;

use super::SECTION;
use super::checks::EnvCx;
use crate::outcome::CheckOutcome;
use crate::section::{die_with_parent, judge_body, on_fatal_signals};
use crate::watch::{CRASH_MARKER, emit_result};

/// Variables the worker sets before the plugin is opened (distinct values, so a
/// string overwritten by another lookup is seen).
pub const SET_VARS: [(&str, &str); 3] = [
    ("FERROCCL_CONFORMANCE_ENV_A", "alpha-value"),
    ("FERROCCL_CONFORMANCE_ENV_B", "bravo=value with spaces"),
    ("FERROCCL_CONFORMANCE_ENV_C", "3"),
];

/// Names the worker makes sure are unset.
pub fn unset_names() -> Vec<String> {
    (0..3)
        .map(|i| format!("FERROCCL_CONFORMANCE_UNSET_{}_{i}", std::process::id()))
        .collect()
}

/// Env plugin entry points the watchdog names.
const CALLS: [&str; 5] = ["", "load", "init", "getEnv", "finalize"];
/// Longest an env plugin call may take.
const LIMIT: Duration = Duration::from_secs(20);

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static STARTED_MS: AtomicU64 = AtomicU64::new(0);
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A running plugin call; the watchdog stops watching when it drops.
#[derive(Debug)]
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        CURRENT.store(0, Ordering::Release);
    }
}

/// Marks the plugin call `name` (`init`, `getEnv`, …) as running (the calls of
/// the threads check are not tracked one by one: the check's deadline covers them).
pub fn enter(name: &str) -> Guard {
    let i = CALLS.iter().position(|c| *c == name).unwrap_or(0);
    STARTED_MS.store(now_ms(), Ordering::Release);
    CURRENT.store(i, Ordering::Release);
    Guard(())
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let i = CURRENT.load(Ordering::Acquire);
    let name = if i == 0 { "no env plugin call" } else { CALLS[i] };
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
    let _ = std::thread::Builder::new().name("env-watchdog".into()).spawn(|| {
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
                        "{name} returns within {} s (NCCL calls it on every parameter lookup)",
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

/// Sets [`SET_VARS`] and clears [`unset_names`]. Call before any other thread runs.
fn prepare_environment() {
    for (k, v) in SET_VARS {
        // SAFETY: called first thing in the worker, before the watchdog or any
        // plugin code runs: no other thread reads the environment.
        unsafe { std::env::set_var(k, v) };
    }
    for k in unset_names() {
        // SAFETY: as above.
        unsafe { std::env::remove_var(k) };
    }
}

/// Runs env check `id` on version `version` of `plugin` (never panics).
pub fn run_check(id: &str, plugin: &str, version: u32) -> CheckOutcome {
    let check = match SECTION.find(id) {
        Ok(c) => c,
        Err(out) => return *out,
    };
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let plugin = {
            let _g = enter("load");
            match EnvPlugin::open_version(plugin, version) {
                Ok(p) => p,
                Err(e) => return CheckOutcome::fail("the plugin loads through the host", e.to_string()),
            }
        };
        let mut cx = EnvCx {
            plugin,
            version,
            notes: Vec::new(),
        };
        let mut out = judge_body(check.body, &mut cx, CheckOutcome::pass);
        out.notes.append(&mut cx.notes);
        out
    }));
    r.unwrap_or_else(|_| CheckOutcome::fail("the check runs to completion", "the conformance suite itself panicked"))
}

/// Body of `--env --worker ID`.
pub fn worker_main(id: &str, plugin: &str, version: u32) -> i32 {
    die_with_parent();
    prepare_environment();
    start_watch();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
