//! CollNetDirect AllReduce (NCCL 2.30.7 `src/device/all_reduce.h`,
//! `RunWorkColl<ncclFuncAllReduce, T, RedOp, NCCL_ALGO_COLLNET_DIRECT,
//! NCCL_PROTO_SIMPLE>`), over the pattern of [`crate::graph::collnet::DirectPos`].
//!
//! Per channel, the channel's part of the buffer is cut in loop steps of
//! `nHeads` chunks; chunk `h` of every step belongs to the host's head `h`.
//! Four roles run as concurrent streams, as NCCL splits the block's threads
//! into scatter, reduce, broadcast and gather groups; scatter and reduce on
//! the channel's "up" lane ([`Lane::ChannelUp`], NCCL's connIndex 1 of
//! `collnetDirect`), gather and broadcast on its lane (connIndex 0), so two
//! local ranks that are each other's head send both ways on separate
//! connections:
//!
//! * **scatter** (every rank): chunk `h` of the input to head `h`,
//!   for every head but itself, starting at head `shift` (`prims.scatter`);
//! * **reduce** (a head): its chunk from every other local rank,
//!   reduced with its own input, to the network (peer `nranks`, the CollNet
//!   plugin's `iallreduce` across head `h` of every host; `recvReduceSend`, or
//!   `send` with nobody below);
//! * **broadcast** (a head): the network's result into the output
//!   and to every other local rank (`recvCopySend` with the post-operation, or
//!   `recv`);
//! * **gather** (every rank): chunk `h` of the output from head `h`,
//!   for every head but itself (`prims.gather`).
//!
//! The network sums for `Avg` and PreMulSum: pre-operations run where the data
//! enters (a rank's scatter, a head's own input), an integer average's division
//! at the head on the way back, as in CollNetChain. The network connection
//! carries no operation header (the plugin would reduce it with the data); the
//! local connections carry it on their first step as every other pattern's.

use ferroccl_kernels::DevRedOp;

use super::{Builder, Lane, Peers, Prim, channel_parts, chunk_elems, slice_limit};
use crate::coll::CollArgs;
use crate::coll::ids::Decision;
use crate::error::Error;

/// Stream of the scatter role (on the channel's "up" lane).
const SCATTER: usize = 0;
/// Stream of a head's reduce-to-network role (on the "up" lane).
const REDUCE: usize = 1;
/// Stream of the gather role (on the channel's lane).
const GATHER: usize = 0;
/// Stream of a head's broadcast-from-network role (on the channel's lane).
const BCAST: usize = 1;

/// Builds CollNetDirect AllReduce steps for `a` (see the module docs).
///
/// Errors: a channel without a CollNetDirect position (CollNet not connected
/// there, or a host with more ranks than CollNetDirect serves).
pub(super) fn all_reduce(b: &mut Builder<'_>, a: &CollArgs, red: DevRedOp, d: &Decision) -> Result<(), Error> {
    let p = b.p;
    let es = a.dtype.size();
    let slice = slice_limit(p.ring_step, es);
    // One chunk of a loop step at most one FIFO step of the network link, so a
    // head's chunk is one iallreduce (NCCL's chunkSize for CollNet is a step).
    let chunk = chunk_elems(d, es).min(slice / es).max(1);
    let net = p.nranks;
    for (ch, cs, cl) in channel_parts(a.count, d.nchannels, p) {
        let pos = p.collnet_direct.get(ch).ok_or_else(|| {
            Error::Internal(format!(
                "CollNetDirect chosen but channel {ch} has no CollNetDirect position ({} known)",
                p.collnet_direct.len()
            ))
        })?;
        // Gather and broadcast on the channel's connections, scatter and
        // reduce on its "up" connections (NCCL's connIndex 0 and 1).
        let (lane, up_lane) = (Lane::Channel(ch), Lane::ChannelUp(ch));
        for l in [lane, up_lane] {
            for sends in [true, false] {
                if !b.headered.contains(&(l, sends, net)) {
                    b.headered.push((l, sends, net));
                }
            }
        }
        let nheads = pos.heads.len().max(1);
        let loop_elems = nheads * chunk;
        let down = Peers::of(&pos.down);
        let mut base = 0;
        while base < cl {
            // Chunk `h` of this loop step, in bytes from the buffers' start.
            let part = |h: usize| {
                let s = (base + h * chunk).min(cl);
                let e = (base + (h + 1) * chunk).min(cl);
                ((cs + s) * es, (e - s) * es)
            };
            for k in 0..nheads {
                let h = (k + pos.shift) % nheads;
                let (off, len) = part(h);
                if len == 0 || Some(h) == pos.head_rank {
                    continue;
                }
                let head = Peers::one(pos.heads[h]);
                b.prim_with(
                    up_lane,
                    SCATTER,
                    Prim::Send,
                    (Peers::NONE, head),
                    a.send.wrapping_add(off),
                    std::ptr::null_mut(),
                    len,
                    slice,
                    Some(red),
                );
                b.prim_with(
                    lane,
                    GATHER,
                    Prim::Recv,
                    (head, Peers::NONE),
                    std::ptr::null(),
                    a.recv.wrapping_add(off),
                    len,
                    slice,
                    None,
                );
            }
            if let Some(h) = pos.head_rank {
                let (off, len) = part(h);
                if len > 0 {
                    let to_net = Peers::one(net);
                    let (up_prim, up_from) = if down.len() == 0 {
                        (Prim::Send, Peers::NONE)
                    } else {
                        (Prim::RecvReduceSend, down)
                    };
                    b.prim_with(
                        up_lane,
                        REDUCE,
                        up_prim,
                        (up_from, to_net),
                        a.send.wrapping_add(off),
                        std::ptr::null_mut(),
                        len,
                        slice,
                        Some(red),
                    );
                    let (dn_prim, dn_to) = if down.len() == 0 {
                        (Prim::Recv, Peers::NONE)
                    } else {
                        (Prim::RecvCopySend, down)
                    };
                    let post = red.has_post_op().then_some(red);
                    b.prim_with(
                        lane,
                        BCAST,
                        dn_prim,
                        (to_net, dn_to),
                        std::ptr::null(),
                        a.recv.wrapping_add(off),
                        len,
                        slice,
                        post,
                    );
                }
            }
            base += loop_elems;
        }
    }
    Ok(())
}
