//! The thin I/O layer: sockets, the non-blocking listen/connect/accept state
//! machines, and helper threads that move data-stream chunks. All protocol
//! decisions are made by [`crate::proto`].
//!
//! Threads: the control stream is non-blocking and progressed by whoever calls
//! `isend`/`irecv`/`test` (so small messages never wait for a thread wake-up).
//! Data streams are blocking sockets owned by lazily started helper threads
//! (stream *s* belongs to thread `s mod nthreads`), each with a FIFO task queue;
//! they count finished bytes into the request's counter. Closing a comm stops the
//! threads, shuts the sockets down (unblocking any read/write in progress), joins
//! the threads and closes the sockets, so no buffer is touched after `close`.
//!
//! Waiting: `test` does non-blocking I/O unless the calling thread is idle
//! (it tested everything it waits on and nothing moved); then it may sleep in
//! the kernel, in its own blocking read/write or in `ppoll`, bounded by
//! [`TEST_WAIT`]. The rule and its measurements are in [`crate::wait`].

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, IoSlice};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::log::NCCL_NET;
use ferroccl_plugin_api::sdk::{Buf, MAX_RECVS, NetError, NetResult, TestStatus};
use ferroccl_plugin_api::{net_info, net_warn};
use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};

use crate::config::Config;
use crate::proto::{self, HELLO_LEN, HandleInfo, Hello, Need, ProtoError, Receiver, Sender};
use crate::wait::{self, Outcome, Plan, Target, Waits};
pub use crate::wait::{TEST_SPIN, TEST_WAIT};

/// `NCCL_NET_MAX_REQUESTS`: outstanding requests per comm.
pub const MAX_REQUESTS: usize = 32;
/// Outstanding `isend`s per send comm (`MAX_REQUESTS` × `maxRecvs`).
pub const MAX_SEND_REQUESTS: usize = MAX_REQUESTS * MAX_RECVS;
/// How long an accepted TCP connection may take to send its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may wait for the rest of its streams at the listener.
pub const GROUP_TIMEOUT: Duration = Duration::from_secs(120);
/// TCP keepalive: idle time before the first probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// TCP keepalive: interval between probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// TCP keepalive: unanswered probes before the connection is dropped.
pub const KEEPALIVE_COUNT: u32 = 6;
/// `TCP_USER_TIMEOUT`: unacknowledged data older than this drops the connection.
pub const USER_TIMEOUT: Duration = Duration::from_secs(60);
/// Listen backlog (NCCL's value).
pub const LISTEN_BACKLOG: i32 = 16384;
const STAGE_LEN: usize = 16 * 1024;
/// Largest `SO_RCVLOWAT` set on a control stream while a large payload arrives
/// (see `RecvInner::set_lowat`). Measured on loopback, 2 vCPUs, 4 MiB messages, 8
/// in flight (`benchmarks/net_plugin_bw.c`): 1 MiB and 4 MiB did alike, 256 KiB
/// less well; without it the receiver woke once per 64 KiB segment.
pub const RCVLOWAT_MAX: usize = 1 << 20;
/// Most slices of one gathered control-stream write (a header and a payload per message).
const MAX_IOV: usize = 16;
/// Puts a connected control stream in its working mode: blocking, with
/// [`TEST_WAIT`] as the send and receive timeouts (non-blocking progress passes
/// `MSG_DONTWAIT`).
fn ctrl_mode(s: &Socket) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(TEST_WAIT))?;
    s.set_write_timeout(Some(TEST_WAIT))
}

fn is_peer_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

/// Maps an I/O failure on a connection with `peer` to the plugin error.
fn io_err(what: &str, peer: SocketAddr, e: &io::Error) -> NetError {
    if is_peer_gone(e) {
        NetError::Remote(format!(
            "NET/FerrocclSocket: {what} with peer {peer}: connection closed or reset by the peer ({e})"
        ))
    } else {
        NetError::System(format!("NET/FerrocclSocket: {what} with peer {peer} failed: {e}"))
    }
}

fn proto_err(peer: SocketAddr, e: ProtoError) -> NetError {
    match e {
        ProtoError::Truncated { .. } => NetError::InvalidUsage(format!("NET/FerrocclSocket: peer {peer}: {e}")),
        _ => NetError::Remote(format!("NET/FerrocclSocket: peer {peer}: {e}")),
    }
}

/// Applies NCCL's socket options: `TCP_NODELAY`, keepalive, `TCP_USER_TIMEOUT`,
/// and `NCCL_SOCKET_SNDBUF`/`RCVBUF` when > 0.
pub(crate) fn tune(s: &Socket, cfg: &Config) -> io::Result<()> {
    s.set_tcp_nodelay(true)?;
    s.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_COUNT),
    )?;
    s.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    if cfg.sndbuf > 0 {
        s.set_send_buffer_size(cfg.sndbuf as usize)?;
    }
    if cfg.rcvbuf > 0 {
        s.set_recv_buffer_size(cfg.rcvbuf as usize)?;
    }
    Ok(())
}

/// A random 64-bit id (per-connection id of the handshake, connect tokens).
pub fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos() ^ std::process::id() as u128);
        h.finish()
    })
}

/// Runs a receive call until it is not interrupted: its byte count, `Ok(None)`
/// for `EAGAIN`/`EWOULDBLOCK`, else the OS error.
fn retry_recv(mut call: impl FnMut() -> isize) -> io::Result<Option<usize>> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// `recv` of at most `buf.len()` bytes; `Ok(None)` when nothing is available
/// (`block`: wait up to the socket's receive timeout first; else `MSG_DONTWAIT`).
fn read_nb(s: &Socket, buf: &mut [u8], block: bool) -> io::Result<Option<usize>> {
    let flags = if block { 0 } else { libc::MSG_DONTWAIT };
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the fd is open.
    retry_recv(|| unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) })
}

/// Like [`read_nb`], one `recvmsg` filling `a` and then `b` (a scatter read).
fn read2_nb(s: &Socket, a: &mut [u8], b: &mut [u8], block: bool) -> io::Result<Option<usize>> {
    let flags = if block { 0 } else { libc::MSG_DONTWAIT };
    let mut iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: an all-zero `msghdr` is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: both slices are valid for writes of their lengths and outlive the
    // call; `msg` points at `iov` only; the fd is open.
    retry_recv(|| unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, flags) })
}

// ---------------------------------------------------------------- helper threads

/// Direction of a [`Pool`]'s data streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// The helper threads write tasks to their streams.
    Send,
    /// The helper threads read tasks from their streams.
    Recv,
}

struct Task {
    stream: usize,
    buf: Buf,
    done: Arc<AtomicUsize>,
}

#[derive(Default)]
struct QState {
    tasks: VecDeque<Task>,
    stop: bool,
}

#[derive(Default)]
struct WorkQueue {
    m: Mutex<QState>,
    cv: Condvar,
}

