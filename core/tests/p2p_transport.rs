//! The P2P transport across processes, on the mock device (no GPU needed):
//! ranks whose communicators bind a (mock) GPU (`CommConfig::cuda_dev`) connect
//! through P2P before SHM, as NCCL orders transports; the receiver's FIFO is a
//! mock device allocation whose export crosses to the sending process
//! (`mockdev::P2pAlloc`, standing in for a CUDA IPC handle), and collectives
//! over it give the right results. As on a GPU, the user buffers are device
//! memory (mock, `coll_support/mock_gpu.rs`) and every step runs on the mock
//! GPU's kernels, which reach the P2P FIFOs (`mockdev::p2p_contains`); nothing
//! stages through host memory. Host user buffers on a P2P connection work:
//! their steps run on the host and copy to and from the FIFO slots in GPU
//! memory through host mirrors (the mock GPU's copy engine,
//! `mockdev::fifo_copy_count`), the CPU never touching a slot; ranks on
//! device buffers and ranks on host buffers mix. `NCCL_P2P_DISABLE=1` (GPUs on different
//! bus ids) and unbound ranks fall back to SHM; a rank that dies in the middle
//! of connection setup fails its peer's init with an error naming it, not a
//! hang.

mod coll_support;
#[path = "coll_support/mock_gpu.rs"]
mod mock_gpu;

use std::sync::atomic::Ordering;
use std::time::Duration;

use coll_support::{Out, all_reduce_checked, ar_input, assert_all_ok, config, dump, launch, role, run_matrix};
use ferroccl::check::TestOp;
use ferroccl::mockdev::{MockGpu, declare_gpu};
use ferroccl::{Comm, CommConfig, DataType, RedOp, Stream};
use mock_gpu::{CALLS, run_device};

const WORKER: &str = "p2p_worker";
const LIMIT: Duration = Duration::from_secs(240);
/// `P2P_GPUS`: `same` (every rank on one mock GPU), `pair` (rank r on a GPU of
/// its own, both behind one PCIe switch), `none` (unbound ranks).
const ENV_GPUS: &str = "P2P_GPUS";
/// `P2P_BUFS`: `device` (user buffers in mock device memory of the rank's
/// GPU, every step on its kernels) or `host` (host user buffers).
const ENV_BUFS: &str = "P2P_BUFS";
/// `P2P_CUMEM`: `on` (the mock GPUs support cuMem with file descriptors),
/// `fail` (supported, but every cuMemCreate fails); unset: unsupported.
const ENV_CUMEM: &str = "P2P_CUMEM";

/// `P2P_PROTECT` (set): this process maps its mock P2P FIFOs `PROT_NONE`
/// (`mockdev::protect_p2p_fifos`): a CPU access to a slot kills it.
const ENV_PROTECT: &str = "P2P_PROTECT";

/// The sysfs path of mock GPU `i` (all behind one switch: distance PIX).
fn pci_path(i: usize) -> String {
    format!("/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0/0000:0{}:00.0", 4 + i)
}

/// Declares this rank's mock GPU (ordinal 0 in its process) as `P2P_GPUS`
/// says; the `CommConfig` binding it, and the GPU (`None`: unbound).
fn bind(rank: usize, timeout: Duration) -> (CommConfig, Option<MockGpu>) {
    let mode = std::env::var(ENV_GPUS).unwrap_or_default();
    let gpu = match mode.as_str() {
        "same" => 0,
        "pair" => rank,
        _ => return (config(timeout), None),
    };
    let g = MockGpu {
        ordinal: 0,
        cuda_cc: 90,
        gdr: false,
        dmabuf: false,
        pci_path: Some(pci_path(gpu)),
    };
    declare_gpu(g.clone());
    if std::env::var_os(ENV_PROTECT).is_some() {
        ferroccl::mockdev::protect_p2p_fifos();
    }
    match std::env::var(ENV_CUMEM).as_deref() {
        Ok("on") => ferroccl::mockdev::declare_cumem(true),
        Ok("fail") => ferroccl::mockdev::fail_cumem_create(),
        _ => {}
    }
    let c = CommConfig {
        cuda_dev: Some(0),
        ..config(timeout)
    };
    (c, Some(g))
}

