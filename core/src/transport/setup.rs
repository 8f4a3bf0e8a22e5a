//! Connection establishment (NCCL's `src/transport.cc`: `selectTransport`,
//! `ncclTransportP2pSetup`): each connection goes to the first transport whose
//! `canConnect` accepts the pair; its `setup` produces connect information that
//! travels to the peer over the bootstrap, one message per peer holding every
//! connection with it; then every connection's `connect` is retried with the
//! peer's information until all are up, all polled together so that no order
//! between ranks can deadlock, bounded by a deadline and the abort flag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    CONN_COLL, CONNECT_INFO_MAX, ConnKey, ConnRequest, ConnTable, Connected, Dir, PendingConn, Transport, TransportPeer,
};
use crate::error::Error;
use crate::graph::Channel;

/// The out-of-band channel connection setup needs (the bootstrap network).
pub(crate) trait Oob: Send + Sync {
    /// Sends `data` to `peer` under `tag` (must not wait for the peer to receive).
    fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<(), Error>;
    /// Receives the message `peer` sent under `tag` (bounded wait).
    fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>, Error>;
}

/// One connection's entry in the message a rank sends a peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireEntry {
    channel: usize,
    conn: usize,
    /// The sender's side of the connection.
    dir: Dir,
    /// The transport the sender chose (its name).
    transport: String,
    /// The transport's connect information.
    info: Vec<u8>,
}

/// Largest per-peer setup message accepted.
const MAX_WIRE_BYTES: usize = 1 << 20;

/// Everything connection setup needs, shared by init (collective connections)
/// and the proxy (point-to-point connections made on first use).
pub(crate) struct TransportSetup {
    /// Transports in selection order.
    pub transports: Vec<Arc<dyn Transport>>,
    /// Every rank's transport facts, `peers[r]` for rank `r`.
    pub peers: Vec<TransportPeer>,
    /// This rank.
    pub rank: usize,
    /// The bootstrap.
    pub oob: Arc<dyn Oob>,
    /// Bound on a whole setup.
    pub timeout: Duration,
    /// The communicator's abort flag.
    pub abort: Arc<AtomicBool>,
    /// Connections made so far per transport description (for summaries).
    usage: Mutex<BTreeMap<String, usize>>,
}

impl TransportSetup {
    /// A setup over `transports` (in selection order) for `rank` among `peers`.
    pub(crate) fn new(
        transports: Vec<Arc<dyn Transport>>,
        peers: Vec<TransportPeer>,
        rank: usize,
        oob: Arc<dyn Oob>,
        timeout: Duration,
        abort: Arc<AtomicBool>,
    ) -> TransportSetup {
        TransportSetup {
            transports,
            peers,
            rank,
            oob,
            timeout,
            abort,
            usage: Mutex::new(BTreeMap::new()),
        }
    }

    /// The first transport that can join this rank and `peer` (NCCL's
    /// `selectTransport`).
    ///
    /// Errors: [`Error::InvalidUsage`] "No transport found" (NCCL: WARN and
    /// `ncclSystemError`) naming both ranks and the switches that ruled them out.
    pub(crate) fn select(&self, peer: usize) -> Result<&Arc<dyn Transport>, Error> {
        let (me, p) = (&self.peers[self.rank], &self.peers[peer]);
        self.transports.iter().find(|t| t.can_connect(me, p)).ok_or_else(|| {
            Error::InvalidUsage(format!(
                "No transport found for rank {} -> rank {peer}: same host {}, NCCL_SHM_DISABLE {}/{}, \
                 NCCL_NET_DISABLE_INTRA {}/{} (this rank/peer)",
                self.rank,
                me.host_hash == p.host_hash,
                u8::from(me.params.shm_disable),
                u8::from(p.params.shm_disable),
                u8::from(me.params.net_disable_intra),
                u8::from(p.params.net_disable_intra),
            ))
        })
    }

