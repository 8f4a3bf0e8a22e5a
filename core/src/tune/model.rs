//! NCCL 2.30.7's cost model: `src/graph/tuning.cc: ncclTopoTuneModel` (per
//! function, algorithm and protocol a latency in µs and a bandwidth in GB/s) and
//! `ncclTopoGetAlgoTime` (the predicted time of one operation), reference
//! `docs/reference/nccl-graph-tuning.md` §3.2 and §3.4.
//!
//! Everything here is a pure function of its inputs ([`ModelInput`],
//! [`GraphInfo`], [`TunerConstants`], [`EnableMatrix`]): the same code gives
//! NCCL's numbers for a GPU machine (the topology explorer) and ferroccl's for a
//! CPU host (the runtime, with [`TunerConstants::cpu_host`] and the graph facts
//! from `super::host`). Arithmetic follows NCCL's types: bandwidths and
//! latencies are `float`, the per-channel ceilings `double`.

use super::constants::{HW_NET, HW_NVLINK, HW_PCI, TunerConstants};
use super::enable::EnableMatrix;
use crate::coll::ids::{Algorithm as A, Func as F, NUM_ALGOS, NUM_FUNCS, NUM_PROTOS, Protocol as P};

/// NCCL's path types (`src/include/graph.h`, reference §1.3), used for a
/// pattern's `typeIntra` / `typeInter`.
pub mod path {
    /// Same node.
    pub const LOC: u8 = 0;
    /// NVLink.
    pub const NVL: u8 = 1;
    /// NVLink through one intermediate GPU.
    pub const NVB: u8 = 2;
    /// Chip-to-chip.
    pub const C2C: u8 = 3;
    /// At most one PCI switch.
    pub const PIX: u8 = 4;
    /// Several PCI switches.
    pub const PXB: u8 = 5;
    /// GPU→CPU over C2C, CPU→NIC over PCIe.
    pub const P2C: u8 = 6;
    /// Through a peer GPU's NIC.
    pub const PXN: u8 = 7;
    /// Through a PCI host bridge.
    pub const PHB: u8 = 8;
    /// Through the inter-CPU link.
    pub const SYS: u8 = 9;
    /// Through the network.
    pub const NET: u8 = 10;
    /// Disconnected.
    pub const DIS: u8 = 11;
}

/// `NCCL_TOPO_PATTERN_TREE` (all NIC traffic through one GPU): the Tree bandwidth
/// is derated by 0.85 when the comm's tree graph has this pattern.
pub const PATTERN_TREE: u8 = 3;
/// `NCCL_TOPO_PATTERN_BALANCED_TREE`.
pub const PATTERN_BALANCED_TREE: u8 = 1;

/// What one graph search gives the model (the fields of `struct ncclTopoGraph`
/// that `ncclTopoTuneModel` reads). The graph layer fills one per pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PatternInfo {
    /// Channels found (`nChannels`); 0 when the pattern does not exist.
    pub nchannels: usize,
    /// Per-channel bandwidth within a node, GB/s (`bwIntra`).
    pub bw_intra: f32,
    /// Per-channel bandwidth to the network, GB/s (`bwInter`).
    pub bw_inter: f32,
    /// Worst path type within a node ([`path`]).
    pub type_intra: u8,
    /// Worst path type GPU↔NIC ([`path`]).
    pub type_inter: u8,
    /// Network latency of the chosen NIC, µs (`latencyInter`).
    pub latency_inter: f32,
    /// Every channel repeats the first one's order (`sameChannels`).
    pub same_channels: bool,
}

impl PatternInfo {
    /// A pattern that does not exist (no channels, no bandwidth).
    pub const NONE: PatternInfo = PatternInfo {
        nchannels: 0,
        bw_intra: 0.0,
        bw_inter: 0.0,
        type_intra: path::DIS,
        type_inter: path::DIS,
        latency_inter: 0.0,
        same_channels: false,
    };
}

/// The graphs of a communicator, as `ncclTopoTuneModel` sees them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GraphInfo {
    /// The tree graph (used by Tree and PAT).
    pub tree: PatternInfo,
    /// The ring graph.
    pub ring: PatternInfo,
    /// The CollNet-direct graph.
    pub collnet_direct: PatternInfo,
    /// The CollNet-chain graph.
    pub collnet_chain: PatternInfo,
    /// The NVLS graph (used by NVLS and NVLSTree).
    pub nvls: PatternInfo,
    /// `comm->maxTreePattern`: the tree graph's pattern across ranks
    /// ([`PATTERN_TREE`] derates Tree).
    pub max_tree_pattern: u8,
}

impl GraphInfo {
    /// `graphs[a]`: NCCL's per-algorithm table `{tree, ring, collnetDirect,
    /// collnetChain, nvls, nvls, tree}`.
    pub fn for_algo(&self, a: A) -> &PatternInfo {
        match a {
            A::Tree | A::Pat => &self.tree,
            A::Ring => &self.ring,
            A::CollNetDirect => &self.collnet_direct,
            A::CollNetChain => &self.collnet_chain,
            A::Nvls | A::NvlsTree => &self.nvls,
        }
    }
}

/// CPU architecture (`NCCL_TOPO_CPU_ARCH_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuArch {
    /// x86-64.
    X86,
    /// IBM POWER (Tree/Simple PCI latency set to Ring's).
    Power,
    /// ARM.
    Arm,
    /// Mixed or unknown.
    Other,
}

