//! Graph search (NCCL 2.30.7 `src/graph/search.cc`: `ncclTopoCompute`, `ncclTopoSearchRec`,
//! `ncclTopoSearchRecNet`, `ncclTopoSearchRecGpu`, `ncclTopoFollowPath`,
//! `ncclTopoSearchNextGpuSort`, `ncclTopoSelectNets`, `ncclTopoSearchCheckNet`,
//! `ncclTopoCompareGraphs`, `ncclTopoDupChannels`, `ncclTopoPrintGraph`).
//!
//! The search is NCCL's, step for step: the same speed tables, the same relaxation order
//! (same channels → different channels → simpler tree (sm ≥ 90) → wider intra path type →
//! wider GPU↔NIC path type → alternating NICs → lower speed), the same candidate orders
//! and the same budgets counted in recursive calls, so it settles on the same channels.
//! Link bandwidths are charged on the system while searching and restored on backtrack.
//!
//! The NVLS search (pattern 5: one NVLink SHARP head per channel, `ncclTopoSearchTryNvls`) is
//! NCCL's too. Not modelled: the CollNet searches (`collNet` graphs, pattern 6) and MNNVL
//! (several hosts in one system): graphs for them are left empty.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::topo_graph::{
    PATTERN_BALANCED_TREE, PATTERN_COLLNET_DIRECT, PATTERN_NVLS, PATTERN_RING, PATTERN_SPLIT_TREE, PATTERN_TREE,
    TopoGraph, pattern_name,
};
use crate::topo::paths::{self, get_local, local_net};
use crate::topo::system::{NodeInfo, NodeRef, System, node_label};
use crate::topo::types::*;
use crate::topo::{TopoError, TopoParams};

/// `NCCL_SEARCH_GLOBAL_TIMEOUT` (recursive calls).
pub const SEARCH_GLOBAL_TIMEOUT: i64 = 1 << 19;
/// `NCCL_SEARCH_TIMEOUT`.
pub const SEARCH_TIMEOUT: i64 = 1 << 14;
/// `NCCL_SEARCH_TIMEOUT_TREE`.
pub const SEARCH_TIMEOUT_TREE: i64 = 1 << 14;
/// `NCCL_SEARCH_TIMEOUT_SAMECHANNELS`.
pub const SEARCH_TIMEOUT_SAMECHANNELS: i64 = 1 << 8;

/// `NCCL_MAX_NVLS_ARITY`: most NVLS heads (channels of the NVLS graph).
pub const MAX_NVLS_ARITY: usize = 32;

const FORCED_ORDER_PCI: i32 = 1;
const FORCED_ORDER_REPLAY: i32 = 2;

/// Speed candidates, GB/s (`speedArrayIntra/Inter`, `sm90…`, `sm100…`).
pub const SPEED_INTRA: [f32; 13] = [40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0];
/// Inter-node speeds below sm 9.0.
pub const SPEED_INTER: [f32; 19] = [
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12,
];
/// Intra-node speeds for sm 9.x.
pub const SM90_SPEED_INTRA: [f32; 11] = [60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0];
/// Inter-node speeds for sm 9.x.
pub const SM90_SPEED_INTER: [f32; 17] = [
    48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
];
/// Intra-node speeds for sm ≥ 10.0.
pub const SM100_SPEED_INTRA: [f32; 12] = [90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0];
/// Inter-node speeds for sm ≥ 10.0.
pub const SM100_SPEED_INTER: [f32; 20] = [
    96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
];

/// The speed table NCCL uses for a minimum compute capability and inter/intra search.
pub fn speed_table(cc_min: i32, inter: bool) -> &'static [f32] {
    match (inter, cc_min) {
        (false, c) if c >= 100 => &SM100_SPEED_INTRA,
        (false, c) if c >= 90 => &SM90_SPEED_INTRA,
        (false, _) => &SPEED_INTRA,
        (true, c) if c >= 100 => &SM100_SPEED_INTER,
        (true, c) if c >= 90 => &SM90_SPEED_INTER,
        (true, _) => &SPEED_INTER,
    }
}

/// `ncclTopoDupChannels`: doubles the channels (up to `max_channels`) when the per-channel
/// bandwidth is high enough, dividing the bandwidth accordingly.
pub fn dup_channels(graph: &mut TopoGraph, cc_min: i32, ngpus: usize) {
    if graph.n_channels == 0
        || graph.pattern == PATTERN_NVLS
        || graph.bw_intra < 25.0
        || (cc_min > 80 && graph.bw_intra < 50.0 && graph.n_channels > 4)
    {
        return;
    }
    let n = graph.n_channels;
    let dup = (n * 2).min(graph.max_channels);
    for c in n..dup {
        for g in 0..ngpus {
            graph.intra[c * ngpus + g] = graph.intra[(c - n) * ngpus + g];
        }
        graph.inter[c * 2] = graph.inter[(c - n) * 2];
        graph.inter[c * 2 + 1] = graph.inter[(c - n) * 2 + 1];
    }
    let div = dup.div_ceil(n) as f32;
    graph.bw_intra /= div;
    graph.bw_inter /= div;
    graph.n_channels = dup;
}

/// `SUB_ROUND(a, b)`: `roundf((a - b) * 1000) / 1000` in single precision.
fn sub_round(a: f32, b: f32) -> f32 {
    ((a - b) * 1000.0).round() / 1000.0
}

struct Search<'a> {
    sys: &'a mut System,
    params: &'a TopoParams,
    ngpus: usize,
    used: Vec<u64>,
    net_bw: Vec<f32>,
    /// `ncclTopoSelectNets` depends only on paths: cache per (typeInter, gpu).
    nets_cache: HashMap<(i32, i32), Vec<usize>>,
}

