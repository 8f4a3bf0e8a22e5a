//! The communicator registry: a `ncclComm_t` is a token, never a pointer the
//! library dereferences. Tokens are never reused, so a handle used after
//! `ncclCommDestroy`/`ncclCommAbort` (or one that this library never returned)
//! is found missing and reported as `ncclInvalidArgument`, as NCCL reports a
//! comm whose magic does not match ("corrupted comm object").
//!
//! An [`Entry`] holds the runtime's communicator once it exists, the state of a
//! background job (non-blocking init, split or finalize), the communicator's
//! host stream (the NULL stream's operations), its PreMulSum operators and its
//! registrations.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use ferroccl::{Comm, Stream};

use crate::abi::ncclComm_t;
use crate::api::{Fail, R};
use crate::config::Settings;

/// Where tokens start, and their spacing: tokens look like aligned addresses in
/// a range no allocator hands out for small objects, so a stray pointer is
/// unlikely to match one.
const TOKEN_BASE: usize = 0x5ecc_0000_0000;
const TOKEN_STRIDE: usize = 16;

/// Where a PreMulSum operator's scalar is (`ncclScalarResidence_t`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScalarSrc {
    /// `ncclScalarHostImmediate`: read at creation.
    Value(ferroccl::Scalar),
    /// `ncclScalarDevice`: read when each operation is enqueued (the address).
    Ptr(usize),
}

/// A user operator (`ncclRedOpCreatePreMulSum`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserOp {
    /// The datatype it was created for (the raw `ncclDataType_t`).
    pub dtype: i32,
    /// The scalar.
    pub scalar: ScalarSrc,
}

/// What a background job and the calls share about the communicator.
#[derive(Default)]
struct Slot {
    /// A background init, split or finalize still running or not yet joined.
    job: Option<JoinHandle<()>>,
    /// The failure of init or of a non-blocking call (reported by
    /// `ncclCommGetAsyncError`).
    error: Option<Fail>,
}

/// One communicator handle.
pub(crate) struct Entry {
    pub token: usize,
    /// The parsed `ncclConfig_t` (children of `ncclCommSplit` inherit it).
    pub settings: Settings,
    /// The CUDA device bound at init, -1 without CUDA.
    pub cuda_dev: i32,
    /// Raised by `ncclCommAbort` to stop an init still in its bootstrap.
    pub abort_flag: Arc<AtomicBool>,
    /// The NULL stream's operations on host memory.
    pub host_stream: Stream,
    /// The runtime's communicator once initialized (taken out by destroy and
    /// abort). The collectives reach it through a per-thread cache ([`with_ready`]).
    comm: RwLock<Option<Arc<Comm>>>,
    /// Cleared when the handle is unregistered (per-thread caches check it).
    live: AtomicBool,
    slot: Mutex<Slot>,
    /// PreMulSum operators: operator `ncclNumOps + i` is `ops[i]`.
    pub ops: Mutex<Vec<Option<UserOp>>>,
    /// Handles of `ncclCommRegister`.
    pub regs: Mutex<HashSet<usize>>,
}

impl Entry {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The handle as C sees it.
    pub fn handle(&self) -> ncclComm_t {
        self.token as ncclComm_t
    }

    /// The communicator, once initialized.
    pub fn ready_comm(&self) -> Option<Arc<Comm>> {
        self.comm.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The communicator for call `op`: `ncclInvalidUsage` while a non-blocking
    /// init or split is under way, the init's error if it failed.
    pub fn comm(&self, op: &str) -> R<Arc<Comm>> {
        self.ready_comm().ok_or_else(|| self.not_ready(op))
    }

    fn not_ready(&self, op: &str) -> Fail {
        let s = self.slot();
        if s.job.as_ref().is_some_and(|j| !j.is_finished()) {
            return Fail::usage(format!(
                "{op} : communicator {:#x} is still being initialized (wait until ncclCommGetAsyncError reports \
                 ncclSuccess)",
                self.token
            ));
        }
        match &s.error {
            Some(e) => Fail::new(
                e.code,
                format!("{op} : communicator {:#x} failed to initialize: {}", self.token, e.msg),
            ),
            None => Fail::usage(format!("{op} : communicator {:#x} is not initialized", self.token)),
        }
    }

    /// Whether a background job is still running.
    pub fn busy(&self) -> bool {
        self.slot().job.as_ref().is_some_and(|j| !j.is_finished())
    }

    /// Hands the result of init or split (or of a finalize, `Ok(None)`) to the
    /// entry.
    pub fn settle(&self, r: Result<Option<Comm>, Fail>) {
        match r {
            Ok(Some(c)) => *self.comm.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(c)),
            Ok(None) => {}
            Err(e) => {
                self.slot().error.get_or_insert(e);
            }
        }
    }

