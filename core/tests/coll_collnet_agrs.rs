//! AllGather and ReduceScatter over CollNet (NCCL's CollNetDirect AllGather /
//! ReduceScatter, `coll::collnet_agrs`): real processes on simulated hosts
//! (`NCCL_HOSTID`), the in-tree CollNet plugin (`libnccl_net_collnet_socket.so`)
//! with `NCCL_COLLNET_ENABLE=1` and
//! `NCCL_ALGO=allgather:collnetdirect;reducescatter:collnetdirect`.
//!
//! On 2, 3, 4, 6 and 8 ranks with 1, 2 or 3 ranks per host (the hosts interleaved,
//! so a host's ranks are not neighbours and the plugin's SGE parts land in
//! scattered places), every datatype, every reduction (ReduceScatter: sum,
//! prod, max, min, avg, PreMulSum; the plugin claims them all), in and out of
//! place, counts 1, 4099 and (float32) 300 007 (several FIFO steps and both
//! channels): every result checked against the CPU reference
//! (`TestOp::run_checked`); every decision is CollNetDirect; and the ranks'
//! CollNet links saw `iallgather` and `ireducescatter` calls complete (the
//! process counters `collnet_sge_counts`), at least one per host and operation.
//! Without `NCCL_COLLNET_ENABLE` the same forced `NCCL_ALGO` leaves nothing to
//! run (CollNetDirect is offered only with CollNet).

mod coll_support;

use std::time::Duration;

use coll_support::{Out, assert_all_ok, dump, join, launch, role, run_op, target_dir};
use ferroccl::tune::{Algorithm, Func};
use ferroccl::{DataType, RedOp, Scalar, TestOp};

const WORKER: &str = "collnet_agrs_worker";
const LIMIT: Duration = Duration::from_secs(300);
const DTYPES: [DataType; 6] = [
    DataType::Float32,
    DataType::Int32,
    DataType::Float16,
    DataType::Uint8,
    DataType::Float64,
    DataType::Bfloat16,
];

fn ops(dtype: DataType) -> [RedOp; 6] {
    [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::Avg,
        RedOp::PreMulSum(Scalar::from_f64(dtype, 2.0)),
    ]
}

/// One rank: the matrix, then `OPS ag rs` (operations run) and
/// `SGE ag rs` (this process's completed CollNet calls).
#[test]
fn collnet_agrs_worker() {
    let Some(r) = role(WORKER) else { return };
    let comm = join(&r, Duration::from_secs(60));
    let mut fails = Vec::new();
    let (mut n_ag, mut n_rs) = (0, 0);
    let mut cases: Vec<(TestOp, DataType, RedOp, usize)> = Vec::new();
    for count in [1usize, 4099] {
        for dtype in DTYPES {
            cases.push((TestOp::AllGather, dtype, RedOp::Sum, count));
            for op in ops(dtype) {
                cases.push((TestOp::ReduceScatter, dtype, op, count));
            }
        }
    }
    cases.push((TestOp::AllGather, DataType::Float32, RedOp::Sum, 300_007));
    cases.push((TestOp::ReduceScatter, DataType::Float32, RedOp::Sum, 300_007));
    for (top, dtype, op, count) in cases {
        for in_place in [false, true] {
            match run_op(&comm, top, dtype, op, count, in_place) {
                Ok(0) => {}
                Ok(w) => fails.push(format!(
                    "{top:?} {dtype} {op} count {count} in_place {in_place}: {w} wrong"
                )),
                Err(e) => panic!(
                    "rank {}: {top:?} {dtype} {op} count {count} in_place {in_place}: {e}",
                    r.rank
                ),
            }
            let func = if top == TestOp::AllGather {
                n_ag += 1;
                Func::AllGather
            } else {
                n_rs += 1;
                Func::ReduceScatter
            };
            let d = comm.tuning().last(func).expect("a decision");
            assert_eq!(
                d.algo,
                Algorithm::CollNetDirect,
                "rank {}: {top:?} {dtype} {op} count {count} ran {:?}",
                r.rank,
                d.algo
            );
        }
    }
    assert!(fails.is_empty(), "rank {}:\n{}", r.rank, fails.join("\n"));
    println!("OPS {n_ag} {n_rs}");
    let (ag, rs) = ferroccl::collnet_sge_counts();
    println!("SGE {ag} {rs}");
    comm.destroy().expect("destroy");
}

