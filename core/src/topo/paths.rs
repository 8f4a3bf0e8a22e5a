//! Paths between nodes (`src/graph/paths.cc`: `ncclTopoSetPaths`, `ncclTopoComputePaths`,
//! `ncclTopoTrimSystem`, `ncclTopoCheckP2p`, `ncclTopoCheckGdr`, `ncclTopoGetLocal*`).
//!
//! A [`Path`] from node A to node B is the list of link ids from A to B (first hop first),
//! its bottleneck bandwidth and its [`PathType`] (the widest hop class on the way).

use super::system::{NodeInfo, NodeRef, System};
use super::types::*;
use super::{TopoError, TopoParams};

/// `NCCL_NETDEVS_POLICY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetDevsPolicy {
    /// `AUTO` (default): each GPU uses `ceil(nets/gpus)` NICs.
    #[default]
    Auto,
    /// `ALL`: every local NIC.
    All,
    /// `MAX:n`: at most `n` NICs per GPU.
    Max(usize),
}

impl NetDevsPolicy {
    /// Parses `AUTO`, `ALL`, `MAX:n` (case-insensitive); anything else is `AUTO`, as NCCL
    /// ("Unable to recognize NCCL_NETDEVS_POLICY").
    pub fn parse(s: &str) -> NetDevsPolicy {
        let u = s.to_ascii_uppercase();
        if u == "ALL" {
            NetDevsPolicy::All
        } else if let Some(n) = u.strip_prefix("MAX:") {
            match n.trim().parse::<usize>() {
                Ok(n) if n > 0 => NetDevsPolicy::Max(n),
                _ => NetDevsPolicy::Auto,
            }
        } else {
            NetDevsPolicy::Auto
        }
    }
}

/// `ncclTopoGdrMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GdrMode {
    /// No GPUDirect RDMA.
    Disable,
    /// GPUDirect RDMA.
    Default,
    /// Forced PCIe mapping (C2C systems).
    Pci,
}

impl System {
    /// The path from `from` to node `to_idx` of type `to_ty` (a DIS path when never computed).
    pub fn path(&self, from: NodeRef, to_ty: NodeType, to_idx: usize) -> &Path {
        static DIS: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        self.paths
            .get(from.ty.idx())
            .and_then(|v| v.get(from.idx))
            .and_then(|p| p[to_ty.idx()].get(to_idx))
            .unwrap_or_else(|| DIS.get_or_init(Path::dis))
    }

    /// All paths from `from` to nodes of `to_ty` (empty = never computed).
    pub fn paths_to(&self, from: NodeRef, to_ty: NodeType) -> &[Path] {
        self.paths
            .get(from.ty.idx())
            .and_then(|v| v.get(from.idx))
            .map(|p| p[to_ty.idx()].as_slice())
            .unwrap_or(&[])
    }

    fn path_mut(&mut self, from: NodeRef, to_ty: NodeType, to_idx: usize) -> &mut Path {
        &mut self.paths[from.ty.idx()][from.idx][to_ty.idx()][to_idx]
    }

    fn ensure_paths(&mut self, node: NodeRef, to_ty: NodeType) {
        let n = self.count(to_ty);
        let slot = &mut self.paths[node.ty.idx()][node.idx][to_ty.idx()];
        if slot.is_empty() && n > 0 {
            *slot = vec![Path::dis(); n];
        }
    }
}

