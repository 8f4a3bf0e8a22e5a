//! AllGather and ReduceScatter over CollNet: the plugin's `iallgather` and
//! `ireducescatter` carry the data between hosts, as NCCL 2.30.7 runs them
//! with `NCCL_ALGO_COLLNET_DIRECT` (`src/device/all_gather.h` and
//! `src/device/reduce_scatter.h`, `RunWorkColl<…, NCCL_ALGO_COLLNET_DIRECT,
//! NCCL_PROTO_SIMPLE>`; the proxy's `collNetIallgather` /
//! `collNetIreducescatter` in `src/transport/coll_net.cc`).
//!
//! Head layout (the simplest correct one, not NCCL's): NCCL makes every local
//! GPU the head of its own rail (`collnetDirect.nHeads` = local ranks, one
//! collComm per rail) and exchanges the rails' results inside the node. Here
//! each channel has one head per host, the channel's CollNetChain head
//! (CollNetDirect head 0), and each host's chain is its order on the channel
//! ([`crate::graph::collnet::host_order`]): the searched CollNetDirect graph's
//! heads first where the host's NICs serve CollNet (`coll="1"`; head 0 is the
//! graph's channel first GPU, NCCL's `intra[c * localRanks]`,
//! `src/graph/connect.cc` `connectCollNet`), else the layout rule (the host's
//! ranks in rank order rotated by the channel, so the heads' work spreads over
//! the host's ranks across channels). The channel's collComm is the one of
//! CollNetDirect head 0, one member per host, in
//! [`crate::graph::collnet::direct_members`] order. Every host must have the same
//! number of ranks `k` (the plugin's `bytesPerRank` is one size for every
//! member); the tuning offers these algorithms only then.
//!
//! Per channel, each rank's part of the elements (`channel_parts`) is cut into
//! sub-chunks of one FIFO step; per sub-chunk of `l` elements:
//!
//! * **AllGather**: the host's pieces go up the chain to the head (`copySend`
//!   of its own, `recvCopySend` of those below, each stored in the rank's
//!   output on the way), which packs them in chain order into its scratch and
//!   asks for `iallgather(send = those k × l elements, bytesPerRank = k × l × es,
//!   window = the whole nHosts × k × l × es)` landing in **one piece per
//!   rank**: the place of that rank's piece in the head's output (members in
//!   collComm order, each member's ranks in its chain order). The CollNet link
//!   stages the call through its registered memory and passes the window as one
//!   SGE part, as NCCL does ([`crate::transport::collnet::SgeCall`]). The head
//!   then sends down the chain the pieces the ranks below lack.
//! * **ReduceScatter**: every rank's `nranks` input pieces are reduced up the
//!   chain (`send` at the tail, `recvReduceSend` above, `recvReduceCopy` at
//!   the head into its scratch, in rank order), and the head asks for
//!   `ireducescatter` over **one piece per rank**: that scratch piece, members
//!   in collComm order and each member's ranks in its chain order (staged and
//!   passed as one SGE part by the link); it receives its host's `k` reduced
//!   pieces (chain order),
//!   keeps its own and sends the others down the chain.
//!
//! The network sums for `Avg` and PreMulSum (`ncclGetCollNetSupport`,
//! `src/enqueue.cc`): their pre-multiplication runs on the way up, an integer
//! average's division where a rank stores its own piece.
//!
//! A network call is one step of the head's channel stream
//! ([`super::schedule::Prim::CollNet`]), carried out by the CollNet link
//! ([`crate::transport::collnet::SgeCall`]) after the steps pushed before it;
//! every head builds the same schedule, so every collComm sees the same calls
//! in the same order. Device buffers take the ring (the scratch is pageable
//! host memory).

use ferroccl_kernels::DevRedOp;

use super::ids::{Algorithm, Decision};
use super::schedule::{Builder, Lane, Peers, Prim, SliceOp, slice_limit};
use super::{CollArgs, CollKind};
use crate::error::Error;
use crate::graph::collnet;
use crate::plugin::collnet::Sge;
use crate::transport::ConnTable;
use crate::transport::collnet::{SgeCall, net_reduction};

/// Whether the operation runs the CollNet AllGather/ReduceScatter schedule of
/// this module (which puts the operation header on its own connections).
pub(crate) fn runs_here(a: &CollArgs, d: &Decision) -> bool {
    d.algo == Algorithm::CollNetDirect
        && matches!(a.kind, CollKind::AllGather | CollKind::ReduceScatter)
        && !a.mem.any_staged()
}

