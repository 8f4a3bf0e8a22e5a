//! When `test` may sleep in the kernel instead of returning at once: idle
//! tracking per calling thread, across every request and comm that thread tests.
//!
//! NCCL's proxy thread (`src/proxy.cc`, `progressOps`) walks all of its active
//! operations and, in `src/transport/net.cc` (`sendProxyProgress`,
//! `recvProxyProgress`), posts one `isend`/`irecv` or tests the oldest request of
//! each, then calls `sched_yield` when nothing moved. With one connection in one
//! direction that is the same request tested again and again; with a ring's
//! send and receive ops, several channels or several peers, the tests of
//! different requests and comms interleave. A `test` that only does
//! non-blocking I/O makes such a caller spin, and on a machine whose cores are
//! shared the spinning sender and receiver take the CPU from each other: on the
//! 2-core loopback benchmark, 256 KiB–4 MiB messages moved at 0.16–0.21× one
//! raw blocking TCP stream that way, and a `test` that slept only when one
//! request was tested alone left a host driving both directions at 0.2–0.6×
//! (`benchmarks/net_plugin_bw.c`, plugins/net-socket/BENCHMARKS.md §2).
//!
//! The rule, per thread:
//! * A `test` that moved no bytes and completed nothing is *idle*; it records
//!   the socket and direction its request waits on (a [`Target`]). Progress
//!   (bytes moved, a completion) ends the streak; so does a new `isend`/`irecv`,
//!   and a gap of more than [`CALLER_GAP`] since the thread's previous `test`
//!   (the caller did its own work in between: it is not just waiting on us).
//! * Once the thread comes back to a target it already recorded in the streak
//!   (it has tried everything it waits on), `test` may sleep. A thread moving
//!   data one way sleeps at once when waits here are long (the previous streak
//!   lasted [`TEST_SPIN`] or more) or the message in progress on that socket
//!   still has more than [`SPIN_MAX_BYTES`] to move; otherwise, and always on a
//!   thread that both sends and receives ([`two_way`]), after [`TEST_SPIN`] of
//!   the streak (a busy-polling caller sees a small reply without a kernel
//!   wake-up, and a two-way caller's next send is not held up).
//! * It sleeps at most [`TEST_WAIT`] and wakes as soon as any recorded socket is
//!   ready: with one target, in the blocking read or write itself (one system
//!   call, as a blocking TCP program); with several, in `ppoll` over all of them.
//! * On a one-way thread, after a long streak on one target ended by progress
//!   on that same target (a bulk stream between two wake-ups), the next wait on
//!   it sleeps without a non-blocking try first.
//! * A request waiting on helper threads (data streams) waits like one on a
//!   socket, on the comm's eventfd that a helper writes after each task it
//!   finishes (always in `ppoll`: there is no read of its own to block in).
//!   Without one (eventfd failed) its `test` yields the CPU instead. Spinning
//!   there made a caller take the CPU its own helper threads needed: on 2
//!   cores, one helper thread per side moved 4 MiB messages at 0.63–0.85× raw
//!   TCP with twice raw's CPU per GB (plugins/net-socket/BENCHMARKS.md §1.6).

use std::cell::{Cell, RefCell};
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

/// Longest time between two `test` calls of one thread for it to count as
/// waiting on the network (a caller looping over its requests and finding
/// nothing to do comes back within a few µs).
pub const CALLER_GAP: Duration = Duration::from_micros(20);

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
    /// Helper threads (data streams): `target` is the comm's eventfd (readable
    /// after a helper finished a task), `left` the request's data bytes not yet moved.
    Helpers {
        /// The eventfd, `POLLIN`.
        target: Target,
        /// Bytes of the request's data streams still to move.
        left: usize,
    },
    /// Helper threads without an eventfd, or nothing pollable.
    Other,
}

/// What one `test` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Bytes moved or a request completed; the request waited on `Waits`.
    Progress(Waits),
    /// Nothing moved; the request waits on `Waits`.
    Idle(Waits),
}

/// How the next I/O of a `test` call may wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Non-blocking I/O only.
    Poll,
    /// The first read or write on the request's own socket may block up to
    /// [`TEST_WAIT`] (the thread waits on nothing else, and that is a socket).
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
    /// When the thread's previous `test` returned.
    last: Option<Instant>,
    /// The thread both sends and receives ([`two_way`]): what it sends next may
    /// depend on what arrives, so it always spins [`TEST_SPIN`] before sleeping.
    two_way: bool,
    /// The previous streak waited on this one target alone and progress on
    /// that same target ended it, with no progress elsewhere since: the next
    /// wait on it may sleep without trying first.
    prev: Option<Target>,
}

