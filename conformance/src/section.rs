//! What the plugin sections of the suite (`--tuner`, `--profiler`) share: the
//! `--api` grammar, the check record, the parent side (probe the exported
//! versions in a worker, run every selected check on every selected version in
//! its own worker process under a deadline, collect the verdicts into the
//! suite's usual [`Report`]), `--list`, the report's retitling, and the
//! worker-side pieces that do not depend on the plugin type (opening the
//! library, the symbol probe, the fatal-signal handlers).
//!
//! A section describes itself once with a [`Section`] value
//! (`tuner::SECTION`, `profiler::SECTION`); what genuinely differs per section
//! (the check bodies and their context, the watchdog, how a check is set up
//! and judged) stays in the section's own modules.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferroccl::plugin::library::{PluginLibrary, open_plugin_lib, search_dirs};
use ferroccl::plugin::symbols::{PluginType, exported_symbols};
use serde::{Deserialize, Serialize};

use crate::outcome::{CheckOutcome, Res, Status};
use crate::registry::{Filter, Level, Tier};
use crate::runner::{CheckResult, Report, quote, spawn_worker, worker_failure};
use crate::watch::emit_result;

/// The rule of the `NAME.open` load-stage result.
const OPEN_RULE: &str = "the library opens with dlopen(RTLD_NOW | RTLD_LOCAL)";
/// Parses an `--api` spec: `all`, `v4`, `4`, `v2..v4`, `v2-v4`, or a comma list
/// of those, each version within `range`. `example` is the version named in
/// the "not a version like vN" message; `kind` prefixes the out-of-range
/// message (`"tuner API "`, or `""`).
///
/// Returns the versions ascending without repeats, or the message naming what
/// was wrong.
pub fn parse_versions(spec: &str, range: RangeInclusive<u32>, example: u32, kind: &str) -> Result<Vec<u32>, String> {
    let (lo, hi) = (*range.start(), *range.end());
    let num = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .trim()
            .trim_start_matches(['v', 'V'])
            .parse()
            .map_err(|_| format!("--api: {s:?} is not a version like v{example}"))?;
        if range.contains(&n) {
            Ok(n)
        } else {
            Err(format!("--api: {kind}v{n} is outside v{lo}..v{hi}"))
        }
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            out.extend(lo..=hi);
        } else if let Some((a, b)) = part.split_once("..").or_else(|| part.split_once('-')) {
            let (a, b) = (num(a)?, num(b.trim_start_matches('='))?);
            if a > b {
                return Err(format!("--api: empty range {part:?}"));
            }
            out.extend(a..=b);
        } else {
            out.push(num(part)?);
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err("--api: no version given".into());
    }
    Ok(out)
}

/// One check of a plugin section, whose body works with the section's context `Cx`.
pub struct SectionCheck<Cx> {
    /// Stable id (`tuner.*`, `profiler.*`).
    pub id: &'static str,
    /// Reference section it comes from (`§…` of the plugin ABI / graph-tuning notes).
    pub section: &'static str,
    /// The rule, one line.
    pub rule: &'static str,
    /// Required or advisory.
    pub level: Level,
    /// Oldest version.
    pub min_version: u32,
    /// Newest version.
    pub max_version: u32,
    /// The body.
    pub body: fn(&mut Cx) -> Res,
}

impl<Cx> SectionCheck<Cx> {
    /// Whether the check applies to `v`.
    pub fn applies_to(&self, v: u32) -> bool {
        (self.min_version..=self.max_version).contains(&v)
    }
}

impl<Cx> Clone for SectionCheck<Cx> {
    fn clone(&self) -> Self {
        Self { ..*self }
    }
}

impl<Cx> std::fmt::Debug for SectionCheck<Cx> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SectionCheck")
            .field("id", &self.id)
            .field("section", &self.section)
            .field("rule", &self.rule)
            .field("level", &self.level)
            .field("min_version", &self.min_version)
            .field("max_version", &self.max_version)
            .finish_non_exhaustive()
    }
}

/// What a section library exports, found without calling any plugin function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionProbe {
    /// The file opened.
    pub path: String,
    /// Versions exported that NCCL 2.30.7 looks for, ascending.
    pub versions: Vec<u32>,
    /// Symbols of the section's type with versions NCCL does not know (`None`,
    /// and left out of the record, where the section does not look for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Vec<String>>,
}