/// One channel's layout: the collComm members' chains (head first) and this
/// rank's chain and position in it.
struct Layout {
    /// Each member's chain, members in collComm order.
    members: Vec<Vec<usize>>,
    /// This rank's chain (head first).
    mine: Vec<usize>,
    /// This rank's position in it (0 = head).
    pos: usize,
}

impl Layout {
    /// Channel `ch`'s layout for `rank`: each host's chain is its order on the
    /// channel ([`collnet::host_order`]: the searched CollNetDirect graph's heads
    /// first where `firsts` has them, else the layout rule [`collnet::chain`]),
    /// so the chain's head is CollNetDirect head 0, the member of the channel's
    /// first collComm that the connection setup (`comm::collnet`) connected; the
    /// members are that collComm's, in the order their handles went to `connect`
    /// ([`collnet::direct_members`] of head 0).
    ///
    /// Errors: hosts with different rank counts.
    fn of(hosts: &[u64], firsts: &[Vec<usize>], rank: usize, ch: usize, nheads: usize) -> Result<Layout, Error> {
        let members: Vec<Vec<usize>> = collnet::direct_members(hosts, firsts, ch, 0, nheads)
            .into_iter()
            .map(|h| collnet::host_order(hosts, firsts, h, ch, nheads))
            .collect();
        let mine = collnet::host_order(hosts, firsts, rank, ch, nheads);
        let k = mine.len();
        if members.iter().any(|m| m.len() != k) {
            return Err(Error::Internal(format!(
                "CollNet AllGather/ReduceScatter needs as many ranks on every host (channel {ch}: {:?})",
                members.iter().map(Vec::len).collect::<Vec<_>>()
            )));
        }
        let pos = mine.iter().position(|&r| r == rank).unwrap_or(0);
        Ok(Layout { members, mine, pos })
    }

    fn k(&self) -> usize {
        self.mine.len()
    }

    fn up(&self) -> Peers {
        Peers::one(self.mine[self.pos - 1])
    }

    fn down(&self) -> Peers {
        Peers::one(self.mine[self.pos + 1])
    }

    /// The window's ranks in order: members in collComm order, each in chain order.
    fn window_ranks(&self) -> impl Iterator<Item = usize> + '_ {
        self.members.iter().flatten().copied()
    }
}

/// The element ranges `(channel, first element, elements)` of each sub-chunk
/// (one FIFO step of `es`-byte elements at most) of every rank's block.
fn sub_chunks(b: &Builder<'_>, count: usize, es: usize, d: &Decision) -> Vec<(usize, usize, usize, usize)> {
    let p = b.p;
    let l_max = (slice_limit(p.ring_step, es) / es).max(1);
    let mut out = Vec::new();
    for (ch, cs, cl) in super::schedule::channel_parts(count, d.nchannels, p) {
        let mut s = cs;
        while s < cs + cl {
            let l = l_max.min(cs + cl - s);
            out.push((ch, cs, s, l));
            s += l;
        }
    }
    out
}

/// Appends one step of `prim` on stream `k` of `lane` over `bytes` (sliced as
/// the schedule slices every primitive).
#[allow(clippy::too_many_arguments)] // the step's fields
fn step(
    b: &mut Builder<'_>,
    lane: Lane,
    k: usize,
    prim: Prim,
    peers: (Peers, Peers),
    src: *const u8,
    dst: *mut u8,
    bytes: usize,
    red: Option<DevRedOp>,
) {
    let slice = if matches!(prim, Prim::LocalCopy) {
        usize::MAX
    } else {
        slice_limit(b.p.ring_step, b.es)
    };
    b.prim_with(lane, k, prim, peers, src, dst, bytes, slice, red);
}

/// Word layout of a network call's descriptor (see [`push_net_op`]).
const W_KIND: usize = 0;
const W_PEER: usize = 1;
const W_BPR: usize = 2;
const W_WINDOW: usize = 3;
const W_PTR: usize = 4;
const W_DTYPE: usize = 5;
const W_OP: usize = 6;
const W_NPARTS: usize = 7;
const W_HEAD: usize = 8;

