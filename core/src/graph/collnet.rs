//! The CollNetChain pattern (NCCL's `collnetChain` of `struct ncclChannel`,
//! `src/include/device.h`; used by `src/device/all_reduce.h`'s CollNetChain
//! AllReduce): on every channel the ranks of each host form a chain whose
//! first rank, the head, is the host's member of the channel's collComm. Data
//! is reduced up the chain to the head, reduced across hosts by the CollNet
//! plugin (the network: peer `nranks`, as NCCL numbers it), and broadcast back
//! down the chain.
//!
//! NCCL searches a `collNetChain` graph for the chain order. Where a host's
//! NICs serve CollNet (`coll="1"`: ranks bound to a GPU mark them at comm
//! init) the order follows the host's searched CollNetDirect graph
//! ([`host_order`]); elsewhere (CPU-process ranks, all of which reach the NIC
//! alike) the chain is the host's ranks in rank order, rotated by the channel
//! index ([`chain`], the layout rule): each channel has a different head where a
//! host has several ranks, spreading the heads' network work as NCCL's graph
//! spreads channels over NICs.

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
    position_in(hosts, &[], rank, channel, 1)
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

/// NCCL's `NCCL_MAX_DIRECT_ARITY` (`src/include/device.h`): a CollNetDirect head
/// reduces the data of at most this many other local ranks, so a host has at
/// most this many + 1 heads and CollNetDirect runs only where no host has more
/// local ranks than that.
pub const MAX_DIRECT_ARITY: usize = 7;

/// The number of CollNetDirect heads per host and channel (NCCL's
/// `comm->collNetHeadsNum`, `src/init.cc` `ncclCollNetSetup`; `nHeads` of
/// `src/graph/connect.cc` `connectCollNet`), the one value the connection setup
/// (`comm::collnet`), the schedule and the tuning model use.
///
/// `searched` is what the CollNetDirect graph search found (the fewest distinct
/// heads over hosts, [`super::CommGraph::collnet_heads`]): where it found any
/// (hosts whose NICs the CollNet plugin serves, `coll="1"`), the heads are the
/// searched ones, at most the smallest host's rank count. Where it found none
/// (CPU-process ranks, whose NIC carries no CollNet mark and which all reach the
/// plugin alike, the role one NIC per GPU plays in NCCL's search), every rank of
/// the smallest host is a head. At most [`MAX_DIRECT_ARITY`] + 1 either way, and
/// `None` (CollNetDirect cannot run) where a host has more ranks than that, as
/// NCCL refuses it in `src/init.cc`: every host has the same number of heads
/// (head `h` of every host joins the channel's `h`-th collComm).
pub fn direct_nheads(searched: usize, min_local: usize, max_local: usize) -> Option<usize> {
    if max_local > MAX_DIRECT_ARITY + 1 {
        return None;
    }
    let n = if searched > 0 {
        searched.min(min_local)
    } else {
        min_local
    };
    Some(n.clamp(1, MAX_DIRECT_ARITY + 1))
}

/// The CollNet heads of a searched CollNetDirect graph (`ncclCollNetSetup`,
/// `src/init.cc`): the first rank of every channel (`intra[c * localRanks]`), each
/// once, in channel order. Empty when the graph has no channels.
pub fn searched_heads(g: &super::TopoGraph) -> Vec<i32> {
    let mut out: Vec<i32> = Vec::new();
    for c in 0..g.n_channels {
        let head = g.channel(c)[0];
        if !out.contains(&head) {
            out.push(head);
        }
    }
    out
}

/// Whether the CollNetChain graph's heads (the first rank of each of its channels)
/// are all CollNet heads (`isCollNetChainHeadsSubset`, `src/init.cc`: CollNetChain
/// can only use heads that have CollNet resources). False when either graph is empty.
pub fn chain_heads_subset(chain: &super::TopoGraph, heads: &[i32]) -> bool {
    chain.n_channels > 0 && !heads.is_empty() && (0..chain.n_channels).all(|c| heads.contains(&chain.channel(c)[0]))
}

