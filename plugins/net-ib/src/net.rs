//! [`IbNet`]: the `sdk::Net` implementation over verbs, driving [`crate::proto`].
//!
//! One [`IbDev`] per active, selected port. Every connection has one CQ, the
//! data QPs (`NCCL_IB_QPS_PER_CONNECTION`), the TCP side-channel socket (kept
//! open: its EOF tells a dead peer quickly) and the registered protocol buffers
//! (sender: CTS FIFO + size-record staging; receiver: CTS staging + completion
//! records). Requests hold an `Arc` of their comm's state, because `test` gets
//! only the request.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::log::{NCCL_INIT, NCCL_NET};
use ferroccl_plugin_api::sdk::net_profiler::{NetEvent, StepHandle, step_handle};
use ferroccl_plugin_api::sdk::{
    Buf, CommConfig, CommMut, Handle, Net, NetError, NetResult, Properties, PtrType, RecvBuf, TestStatus,
};
use ferroccl_plugin_api::{net_info, net_warn};

use crate::params::{self, GidCandidate, IbParams};
use crate::proto::{self, FIFO_SLOTS, FifoEntry, Handshake, MAX_RECVS, Role, SendMatch};
use crate::verbs::{self, Context, Cq, Mr, Pd, Qp, QpSettings, RemoteQp, Verbs, sys};

/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in verbs.h that rdma-sys does not bind).
const LINK_LAYER_ETHERNET: u32 = 2;
const WR_KIND_SHIFT: u32 = 56;
const WR_DATA: u64 = 1;
const WR_CTS: u64 = 2;
const WR_RECV: u64 = 3;
/// Send queue depth per QP.
const SQ_DEPTH: usize = 1024;
/// Receive queue depth per QP (≥ `MAX_REQUESTS`).
const RQ_DEPTH: usize = 64;
/// Time a request may stay pending after the side channel reported EOF before
/// the comm is declared failed (lets completions already in flight land).
const EOF_GRACE: Duration = Duration::from_millis(1000);
/// Side-channel connections a listenComm keeps half-accepted at once.
const MAX_PENDING_ACCEPTS: usize = 64;
/// Bound on the blocking TCP connect of the side channel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Side-channel keepalive: first probe after this many idle seconds…
const KEEPALIVE_IDLE_S: libc::c_int = 10;
/// …then one probe every this many seconds…
const KEEPALIVE_INTVL_S: libc::c_int = 5;
/// …and the peer is declared gone after this many unanswered probes (≈ 25 s).
const KEEPALIVE_CNT: libc::c_int = 3;
/// `TCP_USER_TIMEOUT`: unacknowledged side-channel data fails the socket after this long.
const USER_TIMEOUT_MS: libc::c_int = 30_000;

/// Turns on TCP keepalive and `TCP_USER_TIMEOUT` on a side-channel socket so a
/// vanished host (power loss, cable pulled: no FIN, no RST) makes the socket
/// fail within ≈ 25–30 s; [`Conn::check_peer`] then reports the peer as gone.
/// Failures are logged, not fatal (the verbs retry timeout still applies).
pub(crate) fn set_keepalive(sock: &TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let opts: [(libc::c_int, libc::c_int, libc::c_int, &str); 5] = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1, "SO_KEEPALIVE"),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, KEEPALIVE_IDLE_S, "TCP_KEEPIDLE"),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            KEEPALIVE_INTVL_S,
            "TCP_KEEPINTVL",
        ),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_CNT, "TCP_KEEPCNT"),
        (
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            USER_TIMEOUT_MS,
            "TCP_USER_TIMEOUT",
        ),
    ];
    for (level, name, val, what) in opts {
        // SAFETY: `fd` is an open socket owned by `sock`; the option value is a c_int of the given size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&val as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            net_warn!(
                "NET/FerrocclIB: setsockopt({what}={val}) on the side channel failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn sys_err(e: impl std::fmt::Display) -> NetError {
    NetError::System(e.to_string())
}

/// One active port of an RDMA device, with the shared context and PD.
pub struct IbDev {
    /// Index among the plugin's devices (NCCL's `dev`; `qp.device` of the
    /// profiler's `ncclProfilerNetIbDescr_v1_t`).
    pub index: usize,
    /// Device name.
    pub name: String,
    /// Port number.
    pub port: u8,
    /// `IBV_LINK_LAYER_INFINIBAND` (1) or `IBV_LINK_LAYER_ETHERNET` (2).
    pub link_layer: u8,
    /// GID index in use.
    pub gid_index: u8,
    /// The GID at that index.
    pub gid: [u8; 16],
    /// Port LID.
    pub lid: u16,
    /// Active MTU code.
    pub mtu: u32,
    /// Largest message per work request.
    pub max_msg: usize,
    /// Speed in Mbps.
    pub speed: i32,
    /// Node GUID.
    pub guid: u64,
    /// sysfs PCI path.
    pub pci_path: Option<String>,
    /// `max_qp` of the device.
    pub max_qp: i32,
    mr_cache: Mutex<HashMap<(usize, usize), Weak<MrEntry>>>,
    pub(crate) pd: Arc<Pd>,
    ctx: Arc<DevCtx>,
}

impl std::fmt::Debug for IbDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IbDev({}:{})", self.name, self.port)
    }
}

/// An open context plus its async-event thread (stopped and joined on drop).
struct DevCtx {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    ctx: Arc<Context>,
}

impl Drop for DevCtx {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn spawn_async_thread(name: String, ctx: Arc<Context>, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
    let fd = ctx.async_fd();
    // SAFETY: fcntl on an fd owned by the open context.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    std::thread::Builder::new()
        .name(format!("ib-async-{name}"))
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                let n = unsafe { libc::poll(&mut p, 1, 100) };
                if n <= 0 {
                    continue;
                }
                while let Some((ev, port, code)) = ctx.read_async_event() {
                    net_warn!("NET/FerrocclIB: {name}: async event {ev} ({code}) on port {port}");
                }
            }
        })
        .ok()
}

/// A cached registration (`mhandle` target), deregistered when the last
/// [`IbMr`] referring to it is released.
pub struct MrEntry {
    mr: Mr,
    _dev: Arc<IbDev>,
}

/// The plugin's `mhandle`.
pub struct IbMr {
    entry: Arc<MrEntry>,
}

impl IbMr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.entry.mr.lkey()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.entry.mr.rkey()
    }
}

impl IbDev {
    /// Registers `[addr, addr+len)` through the cache: the page-aligned range is
    /// the key; a live entry for it is reused (an `Arc` clone, no verbs call).
    fn reg(self: &Arc<Self>, addr: *mut u8, len: usize) -> NetResult<IbMr> {
        let page = 4096usize;
        let start = (addr as usize) & !(page - 1);
        let end = (addr as usize + len.max(1)).div_ceil(page) * page;
        let mut cache = self.mr_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = cache.get(&(start, end)).and_then(Weak::upgrade) {
            return Ok(IbMr { entry: e });
        }
        cache.retain(|_, w| w.strong_count() > 0);
        let mr = self
            .pd
            .reg_mr(start as *mut u8, end - start)
            .map_err(NetError::System)?;
        let entry = Arc::new(MrEntry { mr, _dev: self.clone() });
        cache.insert((start, end), Arc::downgrade(&entry));
        Ok(IbMr { entry })
    }

    pub(crate) fn settings(&self, p: &IbParams, tc: u8, sl: u8, peer_mtu: u8) -> QpSettings {
        QpSettings {
            port: self.port,
            gid_index: self.gid_index,
            mtu: self.mtu.min(u32::from(peer_mtu)),
            sl,
            tc,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            pkey_index: p.pkey,
            remote_atomic: false,
        }
    }

    /// The device's open verbs context.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx.ctx
    }

    pub(crate) fn is_roce(&self) -> bool {
        u32::from(self.link_layer) == LINK_LAYER_ETHERNET
    }
}

