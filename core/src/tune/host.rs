//! The model's inputs on a CPU-only host, filled from what the runtime knows
//! until the topology search supplies real graphs: ranks and nodes (host hashes
//! from the peer-info exchange), channels, and the net plugin's device
//! properties (speed, latency). Where the GPU model's inputs have no meaning on
//! a host (compute capability, NVLink, NVSwitch, CollNet, NVLS, PAT) they are
//! set so those parts of the model are off; `BENCHMARKS.md` ("Tuning: the
//! CPU-host constants") gives the measurements behind the numbers used instead.

use super::constants::HOST_MAX_BW;
use super::model::{
    CpuArch, CpuVendor, GraphInfo, ModelInput, ModelParams, PATTERN_BALANCED_TREE, PatternInfo, Runnable, path,
};
use crate::coll::ids::{Algorithm as A, Func as F, Protocol as P};

/// What a communicator on a host knows when it tunes.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFacts {
    /// Ranks.
    pub nranks: usize,
    /// Distinct hosts among the ranks.
    pub nnodes: usize,
    /// Ranks on the host with the fewest.
    pub min_local_ranks: usize,
    /// Ranks on the host with the most.
    pub max_local_ranks: usize,
    /// Ranks on this rank's host.
    pub local_ranks: usize,
    /// Channels the communicator opened.
    pub nchannels: usize,
    /// The net plugin's speed for the device in use, Mbps (`ncclNetProperties.speed`;
    /// ≤ 0 = NCCL's default 10 000).
    pub net_speed_mbps: i32,
    /// The net plugin's latency for the device, µs (`ncclNetProperties.latency`).
    pub net_latency_us: f32,
    /// CPU cores on the host with the fewest (every rank must see the same facts).
    pub cores: usize,
}

impl HostFacts {
    /// How far the busiest host is oversubscribed: each rank keeps two threads
    /// busy (the caller's and the proxy), so `2 × ranks / cores`, at least 1. A
    /// hop between two ranks then waits for the receiver to be scheduled; the
    /// host's per-hop latencies are multiplied by this (`BENCHMARKS.md`, "Tuning:
    /// the CPU-host constants").
    pub fn oversubscription(&self) -> f64 {
        (2.0 * self.max_local_ranks as f64 / self.cores.max(1) as f64).max(1.0)
    }
}

/// NCCL's NET bandwidth of a device (`ncclTopoAddNet`): `speed / 8000` GB/s,
/// 10 000 Mbps when the plugin reports none.
pub fn net_bw(speed_mbps: i32) -> f32 {
    let s = if speed_mbps <= 0 { 10_000 } else { speed_mbps };
    s as f32 / 8000.0
}

/// The graphs of a host communicator: ring and tree over every channel, each
/// channel carrying an equal share of the device's bandwidth (NCCL's search
/// spreads the NIC over its channels the same way). No NVLS or PAT graph; the
/// CollNet chain is added by [`with_collnet`] once CollNet is connected.
pub fn graph_info(h: &HostFacts) -> GraphInfo {
    let nch = h.nchannels.max(1);
    let bw = net_bw(h.net_speed_mbps) / nch as f32;
    let ring = PatternInfo {
        nchannels: nch,
        bw_intra: bw,
        bw_inter: bw,
        // Everything moves through the net plugin: the intra-host path is "PCI"
        // for the latency tables (not NVLink), the inter-host path the network.
        type_intra: path::PHB,
        type_inter: path::NET,
        latency_inter: h.net_latency_us.max(0.0),
        same_channels: true,
    };
    // The tree's per-channel bandwidth relative to the ring's, measured (see
    // HOST_TREE_BW_RATIO).
    let tree = PatternInfo {
        bw_intra: bw * HOST_TREE_BW_RATIO,
        bw_inter: bw * HOST_TREE_BW_RATIO,
        ..ring
    };
    GraphInfo {
        tree,
        ring,
        collnet_direct: PatternInfo::NONE,
        collnet_chain: PatternInfo::NONE,
        nvls: PatternInfo::NONE,
        max_tree_pattern: PATTERN_BALANCED_TREE,
    }
}

