//! The CollNet section of the suite: the `ncclCollNetPlugin_v6` … `_v12` table of a
//! net plugin's library (`ferroccl-conformance --collnet PLUGIN`), checked against
//! `docs/reference/nccl-plugin-abi.md` §2 and the way NCCL 2.30.7 drives it
//! (`src/plugin/net.cc`, `src/transport/coll_net.cc`, `src/enqueue.cc`), through the
//! runtime's own host code: the library is loaded by `ferroccl::plugin::load_net_from`
//! with the version capped, and the table is driven through its
//! `ferroccl::plugin::collnet::CollNetAdapter` (the adapter the runtime's CollNet
//! transport uses).
//!
//! * [`checks`] — every CollNet check (`collnet.*`): rule, section, level, versions, body;
//!   the ranks of a check are threads of the worker (the table is shared per process,
//!   as in NCCL), on loopback, every wait bounded.
//! * [`worker`] — one check on one version in its own process under a watchdog, and
//!   the peer process of `collnet.fault.peer_killed` (a rank in a process of its own,
//!   killed mid-reduction).
//! * [`SECTION`] — the section for [`crate::section`]: probes which
//!   `ncclCollNetPlugin_vN` the library exports, runs each check per version in a
//!   worker, and returns the usual [`crate::runner::Report`] (text, JSON, JUnit).

pub mod checks;
pub mod worker;

use ferroccl::plugin::symbols::PluginType;

use crate::section::Section;

/// The CollNet section as the shared plumbing ([`crate::section`]) runs it:
/// `ncclCollNetPlugin_v6` … `_v12`, resolved like `NCCL_NET_PLUGIN`.
pub const SECTION: Section<checks::CollNetCx> = Section {
    name: "collnet",
    family: "ncclCollNet",
    symbol: "ncclCollNetPlugin_v",
    versions: 6..=12,
    lib_prefix: "libnccl-net",
    ty: PluginType::CollNet,
    example_name: "collnet-socket",
    load_section: "§5.1",
    symbols_rule: "the library exports ncclCollNetPlugin_vN for a requested version",
    list_hint: "--collnet --list",
    checks: checks::all,
    nccl_source,
    unknown_versions: None,
    worker_main: worker::worker_main,
    absent_is_skip: true,
};

/// Parses `--api` for CollNet tables: `all`, `v9`, `v6..v12`, or a comma list.
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    SECTION.parse_api(spec)
}

/// The NCCL 2.30.7 source whose use of the CollNet API a check of `section` relies on.
fn nccl_source(section: &str) -> &'static str {
    match section {
        "§5.1" => {
            "src/plugin/net.cc: ncclNetPluginLoad looks up ncclCollNetPlugin_v12 … _v6 in the net plugin's library; ncclNetPluginInit calls its init and devices()"
        }
        "§2.fault" => {
            "src/transport/coll_net.cc: the proxy's collNetTest loops until done or an error; an error fails the communicator (ncclProxyProgress), nothing else ends a request"
        }
        _ => {
            "src/transport/coll_net.cc: sharedListen/sharedConnect (connect with every rank's handle), regMr of the buffers, collNetIallreduce/Iallgather/Ireducescatter posted in the same order on every rank and tested until done; src/enqueue.cc: reduceSupport per dtype and op"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), (6..=12).collect::<Vec<_>>());
        assert_eq!(parse_api("v8..v9").unwrap(), vec![8, 9]);
        assert!(parse_api("v5").is_err());
    }

    #[test]
    fn check_ids_are_unique_and_sections_cited() {
        SECTION.assert_registry_well_formed();
    }
}
