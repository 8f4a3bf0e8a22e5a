//! The RMA section's verdicts are true: the socket plugin's RMA tables (v13, v14) pass
//! every check with `NCCL_SOCKET_RMA_ENABLE=1` on loopback; each broken zoo plugin
//! (`testing/zoo-rma`: C wrappers of the socket table with one fault) fails exactly the
//! check written for it; a table with no device is skipped with the reason; a library
//! without an RMA table is a skip.

use std::sync::Once;
use std::time::Duration;

use ferroccl_conformance::Status;
use ferroccl_conformance::rma::SECTION;
use ferroccl_conformance::runner::Report;

mod common;
use common::observed;

fn suite(file: &str) -> Report {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        // SAFETY: set once, before any worker is spawned (the workers inherit them).
        unsafe { std::env::set_var("NCCL_SOCKET_IFNAME", "lo") };
        // SAFETY: as above. The socket plugin (and the zoo, which wraps it) offers RMA
        // devices only when asked.
        unsafe { std::env::set_var("NCCL_SOCKET_RMA_ENABLE", "1") };
    });
    common::run_section(&SECTION, file, None, Duration::from_secs(300))
}

fn failed(rep: &Report) -> Vec<(&str, u32)> {
    rep.results
        .iter()
        .filter(|r| r.outcome.status == Status::Fail)
        .map(|r| (r.id.as_str(), r.version))
        .collect()
}

#[test]
fn socket_plugin_passes_every_rma_check_on_both_versions() {
    let rep = suite("libnccl_net_socket.so");
    assert_eq!(rep.exported, vec![13, 14]);
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
    assert_eq!(rep.counts(), (8 * 2, 0, 0), "{rep:#?}");
    let peer = rep
        .results
        .iter()
        .find(|r| r.id == "rma.fault.peer_killed" && r.version == 14)
        .expect("peer_killed ran");
    assert!(
        peer.outcome
            .notes
            .iter()
            .any(|n| n.contains("failed") && n.contains("after the kill")),
        "{:?}",
        peer.outcome.notes
    );
}

#[test]
fn the_zoo_wrapper_without_a_fault_passes() {
    let rep = suite("libnccl-rma-zoo-good.so");
    assert_eq!(rep.exported, vec![14]);
    assert_eq!(rep.counts(), (8, 0, 0), "{rep:#?}");
}

#[test]
fn a_signal_before_its_data_is_caught_by_rma_signal_order_only() {
    let rep = suite("libnccl-rma-zoo-signal-early.so");
    assert_eq!(failed(&rep), vec![("rma.signal.order", 14)], "{rep:#?}");
    let (_, obs) = observed(&rep, "rma.signal.order");
    assert!(obs.contains("was not there yet"), "{obs}");
    assert_eq!(rep.exit_code(), 1);
}

#[test]
fn a_byte_dropped_by_odd_gets_is_caught_by_rma_get_sizes_only() {
    let rep = suite("libnccl-rma-zoo-odd-get.so");
    assert_eq!(failed(&rep), vec![("rma.get.sizes", 14)], "{rep:#?}");
    let (_, obs) = observed(&rep, "rma.get.sizes");
    assert!(obs.contains("get of") && obs.contains("offset 1"), "{obs}");
}

#[test]
fn a_test_that_never_completes_is_caught_by_rma_in_flight_only() {
    let rep = suite("libnccl-rma-zoo-stuck-test.so");
    assert_eq!(failed(&rep), vec![("rma.in_flight", 14)], "{rep:#?}");
    let (_, obs) = observed(&rep, "rma.in_flight");
    assert!(obs.contains("test kept returning done = 0"), "{obs}");
}

#[test]
fn a_table_without_devices_skips_with_the_reason() {
    let rep = suite("libnccl-rma-zoo-nodev.so");
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
    let (st, _) = observed(&rep, "rma.load");
    assert_eq!(st, Status::Pass);
    let r = rep
        .results
        .iter()
        .find(|r| r.id == "rma.put.sizes")
        .expect("rma.put.sizes ran");
    assert_eq!(r.outcome.status, Status::Skip, "{rep:#?}");
    assert!(r.outcome.message.contains("NCCL_SOCKET_RMA_ENABLE=1"), "{rep:#?}");
}

#[test]
fn a_library_without_an_rma_table_is_skipped() {
    let rep = suite("libnccl-gin-fake.so");
    assert!(rep.exported.is_empty());
    let (st, _) = observed(&rep, "rma.symbols");
    assert_eq!(st, Status::Skip, "{rep:#?}");
    assert_eq!(rep.exit_code(), 0);
}
