//! RMA (one-sided) operations over verbs: the IB plugin's `ncclRmaPlugin_v14` /
//! `_v13` tables (NCCL 2.30.7 `src/include/plugin/rma/rma_v14.h`), in the manner of
//! NCCL's own IB GIN/RMA proxy (`src/transport/net_ib/gin.cc`, `src/rma/rma_proxy.cc`).
//!
//! Model (see [`ferroccl_plugin_api::sdk::rma`]):
//! * **devices** are the net plugin's ports ([`IbNet::devs`]), with the same
//!   properties, when `NCCL_IB_RMA_ENABLE=1` ([`crate::params::RMA_ENABLE`]); by
//!   default none, so that NCCL 2.30, which takes the first RMA table with a device
//!   from the net plugin's library, keeps its own IB RMA for GPU memory.
//! * **listen / connect** reuse the net path's side channel (the listen handle of
//!   [`proto::ListenHandle`], the QP metadata frame [`proto::ConnMeta`]): `connect`
//!   builds a full mesh of side-channel sockets (rank `r` connects to every higher
//!   rank, accepts every lower one; a [`Hello`] names the connecting rank), one RC QP
//!   per peer on one CQ (the rank's own slot is a loopback pair of QPs, so a rank can
//!   put to itself), exchanges the QPs' metadata, moves them to RTS and ends with a
//!   ready byte each way, so no rank posts before its peer's QP can take it. The QPs
//!   get `NCCL_IB_TC` / `NCCL_IB_SL` (or 0); `createContext`'s traffic class is not
//!   applied (the QPs exist before it).
//! * **windows**: `regMrSym` registers the buffer with remote write, read and atomic
//!   access and sends `(window number, address, length, rkey)` ([`WinRecord`]) to
//!   every peer over the side channels, as NCCL's IB GIN proxy all-gathers the base
//!   addresses and rkeys (`src/transport/net_ib/gin.cc`,
//!   `ncclGinIbProxyRegMrSymDmaBuf`); windows are numbered in registration order (symmetric: every rank
//!   registers its windows in the same order). It does not wait for the peers: the
//!   first operation that targets a peer's window reads that peer's records up to it,
//!   waiting (bounded by [`WINDOW_WAIT`]) for a window the peer has not registered
//!   yet, so one thread may register the windows of several ranks in turn.
//! * **iput** is an RDMA WRITE (split at the port's largest message); **iputSignal**
//!   adds, on the same QP, an `IBV_WR_ATOMIC_FETCH_AND_ADD` of the signal delta on the
//!   peer's 64-bit signal word (no fence: none is needed behind WRITEs). An RC
//!   responder executes the requests of one QP in order, so the signal word changes
//!   only after the put's data is placed (strong signal, whatever `isStrongSignal` says). The signal word
//!   must be 8-byte aligned (an IB atomic's rule). **iget** is an RDMA READ.
//! * **completion**: every work request is signalled; its completion is the peer's
//!   acknowledgement (write, atomic) or the data (read). A request completes when the
//!   completions of its QP reached its last work request; RC completes a QP's work in
//!   order, so **iflush** completes once every operation posted to that peer before it
//!   did (no work request of its own).
//! * **failures**: an error completion fails that peer for good (every pending and
//!   later operation to it, `queryLastError`); so does the peer's side-channel socket
//!   reaching EOF (its process died) while operations to it are pending, which is
//!   seen within a few `test` calls instead of after the verbs retry timeout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::log::{NCCL_INIT, NCCL_NET};
use ferroccl_plugin_api::net_info;
use ferroccl_plugin_api::sdk::rma::{Rma, RmaConfig, Signal, SignalOp, Xfer};
use ferroccl_plugin_api::sdk::{Buf, Handle, Net, NetError, NetResult, Properties, PtrType};

use crate::net::{IbDev, IbNet, oob_ip, random_psn, set_keepalive};
use crate::proto;
use crate::verbs::{Cq, Mr, Qp, RemoteQp, sys};

/// Longest `connect` waits for every peer's side channel and QP metadata.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest `regMrSym` waits for every peer's record of the same window.
pub const WINDOW_WAIT: Duration = Duration::from_secs(60);
/// Longest a post waits for room in a peer's send queue.
pub const POST_WAIT: Duration = Duration::from_secs(60);
/// Send-queue depth of each RMA QP (the last work request of every operation is
/// signalled; RC completes a QP's work in order, so its completion retires the
/// unsignalled ones before it).
const SQ_DEPTH: usize = 1024;
/// `test` calls that found work pending between two looks at the side channel of the
/// peer (a `recv` system call each; a dead peer's QP also reports itself through the
/// CQ once its retries run out).
const LIVENESS_EVERY: u64 = 256;
/// Bits of a work request id that hold the sequence number (the peer is above).
const SEQ_BITS: u32 = 40;

/// The hello a connecting rank sends on its side-channel socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The connecting rank.
    pub rank: u32,
    /// The group's size as that rank sees it.
    pub nranks: u32,
}

