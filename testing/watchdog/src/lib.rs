//! Watchdogs for the GPU tests (issue 28: a GPU test hung with nothing
//! printed). Two pieces, shared by every GPU test:
//!
//! * [`Watchdog::arm`] in the process that runs the work: if it is not dropped
//!   within its limit, it prints [`process_report`] of its own process to
//!   stderr (not captured by the test harness: it is another thread) and exits
//!   the process with [`EXIT_CODE`], so the test fails, naming what each thread
//!   was waiting on.
//! * [`process_report`] of a child process, which a parent that launched
//!   workers prints before it kills a child that overran its limit.
//!
//! A report lists every thread (`/proc/PID/task/*`): name, scheduler state,
//! kernel wait channel (`wchan`) and the system call it sits in (`syscall`),
//! then, when `gdb` is on the `PATH`, every thread's native backtrace
//! (`gdb -batch -p PID -ex "thread apply all bt"`, bounded): that is where
//! `libcuda.so` or `Completion::wait` shows up.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Exit status of a process whose [`Watchdog`] expired.
pub const EXIT_CODE: i32 = 86;

/// Environment variable scaling every watchdog's limit (a float, e.g. `2`
/// on a slow machine).
pub const SCALE_ENV: &str = "FERROCCL_WATCHDOG_SCALE";

/// `limit` scaled by [`SCALE_ENV`].
pub fn scaled(limit: Duration) -> Duration {
    let k = std::env::var(SCALE_ENV)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|k| k.is_finite() && *k > 0.0)
        .unwrap_or(1.0);
    limit.mul_f64(k)
}

/// A bounded wait on the work of the current process; see the crate docs.
/// Disarmed when dropped.
#[derive(Debug)]
pub struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Arms a watchdog named `what` (the test) for `limit` ([`scaled`]).
    /// `extra` is called on expiry and its text added to the report (e.g. the
    /// operations a communicator still has pending).
    pub fn arm(what: &str, limit: Duration, extra: impl Fn() -> String + Send + 'static) -> Watchdog {
        let limit = scaled(limit);
        let (tx, rx) = mpsc::channel::<()>();
        let what = what.to_string();
        let thread = std::thread::Builder::new()
            .name("test-watchdog".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                    let mut msg =
                        format!("WATCHDOG {what}: not finished after {limit:?}; what each thread is waiting on:\n");
                    msg.push_str(&process_report(std::process::id()));
                    let x = extra();
                    if !x.is_empty() {
                        let _ = writeln!(msg, "{x}");
                    }
                    // Straight to file descriptor 2, errors ignored: `eprintln!`
                    // is captured by the test harness (lost at the exit below)
                    // and panics when stderr is a pipe its reader has closed
                    // (a launcher that died first), which would end this
                    // thread and leave the process running unbounded.
                    let _ = writeln!(std::io::stderr(), "{msg}");
                    std::process::exit(EXIT_CODE);
                }
            })
            .expect("spawn the watchdog thread");
        Watchdog {
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("({e})"))
}

/// Every thread of process `pid`: name, state, wait channel, system call; then
/// native backtraces from gdb when it is installed (bounded to 60 s).
pub fn process_report(pid: u32) -> String {
    let mut out = format!(
        "process {pid} ({}):\n",
        read(&format!("/proc/{pid}/cmdline")).replace('\0', " ")
    );
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    tids.sort_unstable();
    for t in tids {
        let base = format!("/proc/{pid}/task/{t}");
        let stat = read(&format!("{base}/stat"));
        // The state follows the parenthesised name.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let _ = writeln!(
            out,
            "  thread {t} {:<24} state {state} wchan {} syscall {}",
            read(&format!("{base}/comm")),
            read(&format!("{base}/wchan")),
            read(&format!("{base}/syscall"))
                .split_whitespace()
                .next()
                .unwrap_or("?"),
        );
    }
    out.push_str(&gdb_backtraces(pid));
    out
}

/// `gdb -batch -p PID -ex "thread apply all bt"`, bounded; a one-line note
/// when gdb is missing or fails.
///
/// gdb writes into a file, never a pipe: while it is attached every thread of
/// PID is stopped, and when PID is this process the thread that would drain
/// a pipe is one of them, so a report larger than the pipe (64 KiB: a few
/// hundred frames) would block gdb and freeze both for good. For the same
/// reason the bound is kept by `timeout(1)` around gdb, a process of its own
/// (this process's own clock stops with it); the wait below bounds it again
/// for other processes, or where `timeout` is missing.
fn gdb_backtraces(pid: u32) -> String {
    if pid == std::process::id() {
        // Let a child debugger attach to us under Yama's ptrace_scope=1.
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    }
    let Some((path, file)) = report_file(pid) else {
        return "  (no native backtraces: no file for gdb's output)\n".into();
    };
    let gdb_args = ["-nx", "-batch", "-p", &pid.to_string(), "-ex", "thread apply all bt 30"].map(String::from);
    let spawn = |prog: &str, args: &[String]| {
        Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().map(Stdio::from).unwrap_or_else(|_| Stdio::null()))
            .stderr(Stdio::null())
            .spawn()
    };
    let bounded: Vec<String> = ["-k", "5", "60", "gdb"]
        .map(String::from)
        .into_iter()
        .chain(gdb_args.clone())
        .collect();
    let child = match spawn("timeout", &bounded) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => spawn("gdb", &gdb_args),
        r => r,
    };
    drop(file);
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return format!("  (no native backtraces: gdb: {e})\n");
        }
    };
    let status = wait_at_most(&mut child, Duration::from_secs(70));
    let mut text = String::new();
    let _ = std::fs::File::open(&path).and_then(|mut f| f.read_to_string(&mut text));
    let _ = std::fs::remove_file(&path);
    let bt: String = text
        .lines()
        .filter(|l| l.starts_with("Thread ") || l.starts_with('#'))
        .map(|l| format!("  {l}\n"))
        .collect();
    match (bt.is_empty(), status) {
        // `timeout` exits 127 when gdb is not installed.
        (true, Some(s)) if s.code() == Some(127) => "  (no native backtraces: gdb is not installed)\n".into(),
        (true, _) => "  (gdb gave no backtraces)\n".into(),
        (false, _) => format!("  native backtraces (gdb):\n{bt}"),
    }
}

