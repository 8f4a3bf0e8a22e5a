//! The proxy thread's body: it waits for work items (blocking at once when
//! idle), runs each to the end in order (after any item an enqueuing thread
//! parked), watches for other ranks' failure reports while idle, and fails
//! whatever is still queued when the communicator closes (NCCL's
//! `ncclProxyProgress` loop, `src/proxy.cc`, fused with the host executor).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::state::Proxy;
use super::work::{Item, Work};
use crate::diag::DIAG_TAG;
use crate::error::Error;
use crate::profiler::{self, Event, EventHandle, StateArgs, state};

impl Proxy {
    /// Thread body: runs work until the queue closes or the comm is aborted.
    /// The proxy state is locked while an item runs (an enqueuing thread may run
    /// one itself while the thread is idle, see [`ProxyHandle::submit`](super::handover::ProxyHandle::submit)).
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
        // Work finished by the last item (see `Proxy::finished`).
        let mut finished = Vec::new();
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
                        lock().fail_idle(r);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            {
                let mut p = lock();
                p.handle(item);
                // The emptied vector goes back: no allocation per item.
                std::mem::swap(&mut p.finished, &mut finished);
            }
            // Completed with the state unlocked: a woken enqueuer's next work
            // can run on its own thread at once (`ProxyHandle::lock_idle`).
            for (done, r) in finished.drain(..) {
                done.complete(r);
                shared.release();
            }
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
    pub(super) fn abandon(&mut self, item: Item) -> Option<Work> {
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
            // A panic while either runs fails the work (`Proxy::guarded`).
            Item::Fresh(work) => {
                let r = self.guarded(work.what, |p| p.execute(&work));
                self.finish(work, r);
            }
            Item::Resume(work, mut run) => {
                let r = self.guarded(work.what, |p| {
                    let r = p
                        .ready(&mut run, &work)
                        .and_then(|()| p.advance(&mut run, work.what, None));
                    p.end(run);
                    r
                });
                self.finish(work, r.map(|_| ()));
            }
            Item::Failed(work, e) => self.finish(work, Err(e)),
        }
    }
}
