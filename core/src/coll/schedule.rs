//! Step schedules: each [`CollArgs`] becomes a list of slice steps per lane
//! (a channel's collective connections, or one p2p peer and direction), computed
//! identically on every rank so sender and receiver agree on every message size
//! without negotiating. Every step names the peers it receives from and sends to
//! ([`SliceOp::recv_from`], [`SliceOp::send_to`]); the executor finds their
//! connectors in the connection table by (channel, peer, connection index).
//!
//! The ring pattern of each channel comes from [`crate::graph::Channel`]; no ring
//! arithmetic lives outside the graph types.

use ferroccl_kernels::DevRedOp;

use super::desc::{OP_HDR_BYTES, OpDesc};
use super::ids::{Algorithm, Decision};
use super::{CollArgs, CollKind};
use crate::error::Error;
use crate::graph::{Channel, MAX_TREE_ARITY};
use crate::transport::{CONN_COLL, CONN_COLL_UP, CONN_P2P, ConnKey};

#[path = "collnet_direct.rs"]
mod collnet_direct;

/// The most peers one step receives from or sends to: a CollNetDirect head's
/// other local ranks (NCCL's `NCCL_MAX_DIRECT_ARITY`, 7) plus one, and more
/// than a tree node's children ([`MAX_TREE_ARITY`]).
pub(crate) const MAX_PEERS: usize = crate::graph::collnet::MAX_DIRECT_ARITY + 1;
const _: () = assert!(MAX_PEERS >= MAX_TREE_ARITY && MAX_PEERS <= 8, "header bits are a u8");

/// What one slice step does (NCCL's primitives, `src/device/prims_simple.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prim {
    /// `send`: send slot = pre(input).
    Send,
    /// `recv`: output = received.
    Recv,
    /// `recvReduceSend`: send slot = received ⊕ pre(input).
    RecvReduceSend,
    /// `directRecvReduceCopySend`: send slot = post(received ⊕ pre(input)); output = send slot.
    RecvReduceCopySend,
    /// `recvReduceCopy`: output = post(received ⊕ pre(input)).
    RecvReduceCopy,
    /// `recvCopySend`: output = received; send slot = received.
    RecvCopySend,
    /// `copySend`: output = input (unless the same address); send slot = input.
    CopySend,
    /// Local only: output = post(pre(input)) (one rank, or a send/recv to self).
    LocalCopy,
    /// Header only: sends this operation's descriptor to `send_to` or checks the
    /// one received from `recv_from`; moves no data (a connection the operation
    /// otherwise does not use in that direction, see [`super::desc`]).
    Desc,
    /// A CollNet `iallgather`/`ireducescatter` on the channel's collComm, run
    /// by the CollNet link once the steps before it are posted; `src`/`bytes`
    /// point at its descriptor (`coll::collnet_agrs`). Moves no FIFO step.
    CollNet,
    /// Local only: output = post(pre(block 0) ⊕ pre(block 1) ⊕ …) over `blocks`
    /// consecutive blocks of `bytes` at the input, in rank order (the last step of
    /// the all-gather + reduce AllReduce, see [`Decision::allgather_reduce`]).
    ReduceBlocks,
}

/// Slices are cut so that one primitive call moves at least this many slices
/// (pipelining along the ring: the peer reduces slice 1 while slice 2 is on the
/// wire) … Measured on loopback TCP (2 ranks, socket plugin, interleaved runs):
/// while steps were copied through FIFO slots, 2 beat 1 at 256 KiB and 1 MiB;
/// since steps are sent from and received into user memory, 1 beats 2 at 1 MiB
/// (medians ~400 vs ~460 µs, 4 runs; 4 was ~560) and ties at 256 KiB, 4 MiB and
/// 64 MiB (where slices are capped by the FIFO step anyway): per-message cost
/// now outweighs the pipelining. Kept as a knob for other networks.
const MIN_SLICES_PER_PRIM: usize = 1;
/// … unless slices would drop below this size.
const MIN_SLICE_BYTES: usize = 32 << 10;

impl Prim {
    /// Whether the step consumes a received slot.
    pub(crate) fn recvs(self) -> bool {
        matches!(
            self,
            Prim::Recv | Prim::RecvReduceSend | Prim::RecvReduceCopySend | Prim::RecvReduceCopy | Prim::RecvCopySend
        )
    }

    /// Whether the step fills a send slot.
    pub(crate) fn sends(self) -> bool {
        matches!(
            self,
            Prim::Send | Prim::RecvReduceSend | Prim::RecvReduceCopySend | Prim::RecvCopySend | Prim::CopySend
        )
    }
}

/// Which connections a task drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Lane {
    /// Channel `c`'s collective connections (ring and tree peers, connection
    /// index [`CONN_COLL`]).
    Channel(usize),
    /// Channel `c`'s CollNetDirect "up" connections (connection index
    /// [`CONN_COLL_UP`]: scatter to the heads, a head's reduction to the network).
    ChannelUp(usize),
    /// P2P send connection to a peer ([`CONN_P2P`]); a lane of its own so the
    /// sends and receives of a group progress independently.
    P2pSend(usize),
    /// P2P receive connection from a peer.
    P2pRecv(usize),
    /// No connection (local copies).
    Local,
}

