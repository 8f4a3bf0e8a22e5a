//! Conformance suite for any `ncclNet` plugin (issue 5): an executable
//! specification of the contract in `docs/reference/nccl-plugin-abi.md` §1
//! (§1.5 in particular) and `docs/reference/net-plugin-conformance-checklist.md`.
//!
//! * [`registry`] — every check: id, one-line rule, reference section, required
//!   or advisory, quick or full tier, API versions.
//! * [`runner`] — probes the library's exported `ncclNetPlugin_vN` symbols, then
//!   runs each selected check for each selected version in its own worker process
//!   (the CLI binary in its hidden `--worker` mode) under a deadline.
//! * [`watch`] — the in-worker watchdog every plugin call runs under.
//! * [`cx`] — the context checks drive the plugin through: the runtime's own
//!   `ferroccl::plugin::NetPlugin` (loaded by `ferroccl::plugin::load_net_from`),
//!   every call checked, timed and watched.
//! * [`peer`] — the peer process of cross-process checks.
//! * [`report`] — text, JSON and JUnit output.
//!
//! * [`tuner`] — the tuner section (`--tuner`): any `ncclTuner_v2` … `_v6` plugin,
//!   each check per version in a worker, through the runtime's tuner adapter.
//! * [`profiler`] — the profiler section (`--profiler`): any `ncclProfiler_v1` …
//!   `_v6` plugin fed NCCL's event trees from several threads, each check per
//!   version in a worker that catches crashes and calls that never return.
//!
//! * [`collnet`] — the CollNet section (`--collnet`): the `ncclCollNet_v6` … `_v12`
//!   table beside a net plugin, driven through the runtime's CollNet adapter by
//!   groups of ranks (threads, and a peer process that is killed mid-reduction).
//!
//! * [`gin`] — the GIN section (`--gin`): the host-side calls (init, devices,
//!   getProperties) of an `ncclGinPlugin_v13` / `_v14` table, each check per version
//!   in a worker.
//! * [`rma`] — the RMA section (`--rma`): an `ncclRmaPlugin_v13` / `_v14` table
//!   driven through the runtime's RMA adapter by groups of ranks (threads, and a peer
//!   process killed mid-operation): connect, put/get per size and alignment,
//!   put-with-signal ordering, many in flight.
//! * [`mod@env`] — the env plugin section (`--env`): any `ncclEnv_v1` / `_v2` plugin's
//!   `init`, `getEnv` (unset names, stable strings, many threads) and `finalize`.
//!
//! * [`section`] — what the tuner, profiler and CollNet sections share: `--api`, the
//!   check record, the worker-per-check runner, `--list`, the probe.
//!
//! Plugin authors: see `conformance/README.md`.

pub mod checks;
pub mod collnet;
pub mod cx;
pub mod env;
pub mod gin;
pub mod loader;
pub mod outcome;
pub mod peer;
pub mod profiler;
pub mod registry;
pub mod report;
pub mod rma;
pub mod runner;
pub mod section;
pub mod tuner;
pub mod watch;
pub mod worker;

pub use outcome::{CheckOutcome, Status};
pub use registry::{Check, Filter, Level, Tier, all_checks};
pub use runner::{CheckResult, Report, SuiteConfig, parse_api, run};
