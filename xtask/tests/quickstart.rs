//! The README's quick start is checked, not trusted: its shape (prerequisites
//! line, exactly two commands), that its first command is `cargo xtask dist`
//! (so the crates below are what it builds), and that none of those crates
//! pulls a `-sys` crate that probes the system (pkg-config, bindgen) at build
//! time. `.ci/run` runs the command itself (`cargo xtask readme --run`).

use std::path::PathBuf;

use xtask::{deptree, readme, workspace::Workspace};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn readme_quick_start_has_two_commands_and_a_prerequisites_line() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let q = readme::parse(&text).unwrap_or_else(|e| panic!("README.md: {e}"));
    assert!(
        q.run.starts_with("cargo xtask dist && "),
        "the quick start must build with `cargo xtask dist` (the packages checked below): {}",
        q.run
    );
    assert_eq!(readme::expected_plugin_file(&q.run).unwrap(), "libnccl-net-socket.so");
    readme::with_max_size(&q.run, "1M").unwrap();
    let pre = q.prerequisites.to_lowercase();
    assert!(
        pre.contains("rust") && pre.contains("c compiler"),
        "{}",
        q.prerequisites
    );
}

#[test]
fn quick_start_crates_pull_no_system_probing_sys_crate() {
    let ws = Workspace::load(&root()).unwrap();
    let mut packages = ws.unconditional_packages();
    packages.push("xtask".into());
    assert!(packages.iter().any(|p| p == "ferroccl-net-socket"), "{packages:?}");
    assert!(
        !packages.iter().any(|p| p == "ferroccl-net-ib"),
        "the IB plugin must be conditional (system-deps): {packages:?}"
    );
    let tree = deptree::cargo_tree(&ws.root, &packages).unwrap();
    let nodes = deptree::parse(&tree);
    for p in &packages {
        assert!(
            nodes.iter().any(|n| n.depth == 0 && &n.name == p),
            "cargo tree printed no tree for {p}:\n{tree}"
        );
    }
    let bad = deptree::probing_sys_crates(&nodes);
    assert!(
        bad.is_empty(),
        "the quick start's crates {packages:?} pull -sys crates that probe the system at build time: {bad:?}"
    );
    assert!(
        !nodes
            .iter()
            .any(|n| n.name == "ferroccl-net-ib" || n.name == "rdma-sys"),
        "the IB plugin or rdma-sys is on the quick start's path"
    );
}

#[test]
fn the_check_catches_the_ib_plugin() {
    // The same check on the one crate that may need system packages: it must
    // report rdma-sys, or the test above proves nothing.
    let tree = deptree::cargo_tree(&root(), &["ferroccl-net-ib".to_string()]).unwrap();
    let bad = deptree::probing_sys_crates(&deptree::parse(&tree));
    assert!(bad.iter().any(|(s, p)| s == "rdma-sys" && p == "pkg-config"), "{bad:?}");
    assert!(bad.iter().any(|(s, p)| s == "rdma-sys" && p == "bindgen"), "{bad:?}");
}

#[test]
fn no_crate_links_the_ib_plugin() {
    // Building ferroccl-net-ib needs rdma-core headers: no other crate's library
    // or binaries may depend on it (tests may, as dev-dependencies).
    let out = xtask::workspace::cargo()
        .current_dir(root())
        .args([
            "tree",
            "--workspace",
            "-i",
            "ferroccl-net-ib",
            "-e",
            "normal,build",
            "--prefix",
            "depth",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    let nodes = deptree::parse(&tree);
    assert_eq!(
        nodes.first().map(|n| n.name.as_str()),
        Some("ferroccl-net-ib"),
        "{tree}"
    );
    let dependents: Vec<&str> = nodes.iter().filter(|n| n.depth > 0).map(|n| n.name.as_str()).collect();
    assert!(
        dependents.is_empty(),
        "crates that link ferroccl-net-ib: {dependents:?}"
    );
}
