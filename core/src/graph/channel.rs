//! One channel as a rank sees it: its ring and its links in the channel's
//! tree (NCCL's `struct ncclChannel`, `struct ncclRing`, `struct ncclTree`,
//! `src/include/device.h`).

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
