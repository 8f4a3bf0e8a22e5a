//! The suite must be able to fail: every deliberately broken zoo plugin
//! (testing/zoo-*, built from conformance/zoo/zoo_net.c) is caught by the check
//! meant for it with a clear message, the correct control passes, and the suite
//! neither hangs nor crashes on any of them.

mod common;

use std::time::{Duration, Instant};

use common::{config, plugin_so};
use ferroccl_conformance::{Level, Status, run};

/// Runs `check` on zoo plugin `zoo` (v8) and returns its result's (status, observed, reproduce).
fn run_one(zoo: &str, check: &str) -> (Status, String, String) {
    let so = plugin_so(&format!("nccl_net_zoo_{zoo}"));
    let start = Instant::now();
    let rep = run(&config(&so, Some(check)));
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "the suite took {:?} on zoo-{zoo}",
        start.elapsed()
    );
    assert_eq!(rep.exported, vec![8], "zoo plugins export ncclNetPlugin_v8 only");
    let r = rep
        .get(check, 8)
        .unwrap_or_else(|| panic!("{check} did not run on zoo-{zoo}: {rep:#?}"));
    (
        r.outcome.status,
        r.outcome.observed.clone().unwrap_or_default(),
        r.reproduce.clone(),
    )
}

#[test]
fn good_control_passes_the_quick_tier() {
    let so = plugin_so("nccl_net_zoo_good");
    let rep = run(&config(&so, None));
    let fails: Vec<_> = rep
        .results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail)
        .collect();
    assert!(fails.is_empty(), "zoo-good failed: {fails:#?}");
    assert_eq!(rep.exit_code(), 0);
    assert!(rep.counts().0 > 35, "most checks ran: {:?}", rep.counts());
}

#[test]
fn blocking_connect_is_caught_by_the_watchdog() {
    let (st, obs, repro) = run_one("block_connect", "conn.nonblocking");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("connect did not return within 5 s"), "{obs}");
    assert!(repro.contains("--api v8 --filter conn.nonblocking"), "{repro}");
}

#[test]
fn wrong_sizes_are_caught() {
    let (st, obs, _) = run_one("wrong_sizes", "transfer.recv_larger");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("4097-byte message into a 16384-byte buffer completed with size 16384"),
        "{obs}"
    );
}

#[test]
fn reordered_completions_are_caught() {
    let (st, obs, _) = run_one("reorder", "transfer.order");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("receive 0 holds the data of send"), "{obs}");
}

#[test]
fn corruption_past_1mib_is_caught_and_1mib_itself_passes() {
    let (st, obs, _) = run_one("corrupt", "transfer.size.64MiB");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("offset 1048579"), "{obs}");
    assert_eq!(run_one("corrupt", "transfer.size.1MiB").0, Status::Pass);
}

#[test]
fn null_name_is_caught() {
    let (st, obs, _) = run_one("null_name", "load.name");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("name is NULL"), "{obs}");
}

#[test]
fn leaked_fds_are_caught() {
    let (st, obs, _) = run_one("leak_fd", "teardown.no_leaks");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("file descriptors more after 20 connect/close cycles"),
        "{obs}"
    );
}

#[test]
fn hang_on_peer_death_is_caught() {
    let (st, obs, _) = run_one("hang_peer_death", "fault.peer_killed_send");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("kept returning 'not done' for 15 s after the peer process was killed"),
        "{obs}"
    );
}

#[test]
fn cli_exit_status_and_report() {
    let exe = env!("CARGO_BIN_EXE_ferroccl-conformance");
    let bad = plugin_so("nccl_net_zoo_wrong_sizes");
    let out = std::process::Command::new(exe)
        .arg(&bad)
        .args(["--filter", "transfer.recv_larger,props.*", "--api", "all"])
        .output()
        .expect("run the CLI");
    assert_eq!(out.status.code(), Some(1), "required failure => exit 1");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAIL [required] v8 transfer.recv_larger (§1.5)"),
        "{text}"
    );
    assert!(text.contains("reproduce: ferroccl-conformance"), "{text}");
    assert!(!text.contains("props.name") || text.contains("props.name"));
    let good = plugin_so("nccl_net_zoo_good");
    let out = std::process::Command::new(exe)
        .arg(&good)
        .args(["--filter", "props", "--format", "junit"])
        .output()
        .expect("run the CLI");
    assert_eq!(out.status.code(), Some(0));
    let xml = String::from_utf8_lossy(&out.stdout);
    assert!(xml.contains("<testsuite name=\"ncclNet_v8\""), "{xml}");
    let out = std::process::Command::new(exe)
        .arg("--list")
        .output()
        .expect("run the CLI");
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(
        list.contains("transfer.size.4096") && list.contains("required"),
        "{list}"
    );
}

#[test]
fn advisory_failures_do_not_fail_the_run() {
    let so = plugin_so("nccl_net_zoo_block_connect");
    let rep = run(&config(&so, Some("conn.fast_calls")));
    let r = rep.get("conn.fast_calls", 8).expect("ran");
    assert_eq!((r.outcome.status, r.level), (Status::Fail, Level::Advisory));
    assert_eq!(rep.exit_code(), 0);
}

// ---- correct but quirky plugins: the required tier passes (no false failures) ----

/// `libnccl-net-zoo-<name>.so`, built by testing/zoo-quirky next to the test binaries.
fn quirky_so(name: &str) -> std::path::PathBuf {
    plugin_so(&format!("nccl-net-zoo-{name}"))
}