/// Appends a network call to stream 0 of `lane`: its descriptor (kind, the
/// network peer `nranks`, bytes per member, window bytes, the AllGather's
/// send or the ReduceScatter's receive address, datatype and reduction, the
/// SGE parts as address/length pairs) is kept as native-endian words in a
/// scratch buffer of the plan, which the step points at.
#[allow(clippy::too_many_arguments)] // the call's arguments
fn push_net_op(
    b: &mut Builder<'_>,
    lane: Lane,
    rs: bool,
    bpr: usize,
    window: usize,
    ptr: *mut u8,
    red: Option<&DevRedOp>,
    parts: &[(*mut u8, usize)],
) {
    let (dtype, op) = red
        .and_then(net_reduction)
        .map_or((-1i64, -1i64), |(t, o, _)| (t.0 as i64, o.0 as i64));
    let mut words: Vec<usize> = vec![0; W_HEAD + 2 * parts.len()];
    words[W_KIND] = rs as usize;
    words[W_PEER] = b.p.nranks;
    words[W_BPR] = bpr;
    words[W_WINDOW] = window;
    words[W_PTR] = ptr as usize;
    words[W_DTYPE] = dtype as usize;
    words[W_OP] = op as usize;
    words[W_NPARTS] = parts.len();
    for (i, &(p, n)) in parts.iter().enumerate() {
        words[W_HEAD + 2 * i] = p as usize;
        words[W_HEAD + 2 * i + 1] = n;
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let len = bytes.len();
    b.scratch.push(bytes);
    let src = b.scratch.last().expect("just pushed").as_ptr();
    let desc = b.desc;
    b.stream(lane, 0).push(SliceOp {
        prim: Prim::CollNet,
        src,
        dst: std::ptr::null_mut(),
        bytes: len,
        red: None,
        blocks: 0,
        recv_from: Peers::NONE,
        send_to: Peers::NONE,
        desc,
        hdr_send: 0,
        hdr_recv: 0,
    });
}

/// Carries out a [`Prim::CollNet`] step: hands its call to the channel's
/// CollNet link; `Ok(true)` once the call completed.
///
/// Errors: no CollNet link on the channel, a malformed descriptor, the
/// plugin's error.
pub(crate) fn run_net_op(op: &SliceOp, lane: Lane, conns: &mut ConnTable) -> Result<bool, Error> {
    // SAFETY: a CollNet step's `src`/`bytes` are its descriptor, a scratch
    // buffer of the plan kept alive until the plan's steps are done.
    let raw = unsafe { std::slice::from_raw_parts(op.src, op.bytes) };
    let ws = std::mem::size_of::<usize>();
    let words: Vec<usize> = raw
        .chunks_exact(ws)
        .map(|c| usize::from_ne_bytes(c.try_into().expect("word")))
        .collect();
    let bad = || {
        Error::Internal(format!(
            "a CollNet step's descriptor of {} bytes is malformed",
            op.bytes
        ))
    };
    if words.len() < W_HEAD || words.len() != W_HEAD + 2 * words[W_NPARTS] {
        return Err(bad());
    }
    let peer = words[W_PEER];
    let s = conns
        .send(&lane.key(peer))
        .ok_or_else(|| Error::Internal(format!("CollNet step on {lane:?} without a CollNet link")))?;
    let make = || {
        let parts: Vec<Sge> = words[W_HEAD..]
            .chunks_exact(2)
            .map(|w| Sge {
                data: w[0] as *mut u8,
                size: w[1],
                mr: None,
            })
            .collect();
        let (bytes_per_rank, window_bytes, ptr) = (words[W_BPR], words[W_WINDOW], words[W_PTR] as *mut u8);
        if words[W_KIND] == 0 {
            SgeCall::AllGather {
                send: ptr,
                recv_parts: parts,
                bytes_per_rank,
                window_bytes,
            }
        } else {
            SgeCall::ReduceScatter {
                send_parts: parts,
                recv: ptr,
                bytes_per_rank,
                window_bytes,
                dtype: ferroccl_plugin_api::abi::ncclDataType_t(words[W_DTYPE] as i64 as i32),
                op: ferroccl_plugin_api::abi::ncclRedOp_t(words[W_OP] as i64 as i32),
            }
        }
    };
    s.collnet_sge(&make)
}

/// Makes room in the plan for `bytes` of host scratch; its address.
fn scratch(b: &mut Builder<'_>, bytes: usize) -> *mut u8 {
    b.scratch.push(vec![0u8; bytes.max(1)]);
    b.scratch.last_mut().expect("just pushed").as_mut_ptr()
}

/// Marks the network's connections as carrying no header (the plugin would
/// move it with the data), as the chain AllReduce does.
fn no_net_header(b: &mut Builder<'_>, lane: Lane) {
    let net = b.p.nranks;
    for sends in [true, false] {
        if !b.headered.contains(&(lane, sends, net)) {
            b.headered.push((lane, sends, net));
        }
    }
}

/// Which collective the sub-chunk loop ([`build`]) lays out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// AllGather: pieces go up the chain, `iallgather`, the window comes down.
    AllGather,
    /// ReduceScatter: pieces are reduced up the chain, `ireducescatter`, the
    /// host's reduced pieces come down.
    ReduceScatter,
}

