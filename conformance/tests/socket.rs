//! The in-tree socket plugin (plugins/net-socket) against the quick tier, every
//! API version. With `FERROCCL_JUNIT_DIR` set, the JUnit report is written there
//! for CI to keep.

mod common;

use common::{config, plugin_so};
use ferroccl_conformance::{Level, Status, report, run};

#[test]
fn socket_plugin_passes_quick_tier_for_every_version() {
    let so = plugin_so("nccl_net_socket");
    let rep = run(&config(&so, None));
    if let Some(dir) = std::env::var_os("FERROCCL_JUNIT_DIR") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("create FERROCCL_JUNIT_DIR");
        std::fs::write(dir.join("conformance-net-socket.xml"), report::junit(&rep)).expect("write JUnit");
    }
    eprintln!("{}", report::text(&rep));
    assert_eq!(
        rep.exported,
        (6..=12).collect::<Vec<_>>(),
        "the socket plugin exports v6..v12"
    );
    let fails: Vec<String> = rep
        .results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail && r.level == Level::Required)
        .map(|r| format!("v{} {}: {}", r.version, r.id, r.outcome.message))
        .collect();
    assert!(
        fails.is_empty(),
        "required checks failed on the socket plugin:\n{}",
        fails.join("\n")
    );
}
