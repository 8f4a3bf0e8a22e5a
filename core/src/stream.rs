//! An ordered host stream, the stand-in for a CUDA stream: collectives are
//! enqueued on it and return at once; [`Stream::synchronize`] waits for all of
//! them and reports the first error.
//!
//! Ordering: an operation enqueued on a stream starts only after every operation
//! enqueued on that stream before it has finished (on whatever communicator).
//! Operations of one communicator additionally run in enqueue order, as NCCL
//! requires every rank to issue them in the same order.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::coll::WorkWhat;
use crate::error::Error;

/// Completion flag of one enqueued piece of work.
#[derive(Debug, Default)]
pub(crate) struct Completion {
    state: Mutex<CompletionState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct CompletionState {
    outcome: Option<Result<(), Error>>,
    /// Threads blocked in [`Completion::wait`]: `complete` skips the wake-up
    /// system call when there are none (the common case of a proxy finishing
    /// work nobody is waiting on yet).
    waiters: usize,
}

impl Completion {
    pub(crate) fn new() -> Arc<Completion> {
        Arc::new(Completion::default())
    }

    /// Records the outcome (the first one wins) and wakes waiters.
    pub(crate) fn complete(&self, r: Result<(), Error>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.outcome.is_none() {
            s.outcome = Some(r);
        }
        if s.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// The outcome if finished.
    pub(crate) fn peek(&self) -> Option<Result<(), Error>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).outcome.clone()
    }

    /// Waits until finished or `deadline` passes (`None` = no deadline, but
    /// `keep_waiting` is asked every 100 ms and stops the wait when it says no).
    pub(crate) fn wait(&self, deadline: Option<Instant>, keep_waiting: &dyn Fn() -> bool) -> Option<Result<(), Error>> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = s.outcome.as_ref() {
                return Some(r.clone());
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
            s.waiters += 1;
            s = self.cv.wait_timeout(s, slice).unwrap_or_else(|e| e.into_inner()).0;
            s.waiters -= 1;
        }
    }
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

/// An ordered queue of asynchronous operations (like a `cudaStream_t`).
///
/// Cheap to clone: clones share the same queue. Every operation enqueued by a
/// communicator is bounded by that communicator's timeout watchdog, so
/// [`Stream::synchronize`] always returns; [`Stream::with_timeout`] adds a bound
/// of the stream's own.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    inner: Arc<Mutex<StreamInner>>,
    timeout: Option<Duration>,
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
        }
    }

    /// Registers new work; returns the work it must wait for (the stream's last).
    ///
    /// Finished work at the front of the queue is dropped here (its first error
    /// kept for `synchronize`), so a caller that enqueues without ever
    /// synchronizing holds memory for unfinished work only.
    pub(crate) fn push(&self, c: Arc<Completion>, what: WorkWhat) -> Option<Arc<Completion>> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(r) = g.pending.front().and_then(|(f, _)| f.peek()) {
            g.pending.pop_front();
            if let (Err(e), None) = (r, &g.first_error) {
                g.first_error = Some(e);
            }
        }
        let prev = g.pending.back().map(|(c, _)| c.clone());
        g.pending.push_back((c, what));
        prev
    }

    /// Whether all enqueued work has finished (`cudaStreamQuery`); errors of
    /// finished work are reported by [`Stream::synchronize`].
    pub fn query(&self) -> bool {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.pending.iter().all(|(c, _)| c.peek().is_some())
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
            let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.pending.back().cloned()
        };
        // On timeout the loop below names the oldest operation still pending.
        if let Some((c, _)) = last {
            let _ = c.wait(deadline, &|| true);
        }
        let mut first_err = self.inner.lock().unwrap_or_else(|e| e.into_inner()).first_error.take();
        loop {
            let next = {
                let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                g.pending.front().cloned()
            };
            let Some((c, what)) = next else { break };
            match c.wait(deadline, &|| true) {
                Some(r) => {
                    let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
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
    /// Whether two handles name the same stream.
    pub(crate) fn same(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
