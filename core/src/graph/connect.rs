//! From per-host graphs to every rank's channels (NCCL 2.30.7 `src/graph/connect.cc`:
//! `ncclTopoPreset`, `ncclTopoPostset`, `connectRings`, `connectTrees`, `copyChannels`,
//! `ncclMinNchannels`/`ncclMaxNchannels`; `rings.cc:ncclBuildRings`; the AllGather3 part of
//! `init.cc:initTransportsRank`; `search.cc:ncclTopoGetNetDev`).
//!
//! NCCL runs this on every rank with the all-gathered `ncclTopoRanks`; here it runs once for
//! all ranks (every rank computes the same thing from the same records), and
//! [`CommGraph`] holds the result for every rank.

use super::channel::MAX_TREE_ARITY;
use super::topo_graph::{PATTERN_SPLIT_TREE, PATTERN_TREE, TopoGraph};
use super::trees::{dtree, log2i};
use crate::topo::paths::{check_gdr, local_gpu, local_net};
use crate::topo::system::{NodeRef, System};
use crate::topo::types::*;
use crate::topo::{NodeType, TopoError, TopoParams};

/// A log line with NCCL's subsystem (`crate::log::subsys` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `NCCL_INIT` or `NCCL_GRAPH` (`crate::log::subsys`).
    pub subsys: u64,
    /// The rank that prints it.
    pub rank: usize,
    /// The message.
    pub text: String,
}

/// One rank's links on one channel (`ncclChannel.ring` / `.tree`), NCCL's -1 = none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChanLinks {
    /// Ring predecessor.
    pub ring_prev: i32,
    /// Ring successor.
    pub ring_next: i32,
    /// Tree parent.
    pub tree_up: i32,
    /// Tree children.
    pub tree_down: [i32; MAX_TREE_ARITY],
}

impl Default for ChanLinks {
    fn default() -> Self {
        ChanLinks {
            ring_prev: -1,
            ring_next: -1,
            tree_up: -1,
            tree_down: [-1; MAX_TREE_ARITY],
        }
    }
}

/// `struct ncclTopoRanks`: what one rank contributes to the all-gather.
#[derive(Debug, Clone, Default)]
struct TopoRanks {
    ring_recv: Vec<i32>,
    ring_send: Vec<i32>,
    ring_prev: Vec<i32>,
    ring_next: Vec<i32>,
    tree_to_parent: Vec<i32>,
    tree_to_child0: Vec<i32>,
    tree_to_child1: Vec<i32>,
    cross_nic_ring: i32,
}

/// The comm-wide view of one algorithm's graph after the all-gather (min/max over ranks),
/// what the tuning model reads (`graphs[algo]` in `ncclTopoTuneModel`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GraphInfo {
    /// Graph id (0 ring, 1 tree, 2 collnet chain, 3 NVLS, 4 collnet direct).
    pub id: i32,
    /// Pattern (the first rank's; NCCL keeps each rank's own).
    pub pattern: i32,
    /// Channels (min over ranks).
    pub n_channels: usize,
    /// Same channels (min).
    pub same_channels: bool,
    /// Intra bandwidth, GB/s (min).
    pub bw_intra: f32,
    /// Inter bandwidth, GB/s (min).
    pub bw_inter: f32,
    /// Intra path type (max).
    pub type_intra: PathType,
    /// Inter path type (max).
    pub type_inter: PathType,
    /// Cross NIC (max).
    pub cross_nic: i32,
    /// Inter latency of the first rank's graph, µs.
    pub latency_inter: f32,
}

impl GraphInfo {
    fn of(g: &TopoGraph) -> GraphInfo {
        GraphInfo {
            id: g.id,
            pattern: g.pattern,
            n_channels: g.n_channels,
            same_channels: g.same_channels,
            bw_intra: g.bw_intra,
            bw_inter: g.bw_inter,
            type_intra: g.type_intra,
            type_inter: g.type_inter,
            cross_nic: g.cross_nic,
            latency_inter: g.latency_inter,
        }
    }