/// CPU vendor (`NCCL_TOPO_CPU_VENDOR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuVendor {
    /// Intel.
    Intel,
    /// AMD (LL bandwidth row 1 across nodes, net overhead 2 µs).
    Amd,
    /// Zhaoxin.
    Zhaoxin,
    /// Different vendors in one communicator (treated like AMD for LL).
    Mixed,
    /// Anything else.
    Other,
}

/// Parameters the model reads (`NCCL_NTHREADS`, `NCCL_LL128_NTHREADS`,
/// `NCCL_PAT_ENABLE`, `NCCL_LL128_C2C`, `NCCL_NET_OVERHEAD`,
/// `NCCL_THREAD_THRESHOLDS`), with NCCL's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelParams {
    /// `NCCL_NTHREADS` (-2 = default).
    pub nthreads: i64,
    /// `NCCL_LL128_NTHREADS` (-2 = default).
    pub ll128_nthreads: i64,
    /// `NCCL_PAT_ENABLE` (2 = auto).
    pub pat_enable: i64,
    /// `NCCL_LL128_C2C` (default 1).
    pub ll128_c2c: bool,
    /// `NCCL_NET_OVERHEAD` in ns (-2 = by CPU type).
    pub net_overhead_ns: i64,
    /// `NCCL_THREAD_THRESHOLDS` ("a b c d e f": Tree then Ring, LL/LL128/Simple).
    pub thread_thresholds: Option<String>,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams {
            nthreads: -2,
            ll128_nthreads: -2,
            pat_enable: 2,
            ll128_c2c: true,
            net_overhead_ns: -2,
            thread_thresholds: None,
        }
    }
}

/// The communicator facts the model reads besides the graphs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInput {
    /// Ranks.
    pub nranks: usize,
    /// Nodes (hosts).
    pub nnodes: usize,
    /// Channels of the communicator (`comm->nChannels`).
    pub nchannels: usize,
    /// Smallest compute capability ×10 (e.g. 90); 0 on a CPU host.
    pub min_compcap: i32,
    /// Largest compute capability ×10.
    pub max_compcap: i32,
    /// CPU architecture.
    pub cpu_arch: CpuArch,
    /// CPU vendor.
    pub cpu_vendor: CpuVendor,
    /// `comm->config.collnetEnable`.
    pub collnet_enable: bool,
    /// `comm->collNetChainSupport`.
    pub collnet_chain_support: bool,
    /// NVSwitches in the topology (`ncclTopoGetNvsCount`).
    pub nvs_count: usize,
    /// The CollNet plugin has `iallgather`.
    pub collnet_iallgather: bool,
    /// The CollNet plugin has `ireducescatter`.
    pub collnet_ireducescatter: bool,
    /// `comm->collNetHeadsNum`.
    pub collnet_heads: usize,
    /// Most ranks on one node.
    pub max_local_ranks: usize,
    /// The net plugin's device type is `NCCL_NET_DEVICE_HOST` (PAT needs it).
    pub net_device_host: bool,
    /// `CUDART_VERSION` NCCL was built with (11080 disables 2-rank Hopper Ring/LL128 AllReduce).
    pub cudart_version: i32,
    /// Parameters.
    pub params: ModelParams,
}

impl ModelInput {
    /// An example GPU cluster, for tests and the conformance suite's cost
    /// tables: `nnodes` nodes of `nranks / nnodes` GPUs of compute capability
    /// `compcap` (90: Hopper), 16 channels, x86 Intel hosts, CUDA 12.0, no
    /// NVSwitch, no CollNet, default parameters.
    pub fn gpu_cluster(nranks: usize, nnodes: usize, compcap: i32) -> ModelInput {
        ModelInput {
            nranks,
            nnodes,
            nchannels: 16,
            min_compcap: compcap,
            max_compcap: compcap,
            cpu_arch: CpuArch::X86,
            cpu_vendor: CpuVendor::Intel,
            collnet_enable: false,
            collnet_chain_support: false,
            nvs_count: 0,
            collnet_iallgather: false,
            collnet_ireducescatter: false,
            collnet_heads: 0,
            max_local_ranks: nranks / nnodes.max(1),
            net_device_host: true,
            cudart_version: 12000,
            params: ModelParams::default(),
        }
    }

    /// Ranks per node, as NCCL's `ppn` (float).
    pub fn ppn(&self) -> f32 {
        self.nranks as f32 / self.nnodes.max(1) as f32
    }
}

/// `NCCL_SIMPLE_MAX_NTHREADS`.
pub const SIMPLE_MAX_NTHREADS: i32 = 512;
/// `NCCL_LL_MAX_NTHREADS`.
pub const LL_MAX_NTHREADS: i32 = 512;
/// `NCCL_LL128_MAX_NTHREADS`.
pub const LL128_MAX_NTHREADS: i32 = 640;
/// `NCCL_MAX_NTHREADS`.
pub const MAX_NTHREADS: i32 = 640;
/// `WARP_SIZE`.
pub const WARP_SIZE: i32 = 32;
/// `PCI_BW` (GB/s), used for the Ring/Simple thread default.
pub const PCI_BW: f32 = 12.0;
/// `NCCL_MAX_DEV_WORK_BATCH_COLLS` (1024 / 128-byte `ncclDevWorkColl`).
pub const MAX_DEV_WORK_BATCH_COLLS: usize = 8;