/// A plugin section of the suite, described once.
pub struct Section<Cx: 'static> {
    /// The CLI flag without dashes, the id prefix and the word in messages (`tuner`).
    pub name: &'static str,
    /// The plugin's struct family, which replaces `ncclNet` in a rendered report (`ncclTuner`).
    pub family: &'static str,
    /// The exported symbol, less its version (`ncclTunerPlugin_v`).
    pub symbol: &'static str,
    /// The versions NCCL 2.30.7 looks for.
    pub versions: RangeInclusive<u32>,
    /// The file-name prefix a short plugin name resolves with (`libnccl-tuner`).
    pub lib_prefix: &'static str,
    /// The plugin type in the symbol table.
    pub ty: PluginType,
    /// A short name the CLI's error message suggests (`rules`).
    pub example_name: &'static str,
    /// The reference section of loading (`§5.3`).
    pub load_section: &'static str,
    /// The rule of the `NAME.symbols` failure.
    pub symbols_rule: &'static str,
    /// Where `--list` is named in messages (`--list`, `--profiler --list`).
    pub list_hint: &'static str,
    /// Every check of the section, in run order.
    pub checks: fn() -> Vec<SectionCheck<Cx>>,
    /// The NCCL 2.30.7 source whose use of the API a check of a reference section relies on.
    pub nccl_source: fn(&str) -> &'static str,
    /// Symbol versions beyond [`Section::versions`] the probe reports as unknown (none: `None`).
    pub unknown_versions: Option<RangeInclusive<u32>>,
    /// Body of `--NAME --worker ID` (`id`, `plugin`, `version`; the exit status).
    pub worker_main: fn(&str, &str, u32) -> i32,
    /// A library that exports no symbol of the section at all is a skip (`NAME.symbols`
    /// skipped with the reason), not a failure: CollNet tables are optional beside a
    /// net plugin.
    pub absent_is_skip: bool,
}

impl<Cx> Section<Cx> {
    /// Parses `--api` for this section (`all`, `v4`, `v2..v6`, or a comma list).
    pub fn parse_api(&self, spec: &str) -> Result<Vec<u32>, String> {
        let kind = format!("{} API ", self.name);
        parse_versions(spec, self.versions.clone(), 4, &kind)
    }

    /// Renames the net-specific words of a rendered report for this section
    /// (`exports ncclNet` → `exports ncclTuner`, JUnit suites `ncclNet_vN` →
    /// `ncclTuner_vN`).
    pub fn retitle(&self, rendered: &str) -> String {
        rendered
            .replacen("exports ncclNet ", &format!("exports {} ", self.family), 1)
            .replace("name=\"ncclNet_v", &format!("name=\"{}_v", self.family))
    }

