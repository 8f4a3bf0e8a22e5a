//! Plans: the tasks a work item's operations become (`coll::schedule`), and
//! the one plan cache that lets a repeat of the last work item skip both the
//! tuning call and the schedule build.
//!
//! The schedule is a pure function of the operations (kind, buffers, count,
//! datatype, reduction) and their tuning decisions ([`PlanKey`]), so the plan
//! of the last work item that ran to the end is kept ([`PlanCache`]) and
//! reused, its streams' positions reset, by the next work item with the same
//! key (an application's loop, a benchmark): a dozen allocations fewer per
//! operation. The same cache answers the enqueuing thread's question "is this
//! the same call as last time" ([`PlanCache::decisions_for`]), which skips the
//! tuning call for it.

use ferroccl_kernels::{DataType, RedOp};

use crate::coll::desc::OpDesc;
use crate::coll::mem::OpMem;
use crate::coll::schedule::Task;
use crate::coll::{CollArgs, CollKind, PerOp};
use crate::transport::{ConnKey, ConnTable};
use crate::tune::Decision;

/// One operation as far as its schedule depends on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PlanKey {
    /// The operation.
    kind: CollKind,
    /// Input address.
    send: usize,
    /// Output address.
    recv: usize,
    /// Elements.
    count: usize,
    dtype: DataType,
    op: RedOp,
    /// The tuning decision it was scheduled with (`None` for send/receive).
    decision: Option<Decision>,
}

impl PlanKey {
    /// The key of operation `a` decided as `d`; `None` when its buffers need
    /// staging (their staging state is per operation, so never reused).
    fn of(a: &CollArgs, d: &Option<Decision>) -> Option<PlanKey> {
        (!a.mem.any_staged()).then_some(PlanKey {
            kind: a.kind,
            send: a.send as usize,
            recv: a.recv as usize,
            count: a.count,
            dtype: a.dtype,
            op: a.op,
            decision: *d,
        })
    }

    /// Whether `a` is the call of this key: kind, count, datatype and
    /// reduction (any buffers).
    fn same_call(&self, a: &CollArgs) -> bool {
        a.kind == self.kind && a.count == self.count && a.dtype == self.dtype && a.op == self.op
    }

    /// Whether `PlanKey::of(a, d)` is this key (without building it).
    fn same_op(&self, a: &CollArgs, d: &Option<Decision>) -> bool {
        self.same_call(a)
            && a.send as usize == self.send
            && a.recv as usize == self.recv
            && *d == self.decision
            && !a.mem.any_staged()
    }

    /// The keys of the operations `colls` decided as `plans` (empty when any
    /// operation cannot be reused).
    fn of_all(colls: &[CollArgs], plans: &[Option<Decision>]) -> Vec<PlanKey> {
        colls
            .iter()
            .zip(plans)
            .map(|(a, d)| PlanKey::of(a, d))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }
}

/// The tasks of a work item and what they were built from. The scratch
/// buffers the tasks point into (the all-gather + reduce AllReduce's blocks)
/// are wholly rewritten by every run before they are read.
pub(crate) struct Plan {
    /// What the tasks were built from, when they may be reused (empty: never).
    key: Vec<PlanKey>,
    pub tasks: Vec<Task>,
    /// Scratch buffers the tasks point into (held, never read here).
    _scratch: Vec<Vec<u8>>,
    /// Whether a receive connector of the tasks takes step announcements
    /// (`RecvConnector::wants_expect`).
    pub announce: bool,
    /// Whether every connector of the tasks is passive
    /// (`SendConnector::passive`, `Proxy::progress_tasks`).
    pub passive: bool,
    /// The plan's ProxyOps, computed by the first profiled run of the plan
    /// and reused by its repeats (`None`: not yet computed).
    pub proxy_ops: Option<Vec<ProxyOpPlan>>,
}

impl Plan {
    /// A fresh plan of `tasks` (and the `scratch` they point into) built for
    /// the operations `colls` decided as `plans`.
    pub fn new(tasks: Vec<Task>, scratch: Vec<Vec<u8>>, colls: &[CollArgs], plans: &[Option<Decision>]) -> Plan {
        Plan {
            key: PlanKey::of_all(colls, plans),
            tasks,
            _scratch: scratch,
            announce: true,
            passive: false,
            proxy_ops: None,
        }
    }

    /// Whether every task ran to its end.
    pub fn finished(&self) -> bool {
        self.tasks.iter().all(Task::finished)
    }
}

