//! RMA (one-sided) operations emulated over TCP: the socket plugin's
//! `ncclRmaPlugin_v14` / `_v13` tables (NCCL 2.30.7 `src/include/plugin/rma/`), so
//! ferroccl and NCCL can run one-sided puts, gets and put-with-signal on any IP network.
//!
//! Model (see [`ferroccl_plugin_api::sdk::rma`]):
//! * **devices** are the net plugin's interfaces ([`SocketNet::interfaces`]), with the
//!   same properties, when `NCCL_SOCKET_RMA_ENABLE=1`; by default none, so that NCCL
//!   2.30, which takes the first RMA table with a device from the net plugin's
//!   library, keeps its own RMA for GPU memory.
//! * **connect** builds a full mesh: to every peer one *origin* connection carrying this
//!   rank's operations (a writer thread sends them in posting order, a reader thread
//!   takes the replies in the same order), and from every peer one *target* connection
//!   whose service thread applies the peer's operations to this rank's windows (it
//!   reads as the net path's data streams do, `io::recv_all`: woken once per up to
//!   1 MiB, not per segment; an operation's header and data go in one `writev`). The
//!   handshake carries the listener's random token, so stray connections are refused.
//! * **striped puts**: beside each control connection, the target's data streams, as
//!   many as the net path's (`NCCL_SOCKET_NTHREADS` × `NCCL_NSOCKS_PERTHREAD`, same
//!   automatic choice, [`crate::config::auto_streams`]; the target's listener decides
//!   and ships the count, the helper threads and `NCCL_SOCKET_MIN_TASKSIZE` in its
//!   handle). A put the net path would stripe (larger than `NCCL_SOCKET_INLINE` and at
//!   least one task) sends only its header on the control connection and its payload
//!   cut as the net path cuts a message (`proto::split`: `max(MIN_TASKSIZE,
//!   ceil(size / nstreams))`, round-robin over the streams in operation order, NCCL's
//!   `ncclNetSocketIsend` / `ncclNetSocketGetTask` in `src/transport/net_socket.cc`),
//!   moved by the net path's helper-thread pool (`io::Pool`) at both ends, straight
//!   from the source window and into the destination window. The target counts each
//!   put's landed bytes and completes striped puts in arrival order: the signal of a
//!   put-with-signal is applied, and the put acknowledged, only when every byte of it
//!   and of every put before it is in the window. An operation on the control
//!   connection (a small put, a get, a flush) and a put overlapping one still landing
//!   first wait for the puts before it, so operations to a peer take effect in posting
//!   order. Gets are not striped (their data comes back on the control connection).
//! * **windows** are numbered in registration order on each group (`regMrSym` is
//!   symmetric: every rank registers its windows in the same order); an operation names
//!   the target window by that number. A target waits (bounded by [`WINDOW_WAIT`]) for a
//!   window the peer already registered but it has not yet.
//! * **put-with-signal**: the target writes the data into the window, then adds to the
//!   64-bit signal word with a release atomic, so whoever reads the signal with acquire
//!   semantics sees the data (strong signal, whatever `isStrongSignal` says).
//! * **completion**: a put completes when the target acknowledged writing all of it; a get when
//!   its data is in the local window; a flush when every earlier operation to that
//!   peer completed (replies come in order).
//! * **failures**: a lost connection fails every pending and later operation to that
//!   peer with `ncclRemoteError` naming the peer, and `queryLastError` reports it.

use std::collections::VecDeque;
use std::ffi::CStr;
use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::rma::{Rma, RmaConfig, Signal, Xfer};
use ferroccl_plugin_api::sdk::{Buf, Handle, Net, NetError, NetResult, Properties, PtrType};

use crate::io::send_all;
use crate::io::{Dir, Pool};
use crate::proto::split;
use crate::wait::{Outcome, Plan, Target as WaitTarget, Waits};
use crate::{Config, SocketNet};

/// Longest `connect` waits for every peer's connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a target waits for a window a peer already addresses.
pub const WINDOW_WAIT: Duration = Duration::from_secs(60);

const HANDLE_MAGIC: u32 = 0x414d_5246; // "FRMA"
const HELLO_MAGIC: u32 = 0x4f4c_4548; // "HELO"
const OP_PUT: u8 = 1;
const OP_PUT_SIGNAL: u8 = 2;
const OP_GET: u8 = 3;
const OP_FLUSH: u8 = 4;
const OP_HEADER: usize = 48;
/// Header byte 1: the put's payload is striped over the data streams.
const FLAG_STRIPED: u8 = 1;
/// Hello byte 20..24: the stream a connection is (0 the control stream, 1 + k data stream k).
const HELLO_STREAM: usize = 20;
const REPLY_HEADER: usize = 16;

/// The plugin: the socket net plugin's devices.
#[derive(Debug)]
pub struct SocketRma {
    net: SocketNet,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A listening endpoint: the socket and the token peers must present.
#[derive(Debug)]
pub struct RmaListener {
    sock: TcpListener,
    token: u64,
    stripe: Stripe,
}

/// How puts to a target are striped: decided by the target's listener and shipped in
/// its handle, so both ends cut every put identically (as the net path's
/// `proto::HandleInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stripe {
    /// Data streams per peer (`NCCL_SOCKET_NTHREADS` × `NCCL_NSOCKS_PERTHREAD`; 0: none).
    nstreams: usize,
    /// Helper threads serving them (stream *s* belongs to thread `s mod nthreads`).
    nthreads: usize,
    /// `NCCL_SOCKET_MIN_TASKSIZE`: smallest chunk per data stream, bytes.
    min_task: usize,
}

impl Stripe {
    fn of(cfg: &Config) -> Stripe {
        Stripe {
            nstreams: cfg.nstreams,
            nthreads: cfg.nthreads,
            min_task: cfg.min_task.max(1),
        }
    }

    /// Whether a put of `len` bytes goes on the data streams: the net path's rule
    /// (`proto::Sender::plan`), with the origin's `NCCL_SOCKET_INLINE`.
    fn stripes(&self, len: usize, inline: usize) -> bool {
        self.nstreams > 0 && len > inline && len >= self.min_task
    }
}

