//! Rendering a [`Report`]: text for people, JSON for tools, JUnit XML for CI.

use std::fmt::Write as _;

use quick_xml::Writer;
use quick_xml::events::{BytesCData, BytesDecl, BytesEnd, BytesStart, BytesText, Event};

use crate::outcome::Status;
use crate::registry::{Level, all_checks};
use crate::runner::Report;

/// Human-readable report: a check × version grid, then every failure with the
/// rule, what the contract says, what the plugin did and how to reproduce it,
/// then skip reasons, notes and the performance table.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "ferroccl-conformance: {} ({})",
        r.plugin,
        r.path.as_deref().unwrap_or("not opened")
    );
    let _ = writeln!(
        s,
        "exports ncclNet {}{}; tested {}; tier {}",
        if r.exported.is_empty() {
            "none".into()
        } else {
            r.exported.iter().map(|v| format!("v{v}")).collect::<Vec<_>>().join(" ")
        },
        if r.collnet_exported.is_empty() {
            String::new()
        } else {
            format!(", ncclCollNet {:?}", r.collnet_exported)
        },
        r.requested
            .iter()
            .filter(|v| r.exported.contains(v))
            .map(|v| format!("v{v}"))
            .collect::<Vec<_>>()
            .join(" "),
        r.tier
    );
    let versions: Vec<u32> = {
        let mut v: Vec<u32> = r.results.iter().map(|x| x.version).filter(|v| *v > 0).collect();
        v.sort();
        v.dedup();
        v
    };
    let mut ids: Vec<&str> = Vec::new();
    for x in &r.results {
        if !ids.contains(&x.id.as_str()) {
            ids.push(&x.id);
        }
    }
    if !versions.is_empty() {
        let w = ids.iter().map(|i| i.len()).max().unwrap_or(10).max(10);
        let _ = write!(s, "\n{:w$}  level   ", "check");
        for v in &versions {
            let _ = write!(s, " {:>4}", format!("v{v}"));
        }
        s.push('\n');
        for id in &ids {
            let level = r
                .results
                .iter()
                .find(|x| x.id == *id)
                .map(|x| x.level)
                .unwrap_or(Level::Required);
            let _ = write!(
                s,
                "{id:w$}  {:8}",
                if level == Level::Required {
                    "required"
                } else {
                    "advisory"
                }
            );
            for v in &versions {
                let cell = match r.get(id, *v).map(|x| x.outcome.status) {
                    Some(Status::Pass) => "pass",
                    Some(Status::Fail) => "FAIL",
                    Some(Status::Skip) => "skip",
                    Some(Status::NotRun) => "n/r",
                    None => "-",
                };
                let _ = write!(s, " {cell:>4}");
            }
            s.push('\n');
        }
    }
    // Plugin defects (required failures) first, then advisory findings.
    for (level, title) in [
        (Level::Required, "Plugin defects (required checks that failed)"),
        (Level::Advisory, "Advisory findings (never fatal)"),
    ] {
        let fails: Vec<_> = r
            .results
            .iter()
            .filter(|x| x.outcome.status == Status::Fail && x.level == level)
            .collect();
        if fails.is_empty() {
            continue;
        }
        let _ = writeln!(s, "\n{title}:");
        for f in fails {
            let lvl = if f.level == Level::Required {
                "required"
            } else {
                "advisory"
            };
            let ver = if f.version > 0 {
                format!("v{} ", f.version)
            } else {
                String::new()
            };
            let _ = writeln!(s, "\nFAIL [{lvl}] {ver}{} ({})", f.id, f.section);
            let _ = writeln!(s, "  rule:      {}", f.rule);
            if !f.nccl.is_empty() {
                let _ = writeln!(s, "  nccl:      {}", f.nccl);
            }
            if let Some(e) = &f.outcome.expected {
                let _ = writeln!(s, "  contract:  {e}");
            }
            if let Some(o) = &f.outcome.observed {
                let _ = writeln!(s, "  plugin:    {o}");
            }
            for n in &f.outcome.notes {
                let _ = writeln!(s, "  note:      {}", n.replace('\n', "\n             "));
            }
            let _ = writeln!(s, "  reproduce: {}", f.reproduce);
        }
    }
    let mut not_run: Vec<(u32, String, usize)> = Vec::new();
    for x in r.results.iter().filter(|x| x.outcome.status == Status::NotRun) {
        match not_run
            .iter_mut()
            .find(|(v, m, _)| *v == x.version && *m == x.outcome.message)
        {
            Some(e) => e.2 += 1,
            None => not_run.push((x.version, x.outcome.message.clone(), 1)),
        }
    }
    if !not_run.is_empty() {
        let _ = writeln!(s, "\nNot run (not findings; fix the failure they depend on first):");
        for (v, why, n) in not_run {
            let _ = writeln!(s, "  v{v}: {n} check(s) {why}");
        }
    }
    let mut skips: Vec<(String, String)> = Vec::new();
    for x in r.results.iter().filter(|x| x.outcome.status == Status::Skip) {
        let k = (x.id.clone(), x.outcome.message.clone());
        if !skips.contains(&k) {
            skips.push(k);
        }
    }
    if !skips.is_empty() {
        let _ = writeln!(s, "\nSkipped:");
        for (id, why) in skips {
            let _ = writeln!(s, "  {id}: {why}");
        }
    }
    let notes: Vec<_> = r
        .results
        .iter()
        .filter(|x| x.outcome.status == Status::Pass && !x.outcome.notes.is_empty() && x.id != "perf.sweep")
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(s, "\nNotes:");
        for x in notes {
            for n in &x.outcome.notes {
                let _ = writeln!(s, "  v{} {}: {}", x.version, x.id, n);
            }
        }
    }
    for x in r
        .results
        .iter()
        .filter(|x| x.id == "perf.sweep" && x.outcome.status == Status::Pass)
    {
        let _ = writeln!(s, "\nPerformance (v{}, advisory):", x.version);
        for n in &x.outcome.notes {
            let _ = writeln!(s, "  {}", n.replace('\n', "\n  "));
        }
    }
    let sum = r.summary();
    let _ = writeln!(
        s,
        "\n{} passed, {} plugin defect(s), {} advisory finding(s), {} skipped, {} not run in {:.1} s — {}",
        sum.passed,
        sum.defects,
        sum.advisory,
        sum.skipped,
        sum.not_run,
        r.duration_s,
        if r.exit_code() == 0 {
            "CONFORMANT"
        } else {
            "NOT CONFORMANT"
        }
    );
    s
}

