//! The check registry: every check's id, one-line rule, reference section,
//! level (required / advisory), tier (quick / full) and the API versions it applies to.

use std::time::Duration;

use serde::Serialize;

use crate::cx::Cx;
use crate::outcome::Res;

/// Whether a failure makes the run fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Part of the contract: a failure makes `ferroccl-conformance` exit non-zero.
    Required,
    /// Good practice or a measurement: reported, never fatal.
    Advisory,
}

/// Which runs include a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Every run (`--quick`, the default, and `--full`).
    Quick,
    /// Only `--full` runs.
    Full,
}

/// How a check runs.
#[derive(Clone, Copy)]
pub enum Body {
    /// Without loading through the host: inspects the library's symbols directly
    /// (the `crate::loader::Probe`), so it still works when the host refuses the plugin.
    Probe(fn(&crate::loader::Probe, u32) -> Res),
    /// In a worker with the plugin loaded for the version under test.
    Loaded(fn(&mut Cx, u64) -> Res, u64),
}

/// One check of the suite.
#[derive(Clone)]
pub struct Check {
    /// Stable id, dotted, e.g. `transfer.size.4096`.
    pub id: String,
    /// The rule the check enforces, one line.
    pub rule: String,
    /// Where the rule comes from: a section of `docs/reference/nccl-plugin-abi.md`
    /// (e.g. `§1.5`) or `checklist` (`docs/reference/net-plugin-conformance-checklist.md`).
    pub section: &'static str,
    /// The NCCL 2.30.7 source (file, function, statement) whose use of the net
    /// API the check relies on; for advisory checks of behaviour NCCL never
    /// exercises, what NCCL does instead.
    pub nccl: &'static str,
    /// Required or advisory.
    pub level: Level,
    /// Quick or full tier.
    pub tier: Tier,
    /// Oldest API version the check applies to.
    pub min_version: u32,
    /// Newest API version the check applies to.
    pub max_version: u32,
    /// Deadline for the whole worker process running this check.
    pub timeout: Duration,
    /// What runs.
    pub body: Body,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("id", &self.id)
            .field("level", &self.level)
            .field("tier", &self.tier)
            .finish()
    }
}

impl Check {
    /// Whether the check applies to API version `v`.
    pub fn applies_to(&self, v: u32) -> bool {
        (self.min_version..=self.max_version).contains(&v)
    }

    /// Versions as text: `v6..v12`, `v9..v12`.
    pub fn versions(&self) -> String {
        if self.min_version == self.max_version {
            format!("v{}", self.min_version)
        } else {
            format!("v{}..v{}", self.min_version, self.max_version)
        }
    }
}

/// Builder used by the check modules.
#[derive(Debug)]
pub struct Registry {
    /// Checks in registration (= run) order.
    pub checks: Vec<Check>,
}

impl Registry {
    /// Adds a loaded check (required, quick, every version, 60 s deadline); returns it for tweaks.
    pub fn add(
        &mut self,
        id: impl Into<String>,
        section: &'static str,
        rule: impl Into<String>,
        f: fn(&mut Cx, u64) -> Res,
    ) -> &mut Check {
        self.add_arg(id, section, rule, f, 0)
    }

    /// Like [`Registry::add`] with a parameter passed to the body.
    pub fn add_arg(
        &mut self,
        id: impl Into<String>,
        section: &'static str,
        rule: impl Into<String>,
        f: fn(&mut Cx, u64) -> Res,
        arg: u64,
    ) -> &mut Check {
        self.push(id.into(), section, rule.into(), Body::Loaded(f, arg))
    }

    /// Adds a probe check.
    pub fn add_probe(
        &mut self,
        id: impl Into<String>,
        section: &'static str,
        rule: impl Into<String>,
        f: fn(&crate::loader::Probe, u32) -> Res,
    ) -> &mut Check {
        self.push(id.into(), section, rule.into(), Body::Probe(f))
    }

    fn push(&mut self, id: String, section: &'static str, rule: String, body: Body) -> &mut Check {
        self.checks.push(Check {
            id,
            rule,
            section,
            nccl: "",
            level: Level::Required,
            tier: Tier::Quick,
            min_version: 6,
            max_version: 12,
            timeout: Duration::from_secs(60),
            body,
        });
        self.checks.last_mut().expect("just pushed")
    }
}

impl Check {
    /// Makes the check advisory.
    pub fn advisory(&mut self) -> &mut Self {
        self.level = Level::Advisory;
        self
    }

    /// Puts the check in the full tier.
    pub fn full(&mut self) -> &mut Self {
        self.tier = Tier::Full;
        self
    }

    /// Restricts the check to versions `min..=12`.
    pub fn since(&mut self, min: u32) -> &mut Self {
        self.min_version = min;
        self
    }

    /// Names the NCCL source the check relies on (see [`Check::nccl`]).
    pub fn nccl(&mut self, source: &'static str) -> &mut Self {
        self.nccl = source;
        self
    }

    /// Sets the worker deadline.
    pub fn timeout(&mut self, secs: u64) -> &mut Self {
        self.timeout = Duration::from_secs(secs);
        self
    }
}

/// Every check, in run order.
pub fn all_checks() -> Vec<Check> {
    let mut r = Registry { checks: Vec::new() };
    crate::checks::register(&mut r);
    r.checks
}

/// A `--filter` pattern: comma-separated globs (`*`, `?`, `[...]`) matched against
/// check ids; a pattern without glob characters also matches every id under it
/// (`transfer` selects `transfer.*`).
#[derive(Debug, Clone)]
pub struct Filter {
    set: globset::GlobSet,
}

impl Filter {
    /// Parses `spec`; an error names the bad pattern.
    pub fn new(spec: &str) -> Result<Self, String> {
        let mut b = globset::GlobSetBuilder::new();
        for pat in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let g = globset::GlobBuilder::new(pat)
                .literal_separator(false)
                .build()
                .map_err(|e| format!("--filter {pat:?}: {e}"))?;
            b.add(g);
            if !pat.contains(['*', '?', '[']) {
                let sub = format!("{pat}.*");
                b.add(globset::Glob::new(&sub).map_err(|e| format!("--filter {pat:?}: {e}"))?);
            }
        }
        Ok(Filter {
            set: b.build().map_err(|e| format!("--filter: {e}"))?,
        })
    }

    /// Whether `id` is selected.
    pub fn matches(&self, id: &str) -> bool {
        self.set.is_match(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_globs_and_prefixes() {
        let f = Filter::new("transfer.size.*,load").unwrap();
        assert!(f.matches("transfer.size.4096"));
        assert!(f.matches("load.name"));
        assert!(!f.matches("loading"));
        assert!(!f.matches("transfer.order"));
        let f = Filter::new("transfer.size.4096").unwrap();
        assert!(f.matches("transfer.size.4096"));
        assert!(!f.matches("transfer.size.40960"));
    }

    #[test]
    fn ids_are_unique_and_rules_one_line() {
        let checks = all_checks();
        let mut ids: Vec<_> = checks.iter().map(|c| c.id.clone()).collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate check ids");
        for c in &checks {
            assert!(!c.rule.contains('\n'), "{}", c.id);
            assert!(
                c.id == "perf.sweep" || c.nccl.starts_with("src/") || c.nccl.starts_with("NCCL never"),
                "{} names no NCCL source: {:?}",
                c.id,
                c.nccl
            );
            assert!(c.section.starts_with('§') || c.section == "checklist", "{}", c.id);
        }
    }
}
