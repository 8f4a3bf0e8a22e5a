//! A work item's life on whichever thread runs it: planned (the streams'
//! previous work awaited, descriptors and sequence numbers assigned, tasks
//! from the plan cache or the schedule), made ready (connections set up on
//! first use, user memory registered, receive steps announced, profiler
//! events opened), advanced (`progress`) to its end or for a window, and
//! ended (events stopped, registrations released, the plan kept for a
//! repeat). The proxy thread runs items to the end ([`Proxy::execute`]); an
//! enqueuing thread runs one for at most its spin window
//! ([`Proxy::run_inline`]) and hands the rest over.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::plan::{Plan, Running};
use super::register;
use super::state::Proxy;
use super::work::Work;
use crate::coll::desc::OpDesc;
use crate::coll::schedule::{self, Task};
use crate::coll::{CollArgs, CollKind, WorkWhat, exec};
use crate::error::Error;
use crate::transport::ConnKey;
use crate::transport::setup::{self, ConnPlan};

/// How a work item run on an enqueuing thread ([`Proxy::run_inline`]) left it.
pub(super) enum Inline {
    /// Finished (nothing to record: inline work has no completion record).
    Done,
    /// Started and not finished in the window: the proxy thread resumes it.
    Resume(Running),
    /// Failed: the proxy thread records the failure.
    Failed(Error),
}

impl Proxy {
    /// Runs `work` to the end on this thread (the proxy thread's way).
    pub(super) fn execute(&mut self, work: &Work) -> Result<(), Error> {
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
        let (plan, repeat) = match self.plan_cache.take_repeat(&work.colls, &work.plans) {
            Some(c) => (c, true),
            None => {
                let (tasks, scratch) = schedule::build(&work.colls, &descs, &work.plans, &self.params)?;
                (Box::new(Plan::new(tasks, scratch, &work.colls, &work.plans)), false)
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
    pub(super) fn ready(&mut self, run: &mut Running, work: &Work) -> Result<(), Error> {
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
        // (`register_user` registers nothing, and says so, when no operation
        // reaches `min` bytes: asked here first, a small operation skips the call.)
        if let Some(min) = self.user_send_min
            && work.colls.iter().any(|a| a.bytes.0.max(a.bytes.1) >= min)
        {
            self.user_registered |= register::register_user(&mut self.conns, self.params.rank, &work.colls, tasks, min);
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
            run.profiled = self
                .prof_bufs
                .begin(p, &mut self.conns, work, &run.descs, &mut run.plan);
        }
        run.ready = true;
        Ok(())
    }

    /// Progresses a started work item until it is done (`Ok(true)`) or, with
    /// `window`, that long has passed first (`Ok(false)`: resume it later;
    /// the window starts at the first wait or after a few moves, see
    /// [`Proxy::progress_tasks`]).
    pub(super) fn advance(
        &mut self,
        run: &mut Running,
        what: WorkWhat,
        window: Option<Duration>,
    ) -> Result<bool, Error> {
        let Running { plan, descs, mems, .. } = run;
        let passive = plan.passive;
        self.progress_tasks(&mut plan.tasks, descs, mems, passive, what, window)
    }

    /// Runs `f`, one work item's planning, setup and progress, turning a
    /// panic into [`Error::Internal`] naming `what` and the panic's message.
    ///
    /// A panic there is a bug (an executor, transport or kernel invariant);
    /// caught, it fails the work like any error, so that [`Proxy::finish`]
    /// closes the connections, tells the other ranks and keeps the error as
    /// the communicator's (no later work runs on this state). Uncaught, it
    /// would end the proxy thread, or unwind out of an enqueue, and leave
    /// every waiter of the communicator, and every peer, waiting.
    pub(super) fn guarded<T>(
        &mut self,
        what: WorkWhat,
        f: impl FnOnce(&mut Proxy) -> Result<T, Error>,
    ) -> Result<T, Error> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))).unwrap_or_else(|p| {
            Err(Error::Internal(format!(
                "rank {}: the proxy panicked running {what}: {}",
                self.params.rank,
                crate::error::panic_text(p.as_ref())
            )))
        })
    }

    /// Ends a work item (done or failed): stops its ProxyOp events and releases
    /// the user memory its connections registered.
    pub(super) fn end(&mut self, run: Running) {
        if run.profiled {
            self.prof_bufs.end(self.profiler.as_ref(), &mut self.conns);
        }
        // Registrations of a work item that did not finish may outlive it
        // (a connector releases only once idle): asked again at the next end.
        if self.user_registered {
            self.user_registered = !run.plan.finished();
            register::release_user(&mut self.conns);
        }
        let mut descs = run.descs;
        descs.clear();
        self.desc_buf = descs;
        self.plan_cache.keep(run.plan);
    }

    /// Runs `work` on the enqueuing thread while the proxy thread is idle, for
    /// at most `window` (see [`Proxy::advance`]): [`Inline::Done`] when it
    /// finished, else what the proxy thread must take over — the started
    /// work, or the error it failed with (the failure agreement then runs on
    /// the proxy thread, not in the caller's enqueue). `work` is taken by
    /// reference: the caller still owns it and moves it into the item it
    /// hands over only then (an operation that finishes here is never moved).
    /// Work run here has no completion record (`work.done` is `None`) and no
    /// queue slot, so finishing it successfully records nothing
    /// ([`Proxy::finish`] with `Ok` does nothing for it).
    /// A panic while it runs fails it ([`Proxy::guarded`]).
    pub(super) fn run_inline(&mut self, work: &Work, window: Duration) -> Inline {
        self.guarded(work.what, |p| Ok(p.run_inline_unguarded(work, window)))
            .unwrap_or_else(Inline::Failed)
    }

    fn run_inline_unguarded(&mut self, work: &Work, window: Duration) -> Inline {
        debug_assert!(work.done.is_none(), "inline work has no completion record");
        let mut run = match self.plan(work) {
            Ok(Some(run)) => run,
            Ok(None) => return Inline::Done,
            Err(e) => return Inline::Failed(e),
        };
        // Setting up a connection waits for the peer for as long as the
        // communicator's timeout: never on the caller's thread.
        if !self.connected(&run) {
            return Inline::Resume(run);
        }
        if let Err(e) = self.ready(&mut run, work) {
            self.end(run);
            return Inline::Failed(e);
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
                Inline::Done
            }
            Ok(false) => Inline::Resume(run),
            Err(e) => {
                self.end(run);
                Inline::Failed(e)
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
}