fn init(rank: usize, nranks: usize, id: &ferroccl::UniqueId, timeout: Duration) -> (Comm, Option<MockGpu>) {
    let (c, g) = bind(rank, timeout);
    let comm = Comm::init_rank(nranks, id, rank, c).unwrap_or_else(|e| panic!("rank {rank}: init failed: {e}"));
    (comm, g)
}

/// Runs `f` (one operation on mock device buffers, returning its wrong
/// elements); a failure line unless its result is right, it ran steps on the
/// mock GPU (when `steps`: it moves data) and staged none.
fn on_gpu(what: &str, steps: bool, f: impl FnOnce() -> usize) -> Option<String> {
    let (d0, s0) = ferroccl::device_step_counts();
    let c0 = CALLS.load(Ordering::Relaxed);
    let wrong = f();
    let (d1, s1) = ferroccl::device_step_counts();
    let calls = CALLS.load(Ordering::Relaxed) - c0;
    let ran = d1 > d0 && calls > 0;
    if wrong > 0 || s1 != s0 || (steps && !ran) {
        return Some(format!(
            "{what}: {wrong} wrong, {} device steps, {calls} GPU calls, {} staged steps",
            d1 - d0,
            s1 - s0
        ));
    }
    None
}

/// The matrix of `coll_support::run_matrix` (dtypes `f32`, `i8`, `f64`; Sum
/// and Max; counts 0, 1, 1031, 40009) on mock device buffers of `gpu`, each
/// operation checked with [`on_gpu`]: `(failures, operations)`.
fn device_matrix(comm: &Comm, gpu: &MockGpu) -> (Vec<String>, usize) {
    let n = comm.nranks();
    let reducing = [TestOp::AllReduce, TestOp::ReduceScatter, TestOp::Reduce { root: n - 1 }];
    let moving = [
        TestOp::AllGather,
        TestOp::Broadcast { root: n / 2 },
        TestOp::SendRecv,
        TestOp::AllToAll,
    ];
    let (mut fails, mut ran) = (Vec::new(), 0);
    for count in [0usize, 1, 1031, 40009] {
        for dtype in [DataType::Float32, DataType::Int8, DataType::Float64] {
            let cases = reducing
                .iter()
                .flat_map(|&t| [RedOp::Sum, RedOp::Max].map(|o| (t, o)))
                .chain(moving.iter().map(|&t| (t, RedOp::Sum)));
            for (top, op) in cases {
                for in_place in [false, true] {
                    if in_place && !top.has_in_place() {
                        continue;
                    }
                    ran += 1;
                    let what = format!(
                        "rank {}: {top:?} {dtype} {op} count {count} in_place {in_place}",
                        comm.rank()
                    );
                    fails.extend(on_gpu(&what, count > 0, || {
                        run_device(comm, gpu, top, dtype, op, count, in_place, 1)
                    }));
                }
            }
        }
    }
    (fails, ran)
}

/// AllReduce, ReduceScatter, Broadcast and AllGather (f32, i8, f64; Sum and
/// Max; in and out of place; counts 0, 1, 1031, 2048 (exactly a step of f32
/// with `NCCL_BUFFSIZE=65536`: 8 KiB), 40009 and 2^18 (many FIFO turns)) on
/// mock device buffers of `gpu` (checked with [`on_gpu`]) or, without one, on
/// host buffers (`TestOp::run_checked`): `(failures, operations)`. Every rank
/// runs the same sequence with the same inputs (`check::fill`, seed 1), so
/// ranks on device and on host buffers mix.
fn host_or_device_matrix(comm: &Comm, gpu: Option<&MockGpu>) -> (Vec<String>, usize) {
    let n = comm.nranks();
    let tops = [
        TestOp::AllReduce,
        TestOp::ReduceScatter,
        TestOp::Broadcast { root: n - 1 },
        TestOp::AllGather,
    ];
    let (mut fails, mut ran) = (Vec::new(), 0);
    for count in [0usize, 1, 1031, 2048, 40009, 1 << 18] {
        for dtype in [DataType::Float32, DataType::Int8, DataType::Float64] {
            for top in tops {
                let reducing = matches!(top, TestOp::AllReduce | TestOp::ReduceScatter);
                let ops: &[RedOp] = if reducing {
                    &[RedOp::Sum, RedOp::Max]
                } else {
                    &[RedOp::Sum]
                };
                for &op in ops {
                    for in_place in [false, true] {
                        ran += 1;
                        let what = format!(
                            "rank {}: {top:?} {dtype} {op} count {count} in_place {in_place}",
                            comm.rank()
                        );
                        match gpu {
                            Some(g) => fails.extend(on_gpu(&what, count > 0, || {
                                run_device(comm, g, top, dtype, op, count, in_place, 1)
                            })),
                            None => match top.run_checked(comm, dtype, op, count, in_place, 1) {
                                Ok(0) => {}
                                Ok(w) => fails.push(format!("{what}: {w} wrong")),
                                Err(e) => {
                                    fails.push(format!("{what}: error {e}"));
                                    return (fails, ran);
                                }
                            },
                        }
                    }
                }
            }
        }
    }
    (fails, ran)
}