impl Dir {
    /// Bytes of the channel scratch buffers one rank needs for a channel part
    /// of `cl_bytes` per rank: AllGather, the head's `k` pieces; ReduceScatter,
    /// the head's `nranks` reduced inputs (none elsewhere) and every rank's `k`
    /// received pieces.
    fn scratch_sizes(self, lay: &Layout, nranks: usize, cl_bytes: usize) -> Vec<usize> {
        let head = lay.pos == 0;
        match self {
            Dir::AllGather if head => vec![lay.k() * cl_bytes],
            Dir::AllGather => Vec::new(),
            Dir::ReduceScatter => vec![if head { nranks * cl_bytes } else { 0 }, lay.k() * cl_bytes],
        }
    }
}

/// One sub-chunk of a channel: its lane, first element, offset in the
/// channel part (elements) and piece size (bytes).
struct Sub {
    lane: Lane,
    s: usize,
    off: usize,
    n: usize,
}

impl Sub {
    /// Appends one step of `prim` on stream `k` of the sub-chunk's lane over one piece.
    #[allow(clippy::too_many_arguments)] // the step's fields
    fn step(
        &self,
        b: &mut Builder<'_>,
        k: usize,
        prim: Prim,
        peers: (Peers, Peers),
        src: *const u8,
        dst: *mut u8,
        red: Option<DevRedOp>,
    ) {
        step(b, self.lane, k, prim, peers, src, dst, self.n, red);
    }
}

/// The sub-chunk loop both collectives share: per sub-chunk of every
/// channel, its layout, the channel's scratch (made at its first sub-chunk)
/// and the collective's steps.
///
/// Errors: CollNet not connected, hosts with different rank counts.
fn build(b: &mut Builder<'_>, a: &CollArgs, red: Option<DevRedOp>, d: &Decision, dir: Dir) -> Result<(), Error> {
    let p = b.p;
    let es = a.dtype.size();
    let mut scratches: Vec<(usize, Vec<*mut u8>)> = Vec::new();
    for (ch, cs, s, l) in sub_chunks(b, a.count, es, d) {
        let lane = Lane::Channel(ch);
        let lay = layout(p, ch)?;
        no_net_header(b, lane);
        let sc = match scratches.iter().find(|(c, _)| *c == ch) {
            Some((_, sc)) => sc.clone(),
            None => {
                let cl = channel_len(a.count, d, p, ch);
                let sc: Vec<*mut u8> = dir
                    .scratch_sizes(&lay, p.nranks, cl * es)
                    .into_iter()
                    .map(|bytes| scratch(b, bytes))
                    .collect();
                scratches.push((ch, sc.clone()));
                sc
            }
        };
        let sub = Sub {
            lane,
            s,
            off: s - cs,
            n: l * es,
        };
        match (dir, red) {
            (Dir::AllGather, _) => gather_sub(b, a, &lay, &sub, &sc),
            (Dir::ReduceScatter, Some(red)) => scatter_sub(b, a, red, &lay, &sub, &sc),
            (Dir::ReduceScatter, None) => {
                return Err(Error::Internal("CollNet ReduceScatter without a reduction".into()));
            }
        }
    }
    Ok(())
}

/// CollNet AllGather (see the module docs).
///
/// Errors: CollNet not connected, hosts with different rank counts.
pub(super) fn all_gather(b: &mut Builder<'_>, a: &CollArgs, d: &Decision) -> Result<(), Error> {
    build(b, a, None, d, Dir::AllGather)
}

/// CollNet ReduceScatter (see the module docs).
///
/// Errors: CollNet not connected, hosts with different rank counts.
pub(super) fn reduce_scatter(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, d: &Decision) -> Result<(), Error> {
    build(b, a, Some(red), d, Dir::ReduceScatter)
}

