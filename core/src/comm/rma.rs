//! One-sided operations on a communicator (NCCL 2.30.7's host RMA API, `src/nccl.h.in`):
//! memory windows ([`Comm::window_register`] / [`Comm::window_deregister`], NCCL's
//! `ncclCommWindowRegister` / `ncclCommWindowDeregister`), put-with-signal
//! ([`Comm::put_signal`], `ncclPutSignal`), signal ([`Comm::signal`], `ncclSignal`)
//! and wait-signal ([`Comm::wait_signal`], `ncclWaitSignal`), run through the RMA
//! plugin ([`crate::plugin::rma`]).
//!
//! * **Initialisation** is lazy and collective, as NCCL's (`src/rma/rma_proxy.cc`,
//!   `ncclRmaProxyConnectOnce`): at the first window registration, or at the end of
//!   init when `NCCL_RMA_EAGER_INIT=1`. Each rank loads the RMA plugin in NCCL's order
//!   ([`load_rma`]: `NCCL_RMA_PLUGIN`, then the net plugin's library), runs `init`,
//!   `listen` on device 0, and the ranks all-gather their handles over the bootstrap
//!   (with a verdict byte, so that every rank fails alike, naming the ranks without a
//!   plugin, instead of one rank waiting in `connect`); then `connect`, `closeListen`,
//!   `createContext` with `nContexts` = `numRmaCtx` (`CommConfig::num_rma_ctx` or
//!   `ncclConfig_t.numRmaCtx`, default 1, `NCCL_NUM_RMA_CTX` over it; 0 disables the
//!   one-sided calls, `comm::params::resolve_num_rma_ctx`) and the
//!   communicator's traffic class, and the signal window (`regMrSym` with
//!   `NCCL_NET_MR_FLAG_FORCE_SO`, as NCCL registers its signal buffer). On a
//!   communicator without a usable RMA plugin, window registration fails with
//!   [`Error::InvalidUsage`] (NCCL's `ncclRmaProxyConnectOnce`: "RMA not supported.",
//!   `ncclInvalidUsage`) and `put_signal` / `signal` / `wait_signal` with
//!   [`Error::InvalidArgument`] (NCCL's `rmaTaskAppend`, `src/enqueue.cc`, on
//!   `!comm->hostRmaSupport`: `ncclInvalidArgument`), each naming why; a `signal` or
//!   `wait_signal` before any window registration gets [`Error::InvalidUsage`] (NCCL
//!   likewise, "called before RMA is initialized").
//! * **Windows** are symmetric (`NCCL_WIN_COLL_SYMMETRIC`): every rank registers its
//!   windows in the same order (`regMrSym`); the registration all-gathers the sizes,
//!   which doubles as the barrier after which peers may target the window.
//! * **Signals**: each rank owns `numRmaCtx × 1 × nranks` 64-bit signal words,
//!   one per (context, signal index, sender). A put-with-signal (and a signal, a put
//!   of 0 bytes) increments the receiver's word for this sender once the data is
//!   visible (`NCCL_NET_SIGNAL_OP_INC`, strong signal). `wait_signal` raises the
//!   expected count of each (peer, sigIdx, ctx) by `opCnt` and waits until the word
//!   reaches it, so the signals it waited for are consumed (NCCL's proxy keeps the same
//!   cumulative expectation, `src/rma/rma_proxy_progress.cc`).
//! * **Ordering**: like every operation, a one-sided call returns at once and runs
//!   after the work enqueued on its [`Stream`] before it; one-sided operations of a
//!   communicator run in enqueue order on its RMA thread. Consecutive puts and
//!   signals are issued without waiting for each other (up to 64 requests in
//!   flight) and complete in issue order, as NCCL batches them into one plan
//!   (`src/rma/rma.cc`, `scheduleRmaTasksToPlan`); a wait first completes the puts
//!   before it.
//! * **Groups**: inside [`crate::group_start`] / [`crate::group_end`] the calls are
//!   checked at once (an argument error is returned by the call) but nothing is
//!   issued until the outermost `group_end`, which hands them to the RMA thread in
//!   call order within each context, lower contexts first, and before the group's
//!   collectives (NCCL 2.30.7: `src/enqueue.cc` `rmaTaskAppend` queues them per
//!   context; `ncclLaunchPrepare` schedules the RMA plans, `src/rma/rma.cc`
//!   `scheduleRmaTasksToPlan`, before the collective ones). Streams are joined per
//!   communicator as NCCL's `ncclLaunchPrepare` joins the planner's: each of the
//!   group's operations runs behind the earlier work of every stream the
//!   communicator's operations in the group named, and later work on any of them
//!   runs after it (`group.rs`). `group_end` returns the first error of
//!   handing them over; run-time errors are reported by the stream, as outside a
//!   group.
//! * **Bounded**: every wait (a request, a signal, the stream's earlier work) is bounded
//!   by the communicator's timeout (`FERROCCL_TIMEOUT_SEC`) and ends with an error
//!   naming the operation and the peer; an aborted communicator ends them at once.
//!
//! Arguments are checked as NCCL 2.30.7's `src/enqueue.cc` (`rmaTaskAppend` and its
//! argument checks): `flags` must be 0, `sigIdx` below [`NUM_RMA_SIG`] (1), `ctx`
//! below `numRmaCtx`, the source of a put inside a window registered on this
//! communicator (`ncclDevrFindWindow`), and (beyond NCCL) the target range inside the
//! peer's window.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferroccl_kernels::DataType;
use ferroccl_plugin_api::abi::{NCCL_NET_HANDLE_MAXSIZE, NCCL_NET_MR_FLAG_FORCE_SO};

