//! Collectives on CUDA device memory: two real processes sharing GPU 0, each
//! with `cuMemAlloc`ed send and receive buffers, over the socket plugin on
//! loopback (or shared memory). The socket plugin has no `NCCL_PTR_CUDA`, so
//! the steps run on GPU 0's kernels against the page-locked host FIFOs the
//! plugin sends from (`coll::exec`), or are staged through host memory where a
//! FIFO could not be registered (`coll::mem`); the results are checked against
//! the CPU reference (`ferroccl::check`). `device_steps_run_on_the_gpu_*`
//! also check that the steps ran on the GPU (`ferroccl::device_step_counts`).
//!
//! Two processes bound to GPU 0 (`CommConfig::cuda_dev`) connect through the
//! P2P transport instead (each receiver's FIFO in GPU memory: `via P2P/IPC`,
//! opened by the other process from its CUDA IPC handle, with
//! `NCCL_CUMEM_ENABLE=0`; `via P2P/CUMEM`, a `cuMemCreate` allocation whose
//! file descriptor crosses a Unix socket, with `NCCL_CUMEM_ENABLE=1`), and
//! AllReduce on device buffers up to 64 MiB equals the reference; so do
//! collectives on host buffers over P2P (their steps copy through host
//! mirrors of the FIFO slots in GPU memory).
//!
//! **Needs a GPU and NVRTC.** Without them the test prints `SKIPPED` with the
//! reason and passes; with `FERROCCL_REQUIRE_GPU=1` it fails instead (the
//! convention of `kernels/tests/cuda_device.rs`).

#![cfg(feature = "cuda")]

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::path::PathBuf;
use std::time::Duration;

use coll_support::{assert_all_ok, config, dump, join, launch, role};
use ferroccl::check;
use ferroccl::stream::Stream;
use ferroccl::{Comm, CommConfig, DataType, RedOp, TestOp};
use ferroccl_kernels::cuda::{CudaBackend, DeviceBuffer, NVRTC_LIB_ENV, nvrtc_load};

const WORKER: &str = "device_worker";