impl Lane {
    /// The connection key of `peer` on this lane.
    pub(crate) fn key(self, peer: usize) -> ConnKey {
        match self {
            Lane::Channel(channel) => ConnKey {
                channel,
                peer,
                conn: CONN_COLL,
            },
            Lane::ChannelUp(channel) => ConnKey {
                channel,
                peer,
                conn: CONN_COLL_UP,
            },
            Lane::P2pSend(_) | Lane::P2pRecv(_) | Lane::Local => ConnKey {
                channel: 0,
                peer,
                conn: CONN_P2P,
            },
        }
    }
}

/// The peer ranks a step receives from or sends to: none, one (ring, p2p) or up
/// to [`MAX_PEERS`] (a tree node's children, a CollNetDirect head's local
/// ranks; NCCL's `FanAsymmetric` peers in `src/device/primitives.h`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Peers {
    len: u8,
    ranks: [u32; MAX_PEERS],
}

impl Peers {
    /// No peer.
    pub(crate) const NONE: Peers = Peers {
        len: 0,
        ranks: [0; MAX_PEERS],
    };

    /// One peer.
    pub(crate) fn one(rank: usize) -> Peers {
        Peers::of(&[rank])
    }

    /// The peers in `ranks` (at most [`MAX_PEERS`]; extra ones are a bug).
    pub(crate) fn of(ranks: &[usize]) -> Peers {
        debug_assert!(ranks.len() <= MAX_PEERS);
        let mut p = Peers::NONE;
        for &r in ranks.iter().take(MAX_PEERS) {
            p.ranks[p.len as usize] = r as u32;
            p.len += 1;
        }
        p
    }

    /// Number of peers.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// The peers, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ranks[..self.len as usize].iter().map(|&r| r as usize)
    }
}

/// One slice step with resolved addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SliceOp {
    pub prim: Prim,
    /// Input address (user send buffer), null when unused.
    pub src: *const u8,
    /// Output address (user receive buffer), null when unused.
    pub dst: *mut u8,
    /// Bytes moved by this step (> 0).
    pub bytes: usize,
    /// Reduction (for reducing prims and `Send` of a reduction's input).
    pub red: Option<DevRedOp>,
    /// Number of input blocks ([`Prim::ReduceBlocks`] only).
    pub blocks: usize,
    /// Peers whose steps this step consumes (non-empty exactly when `prim.recvs()`).
    pub recv_from: Peers,
    /// Peers this step fills a step for (non-empty exactly when `prim.sends()`).
    pub send_to: Peers,
    /// The operation's descriptor (index into the plan's descriptors).
    pub desc: u32,
    /// Bit `i` set: the step to `send_to[i]` starts with the operation header.
    pub hdr_send: u8,
    /// Bit `i` set: the step from `recv_from[i]` starts with the operation header.
    pub hdr_recv: u8,
}

/// The connectors a task drives: its channel or p2p lane and the keys of every
/// send and receive connector its steps use.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskConns {
    /// Send connectors (each step's `send_to` peers, deduplicated).
    pub send: Vec<ConnKey>,
    /// Receive connectors (each step's `recv_from` peers, deduplicated).
    pub recv: Vec<ConnKey>,
}

/// Steps that run one after another (one thread group of an NCCL kernel).
#[derive(Debug, Default)]
pub(crate) struct OpStream {
    /// The steps, in order.
    pub ops: Vec<SliceOp>,
    /// The next step to run.
    pub pos: usize,
}

/// One operation's steps on a lane: a single stream, or several that run
/// concurrently over disjoint connectors (the reduce and broadcast halves of a
/// tree AllReduce, as NCCL's `runTreeSplit` gives them separate thread groups).
/// A lane's segments run one after another.
#[derive(Debug, Default)]
pub(crate) struct Seg {
    /// The concurrent streams.
    pub streams: Vec<OpStream>,
}

/// The steps of one lane: its segments in order.
#[derive(Debug)]
pub(crate) struct Task {
    pub lane: Lane,
    /// Segments, run in order.
    pub segs: Vec<Seg>,
    /// The segment running now.
    pub seg: usize,
    /// The connectors the steps use (filled when the plan is complete).
    pub conns: TaskConns,
}

impl Task {
    /// Every step of the task, segment by segment, stream by stream.
    pub(crate) fn ops(&self) -> impl Iterator<Item = &SliceOp> {
        self.segs
            .iter()
            .flat_map(|s| s.streams.iter().flat_map(|st| st.ops.iter()))
    }

    /// Rewinds the task to its first step (a finished task run again).
    pub(crate) fn reset(&mut self) {
        self.seg = 0;
        for s in &mut self.segs {
            for st in &mut s.streams {
                st.pos = 0;
            }
        }
    }

    /// Whether every step has run.
    pub(crate) fn finished(&self) -> bool {
        self.seg >= self.segs.len()
    }

    /// Steps not run yet.
    pub(crate) fn left(&self) -> usize {
        self.segs[self.seg.min(self.segs.len())..]
            .iter()
            .flat_map(|s| s.streams.iter())
            .map(|st| st.ops.len() - st.pos)
            .sum()
    }

    /// The next step of each stream of the running segment.
    pub(crate) fn next_ops(&self) -> impl Iterator<Item = &SliceOp> {
        self.segs
            .get(self.seg)
            .into_iter()
            .flat_map(|s| s.streams.iter().filter_map(|st| st.ops.get(st.pos)))
    }

