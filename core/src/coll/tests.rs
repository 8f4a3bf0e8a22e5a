//! Schedule checks with threads standing in for ranks over the in-memory mock net
//! ([`crate::transport::mem`]) and the real bootstrap on loopback. The
//! multi-process tests over the socket plugin are in `core/tests/coll_*.rs`.

use std::sync::Arc;
use std::time::Duration;

use ferroccl_kernels::{DataType, RedOp, Scalar};

use super::check::TestOp;
use crate::bootstrap::{BootstrapConfig, get_unique_id};
use crate::comm::{Comm, CommConfig, PreloadedNet};
use crate::transport::mem::MemNet;

fn config(net: &Arc<MemNet>, buffsize: usize, nchannels: usize) -> CommConfig {
    CommConfig {
        timeout: Some(Duration::from_secs(20)),
        nchannels: Some(nchannels),
        buffsize: Some(buffsize),
        bootstrap: Some(BootstrapConfig::loopback(Duration::from_secs(20))),
        preloaded_net: Some(PreloadedNet(net.clone())),
        ..Default::default()
    }
}

/// Runs `f(comm)` on `n` threads.
fn with_comms(n: usize, buffsize: usize, nchannels: usize, f: impl Fn(&Comm) + Send + Sync + 'static) {
    let net = MemNet::new();
    let id = get_unique_id(&BootstrapConfig::loopback(Duration::from_secs(20))).expect("unique id");
    let f = Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (net, f) = (net.clone(), f.clone());
            std::thread::spawn(move || {
                let comm = Comm::init_rank(n, &id, r, config(&net, buffsize, nchannels)).expect("init");
                f(&comm);
                comm.destroy().expect("destroy");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("rank thread");
    }
}

fn run_op(comm: &Comm, top: TestOp, dtype: DataType, op: RedOp, count: usize, in_place: bool) -> usize {
    top.run_checked(comm, dtype, op, count, in_place, 1).expect("run")
}

fn ops() -> Vec<RedOp> {
    vec![RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg]
}

#[test]
fn all_collectives_small_buffers_threads() {
    for n in [1usize, 2, 3, 4] {
        with_comms(n, 64 << 10, 2, move |comm| {
            for count in [0usize, 1, 7, 1031, 20_000] {
                for dtype in [
                    DataType::Int8,
                    DataType::Float16,
                    DataType::Float32,
                    DataType::Uint64,
                    DataType::Bfloat16,
                ] {
                    let mut list = ops();
                    list.push(RedOp::PreMulSum(Scalar::from_f64(dtype, 2.0)));
                    for op in list {
                        for in_place in [false, true] {
                            for top in [TestOp::AllReduce, TestOp::ReduceScatter, TestOp::Reduce { root: n - 1 }] {
                                let w = run_op(comm, top, dtype, op, count, in_place);
                                assert_eq!(
                                    w,
                                    0,
                                    "{top:?} {dtype} {op} count {count} in_place {in_place} n {n} rank {}",
                                    comm.rank()
                                );
                            }
                        }
                    }
                    for in_place in [false, true] {
                        for top in [
                            TestOp::AllGather,
                            TestOp::Broadcast { root: n / 2 },
                            TestOp::SendRecv,
                            TestOp::AllToAll,
                        ] {
                            let w = run_op(comm, top, dtype, RedOp::Sum, count, in_place && top != TestOp::AllToAll);
                            assert_eq!(w, 0, "{top:?} {dtype} count {count} in_place {in_place} n {n}");
                        }
                    }
                }
            }
        });
    }
}