fn nvrtc_path() -> Option<PathBuf> {
    std::env::var_os(NVRTC_LIB_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// GPU 0 with its kernels, or why not.
fn gpu() -> Result<&'static CudaBackend, String> {
    nvrtc_load(nvrtc_path().as_deref())
        .and_then(|_| CudaBackend::for_device(0))
        .map_err(|e| e.to_string())
}

/// `Some(())` when a GPU is there; otherwise skips (or fails under
/// `FERROCCL_REQUIRE_GPU=1`).
fn require_gpu(test: &str) -> Option<()> {
    match gpu() {
        Ok(b) => {
            eprintln!("{test}: GPU 0, compute_{}", b.arch());
            Some(())
        }
        Err(e) => {
            assert!(
                std::env::var("FERROCCL_REQUIRE_GPU").as_deref() != Ok("1"),
                "FERROCCL_REQUIRE_GPU=1 but: {e}"
            );
            eprintln!("SKIPPED {test}: {e}");
            None
        }
    }
}

/// Runs `top` on device buffers and returns the number of wrong elements.
fn run_device(comm: &ferroccl::Comm, top: TestOp, dtype: DataType, op: RedOp, count: usize, in_place: bool) -> usize {
    let (n, r) = (comm.nranks(), comm.rank());
    let es = dtype.size();
    let (se, re) = top.buffer_elems(count, n);
    let mut input = vec![0u8; se * es];
    check::fill(&mut input, dtype, &op, r, 1);
    let rlen = if in_place { se.max(re) } else { re } * es;
    let mut sendbuf = DeviceBuffer::alloc(0, se * es).expect("device send buffer");
    let mut recvbuf = DeviceBuffer::alloc(0, rlen).expect("device receive buffer");
    recvbuf.write(0, &vec![0xEE; rlen]).expect("clear receive buffer");
    let (sp, rp): (*const u8, *mut u8) = if in_place {
        let off = if top == TestOp::AllGather { r * count * es } else { 0 };
        recvbuf.write(off, &input).expect("input");
        match top {
            TestOp::AllGather => (recvbuf.as_ptr().wrapping_add(off), recvbuf.as_ptr()),
            TestOp::ReduceScatter => (recvbuf.as_ptr(), recvbuf.as_ptr().wrapping_add(r * count * es)),
            _ => (recvbuf.as_ptr(), recvbuf.as_ptr()),
        }
    } else {
        sendbuf.write(0, &input).expect("input");
        (sendbuf.as_ptr(), recvbuf.as_ptr())
    };
    let s = Stream::new();
    // SAFETY: the device buffers outlive the synchronize below.
    unsafe {
        match top {
            TestOp::AllReduce => comm.all_reduce(sp, rp, count, dtype, op, &s),
            TestOp::AllGather => comm.all_gather(sp, rp, count, dtype, &s),
            TestOp::ReduceScatter => comm.reduce_scatter(sp, rp, count, dtype, op, &s),
            TestOp::Broadcast { root } => comm.broadcast(sp, rp, count, dtype, root, &s),
            TestOp::Reduce { root } => comm.reduce(sp, rp, count, dtype, op, root, &s),
            other => panic!("{other:?} is not run here"),
        }
    }
    .expect("enqueue");
    s.synchronize().expect("synchronize");
    let mut got = vec![0u8; rlen];
    recvbuf.read(0, &mut got).expect("read result");
    if top == TestOp::ReduceScatter && in_place {
        got = got[r * count * es..(r + 1) * count * es].to_vec();
    }
    match check::expected(top, dtype, &op, n, r, count, 1) {
        Some(want) => check::count_wrong(dtype, &got, &want),
        None => 0,
    }
}

/// Child entry point: the collective matrix on device buffers.
#[test]
fn device_worker() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::device_worker",
        std::time::Duration::from_secs(270),
        String::new,
    );
    let Some(r) = role("device") else { return };
    let comm = join(&r, Duration::from_secs(60));
    let mut wrong = 0;
    for count in [1usize, 1031, 1 << 20] {
        for dtype in [
            DataType::Float32,
            DataType::Int32,
            DataType::Bfloat16,
            DataType::Float16,
        ] {
            for op in [RedOp::Sum, RedOp::Max, RedOp::Avg] {
                for in_place in [false, true] {
                    for top in [TestOp::AllReduce, TestOp::ReduceScatter, TestOp::Reduce { root: 1 }] {
                        let w = run_device(&comm, top, dtype, op, count, in_place);
                        if w > 0 {
                            println!("WRONG {top:?} {dtype} {op} count {count} in_place {in_place}: {w}");
                        }
                        wrong += w;
                    }
                }
            }
            for in_place in [false, true] {
                for top in [TestOp::AllGather, TestOp::Broadcast { root: 0 }] {
                    let w = run_device(&comm, top, dtype, RedOp::Sum, count, in_place);
                    if w > 0 {
                        println!("WRONG {top:?} {dtype} count {count} in_place {in_place}: {w}");
                    }
                    wrong += w;
                }
            }
        }
    }
    comm.destroy().expect("destroy");
    assert_eq!(wrong, 0, "rank {}: wrong elements on device buffers", r.rank);
}

/// Two processes sharing GPU 0: every collective on device memory, staged
/// through host memory (the socket plugin lacks `NCCL_PTR_CUDA`), equals the
/// CPU reference.
#[test]
fn device_buffers_two_processes_match_the_reference() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::device_buffers_two_processes_match_the_reference",
        std::time::Duration::from_secs(330),
        String::new,
    );
    if role("device").is_some() || require_gpu("device_buffers_two_processes_match_the_reference").is_none() {
        return;
    }
    let outs = launch(
        WORKER,
        "device",
        2,
        &[0, 1],
        &[("NCCL_SHM_DISABLE", "1")],
        |_| Vec::new(),
        Duration::from_secs(300),
    );
    assert_all_ok(&outs, "device buffers, 2 processes");
}