impl Hello {
    /// Encoded length.
    pub const LEN: usize = 12;
    const MAGIC: u32 = 0x4d52_4249; // "IBRM"

    /// Wire form: magic, rank, nranks (little-endian `u32`s).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&Self::MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..12].copy_from_slice(&self.nranks.to_le_bytes());
        b
    }

    /// Reads [`Hello::encode`]'s form.
    pub fn decode(b: &[u8; Self::LEN]) -> Result<Self, String> {
        let w = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if w(0) != Self::MAGIC {
            return Err(format!(
                "hello magic {:#x}, expected {:#x} (not a ferroccl IB RMA peer)",
                w(0),
                Self::MAGIC
            ));
        }
        Ok(Hello {
            rank: w(4),
            nranks: w(8),
        })
    }
}

/// One rank's record of a symmetric window, all-gathered by `regMrSym`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WinRecord {
    /// The window's number in the group (registration order).
    pub id: u32,
    /// Address of its first byte on that rank.
    pub addr: u64,
    /// Its length, bytes.
    pub len: u64,
    /// The rkey covering it.
    pub rkey: u32,
}

impl WinRecord {
    /// Encoded length.
    pub const LEN: usize = 24;

    /// Wire form: id, addr, len, rkey (little-endian).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.id.to_le_bytes());
        b[4..12].copy_from_slice(&self.addr.to_le_bytes());
        b[12..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Reads [`WinRecord::encode`]'s form.
    pub fn decode(b: &[u8; Self::LEN]) -> WinRecord {
        WinRecord {
            id: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            addr: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
            len: u64::from_le_bytes(b[12..20].try_into().expect("8 bytes")),
            rkey: u32::from_le_bytes(b[20..24].try_into().expect("4 bytes")),
        }
    }

    /// `[off, off + size)` lies inside the window.
    pub fn contains(&self, off: usize, size: usize) -> bool {
        off.checked_add(size).is_some_and(|end| end as u64 <= self.len)
    }
}

/// A work request id: the peer above [`SEQ_BITS`], the per-peer sequence number below.
pub fn wr_id(peer: usize, seq: u64) -> u64 {
    ((peer as u64) << SEQ_BITS) | (seq & ((1 << SEQ_BITS) - 1))
}

/// The `(peer, seq)` of a [`wr_id`].
pub fn wr_id_parts(id: u64) -> (usize, u64) {
    ((id >> SEQ_BITS) as usize, id & ((1 << SEQ_BITS) - 1))
}

/// The atomic's operand for a signal: what the word gains.
pub fn signal_delta(op: SignalOp, value: u64) -> u64 {
    op.delta(value)
}

/// `[0, size)` cut into pieces of at most `max` bytes (one for `size` ≤ `max`).
pub fn pieces(size: usize, max: usize) -> Vec<(usize, usize)> {
    let max = max.max(1);
    (0..size.div_ceil(max))
        .map(|i| (i * max, max.min(size - i * max)))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn sys_err(e: impl std::fmt::Display) -> NetError {
    NetError::System(e.to_string())
}

/// The plugin: the IB net plugin's ports.
#[derive(Debug)]
pub struct IbRma {
    net: IbNet,
    enabled: bool,
}

/// A listening endpoint (the side channel's socket).
#[derive(Debug)]
pub struct IbRmaListen {
    dev: Arc<IbDev>,
    listener: TcpListener,
}

/// One peer's QP and its completion accounting.
struct PeerQp {
    qp: Qp,
    /// Sequence number of the last work request posted.
    posted: u64,
    /// Sequence number of the last work request completed (in order, RC: a signalled
    /// completion retires every unsignalled request before it).
    done: u64,
    /// Why the peer is unusable, once it is.
    dead: Option<NetError>,
}

/// What `test` and the posts share. Field order is drop order: the QPs, then the
/// loopback partner, then the CQ.
struct State {
    peers: Vec<PeerQp>,
    loop_peer: Qp,
    cq: Cq,
    polls: u64,
}

/// The group's side (`collComm`); RMA contexts and requests hold it.
pub struct Group {
    rank: usize,
    nranks: usize,
    max_msg: usize,
    st: Mutex<State>,
    /// Side-channel sockets, by rank (`None` for this rank).
    socks: Vec<Option<TcpStream>>,
    /// What each peer's side channel brought: its window records.
    wins: Mutex<Vec<PeerWins>>,
    /// Serialises registrations (the window numbers); the next number.
    next_win: Mutex<u32>,
    /// The first error any peer hit (`queryLastError`).
    failed: AtomicBool,
    /// The 8-byte registered target of the atomics' fetched values (ignored).
    scratch_mr: Mr,
    scratch: Box<u64>,
    dev: Arc<IbDev>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IbRmaGroup(rank {} of {}, {:?})", self.rank, self.nranks, self.dev)
    }
}

/// A peer's window records as read from its side channel.
#[derive(Debug, Default)]
struct PeerWins {
    /// Bytes of a record not yet complete.
    partial: Vec<u8>,
    /// Its records, by window number.
    recs: Vec<WinRecord>,
    /// Why the side channel is unusable (EOF: the peer is gone), once it is.
    gone: Option<String>,
}

impl PeerWins {
    /// Appends `bytes`, parsing the complete records (which must come in order).
    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.partial.extend_from_slice(bytes);
        let whole = self.partial.len() / WinRecord::LEN * WinRecord::LEN;
        for c in self.partial[..whole].chunks_exact(WinRecord::LEN) {
            let r = WinRecord::decode(c.try_into().expect("one record"));
            if r.id as usize != self.recs.len() {
                return Err(format!(
                    "window records out of order: got window {}, expected {} (regMrSym must register windows in the same order on every rank)",
                    r.id,
                    self.recs.len()
                ));
            }
            self.recs.push(r);
        }
        self.partial.drain(..whole);
        Ok(())
    }
}

