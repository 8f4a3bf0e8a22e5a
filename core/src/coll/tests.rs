//! Schedule checks with threads standing in for ranks over the in-memory mock net
//! ([`crate::transport::mem`]) and the real bootstrap on loopback. The
//! multi-process tests over the socket plugin are in `core/tests/coll_*.rs`.

use std::sync::Arc;
use std::time::Duration;

use ferroccl_kernels::{DataType, RedOp, Scalar};

use crate::bootstrap::{BootstrapConfig, get_unique_id};
use crate::check::{self, TestOp};
use crate::comm::{Comm, CommConfig, PreloadedNet};
use crate::stream::Stream;
use crate::transport::mem::MemNet;
use crate::{group_end, group_start};

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
pub(super) fn with_comms(n: usize, buffsize: usize, nchannels: usize, f: impl Fn(&Comm) + Send + Sync + 'static) {
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

/// The mock device of the staging tests (`PROT_NONE` pages reached only
/// through `/proc/self/mem`, a backend that only copies), shared with the
/// multi-process tests' mock devices.
#[path = "../../tests/coll_support/mock_mem.rs"]
mod mock_mem;

use mock_mem::{COPY_ONLY, ProcMem, ProtNone};

/// `len` bytes (at least a page) of mock device memory, declared to this
/// thread's enqueues and unmapped on drop.
fn mock_buf(len: usize) -> ProtNone {
    let b = ProtNone::new(len);
    super::mem::test_device::declare(b.ptr, b.len, &COPY_ONLY);
    b
}

/// Runs `top` on mock device buffers (in or out of place) and counts wrong elements.
fn run_op_device(comm: &Comm, top: TestOp, dtype: DataType, op: RedOp, count: usize, in_place: bool) -> usize {
    let (n, r) = (comm.nranks(), comm.rank());
    let es = dtype.size();
    let (se, re) = top.buffer_elems(count, n);
    let mut input = vec![0u8; se * es];
    check::fill(&mut input, dtype, &op, r, 1);
    let sendbuf = mock_buf(se * es);
    // In place, the output buffer holds the input too (ReduceScatter: all of it).
    let rlen = if in_place { se.max(re) } else { re } * es;
    let recvbuf = mock_buf(rlen);
    ProcMem::write(recvbuf.ptr, &vec![0xEE; rlen]);
    let (sp, rp): (*const u8, *mut u8) = if in_place {
        let off = match top {
            TestOp::AllGather => r * count * es,
            _ => 0,
        };
        ProcMem::write(recvbuf.ptr.wrapping_add(off), &input);
        match top {
            TestOp::AllGather => (recvbuf.ptr.wrapping_add(off), recvbuf.ptr),
            TestOp::ReduceScatter => (recvbuf.ptr, recvbuf.ptr.wrapping_add(r * count * es)),
            _ => (recvbuf.ptr, recvbuf.ptr),
        }
    } else {
        ProcMem::write(sendbuf.ptr, &input);
        (sendbuf.ptr, recvbuf.ptr)
    };
    let s = Stream::new();
    // SAFETY: the mappings outlive the synchronize below.
    unsafe {
        match top {
            TestOp::AllReduce => comm.all_reduce(sp, rp, count, dtype, op, &s),
            TestOp::AllGather => comm.all_gather(sp, rp, count, dtype, &s),
            TestOp::ReduceScatter => comm.reduce_scatter(sp, rp, count, dtype, op, &s),
            TestOp::Broadcast { root } => comm.broadcast(sp, rp, count, dtype, root, &s),
            TestOp::Reduce { root } => comm.reduce(sp, rp, count, dtype, op, root, &s),
            TestOp::SendRecv => {
                group_start();
                comm.send(sp, count, dtype, (r + 1) % n, &s).unwrap();
                comm.recv(rp, count, dtype, (r + n - 1) % n, &s).unwrap();
                group_end()
            }
            TestOp::AllToAll => unreachable!("not run here"),
        }
    }
    .expect("enqueue");
    s.synchronize().expect("synchronize");
    let mut got = ProcMem::read(recvbuf.ptr, rlen);
    if top == TestOp::ReduceScatter && in_place {
        got = got[r * count * es..(r + 1) * count * es].to_vec();
    }
    match check::expected(top, dtype, &op, n, r, count, 1) {
        Some(want) => check::count_wrong(dtype, &got, &want),
        None => 0,
    }
}

/// Device memory the host cannot touch, with a plugin that cannot either (the
/// mock net has no `NCCL_PTR_CUDA`): every collective is staged through host
/// bounce buffers by the device's backend, and gives the CPU reference's
/// results. The buffers are `PROT_NONE`: one dereference by the executor or the
/// plugin would kill the test with SIGSEGV. Sizes cover one step, several steps
/// and several FIFO rounds (64 KiB buffers), with the registration threshold
/// crossed (user buffers of host memory would be registered at these sizes).
#[test]
fn collectives_on_unreachable_memory_are_staged() {
    for n in [1usize, 2, 3] {
        with_comms(n, 64 << 10, 2, move |comm| {
            for count in [1usize, 1031, 50_000] {
                for dtype in [DataType::Int32, DataType::Float16, DataType::Float32] {
                    let list = [RedOp::Sum, RedOp::Avg, RedOp::PreMulSum(Scalar::from_f64(dtype, 2.0))];
                    for op in list {
                        for in_place in [false, true] {
                            for top in [TestOp::AllReduce, TestOp::ReduceScatter, TestOp::Reduce { root: n - 1 }] {
                                let w = run_op_device(comm, top, dtype, op, count, in_place);
                                assert_eq!(w, 0, "{top:?} {dtype} {op} count {count} in_place {in_place} n {n}");
                            }
                        }
                    }
                    for in_place in [false, true] {
                        for top in [TestOp::AllGather, TestOp::Broadcast { root: n / 2 }, TestOp::SendRecv] {
                            let w = run_op_device(comm, top, dtype, RedOp::Sum, count, in_place);
                            assert_eq!(w, 0, "{top:?} {dtype} count {count} in_place {in_place} n {n}");
                        }
                    }
                }
            }
            super::mem::test_device::clear();
        });
    }
}

/// A **mock** device stream: items run in order, only when the test calls
/// [`MockStream::run_all`] (so "not yet" is deterministic, not a timing guess).
#[derive(Debug, Default)]
struct MockStream {
    items: std::sync::Mutex<std::collections::VecDeque<MockItem>>,
}

enum MockItem {
    Kernel(Box<dyn FnOnce() + Send>),
    Wait(crate::stream::OpDone),
}

impl std::fmt::Debug for MockItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MockItem::Kernel(_) => "Kernel",
            MockItem::Wait(_) => "Wait",
        })
    }
}

