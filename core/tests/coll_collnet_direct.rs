//! CollNetDirect AllReduce end to end (NCCL 2.30.7 `src/device/all_reduce.h`,
//! CollNetDirect part; pattern from `src/graph/connect.cc` `connectCollNet`):
//! real processes on simulated hosts (`NCCL_HOSTID`), the in-tree CollNet
//! plugin (`libnccl_net_collnet_socket.so`, its own aggregation over TCP),
//! `NCCL_COLLNET_ENABLE=1` and `NCCL_ALGO=CollnetDirect`.
//!
//! Layouts: 2 hosts x 1 rank (every rank a head with nobody below), 2 hosts x 2
//! ranks (two heads per host, each reducing the other's part), 3 + 2 ranks
//! (two heads per host; the larger host's third rank only scatters and
//! gathers), 2 hosts x 4 ranks (4 heads, each with 3 ranks below). Every
//! result is checked against the CPU reference over several datatypes and
//! every reduction, in and out of place, at sizes of one element, a few
//! chunks and several loop steps; every rank's decision is CollNetDirect, its
//! `NCCL_DEBUG=INFO` tuning line says so and it logged its `CollNetDirect
//! channel` pattern line with the expected head count. And CollNetChain
//! forced on the same connections (2 heads per host connected).

mod coll_support;

use std::time::Duration;

use coll_support::{Out, all_ops, assert_all_ok, dump, join, launch, role, run_op, target_dir};
use ferroccl::check::TestOp;
use ferroccl::tune::{Algorithm, Func};
use ferroccl::{DataType, RedOp};

const WORKER: &str = "collnet_direct_worker";
const LIMIT: Duration = Duration::from_secs(300);
/// Which case the worker runs (`full` or `small`).
const ENV_CASE: &str = "FERROCCL_TEST_CN_CASE";
/// `chain`: the worker expects CollNetChain (forced) instead of CollNetDirect;
/// `fallback`: neither (CollNet could not be set up).
const ENV_ALGO: &str = "FERROCCL_TEST_CN_ALGO";

/// One rank: the AllReduce matrix, each result checked, then the decision.
#[test]
fn collnet_direct_worker() {
    let Some(r) = role(WORKER) else { return };
    let comm = join(&r, Duration::from_secs(90));
    let full = std::env::var(ENV_CASE).is_ok_and(|v| v == "full");
    let want = match std::env::var(ENV_ALGO).unwrap_or_default().as_str() {
        "chain" => Some(Algorithm::CollNetChain),
        "fallback" => None,
        _ => Some(Algorithm::CollNetDirect),
    };
    let dtypes: &[DataType] = if full {
        &[
            DataType::Float32,
            DataType::Float64,
            DataType::Int32,
            DataType::Uint8,
            DataType::Float16,
            DataType::Int64,
        ]
    } else {
        &[DataType::Float32, DataType::Int32]
    };
    // One element; a few chunks; several loop steps of every head (the
    // 1 MiB FIFO step is the chunk).
    let counts: &[usize] = if full { &[1, 1000, 600_001] } else { &[1, 1000, 300_001] };
    let mut fails = Vec::new();
    for &count in counts {
        for &dtype in dtypes {
            let ops: Vec<RedOp> = if full || dtype == DataType::Float32 {
                all_ops(dtype)
            } else {
                vec![RedOp::Sum, RedOp::Max]
            };
            for op in ops {
                for in_place in [false, true] {
                    match run_op(&comm, TestOp::AllReduce, dtype, op, count, in_place) {
                        Ok(0) => {}
                        Ok(w) => fails.push(format!("{dtype} {op} count {count} in_place {in_place}: {w} wrong")),
                        Err(e) => panic!("rank {}: {dtype} {op} count {count}: {e}", r.rank),
                    }
                    let d = comm.tuning().last(Func::AllReduce).expect("a decision");
                    match want {
                        Some(w) => assert_eq!(d.algo, w, "rank {}: {dtype} {op}", r.rank),
                        None => assert!(
                            !matches!(d.algo, Algorithm::CollNetChain | Algorithm::CollNetDirect),
                            "rank {}: {dtype} {op}: {:?} without CollNet",
                            r.rank,
                            d.algo
                        ),
                    }
                }
            }
        }
    }
    assert!(fails.is_empty(), "rank {}: {}", r.rank, fails.join("\n"));
    println!("WORKER DONE rank {}", r.rank);
    comm.destroy().expect("destroy");
}

