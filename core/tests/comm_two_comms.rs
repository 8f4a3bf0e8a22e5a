//! Two communicators in one process (each rank a process): the second unique id
//! is broadcast over the first communicator; operations on both are interleaved
//! on one stream and also issued concurrently from two threads.

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::Duration;

use coll_support::{assert_all_ok, config, join, launch, role, run_op};
use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::check::TestOp;
use ferroccl::{Comm, DataType, RedOp, Stream, UniqueId};

#[test]
fn two_comms_worker() {
    let Some(r) = role("two") else { return };
    let timeout = Duration::from_secs(60);
    let a = join(&r, timeout);
    // Second id from rank 0, broadcast over the first communicator.
    let mut idb = if r.rank == 0 {
        get_unique_id(&BootstrapConfig::loopback(timeout))
            .expect("id")
            .as_bytes()
            .to_vec()
    } else {
        vec![0u8; 128]
    };
    a.broadcast_sync(&mut idb, DataType::Uint8, 0).expect("broadcast id");
    let id = UniqueId::from_bytes(idb.try_into().expect("128 bytes"));
    // The second communicator numbers ranks in reverse.
    let rb = r.nranks - 1 - r.rank;
    let b = Comm::init_rank(r.nranks, &id, rb, config(timeout)).expect("init second comm");
    assert_eq!(b.rank(), rb);

    // Interleaved on one stream.
    let s = Stream::new();
    let n = 4099;
    let ones = vec![1u8; n * 4];
    let ia: Vec<u8> = (0..n as i32).flat_map(|v| v.to_ne_bytes()).collect();
    let mut oa = vec![0u8; n * 4];
    let mut ob = vec![0u8; n * 4];
    // SAFETY: buffers outlive the synchronize.
    unsafe {
        a.all_reduce(ia.as_ptr(), oa.as_mut_ptr(), n, DataType::Int32, RedOp::Sum, &s)
            .unwrap();
        b.all_reduce(ones.as_ptr(), ob.as_mut_ptr(), n * 4, DataType::Uint8, RedOp::Sum, &s)
            .unwrap();
    }
    s.synchronize().expect("sync");
    for (i, c) in oa.chunks(4).enumerate() {
        assert_eq!(i32::from_ne_bytes(c.try_into().unwrap()), i as i32 * r.nranks as i32);
    }
    assert!(ob.iter().all(|&v| v as usize == r.nranks));

    // Concurrently from two threads, full checks.
    std::thread::scope(|sc| {
        let ta = sc.spawn(|| {
            for top in [TestOp::AllReduce, TestOp::AllGather, TestOp::AllToAll] {
                assert_eq!(
                    run_op(&a, top, DataType::Float32, RedOp::Sum, 5003, false).unwrap(),
                    0,
                    "comm a {top:?}"
                );
            }
        });
        let tb = sc.spawn(|| {
            for top in [TestOp::ReduceScatter, TestOp::Broadcast { root: 0 }, TestOp::SendRecv] {
                assert_eq!(
                    run_op(&b, top, DataType::Int64, RedOp::Max, 3001, true).unwrap(),
                    0,
                    "comm b {top:?}"
                );
            }
        });
        ta.join().expect("thread a");
        tb.join().expect("thread b");
    });
    b.destroy().expect("destroy b");
    a.destroy().expect("destroy a");
    println!("rank {} ok", r.rank);
}

#[test]
fn two_communicators_in_one_process() {
    let outs = launch(
        "two_comms_worker",
        "two",
        3,
        &[0, 1, 2],
        &[],
        |_| Vec::new(),
        Duration::from_secs(120),
    );
    assert_all_ok(&outs, "two communicators");
    assert!(outs.iter().all(|o| o.stdout.contains("ok")));
}
