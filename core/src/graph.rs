//! Rings over the ranks (NCCL's `src/graph/`). For now one ring in rank order,
//! used by every channel; the topology-aware search comes later.

/// A ring: `ranks[i]` is the rank at ring position `i`; data flows from
/// position `i` to `i + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    /// Ranks in ring order.
    pub ranks: Vec<usize>,
}

impl Ring {
    /// The ring `0 → 1 → … → nranks-1 → 0`.
    pub fn rank_order(nranks: usize) -> Ring {
        Ring {
            ranks: (0..nranks).collect(),
        }
    }

    fn pos(&self, rank: usize) -> usize {
        self.ranks.iter().position(|&r| r == rank).expect("rank in ring")
    }

    /// The rank `rank` sends to.
    pub fn next(&self, rank: usize) -> usize {
        self.ranks[(self.pos(rank) + 1) % self.ranks.len()]
    }

    /// The rank `rank` receives from.
    pub fn prev(&self, rank: usize) -> usize {
        let n = self.ranks.len();
        self.ranks[(self.pos(rank) + n - 1) % n]
    }
}