impl Idle {
    /// Starts a `test` call at `now`: a caller that spent more than
    /// [`CALLER_GAP`] since its previous `test` was doing its own work (a
    /// reduction, another transport), not waiting on the network: its streak
    /// ends, so it is not put to sleep while that work may go on.
    /// `two_way`: the thread both sends and receives (see [`two_way`]).
    pub fn begin(&mut self, now: Instant, two_way: bool) {
        self.two_way = two_way;
        if self.last.is_some_and(|l| now.duration_since(l) > CALLER_GAP) {
            self.reset();
        }
    }

    /// The plan for a `test` of a request that `waits`, at `now`.
    pub fn plan(&self, waits: Waits, now: Instant) -> Plan {
        let (target, left, own) = match waits {
            Waits::Socket { target, left } => (target, left, true),
            Waits::Helpers { target, left } => (target, left, false),
            Waits::Other => return Plan::Poll,
        };
        // Where the plan would block in the request's own I/O: an eventfd has none.
        let block_own = || {
            if own {
                Plan::BlockOwn
            } else {
                Plan::PollSet(vec![target])
            }
        };
        if self.other {
            return Plan::Poll;
        }
        // One-way traffic with long waits (a bulk stream) sleeps without spinning.
        let quick = !self.two_way && (self.long || left > SPIN_MAX_BYTES);
        let Some(since) = self.since else {
            // A streak starts with a try, unless the same single wait just ended in
            // progress after a long streak (a bulk stream that came back for more).
            return if !self.two_way && self.long && self.prev == Some(target) {
                block_own()
            } else {
                Plan::Poll
            };
        };
        if !self.targets.contains(&target) {
            // Not yet back to this target: the caller has more to try first.
            return Plan::Poll;
        }
        if !quick && now.duration_since(since) < TEST_SPIN {
            return Plan::Poll;
        }
        if self.targets.len() == 1 {
            block_own()
        } else {
            Plan::PollSet(self.targets.clone())
        }
    }

