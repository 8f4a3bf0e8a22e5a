//! CollNet on hosts whose CollNet heads come from the graph search, at
//! communicator init: real processes on simulated hosts (`NCCL_HOSTID`, 4 ranks
//! on 2 hosts, rank `r` on host `r % 2`), the in-tree CollNet plugin
//! (`libnccl_net_collnet_socket.so`, whose CollNet table serves the same NIC as
//! its net table), `NCCL_COLLNET_ENABLE=1`.
//!
//! Ranks bound to a (mock) GPU (`CommConfig::cuda_dev`) mark the NIC the
//! CollNet table serves `coll="1"` in their detected topology, as NCCL's
//! `ncclTopoGetSystem` (`src/graph/topo.cc`: `ncclTopoProcessNet(xml, 1, ...)`
//! over the CollNet table when `collNetSupport(comm)`) marks it, so the
//! CollNetChain and CollNetDirect graphs are searched (`src/init.cc`
//! `initTransportsRank`): rank 0's `NCCL_TOPO_DUMP_FILE` has `coll="1"`, its
//! `NCCL_GRAPH_DUMP_FILE` a CollNetDirect graph (id 4) with channels, and each
//! host has the one searched head of its one CollNet NIC (`nHeads 1`, where the
//! layout rule gives every rank of a host a head); CollNetDirect AllReduce runs
//! over it, checked. (NCCL offers CollNet AllGather/ReduceScatter only where a
//! host has no more ranks than heads, `src/graph/tuning.cc`: not here.)
//!
//! With an `NCCL_GRAPH_FILE` whose CollNetDirect graph starts channel 0 at the
//! host's second GPU and channel 1 at its first (two heads per host, in the
//! opposite order to the layout rule's, the host's ranks rotated by the
//! channel), AllGather and ReduceScatter (`NCCL_ALGO=allgather:collnetdirect;
//! reducescatter:collnetdirect`) still run over CollNet (NCCL's CollNetDirect
//! AllGather/ReduceScatter, `src/device/all_gather.h`, `reduce_scatter.h`) on
//! those heads: each result checked against the CPU reference, every decision
//! CollNetDirect, the plugin's `iallgather`/`ireducescatter` called.
//!
//! CPU-process ranks (no GPU) mark nothing and keep the layout rule: no
//! `coll="1"`, every rank of a host a head.

mod coll_support;

use std::path::Path;
use std::time::Duration;

use coll_support::{Out, assert_all_ok, config, dump, fresh_dir, launch, role, run_op, target_dir};
use ferroccl::mockdev::{MockGpu, declare_gpu};
use ferroccl::tune::{Algorithm, Func};
use ferroccl::{Comm, DataType, RedOp, TestOp};

const WORKER: &str = "collnet_searched_worker";
const LIMIT: Duration = Duration::from_secs(240);
/// `1`: the worker binds its communicator to mock GPU 0.
const ENV_BIND: &str = "FERROCCL_TEST_CN_BIND";
/// `agrs`: AllGather and ReduceScatter; `ar`: AllReduce.
const ENV_CASE: &str = "FERROCCL_TEST_CN_CASE";