    /// `--list`: every check with its level, versions, section and rule.
    pub fn list(&self) -> String {
        let checks = (self.checks)();
        let w = checks.iter().map(|c| c.id.len()).max().unwrap_or(10);
        let mut s = String::new();
        // The two load-stage results `run` reports before any check runs.
        let all = format!("v{}..v{}", self.versions.start(), self.versions.end());
        for (id, rule) in [
            (format!("{}.open", self.name), OPEN_RULE),
            (format!("{}.symbols", self.name), self.symbols_rule),
        ] {
            s.push_str(&format!(
                "{id:w$}  required  {all:9}  {:5}  {rule}\n",
                self.load_section
            ));
        }
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

    /// Panics unless every check id is unique and starts with `NAME.`, every
    /// reference section starts with `§`, and every rule is one line.
    #[cfg(test)]
    pub(crate) fn assert_registry_well_formed(&self) {
        let c = (self.checks)();
        let mut ids: Vec<_> = c.iter().map(|c| c.id).collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
        let prefix = format!("{}.", self.name);
        for x in &c {
            assert!(x.id.starts_with(&prefix), "{}", x.id);
            assert!(x.section.starts_with('§'), "{}", x.id);
            assert!(!x.rule.contains('\n'), "{}", x.id);
        }
    }

    /// The check named `id`, or the failure a worker reports for an unknown id.
    pub fn find(&self, id: &str) -> Result<SectionCheck<Cx>, Box<CheckOutcome>> {
        (self.checks)().into_iter().find(|c| c.id == id).ok_or_else(|| {
            Box::new(CheckOutcome::fail(
                format!("a known {} check id", self.name),
                format!("no {} check named {id:?} (see {})", self.name, self.list_hint),
            ))
        })
    }

    /// Opens `plugin` (a path, or a name resolved like `NCCL_<NAME>_PLUGIN`).
    pub fn open(&self, plugin: &str) -> Result<PluginLibrary, String> {
        let dirs = search_dirs(&ferroccl::plugin::LoadOptions::default());
        let out = open_plugin_lib(plugin, self.lib_prefix, &dirs);
        let tried: Vec<String> = out
            .attempts
            .iter()
            .map(|a| format!("{} ({:?})", a.file, a.result))
            .collect();
        out.lib
            .ok_or_else(|| format!("could not open {} '{plugin}': tried {}", self.name, tried.join("; ")))
    }

    /// Opens `plugin` and lists its symbols of this section's type.
    pub fn probe(&self, plugin: &str) -> Result<SectionProbe, String> {
        let lib = self.open(plugin)?;
        let mut versions: Vec<u32> = exported_symbols(&lib)
            .iter()
            .filter(|s| s.ty == self.ty)
            .map(|s| s.version)
            .collect();
        versions.sort();
        let unknown = self.unknown_versions.clone().map(|range| {
            range
                .filter_map(|v| {
                    let name = std::ffi::CString::new(format!("{}{v}", self.symbol)).ok()?;
                    lib.symbol(&name).map(|_| format!("{}{v}", self.symbol))
                })
                .collect()
        });
        Ok(SectionProbe {
            path: lib.opened_as().to_owned(),
            versions,
            unknown,
        })
    }

    /// Body of `--NAME --probe`.
    pub fn probe_main(&self, plugin: &str) -> i32 {
        die_with_parent();
        let out = match self.probe(plugin) {
            Ok(p) => CheckOutcome {
                metrics: serde_json::to_value(&p).ok(),
                ..CheckOutcome::pass()
            },
            Err(e) => CheckOutcome::fail(format!("the {} library opens", self.name), e),
        };
        emit_result(&out);
        0
    }
}

/// Has the kernel kill this worker when its parent dies.
pub fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only changes this process's own settings.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
}

