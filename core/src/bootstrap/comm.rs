//! The per-rank bootstrap network: ring setup through the root, then ring
//! all-gather, tagged point-to-point messages, barrier and broadcast
//! (NCCL 2.30 `bootstrapInit`, `bootstrapAllGather`, `bootstrapSend`/`Recv`,
//! `bootstrapBarrier`, `bootstrapBroadcast`).

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use super::error::{BootstrapError, Result};
use super::id::{NCCL_MAGIC, UniqueId};
use super::root::{self, MAX_REPLY_BYTES, RankInfo, Reply};
use super::wire::{self, Deadline, Flags, Retry};
use super::{BootstrapConfig, bind_addr_for, bootstrap_interface};

/// Largest message [`Bootstrap::send`] / the collectives carry (1 GiB); a peer
/// announcing more is a protocol error.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

const KIND_USER: u8 = 0;
const KIND_ALLGATHER: u8 = 1;
const KIND_BARRIER: u8 = 2;
const KIND_BROADCAST: u8 = 3;
const HEADER: usize = 5;
const HELLO_BYTES: usize = 8;

type Key = (usize, u8, u32);

#[derive(Default)]
struct MailState {
    queues: HashMap<Key, VecDeque<Vec<u8>>>,
    /// Live incoming connections per peer rank.
    live: Vec<u32>,
    /// A connection from this peer ended (EOF or error) and none is live.
    closed: Vec<Option<String>>,
}

struct Mailbox {
    st: Mutex<MailState>,
    cv: Condvar,
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
    incoming: Mutex<Vec<TcpStream>>,
    mail: Mailbox,
    coll: Mutex<()>,
}

/// One rank's bootstrap network. Cheap to share (`&self` methods, `Send + Sync`).
///
/// Collectives ([`allgather`](Self::allgather), [`barrier`](Self::barrier),
/// [`broadcast`](Self::broadcast)) must be called in the same order on every rank;
/// point-to-point messages are matched by (peer, tag) in FIFO order per pair, so
/// they may be received in any tag order. Dropping it closes it.
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

fn encode_msg(kind: u8, tag: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + data.len());
    v.push(kind);
    v.extend_from_slice(&tag.to_ne_bytes());
    v.extend_from_slice(data);
    v
}

