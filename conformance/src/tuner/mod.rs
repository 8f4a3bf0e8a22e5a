//! The tuner section of the suite: any `ncclTuner_v2` … `_v6` plugin
//! (`ferroccl-conformance --tuner PLUGIN`), checked against the contract of
//! `shared/reference/nccl-plugin-abi.md` §3.1 and §5.3 and of
//! `nccl-graph-tuning.md` §3.5, through the runtime's own adapter
//! (`ferroccl::plugin::tuner::TunerAdapter`).
//!
//! * [`checks`] — every tuner check: id (`tuner.*`), rule, reference section,
//!   level, API versions, body.
//! * [`worker`] — one check on one version in its own process, every plugin call
//!   under a watchdog and a crash reporter naming the call.
//! * [`runner`] — probes which `ncclTunerPlugin_vN` the library exports, runs
//!   each check per version in a worker, and returns the suite's usual
//!   [`crate::runner::Report`] (so `--format text|json|junit` work unchanged).
//!
//! The cost tables handed to the plugin are NCCL 2.30.7's own, computed by
//! ferroccl's model for several machines (one 8-GPU Hopper node on NVLink, four
//! such nodes over the network, one GPU per node, and a CPU host), for every
//! function and sizes from 8 B to 1 GiB.

pub mod checks;
pub mod runner;
pub mod worker;

/// Parses `--api` for tuners: `all`, `v4`, `v2..v6`, or a comma list (2 ..= 6).
pub fn parse_api(spec: &str) -> Result<Vec<u32>, String> {
    let num = |s: &str| -> Result<u32, String> {
        let n: u32 = s
            .trim()
            .trim_start_matches(['v', 'V'])
            .parse()
            .map_err(|_| format!("--api: {s:?} is not a version like v4"))?;
        if (2..=6).contains(&n) {
            Ok(n)
        } else {
            Err(format!("--api: tuner API v{n} is outside v2..v6"))
        }
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            out.extend(2..=6);
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

/// Renames the net-specific words of a rendered report for a tuner run
/// (`exports ncclNet` → `exports ncclTuner`, JUnit suites `ncclNet_vN` →
/// `ncclTuner_vN`).
pub fn retitle(rendered: &str) -> String {
    rendered
        .replacen("exports ncclNet ", "exports ncclTuner ", 1)
        .replace("name=\"ncclNet_v", "name=\"ncclTuner_v")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_specs() {
        assert_eq!(parse_api("all").unwrap(), vec![2, 3, 4, 5, 6]);
        assert_eq!(parse_api("v2..v4").unwrap(), vec![2, 3, 4]);
        assert!(parse_api("v7").is_err());
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
            assert!(x.id.starts_with("tuner."), "{}", x.id);
            assert!(x.section.starts_with('§'), "{}", x.id);
            assert!(!x.rule.contains('\n'), "{}", x.id);
        }
    }
}
