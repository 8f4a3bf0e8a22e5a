//! The state a communicator's handle and its proxy thread share: the abort
//! flag, the first error (the communicator's asynchronous error, NCCL's
//! `ncclCommGetAsyncError`), and the bounded count of queued work items that
//! back-pressures enqueuing threads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::Error;

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
    pub(super) queued: AtomicUsize,
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

    /// The communicator's first error, if it failed. Inlined: asked twice per
    /// operation (enqueue and plan), it is one load while nothing failed; the
    /// lock is taken only after a failure ([`Shared::stored_error`]).
    #[inline]
    pub(crate) fn error(&self) -> Option<Error> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.stored_error()
    }

    /// The error recorded once `failed` is set ([`Shared::error`]).
    #[cold]
    #[inline(never)]
    fn stored_error(&self) -> Option<Error> {
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
    pub(super) fn acquire(&self) -> Result<(), Error> {
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
    /// Inlined: with nothing queued (every operation run on its enqueuing
    /// thread) it is one load ([`Shared::wait_drained`] otherwise).
    #[inline]
    pub(super) fn wait_empty(&self, window: Duration) -> bool {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return true;
        }
        self.wait_drained(window)
    }

    /// [`Shared::wait_empty`] once work is queued.
    #[cold]
    #[inline(never)]
    fn wait_drained(&self, window: Duration) -> bool {
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
    pub(super) fn release(&self) {
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

    pub(super) fn set_error(&self, e: &Error) {
        let mut g = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(e.clone());
            self.failed.store(true, Ordering::Release);
        }
    }
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
