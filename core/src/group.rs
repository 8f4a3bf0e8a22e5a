//! Group calls (`ncclGroupStart` / `ncclGroupEnd`, `src/group.cc`).
//!
//! Between [`group_start`] and the matching [`group_end`], operations issued on this
//! thread are collected instead of enqueued; `group_end` hands each communicator
//! all of its operations as one unit, which the proxy progresses together — so
//! a group of sends and receives (e.g. AllToAll) cannot deadlock on ordering.
//! Groups nest; only the outermost `group_end` launches.
//!
//! One-sided calls (`Comm::put_signal`, `signal`, `wait_signal`) inside a group are
//! checked at call time and deferred too (NCCL 2.30.7 `src/enqueue.cc`
//! `rmaTaskAppend` appends them to the planner's per-context RMA queues): at the
//! outermost `group_end` they are handed to their communicators' RMA threads first,
//! context by context and in call order within a context, and the group's
//! collectives after them, as `ncclLaunchPrepare` (`src/enqueue.cc`) builds the RMA
//! plans (`src/rma/rma.cc` `scheduleRmaTasksToPlan`) before the collective ones.
//!
//! Streams are joined per communicator, as NCCL joins them: `taskAppend` adds every
//! operation's stream to the planner's list, and `ncclLaunchPrepare` makes the plans
//! (RMA and collective) wait for the earlier work of every stream in that list and
//! every stream's later work wait for the plans (`ncclLaunchFinish`). Here each
//! deferred operation of a communicator (one-sided calls, and its collectives as one
//! unit) is registered on every stream that the communicator's operations of the
//! group named: it starts after the earlier work of all of them, and later work on
//! any of them starts after it. Groups do not join the streams of different
//! communicators (NCCL plans each communicator apart).

use std::cell::RefCell;
use std::sync::Arc;

use crate::coll::CollArgs;
use crate::error::Error;
use crate::profiler::{self, Event, EventHandle, Profiler, StateArgs, state, wants};
use crate::proxy::ProxyHandle;
use crate::stream::Stream;

pub(crate) use crate::profiler::ApiTag;

/// What hands a checked one-sided call to its RMA thread, ordered behind (and before
/// the later work of) each of the streams it is given.
pub(crate) type RmaSubmit = Box<dyn FnOnce(&[&Stream]) -> Result<(), Error>>;

/// A deferred one-sided call: its RMA context, communicator and stream, and its
/// hand-over.
pub(crate) struct RmaTask {
    ctx: usize,
    comm: Arc<ProxyHandle>,
    stream: Stream,
    submit: RmaSubmit,
}

#[derive(Default)]
struct GroupState {
    depth: usize,
    ops: Vec<(Arc<ProxyHandle>, CollArgs, Stream, ApiTag)>,
    /// One-sided calls of the open group, in call order.
    rma: Vec<RmaTask>,
    /// The open GroupApi event (NCCL's thread-local `ncclProfilerApiState`).
    api: Option<(Arc<Profiler>, EventHandle, u64)>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::default();
}

/// `ncclGroupStart`: opens (or nests) a group on this thread.
pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// `ncclGroupEnd`: closes a group; the outermost one enqueues everything collected.
///
/// Errors: [`Error::InvalidUsage`] without a matching [`group_start`]; otherwise
/// the first enqueue error of the group's one-sided calls, then of its collectives
/// (every communicator still gets its operations or its error).
pub fn group_end() -> Result<(), Error> {
    let (ops, mut rma, outermost) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::InvalidUsage("ncclGroupEnd without ncclGroupStart".into()));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            (std::mem::take(&mut g.ops), std::mem::take(&mut g.rma), true)
        } else {
            (Vec::new(), Vec::new(), false)
        })
    })?;
    // Partition by communicator, keeping the order of first appearance; each
    // communicator's streams are those of its one-sided calls and collectives.
    type PerComm = (Arc<ProxyHandle>, Vec<CollArgs>, Vec<Stream>, Vec<ApiTag>);
    let mut comms: Vec<PerComm> = Vec::new();
    let slot = |comms: &mut Vec<PerComm>, c: &Arc<ProxyHandle>, s: &Stream| {
        let i = match comms.iter().position(|(x, ..)| Arc::ptr_eq(x, c)) {
            Some(i) => i,
            None => {
                comms.push((c.clone(), Vec::new(), Vec::new(), Vec::new()));
                comms.len() - 1
            }
        };
        if !comms[i].2.iter().any(|x| x.same(s)) {
            comms[i].2.push(s.clone());
        }
        i
    };
    for t in &rma {
        slot(&mut comms, &t.comm, &t.stream);
    }
    for (c, a, s, t) in ops {
        let i = slot(&mut comms, &c, &s);
        comms[i].1.push(a);
        comms[i].3.push(t);
    }
    if outermost {
        api_group_end_start();
    }
    let mut first_err = None;
    // One-sided calls first (NCCL's RMA plans precede the collective ones), context by
    // context (`scheduleRmaTasksToPlan` drains the lowest non-empty context queue
    // first), in call order within a context: a stable sort.
    rma.sort_by_key(|t| t.ctx);
    for t in rma {
        let streams = comms
            .iter()
            .find(|(x, ..)| Arc::ptr_eq(x, &t.comm))
            .map_or_else(|| vec![&t.stream], |(_, _, ss, _)| ss.iter().collect());
        if let Err(e) = (t.submit)(&streams) {
            first_err.get_or_insert(e);
        }
    }
    for (c, colls, streams, tags) in comms {
        if colls.is_empty() {
            continue;
        }
        let what = crate::coll::WorkWhat::of(&colls);
        let refs: Vec<&Stream> = streams.iter().collect();
        if let Err(e) = c.submit(colls.into(), tags.into(), &refs, what) {
            first_err.get_or_insert(e);
        }
    }
    if outermost {
        api_group_stop();
    }
    first_err.map_or(Ok(()), Err)
}

