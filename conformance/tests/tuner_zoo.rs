//! The tuner section can fail, and passes what is right: the C tuners of every
//! version, the SDK tuner and the in-tree rules tuner are conformant; the zoo
//! tuners that crash in `getCollInfo`, write outside the cost table, return an
//! error or fail `init` are each caught by the check meant for them, with a
//! message naming what happened, without the suite hanging or crashing.

use std::time::Duration;

use ferroccl_conformance::Status;
use ferroccl_conformance::runner::Report;
use ferroccl_conformance::tuner::SECTION;

mod common;
use common::observed;

fn suite(file: &str, filter: Option<&str>) -> Report {
    common::run_section(&SECTION, file, filter, Duration::from_secs(120))
}

#[test]
fn good_tuners_are_conformant() {
    for v in 2..=6 {
        let rep = suite(&format!("libnccl-tuner-cv{v}.so"), None);
        assert_eq!(rep.exported, vec![v]);
        assert_eq!(rep.exit_code(), 0, "cv{v}: {rep:#?}");
        assert!(rep.counts().0 >= 7, "cv{v}: {:?}", rep.counts());
    }
    let rep = suite("libnccl_tuner_sdktest.so", None);
    assert_eq!(rep.exported, vec![2, 3, 4, 5, 6]);
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
    let rep = suite("libnccl_tuner_rules.so", None);
    assert_eq!(rep.exit_code(), 0, "{rep:#?}");
}

#[test]
fn crash_in_get_coll_info_is_caught_and_named() {
    let rep = suite("libnccl-tuner-ccrash.so", Some("tuner.coll_info.errors,tuner.init"));
    let (st, obs) = observed(&rep, "tuner.coll_info.errors");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("crashed with SIGSEGV") && obs.contains("during getCollInfo"),
        "{obs}"
    );
    assert_eq!(observed(&rep, "tuner.init").0, Status::Pass);
}

#[test]
fn out_of_bounds_writes_are_caught() {
    let rep = suite("libnccl-tuner-coob.so", Some("tuner.coll_info"));
    let (st, obs) = observed(&rep, "tuner.coll_info.bounds");
    assert_eq!(st, Status::Fail);
    assert!(
        obs.contains("wrote outside the 7x3 cost table: float index -1"),
        "{obs}"
    );
    // The other getCollInfo checks are not what this fault breaks.
    assert_eq!(observed(&rep, "tuner.coll_info.errors").0, Status::Pass);
}

#[test]
fn errors_are_caught() {
    let rep = suite("libnccl-tuner-cerror.so", Some("tuner.coll_info.errors"));
    let (st, obs) = observed(&rep, "tuner.coll_info.errors");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("getCollInfo returned ncclInternalError (3)"), "{obs}");
    let rep = suite("libnccl-tuner-cinitfail.so", Some("tuner.init"));
    let (st, obs) = observed(&rep, "tuner.init");
    assert_eq!(st, Status::Fail);
    assert!(obs.contains("init returned ncclSystemError (2)"), "{obs}");
}
