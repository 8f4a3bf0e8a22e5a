//! `ferroccl-conformance`: runs the ncclNet conformance suite against a plugin.
//!
//! ```text
//! ferroccl-conformance [NAME|PATH] [--api v6..v12|all] [--filter GLOB] [--device N]
//!                      [--format text|json|junit] [--output FILE] [--quick|--full] [--list]
//! ferroccl-conformance --tuner [NAME|PATH] [--api v2..v6|all] [--filter GLOB] [--format …] [--list]
//! ferroccl-conformance --profiler [NAME|PATH] [--api v1..v6|all] [--filter GLOB] [--format …] [--list]
//! ferroccl-conformance --env [NAME|PATH] [--api v1..v2|all] [--filter GLOB] [--format …] [--list]
//! ferroccl-conformance --collnet [NAME|PATH] [--api v6..v12|all] [--filter GLOB] [--format …] [--list]
//! ferroccl-conformance --gin [NAME|PATH] [--api v13..v14|all] [--filter GLOB] [--format …] [--list]
//! ferroccl-conformance --rma [NAME|PATH] [--api v13..v14|all] [--filter GLOB] [--format …] [--list]
//! ```
//! Exit status: 0 when every required check passed, 1 when one failed, 2 on a usage error.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use ferroccl_conformance::peer::Role;
use ferroccl_conformance::registry::Filter;
use ferroccl_conformance::runner::{SuiteConfig, parse_api, run};
use ferroccl_conformance::section::{Section, SectionConfig};
use ferroccl_conformance::worker::{Target, probe_main, setup, worker_main};
use ferroccl_conformance::{peer, report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    Junit,
}

/// Conformance suite for ncclNet plugins: loads the plugin through ferroccl's
/// host, runs every check for every exported API version, each in its own
/// process under a watchdog, and reports what the contract says, what the plugin
/// did, and how to reproduce each failure.
#[derive(Debug, Parser)]
#[command(name = "ferroccl-conformance", version)]
struct Cli {
    /// Plugin to test: a path (contains '/'), a file name on the loader path, or a
    /// short name resolved like NCCL_NET_PLUGIN (`socket` -> libnccl-net-socket.so).
    plugin: Option<String>,
    /// API versions: all, v9, v6..v12, or a comma list. Versions the library does
    /// not export are skipped.
    #[arg(long, default_value = "all")]
    api: String,
    /// Only checks whose id matches: globs (`transfer.size.*`), comma-separated; a
    /// bare prefix selects a group (`transfer`).
    #[arg(long)]
    filter: Option<String>,
    /// Test only this device (default: device 0 for traffic, every device for properties).
    #[arg(long)]
    device: Option<usize>,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Write the report to FILE instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Quick tier (default): minutes at most.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Full tier: adds the stress run (100 000 messages), maxP2pBytes and the large perf sweep.
    #[arg(long)]
    full: bool,
    /// List every check with its level, tier, versions, reference section and rule.
    #[arg(long)]
    list: bool,
    /// The library is a tuner plugin (ncclTuner_v2 … v6): run the tuner section
    /// (`tuner.*` checks; a short name resolves like NCCL_TUNER_PLUGIN).
    #[arg(long, conflicts_with = "profiler")]
    tuner: bool,
    /// The library is a profiler plugin (ncclProfiler_v1 … v6): run the profiler
    /// section (`profiler.*` checks; a short name resolves like NCCL_PROFILER_PLUGIN).
    #[arg(long, conflicts_with = "collnet")]
    profiler: bool,
    /// Check the library's CollNet table (ncclCollNetPlugin_v6 … v12, beside its net
    /// plugin): the `collnet.*` checks (a short name resolves like NCCL_NET_PLUGIN).
    #[arg(long, conflicts_with = "tuner")]
    collnet: bool,
    /// Check the library's GIN table (ncclGinPlugin_v13/_v14, in a GIN library or
    /// beside a net plugin): the host-side `gin.*` checks (init, devices, getProperties).
    #[arg(long, conflicts_with_all = ["tuner", "profiler", "collnet"])]
    gin: bool,
    /// The library is an env plugin (ncclEnv_v1, v2): run the env section
    /// (`env.*` checks; a short name resolves like NCCL_ENV_PLUGIN).
    #[arg(long, conflicts_with_all = ["tuner", "profiler", "collnet"])]
    env: bool,
    /// Check the library's RMA table (ncclRmaPlugin_v13/_v14, in an RMA library or
    /// beside a net plugin): the `rma.*` checks (connect, put/get, put-with-signal
    /// ordering, many in flight, a killed peer). The socket plugin offers RMA devices
    /// only with NCCL_SOCKET_RMA_ENABLE=1 (else the checks skip, saying so).
    #[arg(long, conflicts_with_all = ["tuner", "profiler", "collnet", "gin", "env"])]
    rma: bool,
    /// Internal: run one check in this process and print its result.
    #[arg(long, hide = true)]
    worker: Option<String>,
    /// Internal: probe the library's exported symbols.
    #[arg(long, hide = true)]
    probe: bool,
    /// Internal: act as the peer process of a cross-process check.
    #[arg(long, hide = true, value_enum)]
    peer: Option<Role>,
    /// Internal: message sizes for `--peer`.
    #[arg(long, hide = true, value_delimiter = ',')]
    sizes: Vec<usize>,
}