/// The `collComm`.
#[derive(Debug)]
pub struct IbRmaColl(Arc<Group>);

/// An RMA context: the group's QPs (every context shares them).
#[derive(Debug)]
pub struct IbRmaCtx(Arc<Group>);

/// A symmetric window (`mhandle`): the local registration and every rank's record.
pub struct IbRmaMr {
    mr: Mr,
    /// This rank's record (number, address, length, rkey).
    own: WinRecord,
    local_base: u64,
    local_len: usize,
}

impl std::fmt::Debug for IbRmaMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IbRmaMr({:#x}+{})", self.local_base, self.local_len)
    }
}

/// An outstanding operation: done once its peer's completions reach `seq` (0: done
/// at once, nothing posted).
pub struct IbRmaReq {
    g: Arc<Group>,
    peer: usize,
    seq: u64,
}

impl Group {
    fn fail_peer(&self, st: &mut State, peer: usize, e: NetError) -> NetError {
        let p = &mut st.peers[peer];
        if p.dead.is_none() {
            ferroccl_plugin_api::net_warn!("NET/FerrocclIB/RMA: rank {}: peer rank {peer} failed: {e}", self.rank);
            p.dead = Some(e.clone());
            p.qp.to_error();
        }
        self.failed.store(true, Ordering::Release);
        e
    }