/// This rank's place in one channel's CollNetDirect pattern (NCCL's
/// `struct ncclDirect` `collnetDirect` of a channel, filled by
/// `src/graph/connect.cc` `connectCollNet`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectPos {
    /// The heads of this rank's host, head index order (`heads[h]` reduces
    /// part `h` of every loop step and is its host's member of the channel's
    /// `h`-th collComm).
    pub heads: Vec<usize>,
    /// This rank's head index (`headRank`), `None` when it is no head.
    pub head_rank: Option<usize>,
    /// The other ranks of the host (`down`): a head receives their parts and
    /// sends the result back to them. Empty for a rank that is no head.
    pub down: Vec<usize>,
    /// Where this rank starts its scatter and gather among the heads (`shift`,
    /// NCCL's `(rank % localRanks) % nHeads`: the local index here), so the
    /// ranks of a host do not all send to the same head first.
    pub shift: usize,
}

impl DirectPos {
    /// NCCL's INFO line for this position (`connectCollNet`: `CollNetDirect
    /// channel c rank r down ... nDown n up ... nUp n nHeads n headRank h out o shift s`).
    pub fn info_line(&self, channel: usize, rank: usize, nranks: usize) -> String {
        let mut l = format!("CollNetDirect channel {channel} rank {rank} ");
        if self.head_rank.is_some() {
            l.push_str("down ");
            for d in &self.down {
                l.push_str(&format!(" {d} "));
            }
            l.push_str(&format!("nDown {} ", self.down.len()));
        }
        l.push_str("up ");
        let up: Vec<usize> = self.heads.iter().copied().filter(|&h| h != rank).collect();
        for u in &up {
            l.push_str(&format!(" {u} "));
        }
        l.push_str(&format!(
            "nUp {} nHeads {} headRank {} out {} shift {}",
            up.len(),
            self.heads.len(),
            self.head_rank.map_or(-1, |h| h as i64),
            if self.head_rank.is_some() { nranks as i64 } else { -1 },
            self.shift
        ));
        l
    }
}

/// The first rank of every channel of a searched CollNetDirect graph
/// (`intra[c * localRanks]`, NCCL's `ncclCollNetSetup` / `connectCollNet`), in
/// channel order, repeats kept: what [`host_order`] reads. Empty when the graph
/// has no channels.
pub fn channel_firsts(g: &super::TopoGraph) -> Vec<usize> {
    (0..g.n_channels)
        .filter_map(|c| usize::try_from(g.channel(c)[0]).ok())
        .collect()
}

/// The ranks of `rank`'s host on `channel`, heads first: the order that decides
/// the channel's CollNetChain head and CollNetDirect heads.
///
/// `firsts[r]` is [`channel_firsts`] of rank `r`'s host's searched CollNetDirect
/// graph (global ranks). Where it is empty for `rank` (nothing searched: CPU-process
/// ranks, whose NICs carry no `coll="1"`), this is the layout rule [`chain`]. Where
/// the host has a searched graph, its heads are NCCL's: the distinct firsts in
/// graph channel order (`connectCollNet`'s `heads[]`), of which the first
/// `nheads` ([`direct_nheads`], the same on every host) are used. Channel `c`'s
/// first head is the searched graph's channel `c mod nChannels` first rank (its
/// `intra[c * localRanks]`; when that rank is beyond the `nheads` kept, head
/// `c mod nheads`), the other kept heads follow it in NCCL's order, wrapping
/// round, then the host's other ranks in rank order. So head `h` on channel `c`
/// is a deterministic function of the host's own graph, every host has
/// `nheads` heads, and head `h` of every host joins the channel's `h`-th collComm.
/// NCCL keeps each head's index fixed over channels (`headRank = i`); ferroccl
/// rotates it so that head 0, the CollNetChain head sharing its collComm, follows
/// the graph's channel first GPU.
pub fn host_order(hosts: &[u64], firsts: &[Vec<usize>], rank: usize, channel: usize, nheads: usize) -> Vec<usize> {
    let f = match firsts.get(rank) {
        Some(f) if !f.is_empty() => f,
        _ => return chain(hosts, rank, channel),
    };
    let mine: Vec<usize> = (0..hosts.len()).filter(|&r| hosts[r] == hosts[rank]).collect();
    let mut heads: Vec<usize> = Vec::new();
    for &h in f {
        if mine.contains(&h) && !heads.contains(&h) {
            heads.push(h);
        }
    }
    heads.truncate(nheads.max(1));
    if heads.is_empty() {
        return chain(hosts, rank, channel);
    }
    let n = heads.len();
    let first = f[channel % f.len()];
    let i0 = heads.iter().position(|&h| h == first).unwrap_or(channel % n);
    let mut out: Vec<usize> = (0..n).map(|j| heads[(i0 + j) % n]).collect();
    out.extend(mine.iter().copied().filter(|r| !heads.contains(r)));
    out
}