/// One window as registered on this rank.
#[derive(Debug, Clone, Copy)]
enum WinSlot {
    Live { base: usize, len: usize },
    Gone,
}

/// A symmetric registration (`mhandle`).
#[derive(Debug)]
pub struct Window {
    id: u32,
    base: usize,
}

/// State of one operation, shared by the poster, the connection threads and `test`.
#[derive(Debug, Default)]
pub struct ReqState {
    /// 0 pending, 1 done, 2 failed.
    state: AtomicU8,
    err: Mutex<Option<String>>,
    /// Bytes the operation moves (how long a `test` of it may expect to wait).
    len: usize,
    /// The group's completion wake-up (`None`: `eventfd` failed; `test` then only polls).
    wake: Option<Arc<Wake>>,
}

impl ReqState {
    fn finish(&self) {
        self.state.store(1, Ordering::SeqCst);
        self.woken();
    }
    fn fail(&self, why: &str) {
        *lock(&self.err) = Some(why.to_owned());
        self.state.store(2, Ordering::SeqCst);
        self.woken();
    }
    fn woken(&self) {
        if let Some(w) = &self.wake {
            w.notify();
        }
    }

    /// What a `test` of this request waits on, for the net path's idle rule
    /// ([`crate::wait`]): the group's completion eventfd, like a request waiting on
    /// helper threads.
    fn waits(&self) -> Waits {
        match &self.wake {
            Some(w) => Waits::Helpers {
                target: WaitTarget {
                    fd: w.ev.as_raw_fd(),
                    events: libc::POLLIN,
                },
                left: self.len,
            },
            None => Waits::Other,
        }
    }
}

/// Wakes a thread sleeping in `test` when an operation of the group completes.
///
/// Without it a caller polling its puts (NCCL's proxy, the benchmark) spins on
/// `test` + `sched_yield` for the whole transfer: a core burnt per polling thread,
/// which the two-sided path does not pay (its `test` sleeps on the data streams'
/// eventfd, [`crate::wait`]). On the 16-core loopback benchmark that was the put's
/// extra ~0.1 CPU s per GB at 4 MiB (1 core / ~10 GB/s).
#[derive(Debug)]
struct Wake {
    /// Readable after a completion that found a sleeper.
    ev: std::os::fd::OwnedFd,
    /// Threads between their last look at a request and the end of their sleep:
    /// completions write the eventfd only when there is one (no system call per
    /// operation otherwise).
    sleepers: AtomicUsize,
}

impl Wake {
    fn new() -> Option<Arc<Wake>> {
        crate::io::new_eventfd().map(|ev| {
            Arc::new(Wake {
                ev,
                sleepers: AtomicUsize::new(0),
            })
        })
    }