/// Runs `host_of.len()` ranks, rank `r` on host `host_of[r]`.
fn run(host_of: &[usize], case: &str) -> Vec<Out> {
    run_algo(host_of, case, "CollnetDirect", "direct")
}

/// [`run`] with `NCCL_ALGO=algo`; `want` is the worker's [`ENV_ALGO`].
fn run_algo(host_of: &[usize], case: &str, algo: &str, want: &str) -> Vec<Out> {
    run_plugin("libnccl_net_collnet_socket.so", host_of, case, Some(algo), want)
}

/// [`run_algo`] over the plugin library `file` of the target directory,
/// `NCCL_ALGO` left unset when `algo` is `None`.
fn run_plugin(file: &str, host_of: &[usize], case: &str, algo: Option<&str>, want: &str) -> Vec<Out> {
    let plugin = target_dir().join(file);
    assert!(
        plugin.is_file(),
        "{} missing (built by `cargo build --workspace`)",
        plugin.display()
    );
    let plugin = plugin.display().to_string();
    let mut env = vec![
        ("NCCL_NET_PLUGIN", plugin.as_str()),
        ("NCCL_COLLNET_ENABLE", "1"),
        (ENV_ALGO, want),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,TUNING"),
        (ENV_CASE, case),
    ];
    if let Some(algo) = algo {
        env.push(("NCCL_ALGO", algo));
    }
    let n = host_of.len();
    let ranks: Vec<usize> = (0..n).collect();
    let hosts = host_of.to_vec();
    let outs = launch(
        WORKER,
        WORKER,
        n,
        &ranks,
        &env,
        move |r| vec![("NCCL_HOSTID".into(), format!("cnhost{}", hosts[r]))],
        LIMIT,
    );
    assert_all_ok(&outs, &format!("CollNetDirect on hosts {host_of:?}"));
    outs
}

/// Checks the INFO lines: CollNet enabled, each channel's `CollNetDirect
/// channel` line with `nheads`, NCCL's connection lines (a head's `CollNet
/// <head>/0 : <rank> [receive] via COLLNET/<plugin>/0` and `…/1 … [send] …`,
/// every rank's `Connected Collnet Chains` and `rank N Connected CollNet`),
/// the tuning line saying CollNetDirect.
fn check_info(outs: &[Out], nheads: usize) {
    for o in outs {
        let rank = o.rank;
        let has_line = |want: &str| o.stdout.lines().any(|l| l.ends_with(want));
        assert!(
            has_line(&format!("rank {rank} Connected CollNet")),
            "rank {rank}:\n{}",
            dump(outs)
        );
        assert!(
            o.stdout.lines().any(|l| l.contains("Connected Collnet Chains  [0] ")),
            "rank {rank}:\n{}",
            dump(outs)
        );
        // This rank's head index on channel 0 (the pattern line's headRank).
        let head = o
            .stdout
            .lines()
            .find(|l| l.contains(&format!("CollNetDirect channel 0 rank {rank} ")))
            .and_then(|l| l.split("headRank ").nth(1))
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse::<i64>().ok());
        if let Some(h) = head.filter(|&h| h >= 0) {
            for (conn, side) in [(0, "receive"), (1, "send")] {
                let want = format!("CollNet {h:02}/{conn} : {rank} [{side}] via COLLNET/FerrocclCollNetSocket/0");
                assert!(has_line(&want), "rank {rank}: no '{want}':\n{}", dump(outs));
            }
        }
        assert!(o.stdout.contains("WORKER DONE"), "rank {}:\n{}", o.rank, dump(outs));
        assert!(
            o.stdout.contains("CollNet enabled: plugin FerrocclCollNetSocket"),
            "rank {}:\n{}",
            o.rank,
            dump(outs)
        );
        let pattern: Vec<&str> = o
            .stdout
            .lines()
            .filter(|l| l.contains(&format!("CollNetDirect channel 0 rank {} ", o.rank)))
            .collect();
        assert_eq!(pattern.len(), 1, "rank {}:\n{}", o.rank, dump(outs));
        assert!(
            pattern[0].contains(&format!("nHeads {nheads} ")),
            "rank {}: {}",
            o.rank,
            pattern[0]
        );
    }
    assert!(
        outs.iter()
            .any(|o| o.stdout.contains("Bytes -> Algo CollNetDirect proto Simple")),
        "no tuning line names CollNetDirect:\n{}",
        dump(outs)
    );
}

