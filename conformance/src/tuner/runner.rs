//! The parent side of the tuner section: probe the exported versions, then run
//! every selected check on every selected version in its own worker process.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::checks::all;
use super::worker::TunerProbe;
use crate::outcome::{CheckOutcome, Status};
use crate::registry::{Filter, Level, Tier};
use crate::runner::{CheckResult, Report, quote, spawn_worker, worker_failure};

/// What to run.
#[derive(Debug, Clone)]
pub struct TunerSuiteConfig {
    /// Tuner name or path (as for `NCCL_TUNER_PLUGIN`).
    pub plugin: String,
    /// API versions requested (2 ..= 6).
    pub versions: Vec<u32>,
    /// `--filter`.
    pub filter: Option<Filter>,
    /// The CLI binary (understands `--tuner --worker` / `--tuner --probe`).
    pub exe: PathBuf,
    /// Progress on a terminal.
    pub progress: bool,
}

/// Deadline of one worker (every call has its own 20 s watchdog inside).
const DEADLINE: Duration = Duration::from_secs(120);

fn reproduce(cfg: &TunerSuiteConfig, id: &str, v: u32) -> String {
    format!(
        "ferroccl-conformance --tuner {} --api v{v} --filter {}",
        quote(&cfg.plugin),
        quote(id)
    )
}

fn probe(cfg: &TunerSuiteConfig) -> Result<TunerProbe, String> {
    let run = spawn_worker(
        &cfg.exe,
        &["--tuner".into(), "--probe".into(), cfg.plugin.clone()],
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

fn load_failure(cfg: &TunerSuiteConfig, id: &str, rule: &str, outcome: CheckOutcome) -> CheckResult {
    CheckResult {
        id: id.into(),
        version: 0,
        level: Level::Required,
        tier: Tier::Quick,
        section: "§5.3".into(),
        nccl: nccl_source("§5.3").into(),
        rule: rule.into(),
        outcome,
        duration_ms: 0,
        reproduce: format!(
            "ferroccl-conformance --tuner {} --filter tuner.load",
            quote(&cfg.plugin)
        ),
    }
}

/// Runs the tuner section; the report's `exported` lists `ncclTunerPlugin_vN` versions.
pub fn run(cfg: &TunerSuiteConfig) -> Report {
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
                "tuner.open",
                "the library opens with dlopen(RTLD_NOW | RTLD_LOCAL)",
                CheckOutcome::fail("the tuner library can be opened", e),
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
            "tuner.symbols",
            "the library exports ncclTunerPlugin_vN for a requested version",
            CheckOutcome::fail(
                format!("one of ncclTunerPlugin_v{:?} is exported", cfg.versions),
                format!("{} exports tuner versions {:?}", p.path, p.versions),
            ),
        ));
    }
    let checks: Vec<_> = all()
        .into_iter()
        .filter(|c| cfg.filter.as_ref().is_none_or(|f| f.matches(c.id)))
        .collect();
    let jobs: Vec<(u32, &super::checks::TunerCheck)> = versions
        .iter()
        .flat_map(|&v| checks.iter().filter(move |c| c.applies_to(v)).map(move |c| (v, c)))
        .collect();
    let bar = crate::runner::progress_bar(cfg.progress, jobs.len());
    for (i, (v, c)) in jobs.iter().enumerate() {
        bar.set_message(format!("v{v} {}", c.id));
        bar.set_position(i as u64 + 1);
        let args = vec![
            "--tuner".to_owned(),
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

/// `--list --tuner`: every tuner check with its level, versions, section and rule.
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
