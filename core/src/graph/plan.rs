//! The integration contract: from every rank's [`TopoRecord`] to this rank's channels.
//!
//! [`CommTopology::build`] does, for the whole communicator, what NCCL's
//! `initTransportsRank` does between the first all-gather and transport setup:
//! per host, fuse the ranks' XML (`ncclTopoGetSystem`), build the system, compute and trim
//! paths, search the ring and tree graphs (`ncclTopoCompute`); then connect the hosts'
//! graphs (`ncclTopoPreset`/`Postset`). [`plan`] extracts one rank's view ([`TopoPlan`]).
//!
//! Everything here is deterministic and free of I/O except reading `NCCL_GRAPH_FILE` when
//! it is set, so every rank computes the same rings and trees from the same records.
//! Hosts whose fused topology is identical up to rank numbers are searched once.
//!
//! ## Wiring it into communicator init
//!
//! ```no_run
//! # fn all_gather(mine: Vec<u8>) -> Vec<Vec<u8>> { vec![mine] }
//! # fn f(rank: usize, cfg: &ferroccl::config::Config, nets: &[ferroccl_plugin_api::sdk::Properties])
//! #     -> Result<(), ferroccl::topo::TopoError> {
//! use ferroccl::topo::{TopoParams, TopoRecord, detect};
//! let params = TopoParams::from_config(cfg)?;
//! // Detection (sysfs, affinity, the plugin's devices; NCCL_TOPO_FILE honoured).
//! let (mine, _log) = detect::detect(rank, nets, &params)?;
//! // The all-gather of the peer-info phase carries the record's bytes.
//! let records = all_gather(mine.to_bytes())
//!     .iter()
//!     .map(|b| TopoRecord::from_bytes(b))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let plan = ferroccl::graph::plan(rank, &records, &params)?;
//! plan.emit_log(); // NCCL_DEBUG_SUBSYS=INIT,GRAPH
//! for line in plan.write_dumps(&params)? {
//!     ferroccl::nccl_info!(GRAPH, "{line}");
//! }
//! // plan.channels: Vec<graph::Channel> for the schedules; plan.p2p_net(peer, c): the NIC
//! // for p2p channel c toward a remote peer; plan.ring / plan.tree: the tuning inputs.
//! # Ok(()) }
//! ```
//!
//! Records must be indexed by rank (`records[r].rank == r`); a record that fails to decode
//! or to parse is an error naming the rank.

use std::collections::HashMap;

use super::channel::{Channel, Ring, TreeLinks};
use super::connect::{self, ChanLinks, CommGraph, GraphInfo, HostGraphs, LogLine};
use super::search;
use super::topo_graph::{self, PATTERN_BALANCED_TREE, PATTERN_RING, TopoGraph};
use crate::topo::record::TopoRecord;
use crate::topo::system::{self, NodeInfo, System};
use crate::topo::types::{MAXCHANNELS, TOPO_XML_MAX_NODES};
use crate::topo::xml::{self, ParseOptions, Schema, XmlNode};
use crate::topo::{NodeType, TopoError, TopoParams, fill, paths};

/// One host's topology and graphs.
#[derive(Debug, Clone)]
pub struct HostTopology {
    /// Host hash (the records').
    pub host_hash: u64,
    /// Global ranks on this host, ascending (local index = position).
    pub ranks: Vec<usize>,
    /// The fused topology XML (what `NCCL_TOPO_DUMP_FILE` gets).
    pub fused_xml: XmlNode,
    /// System, ring and tree graphs.
    pub graphs: HostGraphs,
    /// `ncclTopoPrint` lines (system and paths).
    pub system_log: Vec<String>,
    /// `ncclTopoPrintGraph` lines of the ring, the tree, then the CollNetChain and
    /// CollNetDirect graphs where they have channels.
    pub graph_log: Vec<String>,
    /// The searches' relaxation steps (when `params.explain`).
    pub why: Vec<String>,
}

/// The whole communicator's topology: every host and every rank's channels.
#[derive(Debug, Clone)]
pub struct CommTopology {
    /// Hosts, in order of first appearance by rank.
    pub hosts: Vec<HostTopology>,
    /// Channels of every rank.
    pub comm: CommGraph,
}

