//! The per-rank bootstrap network: ring setup through the root, then ring
//! all-gather, tagged point-to-point messages, barrier and broadcast
//! (NCCL 2.30 `bootstrapInit`, `bootstrapAllGather`, `bootstrapSend`/`Recv`,
//! `bootstrapBarrier`, `bootstrapBroadcast`), plus liveness probes, failure notices
//! and an all-to-all exchange among survivors for failure reports (ferroccl only).

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak, mpsc};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Result, fmt_duration, try_vec_with};
use super::id::{NCCL_MAGIC, UniqueId};
use super::reactor::{self, Reactor, Service, Stats, Verdict};
use super::root::{self, MAX_REPLY_BYTES, RankInfo, Reply};
use super::wire::{self, Deadline, Flags, POLL_SLICE, Retry};
use super::{BootstrapConfig, MAX_NRANKS, TIMEOUT_SLACK, bind_addr_for, bootstrap_interface};

/// Largest message [`Bootstrap::send`] / the collectives carry (1 GiB); a peer
/// announcing more is a protocol error. Memory for a message grows with the bytes
/// that arrive, not with the announced length.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// Largest blob [`Bootstrap::exchange_among_survivors`] carries per rank (1 MiB).
pub const MAX_SURVIVOR_BYTES: usize = 1 << 20;
/// How long a timed-out receive waits for each liveness probe's answer while it
/// looks for the rank to blame (the whole search stays within [`TIMEOUT_SLACK`]).
pub const PROBE_WAIT: Duration = Duration::from_secs(2);

const KIND_USER: u8 = 0;
const KIND_ALLGATHER: u8 = 1;
const KIND_BARRIER: u8 = 2;
const KIND_BROADCAST: u8 = 3;
const KIND_PROBE: u8 = 4;
const KIND_PROBE_ANSWER: u8 = 5;
const KIND_FAILED: u8 = 6;
const KIND_SURVIVOR: u8 = 7;
const HEADER: usize = 5;
const HELLO_BYTES: usize = 8;
/// Failure notices are written with this bound (best effort).
const NOTICE_WRITE_WAIT: Duration = Duration::from_secs(1);
/// Longest reason text carried in a notice or probe answer.
const MAX_REASON_BYTES: usize = 1024;
/// Concurrent senders of [`Bootstrap::exchange_among_survivors`].
const SURVIVOR_SENDERS: usize = 16;

type Key = (usize, u8, u32);

/// A failure reported by another rank.
#[derive(Clone, Debug)]
struct Notice {
    culprit: usize,
    reporter: usize,
    reason: String,
}

#[derive(Default)]
struct MailState {
    queues: HashMap<Key, VecDeque<Vec<u8>>>,
    /// Live incoming connections per peer rank.
    live: Vec<u32>,
    /// A connection from this peer ended (EOF or error) and none is live.
    closed: Vec<Option<String>>,
    /// The first failure notice received.
    notice: Option<Notice>,
}

struct Mailbox {
    st: Mutex<MailState>,
    cv: Condvar,
}

/// What a thread of this rank is blocked on (answered to liveness probes).
struct WaitInfo {
    peer: usize,
    what: String,
    since: Instant,
}

struct Inner {
    rank: usize,
    nranks: usize,
    magic: u64,
    timeout: Duration,
    retry: Retry,
    abort: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    listen_addr: SocketAddr,
    addrs: Mutex<Vec<Option<SocketAddr>>>,
    out: Vec<Mutex<Option<TcpStream>>>,
    mail: Mailbox,
    coll: Mutex<()>,
    reactor: Mutex<Option<Reactor>>,
    stats: Arc<Stats>,
    waits: Mutex<Vec<(u64, WaitInfo)>>,
    wait_seq: AtomicU64,
    probe_seq: AtomicU32,
    /// (culprit, reason) of the first failure this rank's bootstrap saw.
    last_failure: Mutex<Option<(usize, String)>>,
    forwarded: AtomicBool,
}

/// One rank's bootstrap network. Cheap to share (`&self` methods, `Send + Sync`).
///
/// Collectives ([`allgather`](Self::allgather), [`barrier`](Self::barrier),
/// [`broadcast`](Self::broadcast)) must be called in the same order on every rank;
/// point-to-point messages are matched by (peer, tag) in FIFO order per pair, so
/// they may be received in any tag order. Dropping it closes it.
///
/// Threads: one event-loop thread serves every incoming connection, one answers
/// liveness probes; outgoing connections are written by the calling thread.
pub struct Bootstrap {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.inner.rank)
            .field("nranks", &self.inner.nranks)
            .field("listen_addr", &self.inner.listen_addr)
            .finish()
    }
}

/// Where one rank stands after [`Bootstrap::exchange_among_survivors`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SurvivorStatus {
    /// It answered with these bytes (for this rank: its own blob).
    Answered(Vec<u8>),
    /// It is gone: its connection to us closed or it could not be reached (why).
    Gone(String),
    /// No answer before the deadline (stopped, hung, slow, or not calling the exchange).
    Silent,
}

/// Result of [`Bootstrap::exchange_among_survivors`]: one status per rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survivors {
    /// Indexed by rank; `nranks` entries.
    pub status: Vec<SurvivorStatus>,
}

impl Survivors {
    /// Ranks that answered (this rank included), ascending.
    pub fn answered(&self) -> Vec<usize> {
        (0..self.status.len())
            .filter(|&r| matches!(self.status[r], SurvivorStatus::Answered(_)))
            .collect()
    }

