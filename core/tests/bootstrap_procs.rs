//! Bootstrap with ranks as separate processes: the test binary re-executes itself
//! with `FERROCCL_BS_CHILD` set (role `ok` or `missing`) and the unique id in hex.

mod bootstrap_common;

#[path = "port_support/mod.rs"]
mod port_support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bootstrap_common::*;
use ferroccl::bootstrap::{Bootstrap, UniqueId, get_unique_id};

const ENV_ROLE: &str = "FERROCCL_BS_CHILD";
const ENV_ID: &str = "FERROCCL_BS_ID";
const ENV_RANK: &str = "FERROCCL_BS_RANK";
const ENV_NRANKS: &str = "FERROCCL_BS_NRANKS";
const ENV_COMM_ID: &str = "FERROCCL_BS_COMM_ID";
const ENV_TIMEOUT_MS: &str = "FERROCCL_BS_TIMEOUT_MS";

/// The child entry point: does nothing unless started by `spawn_rank`.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ENV_ROLE) else { return };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let id = UniqueId::from_hex(&var(ENV_ID)).expect("id hex");
    let rank: usize = var(ENV_RANK).parse().unwrap();
    let nranks: usize = var(ENV_NRANKS).parse().unwrap();
    let mut c = cfg(Duration::from_millis(var(ENV_TIMEOUT_MS).parse().unwrap()));
    c.comm_id = std::env::var(ENV_COMM_ID).ok();
    match role.as_str() {
        "ok" => {
            let bs = Bootstrap::init(&id, rank, nranks, &c).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            exercise(&bs, "procs");
            println!("rank {rank} pid {} ok", std::process::id());
        }
        "missing" => {
            let e = Bootstrap::init(&id, rank, nranks, &c).expect_err("a rank is missing");
            let m = e.to_string();
            let want = format!("rank {} never connected", nranks - 1);
            assert!(m.contains(&want), "rank {rank}: expected {want:?} in {m:?}");
            println!("rank {rank} got the expected error: {m}");
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn_rank(
    role: &str,
    id: &UniqueId,
    rank: usize,
    nranks: usize,
    timeout: Duration,
    comm_id: Option<&str>,
) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ENV_ROLE, role)
        .env(ENV_ID, id.to_hex())
        .env(ENV_RANK, rank.to_string())
        .env(ENV_NRANKS, nranks.to_string())
        .env(ENV_TIMEOUT_MS, timeout.as_millis().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match comm_id {
        Some(c) => cmd.env(ENV_COMM_ID, c),
        None => cmd.env_remove(ENV_COMM_ID),
    };
    cmd.spawn().expect("spawn child rank")
}

/// Waits for every child (killing all of them after `limit`); panics with each
/// failing child's output.
fn wait_all(children: Vec<Child>, limit: Duration) {
    let t0 = Instant::now();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut failures = Vec::new();
    loop {
        let mut running = 0;
        for (r, slot) in children.iter_mut().enumerate() {
            let Some(ch) = slot else { continue };
            match ch.try_wait().expect("try_wait") {
                Some(_) => {
                    let out = slot.take().unwrap().wait_with_output().expect("output");
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let ok_line =
                        text.contains(&format!("rank {r} pid")) || text.contains(&format!("rank {r} got the expected"));
                    if !out.status.success() || !ok_line {
                        failures.push(format!("child {r} ({}):\n{text}", out.status));
                    }
                }
                None => running += 1,
            }
        }
        if running == 0 {
            break;
        }
        if t0.elapsed() > limit {
            for (r, slot) in children.iter_mut().enumerate() {
                if let Some(mut ch) = slot.take() {
                    let _ = ch.kill();
                    let _ = ch.wait();
                    failures.push(format!("child {r} still running after {limit:?}; killed"));
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ranks_as_processes_1_2_3_8() {
    for n in [1, 2, 3, 8] {
        // The root runs in this (parent) process; the ranks are children.
        let id = get_unique_id(&cfg(OK_TIMEOUT)).unwrap();
        let children = (0..n).map(|r| spawn_rank("ok", &id, r, n, OK_TIMEOUT, None)).collect();
        wait_all(children, Duration::from_secs(120));
    }
}

#[test]
fn processes_with_nccl_comm_id() {
    let port = port_support::unused_port();
    let comm_id = format!("127.0.0.1:{port}");
    let mut c = cfg(OK_TIMEOUT);
    c.comm_id = Some(comm_id.clone());
    let id = get_unique_id(&c).unwrap();
    // Start the non-root ranks first: they must retry until rank 0 brings the root up.
    let mut children: Vec<Child> = (1..3)
        .map(|r| spawn_rank("ok", &id, r, 3, OK_TIMEOUT, Some(&comm_id)))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    children.insert(0, spawn_rank("ok", &id, 0, 3, OK_TIMEOUT, Some(&comm_id)));
    wait_all(children, Duration::from_secs(120));
}

#[test]
fn a_process_that_never_joins_is_named() {
    let timeout = Duration::from_secs(2);
    let id = get_unique_id(&cfg(timeout)).unwrap();
    let n = 3;
    let t0 = Instant::now();
    let children = (0..n - 1)
        .map(|r| spawn_rank("missing", &id, r, n, timeout, None))
        .collect();
    wait_all(children, Duration::from_secs(60));
    assert!(t0.elapsed() < Duration::from_secs(30));
}