    /// Collects the connectors named by the task's steps.
    fn collect_conns(&mut self) {
        let mut c = TaskConns::default();
        for op in self.ops() {
            for p in op.send_to.iter() {
                let k = self.lane.key(p);
                if !c.send.contains(&k) {
                    c.send.push(k);
                }
            }
            for p in op.recv_from.iter() {
                let k = self.lane.key(p);
                if !c.recv.contains(&k) {
                    c.recv.push(k);
                }
            }
        }
        self.conns = c;
    }
}

// SAFETY: raw addresses of user buffers and FIFO slots, valid by the enqueue
// contract; only the executor thread dereferences them.
unsafe impl Send for SliceOp {}

/// Fixed parameters of a schedule.
#[derive(Debug, Clone)]
pub(crate) struct SchedParams {
    pub rank: usize,
    pub nranks: usize,
    /// This rank's view of every channel (ring and tree), from the graph.
    pub channels: Vec<Channel>,
    /// Bytes per FIFO step of ring connections.
    pub ring_step: usize,
    /// Bytes per FIFO step of p2p connections.
    pub p2p_step: usize,
    /// This rank's place in each channel's CollNet chain (empty: no CollNet).
    pub collnet: Vec<crate::graph::collnet::ChainPos>,
    /// This rank's place in each channel's CollNetDirect pattern (empty: no
    /// CollNetDirect).
    pub collnet_direct: Vec<crate::graph::collnet::DirectPos>,
    /// Every rank's host (its host hash) when CollNet is connected (empty
    /// otherwise): the collComm members' chains of the CollNet
    /// AllGather/ReduceScatter (`coll::collnet_agrs`).
    pub collnet_hosts: Vec<u64>,
    /// Per rank, the first rank of every channel of its host's searched
    /// CollNetDirect graph (all empty: nothing searched, the layout rule;
    /// [`crate::graph::collnet::host_order`]), as CollNet was connected with.
    pub collnet_firsts: Vec<Vec<usize>>,
    /// CollNetDirect heads per host and channel CollNet was connected with
    /// ([`crate::graph::collnet::direct_nheads`], 1 where CollNetDirect cannot
    /// run); with `collnet_firsts` it decides every host's order on a channel.
    pub collnet_nheads: usize,
}

impl SchedParams {
    /// This rank's position in channel `ch`'s ring.
    fn ring_index(&self, ch: usize) -> usize {
        self.channels[ch].ring.index(self.rank).unwrap_or(0)
    }

    /// The rank at position `pos` of channel `ch`'s ring.
    fn ring_at(&self, ch: usize, pos: usize) -> usize {
        self.channels[ch].ring.at(pos)
    }

    /// Channels available.
    pub(crate) fn nchannels(&self) -> usize {
        self.channels.len()
    }
}

fn div_up(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

/// Largest slice of elements of `es` bytes in a FIFO step of `step` bytes,
/// leaving room for an operation header ([`OP_HDR_BYTES`]) in front.
pub(super) fn slice_limit(step: usize, es: usize) -> usize {
    (step - OP_HDR_BYTES) / es * es
}

/// Splits `total` elements into contiguous parts `(channel, start, len)` over
/// the first `nchannels` channels (the tuning decision; at most the channels open).
pub(crate) fn channel_parts(total: usize, nchannels: usize, p: &SchedParams) -> Vec<(usize, usize, usize)> {
    if total == 0 {
        return Vec::new();
    }
    let used = nchannels.clamp(1, p.nchannels().max(1));
    let per = div_up(total, used);
    (0..used)
        .filter_map(|c| {
            let start = c * per;
            (start < total).then(|| (c, start, per.min(total - start)))
        })
        .collect()
}

pub(super) struct Builder<'a> {
    pub(super) p: &'a SchedParams,
    tasks: Vec<Task>,
    /// Element size of the operation being built.
    pub(super) es: usize,
    /// Scratch buffers the plan's steps point into.
    pub(super) scratch: Vec<Vec<u8>>,
    /// Descriptor index of the operation being built.
    pub(super) desc: u32,
    /// Connections (lane, sends?, peer) the operation being built has already
    /// put its header on.
    pub(super) headered: Vec<(Lane, bool, usize)>,
    /// The lanes the operation being built has a segment on.
    starts: Vec<Lane>,
}

