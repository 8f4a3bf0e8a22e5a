//! The failure agreement: when an operation fails, every surviving rank
//! sends the others a report of what it was doing and waiting on, collects
//! theirs (bounded), and all compute the same diagnosis (`crate::diag`), so
//! each rank's error names the same culprit. NCCL has no such step (its
//! ranks hang or time out separately); ferroccl never leaves a rank waiting.

use std::time::Duration;

use super::state::Proxy;
use super::work::Work;
use crate::diag::{self, DIAG_TAG, NOTIFIED, Report};
use crate::error::Error;

impl Proxy {
    /// Sends this rank's failure report to every other rank, collects theirs
    /// (bounded by the timeout, at most 10 s), and returns `e` with the verdict
    /// every survivor computes from the same reports (also logged at WARN).
    pub(super) fn agree_on_failure(&self, mine: Report, e: Error) -> Error {
        let rank = self.params.rank;
        if self.params.nranks < 2 {
            return e;
        }
        let wait = self.timeout.min(Duration::from_secs(10));
        let Ok(all) = self
            .bootstrap
            .exchange_among_survivors(DIAG_TAG, &mine.to_bytes(), wait)
        else {
            return e;
        };
        let reports: Vec<Report> = all
            .answered()
            .into_iter()
            .filter_map(|r| {
                if r == rank {
                    Some(mine.clone())
                } else {
                    Report::from_bytes(r, all.data(r)?)
                }
            })
            .collect();
        let verdict = diag::diagnose(&reports, &all.missing());
        tracing::warn!(
            target: "ferroccl::proxy",
            "rank {rank}: {verdict} (reports from ranks {:?})",
            all.answered()
        );
        e.with_note(&verdict)
    }

    /// Records the outcome of `work`: on an error closes every connection, agrees
    /// with the survivors on what failed (bounded, see `agree_on_failure`) and
    /// keeps it as the communicator's error; then completes the work and returns
    /// its queue slot.
    pub(super) fn finish(&mut self, work: Work, mut r: Result<(), Error>) {
        if let Err(e) = r {
            tracing::warn!(target: "ferroccl::proxy", "{} failed: {e}", work.what);
            self.conns.close_all();
            let e = if matches!(e, Error::Aborted(_)) || self.shared.error().is_some() {
                e
            } else {
                let report = Report::of(
                    self.params.rank,
                    &work.what.to_string(),
                    &e,
                    std::mem::take(&mut self.waiting_on),
                );
                self.agree_on_failure(report, e)
            };
            self.shared.set_error(&e);
            r = Err(e);
        }
        // Work that never left its enqueuing thread has no record and no slot;
        // the proxy thread's is completed once it has unlocked this state.
        if let Some(d) = work.done {
            self.finished.push((d, r));
        }
    }

    /// On an idle proxy thread, once rank `r` reported a failure while this
    /// rank had no work in flight: closes every connection, takes part in the
    /// agreement and keeps the verdict as the communicator's error.
    pub(super) fn fail_idle(&mut self, r: usize) {
        let e = Error::Remote(format!("rank {r} {NOTIFIED} while this rank had no work in flight"));
        self.conns.close_all();
        let e = self.agree_on_failure(Report::idle(self.params.rank), e);
        self.shared.set_error(&e);
    }
}