fn main() {
    std::process::exit(real_main());
}

fn real_main() -> i32 {
    let cli = Cli::parse();
    if cli.tuner {
        return section_main(&cli, &ferroccl_conformance::tuner::SECTION);
    }
    if cli.profiler {
        return section_main(&cli, &ferroccl_conformance::profiler::SECTION);
    }
    if cli.collnet {
        return section_main(&cli, &ferroccl_conformance::collnet::SECTION);
    }
    if cli.gin {
        return section_main(&cli, &ferroccl_conformance::gin::SECTION);
    }
    if cli.env {
        return section_main(&cli, &ferroccl_conformance::env::SECTION);
    }
    if cli.rma {
        return section_main(&cli, &ferroccl_conformance::rma::SECTION);
    }
    if cli.list {
        print!("{}", report::list());
        return 0;
    }
    let Some(plugin) = cli.plugin.clone() else {
        eprintln!(
            "ferroccl-conformance: name the plugin to test (a path, a file name, or e.g. `socket`); --help for usage"
        );
        return 2;
    };
    let versions = match parse_api(&cli.api) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ferroccl-conformance: {e}");
            return 2;
        }
    };
    if cli.probe {
        return probe_main(&plugin);
    }
    let target = Target {
        plugin: plugin.clone(),
        version: *versions.last().unwrap_or(&12),
        device: cli.device,
        full: cli.full,
    };
    if let Some(id) = &cli.worker {
        return worker_main(id, &target);
    }
    if let Some(role) = cli.peer {
        return match setup(&target) {
            Ok(mut cx) => peer::run_peer(&mut cx, role, &cli.sizes),
            Err(e) => {
                println!("error {e}");
                1
            }
        };
    }
    let filter = match cli.filter.as_deref().map(Filter::new).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ferroccl-conformance: {e}");
            return 2;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ferroccl-conformance: cannot locate my own executable to start workers: {e}");
            return 2;
        }
    };
    let cfg = SuiteConfig {
        plugin,
        versions,
        filter,
        device: cli.device,
        full: cli.full,
        exe,
        progress: true,
    };
    let rep = run(&cfg);
    if rep.results.is_empty() {
        eprintln!(
            "ferroccl-conformance: no check matched --filter {:?} (see --list)",
            cli.filter.as_deref().unwrap_or("")
        );
        return 2;
    }
    let text = match cli.format {
        Format::Text => report::text(&rep),
        Format::Json => report::json(&rep),
        Format::Junit => report::junit(&rep),
    };
    match &cli.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!("ferroccl-conformance: cannot write {}: {e}", path.display());
                return 2;
            }
            if cli.format != Format::Text {
                // Keep a one-line summary on the terminal / CI log.
                let sum = rep.summary();
                eprintln!(
                    "ferroccl-conformance: {} passed, {} plugin defect(s), {} advisory finding(s), {} skipped, {} not run; report in {}",
                    sum.passed,
                    sum.defects,
                    sum.advisory,
                    sum.skipped,
                    sum.not_run,
                    path.display()
                );
            }
        }
        None => {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(text.as_bytes());
        }
    }
    rep.exit_code()
}

/// `--tuner` / `--profiler` / `--collnet`: a plugin section (see `ferroccl_conformance::section`).
fn section_main<Cx>(cli: &Cli, section: &Section<Cx>) -> i32 {
    let name = section.name;
    if cli.list {
        print!("{}", section.list());
        return 0;
    }
    let Some(plugin) = cli.plugin.clone() else {
        eprintln!(
            "ferroccl-conformance: name the {name} to test (a path, a file name, or e.g. `{}`)",
            section.example_name
        );
        return 2;
    };
    let versions = match section.parse_api(&cli.api) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ferroccl-conformance: {e}");
            return 2;
        }
    };
    if cli.probe {
        return section.probe_main(&plugin);
    }
    if let Some(id) = &cli.worker {
        return (section.worker_main)(id, &plugin, *versions.last().unwrap_or(&6));
    }
    let filter = match cli.filter.as_deref().map(Filter::new).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ferroccl-conformance: {e}");
            return 2;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ferroccl-conformance: cannot locate my own executable to start workers: {e}");
            return 2;
        }
    };
    let rep = section.run(&SectionConfig {
        plugin,
        versions,
        filter,
        exe,
        progress: true,
    });
    if rep.results.is_empty() {
        eprintln!("ferroccl-conformance: no {name} check matched --filter (see --{name} --list)");
        return 2;
    }
    let text = section.retitle(&match cli.format {
        Format::Text => report::text(&rep),
        Format::Json => report::json(&rep),
        Format::Junit => report::junit(&rep),
    });
    match &cli.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!("ferroccl-conformance: cannot write {}: {e}", path.display());
                return 2;
            }
            let (p, f, k) = rep.counts();
            eprintln!(
                "ferroccl-conformance: {p} passed, {f} failed ({} required), {k} skipped; report in {}",
                rep.required_failures(),
                path.display()
            );
        }
        None => {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(text.as_bytes());
        }
    }
    rep.exit_code()
}
