//! The profiler section of the suite: any `ncclProfiler_v1` … `_v6` plugin
//! (`ferroccl-conformance --profiler PLUGIN`), driven as NCCL 2.30.7 drives it
//! (`docs/reference/nccl-graph-tuning.md` §6, `docs/reference/nccl-plugin-abi.md` §3.2 and
//! §5.4), through the runtime's own adapter (`ferroccl::profiler::Profiler`:
//! each version's init arguments, descriptor layouts and state arguments).
//!
//! * [`checks`] — every profiler check: id (`profiler.*`), rule, reference
//!   section, level, API versions, body; and the event trees fed to the plugin.
//! * [`shim`] — the vtable the adapter is given: forwards to the plugin's
//!   functions under the watchdog and records every result other than
//!   `ncclSuccess` (NCCL and the adapter ignore them).
//! * [`worker`] — one check on one version in its own process, every plugin
//!   call under a per-thread watchdog and a crash reporter naming the call and
//!   the event type.
//! * [`SECTION`] — the section described for [`crate::section`], which probes
//!   which `ncclProfiler_vN` the library exports, runs each check per version
//!   in a worker, and returns the suite's usual [`crate::runner::Report`] (so
//!   `--format text|json|junit` work unchanged).

pub mod checks;
pub mod shim;
pub mod worker;

use ferroccl::plugin::symbols::PluginType;

use crate::section::Section;

/// The profiler section as the shared plumbing ([`crate::section`]) runs it:
/// `ncclProfiler_v1` … `_v6`, resolved like `NCCL_PROFILER_PLUGIN`; the probe
/// also names `ncclProfiler_v7` … `_v16`, which NCCL 2.30.7 does not look for.
pub const SECTION: Section<checks::ProfCx> = Section {
    name: "profiler",
    family: "ncclProfiler",
    symbol: "ncclProfiler_v",
    versions: 1..=6,
    lib_prefix: "libnccl-profiler",
    ty: PluginType::Profiler,
    example_name: "trace",
    load_section: "§5.4",
    symbols_rule: "the library exports ncclProfiler_vN (N = 1 ..= 6, the versions NCCL 2.30.7 looks for) for a requested version",
    list_hint: "--profiler --list",
    checks: checks::all,
    nccl_source,
    unknown_versions: Some(7..=16),
    worker_main: worker::worker_main,
    absent_is_skip: false,
};

/// Parses `--api` for profilers: `all`, `v4`, `v1..v6`, or a comma list (1 ..= 6).
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    SECTION.parse_api(spec)
}

/// The NCCL 2.30.7 source whose use of the profiler API a check of `section` relies on.
fn nccl_source(section: &str) -> &'static str {
    match section {
        "§5.4" => {
            "src/plugin/profiler.cc: ncclProfilerPluginLoad (ncclProfiler_v6 down to _v1, NCCL_PROFILER_PLUGIN, then the net plugin's library), ncclProfilerPluginInit/Finalize per communicator"
        }
        "§3.2" => "src/plugin/profiler/profiler_v1..v6.cc: each version's init arguments and descriptor layout",
        "§6.5" => "src/proxy.cc: ncclProxyGetPostedOps, ncclProxyProgress (ProxyCtrl events)",
        "§6.6" => {
            "src/plugin/profiler.cc: ncclProfilerCallback (handed to v10+ net plugins); src/transport/net_socket.cc, net_ib/p2p.cc"
        }
        "§6.4" => "src/transport/net.cc: sendProxyProgress, recvProxyProgress (ProxyStep start, states, stop)",
        _ => {
            "src/group.cc, src/enqueue.cc (GroupApi/CollApi/P2pApi, Group/Coll/P2p at hostStreamPlanTask), src/proxy.cc (ProxyOp), src/plugin/profiler.cc (ncclProfilerStart*/Stop* helpers)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(parse_api("v2..v4").unwrap(), vec![2, 3, 4]);
        assert!(parse_api("v7").is_err());
        assert!(parse_api("v0").is_err());
    }

    #[test]
    fn check_ids_are_unique_and_sections_cited() {
        SECTION.assert_registry_well_formed();
    }
}