    /// Drains the CQ into the per-peer counters.
    fn poll(&self, st: &mut State) -> NetResult<()> {
        let mut wcs: [sys::ibv_wc; 32] = // SAFETY: all-zero is a valid ibv_wc (plain data).
            unsafe { std::mem::zeroed() };
        loop {
            let n = st.cq.poll(&mut wcs).map_err(NetError::System)?;
            for wc in &wcs[..n] {
                let (peer, seq) = wr_id_parts(wc.wr_id);
                if peer >= st.peers.len() {
                    continue;
                }
                let p = &mut st.peers[peer];
                if wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
                    p.done = p.done.max(seq);
                } else {
                    let v = crate::verbs::Verbs::get().map_err(NetError::System)?;
                    let what = format!(
                        "RMA work to rank {peer} on {}:{} completed with error: {} (status {}, vendor_err {:#x})",
                        self.dev.name,
                        self.dev.port,
                        v.wc_status_str(wc.status),
                        wc.status,
                        wc.vendor_err
                    );
                    use sys::ibv_wc_status as S;
                    let e = match wc.status {
                        S::IBV_WC_WR_FLUSH_ERR => NetError::Remote(what),
                        S::IBV_WC_RETRY_EXC_ERR
                        | S::IBV_WC_RNR_RETRY_EXC_ERR
                        | S::IBV_WC_REM_INV_REQ_ERR
                        | S::IBV_WC_REM_ACCESS_ERR
                        | S::IBV_WC_REM_OP_ERR
                        | S::IBV_WC_REM_ABORT_ERR
                        | S::IBV_WC_REM_INV_RD_REQ_ERR => NetError::Remote(what),
                        _ => NetError::System(what),
                    };
                    self.fail_peer(st, peer, e);
                }
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    /// Reads what `peer`'s side channel has (window records), without blocking unless
    /// `need` names a window whose record has not come yet: then waits for it until
    /// `deadline`. EOF or a socket error marks the peer gone.
    fn pump(&self, wins: &mut [PeerWins], peer: usize, need: Option<u32>, deadline: Instant) -> NetResult<()> {
        let Some(sock) = self.socks.get(peer).and_then(Option::as_ref) else {
            return Ok(());
        };
        let w = &mut wins[peer];
        let mut buf = [0u8; 4096];
        loop {
            if let Some(id) = need
                && (id as usize) < w.recs.len()
            {
                return Ok(());
            }
            if let Some(why) = &w.gone {
                return match need {
                    None => Ok(()),
                    Some(id) => Err(NetError::Remote(format!(
                        "peer rank {peer} {why} before its window {id} was known"
                    ))),
                };
            }
            // SAFETY: a valid socket and buffer; MSG_DONTWAIT never blocks.
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                w.feed(&buf[..n as usize]).map_err(NetError::InvalidUsage)?;
                continue;
            }
            if n == 0 {
                w.gone = Some("closed its side-channel connection (process exited or group closed)".into());
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => {}
                _ => {
                    w.gone = Some(format!("side-channel error: {e}"));
                    continue;
                }
            }
            let Some(id) = need else { return Ok(()) };
            if Instant::now() > deadline {
                return Err(NetError::Timeout(format!(
                    "rank {peer} did not register window {id} within {} s (regMrSym registers windows in the same order on every rank)",
                    WINDOW_WAIT.as_secs()
                )));
            }
            let mut pfd = libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 10) };
        }
    }

    /// `peer`'s record of the window `mr` names (this rank's own for itself).
    fn remote(&self, mr: &IbRmaMr, peer: usize) -> NetResult<WinRecord> {
        if peer >= self.nranks {
            return Err(NetError::InvalidArgument(format!(
                "rank {peer} is not in this group of {}",
                self.nranks
            )));
        }
        if peer == self.rank {
            return Ok(mr.own);
        }
        let mut wins = lock(&self.wins);
        self.pump(&mut wins, peer, Some(mr.own.id), Instant::now() + WINDOW_WAIT)?;
        Ok(wins[peer].recs[mr.own.id as usize])
    }

    /// Why `peer`'s process is gone, if its side channel says so.
    fn peer_gone(&self, peer: usize) -> Option<String> {
        let mut wins = lock(&self.wins);
        let _ = self.pump(&mut wins, peer, None, Instant::now());
        wins.get(peer).and_then(|w| w.gone.clone())
    }

    /// Posts `wrs` (chained here, one operation) to `peer`, only the last signalled
    /// (as NCCL 2.30.7's IB transport signals only the last WR of a send's chain,
    /// `src/transport/net_ib/p2p.cc` `ncclIbMultiSend`); the request of the last.
    fn post(self: &Arc<Self>, peer: usize, wrs: &mut [sys::ibv_send_wr]) -> NetResult<IbRmaReq> {
        if peer >= self.nranks {
            return Err(NetError::InvalidArgument(format!(
                "rank {peer} is not in this group of {}",
                self.nranks
            )));
        }
        if wrs.is_empty() {
            return Ok(IbRmaReq {
                g: self.clone(),
                peer,
                seq: 0,
            });
        }
        let mut st = lock(&self.st);
        let start = Instant::now();
        loop {
            if let Some(e) = &st.peers[peer].dead {
                return Err(e.clone());
            }
            let p = &st.peers[peer];
            if (p.posted - p.done) as usize + wrs.len() <= SQ_DEPTH {
                break;
            }
            self.poll(&mut st)?;
            if start.elapsed() > POST_WAIT {
                return Err(NetError::Timeout(format!(
                    "the send queue to rank {peer} stayed full for {} s",
                    POST_WAIT.as_secs()
                )));
            }
            std::thread::yield_now();
        }
        let first = st.peers[peer].posted + 1;
        let n = wrs.len();
        for (i, w) in wrs.iter_mut().enumerate() {
            w.wr_id = wr_id(peer, first + i as u64);
        }
        wrs[n - 1].send_flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        for i in 0..n - 1 {
            let next: *mut sys::ibv_send_wr = &mut wrs[i + 1];
            wrs[i].next = next;
        }
        wrs[n - 1].next = std::ptr::null_mut();
        if let Err(e) = st.peers[peer].qp.post_send(&mut wrs[0]) {
            return Err(self.fail_peer(&mut st, peer, NetError::System(e)));
        }
        let p = &mut st.peers[peer];
        p.posted += n as u64;
        Ok(IbRmaReq {
            g: self.clone(),
            peer,
            seq: p.posted,
        })
    }

    fn test(&self, req: &IbRmaReq) -> NetResult<bool> {
        if req.seq == 0 {
            return Ok(true);
        }
        let mut st = lock(&self.st);
        self.poll(&mut st)?;
        let p = &st.peers[req.peer];
        if p.done >= req.seq {
            return Ok(true);
        }
        if let Some(e) = &p.dead {
            return Err(e.clone());
        }
        st.polls += 1;
        if st.polls.is_multiple_of(LIVENESS_EVERY)
            && let Some(why) = self.peer_gone(req.peer)
        {
            let pending = st.peers[req.peer].posted - st.peers[req.peer].done;
            let e = NetError::Remote(format!(
                "peer rank {} {why}, with {pending} RMA work request(s) outstanding on {}:{}",
                req.peer, self.dev.name, self.dev.port
            ));
            return Err(self.fail_peer(&mut st, req.peer, e));
        }
        Ok(false)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Flush outstanding work so nothing references windows after close.
        let st = lock(&self.st);
        for p in &st.peers {
            p.qp.to_error();
        }
        st.loop_peer.to_error();
    }
}

