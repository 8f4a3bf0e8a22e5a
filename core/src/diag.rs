//! The failure report every survivor agrees on.
//!
//! When an operation fails on a rank (a peer died or stopped, a plugin call
//! failed, ranks called different operations, the watchdog expired), that rank
//! closes its connections — so its neighbours fail within moments — and every
//! rank that notices the failure sends a [`Report`] of what it was doing to all
//! others over the bootstrap (`Bootstrap::exchange_among_survivors`, bounded, a
//! dead rank breaks nothing). Idle ranks and ranks blocked in a collective poll
//! for such reports and join. Each rank then computes [`diagnose`] over the same
//! set of reports and prints the same verdict: which rank is at fault, in which
//! operation, and who waited on it. NCCL has no such report (users see hangs or
//! one rank's view); this follows what NCCL users ask for (`ncclCommGetAsyncError`
//! on every rank naming the same culprit).

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Bootstrap tag of failure reports (one failure per communicator: the first
/// failure makes the communicator unusable).
pub(crate) const DIAG_TAG: u32 = 0x4449_4147;

/// How a rank's failure arose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Cause {
    /// The rank received an operation header that differs from its own call.
    Mismatch,
    /// A call on a connection with `blames` failed (closed, reset, plugin error).
    Peer,
    /// Nothing moved for the timeout; `waiting_on` says for whom.
    Stalled,
    /// Another rank's report arrived first.
    Notified,
    /// The rank had no work in flight.
    Idle,
    /// Anything else (a local plugin error, an internal error).
    Local,
}

/// One rank's account of the failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Report {
    /// The reporting rank.
    pub rank: usize,
    /// The operation it was running (`""` when idle).
    pub what: String,
    /// Its error, in words.
    pub error: String,
    /// How the failure arose.
    pub cause: Cause,
    /// The peer whose connection failed, if any.
    pub blames: Option<usize>,
    /// Peers its unfinished steps were waiting on.
    pub waiting_on: Vec<usize>,
}

impl Report {
    /// The report of `rank` that failed with `e` while running `what`, its
    /// unfinished steps waiting on `waiting_on`.
    pub(crate) fn of(rank: usize, what: &str, e: &Error, waiting_on: Vec<usize>) -> Report {
        let (cause, blames) = match e {
            Error::InvalidUsage(m) if m.starts_with("mismatched operations") => (Cause::Mismatch, None),
            Error::Net { peer: Some(p), .. } => (Cause::Peer, Some(*p)),
            Error::Timeout(_) => (Cause::Stalled, None),
            Error::Remote(m) if m.contains(NOTIFIED) => (Cause::Notified, None),
            _ => (Cause::Local, None),
        };
        Report {
            rank,
            what: what.to_string(),
            error: e.to_string(),
            cause,
            blames,
            waiting_on,
        }
    }

    /// The report of an idle rank.
    pub(crate) fn idle(rank: usize) -> Report {
        Report {
            rank,
            what: String::new(),
            error: String::new(),
            cause: Cause::Idle,
            blames: None,
            waiting_on: Vec::new(),
        }
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a Report always serializes")
    }

    /// Decodes rank `from`'s report (`None` when malformed or claiming another rank).
    pub(crate) fn from_bytes(from: usize, b: &[u8]) -> Option<Report> {
        serde_json::from_slice::<Report>(b).ok().filter(|r| r.rank == from)
    }
}

/// Marker in the error of a rank that learnt of the failure from another's report.
pub(crate) const NOTIFIED: &str = "reported a failure";