/// `ncclTopoSetPaths`: breadth-first relaxation filling, in every node, its path towards
/// `base`.
fn set_paths(sys: &mut System, base: NodeRef, nvb_disable: bool) {
    sys.ensure_paths(base, base.ty);
    *sys.path_mut(base, base.ty, base.idx) = Path {
        links: Vec::new(),
        bw: LOC_BW,
        ty: PathType::Loc,
    };
    let (max_len, base_dev) = if base.ty == NodeType::Gpu {
        let parent = sys.node(base).gpu().4;
        (2usize, NodeRef::new(NodeType::Dev, parent))
    } else {
        (1usize, base)
    };
    let mut frontier = vec![base];
    while !frontier.is_empty() {
        let mut next: Vec<NodeRef> = Vec::new();
        for &node in &frontier {
            let links = sys.node(node).links.clone();
            for l in links {
                let (lty, lbw, rem) = {
                    let link = &sys.links[l];
                    (link.ty, link.bw, link.rem)
                };
                sys.ensure_paths(rem, base.ty);
                let (p_bw, p_ty, p_count) = {
                    let p = sys.path(node, base.ty, base.idx);
                    (p.bw, p.ty, p.count())
                };
                let bw = p_bw.min(lbw);
                if node != base_dev
                    && node.ty == NodeType::Dev
                    && !(lty == LinkType::Loc && rem.ty == NodeType::Gpu)
                    && (nvb_disable || lty != LinkType::Nvl || rem.ty != NodeType::Dev || p_count > max_len)
                {
                    continue;
                }
                let mut t = if lty == LinkType::Net {
                    PathType::Loc
                } else {
                    lty.as_path()
                };
                if node.ty == NodeType::Pci && rem.ty == NodeType::Pci {
                    t = PathType::Pxb;
                }
                if lty == LinkType::Pci && (node.ty == NodeType::Cpu || rem.ty == NodeType::Cpu) {
                    t = PathType::Phb;
                }
                if node.ty == NodeType::Dev && p_ty == PathType::Nvl && t == PathType::Nvl && p_count == max_len {
                    t = PathType::Nvb;
                }
                let t = t.max(p_ty);
                let r = sys.path(rem, base.ty, base.idx);
                if t < r.ty || (t == r.ty && r.bw < bw) || (t == r.ty && r.bw == bw && r.count() > p_count + 1) {
                    let Some(rev) = sys.find_link(rem, node, lty) else {
                        continue;
                    };
                    let mut list = Vec::with_capacity(p_count + 1);
                    list.push(rev);
                    list.extend_from_slice(&sys.path(node, base.ty, base.idx).links);
                    *sys.path_mut(rem, base.ty, base.idx) = Path { links: list, bw, ty: t };
                    if !next.contains(&rem) {
                        next.push(rem);
                    }
                }
            }
        }
        frontier = next;
    }
}

/// `mergePathType`.
fn merge_path_type(a: PathType, b: PathType) -> PathType {
    let (max, min) = (a.max(b), a.min(b));
    if max == PathType::Phb && min == PathType::C2c {
        PathType::P2c
    } else {
        max
    }
}

/// `addInterStep`: route `src → dst` through `via`.
fn add_inter_step(sys: &mut System, via: NodeRef, src: NodeRef, dst_ty: NodeType, dst_idx: usize) {
    let a = sys.path(src, via.ty, via.idx).clone();
    let b = sys.path(via, dst_ty, dst_idx).clone();
    let mut links = a.links.clone();
    links.extend_from_slice(&b.links);
    let mut ty = merge_path_type(a.ty, b.ty);
    if via.ty == NodeType::Gpu {
        ty = PathType::Pxn;
    }
    *sys.path_mut(src, dst_ty, dst_idx) = Path {
        links,
        bw: a.bw.min(b.bw),
        ty,
    };
}

/// `ncclTopoGetLocal`: nodes of `result_ty` with the best bandwidth, then the best type,
/// from `(ty, idx)`, and that type (`DIS` when nothing is reachable).
pub fn get_local(sys: &System, from: NodeRef, result_ty: NodeType) -> (Vec<usize>, PathType) {
    let paths = sys.paths_to(from, result_ty);
    let mut min_ty = PathType::Dis;
    let mut max_bw = 0.0f32;
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        if p.bw > max_bw || (p.bw == max_bw && p.ty < min_ty) {
            max_bw = p.bw;
            min_ty = p.ty;
            out.clear();
        }
        if p.bw == max_bw && p.ty == min_ty {
            out.push(i);
        }
    }
    (out, min_ty)
}

/// `ncclGetLocalCpu`: the closest CPU of GPU `g` (fewest hops among the best ones).
pub fn local_cpu(sys: &System, g: usize) -> Result<usize, TopoError> {
    let from = NodeRef::new(NodeType::Gpu, g);
    let (locals, _) = get_local(sys, from, NodeType::Cpu);
    let mut best = *locals
        .first()
        .ok_or_else(|| TopoError::Topology(format!("could not find CPU close to GPU {g}")))?;
    for &c in &locals[1..] {
        if sys.path(from, NodeType::Cpu, c).count() < sys.path(from, NodeType::Cpu, best).count() {
            best = c;
        }
    }
    Ok(best)
}