use super::{Comm, CommInner};
use crate::bootstrap::Bootstrap;
use crate::coll::WorkWhat;
use crate::error::{Error, Result};
use crate::plugin::net::{NetHandle, PtrType, RawComm, RawCtx, RawMr, RawRequest};
use crate::plugin::rma::{RmaAdapter, RmaConfig, RmaCtx, RmaSignal, RmaXfer, SignalOp, load_rma};
use crate::stream::{Completion, Deps, Stream};

/// Signal slots per (context, sender); `sigIdx` must be below it. One, as NCCL 2.30.7
/// offers: its `ncclConfig_t` has no `numRmaSig` field (later NCCL versions make the
/// count configurable).
pub const NUM_RMA_SIG: usize = 1;

/// One entry of [`Comm::wait_signal`] (`ncclWaitSignalDesc_t`: `opCnt`, `peer`,
/// `sigIdx`, `ctx`): wait for `op_cnt` more signals from `peer` on signal `sig_idx`
/// of context `ctx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitSignalDesc {
    /// Signals to wait for (each put-with-signal or signal from `peer` is one).
    pub op_cnt: u64,
    /// The sender's rank.
    pub peer: usize,
    /// The signal index (`< NUM_RMA_SIG`).
    pub sig_idx: usize,
    /// The RMA context (`< numRmaCtx`).
    pub ctx: usize,
}

/// A registered memory window (`ncclWindow_t`): this rank's `size` bytes at `base`,
/// registered symmetrically with the RMA plugin; peers address it by offset.
/// Released by [`Comm::window_deregister`] (collective) or with the communicator.
#[derive(Debug, Clone)]
pub struct Window {
    inner: Arc<WinInner>,
}

#[derive(Debug)]
struct WinInner {
    /// The [`RmaCore`] it belongs to.
    owner: u64,
    base: *mut u8,
    size: usize,
    mr: RawMr,
    /// Every rank's window size, by rank.
    sizes: Vec<usize>,
    live: AtomicBool,
}

// SAFETY: `base` is the caller's buffer, only dereferenced by the RMA thread while the
// window is registered (the caller's contract in `window_register`).
unsafe impl Send for WinInner {}
// SAFETY: as above.
unsafe impl Sync for WinInner {}

impl Window {
    /// This rank's buffer (`ncclWinGetUserPtr`).
    pub fn user_ptr(&self) -> *mut u8 {
        self.inner.base
    }

    /// This rank's window size in bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The window size of `rank` (every rank's was exchanged at registration).
    pub fn peer_size(&self, rank: usize) -> Option<usize> {
        self.inner.sizes.get(rank).copied()
    }
}

/// The connected RMA state of one communicator.
struct RmaCore {
    id: u64,
    a: Arc<RmaAdapter>,
    ictx: RawCtx,
    coll: RawComm,
    rctx: RmaCtx,
    rank: usize,
    nranks: usize,
    nctx: usize,
    /// Signal words, `[ctx][sig][sender]`.
    sig: Box<[AtomicU64]>,
    sig_mr: RawMr,
    windows: Mutex<Vec<Arc<WinInner>>>,
    /// Serialises plugin calls (NCCL drives a context from one thread at a time).
    plugin: Mutex<()>,
    timeout: Duration,
    abort: Arc<AtomicBool>,
}

impl RmaCore {
    fn slot(&self, ctx: usize, sig: usize, sender: usize) -> usize {
        (ctx * NUM_RMA_SIG + sig) * self.nranks + sender
    }

    fn call<T>(&self, f: impl FnOnce(&RmaAdapter) -> T) -> T {
        let _g = self.plugin.lock().unwrap_or_else(|e| e.into_inner());
        f(&self.a)
    }

    fn find_window(&self, p: *const u8, len: usize) -> Option<(Arc<WinInner>, usize)> {
        let ws = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        ws.iter().find_map(|w| {
            let off = (p as usize).checked_sub(w.base as usize)?;
            (off.checked_add(len)? <= w.size).then(|| (w.clone(), off))
        })
    }

    fn check_common(&self, op: &str, peer: usize, sig_idx: usize, ctx: usize, flags: u32) -> Result<()> {
        if flags != 0 {
            return Err(Error::InvalidArgument(format!(
                "{op}: flags {flags} is invalid (must be 0)"
            )));
        }
        if peer >= self.nranks {
            return Err(Error::InvalidArgument(format!(
                "{op}: peer {peer} is not a rank of this {}-rank communicator",
                self.nranks
            )));
        }
        if sig_idx >= NUM_RMA_SIG {
            return Err(Error::InvalidArgument(format!(
                "{op}: signal index {sig_idx} is invalid (must be in [0, {NUM_RMA_SIG}))"
            )));
        }
        if ctx >= self.nctx {
            return Err(Error::InvalidArgument(format!(
                "{op}: context {ctx} is invalid (must be in [0, {}), numRmaCtx)",
                self.nctx
            )));
        }
        Ok(())
    }

