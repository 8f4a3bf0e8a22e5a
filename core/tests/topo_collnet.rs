//! The CollNet graph searches (NCCL 2.30.7 `src/init.cc` `initTransportsRank`:
//! the CollNetChain graph, id 2, pattern TREE over CollNet NICs, and the
//! CollNetDirect graph, id 4, pattern COLLNET_DIRECT; `src/graph/search.cc`
//! `ncclTopoCompute`, `ncclTopoSearchRecNet`, `ncclTopoSearchTryCollnetDirect`)
//! on real machines' topologies, with every NIC marked as CollNet-capable as
//! `ncclTopoFillNet` marks it (`coll="1"`) when a CollNet plugin serves it.

mod topo_common;

use ferroccl::graph::CommTopology;
use ferroccl::topo::xml::{self, Schema};
use ferroccl::topo::{TopoParams, TopoRecord};
use topo_common::{machine, records};

/// `nodes` copies of machine `name`, every NIC CollNet-capable when `coll`.
fn collnet_records(name: &str, nodes: usize, coll: bool) -> Vec<TopoRecord> {
    let mut recs = records(&machine(name), nodes);
    for r in &mut recs {
        let mut x = xml::parse(&r.xml, Schema::Topology, "record").expect("record parses");
        if coll {
            x.for_each_mut("net", &mut |n| n.set_attr("coll", 1));
        }
        r.xml = xml::dump(&x);
    }
    recs
}

fn build(name: &str, nodes: usize, coll: bool) -> CommTopology {
    CommTopology::build(&collnet_records(name, nodes, coll), &TopoParams::default()).expect("topology builds")
}

/// The ranks of host 0's channel `c` of `g`, head first.
fn channel(g: &ferroccl::graph::TopoGraph, c: usize) -> Vec<i32> {
    g.channel(c).to_vec()
}

/// ND A100 v4: 8 A100 on an NVSwitch, 8 IB NICs, each behind the PCI switch of one
/// GPU (its `localGpu`, a PIX path).
///
/// CollNetDirect (NCCL 2.30.7): `ncclTopoCompute` caps `maxChannels` at
/// `min(NCCL_MAX_DIRECT_ARITY + 1, ngpus)` = 8. `ncclTopoSearchRecNet` takes, for channel
/// `c`, the NICs in `ncclTopoSelectNets` order rotated by `c`, and for COLLNET_DIRECT
/// only tries the NIC's `localGpu` as the channel's head, once per GPU (the duplicate-head
/// check), stopping at the first NIC that gives a head; crossNic is 0 for this pattern, so
/// `ncclTopoSearchCheckNet` sends the head back to the same NIC. The eight NICs have
/// eight different local GPUs, so 8 channels with 8 distinct heads, each entering and
/// leaving by the NIC of its head; `ncclTopoSearchTryCollnetDirect` then lists the other
/// 7 GPUs after the head in index order. `ncclCollNetSetup` (`src/init.cc`) takes the
/// distinct `intra[c * localRanks]` as heads: `collNetHeadsNum` = 8.
///
/// CollNetChain: pattern TREE over CollNet NICs with `minChannels = maxChannels =
/// ring.nChannels` (8 here); trees are symmetric (in and out by the same NIC), and each
/// channel starts at its NIC's local GPU, which is a CollNet head:
/// `isCollNetChainHeadsSubset` holds (`collNetChainSupport`).
#[test]
fn ndv4_collnet_direct_has_one_head_per_nic_and_gpu() {
    let t = build("ndv4", 2, true);
    for h in &t.hosts {
        let g = &h.graphs;
        let d = &g.collnet_direct;
        assert_eq!(d.id, 4);
        assert_eq!(d.pattern, 6, "COLLNET_DIRECT");
        assert_eq!(d.n_channels, 8, "{:?}", h.graph_log);
        let sys = &g.system;
        let mut heads = Vec::new();
        for c in 0..d.n_channels {
            let ch = channel(d, c);
            let (net_in, net_out) = d.nets(c);
            assert_eq!(net_in, net_out, "channel {c}: the head returns to its NIC");
            // The head is the NIC's local GPU.
            let n = sys
                .index_of(ferroccl::topo::NodeType::Net, net_in)
                .expect("NET of the channel");
            let local = match &sys.of(ferroccl::topo::NodeType::Net)[n].info {
                ferroccl::topo::system::NodeInfo::Net(ni) => ni.local_gpu,
                _ => unreachable!("a NET node"),
            };
            assert!(local >= 0);
            assert_eq!(
                ch[0],
                sys.of(ferroccl::topo::NodeType::Gpu)[local as usize].gpu().1,
                "channel {c}"
            );
            // The others follow in GPU index order.
            let rest: Vec<i32> = (0..8)
                .map(|i| sys.of(ferroccl::topo::NodeType::Gpu)[i].gpu().1)
                .filter(|&r| r != ch[0])
                .collect();
            assert_eq!(&ch[1..], &rest[..], "channel {c}");
            heads.push(ch[0]);
        }
        heads.sort_unstable();
        heads.dedup();
        assert_eq!(heads.len(), 8, "eight distinct heads");
        assert_eq!(ferroccl::graph::collnet::searched_heads(d).len(), 8);
        let ch = &g.collnet_chain;
        assert_eq!((ch.id, ch.pattern, ch.n_channels), (2, 3, g.ring.n_channels));
        for c in 0..ch.n_channels {
            let (a, b) = ch.nets(c);
            assert_eq!(a, b, "chain channel {c}: trees are symmetric");
        }
    }
    assert_eq!(t.comm.collnet_heads, 8);
    assert!(t.comm.collnet_chain_support);
    assert_eq!(t.comm.collnet_direct.n_channels, 8);
    // ncclTopoPrintGraph lines for both CollNet graphs.
    let log = &t.hosts[0].graph_log;
    assert!(
        log.iter()
            .any(|l| l.starts_with("Pattern 6, crossNic 0, nChannels 8, bw ")),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("Pattern 3, crossNic 0, nChannels 8, bw ")),
        "{log:?}"
    );
}

