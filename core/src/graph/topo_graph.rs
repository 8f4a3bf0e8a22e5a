//! A communication graph as NCCL 2.30.7 describes one (`struct ncclTopoGraph`,
//! `src/include/graph.h`): its search pattern, channel bounds, the GPUs of
//! each channel in visiting order and the NICs it enters and leaves by; the
//! result of the search (`search`) or of a graph file (`graph_xml`).

use crate::topo::types::*;

/// `NCCL_TOPO_PATTERN_BALANCED_TREE`: NIC traffic split between GPU 0 and GPU 1.
pub const PATTERN_BALANCED_TREE: i32 = 1;
/// `NCCL_TOPO_PATTERN_SPLIT_TREE`: parent on GPU 0, both children on GPU 1.
pub const PATTERN_SPLIT_TREE: i32 = 2;
/// `NCCL_TOPO_PATTERN_TREE`: all NIC traffic on GPU 0.
pub const PATTERN_TREE: i32 = 3;
/// `NCCL_TOPO_PATTERN_RING`.
pub const PATTERN_RING: i32 = 4;
/// `NCCL_TOPO_PATTERN_NVLS`.
pub const PATTERN_NVLS: i32 = 5;
/// `NCCL_TOPO_PATTERN_COLLNET_DIRECT`: one head GPU per channel, the other GPUs after it.
pub const PATTERN_COLLNET_DIRECT: i32 = 6;

/// Name of a pattern, for humans.
pub fn pattern_name(p: i32) -> &'static str {
    match p {
        PATTERN_BALANCED_TREE => "BALANCED_TREE",
        PATTERN_SPLIT_TREE => "SPLIT_TREE",
        PATTERN_TREE => "TREE",
        PATTERN_RING => "RING",
        PATTERN_NVLS => "NVLS",
        PATTERN_COLLNET_DIRECT => "COLLNET_DIRECT",
        _ => "?",
    }
}

/// A communication graph (`struct ncclTopoGraph`): per channel, the GPUs (ranks) in visiting
/// order and, with a network, the NET ids the channel enters and leaves by.
#[derive(Debug, Clone, PartialEq)]
pub struct TopoGraph {
    /// 0 ring, 1 tree, 2 collnet chain, 3 NVLS, 4 collnet direct.
    pub id: i32,
    /// `NCCL_TOPO_PATTERN_*`.
    pub pattern: i32,
    /// 0, 1 or 2 (alternating NICs).
    pub cross_nic: i32,
    /// Only NICs with CollNet support.
    pub coll_net: bool,
    /// Fewest channels accepted.
    pub min_channels: usize,
    /// Most channels searched.
    pub max_channels: usize,
    /// Channels found.
    pub n_channels: usize,
    /// Per-channel bandwidth reserved inside the node, GB/s.
    pub bw_intra: f32,
    /// Per-channel bandwidth reserved to the NIC, GB/s.
    pub bw_inter: f32,
    /// Latency of the chosen start NIC, µs.
    pub latency_inter: f32,
    /// Widest path type used inside the node.
    pub type_intra: PathType,
    /// Widest GPU↔NIC path type used.
    pub type_inter: PathType,
    /// Every channel replays the first channel's order.
    pub same_channels: bool,
    /// Total hops (tie-breaker).
    pub n_hops: i32,
    /// GPUs per channel (the system's GPU count, fixed for the search).
    pub ngpus: usize,
    /// `intra[c * ngpus + i]`: rank at position `i` of channel `c`.
    pub intra: Vec<i32>,
    /// `inter[c * 2]`, `inter[c * 2 + 1]`: NET ids in and out of channel `c`.
    pub inter: Vec<i64>,
}

impl TopoGraph {
    /// A graph to search (`memset` then id, pattern, channel bounds).
    pub fn new(id: i32, pattern: i32, min_channels: usize, max_channels: usize, ngpus: usize) -> TopoGraph {
        TopoGraph {
            id,
            pattern,
            cross_nic: 0,
            coll_net: false,
            min_channels,
            max_channels,
            n_channels: 0,
            bw_intra: 0.0,
            bw_inter: 0.0,
            latency_inter: 0.0,
            type_intra: PathType::Loc,
            type_inter: PathType::Loc,
            same_channels: false,
            n_hops: 0,
            ngpus,
            intra: vec![0; MAXCHANNELS * ngpus.max(1)],
            inter: vec![0; MAXCHANNELS * 2],
        }
    }

    /// Ranks of channel `c`, in order.
    pub fn channel(&self, c: usize) -> &[i32] {
        &self.intra[c * self.ngpus..(c + 1) * self.ngpus]
    }

    /// NET ids (in, out) of channel `c`.
    pub fn nets(&self, c: usize) -> (i64, i64) {
        (self.inter[c * 2], self.inter[c * 2 + 1])
    }
}