    /// Issues one put (with its signal): `None` when it is already done (to this
    /// rank itself, whose data path is this host), else the plugin's request.
    fn issue(&self, p: &Put) -> Result<Option<RawRequest>> {
        if p.peer == self.rank {
            if p.bytes > 0 {
                // SAFETY: both ranges lie in registered windows (checked at enqueue);
                // `copy` allows them to overlap.
                unsafe { std::ptr::copy(p.src.cast_const(), p.dst, p.bytes) };
            }
            self.sig[self.slot(p.ctx, p.sig, self.rank)].fetch_add(1, Ordering::Release);
            return Ok(None);
        }
        let x = RmaXfer {
            context: p.ctx as i32,
            local_off: p.src_off as u64,
            local_mr: p.src_mr,
            size: p.bytes,
            remote_off: p.dst_off as u64,
            remote_mr: p.dst_mr,
            rank: p.peer as u32,
        };
        let s = RmaSignal {
            off: (self.slot(p.ctx, p.sig, self.rank) * 8) as u64,
            mr: self.sig_mr,
            value: 1,
            op: SignalOp::Inc,
        };
        // NCCL passes isStrongSignal = true (`ncclRmaProxyIssuePutSignal`).
        self.call(|a| a.iput_signal(self.rctx, &x, &s, true))
            .map(Some)
            .map_err(|e| Error::net(p.what(), e).with_peer(p.peer))
    }

    /// Whether an issued put is done (`test(collComm, request)`).
    fn done(&self, p: &Put, req: Option<RawRequest>) -> Result<bool> {
        let Some(req) = req else { return Ok(true) };
        self.call(|a| a.test(self.coll, req))
            .map_err(|e| Error::net(p.what(), e).with_peer(p.peer))
    }

    /// One round of waiting: progress, the plugin's asynchronous error, the abort
    /// flag, the deadline.
    fn idle(&self, what: &dyn Fn() -> String, peer: usize, deadline: Instant) -> Result<()> {
        self.call(|a| a.progress(self.rctx))
            .map_err(|e| Error::net(what(), e).with_peer(peer))?;
        if self.abort.load(Ordering::Relaxed) {
            return Err(Error::Aborted(format!("{} was pending", what())));
        }
        if Instant::now() >= deadline {
            let async_err = self.call(|a| a.query_last_error(self.rctx)).unwrap_or(false);
            return Err(Error::Timeout(format!(
                "{} not done within {:?}{}: rank {peer} may have failed or not taken part",
                what(),
                self.timeout,
                if async_err {
                    " (the RMA plugin reports an asynchronous error)"
                } else {
                    ""
                }
            )));
        }
        std::thread::yield_now();
        Ok(())
    }

