//! The parent side: probes the library, then runs every selected check for every
//! selected API version in its own worker process under a deadline, and collects
//! the results. A worker that hangs is killed (with its whole process group, peers
//! included); one that crashes becomes a failure naming the signal and the plugin
//! call that was running.

use std::io::{IsTerminal, Read};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::loader::Probe;
use crate::outcome::{CheckOutcome, Status};
use crate::registry::{Body, Check, Filter, Level, Tier, all_checks};
use crate::watch::{CRASH_MARKER, RESULT_MARKER};

/// What to run.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Plugin name or path (as for `NCCL_NET_PLUGIN`).
    pub plugin: String,
    /// API versions requested (those not exported are reported as skipped).
    pub versions: Vec<u32>,
    /// `--filter`.
    pub filter: Option<Filter>,
    /// `--device`.
    pub device: Option<usize>,
    /// `--full`.
    pub full: bool,
    /// The executable that understands `--worker`/`--probe`/`--peer` (the CLI binary).
    pub exe: PathBuf,
    /// Show progress on stderr (only when it is a terminal).
    pub progress: bool,
}

/// One check's result on one API version.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// Check id.
    pub id: String,
    /// API version.
    pub version: u32,
    /// Required or advisory.
    pub level: Level,
    /// Quick or full tier.
    pub tier: Tier,
    /// Reference section.
    pub section: String,
    /// The rule.
    pub rule: String,
    /// The NCCL source the check relies on.
    pub nccl: String,
    /// What happened.
    #[serde(flatten)]
    pub outcome: CheckOutcome,
    /// Wall time of the worker, milliseconds.
    pub duration_ms: u64,
    /// The command line that runs just this check.
    pub reproduce: String,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Plugin as named.
    pub plugin: String,
    /// File it resolved to (when it could be opened).
    pub path: Option<String>,
    /// `ncclNetPlugin_vN` versions exported.
    pub exported: Vec<u32>,
    /// `ncclCollNetPlugin_vN` versions exported.
    pub collnet_exported: Vec<u32>,
    /// Versions requested.
    pub requested: Vec<u32>,
    /// `quick` or `full`.
    pub tier: &'static str,
    /// Every result, by version then check order.
    pub results: Vec<CheckResult>,
    /// Wall time of the run, seconds.
    pub duration_s: f64,
}

impl Report {
    /// Required checks that failed.
    pub fn required_failures(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.outcome.status == Status::Fail && r.level == Level::Required)
            .count()
    }

    /// Counts (pass, fail, skip); failures of both levels, not-run checks not counted.
    pub fn counts(&self) -> (usize, usize, usize) {
        let c = |s| self.results.iter().filter(|r| r.outcome.status == s).count();
        (c(Status::Pass), c(Status::Fail), c(Status::Skip))
    }

    /// The verdict counts the summary line prints.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for r in &self.results {
            match (r.outcome.status, r.level) {
                (Status::Pass, _) => s.passed += 1,
                (Status::Fail, Level::Required) => s.defects += 1,
                (Status::Fail, Level::Advisory) => s.advisory += 1,
                (Status::Skip, _) => s.skipped += 1,
                (Status::NotRun, _) => s.not_run += 1,
            }
        }
        s
    }

    /// Process exit status: 0 only if every required check passed (or was skipped).
    pub fn exit_code(&self) -> i32 {
        if self.required_failures() == 0 { 0 } else { 1 }
    }

    /// The result of `id` on `version`, if it ran.
    pub fn get(&self, id: &str, version: u32) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.id == id && r.version == version)
    }
}

/// What a run found, by kind of verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Checks that passed.
    pub passed: usize,
    /// Plugin defects: required checks that failed (each makes the run fail).
    pub defects: usize,
    /// Advisory findings: advisory checks that failed (never fatal).
    pub advisory: usize,
    /// Checks that do not apply to this plugin, version or machine.
    pub skipped: usize,
    /// Checks not run because the plugin did not load for that version (see the
    /// one failed `load.init`).
    pub not_run: usize,
}

/// Output of one worker process.
pub(crate) struct WorkerRun {
    pub(crate) outcome: Option<CheckOutcome>,
    status: Option<ExitStatus>,
    timed_out: bool,
    stderr: String,
    pub(crate) elapsed: Duration,
}