impl MockStream {
    fn kernel(&self, f: impl FnOnce() + Send + 'static) {
        self.items.lock().unwrap().push_back(MockItem::Kernel(Box::new(f)));
    }

    fn len(&self) -> usize {
        self.items.lock().unwrap().len()
    }

    /// Runs every item in order; a wait blocks (bounded) until its operation is done.
    fn run_all(&self) {
        loop {
            let item = self.items.lock().unwrap().pop_front();
            match item {
                None => return,
                Some(MockItem::Kernel(f)) => f(),
                Some(MockItem::Wait(done)) => {
                    let r = done
                        .wait(Duration::from_secs(60))
                        .expect("operation finished within 60 s");
                    r.expect("operation succeeded");
                }
            }
        }
    }
}

impl crate::stream::DeviceStream for MockStream {
    fn host_callback(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), crate::Error> {
        self.items.lock().unwrap().push_back(MockItem::Kernel(f));
        Ok(())
    }
    fn wait_for(&self, done: crate::stream::OpDone) -> Result<(), crate::Error> {
        self.items.lock().unwrap().push_back(MockItem::Wait(done));
        Ok(())
    }
}

/// Stream-ordered execution on a (mock) device stream: enqueue returns while the
/// caller's earlier work has not run; the operation waits for it (its input is
/// written by that work, so running early would give wrong results); the
/// caller's later work waits for the operation (it reads the output).
#[test]
fn operations_are_ordered_with_the_callers_device_stream() {
    use std::sync::Mutex;
    for n in [1usize, 2, 3] {
        with_comms(n, 64 << 10, 2, move |comm| {
            let (r, dtype, op, count) = (comm.rank(), DataType::Float32, RedOp::Sum, 20_000usize);
            let mut want_in = vec![0u8; count * dtype.size()];
            check::fill(&mut want_in, dtype, &op, r, 1);
            let input = Arc::new(Mutex::new(vec![0u8; want_in.len()]));
            let output = Arc::new(Mutex::new(vec![0u8; want_in.len()]));
            let seen = Arc::new(Mutex::new(Vec::new()));
            let dev = Arc::new(MockStream::default());
            let s = Stream::new().on_device(dev.clone());
            // The caller's earlier work: writes the input.
            {
                let (input, w) = (input.clone(), want_in.clone());
                dev.kernel(move || input.lock().unwrap().copy_from_slice(&w));
            }
            let (ip, op_) = (input.lock().unwrap().as_ptr(), output.lock().unwrap().as_mut_ptr());
            // SAFETY: the buffers live until the end of this closure, after the
            // stream is synchronized; the input is written before the gate opens.
            unsafe { comm.all_reduce(ip, op_, count, dtype, op, &s) }.expect("enqueue returns at once");
            // The caller's later work: reads the output.
            {
                let (output, seen) = (output.clone(), seen.clone());
                dev.kernel(move || *seen.lock().unwrap() = output.lock().unwrap().clone());
            }
            // Nothing on the device stream has run: the operation's gate is closed.
            assert_eq!(dev.len(), 4, "input kernel, gate, wait, output kernel");
            assert!(
                !s.query(),
                "rank {r}: the operation ran before the caller's earlier work"
            );
            dev.run_all();
            s.synchronize().expect("synchronize");
            let want = check::expected(TestOp::AllReduce, dtype, &op, n, r, count, 1).expect("expected");
            let got = seen.lock().unwrap().clone();
            assert_eq!(check::count_wrong(dtype, &got, &want), 0, "rank {r} of {n}");
        });
    }
}