    /// Waits for the signals of `descs`, raising `expected` first.
    fn wait(&self, descs: &[WaitSignalDesc], expected: &mut [u64]) -> Result<()> {
        let want: Vec<(usize, u64)> = descs
            .iter()
            .map(|d| {
                let i = self.slot(d.ctx, d.sig_idx, d.peer);
                expected[i] += d.op_cnt;
                (i, expected[i])
            })
            .collect();
        let deadline = Instant::now() + self.timeout;
        let mut spins = 0u32;
        loop {
            let missing = descs
                .iter()
                .zip(&want)
                .find(|(_, (i, e))| self.sig[*i].load(Ordering::Acquire) < *e);
            let Some((d, (i, e))) = missing else { return Ok(()) };
            let what = || {
                format!(
                    "WaitSignal for {} signal(s) from rank {} (ctx {}, sigIdx {}; {} of {} in total arrived so far)",
                    d.op_cnt,
                    d.peer,
                    d.ctx,
                    d.sig_idx,
                    self.sig[*i].load(Ordering::Acquire),
                    e
                )
            };
            self.idle(&what, d.peer, deadline)?;
            spins += 1;
            if spins > 1000 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn teardown(&self) {
        let _g = self.plugin.lock().unwrap_or_else(|e| e.into_inner());
        let a = &self.a;
        if let Err(e) = a.destroy_context(self.rctx) {
            crate::log::nccl_warn!("RMA destroyContext: {e}");
        }
        for w in self.windows.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            w.live.store(false, Ordering::Release);
            if let Err(e) = a.dereg_mr_sym(self.coll, w.mr) {
                crate::log::nccl_warn!("RMA deregMrSym: {e}");
            }
        }
        if let Err(e) = a.dereg_mr_sym(self.coll, self.sig_mr) {
            crate::log::nccl_warn!("RMA deregMrSym (signals): {e}");
        }
        if let Err(e) = a.close_coll(self.coll) {
            crate::log::nccl_warn!("RMA closeColl: {e}");
        }
        if let Err(e) = a.finalize_ctx(self.ictx) {
            crate::log::nccl_warn!("RMA finalize: {e}");
        }
    }
}

/// A put (or a signal: 0 bytes) as the RMA thread runs it.
struct Put {
    /// When it was issued (its bound starts there).
    issued: Option<Instant>,
    op: &'static str,
    src: *mut u8,
    src_off: usize,
    src_mr: RawMr,
    dst: *mut u8,
    dst_off: usize,
    dst_mr: RawMr,
    bytes: usize,
    peer: usize,
    ctx: usize,
    sig: usize,
}

impl Put {
    fn what(&self) -> String {
        format!(
            "{} of {} bytes to rank {} (window offset {}, ctx {}, sigIdx {})",
            self.op, self.bytes, self.peer, self.dst_off, self.ctx, self.sig
        )
    }
}

enum Op {
    Put(Put),
    Wait(Vec<WaitSignalDesc>),
}

struct Job {
    op: Op,
    deps: Deps,
    done: Arc<Completion>,
}

// SAFETY: the raw pointers of a `Put` point into registered windows that the caller
// keeps alive until the stream is synchronized (the contract of the one-sided calls).
unsafe impl Send for Job {}

/// Puts issued and not yet completed, at most (NCCL batches consecutive puts and
/// signals of one context into one plan, `src/rma/rma.cc` `scheduleRmaTasksToPlan`).
const MAX_IN_FLIGHT: usize = 64;

/// Puts issued by the RMA thread, completed in issue order.
type Flight = std::collections::VecDeque<(Option<RawRequest>, Job)>;

/// The RMA thread: runs jobs in enqueue order, each after its stream dependencies.
/// A put whose dependencies are done, or are puts already issued here, is issued at
/// once (pipelined: several requests in flight); anything else first completes the
/// puts in flight, then waits for its dependencies and runs.
fn worker(core: Arc<RmaCore>, rx: Receiver<Job>) {
    let mut expected = vec![0u64; core.sig.len()];
    let mut flight = Flight::new();
    loop {
        let job = if flight.is_empty() {
            match rx.recv() {
                Ok(j) => j,
                Err(_) => break,
            }
        } else {
            match rx.try_recv() {
                Ok(j) => j,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    core.advance(&mut flight);
                    continue;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        };
        let pipelined = flight.len() < MAX_IN_FLIGHT
            && matches!(job.op, Op::Put(_))
            && job
                .deps
                .iter()
                .all(|d| matches!(d.peek(), Some(Ok(()))) || flight.iter().any(|(_, j)| Arc::ptr_eq(&j.done, d)));
        if let (true, Op::Put(p)) = (pipelined, &job.op) {
            match core.issue(p) {
                Ok(req) => {
                    let mut job = job;
                    if let Op::Put(p) = &mut job.op {
                        p.issued = Some(Instant::now());
                    }
                    flight.push_back((req, job));
                }
                Err(e) => {
                    core.drain(&mut flight);
                    finish(&core, job, Err(e));
                }
            }
            continue;
        }
        core.drain(&mut flight);
        let r = core.wait_deps(&job).and_then(|()| match &job.op {
            Op::Put(p) => core.issue(p).and_then(|req| {
                let deadline = Instant::now() + core.timeout;
                while !core.done(p, req)? {
                    core.idle(&|| p.what(), p.peer, deadline)?;
                }
                Ok(())
            }),
            Op::Wait(d) => core.wait(d, &mut expected),
        });
        finish(&core, job, r);
    }
    core.drain(&mut flight);
}

/// Publishes a job's outcome (a failure also as a WARN line).
fn finish(core: &RmaCore, job: Job, r: Result<()>) {
    if let Err(e) = &r {
        crate::log::nccl_warn!("rank {}: {e}", core.rank);
    }
    job.done.complete(r);
}

impl RmaCore {
    /// Waits (bounded) for the work a job must follow on its stream.
    fn wait_deps(&self, job: &Job) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        for d in &job.deps {
            match d.wait(Some(deadline), &|| !self.abort.load(Ordering::Relaxed)) {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    return Err(Error::InvalidUsage(format!(
                        "one-sided operation not run: earlier work on its stream failed: {e}"
                    )));
                }
                None if self.abort.load(Ordering::Relaxed) => {
                    return Err(Error::Aborted("one-sided operation waiting for its stream".into()));
                }
                None => {
                    return Err(Error::Timeout(format!(
                        "one-sided operation: the earlier work on its stream did not finish within {:?}",
                        self.timeout
                    )));
                }
            }
        }
        Ok(())
    }

    /// Completes the puts at the front of `flight` that are done (in issue order);
    /// if the first is not, progresses the plugin once and checks its bound.
    fn advance(&self, flight: &mut Flight) {
        while let Some((req, job)) = flight.front() {
            let Op::Put(p) = &job.op else {
                unreachable!("only puts are in flight")
            };
            let r = match self.done(p, *req) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    let deadline = p.issued.unwrap_or_else(Instant::now) + self.timeout;
                    match self.idle(&|| p.what(), p.peer, deadline) {
                        Ok(()) => return,
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            let (_, job) = flight.pop_front().expect("front");
            finish(self, job, r);
        }
    }

    /// Completes every put in flight (each bounded by the timeout).
    fn drain(&self, flight: &mut Flight) {
        while !flight.is_empty() {
            self.advance(flight);
        }
    }
}

/// The live RMA state: the core and its thread.
struct Live {
    core: Arc<RmaCore>,
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// The newest job (deregistration and teardown wait for it).
    last: Option<Arc<Completion>>,
}

enum State {
    /// Not initialised yet.
    Untried,
    Live(Live),
    /// Initialisation failed on some rank (every rank holds the same reason).
    Failed(String),
    /// Torn down with the communicator.
    Closed,
}

/// A communicator's one-sided state (in [`CommInner`]).
pub(crate) struct RmaSlot {
    st: Mutex<State>,
    comm_id: u64,
    timeout: Duration,
    traffic_class: i32,
    /// RMA contexts (`comm::params::resolve_num_rma_ctx`; 0: one-sided operations disabled).
    nctx: usize,
    /// One-sided operations handed to the RMA thread so far ([`Comm::rma_submitted`]).
    submitted: AtomicU64,
}

/// The `NCCL_*` parameters of the one-sided API.
struct RmaParams {
    plugin: Option<String>,
    eager: bool,
}

impl RmaParams {
    fn read() -> Result<RmaParams> {
        use crate::config::{IntParamExt, StrParamExt, params};
        let cfg = crate::config::Config::global();
        Ok(RmaParams {
            plugin: params::RMA_PLUGIN.get(cfg).map(str::to_owned),
            eager: params::RMA_EAGER_INIT.get(cfg)? == 1,
        })
    }
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// All-gathers `ok` and a message; on any rank's failure returns every failing rank's
/// message (the same text on every rank).
fn agree(bootstrap: &Bootstrap, mine: std::result::Result<Vec<u8>, String>) -> Result<Vec<Vec<u8>>> {
    let blob = match &mine {
        Ok(b) => [&[1u8][..], b].concat(),
        Err(s) => [&[0u8][..], s.as_bytes()].concat(),
    };
    let all = bootstrap.allgather(&blob)?;
    let bad: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, b)| b.first() != Some(&1))
        .map(|(r, b)| format!("rank {r}: {}", String::from_utf8_lossy(b.get(1..).unwrap_or_default())))
        .collect();
    if bad.is_empty() {
        Ok(all.into_iter().map(|b| b[1..].to_vec()).collect())
    } else {
        Err(Error::InvalidUsage(bad.join("; ")))
    }
}