/// [`position`] in the order of [`host_order`]: the CollNetChain place of
/// `rank` on `channel`, its head being CollNetDirect head 0.
pub fn position_in(hosts: &[u64], firsts: &[Vec<usize>], rank: usize, channel: usize, nheads: usize) -> ChainPos {
    let c = host_order(hosts, firsts, rank, channel, nheads);
    let i = c.iter().position(|&r| r == rank).unwrap_or(0);
    ChainPos {
        up: if i == 0 { hosts.len() } else { c[i - 1] },
        down: c.get(i + 1).copied(),
    }
}

/// `rank`'s CollNetDirect place on `channel` with `nheads` heads per host
/// ([`direct_nheads`]). The heads of a host are the first `nheads` ranks of its
/// order on the channel ([`host_order`]: the searched CollNetDirect graph's heads
/// where `firsts` has them, else the layout rule, the host's ranks rotated by the
/// channel index), so head 0 is the CollNetChain head and its collComm serves
/// both algorithms.
pub fn direct_position(hosts: &[u64], firsts: &[Vec<usize>], rank: usize, channel: usize, nheads: usize) -> DirectPos {
    let c = host_order(hosts, firsts, rank, channel, nheads);
    let heads: Vec<usize> = c.iter().copied().take(nheads.max(1)).collect();
    let head_rank = heads.iter().position(|&h| h == rank);
    let down = if head_rank.is_some() {
        let mut d: Vec<usize> = c.iter().copied().filter(|&r| r != rank).collect();
        d.sort_unstable();
        d
    } else {
        Vec::new()
    };
    let local: Vec<usize> = (0..hosts.len()).filter(|&r| hosts[r] == hosts[rank]).collect();
    let idx = local.iter().position(|&r| r == rank).unwrap_or(0);
    DirectPos {
        shift: idx % heads.len().max(1),
        heads,
        head_rank,
        down,
    }
}