    /// Ranks that did not answer (gone or silent), ascending.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.status.len())
            .filter(|&r| !matches!(self.status[r], SurvivorStatus::Answered(_)))
            .collect()
    }

    /// The bytes `rank` answered with, if it answered.
    pub fn data(&self, rank: usize) -> Option<&[u8]> {
        match self.status.get(rank) {
            Some(SurvivorStatus::Answered(b)) => Some(b),
            _ => None,
        }
    }
}

fn encode_msg(kind: u8, tag: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + data.len());
    v.push(kind);
    v.extend_from_slice(&tag.to_ne_bytes());
    v.extend_from_slice(data);
    v
}

fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A liveness probe's outcome.
#[derive(Debug)]
enum Probe {
    /// Alive, in no bootstrap wait, no failure seen.
    Idle,
    /// Alive and blocked on `peer` for `waited`, for `what`.
    Waiting {
        peer: usize,
        what: String,
        waited: Duration,
    },
    /// Alive; an earlier bootstrap operation of it failed because of `culprit`.
    Failed { culprit: usize, reason: String },
    /// No answer within the probe wait.
    Silent,
    /// Connection refused or closed.
    Gone(String),
}

const REPORT_IDLE: u8 = 0;
const REPORT_WAITING: u8 = 1;
const REPORT_FAILED: u8 = 2;

fn decode_report(b: &[u8], nranks: usize) -> Option<Probe> {
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|x| u32::from_ne_bytes(x.try_into().expect("4 bytes")) as usize)
    };
    match *b.first()? {
        REPORT_IDLE => Some(Probe::Idle),
        REPORT_WAITING => {
            let peer = u32_at(1).filter(|&p| p < nranks)?;
            let ms = u64::from_ne_bytes(b.get(5..13)?.try_into().expect("8 bytes"));
            Some(Probe::Waiting {
                peer,
                what: String::from_utf8_lossy(&b[13..]).into_owned(),
                waited: Duration::from_millis(ms),
            })
        }
        REPORT_FAILED => {
            let culprit = u32_at(1).filter(|&p| p < nranks)?;
            Some(Probe::Failed {
                culprit,
                reason: String::from_utf8_lossy(&b[5..]).into_owned(),
            })
        }
        _ => None,
    }
}

/// The event-loop side of a rank's listener: hellos, then messages into the mailbox.
struct PeerService {
    inner: Weak<Inner>,
    rank: usize,
    nranks: usize,
    probes: mpsc::Sender<(usize, u32)>,
}

impl Service for PeerService {
    fn on_opening(&mut self, _from: SocketAddr, hello: Vec<u8>) -> Verdict {
        if hello.len() != HELLO_BYTES {
            return Verdict::Reject(format!("hello of {} bytes (expected {HELLO_BYTES})", hello.len()));
        }
        let peer = u32::from_ne_bytes(hello[..4].try_into().expect("4 bytes")) as usize;
        let n = u32::from_ne_bytes(hello[4..].try_into().expect("4 bytes")) as usize;
        if n != self.nranks || peer >= n || peer == self.rank {
            return Verdict::Reject(format!(
                "claims rank {peer} of {n} (we are rank {} of {})",
                self.rank, self.nranks
            ));
        }
        let Some(inner) = self.inner.upgrade() else {
            return Verdict::Close;
        };
        let mut st = inner.mail.st.lock().expect("mail lock");
        st.live[peer] += 1;
        st.closed[peer] = None;
        Verdict::Keep(peer)
    }

    fn on_frame(&mut self, peer: usize, _from: SocketAddr, mut m: Vec<u8>) -> std::result::Result<(), String> {
        if m.len() < HEADER {
            return Err(format!("malformed message of {} bytes", m.len()));
        }
        let kind = m[0];
        let tag = u32::from_ne_bytes(m[1..HEADER].try_into().expect("4 bytes"));
        let Some(inner) = self.inner.upgrade() else {
            return Ok(());
        };
        match kind {
            KIND_PROBE => {
                let _ = self.probes.send((peer, tag));
            }
            KIND_FAILED => {
                let culprit = m
                    .get(HEADER..HEADER + 4)
                    .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")) as usize)
                    .filter(|&c| c < self.nranks)
                    .ok_or_else(|| format!("malformed failure notice of {} bytes", m.len()))?;
                let reason = String::from_utf8_lossy(&m[HEADER + 4..]).into_owned();
                let mut st = inner.mail.st.lock().expect("mail lock");
                if st.notice.is_none() {
                    st.notice = Some(Notice {
                        culprit,
                        reporter: peer,
                        reason,
                    });
                }
                drop(st);
                inner.mail.cv.notify_all();
            }
            KIND_USER | KIND_ALLGATHER | KIND_BARRIER | KIND_BROADCAST | KIND_PROBE_ANSWER | KIND_SURVIVOR => {
                m.drain(..HEADER);
                let mut st = inner.mail.st.lock().expect("mail lock");
                st.queues.entry((peer, kind, tag)).or_default().push_back(m);
                drop(st);
                inner.mail.cv.notify_all();
            }
            other => return Err(format!("unknown message kind {other}")),
        }
        Ok(())
    }

    fn on_close(&mut self, peer: usize, _from: SocketAddr, why: String) {
        let Some(inner) = self.inner.upgrade() else { return };
        let aborted = inner.abort.load(Ordering::Relaxed);
        let mut st = inner.mail.st.lock().expect("mail lock");
        st.live[peer] = st.live[peer].saturating_sub(1);
        if st.live[peer] == 0 && !aborted {
            st.closed[peer] = Some(why);
        }
        drop(st);
        inner.mail.cv.notify_all();
    }

    fn on_tick(&mut self) -> bool {
        self.inner.strong_count() > 0
    }
}

/// The event-loop side of the root-reply listener used during init.
struct ReplyService {
    rank: usize,
    tx: mpsc::Sender<Reply>,
}