fn read_exact_by(s: &mut TcpStream, b: &mut [u8], deadline: Instant, what: &str) -> NetResult<()> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left)).map_err(sys_err)?;
    s.read_exact(b).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            NetError::Timeout(format!("{what}: nothing within the deadline"))
        }
        _ => NetError::Remote(format!("{what}: {e}")),
    })
}

fn remote_of(g: &Group, m: &Xfer<'_, IbRmaMr>) -> NetResult<WinRecord> {
    let w = g.remote(m.remote, m.rank)?;
    if !w.contains(m.remote_off, m.size) {
        return Err(NetError::InvalidArgument(format!(
            "{} B at offset {} pass the end of rank {}'s window ({} B)",
            m.size, m.remote_off, m.rank, w.len
        )));
    }
    Ok(w)
}

/// Work requests moving `x.size` bytes between the local window and the peer's with
/// `opcode` (RDMA WRITE or READ); `sges` holds their scatter entries.
fn data_wrs(
    x: &Xfer<'_, IbRmaMr>,
    remote: WinRecord,
    max_msg: usize,
    opcode: u32,
    sges: &mut Vec<sys::ibv_sge>,
) -> Vec<sys::ibv_send_wr> {
    let parts = pieces(x.size, max_msg);
    sges.clear();
    for &(o, l) in &parts {
        sges.push(sys::ibv_sge {
            addr: x.local.local_base + (x.local_off + o) as u64,
            length: l as u32,
            lkey: x.local.mr.lkey(),
        });
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, &(o, _))| {
            // SAFETY: all-zero is a valid ibv_send_wr (NULL pointers, zero fields).
            let mut w: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
            w.opcode = opcode;
            w.sg_list = &mut sges[i];
            w.num_sge = 1;
            w.wr.rdma = sys::rdma_t {
                remote_addr: remote.addr + (x.remote_off + o) as u64,
                rkey: remote.rkey,
            };
            w
        })
        .collect()
}

impl Rma for IbRma {
    const NAME: &'static std::ffi::CStr = c"FerrocclIB";
    const HAS_PROGRESS: bool = true;
    type Ctx = ();
    type ListenComm = IbRmaListen;
    type CollComm = IbRmaColl;
    type RmaCtx = IbRmaCtx;
    type Mr = IbRmaMr;
    type Request = IbRmaReq;

    fn new() -> NetResult<Self> {
        let net = <IbNet as Net>::new()?;
        let enabled = crate::params::int_param(&|k| std::env::var(k).ok(), &crate::params::RMA_ENABLE)
            .map_err(|e| NetError::InvalidUsage(e.to_string()))?
            == 1;
        net_info!(
            NCCL_INIT | NCCL_NET,
            "NET/FerrocclIB/RMA: {} device(s) offered{}",
            if enabled { net.devs().len() } else { 0 },
            if enabled {
                ""
            } else {
                " (NCCL_IB_RMA_ENABLE=1 offers them)"
            }
        );
        Ok(IbRma { net, enabled })
    }

    fn init(&self, _comm_id: u64) -> NetResult<()> {
        Ok(())
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(if self.enabled { self.net.devs().len() } else { 0 })
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        self.net.properties(dev)
    }

    fn listen(&self, _ctx: &(), dev: usize, handle: &mut Handle) -> NetResult<IbRmaListen> {
        let d = self
            .net
            .devs()
            .get(dev)
            .ok_or_else(|| NetError::InvalidArgument(format!("device {dev} out of range")))?
            .clone();
        let ip = oob_ip(&d);
        let listener = TcpListener::bind((ip, 0)).map_err(|e| sys_err(format!("bind side channel on {ip}: {e}")))?;
        let addr = listener.local_addr().map_err(sys_err)?;
        proto::ListenHandle {
            addr,
            magic: proto::MAGIC,
        }
        .encode(handle);
        Ok(IbRmaListen { dev: d, listener })
    }

    fn connect(&self, _ctx: &(), handles: &[Handle], rank: usize, listen: &mut IbRmaListen) -> NetResult<IbRmaColl> {
        let n = handles.len();
        if rank >= n {
            return Err(NetError::InvalidArgument(format!("rank {rank} of a group of {n}")));
        }
        let dev = listen.dev.clone();
        let p = self.net.params();
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let addrs = handles
            .iter()
            .map(|h| proto::ListenHandle::decode(h).map(|l| l.addr))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| NetError::InvalidArgument(e.to_string()))?;

