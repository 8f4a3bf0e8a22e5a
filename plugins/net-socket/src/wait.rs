//! When `test` may sleep in the kernel instead of returning at once: idle
//! tracking per calling thread, across every request and comm that thread tests.
//!
//! NCCL's proxy thread (`src/proxy.cc`, `progressOps`) walks all of its active
//! operations and, in `src/transport/net.cc` (`sendProxyProgress`,
//! `recvProxyProgress`), posts one `isend`/`irecv` or tests the oldest request of
//! each. With one connection in one direction that is the same request tested
//! again and again; with a ring's send and receive ops, several channels or
//! several peers, the tests of different requests and comms interleave. A plugin
//! that only ever uses non-blocking I/O in `test` then makes the proxy spin: on
//! a loopback pair sharing two cores with other work, spinning sender and
//! receiver took the CPU from each other and moved 4 MiB messages at 0.15–0.2×
//! one raw blocking TCP stream (`benchmarks/net_plugin_bw.c`, BENCHMARKS.md).
//!
//! The rule, per thread: a `test` that moved no bytes and completed nothing is
//! *idle*; it records the socket and direction its request waits on (a
//! [`Target`]). Any progress (bytes moved, a completion, a new `isend`/`irecv`)
//! clears the record. Once the thread has come back to a target it already
//! recorded (it has tried everything it waits on, once), `test` may sleep:
//! * at once, when the message in progress on that socket still has more than
//!   [`SPIN_MAX_BYTES`] to move (it cannot finish during a short spin);
//! * after [`TEST_SPIN`] of idleness otherwise (small messages: a busy-polling
//!   caller sees a reply without a kernel wake-up).
//!
//! It sleeps at most [`TEST_WAIT`], and wakes as soon as any recorded socket is
//! ready: with one target, in the blocking read or write itself (one system
//! call, as a blocking TCP program); with several, in `ppoll` over all of them.
//! A request waiting on helper threads (data streams) never sleeps here: its
//! `test` yields the CPU instead.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Longest sleep of one `test` call (see the module docs).
pub const TEST_WAIT: Duration = Duration::from_millis(1);

/// How long a thread testing small messages polls before `test` may sleep in
/// the kernel. Measured on loopback, 2 vCPUs (5 and 6 interleaved runs):
/// sleeping at once made the 8-byte ping-pong 1.38× raw blocking TCP and a
/// 2-rank 8-byte AllReduce 16–32 µs; polling first made them 0.78× and 15–19 µs.
pub const TEST_SPIN: Duration = Duration::from_micros(100);

/// A message with more than this many bytes still to move on its socket does
/// not spin: it sleeps as soon as the thread is idle (one loopback segment is
/// 64 KiB).
pub const SPIN_MAX_BYTES: usize = 64 * 1024;

/// Distinct targets remembered per idle streak; a thread waiting on more
/// sockets sleeps on the first ones (still bounded by [`TEST_WAIT`]).
pub const MAX_TARGETS: usize = 16;

/// A socket and the readiness a request waits for (`POLLIN` or `POLLOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The socket.
    pub fd: RawFd,
    /// `libc::POLLIN` or `libc::POLLOUT`.
    pub events: i16,
}

/// What a request waits on, as its comm sees it before doing any I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waits {
    /// Bytes on its control stream: `target`, with `left` bytes of the message in
    /// progress there still to move (0 when unknown, e.g. before a header).
    Socket {
        /// Socket and direction.
        target: Target,
        /// Bytes left of the message in progress on that socket.
        left: usize,
    },
    /// Helper threads (data streams), or nothing pollable.
    Other,
}

/// What one `test` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Bytes moved or a request completed.
    Progress,
    /// Nothing moved; the request waits on `Waits`.
    Idle(Waits),
}