/// The plugin object (`NAME` = `FerrocclIB`).
#[derive(Debug)]
pub struct IbNet {
    params: IbParams,
    devs: Vec<Arc<IbDev>>,
}

impl IbNet {
    /// Parameters in force.
    pub fn params(&self) -> &IbParams {
        &self.params
    }

    /// The ports in use.
    pub fn devs(&self) -> &[Arc<IbDev>] {
        &self.devs
    }

    /// Advances one pending accept; `true` when its handshake is complete.
    fn accept_step(&self, dev: &Arc<IbDev>, a: &mut Accepting) -> NetResult<bool> {
        for ev in pump(&mut a.sock, &mut a.hs, a.peer)? {
            match ev {
                proto::Event::PeerMeta(m) => {
                    let mut res =
                        RecvInner::new(dev.clone(), m.qpns.len(), a.sock.try_clone().map_err(sys_err)?, a.peer)?;
                    // The connecting side decides the class of the connection: the
                    // receiver takes the sender's traffic class and service level for
                    // its QPs and echoes them back (NCCL 2.30.7
                    // src/transport/net_ib/connect.cc, ncclIbReceiverQpsCreateToRts:
                    // rtrAttr->tc = remMeta->tc, rtrAttr->sl = remMeta->sl;
                    // ncclIbAcceptImpl: meta.tc = remMeta.tc, meta.sl = remMeta.sl).
                    let (tc, sl) = (m.tc, m.sl);
                    connect_qps(&res.conn, &self.params, &res.psns, &m, tc, sl)?;
                    res.remote_fifo = (m.buf_addr, m.buf_rkey);
                    let meta = own_meta(
                        dev,
                        &res.conn.qps,
                        &res.psns,
                        (res.records.addr(0), res.records.mr.rkey()),
                        tc,
                        sl,
                    );
                    a.hs.queue_meta(&meta);
                    a.res = Some(res);
                    pump(&mut a.sock, &mut a.hs, a.peer)?;
                }
                proto::Event::Ready => {}
            }
        }
        Ok(a.hs.is_done())
    }

    fn discover(params: &IbParams) -> Result<Vec<Arc<IbDev>>, String> {
        let v = Verbs::get()?;
        let infos = verbs::list_devices(v)?;
        if infos.is_empty() {
            return Err(
                "ibv_get_device_list found no RDMA devices (no HCA, or the rdma_rxe/mlx5_ib module is not loaded)"
                    .into(),
            );
        }
        let mut out = Vec::new();
        let mut skipped = Vec::new();
        for info in &infos {
            let ctx = match Context::open(v, info) {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    skipped.push(format!("{}: {e}", info.name));
                    continue;
                }
            };
            let dattr = ctx.query_device()?;
            let pd = Arc::new(Pd::new(&ctx)?);
            let stop = Arc::new(AtomicBool::new(false));
            let thread = spawn_async_thread(info.name.clone(), ctx.clone(), stop.clone());
            let devctx = Arc::new(DevCtx {
                stop,
                thread: Mutex::new(thread),
                ctx: ctx.clone(),
            });
            for port in 1..=dattr.phys_port_cnt {
                let pa = ctx.query_port(port)?;
                if pa.state != sys::ibv_port_state::IBV_PORT_ACTIVE {
                    skipped.push(format!("{}:{port} not active (state {})", info.name, pa.state));
                    continue;
                }
                if !params.hca.selects(&info.name, u32::from(port)) {
                    skipped.push(format!("{}:{port} not selected by NCCL_IB_HCA", info.name));
                    continue;
                }
                let roce = u32::from(pa.link_layer) == LINK_LAYER_ETHERNET;
                let (gid_index, why) = if roce {
                    let cands: Vec<GidCandidate> = (0..pa.gid_tbl_len.max(0) as u32)
                        .filter_map(|i| {
                            let gid = ctx.query_gid(port, i as i32).ok()?;
                            Some(GidCandidate {
                                index: i,
                                gid,
                                roce_version: verbs::sysfs_gid_roce_version(&info.name, port, i),
                            })
                        })
                        .collect();
                    match params::select_gid(&cands, params) {
                        Ok(x) => x,
                        Err(e) => {
                            skipped.push(format!("{}:{port}: {e}", info.name));
                            continue;
                        }
                    }
                } else {
                    (
                        params.gid_index.max(0) as u32,
                        "InfiniBand: LID routing, GID for GRH only".to_string(),
                    )
                };
                let gid = ctx.query_gid(port, gid_index as i32).unwrap_or([0; 16]);
                let dev = IbDev {
                    index: out.len(),
                    name: info.name.clone(),
                    port,
                    link_layer: pa.link_layer,
                    gid_index: gid_index as u8,
                    gid,
                    lid: pa.lid,
                    mtu: pa.active_mtu,
                    max_msg: (pa.max_msg_sz as usize).clamp(4096, 1 << 30),
                    speed: params::port_speed_mbps(pa.active_width, pa.active_speed),
                    guid: info.guid,
                    pci_path: verbs::sysfs_pci_path(&info.name),
                    max_qp: dattr.max_qp,
                    mr_cache: Mutex::new(HashMap::new()),
                    pd: pd.clone(),
                    ctx: devctx.clone(),
                };
                net_info!(
                    NCCL_INIT | NCCL_NET,
                    "NET/FerrocclIB: {}:{port} {} GID index {gid_index} {} ({why}); MTU {}, {} Mbps",
                    info.name,
                    if roce { "RoCE" } else { "IB" },
                    std::net::Ipv6Addr::from(gid),
                    verbs::mtu_bytes(dev.mtu),
                    dev.speed
                );
                out.push(Arc::new(dev));
            }
        }
        if out.is_empty() {
            return Err(format!(
                "no usable RDMA port among {} device(s): {}",
                infos.len(),
                if skipped.is_empty() {
                    "none found".to_string()
                } else {
                    skipped.join("; ")
                }
            ));
        }
        Ok(out)
    }
}

/// State of the connect side kept (boxed) in the handle scratch between calls.
struct Connecting {
    sock: TcpStream,
    peer: SocketAddr,
    hs: Handshake,
    res: Option<SendInner>,
    tc: u8,
    sl: u8,
}

/// Listening endpoint: TCP listener and at most one half-accepted connection.
pub struct IbListen {
    dev: Arc<IbDev>,
    listener: TcpListener,
    /// Side-channel connections accepted and not yet through the handshake.
    pending: Vec<Accepting>,
}

struct Accepting {
    sock: TcpStream,
    peer: SocketAddr,
    hs: Handshake,
    res: Option<RecvInner>,
}

#[derive(Debug, Clone)]
enum ReqState {
    Pending { size: usize },
    Done { n: usize, sizes: [usize; MAX_RECVS] },
}

/// Resources common to both comm sides. Field order is drop order: QPs, CQ,
/// then registrations, then the device.
struct Conn {
    qps: Vec<Qp>,
    cq: Cq,
    dev: Arc<IbDev>,
    sock: TcpStream,
    peer: SocketAddr,
    failed: Option<NetError>,
    eof_since: Option<Instant>,
    polls: u64,
    reqs: HashMap<u64, ReqState>,
    next_req: u64,
    sq_free: Vec<usize>,
    /// WR counts of outstanding signalled batches per QP (credit returned on completion).
    sq_batches: Vec<std::collections::VecDeque<usize>>,
    /// Registrations made for buffers passed without an mhandle (NULL), held
    /// by the request until it completes. Dropped after the QPs (field order).
    req_mrs: HashMap<u64, Vec<IbMr>>,
    /// The implicit registration of the last `isend` that returned NULL, reused
    /// when NCCL retries the same buffer (avoids a reg/dereg per poll).
    implicit_retry: Option<((usize, usize), IbMr)>,
}

