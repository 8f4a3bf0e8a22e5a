//! The RMA section of the suite (`ferroccl-conformance --rma PLUGIN`): an
//! `ncclRmaPlugin_v13` / `_v14` table (one-sided put, get and put-with-signal into
//! symmetric windows), in an RMA library or beside a net plugin's tables, driven
//! through the runtime's own host adapter (`ferroccl::plugin::rma::RmaAdapter`) as
//! NCCL 2.30.7 drives it (`src/plugin/rma.cc`, `src/rma/rma_proxy.cc`: init, devices,
//! getProperties; per communicator listen, the handles all-gathered, connect with all
//! of them, closeListen, createContext; regMrSym of each window in the same order on
//! every rank; iput / iputSignal / iget / iflush tested until done).
//!
//! * [`checks`] — every RMA check (`rma.*`): rule, section, level, versions, body; the
//!   ranks of a check are threads of the worker (one table per process, as in NCCL),
//!   every wait bounded by [`checks::WAIT`].
//! * [`worker`] — one check on one version in its own process under a watchdog, and
//!   the peer process of `rma.fault.peer_killed` (a rank of its own, killed while the
//!   others put to it).
//! * [`SECTION`] — the section for [`crate::section`]; a library that exports no RMA
//!   table is a skip (RMA tables are optional beside a net plugin).
//!
//! A table whose `devices` reports 0 is not usable (NCCL's `src/plugin/rma.cc` moves on to the
//! next library); the checks after `rma.init` then skip with the reason. The in-tree
//! socket plugin offers its RMA devices only with `NCCL_SOCKET_RMA_ENABLE=1`.

pub mod checks;
pub mod worker;

use ferroccl::plugin::symbols::PluginType;

use crate::section::Section;

/// The RMA section as the shared plumbing ([`crate::section`]) runs it.
pub const SECTION: Section<checks::RmaCx> = Section {
    name: "rma",
    family: "ncclRma",
    symbol: "ncclRmaPlugin_v",
    versions: 13..=14,
    lib_prefix: "libnccl-rma",
    ty: PluginType::Rma,
    example_name: "libnccl-rma.so",
    load_section: "§RMA",
    symbols_rule: "the library exports ncclRmaPlugin_vN for a requested version",
    list_hint: "--rma --list",
    checks: checks::all,
    nccl_source,
    unknown_versions: None,
    worker_main: worker::worker_main,
    absent_is_skip: true,
};

/// The NCCL 2.30.7 source every RMA check relies on.
fn nccl_source(section: &str) -> &'static str {
    match section {
        "§RMA.fault" => {
            "src/rma/rma_proxy.cc: the proxy tests each RMA request until done or an error; an error (or queryLastError) fails the communicator, nothing else ends a request"
        }
        "§RMA.signal" => {
            "src/include/plugin/rma/rma_v14.h: iputSignal updates the signal word only once the put's data is visible at the target (ncclPutSignal / ncclWaitSignal rely on it)"
        }
        _ => {
            "src/plugin/rma.cc: ncclRmaPluginLoad (ncclRmaPlugin_v14, then _v13), init and devices (ndev <= 0: the next library); src/rma/rma_proxy.cc: listen, handles all-gathered, connect, closeListen, createContext, regMrSym, iput/iputSignal/iget/iflush, test"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs_and_registry() {
        assert_eq!(SECTION.parse_api("all").unwrap(), vec![13, 14]);
        assert!(SECTION.parse_api("v12").is_err());
        SECTION.assert_registry_well_formed();
    }
}
