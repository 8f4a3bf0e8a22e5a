//! The env section can fail, and passes what is right: the C env plugins of both
//! versions and the SDK test plugin are conformant; each broken zoo plugin
//! (`testing/env-c`: init fails, NULL name, a reused buffer, "" for unset names,
//! answers only on init's thread, finalize fails) fails exactly the check written
//! for it, with a message naming what happened, and passes every other check.

use std::time::Duration;

use ferroccl_conformance::Status;
use ferroccl_conformance::env::SECTION;
use ferroccl_conformance::runner::Report;

mod common;
use common::observed;

fn suite(file: &str) -> Report {
    common::run_section(&SECTION, file, None, Duration::from_secs(300))
}

/// Every check of `rep` other than `except` passed (or, after a failed init, skipped).
fn others_pass(rep: &Report, except: &str, skipped_ok: bool) {
    for r in &rep.results {
        if r.id == except {
            continue;
        }
        let ok = r.outcome.status == Status::Pass || (skipped_ok && r.outcome.status == Status::Skip);
        assert!(ok, "{} should pass: {:#?}", r.id, r.outcome);
    }
}

#[test]
fn good_env_plugins_are_conformant() {
    for v in 1..=2 {
        let rep = suite(&format!("libnccl-env-cv{v}.so"));
        assert_eq!(rep.exported, vec![v]);
        assert_eq!(rep.exit_code(), 0, "cv{v}: {rep:#?}");
        others_pass(&rep, "", false);
        assert_eq!(rep.counts().0, 7, "cv{v}: {:?}", rep.counts());
    }
    let rep = suite("libnccl_env_sdktest.so");
    assert_eq!(rep.exported, vec![1, 2]);
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
    others_pass(&rep, "", false);
    assert_eq!(rep.counts().0, 14, "{:?}", rep.counts());
}

/// Runs the zoo plugin `file`; asserts `id` fails with `needle` in its message
/// and every other check passes (or skips, where init itself is what fails).
fn caught(file: &str, id: &str, needle: &str) {
    let rep = suite(file);
    assert_eq!(rep.exported, vec![2], "{file}");
    let (st, obs) = observed(&rep, id);
    assert_eq!(st, Status::Fail, "{file}: {id}: {rep:#?}");
    assert!(obs.contains(needle), "{file}: {id}: {obs}");
    assert_ne!(rep.exit_code(), 0);
    others_pass(&rep, id, id == "env.init");
}

#[test]
fn init_failure_is_caught() {
    caught(
        "libnccl-env-zinitfail.so",
        "env.init",
        "init returned ncclSystemError (2)",
    );
}

#[test]
fn null_name_is_caught() {
    caught("libnccl-env-znoname.so", "env.name", "the name is NULL");
}

#[test]
fn a_reused_buffer_is_caught() {
    caught(
        "libnccl-env-zdangling.so",
        "env.get_env.stable",
        "getEnv(\"FERROCCL_CONFORMANCE_ENV_A\") returned \"alpha-value\"; after",
    );
}

#[test]
fn empty_for_unset_is_caught() {
    caught("libnccl-env-zemptyunset.so", "env.get_env.unset", "returned \"\"");
}

#[test]
fn a_thread_affine_plugin_is_caught() {
    caught(
        "libnccl-env-zthreadaffine.so",
        "env.get_env.threads",
        "returned None; init's thread got Some(",
    );
}

#[test]
fn finalize_failure_is_caught() {
    caught(
        "libnccl-env-zfinalizefail.so",
        "env.finalize",
        "finalize returned ncclInternalError (3)",
    );
}