/// One rank: AllGather and ReduceScatter (sum, avg; [`ENV_CASE`] `agrs`) or
/// AllReduce (sum, avg; `ar`) over a few datatypes and sizes, in and out of
/// place, each checked and decided CollNetDirect; then `SGE ag rs` (this
/// process's completed CollNet calls).
#[test]
fn collnet_searched_worker() {
    let Some(r) = role(WORKER) else { return };
    let timeout = Duration::from_secs(90);
    let mut c = config(timeout);
    if std::env::var(ENV_BIND).is_ok_and(|v| v == "1") {
        declare_gpu(MockGpu {
            ordinal: 0,
            cuda_cc: 90,
            gdr: false,
            dmabuf: false,
            pci_path: None,
        });
        c.cuda_dev = Some(0);
    }
    let comm =
        Comm::init_rank(r.nranks, &r.id, r.rank, c).unwrap_or_else(|e| panic!("rank {}: init failed: {e}", r.rank));
    let agrs = std::env::var(ENV_CASE).is_ok_and(|v| v == "agrs");
    let mut fails = Vec::new();
    for count in [1usize, 4099, 100_003] {
        for dtype in [DataType::Float32, DataType::Int32, DataType::Bfloat16] {
            let cases = if agrs {
                [
                    (TestOp::AllGather, RedOp::Sum),
                    (TestOp::ReduceScatter, RedOp::Sum),
                    (TestOp::ReduceScatter, RedOp::Avg),
                ]
            } else {
                [
                    (TestOp::AllReduce, RedOp::Sum),
                    (TestOp::AllReduce, RedOp::Avg),
                    (TestOp::AllReduce, RedOp::Max),
                ]
            };
            for (top, op) in cases {
                for in_place in [false, true] {
                    let what = format!("{top:?} {dtype} {op} count {count} in_place {in_place}");
                    match run_op(&comm, top, dtype, op, count, in_place) {
                        Ok(0) => {}
                        Ok(w) => fails.push(format!("{what}: {w} wrong")),
                        Err(e) => panic!("rank {}: {what}: {e}", r.rank),
                    }
                    let func = match top {
                        TestOp::AllGather => Func::AllGather,
                        TestOp::ReduceScatter => Func::ReduceScatter,
                        _ => Func::AllReduce,
                    };
                    let d = comm.tuning().last(func).expect("a decision");
                    assert_eq!(
                        d.algo,
                        Algorithm::CollNetDirect,
                        "rank {}: {what} ran {:?}",
                        r.rank,
                        d.algo
                    );
                }
            }
        }
    }
    assert!(fails.is_empty(), "rank {}:\n{}", r.rank, fails.join("\n"));
    let (ag, rs) = ferroccl::collnet_sge_counts();
    println!("SGE {ag} {rs}");
    comm.destroy().expect("destroy");
    println!("WORKER DONE");
}

/// Runs 4 ranks on 2 hosts (rank `r` on host `r % 2`), bound to mock GPUs when
/// `bind`, the worker's `case` ([`ENV_CASE`]), reading `graph_file` when given,
/// dumping rank 0's topology and graphs into `dir`.
fn run(bind: bool, case: &str, graph_file: Option<&Path>, dir: &Path) -> Vec<Out> {
    let plugin = target_dir().join("libnccl_net_collnet_socket.so");
    assert!(
        plugin.is_file(),
        "{} missing (built by `cargo build --workspace`)",
        plugin.display()
    );
    let plugin = plugin.display().to_string();
    let topo = dir.join("topo.xml").display().to_string();
    let graph = dir.join("graph.xml").display().to_string();
    let algo = if case == "agrs" {
        "allgather:collnetdirect;reducescatter:collnetdirect"
    } else {
        "allreduce:collnetdirect"
    };
    let gfile = graph_file.map(|g| g.display().to_string()).unwrap_or_default();
    let mut env = vec![
        ("NCCL_NET_PLUGIN", plugin.as_str()),
        ("NCCL_COLLNET_ENABLE", "1"),
        ("NCCL_ALGO", algo),
        (ENV_CASE, case),
        ("NCCL_COLLNET_SOCKET_TIMEOUT_MS", "120000"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,TUNING"),
        ("NCCL_TOPO_DUMP_FILE", topo.as_str()),
        ("NCCL_GRAPH_DUMP_FILE", graph.as_str()),
        (ENV_BIND, if bind { "1" } else { "0" }),
    ];
    if graph_file.is_some() {
        env.push(("NCCL_GRAPH_FILE", gfile.as_str()));
    }
    let outs = launch(
        WORKER,
        WORKER,
        4,
        &[0, 1, 2, 3],
        &env,
        |r| vec![("NCCL_HOSTID".into(), format!("cnshost{}", r % 2))],
        LIMIT,
    );
    assert_all_ok(
        &outs,
        &format!("CollNet AllGather/ReduceScatter, bound to GPUs: {bind}"),
    );
    outs
}

/// Each rank's channels where it is its host's head, from its `Connected
/// Collnet Chains  [c] down->rank->up` line (up = nranks at a head).
fn head_channels(o: &Out, nranks: usize, outs: &[Out]) -> Vec<usize> {
    let line = o
        .stdout
        .lines()
        .find_map(|l| l.split("Connected Collnet Chains").nth(1))
        .unwrap_or_else(|| panic!("rank {}: no chains line:\n{}", o.rank, dump(outs)));
    let mut out = Vec::new();
    for seg in line.split('[').skip(1) {
        let (c, rest) = seg.split_once(']').expect("[c]");
        let c: usize = c.trim().parse().expect("channel");
        let up: usize = rest
            .trim()
            .rsplit("->")
            .next()
            .and_then(|u| u.parse().ok())
            .expect("up");
        if up == nranks {
            out.push(c);
        }
    }
    out
}

/// The `nHeads` of every rank's channel 0 CollNetDirect pattern line.
fn nheads(outs: &[Out]) -> Vec<usize> {
    outs.iter()
        .map(|o| {
            o.stdout
                .lines()
                .find(|l| l.contains(&format!("CollNetDirect channel 0 rank {} ", o.rank)))
                .and_then(|l| l.split("nHeads ").nth(1))
                .and_then(|t| t.split(' ').next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("rank {}: no pattern line:\n{}", o.rank, dump(outs)))
        })
        .collect()
}

/// The SGE calls every rank's links completed, summed: `(iallgather, ireducescatter)`.
fn sge(outs: &[Out]) -> (u64, u64) {
    let mut t = (0, 0);
    for o in outs {
        let line = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("SGE "))
            .unwrap_or_else(|| panic!("rank {}: no SGE line:\n{}", o.rank, dump(outs)));
        let v: Vec<u64> = line.split_whitespace().map(|x| x.parse().expect("number")).collect();
        t.0 += v[0];
        t.1 += v[1];
    }
    t
}

