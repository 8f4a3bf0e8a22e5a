//! What the C and Python tests share: the library under NCCL's file names in a
//! directory of its own (`libnccl.so.2` and the `libnccl.so` link, as `cargo
//! xtask dist` lays them out), the generated header, compiling C programs with
//! the system compiler, and running programs with a bound on their time.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The generated `nccl.h` (written by build.rs).
pub fn header() -> PathBuf {
    PathBuf::from(env!("FERROCCL_NCCL_H"))
}

/// The directory of cargo's `libnccl.so` (next to this test binary).
fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("deps dir");
    for d in [deps, deps.parent().expect("profile dir")] {
        let f = d.join("libnccl.so");
        if f.exists() {
            return f;
        }
    }
    panic!("libnccl.so is not built next to {}", exe.display());
}

/// A fresh directory under cargo's `target/tmp` (replaced by the next run of
/// the same test binary; small: links and test programs).
fn scratch(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("test").to_string();
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{bin}-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// `lib/` with `libnccl.so.2` (a link to the built library) and `libnccl.so`
/// -> `libnccl.so.2`: what a program links with `-lnccl` and finds at run time
/// through `LD_LIBRARY_PATH`.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch("lib");
        std::os::unix::fs::symlink(built_lib(), d.join("libnccl.so.2")).expect("link libnccl.so.2");
        std::os::unix::fs::symlink("libnccl.so.2", d.join("libnccl.so")).expect("link libnccl.so");
        d
    })
}

/// Compiles `src` (under `tests/c/`) into an executable linked with `-lnccl`
/// against the generated header; `compiler` is `cc` (or `$CC`) unless given.
pub fn compile(src: &str, compiler: Option<&str>, extra: &[&str]) -> PathBuf {
    let cc = compiler
        .map(str::to_string)
        .unwrap_or_else(|| std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(src);
    let out = scratch(&format!(
        "bin-{}-{}",
        src.file_stem().unwrap().to_string_lossy(),
        cc.replace('/', "_")
    ))
    .join(src.file_stem().unwrap());
    let inc = header().parent().unwrap().to_path_buf();
    let o = Command::new(&cc)
        .args(extra)
        .arg("-Wall")
        .arg("-Werror")
        .arg(format!("-I{}", inc.display()))
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib_dir().display()))
        .args(["-lnccl", "-lm", "-ldl"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        o.status.success(),
        "{cc} {} failed:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// What a program did.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// Everything, for a failure message.
    pub fn dump(&self) -> String {
        format!(
            "exit {:?} after {:.1?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// The environment every test run gets: loopback only, the socket plugin by
/// name, bounded waits, and the library directory on the loader's path.
pub fn base_env() -> Vec<(String, String)> {
    [
        ("NCCL_SOCKET_IFNAME", "lo"),
        ("NCCL_NET_PLUGIN", "socket"),
        ("FERROCCL_TIMEOUT_SEC", "120"),
        ("LD_LIBRARY_PATH", &lib_dir().display().to_string()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Runs `program` with `args` and `env` (over [`base_env`]), killing it (and
/// its process group) after `limit`.
pub fn run(program: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in base_env() {
        c.env(k, v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    // Its own process group, so the ranks it forks are killed with it.
    c.process_group(0);
    let t0 = Instant::now();
    let mut child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let a = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let b = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if t0.elapsed() > limit {
            // SAFETY: kill(2) on the child's process group, which we created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code,
        stdout: a.join().unwrap_or_default(),
        stderr: b.join().unwrap_or_default(),
        elapsed: t0.elapsed(),
    }
}
