//! Transports: how a channel's connectors move bytes to a peer.
//!
//! A connector is one direction of one connection: a [`SendConnector`] fills
//! FIFO steps that reach the peer's [`RecvConnector`]. Connectors live in a
//! [`ConnTable`] keyed by (channel, peer, connection index) and direction, as
//! NCCL keeps them in `channel->peers[peer]->send[connIndex]` /
//! `recv[connIndex]` (`src/include/comm.h`, `struct ncclChannelPeer`): a ring
//! successor and a tree child that are the same rank share one connector.
//!
//! Each connector has two faces: the executor's (fill a slot, push it; peek at a
//! received step, pop it — the work of NCCL's device primitives) and the proxy's
//! (`progress`: post and test the network requests behind the FIFO — NCCL's
//! `sendProxyProgress` / `recvProxyProgress`).
//!
//! A [`Transport`] makes connectors: NCCL's `struct ncclTransport`
//! (`src/include/transport.h`) with `canConnect`, and `setup`/`connect` for each
//! direction. Each connection (channel, peer, connection index, direction) goes
//! to the first transport in NCCL's order whose [`Transport::can_connect`] accepts
//! the pair (`src/transport.cc`, `selectTransport`): P2P ([`p2p`]: GPUs that
//! can reach each other, within `NCCL_P2P_LEVEL` and without `NCCL_P2P_DISABLE`,
//! for ranks whose communicators bound a GPU), then SHM ([`shm`], ranks
//! on one host), then NET ([`net`], the plugin; device memory of an operation
//! goes through GPUDirect RDMA where [`gdr`] allows it, else it is staged). [`setup`] exchanges the connect information over the bootstrap
//! and drives the connects.

pub(crate) mod collnet;
pub(crate) mod fifo;
pub mod gdr;
pub(crate) mod ipcsock;
#[cfg(test)]
pub(crate) mod mem;
pub(crate) mod net;
pub(crate) mod p2p;
pub(crate) mod proto;
pub(crate) mod setup;
pub(crate) mod shm;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::Error;

/// `NCCL_STEPS`: FIFO slots per connection (most steps in flight on one connector).
pub use crate::config::NCCL_STEPS;

/// Connection index of the collective algorithms' connections (ring and tree).
pub(crate) const CONN_COLL: usize = 0;
/// Connection index of point-to-point connections (their own FIFO step size,
/// `NCCL_P2P_NET_CHUNKSIZE`; NCCL uses connIndex 1 for p2p over the network).
pub(crate) const CONN_P2P: usize = 1;
/// Connection index of CollNetDirect's "up" direction inside a host (a rank's
/// scatter to its heads, a head's receives from its local ranks): NCCL sets up
/// `collnetDirect.up`/`down` twice (`src/init.cc`, connIndex 0 and 1) so that a
/// pair of ranks that are each other's head and local rank sends both ways on
/// separate connections; ferroccl's connIndex 1 being point-to-point's, this
/// one is 2. Set up as collective connections ([`CONN_COLL`]'s step size).
pub(crate) const CONN_COLL_UP: usize = 2;

/// Which connector: the channel, the peer rank and the connection index
/// ([`CONN_COLL`] or [`CONN_P2P`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ConnKey {
    /// Channel index.
    pub channel: usize,
    /// Peer rank.
    pub peer: usize,
    /// Connection index.
    pub conn: usize,
}

/// Which side of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum Dir {
    /// This rank sends to the peer.
    Send,
    /// This rank receives from the peer.
    Recv,
}

impl Dir {
    /// The peer's side of the same connection.
    pub(crate) fn opposite(self) -> Dir {
        match self {
            Dir::Send => Dir::Recv,
            Dir::Recv => Dir::Send,
        }
    }
}

/// What the transports need to know about a rank: the part of its peer-info
/// record (NCCL's `struct ncclPeerInfo`) that `canConnect` and the connections
/// look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TransportPeer {
    /// The rank.
    pub rank: usize,
    /// Host identity (NCCL's `hostHash`, including `NCCL_HOSTID`).
    pub host_hash: u64,
    /// Process id.
    pub pid: u32,
    /// Identity of the rank's PID namespace (device and inode of
    /// `/proc/self/ns/pid`; 0 when unreadable): a peer's process is reachable
    /// through `/proc/<pid>` only from the same namespace.
    pub pid_ns: u64,
    /// The rank's transport switches.
    pub params: TransportParams,
    /// Index of the rank among the ranks of its host, printed where NCCL prints
    /// the device (`rank[dev]`).
    pub local_rank: usize,
    /// The GPU the rank drives (NCCL's `busId`/`cudaDev`, bound by
    /// `CommConfig::cuda_dev`); `None`: a host process (device memory then
    /// appears per operation).
    pub gpu: Option<p2p::GpuLoc>,
}

