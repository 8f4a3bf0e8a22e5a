//! The worker side: one process runs one check on one API version (hidden
//! `--worker ID` mode of the CLI), or probes the library (`--probe`).

use std::panic::AssertUnwindSafe;

use ferroccl::plugin::logger::LogCapture;
use ferroccl::plugin::net::CommConfig;

use crate::cx::{Cx, SLOW_CALL};
use crate::outcome::{CheckOutcome, Stop};
use crate::registry::{Body, all_checks};
use crate::watch::{self, Call};

/// Where and what a worker tests.
#[derive(Debug, Clone)]
pub struct Target {
    /// Plugin name or path as the user gave it.
    pub plugin: String,
    /// API version.
    pub version: u32,
    /// `--device N`, or `None` for all devices (per-device checks) / device 0.
    pub device: Option<usize>,
    /// `--full` tier.
    pub full: bool,
}

/// Loads the plugin for `t` and builds the check context (an error is a message).
pub fn setup(t: &Target) -> Result<Cx, String> {
    let cap = LogCapture::start();
    let net = {
        let _g = watch::enter(Call::Init);
        crate::loader::load(&t.plugin, t.version)
            .map_err(|e| format!("loading the plugin for v{} failed: {e}", t.version))?
    };
    let ctx = {
        let _g = watch::enter(Call::Init);
        net.init_ctx(0, &CommConfig::default())
            .map_err(|e| format!("init failed: {e}"))?
    };
    let ndev = {
        let _g = watch::enter(Call::Devices);
        net.devices().map_err(|e| format!("devices failed: {e}"))?
    };
    if ndev == 0 {
        return Err("devices() reports 0 devices".into());
    }
    let dev = t.device.unwrap_or(0);
    if dev >= ndev {
        return Err(format!("--device {dev}: the plugin has only {ndev} device(s)"));
    }
    let props = {
        let _g = watch::enter(Call::GetProperties);
        net.properties(dev)
            .map_err(|e| format!("getProperties({dev}) failed: {e}"))?
    };
    let mut cx = Cx::new(
        net,
        ctx,
        dev,
        ndev,
        match t.device {
            Some(d) => vec![d],
            None => (0..ndev).collect(),
        },
        t.version,
        props,
        t.plugin.clone(),
        t.full,
    );
    cx.init_log_lines = cap.lines().len();
    Ok(cx)
}

/// Runs check `id` for `t` and returns its outcome (never panics).
pub fn run_check(id: &str, t: &Target) -> CheckOutcome {
    let Some(check) = all_checks().into_iter().find(|c| c.id == id) else {
        return CheckOutcome::fail("a known check id", format!("no check named {id:?} (see --list)"));
    };
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| match check.body {
        Body::Probe(f) => match crate::loader::probe(&t.plugin) {
            Ok(p) => to_outcome(f(&p, t.version)),
            Err(e) => CheckOutcome::fail("the plugin library opens", e),
        },
        Body::Loaded(f, arg) => match setup(t) {
            Err(e) => CheckOutcome::fail("the plugin loads, inits and reports its devices through the host", e),
            Ok(mut cx) => {
                let r = f(&mut cx, arg);
                let mut out = to_outcome(r);
                for (name, d) in &cx.slowest {
                    if *d >= SLOW_CALL {
                        out.notes
                            .push(format!("slowest {name} call took {d:.1?} (advisory limit 100 ms)"));
                    }
                }
                out.notes.append(&mut cx.notes);
                out.metrics = cx.metrics.take();
                out
            }
        },
    }));
    r.unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        CheckOutcome::fail(
            "the check runs to completion",
            format!("the conformance suite itself panicked: {msg}"),
        )
    })
}

fn to_outcome(r: Result<(), Stop>) -> CheckOutcome {
    match r {
        Ok(()) => CheckOutcome::pass(),
        Err(Stop::Fail { expected, observed }) => CheckOutcome::fail(expected, observed),
        Err(Stop::Skip(reason)) => CheckOutcome::skip(reason),
    }
}

/// Body of `--worker ID`: runs the check under the watchdog and prints the result line.
pub fn worker_main(id: &str, t: &Target) -> i32 {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only changes this process's own settings.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    watch::start(id);
    let out = run_check(id, t);
    watch::emit_result(&out);
    0
}

/// Body of `--probe`: prints the [`crate::loader::Probe`] as the result line's metrics.
pub fn probe_main(plugin: &str) -> i32 {
    // SAFETY: as in `worker_main`.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let out = match crate::loader::probe(plugin) {
        Ok(p) => CheckOutcome {
            metrics: serde_json::to_value(&p).ok(),
            ..CheckOutcome::pass()
        },
        Err(e) => CheckOutcome::fail("the plugin library opens", e),
    };
    watch::emit_result(&out);
    0
}