    fn merge(&mut self, o: &GraphInfo) {
        self.n_channels = self.n_channels.min(o.n_channels);
        self.same_channels &= o.same_channels;
        self.bw_intra = self.bw_intra.min(o.bw_intra);
        self.bw_inter = self.bw_inter.min(o.bw_inter);
        self.type_intra = self.type_intra.max(o.type_intra);
        self.type_inter = self.type_inter.max(o.type_inter);
        self.cross_nic = self.cross_nic.max(o.cross_nic);
    }
}

/// One host's system and graphs, the input of [`connect`].
#[derive(Debug, Clone)]
pub struct HostGraphs {
    /// The host's system (after trimming, paths computed).
    pub system: System,
    /// Global ranks of this host, ascending.
    pub ranks: Vec<usize>,
    /// Ring graph (id 0).
    pub ring: TopoGraph,
    /// Tree graph (id 1).
    pub tree: TopoGraph,
    /// NVLS graph (id 3): no channels when NVLS is not supported
    /// ([`crate::topo::nvls_support`]).
    pub nvls: TopoGraph,
    /// CollNetChain graph (id 2, pattern TREE over CollNet NICs): no channels when no
    /// NIC of the host has CollNet support.
    pub collnet_chain: TopoGraph,
    /// CollNetDirect graph (id 4, pattern COLLNET_DIRECT): one head GPU per channel,
    /// no channels when no NIC of the host has CollNet support.
    pub collnet_direct: TopoGraph,
}

/// Every rank's channels and the comm-wide facts derived with them.
#[derive(Debug, Clone)]
pub struct CommGraph {
    /// Ranks.
    pub nranks: usize,
    /// Nodes (in NCCL's sense: systems, numbered by first appearance of channel 0's ring
    /// receiver).
    pub n_nodes: usize,
    /// Node of each rank.
    pub rank_to_node: Vec<usize>,
    /// Host index (into the hosts given to [`connect`]) of each rank.
    pub rank_to_host: Vec<usize>,
    /// Final collective channel count (`comm->nChannels`).
    pub n_channels: usize,
    /// `links[rank][channel]`.
    pub links: Vec<Vec<ChanLinks>>,
    /// Ring order of each channel, starting at rank 0 (`ncclBuildRings` from rank 0).
    pub rings: Vec<Vec<usize>>,
    /// Ring graph after the all-gather.
    pub ring: GraphInfo,
    /// Tree graph after the all-gather.
    pub tree: GraphInfo,
    /// NVLS graph after the all-gather; `n_channels == 0` means no NVLS (NCCL then sets
    /// `comm->nvlsSupport = 0`).
    pub nvls: GraphInfo,
    /// CollNetChain graph after the all-gather (`n_channels == 0`: not searched or
    /// nothing found).
    pub collnet_chain: GraphInfo,
    /// CollNetDirect graph after the all-gather.
    pub collnet_direct: GraphInfo,
    /// CollNet heads per host (`comm->collNetHeadsNum` of `ncclCollNetSetup`,
    /// `src/init.cc`: the distinct first GPUs of the CollNetDirect graph's channels),
    /// the fewest over hosts; 0 when no host's CollNetDirect search found a channel.
    pub collnet_heads: usize,
    /// `collnet_firsts[r]`: the first rank of every channel of rank `r`'s host's
    /// CollNetDirect graph ([`super::collnet::channel_firsts`], global ranks), from
    /// which [`super::collnet::host_order`] takes each channel's heads; every entry
    /// empty when some host's search found no channel (the layout rule then).
    pub collnet_firsts: Vec<Vec<usize>>,
    /// Every host's CollNetChain heads are among its CollNetDirect heads
    /// (`comm->collNetChainSupport`, `isCollNetChainHeadsSubset` in `src/init.cc`).
    pub collnet_chain_support: bool,
    /// Largest tree pattern over ranks (`comm->maxTreePattern`).
    pub max_tree_pattern: i32,
    /// Smallest / largest compute capability over ranks (0 for CPU ranks).
    pub comp_cap: (i32, i32),
    /// Communicator CPU arch and vendor (`ncclTopoComputeCommCPU`: each rank's first CPU,
    /// `MIXED` (4) when ranks differ), for the tuning model.
    pub cpu_arch_vendor: (i32, i32),
    /// Every rank's GPUs reach each other over NVLink only (`ncclTopoPathAllNVLink`, the
    /// tuning model's `isAllNvlink`).
    pub all_nvlink: bool,
    /// Log lines (GRAPH and INIT), in NCCL's order per rank.
    pub log: Vec<LogLine>,
}