/// The report as pretty JSON (every field of [`Report`]).
pub fn json(r: &Report) -> String {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("summary".into(), serde_json::to_value(r.summary()).unwrap_or_default());
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// JUnit XML: one `<testsuite>` per API version, one `<testcase>` per check.
/// Required failures are `<failure>`; advisory failures pass with the finding in
/// `<system-out>` (so CI stays green on advice); skips are `<skipped>`.
pub fn junit(r: &Report) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let _ = w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
    let sum = r.summary();
    let k = sum.skipped + sum.not_run;
    let mut root = BytesStart::new("testsuites");
    root.push_attribute(("name", format!("ferroccl-conformance {}", r.plugin).as_str()));
    root.push_attribute(("tests", r.results.len().to_string().as_str()));
    root.push_attribute(("failures", r.required_failures().to_string().as_str()));
    root.push_attribute(("skipped", k.to_string().as_str()));
    root.push_attribute(("time", format!("{:.3}", r.duration_s).as_str()));
    let _ = w.write_event(Event::Start(root));
    let mut versions: Vec<u32> = r.results.iter().map(|x| x.version).collect();
    versions.sort();
    versions.dedup();
    for v in versions {
        let rs: Vec<_> = r.results.iter().filter(|x| x.version == v).collect();
        let mut suite = BytesStart::new("testsuite");
        let name = if v == 0 {
            "load".to_owned()
        } else {
            format!("ncclNet_v{v}")
        };
        suite.push_attribute(("name", name.as_str()));
        suite.push_attribute(("tests", rs.len().to_string().as_str()));
        suite.push_attribute((
            "failures",
            rs.iter()
                .filter(|x| x.outcome.status == Status::Fail && x.level == Level::Required)
                .count()
                .to_string()
                .as_str(),
        ));
        suite.push_attribute((
            "skipped",
            rs.iter()
                .filter(|x| matches!(x.outcome.status, Status::Skip | Status::NotRun))
                .count()
                .to_string()
                .as_str(),
        ));
        suite.push_attribute((
            "time",
            format!("{:.3}", rs.iter().map(|x| x.duration_ms).sum::<u64>() as f64 / 1000.0).as_str(),
        ));
        let _ = w.write_event(Event::Start(suite));
        for x in rs {
            let mut tc = BytesStart::new("testcase");
            tc.push_attribute(("name", x.id.as_str()));
            tc.push_attribute((
                "classname",
                format!("{name}.{}", x.id.split('.').next().unwrap_or("check")).as_str(),
            ));
            tc.push_attribute(("time", format!("{:.3}", x.duration_ms as f64 / 1000.0).as_str()));
            let _ = w.write_event(Event::Start(tc));
            let detail = format!(
                "rule: {} ({})\nnccl: {}\ncontract: {}\nplugin: {}\n{}reproduce: {}",
                x.rule,
                x.section,
                x.nccl,
                x.outcome.expected.as_deref().unwrap_or("-"),
                x.outcome.observed.as_deref().unwrap_or("-"),
                x.outcome
                    .notes
                    .iter()
                    .map(|n| format!("note: {n}\n"))
                    .collect::<String>(),
                x.reproduce
            );
            match (x.outcome.status, x.level) {
                (Status::Fail, Level::Required) => {
                    let mut f = BytesStart::new("failure");
                    f.push_attribute(("message", x.outcome.message.as_str()));
                    f.push_attribute(("type", "conformance"));
                    let _ = w.write_event(Event::Start(f));
                    let _ = w.write_event(Event::Text(BytesText::new(&detail)));
                    let _ = w.write_event(Event::End(BytesEnd::new("failure")));
                }
                (Status::Fail, Level::Advisory) => {
                    let _ = w.write_event(Event::Start(BytesStart::new("system-out")));
                    let _ = w.write_event(Event::Text(BytesText::new(&format!("ADVISORY FAILURE\n{detail}"))));
                    let _ = w.write_event(Event::End(BytesEnd::new("system-out")));
                }
                (Status::Skip | Status::NotRun, _) => {
                    let mut s = BytesStart::new("skipped");
                    s.push_attribute(("message", x.outcome.message.as_str()));
                    let _ = w.write_event(Event::Empty(s));
                }
                (Status::Pass, _) => {
                    if !x.outcome.notes.is_empty() {
                        let _ = w.write_event(Event::Start(BytesStart::new("system-out")));
                        let notes = x.outcome.notes.join("\n");
                        // CDATA keeps tables readable; a "]]>" inside would end it, so fall back to text.
                        if notes.contains("]]>") {
                            let _ = w.write_event(Event::Text(BytesText::new(&notes)));
                        } else {
                            let _ = w.write_event(Event::CData(BytesCData::new(notes)));
                        }
                        let _ = w.write_event(Event::End(BytesEnd::new("system-out")));
                    }
                }
            }
            let _ = w.write_event(Event::End(BytesEnd::new("testcase")));
        }
        let _ = w.write_event(Event::End(BytesEnd::new("testsuite")));
    }
    let _ = w.write_event(Event::End(BytesEnd::new("testsuites")));
    let mut out = String::from_utf8_lossy(&w.into_inner()).into_owned();
    out.push('\n');
    out
}

/// `--list`: every check with its level, tier, versions, section and rule.
pub fn list() -> String {
    let checks = all_checks();
    let w = checks.iter().map(|c| c.id.len()).max().unwrap_or(10);
    let mut s = String::new();
    for c in &checks {
        let _ = writeln!(
            s,
            "{:w$}  {:8}  {:5}  {:9}  {:9}  {}",
            c.id,
            if c.level == Level::Required {
                "required"
            } else {
                "advisory"
            },
            if c.tier == crate::registry::Tier::Quick {
                "quick"
            } else {
                "full"
            },
            c.versions(),
            c.section,
            c.rule
        );
        if !c.nccl.is_empty() {
            let _ = writeln!(s, "{:w$}  nccl: {}", "", c.nccl);
        }
    }
    s
}
