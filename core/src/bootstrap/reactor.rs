//! One event loop per bootstrap listener (mio: epoll on Linux): accepts connections,
//! decodes each with the sans-IO [`Inbound`] and hands complete frames to a
//! [`Service`]. A listener costs one thread however many connections it holds
//! (NCCL 2.30 uses one blocking accept loop per listener, `bootstrapRoot` /
//! `socketProgress`; the per-connection work here is the same handshake and framing).
//!
//! Hostile or broken clients cannot exhaust it:
//! * at most [`MAX_PENDING_CONNECTIONS`] connections may be pending (accepted but
//!   not through their handshake and opening frame); beyond that the oldest is
//!   dropped with a log line;
//! * a pending connection that does not finish within the pending timeout is dropped;
//! * `accept` failing for lack of resources (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`)
//!   frees a descriptor by dropping the oldest pending connection if that one has
//!   stalled (pending for [`STALLED_AFTER`] or more), else backs off (10 ms doubling
//!   to 1 s) and retries: it never stops accepting. The failures are counted in
//!   [`Stats`] so that a later timeout can say the process ran out of file
//!   descriptors. A connection accepted moments ago is never dropped this way: Linux
//!   `accept` fails with `EMFILE` whenever no descriptor is free, even with nobody
//!   waiting (the kernel reserves the new descriptor before it looks at the queue,
//!   `net/socket.c`), so the listener that takes the process' last descriptor sees `EMFILE`
//!   on its very next `accept`, while the client it just accepted (a rank whose
//!   opening is still in flight) is as legitimate as any.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener as MioListener, TcpStream as MioStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::error::{BootstrapError, Result};
use super::frame::{Inbound, InboundError};
use super::wire::{self, POLL_SLICE};

/// Most connections a bootstrap listener keeps *pending* (accepted, handshake or
/// opening message not yet complete). A well-behaved rank completes its opening in
/// one round trip, so only stalled or hostile clients stay pending; when a new
/// connection arrives beyond this, the oldest pending one is dropped (logged).
pub const MAX_PENDING_CONNECTIONS: usize = 256;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;
const READ_CHUNK: usize = 64 * 1024;
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A pending connection this old has stalled (a well-behaved client sends its
/// handshake and opening right after connecting): when `accept` fails for lack of
/// descriptors, the oldest pending connection is dropped only if it is at least this
/// old. Generous, so that a rank descheduled between `connect` and `write` on a
/// loaded machine is not mistaken for a stalled client.
pub(crate) const STALLED_AFTER: Duration = Duration::from_secs(5);
/// Repeated warnings of one kind are printed at most this often (with a count).
const LOG_EVERY: Duration = Duration::from_secs(5);

/// What the service decides about a connection whose opening frame arrived.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Keep reading: later frames are delivered as [`Service::on_frame`] for this peer.
    Keep(usize),
    /// Done with it (the opening was all it had to say).
    Close,
    /// Refuse it: logged as a rejection with this reason, counted in [`Stats`].
    Reject(String),
}

/// The logic behind a listener. Runs on the reactor thread: keep each call short.
pub(crate) trait Service: Send + 'static {
    /// A connection completed the handshake and sent its opening frame.
    fn on_opening(&mut self, from: SocketAddr, opening: Vec<u8>) -> Verdict;
    /// A later frame from a kept connection; `Err(why)` closes the connection (and
    /// [`Service::on_close`] is called with `why`).
    fn on_frame(&mut self, _peer: usize, _from: SocketAddr, _frame: Vec<u8>) -> std::result::Result<(), String> {
        Ok(())
    }
    /// A kept connection ended (EOF, error, or a malformed frame); `why` says which.
    fn on_close(&mut self, _peer: usize, _from: SocketAddr, _why: String) {}
    /// Called at least every [`POLL_SLICE`]; returning `false` stops the reactor.
    fn on_tick(&mut self) -> bool {
        true
    }
}

/// Counters a listener keeps for error messages (shared with its owner).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    fd_errors: AtomicU64,
    other_errors: AtomicU64,
    dropped_pending: AtomicU64,
    rejected: AtomicU64,
    last_fd_error: Mutex<Option<String>>,
}