impl CommGraph {
    /// `tree.depth` as `connectTrees` sets it: `nRanks/nNodes - 1 + log2i(nNodes)`.
    pub fn tree_depth(&self) -> i64 {
        self.nranks as i64 / self.n_nodes.max(1) as i64 - 1 + log2i(self.n_nodes as i64)
    }
}

#[allow(clippy::needless_range_loop)] // indices as NCCL's loops
fn preset(
    rank: i32,
    ring: &TopoGraph,
    tree: &TopoGraph,
    nch: usize,
    local_ranks: usize,
) -> (TopoRanks, Vec<ChanLinks>) {
    let mut tr = TopoRanks {
        ring_recv: vec![-1; MAXCHANNELS],
        ring_send: vec![-1; MAXCHANNELS],
        ring_prev: vec![-1; MAXCHANNELS],
        ring_next: vec![-1; MAXCHANNELS],
        tree_to_parent: vec![-1; MAXCHANNELS],
        tree_to_child0: vec![-1; MAXCHANNELS],
        tree_to_child1: vec![-1; MAXCHANNELS],
        cross_nic_ring: ring.cross_nic,
    };
    let mut ch = vec![ChanLinks::default(); MAXCHANNELS];
    for c in 0..nch {
        let ri = &ring.intra[c * local_ranks..(c + 1) * local_ranks];
        let ti = &tree.intra[c * local_ranks..(c + 1) * local_ranks];
        for i in 0..local_ranks {
            if ri[i] == rank {
                tr.ring_recv[c] = ri[0];
                tr.ring_send[c] = ri[local_ranks - 1];
                tr.ring_prev[c] = if i == 0 { -1 } else { ri[i - 1] };
                tr.ring_next[c] = if i == local_ranks - 1 { -1 } else { ri[i + 1] };
            }
            if ti[i] == rank {
                let child0 = if tree.pattern == PATTERN_TREE { 0 } else { 1 };
                let child1 = if tree.pattern == PATTERN_SPLIT_TREE { 1 } else { 0 };
                tr.tree_to_parent[c] = ti[0];
                tr.tree_to_child0[c] = ti[child0.min(local_ranks - 1)];
                tr.tree_to_child1[c] = ti[child1.min(local_ranks - 1)];
                ch[c].tree_up = if i == 0 { -1 } else { ti[i - 1] };
                ch[c].tree_down[0] = if i == local_ranks - 1 { -1 } else { ti[i + 1] };
            }
        }
    }
    for c in 0..nch.min(MAXCHANNELS - nch) {
        ch[nch + c] = ch[c];
    }
    (tr, ch)
}

fn set_tree_down(t: &mut ChanLinks, v: i32) -> Result<(), TopoError> {
    let x = t.tree_down.iter().position(|&d| d < 0).ok_or_else(|| {
        TopoError::Graph(format!(
            "Internal error : tree already has {MAX_TREE_ARITY} children ({} {} {})",
            t.tree_down[0], t.tree_down[1], t.tree_down[2]
        ))
    })?;
    t.tree_down[x] = v;
    Ok(())
}

/// `ncclTopoGetNetDev` with a graph: the net device `rank` uses on `channel` of `graph`.
pub fn graph_net_dev(sys: &System, graph: &TopoGraph, rank: i32, channel: usize) -> Option<i32> {
    if graph.n_channels == 0 {
        return None;
    }
    let c = channel % graph.n_channels;
    let ngpus = graph.ngpus;
    let index = if graph.intra[c * ngpus] == rank { 0 } else { 1 };
    super::search::net_dev(sys, graph.inter[c * 2 + index])
}

