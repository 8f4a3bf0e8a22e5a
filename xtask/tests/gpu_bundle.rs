//! run.sh of `cargo xtask gpu-bundle`, run here on stand-in bundles (the real
//! bundle is built and run by `scripts/gpu-bundle-test.sh`, from
//! `scripts/test.sh`): without a GPU, one `SKIP <check> 0s (no GPU: why)` line
//! per check and exit 0; with one, one `PASS`/`FAIL` line per check and exit 1
//! when a check fails.

use std::path::Path;
use std::process::Command;

use xtask::gpubundle::{CHECKS, run_script};

fn bundle(info_line: &str) -> tempdir::Dir {
    let d = tempdir::Dir::new();
    std::fs::create_dir_all(d.0.join("bin")).unwrap();
    std::fs::write(d.0.join("run.sh"), run_script()).unwrap();
    let info = d.0.join("bin/ferroccl-info");
    std::fs::write(
        &info,
        format!("#!/bin/sh\necho 'environment:'\necho '{info_line}'\necho 'nvrtc: none (test)'\n"),
    )
    .unwrap();
    chmod_x(&info);
    d
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "ferroccl-gpu-bundle-{}-{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn run(d: &Path) -> (Option<i32>, Vec<String>) {
    let out = Command::new("bash").arg(d.join("run.sh")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.code(),
        text.lines()
            .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL ") || l.starts_with("SKIP "))
            .map(str::to_owned)
            .collect(),
    )
}

#[test]
fn without_a_gpu_every_check_says_so_and_exits_0() {
    let d = bundle("cuda driver: none (no CUDA: libcuda.so.1 is not on the loader path)");
    let (code, lines) = run(&d.0);
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(lines.len(), CHECKS.len(), "{lines:?}");
    for ((name, ..), l) in CHECKS.iter().zip(&lines) {
        assert_eq!(
            l,
            &format!("SKIP {name} 0s (no GPU: no CUDA: libcuda.so.1 is not on the loader path)")
        );
    }
}

#[test]
fn with_a_gpu_every_check_runs_and_a_failure_fails_the_run() {
    let d = bundle("cuda driver: 13.0 (1 device(s))");
    // No check's program is in this stand-in bundle: each fails (exit 127),
    // except the IB one, which skips without its plugin (exit 77).
    let (code, lines) = run(&d.0);
    assert_eq!(code, Some(1), "{lines:?}");
    assert_eq!(lines.len(), CHECKS.len(), "{lines:?}");
    for ((name, ..), l) in CHECKS.iter().zip(&lines) {
        if *name == "conformance_gpu_memory_ib" {
            assert!(l.starts_with(&format!("SKIP {name} ")), "{l}");
        } else {
            assert!(
                l.starts_with(&format!("FAIL {name} ")) && l.contains("(exit 127;"),
                "{l}"
            );
        }
        assert!(d.0.join(format!("logs/{name}.log")).exists(), "{name}'s log");
    }
}
