//! The in-tree IB verbs plugin (plugins/net-ib) against the quick tier, every
//! API version it exports, where the machine has RDMA devices
//! (`/sys/class/infiniband`: a real HCA, or soft-RoCE as in `scripts/ib-vm-test.sh`).
//! Elsewhere the test says why it skipped and passes: without verbs the plugin
//! rightly refuses to load (0 devices), which is not a conformance finding.
//! With `FERROCCL_JUNIT_DIR` set, the JUnit report is written there.

mod common;

use common::{config, plugin_so};
use ferroccl_conformance::{Level, Status, report, run};

/// RDMA devices the kernel exposes, if any.
fn rdma_devices() -> Vec<String> {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn ib_plugin_passes_quick_tier_where_verbs_exist() {
    let devs = rdma_devices();
    if devs.is_empty() {
        eprintln!("SKIPPED: no RDMA device in /sys/class/infiniband (no HCA, rdma_rxe not loaded)");
        return;
    }
    let so = plugin_so("nccl_net_ib");
    let rep = run(&config(&so, None));
    if let Some(dir) = std::env::var_os("FERROCCL_JUNIT_DIR") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("create FERROCCL_JUNIT_DIR");
        std::fs::write(dir.join("conformance-net-ib.xml"), report::junit(&rep)).expect("write JUnit");
    }
    eprintln!("RDMA devices {devs:?}\n{}", report::text(&rep));
    assert!(!rep.exported.is_empty(), "the IB plugin exports ncclNetPlugin_vN");
    let fails: Vec<String> = rep
        .results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail && r.level == Level::Required)
        .map(|r| format!("v{} {}: {}", r.version, r.id, r.outcome.message))
        .collect();
    assert!(
        fails.is_empty(),
        "required checks failed on the IB plugin:\n{}",
        fails.join("\n")
    );
}
