//! The failure agreement: when an operation fails, every surviving rank
//! sends the others a report of what it was doing and waiting on, collects
//! theirs (bounded), and all compute the same diagnosis (`crate::diag`), so
//! each rank's error names the same culprit. NCCL has no such step (its
//! ranks hang or time out separately); ferroccl never leaves a rank waiting.

use std::time::Duration;

use super::state::Proxy;
use super::work::Work;
use crate::bootstrap::BootstrapError;
use crate::diag::{self, Cause, DIAG_TAG, NOTIFIED, Report};
use crate::error::Error;

impl Proxy {
    /// Sends this rank's failure report to every other rank, collects theirs
    /// (bounded by the timeout, at most 10 s), and returns `e` with the verdict
    /// every survivor computes from the same reports (also logged at WARN).
    pub(super) fn agree_on_failure(&mut self, mine: Report, e: Error) -> Error {
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
        let e = e.with_note(&verdict);
        self.verdict = Some(verdict);
        e
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

    /// A communicator operation that ran on the caller's thread, outside the
    /// proxy (`what`: the bootstrap barrier of `Comm::barrier` or of finalize),
    /// failed with `e`. Unless the communicator was aborted or closed, this is a
    /// failure of the communicator like a failed collective: closes every
    /// connection, takes part in the agreement (or, when this rank already did,
    /// reuses its verdict) and keeps the error. Returns `e` with the verdict.
    ///
    /// Without it, a rank whose barrier timed out while its peers were still
    /// in a collective (waiting on the same lost link) would return and exit
    /// before their reports came, and they would name it among the dead.
    pub(super) fn fail_outside(&mut self, what: &str, e: BootstrapError) -> Error {
        let rank = self.params.rank;
        let (cause, blames, waiting_on) = match &e {
            BootstrapError::Aborted { .. } | BootstrapError::Closed => return e.into(),
            BootstrapError::PeerTimeout { culprit, .. } => (Cause::Stalled, None, vec![*culprit]),
            BootstrapError::Timeout { .. } => (Cause::Stalled, None, Vec::new()),
            other => match other.culprit() {
                Some(c) => (Cause::Peer, Some(c), Vec::new()),
                None => (Cause::Local, None, Vec::new()),
            },
        };
        // A variant that carries the verdict: a timeout stays one (`ncclTimeout`),
        // a lost or failed peer is `ncclRemoteError`, anything else keeps its kind.
        let err = match cause {
            Cause::Stalled => Error::Timeout(e.to_string()),
            Cause::Peer => Error::Remote(e.to_string()),
            _ => Error::from(e),
        };
        if self.shared.error().is_some() {
            return match &self.verdict {
                Some(v) => err.with_note(v),
                None => err,
            };
        }
        tracing::warn!(target: "ferroccl::proxy", "{what} failed: {err}");
        self.conns.close_all();
        let report = Report {
            rank,
            what: what.to_string(),
            error: err.to_string(),
            cause,
            blames,
            waiting_on,
        };
        let err = self.agree_on_failure(report, err);
        self.shared.set_error(&err);
        err
    }
}