impl Builder<'_> {
    /// Stream 0 of the current operation's segment on `lane`.
    fn lane(&mut self, lane: Lane) -> &mut Vec<SliceOp> {
        self.stream(lane, 0)
    }

    /// Stream `k` of the current operation's segment on `lane` (created on first use).
    pub(super) fn stream(&mut self, lane: Lane, k: usize) -> &mut Vec<SliceOp> {
        let i = match self.tasks.iter().position(|t| t.lane == lane) {
            Some(i) => i,
            None => {
                self.tasks.push(Task {
                    lane,
                    segs: Vec::new(),
                    seg: 0,
                    conns: TaskConns::default(),
                });
                self.tasks.len() - 1
            }
        };
        let t = &mut self.tasks[i];
        if !self.starts.contains(&lane) {
            self.starts.push(lane);
            t.segs.push(Seg::default());
        }
        let seg = t.segs.last_mut().expect("segment");
        while seg.streams.len() <= k {
            seg.streams.push(OpStream::default());
        }
        &mut seg.streams[k].ops
    }

    /// Appends `prim` over `bytes` bytes cut in slices of `slice` bytes to stream
    /// 0 of `lane`, with the ring (channel) or p2p peers of the lane.
    #[allow(clippy::too_many_arguments)]
    fn prim(
        &mut self,
        lane: Lane,
        prim: Prim,
        src: *const u8,
        dst: *mut u8,
        bytes: usize,
        slice: usize,
        red: Option<DevRedOp>,
    ) {
        let peers = self.peers(lane, prim);
        self.prim_with(lane, 0, prim, peers, src, dst, bytes, slice, red);
    }

    /// Appends `prim` over `bytes` bytes cut in slices of `slice` bytes to stream
    /// `stream` of `lane`, receiving from `peers.0` and sending to `peers.1`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prim_with(
        &mut self,
        lane: Lane,
        stream: usize,
        prim: Prim,
        peers: (Peers, Peers),
        src: *const u8,
        dst: *mut u8,
        bytes: usize,
        slice: usize,
        red: Option<DevRedOp>,
    ) {
        // Pipeline: at least MIN_SLICES_PER_PRIM slices per call, none below
        // MIN_SLICE_BYTES, none above the FIFO step; a function of `bytes` only, so
        // sender and receiver cut identically.
        let slice = if slice == usize::MAX {
            slice
        } else {
            let es = self.es.max(1);
            let want = bytes.div_ceil(MIN_SLICES_PER_PRIM).div_ceil(es) * es;
            want.max(MIN_SLICE_BYTES).min(slice).max(es)
        };
        let (recv_from, send_to) = peers;
        let (mut hdr_send, mut hdr_recv) = if bytes > 0 {
            (self.claim(lane, true, &send_to), self.claim(lane, false, &recv_from))
        } else {
            (0, 0)
        };
        let desc = self.desc;
        let ops = self.stream(lane, stream);
        let mut off = 0;
        while off < bytes {
            let n = slice.min(bytes - off);
            // SAFETY (address arithmetic only): `off < bytes`, inside the user's buffers by the enqueue contract.
            let s = if src.is_null() { src } else { src.wrapping_add(off) };
            let d = if dst.is_null() { dst } else { dst.wrapping_add(off) };
            ops.push(SliceOp {
                prim,
                src: s,
                dst: d,
                bytes: n,
                red,
                blocks: 0,
                recv_from,
                send_to,
                desc,
                hdr_send,
                hdr_recv,
            });
            (hdr_send, hdr_recv) = (0, 0);
            off += n;
        }
    }

    /// Marks the connections to/from `peers` on `lane` as carrying the current
    /// operation's header; returns the bits of those that did not yet.
    fn claim(&mut self, lane: Lane, sends: bool, peers: &Peers) -> u8 {
        let mut bits = 0;
        for (i, peer) in peers.iter().enumerate() {
            if !self.headered.contains(&(lane, sends, peer)) {
                self.headered.push((lane, sends, peer));
                bits |= 1 << i;
            }
        }
        bits
    }

    /// Starts building operation `desc`.
    fn begin(&mut self, desc: u32) {
        self.desc = desc;
        self.headered.clear();
        self.starts.clear();
    }

    /// Ends a collective: every channel it used exchanges the header with both
    /// ring neighbours even where the pattern moves no data that way (a
    /// Broadcast root receives nothing, its ring predecessor sends nothing), so
    /// every rank checks its predecessor's call. A header-only send goes first
    /// on the lane (sent at once), a header-only receive last (checked without
    /// delaying the data). A collective with nothing to move exchanges headers on
    /// channel 0.
    fn end_collective(&mut self) {
        if self.p.nranks < 2 {
            return;
        }
        if self.starts.is_empty() {
            self.lane(Lane::Channel(0));
        }
        let starts = self.starts.clone();
        for lane in starts {
            let Lane::Channel(ch) = lane else { continue };
            let c = &self.p.channels[ch];
            let (prev, next) = (c.ring_prev(self.p.rank), c.ring_next(self.p.rank));
            let desc = self.desc;
            let desc_op = |recv_from, send_to, hdr_recv, hdr_send| SliceOp {
                prim: Prim::Desc,
                src: std::ptr::null(),
                dst: std::ptr::null_mut(),
                bytes: 0,
                red: None,
                blocks: 0,
                recv_from,
                send_to,
                desc,
                hdr_send,
                hdr_recv,
            };
            let send =
                (self.claim(lane, true, &Peers::one(next)) != 0).then(|| desc_op(Peers::NONE, Peers::one(next), 0, 1));
            let recv =
                (self.claim(lane, false, &Peers::one(prev)) != 0).then(|| desc_op(Peers::one(prev), Peers::NONE, 1, 0));
            let ops = self.lane(lane);
            if let Some(op) = send {
                ops.insert(0, op);
            }
            if let Some(op) = recv {
                ops.push(op);
            }
        }
    }

    /// The peers of `prim` on `lane`: the ring predecessor / successor on a
    /// channel, the peer on a p2p lane.
    fn peers(&self, lane: Lane, prim: Prim) -> (Peers, Peers) {
        let (from, to) = match lane {
            Lane::Channel(ch) => {
                let c = &self.p.channels[ch];
                (
                    Peers::one(c.ring_prev(self.p.rank)),
                    Peers::one(c.ring_next(self.p.rank)),
                )
            }
            Lane::P2pSend(peer) | Lane::P2pRecv(peer) => (Peers::one(peer), Peers::one(peer)),
            Lane::Local | Lane::ChannelUp(_) => (Peers::NONE, Peers::NONE),
        };
        (
            if prim.recvs() { from } else { Peers::NONE },
            if prim.sends() { to } else { Peers::NONE },
        )
    }
}