impl Service for ReplyService {
    fn on_opening(&mut self, _from: SocketAddr, b: Vec<u8>) -> Verdict {
        match Reply::decode(&b) {
            Ok(r) => {
                let _ = self.tx.send(r);
                Verdict::Close
            }
            Err(e) => Verdict::Reject(format!("rank {}: bad root reply: {e}", self.rank)),
        }
    }
}

/// Removes its wait from [`Inner::waits`] when dropped.
struct WaitGuard<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut w) = self.inner.waits.lock() {
            w.retain(|(i, _)| *i != self.id);
        }
    }
}

impl Bootstrap {
    /// `bootstrapInit`: joins the bootstrap of `id` as `rank` of `nranks`.
    ///
    /// Binds this rank's listeners on the bootstrap interface, reports to the root
    /// (rank 0 first starts the root itself when `config.comm_id` is set; that root
    /// knows nranks and rejects records that disagree), waits for the root's reply
    /// (its successor's address, or the root's error naming missing ranks and rejected
    /// records), connects the ring and all-gathers every rank's listen address.
    ///
    /// Errors: `rank`/`nranks` invalid or nranks above [`MAX_NRANKS`]
    /// ([`BootstrapError::InvalidArgument`]); [`BootstrapError::Alloc`];
    /// [`BootstrapError::Root`] with the root's message; [`BootstrapError::Timeout`]
    /// if the root could not be reached within `timeout` or no reply came within
    /// `timeout` + [`TIMEOUT_SLACK`]; [`BootstrapError::Aborted`]; peer and socket errors.
    pub fn init(id: &UniqueId, rank: usize, nranks: usize, config: &BootstrapConfig) -> Result<Self> {
        if nranks == 0 || rank >= nranks {
            return Err(BootstrapError::InvalidArgument(format!(
                "rank {rank} is not in 0..nranks (nranks {nranks})"
            )));
        }
        if nranks > MAX_NRANKS {
            return Err(BootstrapError::InvalidArgument(format!(
                "nranks {nranks} is above the bootstrap's limit of {MAX_NRANKS} ranks"
            )));
        }
        let root_addr = id.root_addr()?;
        let magic = id.magic();
        let abort = config.abort.clone();
        let retry = config.retry();
        let comm_hint = config.comm_id_addr()?;

        // Per-rank state, allocated fallibly before anything is started.
        let addrs = try_vec_with(nranks, "the bootstrap address table", || None)?;
        let out = try_vec_with(nranks, "the bootstrap connection table", || Mutex::new(None))?;
        let live = try_vec_with(nranks, "the bootstrap connection counts", || 0)?;
        let closed = try_vec_with(nranks, "the bootstrap peer states", || None)?;

        if rank == 0 && comm_hint.is_some() {
            if magic != NCCL_MAGIC && config.magic.is_none() {
                tracing::warn!(target: "ferroccl::bootstrap", "NCCL_COMM_ID is set but the unique id magic is {magic:#x}");
            }
            let listener = wire::listen(root_addr)?;
            root::spawn_root(
                listener,
                root::RootParams {
                    magic,
                    timeout: config.timeout,
                    retry,
                    abort: abort.clone(),
                    nranks: Some(nranks),
                },
            )?;
        }

        let iface = bootstrap_interface(config.ifname.as_deref(), config.family, comm_hint.as_ref())?;
        let bind = bind_addr_for(&iface);

        // Ring / point-to-point listener.
        let ring_listener = wire::listen(bind)?;
        let listen_addr = ring_listener
            .local_addr()
            .map_err(|e| BootstrapError::io("ring listener address", e))?;
        let stats = Arc::new(Stats::default());
        let inner = Arc::new(Inner {
            rank,
            nranks,
            magic,
            timeout: config.timeout,
            retry,
            abort: abort.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            listen_addr,
            addrs: Mutex::new(addrs),
            out,
            mail: Mailbox {
                st: Mutex::new(MailState {
                    queues: HashMap::new(),
                    live,
                    closed,
                    notice: None,
                }),
                cv: Condvar::new(),
            },
            coll: Mutex::new(()),
            reactor: Mutex::new(None),
            stats: stats.clone(),
            waits: Mutex::new(Vec::new()),
            wait_seq: AtomicU64::new(0),
            probe_seq: AtomicU32::new(0),
            last_failure: Mutex::new(None),
            forwarded: AtomicBool::new(false),
        });
        let (probe_tx, probe_rx) = mpsc::channel();
        spawn_responder(Arc::downgrade(&inner), probe_rx)?;
        let r = Reactor::spawn(
            ring_listener,
            "ferroccl-bs-listen",
            reactor::Params {
                name: format!("bootstrap rank {rank} listener {listen_addr}"),
                magic,
                opening_max: HELLO_BYTES,
                frame_max: HEADER + MAX_MESSAGE_BYTES,
                pending_timeout: config.timeout,
                abort: abort.clone(),
            },
            stats,
            PeerService {
                inner: Arc::downgrade(&inner),
                rank,
                nranks,
                probes: probe_tx,
            },
        )?;
        *inner.reactor.lock().expect("reactor lock") = Some(r);
        let bs = Bootstrap { inner };

        // Root-reply listener.
        let reply_listener = wire::listen(bind)?;
        let reply_addr = reply_listener
            .local_addr()
            .map_err(|e| BootstrapError::io("root-reply listener address", e))?;
        let (tx, rx) = mpsc::channel::<Reply>();
        let reply_stats = Arc::new(Stats::default());
        let reply_reactor = Reactor::spawn(
            reply_listener,
            "ferroccl-bs-rootreply",
            reactor::Params {
                name: format!("bootstrap rank {rank} root-reply listener {reply_addr}"),
                magic,
                opening_max: MAX_REPLY_BYTES,
                frame_max: 0,
                pending_timeout: config.timeout,
                abort: abort.clone(),
            },
            reply_stats.clone(),
            ReplyService { rank, tx },
        )?;
        let result = bs.join_root(root_addr, reply_addr, &rx, &reply_stats, config);
        reply_reactor.stop();
        let succ = result?;
        tracing::debug!(target: "ferroccl::bootstrap", "rank {rank}/{nranks}: successor listens on {succ}");

        // Ring: connect to the successor now, learn everyone's address by all-gather.
        let next = (rank + 1) % nranks;
        {
            let mut a = bs.inner.addrs.lock().expect("addrs lock");
            a[next] = Some(succ);
            a[rank] = Some(listen_addr);
        }
        if nranks > 1 {
            let end = Instant::now() + bs.inner.timeout;
            drop(bs.inner.blame(bs.inner.lock_connected(next, end))?);
        }
        let all = bs.allgather(&super::id::encode_socket_address(&listen_addr))?;
        let mut addrs = try_vec_with(nranks, "the bootstrap address table", || None)?;
        for (r, b) in all.iter().enumerate() {
            let a = super::id::decode_socket_address(b).map_err(|e| BootstrapError::Protocol {
                peer: format!("rank {r}"),
                detail: format!("bad listen address in the initial all-gather: {e}"),
            })?;
            addrs[r] = Some(a);
        }
        if addrs[next] != Some(succ) {
            return Err(BootstrapError::Protocol {
                peer: format!("rank {next}"),
                detail: format!("listen address {:?} differs from the root's {succ}", addrs[next]),
            });
        }
        *bs.inner.addrs.lock().expect("addrs lock") = addrs;
        tracing::info!(target: "ferroccl::bootstrap", "rank {rank}/{nranks}: bootstrap ring up (listening on {listen_addr})");
        Ok(bs)
    }

