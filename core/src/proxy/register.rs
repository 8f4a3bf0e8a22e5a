//! Registration of user memory with the connectors (NCCL's user-buffer
//! registration, `src/register/`): large operations' buffers are registered
//! with the connectors their steps use, so steps go on the wire straight from
//! user memory and land straight in it; registrations are released once the
//! work item ends and the connectors are idle.

use crate::coll::schedule::{Lane, Task};
use crate::coll::{CollArgs, CollKind};
use crate::transport::ConnTable;

/// Registers the user buffers of `colls` of at least `min` bytes with the
/// connections their tasks use, so steps go on the wire straight from user
/// memory and land straight in it (see `exec::user_source`,
/// `exec::recv_target`) instead of through FIFO copies.
///
/// Send side: outputs always (each output element is written once per
/// operation, before it is sent); inputs of collectives always (a step waits
/// for in-flight sends from user memory before writing it, see
/// `exec::try_run`); a p2p input only when no output of this work overlaps it.
/// Receive side: an output only when no input of this work
/// overlaps it (a receive posted ahead must not clobber data still to be
/// read). Buffers a rank does not touch (`Broadcast` input off the root,
/// `Reduce` output off the root) are left alone.
pub(crate) fn register_user(
    conns: &mut ConnTable,
    rank: usize,
    colls: &[CollArgs],
    tasks: &[Task],
    min: usize,
) -> bool {
    if !colls.iter().any(|a| a.bytes.0.max(a.bytes.1) >= min) {
        // Nothing to register (small operations): skip the bookkeeping below.
        return false;
    }
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for a in colls {
        let (sb, rb) = a.bytes;
        let reads = !matches!(a.kind, CollKind::Broadcast { root } if root != rank);
        let writes = !matches!(a.kind, CollKind::Reduce { root } if root != rank);
        // Device memory is registered only where GPUDirect RDMA is possible
        // (the connector decides, `transport::gdr`); otherwise its steps go
        // through the FIFOs, staged (`coll::mem`).
        if reads && !a.send.is_null() && sb > 0 {
            inputs.push((a.kind, a.send, sb, a.mem.send.space));
        }
        if writes && !a.recv.is_null() && rb > 0 {
            outputs.push((a.kind, a.recv as *const u8, rb, a.mem.recv.space));
        }
    }
    let coll = |k: CollKind| !matches!(k, CollKind::Send { .. } | CollKind::Recv { .. });
    type Buf = (CollKind, *const u8, usize, ferroccl_kernels::MemorySpace);
    let overlaps = |set: &[Buf], p: *const u8, n: usize| {
        set.iter()
            .any(|&(_, q, m, _)| (p as usize) < q as usize + m && (q as usize) < p as usize + n)
    };
    // Collective steps wait for in-flight sends before writing user memory
    // (`SendConnector::user_busy`), so their inputs may overlap outputs; a p2p
    // send and a p2p receive run on different lanes, so there they must not.
    let send_inputs: Vec<_> = inputs
        .iter()
        .copied()
        .filter(|&(kind, p, n, _)| n >= min && (coll(kind) || !overlaps(&outputs, p, n)))
        .collect();
    let recv_outputs: Vec<_> = outputs
        .iter()
        .copied()
        .filter(|&(_, p, n, _)| n >= min && !overlaps(&inputs, p, n))
        .collect();
    outputs.retain(|&(_, _, n, _)| n >= min);
    for t in tasks {
        // Which operations' buffers this lane's connectors may carry.
        let mine = |kind: CollKind| match t.lane {
            Lane::Channel(_) | Lane::ChannelUp(_) => coll(kind),
            Lane::P2pSend(peer) => kind == (CollKind::Send { peer }),
            Lane::P2pRecv(peer) => kind == (CollKind::Recv { peer }),
            Lane::Local => false,
        };
        let send_bufs: Vec<_> = match t.lane {
            Lane::Channel(_) | Lane::ChannelUp(_) => send_inputs.iter().chain(&outputs).copied().collect(),
            _ => send_inputs.clone(),
        };
        for k in &t.conns.send {
            if let Some(conn) = conns.send(k) {
                for &(kind, p, n, space) in &send_bufs {
                    if mine(kind) {
                        conn.register_user(p, n, space);
                    }
                }
            }
        }
        for k in &t.conns.recv {
            if let Some(conn) = conns.recv(k) {
                for &(kind, p, n, space) in &recv_outputs {
                    if mine(kind) {
                        conn.register_user(p, n, space);
                    }
                }
            }
        }
    }
    true
}

/// Asks every connector to release the user memory it registered (a connector
/// releases only once no send from that memory is in flight).
pub(crate) fn release_user(conns: &mut ConnTable) {
    for c in conns.sends_mut() {
        c.release_user();
    }
    for c in conns.recvs_mut() {
        c.release_user();
    }
}