/// The communicator facts of a host: no GPU (compute capability 0, so LL128's
/// automatic enable and PAT are off), no NVSwitch, no CollNet (until
/// [`with_collnet`]), an x86 or other CPU.
pub fn model_input(h: &HostFacts, params: ModelParams) -> ModelInput {
    ModelInput {
        nranks: h.nranks,
        nnodes: h.nnodes.max(1),
        nchannels: h.nchannels.max(1),
        min_compcap: 0,
        max_compcap: 0,
        cpu_arch: if cfg!(target_arch = "x86_64") {
            CpuArch::X86
        } else {
            CpuArch::Other
        },
        cpu_vendor: CpuVendor::Other,
        collnet_enable: false,
        collnet_chain_support: false,
        nvs_count: 0,
        collnet_iallgather: false,
        collnet_ireducescatter: false,
        collnet_heads: 0,
        max_local_ranks: h.max_local_ranks,
        net_device_host: true,
        cudart_version: 0,
        params,
    }
}

/// What the host's schedule builder can run: Ring for every function, Tree for
/// AllReduce, with the protocols in `protocols` (today Simple only).
pub fn runnable(protocols: &[P]) -> Runnable {
    let mut r = [[[false; 3]; 7]; 5];
    for f in F::ALL {
        for &p in protocols {
            r[f.index()][A::Ring.index()][p.index()] = true;
            if f == F::AllReduce {
                r[f.index()][A::Tree.index()][p.index()] = true;
            }
        }
    }
    r
}

/// The CollNet patterns' per-channel bandwidth on a host relative to the
/// ring's (tree's). NCCL's model charges a CollNet AllReduce twice the buffer
/// at the pattern's bandwidth (its bus-to-algorithm ratio 0.5: up, then down),
/// while it charges the ring 2(n-1)/n of the buffer with sends and receives
/// overlapped. On a host both CollNet halves run at once as well (the reduce
/// and broadcast roles are concurrent streams, and the plugin's sockets carry
/// the heads' data up and the result down in opposite directions), so, to
/// price both patterns alike, the CollNet patterns get twice the ring's
/// per-channel bandwidth: a host then sends its buffer once each way, as it
/// does. The measurement that showed NCCL's ratio wrong here (Ring picked at
/// 1 and 16 MiB where CollNetChain and CollNetDirect were faster on 2 hosts x
/// 2 ranks) is in `BENCHMARKS.md` §13.1.
pub const HOST_COLLNET_DUPLEX: f32 = 2.0;

/// What CollNet gives the host's schedule, once every channel's collComms are
/// connected (NCCL's `collNetSupport` with `comm->collNetHeadsNum` and the
/// plugin's `iallgather` / `ireducescatter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CollNetGates {
    /// CollNetDirect heads per host and channel (from the CollNetDirect graph
    /// search, [`crate::graph::collnet::direct_nheads`]); `None`: CollNetDirect
    /// cannot run (a host has more ranks than it serves).
    pub direct_heads: Option<usize>,
    /// `(AllGather, ReduceScatter)` runnable over CollNet (`coll::collnet_agrs`).
    pub sge: (bool, bool),
}