    fn join_root(
        &self,
        root_addr: SocketAddr,
        reply_addr: SocketAddr,
        rx: &mpsc::Receiver<Reply>,
        reply_stats: &Stats,
        config: &BootstrapConfig,
    ) -> Result<SocketAddr> {
        let i = &self.inner;
        let info = RankInfo {
            rank: i.rank,
            nranks: i.nranks,
            reply_addr,
            ring_addr: i.listen_addr,
        };
        let flags = i.flags();
        let what = || format!("connecting to the bootstrap root at {root_addr}");
        let dl = Deadline::after(config.timeout);
        let mut s = wire::connect_bootstrap(root_addr, i.magic, i.retry, &dl, flags, &what)?;
        let _ = s.set_write_timeout(Some(config.timeout));
        wire::write_frame(&mut s, &info.encode(), &|| {
            format!("sending rank {}'s info to the root at {root_addr}", i.rank)
        })?;
        drop(s);
        let dl = Deadline::after(config.timeout + TIMEOUT_SLACK);
        let what = || format!("the root's reply from {root_addr}");
        loop {
            if flags.raised() {
                return Err(BootstrapError::Aborted { what: what() });
            }
            let Some(slice) = dl.slice() else {
                let mut why = format!(
                    "{} (the root reports missing ranks {} after the first rank reaches it; no report came, so the \
                     root is probably dead, stopped or unreachable",
                    what(),
                    fmt_duration(config.timeout)
                );
                if let Some(t) = root::local_root_trouble(root_addr) {
                    why.push_str(&format!("; the root in this process {t}"));
                }
                if let Some(t) = reply_stats.trouble() {
                    why.push_str(&format!("; this rank's root-reply listener {t}"));
                }
                why.push(')');
                return Err(BootstrapError::Timeout {
                    what: why,
                    waited: dl.waited(),
                });
            };
            match rx.recv_timeout(slice) {
                Ok(Reply::Successor(a)) => return Ok(a),
                Ok(Reply::Error(m)) => return Err(BootstrapError::Root(m)),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(BootstrapError::Aborted { what: what() });
                }
            }
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.inner.nranks
    }

