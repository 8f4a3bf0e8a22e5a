//! The env plugin section of the suite: any `ncclEnv_v1` / `ncclEnv_v2` plugin
//! (`ferroccl-conformance --env PLUGIN`), checked against the contract of
//! `docs/reference/nccl-plugin-abi.md` §3.3 (NCCL 2.30.7 `src/plugin/env.cc`,
//! `src/misc/param.cc`) through the runtime's own loader
//! (`ferroccl::plugin::env::EnvPlugin`).
//!
//! * [`checks`] — every env check: id (`env.*`), rule, reference section, level,
//!   API versions, body.
//! * [`worker`] — one check on one version in its own process, every plugin call
//!   under a watchdog and a crash reporter naming the call.
//! * [`SECTION`] — the section described for [`crate::section`], which probes
//!   which `ncclEnvPlugin_vN` the library exports, runs each check per version
//!   in a worker, and returns the suite's usual [`crate::runner::Report`].
//!
//! NCCL sends every parameter lookup of the process through `getEnv` and keeps
//! the strings it returns like `getenv`'s, from any thread; the checks hold a
//! plugin to exactly that.

pub mod checks;
pub mod worker;

use ferroccl::plugin::symbols::PluginType;

use crate::section::Section;

/// The env section as the shared plumbing ([`crate::section`]) runs it:
/// `ncclEnvPlugin_v1` and `_v2`, resolved like `NCCL_ENV_PLUGIN`.
pub const SECTION: Section<checks::EnvCx> = Section {
    name: "env",
    family: "ncclEnv",
    symbol: "ncclEnvPlugin_v",
    versions: 1..=2,
    lib_prefix: "libnccl-env",
    ty: PluginType::Env,
    example_name: "myenv",
    load_section: "§3.3",
    symbols_rule: "the library exports ncclEnvPlugin_vN for a requested version",
    list_hint: "--env --list",
    checks: checks::all,
    nccl_source,
    unknown_versions: Some(3..=9),
    worker_main: worker::worker_main,
    absent_is_skip: false,
};

/// Parses `--api` for env plugins: `all`, `v1`, `v2`, `v1..v2`.
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    SECTION.parse_api(spec)
}

/// The NCCL 2.30.7 source whose use of the env API a check relies on.
fn nccl_source(_section: &str) -> &'static str {
    "src/plugin/env.cc: ncclEnvPluginLoad (NCCL_ENV_PLUGIN, ncclEnvPlugin_v2 then _v1), ncclEnvPluginInit (init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX[, ncclDebugLog]) once, finalize at atexit); src/misc/param.cc: ncclGetEnv sends every lookup to getEnv"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), vec![1, 2]);
        assert_eq!(parse_api("v2").unwrap(), vec![2]);
        assert!(parse_api("v3").is_err());
    }

    #[test]
    fn check_ids_are_unique_and_sections_cited() {
        SECTION.assert_registry_well_formed();
    }
}
