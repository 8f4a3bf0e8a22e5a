//! The failure report every survivor agrees on: real processes over the socket
//! plugin on loopback. A rank that stops (SIGSTOP) or dies (SIGKILL) in the
//! middle of a run of AllReduces is named by every survivor's error, with the
//! same diagnosis text on every rank; so is one that stops between its
//! AllReduce and the barrier after it, where the survivors fail in the barrier.

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::Duration;

use coll_support::{Out, join, launch, role};
use ferroccl::{DataType, RedOp, Stream};

const WORKER: &str = "diag_worker";
const ENV_HOW: &str = "FERROCCL_TEST_DIAG_HOW";
const VICTIM: usize = 2;

/// Child entry point: AllReduces until one fails; the victim stops or kills
/// itself after a few (`stop`, `kill`: before an AllReduce; `barrier`: stops
/// after an AllReduce, before the barrier that follows each in that mode).
#[test]
fn diag_worker() {
    let Some(r) = role("diag") else { return };
    let how = std::env::var(ENV_HOW).expect("how");
    let comm = join(&r, Duration::from_secs(5));
    let count = 1 << 16;
    let send = vec![0u8; count * 4];
    let mut recv = vec![0u8; count * 4];
    for i in 0..100_000 {
        if r.rank == VICTIM && i == 20 && how != "barrier" {
            let sig = if how == "stop" { libc::SIGSTOP } else { libc::SIGKILL };
            // SAFETY: raising a signal on this process has no memory-safety preconditions.
            unsafe { libc::raise(sig) };
        }
        let s = Stream::new();
        // SAFETY: the buffers outlive the synchronize below.
        let e = unsafe {
            comm.all_reduce(
                send.as_ptr(),
                recv.as_mut_ptr(),
                count,
                DataType::Float32,
                RedOp::Sum,
                &s,
            )
        }
        .and_then(|_| s.synchronize())
        .and_then(|_| {
            if how != "barrier" {
                return Ok(());
            }
            if r.rank == VICTIM && i == 20 {
                // SAFETY: raising a signal on this process has no memory-safety preconditions.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            comm.barrier()
        });
        if let Err(e) = e {
            println!("RESULT error {}", e.to_string().replace('\n', " | "));
            comm.abort();
            return;
        }
    }
    println!("RESULT ok");
}

fn diagnosis(o: &Out) -> Option<String> {
    o.stdout
        .lines()
        .find_map(|l| l.split_once("diagnosis: ").map(|(_, d)| d.to_string()))
}

fn survivors_name_the_victim(how: &str) {
    let outs = launch(
        WORKER,
        "diag",
        4,
        &[0, 1, 2, 3],
        &[(ENV_HOW, how), ("FERROCCL_TIMEOUT_SEC", "5")],
        |_| Vec::new(),
        // The stopped victim is killed at this limit; survivors finish well before
        // (their 5 s watchdog plus at most 5 s of exchanging reports).
        Duration::from_secs(45),
    );
    let report: String = outs
        .iter()
        .map(|o| format!("--- rank {}:\n{}\n{}", o.rank, o.stdout, o.stderr))
        .collect();
    let survivors: Vec<&Out> = outs.iter().filter(|o| o.rank != VICTIM).collect();
    let first = diagnosis(survivors[0]).unwrap_or_else(|| panic!("{how}: no diagnosis:\n{report}"));
    eprintln!("{how}: {first}");
    assert!(
        first.contains(&format!("rank {VICTIM} stopped responding")),
        "{how}: the diagnosis does not name rank {VICTIM}:\n{report}"
    );
    for o in &survivors {
        assert_eq!(
            diagnosis(o).as_deref(),
            Some(first.as_str()),
            "{how}: survivors disagree:\n{report}"
        );
    }
}

#[test]
fn every_survivor_names_a_stopped_rank() {
    survivors_name_the_victim("stop");
}

#[test]
fn every_survivor_names_a_killed_rank() {
    survivors_name_the_victim("kill");
}

/// The survivors time out in `Comm::barrier`, not in a collective: a failed
/// barrier takes part in the same agreement, so each error carries the same
/// diagnosis (before, a rank failing there returned the bare bootstrap error
/// and could exit before the others' reports arrived).
#[test]
fn every_survivor_of_a_barrier_names_a_stopped_rank() {
    survivors_name_the_victim("barrier");
}