/// Rank 0's dumped CollNetDirect graph's channel count.
fn collnet_direct_channels(dir: &Path) -> usize {
    let graph = std::fs::read_to_string(dir.join("graph.xml")).expect("rank 0 dumped its graphs");
    let g4 = graph
        .lines()
        .find(|l| l.contains("<graph id=\"4\""))
        .unwrap_or_else(|| panic!("no CollNetDirect graph:\n{graph}"));
    g4.split("nchannels=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no nchannels: {g4}"))
}

/// Whether rank 0's dumped topology has a NIC marked `coll="1"`.
fn marked(dir: &Path) -> bool {
    let topo = std::fs::read_to_string(dir.join("topo.xml")).expect("rank 0 dumped its topology");
    topo.contains("coll=\"1\"")
}

/// Each host's chain head on every channel, from every rank's chains line;
/// exactly one per host and channel. `heads[c][h]`.
fn chain_heads(outs: &[Out], hosts: &[u64]) -> Vec<Vec<usize>> {
    let n = outs.len();
    let mine: Vec<Vec<usize>> = outs.iter().map(|o| head_channels(o, n, outs)).collect();
    let nchan = mine.iter().flatten().max().map_or(0, |c| c + 1);
    let nhosts = hosts.iter().max().map_or(0, |h| *h as usize + 1);
    (0..nchan)
        .map(|c| {
            (0..nhosts)
                .map(|h| {
                    let of: Vec<usize> = (0..n)
                        .filter(|&r| hosts[r] == h as u64 && mine[r].contains(&c))
                        .collect();
                    assert_eq!(of.len(), 1, "channel {c} host {h}: heads {of:?}\n{}", dump(outs));
                    of[0]
                })
                .collect()
        })
        .collect()
}