/// The PID namespace of this process as a number (device and inode of
/// `/proc/self/ns/pid`; 0 when unreadable).
pub(crate) fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino() ^ m.dev().rotate_left(32))
}

/// The transport switches each rank reads from its own configuration and
/// shares in its peer-info record, so that both ends of a connection choose
/// the same transport even when the ranks' settings differ (a switch set on
/// either end applies to the pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TransportParams {
    /// `NCCL_SHM_DISABLE=1`: no shared-memory transport (`src/transport/shm.cc`).
    pub shm_disable: bool,
    /// `NCCL_NET_DISABLE_INTRA=1`: no network transport between ranks of one
    /// host (`src/graph/paths.cc`, `ncclTopoCheckNet`).
    pub net_disable_intra: bool,
    /// `NCCL_P2P_DISABLE=1` (`src/graph/paths.cc`, `ncclGetLevel`).
    #[serde(default)]
    pub p2p_disable: bool,
    /// `NCCL_P2P_LEVEL` as a `PATH_*` number; -1: unset (PXB).
    #[serde(default = "unset_level")]
    pub p2p_level: i8,
}

fn unset_level() -> i8 {
    -1
}

impl Default for TransportParams {
    fn default() -> Self {
        TransportParams {
            shm_disable: false,
            net_disable_intra: false,
            p2p_disable: false,
            p2p_level: unset_level(),
        }
    }
}

impl TransportParams {
    /// Reads `NCCL_SHM_DISABLE` and `NCCL_NET_DISABLE_INTRA` (0 or 1, default 0),
    /// `NCCL_P2P_DISABLE` and `NCCL_P2P_LEVEL` (as NCCL's `ncclGetLevel`) from
    /// the process configuration.
    ///
    /// Errors: [`Error::Config`] for a `NCCL_SHM_DISABLE` or
    /// `NCCL_NET_DISABLE_INTRA` other than 0 or 1 (a malformed P2P variable is
    /// warned about and ignored, as NCCL does).
    pub(crate) fn from_config() -> Result<TransportParams, Error> {
        let cfg = Config::global();
        use crate::config::params::{self, topo};
        use crate::config::{IntParamExt, StrParamExt};
        let flag = |p: &crate::config::IntParam| p.get(cfg).map(|v| v == 1);
        // NCCL's ncclGetLevel ignores a value it cannot read (the default stays).
        let p2p = p2p::P2pParams::parse(topo::P2P_DISABLE.get(cfg), topo::P2P_LEVEL.get(cfg)).unwrap_or_else(|e| {
            tracing::warn!(target: "ferroccl::init", "{e}; using the default");
            p2p::P2pParams::default()
        });
        Ok(TransportParams {
            shm_disable: flag(&params::SHM_DISABLE)?,
            net_disable_intra: flag(&params::NET_DISABLE_INTRA)?,
            p2p_disable: p2p.disable,
            p2p_level: p2p.level.map_or(-1, |l| l as i8),
        })
    }

    /// The P2P switches of this record.
    pub(crate) fn p2p(&self) -> p2p::P2pParams {
        p2p::P2pParams {
            disable: self.p2p_disable,
            level: crate::topo::PathType::ALL
                .iter()
                .copied()
                .find(|&t| t as i8 == self.p2p_level),
        }
    }
}

/// One connection to set up: which connector, which side, and its FIFO step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnRequest {
    /// The connector's key (channel, peer, connection index).
    pub key: ConnKey,
    /// This rank's side.
    pub dir: Dir,
    /// Bytes per FIFO step (slot).
    pub step_size: usize,
    /// Net plugin device, for the network transport.
    pub net_dev: usize,
}

/// A connector made by [`PendingConn::connect`].
pub(crate) enum Connected {
    /// The send side.
    Send(Box<dyn SendConnector>),
    /// The receive side.
    Recv(Box<dyn RecvConnector>),
}