/// Child entry point for every scenario below.
#[test]
fn p2p_worker() {
    let device = std::env::var(ENV_BUFS).as_deref() == Ok("device");
    if let Some(r) = role("allreduce") {
        let (comm, gpu) = init(r.rank, r.nranks, &r.id, Duration::from_secs(60));
        let (fails, ran) = match (&gpu, device) {
            (Some(g), true) => {
                let mut fails = Vec::new();
                // Sizes below one step, across steps and slices, and several FIFO turns.
                for count in [1usize, 1031, 65536, 1 << 20] {
                    let what = format!("rank {}: AllReduce f32 count {count}", r.rank);
                    fails.extend(on_gpu(&what, true, || {
                        run_device(
                            &comm,
                            g,
                            TestOp::AllReduce,
                            DataType::Float32,
                            RedOp::Sum,
                            count,
                            false,
                            97,
                        )
                    }));
                }
                let (f, ran) = device_matrix(&comm, g);
                fails.extend(f);
                (fails, ran)
            }
            _ => {
                let s = Stream::new();
                for count in [1usize, 1031, 65536, 1 << 20] {
                    let send = ar_input(&r, count, 97);
                    let mut recv = vec![0f32; count];
                    all_reduce_checked(&comm, &r, &send, &mut recv, 97, &s);
                }
                run_matrix(
                    &comm,
                    &[DataType::Float32, DataType::Int8, DataType::Float64],
                    Some(&[RedOp::Sum, RedOp::Max]),
                    &[0, 1, 1031, 40009],
                )
            }
        };
        let (d, st) = ferroccl::device_step_counts();
        println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
        println!("rank {}: {d} device steps, {st} staged", r.rank);
        for (t, n) in comm.transports() {
            println!("transport {t} x{n}");
        }
        println!(
            "rank {}: cumem imports {}",
            r.rank,
            ferroccl::mockdev::cumem_import_count()
        );
        assert!(fails.is_empty(), "{}", fails.join("\n"));
        comm.destroy().expect("destroy");
        return;
    }
    if let Some(r) = role("matrix") {
        // The same operations on every rank, each rank on its own buffers:
        // mock device memory (`P2P_BUFS=device`) or host memory (otherwise).
        let (comm, gpu) = init(r.rank, r.nranks, &r.id, Duration::from_secs(60));
        let gpu = gpu.filter(|_| device);
        let (fails, ran) = host_or_device_matrix(&comm, gpu.as_ref());
        let (d, st) = ferroccl::device_step_counts();
        println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
        println!("rank {}: {d} device steps, {st} staged", r.rank);
        println!(
            "rank {}: fifo staged {}, fifo copies {}",
            r.rank,
            ferroccl::fifo_staged_steps(),
            ferroccl::mockdev::fifo_copy_count()
        );
        for (t, n) in comm.transports() {
            println!("transport {t} x{n}");
        }
        assert!(fails.is_empty(), "{}", fails.join("\n"));
        comm.destroy().expect("destroy");
        return;
    }
    if let Some(r) = role("threads") {
        // Both ranks in this process, as threads, on one mock GPU (`P2P_GPUS=same`).
        let handles: Vec<_> = (0..r.nranks)
            .map(|rank| {
                let mut me = r.clone();
                me.rank = rank;
                std::thread::spawn(move || {
                    let (comm, gpu) = init(rank, me.nranks, &me.id, Duration::from_secs(60));
                    let gpu = gpu.expect("P2P_GPUS=same binds a mock GPU");
                    let mut fails = Vec::new();
                    for count in [1usize, 1031, 1 << 20] {
                        let what = format!("rank {rank}: AllReduce f32 count {count}");
                        fails.extend(on_gpu(&what, true, || {
                            run_device(
                                &comm,
                                &gpu,
                                TestOp::AllReduce,
                                DataType::Float32,
                                RedOp::Sum,
                                count,
                                false,
                                89,
                            )
                        }));
                    }
                    comm.destroy().expect("destroy");
                    fails
                })
            })
            .collect();
        let fails: Vec<String> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("rank thread"))
            .collect();
        assert!(fails.is_empty(), "{}", fails.join("\n"));
        let (d, st) = ferroccl::device_step_counts();
        println!("threads: {d} device steps, {st} staged");
        println!("threads done");
        return;
    }
    if let Some(r) = role("hostbufs") {
        // Host user buffers: on a P2P connection the CPU would touch GPU memory.
        let (comm, _gpu) = init(r.rank, r.nranks, &r.id, Duration::from_secs(60));
        let count = 1031;
        let send = ar_input(&r, count, 97);
        let mut recv = vec![0f32; count];
        let s = Stream::new();
        // SAFETY: both buffers outlive the synchronize below.
        let res = unsafe {
            comm.all_reduce(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                count,
                DataType::Float32,
                RedOp::Sum,
                &s,
            )
        }
        .and_then(|()| s.synchronize());
        match res {
            Ok(()) => {
                let sum: f32 = (0..r.nranks).map(|x| x as f32).sum();
                let bad = (0..count)
                    .filter(|&i| recv[i] != (i % 97) as f32 * r.nranks as f32 + sum)
                    .count();
                println!("rank {}: host buffers ok, {bad} wrong", r.rank);
                comm.destroy().expect("destroy");
            }
            Err(e @ ferroccl::Error::InvalidUsage(_)) => {
                println!("rank {}: host buffers refused: {e}", r.rank);
                println!("rank {}: destroy after the error: {:?}", r.rank, comm.destroy());
            }
            Err(e) => println!("rank {}: host buffers failed otherwise: {e:?}", r.rank),
        }
        return;
    }
    if let Some(r) = role("die") {
        if r.rank == 1 {
            // Exits (status 3) when it opens rank 0's FIFO, in the middle of setup.
            ferroccl::mockdev::exit_on_p2p_import();
        }
        let (c, _) = bind(r.rank, Duration::from_secs(120));
        let e = Comm::init_rank(r.nranks, &r.id, r.rank, c)
            .err()
            .unwrap_or_else(|| panic!("rank {}: init succeeded with a peer that died in it", r.rank));
        println!("rank {} init failed: {e}", r.rank);
    }
}