/// Child entry point: AllReduce ordered with a CUDA stream of the caller's
/// (`Stream::on_device`): enqueue returns at once, and once the caller's stream
/// is synchronized (`cuStreamSynchronize`) the result is there.
#[test]
fn cuda_stream_worker() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::cuda_stream_worker",
        std::time::Duration::from_secs(270),
        String::new,
    );
    let Some(r) = role("cudastream") else { return };
    let comm = join(&r, Duration::from_secs(60));
    let (dtype, op, count) = (DataType::Float32, RedOp::Sum, 1usize << 20);
    let es = dtype.size();
    let mut input = vec![0u8; count * es];
    check::fill(&mut input, dtype, &op, r.rank, 1);
    let mut sendbuf = DeviceBuffer::alloc(0, count * es).expect("send buffer");
    let recvbuf = DeviceBuffer::alloc(0, count * es).expect("receive buffer");
    sendbuf.write(0, &input).expect("input");
    let user = gpu().expect("GPU").context().new_stream().expect("cuStreamCreate");
    // SAFETY: `user` lives until the end of this function, after its synchronize.
    let dev = unsafe {
        ferroccl::stream::CudaStream::from_raw(user.cu_stream() as *mut std::ffi::c_void, 0, Duration::from_secs(120))
    };
    let s = Stream::new().on_device(std::sync::Arc::new(dev));
    // SAFETY: the device buffers outlive the synchronizes below.
    unsafe { comm.all_reduce(sendbuf.as_ptr(), recvbuf.as_ptr(), count, dtype, op, &s) }.expect("enqueue");
    user.synchronize().expect("cuStreamSynchronize");
    let mut got = vec![0u8; count * es];
    recvbuf.read(0, &mut got).expect("read result");
    let want = check::expected(TestOp::AllReduce, dtype, &op, r.nranks, r.rank, count, 1).expect("expected");
    let wrong = check::count_wrong(dtype, &got, &want);
    s.synchronize().expect("synchronize");
    comm.destroy().expect("destroy");
    assert_eq!(
        wrong, 0,
        "rank {}: wrong elements after the CUDA stream synchronized",
        r.rank
    );
}

/// Two processes: collectives ordered with each caller's CUDA stream.
#[test]
fn collectives_ordered_with_a_cuda_stream() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::collectives_ordered_with_a_cuda_stream",
        std::time::Duration::from_secs(330),
        String::new,
    );
    if role("cudastream").is_some() || require_gpu("collectives_ordered_with_a_cuda_stream").is_none() {
        return;
    }
    let outs = launch(
        "cuda_stream_worker",
        "cudastream",
        2,
        &[0, 1],
        &[("NCCL_SHM_DISABLE", "1")],
        |_| Vec::new(),
        Duration::from_secs(300),
    );
    assert_all_ok(&outs, "CUDA stream ordering, 2 processes");
}

/// Child entry point: a communicator bound to GPU 0 (as NCCL binds the
/// current device), AllReduce (float32, sum) of device buffers at sizes up to
/// 64 MiB, out of place and in place.
#[test]
fn p2p_worker() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::p2p_worker",
        std::time::Duration::from_secs(270),
        String::new,
    );
    let Some(r) = role("p2p") else { return };
    let cfg = CommConfig {
        cuda_dev: Some(0),
        ..config(Duration::from_secs(60))
    };
    let comm = Comm::init_rank(r.nranks, &r.id, r.rank, cfg).unwrap_or_else(|e| panic!("rank {}: init: {e}", r.rank));
    let mut wrong = 0;
    for count in [1usize, 1031, 1 << 20, 16 << 20] {
        for in_place in [false, true] {
            let w = run_device(&comm, TestOp::AllReduce, DataType::Float32, RedOp::Sum, count, in_place);
            if w > 0 {
                println!("WRONG AllReduce float32 sum count {count} in_place {in_place}: {w}");
            }
            wrong += w;
        }
    }
    for (t, n) in comm.transports() {
        println!("transport {t} x{n}");
    }
    comm.destroy().expect("destroy");
    assert_eq!(wrong, 0, "rank {}: wrong elements over P2P", r.rank);
}

/// Two processes on GPU 0, bound, through P2P with `NCCL_CUMEM_ENABLE=cumem`:
/// every connection goes `via` (NCCL's INFO line, e.g. `Channel 00/0 : 0[0] ->
/// 1[0] via P2P/IPC`), the transport counts say so, and AllReduce of device
/// buffers up to 64 MiB equals the reference.
fn p2p_two_processes_on_one_gpu(test: &str, cumem: &str, via: &str) {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        &format!("coll_device::{test}"),
        std::time::Duration::from_secs(330),
        String::new,
    );
    if role("p2p").is_some() || require_gpu(test).is_none() {
        return;
    }
    let outs = launch(
        "p2p_worker",
        "p2p",
        2,
        &[0, 1],
        &[
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_SUBSYS", "INIT"),
            ("NCCL_CUMEM_ENABLE", cumem),
        ],
        |_| Vec::new(),
        Duration::from_secs(300),
    );
    assert_all_ok(&outs, &format!("{via} on GPU 0, 2 processes"));
    let text: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    for want in [
        format!("Channel 00/0 : 0[0] -> 1[0] via {via}"),
        format!("Channel 00/0 : 1[0] -> 0[0] via {via}"),
    ] {
        assert!(text.contains(&want), "no line containing {want:?} in\n{}", dump(&outs));
    }
    for o in &outs {
        let t: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("transport ")).collect();
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with(&format!("transport {via} x"))),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

