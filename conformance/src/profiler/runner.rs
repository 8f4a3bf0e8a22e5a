//! The parent side of the profiler section: probe the exported versions, then
//! run every selected check on every selected version in its own worker process
//! (a crash or a call that never returns fails that check only; the run goes on).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::checks::all;
use super::worker::ProfilerProbe;
use crate::outcome::{CheckOutcome, Status};
use crate::registry::{Filter, Level, Tier};
use crate::runner::{CheckResult, Report, quote, spawn_worker, worker_failure};

/// What to run.
#[derive(Debug, Clone)]
pub struct ProfilerSuiteConfig {
    /// Profiler name or path (as for `NCCL_PROFILER_PLUGIN`).
    pub plugin: String,
    /// API versions requested (1 ..= 6).
    pub versions: Vec<u32>,
    /// `--filter`.
    pub filter: Option<Filter>,
    /// The CLI binary (understands `--profiler --worker` / `--profiler --probe`).
    pub exe: PathBuf,
    /// Progress on a terminal.
    pub progress: bool,
}

/// Deadline of one worker (every call has its own 10 s watchdog inside).
const DEADLINE: Duration = Duration::from_secs(120);

fn reproduce(cfg: &ProfilerSuiteConfig, id: &str, v: u32) -> String {
    format!(
        "ferroccl-conformance --profiler {} --api v{v} --filter {}",
        quote(&cfg.plugin),
        quote(id)
    )
}

fn probe(cfg: &ProfilerSuiteConfig) -> Result<ProfilerProbe, String> {
    let run = spawn_worker(
        &cfg.exe,
        &["--profiler".into(), "--probe".into(), cfg.plugin.clone()],
        Duration::from_secs(30),
    );
    match &run.outcome {
        Some(o) if o.status == Status::Pass => o
            .metrics
            .clone()
            .and_then(|m| serde_json::from_value(m).ok())
            .ok_or_else(|| "probe returned no symbol list".to_owned()),
        Some(o) => Err(o.message.clone()),
        None => Err(worker_failure(&run, Duration::from_secs(30)).message),
    }
}

fn load_failure(cfg: &ProfilerSuiteConfig, id: &str, rule: &str, outcome: CheckOutcome) -> CheckResult {
    CheckResult {
        id: id.into(),
        version: 0,
        level: Level::Required,
        tier: Tier::Quick,
        section: "§5.4".into(),
        nccl: nccl_source("§5.4").into(),
        rule: rule.into(),
        outcome,
        duration_ms: 0,
        reproduce: format!(
            "ferroccl-conformance --profiler {} --filter profiler.load",
            quote(&cfg.plugin)
        ),
    }
}

/// Runs the profiler section; the report's `exported` lists `ncclProfiler_vN` versions.
pub fn run(cfg: &ProfilerSuiteConfig) -> Report {
    let start = Instant::now();
    let mut report = Report {
        plugin: cfg.plugin.clone(),
        path: None,
        exported: Vec::new(),
        collnet_exported: Vec::new(),
        requested: cfg.versions.clone(),
        tier: "quick",
        results: Vec::new(),
        duration_s: 0.0,
    };
    let p = match probe(cfg) {
        Ok(p) => p,
        Err(e) => {
            report.results.push(load_failure(
                cfg,
                "profiler.open",
                "the library opens with dlopen(RTLD_NOW | RTLD_LOCAL)",
                CheckOutcome::fail("the profiler library can be opened", e),
            ));
            report.duration_s = start.elapsed().as_secs_f64();
            return report;
        }
    };
    report.path = Some(p.path.clone());
    report.exported = p.versions.clone();
    let versions: Vec<u32> = cfg
        .versions
        .iter()
        .copied()
        .filter(|v| p.versions.contains(v))
        .collect();
    if versions.is_empty() {
        report.results.push(load_failure(
            cfg,
            "profiler.symbols",
            "the library exports ncclProfiler_vN (N = 1 ..= 6, the versions NCCL 2.30.7 looks for) for a requested version",
            CheckOutcome::fail(
                format!("one of ncclProfiler_v{:?} is exported", cfg.versions),
                if p.unknown.is_empty() {
                    format!("{} exports profiler versions {:?}", p.path, p.versions)
                } else {
                    format!(
                        "{} exports profiler versions {:?} and {}, which NCCL 2.30.7 does not look for",
                        p.path,
                        p.versions,
                        p.unknown.join(", ")
                    )
                },
            ),
        ));
    }
    let checks: Vec<_> = all()
        .into_iter()
        .filter(|c| cfg.filter.as_ref().is_none_or(|f| f.matches(c.id)))
        .collect();
    let jobs: Vec<(u32, &super::checks::ProfilerCheck)> = versions
        .iter()
        .flat_map(|&v| checks.iter().filter(move |c| c.applies_to(v)).map(move |c| (v, c)))
        .collect();
    let bar = crate::runner::progress_bar(cfg.progress, jobs.len());
    for (i, (v, c)) in jobs.iter().enumerate() {
        bar.set_message(format!("v{v} {}", c.id));
        bar.set_position(i as u64 + 1);
        let args = vec![
            "--profiler".to_owned(),
            "--worker".into(),
            c.id.into(),
            "--api".into(),
            format!("v{v}"),
            cfg.plugin.clone(),
        ];
        let run = spawn_worker(&cfg.exe, &args, DEADLINE);
        let outcome = run.outcome.clone().unwrap_or_else(|| worker_failure(&run, DEADLINE));
        report.results.push(CheckResult {
            id: c.id.into(),
            version: *v,
            level: c.level,
            tier: Tier::Quick,
            section: c.section.into(),
            nccl: nccl_source(c.section).into(),
            rule: c.rule.into(),
            outcome,
            duration_ms: run.elapsed.as_millis() as u64,
            reproduce: reproduce(cfg, c.id, *v),
        });
    }
    bar.finish_and_clear();
    report.duration_s = start.elapsed().as_secs_f64();
    report
}

/// `--profiler --list`: every profiler check with its level, versions, section and rule.
pub fn list() -> String {
    let checks = all();
    let w = checks.iter().map(|c| c.id.len()).max().unwrap_or(10);
    let mut s = String::new();
    for c in &checks {
        s.push_str(&format!(
            "{:w$}  {:8}  {:9}  {:5}  {}\n",
            c.id,
            if c.level == Level::Required {
                "required"
            } else {
                "advisory"
            },
            if c.min_version == c.max_version {
                format!("v{}", c.min_version)
            } else {
                format!("v{}..v{}", c.min_version, c.max_version)
            },
            c.section,
            c.rule
        ));
    }
    s
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