/// The members of `channel`'s `h`-th collComm: head `h` of every host, in rank
/// order (the order their handles are passed to `connect`). With `h = 0` and no
/// searched heads (`firsts` empty) these are the CollNetChain heads ([`heads`]).
pub fn direct_members(hosts: &[u64], firsts: &[Vec<usize>], channel: usize, h: usize, nheads: usize) -> Vec<usize> {
    (0..hosts.len())
        .filter(|&r| direct_position(hosts, firsts, r, channel, nheads).head_rank == Some(h))
        .collect()
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
    #[test]
    fn direct_heads_scatter_targets_and_collcomm_members() {
        // Ranks 0, 2, 4 on host A; 1, 3, 5 on host B; two heads per host.
        let hosts = [7, 9, 7, 9, 7, 9];
        let p = direct_position(&hosts, &[], 2, 0, 2);
        assert_eq!(p.heads, vec![0, 2]);
        assert_eq!(p.head_rank, Some(1));
        assert_eq!(p.down, vec![0, 4]);
        assert_eq!(p.shift, 1);
        let q = direct_position(&hosts, &[], 4, 0, 2);
        assert_eq!((q.head_rank, q.down.clone(), q.shift), (None, vec![], 0));
        assert_eq!(
            q.info_line(0, 4, 6),
            "CollNetDirect channel 0 rank 4 up  0  2 nUp 2 nHeads 2 headRank -1 out -1 shift 0"
        );
        assert_eq!(
            p.info_line(0, 2, 6),
            "CollNetDirect channel 0 rank 2 down  0  4 nDown 2 up  0 nUp 1 nHeads 2 headRank 1 out 6 shift 1"
        );
        // Channel 1: the heads move round the host.
        assert_eq!(direct_position(&hosts, &[], 0, 1, 2).heads, vec![2, 4]);
        assert_eq!(direct_members(&hosts, &[], 0, 0, 2), vec![0, 1]);
        assert_eq!(direct_members(&hosts, &[], 0, 1, 2), vec![2, 3]);
        assert_eq!(direct_members(&hosts, &[], 1, 1, 2), vec![4, 5]);
        // Head 0's collComm is the CollNetChain's.
        for c in 0..4 {
            assert_eq!(direct_members(&hosts, &[], c, 0, 3), heads(&hosts, c));
        }
        // Uneven hosts: as many heads as the smallest host has ranks.
        assert_eq!(direct_nheads(0, 1, 3), Some(1));
        assert_eq!(direct_nheads(0, 4, 4), Some(4));
        assert_eq!(direct_nheads(0, 9, 9), None);
        assert_eq!(direct_nheads(0, 8, 8), Some(8));
        // Searched heads (one per CollNet NIC's local GPU) win, within the host.
        assert_eq!(direct_nheads(1, 4, 4), Some(1));
        assert_eq!(direct_nheads(8, 4, 6), Some(4));
        assert_eq!(direct_nheads(2, 9, 9), None);
    }

    #[test]
    fn searched_heads_follow_the_graph_channels() {
        // Ranks 0, 2, 4, 6 on host A; 1, 3, 5, 7 on host B. Host A's graph has
        // channels starting at 4, 0, 4, 6 (heads 4, 0, 6); host B's at 7, 3.
        let hosts = [7, 9, 7, 9, 7, 9, 7, 9];
        let a = vec![4, 0, 4, 6];
        let b = vec![7, 3];
        let firsts: Vec<Vec<usize>> = (0..8).map(|r| if r % 2 == 0 { a.clone() } else { b.clone() }).collect();
        // Two heads on every host (host B has two): A keeps 4, 0; B 7, 3.
        assert_eq!(host_order(&hosts, &firsts, 2, 0, 2), vec![4, 0, 2, 6]);
        assert_eq!(host_order(&hosts, &firsts, 2, 1, 2), vec![0, 4, 2, 6]);
        // Channel 3's first GPU (6) is beyond the two kept heads: head 3 mod 2.
        assert_eq!(host_order(&hosts, &firsts, 0, 3, 2), vec![0, 4, 2, 6]);
        assert_eq!(host_order(&hosts, &firsts, 5, 0, 2), vec![7, 3, 1, 5]);
        assert_eq!(host_order(&hosts, &firsts, 5, 1, 2), vec![3, 7, 1, 5]);
        // Channel c's head 0 is the graph's channel c first rank.
        for c in 0..3 {
            let p = direct_position(&hosts, &firsts, 4, c, 2);
            assert_eq!(p.heads[0], a[c], "channel {c}");
            assert_eq!(direct_members(&hosts, &firsts, c, 0, 2), {
                let mut m = vec![a[c], b[c % 2]];
                m.sort_unstable();
                m
            });
        }
        assert_eq!(position_in(&hosts, &firsts, 4, 0, 2), ChainPos { up: 8, down: Some(0) });
        assert_eq!(position_in(&hosts, &firsts, 0, 0, 2), ChainPos { up: 4, down: Some(2) });
        // Every rank of a host agrees, and each host has exactly two heads.
        for c in 0..4 {
            for h in 0..2 {
                assert_eq!(
                    direct_members(&hosts, &firsts, c, h, 2).len(),
                    2,
                    "channel {c} head {h}"
                );
            }
        }
        // Nothing searched: the layout rule, unchanged.
        for r in 0..8 {
            for c in 0..4 {
                assert_eq!(host_order(&hosts, &[], r, c, 2), chain(&hosts, r, c));
                assert_eq!(position_in(&hosts, &[], r, c, 2), position(&hosts, r, c));
            }
        }
    }
}