/// One p2p channel's network choice toward a remote peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P2pNet {
    /// Net plugin device.
    pub net_dev: usize,
    /// Rank whose proxy drives it (≠ self with PXN).
    pub proxy_rank: usize,
}

/// This rank's result (the lead's init consumes it).
#[derive(Debug, Clone)]
pub struct TopoPlan {
    /// This rank.
    pub rank: usize,
    /// Communicator size.
    pub nranks: usize,
    /// Collective channels: ring (shared order from rank 0), this rank's tree links, and the
    /// net device of its ring connections on that channel (`None` when the channel's ring
    /// does not leave the node at this rank).
    pub channels: Vec<Channel>,
    /// Net device of this rank's tree connections per channel (`None` when its tree links
    /// stay in the node).
    pub tree_net_dev: Vec<Option<usize>>,
    /// `p2p[peer][c]`: NIC for p2p channel `c` (0..64) toward a peer on another host; empty
    /// for peers on this host.
    pub p2p: Vec<Vec<P2pNet>>,
    /// Nodes (NCCL's `nNodes`).
    pub n_nodes: usize,
    /// Node of every rank.
    pub rank_to_node: Vec<usize>,
    /// This rank's index on its node, and the node's rank count.
    pub local_rank: usize,
    /// Ranks on this rank's node.
    pub local_ranks: usize,
    /// Ring graph after the all-gather (for tuning).
    pub ring: GraphInfo,
    /// Tree graph after the all-gather (for tuning).
    pub tree: GraphInfo,
    /// CollNetChain graph after the all-gather (no channels: not searched or none found).
    pub collnet_chain: GraphInfo,
    /// CollNetDirect graph after the all-gather.
    pub collnet_direct: GraphInfo,
    /// CollNet heads the CollNetDirect search found per host, the fewest over hosts
    /// (0: none; [`super::collnet::direct_nheads`] turns it into the heads used).
    pub collnet_heads: usize,
    /// Per rank, the first rank of every channel of its host's searched CollNetDirect
    /// graph (all empty: nothing searched), [`CommGraph::collnet_firsts`]; the heads
    /// the connection setup uses ([`super::collnet::host_order`]).
    pub collnet_firsts: Vec<Vec<usize>>,
    /// Largest tree pattern over ranks.
    pub max_tree_pattern: i32,
    /// (min, max) compute capability over ranks (0 for CPU ranks).
    pub comp_cap: (i32, i32),
    /// Communicator CPU (arch, vendor), `MIXED` (4) where ranks differ.
    pub cpu_arch_vendor: (i32, i32),
    /// All GPUs of every node NVLink-connected (`comm->isAllNvlink`).
    pub all_nvlink: bool,
    /// Fused topology XML of this rank's host (`NCCL_TOPO_DUMP_FILE` content).
    pub topo_xml: String,
    /// Graph XML of this rank's host (`NCCL_GRAPH_DUMP_FILE` content), or why NCCL could not
    /// write it.
    pub graph_xml: Result<String, String>,
    /// This rank's log lines, in NCCL's order.
    pub log: Vec<LogLine>,
}

impl TopoPlan {
    /// The NIC for p2p channel `c` toward `peer` (`None` for peers on this host).
    pub fn p2p_net(&self, peer: usize, c: usize) -> Option<P2pNet> {
        let v = self.p2p.get(peer)?;
        (!v.is_empty()).then(|| v[c % v.len()])
    }

    /// Writes `NCCL_TOPO_DUMP_FILE` / `NCCL_GRAPH_DUMP_FILE` when this rank is the dumping
    /// rank (`*_DUMP_FILE_RANK`, default 0), as NCCL does: a file that cannot be created is
    /// reported in the returned log lines, not an error; a graph NCCL cannot name (a `C2C`,
    /// `NET` or `DIS` type) is an error, as in NCCL.
    pub fn write_dumps(&self, params: &TopoParams) -> Result<Vec<String>, TopoError> {
        let mut log = Vec::new();
        if let Some(p) = &params.topo_dump_file
            && self.rank == params.topo_dump_rank
        {
            log.push(format!("NCCL_TOPO_DUMP_FILE set by environment to {}", p.display()));
            if let Err(e) = std::fs::write(p, &self.topo_xml) {
                log.push(format!("Unable to open {}, not dumping topology: {e}", p.display()));
            }
        }
        if let Some(p) = &params.graph_dump_file
            && self.rank == params.graph_dump_rank
        {
            log.push(format!("NCCL_GRAPH_DUMP_FILE set by environment to {}", p.display()));
            let text = self.graph_xml.clone().map_err(TopoError::Graph)?;
            if let Err(e) = std::fs::write(p, text) {
                log.push(format!("Unable to open {}, not dumping graphs: {e}", p.display()));
            }
        }
        Ok(log)
    }