    /// Records the first failure of a non-blocking call.
    pub fn fail(&self, e: Fail) {
        self.slot().error.get_or_insert(e);
    }

    /// The recorded failure, if any.
    pub fn error(&self) -> Option<Fail> {
        self.slot().error.clone()
    }

    /// Runs `f` on a background thread as this entry's job (non-blocking calls).
    ///
    /// Errors: `ncclSystemError` when no thread can be started.
    pub fn spawn(self: &Arc<Self>, what: &str, f: impl FnOnce(&Entry) + Send + 'static) -> R {
        let me = self.clone();
        let h = std::thread::Builder::new()
            .name(format!("nccl-{what}"))
            .spawn(move || f(&me))
            .map_err(|e| Fail::system(format!("{what}: cannot start a thread: {e}")))?;
        let old = self.slot().job.replace(h);
        if let Some(old) = old {
            let _ = old.join();
        }
        Ok(())
    }

    /// Waits for the background job, if any.
    pub fn join(&self) {
        let job = self.slot().job.take();
        if let Some(j) = job {
            let _ = j.join();
        }
    }

    /// Takes the communicator out (destroy, abort).
    pub fn take_comm(&self) -> Option<Arc<Comm>> {
        self.comm.write().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Tokens handed out so far.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Live entries by token index (a destroyed handle's slot stays `None`).
static REGISTRY: RwLock<Vec<Option<Arc<Entry>>>> = RwLock::new(Vec::new());

/// A new entry (not yet holding a communicator), registered under a fresh token.
pub(crate) fn create(settings: Settings, cuda_dev: i32, abort_flag: Arc<AtomicBool>) -> Arc<Entry> {
    let index = NEXT.fetch_add(1, Ordering::Relaxed);
    let e = Arc::new(Entry {
        token: TOKEN_BASE + (index + 1) * TOKEN_STRIDE,
        settings,
        cuda_dev,
        abort_flag,
        host_stream: Stream::new(),
        comm: RwLock::new(None),
        live: AtomicBool::new(true),
        slot: Mutex::default(),
        ops: Mutex::default(),
        regs: Mutex::default(),
    });
    let mut g = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if g.len() <= index {
        g.resize(index + 1, None);
    }
    g[index] = Some(e.clone());
    e
}

fn index_of(comm: ncclComm_t) -> Option<usize> {
    let t = comm as usize;
    if t <= TOKEN_BASE || !(t - TOKEN_BASE).is_multiple_of(TOKEN_STRIDE) {
        return None;
    }
    Some((t - TOKEN_BASE) / TOKEN_STRIDE - 1)
}

/// The live entry of `comm`, if any.
pub(crate) fn lookup(comm: ncclComm_t) -> Option<Arc<Entry>> {
    let i = index_of(comm)?;
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(i)
        .cloned()
        .flatten()
}

/// The live entry of `comm` for call `op`: NCCL's wording for NULL, and a clear
/// `ncclInvalidArgument` for a handle that is not (or no longer) a communicator.
pub(crate) fn get(comm: ncclComm_t, op: &str) -> R<Arc<Entry>> {
    if comm.is_null() {
        return Err(Fail::arg(format!("{op} : comm argument is NULL")));
    }
    lookup(comm).ok_or_else(|| {
        Fail::arg(format!(
            "{op} : comm {:p} is not a live communicator (destroyed, aborted, or not made by this library)",
            comm
        ))
    })
}

/// Unregisters `comm`; later lookups fail.
pub(crate) fn remove(comm: ncclComm_t) -> Option<Arc<Entry>> {
    let i = index_of(comm)?;
    let e = REGISTRY
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(i)
        .and_then(Option::take)?;
    e.live.store(false, Ordering::Release);
    Some(e)
}

/// A communicator this thread called recently.
struct Cached {
    token: usize,
    entry: Arc<Entry>,
    comm: Arc<Comm>,
}

/// Communicators one thread keeps at hand.
const CACHED: usize = 8;

/// The communicator this thread called last, as raw pointers into [`CACHE`].
///
/// Invariant: when set, both pointers point into the `Arc`s of one element of
/// this thread's `CACHE` (so they are valid while that element is there), and
/// every change of `CACHE` clears it first. No call reaches `CACHE` from
/// inside the function `with_ready` runs, so the references it hands out stay
/// valid for that function.
#[derive(Clone, Copy)]
struct Hot {
    token: usize,
    entry: *const Entry,
    comm: *const Comm,
}

thread_local! {
    /// The communicators this thread called last (up to [`CACHED`]): what
    /// [`with_ready`] falls back on, with no lock and no reference count per
    /// call.
    static CACHE: RefCell<Vec<Cached>> = const { RefCell::new(Vec::new()) };
    /// The last of them (see [`Hot`]): the fast path, one thread-local read.
    static HOT: Cell<Option<Hot>> = const { Cell::new(None) };
}

/// Runs `f` on the live, initialized communicator `comm` (the errors of [`get`]
/// and [`Entry::comm`]): from this thread's cache when it holds `comm`, else
/// from the registry (then cached).
///
/// A communicator destroyed by another thread is seen at once (its entry is no
/// longer live); the references this thread's cache holds are dropped at its
/// next miss, so the runtime's resources of a communicator that a thread used
/// and another destroyed are released then, or when that thread exits (the
/// destroying thread's own references are dropped by [`forget`]).
#[inline(always)]
pub(crate) fn with_ready<T>(comm: ncclComm_t, op: &str, f: impl FnOnce(&Entry, &Comm) -> R<T>) -> R<T> {
    let token = comm as usize;
    if let Some(h) = HOT.with(Cell::get)
        && h.token == token
    {
        // SAFETY: `Hot`'s invariant: the pointers are into `Arc`s this
        // thread's cache holds, and nothing `f` does changes the cache.
        let (e, c) = unsafe { (&*h.entry, &*h.comm) };
        if e.live.load(Ordering::Acquire) {
            return f(e, c);
        }
    }
    with_ready_slow(comm, op, f)
}

#[inline(never)]
fn with_ready_slow<T>(comm: ncclComm_t, op: &str, f: impl FnOnce(&Entry, &Comm) -> R<T>) -> R<T> {
    let token = comm as usize;
    CACHE.with(|cache| {
        if let Ok(mut v) = cache.try_borrow_mut() {
            // Every change of the cache clears HOT first (its invariant).
            HOT.with(|h| h.set(None));
            v.retain(|x| x.entry.live.load(Ordering::Acquire));
            if !v.iter().any(|x| x.token == token) {
                let e = get(comm, op)?;
                let c = e.comm(op)?;
                if v.len() >= CACHED {
                    v.remove(0);
                }
                v.push(Cached {
                    token,
                    entry: e,
                    comm: c,
                });
            }
            let x = v.iter().find(|x| x.token == token).expect("just cached");
            let (e, c) = (Arc::clone(&x.entry), Arc::clone(&x.comm));
            HOT.with(|h| {
                h.set(Some(Hot {
                    token,
                    entry: Arc::as_ptr(&x.entry),
                    comm: Arc::as_ptr(&x.comm),
                }))
            });
            drop(v);
            return f(&e, &c);
        }
        // A nested call (the cache is borrowed): the registry, uncached.
        let e = get(comm, op)?;
        let c = e.comm(op)?;
        f(&e, &c)
    })
}

/// Drops this thread's cached references to `entry` (before destroy or abort
/// on this thread, so that the communicator can be freed at once).
pub(crate) fn forget(entry: &Entry) {
    CACHE.with(|c| {
        if let Ok(mut v) = c.try_borrow_mut() {
            HOT.with(|h| h.set(None));
            v.retain(|x| x.token != entry.token);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_never_reused_and_forged_handles_miss() {
        let a = create(Settings::default(), -1, Arc::default());
        let b = create(Settings::default(), -1, Arc::default());
        assert_ne!(a.token, b.token);
        assert!(lookup(a.handle()).is_some_and(|e| Arc::ptr_eq(&e, &a)));
        let msg = |r: R<()>| r.err().map(|f| f.msg.clone()).unwrap_or_default();
        assert!(msg(with_ready(a.handle(), "t", |_, _| Ok(()))).contains("is not initialized"));
        assert!(remove(a.handle()).is_some());
        assert!(lookup(a.handle()).is_none(), "a removed handle stays dead");
        assert!(msg(with_ready(a.handle(), "t", |_, _| Ok(()))).contains("not a live communicator"));
        assert!(remove(a.handle()).is_none());
        assert!(lookup(b.handle()).is_some());
        for forged in [
            1usize,
            TOKEN_BASE,
            b.token + 1,
            b.token + TOKEN_STRIDE * 1000,
            usize::MAX,
        ] {
            assert!(lookup(forged as ncclComm_t).is_none(), "{forged:#x}");
        }
        let Err(e) = get(std::ptr::null_mut(), "AllReduce") else {
            panic!("NULL found")
        };
        assert_eq!((e.code, e.msg.as_str()), (4, "AllReduce : comm argument is NULL"));
        remove(b.handle());
    }
}