impl RmaSlot {
    pub(crate) fn new(comm_id: u64, timeout: Duration, traffic_class: i32, nctx: usize) -> RmaSlot {
        RmaSlot {
            st: Mutex::new(State::Untried),
            comm_id,
            timeout,
            traffic_class,
            nctx,
            submitted: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `NCCL_RMA_EAGER_INIT=1`: initialise at the end of communicator init
    /// (collective); a failure is logged and kept for the one-sided calls.
    pub(crate) fn eager_init(&self, comm: &CommInner) -> Result<()> {
        if self.nctx > 0
            && RmaParams::read()?.eager
            && let Err(e) = self.core(comm, true)
        {
            crate::log::nccl_info!(INIT, "NCCL_RMA_EAGER_INIT: one-sided operations unavailable: {e}");
        }
        Ok(())
    }

    /// The connected state; with `init` (a collective call) it is set up when untried.
    fn core(&self, comm: &CommInner, init: bool) -> Result<Arc<RmaCore>> {
        if self.nctx == 0 {
            return Err(Error::InvalidUsage(
                "one-sided operations are disabled on this communicator (numRmaCtx / NCCL_NUM_RMA_CTX is 0)".into(),
            ));
        }
        let mut st = self.lock();
        if matches!(*st, State::Untried) && init {
            *st = match self.connect(comm) {
                Ok(l) => State::Live(l),
                Err(e) => State::Failed(e.to_string()),
            };
        }
        match &*st {
            State::Live(l) => Ok(l.core.clone()),
            State::Untried => Err(Error::InvalidUsage(
                "one-sided operations need the RMA plugin, which initialises at the first window \
                 registration (collective) or with NCCL_RMA_EAGER_INIT=1: register a window first"
                    .into(),
            )),
            State::Failed(why) => Err(Error::InvalidUsage(format!(
                "one-sided operations are unavailable on this communicator: {why}"
            ))),
            State::Closed => Err(Error::InvalidUsage(
                "communicator already finalized or destroyed".into(),
            )),
        }
    }

    /// The connected state for a one-sided call (`ncclPutSignal`, `ncclSignal`,
    /// `ncclWaitSignal`): as [`Self::core`] without initialising, but a communicator on
    /// which RMA is unavailable (no usable RMA plugin, its connect failed, or
    /// `numRmaCtx` 0) gets [`Error::InvalidArgument`], as NCCL 2.30.7's
    /// `src/enqueue.cc` (`rmaTaskAppend`) answers `!comm->hostRmaSupport` ("One sided
    /// RMA: host RMA is not supported in this communicator", `ncclInvalidArgument`).
    /// A call before any window registration stays [`Error::InvalidUsage`] (NCCL:
    /// "ncclSignal/ncclWaitSignal called before RMA is initialized", `ncclInvalidUsage`),
    /// as does a finalized communicator.
    fn core_for_call(&self, comm: &CommInner) -> Result<Arc<RmaCore>> {
        let unavailable = self.nctx == 0 || matches!(*self.lock(), State::Failed(_));
        match self.core(comm, false) {
            Err(Error::InvalidUsage(m)) if unavailable => Err(Error::InvalidArgument(format!(
                "one sided RMA: host RMA is not supported in this communicator: {m}"
            ))),
            r => r,
        }
    }

    /// NCCL's connect sequence (module docs); every rank reaches the same verdict.
    fn connect(&self, comm: &CommInner) -> Result<Live> {
        let params = RmaParams::read()?;
        let opts = crate::plugin::LoadOptions::from_env();
        let dirs = crate::plugin::library::search_dirs(&opts);
        let net_lib = comm.net.plugin_library();
        let net_desc = net_lib
            .as_ref()
            .map_or_else(|| "none".to_owned(), |l| l.opened_as().to_owned());
        let loaded = load_rma(params.plugin.as_deref(), &dirs, net_lib, self.comm_id);
        let mut handle: NetHandle = [0; NCCL_NET_HANDLE_MAXSIZE];
        let mine = match &loaded {
            None => Err(format!(
                "no RMA plugin: neither NCCL_RMA_PLUGIN ({}) nor the net plugin's library ({net_desc}) offers \
                 a usable ncclRmaPlugin_v14/_v13 table with a device (the in-tree socket plugin offers RMA only \
                 with NCCL_SOCKET_RMA_ENABLE=1; NCCL_DEBUG=INFO shows each candidate)",
                params.plugin.as_deref().unwrap_or("unset: libnccl-rma.so")
            )),
            Some((a, ictx, _)) => a
                .listen(*ictx, 0, &mut handle)
                .map(|l| {
                    let mut v = (l.0 as usize).to_ne_bytes().to_vec();
                    v.extend_from_slice(&handle);
                    v
                })
                .map_err(|e| format!("RMA listen: {e}")),
        };
        let listen = mine
            .as_ref()
            .ok()
            .map(|v| RawComm(usize::from_ne_bytes(v[..8].try_into().expect("8 bytes")) as *mut _));
        let cleanup = |coll: Option<RawComm>| {
            if let Some((a, ictx, _)) = &loaded {
                if let Some(l) = listen {
                    let _ = a.close_listen(l);
                }
                if let Some(c) = coll {
                    let _ = a.close_coll(c);
                }
                let _ = a.finalize_ctx(*ictx);
            }
        };
        let all = match agree(&comm.bootstrap, mine.map(|v| v[8..].to_vec())) {
            Ok(all) => all,
            Err(e) => {
                cleanup(None);
                return Err(e);
            }
        };
        let (a, ictx, src) = loaded.clone().expect("every rank has a plugin");
        let listen = listen.expect("listened");
        let mut handles: Vec<NetHandle> = all
            .iter()
            .map(|b| b.as_slice().try_into().unwrap_or([0; NCCL_NET_HANDLE_MAXSIZE]))
            .collect();
        let (rank, nranks) = (comm.rank, comm.nranks);
        let coll = match a.connect(ictx, &mut handles, rank, listen) {
            Ok(c) => c,
            Err(e) => {
                cleanup(None);
                return Err(Error::net("RMA connect", e));
            }
        };
        let _ = a.close_listen(listen);
        let sig: Box<[AtomicU64]> = (0..self.nctx * NUM_RMA_SIG * nranks)
            .map(|_| AtomicU64::new(0))
            .collect();
        let set_up = (|| {
            let rctx = a.create_context(
                coll,
                &RmaConfig {
                    n_contexts: self.nctx as i32,
                    traffic_class: self.traffic_class,
                },
            )?;
            let p = sig.as_ptr() as *mut u8;
            match a.reg_mr_sym(
                coll,
                p,
                sig.len() * 8,
                PtrType::Host,
                u64::from(NCCL_NET_MR_FLAG_FORCE_SO),
            ) {
                Ok(mr) => Ok((rctx, mr)),
                Err(e) => {
                    let _ = a.destroy_context(rctx);
                    Err(e)
                }
            }
        })();
        let local = set_up
            .as_ref()
            .map(|_| Vec::new())
            .map_err(|e| format!("RMA setup: {e}"));
        if let Err(e) = agree(&comm.bootstrap, local) {
            if let Ok((rctx, mr)) = set_up {
                let _ = a.dereg_mr_sym(coll, mr);
                let _ = a.destroy_context(rctx);
            }
            let _ = a.close_coll(coll);
            let _ = a.finalize_ctx(ictx);
            return Err(e);
        }
        let (rctx, sig_mr) = set_up.expect("agreed");
        crate::log::nccl_info!(
            INIT,
            "RMA: comm rank {rank} nranks {nranks}: plugin {} (v{}, {:?}), {} context(s), {NUM_RMA_SIG} signal(s) per peer",
            a.info().name,
            a.info().version,
            src,
            self.nctx
        );
        let core = Arc::new(RmaCore {
            id: next_id(),
            a,
            ictx,
            coll,
            rctx,
            rank,
            nranks,
            nctx: self.nctx,
            sig,
            sig_mr,
            windows: Mutex::new(Vec::new()),
            plugin: Mutex::new(()),
            timeout: self.timeout,
            abort: comm.proxy.shared.abort.clone(),
        });
        let (tx, rx) = channel();
        let c = core.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ferroccl-rma-{rank}"))
            .spawn(move || worker(c, rx))
            .map_err(|e| Error::System {
                what: "spawning the RMA thread".into(),
                source: Arc::new(e),
            })?;
        Ok(Live {
            core,
            tx: Some(tx),
            thread: Some(thread),
            last: None,
        })
    }

    /// Queues `op` behind the earlier work of each of `streams` (one stream outside a
    /// group; inside one, every stream of the communicator's operations in the group,
    /// whose later work then waits for `op` too: `group.rs`).
    fn submit(&self, op: Op, what: WorkWhat, streams: &[&Stream]) -> Result<()> {
        let mut st = self.lock();
        let State::Live(l) = &mut *st else {
            return Err(Error::InvalidUsage(
                "communicator already finalized or destroyed".into(),
            ));
        };
        let done = Completion::new();
        let mut deps = Deps::new();
        for s in streams {
            if let Err(e) = s.push(done.clone(), what, &mut deps) {
                done.complete(Err(e.clone()));
                return Err(e);
            }
        }
        l.last = Some(done.clone());
        let job = Job {
            op,
            deps,
            done: done.clone(),
        };
        if l.tx.as_ref().is_none_or(|tx| tx.send(job).is_err()) {
            done.complete(Err(Error::Internal("the RMA thread has stopped".into())));
        }
        self.submitted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits (bounded) for every queued one-sided operation.
    fn drain(&self) -> Result<()> {
        let last = match &*self.lock() {
            State::Live(l) => l.last.clone(),
            _ => None,
        };
        if let Some(c) = last
            && c.wait(Some(Instant::now() + self.timeout), &|| true).is_none()
        {
            return Err(Error::Timeout(format!(
                "one-sided operations still running after {:?}",
                self.timeout
            )));
        }
        Ok(())
    }

    /// Stops the RMA thread (after its queued work, which an abort ends at once) and
    /// releases the plugin's resources (NCCL's `ncclRmaProxyFinalize` order).
    pub(crate) fn close(&self) {
        let st = std::mem::replace(&mut *self.lock(), State::Closed);
        if let State::Live(mut l) = st {
            drop(l.tx.take());
            if let Some(t) = l.thread.take() {
                let _ = t.join();
            }
            l.core.teardown();
        }
    }
}

fn bytes_of(op: &str, count: usize, dtype: DataType) -> Result<usize> {
    count
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::InvalidArgument(format!("{op}: count {count} overflows")))
}

impl Comm {
    /// `ncclCommWindowRegister(comm, buf, size, &win, NCCL_WIN_COLL_SYMMETRIC)`:
    /// registers this rank's `size` bytes at `buf` as a symmetric window. Collective:
    /// every rank registers its windows in the same order (sizes may differ); returns
    /// once every rank has registered, so peers may target it at once. The first
    /// registration initialises the RMA plugin (module docs).
    ///
    /// Errors: [`Error::InvalidUsage`] without a usable RMA plugin (naming why, the
    /// same on every rank; NCCL 2.30.7's `src/rma/rma_proxy.cc`
    /// `ncclRmaProxyConnectOnce` answers a missing plugin with `ncclInvalidUsage`, "RMA
    /// not supported."; the one-sided calls after it get [`Error::InvalidArgument`]); [`Error::InvalidArgument`] for a NULL or empty buffer;
    /// `regMrSym` failing on any rank (every rank fails, naming it).
    ///
    /// # Safety
    /// `buf` must be valid for reads and writes of `size` bytes until the window is
    /// deregistered or the communicator is destroyed; peers write into it.
    pub unsafe fn window_register(&self, buf: *mut u8, size: usize) -> Result<Window> {
        let core = self.inner.rma.core(&self.inner, true)?;
        let mine = if buf.is_null() || size == 0 {
            Err(format!(
                "window buffer {buf:?} of {size} bytes (expected a non-NULL buffer of ≥ 1 byte)"
            ))
        } else {
            core.call(|a| a.reg_mr_sym(core.coll, buf, size, PtrType::Host, 0))
                .map_err(|e| format!("regMrSym of {size} bytes: {e}"))
        };
        let mr = mine.as_ref().ok().copied();
        let all = agree(
            &self.inner.bootstrap,
            mine.map(|_| (size as u64).to_le_bytes().to_vec()),
        )
        .inspect_err(|_| {
            if let Some(mr) = mr {
                let _ = core.call(|a| a.dereg_mr_sym(core.coll, mr));
            }
        })
        .map_err(|e| Error::InvalidArgument(format!("window registration failed: {e}")))?;
        let sizes = all
            .iter()
            .map(|b| u64::from_le_bytes(b.as_slice().try_into().unwrap_or_default()) as usize)
            .collect();
        let w = Arc::new(WinInner {
            owner: core.id,
            base: buf,
            size,
            mr: mr.expect("agreed"),
            sizes,
            live: AtomicBool::new(true),
        });
        core.windows.lock().unwrap_or_else(|e| e.into_inner()).push(w.clone());
        Ok(Window { inner: w })
    }

    /// `ncclCommWindowDeregister`: releases `win` (collective, in the same order on
    /// every rank). Waits (bounded) for this rank's queued one-sided operations and
    /// for every rank to arrive, so no peer is still told to use it; the caller must
    /// have synchronized the operations that target it, as NCCL requires.
    ///
    /// Errors: a window of another communicator or already deregistered
    /// ([`Error::InvalidArgument`]); timeouts; `deregMrSym` failing.
    pub fn window_deregister(&self, win: Window) -> Result<()> {
        let core = self.inner.rma.core(&self.inner, false)?;
        if win.inner.owner != core.id || !win.inner.live.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(
                "window_deregister: the window is not registered on this communicator".into(),
            ));
        }
        self.inner.rma.drain()?;
        self.inner.bootstrap.barrier()?;
        core.windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| !Arc::ptr_eq(w, &win.inner));
        win.inner.live.store(false, Ordering::Release);
        core.call(|a| a.dereg_mr_sym(core.coll, win.inner.mr))
            .map_err(|e| Error::net("deregMrSym", e))
    }

    /// `ncclPutSignal(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx,
    /// ctx, flags, comm, stream)`: writes `count` elements at `src` into `peer`'s part
    /// of window `win` at byte `offset`, then raises `peer`'s signal `sig_idx` of
    /// context `ctx` for this rank, once the data is visible there. Enqueued on
    /// `stream` (returns at once); completes when the plugin reports the put done.
    ///
    /// Errors (at enqueue): RMA unavailable on this communicator (no usable RMA
    /// plugin, or `numRmaCtx` 0: [`Error::InvalidArgument`], as NCCL); `flags != 0`,
    /// `sig_idx`/`ctx`/`peer` out of range, `src` not inside a window registered on
    /// this communicator, the target range outside `peer`'s window
    /// ([`Error::InvalidArgument`]). At run time (reported by `stream.synchronize()`):
    /// plugin errors and timeouts naming the peer.
    ///
    /// # Safety
    /// `src` must stay readable for `count` elements until `stream` is synchronized.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put_signal(
        &self,
        src: *const u8,
        count: usize,
        dtype: DataType,
        peer: usize,
        win: &Window,
        offset: usize,
        sig_idx: usize,
        ctx: usize,
        flags: u32,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "PutSignal";
        let core = self.inner.rma.core_for_call(&self.inner)?;
        core.check_common(OP, peer, sig_idx, ctx, flags)?;
        let bytes = bytes_of(OP, count, dtype)?;
        if win.inner.owner != core.id || !win.inner.live.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "{OP}: the peer window is not registered on this communicator"
            )));
        }
        let peer_size = win.inner.sizes[peer];
        if offset.checked_add(bytes).is_none_or(|end| end > peer_size) {
            return Err(Error::InvalidArgument(format!(
                "{OP}: {bytes} bytes at offset {offset} do not fit rank {peer}'s window of {peer_size} bytes"
            )));
        }
        let (sw, src_off) = core.find_window(src, bytes).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{OP}: the source {src:?} ({bytes} bytes) is not inside a window registered on this communicator \
                 (register it with window_register first, as NCCL requires)"
            ))
        })?;
        let put = Put {
            issued: None,
            op: OP,
            // SAFETY: `src_off` lies inside the source window (found above).
            src: unsafe { sw.base.add(src_off) },
            src_off,
            src_mr: sw.mr,
            dst: if peer == core.rank {
                // SAFETY: `offset + bytes` fits this rank's window when the peer is this
                // rank (the range was checked with `peer`'s size, which is ours then).
                unsafe { win.inner.base.add(offset) }
            } else {
                std::ptr::null_mut()
            },
            dst_off: offset,
            dst_mr: win.inner.mr,
            bytes,
            peer,
            ctx,
            sig: sig_idx,
        };
        self.rma_enqueue(Op::Put(put), WorkWhat::Rma { op: OP, peer }, stream, ctx)
    }

    /// `ncclSignal(peer, sigIdx, ctx, flags, comm, stream)`: raises `peer`'s signal
    /// `sig_idx` of context `ctx` for this rank (a put of 0 bytes with a signal, as
    /// NCCL runs it: `src/rma/rma.cc`, `ncclLaunchRma`), after the earlier one-sided
    /// operations of this communicator. Enqueued on `stream`.
    ///
    /// Errors: as [`Comm::put_signal`]'s (without the buffer checks); the RMA plugin
    /// must be initialised (a window registered, or `NCCL_RMA_EAGER_INIT=1`).
    pub fn signal(&self, peer: usize, sig_idx: usize, ctx: usize, flags: u32, stream: &Stream) -> Result<()> {
        const OP: &str = "Signal";
        let core = self.inner.rma.core_for_call(&self.inner)?;
        core.check_common(OP, peer, sig_idx, ctx, flags)?;
        let base = core.sig.as_ptr() as *mut u8;
        let put = Put {
            issued: None,
            op: OP,
            src: base,
            src_off: 0,
            src_mr: core.sig_mr,
            dst: base,
            dst_off: 0,
            dst_mr: core.sig_mr,
            bytes: 0,
            peer,
            ctx,
            sig: sig_idx,
        };
        self.rma_enqueue(Op::Put(put), WorkWhat::Rma { op: OP, peer }, stream, ctx)
    }

    /// `ncclWaitSignal(nDesc, signalDescs, comm, stream)`: completes once, for every
    /// descriptor, `op_cnt` more signals from `peer` (on `sig_idx`, `ctx`) have arrived
    /// than earlier waits consumed. Enqueued on `stream`; later work on the stream runs
    /// after it, so the data of the puts it waited for can be read then.
    ///
    /// Errors: at enqueue, an out-of-range descriptor or RMA unavailable
    /// ([`Error::InvalidArgument`]), no window registered yet ([`Error::InvalidUsage`]);
    /// at run time, [`Error::Timeout`] naming the peer and the counts
    /// when the signals do not arrive within the communicator's timeout.
    pub fn wait_signal(&self, descs: &[WaitSignalDesc], stream: &Stream) -> Result<()> {
        const OP: &str = "WaitSignal";
        let core = self.inner.rma.core_for_call(&self.inner)?;
        for d in descs {
            core.check_common(OP, d.peer, d.sig_idx, d.ctx, 0)?;
        }
        let (peer, ctx) = descs.first().map_or((0, 0), |d| (d.peer, d.ctx));
        self.rma_enqueue(Op::Wait(descs.to_vec()), WorkWhat::Rma { op: OP, peer }, stream, ctx)
    }

    /// Hands a checked one-sided call to the RMA thread, or, inside a group, defers
    /// that to the outermost `group_end` (module docs, "Groups").
    fn rma_enqueue(&self, op: Op, what: WorkWhat, stream: &Stream, ctx: usize) -> Result<()> {
        let inner = self.inner.clone();
        let task: crate::group::RmaSubmit = Box::new(move |streams| inner.rma.submit(op, what, streams));
        match crate::group::try_defer_rma(ctx, &self.inner.proxy, stream, task) {
            None => Ok(()),
            Some(task) => task(&[stream]),
        }
    }

    /// How many one-sided operations this communicator has handed to its RMA thread
    /// (deferred calls of an open group are not counted until its `group_end`). For
    /// tests of the group semantics.
    #[doc(hidden)]
    pub fn rma_submitted(&self) -> u64 {
        self.inner.rma.submitted.load(Ordering::Relaxed)
    }

    /// Whether the one-sided API is usable on this communicator (the RMA plugin was
    /// initialised); `Err` says why not (or that no window was registered yet).
    pub fn rma_status(&self) -> Result<()> {
        self.inner.rma.core(&self.inner, false).map(|_| ())
    }
}
