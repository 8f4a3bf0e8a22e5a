//! A deferred communicator init or split (a [`Job`]): made by `comm`, run at
//! once, on a thread (non-blocking communicators) or at the end of the open
//! group (`group`), as NCCL 2.30.7 defers `ncclCommInitRank` and
//! `ncclCommSplit` inside a group (`src/group.cc`, `ncclAsyncLaunch`).

use std::sync::Arc;

use ferroccl::{Comm, CommConfig};

use crate::api::{Fail, R};
use crate::handles::Entry;

/// Work that produces a communicator (or none: a split without color).
pub(crate) type MakeComm = Box<dyn FnOnce(CommConfig) -> ferroccl::Result<Option<Comm>> + Send>;

/// A deferred init or split: what to run and where its result goes.
pub(crate) struct Job {
    pub entry: Option<Arc<Entry>>,
    pub config: CommConfig,
    pub make: MakeComm,
    pub op: &'static str,
}

impl Job {
    /// Runs the job on this thread and hands its outcome to the entry.
    pub fn run(self) -> R {
        let r = (self.make)(self.config).map_err(|e| Fail::runtime(self.op, &e));
        match (&self.entry, r) {
            (Some(e), Ok(c)) => {
                if let Some(c) = &c {
                    ferroccl::nccl_info!(
                        INIT,
                        "{} comm {:#x} rank {} nranks {} cudaDev {}{} - Init COMPLETE",
                        self.op,
                        e.token,
                        c.rank(),
                        c.nranks(),
                        e.cuda_dev,
                        e.settings
                            .comm_name
                            .as_deref()
                            .map(|n| format!(" commName {n}"))
                            .unwrap_or_default()
                    );
                }
                e.settle(Ok(c));
                Ok(())
            }
            (Some(e), Err(f)) => {
                e.settle(Err(f.clone()));
                Err(f)
            }
            (None, r) => r.map(|_| ()),
        }
    }
}