/// Legacy CUDA IPC (`NCCL_CUMEM_ENABLE=0`): `cuIpcGetMemHandle` /
/// `cuIpcOpenMemHandle`, lines `via P2P/IPC`.
#[test]
fn p2p_ipc_two_processes_on_one_gpu() {
    p2p_two_processes_on_one_gpu("p2p_ipc_two_processes_on_one_gpu", "0", "P2P/IPC");
}

/// cuMem (`NCCL_CUMEM_ENABLE=1`): each receiver's FIFO from `cuMemCreate`,
/// exported as a POSIX file descriptor sent over a Unix socket to the other
/// process, which imports and maps it; lines `via P2P/CUMEM` as NCCL's.
#[test]
fn p2p_cumem_two_processes_on_one_gpu() {
    p2p_two_processes_on_one_gpu("p2p_cumem_two_processes_on_one_gpu", "1", "P2P/CUMEM");
}

/// Child entry point: a communicator bound to GPU 0 (P2P), collectives on
/// **host** buffers (AllReduce, ReduceScatter, Broadcast, AllGather; float32
/// sum; 0, 1, 1031, 2^20 and 2^22 elements; in and out of place), checked
/// against the reference; prints the steps that staged the FIFO slots in GPU
/// memory through host mirrors (`ferroccl::fifo_staged_steps`).
#[test]
fn p2p_host_worker() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::p2p_host_worker",
        std::time::Duration::from_secs(270),
        String::new,
    );
    let Some(r) = role("p2phost") else { return };
    let cfg = CommConfig {
        cuda_dev: Some(0),
        ..config(Duration::from_secs(60))
    };
    let comm = Comm::init_rank(r.nranks, &r.id, r.rank, cfg).unwrap_or_else(|e| panic!("rank {}: init: {e}", r.rank));
    let n = r.nranks;
    let mut wrong = 0;
    for count in [0usize, 1, 1031, 1 << 20, 4 << 20] {
        for top in [
            TestOp::AllReduce,
            TestOp::ReduceScatter,
            TestOp::Broadcast { root: n - 1 },
            TestOp::AllGather,
        ] {
            for in_place in [false, true] {
                let w = top
                    .run_checked(&comm, DataType::Float32, RedOp::Sum, count, in_place, 1)
                    .unwrap_or_else(|e| panic!("rank {}: {top:?} count {count} in_place {in_place}: {e}", r.rank));
                if w > 0 {
                    println!("WRONG {top:?} float32 sum count {count} in_place {in_place}: {w}");
                }
                wrong += w;
            }
        }
    }
    let (d, st) = ferroccl::device_step_counts();
    println!(
        "rank {}: fifo staged {}, device steps {d}, staged {st}",
        r.rank,
        ferroccl::fifo_staged_steps()
    );
    for (t, n) in comm.transports() {
        println!("transport {t} x{n}");
    }
    comm.destroy().expect("destroy");
    assert_eq!(wrong, 0, "rank {}: wrong elements over P2P with host buffers", r.rank);
}

/// Two processes on GPU 0 through P2P (NCCL's default `NCCL_CUMEM_ENABLE`)
/// with **host** buffers: every connection `via P2P/`, the results equal the
/// reference, and each rank's steps copied through host mirrors of the FIFO
/// slots in GPU memory (device to host, host to the peer's device memory),
/// no step on the kernels.
#[test]
fn p2p_host_buffers_two_processes_on_one_gpu() {
    let test = "p2p_host_buffers_two_processes_on_one_gpu";
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        &format!("coll_device::{test}"),
        std::time::Duration::from_secs(330),
        String::new,
    );
    if role("p2phost").is_some() || require_gpu(test).is_none() {
        return;
    }
    let outs = launch(
        "p2p_host_worker",
        "p2phost",
        2,
        &[0, 1],
        &[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT")],
        |_| Vec::new(),
        Duration::from_secs(300),
    );
    assert_all_ok(&outs, "host buffers over P2P on GPU 0, 2 processes");
    let text: String = outs.iter().map(|o| o.stdout.as_str()).collect();
    assert!(
        text.contains("Channel 00/0 : 0[0] -> 1[0] via P2P/") && !text.contains("via SHM"),
        "{}",
        dump(&outs)
    );
    for o in &outs {
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank {}: fifo staged ", o.rank)))
            .unwrap_or_else(|| panic!("rank {}: no summary\n{}", o.rank, dump(&outs)));
        println!("{line}");
        let staged: u64 = line
            .split_once("fifo staged ")
            .and_then(|(_, x)| x.split(',').next())
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(
            staged > 0 && line.contains(", device steps 0, staged 0"),
            "rank {}: {line}",
            o.rank
        );
    }
}