fn mirror_bits(val: usize, pow2: usize) -> usize {
    let mut mirror = 0;
    let mut b = 1;
    let mut mb = pow2 >> 1;
    while b < pow2 {
        if val & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}

/// `ncclTopoGetLocalNet`: the NET index GPU `g` uses on channel `channel`.
pub fn local_net(sys: &System, g: usize, channel: usize, policy: NetDevsPolicy) -> Result<usize, TopoError> {
    let (nets, _) = get_local(sys, NodeRef::new(NodeType::Gpu, g), NodeType::Net);
    if nets.is_empty() {
        return Err(TopoError::Topology(format!(
            "Could not find any local path from gpu {g} to net."
        )));
    }
    let (gpus, _) = get_local(sys, NodeRef::new(NodeType::Net, nets[0]), NodeType::Gpu);
    let n_gpus = gpus.len().max(1);
    let nets_per_gpu = match policy {
        NetDevsPolicy::Auto => nets.len().div_ceil(n_gpus),
        NetDevsPolicy::All => nets.len(),
        NetDevsPolicy::Max(n) => n.min(nets.len()),
    }
    .max(1);
    let dev = usize::try_from(sys.node(NodeRef::new(NodeType::Gpu, g)).gpu().0).unwrap_or(0);
    let mut net = dev % n_gpus;
    if nets.len().is_power_of_two() {
        net = mirror_bits(net, nets.len());
    }
    net += channel % nets_per_gpu;
    Ok(nets[net % nets.len()])
}

/// `ncclTopoGetLocalGpu`: the first local GPU (by channel, then by GPU) whose preferred NIC
/// is `n`; -1 when none.
pub fn local_gpu(sys: &System, n: usize, policy: NetDevsPolicy) -> Result<i32, TopoError> {
    let (gpus, _) = get_local(sys, NodeRef::new(NodeType::Net, n), NodeType::Gpu);
    for c in 0..MAXCHANNELS {
        for &g in &gpus {
            if local_net(sys, g, c, policy)? == n {
                return Ok(g as i32);
            }
        }
    }
    Ok(-1)
}

/// `ncclTopoCheckP2p` within one system: whether ranks' GPUs `g1`, `g2` may use P2P (path
/// type within `NCCL_P2P_LEVEL`, default PXB; SYS on AMD with ≤ 2 DEVs). NVML's pairwise P2P
/// status is assumed OK (no NVML offline; see the module docs). Returns `(p2p, read)`.
pub fn check_p2p(sys: &System, g1: usize, g2: usize, params: &TopoParams) -> (bool, bool) {
    let path = sys.path(NodeRef::new(NodeType::Gpu, g1), NodeType::Gpu, g2);
    let mut level = PathType::Pxb;
    let (arch, vendor, _) = sys.cpu_type();
    if arch == cpu_arch::X86 && vendor == cpu_vendor::AMD && sys.count(NodeType::Dev) <= 2 {
        level = PathType::Sys;
    }
    if let Some(l) = params.p2p_level {
        level = l;
    }
    let p2p = path.ty <= level;
    let (c1, c2) = (sys.of(NodeType::Gpu)[g1].cc(), sys.of(NodeType::Gpu)[g2].cc());
    let read = path.ty == PathType::Nvl && c1 == c2 && c1 == 80;
    (p2p, read)
}

/// `ncclTopoGetIntermediateRank`: the rank relaying a PXN path from GPU `g` to NET `n`
/// (the rank itself otherwise).
pub fn intermediate_rank(sys: &System, g: usize, n: usize) -> Result<i32, TopoError> {
    let from = NodeRef::new(NodeType::Gpu, g);
    let path = sys.path(from, NodeType::Net, n);
    let my_rank = sys.of(NodeType::Gpu)[g].gpu().1;
    if path.ty != PathType::Pxn {
        return Ok(my_rank);
    }
    let mut i = 1;
    while i < path.count() && sys.links[path.links[i]].rem.ty == NodeType::Nvs {
        i += 1;
    }
    let mut node = sys.links[path.links[i.min(path.count() - 1)]].rem;
    if node.ty == NodeType::Dev
        && let Some(&l) = sys
            .node(node)
            .links
            .iter()
            .find(|&&l| sys.links[l].rem.ty == NodeType::Gpu)
    {
        node = sys.links[l].rem;
    }
    if node.ty != NodeType::Gpu {
        return Err(TopoError::Topology(format!(
            "Could not find intermediate GPU between GPU rank {my_rank} and NIC {:x}",
            sys.of(NodeType::Net)[n].id
        )));
    }
    // ncclTopoDevToRank(systemId, dev): the first GPU of that system with that NVML index.
    let (dev, rank, ..) = sys.node(node).gpu();
    let sid = topo_id_system(sys.node(node).id);
    Ok(sys
        .of(NodeType::Gpu)
        .iter()
        .find(|x| topo_id_system(x.id) == sid && x.gpu().0 == dev)
        .map(|x| x.gpu().1)
        .unwrap_or(rank))
}

/// `ncclTopoCheckGdr`: whether GPU `g` may use GPUDirect RDMA with NET `n` (`read`: sends).
pub fn check_gdr(sys: &System, g: usize, n: usize, read: bool, params: &TopoParams) -> Result<GdrMode, TopoError> {
    let net = sys.of(NodeType::Net)[n].net();
    let gpu_node = &sys.of(NodeType::Gpu)[g];
    let (_, _, cc, gdr, _) = gpu_node.gpu();
    if !net.gdr || !gdr {
        return Ok(GdrMode::Disable);
    }
    if let NodeInfo::Gpu { mlo_part, .. } = gpu_node.info
        && mlo_part != -1
        && !params.net_gdr_mlopart
    {
        return Ok(GdrMode::Disable);
    }
    if read {
        let p = params.net_gdr_read;
        if p == 0 {
            return Ok(GdrMode::Disable);
        }
        if p < 0 && cc < 80 {
            let mut nvlink = sys.count(NodeType::Gpu) == 1;
            for i in 0..sys.count(NodeType::Gpu) {
                if i != g && sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Gpu, i).ty == PathType::Nvl {
                    nvlink = true;
                    break;
                }
            }
            if !nvlink {
                return Ok(GdrMode::Disable);
            }
        }
    }
    let level = params.net_gdr_level.unwrap_or(if params.net_gdr_c2c {
        PathType::P2c
    } else {
        PathType::Pxb
    });
    let mut g = g;
    let mut distance = sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Net, n).ty;
    if distance == PathType::Pxn {
        let proxy = intermediate_rank(sys, g, n)?;
        g = sys
            .rank_to_index(proxy)
            .ok_or_else(|| TopoError::Topology(format!("could not find rank {proxy}")))?;
        distance = sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Net, n).ty;
    }
    if distance > level {
        return Ok(GdrMode::Disable);
    }
    let c = local_cpu(sys, g)?;
    if sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Cpu, c).ty == PathType::C2c && distance != PathType::P2c {
        Ok(GdrMode::Pci)
    } else {
        Ok(GdrMode::Default)
    }
}