/// How the next I/O of a `test` call may wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Non-blocking I/O only.
    Poll,
    /// The first read or write on the request's own socket may block up to
    /// [`TEST_WAIT`] (the thread waits on nothing else).
    BlockOwn,
    /// Sleep in `ppoll` on these targets (up to [`TEST_WAIT`]), then non-blocking I/O.
    PollSet(Vec<Target>),
}

/// One thread's idle streak, and what the previous one taught.
#[derive(Debug, Clone, Default)]
pub struct Idle {
    since: Option<Instant>,
    targets: Vec<Target>,
    other: bool,
    /// The previous streak lasted at least [`TEST_SPIN`]: waits are long here
    /// (a bulk stream), so spinning only burns CPU.
    long: bool,
    /// The previous streak waited on this one target alone (and progress on it
    /// ended the streak): the next wait on it may sleep without trying first.
    prev: Option<Target>,
}

impl Idle {
    /// The plan for a `test` of a request that `waits`, at `now`.
    pub fn plan(&self, waits: Waits, now: Instant) -> Plan {
        let Waits::Socket { target, left } = waits else {
            return Plan::Poll;
        };
        if self.other {
            return Plan::Poll;
        }
        let Some(since) = self.since else {
            // A streak starts with a try, unless the same single wait just ended in
            // progress after a long streak (a bulk stream that came back for more).
            return if self.long && self.prev == Some(target) {
                Plan::BlockOwn
            } else {
                Plan::Poll
            };
        };
        if !self.targets.contains(&target) {
            // Not yet back to this target: the caller has more to try first.
            return Plan::Poll;
        }
        if !self.long && left <= SPIN_MAX_BYTES && now.duration_since(since) < TEST_SPIN {
            return Plan::Poll;
        }
        if self.targets.len() == 1 {
            Plan::BlockOwn
        } else {
            Plan::PollSet(self.targets.clone())
        }
    }

    /// Records what a `test` call did at `now`.
    pub fn record(&mut self, outcome: Outcome, now: Instant) {
        match outcome {
            Outcome::Progress => {
                if let Some(since) = self.since {
                    let d = now.duration_since(since);
                    self.long = d >= TEST_SPIN;
                    self.prev = match (self.other, self.targets.as_slice()) {
                        (false, [t]) => Some(*t),
                        _ => None,
                    };
                }
                self.since = None;
                self.targets.clear();
                self.other = false;
            }
            Outcome::Idle(w) => {
                self.since.get_or_insert(now);
                match w {
                    Waits::Socket { target, .. } => {
                        if !self.targets.contains(&target) && self.targets.len() < MAX_TARGETS {
                            self.targets.push(target);
                        }
                    }
                    Waits::Other => self.other = true,
                }
            }
        }
    }

    /// Ends the streak because the caller posted a request: it has new work,
    /// so the next wait starts with a try (whether waits are long is kept).
    pub fn reset(&mut self) {
        self.since = None;
        self.targets.clear();
        self.other = false;
        self.prev = None;
    }

    /// Forgets everything (a comm closed: its socket number may be reused).
    pub fn forget(&mut self) {
        *self = Idle::default();
    }

    /// Whether the thread is in an idle streak.
    pub fn idle(&self) -> bool {
        self.since.is_some()
    }
}

thread_local! {
    static IDLE: RefCell<Idle> = RefCell::new(Idle::default());
}

/// The calling thread's plan for a request that `waits` (see [`Idle::plan`]).
pub fn plan(waits: Waits) -> Plan {
    IDLE.try_with(|i| i.borrow().plan(waits, Instant::now()))
        .unwrap_or(Plan::Poll)
}

/// Records the outcome of a `test` on the calling thread (see [`Idle::record`]).
pub fn record(outcome: Outcome) {
    let _ = IDLE.try_with(|i| i.borrow_mut().record(outcome, Instant::now()));
}

/// Whether the calling thread is in an idle streak.
pub fn idle() -> bool {
    IDLE.try_with(|i| i.borrow().idle()).unwrap_or(false)
}