impl Conn {
    fn new(dev: Arc<IbDev>, nqps: usize, sock: TcpStream, peer: SocketAddr) -> NetResult<Self> {
        let cq = Cq::new(&dev.ctx.ctx, (nqps * (SQ_DEPTH + RQ_DEPTH)) as i32).map_err(NetError::System)?;
        let mut qps = Vec::new();
        for _ in 0..nqps {
            qps.push(Qp::new_rc(&dev.pd, &cq, SQ_DEPTH as u32, RQ_DEPTH as u32).map_err(NetError::System)?);
        }
        Ok(Conn {
            qps,
            cq,
            dev,
            sock,
            peer,
            failed: None,
            eof_since: None,
            polls: 0,
            reqs: HashMap::new(),
            next_req: 1,
            sq_free: vec![SQ_DEPTH; nqps],
            sq_batches: vec![Default::default(); nqps],
            req_mrs: HashMap::new(),
            implicit_retry: None,
        })
    }

    /// Registers a non-empty buffer that came without an mhandle (NCCL always
    /// passes one; other hosts and the conformance suite may pass NULL, which the
    /// socket transport accepts). Uses the device cache, so a buffer that is also
    /// registered explicitly costs no verbs call.
    fn implicit_mr(&mut self, buf: &Buf) -> NetResult<IbMr> {
        let key = (buf.ptr as usize, buf.len);
        if let Some((k, m)) = &self.implicit_retry
            && *k == key
        {
            return Ok(IbMr { entry: m.entry.clone() });
        }
        let m = self.dev.reg(buf.ptr, buf.len)?;
        self.implicit_retry = Some((key, IbMr { entry: m.entry.clone() }));
        Ok(m)
    }

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qpn() == qpn)
    }

    fn fail(&mut self, e: NetError) -> NetError {
        if self.failed.is_none() {
            net_warn!(
                "NET/FerrocclIB: connection to {} on {}:{} failed: {e}",
                self.peer,
                self.dev.name,
                self.dev.port
            );
            self.failed = Some(e.clone());
        }
        e
    }

    fn check_failed(&self) -> NetResult<()> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn wc_error(&self, wc: &sys::ibv_wc, what: &str) -> NetError {
        let v = Verbs::get().expect("loaded before any comm exists");
        let text = format!(
            "{what} on {}:{} with peer {} completed with error: {} (status {}, vendor_err {:#x}, opcode {})",
            self.dev.name,
            self.dev.port,
            self.peer,
            v.wc_status_str(wc.status),
            wc.status,
            wc.vendor_err,
            wc.opcode
        );
        use sys::ibv_wc_status as S;
        match wc.status {
            S::IBV_WC_RETRY_EXC_ERR
            | S::IBV_WC_RNR_RETRY_EXC_ERR
            | S::IBV_WC_REM_INV_REQ_ERR
            | S::IBV_WC_REM_ACCESS_ERR
            | S::IBV_WC_REM_OP_ERR
            | S::IBV_WC_REM_ABORT_ERR
            | S::IBV_WC_REM_INV_RD_REQ_ERR => NetError::Remote(text),
            _ => NetError::System(text),
        }
    }

    /// Side-channel liveness: EOF or a socket error means the peer is gone.
    fn check_peer(&mut self, pending: usize) -> NetResult<()> {
        self.polls += 1;
        if !self.polls.is_multiple_of(64) && self.eof_since.is_none() {
            return Ok(());
        }
        let mut b = [0u8; 1];
        let gone = match self.sock.peek(&mut b) {
            Ok(0) => Some("closed the side-channel connection (process exited or comm closed)".to_string()),
            Ok(_) => None,
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(e) => Some(format!("side-channel error: {e}")),
        };
        if let Some(why) = gone {
            let since = *self.eof_since.get_or_insert_with(Instant::now);
            if since.elapsed() > EOF_GRACE && pending > 0 {
                let e = NetError::Remote(format!(
                    "peer {} {why}, with {pending} request(s) outstanding on {}:{}",
                    self.peer, self.dev.name, self.dev.port
                ));
                return Err(self.fail(e));
            }
        }
        Ok(())
    }

    fn take_done(&mut self, id: u64) -> NetResult<TestStatus> {
        match self.reqs.get(&id) {
            Some(ReqState::Done { n, sizes }) => {
                let st = TestStatus::Done { n: *n, sizes: *sizes };
                self.reqs.remove(&id);
                self.req_mrs.remove(&id);
                Ok(st)
            }
            Some(ReqState::Pending { .. }) => {
                self.check_failed()?;
                let pending = self.reqs.len();
                self.check_peer(pending)?;
                Ok(TestStatus::Pending)
            }
            None => Err(NetError::Internal(format!(
                "request {id} is not outstanding on this comm"
            ))),
        }
    }
}

/// A page-aligned, zeroed, registered protocol buffer of `T`s.
struct ProtoBuf<T: Copy> {
    mr: std::mem::ManuallyDrop<Mr>,
    ptr: *mut T,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is owned; access is serialised by the comm's mutex.
unsafe impl<T: Copy> Send for ProtoBuf<T> {}

impl<T: Copy> ProtoBuf<T> {
    fn new(pd: &Pd, len: usize) -> NetResult<Self> {
        let layout = std::alloc::Layout::from_size_align(len * std::mem::size_of::<T>(), 4096).map_err(sys_err)?;
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
        if ptr.is_null() {
            return Err(NetError::System("out of memory for IB protocol buffer".into()));
        }
        let mr = match pd.reg_mr(ptr.cast(), layout.size()) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: allocated just above with this layout.
                unsafe { std::alloc::dealloc(ptr.cast(), layout) };
                return Err(NetError::System(e));
            }
        };
        Ok(ProtoBuf {
            mr: std::mem::ManuallyDrop::new(mr),
            ptr,
            len,
            layout,
        })
    }

    fn addr(&self, i: usize) -> u64 {
        // SAFETY: `i` ≤ len keeps the pointer inside (or one past) the allocation.
        unsafe { self.ptr.add(i.min(self.len)) as u64 }
    }

    fn read(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: in bounds; the NIC may write concurrently, hence volatile.
        unsafe { std::ptr::read_volatile(self.ptr.add(i)) }
    }

    fn write(&mut self, i: usize, v: T) {
        assert!(i < self.len);
        // SAFETY: in bounds; exclusive through &mut self.
        unsafe { std::ptr::write_volatile(self.ptr.add(i), v) }
    }
}

impl<T: Copy> Drop for ProtoBuf<T> {
    fn drop(&mut self) {
        // Deregister before freeing the memory.
        // SAFETY: `mr` is dropped exactly once, here; it is never used again.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.mr) };
        // SAFETY: allocated in `new` with `layout`.
        unsafe { std::alloc::dealloc(self.ptr.cast(), self.layout) };
    }
}

/// One RDMA write: (local addr, len, lkey, remote addr, rkey).
type Work = (u64, u32, u32, u64, u32);

/// Send-side state.
struct SendInner {
    conn: Conn,
    fifo: ProtoBuf<FifoEntry>,
    records_src: ProtoBuf<u64>,
    remote_records: (u64, u32),
    matcher: proto::SendMatcher,
    psns: Vec<u32>,
}

/// Receive-side state.
struct RecvInner {
    conn: Conn,
    cts: ProtoBuf<FifoEntry>,
    records: ProtoBuf<u64>,
    remote_fifo: (u64, u32),
    tracker: proto::RecvTracker,
    psns: Vec<u32>,
}

/// The send comm (`sendComm`).
pub struct IbSendComm {
    inner: Arc<Mutex<Option<SendInner>>>,
}

/// The receive comm (`recvComm`).
pub struct IbRecvComm {
    inner: Arc<Mutex<Option<RecvInner>>>,
}

/// An outstanding request (keeps its comm's state alive; freed by the shims),
/// with its profiler events.
pub struct IbRequest(ReqOwner, QpEvents);