impl Stats {
    /// A sentence on resource trouble this listener met, for appending to a
    /// timeout message; `None` when there was none.
    pub fn trouble(&self) -> Option<String> {
        let fd = self.fd_errors.load(Ordering::Relaxed);
        let dropped = self.dropped_pending.load(Ordering::Relaxed);
        let mut parts = Vec::new();
        if fd > 0 {
            let last = self
                .last_fd_error
                .lock()
                .ok()
                .and_then(|g| g.clone())
                .unwrap_or_default();
            parts.push(format!(
                "ran out of file descriptors: accept() failed {fd} time{} ({last}); the limit is {} (raise it with \
                 `ulimit -n`)",
                if fd == 1 { "" } else { "s" },
                nofile_limit()
            ));
        }
        if dropped > 0 {
            parts.push(format!(
                "dropped {dropped} unauthenticated connection{} (more than {MAX_PENDING_CONNECTIONS} pending, or \
                 stalled for {} while file descriptors ran out)",
                if dropped == 1 { "" } else { "s" },
                super::error::fmt_duration(STALLED_AFTER)
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// This process' soft `RLIMIT_NOFILE`, as text.
fn nofile_limit() -> String {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        if r.rlim_cur == libc::RLIM_INFINITY {
            "unlimited".into()
        } else {
            r.rlim_cur.to_string()
        }
    } else {
        "unknown".into()
    }
}

/// Fixed parameters of a reactor.
pub(crate) struct Params {
    /// For log lines, e.g. "bootstrap root 127.0.0.1:41234".
    pub name: String,
    /// Handshake magic every connection must present.
    pub magic: u64,
    /// Limit on the opening frame.
    pub opening_max: usize,
    /// Limit on later frames.
    pub frame_max: usize,
    /// A pending connection is dropped after this long.
    pub pending_timeout: Duration,
    /// Stops the reactor (besides [`Service::on_tick`]).
    pub abort: Arc<AtomicBool>,
}

/// Handle of a running reactor. Dropping it does not stop the reactor; [`Reactor::stop`] does.
pub(crate) struct Reactor {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor").finish_non_exhaustive()
    }
}

impl Reactor {
    /// Starts serving `listener` on a new thread named `thread_name`.
    pub fn spawn<S: Service>(
        listener: std::net::TcpListener,
        thread_name: &str,
        params: Params,
        stats: Arc<Stats>,
        service: S,
    ) -> Result<Reactor> {
        let name = params.name.clone();
        let (mut lp, waker) = Loop::new(listener, params, stats, service)?;
        let stop = lp.stop.clone();
        std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || lp.run())
            .map_err(|e| BootstrapError::io(format!("{name}: spawning the listener thread"), e))?;
        Ok(Reactor { stop, waker })
    }

    /// Asks the reactor to close every connection and end; returns at once.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }
}

/// Rate limit for repeated warnings.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// `Some(n)` when a line may be printed now, `n` = lines suppressed since the last one.
    fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

struct Conn {
    stream: MioStream,
    from: SocketAddr,
    inbound: Inbound,
    peer: Option<usize>,
}

struct Loop<S: Service> {
    poll: Poll,
    listener: MioListener,
    conns: HashMap<usize, Conn>,
    /// Pending connections in accept order (entries for connections no longer
    /// pending are skipped lazily).
    pending: VecDeque<(usize, Instant)>,
    npending: usize,
    next_token: usize,
    params: Params,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    service: S,
    paused_until: Option<Instant>,
    backoff: Duration,
    fd_log: Throttle,
    drop_log: Throttle,
}

impl<S: Service> Loop<S> {
    /// The event loop for `listener` (not yet running) and its waker.
    fn new(
        listener: std::net::TcpListener,
        params: Params,
        stats: Arc<Stats>,
        service: S,
    ) -> Result<(Self, Arc<Waker>)> {
        let name = params.name.clone();
        let err = |what: &str, e: std::io::Error| BootstrapError::io(format!("{name}: {what}"), e);
        listener.set_nonblocking(true).map_err(|e| err("set_nonblocking", e))?;
        let mut listener = MioListener::from_std(listener);
        let poll = Poll::new().map_err(|e| err("creating the event loop", e))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| err("registering the listener", e))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| err("creating the waker", e))?);
        let lp = Loop {
            poll,
            listener,
            conns: HashMap::new(),
            pending: VecDeque::new(),
            npending: 0,
            next_token: FIRST_CONN,
            params,
            stop: Arc::new(AtomicBool::new(false)),
            stats,
            service,
            paused_until: None,
            backoff: BACKOFF_MIN,
            fd_log: Throttle::default(),
            drop_log: Throttle::default(),
        };
        Ok((lp, waker))
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        let mut scratch = vec![0u8; READ_CHUNK];
        loop {
            if self.stop.load(Ordering::Relaxed) || self.params.abort.load(Ordering::Relaxed) {
                break;
            }
            let mut wait = POLL_SLICE;
            if let Some(t) = self.paused_until {
                wait = wait.min(t.saturating_duration_since(Instant::now()));
            }
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != ErrorKind::Interrupted {
                    tracing::warn!(target: "ferroccl::bootstrap", "{}: event loop poll failed: {e}", self.params.name);
                    std::thread::sleep(POLL_SLICE);
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => {
                        if self.paused_until.is_none() {
                            self.accept_all(&mut scratch);
                        }
                    }
                    WAKER => {}
                    Token(t) => self.readable(t, &mut scratch),
                }
            }
            if let Some(t) = self.paused_until
                && Instant::now() >= t
            {
                self.paused_until = None;
                self.accept_all(&mut scratch);
            }
            self.expire_pending();
            if !self.service.on_tick() {
                break;
            }
        }
        for (_, mut c) in self.conns.drain() {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if let Some(p) = c.peer {
                self.service
                    .on_close(p, c.from, "this rank closed its bootstrap listener".into());
            }
        }
    }

    fn accept_all(&mut self, scratch: &mut [u8]) {
        let mut other_errors = 0u32;
        loop {
            match self.listener.accept() {
                Ok((mut stream, from)) => {
                    self.backoff = BACKOFF_MIN;
                    if self.npending >= MAX_PENDING_CONNECTIONS {
                        self.drop_oldest_pending(&format!(
                            "more than {MAX_PENDING_CONNECTIONS} unauthenticated connections are pending"
                        ));
                    }
                    let tok = self.next_token;
                    self.next_token += 1;
                    if let Err(e) = self
                        .poll
                        .registry()
                        .register(&mut stream, Token(tok), Interest::READABLE)
                    {
                        tracing::warn!(target: "ferroccl::bootstrap", "{}: cannot watch the connection from {from}: {e}", self.params.name);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let inbound = Inbound::new(self.params.magic, self.params.opening_max, self.params.frame_max);
                    self.conns.insert(
                        tok,
                        Conn {
                            stream,
                            from,
                            inbound,
                            peer: None,
                        },
                    );
                    self.pending.push_back((tok, Instant::now()));
                    self.npending += 1;
                    // A well-behaved client has usually sent everything already.
                    self.readable(tok, scratch);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if wire::resource_error(&e) => {
                    if self.out_of_resources(&e) {
                        continue;
                    }
                    return;
                }
                Err(e) => {
                    // ECONNABORTED, EPROTO, EPERM (firewall) …: that connection is gone,
                    // the listener is fine. Back off if it keeps happening.
                    self.stats.other_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(target: "ferroccl::bootstrap", "{}: accept failed: {e}", self.params.name);
                    other_errors += 1;
                    if other_errors >= 64 {
                        self.paused_until = Some(Instant::now() + self.backoff);
                        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                        return;
                    }
                }
            }
        }
    }

    fn drop_oldest_pending(&mut self, reason: &str) {
        while let Some((tok, _)) = self.pending.pop_front() {
            if self.conns.get(&tok).is_some_and(|c| c.peer.is_none()) {
                let from = self.conns[&tok].from;
                self.stats.dropped_pending.fetch_add(1, Ordering::Relaxed);
                if let Some(n) = self.drop_log.allow() {
                    tracing::warn!(
                        target: "ferroccl::bootstrap",
                        "{}: dropped the oldest unauthenticated connection (from {from}): {reason}{}",
                        self.params.name,
                        if n > 0 { format!(" ({n} similar drops not shown)") } else { String::new() }
                    );
                }
                self.remove(tok);
                return;
            }
        }
    }

    /// `accept` failed with `e`, a lack of descriptors (or buffers, memory): counts
    /// and logs it, then frees a descriptor held by a stalled pending connection and
    /// returns `true` (accept again now), or pauses accepting for the backoff and
    /// returns `false`. A pending connection within its grace is kept: it may be a
    /// rank whose opening is in flight, and `EMFILE` here may only mean that the
    /// previous `accept` took the process' last descriptor.
    fn out_of_resources(&mut self, e: &std::io::Error) -> bool {
        self.stats.fd_errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.stats.last_fd_error.lock() {
            *g = Some(e.to_string());
        }
        if let Some(n) = self.fd_log.allow() {
            tracing::warn!(
                target: "ferroccl::bootstrap",
                "{}: accept failed: {e} (file descriptor limit {}); {}retrying with backoff",
                self.params.name,
                nofile_limit(),
                if n > 0 { format!("{n} similar failures not shown; ") } else { String::new() }
            );
        }
        if self.drop_stalled_pending() {
            return true;
        }
        self.paused_until = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        false
    }

    /// Drops the oldest pending connection if it has been pending for
    /// [`STALLED_AFTER`] or more; returns whether one was dropped.
    fn drop_stalled_pending(&mut self) -> bool {
        let now = Instant::now();
        while let Some(&(tok, since)) = self.pending.front() {
            if self.conns.get(&tok).is_none_or(|c| c.peer.is_some()) {
                // No longer pending (authenticated or gone).
                self.pending.pop_front();
                continue;
            }
            if now.duration_since(since) < STALLED_AFTER {
                return false;
            }
            self.drop_oldest_pending(&format!(
                "freeing a file descriptor (accept failed for lack of them; it stalled for {} before its handshake \
                 and opening message)",
                super::error::fmt_duration(now.duration_since(since))
            ));
            return true;
        }
        false
    }

    fn expire_pending(&mut self) {
        let now = Instant::now();
        while let Some(&(tok, since)) = self.pending.front() {
            let still = self.conns.get(&tok).is_some_and(|c| c.peer.is_none());
            if !still {
                self.pending.pop_front();
                continue;
            }
            if now.duration_since(since) < self.params.pending_timeout {
                break;
            }
            self.pending.pop_front();
            let partial = self.conns[&tok].inbound.partial().unwrap_or_default();
            let why = format!(
                "did not complete its handshake and opening message within {} ({partial})",
                super::error::fmt_duration(self.params.pending_timeout)
            );
            self.reject(tok, &why);
        }
    }

    /// Removes a connection (closing it) without telling the service.
    fn remove(&mut self, tok: usize) -> Option<Conn> {
        let mut c = self.conns.remove(&tok)?;
        let _ = self.poll.registry().deregister(&mut c.stream);
        if c.peer.is_none() {
            self.npending -= 1;
        }
        Some(c)
    }

    fn reject(&mut self, tok: usize, why: &str) {
        if let Some(c) = self.remove(tok) {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "ferroccl::bootstrap", "{}: rejected connection from {}: {why}", self.params.name, c.from);
        }
    }

    /// The connection ended or broke: a pending one is a rejection, a kept one is
    /// reported to the service.
    fn end(&mut self, tok: usize, why: String) {
        let Some(c) = self.conns.get(&tok) else { return };
        match c.peer {
            None => self.reject(tok, &why),
            Some(p) => {
                let c = self.remove(tok).expect("present");
                self.service.on_close(p, c.from, why);
            }
        }
    }

    fn readable(&mut self, tok: usize, scratch: &mut [u8]) {
        loop {
            let Some(c) = self.conns.get_mut(&tok) else { return };
            let n = match c.stream.read(scratch) {
                Ok(0) => {
                    let why = match c.inbound.partial() {
                        Some(p) => format!("connection closed {p}"),
                        None => "connection closed".into(),
                    };
                    self.end(tok, why);
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let why = match c.inbound.partial() {
                        Some(p) => format!("{e} ({p})"),
                        None => e.to_string(),
                    };
                    self.end(tok, why);
                    return;
                }
            };
            let mut input = &scratch[..n];
            loop {
                let Some(c) = self.conns.get_mut(&tok) else { return };
                let frame = match c.inbound.next_frame(&mut input) {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        let why = match &e {
                            InboundError::Handshake(_) => e.to_string(),
                            _ => format!("{e}; closing the connection"),
                        };
                        self.end(tok, why);
                        return;
                    }
                };
                let from = c.from;
                match c.peer {
                    Some(p) => {
                        if let Err(why) = self.service.on_frame(p, from, frame) {
                            self.end(tok, why);
                            return;
                        }
                    }
                    None => match self.service.on_opening(from, frame) {
                        Verdict::Keep(p) => {
                            c.peer = Some(p);
                            self.npending -= 1;
                        }
                        Verdict::Close => {
                            self.remove(tok);
                            return;
                        }
                        Verdict::Reject(why) => {
                            self.reject(tok, &why);
                            return;
                        }
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    impl Service for Nothing {
        fn on_opening(&mut self, _from: SocketAddr, _opening: Vec<u8>) -> Verdict {
            Verdict::Close
        }
    }

    fn test_loop() -> (Loop<Nothing>, SocketAddr, Arc<Stats>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let params = Params {
            name: "test listener".into(),
            magic: 1,
            opening_max: 16,
            frame_max: 0,
            pending_timeout: Duration::from_secs(600),
            abort: Arc::new(AtomicBool::new(false)),
        };
        let (lp, _waker) = Loop::new(l, params, stats.clone(), Nothing).unwrap();
        (lp, addr, stats)
    }

    /// Accepts until `n` connections are pending (bounded: they are in the backlog
    /// once `connect` returned, but leave the kernel room).
    fn accept_until_pending(lp: &mut Loop<Nothing>, n: usize) {
        let mut scratch = vec![0u8; 1024];
        let t0 = Instant::now();
        while lp.npending < n {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{} of {n} accepted",
                lp.npending
            );
            lp.accept_all(&mut scratch);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn out_of_descriptors_keeps_a_fresh_pending_connection() {
        let (mut lp, addr, stats) = test_loop();
        // A client whose opening has not arrived yet (a rank between connect and write).
        let _client = std::net::TcpStream::connect(addr).unwrap();
        accept_until_pending(&mut lp, 1);
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(!lp.out_of_resources(&emfile), "must back off, not drop");
        assert_eq!(lp.npending, 1);
        assert_eq!(lp.conns.len(), 1);
        assert!(lp.paused_until.is_some());
        assert_eq!(stats.dropped_pending.load(Ordering::Relaxed), 0);
        let t = stats.trouble().expect("trouble");
        assert!(
            t.starts_with("ran out of file descriptors: accept() failed 1 time (Too many open files"),
            "{t}"
        );
    }

    #[test]
    fn out_of_descriptors_drops_the_oldest_stalled_connection() {
        let (mut lp, addr, stats) = test_loop();
        let _a = std::net::TcpStream::connect(addr).unwrap();
        accept_until_pending(&mut lp, 1);
        let _b = std::net::TcpStream::connect(addr).unwrap();
        accept_until_pending(&mut lp, 2);
        // The first has been pending for the grace (the second for less).
        let (first, since) = *lp.pending.front().unwrap();
        lp.pending.front_mut().unwrap().1 = since.checked_sub(STALLED_AFTER).expect("an instant 5 s back");
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(lp.out_of_resources(&emfile), "a stalled connection frees a descriptor");
        assert_eq!(lp.npending, 1);
        assert!(!lp.conns.contains_key(&first), "the stalled one is dropped");
        assert!(!lp.out_of_resources(&emfile), "the fresh one is kept");
        assert_eq!(lp.npending, 1);
        assert_eq!(stats.dropped_pending.load(Ordering::Relaxed), 1);
        let t = stats.trouble().expect("trouble");
        assert!(
            t.contains("accept() failed 2 times") && t.contains("dropped 1 unauthenticated connection"),
            "{t}"
        );
    }
}