    /// Emits the log lines through the NCCL logger (`NCCL_DEBUG=INFO`,
    /// `NCCL_DEBUG_SUBSYS=INIT,GRAPH`).
    pub fn emit_log(&self) {
        for l in &self.log {
            if l.subsys == crate::log::subsys::INIT {
                crate::log::nccl_info!(INIT, "{}", l.text);
            } else {
                crate::log::nccl_info!(GRAPH, "{}", l.text);
            }
        }
    }
}

/// Loads `NCCL_GRAPH_FILE` (NCCL: unreadable → `ncclSystemError`).
pub fn load_graph_file(params: &TopoParams) -> Result<Option<XmlNode>, TopoError> {
    match &params.graph_file {
        Some(p) => Ok(Some(xml::load_file(p, Schema::Graphs)?)),
        None => Ok(None),
    }
}

struct Canon {
    system: System,
    ring: TopoGraph,
    tree: TopoGraph,
    nvls: TopoGraph,
    collnet_chain: TopoGraph,
    collnet_direct: TopoGraph,
    why: Vec<String>,
}

fn search_host(
    canon_xml: &XmlNode,
    nranks: usize,
    params: &TopoParams,
    graph_file: Option<&XmlNode>,
) -> Result<Canon, TopoError> {
    let mut sys = system::from_xml(canon_xml, 0)?;
    paths::compute_paths(&mut sys, params)?;
    paths::trim_system(&mut sys, 0, nranks);
    paths::compute_paths(&mut sys, params)?;
    paths::search_init(&mut sys);
    let ngpus = sys.count(NodeType::Gpu);
    let mut why = Vec::new();
    let w = if params.explain { Some(&mut why) } else { None };
    let mut ring = TopoGraph::new(0, PATTERN_RING, 1, MAXCHANNELS / 2, ngpus);
    search::compute(&mut sys, &mut ring, params, graph_file, w)?;
    let mut tree = TopoGraph::new(1, PATTERN_BALANCED_TREE, ring.n_channels, ring.n_channels, ngpus);
    let w = if params.explain { Some(&mut why) } else { None };
    search::compute(&mut sys, &mut tree, params, graph_file, w)?;
    // initTransportsRank: the NVLS graph only where ncclNvlsInit found support. Its search
    // is not part of `--why` (the explorer prints its result with the tuning).
    let mut nvls = TopoGraph::new(3, topo_graph::PATTERN_NVLS, 1, MAXCHANNELS, ngpus);
    if crate::topo::nvls_support(&sys, params.nvls_enable) {
        search::compute(&mut sys, &mut nvls, params, graph_file, None)?;
    }
    // initTransportsRank (`src/init.cc`): with CollNet, the CollNetChain graph (id 2,
    // TREE over CollNet NICs, as many channels as the ring) and the CollNetDirect graph
    // (id 4, 1..MAXCHANNELS heads). NCCL searches them when CollNet is enabled; a NIC
    // has `coll="1"` only when the CollNet plugin serves it (`ncclTopoFillNet`), and
    // without one both searches find nothing, so they run whenever one does.
    let (collnet_chain, collnet_direct) = collnet_graphs(&mut sys, ring.n_channels, params, graph_file)?;
    Ok(Canon {
        system: sys,
        ring,
        tree,
        nvls,
        collnet_chain,
        collnet_direct,
        why,
    })
}