/// One AllGather sub-chunk (`sc`: the head's scratch, see [`Dir::scratch_sizes`]).
fn gather_sub(b: &mut Builder<'_>, a: &CollArgs, lay: &Layout, sub: &Sub, sc: &[*mut u8]) {
    let es = a.dtype.size();
    let block = a.count * es;
    let (s, n, k) = (sub.s, sub.n, lay.k());
    let out = |r: usize| a.recv.wrapping_add(r * block + s * es);
    let inp = a.send.wrapping_add(s * es);
    let none = Peers::NONE;
    let null = std::ptr::null_mut();
    if lay.pos == 0 {
        // The host's pieces of this sub-chunk, in chain order, contiguous.
        let base = sc[0].wrapping_add(k * sub.off * es);
        let piece = |j: usize| base.wrapping_add(j * n);
        sub.step(b, 0, Prim::LocalCopy, (none, none), inp, piece(0), None);
        for j in 1..k {
            sub.step(b, 0, Prim::Recv, (lay.down(), none), null, piece(j), None);
        }
        let parts: Vec<(*mut u8, usize)> = lay.window_ranks().map(|r| (out(r), n)).collect();
        let window = parts.len() * n;
        push_net_op(b, sub.lane, false, k * n, window, base, None, &parts);
        if k > 1 {
            for r in down_list(lay, 1) {
                sub.step(b, 0, Prim::Send, (none, lay.down()), out(r), null, None);
            }
        }
    } else {
        let i = lay.pos;
        // Up: this rank's piece, then those from below.
        sub.step(b, 0, Prim::CopySend, (none, lay.up()), inp, out(b.p.rank), None);
        for j in i + 1..k {
            let peers = (lay.down(), lay.up());
            sub.step(b, 0, Prim::RecvCopySend, peers, null, out(lay.mine[j]), None);
        }
        // Down: what this rank lacks, forwarded; then its own piece for those below.
        let tail = i == k - 1;
        for r in down_list(lay, i) {
            if tail {
                sub.step(b, 1, Prim::Recv, (lay.up(), none), null, out(r), None);
            } else {
                let peers = (lay.up(), lay.down());
                sub.step(b, 1, Prim::RecvCopySend, peers, null, out(r), None);
            }
        }
        if !tail {
            sub.step(b, 1, Prim::Send, (none, lay.down()), inp, null, None);
        }
    }
}

/// One ReduceScatter sub-chunk (`sc`: the head's reduced inputs and the
/// received pieces, see [`Dir::scratch_sizes`]).
fn scatter_sub(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, lay: &Layout, sub: &Sub, sc: &[*mut u8]) {
    let nranks = b.p.nranks;
    let es = a.dtype.size();
    let block = a.count * es;
    let (s, n, k) = (sub.s, sub.n, lay.k());
    let inp = |r: usize| a.send.wrapping_add(r * block + s * es);
    let out = a.recv.wrapping_add(s * es);
    // The network sums Avg and PreMulSum: pre-multiplied on the way up, an
    // integer average divided where a rank stores its own piece.
    let pre_only = DevRedOp { post_div: None, ..red };
    let post_only = DevRedOp { pre_mul: None, ..red };
    let none = Peers::NONE;
    let null = std::ptr::null_mut();
    let ibase = sc[0].wrapping_add(nranks * sub.off * es);
    let obase = sc[1].wrapping_add(k * sub.off * es);
    let ipiece = |r: usize| ibase.wrapping_add(r * n);
    let opiece = |j: usize| obase.wrapping_add(j * n);
    if lay.pos == 0 {
        // Up: every rank's piece reduced over the host, into the scratch in rank order.
        for r in 0..nranks {
            if k == 1 {
                sub.step(b, 0, Prim::LocalCopy, (none, none), inp(r), ipiece(r), Some(pre_only));
            } else {
                let peers = (lay.down(), none);
                sub.step(b, 0, Prim::RecvReduceCopy, peers, inp(r), ipiece(r), Some(pre_only));
            }
        }
        let parts: Vec<(*mut u8, usize)> = lay.window_ranks().map(|r| (ipiece(r), n)).collect();
        let window = parts.len() * n;
        push_net_op(b, sub.lane, true, k * n, window, obase, Some(&red), &parts);
        // Down: its own piece kept, the others sent in chain order.
        sub.step(b, 0, Prim::LocalCopy, (none, none), opiece(0), out, Some(post_only));
        for j in 1..k {
            sub.step(b, 0, Prim::Send, (none, lay.down()), opiece(j), null, None);
        }
    } else {
        let i = lay.pos;
        let tail = i == k - 1;
        for r in 0..nranks {
            if tail {
                sub.step(b, 0, Prim::Send, (none, lay.up()), inp(r), null, Some(red));
            } else {
                let peers = (lay.down(), lay.up());
                sub.step(b, 0, Prim::RecvReduceSend, peers, inp(r), null, Some(red));
            }
        }
        sub.step(b, 1, Prim::Recv, (lay.up(), none), null, out, Some(post_only));
        for j in i + 1..k {
            let peers = (lay.up(), lay.down());
            sub.step(b, 1, Prim::RecvCopySend, peers, null, opiece(j), None);
        }
    }
}

