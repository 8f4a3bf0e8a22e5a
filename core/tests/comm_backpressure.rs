//! Backpressure: with `FERROCCL_MAX_QUEUED_OPS` small, ranks that enqueue many
//! operations without synchronizing block in enqueue instead of queueing without
//! bound, and every operation still completes with the right data (real
//! processes over the socket plugin on loopback).

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::Duration;

use coll_support::{assert_all_ok, join, launch, role};
use ferroccl::coll::check::{self, TestOp};
use ferroccl::{DataType, RedOp, Stream};

const WORKER: &str = "backpressure_worker";
const OPS: usize = 300;
const COUNT: usize = 64;

/// Child entry point: enqueues `OPS` AllReduces on distinct buffers, then
/// synchronizes once and checks every result.
#[test]
fn backpressure_worker() {
    let Some(r) = role("backpressure") else { return };
    let comm = join(&r, Duration::from_secs(30));
    let dtype = DataType::Int32;
    let mut send = vec![0u8; COUNT * 4];
    check::fill(&mut send, dtype, &RedOp::Sum, r.rank, 1);
    let mut recvs: Vec<Vec<u8>> = (0..OPS).map(|_| vec![0u8; COUNT * 4]).collect();
    let s = Stream::new();
    for out in recvs.iter_mut() {
        // SAFETY: `send` and every output outlive the synchronize below.
        unsafe { comm.all_reduce(send.as_ptr(), out.as_mut_ptr(), COUNT, dtype, RedOp::Sum, &s) }.expect("enqueue");
    }
    s.synchronize().expect("synchronize");
    let want = check::expected(TestOp::AllReduce, dtype, &RedOp::Sum, r.nranks, r.rank, COUNT, 1).expect("expected");
    let wrong: usize = recvs.iter().map(|o| check::count_wrong(dtype, o, &want)).sum();
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
    let dtype = DataType::Int32;
    let sends: Vec<Vec<u8>> = (0..HANDOVER_OPS)
        .map(|i| {
            let mut b = vec![0u8; COUNT * 4];
            check::fill(&mut b, dtype, &RedOp::Sum, r.rank, i as u64);
            b
        })
        .collect();
    let mut recvs: Vec<Vec<u8>> = (0..HANDOVER_OPS).map(|_| vec![0u8; COUNT * 4]).collect();
    if r.rank == 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    let s = Stream::new();
    for (send, out) in sends.iter().zip(recvs.iter_mut()) {
        // SAFETY: every buffer outlives the synchronize below.
        unsafe { comm.all_reduce(send.as_ptr(), out.as_mut_ptr(), COUNT, dtype, RedOp::Sum, &s) }.expect("enqueue");
    }
    s.synchronize().expect("synchronize");
    for (i, out) in recvs.iter().enumerate() {
        let want = check::expected(TestOp::AllReduce, dtype, &RedOp::Sum, r.nranks, r.rank, COUNT, i as u64)
            .expect("expected");
        assert_eq!(
            check::count_wrong(dtype, out, &want),
            0,
            "rank {}: operation {i} wrong",
            r.rank
        );
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
