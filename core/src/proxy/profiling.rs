//! Profiler bookkeeping of the proxy: the events of a work item (Group,
//! Coll/P2p, ProxyOp, and the ProxyStep events its NET connectors emit),
//! opened when the item is ready and stopped when it ends, as NCCL 2.30.7's
//! `hostStreamPlanTask` (`src/enqueue.cc`) and `ncclProxyOpToArgs`
//! (`src/proxy.cc`) emit them.

use std::sync::Arc;

use super::plan::{Plan, proxy_op_plan};
use super::work::Work;
use crate::coll::CollKind;
use crate::coll::desc::OpDesc;
use crate::profiler::{self, Event, EventHandle, Profiler, StateArgs, StepProf, state, wants};
use crate::transport::ConnTable;

/// The vectors of [`ProfBufs::begin`] / [`ProfBufs::end`], kept across work
/// items so that emitting a work item's events allocates nothing once they
/// have grown.
#[derive(Default)]
pub(crate) struct ProfBufs {
    /// Each operation's Coll/P2p event.
    ops_ev: Vec<EventHandle>,
    /// The work item's ProxyOp events, stopped at its end.
    proxy_ops: Vec<EventHandle>,
}

impl ProfBufs {
    /// Emits the start of a work item's events, as NCCL's `hostStreamPlanTask`
    /// and `ncclProxyOpToArgs` do: the Group event, each operation's Coll/P2p
    /// event (under its CollApi/P2pApi event; the Group for v1–v4 plugins),
    /// one ProxyOp event per (operation, channel, peer, direction) that goes
    /// through a NET connection (recording `ProxyOpInProgress_v4`), with the
    /// connection told to emit ProxyStep events for that many steps; then
    /// stops Coll/P2p and Group (zero host duration, as in NCCL: their
    /// completion is that of their children). Returns whether events were
    /// opened (`false` when the mask wants none). The ProxyOps come from the
    /// plan ([`proxy_op_plan`], computed once per plan).
    pub fn begin(
        &mut self,
        p: &Arc<Profiler>,
        conns: &mut ConnTable,
        work: &Work,
        descs: &[OpDesc],
        plan: &mut Plan,
    ) -> bool {
        let all = work.tags.iter().fold(0u64, |a, t| a | t.mask);
        if all & wants::GROUP_ == 0 {
            return false;
        }
        let tag = |i: usize| work.tags.get(i).copied().unwrap_or_default();
        let group = p.start(EventHandle::NULL, &Event::Group);
        let ops_ev = &mut self.ops_ev;
        ops_ev.clear();
        for (i, a) in work.colls.iter().enumerate() {
            let t = tag(i);
            let decision = work.plans.get(i).copied().flatten();
            let ev = match a.kind {
                CollKind::Send { peer } | CollKind::Recv { peer } => {
                    if t.mask & wants::P2P_ == 0 {
                        ops_ev.push(EventHandle::NULL);
                        continue;
                    }
                    Event::P2p {
                        func: a.kind.nccl_name(),
                        buff: if matches!(a.kind, CollKind::Send { .. }) {
                            a.send as *mut _
                        } else {
                            a.recv.cast()
                        },
                        dtype: profiler::dtype_name(a.dtype),
                        count: a.count,
                        peer: peer as i32,
                        nchannels: 1,
                        parent_group: group,
                    }
                }
                k => {
                    if t.mask & wants::COLL_ == 0 {
                        ops_ev.push(EventHandle::NULL);
                        continue;
                    }
                    // NCCL's task counts AllGather and Broadcast in bytes of ncclInt8.
                    let bytes = matches!(k, CollKind::AllGather | CollKind::Broadcast { .. });
                    Event::Coll {
                        seq: descs.get(i).map_or(0, |d| d.seq),
                        func: k.nccl_name(),
                        send: a.send.cast(),
                        recv: a.recv.cast(),
                        count: if bytes { a.count * a.dtype.size() } else { a.count },
                        root: match k {
                            CollKind::Broadcast { root } | CollKind::Reduce { root } => root as i32,
                            _ => 0,
                        },
                        dtype: if bytes {
                            c"ncclInt8"
                        } else {
                            profiler::dtype_name(a.dtype)
                        },
                        nchannels: decision.map_or(1, |d| d.nchannels.min(255) as u8),
                        nwarps: 0,
                        algo: decision.map_or(c"RING", |d| d.algo.upper_name()),
                        proto: decision.map_or(c"SIMPLE", |d| d.proto.upper_name()),
                        parent_group: group,
                    }
                }
            };
            ops_ev.push(p.start(t.api, &ev));
        }
        let proxy_ops = &mut self.proxy_ops;
        proxy_ops.clear();
        let tasks = &plan.tasks;
        let plan_ops = plan.proxy_ops.get_or_insert_with(|| proxy_op_plan(tasks, conns));
        for o in plan_ops.iter() {
            let t = tag(o.desc as usize);
            if t.mask & wants::PROXY_OP_ == 0 {
                continue;
            }
            let parent = ops_ev.get(o.desc as usize).copied().unwrap_or_default();
            let h = p.start(
                parent,
                &Event::ProxyOp {
                    channel: o.key.channel.min(255) as u8,
                    peer: o.key.peer as i32,
                    nsteps: o.nsteps as i32,
                    chunk: o.bytes.min(i32::MAX as usize) as i32,
                    is_send: o.is_send,
                },
            );
            p.record(h, state::OP_IN_PROGRESS, StateArgs::None);
            if t.mask & wants::PROXY_STEP_ != 0 {
                let sp = StepProf {
                    prof: p,
                    op: h,
                    mask: t.mask,
                };
                if o.is_send {
                    if let Some(c) = conns.send(&o.key) {
                        c.prof_attach(sp, o.nsteps);
                    }
                } else if let Some(c) = conns.recv(&o.key) {
                    c.prof_attach(sp, o.nsteps);
                }
            }
            proxy_ops.push(h);
        }
        for &h in ops_ev.iter() {
            p.stop(h);
        }
        p.stop(group);
        true
    }

    /// Stops a work item's ProxyOp events (all its steps are done, or the work
    /// failed and its connections are closing) and forgets steps never begun.
    pub fn end(&mut self, p: Option<&Arc<Profiler>>, conns: &mut ConnTable) {
        for c in conns.sends_mut() {
            c.prof_detach();
        }
        for c in conns.recvs_mut() {
            c.prof_detach();
        }
        if let Some(p) = p {
            for &h in &self.proxy_ops {
                p.stop(h);
            }
        }
        self.proxy_ops.clear();
    }
}
