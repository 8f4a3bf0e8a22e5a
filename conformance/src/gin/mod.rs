//! The GIN section of the suite (`ferroccl-conformance --gin PLUGIN`): the host-side
//! calls of an `ncclGinPlugin_v13` / `_v14` table (GPU-initiated networking), found in
//! a GIN library or beside a net plugin's tables, as NCCL 2.30.7 makes them before any
//! device work (`src/plugin/gin.cc`: `ncclGinPluginInit` calls `init(&ginContext,
//! commHash, logger)` then `devices`; `ncclGinPluginAssignToComm` calls
//! `getProperties(0, …)` and, v14, `getGinProperties`; `ncclGinPluginFinalize` calls
//! `finalize(ginContext)`). ferroccl hosts no GIN device path, so the data-path slots
//! are not called.
//!
//! * [`checks`] — every GIN check (`gin.*`): rule, section, level, versions, body.
//! * [`worker`] — one check on one version in its own process, every call under a
//!   watchdog.
//! * [`SECTION`] — the section for [`crate::section`]; a library that exports no GIN
//!   table is a skip (GIN tables are optional beside a net plugin).

pub mod checks;
pub mod worker;

use ferroccl::plugin::symbols::PluginType;

use crate::section::Section;

/// The GIN section as the shared plumbing ([`crate::section`]) runs it.
pub const SECTION: Section<checks::GinCx> = Section {
    name: "gin",
    family: "ncclGin",
    symbol: "ncclGinPlugin_v",
    versions: 13..=14,
    lib_prefix: "libnccl-gin",
    ty: PluginType::Gin,
    example_name: "libnccl-gin.so",
    load_section: "§GIN",
    symbols_rule: "the library exports ncclGinPlugin_vN for a requested version",
    list_hint: "--gin --list",
    checks: checks::all,
    nccl_source,
    unknown_versions: None,
    worker_main: worker::worker_main,
    absent_is_skip: true,
};

/// The NCCL 2.30.7 source every GIN check relies on.
fn nccl_source(_section: &str) -> &'static str {
    "src/plugin/gin.cc: ncclGinPluginLoad (ncclGinPlugin_v14, then _v13, from NCCL_GIN_PLUGIN or the net plugin's library), ncclGinPluginInit (init, devices: ndev <= 0 disables), ncclGinPluginAssignToComm (getProperties(0): netDeviceType is the GIN type; v14 getGinProperties), ncclGinPluginFinalize"
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