/// The `ncclProfileQp` events of one request, as NCCL 2.30.7's IB transport
/// emits them (`src/transport/net_ib/p2p.cc`, `net_ib_v1.h`; reference
/// `docs/reference/nccl-graph-tuning.md` §6.6): plugin id `NCCL_PROFILER_NET_TYPE_IB | 1`,
/// descriptor `ncclProfilerNetIbDescr_v1_t`, one event per (request, QP) work
/// request under the host's ProxyStep. Send: started when `isend` returns the
/// request (its writes are posted, or will be with the rest of the slot), with
/// `qp.device`, `qp.wr_id` (the data writes' id), `qp.opcode`
/// (`IBV_WR_RDMA_WRITE_WITH_IMM`, the signalled WR), `qp.qpNum` and `qp.length`
/// (this QP's share of the message). Receive: one per (sub-request, QP) when
/// the receive WRs are posted, under that sub-request's step, with
/// `qp.device`, `qp.wr_id` and `qp.qpNum` only (as NCCL). Stopped once, when
/// `test` reports the request done or failed, or when the request is dropped
/// (NCCL also stops each QP's event at its completion and again at `test`; a
/// profiler sees exactly one stop here). Empty when the host profiles nothing.
#[derive(Default)]
pub struct QpEvents(Vec<(NetEvent, Box<abi::ncclProfilerNetIbDescr_v1_t>)>);

impl QpEvents {
    fn start(&mut self, h: StepHandle, device: usize, wr_id: u64, opcode: i32, qp_num: u32, length: usize) {
        let mut qp = abi::ncclProfilerNetIbQpDescr_v1_t::zeroed();
        qp.device = device as i32;
        qp.wr_id = wr_id;
        qp.opcode = opcode;
        qp.qpNum = qp_num as i32;
        qp.length = length;
        let mut d = Box::new(abi::ncclProfilerNetIbDescr_v1_t::zeroed());
        d.r#type = abi::ncclProfileQp;
        d.u.qp = qp;
        let id = (abi::NCCL_PROFILER_NET_TYPE_IB | 1) as i64;
        // SAFETY: the boxed descriptor stays in this request, unchanged, until the
        // event is stopped; the step is in flight (we are inside isend/irecv).
        let ev = unsafe { h.start(id, (&mut *d as *mut abi::ncclProfilerNetIbDescr_v1_t).cast()) };
        self.0.push((ev, d));
    }

    fn stop_all(&mut self) {
        for (ev, _d) in self.0.drain(..) {
            ev.stop();
        }
    }
}

impl Drop for QpEvents {
    fn drop(&mut self) {
        self.stop_all();
    }
}

enum ReqOwner {
    Send(Arc<Mutex<Option<SendInner>>>, u64),
    Recv(Arc<Mutex<Option<RecvInner>>>, u64),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn closed() -> NetError {
    NetError::Internal("request tested after its comm was closed".into())
}

static PSN_SEED: AtomicU64 = AtomicU64::new(0);

pub(crate) fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = (t as u64) ^ (u64::from(std::process::id()) << 20) ^ PSN_SEED.fetch_add(0x9e37_79b9, Ordering::Relaxed);
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as u32 & 0xff_ffff
}

fn own_meta(dev: &IbDev, qps: &[Qp], psns: &[u32], buf: (u64, u32), tc: u8, sl: u8) -> proto::ConnMeta {
    proto::ConnMeta {
        qpns: qps.iter().map(Qp::qpn).collect(),
        psns: psns.to_vec(),
        lid: dev.lid,
        port: dev.port,
        link_layer: dev.link_layer,
        mtu: dev.mtu as u8,
        gid_index: dev.gid_index,
        gid: dev.gid,
        buf_addr: buf.0,
        buf_rkey: buf.1,
        tc,
        sl,
    }
}

fn connect_qps(conn: &Conn, p: &IbParams, psns: &[u32], peer: &proto::ConnMeta, tc: u8, sl: u8) -> NetResult<()> {
    if peer.qpns.len() != conn.qps.len() {
        return Err(NetError::Remote(format!(
            "peer {} has {} QPs, this side {} (NCCL_IB_QPS_PER_CONNECTION must match)",
            conn.peer,
            peer.qpns.len(),
            conn.qps.len()
        )));
    }
    if peer.link_layer != conn.dev.link_layer {
        return Err(NetError::Remote(format!(
            "peer {} link layer {} differs from local {} ({}:{})",
            conn.peer, peer.link_layer, conn.dev.link_layer, conn.dev.name, conn.dev.port
        )));
    }
    let s = conn.dev.settings(p, tc, sl, peer.mtu);
    for (i, qp) in conn.qps.iter().enumerate() {
        let remote = RemoteQp {
            qpn: peer.qpns[i],
            psn: peer.psns[i],
            lid: peer.lid,
            gid: peer.gid,
            global: conn.dev.is_roce() || peer.lid == 0,
        };
        qp.connect(&s, psns[i], &remote).map_err(|e| {
            NetError::System(format!(
                "{e} (peer {}, GID {}, local GID index {})",
                conn.peer,
                std::net::Ipv6Addr::from(peer.gid),
                conn.dev.gid_index
            ))
        })?;
    }
    Ok(())
}