/// Builds the tasks of a plan (the operations of one group on one communicator).
/// Returns the tasks and the scratch buffers they point into (keep those alive
/// until the tasks are done).
///
/// `descs[i]` is the descriptor of `colls[i]` (its header, see [`super::desc`]).
/// `plans[i]` is the tuning decision for `colls[i]` (algorithm, channels, chunk
/// size; `None` for send/receive, which use their own lanes).
pub(crate) fn build(
    colls: &[CollArgs],
    descs: &[OpDesc],
    plans: &[Option<Decision>],
    p: &SchedParams,
) -> Result<(Vec<Task>, Vec<Vec<u8>>), Error> {
    debug_assert_eq!(colls.len(), descs.len());
    debug_assert_eq!(colls.len(), plans.len());
    let mut b = Builder {
        p,
        tasks: Vec::new(),
        es: 1,
        scratch: Vec::new(),
        desc: 0,
        headered: Vec::new(),
        starts: Vec::new(),
    };
    let mut self_sends: Vec<(usize, &CollArgs)> = Vec::new();
    let mut self_recvs: Vec<(usize, &CollArgs)> = Vec::new();
    for (i, a) in colls.iter().enumerate() {
        let esize = a.dtype.size();
        b.es = esize;
        let red = match a.kind {
            CollKind::AllReduce | CollKind::ReduceScatter | CollKind::Reduce { .. } => {
                Some(DevRedOp::new(a.dtype, a.op, p.nranks as u32).map_err(|e| Error::InvalidArgument(e.to_string()))?)
            }
            _ => None,
        };
        match a.kind {
            CollKind::Send { peer } | CollKind::Recv { peer } if peer >= p.nranks => {
                return Err(Error::InvalidArgument(format!(
                    "{} peer {peer} out of range for a communicator of {} ranks",
                    a.kind.name(),
                    p.nranks
                )));
            }
            CollKind::Broadcast { root } | CollKind::Reduce { root } if root >= p.nranks => {
                return Err(Error::InvalidArgument(format!(
                    "{} root {root} out of range for a communicator of {} ranks",
                    a.kind.name(),
                    p.nranks
                )));
            }
            _ => {}
        }
        b.begin(i as u32);
        let p2p = matches!(a.kind, CollKind::Send { .. } | CollKind::Recv { .. });
        if a.count == 0 {
            if !p2p {
                b.end_collective();
            }
            continue;
        }
        match a.kind {
            CollKind::Send { peer } if peer == p.rank => self_sends.push((i, a)),
            CollKind::Recv { peer } if peer == p.rank => self_recvs.push((i, a)),
            CollKind::Send { peer } => {
                let bytes = a.count * esize;
                b.prim(
                    Lane::P2pSend(peer),
                    Prim::Send,
                    a.send,
                    std::ptr::null_mut(),
                    bytes,
                    slice_limit(p.p2p_step, esize),
                    None,
                );
            }
            CollKind::Recv { peer } => {
                let bytes = a.count * esize;
                b.prim(
                    Lane::P2pRecv(peer),
                    Prim::Recv,
                    std::ptr::null(),
                    a.recv,
                    bytes,
                    slice_limit(p.p2p_step, esize),
                    None,
                );
            }
            _ if p.nranks == 1 => local_coll(&mut b, a, red),
            _ => {
                let d = plans[i].ok_or_else(|| Error::Internal(format!("{} has no tuning decision", a.kind.name())))?;
                match a.kind {
                    CollKind::AllReduce if d.algo == Algorithm::CollNetDirect => {
                        collnet_direct::all_reduce(&mut b, a, red.expect("reduction"), &d)?
                    }
                    CollKind::AllGather if super::collnet_agrs::runs_here(a, &d) => {
                        super::collnet_agrs::all_gather(&mut b, a, &d)?
                    }
                    CollKind::ReduceScatter if super::collnet_agrs::runs_here(a, &d) => {
                        super::collnet_agrs::reduce_scatter(&mut b, a, red.expect("reduction"), &d)?
                    }
                    CollKind::AllReduce if d.algo == Algorithm::CollNetChain => {
                        all_reduce_collnet_chain(&mut b, a, red.expect("reduction"), &d)?
                    }
                    CollKind::AllReduce if d.algo == Algorithm::Tree => {
                        all_reduce_tree(&mut b, a, red.expect("reduction"), &d)
                    }
                    // Host memory only: its gather scratch is pageable host
                    // memory, which a step on the GPU's kernels cannot reach
                    // (and which a connection whose FIFO is GPU memory, P2P,
                    // refuses to touch from the CPU); device buffers take the
                    // ring, whose steps run on the GPU.
                    CollKind::AllReduce if d.allgather_reduce && !a.mem.any_staged() => {
                        all_reduce_small(&mut b, a, red.expect("reduction"))
                    }
                    CollKind::AllReduce => all_reduce(&mut b, a, red.expect("reduction"), &d),
                    CollKind::ReduceScatter => reduce_scatter(&mut b, a, red.expect("reduction"), &d),
                    CollKind::AllGather => all_gather(&mut b, a, &d),
                    CollKind::Broadcast { root } => broadcast(&mut b, a, root, &d),
                    CollKind::Reduce { root } => reduce(&mut b, a, root, red.expect("reduction"), &d),
                    CollKind::Send { .. } | CollKind::Recv { .. } => unreachable!("p2p handled above"),
                }
            }
        }
        // Tree and chain patterns put the header on their own connections.
        let tree = plans[i].is_some_and(|d| {
            matches!(
                d.algo,
                Algorithm::Tree | Algorithm::CollNetChain | Algorithm::CollNetDirect
            ) || super::collnet_agrs::runs_here(a, &d)
        });
        if !p2p && (!tree || a.count == 0 || p.nranks == 1) {
            b.end_collective();
        }
    }
    if self_sends.len() != self_recvs.len() {
        return Err(Error::InvalidUsage(format!(
            "a group has {} send(s) to self but {} receive(s) from self on rank {}",
            self_sends.len(),
            self_recvs.len(),
            p.rank
        )));
    }
    for ((_, s), (_, r)) in self_sends.iter().zip(&self_recvs) {
        let (sb, rb) = (s.count * s.dtype.size(), r.count * r.dtype.size());
        if sb != rb {
            return Err(Error::InvalidUsage(format!(
                "send to self of {sb} bytes matched with a receive from self of {rb} bytes on rank {}",
                p.rank
            )));
        }
        b.prim(Lane::Local, Prim::LocalCopy, s.send, r.recv, sb, usize::MAX, None);
    }
    for t in &mut b.tasks {
        t.collect_conns();
    }
    Ok((b.tasks, b.scratch))
}