    /// After a request's state was stored (`SeqCst`): wakes a sleeper, if any.
    /// With the sleeper's `SeqCst` increment before its own look at the state,
    /// either it sees the new state or this sees it and writes.
    fn notify(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let one: u64 = 1;
            // SAFETY: an open eventfd; 8 valid bytes. A full counter (EAGAIN) is
            // already readable, which is all a sleeper needs.
            unsafe { libc::write(self.ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Resets the eventfd before the sleeper's last look at its request.
    fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: an open non-blocking eventfd; 8 valid bytes for writes.
        unsafe { libc::read(self.ev.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// Sleeps (at most [`crate::wait::TEST_WAIT`]) on `targets`, which the idle rule
    /// chose, unless `req` completed meanwhile.
    fn sleep(&self, req: &ReqState, targets: &[WaitTarget]) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        self.drain();
        if req.state.load(Ordering::SeqCst) == 0 {
            crate::wait::sleep_on(targets);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An outstanding operation.
pub type RmaRequest = Arc<ReqState>;

struct Pending {
    req: Arc<ReqState>,
    /// For a get: where its data goes.
    get_dst: Option<(usize, usize)>,
}

struct Op {
    header: [u8; OP_HEADER],
    /// Source of a put's data (address, length).
    data: Option<(usize, usize)>,
    pending: Pending,
}

/// This rank's connection to one peer: posted operations go to the writer thread.
struct Origin {
    peer: usize,
    tx: Mutex<Option<Sender<Op>>>,
    pending: Mutex<VecDeque<Pending>>,
    dead: Mutex<Option<String>>,
    sock: socket2::Socket,
    /// The target's striping (from its handle).
    stripe: Stripe,
    /// This rank's `NCCL_SOCKET_INLINE`: puts up to this size stay on the control stream.
    inline: usize,
}

impl Origin {
    fn kill(&self, why: String) {
        let mut d = lock(&self.dead);
        if d.is_none() {
            *d = Some(why.clone());
        }
        drop(d);
        for p in lock(&self.pending).drain(..) {
            p.req.fail(&why);
        }
    }
}

/// What a group shares with its connection threads: its windows and its first error.
struct Shared {
    rank: usize,
    windows: Mutex<Vec<WinSlot>>,
    win_cv: Condvar,
    closing: AtomicBool,
    error: Mutex<Option<String>>,
    /// Written when an operation completes while a `test` sleeps ([`Wake`]).
    wake: Option<Arc<Wake>>,
}

impl Shared {
    fn note(&self, why: &str) {
        let mut e = lock(&self.error);
        if e.is_none() {
            *e = Some(why.to_owned());
        }
    }

    /// The window `id` of this rank, waiting (bounded) until it is registered.
    fn window(&self, id: u32) -> Result<(usize, usize), String> {
        let deadline = Instant::now() + WINDOW_WAIT;
        let mut w = lock(&self.windows);
        loop {
            match w.get(id as usize) {
                Some(WinSlot::Live { base, len }) => return Ok((*base, *len)),
                Some(WinSlot::Gone) => return Err(format!("window {id} was deregistered on rank {}", self.rank)),
                None => {}
            }
            let now = Instant::now();
            if now >= deadline || self.closing.load(Ordering::Relaxed) {
                return Err(format!(
                    "window {id} is not registered on rank {} after {:?} ({} registered)",
                    self.rank,
                    WINDOW_WAIT,
                    w.len()
                ));
            }
            w = self
                .win_cv
                .wait_timeout(w, (deadline - now).min(Duration::from_millis(200)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A connected group (`collComm`); its RMA contexts share it.
pub struct Group {
    nranks: usize,
    shared: Arc<Shared>,
    origins: Vec<Option<Arc<Origin>>>,
    targets: Vec<socket2::Socket>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("rank", &self.shared.rank)
            .field("nranks", &self.nranks)
            .finish()
    }
}

impl Group {
    /// Closes every connection and joins the threads (idempotent).
    fn shutdown(&self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        for o in self.origins.iter().flatten() {
            lock(&o.tx).take();
            let _ = o.sock.shutdown(std::net::Shutdown::Both);
        }
        for t in &self.targets {
            let _ = t.shutdown(std::net::Shutdown::Both);
        }
        self.shared.win_cv.notify_all();
        let threads: Vec<_> = lock(&self.threads).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }

    fn origin(&self, rank: usize) -> NetResult<&Arc<Origin>> {
        self.origins.get(rank).and_then(Option::as_ref).ok_or_else(|| {
            NetError::InvalidArgument(format!(
                "NET/FerrocclSocket RMA: rank {rank} is not a peer of rank {} (group of {})",
                self.shared.rank, self.nranks
            ))
        })
    }

    /// Posts `op` to `rank`'s origin connection; fails at once on a dead connection.
    fn post(
        &self,
        rank: usize,
        mut header: [u8; OP_HEADER],
        data: Option<(usize, usize)>,
        get_dst: Option<(usize, usize)>,
    ) -> NetResult<RmaRequest> {
        let o = self.origin(rank)?;
        if let Some(why) = lock(&o.dead).clone() {
            return Err(NetError::Remote(format!("NET/FerrocclSocket RMA: {why}")));
        }
        if let Some((_, len)) = data
            && o.stripe.stripes(len, o.inline)
        {
            header[1] = FLAG_STRIPED;
        }
        let req = Arc::new(ReqState {
            len: data.or(get_dst).map_or(0, |(_, len)| len),
            wake: self.shared.wake.clone(),
            ..ReqState::default()
        });
        // New work: the caller's next wait starts with a try (as a new isend/irecv).
        crate::wait::reset();
        let op = Op {
            header,
            data,
            pending: Pending {
                req: req.clone(),
                get_dst,
            },
        };
        let tx = lock(&o.tx);
        match tx.as_ref().map(|t| t.send(op)) {
            Some(Ok(())) => Ok(req),
            _ => Err(NetError::Internal(
                "NET/FerrocclSocket RMA: operation posted on a closed group".into(),
            )),
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// [`send_all`] of `a` then `b`, gathered (`writev`).
fn send_all2(s: &socket2::Socket, mut a: &[u8], mut b: &[u8]) -> std::io::Result<()> {
    while !a.is_empty() || !b.is_empty() {
        let bufs = [std::io::IoSlice::new(a), std::io::IoSlice::new(b)];
        let parts = if a.is_empty() { &bufs[1..] } else { &bufs[..] };
        match s.send_vectored_with_flags(parts, libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                let k = n.min(a.len());
                a = &a[k..];
                n -= k;
                b = &b[n..];
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn recv_exact(s: &socket2::Socket, b: &mut [u8]) -> std::io::Result<()> {
    let mut r: &socket2::Socket = s;
    r.read_exact(b)
}

/// Encodes the listen address, token and striping into a 128-byte handle.
fn encode_handle(h: &mut Handle, addr: SocketAddr, token: u64, stripe: Stripe) {
    h.fill(0);
    put_u32(h, 0, HANDLE_MAGIC);
    put_u64(h, 4, token);
    put_u32(h, 40, stripe.nstreams as u32);
    put_u32(h, 44, stripe.nthreads as u32);
    put_u64(h, 48, stripe.min_task as u64);
    match addr {
        SocketAddr::V4(a) => {
            h[12] = 4;
            h[14..16].copy_from_slice(&a.port().to_le_bytes());
            h[16..20].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            h[12] = 6;
            h[14..16].copy_from_slice(&a.port().to_le_bytes());
            h[16..32].copy_from_slice(&a.ip().octets());
            put_u32(h, 32, a.scope_id());
        }
    }
}

fn decode_handle(h: &Handle, rank: usize) -> NetResult<(SocketAddr, u64, Stripe)> {
    if get_u32(h, 0) != HANDLE_MAGIC {
        return Err(NetError::InvalidArgument(format!(
            "RMA handle of rank {rank}: magic {:#x}, expected {HANDLE_MAGIC:#x} (not a socket RMA handle)",
            get_u32(h, 0)
        )));
    }
    let port = u16::from_le_bytes([h[14], h[15]]);
    let addr = match h[12] {
        4 => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(h[16], h[17], h[18], h[19]), port)),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&h[16..32]);
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(o), port, 0, get_u32(h, 32)))
        }
        f => {
            return Err(NetError::InvalidArgument(format!(
                "RMA handle of rank {rank}: address family {f}, expected 4 or 6"
            )));
        }
    };
    let stripe = Stripe {
        nstreams: get_u32(h, 40) as usize,
        nthreads: get_u32(h, 44) as usize,
        min_task: get_u64(h, 48) as usize,
    };
    if stripe.nstreams > crate::proto::MAX_STREAMS
        || stripe.nthreads > crate::config::MAX_THREADS
        || (stripe.nstreams > 0 && (stripe.nthreads == 0 || stripe.min_task == 0))
    {
        return Err(NetError::InvalidArgument(format!(
            "RMA handle of rank {rank}: {} data streams, {} threads, task size {} (expected at most {} streams \
             over 1..={} threads and a task size > 0)",
            stripe.nstreams,
            stripe.nthreads,
            stripe.min_task,
            crate::proto::MAX_STREAMS,
            crate::config::MAX_THREADS
        )));
    }
    Ok((addr, get_u64(h, 4), stripe))
}

fn sys(what: String) -> impl FnOnce(std::io::Error) -> NetError {
    move |e| NetError::System(format!("NET/FerrocclSocket RMA: {what}: {e}"))
}

/// Writer thread of an origin connection: sends each posted operation in order.
///
/// A striped put ([`FLAG_STRIPED`]) sends its header on the control stream and hands
/// its chunks (`proto::split`, the net path's cut: `max(NCCL_SOCKET_MIN_TASKSIZE,
/// ceil(size / nstreams))`, round-robin over the streams in operation order) to the
/// data streams' helper threads, as NCCL's `ncclNetSocketIsend` cuts a request into
/// tasks for its helper threads (`src/transport/net_socket.cc`); the target cuts it
/// the same way. Anything else goes whole on the control stream.
fn origin_writer(o: Arc<Origin>, rx: Receiver<Op>, data_streams: Vec<socket2::Socket>) {
    let addr = o
        .sock
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut pool = (!data_streams.is_empty()).then(|| Pool::new(Dir::Send, addr, o.stripe.nthreads, data_streams));
    // The origin learns a put is done from the target's reply (sent once every chunk
    // is in the window, so after these threads sent it): the byte count is unused.
    let moved = Arc::new(AtomicUsize::new(0));
    let mut next_stream = 0;
    while let Ok(op) = rx.recv() {
        if let Some(why) = lock(&o.dead).clone() {
            op.pending.req.fail(&why);
            continue;
        }
        lock(&o.pending).push_back(op.pending);
        let (addr, len) = op.data.unwrap_or((0, 0));
        if op.header[1] == FLAG_STRIPED
            && let Some(pool) = pool.as_mut()
        {
            let sent = send_all(&o.sock, &op.header)
                .map_err(|e| format!("connection to peer rank {} lost while sending: {e}", o.peer))
                .and_then(|()| {
                    for c in split(len, o.stripe.nstreams, o.stripe.min_task, &mut next_stream) {
                        let buf = Buf {
                            ptr: (addr + c.offset) as *mut u8,
                            len: c.len,
                        };
                        pool.submit(c.stream, buf, moved.clone()).map_err(|e| e.to_string())?;
                    }
                    match pool.error() {
                        Some(e) => Err(format!("data stream to peer rank {} failed: {e}", o.peer)),
                        None => Ok(()),
                    }
                });
            if let Err(why) = sent {
                let _ = o.sock.shutdown(std::net::Shutdown::Both);
                o.kill(why);
            }
            continue;
        }
        let data: &[u8] = if len > 0 {
            // SAFETY: the poster guarantees the source window stays valid and unchanged
            // until the request completes (NCCL's contract for iput).
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
        } else {
            &[]
        };
        // Header and data in one gathered write (one segment for a small put, no
        // header-only segment before a large one), as the net path's control stream.
        if let Err(e) = send_all2(&o.sock, &op.header, data) {
            o.kill(format!("connection to peer rank {} lost while sending: {e}", o.peer));
        }
    }
}

/// Reader thread of an origin connection: completes operations as replies arrive.
fn origin_reader(o: Arc<Origin>, g: Arc<Shared>) {
    let mut hdr = [0u8; REPLY_HEADER];
    loop {
        if let Err(e) = recv_exact(&o.sock, &mut hdr) {
            let busy = !lock(&o.pending).is_empty();
            let why = format!("connection to peer rank {} lost: {e}", o.peer);
            if busy && !g.closing.load(Ordering::Relaxed) {
                g.note(&why);
            }
            o.kill(why);
            return;
        }
        let status = get_u32(&hdr, 0);
        let len = get_u64(&hdr, 8) as usize;
        let Some(p) = lock(&o.pending).pop_front() else {
            o.kill(format!(
                "peer rank {} sent a reply with no operation outstanding",
                o.peer
            ));
            return;
        };
        if status != 0 {
            let mut msg = vec![0u8; len.min(4096)];
            if recv_exact(&o.sock, &mut msg).is_err() {
                p.req.fail(&format!("peer rank {} failed an operation", o.peer));
                continue;
            }
            p.req
                .fail(&format!("peer rank {}: {}", o.peer, String::from_utf8_lossy(&msg)));
            continue;
        }
        if let Some((dst, want)) = p.get_dst {
            if len != want {
                let why = format!("peer rank {} answered a get of {want} bytes with {len}", o.peer);
                p.req.fail(&why);
                o.kill(why);
                return;
            }
            // SAFETY: the poster guarantees the local window stays valid until completion;
            // the range was checked against its registration.
            let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            if let Err(e) = recv_exact(&o.sock, buf) {
                let why = format!("connection to peer rank {} lost during a get: {e}", o.peer);
                p.req.fail(&why);
                g.note(&why);
                o.kill(why);
                return;
            }
        }
        p.req.finish();
    }
}

/// A striped put on its way into this rank's window: its chunks are queued with the
/// data streams' helper threads, which add each chunk's length to `landed`.
struct Landing {
    hdr: [u8; OP_HEADER],
    landed: Arc<AtomicUsize>,
    /// Where it lands: window, offset, length (for the overlap check).
    win: u32,
    off: usize,
    len: usize,
    /// Its chunks (offsets within the put) and their streams, as `split` cut them.
    chunks: Vec<crate::proto::Chunk>,
    /// A window error: the payload then lands in `_scratch` and is dropped.
    result: Result<(), String>,
    _scratch: Vec<u8>,
}

/// The target side of one peer's connection, run by its service thread.
struct Target {
    s: socket2::Socket,
    peer: usize,
    g: Arc<Shared>,
    stripe: Stripe,
    next_stream: usize,
    lw: crate::io::Lowat,
    /// Declared before `landing`: dropping it joins the helper threads, which may
    /// still be writing into a landing's scratch buffer.
    pool: Option<Pool>,
    /// Striped puts not yet completed, in arrival order.
    landing: VecDeque<Landing>,
}

/// Adds a put-with-signal's delta to its signal word (release: whoever reads the new
/// value with acquire ordering sees the put's data, written before this call).
fn apply_signal(g: &Shared, hdr: &[u8; OP_HEADER]) -> Result<(), String> {
    let sw = get_u32(hdr, 24);
    let so = get_u64(hdr, 32) as usize;
    let delta = get_u64(hdr, 40);
    let (base, wlen) = g.window(sw)?;
    let addr = base + so;
    if so.checked_add(8).is_none_or(|e| e > wlen) || !addr.is_multiple_of(8) {
        return Err(format!(
            "signal at offset {so} of window {sw} ({wlen} bytes) is outside it or not 8-byte aligned on rank {}",
            g.rank
        ));
    }
    // SAFETY: an aligned u64 inside a live window, only ever accessed atomically by
    // the RMA protocol (NCCL's signal word).
    let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
    a.fetch_add(delta, Ordering::Release);
    Ok(())
}

/// The window range `off .. off + len` of window `win` on this rank, checked.
fn window_range(g: &Shared, what: &str, win: u32, off: usize, len: usize) -> Result<usize, String> {
    let (base, wlen) = g.window(win)?;
    if off.checked_add(len).is_some_and(|e| e <= wlen) {
        Ok(base + off)
    } else {
        Err(format!(
            "{what} of {len} bytes at offset {off} exceeds window {win} ({wlen} bytes) on rank {}",
            g.rank
        ))
    }
}

/// Sends one reply: status 0 and `data`, or status 1 and the error text.
fn reply(s: &socket2::Socket, result: Result<&[u8], String>) -> std::io::Result<()> {
    let mut rh = [0u8; REPLY_HEADER];
    match result {
        Ok(data) => {
            put_u64(&mut rh, 8, data.len() as u64);
            send_all2(s, &rh, data)
        }
        Err(msg) => {
            put_u32(&mut rh, 0, 1);
            put_u64(&mut rh, 8, msg.len() as u64);
            send_all2(s, &rh, msg.as_bytes())
        }
    }
}

/// Why a target's service ends: the connection closed or failed (nothing to report
/// beyond what the origin sees), or a protocol error to note.
type Stop = Option<String>;

impl Target {
    /// Completes the striped puts at the front whose every chunk has landed, in
    /// arrival order: applies each one's signal, then replies.
    fn finish_landed(&mut self) -> Result<(), Stop> {
        let Some(pool) = &self.pool else { return Ok(()) };
        if let Some(e) = pool.error() {
            return Err(Some(format!("data stream from peer rank {} failed: {e}", self.peer)));
        }
        if self.landing.is_empty() {
            return Ok(());
        }
        // Reset the wake-up before reading the counters (a chunk that lands after
        // this makes the eventfd readable again).
        pool.drain();
        while let Some(l) = self.landing.front() {
            if l.landed.load(Ordering::Acquire) < l.len {
                break;
            }
            let l = self.landing.pop_front().expect("front exists");
            // Acquire above: every chunk's bytes are in the window before the
            // signal's release below, so the signal cannot overtake any of them.
            let mut result = l.result;
            if result.is_ok() && l.hdr[0] == OP_PUT_SIGNAL {
                result = apply_signal(&self.g, &l.hdr);
            }
            reply(&self.s, result.map(|()| &[][..])).map_err(|_| None)?;
        }
        Ok(())
    }

    /// Sleeps until a chunk lands or (`ctrl`) the control stream has bytes; returns
    /// whether the control stream is readable.
    fn sleep(&mut self, ctrl: bool) -> Result<bool, Stop> {
        if self.g.closing.load(Ordering::Relaxed) {
            return Err(None);
        }
        let mut fds = Vec::with_capacity(2);
        if ctrl {
            // Wake on the next header's first byte, whatever mark a payload left.
            self.lw.fit(&self.s, 1, false).map_err(|_| None)?;
            fds.push(libc::pollfd {
                fd: self.s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ev = self.pool.as_ref().and_then(Pool::done_fd);
        if let Some(fd) = ev {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // Without an eventfd, look again after 1 ms.
        let ms = if ev.is_some() { 1000 } else { 1 };
        // SAFETY: `fds` holds valid pollfds of descriptors open for this call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(None);
        }
        Ok(ctrl && fds[0].revents != 0)
    }

    /// Completes every striped put still landing (before an operation that must
    /// follow them: a put on the control stream, an overlapping put, a get, a flush).
    fn drain_landing(&mut self) -> Result<(), Stop> {
        loop {
            self.finish_landed()?;
            if self.landing.is_empty() {
                return Ok(());
            }
            self.sleep(false)?;
        }
    }

    /// Queues a striped put's chunks with the helper threads ([`origin_writer`]
    /// cuts it the same way).
    fn land_striped(&mut self, hdr: [u8; OP_HEADER], win: u32, off: usize, len: usize) -> Result<(), Stop> {
        if self.pool.is_none() {
            return Err(Some(format!(
                "peer rank {} sent a striped put to a target with no data streams",
                self.peer
            )));
        }
        let chunks = split(len, self.stripe.nstreams, self.stripe.min_task, &mut self.next_stream);
        // Puts to the same bytes land in posting order. A stream's chunks land in
        // the order they were queued (one helper thread per stream, one FIFO), so
        // only bytes that an earlier put still landing brings on another stream make
        // this one wait for the puts before it. Repeated puts of one size to the same
        // place (a buffer sent again and again) cut the same way onto the same
        // streams, so they stream on without a stop.
        let conflict = |l: &Landing| {
            l.win == win
                && l.off < off.saturating_add(len)
                && off < l.off.saturating_add(l.len)
                && l.chunks.iter().any(|lc| {
                    chunks.iter().any(|c| {
                        let (a, b) = (off + c.offset, off + c.offset + c.len);
                        let (la, lb) = (l.off + lc.offset, l.off + lc.offset + lc.len);
                        c.stream != lc.stream && la < b && a < lb
                    })
                })
        };
        if self.landing.iter().any(conflict) {
            self.drain_landing()?;
        }
        let result = window_range(&self.g, "put", win, off, len);
        let mut scratch = Vec::new();
        let base = match &result {
            Ok(dst) => *dst,
            Err(e) if len > 1 << 30 => return Err(Some(format!("{e}; not draining {len} bytes"))),
            Err(_) => {
                scratch = vec![0u8; len];
                scratch.as_mut_ptr() as usize
            }
        };
        let landed = Arc::new(AtomicUsize::new(0));
        let pool = self.pool.as_mut().expect("checked above");
        for c in &chunks {
            let buf = Buf {
                ptr: (base + c.offset) as *mut u8,
                len: c.len,
            };
            pool.submit(c.stream, buf, landed.clone())
                .map_err(|e| Some(e.to_string()))?;
        }
        self.landing.push_back(Landing {
            hdr,
            landed,
            win,
            off,
            len,
            chunks,
            result: result.map(|_| ()),
            _scratch: scratch,
        });
        Ok(())
    }

    /// Serves operations until the connection closes.
    fn serve(&mut self) -> Result<(), Stop> {
        let mut hdr = [0u8; OP_HEADER];
        let mut scratch = Vec::new();
        loop {
            self.finish_landed()?;
            if !self.landing.is_empty() && !self.sleep(true)? {
                continue;
            }
            // Read as the net path's data streams are (`io::recv_all`): non-blocking
            // reads while bytes are queued, else `poll` with `SO_RCVLOWAT` fitted to
            // what the operation still owes, so this thread wakes once per up to
            // 1 MiB instead of once per loopback segment.
            crate::io::recv_all(&self.s, &mut hdr, &mut self.lw).map_err(|_| None)?;
            let op = hdr[0];
            let win = get_u32(&hdr, 4);
            let off = get_u64(&hdr, 8) as usize;
            let len = get_u64(&hdr, 16) as usize;
            if matches!(op, OP_PUT | OP_PUT_SIGNAL) && hdr[1] == FLAG_STRIPED {
                self.land_striped(hdr, win, off, len)?;
                continue;
            }
            // Everything else follows the striped puts before it.
            self.drain_landing()?;
            let g = self.g.clone();
            let mut result: Result<(), String> = Ok(());
            let mut reply_data: &[u8] = &[];
            match op {
                OP_PUT | OP_PUT_SIGNAL => {
                    match window_range(&g, "put", win, off, len) {
                        Ok(dst) => {
                            // SAFETY: inside a live registered window; the origin's
                            // contract makes the range its to write while the put is in flight.
                            let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
                            crate::io::recv_all(&self.s, buf, &mut self.lw).map_err(|_| None)?;
                        }
                        Err(e) => {
                            scratch.resize(len.min(1 << 20), 0);
                            let mut left = len;
                            while left > 0 {
                                let n = left.min(scratch.len());
                                crate::io::recv_all(&self.s, &mut scratch[..n], &mut self.lw).map_err(|_| None)?;
                                left -= n;
                            }
                            result = Err(e);
                        }
                    }
                    if op == OP_PUT_SIGNAL && result.is_ok() {
                        result = apply_signal(&g, &hdr);
                    }
                }
                OP_GET => match window_range(&g, "get", win, off, len) {
                    // SAFETY: inside a live registered window (checked).
                    Ok(src) if len > 0 => reply_data = unsafe { std::slice::from_raw_parts(src as *const u8, len) },
                    Ok(_) => {}
                    Err(e) => result = Err(e),
                },
                OP_FLUSH => {}
                other => return Err(Some(format!("peer rank {} sent unknown RMA op {other}", self.peer))),
            }
            reply(&self.s, result.map(|()| reply_data)).map_err(|_| None)?;
        }
    }
}

/// Applies one peer's operations to this rank's windows: puts on the control
/// stream at once, striped puts once all their chunks landed, in arrival order
/// (a signal is applied only after every byte of its put, and of every put before
/// it, is in the window).
fn target_service(s: socket2::Socket, data: Vec<socket2::Socket>, stripe: Stripe, peer: usize, g: Arc<Shared>) {
    let addr = s
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut t = Target {
        s,
        peer,
        g,
        stripe,
        next_stream: 0,
        lw: crate::io::Lowat::default(),
        pool: (!data.is_empty()).then(|| Pool::new(Dir::Recv, addr, stripe.nthreads, data)),
        landing: VecDeque::new(),
    };
    if let Err(Some(why)) = t.serve() {
        t.g.note(&why);
    }
    // The group keeps a duplicate of the control socket: shut it down so the origin
    // sees the end (and fails what it has outstanding) rather than waiting.
    let _ = t.s.shutdown(std::net::Shutdown::Both);
}

fn header(op: u8, win: u32, off: usize, len: usize) -> [u8; OP_HEADER] {
    let mut h = [0u8; OP_HEADER];
    h[0] = op;
    put_u32(&mut h, 4, win);
    put_u64(&mut h, 8, off as u64);
    put_u64(&mut h, 16, len as u64);
    h
}

/// One peer's connections to this rank's listener: its control stream and its data
/// streams (index *k* = data stream *k*).
type Incoming = (Option<socket2::Socket>, Vec<Option<socket2::Socket>>);

/// Accepts the target connections of a group (from every peer its control stream and
/// the listener's data streams), checking each hello; by peer rank.
fn accept_targets(l: &RmaListener, rank: usize, nranks: usize, deadline: Instant) -> NetResult<Vec<Incoming>> {
    let ns = l.stripe.nstreams;
    let want = (nranks - 1) * (1 + ns);
    let mut got: Vec<Incoming> = (0..nranks).map(|_| (None, (0..ns).map(|_| None).collect())).collect();
    let mut n = 0;
    l.sock
        .set_nonblocking(true)
        .map_err(sys("listener set_nonblocking".into()))?;
    while n < want {
        match l.sock.accept() {
            Ok((st, from)) => {
                let _ = st.set_nonblocking(false);
                let s = socket2::Socket::from(st);
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut hello = [0u8; 24];
                if recv_exact(&s, &mut hello).is_err() {
                    continue; // a stray connection that said nothing
                }
                let (magic, token, peer, size, stream) = (
                    get_u32(&hello, 0),
                    get_u64(&hello, 4),
                    get_u32(&hello, 12) as usize,
                    get_u32(&hello, 16) as usize,
                    get_u32(&hello, HELLO_STREAM) as usize,
                );
                if magic != HELLO_MAGIC || token != l.token {
                    continue; // not for this listener
                }
                let slot = match (peer < nranks && peer != rank && size == nranks, stream) {
                    (true, 0) => got[peer].0.is_none().then_some(&mut got[peer].0),
                    (true, k) if k <= ns => got[peer].1[k - 1].is_none().then(|| &mut got[peer].1[k - 1]),
                    _ => None,
                };
                let Some(slot) = slot else {
                    return Err(NetError::Remote(format!(
                        "NET/FerrocclSocket RMA: rank {rank}: bad hello from {from}: rank {peer} of {size}, stream \
                         {stream} (expected a new stream 0..={ns} of a peer of a group of {nranks})"
                    )));
                };
                let _ = s.set_read_timeout(None);
                let _ = s.set_tcp_nodelay(true);
                *slot = Some(s);
                n += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<usize> = (0..nranks)
                        .filter(|p| *p != rank && (got[*p].0.is_none() || got[*p].1.iter().any(Option::is_none)))
                        .collect();
                    return Err(NetError::Timeout(format!(
                        "NET/FerrocclSocket RMA: rank {rank}: no connection from peer rank(s) {missing:?} within {:?}",
                        CONNECT_TIMEOUT
                    )));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(sys(format!("rank {rank}: accept"))(e)),
        }
    }
    Ok(got)
}

impl SocketRma {
    /// An RMA plugin over the interfaces `cfg` selects.
    pub fn with_config(cfg: Config) -> SocketRma {
        SocketRma {
            net: SocketNet::with_config(cfg),
        }
    }
}

impl Rma for SocketRma {
    const NAME: &'static CStr = c"FerrocclSocket";
    type Ctx = u64;
    type ListenComm = RmaListener;
    type CollComm = Arc<Group>;
    type RmaCtx = Arc<Group>;
    type Mr = Window;
    type Request = RmaRequest;

    fn new() -> NetResult<Self> {
        Ok(SocketRma::with_config(Config::from_env().clone()))
    }

    fn init(&self, comm_id: u64) -> NetResult<u64> {
        Ok(comm_id)
    }

    /// The net plugin's interfaces when `NCCL_SOCKET_RMA_ENABLE=1`, else none (see
    /// [`crate::config::RMA_ENABLE`]: a host then takes the next RMA library, as
    /// NCCL 2.30.7's `src/plugin/rma.cc` skips one that reports no device).
    fn devices(&self) -> NetResult<usize> {
        let on = std::env::var(crate::config::RMA_ENABLE.name)
            .ok()
            .and_then(|v| crate::config::parse_int(&v))
            .unwrap_or(crate::config::RMA_ENABLE.default);
        Ok(if on == 1 { self.net.interfaces().len() } else { 0 })
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        self.net.properties(dev)
    }

    fn listen(&self, _ctx: &u64, dev: usize, handle: &mut Handle) -> NetResult<RmaListener> {
        let d =
            self.net.interfaces().get(dev).ok_or_else(|| {
                NetError::InvalidArgument(format!("NET/FerrocclSocket RMA: device {dev} out of range"))
            })?;
        // NCCL's backlog (`io::listen_on`): every peer connects 1 + nstreams streams
        // before anyone accepts.
        let (sock, bound) = crate::io::listen_on(d.ip, d.scope_id)?;
        let sock = TcpListener::from(sock);
        let token = getrandom::u64().unwrap_or_else(|_| std::process::id() as u64 ^ (bound.port() as u64) << 32);
        let stripe = Stripe::of(self.net.config());
        encode_handle(handle, bound, token, stripe);
        Ok(RmaListener { sock, token, stripe })
    }

    fn connect(&self, _ctx: &u64, handles: &[Handle], rank: usize, listen: &mut RmaListener) -> NetResult<Arc<Group>> {
        let nranks = handles.len();
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let cfg = self.net.config().clone();
        // Per peer: the control stream, the target's data streams, its striping.
        type Outgoing = (socket2::Socket, Vec<socket2::Socket>, Stripe);
        let mut outs: Vec<Option<Outgoing>> = (0..nranks).map(|_| None).collect();
        // Outgoing first: the kernel's backlog completes them without the peer's accept.
        for (peer, h) in handles.iter().enumerate() {
            if peer == rank {
                continue;
            }
            let (addr, token, stripe) = decode_handle(h, peer)?;
            let mut streams = Vec::with_capacity(1 + stripe.nstreams);
            for stream in 0..=stripe.nstreams {
                let st = loop {
                    match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                        Ok(s) => break s,
                        Err(e) if Instant::now() < deadline => {
                            let _ = e;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(e) => {
                            return Err(sys(format!("rank {rank}: connect to peer rank {peer} at {addr}"))(e));
                        }
                    }
                };
                let s = socket2::Socket::from(st);
                // The net path's socket options (`NCCL_SOCKET_SNDBUF`/`RCVBUF`, keepalive).
                let _ = crate::io::tune(&s, &cfg);
                let mut hello = [0u8; 24];
                put_u32(&mut hello, 0, HELLO_MAGIC);
                put_u64(&mut hello, 4, token);
                put_u32(&mut hello, 12, rank as u32);
                put_u32(&mut hello, 16, nranks as u32);
                put_u32(&mut hello, HELLO_STREAM, stream as u32);
                send_all(&s, &hello).map_err(sys(format!("rank {rank}: hello to peer rank {peer}")))?;
                streams.push(s);
            }
            let ctrl = streams.remove(0);
            outs[peer] = Some((ctrl, streams, stripe));
        }
        let ins = accept_targets(listen, rank, nranks, deadline)?;
        let shared = Arc::new(Shared {
            rank,
            windows: Mutex::new(Vec::new()),
            win_cv: Condvar::new(),
            closing: AtomicBool::new(false),
            error: Mutex::new(None),
            wake: Wake::new(),
        });
        // Built in place: on an error below, dropping it shuts down what was started.
        let mut group = Group {
            nranks,
            shared: shared.clone(),
            origins: Vec::with_capacity(nranks),
            targets: Vec::new(),
            threads: Mutex::new(Vec::new()),
        };
        for (peer, (ctrl, data)) in ins.into_iter().enumerate() {
            let Some(s) = ctrl else { continue };
            for d in data.iter().flatten() {
                let _ = crate::io::tune(d, &cfg);
            }
            let data: Vec<socket2::Socket> = data.into_iter().flatten().collect();
            group.targets.push(s.try_clone().map_err(sys("dup".into()))?);
            let (sh, stripe) = (shared.clone(), listen.stripe);
            let t = std::thread::Builder::new()
                .name(format!("rma-target-{peer}"))
                .spawn(move || target_service(s, data, stripe, peer, sh))
                .map_err(sys("spawn".into()))?;
            lock(&group.threads).push(t);
        }
        for (peer, s) in outs.into_iter().enumerate() {
            let Some((sock, data, stripe)) = s else {
                group.origins.push(None);
                continue;
            };
            let (tx, rx) = channel();
            let o = Arc::new(Origin {
                peer,
                tx: Mutex::new(Some(tx)),
                pending: Mutex::new(VecDeque::new()),
                dead: Mutex::new(None),
                sock,
                stripe,
                inline: cfg.inline,
            });
            group.origins.push(Some(o.clone()));
            let (ow, or, sh) = (o.clone(), o, shared.clone());
            let w = std::thread::Builder::new()
                .name(format!("rma-send-{peer}"))
                .spawn(move || origin_writer(ow, rx, data))
                .map_err(sys("spawn".into()))?;
            lock(&group.threads).push(w);
            let r = std::thread::Builder::new()
                .name(format!("rma-recv-{peer}"))
                .spawn(move || origin_reader(or, sh))
                .map_err(sys("spawn".into()))?;
            lock(&group.threads).push(r);
        }
        Ok(Arc::new(group))
    }

    fn close_coll(&self, coll: Arc<Group>) -> NetResult<()> {
        coll.shutdown();
        // The calling thread's idle record may name the group's eventfd, whose
        // number can be reused (as a net comm's close does).
        crate::wait::forget();
        Ok(())
    }

    fn create_context(&self, coll: &Arc<Group>, _config: &RmaConfig) -> NetResult<Arc<Group>> {
        Ok(coll.clone())
    }

    fn reg_mr_sym(&self, coll: &Arc<Group>, buf: Buf, ty: PtrType, _mr_flags: u64) -> NetResult<Window> {
        if ty != PtrType::Host {
            return Err(NetError::InvalidArgument(format!(
                "NET/FerrocclSocket RMA: only host memory can be registered (got {ty:?})"
            )));
        }
        let mut w = lock(&coll.shared.windows);
        let id = u32::try_from(w.len()).map_err(|_| NetError::Internal("too many windows".into()))?;
        w.push(WinSlot::Live {
            base: buf.ptr as usize,
            len: buf.len,
        });
        drop(w);
        coll.shared.win_cv.notify_all();
        Ok(Window {
            id,
            base: buf.ptr as usize,
        })
    }

    fn dereg_mr_sym(&self, coll: &Arc<Group>, mr: Window) -> NetResult<()> {
        let mut w = lock(&coll.shared.windows);
        match w.get_mut(mr.id as usize) {
            Some(s @ WinSlot::Live { .. }) => {
                *s = WinSlot::Gone;
                Ok(())
            }
            _ => Err(NetError::Internal(format!(
                "window {} is not registered on this group",
                mr.id
            ))),
        }
    }

    fn iput(&self, ctx: &Arc<Group>, x: Xfer<'_, Window>, signal: Option<Signal<'_, Window>>) -> NetResult<RmaRequest> {
        let mut h = header(
            if signal.is_some() { OP_PUT_SIGNAL } else { OP_PUT },
            x.remote.id,
            x.remote_off,
            x.size,
        );
        if let Some(s) = &signal {
            put_u32(&mut h, 24, s.window.id);
            put_u64(&mut h, 32, s.off as u64);
            put_u64(&mut h, 40, s.op.delta(s.value));
        }
        ctx.post(x.rank, h, Some((x.local.base + x.local_off, x.size)), None)
    }

    fn iget(&self, ctx: &Arc<Group>, x: Xfer<'_, Window>) -> NetResult<RmaRequest> {
        let h = header(OP_GET, x.remote.id, x.remote_off, x.size);
        ctx.post(x.rank, h, None, Some((x.local.base + x.local_off, x.size)))
    }

    fn iflush(&self, ctx: &Arc<Group>, _context: usize, mr: &Window, rank: usize) -> NetResult<RmaRequest> {
        ctx.post(rank, header(OP_FLUSH, mr.id, 0, 0), None, None)
    }

    /// Done, failed, or still pending; a caller that keeps testing pending
    /// operations and nothing else (the net path's idle rule, [`crate::wait`]) sleeps
    /// here until an operation of the group completes, at most
    /// [`crate::wait::TEST_WAIT`], instead of spinning.
    fn test(&self, _coll: &Arc<Group>, req: &mut RmaRequest) -> NetResult<bool> {
        let waits = req.waits();
        if req.state.load(Ordering::SeqCst) == 0
            && let Some(w) = &req.wake
            && let Plan::PollSet(targets) = crate::wait::plan(waits)
        {
            w.sleep(req, &targets);
        }
        let state = req.state.load(Ordering::Acquire);
        crate::wait::record(if state == 0 {
            Outcome::Idle(waits)
        } else {
            Outcome::Progress(waits)
        });
        match state {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(NetError::Remote(format!(
                "NET/FerrocclSocket RMA: {}",
                lock(&req.err).clone().unwrap_or_default()
            ))),
        }
    }

    fn query_last_error(&self, ctx: &Arc<Group>) -> NetResult<bool> {
        Ok(lock(&ctx.shared.error).is_some())
    }
}