/// NC A100 v4: 4 A100 PCIe, one NIC. `ncclTopoSearchRecNet` only tries a new head while
/// `graph->nChannels < netCount` (1): one CollNetDirect channel, whose head is the NIC's
/// local GPU, so `collNetHeadsNum` = 1; the CollNetChain tree starts at that GPU too.
#[test]
fn ncv4_one_nic_gives_one_head() {
    let t = build("ncv4", 2, true);
    let g = &t.hosts[0].graphs;
    assert_eq!(g.collnet_direct.n_channels, 1);
    assert_eq!(g.collnet_direct.channel(0).len(), 4);
    assert_eq!(
        ferroccl::graph::collnet::searched_heads(&g.collnet_direct),
        vec![g.collnet_chain.channel(0)[0]]
    );
    assert_eq!(t.comm.collnet_heads, 1);
    assert!(t.comm.collnet_chain_support);
}

/// Without CollNet NICs (no `coll="1"`) both searches skip every NIC and, being CollNet
/// graphs, get no fallback channel (`ncclTopoCompute`): no heads, no chain support, and
/// the dump writes both graphs empty.
#[test]
fn no_collnet_nic_no_collnet_graphs() {
    let t = build("ndv4", 2, false);
    let g = &t.hosts[0].graphs;
    assert_eq!(g.collnet_direct.n_channels, 0);
    assert_eq!(g.collnet_chain.n_channels, 0);
    assert_eq!(t.comm.collnet_heads, 0);
    assert!(!t.comm.collnet_chain_support);
    let x = t.graph_xml(0).unwrap();
    assert!(
        x.contains(r#"<graph id="4" pattern="6" crossnic="0" nchannels="0""#),
        "{x}"
    );
}

/// `NCCL_GRAPH_DUMP_FILE` writes the searched CollNet graphs as `ncclTopoGetXmlFromGraph`
/// does (id, pattern, nchannels, speeds, types, then per channel net, every gpu, net);
/// `NCCL_GRAPH_FILE` reads them back: the same graphs, and a file cut to two
/// CollNetDirect channels gives two heads (so the file, not a search, was used).
#[test]
fn collnet_graphs_round_trip_through_the_graph_file() {
    let t = build("ndv4", 2, true);
    let x = t.graph_xml(0).unwrap();
    assert!(
        x.contains(r#"<graph id="4" pattern="6" crossnic="0" nchannels="8" speedintra="#),
        "{x}"
    );
    assert!(
        x.contains(r#"<graph id="2" pattern="3" crossnic="0" nchannels="8" speedintra="#),
        "{x}"
    );
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("topo_collnet_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("graph.xml");
    std::fs::write(&file, &x).unwrap();
    let params = TopoParams {
        graph_file: Some(file.clone()),
        ..TopoParams::default()
    };
    let recs = collnet_records("ndv4", 2, true);
    let back = CommTopology::build(&recs, &params).expect("builds from the graph file");
    // What the file carries (not the search's bookkeeping: channel bounds, hop count).
    let carried = |g: &ferroccl::graph::TopoGraph| {
        let chans: Vec<(Vec<i32>, (i64, i64))> = (0..g.n_channels).map(|c| (channel(g, c), g.nets(c))).collect();
        (
            g.id,
            g.pattern,
            g.cross_nic,
            g.bw_intra,
            g.bw_inter,
            g.type_intra,
            g.type_inter,
            g.same_channels,
            chans,
        )
    };
    let (a, b) = (&back.hosts[0].graphs, &t.hosts[0].graphs);
    assert_eq!(carried(&a.collnet_direct), carried(&b.collnet_direct));
    assert_eq!(carried(&a.collnet_chain), carried(&b.collnet_chain));
    assert_eq!(back.comm.collnet_heads, 8);
    assert_eq!(back.graph_xml(0).unwrap(), x);
    // Keep the first two CollNetDirect channels only.
    let mut doc = xml::parse(&x, Schema::Graphs, "dump").unwrap();
    let g4 = doc.find_kv_mut("graph", "id", "4").expect("graph 4");
    let mut kept = 0;
    g4.subs.retain(|s| {
        kept += 1;
        s.name != "channel" || kept <= 2
    });
    g4.set_attr("nchannels", 2);
    std::fs::write(&file, xml::dump(&doc)).unwrap();
    let cut = CommTopology::build(&recs, &params).expect("builds from the cut file");
    assert_eq!(cut.hosts[0].graphs.collnet_direct.n_channels, 2);
    assert_eq!(cut.comm.collnet_heads, 2);
    std::fs::remove_dir_all(&dir).ok();
}

/// The GPU tuning model (`ncclTopoTuneModel`) reads the searched CollNet graphs: on
/// 2 x ND A100 v4 with CollNet NICs and `NCCL_COLLNET_ENABLE=1`, CollNet is on with the
/// 8 searched heads (no NVLS on sm 80), and the CollNetDirect and CollNetChain AllReduce
/// entries are priced; without the CollNet marks, or on one node, they stay off.
#[test]
fn gpu_model_uses_the_searched_collnet_graphs() {
    use ferroccl::tune::constants::TunerConstants;
    use ferroccl::tune::gpu::{GpuTuneParams, GpuTuning};
    use ferroccl::tune::ids::{Algorithm, Func, Protocol};
    let p = GpuTuneParams {
        collnet_enable: true,
        ..GpuTuneParams::default()
    };
    let entry =
        |g: &GpuTuning, a: Algorithm| g.cost_table(Func::AllReduce, 1 << 26)[a.index()][Protocol::Simple.index()];
    let on = GpuTuning::new(&build("ndv4", 2, true), &p, TunerConstants::nccl_gpu());
    assert!(on.input.collnet_enable);
    assert!(on.input.collnet_chain_support);
    assert_eq!(on.input.collnet_heads, 8);
    assert_eq!(on.graphs.collnet_direct.nchannels, 8);
    assert!(entry(&on, Algorithm::CollNetDirect) > 0.0, "{:?}", on.notes);
    assert!(entry(&on, Algorithm::CollNetChain) > 0.0, "{:?}", on.notes);
    for off in [
        GpuTuning::new(&build("ndv4", 2, false), &p, TunerConstants::nccl_gpu()),
        GpuTuning::new(&build("ndv4", 1, true), &p, TunerConstants::nccl_gpu()),
    ] {
        assert!(!off.input.collnet_enable);
        assert!(entry(&off, Algorithm::CollNetDirect) < 0.0);
        assert!(entry(&off, Algorithm::CollNetChain) < 0.0);
    }
}

/// The CollNetDirect heads the runtime connects come from the searched graph (NCCL's
/// `connectCollNet`, `src/graph/connect.cc`: the heads are the distinct
/// `collNetDirectGraph->intra[c * localRanks]`): on every channel `c`, head 0 of each
/// host is the rank of its graph's channel `c` first GPU. Checked on 2 x NC A100 v4
/// (one NIC: one head, the NIC's local GPU) and on 2 x ND A100 v4 read from a graph
/// file whose CollNetDirect channels are reversed (so the heads run 7, 6, ... 0, which
/// the layout rule, ranks rotated by channel, never gives). Without CollNet NICs the
/// plan carries no searched heads and the layout rule is unchanged.
#[test]
fn runtime_heads_are_the_searched_graphs_first_gpus() {
    use ferroccl::graph::collnet::{chain, direct_members, direct_nheads, direct_position, host_order};
    let check = |t: &CommTopology, want_heads: usize| {
        let params = TopoParams::default();
        let nranks = t.comm.nranks;
        let hosts: Vec<u64> = (0..nranks).map(|r| t.host_of(r).host_hash).collect();
        let plan = t.plan_for(0, &params).unwrap();
        assert_eq!(plan.collnet_firsts.len(), nranks);
        let local = nranks / t.hosts.len();
        let nheads = direct_nheads(plan.collnet_heads, local, local).unwrap();
        assert_eq!(nheads, want_heads);
        for c in 0..4 {
            for r in 0..nranks {
                let g = &t.host_of(r).graphs.collnet_direct;
                let first = g.channel(c % g.n_channels)[0] as usize;
                let p = direct_position(&hosts, &plan.collnet_firsts, r, c, nheads);
                assert_eq!(p.heads.len(), nheads);
                assert_eq!(p.heads[0], first, "rank {r} channel {c}");
                assert_eq!(p.head_rank == Some(0), r == first, "rank {r} channel {c}");
            }
            // Head h of every host joins the channel's h-th collComm.
            for h in 0..nheads {
                assert_eq!(
                    direct_members(&hosts, &plan.collnet_firsts, c, h, nheads).len(),
                    t.hosts.len()
                );
            }
        }
    };
    check(&build("ncv4", 2, true), 1);

    // ND A100 v4 with the CollNetDirect channels reversed in the graph file.
    let t = build("ndv4", 2, true);
    let mut doc = xml::parse(&t.graph_xml(0).unwrap(), Schema::Graphs, "dump").unwrap();
    let g4 = doc.find_kv_mut("graph", "id", "4").expect("graph 4");
    let (mut chans, other): (Vec<_>, Vec<_>) = g4.subs.drain(..).partition(|s| s.name == "channel");
    chans.reverse();
    g4.subs = other.into_iter().chain(chans).collect();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("topo_collnet_heads_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("graph.xml");
    std::fs::write(&file, xml::dump(&doc)).unwrap();
    let params = TopoParams {
        graph_file: Some(file),
        ..TopoParams::default()
    };
    let rev = CommTopology::build(&collnet_records("ndv4", 2, true), &params).expect("builds from the file");
    std::fs::remove_dir_all(&dir).ok();
    let g = &rev.hosts[0].graphs.collnet_direct;
    assert_eq!(g.n_channels, 8);
    let firsts: Vec<i32> = (0..8).map(|c| g.channel(c)[0]).collect();
    let hosts: Vec<u64> = (0..16).map(|r| rev.host_of(r).host_hash).collect();
    // The file's order differs from the layout rule's on some channel (so this can fail).
    assert!(
        (0..8).any(|c| firsts[c] as usize != chain(&hosts, firsts[c] as usize, c)[0]),
        "{firsts:?}"
    );
    check(&rev, 8);

    // No CollNet NICs: no searched heads, the layout rule.
    let plain = build("ndv4", 2, false);
    let plan = plain.plan_for(3, &TopoParams::default()).unwrap();
    assert!(plan.collnet_firsts.iter().all(Vec::is_empty));
    let hosts: Vec<u64> = (0..16).map(|r| plain.host_of(r).host_hash).collect();
    for r in 0..16 {
        for c in 0..4 {
            assert_eq!(host_order(&hosts, &plan.collnet_firsts, r, c, 8), chain(&hosts, r, c));
        }
    }
}