    /// The address this rank accepts bootstrap connections on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.listen_addr
    }

    /// Every rank's bootstrap listen address, indexed by rank.
    pub fn peer_addresses(&self) -> Vec<SocketAddr> {
        self.inner
            .addrs
            .lock()
            .expect("addrs lock")
            .iter()
            .map(|a| a.expect("filled by init"))
            .collect()
    }

    /// The abort flag (the one from the config): raising it makes every blocked wait
    /// return [`BootstrapError::Aborted`].
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        self.inner.abort.clone()
    }

    /// Raises the abort flag and closes every connection: blocked waits here return
    /// `Aborted` promptly, and peers waiting on this rank see it close.
    pub fn abort(&self) {
        self.inner.abort.store(true, Ordering::SeqCst);
        self.inner.shutdown();
    }

    /// Closes every connection and stops the listener. Idempotent; messages already
    /// sent are delivered (TCP drains before the FIN). Later calls fail with `Closed`.
    pub fn close(&self) {
        self.inner.shutdown();
    }

    /// Tagged point-to-point send (`bootstrapSend`) of `data` to `peer` (may be self).
    /// Connects on demand (retrying as `NCCL_SOCKET_RETRY_*` say, within the timeout)
    /// and keeps the connection. Does not wait for the receiver to call `recv`, but a
    /// peer that stops reading blocks it for at most the timeout.
    pub fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        let i = &self.inner;
        i.blame(i.send_kind_until(peer, KIND_USER, tag, data, Instant::now() + i.timeout))
    }

    /// Tagged point-to-point receive (`bootstrapRecv`): the oldest message from `peer`
    /// with `tag`; messages with other tags stay queued.
    ///
    /// Bounded by the timeout plus at most [`TIMEOUT_SLACK`] to find the culprit: on
    /// timeout the awaited peer is probed and, if it is itself waiting, the rank it
    /// waits on, and so on ([`BootstrapError::PeerTimeout`] names the rank at the end
    /// of that chain). Fails at once with [`BootstrapError::PeerClosed`] when the
    /// peer's connection closes, or [`BootstrapError::PeerFailed`] when another rank
    /// reported a failed peer. Such failures are passed on to the ranks this one is
    /// connected to.
    pub fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        let i = &self.inner;
        i.blame(i.recv_kind(peer, KIND_USER, tag, &|| {
            format!("a message with tag {tag} from rank {peer}")
        }))
    }

    /// Ring all-gather (`bootstrapAllGather`) of one blob per rank (sizes may differ).
    /// Returns `nranks` blobs indexed by rank; entry `rank()` is `mine`.
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let i = &self.inner;
        let _g = i.coll.lock().expect("coll lock");
        let n = i.nranks;
        let mut data: Vec<Option<Vec<u8>>> = try_vec_with(n, "the all-gather result", || None)?;
        data[i.rank] = Some(mine.to_vec());
        let (next, prev) = ((i.rank + 1) % n, (i.rank + n - 1) % n);
        for step in 0..n.saturating_sub(1) {
            let send_block = (i.rank + n - step) % n;
            let recv_block = (i.rank + n - step - 1) % n;
            let blob = data[send_block].as_deref().expect("received in the previous step");
            i.blame(i.send_kind_until(next, KIND_ALLGATHER, 0, blob, Instant::now() + i.timeout))?;
            let got = i.blame(i.recv_kind(prev, KIND_ALLGATHER, 0, &|| {
                format!("all-gather step {step}: rank {recv_block}'s data from ring predecessor rank {prev}")
            }))?;
            data[recv_block] = Some(got);
        }
        Ok(data.into_iter().map(|d| d.expect("all filled")).collect())
    }

    /// Barrier (`bootstrapBarrier`, dissemination): returns once every rank entered.
    pub fn barrier(&self) -> Result<()> {
        let i = &self.inner;
        let _g = i.coll.lock().expect("coll lock");
        let n = i.nranks;
        let mut mask = 1;
        while mask < n {
            let to = (i.rank + mask) % n;
            let from = (i.rank + n - mask) % n;
            i.blame(i.send_kind_until(to, KIND_BARRIER, mask as u32, &[], Instant::now() + i.timeout))?;
            i.blame(i.recv_kind(from, KIND_BARRIER, mask as u32, &|| {
                format!("barrier: round {mask} from rank {from}")
            }))?;
            mask <<= 1;
        }
        Ok(())
    }

    /// Broadcast (`bootstrapBroadcast`) of `root`'s `data` (ignored on other ranks);
    /// every rank returns the root's bytes.
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        let i = &self.inner;
        if root >= i.nranks {
            return Err(BootstrapError::InvalidArgument(format!(
                "broadcast root {root} >= nranks {}",
                i.nranks
            )));
        }
        let _g = i.coll.lock().expect("coll lock");
        if i.rank == root {
            for p in (0..i.nranks).filter(|&p| p != root) {
                i.blame(i.send_kind_until(p, KIND_BROADCAST, root as u32, data, Instant::now() + i.timeout))?;
            }
            Ok(data.to_vec())
        } else {
            i.blame(i.recv_kind(root, KIND_BROADCAST, root as u32, &|| {
                format!("broadcast data from root rank {root}")
            }))
        }
    }

    /// The lowest rank whose [`exchange_among_survivors`](Self::exchange_among_survivors)
    /// blob with `tag` has arrived and not been collected yet: a rank that failed and
    /// is reporting it. Never waits (a short lock), so a progress loop can poll it.
    pub fn survivor_report_pending(&self, tag: u32) -> Option<usize> {
        let st = self.inner.mail.st.lock().ok()?;
        (0..self.inner.nranks)
            .filter(|&p| p != self.inner.rank)
            .find(|&p| st.queues.get(&(p, KIND_SURVIVOR, tag)).is_some_and(|q| !q.is_empty()))
    }

    /// Bounded all-to-all among the ranks that are still alive, for failure reports:
    /// sends `mine` (at most [`MAX_SURVIVOR_BYTES`]) to every other rank directly (no
    /// ring, so a dead rank breaks nothing) and collects what the others send with the
    /// same `tag`, until every rank answered or is known gone, or `wait` (capped at the
    /// timeout) has passed. Returns one [`SurvivorStatus`] per rank.
    ///
    /// Every surviving rank must call it with the same `tag` (e.g. the sequence number
    /// of the operation that failed; different tags never mix) and about the same
    /// `wait`; a rank that calls it later than the others' deadline is reported
    /// silent by them. It neither takes the collectives' lock nor looks at failure
    /// notices, so it works after a bootstrap operation failed and while another
    /// thread is blocked in one. Blobs that arrive after the call returned stay
    /// queued (a later call with the same tag would return them).
    ///
    /// Errors: `mine` too large ([`BootstrapError::InvalidArgument`]); the bootstrap
    /// was closed or aborted.
    pub fn exchange_among_survivors(&self, tag: u32, mine: &[u8], wait: Duration) -> Result<Survivors> {
        let i = &self.inner;
        if mine.len() > MAX_SURVIVOR_BYTES {
            return Err(BootstrapError::InvalidArgument(format!(
                "survivor blob of {} bytes exceeds the limit of {MAX_SURVIVOR_BYTES}",
                mine.len()
            )));
        }
        i.check_open("exchanging with the survivors")?;
        let end = Instant::now() + wait.min(i.timeout);
        let (n, me) = (i.nranks, i.rank);
        let mut status = try_vec_with(n, "the survivor table", || SurvivorStatus::Silent)?;
        status[me] = SurvivorStatus::Answered(mine.to_vec());
        let unreachable: Mutex<HashMap<usize, String>> = Mutex::new(HashMap::new());
        let next = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..SURVIVOR_SENDERS.min(n - 1) {
                sc.spawn(|| {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= n - 1 {
                            break;
                        }
                        let p = if k < me { k } else { k + 1 };
                        if let Err(e) = i.send_kind_until(p, KIND_SURVIVOR, tag, mine, end)
                            && matches!(e, BootstrapError::Connect { .. } | BootstrapError::PeerClosed { .. })
                        {
                            unreachable.lock().expect("unreachable lock").insert(p, e.to_string());
                        }
                    }
                });
            }
            i.collect_survivors(tag, &mut status, end, &unreachable);
        });
        Ok(Survivors { status })
    }
}

