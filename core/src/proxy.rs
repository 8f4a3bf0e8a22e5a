//! The per-communicator proxy thread: it executes enqueued work in order and
//! drives the plugin (`isend`/`irecv`/`test`) for every connection, like NCCL's
//! proxy progress thread (`src/proxy.cc`) fused with the host "kernel" that
//! moves and reduces data (there is no GPU here yet).
//!
//! Every wait in the loop is bounded: no progress on any lane for the
//! communicator's timeout fails the operation with [`Error::Timeout`] naming
//! what it was waiting for; the abort flag is checked on every idle turn. On the
//! first error the thread records it as the communicator's asynchronous error
//! and closes all its connections, so peers blocked on this rank fail fast too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bootstrap::Bootstrap;
use crate::coll::desc::OpDesc;
use crate::coll::exec::{self, ExecCx};
use crate::coll::schedule::{self, Lane, SchedParams, Task, TaskConns};
use crate::coll::{CollArgs, CollKind, WorkWhat};
use crate::diag::{self, DIAG_TAG, NOTIFIED, Report};
use crate::error::Error;
use crate::profiler::ApiTag;
use crate::profiler::{self, Event, EventHandle, Profiler, StateArgs, StepProf, state, wants};
use crate::stream::{Completion, Stream};
use crate::transport::setup::{self, ConnPlan, TransportSetup};
use crate::transport::{ConnKey, ConnTable};
use crate::tune::{Decision, Tuning};

/// One unit of work: the operations of one group (or a single collective) on this
/// communicator, or an empty list (a marker used by `finalize`).
pub(crate) struct Work {
    pub colls: PerOp<CollArgs>,
    /// The tuning decision of each collective (`None` for send/receive).
    pub plans: PerOp<Option<Decision>>,
    /// Each operation's profiler tag (its API event and mask sample).
    pub tags: PerOp<ApiTag>,
    /// Its completion record, once registered (queued work); `None` while an
    /// enqueuing thread runs it before registering anything
    /// ([`ProxyHandle::submit`]).
    pub done: Option<Arc<Completion>>,
    /// Work that must finish first (the streams' previous operations).
    pub deps: Deps,
    /// Description for logs and errors.
    pub what: WorkWhat,
}

/// One entry per operation of a work item: a lone collective (the common
/// case) needs no heap allocation.
pub(crate) type PerOp<T> = smallvec::SmallVec<[T; 1]>;

/// Work an item waits for (see [`Stream::push`]): at most a stream's previous
/// operation and its device gate without a heap allocation.
pub(crate) type Deps = smallvec::SmallVec<[Arc<Completion>; 2]>;

/// Work whose buffers are all at most this many bytes waits for queued work
/// (at most the proxy's spin window) so that it can run on the enqueuing thread
/// (`ProxyHandle::submit`); larger work, where the hand-off is small beside the
/// transfer, queues at once and keeps the caller free.
const INLINE_WAIT_MAX_BYTES: usize = 64 << 10;

/// While a work item keeps moving, [`Proxy::progress_tasks`] checks its
/// deadline after each move past this many (each move is at least one step,
/// so the check lags the deadline by a few steps at most, and a small
/// operation that runs straight through never reads the clock).
const MOVES_BEFORE_CLOCK_READS: u32 = 4;

/// State shared between the communicator handle and its proxy thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub abort: Arc<AtomicBool>,
    /// The first error (set only through `set_error`, which keeps `failed` in step).
    error: Mutex<Option<Error>>,
    /// Whether `error` holds an error: every operation asks, so the common
    /// answer (none) takes no lock.
    failed: AtomicBool,
    /// Work submitted and not yet finished (taken and returned without a lock:
    /// the enqueuing thread and the proxy touch it once per operation each).
    queued: AtomicUsize,
    /// Enqueuing threads blocked in [`Shared::acquire`]; `release` takes the
    /// lock and signals only when this is non-zero.
    blocked: AtomicUsize,
    /// Enqueuing threads asleep in [`Shared::wait_empty`] (signalled when the
    /// queue empties).
    idle_waiters: AtomicUsize,
    /// The lock `drained` waits with (holds nothing: it orders a blocked
    /// thread's last look at `queued` before its sleep against `release`'s signal).
    gate: Mutex<()>,
    /// Signalled when queued work has drained to the low watermark.
    drained: Condvar,
    /// Most work items queued at once (`FERROCCL_MAX_QUEUED_OPS`); submitting
    /// more blocks until the queue has drained to half of it (NCCL blocks the
    /// same way when its bounded work FIFO is full). Waking the blocked thread
    /// at half rather than at every free slot keeps a thread that enqueues
    /// faster than the proxy drains from being woken once per operation: on a
    /// host where it shares a core with the proxy each wake-up is two context
    /// switches in the proxy's way.
    max_queued: usize,
}

impl Shared {
    /// State for a new communicator with abort flag `abort`, queueing at most
    /// `max_queued` work items.
    pub(crate) fn new(abort: Arc<AtomicBool>, max_queued: usize) -> Shared {
        Shared {
            abort,
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            blocked: AtomicUsize::new(0),
            idle_waiters: AtomicUsize::new(0),
            gate: Mutex::new(()),
            drained: Condvar::new(),
            max_queued: max_queued.max(1),
        }
    }