/// `ncclTopoComputePaths` for one host's system. The transport checks NCCL makes with a
/// communicator (P2P/SHM `canConnect`, which can mark a peer `PATH_NET`) are not modelled:
/// every rank of a host can reach every other through shared memory.
pub fn compute_paths(sys: &mut System, params: &TopoParams) -> Result<(), TopoError> {
    sys.paths = NodeType::ALL
        .iter()
        .map(|&t| (0..sys.count(t)).map(|_| Default::default()).collect())
        .collect();
    for ty in [
        NodeType::Cpu,
        NodeType::Dev,
        NodeType::Gpu,
        NodeType::Net,
        NodeType::Gin,
        NodeType::Rma,
        NodeType::Nvs,
    ] {
        for i in 0..sys.count(ty) {
            set_paths(sys, NodeRef::new(ty, i), params.nvb_disable);
        }
    }
    let ngpus = sys.count(NodeType::Gpu);
    for g in 0..ngpus {
        for p in 0..ngpus {
            let (p2p, _) = check_p2p(sys, p, g, params);
            if !p2p {
                let cpu = local_cpu(sys, g)?;
                add_inter_step(
                    sys,
                    NodeRef::new(NodeType::Cpu, cpu),
                    NodeRef::new(NodeType::Gpu, p),
                    NodeType::Gpu,
                    g,
                );
            }
        }
    }
    // C2C + PHB: P2C only for the closest NICs.
    for g in 0..ngpus {
        let c = local_cpu(sys, g)?;
        let (nets, _) = get_local(sys, NodeRef::new(NodeType::Gpu, g), NodeType::Net);
        for n in nets {
            let a = sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Cpu, c).ty;
            let b = sys.path(NodeRef::new(NodeType::Net, n), NodeType::Cpu, c).ty;
            if merge_path_type(a, b) == PathType::P2c {
                let p = sys.path_mut(NodeRef::new(NodeType::Gpu, g), NodeType::Net, n);
                p.ty = p.ty.min(PathType::P2c);
                let p = sys.path_mut(NodeRef::new(NodeType::Net, n), NodeType::Gpu, g);
                p.ty = p.ty.min(PathType::P2c);
            }
        }
    }
    let nnets = sys.count(NodeType::Net);
    for n in 0..nnets {
        for g in 0..ngpus {
            let gr = NodeRef::new(NodeType::Gpu, g);
            if !params.pxn_disable {
                let lg = local_gpu(sys, n, params.netdevs_policy)?;
                if lg != g as i32 && lg != -1 {
                    let lg = lg as usize;
                    let peer = NodeRef::new(NodeType::Gpu, lg);
                    let gdr = check_gdr(sys, lg, n, true, params)?;
                    let pxn_ty = if params.pxn_c2c { PathType::P2c } else { PathType::Pxb };
                    let peer_net = sys.path(peer, NodeType::Net, n).clone();
                    let my_net = sys.path(gr, NodeType::Net, n).clone();
                    if peer_net.ty <= pxn_ty
                        && gdr != GdrMode::Disable
                        && sys.path(peer, NodeType::Gpu, g).ty <= PathType::Nvl
                        && topo_id_system(sys.node(peer).id) == topo_id_system(sys.node(gr).id)
                        && (peer_net.bw > my_net.bw || my_net.ty > PathType::Pxn)
                    {
                        add_inter_step(sys, peer, gr, NodeType::Net, n);
                    }
                }
            }
            if sys.path(gr, NodeType::Net, n).ty < PathType::Phb
                && check_gdr(sys, g, n, false, params)? == GdrMode::Disable
            {
                let c = NodeRef::new(NodeType::Cpu, local_cpu(sys, g)?);
                add_inter_step(sys, c, NodeRef::new(NodeType::Net, n), NodeType::Gpu, g);
                add_inter_step(sys, c, gr, NodeType::Net, n);
            }
        }
    }
    for n in 0..nnets {
        let lg = local_gpu(sys, n, params.netdevs_policy)?;
        if let NodeInfo::Net(ni) = &mut sys.nodes[NodeType::Net.idx()][n].info {
            ni.local_gpu = lg;
        }
    }
    Ok(())
}