        // Side channels: connect to the higher ranks, accept the lower ones.
        let mut socks: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for (q, addr) in addrs.iter().enumerate().skip(rank + 1) {
            let mut s = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
                .map_err(|e| NetError::Remote(format!("side-channel connect to rank {q} at {addr}: {e}")))?;
            let _ = s.set_nodelay(true);
            set_keepalive(&s);
            s.write_all(
                &Hello {
                    rank: rank as u32,
                    nranks: n as u32,
                }
                .encode(),
            )
            .map_err(|e| NetError::Remote(format!("hello to rank {q}: {e}")))?;
            socks[q] = Some(s);
        }
        listen.listener.set_nonblocking(true).map_err(sys_err)?;
        while socks[..rank].iter().any(Option::is_none) {
            match listen.listener.accept() {
                Ok((mut s, from)) => {
                    s.set_nonblocking(false).map_err(sys_err)?;
                    let mut b = [0u8; Hello::LEN];
                    if read_exact_by(&mut s, &mut b, deadline, "hello").is_err() {
                        continue;
                    }
                    match Hello::decode(&b) {
                        Ok(h)
                            if (h.rank as usize) < rank
                                && h.nranks as usize == n
                                && socks[h.rank as usize].is_none() =>
                        {
                            let _ = s.set_nodelay(true);
                            set_keepalive(&s);
                            socks[h.rank as usize] = Some(s);
                        }
                        Ok(h) => ferroccl_plugin_api::net_warn!(
                            "NET/FerrocclIB/RMA: rank {rank}: refused a side channel from {from} claiming rank {} of {}",
                            h.rank,
                            h.nranks
                        ),
                        Err(e) => ferroccl_plugin_api::net_warn!(
                            "NET/FerrocclIB/RMA: rank {rank}: refused a side channel from {from}: {e}"
                        ),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<usize> = (0..rank).filter(|&q| socks[q].is_none()).collect();
                        return Err(NetError::Timeout(format!(
                            "rank {rank}: ranks {missing:?} did not connect within {} s",
                            CONNECT_TIMEOUT.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(sys_err(format!("accept: {e}"))),
            }
        }

        // One QP per peer on one CQ; this rank's slot is a loopback pair.
        let cq = Cq::new(dev.context(), ((n + 1) * SQ_DEPTH) as i32).map_err(NetError::System)?;
        let mk = || Qp::new_rc(&dev.pd, &cq, SQ_DEPTH as u32, 1).map_err(NetError::System);
        let qps = (0..n).map(|_| mk()).collect::<NetResult<Vec<_>>>()?;
        let loop_peer = mk()?;
        let psns: Vec<u32> = (0..n).map(|_| random_psn()).collect();
        let loop_psn = random_psn();
        let tc = p.effective_tc(-1);
        let sl = p.effective_sl(-1);
        let meta = |qp: &Qp, psn: u32| proto::ConnMeta {
            qpns: vec![qp.qpn()],
            psns: vec![psn],
            lid: dev.lid,
            port: dev.port,
            link_layer: dev.link_layer,
            mtu: dev.mtu as u8,
            gid_index: dev.gid_index,
            gid: dev.gid,
            buf_addr: 0,
            buf_rkey: 0,
            tc,
            sl,
        };
        for (q, s) in socks.iter_mut().enumerate() {
            if let Some(s) = s {
                s.write_all(&meta(&qps[q], psns[q]).encode())
                    .map_err(|e| NetError::Remote(format!("QP metadata to rank {q}: {e}")))?;
            }
        }
        let mut settings = dev.settings(p, tc, sl, dev.mtu as u8);
        settings.remote_atomic = true;
        let connect = |qp: &Qp, psn: u32, m: &proto::ConnMeta, q: usize| {
            let remote = RemoteQp {
                qpn: m.qpns[0],
                psn: m.psns[0],
                lid: m.lid,
                gid: m.gid,
                global: dev.is_roce() || m.lid == 0,
            };
            let mut s = settings;
            s.mtu = s.mtu.min(u32::from(m.mtu));
            qp.connect(&s, psn, &remote)
                .map_err(|e| NetError::System(format!("RMA QP to rank {q}: {e}")))
        };
        for (q, s) in socks.iter_mut().enumerate() {
            if let Some(s) = s {
                let mut len = [0u8; 4];
                read_exact_by(s, &mut len, deadline, &format!("QP metadata of rank {q}"))?;
                let len = u32::from_le_bytes(len) as usize;
                if len > 4096 {
                    return Err(NetError::Remote(format!("QP metadata of rank {q}: frame of {len} B")));
                }
                let mut body = vec![0u8; len];
                read_exact_by(s, &mut body, deadline, &format!("QP metadata of rank {q}"))?;
                let m = proto::ConnMeta::decode(&body)
                    .map_err(|e| NetError::Remote(format!("QP metadata of rank {q}: {e}")))?;
                if m.link_layer != dev.link_layer {
                    return Err(NetError::Remote(format!(
                        "rank {q}'s link layer {} differs from local {}",
                        m.link_layer, dev.link_layer
                    )));
                }
                connect(&qps[q], psns[q], &m, q)?;
            }
        }
        let own = meta(&qps[rank], psns[rank]);
        connect(&loop_peer, loop_psn, &own, rank)?;
        connect(&qps[rank], psns[rank], &meta(&loop_peer, loop_psn), rank)?;
        // Every QP is at RTS on both sides before anyone posts.
        for (q, s) in socks.iter_mut().enumerate() {
            if let Some(s) = s {
                s.write_all(b"R")
                    .map_err(|e| NetError::Remote(format!("ready to rank {q}: {e}")))?;
            }
        }
        for (q, s) in socks.iter_mut().enumerate() {
            if let Some(s) = s {
                let mut b = [0u8; 1];
                read_exact_by(s, &mut b, deadline, &format!("ready of rank {q}"))?;
                if b[0] != b'R' {
                    return Err(NetError::Remote(format!("rank {q} sent {:#x} for ready", b[0])));
                }
            }
        }
        let mut scratch = Box::new(0u64);
        let scratch_mr = dev
            .pd
            .reg_mr_access((&mut *scratch as *mut u64).cast(), 8, false)
            .map_err(NetError::System)?;
        let peers = qps
            .into_iter()
            .map(|qp| PeerQp {
                qp,
                posted: 0,
                done: 0,
                dead: None,
            })
            .collect();
        net_info!(
            NCCL_INIT | NCCL_NET,
            "NET/FerrocclIB/RMA: rank {rank} of {n} connected on {}:{} (one RC QP per peer, TC {tc}, SL {sl})",
            dev.name,
            dev.port
        );
        Ok(IbRmaColl(Arc::new(Group {
            rank,
            nranks: n,
            max_msg: dev.max_msg,
            st: Mutex::new(State {
                peers,
                loop_peer,
                cq,
                polls: 0,
            }),
            wins: Mutex::new((0..n).map(|_| PeerWins::default()).collect()),
            socks,
            next_win: Mutex::new(0),
            failed: AtomicBool::new(false),
            scratch_mr,
            scratch,
            dev,
        })))
    }

    fn create_context(&self, coll: &IbRmaColl, config: &RmaConfig) -> NetResult<IbRmaCtx> {
        if config.n_contexts == 0 {
            return Err(NetError::InvalidArgument("createContext with 0 contexts".into()));
        }
        Ok(IbRmaCtx(coll.0.clone()))
    }

    fn reg_mr_sym(&self, coll: &IbRmaColl, buf: Buf, ty: PtrType, _mr_flags: u64) -> NetResult<IbRmaMr> {
        if ty != PtrType::Host {
            return Err(NetError::InvalidArgument(format!(
                "RMA/FerrocclIB registers host memory only, not {ty:?}"
            )));
        }
        let g = &coll.0;
        // The page-aligned range (a zero-length window still gets a key).
        let page = 4096usize;
        let start = (buf.ptr as usize) & !(page - 1);
        let end = (buf.ptr as usize + buf.len.max(1)).div_ceil(page) * page;
        let mr = g
            .dev
            .pd
            .reg_mr_access(start as *mut u8, end - start, true)
            .map_err(NetError::System)?;
        let mut next = lock(&g.next_win);
        let own = WinRecord {
            id: *next,
            addr: buf.ptr as u64,
            len: buf.len as u64,
            rkey: mr.rkey(),
        };
        // NCCL 2.30.7 src/transport/net_ib/gin.cc (ncclGinIbProxyRegMrSymDmaBuf)
        // all-gathers the base addresses and rkeys; here this rank's record goes to
        // every peer over the group's side channels, read when first needed.
        for (q, s) in g.socks.iter().enumerate() {
            if let Some(mut s) = s.as_ref() {
                s.write_all(&own.encode())
                    .map_err(|e| NetError::Remote(format!("window record to rank {q}: {e}")))?;
            }
        }
        *next += 1;
        Ok(IbRmaMr {
            mr,
            own,
            local_base: buf.ptr as u64,
            local_len: buf.len,
        })
    }

    fn iput(&self, ctx: &IbRmaCtx, x: Xfer<'_, IbRmaMr>, signal: Option<Signal<'_, IbRmaMr>>) -> NetResult<IbRmaReq> {
        let g = &ctx.0;
        let remote = remote_of(g, &x)?;
        let mut sges = Vec::new();
        let mut wrs = data_wrs(&x, remote, g.max_msg, sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, &mut sges);
        let mut scratch_sge = sys::ibv_sge {
            addr: &*g.scratch as *const u64 as u64,
            length: 8,
            lkey: g.scratch_mr.lkey(),
        };
        if let Some(s) = signal {
            let w = g.remote(s.window, x.rank)?;
            if !w.contains(s.off, 8) {
                return Err(NetError::InvalidArgument(format!(
                    "signal word at offset {} passes the end of rank {}'s window ({} B)",
                    s.off, x.rank, w.len
                )));
            }
            let addr = w.addr + s.off as u64;
            if !addr.is_multiple_of(8) {
                return Err(NetError::InvalidArgument(format!(
                    "signal word at {addr:#x} on rank {} is not 8-byte aligned (an IB atomic's rule)",
                    x.rank
                )));
            }
            // SAFETY: all-zero is a valid ibv_send_wr (NULL pointers, zero fields).
            let mut a: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
            a.opcode = sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
            a.sg_list = &mut scratch_sge;
            a.num_sge = 1;
            // No IBV_SEND_FENCE: a fence only holds a WR behind earlier READs and
            // atomics, and the RC responder already executes this QP's WRITEs before
            // the atomic that follows them. (With the fence, one conformance run on
            // soft-RoCE, Debian 12's 6.1 kernel, had a put-with-signal never complete;
            // the cause was not established.)
            a.wr.atomic = sys::atomic_t {
                remote_addr: addr,
                compare_add: signal_delta(s.op, s.value),
                swap: 0,
                rkey: w.rkey,
            };
            wrs.push(a);
        }
        g.post(x.rank, &mut wrs)
    }

    fn iget(&self, ctx: &IbRmaCtx, x: Xfer<'_, IbRmaMr>) -> NetResult<IbRmaReq> {
        let g = &ctx.0;
        let remote = remote_of(g, &x)?;
        let mut sges = Vec::new();
        let mut wrs = data_wrs(&x, remote, g.max_msg, sys::ibv_wr_opcode::IBV_WR_RDMA_READ, &mut sges);
        g.post(x.rank, &mut wrs)
    }

    fn iflush(&self, ctx: &IbRmaCtx, _context: usize, _mr: &IbRmaMr, rank: usize) -> NetResult<IbRmaReq> {
        let g = &ctx.0;
        if rank >= g.nranks {
            return Err(NetError::InvalidArgument(format!(
                "rank {rank} is not in this group of {}",
                g.nranks
            )));
        }
        let st = lock(&g.st);
        if let Some(e) = &st.peers[rank].dead {
            return Err(e.clone());
        }
        Ok(IbRmaReq {
            g: g.clone(),
            peer: rank,
            seq: st.peers[rank].posted,
        })
    }

    fn test(&self, _coll: &IbRmaColl, req: &mut IbRmaReq) -> NetResult<bool> {
        req.g.test(req)
    }

    fn progress(&self, ctx: &IbRmaCtx) -> NetResult<()> {
        let mut st = lock(&ctx.0.st);
        ctx.0.poll(&mut st)
    }

    fn query_last_error(&self, ctx: &IbRmaCtx) -> NetResult<bool> {
        Ok(ctx.0.failed.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_rejects_other_magic() {
        let h = Hello { rank: 5, nranks: 8 };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        let mut b = h.encode();
        b[0] ^= 1;
        assert!(Hello::decode(&b).unwrap_err().contains("magic"));
    }

    #[test]
    fn window_record_round_trips_and_bounds() {
        let r = WinRecord {
            id: 3,
            addr: 0x7f00_1234_5678,
            len: 4096,
            rkey: 0xdead_beef,
        };
        assert_eq!(WinRecord::decode(&r.encode()), r);
        assert!(r.contains(0, 4096));
        assert!(r.contains(4088, 8));
        assert!(!r.contains(4089, 8));
        assert!(r.contains(4096, 0));
        assert!(!r.contains(usize::MAX, 2));
    }

    #[test]
    fn window_records_parse_across_partial_reads_and_must_come_in_order() {
        let rec = |id| WinRecord {
            id,
            addr: 0x1000 * u64::from(id + 1),
            len: 64,
            rkey: 7 + id,
        };
        let mut bytes = rec(0).encode().to_vec();
        bytes.extend_from_slice(&rec(1).encode());
        let mut w = PeerWins::default();
        // Split at every awkward place: a record arrives in pieces.
        w.feed(&bytes[..5]).unwrap();
        assert!(w.recs.is_empty());
        w.feed(&bytes[5..30]).unwrap();
        assert_eq!(w.recs, vec![rec(0)]);
        w.feed(&bytes[30..]).unwrap();
        assert_eq!(w.recs, vec![rec(0), rec(1)]);
        assert!(w.partial.is_empty());
        // Window 3 where 2 is due: the ranks registered in different orders.
        let e = w.feed(&rec(3).encode()).unwrap_err();
        assert!(e.contains("got window 3, expected 2"), "{e}");
    }

    #[test]
    fn wr_ids_keep_peer_and_sequence() {
        for (p, s) in [(0usize, 1u64), (7, 12345), (1 << 20, (1 << SEQ_BITS) - 1)] {
            assert_eq!(wr_id_parts(wr_id(p, s)), (p, s));
        }
        assert_ne!(wr_id(1, 5), wr_id(2, 5));
    }

    #[test]
    fn signal_delta_follows_the_op() {
        assert_eq!(signal_delta(SignalOp::Inc, 99), 1);
        assert_eq!(signal_delta(SignalOp::Add, 99), 99);
    }

    #[test]
    fn pieces_cover_exactly() {
        assert!(pieces(0, 10).is_empty());
        assert_eq!(pieces(10, 10), vec![(0, 10)]);
        assert_eq!(pieces(25, 10), vec![(0, 10), (10, 10), (20, 5)]);
        let p = pieces((1 << 30) + 3, 1 << 30);
        assert_eq!(p, vec![(0, 1 << 30), (1 << 30, 3)]);
    }
}
