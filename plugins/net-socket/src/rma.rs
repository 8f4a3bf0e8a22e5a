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
//! * **windows** are numbered in registration order on each group (`regMrSym` is
//!   symmetric: every rank registers its windows in the same order); an operation names
//!   the target window by that number. A target waits (bounded by [`WINDOW_WAIT`]) for a
//!   window the peer already registered but it has not yet.
//! * **put-with-signal**: the target writes the data into the window, then adds to the
//!   64-bit signal word with a release atomic, so whoever reads the signal with acquire
//!   semantics sees the data (strong signal, whatever `isStrongSignal` says).
//! * **completion**: a put completes when the target acknowledged writing it; a get when
//!   its data is in the local window; a flush when every earlier operation to that
//!   peer completed (replies come in order).
//! * **failures**: a lost connection fails every pending and later operation to that
//!   peer with `ncclRemoteError` naming the peer, and `queryLastError` reports it.

use std::collections::VecDeque;
use std::ffi::CStr;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::rma::{Rma, RmaConfig, Signal, Xfer};
use ferroccl_plugin_api::sdk::{Buf, Handle, Net, NetError, NetResult, Properties, PtrType};

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
}

impl ReqState {
    fn finish(&self) {
        self.state.store(1, Ordering::Release);
    }
    fn fail(&self, why: &str) {
        *lock(&self.err) = Some(why.to_owned());
        self.state.store(2, Ordering::Release);
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
        header: [u8; OP_HEADER],
        data: Option<(usize, usize)>,
        get_dst: Option<(usize, usize)>,
    ) -> NetResult<RmaRequest> {
        let o = self.origin(rank)?;
        if let Some(why) = lock(&o.dead).clone() {
            return Err(NetError::Remote(format!("NET/FerrocclSocket RMA: {why}")));
        }
        let req = Arc::new(ReqState::default());
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

/// `write_all` without SIGPIPE.
fn send_all(s: &socket2::Socket, mut b: &[u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        match s.send_with_flags(b, libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `send_all` of `a` then `b`, gathered (`writev`).
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

/// Encodes the listen address and token into a 128-byte handle.
fn encode_handle(h: &mut Handle, addr: SocketAddr, token: u64) {
    h.fill(0);
    put_u32(h, 0, HANDLE_MAGIC);
    put_u64(h, 4, token);
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

fn decode_handle(h: &Handle, rank: usize) -> NetResult<(SocketAddr, u64)> {
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
    Ok((addr, get_u64(h, 4)))
}

fn sys(what: String) -> impl FnOnce(std::io::Error) -> NetError {
    move |e| NetError::System(format!("NET/FerrocclSocket RMA: {what}: {e}"))
}

/// Writer thread of an origin connection: sends each posted operation in order.
fn origin_writer(o: Arc<Origin>, rx: Receiver<Op>) {
    while let Ok(op) = rx.recv() {
        if let Some(why) = lock(&o.dead).clone() {
            op.pending.req.fail(&why);
            continue;
        }
        lock(&o.pending).push_back(op.pending);
        let data: &[u8] = match op.data {
            // SAFETY: the poster guarantees the source window stays valid and unchanged
            // until the request completes (NCCL's contract for iput).
            Some((addr, len)) if len > 0 => unsafe { std::slice::from_raw_parts(addr as *const u8, len) },
            _ => &[],
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

/// Applies one peer's operations to this rank's windows.
fn target_service(s: socket2::Socket, peer: usize, g: Arc<Shared>) {
    let mut hdr = [0u8; OP_HEADER];
    let mut scratch = Vec::new();
    // Read as the net path's data streams are (`io::recv_all`): non-blocking reads
    // while bytes are queued, else `poll` with `SO_RCVLOWAT` fitted to what the put
    // still owes, so this thread wakes once per up to 1 MiB instead of once per
    // loopback segment (a blocking `read` with the default mark of 1 byte did).
    let mut lw = crate::io::Lowat::default();
    loop {
        if crate::io::recv_all(&s, &mut hdr, &mut lw).is_err() {
            return; // the peer closed its group (or ours is closing)
        }
        let op = hdr[0];
        let win = get_u32(&hdr, 4);
        let off = get_u64(&hdr, 8) as usize;
        let len = get_u64(&hdr, 16) as usize;
        let mut result: Result<(), String> = Ok(());
        let mut reply_data: Option<(usize, usize)> = None;
        match op {
            OP_PUT | OP_PUT_SIGNAL => {
                match g.window(win).and_then(|(base, wlen)| {
                    if off.checked_add(len).is_some_and(|e| e <= wlen) {
                        Ok(base + off)
                    } else {
                        Err(format!(
                            "put of {len} bytes at offset {off} exceeds window {win} ({wlen} bytes) on rank {}",
                            g.rank
                        ))
                    }
                }) {
                    Ok(dst) => {
                        // SAFETY: inside a live registered window; the origin's contract
                        // makes the range its to write while the put is in flight.
                        let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
                        if crate::io::recv_all(&s, buf, &mut lw).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        scratch.resize(len.min(1 << 20), 0);
                        let mut left = len;
                        while left > 0 {
                            let n = left.min(scratch.len());
                            if crate::io::recv_all(&s, &mut scratch[..n], &mut lw).is_err() {
                                return;
                            }
                            left -= n;
                        }
                        result = Err(e);
                    }
                }
                if op == OP_PUT_SIGNAL && result.is_ok() {
                    let sw = get_u32(&hdr, 24);
                    let so = get_u64(&hdr, 32) as usize;
                    let delta = get_u64(&hdr, 40);
                    result = g.window(sw).and_then(|(base, wlen)| {
                        let addr = base + so;
                        if so.checked_add(8).is_none_or(|e| e > wlen) || !addr.is_multiple_of(8) {
                            return Err(format!(
                                "signal at offset {so} of window {sw} ({wlen} bytes) is outside it or not 8-byte aligned on rank {}",
                                g.rank
                            ));
                        }
                        // SAFETY: an aligned u64 inside a live window, only ever accessed
                        // atomically by the RMA protocol (NCCL's signal word).
                        let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
                        // Release: the data written above is visible to whoever
                        // observes the new signal value with acquire ordering.
                        a.fetch_add(delta, Ordering::Release);
                        Ok(())
                    });
                }
            }
            OP_GET => {
                result = g.window(win).and_then(|(base, wlen)| {
                    if off.checked_add(len).is_some_and(|e| e <= wlen) {
                        reply_data = Some((base + off, len));
                        Ok(())
                    } else {
                        Err(format!(
                            "get of {len} bytes at offset {off} exceeds window {win} ({wlen} bytes) on rank {}",
                            g.rank
                        ))
                    }
                });
            }
            OP_FLUSH => {}
            other => {
                g.note(&format!("peer rank {peer} sent unknown RMA op {other}"));
                return;
            }
        }
        let mut rh = [0u8; REPLY_HEADER];
        let r = match result {
            Ok(()) => {
                put_u64(&mut rh, 8, reply_data.map_or(0, |d| d.1) as u64);
                let data: &[u8] = match reply_data {
                    // SAFETY: inside a live registered window (checked above).
                    Some((a, n)) if n > 0 => unsafe { std::slice::from_raw_parts(a as *const u8, n) },
                    _ => &[],
                };
                send_all2(&s, &rh, data)
            }
            Err(msg) => {
                put_u32(&mut rh, 0, 1);
                put_u64(&mut rh, 8, msg.len() as u64);
                send_all2(&s, &rh, msg.as_bytes())
            }
        };
        if r.is_err() {
            return;
        }
    }
}

fn header(op: u8, win: u32, off: usize, len: usize) -> [u8; OP_HEADER] {
    let mut h = [0u8; OP_HEADER];
    h[0] = op;
    put_u32(&mut h, 4, win);
    put_u64(&mut h, 8, off as u64);
    put_u64(&mut h, 16, len as u64);
    h
}

/// Accepts the `want` target connections of a group, checking each hello.
fn accept_targets(
    l: &RmaListener,
    rank: usize,
    nranks: usize,
    deadline: Instant,
) -> NetResult<Vec<(usize, socket2::Socket)>> {
    l.sock
        .set_nonblocking(true)
        .map_err(sys("listener set_nonblocking".into()))?;
    let mut got: Vec<(usize, socket2::Socket)> = Vec::new();
    while got.len() < nranks - 1 {
        match l.sock.accept() {
            Ok((st, from)) => {
                let _ = st.set_nonblocking(false);
                let s = socket2::Socket::from(st);
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut hello = [0u8; 24];
                if recv_exact(&s, &mut hello).is_err() {
                    continue; // a stray connection that said nothing
                }
                let (magic, token, peer, n) = (
                    get_u32(&hello, 0),
                    get_u64(&hello, 4),
                    get_u32(&hello, 12) as usize,
                    get_u32(&hello, 16) as usize,
                );
                if magic != HELLO_MAGIC || token != l.token {
                    continue; // not for this listener
                }
                if n != nranks || peer >= nranks || peer == rank || got.iter().any(|(p, _)| *p == peer) {
                    return Err(NetError::Remote(format!(
                        "NET/FerrocclSocket RMA: rank {rank}: bad hello from {from}: rank {peer} of {n} \
                         (expected a new peer of a group of {nranks})"
                    )));
                }
                let _ = s.set_read_timeout(None);
                let _ = s.set_tcp_nodelay(true);
                got.push((peer, s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<usize> = (0..nranks)
                        .filter(|p| *p != rank && !got.iter().any(|(g, _)| g == p))
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
        let addr = match d.ip {
            IpAddr::V4(ip) => SocketAddr::V4(SocketAddrV4::new(ip, 0)),
            IpAddr::V6(ip) => SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, d.scope_id)),
        };
        let sock = TcpListener::bind(addr).map_err(sys(format!("bind {addr}")))?;
        let bound = sock.local_addr().map_err(sys("getsockname".into()))?;
        let token = getrandom::u64().unwrap_or_else(|_| std::process::id() as u64 ^ (bound.port() as u64) << 32);
        encode_handle(handle, bound, token);
        Ok(RmaListener { sock, token })
    }

    fn connect(&self, _ctx: &u64, handles: &[Handle], rank: usize, listen: &mut RmaListener) -> NetResult<Arc<Group>> {
        let nranks = handles.len();
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut outs: Vec<Option<socket2::Socket>> = (0..nranks).map(|_| None).collect();
        // Outgoing first: the kernel's backlog completes them without the peer's accept.
        for (peer, h) in handles.iter().enumerate() {
            if peer == rank {
                continue;
            }
            let (addr, token) = decode_handle(h, peer)?;
            let st = loop {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return Err(sys(format!("rank {rank}: connect to peer rank {peer} at {addr}"))(e)),
                }
            };
            let _ = st.set_nodelay(true);
            let s = socket2::Socket::from(st);
            let mut hello = [0u8; 24];
            put_u32(&mut hello, 0, HELLO_MAGIC);
            put_u64(&mut hello, 4, token);
            put_u32(&mut hello, 12, rank as u32);
            put_u32(&mut hello, 16, nranks as u32);
            send_all(&s, &hello).map_err(sys(format!("rank {rank}: hello to peer rank {peer}")))?;
            outs[peer] = Some(s);
        }
        let ins = accept_targets(listen, rank, nranks, deadline)?;
        let shared = Arc::new(Shared {
            rank,
            windows: Mutex::new(Vec::new()),
            win_cv: Condvar::new(),
            closing: AtomicBool::new(false),
            error: Mutex::new(None),
        });
        // Built in place: on an error below, dropping it shuts down what was started.
        let mut group = Group {
            nranks,
            shared: shared.clone(),
            origins: Vec::with_capacity(nranks),
            targets: Vec::new(),
            threads: Mutex::new(Vec::new()),
        };
        for (peer, s) in ins {
            group.targets.push(s.try_clone().map_err(sys("dup".into()))?);
            let sh = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("rma-target-{peer}"))
                .spawn(move || target_service(s, peer, sh))
                .map_err(sys("spawn".into()))?;
            lock(&group.threads).push(t);
        }
        for (peer, s) in outs.into_iter().enumerate() {
            let Some(sock) = s else {
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
            });
            group.origins.push(Some(o.clone()));
            let (ow, or, sh) = (o.clone(), o, shared.clone());
            let w = std::thread::Builder::new()
                .name(format!("rma-send-{peer}"))
                .spawn(move || origin_writer(ow, rx))
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

    fn test(&self, _coll: &Arc<Group>, req: &mut RmaRequest) -> NetResult<bool> {
        match req.state.load(Ordering::Acquire) {
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
