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