    /// Connections made so far, per transport description (`SHM/Simple`,
    /// `NET/Socket`), counting both directions.
    pub(crate) fn usage(&self) -> Vec<(String, usize)> {
        self.usage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Sets up the connections `reqs` (no two with the same key and direction;
    /// none with this rank itself) and returns their connectors in the order given.
    /// `tags[i]` is the bootstrap tag of `reqs[i]`'s setup message: this rank sends
    /// each peer one message per tag, holding its connections with that peer under
    /// that tag, then reads the peer's message with the same tag, whose entries
    /// must be the opposite sides. Every peer named must set up those opposite
    /// sides under the same tags (collectively, as NCCL's `ncclTransportP2pSetup`).
    ///
    /// Errors: "No transport found"; transport setup/connect failures; bootstrap
    /// failures; [`Error::Remote`] when a peer's message is malformed or does not
    /// match this rank's connections (e.g. mismatched send/receive pairs);
    /// [`Error::Timeout`] naming what was still pending after the communicator's
    /// timeout; [`Error::Aborted`] when the abort flag is raised. Nothing set up so
    /// far outlives an error.
    pub(crate) fn connect(&self, reqs: &[ConnRequest], tags: &[u32]) -> Result<Vec<Connected>, Error> {
        debug_assert_eq!(reqs.len(), tags.len());
        let deadline = Instant::now() + self.timeout;
        // 1. Select a transport and run its setup for every connection.
        let mut pending: Vec<(Box<dyn PendingConn>, &'static str, String)> = Vec::with_capacity(reqs.len());
        let mut infos: Vec<Vec<u8>> = Vec::with_capacity(reqs.len());
        for r in reqs {
            let peer = r.key.peer;
            if peer == self.rank || peer >= self.peers.len() {
                return Err(Error::Internal(format!(
                    "connection request to rank {peer} on rank {}",
                    self.rank
                )));
            }
            let t = self.select(peer)?;
            let (p, info) = t.setup(r, &self.peers[self.rank], &self.peers[peer])?;
            if info.len() > CONNECT_INFO_MAX {
                return Err(Error::Internal(format!(
                    "{} connect information of {} bytes (at most {CONNECT_INFO_MAX})",
                    t.name(),
                    info.len()
                )));
            }
            pending.push((p, t.name(), t.describe()));
            infos.push(info);
        }
        // 2. One message per peer and tag with every connection this rank has
        //    with that peer under that tag; all sent before any is awaited.
        let mut by_peer: BTreeMap<(usize, u32), Vec<usize>> = BTreeMap::new();
        for (i, r) in reqs.iter().enumerate() {
            by_peer.entry((r.key.peer, tags[i])).or_default().push(i);
        }
        for (&(peer, tag), idx) in &by_peer {
            let entries: Vec<WireEntry> = idx
                .iter()
                .map(|&i| WireEntry {
                    channel: reqs[i].key.channel,
                    conn: reqs[i].key.conn,
                    dir: reqs[i].dir,
                    transport: pending[i].1.to_string(),
                    info: infos[i].clone(),
                })
                .collect();
            let msg = serde_json::to_vec(&entries).expect("setup entries serialize");
            self.oob.send(peer, tag, &msg)?;
        }
        let mut peer_info: Vec<Vec<u8>> = vec![Vec::new(); reqs.len()];
        for (&(peer, tag), idx) in &by_peer {
            let msg = self.oob.recv(peer, tag)?;
            let entries = decode(peer, &msg)?;
            match_entries(peer, reqs, idx, &pending, entries, &mut peer_info)?;
        }
        // 3. Connect everything, polled together.
        let mut done: Vec<Option<Connected>> = (0..reqs.len()).map(|_| None).collect();
        let mut spins = 0u32;
        loop {
            let mut left = Vec::new();
            for (i, (p, _, _)) in pending.iter_mut().enumerate() {
                if done[i].is_some() {
                    continue;
                }
                match p.connect(&peer_info[i])? {
                    Some(c) => done[i] = Some(c),
                    None => left.push(p.waiting_for()),
                }
            }
            if left.is_empty() {
                break;
            }
            if self.abort.load(Ordering::Relaxed) {
                return Err(Error::Aborted(format!("while waiting for {}", left.join(", "))));
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "connection setup on rank {} still waiting after {:?} for {}",
                    self.rank,
                    self.timeout,
                    left.join(", ")
                )));
            }
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let mut usage = self.usage.lock().unwrap_or_else(|e| e.into_inner());
        for (p, _, d) in &pending {
            *usage.entry(p.describe().unwrap_or_else(|| d.clone())).or_default() += 1;
        }
        Ok(done.into_iter().map(|c| c.expect("connected")).collect())
    }
}

/// Decodes a peer's setup message. Errors: [`Error::Remote`] naming the peer.
fn decode(peer: usize, msg: &[u8]) -> Result<Vec<WireEntry>, Error> {
    if msg.len() > MAX_WIRE_BYTES {
        return Err(Error::Remote(format!(
            "rank {peer} sent a {}-byte connection setup message (at most {MAX_WIRE_BYTES})",
            msg.len()
        )));
    }
    serde_json::from_slice(msg)
        .map_err(|e| Error::Remote(format!("rank {peer} sent a malformed connection setup message: {e}")))
}

/// Pairs each of this rank's connections with `peer` (`idx` into `reqs`) with
/// the peer's entry for the opposite side, filling `peer_info`.
fn match_entries(
    peer: usize,
    reqs: &[ConnRequest],
    idx: &[usize],
    pending: &[(Box<dyn PendingConn>, &'static str, String)],
    mut entries: Vec<WireEntry>,
    peer_info: &mut [Vec<u8>],
) -> Result<(), Error> {
    let side = |d: Dir| match d {
        Dir::Send => "send",
        Dir::Recv => "receive",
    };
    for &i in idx {
        let r = &reqs[i];
        let want = r.dir.opposite();
        let Some(pos) = entries
            .iter()
            .position(|e| e.channel == r.key.channel && e.conn == r.key.conn && e.dir == want)
        else {
            return Err(Error::Remote(format!(
                "rank {peer} set up no {} connection for this rank's {} on channel {} (connection index {}): \
                 do both ranks issue matching operations?",
                side(want),
                side(r.dir),
                r.key.channel,
                r.key.conn
            )));
        };
        let e = entries.swap_remove(pos);
        if e.transport != pending[i].1 {
            return Err(Error::Remote(format!(
                "rank {peer} chose transport {} for channel {} (connection index {}) where this rank chose {}",
                e.transport, r.key.channel, r.key.conn, pending[i].1
            )));
        }
        if e.info.len() > CONNECT_INFO_MAX {
            return Err(Error::Remote(format!(
                "rank {peer} sent {} bytes of connect information (at most {CONNECT_INFO_MAX})",
                e.info.len()
            )));
        }
        peer_info[i] = e.info;
    }
    if let Some(e) = entries.first() {
        return Err(Error::Remote(format!(
            "rank {peer} set up a {} connection on channel {} (connection index {}) that this rank has no {} for: \
             do both ranks issue matching operations?",
            side(e.dir),
            e.channel,
            e.conn,
            side(e.dir.opposite())
        )));
    }
    Ok(())
}

/// Bootstrap tag of the collective connections' setup messages (every rank
/// sets those up at the same points: init, and the first operation that needs a
/// pattern's peers).
const TAG_COLL_SETUP: u32 = 0x5249_4e00;
/// Bootstrap tags of point-to-point setup messages: one per direction between
/// a pair (the lower rank sending, or the higher), so each direction is set up
/// on its own whenever each side first needs it.
const TAG_P2P_SETUP: u32 = 0x5032_5000;

/// Where a communicator's connections go: its channels (for each channel's NIC),
/// the plugin's device count, the device for point-to-point connections, and
/// the FIFO step sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnPlan<'a> {
    /// This rank.
    pub rank: usize,
    /// This rank's channels (ring order and the ring connections' NIC).
    pub channels: &'a [Channel],
    /// NIC of this rank's tree connections per channel (`None`: no NIC of its own).
    pub tree_devs: &'a [Option<usize>],
    /// Devices the plugin reports.
    pub ndev: usize,
    /// Device of point-to-point connections to each peer.
    pub p2p_devs: &'a [usize],
    /// Bytes per FIFO step of collective connections.
    pub coll_step: usize,
    /// Bytes per FIFO step of point-to-point connections.
    pub p2p_step: usize,
}

impl ConnPlan<'_> {
    /// The request and setup-message tag of connection `key` in direction `dir`:
    /// a ring neighbour's uses the channel's ring NIC ([`Channel::net_dev`]),
    /// another peer (a tree neighbour) the channel's tree NIC; a channel
    /// without a NIC of its own uses device `channel % ndev`.
    fn request(&self, key: ConnKey, dir: Dir) -> (ConnRequest, u32) {
        if key.conn == CONN_COLL || key.conn == super::CONN_COLL_UP {
            let ch = self.channels.get(key.channel);
            let ring_peer = ch.is_some_and(|c| {
                c.ring.index(self.rank).is_some()
                    && (c.ring_next(self.rank) == key.peer || c.ring_prev(self.rank) == key.peer)
            });
            let nic = if ring_peer {
                ch.and_then(|c| c.net_dev)
            } else {
                self.tree_devs.get(key.channel).copied().flatten()
            };
            let net_dev = nic.unwrap_or(key.channel % self.ndev.max(1));
            let req = ConnRequest {
                key,
                dir,
                step_size: self.coll_step,
                net_dev,
            };
            (req, TAG_COLL_SETUP)
        } else {
            let sender_is_lower = match dir {
                Dir::Send => self.rank < key.peer,
                Dir::Recv => key.peer < self.rank,
            };
            let req = ConnRequest {
                key,
                dir,
                step_size: self.p2p_step,
                net_dev: self.p2p_devs.get(key.peer).copied().unwrap_or(0),
            };
            (req, TAG_P2P_SETUP + u32::from(!sender_is_lower))
        }
    }
}

/// Sets up the send connectors `sends` and receive connectors `recvs` (none may
/// exist in `table` yet) through the transports and adds them to `table`.
/// Collective connections are set up together (every rank reaches the same
/// points); each point-to-point direction under its own tag.
///
/// Errors: those of [`TransportSetup::connect`]; nothing set up by this call
/// outlives an error.
pub(crate) fn connect_keys(
    setup: &TransportSetup,
    plan: &ConnPlan<'_>,
    sends: &[ConnKey],
    recvs: &[ConnKey],
    table: &mut ConnTable,
) -> Result<(), Error> {
    let (reqs, tags): (Vec<ConnRequest>, Vec<u32>) = sends
        .iter()
        .map(|&k| plan.request(k, Dir::Send))
        .chain(recvs.iter().map(|&k| plan.request(k, Dir::Recv)))
        .unzip();
    if reqs.is_empty() {
        return Ok(());
    }
    for (r, c) in reqs.iter().zip(setup.connect(&reqs, &tags)?) {
        match c {
            Connected::Send(c) => table.insert_send(r.key, c),
            Connected::Recv(c) => table.insert_recv(r.key, c),
        }
    }
    Ok(())
}

/// The ring connections of every channel (connection index [`CONN_COLL`]):
/// a send connector to the ring successor and a receive connector from the
/// predecessor, one per (channel, peer). Trees and point-to-point peers are
/// connected when an operation first needs them (as NCCL 2.30 connects
/// algorithms at run time, `NCCL_RUNTIME_CONNECT`).
pub(crate) fn ring_keys(channels: &[Channel], rank: usize) -> (Vec<ConnKey>, Vec<ConnKey>) {
    let mut sends: Vec<ConnKey> = Vec::new();
    let mut recvs: Vec<ConnKey> = Vec::new();
    for ch in channels.iter().filter(|c| c.ring.ranks.len() > 1) {
        let key = |peer| ConnKey {
            channel: ch.id,
            peer,
            conn: CONN_COLL,
        };
        let (next, prev) = (key(ch.ring_next(rank)), key(ch.ring_prev(rank)));
        if !sends.contains(&next) {
            sends.push(next);
        }
        if !recvs.contains(&prev) {
            recvs.push(prev);
        }
    }
    (sends, recvs)
}