/// Adds what CollNet runs to the host's runnable set and model, all from one
/// set of gates (NCCL's `ncclTopoTuneModel` inputs `collNetSupport`,
/// `collNetChainSupport`, `collNetHeadsNum`, `nvsCount`):
///
/// - CollNetChain for AllReduce (Simple): chain support and the chain's pattern
///   is the tree's (the same hops: up a chain, across the network, down again;
///   the network part is the plugin's), at [`HOST_COLLNET_DUPLEX`] times its
///   per-channel bandwidth.
/// - CollNetDirect for AllReduce (Simple) with `direct_heads` heads per host and
///   channel (`comm->collNetHeadsNum`). NCCL runs CollNetDirect only where an
///   NVSwitch joins every pair of local GPUs (`ncclTopoTuneModel` disables it
///   with `nvsCount == 0`): on a host, shared memory joins every pair of local
///   ranks alike, so the model is told of one. The pattern is the ring's
///   per-channel bandwidth times [`HOST_COLLNET_DUPLEX`] over channels x heads:
///   every channel has that many heads, each with its own collComm, as many
///   network streams as NCCL's CollNetDirect has with that many graph channels
///   of one head each, so the pattern counts channels x heads, which NCCL's
///   bandwidth formula then divides by its ppn/nChannels factor (measured in
///   `BENCHMARKS.md` §13.1).
/// - CollNetDirect for AllGather / ReduceScatter (Simple) where `sge` says so:
///   the plugin's calls (`collnet_iallgather` / `_ireducescatter`); NCCL's model
///   then requires every host's rank count to be at most the heads
///   (`collNetHeadsNum`), which the heads themselves decide: the head count is
///   the AllReduce's, never raised for these. Where CollNetDirect AllReduce
///   cannot run, their pattern is the chain's (the tree's).
pub fn with_collnet(r: &mut Runnable, inp: &mut ModelInput, g: &mut GraphInfo, gates: CollNetGates) {
    let ar = F::AllReduce.index();
    let simple = P::Simple.index();
    r[ar][A::CollNetChain.index()][simple] = true;
    inp.collnet_enable = true;
    inp.collnet_chain_support = true;
    g.collnet_chain = PatternInfo {
        bw_intra: g.tree.bw_intra * HOST_COLLNET_DUPLEX,
        bw_inter: g.tree.bw_inter * HOST_COLLNET_DUPLEX,
        ..g.tree
    };
    let (ag, rs) = gates.sge;
    if gates.direct_heads.is_some() || ag || rs {
        inp.nvs_count = inp.nvs_count.max(1);
    }
    if let Some(nheads) = gates.direct_heads {
        r[ar][A::CollNetDirect.index()][simple] = true;
        inp.collnet_heads = nheads;
        g.collnet_direct = PatternInfo {
            nchannels: g.ring.nchannels * nheads.max(1),
            bw_intra: g.ring.bw_intra * HOST_COLLNET_DUPLEX,
            bw_inter: g.ring.bw_inter * HOST_COLLNET_DUPLEX,
            ..g.ring
        };
    } else if ag || rs {
        g.collnet_direct = g.tree;
    }
    for (f, on) in [(F::AllGather, ag), (F::ReduceScatter, rs)] {
        if on {
            r[f.index()][A::CollNetDirect.index()][simple] = true;
        }
    }
    inp.collnet_iallgather = ag;
    inp.collnet_ireducescatter = rs;
}

/// The host's per-channel bandwidth ceiling (see [`HOST_MAX_BW`]).
pub const MAX_BW: f64 = HOST_MAX_BW;

/// The host tree pattern's per-channel bandwidth relative to the ring's: on a
/// host every rank of a chain moves the whole buffer up and down once, like a
/// ring rank moves it twice in parts, and both run on the same CPU thread, so the
/// two patterns move bytes at about the same rate; NCCL's GPU model then derates
/// the tree (0.92 × 0.5 against the ring's n/2(n-1), plus its correction
/// factors). Measured in `BENCHMARKS.md` ("Tuning: the CPU-host constants").
pub const HOST_TREE_BW_RATIO: f32 = 1.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_from_plugin_speed() {
        let h = HostFacts {
            nranks: 4,
            nnodes: 2,
            min_local_ranks: 2,
            max_local_ranks: 2,
            local_ranks: 2,
            nchannels: 2,
            net_speed_mbps: 0,
            net_latency_us: 3.0,
            cores: 2,
        };
        let g = graph_info(&h);
        assert_eq!(g.ring.nchannels, 2);
        assert!((g.ring.bw_inter - 1.25 / 2.0).abs() < 1e-6);
        assert_eq!(g.ring.latency_inter, 3.0);
        assert_eq!(g.nvls.nchannels, 0);
        assert_eq!(h.oversubscription(), 2.0);
        let r = runnable(&[P::Simple]);
        assert!(r[F::AllReduce.index()][A::Tree.index()][P::Simple.index()]);
        assert!(!r[F::AllGather.index()][A::Tree.index()][P::Simple.index()]);
        assert!(!r[F::AllReduce.index()][A::Ring.index()][P::Ll.index()]);
    }
}
