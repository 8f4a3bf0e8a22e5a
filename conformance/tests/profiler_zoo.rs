//! The profiler section can fail, and passes what is right: a correct C
//! profiler of every version (strict about handles and parents), the C
//! recording profiler of every version and the in-tree trace plugin are
//! conformant; the zoo profilers that crash in `startEvent`, block in
//! `stopEvent`, fail `init`, export an unknown version, crash on
//! `stopEvent(NULL)` or fail `finalize` while events are open are each caught
//! by the check meant for them, with a message naming the call and the event
//! type, and every other check still passes — without the suite hanging or
//! crashing.

use std::process::Command;
use std::time::Duration;

use ferroccl_conformance::Status;
use ferroccl_conformance::profiler::SECTION;
use ferroccl_conformance::runner::Report;

mod common;
use common::{observed, profile_dir};

fn suite(file: &str, filter: Option<&str>) -> Report {
    // Generous: a blocked call costs the 10 s watchdog; the rest are milliseconds.
    common::run_section(&SECTION, file, filter, Duration::from_secs(240))
}

/// Every check other than `id` passed (the fault is caught by its own check only).
fn only_fails(rep: &Report, id: &str) {
    for r in &rep.results {
        if r.id != id {
            assert_eq!(r.outcome.status, Status::Pass, "{} should pass: {:#?}", r.id, r.outcome);
        }
    }
}

const ALL_CHECKS: usize = 10;

#[test]
fn correct_profilers_of_every_version_are_conformant() {
    for v in 1..=6u32 {
        for file in [
            format!("libnccl-profiler-zgood-v{v}.so"),
            format!("libnccl-profiler-recv{v}.so"),
        ] {
            let rep = suite(&file, None);
            assert_eq!(rep.exported, vec![v], "{file}");
            assert_eq!(rep.exit_code(), 0, "{file}: {rep:#?}");
            // Every check that applies to the version ran and passed (the
            // net-plugin check starts at v3); none skipped: these set every bit.
            let want = if v >= 3 { ALL_CHECKS } else { ALL_CHECKS - 1 };
            assert_eq!(rep.counts(), (want, 0, 0), "{file}: {rep:#?}");
        }
    }
}

/// The trace plugin through the CLI, every event type on, its trace written
/// into a directory of this test: the report passes and the plugin really got
/// the events (its trace files hold them).
#[test]
fn trace_plugin_is_conformant() {
    let so = ["libnccl-profiler-trace.so", "libnccl_profiler_trace.so"]
        .iter()
        .map(|f| profile_dir().join(f))
        .find(|p| p.is_file())
        .expect("the trace plugin is built (dev-dependency ferroccl-profiler-trace)");
    let dir = std::env::temp_dir().join(format!("ferroccl-profconf-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let report = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ferroccl-conformance"))
        .arg("--profiler")
        .arg(&so)
        .args(["--format", "json", "--output"])
        .arg(&report)
        .env("NCCL_PROFILER_TRACE_FILE", dir.join("trace-%p.json"))
        .env("NCCL_PROFILE_EVENT_MASK", "32767")
        .output()
        .expect("run the suite");
    let rep: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report written")).expect("JSON report");
    assert!(
        out.status.success(),
        "{}\n{rep:#}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The SDK exports v1 … v6 from one impl: every check on every version.
    assert_eq!(rep["exported"], serde_json::json!([1, 2, 3, 4, 5, 6]), "{rep:#}");
    let results = rep["results"].as_array().expect("results");
    assert_eq!(results.len(), 6 * ALL_CHECKS - 2, "{rep:#}");
    for r in results {
        assert_eq!(r["status"], "pass", "{r:#}");
    }
    // The workers' traces: valid JSON, holding proxy steps and net-plugin events.
    let mut names = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&dir).expect("trace dir").flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if !n.starts_with("trace-") {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e.path()).expect("trace")).expect("trace is JSON");
        let evs = v
            .get("traceEvents")
            .and_then(|t| t.as_array())
            .cloned()
            .or_else(|| v.as_array().cloned())
            .unwrap_or_default();
        for ev in evs {
            if let Some(c) = ev.get("cat").and_then(|c| c.as_str()) {
                names.insert(c.to_owned());
            }
        }
    }
    assert!(!names.is_empty(), "no trace file with events in {}", dir.display());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn crash_in_start_event_is_caught_and_named() {
    let rep = suite("libnccl-profiler-zcrash.so", None);
    let (st, obs) = observed(&rep, "profiler.events.proxy_ctrl");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("crashed with SIGSEGV") && obs.contains("during startEvent of a ProxyCtrl event"),
        "{obs}"
    );
    only_fails(&rep, "profiler.events.proxy_ctrl");
}

#[test]
fn blocking_stop_event_is_caught_and_named() {
    let rep = suite(
        "libnccl-profiler-zblock.so",
        Some("profiler.events.net_plugin,profiler.events.coll,profiler.null_handles"),
    );
    let (st, obs) = observed(&rep, "profiler.events.net_plugin");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("stopEvent of a NetPlugin event did not return within 10 s"),
        "{obs}"
    );
    only_fails(&rep, "profiler.events.net_plugin");
    assert_eq!(rep.results.len(), 3);
}

#[test]
fn failing_init_is_caught() {
    let rep = suite("libnccl-profiler-zinitfail.so", Some("profiler.load,profiler.init"));
    let (st, obs) = observed(&rep, "profiler.init");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("init returned ncclSystemError"), "{obs}");
    only_fails(&rep, "profiler.init");
}

#[test]
fn unknown_version_is_caught() {
    let rep = suite("libnccl-profiler-zbogus.so", None);
    assert!(rep.exported.is_empty(), "{rep:#?}");
    let (st, obs) = observed(&rep, "profiler.symbols");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("ncclProfiler_v7"), "{obs}");
    assert_eq!(rep.results.len(), 1, "{rep:#?}");
    assert_ne!(rep.exit_code(), 0);
}

#[test]
fn crash_on_null_stop_is_caught_and_named() {
    let rep = suite("libnccl-profiler-znull.so", None);
    let (st, obs) = observed(&rep, "profiler.null_handles");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("crashed with SIGSEGV") && obs.contains("during stopEvent"),
        "{obs}"
    );
    only_fails(&rep, "profiler.null_handles");
}

#[test]
fn error_from_finalize_with_open_events_is_caught() {
    let rep = suite("libnccl-profiler-zleak.so", None);
    let (st, obs) = observed(&rep, "profiler.unfinished");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("finalize returned ncclInternalError (3)"), "{obs}");
    only_fails(&rep, "profiler.unfinished");
}