impl Search<'_> {
    fn gpu_rank(&self, g: usize) -> i32 {
        self.sys.of(NodeType::Gpu)[g].gpu().1
    }

    fn gpu_index(&self, rank: i32) -> Result<usize, TopoError> {
        self.sys
            .rank_to_index(rank)
            .ok_or_else(|| TopoError::Graph(format!("Could not find gpu rank {rank}")))
    }

    fn net_index(&self, id: i64) -> Result<usize, TopoError> {
        self.sys
            .index_of(NodeType::Net, id)
            .ok_or_else(|| TopoError::Graph(format!("Could not find net id {id:x}")))
    }

    /// `followPath`: charges `bw` on the first `max_steps` links of `path` from `start`;
    /// returns how many links could be charged.
    fn follow(&mut self, links: &[usize], path_ty: PathType, start: NodeRef, max_steps: usize, bw: f32) -> usize {
        let mut pci_bw = bw;
        for &l in links {
            let n = self.sys.links[l].rem;
            if n.ty == NodeType::Cpu {
                let (arch, vendor, _) = self.sys.node(n).cpu();
                if path_ty == PathType::Phb
                    && start.ty == NodeType::Gpu
                    && arch == cpu_arch::X86
                    && vendor == cpu_vendor::INTEL
                {
                    pci_bw = intel_p2p_overhead(bw);
                }
            }
        }
        let mut node = start;
        for (step, &l) in links.iter().enumerate().take(max_steps) {
            let (lty, rem, lbw) = {
                let link = &self.sys.links[l];
                (link.ty, link.rem, link.bw)
            };
            let fw = if lty == LinkType::Pci { pci_bw } else { bw };
            let mut rev_bw = 0.0f32;
            let mut rev = None;
            let rem_node = self.sys.node(rem);
            // Pre-Ampere GPUs read over PCIe inefficiently; CPU-rank devices (cc 0) exempt.
            if rem.ty == NodeType::Dev && rem_node.cc() < 80 && rem_node.cc() > 0 && start.ty != NodeType::Gpu {
                rev = self.sys.find_link(rem, node, lty);
                rev_bw += fw / 8.0;
            }
            if rem.ty == NodeType::Cpu && rem_node.cpu().0 == cpu_arch::POWER && lty == LinkType::Nvl {
                rev = self.sys.find_link(rem, node, lty);
                rev_bw += fw;
            }
            let rev_short = rev_bw != 0.0 && rev.is_none_or(|r| self.sys.links[r].bw < rev_bw);
            if lbw < fw || rev_short {
                return step;
            }
            self.sys.links[l].bw = sub_round(lbw, fw);
            if rev_bw != 0.0
                && let Some(r) = rev
            {
                self.sys.links[r].bw = sub_round(self.sys.links[r].bw, rev_bw);
            }
            node = rem;
        }
        max_steps
    }

    /// `ncclTopoFollowPath`: true when the path from `from` (None = no accounting) to `to`
    /// fits the graph's type and bandwidth (charged ×`mult`; -1 undoes).
    fn follow_path(&mut self, g: &mut TopoGraph, from: Option<NodeRef>, to: NodeRef, mult: f32) -> bool {
        let Some(from) = from else { return true };
        let path = self.sys.path(from, to.ty, to.idx);
        let rev_ty = self.sys.path(to, from.ty, from.idx).ty;
        let is_intra = |t: NodeType| t == NodeType::Gpu || t == NodeType::Nvs;
        let intra = is_intra(from.ty) && is_intra(to.ty);
        let mut bw = if intra { g.bw_intra } else { g.bw_inter };
        let ty = if intra { g.type_intra } else { g.type_inter };
        if path.ty >= PathType::Dis {
            return false;
        }
        if mult == 1.0 && path.ty > ty {
            return false;
        }
        if mult == 1.0 && matches!(g.pattern, PATTERN_BALANCED_TREE | PATTERN_TREE | PATTERN_SPLIT_TREE) && rev_ty > ty
        {
            return false;
        }
        bw *= mult;
        let links = path.links.clone();
        let pty = path.ty;
        let step = self.follow(&links, pty, from, links.len(), bw);
        if step < links.len() {
            self.follow(&links, pty, from, step, -bw);
            return false;
        }
        g.n_hops += (mult * links.len() as f32) as i32;
        true
    }

    fn gpu_pci_bw(&self, g: usize) -> i32 {
        let dev = NodeRef::new(NodeType::Dev, self.sys.of(NodeType::Gpu)[g].gpu().4);
        for &l in &self.sys.node(dev).links {
            let link = &self.sys.links[l];
            if link.ty != LinkType::Pci {
                continue;
            }
            for &pl in &self.sys.node(link.rem).links {
                if self.sys.links[pl].rem == dev {
                    return link.bw.min(self.sys.links[pl].bw) as i32;
                }
            }
        }
        -1
    }

    /// `ncclTopoSearchNextGpuSort`.
    fn next_gpu_sort(&self, g: &TopoGraph, gpu: usize, sort_net: i32) -> Result<Vec<usize>, TopoError> {
        let flag = 1u64 << g.n_channels;
        let ngpus = self.ngpus;
        let from = NodeRef::new(NodeType::Gpu, gpu);
        let net_from = if sort_net != 0 {
            Some(NodeRef::new(NodeType::Net, self.net_index(g.inter[g.n_channels * 2])?))
        } else {
            None
        };
        // (g, startIndex, intraNhops, intraBw, interNhops, interPciBw, interBw)
        let mut scores: Vec<[i32; 7]> = Vec::new();
        for i in 1..ngpus {
            let gg = (gpu + i) % ngpus;
            let p = self.sys.path(from, NodeType::Gpu, gg);
            if p.count() == 0 || self.used[gg] & flag != 0 {
                continue;
            }
            let mut s = [gg as i32, i as i32, p.count() as i32, p.bw as i32, 0, 0, 0];
            if let Some(nf) = net_from {
                let np = self.sys.path(nf, NodeType::Gpu, gg);
                s[4] = np.count() as i32;
                s[5] = self.gpu_pci_bw(gg);
                s[6] = np.bw as i32;
            }
            scores.push(s);
        }
        scores.sort_by(|a, b| {
            b[6].cmp(&a[6])
                .then(b[5].cmp(&a[5]))
                .then(a[4].cmp(&b[4]))
                .then(b[3].cmp(&a[3]))
                .then(a[2].cmp(&b[2]))
                .then(a[1].cmp(&b[1]))
        });
        let all_intra_equal = scores
            .first()
            .is_some_and(|f| scores.iter().all(|s| s[3] == f[3] && s[2] == f[2]));
        let mut next: Vec<usize> = if sort_net == -1 && all_intra_equal {
            scores.iter().rev().map(|s| s[0] as usize).collect()
        } else {
            scores.iter().map(|s| s[0] as usize).collect()
        };
        if self.sys.count(NodeType::Nvs) > 0 {
            let prev = (gpu + ngpus - 1) % ngpus;
            let nxt = (gpu + 1) % ngpus;
            let mut first: Vec<usize> = match g.pattern {
                PATTERN_RING => vec![nxt, prev],
                PATTERN_SPLIT_TREE | PATTERN_BALANCED_TREE => vec![prev, nxt],
                _ => vec![nxt],
            };
            if nxt == prev && first.len() == 2 {
                first.truncate(1);
            }
            let mut real = 0;
            for f in first {
                if let Some(i) = next.iter().position(|&x| x == f) {
                    next.remove(i);
                    next.insert(0, f);
                    real += 1;
                }
            }
            next.truncate(real);
        }
        Ok(next)
    }

    /// `ncclTopoSelectNets` (channel-first preferred NICs, then the others by path type).
    fn select_nets(&mut self, type_inter: i32, gpu: i32) -> Result<Vec<usize>, TopoError> {
        if let Some(v) = self.nets_cache.get(&(type_inter, gpu)) {
            return Ok(v.clone());
        }
        let policy = self.params.netdevs_policy;
        let mut nets: Vec<usize> = Vec::new();
        for g in 0..self.ngpus {
            if gpu != -1 && gpu != g as i32 {
                continue;
            }
            let mut local: Vec<usize> = Vec::new();
            for c in 0..MAXCHANNELS {
                let n = local_net(self.sys, g, c, policy)?;
                if !local.is_empty() && n == local[0] {
                    break;
                }
                local.push(n);
            }
            for n in local {
                if !nets.contains(&n) {
                    nets.push(n);
                }
            }
        }
        let mut max_count = TOPO_MAX_NODES;
        if let paths::NetDevsPolicy::Max(m) = policy {
            max_count = if gpu == -1 { m * self.ngpus } else { m };
        }
        if nets.len() < max_count {
            'outer: for t in 0..=type_inter.max(-1) {
                for g in 0..self.ngpus {
                    if gpu != -1 && gpu != g as i32 {
                        continue;
                    }
                    let paths = self.sys.paths_to(NodeRef::new(NodeType::Gpu, g), NodeType::Net);
                    for (n, p) in paths.iter().enumerate().take(MAXCHANNELS) {
                        if p.ty as i32 == t && !nets.contains(&n) {
                            nets.push(n);
                            if nets.len() >= max_count {
                                break 'outer;
                            }
                        }
                    }
                }
            }
        }
        self.nets_cache.insert((type_inter, gpu), nets.clone());
        Ok(nets)
    }

    /// `ncclTopoSearchCheckNet`: may NET `n` close channel `g.n_channels` at `step`?
    fn check_net(&self, g: &TopoGraph, start: usize, n: usize, step: usize) -> bool {
        let nets = self.sys.of(NodeType::Net);
        let (net, st) = (nets[n].net(), nets[start].net());
        let (nid, sid) = (nets[n].id, nets[start].id);
        if net.plane != -1 && st.plane != -1 && net.plane != st.plane {
            return false;
        }
        if g.pattern == PATTERN_TREE && nid != sid {
            return false;
        }
        if g.pattern == PATTERN_RING && g.cross_nic == 2 {
            if g.n_channels & 1 == 1 && nid != g.inter[(g.n_channels - 1) * 2] {
                return false;
            }
        } else if g.cross_nic == 0 {
            if net.rail != -1 && st.rail != -1 {
                if net.rail != st.rail {
                    return false;
                }
            } else if net.asic != st.asic || net.port != st.port {
                return false;
            }
        }
        if g.pattern == PATTERN_BALANCED_TREE && step != 0 && nid != g.inter[g.n_channels * 2 + 1] {
            return false;
        }
        true
    }

    fn replay_gpu(&self, g: &TopoGraph, step: i32) -> Result<usize, TopoError> {
        if g.n_channels == 0 {
            return Err(TopoError::Graph("replay with no channel".into()));
        }
        let rank = g.intra[(g.n_channels - 1) * self.ngpus + (step + 1) as usize];
        self.gpu_index(rank)
    }

    fn compare(&self, g: &TopoGraph, best: &TopoGraph) -> bool {
        if g.n_channels < g.min_channels {
            return false;
        }
        if g.pattern == PATTERN_NVLS {
            // Every channel is one GPU pulling from NVLS: the more the better (up to one
            // per GPU), then the more bandwidth to the NICs.
            return (g.n_channels > best.n_channels && g.n_channels <= self.ngpus)
                || g.n_channels as f32 * g.bw_inter > best.n_channels as f32 * best.bw_inter;
        }
        let a = g.n_channels as f32 * g.bw_intra;
        let b = best.n_channels as f32 * best.bw_intra;
        if a > b {
            return true;
        }
        if a < b {
            return false;
        }
        g.pattern == best.pattern && g.cross_nic == best.cross_nic && g.n_hops < best.n_hops
    }

    #[allow(clippy::too_many_arguments)]
    fn try_gpu(
        &mut self,
        g: &mut TopoGraph,
        best: &mut TopoGraph,
        step: usize,
        back_to_net: i32,
        back_to_first: i32,
        forced: i32,
        time: &mut i64,
        from: Option<NodeRef>,
        gpu: usize,
    ) -> Result<(), TopoError> {
        let flag = 1u64 << g.n_channels;
        let to = NodeRef::new(NodeType::Gpu, gpu);
        if self.follow_path(g, from, to, 1.0) {
            self.used[gpu] ^= flag;
            self.rec_gpu(g, best, gpu, step, back_to_net, back_to_first, forced, time)?;
            self.used[gpu] ^= flag;
            self.follow_path(g, from, to, -1.0);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn rec_gpu(
        &mut self,
        g: &mut TopoGraph,
        best: &mut TopoGraph,
        gpu: usize,
        step: usize,
        back_to_net: i32,
        back_to_first: i32,
        forced: i32,
        time: &mut i64,
    ) -> Result<(), TopoError> {
        if *time <= 0 {
            return Ok(());
        }
        *time -= 1;
        let ngpus = self.ngpus;
        if step == ngpus {
            g.n_channels += 1;
            if self.compare(g, best) {
                *best = g.clone();
                if g.n_channels == g.max_channels {
                    *time = -1;
                }
            }
            if g.n_channels < g.max_channels {
                self.search_rec(g, best, time)?;
            }
            g.n_channels -= 1;
            return Ok(());
        }
        g.intra[g.n_channels * ngpus + step] = self.gpu_rank(gpu);
        let gref = NodeRef::new(NodeType::Gpu, gpu);
        if step as i32 == back_to_net {
            if self.sys.inter {
                let start = self.net_index(g.inter[g.n_channels * 2])?;
                let nets = self.select_nets(g.type_inter as i32, gpu as i32)?;
                for n in nets {
                    if !self.check_net(g, start, n, step) {
                        continue;
                    }
                    let mut next_btn = -1;
                    let save = g.bw_inter;
                    if g.pattern == PATTERN_BALANCED_TREE {
                        if step == 0 {
                            next_btn = 1;
                        }
                        g.bw_inter /= 2.0;
                    }
                    let nref = NodeRef::new(NodeType::Net, n);
                    let ok = self.follow_path(g, Some(gref), nref, 1.0);
                    g.bw_inter = save;
                    if ok {
                        g.inter[g.n_channels * 2 + 1] = self.sys.of(NodeType::Net)[n].id;
                        self.rec_gpu(g, best, gpu, step, next_btn, back_to_first, forced, time)?;
                        if g.pattern == PATTERN_BALANCED_TREE {
                            g.bw_inter /= 2.0;
                        }
                        self.follow_path(g, Some(gref), nref, -1.0);
                        g.bw_inter = save;
                    }
                }
            }
        } else if g.pattern == PATTERN_NVLS {
            self.try_nvls(g, best, gpu, time)?;
        } else if g.pattern == PATTERN_COLLNET_DIRECT {
            self.try_collnet_direct(g, best, gpu, time)?;
        } else if step + 1 < ngpus {
            let next: Vec<usize> = if forced == FORCED_ORDER_PCI {
                vec![step + 1]
            } else if forced == FORCED_ORDER_REPLAY {
                vec![self.replay_gpu(g, step as i32)?]
            } else {
                let sort_net = if back_to_net == -1 {
                    0
                } else if back_to_net == step as i32 + 1 {
                    1
                } else {
                    -1
                };
                self.next_gpu_sort(g, gpu, sort_net)?
            };
            for n in next {
                self.try_gpu(
                    g,
                    best,
                    step + 1,
                    back_to_net,
                    back_to_first,
                    forced,
                    time,
                    Some(gref),
                    n,
                )?;
            }
        } else if step as i32 == back_to_first {
            let p = self.gpu_index(g.intra[g.n_channels * ngpus])?;
            let pref = NodeRef::new(NodeType::Gpu, p);
            if self.follow_path(g, Some(gref), pref, 1.0) {
                self.rec_gpu(g, best, p, step + 1, back_to_net, -1, forced, time)?;
                self.follow_path(g, Some(gref), pref, -1.0);
            }
        } else {
            self.rec_gpu(g, best, gpu, ngpus, -1, -1, forced, time)?;
        }
        Ok(())
    }

    /// `ncclTopoSearchTryNvls`: with GPU `head` as this channel's NVLS head, charge the
    /// NVSwitch→GPU and GPU→NVSwitch paths of every GPU (twice for the head) at `bwIntra`;
    /// when everything fits the channel is complete.
    fn try_nvls(
        &mut self,
        g: &mut TopoGraph,
        best: &mut TopoGraph,
        head: usize,
        time: &mut i64,
    ) -> Result<(), TopoError> {
        let nvs = NodeRef::new(NodeType::Nvs, 0);
        let gpu = |d: usize| NodeRef::new(NodeType::Gpu, d);
        let mult = |d: usize| if d == head { 2.0 } else { 1.0 };
        let ngpus = self.ngpus;
        // NVS -> GPU for every GPU.
        let mut d0 = 0;
        while d0 < ngpus && self.follow_path(g, Some(nvs), gpu(d0), mult(d0)) {
            d0 += 1;
        }
        if d0 == ngpus {
            // GPU -> NVS for every GPU.
            let mut d1 = 0;
            while d1 < ngpus && self.follow_path(g, Some(gpu(d1)), nvs, mult(d1)) {
                d1 += 1;
            }
            if d1 == ngpus {
                self.rec_gpu(g, best, head, ngpus, -1, -1, 0, time)?;
            }
            for d in (0..d1).rev() {
                self.follow_path(g, Some(gpu(d)), nvs, -mult(d));
            }
        }
        for d in (0..d0).rev() {
            self.follow_path(g, Some(nvs), gpu(d), -mult(d));
        }
        Ok(())
    }

    /// `ncclTopoSearchTryCollnetDirect` (`src/graph/search.cc`): with GPU `head` as this
    /// channel's CollNetDirect head, charge `bwIntra / (ngpus - 1)` on the path from the
    /// head to every GPU, then from every GPU back to the head (the head scatters to and
    /// gathers from all local ranks); when everything fits, the channel lists the head
    /// first and then every other GPU in index order, and is complete.
    fn try_collnet_direct(
        &mut self,
        g: &mut TopoGraph,
        best: &mut TopoGraph,
        head: usize,
        time: &mut i64,
    ) -> Result<(), TopoError> {
        let ngpus = self.ngpus;
        let gpu = |d: usize| NodeRef::new(NodeType::Gpu, d);
        // NCCL: `float mul = 1.0 / (float)(ngpus - 1)` (one GPU: the head alone, whose
        // path to itself is empty and always fits).
        let mul = if ngpus > 1 { 1.0 / (ngpus - 1) as f32 } else { 1.0 };
        let mut fwd = 0;
        while fwd < ngpus && self.follow_path(g, Some(gpu(head)), gpu(fwd), mul) {
            fwd += 1;
        }
        if fwd == ngpus {
            let mut bwd = 0;
            while bwd < ngpus && self.follow_path(g, Some(gpu(bwd)), gpu(head), mul) {
                bwd += 1;
            }
            if bwd == ngpus {
                // Both directions fit: the head is at step 0, the others follow.
                let base = g.n_channels * ngpus;
                for (step, d) in (1..).zip((0..ngpus).filter(|&d| d != head)) {
                    g.intra[base + step] = self.gpu_rank(d);
                }
                self.rec_gpu(g, best, head, ngpus, -1, -1, 0, time)?;
            }
            for d in (0..bwd).rev() {
                self.follow_path(g, Some(gpu(d)), gpu(head), -mul);
            }
        }
        for d in (0..fwd).rev() {
            self.follow_path(g, Some(gpu(head)), gpu(d), -mul);
        }
        Ok(())
    }

    fn rec_net(
        &mut self,
        g: &mut TopoGraph,
        best: &mut TopoGraph,
        back_to_net: i32,
        back_to_first: i32,
        time: &mut i64,
    ) -> Result<(), TopoError> {
        let bw = g.bw_inter as i32; // NCCL: `const int bw = graph->bwInter;`
        let nets = self.select_nets(g.type_inter as i32, -1)?;
        let count = nets.len();
        let heads_only = matches!(g.pattern, PATTERN_NVLS | PATTERN_COLLNET_DIRECT);
        let mut graph_found = false;
        for i in 0..count {
            if heads_only && graph_found {
                break;
            }
            let n = nets[(g.n_channels + i) % count];
            let (id, coll, latency, asic, port, local_gpu) = {
                let node = &self.sys.of(NodeType::Net)[n];
                let ni = node.net();
                (node.id, ni.coll, ni.latency, ni.asic, ni.port, ni.local_gpu)
            };
            if g.coll_net && !coll {
                continue;
            }
            if self.net_bw[n] < bw as f32 {
                continue;
            }
            if g.pattern == PATTERN_RING
                && g.cross_nic == 2
                && g.n_channels & 1 == 1
                && id != g.inter[(g.n_channels - 1) * 2 + 1]
            {
                continue;
            }
            g.inter[g.n_channels * 2] = id;
            g.latency_inter = latency;
            let same: Vec<usize> = (0..self.sys.count(NodeType::Net))
                .filter(|&j| {
                    let o = self.sys.of(NodeType::Net)[j].net();
                    o.asic == asic && o.port == port
                })
                .collect();
            for &j in &same {
                self.net_bw[j] -= bw as f32;
            }
            let nref = Some(NodeRef::new(NodeType::Net, n));
            if heads_only {
                // `ncclTopoSearchRecNet`: NVLS and CollNetDirect only look for NIC:GPU
                // pairs, one new head (the NIC's local GPU) per channel.
                if g.n_channels < count && local_gpu != -1 {
                    let head_rank = self.gpu_rank(local_gpu as usize);
                    let duplicate = (0..g.n_channels).any(|c| g.intra[c * self.ngpus] == head_rank);
                    if !duplicate {
                        self.try_gpu(
                            g,
                            best,
                            0,
                            back_to_net,
                            back_to_first,
                            0,
                            time,
                            nref,
                            local_gpu as usize,
                        )?;
                        graph_found = true;
                    }
                }
            } else if g.n_channels > 0 && g.same_channels {
                let gpu = self.replay_gpu(g, -1)?;
                self.try_gpu(
                    g,
                    best,
                    0,
                    back_to_net,
                    back_to_first,
                    FORCED_ORDER_REPLAY,
                    time,
                    nref,
                    gpu,
                )?;
            } else {
                if g.n_channels == 0 && self.sys.count(NodeType::Nvs) == 0 {
                    let mut t: i64 = 1 << 10;
                    self.try_gpu(
                        g,
                        best,
                        0,
                        back_to_net,
                        back_to_first,
                        FORCED_ORDER_PCI,
                        &mut t,
                        nref,
                        0,
                    )?;
                    if t == -1 {
                        *time = -1;
                    }
                }
                if local_gpu != -1 {
                    self.try_gpu(
                        g,
                        best,
                        0,
                        back_to_net,
                        back_to_first,
                        0,
                        time,
                        nref,
                        local_gpu as usize,
                    )?;
                }
                let (locals, ty) = get_local(self.sys, NodeRef::new(NodeType::Net, n), NodeType::Gpu);
                if ty == PathType::Dis {
                    // NCCL `continue`s here without giving the NIC bandwidth back.
                    continue;
                }
                for lg in locals {
                    if lg as i32 == local_gpu {
                        continue;
                    }
                    self.try_gpu(g, best, 0, back_to_net, back_to_first, 0, time, nref, lg)?;
                }
            }
            for &j in &same {
                self.net_bw[j] += bw as f32;
            }
        }
        Ok(())
    }

    /// `ncclTopoSearchParams`: (backToNet, backToFirstRank).
    fn search_params(&self, pattern: i32) -> (i32, i32) {
        let n = self.ngpus as i32;
        if self.sys.inter {
            let btn = match pattern {
                PATTERN_RING => n - 1,
                PATTERN_SPLIT_TREE => 1,
                _ => 0,
            };
            (btn, -1)
        } else {
            (-1, if pattern == PATTERN_RING { n - 1 } else { -1 })
        }
    }

    fn search_rec(&mut self, g: &mut TopoGraph, best: &mut TopoGraph, time: &mut i64) -> Result<(), TopoError> {
        let (btn, btf) = self.search_params(g.pattern);
        if self.sys.inter {
            return self.rec_net(g, best, btn, btf, time);
        }
        if g.pattern == PATTERN_NVLS {
            // One head per channel, in GPU index order.
            if g.n_channels < self.ngpus {
                self.try_gpu(g, best, 0, btn, btf, 0, time, None, g.n_channels)?;
            }
            return Ok(());
        }
        if g.n_channels == 0 {
            self.try_gpu(g, best, 0, btn, btf, FORCED_ORDER_PCI, time, None, 0)?;
        } else {
            let gpu = self.replay_gpu(g, -1)?;
            self.try_gpu(g, best, 0, btn, btf, FORCED_ORDER_REPLAY, time, None, gpu)?;
        }
        if !g.same_channels || g.n_channels == 0 {
            for gpu in 0..self.ngpus {
                self.try_gpu(g, best, 0, btn, btf, 0, time, None, gpu)?;
            }
        }
        Ok(())
    }
}

fn describe(t: &TopoGraph) -> String {
    format!(
        "pattern {} sameChannels {} crossNic {} typeIntra {} typeInter {} bw {}/{}",
        t.pattern,
        u8::from(t.same_channels),
        t.cross_nic,
        t.type_intra,
        t.type_inter,
        t.bw_intra,
        t.bw_inter
    )
}

/// `ncclTopoCompute`: searches `graph` (id, pattern, channel bounds set by the caller) on
/// `sys` (paths computed, `search_init` done). `graph_file` is a parsed `NCCL_GRAPH_FILE`
/// (`<graphs>`); when it holds channels for this graph id they are used as they are.
/// `why` collects one line per search attempt when given.
pub fn compute(
    sys: &mut System,
    graph: &mut TopoGraph,
    params: &TopoParams,
    graph_file: Option<&crate::topo::XmlNode>,
    mut why: Option<&mut Vec<String>>,
) -> Result<(), TopoError> {
    let (cc_min, _) = sys
        .comp_cap()
        .ok_or_else(|| TopoError::Topology("no GPU or rank device in the system".into()))?;
    let ngpus = sys.count(NodeType::Gpu);
    let ndevs = sys.count(NodeType::Dev);
    graph.ngpus = ngpus;
    graph.intra = vec![0; MAXCHANNELS * ngpus.max(1)];
    graph.inter = vec![0; MAXCHANNELS * 2];
    let cross_nic = if sys.count(NodeType::Net) > 1
        && matches!(graph.pattern, PATTERN_RING | PATTERN_BALANCED_TREE | PATTERN_SPLIT_TREE)
    {
        params.cross_nic as i32
    } else {
        0
    };
    graph.cross_nic = i32::from(cross_nic == 1);
    graph.bw_intra = 0.0;
    graph.bw_inter = 0.0;
    graph.latency_inter = 0.0;
    let (mut min_intra, mut max_intra) = (PathType::Loc, PathType::Sys);
    let (mut min_inter, mut max_inter) = (PathType::Pix, PathType::Sys);
    if ngpus > 1 {
        (min_intra, max_intra) = paths::gpu_path_range(sys, NodeType::Gpu);
    }
    if sys.inter {
        (min_inter, max_inter) = paths::gpu_path_range(sys, NodeType::Net);
        max_intra = max_inter;
    }
    if cc_min < 90 {
        max_inter = PathType::Sys;
    }
    graph.type_intra = min_intra;
    graph.type_inter = min_inter;
    graph.n_channels = 0;
    let try_same = graph.pattern != PATTERN_NVLS;
    graph.same_channels = try_same;
    let (cpu_arch, cpu_vendor, _) = sys.cpu_type();

    if let Some(xml) = graph_file {
        let n = super::graph_xml::load_graph(xml, sys, graph, params)?;
        if let Some(w) = why.as_deref_mut() {
            w.push(format!(
                "graph {}: {} channels loaded from NCCL_GRAPH_FILE",
                graph.id, n
            ));
        }
        if graph.n_channels > 0 {
            return Ok(());
        }
    }
    if graph.pattern == PATTERN_NVLS && (sys.count(NodeType::Nvs) == 0 || cc_min < 90) {
        return Ok(());
    }
    if graph.pattern == PATTERN_NVLS {
        graph.max_channels = MAX_NVLS_ARITY.min(ngpus);
    }
    if graph.pattern == PATTERN_COLLNET_DIRECT {
        // `ncclTopoCompute`: at most one head per GPU, and at most
        // NCCL_MAX_DIRECT_ARITY + 1 of them.
        graph.max_channels = graph.max_channels.min(super::collnet::MAX_DIRECT_ARITY + 1).min(ngpus);
    }
    if ngpus == 1 && graph.pattern != PATTERN_RING {
        graph.pattern = PATTERN_TREE;
    }
    if !sys.inter && graph.pattern == PATTERN_NVLS {
        // Intra-node NVLS pulls evenly from every GPU.
        graph.min_channels = graph.max_channels;
    }
    if graph.pattern == PATTERN_RING && paths::split_nvlink(sys) && graph.max_channels >= 2 && graph.min_channels == 1 {
        graph.min_channels = 2;
    }

    let mut tmp = graph.clone();
    let speeds = speed_table(cc_min, sys.inter);
    let nspeeds = speeds.len();
    let max_bw = sys.max_bw;
    let mut total_bw = sys.total_bw;
    if ndevs > 1 && graph.pattern != PATTERN_RING {
        total_bw = (f64::from(total_bw) * (ndevs as f64 * 1.0 / (ndevs as f64 - 1.0))) as f32;
    }
    let mut si = 0;
    while (speeds[si] > max_bw || speeds[si] * graph.min_channels as f32 > total_bw) && si < nspeeds - 1 {
        si += 1;
    }
    tmp.bw_intra = speeds[si];
    tmp.bw_inter = speeds[si];
    let mut global: i64 = SEARCH_GLOBAL_TIMEOUT;
    let mut pass = 1;
    // --why: the attempt that produced the current best, and why pass 1 stopped.
    let mut found_at = String::from("nothing found");
    let mut stop_reason = String::new();
    let net_bw: Vec<f32> = sys.of(NodeType::Net).iter().map(|n| n.net().bw).collect();
    let mut s = Search {
        ngpus,
        used: vec![0; ngpus],
        net_bw,
        params,
        nets_cache: HashMap::new(),
        sys,
    };

    loop {
        // search:
        let mut time = if tmp.same_channels {
            SEARCH_TIMEOUT_SAMECHANNELS
        } else if tmp.pattern == PATTERN_TREE {
            SEARCH_TIMEOUT_TREE
        } else {
            SEARCH_TIMEOUT
        };
        tmp.n_channels = 0;
        global -= time;
        let before = (
            graph.n_channels,
            graph.bw_intra,
            graph.bw_inter,
            graph.pattern,
            graph.cross_nic,
        );
        s.search_rec(&mut tmp, graph, &mut time)?;
        if before
            != (
                graph.n_channels,
                graph.bw_intra,
                graph.bw_inter,
                graph.pattern,
                graph.cross_nic,
            )
        {
            found_at = format!("pass {pass} with {}", describe(&tmp));
        }
        if let Some(w) = why.as_deref_mut() {
            let verdict = match time {
                -1 => " PERFECT",
                0 => " TIMEOUT",
                _ => "",
            };
            w.push(format!(
                "pass {pass}: {} -> best {} x {}/{} ({} {}/{}){verdict}",
                describe(&tmp),
                graph.n_channels,
                graph.bw_intra,
                graph.bw_inter,
                pattern_name(graph.pattern),
                graph.type_intra,
                graph.type_inter
            ));
        }
        let mut goto_done = time == -1 || graph.n_channels as f32 * graph.bw_inter >= s.sys.total_bw;
        if pass == 1 && time == -1 {
            stop_reason = format!("reached maxChannels {} (perfect)", tmp.max_channels);
        } else if pass == 1 && goto_done {
            stop_reason = format!(
                "{} channels x {} GB/s use the GPU's total bandwidth {} GB/s",
                graph.n_channels, graph.bw_inter, s.sys.total_bw
            );
        }
        if !goto_done && pass == 1 {
            'relax: {
                if tmp.same_channels
                    && !(cpu_arch == cpu_arch::X86 && cpu_vendor == cpu_vendor::AMD && tmp.type_intra == PathType::Sys)
                {
                    tmp.same_channels = false;
                    break 'relax;
                }
                tmp.same_channels = try_same;
                if time != -1 {
                    global += time;
                } else {
                    global = SEARCH_GLOBAL_TIMEOUT;
                }
                if global < 0 && graph.n_channels > 0 {
                    stop_reason = "the global search budget (2^19 steps) ran out".to_string();
                    goto_done = true;
                    break 'relax;
                }
                if cc_min >= 90 && tmp.pattern == PATTERN_BALANCED_TREE {
                    tmp.pattern = PATTERN_TREE;
                    break 'relax;
                }
                tmp.pattern = graph.pattern;
                let max_i = if s.sys.inter { tmp.type_inter } else { max_intra };
                if tmp.type_intra < max_i && (graph.n_channels == 0 || tmp.type_intra < graph.type_intra) {
                    tmp.type_intra = tmp.type_intra.next();
                    if tmp.type_intra < PathType::Dis {
                        break 'relax;
                    }
                }
                tmp.type_intra = min_intra;
                if s.sys.inter
                    && tmp.type_inter < max_inter
                    && (graph.n_channels == 0 || tmp.type_inter < graph.type_inter || tmp.type_inter < PathType::Pxn)
                {
                    tmp.type_inter = tmp.type_inter.next();
                    if tmp.type_inter < PathType::Dis {
                        break 'relax;
                    }
                }
                tmp.type_inter = min_inter;
                if cross_nic == 2 && tmp.cross_nic == 0 && matches!(graph.pattern, PATTERN_RING | PATTERN_BALANCED_TREE)
                {
                    tmp.cross_nic = 2;
                    break 'relax;
                }
                tmp.cross_nic = i32::from(cross_nic == 1);
                if si < nspeeds - 1 && (graph.n_channels == 0 || f64::from(speeds[si + 1] / graph.bw_inter) > 0.49) {
                    si += 1;
                    tmp.bw_inter = speeds[si];
                    tmp.bw_intra = speeds[si];
                    break 'relax;
                }
                stop_reason = if graph.n_channels == 0 {
                    "every relaxation tried, nothing fits".to_string()
                } else {
                    format!(
                        "every relaxation tried down to {} GB/s (the next speed is below 0.49 x {})",
                        speeds[si], graph.bw_inter
                    )
                };
                si = 0;
                while speeds[si] > max_bw && si < nspeeds - 1 {
                    si += 1;
                }
                tmp.bw_intra = speeds[si];
                tmp.bw_inter = speeds[si];
                goto_done = true;
            }
            if !goto_done {
                continue;
            }
        } else if !goto_done {
            goto_done = true;
        }
        debug_assert!(goto_done);
        // done:
        if pass == 1 {
            time = -1;
            let before = graph.n_channels;
            dup_channels(graph, cc_min, ngpus);
            if let Some(w) = why.as_deref_mut()
                && graph.n_channels != before
            {
                w.push(format!(
                    "duplicated channels: {} -> {} (bw {}/{})",
                    before, graph.n_channels, graph.bw_intra, graph.bw_inter
                ));
            }
            tmp = graph.clone();
            si = 0;
            while speeds[si] > graph.bw_inter && si < nspeeds - 1 {
                si += 1;
            }
            tmp.bw_intra = speeds[si];
            tmp.bw_inter = speeds[si];
            tmp.min_channels = graph.n_channels;
            pass = 2;
        }
        if pass == 2 {
            if time != 0 && si > 0 {
                if graph.pattern == PATTERN_RING {
                    si -= 1;
                    tmp.bw_intra = speeds[si];
                    tmp.bw_inter = speeds[si];
                    continue;
                } else if graph.pattern == PATTERN_NVLS
                    && tmp.bw_inter == graph.bw_inter
                    && tmp.bw_inter < tmp.bw_intra * 2.0
                {
                    tmp.min_channels = graph.n_channels;
                    tmp.max_channels = graph.n_channels;
                    si -= 1;
                    tmp.bw_inter = speeds[si];
                    continue;
                } else if tmp.bw_intra == graph.bw_intra && tmp.bw_intra < tmp.bw_inter * 2.0 {
                    si -= 1;
                    tmp.bw_intra = speeds[si];
                    continue;
                }
            }
            tmp = graph.clone();
        }
        break;
    }
    drop(tmp);
    if let Some(w) = why.as_deref_mut() {
        w.push(format!(
            "settled: {} channel(s) of {}, bw {}/{}, type {}/{}, crossNic {}, sameChannels {}; found at {found_at}; pass 1 stopped because {stop_reason}",
            graph.n_channels,
            pattern_name(graph.pattern),
            graph.bw_intra,
            graph.bw_inter,
            graph.type_intra,
            graph.type_inter,
            graph.cross_nic,
            u8::from(graph.same_channels)
        ));
    }

    if graph.n_channels == 0 && !graph.coll_net && graph.pattern != PATTERN_NVLS {
        if let Some(w) = why {
            w.push(format!(
                "Could not find a path for pattern {}, falling back to simple order",
                graph.pattern
            ));
        }
        for i in 0..ngpus {
            graph.intra[i] = s.gpu_rank(i);
        }
        graph.bw_intra = 0.1;
        graph.type_intra = PathType::Sys;
        let first = s.select_nets(-1, 0)?.first().map(|&n| s.sys.of(NodeType::Net)[n].id);
        let last = s
            .select_nets(-1, ngpus as i32 - 1)?
            .first()
            .map(|&n| s.sys.of(NodeType::Net)[n].id);
        match (first, last) {
            (Some(a), Some(b)) => {
                graph.inter[0] = a;
                graph.inter[1] = b;
                graph.bw_inter = 0.1;
                graph.type_inter = PathType::Sys;
            }
            _ => {
                graph.inter[0] = -1;
                graph.inter[1] = -1;
                graph.bw_inter = 0.0;
                graph.type_inter = PathType::Dis;
            }
        }
        graph.n_channels = 1;
    }
    Ok(())
}