/// The CollNetChain and CollNetDirect graphs of a host whose paths are computed
/// (`src/init.cc` `initTransportsRank`; `ncclTopoCompute` for each): both without
/// channels when no NIC of `sys` has CollNet support.
pub fn collnet_graphs(
    sys: &mut System,
    ring_channels: usize,
    params: &TopoParams,
    graph_file: Option<&XmlNode>,
) -> Result<(TopoGraph, TopoGraph), TopoError> {
    let ngpus = sys.count(NodeType::Gpu);
    let mut chain = TopoGraph::new(2, topo_graph::PATTERN_TREE, ring_channels, ring_channels, ngpus);
    chain.coll_net = true;
    let mut direct = TopoGraph::new(4, topo_graph::PATTERN_COLLNET_DIRECT, 1, MAXCHANNELS, ngpus);
    direct.coll_net = true;
    let coll = sys
        .of(NodeType::Net)
        .iter()
        .any(|n| matches!(&n.info, NodeInfo::Net(ni) if ni.coll));
    if coll {
        search::compute(sys, &mut chain, params, graph_file, None)?;
        search::compute(sys, &mut direct, params, graph_file, None)?;
    }
    Ok((chain, direct))
}

fn relabel(g: &TopoGraph, ranks: &[usize]) -> TopoGraph {
    let mut g = g.clone();
    for c in 0..g.n_channels.max(1) {
        for i in 0..g.ngpus {
            let v = &mut g.intra[c * g.ngpus + i];
            if *v >= 0 && (*v as usize) < ranks.len() {
                *v = ranks[*v as usize] as i32;
            }
        }
    }
    // Channels beyond n_channels are never read; relabel them too for tidy dumps.
    g
}

fn set_ranks(x: &mut XmlNode, map: &dyn Fn(i64) -> i64) {
    x.for_each_mut("gpu", &mut |g| {
        if let Some(r) = g.attr("rank").and_then(crate::topo::types::parse_c_int) {
            g.set_attr("rank", map(r));
        }
    });
}