/// A transport (NCCL's `struct ncclTransport`): decides whether it can join two
/// ranks and sets up connectors.
pub(crate) trait Transport: Send + Sync {
    /// Name in log lines and summaries (`"SHM"`, `"NET"`), as NCCL's `name`.
    fn name(&self) -> &'static str;

    /// How this transport's connections are described in summaries, e.g.
    /// `SHM/Simple` or `NET/Socket`.
    fn describe(&self) -> String;

    /// NCCL's `canConnect(comm, graph, myInfo, peerInfo)`: whether this transport
    /// can join `me` and `peer`. Must give the same answer on both ranks.
    fn can_connect(&self, me: &TransportPeer, peer: &TransportPeer) -> bool;

    /// NCCL's `setup` for `req.dir`: allocates this side's resources and returns
    /// them with the connect information to send to the peer (at most
    /// [`CONNECT_INFO_MAX`] bytes). Logs the `Channel … via …` INFO line.
    ///
    /// Errors: resource failures (plugin `listen`, shared memory).
    fn setup(
        &self,
        req: &ConnRequest,
        me: &TransportPeer,
        peer: &TransportPeer,
    ) -> Result<(Box<dyn PendingConn>, Vec<u8>), Error>;
}

/// A connection between `setup` and `connect`: dropping it releases what setup made.
pub(crate) trait PendingConn: Send {
    /// NCCL's `connect` (retried while `ncclInProgress`): completes the connection
    /// with the peer's connect information; `Ok(None)` until it can.
    ///
    /// Errors: the peer's information is malformed or inconsistent, or the
    /// resources it names cannot be used.
    fn connect(&mut self, peer_info: &[u8]) -> Result<Option<Connected>, Error>;

    /// What the connection is still waiting for (for timeout messages).
    fn waiting_for(&self) -> String;

    /// How this connection went, once connected, when it differs from its
    /// transport's [`Transport::describe`] (P2P: `P2P/CUMEM` or `P2P/IPC`,
    /// decided per connection); `None`: the transport's.
    fn describe(&self) -> Option<String> {
        None
    }
}

/// Largest connect information a transport may send (NCCL's `struct
/// ncclConnect` is 256 bytes; ours is a little more verbose but bounded).
pub(crate) const CONNECT_INFO_MAX: usize = 1024;

/// A user-memory registration a send connector can send from directly (an
/// opaque token: the net transport's mhandle).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserReg(pub(crate) *mut std::ffi::c_void);

// SAFETY: an opaque token handed back to the connector that made it, on the
// connector's own thread; never dereferenced here.
unsafe impl Send for UserReg {}

/// Where a connector's FIFO slots live (decides which backend runs a step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FifoMem {
    /// Host memory the connector owns, `[base, base + len)`, alive as long as the connector; the executor may page-lock it for a GPU (cuMemHostRegister) so kernels reach it.
    Host { base: usize, len: usize },
    /// Device memory of GPU `ordinal` (a P2P FIFO): only that GPU's kernels may touch its slots.
    Device { ordinal: usize },
}

