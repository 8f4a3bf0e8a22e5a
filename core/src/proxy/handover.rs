//! The hand-over between the user's threads and the proxy: [`ProxyHandle`]
//! decides each work item (tuning), then either runs it on the enqueuing
//! thread while the proxy thread is idle (for at most the spin window) or
//! queues it, bounded, for the proxy thread, ordered after its streams'
//! previous work; work an enqueuing thread started and did not finish is
//! parked for the proxy thread to take first. Also finalize's wait, close,
//! abort and the thread's start and stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::lifecycle::Inline;
use super::shared::Shared;
use super::state::Proxy;
use super::work::{Item, Work};
use crate::coll::{CollArgs, PerOp, WorkWhat};
use crate::error::Error;
use crate::profiler::{ApiTag, Profiler};
use crate::stream::{Completion, Deps, Stream};
use crate::tune::Tuning;

/// Work whose buffers are all at most this many bytes waits for queued work
/// (at most the proxy's spin window) so that it can run on the enqueuing thread
/// (`ProxyHandle::submit`); larger work, where the hand-off is small beside the
/// transfer, queues at once and keeps the caller free.
const INLINE_WAIT_MAX_BYTES: usize = 64 << 10;

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
        if !self.spin.is_zero() && colls.iter().all(|a| a.bytes.0.max(a.bytes.1) <= INLINE_WAIT_MAX_BYTES) {
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
            && let Some(core) = self.lock_idle()
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
            .and_then(|core| core.plan_cache.decisions_for(&colls));
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
            Some(mut core) => match core.run_inline(&work, self.spin) {
                Inline::Done => Ok(()),
                Inline::Resume(run) => self.hand_over(Item::Resume(work, run), streams, core),
                Inline::Failed(e) => self.hand_over(Item::Failed(work, e), streams, core),
            },
            None => self.queue(work, streams),
        }
    }

    /// The proxy state, locked, when nothing is queued: the proxy thread
    /// releases a finished item's queue slot (which wakes an enqueuer waiting
    /// in `wait_empty`) a moment before it unlocks the state, and an inline
    /// run by another thread holds it for at most the spin window. A single
    /// `try_lock` lost that race on every call of a back-to-back loop once one
    /// operation had been queued (a large one, say): each later one queued too
    /// and paid two thread hand-offs (about 24 µs on the 2-core VM instead of
    /// 0.4 µs; the first rows of a perf sweep after its largest-size warm-up).
    /// Where threads outnumber cores the wake-up of this thread commonly
    /// preempts the proxy thread on its own core with the lock still held, so
    /// after a few polls this thread yields its core to it. So: retry
    /// (polling, then yielding) for at most the spin window while the queue
    /// stays empty; `None` once work is queued, the window has passed, or the
    /// lock is poisoned.
    fn lock_idle(&self) -> Option<std::sync::MutexGuard<'_, Proxy>> {
        let mut until = None;
        let mut polls = 0u32;
        loop {
            match self.core.try_lock() {
                Ok(core) => return Some(core),
                Err(std::sync::TryLockError::Poisoned(_)) => return None,
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if self.shared.queued.load(Ordering::SeqCst) != 0 {
                return None;
            }
            let now = Instant::now();
            if now >= *until.get_or_insert(now + self.spin) {
                return None;
            }
            polls += 1;
            if polls < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
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

    /// The survivors' agreement for an operation that ran on the caller's
    /// thread and failed with `e` (see `Proxy::fail_outside`); waits for the
    /// proxy state, so for a running work item (bounded by its watchdog) or an
    /// agreement under way (bounded by the timeout). Returns the error to give
    /// the caller, with the agreed diagnosis.
    pub(crate) fn agree_outside(&self, what: &str, e: crate::bootstrap::BootstrapError) -> Error {
        self.core
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fail_outside(what, e)
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