/// Connects per-host graphs into every rank's channels (preset, all-gather, postset).
#[allow(clippy::needless_range_loop)] // indices as NCCL's loops
/// `hosts[h].ranks` must partition `0..nranks`.
pub fn connect(hosts: &[HostGraphs], nranks: usize, params: &TopoParams) -> Result<CommGraph, TopoError> {
    let mut rank_to_host = vec![usize::MAX; nranks];
    for (h, host) in hosts.iter().enumerate() {
        for &r in &host.ranks {
            if r >= nranks || rank_to_host[r] != usize::MAX {
                return Err(TopoError::Record(format!("rank {r} listed twice or out of range")));
            }
            rank_to_host[r] = h;
        }
    }
    if let Some(r) = rank_to_host.iter().position(|&h| h == usize::MAX) {
        return Err(TopoError::Record(format!("rank {r} belongs to no host")));
    }
    let mut log = Vec::new();

    // Preset, per rank, with its host's graphs.
    let mut all: Vec<TopoRanks> = Vec::with_capacity(nranks);
    let mut chans: Vec<Vec<ChanLinks>> = Vec::with_capacity(nranks);
    let mut n_orig = vec![0usize; nranks];
    for r in 0..nranks {
        let host = &hosts[rank_to_host[r]];
        let local = host.system.count(NodeType::Gpu);
        let n = host.tree.n_channels.min(host.ring.n_channels);
        n_orig[r] = n;
        let (tr, ch) = preset(r as i32, &host.ring, &host.tree, n, local);
        all.push(tr);
        chans.push(ch);
    }

    // Nodes, in order of first appearance of channel 0's ring receiver.
    let mut first_ranks: Vec<i32> = Vec::new();
    let mut tree_patterns: Vec<i32> = Vec::new();
    let mut rank_to_node = vec![0usize; nranks];
    for r in 0..nranks {
        let first = all[r].ring_recv[0];
        let node = match first_ranks.iter().position(|&f| f == first) {
            Some(n) => n,
            None => {
                first_ranks.push(first);
                tree_patterns.push(hosts[rank_to_host[r]].tree.pattern);
                first_ranks.len() - 1
            }
        };
        rank_to_node[r] = node;
    }
    let n_nodes = first_ranks.len();

    // Uniformise the graphs.
    let mut ring = GraphInfo::of(&hosts[rank_to_host[0]].ring);
    let mut tree = GraphInfo::of(&hosts[rank_to_host[0]].tree);
    let mut nvls = GraphInfo::of(&hosts[rank_to_host[0]].nvls);
    let mut collnet_chain = GraphInfo::of(&hosts[rank_to_host[0]].collnet_chain);
    let mut collnet_direct = GraphInfo::of(&hosts[rank_to_host[0]].collnet_direct);
    let mut max_tree_pattern = 0;
    for r in 0..nranks {
        let h = &hosts[rank_to_host[r]];
        ring.merge(&GraphInfo::of(&h.ring));
        tree.merge(&GraphInfo::of(&h.tree));
        nvls.merge(&GraphInfo::of(&h.nvls));
        collnet_chain.merge(&GraphInfo::of(&h.collnet_chain));
        collnet_direct.merge(&GraphInfo::of(&h.collnet_direct));
        max_tree_pattern = max_tree_pattern.max(h.tree.pattern);
    }
    let n = tree.n_channels.min(ring.n_channels);
    ring.n_channels = n;
    tree.n_channels = n;
    for r in 0..nranks {
        if n < n_orig[r] {
            for i in 0..n {
                chans[r][n + i] = chans[r][n_orig[r] + i];
            }
        }
    }
    let mut cpu_arch_vendor: Option<(i32, i32)> = None;
    let mut all_nvlink = true;
    for r in 0..nranks {
        let sys = &hosts[rank_to_host[r]].system;
        let (arch, vendor, _) = sys.cpu_type();
        cpu_arch_vendor = Some(match cpu_arch_vendor {
            None => (arch, vendor),
            Some((a, v)) => (
                if a != arch { cpu_arch::MIXED } else { a },
                if v != vendor { cpu_vendor::MIXED } else { v },
            ),
        });
        all_nvlink &= crate::topo::paths::gpu_path_range(sys, NodeType::Gpu).1 < PathType::Pix;
    }
    let mut comp_cap = (i32::MAX, i32::MIN);
    for host in hosts {
        if let Some((lo, hi)) = host.system.comp_cap() {
            comp_cap = (comp_cap.0.min(lo), comp_cap.1.max(hi));
        }
    }

    // Postset: alternate rings on odd nodes for crossNic 2.
    for r in 0..nranks {
        if all[r].cross_nic_ring == 2 && n.is_multiple_of(2) && rank_to_node[r] % 2 == 1 {
            let t = &mut all[r];
            for c in (0..n).step_by(2) {
                t.ring_recv.swap(c, c ^ 1);
                t.ring_send.swap(c, c ^ 1);
                t.ring_prev.swap(c, c ^ 1);
                t.ring_next.swap(c, c ^ 1);
            }
        }
    }
    let mut prev = vec![vec![-1i32; nranks]; MAXCHANNELS];
    let mut next = vec![vec![-1i32; nranks]; MAXCHANNELS];
    let at = |v: &Vec<i32>, c: usize| v[c];
    for c in 0..n {
        for r in 0..nranks {
            prev[c][r] = at(&all[r].ring_prev, c);
            next[c][r] = at(&all[r].ring_next, c);
        }
        // connectRings
        let recv: Vec<i32> = first_ranks.iter().map(|&f| all[f as usize].ring_recv[c]).collect();
        let send: Vec<i32> = first_ranks.iter().map(|&f| all[f as usize].ring_send[c]).collect();
        for nd in 0..n_nodes {
            let rr = recv[nd];
            let ps = send[(nd + n_nodes - 1) % n_nodes];
            if rr >= 0 {
                prev[c][rr as usize] = ps;
            }
            let sr = send[nd];
            let nr = recv[(nd + 1) % n_nodes];
            if sr >= 0 {
                next[c][sr as usize] = nr;
            }
        }
    }
    // connectTrees (NCCL also sets `tree.depth = nRanks/nNodes - 1 + log2i(nNodes)`, which
    // only the tuning model reads; see `CommGraph::tree_depth`).
    for r in 0..nranks {
        let node = rank_to_node[r];
        let (t0, t1) = dtree(n_nodes as i32, node as i32);
        for c in 0..n {
            let ttp: Vec<i32> = first_ranks.iter().map(|&f| all[f as usize].tree_to_parent[c]).collect();
            let ttc0: Vec<i32> = first_ranks.iter().map(|&f| all[f as usize].tree_to_child0[c]).collect();
            let ttc1: Vec<i32> = first_ranks.iter().map(|&f| all[f as usize].tree_to_child1[c]).collect();
            let me = r as i32;
            let (ch0, ch1) = (c, c + n);
            if me == ttp[node] {
                if t0.up != -1 {
                    chans[r][ch0].tree_up = if t0.parent_child_type == 0 { &ttc0 } else { &ttc1 }[t0.up as usize];
                }
                if t1.up != -1 {
                    chans[r][ch1].tree_up = if t1.parent_child_type == 0 { &ttc0 } else { &ttc1 }[t1.up as usize];
                }
            }
            if me == ttc0[node] {
                if t0.down0 != -1 {
                    set_tree_down(&mut chans[r][ch0], ttp[t0.down0 as usize])?;
                }
                if t1.down0 != -1 {
                    set_tree_down(&mut chans[r][ch1], ttp[t1.down0 as usize])?;
                }
            }
            if me == ttc1[node] {
                if t0.down1 != -1 {
                    set_tree_down(&mut chans[r][ch0], ttp[t0.down1 as usize])?;
                }
                if t1.down1 != -1 {
                    set_tree_down(&mut chans[r][ch1], ttp[t1.down1 as usize])?;
                }
            }
            if me == ttp[node] || me == ttc0[node] || me == ttc1[node] {
                for cc in [ch0, ch1] {
                    let t = chans[r][cc];
                    log.push(LogLine {
                        subsys: crate::log::subsys::GRAPH,
                        rank: r,
                        text: format!(
                            "Tree {} : {} -> {} -> {}/{}/{}",
                            cc, t.tree_up, r, t.tree_down[0], t.tree_down[1], t.tree_down[2]
                        ),
                    });
                }
            }
        }
    }
    for c in 0..n {
        prev[n + c] = prev[c].clone();
        next[n + c] = next[c].clone();
        for r in 0..nranks {
            for cc in [c, c + n] {
                chans[r][cc].ring_prev = prev[c][r];
                chans[r][cc].ring_next = next[c][r];
            }
        }
    }
    let mut nch = MAXCHANNELS.min(n * 2);
    let copy = |chans: &mut Vec<Vec<ChanLinks>>,
                prev: &mut Vec<Vec<i32>>,
                next: &mut Vec<Vec<i32>>,
                start: usize,
                end: usize| {
        let mut c = start;
        while c < end {
            prev[c] = prev[c - start].clone();
            next[c] = next[c - start].clone();
            for ch in chans.iter_mut() {
                ch[c] = ch[c - start];
            }
            c += 1;
        }
        c.max(start)
    };
    if comp_cap.0 >= 90 && n_nodes > 1 && ring.bw_intra > 45.0 && nch < 16 {
        nch = copy(&mut chans, &mut prev, &mut next, nch, 2 * nch);
    }
    let max_n = params.max_nchannels.clamp(1, MAXCHANNELS);
    let min_n = params.min_nchannels.min(MAXCHANNELS);
    nch = max_n.min(nch).min(params.max_ctas.max(1));
    nch = copy(
        &mut chans,
        &mut prev,
        &mut next,
        nch,
        min_n.max(params.min_ctas).min(MAXCHANNELS),
    );

    // ncclBuildRings, from rank 0 (the ring object every rank shares) and from each rank
    // (NCCL's check that every ring closes and holds every rank).
    let mut rings = Vec::with_capacity(nch);
    for c in 0..nch {
        for start in 0..nranks {
            let mut order = Vec::with_capacity(nranks);
            let mut cur = start as i32;
            for _ in 0..nranks {
                if cur < 0 || cur as usize >= nranks {
                    return Err(TopoError::Graph(format!(
                        "ring {c} has no successor for a rank (got {cur})"
                    )));
                }
                order.push(cur as usize);
                cur = next[c][cur as usize];
            }
            if cur != start as i32 {
                return Err(TopoError::Graph(format!(
                    "Error : ring {c} does not loop back to start ({cur} != {start})"
                )));
            }
            let mut seen = vec![false; nranks];
            for &o in &order {
                seen[o] = true;
            }
            if let Some(miss) = seen.iter().position(|&s| !s) {
                return Err(TopoError::Graph(format!(
                    "Error : ring {c} does not contain rank {miss}"
                )));
            }
            if start == 0 {
                log.push(LogLine {
                    subsys: crate::log::subsys::INIT,
                    rank: 0,
                    text: channel_line(c, nch, &order, nranks),
                });
                rings.push(order);
            }
        }
    }
    for (r, ch) in chans.iter_mut().enumerate() {
        ch.truncate(nch);
        let mut trees = String::new();
        for (c, t) in ch.iter().enumerate() {
            trees.push_str(&format!(
                " [{}] {}/{}/{}->{}->{}",
                c, t.tree_down[0], t.tree_down[1], t.tree_down[2], r, t.tree_up
            ));
            log.push(LogLine {
                subsys: crate::log::subsys::GRAPH,
                rank: r,
                text: format!("Ring {:02} : {} -> {} -> {}", c, t.ring_prev, r, t.ring_next),
            });
        }
        let mut trees = format!("Trees{trees}");
        if trees.len() > 1023 {
            trees.truncate(1023);
        }
        log.push(LogLine {
            subsys: crate::log::subsys::INIT,
            rank: r,
            text: trees,
        });
    }
    let collnet_heads = hosts
        .iter()
        .map(|h| super::collnet::searched_heads(&h.collnet_direct).len())
        .min()
        .unwrap_or(0);
    let collnet_firsts: Vec<Vec<usize>> = (0..nranks)
        .map(|r| {
            if collnet_heads > 0 {
                super::collnet::channel_firsts(&hosts[rank_to_host[r]].collnet_direct)
            } else {
                Vec::new()
            }
        })
        .collect();
    Ok(CommGraph {
        nranks,
        n_nodes,
        rank_to_node,
        rank_to_host,
        n_channels: nch,
        links: chans,
        rings,
        ring,
        tree,
        nvls,
        collnet_heads,
        collnet_firsts,
        collnet_chain_support: hosts.iter().all(|h| {
            super::collnet::chain_heads_subset(&h.collnet_chain, &super::collnet::searched_heads(&h.collnet_direct))
        }),
        collnet_chain,
        collnet_direct,
        max_tree_pattern,
        comp_cap: if comp_cap.0 == i32::MAX { (0, 0) } else { comp_cap },
        cpu_arch_vendor: cpu_arch_vendor.unwrap_or((-1, -1)),
        all_nvlink,
        log,
    })
}