/// NCCL's tree correction factors (`treeCorrectionFactor[proto][log2(nBytes/64)]`).
pub const TREE_CORRECTION: [[f32; 24]; NUM_PROTOS] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0,
        1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0,
        1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9,
        0.9, 0.9,
    ],
];

/// NCCL's `log2i` (`log2Down`): floor of log2, -1 for 0.
pub fn log2i(n: u64) -> i32 {
    if n == 0 { -1 } else { 63 - n.leading_zeros() as i32 }
}

/// Per-function/algorithm/protocol table of `f32`.
pub type Table3 = [[[f32; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS];

/// The model of one communicator: what `ncclTopoTuneModel` leaves in the comm.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// `bandwidths[func][algo][proto]`, GB/s of algorithm bandwidth; 0 = not available.
    pub bandwidths: Table3,
    /// `latencies[func][algo][proto]`, µs.
    pub latencies: Table3,
    /// `maxThreads[algo][proto]`.
    pub max_threads: [[i32; NUM_PROTOS]; NUM_ALGOS],
    /// `threadThresholds[algo][proto]`: bytes per thread before adding channels/threads.
    pub thread_thresholds: [[i64; NUM_PROTOS]; NUM_ALGOS],
    /// Ranks.
    pub nranks: usize,
    /// Nodes.
    pub nnodes: usize,
    /// `comm->nChannels`.
    pub nchannels: usize,
    /// Smallest compute capability.
    pub min_compcap: i32,
    /// CPU architecture.
    pub cpu_arch: CpuArch,
    /// Warnings the model raised (invalid thread counts), for the caller to log.
    pub notes: Vec<String>,
}

fn get_nthreads(notes: &mut Vec<String>, name: &str, env: i64, min: i32, max: i32, def: i32) -> i32 {
    if env <= 0 {
        return def;
    }
    let nt = env.min(i32::MAX as i64) as i32;
    if nt % WARP_SIZE != 0 {
        notes.push(format!("Invalid {name} {nt} (must be a multiple of {WARP_SIZE})"));
        max
    } else if nt > max {
        notes.push(format!("Invalid {name} {nt} (maximum {max})."));
        max
    } else if nt < min {
        notes.push(format!("Invalid {name} {nt} (minimum {min})."));
        min
    } else {
        nt
    }
}

/// `ncclPatEnable`.
fn pat_enable(inp: &ModelInput) -> bool {
    if inp.min_compcap < 60 {
        return false;
    }
    if inp.params.pat_enable != 2 {
        return inp.params.pat_enable != 0;
    }
    inp.nnodes == inp.nranks && inp.net_device_host
}

/// `getNetOverhead` (µs).
fn net_overhead(inp: &ModelInput) -> f32 {
    if inp.params.net_overhead_ns != -2 {
        return inp.params.net_overhead_ns as f32 * 0.001;
    }
    match (inp.cpu_arch, inp.cpu_vendor) {
        (CpuArch::X86, CpuVendor::Intel) => 1.0,
        (CpuArch::X86, CpuVendor::Amd) => 2.0,
        _ => 1.0,
    }
}

/// Compute-capability row of the bandwidth tables.
pub fn compcap_index(min_compcap: i32) -> usize {
    if min_compcap >= 100 {
        3
    } else if min_compcap >= 90 {
        2
    } else if min_compcap >= 80 {
        1
    } else {
        0
    }
}

/// Entries the runtime can run (`[func][algo][proto]`); the others get bandwidth 0
/// like an algorithm NCCL disables. All `true` reproduces NCCL.
pub type Runnable = [[[bool; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS];

/// Every entry runnable (NCCL on a GPU).
pub const ALL_RUNNABLE: Runnable = [[[true; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS];

/// `ncclTopoTuneModel`: fills the latency and bandwidth of every (function,
/// algorithm, protocol), applies the enable matrix and NCCL's disable rules,
/// then zeroes what `runnable` excludes. `constants` may be modified as NCCL
/// modifies `comm->tunerConstants` (POWER CPUs).
pub fn tune_model(
    inp: &ModelInput,
    graphs: &GraphInfo,
    constants: &mut TunerConstants,
    enable: &EnableMatrix,
    runnable: &Runnable,
) -> Model {
    let mut notes = Vec::new();
    let mut max_threads = [[0i32; NUM_PROTOS]; NUM_ALGOS];
    let ring = graphs.ring;
    let simple_default = if ring.bw_intra * ring.nchannels as f32 <= PCI_BW {
        256
    } else {
        SIMPLE_MAX_NTHREADS
    };
    let nt = inp.params.nthreads;
    let (r, t, s, ll, ll128) = (
        A::Ring.index(),
        A::Tree.index(),
        P::Simple.index(),
        P::Ll.index(),
        P::Ll128.index(),
    );
    max_threads[r][s] = get_nthreads(
        &mut notes,
        crate::config::params::tune::NTHREADS.name,
        nt,
        2 * WARP_SIZE,
        SIMPLE_MAX_NTHREADS,
        simple_default,
    );
    max_threads[t][s] = get_nthreads(
        &mut notes,
        crate::config::params::tune::NTHREADS.name,
        nt,
        2 * WARP_SIZE,
        SIMPLE_MAX_NTHREADS,
        SIMPLE_MAX_NTHREADS,
    );
    for a in [A::CollNetDirect, A::CollNetChain, A::Nvls, A::NvlsTree] {
        max_threads[a.index()][s] = MAX_NTHREADS;
    }
    let ll_threads = get_nthreads(
        &mut notes,
        crate::config::params::tune::NTHREADS.name,
        nt,
        2 * WARP_SIZE,
        LL_MAX_NTHREADS,
        LL_MAX_NTHREADS,
    );
    max_threads[r][ll] = ll_threads;
    max_threads[t][ll] = ll_threads;
    let ll128_threads = get_nthreads(
        &mut notes,
        crate::config::params::tune::LL128_NTHREADS.name,
        inp.params.ll128_nthreads,
        LL128_MAX_NTHREADS / 4,
        LL128_MAX_NTHREADS,
        LL128_MAX_NTHREADS,
    );
    max_threads[r][ll128] = ll128_threads;
    max_threads[t][ll128] = ll128_threads;

    let mut m = Model {
        bandwidths: [[[0.0; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS],
        latencies: [[[0.0; NUM_PROTOS]; NUM_ALGOS]; NUM_FUNCS],
        max_threads,
        thread_thresholds: [[0; NUM_PROTOS]; NUM_ALGOS],
        nranks: inp.nranks,
        nnodes: inp.nnodes,
        nchannels: inp.nchannels,
        min_compcap: inp.min_compcap,
        cpu_arch: inp.cpu_arch,
        notes,
    };
    let nnodes = inp.nnodes.max(1);
    let nranks = inp.nranks;
    if nranks <= 1 {
        return m;
    }
    let cc = compcap_index(inp.min_compcap);
    let index2 = if nnodes <= 2 { nnodes - 1 } else { 2 };
    let index1 = if nnodes == 1 {
        cc
    } else if matches!(inp.cpu_vendor, CpuVendor::Amd | CpuVendor::Mixed) {
        1
    } else {
        0
    };
    let ll_max_bw = constants.ll_max_bws[index1][index2];
    let per_ch_max_tree_bw = constants.per_ch_max_tree_bws[cc][index2];
    let per_ch_max_ring_ll128_bw = constants.per_ch_max_ring_ll128_bws[cc][index2];
    let per_ch_max_tree_ll128_bw = constants.per_ch_max_tree_ll128_bws[cc][index2];
    let per_ch_max_nvls_tree_bw = constants.per_ch_max_nvls_tree_bws[cc][index2];
    if inp.cpu_arch == CpuArch::Power {
        constants.hw_latencies[HW_PCI][t][s] = constants.hw_latencies[HW_PCI][r][s];
    }
    let c = *constants;
    let ppn = inp.ppn();
    let nvls_eff = [0.0f32, 0.0, 0.85, 0.74][cc];
    let pat = pat_enable(inp);

    for f in F::ALL {
        let nsteps: i64 = match f {
            F::AllReduce => 2 * (nranks as i64 - 1),
            F::ReduceScatter | F::AllGather => nranks as i64 - 1,
            _ => nranks as i64,
        };
        let agrs = matches!(f, F::AllGather | F::ReduceScatter);
        for a in A::ALL {
            if matches!(f, F::Broadcast | F::Reduce) && a != A::Ring {
                continue;
            }
            if agrs && !matches!(a, A::Pat | A::Ring | A::Nvls | A::CollNetDirect) {
                continue;
            }
            if f == F::AllReduce && a == A::Pat {
                continue;
            }
            let g = graphs.for_algo(a);
            let intra_hw = if g.type_intra == path::NVL { HW_NVLINK } else { HW_PCI };
            let hw = if nnodes == 1 { intra_hw } else { HW_NET };
            for p in P::ALL {
                let (ai, pi) = (a.index(), p.index());
                if matches!(a, A::Nvls | A::NvlsTree) && p != P::Simple {
                    continue;
                }
                if agrs && a == A::Pat && (p != P::Simple || !pat) {
                    continue;
                }
                let collnet = matches!(a, A::CollNetDirect | A::CollNetChain);
                let mut bw: f32 = if nnodes <= 2 || collnet { g.bw_intra } else { g.bw_inter };
                if matches!(a, A::Nvls | A::NvlsTree) {
                    if g.nchannels < 2 {
                        continue;
                    }
                    let nch = g.nchannels as f32;
                    let mut intra_bw = g.bw_intra * nvls_eff * (nch - 1.0) / nch;
                    if f == F::AllReduce {
                        intra_bw *= 2.0;
                    } else {
                        intra_bw *= (ppn - 1.0) / ppn;
                    }
                    let inter_bw = g.bw_inter * if nnodes <= 2 && a == A::NvlsTree { 2.0 } else { 1.0 };
                    let cap = if a == A::NvlsTree {
                        per_ch_max_nvls_tree_bw as f32
                    } else {
                        f32::MAX
                    };
                    bw = intra_bw.min(inter_bw).min(cap);
                }
                let nch = g.nchannels as f64;
                let mut bus_bw: f32 = g.nchannels as f32 * bw;
                if a == A::Ring && p == P::Ll {
                    bus_bw = ll_max_bw.min(bus_bw as f64 * 0.5) as f32;
                }
                if a == A::Ring && p == P::Ll128 {
                    bus_bw = (bus_bw as f64 * 0.92).min(nch * per_ch_max_ring_ll128_bw) as f32;
                }
                if a == A::Tree && f == F::AllReduce {
                    bus_bw = (bus_bw as f64 * 0.92).min(nch * per_ch_max_tree_bw) as f32;
                }
                if a == A::Tree && p == P::Ll {
                    bus_bw = (bus_bw as f64 * 1.0 / 3.8).min(ll_max_bw) as f32;
                }
                if a == A::Tree && p == P::Ll128 {
                    let k = if nnodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
                    bus_bw = (bus_bw as f64 * k).min(nch * per_ch_max_tree_ll128_bw) as f32;
                }
                if a == A::Tree && graphs.max_tree_pattern == PATTERN_TREE {
                    bus_bw = (bus_bw as f64 * 0.85) as f32;
                }
                if a == A::Pat {
                    bus_bw = (bus_bw as f64 * 0.75) as f32;
                }
                if collnet && p != P::Simple {
                    bus_bw = 0.0;
                }
                if a == A::CollNetDirect && p == P::Simple {
                    if agrs {
                        bus_bw = ppn * g.bw_intra.min(g.bw_inter * 0.9);
                    } else {
                        let mut factor = (ppn as f64) / (1.0 * nch);
                        factor -= (factor - 1.0) / 2.0;
                        bus_bw = (bus_bw as f64 / factor) as f32;
                        if inp.min_compcap >= 90 {
                            bus_bw = (bus_bw as f64 * 0.85) as f32;
                        }
                    }
                }
                if matches!(a, A::Nvls | A::CollNetDirect) && p == P::Simple && agrs && nnodes > 1 {
                    if f == F::AllGather && !inp.collnet_iallgather {
                        bus_bw = 0.0;
                    }
                    if f == F::ReduceScatter && !inp.collnet_ireducescatter {
                        bus_bw = 0.0;
                    }
                    let heads = if inp.collnet_enable {
                        inp.collnet_heads
                    } else {
                        bus_bw = 0.0;
                        0
                    };
                    if bus_bw > 0.0 && inp.max_local_ranks > heads {
                        bus_bw = 0.0;
                    }
                }
                // Bus bandwidth to algorithm bandwidth.
                if !(a != A::Ring && agrs) {
                    let ratio: f64 = if matches!(a, A::Ring | A::Nvls | A::NvlsTree) {
                        nranks as f64 / nsteps as f64
                    } else {
                        0.5
                    };
                    bus_bw = (bus_bw as f64 * ratio) as f32;
                }
                let fi = f.index();
                m.bandwidths[fi][ai][pi] = bus_bw;
                let mut lat = c.base_latencies[ai][pi] as f32;
                let mut intra_lat = c.hw_latencies[intra_hw][ai][pi] as f32;
                let mut inter_lat = if ppn == 1.0 {
                    c.hw_latencies[HW_NET][t][pi] as f32
                } else {
                    c.hw_latencies[HW_NET][ai][pi] as f32
                };
                inter_lat += g.latency_inter;
                if p == P::Simple {
                    inter_lat += g.latency_inter;
                }
                let local = (nranks / nnodes) as f32 - 1.0;
                let l2n = log2i(nnodes as u64) as f32;
                match a {
                    A::Ring => {
                        let mut hl = c.hw_latencies[hw][ai][pi] as f32;
                        if matches!(f, F::Reduce | F::Broadcast) {
                            if g.same_channels {
                                lat += hl;
                            } else {
                                if p == P::Simple {
                                    hl = c.hw_latencies[hw][t][pi] as f32;
                                }
                                lat += nsteps as f32 * hl;
                            }
                        } else {
                            let mut over = 0.0f32;
                            if nnodes > 1 {
                                over = net_overhead(inp);
                                if p == P::Simple {
                                    over *= 3.0;
                                }
                            }
                            intra_lat = intra_lat.max(over);
                            let n_inter: i64 = if nnodes == 1 {
                                0
                            } else if f == F::AllReduce {
                                2 * (nnodes as i64 - 1)
                            } else {
                                nnodes as i64 - 1
                            };
                            lat += (nsteps - n_inter) as f32 * intra_lat + n_inter as f32 * inter_lat;
                        }
                    }
                    A::Tree => {
                        if f == F::AllReduce {
                            lat += 2.0 * (local * intra_lat + l2n * inter_lat);
                        }
                    }
                    A::CollNetDirect => {
                        lat +=
                            (2.0 * (local.min(1.0) as f64 * intra_lat as f64 + local as f64 * 0.4)) as f32 + inter_lat;
                    }
                    A::CollNetChain => {
                        lat += 2.0 * local * intra_lat + inter_lat;
                    }
                    A::Nvls => {
                        lat = intra_lat;
                        if nnodes > 1 {
                            lat += inter_lat;
                        }
                    }
                    A::NvlsTree => {
                        lat += intra_lat + 2.0 * l2n * inter_lat;
                    }
                    A::Pat => {
                        if agrs {
                            lat += (l2n as f64 * (inter_lat as f64 / 3.5) + nranks as f64 * 2.8) as f32;
                        }
                    }
                }
                m.latencies[fi][ai][pi] = lat;
            }
        }
    }

    // Enable matrix (user settings) plus NCCL's forced disables.
    let mut algo_enable = enable.algo;
    for row in algo_enable.iter_mut() {
        if inp.nnodes == 1 {
            row[A::NvlsTree.index()] = 0;
        }
        if !inp.collnet_enable {
            row[A::CollNetDirect.index()] = 0;
            row[A::CollNetChain.index()] = 0;
            if inp.nnodes > 1 {
                row[A::Nvls.index()] = 0;
            }
        }
        if inp.collnet_enable && !inp.collnet_chain_support {
            row[A::CollNetChain.index()] = 0;
        }
        if inp.nvs_count == 0 {
            row[A::CollNetDirect.index()] = 0;
        }
    }
    for f in F::ALL {
        let fi = f.index();
        for a in A::ALL {
            let g = graphs.for_algo(a);
            for p in P::ALL {
                let mut pe = enable.proto[fi][p.index()];
                if pe == 2 && p == P::Ll128 {
                    pe = 1;
                    let mut ok = if inp.params.ll128_c2c && inp.min_compcap >= 90 {
                        g.type_inter <= path::PXN
                    } else {
                        g.type_inter <= path::PXB
                    };
                    ok &= g.type_intra <= path::NVB;
                    ok &= inp.min_compcap == inp.max_compcap || inp.min_compcap >= 90;
                    ok &= !(inp.min_compcap < 70
                        || (inp.min_compcap == 90
                            && inp.cudart_version == 11080
                            && f == F::AllReduce
                            && a == A::Ring
                            && nranks == 2));
                    if !ok {
                        pe = 0;
                    }
                }
                let (ai, pi) = (a.index(), p.index());
                if pe == 0 || algo_enable[fi][ai] == 0 || !runnable[fi][ai][pi] {
                    m.bandwidths[fi][ai][pi] = 0.0;
                }
            }
        }
    }

    // Thread thresholds.
    for a in 0..NUM_ALGOS {
        m.thread_thresholds[a] = [LL_THREAD_THRESHOLD, LL128_THREAD_THRESHOLD, SIMPLE_THREAD_THRESHOLD];
    }
    m.thread_thresholds[r][ll] *= nranks as i64;
    m.thread_thresholds[A::CollNetDirect.index()][s] = 512;
    m.thread_thresholds[A::CollNetChain.index()][s] = 512;
    if let Some(str) = &inp.params.thread_thresholds {
        // sscanf("%ld %ld %ld %ld %ld %ld"): stops at the first token that is not a number.
        let vals: Vec<i64> = str.split_whitespace().map_while(|t| t.parse().ok()).take(6).collect();
        for (i, v) in vals.into_iter().enumerate() {
            if v >= 0 {
                m.thread_thresholds[i / 3][i % 3] = v;
            }
        }
    }
    m
}

/// `NCCL_LL_THREAD_THRESHOLD`.
pub const LL_THREAD_THRESHOLD: i64 = 8;
/// `NCCL_LL128_THREAD_THRESHOLD`.
pub const LL128_THREAD_THRESHOLD: i64 = 8;
/// `NCCL_SIMPLE_THREAD_THRESHOLD`.
pub const SIMPLE_THREAD_THRESHOLD: i64 = 64;

impl Model {
    /// `ncclTopoGetAlgoTime`: predicted µs of `f` with `(a, p)` on `nbytes`
    /// (`numPipeOps` operations in one aggregate), or `None` where the bandwidth
    /// is 0 (NCCL's -1).
    pub fn algo_time(&self, f: F, a: A, p: P, nbytes: usize, num_pipe_ops: usize) -> Option<f32> {
        let (fi, ai, pi) = (f.index(), a.index(), p.index());
        let mut bw = self.bandwidths[fi][ai][pi];
        let mut lat = self.latencies[fi][ai][pi];
        if bw == 0.0 {
            return None;
        }
        let k = log2i((nbytes >> 6) as u64);
        if a == A::Tree && f == F::AllReduce && (0..23).contains(&k) {
            bw *= TREE_CORRECTION[pi][k as usize];
        }
        if a == A::NvlsTree
            && f == F::AllReduce
            && (0..24).contains(&k)
            && self.min_compcap >= 100
            && self.cpu_arch == CpuArch::X86
        {
            bw *= TREE_CORRECTION[pi][k as usize];
        }
        if a == A::Ring
            && p == P::Simple
            && self.nnodes > 1
            && f == F::AllReduce
            && nbytes / (self.nchannels.max(1) * self.nranks.max(1)) >= 64
        {
            lat *= if self.min_compcap < 80 { 1.9 } else { 1.4 };
        }
        let lat_count = if a == A::Ring {
            num_pipe_ops
        } else {
            num_pipe_ops.div_ceil(MAX_DEV_WORK_BATCH_COLLS)
        };
        Some(lat * lat_count as f32 + nbytes as f32 / (1000.0 * bw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvl_pattern(nchannels: usize, bw: f32) -> PatternInfo {
        PatternInfo {
            nchannels,
            bw_intra: bw,
            bw_inter: bw,
            type_intra: path::NVL,
            type_inter: path::PIX,
            latency_inter: 0.0,
            same_channels: true,
        }
    }

    fn hopper_node(nranks: usize) -> (ModelInput, GraphInfo) {
        let inp = ModelInput::gpu_cluster(nranks, 1, 90);
        let g = GraphInfo {
            tree: nvl_pattern(16, 20.0),
            ring: nvl_pattern(16, 20.0),
            collnet_direct: PatternInfo::NONE,
            collnet_chain: PatternInfo::NONE,
            nvls: PatternInfo::NONE,
            max_tree_pattern: PATTERN_BALANCED_TREE,
        };
        (inp, g)
    }

    /// Equal to the hand-computed value within rounding (the reference rounds to 0.1).
    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 0.05 + 1e-3 * b.abs()
    }

    /// The worked example of reference §3.4: one node, 8 Hopper GPUs, 16 ring
    /// channels of 20 GB/s over NVLink, AllReduce, Ring.
    #[test]
    fn reference_worked_example() {
        let (inp, g) = hopper_node(8);
        let mut c = TunerConstants::nccl_gpu();
        let m = tune_model(&inp, &g, &mut c, &EnableMatrix::default(), &ALL_RUNNABLE);
        let ar = F::AllReduce.index();
        let ring = A::Ring.index();
        // busBw: LL min(141, 160) = 141; LL128 min(294.4, 587.2); Simple 320; algBw = busBw × 8/14.
        let want_bw = [141.0 * 8.0 / 14.0, 294.4 * 8.0 / 14.0, 320.0 * 8.0 / 14.0];
        let want_lat = [15.0, 40.6, 56.0];
        for p in 0..3 {
            assert!(
                close(m.bandwidths[ar][ring][p], want_bw[p]),
                "bw[{p}] {}",
                m.bandwidths[ar][ring][p]
            );
            assert!(
                close(m.latencies[ar][ring][p], want_lat[p]),
                "lat[{p}] {}",
                m.latencies[ar][ring][p]
            );
        }
        let t = |p, n| m.algo_time(F::AllReduce, A::Ring, p, n, 1).unwrap();
        assert!(close(t(P::Ll, 1 << 20), 28.0), "{}", t(P::Ll, 1 << 20));
        assert!(close(t(P::Ll128, 1 << 20), 46.8), "{}", t(P::Ll128, 1 << 20));
        assert!(close(t(P::Simple, 1 << 20), 61.7), "{}", t(P::Simple, 1 << 20));
        assert!(close(t(P::Ll, 64 << 20), 848.0), "{}", t(P::Ll, 64 << 20));
        assert!(close(t(P::Ll128, 64 << 20), 439.5), "{}", t(P::Ll128, 64 << 20));
        assert!(close(t(P::Simple, 64 << 20), 423.0), "{}", t(P::Simple, 64 << 20));
    }

    /// Tree on the same node, hand-computed from §3.2: busBw = min(320 × 0.92,
    /// 16 × 38.7) = 294.4, then LL /3.8 capped at 141, LL128 × 7/9 capped at
    /// 16 × 36.7; algBw = × 0.5. Latency = base + 2 × 7 × intra (NVLink).
    #[test]
    fn tree_single_node_hand_computed() {
        let (inp, g) = hopper_node(8);
        let mut c = TunerConstants::nccl_gpu();
        let m = tune_model(&inp, &g, &mut c, &EnableMatrix::default(), &ALL_RUNNABLE);
        let (ar, tree) = (F::AllReduce.index(), A::Tree.index());
        let simple = 294.4f32 * 0.5;
        let ll = (294.4f32 / 3.8).min(141.0) * 0.5;
        let ll128 = (294.4f32 * 7.0 / 9.0).min(16.0 * 36.7) * 0.5;
        assert!(
            close(m.bandwidths[ar][tree][2], simple),
            "{}",
            m.bandwidths[ar][tree][2]
        );
        assert!(close(m.bandwidths[ar][tree][0], ll), "{}", m.bandwidths[ar][tree][0]);
        assert!(close(m.bandwidths[ar][tree][1], ll128), "{}", m.bandwidths[ar][tree][1]);
        assert!(close(m.latencies[ar][tree][0], 6.8 + 14.0 * 0.6));
        assert!(close(m.latencies[ar][tree][1], 14.0 + 14.0 * 1.25));
        assert!(close(m.latencies[ar][tree][2], 8.4 + 14.0 * 4.0));
        // Tree only exists for AllReduce; Broadcast only has Ring.
        assert_eq!(m.bandwidths[F::AllGather.index()][tree], [0.0; 3]);
        assert_eq!(m.bandwidths[F::Broadcast.index()][tree], [0.0; 3]);
        assert!(m.bandwidths[F::Broadcast.index()][A::Ring.index()][2] > 0.0);
        // Tree correction at 64 KiB (k = 10): Simple × 0.6.
        let t = m.algo_time(F::AllReduce, A::Tree, P::Simple, 64 << 10, 1).unwrap();
        let want = (8.4 + 56.0) + (65536.0 / (1000.0 * simple * 0.6));
        assert!(close(t, want), "{t} vs {want}");
        // Below 64 B no correction (k = -1).
        let t = m.algo_time(F::AllReduce, A::Tree, P::Simple, 32, 1).unwrap();
        assert!(close(t, 64.4 + 32.0 / (1000.0 * simple)), "{t}");
    }

    /// Multi-node: 4 nodes × 8 ranks, Ring AllReduce Simple over the net:
    /// nsteps = 62, nInter = 6, intraLat = max(NVLink 3.4, 3 × 1.0 net overhead),
    /// interLat = 14 + 2 × latencyInter; plateau × 1.4 above 64 B per channel-rank.
    #[test]
    fn multi_node_ring_latency_and_plateau() {
        let (mut inp, mut g) = hopper_node(32);
        inp.nnodes = 4;
        inp.max_local_ranks = 8;
        g.ring.bw_inter = 12.0;
        g.ring.latency_inter = 2.0;
        g.tree.latency_inter = 2.0;
        let mut c = TunerConstants::nccl_gpu();
        let m = tune_model(&inp, &g, &mut c, &EnableMatrix::default(), &ALL_RUNNABLE);
        let (ar, ring, s) = (F::AllReduce.index(), A::Ring.index(), P::Simple.index());
        let want = 8.4 + 56.0 * 3.4 + 6.0 * (14.0 + 4.0);
        assert!(
            close(m.latencies[ar][ring][s], want),
            "{} vs {want}",
            m.latencies[ar][ring][s]
        );
        // Bandwidth uses bwInter beyond 2 nodes: 16 × 12 × 32/62.
        assert!(close(m.bandwidths[ar][ring][s], 16.0 * 12.0 * 32.0 / 62.0));
        let small = m.algo_time(F::AllReduce, A::Ring, P::Simple, 1024, 1).unwrap();
        assert!(
            close(small, want + 1024.0 / (1000.0 * m.bandwidths[ar][ring][s])),
            "{small}"
        );
        let big = m.algo_time(F::AllReduce, A::Ring, P::Simple, 1 << 20, 1).unwrap();
        assert!(
            close(
                big,
                want * 1.4 + (1 << 20) as f32 / (1000.0 * m.bandwidths[ar][ring][s])
            ),
            "{big}"
        );
        // Tree: 2 × (7 × NVLink Tree lat + log2(4) × (NET Tree lat + 2 × 2.0)).
        let tl = m.latencies[ar][A::Tree.index()][s];
        let want_tree = 8.4 + 2.0 * (7.0 * 4.0 + 2.0 * (14.0 + 4.0));
        assert!(close(tl, want_tree), "{tl} vs {want_tree}");
        // NVLSTree is disabled only on one node; NVLS without channels stays 0.
        assert_eq!(m.bandwidths[ar][A::Nvls.index()][s], 0.0);
    }

    #[test]
    fn enable_matrix_and_runnable_zero_entries() {
        let (inp, g) = hopper_node(4);
        let mut c = TunerConstants::nccl_gpu();
        let e = EnableMatrix::parse(Some("allreduce:LL"), Some("allreduce:tree")).unwrap();
        let m = tune_model(&inp, &g, &mut c, &e, &ALL_RUNNABLE);
        let ar = F::AllReduce.index();
        assert!(m.bandwidths[ar][A::Tree.index()][0] > 0.0);
        assert_eq!(m.bandwidths[ar][A::Tree.index()][2], 0.0);
        assert_eq!(m.bandwidths[ar][A::Ring.index()], [0.0; 3]);
        // LL128 auto on Hopper over NVLink: enabled for other functions.
        assert!(m.bandwidths[F::AllGather.index()][A::Ring.index()][1] > 0.0);
        let mut run = ALL_RUNNABLE;
        run[F::AllGather.index()][A::Ring.index()][1] = false;
        let m = tune_model(&inp, &g, &mut c, &EnableMatrix::default(), &run);
        assert_eq!(m.bandwidths[F::AllGather.index()][A::Ring.index()][1], 0.0);
        // LL128 auto is off below sm70 (the CPU host has compcap 0).
        let mut cpu = inp.clone();
        cpu.min_compcap = 0;
        cpu.max_compcap = 0;
        let m = tune_model(&cpu, &g, &mut c, &EnableMatrix::default(), &ALL_RUNNABLE);
        assert_eq!(m.bandwidths[ar][A::Ring.index()][1], 0.0);
        assert!(m.bandwidths[ar][A::Ring.index()][0] > 0.0);
    }

    #[test]
    fn thread_counts_and_thresholds() {
        let (mut inp, g) = hopper_node(4);
        inp.params.nthreads = 100; // not a multiple of 32 -> max
        inp.params.thread_thresholds = Some("1 -1 3 x 5".into());
        let mut c = TunerConstants::nccl_gpu();
        let m = tune_model(&inp, &g, &mut c, &EnableMatrix::default(), &ALL_RUNNABLE);
        assert_eq!(m.max_threads[A::Ring.index()][2], 512);
        assert!(m.notes.iter().any(|n| n.contains("multiple of 32")));
        assert_eq!(m.thread_thresholds[A::Tree.index()], [1, 8, 3]);
        assert_eq!(m.thread_thresholds[A::Ring.index()], [32, 8, 64]);
        assert_eq!(m.max_threads[A::Ring.index()][1], 640);
    }

    #[test]
    fn log2i_matches_nccl() {
        assert_eq!(log2i(0), -1);
        assert_eq!(log2i(1), 0);
        assert_eq!(log2i(3), 1);
        assert_eq!(log2i(1 << 40), 40);
    }
}
