//! `vdev.make` gives true verdicts: the zoo plugin whose `makeVDevice` answers with an
//! existing device's index (testing/zoo-vdev) fails exactly that check on every version
//! that has `makeVDevice` (v9+) and passes every other check it runs; the same plugin
//! made correct (`FERROCCL_ZOO_VDEV=good`) passes it; and the in-tree socket plugin
//! passes it. One test in this binary: it sets the environment the suite's worker
//! processes inherit.

mod common;

use std::collections::BTreeSet;

use common::{config, plugin_so};
use ferroccl_conformance::{Status, run};

fn vdev_verdicts(so: &std::path::Path) -> Vec<(u32, Status, String)> {
    let rep = run(&config(so, Some("vdev.make")));
    (6..=12)
        .filter_map(|v| {
            rep.get("vdev.make", v)
                .map(|r| (v, r.outcome.status, r.outcome.observed.clone().unwrap_or_default()))
        })
        .collect()
}

#[test]
fn vdev_make_catches_a_wrong_index_and_passes_correct_plugins() {
    let zoo = plugin_so("nccl_net_zoo_vdev");
    // The broken zoo plugin: failed on v9..v12, skipped (not applicable) before v9.
    let bad = vdev_verdicts(&zoo);
    for (v, st, obs) in &bad {
        if *v >= 9 {
            assert_eq!(*st, Status::Fail, "v{v}: {obs}");
            assert!(obs.contains("returned index 0 (an existing device)"), "v{v}: {obs}");
        } else {
            assert_ne!(*st, Status::Fail, "v{v} has no makeVDevice: {obs}");
        }
    }
    assert_eq!(bad.iter().filter(|(v, ..)| *v >= 9).count(), 4, "{bad:?}");
    // The in-tree socket plugin passes it.
    for (v, st, obs) in vdev_verdicts(&plugin_so("nccl_net_socket")) {
        if v >= 9 {
            assert_eq!(st, Status::Pass, "socket plugin v{v}: {obs}");
        }
    }
    // The control: the same plugin answering the new index passes; on the whole quick
    // tier (v12) the broken plugin and its control differ in vdev.make only (being
    // in-process, both fail the checks that need a peer process alike).
    let fails = |rep: &ferroccl_conformance::Report| -> BTreeSet<String> {
        rep.results
            .iter()
            .filter(|r| r.outcome.status == Status::Fail)
            .map(|r| r.id.to_string())
            .collect()
    };
    let mut v12 = config(&zoo, None);
    v12.versions = vec![12];
    let bad_all = fails(&run(&v12));
    // SAFETY: this binary's only test; the suite's workers (child processes) read it.
    unsafe { std::env::set_var("FERROCCL_ZOO_VDEV", "good") };
    for (v, st, obs) in vdev_verdicts(&zoo) {
        if v >= 9 {
            assert_eq!(st, Status::Pass, "zoo-vdev made correct, v{v}: {obs}");
        }
    }
    let good_all = fails(&run(&v12));
    let diff: Vec<&String> = bad_all.symmetric_difference(&good_all).collect();
    assert_eq!(
        diff,
        vec!["vdev.make"],
        "broken fails {bad_all:?}, control fails {good_all:?}"
    );
}