/// `dumpLine` of `ncclBuildRings`: `Channel %02d/%02d :` + `" %*d"` per rank (width = digits
/// of `nranks-1`), cut at 127 characters with `...`.
pub fn channel_line(c: usize, nch: usize, order: &[usize], nranks: usize) -> String {
    let width = nranks.saturating_sub(1).to_string().len();
    let mut line = format!("Channel {c:02}/{nch:02} :");
    for r in order {
        line.push_str(&format!(" {r:>width$}"));
        if line.len() >= 127 {
            break;
        }
    }
    if line.len() >= 128 {
        line.truncate(124);
        line.push_str("...");
    } else if line.len() > 127 {
        line.truncate(127);
    }
    line
}

/// NCCL's p2p net device choice for `rank` talking to remote `peer` on `channel`
/// (`ncclTopoGetNetDev` without a graph): `(net device, proxy rank)`.
#[allow(clippy::too_many_arguments)]
pub fn p2p_net_dev(
    sys: &System,
    rank: i32,
    peer_dev: i32,
    channel: usize,
    params: &TopoParams,
) -> Result<Option<(i32, i32)>, TopoError> {
    let Some(g1) = sys.rank_to_index(rank) else {
        return Ok(None);
    };
    if sys.count(NodeType::Net) == 0 {
        return Ok(None);
    }
    let policy = params.netdevs_policy;
    let mut n = local_net(sys, g1, channel, policy)?;
    let mut proxy = rank;
    let dev_of = |n: usize| sys.of(NodeType::Net)[n].net().dev;
    let pxn_level = if params.pxn_disable { 0 } else { params.p2p_pxn_level };
    if params.cross_nic == 0 || pxn_level != 0 {
        // The local GPU with the peer's NVML index.
        let local = sys
            .of(NodeType::Gpu)
            .iter()
            .position(|g| topo_id_system(g.id) as usize == sys.system_id && g.gpu().0 == peer_dev);
        let Some(lg) = local else {
            return Ok(Some((dev_of(n), proxy)));
        };
        let n2 = local_net(sys, lg, channel, policy)?;
        if params.cross_nic == 0 {
            n = n2;
        }
        if pxn_level == 1 {
            if sys.path(NodeRef::new(NodeType::Gpu, g1), NodeType::Net, n2).ty <= PathType::Pxn {
                n = n2;
                proxy = crate::topo::paths::intermediate_rank(sys, g1, n2)?;
            }
        } else if pxn_level == 2 {
            let g2 = local_gpu(sys, n2, policy)?;
            if g2 != -1 {
                let g2 = g2 as usize;
                let pxn_ty = if params.pxn_c2c { PathType::P2c } else { PathType::Pxb };
                let gdr = check_gdr(sys, g2, n2, false, params)?;
                let peer = NodeRef::new(NodeType::Gpu, g2);
                if sys.path(peer, NodeType::Gpu, g1).ty <= PathType::Nvl
                    && sys.path(peer, NodeType::Net, n2).ty <= pxn_ty
                    && gdr != crate::topo::paths::GdrMode::Disable
                {
                    return Ok(Some((dev_of(n2), sys.of(NodeType::Gpu)[g2].gpu().1)));
                }
            }
        }
    }
    Ok(Some((dev_of(n), proxy)))
}
