//! `cargo xtask gpu-bundle DIR`: everything that checks the GPU path, built
//! here (release, debug info stripped) into one directory that runs on a GPU
//! machine without a Rust toolchain (issue 28):
//!
//! ```text
//! DIR/run.sh                         runs every check, one summary line each
//! DIR/bin/ferroccl-perf, ferroccl-info, ferroccl-conformance, cuda_reduce_bw, …
//! DIR/lib/libnccl-net-socket.so, …, libnccl.so.2  (as `cargo xtask dist` makes them)
//! DIR/deps/coll_device, cuda_device, cuda_transport   (the GPU test binaries)
//! DIR/libnccl-net-socket.so -> lib/…  (where the test binaries look for plugins)
//! DIR/scripts/gpu-torch-check.sh, gpu-nccl-plugins-check.sh
//! ```
//!
//! run.sh sets `FERROCCL_REQUIRE_GPU=1` (a test that cannot reach the GPU
//! fails instead of skipping), gives every check its own `timeout`, and prints
//! `PASS|FAIL|SKIP <check> <seconds>s [why]` per check, each check's output in
//! `DIR/logs/<check>.log`. Without a usable GPU it prints one `SKIP` line per
//! check naming the reason and exits 0; otherwise it exits 1 when a check failed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::dist::{DistOptions, dist};
use crate::workspace::{Workspace, cargo};

/// One check of run.sh: its name, time limit (s) and command line (run in
/// the bundle directory; `$DIR` is the bundle).
pub const CHECKS: [(&str, u32, &str); 9] = [
    ("coll_device", 900, "deps/coll_device --test-threads=1"),
    // The perf tool on device buffers (issue 28's performance rows): shared
    // memory, then the socket plugin between the same two ranks; every result checked.
    (
        "perf_device_buffers",
        300,
        "bin/ferroccl-perf --ranks 2 --mem device all_reduce -b 8 -e 64M -f 8 -c 1 && NCCL_SHM_DISABLE=1 NCCL_NET_PLUGIN=socket bin/ferroccl-perf --ranks 2 --mem device all_reduce -b 8 -e 64M -f 8 -c 1",
    ),
    ("cuda_transport", 300, "deps/cuda_transport --test-threads=1"),
    ("cuda_device", 900, "deps/cuda_device --test-threads=1"),
    ("cuda_reduce_bw", 300, "bin/cuda_reduce_bw"),
    (
        "conformance_gpu_memory_socket",
        300,
        "bin/ferroccl-conformance lib/libnccl-net-socket.so --filter 'memory.cuda,memory.dmabuf'",
    ),
    (
        "conformance_gpu_memory_ib",
        300,
        "if [ -f lib/libnccl-net-ib.so ]; then bin/ferroccl-conformance lib/libnccl-net-ib.so --filter 'memory.cuda,memory.dmabuf'; else echo 'SKIP: libnccl-net-ib.so was not built (rdma-core headers missing where the bundle was built)'; exit 77; fi",
    ),
    ("torch_libnccl", 600, "scripts/gpu-torch-check.sh \"$DIR\""),
    ("torch_nccl_plugins", 600, "scripts/gpu-nccl-plugins-check.sh \"$DIR\""),
];

/// Test binaries that need a GPU: (package, test target).
pub const GPU_TESTS: [(&str, &str); 3] = [
    ("ferroccl", "coll_device"),
    ("ferroccl-kernels", "cuda_device"),
    ("ferroccl-kernels", "cuda_transport"),
];

/// Options of `cargo xtask gpu-bundle`.
#[derive(Debug, Clone)]
pub struct BundleOptions {
    /// The bundle directory.
    pub out: PathBuf,
    /// Cargo profile (`release` by default; `dev` for a quicker test build).
    pub profile: String,
}