    pub(crate) fn error(&self) -> Option<Error> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes a free queue slot without blocking; whether one was free.
    fn try_take(&self) -> bool {
        self.queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                (q < self.max_queued).then_some(q + 1)
            })
            .is_ok()
    }

    /// Takes a queue slot, waiting while `max_queued` items are queued. Errors:
    /// the communicator's error, or [`Error::Aborted`], if either happens while waiting.
    fn acquire(&self) -> Result<(), Error> {
        if self.try_take() {
            return Ok(());
        }
        let mut g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        self.blocked.fetch_add(1, Ordering::SeqCst);
        let r = loop {
            // `blocked` is raised before this look (both SeqCst): a `release`
            // that this look misses sees `blocked` and signals under `gate`.
            if self.try_take() {
                break Ok(());
            }
            if let Some(e) = self.error() {
                break Err(e);
            }
            if self.abort.load(Ordering::Relaxed) {
                break Err(Error::Aborted(
                    "communicator aborted while the caller waited for queue space".into(),
                ));
            }
            g = self
                .drained
                .wait_timeout(g, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        self.blocked.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Waits, asleep, until no work is queued or `window` has passed; whether
    /// the queue is empty (the clock is read only when it is not).
    fn wait_empty(&self, window: Duration) -> bool {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return true;
        }
        let until = Instant::now() + window;
        let mut g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        self.idle_waiters.fetch_add(1, Ordering::SeqCst);
        let empty = loop {
            if self.queued.load(Ordering::SeqCst) == 0 {
                break true;
            }
            let now = Instant::now();
            if now >= until || self.abort.load(Ordering::Relaxed) {
                break false;
            }
            g = self
                .drained
                .wait_timeout(g, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        self.idle_waiters.fetch_sub(1, Ordering::SeqCst);
        empty
    }

    /// Returns a queue slot; wakes blocked enqueuers once the queue has drained
    /// to half of `max_queued`, and `wait_empty` callers once it is empty.
    fn release(&self) {
        let prev = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| Some(q.saturating_sub(1)))
            .unwrap_or(0);
        let now = prev.saturating_sub(1);
        if (now <= self.max_queued / 2 && self.blocked.load(Ordering::SeqCst) > 0)
            || (now == 0 && self.idle_waiters.load(Ordering::SeqCst) > 0)
        {
            let _g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
            self.drained.notify_all();
        }
    }

    fn set_error(&self, e: &Error) {
        let mut g = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(e.clone());
            self.failed.store(true, Ordering::Release);
        }
    }
}

/// The handle the communicator, enqueue and group calls use to hand work to the
/// proxy thread and to wait for or stop it (NCCL's `ncclProxyState` seen from the
/// user's threads).
pub(crate) struct ProxyHandle {
    /// Ranks in the communicator (argument checks).
    pub nranks: usize,
    /// The communicator's tuning: every collective is decided here, on the
    /// enqueuing thread, before it is queued (NCCL decides at `ncclGroupEnd`).
    pub tuning: Arc<Tuning>,
    /// State shared with the thread (abort flag, first error).
    pub shared: Arc<Shared>,
    /// The communicator's profiler plugin, if one is loaded and initialised.
    pub profiler: Option<Arc<Profiler>>,
    /// The proxy state; the proxy thread locks it for each item it runs, and
    /// an enqueuing thread for work it runs itself.
    core: Arc<Mutex<Proxy>>,
    /// The proxy's busy-poll window: how long an enqueuing thread may run its
    /// work itself before handing it to the proxy thread (zero: never).
    spin: Duration,
    tx: Mutex<Option<Sender<Item>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Last work enqueued (finalize waits for it).
    last: Mutex<Option<Arc<Completion>>>,
    /// Set by finalize, destroy and abort: no more work is accepted.
    closed: AtomicBool,
}

impl ProxyHandle {
    /// Starts the proxy thread running `proxy`.
    ///
    /// Errors: [`Error::Internal`] when the thread cannot be spawned.
    pub(crate) fn start(proxy: Proxy, nranks: usize, tuning: Arc<Tuning>) -> Result<ProxyHandle, Error> {
        let shared = proxy.shared.clone();
        let profiler = proxy.profiler.clone();
        let rank = proxy.params.rank;
        let spin = proxy.spin;
        let core = Arc::new(Mutex::new(proxy));
        let (tx, rx) = mpsc::channel();
        let thread_core = core.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ferroccl-proxy-r{rank}"))
            .spawn(move || Proxy::run(thread_core, rx))
            .map_err(|e| Error::Internal(format!("spawning the proxy thread: {e}")))?;
        Ok(ProxyHandle {
            nranks,
            tuning,
            shared,
            profiler,
            core,
            spin,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            last: Mutex::new(None),
            closed: AtomicBool::new(false),
        })
    }

    /// Hands `colls` (one group's operations on this communicator) to the proxy thread,
    /// ordered after the previous work of every stream in `streams`.
    ///
    /// Errors: the communicator's asynchronous error; [`Error::InvalidUsage`] after
    /// finalize/destroy; [`Error::Aborted`] when the thread has exited; the
    /// tuning errors of [`Tuning::decide`] (nothing is queued then).
    /// `tags` carries each operation's profiler tag (may be empty: no events).
    pub(crate) fn submit(
        &self,
        colls: PerOp<CollArgs>,
        tags: PerOp<ApiTag>,
        streams: &[&Stream],
        what: WorkWhat,
    ) -> Result<(), Error> {
        if let Some(e) = self.shared.error() {
            return Err(e);
        }
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::InvalidUsage(
                "communicator already finalized or destroyed".into(),
            ));
        }
        // Latency-bound work behind queued work: wait (asleep, for at most the
        // spin window) for the proxy thread to finish it, so this work can run
        // on this thread (below) rather than queue behind it. Without this an
        // application enqueueing small operations back to back keeps the queue
        // full and every operation pays the hand-off to the proxy thread.
        if !self.spin.is_zero()
            && colls.iter().all(|a| {
                let (sb, rb) = schedule::buffer_bytes(a.kind, a.count, a.dtype, self.nranks);
                sb.max(rb) <= INLINE_WAIT_MAX_BYTES
            })
        {
            self.shared.wait_empty(self.spin);
        }
        // Nothing is queued (the proxy thread is idle) and the streams'
        // previous work is done: run the work here for at most the spin window,
        // as a rank's only thread would, instead of waking the proxy thread and
        // waiting for it (two hand-offs per operation, each a context switch
        // where threads outnumber cores). Work that finishes here is never
        // registered anywhere (no completion record, no queue slot, no stream
        // entry: nothing is left to wait for). Work not done by then goes to
        // the proxy thread as it stands (`hand_over`), so enqueue still returns
        // in bounded time whatever the peers do.
        let inline = if !self.spin.is_zero()
            && self.shared.queued.load(Ordering::SeqCst) == 0
            && streams.iter().all(|s| s.quiet())
            && let Ok(core) = self.core.try_lock()
            // Work another thread parked (`hand_over`) between this thread's
            // look at the queue and its lock runs first: queue behind it.
            && core.parked.is_none()
        {
            Some(core)
        } else {
            None
        };
        // On this thread, a repeat of the last work reuses its decisions
        // (`Tuning::reusable`).
        let reused = inline
            .as_ref()
            .filter(|_| self.tuning.reusable())
            .and_then(|core| core.repeat_plans(&colls));
        let plans = match reused {
            Some(plans) => {
                self.tuning.log_reused(&colls, &plans);
                plans
            }
            None => self.tuning.decide(&colls)?,
        };
        let work = Work {
            colls,
            plans,
            tags,
            done: None,
            deps: Deps::new(),
            what,
        };
        match inline {
            Some(mut core) => match core.run_inline(work, self.spin) {
                None => Ok(()),
                Some(rest) => self.hand_over(rest, streams, core),
            },
            None => self.queue(work, streams),
        }
    }

    /// Registers `work`'s completion with `streams` and with `last` (finalize
    /// waits for it), recording the streams' previous work as its dependencies.
    /// Errors: a device stream refused its hooks (the work is completed with
    /// that error).
    fn register(&self, work: &mut Work, streams: &[&Stream]) -> Result<(), Error> {
        let done = Completion::new();
        for s in streams {
            if let Err(e) = s.push(done.clone(), work.what, &mut work.deps) {
                done.complete(Err(e.clone()));
                return Err(e);
            }
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(done.clone());
        work.done = Some(done);
        Ok(())
    }

    /// Queues fresh `work` for the proxy thread (waiting for a queue slot).
    fn queue(&self, mut work: Work, streams: &[&Stream]) -> Result<(), Error> {
        self.shared.acquire()?;
        if let Err(e) = self.register(&mut work, streams) {
            self.shared.release();
            return Err(e);
        }
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let (item, e) = match tx.as_ref() {
            None => (
                Item::Fresh(work),
                Error::InvalidUsage("communicator already destroyed".into()),
            ),
            Some(tx) => match tx.send(Item::Fresh(work)) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(item)) => (
                    item,
                    self.shared
                        .error()
                        .unwrap_or_else(|| Error::Aborted("proxy thread has exited".into())),
                ),
            },
        };
        if let Some(work) = item.work() {
            work.complete(Err(e.clone()));
        }
        self.shared.release();
        Err(e)
    }

    /// Hands work an enqueuing thread started (and did not finish, or saw
    /// fail) to the proxy thread: registers it as queued work, parks it in the
    /// proxy state it holds locked (`core`), where the proxy thread takes it
    /// before any other item (so work other threads queued meanwhile still
    /// runs after it), and wakes the thread. Never blocks: the queue slot is
    /// taken even past `FERROCCL_MAX_QUEUED_OPS` (the proxy lock is held, and
    /// only the proxy thread frees slots).
    fn hand_over(
        &self,
        item: Item,
        streams: &[&Stream],
        mut core: std::sync::MutexGuard<'_, Proxy>,
    ) -> Result<(), Error> {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let mut item = item;
        let registered = match item.work_mut() {
            Some(work) => self.register(work, streams),
            None => Ok(()),
        };
        if let Err(e) = registered {
            core.abandon(item);
            drop(core);
            self.shared.release();
            return Err(e);
        }
        let ncolls = item.ncolls();
        core.parked = Some(item);
        drop(core);
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if tx.as_ref().is_some_and(|tx| tx.send(Item::Wake(ncolls)).is_ok()) {
            return Ok(());
        }
        drop(tx);
        // The proxy thread has exited (it fails parked work on its way out, so
        // this finds it only when the thread was gone before it was parked).
        let e = self
            .shared
            .error()
            .unwrap_or_else(|| Error::Aborted("proxy thread has exited".into()));
        let mut core = self.core.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(item) = core.parked.take()
            && let Some(work) = core.abandon(item)
        {
            work.complete(Err(e.clone()));
            self.shared.release();
        }
        Err(e)
    }

    /// Waits for the last enqueued work (bounded by the thread's watchdog; stops
    /// early on abort) and returns the asynchronous error, if any.
    pub(crate) fn wait_idle(&self) -> Result<(), Error> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(last) = last {
            let shared = self.shared.clone();
            last.wait(None, &|| !shared.abort.load(Ordering::Relaxed));
        }
        if let Some(e) = self.shared.error() {
            return Err(e);
        }
        Ok(())
    }

    /// Accepts no more work.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Raises the abort flag: work in flight fails with [`Error::Aborted`].
    pub(crate) fn raise_abort(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.shared.abort.store(true, Ordering::SeqCst);
    }

    /// Whether the communicator failed or was aborted.
    pub(crate) fn failed(&self) -> bool {
        self.shared.error().is_some() || self.shared.abort.load(Ordering::Relaxed)
    }

    /// Closes the work queue and joins the thread (which fails what is still queued).
    pub(crate) fn stop(&self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// Everything the proxy thread owns.
pub(crate) struct Proxy {
    /// Transport selection and connection setup (p2p connections on first use).
    pub transports: Arc<TransportSetup>,
    pub params: SchedParams,
    /// Every connector, keyed by (channel, peer, connection index) and direction;
    /// p2p connectors are added on first use.
    pub conns: ConnTable,
    pub shared: Arc<Shared>,
    /// No-progress watchdog bound.
    pub timeout: Duration,
    /// How long an idle proxy busy-polls before yielding the CPU
    /// (`FERROCCL_PROXY_SPIN_US`; zero when the host is oversubscribed).
    pub spin: Duration,
    /// Plugin device of point-to-point connections to each peer.
    pub p2p_devs: Vec<usize>,
    /// Plugin device of tree connections per channel (`None`: the channel's default).
    pub tree_devs: Vec<Option<usize>>,
    /// Devices the plugin reports.
    pub ndev: usize,
    /// Operations whose buffers are at least this many bytes send straight from
    /// registered user memory (`FERROCCL_NET_USER_SEND_MIN`); `None` = always copy
    /// through the FIFO.
    pub user_send_min: Option<usize>,
    /// Sequence number of the next collective.
    pub coll_seq: u64,
    /// Sequence number of the next send to each peer.
    pub p2p_send_seq: BTreeMap<usize, u64>,
    /// Sequence number of the next receive from each peer.
    pub p2p_recv_seq: BTreeMap<usize, u64>,
    /// The bootstrap, for the survivors' failure reports ([`crate::diag`]).
    pub bootstrap: Arc<Bootstrap>,
    /// Peers the unfinished steps of the last failed work waited on.
    pub waiting_on: Vec<usize>,
    /// The communicator's profiler plugin, if any.
    pub profiler: Option<Arc<Profiler>>,
    /// The last finished work item's tasks, for a repeat of it.
    pub plan_cache: Option<Box<Plan>>,
    /// Vectors the profiler's bookkeeping reuses from one work item to the next.
    pub prof_bufs: ProfBufs,
    /// The descriptor vector of the last finished work item, reused by the next.
    pub desc_buf: Vec<OpDesc>,
    /// Whether the running work item registered user memory with its
    /// connectors (released at its end).
    pub user_registered: bool,
    /// Work an enqueuing thread handed over ([`ProxyHandle::hand_over`]): the
    /// proxy thread runs it before the item it received.
    pub parked: Option<Item>,
}

/// A work item the proxy has begun: its tasks and how far each has run. An
/// enqueuing thread that ran the item for its spin window hands it to the proxy
/// thread in this state.
pub(crate) struct Running {
    /// The tasks (boxed: a work item's plan moves from the plan cache into
    /// its `Running` and back once per operation).
    plan: Box<Plan>,
    descs: Vec<OpDesc>,
    mems: Vec<crate::coll::mem::OpMem>,
    /// Whether [`Proxy::prof_begin`] opened ProxyOp events (in
    /// [`ProfBufs::proxy_ops`]) that [`Proxy::prof_end`] must stop.
    profiled: bool,
    /// Whether [`Proxy::ready`] has run (connections set up, steps announced).
    ready: bool,
    /// The plan comes from the plan cache ([`Plan`]): its tasks ran before,
    /// on connections that exist.
    repeat: bool,
}

/// One operation as far as its schedule depends on it: kind, buffer
/// addresses, count, datatype, reduction, and the tuning decision.
type PlanKey = (
    CollKind,
    usize,
    usize,
    usize,
    ferroccl_kernels::DataType,
    ferroccl_kernels::RedOp,
    Option<Decision>,
);

/// The tasks of a work item and what they were built from. The plan of the
/// last work item that ran to the end is kept (`Proxy::plan_cache`) for the
/// next one when it is the same operations on the same buffers (an
/// application's loop, a benchmark): the schedule is a pure function of
/// those, so resetting each stream's position replaces a rebuild (a dozen
/// allocations per operation). The scratch buffers the tasks point into (the
/// all-gather + reduce AllReduce's blocks) are wholly rewritten by every run
/// before they are read.
pub(crate) struct Plan {
    /// What the tasks were built from, when they may be reused (empty: never).
    key: Vec<PlanKey>,
    tasks: Vec<Task>,
    /// Scratch buffers the tasks point into (held, never read here).
    _scratch: Vec<Vec<u8>>,
    /// Whether a receive connector of the tasks takes step announcements
    /// (`RecvConnector::wants_expect`).
    announce: bool,
    /// Whether every connector of the tasks is passive
    /// (`SendConnector::passive`, [`Proxy::progress_tasks`]).
    passive: bool,
    /// The plan's ProxyOps, computed by the first profiled run of the plan
    /// and reused by its repeats (`None`: not yet computed).
    proxy_ops: Option<Vec<ProxyOpPlan>>,
}

/// One ProxyOp of a plan: the steps of one operation in one direction on one
/// connection that emits ProxyStep events (a NET connector).
#[derive(Clone, Copy, Debug)]
struct ProxyOpPlan {
    /// The operation (index in the work item).
    desc: u32,
    is_send: bool,
    key: ConnKey,
    nsteps: usize,
    /// The largest step in bytes (the ProxyOp's `chunkSize`).
    bytes: usize,
}

/// The ProxyOps of `tasks`, in operation order: every (op, peer) pair sorted
/// by (operation, direction, connection), runs of equal keys counted, and
/// connections that emit no ProxyStep events left out.
fn proxy_op_plan(tasks: &[Task], conns: &mut ConnTable) -> Vec<ProxyOpPlan> {
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

/// The plan key of one operation and its decision; `None` when its buffers
/// need staging (their staging state is per operation, so never reused).
fn op_key(a: &CollArgs, d: &Option<Decision>) -> Option<PlanKey> {
    (!a.mem.any_staged()).then_some((a.kind, a.send as usize, a.recv as usize, a.count, a.dtype, a.op, *d))
}

impl Proxy {
    /// The decisions of the cached plan ([`Plan`]) when `colls` repeat
    /// its operations (the same kinds, counts, datatypes and reductions, in the
    /// same order, on any buffers): `None` otherwise.
    fn repeat_plans(&self, colls: &[CollArgs]) -> Option<PerOp<Option<Decision>>> {
        let c = self.plan_cache.as_ref()?;
        if c.key.len() != colls.len() {
            return None;
        }
        let mut plans = PerOp::new();
        for (a, k) in colls.iter().zip(&c.key) {
            if !same_call(a, k) {
                return None;
            }
            plans.push(k.6);
        }
        Some(plans)
    }
}

/// Whether `a` is the call of key `k`: kind, count, datatype and reduction
/// (any buffers).
fn same_call(a: &CollArgs, k: &PlanKey) -> bool {
    a.kind == k.0 && a.count == k.3 && a.dtype == k.4 && a.op == k.5
}

/// Whether `op_key(a, d)` is `k` (without building the key).
fn same_op(a: &CollArgs, d: &Option<Decision>, k: &PlanKey) -> bool {
    same_call(a, k) && a.send as usize == k.1 && a.recv as usize == k.2 && *d == k.6 && !a.mem.any_staged()
}

/// The plan key of `work` (empty when any operation cannot be reused).
fn plan_key(work: &Work) -> Vec<PlanKey> {
    work.colls
        .iter()
        .zip(&work.plans)
        .map(|(a, d)| op_key(a, d))
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

// SAFETY: the tasks hold addresses of user buffers and of `scratch`, which
// move with them; the enqueue contract keeps the user buffers valid and
// untouched until the work completes, whichever thread runs it, and only the
// thread holding the proxy lock touches a `Running`.
unsafe impl Send for Running {}

/// What the proxy thread receives.
pub(crate) enum Item {
    /// Work nobody has started.
    Fresh(Work),
    /// Work an enqueuing thread started and did not finish in its window.
    Resume(Work, Running),
    /// Work that failed while an enqueuing thread ran it: the proxy thread
    /// records the failure (closing connections, agreeing with the survivors).
    Failed(Work, Error),
    /// An enqueuing thread parked work of this many operations in
    /// [`Proxy::parked`] (see [`ProxyHandle::hand_over`]).
    Wake(usize),
}

impl Item {
    /// Operations of the item (for the ProxyCtrl append event).
    fn ncolls(&self) -> usize {
        match self {
            Item::Fresh(w) | Item::Resume(w, _) | Item::Failed(w, _) => w.colls.len(),
            Item::Wake(n) => *n,
        }
    }

    /// The item's work (`None` for [`Item::Wake`]).
    fn work(&self) -> Option<&Work> {
        match self {
            Item::Fresh(w) | Item::Resume(w, _) | Item::Failed(w, _) => Some(w),
            Item::Wake(_) => None,
        }
    }

    fn work_mut(&mut self) -> Option<&mut Work> {
        match self {
            Item::Fresh(w) | Item::Resume(w, _) | Item::Failed(w, _) => Some(w),
            Item::Wake(_) => None,
        }
    }
}

impl Work {
    /// Completes the work's record, if it has one, with `r`.
    fn complete(&self, r: Result<(), Error>) {
        if let Some(d) = &self.done {
            d.complete(r);
        }
    }
}

/// The vectors of [`Proxy::prof_begin`] / [`Proxy::prof_end`], kept across work
/// items so that emitting a work item's events allocates nothing once they
/// have grown.
#[derive(Default)]
pub(crate) struct ProfBufs {
    /// Each operation's Coll/P2p event.
    ops_ev: Vec<EventHandle>,
    /// The work item's ProxyOp events, stopped at its end.
    proxy_ops: Vec<EventHandle>,
}

impl Proxy {
    /// Thread body: runs work until the queue closes or the comm is aborted.
    /// The proxy state is locked while an item runs (an enqueuing thread may run
    /// one itself while the thread is idle, see [`ProxyHandle::submit`]).
    pub(crate) fn run(core: Arc<Mutex<Proxy>>, rx: Receiver<Item>) {
        let lock = || core.lock().unwrap_or_else(|e| e.into_inner());
        let (rank, shared, profiler, bootstrap) = {
            let p = lock();
            (p.params.rank, p.shared.clone(), p.profiler.clone(), p.bootstrap.clone())
        };
        crate::log::set_rank(Some(rank as i32));
        // The ProxyCtrl event of the current idle period (NCCL's progress thread
        // sleeping on its ops pool: `ProxyCtrlSleep`, then `ProxyCtrlWakeup`).
        let mut sleeping: Option<EventHandle> = None;
        loop {
            if sleeping.is_none()
                && let Some(p) = &profiler
                && profiler::mask() & profiler::bits::PROXY_CTRL != 0
            {
                let h = p.start(EventHandle::NULL, &Event::ProxyCtrl);
                p.record(h, state::CTRL_SLEEP, StateArgs::None);
                sleeping = Some(h);
            }
            // Blocks at once when idle: work enqueued while this thread sleeps
            // runs on the enqueuing thread (`ProxyHandle::submit`), so a spinning
            // idle proxy would only take a core from it.
            let item = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(item) => {
                    if let (Some(p), Some(h)) = (&profiler, sleeping.take()) {
                        p.record(h, state::CTRL_WAKEUP, StateArgs::None);
                        p.stop(h);
                        // Appending the work item's operations (`ProxyCtrlAppend`, then
                        // `ProxyCtrlAppendEnd` with how many were appended).
                        let a = p.start(EventHandle::NULL, &Event::ProxyCtrl);
                        p.record(a, state::CTRL_APPEND, StateArgs::None);
                        p.record(a, state::CTRL_APPEND_END, StateArgs::Appended(item.ncolls() as i32));
                        p.stop(a);
                    }
                    item
                }
                Err(RecvTimeoutError::Timeout) => {
                    if shared.abort.load(Ordering::Relaxed) {
                        break;
                    }
                    // Idle: another rank failing reaches us through its report.
                    if shared.error().is_none()
                        && let Some(r) = bootstrap.survivor_report_pending(DIAG_TAG)
                    {
                        let mut p = lock();
                        let e = Error::Remote(format!("rank {r} {NOTIFIED} while this rank had no work in flight"));
                        p.conns.close_all();
                        let e = p.agree_on_failure(Report::idle(rank), e);
                        shared.set_error(&e);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            lock().handle(item);
        }
        if let (Some(p), Some(h)) = (&profiler, sleeping.take()) {
            p.record(h, state::CTRL_WAKEUP, StateArgs::None);
            p.stop(h);
        }
        // Fail whatever is still queued.
        let reason = shared
            .error()
            .unwrap_or_else(|| Error::Aborted("communicator closed".into()));
        let mut p = lock();
        let parked = p.parked.take();
        for item in parked.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            if let Some(w) = p.abandon(item) {
                w.complete(Err(reason.clone()));
                shared.release();
            }
        }
        p.conns.close_all();
    }

    /// Sends this rank's failure report to every other rank, collects theirs
    /// (bounded by the timeout, at most 10 s), and returns `e` with the verdict
    /// every survivor computes from the same reports (also logged at WARN).
    fn agree_on_failure(&self, mine: Report, e: Error) -> Error {
        let rank = self.params.rank;
        if self.params.nranks < 2 {
            return e;
        }
        let wait = self.timeout.min(Duration::from_secs(10));
        let Ok(all) = self
            .bootstrap
            .exchange_among_survivors(DIAG_TAG, &mine.to_bytes(), wait)
        else {
            return e;
        };
        let reports: Vec<Report> = all
            .answered()
            .into_iter()
            .filter_map(|r| {
                if r == rank {
                    Some(mine.clone())
                } else {
                    Report::from_bytes(r, all.data(r)?)
                }
            })
            .collect();
        let verdict = diag::diagnose(&reports, &all.missing());
        tracing::warn!(
            target: "ferroccl::proxy",
            "rank {rank}: {verdict} (reports from ranks {:?})",
            all.answered()
        );
        e.with_note(&verdict)
    }

    fn check_abort(&self) -> Result<(), Error> {
        if self.shared.abort.load(Ordering::Relaxed) {
            return Err(Error::Aborted("operation abandoned by ncclCommAbort".into()));
        }
        Ok(())
    }

    /// Runs `work` to the end on this thread (the proxy thread's way).
    fn execute(&mut self, work: &Work) -> Result<(), Error> {
        let Some(mut run) = self.begin(work)? else {
            return Ok(());
        };
        let r = self.advance(&mut run, work.what, None);
        self.end(run);
        r.map(|_| ())
    }

    /// Starts `work`: [`Proxy::plan`], then [`Proxy::ready`]. `None` for an
    /// empty work item (nothing to run).
    fn begin(&mut self, work: &Work) -> Result<Option<Running>, Error> {
        let Some(mut run) = self.plan(work)? else {
            return Ok(None);
        };
        self.ready(&mut run, work)?;
        Ok(Some(run))
    }

    /// Plans `work`: waits for the previous work of its streams, then describes
    /// (advancing the sequence numbers) and schedules its operations. `None` for
    /// an empty work item.
    fn plan(&mut self, work: &Work) -> Result<Option<Running>, Error> {
        // Stream order: wait for the previous work of each stream involved.
        for d in &work.deps {
            let abort = &self.shared.abort;
            let _ = d.wait(None, &|| !abort.load(Ordering::Relaxed));
            self.check_abort()?;
        }
        if let Some(e) = self.shared.error() {
            return Err(e);
        }
        self.check_abort()?;
        if work.colls.is_empty() {
            return Ok(None);
        }
        let mut descs = std::mem::take(&mut self.desc_buf);
        self.describe(&work.colls, &mut descs);
        let hit = self.plan_cache.take().and_then(|mut c| {
            let same = c.key.len() == work.colls.len()
                && (0..c.key.len()).all(|i| same_op(&work.colls[i], &work.plans[i], &c.key[i]));
            same.then(|| {
                for t in &mut c.tasks {
                    t.reset();
                }
                c
            })
        });
        let (plan, repeat) = match hit {
            Some(c) => (c, true),
            None => {
                let (tasks, scratch) = schedule::build(&work.colls, &descs, &work.plans, &self.params)?;
                let plan = Plan {
                    key: plan_key(work),
                    tasks,
                    _scratch: scratch,
                    announce: true,
                    passive: false,
                    proxy_ops: None,
                };
                (Box::new(plan), false)
            }
        };
        Ok(Some(Running {
            plan,
            descs,
            mems: Vec::new(),
            profiled: false,
            ready: false,
            repeat,
        }))
    }

    /// Whether every connection the planned `run` uses exists already (else
    /// [`Proxy::ready`] sets them up, which waits for the peers).
    fn connected(&self, run: &Running) -> bool {
        run.repeat
            || run.plan.tasks.iter().all(|t| {
                t.conns.send.iter().all(|k| self.conns.has_send(k))
                    && t.conns.recv.iter().all(|k| self.conns.has_recv(k))
            })
    }

    /// Makes a planned work item ready to run: connects what its tasks need,
    /// registers user memory, announces the steps each receive connector will
    /// consume, and emits the work's profiler events.
    fn ready(&mut self, run: &mut Running, work: &Work) -> Result<(), Error> {
        if run.ready {
            return Ok(());
        }
        // A repeat of the last work (the plan cache) finds its connections
        // made and knows whether its receive connectors take announcements.
        if !run.repeat {
            self.connect_missing(&run.plan.tasks)?;
            let tasks = &run.plan.tasks;
            let announce = tasks.iter().any(|t| {
                t.conns
                    .recv
                    .iter()
                    .any(|k| self.conns.recv(k).is_some_and(|r| r.wants_expect()))
            });
            let passive = tasks.iter().all(|t| {
                t.conns
                    .send
                    .iter()
                    .all(|k| self.conns.send(k).is_some_and(|s| s.passive()))
                    && t.conns
                        .recv
                        .iter()
                        .all(|k| self.conns.recv(k).is_some_and(|r| r.passive()))
            });
            run.plan.announce = announce;
            run.plan.passive = passive;
        }
        let tasks = &run.plan.tasks;
        if let Some(min) = self.user_send_min {
            self.register_user(&work.colls, tasks, min);
        }
        // Announce every step each receive connector will consume, in order.
        for t in tasks.iter().filter(|_| run.plan.announce) {
            for op in t.ops().filter(|op| op.recv_from.len() > 0) {
                let target = exec::recv_target(op);
                for peer in op.recv_from.iter() {
                    if let Some(r) = self.conns.recv(&t.lane.key(peer)) {
                        r.expect(target);
                    }
                }
            }
        }
        // The memory of each operation's buffers, for the executor's staging of
        // device memory; empty (nothing to look at per step) when all is host memory.
        if work.colls.iter().any(|a| a.mem.any_staged()) {
            run.mems = work.colls.iter().map(|a| a.mem).collect();
        }
        // One predictable branch when no profiler is loaded.
        if let Some(p) = &self.profiler {
            run.profiled = Self::prof_begin(p, &mut self.conns, &mut self.prof_bufs, work, &run.descs, &mut run.plan);
        }
        run.ready = true;
        Ok(())
    }

    /// Progresses a started work item until it is done (`Ok(true)`) or, with
    /// `window`, that long has passed first (`Ok(false)`: resume it later;
    /// the window starts at the first wait or after a few moves, see
    /// [`Proxy::progress_tasks`]).
    fn advance(&mut self, run: &mut Running, what: WorkWhat, window: Option<Duration>) -> Result<bool, Error> {
        let Running { plan, descs, mems, .. } = run;
        let passive = plan.passive;
        self.progress_tasks(&mut plan.tasks, descs, mems, passive, what, window)
    }

    /// Ends a work item (done or failed): stops its ProxyOp events and releases
    /// the user memory its connections registered.
    fn end(&mut self, run: Running) {
        if run.profiled {
            self.prof_end();
        }
        // Registrations of a work item that did not finish may outlive it
        // (a connector releases only once idle): asked again at the next end.
        if self.user_registered {
            self.user_registered = !run.plan.tasks.iter().all(Task::finished);
            for c in self.conns.sends_mut() {
                c.release_user();
            }
            for c in self.conns.recvs_mut() {
                c.release_user();
            }
        }
        let mut descs = run.descs;
        descs.clear();
        self.desc_buf = descs;
        if !run.plan.key.is_empty() && run.plan.tasks.iter().all(Task::finished) {
            self.plan_cache = Some(run.plan);
        }
    }

    /// Records the outcome of `work`: on an error closes every connection, agrees
    /// with the survivors on what failed (bounded, see `agree_on_failure`) and
    /// keeps it as the communicator's error; then completes the work and returns
    /// its queue slot.
    fn finish(&mut self, work: Work, mut r: Result<(), Error>) {
        if let Err(e) = r {
            tracing::warn!(target: "ferroccl::proxy", "{} failed: {e}", work.what);
            self.conns.close_all();
            let e = if matches!(e, Error::Aborted(_)) || self.shared.error().is_some() {
                e
            } else {
                let report = Report::of(
                    self.params.rank,
                    &work.what.to_string(),
                    &e,
                    std::mem::take(&mut self.waiting_on),
                );
                self.agree_on_failure(report, e)
            };
            self.shared.set_error(&e);
            r = Err(e);
        }
        // Work that never left its enqueuing thread has no record and no slot.
        if let Some(d) = &work.done {
            d.complete(r);
            self.shared.release();
        }
    }

    /// Runs `work` on the enqueuing thread while the proxy thread is idle, for
    /// at most `window` (see [`Proxy::advance`]): `None` when it finished (completed, slot returned), else
    /// what the proxy thread must take over — the started work, or the error it
    /// failed with (the failure agreement then runs on the proxy thread, not in
    /// the caller's enqueue).
    fn run_inline(&mut self, work: Work, window: Duration) -> Option<Item> {
        let mut run = match self.plan(&work) {
            Ok(Some(run)) => run,
            Ok(None) => {
                self.finish(work, Ok(()));
                return None;
            }
            Err(e) => return Some(Item::Failed(work, e)),
        };
        // Setting up a connection waits for the peer for as long as the
        // communicator's timeout: never on the caller's thread.
        if !self.connected(&run) {
            return Some(Item::Resume(work, run));
        }
        if let Err(e) = self.ready(&mut run, &work) {
            self.end(run);
            return Some(Item::Failed(work, e));
        }
        // Log lines name this rank while its work runs here (a thread running
        // one rank's work has it set already).
        let (prev, mine) = (crate::log::rank(), Some(self.params.rank as i32));
        if prev != mine {
            crate::log::set_rank(mine);
        }
        let r = self.advance(&mut run, work.what, Some(window));
        if prev != mine {
            crate::log::set_rank(prev);
        }
        match r {
            Ok(true) => {
                self.end(run);
                self.finish(work, Ok(()));
                None
            }
            Ok(false) => Some(Item::Resume(work, run)),
            Err(e) => {
                self.end(run);
                Some(Item::Failed(work, e))
            }
        }
    }

    /// Handles one item on the proxy thread, after any work an enqueuing
    /// thread parked (which was enqueued first).
    fn handle(&mut self, item: Item) {
        if let Some(parked) = self.parked.take() {
            self.handle_one(parked);
        }
        self.handle_one(item);
    }

    /// Gives up `item` without running it further: ends its started work
    /// (events stopped, user memory released) and returns the work to be
    /// completed (`None` for [`Item::Wake`]).
    fn abandon(&mut self, item: Item) -> Option<Work> {
        match item {
            Item::Resume(w, run) => {
                self.end(run);
                Some(w)
            }
            Item::Fresh(w) | Item::Failed(w, _) => Some(w),
            Item::Wake(_) => None,
        }
    }

    fn handle_one(&mut self, item: Item) {
        match item {
            Item::Wake(_) => {}
            Item::Fresh(work) => {
                let r = self.execute(&work);
                self.finish(work, r);
            }
            Item::Resume(work, mut run) => {
                let r = self
                    .ready(&mut run, &work)
                    .and_then(|()| self.advance(&mut run, work.what, None));
                self.end(run);
                self.finish(work, r.map(|_| ()));
            }
            Item::Failed(work, e) => self.finish(work, Err(e)),
        }
    }

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
    fn prof_begin(
        p: &Arc<Profiler>,
        conns: &mut ConnTable,
        bufs: &mut ProfBufs,
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
        let ops_ev = &mut bufs.ops_ev;
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
        let proxy_ops = &mut bufs.proxy_ops;
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
    fn prof_end(&mut self) {
        for c in self.conns.sends_mut() {
            c.prof_detach();
        }
        for c in self.conns.recvs_mut() {
            c.prof_detach();
        }
        if let Some(p) = &self.profiler {
            for &h in &self.prof_bufs.proxy_ops {
                p.stop(h);
            }
        }
        self.prof_bufs.proxy_ops.clear();
    }

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
    fn register_user(&mut self, colls: &[CollArgs], tasks: &[Task], min: usize) {
        let (rank, nranks) = (self.params.rank, self.params.nranks);
        let bytes = |a: &CollArgs| schedule::buffer_bytes(a.kind, a.count, a.dtype, nranks);
        if !colls.iter().any(|a| {
            let (sb, rb) = bytes(a);
            sb.max(rb) >= min
        }) {
            // Nothing to register (small operations): skip the bookkeeping below.
            return;
        }
        self.user_registered = true;
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for a in colls {
            let (sb, rb) = bytes(a);
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
                Lane::Channel(_) => coll(kind),
                Lane::P2pSend(peer) => kind == (CollKind::Send { peer }),
                Lane::P2pRecv(peer) => kind == (CollKind::Recv { peer }),
                Lane::Local => false,
            };
            let send_bufs: Vec<_> = match t.lane {
                Lane::Channel(_) => send_inputs.iter().chain(&outputs).copied().collect(),
                _ => send_inputs.clone(),
            };
            for k in &t.conns.send {
                if let Some(conn) = self.conns.send(k) {
                    for &(kind, p, n, space) in &send_bufs {
                        if mine(kind) {
                            conn.register_user(p, n, space);
                        }
                    }
                }
            }
            for k in &t.conns.recv {
                if let Some(conn) = self.conns.recv(k) {
                    for &(kind, p, n, space) in &recv_outputs {
                        if mine(kind) {
                            conn.register_user(p, n, space);
                        }
                    }
                }
            }
        }
    }

    /// Sets up the connections `tasks` need that do not exist yet: point-to-point
    /// peers and tree peers on first use (every rank reaches the same operation,
    /// so both ends of each connection set it up together).
    fn connect_missing(&mut self, tasks: &[Task]) -> Result<(), Error> {
        let mut sends: Vec<ConnKey> = Vec::new();
        let mut recvs: Vec<ConnKey> = Vec::new();
        for t in tasks {
            for k in &t.conns.send {
                if !self.conns.has_send(k) && !sends.contains(k) {
                    sends.push(*k);
                }
            }
            for k in &t.conns.recv {
                if !self.conns.has_recv(k) && !recvs.contains(k) {
                    recvs.push(*k);
                }
            }
        }
        if sends.is_empty() && recvs.is_empty() {
            return Ok(());
        }
        let plan = ConnPlan {
            rank: self.params.rank,
            channels: &self.params.channels,
            tree_devs: &self.tree_devs,
            ndev: self.ndev,
            p2p_devs: &self.p2p_devs,
            coll_step: self.params.ring_step,
            p2p_step: self.params.p2p_step,
        };
        setup::connect_keys(&self.transports, &plan, &sends, &recvs, &mut self.conns)
    }

    /// Progresses the network side of a task's connectors; whether anything moved.
    fn progress_net(&mut self, t: &Task) -> Result<bool, Error> {
        let mut moved = false;
        for k in &t.conns.send {
            if let Some(s) = self.conns.send(k) {
                moved |= s.progress().map_err(|e| e.with_peer(k.peer))?;
            }
        }
        for k in &t.conns.recv {
            if let Some(r) = self.conns.recv(k) {
                moved |= r.progress().map_err(|e| e.with_peer(k.peer))?;
            }
        }
        Ok(moved)
    }

    /// Hands filled send steps of a task to the plugin.
    fn progress_sends(&mut self, conns: &TaskConns) -> Result<(), Error> {
        for k in &conns.send {
            if let Some(s) = self.conns.send(k) {
                s.progress().map_err(|e| e.with_peer(k.peer))?;
            }
        }
        Ok(())
    }

    /// The descriptors of `colls` (see `coll::desc`), advancing this
    /// communicator's sequence numbers: one for collectives, one per peer and
    /// direction for point-to-point. Every rank advances them identically as
    /// long as the ranks issue the same operations.
    /// `descs` is cleared first (its allocation is reused).
    fn describe(&mut self, colls: &[CollArgs], descs: &mut Vec<OpDesc>) {
        let rank = self.params.rank;
        descs.clear();
        descs.extend(colls.iter().map(|a| {
            let seq = match a.kind {
                CollKind::Send { peer } => self.p2p_send_seq.entry(peer).or_default(),
                CollKind::Recv { peer } => self.p2p_recv_seq.entry(peer).or_default(),
                _ => &mut self.coll_seq,
            };
            let d = OpDesc::of(a, *seq, rank);
            *seq += 1;
            d
        }));
    }

    fn progress_tasks(
        &mut self,
        tasks: &mut [Task],
        descs: &[OpDesc],
        mems: &[crate::coll::mem::OpMem],
        passive: bool,
        what: WorkWhat,
        window: Option<Duration>,
    ) -> Result<bool, Error> {
        let rank = self.params.rank;
        // When the last progress was seen; `None` while the loop keeps moving
        // (the clock is read on idle turns, and against the window after
        // `MOVES_BEFORE_CLOCK_READS` moves). The window's deadline is set at
        // the first clock read.
        let mut until: Option<Instant> = None;
        let mut past = |now: Instant| window.is_some_and(|w| now >= *until.get_or_insert(now + w));
        let mut last_progress: Option<Instant> = None;
        let mut moves = 0u32;
        let mut idle_turns = 0u32;
        let mut yields = 0u32;
        // Passive connectors (shared memory) are progressed only on passes
        // after one where no step moved: their `progress` then waits for the
        // peer and watches it; while steps move it would only cost calls.
        let mut moved_last = passive;
        loop {
            let mut moved = false;
            let mut done = true;
            for t in tasks.iter_mut() {
                if !(passive && moved_last) {
                    moved |= self.progress_net(t)?;
                }
                // Run the current segment's streams as far as they go; move to the
                // next segment once every stream of this one is done.
                while !t.finished() {
                    let mut seg_done = true;
                    for st in t.segs[t.seg].streams.iter_mut() {
                        while st.pos < st.ops.len() {
                            let mut cx = ExecCx {
                                conns: &mut self.conns,
                                descs,
                                rank,
                                mems,
                                user_regs: self.user_registered,
                            };
                            // SAFETY: user addresses are valid by the enqueue contract; FIFO slots are ours.
                            if unsafe { exec::try_run(&st.ops[st.pos], t.lane, &t.conns, &mut cx) }? {
                                st.pos += 1;
                                moved = true;
                                // Hand filled slots to the plugin right away.
                                if !passive {
                                    self.progress_sends(&t.conns)?;
                                }
                            } else {
                                break;
                            }
                        }
                        seg_done &= st.pos == st.ops.len();
                    }
                    if !seg_done {
                        break;
                    }
                    t.seg += 1;
                }
                let lane_idle = passive || t.conns.send.iter().all(|k| self.conns.send(k).is_none_or(|s| s.idle()));
                if !t.finished() || !lane_idle {
                    done = false;
                }
            }
            if done {
                return Ok(true);
            }
            moved_last = moved;
            if moved {
                last_progress = None;
                idle_turns = 0;
                yields = 0;
                moves = moves.saturating_add(1);
                if moves > MOVES_BEFORE_CLOCK_READS && window.is_some() && past(Instant::now()) {
                    return Ok(false);
                }
                continue;
            }
            let now = Instant::now();
            let since = now - *last_progress.get_or_insert(now);
            if past(now) {
                return Ok(false);
            }
            self.check_abort()?;
            idle_turns += 1;
            if idle_turns.is_multiple_of(256)
                && let Some(r) = self.bootstrap.survivor_report_pending(DIAG_TAG)
            {
                self.waiting_on = waiting_on(tasks);
                return Err(Error::Remote(format!("rank {r} {NOTIFIED} while this rank ran {what}")));
            }
            if idle_turns.is_multiple_of(64) && since >= self.timeout {
                self.waiting_on = waiting_on(tasks);
                return Err(Error::Timeout(format!(
                    "{what} made no progress for {:?} on rank {}: {}",
                    self.timeout,
                    self.params.rank,
                    stuck_report(tasks)
                )));
            }
            // Busy-poll while the spin window lasts (the peer's proxy is likely
            // on another core), then hand the core over: yield, later sleep.
            if !self.spin.is_zero() && since < self.spin {
                std::hint::spin_loop();
            } else if yields < 2000 {
                yields += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// The peers the unfinished tasks' next steps receive from (or, for a step
/// that only sends, send to), in task order, without repeats.
fn waiting_on(tasks: &[Task]) -> Vec<usize> {
    let mut v = Vec::new();
    for t in tasks {
        for op in t.next_ops() {
            let peers = if op.recv_from.len() > 0 {
                op.recv_from
            } else {
                op.send_to
            };
            for p in peers.iter() {
                if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
    }
    v
}

/// What each unfinished task waits for, naming the peers of its next step.
fn stuck_report(tasks: &[Task]) -> String {
    let names = |peers: &schedule::Peers| peers.iter().map(|p| format!("rank {p}")).collect::<Vec<_>>().join(", ");
    let mut parts = Vec::new();
    for t in tasks {
        let left = t.left();
        let on = match t.lane {
            Lane::Channel(c) => format!(" on channel {c}"),
            _ => String::new(),
        };
        let waits: Vec<String> = t
            .next_ops()
            .map(|op| {
                if op.recv_from.len() > 0 {
                    format!("data from {}{on}", names(&op.recv_from))
                } else if op.send_to.len() > 0 {
                    format!("{} to drain{on}", names(&op.send_to))
                } else {
                    "a local step".to_string()
                }
            })
            .collect();
        let waiting = if waits.is_empty() {
            "its sends to complete".to_string()
        } else {
            waits.join(" and ")
        };
        if left > 0 || !t.conns.send.is_empty() {
            parts.push(format!("{:?}: {left} step(s) left, waiting for {waiting}", t.lane));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_slots_are_bounded() {
        let sh = Shared::new(Arc::new(AtomicBool::new(false)), 2);
        sh.acquire().expect("slot 1");
        sh.acquire().expect("slot 2");
        // Full: a third acquire would wait; with the communicator failed it gives up
        // with the failure instead of taking a slot beyond the bound.
        sh.set_error(&Error::Internal("test failure".into()));
        assert!(matches!(sh.acquire(), Err(Error::Internal(_))));
        // A finished item frees a slot.
        sh.release();
        sh.acquire().expect("slot after release");
        // Abort also ends a wait for space.
        let sh = Shared::new(Arc::new(AtomicBool::new(true)), 1);
        sh.acquire().expect("slot");
        assert!(matches!(sh.acquire(), Err(Error::Aborted(_))));
    }
}
