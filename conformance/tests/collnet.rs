//! The CollNet section's verdicts are true: the in-tree CollNet plugin
//! (`libnccl_net_collnet_socket.so`) passes every check on every exported version;
//! a net plugin without a CollNet table is skipped with the reason; each broken C
//! CollNet plugin of the zoo (`testing/collnet-c`, `libnccl-net-cnz*.so`) is caught
//! by the check written for it while the checks its fault does not touch pass;
//! the correct C test plugin passes the SGE checks.

use std::time::Duration;

use ferroccl_conformance::Status;
use ferroccl_conformance::collnet::SECTION;
use ferroccl_conformance::runner::Report;

mod common;
use common::observed;

fn suite(file: &str, filter: Option<&str>) -> Report {
    common::run_section(&SECTION, file, filter, Duration::from_secs(600))
}

#[test]
fn in_tree_collnet_plugin_passes_every_check_on_every_version() {
    let rep = suite("libnccl_net_collnet_socket.so", None);
    assert_eq!(rep.exported, (6..=12).collect::<Vec<_>>());
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
    let (pass, fail, skip) = rep.counts();
    // 13 checks on v6..v12 and the two SGE checks on v8..v12.
    assert_eq!((pass, fail, skip), (13 * 7 + 2 * 5, 0, 0), "{rep:#?}");
    if let Ok(dir) = std::env::var("FERROCCL_JUNIT_DIR") {
        let xml = SECTION.retitle(&ferroccl_conformance::report::junit(&rep));
        std::fs::create_dir_all(&dir).expect("junit dir");
        std::fs::write(std::path::Path::new(&dir).join("conformance-collnet-socket.xml"), xml).expect("junit");
    }
}

#[test]
fn a_library_without_collnet_is_skipped_with_the_reason() {
    let rep = suite("libnccl_net_socket.so", None);
    assert!(rep.exported.is_empty());
    let r = rep
        .results
        .iter()
        .find(|r| r.id == "collnet.symbols")
        .expect("symbols result");
    assert_eq!(r.outcome.status, Status::Skip);
    assert!(
        r.outcome.message.contains("exports no ncclCollNetPlugin_vN"),
        "{}",
        r.outcome.message
    );
    assert_eq!(rep.exit_code(), 0);
}

#[test]
fn a_wrong_reduction_of_a_claimed_pair_is_caught_by_reduce_support() {
    let rep = suite(
        "libnccl-net-cnzbadreduce.so",
        Some("collnet.reduce_support,collnet.connect"),
    );
    let (st, obs) = observed(&rep, "collnet.reduce_support");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("max/int32"), "{obs}");
    // Float sum, which the fault does not touch, still connects and reduces.
    assert_eq!(observed(&rep, "collnet.connect").0, Status::Pass);
}

#[test]
fn a_request_that_never_completes_is_caught_without_hanging() {
    let rep = suite("libnccl-net-cnzhang.so", Some("collnet.iallreduce"));
    let (st, obs) = observed(&rep, "collnet.iallreduce.1MiB");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("did not complete within 30 s"), "{obs}");
    for id in [
        "collnet.iallreduce.empty",
        "collnet.iallreduce.one",
        "collnet.iallreduce.misaligned",
    ] {
        assert_eq!(observed(&rep, id).0, Status::Pass, "{id}");
    }
}

#[test]
fn bad_sge_handling_is_caught_by_the_sge_check() {
    let rep = suite(
        "libnccl-net-cnzbadsge.so",
        Some("collnet.ireducescatter.sge,collnet.iallreduce.one"),
    );
    let (st, obs) = observed(&rep, "collnet.ireducescatter.sge");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("from 3 parts"), "{obs}");
    assert_eq!(observed(&rep, "collnet.iallreduce.one").0, Status::Pass);
}

/// A plugin whose `iallgather` fills only the first receive part (the rest of
/// the window is lost) fails the iallgather SGE check, and only that one.
#[test]
fn a_bad_iallgather_sge_scatter_is_caught_by_its_sge_check() {
    let rep = suite(
        "libnccl-net-cnzbadsgeag.so",
        Some("collnet.iallgather.sge,collnet.ireducescatter.sge"),
    );
    let (st, obs) = observed(&rep, "collnet.iallgather.sge");
    assert_eq!(st, Status::Fail, "{obs}");
    assert!(obs.contains("into 3 parts"), "{obs}");
    assert_eq!(observed(&rep, "collnet.ireducescatter.sge").0, Status::Pass);
}

#[test]
fn wrong_sizes_from_test_are_an_advisory_finding() {
    let rep = suite(
        "libnccl-net-cnzwrongsize.so",
        Some("collnet.test_size,collnet.iallreduce.one"),
    );
    let (st, obs) = observed(&rep, "collnet.test_size");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("reported 8 bytes, not 4"), "{obs}");
    assert_eq!(observed(&rep, "collnet.iallreduce.one").0, Status::Pass);
    // NCCL does not read the size: advisory, the run stays conformant.
    assert_eq!(rep.exit_code(), 0);
}

/// The SGE checks and a correct plugin agree on NCCL's windows: the C test
/// plugin (`libnccl-net-cn12.so`, written from NCCL 2.30.7's
/// `collNetRegIallgather`/`collNetRegIreducescatter`: a rank's send data starts at
/// `max(windowOffset, rank × bytesPerRank)`) passes both, whole and partial windows.
#[test]
fn a_correct_c_plugin_passes_the_sge_checks() {
    let rep = suite(
        "libnccl-net-cn12.so",
        Some("collnet.iallgather.sge,collnet.ireducescatter.sge"),
    );
    for id in ["collnet.iallgather.sge", "collnet.ireducescatter.sge"] {
        let (st, obs) = observed(&rep, id);
        assert_eq!(st, Status::Pass, "{id}: {obs}");
    }
}

/// A plugin that never notices a dead peer (`libnccl-net-cnzdeaf.so`: the in-tree
/// plugin behind a shim whose `test` answers done = 0 forever once the real plugin
/// reports the broken group) is caught by `collnet.fault.peer_killed` alone: the
/// checks its fault does not touch pass, and the in-tree plugin passes the fault check.
#[test]
fn a_plugin_that_never_notices_a_dead_peer_is_caught_by_peer_killed() {
    let rep = suite(
        "libnccl-net-cnzdeaf.so",
        Some(
            "collnet.fault.peer_killed,collnet.connect,collnet.iallreduce.one,collnet.in_flight,collnet.reduce_support",
        ),
    );
    assert_eq!(rep.exported, vec![12]);
    let (st, obs) = observed(&rep, "collnet.fault.peer_killed");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("neither completed nor failed within 30 s"), "{obs}");
    for id in [
        "collnet.connect",
        "collnet.iallreduce.one",
        "collnet.in_flight",
        "collnet.reduce_support",
    ] {
        let (st, obs) = observed(&rep, id);
        assert_eq!(st, Status::Pass, "{id}: {obs}");
    }
    let good = suite("libnccl_net_collnet_socket.so", Some("collnet.fault.peer_killed"));
    for r in good.results.iter().filter(|r| r.id == "collnet.fault.peer_killed") {
        assert_eq!(r.outcome.status, Status::Pass, "{r:#?}");
    }
}