/// The run script (see the module docs).
pub fn run_script() -> String {
    let mut s = String::from(
        r#"#!/usr/bin/env bash
# GPU checks of ferroccl (made by `cargo xtask gpu-bundle`). Needs no Rust
# toolchain: run it on the GPU machine as  ./run.sh  (PYTHON=... for another python).
# One line per check: PASS|FAIL|SKIP <check> <seconds>s [why]; logs in logs/.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
cd "$DIR"
export DIR FERROCCL_REQUIRE_GPU=1 FERROCCL_REQUIRE_NVRTC=1 RUST_BACKTRACE=1
export LD_LIBRARY_PATH="$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p logs
INFO=$(bin/ferroccl-info plugins 2>&1 | grep -E '^(cuda driver|nvrtc):')
echo "$INFO"
NOGPU=$(echo "$INFO" | sed -n 's/^cuda driver: none (\(.*\))$/\1/p')
CHECKS=(__CHECK_NAMES__)
if [ -n "$NOGPU" ]; then
    for c in "${CHECKS[@]}"; do echo "SKIP $c 0s (no GPU: $NOGPU)"; done
    exit 0
fi
failed=0
check() {  # name limit command
    local name=$1 limit=$2 cmd=$3 t0 rc secs why=\"\"
    t0=$(date +%s%N)
    timeout -k 20 "$limit" bash -c "$cmd" >"logs/$name.log" 2>&1
    rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    secs="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
    case $rc in
        0) echo "PASS $name ${secs}s" ;;
        77) why=$(grep -m1 -o 'SKIP.*' "logs/$name.log"); echo "SKIP $name ${secs}s (${why:-skipped}; logs/$name.log)" ;;
        124|137) failed=1; echo "FAIL $name ${secs}s (timed out after ${limit}s; logs/$name.log)" ;;
        *) failed=1; echo "FAIL $name ${secs}s (exit $rc; logs/$name.log)" ;;
    esac
}
"#,
    );
    let names: Vec<String> = CHECKS.iter().map(|(n, ..)| n.to_string()).collect();
    s = s.replace("__CHECK_NAMES__", &names.join(" "));
    for (name, limit, cmd) in CHECKS {
        s.push_str(&format!("check {name} {limit} {}\n", shell_quote(cmd)));
    }
    s.push_str("exit $failed\n");
    s
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs cargo `args` (with `--message-format=json-render-diagnostics`) and
/// returns the executables it built, by target name.
fn build(ws: &Workspace, profile: &str, args: &[&str]) -> Result<Vec<(String, PathBuf)>, String> {
    let mut cmd = cargo();
    cmd.current_dir(&ws.root)
        .args([
            "build",
            "--message-format=json-render-diagnostics",
            "--profile",
            profile,
        ])
        .args(args)
        .stderr(Stdio::inherit());
    if profile != "dev" {
        // Symbol names stay (a watchdog's backtraces name functions); debug
        // info goes. Not for `dev`, whose point is to reuse the test build.
        cmd.env(format!("CARGO_PROFILE_{}_STRIP", profile.to_uppercase()), "debuginfo");
    }
    eprintln!("xtask gpu-bundle: cargo build --profile {profile} {}", args.join(" "));
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo build {} failed ({})", args.join(" "), out.status));
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(name), Some(exe)) = (v["target"]["name"].as_str(), v["executable"].as_str()) {
            exes.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    Ok(exes)
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if to.exists() || to.is_symlink() {
        std::fs::remove_file(to).map_err(|e| format!("cannot replace {}: {e}", to.display()))?;
    }
    std::fs::copy(from, to).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
    Ok(())
}

fn symlink(target: &str, link: &Path) -> Result<(), String> {
    if link.exists() || link.is_symlink() {
        std::fs::remove_file(link).map_err(|e| format!("cannot replace {}: {e}", link.display()))?;
    }
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("cannot link {}: {e}", link.display()))
}

/// Builds the bundle into `opts.out`; returns the files of the summary.
pub fn gpu_bundle(ws: &Workspace, opts: &BundleOptions) -> Result<Vec<PathBuf>, String> {
    let out = &opts.out;
    // Tools, plugins under NCCL's names and libnccl.so.2, as `dist` makes them.
    let rep = dist(
        ws,
        &DistOptions {
            profile: opts.profile.clone(),
            out: Some(out.clone()),
            require_all: false,
        },
    )?;
    let mut files: Vec<PathBuf> = rep.tools.clone();
    files.extend(rep.plugins.iter().map(|(_, p)| p.clone()));
    let deps = out.join("deps");
    let bin = out.join("bin");
    let scripts = out.join("scripts");
    for d in [&deps, &scripts] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    // One cargo call per package (a `--test` must exist in every package named).
    for pkg in ["ferroccl", "ferroccl-kernels"] {
        let mut a: Vec<&str> = vec!["-p", pkg];
        for (p, t) in GPU_TESTS {
            if p == pkg {
                a.extend(["--test", t]);
            }
        }
        if pkg == "ferroccl-kernels" {
            a.extend(["--example", "cuda_reduce_bw"]);
        }
        for (name, exe) in build(ws, &opts.profile, &a)? {
            let to = if name == "cuda_reduce_bw" {
                bin.join(&name)
            } else {
                deps.join(&name)
            };
            copy(&exe, &to)?;
            files.push(to);
        }
    }
    for (name, exe) in build(
        ws,
        &opts.profile,
        &["-p", "ferroccl-conformance", "--bin", "ferroccl-conformance"],
    )? {
        let to = bin.join(&name);
        copy(&exe, &to)?;
        files.push(to);
    }
    // The test binaries look for plugins in their directory's parent (the
    // bundle), under either name.
    for (_, p) in &rep.plugins {
        if let Some(f) = p.file_name().and_then(|f| f.to_str()) {
            symlink(&format!("lib/{f}"), &out.join(f))?;
        }
    }
    for s in ["gpu-torch-check.sh", "gpu-nccl-plugins-check.sh"] {
        let to = scripts.join(s);
        copy(&ws.root.join("scripts").join(s), &to)?;
        files.push(to);
    }
    let run = out.join("run.sh");
    std::fs::write(&run, run_script()).map_err(|e| format!("cannot write {}: {e}", run.display()))?;
    let mut perm = std::fs::metadata(&run).map_err(|e| e.to_string())?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&run, perm).map_err(|e| e.to_string())?;
    files.push(run);
    Ok(files)
}

/// Whether `bash -n` accepts a script (used by the tests).
pub fn bash_syntax_ok(script: &str) -> bool {
    Command::new("bash")
        .args(["-n", "-c", script])
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every check has a line in the script, with its limit; the script parses.
    #[test]
    fn the_script_runs_every_check_with_its_limit() {
        let s = run_script();
        for (name, limit, _) in CHECKS {
            assert!(s.contains(&format!("check {name} {limit} '")), "{name}: {s}");
        }
        assert!(s.contains("FERROCCL_REQUIRE_GPU=1"));
        assert!(bash_syntax_ok(&s), "{s}");
    }
}
