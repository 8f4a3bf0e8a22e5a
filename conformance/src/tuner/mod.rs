//! The tuner section of the suite: any `ncclTuner_v2` … `_v6` plugin
//! (`ferroccl-conformance --tuner PLUGIN`), checked against the contract of
//! `docs/reference/nccl-plugin-abi.md` §3.1 and §5.3 and of
//! `docs/reference/nccl-graph-tuning.md` §3.5, through the runtime's own adapter
//! (`ferroccl::plugin::tuner::TunerAdapter`).
//!
//! * [`checks`] — every tuner check: id (`tuner.*`), rule, reference section,
//!   level, API versions, body.
//! * [`worker`] — one check on one version in its own process, every plugin call
//!   under a watchdog and a crash reporter naming the call.
//! * [`SECTION`] — the section described for [`crate::section`], which probes
//!   which `ncclTunerPlugin_vN` the library exports, runs each check per
//!   version in a worker, and returns the suite's usual
//!   [`crate::runner::Report`] (so `--format text|json|junit` work unchanged).
//!
//! The cost tables handed to the plugin are NCCL 2.30.7's own, computed by
//! ferroccl's model for several machines (one 8-GPU Hopper node on NVLink, four
//! such nodes over the network, one GPU per node, and a CPU host), for every
//! function and sizes from 8 B to 1 GiB.

pub mod checks;
pub mod worker;

use ferroccl::plugin::symbols::PluginType;

use crate::section::Section;

/// The tuner section as the shared plumbing ([`crate::section`]) runs it:
/// `ncclTunerPlugin_v2` … `_v6`, resolved like `NCCL_TUNER_PLUGIN`.
pub const SECTION: Section<checks::TunerCx> = Section {
    name: "tuner",
    family: "ncclTuner",
    symbol: "ncclTunerPlugin_v",
    versions: 2..=6,
    lib_prefix: "libnccl-tuner",
    ty: PluginType::Tuner,
    example_name: "rules",
    load_section: "§5.3",
    symbols_rule: "the library exports ncclTunerPlugin_vN for a requested version",
    list_hint: "--list",
    checks: checks::all,
    nccl_source,
    // The tuner section names no unknown versions (as before the sections shared code).
    unknown_versions: None,
    worker_main: worker::worker_main,
    absent_is_skip: false,
};

/// Parses `--api` for tuners: `all`, `v4`, `v2..v6`, or a comma list (2 ..= 6).
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    SECTION.parse_api(spec)
}

/// The NCCL 2.30.7 source whose use of the tuner API a check of `section` relies on.
fn nccl_source(section: &str) -> &'static str {
    match section {
        "§5.3" => {
            "src/plugin/tuner.cc: ncclTunerPluginLoad (ncclTunerPlugin_v6 down to _v2, NCCL_TUNER_PLUGIN, then the net plugin's library)"
        }
        _ => {
            "src/enqueue.cc: topoGetAlgoInfo calls comm->tuner->getCollInfo on every collective with the cost table; src/init.cc: tuner init at comm init, finalize at destroy"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), vec![2, 3, 4, 5, 6]);
        assert_eq!(parse_api("v2..v4").unwrap(), vec![2, 3, 4]);
        assert!(parse_api("v7").is_err());
    }

    #[test]
    fn check_ids_are_unique_and_sections_cited() {
        SECTION.assert_registry_well_formed();
    }
}
