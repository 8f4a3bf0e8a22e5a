//! The profiler section of the suite: any `ncclProfiler_v1` … `_v6` plugin
//! (`ferroccl-conformance --profiler PLUGIN`), driven as NCCL 2.30.7 drives it
//! (`shared/reference/nccl-graph-tuning.md` §6, `nccl-plugin-abi.md` §3.2 and
//! §5.4), through the runtime's own adapter (`ferroccl::profiler::Profiler`:
//! each version's init arguments, descriptor layouts and state arguments).
//!
//! * [`checks`] — every profiler check: id (`profiler.*`), rule, reference
//!   section, level, API versions, body; and the event trees fed to the plugin.
//! * [`shim`] — the vtable the adapter is given: forwards to the plugin's
//!   functions under the watchdog and records every result other than
//!   `ncclSuccess` (NCCL and the adapter ignore them).
//! * [`worker`] — one check on one version in its own process, every plugin
//!   call under a per-thread watchdog and a crash reporter naming the call and
//!   the event type.
//! * [`runner`] — probes which `ncclProfiler_vN` the library exports, runs each
//!   check per version in a worker, and returns the suite's usual
//!   [`crate::runner::Report`] (so `--format text|json|junit` work unchanged).

pub mod checks;
pub mod runner;
pub mod shim;
pub mod worker;

/// Parses `--api` for profilers: `all`, `v4`, `v1..v6`, or a comma list (1 ..= 6).
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    let num = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .trim()
            .trim_start_matches(['v', 'V'])
            .parse()
            .map_err(|_| format!("--api: {s:?} is not a version like v4"))?;
        if (1..=6).contains(&n) {
            Ok(n)
        } else {
            Err(format!("--api: profiler API v{n} is outside v1..v6"))
        }
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            out.extend(1..=6);
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

/// Renames the net-specific words of a rendered report for a profiler run
/// (`exports ncclNet` → `exports ncclProfiler`, JUnit suites `ncclNet_vN` →
/// `ncclProfiler_vN`).
pub fn retitle(rendered: &str) -> String {
    rendered
        .replacen("exports ncclNet ", "exports ncclProfiler ", 1)
        .replace("name=\"ncclNet_v", "name=\"ncclProfiler_v")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(parse_api("v2..v4").unwrap(), vec![2, 3, 4]);
        assert!(parse_api("v7").is_err());
        assert!(parse_api("v0").is_err());
    }

    #[test]
    fn check_ids_are_unique_and_sections_cited() {
        let c = checks::all();
        let mut ids: Vec<_> = c.iter().map(|c| c.id).collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
        for x in &c {
            assert!(x.id.starts_with("profiler."), "{}", x.id);
            assert!(x.section.starts_with('§'), "{}", x.id);
            assert!(!x.rule.contains('\n'), "{}", x.id);
        }
    }
}