/// Child entry point: AllReduce (sum) of float32 and bfloat16 device buffers,
/// sizes on both sides of a FIFO step, in and out of place; every step must
/// run on GPU 0's kernels reading and writing the registered host FIFOs
/// directly (`ferroccl::device_step_counts`), none staged.
#[test]
fn device_steps_worker() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "coll_device::device_steps_worker",
        std::time::Duration::from_secs(270),
        String::new,
    );
    let Some(r) = role("devsteps") else { return };
    let comm = join(&r, Duration::from_secs(60));
    // Warm-up: the connections are set up and their FIFOs registered.
    let mut wrong = run_device(&comm, TestOp::AllReduce, DataType::Float32, RedOp::Sum, 1031, false);
    let mut bad = Vec::new();
    for dtype in [DataType::Float32, DataType::Bfloat16] {
        for count in [1usize, 1031, (1 << 16) + 5, (1 << 20) + 3, 4 << 20] {
            for in_place in [false, true] {
                let (d0, s0) = ferroccl::device_step_counts();
                let w = run_device(&comm, TestOp::AllReduce, dtype, RedOp::Sum, count, in_place);
                let (d1, s1) = ferroccl::device_step_counts();
                println!(
                    "AllReduce {dtype} count {count} in_place {in_place}: {w} wrong, {} device steps, {} staged",
                    d1 - d0,
                    s1 - s0
                );
                wrong += w;
                if d1 == d0 || s1 != s0 {
                    bad.push(format!(
                        "{dtype} count {count} in_place {in_place}: {} device steps, {} staged",
                        d1 - d0,
                        s1 - s0
                    ));
                }
            }
        }
    }
    comm.destroy().expect("destroy");
    assert_eq!(wrong, 0, "rank {}: wrong elements with device steps", r.rank);
    assert!(
        bad.is_empty(),
        "rank {}: steps not on the GPU:\n{}",
        r.rank,
        bad.join("\n")
    );
}

fn device_steps(test: &str, env: &[(&str, &str)]) {
    let _watchdog =
        ferroccl_test_watchdog::Watchdog::arm(&format!("coll_device::{test}"), Duration::from_secs(330), String::new);
    if role("devsteps").is_some() || require_gpu(test).is_none() {
        return;
    }
    let mut all = vec![
        // Every AllReduce as the ring (no all-gather into host scratch, no
        // tree connected on first use).
        ("FERROCCL_SMALL_ALLREDUCE_BYTES", "0"),
        ("NCCL_ALGO", "Ring"),
    ];
    all.extend_from_slice(env);
    let outs = launch(
        "device_steps_worker",
        "devsteps",
        2,
        &[0, 1],
        &all,
        |_| Vec::new(),
        Duration::from_secs(300),
    );
    for o in &outs {
        println!("rank {}:\n{}", o.rank, o.stdout);
    }
    assert_all_ok(&outs, test);
}

/// Two processes on GPU 0 over shared memory: AllReduce steps run as kernels
/// on the GPU against the page-locked shared segments.
#[test]
fn device_steps_run_on_the_gpu_over_shm() {
    device_steps("device_steps_run_on_the_gpu_over_shm", &[]);
}

/// Two processes on GPU 0 over the socket plugin (shared memory off): the
/// kernels read and write the page-locked network FIFOs the plugin sends from.
#[test]
fn device_steps_run_on_the_gpu_over_the_network() {
    device_steps(
        "device_steps_run_on_the_gpu_over_the_network",
        &[("NCCL_SHM_DISABLE", "1")],
    );
}
