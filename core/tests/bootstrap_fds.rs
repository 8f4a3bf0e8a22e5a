//! The bootstrap root out of file descriptors (`accept` fails with EMFILE), with the
//! root in a child process whose descriptor limit the test lowers and fills: the root
//! keeps retrying and recovers once descriptors are free; when they never are, the
//! error of the rank in the root's process says that process ran out of file
//! descriptors.

mod bootstrap_common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bootstrap_common::*;
use ferroccl::bootstrap::{Bootstrap, UniqueId, get_unique_id};

const ENV_ROLE: &str = "FERROCCL_BSFD_ROLE";
const ENV_ID: &str = "FERROCCL_BSFD_ID";
const ENV_RANK: &str = "FERROCCL_BSFD_RANK";
const LIMIT: Duration = Duration::from_secs(90);

/// Lowers the soft descriptor limit a little above what is open, then opens
/// descriptors (duplicates of stdin) until `dup` fails; returns them.
fn exhaust_fds() -> Vec<i32> {
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit; getrlimit/setrlimit only read/write it.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = (open + 16).min(r.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    let mut fds = Vec::new();
    loop {
        // SAFETY: dup of fd 0 (always open in a child with piped stdio) has no preconditions.
        let fd = unsafe { libc::dup(0) };
        if fd < 0 {
            break;
        }
        fds.push(fd);
    }
    fds
}

fn release(fds: Vec<i32>) {
    for fd in fds {
        // SAFETY: each fd was returned by dup above and is closed once.
        unsafe { libc::close(fd) };
    }
}

/// The child entry point: does nothing unless started by `spawn_child`.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ENV_ROLE) else { return };
    capture_logs();
    match role.as_str() {
        // Root only: runs out of descriptors while two ranks connect, then frees them.
        "root-recovers" => {
            let c = cfg(OK_TIMEOUT);
            let id = get_unique_id(&c).expect("id");
            let fds = exhaust_fds();
            println!("ID {}", id.to_hex());
            let line = wait_for_log(&["accept failed", "retrying with backoff"], LIMIT);
            println!("root saw: {line}");
            std::thread::sleep(Duration::from_millis(500));
            release(fds);
            // The root process must outlive the ranks' init.
            wait_for_log(&["all 2 ranks joined"], LIMIT);
            println!("root recovered");
        }
        // Rank 0 of 2 in the root's process; descriptors run out after it joined.
        "root-starves" => {
            let c = cfg(Duration::from_secs(20));
            let id = get_unique_id(&c).expect("id");
            let h = std::thread::spawn(move || Bootstrap::init(&id, 0, 2, &c).map(|_| ()));
            wait_for_log(
                &[&format!("bootstrap root {}: rank 0/2 from", id.root_addr().unwrap())],
                LIMIT,
            );
            let fds = exhaust_fds();
            println!("ID {}", id.to_hex());
            let e = h.join().unwrap().expect_err("rank 1 cannot get in");
            release(fds);
            println!("rank 0 error: {e}");
        }
        "rank" => {
            let id = UniqueId::from_hex(&std::env::var(ENV_ID).unwrap()).unwrap();
            let rank: usize = std::env::var(ENV_RANK).unwrap().parse().unwrap();
            let bs = Bootstrap::init(&id, rank, 2, &cfg(OK_TIMEOUT)).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            exercise(&bs, "fds");
            println!("rank {rank} ok");
        }
        "rank-fails" => {
            let id = UniqueId::from_hex(&std::env::var(ENV_ID).unwrap()).unwrap();
            let e = Bootstrap::init(&id, 1, 2, &cfg(Duration::from_secs(20))).expect_err("the root is starved");
            println!("rank 1 error: {e}");
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn_child(role: &str, id: Option<&UniqueId>, rank: usize) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ENV_ROLE, role)
        .env(ENV_RANK, rank.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(id) = id {
        cmd.env(ENV_ID, id.to_hex());
    }
    cmd.spawn().expect("spawn child")
}

/// Reads the child's stdout up to its "ID <hex>" line.
fn read_id(child: &mut Child) -> (UniqueId, BufReader<std::process::ChildStdout>) {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ID ") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child printed no id");
    }
    (UniqueId::from_hex(&line[line.find("ID ").unwrap() + 3..]).unwrap(), out)
}

fn finish(child: Child, rest: BufReader<std::process::ChildStdout>) -> String {
    let t0 = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut text = String::new();
    for l in rest.lines() {
        text.push_str(&l.unwrap_or_default());
        text.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
#[ignore = "flaky on a loaded 2-core machine (a rank sometimes never gets the root's reply); being fixed"]
fn a_root_out_of_descriptors_retries_and_recovers() {
    let mut root = spawn_child("root-recovers", None, 0);
    let (id, rest) = read_id(&mut root);
    let ranks: Vec<Child> = (0..2).map(|r| spawn_child("rank", Some(&id), r)).collect();
    for (r, ch) in ranks.into_iter().enumerate() {
        let out = ch.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(&format!("rank {r} ok")), "rank {r}:\n{text}");
    }
    let text = finish(root, rest);
    assert!(
        text.contains("root saw:") && text.contains("Too many open files"),
        "{text}"
    );
    assert!(text.contains("root recovered"), "{text}");
}

#[test]
#[ignore = "flaky on a loaded 2-core machine (the starved listener sometimes records no accept failure); being fixed"]
fn a_starved_root_is_named_in_the_error() {
    let mut root = spawn_child("root-starves", None, 0);
    let (id, rest) = read_id(&mut root);
    let r1 = spawn_child("rank-fails", Some(&id), 1);
    let text = finish(root, rest);
    let r1 = r1.wait_with_output().expect("rank 1 output");
    let r1 = format!(
        "{}{}",
        String::from_utf8_lossy(&r1.stdout),
        String::from_utf8_lossy(&r1.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("rank 0 error"))
        .unwrap_or_else(|| panic!("no rank 0 error:\n{text}"));
    // The root and rank 0 share the starved process: whichever listener's accept
    // failed (the root's, or rank 0's root-reply listener) is named.
    assert!(
        line.contains("ran out of file descriptors: accept() failed") && line.contains("Too many open files"),
        "{line}\n--- root process:\n{text}\n--- rank 1:\n{r1}"
    );
}