/// Moves handshake bytes; returns the events that arrived.
fn pump(sock: &mut TcpStream, hs: &mut Handshake, peer: SocketAddr) -> NetResult<Vec<proto::Event>> {
    while !hs.outgoing().is_empty() {
        match sock.write(hs.outgoing()) {
            Ok(0) => {
                return Err(NetError::Remote(format!(
                    "peer {peer} closed the side channel during connection setup"
                )));
            }
            Ok(n) => hs.sent(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(NetError::Remote(format!("side channel to {peer}: {e}"))),
        }
    }
    let mut events = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => {
                if hs.is_done() {
                    break;
                }
                return Err(NetError::Remote(format!(
                    "peer {peer} closed the side channel during connection setup"
                )));
            }
            Ok(n) => {
                let mut ev = hs
                    .received(&buf[..n])
                    .map_err(|e| NetError::Remote(format!("peer {peer}: {e}")))?;
                while let Some(e) = ev {
                    events.push(e);
                    ev = hs
                        .received(&[])
                        .map_err(|e| NetError::Remote(format!("peer {peer}: {e}")))?;
                }
                if !events.is_empty() {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(NetError::Remote(format!("side channel to {peer}: {e}"))),
        }
    }
    Ok(events)
}

impl SendInner {
    fn new(dev: Arc<IbDev>, nqps: usize, sock: TcpStream, peer: SocketAddr) -> NetResult<Self> {
        let conn = Conn::new(dev.clone(), nqps, sock, peer)?;
        Ok(SendInner {
            fifo: ProtoBuf::new(&dev.pd, FIFO_SLOTS * MAX_RECVS)?,
            records_src: ProtoBuf::new(&dev.pd, FIFO_SLOTS * MAX_RECVS)?,
            remote_records: (0, 0),
            matcher: proto::SendMatcher::new(),
            psns: (0..nqps).map(|_| random_psn()).collect(),
            conn,
        })
    }

    fn progress(&mut self) -> NetResult<()> {
        let mut wcs: [sys::ibv_wc; 16] = // SAFETY: all-zero is a valid ibv_wc (plain data).
            unsafe { std::mem::zeroed() };
        loop {
            let n = self
                .conn
                .cq
                .poll(&mut wcs)
                .map_err(|e| self.conn.fail(NetError::System(e)))?;
            for wc in &wcs[..n] {
                if wc.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
                    let e = self.conn.wc_error(wc, "RDMA write of send data");
                    return Err(self.conn.fail(e));
                }
                let Some(q) = self.conn.qp_index(wc.qp_num) else {
                    continue;
                };
                if let Some(c) = self.conn.sq_batches[q].pop_front() {
                    self.conn.sq_free[q] += c;
                }
                let seq = wc.wr_id & ((1 << WR_KIND_SHIFT) - 1);
                let done = self
                    .matcher
                    .on_completion(seq)
                    .map_err(|e| self.conn.fail(NetError::Internal(e.to_string())))?;
                for id in done {
                    if let Some(ReqState::Pending { size }) = self.conn.reqs.get(&id).cloned() {
                        let mut sizes = [0; MAX_RECVS];
                        sizes[0] = size;
                        self.conn.reqs.insert(id, ReqState::Done { n: 1, sizes });
                    }
                }
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    fn isend(&mut self, buf: Buf, tag: i32, mr: Option<&IbMr>) -> NetResult<Option<u64>> {
        self.conn.check_failed()?;
        let seq = self.matcher.seq();
        let base = (seq as usize % FIFO_SLOTS) * MAX_RECVS;
        let mut slot = [FifoEntry::default(); MAX_RECVS];
        for (i, e) in slot.iter_mut().enumerate() {
            *e = self.fifo.read(base + i);
        }
        std::sync::atomic::fence(Ordering::Acquire);
        if slot[0].idx != seq + 1 {
            // No CTS for this slot yet: NULL request, before any registration work.
            // A receiver that died never posts one: report it rather than NULL forever.
            self.conn.check_peer(1)?;
            return Ok(None);
        }
        let implicit = if buf.len > 0 && mr.is_none() {
            Some(self.conn.implicit_mr(&buf)?)
        } else {
            None
        };
        let id = self.conn.next_req;
        let lkey = mr.or(implicit.as_ref()).map_or(0, IbMr::lkey);
        let m = self
            .matcher
            .try_match(&slot, id, tag, buf.ptr as u64, buf.len as u64, lkey)
            .map_err(|e| NetError::InvalidUsage(format!("{e} (peer {})", self.conn.peer)))?;
        match m {
            SendMatch::NotReady => return Ok(None),
            SendMatch::Partial => {}
            SendMatch::Complete { seq, sends } => {
                if !self.post_slot(seq, &sends)? {
                    self.matcher.unmatch_last();
                    return Ok(None);
                }
                self.matcher.slot_posted(self.conn.qps.len());
            }
        }
        self.conn.next_req += 1;
        self.conn.reqs.insert(id, ReqState::Pending { size: buf.len });
        if let Some(m) = implicit {
            self.conn.implicit_retry = None;
            self.conn.req_mrs.insert(id, vec![m]);
        }
        Ok(Some(id))
    }

    /// Posts a complete slot; `false` if the send queues lack room right now.
    fn post_slot(&mut self, seq: u64, sends: &[proto::MatchedSend]) -> NetResult<bool> {
        let nqps = self.conn.qps.len();
        let max_msg = self.conn.dev.max_msg;
        let sizes: Vec<u64> = sends.iter().map(|s| s.size).collect();
        let record = proto::needs_record(&sizes);
        // Build the work per QP: (local addr, len, lkey, remote addr, rkey).
        let mut per_qp: Vec<Vec<Work>> = vec![Vec::new(); nqps];
        for s in sends {
            for (q, (off, len)) in proto::chunks(s.size as usize, nqps).into_iter().enumerate() {
                for (po, pl) in proto::pieces(off, len, max_msg) {
                    per_qp[q].push((s.addr + po as u64, pl as u32, s.lkey, s.remote_addr + po as u64, s.rkey));
                }
            }
        }
        let slot = seq as usize % FIFO_SLOTS;
        if record {
            for (i, s) in sends.iter().enumerate() {
                self.records_src.write(slot * MAX_RECVS + i, s.size);
            }
            let rec = (
                self.records_src.addr(slot * MAX_RECVS),
                (sends.len() * 8) as u32,
                self.records_src.mr.lkey(),
                self.remote_records.0 + (slot * MAX_RECVS * 8) as u64,
                self.remote_records.1,
            );
            per_qp[0].push(rec);
        }
        let need = |q: usize| per_qp[q].len() + 1;
        if (0..nqps).any(|q| self.conn.sq_free[q] < need(q)) {
            self.progress()?;
            if (0..nqps).any(|q| self.conn.sq_free[q] < need(q)) {
                return Ok(false);
            }
        }
        let imm = proto::imm_for(&sizes);
        let (imm_addr, imm_rkey) = (sends[0].remote_addr, sends[0].rkey);
        for (q, work) in per_qp.iter().enumerate() {
            let mut sges: Vec<sys::ibv_sge> = work
                .iter()
                .map(|w| sys::ibv_sge {
                    addr: w.0,
                    length: w.1,
                    lkey: w.2,
                })
                .collect();
            // SAFETY: all-zero is a valid ibv_send_wr (NULL pointers, zero fields).
            let mut wrs: Vec<sys::ibv_send_wr> = (0..=work.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (i, w) in work.iter().enumerate() {
                wrs[i].wr_id = (WR_DATA << WR_KIND_SHIFT) | seq;
                wrs[i].opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wrs[i].sg_list = &mut sges[i];
                wrs[i].num_sge = 1;
                wrs[i].wr.rdma = sys::rdma_t {
                    remote_addr: w.3,
                    rkey: w.4,
                };
            }
            let last = work.len();
            wrs[last].wr_id = (WR_DATA << WR_KIND_SHIFT) | seq;
            wrs[last].opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            wrs[last].send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
            wrs[last].imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            wrs[last].wr.rdma = sys::rdma_t {
                remote_addr: imm_addr,
                rkey: imm_rkey,
            };
            for i in 0..last {
                let next: *mut sys::ibv_send_wr = &mut wrs[i + 1];
                wrs[i].next = next;
            }
            self.conn.qps[q]
                .post_send(&mut wrs[0])
                .map_err(|e| self.conn.fail(NetError::System(e)))?;
            self.conn.sq_free[q] -= wrs.len();
            self.conn.sq_batches[q].push_back(wrs.len());
        }
        Ok(true)
    }
}

impl RecvInner {
    fn new(dev: Arc<IbDev>, nqps: usize, sock: TcpStream, peer: SocketAddr) -> NetResult<Self> {
        let conn = Conn::new(dev.clone(), nqps, sock, peer)?;
        Ok(RecvInner {
            cts: ProtoBuf::new(&dev.pd, FIFO_SLOTS * MAX_RECVS)?,
            records: ProtoBuf::new(&dev.pd, FIFO_SLOTS * MAX_RECVS)?,
            remote_fifo: (0, 0),
            tracker: proto::RecvTracker::new(nqps),
            psns: (0..nqps).map(|_| random_psn()).collect(),
            conn,
        })
    }

    fn progress(&mut self) -> NetResult<()> {
        let mut wcs: [sys::ibv_wc; 16] = // SAFETY: all-zero is a valid ibv_wc (plain data).
            unsafe { std::mem::zeroed() };
        loop {
            let n = self
                .conn
                .cq
                .poll(&mut wcs)
                .map_err(|e| self.conn.fail(NetError::System(e)))?;
            for wc in &wcs[..n] {
                let kind = wc.wr_id >> WR_KIND_SHIFT;
                if wc.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
                    let what = if kind == WR_CTS {
                        "RDMA write of a CTS FIFO entry"
                    } else {
                        "receive of send data"
                    };
                    let e = self.conn.wc_error(wc, what);
                    return Err(self.conn.fail(e));
                }
                let Some(q) = self.conn.qp_index(wc.qp_num) else {
                    continue;
                };
                if kind == WR_CTS {
                    if let Some(c) = self.conn.sq_batches[q].pop_front() {
                        self.conn.sq_free[q] += c;
                    }
                    continue;
                }
                // SAFETY: receive completions with immediate carry `imm_data`.
                let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
                let done = self
                    .tracker
                    .on_imm(q, imm)
                    .map_err(|e| self.conn.fail(NetError::Remote(e.to_string())))?;
                if let Some(d) = done {
                    let mut sizes = [0usize; MAX_RECVS];
                    match d.imm_size {
                        Some(s) => sizes[0] = s as usize,
                        None => {
                            std::sync::atomic::fence(Ordering::Acquire);
                            let base = (d.seq as usize % FIFO_SLOTS) * MAX_RECVS;
                            for (i, s) in sizes.iter_mut().enumerate().take(d.n) {
                                *s = self.records.read(base + i) as usize;
                            }
                        }
                    }
                    self.conn.reqs.insert(d.req, ReqState::Done { n: d.n, sizes });
                }
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    fn irecv(&mut self, bufs: &[RecvBuf<'_, IbMr>]) -> NetResult<Option<u64>> {
        self.conn.check_failed()?;
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(NetError::InvalidArgument(format!(
                "irecv of {} buffers, expected 1..=8",
                bufs.len()
            )));
        }
        if !self.tracker.can_post() {
            return Ok(None);
        }
        if self.conn.sq_free[0] == 0 {
            self.progress()?;
            if self.conn.sq_free[0] == 0 {
                return Ok(None);
            }
        }
        let mut list = Vec::with_capacity(bufs.len());
        let mut implicit = Vec::new();
        for b in bufs {
            let rkey = match b.mr {
                Some(m) => m.rkey(),
                None if b.buf.len > 0 => {
                    let m = self.conn.dev.reg(b.buf.ptr, b.buf.len)?;
                    let k = m.rkey();
                    implicit.push(m);
                    k
                }
                None => 0,
            };
            list.push((b.buf.ptr as u64, b.buf.len as u64, rkey, b.tag));
        }
        let id = self.conn.next_req;
        let Some((seq, entries)) = self.tracker.post(id, &list) else {
            return Ok(None);
        };
        self.conn.next_req += 1;
        self.conn.reqs.insert(id, ReqState::Pending { size: 0 });
        if !implicit.is_empty() {
            self.conn.req_mrs.insert(id, implicit);
        }
        for (q, qp) in self.conn.qps.iter().enumerate() {
            if let Err(e) = qp.post_recv0((WR_RECV << WR_KIND_SHIFT) | q as u64) {
                return Err(self.conn.fail(NetError::System(e)));
            }
        }
        let slot = seq as usize % FIFO_SLOTS;
        for (i, e) in entries.iter().enumerate() {
            self.cts.write(slot * MAX_RECVS + i, *e);
        }
        let mut sge = sys::ibv_sge {
            addr: self.cts.addr(slot * MAX_RECVS),
            length: (entries.len() * std::mem::size_of::<FifoEntry>()) as u32,
            lkey: self.cts.mr.lkey(),
        };
        // SAFETY: all-zero is a valid ibv_send_wr.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = (WR_CTS << WR_KIND_SHIFT) | seq;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.wr.rdma = sys::rdma_t {
            remote_addr: self.remote_fifo.0 + (slot * proto::FIFO_SLOT_BYTES) as u64,
            rkey: self.remote_fifo.1,
        };
        self.conn.qps[0]
            .post_send(&mut wr)
            .map_err(|e| self.conn.fail(NetError::System(e)))?;
        self.conn.sq_free[0] -= 1;
        self.conn.sq_batches[0].push_back(1);
        Ok(Some(id))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Flush outstanding work so nothing references buffers after close.
        for qp in &self.qps {
            qp.to_error();
        }
    }
}

/// Local IPv4 address for the side channel: the RoCE GID's address when an up
/// interface of this network namespace holds it, else the first up interface
/// [`oob_iface_matches`] accepts, else loopback (see [`pick_oob_ip`]).
pub(crate) fn oob_ip(dev: &IbDev) -> std::net::IpAddr {
    let want = std::env::var(ferroccl_plugin_api::params::socket::IFNAME.name).ok();
    let ifaces: Vec<OobIface> = nix::ifaddrs::getifaddrs()
        .map(|list| {
            list.filter_map(|ifa| {
                Some(OobIface {
                    name: ifa.interface_name.clone(),
                    up: ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP),
                    ip: ifa.address.as_ref()?.as_sockaddr_in()?.ip(),
                })
            })
            .collect()
        })
        .unwrap_or_default();
    let gid_ip = if dev.is_roce() {
        params::oob_ip_from_gid(&dev.gid)
    } else {
        None
    };
    let (ip, why) = pick_oob_ip(gid_ip, &ifaces, want.as_deref());
    if let (Some(g), OobChoice::Interface(name)) = (gid_ip, &why) {
        static LOGGED: AtomicBool = AtomicBool::new(false);
        if !LOGGED.swap(true, Ordering::Relaxed) {
            net_info!(
                NCCL_INIT | NCCL_NET,
                "NET/FerrocclIB: {}:{}: the GID's address {g} is on no interface of this network namespace (an RDMA device shared into a container); side channel on {name} {ip}",
                dev.name,
                dev.port
            );
        }
    }
    ip.into()
}

/// An IPv4 address of a local interface (`getifaddrs`).
#[derive(Debug, Clone)]
struct OobIface {
    name: String,
    up: bool,
    ip: std::net::Ipv4Addr,
}

/// Where [`pick_oob_ip`]'s address came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OobChoice {
    /// The RoCE GID's own address.
    Gid,
    /// The named interface.
    Interface(String),
    /// Nothing suitable: loopback.
    Loopback,
}

/// `NCCL_SOCKET_IFNAME`'s grammar on an interface name: `^a,b` excludes
/// prefixes, `=a,b` or `a,b` selects them; unset, anything but `lo`.
fn oob_iface_matches(name: &str, want: Option<&str>) -> bool {
    match want {
        Some(w) if w.starts_with('^') => !w[1..].split(',').any(|x| name.starts_with(x)),
        Some(w) => w.trim_start_matches('=').split(',').any(|x| name.starts_with(x)),
        None => name != "lo",
    }
}

/// The side channel's address. The RoCE GID's IPv4 address when an up
/// interface here holds it (the RDMA NIC's own address); else, as NCCL 2.30.7
/// always does (`ncclIbListen` in `src/transport/net_ib/` binds `ncclIbIfAddr`,
/// the `NCCL_SOCKET_IFNAME` interface `ncclIbInit` found), the first up
/// interface [`oob_iface_matches`] accepts; else loopback. The GID's address
/// is on no local interface when the RDMA device is shared into a network
/// namespace that does not hold its netdev (rdma `netns shared` mode: a
/// container with its node's HCA, the soft-RoCE cluster of
/// `.ci/rxe-vm/netns-rxe.sh`), where binding it fails with `EADDRNOTAVAIL`.
fn pick_oob_ip(
    gid_ip: Option<std::net::Ipv4Addr>,
    ifaces: &[OobIface],
    want: Option<&str>,
) -> (std::net::Ipv4Addr, OobChoice) {
    if let Some(g) = gid_ip
        && ifaces.iter().any(|i| i.up && i.ip == g)
    {
        return (g, OobChoice::Gid);
    }
    ifaces
        .iter()
        .find(|i| i.up && oob_iface_matches(&i.name, want))
        .map(|i| (i.ip, OobChoice::Interface(i.name.clone())))
        .unwrap_or((std::net::Ipv4Addr::LOCALHOST, OobChoice::Loopback))
}

impl Net for IbNet {
    const NAME: &'static std::ffi::CStr = c"FerrocclIB";
    type Ctx = CommConfig;
    type ListenComm = IbListen;
    type SendComm = IbSendComm;
    type RecvComm = IbRecvComm;
    type Mr = IbMr;
    type Request = IbRequest;

    fn new() -> NetResult<Self> {
        let params = IbParams::from_env().map_err(|e| NetError::InvalidUsage(e.to_string()))?;
        if params.disable {
            return Err(NetError::InvalidUsage(
                "NET/FerrocclIB disabled by NCCL_IB_DISABLE=1".into(),
            ));
        }
        let devs = Self::discover(&params).map_err(|e| NetError::System(format!("NET/FerrocclIB: {e}")))?;
        net_info!(
            NCCL_INIT | NCCL_NET,
            "NET/FerrocclIB: {} port(s); NCCL_IB_TIMEOUT={} NCCL_IB_RETRY_CNT={} (dead peer reported by verbs within ~{} ms), NCCL_IB_QPS_PER_CONNECTION={}",
            devs.len(),
            params.timeout,
            params.retry_cnt,
            params.verbs_timeout_ms(),
            params.qps_per_conn
        );
        Ok(IbNet { params, devs })
    }

    fn init(&self, _comm_id: u64, config: &CommConfig) -> NetResult<Self::Ctx> {
        Ok(*config)
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(self.devs.len())
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        let d = self
            .devs
            .get(dev)
            .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range")))?;
        Ok(Properties {
            name: d.name.clone(),
            pci_path: d.pci_path.clone(),
            guid: d.guid,
            ptr_support: ferroccl_plugin_api::abi::NCCL_PTR_HOST,
            reg_is_global: true,
            force_flush: false,
            speed: d.speed,
            port: i32::from(d.port),
            latency: 0.0,
            max_comms: d.max_qp.max(1),
            max_recvs: MAX_RECVS as i32,
            ..Properties::default()
        })
    }

    fn listen(&self, _ctx: &Self::Ctx, dev: usize, handle: &mut Handle) -> NetResult<Self::ListenComm> {
        let d = self
            .devs
            .get(dev)
            .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range")))?;
        let ip = oob_ip(d);
        let listener = TcpListener::bind((ip, 0)).map_err(|e| sys_err(format!("bind side channel on {ip}: {e}")))?;
        listener.set_nonblocking(true).map_err(sys_err)?;
        let addr = listener.local_addr().map_err(sys_err)?;
        proto::ListenHandle {
            addr,
            magic: proto::MAGIC,
        }
        .encode(handle);
        Ok(IbListen {
            dev: d.clone(),
            listener,
            pending: Vec::new(),
        })
    }

    fn connect(
        &self,
        ctx: &Self::Ctx,
        dev: usize,
        handle: &mut Handle,
        config: &CommConfig,
    ) -> NetResult<Option<Self::SendComm>> {
        let stage = u64::from_le_bytes(
            handle[proto::HANDLE_STAGE_OFF..proto::HANDLE_STAGE_OFF + 8]
                .try_into()
                .expect("8"),
        );
        let ptr = u64::from_le_bytes(
            handle[proto::HANDLE_PTR_OFF..proto::HANDLE_PTR_OFF + 8]
                .try_into()
                .expect("8"),
        );
        let clear = |h: &mut Handle| h[proto::HANDLE_STAGE_OFF..proto::HANDLE_PTR_OFF + 8].fill(0);
        let mut st: Box<Connecting> = if stage == 1 && ptr != 0 {
            // SAFETY: stage 1 means `ptr` is the Box we leaked into this handle below.
            unsafe { Box::from_raw(ptr as *mut Connecting) }
        } else {
            let d = self
                .devs
                .get(dev)
                .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range")))?;
            let lh = proto::ListenHandle::decode(handle).map_err(|e| NetError::InvalidArgument(e.to_string()))?;
            let sock = TcpStream::connect_timeout(&lh.addr, CONNECT_TIMEOUT)
                .map_err(|e| NetError::System(format!("side-channel connect to {}: {e}", lh.addr)))?;
            sock.set_nonblocking(true).map_err(sys_err)?;
            let _ = sock.set_nodelay(true);
            set_keepalive(&sock);
            // NCCL 2.30.7 src/transport/net_ib/connect.cc ncclIbConnectImpl: NCCL_IB_TC /
            // NCCL_IB_SL when set, else the communicator's traffic class (v10: connect's
            // config; v11+: the context's), else 0 (`IbParams::effective_tc`/`_sl`).
            let tc_cfg = if config.traffic_class >= 0 {
                config.traffic_class
            } else {
                ctx.traffic_class
            };
            let (tc, sl) = (self.params.effective_tc(tc_cfg), self.params.effective_sl(tc_cfg));
            let res = SendInner::new(
                d.clone(),
                self.params.qps_per_conn,
                sock.try_clone().map_err(sys_err)?,
                lh.addr,
            )?;
            let meta = own_meta(
                d,
                &res.conn.qps,
                &res.psns,
                (res.fifo.addr(0), res.fifo.mr.rkey()),
                tc,
                sl,
            );
            Box::new(Connecting {
                sock,
                peer: lh.addr,
                hs: Handshake::new(Role::Connector, Some(&meta)),
                res: Some(res),
                tc,
                sl,
            })
        };
        let result = (|| -> NetResult<Option<SendInner>> {
            let peer = st.peer;
            for ev in pump(&mut st.sock, &mut st.hs, peer)? {
                if let proto::Event::PeerMeta(m) = ev {
                    let res = st.res.as_mut().expect("resources exist until done");
                    connect_qps(&res.conn, &self.params, &res.psns, &m, st.tc, st.sl)?;
                    res.remote_records = (m.buf_addr, m.buf_rkey);
                    st.hs.queue_ready();
                    pump(&mut st.sock, &mut st.hs, peer)?;
                }
            }
            if st.hs.is_done() { Ok(st.res.take()) } else { Ok(None) }
        })();
        match result {
            Ok(Some(inner)) => {
                clear(handle);
                net_info!(
                    NCCL_NET,
                    "NET/FerrocclIB: connected to {} ({} QP(s))",
                    inner.conn.peer,
                    inner.conn.qps.len()
                );
                Ok(Some(IbSendComm {
                    inner: Arc::new(Mutex::new(Some(inner))),
                }))
            }
            Ok(None) => {
                handle[proto::HANDLE_STAGE_OFF..proto::HANDLE_STAGE_OFF + 8].copy_from_slice(&1u64.to_le_bytes());
                let p = Box::into_raw(st) as u64;
                handle[proto::HANDLE_PTR_OFF..proto::HANDLE_PTR_OFF + 8].copy_from_slice(&p.to_le_bytes());
                Ok(None)
            }
            Err(e) => {
                clear(handle);
                Err(e)
            }
        }
    }

    fn accept(&self, listen: &mut Self::ListenComm) -> NetResult<Option<Self::RecvComm>> {
        // Take every waiting side-channel connection, so a stray client that
        // sends nothing cannot hold up a real one behind it.
        while listen.pending.len() < MAX_PENDING_ACCEPTS {
            match listen.listener.accept() {
                Ok((sock, peer)) => {
                    sock.set_nonblocking(true).map_err(sys_err)?;
                    let _ = sock.set_nodelay(true);
                    set_keepalive(&sock);
                    listen.pending.push(Accepting {
                        sock,
                        peer,
                        hs: Handshake::new(Role::Acceptor, None),
                        res: None,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(sys_err(format!("side-channel accept: {e}"))),
            }
        }
        let dev = listen.dev.clone();
        let mut i = 0;
        while i < listen.pending.len() {
            match self.accept_step(&dev, &mut listen.pending[i]) {
                Ok(true) => {
                    let a = listen.pending.remove(i);
                    let inner = a.res.expect("resources created before ready");
                    net_info!(
                        NCCL_NET,
                        "NET/FerrocclIB: accepted {} ({} QP(s))",
                        inner.conn.peer,
                        inner.conn.qps.len()
                    );
                    return Ok(Some(IbRecvComm {
                        inner: Arc::new(Mutex::new(Some(inner))),
                    }));
                }
                Ok(false) => i += 1,
                Err(e) if listen.pending[i].res.is_none() => {
                    // Not (yet) a peer of ours: a stray client or garbage. Drop it.
                    net_warn!(
                        "NET/FerrocclIB: dropping side-channel connection from {} on {}:{}: {e}",
                        listen.pending[i].peer,
                        dev.name,
                        dev.port
                    );
                    listen.pending.remove(i);
                }
                Err(e) => {
                    listen.pending.remove(i);
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    fn reg_mr(&self, comm: CommMut<'_, Self>, buf: Buf, ty: PtrType) -> NetResult<Self::Mr> {
        if ty != PtrType::Host {
            return Err(NetError::InvalidUsage(format!(
                "regMr of {ty:?} memory: this build supports host memory only (no GPUDirect RDMA)"
            )));
        }
        let dev = match comm {
            CommMut::Send(c) => lock(&c.inner).as_ref().map(|i| i.conn.dev.clone()),
            CommMut::Recv(c) => lock(&c.inner).as_ref().map(|i| i.conn.dev.clone()),
        }
        .ok_or_else(|| NetError::Internal("regMr on a closed comm".into()))?;
        dev.reg(buf.ptr, buf.len)
    }

    fn isend(
        &self,
        comm: &mut Self::SendComm,
        buf: Buf,
        tag: i32,
        mr: Option<&Self::Mr>,
    ) -> NetResult<Option<Self::Request>> {
        let mut g = lock(&comm.inner);
        let inner = g
            .as_mut()
            .ok_or_else(|| NetError::Internal("isend on a closed comm".into()))?;
        let seq = inner.matcher.seq();
        let Some(id) = inner.isend(buf, tag, mr)? else {
            return Ok(None);
        };
        let mut ev = QpEvents::default();
        if let Some(h) = step_handle(0) {
            let conn = &inner.conn;
            // Every QP carries a share of the message and the signalled write with immediate.
            for (q, (_, len)) in proto::chunks(buf.len, conn.qps.len()).into_iter().enumerate() {
                ev.start(
                    h,
                    conn.dev.index,
                    (WR_DATA << WR_KIND_SHIFT) | seq,
                    sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM as i32,
                    conn.qps[q].qpn(),
                    len,
                );
            }
        }
        Ok(Some(IbRequest(ReqOwner::Send(comm.inner.clone(), id), ev)))
    }

    fn irecv(&self, comm: &mut Self::RecvComm, bufs: &[RecvBuf<'_, Self::Mr>]) -> NetResult<Option<Self::Request>> {
        let mut g = lock(&comm.inner);
        let inner = g
            .as_mut()
            .ok_or_else(|| NetError::Internal("irecv on a closed comm".into()))?;
        let Some(id) = inner.irecv(bufs)? else {
            return Ok(None);
        };
        let mut ev = QpEvents::default();
        let conn = &inner.conn;
        for i in 0..bufs.len() {
            let Some(h) = step_handle(i) else { continue };
            for (q, qp) in conn.qps.iter().enumerate() {
                ev.start(h, conn.dev.index, (WR_RECV << WR_KIND_SHIFT) | q as u64, 0, qp.qpn(), 0);
            }
        }
        Ok(Some(IbRequest(ReqOwner::Recv(comm.inner.clone(), id), ev)))
    }

    fn test(&self, req: &mut Self::Request) -> NetResult<TestStatus> {
        let st = test_request(&mut req.0);
        if !matches!(st, Ok(TestStatus::Pending)) {
            req.1.stop_all();
        }
        st
    }

    fn close_send(&self, comm: Self::SendComm) -> NetResult<()> {
        drop(lock(&comm.inner).take());
        Ok(())
    }

    fn close_recv(&self, comm: Self::RecvComm) -> NetResult<()> {
        drop(lock(&comm.inner).take());
        Ok(())
    }
}

/// `test` of one request: progress its comm, then report it.
fn test_request(req: &mut ReqOwner) -> NetResult<TestStatus> {
    match req {
        ReqOwner::Send(c, id) => {
            let mut g = lock(c);
            let inner = g.as_mut().ok_or_else(closed)?;
            if let Err(e) = inner.progress() {
                // Still report requests that finished before the error.
                if !matches!(inner.conn.reqs.get(id), Some(ReqState::Done { .. })) {
                    return Err(e);
                }
            }
            inner.conn.take_done(*id)
        }
        ReqOwner::Recv(c, id) => {
            let mut g = lock(c);
            let inner = g.as_mut().ok_or_else(closed)?;
            if let Err(e) = inner.progress()
                && !matches!(inner.conn.reqs.get(id), Some(ReqState::Done { .. }))
            {
                return Err(e);
            }
            inner.conn.take_done(*id)
        }
    }
}

/// Why [`IbNet`] cannot start here (no libibverbs, no device, no active port),
/// or `None` if it can. Used by diagnostics and tests.
pub fn unavailable_reason() -> Option<String> {
    match IbNet::new() {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keepalive_settings(sock: &TcpStream) -> (i32, i32, i32) {
        use std::os::fd::AsRawFd;
        let get = |level: libc::c_int, name: libc::c_int| {
            let mut v: libc::c_int = -1;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: valid fd, out pointer and length of a c_int.
            unsafe {
                libc::getsockopt(
                    sock.as_raw_fd(),
                    level,
                    name,
                    (&mut v as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            v
        };
        (
            get(libc::SOL_SOCKET, libc::SO_KEEPALIVE),
            get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
            get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
        )
    }

    fn iface(name: &str, up: bool, ip: [u8; 4]) -> OobIface {
        OobIface {
            name: name.into(),
            up,
            ip: ip.into(),
        }
    }

    #[test]
    fn side_channel_on_the_gid_address_when_it_is_local() {
        let ifs = [
            iface("lo", true, [127, 0, 0, 1]),
            iface("eth0", true, [10, 0, 0, 5]),
            iface("ens1", true, [192, 168, 7, 5]),
        ];
        let gid = Some([192, 168, 7, 5].into());
        assert_eq!(pick_oob_ip(gid, &ifs, None), ([192, 168, 7, 5].into(), OobChoice::Gid));
        // NCCL_SOCKET_IFNAME does not override the NIC's own address.
        assert_eq!(pick_oob_ip(gid, &ifs, Some("eth")).1, OobChoice::Gid);
    }

    #[test]
    fn side_channel_on_an_interface_when_the_gid_address_is_elsewhere() {
        // A namespace with its own eth0, the HCA's netdev (and address) outside.
        let ifs = [iface("lo", true, [127, 0, 0, 1]), iface("eth0", true, [198, 18, 0, 2])];
        let gid = Some([198, 18, 16, 2].into());
        assert_eq!(
            pick_oob_ip(gid, &ifs, None),
            ([198, 18, 0, 2].into(), OobChoice::Interface("eth0".into()))
        );
        // The address on a down interface does not count.
        let down = [
            iface("ens1", false, [198, 18, 16, 2]),
            iface("eth0", true, [198, 18, 0, 2]),
        ];
        assert_eq!(pick_oob_ip(gid, &down, None).1, OobChoice::Interface("eth0".into()));
        // NCCL_SOCKET_IFNAME's grammar picks among the rest.
        let two = [iface("eth0", true, [10, 0, 0, 1]), iface("ib0", true, [10, 1, 0, 1])];
        assert_eq!(
            pick_oob_ip(gid, &two, Some("ib")).0,
            std::net::Ipv4Addr::from([10, 1, 0, 1])
        );
        assert_eq!(
            pick_oob_ip(gid, &two, Some("^eth")).0,
            std::net::Ipv4Addr::from([10, 1, 0, 1])
        );
        assert_eq!(
            pick_oob_ip(gid, &two, Some("=eth0")).0,
            std::net::Ipv4Addr::from([10, 0, 0, 1])
        );
        // Nothing else up: loopback.
        let lo = [iface("lo", true, [127, 0, 0, 1])];
        assert_eq!(
            pick_oob_ip(gid, &lo, None),
            (std::net::Ipv4Addr::LOCALHOST, OobChoice::Loopback)
        );
        // InfiniBand (no GID address): the interface rule alone.
        assert_eq!(pick_oob_ip(None, &two, None).0, std::net::Ipv4Addr::from([10, 0, 0, 1]));
    }

    #[test]
    fn side_channel_keepalive_is_set() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        assert_eq!(keepalive_settings(&c).0, 0, "keepalive is off by default");
        set_keepalive(&c);
        set_keepalive(&a);
        for s in [&c, &a] {
            assert_eq!(keepalive_settings(s), (1, KEEPALIVE_IDLE_S, USER_TIMEOUT_MS));
        }
    }
}