/// A CollNet plugin whose every `connect` fails (`libnccl-net-cnconnfail.so`,
/// the in-tree plugin behind a shim): the communicator comes up without
/// CollNet, as NCCL's `ncclCollNetSetup` falls back (`ncclTransportCollNetCheck`'s
/// WARN on the first rank of each host), and AllReduce runs correct over
/// another algorithm.
#[test]
fn collnet_connect_failure_falls_back() {
    let outs = run_plugin("libnccl-net-cnconnfail.so", &[0, 1, 0, 1], "small", None, "fallback");
    for o in &outs {
        let rank = o.rank;
        assert!(o.stdout.contains("WORKER DONE"), "rank {rank}:\n{}", dump(&outs));
        assert!(!o.stdout.contains("CollNet enabled"), "rank {rank}:\n{}", dump(&outs));
        let warn = o
            .stdout
            .lines()
            .chain(o.stderr.lines())
            .any(|l| l.contains("Cannot initialize CollNet, using point-to-point network instead"));
        // Ranks 0 and 1 are the first ranks of hosts 0 and 1.
        assert_eq!(warn, rank < 2, "rank {rank}:\n{}", dump(&outs));
    }
    // Every rank that heads a channel logs why (its connect failed).
    assert!(
        outs.iter().any(|o| o.stdout.contains(&format!(
            "CollNet setup failed on rank {}: connect on channel 0",
            o.rank
        ))),
        "{}",
        dump(&outs)
    );
}

#[test]
fn collnet_direct_one_rank_per_host() {
    check_info(&run(&[0, 1], "full"), 1);
}

#[test]
fn collnet_direct_two_ranks_per_host() {
    check_info(&run(&[0, 1, 0, 1], "full"), 2);
}

#[test]
fn collnet_direct_uneven_hosts() {
    // Host 0: ranks 0, 1, 4; host 1: ranks 2, 3.
    check_info(&run(&[0, 0, 1, 1, 0], "small"), 2);
}

#[test]
fn collnet_direct_four_ranks_per_host() {
    check_info(&run(&[0, 0, 0, 0, 1, 1, 1, 1], "small"), 4);
}

/// CollNetChain beside CollNetDirect's extra collComms: with 2 heads per host
/// and channel, the chain's head (head 0) shares its collComm with
/// CollNetDirect's head 0 while head 1's collComm sits idle; results checked.
#[test]
fn collnet_chain_with_direct_heads_connected() {
    let outs = run_algo(&[0, 1, 0, 1], "small", "CollnetChain", "chain");
    for o in &outs {
        assert!(o.stdout.contains("WORKER DONE"), "rank {}:\n{}", o.rank, dump(&outs));
    }
    assert!(
        outs.iter()
            .any(|o| o.stdout.contains("Bytes -> Algo CollNetChain proto Simple")),
        "no tuning line names CollNetChain:\n{}",
        dump(&outs)
    );
}