/// Answers liveness probes (on its own thread: answering may connect to the prober).
fn spawn_responder(inner: Weak<Inner>, rx: mpsc::Receiver<(usize, u32)>) -> Result<()> {
    std::thread::Builder::new()
        .name("ferroccl-bs-probe".into())
        .spawn(move || {
            while let Ok((peer, nonce)) = rx.recv() {
                let Some(i) = inner.upgrade() else { break };
                let answer = i.wait_report();
                let _ = i.send_kind_until(peer, KIND_PROBE_ANSWER, nonce, &answer, Instant::now() + PROBE_WAIT);
            }
        })
        .map(|_| ())
        .map_err(|e| BootstrapError::io("spawning the bootstrap probe responder", e))
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.inner.shutdown();
    }
}

impl Inner {
    fn check_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.nranks {
            return Err(BootstrapError::InvalidArgument(format!(
                "peer {peer} >= nranks {}",
                self.nranks
            )));
        }
        Ok(())
    }

    fn check_open(&self, what: &str) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(if self.abort.load(Ordering::Relaxed) {
                BootstrapError::Aborted { what: what.into() }
            } else {
                BootstrapError::Closed
            });
        }
        Ok(())
    }

    fn flags(&self) -> Flags<'_> {
        Flags {
            abort: &self.abort,
            stop: None,
        }
    }

    fn shutdown(&self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        for o in &self.out {
            if let Ok(mut g) = o.lock()
                && let Some(s) = g.take()
            {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
        }
        if let Some(r) = self.reactor.lock().ok().and_then(|mut g| g.take()) {
            r.stop();
        }
        self.mail.cv.notify_all();
    }

    /// Records a failure that blames a peer and, the first time, tells every rank
    /// this one has a connection to (best effort, bounded), so that their waits on
    /// this rank fail naming the same culprit instead of this rank.
    fn blame<T>(&self, r: Result<T>) -> Result<T> {
        let Err(e) = &r else { return r };
        let Some(culprit) = e.culprit() else { return r };
        let reason = match e {
            BootstrapError::PeerFailed { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        let reason = clip(&reason, MAX_REASON_BYTES).to_string();
        if let Ok(mut lf) = self.last_failure.lock()
            && lf.is_none()
        {
            *lf = Some((culprit, reason.clone()));
        }
        if self.forwarded.swap(true, Ordering::SeqCst) || self.stop.load(Ordering::Relaxed) {
            return r;
        }
        let mut payload = (culprit as u32).to_ne_bytes().to_vec();
        payload.extend_from_slice(reason.as_bytes());
        let frame = encode_msg(KIND_FAILED, 0, &payload);
        for (p, o) in self.out.iter().enumerate() {
            if p == culprit || p == self.rank {
                continue;
            }
            if let Ok(mut g) = o.try_lock()
                && let Some(s) = g.as_mut()
            {
                let _ = s.set_write_timeout(Some(NOTICE_WRITE_WAIT));
                if wire::write_frame(s, &frame, &|| format!("telling rank {p} that rank {culprit} failed")).is_err() {
                    *g = None;
                }
            }
        }
        r
    }

    /// The answer to a liveness probe: the oldest current wait, else the first
    /// failure seen, else idle.
    fn wait_report(&self) -> Vec<u8> {
        if let Some((_, w)) = self.waits.lock().ok().as_ref().and_then(|g| g.first()) {
            let mut v = vec![REPORT_WAITING];
            v.extend_from_slice(&(w.peer as u32).to_ne_bytes());
            v.extend_from_slice(&(w.since.elapsed().as_millis() as u64).to_ne_bytes());
            v.extend_from_slice(clip(&w.what, MAX_REASON_BYTES).as_bytes());
            return v;
        }
        if let Some((c, reason)) = self.last_failure.lock().ok().and_then(|g| g.clone()) {
            let mut v = vec![REPORT_FAILED];
            v.extend_from_slice(&(c as u32).to_ne_bytes());
            v.extend_from_slice(reason.as_bytes());
            return v;
        }
        vec![REPORT_IDLE]
    }

    /// Locks the connection to `peer`, waiting for another sender at most until `end`.
    fn lock_out(&self, peer: usize, end: Instant) -> Result<MutexGuard<'_, Option<TcpStream>>> {
        let t0 = Instant::now();
        loop {
            match self.out[peer].try_lock() {
                Ok(g) => return Ok(g),
                Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if self.abort.load(Ordering::Relaxed) {
                return Err(BootstrapError::Aborted {
                    what: format!("sending to rank {peer}"),
                });
            }
            if Instant::now() >= end {
                return Err(BootstrapError::PeerTimeout {
                    what: format!("the connection to rank {peer}"),
                    waited: t0.elapsed(),
                    culprit: peer,
                    diagnosis: format!("another send to rank {peer} is blocked: rank {peer} is not reading"),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Locks the connection to `peer`, opening it (handshake + hello) if needed.
    fn lock_connected(&self, peer: usize, end: Instant) -> Result<MutexGuard<'_, Option<TcpStream>>> {
        let mut g = self.lock_out(peer, end)?;
        if g.is_none() {
            let addr = self.addrs.lock().expect("addrs lock")[peer]
                .ok_or_else(|| BootstrapError::InvalidArgument(format!("rank {peer}'s address is not known yet")))?;
            let what = || format!("connecting to rank {peer} at {addr}");
            let dl = Deadline {
                start: Instant::now(),
                end: Some(end),
            };
            let mut s = match wire::connect_bootstrap(addr, self.magic, self.retry, &dl, self.flags(), &what) {
                Ok(s) => s,
                Err(BootstrapError::Io { what, source }) => {
                    return Err(BootstrapError::Connect {
                        peer,
                        addr,
                        what,
                        source,
                    });
                }
                Err(BootstrapError::Timeout { what, waited }) => {
                    return Err(BootstrapError::PeerTimeout {
                        what,
                        waited,
                        culprit: peer,
                        diagnosis: format!("rank {peer}'s listener at {addr} did not accept the connection"),
                    });
                }
                Err(e) => return Err(e),
            };
            let _ = s.set_write_timeout(Some(end.saturating_duration_since(Instant::now()).max(POLL_SLICE)));
            let mut hello = [0u8; HELLO_BYTES];
            hello[..4].copy_from_slice(&(self.rank as u32).to_ne_bytes());
            hello[4..].copy_from_slice(&(self.nranks as u32).to_ne_bytes());
            wire::write_frame(&mut s, &hello, &what).map_err(|e| self.write_error(peer, e, "sending the hello"))?;
            *g = Some(s);
        }
        Ok(g)
    }

    fn write_error(&self, peer: usize, e: BootstrapError, what: &str) -> BootstrapError {
        match e {
            BootstrapError::Io { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                BootstrapError::PeerTimeout {
                    what: format!("rank {peer} to read ({what})"),
                    waited: self.timeout,
                    culprit: peer,
                    diagnosis: format!("rank {peer} stopped reading its bootstrap connection"),
                }
            }
            BootstrapError::Io { source, .. } => BootstrapError::PeerClosed {
                peer,
                what: format!("{what} ({source})"),
            },
            e => e,
        }
    }

    /// Sends one message of `kind`, bounded by `end` (lock, connect and write).
    fn send_kind_until(&self, peer: usize, kind: u8, tag: u32, data: &[u8], end: Instant) -> Result<()> {
        self.check_peer(peer)?;
        self.check_open(&format!("sending to rank {peer}"))?;
        if data.len() > MAX_MESSAGE_BYTES {
            return Err(BootstrapError::InvalidArgument(format!(
                "message of {} bytes exceeds the bootstrap limit of {MAX_MESSAGE_BYTES}",
                data.len()
            )));
        }
        if peer == self.rank {
            let mut st = self.mail.st.lock().expect("mail lock");
            st.queues.entry((peer, kind, tag)).or_default().push_back(data.to_vec());
            self.mail.cv.notify_all();
            return Ok(());
        }
        let mut g = self.lock_connected(peer, end)?;
        let s = g.as_mut().expect("just connected");
        let _ = s.set_write_timeout(Some(end.saturating_duration_since(Instant::now()).max(POLL_SLICE)));
        let what = || format!("sending {} bytes (tag {tag}) to rank {peer}", data.len());
        let r = wire::write_frame(s, &encode_msg(kind, tag, data), &what);
        if let Err(e) = r {
            *g = None;
            return Err(self.write_error(peer, e, &what()));
        }
        Ok(())
    }

    fn register_wait(&self, peer: usize, what: String) -> WaitGuard<'_> {
        let id = self.wait_seq.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut w) = self.waits.lock() {
            w.push((
                id,
                WaitInfo {
                    peer,
                    what,
                    since: Instant::now(),
                },
            ));
        }
        WaitGuard { inner: self, id }
    }

    fn recv_kind(&self, peer: usize, kind: u8, tag: u32, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        let dl = Deadline::after(self.timeout);
        let _wait = self.register_wait(peer, what());
        let mut st = self.mail.st.lock().expect("mail lock");
        loop {
            if let Some(q) = st.queues.get_mut(&(peer, kind, tag))
                && let Some(m) = q.pop_front()
            {
                return Ok(m);
            }
            // An abort wins over a close: our own listener stops on abort too, and a
            // connection it drops that way is not the peer's doing.
            if self.abort.load(Ordering::Relaxed) {
                return Err(BootstrapError::Aborted { what: what() });
            }
            if let Some(n) = &st.notice {
                return Err(BootstrapError::PeerFailed {
                    culprit: n.culprit,
                    reporter: n.reporter,
                    reason: n.reason.clone(),
                    what: what(),
                });
            }
            if let Some(why) = &st.closed[peer] {
                return Err(BootstrapError::PeerClosed {
                    peer,
                    what: format!("{} ({why})", what()),
                });
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(BootstrapError::Closed);
            }
            match dl.slice() {
                Some(slice) => st = self.mail.cv.wait_timeout(st, slice).expect("mail lock").0,
                None => break,
            }
        }
        drop(st);
        let waited = dl.waited();
        let (culprit, diagnosis) = self.diagnose(peer, Instant::now() + TIMEOUT_SLACK);
        // The message may have come while we were probing.
        let mut st = self.mail.st.lock().expect("mail lock");
        if let Some(q) = st.queues.get_mut(&(peer, kind, tag))
            && let Some(m) = q.pop_front()
        {
            return Ok(m);
        }
        let mut diagnosis = diagnosis;
        if let Some(t) = self.stats.trouble() {
            diagnosis.push_str(&format!("; this rank's listener {t}"));
        }
        Err(BootstrapError::PeerTimeout {
            what: what(),
            waited,
            culprit,
            diagnosis,
        })
    }

    /// Probes `peer`: sends a probe and waits for its listener's answer until `end`.
    fn probe(&self, peer: usize, end: Instant) -> Probe {
        if let Some(why) = &self.mail.st.lock().expect("mail lock").closed[peer] {
            return Probe::Gone(format!("its connection to this rank closed: {why}"));
        }
        let nonce = self.probe_seq.fetch_add(1, Ordering::Relaxed);
        match self.send_kind_until(peer, KIND_PROBE, nonce, &[], end) {
            Ok(()) => {}
            Err(BootstrapError::Connect { source, .. }) => {
                return Probe::Gone(format!("connecting to it failed: {source}"));
            }
            Err(BootstrapError::PeerClosed { what, .. }) => return Probe::Gone(what),
            Err(_) => return Probe::Silent,
        }
        let mut st = self.mail.st.lock().expect("mail lock");
        loop {
            if let Some(q) = st.queues.get_mut(&(peer, KIND_PROBE_ANSWER, nonce))
                && let Some(m) = q.pop_front()
            {
                st.queues.remove(&(peer, KIND_PROBE_ANSWER, nonce));
                return decode_report(&m, self.nranks).unwrap_or(Probe::Silent);
            }
            if let Some(why) = &st.closed[peer] {
                return Probe::Gone(format!("its connection to this rank closed: {why}"));
            }
            let now = Instant::now();
            if now >= end || self.abort.load(Ordering::Relaxed) {
                return Probe::Silent;
            }
            st = self
                .mail
                .cv
                .wait_timeout(st, (end - now).min(POLL_SLICE))
                .expect("mail lock")
                .0;
        }
    }

    /// Finds the rank to blame for a wait on `awaited` that timed out, following who
    /// waits on whom with probes until `end`. Returns (culprit, explanation).
    fn diagnose(&self, awaited: usize, end: Instant) -> (usize, String) {
        let mut chain: Vec<usize> = Vec::new();
        let mut path = String::new();
        let mut cur = awaited;
        loop {
            if cur == self.rank || chain.contains(&cur) {
                let cycle: Vec<String> = chain.iter().map(|r| format!("rank {r}")).collect();
                return (
                    awaited,
                    format!(
                        "{path}a wait cycle: {} and this rank (rank {}) wait on each other (mismatched bootstrap \
                         operations?)",
                        cycle.join(" → "),
                        self.rank
                    ),
                );
            }
            chain.push(cur);
            let probe_end = end.min(Instant::now() + PROBE_WAIT);
            match self.probe(cur, probe_end) {
                Probe::Silent => {
                    return (
                        cur,
                        format!(
                            "{path}rank {cur} did not answer a liveness probe within {} (stopped or hung)",
                            fmt_duration(PROBE_WAIT)
                        ),
                    );
                }
                Probe::Gone(why) => return (cur, format!("{path}rank {cur} is gone ({why})")),
                Probe::Idle => {
                    return (
                        cur,
                        format!(
                            "{path}rank {cur} is alive but not waiting in any bootstrap operation (did it call the \
                             matching one?)"
                        ),
                    );
                }
                Probe::Failed { culprit, reason } => {
                    return (
                        culprit,
                        format!("{path}rank {cur} failed earlier because of rank {culprit}: {reason}"),
                    );
                }
                Probe::Waiting { peer, what, waited } => {
                    path.push_str(&format!(
                        "rank {cur} is waiting for rank {peer} ({what}, for {}); ",
                        fmt_duration(Duration::from_millis(waited.as_millis() as u64 / 100 * 100))
                    ));
                    if Instant::now() >= end {
                        return (peer, format!("{path}no time left to probe rank {peer}"));
                    }
                    cur = peer;
                }
            }
        }
    }

    /// Collects survivor blobs with `tag` into `status` until all are resolved or `end`.
    fn collect_survivors(
        &self,
        tag: u32,
        status: &mut [SurvivorStatus],
        end: Instant,
        unreachable: &Mutex<HashMap<usize, String>>,
    ) {
        let n = self.nranks;
        let mut st = self.mail.st.lock().expect("mail lock");
        loop {
            let mut unresolved = 0;
            for (p, s) in status.iter_mut().enumerate().take(n) {
                if !matches!(s, SurvivorStatus::Silent) {
                    continue;
                }
                if let Some(q) = st.queues.get_mut(&(p, KIND_SURVIVOR, tag))
                    && let Some(m) = q.pop_front()
                {
                    *s = SurvivorStatus::Answered(m);
                    continue;
                }
                let gone = unreachable.lock().expect("unreachable lock").contains_key(&p) && st.live[p] == 0;
                if !gone {
                    unresolved += 1;
                }
            }
            let now = Instant::now();
            if unresolved == 0 || now >= end || self.stop.load(Ordering::Relaxed) {
                break;
            }
            st = self
                .mail
                .cv
                .wait_timeout(st, (end - now).min(POLL_SLICE))
                .expect("mail lock")
                .0;
        }
        let unreachable = unreachable.lock().expect("unreachable lock");
        for (p, s) in status.iter_mut().enumerate() {
            if matches!(s, SurvivorStatus::Silent) {
                if let Some(why) = unreachable.get(&p) {
                    *s = SurvivorStatus::Gone(why.clone());
                } else if let Some(why) = &st.closed[p] {
                    *s = SurvivorStatus::Gone(format!("its connection to this rank closed: {why}"));
                }
            }
        }
    }
}