/// The small AllReduce of a few floats over shared memory: the all-gather +
/// reduce variant (one exchange of each rank's block), its steps sent inline in
/// one cache line of the FIFO (`transport::shm`, counted by
/// `INLINE_PUSHES`), and every rank's result the same bits: the blocks reduced
/// in rank order, `((v0 + v1) + v2) + …`, whose rounding depends on that order
/// for these values (1e8 + 1 rounds to 1e8 in f32).
#[test]
fn small_all_reduce_is_one_inline_exchange_with_the_same_bits_on_every_rank() {
    use std::sync::atomic::Ordering;
    const ITERS: u64 = 50;
    for n in [2usize, 3] {
        let before = crate::transport::shm::INLINE_PUSHES.load(Ordering::Relaxed);
        let results = Arc::new(std::sync::Mutex::new(Vec::new()));
        let res = results.clone();
        with_comms(n, 64 << 10, 1, move |comm| {
            let vals = |r: usize| -> [f32; 2] {
                match r {
                    0 => [1.0e8, 0.1],
                    1 => [1.0, 0.2],
                    _ => [-1.0e8, 0.3],
                }
            };
            let send: Vec<u8> = vals(comm.rank()).iter().flat_map(|v| v.to_ne_bytes()).collect();
            let mut recv = vec![0u8; send.len()];
            for _ in 0..ITERS {
                comm.all_reduce_sync(&send, &mut recv, DataType::Float32, RedOp::Sum)
                    .expect("AllReduce");
            }
            let d = comm
                .tuning()
                .last(crate::tune::Func::AllReduce)
                .expect("a decision was made");
            assert!(d.allgather_reduce, "rank {}: {}", comm.rank(), d.describe());
            let mut want = vals(0);
            for r in 1..comm.nranks() {
                for (w, v) in want.iter_mut().zip(vals(r)) {
                    *w += v;
                }
            }
            let got: Vec<u32> = recv
                .chunks(4)
                .map(|c| u32::from_ne_bytes(c.try_into().expect("4 bytes")))
                .collect();
            let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "rank {} of {}", comm.rank(), comm.nranks());
            res.lock().expect("results").push(got);
        });
        let results = results.lock().expect("results");
        assert_eq!(results.len(), n);
        assert!(results.iter().all(|r| *r == results[0]), "{n} ranks: {results:?}");
        // Each rank sends at least one step per operation (its block), inline.
        let pushed = crate::transport::shm::INLINE_PUSHES.load(Ordering::Relaxed) - before;
        assert!(pushed >= n as u64 * ITERS, "{n} ranks: {pushed} inline steps");
    }
}
