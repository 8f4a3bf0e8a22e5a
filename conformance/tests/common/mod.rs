//! Helpers shared by the integration tests: where cargo put the plugin `.so`
//! files (built as dev-dependencies), and a suite config for them.

#![allow(dead_code)]

use std::path::PathBuf;

use ferroccl_conformance::{Filter, SuiteConfig};

/// `lib<name>.so` next to the test binary (`target/<profile>/deps/`) or one level up.
pub fn plugin_so(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    for dir in [deps.clone(), deps.parent().expect("profile dir").to_path_buf()] {
        let p = dir.join(format!("lib{name}.so"));
        if p.exists() {
            return p;
        }
    }
    panic!(
        "lib{name}.so not found next to {} (it is a dev-dependency, so cargo builds it)",
        deps.display()
    );
}

/// A config for `so` (all versions, quick tier) running only `filter`.
pub fn config(so: &std::path::Path, filter: Option<&str>) -> SuiteConfig {
    SuiteConfig {
        plugin: so.display().to_string(),
        versions: (6..=12).collect(),
        filter: filter.map(|f| Filter::new(f).expect("filter")),
        device: None,
        full: false,
        exe: PathBuf::from(env!("CARGO_BIN_EXE_ferroccl-conformance")),
        progress: false,
    }
}

/// `target/<profile>/`: the test binary lives in `target/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("profile dir")
        .to_path_buf()
}

/// `file` in [`profile_dir`], which must exist (a dev-dependency builds it).
pub fn profile_lib(file: &str) -> PathBuf {
    let so = profile_dir().join(file);
    assert!(so.is_file(), "{} missing (a dev-dependency builds it)", so.display());
    so
}

/// Runs `section` on `file` (every version of the section, only `filter`),
/// and asserts the run ended within `limit` (a generous bound: the suite must
/// not hang, never a timing claim).
pub fn run_section<Cx>(
    section: &ferroccl_conformance::section::Section<Cx>,
    file: &str,
    filter: Option<&str>,
    limit: std::time::Duration,
) -> ferroccl_conformance::Report {
    let plugin = profile_lib(file).display().to_string();
    let start = std::time::Instant::now();
    let rep = section.run(&ferroccl_conformance::section::SectionConfig {
        plugin,
        versions: section.versions.clone().collect(),
        filter: filter.map(|f| Filter::new(f).expect("filter")),
        exe: PathBuf::from(env!("CARGO_BIN_EXE_ferroccl-conformance")),
        progress: false,
    });
    assert!(start.elapsed() < limit, "the suite took {:?}", start.elapsed());
    rep
}

/// The status and observed message of check `id` in `rep`; panics when it did not run.
pub fn observed(rep: &ferroccl_conformance::Report, id: &str) -> (ferroccl_conformance::Status, String) {
    let r = rep
        .results
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("{id} did not run: {rep:#?}"));
    (r.outcome.status, r.outcome.observed.clone().unwrap_or_default())
}