/// The sending side of one connection.
///
/// Executor face: [`can_push`](Self::can_push) / [`next_slot`](Self::next_slot) /
/// [`push`](Self::push) fill FIFO steps; the `*_user` methods send a step
/// straight from registered user memory. Proxy face: [`progress`](Self::progress)
/// hands filled steps to the network and retires completed ones.
pub(crate) trait SendConnector: Send {
    /// Bytes one step (slot) holds.
    fn step_size(&self) -> usize;
    /// Whether the producer may fill the next FIFO step.
    fn can_push(&self) -> bool;
    /// Address of the slot of the next step (valid while `can_push()`).
    fn next_slot(&self) -> *mut u8;
    /// Marks the next step filled with `size` bytes.
    fn push(&mut self, size: usize);
    /// Where the executor writes the operation header (`coll::desc::OP_HDR_BYTES`)
    /// of the next step with the CPU: the start of [`next_slot`](Self::next_slot)
    /// (the payload follows it there), or, when the slots are device memory
    /// ([`FifoMem::Device`]), host memory of the connector beside the slot (the
    /// payload still starts `OP_HDR_BYTES` into the slot). Valid while `can_push()`.
    fn hdr_slot(&self) -> *mut u8 {
        self.next_slot()
    }
    /// Whether the producer may fill the step `k` places after the next one,
    /// while the `k` steps before it hold their slots unpushed (the executor's
    /// pending device steps, `coll::exec::Pending`): `can_push_at(0)` is
    /// [`can_push`](Self::can_push). Pushes still come in order, so once the
    /// first held step is pushed the others' offsets shift down by one; the
    /// connector must not reorder its free slots meanwhile (the proxy runs no
    /// [`progress`](Self::progress) on it while it has held steps). NCCL's
    /// `prims_simple.h` keeps up to `NCCL_STEPS` steps of a connection in
    /// flight the same way. The default answers only `k == 0` (a transport
    /// that cannot look ahead keeps one step at a time).
    fn can_push_at(&self, k: usize) -> bool {
        k == 0 && self.can_push()
    }
    /// Address of the slot of the step `k` after the next one (valid while
    /// `can_push_at(k)`); `slot_at(0)` is [`next_slot`](Self::next_slot).
    fn slot_at(&self, k: usize) -> *mut u8 {
        debug_assert_eq!(k, 0, "slot_at past the next step on a connector that cannot look ahead");
        self.next_slot()
    }
    /// [`hdr_slot`](Self::hdr_slot) of the step `k` after the next one (valid
    /// while `can_push_at(k)`).
    fn hdr_slot_at(&self, k: usize) -> *mut u8 {
        debug_assert_eq!(
            k, 0,
            "hdr_slot_at past the next step on a connector that cannot look ahead"
        );
        self.hdr_slot()
    }
    /// [`push`](Self::push) of a step the receiving end reduces with `red` (a
    /// CollNet connector reduces it in the network, so it needs the datatype and
    /// operation; other transports just push).
    fn push_reduce(&mut self, size: usize, red: &ferroccl_kernels::DevRedOp) {
        let _ = red;
        self.push(size);
    }
    /// Runs one CollNet `iallgather`/`ireducescatter` (a CollNet connector
    /// only): posts the call `call` builds ([`collnet::SgeCall`]) once the
    /// steps pushed before it are posted, then tests it; `Ok(true)` once it
    /// completed, `Ok(false)` while it waits. Called again with the same call
    /// until it completes (`call` runs once, when it is posted).
    ///
    /// Errors: a connector that is not CollNet's; the plugin's error.
    fn collnet_sge(&mut self, call: &dyn Fn() -> collnet::SgeCall) -> Result<bool, Error> {
        let _ = call;
        Err(Error::Internal(
            "a CollNet iallgather/ireducescatter step on a connector that is not CollNet's".into(),
        ))
    }
    /// Where the slots [`next_slot`](Self::next_slot) returns live (`None`:
    /// unknown; steps writing them stay on the host staging path).
    fn fifo_mem(&self) -> Option<FifoMem> {
        None
    }
    /// The registration covering `[ptr, ptr + len)` for the current operation, if any.
    fn user_reg(&self, ptr: *const u8, len: usize) -> Option<UserReg>;
    /// Whether a step sent from user memory may be queued.
    fn can_push_user(&self) -> bool;
    /// Queues a step of `size` bytes sent straight from registered user memory.
    fn push_user(&mut self, ptr: *const u8, size: usize, reg: UserReg);
    /// Whether a queued or in-flight step is sent from user memory overlapping
    /// `[ptr, ptr + len)` (which must then not be written yet).
    fn user_busy(&self, ptr: *const u8, len: usize) -> bool;
    /// Whether every pushed step has completed.
    fn idle(&self) -> bool;
    /// Proxy: posts filled steps and tests in-flight ones; whether anything moved.
    fn progress(&mut self) -> Result<bool, Error>;
    /// Whether [`progress`](Self::progress) matters only while the executor
    /// waits on this connector (no network to drive: a pushed step is with
    /// the peer already, and `progress` only waits for credits and watches the
    /// peer). The proxy then calls it only on passes where no step moved.
    fn passive(&self) -> bool {
        false
    }
    /// Registers user memory in `space` for the current operation (a refusal
    /// only means steps go through the FIFO). Device memory is registered only
    /// where GPUDirect RDMA is possible ([`gdr::decide`]).
    fn register_user(&mut self, ptr: *const u8, len: usize, space: ferroccl_kernels::MemorySpace);
    /// Drops the current operation's registrations (once idle).
    fn release_user(&mut self);
    /// Closes the connection (idempotent).
    fn close(&mut self);
    /// Profiles the next `nsteps` steps pushed to this connector under the
    /// ProxyOp event of `op` (NET connectors emit ProxyStep events, NCCL's
    /// `sendProxyProgress`); `false` (the default) when this transport has no
    /// network proxy and emits nothing.
    fn prof_attach(&mut self, op: crate::profiler::StepProf<'_>, nsteps: usize) -> bool {
        let _ = (op, nsteps);
        false
    }
    /// Whether [`Self::prof_attach`] would profile steps (a NET connector).
    fn prof_capable(&self) -> bool {
        false
    }
    /// Drops the profiling of steps not yet pushed (end of the work item).
    fn prof_detach(&mut self) {}
}

