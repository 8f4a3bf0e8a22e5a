//! `cargo xtask dist`: the tools and the plugins in one prefix, the plugins under
//! NCCL's file names.
//!
//! ```text
//! target/dist/bin/ferroccl-perf, ferroccl-info
//! target/dist/bin/all_reduce_perf, all_gather_perf, … -> ferroccl-perf (nccl-tests' names)
//! target/dist/lib/libnccl-net-socket.so, libnccl-net-ib.so (where rdma-core headers exist), …
//! ```
//!
//! `target/dist/lib` is what an operator puts on `LD_LIBRARY_PATH` (then
//! `NCCL_NET_PLUGIN=socket` finds `libnccl-net-socket.so`, in ferroccl and in
//! NCCL alike) or names file by file in `NCCL_NET_PLUGIN`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace::{Plugin, Workspace, cargo};

/// nccl-tests' binary names, each a symbolic link to `ferroccl-perf` in `bin/`
/// (the perf tool takes the collective from the name it runs under; the same
/// list as `ferroccl_examples::perf::PERF_BINARIES`).
pub const PERF_LINKS: [&str; 7] = [
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "broadcast_perf",
    "reduce_perf",
    "sendrecv_perf",
    "alltoall_perf",
];

/// Options of `cargo xtask dist`.
#[derive(Debug, Clone)]
pub struct DistOptions {
    /// Cargo profile to build (`release` by default).
    pub profile: String,
    /// Output prefix (`<target>/dist` by default).
    pub out: Option<PathBuf>,
    /// Fail instead of skipping a plugin whose system packages are missing.
    pub require_all: bool,
}

impl Default for DistOptions {
    fn default() -> Self {
        DistOptions {
            profile: "release".into(),
            out: None,
            require_all: false,
        }
    }
}

/// What `dist` produced.
#[derive(Debug, Clone, Default)]
pub struct DistReport {
    /// The prefix.
    pub out: PathBuf,
    /// Files written under `bin/`.
    pub tools: Vec<PathBuf>,
    /// Links written under `bin/` ([`PERF_LINKS`]), with their target's file name.
    pub links: Vec<(PathBuf, String)>,
    /// Plugins written under `lib/`, with the plugin.
    pub plugins: Vec<(Plugin, PathBuf)>,
    /// Plugins left out and why.
    pub skipped: Vec<(Plugin, String)>,
}

impl DistReport {
    /// The summary printed at the end of `cargo xtask dist`.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "dist: {}", self.out.display());
        for t in &self.tools {
            let _ = writeln!(s, "  {}", rel(&self.out, t));
        }
        if let Some((_, target)) = self.links.first() {
            let names: Vec<String> = self
                .links
                .iter()
                .filter_map(|(l, _)| l.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            let _ = writeln!(s, "  bin/{{{}}} -> {target}", names.join(","));
        }
        for (p, f) in &self.plugins {
            // The variable that selects the plugin follows its NCCL file prefix.
            let var = if p.nccl_file.starts_with("libnccl-profiler-") {
                "NCCL_PROFILER_PLUGIN"
            } else if p.nccl_file.starts_with("libnccl-tuner-") {
                "NCCL_TUNER_PLUGIN"
            } else {
                "NCCL_NET_PLUGIN"
            };
            let _ = writeln!(s, "  {}  ({}, {var}={})", rel(&self.out, f), p.package, p.short_name());
        }
        for (p, why) in &self.skipped {
            let why = why.trim().replace('\n', "\n      ");
            let _ = writeln!(s, "  skipped lib/{} ({}): {why}", p.nccl_file, p.package);
        }
        let lib = self.out.join("lib");
        // The socket plugin runs anywhere: the example to show.
        let example = self
            .plugins
            .iter()
            .find(|(p, _)| p.short_name() == "socket")
            .or(self.plugins.first());
        if let Some((p, f)) = example {
            let _ = writeln!(
                s,
                "use: LD_LIBRARY_PATH={} NCCL_NET_PLUGIN={} …   or   NCCL_NET_PLUGIN={} …",
                lib.display(),
                p.short_name(),
                f.display()
            );
        }
        s
    }
}

fn rel(base: &Path, p: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}

/// Whether the system packages of `group` are present, via
/// `scripts/system-deps.sh check <group>` (the one list and its probes).
/// `Err` carries the script's message (the missing packages and the apt-get line).
pub fn check_system_group(root: &Path, group: &str) -> Result<(), String> {
    let out = Command::new("bash")
        .arg(root.join("scripts/system-deps.sh"))
        .args(["check", group])
        .env("SYSTEM_DEPS_CALLER", "cargo xtask dist")
        .output()
        .map_err(|e| format!("cannot run scripts/system-deps.sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Copies `from` to `to` through a temporary file and a rename, so that a
/// process still running the old file keeps it (no "text file busy").
fn install(from: &Path, to: &Path) -> Result<(), String> {
    let tmp = to.with_extension("xtask-tmp");
    std::fs::copy(from, &tmp).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), tmp.display()))?;
    std::fs::rename(&tmp, to).map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), to.display()))
}