fn all_reduce_small(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp) {
    let p = b.p;
    let (n, idx) = (p.nranks, p.ring_index(0));
    let bytes = a.count * a.dtype.size();
    b.scratch.push(vec![0u8; bytes * n]);
    let scratch = b.scratch.last_mut().expect("just pushed").as_mut_ptr();
    let block = |pos: usize| scratch.wrapping_add(p.ring_at(0, pos) * bytes);
    let lane = Lane::Channel(0);
    let slice = slice_limit(p.ring_step, b.es);
    // The blocks go round the ring one slice at a time (send this rank's slice,
    // forward n-2, receive the last), as the ring all-gather's loop does: a rank
    // never sends more than one slice ahead of what it receives, so the FIFOs
    // bound nothing here whatever the buffer size (sending whole blocks first
    // deadlocks once a block outgrows a FIFO that only credits on receipt, as
    // shared memory does).
    let mut off = 0;
    while off < bytes {
        let len = slice.min(bytes - off);
        let at = |pos: usize| block(pos).wrapping_add(off);
        ring_all_gather_round(b, lane, idx, a.send.wrapping_add(off), at, len, slice);
        off += len;
    }
    let desc = b.desc;
    let ops = b.lane(lane);
    ops.push(SliceOp {
        prim: Prim::ReduceBlocks,
        src: scratch,
        dst: a.recv,
        bytes,
        red: Some(red),
        blocks: n,
        recv_from: Peers::NONE,
        send_to: Peers::NONE,
        desc,
        hdr_send: 0,
        hdr_recv: 0,
    });
}

fn local_coll(b: &mut Builder<'_>, a: &CollArgs, red: Option<DevRedOp>) {
    let bytes = a.count * a.dtype.size();
    // AllGather / ReduceScatter of one rank: the single chunk is the whole buffer.
    b.prim(Lane::Local, Prim::LocalCopy, a.send, a.recv, bytes, usize::MAX, red);
}

/// Tree AllReduce over each channel's tree (NCCL's `all_reduce.h:runTreeSplit`):
/// the channel's part of the buffer is reduced up the tree and broadcast down
/// it, pipelined in slices. The root receives from its children, reduces with
/// its input, writes the result and sends it back down
/// (`recvReduceCopySend`); every other rank runs two concurrent streams, one
/// reducing up (`send` at a leaf, `recvReduceSend` inside) and one
/// broadcasting down (`recv` at a leaf, `recvCopySend` inside). A node reduces
/// its children's data in child order after its own input, so every rank gets
/// the same bits (the root's result).
fn all_reduce_tree(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, d: &Decision) {
    let p = b.p;
    let es = a.dtype.size();
    // Slices of one chunk at most (the chunk is one FIFO step unless a tuner says otherwise).
    let slice = slice_limit(p.ring_step, es).min(chunk_elems(d, es) * es);
    for (ch, cs, cl) in channel_parts(a.count, d.nchannels, p) {
        let lane = Lane::Channel(ch);
        let tree = &p.channels[ch].tree;
        let down = Peers::of(&tree.down);
        let (off, len) = (cs * es, cl * es);
        let (src, dst) = (a.send.wrapping_add(off), a.recv.wrapping_add(off));
        let none = Peers::NONE;
        match tree.up {
            None => b.prim_with(
                lane,
                0,
                Prim::RecvReduceCopySend,
                (down, down),
                src,
                dst,
                len,
                slice,
                Some(red),
            ),
            Some(up) => {
                let up = Peers::one(up);
                let (p_up, p_down) = if down.len() == 0 {
                    (Prim::Send, Prim::Recv)
                } else {
                    (Prim::RecvReduceSend, Prim::RecvCopySend)
                };
                let null_dst = std::ptr::null_mut();
                b.prim_with(
                    lane,
                    0,
                    p_up,
                    (if down.len() == 0 { none } else { down }, up),
                    src,
                    null_dst,
                    len,
                    slice,
                    Some(red),
                );
                let sends_down = if down.len() == 0 { none } else { down };
                b.prim_with(
                    lane,
                    1,
                    p_down,
                    (up, sends_down),
                    std::ptr::null(),
                    dst,
                    len,
                    slice,
                    None,
                );
            }
        }
    }
}