/// Installs `handler` for SIGSEGV, SIGBUS, SIGABRT, SIGFPE and SIGILL.
/// `handler` must only do what is async-signal-safe (write the running call
/// with [`crate::watch::CRASH_MARKER`], restore the default action, re-raise;
/// reading a const-initialised thread-local is fine).
pub fn on_fatal_signals(handler: extern "C" fn(libc::c_int)) {
    for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, libc::SIGFPE, libc::SIGILL] {
        // SAFETY: installing a handler that, by this function's contract, only
        // calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Runs `body` on `cx` and turns its result into an outcome: `judge` gives the
/// verdict of a body that returned `Ok` (a pass, or what the section found on
/// the side), and the body's notes are kept.
pub fn judge_body<Cx>(body: fn(&mut Cx) -> Res, cx: &mut Cx, judge: impl FnOnce() -> CheckOutcome) -> CheckOutcome {
    match body(cx) {
        Ok(()) => judge(),
        Err(crate::outcome::Stop::Fail { expected, observed }) => CheckOutcome::fail(expected, observed),
        Err(crate::outcome::Stop::Skip(s)) => CheckOutcome::skip(s),
    }
}

/// What a section run runs.
#[derive(Debug, Clone)]
pub struct SectionConfig {
    /// Plugin name or path (as for `NCCL_TUNER_PLUGIN` / `NCCL_PROFILER_PLUGIN`).
    pub plugin: String,
    /// API versions requested (within the section's versions).
    pub versions: Vec<u32>,
    /// `--filter`.
    pub filter: Option<Filter>,
    /// The CLI binary (understands `--NAME --worker` / `--NAME --probe`).
    pub exe: PathBuf,
    /// Progress on a terminal.
    pub progress: bool,
}

/// Deadline of one worker (every plugin call has its own, shorter, watchdog
/// inside: 20 s for a tuner call, 10 s for a profiler call).
const DEADLINE: Duration = Duration::from_secs(120);
/// Deadline of the probe worker.
const PROBE_DEADLINE: Duration = Duration::from_secs(30);

/// Probes the library in a worker (`args` are the worker's arguments; its
/// constructors run there, not here) and reads the probe record `T` back.
pub(crate) fn probe_in_worker<T: serde::de::DeserializeOwned>(exe: &PathBuf, args: &[String]) -> Result<T, String> {
    let run = spawn_worker(exe, args, PROBE_DEADLINE);
    match &run.outcome {
        Some(o) if o.status == Status::Pass => o
            .metrics
            .clone()
            .and_then(|m| serde_json::from_value(m).ok())
            .ok_or_else(|| "probe returned no symbol list".to_owned()),
        Some(o) => Err(o.message.clone()),
        None => Err(worker_failure(&run, PROBE_DEADLINE).message),
    }
}

impl<Cx> Section<Cx> {
    fn reproduce(&self, cfg: &SectionConfig, id: &str, v: u32) -> String {
        format!(
            "ferroccl-conformance --{} {} --api v{v} --filter {}",
            self.name,
            quote(&cfg.plugin),
            quote(id)
        )
    }

    fn load_failure(&self, cfg: &SectionConfig, id: &str, rule: &str, outcome: CheckOutcome) -> CheckResult {
        CheckResult {
            id: id.into(),
            version: 0,
            level: Level::Required,
            tier: Tier::Quick,
            section: self.load_section.into(),
            nccl: (self.nccl_source)(self.load_section).into(),
            rule: rule.into(),
            outcome,
            duration_ms: 0,
            reproduce: format!(
                "ferroccl-conformance --{} {} --filter {}.load",
                self.name,
                quote(&cfg.plugin),
                self.name
            ),
        }
    }

    /// Runs the section: probes the exported versions in a worker, then each
    /// selected check on each selected version in its own worker under
    /// [`DEADLINE`] (a crash or a call that never returns fails that check
    /// only; the run goes on). The report's `exported` lists the section's
    /// exported versions; a library that cannot be opened, or exports none of
    /// the requested versions, gives a `NAME.open` / `NAME.symbols` failure.
    pub fn run(&self, cfg: &SectionConfig) -> Report {
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
        let probe_args = [format!("--{}", self.name), "--probe".into(), cfg.plugin.clone()];
        let p: SectionProbe = match probe_in_worker(&cfg.exe, &probe_args) {
            Ok(p) => p,
            Err(e) => {
                report.results.push(self.load_failure(
                    cfg,
                    &format!("{}.open", self.name),
                    OPEN_RULE,
                    CheckOutcome::fail(format!("the {} library can be opened", self.name), e),
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
        if versions.is_empty() && self.absent_is_skip && p.versions.is_empty() {
            report.results.push(self.load_failure(
                cfg,
                &format!("{}.symbols", self.name),
                self.symbols_rule,
                CheckOutcome::skip(format!(
                    "{} exports no {}N (v{}..v{}): nothing to check",
                    p.path,
                    self.symbol,
                    self.versions.start(),
                    self.versions.end()
                )),
            ));
        } else if versions.is_empty() {
            report.results.push(self.load_failure(
                cfg,
                &format!("{}.symbols", self.name),
                self.symbols_rule,
                CheckOutcome::fail(
                    format!("one of {}{:?} is exported", self.symbol, cfg.versions),
                    match p.unknown.as_deref() {
                        None | Some([]) => format!("{} exports {} versions {:?}", p.path, self.name, p.versions),
                        Some(unknown) => format!(
                            "{} exports {} versions {:?} and {}, which NCCL 2.30.7 does not look for",
                            p.path,
                            self.name,
                            p.versions,
                            unknown.join(", ")
                        ),
                    },
                ),
            ));
        }
        let checks: Vec<_> = (self.checks)()
            .into_iter()
            .filter(|c| cfg.filter.as_ref().is_none_or(|f| f.matches(c.id)))
            .collect();
        let jobs: Vec<(u32, &SectionCheck<Cx>)> = versions
            .iter()
            .flat_map(|&v| checks.iter().filter(move |c| c.applies_to(v)).map(move |c| (v, c)))
            .collect();
        let bar = crate::runner::progress_bar(cfg.progress, jobs.len());
        for (i, (v, c)) in jobs.iter().enumerate() {
            bar.set_message(format!("v{v} {}", c.id));
            bar.set_position(i as u64 + 1);
            let args = vec![
                format!("--{}", self.name),
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
                nccl: (self.nccl_source)(c.section).into(),
                rule: c.rule.into(),
                outcome,
                duration_ms: run.elapsed.as_millis() as u64,
                reproduce: self.reproduce(cfg, c.id, *v),
            });
        }
        bar.finish_and_clear();
        report.duration_s = start.elapsed().as_secs_f64();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_specs() {
        assert_eq!(parse_versions("all", 2..=6, 4, "x ").unwrap(), vec![2, 3, 4, 5, 6]);
        assert_eq!(parse_versions("v3-v4,2", 2..=6, 4, "x ").unwrap(), vec![2, 3, 4]);
        assert_eq!(
            parse_versions("v7", 2..=6, 4, "x API ").unwrap_err(),
            "--api: x API v7 is outside v2..v6"
        );
        assert_eq!(
            parse_versions("q", 2..=6, 9, "").unwrap_err(),
            "--api: \"q\" is not a version like v9"
        );
        assert!(parse_versions("v4..v3", 2..=6, 4, "").is_err());
        assert!(parse_versions(",", 2..=6, 4, "").is_err());
    }
}

/// What a section worker's call watch names and how long a call may take (one
/// watch per worker process, started by [`CallWatch::start`]).
#[derive(Debug)]
pub struct CallWatch {
    /// The plugin's entry points, index 0 unused ("no call running").
    pub calls: &'static [&'static str],
    /// Longest a call may take before the check fails.
    pub limit: Duration,
    /// The kind of plugin, in the crash line (`no <kind> call`) and the
    /// watchdog thread's name.
    pub kind: &'static str,
    /// Why a call must return, in the failure's expectation, e.g. "NCCL calls it
    /// at communicator init".
    pub why: &'static str,
}

static WATCH: std::sync::OnceLock<&'static CallWatch> = std::sync::OnceLock::new();
static CURRENT_CALL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static CALL_STARTED_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static WATCH_EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn watch_now_ms() -> u64 {
    WATCH_EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A running plugin call; the watch stops watching it when it drops.
#[derive(Debug)]
pub struct CallGuard(());

impl Drop for CallGuard {
    fn drop(&mut self) {
        CURRENT_CALL.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// Marks the plugin call `name` (one of the started watch's `calls`) as running.
pub fn enter_call(name: &str) -> CallGuard {
    use std::sync::atomic::Ordering;
    let i = WATCH
        .get()
        .and_then(|w| w.calls.iter().position(|c| *c == name))
        .unwrap_or(0);
    CALL_STARTED_MS.store(watch_now_ms(), Ordering::Release);
    CURRENT_CALL.store(i, Ordering::Release);
    CallGuard(())
}

extern "C" fn on_fatal_signal_in_call(sig: libc::c_int) {
    let i = CURRENT_CALL.load(std::sync::atomic::Ordering::Acquire);
    let mut line = Vec::with_capacity(64);
    line.extend_from_slice(b"\n");
    line.extend_from_slice(crate::watch::CRASH_MARKER.as_bytes());
    line.extend_from_slice(b"signal during ");
    match WATCH.get() {
        Some(w) if i != 0 => line.extend_from_slice(w.calls[i].as_bytes()),
        Some(w) => {
            line.extend_from_slice(b"no ");
            line.extend_from_slice(w.kind.as_bytes());
            line.extend_from_slice(b" call");
        }
        None => line.extend_from_slice(b"no call"),
    }
    line.extend_from_slice(b"\n");
    // SAFETY: write(2) on stderr from a valid buffer, then restoring the default
    // action and re-raising; all async-signal-safe.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

impl CallWatch {
    /// Starts watching this worker's plugin calls: a fatal signal prints the call
    /// that was running (with [`crate::watch::CRASH_MARKER`]), and a thread fails
    /// the check and ends the worker when a call runs past `limit`.
    pub fn start(&'static self) {
        use std::sync::atomic::Ordering;
        WATCH_EPOCH.get_or_init(Instant::now);
        let w: &'static CallWatch = WATCH.get_or_init(|| self);
        on_fatal_signals(on_fatal_signal_in_call);
        let _ = std::thread::Builder::new()
            .name(format!("{}-watchdog", w.kind))
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(20));
                    let cur = CURRENT_CALL.load(Ordering::Acquire);
                    if cur == 0 {
                        continue;
                    }
                    let elapsed =
                        Duration::from_millis(watch_now_ms().saturating_sub(CALL_STARTED_MS.load(Ordering::Acquire)));
                    if elapsed > w.limit && CURRENT_CALL.load(Ordering::Acquire) == cur {
                        let name = w.calls[cur];
                        let secs = w.limit.as_secs();
                        crate::watch::emit_result(&CheckOutcome::fail(
                            format!("{name} returns within {secs} s ({})", w.why),
                            format!("{name} did not return within {secs} s (the worker was stopped)"),
                        ));
                        // SAFETY: ending the worker while the main thread is stuck in the plugin.
                        unsafe { libc::_exit(0) };
                    }
                }
            });
    }
}