/// The receiving side of one connection.
///
/// Executor face: [`peek`](Self::peek) / [`pop`](Self::pop) consume steps in
/// order. Proxy face: [`expect`](Self::expect) announces the steps scheduled
/// work will consume (so receives are posted ahead), [`progress`](Self::progress)
/// posts and tests them.
pub(crate) trait RecvConnector: Send {
    /// The next step's data if it has arrived: `(address, size reported by the
    /// transport)`; valid until [`pop`](Self::pop).
    fn peek(&self) -> Option<(*mut u8, usize)>;
    /// The data of the step `k` places after the next one if it has arrived,
    /// while the `k` steps before it stay unpopped (held by the executor's
    /// pending device steps): `peek_at(0)` is [`peek`](Self::peek); valid
    /// until that step is popped (pops come in order, so offsets shift down by
    /// one with each). The default answers only `k == 0`.
    fn peek_at(&self, k: usize) -> Option<(*mut u8, usize)> {
        if k == 0 { self.peek() } else { None }
    }
    /// Releases the consumed step.
    fn pop(&mut self);
    /// Where the operation header of the step [`peek`](Self::peek) (or
    /// [`peek_at`](Self::peek_at)) returned at `data` is, for the CPU to read:
    /// `data` itself, or host memory beside a device slot
    /// ([`SendConnector::hdr_slot`]). Valid until that step is popped.
    fn hdr_of(&self, data: *mut u8) -> *const u8 {
        data
    }
    /// Where the FIFO slots [`peek`](Self::peek) returns live (`None`:
    /// unknown; steps reading them stay on the host staging path). Steps that
    /// landed in user memory ([`expect`](Self::expect)) are outside it.
    fn fifo_mem(&self) -> Option<FifoMem> {
        None
    }
    /// Announces one more step the scheduled work will consume: `Some((address,
    /// bytes))` to land it straight in registered user memory, `None` for a FIFO slot.
    fn expect(&mut self, target: Option<(*mut u8, usize)>);
    /// Whether [`expect`](Self::expect) does anything (a transport whose steps
    /// always land in its FIFO needs no announcements: the proxy then skips
    /// them for work it has run before).
    fn wants_expect(&self) -> bool {
        true
    }
    /// Proxy: posts receives and tests posted ones; whether anything moved.
    fn progress(&mut self) -> Result<bool, Error>;
    /// As [`SendConnector::passive`]: `progress` only waits for steps and
    /// watches the peer.
    fn passive(&self) -> bool {
        false
    }
    /// Registers user memory in `space` for the current operation (device
    /// memory only where GPUDirect RDMA is possible, [`gdr::decide`]).
    fn register_user(&mut self, ptr: *const u8, len: usize, space: ferroccl_kernels::MemorySpace);
    /// Drops the current operation's registrations (once every expected step was consumed).
    fn release_user(&mut self);
    /// Closes the connection (idempotent).
    fn close(&mut self);
    /// Profiles the next `nsteps` steps expected from this connector under the
    /// ProxyOp event of `op` (NET connectors emit ProxyStep events, NCCL's
    /// `recvProxyProgress`); `false` (the default) when this transport has no
    /// network proxy and emits nothing.
    fn prof_attach(&mut self, op: crate::profiler::StepProf<'_>, nsteps: usize) -> bool {
        let _ = (op, nsteps);
        false
    }
    /// Whether [`Self::prof_attach`] would profile steps (a NET connector).
    fn prof_capable(&self) -> bool {
        false
    }
    /// Drops the profiling of steps not yet posted (end of the work item).
    fn prof_detach(&mut self) {}
}