/// Makes `link` a relative symbolic link to `target` (its sibling), replacing
/// whatever is there.
fn link_to(link: &Path, target: &str) -> Result<(), String> {
    match std::fs::symlink_metadata(link) {
        Ok(_) => std::fs::remove_file(link).map_err(|e| format!("cannot replace {}: {e}", link.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot inspect {}: {e}", link.display())),
    }
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("cannot link {} to {target}: {e}", link.display()))
}

/// Builds and lays out the prefix (see the module docs).
///
/// # Errors
/// A failed build or copy; with `require_all`, a plugin whose system packages
/// are missing.
pub fn dist(ws: &Workspace, opts: &DistOptions) -> Result<DistReport, String> {
    let mut report = DistReport {
        out: opts.out.clone().unwrap_or_else(|| ws.target_dir.join("dist")),
        ..Default::default()
    };
    let mut build = Vec::new();
    for p in &ws.plugins {
        match &p.system_deps {
            None => build.push(p.clone()),
            Some(group) => match check_system_group(&ws.root, group) {
                Ok(()) => build.push(p.clone()),
                Err(why) if opts.require_all => {
                    return Err(format!("{} cannot be built here (--require-all):\n{why}", p.package));
                }
                Err(why) => report
                    .skipped
                    .push((p.clone(), format!("its build needs system packages\n{why}"))),
            },
        }
    }
    let mut cmd = cargo();
    cmd.current_dir(&ws.root).args([
        "build",
        "--profile",
        &opts.profile,
        "-p",
        crate::workspace::TOOLS_PACKAGE,
    ]);
    for p in &build {
        cmd.args(["-p", &p.package]);
    }
    eprintln!(
        "xtask dist: cargo build --profile {} -p {}{}",
        opts.profile,
        crate::workspace::TOOLS_PACKAGE,
        build.iter().map(|p| format!(" -p {}", p.package)).collect::<String>()
    );
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed ({status})"));
    }
    let profile_dir = ws
        .target_dir
        .join(if opts.profile == "dev" { "debug" } else { &opts.profile });
    let bin = report.out.join("bin");
    let lib = report.out.join("lib");
    for d in [&bin, &lib] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    for t in &ws.tools {
        let to = bin.join(t);
        install(&profile_dir.join(t), &to)?;
        report.tools.push(to);
    }
    if ws.tools.iter().any(|t| t == "ferroccl-perf") {
        for name in PERF_LINKS {
            let link = bin.join(name);
            link_to(&link, "ferroccl-perf")?;
            report.links.push((link, "ferroccl-perf".into()));
        }
    }
    for p in &build {
        let to = lib.join(&p.nccl_file);
        install(&profile_dir.join(format!("lib{}.so", p.lib_name)), &to)?;
        report.plugins.push((p.clone(), to));
    }
    // A plugin skipped this time must not leave an older build behind.
    for (p, _) in &report.skipped {
        let stale = lib.join(&p.nccl_file);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(|e| format!("cannot remove stale {}: {e}", stale.display()))?;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(short: &str, deps: Option<&str>) -> Plugin {
        Plugin {
            package: format!("ferroccl-net-{short}"),
            lib_name: format!("nccl_net_{short}"),
            nccl_file: format!("libnccl-net-{short}.so"),
            system_deps: deps.map(str::to_owned),
        }
    }

    #[test]
    fn summary_names_files_skips_and_how_to_use_them() {
        let out = PathBuf::from("/w/target/dist");
        let r = DistReport {
            tools: vec![out.join("bin/ferroccl-perf")],
            links: vec![(out.join("bin/all_reduce_perf"), "ferroccl-perf".into())],
            plugins: vec![(plugin("socket", None), out.join("lib/libnccl-net-socket.so"))],
            skipped: vec![(
                plugin("ib", Some("ib")),
                "its build needs system packages (group 'ib'):\nmissing: libibverbs-dev\n".into(),
            )],
            out,
        };
        let s = r.summary();
        assert!(s.contains("  bin/ferroccl-perf\n"), "{s}");
        assert!(s.contains("  bin/{all_reduce_perf} -> ferroccl-perf\n"), "{s}");
        assert!(
            s.contains("lib/libnccl-net-socket.so  (ferroccl-net-socket, NCCL_NET_PLUGIN=socket)"),
            "{s}"
        );
        assert!(
            s.contains("skipped lib/libnccl-net-ib.so (ferroccl-net-ib): its build needs"),
            "{s}"
        );
        assert!(s.contains("\n      missing: libibverbs-dev"), "{s}");
        assert!(
            s.contains("use: LD_LIBRARY_PATH=/w/target/dist/lib NCCL_NET_PLUGIN=socket"),
            "{s}"
        );
    }

    #[test]
    fn the_system_group_check_uses_the_one_list() {
        // A group that scripts/system-packages.txt does not have is an error (a
        // typo in a plugin's metadata must not pass); `cc` is what every build needs.
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf();
        let e = check_system_group(&root, "no-such-group").unwrap_err();
        assert!(
            e.contains("unknown group 'no-such-group'") && e.contains("cc ib netns test vm"),
            "{e}"
        );
        check_system_group(&root, "cc").expect("a C compiler is needed to build the workspace at all");
    }
}