impl CommTopology {
    /// Builds every host's topology and graphs and connects them. `records[r]` must be rank
    /// `r`'s record.
    pub fn build(records: &[TopoRecord], params: &TopoParams) -> Result<CommTopology, TopoError> {
        let nranks = records.len();
        if nranks == 0 {
            return Err(TopoError::Record("no records".into()));
        }
        for (i, r) in records.iter().enumerate() {
            if r.rank as usize != i {
                return Err(TopoError::Record(format!("record {i} is rank {}'s", r.rank)));
            }
        }
        let graph_file = load_graph_file(params)?;
        // Hosts by first appearance.
        let mut host_of: Vec<u64> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (r, rec) in records.iter().enumerate() {
            match host_of.iter().position(|&h| h == rec.host_hash) {
                Some(h) => members[h].push(r),
                None => {
                    host_of.push(rec.host_hash);
                    members.push(vec![r]);
                }
            }
        }
        let mut cache: HashMap<String, Canon> = HashMap::new();
        let mut hosts = Vec::with_capacity(host_of.len());
        for (h, ranks) in members.iter().enumerate() {
            let hash = host_of[h];
            // Per rank: its XML, its device named by local index, trimmed; fused in rank order.
            let mut fused: Option<XmlNode> = None;
            for (local, &r) in ranks.iter().enumerate() {
                let rec = &records[r];
                let opts = ParseOptions {
                    max_nodes: TOPO_XML_MAX_NODES * 4,
                };
                let mut x = xml::parse_with(&rec.xml, Schema::Topology, &format!("rank {r} topology"), opts)?;
                fill::set_host_hash(&mut x, 0);
                match &rec.gpu_bus_id {
                    Some(bus) => {
                        let g = x
                            .find_kv_mut("pci", "busid", bus)
                            .and_then(|p| p.sub_mut("gpu"))
                            .ok_or_else(|| {
                                TopoError::Record(format!("rank {r}: no <gpu> under <pci busid=\"{bus}\">"))
                            })?;
                        g.set_attr("rank", local);
                    }
                    None => {
                        let old = fill::process_bus_id(r);
                        let p = x.find_kv_mut("pci", "busid", &old).ok_or_else(|| {
                            TopoError::Record(format!("rank {r}: no process device <pci busid=\"{old}\">"))
                        })?;
                        p.set_attr("busid", fill::process_bus_id(local));
                        if let Some(g) = p.sub_mut("gpu") {
                            g.set_attr("rank", local);
                        }
                        fill::set_process_dev(&mut x, local, local);
                    }
                }
                xml::trim(&mut x);
                xml::fuse(&mut fused, &x);
            }
            let canon_xml = fused.ok_or_else(|| TopoError::Record("host with no rank".into()))?;
            let key = xml::dump(&canon_xml);
            if !cache.contains_key(&key) {
                let c = search_host(&canon_xml, nranks, params, graph_file.as_ref())?;
                cache.insert(key.clone(), c);
            }
            let canon = &cache[&key];
            // The real host: ranks and host hash restored.
            let mut real_xml = canon_xml.clone();
            set_ranks(&mut real_xml, &|l| ranks.get(l as usize).map_or(l, |&r| r as i64));
            fill::set_host_hash(&mut real_xml, hash);
            let mut sys = canon.system.clone();
            for g in &mut sys.nodes[NodeType::Gpu.idx()] {
                if let NodeInfo::Gpu { rank, .. } = &mut g.info {
                    *rank = ranks[*rank as usize] as i32;
                }
            }
            sys.host_hashes = vec![hash];
            let ring = relabel(&canon.ring, ranks);
            let tree = relabel(&canon.tree, ranks);
            let nvls = relabel(&canon.nvls, ranks);
            let collnet_chain = relabel(&canon.collnet_chain, ranks);
            let collnet_direct = relabel(&canon.collnet_direct, ranks);
            let mut system_log = system::print_system(&sys);
            system_log.extend(paths::print_paths(&sys));
            let mut graph_log = search::print_graph(&sys, &ring);
            graph_log.extend(search::print_graph(&sys, &tree));
            // NCCL prints every graph it searched (`ncclTopoPrintGraph` after each
            // `ncclTopoCompute`): the CollNet ones only where CollNet NICs exist.
            for g in [&collnet_chain, &collnet_direct] {
                if g.n_channels > 0 {
                    graph_log.extend(search::print_graph(&sys, g));
                }
            }
            hosts.push(HostTopology {
                host_hash: hash,
                ranks: ranks.clone(),
                fused_xml: real_xml,
                graphs: HostGraphs {
                    system: sys,
                    ranks: ranks.clone(),
                    ring,
                    tree,
                    nvls,
                    collnet_chain,
                    collnet_direct,
                },
                system_log,
                graph_log,
                why: canon.why.clone(),
            });
        }
        let hg: Vec<HostGraphs> = hosts.iter().map(|h| h.graphs.clone()).collect();
        let comm = connect::connect(&hg, nranks, params)?;
        Ok(CommTopology { hosts, comm })
    }

    /// The host of `rank`.
    pub fn host_of(&self, rank: usize) -> &HostTopology {
        &self.hosts[self.comm.rank_to_host[rank]]
    }

    /// The graph XML NCCL dumps for a host (`ncclTopoDumpGraphs`: ring, tree, the
    /// CollNetDirect and CollNetChain graphs (empty without CollNet NICs), then the
    /// NVLS graph: one head GPU per channel, empty where NVLS is not supported).
    pub fn graph_xml(&self, host: usize) -> Result<String, TopoError> {
        let h = &self.hosts[host];
        let g = &h.graphs;
        let x = super::graph_xml::graphs_to_xml(
            &g.system,
            &[&g.ring, &g.tree, &g.collnet_direct, &g.collnet_chain, &g.nvls],
        )?;
        Ok(xml::dump(&x))
    }

