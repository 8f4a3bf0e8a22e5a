//! Progress: a work item's tasks advanced step by step (each stream's slice
//! ops run by the executor, `coll::exec`, filled send steps handed to the
//! plugin at once, the network side of every connector driven), with every
//! wait bounded: no progress for the communicator's timeout fails the item
//! naming what each task waits for and on which peers; another rank's
//! failure report or an abort ends it early. Busy-polls for the spin window,
//! then yields, then sleeps (NCCL's `progressOps` in `src/proxy.cc` and the
//! net transport's `sendProxyProgress`/`recvProxyProgress`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::state::Proxy;
use crate::coll::WorkWhat;
use crate::coll::desc::OpDesc;
use crate::coll::exec::{self, ExecCx};
use crate::coll::schedule::{self, Lane, Task, TaskConns};
use crate::diag::{DIAG_TAG, NOTIFIED};
use crate::error::Error;

/// While a work item keeps moving, [`Proxy::progress_tasks`] checks its
/// deadline after each move past this many (each move is at least one step,
/// so the check lags the deadline by a few steps at most, and a small
/// operation that runs straight through never reads the clock).
const MOVES_BEFORE_CLOCK_READS: u32 = 4;

impl Proxy {
    /// Fails with [`Error::Aborted`] once `ncclCommAbort` raised the flag.
    pub(super) fn check_abort(&self) -> Result<(), Error> {
        if self.shared.abort.load(Ordering::Relaxed) {
            return Err(Error::Aborted("operation abandoned by ncclCommAbort".into()));
        }
        Ok(())
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

    /// Advances `tasks` (the executor's steps and the connectors' network
    /// side) until all are done (`Ok(true)`) or, with `window`, that long has
    /// passed first (`Ok(false)`); errors: [`Error::Timeout`] after the
    /// communicator's timeout without progress, [`Error::Remote`] when another
    /// rank reported a failure, [`Error::Aborted`], and the connectors' errors.
    pub(super) fn progress_tasks(
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
        // Device steps enqueued this pass (`exec::Pending`), each with where
        // its op is: (task, segment, stream, position). Drained every pass, so
        // it allocates once, at the first device step.
        let mut pending: Vec<exec::Pending> = Vec::new();
        loop {
            let mut moved = false;
            let mut done = true;
            for (ti, t) in tasks.iter_mut().enumerate() {
                // Pending steps hold slots of their own lanes' connectors
                // only, and a lane's steps are all one task's: progressing
                // this task's connectors leaves them alone.
                debug_assert!(
                    pending.iter().all(|p| p.lane() != t.lane),
                    "pending steps on a lane about to be progressed"
                );
                if !(passive && moved_last) {
                    moved |= self.progress_net(t)?;
                }
                // Run the current segment's streams as far as they go; move to the
                // next segment once every stream of this one is done.
                while !t.finished() {
                    let mut seg_done = true;
                    for (si, st) in t.segs[t.seg].streams.iter_mut().enumerate() {
                        while st.pos < st.ops.len() {
                            let before = pending.len();
                            let mut cx = ExecCx {
                                conns: &mut self.conns,
                                descs,
                                rank,
                                mems,
                                user_regs: self.user_registered,
                                pending: Some((&mut pending, (ti, t.seg, si, st.pos))),
                            };
                            // SAFETY: user addresses are valid by the enqueue contract; FIFO slots are ours.
                            if unsafe { exec::try_run(&st.ops[st.pos], t.lane, &t.conns, &mut cx) }? {
                                st.pos += 1;
                                moved = true;
                                if pending.len() > before {
                                    // Enqueued on the GPU: its slots stay held
                                    // until the pass's end, and the lane's
                                    // next steps run past them as pending
                                    // device steps too, or wait
                                    // (`exec::Pending`). No `progress` on the
                                    // lane's connectors meanwhile: it would
                                    // reorder their free slots.
                                    continue;
                                }
                                // Hand filled slots to the plugin right away
                                // (a step that ran now had no pending step of
                                // its lane ahead of it: `exec::Held`).
                                debug_assert!(
                                    pending.iter().all(|p| p.lane() != t.lane),
                                    "a step ran past pending steps of its lane"
                                );
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
            if !pending.is_empty() {
                // One wait for every lane's enqueued steps, then their sends
                // and receives, in the order they were enqueued (a lane's in
                // step order, so each push and pop takes the slot its step
                // was given). A task's filled slots go to the plugin once all
                // its steps are pushed: `progress` frees slots, which would
                // reorder those the task's later pending steps hold.
                let waited = exec::Pending::wait_all(&pending);
                let mut r = waited;
                // Entries are in task order (tasks run in order within a
                // pass), so each task's are contiguous.
                debug_assert!(
                    pending.windows(2).all(|w| w[0].at().0 <= w[1].at().0),
                    "pending steps out of task order"
                );
                let mut entries = pending.drain(..).peekable();
                while let Some(p) = entries.next() {
                    let (ti, seg, si, pos) = p.at();
                    if r.is_ok() {
                        let t = &tasks[ti];
                        r = p.complete(&t.segs[seg].streams[si].ops[pos], &mut self.conns);
                        // Entries of a task are contiguous (made while it ran).
                        let last_of_task = entries.peek().is_none_or(|q| q.at().0 != ti);
                        if r.is_ok() && !passive && last_of_task {
                            r = self.progress_sends(&t.conns);
                        }
                    }
                    debug_assert_eq!(p.lane(), tasks[ti].lane);
                }
                r?;
                // Whether the lanes are idle is known only now: another pass.
                done = false;
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
            Lane::Channel(c) | Lane::ChannelUp(c) => format!(" on channel {c}"),
            _ => String::new(),
        };
        let waits: Vec<String> = t
            .next_ops()
            .map(|op| {
                if op.prim == schedule::Prim::CollNet {
                    format!("the CollNet network (iallgather/ireducescatter){on}")
                } else if op.recv_from.len() > 0 {
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