/// Every connector of a communicator, keyed by [`ConnKey`] and direction.
///
/// Each direction is a vector sorted by key (iterated in key order, as the
/// `BTreeMap` it replaces was): the executor looks a connector up several
/// times per step (`coll::exec::try_run`, `complete`), and a table holds a
/// few connectors per channel and peer, where a scan of contiguous keys
/// (binary search past [`LINEAR_LOOKUP_MAX`]) costs less than walking a
/// B-tree node (issue 35: about a tenth of the instructions of an 8-byte
/// AllReduce on 2 ranks went to these lookups). Connectors are only ever
/// added, never removed, so a key stays where it was inserted relative to
/// the others.
#[derive(Default)]
pub(crate) struct ConnTable {
    send: Vec<(ConnKey, Box<dyn SendConnector>)>,
    recv: Vec<(ConnKey, Box<dyn RecvConnector>)>,
    /// Whether any connector's FIFO is device memory ([`FifoMem::Device`]):
    /// steps on them must run as kernels, so the executor's host path checks
    /// this one flag before touching a slot with the CPU.
    device_fifos: bool,
}

impl ConnTable {
    /// Adds (or replaces) the send connector `key`.
    pub(crate) fn insert_send(&mut self, key: ConnKey, c: Box<dyn SendConnector>) {
        self.device_fifos |= matches!(c.fifo_mem(), Some(FifoMem::Device { .. }));
        insert_sorted(&mut self.send, key, c);
    }

    /// Adds (or replaces) the receive connector `key`.
    pub(crate) fn insert_recv(&mut self, key: ConnKey, c: Box<dyn RecvConnector>) {
        self.device_fifos |= matches!(c.fifo_mem(), Some(FifoMem::Device { .. }));
        insert_sorted(&mut self.recv, key, c);
    }

    /// Whether any connector inserted so far has its FIFO in device memory.
    pub(crate) fn has_device_fifos(&self) -> bool {
        self.device_fifos
    }

    /// Whether a send connector `key` exists.
    pub(crate) fn has_send(&self, key: &ConnKey) -> bool {
        find(&self.send, key).is_some()
    }

    /// Whether a receive connector `key` exists.
    pub(crate) fn has_recv(&self, key: &ConnKey) -> bool {
        find(&self.recv, key).is_some()
    }

    /// The send connector `key`.
    #[inline]
    pub(crate) fn send(&mut self, key: &ConnKey) -> Option<&mut (dyn SendConnector + 'static)> {
        let i = find(&self.send, key)?;
        Some(&mut *self.send[i].1)
    }

    /// The receive connector `key`.
    #[inline]
    pub(crate) fn recv(&mut self, key: &ConnKey) -> Option<&mut (dyn RecvConnector + 'static)> {
        let i = find(&self.recv, key)?;
        Some(&mut *self.recv[i].1)
    }

    /// Every send connector.
    pub(crate) fn sends_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn SendConnector>> {
        self.send.iter_mut().map(|(_, c)| c)
    }

    /// Every receive connector.
    pub(crate) fn recvs_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn RecvConnector>> {
        self.recv.iter_mut().map(|(_, c)| c)
    }

    /// Closes every connector.
    pub(crate) fn close_all(&mut self) {
        for (_, c) in self.send.iter_mut() {
            c.close();
        }
        for (_, c) in self.recv.iter_mut() {
            c.close();
        }
    }
}

/// Tables up to this many connectors per direction are searched front to
/// back ([`find`]); larger ones by binary search.
const LINEAR_LOOKUP_MAX: usize = 16;

/// The index of `key` in `table` (sorted by key, keys unique).
#[inline]
fn find<C: ?Sized>(table: &[(ConnKey, Box<C>)], key: &ConnKey) -> Option<usize> {
    if table.len() <= LINEAR_LOOKUP_MAX {
        table.iter().position(|(k, _)| k == key)
    } else {
        table.binary_search_by(|(k, _)| k.cmp(key)).ok()
    }
}

/// Inserts `c` under `key` into `table` (sorted by key), replacing the
/// connector already there under that key, as `BTreeMap::insert` did.
fn insert_sorted<C: ?Sized>(table: &mut Vec<(ConnKey, Box<C>)>, key: ConnKey, c: Box<C>) {
    match table.binary_search_by(|(k, _)| k.cmp(&key)) {
        Ok(i) => table[i].1 = c,
        Err(i) => table.insert(i, (key, c)),
    }
}