struct Worker {
    q: Arc<WorkQueue>,
    join: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct PoolShared {
    failed: AtomicBool,
    error: Mutex<Option<NetError>>,
    /// Written by a helper thread after each task it finishes (or fails), so a
    /// caller waiting on its requests' data streams can sleep in `ppoll` on it
    /// instead of spinning (`None`: `eventfd` failed; the caller then yields).
    done_ev: Option<OwnedFd>,
}

impl PoolShared {
    /// Wakes a caller sleeping on [`PoolShared::done_ev`].
    fn signal(&self) {
        if let Some(ev) = &self.done_ev {
            let one: u64 = 1;
            // SAFETY: an open eventfd; 8 valid bytes. A full counter (EAGAIN) is
            // already readable, which is all a sleeper needs.
            unsafe { libc::write(ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Resets [`PoolShared::done_ev`] before the caller looks at the done counters:
    /// a task finished after this makes it readable again, so no wake-up is lost.
    fn drain(&self) {
        if let Some(ev) = &self.done_ev {
            let mut v: u64 = 0;
            // SAFETY: an open non-blocking eventfd; 8 valid bytes for writes.
            unsafe { libc::read(ev.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }

    /// The target a caller waiting on helper threads sleeps on.
    fn target(&self) -> Option<Target> {
        self.done_ev.as_ref().map(|ev| Target {
            fd: ev.as_raw_fd(),
            events: libc::POLLIN,
        })
    }
}

pub(crate) fn new_eventfd() -> Option<OwnedFd> {
    // SAFETY: no pointers; returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The data streams of one comm and their helper threads (also the RMA
/// emulation's striped put streams, `crate::rma`).
pub(crate) struct Pool {
    dir: Dir,
    peer: SocketAddr,
    nthreads: usize,
    streams: Vec<Arc<Socket>>,
    workers: Vec<Option<Worker>>,
    shared: Arc<PoolShared>,
}

impl Pool {
    /// A pool over `streams`, stream *s* served by thread `s mod nthreads` (started
    /// on its first task).
    pub(crate) fn new(dir: Dir, peer: SocketAddr, nthreads: usize, streams: Vec<Socket>) -> Pool {
        let nthreads = nthreads.clamp(1, streams.len().max(1));
        let nstreams = streams.len();
        Pool {
            dir,
            peer,
            nthreads,
            streams: streams.into_iter().map(Arc::new).collect(),
            workers: (0..nthreads).map(|_| None).collect(),
            shared: Arc::new(PoolShared {
                done_ev: if nstreams > 0 { new_eventfd() } else { None },
                ..PoolShared::default()
            }),
        }
    }

    /// Queues `buf` on data stream `stream`; its byte count is added to `done` once
    /// it has moved, and the pool's eventfd ([`Pool::done_fd`]) is written.
    pub(crate) fn submit(&mut self, stream: usize, buf: Buf, done: Arc<AtomicUsize>) -> NetResult<()> {
        let t = stream % self.nthreads;
        if self.workers[t].is_none() {
            let q = Arc::new(WorkQueue::default());
            let mine: Vec<Option<Arc<Socket>>> = self
                .streams
                .iter()
                .enumerate()
                .map(|(s, sock)| (s % self.nthreads == t).then(|| sock.clone()))
                .collect();
            let (dir, peer, shared, q2) = (self.dir, self.peer, self.shared.clone(), q.clone());
            let join = std::thread::Builder::new()
                .name(format!("ferroccl-sock{t}"))
                .spawn(move || worker_loop(dir, peer, mine, q2, shared))
                .map_err(|e| NetError::System(format!("NET/FerrocclSocket: cannot start a helper thread: {e}")))?;
            self.workers[t] = Some(Worker { q, join: Some(join) });
        }
        let w = self.workers[t].as_ref().expect("started above");
        w.q.m
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tasks
            .push_back(Task { stream, buf, done });
        w.q.cv.notify_one();
        Ok(())
    }

    /// The first error of a helper thread, if one failed.
    pub(crate) fn error(&self) -> Option<NetError> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return None;
        }
        self.shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .cloned()
    }

    /// The eventfd written after every finished (or failed) task, if one was made.
    pub(crate) fn done_fd(&self) -> Option<std::os::fd::RawFd> {
        self.shared.done_ev.as_ref().map(|e| e.as_raw_fd())
    }

    /// Resets [`Pool::done_fd`] before looking at the done counters (no lost wake-up).
    pub(crate) fn drain(&self) {
        self.shared.drain();
    }

    fn shutdown(&mut self) {
        for w in self.workers.iter().flatten() {
            w.q.m.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
            w.q.cv.notify_all();
        }
        for s in &self.streams {
            let _ = s.shutdown(Shutdown::Both);
        }
        for w in self.workers.iter_mut().flatten() {
            if let Some(j) = w.join.take() {
                let _ = j.join();
            }
        }
        self.workers.iter_mut().for_each(|w| *w = None);
        self.streams.clear();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn worker_loop(
    dir: Dir,
    peer: SocketAddr,
    streams: Vec<Option<Arc<Socket>>>,
    q: Arc<WorkQueue>,
    shared: Arc<PoolShared>,
) {
    let mut lowats: Vec<Lowat> = streams.iter().map(|_| Lowat::default()).collect();
    loop {
        let task = {
            let mut g = q.m.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if g.stop {
                    return;
                }
                if let Some(t) = g.tasks.pop_front() {
                    break t;
                }
                g = q.cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        };
        let Some(sock) = streams.get(task.stream).and_then(|s| s.as_ref()) else {
            return;
        };
        let res = match dir {
            // SAFETY: the buffer stays valid and unaliased until its request completes
            // or the comm is closed; close joins this thread first.
            Dir::Send => send_all(sock, unsafe { task.buf.as_slice() }),
            // SAFETY: as above; nobody else writes this part of the receive buffer.
            Dir::Recv => recv_all(sock, unsafe { task.buf.as_mut_slice() }, &mut lowats[task.stream]),
        };
        match res {
            Ok(()) => {
                task.done.fetch_add(task.buf.len, Ordering::AcqRel);
                shared.signal();
            }
            Err(e) => {
                if !q.m.lock().unwrap_or_else(|p| p.into_inner()).stop {
                    let what = format!(
                        "data stream {} ({})",
                        task.stream,
                        if dir == Dir::Send { "send" } else { "recv" }
                    );
                    let err = io_err(&what, peer, &e);
                    net_warn!("{err}");
                    let mut slot = shared.error.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(err);
                    shared.failed.store(true, Ordering::Release);
                    drop(slot);
                    shared.signal();
                }
                return;
            }
        }
    }
}

pub(crate) fn send_all(s: &Socket, mut b: &[u8]) -> io::Result<()> {
    while !b.is_empty() {
        match s.send_with_flags(b, libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `SO_RCVLOWAT` of one socket: the mark set, and the mark it was meant to be
/// before the receive-buffer cap (what later changes are measured against).
pub(crate) struct Lowat {
    set: usize,
    want: usize,
}

impl Default for Lowat {
    fn default() -> Self {
        Lowat { set: 1, want: 1 }
    }
}

impl Lowat {
    /// Fits the mark of `s` to `left` bytes the peer still owes on it (1: wake on
    /// any byte): up to [`RCVLOWAT_MAX`] and a quarter of `SO_RCVBUF`, never more
    /// than `left`. Changed only when the mark exceeds `left` or is under half of
    /// what it could be, or (`retry`, once per message) when the receive buffer
    /// held it under half of `left`. A thread sleeping on the socket is then woken
    /// once per that many bytes instead of once per loopback segment.
    ///
    /// A blocking read that has already copied part of what it asked for waits
    /// until the *queue* holds the mark again (`tcp_data_ready` checks what is
    /// unread, not what the read still needs): with a mark near `left` it can wait
    /// for bytes the peer does not owe. Sleep in `poll` with the queue drained
    /// instead ([`recv_all`]), or with a receive timeout (the control stream).
    /// Errors: the failing option's name and the OS error.
    pub(crate) fn fit(&mut self, s: &Socket, left: usize, retry: bool) -> Result<(), (&'static str, io::Error)> {
        let want = left.min(RCVLOWAT_MAX);
        let retry = retry && self.set < want / 2;
        if !(self.set > left || self.want < want / 2 || retry) {
            return Ok(());
        }
        let fd = s.as_raw_fd();
        let mut v = want as libc::c_int;
        if v > 1 {
            // Never more than a quarter of the receive buffer: a larger mark makes
            // the kernel grow the buffer and clamp the TCP window to the mark
            // (`tcp_set_rcvlowat`), which would cap the stream's throughput.
            let mut rcvbuf: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: a valid socket; `rcvbuf` and `len` are valid for writes.
            let r = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&mut rcvbuf as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            if r != 0 {
                return Err(("SO_RCVBUF", io::Error::last_os_error()));
            }
            v = v.min(rcvbuf / 4).max(1);
        }
        // SAFETY: a valid socket, an int option value of the size passed.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(("SO_RCVLOWAT", io::Error::last_os_error()));
        }
        self.set = v as usize;
        self.want = want;
        Ok(())
    }
}

/// Longest `poll` of a helper thread waiting for its data stream; it then polls
/// again (closing the comm shuts the socket down, which ends the wait at once).
const HELPER_POLL: Duration = Duration::from_secs(1);

/// Reads all of `b` from a data stream (a helper thread, which only receives):
/// non-blocking reads while bytes are queued, and when the queue is empty a
/// `poll` with the stream's `SO_RCVLOWAT` fitted to what is left of `b`
/// ([`Lowat::fit`]; 1 byte for the last [`wait::SPIN_MAX_BYTES`]), so the
/// thread wakes once per up to [`RCVLOWAT_MAX`] bytes. `poll` (unlike a
/// blocking read that copied part of its request) wakes as soon as the queue
/// holds the mark, and every byte of a mark up to `left` is owed.
pub(crate) fn recv_all(s: &Socket, b: &mut [u8], lowat: &mut Lowat) -> io::Result<()> {
    let mut off = 0;
    let mut first = true;
    while off < b.len() {
        let want = b.len() - off;
        match read_nb(s, &mut b[off..], false)? {
            Some(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by peer",
                ));
            }
            // A short read emptied the queue: wait below.
            Some(n) if n < want => off += n,
            Some(n) => {
                off += n;
                continue;
            }
            None => {}
        }
        let left = b.len() - off;
        if left == 0 {
            break;
        }
        let mark = if left > wait::SPIN_MAX_BYTES { left } else { 1 };
        lowat.fit(s, mark, std::mem::take(&mut first)).map_err(|(_, e)| e)?;
        let mut pfd = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the fd is open until this thread is joined.
        let r = unsafe { libc::poll(&mut pfd, 1, HELPER_POLL.as_millis() as libc::c_int) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- listen / accept

/// A non-blocking listen socket on `ip` port 0, and its address.
pub(crate) fn listen_on(ip: std::net::IpAddr, scope_id: u32) -> NetResult<(Socket, SocketAddr)> {
    let addr = match ip {
        std::net::IpAddr::V4(v4) => SocketAddr::new(v4.into(), 0),
        std::net::IpAddr::V6(v6) => SocketAddr::V6(std::net::SocketAddrV6::new(v6, 0, 0, scope_id)),
    };
    let fail = |e: io::Error| NetError::System(format!("NET/FerrocclSocket: cannot listen on {addr}: {e}"));
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(fail)?;
    sock.set_nonblocking(true).map_err(fail)?;
    sock.bind(&SockAddr::from(addr)).map_err(fail)?;
    sock.listen(LISTEN_BACKLOG).map_err(fail)?;
    let local = sock
        .local_addr()
        .map_err(fail)?
        .as_socket()
        .ok_or_else(|| fail(io::ErrorKind::Other.into()))?;
    Ok((sock, local))
}

struct Incoming {
    sock: Socket,
    peer: SocketAddr,
    buf: [u8; HELLO_LEN],
    got: usize,
    deadline: Instant,
}

struct PartialConn {
    peer: SocketAddr,
    ctrl: Option<Socket>,
    data: Vec<Option<Socket>>,
    have: usize,
    since: Instant,
}

/// A listening endpoint (`listenComm`).
pub struct Listener {
    sock: Socket,
    /// Listen sockets on the other member interfaces of a virtual device (see
    /// [`crate::vdev`]); their connections join the same groups.
    extra: Vec<(Socket, SocketAddr)>,
    info: HandleInfo,
    cfg: Config,
    pending: Vec<Incoming>,
    groups: HashMap<u64, PartialConn>,
}

impl Listener {
    /// Binds `ip` port 0 and listens; returns the listener and what goes in the handle.
    pub fn bind(cfg: &Config, ip: std::net::IpAddr, scope_id: u32) -> NetResult<Listener> {
        Listener::bind_striped(cfg, &[(ip, scope_id)], cfg.nstreams, cfg.nthreads)
    }

    /// Binds one listen socket per member address (`(ip, scope id)`, the first one's
    /// goes in the handle) with `nstreams` data streams and `nthreads` helper threads
    /// per connection: the listen side of a virtual device ([`crate::vdev`]).
    pub fn bind_striped(
        cfg: &Config,
        members: &[(std::net::IpAddr, u32)],
        nstreams: usize,
        nthreads: usize,
    ) -> NetResult<Listener> {
        let mut socks = members
            .iter()
            .map(|&(ip, scope)| listen_on(ip, scope))
            .collect::<NetResult<Vec<_>>>()?;
        if socks.is_empty() {
            return Err(NetError::InvalidArgument(
                "NET/FerrocclSocket: listen on no address".into(),
            ));
        }
        let (sock, local) = socks.remove(0);
        let info = HandleInfo {
            addr: local,
            magic: cfg.magic,
            nstreams: nstreams as u32,
            nthreads: nthreads as u32,
            min_task: cfg.min_task as u64,
        };
        Ok(Listener {
            sock,
            extra: socks,
            info,
            cfg: cfg.clone(),
            pending: Vec::new(),
            groups: HashMap::new(),
        })
    }

    /// What a connecting peer needs.
    pub fn info(&self) -> &HandleInfo {
        &self.info
    }

    /// The addresses of the other member interfaces' listen sockets (empty unless
    /// [`Listener::bind_striped`] was given several members).
    pub fn stripe_addrs(&self) -> Vec<SocketAddr> {
        self.extra.iter().map(|(_, a)| *a).collect()
    }

    /// Accepts TCP connections, reads their handshakes without blocking, rejects
    /// strays with a log line, and returns a receive comm once all streams of one
    /// connection have arrived.
    pub fn accept(&mut self) -> NetResult<Option<RecvComm>> {
        let me = self.info.addr;
        for k in 0..=self.extra.len() {
            let sock = if k == 0 { &self.sock } else { &self.extra[k - 1].0 };
            loop {
                match sock.accept() {
                    Ok((s, a)) => {
                        let peer = a.as_socket().unwrap_or(me);
                        if let Err(e) = s.set_nonblocking(true).and_then(|()| tune(&s, &self.cfg)) {
                            net_warn!("NET/FerrocclSocket: dropping connection from {peer} on {me}: {e}");
                            continue;
                        }
                        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
                        self.pending.push(Incoming {
                            sock: s,
                            peer,
                            buf: [0; HELLO_LEN],
                            got: 0,
                            deadline,
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
                    Err(e) => {
                        return Err(NetError::System(format!(
                            "NET/FerrocclSocket: accept on {me} failed: {e}"
                        )));
                    }
                }
            }
        }
        let now = Instant::now();
        let mut i = 0;
        while i < self.pending.len() {
            let inc = &mut self.pending[i];
            match read_nb(&inc.sock, &mut inc.buf[inc.got..], false) {
                Ok(Some(0)) => {
                    net_info!(
                        NCCL_NET,
                        "NET/FerrocclSocket: connection from {} on {me} closed after {} of {HELLO_LEN} handshake bytes; ignored",
                        inc.peer,
                        inc.got
                    );
                    self.pending.swap_remove(i);
                }
                Ok(Some(n)) => {
                    inc.got += n;
                    if inc.got == HELLO_LEN {
                        let inc = self.pending.swap_remove(i);
                        self.file(inc);
                    }
                }
                Ok(None) if now >= inc.deadline => {
                    net_warn!(
                        "NET/FerrocclSocket: rejecting connection from {} on {me}: sent {} of {HELLO_LEN} handshake bytes in {:?}",
                        inc.peer,
                        inc.got,
                        HANDSHAKE_TIMEOUT
                    );
                    self.pending.swap_remove(i);
                }
                Ok(None) => i += 1,
                Err(e) => {
                    net_info!(
                        NCCL_NET,
                        "NET/FerrocclSocket: connection from {} on {me} failed during handshake: {e}",
                        inc.peer
                    );
                    self.pending.swap_remove(i);
                }
            }
        }
        let want = self.info.nstreams as usize + 1;
        self.groups.retain(|id, g| {
            let keep = g.have == want || now.duration_since(g.since) < GROUP_TIMEOUT;
            if !keep {
                net_warn!("NET/FerrocclSocket: dropping connection {id:#x} from {}: only {} of {want} streams arrived in {:?}", g.peer, g.have, GROUP_TIMEOUT);
            }
            keep
        });
        let Some(id) = self.groups.iter().find(|(_, g)| g.have == want).map(|(k, _)| *k) else {
            return Ok(None);
        };
        let g = self.groups.remove(&id).expect("found above");
        let ctrl = g.ctrl.expect("complete group has a control stream");
        ctrl_mode(&ctrl).map_err(|e| io_err("accept", g.peer, &e))?;
        let mut data = Vec::with_capacity(g.data.len());
        for s in g.data {
            let s = s.expect("complete group has all data streams");
            s.set_nonblocking(false).map_err(|e| io_err("accept", g.peer, &e))?;
            data.push(s);
        }
        net_info!(
            NCCL_NET,
            "NET/FerrocclSocket: accepted connection {id:#x} from {} on {me} ({} data streams)",
            g.peer,
            data.len()
        );
        Ok(Some(RecvComm::new(g.peer, ctrl, data, &self.info)))
    }

    fn file(&mut self, inc: Incoming) {
        let me = self.info.addr;
        let h = match Hello::decode(&inc.buf, self.info.magic, self.info.nstreams) {
            Ok(h) => h,
            Err(e) => {
                net_warn!(
                    "NET/FerrocclSocket: rejecting connection from {} on {me}: {e}",
                    inc.peer
                );
                return;
            }
        };
        let n = self.info.nstreams as usize;
        let g = self.groups.entry(h.conn_id).or_insert_with(|| PartialConn {
            peer: inc.peer,
            ctrl: None,
            data: (0..n).map(|_| None).collect(),
            have: 0,
            since: Instant::now(),
        });
        let slot = if h.index as usize == n {
            &mut g.ctrl
        } else {
            &mut g.data[h.index as usize]
        };
        if slot.is_some() {
            net_warn!(
                "NET/FerrocclSocket: rejecting connection from {} on {me}: stream {} of connection {:#x} arrived twice",
                inc.peer,
                h.index,
                h.conn_id
            );
            return;
        }
        *slot = Some(inc.sock);
        g.have += 1;
    }
}

// ---------------------------------------------------------------- connect

#[derive(Debug, Clone, Copy)]
enum CState {
    Start,
    InProgress,
    Hello,
    Done,
    Wait(Instant),
}

struct ConnSock {
    sock: Option<Socket>,
    state: CState,
    hello: [u8; HELLO_LEN],
    sent: usize,
}

/// A `connect` in progress (kept between calls in the plugin's registry).
pub struct Connecting {
    info: HandleInfo,
    /// Listen addresses of a virtual device's other members: data stream *i* goes to
    /// member `i mod (1 + stripe.len())` (member 0 is `info.addr`, which also takes the
    /// control stream). Empty: every stream to `info.addr`.
    stripe: Vec<SocketAddr>,
    cfg: Config,
    conn_id: u64,
    retries: u32,
    socks: Vec<ConnSock>,
    /// `IP_TOS` / `IPV6_TCLASS` of every socket this connection opens (the
    /// communicator's traffic class, when defined).
    tos: Option<u32>,
}

impl Connecting {
    /// Marks every socket of this connection with the communicator's traffic
    /// class (`ncclNetCommConfig_t.trafficClass`, NCCL 2.30.7
    /// `src/include/plugin/net/net_v11.h`): `IP_TOS` on IPv4, `IPV6_TCLASS` on
    /// IPv6. `NCCL_NET_TRAFFIC_CLASS_UNDEF` (-1) leaves the kernel's default;
    /// values are taken as the full TOS byte (0 ..= 255, DSCP in the upper six bits).
    ///
    /// Errors: a defined class outside 0 ..= 255 (`InvalidArgument`).
    pub fn with_traffic_class(mut self, tc: i32) -> NetResult<Connecting> {
        self.tos = match tc {
            -1 => None,
            0..=255 => Some(tc as u32),
            _ => {
                return Err(NetError::InvalidArgument(format!(
                    "NET/FerrocclSocket: traffic class {tc} (expected -1 or 0..=255, the IP TOS byte)"
                )));
            }
        };
        Ok(self)
    }

    /// Starts connecting to the listener described by `info`.
    pub fn new(info: HandleInfo, cfg: &Config) -> Connecting {
        let conn_id = random_u64();
        let n = info.nstreams as usize;
        let socks = (0..=n)
            .map(|i| ConnSock {
                sock: None,
                state: CState::Start,
                hello: Hello {
                    magic: info.magic,
                    sock_type: proto::SOCKET_TYPE_NET,
                    version: proto::PROTO_VERSION,
                    conn_id,
                    index: i as u16,
                    nstreams: n as u16,
                }
                .encode(),
                sent: 0,
            })
            .collect();
        Connecting {
            info,
            stripe: Vec::new(),
            cfg: cfg.clone(),
            conn_id,
            retries: 0,
            socks,
            tos: None,
        }
    }

    /// Stripes the data streams over a virtual device's member listen addresses
    /// (the handle's extra addresses, [`crate::vdev::decode_stripe`]).
    pub fn with_stripe(mut self, stripe: Vec<SocketAddr>) -> Connecting {
        self.stripe = stripe;
        self
    }

    /// Where stream `i` connects (the control stream, last, to member 0).
    fn stream_addr(&self, i: usize) -> SocketAddr {
        let n = self.socks.len() - 1;
        if i == n || self.stripe.is_empty() {
            return self.info.addr;
        }
        match i % (self.stripe.len() + 1) {
            0 => self.info.addr,
            k => self.stripe[k - 1],
        }
    }

    /// Advances every stream without blocking; the send comm once all handshakes are sent.
    pub fn progress(&mut self) -> NetResult<Option<SendComm>> {
        let addr = self.info.addr;
        for i in 0..self.socks.len() {
            let saddr = self.stream_addr(i);
            loop {
                let cs = &mut self.socks[i];
                let step: io::Result<bool> = match cs.state {
                    CState::Done => break,
                    CState::Wait(t) if Instant::now() < t => break,
                    CState::Start | CState::Wait(_) => (|| {
                        let s = Socket::new(Domain::for_address(saddr), Type::STREAM, Some(Protocol::TCP))?;
                        s.set_nonblocking(true)?;
                        tune(&s, &self.cfg)?;
                        match (self.tos, saddr) {
                            (Some(tos), SocketAddr::V4(_)) => s.set_tos_v4(tos)?,
                            (Some(tos), SocketAddr::V6(_)) => s.set_tclass_v6(tos)?,
                            (None, _) => {}
                        }
                        let r = s.connect(&SockAddr::from(saddr));
                        cs.sock = Some(s);
                        cs.sent = 0;
                        match r {
                            Ok(()) => cs.state = CState::Hello,
                            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => cs.state = CState::InProgress,
                            Err(e) => return Err(e),
                        }
                        Ok(true)
                    })(),
                    CState::InProgress => (|| {
                        let s = cs.sock.as_ref().expect("socket exists while connecting");
                        let mut p = libc::pollfd {
                            fd: s.as_raw_fd(),
                            events: libc::POLLOUT,
                            revents: 0,
                        };
                        // SAFETY: one valid pollfd, zero timeout.
                        let r = unsafe { libc::poll(&mut p, 1, 0) };
                        if r <= 0 {
                            return Ok(false);
                        }
                        if let Some(e) = s.take_error()? {
                            return Err(e);
                        }
                        cs.state = CState::Hello;
                        Ok(true)
                    })(),
                    CState::Hello => {
                        let s = cs.sock.as_ref().expect("socket exists while connecting");
                        match s.send_with_flags(&cs.hello[cs.sent..], libc::MSG_NOSIGNAL) {
                            Ok(n) => {
                                cs.sent += n;
                                if cs.sent == HELLO_LEN {
                                    cs.state = CState::Done;
                                }
                                Ok(true)
                            }
                            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                                Ok(false)
                            }
                            Err(e) => Err(e),
                        }
                    }
                };
                match step {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        if self.retries >= self.cfg.retry_cnt {
                            return Err(NetError::System(format!(
                                "NET/FerrocclSocket: connect to {saddr} failed after {} retries (NCCL_SOCKET_RETRY_CNT): {e}",
                                self.retries
                            )));
                        }
                        self.retries += 1;
                        let wait = Duration::from_millis(self.cfg.retry_sleep_ms * self.retries as u64);
                        net_info!(
                            NCCL_NET,
                            "NET/FerrocclSocket: connect to {saddr} (stream {i}): {e}; retry {} in {wait:?}",
                            self.retries
                        );
                        let cs = &mut self.socks[i];
                        cs.sock = None;
                        cs.state = CState::Wait(Instant::now() + wait);
                        break;
                    }
                }
            }
        }
        if !self.socks.iter().all(|c| matches!(c.state, CState::Done)) {
            return Ok(None);
        }
        let mut socks: Vec<Socket> = self
            .socks
            .iter_mut()
            .map(|c| c.sock.take().expect("done streams have sockets"))
            .collect();
        let ctrl = socks.pop().expect("control stream is last");
        ctrl_mode(&ctrl).map_err(|e| io_err("connect", addr, &e))?;
        for s in &socks {
            s.set_nonblocking(false).map_err(|e| io_err("connect", addr, &e))?;
        }
        net_info!(
            NCCL_NET,
            "NET/FerrocclSocket: connected {:#x} to {addr} ({} data streams)",
            self.conn_id,
            socks.len()
        );
        Ok(Some(SendComm::new(addr, ctrl, socks, &self.info, self.cfg.inline)))
    }
}

// ---------------------------------------------------------------- send comm

struct CtrlOut {
    req: u64,
    hdr: [u8; proto::HDR_LEN],
    off: usize,
    payload: Buf,
}

struct SendReq {
    size: usize,
    ctrl_done: bool,
    data_expected: usize,
    data_done: Arc<AtomicUsize>,
}

/// State of a send comm, shared with its requests.
pub struct SendInner {
    peer: SocketAddr,
    ctrl: Option<Socket>,
    proto: Sender,
    out: VecDeque<CtrlOut>,
    reqs: HashMap<u64, SendReq>,
    next_id: u64,
    pool: Pool,
    failed: Option<NetError>,
}

/// The sending side of a connection (`sendComm`).
pub struct SendComm {
    inner: Arc<Mutex<SendInner>>,
}

/// An outstanding `isend` or `irecv`.
pub enum Request {
    /// A send.
    Send(Arc<Mutex<SendInner>>, u64),
    /// A (grouped) receive.
    Recv(Arc<Mutex<RecvInner>>, u64),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SendComm {
    fn new(peer: SocketAddr, ctrl: Socket, data: Vec<Socket>, info: &HandleInfo, inline: usize) -> SendComm {
        let n = data.len();
        SendComm {
            inner: Arc::new(Mutex::new(SendInner {
                peer,
                ctrl: Some(ctrl),
                proto: Sender::new(n, info.min_task as usize, inline),
                out: VecDeque::new(),
                reqs: HashMap::new(),
                next_id: 0,
                pool: Pool::new(Dir::Send, peer, info.nthreads as usize, data),
                failed: None,
            })),
        }
    }

    /// Address of the receiving peer.
    pub fn peer(&self) -> SocketAddr {
        lock(&self.inner).peer
    }

    /// Posts a send; `Ok(None)` when [`MAX_SEND_REQUESTS`] are outstanding.
    pub fn isend(&mut self, buf: Buf, tag: i32) -> NetResult<Option<Request>> {
        // New work: the caller is not idle (crate::wait).
        wait::reset();
        wait::note_send();
        let mut g = lock(&self.inner);
        if let Some(e) = &g.failed {
            return Err(e.clone());
        }
        if g.reqs.len() >= MAX_SEND_REQUESTS {
            return Ok(None);
        }
        let plan = g.proto.plan(buf.len, tag);
        let id = g.next_id;
        g.next_id += 1;
        let data_done = Arc::new(AtomicUsize::new(0));
        let mut data_expected = 0;
        for ch in &plan.chunks {
            data_expected += ch.len;
            let sub = Buf::new(buf.ptr.wrapping_add(ch.offset), ch.len);
            if let Err(e) = g.pool.submit(ch.stream, sub, data_done.clone()) {
                g.failed = Some(e.clone());
                return Err(e);
            }
        }
        let payload = if plan.payload_on_ctrl {
            buf
        } else {
            Buf::new(buf.ptr, 0)
        };
        // With entries already queued, the last write was short (the socket was
        // full): the caller's `test` writes on, a write here would say EAGAIN.
        let eager = g.out.is_empty();
        g.out.push_back(CtrlOut {
            req: id,
            hdr: plan.header,
            off: 0,
            payload,
        });
        g.reqs.insert(
            id,
            SendReq {
                size: buf.len,
                ctrl_done: false,
                data_expected,
                data_done,
            },
        );
        if eager {
            g.progress(false)?;
        }
        Ok(Some(Request::Send(self.inner.clone(), id)))
    }

    /// Stops the helper threads and closes every socket (requests still out fail).
    pub fn close(self) {}
}

impl Drop for SendComm {
    fn drop(&mut self) {
        // Its socket may be in this thread's idle record: forget the record.
        wait::forget();
        let mut g = lock(&self.inner);
        g.pool.shutdown();
        g.ctrl = None;
        g.out.clear();
        g.failed.get_or_insert(NetError::Internal(
            "NET/FerrocclSocket: request tested after its send comm was closed".into(),
        ));
    }
}

impl SendInner {
    /// Writes queued headers and control-stream payloads; `block`: the first write
    /// may wait up to [`TEST_WAIT`] for socket space. Returns the bytes written.
    fn progress(&mut self, block: bool) -> NetResult<usize> {
        let r = self.progress_inner(block);
        if let Err(e) = &r {
            self.failed.get_or_insert(e.clone());
        }
        r
    }

    fn progress_inner(&mut self, mut block: bool) -> NetResult<usize> {
        let Some(ctrl) = self.ctrl.as_ref() else { return Ok(0) };
        let hl = proto::HDR_LEN;
        let mut moved = 0;
        while !self.out.is_empty() {
            // One gathered write of the queued entries (header, then payload when
            // it goes on the control stream), from where the front one stopped.
            let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            let mut want = 0;
            for o in self.out.iter() {
                if n_iov + 2 > MAX_IOV {
                    break;
                }
                // SAFETY: the payload stays valid until its request completes (NCCL contract).
                let pay = unsafe { o.payload.as_slice() };
                if o.off < hl {
                    iov[n_iov] = IoSlice::new(&o.hdr[o.off..]);
                    n_iov += 1;
                    want += hl - o.off;
                }
                let p0 = o.off.saturating_sub(hl);
                if p0 < pay.len() {
                    iov[n_iov] = IoSlice::new(&pay[p0..]);
                    n_iov += 1;
                    want += pay.len() - p0;
                }
            }
            let flags = libc::MSG_NOSIGNAL | if block { 0 } else { libc::MSG_DONTWAIT };
            block = false;
            let written = match ctrl.send_vectored_with_flags(&iov[..n_iov], flags) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err("control stream (send)", self.peer, &e)),
            };
            moved += written;
            let mut left = written;
            while let Some(o) = self.out.front_mut() {
                let total = hl + o.payload.len;
                let k = left.min(total - o.off);
                o.off += k;
                left -= k;
                if o.off < total {
                    break;
                }
                let id = o.req;
                self.out.pop_front();
                if let Some(r) = self.reqs.get_mut(&id) {
                    r.ctrl_done = true;
                }
            }
            if written < want {
                // A short write: the socket buffer is full, a retry would say EAGAIN.
                break;
            }
        }
        Ok(moved)
    }

    /// What send `id` waits on: socket space for its queued header or inline
    /// payload (with the bytes left of the entry being written), else its data
    /// streams.
    fn waits(&self, id: u64) -> Waits {
        match (self.reqs.get(&id), self.ctrl.as_ref(), self.out.front()) {
            (Some(r), Some(ctrl), Some(o)) if !r.ctrl_done => Waits::Socket {
                target: Target {
                    fd: ctrl.as_raw_fd(),
                    events: libc::POLLOUT,
                },
                left: proto::HDR_LEN + o.payload.len - o.off,
            },
            (Some(r), _, _) => match self.pool.shared.target() {
                Some(target) if r.ctrl_done => Waits::Helpers {
                    target,
                    left: r.data_expected - r.data_done.load(Ordering::Acquire),
                },
                _ => Waits::Other,
            },
            _ => Waits::Other,
        }
    }

    /// Tests send `id`; `block`: the first write may wait for socket space (module docs).
    fn test(&mut self, id: u64, block: bool) -> NetResult<(TestStatus, Outcome)> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.reqs.contains_key(&id) {
            return Err(NetError::Internal(format!(
                "NET/FerrocclSocket: test of unknown send request {id}"
            )));
        }
        let waits = self.waits(id);
        if matches!(waits, Waits::Helpers { .. }) {
            self.pool.shared.drain();
            // The wake-up drained here may have been for another request of this comm
            // that the caller will test next: keep the eventfd readable for it.
            let done = |r: &SendReq| r.ctrl_done && r.data_done.load(Ordering::Acquire) == r.data_expected;
            if self.reqs.iter().any(|(k, r)| *k != id && done(r)) {
                self.pool.shared.signal();
            }
        }
        let moved = self.progress(block && matches!(waits, Waits::Socket { .. }))?;
        let r = &self.reqs[&id];
        if r.ctrl_done && r.data_done.load(Ordering::Acquire) == r.data_expected {
            let size = r.size;
            self.reqs.remove(&id);
            return Ok((TestStatus::done1(size), Outcome::Progress(waits)));
        }
        if let Some(e) = self.pool.error() {
            self.failed.get_or_insert(e.clone());
            return Err(e);
        }
        let outcome = if moved > 0 {
            Outcome::Progress(waits)
        } else {
            Outcome::Idle(waits)
        };
        Ok((TestStatus::Pending, outcome))
    }
}

// ---------------------------------------------------------------- recv comm

struct RecvReq {
    bufs: Vec<Buf>,
    data_done: Arc<AtomicUsize>,
}

/// State of a receive comm, shared with its requests.
pub struct RecvInner {
    peer: SocketAddr,
    ctrl: Option<Socket>,
    proto: Receiver,
    stage: Box<[u8]>,
    st_lo: usize,
    st_hi: usize,
    hdr: [u8; proto::HDR_LEN],
    hdr_got: usize,
    reqs: HashMap<u64, RecvReq>,
    pool: Pool,
    failed: Option<NetError>,
    /// `SO_RCVLOWAT` of the control stream.
    lowat: Lowat,
    /// The message (receive, buffer) the mark was last set for.
    lowat_msg: Option<(u64, usize)>,
    /// The last message matched was larger than the staging buffer.
    big: bool,
}

/// The receiving side of a connection (`recvComm`).
pub struct RecvComm {
    inner: Arc<Mutex<RecvInner>>,
}

impl RecvComm {
    fn new(peer: SocketAddr, ctrl: Socket, data: Vec<Socket>, info: &HandleInfo) -> RecvComm {
        let n = data.len();
        RecvComm {
            inner: Arc::new(Mutex::new(RecvInner {
                peer,
                ctrl: Some(ctrl),
                proto: Receiver::new(n, info.min_task as usize),
                stage: vec![0u8; STAGE_LEN].into_boxed_slice(),
                st_lo: 0,
                st_hi: 0,
                hdr: [0; proto::HDR_LEN],
                hdr_got: 0,
                reqs: HashMap::new(),
                pool: Pool::new(Dir::Recv, peer, info.nthreads as usize, data),
                failed: None,
                lowat: Lowat::default(),
                lowat_msg: None,
                big: false,
            })),
        }
    }

    /// Address of the sending peer.
    pub fn peer(&self) -> SocketAddr {
        lock(&self.inner).peer
    }

    /// Posts a (grouped) receive of `(buffer, tag)` pairs, 1 ..= [`MAX_RECVS`];
    /// `Ok(None)` when [`MAX_REQUESTS`] are outstanding.
    pub fn irecv(&mut self, bufs: &[(Buf, i32)]) -> NetResult<Option<Request>> {
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(NetError::InvalidArgument(format!(
                "NET/FerrocclSocket: irecv of {} buffers (expected 1 ..= {MAX_RECVS})",
                bufs.len()
            )));
        }
        wait::reset();
        wait::note_recv();
        let mut g = lock(&self.inner);
        if let Some(e) = &g.failed {
            return Err(e.clone());
        }
        if g.reqs.len() >= MAX_REQUESTS {
            return Ok(None);
        }
        let spec: Vec<(usize, i32)> = bufs.iter().map(|(b, t)| (b.len, *t)).collect();
        let id = g.proto.post(&spec);
        g.reqs.insert(
            id,
            RecvReq {
                bufs: bufs.iter().map(|(b, _)| *b).collect(),
                data_done: Arc::new(AtomicUsize::new(0)),
            },
        );
        // No I/O here: the first `test` reads (saves a read that would find nothing
        // when the receive is posted ahead of the data, the usual case).
        Ok(Some(Request::Recv(self.inner.clone(), id)))
    }

    /// Stops the helper threads and closes every socket (requests still out fail).
    pub fn close(self) {}
}

impl Drop for RecvComm {
    fn drop(&mut self) {
        // Its socket may be in this thread's idle record: forget the record.
        wait::forget();
        let mut g = lock(&self.inner);
        g.pool.shutdown();
        g.ctrl = None;
        g.failed.get_or_insert(NetError::Internal(
            "NET/FerrocclSocket: request tested after its recv comm was closed".into(),
        ));
    }
}

impl RecvInner {
    /// Reads and dispatches what the control stream has; `block`: the first read
    /// may wait up to [`TEST_WAIT`] for bytes. Returns the bytes read or taken
    /// from the staging buffer.
    fn progress(&mut self, block: bool) -> NetResult<usize> {
        let r = self.progress_inner(block);
        if let Err(e) = &r {
            self.failed.get_or_insert(e.clone());
        }
        r
    }

    /// Reads into the staging buffer; `false` if nothing is available now
    /// (`*drained`: an earlier read of this progress call came back short;
    /// `*block`: wait for bytes, once).
    fn fill_stage(&mut self, drained: &mut bool, block: &mut bool) -> NetResult<bool> {
        if *drained {
            return Ok(false);
        }
        // After a large message, read only the next header: its payload (likely
        // large too) then goes straight into the user's buffer, not through here.
        let want = if self.big && self.proto.need() == Need::Header {
            proto::HDR_LEN - self.hdr_got
        } else {
            STAGE_LEN
        };
        let ctrl = self.ctrl.as_ref().expect("checked by caller");
        match read_nb(ctrl, &mut self.stage[..want], std::mem::take(block)) {
            Ok(Some(0)) => Err(io_err(
                "control stream (recv)",
                self.peer,
                &io::ErrorKind::UnexpectedEof.into(),
            )),
            Ok(Some(n)) => {
                self.st_lo = 0;
                self.st_hi = n;
                *drained = n < want;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(io_err("control stream (recv)", self.peer, &e)),
        }
    }

    fn dispatch(&mut self, m: proto::Matched) -> NetResult<()> {
        self.big = m.size > STAGE_LEN;
        let r = self.reqs.get(&m.req).expect("matched receives are posted");
        let base = r.bufs[m.idx];
        for ch in &m.chunks {
            let sub = Buf::new(base.ptr.wrapping_add(ch.offset), ch.len);
            self.pool.submit(ch.stream, sub, r.data_done.clone())?;
        }
        Ok(())
    }

    fn progress_inner(&mut self, mut block: bool) -> NetResult<usize> {
        if self.ctrl.is_none() {
            return Ok(0);
        }
        let peer = self.peer;
        // A short read means the socket is empty: do not ask again for an EAGAIN.
        let mut drained = false;
        let mut moved = 0;
        loop {
            if let Some(m) = self.proto.match_stashed().map_err(|e| proto_err(peer, e))? {
                self.dispatch(m)?;
                continue;
            }
            match self.proto.need() {
                Need::Idle => return Ok(moved),
                Need::Header => {
                    if self.st_lo == self.st_hi && !self.fill_stage(&mut drained, &mut block)? {
                        return Ok(moved);
                    }
                    let k = (proto::HDR_LEN - self.hdr_got).min(self.st_hi - self.st_lo);
                    moved += k;
                    self.hdr[self.hdr_got..self.hdr_got + k].copy_from_slice(&self.stage[self.st_lo..self.st_lo + k]);
                    self.st_lo += k;
                    self.hdr_got += k;
                    if self.hdr_got == proto::HDR_LEN {
                        self.hdr_got = 0;
                        let h = self.hdr;
                        if let Some(m) = self.proto.on_header(&h).map_err(|e| proto_err(peer, e))? {
                            self.dispatch(m)?;
                        }
                    }
                }
                Need::Payload { req, idx, offset, len } => {
                    let b = self.reqs.get(&req).expect("matched receives are posted").bufs[idx];
                    let dst = Buf::new(b.ptr.wrapping_add(offset), len);
                    // SAFETY: the receive buffer is valid for `b.len ≥ offset + len` bytes
                    // until the request completes, and only this thread writes this range.
                    let dst = unsafe { dst.as_mut_slice() };
                    if self.st_lo < self.st_hi {
                        let k = len.min(self.st_hi - self.st_lo);
                        dst[..k].copy_from_slice(&self.stage[self.st_lo..self.st_lo + k]);
                        self.st_lo += k;
                        moved += k;
                        self.proto.on_payload(k);
                    } else if len >= STAGE_LEN && !drained {
                        // The payload straight into the user's buffer and, in the same
                        // call, whatever follows it into the stage: the next header only
                        // while messages are large (its payload then comes here too),
                        // so a stream of large messages costs one read per message,
                        // not a header read and a payload read.
                        let ctrl = self.ctrl.as_ref().expect("checked above");
                        let extra = if self.big { proto::HDR_LEN } else { STAGE_LEN };
                        match read2_nb(ctrl, dst, &mut self.stage[..extra], std::mem::take(&mut block)) {
                            Ok(Some(0)) => {
                                return Err(io_err(
                                    "control stream (recv)",
                                    peer,
                                    &io::ErrorKind::UnexpectedEof.into(),
                                ));
                            }
                            Ok(Some(n)) => {
                                drained = n < len + extra;
                                let k = n.min(len);
                                moved += n;
                                self.proto.on_payload(k);
                                self.st_lo = 0;
                                self.st_hi = n - k;
                            }
                            Ok(None) => return Ok(moved),
                            Err(e) => return Err(io_err("control stream (recv)", peer, &e)),
                        }
                    } else if !self.fill_stage(&mut drained, &mut block)? {
                        return Ok(moved);
                    }
                }
            }
        }
    }

    /// Keeps `SO_RCVLOWAT` of the control stream fitted to what it must deliver
    /// next ([`Lowat::fit`]): on a thread that only receives
    /// ([`wait::receive_only`]), half of the payload in progress when more than
    /// [`wait::SPIN_MAX_BYTES`] of it is left; else 1 byte. A thread sleeping on
    /// the socket (blocking read or `ppoll`) is then woken once per that many
    /// bytes instead of once per loopback segment, never waiting for more than
    /// the peer still owes; a stream of large messages sets it about once per
    /// message.
    fn set_lowat(&mut self) -> NetResult<()> {
        let Some(ctrl) = self.ctrl.as_ref() else { return Ok(()) };
        let (left, msg) = match self.proto.need() {
            Need::Payload { len, req, idx, .. } if len > wait::SPIN_MAX_BYTES && wait::receive_only() => {
                (len, Some((req, idx)))
            }
            _ => (1, None),
        };
        // A mark the receive buffer held down is tried again once per message.
        let retry = msg.is_some() && msg != self.lowat_msg;
        self.lowat
            .fit(ctrl, left, retry)
            .map_err(|(what, e)| io_err(&format!("control stream ({what})"), self.peer, &e))?;
        if retry {
            self.lowat_msg = msg;
        }
        Ok(())
    }

    /// What receive `id` waits on: bytes on the control stream (with the bytes
    /// left of the payload in progress there), else its data streams.
    fn waits(&self, id: u64) -> Waits {
        let Some(ctrl) = self.ctrl.as_ref() else {
            return Waits::Other;
        };
        let Some(r) = self.reqs.get(&id) else {
            return Waits::Other;
        };
        if let Some((_, expected)) = self.proto.ctrl_complete(id) {
            return match self.pool.shared.target() {
                Some(target) => Waits::Helpers {
                    target,
                    left: expected.saturating_sub(r.data_done.load(Ordering::Acquire)),
                },
                None => Waits::Other,
            };
        }
        let left = match self.proto.need() {
            Need::Idle => return Waits::Other,
            Need::Header => 0,
            Need::Payload { len, .. } => len,
        };
        Waits::Socket {
            target: Target {
                fd: ctrl.as_raw_fd(),
                events: libc::POLLIN,
            },
            left,
        }
    }

    /// Tests receive `id`; `block`: the first read may wait for bytes (module docs).
    fn test(&mut self, id: u64, block: bool) -> NetResult<(TestStatus, Outcome)> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.reqs.contains_key(&id) {
            return Err(NetError::Internal(format!(
                "NET/FerrocclSocket: test of unknown receive request {id}"
            )));
        }
        let waits = self.waits(id);
        if matches!(waits, Waits::Helpers { .. }) {
            self.pool.shared.drain();
            // As for sends: keep the eventfd readable for another finished receive.
            let proto = &self.proto;
            let done = |k: u64, r: &RecvReq| {
                proto
                    .ctrl_complete(k)
                    .is_some_and(|(_, expected)| r.data_done.load(Ordering::Acquire) == expected)
            };
            if self.reqs.iter().any(|(k, r)| *k != id && done(*k, r)) {
                self.pool.shared.signal();
            }
        }
        // Staged bytes are used first; only an empty stage may wait on the socket.
        let block = block && self.st_lo == self.st_hi && matches!(waits, Waits::Socket { .. });
        let moved = self.progress(block)?;
        self.set_lowat()?;
        if let Some((sizes, expected)) = self.proto.ctrl_complete(id) {
            let r = &self.reqs[&id];
            if r.data_done.load(Ordering::Acquire) == expected {
                self.proto.remove(id);
                self.reqs.remove(&id);
                let mut out = [0usize; MAX_RECVS];
                out[..sizes.len()].copy_from_slice(&sizes);
                return Ok((
                    TestStatus::Done {
                        n: sizes.len(),
                        sizes: out,
                    },
                    Outcome::Progress(waits),
                ));
            }
        }
        if let Some(e) = self.pool.error() {
            self.failed.get_or_insert(e.clone());
            return Err(e);
        }
        let outcome = if moved > 0 {
            Outcome::Progress(waits)
        } else {
            Outcome::Idle(waits)
        };
        Ok((TestStatus::Pending, outcome))
    }
}

impl Request {
    /// Tests the request: progresses its comm's control stream and reports completion.
    ///
    /// May sleep up to [`TEST_WAIT`] when the calling thread is idle (see
    /// [`crate::wait`]).
    pub fn test(&mut self) -> NetResult<TestStatus> {
        let was_idle = wait::idle();
        let (st, outcome) = match self {
            Request::Send(c, id) => {
                wait::note_send();
                let mut g = lock(c);
                let plan = wait::plan(g.waits(*id));
                if let Plan::PollSet(t) = &plan {
                    drop(g);
                    wait::sleep_on(t);
                    g = lock(c);
                }
                g.test(*id, plan == Plan::BlockOwn)
            }
            Request::Recv(c, id) => {
                wait::note_recv();
                let mut g = lock(c);
                let plan = wait::plan(g.waits(*id));
                if let Plan::PollSet(t) = &plan {
                    drop(g);
                    wait::sleep_on(t);
                    g = lock(c);
                }
                g.test(*id, plan == Plan::BlockOwn)
            }
        }
        .inspect_err(|_| wait::forget())?;
        wait::record(outcome);
        if was_idle && outcome == Outcome::Idle(Waits::Other) {
            // Waiting on helper threads: let them (and the peer) run instead of spinning.
            std::thread::yield_now();
        }
        Ok(st)
    }
}
