//! Rings and trees over the ranks (NCCL's `src/graph/`): the per-channel
//! communication pattern every collective schedule follows.
//!
//! A [`Channel`] is this rank's view of one channel, as NCCL's `struct
//! ncclChannel` (`src/include/device.h`) holds it: the ring (`ring.prev`,
//! `ring.next`, `ring.userRanks`) and the tree (`tree.up`, `tree.down[3]`).
//! Today the channels come from [`rank_order_channels`] (one ring in rank order
//! on every channel); the topology-aware search replaces that source, not the
//! types.

pub mod connect;
pub mod graph_xml;
pub mod plan;
pub mod report;
pub mod search;
pub mod trees;

pub use connect::{CommGraph, GraphInfo, LogLine};
pub use plan::{CommTopology, P2pNet, TopoPlan, plan};
pub use search::TopoGraph;

/// Most children a tree node has (`NCCL_MAX_TREE_ARITY` in `src/include/device.h`).
pub const MAX_TREE_ARITY: usize = 3;

/// A ring: `ranks[i]` is the rank at ring position `i`; data flows from
/// position `i` to `i + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    /// Ranks in ring order (every rank of the communicator exactly once).
    pub ranks: Vec<usize>,
}

impl Ring {
    /// The ring `0 → 1 → … → nranks-1 → 0`.
    pub fn rank_order(nranks: usize) -> Ring {
        Ring {
            ranks: (0..nranks).collect(),
        }
    }

    /// Ring position of `rank` (`None` when the rank is not in the ring).
    pub fn index(&self, rank: usize) -> Option<usize> {
        self.ranks.iter().position(|&r| r == rank)
    }

    /// The rank at ring position `i` (taken modulo the ring length).
    pub fn at(&self, i: usize) -> usize {
        self.ranks[i % self.ranks.len()]
    }

    /// The rank `rank` sends to. Panics when `rank` is not in the ring.
    pub fn next(&self, rank: usize) -> usize {
        let i = self.index(rank).expect("rank in ring");
        self.at(i + 1)
    }

    /// The rank `rank` receives from. Panics when `rank` is not in the ring.
    pub fn prev(&self, rank: usize) -> usize {
        let n = self.ranks.len();
        let i = self.index(rank).expect("rank in ring");
        self.at(i + n - 1)
    }
}

/// One rank's links in a tree (`struct ncclTree`: `up`, `down[NCCL_MAX_TREE_ARITY]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeLinks {
    /// Parent rank (`None` at the root; NCCL's `-1`).
    pub up: Option<usize>,
    /// Child ranks, at most [`MAX_TREE_ARITY`].
    pub down: Vec<usize>,
}

/// This rank's view of one channel: its ring and its tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    /// Channel index (`channel->id`).
    pub id: usize,
    /// The channel's ring (the same ring object on every rank).
    pub ring: Ring,
    /// This rank's links in the channel's tree.
    pub tree: TreeLinks,
    /// Net plugin device this rank uses for the channel's network connections
    /// (`None`: let the transport choose).
    pub net_dev: Option<usize>,
}

impl Channel {
    /// Ring predecessor of `rank` on this channel.
    pub fn ring_prev(&self, rank: usize) -> usize {
        self.ring.prev(rank)
    }

    /// Ring successor of `rank` on this channel.
    pub fn ring_next(&self, rank: usize) -> usize {
        self.ring.next(rank)
    }
}

/// `nchannels` channels for `rank` of `nranks`, each with the ring in rank order
/// and a chain as its tree (`up` = rank - 1, `down` = rank + 1): the pattern used
/// until the topology search supplies channels.
pub fn rank_order_channels(rank: usize, nranks: usize, nchannels: usize) -> Vec<Channel> {
    (0..nchannels)
        .map(|id| Channel {
            id,
            ring: Ring::rank_order(nranks),
            tree: TreeLinks {
                up: rank.checked_sub(1),
                down: if rank + 1 < nranks { vec![rank + 1] } else { Vec::new() },
            },
            net_dev: None,
        })
        .collect()
}
