//! The GIN section's verdicts are true: the fake C GIN plugin (`testing/gin-c`,
//! `libnccl-gin-fake.so`, v13 and v14) passes every host-side check on both
//! versions; its broken variant, whose device is not of a GIN type, is caught by
//! `gin.properties` and by nothing else; a net plugin without a GIN table is
//! skipped with the reason.

use std::time::Duration;

use ferroccl_conformance::Status;
use ferroccl_conformance::gin::SECTION;
use ferroccl_conformance::runner::Report;

mod common;
use common::observed;

fn suite(file: &str) -> Report {
    common::run_section(&SECTION, file, None, Duration::from_secs(120))
}

#[test]
fn fake_gin_plugin_passes_every_check_on_both_versions() {
    let rep = suite("libnccl-gin-fake.so");
    assert_eq!(rep.exported, vec![13, 14]);
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
    assert_eq!(rep.counts(), (4 * 2, 0, 0), "{rep:#?}");
}

#[test]
fn a_device_of_no_gin_type_is_caught_by_gin_properties_only() {
    let rep = suite("libnccl-gin-fake-hosttype.so");
    let failed: Vec<(&str, u32)> = rep
        .results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail)
        .map(|r| (r.id.as_str(), r.version))
        .collect();
    assert_eq!(failed, vec![("gin.properties", 13), ("gin.properties", 14)], "{rep:#?}");
    let (_, obs) = observed(&rep, "gin.properties");
    assert!(obs.contains("netDeviceType 0"), "{obs}");
    assert_eq!(rep.exit_code(), 1);
}

#[test]
fn a_net_plugin_without_gin_is_skipped_with_the_reason() {
    let rep = suite("libnccl_net_socket.so");
    assert!(rep.exported.is_empty());
    let (st, _) = observed(&rep, "gin.symbols");
    assert_eq!(st, Status::Skip, "{rep:#?}");
    assert_eq!(rep.exit_code(), 0);
}
