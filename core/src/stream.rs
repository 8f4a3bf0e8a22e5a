//! An ordered host stream, the stand-in for a CUDA stream: collectives are
//! enqueued on it and return at once; [`Stream::synchronize`] waits for all of
//! them and reports the first error.
//!
//! Ordering: an operation enqueued on a stream starts only after every operation
//! enqueued on that stream before it has finished (on whatever communicator).
//! Operations of one communicator additionally run in enqueue order, as NCCL
//! requires every rank to issue them in the same order.
//!
//! **Stream-ordered execution on a caller's device stream** ([`Stream::on_device`]):
//! NCCL enqueues its kernel on the caller's `cudaStream_t`, so an operation
//! starts after the work the caller enqueued on that stream before it, and the
//! caller's later work starts after the operation; the call itself returns at
//! once. ferroccl runs operations on its proxy thread, so a stream bound to a
//! [`DeviceStream`] keeps the same order with two hooks per operation, both
//! enqueued on the caller's stream at enqueue time: a host callback
//! ([`DeviceStream::host_callback`], CUDA's `cuLaunchHostFunc`, which runs once
//! all earlier work on the stream has completed) opens the operation's gate,
//! and a wait ([`DeviceStream::wait_for`]) holds the caller's later work until
//! the operation is done ([`OpDone`]). The caller may then wait on its own
//! stream (`cudaStreamSynchronize`) or on [`Stream::synchronize`].
//!
//! Nothing blocks inside a host function ([`FlagWaitStream`]: the wait is a
//! device-side `cuStreamWaitValue32` on a host flag the proxy sets), and the
//! proxy's own CUDA work never waits for the caller's stream (its staging
//! copies run on the CUDA backend's non-blocking stream, with its kernels
//! loaded and host bounce buffers reserved on the enqueuing thread; see
//! `coll::mem`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::coll::WorkWhat;
use crate::error::Error;

/// Work an item waits for (see [`Stream::push`]): at most a stream's previous
/// operation and its device gate without a heap allocation.
pub(crate) type Deps = smallvec::SmallVec<[Arc<Completion>; 2]>;

