//! The CollNetChain pattern (NCCL's `collnetChain` of `struct ncclChannel`,
//! `src/include/device.h`; used by `src/device/all_reduce.h`'s CollNetChain
//! AllReduce): on every channel the ranks of each host form a chain whose
//! first rank, the head, is the host's member of the channel's collComm. Data
//! is reduced up the chain to the head, reduced across hosts by the CollNet
//! plugin (the network: peer `nranks`, as NCCL numbers it), and broadcast back
//! down the chain.
//!
//! NCCL searches a `collNetChain` graph for the chain order; ferroccl's ranks
//! bind no GPU and every rank of a host reaches the NIC alike, so the chain is
//! the host's ranks in rank order, rotated by the channel index: each channel
//! has a different head where a host has several ranks, spreading the heads'
//! network work as NCCL's graph spreads channels over NICs.

/// This rank's place in one channel's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainPos {
    /// Where partial results go: the previous rank of the chain, or `nranks`
    /// (the CollNet network) at the head.
    pub up: usize,
    /// The next rank of the chain (`None` at its tail).
    pub down: Option<usize>,
}

impl ChainPos {
    /// Whether this rank is its host's head on the channel.
    pub fn is_head(&self, nranks: usize) -> bool {
        self.up == nranks
    }
}

/// The chain of the host of `rank` on `channel`: its ranks, head first.
/// `hosts[r]` is rank `r`'s host identity (its host hash).
pub fn chain(hosts: &[u64], rank: usize, channel: usize) -> Vec<usize> {
    let mine: Vec<usize> = (0..hosts.len()).filter(|&r| hosts[r] == hosts[rank]).collect();
    let k = mine.len().max(1);
    (0..mine.len()).map(|i| mine[(i + channel) % k]).collect()
}

/// `rank`'s place on `channel` (see [`chain`]).
pub fn position(hosts: &[u64], rank: usize, channel: usize) -> ChainPos {
    let c = chain(hosts, rank, channel);
    let i = c.iter().position(|&r| r == rank).unwrap_or(0);
    ChainPos {
        up: if i == 0 { hosts.len() } else { c[i - 1] },
        down: c.get(i + 1).copied(),
    }
}

/// The heads of `channel`, one per host, in rank order: the members of the
/// channel's collComm, in the order their handles are passed to `connect`.
pub fn heads(hosts: &[u64], channel: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for r in 0..hosts.len() {
        if position(hosts, r, channel).is_head(hosts.len()) {
            out.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_rotate_per_channel_and_heads_are_one_per_host() {
        // Ranks 0, 2, 4 on host A; 1, 3 on host B.
        let hosts = [7, 9, 7, 9, 7];
        assert_eq!(chain(&hosts, 2, 0), vec![0, 2, 4]);
        assert_eq!(chain(&hosts, 2, 1), vec![2, 4, 0]);
        assert_eq!(chain(&hosts, 3, 1), vec![3, 1]);
        assert_eq!(heads(&hosts, 0), vec![0, 1]);
        assert_eq!(heads(&hosts, 1), vec![2, 3]);
        assert_eq!(position(&hosts, 0, 0), ChainPos { up: 5, down: Some(2) });
        assert_eq!(position(&hosts, 2, 0), ChainPos { up: 0, down: Some(4) });
        assert_eq!(position(&hosts, 4, 0), ChainPos { up: 2, down: None });
        assert_eq!(position(&hosts, 1, 1), ChainPos { up: 3, down: None });
        // One rank per host: every rank is a head with nobody below.
        let one = [1, 2, 3];
        for r in 0..3 {
            assert_eq!(position(&one, r, 4), ChainPos { up: 3, down: None });
        }
        assert_eq!(heads(&one, 0), vec![0, 1, 2]);
    }
}