/// Ends the calling thread's idle streak: it posted a request (see [`Idle::reset`]).
pub fn reset() {
    let _ = IDLE.try_with(|i| i.borrow_mut().reset());
}

/// Forgets the calling thread's idle record: a comm closed (see [`Idle::forget`]).
pub fn forget() {
    let _ = IDLE.try_with(|i| i.borrow_mut().forget());
}

/// Sleeps until one of `targets` is ready or [`TEST_WAIT`] has passed (signals
/// end it early too; the caller retries its I/O either way).
pub fn sleep_on(targets: &[Target]) {
    let mut fds: Vec<libc::pollfd> = targets
        .iter()
        .map(|t| libc::pollfd {
            fd: t.fd,
            events: t.events,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: TEST_WAIT.as_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid array of `fds.len()` pollfds; `ts` lives across the
    // call; a NULL signal mask keeps the thread's own.
    unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Target = Target {
        fd: 7,
        events: libc::POLLIN,
    };
    const B: Target = Target {
        fd: 8,
        events: libc::POLLOUT,
    };

    fn sock(target: Target, left: usize) -> Waits {
        Waits::Socket { target, left }
    }

    #[test]
    fn one_request_tested_again_sleeps_in_its_own_io() {
        let t0 = Instant::now();
        let mut i = Idle::default();
        // First test: nothing recorded yet, so no sleep.
        assert_eq!(i.plan(sock(A, 1 << 22), t0), Plan::Poll);
        i.record(Outcome::Idle(sock(A, 1 << 22)), t0);
        // Back to the same target with a large message in progress: sleep at once.
        assert_eq!(i.plan(sock(A, 1 << 22), t0), Plan::BlockOwn);
        // A small message spins for TEST_SPIN first.
        assert_eq!(i.plan(sock(A, 8), t0 + TEST_SPIN / 2), Plan::Poll);
        assert_eq!(i.plan(sock(A, 8), t0 + TEST_SPIN), Plan::BlockOwn);
        i.record(Outcome::Progress, t0);
        assert!(!i.idle());
        assert_eq!(i.plan(sock(A, 1 << 22), t0), Plan::Poll);
    }

    #[test]
    fn interleaved_requests_sleep_on_all_targets_once_each_was_tried() {
        let t0 = Instant::now();
        let mut i = Idle::default();
        i.record(Outcome::Idle(sock(A, 1 << 22)), t0);
        // B not tried yet in this streak: no sleep before trying it.
        assert_eq!(i.plan(sock(B, 1 << 22), t0), Plan::Poll);
        i.record(Outcome::Idle(sock(B, 1 << 22)), t0);
        assert_eq!(i.plan(sock(A, 1 << 22), t0), Plan::PollSet(vec![A, B]));
        assert_eq!(i.plan(sock(B, 1 << 22), t0), Plan::PollSet(vec![A, B]));
        // A request waiting on helper threads keeps the thread awake (it yields).
        i.record(Outcome::Idle(Waits::Other), t0);
        assert_eq!(i.plan(sock(A, 1 << 22), t0 + TEST_WAIT), Plan::Poll);
        i.reset();
        assert_eq!(i.plan(sock(A, 1 << 22), t0), Plan::Poll);
    }

    #[test]
    fn targets_are_bounded() {
        let t0 = Instant::now();
        let mut i = Idle::default();
        for fd in 0..(MAX_TARGETS as RawFd + 5) {
            i.record(
                Outcome::Idle(sock(
                    Target {
                        fd,
                        events: libc::POLLIN,
                    },
                    0,
                )),
                t0,
            );
        }
        let Plan::PollSet(v) = i.plan(
            sock(
                Target {
                    fd: 0,
                    events: libc::POLLIN,
                },
                0,
            ),
            t0 + TEST_SPIN,
        ) else {
            panic!("expected a poll over the recorded targets");
        };
        assert_eq!(v.len(), MAX_TARGETS);
    }
}
