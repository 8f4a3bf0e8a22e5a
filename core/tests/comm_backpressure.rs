//! Backpressure: with `FERROCCL_MAX_QUEUED_OPS` small, ranks that enqueue many
//! operations without synchronizing block in enqueue instead of queueing without
//! bound, and every operation still completes with the right data (real
//! processes over the socket plugin on loopback).

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::Duration;

use coll_support::{Role, assert_all_ok, join, launch, role};
use ferroccl::check::{self, TestOp};
use ferroccl::{Comm, DataType, RedOp, Stream};

const WORKER: &str = "backpressure_worker";
const OPS: usize = 300;
const COUNT: usize = 64;

/// Enqueues on one stream an Int32 sum AllReduce of `COUNT` elements per
/// seed of `seeds`, each from its own input (filled with that seed) into its
/// own output, synchronizes once, and returns each output's wrong elements.
fn all_reduce_each(r: &Role, comm: &Comm, seeds: &[u64]) -> Vec<usize> {
    let dtype = DataType::Int32;
    let sends: Vec<Vec<u8>> = seeds
        .iter()
        .map(|&seed| {
            let mut b = vec![0u8; COUNT * 4];
            check::fill(&mut b, dtype, &RedOp::Sum, r.rank, seed);
            b
        })
        .collect();
    let mut recvs: Vec<Vec<u8>> = seeds.iter().map(|_| vec![0u8; COUNT * 4]).collect();
    let s = Stream::new();
    for (send, out) in sends.iter().zip(recvs.iter_mut()) {
        // SAFETY: every buffer outlives the synchronize below.
        unsafe { comm.all_reduce(send.as_ptr(), out.as_mut_ptr(), COUNT, dtype, RedOp::Sum, &s) }.expect("enqueue");
    }
    s.synchronize().expect("synchronize");
    seeds
        .iter()
        .zip(&recvs)
        .map(|(&seed, out)| {
            let want = check::expected(TestOp::AllReduce, dtype, &RedOp::Sum, r.nranks, r.rank, COUNT, seed)
                .expect("expected");
            check::count_wrong(dtype, out, &want)
        })
        .collect()
}

/// Child entry point: enqueues `OPS` AllReduces on distinct buffers, then
/// synchronizes once and checks every result.
#[test]
fn backpressure_worker() {
    let Some(r) = role("backpressure") else { return };
    let comm = join(&r, Duration::from_secs(30));
    let wrong: usize = all_reduce_each(&r, &comm, &[1; OPS]).iter().sum();
    assert_eq!(wrong, 0, "rank {}: {wrong} wrong elements", r.rank);
    comm.destroy().expect("destroy");
}

#[test]
fn many_unsynchronized_operations_complete_with_a_small_queue() {
    let outs = launch(
        WORKER,
        "backpressure",
        3,
        &[0, 1, 2],
        &[("FERROCCL_MAX_QUEUED_OPS", "2")],
        |_| Vec::new(),
        Duration::from_secs(120),
    );
    assert_all_ok(&outs, "300 queued AllReduces with FERROCCL_MAX_QUEUED_OPS=2");
}

const HANDOVER_WORKER: &str = "handover_worker";
const HANDOVER_OPS: usize = 40;

/// Child entry point: rank 1 starts late, so rank 0's first operation, run on
/// its enqueuing thread, outlasts the spin window and is handed to the proxy
/// thread as it stands, with the next operations queued behind it. Each
/// operation reduces its own input (seed `i`), so any reordering between the
/// ranks shows up as wrong data.
#[test]
fn handover_worker() {
    let Some(r) = role("handover") else { return };
    let comm = join(&r, Duration::from_secs(30));
    if r.rank == 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    let seeds: Vec<u64> = (0..HANDOVER_OPS as u64).collect();
    for (i, wrong) in all_reduce_each(&r, &comm, &seeds).into_iter().enumerate() {
        assert_eq!(wrong, 0, "rank {}: operation {i} wrong", r.rank);
    }
    comm.destroy().expect("destroy");
}

#[test]
fn work_handed_over_by_the_enqueuing_thread_keeps_its_order() {
    let outs = launch(
        HANDOVER_WORKER,
        "handover",
        2,
        &[0, 1],
        // The enqueuing thread runs work itself only with a spin window (the
        // default is none where ranks outnumber CPUs).
        &[("FERROCCL_PROXY_SPIN_US", "50")],
        |_| Vec::new(),
        Duration::from_secs(120),
    );
    assert_all_ok(&outs, "40 AllReduces, the first handed over to the proxy thread");
}