    /// Records what a `test` call did, returning at `now`.
    pub fn record(&mut self, outcome: Outcome, now: Instant) {
        self.last = Some(now);
        match outcome {
            Outcome::Progress(w) => {
                let moved_on = match w {
                    Waits::Socket { target, .. } | Waits::Helpers { target, .. } => Some(target),
                    Waits::Other => None,
                };
                if let Some(since) = self.since {
                    self.long = now.duration_since(since) >= TEST_SPIN;
                    self.prev = match (self.other, self.targets.as_slice()) {
                        (false, [t]) if moved_on == Some(*t) => Some(*t),
                        _ => None,
                    };
                } else if self.prev != moved_on {
                    // Progress elsewhere: that work may go on, so no sleep without a try.
                    self.prev = None;
                }
                self.since = None;
                self.targets.clear();
                self.other = false;
            }
            Outcome::Idle(w) => {
                self.since.get_or_insert(now);
                match w {
                    Waits::Socket { target, .. } | Waits::Helpers { target, .. } => {
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

/// How long after its last send (receive) a thread still counts as sending
/// (receiving); see [`receive_only`], [`two_way`].
pub const SEND_MEMORY: Duration = Duration::from_millis(10);

thread_local! {
    static IDLE: RefCell<Idle> = RefCell::new(Idle::default());
    static LAST_SEND: Cell<Option<Instant>> = const { Cell::new(None) };
    static LAST_RECV: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Notes that the calling thread posted or tested a receive.
pub fn note_recv() {
    let _ = LAST_RECV.try_with(|c| c.set(Some(Instant::now())));
}

fn recent(c: &'static std::thread::LocalKey<Cell<Option<Instant>>>) -> bool {
    c.try_with(|c| c.get().is_some_and(|t| t.elapsed() <= SEND_MEMORY))
        .unwrap_or(false)
}

/// Whether the calling thread both sent and received in the last
/// [`SEND_MEMORY`] (NCCL's proxy with a ring's send and receive ops, ferroccl's
/// proxy): measured with ferroccl-perf (2-rank AllReduce, 4 MiB), such a thread
/// put to sleep without spinning first lost 15–35% busbw, since what it sends
/// next (after a reduction on the same thread) waits while it sleeps.
pub fn two_way() -> bool {
    recent(&LAST_SEND) && recent(&LAST_RECV)
}

/// Notes that the calling thread posted or tested a send.
pub fn note_send() {
    let _ = LAST_SEND.try_with(|c| c.set(Some(Instant::now())));
}

/// Whether the calling thread only receives: no send posted or tested in the
/// last [`SEND_MEMORY`]. A thread that also sends (NCCL's proxy driving a
/// ring's send and receive ops, ferroccl's proxy that also reduces) must not
/// wait for a large part of a message before it is woken: what it sends next
/// may depend on what it has received so far.
pub fn receive_only() -> bool {
    !recent(&LAST_SEND)
}

/// Starts a `test` on the calling thread and plans how it may wait on what its
/// request `waits` for (see [`Idle::begin`], [`Idle::plan`]).
pub fn plan(waits: Waits) -> Plan {
    IDLE.try_with(|i| {
        let now = Instant::now();
        let mut i = i.borrow_mut();
        i.begin(now, two_way());
        i.plan(waits, now)
    })
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
        i.record(Outcome::Progress(sock(A, 1 << 22)), t0 + TEST_SPIN);
        assert!(!i.idle());
        // That streak was long and its one target moved: the next wait on it
        // sleeps without a try first, even for a small message (waits are long here).
        assert_eq!(i.plan(sock(A, 8), t0 + TEST_SPIN), Plan::BlockOwn);
        // Progress on another socket: that work may go on, so try first again.
        i.record(Outcome::Progress(sock(B, 1 << 22)), t0 + TEST_SPIN);
        assert_eq!(i.plan(sock(A, 1 << 22), t0 + TEST_SPIN), Plan::Poll);
    }

    #[test]
    fn short_waits_spin_and_a_new_request_means_try_first() {
        let t0 = Instant::now();
        let mut i = Idle::default();
        i.record(Outcome::Idle(sock(A, 8)), t0);
        i.record(Outcome::Progress(sock(A, 8)), t0 + TEST_SPIN / 4);
        // A short streak: the next one spins before sleeping.
        assert_eq!(i.plan(sock(A, 8), t0), Plan::Poll);
        i.record(Outcome::Idle(sock(A, 8)), t0);
        assert_eq!(i.plan(sock(A, 8), t0 + TEST_SPIN / 2), Plan::Poll);
        assert_eq!(i.plan(sock(A, 8), t0 + TEST_SPIN), Plan::BlockOwn);
        // A long streak on A, then the caller posts a request: try first.
        i.record(Outcome::Progress(sock(A, 8)), t0 + TEST_SPIN);
        i.reset();
        assert_eq!(i.plan(sock(A, 8), t0 + TEST_SPIN), Plan::Poll);
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
    fn a_caller_busy_between_tests_is_not_put_to_sleep() {
        let t0 = Instant::now();
        let mut i = Idle::default();
        i.begin(t0, false);
        i.record(Outcome::Idle(sock(A, 1 << 22)), t0);
        i.begin(t0 + CALLER_GAP / 2, false);
        assert_eq!(i.plan(sock(A, 1 << 22), t0 + CALLER_GAP / 2), Plan::BlockOwn);
        i.record(Outcome::Idle(sock(A, 1 << 22)), t0 + CALLER_GAP / 2);
        // The caller spent longer than CALLER_GAP elsewhere: the streak starts over.
        let t1 = t0 + CALLER_GAP * 3;
        i.begin(t1, false);
        assert!(!i.idle());
        assert_eq!(i.plan(sock(A, 1 << 22), t1), Plan::Poll);
    }

    #[test]
    fn a_thread_that_sends_and_receives_spins_before_sleeping() {
        let t0 = Instant::now();
        let mut i = Idle::default();
        i.begin(t0, true);
        i.record(Outcome::Idle(sock(A, 1 << 22)), t0);
        i.record(Outcome::Idle(sock(B, 1 << 22)), t0);
        // Large messages, but the thread also sends: spin first.
        assert_eq!(i.plan(sock(A, 1 << 22), t0 + TEST_SPIN / 2), Plan::Poll);
        assert_eq!(i.plan(sock(A, 1 << 22), t0 + TEST_SPIN), Plan::PollSet(vec![A, B]));
        // A long streak on A alone does not let the next wait skip its try.
        let mut i = Idle::default();
        i.begin(t0, true);
        i.record(Outcome::Idle(sock(A, 1 << 22)), t0);
        i.record(Outcome::Progress(sock(A, 1 << 22)), t0 + TEST_SPIN);
        assert_eq!(i.plan(sock(A, 1 << 22), t0 + TEST_SPIN), Plan::Poll);
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