/// The workers' common environment (small FIFO steps, 2 channels, INIT lines),
/// then `env`.
fn with_base_env<'a>(env: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![
        ("NCCL_BUFFSIZE", "65536"),
        ("FERROCCL_MIN_CHANNEL_BYTES", "4096"),
        ("NCCL_MAX_NCHANNELS", "2"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT"),
    ];
    all.extend_from_slice(env);
    all
}

fn run(role: &str, env: &[(&str, &str)]) -> Vec<Out> {
    let all = with_base_env(env);
    launch(WORKER, role, 2, &[0, 1], &all, |_| Vec::new(), LIMIT)
}

fn transport_lines(o: &Out) -> Vec<&str> {
    o.stdout.lines().filter(|l| l.starts_with("transport ")).collect()
}

/// Asserts the rank's summary line: steps ran on the mock GPU, none staged.
fn assert_on_gpu(o: &Out) {
    let line = o
        .stdout
        .lines()
        .find(|l| l.contains(" device steps, "))
        .unwrap_or_else(|| panic!("rank {}: no device steps line\n{}", o.rank, o.stdout));
    println!("{line}");
    let num = |w: &str| -> u64 {
        let i = line.find(w).unwrap_or_else(|| panic!("{line}"));
        let head = line[..i].trim_end();
        head[head.rfind(' ').map_or(0, |j| j + 1)..]
            .parse()
            .unwrap_or_else(|_| panic!("{line}"))
    };
    assert!(
        num(" device steps") > 0 && num(" staged") == 0,
        "rank {}: {line}",
        o.rank
    );
}

