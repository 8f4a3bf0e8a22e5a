//! The worker side of the GIN section: one check on one API version in this
//! process (`--gin --worker ID`); the symbol probe (`--gin --probe`) is
//! [`crate::section::Section::probe_main`].
//!
//! Every GIN call is announced with [`enter`]; a watchdog thread fails the check
//! when a call does not return within 20 s, and a fatal signal prints the call that
//! was running (the parent turns that into the failure message).

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use ferroccl_plugin_api::abi::GinHostSlots;

use super::SECTION;
use super::checks::GinCx;
use crate::outcome::CheckOutcome;
use crate::section::{CallGuard, CallWatch, die_with_parent, enter_call, judge_body};
use crate::watch::emit_result;

/// This worker's plugin calls, named by the watch (crash line, 20 s limit).
static WATCH: CallWatch = CallWatch {
    calls: &["", "init", "devices", "getProperties", "getGinProperties", "finalize"],
    limit: Duration::from_secs(20),
    kind: "gin",
    why: "NCCL calls it at communicator init",
};

/// A running GIN call; the watch stops watching it when it drops.
pub type Guard = CallGuard;

/// Marks the GIN call `name` as running.
pub fn enter(name: &str) -> Guard {
    enter_call(name)
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
    WATCH.start();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}
