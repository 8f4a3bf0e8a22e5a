//! The unit the proxy runs: a work item (one group's, or one collective's,
//! operations on this communicator with their tuning decisions, profiler
//! tags, completion record and stream dependencies), and the items the proxy
//! thread receives (fresh work, work an enqueuing thread started or saw fail,
//! or a wake-up for work it parked).

use std::sync::Arc;

use super::plan::Running;
use crate::coll::{CollArgs, PerOp, WorkWhat};
use crate::error::Error;
use crate::profiler::ApiTag;
use crate::stream::{Completion, Deps};
use crate::tune::Decision;

/// One unit of work: the operations of one group (or a single collective) on this
/// communicator, or an empty list (a marker used by `finalize`).
pub(crate) struct Work {
    pub colls: PerOp<CollArgs>,
    /// The tuning decision of each collective (`None` for send/receive).
    pub plans: PerOp<Option<Decision>>,
    /// Each operation's profiler tag (its API event and mask sample).
    pub tags: PerOp<ApiTag>,
    /// Its completion record, once registered (queued work); `None` while an
    /// enqueuing thread runs it before registering anything
    /// (`ProxyHandle::submit`).
    pub done: Option<Arc<Completion>>,
    /// Work that must finish first (the streams' previous operations).
    pub deps: Deps,
    /// Description for logs and errors.
    pub what: WorkWhat,
}

/// What the proxy thread receives.
pub(crate) enum Item {
    /// Work nobody has started.
    Fresh(Work),
    /// Work an enqueuing thread started and did not finish in its window.
    Resume(Work, Running),
    /// Work that failed while an enqueuing thread ran it: the proxy thread
    /// records the failure (closing connections, agreeing with the survivors).
    Failed(Work, Error),
    /// An enqueuing thread parked work of this many operations in
    /// `Proxy::parked` (see `ProxyHandle::hand_over`).
    Wake(usize),
}

impl Item {
    /// Operations of the item (for the ProxyCtrl append event).
    pub(super) fn ncolls(&self) -> usize {
        match self {
            Item::Fresh(w) | Item::Resume(w, _) | Item::Failed(w, _) => w.colls.len(),
            Item::Wake(n) => *n,
        }
    }

    /// The item's work (`None` for [`Item::Wake`]).
    pub(super) fn work(&self) -> Option<&Work> {
        match self {
            Item::Fresh(w) | Item::Resume(w, _) | Item::Failed(w, _) => Some(w),
            Item::Wake(_) => None,
        }
    }

    pub(super) fn work_mut(&mut self) -> Option<&mut Work> {
        match self {
            Item::Fresh(w) | Item::Resume(w, _) | Item::Failed(w, _) => Some(w),
            Item::Wake(_) => None,
        }
    }
}

impl Work {
    /// Completes the work's record, if it has one, with `r`.
    pub(super) fn complete(&self, r: Result<(), Error>) {
        if let Some(d) = &self.done {
            d.complete(r);
        }
    }
}