fn all_text(outs: &[Out]) -> String {
    outs.iter().map(|o| o.stdout.as_str()).collect()
}

/// Two processes on one (mock) GPU: the usual one-GPU setup. Every
/// connection is P2P/IPC, logged as NCCL logs it, and the results are right.
#[test]
fn two_processes_on_one_gpu_use_p2p_ipc() {
    let outs = run("allreduce", &[(ENV_GPUS, "same"), (ENV_BUFS, "device")]);
    assert_all_ok(&outs, "P2P on one mock GPU");
    let text = all_text(&outs);
    for want in [
        "Channel 00/0 : 0[0] -> 1[0] via P2P/IPC",
        "Channel 00/0 : 1[0] -> 0[0] via P2P/IPC",
        "Channel 01/0 : 0[0] -> 1[0] via P2P/IPC",
    ] {
        assert!(text.contains(want), "no line containing {want:?} in\n{}", dump(&outs));
    }
    assert!(!text.contains("via SHM"), "{}", dump(&outs));
    for o in &outs {
        println!("rank {}: {:?}", o.rank, transport_lines(o));
        assert!(o.stdout.contains(" 0 failures"), "rank {}: {}", o.rank, o.stdout);
        assert_on_gpu(o);
        let t = transport_lines(o);
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with("transport P2P/IPC")),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

/// Two GPUs behind one switch: P2P by default (device buffers, every step on
/// the mock GPU); `NCCL_P2P_DISABLE=1` caps the level at LOC, so the pair goes
/// through SHM (host buffers).
#[test]
fn p2p_disable_falls_back_to_shm() {
    let outs = run("allreduce", &[(ENV_GPUS, "pair"), (ENV_BUFS, "device")]);
    assert_all_ok(&outs, "P2P on two mock GPUs");
    for o in &outs {
        assert_on_gpu(o);
    }
    assert!(
        all_text(&outs).contains("Channel 00/0 : 0[0] -> 1[0] via P2P/IPC"),
        "{}",
        dump(&outs)
    );
    let outs = run("allreduce", &[(ENV_GPUS, "pair"), ("NCCL_P2P_DISABLE", "1")]);
    assert_all_ok(&outs, "NCCL_P2P_DISABLE=1 on two mock GPUs");
    let text = all_text(&outs);
    assert!(
        text.contains("Channel 00/0 : 0[0] -> 1[0] via SHM/direct/direct"),
        "{}",
        dump(&outs)
    );
    assert!(!text.contains("via P2P"), "{}", dump(&outs));
    for o in &outs {
        let t = transport_lines(o);
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with("transport SHM/")),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

/// Unbound ranks (host processes) use SHM, as before P2P existed.
#[test]
fn unbound_ranks_use_shm() {
    let outs = run("allreduce", &[(ENV_GPUS, "none")]);
    assert_all_ok(&outs, "unbound ranks");
    let text = all_text(&outs);
    assert!(
        text.contains("via SHM/direct/direct") && !text.contains("via P2P"),
        "{}",
        dump(&outs)
    );
}

/// Two ranks as threads of one process on one (mock) GPU: the receiver's
/// FIFO pointer is used directly (NCCL's `P2P/direct pointer`), and AllReduce
/// of device buffers is right, every step on the mock GPU.
#[test]
fn two_ranks_in_one_process_use_the_direct_pointer() {
    let all = [
        (ENV_GPUS, "same"),
        (ENV_BUFS, "device"),
        ("NCCL_BUFFSIZE", "65536"),
        ("NCCL_MAX_NCHANNELS", "2"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT"),
    ];
    let outs = launch(WORKER, "threads", 2, &[0], &all, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, "two ranks as threads");
    let text = all_text(&outs);
    assert!(text.contains("threads done"), "{}", dump(&outs));
    assert_on_gpu(&outs[0]);
    for want in [
        "Channel 00/0 : 0[0] -> 1[0] via P2P/direct pointer",
        "Channel 00/0 : 1[0] -> 0[0] via P2P/direct pointer",
    ] {
        assert!(text.contains(want), "no line containing {want:?} in\n{}", dump(&outs));
    }
    assert!(
        !text.contains("via SHM") && !text.contains("via P2P/IPC"),
        "{}",
        dump(&outs)
    );
}

/// Rank 1 dies while opening rank 0's P2P FIFO (legacy IPC handle, then a
/// cuMem descriptor it received): rank 0's init fails with an error naming
/// rank 1 (its death seen, or its FIFO gone), never a timeout.
#[test]
fn a_rank_that_dies_during_p2p_connect_is_named() {
    a_rank_dies_during_connect(&[(ENV_GPUS, "same")]);
    a_rank_dies_during_connect(&[(ENV_GPUS, "same"), (ENV_CUMEM, "on")]);
}

fn a_rank_dies_during_connect(env: &[(&str, &str)]) {
    let outs = run("die", env);
    let r1 = outs.iter().find(|o| o.rank == 1).expect("rank 1");
    assert_eq!(r1.code, Some(3), "rank 1 exits in its import\n{}", dump(&outs));
    let r0 = outs.iter().find(|o| o.rank == 0).expect("rank 0");
    assert!(r0.success, "{}", dump(&outs));
    let line = r0
        .stdout
        .lines()
        .find(|l| l.starts_with("rank 0 init failed: "))
        .unwrap_or_else(|| panic!("rank 0 printed no error\n{}", dump(&outs)));
    println!("{line}");
    assert!(line.contains("rank 1"), "{line}");
    assert!(
        !line.contains("still waiting after"),
        "a timeout, not the death: {line}"
    );
}

/// Host user buffers on a P2P connection (two processes, a mock GPU each,
/// behind one switch): the AllReduce is right on every rank, its steps
/// staged through host mirrors of the FIFO in GPU memory (the CPU never
/// touches it); with `NCCL_P2P_DISABLE=1` the same AllReduce goes over SHM
/// and is right. (Two ranks on one GPU stay on P2P whatever
/// `NCCL_P2P_DISABLE` says: distance LOC, as NCCL's `ncclTopoCheckP2p`.)
#[test]
fn host_buffers_on_p2p_work() {
    for env in [
        &[(ENV_GPUS, "pair")][..],
        &[(ENV_GPUS, "pair"), ("NCCL_P2P_DISABLE", "1")],
    ] {
        let p2p = env.len() == 1;
        let outs = run("hostbufs", env);
        assert_all_ok(&outs, "host buffers");
        let text = all_text(&outs);
        if p2p {
            assert!(
                text.contains("via P2P/IPC") && !text.contains("via SHM"),
                "{}",
                dump(&outs)
            );
        } else {
            assert!(text.contains("via SHM") && !text.contains("via P2P"), "{}", dump(&outs));
        }
        for o in &outs {
            assert!(
                o.stdout.contains(&format!("rank {}: host buffers ok, 0 wrong", o.rank)),
                "{}",
                dump(&outs)
            );
        }
    }
}

/// Parses `rank R: fifo staged S, fifo copies C` of a `matrix` rank.
fn fifo_counts(o: &Out) -> (u64, u64) {
    let want = format!("rank {}: fifo staged ", o.rank);
    let line = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(&want))
        .unwrap_or_else(|| panic!("rank {}: no fifo line\n{}", o.rank, o.stdout));
    let (s, c) = line
        .split_once(", fifo copies ")
        .unwrap_or_else(|| panic!("rank {}: {line}", o.rank));
    (s.trim().parse().expect("staged"), c.trim().parse().expect("copies"))
}

/// The `D device steps, S staged` of a rank's summary line.
fn step_counts(o: &Out) -> (u64, u64) {
    let line = o
        .stdout
        .lines()
        .find(|l| l.contains(" device steps, "))
        .unwrap_or_else(|| panic!("rank {}: no device steps line\n{}", o.rank, o.stdout));
    let rest = line.split_once(": ").map_or(line, |x| x.1);
    let (d, st) = rest.split_once(" device steps, ").expect("device steps");
    (
        d.trim().parse().expect("device steps"),
        st.trim_end_matches(" staged").trim().parse().expect("staged"),
    )
}

/// Runs the `matrix` role on `nranks` processes with `env`, the ranks in
/// `device` on mock device buffers and the others on host buffers; asserts
/// every connection went `via` (NCCL's INFO lines and the transport counts),
/// every result was right, the host-buffer ranks staged their steps through
/// host mirrors of the FIFOs (copies by the mock GPU's copy engine, none on
/// its kernels; their FIFO mappings `PROT_NONE`, so a CPU access to a slot
/// would have killed them) and the device-buffer ranks ran theirs on the
/// mock GPU.
fn matrix_over_p2p(nranks: usize, env: &[(&str, &str)], device: &[usize], via: &str) {
    let all = with_base_env(env);
    let ranks: Vec<usize> = (0..nranks).collect();
    let outs = launch(
        WORKER,
        "matrix",
        nranks,
        &ranks,
        &all,
        |r| {
            if device.contains(&r) {
                vec![(ENV_BUFS.to_string(), "device".to_string())]
            } else {
                // Host buffers: the CPU must never touch a FIFO slot.
                vec![(ENV_PROTECT.to_string(), "1".to_string())]
            }
        },
        LIMIT,
    );
    assert_all_ok(&outs, "matrix over P2P");
    let text = all_text(&outs);
    for r in 0..nranks {
        let want = format!("Channel 00/0 : {r}[0] -> {}[0] via {via}", (r + 1) % nranks);
        assert!(text.contains(&want), "no line containing {want:?} in\n{}", dump(&outs));
    }
    assert!(!text.contains("via SHM"), "{}", dump(&outs));
    for o in &outs {
        assert!(o.stdout.contains(" 0 failures"), "rank {}: {}", o.rank, o.stdout);
        let t = transport_lines(o);
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with(&format!("transport {via} x"))),
            "rank {}: {t:?}",
            o.rank
        );
        let (fifo_staged, copies) = fifo_counts(o);
        let (dev_steps, staged) = step_counts(o);
        println!(
            "rank {}: fifo staged {fifo_staged}, copies {copies}, device steps {dev_steps}, staged {staged}",
            o.rank
        );
        if device.contains(&o.rank) {
            assert!(
                dev_steps > 0 && staged == 0 && fifo_staged == 0 && copies == 0,
                "rank {} (device buffers)\n{}",
                o.rank,
                o.stdout
            );
        } else {
            assert!(
                fifo_staged > 0 && copies >= fifo_staged && dev_steps == 0 && staged == 0,
                "rank {} (host buffers)\n{}",
                o.rank,
                o.stdout
            );
        }
    }
}

