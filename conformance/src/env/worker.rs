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
use std::time::Duration;

use ferroccl::plugin::env::EnvPlugin;

use super::SECTION;
use super::checks::EnvCx;
use crate::outcome::CheckOutcome;
use crate::section::{CallGuard, CallWatch, die_with_parent, enter_call, judge_body};
use crate::watch::emit_result;

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

/// This worker's plugin calls, named by the watch (crash line, 20 s limit).
static WATCH: CallWatch = CallWatch {
    calls: &["", "load", "init", "getEnv", "finalize"],
    limit: Duration::from_secs(20),
    kind: "env",
    why: "NCCL calls it on every parameter lookup",
};

/// A running env plugin call; the watch stops watching it when it drops.
pub type Guard = CallGuard;

/// Marks the env plugin call `name` as running.
pub fn enter(name: &str) -> Guard {
    enter_call(name)
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
    WATCH.start();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
