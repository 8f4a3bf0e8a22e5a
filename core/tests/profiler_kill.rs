//! A rank killed in the middle of an AllReduce, with the recording C profiler
//! (`testing/profiler-rec`, `ncclProfiler_v6`) loaded in every process, over
//! the socket plugin on loopback with shared memory disabled (every connection
//! NET, with proxy ops, steps and socket events). The survivors' collectives
//! fail with an error within a bounded time, they abort their communicators,
//! and their profilers' logs show a sane life: every call names a handle the
//! profiler gave, no event is stopped twice, parents start before children,
//! `finalize` comes once and last, and every event started was stopped — the
//! events of the failed collective included (the runtime stops the open
//! ProxyStep and ProxyOp events when it tears the connections down). NCCL does
//! not promise as much: reference `docs/reference/nccl-graph-tuning.md` §6.4 notes events it
//! never stops, which profilers must tolerate (the conformance suite's
//! `profiler.unfinished` check).

mod coll_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use coll_support::{all_reduce_until_error, dump, fresh_dir, join, launch, role};

const WORKER: &str = "profkill_worker";
/// Rank that dies.
const VICTIM: usize = 1;

/// Child entry point (does nothing when run as a normal test).
#[test]
fn profkill_worker() {
    let Some(r) = role("profkill") else { return };
    println!("rank {} pid {}", r.rank, std::process::id());
    let comm = join(&r, Duration::from_secs(10));
    let (err, iters) = all_reduce_until_error(&comm, 1 << 20, |iters| {
        if r.rank == VICTIM && iters == 1 {
            // Every rank is past init and the first AllReduce: the victim dies
            // while the next ones are in flight (not during init on a slow machine).
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(150));
                // SAFETY: raising a signal on ourselves.
                unsafe { libc::raise(libc::SIGKILL) };
            });
        }
    });
    println!("rank {} got error after {iters} iterations: {err}", r.rank);
    comm.abort();
    println!("rank {} aborted", r.rank);
}

#[derive(Debug, Default)]
struct Ev {
    ty: u64,
    parent: u64,
    line: usize,
    stops: usize,
}

/// What is wrong in one recording log (`testing/profiler-rec` format), and the
/// number of events by type.
fn audit(file: &Path) -> (Vec<String>, BTreeMap<u64, usize>) {
    let text = std::fs::read_to_string(file).expect("read log");
    let mut bad = Vec::new();
    let mut evs: BTreeMap<u64, Ev> = BTreeMap::new();
    let mut finalized_at = None;
    let field = |parts: &[&str], k: &str| -> Option<String> {
        parts
            .iter()
            .find_map(|p| p.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .map(str::to_owned)
    };
    for (n, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line.split(' ').collect();
        if let Some(f) = finalized_at {
            bad.push(format!("line {n}: a call after finalize (line {f}): {line}"));
        }
        let id = || field(&parts, "id").and_then(|v| v.parse::<u64>().ok());
        match parts[0] {
            "init" => {}
            "finalize" => finalized_at = Some(n),
            "start" => {
                let Some(id) = id() else {
                    bad.push(format!("line {n}: {line}"));
                    continue;
                };
                let parent = field(&parts, "parent").and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                    bad.push(format!("line {n}: parent is not a handle the profiler gave: {line}"));
                    0
                });
                if parent != 0 && !evs.contains_key(&parent) {
                    bad.push(format!("line {n}: parent {parent} not started before: {line}"));
                }
                let ty = field(&parts, "type").and_then(|v| v.parse().ok()).unwrap_or(0);
                evs.insert(
                    id,
                    Ev {
                        ty,
                        parent,
                        line: n,
                        stops: 0,
                    },
                );
            }
            "state" | "stop" => match id().and_then(|i| evs.get_mut(&i)) {
                Some(e) if parts[0] == "stop" => {
                    e.stops += 1;
                    if e.stops > 1 {
                        bad.push(format!("line {n}: event stopped {} times: {line}", e.stops));
                    }
                }
                Some(e) if e.stops > 0 => bad.push(format!("line {n}: state of a stopped event: {line}")),
                Some(_) => {}
                None => bad.push(format!("line {n}: a handle the profiler never gave: {line}")),
            },
            _ => bad.push(format!("line {n}: unexpected: {line}")),
        }
    }
    if finalized_at.is_none() {
        bad.push("finalize was never called".into());
    }
    let mut by_type = BTreeMap::new();
    for (id, e) in &evs {
        *by_type.entry(e.ty).or_default() += 1;
        if e.stops == 0 {
            bad.push(format!(
                "event {id} (type {}, parent {}, line {}) was never stopped",
                e.ty, e.parent, e.line
            ));
        }
    }
    (bad, by_type)
}

#[test]
fn killed_rank_mid_allreduce_leaves_survivors_profilers_consistent() {
    let dir = fresh_dir("profkill");
    let d = dir.to_string_lossy().into_owned();
    let env = [
        ("NCCL_PROFILER_PLUGIN", "recv6"),
        ("PROFREC_DIR", d.as_str()),
        ("NCCL_SHM_DISABLE", "1"),
    ];
    let outs = launch(
        WORKER,
        "profkill",
        3,
        &[0, 1, 2],
        &env,
        |_| Vec::new(),
        Duration::from_secs(120),
    );
    let victim = outs.iter().find(|o| o.rank == VICTIM).expect("victim");
    assert!(!victim.success, "the victim should have been killed:\n{}", dump(&outs));
    for o in outs.iter().filter(|o| o.rank != VICTIM) {
        assert!(o.success, "survivor rank {} failed:\n{}", o.rank, dump(&outs));
        assert!(
            o.stdout.contains("got error") && o.stdout.contains("aborted"),
            "survivor rank {} saw no error or did not abort:\n{}",
            o.rank,
            dump(&outs)
        );
        // The configured timeout is 10 s; generous slack for a loaded machine.
        let after = o.elapsed.saturating_sub(victim.elapsed);
        assert!(
            after < Duration::from_secs(40),
            "survivor rank {} needed {after:?}",
            o.rank
        );
    }
    // One log per process; the victim's is cut short by SIGKILL and not audited.
    let logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(logs.len(), 3, "{logs:?}");
    let survivors: Vec<String> = outs
        .iter()
        .filter(|o| o.rank != VICTIM)
        .map(|o| {
            let line = o.stdout.lines().find(|l| l.contains(" pid ")).expect("pid line");
            line.rsplit(' ').next().expect("pid").to_owned()
        })
        .collect();
    let mut bad = Vec::new();
    let mut audited = 0;
    for f in &logs {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if !survivors.iter().any(|p| name == format!("rec-{p}.log")) {
            continue;
        }
        audited += 1;
        let (b, by_type) = audit(f);
        println!("{name}: events by type {by_type:?}");
        // The failed collective was in flight: its proxy ops and steps were started.
        assert!(
            by_type.get(&8).copied().unwrap_or(0) > 0 && by_type.get(&16).copied().unwrap_or(0) > 0,
            "{name}: no ProxyOp/ProxyStep events: {by_type:?}"
        );
        bad.extend(b.into_iter().map(|x| format!("{name}: {x}")));
    }
    assert_eq!(audited, 2, "the survivors' logs ({survivors:?}) in {logs:?}");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