/// `ncclTopoPrintGraph` lines.
pub fn print_graph(sys: &System, graph: &TopoGraph) -> Vec<String> {
    let mut out = vec![format!(
        "Pattern {}, crossNic {}, nChannels {}, bw {:.6}/{:.6}, type {}/{}, sameChannels {}",
        graph.pattern,
        graph.cross_nic,
        graph.n_channels,
        graph.bw_intra,
        graph.bw_inter,
        graph.type_intra,
        graph.type_inter,
        u8::from(graph.same_channels)
    )];
    let ngpus = graph.ngpus;
    let id_s = |ty: NodeType, id: i64| format!(" {}/{:x}-{:x}", ty, topo_id_system(id), topo_id_local(id));
    for c in 0..graph.n_channels {
        let mut line = format!("{c:2} :");
        if sys.inter {
            line.push_str(&id_s(NodeType::Net, graph.inter[2 * c]));
        }
        for i in 0..ngpus {
            match sys.rank_to_index(graph.intra[ngpus * c + i]) {
                Some(g) => line.push_str(&id_s(NodeType::Gpu, sys.of(NodeType::Gpu)[g].id)),
                None => {
                    let _ = write!(line, " GPU/?({})", graph.intra[ngpus * c + i]);
                }
            }
            if graph.id == 3 {
                break;
            }
        }
        if sys.inter {
            line.push_str(&id_s(NodeType::Net, graph.inter[2 * c + 1]));
        }
        out.push(line);
    }
    out
}

/// A human label for NET id `id` (`NET/sys-local`), or `-1`.
pub fn net_label(sys: &System, id: i64) -> String {
    match sys.index_of(NodeType::Net, id) {
        Some(i) => node_label(sys, NodeRef::new(NodeType::Net, i)),
        None => format!("{id}"),
    }
}

/// The net plugin device of NET id `id` (`ncclTopoIdToNetDev`).
pub fn net_dev(sys: &System, id: i64) -> Option<i32> {
    sys.index_of(NodeType::Net, id)
        .map(|i| match &sys.of(NodeType::Net)[i].info {
            NodeInfo::Net(n) => n.dev,
            _ => -1,
        })
}