/// `ncclTopoTrimSystem`: keeps only the GPUs connected (path type < NET) to `my_rank`'s
/// GPU; sets `inter = (GPUs left != nranks)`. Paths must be recomputed afterwards.
pub fn trim_system(sys: &mut System, my_rank: i32, nranks: usize) {
    let n = sys.count(NodeType::Gpu);
    let mut domains: Vec<usize> = (0..n).collect();
    let ids: Vec<i64> = sys.of(NodeType::Gpu).iter().map(|g| g.id).collect();
    let mut my_domain = 0;
    for g in 0..n {
        for p in 0..g {
            if sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Gpu, p).ty < PathType::Net {
                domains[g] = domains[g].min(domains[p]);
            }
        }
        if sys.of(NodeType::Gpu)[g].gpu().1 == my_rank {
            my_domain = domains[g];
        }
    }
    for i in 0..n {
        if domains[i] == my_domain {
            continue;
        }
        if let Some(g) = sys.index_of(NodeType::Gpu, ids[i]) {
            sys.remove_node(NodeType::Gpu, g);
        }
    }
    sys.inter = sys.count(NodeType::Gpu) != nranks;
}

/// `ncclTopoGetGpuMinPath` / `ncclTopoGetGpuMaxPath` over GPU→`ty` paths (GPU→GPU skips
/// self). `(min, max)`, defaulting to `(SYS, LOC)` as NCCL when nothing is computed.
pub fn gpu_path_range(sys: &System, ty: NodeType) -> (PathType, PathType) {
    let mut min = PathType::Sys;
    let mut max = PathType::Loc;
    for i in 0..sys.count(NodeType::Gpu) {
        let paths = sys.paths_to(NodeRef::new(NodeType::Gpu, i), ty);
        for (j, p) in paths.iter().enumerate() {
            if ty == NodeType::Gpu && i == j {
                continue;
            }
            min = min.min(p.ty);
            max = max.max(p.ty);
        }
    }
    (min, max)
}