impl Bootstrap {
    /// `bootstrapInit`: joins the bootstrap of `id` as `rank` of `nranks`.
    ///
    /// Binds this rank's listeners on the bootstrap interface, reports to the root
    /// (rank 0 first starts the root itself when `config.comm_id` is set), waits for
    /// the root's reply (its successor's address, or the root's error naming missing,
    /// duplicate or mismatched ranks), connects the ring and all-gathers every rank's
    /// listen address.
    ///
    /// Errors: invalid `rank`/`nranks`/id; [`BootstrapError::Root`] with the root's
    /// message; [`BootstrapError::Timeout`] if no reply came within 1.5 × `timeout`
    /// (the root's own deadline is `timeout` after the first rank arrived);
    /// [`BootstrapError::Aborted`]; socket errors.
    pub fn init(id: &UniqueId, rank: usize, nranks: usize, config: &BootstrapConfig) -> Result<Self> {
        if nranks == 0 || rank >= nranks || nranks > i32::MAX as usize {
            return Err(BootstrapError::InvalidArgument(format!(
                "rank {rank} is not in 0..nranks (nranks {nranks})"
            )));
        }
        let root_addr = id.root_addr()?;
        let magic = id.magic();
        let abort = config.abort.clone();
        let retry = config.retry();
        let comm_hint = config.comm_id_addr()?;

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
        let inner = Arc::new(Inner {
            rank,
            nranks,
            magic,
            timeout: config.timeout,
            retry,
            abort: abort.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            listen_addr,
            addrs: Mutex::new(vec![None; nranks]),
            out: (0..nranks).map(|_| Mutex::new(None)).collect(),
            incoming: Mutex::new(Vec::new()),
            mail: Mailbox {
                st: Mutex::new(MailState {
                    queues: HashMap::new(),
                    live: vec![0; nranks],
                    closed: vec![None; nranks],
                }),
                cv: Condvar::new(),
            },
            coll: Mutex::new(()),
        });
        let weak = Arc::downgrade(&inner);
        let handler: wire::Handler = Arc::new(move |s, from| {
            if let Some(inner) = weak.upgrade() {
                Inner::serve_peer(inner, s, from);
            }
        });
        wire::spawn_acceptor(
            ring_listener,
            format!("bootstrap rank {rank} listener {listen_addr}"),
            magic,
            config.timeout,
            inner.stop.clone(),
            abort.clone(),
            handler,
        )?;
        let bs = Bootstrap { inner };

        // Root-reply listener.
        let reply_listener = wire::listen(bind)?;
        let reply_addr = reply_listener
            .local_addr()
            .map_err(|e| BootstrapError::io("root-reply listener address", e))?;
        let reply_stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Reply>();
        let tx = Mutex::new(tx);
        let (h_abort, h_stop, timeout) = (abort.clone(), reply_stop.clone(), config.timeout);
        let reply_handler: wire::Handler = Arc::new(move |mut s: TcpStream, from: SocketAddr| {
            let dl = Deadline::after(timeout);
            let flags = Flags {
                abort: &h_abort,
                stop: Some(&h_stop),
            };
            let what = || format!("the root's reply over the connection from {from}");
            match wire::read_frame(&mut s, MAX_REPLY_BYTES, &dl, flags, &what).map(|b| Reply::decode(&b)) {
                Ok(Ok(r)) => {
                    let _ = tx.lock().map(|t| t.send(r));
                }
                Ok(Err(e)) => tracing::warn!(target: "ferroccl::bootstrap", "rank {rank}: rejected {from}: {e}"),
                Err(BootstrapError::Aborted { .. }) => {}
                Err(e) => tracing::warn!(target: "ferroccl::bootstrap", "rank {rank}: rejected {from}: {e}"),
            }
        });
        wire::spawn_acceptor(
            reply_listener,
            format!("bootstrap rank {rank} root-reply listener {reply_addr}"),
            magic,
            config.timeout,
            reply_stop.clone(),
            abort.clone(),
            reply_handler,
        )?;
        let result = bs.join_root(root_addr, reply_addr, &rx, config);
        reply_stop.store(true, Ordering::Relaxed);
        let succ = result?;
        tracing::debug!(target: "ferroccl::bootstrap", "rank {rank}/{nranks}: successor listens on {succ}");

        // Ring: connect to the successor now, learn everyone's address by all-gather.
        let next = (rank + 1) % nranks;
        bs.inner.addrs.lock().expect("addrs lock")[next] = Some(succ);
        bs.inner.addrs.lock().expect("addrs lock")[rank] = Some(listen_addr);
        if nranks > 1 {
            drop(bs.inner.connection(next)?);
        }
        let all = bs.allgather(&super::id::encode_socket_address(&listen_addr))?;
        let mut addrs = Vec::with_capacity(nranks);
        for (r, b) in all.iter().enumerate() {
            let a = super::id::decode_socket_address(b).map_err(|e| BootstrapError::Protocol {
                peer: format!("rank {r}"),
                detail: format!("bad listen address in the initial all-gather: {e}"),
            })?;
            addrs.push(Some(a));
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
        config: &BootstrapConfig,
    ) -> Result<SocketAddr> {
        let i = &self.inner;
        let info = RankInfo {
            rank: i.rank,
            nranks: i.nranks,
            reply_addr,
            ring_addr: i.listen_addr,
        };
        let flags = Flags {
            abort: &i.abort,
            stop: None,
        };
        let what = || format!("connecting to the bootstrap root at {root_addr}");
        let dl = Deadline::after(config.timeout);
        let mut s = wire::connect_bootstrap(root_addr, i.magic, i.retry, &dl, flags, &what)?;
        let _ = s.set_write_timeout(Some(config.timeout));
        wire::write_frame(&mut s, &info.encode(), &|| {
            format!("sending rank {}'s info to the root at {root_addr}", i.rank)
        })?;
        drop(s);
        let dl = Deadline::after(config.timeout + config.timeout / 2);
        let what = || format!("the root's reply from {root_addr}");
        loop {
            let slice = wire::next_slice(&dl, flags, &what)?;
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
    /// Connects on demand (with `NCCL_SOCKET_RETRY_*` semantics) and keeps the
    /// connection. Does not wait for the receiver to call `recv`.
    pub fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        self.inner.send_kind(peer, KIND_USER, tag, data)
    }

    /// Tagged point-to-point receive (`bootstrapRecv`): the oldest message from `peer`
    /// with `tag`; messages with other tags stay queued. Bounded by the timeout.
    pub fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        self.inner.recv_kind(peer, KIND_USER, tag, &|| {
            format!("a message with tag {tag} from rank {peer}")
        })
    }

    /// Ring all-gather (`bootstrapAllGather`) of one blob per rank (sizes may differ).
    /// Returns `nranks` blobs indexed by rank; entry `rank()` is `mine`.
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let i = &self.inner;
        let _g = i.coll.lock().expect("coll lock");
        let n = i.nranks;
        let mut data: Vec<Option<Vec<u8>>> = vec![None; n];
        data[i.rank] = Some(mine.to_vec());
        let (next, prev) = ((i.rank + 1) % n, (i.rank + n - 1) % n);
        for step in 0..n.saturating_sub(1) {
            let send_block = (i.rank + n - step) % n;
            let recv_block = (i.rank + n - step - 1) % n;
            let blob = data[send_block].as_deref().expect("received in the previous step");
            i.send_kind(next, KIND_ALLGATHER, 0, blob)?;
            let got = i.recv_kind(prev, KIND_ALLGATHER, 0, &|| {
                format!("all-gather step {step}: rank {recv_block}'s data from ring predecessor rank {prev}")
            })?;
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
            i.send_kind(to, KIND_BARRIER, mask as u32, &[])?;
            i.recv_kind(from, KIND_BARRIER, mask as u32, &|| {
                format!("barrier: round {mask} from rank {from}")
            })?;
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
                i.send_kind(p, KIND_BROADCAST, root as u32, data)?;
            }
            Ok(data.to_vec())
        } else {
            i.recv_kind(root, KIND_BROADCAST, root as u32, &|| {
                format!("broadcast data from root rank {root}")
            })
        }
    }
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
        if let Ok(mut v) = self.incoming.lock() {
            for s in v.drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        self.mail.cv.notify_all();
    }

    /// Opens (once) the outgoing connection to `peer`: handshake, then hello (rank, nranks).
    fn connection(&self, peer: usize) -> Result<std::sync::MutexGuard<'_, Option<TcpStream>>> {
        let mut g = self.out[peer].lock().expect("out lock");
        if g.is_none() {
            let addr = self.addrs.lock().expect("addrs lock")[peer]
                .ok_or_else(|| BootstrapError::InvalidArgument(format!("rank {peer}'s address is not known yet")))?;
            let what = || format!("connecting to rank {peer} at {addr}");
            let dl = Deadline::after(self.timeout);
            let mut s = wire::connect_bootstrap(addr, self.magic, self.retry, &dl, self.flags(), &what)?;
            let _ = s.set_write_timeout(Some(self.timeout));
            let mut hello = [0u8; HELLO_BYTES];
            hello[..4].copy_from_slice(&(self.rank as u32).to_ne_bytes());
            hello[4..].copy_from_slice(&(self.nranks as u32).to_ne_bytes());
            wire::write_frame(&mut s, &hello, &what)?;
            *g = Some(s);
        }
        Ok(g)
    }

    fn send_kind(&self, peer: usize, kind: u8, tag: u32, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        if self.stop.load(Ordering::Relaxed) {
            return Err(if self.abort.load(Ordering::Relaxed) {
                BootstrapError::Aborted {
                    what: format!("sending to rank {peer}"),
                }
            } else {
                BootstrapError::Closed
            });
        }
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
        let mut g = self.connection(peer)?;
        let s = g.as_mut().expect("just connected");
        let what = || format!("sending {} bytes (tag {tag}) to rank {peer}", data.len());
        let r = wire::write_frame(s, &encode_msg(kind, tag, data), &what);
        if r.is_err() {
            *g = None;
        }
        r
    }

    fn recv_kind(&self, peer: usize, kind: u8, tag: u32, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        let dl = Deadline::after(self.timeout);
        let mut st = self.mail.st.lock().expect("mail lock");
        loop {
            if let Some(q) = st.queues.get_mut(&(peer, kind, tag))
                && let Some(m) = q.pop_front()
            {
                return Ok(m);
            }
            // An abort wins over a close: our own readers stop on abort too, and a
            // connection they drop that way is not the peer's doing.
            if self.abort.load(Ordering::Relaxed) {
                return Err(BootstrapError::Aborted { what: what() });
            }
            if let Some(why) = &st.closed[peer] {
                return Err(BootstrapError::PeerClosed {
                    peer,
                    what: format!("{} ({why})", what()),
                });
            }
            if self.stop.load(Ordering::Relaxed) && !self.abort.load(Ordering::Relaxed) {
                return Err(BootstrapError::Closed);
            }
            let slice = wire::next_slice(&dl, self.flags(), what)?;
            st = self.mail.cv.wait_timeout(st, slice).expect("mail lock").0;
        }
    }

    /// Runs on the acceptor's per-connection thread: hello, then deliver messages.
    fn serve_peer(self: Arc<Self>, mut s: TcpStream, from: SocketAddr) {
        let flags = Flags {
            abort: &self.abort,
            stop: Some(&self.stop),
        };
        let dl = Deadline::after(self.timeout);
        let hello = match wire::read_frame(&mut s, HELLO_BYTES, &dl, flags, &|| format!("the hello from {from}")) {
            Ok(h) if h.len() == HELLO_BYTES => h,
            Ok(h) => {
                tracing::warn!(target: "ferroccl::bootstrap", "rank {}: rejected {from}: hello of {} bytes", self.rank, h.len());
                return;
            }
            Err(BootstrapError::Aborted { .. }) => return,
            Err(e) => {
                tracing::warn!(target: "ferroccl::bootstrap", "rank {}: rejected {from}: {e}", self.rank);
                return;
            }
        };
        let peer = u32::from_ne_bytes(hello[..4].try_into().expect("4 bytes")) as usize;
        let n = u32::from_ne_bytes(hello[4..].try_into().expect("4 bytes")) as usize;
        if n != self.nranks || peer >= n || peer == self.rank {
            tracing::warn!(
                target: "ferroccl::bootstrap",
                "rank {}: rejected {from}: claims rank {peer} of {n} (we are rank {} of {})",
                self.rank, self.rank, self.nranks
            );
            return;
        }
        if let Ok(c) = s.try_clone()
            && let Ok(mut v) = self.incoming.lock()
        {
            v.push(c);
        }
        if self.stop.load(Ordering::Relaxed) {
            let _ = s.shutdown(std::net::Shutdown::Both);
            return;
        }
        {
            let mut st = self.mail.st.lock().expect("mail lock");
            st.live[peer] += 1;
            st.closed[peer] = None;
        }
        let never = Deadline::never();
        let why = loop {
            let what = || format!("reading from rank {peer} ({from})");
            match wire::read_frame(&mut s, HEADER + MAX_MESSAGE_BYTES, &never, flags, &what) {
                Ok(m) if m.len() >= HEADER => {
                    let kind = m[0];
                    let tag = u32::from_ne_bytes(m[1..HEADER].try_into().expect("4 bytes"));
                    let mut st = self.mail.st.lock().expect("mail lock");
                    st.queues
                        .entry((peer, kind, tag))
                        .or_default()
                        .push_back(m[HEADER..].to_vec());
                    drop(st);
                    self.mail.cv.notify_all();
                }
                Ok(m) => break format!("malformed message of {} bytes", m.len()),
                Err(BootstrapError::Io { source, .. }) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                    break "connection closed".to_string();
                }
                Err(e) => break e.to_string(),
            }
        };
        let aborted = self.abort.load(Ordering::Relaxed);
        let mut st = self.mail.st.lock().expect("mail lock");
        st.live[peer] -= 1;
        if st.live[peer] == 0 && !aborted {
            st.closed[peer] = Some(why);
        }
        drop(st);
        self.mail.cv.notify_all();
    }
}