pub(crate) fn spawn_worker(exe: &PathBuf, args: &[String], deadline: Duration) -> WorkerRun {
    let start = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // Workers log nothing unless asked; keep their environment otherwise.
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return WorkerRun {
                outcome: None,
                status: None,
                timed_out: false,
                stderr: format!("cannot start {}: {e}", exe.display()),
                elapsed: start.elapsed(),
            };
        }
    };
    let pid = child.id() as i32;
    let out = Arc::new(Mutex::new(Vec::new()));
    let err = Arc::new(Mutex::new(Vec::new()));
    let readers: Vec<_> = [
        (
            child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
            out.clone(),
        ),
        (
            child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
            err.clone(),
        ),
    ]
    .into_iter()
    .filter_map(|(s, buf)| {
        let mut s = s?;
        Some(std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                // Keep the output bounded (a chatty plugin must not eat memory).
                if b.len() < 4 << 20 {
                    b.extend_from_slice(&chunk[..n]);
                }
            }
        }))
    })
    .collect();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(_) => break None,
        }
        if start.elapsed() > deadline {
            timed_out = true;
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Kill what is left of the worker's process group (itself if it timed out, its peers).
    // SAFETY: signalling the process group this function created (pgid = the worker's pid).
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let status = status.or_else(|| child.wait().ok());
    for r in readers {
        let _ = r.join();
    }
    let stdout = String::from_utf8_lossy(&out.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    let stderr = String::from_utf8_lossy(&err.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    let outcome = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(RESULT_MARKER))
        .next_back()
        .and_then(|j| serde_json::from_str::<CheckOutcome>(j).ok());
    WorkerRun {
        outcome,
        status,
        timed_out,
        stderr,
        elapsed: start.elapsed(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    signal_hook::low_level::signal_name(sig).unwrap_or("a signal")
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Turns a worker run without a result line into a failure.
pub(crate) fn worker_failure(run: &WorkerRun, deadline: Duration) -> CheckOutcome {
    use std::os::unix::process::ExitStatusExt;
    let during = run
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(CRASH_MARKER))
        .next_back()
        .map(|s| s.trim().to_owned());
    let observed = if run.timed_out {
        format!(
            "the worker running this check did not finish within {} s and was killed (a plugin call or a loop of calls never made progress)",
            deadline.as_secs()
        )
    } else if let Some(sig) = run.status.and_then(|s| s.signal()) {
        format!(
            "the worker crashed with {} ({sig}){}",
            signal_name(sig),
            during.map(|d| format!(" — {d}")).unwrap_or_default()
        )
    } else {
        format!(
            "the worker exited ({}) without a result",
            run.status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown status".into())
        )
    };
    let mut out = CheckOutcome::fail(
        "plugin calls return, without crashing the process (every call runs under a watchdog)",
        observed,
    );
    let t = tail(&run.stderr, 8);
    if !t.is_empty() {
        out.notes.push(format!("worker stderr (last lines):\n{t}"));
    }
    out
}

/// Shell-quotes `s` if needed.
pub(crate) fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The command line that runs only `check` on `version`.
pub fn reproduce(cfg: &SuiteConfig, check: &Check, version: u32) -> String {
    let mut s = format!(
        "ferroccl-conformance {} --api v{version} --filter {}",
        quote(&cfg.plugin),
        quote(&check.id)
    );
    if let Some(d) = cfg.device {
        s.push_str(&format!(" --device {d}"));
    }
    if check.tier == Tier::Full {
        s.push_str(" --full");
    }
    s
}

/// Probes the library in a worker (its constructors run there, not here).
pub fn probe(cfg: &SuiteConfig) -> Result<Probe, String> {
    crate::section::probe_in_worker(&cfg.exe, &["--probe".into(), cfg.plugin.clone()])
}

/// The check every loaded check depends on (see [`run`]).
pub const GATE_CHECK: &str = "load.init";

/// Runs `check` on `version` in its own worker process.
fn run_one(cfg: &SuiteConfig, check: &Check, version: u32) -> CheckResult {
    let mut args = vec![
        "--worker".to_owned(),
        check.id.clone(),
        "--api".into(),
        format!("v{version}"),
    ];
    if let Some(d) = cfg.device {
        args.extend(["--device".into(), d.to_string()]);
    }
    if cfg.full {
        args.push("--full".into());
    }
    args.push(cfg.plugin.clone());
    let run = spawn_worker(&cfg.exe, &args, check.timeout);
    let outcome = run
        .outcome
        .clone()
        .unwrap_or_else(|| worker_failure(&run, check.timeout));
    CheckResult {
        id: check.id.clone(),
        version,
        level: check.level,
        tier: check.tier,
        section: check.section.into(),
        rule: check.rule.clone(),
        nccl: check.nccl.into(),
        outcome,
        duration_ms: run.elapsed.as_millis() as u64,
        reproduce: reproduce(cfg, check, version),
    }
}

/// Runs the suite.
pub fn run(cfg: &SuiteConfig) -> Report {
    let start = Instant::now();
    let mut report = Report {
        plugin: cfg.plugin.clone(),
        path: None,
        exported: Vec::new(),
        collnet_exported: Vec::new(),
        requested: cfg.versions.clone(),
        tier: if cfg.full { "full" } else { "quick" },
        results: Vec::new(),
        duration_s: 0.0,
    };
    let checks: Vec<Check> = all_checks()
        .into_iter()
        .filter(|c| cfg.filter.as_ref().is_none_or(|f| f.matches(&c.id)))
        .filter(|c| cfg.full || c.tier == Tier::Quick)
        .collect();
    let probe = match probe(cfg) {
        Ok(p) => p,
        Err(e) => {
            report.results.push(CheckResult {
                id: "load.open".into(),
                version: 0,
                level: Level::Required,
                tier: Tier::Quick,
                section: "§5.1".into(),
                rule: "the library opens with dlopen(RTLD_NOW | RTLD_LOCAL) and exports ncclNetPlugin_vN".into(),
                nccl: "src/plugin/plugin_open.cc openPluginLib: dlopen(name, RTLD_NOW | RTLD_LOCAL)".into(),
                outcome: CheckOutcome::fail("the plugin library can be opened", e),
                duration_ms: start.elapsed().as_millis() as u64,
                reproduce: format!("ferroccl-conformance {} --filter load", quote(&cfg.plugin)),
            });
            report.duration_s = start.elapsed().as_secs_f64();
            return report;
        }
    };
    report.path = Some(probe.path.clone());
    report.exported = probe.versions.iter().map(|v| v.version).collect();
    report.exported.sort();
    report.collnet_exported = probe.collnet_versions.clone();
    let versions: Vec<u32> = cfg
        .versions
        .iter()
        .copied()
        .filter(|v| report.exported.contains(v))
        .collect();
    if versions.is_empty() {
        report.results.push(CheckResult {
            id: "load.symbols".into(),
            version: 0,
            level: Level::Required,
            tier: Tier::Quick,
            section: "§5.2".into(),
            rule: "the library exports ncclNetPlugin_vN for a requested version".into(),
            nccl: "src/plugin/net.cc: dlsym ncclNetPlugin_v12 ... _v6".into(),
            outcome: CheckOutcome::fail(
                format!(
                    "one of ncclNetPlugin_v{{{}}} is exported",
                    cfg.versions.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                ),
                format!("{} exports {:?}", probe.path, report.exported),
            ),
            duration_ms: 0,
            reproduce: format!("ferroccl-conformance {} --filter load.symbols", quote(&cfg.plugin)),
        });
    }
    let total: usize = versions
        .iter()
        .map(|&v| checks.iter().filter(|c| c.applies_to(v)).count())
        .sum();
    let bar = progress_bar(cfg.progress, total);
    let mut done = 0usize;
    let gate = all_checks().into_iter().find(|c| c.id == GATE_CHECK);
    for &v in &versions {
        let selected: Vec<&Check> = checks.iter().filter(|c| c.applies_to(v)).collect();
        // Gate: every check that drives the loaded plugin needs the plugin to load,
        // init and report devices for this version (reference §5.2 step 3: NCCL
        // disables such a plugin). `load.init` runs first, whatever the filter;
        // when it fails it is the one verdict, and the dependent checks are
        // reported as not run instead of failing one by one.
        let needs_gate = selected.iter().any(|c| matches!(c.body, Body::Loaded(..)));
        let mut gate_failure: Option<String> = None;
        if let Some(gate) = gate.as_ref().filter(|_| needs_gate) {
            let result = run_one(cfg, gate, v);
            let selected_gate = selected.iter().any(|c| c.id == GATE_CHECK);
            if result.outcome.status == Status::Fail {
                gate_failure = Some(result.outcome.message.clone());
            }
            if selected_gate || gate_failure.is_some() {
                report.results.push(result);
            }
        }
        for check in selected {
            done += 1;
            if check.id == GATE_CHECK {
                continue;
            }
            bar.set_message(format!("v{v} {}", check.id));
            bar.set_position(done as u64);
            if let (Some(why), Body::Loaded(..)) = (&gate_failure, check.body) {
                report.results.push(CheckResult {
                    id: check.id.clone(),
                    version: v,
                    level: check.level,
                    tier: check.tier,
                    section: check.section.into(),
                    rule: check.rule.clone(),
                    nccl: check.nccl.into(),
                    outcome: CheckOutcome::not_run(format!(
                        "not run: the plugin did not load for v{v} ({GATE_CHECK} failed: {why})"
                    )),
                    duration_ms: 0,
                    reproduce: reproduce(cfg, check, v),
                });
                continue;
            }
            report.results.push(run_one(cfg, check, v));
        }
    }
    bar.finish_and_clear();
    report.duration_s = start.elapsed().as_secs_f64();
    report
}

/// The progress line on stderr, `[done/total] vN check.id`, redrawn in place and
/// cleared at the end; hidden unless `wanted` and stderr is a terminal.
pub(crate) fn progress_bar(wanted: bool, total: usize) -> indicatif::ProgressBar {
    if !(wanted && std::io::stderr().is_terminal()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(Some(total as u64), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(indicatif::ProgressStyle::with_template("[{pos}/{len}] {msg}").expect("a valid template"));
    bar
}

/// Parses `--api`: `all`, `v9`, `9`, `v6..v12`, `v6-v8`, or a comma list of those.
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    crate::section::parse_versions(spec, 6..=12, 9, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), (6..=12).collect::<Vec<_>>());
        assert_eq!(parse_api("v6..v8").unwrap(), vec![6, 7, 8]);
        assert_eq!(parse_api("9,v11").unwrap(), vec![9, 11]);
        assert!(parse_api("v5").is_err());
        assert!(parse_api("v9..v7").is_err());
    }
}