/// The plan of the last work item that ran to the end, kept for a repeat of
/// it (see the module docs).
#[derive(Default)]
pub(crate) struct PlanCache(Option<Box<Plan>>);

impl PlanCache {
    /// The decisions of the cached plan when `colls` repeat its operations
    /// (the same kinds, counts, datatypes and reductions, in the same order,
    /// on any buffers): `None` otherwise.
    pub fn decisions_for(&self, colls: &[CollArgs]) -> Option<PerOp<Option<Decision>>> {
        let c = self.0.as_ref()?;
        if c.key.len() != colls.len() {
            return None;
        }
        let mut plans = PerOp::new();
        for (a, k) in colls.iter().zip(&c.key) {
            if !k.same_call(a) {
                return None;
            }
            plans.push(k.decision);
        }
        Some(plans)
    }

    /// Takes the cached plan when `colls` decided as `plans` are its
    /// operations on its buffers, its tasks reset to their start; the cache
    /// is empty afterwards either way (a plan in use is not cached).
    pub fn take_repeat(&mut self, colls: &[CollArgs], plans: &[Option<Decision>]) -> Option<Box<Plan>> {
        self.0.take().and_then(|mut c| {
            let same = c.key.len() == colls.len() && (0..c.key.len()).all(|i| c.key[i].same_op(&colls[i], &plans[i]));
            same.then(|| {
                for t in &mut c.tasks {
                    t.reset();
                }
                c
            })
        })
    }

    /// Keeps `plan` for a repeat when it may be reused and ran to the end.
    pub fn keep(&mut self, plan: Box<Plan>) {
        if !plan.key.is_empty() && plan.finished() {
            self.0 = Some(plan);
        }
    }
}

/// A work item the proxy has begun: its tasks and how far each has run. An
/// enqueuing thread that ran the item for its spin window hands it to the proxy
/// thread in this state.
pub(crate) struct Running {
    /// The tasks (boxed: a work item's plan moves from the plan cache into
    /// its `Running` and back once per operation).
    pub plan: Box<Plan>,
    pub descs: Vec<OpDesc>,
    pub mems: Vec<OpMem>,
    /// Whether `profiling::begin` opened ProxyOp events (in
    /// `ProfBufs::proxy_ops`) that `ProfBufs::end` must stop.
    pub profiled: bool,
    /// Whether `Proxy::ready` has run (connections set up, steps announced).
    pub ready: bool,
    /// The plan comes from the plan cache ([`PlanCache`]): its tasks ran
    /// before, on connections that exist.
    pub repeat: bool,
}

// SAFETY: the tasks hold addresses of user buffers and of `scratch`, which
// move with them; the enqueue contract keeps the user buffers valid and
// untouched until the work completes, whichever thread runs it, and only the
// thread holding the proxy lock touches a `Running`.
unsafe impl Send for Running {}

/// One ProxyOp of a plan: the steps of one operation in one direction on one
/// connection that emits ProxyStep events (a NET connector).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProxyOpPlan {
    /// The operation (index in the work item).
    pub desc: u32,
    pub is_send: bool,
    pub key: ConnKey,
    pub nsteps: usize,
    /// The largest step in bytes (the ProxyOp's `chunkSize`).
    pub bytes: usize,
}

/// The ProxyOps of `tasks`, in operation order: every (op, peer) pair sorted
/// by (operation, direction, connection), runs of equal keys counted, and
/// connections that emit no ProxyStep events left out.
pub(crate) fn proxy_op_plan(tasks: &[Task], conns: &mut ConnTable) -> Vec<ProxyOpPlan> {
    let mut pairs = Vec::new();
    for t in tasks {
        for op in t.ops() {
            for peer in op.send_to.iter() {
                pairs.push(((op.desc, true, t.lane.key(peer)), op.bytes));
            }
            for peer in op.recv_from.iter() {
                pairs.push(((op.desc, false, t.lane.key(peer)), op.bytes));
            }
        }
    }
    pairs.sort_unstable_by_key(|p| p.0);
    let mut out = Vec::new();
    for run in pairs.chunk_by(|a, b| a.0 == b.0) {
        let (desc, is_send, key) = run[0].0;
        let capable = if is_send {
            conns.send(&key).is_some_and(|c| c.prof_capable())
        } else {
            conns.recv(&key).is_some_and(|c| c.prof_capable())
        };
        if capable {
            out.push(ProxyOpPlan {
                desc,
                is_send,
                key,
                nsteps: run.len(),
                bytes: run.iter().map(|p| p.1).max().unwrap_or(0),
            });
        }
    }
    out
}