/// CollNetChain AllReduce (NCCL's `all_reduce.h`, `RunWorkColl<…,
/// NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE>`): per channel, each host's chain
/// ([`crate::graph::collnet`]) reduces its part up to the head (`send` at the
/// tail, `recvReduceSend` above it), the head hands it to the network (peer
/// `nranks`: the CollNet plugin's `iallreduce` across the hosts' heads) and
/// broadcasts what comes back down the chain (`recvCopySend`, `recv` at the
/// tail); the two halves run as concurrent streams, as NCCL splits the block's
/// threads. The network sums for `Avg` and PreMulSum: their pre-multiplication
/// runs on the way up, an integer average's division at the head on the way
/// down. The network's connection carries no operation header (the plugin
/// would reduce it with the data).
///
/// Errors: no chain for a channel (CollNet not connected there).
fn all_reduce_collnet_chain(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, d: &Decision) -> Result<(), Error> {
    let p = b.p;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es).min(chunk_elems(d, es) * es);
    let net = p.nranks;
    for (ch, cs, cl) in channel_parts(a.count, d.nchannels, p) {
        let pos = *p.collnet.get(ch).ok_or_else(|| {
            Error::Internal(format!(
                "CollNetChain chosen but channel {ch} has no CollNet connection ({} connected)",
                p.collnet.len()
            ))
        })?;
        let lane = Lane::Channel(ch);
        for sends in [true, false] {
            if !b.headered.contains(&(lane, sends, net)) {
                b.headered.push((lane, sends, net));
            }
        }
        let (off, len) = (cs * es, cl * es);
        let (src, dst) = (a.send.wrapping_add(off), a.recv.wrapping_add(off));
        let up = Peers::one(pos.up);
        let down = pos.down.map_or(Peers::NONE, Peers::one);
        let (p_up, p_down) = match pos.down {
            None => (Prim::Send, Prim::Recv),
            Some(_) => (Prim::RecvReduceSend, Prim::RecvCopySend),
        };
        b.prim_with(
            lane,
            0,
            p_up,
            (down, up),
            src,
            std::ptr::null_mut(),
            len,
            slice,
            Some(red),
        );
        // The head applies the reduction's post-operation to what the network
        // returns (pre-operations were applied on the way up).
        let post = (pos.up == net && red.has_post_op()).then_some(red);
        b.prim_with(lane, 1, p_down, (up, down), std::ptr::null(), dst, len, slice, post);
    }
    Ok(())
}

/// Chunks of one loop iteration: `(first element, elements)` of ring chunk `c`.
fn loop_chunk(region: usize, nranks: usize, chunk_elems: usize, c: usize) -> (usize, usize) {
    let csz = chunk_elems.min(div_up(region, nranks)).max(1);
    let start = c * csz;
    if start >= region {
        (region, 0)
    } else {
        (start, csz.min(region - start))
    }
}

/// Elements of one chunk of the decision (at least one).
fn chunk_elems(d: &Decision, es: usize) -> usize {
    (d.chunk_bytes / es).max(1)
}

fn all_reduce(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, d: &Decision) {
    let p = b.p;
    let n = p.nranks;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es);
    let chunk_elems = chunk_elems(d, es);
    for (ch, cs, cl) in channel_parts(a.count, d.nchannels, p) {
        let lane = Lane::Channel(ch);
        let idx = p.ring_index(ch);
        let loop_elems = n * chunk_elems;
        let mut base = 0;
        while base < cl {
            let region = loop_elems.min(cl - base);
            let at = |c: usize| {
                let (s, l) = loop_chunk(region, n, chunk_elems, c);
                ((cs + base + s) * es, l * es)
            };
            let src = |off: usize| a.send.wrapping_add(off);
            let dst = |off: usize| a.recv.wrapping_add(off);
            // Reduce-scatter phase.
            let (o, l) = at((idx + n - 1) % n);
            b.prim(lane, Prim::Send, src(o), std::ptr::null_mut(), l, slice, Some(red));
            for j in 2..n {
                let (o, l) = at((idx + n - j) % n);
                b.prim(
                    lane,
                    Prim::RecvReduceSend,
                    src(o),
                    std::ptr::null_mut(),
                    l,
                    slice,
                    Some(red),
                );
            }
            let (o, l) = at(idx);
            b.prim(lane, Prim::RecvReduceCopySend, src(o), dst(o), l, slice, Some(red));
            // All-gather phase.
            for j in 1..n - 1 {
                let (o, l) = at((idx + n - j) % n);
                b.prim(lane, Prim::RecvCopySend, std::ptr::null(), dst(o), l, slice, None);
            }
            let (o, l) = at((idx + 1) % n);
            b.prim(lane, Prim::Recv, std::ptr::null(), dst(o), l, slice, None);
            base += region;
        }
    }
}