/// Completion flag of one enqueued piece of work.
///
/// The outcome is one atomic word ([`PENDING`], [`SUCCEEDED`], [`FAILED`]),
/// so finishing successfully and asking whether work has finished take no
/// lock (both happen once per operation on the enqueue path); the error of a
/// failed operation and the sleep of a waiter go through the mutex.
#[derive(Default)]
pub(crate) struct Completion {
    outcome: AtomicU8,
    /// Threads blocked in [`Completion::wait`]: `complete` skips the lock and
    /// the wake-up system call when there are none (the common case of a
    /// proxy finishing work nobody is waiting on yet).
    waiters: AtomicUsize,
    /// The error of a [`FAILED`] outcome (set before the outcome is published).
    error: Mutex<Option<Error>>,
    cv: Condvar,
    /// Run once when the outcome is published ([`Completion::on_done`]):
    /// releases a device stream waiting on a host flag. `has_hooks` spares the
    /// lock when there are none (every operation not ordered with a device).
    hooks: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    has_hooks: AtomicBool,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("outcome", &self.outcome.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// [`Completion::outcome`]: not finished.
const PENDING: u8 = 0;
/// [`Completion::outcome`]: finished successfully.
const SUCCEEDED: u8 = 1;
/// [`Completion::outcome`]: failed; the error is in [`Completion::error`].
const FAILED: u8 = 2;

impl Completion {
    pub(crate) fn new() -> Arc<Completion> {
        Arc::new(Completion::default())
    }

    /// Records the outcome (the first one wins) and wakes waiters.
    pub(crate) fn complete(&self, r: Result<(), Error>) {
        // The outcome is published with SeqCst and `waiters` read with SeqCst,
        // against a waiter's SeqCst increment then read of the outcome: either
        // the waiter sees the outcome, or this sees the waiter (and notifies
        // under the lock the waiter holds until it sleeps).
        let won = match r {
            Ok(()) => self
                .outcome
                .compare_exchange(PENDING, SUCCEEDED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok(),
            Err(e) => {
                let mut g = self.error.lock().unwrap_or_else(|e| e.into_inner());
                let won = self
                    .outcome
                    .compare_exchange(PENDING, FAILED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok();
                if won {
                    // Readers of a FAILED outcome take this lock, so they see the error.
                    *g = Some(e);
                }
                won
            }
        };
        if won && self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.error.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
        // `on_done` checks the outcome under the hooks lock after pushing: a hook
        // is either taken here or run by `on_done` itself, never lost.
        if won && self.has_hooks.load(Ordering::SeqCst) {
            let hooks = std::mem::take(&mut *self.hooks.lock().unwrap_or_else(|e| e.into_inner()));
            for h in hooks {
                h();
            }
        }
    }

    /// Runs `f` once the work has finished (successfully or not): at once if it
    /// has, else on the thread that completes it. `f` must be quick and must
    /// not block (it runs on the proxy thread).
    pub(crate) fn on_done(&self, f: Box<dyn FnOnce() + Send>) {
        let mut g = self.hooks.lock().unwrap_or_else(|e| e.into_inner());
        self.has_hooks.store(true, Ordering::SeqCst);
        if self.outcome.load(Ordering::SeqCst) == PENDING {
            g.push(f);
            return;
        }
        drop(g);
        f();
    }

    /// The outcome if finished.
    pub(crate) fn peek(&self) -> Option<Result<(), Error>> {
        match self.outcome.load(Ordering::Acquire) {
            PENDING => None,
            SUCCEEDED => Some(Ok(())),
            _ => Some(Err(self.failure())),
        }
    }

    /// Whether the work has finished (successfully or not).
    pub(crate) fn is_done(&self) -> bool {
        self.outcome.load(Ordering::Acquire) != PENDING
    }

    /// The error of a [`FAILED`] outcome.
    fn failure(&self) -> Error {
        self.error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| Error::Internal("failed operation without an error".into()))
    }

    /// Waits until finished or `deadline` passes (`None` = no deadline, but
    /// `keep_waiting` is asked every 100 ms and stops the wait when it says no).
    pub(crate) fn wait(&self, deadline: Option<Instant>, keep_waiting: &dyn Fn() -> bool) -> Option<Result<(), Error>> {
        if let Some(r) = self.peek() {
            return Some(r);
        }
        let mut s = self.error.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match self.outcome.load(Ordering::SeqCst) {
                PENDING => {}
                SUCCEEDED => return Some(Ok(())),
                _ => {
                    return Some(Err(s
                        .clone()
                        .unwrap_or_else(|| Error::Internal("failed operation without an error".into()))));
                }
            }
            let mut slice = Duration::from_millis(100);
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return None;
                }
                slice = slice.min(d - now);
            }
            if !keep_waiting() {
                return None;
            }
            self.waiters.fetch_add(1, Ordering::SeqCst);
            // Checked again after announcing the wait (see `complete`).
            if self.outcome.load(Ordering::SeqCst) == PENDING {
                s = self.cv.wait_timeout(s, slice).unwrap_or_else(|e| e.into_inner()).0;
            }
            self.waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A caller's device stream (a `cudaStream_t`) as the host sees it: the two
/// hooks stream-ordered execution needs (see the module docs). Implemented for
/// CUDA streams with `cuLaunchHostFunc`; tests use a mock stream.
pub trait DeviceStream: Send + Sync + std::fmt::Debug {
    /// Enqueues `f` on the stream: it runs once everything enqueued on the
    /// stream before it has completed (CUDA's `cuLaunchHostFunc`). It must be
    /// called exactly once, unless the stream fails (then never).
    ///
    /// Errors: the driver refused the enqueue.
    fn host_callback(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), Error>;

    /// Makes work enqueued on the stream after this call wait until `done`
    /// reports the operation finished (successfully or not).
    ///
    /// Errors: the driver refused the enqueue.
    fn wait_for(&self, done: OpDone) -> Result<(), Error>;
}

/// The completion of one enqueued operation, as a device stream waits for it.
#[derive(Debug, Clone)]
pub struct OpDone(Arc<Completion>);

impl OpDone {
    /// Whether the operation has finished.
    pub fn is_done(&self) -> bool {
        self.0.is_done()
    }

    /// Waits until the operation finishes or `timeout` passes; its outcome, or
    /// `None` on timeout. Every operation is bounded by its communicator's
    /// watchdog, so a generous timeout always sees the outcome.
    pub fn wait(&self, timeout: Duration) -> Option<Result<(), Error>> {
        self.0.wait(Some(Instant::now() + timeout), &|| true)
    }

    /// Runs `f` once the operation has finished (successfully or not): at once
    /// if it has, else on the proxy thread that finishes it. `f` must be quick,
    /// must not block and must not call the CUDA driver (it stores a flag).
    pub fn on_done(&self, f: Box<dyn FnOnce() + Send>) {
        self.0.on_done(f);
    }
}

/// A stream's state, shared by its clones.
#[derive(Debug, Default)]
struct StreamState {
    q: Mutex<StreamInner>,
    /// Whether `q.pending` may hold work: set when work is pushed, cleared
    /// (under the lock) once `pending` is found empty, so that the enqueue
    /// path's [`Stream::quiet`] usually takes no lock.
    busy: AtomicBool,
}

#[derive(Debug, Default)]
struct StreamInner {
    /// Work not yet seen complete by `synchronize`, in enqueue order, with a
    /// description for timeout messages.
    pending: VecDeque<(Arc<Completion>, WorkWhat)>,
    /// The first error of work already dropped from `pending` (reported by the
    /// next `synchronize`).
    first_error: Option<Error>,
}

impl StreamInner {
    /// Drops finished work from the front of `pending`, keeping the first error.
    fn drop_finished(&mut self) {
        while let Some(r) = self.pending.front().and_then(|(f, _)| f.peek()) {
            self.pending.pop_front();
            if let (Err(e), None) = (r, &self.first_error) {
                self.first_error = Some(e);
            }
        }
    }
}

/// An ordered queue of asynchronous operations (like a `cudaStream_t`).
///
/// Cheap to clone: clones share the same queue. Every operation enqueued by a
/// communicator is bounded by that communicator's timeout watchdog, so
/// [`Stream::synchronize`] always returns; [`Stream::with_timeout`] adds a bound
/// of the stream's own.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    inner: Arc<StreamState>,
    timeout: Option<Duration>,
    /// The caller's device stream operations are ordered with, if any.
    device: Option<Arc<dyn DeviceStream>>,
}

impl Stream {
    /// A new, empty stream with no timeout of its own.
    pub fn new() -> Stream {
        Stream::default()
    }

    /// A new stream whose `synchronize` gives up with [`Error::Timeout`] after `timeout`.
    pub fn with_timeout(timeout: Duration) -> Stream {
        Stream {
            inner: Arc::default(),
            timeout: Some(timeout),
            device: None,
        }
    }

    /// This stream, ordered with the caller's device stream `dev` from now on
    /// (see the module docs): each operation enqueued on it waits for the work
    /// enqueued on `dev` before it, and `dev`'s later work waits for the
    /// operation. Enqueue still returns at once.
    pub fn on_device(mut self, dev: Arc<dyn DeviceStream>) -> Stream {
        self.device = Some(dev);
        self
    }

    /// Registers new work `c`; adds the work it must wait for to `deps`: the
    /// stream's last, and with a device stream the gate its host callback
    /// opens. With a device stream, the stream's later work is made to wait for `c`.
    ///
    /// Finished work at the front of the queue is dropped here (its first error
    /// kept for `synchronize`), so a caller that enqueues without ever
    /// synchronizing holds memory for unfinished work only.
    ///
    /// Errors: the device stream refused a hook (nothing was registered).
    pub(crate) fn push(&self, c: Arc<Completion>, what: WorkWhat, deps: &mut Deps) -> Result<(), Error> {
        if let Some(dev) = &self.device {
            let gate = Completion::new();
            let g = gate.clone();
            dev.host_callback(Box::new(move || g.complete(Ok(()))))?;
            dev.wait_for(OpDone(c.clone()))?;
            deps.push(gate);
        }
        let mut g = self.inner.q.lock().unwrap_or_else(|e| e.into_inner());
        g.drop_finished();
        if let Some((prev, _)) = g.pending.back() {
            deps.push(prev.clone());
        }
        g.pending.push_back((c, what));
        self.inner.busy.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether new work on this stream may run at once on the enqueuing
    /// thread without being registered: no device stream to order with, and
    /// every operation enqueued before it has finished (finished ones are
    /// dropped here, their first error kept for `synchronize`).
    pub(crate) fn quiet(&self) -> bool {
        if self.device.is_some() {
            return false;
        }
        if !self.inner.busy.load(Ordering::Acquire) {
            return true;
        }
        let mut g = self.inner.q.lock().unwrap_or_else(|e| e.into_inner());
        g.drop_finished();
        let empty = g.pending.is_empty();
        if empty {
            self.inner.busy.store(false, Ordering::Release);
        }
        empty
    }

    /// Whether all enqueued work has finished (`cudaStreamQuery`); errors of
    /// finished work are reported by [`Stream::synchronize`].
    pub fn query(&self) -> bool {
        let g = self.inner.q.lock().unwrap_or_else(|e| e.into_inner());
        g.pending.iter().all(|(c, _)| c.is_done())
    }

    /// Waits for every operation enqueued so far (`cudaStreamSynchronize`).
    ///
    /// Errors: the first failed operation's error (all earlier-enqueued work has
    /// then been waited for or has failed too); [`Error::Timeout`] naming the
    /// operation still pending when the stream's own timeout expires.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.synchronize_timeout(self.timeout)
    }

    /// [`Stream::synchronize`] with an explicit bound (`None` = rely on the
    /// communicators' watchdogs only).
    pub fn synchronize_timeout(&self, timeout: Option<Duration>) -> Result<(), Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        // Wait for the newest operation first: stream order makes it finish after
        // the others in the common case, so the caller is woken once instead of
        // once per operation (every wake-up costs a context switch on a busy host).
        // The loop below then finds the others finished (or waits for stragglers)
        // and reports the first error in enqueue order.
        let last = {
            let g = self.inner.q.lock().unwrap_or_else(|e| e.into_inner());
            g.pending.back().cloned()
        };
        // On timeout the loop below names the oldest operation still pending.
        if let Some((c, _)) = last {
            let _ = c.wait(deadline, &|| true);
        }
        let mut first_err = self
            .inner
            .q
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first_error
            .take();
        loop {
            let next = {
                let g = self.inner.q.lock().unwrap_or_else(|e| e.into_inner());
                g.pending.front().cloned()
            };
            let Some((c, what)) = next else { break };
            match c.wait(deadline, &|| true) {
                Some(r) => {
                    let mut g = self.inner.q.lock().unwrap_or_else(|e| e.into_inner());
                    if g.pending.front().is_some_and(|(f, _)| Arc::ptr_eq(f, &c)) {
                        g.pending.pop_front();
                    }
                    if let (Err(e), None) = (r, &first_err) {
                        first_err = Some(e);
                    }
                }
                None => {
                    return Err(Error::Timeout(format!(
                        "stream synchronize gave up after {:?} waiting for {what}",
                        timeout.unwrap_or_default()
                    )));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Stream {
    /// Whether operations on this stream are ordered with a caller's device stream.
    pub(crate) fn has_device(&self) -> bool {
        self.device.is_some()
    }

    /// Whether two handles name the same stream.
    pub(crate) fn same(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The driver calls a [`FlagWaitStream`] makes on one device stream: CUDA's
/// ([`CudaStream`]) or a mock's (the tests' model of a GPU and its driver).
pub trait StreamDriver: Send + Sync + std::fmt::Debug {
    /// Enqueues `f` to run once the stream's earlier work has completed
    /// (`cuLaunchHostFunc`). `f` never blocks and never calls the driver.
    ///
    /// Errors: the driver refused the enqueue (then `f` is dropped unrun).
    fn host_func(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), Error>;

    /// `n` zeroed 32-bit flag words the host writes and the stream can wait on
    /// (`cuMemHostAlloc(DEVICEMAP)`): their host address and device address.
    /// Never freed: [`FlagPool`] keeps them for the process.
    ///
    /// Errors: the driver refused the allocation.
    fn alloc_flags(&self, n: usize) -> Result<(*mut u32, u64), Error>;

    /// Makes the stream's later work wait until the word at device address
    /// `addr` equals `value` (`cuStreamWaitValue32(..., EQ)`); returns at once.
    ///
    /// Errors: the driver refused the enqueue.
    fn wait_value(&self, addr: u64, value: u32) -> Result<(), Error>;

    /// The pool of flag words for this driver's device (one per device for the
    /// process, so that streams made per call do not leak pinned pages).
    fn flag_pool(&self) -> &Arc<FlagPool>;
}

/// One flag word: its host view, its device address, the value it holds.
#[derive(Debug)]
struct Flag {
    host: &'static std::sync::atomic::AtomicU32,
    dev: u64,
    value: u32,
}

/// Flag words of one device, recycled: a word is taken for one operation's wait
/// and handed back by a host function that runs once the stream has passed the
/// wait (so it is never rewritten while a stream may still read it).
#[derive(Debug, Default)]
pub struct FlagPool {
    free: Mutex<Vec<Flag>>,
}

/// Flag words allocated at a time.
const FLAG_PAGE_WORDS: usize = 1024;

impl FlagPool {
    /// A new, empty pool.
    pub fn new() -> Arc<FlagPool> {
        Arc::default()
    }

    fn take(&self, d: &dyn StreamDriver) -> Result<Flag, Error> {
        let mut g = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = g.pop() {
            return Ok(f);
        }
        let (host, dev) = d.alloc_flags(FLAG_PAGE_WORDS)?;
        for i in 0..FLAG_PAGE_WORDS {
            // SAFETY: the driver gave `FLAG_PAGE_WORDS` zeroed, 4-byte aligned
            // words that are never freed; they are only accessed atomically.
            let host = unsafe { std::sync::atomic::AtomicU32::from_ptr(host.add(i)) };
            g.push(Flag {
                host,
                dev: dev + 4 * i as u64,
                value: 0,
            });
        }
        Ok(g.pop().expect("a page of flags was just added"))
    }

    fn give(&self, f: Flag) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }
}

/// A caller's device stream ordered with operations **without blocking any
/// host thread**: the gate is a host function that only completes a flag in
/// host memory; the caller's later work waits on the device
/// ([`StreamDriver::wait_value`]) for a host flag word that the proxy thread
/// sets with a plain store when the operation finishes ([`OpDone::on_done`]);
/// a last host function returns the word to its pool.
///
/// Why not a host function that waits for the operation: CUDA runs host
/// functions on a driver thread that may serve every stream of the process, so
/// a blocked one holds back other streams' gates (two ranks of one process on
/// two streams deadlock: rank 0's wait blocks the thread that must open rank
/// 1's gate, and rank 0's operation needs rank 1's); and the proxy's own CUDA
/// calls (staging copies) must never wait for the caller's stream, which then
/// waits for the proxy. NCCL never blocks in host functions either: it enqueues
/// its kernel on the caller's stream, its host callback only hands the plan to
/// the proxy (`src/enqueue.cc`, `hostStreamPlanTask`), and the kernel waits for
/// the proxy on the device through host-mapped flags, as the stream does here.
#[derive(Debug)]
pub struct FlagWaitStream<D: StreamDriver> {
    driver: D,
}

impl<D: StreamDriver> FlagWaitStream<D> {
    /// Orders operations with the stream `driver` drives.
    pub fn new(driver: D) -> FlagWaitStream<D> {
        FlagWaitStream { driver }
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }
}

impl<D: StreamDriver> DeviceStream for FlagWaitStream<D> {
    fn host_callback(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), Error> {
        self.driver.host_func(f)
    }

    fn wait_for(&self, done: OpDone) -> Result<(), Error> {
        let pool = self.driver.flag_pool().clone();
        let mut flag = pool.take(&self.driver)?;
        // A value the word does not hold now (it holds `flag.value`).
        flag.value = flag.value.wrapping_add(1);
        if let Err(e) = self.driver.wait_value(flag.dev, flag.value) {
            flag.value = flag.value.wrapping_sub(1);
            pool.give(flag);
            return Err(e);
        }
        let (host, value) = (flag.host, flag.value);
        // The stream passes the wait once this store is visible (mapped pinned
        // memory: a host store, no CUDA call).
        done.on_done(Box::new(move || host.store(value, Ordering::SeqCst)));
        // Once the stream is past the wait, the word may serve another wait.
        // If the driver refuses this, the word is simply not recycled.
        let p = pool.clone();
        self.driver.host_func(Box::new(move || p.give(flag)))
    }
}

/// CUDA's side of a [`FlagWaitStream`]: `cuLaunchHostFunc`, mapped pinned flag
/// words and `cuStreamWaitValue32` on a caller's `CUstream`.
#[cfg(feature = "cuda")]
#[derive(Debug)]
pub struct CudaStreamDriver {
    raw: usize,
    ordinal: usize,
    pool: Arc<FlagPool>,
}

#[cfg(feature = "cuda")]
impl StreamDriver for CudaStreamDriver {
    fn host_func(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), Error> {
        // SAFETY: a live stream of this device (the `CudaStream::from_raw` contract).
        unsafe { ferroccl_kernels::cuda::launch_host_func(self.ordinal, self.raw as *mut std::ffi::c_void, f) }
            .map_err(Error::from)
    }

    fn alloc_flags(&self, n: usize) -> Result<(*mut u32, u64), Error> {
        ferroccl_kernels::cuda::alloc_host_flags(self.ordinal, n).map_err(Error::from)
    }

    fn wait_value(&self, addr: u64, value: u32) -> Result<(), Error> {
        // SAFETY: a live stream (the `from_raw` contract) and a flag word of
        // this device's pool, never freed.
        unsafe {
            ferroccl_kernels::cuda::stream_wait_value32(self.ordinal, self.raw as *mut std::ffi::c_void, addr, value)
        }
        .map_err(Error::from)
    }

    fn flag_pool(&self) -> &Arc<FlagPool> {
        &self.pool
    }
}

/// A caller's CUDA stream (`cudaStream_t` / `CUstream`) as a [`DeviceStream`]:
/// a [`FlagWaitStream`] on CUDA (see there: nothing blocks a host function).
#[cfg(feature = "cuda")]
#[derive(Debug)]
pub struct CudaStream(FlagWaitStream<CudaStreamDriver>);

#[cfg(feature = "cuda")]
impl CudaStream {
    /// Wraps the CUDA stream `raw` of device `ordinal`. `timeout` is kept for
    /// callers of the earlier signature and unused: the stream waits on the
    /// device, and every operation is bounded by its communicator's watchdog.
    ///
    /// # Safety
    /// `raw` must be a live `CUstream` of device `ordinal`'s primary context
    /// (or NULL for the legacy default stream) for as long as operations are
    /// enqueued on streams bound to this value and until they complete.
    pub unsafe fn from_raw(raw: *mut std::ffi::c_void, ordinal: usize, timeout: Duration) -> CudaStream {
        let _ = timeout;
        static POOLS: Mutex<Vec<Option<Arc<FlagPool>>>> = Mutex::new(Vec::new());
        let pool = {
            let mut g = POOLS.lock().unwrap_or_else(|e| e.into_inner());
            if g.len() <= ordinal {
                g.resize(ordinal + 1, None);
            }
            g[ordinal].get_or_insert_with(FlagPool::new).clone()
        };
        CudaStream(FlagWaitStream::new(CudaStreamDriver {
            raw: raw as usize,
            ordinal,
            pool,
        }))
    }
}

#[cfg(feature = "cuda")]
impl DeviceStream for CudaStream {
    fn host_callback(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), Error> {
        self.0.host_callback(f)
    }

    fn wait_for(&self, done: OpDone) -> Result<(), Error> {
        self.0.wait_for(done)
    }
}
