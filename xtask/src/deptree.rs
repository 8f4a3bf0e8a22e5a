//! Which `-sys` crates of a dependency tree probe the system at build time.
//!
//! A `-sys` crate whose build dependencies include `pkg-config` (or
//! `system-deps`, which wraps it) looks for a system library's development
//! files; one that uses `bindgen` needs libclang. Either needs system packages
//! beyond a C compiler, so none may be on the quick start's path. The tree is
//! the text of `cargo tree -e normal,build --no-dedupe --prefix depth` (see
//! [`cargo_tree`]).

use std::path::Path;

use crate::workspace::cargo;

/// Build dependencies that make a `-sys` crate probe the system.
pub const PROBERS: [&str; 3] = ["pkg-config", "system-deps", "bindgen"];

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Depth (0 = the root package).
    pub depth: usize,
    /// Crate name.
    pub name: String,
}

/// Parses `cargo tree --prefix depth` lines (`3pkg-config v0.3.34`).
pub fn parse(tree: &str) -> Vec<Node> {
    tree.lines()
        .filter_map(|l| {
            let digits = l.chars().take_while(char::is_ascii_digit).count();
            let depth = l[..digits].parse().ok()?;
            let name = l[digits..].split_whitespace().next()?.to_string();
            Some(Node { depth, name })
        })
        .collect()
}

/// Every `(sys crate, prober)` pair where a `*-sys` crate has one of
/// [`PROBERS`] anywhere below it (the tree must not be deduplicated).
pub fn probing_sys_crates(nodes: &[Node]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if !n.name.ends_with("-sys") {
            continue;
        }
        for below in nodes[i + 1..].iter().take_while(|m| m.depth > n.depth) {
            if PROBERS.contains(&below.name.as_str()) {
                let pair = (n.name.clone(), below.name.clone());
                if !out.contains(&pair) {
                    out.push(pair);
                }
            }
        }
    }
    out
}

/// Runs `cargo tree -e normal,build --no-dedupe --prefix depth` for `packages`
/// in the workspace at `root` and returns its output.
///
/// # Errors
/// When cargo fails (its stderr).
pub fn cargo_tree(root: &Path, packages: &[String]) -> Result<String, String> {
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args(["tree", "-e", "normal,build", "--no-dedupe", "--prefix", "depth"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd.output().map_err(|e| format!("cannot run cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo tree failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sys_crates_with_probers_below_them() {
        let tree = "0ferroccl-examples v0.1.0 (/w/examples)\n1ferroccl v0.1.0 (/w/core)\n2cc v1.11.3\n1ferroccl-net-ib v0.1.0 (/w/plugins/net-ib)\n2rdma-sys v0.3.0\n3bindgen v0.59.2\n4clang-sys v1.9.1\n5glob v0.3.4\n3pkg-config v0.3.34\n2libc v0.2.1\n1linux-raw-sys v0.4.15\n";
        let nodes = parse(tree);
        assert_eq!(nodes.len(), 11);
        assert_eq!(
            nodes[4],
            Node {
                depth: 2,
                name: "rdma-sys".into()
            }
        );
        let found = probing_sys_crates(&nodes);
        assert_eq!(
            found,
            [
                ("rdma-sys".to_string(), "bindgen".to_string()),
                ("rdma-sys".to_string(), "pkg-config".to_string())
            ]
        );
    }

    #[test]
    fn a_sys_crate_without_probers_is_fine() {
        let tree = "0a v1\n1linux-raw-sys v0.4.15\n1pkg-config v0.3.34\n";
        assert!(
            probing_sys_crates(&parse(tree)).is_empty(),
            "pkg-config is a sibling, not below the -sys crate"
        );
    }
}