/// Emits the API-level events of one operation (NCCL's `collTaskAppend` /
/// `p2pTaskAppend` with `ncclProfilerStartGroupApiEvent`,
/// `ncclProfilerStartCollApiEvent` / `P2pApiEvent`): starts this thread's
/// GroupApi event if none is open (sampling the activation mask, recording
/// `GroupStartApiStop`), then starts and stops the CollApi/P2pApi event under
/// it. Returns what the operation carries to the proxy thread.
pub(crate) fn api_event(prof: &Arc<Profiler>, args: &CollArgs) -> ApiTag {
    use crate::coll::CollKind;
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.api.is_none() {
            let mask = profiler::mask();
            let mut h = EventHandle::NULL;
            if mask & wants::GROUP_API_ != 0 {
                // 1 = the implicit group of a standalone call; ≥ 2 inside ncclGroupStart.
                let depth = g.depth as i32 + 1;
                h = prof.start(EventHandle::NULL, &Event::GroupApi { depth });
                prof.record(h, state::GROUP_START_API_STOP, StateArgs::None);
            }
            g.api = Some((prof.clone(), h, mask));
        }
        let (_, group_api, mask) = g
            .api
            .as_ref()
            .map_or((None, EventHandle::NULL, 0), |(p, h, m)| (Some(p), *h, *m));
        let (ev, want) = match args.kind {
            CollKind::Send { .. } | CollKind::Recv { .. } => (
                Event::P2pApi {
                    func: args.kind.nccl_name(),
                    count: args.count,
                    dtype: profiler::dtype_name(args.dtype),
                },
                wants::P2P_API_,
            ),
            k => (
                Event::CollApi {
                    func: k.nccl_name(),
                    count: args.count,
                    dtype: profiler::dtype_name(args.dtype),
                    root: match k {
                        CollKind::Broadcast { root } | CollKind::Reduce { root } => root as i32,
                        _ => 0,
                    },
                },
                wants::COLL_API_,
            ),
        };
        if mask & want == 0 {
            return ApiTag {
                api: EventHandle::NULL,
                mask,
            };
        }
        let h = prof.start(group_api, &ev);
        prof.stop(h);
        ApiTag { api: h, mask }
    })
}

/// `GroupEndApiStart` on the open GroupApi event (the outermost group end
/// begins launching).
pub(crate) fn api_group_end_start() {
    GROUP.with(|g| {
        if let Some((p, h, _)) = &g.borrow().api {
            p.record(*h, state::GROUP_END_API_START, StateArgs::None);
        }
    })
}

/// Stops the open GroupApi event (after the work was handed to the proxy threads).
pub(crate) fn api_group_stop() {
    let open = GROUP.with(|g| g.borrow_mut().api.take());
    if let Some((p, h, _)) = open {
        p.stop(h);
    }
}

/// Whether a group is open on this thread.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Defers a one-sided call of context `ctx` on communicator `comm` and `stream` to
/// the open group's end; returns it back when no group is open.
pub(crate) fn try_defer_rma(
    ctx: usize,
    comm: &Arc<ProxyHandle>,
    stream: &Stream,
    submit: RmaSubmit,
) -> Option<RmaSubmit> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Some(submit);
        }
        g.rma.push(RmaTask {
            ctx,
            comm: comm.clone(),
            stream: stream.clone(),
            submit,
        });
        None
    })
}

/// Adds an operation to the open group (the caller checked [`in_group`]).
pub(crate) fn add(comm: &Arc<ProxyHandle>, args: CollArgs, stream: &Stream, tag: ApiTag) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        debug_assert!(g.depth > 0, "group::add outside a group");
        g.ops.push((comm.clone(), args, stream.clone(), tag));
    })
}
