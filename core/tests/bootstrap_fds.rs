//! The bootstrap root out of file descriptors (`accept` fails with EMFILE), with the
//! root in a child process whose descriptor limit the test lowers and fills: the root
//! keeps retrying and recovers once descriptors are free; when they never are, the
//! error of the rank in the root's process says that process ran out of file
//! descriptors.
//!
//! Nothing here depends on timing: each child waits for the log line or state it
//! needs (bounded by [`LIMIT`]), the starved process is filled only once no
//! connection of its own is still open (so none frees a descriptor later), and the
//! recovering root's process lives until the parent has seen both ranks finish (its
//! replies go out on a thread of their own after it logs that all ranks joined).

mod bootstrap_common;

use std::io::{BufRead, BufReader, Read};
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
    let open = procfs::process::Process::myself().unwrap().fd_count().unwrap() as u64;
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

/// The descriptors of this process that are sockets but not listeners (connections
/// being set up, used or torn down).
fn connection_fds() -> Vec<i32> {
    let fds: Vec<i32> = procfs::process::Process::myself()
        .unwrap()
        .fd()
        .unwrap()
        .filter_map(|e| Some(e.ok()?.fd))
        .collect();
    fds.into_iter()
        .filter(|&fd| {
            // SAFETY: fstat and getsockopt only write into the locals passed; a
            // descriptor closed meanwhile makes them fail, which is handled.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
                    return false;
                }
                let mut listening: libc::c_int = 0;
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_ACCEPTCONN,
                    (&mut listening as *mut libc::c_int).cast(),
                    &mut len,
                ) == 0
                    && listening == 0
            }
        })
        .collect()
}

/// Waits (at most `LIMIT`) until every socket of this process is a listener: the
/// connection rank 0 reported to the root over, and the root's end of it, are closed
/// (they close just after the root logs the arrival), so no descriptor of this
/// process is freed after `exhaust_fds` took the rest.
fn wait_for_listeners_only() {
    let t0 = Instant::now();
    loop {
        let busy = connection_fds();
        if busy.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < LIMIT,
            "connections still open after {LIMIT:?}: fds {busy:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (at most `LIMIT`) for end of file on stdin: the parent closes it when this
/// process may end.
fn wait_for_stdin_closed() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        let _ = tx.send(());
    });
    rx.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("the parent did not close stdin within {LIMIT:?}"));
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
            release(fds);
            wait_for_log(&["all 2 ranks joined"], LIMIT);
            // The root's replies are sent by its reply thread after that line: stay
            // until the parent has seen both ranks through init and beyond.
            wait_for_stdin_closed();
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
            wait_for_listeners_only();
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

/// The child's stdout and stderr once it has exited; it is killed if it runs past `LIMIT`.
fn output_within_limit(child: Child) -> String {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let (out, killed) = match rx.recv_timeout(LIMIT) {
        Ok(out) => (out, false),
        Err(_) => {
            // SAFETY: kill has no memory-safety preconditions; the child is not reaped
            // yet (its waiter has not returned), so the pid is still our child's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            (rx.recv().expect("waiter"), true)
        }
    };
    let out = out.expect("child output");
    format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        if killed {
            format!("(killed after {LIMIT:?})\n")
        } else {
            String::new()
        }
    )
}

#[test]
fn a_root_out_of_descriptors_retries_and_recovers() {
    let mut root = spawn_child("root-recovers", None, 0);
    let (id, rest) = read_id(&mut root);
    let ranks: Vec<Child> = (0..2).map(|r| spawn_child("rank", Some(&id), r)).collect();
    let outs: Vec<String> = ranks.into_iter().map(output_within_limit).collect();
    // Both ranks are done with the root: let its process end.
    drop(root.stdin.take());
    let text = finish(root, rest);
    for (r, rank) in outs.into_iter().enumerate() {
        assert!(
            rank.contains(&format!("rank {r} ok")),
            "rank {r}:\n{rank}\n--- root process:\n{text}"
        );
    }
    assert!(
        text.contains("root saw:") && text.contains("Too many open files"),
        "{text}"
    );
    assert!(text.contains("root recovered"), "{text}");
}

#[test]
fn a_starved_root_is_named_in_the_error() {
    let mut root = spawn_child("root-starves", None, 0);
    let (id, rest) = read_id(&mut root);
    let r1 = spawn_child("rank-fails", Some(&id), 1);
    let text = finish(root, rest);
    let r1 = output_within_limit(r1);
    let line = text
        .lines()
        .find(|l| l.starts_with("rank 0 error"))
        .unwrap_or_else(|| panic!("no rank 0 error:\n{text}"));
    println!("{line}");
    // The root and rank 0 share the starved process: whichever listener's accept
    // failed (the root's, or rank 0's root-reply listener) is named.
    assert!(
        line.contains("ran out of file descriptors: accept() failed") && line.contains("Too many open files"),
        "{line}\n--- root process:\n{text}\n--- rank 1:\n{r1}"
    );
}
