//! Bootstrap failures with ranks as real processes (the test binary re-executes
//! itself with `FERROCCL_BSF_ROLE` set): the root killed during init (every rank
//! fails within the timeout plus slack, naming what it waited for), and a rank
//! stopped (SIGSTOP) or killed during a bootstrap all-gather (every survivor names
//! that rank, and the survivors' exchange reports exactly the others).
//!
//! Bounds are asserted generously (timeout + 15 s) because the machine is small and
//! shared; what each rank reports does not depend on timing.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferroccl::bootstrap::{Bootstrap, BootstrapConfig, TIMEOUT_SLACK, UniqueId, get_unique_id};

const ENV_ROLE: &str = "FERROCCL_BSF_ROLE";
const ENV_ID: &str = "FERROCCL_BSF_ID";
const ENV_RANK: &str = "FERROCCL_BSF_RANK";
const ENV_NRANKS: &str = "FERROCCL_BSF_NRANKS";
const ENV_TIMEOUT: &str = "FERROCCL_BSF_TIMEOUT_S";

/// Loopback config with NCCL's default connect retries (34 × growing 100 ms sleeps,
/// ~60 s in all): the timeout, not the retry count, must end every wait.
fn config(timeout: Duration) -> BootstrapConfig {
    BootstrapConfig::loopback(timeout)
}

/// The child entry point: does nothing unless started by `spawn_child`.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ENV_ROLE) else { return };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let timeout = Duration::from_secs(var(ENV_TIMEOUT).parse().unwrap());
    let c = config(timeout);
    if role == "root0" {
        let id = get_unique_id(&c).expect("unique id");
        println!("ID {}", id.to_hex());
        // Rank 0 of 4 in the root's process; the parent kills it during init.
        let r = Bootstrap::init(&id, 0, 4, &c);
        println!("root0 returned {:?}", r.map(|_| ()));
        return;
    }
    let id = UniqueId::from_hex(&var(ENV_ID)).expect("id hex");
    let rank: usize = var(ENV_RANK).parse().unwrap();
    let nranks: usize = var(ENV_NRANKS).parse().unwrap();
    let t0 = Instant::now();
    match role.as_str() {
        "joiner" => match Bootstrap::init(&id, rank, nranks, &c) {
            Ok(_) => println!("rank {rank} unexpectedly joined"),
            Err(e) => println!("rank {rank} failed after {} ms: {e}", t0.elapsed().as_millis()),
        },
        "gather" | "victim" => {
            let bs = Bootstrap::init(&id, rank, nranks, &c).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            bs.barrier().expect("barrier");
            println!("rank {rank} ready");
            if role == "victim" {
                // The parent stops or kills this process now; if it is late, this rank
                // is merely absent from the all-gather for a while, which must be
                // blamed on it just the same.
                std::thread::sleep(Duration::from_secs(3 * timeout.as_secs()));
            }
            let e = bs.allgather(&[rank as u8; 16]).expect_err("a rank is stopped or dead");
            let s = bs
                .exchange_among_survivors(1, format!("progress of rank {rank}").as_bytes(), timeout)
                .expect("survivor exchange");
            for r in s.answered() {
                assert_eq!(s.data(r).unwrap(), format!("progress of rank {r}").as_bytes());
            }
            println!(
                "rank {rank} culprit {:?} answered {:?} missing {:?}: {e}",
                e.culprit(),
                s.answered(),
                s.missing()
            );
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn_child(role: &str, id: Option<&UniqueId>, rank: usize, nranks: usize, timeout_s: u64) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ENV_ROLE, role)
        .env(ENV_RANK, rank.to_string())
        .env(ENV_NRANKS, nranks.to_string())
        .env(ENV_TIMEOUT, timeout_s.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(id) = id {
        cmd.env(ENV_ID, id.to_hex());
    }
    cmd.spawn().expect("spawn child")
}

/// Waits for each child (killing the rest after `limit`); returns (stdout+stderr,
/// time of exit).
fn wait_outputs(children: Vec<Child>, limit: Duration) -> Vec<(String, Instant)> {
    let t0 = Instant::now();
    let mut slots: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut outs: Vec<Option<(String, Instant)>> = slots.iter().map(|_| None).collect();
    loop {
        let mut running = 0;
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(ch) = slot else { continue };
            if ch.try_wait().expect("try_wait").is_some() || t0.elapsed() > limit {
                let at = Instant::now();
                let mut ch = slot.take().unwrap();
                let _ = ch.kill();
                let out = ch.wait_with_output().expect("output");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                outs[i] = Some((text, at));
            } else {
                running += 1;
            }
        }
        if running == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    outs.into_iter().map(|o| o.unwrap()).collect()
}

#[test]
fn root_killed_during_init_every_rank_fails_within_the_bound() {
    let timeout_s = 10;
    let bound = Duration::from_secs(timeout_s) + Duration::from_secs(15);
    assert!(TIMEOUT_SLACK < Duration::from_secs(15));
    let mut root = spawn_child("root0", None, 0, 4, timeout_s);
    let mut line = String::new();
    let mut out = BufReader::new(root.stdout.take().unwrap());
    // The harness may print "test child_role ... " on the same line.
    while !line.contains("ID ") {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("root output") > 0,
            "root0 printed no id"
        );
    }
    let id = UniqueId::from_hex(&line[line.find("ID ").unwrap() + 3..]).unwrap();
    // Ranks 1 and 2 report to the root and wait for its reply (rank 3 is not there yet,
    // so the root cannot answer), then the root dies.
    let early: Vec<Child> = (1..3)
        .map(|r| spawn_child("joiner", Some(&id), r, 4, timeout_s))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    root.kill().expect("kill the root");
    let killed = Instant::now();
    let _ = root.wait();
    // Rank 3 starts after the root died: its connects are refused until the timeout.
    let mut all = early;
    all.push(spawn_child("joiner", Some(&id), 3, 4, timeout_s));
    let outs = wait_outputs(all, Duration::from_secs(120));
    for (i, (text, at)) in outs.iter().enumerate() {
        let rank = i + 1;
        assert!(
            text.contains(&format!("rank {rank} failed after")),
            "rank {rank}:\n{text}"
        );
        assert!(
            text.contains("the root's reply from") || text.contains("connecting to the bootstrap root at"),
            "rank {rank} must name what it waited for:\n{text}"
        );
        let took = at.duration_since(killed);
        println!("rank {rank}, {took:?} after the kill: {}", text.trim());
        assert!(
            took < bound,
            "rank {rank} took {took:?} after the root died (bound {bound:?}):\n{text}"
        );
    }
    assert!(
        outs[2].0.contains("connecting to the bootstrap root at"),
        "rank 3 started after the root died:\n{}",
        outs[2].0
    );
}