/// Host buffers over P2P, two processes with a mock GPU each: AllReduce,
/// ReduceScatter, Broadcast and AllGather at every size (0, below a step,
/// exactly a step, not a multiple of it, many FIFO turns), in and out of
/// place, right on every rank, every step staged through host mirrors of the
/// FIFO slots in GPU memory.
#[test]
fn host_buffers_over_p2p_two_processes() {
    matrix_over_p2p(2, &[(ENV_GPUS, "pair")], &[], "P2P/IPC");
}

/// The same with three processes on one mock GPU whose FIFOs are cuMem
/// allocations passed as file descriptors (`P2P/CUMEM`).
#[test]
fn host_buffers_over_p2p_three_processes_cumem() {
    matrix_over_p2p(3, &[(ENV_GPUS, "same"), (ENV_CUMEM, "on")], &[], "P2P/CUMEM");
}

/// Ranks on device buffers and ranks on host buffers in one communicator
/// over P2P (two processes: rank 0 device; three: rank 1 host): every
/// result right; the device ranks' steps run on the mock GPU's kernels
/// straight on the FIFOs, the host ranks' steps copy through host mirrors.
#[test]
fn mixed_device_and_host_buffers_over_p2p() {
    // Small AllReduces may run as all-gather + local reduce
    // (`FERROCCL_SMALL_ALLREDUCE_BYTES`, default 256 KiB): every rank must pick
    // the same schedule whatever memory its own buffers are in.
    matrix_over_p2p(2, &[(ENV_GPUS, "pair")], &[0], "P2P/IPC");
    matrix_over_p2p(3, &[(ENV_GPUS, "same")], &[0, 2], "P2P/IPC");
}