/// Per (channel, loop) sub-range `[start, start+len)` of each rank's block of `count` elements.
fn block_ranges(count: usize, es: usize, d: &Decision, p: &SchedParams) -> Vec<(usize, usize, usize)> {
    let chunk_elems = chunk_elems(d, es);
    let mut out = Vec::new();
    for (ch, cs, cl) in channel_parts(count, d.nchannels, p) {
        let mut base = 0;
        while base < cl {
            let len = chunk_elems.min(cl - base);
            out.push((ch, cs + base, len));
            base += len;
        }
    }
    out
}

fn reduce_scatter(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, d: &Decision) {
    let p = b.p;
    let n = p.nranks;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es);
    let block = a.count * es;
    for (ch, s, l) in block_ranges(a.count, es, d, p) {
        let lane = Lane::Channel(ch);
        let idx = p.ring_index(ch);
        let (off, len) = (s * es, l * es);
        let src = |pos: usize| a.send.wrapping_add(p.ring_at(ch, pos) * block + off);
        b.prim(
            lane,
            Prim::Send,
            src((idx + n - 1) % n),
            std::ptr::null_mut(),
            len,
            slice,
            Some(red),
        );
        for j in 2..n {
            b.prim(
                lane,
                Prim::RecvReduceSend,
                src((idx + n - j) % n),
                std::ptr::null_mut(),
                len,
                slice,
                Some(red),
            );
        }
        b.prim(
            lane,
            Prim::RecvReduceCopy,
            src(idx),
            a.recv.wrapping_add(off),
            len,
            slice,
            Some(red),
        );
    }
}

fn all_gather(b: &mut Builder<'_>, a: &CollArgs, d: &Decision) {
    let p = b.p;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es);
    let block = a.count * es;
    for (ch, s, l) in block_ranges(a.count, es, d, p) {
        let lane = Lane::Channel(ch);
        let idx = p.ring_index(ch);
        let (off, len) = (s * es, l * es);
        let dst = |pos: usize| a.recv.wrapping_add(p.ring_at(ch, pos) * block + off);
        ring_all_gather_round(b, lane, idx, a.send.wrapping_add(off), dst, len, slice);
    }
}

/// One round of the ring all-gather on `lane` (NCCL's `runRing` in
/// `src/device/all_gather.h`: `copySend`, `recvCopySend` n-2 times, `recv`):
/// this rank's piece (`len` bytes at `src`) is stored at its own ring
/// position's place and sent on, the pieces of the n-2 positions before it are
/// received, stored and forwarded, the last is received and stored. `dst(pos)`
/// is where the piece of ring position `pos` goes; `idx` is this rank's
/// position.
#[allow(clippy::too_many_arguments)] // a lane, a position, one piece and its slicing
fn ring_all_gather_round(
    b: &mut Builder<'_>,
    lane: Lane,
    idx: usize,
    src: *const u8,
    dst: impl Fn(usize) -> *mut u8,
    len: usize,
    slice: usize,
) {
    let n = b.p.nranks;
    b.prim(lane, Prim::CopySend, src, dst(idx), len, slice, None);
    for j in 1..n - 1 {
        b.prim(
            lane,
            Prim::RecvCopySend,
            std::ptr::null(),
            dst((idx + n - j) % n),
            len,
            slice,
            None,
        );
    }
    b.prim(lane, Prim::Recv, std::ptr::null(), dst((idx + 1) % n), len, slice, None);
}

fn broadcast(b: &mut Builder<'_>, a: &CollArgs, root: usize, d: &Decision) {
    let p = b.p;
    let n = p.nranks;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es);
    for (ch, s, l) in block_ranges(a.count, es, d, p) {
        let lane = Lane::Channel(ch);
        let idx = p.ring_index(ch);
        let root_idx = p.channels[ch].ring.index(root).unwrap_or(0);
        let (off, len) = (s * es, l * es);
        let dst = a.recv.wrapping_add(off);
        if idx == root_idx {
            b.prim(lane, Prim::CopySend, a.send.wrapping_add(off), dst, len, slice, None);
        } else if (idx + 1) % n == root_idx {
            b.prim(lane, Prim::Recv, std::ptr::null(), dst, len, slice, None);
        } else {
            b.prim(lane, Prim::RecvCopySend, std::ptr::null(), dst, len, slice, None);
        }
    }
}

fn reduce(b: &mut Builder<'_>, a: &CollArgs, root: usize, red: DevRedOp, d: &Decision) {
    let p = b.p;
    let n = p.nranks;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es);
    for (ch, s, l) in block_ranges(a.count, es, d, p) {
        let lane = Lane::Channel(ch);
        let idx = p.ring_index(ch);
        let root_idx = p.channels[ch].ring.index(root).unwrap_or(0);
        let (off, len) = (s * es, l * es);
        let src = a.send.wrapping_add(off);
        if idx == root_idx {
            b.prim(
                lane,
                Prim::RecvReduceCopy,
                src,
                a.recv.wrapping_add(off),
                len,
                slice,
                Some(red),
            );
        } else if idx == (root_idx + 1) % n {
            b.prim(lane, Prim::Send, src, std::ptr::null_mut(), len, slice, Some(red));
        } else {
            b.prim(
                lane,
                Prim::RecvReduceSend,
                src,
                std::ptr::null_mut(),
                len,
                slice,
                Some(red),
            );
        }
    }
}
