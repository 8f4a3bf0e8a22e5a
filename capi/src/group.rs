//! `ncclGroupStart` / `ncclGroupEnd` (NCCL 2.30.7 `src/group.cc`).
//!
//! Collectives and one-sided calls (`ncclPutSignal`, `ncclSignal`,
//! `ncclWaitSignal`) inside a group are collected by the runtime's group
//! (`ferroccl::group_start` / `group_end`, which this group mirrors depth for
//! depth) and launched together at the outermost end. Inits and splits inside a
//! group are deferred to that end too, and run concurrently, so one thread can
//! create every rank of a communicator. At the end, host operations on the NULL
//! stream of blocking communicators are waited for (the host extension: the
//! group's results are ready when `ncclGroupEnd` returns); a group that touched
//! a non-blocking communicator returns `ncclInProgress`.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::abi::ncclResult_t;
use crate::api::{Fail, R, guard};
use crate::handles::Entry;
use crate::job::Job;

#[derive(Default)]
struct CGroup {
    depth: usize,
    /// Communicators whose NULL-stream (host) operations the group issued.
    host: Vec<Arc<Entry>>,
    /// Deferred inits and splits.
    jobs: Vec<Job>,
    /// The first error of a call inside the group (NCCL's `ncclGroupError`).
    error: Option<Fail>,
}

thread_local! {
    static GROUP: RefCell<CGroup> = RefCell::default();
    /// Whether a group is open (mirrors `GROUP.depth > 0`; every call asks,
    /// and a constant-initialized cell is the cheapest thing to ask).
    static OPEN: Cell<bool> = const { Cell::new(false) };
}

/// Whether a group is open on this thread.
pub(crate) fn in_group() -> bool {
    OPEN.with(Cell::get)
}

/// Defers an init or split to the end of the open group.
pub(crate) fn defer(job: Job) {
    GROUP.with(|g| g.borrow_mut().jobs.push(job));
}

/// Notes a host operation of `e` issued in the open group.
pub(crate) fn note_host(e: &Entry) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if !g.host.iter().any(|x| x.token == e.token)
            && let Some(e) = crate::handles::lookup(e.handle())
        {
            g.host.push(e);
        }
    });
}

/// Notes the failure of a call inside the open group (returned again by its end).
pub(crate) fn note_error(f: &Fail) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() {
            g.error = Some(f.clone());
        }
    });
}

/// `ncclGroupStart`.
pub(crate) fn start() -> ncclResult_t {
    guard("ncclGroupStart", || {
        GROUP.with(|g| g.borrow_mut().depth += 1);
        OPEN.with(|o| o.set(true));
        ferroccl::group_start();
        Ok(())
    })
}

/// Runs jobs concurrently (one thread each; a lone job on this thread) and
/// returns each one's outcome.
pub(crate) fn run_jobs(jobs: Vec<Job>) -> Vec<R> {
    if jobs.len() == 1 {
        return jobs.into_iter().map(Job::run).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|j| {
                std::thread::Builder::new()
                    .name("nccl-group-init".into())
                    .spawn_scoped(s, move || j.run())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(Fail::usage("ncclGroupEnd: an init of the group panicked"))),
                Err(e) => Err(Fail::system(format!("ncclGroupEnd: cannot start a thread: {e}"))),
            })
            .collect()
    })
}

/// `ncclGroupEnd`.
pub(crate) fn end() -> ncclResult_t {
    guard("ncclGroupEnd", || {
        let outer = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return Err(Fail::usage("ncclGroupEnd: not in a group call."));
            }
            g.depth -= 1;
            OPEN.with(|o| o.set(g.depth > 0));
            Ok((g.depth == 0).then(|| std::mem::take(&mut *g)))
        })?;
        let launched = ferroccl::group_end().map_err(|e| Fail::runtime("ncclGroupEnd", &e));
        let Some(g) = outer else {
            return launched;
        };
        let mut first: Option<Fail> = g.error;
        let mut in_progress = false;
        // Deferred inits and splits: all at once; non-blocking ones on their
        // communicator's thread.
        let (background, now): (Vec<Job>, Vec<Job>) = g
            .jobs
            .into_iter()
            .partition(|j| j.entry.as_ref().is_some_and(|e| !e.settings.blocking));
        for job in background {
            let e = job.entry.clone().expect("partitioned on the entry");
            e.spawn(job.op, move |_| {
                if let Err(f) = job.run() {
                    crate::api::report(&f.msg);
                }
            })?;
            in_progress = true;
        }
        for r in run_jobs(now) {
            if let Err(f) = r {
                first.get_or_insert(f);
            }
        }
        if let Err(f) = launched {
            first.get_or_insert(f);
        }
        for e in &g.host {
            if e.settings.blocking {
                if let Err(err) = e.host_stream.synchronize() {
                    first.get_or_insert(Fail::runtime("ncclGroupEnd", &err));
                }
            } else {
                in_progress = true;
            }
        }
        match first {
            Some(f) => Err(f),
            None if in_progress => Err(Fail::in_progress()),
            None => Ok(()),
        }
    })
}