/// Waits for `child` for at most `limit`; past it (or when waiting fails),
/// kills it (SIGKILL ends a stopped process too) and returns `None`.
fn wait_at_most(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// A new empty file in the temporary directory for gdb's report on `pid`,
/// with its path; `None` when none can be created.
fn report_file(pid: u32) -> Option<(std::path::PathBuf, std::fs::File)> {
    let dir = std::env::temp_dir();
    (0..100u32).find_map(|k| {
        let path = dir.join(format!("ferroccl-watchdog-{}-{pid}-{k}.txt", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .ok()
            .map(|f| (path, f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report names this process's threads, a sleeping one included.
    #[test]
    fn report_names_every_thread() {
        let (tx, rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("sleeper-xyz".into())
            .spawn(move || {
                ready_tx.send(()).unwrap();
                let _ = rx.recv_timeout(Duration::from_secs(120));
            })
            .unwrap();
        // The sleeper is named once it runs, and asleep once it waits: take
        // the report only after /proc shows it asleep (the test harness's own
        // threads may be running at any moment), retrying a report that caught
        // it between a wake-up and its next wait; every wait bounded.
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the sleeper started");
        let asleep = || {
            std::fs::read_dir("/proc/self/task")
                .into_iter()
                .flatten()
                .flatten()
                .any(|t| {
                    let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                    let stat = read("stat");
                    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
                    read("comm").trim() == "sleeper-xyz" && state == Some(Some('S'))
                })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut r = String::new();
        while Instant::now() < deadline {
            if asleep() {
                r = process_report(std::process::id());
                if r.lines().any(|l| l.contains("sleeper-xyz") && l.contains("state S")) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(tx);
        h.join().unwrap();
        assert!(r.contains("sleeper-xyz"), "{r}");
        assert!(
            r.lines().any(|l| l.contains("sleeper-xyz") && l.contains("state S")),
            "{r}"
        );
    }

    /// A report on this process finishes when the debugger stops every
    /// thread of it and prints far more than a pipe holds (as gdb does on a
    /// process of many threads): gdb's output must not wait on a thread it
    /// stopped. A stand-in `gdb` (first on the child's PATH) stops the child
    /// as gdb's attach does, prints 20 000 frames (~0.8 MB) and lets it go;
    /// the child must finish within a generous bound and report every frame.
    #[test]
    fn self_report_survives_a_debugger_that_stops_this_process() {
        const FRAMES: usize = 20_000;
        if std::env::var_os("WATCHDOG_SELF_REPORT_CHILD").is_some() {
            let r = process_report(std::process::id());
            let frames = r.lines().filter(|l| l.trim_start().starts_with("#")).count();
            println!("REPORT-FRAMES {frames}");
            return;
        }
        let dir = std::env::temp_dir().join(format!("ferroccl-watchdog-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gdb = dir.join("gdb");
        std::fs::write(
            &gdb,
            format!(
                "#!/bin/sh\n\
                 while [ $# -gt 0 ]; do [ \"$1\" = -p ] && pid=$2; shift; done\n\
                 kill -STOP \"$pid\"\n\
                 seq 1 {FRAMES} | sed 's/.*/#& 0x0000000000000000 in frame_\\& ()/'\n\
                 kill -CONT \"$pid\"\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&gdb, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "tests::self_report_survives_a_debugger_that_stops_this_process",
                "--exact",
                "--nocapture",
            ])
            .env("WATCHDOG_SELF_REPORT_CHILD", "1")
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut so = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let status = wait_at_most(&mut child, Duration::from_secs(150));
        let out = reader.join().unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let status = status.unwrap_or_else(|| panic!("the self-report froze: not finished after 150 s\n{out}"));
        assert!(status.success(), "child failed: {status:?}\n{out}");
        assert!(out.contains(&format!("REPORT-FRAMES {FRAMES}")), "{out}");
    }

    /// A watchdog dropped in time does nothing; a child whose watchdog expires
    /// exits with EXIT_CODE and prints the report.
    #[test]
    fn expired_watchdog_fails_the_process_with_a_report() {
        if std::env::var_os("WATCHDOG_CHILD").is_some() {
            let _w = Watchdog::arm("child", Duration::from_millis(200), || "extra-text".into());
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        drop(Watchdog::arm("in time", Duration::from_secs(60), String::new));
        let child = || {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.args([
                "tests::expired_watchdog_fails_the_process_with_a_report",
                "--exact",
                "--nocapture",
            ])
            .env("WATCHDOG_CHILD", "1")
            .env("PATH", "/nonexistent");
            c
        };
        let out = child().output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(EXIT_CODE), "{err}");
        assert!(err.contains("WATCHDOG child"), "{err}");
        assert!(err.contains("extra-text"), "{err}");
        assert!(err.contains("test-watchdog"), "{err}");
        // A child whose stderr reader is gone (its launcher died) still exits
        // at its watchdog, not after its 60 s sleep.
        let mut child = child().stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stderr.take());
        let status = wait_at_most(&mut child, Duration::from_secs(50))
            .expect("a child with no stderr reader outlived its watchdog");
        assert_eq!(status.code(), Some(EXIT_CODE));
    }
}
