//! The worker side of the tuner section: one check on one API version in this
//! process (`--tuner --worker ID`); the symbol probe (`--tuner --probe`) is
//! [`crate::section::Section::probe_main`].
//!
//! Every tuner call is announced with [`enter`]; a watchdog thread fails the
//! check when a call does not return within 20 s, and a fatal signal prints the
//! call that was running (the parent turns that into the failure message).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use ferroccl::plugin::tuner::TunerAdapter;

use super::SECTION;
use super::checks::TunerCx;
use crate::outcome::CheckOutcome;
use crate::section::{CallGuard, CallWatch, die_with_parent, enter_call, judge_body};
use crate::watch::emit_result;

/// This worker's plugin calls, named by the watch (crash line, 20 s limit).
static WATCH: CallWatch = CallWatch {
    calls: &["", "load", "init", "getCollInfo", "getChunkSize", "finalize"],
    limit: Duration::from_secs(20),
    kind: "tuner",
    why: "a tuner call that never returns hangs NCCL",
};

/// A running tuner call; the watch stops watching it when it drops.
pub type Guard = CallGuard;

/// Marks the tuner call `name` as running.
pub fn enter(name: &str) -> Guard {
    enter_call(name)
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
    WATCH.start();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