/// GPU-bound ranks: the CollNet NIC marked, the CollNetDirect graph searched,
/// one searched head per host (the layout rule would give two), and
/// CollNetDirect AllReduce over it, correct.
#[test]
fn gpu_ranks_mark_collnet_nics_and_search_the_heads() {
    let dir = fresh_dir("collnet-searched-gpu");
    let outs = run(true, "ar", None, &dir);
    assert!(marked(&dir), "no CollNet NIC marked");
    assert!(
        collnet_direct_channels(&dir) > 0,
        "the CollNetDirect search found nothing"
    );
    // One CollNet NIC per host: one searched head (the layout rule gives 2).
    assert_eq!(nheads(&outs), vec![1; 4], "{}", dump(&outs));
    let hosts: Vec<u64> = (0..4).map(|r| r as u64 % 2).collect();
    let heads = chain_heads(&outs, &hosts);
    assert!(heads.len() >= 2, "{heads:?}");
    // The NIC's one local GPU heads every channel.
    assert!(heads.iter().all(|h| *h == heads[0]), "{heads:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CollNetDirect graph of [`searched_heads_reorder_hosts_and_allgather_reducescatter_run_over_them`]:
/// two channels, the first starting at the host's second GPU (dev 1), the
/// second at its first, both through NIC 0.
const REVERSED_HEADS: &str = r#"<graphs version="1">
  <graph id="4" pattern="6" crossnic="0" nchannels="2" speedintra="2.4" speedinter="1.2" latencyinter="0" typeintra="PHB" typeinter="PHB" samechannels="0">
    <channel>
      <net dev="0"/>
      <gpu dev="1"/>
      <gpu dev="0"/>
      <net dev="0"/>
    </channel>
    <channel>
      <net dev="0"/>
      <gpu dev="0"/>
      <gpu dev="1"/>
      <net dev="0"/>
    </channel>
  </graph>
</graphs>
"#;

/// GPU-bound ranks whose CollNetDirect graph (read from `NCCL_GRAPH_FILE`, the
/// other graphs searched) puts each host's heads in the opposite order to the
/// layout rule's: two heads per host, and on every channel the chain head is
/// not the layout rule's; AllGather / ReduceScatter run over CollNet there,
/// correct.
#[test]
fn searched_heads_reorder_hosts_and_allgather_reducescatter_run_over_them() {
    let dir = fresh_dir("collnet-searched-order");
    let gfile = dir.join("collnet_graph.xml");
    std::fs::write(&gfile, REVERSED_HEADS).expect("write the graph file");
    let outs = run(true, "agrs", Some(&gfile), &dir);
    assert!(marked(&dir), "no CollNet NIC marked");
    assert_eq!(collnet_direct_channels(&dir), 2);
    assert_eq!(nheads(&outs), vec![2; 4], "{}", dump(&outs));
    let hosts: Vec<u64> = (0..4).map(|r| r as u64 % 2).collect();
    let heads = chain_heads(&outs, &hosts);
    assert!(heads.len() >= 2, "{heads:?}");
    for (c, per_host) in heads.iter().enumerate() {
        for (h, &head) in per_host.iter().enumerate() {
            // Host h's ranks are h and h + 2; the graph's channel c starts at
            // its second rank on even channels, its first on odd ones.
            let want = if c % 2 == 0 { h + 2 } else { h };
            assert_eq!(head, want, "channel {c} host {h}: {heads:?}");
            let rule = ferroccl::graph::collnet::chain(&hosts, h, c)[0];
            assert_ne!(head, rule, "channel {c} host {h}: the layout rule's head");
        }
    }
    let (ag, rs) = sge(&outs);
    assert!(
        ag > 0 && rs > 0,
        "no CollNet calls: {ag} iallgather, {rs} ireducescatter"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// CPU-process ranks: nothing marked, no CollNet graph searched, every rank of
/// a host a head (the layout rule); AllGather / ReduceScatter over CollNet as before.
#[test]
fn cpu_process_ranks_keep_the_layout_rule() {
    let dir = fresh_dir("collnet-searched-cpu");
    let outs = run(false, "agrs", None, &dir);
    assert!(!marked(&dir), "a CPU-process rank marked a NIC");
    assert_eq!(collnet_direct_channels(&dir), 0);
    assert_eq!(nheads(&outs), vec![2; 4], "{}", dump(&outs));
    let hosts: Vec<u64> = (0..4).map(|r| r as u64 % 2).collect();
    for (c, per_host) in chain_heads(&outs, &hosts).iter().enumerate() {
        for (h, &head) in per_host.iter().enumerate() {
            assert_eq!(
                head,
                ferroccl::graph::collnet::chain(&hosts, h, c)[0],
                "channel {c} host {h}"
            );
        }
    }
    let (ag, rs) = sge(&outs);
    assert!(
        ag > 0 && rs > 0,
        "no CollNet calls: {ag} iallgather, {rs} ireducescatter"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