/// The pieces chain position `i` receives on the way down: every rank of the
/// other hosts (collComm order), then its own host's ranks above it.
fn down_list(lay: &Layout, i: usize) -> Vec<usize> {
    let mut v: Vec<usize> = lay.window_ranks().filter(|r| !lay.mine.contains(r)).collect();
    v.extend_from_slice(&lay.mine[..i]);
    v
}

/// Elements of channel `ch`'s part of every rank's block.
fn channel_len(count: usize, d: &Decision, p: &super::schedule::SchedParams, ch: usize) -> usize {
    super::schedule::channel_parts(count, d.nchannels, p)
        .into_iter()
        .find(|&(c, _, _)| c == ch)
        .map_or(0, |(_, _, cl)| cl)
}

/// Channel `ch`'s layout. Errors: CollNet not connected.
fn layout(p: &super::schedule::SchedParams, ch: usize) -> Result<Layout, Error> {
    if p.collnet.get(ch).is_none() || p.collnet_hosts.len() != p.nranks {
        return Err(Error::Internal(format!(
            "CollNetDirect chosen but channel {ch} has no CollNet connection ({} connected)",
            p.collnet.len()
        )));
    }
    Layout::of(&p.collnet_hosts, &p.collnet_firsts, p.rank, ch, p.collnet_nheads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_lists_give_each_position_what_it_lacks() {
        // Hosts A = {0, 2}, B = {1, 3}; channel 0: chains [0, 2] and [1, 3].
        let hosts = [7, 9, 7, 9];
        let head = Layout::of(&hosts, &[], 0, 0, 1).unwrap();
        assert_eq!(head.members, vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(head.window_ranks().collect::<Vec<_>>(), vec![0, 2, 1, 3]);
        // The tail (rank 2) lacks B's pieces and its head's.
        let tail = Layout::of(&hosts, &[], 2, 0, 1).unwrap();
        assert_eq!(tail.pos, 1);
        assert_eq!(down_list(&tail, 1), vec![1, 3, 0]);
        // Channel 1 rotates the heads: rank 2 heads A.
        let l1 = Layout::of(&hosts, &[], 2, 1, 1).unwrap();
        assert_eq!((l1.pos, l1.mine.clone()), (0, vec![2, 0]));
        // Unequal hosts are refused.
        assert!(Layout::of(&[1, 1, 2], &[], 0, 0, 1).is_err());
    }

    #[test]
    fn searched_heads_order_the_chains() {
        // Hosts A = {0, 2, 4}, B = {1, 3, 5}; A's searched graph starts its
        // channels at 4 then 2, B's at 5: one head per host. The layout rule
        // would make 0 and 1 the heads on channel 0.
        let hosts = [7, 9, 7, 9, 7, 9];
        let firsts: Vec<Vec<usize>> = (0..6).map(|r| if r % 2 == 0 { vec![4, 2] } else { vec![5] }).collect();
        let l = Layout::of(&hosts, &firsts, 0, 0, 1).unwrap();
        assert_eq!(l.members, vec![vec![4, 0, 2], vec![5, 1, 3]]);
        assert_eq!((l.mine.clone(), l.pos), (vec![4, 0, 2], 1));
        assert_eq!(l.window_ranks().collect::<Vec<_>>(), vec![4, 0, 2, 5, 1, 3]);
        assert_eq!(down_list(&l, 1), vec![5, 1, 3, 4]);
        // Every rank agrees on the members, and the head is the chain's first.
        for r in 0..6 {
            let m = Layout::of(&hosts, &firsts, r, 0, 1).unwrap();
            assert_eq!(m.members, l.members, "rank {r}");
            assert_eq!(m.mine[m.pos], r);
        }
        // Nothing searched: the layout rule, for any number of heads.
        for nheads in 1..4 {
            let plain = Layout::of(&hosts, &[], 2, 1, nheads).unwrap();
            assert_eq!(plain.members, vec![vec![2, 4, 0], vec![3, 5, 1]]);
        }
    }
}