/// `ncclTopoSplitNvLink`: whether the GPUs form exactly two NVLink domains of ≥ 2 GPUs.
#[allow(clippy::needless_range_loop)] // indices as NCCL's loops
pub fn split_nvlink(sys: &System) -> bool {
    let n = sys.count(NodeType::Gpu);
    let mut dom: Vec<usize> = (0..n).collect();
    for g in 0..n {
        let d = dom[g];
        for p in g + 1..n {
            if sys.path(NodeRef::new(NodeType::Gpu, g), NodeType::Gpu, p).ty == PathType::Nvl {
                dom[p] = d;
            }
        }
    }
    let mut cnt = vec![0usize; n];
    for g in 0..n {
        cnt[dom[g]] += 1;
    }
    cnt.iter().filter(|&&c| c > 1).count() == 2
}

/// `printNodePaths` lines for every GPU and NET (the tail of `ncclTopoPrint`).
pub fn print_paths(sys: &System) -> Vec<String> {
    let mut out = Vec::new();
    for ty in [NodeType::Gpu, NodeType::Net] {
        for i in 0..sys.count(ty) {
            let from = NodeRef::new(ty, i);
            let node = sys.node(from);
            let mut line = format!("{}/{:x}-{:x} :", ty, topo_id_system(node.id), topo_id_local(node.id));
            for t in NodeType::ALL {
                for (n, p) in sys.paths_to(from, t).iter().enumerate() {
                    let id = sys.of(t)[n].id;
                    line.push_str(&format!(
                        "{}/{:x}-{:x} ({}/{:.1}/{}) ",
                        t,
                        topo_id_system(id),
                        topo_id_local(id),
                        p.count(),
                        p.bw,
                        p.ty
                    ));
                }
            }
            out.push(line);
        }
    }
    out
}

/// `ncclTopoSearchInit`: the per-channel maximum (`maxBw`) and total (`totalBw`) bandwidths.
pub fn search_init(sys: &mut System) {
    sys.max_bw = 0.0;
    sys.total_bw = 0.0;
    if !sys.inter && sys.count(NodeType::Gpu) == 1 {
        sys.max_bw = LOC_BW;
        sys.total_bw = LOC_BW;
        return;
    }
    let target = if sys.inter { NodeType::Net } else { NodeType::Dev };
    for d in 0..sys.count(NodeType::Dev) {
        let dr = NodeRef::new(NodeType::Dev, d);
        let mut max = 0.0f32;
        for p in sys.paths_to(dr, target) {
            if p.count() == 0 {
                continue;
            }
            max = max.max(p.bw);
        }
        let mut nvl = 0.0f32;
        let mut pci = 0.0f32;
        for &l in &sys.node(dr).links {
            let link = &sys.links[l];
            if link.ty == LinkType::Nvl {
                nvl += link.bw;
            }
            if link.ty == LinkType::Pci {
                pci = link.bw;
            }
        }
        sys.max_bw = sys.max_bw.max(max);
        sys.total_bw = sys.total_bw.max(pci.max(nvl));
    }
}