/// The two numbers after `tag ` in a rank's output.
fn pair(o: &Out, tag: &str) -> (u64, u64) {
    let line = o
        .stdout
        .lines()
        .find_map(|l| l.split(tag).nth(1))
        .unwrap_or_else(|| panic!("rank {} printed no {tag}line:\n{}", o.rank, o.stdout));
    let v: Vec<u64> = line.split_whitespace().map(|x| x.parse().expect("number")).collect();
    (v[0], v[1])
}

fn plugin() -> String {
    plugin_file("libnccl_net_collnet_socket.so")
}

/// Path of the plugin library `file` of the target directory.
fn plugin_file(file: &str) -> String {
    let p = target_dir().join(file);
    assert!(
        p.is_file(),
        "{} missing (built by `cargo build --workspace`)",
        p.display()
    );
    p.display().to_string()
}

/// Runs `nranks` ranks on `nranks / ppn` hosts (rank `r` on host `r % hosts`).
fn run(nranks: usize, ppn: usize, collnet: bool) -> Vec<Out> {
    run_with(&plugin(), nranks, ppn, collnet)
}

/// [`run`] over the plugin library at `plugin`.
fn run_with(plugin: &str, nranks: usize, ppn: usize, collnet: bool) -> Vec<Out> {
    let hosts = nranks / ppn;
    let plugin = plugin.to_string();
    let mut env = vec![
        ("NCCL_NET_PLUGIN", plugin.as_str()),
        ("NCCL_ALGO", "allgather:collnetdirect;reducescatter:collnetdirect"),
        ("NCCL_COLLNET_SOCKET_TIMEOUT_MS", "120000"),
    ];
    if collnet {
        env.push(("NCCL_COLLNET_ENABLE", "1"));
    }
    let ranks: Vec<usize> = (0..nranks).collect();
    launch(
        WORKER,
        WORKER,
        nranks,
        &ranks,
        &env,
        move |r| vec![("NCCL_HOSTID".into(), format!("host{}", r % hosts))],
        LIMIT,
    )
}

fn check(nranks: usize, ppn: usize) {
    check_with(&plugin(), nranks, ppn);
}

/// [`check`] over the plugin library at `plugin`.
fn check_with(plugin: &str, nranks: usize, ppn: usize) {
    let what = format!("{nranks} ranks, {ppn} per host over {plugin}");
    let outs = run_with(plugin, nranks, ppn, true);
    assert_all_ok(&outs, &what);
    let hosts = (nranks / ppn) as u64;
    let (ops_ag, ops_rs) = pair(&outs[0], "OPS ");
    let (mut ag, mut rs) = (0, 0);
    for o in &outs {
        let (a, r) = pair(o, "SGE ");
        ag += a;
        rs += r;
    }
    // Every operation posts at least one call per host (its channels' heads).
    assert!(
        ag >= ops_ag * hosts && rs >= ops_rs * hosts,
        "{what}: {ag} iallgather / {rs} ireducescatter calls for {ops_ag} AllGather / {ops_rs} ReduceScatter on {hosts} hosts:\n{}",
        dump(&outs)
    );
}

/// Every `iallgather`/`ireducescatter` (and `iallreduce`) carries registered
/// memory, never a NULL mhandle, as NCCL's non-registered path passes its
/// registered staging region: `libnccl-net-cnstrictmr.so` (the in-tree plugin
/// behind a shim refusing NULL mhandles) runs the whole matrix correct.
#[test]
fn collnet_allgather_reducescatter_pass_registered_memory() {
    check_with(&plugin_file("libnccl-net-cnstrictmr.so"), 4, 2);
}

