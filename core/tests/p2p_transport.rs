//! The P2P transport across processes, on the mock device (no GPU needed):
//! ranks whose communicators bind a (mock) GPU (`CommConfig::cuda_dev`) connect
//! through P2P before SHM, as NCCL orders transports; the receiver's FIFO is a
//! mock device allocation whose export crosses to the sending process
//! (`mockdev::P2pAlloc`, standing in for a CUDA IPC handle), and collectives
//! over it give the right results. `NCCL_P2P_DISABLE=1` (GPUs on different
//! bus ids) and unbound ranks fall back to SHM; a rank that dies in the middle
//! of connection setup fails its peer's init with an error naming it, not a
//! hang.

mod coll_support;

use std::time::Duration;

use coll_support::{Out, all_reduce_checked, ar_input, assert_all_ok, config, dump, launch, role, run_matrix};
use ferroccl::mockdev::{MockGpu, declare_gpu};
use ferroccl::{Comm, CommConfig, DataType, RedOp, Stream};

const WORKER: &str = "p2p_worker";
const LIMIT: Duration = Duration::from_secs(240);
/// `P2P_GPUS`: `same` (every rank on one mock GPU), `pair` (rank r on a GPU of
/// its own, both behind one PCIe switch), `none` (unbound ranks).
const ENV_GPUS: &str = "P2P_GPUS";

/// The sysfs path of mock GPU `i` (all behind one switch: distance PIX).
fn pci_path(i: usize) -> String {
    format!("/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0/0000:0{}:00.0", 4 + i)
}

/// Declares this rank's mock GPU (ordinal 0 in its process) as `P2P_GPUS`
/// says; the `CommConfig` binding it.
fn bind(rank: usize, timeout: Duration) -> CommConfig {
    let mode = std::env::var(ENV_GPUS).unwrap_or_default();
    let gpu = match mode.as_str() {
        "same" => 0,
        "pair" => rank,
        _ => return config(timeout),
    };
    declare_gpu(MockGpu {
        ordinal: 0,
        cuda_cc: 90,
        gdr: false,
        dmabuf: false,
        pci_path: Some(pci_path(gpu)),
    });
    CommConfig {
        cuda_dev: Some(0),
        ..config(timeout)
    }
}

/// Child entry point for every scenario below.
#[test]
fn p2p_worker() {
    if let Some(r) = role("allreduce") {
        let comm = Comm::init_rank(r.nranks, &r.id, r.rank, bind(r.rank, Duration::from_secs(60)))
            .unwrap_or_else(|e| panic!("rank {}: init failed: {e}", r.rank));
        let s = Stream::new();
        // Sizes below one step, across steps and slices, and several FIFO turns.
        for count in [1usize, 1031, 65536, 1 << 20] {
            let send = ar_input(&r, count, 97);
            let mut recv = vec![0f32; count];
            all_reduce_checked(&comm, &r, &send, &mut recv, 97, &s);
        }
        let (fails, ran) = run_matrix(
            &comm,
            &[DataType::Float32, DataType::Int8, DataType::Float64],
            Some(&[RedOp::Sum, RedOp::Max]),
            &[0, 1, 1031, 40009],
        );
        println!("rank {}: {ran} operations, {} failures", r.rank, fails.len());
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
                    let comm = Comm::init_rank(me.nranks, &me.id, rank, bind(rank, Duration::from_secs(60)))
                        .unwrap_or_else(|e| panic!("rank {rank}: init failed: {e}"));
                    let s = Stream::new();
                    for count in [1usize, 1031, 1 << 20] {
                        let send = ar_input(&me, count, 89);
                        let mut recv = vec![0f32; count];
                        all_reduce_checked(&comm, &me, &send, &mut recv, 89, &s);
                    }
                    comm.destroy().expect("destroy");
                })
            })
            .collect();
        for h in handles {
            h.join().expect("rank thread");
        }
        println!("threads done");
        return;
    }
    if let Some(r) = role("die") {
        if r.rank == 1 {
            // Exits (status 3) when it opens rank 0's FIFO, in the middle of setup.
            ferroccl::mockdev::exit_on_p2p_import();
        }
        let e = Comm::init_rank(r.nranks, &r.id, r.rank, bind(r.rank, Duration::from_secs(120)))
            .err()
            .unwrap_or_else(|| panic!("rank {}: init succeeded with a peer that died in it", r.rank));
        println!("rank {} init failed: {e}", r.rank);
    }
}

fn run(role: &str, env: &[(&str, &str)]) -> Vec<Out> {
    let mut all = vec![
        ("NCCL_BUFFSIZE", "65536"),
        ("FERROCCL_MIN_CHANNEL_BYTES", "4096"),
        ("NCCL_MAX_NCHANNELS", "2"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT"),
    ];
    all.extend_from_slice(env);
    launch(WORKER, role, 2, &[0, 1], &all, |_| Vec::new(), LIMIT)
}

fn transport_lines(o: &Out) -> Vec<&str> {
    o.stdout.lines().filter(|l| l.starts_with("transport ")).collect()
}

fn all_text(outs: &[Out]) -> String {
    outs.iter().map(|o| o.stdout.as_str()).collect()
}

/// Two processes on one (mock) GPU: the usual one-GPU setup. Every
/// connection is P2P/IPC, logged as NCCL logs it, and the results are right.
#[test]
fn two_processes_on_one_gpu_use_p2p_ipc() {
    let outs = run("allreduce", &[(ENV_GPUS, "same")]);
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
        assert!(o.stdout.contains("0 failures"), "rank {}: {}", o.rank, o.stdout);
        let t = transport_lines(o);
        assert!(
            !t.is_empty() && t.iter().all(|l| l.starts_with("transport P2P/IPC")),
            "rank {}: {t:?}",
            o.rank
        );
    }
}

/// Two GPUs behind one switch: P2P by default; `NCCL_P2P_DISABLE=1` caps the
/// level at LOC, so the pair goes through SHM.
#[test]
fn p2p_disable_falls_back_to_shm() {
    let outs = run("allreduce", &[(ENV_GPUS, "pair")]);
    assert_all_ok(&outs, "P2P on two mock GPUs");
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
/// is right.
#[test]
fn two_ranks_in_one_process_use_the_direct_pointer() {
    let all = [
        (ENV_GPUS, "same"),
        ("NCCL_BUFFSIZE", "65536"),
        ("NCCL_MAX_NCHANNELS", "2"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT"),
    ];
    let outs = launch(WORKER, "threads", 2, &[0], &all, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, "two ranks as threads");
    let text = all_text(&outs);
    assert!(text.contains("threads done"), "{}", dump(&outs));
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

/// Rank 1 dies while opening rank 0's P2P FIFO: rank 0's init fails with an
/// error naming rank 1 (its death seen, or its FIFO gone), never a timeout.
#[test]
fn a_rank_that_dies_during_p2p_connect_is_named() {
    let outs = run("die", &[(ENV_GPUS, "same")]);
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