/// Runs the quick tier on quirky plugin `name` (every version it exports) and
/// returns the report after asserting that no required check failed and that
/// the suite ran most checks.
fn quirky_passes(name: &str, exported: &[u32]) -> ferroccl_conformance::Report {
    let rep = run(&config(&quirky_so(name), None));
    assert_eq!(rep.exported, exported, "zoo-{name} exports");
    let defects: Vec<String> = rep
        .results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail && r.level == Level::Required)
        .map(|r| format!("v{} {}: {}", r.version, r.id, r.outcome.message))
        .collect();
    assert!(
        defects.is_empty(),
        "false failures on the correct (quirky) zoo-{name}:\n{}",
        defects.join("\n")
    );
    let sum = rep.summary();
    assert_eq!(rep.exit_code(), 0);
    assert_eq!(sum.not_run, 0, "{sum:?}");
    assert!(sum.passed > 40, "most checks ran on zoo-{name}: {sum:?}");
    rep
}

/// The advisory check that exercises what NCCL never does, and the quirk refuses.
fn advisory_fails(rep: &ferroccl_conformance::Report, id: &str, version: u32, needle: &str) {
    let r = rep.get(id, version).unwrap_or_else(|| panic!("{id} did not run"));
    assert_eq!((r.outcome.status, r.level), (Status::Fail, Level::Advisory), "{r:#?}");
    let obs = r.outcome.observed.clone().unwrap_or_default();
    assert!(obs.contains(needle), "{id}: {obs}");
}

#[test]
fn quirky_handle_state_passes() {
    let rep = quirky_passes("handle-state", &[8]);
    advisory_fails(&rep, "conn.reuse_handle", 8, "connect returned ncclInvalidUsage");
}

#[test]
fn quirky_deref_mhandle_passes() {
    let rep = quirky_passes("deref-mhandle", &[8]);
    advisory_fails(&rep, "memory.null_mhandle", 8, "SIGSEGV");
}

#[test]
fn quirky_oldest_test_passes() {
    let rep = quirky_passes("oldest-test", &[8]);
    advisory_fails(&rep, "transfer.test_out_of_order", 8, "test returned ncclInternalError");
}

#[test]
fn quirky_slow_connect_passes() {
    let rep = quirky_passes("slow-connect", &[8]);
    let r = rep.get("conn.nonblocking", 8).expect("ran");
    assert_eq!(r.outcome.status, Status::Pass);
}

#[test]
fn quirky_threads_passes() {
    quirky_passes("threads", &[8]);
}

#[test]
fn quirky_v12_ctx_teardown_passes() {
    let rep = quirky_passes("ctx-teardown", &[12]);
    assert_eq!(
        rep.get("load.ctx_last_finalize", 12).map(|r| r.outcome.status),
        Some(Status::Pass)
    );
}

// ---- broken ones of the second generation ----

#[test]
fn unreported_sizes_are_caught_by_the_size_check_only() {
    let so = quirky_so("no-sizes");
    let rep = run(&config(
        &so,
        Some("transfer.recv_larger,transfer.size.4096,transfer.order"),
    ));
    let r = rep.get("transfer.recv_larger", 8).expect("ran");
    assert_eq!(r.outcome.status, Status::Fail);
    let obs = r.outcome.observed.clone().unwrap_or_default();
    assert!(
        obs.contains("completed with size 0") && obs.contains("did not write"),
        "{obs}"
    );
    // Data checks do not depend on sizes (NCCL does not read them for host memory).
    for id in ["transfer.size.4096", "transfer.order"] {
        assert_eq!(rep.get(id, 8).map(|r| r.outcome.status), Some(Status::Pass), "{id}");
    }
}

#[test]
fn zero_devices_is_one_verdict_and_the_rest_is_not_run() {
    let so = quirky_so("no-devices");
    let rep = run(&config(&so, Some("transfer.size.*,props")));
    let load = rep
        .get("load.init", 8)
        .expect("the load gate is reported when it fails");
    assert_eq!(load.outcome.status, Status::Fail);
    assert!(load.outcome.message.contains("0 devices"), "{}", load.outcome.message);
    let sum = rep.summary();
    assert_eq!(sum.defects, 1, "{sum:?}");
    assert_eq!(sum.not_run, rep.results.len() - 1, "{sum:?}");
    assert!(
        rep.results
            .iter()
            .filter(|r| r.id != "load.init")
            .all(|r| r.outcome.status == Status::NotRun && r.outcome.message.contains("load.init failed")),
        "{rep:#?}"
    );
    assert_eq!(rep.exit_code(), 1);
    let text = ferroccl_conformance::report::text(&rep);
    assert!(
        text.contains("1 plugin defect(s)") && text.contains("not run"),
        "{text}"
    );
}

#[test]
fn refusing_a_traffic_class_is_caught_by_the_traffic_class_check_only() {
    let rep = run(&config(&quirky_so("traffic-class"), None));
    assert_eq!(rep.exported, vec![12]);
    let fails: Vec<String> = rep
        .results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail && r.level == Level::Required)
        .map(|r| format!("v{} {}: {}", r.version, r.id, r.outcome.message))
        .collect();
    assert_eq!(fails.len(), 1, "exactly one required failure: {fails:#?}");
    let r = rep.get("conn.traffic_class", 12).expect("conn.traffic_class ran");
    assert_eq!(r.outcome.status, Status::Fail, "{r:#?}");
    let obs = r.outcome.observed.clone().unwrap_or_default();
    assert!(
        obs.contains("trafficClass 0x68") && obs.contains("ncclInvalidArgument"),
        "{obs}"
    );
    assert_eq!(rep.exit_code(), 1);
}