/// Runs 4 ranks, rank 2 the victim; `act` is applied to the victim once every rank is
/// ready. Returns every survivor's line.
fn blame_run(act: fn(u32)) -> Vec<String> {
    let timeout_s = 3;
    let id = get_unique_id(&config(Duration::from_secs(timeout_s))).expect("id");
    let mut kids: Vec<Child> = (0..4)
        .map(|r| spawn_child(if r == 2 { "victim" } else { "gather" }, Some(&id), r, 4, timeout_s))
        .collect();
    // Wait for the victim's "ready" line, then act on it.
    let mut line = String::new();
    let mut victim_out = BufReader::new(kids[2].stdout.take().unwrap());
    let t0 = Instant::now();
    while !line.contains("rank 2 ready") {
        line.clear();
        if victim_out.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "victim never got ready");
    }
    assert!(line.contains("rank 2 ready"), "victim: {line}");
    act(kids[2].id());
    let victim = kids.remove(2);
    let outs = wait_outputs(kids, Duration::from_secs(120));
    // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
    unsafe {
        libc::kill(victim.id() as i32, libc::SIGKILL);
        libc::kill(victim.id() as i32, libc::SIGCONT);
    }
    let mut victim = victim;
    let _ = victim.wait();
    outs.into_iter().map(|(t, _)| t).collect()
}

fn check_blame(outs: &[String]) {
    for (i, text) in outs.iter().enumerate() {
        let rank = [0, 1, 3][i];
        println!("{}", text.trim());
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank} culprit")))
            .unwrap_or_else(|| panic!("rank {rank} printed no verdict:\n{text}"));
        assert!(
            line.contains("culprit Some(2) answered [0, 1, 3] missing [2]"),
            "rank {rank} must blame rank 2 and hear from every survivor:\n{text}"
        );
    }
}

#[test]
fn a_stopped_rank_is_named_by_every_survivor() {
    let outs = blame_run(|pid| {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    });
    check_blame(&outs);
}

#[test]
fn a_killed_rank_is_named_by_every_survivor() {
    let outs = blame_run(|pid| {
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    check_blame(&outs);
}