#[test]
fn collnet_allgather_reducescatter_2_ranks_1_per_host() {
    check(2, 1);
}

#[test]
fn collnet_allgather_reducescatter_3_ranks_1_per_host() {
    check(3, 1);
}

#[test]
fn collnet_allgather_reducescatter_4_ranks_2_per_host() {
    check(4, 2);
}

#[test]
fn collnet_allgather_reducescatter_6_ranks_2_per_host() {
    check(6, 2);
}

/// Chains of three: the middle rank forwards up and down at once.
#[test]
fn collnet_allgather_reducescatter_6_ranks_3_per_host() {
    check(6, 3);
}

#[test]
fn collnet_allgather_reducescatter_8_ranks_2_per_host() {
    check(8, 2);
}

const TUNER_WORKER: &str = "collnet_agrs_tuner_worker";

/// One rank under a tuner plugin that forces CollNetDirect/Simple: an
/// AllGather and a ReduceScatter (sum, avg), checked, each decided by the tuner.
#[test]
fn collnet_agrs_tuner_worker() {
    let Some(r) = role(TUNER_WORKER) else { return };
    let comm = join(&r, Duration::from_secs(60));
    for (top, op) in [
        (TestOp::AllGather, RedOp::Sum),
        (TestOp::ReduceScatter, RedOp::Sum),
        (TestOp::ReduceScatter, RedOp::Avg),
    ] {
        let wrong = run_op(&comm, top, DataType::Float32, op, 4099, false).expect("run");
        assert_eq!(wrong, 0, "rank {}: {top:?} {op}", r.rank);
        let func = if top == TestOp::AllGather {
            Func::AllGather
        } else {
            Func::ReduceScatter
        };
        let d = comm.tuning().last(func).expect("a decision");
        println!("DECISION {func:?} algo={:?} by_tuner={}", d.algo, d.by_tuner);
    }
    comm.destroy().expect("destroy");
}

/// A tuner plugin (the C test tuner, `CTUNER_FORCE=2,2`: CollNetDirect/Simple
/// wherever the table has it) picks CollNet for AllGather and ReduceScatter
/// when CollNet is connected, without `NCCL_ALGO`.
#[test]
fn a_tuner_picks_collnetdirect_for_allgather_and_reducescatter() {
    let plugin = plugin();
    let tuner = target_dir().join("libnccl-tuner-cv5.so");
    assert!(
        tuner.is_file(),
        "{} missing (built by `cargo build --workspace`)",
        tuner.display()
    );
    let tuner = tuner.display().to_string();
    let env = [
        ("NCCL_NET_PLUGIN", plugin.as_str()),
        ("NCCL_TUNER_PLUGIN", tuner.as_str()),
        ("CTUNER_FORCE", "2,2"),
        ("NCCL_COLLNET_ENABLE", "1"),
    ];
    let outs = launch(
        TUNER_WORKER,
        TUNER_WORKER,
        4,
        &[0, 1, 2, 3],
        &env,
        |r| vec![("NCCL_HOSTID".into(), format!("host{}", r % 2))],
        LIMIT,
    );
    assert_all_ok(&outs, "tuner");
    for o in &outs {
        let n = o
            .stdout
            .lines()
            .filter(|l| l.contains("DECISION") && l.contains("algo=CollNetDirect by_tuner=true"))
            .count();
        assert_eq!(
            n,
            3,
            "rank {}: the tuner's CollNetDirect was not taken:\n{}",
            o.rank,
            dump(&outs)
        );
    }
}

/// Without CollNet the forced CollNetDirect cannot run: every rank fails its
/// first AllGather with NCCL's "no algorithm" error, none hangs.
#[test]
fn collnetdirect_forced_without_collnet_is_refused() {
    let outs = run(2, 1, false);
    for o in &outs {
        assert!(!o.success, "rank {} ran without CollNet:\n{}", o.rank, dump(&outs));
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(
            all.contains("No algorithm/protocol available for function AllGather"),
            "rank {}: {all}",
            o.rank
        );
    }
}