    /// One rank's plan.
    pub fn plan_for(&self, rank: usize, params: &TopoParams) -> Result<TopoPlan, TopoError> {
        let nranks = self.comm.nranks;
        if rank >= nranks {
            return Err(TopoError::Record(format!("rank {rank} of {nranks}")));
        }
        let host = self.host_of(rank);
        let sys = &host.graphs.system;
        let node_of = &self.comm.rank_to_node;
        let remote = |a: i32| a >= 0 && node_of[a as usize] != node_of[rank];
        let mut channels = Vec::with_capacity(self.comm.n_channels);
        let mut tree_net_dev = Vec::with_capacity(self.comm.n_channels);
        for (c, l) in self.comm.links[rank].iter().enumerate() {
            let ChanLinks {
                ring_prev,
                ring_next,
                tree_up,
                tree_down,
            } = *l;
            let ring_net = (remote(ring_prev) || remote(ring_next))
                .then(|| connect::graph_net_dev(sys, &host.graphs.ring, rank as i32, c))
                .flatten()
                .and_then(|d| usize::try_from(d).ok());
            let tree_net = (remote(tree_up) || tree_down.iter().any(|&d| remote(d)))
                .then(|| connect::graph_net_dev(sys, &host.graphs.tree, rank as i32, c))
                .flatten()
                .and_then(|d| usize::try_from(d).ok());
            channels.push(Channel {
                id: c,
                ring: Ring {
                    ranks: self.comm.rings[c].clone(),
                },
                tree: TreeLinks {
                    up: usize::try_from(tree_up).ok(),
                    down: tree_down.iter().filter_map(|&d| usize::try_from(d).ok()).collect(),
                },
                net_dev: ring_net,
            });
            tree_net_dev.push(tree_net);
        }
        let mut p2p = vec![Vec::new(); nranks];
        // The choice depends on the peer's device index only: compute it once per index.
        let mut by_dev: HashMap<i32, Vec<P2pNet>> = HashMap::new();
        for (peer, slot) in p2p.iter_mut().enumerate() {
            if self.comm.rank_to_host[peer] == self.comm.rank_to_host[rank] {
                continue;
            }
            let ph = self.host_of(peer);
            let psys = &ph.graphs.system;
            let peer_dev = psys
                .rank_to_index(peer as i32)
                .map(|g| psys.of(NodeType::Gpu)[g].gpu().0)
                .unwrap_or(-1);
            if let Some(v) = by_dev.get(&peer_dev) {
                slot.clone_from(v);
                continue;
            }
            for c in 0..MAXCHANNELS {
                match connect::p2p_net_dev(sys, rank as i32, peer_dev, c, params)? {
                    Some((d, p)) => slot.push(P2pNet {
                        net_dev: d as usize,
                        proxy_rank: p as usize,
                    }),
                    None => break,
                }
            }
            by_dev.insert(peer_dev, slot.clone());
        }
        let node = node_of[rank];
        let local_rank = node_of[..rank].iter().filter(|&&n| n == node).count();
        let local_ranks = node_of.iter().filter(|&&n| n == node).count();
        let mut log: Vec<LogLine> = Vec::new();
        let graph_line = |t: &String| LogLine {
            subsys: crate::log::subsys::GRAPH,
            rank,
            text: t.clone(),
        };
        log.extend(host.system_log.iter().map(graph_line));
        log.extend(host.graph_log.iter().map(graph_line));
        log.extend(self.comm.log.iter().filter(|l| l.rank == rank).cloned());
        let h = self.comm.rank_to_host[rank];
        Ok(TopoPlan {
            rank,
            nranks,
            channels,
            tree_net_dev,
            p2p,
            n_nodes: self.comm.n_nodes,
            rank_to_node: node_of.clone(),
            local_rank,
            local_ranks,
            ring: self.comm.ring,
            tree: self.comm.tree,
            collnet_chain: self.comm.collnet_chain,
            collnet_direct: self.comm.collnet_direct,
            collnet_heads: self.comm.collnet_heads,
            collnet_firsts: self.comm.collnet_firsts.clone(),
            max_tree_pattern: self.comm.max_tree_pattern,
            comp_cap: self.comm.comp_cap,
            cpu_arch_vendor: self.comm.cpu_arch_vendor,
            all_nvlink: self.comm.all_nvlink,
            topo_xml: xml::dump(&host.fused_xml),
            graph_xml: self.graph_xml(h).map_err(|e| e.to_string()),
            log,
        })
    }
}

/// This rank's channels and the facts around them, from every rank's record
/// (deterministic: every rank computes the same rings and trees).
pub fn plan(rank: usize, records: &[TopoRecord], params: &TopoParams) -> Result<TopoPlan, TopoError> {
    CommTopology::build(records, params)?.plan_for(rank, params)
}