/// The cuMem imports a rank's summary line reports.
fn cumem_imports(o: &Out) -> usize {
    let want = format!("rank {}: cumem imports ", o.rank);
    o.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("rank {}: no cumem imports line\n{}", o.rank, o.stdout))
}

/// Asserts every connection of every rank went `via` (NCCL's INFO line and
/// the transport counts) and the results were right on the mock GPU.
fn assert_all_via(outs: &[Out], via: &str) {
    let text = all_text(outs);
    for want in [
        format!("Channel 00/0 : 0[0] -> 1[0] via {via}"),
        format!("Channel 00/0 : 1[0] -> 0[0] via {via}"),
        format!("Channel 01/0 : 0[0] -> 1[0] via {via}"),
    ] {
        assert!(text.contains(&want), "no line containing {want:?} in\n{}", dump(outs));
    }
    for o in outs {
        assert!(o.stdout.contains(" 0 failures"), "rank {}: {}", o.rank, o.stdout);
        assert_on_gpu(o);
        let t = transport_lines(o);
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with(&format!("transport {via} x"))),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

/// Two processes on one mock GPU that supports cuMem, `NCCL_CUMEM_ENABLE`
/// at its default (-2, NCCL's auto): every receiver allocates its FIFO as a
/// cuMem allocation (a `memfd`), exports it as a file descriptor and sends
/// that over a real Unix socket with `SCM_RIGHTS` to the sending process,
/// which maps the descriptor it received (counted by the mock); the lines say
/// `via P2P/CUMEM` as NCCL's, and AllReduce and the matrix are right.
/// `NCCL_CUMEM_ENABLE=1` forces it on a GPU that does not claim support.
#[test]
fn two_processes_on_one_gpu_use_p2p_cumem() {
    let outs = run(
        "allreduce",
        &[(ENV_GPUS, "same"), (ENV_BUFS, "device"), (ENV_CUMEM, "on")],
    );
    assert_all_ok(&outs, "P2P/CUMEM on one mock GPU");
    assert_all_via(&outs, "P2P/CUMEM");
    assert!(!all_text(&outs).contains("via P2P/IPC"), "{}", dump(&outs));
    for o in &outs {
        assert!(
            cumem_imports(o) > 0,
            "rank {}: no descriptor imported\n{}",
            o.rank,
            o.stdout
        );
    }
    let outs = run(
        "allreduce",
        &[(ENV_GPUS, "pair"), (ENV_BUFS, "device"), ("NCCL_CUMEM_ENABLE", "1")],
    );
    assert_all_ok(&outs, "NCCL_CUMEM_ENABLE=1 on two mock GPUs");
    assert_all_via(&outs, "P2P/CUMEM");
}

/// `NCCL_CUMEM_ENABLE=0` on a GPU that supports cuMem: legacy CUDA IPC, with
/// an INFO line saying why, and no descriptor passed.
#[test]
fn cumem_enable_0_uses_legacy_ipc() {
    let outs = run(
        "allreduce",
        &[
            (ENV_GPUS, "same"),
            (ENV_BUFS, "device"),
            (ENV_CUMEM, "on"),
            ("NCCL_CUMEM_ENABLE", "0"),
        ],
    );
    assert_all_ok(&outs, "NCCL_CUMEM_ENABLE=0");
    assert_all_via(&outs, "P2P/IPC");
    let text = all_text(&outs);
    assert!(!text.contains("P2P/CUMEM"), "{}", dump(&outs));
    assert!(
        text.contains("P2P: cuMem not used (NCCL_CUMEM_ENABLE=0); using legacy CUDA IPC"),
        "{}",
        dump(&outs)
    );
    for o in &outs {
        assert_eq!(cumem_imports(o), 0, "rank {}", o.rank);
    }
}

/// cuMem enabled and supported but cuMemCreate fails: each receiver falls
/// back to legacy CUDA IPC with an INFO line naming the failure, the senders
/// follow the receivers' choice, and the results are right.
#[test]
fn a_failing_cumem_allocation_falls_back_to_legacy_ipc() {
    let outs = run(
        "allreduce",
        &[(ENV_GPUS, "same"), (ENV_BUFS, "device"), (ENV_CUMEM, "fail")],
    );
    assert_all_ok(&outs, "failing cuMemCreate");
    assert_all_via(&outs, "P2P/IPC");
    let text = all_text(&outs);
    assert!(!text.contains("P2P/CUMEM"), "{}", dump(&outs));
    assert!(
        text.contains("P2P: cuMem not used (cuMem allocation failed on GPU 0000:04:00.0: mock cuMem allocation: mock cuMemCreate failed"),
        "{}",
        dump(&outs)
    );
    for o in &outs {
        assert_eq!(cumem_imports(o), 0, "rank {}", o.rank);
    }
}