/// The verdict over every answered report (`reports`, any order) and the ranks
/// that did not answer (`missing`): the same text on every rank that has the same
/// reports.
pub(crate) fn diagnose(reports: &[Report], missing: &[usize]) -> String {
    let mut reports: Vec<&Report> = reports.iter().collect();
    reports.sort_by_key(|r| r.rank);
    let waited_on_by = |culprits: &[usize]| -> Vec<String> {
        reports
            .iter()
            .filter(|r| {
                r.blames.is_some_and(|b| culprits.contains(&b)) || r.waiting_on.iter().any(|w| culprits.contains(w))
            })
            .map(|r| {
                if r.what.is_empty() {
                    format!("rank {}", r.rank)
                } else {
                    format!("rank {} ({})", r.rank, r.what)
                }
            })
            .collect()
    };
    let list = |v: &[usize]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
    // 1. Ranks called different operations.
    if let Some(m) = reports.iter().find(|r| r.cause == Cause::Mismatch) {
        let line = strip_kind(&m.error);
        let at = line.find("mismatched operations").unwrap_or(0);
        return format!("diagnosis: {}", &line[at..]);
    }
    // 2. Ranks that never answered: dead, stopped, cut off by the network, or stuck outside the library.
    if !missing.is_empty() {
        let waiters = waited_on_by(missing);
        let mut s = format!(
            "diagnosis: rank{} {} stopped responding (dead, stopped, unreachable, or blocked outside this communicator)",
            if missing.len() > 1 { "s" } else { "" },
            list(missing)
        );
        if !waiters.is_empty() {
            s.push_str(&format!("; waiting on it: {}", waiters.join(", ")));
        }
        return s;
    }
    // 3. Follow who blames whom (a failed connection, then the peers a stalled rank
    //    waited on) to a rank that blames nobody: the first failure.
    let next = |r: usize| -> Option<usize> {
        let rep = reports.iter().find(|x| x.rank == r)?;
        match rep.cause {
            Cause::Peer => rep.blames,
            Cause::Stalled | Cause::Notified => rep.waiting_on.first().copied(),
            _ => None,
        }
    };
    let mut roots: Vec<usize> = Vec::new();
    for r in &reports {
        let mut at = r.rank;
        let mut seen = vec![at];
        while let Some(n) = next(at) {
            if seen.contains(&n) {
                break;
            }
            seen.push(n);
            at = n;
        }
        roots.push(at);
    }
    roots.sort_unstable();
    // The root most ranks lead to; ties go to the lowest rank.
    let mut best: Option<(usize, usize)> = None;
    for &r in &roots {
        let n = roots.iter().filter(|&&x| x == r).count();
        if best.is_none_or(|(_, bn)| n > bn) {
            best = Some((r, n));
        }
    }
    let Some((culprit, _)) = best else {
        return "diagnosis: no rank reported anything".into();
    };
    let rep = reports.iter().find(|r| r.rank == culprit).expect("root is a reporter");
    let waiters: Vec<String> = waited_on_by(&[culprit]);
    let mut s = match rep.cause {
        Cause::Idle => format!("diagnosis: rank {culprit} had no operation in flight"),
        Cause::Stalled => format!(
            "diagnosis: rank {culprit} stalled in {}: {}",
            rep.what,
            strip_kind(&rep.error)
        ),
        _ => format!(
            "diagnosis: rank {culprit} failed in {}: {}",
            rep.what,
            strip_kind(&rep.error)
        ),
    };
    if !waiters.is_empty() {
        s.push_str(&format!("; waiting on it: {}", waiters.join(", ")));
    }
    s
}

/// The first line of an error message (reports quote each other's errors).
fn strip_kind(e: &str) -> &str {
    e.lines().next().unwrap_or(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(rank: usize, cause: Cause, blames: Option<usize>, waiting_on: &[usize], error: &str) -> Report {
        Report {
            rank,
            what: "AllReduce of 262144 x float".into(),
            error: error.into(),
            cause,
            blames,
            waiting_on: waiting_on.to_vec(),
        }
    }

    #[test]
    fn every_survivor_names_the_stopped_rank() {
        // Rank 2 of 4 stopped: 3 waits on 2, 0 on 3, 1 on 0; 2 never answers.
        let reports = [
            rep(0, Cause::Stalled, None, &[3], "timeout"),
            rep(1, Cause::Stalled, None, &[0], "timeout"),
            rep(3, Cause::Stalled, None, &[2], "timeout"),
        ];
        let d = diagnose(&reports, &[2]);
        assert!(
            d.contains("rank 2 stopped responding") && d.contains("rank 3 (AllReduce"),
            "{d}"
        );
        // The order the reports arrived in does not matter.
        let mut rev = reports.clone();
        rev.reverse();
        assert_eq!(diagnose(&rev, &[2]), d);
    }

    #[test]
    fn a_mismatch_wins_over_its_consequences() {
        let reports = [
            rep(0, Cause::Peer, Some(1), &[], "connection closed"),
            rep(
                1,
                Cause::Mismatch,
                None,
                &[],
                "invalid usage: mismatched operations: rank 1 called A but rank 0 called B",
            ),
        ];
        let d = diagnose(&reports, &[]);
        assert_eq!(
            d,
            "diagnosis: mismatched operations: rank 1 called A but rank 0 called B"
        );
    }

    #[test]
    fn blame_chains_end_at_the_first_failure() {
        // Rank 1's plugin failed locally; 2 saw 1 close, 3 saw 2 close, 0 was notified.
        let reports = [
            rep(0, Cause::Notified, None, &[3], "rank 3 reported a failure"),
            rep(1, Cause::Local, None, &[], "net plugin: isend: system error: boom"),
            rep(2, Cause::Peer, Some(1), &[], "closed"),
            rep(3, Cause::Peer, Some(2), &[], "closed"),
        ];
        let d = diagnose(&reports, &[]);
        assert!(
            d.starts_with("diagnosis: rank 1 failed in AllReduce") && d.contains("boom"),
            "{d}"
        );
        assert!(d.contains("waiting on it: rank 2"), "{d}");
    }
}
